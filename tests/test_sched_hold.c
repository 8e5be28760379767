/*  Scheduler core, through the public API only (kvtier/kvt_sched.h): the
    verify hold (I6) and the evidence that ends it. A held admission holds
    up no one behind it; a state verdict on which every rank skipped its leg
    (ok, SKIPPED) is no evidence for the image and no landed leg; and, on
    the production path, no load stays armed past the plan that recorded it
    (I7). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "common/kvt_test_sched_rig.h"

// ----------------------------------------------------------------- rig ----

//  The rig (tests/common/kvt_test_sched_rig.h) drives the core like an
//  engine whose loads, saves and lookups succeed unless the test changes a
//  verdict before delivering it.

//  4-token blocks, 16-token chunks, a checkpoint every 16 tokens, 12 HBM
//  blocks, 2 HBM checkpoints. Request 10 (40 tokens) leaves its chunks and
//  images in the tier, request 11 evicts it from HBM, request 12 (its first
//  20 tokens) leaves [0, 20) in HBM: a request with the first 36 tokens
//  loads [16, 32) with the state image at 32 from the tier (a joint).
static void hold_joint_setup(rig_t *r)
{
    memset(r, 0, sizeof *r);
    kvt_sched_cfg_t cfg = {.block_size = 4,
                           .chunk_size = 16,
                           .hbm_blocks = 12,
                           .tier_chunks = 64,
                           .max_running = 4,
                           .step_tokens = 256,
                           .save_retries = 1,
                           .ns = kvt_namespace_hash("test_sched_hold"),
                           .state_bytes = 1u << 20,
                           .checkpoint_interval = 16,
                           .hbm_checkpoints = 2};
    char err[128];
    r->s = kvt_sched_new(&cfg, err, sizeof err);
    cr_assert_not_null(r->s, "%s", err);
    rig_arrive(r, 10, 40, P_BASE, 1);
    rig_run(r, 100);
    rig_arrive(r, 11, 44, 90000, 1);
    rig_run(r, 100);
    rig_arrive(r, 12, 20, P_BASE, 1);
    rig_run(r, 100);
    r->loaded = r->retreats = 0;
}

static kvt_sched_req_info_t info_of(const rig_t *r, uint64_t req)
{
    kvt_sched_req_info_t info;
    cr_assert_eq(kvt_sched_req_info(r->s, req, &info), 0, "request %llu unknown",
                 (unsigned long long)req);
    return info;
}

//  Request 13 arrives 10 s after the images were stored (past the 5 s
//  verified window): its admission is held for its touch's verdict. The
//  touch verdict is lost (the test drops it). Returns the image's hash.
static kvt_hash_t held_setup(rig_t *r, uint64_t t0)
{
    hold_joint_setup(r);
    kvt_sched_set_now(r->s, t0);
    rig_arrive(r, 13, 36, P_BASE, 1);
    cr_assert_eq(rig_step(r), 1, "the plan carries the touch");
    cr_assert_eq(r->plan.nloads, 0, "held: no load yet");
    cr_assert_eq(r->plan.ntouches, 1);
    cr_assert_eq(info_of(r, 13).state, 1, "waiting for the touch verdict");
    r->npending = 0; //  the touch verdict is lost
    return r->plan.touches[0].hash;
}

// ------------------------------------------------------ the held queue ----

//  A request held for its touch verdict keeps its place, but the request
//  behind it is admitted and runs in the same plans.
Test(sched_hold, rule_I6_a_held_admission_does_not_block_the_requests_behind_it)
{
    static rig_t r;
    uint64_t t0 = 10000000;
    held_setup(&r, t0);
    uint64_t holds0 = counter(&r, "sched.verify_holds");
    rig_arrive(&r, 14, 8, 70000, 1);
    kvt_sched_set_now(r.s, t0 + 1000);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(info_of(&r, 13).state, 1, "13 is still held");
    cr_assert_gt(counter(&r, "sched.verify_holds"), holds0, "13 was held again in this pass");
    kvt_sched_req_info_t i14 = info_of(&r, 14);
    cr_assert_eq(i14.state, 3, "14, behind the held 13, is admitted and runs");
    bool listed = false;
    for (uint32_t i = 0; i < r.plan.nentries; i++)
        listed |= r.plan.entries[i].op.req == 14;
    cr_assert(listed, "14 computes in this plan");
    //  The hold ends by its bound; everything settles.
    rig_deliver(&r);
    kvt_sched_set_now(r.s, t0 + 3000000);
    rig_run(&r, 100);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

// --------------------------------------------------- neutral verdicts ----

//  A state verdict on which every rank skipped its leg arrives for the held
//  image: it is counted and ends no hold; a real verdict on it does.
Test(sched_hold, rule_I6_a_neutral_state_verdict_ends_no_verify_hold)
{
    static rig_t r;
    uint64_t t0 = 10000000;
    kvt_hash_t h = held_setup(&r, t0);
    uint64_t released0 = counter(&r, "stidx.holds_released");
    kvt_verdict_t v = {.chan = KVT_CHAN_STATE,
                       .op = {.req = 999, .gen = 1},
                       .key = h,
                       .ok = true,
                       .detail = KVT_DETAIL_SKIPPED};
    cr_assert_eq(kvt_sched_verdict(r.s, &v), -1, "no such load: stale for the core");
    cr_assert_eq(counter(&r, "stidx.neutral_verdicts"), 1, "the index saw it");
    cr_assert_eq(counter(&r, "stidx.holds_released"), released0, "no rank read the image");
    kvt_sched_set_now(r.s, t0 + 1000);
    rig_step(&r);
    cr_assert_eq(r.plan.nloads, 0, "still held: the neutral verdict is no evidence");
    cr_assert_eq(info_of(&r, 13).state, 1);
    r.npending = 0;
    //  The control: the same verdict with a real ok confirms the image.
    v.detail = KVT_DETAIL_OK;
    kvt_sched_verdict(r.s, &v);
    cr_assert_eq(counter(&r, "stidx.holds_released"), released0 + 1);
    kvt_sched_set_now(r.s, t0 + 2000);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.nloads, 1, "confirmed: the load goes out");
    rig_deliver(&r);
    rig_run(&r, 100);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  Replaces the queued state verdicts by neutral ones (every rank skipped
//  its state leg); the KV leg's verdict stays ok.
static void neutralise_state(rig_t *r)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < r->npending; i++)
        if (r->pending[i].chan == KVT_CHAN_STATE) {
            r->pending[i].ok = true;
            r->pending[i].detail = KVT_DETAIL_SKIPPED;
            n++;
        }
    cr_assert_eq(n, 1, "one state leg");
}

//  A joint whose state leg no rank ran: the slot was never written, so the
//  load does not settle ok on it. It retreats to its HBM hit, as on a
//  failed state leg, and the image is neither confirmed nor retracted.
Test(sched_hold, a_load_whose_state_leg_every_rank_skipped_retreats)
{
    static rig_t r;
    hold_joint_setup(&r);
    uint64_t images0 = counter(&r, "stidx.images"), done0 = counter(&r, "stidx.completed");
    uint64_t failed0 = counter(&r, "stidx.failed");
    rig_arrive(&r, 13, 36, P_BASE, 1);
    cr_assert_eq(rig_step(&r), 1);
    kvt_sched_req_info_t info = info_of(&r, 13);
    cr_assert_eq(info.state, 2, "loading");
    cr_assert_eq(info.joint_src, 2, "the state from the tier");
    cr_assert_eq(info.hbm_hit, 20);
    neutralise_state(&r);
    rig_deliver(&r);
    info = info_of(&r, 13);
    cr_assert_eq(info.state, 3);
    cr_assert_eq(info.computed, 20, "retreated to the HBM hit, not resumed at 32");
    cr_assert_eq(counter(&r, "stidx.completed"), done0, "the load did not complete");
    cr_assert_eq(counter(&r, "stidx.failed"), failed0 + 1);
    cr_assert_eq(counter(&r, "stidx.images"), images0, "not a miss: nothing retracted");
    cr_assert_eq(counter(&r, "stidx.neutral_verdicts"), 1);
    rig_step(&r);
    cr_assert_eq(r.retreats, 1);
    cr_assert_eq(r.loaded, 0);
    rig_deliver(&r);
    rig_run(&r, 100);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  The same for an orphan (its request aborted mid-load): its late verdicts
//  settle it failed, not completed.
Test(sched_hold, an_orphan_whose_state_leg_every_rank_skipped_settles_failed)
{
    static rig_t r;
    hold_joint_setup(&r);
    uint64_t done0 = counter(&r, "stidx.completed"), failed0 = counter(&r, "stidx.failed");
    kvt_sched_stats_t st0, st;
    kvt_sched_stats(r.s, &st0);
    rig_arrive(&r, 13, 36, P_BASE, 1);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(info_of(&r, 13).state, 2, "loading");
    cr_assert_eq(kvt_sched_abort(r.s, 13), 0);
    cr_assert_eq(counter(&r, "stidx.orphans"), 1);
    neutralise_state(&r);
    rig_deliver(&r);
    cr_assert_eq(counter(&r, "stidx.orphans"), 0, "settled by its verdicts");
    cr_assert_eq(counter(&r, "stidx.completed"), done0, "not completed");
    cr_assert_eq(counter(&r, "stidx.failed"), failed0 + 1);
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.loads_ok, st0.loads_ok);
    cr_assert_eq(st.loads_failed, st0.loads_failed + 1);
    rig_run(&r, 100);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

// ----------------------------------------------------------------- I7 ----

static uint64_t s_rand(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

//  No armed load outlives the plan that recorded it (I7): the admission
//  records a state load and carries it in the same LoadSpec, with nothing
//  between that can return, so no step needs to seal what is left armed.
//  Checked after every plan of random sequences on the production path:
//  joints, verify holds that end by their bound, aborts and preemptions
//  mid-load, failed, neutral and late verdicts.
Test(sched_hold, rule_I7_no_load_stays_armed_past_the_plan_that_recorded_it)
{
    static rig_t r;
    uint64_t state_loads = 0, orphaned = 0, holds = 0;
    for (uint64_t seed = 1; seed <= 6; seed++) {
        uint64_t rs = seed * 0x9E3779B97F4A7C15ull;
        hold_joint_setup(&r);
        uint64_t now = 0, next_id = 100;
        for (int step = 0; step < 300; step++) {
            now += s_rand(&rs) % 2000000; //  images age past the window: holds
            kvt_sched_set_now(r.s, now);
            uint32_t what = (uint32_t)(s_rand(&rs) % 8);
            if (what < 3) //  a prompt sharing 24..44 tokens of the cached one
                rig_arrive(&r, next_id++, 24 + (uint32_t)(s_rand(&rs) % 21), P_BASE, 1);
            else if (what == 3) //  a fresh prompt that evicts
                rig_arrive(&r, next_id++, 8 + (uint32_t)(s_rand(&rs) % 30),
                           60000 + 100 * (uint32_t)step, 1);
            else if (what == 4 && next_id > 100)
                (void)kvt_sched_abort(r.s, 100 + s_rand(&rs) % (next_id - 100));
            else if (what == 5 && next_id > 100)
                (void)kvt_sched_preempt(r.s, 100 + s_rand(&rs) % (next_id - 100));
            int rc = rig_step(&r);
            cr_assert_neq(rc, KVT_SCHED_REFUSED);
            cr_assert_eq(counter(&r, "stidx.armed"), 0, "seed %llu step %d: a load stayed armed",
                         (unsigned long long)seed, step);
            //  Tear a request down mid-load: its load is orphaned.
            if (rc == 1 && r.plan.nloads > 0 && s_rand(&rs) % 3 == 0) {
                uint64_t victim = r.plan.loads[s_rand(&rs) % r.plan.nloads].op.req;
                if (s_rand(&rs) % 2)
                    cr_assert_eq(kvt_sched_abort(r.s, victim), 0);
                else
                    cr_assert_eq(kvt_sched_preempt(r.s, victim), 0);
            }
            //  Verdicts: some fail, some state legs are neutral, some come
            //  a step late.
            uint32_t keep = 0;
            for (uint32_t i = 0; i < r.npending; i++) {
                kvt_verdict_t *v = &r.pending[i];
                uint32_t x = (uint32_t)(s_rand(&rs) % 16);
                if ((v->chan == KVT_CHAN_STATE || v->chan == KVT_CHAN_LOAD) && x == 0) {
                    v->ok = false;
                    v->detail = v->chan == KVT_CHAN_STATE ? KVT_DETAIL_MISS : KVT_DETAIL_IO;
                } else if (v->chan == KVT_CHAN_STATE && x == 1)
                    v->detail = KVT_DETAIL_SKIPPED;
                if (x >= 12) {
                    r.pending[keep++] = *v;
                    continue;
                }
                if (v->chan == KVT_CHAN_SAVE && v->ok && !rig_holds(&r, v->key) && r.nstored < 1024)
                    r.stored[r.nstored++] = v->key;
                kvt_sched_verdict(r.s, v);
            }
            r.npending = keep;
            rig_audit(&r);
        }
        //  Drain: every verdict delivered, holds end by their bound.
        for (int step = 0;; step++) {
            cr_assert_lt(step, 2000, "seed %llu did not go idle", (unsigned long long)seed);
            now += 100000;
            kvt_sched_set_now(r.s, now);
            int rc = rig_step(&r);
            cr_assert_eq(counter(&r, "stidx.armed"), 0);
            rig_deliver(&r);
            rig_audit(&r);
            if (rc == 0 && r.plan.idle)
                break;
        }
        cr_assert(kvt_sched_quiescent(r.s), "seed %llu", (unsigned long long)seed);
        cr_assert_eq(counter(&r, "stidx.declined"), 0, "nothing was left to decline");
        state_loads += counter(&r, "stidx.dispatched");
        orphaned += counter(&r, "stidx.orphaned");
        holds += counter(&r, "stidx.holds");
        kvt_sched_destroy(&r.s);
    }
    cr_assert_geq(state_loads, 30, "the sequences dispatched %llu state loads",
                  (unsigned long long)state_loads);
    cr_assert_geq(orphaned, 5, "%llu orphaned", (unsigned long long)orphaned);
    cr_assert_geq(holds, 5, "%llu verify holds", (unsigned long long)holds);
}
