/*  Aggregator core: quorum, failure dominance, tombstones, staleness. */
#include <criterion/criterion.h>
#include <string.h>

#include "actors/aggregator/kvt_agg.h"

static kvt_completion_t C(uint8_t chan, uint64_t req, uint32_t gen, uint64_t key, uint32_t rank,
                          bool ok, uint32_t detail)
{
    kvt_completion_t c;
    memset(&c, 0, sizeof c);
    c.chan = chan;
    c.op.req = req;
    c.op.gen = gen;
    c.key.lo = key;
    c.rank = rank;
    c.ok = ok;
    c.detail = detail;
    return c;
}

Test(agg, rule_A1_settles_only_when_every_rank_reported)
{
    kvt_agg_t *a = kvt_agg_new(3, 16, 0);
    kvt_verdict_t v;
    kvt_completion_t c0 = C(KVT_CHAN_LOAD, 1, 1, 0, 0, true, 0);
    kvt_completion_t c1 = C(KVT_CHAN_LOAD, 1, 1, 0, 1, true, 0);
    kvt_completion_t c2 = C(KVT_CHAN_LOAD, 1, 1, 0, 2, true, 0);
    cr_assert_eq(kvt_agg_report(a, &c0, 0, &v), 0);
    cr_assert_eq(kvt_agg_report(a, &c1, 0, &v), 0);
    cr_assert_eq(kvt_agg_report(a, &c2, 0, &v), 1);
    cr_assert(v.ok);
    cr_assert_eq(v.op.req, 1);
    cr_assert_eq(v.chan, KVT_CHAN_LOAD);
    kvt_agg_destroy(&a);
}

Test(agg, rule_A1_failure_dominates)
{
    kvt_agg_t *a = kvt_agg_new(2, 16, 0);
    kvt_verdict_t v;
    kvt_completion_t c0 = C(KVT_CHAN_SAVE, 1, 1, 9, 0, true, 0);
    kvt_completion_t c1 = C(KVT_CHAN_SAVE, 1, 1, 9, 1, false, KVT_DETAIL_NO_SPACE);
    kvt_agg_report(a, &c0, 0, &v);
    cr_assert_eq(kvt_agg_report(a, &c1, 0, &v), 1);
    cr_assert_not(v.ok);
    cr_assert_eq(v.detail, KVT_DETAIL_NO_SPACE);
    cr_assert_eq(v.nfailed, 1);
    cr_assert_eq(v.key.lo, 9);
    kvt_agg_destroy(&a);
}

Test(agg, rule_A2_late_duplicate_is_dropped)
{
    kvt_agg_t *a = kvt_agg_new(1, 16, 0);
    kvt_verdict_t v;
    kvt_completion_t c = C(KVT_CHAN_SAVE, 4, 1, 7, 0, true, 0);
    cr_assert_eq(kvt_agg_report(a, &c, 0, &v), 1);
    cr_assert_eq(kvt_agg_report(a, &c, 0, &v), -1, "a settled key must not reopen");
    kvt_agg_stats_t st;
    kvt_agg_stats(a, &st);
    cr_assert_eq(st.late_dropped, 1);
    cr_assert_eq(st.open, 0);
    kvt_agg_destroy(&a);
}

Test(agg, rule_A2_touches_never_evict_tombstones)
{
    kvt_agg_t *a = kvt_agg_new(1, 4, 0);
    kvt_verdict_t v;
    kvt_completion_t save = C(KVT_CHAN_SAVE, 1, 1, 1, 0, true, 0);
    kvt_agg_report(a, &save, 0, &v);
    //  Far more touch rounds than the ring holds.
    for (uint64_t i = 0; i < 100; i++) {
        kvt_completion_t t = C(KVT_CHAN_TOUCH, 0, (uint32_t)i, i, 0, true, 0);
        cr_assert_eq(kvt_agg_report(a, &t, 0, &v), 1);
    }
    cr_assert_eq(kvt_agg_report(a, &save, 0, &v), -1, "the save's tombstone survived");
    kvt_agg_destroy(&a);
}

Test(agg, tombstone_ring_is_bounded)
{
    kvt_agg_t *a = kvt_agg_new(1, 4, 0);
    kvt_verdict_t v;
    for (uint64_t i = 0; i < 5; i++) {
        kvt_completion_t c = C(KVT_CHAN_SAVE, 1, 1, i, 0, true, 0);
        kvt_agg_report(a, &c, 0, &v);
    }
    //  Key 0 fell out of the 4-entry ring; key 4 is still remembered.
    kvt_completion_t c0 = C(KVT_CHAN_SAVE, 1, 1, 0, 0, true, 0);
    kvt_completion_t c4 = C(KVT_CHAN_SAVE, 1, 1, 4, 0, true, 0);
    cr_assert_eq(kvt_agg_report(a, &c4, 0, &v), -1);
    cr_assert_eq(kvt_agg_report(a, &c0, 0, &v), 1);
    kvt_agg_destroy(&a);
}

