/*  The rank data path as actors under the SIM driver: two real workers (a
    device and a tier each), the real aggregator, and a probe in the
    scheduler's place that records verdicts and counters. Specs are posted
    to the workers as the runner would send them. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/kvt_test_rig.h"
#include "replay/kvt_oracle.h"

#define BS     16
#define CS     64
#define BPC    (CS / BS)
#define NB     64 //  device blocks per rank
#define TP     2
#define PLANES 2
#define TOKB   16 //  bytes per token per plane (one layer)

static kvt_trig_probe_t *const s_probe = &kvt_trig_probe;
static kvt_trig_t R;

//  pool_chunks: CPU pool capacity in chunks (0 = 64); ttl_ms: pool TTL (0 =
//  default); renew_ns: worker renew interval (0 = default).
static void rig_up_seed(uint64_t seed, uint64_t bandwidth, uint32_t pool_chunks, uint64_t ttl_ms,
                        uint64_t renew_ns)
{
    kvt_trig_cfg_t cfg = {
        .seed = seed,
        .name = "actors",
        .nranks = TP,
        .dev = {.bandwidth = bandwidth, .planes = PLANES, .blocks = NB, .block_bytes = BS * TOKB},
        .pool_bytes = (uint64_t)(pool_chunks ? pool_chunks : 64) * BPC * PLANES * BS * TOKB,
        .ttl_ms = ttl_ms,
        .agg_timeout_ns = 1000000000ull,
        .wa = {.ns = 7, .block_size = BS, .chunk_size = CS, .renew_ns = renew_ns}};
    kvt_trig_up(&R, &cfg);
}

static void rig_up_ex(uint64_t bandwidth, uint32_t pool_chunks, uint64_t ttl_ms, uint64_t renew_ns)
{
    rig_up_seed(3, bandwidth, pool_chunks, ttl_ms, renew_ns);
}

static void rig_up(uint64_t bandwidth)
{
    rig_up_ex(bandwidth, 0, 0, 0);
}

static void rig_down(void)
{
    kvt_trig_down(&R);
}

static void rig_run(void)
{
    kvt_trig_settle(&R);
}

static uint64_t rig_counter(kvt_aid_t aid, const char *name)
{
    return kvt_trig_count(&R, aid, name);
}

//  Exactly-once, counted where duplicates would be dropped: the aggregator
//  dropped `agg_drops` reports (late on a settled key + a rank's second
//  report on an open key) and worker r dropped `dups[r]` repeated items.
//  Tests that inject no duplicate expect all zeros.
static void rig_drops(uint64_t agg_drops, const uint64_t dups[TP])
{
    uint64_t late = rig_counter(R.agg, "agg.late_dropped");
    uint64_t dup = rig_counter(R.agg, "agg.dup_dropped");
    cr_assert_eq(late + dup, agg_drops, "the aggregator dropped %llu late + %llu duplicate reports",
                 (unsigned long long)late, (unsigned long long)dup);
    for (int r = 0; r < TP; r++) {
        uint64_t d = rig_counter(R.w[r], "worker.duplicates");
        cr_assert_eq(d, dups ? dups[r] : 0, "worker %d dropped %llu repeated items", r,
                     (unsigned long long)d);
    }
}

static void rig_no_drops(void)
{
    rig_drops(0, NULL);
}

static kvt_hash_t K(uint64_t i)
{
    return (kvt_hash_t){.hi = 0xABCDull + i, .lo = i * 977 + 1};
}

//  Posts the same spec to every worker (as every runner would).
static void rig_spec(kvt_msg_kind_t kind, uint64_t req, uint32_t start, uint32_t nchunks,
                     const uint32_t *blocks, uint64_t key0)
{
    kvt_hash_t keys[16];
    for (uint32_t i = 0; i < nchunks; i++)
        keys[i] = K(key0 + i);
    kvt_msg_t m;
    memset(&m, 0, sizeof m);
    m.kind = kind;
    m.u.load_spec = (kvt_load_spec_t){.op = {req, 1},
                                      .start = start,
                                      .end = start + nchunks * CS,
                                      .keys = keys,
                                      .nkeys = nchunks,
                                      .blocks = (uint32_t *)blocks,
                                      .nblocks = nchunks * BPC};
    for (int r = 0; r < TP; r++)
        cr_assert_eq(kvt_system_post(R.sys, R.w[r], &m), 0);
}

//  Fills blocks with the oracle bytes of (hash K(key0 + b / BPC), plane).
static void rig_fill(int rank, const uint32_t *blocks, uint32_t n, uint64_t key0)
{
    for (uint32_t b = 0; b < n; b++)
        for (uint32_t p = 0; p < PLANES; p++)
            kvt_oracle_fill(kvt_gpu_plane_ptr(R.gpu[rank], p, 0, blocks[b]), BS * TOKB,
                            K(key0 + b / BPC), b % BPC, p, (uint32_t)rank);
}

static bool rig_check(int rank, const uint32_t *blocks, uint32_t n, uint64_t key0)
{
    for (uint32_t b = 0; b < n; b++)
        for (uint32_t p = 0; p < PLANES; p++)
            if (!kvt_oracle_check(kvt_gpu_plane_ptr(R.gpu[rank], p, 0, blocks[b]), BS * TOKB,
                                  K(key0 + b / BPC), b % BPC, p, (uint32_t)rank))
                return false;
    return true;
}

static const uint32_t SRC[8] = {3, 9, 1, 40, 22, 23, 5, 60};
static const uint32_t DST[8] = {11, 12, 13, 14, 30, 31, 32, 33};

Test(actors, save_then_load_round_trips_every_byte_on_every_rank, .timeout = 30)
{
    rig_up(25000000000ull);
    for (int r = 0; r < TP; r++)
        rig_fill(r, SRC, 8, 100);
    rig_spec(KVT_MSG_SAVE_SPEC, 1, 0, 2, SRC, 100);
    rig_run();
    cr_assert_eq(s_probe->nverdicts, 2, "one verdict per chunk");
    cr_assert_eq(s_probe->nsafe, 1, "one source_safe for the spec, settled over both ranks");
    for (int i = 0; i < 2; i++) {
        cr_assert(s_probe->verdicts[i].ok);
        cr_assert_eq(s_probe->verdicts[i].chan, KVT_CHAN_SAVE);
    }
    rig_spec(KVT_MSG_LOAD_SPEC, 2, 0, 2, DST, 100);
    rig_run();
    cr_assert_eq(s_probe->nverdicts, 3, "one verdict for the whole load");
    cr_assert(s_probe->verdicts[2].ok);
    cr_assert_eq(s_probe->verdicts[2].chan, KVT_CHAN_LOAD);
    for (int r = 0; r < TP; r++)
        cr_assert(rig_check(r, DST, 8, 100), "rank %d restored wrong bytes", r);
    //  Two chunks, the save's source_safe, the load: per rank.
    cr_assert_eq(rig_counter(R.agg, "agg.reports"), (2 + 1 + 1) * TP);
    cr_assert_eq(rig_counter(R.agg, "agg.open"), 0);
    rig_no_drops();
    rig_down();
}

Test(actors, save_report_never_precedes_its_gather, .timeout = 30)
{
    //  1 MB/s: gathering one 2 KiB chunk takes ~2 ms of virtual time.
    rig_up(1000000ull);
    for (int r = 0; r < TP; r++)
        rig_fill(r, SRC, 4, 200);
    rig_spec(KVT_MSG_SAVE_SPEC, 1, 0, 1, SRC, 200);
    rig_run();
    cr_assert_eq(s_probe->nverdicts, 1);
    uint64_t cost = kvt_gpu_sim_cost_ns(R.gpu[0], BPC * kvt_gpu_block_bytes(R.gpu[0]));
    cr_assert_geq(s_probe->at[0], cost, "verdict at %llu ns, before the copy landed (%llu ns)",
                  (unsigned long long)s_probe->at[0], (unsigned long long)cost);
    rig_no_drops();
    rig_down();
}

Test(actors, rule_L1_missing_chunk_fails_the_load_once, .timeout = 30)
{
    rig_up(25000000000ull);
    rig_spec(KVT_MSG_LOAD_SPEC, 5, 0, 2, DST, 900);
    rig_run();
    cr_assert_eq(s_probe->nverdicts, 1);
    cr_assert_not(s_probe->verdicts[0].ok);
    cr_assert_eq(s_probe->verdicts[0].detail, KVT_DETAIL_MISS);
    cr_assert_eq(s_probe->verdicts[0].nfailed, TP);
    cr_assert_eq(rig_counter(R.agg, "agg.reports"), TP, "exactly one report per rank");
    rig_no_drops();
    rig_down();
}

Test(actors, rule_L4_off_grid_spec_is_refused_with_one_report_per_item, .timeout = 30)
{
    rig_up(25000000000ull);
    //  start 16 is not on the 64-token chunk grid.
    rig_spec(KVT_MSG_SAVE_SPEC, 6, 16, 2, SRC, 300);
    rig_run();
    cr_assert_eq(s_probe->nverdicts, 2);
    for (int i = 0; i < 2; i++) {
        cr_assert_not(s_probe->verdicts[i].ok);
        cr_assert_eq(s_probe->verdicts[i].detail, KVT_DETAIL_INVALID);
    }
    cr_assert_eq(rig_counter(R.w[0], "worker.saves_refused"), 1);
    cr_assert_eq(s_probe->nsafe, 1, "nothing read the sources of the refused spec");
    cr_assert_eq(rig_counter(R.agg, "agg.reports"), (2 + 1) * TP);
    rig_no_drops();
    rig_down();
}

Test(actors, rule_A1_one_failing_rank_fails_the_verdict_whichever_reports_last, .timeout = 60)
{
    //  Every (seed, failing rank, order): the failing rank's Completion is
    //  forced to arrive first or last by delaying the other rank's.
    uint32_t runs = 0;
    for (uint64_t seed = 1; seed <= 4; seed++)
        for (int bad = 0; bad < TP; bad++)
            for (int bad_first = 0; bad_first < 2; bad_first++) {
                rig_up_seed(seed, 25000000000ull, 0, 0, 0);
                for (int r = 0; r < TP; r++)
                    rig_fill(r, SRC, 4, 400);
                rig_spec(KVT_MSG_SAVE_SPEC, 1, 0, 1, SRC, 400);
                rig_run();
                cr_assert_eq(s_probe->nverdicts, 1);
                //  Rank `bad` loses the chunk; the other still has it.
                cr_assert_eq(kvt_pool_remove(kvt_storage_pool(R.st[bad]), 7, K(400), KVT_OBJ_KV),
                             0);
                int late = bad_first ? 1 - bad : bad;
                int rule = kvt_sim_fault(R.sys, KVT_FAULT_DELAY, R.w[late], R.agg,
                                         KVT_MSG_COMPLETION, 1, 1000000ull);
                cr_assert_gt(rule, 0);
                uint64_t t0 = kvt_system_now(R.sys);
                rig_spec(KVT_MSG_LOAD_SPEC, 2, 0, 1, DST, 400);
                rig_run();
                cr_assert_eq(kvt_sim_fault_hits(R.sys, rule), 1);
                cr_assert_eq(s_probe->nverdicts, 2);
                const kvt_verdict_t *v = &s_probe->verdicts[1];
                cr_assert_geq(s_probe->at[1] - t0, 1000000ull, "the delayed report came last");
                cr_assert_not(v->ok, "seed %llu, rank %d failing, reporting %s: verdict ok",
                              (unsigned long long)seed, bad, bad_first ? "first" : "last");
                cr_assert_eq(v->nfailed, 1);
                cr_assert_eq(v->detail, KVT_DETAIL_MISS);
                rig_no_drops();
                rig_down();
                runs++;
            }
    cr_assert_eq(runs, 16);
}

Test(actors, rule_A4_dropped_completion_settles_the_key_failed_by_the_bound, .timeout = 30)
{
    rig_up(25000000000ull);
    for (int r = 0; r < TP; r++)
        rig_fill(r, SRC, 4, 500);
    //  Rank 1's two reports are lost: the spec's source_safe (sent first)
    //  and the chunk's store.
    int rule = kvt_sim_fault(R.sys, KVT_FAULT_DROP, R.w[1], R.agg, KVT_MSG_COMPLETION, 2, 0);
    cr_assert_gt(rule, 0);
    uint64_t t0 = kvt_system_now(R.sys);
    rig_spec(KVT_MSG_SAVE_SPEC, 1, 0, 1, SRC, 500);
    rig_run(); //  the aggregator's timer runs until the key settled
    cr_assert_eq(kvt_sim_fault_hits(R.sys, rule), 2);
    cr_assert_eq(s_probe->nsafe, 1, "the source_safe key settles by the bound too");
    cr_assert_eq(s_probe->nverdicts, 1, "one rank never reported: the bound settles the key");
    const kvt_verdict_t *v = &s_probe->verdicts[0];
    cr_assert_not(v->ok, "a timeout is a failure");
    cr_assert_eq(v->detail, KVT_DETAIL_TIMEOUT);
    cr_assert_eq(v->nfailed, 1);
    cr_assert_geq(s_probe->at[0] - t0, R.aa.timeout_ns, "not before the bound");
    cr_assert_leq(s_probe->at[0] - t0, R.aa.timeout_ns + 10000000ull, "at the bound");
    cr_assert_eq(rig_counter(R.agg, "agg.open"), 0);
    cr_assert_eq(rig_counter(R.agg, "agg.timeouts"), 2, "the store key and the source_safe key");
    rig_no_drops();
    rig_down();
}

Test(actors, duplicated_completion_is_dropped, .timeout = 30)
{
    rig_up(25000000000ull);
    for (int r = 0; r < TP; r++)
        rig_fill(r, SRC, 4, 600);
    kvt_sim_fault(R.sys, KVT_FAULT_DUPLICATE, R.w[0], R.agg, KVT_MSG_COMPLETION, 1, 0);
    rig_spec(KVT_MSG_SAVE_SPEC, 1, 0, 1, SRC, 600);
    rig_run();
    cr_assert_eq(s_probe->nverdicts, 1, "still exactly one verdict");
    cr_assert(s_probe->verdicts[0].ok);
    uint64_t dup = rig_counter(R.agg, "agg.dup_dropped");
    uint64_t late = rig_counter(R.agg, "agg.late_dropped");
    cr_assert_eq(dup + late, 1, "the copy is dropped (dup %llu, late %llu)",
                 (unsigned long long)dup, (unsigned long long)late);
    rig_drops(1, NULL);
    rig_down();
}

Test(actors, crashed_worker_reports_its_pending_items_failed, .timeout = 30)
{
    //  Slow copies so the save is still pending when the worker crashes.
    rig_up(1000000ull);
    for (int r = 0; r < TP; r++)
        rig_fill(r, SRC, 4, 700);
    rig_spec(KVT_MSG_SAVE_SPEC, 1, 0, 1, SRC, 700);
    //  Deliver the specs, not the copies' landing.
    kvt_system_run(R.sys, 200000, 0);
    cr_assert_eq(s_probe->nverdicts, 0);
    cr_assert_eq(kvt_sim_crash(R.sys, R.w[1]), 0);
    rig_run();
    cr_assert_eq(s_probe->nverdicts, 1, "the shutdown path reported the pending item");
    cr_assert_not(s_probe->verdicts[0].ok);
    cr_assert_eq(s_probe->verdicts[0].detail, KVT_DETAIL_SHUTDOWN);
    kvt_pool_stats_t ps;
    kvt_pool_stats(kvt_storage_pool(R.st[1]), &ps);
    cr_assert_eq(ps.objects_writing, 0, "the crashed worker's reservation was aborted");
    cr_assert_eq(ps.objects, 0);
    cr_assert_eq(rig_counter(R.agg, "agg.late_dropped") + rig_counter(R.agg, "agg.dup_dropped"), 0,
                 "nothing dropped as a duplicate");
    rig_down();
}

Test(actors, rule_L2_load_report_never_precedes_the_copy, .timeout = 30)
{
    rig_up(1000000ull);
    for (int r = 0; r < TP; r++)
        rig_fill(r, SRC, 4, 800);
    rig_spec(KVT_MSG_SAVE_SPEC, 1, 0, 1, SRC, 800);
    rig_run();
    uint64_t t0 = kvt_system_now(R.sys);
    rig_spec(KVT_MSG_LOAD_SPEC, 2, 0, 1, DST, 800);
    rig_run();
    cr_assert_eq(s_probe->nverdicts, 2);
    cr_assert(s_probe->verdicts[1].ok);
    uint64_t cost = kvt_gpu_sim_cost_ns(R.gpu[0], BPC * kvt_gpu_block_bytes(R.gpu[0]));
    cr_assert_geq(s_probe->at[1] - t0, cost, "load verdict %llu ns after dispatch, copy takes %llu",
                  (unsigned long long)(s_probe->at[1] - t0), (unsigned long long)cost);
    for (int r = 0; r < TP; r++)
        cr_assert(rig_check(r, DST, 4, 800));
    rig_no_drops();
    rig_down();
}

Test(actors, repeated_save_spec_runs_once, .timeout = 30)
{
    rig_up(1000000ull);
    for (int r = 0; r < TP; r++)
        rig_fill(r, SRC, 8, 900);
    int rule =
        kvt_sim_fault(R.sys, KVT_FAULT_DUPLICATE, KVT_ANY_ACTOR, R.w[0], KVT_MSG_SAVE_SPEC, 1, 0);
    rig_spec(KVT_MSG_SAVE_SPEC, 1, 0, 2, SRC, 900);
    rig_run();
    cr_assert_eq(kvt_sim_fault_hits(R.sys, rule), 1);
    cr_assert_eq(s_probe->nverdicts, 2, "one verdict per chunk");
    cr_assert(s_probe->verdicts[0].ok, "the copy must not be reported as a duplicate writer");
    cr_assert(s_probe->verdicts[1].ok);
    cr_assert_eq(rig_counter(R.w[0], "worker.duplicates"), 2);
    cr_assert_eq(rig_counter(R.w[0], "worker.saves_ok"), 2);
    //  The stored chunks hold the bytes the blocks had when saved.
    for (int r = 0; r < TP; r++)
        rig_fill(r, SRC, 8, 1900); //  the source blocks are reused
    rig_spec(KVT_MSG_LOAD_SPEC, 2, 0, 2, DST, 900);
    rig_run();
    cr_assert(s_probe->verdicts[2].ok);
    for (int r = 0; r < TP; r++)
        cr_assert(rig_check(r, DST, 8, 900));
    rig_drops(0, (uint64_t[TP]){2, 0});
    rig_down();
}

Test(actors, repeated_load_spec_runs_once, .timeout = 30)
{
    rig_up(25000000000ull);
    for (int r = 0; r < TP; r++)
        rig_fill(r, SRC, 4, 950);
    rig_spec(KVT_MSG_SAVE_SPEC, 1, 0, 1, SRC, 950);
    rig_run();
    int rule =
        kvt_sim_fault(R.sys, KVT_FAULT_DUPLICATE, KVT_ANY_ACTOR, R.w[1], KVT_MSG_LOAD_SPEC, 1, 0);
    rig_spec(KVT_MSG_LOAD_SPEC, 2, 0, 1, DST, 950);
    rig_run();
    cr_assert_eq(kvt_sim_fault_hits(R.sys, rule), 1);
    cr_assert_eq(s_probe->nverdicts, 2);
    cr_assert(s_probe->verdicts[1].ok);
    cr_assert_eq(rig_counter(R.w[1], "worker.duplicates"), 1);
    cr_assert_eq(rig_counter(R.w[1], "worker.loads_ok"), 1, "the second copy never ran");
    cr_assert_eq(rig_counter(R.agg, "agg.late_dropped") + rig_counter(R.agg, "agg.dup_dropped"), 0,
                 "no second report either");
    rig_drops(0, (uint64_t[TP]){0, 1});
    rig_down();
}

//  A pool of exactly 6 chunks holding a 4-chunk prefix K(1000..1003) and
//  two unrelated chunks.
static void s_fill_prefix_pool(void)
{
    static const uint32_t other[8] = {50, 51, 52, 53, 54, 55, 56, 57};
    for (int r = 0; r < TP; r++) {
        rig_fill(r, SRC, 8, 1000);
        rig_fill(r, other, 8, 3000);
    }
    uint32_t four[16];
    memcpy(four, SRC, sizeof SRC);
    memcpy(four + 8, other, sizeof other);
    rig_spec(KVT_MSG_SAVE_SPEC, 1, 0, 4, four, 1000);
    rig_run();
    rig_spec(KVT_MSG_SAVE_SPEC, 2, 0, 2, other, 3000);
    rig_run();
}

Test(actors, a_save_leaves_the_prefix_younger_than_its_suffix, .timeout = 30)
{
    rig_up_ex(25000000000ull, 6, 0, 0);
    s_fill_prefix_pool();
    //  One more chunk: the oldest object goes. It must be the prefix's
    //  deepest chunk, never its first.
    rig_spec(KVT_MSG_SAVE_SPEC, 3, 0, 1, SRC, 4000);
    rig_run();
    kvt_pool_t *pool = kvt_storage_pool(R.st[0]);
    cr_assert(kvt_pool_contains(pool, 7, K(1000), KVT_OBJ_KV), "the shared prefix was evicted");
    cr_assert_not(kvt_pool_contains(pool, 7, K(1003), KVT_OBJ_KV));
    rig_no_drops();
    rig_down();
}

Test(actors, a_load_leaves_the_prefix_younger_than_its_suffix, .timeout = 30)
{
    rig_up_ex(25000000000ull, 6, 0, 0);
    s_fill_prefix_pool();
    static const uint32_t dst16[16] = {11, 12, 13, 14, 30, 31, 32, 33,
                                       34, 35, 36, 37, 38, 39, 40, 41};
    rig_spec(KVT_MSG_LOAD_SPEC, 3, 0, 4, dst16, 1000);
    rig_run();
    cr_assert(s_probe->verdicts[s_probe->nverdicts - 1].ok);
    //  The load made the prefix younger than the two unrelated chunks;
    //  three more chunks evict those two and then the prefix's deepest.
    static const uint32_t more[12] = {16, 17, 18, 19, 20, 21, 24, 25, 26, 27, 28, 29};
    for (int r = 0; r < TP; r++)
        rig_fill(r, more, 12, 5000);
    rig_spec(KVT_MSG_SAVE_SPEC, 4, 0, 3, more, 5000);
    rig_run();
    kvt_pool_t *pool = kvt_storage_pool(R.st[0]);
    cr_assert(kvt_pool_contains(pool, 7, K(1000), KVT_OBJ_KV), "the shared prefix was evicted");
    cr_assert_not(kvt_pool_contains(pool, 7, K(1003), KVT_OBJ_KV));
    rig_no_drops();
    rig_down();
}

Test(actors, a_copy_longer_than_the_ttl_keeps_its_reservation, .timeout = 30)
{
    //  100 kB/s: one 2 KiB chunk takes ~20 ms; the pool TTL is 5 ms and the
    //  worker renews every 1 ms of virtual time.
    rig_up_ex(100000ull, 0, 5, 1000000ull);
    for (int r = 0; r < TP; r++)
        rig_fill(r, SRC, 4, 1100);
    rig_spec(KVT_MSG_SAVE_SPEC, 1, 0, 1, SRC, 1100);
    rig_run();
    cr_assert_eq(s_probe->nverdicts, 1);
    cr_assert(s_probe->verdicts[0].ok, "the reservation expired under a running copy (detail %u)",
              s_probe->verdicts[0].detail);
    rig_spec(KVT_MSG_LOAD_SPEC, 2, 0, 1, DST, 1100);
    rig_run();
    cr_assert(s_probe->verdicts[1].ok);
    for (int r = 0; r < TP; r++)
        cr_assert(rig_check(r, DST, 4, 1100));
    rig_no_drops();
    rig_down();
}

// ------------------------------------------------- touches, lookups, epochs --

//  Posts one message to every worker.
static void rig_all(const kvt_msg_t *m)
{
    for (int r = 0; r < TP; r++)
        cr_assert_eq(kvt_system_post(R.sys, R.w[r], m), 0);
}

static const kvt_verdict_t *rig_verdict(uint8_t chan, uint64_t req)
{
    const kvt_verdict_t *v = NULL;
    uint32_t n = 0;
    for (uint32_t i = 0; i < s_probe->nverdicts; i++)
        if (s_probe->verdicts[i].chan == chan && s_probe->verdicts[i].op.req == req) {
            v = &s_probe->verdicts[i];
            n++;
        }
    cr_assert_eq(n, 1, "%u verdicts on channel %u for %llu", n, chan, (unsigned long long)req);
    return v;
}

Test(actors, rule_A1_touch_verdicts_are_the_lowest_answer_over_ranks, .timeout = 60)
{
    //  Several seeds, and the image missing on either rank, so the rank
    //  with the lowest answer reports first on some keys and last on others.
    for (uint64_t seed = 1; seed <= 4; seed++) {
        rig_up_seed(seed, 25000000000ull, 0, 0, 0);
        uint8_t img[128] = {3};
        //  K(1000): an image on both ranks; K(1001): rank 0 only; K(1002): rank 1 only.
        for (int r = 0; r < TP; r++) {
            cr_assert_eq(kvt_storage_put(R.st[r], 7, K(1000), KVT_OBJ_STATE, img, sizeof img), 0);
            cr_assert_eq(
                kvt_storage_put(R.st[r], 7, K(1001 + (uint64_t)r), KVT_OBJ_STATE, img, sizeof img),
                0);
        }
        kvt_msg_t m;
        memset(&m, 0, sizeof m);
        m.kind = KVT_MSG_TOUCH;
        for (uint64_t h = 1000; h <= 1002; h++) {
            m.u.touch = (kvt_touch_msg_t){.hash = K(h), .round = seed};
            rig_all(&m);
        }
        rig_run();
        cr_assert_eq(s_probe->nverdicts, 6, "one verdict per touch channel per touch");
        uint32_t ok = 0;
        for (uint32_t i = 0; i < 6; i++) {
            const kvt_verdict_t *v = &s_probe->verdicts[i];
            cr_assert_eq(v->op.req, seed);
            bool both = kvt_hash_eq(v->key, K(1000));
            cr_assert_eq(v->ok, both, "seed %llu channel %u: ok only where every rank holds it",
                         (unsigned long long)seed, v->chan);
            cr_assert_eq(v->touch, both ? KVT_TOUCH_REFRESHED : KVT_TOUCH_GONE,
                         "seed %llu channel %u: the lowest answer", (unsigned long long)seed,
                         v->chan);
            ok += v->ok;
        }
        cr_assert_eq(ok, 2);
        cr_assert_eq(rig_counter(R.agg, "agg.open"), 0);
        rig_no_drops();
        rig_down();
    }
}

Test(actors, rule_A1_lookup_verdict_is_the_minimum_over_ranks_and_the_lease_goes_with_the_load,
     .timeout = 30)
{
    rig_up(25000000000ull);
    for (int r = 0; r < TP; r++)
        rig_fill(r, SRC, 8, 1100);
    rig_spec(KVT_MSG_SAVE_SPEC, 1, 0, 2, SRC, 1100);
    rig_run();
    //  Rank 1 also holds a third chunk; chunk 1 carries an image on both
    //  ranks, chunk 0 on rank 0 only.
    uint8_t buf[4096];
    memset(buf, 5, sizeof buf);
    size_t bytes = BPC * kvt_gpu_block_bytes(R.gpu[0]);
    cr_assert_eq(kvt_storage_put(R.st[1], 7, K(1102), KVT_OBJ_KV, buf, bytes), 0);
    for (int r = 0; r < TP; r++)
        cr_assert_eq(kvt_storage_put(R.st[r], 7, K(1101), KVT_OBJ_KV_STATE, buf, bytes + 64), 0);
    cr_assert_eq(kvt_storage_put(R.st[0], 7, K(1100), KVT_OBJ_KV_STATE, buf, bytes + 64), 0);
    kvt_hash_t keys[3] = {K(1100), K(1101), K(1102)};
    kvt_msg_t m;
    memset(&m, 0, sizeof m);
    m.kind = KVT_MSG_LOOKUP;
    m.u.lookup = (kvt_lookup_t){.op = {2, 1}, .keys = keys, .nkeys = 3, .pin = true};
    rig_all(&m);
    //  Not to quiescence: that would run the leases out to their TTL.
    kvt_system_run(R.sys, kvt_system_now(R.sys) + 10000000ull, 0);
    const kvt_verdict_t *v = rig_verdict(KVT_CHAN_LOOKUP, 2);
    cr_assert(v->ok);
    cr_assert_eq(v->held, 2, "rank 0 holds two chunks, rank 1 three: the minimum");
    cr_assert_eq(s_probe->img[v - s_probe->verdicts][0], 0x02, "only chunk 1 is imaged everywhere");
    for (int r = 0; r < TP; r++) {
        kvt_pool_stats_t ps;
        kvt_pool_stats(kvt_storage_pool(R.st[r]), &ps);
        cr_assert_eq(ps.leases_active, 1, "rank %d pins the held chunks under one lease", r);
    }
    //  The load names the lookup: its lease goes once the load's reads hold theirs.
    kvt_hash_t lkeys[2] = {K(1100), K(1101)};
    memset(&m, 0, sizeof m);
    m.kind = KVT_MSG_LOAD_SPEC;
    m.u.load_spec = (kvt_load_spec_t){.op = {2, 1},
                                      .start = 0,
                                      .end = 2 * CS,
                                      .keys = lkeys,
                                      .nkeys = 2,
                                      .blocks = (uint32_t *)DST,
                                      .nblocks = 2 * BPC,
                                      .lookup = true};
    rig_all(&m);
    kvt_system_run(R.sys, kvt_system_now(R.sys) + 10000000ull, 0);
    cr_assert(rig_verdict(KVT_CHAN_LOAD, 2)->ok);
    for (int r = 0; r < TP; r++) {
        kvt_pool_stats_t ps;
        kvt_pool_stats(kvt_storage_pool(R.st[r]), &ps);
        cr_assert_eq(ps.leases_active, 0, "rank %d: released with the load, before any TTL", r);
    }
    for (int r = 0; r < TP; r++) {
        cr_assert_eq(rig_counter(R.w[r], "worker.lookup_rel_load"), 1);
        cr_assert_eq(rig_counter(R.w[r], "worker.lookup_rel_ttl"), 0);
        cr_assert_eq(rig_counter(R.w[r], "worker.lookup_leases"), 0);
        kvt_pool_stats_t ps;
        kvt_pool_stats(kvt_storage_pool(R.st[r]), &ps);
        cr_assert_eq(ps.leases_active, 0, "rank %d: nothing pinned at quiescence", r);
    }
    rig_no_drops();
    rig_down();
}

Test(actors, rule_A4_a_crashed_workers_stranded_load_settles_failed_and_its_old_epoch_is_dropped,
     .timeout = 30)
{
    //  Slow copies so the load is still pending when the worker crashes.
    rig_up(1000000ull);
    for (int r = 0; r < TP; r++)
        rig_fill(r, SRC, 4, 1200);
    rig_spec(KVT_MSG_SAVE_SPEC, 1, 0, 1, SRC, 1200);
    rig_run();
    cr_assert(rig_verdict(KVT_CHAN_SAVE, 1)->ok);
    uint64_t epoch1 = rig_counter(R.w[1], "worker.epoch");
    cr_assert_geq(epoch1, KVT_WORKER_EPOCH_SPAN + 1, "process epoch 1");
    uint64_t t0 = kvt_system_now(R.sys);
    rig_spec(KVT_MSG_LOAD_SPEC, 2, 0, 1, DST, 1200);
    kvt_system_run(R.sys, t0 + 200000, 0); //  the specs are in, the copies are not
    //  The crash takes rank 1's report with it (a killed process says nothing).
    int rule = kvt_sim_fault(R.sys, KVT_FAULT_DROP, R.w[1], R.agg, KVT_MSG_COMPLETION, 1, 0);
    cr_assert_eq(kvt_sim_crash(R.sys, R.w[1]), 0);
    cr_assert_eq(kvt_sim_restart(R.sys, R.w[1]), 0);
    cr_assert_eq(kvt_sim_fault_hits(R.sys, rule), 1, "the shutdown report was lost");
    //  The new incarnation reports with the next epoch.
    rig_fill(0, SRC + 4, 4, 1300);
    rig_fill(1, SRC + 4, 4, 1300);
    rig_spec(KVT_MSG_SAVE_SPEC, 3, 0, 1, SRC + 4, 1300);
    rig_run();
    uint64_t epoch2 = rig_counter(R.w[1], "worker.epoch");
    cr_assert_gt(epoch2, epoch1, "the restarted worker has a newer epoch");
    cr_assert_lt(epoch2, 2 * KVT_WORKER_EPOCH_SPAN, "same process");
    cr_assert(rig_verdict(KVT_CHAN_SAVE, 3)->ok);
    const kvt_verdict_t *v = rig_verdict(KVT_CHAN_LOAD, 2);
    cr_assert_not(v->ok, "a stranded key settles as a failure");
    cr_assert_eq(v->detail, KVT_DETAIL_TIMEOUT);
    uint64_t at = s_probe->at[v - s_probe->verdicts];
    cr_assert_leq(at - t0, R.aa.timeout_ns + 10000000ull, "settled by the bound");
    cr_assert_geq(at - t0, R.aa.timeout_ns);
    cr_assert_eq(rig_counter(R.agg, "agg.timeouts"), 1);
    //  A report the old incarnation still had on the wire arrives now.
    kvt_msg_t m;
    memset(&m, 0, sizeof m);
    m.kind = KVT_MSG_COMPLETION;
    m.u.completion = (kvt_completion_t){.chan = KVT_CHAN_SAVE,
                                        .op = {9, 1},
                                        .key = K(1400),
                                        .rank = 1,
                                        .ok = false,
                                        .detail = KVT_DETAIL_SHUTDOWN,
                                        .epoch = epoch1};
    cr_assert_eq(kvt_system_post(R.sys, R.agg, &m), 0);
    rig_run();
    cr_assert_eq(rig_counter(R.agg, "agg.epoch_dropped"), 1, "the old epoch's report is dropped");
    cr_assert_eq(rig_counter(R.agg, "agg.open"), 0, "and opened no key");
    rig_no_drops();
    rig_down();
}

//  Verdicts on (chan, req, key).
static uint32_t rig_nverdicts(uint8_t chan, uint64_t req, kvt_hash_t key)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < s_probe->nverdicts; i++)
        n += s_probe->verdicts[i].chan == chan && s_probe->verdicts[i].op.req == req &&
             kvt_hash_eq(s_probe->verdicts[i].key, key);
    return n;
}

Test(actors, mixed_touches_lookups_and_loads_settle_every_key_once_and_leave_nothing,
     .timeout = 120)
{
    static const kvt_hash_t zero = {0, 0};
    for (uint64_t seed = 1; seed <= 40; seed++) {
        rig_up_seed(seed, 25000000000ull, 0, 0, 0);
        uint64_t rng = seed * 0x9e3779b97f4a7c15ull;
        for (int r = 0; r < TP; r++)
            rig_fill(r, SRC, 8, 2000);
        rig_spec(KVT_MSG_SAVE_SPEC, 1, 0, 2, SRC, 2000);
        rig_run();
        //  Every fourth seed loses one of rank 1's reports: that key settles
        //  failed by the bound, still once.
        if (seed % 4 == 0)
            kvt_sim_fault(R.sys, KVT_FAULT_DROP, R.w[1], R.agg, KVT_MSG_COMPLETION, 1, 0);
        uint32_t ntouch = 0, nlookup = 0, nload = 0;
        kvt_hash_t keys[2] = {K(2000), K(2001)};
        for (uint64_t i = 0; i < 6; i++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            uint32_t pick = (uint32_t)(rng >> 33) % 4;
            kvt_msg_t m;
            memset(&m, 0, sizeof m);
            if (pick == 0) {
                m.kind = KVT_MSG_TOUCH;
                m.u.touch = (kvt_touch_msg_t){.hash = K(2000 + i % 3), .round = 100 + i};
                if (i % 2)
                    m.u.touch.keys = keys, m.u.touch.nkeys = 2;
                rig_all(&m);
                ntouch++;
                continue;
            }
            uint64_t req = 10 + i;
            m.kind = KVT_MSG_LOOKUP;
            m.u.lookup =
                (kvt_lookup_t){.op = {req, 1}, .keys = keys, .nkeys = 2, .pin = true, .ttl_ms = 20};
            rig_all(&m);
            nlookup++;
            memset(&m, 0, sizeof m);
            if (pick == 1) { //  the load that uses the lookup's lease
                m.kind = KVT_MSG_LOAD_SPEC;
                m.u.load_spec = (kvt_load_spec_t){.op = {req, 1},
                                                  .start = 0,
                                                  .end = 2 * CS,
                                                  .keys = keys,
                                                  .nkeys = 2,
                                                  .blocks = (uint32_t *)DST,
                                                  .nblocks = 2 * BPC,
                                                  .lookup = true};
                rig_all(&m);
                nload++;
            } else if (pick == 2) { //  released without a load
                m.kind = KVT_MSG_LOOKUP_RELEASE;
                m.u.lookup_release.op = (kvt_opid_t){req, 1};
                rig_all(&m);
            } //  pick 3: left to the TTL
            kvt_system_run(R.sys, kvt_system_now(R.sys) + 1000000ull, 0);
        }
        rig_run();
        cr_assert_eq(s_probe->nverdicts, 2 + 2 * ntouch + nlookup + nload,
                     "seed %llu: %u verdicts for %u touches, %u lookups, %u loads",
                     (unsigned long long)seed, s_probe->nverdicts, ntouch, nlookup, nload);
        for (uint64_t i = 0; i < 6; i++) {
            uint32_t t = rig_nverdicts(KVT_CHAN_TOUCH, 100 + i, K(2000 + i % 3));
            cr_assert_eq(t, rig_nverdicts(KVT_CHAN_TOUCH_REFRESH, 100 + i, K(2000 + i % 3)));
            cr_assert_leq(t, 1, "seed %llu: touch %llu settled %u times", (unsigned long long)seed,
                          (unsigned long long)i, t);
            uint32_t l = rig_nverdicts(KVT_CHAN_LOOKUP, 10 + i, zero);
            cr_assert_leq(l, 1, "seed %llu: lookup %llu settled %u times", (unsigned long long)seed,
                          (unsigned long long)i, l);
            cr_assert_leq(rig_nverdicts(KVT_CHAN_LOAD, 10 + i, zero), l);
        }
        cr_assert_eq(rig_counter(R.agg, "agg.open"), 0, "seed %llu: an unsettled key",
                     (unsigned long long)seed);
        cr_assert_eq(rig_counter(R.agg, "agg.timeouts"), seed % 4 == 0 && nlookup + ntouch ? 1 : 0,
                     "seed %llu", (unsigned long long)seed);
        for (int r = 0; r < TP; r++) {
            uint64_t pins = rig_counter(R.w[r], "worker.lookup_pins");
            uint64_t rel = rig_counter(R.w[r], "worker.lookup_rel_load") +
                           rig_counter(R.w[r], "worker.lookup_rel_msg") +
                           rig_counter(R.w[r], "worker.lookup_rel_ttl");
            cr_assert_eq(pins, nlookup, "seed %llu rank %d", (unsigned long long)seed, r);
            cr_assert_eq(rel, pins, "seed %llu rank %d: every lease released once",
                         (unsigned long long)seed, r);
            cr_assert_eq(rig_counter(R.w[r], "worker.lookup_rel_stale"), 0);
            cr_assert_eq(rig_counter(R.w[r], "worker.lookup_leases"), 0);
            kvt_pool_stats_t ps;
            kvt_pool_stats(kvt_storage_pool(R.st[r]), &ps);
            cr_assert_eq(ps.leases_active, 0, "seed %llu rank %d: a lease left",
                         (unsigned long long)seed, r);
            cr_assert_eq(ps.objects_writing, 0);
        }
        rig_no_drops();
        rig_down();
    }
}

//  A lookup that asks rank 0 only, on two ranks: rank 0 answers (and pins),
//  rank 1 neither answers nor pins, the aggregator settles the key on rank
//  0's report alone, and the load that uses it lands on both ranks (rank 1
//  had no pin to release). Rank 0's view stands for every rank's: where
//  rank 1 holds less, the load that trusted it fails there (the scheduler
//  retreats, B2), which is why every rank is asked by default.
Test(actors, a_rank0_only_lookup_settles_on_rank_0_and_its_load_lands_on_every_rank, .timeout = 30)
{
    rig_up(25000000000ull);
    for (int r = 0; r < TP; r++)
        rig_fill(r, SRC, 8, 1200);
    rig_spec(KVT_MSG_SAVE_SPEC, 1, 0, 2, SRC, 1200);
    rig_run();
    kvt_hash_t keys[2] = {K(1200), K(1201)};
    kvt_msg_t m;
    memset(&m, 0, sizeof m);
    m.kind = KVT_MSG_LOOKUP;
    m.u.lookup =
        (kvt_lookup_t){.op = {2, 1}, .keys = keys, .nkeys = 2, .pin = true, .rank0_only = true};
    rig_all(&m);
    kvt_system_run(R.sys, kvt_system_now(R.sys) + 10000000ull, 0);
    const kvt_verdict_t *v = rig_verdict(KVT_CHAN_LOOKUP, 2);
    cr_assert(v->ok, "settled on rank 0's report, not by the aggregator's bound");
    cr_assert_eq(v->held, 2);
    //  Leases first: a counter read runs the system to quiescence (and the
    //  lease out to its TTL).
    for (int r = 0; r < TP; r++) {
        kvt_pool_stats_t ps;
        kvt_pool_stats(kvt_storage_pool(R.st[r]), &ps);
        cr_assert_eq(ps.leases_active, r == 0 ? 1 : 0, "rank %d: only rank 0 pins", r);
    }
    memset(&m, 0, sizeof m);
    m.kind = KVT_MSG_LOAD_SPEC;
    m.u.load_spec = (kvt_load_spec_t){.op = {2, 1},
                                      .start = 0,
                                      .end = 2 * CS,
                                      .keys = keys,
                                      .nkeys = 2,
                                      .blocks = (uint32_t *)DST,
                                      .nblocks = 2 * BPC,
                                      .lookup = true};
    rig_all(&m);
    kvt_system_run(R.sys, kvt_system_now(R.sys) + 10000000ull, 0);
    cr_assert(rig_verdict(KVT_CHAN_LOAD, 2)->ok, "the load lands on both ranks");
    for (int r = 0; r < TP; r++)
        cr_assert(rig_check(r, DST, 2 * BPC, 1200), "rank %d restored the right bytes", r);
    cr_assert_eq(rig_counter(R.w[0], "worker.lookup_rel_load"), 1);
    cr_assert_eq(rig_counter(R.w[1], "worker.lookup_rel_none"), 1, "rank 1 had no pin");
    cr_assert_eq(rig_counter(R.w[0], "worker.lookups"), 1);
    cr_assert_eq(rig_counter(R.w[1], "worker.lookups"), 0, "rank 1 was not asked");
    cr_assert_eq(rig_counter(R.w[1], "worker.lookups_not_asked"), 1);

    //  Rank 1 lost chunk 1: rank 0's answer (2) is optimistic for it.
    cr_assert_eq(kvt_pool_remove(kvt_storage_pool(R.st[1]), 7, K(1201), KVT_OBJ_KV), 0);
    memset(&m, 0, sizeof m);
    m.kind = KVT_MSG_LOOKUP;
    m.u.lookup = (kvt_lookup_t){.op = {3, 1}, .keys = keys, .nkeys = 2, .rank0_only = true};
    rig_all(&m);
    kvt_system_run(R.sys, kvt_system_now(R.sys) + 10000000ull, 0);
    cr_assert_eq(rig_verdict(KVT_CHAN_LOOKUP, 3)->held, 2, "rank 0's view");
    memset(&m, 0, sizeof m);
    m.kind = KVT_MSG_LOAD_SPEC;
    m.u.load_spec = (kvt_load_spec_t){.op = {3, 1},
                                      .start = 0,
                                      .end = 2 * CS,
                                      .keys = keys,
                                      .nkeys = 2,
                                      .blocks = (uint32_t *)DST,
                                      .nblocks = 2 * BPC};
    rig_all(&m);
    rig_run();
    const kvt_verdict_t *lv = rig_verdict(KVT_CHAN_LOAD, 3);
    cr_assert_not(lv->ok, "the load that trusted it fails on rank 1");
    cr_assert_eq(lv->detail, KVT_DETAIL_MISS);
    cr_assert_eq(rig_counter(R.agg, "agg.not_asked"), 0);
    cr_assert_eq(rig_counter(R.agg, "agg.timeouts"), 0);
    cr_assert_eq(rig_counter(R.agg, "agg.open"), 0);
    for (int r = 0; r < TP; r++) {
        kvt_pool_stats_t ps;
        kvt_pool_stats(kvt_storage_pool(R.st[r]), &ps);
        cr_assert_eq(ps.leases_active, 0, "rank %d: nothing pinned at the end", r);
    }
    rig_no_drops();
    rig_down();
}
