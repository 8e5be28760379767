/*  Save tracker (kvt_savetrack): frontier over forwarded chunks, leases
    through one path, failed saves and their re-emit, finished requests'
    tails, the save floor (rules S3–S5), driven directly against a fake
    block and slot pool that counts references. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/scheduler/kvt_savetrack.h"

#define BS 16
#define CS 64 //  4 blocks per chunk
#define NB 256
#define NS 16

//  The fake pool: references per block and per slot.
typedef struct {
    int blocks[NB]; //  references held by leases
    int slots[NS];  //  references held by leases
    int acquires;   //  acquire calls
    int releases;   //  release calls
    bool negative;  //  a release dropped a count below zero
} s_pool_t;

static void s_acq(void *arg, const uint32_t *b, uint32_t n, int32_t slot)
{
    s_pool_t *p = arg;
    p->acquires++;
    for (uint32_t i = 0; i < n; i++)
        p->blocks[b[i]]++;
    if (slot >= 0)
        p->slots[slot]++;
}

static void s_rel(void *arg, const uint32_t *b, uint32_t n, int32_t slot)
{
    s_pool_t *p = arg;
    p->releases++;
    for (uint32_t i = 0; i < n; i++)
        p->negative |= --p->blocks[b[i]] < 0;
    if (slot >= 0)
        p->negative |= --p->slots[slot] < 0;
}

static int s_refs(const s_pool_t *p)
{
    int n = 0;
    for (int i = 0; i < NB; i++)
        n += p->blocks[i];
    for (int i = 0; i < NS; i++)
        n += p->slots[i];
    return n;
}

static kvt_savetrack_t *s_new(s_pool_t *p, uint32_t retries)
{
    memset(p, 0, sizeof(*p));
    kvt_savetrack_cfg_t cfg = {.chunk_size = CS,
                               .block_size = BS,
                               .retries = retries,
                               .acquire = s_acq,
                               .release = s_rel,
                               .arg = p};
    kvt_savetrack_t *t = kvt_savetrack_new(&cfg);
    cr_assert_not_null(t);
    return t;
}

static void s_check(const kvt_savetrack_t *t)
{
    char err[256] = "";
    cr_assert_eq(kvt_savetrack_check(t, true, err, sizeof err), 0, "%s", err);
}

static kvt_hash_t K(uint64_t x)
{
    kvt_hash_t h = {x * 11 + 3, x};
    return h;
}

static kvt_opid_t OP(uint64_t req, uint32_t gen)
{
    kvt_opid_t op = {req, gen};
    return op;
}

//  Block ids of chunk c of a request whose table is base, base+1, ...
static const uint32_t *s_chunk(uint32_t *table, uint32_t c)
{
    return table + c * (CS / BS);
}

static kvt_savetrack_stats_t s_stats(const kvt_savetrack_t *t)
{
    kvt_savetrack_stats_t st;
    kvt_savetrack_stats(t, &st);
    return st;
}

Test(savetrack, new_refuses_a_chunk_off_the_block_grid)
{
    s_pool_t p;
    kvt_savetrack_cfg_t cfg = {
        .chunk_size = 40, .block_size = 16, .acquire = s_acq, .release = s_rel, .arg = &p};
    cr_assert_null(kvt_savetrack_new(&cfg));
    cfg.chunk_size = 64;
    cfg.release = NULL;
    cr_assert_null(kvt_savetrack_new(&cfg));
}

Test(savetrack, only_forwarded_chunks_are_saved)
{
    s_pool_t p;
    kvt_savetrack_t *t = s_new(&p, 1);
    uint32_t table[32];
    for (uint32_t i = 0; i < 32; i++)
        table[i] = i;
    cr_assert_eq(kvt_savetrack_admit(t, OP(1, 1), 0), 0);
    uint32_t s, e, a;
    cr_assert(!kvt_savetrack_next(t, 1, &s, &e, &a), "nothing forwarded yet");
    kvt_savetrack_forwarded(t, OP(1, 1), 150);
    cr_assert(kvt_savetrack_next(t, 1, &s, &e, &a));
    cr_assert_eq(s, 0);
    cr_assert_eq(e, 128, "a partial chunk is not saved");
    cr_assert_eq(a, 0);
    cr_assert_eq(kvt_savetrack_build(t, 1, K(0), s_chunk(table, 0), -1, false), 0);
    cr_assert_eq(kvt_savetrack_skip(t, 1), 0);
    cr_assert_eq(kvt_savetrack_build(t, 1, K(2), s_chunk(table, 2), -1, false), -1,
                 "the third chunk was not forwarded");
    kvt_savetrack_forwarded(t, OP(1, 1), 192);
    cr_assert(kvt_savetrack_next(t, 1, &s, &e, &a));
    cr_assert_eq(s, 128);
    cr_assert_eq(e, 192);
    cr_assert_eq(kvt_savetrack_build(t, 1, K(0), s_chunk(table, 2), -1, false), -1,
                 "one save in flight per chunk key");
    cr_assert(kvt_savetrack_key_inflight(t, K(0)));
    s_check(t);
    kvt_savetrack_destroy(&t);
    cr_assert_null(t);
}

// ---------------------------------------------------------------- S3 ----

Test(savetrack, rule_S3_failed_save_keeps_the_frontier_and_is_reemitted_after_quiescence)
{
    s_pool_t p;
    kvt_savetrack_t *t = s_new(&p, 2);
    uint32_t table[16];
    for (uint32_t i = 0; i < 16; i++)
        table[i] = i;
    kvt_opid_t op = OP(1, 1);
    kvt_savetrack_admit(t, op, 0);
    kvt_savetrack_forwarded(t, op, 192);
    for (uint32_t c = 0; c < 3; c++)
        cr_assert_eq(kvt_savetrack_build(t, 1, K(c), s_chunk(table, c), -1, false), 0);
    uint32_t f, s, e, a;
    cr_assert_eq(kvt_savetrack_stored(t, op, K(1), 0, false), 0);
    cr_assert(kvt_savetrack_frontier(t, 1, &f));
    cr_assert_eq(f, 64, "the frontier goes back to the failed chunk");
    cr_assert(!kvt_savetrack_next(t, 1, &s, &e, &a), "chunks 0 and 2 are still in flight");
    cr_assert_eq(kvt_savetrack_stored(t, op, K(0), 0, true), 0);
    cr_assert(!kvt_savetrack_next(t, 1, &s, &e, &a), "chunk 2 is still in flight");
    cr_assert_eq(kvt_savetrack_stored(t, op, K(2), 0, true), 0);
    cr_assert(kvt_savetrack_next(t, 1, &s, &e, &a), "quiescent: re-emitted");
    cr_assert_eq(s, 64);
    cr_assert_eq(e, 192);
    cr_assert_eq(a, 1, "a new attempt: a fresh report key");
    cr_assert_eq(kvt_savetrack_build(t, 1, K(1), s_chunk(table, 1), -1, false), 0);
    cr_assert_eq(kvt_savetrack_stored(t, op, K(1), 0, true), -1, "the old attempt's key");
    cr_assert_eq(kvt_savetrack_stored(t, op, K(1), 1, true), 0);
    kvt_savetrack_stats_t st = s_stats(t);
    cr_assert_eq(st.saves_reemitted, 1);
    cr_assert_eq(st.saves_failed, 1);
    cr_assert_eq(st.stale_reports, 1);
    s_check(t);
    kvt_savetrack_destroy(&t);
}

Test(savetrack, rule_S3_a_failure_after_the_request_retired_is_dropped)
{
    s_pool_t p;
    kvt_savetrack_t *t = s_new(&p, 2);
    uint32_t table[16];
    for (uint32_t i = 0; i < 16; i++)
        table[i] = i;
    kvt_opid_t op = OP(1, 1);
    kvt_savetrack_admit(t, op, 0);
    kvt_savetrack_forwarded(t, op, 64);
    cr_assert_eq(kvt_savetrack_build(t, 1, K(0), s_chunk(table, 0), 3, false), 0);
    cr_assert_eq(kvt_savetrack_finish(t, 1, table, 16, 3), 0);
    cr_assert_eq(kvt_savetrack_stored(t, op, K(0), 0, false), 0);
    uint32_t f;
    cr_assert(!kvt_savetrack_frontier(t, 1, &f), "the retired request's record is gone");
    kvt_savetrack_stats_t st = s_stats(t);
    cr_assert_eq(st.saves_dropped, 1);
    cr_assert_eq(st.saves_reemitted, 0);
    cr_assert_eq(st.records, 0);
    cr_assert_eq(s_refs(&p), 0);
    //  A failure waiting for quiescence is dropped when its request finishes.
    kvt_savetrack_admit(t, OP(2, 1), 0);
    kvt_savetrack_forwarded(t, OP(2, 1), 128);
    cr_assert_eq(kvt_savetrack_build(t, 2, K(10), s_chunk(table, 0), -1, false), 0);
    cr_assert_eq(kvt_savetrack_build(t, 2, K(11), s_chunk(table, 1), -1, false), 0);
    cr_assert_eq(kvt_savetrack_stored(t, OP(2, 1), K(10), 0, false), 0);
    cr_assert_eq(kvt_savetrack_finish(t, 2, table, 16, -1), 0);
    cr_assert_eq(kvt_savetrack_stored(t, OP(2, 1), K(11), 0, true), 0);
    st = s_stats(t);
    cr_assert_eq(st.saves_dropped, 2);
    cr_assert_eq(st.saves_reemitted, 0);
    cr_assert_eq(st.records, 0);
    cr_assert_eq(st.tails_leased, 0, "the re-emit is dropped, not kept as a tail");
    s_check(t);
    kvt_savetrack_destroy(&t);
}

Test(savetrack, rule_S3_with_no_reemit_left_the_request_saves_nothing_more)
{
    s_pool_t p;
    kvt_savetrack_t *t = s_new(&p, 0);
    uint32_t table[16];
    for (uint32_t i = 0; i < 16; i++)
        table[i] = i;
    kvt_opid_t op = OP(1, 1);
    kvt_savetrack_admit(t, op, 0);
    kvt_savetrack_forwarded(t, op, 64);
    cr_assert_eq(kvt_savetrack_build(t, 1, K(0), s_chunk(table, 0), -1, false), 0);
    cr_assert_eq(kvt_savetrack_stored(t, op, K(0), 0, false), 0);
    kvt_savetrack_forwarded(t, op, 256);
    uint32_t s, e, a;
    cr_assert(!kvt_savetrack_next(t, 1, &s, &e, &a), "chunks above a gap are never saved");
    kvt_savetrack_stats_t st = s_stats(t);
    cr_assert_eq(st.saves_stopped, 1);
    cr_assert_eq(st.saves_reemitted, 0);
    kvt_savetrack_destroy(&t);
}

Test(savetrack, rule_S3_a_failure_of_an_earlier_admission_moves_nothing)
{
    s_pool_t p;
    kvt_savetrack_t *t = s_new(&p, 2);
    uint32_t table[16];
    for (uint32_t i = 0; i < 16; i++)
        table[i] = i;
    kvt_savetrack_admit(t, OP(1, 1), 0);
    kvt_savetrack_forwarded(t, OP(1, 1), 64);
    cr_assert_eq(kvt_savetrack_build(t, 1, K(0), s_chunk(table, 0), -1, false), 0);
    //  Preempted and re-admitted with the tier already holding [0, 128).
    kvt_savetrack_abort(t, 1);
    cr_assert_eq(kvt_savetrack_admit(t, OP(1, 2), 128), 0);
    cr_assert_eq(kvt_savetrack_admit(t, OP(1, 1), 0), -1, "an older admission");
    cr_assert_eq(kvt_savetrack_stored(t, OP(1, 1), K(0), 0, false), 0);
    uint32_t f;
    cr_assert(kvt_savetrack_frontier(t, 1, &f));
    cr_assert_eq(f, 128);
    kvt_savetrack_stats_t st = s_stats(t);
    cr_assert_eq(st.saves_dropped, 1);
    s_check(t);
    kvt_savetrack_destroy(&t);
}

// ---------------------------------------------------------------- S4 ----

Test(savetrack, rule_S4_leases_are_released_once_through_one_path)
{
    s_pool_t p;
    kvt_savetrack_t *t = s_new(&p, 1);
    uint32_t table[16];
    for (uint32_t i = 0; i < 16; i++)
        table[i] = i;
    kvt_opid_t op = OP(1, 1);
    kvt_savetrack_admit(t, op, 0);
    kvt_savetrack_forwarded(t, op, 128);
    cr_assert_eq(kvt_savetrack_build(t, 1, K(0), s_chunk(table, 0), 2, false), 0);
    cr_assert_eq(p.blocks[0], 1);
    cr_assert_eq(p.blocks[3], 1);
    cr_assert_eq(p.slots[2], 1, "the slot its image is read from is leased too");
    //  Every rank reported source_safe: the lease goes, the save stays out.
    cr_assert_eq(kvt_savetrack_sources_safe(t, op, K(0), 0), 0);
    cr_assert_eq(s_refs(&p), 0);
    cr_assert(kvt_savetrack_key_inflight(t, K(0)));
    cr_assert_eq(kvt_savetrack_sources_safe(t, op, K(0), 0), -1, "a duplicate");
    cr_assert_eq(kvt_savetrack_stored(t, op, K(0), 0, true), 0);
    cr_assert_eq(p.releases, 1, "the store verdict does not release it again");
    //  A store verdict with no source_safe releases the lease itself.
    cr_assert_eq(kvt_savetrack_build(t, 1, K(1), s_chunk(table, 1), 2, false), 0);
    cr_assert_eq(kvt_savetrack_stored(t, op, K(1), 0, false), 0);
    cr_assert_eq(p.releases, 2);
    cr_assert_eq(s_refs(&p), 0);
    cr_assert(!p.negative);
    kvt_savetrack_stats_t st = s_stats(t);
    cr_assert_eq(st.leases_taken, 2);
    cr_assert_eq(st.leases_released, 2);
    cr_assert_eq(st.leases_outstanding, 0);
    s_check(t);
    kvt_savetrack_destroy(&t);
}

Test(savetrack, rule_S4_source_safe_releases_every_save_of_its_spec)
{
    s_pool_t p;
    kvt_savetrack_t *t = s_new(&p, 1);
    uint32_t table[16];
    for (uint32_t i = 0; i < 16; i++)
        table[i] = i;
    kvt_opid_t op = OP(1, 1);
    kvt_savetrack_admit(t, op, 0);
    kvt_savetrack_forwarded(t, op, 4 * CS);
    //  One SaveSpec of chunks 0..2 (named by chunk 2), chunk 3 on its own.
    cr_assert_eq(kvt_savetrack_build(t, 1, K(0), s_chunk(table, 0), -1, false), 0);
    cr_assert_eq(kvt_savetrack_build(t, 1, K(1), s_chunk(table, 1), -1, true), 0);
    cr_assert_eq(kvt_savetrack_build(t, 1, K(2), s_chunk(table, 2), 5, true), 0);
    cr_assert_eq(kvt_savetrack_build(t, 1, K(3), s_chunk(table, 3), -1, false), 0);
    //  The middle chunk's store verdict comes first: the spec holds together.
    cr_assert_eq(kvt_savetrack_stored(t, op, K(1), 0, true), 0);
    cr_assert_eq(p.blocks[4], 0);
    cr_assert_eq(kvt_savetrack_sources_safe(t, op, K(2), 0), 0);
    for (uint32_t b = 0; b < 12; b++)
        cr_assert_eq(p.blocks[b], 0, "block %u of the spec still leased", b);
    cr_assert_eq(p.slots[5], 0);
    cr_assert_eq(p.blocks[12], 1, "chunk 3 is another spec");
    cr_assert_eq(kvt_savetrack_sources_safe(t, op, K(0), 0), -1, "already released: stale");
    int32_t slot = -2;
    cr_assert(kvt_savetrack_save_slot(t, op, K(2), 0, &slot));
    cr_assert_eq(slot, 5, "the slot it was built with, after its lease went");
    cr_assert_eq(kvt_savetrack_stored(t, op, K(0), 0, true), 0);
    cr_assert_eq(kvt_savetrack_stored(t, op, K(2), 0, true), 0);
    cr_assert_eq(kvt_savetrack_stored(t, op, K(3), 0, true), 0);
    cr_assert_not(kvt_savetrack_save_slot(t, op, K(2), 0, NULL));
    cr_assert_eq(s_refs(&p), 0);
    cr_assert(!p.negative);
    kvt_savetrack_stats_t st = s_stats(t);
    cr_assert_eq(st.leases_released, 4);
    cr_assert_eq(st.stale_reports, 1);
    s_check(t);
    kvt_savetrack_destroy(&t);
}

Test(savetrack, rule_S4_finished_requests_unbuilt_save_is_retired_and_its_lease_released)
{
    s_pool_t p;
    kvt_savetrack_t *t = s_new(&p, 1);
    uint32_t table[16];
    for (uint32_t i = 0; i < 16; i++)
        table[i] = 100 + i;
    kvt_opid_t op = OP(1, 1);
    kvt_savetrack_admit(t, op, 0);
    kvt_savetrack_forwarded(t, op, 140);
    cr_assert_eq(kvt_savetrack_finish(t, 1, table, 9, 4), 0);
    //  The tail [0, 128) keeps its blocks and the slot: the request's own
    //  references may go.
    for (uint32_t i = 0; i < 8; i++)
        cr_assert_eq(p.blocks[100 + i], 1);
    cr_assert_eq(p.blocks[108], 0, "the partial chunk is never saved");
    cr_assert_eq(p.slots[4], 1);
    //  The plan builds none of it: end of plan retires it.
    cr_assert_eq(kvt_savetrack_end_plan(t), 1);
    cr_assert_eq(s_refs(&p), 0);
    cr_assert(!p.negative);
    uint32_t f;
    cr_assert(!kvt_savetrack_frontier(t, 1, &f));
    kvt_savetrack_stats_t st = s_stats(t);
    cr_assert_eq(st.tails_leased, 1);
    cr_assert_eq(st.tails_retired, 1);
    cr_assert_eq(st.chunks_retired, 2);
    cr_assert_eq(st.leases_outstanding, 0);
    cr_assert_eq(st.records, 0);
    cr_assert_eq(kvt_savetrack_end_plan(t), 0);
    s_check(t);
    kvt_savetrack_destroy(&t);
}

Test(savetrack, rule_S4_a_finished_tail_the_next_plan_builds_hands_its_lease_to_the_saves)
{
    s_pool_t p;
    kvt_savetrack_t *t = s_new(&p, 1);
    uint32_t table[16];
    for (uint32_t i = 0; i < 16; i++)
        table[i] = i;
    kvt_opid_t op = OP(1, 1);
    kvt_savetrack_admit(t, op, 0);
    kvt_savetrack_forwarded(t, op, 128);
    cr_assert_eq(kvt_savetrack_build(t, 1, K(0), s_chunk(table, 0), -1, false), 0);
    cr_assert_eq(kvt_savetrack_finish(t, 1, table, 8, 1), 0);
    cr_assert_eq(p.blocks[4], 1, "chunk 1 is the tail");
    cr_assert_eq(p.blocks[0], 1, "chunk 0's own save lease");
    uint32_t s, e, a;
    cr_assert(kvt_savetrack_next(t, 1, &s, &e, &a));
    cr_assert_eq(s, 64);
    cr_assert_eq(e, 128);
    cr_assert_eq(kvt_savetrack_build(t, 1, K(1), NULL, -1, false), 0, "the tail names its blocks");
    cr_assert_eq(p.blocks[4], 1, "the tail lease went, the save's lease holds it");
    cr_assert_eq(p.slots[1], 1, "the save reads the image from the tail's slot");
    cr_assert_eq(kvt_savetrack_end_plan(t), 0, "nothing left to retire");
    cr_assert_eq(kvt_savetrack_stored(t, op, K(0), 0, true), 0);
    cr_assert_eq(kvt_savetrack_stored(t, op, K(1), 0, true), 0);
    cr_assert_eq(s_refs(&p), 0);
    kvt_savetrack_stats_t st = s_stats(t);
    cr_assert_eq(st.tails_retired, 0);
    cr_assert_eq(st.records, 0);
    s_check(t);
    kvt_savetrack_destroy(&t);
}

Test(savetrack, rule_S4_a_readmission_retires_the_earlier_tail)
{
    s_pool_t p;
    kvt_savetrack_t *t = s_new(&p, 1);
    uint32_t table[16];
    for (uint32_t i = 0; i < 16; i++)
        table[i] = i;
    kvt_savetrack_admit(t, OP(1, 1), 0);
    kvt_savetrack_forwarded(t, OP(1, 1), 128);
    cr_assert_eq(kvt_savetrack_finish(t, 1, table, 8, 2), 0);
    cr_assert_eq(s_refs(&p), 9);
    //  Admitted again before a plan built the tail: that tail is never built.
    cr_assert_eq(kvt_savetrack_admit(t, OP(1, 2), 0), 0);
    cr_assert_eq(s_refs(&p), 0);
    cr_assert_eq(kvt_savetrack_end_plan(t), 0);
    kvt_savetrack_stats_t st = s_stats(t);
    cr_assert_eq(st.tails_retired, 1);
    cr_assert_eq(st.chunks_retired, 2);
    cr_assert_eq(st.leases_outstanding, 0);
    s_check(t);
    kvt_savetrack_destroy(&t);
}

// ---------------------------------------------------------------- S5 ----

Test(savetrack, rule_S5_save_floor_recorded_once_and_a_lost_hit_reopens_it)
{
    s_pool_t p;
    kvt_savetrack_t *t = s_new(&p, 1);
    kvt_opid_t op = OP(1, 1);
    kvt_savetrack_admit(t, op, 0);
    cr_assert_eq(kvt_savetrack_load_decided(t, op, 80, 256), 0);
    uint32_t f, s, e, a;
    cr_assert(kvt_savetrack_frontier(t, 1, &f));
    cr_assert_eq(f, 256, "the tier holds [.., hit): nothing below needs a save");
    cr_assert_eq(kvt_savetrack_load_decided(t, op, 130, 192), 0);
    cr_assert(kvt_savetrack_frontier(t, 1, &f));
    cr_assert_eq(f, 256);
    //  The hit is lost: [hbm, hit) reopens from the recorded floor.
    cr_assert_eq(kvt_savetrack_hit_lost(t, op), 0);
    cr_assert(kvt_savetrack_frontier(t, 1, &f));
    cr_assert_eq(f, 64, "the chunk floor of the HBM hit recorded first");
    kvt_savetrack_forwarded(t, op, 256);
    cr_assert(kvt_savetrack_next(t, 1, &s, &e, &a));
    cr_assert_eq(s, 64);
    cr_assert_eq(e, 256);
    kvt_savetrack_stats_t st = s_stats(t);
    cr_assert_eq(st.floors_recorded, 1);
    cr_assert_eq(st.floors_ignored, 1);
    cr_assert_eq(st.floors_reopened, 1);
    //  A re-admission records its own floor.
    cr_assert_eq(kvt_savetrack_admit(t, OP(1, 2), 0), 0);
    cr_assert_eq(kvt_savetrack_hit_lost(t, OP(1, 2)), -1, "no floor recorded: nothing reopens");
    cr_assert_eq(kvt_savetrack_load_decided(t, OP(1, 2), 200, 320), 0);
    cr_assert_eq(kvt_savetrack_hit_lost(t, OP(1, 2)), 0);
    cr_assert(kvt_savetrack_frontier(t, 1, &f));
    cr_assert_eq(f, 192);
    cr_assert_eq(kvt_savetrack_load_decided(t, OP(1, 1), 0, 64), -1, "an earlier admission");
    kvt_savetrack_destroy(&t);
}

// ------------------------------------------------------------ property ----

#define P_REQS 8
#define P_OUT  512

typedef struct {
    kvt_opid_t op;    //  save id: admission
    kvt_hash_t key;   //  save id: key
    uint32_t attempt; //  save id: attempt
    bool safe;        //  source_safe already reported
} p_save_t;

static uint64_t s_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

Test(savetrack, property_random_sequences_keep_leases_and_saves_balanced)
{
    for (uint64_t seed = 1; seed <= 10; seed++) {
        uint64_t rs = seed * 0x9E3779B97F4A7C15ull;
        s_pool_t p;
        kvt_savetrack_t *t = s_new(&p, 1);
        uint32_t gen[P_REQS] = {0}, fwd[P_REQS] = {0};
        bool alive[P_REQS] = {0};
        uint32_t table[P_REQS][16];
        for (uint32_t r = 0; r < P_REQS; r++)
            for (uint32_t b = 0; b < 16; b++)
                table[r][b] = r * 16 + b;
        p_save_t out[P_OUT];
        uint32_t nout = 0;
        uint64_t next_key = 1;
        for (int step = 0; step < 1500; step++) {
            uint32_t r = (uint32_t)(s_rand(&rs) % P_REQS);
            uint64_t req = r + 1;
            kvt_opid_t op = OP(req, gen[r]);
            switch (s_rand(&rs) % 9) {
            case 0: //  admit (or re-admit)
                if (!alive[r]) {
                    gen[r]++;
                    cr_assert_eq(kvt_savetrack_admit(t, OP(req, gen[r]), 0), 0);
                    alive[r] = true;
                    fwd[r] = 0;
                    if (s_rand(&rs) % 2)
                        kvt_savetrack_load_decided(t, OP(req, gen[r]), 40, 128);
                }
                break;
            case 1: //  a forward
                if (alive[r] && fwd[r] < 256) {
                    fwd[r] += (uint32_t)(s_rand(&rs) % 80);
                    fwd[r] = fwd[r] > 256 ? 256 : fwd[r];
                    kvt_savetrack_forwarded(t, op, fwd[r]);
                }
                break;
            case 2: { //  plan: build or skip what next offers
                uint32_t s, e, a;
                if (kvt_savetrack_next(t, req, &s, &e, &a)) {
                    for (uint32_t c = s; c < e && nout < P_OUT; c += CS) {
                        if (s_rand(&rs) % 4 == 0) {
                            cr_assert_eq(kvt_savetrack_skip(t, req), 0);
                            continue;
                        }
                        kvt_hash_t key = K(next_key++);
                        const uint32_t *blocks = alive[r] ? &table[r][c / BS] : NULL;
                        cr_assert_eq(kvt_savetrack_build(t, req, key, blocks, (int32_t)r, false),
                                     0);
                        p_save_t ps = {OP(req, gen[r]), key, a, false};
                        out[nout++] = ps;
                    }
                }
                break;
            }
            case 3: //  source_safe of an outstanding save
                if (nout > 0) {
                    p_save_t *ps = &out[s_rand(&rs) % nout];
                    int rc = kvt_savetrack_sources_safe(t, ps->op, ps->key, ps->attempt);
                    cr_assert_eq(rc, ps->safe ? -1 : 0);
                    ps->safe = true;
                }
                break;
            case 4: //  a store verdict
            case 5:
                if (nout > 0) {
                    uint32_t k = (uint32_t)(s_rand(&rs) % nout);
                    p_save_t ps = out[k];
                    cr_assert_eq(
                        kvt_savetrack_stored(t, ps.op, ps.key, ps.attempt, s_rand(&rs) % 3 != 0),
                        0);
                    out[k] = out[--nout];
                    cr_assert_eq(kvt_savetrack_stored(t, ps.op, ps.key, ps.attempt, true), -1);
                }
                break;
            case 6: //  finish
                if (alive[r]) {
                    cr_assert_eq(kvt_savetrack_finish(t, req, table[r], 16, (int32_t)r), 0);
                    alive[r] = false;
                }
                break;
            case 7: //  abort / preempt
                if (alive[r] || s_rand(&rs) % 2) {
                    kvt_savetrack_abort(t, req);
                    alive[r] = false;
                }
                break;
            default: //  end of plan; a lost hit
                if (s_rand(&rs) % 2)
                    kvt_savetrack_end_plan(t);
                else if (alive[r])
                    kvt_savetrack_hit_lost(t, op);
                break;
            }
            s_check(t);
            kvt_savetrack_stats_t st = s_stats(t);
            cr_assert_eq(st.saves_outstanding, nout);
            cr_assert(!p.negative, "seed %llu step %d", (unsigned long long)seed, step);
            cr_assert_eq((uint64_t)p.acquires - (uint64_t)p.releases, st.leases_outstanding);
        }
        //  Quiescence: every request retired, every save settled, no lease left.
        for (uint32_t r = 0; r < P_REQS; r++)
            kvt_savetrack_abort(t, r + 1);
        kvt_savetrack_end_plan(t);
        while (nout > 0) {
            p_save_t ps = out[--nout];
            cr_assert_eq(kvt_savetrack_stored(t, ps.op, ps.key, ps.attempt, false), 0);
        }
        s_check(t);
        kvt_savetrack_stats_t st = s_stats(t);
        cr_assert_eq(st.records, 0);
        cr_assert_eq(st.leases_outstanding, 0);
        cr_assert_eq(s_refs(&p), 0);
        cr_assert(!p.negative);
        kvt_savetrack_destroy(&t);
    }
}

// ------------------------------------------------------ save deadline ----

//  A save with no verdict by its deadline settles failed (S3: re-emitted
//  with a new attempt) but keeps its lease for the drain; its late verdict
//  is dropped and counted; deadlines fire in build order, one per call.
//  A tracker whose saves are due 100 after their build and drain 50 more,
//  one retry, over pool p; table[i] = i (32 blocks).
static kvt_savetrack_t *s_deadline_tracker(s_pool_t *p, uint32_t table[32])
{
    memset(p, 0, sizeof *p);
    kvt_savetrack_cfg_t cfg = {.chunk_size = CS,
                               .block_size = BS,
                               .retries = 1,
                               .deadline_us = 100,
                               .drain_us = 50,
                               .acquire = s_acq,
                               .release = s_rel,
                               .arg = p};
    kvt_savetrack_t *t = kvt_savetrack_new(&cfg);
    cr_assert_not_null(t);
    for (uint32_t i = 0; i < 32; i++)
        table[i] = i;
    return t;
}

Test(savetrack, a_save_past_its_deadline_settles_failed_and_drains_its_lease)
{
    s_pool_t p;
    uint32_t table[32];
    kvt_savetrack_t *t = s_deadline_tracker(&p, table);
    cr_assert_eq(kvt_savetrack_next_deadline(t), UINT64_MAX);
    cr_assert_eq(kvt_savetrack_admit(t, OP(1, 1), 0), 0);
    kvt_savetrack_forwarded(t, OP(1, 1), 128);
    kvt_savetrack_set_now(t, 1000);
    cr_assert_eq(kvt_savetrack_build(t, 1, K(0), s_chunk(table, 0), -1, false), 0);
    kvt_savetrack_set_now(t, 1010);
    cr_assert_eq(kvt_savetrack_build(t, 1, K(1), s_chunk(table, 1), -1, false), 0);
    cr_assert_eq(kvt_savetrack_next_deadline(t), 1100);
    uint64_t req = 0;
    cr_assert(!kvt_savetrack_expire(t, 1099, &req));
    //  The first expires alone; its lease stays.
    cr_assert(kvt_savetrack_expire(t, 1100, &req));
    cr_assert_eq(req, 1);
    cr_assert(!kvt_savetrack_expire(t, 1100, &req));
    kvt_savetrack_stats_t st = s_stats(t);
    cr_assert_eq(st.saves_expired, 1);
    cr_assert_eq(st.saves_failed, 1);
    cr_assert_eq(st.saves_outstanding, 1);
    cr_assert_eq(st.saves_draining, 1);
    cr_assert_eq(st.leases_outstanding, 2, "the drain keeps the expired save's lease");
    cr_assert_eq(s_refs(&p), 2 * (CS / BS));
    cr_assert(!kvt_savetrack_key_inflight(t, K(0)), "its key may be saved again");
    cr_assert_eq(kvt_savetrack_next_deadline(t), 1110);
    s_check(t);
    //  Its late verdict (and source_safe) are dropped: the lease stays.
    cr_assert_eq(kvt_savetrack_stored(t, OP(1, 1), K(0), 0, true), 1);
    cr_assert_eq(kvt_savetrack_sources_safe(t, OP(1, 1), K(0), 0), 1);
    st = s_stats(t);
    cr_assert_eq(st.late_verdicts, 2);
    cr_assert_eq(st.saves_ok, 0);
    cr_assert_eq(st.leases_outstanding, 2);
    s_check(t);
    //  The second one's verdict comes: the request is quiescent and the
    //  failed chunk is re-emitted from the frontier with a new attempt.
    cr_assert_eq(kvt_savetrack_stored(t, OP(1, 1), K(1), 0, true), 0);
    uint32_t s0, e0, a0;
    cr_assert(kvt_savetrack_next(t, 1, &s0, &e0, &a0));
    cr_assert_eq(s0, 0);
    cr_assert_eq(a0, 1);
    cr_assert_eq(s_stats(t).saves_reemitted, 1);
    cr_assert_eq(kvt_savetrack_next_deadline(t), 1150, "the drain ends 50 after the deadline");
    cr_assert(!kvt_savetrack_expire(t, 1149, &req));
    cr_assert(kvt_savetrack_expire(t, 1150, &req));
    st = s_stats(t);
    cr_assert_eq(st.saves_drained, 1);
    cr_assert_eq(st.saves_draining, 0);
    cr_assert_eq(st.leases_outstanding, 0);
    cr_assert_eq(s_refs(&p), 0);
    cr_assert(!p.negative);
    //  After the drain the save is unknown: stale.
    cr_assert_eq(kvt_savetrack_stored(t, OP(1, 1), K(0), 0, true), -1);
    cr_assert_eq(kvt_savetrack_next_deadline(t), UINT64_MAX);
    s_check(t);
    kvt_savetrack_destroy(&t);
}

//  Every rank reported the save's sources safe (its lease went) and only
//  the store's verdict is lost: at its deadline nothing is left to drain,
//  so it goes at once and holds no plan for the drain bound.
Test(savetrack, an_expired_save_whose_sources_were_safe_goes_at_once)
{
    s_pool_t p;
    uint32_t table[32];
    kvt_savetrack_t *t = s_deadline_tracker(&p, table);
    cr_assert_eq(kvt_savetrack_admit(t, OP(1, 1), 0), 0);
    kvt_savetrack_forwarded(t, OP(1, 1), 128);
    kvt_savetrack_set_now(t, 1000);
    cr_assert_eq(kvt_savetrack_build(t, 1, K(0), s_chunk(table, 0), -1, false), 0);
    cr_assert_eq(kvt_savetrack_sources_safe(t, OP(1, 1), K(0), 0), 0);
    cr_assert_eq(s_stats(t).leases_outstanding, 0);
    uint64_t req = 0;
    cr_assert(kvt_savetrack_expire(t, 1100, &req));
    kvt_savetrack_stats_t st = s_stats(t);
    cr_assert_eq(st.saves_expired, 1);
    cr_assert_eq(st.saves_draining, 0, "nothing to drain: no rank reads its sources");
    cr_assert_eq(st.saves_drained, 1);
    cr_assert_eq(st.saves_outstanding, 0);
    cr_assert_eq(kvt_savetrack_next_deadline(t), UINT64_MAX, "no drain end to wake for");
    //  Its late store verdict is stale now.
    cr_assert_eq(kvt_savetrack_stored(t, OP(1, 1), K(0), 0, true), -1);
    cr_assert_eq(s_stats(t).saves_ok, 0);
    cr_assert_eq(s_refs(&p), 0);
    s_check(t);
    kvt_savetrack_destroy(&t);
}

// ---------------------------------------------------------------- docs ----

Test(savetrack, every_counter_is_documented)
{
    s_pool_t p;
    kvt_savetrack_t *t = s_new(&p, 0);
    kvt_counter_t c[64];
    uint32_t n = 0;
    kvt_savetrack_counters(t, c, &n, 64);
    cr_assert_eq(n, 27);
    FILE *f = fopen(KVT_SOURCE_DIR "/docs/metrics.md", "rb");
    cr_assert_not_null(f);
    static char buf[1 << 17];
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = 0;
    char *doc = strstr(buf, "## Save tracker (`savetrack.*`");
    cr_assert_not_null(doc);
    char *end = strstr(doc + 1, "\n## ");
    if (end)
        *end = 0;
    for (uint32_t i = 0; i < n; i++) {
        char full[96], part[96];
        snprintf(full, sizeof full, "`%s`", c[i].name);
        snprintf(part, sizeof part, "`%s`", c[i].name + strlen("savetrack."));
        cr_assert(strstr(doc, full) || strstr(doc, part), "%s is not in docs/metrics.md",
                  c[i].name);
    }
    kvt_savetrack_destroy(&t);
}
