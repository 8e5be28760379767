/*  Aggregator core: quorum, failure dominance, neutral state verdicts, the
    store channel's fenced AND, tombstones and the touch ring, staleness. */
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

Test(agg, rule_A2_touches_never_evict_store_tombstones_through_a_4_entry_ring)
{
    kvt_agg_t *a = kvt_agg_new(1, 4, 0);
    kvt_verdict_t v;
    //  A store (save) key, a source_safe key and a load key settle first.
    kvt_completion_t save = C(KVT_CHAN_SAVE, 1, 1, 1, 0, true, 0);
    kvt_completion_t src = C(KVT_CHAN_SOURCE_SAFE, 1, 1, 1, 0, true, 0);
    kvt_completion_t load = C(KVT_CHAN_LOAD, 2, 1, 0, 0, true, 0);
    cr_assert_eq(kvt_agg_report(a, &save, 0, &v), 1);
    cr_assert_eq(kvt_agg_report(a, &src, 0, &v), 1);
    cr_assert_eq(kvt_agg_report(a, &load, 0, &v), 1);
    //  100 touch rounds, each on both touch channels: 50 times the ring.
    for (uint64_t i = 0; i < 100; i++) {
        kvt_completion_t t = C(KVT_CHAN_TOUCH, i, KVT_TOUCH_GEN, 77, 0, true, 0);
        kvt_completion_t r = C(KVT_CHAN_TOUCH_REFRESH, i, KVT_TOUCH_GEN, 77, 0, true, 0);
        cr_assert_eq(kvt_agg_report(a, &t, 0, &v), 1);
        cr_assert_eq(kvt_agg_report(a, &r, 0, &v), 1);
    }
    cr_assert_eq(kvt_agg_report(a, &save, 0, &v), -1, "the store tombstone survived");
    cr_assert_eq(kvt_agg_report(a, &src, 0, &v), -1, "the source tombstone survived");
    cr_assert_eq(kvt_agg_report(a, &load, 0, &v), -1, "the load tombstone survived");
    kvt_agg_stats_t st;
    kvt_agg_stats(a, &st);
    cr_assert_eq(st.settled, 203);
    cr_assert_eq(st.open, 0);
    s_drops(a, 3, 0);
    kvt_agg_destroy(&a);
}