Test(agg, rule_A3_generations_are_separate_keys)
{
    kvt_agg_t *a = kvt_agg_new(2, 16, 0);
    kvt_verdict_t v;
    kvt_completion_t g1 = C(KVT_CHAN_LOAD, 7, 1, 0, 0, true, 0);
    kvt_completion_t g2 = C(KVT_CHAN_LOAD, 7, 2, 0, 1, true, 0);
    cr_assert_eq(kvt_agg_report(a, &g1, 0, &v), 0);
    cr_assert_eq(kvt_agg_report(a, &g2, 0, &v), 0, "gen 2's rank 1 must not settle gen 1");
    kvt_agg_stats_t st;
    kvt_agg_stats(a, &st);
    cr_assert_eq(st.open, 2);
    kvt_agg_destroy(&a);
}

Test(agg, duplicate_from_same_rank_does_not_count_twice)
{
    kvt_agg_t *a = kvt_agg_new(2, 16, 0);
    kvt_verdict_t v;
    kvt_completion_t c = C(KVT_CHAN_LOAD, 1, 1, 0, 0, true, 0);
    cr_assert_eq(kvt_agg_report(a, &c, 0, &v), 0);
    cr_assert_eq(kvt_agg_report(a, &c, 0, &v), -1);
    kvt_agg_stats_t st;
    kvt_agg_stats(a, &st);
    cr_assert_eq(st.dup_dropped, 1);
    cr_assert_eq(st.settled, 0);
    kvt_agg_destroy(&a);
}

Test(agg, bad_rank_is_dropped)
{
    kvt_agg_t *a = kvt_agg_new(2, 16, 0);
    kvt_verdict_t v;
    kvt_completion_t c = C(KVT_CHAN_LOAD, 1, 1, 0, 5, true, 0);
    cr_assert_eq(kvt_agg_report(a, &c, 0, &v), -1);
    kvt_agg_stats_t st;
    kvt_agg_stats(a, &st);
    cr_assert_eq(st.bad_rank, 1);
    kvt_agg_destroy(&a);
}

Test(agg, rule_A4_incomplete_key_is_surfaced_once)
{
    kvt_agg_t *a = kvt_agg_new(2, 16, 1000);
    kvt_verdict_t v;
    kvt_completion_t c = C(KVT_CHAN_LOAD, 1, 1, 0, 0, true, 0);
    kvt_agg_report(a, &c, 100, &v);
    kvt_completion_t d = C(KVT_CHAN_LOAD, 2, 1, 0, 0, true, 0);
    kvt_agg_report(a, &d, 900, &v);
    cr_assert_eq(kvt_agg_next_stale(a), 1100, "the oldest open key turns stale at 1100");
    cr_assert_eq(kvt_agg_check_stale(a, 1000, NULL, 0), 0);
    kvt_completion_t out[4];
    cr_assert_eq(kvt_agg_check_stale(a, 1100, out, 4), 1);
    cr_assert_eq(out[0].op.req, 1);
    cr_assert_eq(kvt_agg_check_stale(a, 1200, out, 4), 0, "surfaced once");
    cr_assert_eq(kvt_agg_next_stale(a), 1900);
    cr_assert_eq(kvt_agg_check_stale(a, 1900, out, 4), 1);
    cr_assert_eq(out[0].op.req, 2);
    //  A surfaced key still settles normally.
    kvt_completion_t c1 = C(KVT_CHAN_LOAD, 1, 1, 0, 1, true, 0);
    cr_assert_eq(kvt_agg_report(a, &c1, 2000, &v), 1);
    kvt_agg_stats_t st;
    kvt_agg_stats(a, &st);
    cr_assert_eq(st.stale, 2);
    cr_assert_eq(st.open, 1);
    kvt_agg_destroy(&a);
}

Test(agg, many_keys_grow_and_settle)
{
    kvt_agg_t *a = kvt_agg_new(2, 1024, 0);
    kvt_verdict_t v;
    for (uint64_t i = 0; i < 5000; i++) {
        kvt_completion_t c = C(KVT_CHAN_SAVE, i, 1, i, 0, true, 0);
        cr_assert_eq(kvt_agg_report(a, &c, 0, &v), 0);
    }
    uint64_t settled = 0;
    for (uint64_t i = 0; i < 5000; i++) {
        kvt_completion_t c = C(KVT_CHAN_SAVE, i, 1, i, 1, true, 0);
        settled += kvt_agg_report(a, &c, 0, &v) == 1;
    }
    cr_assert_eq(settled, 5000);
    kvt_agg_destroy(&a);
}
