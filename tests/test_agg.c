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

//  Exactly `late` reports were dropped on a settled key and `dup` as a
//  rank's second report on an open key.
static void s_drops(const kvt_agg_t *a, uint64_t late, uint64_t dup)
{
    kvt_agg_stats_t st;
    kvt_agg_stats(a, &st);
    cr_assert_eq(st.late_dropped, late, "late_dropped %llu, expected %llu",
                 (unsigned long long)st.late_dropped, (unsigned long long)late);
    cr_assert_eq(st.dup_dropped, dup, "dup_dropped %llu, expected %llu",
                 (unsigned long long)st.dup_dropped, (unsigned long long)dup);
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
    s_drops(a, 0, 0);
    kvt_agg_destroy(&a);
}

//  Reports one key from every rank of an nranks aggregator, in the order
//  `order` (rank ids); fail[r] != 0 makes rank r fail with that detail.
//  Only the last report may settle the key. Returns the verdict.
static kvt_verdict_t s_settle_in_order(uint32_t nranks, const uint32_t *order, const uint32_t *fail)
{
    kvt_agg_t *a = kvt_agg_new(nranks, 16, 0);
    kvt_verdict_t v;
    memset(&v, 0, sizeof v);
    for (uint32_t i = 0; i < nranks; i++) {
        uint32_t r = order[i];
        kvt_completion_t c = C(KVT_CHAN_SAVE, 1, 1, 9, r, fail[r] == 0, fail[r]);
        int rc = kvt_agg_report(a, &c, 0, &v);
        cr_assert_eq(rc, i + 1 == nranks ? 1 : 0, "report %u of %u (rank %u) returned %d", i + 1,
                     nranks, r, rc);
    }
    kvt_agg_stats_t st;
    kvt_agg_stats(a, &st);
    cr_assert_eq(st.late_dropped + st.dup_dropped, 0, "nothing dropped as a duplicate");
    cr_assert_eq(st.reports, nranks);
    kvt_agg_destroy(&a);
    return v;
}

static const uint32_t NRANKS[] = {1, 2, 3, 4, 8};

//  Ranks in order (dir 0) or reversed (dir 1).
static void s_order(uint32_t *order, uint32_t n, int dir)
{
    for (uint32_t i = 0; i < n; i++)
        order[i] = dir ? n - 1 - i : i;
}

Test(agg, rule_A1_one_failing_report_in_any_position_fails_the_verdict)
{
    for (size_t k = 0; k < sizeof NRANKS / sizeof NRANKS[0]; k++) {
        uint32_t n = NRANKS[k], order[8], fail[8];
        for (int dir = 0; dir < 2; dir++) {
            s_order(order, n, dir);
            for (uint32_t pos = 0; pos < n; pos++) {
                memset(fail, 0, sizeof fail);
                fail[order[pos]] = KVT_DETAIL_NO_SPACE;
                kvt_verdict_t v = s_settle_in_order(n, order, fail);
                cr_assert_not(v.ok, "%u ranks, the failing report at position %u: verdict ok", n,
                              pos);
                cr_assert_eq(v.detail, KVT_DETAIL_NO_SPACE, "%u ranks, position %u: detail %u", n,
                             pos, v.detail);
                cr_assert_eq(v.nfailed, 1);
                cr_assert_eq(v.key.lo, 9);
            }
            memset(fail, 0, sizeof fail);
            kvt_verdict_t v = s_settle_in_order(n, order, fail);
            cr_assert(v.ok, "%u ranks, all ok", n);
            cr_assert_eq(v.detail, KVT_DETAIL_OK);
            cr_assert_eq(v.nfailed, 0);
        }
    }
}

Test(agg, rule_A1_two_failing_reports_in_any_positions_fail_with_the_first_detail)
{
    for (size_t k = 0; k < sizeof NRANKS / sizeof NRANKS[0]; k++) {
        uint32_t n = NRANKS[k], order[8], fail[8];
        for (int dir = 0; dir < 2; dir++) {
            s_order(order, n, dir);
            for (uint32_t p1 = 0; p1 < n; p1++)
                for (uint32_t p2 = p1 + 1; p2 < n; p2++) {
                    //  The first failing report's detail is the verdict's.
                    memset(fail, 0, sizeof fail);
                    fail[order[p1]] = KVT_DETAIL_NO_SPACE;
                    fail[order[p2]] = KVT_DETAIL_IO;
                    kvt_verdict_t v = s_settle_in_order(n, order, fail);
                    cr_assert_not(v.ok, "%u ranks, failing at %u and %u: verdict ok", n, p1, p2);
                    cr_assert_eq(v.detail, KVT_DETAIL_NO_SPACE, "%u ranks, %u/%u: detail %u", n, p1,
                                 p2, v.detail);
                    cr_assert_eq(v.nfailed, 2);
                    //  ... except that a miss on any rank wins, first or not.
                    fail[order[p1]] = KVT_DETAIL_IO;
                    fail[order[p2]] = KVT_DETAIL_MISS;
                    v = s_settle_in_order(n, order, fail);
                    cr_assert_not(v.ok);
                    cr_assert_eq(v.detail, KVT_DETAIL_MISS, "%u ranks, a later miss: detail %u", n,
                                 v.detail);
                    fail[order[p1]] = KVT_DETAIL_MISS;
                    fail[order[p2]] = KVT_DETAIL_IO;
                    v = s_settle_in_order(n, order, fail);
                    cr_assert_eq(v.detail, KVT_DETAIL_MISS, "%u ranks, an earlier miss: detail %u",
                                 n, v.detail);
                    cr_assert_eq(v.nfailed, 2);
                }
        }
    }
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
    s_drops(a, 1, 0);
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
    s_drops(a, 1, 0);
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
    s_drops(a, 1, 0);
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
    s_drops(a, 0, 0);
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
    s_drops(a, 0, 1);
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
    s_drops(a, 0, 0);
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
    s_drops(a, 0, 0);
    kvt_agg_destroy(&a);
}
