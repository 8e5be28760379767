/*  Scheduler core: tier lookups (kvt_lookups.c), driven directly (no
    actors) through the rig in tests/common/kvt_test_sched_rig.h: the
    Lookup an admission waits for, its verdict, its bound, its pin and the
    pin's one release, rank-0-only lookups, and a settled lookup's max age
    and refresh. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "common/kvt_test_sched_rig.h"

//  Request 1 (150 tokens) leaves [0, 128) in the tier, request 2 evicts all
//  but its first 32 tokens from HBM; request 3 repeats request 1's prompt.
//  Lookups are not answered by the rig: each test delivers its own.
static void lk_setup(rig_t *r, bool pin)
{
    rig_init_pin(r, 12, 64, pin);
    rig_arrive(r, 1, 150, 100, 1);
    rig_run(r, 50);
    rig_arrive(r, 2, 150, 90000, 1);
    rig_run(r, 50);
    r->lose_lookups = true;
    r->releases_seen = r->pins_used = 0; //  requests 1 and 2 released theirs (nothing held)
}

static kvt_lookup_t lk_only(const rig_t *r)
{
    cr_assert_eq(r->plan.nlookups, 1);
    return r->plan.lookups[0];
}

static int lk_answer(rig_t *r, kvt_opid_t op, bool ok, uint32_t held)
{
    kvt_verdict_t v = {.chan = KVT_CHAN_LOOKUP, .op = op, .ok = ok, .held = held};
    return kvt_sched_verdict(r->s, &v);
}

//  lk_setup's scene with the lookup settings under test: `ranks`, a pin
//  (lease TTL 500 ms) or none, and lookup_max_age_us (0: its default).
static void lk2_init(rig_t *r, bool pin, kvt_sched_lookup_ranks_t ranks, uint64_t max_age_us)
{
    memset(r, 0, sizeof *r);
    kvt_sched_cfg_t cfg = {.lookup_pin = pin,
                           .lookup_ttl_ms = pin ? 500 : 0,
                           .lookup_ranks = ranks,
                           .lookup_max_age_us = max_age_us,
                           .block_size = BS,
                           .chunk_size = CS,
                           .hbm_blocks = 12,
                           .tier_chunks = 64,
                           .max_running = 8,
                           .step_tokens = 256,
                           .save_retries = 1,
                           .ns = kvt_namespace_hash("test")};
    char err[128];
    r->s = kvt_sched_new(&cfg, err, sizeof err);
    cr_assert_not_null(r->s, "%s", err);
    rig_arrive(r, 1, 150, 100, 1);
    rig_run(r, 50);
    rig_arrive(r, 2, 150, 90000, 1);
    rig_run(r, 50);
    r->lose_lookups = true;
    r->releases_seen = r->pins_used = 0;
}

//  Request 3's lookup settles at t0 (held 2) while request 4 holds blocks
//  request 3 needs, so it keeps waiting; request 4 then runs to its end
//  with the clock at t0 + dt. Leaves r->plan at the first plan that asks
//  again or loads for request 3.
static void lk2_wait(rig_t *r, uint64_t t0, uint64_t dt, kvt_lookup_t *first)
{
    kvt_sched_set_now(r->s, t0);
    rig_arrive(r, 3, 150, 100, 1);
    rig_arrive(r, 4, 40, 50000, 40);
    rig_step_once(r);
    *first = lk_only(r);
    cr_assert_eq(lk_answer(r, first->op, true, 2), 0);
    rig_deliver(r);
    rig_step_once(r);
    cr_assert_eq(r->plan.nlookups + r->plan.nloads, 0);
    kvt_sched_req_info_t info;
    cr_assert_eq(kvt_sched_req_info(r->s, 3, &info), 0);
    cr_assert_eq(info.state, 1, "request 3's blocks do not fit beside request 4's");
    kvt_sched_set_now(r->s, t0 + dt);
    for (uint32_t i = 0; i < 200; i++) {
        rig_deliver(r);
        rig_step_once(r);
        if (r->plan.nlookups || r->plan.nloads)
            return;
    }
    cr_assert_fail("request 3 was neither admitted nor asked again");
}

//  Steps (delivering every verdict but the lookups') until a plan loads.
static void lk2_until_load(rig_t *r)
{
    for (uint32_t i = 0; i < 200; i++) {
        rig_deliver(r);
        rig_step_once(r);
        if (r->plan.nloads)
            return;
    }
    cr_assert_fail("no load within 200 steps");
}

//  Request 4 still runs: the refresh came while request 3 waited for its
//  blocks, not when they freed up.
static void lk2_assert_while_blocked(const rig_t *r)
{
    kvt_sched_req_info_t info;
    cr_assert_eq(kvt_sched_req_info(r->s, 4, &info), 0);
    cr_assert_eq(info.state, 3, "asked again while request 4 still holds the blocks");
    cr_assert_eq(kvt_sched_req_info(r->s, 3, &info), 0);
    cr_assert_eq(info.state, 1);
}

//  The aggregator settles a lookup with the fewest chunks any rank holds:
//  the admission loads exactly that much, not what it asked for.
Test(lookups, lookup_admission_loads_the_chunks_every_rank_holds)
{
    static rig_t r;
    lk_setup(&r, false);
    rig_arrive(&r, 3, 150, 100, 1);
    rig_step_once(&r);
    kvt_lookup_t l = lk_only(&r);
    cr_assert_eq(l.op.req, 3);
    cr_assert_eq(l.nkeys, 2, "the prompt's leading chunks below its tail");
    cr_assert(rig_holds(&r, l.keys[0]) && rig_holds(&r, l.keys[1]));
    kvt_sched_req_info_t info;
    cr_assert_eq(kvt_sched_req_info(r.s, 3, &info), 0);
    cr_assert_eq(info.state, 1, "waiting for its lookup");
    cr_assert_eq(lk_answer(&r, l.op, true, 1), 0, "one rank holds only the first chunk");
    rig_deliver(&r);
    cr_assert_eq(rig_step_once(&r), 1);
    cr_assert_eq(r.plan.nloads, 1);
    cr_assert_eq(r.plan.loads[0].start, 0);
    cr_assert_eq(r.plan.loads[0].end, CS, "the minimum over the ranks, one chunk");
    cr_assert_not(r.plan.loads[0].lookup, "no pin asked");
    r.lose_lookups = false;
    rig_deliver(&r);
    rig_run(&r, 100);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  A request waiting for its lookup holds up no one: the short request
//  behind it (no chunk to look up) is admitted in the same plan.
Test(lookups, a_request_waiting_for_its_lookup_does_not_block_the_next)
{
    static rig_t r;
    lk_setup(&r, false);
    rig_arrive(&r, 3, 150, 100, 1);
    rig_arrive(&r, 4, 40, 50000, 2);
    cr_assert_eq(rig_step_once(&r), 1);
    kvt_lookup_t l = lk_only(&r);
    bool entry4 = false;
    for (uint32_t i = 0; i < r.plan.nentries; i++)
        entry4 |= r.plan.entries[i].op.req == 4;
    cr_assert(entry4, "request 4 runs while 3 waits for its lookup");
    kvt_sched_req_info_t info;
    cr_assert_eq(kvt_sched_req_info(r.s, 3, &info), 0);
    cr_assert_eq(info.state, 1);
    cr_assert_eq(lk_answer(&r, l.op, true, 2), 0);
    r.lose_lookups = false;
    rig_deliver(&r);
    rig_run(&r, 100);
    cr_assert_eq(r.finished, 4);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  A lookup that does not settle within lookup_timeout_us (default 1 s)
//  falls back to the HBM hit, counted; its late verdict is stale.
Test(lookups, a_lookup_past_its_bound_falls_back_to_the_hbm_hit)
{
    static rig_t r;
    lk_setup(&r, false);
    kvt_sched_set_now(r.s, 5000000);
    rig_arrive(&r, 3, 150, 100, 1);
    rig_step_once(&r);
    kvt_lookup_t l = lk_only(&r);
    kvt_sched_set_now(r.s, 5000000 + 999999);
    cr_assert_eq(rig_step_once(&r), KVT_SCHED_HOLD, "still inside the bound: wait");
    kvt_sched_set_now(r.s, 5000000 + 1000000);
    cr_assert_eq(rig_step_once(&r), 1);
    kvt_sched_req_info_t info;
    cr_assert_eq(kvt_sched_req_info(r.s, 3, &info), 0);
    cr_assert_eq(info.state, 3, "running from the HBM hit");
    cr_assert_eq(info.hbm_hit, 32);
    cr_assert_eq(r.plan.nloads, 0);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.lookup_timeouts, 1);
    cr_assert_eq(st.lookups_out, 0);
    cr_assert_eq(lk_answer(&r, l.op, true, 2), -1, "the late verdict is stale");
    r.lose_lookups = false;
    rig_deliver(&r);
    rig_run(&r, 100);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  A pinned lookup's lease is released by the load that uses it
//  (LoadSpec.lookup), never also by a LookupRelease.
Test(lookups, a_pinned_lookup_is_released_by_its_load)
{
    static rig_t r;
    lk_setup(&r, true);
    rig_arrive(&r, 3, 150, 100, 1);
    rig_step_once(&r);
    kvt_lookup_t l = lk_only(&r);
    cr_assert(l.pin);
    cr_assert_eq(l.ttl_ms, 500);
    cr_assert_eq(lk_answer(&r, l.op, true, 2), 0);
    cr_assert_eq(rig_step_once(&r), 1);
    cr_assert_eq(r.plan.nloads, 1);
    cr_assert(r.plan.loads[0].lookup, "the load releases the pin");
    cr_assert(r.plan.loads[0].op.req == l.op.req && r.plan.loads[0].op.gen == l.op.gen,
              "the load carries the lookup's id");
    r.lose_lookups = false;
    rig_deliver(&r);
    rig_run(&r, 100);
    cr_assert_eq(r.releases_seen, 0, "released once, by the load");
    cr_assert_eq(r.pins_used, 1);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  An admission that does not load (the tier holds nothing above the HBM
//  hit) releases the pin with one LookupRelease of the lookup's id.
Test(lookups, a_pinned_lookup_no_load_uses_is_released_once)
{
    static rig_t r;
    lk_setup(&r, true);
    rig_arrive(&r, 3, 150, 100, 1);
    rig_step_once(&r);
    kvt_lookup_t l = lk_only(&r);
    cr_assert_eq(lk_answer(&r, l.op, true, 0), 0);
    cr_assert_eq(rig_step_once(&r), 1);
    cr_assert_eq(r.plan.nloads, 0);
    cr_assert_eq(r.plan.nlookup_releases, 1);
    cr_assert_eq(r.plan.lookup_releases[0].op.req, 3);
    cr_assert_eq(r.plan.lookup_releases[0].op.gen, l.op.gen);
    r.lose_lookups = false;
    rig_deliver(&r);
    rig_run(&r, 100);
    cr_assert_eq(r.releases_seen, 1, "exactly once");
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  A request aborted while its pinned lookup is out releases the pin in
//  the next plan; the lookup's verdict then finds no request.
Test(lookups, an_abort_while_the_lookup_is_out_releases_its_pin)
{
    static rig_t r;
    lk_setup(&r, true);
    rig_arrive(&r, 3, 150, 100, 1);
    rig_step_once(&r);
    kvt_lookup_t l = lk_only(&r);
    cr_assert_eq(kvt_sched_abort(r.s, 3), 0);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.lookups_out, 0);
    rig_step_once(&r);
    cr_assert_eq(r.plan.nlookup_releases, 1);
    cr_assert_eq(r.plan.lookup_releases[0].op.req, 3);
    cr_assert_eq(lk_answer(&r, l.op, true, 2), -1, "stale: the request is gone");
    r.lose_lookups = false;
    rig_deliver(&r);
    rig_run(&r, 100);
    cr_assert_eq(r.releases_seen, 1);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  A failed lookup verdict (an aggregator timeout, a store error on some
//  rank) gives no tier hit: the admission runs from its HBM hit, counted.
Test(lookups, a_failed_lookup_verdict_gives_no_tier_hit)
{
    static rig_t r;
    lk_setup(&r, false);
    rig_arrive(&r, 3, 150, 100, 1);
    rig_step_once(&r);
    kvt_lookup_t l = lk_only(&r);
    cr_assert_eq(lk_answer(&r, l.op, false, 2), 0);
    cr_assert_eq(rig_step_once(&r), 1);
    cr_assert_eq(r.plan.nloads, 0, "no load on a failed lookup");
    kvt_sched_req_info_t info;
    cr_assert_eq(kvt_sched_req_info(r.s, 3, &info), 0);
    cr_assert_eq(info.state, 3);
    cr_assert_eq(info.computed, 32, "from the HBM hit");
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.lookup_failed, 1);
    r.lose_lookups = false;
    rig_deliver(&r);
    rig_run(&r, 100);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  A pinned lookup that times out releases its pin once (no load will use
//  it); its late verdict is stale and releases nothing more.
Test(lookups, a_pinned_lookup_past_its_bound_is_released_once)
{
    static rig_t r;
    lk_setup(&r, true);
    rig_arrive(&r, 3, 150, 100, 1);
    rig_step_once(&r);
    kvt_lookup_t l = lk_only(&r);
    kvt_sched_set_now(r.s, 1000000);
    cr_assert_eq(rig_step_once(&r), 1);
    cr_assert_eq(r.plan.nloads, 0);
    cr_assert_eq(r.plan.nlookup_releases, 1, "the timed-out pin is released");
    cr_assert_eq(r.plan.lookup_releases[0].op.gen, l.op.gen);
    cr_assert_eq(lk_answer(&r, l.op, true, 2), -1);
    r.lose_lookups = false;
    rig_deliver(&r);
    rig_run(&r, 100);
    cr_assert_eq(r.releases_seen, 1, "exactly once");
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(lookups, lookup_rank0_asks_rank_0_only_and_admits_on_its_answer)
{
    static rig_t r;
    lk_setup(&r, false);
    rig_arrive(&r, 3, 150, 100, 1);
    rig_step_once(&r);
    cr_assert_not(lk_only(&r).rank0_only, "by default every rank is asked");
    kvt_sched_destroy(&r.s);

    lk2_init(&r, true, KVT_SCHED_LOOKUP_RANK0, 0);
    rig_arrive(&r, 3, 150, 100, 1);
    rig_step_once(&r);
    kvt_lookup_t l = lk_only(&r);
    cr_assert(l.rank0_only, "rank 0 only");
    cr_assert(l.pin, "rank 0 pins what it found");
    cr_assert_eq(lk_answer(&r, l.op, true, 2), 0, "rank 0's answer settles the lookup");
    cr_assert_eq(rig_step_once(&r), 1);
    cr_assert_eq(r.plan.nloads, 1);
    cr_assert_eq(r.plan.loads[0].end, 2 * CS, "the two chunks rank 0 holds");
    cr_assert(r.plan.loads[0].lookup && r.plan.loads[0].op.gen == l.op.gen,
              "the load releases rank 0's pin");
    r.lose_lookups = false;
    rig_deliver(&r);
    rig_run(&r, 100);
    cr_assert_eq(r.releases_seen, 0);
    cr_assert_eq(r.pins_used, 1);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(lookups, a_lookup_ranks_value_out_of_range_is_refused_naming_it)
{
    kvt_sched_cfg_t cfg = {.block_size = BS,
                           .chunk_size = CS,
                           .hbm_blocks = 12,
                           .tier_chunks = 64,
                           .max_running = 8,
                           .step_tokens = 256,
                           .lookup_ranks = (kvt_sched_lookup_ranks_t)2};
    char err[160] = "";
    kvt_sched_t *s = kvt_sched_new(&cfg, err, sizeof err);
    cr_assert_null(s);
    cr_assert(strstr(err, "lookup_ranks"), "%s", err);
    cfg.lookup_ranks = KVT_SCHED_LOOKUP_RANK0;
    s = kvt_sched_new(&cfg, err, sizeof err);
    cr_assert_not_null(s, "%s", err);
    kvt_sched_destroy(&s);
}

//  A settled lookup is trusted up to lookup_max_age_us; past it the
//  request that keeps waiting for its blocks asks again (a new id) while it
//  waits, and loads on the fresh answer once its blocks free up.
Test(lookups, a_settled_lookup_is_used_up_to_its_max_age_and_asked_again_past_it)
{
    static rig_t r;
    kvt_lookup_t l;
    lk2_init(&r, false, KVT_SCHED_LOOKUP_ALL, 300000);
    lk2_wait(&r, 10000000, 300000, &l);
    cr_assert_eq(r.plan.nlookups, 0, "at its max age the answer still stands");
    cr_assert_eq(r.plan.nloads, 1);
    cr_assert_eq(r.plan.loads[0].end, 2 * CS);
    cr_assert_eq(r.plan.loads[0].op.gen, l.op.gen);
    r.lose_lookups = false;
    rig_deliver(&r);
    rig_run(&r, 200);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);

    lk2_init(&r, false, KVT_SCHED_LOOKUP_ALL, 300000);
    lk2_wait(&r, 10000000, 300001, &l);
    cr_assert_eq(r.plan.nlookups, 1, "past it the request asks again");
    cr_assert_eq(r.plan.nloads, 0, "and does not load on the stale answer");
    lk2_assert_while_blocked(&r);
    kvt_lookup_t l2 = r.plan.lookups[0];
    cr_assert_eq(l2.op.req, 3);
    cr_assert_neq(l2.op.gen, l.op.gen, "under a new id");
    cr_assert_eq(r.plan.nlookup_releases, 0, "nothing was pinned");
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.lookup_refreshes, 1);
    cr_assert_eq(st.lookups_out, 1);
    cr_assert_eq(lk_answer(&r, l.op, true, 2), -1, "the old id is stale");
    cr_assert_eq(lk_answer(&r, l2.op, true, 1), 0, "the tier holds less now");
    lk2_until_load(&r);
    cr_assert_eq(r.plan.nloads, 1);
    cr_assert_eq(r.plan.nlookups, 0, "the fresh answer needs no second refresh");
    cr_assert_eq(r.plan.loads[0].end, CS, "the fresh answer is the one used");
    cr_assert_eq(r.plan.loads[0].op.gen, l2.op.gen, "the load carries the new id");
    r.lose_lookups = false;
    rig_deliver(&r);
    rig_run(&r, 200);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  A pinned settled lookup is stale once its lease's TTL (500 ms) passed,
//  under the 1 s default max age: the waiting request asks again, and the old pin
//  is released once (a LookupRelease of the old id) while the new one is
//  released by the load that uses it.
Test(lookups, a_stale_pinned_lookup_is_asked_again_and_its_old_pin_released_once)
{
    static rig_t r;
    kvt_lookup_t l;
    lk2_init(&r, true, KVT_SCHED_LOOKUP_ALL, 0);
    lk2_wait(&r, 10000000, 600000, &l);
    cr_assert_eq(r.plan.nlookups, 1, "past the pin's TTL the request asks again");
    cr_assert_eq(r.plan.nloads, 0);
    lk2_assert_while_blocked(&r);
    kvt_lookup_t l2 = r.plan.lookups[0];
    cr_assert(l2.pin);
    cr_assert_neq(l2.op.gen, l.op.gen);
    cr_assert_eq(r.plan.nlookup_releases, 1, "the old pin is released");
    cr_assert_eq(r.plan.lookup_releases[0].op.req, 3);
    cr_assert_eq(r.plan.lookup_releases[0].op.gen, l.op.gen, "under the old id");
    cr_assert_eq(lk_answer(&r, l2.op, true, 2), 0);
    lk2_until_load(&r);
    cr_assert_eq(r.plan.nloads, 1);
    cr_assert(r.plan.loads[0].lookup && r.plan.loads[0].op.gen == l2.op.gen,
              "the new pin goes with the load");
    r.lose_lookups = false;
    rig_deliver(&r);
    rig_run(&r, 200);
    cr_assert_eq(r.releases_seen, 1, "the old pin, once");
    cr_assert_eq(r.pins_used, 1);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.lookup_refreshes, 1);
    kvt_sched_req_info_t info;
    cr_assert_eq(kvt_sched_req_info(r.s, 3, &info), -1, "finished and freed");
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  The other way a stale answer is met: the request's blocks free up in
//  the very plan that finds its settled lookup past its max age (no plan in
//  between saw it wait). It asks again there instead of loading on it.
Test(lookups, a_stale_lookup_met_at_admission_is_asked_again_before_use)
{
    static rig_t r;
    lk2_init(&r, false, KVT_SCHED_LOOKUP_ALL, 300000);
    uint64_t t0 = 10000000;
    kvt_sched_set_now(r.s, t0);
    rig_arrive(&r, 3, 150, 100, 1);
    rig_arrive(&r, 4, 40, 50000, 40);
    rig_step_once(&r);
    kvt_lookup_t l = lk_only(&r);
    cr_assert_eq(lk_answer(&r, l.op, true, 2), 0);
    rig_deliver(&r);
    rig_step_once(&r);
    cr_assert_eq(r.plan.nlookups + r.plan.nloads, 0, "request 3 waits for its blocks");
    //  Request 4 stops before it completes a chunk: nothing leases its
    //  blocks, so the next plan frees them and considers request 3.
    cr_assert_eq(kvt_sched_finish(r.s, 4), 0);
    kvt_sched_set_now(r.s, t0 + 300001);
    rig_deliver(&r);
    rig_step_once(&r);
    kvt_sched_req_info_t info;
    cr_assert_eq(kvt_sched_req_info(r.s, 4, &info), -1, "request 4 retired in this plan");
    cr_assert_eq(r.plan.nloads, 0, "no load on the stale answer");
    cr_assert_eq(r.plan.nlookups, 1, "asked again");
    kvt_lookup_t l2 = r.plan.lookups[0];
    cr_assert_neq(l2.op.gen, l.op.gen);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.lookup_refreshes, 1);
    cr_assert_eq(lk_answer(&r, l2.op, true, 2), 0);
    cr_assert_eq(rig_step_once(&r), 1);
    cr_assert_eq(r.plan.nloads, 1, "admitted on the fresh answer");
    cr_assert_eq(r.plan.loads[0].op.gen, l2.op.gen);
    r.lose_lookups = false;
    rig_deliver(&r);
    rig_run(&r, 200);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  A hybrid request keeps its settled lookup fresh while it waits for its
//  blocks, on both paths where it waits: the probe that finds no room
//  (scene 0) and, later, a last probe's demand still above what is free
//  (scene 1).
Test(lookups, a_hybrid_request_waiting_for_its_blocks_keeps_its_lookup_fresh)
{
    for (int scene = 0; scene < 2; scene++) {
        static rig_t r;
        kvt_sched_cfg_t cfg = hybrid_cfg(16, 64, 64, 16, 64);
        cfg.lookup_max_age_us = 300000;
        rig_init_cfg(&r, &cfg);
        r.lose_lookups = true;
        uint64_t t0 = 10000000;
        kvt_sched_set_now(r.s, t0);
        rig_arrive(&r, 3, 150, 100, 1);   //  10 blocks
        rig_arrive(&r, 4, 60, 50000, 60); //  8 blocks, no chunk to look up
        rig_step_once(&r);
        kvt_lookup_t l = lk_only(&r);
        cr_assert_eq(lk_answer(&r, l.op, true, 2), 0);
        if (scene == 1) {
            rig_deliver(&r);
            rig_step_once(&r);
            cr_assert_eq(r.plan.nlookups, 0, "a fresh answer is kept while it waits");
        }
        kvt_sched_set_now(r.s, t0 + 300001);
        rig_deliver(&r);
        rig_step_once(&r);
        if (scene == 0) {
            //  No plan used the answer yet: this one does (the request
            //  waits on it), and only a used answer goes stale.
            cr_assert_eq(r.plan.nlookups, 0, "asked again before its answer was used once");
            kvt_sched_set_now(r.s, t0 + 600002);
            rig_deliver(&r);
            rig_step_once(&r);
        }
        cr_assert_eq(r.plan.nlookups, 1, "scene %d: asked again while it waits", scene);
        kvt_lookup_t l2 = r.plan.lookups[0];
        cr_assert_eq(l2.op.req, 3);
        cr_assert_neq(l2.op.gen, l.op.gen);
        lk2_assert_while_blocked(&r);
        kvt_sched_stats_t st;
        kvt_sched_stats(r.s, &st);
        cr_assert_eq(st.lookup_refreshes, 1);
        cr_assert_eq(lk_answer(&r, l2.op, true, 2), 0);
        r.lose_lookups = false;
        rig_deliver(&r);
        rig_run(&r, 300);
        cr_assert(kvt_sched_quiescent(r.s));
        kvt_sched_destroy(&r.s);
    }
}

//  A lookup bound shorter than a lookup's round trip: the answer is older
//  than lookup_max_age_us by the plan after it settled, every time. An
//  answer no admission attempt has used is not stale, so the request is
//  admitted on it instead of asking again forever.
Test(lookups, a_max_age_below_the_round_trip_still_admits_on_the_first_answer)
{
    static rig_t r;
    lk2_init(&r, false, KVT_SCHED_LOOKUP_ALL, 1);
    uint64_t now = 10000000;
    kvt_sched_set_now(r.s, now);
    rig_arrive(&r, 3, 150, 100, 1);
    rig_step_once(&r);
    kvt_lookup_t l = lk_only(&r);
    cr_assert_eq(lk_answer(&r, l.op, true, 2), 0);
    kvt_sched_set_now(r.s, now + 1000); //  1 ms later: past the 1 µs bound
    rig_deliver(&r);
    cr_assert_eq(rig_step_once(&r), 1);
    cr_assert_eq(r.plan.nlookups, 0, "asked again before the answer was ever used");
    cr_assert_eq(r.plan.nloads, 1, "admitted on its answer");
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.lookup_refreshes, 0);
    r.lose_lookups = false;
    rig_deliver(&r);
    rig_run(&r, 200);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}
