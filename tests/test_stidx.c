/*  State-offload index (kvt_stidx): the image index, touches and their
    verdicts, the verify hold, and the load lifecycle (rules I1–I7), driven
    directly with a hand-driven clock. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/scheduler/kvt_stidx.h"
#include "kvtier/kvt_store.h"

#define MS 1000ull
#define S  1000000ull

static kvt_hash_t H(uint64_t x)
{
    kvt_hash_t h = {x * 7 + 1, x};
    return h;
}

static kvt_opid_t OP(uint64_t req, uint32_t gen)
{
    kvt_opid_t op = {req, gen};
    return op;
}

//  Log lines captured from the index.
typedef struct {
    int lines;      //  lines logged
    int expired;    //  of them, expired-hold warnings
    int window;     //  of them, the start-up window line
    char last[256]; //  the last line
} s_log_t;

static void s_log(void *arg, const char *line)
{
    s_log_t *l = arg;
    l->lines++;
    l->expired += strstr(line, "expired") != NULL;
    l->window += strstr(line, "verified window") != NULL;
    snprintf(l->last, sizeof l->last, "%s", line);
}

static kvt_stidx_t *s_new(uint32_t cap, s_log_t *log)
{
    kvt_stidx_cfg_t cfg = {.hash_cap = cap,
                           .can_load = true,
                           .window_us = 5 * S,
                           .hold_bound_us = 2 * S,
                           .log = log ? s_log : NULL,
                           .log_arg = log};
    kvt_stidx_t *x = kvt_stidx_new(&cfg);
    cr_assert_not_null(x);
    return x;
}

static void s_check(kvt_stidx_t *x)
{
    char err[256] = "";
    cr_assert_eq(kvt_stidx_check(x, true, err, sizeof err), 0, "%s", err);
}

static kvt_stidx_stats_t s_stats(kvt_stidx_t *x)
{
    kvt_stidx_stats_t st;
    kvt_stidx_stats(x, &st);
    cr_assert_eq(st.invariant_violations, 0);
    return st;
}

//  A load requested and carried in a plan.
static void s_load(kvt_stidx_t *x, kvt_opid_t op, kvt_hash_t h, uint32_t slot, uint64_t now)
{
    cr_assert_eq(kvt_stidx_request_load(x, op, h, slot, now), 0);
    cr_assert_eq(kvt_stidx_carried(x, op), 0);
}

// ---------------------------------------------------------------- I1 ----

Test(stidx, rule_I1_invariant_dispatched_equals_settled_plus_outstanding)
{
    kvt_stidx_t *x = s_new(16, NULL);
    kvt_stidx_note_stored(x, H(1), 0);
    uint32_t fs = 99;
    //  One load down every path, the invariant checked (key sets too)
    //  after each call.
    s_load(x, OP(1, 1), H(1), 0, 0);
    s_check(x);
    s_load(x, OP(2, 1), H(1), 1, 0);
    s_check(x);
    s_load(x, OP(3, 1), H(1), 2, 0);
    s_check(x);
    cr_assert_eq(kvt_stidx_request_load(x, OP(4, 1), H(1), 3, 0), 0);
    s_check(x);
    cr_assert_eq(kvt_stidx_request_load(x, OP(5, 1), H(1), 4, 0), 0);
    s_check(x);
    s_load(x, OP(6, 1), H(1), 5, 0);
    s_check(x);
    s_load(x, OP(7, 1), H(1), 6, 0);
    s_check(x);
    cr_assert_eq(kvt_stidx_complete(x, OP(1, 1), 1, &fs), KVT_STIDX_LIVE);
    s_check(x);
    cr_assert_eq(kvt_stidx_fail(x, OP(2, 1), false, &fs), KVT_STIDX_LIVE);
    s_check(x);
    cr_assert_eq(kvt_stidx_abandon(x, OP(3, 1), &fs), KVT_STIDX_LIVE);
    s_check(x);
    cr_assert_eq(kvt_stidx_decline(x, OP(4, 1)), 0);
    s_check(x);
    cr_assert_eq(kvt_stidx_decline(x, OP(5, 1)), 0);
    s_check(x);
    cr_assert_eq(kvt_stidx_orphan(x, OP(6, 1), 10), 1);
    s_check(x);
    uint32_t slots[4];
    cr_assert_eq(kvt_stidx_reclaim(x, 100 * S, 1 * S, slots, NULL, 4), 1);
    cr_assert_eq(slots[0], 5);
    s_check(x);
    //  A late report of the reclaimed orphan settles nothing.
    cr_assert_eq(kvt_stidx_complete(x, OP(6, 1), 100 * S, &fs), KVT_STIDX_STALE);
    s_check(x);
    kvt_stidx_stats_t st = s_stats(x);
    cr_assert_eq(st.dispatched, 7);
    cr_assert_eq(st.completed, 1);
    cr_assert_eq(st.failed, 1);
    cr_assert_eq(st.abandoned, 1);
    cr_assert_eq(st.declined, 2);
    cr_assert_eq(st.reclaimed, 1);
    cr_assert_eq(st.outstanding, 1);
    cr_assert_eq(st.dispatched, st.completed + st.failed + st.abandoned + st.declined +
                                    st.reclaimed + st.outstanding);
    cr_assert_eq(st.stale_reports, 1);
    kvt_stidx_load_t l;
    cr_assert(kvt_stidx_load_of(x, 7, &l));
    cr_assert(!kvt_stidx_load_of(x, 1, &l), "a settled load is not its request's load");
    cr_assert_eq(kvt_stidx_complete(x, OP(7, 1), 200 * S, &fs), KVT_STIDX_LIVE);
    s_check(x);
    st = s_stats(x);
    cr_assert_eq(st.outstanding, 0);
    kvt_stidx_destroy(&x);
    cr_assert_null(x);
}

Test(stidx, stats_read_runs_the_cheap_check_and_counts_nothing_when_sound)
{
    kvt_stidx_t *x = s_new(4, NULL);
    kvt_stidx_note_stored(x, H(1), 0);
    for (uint32_t i = 0; i < 600; i++) {
        s_load(x, OP(i + 1, 1), H(1), i % 7, 0);
        kvt_stidx_stats_t st = s_stats(x); //  asserts no violation, 600 reads (many slices)
        cr_assert_eq(st.outstanding, 1);
        uint32_t fs;
        cr_assert_eq(kvt_stidx_complete(x, OP(i + 1, 1), 0, &fs), KVT_STIDX_LIVE);
    }
    kvt_stidx_destroy(&x);
}

//  Reads of stats until the first violation is counted; 0 when none within
//  `limit`. Between reads, churn (when set) forgets and re-notes an image
//  far from the broken one, so the pass walks changing tables.
static uint32_t s_reads_to_detect(kvt_stidx_t *x, uint32_t limit, uint32_t churn)
{
    for (uint32_t r = 1; r <= limit; r++) {
        if (churn) {
            if (r % 2)
                cr_assert(kvt_stidx_forget(x, H(churn)));
            else
                kvt_stidx_note_stored(x, H(churn), r);
        }
        kvt_stidx_stats_t st;
        kvt_stidx_stats(x, &st);
        if (st.invariant_violations > 0)
            return r;
    }
    return 0;
}

Test(stidx, key_set_slice_finds_a_broken_image_within_one_pass)
{
    //  20000 images: a pass is ~20000 / KVT_STIDX_SLICE reads plus the load
    //  records and maps' slots (well under 2048). The broken record is near
    //  the end of the pass.
    enum { N = 20000 };
    for (uint32_t churn = 0; churn <= N - 10; churn += N - 10) {
        s_log_t log = {0};
        kvt_stidx_t *x = s_new(N, &log);
        for (uint32_t i = 0; i < N; i++)
            kvt_stidx_note_stored(x, H(i), 0);
        s_load(x, OP(1, 1), H(3), 0, 0); //  the load tables are walked too
        kvt_stidx_stats_t st = s_stats(x);
        cr_assert_eq(kvt_stidx_break_for_test(x, KVT_STIDX_BREAK_IMAGE, H(N - 20)), 0);
        //  Only the key-set check sees it: the full check at once, the cheap
        //  one never.
        char err[256] = "";
        cr_assert_eq(kvt_stidx_check(x, false, err, sizeof err), 0, "%s", err);
        cr_assert_eq(kvt_stidx_check(x, true, err, sizeof err), -1);
        cr_assert(strstr(err, "not under its hash"), "%s", err);
        uint32_t bound = (N + 2048) / KVT_STIDX_SLICE + 2;
        uint32_t r = s_reads_to_detect(x, 2 * bound + 2, churn);
        cr_assert_gt(r, 0, "not found in %u reads (churn %u)", 2 * bound + 2, churn);
        //  Within the pass under way (the fault lies ahead of its cursor), and
        //  not sooner than the slices allow: each read checks a bounded slice.
        cr_assert_leq(r, bound, "found after %u reads (churn %u)", r, churn);
        cr_assert_geq(r, (N - 20) / KVT_STIDX_SLICE, "found after %u reads (churn %u)", r, churn);
        cr_assert_eq(log.lines, 2, "the window line and one violation warning");
        cr_assert(strstr(log.last, "not under its hash"), "%s", log.last);
        //  The pass goes on past the fault; the next pass finds it again.
        kvt_stidx_stats(x, &st);
        uint64_t before = st.invariant_violations;
        uint32_t again = 0;
        for (uint32_t k = 1; k <= 2 * bound && !again; k++) {
            kvt_stidx_stats(x, &st);
            if (st.invariant_violations > before)
                again = k;
        }
        cr_assert_gt(again, 0, "not found again within a pass");
        kvt_stidx_destroy(&x);
    }
}

Test(stidx, cheap_check_runs_on_every_stats_read)
{
    s_log_t log = {0};
    kvt_stidx_t *x = s_new(4, &log);
    kvt_stidx_note_stored(x, H(1), 0);
    s_load(x, OP(1, 1), H(1), 0, 0);
    s_stats(x);
    cr_assert_eq(kvt_stidx_break_for_test(x, KVT_STIDX_BREAK_COUNT, H(1)), 0);
    for (uint64_t r = 1; r <= 10; r++) {
        kvt_stidx_stats_t st;
        kvt_stidx_stats(x, &st);
        cr_assert_eq(st.invariant_violations, r, "read %llu", (unsigned long long)r);
    }
    cr_assert_eq(log.lines, 2, "the window line and one violation warning");
    cr_assert(strstr(log.last, "dispatched"), "%s", log.last);
    kvt_stidx_destroy(&x);
}

Test(stidx, key_set_pass_compares_totals_only_over_an_unchanged_table)
{
    //  Images forgotten behind the cursor while a pass walks 20000 records:
    //  the pass's count is stale, not a fault; the index stays sound. The
    //  load records and maps take under 2048 units, so records 0..39 are
    //  walked by read r0 and the image phase ends after r0 + 40.
    enum { N = 20000 };
    kvt_stidx_t *x = s_new(N, NULL);
    for (uint32_t i = 0; i < N; i++)
        kvt_stidx_note_stored(x, H(i), 0);
    uint32_t r0 = (2048 + 40) / KVT_STIDX_SLICE + 1, reads = 2 * (N + 2048) / KVT_STIDX_SLICE + 2;
    for (uint32_t r = 0; r < reads; r++) {
        s_stats(x); //  asserts no violation
        if (r >= r0 && r < r0 + 40)
            cr_assert(kvt_stidx_forget(x, H(r - r0)));
    }
    cr_assert_eq(s_stats(x).images, N - 40);
    s_check(x);
    kvt_stidx_destroy(&x);
}

// ---------------------------------------------------------------- I2 ----

Test(stidx, rule_I2_reclaim_frees_only_orphans_timed_from_orphan_time)
{
    kvt_stidx_t *x = s_new(4, NULL);
    kvt_stidx_note_stored(x, H(1), 0);
    //  A: dispatched at 0, torn down at 10 s. B: dispatched at 0, alive.
    s_load(x, OP(1, 1), H(1), 3, 0);
    s_load(x, OP(2, 1), H(1), 4, 0);
    cr_assert_eq(kvt_stidx_orphan(x, OP(1, 1), 10 * S), 1);
    cr_assert(kvt_stidx_slot_reserved(x, 3), "an orphan's slot stays reserved");
    uint32_t slots[4];
    //  12 s after dispatch but 2 s after orphan time: the 5 s window is not over.
    cr_assert_eq(kvt_stidx_reclaim(x, 12 * S, 5 * S, slots, NULL, 4), 0,
                 "the reclaim window is measured from orphan time, not dispatch time");
    cr_assert(kvt_stidx_slot_reserved(x, 3));
    cr_assert_eq(kvt_stidx_reclaim(x, 15 * S - 1, 5 * S, slots, NULL, 4), 0);
    cr_assert_eq(kvt_stidx_reclaim(x, 15 * S, 5 * S, slots, NULL, 4), 1);
    cr_assert_eq(slots[0], 3);
    cr_assert(!kvt_stidx_slot_reserved(x, 3));
    //  The live load is never reclaimed, however old.
    cr_assert_eq(kvt_stidx_reclaim(x, 1000 * S, 5 * S, slots, NULL, 4), 0);
    cr_assert(kvt_stidx_slot_reserved(x, 4));
    //  Timeout 0 disables reclamation.
    cr_assert_eq(kvt_stidx_orphan(x, OP(2, 1), 1000 * S), 1);
    cr_assert_eq(kvt_stidx_reclaim(x, 5000 * S, 0, slots, NULL, 4), 0);
    cr_assert_eq(kvt_stidx_reclaim(x, 5000 * S, 5 * S, slots, NULL, 4), 1);
    kvt_stidx_stats_t st = s_stats(x);
    cr_assert_eq(st.reclaimed, 2);
    cr_assert_eq(st.orphaned, 2);
    cr_assert_eq(st.outstanding, 0);
    s_check(x);
    kvt_stidx_destroy(&x);
}

Test(stidx, rule_I2_a_reserved_slot_is_never_handed_to_another_load)
{
    kvt_stidx_t *x = s_new(4, NULL);
    kvt_stidx_note_stored(x, H(1), 0);
    s_load(x, OP(1, 1), H(1), 3, 0);
    cr_assert_eq(kvt_stidx_orphan(x, OP(1, 1), 1 * S), 1);
    cr_assert_eq(kvt_stidx_request_load(x, OP(2, 1), H(1), 3, 2 * S), -1,
                 "the orphan still holds slot 3: the worker may be writing it");
    s_load(x, OP(3, 1), H(1), 5, 2 * S);
    cr_assert_eq(kvt_stidx_request_load(x, OP(4, 1), H(1), 5, 2 * S), -1,
                 "a live request's slot is never taken");
    kvt_stidx_stats_t st = s_stats(x);
    cr_assert_eq(st.refused, 2);
    //  The orphan's own report gives its slot back.
    uint32_t fs = 0;
    cr_assert_eq(kvt_stidx_complete(x, OP(1, 1), 3 * S, &fs), KVT_STIDX_ORPHAN);
    cr_assert_eq(fs, 3);
    cr_assert_eq(kvt_stidx_request_load(x, OP(2, 1), H(1), 3, 3 * S), 0);
    s_check(x);
    kvt_stidx_destroy(&x);
}

Test(stidx, rule_I2_readmitted_request_old_orphan_cannot_settle_new_load)
{
    kvt_stidx_t *x = s_new(4, NULL);
    kvt_stidx_note_stored(x, H(1), 0);
    //  Admission 1 of request 7 loads into slot 3 and is torn down mid-load.
    s_load(x, OP(7, 1), H(1), 3, 0);
    cr_assert_eq(kvt_stidx_orphan(x, OP(7, 1), 1 * S), 1);
    //  Admission 2 of the same request loads into slot 4.
    s_load(x, OP(7, 2), H(1), 4, 2 * S);
    kvt_stidx_load_t l;
    cr_assert(kvt_stidx_load_of(x, 7, &l));
    cr_assert_eq(l.op.gen, 2);
    cr_assert_eq(l.slot, 4);
    //  The first admission's late report settles its own orphan only.
    uint32_t fs = 0;
    cr_assert_eq(kvt_stidx_complete(x, OP(7, 1), 3 * S, &fs), KVT_STIDX_ORPHAN);
    cr_assert_eq(fs, 3);
    cr_assert(kvt_stidx_slot_reserved(x, 4), "the new load is still outstanding");
    cr_assert(kvt_stidx_load_of(x, 7, &l));
    cr_assert_eq(l.op.gen, 2);
    cr_assert(!l.orphaned);
    cr_assert_eq(kvt_stidx_fail(x, OP(7, 1), false, &fs), KVT_STIDX_STALE);
    cr_assert(kvt_stidx_slot_reserved(x, 4));
    kvt_stidx_stats_t st = s_stats(x);
    cr_assert_eq(st.outstanding, 1);
    cr_assert_eq(st.completed, 1);
    cr_assert_eq(kvt_stidx_complete(x, OP(7, 2), 4 * S, &fs), KVT_STIDX_LIVE);
    s_check(x);
    kvt_stidx_destroy(&x);
}

Test(stidx, rule_I2_readmission_detaches_a_load_its_caller_did_not_orphan)
{
    kvt_stidx_t *x = s_new(4, NULL);
    kvt_stidx_note_stored(x, H(1), 0);
    s_load(x, OP(7, 1), H(1), 3, 0);
    //  Re-admitted without the teardown telling the index: the earlier load
    //  is detached and orphaned, its slot kept.
    s_load(x, OP(7, 2), H(1), 4, 5 * S);
    kvt_stidx_stats_t st = s_stats(x);
    cr_assert_eq(st.detached, 1);
    cr_assert_eq(st.orphans, 1);
    cr_assert(kvt_stidx_slot_reserved(x, 3));
    uint32_t fs = 0;
    cr_assert_eq(kvt_stidx_complete(x, OP(7, 1), 6 * S, &fs), KVT_STIDX_ORPHAN);
    cr_assert_eq(fs, 3);
    cr_assert(kvt_stidx_slot_reserved(x, 4));
    //  An older admission cannot load after a newer one.
    cr_assert_eq(kvt_stidx_request_load(x, OP(7, 1), H(1), 5, 7 * S), -1);
    s_check(x);
    kvt_stidx_destroy(&x);
}

// ---------------------------------------------------------------- I3 ----

Test(stidx, rule_I3_verdict_in_one_step_failure_in_the_next_still_retract)
{
    kvt_stidx_t *x = s_new(4, NULL);
    kvt_stidx_note_stored(x, H(1), 0);
    kvt_stidx_note_stored(x, H(2), 0);
    uint32_t fs;
    //  Step N: the state verdict (a real miss); step N + 1: the load's failure.
    s_load(x, OP(1, 1), H(1), 0, 0);
    kvt_stidx_state_verdict(x, H(1), false, KVT_DETAIL_MISS, 1 * S);
    cr_assert(!kvt_stidx_could_serve(x, H(1)), "the miss retracts with no request id");
    cr_assert_eq(kvt_stidx_fail(x, OP(1, 1), false, &fs), KVT_STIDX_LIVE);
    cr_assert(!kvt_stidx_could_serve(x, H(1)));
    //  The other order: the fused failure first (no retraction), the
    //  verdict a step later.
    s_load(x, OP(2, 1), H(2), 1, 0);
    cr_assert_eq(kvt_stidx_fail(x, OP(2, 1), false, &fs), KVT_STIDX_LIVE);
    cr_assert(kvt_stidx_could_serve(x, H(2)));
    kvt_stidx_state_verdict(x, H(2), false, KVT_DETAIL_MISS, 2 * S);
    cr_assert(!kvt_stidx_could_serve(x, H(2)));
    kvt_stidx_stats_t st = s_stats(x);
    cr_assert_eq(st.forgotten_miss, 2);
    s_check(x);
    kvt_stidx_destroy(&x);
}

Test(stidx, rule_I3_fused_failure_and_abandon_do_not_retract)
{
    kvt_stidx_t *x = s_new(4, NULL);
    kvt_stidx_note_stored(x, H(1), 0);
    uint32_t fs;
    s_load(x, OP(1, 1), H(1), 0, 0);
    cr_assert_eq(kvt_stidx_fail(x, OP(1, 1), false, &fs), KVT_STIDX_LIVE);
    cr_assert(kvt_stidx_could_serve(x, H(1)), "a fused failure may be the KV leg's");
    s_load(x, OP(2, 1), H(1), 0, 0);
    cr_assert_eq(kvt_stidx_abandon(x, OP(2, 1), &fs), KVT_STIDX_LIVE);
    cr_assert(kvt_stidx_could_serve(x, H(1)), "an abandon is not a miss");
    kvt_stidx_state_verdict(x, H(1), false, KVT_DETAIL_SKIPPED, 1 * S);
    kvt_stidx_state_verdict(x, H(1), false, KVT_DETAIL_IO, 1 * S);
    cr_assert(kvt_stidx_could_serve(x, H(1)), "a neutral or I/O verdict is not a miss");
    kvt_stidx_stats_t st = s_stats(x);
    cr_assert_eq(st.forgotten_miss, 0);
    kvt_stidx_destroy(&x);
}

Test(stidx, rule_I3_a_state_miss_on_the_load_report_retracts)
{
    kvt_stidx_t *x = s_new(4, NULL);
    kvt_stidx_note_stored(x, H(1), 0);
    uint32_t fs;
    s_load(x, OP(1, 1), H(1), 0, 0);
    cr_assert_eq(kvt_stidx_fail(x, OP(1, 1), true, &fs), KVT_STIDX_LIVE);
    cr_assert(!kvt_stidx_could_serve(x, H(1)));
    kvt_stidx_destroy(&x);
}

// ---------------------------------------------------------------- I4 ----

Test(stidx, rule_I4_could_serve_is_pure)
{
    kvt_stidx_t *x = s_new(2, NULL);
    kvt_stidx_note_stored(x, H(1), 0);
    kvt_stidx_note_stored(x, H(2), 0);
    kvt_stidx_stats_t before = s_stats(x);
    for (int i = 0; i < 100; i++)
        cr_assert(kvt_stidx_could_serve(x, H(1)));
    kvt_stidx_stats_t after = s_stats(x);
    cr_assert_eq(memcmp(&before, &after, sizeof before), 0, "could_serve moved a counter");
    //  It refreshed nothing: H(1) is still the LRU's old end.
    kvt_stidx_note_stored(x, H(3), 0);
    cr_assert(!kvt_stidx_could_serve(x, H(1)));
    cr_assert(kvt_stidx_could_serve(x, H(2)));
    //  and registered no touch: the first want_touch still sends one.
    uint64_t r = 0;
    cr_assert(kvt_stidx_want_touch(x, H(2), 0, &r));
    cr_assert_eq(r, 1);
    kvt_stidx_destroy(&x);
}

Test(stidx, rule_I4_a_registered_hit_refreshes_the_image)
{
    kvt_stidx_t *x = s_new(2, NULL);
    kvt_stidx_note_stored(x, H(1), 0);
    kvt_stidx_note_stored(x, H(2), 0);
    cr_assert(kvt_stidx_want_touch(x, H(1), 0, NULL));
    kvt_stidx_note_stored(x, H(3), 0);
    cr_assert(kvt_stidx_could_serve(x, H(1)), "a voted hit is young");
    cr_assert(!kvt_stidx_could_serve(x, H(2)));
    kvt_stidx_stats_t st = s_stats(x);
    cr_assert_eq(st.evicted, 1);
    cr_assert_eq(st.images, 2);
    kvt_stidx_destroy(&x);
}

Test(stidx, rule_I4_touches_are_throttled_per_hash)
{
    kvt_stidx_t *x = s_new(4, NULL);
    kvt_stidx_note_stored(x, H(1), 0);
    kvt_stidx_note_stored(x, H(2), 0);
    uint64_t r1 = 0, r2 = 0, r3 = 0;
    cr_assert(kvt_stidx_want_touch(x, H(1), 0, &r1));
    cr_assert(!kvt_stidx_want_touch(x, H(1), 499 * MS, NULL));
    cr_assert(kvt_stidx_want_touch(x, H(2), 499 * MS, &r2), "the throttle is per hash");
    cr_assert(kvt_stidx_want_touch(x, H(1), 500 * MS, &r3));
    cr_assert(r1 < r2 && r2 < r3, "rounds are unique");
    cr_assert(!kvt_stidx_want_touch(x, H(9), 0, NULL), "nothing indexed: nothing to touch");
    kvt_stidx_stats_t st = s_stats(x);
    cr_assert_eq(st.touches_sent, 3);
    cr_assert_eq(st.touches_throttled, 1);
    kvt_stidx_destroy(&x);
}

Test(stidx, rule_I4_a_store_only_role_serves_touches_and_holds_nothing)
{
    kvt_stidx_cfg_t cfg = {.hash_cap = 4, .can_load = false};
    kvt_stidx_t *x = kvt_stidx_new(&cfg);
    kvt_stidx_note_stored(x, H(1), 0);
    cr_assert(!kvt_stidx_could_serve(x, H(1)));
    cr_assert(!kvt_stidx_want_touch(x, H(1), 0, NULL));
    cr_assert(!kvt_stidx_hold(x, H(1), 100 * S));
    kvt_stidx_destroy(&x);
}

// ---------------------------------------------------------------- I5 ----

Test(stidx, rule_I5_gone_forgets_and_present_counts_unrefreshed)
{
    kvt_stidx_t *x = s_new(4, NULL);
    kvt_stidx_note_stored(x, H(1), 0);
    kvt_stidx_note_stored(x, H(2), 0);
    uint64_t r1, r2;
    cr_assert(kvt_stidx_want_touch(x, H(1), 1 * S, &r1));
    cr_assert(kvt_stidx_want_touch(x, H(2), 1 * S, &r2));
    cr_assert_eq(kvt_stidx_touch_verdict(x, H(1), r1, KVT_TOUCH_GONE, 2 * S), 0);
    cr_assert(!kvt_stidx_could_serve(x, H(1)));
    cr_assert_eq(kvt_stidx_touch_verdict(x, H(2), r2, KVT_TOUCH_PRESENT, 2 * S), 0);
    cr_assert(kvt_stidx_could_serve(x, H(2)));
    cr_assert_eq(kvt_stidx_touch_verdict(x, H(2), r2, KVT_TOUCH_REFRESHED, 2 * S), 0);
    cr_assert_eq(kvt_stidx_touch_verdict(x, H(2), r2, 3, 2 * S), -1, "answer out of range");
    kvt_stidx_stats_t st = s_stats(x);
    cr_assert_eq(st.forgotten_gone, 1);
    cr_assert_eq(st.touches_unrefreshed, 1);
    cr_assert_eq(st.images, 1);
    kvt_stidx_destroy(&x);
}

Test(stidx, rule_I5_a_gone_verdict_older_than_a_store_is_ignored)
{
    kvt_stidx_t *x = s_new(4, NULL);
    kvt_stidx_note_stored(x, H(1), 0);
    uint64_t r1, r2;
    cr_assert(kvt_stidx_want_touch(x, H(1), 1 * S, &r1));
    kvt_stidx_note_stored(x, H(1), 1 * S + 1); //  the store lands after the touch was sent
    cr_assert_eq(kvt_stidx_touch_verdict(x, H(1), r1, KVT_TOUCH_GONE, 2 * S), 0);
    cr_assert(kvt_stidx_could_serve(x, H(1)), "the touch looked before the new bytes landed");
    //  A touch sent after the store is believed.
    cr_assert(kvt_stidx_want_touch(x, H(1), 2 * S, &r2));
    cr_assert_eq(kvt_stidx_touch_verdict(x, H(1), r2, KVT_TOUCH_GONE, 3 * S), 0);
    cr_assert(!kvt_stidx_could_serve(x, H(1)));
    kvt_stidx_stats_t st = s_stats(x);
    cr_assert_eq(st.touches_stale, 1);
    cr_assert_eq(st.forgotten_gone, 1);
    kvt_stidx_destroy(&x);
}

// ---------------------------------------------------------------- I6 ----

Test(stidx, rule_I6_lost_verdict_releases_hold_within_bound)
{
    s_log_t log = {0};
    kvt_stidx_t *x = s_new(4, &log);
    kvt_stidx_note_stored(x, H(1), 0);
    kvt_stidx_note_stored(x, H(2), 0);
    //  At 10 s the image is no longer confirmed (window 5 s): the admission
    //  is held. Verdicts never arrive; the held admission is re-probed every
    //  50 ms and its touch really is resent every 0.5 s.
    uint64_t t0 = 10 * S, released = 0;
    int resent = 0;
    for (uint64_t t = t0; t < t0 + 10 * S; t += 50 * MS) {
        resent += kvt_stidx_want_touch(x, H(1), t, NULL);
        if (!kvt_stidx_hold(x, H(1), t)) {
            released = t;
            break;
        }
    }
    cr_assert(released > 0, "the hold never ended");
    cr_assert_geq(resent, 4, "the touch was resent while held");
    cr_assert_gt(released - t0, 2 * S, "released before the bound");
    cr_assert_leq(released - t0, 2 * S + 50 * MS,
                  "the bound runs from the first hold, resending does not extend it");
    //  No further hold until new evidence.
    cr_assert(!kvt_stidx_hold(x, H(1), released + 1 * S));
    kvt_stidx_stats_t st = s_stats(x);
    cr_assert_eq(st.holds, 1);
    cr_assert_eq(st.holds_expired, 1);
    cr_assert_eq(log.expired, 1);
    //  A second lost verdict on another hash is counted, not warned again.
    cr_assert(kvt_stidx_hold(x, H(2), 30 * S));
    cr_assert(!kvt_stidx_hold(x, H(2), 33 * S));
    st = s_stats(x);
    cr_assert_eq(st.holds_expired, 2);
    cr_assert_eq(log.expired, 1, "the expiry is warned once");
    kvt_stidx_destroy(&x);
}

Test(stidx, rule_I6_evidence_ends_the_hold_and_rearms_it)
{
    kvt_stidx_t *x = s_new(4, NULL);
    kvt_stidx_note_stored(x, H(1), 0);
    uint64_t r;
    cr_assert(kvt_stidx_hold(x, H(1), 10 * S));
    cr_assert(kvt_stidx_want_touch(x, H(1), 10 * S, &r));
    cr_assert(kvt_stidx_hold(x, H(1), 11 * S));
    cr_assert_eq(kvt_stidx_touch_verdict(x, H(1), r, KVT_TOUCH_REFRESHED, 11 * S + 1), 0);
    cr_assert(!kvt_stidx_hold(x, H(1), 11 * S + 2), "the verdict ended the hold");
    //  Once that confirmation is stale the next admission is held again,
    //  timed from its own first hold: time held before the verdict does not count.
    cr_assert(kvt_stidx_hold(x, H(1), 17 * S));
    cr_assert(kvt_stidx_hold(x, H(1), 18 * S));
    cr_assert(!kvt_stidx_hold(x, H(1), 19 * S + 1));
    kvt_stidx_stats_t st = s_stats(x);
    cr_assert_eq(st.holds, 2);
    cr_assert_eq(st.holds_released, 1);
    cr_assert_eq(st.holds_expired, 1);
    //  After an expiry, a store re-arms it; so does a completed load.
    kvt_stidx_note_stored(x, H(1), 20 * S);
    cr_assert(!kvt_stidx_hold(x, H(1), 24 * S));
    cr_assert(kvt_stidx_hold(x, H(1), 26 * S));
    s_load(x, OP(1, 1), H(1), 0, 26 * S);
    uint32_t fs;
    cr_assert_eq(kvt_stidx_complete(x, OP(1, 1), 27 * S, &fs), KVT_STIDX_LIVE);
    cr_assert(!kvt_stidx_hold(x, H(1), 28 * S), "a completed load is evidence");
    kvt_stidx_destroy(&x);
}

Test(stidx, rule_I6_confirmed_within_the_window_is_not_held)
{
    kvt_stidx_t *x = s_new(4, NULL);
    kvt_stidx_note_stored(x, H(1), 0);
    cr_assert(!kvt_stidx_hold(x, H(1), 5 * S));
    cr_assert(kvt_stidx_hold(x, H(1), 5 * S + 1));
    cr_assert(!kvt_stidx_hold(x, H(9), 100 * S), "an image the index cannot serve is not held");
    kvt_stidx_destroy(&x);
}

//  A state verdict on which every rank skipped its leg (ok, SKIPPED) is no
//  evidence: it ends no hold and opens no verified window; it is counted.
Test(stidx, rule_I6_a_neutral_state_verdict_is_no_evidence)
{
    kvt_stidx_t *x = s_new(4, NULL);
    kvt_stidx_note_stored(x, H(1), 0);
    kvt_stidx_note_stored(x, H(2), 0);
    cr_assert(kvt_stidx_hold(x, H(1), 10 * S));
    kvt_stidx_state_verdict(x, H(1), true, KVT_DETAIL_SKIPPED, 10 * S + 1);
    cr_assert(kvt_stidx_hold(x, H(1), 10 * S + 2), "still held");
    //  H(2), unconfirmed since 0: a neutral verdict at 20 s opens no window.
    kvt_stidx_state_verdict(x, H(2), true, KVT_DETAIL_SKIPPED, 20 * S);
    cr_assert(kvt_stidx_hold(x, H(2), 20 * S + 1), "held: no window was opened");
    kvt_stidx_stats_t st = s_stats(x);
    cr_assert_eq(st.neutral_verdicts, 2);
    cr_assert_eq(st.holds_released, 0);
    cr_assert(kvt_stidx_could_serve(x, H(1)), "and nothing is retracted");
    //  A real ok verdict is evidence.
    kvt_stidx_state_verdict(x, H(1), true, KVT_DETAIL_OK, 10 * S + 3);
    cr_assert(!kvt_stidx_hold(x, H(1), 10 * S + 4));
    cr_assert_eq(s_stats(x).holds_released, 1);
    kvt_stidx_destroy(&x);
}

Test(stidx, rule_I6_window_is_derived_from_the_pool_and_logged_once)
{
    const uint64_t GiB = 1ull << 30;
    cr_assert_eq(kvt_stidx_window_us(0), 5 * S);
    cr_assert_eq(kvt_stidx_window_us(20 * GiB), 5 * S);
    cr_assert_eq(kvt_stidx_window_us(100 * GiB), 25 * S);
    cr_assert_eq(kvt_stidx_window_us(208 * GiB + GiB / 2), 52125 * MS);
    cr_assert_eq(kvt_stidx_window_us(240 * GiB), 60 * S);
    cr_assert_eq(kvt_stidx_window_us(4096 * GiB), 60 * S);
    cr_assert_eq(kvt_stidx_window_us(UINT64_MAX), 60 * S);
    s_log_t log = {0};
    kvt_stidx_t *x = s_new(4, &log);
    cr_assert_eq(log.window, 1);
    cr_assert(strstr(log.last, "5000 ms") != NULL, "%s", log.last);
    kvt_stidx_destroy(&x);
}

// ---------------------------------------------------------------- I7 ----

Test(stidx, rule_I7_an_undispatched_load_is_declined_and_no_report_settles_it)
{
    kvt_stidx_t *x = s_new(4, NULL);
    kvt_stidx_note_stored(x, H(1), 0);
    cr_assert_eq(kvt_stidx_request_load(x, OP(1, 1), H(1), 0, 0), 0);
    cr_assert_eq(kvt_stidx_request_load(x, OP(2, 1), H(1), 1, 0), 0);
    cr_assert_eq(kvt_stidx_request_load(x, OP(3, 1), H(1), 2, 0), 0);
    cr_assert_eq(kvt_stidx_carried(x, OP(1, 1)), 0);
    cr_assert_eq(kvt_stidx_decline(x, OP(2, 1)), 0, "a worker that declines tells the index");
    //  A report cannot be about a load that never went out.
    uint32_t fs;
    cr_assert_eq(kvt_stidx_complete(x, OP(3, 1), 0, &fs), KVT_STIDX_STALE);
    cr_assert_eq(kvt_stidx_decline(x, OP(3, 1)), 0, "the armed leg with no carrier is declined");
    cr_assert(!kvt_stidx_slot_reserved(x, 2));
    cr_assert_eq(kvt_stidx_decline(x, OP(3, 1)), -1, "once");
    kvt_stidx_stats_t st = s_stats(x);
    cr_assert_eq(st.declined, 2);
    cr_assert_eq(st.armed, 0);
    cr_assert_eq(st.outstanding, 1);
    cr_assert_eq(kvt_stidx_decline(x, OP(1, 1)), -1, "a carried load cannot be declined");
    s_check(x);
    kvt_stidx_destroy(&x);
}

Test(stidx, rule_I7_a_torn_down_load_that_never_went_out_settles_at_once)
{
    kvt_stidx_t *x = s_new(4, NULL);
    kvt_stidx_note_stored(x, H(1), 0);
    cr_assert_eq(kvt_stidx_request_load(x, OP(1, 1), H(1), 6, 0), 0);
    cr_assert_eq(kvt_stidx_orphan(x, OP(1, 1), 1 * S), 0, "nothing can write the slot");
    cr_assert(!kvt_stidx_slot_reserved(x, 6));
    kvt_stidx_stats_t st = s_stats(x);
    cr_assert_eq(st.abandoned, 1);
    cr_assert_eq(st.orphans, 0);
    cr_assert_eq(st.outstanding, 0);
    kvt_stidx_destroy(&x);
}

// ------------------------------------------------------------ property ----

//  The model: per request, its current admission's load (if any) and the
//  orphans of earlier admissions; a slot pool the "caller" owns.
#define P_REQS  12
#define P_SLOTS 32

typedef struct {
    uint32_t gen;      //  current admission
    int live;          //  0 none, 1 armed, 2 carried
    uint32_t slot;     //  live load's slot
    uint32_t has_slot; //  the request holds a slot it took from the pool
} p_req_t;

static uint64_t s_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

Test(stidx, property_random_sequences_keep_the_invariant)
{
    for (uint64_t seed = 1; seed <= 12; seed++) {
        uint64_t rs = seed * 0x9E3779B97F4A7C15ull;
        kvt_stidx_t *x = s_new(8, NULL);
        p_req_t req[P_REQS] = {0};
        bool pool[P_SLOTS]; //  true: free in the caller's pool
        for (int i = 0; i < P_SLOTS; i++)
            pool[i] = true;
        //  orphan ops the model expects (req, gen) → its slot
        kvt_opid_t orph[256];
        uint32_t orph_slot[256], norph = 0;
        uint64_t now = 0;
        for (int step = 0; step < 1000; step++) {
            now += s_rand(&rs) % (300 * MS);
            uint32_t r = (uint32_t)(s_rand(&rs) % P_REQS);
            p_req_t *q = &req[r];
            kvt_opid_t op = OP(r + 1, q->gen);
            uint32_t fs = UINT32_MAX;
            switch (s_rand(&rs) % 11) {
            case 0: //  store / lookup / touches on images
                kvt_stidx_note_stored(x, H(s_rand(&rs) % 12), now);
                break;
            case 1: {
                uint64_t round;
                kvt_hash_t h = H(s_rand(&rs) % 12);
                if (kvt_stidx_want_touch(x, h, now, &round) && s_rand(&rs) % 3)
                    kvt_stidx_touch_verdict(x, h, round, (uint8_t)(s_rand(&rs) % 3), now);
                kvt_stidx_hold(x, h, now);
                break;
            }
            case 2: //  admit and request a load
                if (q->live == 0) {
                    uint32_t s;
                    for (s = 0; s < P_SLOTS && !pool[s]; s++)
                        ;
                    if (s == P_SLOTS)
                        break;
                    q->gen++;
                    op = OP(r + 1, q->gen);
                    cr_assert_eq(kvt_stidx_request_load(x, op, H(s_rand(&rs) % 12), s, now), 0);
                    pool[s] = false;
                    q->live = 1;
                    q->slot = s;
                }
                break;
            case 3: //  carried, or declined
                if (q->live == 1) {
                    if (s_rand(&rs) % 4) {
                        cr_assert_eq(kvt_stidx_carried(x, op), 0);
                        q->live = 2;
                    } else {
                        cr_assert_eq(kvt_stidx_decline(x, op), 0);
                        q->live = 0;
                        pool[q->slot] = true;
                    }
                }
                break;
            case 4: //  a report for the live load
            case 5: {
                int how = (int)(s_rand(&rs) % 3);
                int rc = how == 0   ? kvt_stidx_complete(x, op, now, &fs)
                         : how == 1 ? kvt_stidx_fail(x, op, s_rand(&rs) % 2, &fs)
                                    : kvt_stidx_abandon(x, op, &fs);
                if (q->live == 2 || (q->live == 1 && how == 2)) {
                    cr_assert_eq(rc, KVT_STIDX_LIVE);
                    q->live = 0;
                    pool[q->slot] = true;
                } else if (q->live == 0)
                    cr_assert_eq(rc, KVT_STIDX_STALE);
                else
                    cr_assert_eq(rc, KVT_STIDX_STALE, "a report for an armed load");
                break;
            }
            case 6: //  teardown mid-load
                if (q->live) {
                    int rc = kvt_stidx_orphan(x, op, now);
                    if (q->live == 2) {
                        cr_assert_eq(rc, 1);
                        cr_assert_lt(norph, 256);
                        orph[norph] = op;
                        orph_slot[norph++] = q->slot;
                    } else {
                        cr_assert_eq(rc, 0);
                        pool[q->slot] = true;
                    }
                    q->live = 0;
                }
                break;
            case 7: //  a late report for an orphan
                if (norph > 0) {
                    uint32_t k = (uint32_t)(s_rand(&rs) % norph);
                    int rc = kvt_stidx_complete(x, orph[k], now, &fs);
                    cr_assert_eq(rc, KVT_STIDX_ORPHAN);
                    cr_assert_eq(fs, orph_slot[k]);
                    pool[fs] = true;
                    orph[k] = orph[--norph];
                    orph_slot[k] = orph_slot[norph];
                }
                break;
            case 8: { //  reclaim
                uint32_t slots[8];
                uint32_t n = kvt_stidx_reclaim(x, now, 2 * S, slots, NULL, 8);
                for (uint32_t i = 0; i < n; i++) {
                    uint32_t k;
                    for (k = 0; k < norph && orph_slot[k] != slots[i]; k++)
                        ;
                    cr_assert_lt(k, norph, "reclaim freed a slot that is no orphan's");
                    pool[slots[i]] = true;
                    orph[k] = orph[--norph];
                    orph_slot[k] = orph_slot[norph];
                }
                break;
            }
            case 9: //  end of the step's planning: what is still armed is declined
                for (uint32_t k = 0; k < P_REQS; k++) {
                    p_req_t *d = &req[k];
                    if (d->live != 1)
                        continue;
                    cr_assert_eq(kvt_stidx_decline(x, OP(k + 1, d->gen)), 0);
                    d->live = 0;
                    pool[d->slot] = true;
                }
                cr_assert_eq(s_stats(x).armed, 0);
                break;
            default: //  a real state miss or a stale report
                if (s_rand(&rs) % 2)
                    kvt_stidx_state_verdict(x, H(s_rand(&rs) % 12), false, KVT_DETAIL_MISS, now);
                else
                    cr_assert_eq(kvt_stidx_complete(x, OP(r + 1, q->gen + 1), now, &fs),
                                 KVT_STIDX_STALE);
                break;
            }
            s_check(x);
            //  Every slot is free in the pool or reserved by the index, never both.
            for (uint32_t s = 0; s < P_SLOTS; s++)
                cr_assert_neq(pool[s], kvt_stidx_slot_reserved(x, s), "seed %llu step %d slot %u",
                              (unsigned long long)seed, step, s);
            kvt_stidx_stats_t st = s_stats(x);
            cr_assert_eq(st.orphans, norph);
        }
        //  Quiescence: every live load reported, every orphan reclaimed.
        for (uint32_t r = 0; r < P_REQS; r++) {
            uint32_t fs;
            if (req[r].live)
                kvt_stidx_abandon(x, OP(r + 1, req[r].gen), &fs);
        }
        uint32_t slots[256];
        kvt_stidx_reclaim(x, now + 100 * S, 2 * S, slots, NULL, 256);
        kvt_stidx_stats_t st = s_stats(x);
        cr_assert_eq(st.outstanding, 0);
        for (uint32_t s = 0; s < P_SLOTS; s++)
            cr_assert(!kvt_stidx_slot_reserved(x, s));
        s_check(x);
        kvt_stidx_destroy(&x);
    }
}

// ---------------------------------------------------------------- docs ----

//  The text of docs/metrics.md from the heading starting with `title` to
//  the next heading; the caller frees it.
static char *s_doc_section(const char *title)
{
    FILE *f = fopen(KVT_SOURCE_DIR "/docs/metrics.md", "rb");
    cr_assert_not_null(f);
    static char buf[1 << 17];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *start = strstr(buf, title);
    cr_assert_not_null(start, "no section %s", title);
    char *end = strstr(start + 1, "\n## ");
    size_t len = end ? (size_t)(end - start) : strlen(start);
    char *out = malloc(len + 1);
    memcpy(out, start, len);
    out[len] = 0;
    return out;
}

Test(stidx, every_counter_is_documented)
{
    kvt_stidx_t *x = s_new(4, NULL);
    kvt_counter_t c[64];
    uint32_t n = 0;
    kvt_stidx_counters(x, c, &n, 64);
    cr_assert_eq(n, 28);
    char *doc = s_doc_section("## State-offload index (`stidx.*`");
    for (uint32_t i = 0; i < n; i++) {
        char full[96], part[96];
        snprintf(full, sizeof full, "`%s`", c[i].name);
        snprintf(part, sizeof part, "`%s`", c[i].name + strlen("stidx."));
        cr_assert(strstr(doc, full) || strstr(doc, part), "%s is not in docs/metrics.md",
                  c[i].name);
    }
    free(doc);
    kvt_stidx_destroy(&x);
}

//  A load with no slot (the scheduler core's KV-only loads): it reserves no
//  slot, two of them never collide, and it lives, settles, is orphaned and
//  reclaimed (with its operation id reported) as any load.
Test(stidx, a_slotless_load_reserves_no_slot_and_settles_like_any_load)
{
    kvt_stidx_t *x = s_new(0, NULL);
    cr_assert_eq(kvt_stidx_request_load(x, OP(1, 1), H(0), KVT_STIDX_NO_SLOT, 0), 0);
    cr_assert_eq(kvt_stidx_request_load(x, OP(2, 1), H(0), KVT_STIDX_NO_SLOT, 0), 0,
                 "no slot to collide on");
    cr_assert(!kvt_stidx_slot_reserved(x, KVT_STIDX_NO_SLOT));
    cr_assert_eq(kvt_stidx_carried(x, OP(1, 1)), 0);
    cr_assert_eq(kvt_stidx_carried(x, OP(2, 1)), 0);
    s_check(x);
    uint32_t slot = 7;
    cr_assert_eq(kvt_stidx_complete(x, OP(1, 1), 1 * S, &slot), KVT_STIDX_LIVE);
    cr_assert_eq(kvt_stidx_orphan(x, OP(2, 1), 2 * S), 1);
    cr_assert(kvt_stidx_is_orphan(x, OP(2, 1)));
    s_check(x);
    uint32_t slots[4];
    kvt_opid_t ops[4];
    cr_assert_eq(kvt_stidx_reclaim(x, 6 * S, 5 * S, slots, ops, 4), 0, "timed from orphan time");
    cr_assert_eq(kvt_stidx_reclaim(x, 7 * S, 5 * S, slots, ops, 4), 1);
    cr_assert_eq(ops[0].req, 2);
    cr_assert_eq(ops[0].gen, 1);
    cr_assert_eq(slots[0], KVT_STIDX_NO_SLOT);
    cr_assert(!kvt_stidx_is_orphan(x, OP(2, 1)));
    s_check(x);
    kvt_stidx_stats_t st = s_stats(x);
    cr_assert_eq(st.dispatched, 2);
    cr_assert_eq(st.completed, 1);
    cr_assert_eq(st.reclaimed, 1);
    cr_assert_eq(st.outstanding, 0);
    kvt_stidx_destroy(&x);
}