Test(agg, rule_A2_lookup_keys_are_tombstoned)
{
    kvt_agg_t *a = kvt_agg_new(1, 4, 0);
    kvt_verdict_t v;
    kvt_completion_t l = C(KVT_CHAN_LOOKUP, 3, 1, 0, 0, true, 0);
    cr_assert_eq(kvt_agg_report(a, &l, 0, &v), 1);
    cr_assert_eq(kvt_agg_report(a, &l, 0, &v), -1, "a late lookup report must not reopen");
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

Test(agg, rule_A4_incomplete_key_settles_failed_with_timeout_at_the_bound)
{
    kvt_agg_t *a = kvt_agg_new(2, 16, 1000);
    kvt_verdict_t v, out[4];
    bool warn[4];
    kvt_completion_t c = C(KVT_CHAN_LOAD, 1, 1, 0, 0, true, 0);
    cr_assert_eq(kvt_agg_report(a, &c, 100, &v), 0);
    kvt_completion_t d = C(KVT_CHAN_LOAD, 2, 1, 0, 0, true, 0);
    cr_assert_eq(kvt_agg_report(a, &d, 900, &v), 0);
    cr_assert_eq(kvt_agg_next_expiry(a), 1100, "the oldest open key times out at 1100");
    cr_assert_eq(kvt_agg_expire(a, 1099, out, warn, 4), 0, "not before the bound");
    cr_assert_eq(kvt_agg_expire(a, 1100, out, warn, 4), 1);
    cr_assert_eq(out[0].op.req, 1);
    cr_assert_not(out[0].ok, "a timeout is a failure, never a success");
    cr_assert_eq(out[0].detail, KVT_DETAIL_TIMEOUT);
    cr_assert_eq(out[0].nfailed, 1, "the rank that never reported");
    cr_assert(warn[0], "the first timeout on the channel is flagged");
    cr_assert_eq(kvt_agg_expire(a, 1200, out, warn, 4), 0, "settled once");
    cr_assert_eq(kvt_agg_next_expiry(a), 1900);
    cr_assert_eq(kvt_agg_expire(a, 1900, out, warn, 4), 1);
    cr_assert_eq(out[0].op.req, 2);
    cr_assert_not(warn[0], "warned once per channel");
    cr_assert_eq(kvt_agg_next_expiry(a), UINT64_MAX, "nothing open");
    //  The missing rank's late report lands on a tombstone.
    kvt_completion_t c1 = C(KVT_CHAN_LOAD, 1, 1, 0, 1, true, 0);
    cr_assert_eq(kvt_agg_report(a, &c1, 2000, &v), -1);
    kvt_agg_stats_t st;
    kvt_agg_stats(a, &st);
    cr_assert_eq(st.timeouts, 2);
    cr_assert_eq(st.settled, 2);
    cr_assert_eq(st.settled_failed, 2);
    cr_assert_eq(st.open, 0);
    s_drops(a, 1, 0);
    kvt_agg_destroy(&a);
}

//  A key settled by the bound has one verdict, whatever its channel: a touch
//  key (never tombstoned when every rank reported) that timed out drops the
//  slow rank's later report as late instead of opening the key again.
Test(agg, rule_A4_a_timed_out_touch_key_settles_once)
{
    kvt_agg_t *a = kvt_agg_new(2, 16, 100);
    kvt_verdict_t v, out[4];
    bool warn[4];
    kvt_completion_t c = C(KVT_CHAN_TOUCH, 5, KVT_TOUCH_GEN, 9, 0, true, 0);
    cr_assert_eq(kvt_agg_report(a, &c, 0, &v), 0);
    cr_assert_eq(kvt_agg_expire(a, 100, out, warn, 4), 1);
    cr_assert_not(out[0].ok);
    c.rank = 1; //  the slow rank, after the verdict
    cr_assert_eq(kvt_agg_report(a, &c, 150, &v), -1, "dropped as late");
    cr_assert_eq(kvt_agg_expire(a, 1000, out, warn, 4), 0, "no second verdict");
    kvt_agg_stats_t st;
    kvt_agg_stats(a, &st);
    cr_assert_eq(st.late_dropped, 1);
    cr_assert_eq(st.settled, 1);
    cr_assert_eq(st.open, 0);
    kvt_agg_destroy(&a);
}

Test(agg, rule_A4_timeouts_warn_once_per_channel_and_settle_every_channel)
{
    static const uint8_t chans[] = {KVT_CHAN_LOAD,        KVT_CHAN_SAVE,          KVT_CHAN_STATE,
                                    KVT_CHAN_TOUCH,       KVT_CHAN_TOUCH_REFRESH, KVT_CHAN_LOOKUP,
                                    KVT_CHAN_SOURCE_SAFE, KVT_CHAN_FENCE};
    kvt_agg_t *a = kvt_agg_new(2, 64, 50);
    kvt_verdict_t v, out[32];
    bool warn[32];
    for (int round = 0; round < 2; round++)
        for (size_t i = 0; i < sizeof chans; i++) {
            kvt_completion_t c =
                C(chans[i], 10 + (uint64_t)round, 1, chans[i] == KVT_CHAN_LOAD ? 0 : 5, 0, true, 0);
            cr_assert_eq(kvt_agg_report(a, &c, 0, &v), 0);
        }
    cr_assert_eq(kvt_agg_expire(a, 50, out, warn, 32), 2 * sizeof chans);
    uint32_t warned[KVT_CHAN_MAX + 1] = {0};
    for (size_t i = 0; i < 2 * sizeof chans; i++) {
        cr_assert_not(out[i].ok);
        cr_assert_eq(out[i].detail, KVT_DETAIL_TIMEOUT);
        warned[out[i].chan] += warn[i];
    }
    for (size_t i = 0; i < sizeof chans; i++)
        cr_assert_eq(warned[chans[i]], 1, "channel %u warned %u times", chans[i], warned[chans[i]]);
    s_drops(a, 0, 0);
    kvt_agg_destroy(&a);
}

Test(agg, rule_A1_touch_verdict_is_the_lowest_answer_and_failure_dominant)
{
    kvt_agg_t *a = kvt_agg_new(3, 16, 0);
    kvt_verdict_t v;
    //  touch: ok unless GONE; answers REFRESHED, PRESENT, REFRESHED → PRESENT, ok.
    static const uint8_t ans[3] = {2, 1, 2};
    for (uint32_t r = 0; r < 3; r++) {
        kvt_completion_t c = C(KVT_CHAN_TOUCH, 4, KVT_TOUCH_GEN, 9, r, true, 0);
        c.touch = ans[r];
        cr_assert_eq(kvt_agg_report(a, &c, 0, &v), r == 2 ? 1 : 0);
    }
    cr_assert(v.ok);
    cr_assert_eq(v.touch, 1, "the lowest answer (PRESENT)");
    //  touch_refresh: the PRESENT rank failed it → the verdict fails.
    for (uint32_t r = 0; r < 3; r++) {
        kvt_completion_t c = C(KVT_CHAN_TOUCH_REFRESH, 4, KVT_TOUCH_GEN, 9, r, ans[r] == 2,
                               ans[r] == 2 ? 0 : KVT_DETAIL_SKIPPED);
        c.touch = ans[r];
        cr_assert_eq(kvt_agg_report(a, &c, 0, &v), r == 2 ? 1 : 0);
    }
    cr_assert_not(v.ok);
    cr_assert_eq(v.nfailed, 1);
    cr_assert_eq(v.touch, 1);
    s_drops(a, 0, 0);
    kvt_agg_destroy(&a);
}

Test(agg, rule_A1_lookup_verdict_takes_the_minimum_held_and_the_and_of_images)
{
    kvt_agg_t *a = kvt_agg_new(3, 16, 0);
    kvt_verdict_t v;
    //  Rank 0 holds 12 chunks, images at 1, 3, 9, 10, 11; rank 1 holds 10,
    //  images at 1, 3, 9 (and a meaningless bit 10, past its held chunks);
    //  rank 2 holds 11, images at 3, 9, 10.
    uint8_t i0[2] = {0x0a, 0x0e}, i1[2] = {0x0a, 0x06}, i2[2] = {0x08, 0x06};
    uint8_t *imgs[3] = {i0, i1, i2};
    static const uint32_t held[3] = {12, 10, 11};
    static const uint32_t order[3] = {1, 2, 0}; //  the smallest is not the last
    for (uint32_t k = 0; k < 3; k++) {
        uint32_t r = order[k];
        kvt_completion_t c = C(KVT_CHAN_LOOKUP, 8, 2, 0, r, true, 0);
        c.held = held[r];
        c.images = imgs[r];
        c.nimages = 2;
        cr_assert_eq(kvt_agg_report(a, &c, 0, &v), k == 2 ? 1 : 0);
    }
    cr_assert(v.ok);
    cr_assert_eq(v.held, 10, "the fewest held chunks");
    cr_assert_eq(v.nimages, 2);
    cr_assert_eq(v.images[0], 0x08, "chunk 3 is imaged everywhere, chunk 1 not on rank 2");
    cr_assert_eq(v.images[1], 0x02, "chunk 9 everywhere; 10 and 11 are past held");
    //  A failing rank fails the lookup.
    for (uint32_t r = 0; r < 3; r++) {
        kvt_completion_t c = C(KVT_CHAN_LOOKUP, 8, 3, 0, r, r != 1, r != 1 ? 0 : KVT_DETAIL_IO);
        c.held = r != 1 ? 4 : 0;
        cr_assert_eq(kvt_agg_report(a, &c, 0, &v), r == 2 ? 1 : 0);
    }
    cr_assert_not(v.ok);
    cr_assert_eq(v.held, 0);
    cr_assert_eq(v.nimages, 0);
    cr_assert_eq(v.detail, KVT_DETAIL_IO);
    s_drops(a, 0, 0);
    kvt_agg_destroy(&a);
}

Test(agg, rule_A1_state_and_source_safe_are_failure_dominant)
{
    static const uint8_t chans[] = {KVT_CHAN_STATE, KVT_CHAN_SOURCE_SAFE};
    for (size_t i = 0; i < sizeof chans; i++) {
        kvt_agg_t *a = kvt_agg_new(2, 16, 0);
        kvt_verdict_t v;
        kvt_completion_t f = C(chans[i], 1, 1, 3, 0, false, KVT_DETAIL_IO);
        kvt_completion_t ok = C(chans[i], 1, 1, 3, 1, true, 0);
        cr_assert_eq(kvt_agg_report(a, &f, 0, &v), 0);
        cr_assert_eq(kvt_agg_report(a, &ok, 0, &v), 1, "settles only with both ranks");
        cr_assert_not(v.ok);
        cr_assert_eq(v.detail, KVT_DETAIL_IO);
        s_drops(a, 0, 0);
        kvt_agg_destroy(&a);
    }
}

Test(agg, reports_of_an_older_epoch_are_dropped_and_counted)
{
    kvt_agg_t *a = kvt_agg_new(2, 16, 0);
    kvt_verdict_t v;
    kvt_completion_t e2 = C(KVT_CHAN_SAVE, 1, 1, 1, 1, true, 0);
    e2.epoch = 2;
    cr_assert_eq(kvt_agg_report(a, &e2, 0, &v), 0);
    cr_assert_eq(kvt_agg_epoch(a, 1), 2);
    //  The restarted rank's predecessor (epoch 1) still had a report in flight.
    kvt_completion_t e1 = C(KVT_CHAN_SAVE, 5, 1, 5, 1, false, KVT_DETAIL_SHUTDOWN);
    e1.epoch = 1;
    cr_assert_eq(kvt_agg_report(a, &e1, 0, &v), -1, "an older epoch's report is void");
    kvt_agg_stats_t st;
    kvt_agg_stats(a, &st);
    cr_assert_eq(st.epoch_dropped, 1);
    cr_assert_eq(st.open, 1, "it opened no key");
    //  Other ranks' epochs are their own; an unstamped report is never dropped.
    kvt_completion_t r0 = C(KVT_CHAN_SAVE, 1, 1, 1, 0, true, 0);
    r0.epoch = 1;
    cr_assert_eq(kvt_agg_report(a, &r0, 0, &v), 1);
    kvt_completion_t none = C(KVT_CHAN_SAVE, 6, 1, 6, 1, true, 0);
    cr_assert_eq(kvt_agg_report(a, &none, 0, &v), 0);
    kvt_agg_stats(a, &st);
    cr_assert_eq(st.epoch_dropped, 1);
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

// ------------------------------------------------- state: neutral votes --

//  A rank whose state leg never ran (its KV leg failed first, it refused the
//  spec, it shut down) reports neutral: ok with detail SKIPPED.
static kvt_completion_t s_state(uint64_t req, uint32_t gen, uint32_t rank, uint32_t answer)
{
    bool neutral = answer == KVT_DETAIL_SKIPPED;
    return C(KVT_CHAN_STATE, req, gen, 0x5a, rank, neutral || answer == KVT_DETAIL_OK, answer);
}

//  Settles one state key over nranks with answer[r] per rank, rank order
//  `order`; returns the verdict.
static kvt_verdict_t s_state_verdict(uint32_t nranks, const uint32_t *order, const uint32_t *answer)
{
    kvt_agg_t *a = kvt_agg_new(nranks, 16, 0);
    kvt_verdict_t v;
    memset(&v, 0, sizeof v);
    for (uint32_t i = 0; i < nranks; i++) {
        kvt_completion_t c = s_state(3, 1, order[i], answer[order[i]]);
        cr_assert_eq(kvt_agg_report(a, &c, 0, &v), i + 1 == nranks ? 1 : 0,
                     "report %u of %u settles only the last time", i + 1, nranks);
    }
    kvt_agg_stats_t st;
    kvt_agg_stats(a, &st);
    cr_assert_eq(st.open, 0);
    kvt_agg_destroy(&a);
    return v;
}

Test(agg, rule_A1_state_key_settles_when_a_rank_reports_neutral)
{
    for (size_t k = 0; k < sizeof NRANKS / sizeof NRANKS[0]; k++) {
        uint32_t n = NRANKS[k], order[8], answer[8];
        for (int dir = 0; dir < 2; dir++) {
            s_order(order, n, dir);
            //  Every rank neutral: nobody ran the leg, the verdict says so.
            for (uint32_t r = 0; r < n; r++)
                answer[r] = KVT_DETAIL_SKIPPED;
            kvt_verdict_t v = s_state_verdict(n, order, answer);
            cr_assert(v.ok, "%u ranks all neutral: ok", n);
            cr_assert_eq(v.detail, KVT_DETAIL_SKIPPED, "%u ranks all neutral: detail %u", n,
                         v.detail);
            cr_assert_eq(v.nfailed, 0);
            if (n == 1)
                continue;
            for (uint32_t pos = 0; pos < n; pos++) {
                //  One rank's KV leg failed, so it reports neutral; the others
                //  hit: the key settles ok, a real verdict (not SKIPPED).
                for (uint32_t r = 0; r < n; r++)
                    answer[r] = KVT_DETAIL_OK;
                answer[order[pos]] = KVT_DETAIL_SKIPPED;
                v = s_state_verdict(n, order, answer);
                cr_assert(v.ok, "%u ranks, neutral at %u: ok", n, pos);
                cr_assert_eq(v.detail, KVT_DETAIL_OK, "%u ranks, neutral at %u: detail %u", n, pos,
                             v.detail);
                //  ... and a real miss elsewhere is the verdict, neutral or
                //  not around it: the scheduler retracts the image (I3).
                answer[order[(pos + 1) % n]] = KVT_DETAIL_MISS;
                v = s_state_verdict(n, order, answer);
                cr_assert_not(v.ok, "%u ranks, a miss next to a neutral: failed", n);
                cr_assert_eq(v.detail, KVT_DETAIL_MISS);
                cr_assert_eq(v.nfailed, 1);
                //  Only the neutral rank and the miss: still the miss.
                for (uint32_t r = 0; r < n; r++)
                    if (answer[r] == KVT_DETAIL_OK)
                        answer[r] = KVT_DETAIL_SKIPPED;
                v = s_state_verdict(n, order, answer);
                cr_assert_not(v.ok);
                cr_assert_eq(v.detail, KVT_DETAIL_MISS, "all neutral but one miss: detail %u",
                             v.detail);
            }
        }
    }
}

Test(agg, neutral_is_a_state_channel_notion_only)
{
    //  ok + SKIPPED on the store channel is an ordinary ok report: the
    //  verdict is OK, never a neutral SKIPPED.
    kvt_agg_t *a = kvt_agg_new(2, 16, 0);
    kvt_verdict_t v;
    kvt_completion_t c0 = C(KVT_CHAN_SAVE, 1, 1, 4, 0, true, KVT_DETAIL_SKIPPED);
    kvt_completion_t c1 = C(KVT_CHAN_SAVE, 1, 1, 4, 1, true, KVT_DETAIL_SKIPPED);
    cr_assert_eq(kvt_agg_report(a, &c0, 0, &v), 0);
    cr_assert_eq(kvt_agg_report(a, &c1, 0, &v), 1);
    cr_assert(v.ok);
    cr_assert_eq(v.detail, KVT_DETAIL_OK);
    kvt_agg_destroy(&a);
}

Test(agg, rule_A3_state_verdict_keys_carry_the_load_generation)
{
    //  The re-admitted request's (gen 2) state reports cannot settle the
    //  first admission's key, nor the other way round.
    kvt_agg_t *a = kvt_agg_new(2, 16, 0);
    kvt_verdict_t v;
    kvt_completion_t g1r0 = s_state(9, 1, 0, KVT_DETAIL_SKIPPED);
    kvt_completion_t g2r1 = s_state(9, 2, 1, KVT_DETAIL_MISS);
    cr_assert_eq(kvt_agg_report(a, &g1r0, 0, &v), 0);
    cr_assert_eq(kvt_agg_report(a, &g2r1, 0, &v), 0, "gen 2's miss must not settle gen 1");
    kvt_completion_t g1r1 = s_state(9, 1, 1, KVT_DETAIL_OK);
    cr_assert_eq(kvt_agg_report(a, &g1r1, 0, &v), 1);
    cr_assert_eq(v.op.gen, 1);
    cr_assert(v.ok, "gen 1 saw a neutral and a hit");
    kvt_agg_stats_t st;
    kvt_agg_stats(a, &st);
    cr_assert_eq(st.open, 1, "gen 2 still waits for rank 0");
    s_drops(a, 0, 0);
    kvt_agg_destroy(&a);
}

Test(agg, rule_A4_a_state_key_with_a_silent_rank_times_out_failed_even_after_neutral_reports)
{
    //  Neutral reports do not settle a key on their own: the silent rank
    //  still owes one, and the bound settles it as a failure, not SKIPPED.
    kvt_agg_t *a = kvt_agg_new(3, 16, 100);
    kvt_verdict_t v, out[2];
    bool warn[2];
    kvt_completion_t c0 = s_state(4, 1, 0, KVT_DETAIL_SKIPPED);
    kvt_completion_t c1 = s_state(4, 1, 1, KVT_DETAIL_SKIPPED);
    cr_assert_eq(kvt_agg_report(a, &c0, 0, &v), 0);
    cr_assert_eq(kvt_agg_report(a, &c1, 0, &v), 0);
    cr_assert_eq(kvt_agg_expire(a, 100, out, warn, 2), 1);
    cr_assert_not(out[0].ok);
    cr_assert_eq(out[0].detail, KVT_DETAIL_TIMEOUT);
    cr_assert_eq(out[0].nfailed, 1);
    kvt_agg_destroy(&a);
}

// ------------------------------------------------ store: fenced is an AND --

Test(agg, store_verdict_is_fenced_only_when_every_rank_waited_on_its_producer)
{
    for (size_t k = 0; k < sizeof NRANKS / sizeof NRANKS[0]; k++) {
        uint32_t n = NRANKS[k];
        for (uint32_t unfenced = 0; unfenced <= n; unfenced++) {
            //  unfenced == n: every rank fenced; else that rank was not.
            kvt_agg_t *a = kvt_agg_new(n, 16, 0);
            kvt_verdict_t v;
            for (uint32_t r = 0; r < n; r++) {
                kvt_completion_t c = C(KVT_CHAN_SAVE, 2, 1, 8, r, true, 0);
                c.fenced = r != unfenced;
                cr_assert_eq(kvt_agg_report(a, &c, 0, &v), r + 1 == n ? 1 : 0);
            }
            cr_assert(v.ok);
            cr_assert_eq(v.fenced, unfenced == n, "%u ranks, rank %u unfenced: fenced %d", n,
                         unfenced, v.fenced);
            kvt_agg_destroy(&a);
        }
    }
    //  Other channels never carry it (the codec refuses fenced off store),
    //  and a timed-out store key is not fenced.
    kvt_agg_t *a = kvt_agg_new(2, 16, 10);
    kvt_verdict_t v, out[1];
    bool warn[1];
    kvt_completion_t l = C(KVT_CHAN_SOURCE_SAFE, 2, 1, 8, 0, true, 0);
    l.fenced = true;
    cr_assert_eq(kvt_agg_report(a, &l, 0, &v), 0);
    l.rank = 1;
    cr_assert_eq(kvt_agg_report(a, &l, 0, &v), 1);
    cr_assert_not(v.fenced, "source_safe verdicts carry no fenced");
    kvt_completion_t s0 = C(KVT_CHAN_SAVE, 3, 1, 8, 0, true, 0);
    s0.fenced = true;
    cr_assert_eq(kvt_agg_report(a, &s0, 0, &v), 0);
    cr_assert_eq(kvt_agg_expire(a, 10, out, warn, 1), 1);
    cr_assert_not(out[0].fenced);
    kvt_agg_destroy(&a);
}

// ------------------------------------------- tombstones and the touch ring --

//  Each settled key on both channels of one touch round, then every rank's
//  report again: all dropped as late.
static void s_touch_round(kvt_agg_t *a, uint32_t nranks, uint64_t round, uint64_t now)
{
    kvt_verdict_t v;
    static const uint8_t chans[2] = {KVT_CHAN_TOUCH, KVT_CHAN_TOUCH_REFRESH};
    for (int k = 0; k < 2; k++)
        for (uint32_t r = 0; r < nranks; r++) {
            kvt_completion_t t = C(chans[k], round, KVT_TOUCH_GEN, 1000 + round % 7, r, true, 0);
            t.touch = 2;
            cr_assert_eq(kvt_agg_report(a, &t, now, &v), r + 1 == nranks ? 1 : 0,
                         "round %llu rank %u", (unsigned long long)round, r);
        }
}

Test(agg, rule_A2_100_touches_through_a_4_entry_ring_keep_store_and_source_tombstones)
{
    kvt_agg_t *a = kvt_agg_new(2, 4, 1000);
    kvt_verdict_t v, out[4];
    bool warn[4];
    //  A store key and a source_safe key settle on both ranks.
    kvt_completion_t keys[2] = {C(KVT_CHAN_SAVE, 1, 1, 11, 0, true, 0),
                                C(KVT_CHAN_SOURCE_SAFE, 1, 1, 11, 0, true, 0)};
    for (int k = 0; k < 2; k++)
        for (uint32_t r = 0; r < 2; r++) {
            kvt_completion_t c = keys[k];
            c.rank = r;
            cr_assert_eq(kvt_agg_report(a, &c, 0, &v), (int)r);
        }
    //  100 touch rounds on both touch channels: 50 times the 4-entry ring.
    for (uint64_t i = 0; i < 100; i++)
        s_touch_round(a, 2, i, 1);
    //  Their late duplicates: every touch report once more, each dropped by
    //  the touch ring, none opening a key.
    for (uint64_t i = 0; i < 100; i++)
        for (uint32_t r = 0; r < 2; r++) {
            kvt_completion_t t = C(KVT_CHAN_TOUCH, i, KVT_TOUCH_GEN, 1000 + i % 7, r, true, 0);
            kvt_completion_t f = t;
            f.chan = KVT_CHAN_TOUCH_REFRESH;
            cr_assert_eq(kvt_agg_report(a, &t, 2, &v), -1, "late touch %llu",
                         (unsigned long long)i);
            cr_assert_eq(kvt_agg_report(a, &f, 2, &v), -1);
        }
    //  The store and source_safe late duplicates are still dropped.
    for (int k = 0; k < 2; k++)
        for (uint32_t r = 0; r < 2; r++) {
            kvt_completion_t c = keys[k];
            c.rank = r;
            cr_assert_eq(kvt_agg_report(a, &c, 3, &v), -1, "channel %u tombstone survived", c.chan);
        }
    kvt_agg_stats_t st;
    kvt_agg_stats(a, &st);
    cr_assert_eq(st.settled, 2 + 200);
    cr_assert_eq(st.open, 0, "no late report opened a key");
    cr_assert_eq(kvt_agg_expire(a, 5000, out, warn, 4), 0, "nothing left to time out");
    s_drops(a, 400 + 4, 0);
    kvt_agg_destroy(&a);
}

Test(agg, rule_A2_a_late_touch_duplicate_after_its_key_settled_opens_no_key)
{
    //  Both ranks answered, the key settled; then one report arrives again
    //  (a duplicated frame). It is dropped: it must not open a key that
    //  would only time out into a second, failed verdict.
    kvt_agg_t *a = kvt_agg_new(2, 16, 100);
    kvt_verdict_t v, out[2];
    bool warn[2];
    kvt_completion_t t0 = C(KVT_CHAN_TOUCH, 7, KVT_TOUCH_GEN, 3, 0, true, 0);
    kvt_completion_t t1 = C(KVT_CHAN_TOUCH, 7, KVT_TOUCH_GEN, 3, 1, true, 0);
    cr_assert_eq(kvt_agg_report(a, &t0, 0, &v), 0);
    cr_assert_eq(kvt_agg_report(a, &t1, 0, &v), 1);
    cr_assert_eq(kvt_agg_report(a, &t0, 10, &v), -1, "the late duplicate is dropped");
    cr_assert_eq(kvt_agg_expire(a, 1000, out, warn, 2), 0, "no second verdict");
    kvt_agg_stats_t st;
    kvt_agg_stats(a, &st);
    cr_assert_eq(st.settled, 1);
    cr_assert_eq(st.timeouts, 0);
    cr_assert_eq(st.open, 0);
    s_drops(a, 1, 0);
    kvt_agg_destroy(&a);
}

Test(agg, rule_A2_source_safe_and_fence_keys_are_tombstoned_like_store_keys)
{
    kvt_agg_t *a = kvt_agg_new(2, 16, 0);
    kvt_verdict_t v;
    kvt_completion_t keys[3] = {C(KVT_CHAN_SAVE, 5, 1, 21, 0, true, 0),
                                C(KVT_CHAN_SOURCE_SAFE, 5, 1, 21, 0, false, KVT_DETAIL_IO),
                                C(KVT_CHAN_FENCE, 6, 1, 0, 0, false, KVT_DETAIL_TIMEOUT)};
    for (int k = 0; k < 3; k++) {
        for (uint32_t r = 0; r < 2; r++) {
            kvt_completion_t c = keys[k];
            c.rank = r;
            cr_assert_eq(kvt_agg_report(a, &c, 0, &v), (int)r);
        }
        cr_assert_eq(v.chan, keys[k].chan);
        cr_assert_eq(v.ok, keys[k].ok, "channel %u: failure-dominant", v.chan);
        cr_assert_eq(v.detail, keys[k].detail);
    }
    for (int k = 0; k < 3; k++) {
        kvt_completion_t c = keys[k];
        cr_assert_eq(kvt_agg_report(a, &c, 1, &v), -1, "channel %u: late duplicate dropped",
                     c.chan);
    }
    kvt_agg_stats_t st;
    kvt_agg_stats(a, &st);
    cr_assert_eq(st.open, 0);
    s_drops(a, 3, 0);
    kvt_agg_destroy(&a);
}

// --------------------------------------------------- lookup image bitmap --

Test(agg, rule_A1_lookup_bitmap_is_folded_only_over_the_fewest_held_chunks)
{
    //  Rank 0 holds 10 chunks (2 bitmap bytes), rank 1 all 4096 (a full
    //  512-byte bitmap): the key keeps and folds only the bytes under the
    //  smallest held (ASan sees any access past them), and the verdict is
    //  the AND cut at 10 chunks.
    kvt_agg_t *a = kvt_agg_new(3, 16, 0);
    kvt_verdict_t v;
    static uint8_t full[KVT_MSG_MAX_IMAGES];
    memset(full, 0xff, sizeof full);
    uint8_t small[1] = {0xa5}; //  shorter than its held: the rest reads as zero
    kvt_completion_t c0 = C(KVT_CHAN_LOOKUP, 4, 1, 0, 0, true, 0);
    c0.held = 10;
    c0.images = small;
    c0.nimages = 1;
    kvt_completion_t c1 = C(KVT_CHAN_LOOKUP, 4, 1, 0, 1, true, 0);
    c1.held = KVT_MSG_MAX_CHUNKS;
    c1.images = full;
    c1.nimages = KVT_MSG_MAX_IMAGES;
    kvt_completion_t c2 = c1;
    c2.rank = 2;
    c2.held = 9;
    cr_assert_eq(kvt_agg_report(a, &c0, 0, &v), 0);
    cr_assert_eq(kvt_agg_report(a, &c1, 0, &v), 0);
    cr_assert_eq(kvt_agg_report(a, &c2, 0, &v), 1);
    cr_assert_eq(v.held, 9);
    cr_assert_eq(v.nimages, 1, "byte 1 (chunk 8) is zero: rank 0's bitmap ended");
    cr_assert_eq(v.images[0], 0xa5);
    //  The largest first: the key keeps 513 bytes, then folds fewer.
    kvt_completion_t d1 = c1, d0 = c0;
    d1.op.req = d0.op.req = 5;
    d0.held = 12;
    uint8_t two[2] = {0xff, 0x0c};
    d0.images = two;
    d0.nimages = 2;
    kvt_completion_t d2 = d1;
    d2.rank = 2;
    cr_assert_eq(kvt_agg_report(a, &d1, 0, &v), 0);
    cr_assert_eq(kvt_agg_report(a, &d0, 0, &v), 0);
    cr_assert_eq(kvt_agg_report(a, &d2, 0, &v), 1);
    cr_assert_eq(v.held, 12);
    cr_assert_eq(v.nimages, 2);
    cr_assert_eq(v.images[0], 0xff);
    cr_assert_eq(v.images[1], 0x0c);
    kvt_agg_destroy(&a);
}

//  A lookup that asked rank 0 only settles on rank 0's report alone (its
//  rank0_only says so), exactly once: another rank's rank0_only report,
//  before or after, is dropped and counted and opens no key; a late
//  duplicate of rank 0's is dropped as late. A lookup of every rank still
//  waits for all of them.
Test(agg, a_rank0_only_lookup_settles_on_rank_0s_report_alone_and_once)
{
    kvt_agg_t *a = kvt_agg_new(4, 16, 1000);
    kvt_verdict_t v;
    kvt_agg_stats_t st;
    kvt_completion_t c1 = C(KVT_CHAN_LOOKUP, 5, 2, 0, 1, true, 0);
    c1.rank0_only = true;
    c1.held = 1;
    cr_assert_eq(kvt_agg_report(a, &c1, 0, &v), -1, "rank 1 was not asked");
    kvt_agg_stats(a, &st);
    cr_assert_eq(st.not_asked, 1);
    cr_assert_eq(st.open, 0, "and opened no key");
    kvt_completion_t c0 = C(KVT_CHAN_LOOKUP, 5, 2, 0, 0, true, 0);
    c0.rank0_only = true;
    c0.held = 3;
    memset(&v, 0, sizeof v);
    cr_assert_eq(kvt_agg_report(a, &c0, 0, &v), 1, "rank 0's report settles the key");
    cr_assert_eq(v.chan, KVT_CHAN_LOOKUP);
    cr_assert(v.op.req == 5 && v.op.gen == 2);
    cr_assert(v.ok);
    cr_assert_eq(v.nfailed, 0);
    cr_assert_eq(v.held, 3, "rank 0's answer, not rank 1's dropped one");
    kvt_completion_t c2 = C(KVT_CHAN_LOOKUP, 5, 2, 0, 2, true, 0);
    c2.rank0_only = true;
    cr_assert_eq(kvt_agg_report(a, &c2, 1, &v), -1);
    cr_assert_eq(kvt_agg_report(a, &c0, 1, &v), -1, "a late duplicate");
    kvt_agg_stats(a, &st);
    cr_assert_eq(st.not_asked, 2);
    s_drops(a, 1, 0);
    cr_assert_eq(st.settled, 1, "exactly one verdict");
    bool warn[4];
    kvt_verdict_t out[4];
    cr_assert_eq(kvt_agg_expire(a, 5000, out, warn, 4), 0, "nothing left open to time out");

    kvt_completion_t d0 = C(KVT_CHAN_LOOKUP, 6, 2, 0, 0, true, 0);
    d0.held = 3;
    cr_assert_eq(kvt_agg_report(a, &d0, 2, &v), 0, "an every-rank lookup waits for all");
    for (uint32_t r = 1; r < 3; r++) {
        kvt_completion_t d = C(KVT_CHAN_LOOKUP, 6, 2, 0, r, true, 0);
        d.held = 3;
        cr_assert_eq(kvt_agg_report(a, &d, 2, &v), 0);
    }
    kvt_completion_t d3 = C(KVT_CHAN_LOOKUP, 6, 2, 0, 3, true, 0);
    d3.held = 1;
    cr_assert_eq(kvt_agg_report(a, &d3, 2, &v), 1);
    cr_assert_eq(v.held, 1, "the minimum");
    kvt_agg_destroy(&a);
}
