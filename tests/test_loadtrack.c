/*  Scheduler core: the load tracker (kvt_loadtrack.c), the one
    engine-side owner of a load, driven directly (no actors) through the rig
    in tests/common/kvt_test_sched_rig.h: a failed load's retreat (B2), the
    generation that settles a load (A3), a state miss, convoys, and
    orphaned loads (rules I1, I2, A3).

    A request torn down mid-load hands its load to its index as an orphan:
    the record goes at once, the blocks the load writes and its state slot
    stay held until the load's late verdicts settle it or reclaim (timed
    from orphan time) frees it. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "common/kvt_test_sched_rig.h"

//  Takes the verdicts the last plan produced out of the rig (the test
//  delivers them late, or never).
static uint32_t o_take(rig_t *r, kvt_verdict_t *out, uint32_t cap)
{
    uint32_t n = r->npending < cap ? r->npending : cap;
    memcpy(out, r->pending, n * sizeof *out);
    r->npending = 0;
    return n;
}

//  joint_setup with the orphan reclaim timeout set: request 13 (36
//  tokens, a 20-token HBM hit) then loads [16, 32) with its state at 32
//  from the tier.
static void o_setup(rig_t *r, uint32_t hbm_blocks, uint64_t reclaim_us)
{
    kvt_sched_cfg_t cfg = hybrid_cfg(4, 16, 16, hbm_blocks, 64);
    cfg.hbm_checkpoints = 2;
    cfg.orphan_reclaim_us = reclaim_us;
    rig_init_cfg(r, &cfg);
    rig_arrive(r, 10, 40, P_BASE, 1);
    rig_run(r, 100);
    rig_arrive(r, 11, 80, 90000, 1);
    rig_run(r, 100);
    rig_arrive(r, 12, 20, P_BASE, 1);
    rig_run(r, 100);
}

//  Runs to idle as rig_run does, advancing the clock by 1 ms a step (so
//  reclaim can come due).
static void o_run(rig_t *r, uint64_t *now, uint32_t max_steps)
{
    for (uint32_t i = 0; i < max_steps; i++) {
        *now += 1000;
        kvt_sched_set_now(r->s, *now);
        int rc = rig_step(r);
        rig_deliver(r);
        rig_audit(r);
        if (rc == 0 && r->plan.idle)
            return;
    }
    cr_assert_fail("did not go idle in %u steps", max_steps);
}

Test(loadtrack, failed_load_retreats_retracts_and_recomputes)
{
    rig_t r;
    rig_init(&r, 12, 64);
    rig_arrive(&r, 1, 150, 100, 1);
    rig_run(&r, 50);
    rig_arrive(&r, 2, 150, 90000, 1);
    rig_run(&r, 50);
    r.fail_loads = true;
    rig_arrive(&r, 3, 150, 100, 1);
    rig_run(&r, 50);
    cr_assert_eq(r.retreats, 1);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.loads_failed, 1);
    cr_assert_eq(st.tier_hit_tokens, 0);
    //  The missing keys were retracted and saved again by the recompute.
    cr_assert_eq(st.saves_ok, 2 + 2 + 2);
    cr_assert_eq(st.finished, 3);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(loadtrack, rule_A3_stale_generation_verdict_is_ignored)
{
    rig_t r;
    rig_init(&r, 12, 64);
    rig_arrive(&r, 1, 150, 100, 1);
    rig_run(&r, 50);
    rig_arrive(&r, 2, 150, 90000, 1);
    rig_run(&r, 50);
    rig_arrive(&r, 3, 150, 100, 1);
    rig_step(&r);
    cr_assert_eq(r.npending, 1);
    kvt_verdict_t v = r.pending[0];
    v.op.gen += 1;
    cr_assert_eq(kvt_sched_verdict(r.s, &v), -1);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.loading, 1, "a verdict for another generation must not settle the load");
    cr_assert_eq(st.stale_verdicts, 1);
    rig_deliver(&r);
    rig_run(&r, 50);
    kvt_sched_destroy(&r.s);
}

Test(loadtrack, rule_B2_failed_load_retreats_to_the_hbm_hit_sharing_its_blocks)
{
    rig_t r;
    rig_init(&r, 16, 64);
    rig_arrive(&r, 1, 200, 100, 1);
    rig_run(&r, 50);
    rig_arrive(&r, 2, 100, 90000, 1);
    rig_run(&r, 50);
    r.fail_loads = true;
    rig_arrive(&r, 3, 200, 100, 1);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.loads[0].start, 128);
    rig_deliver(&r);
    cr_assert_eq(rig_step(&r), 1);
    //  HBM still held 144 tokens: the retreat shares [128, 144) again and
    //  resumes at the hit, not at the chunk floor.
    cr_assert_eq(r.retreats, 1);
    cr_assert_eq(r.plan.entries[0].start, 144);
    cr_assert_eq(r.plan.entries[0].verify_end, 144);
    rig_deliver(&r);
    rig_run(&r, 50);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.hbm_lost_tokens, 0);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(loadtrack, rule_B2_a_failed_state_leg_retreats_to_the_gated_hbm_hit_on_its_blocks)
{
    rig_t r;
    joint_setup(&r, 12, 44);
    r.fail_state = true;
    rig_arrive(&r, 13, 36, P_BASE, 1);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.nloads, 1);
    kvt_sched_req_info_t before;
    kvt_sched_req_info(r.s, 13, &before);
    uint32_t fresh4 = before.blocks[4];
    rig_deliver(&r); //  the KV leg lands, the state leg misses
    r.fail_state = false;
    r.restores = 0;
    cr_assert_eq(rig_step(&r), 1);
    kvt_sched_req_info_t info;
    kvt_sched_req_info(r.s, 13, &info);
    cr_assert_eq(r.retreats, 1);
    cr_assert_eq(info.state, 3);
    cr_assert_eq(r.plan.entries[0].start, 20, "prefill resumes at the hit, not at 16 or 0");
    cr_assert_eq(r.plan.entries[0].verify_end, 20);
    cr_assert_neq(info.blocks[4], fresh4, "the shared hit block [16, 20) is back in the table");
    cr_assert_eq(r.restores, 1, "the hit's checkpoint is restored into the slot");
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.retreats_to_hbm, 1);
    cr_assert_eq(st.retreats_to_zero, 0);
    cr_assert_eq(st.hbm_lost_tokens, 0);
    //  The state leg's own miss retracts the image at 32 (I3).
    cr_assert_eq(counter(&r, "stidx.failed"), 1, "the only failed state load");
    cr_assert_eq(counter(&r, "stidx.forgotten_miss"), 1);
    rig_audit(&r);
    rig_deliver(&r);
    rig_run(&r, 100);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(loadtrack, rule_B2_a_failed_joint_without_an_hbm_hit_retreats_to_token_zero)
{
    rig_t r;
    kvt_sched_cfg_t cfg = hybrid_cfg(4, 16, 16, 12, 64);
    cfg.hbm_checkpoints = 2;
    rig_init_cfg(&r, &cfg);
    rig_arrive(&r, 10, 40, P_BASE, 1);
    rig_run(&r, 100);
    rig_arrive(&r, 11, 44, 90000, 1);
    rig_run(&r, 100);
    r.fail_loads = true;
    rig_arrive(&r, 12, 20, P_BASE, 1); //  no HBM checkpoint left: the hit gates to 0
    cr_assert_eq(rig_step(&r), 1);
    kvt_sched_req_info_t info;
    kvt_sched_req_info(r.s, 12, &info);
    cr_assert_eq(info.hbm_hit, 0);
    cr_assert_eq(info.load_end, 16);
    rig_deliver(&r);
    r.fail_loads = false;
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.entries[0].start, 0);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.retreats_to_zero, 1);
    cr_assert_eq(st.retreats_to_hbm, 0);
    rig_deliver(&r);
    rig_run(&r, 100);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  Two requests needing the same tier chunks in the same pass: the second
//  waits for the first's load (convoy_waits) and then resumes from the
//  KV it brought into HBM, loading only the state.
Test(loadtrack, no_load_convoys_a_second_request_waits_for_the_chunks_being_loaded)
{
    rig_t r;
    joint_setup(&r, 24, 80);
    uint32_t p1[36], p2[36];
    for (uint32_t i = 0; i < 36; i++)
        p1[i] = p2[i] = P_BASE + i;
    p2[35] = 1; //  a different last token: same chunks [0, 32)
    rig_arrive_tokens(&r, 13, p1, 36, 1);
    rig_arrive_tokens(&r, 14, p2, 36, 1);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.nloads, 1, "one KV load of [16, 32), not two");
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.convoy_waits, 1);
    kvt_sched_req_info_t info;
    kvt_sched_req_info(r.s, 14, &info);
    cr_assert_eq(info.state, 1, "request 14 waits");
    rig_deliver(&r);
    r.loads_seen = 0;
    cr_assert_eq(rig_step(&r), 1);
    kvt_sched_req_info(r.s, 14, &info);
    cr_assert_eq(info.block_hit, 32, "the KV request 13 loaded is shared");
    cr_assert_eq(r.loads_seen, 0, "no KV leg: only the state at 32 is loaded");
    cr_assert_eq(r.plan.nloads, 1);
    cr_assert_eq(r.plan.loads[0].nkeys, 0, "a state-only LoadSpec (rule L3)");
    cr_assert(r.plan.loads[0].state);
    plan_round_trips(&r.plan);
    cr_assert_eq(r.state_loads, 2);
    rig_deliver(&r);
    rig_run(&r, 100);
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.convoy_waits, 1, "counted once per wait");
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  I3 on the core: a state miss retracts the image even when its verdict is
//  stale for the scheduler (no load of that operation is outstanding).
Test(loadtrack, a_state_miss_retracts_the_image_without_its_request)
{
    rig_t r;
    joint_setup(&r, 12, 44);
    uint32_t p[36];
    for (uint32_t i = 0; i < 36; i++)
        p[i] = P_BASE + i;
    kvt_sched_probe_t pr;
    rig_arrive_tokens(&r, 13, p, 36, 1);
    cr_assert_eq(kvt_sched_probe(r.s, 13, &pr), 0);
    kvt_verdict_t v = {.chan = KVT_CHAN_STATE,
                       .op = {.req = 999, .gen = 1},
                       .key = pr.chain[7], //  the prefix hash at 32: the image's key
                       .ok = false,
                       .detail = KVT_DETAIL_MISS};
    cr_assert_eq(kvt_sched_verdict(r.s, &v), -1, "no such load: stale");
    cr_assert_eq(counter(&r, "stidx.forgotten_miss"), 1, "but the image is retracted");
    cr_assert_eq(rig_step(&r), 1);
    kvt_sched_req_info_t info;
    kvt_sched_req_info(r.s, 13, &info);
    cr_assert_eq(info.state, 3, "no rung at 32 any more: it runs from its HBM hit");
    cr_assert_eq(info.computed, 20);
    rig_deliver(&r);
    rig_run(&r, 100);
    kvt_sched_destroy(&r.s);
}

//  A3: the id of an aborted request arrives again while the first
//  admission's load is an orphan; the new admission carries a newer
//  generation, so the orphan's late reports settle only the orphan.
Test(loadtrack, rule_A3_a_readmitted_requests_old_orphan_cannot_settle_its_new_load)
{
    rig_t r;
    o_setup(&r, 24, 0);
    rig_arrive(&r, 13, 36, P_BASE, 1);
    cr_assert_eq(rig_step(&r), 1);
    kvt_sched_req_info_t info;
    cr_assert_eq(kvt_sched_req_info(r.s, 13, &info), 0);
    cr_assert_eq(info.state, 2, "loading");
    uint32_t gen1 = info.gen;
    kvt_verdict_t old[16];
    uint32_t nold = o_take(&r, old, 16);
    cr_assert_eq(nold, 2, "a KV leg and a state leg");
    cr_assert_eq(kvt_sched_abort(r.s, 13), 0);
    cr_assert_neq(kvt_sched_req_info(r.s, 13, &info), 0, "the record is freed at once");
    cr_assert_eq(o_stats(&r).load_orphans, 1);
    rig_arrive(&r, 13, 36, P_BASE, 1); //  the same id again
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(kvt_sched_req_info(r.s, 13, &info), 0);
    cr_assert_eq(info.state, 2, "the new admission loads again");
    cr_assert_gt(info.gen, gen1, "with a newer generation");
    for (uint32_t i = 0; i < nold; i++)
        cr_assert_eq(kvt_sched_verdict(r.s, &old[i]), 0, "the orphan's own reports reach it");
    cr_assert_eq(o_stats(&r).load_orphans, 0, "the orphan settled");
    cr_assert_eq(kvt_sched_req_info(r.s, 13, &info), 0);
    cr_assert_eq(info.state, 2, "the new load is still out: the old reports did not settle it");
    rig_audit(&r);
    rig_deliver(&r); //  the new load's own verdicts
    kvt_sched_req_info(r.s, 13, &info);
    cr_assert_eq(info.state, 3, "running");
    rig_run(&r, 200);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  I2: reclaim is timed from orphan time, not from the load's dispatch: a
//  load out for longer than the timeout but orphaned for less stays held.
Test(loadtrack, rule_I2_an_orphan_is_reclaimed_timed_from_orphan_time)
{
    rig_t r;
    const uint64_t S = 1000000;
    o_setup(&r, 24, 10 * S);
    kvt_sched_set_now(r.s, 1 * S);
    rig_arrive(&r, 13, 36, P_BASE, 1);
    cr_assert_eq(rig_step(&r), 1); //  dispatched at 1 s
    kvt_verdict_t lost[16];
    o_take(&r, lost, 16); //  never delivered
    kvt_sched_set_now(r.s, 8 * S);
    cr_assert_eq(kvt_sched_abort(r.s, 13), 0); //  orphaned at 8 s
    kvt_sched_set_now(r.s, 12 * S);            //  11 s after dispatch, 4 s after the abort
    rig_step(&r);
    cr_assert_eq(o_stats(&r).load_orphans, 1, "not due: 4 s since it was orphaned");
    kvt_sched_set_now(r.s, 18 * S - 1);
    rig_step(&r);
    cr_assert_eq(o_stats(&r).load_orphans, 1);
    kvt_sched_set_now(r.s, 18 * S);
    rig_step(&r);
    kvt_sched_stats_t st = o_stats(&r);
    cr_assert_eq(st.load_orphans, 0, "reclaimed 10 s after the abort");
    cr_assert_eq(st.loads_reclaimed, 1);
    cr_assert_eq(counter(&r, "stidx.reclaimed"), 1, "reclaimed by the state-offload index");
    rig_audit(&r);
    kvt_sched_destroy(&r.s);
}

//  A lost verdict of an aborted load leaves nothing immortal: reclaim frees
//  the blocks and the slot, and the core ends quiescent.
Test(loadtrack, a_lost_verdict_of_an_aborted_load_is_reclaimed_and_the_core_ends_quiescent)
{
    rig_t r;
    o_setup(&r, 24, 50000);
    uint64_t now = 0;
    rig_arrive(&r, 13, 36, P_BASE, 1);
    cr_assert_eq(rig_step(&r), 1);
    kvt_verdict_t lost[16];
    o_take(&r, lost, 16);
    cr_assert_eq(kvt_sched_abort(r.s, 13), 0);
    kvt_sched_stats_t st = o_stats(&r);
    cr_assert_eq(st.records, 0, "no record waits for the verdict");
    cr_assert_gt(st.blocks_in_use, 0, "the blocks the load writes are held");
    cr_assert(!kvt_sched_quiescent(r.s), "the orphan holds its slot and blocks");
    o_run(&r, &now, 200);
    cr_assert(kvt_sched_quiescent(r.s), "reclaim freed the orphan's slot and blocks");
    cr_assert_eq(o_stats(&r).loads_reclaimed, 1);
    kvt_sched_destroy(&r.s);
}

//  After reclaim, the orphan's late verdicts are stale: nothing is freed a
//  second time, and a request admitted since keeps what it holds.
Test(loadtrack, a_late_verdict_after_reclaim_is_stale_and_frees_nothing_twice)
{
    rig_t r;
    o_setup(&r, 24, 50000);
    uint64_t now = 0;
    rig_arrive(&r, 13, 36, P_BASE, 1);
    cr_assert_eq(rig_step(&r), 1);
    kvt_verdict_t late[16];
    uint32_t nlate = o_take(&r, late, 16);
    cr_assert_eq(kvt_sched_abort(r.s, 13), 0);
    o_run(&r, &now, 200);
    cr_assert_eq(o_stats(&r).loads_reclaimed, 1);
    rig_arrive(&r, 14, 60, 70000, 8); //  another request holds blocks and a slot
    cr_assert_eq(rig_step(&r), 1);
    rig_deliver(&r);
    kvt_sched_stats_t st0 = o_stats(&r);
    for (uint32_t i = 0; i < nlate; i++)
        cr_assert_eq(kvt_sched_verdict(r.s, &late[i]), -1, "stale");
    kvt_sched_stats_t st = o_stats(&r);
    cr_assert_eq(st.stale_verdicts, st0.stale_verdicts + nlate);
    cr_assert_eq(st.blocks_in_use, st0.blocks_in_use, "nothing freed twice");
    cr_assert_eq(st.loads_ok + st.loads_failed, st0.loads_ok + st0.loads_failed);
    rig_audit(&r);
    o_run(&r, &now, 200);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  I2: a live request's slot is never taken back. Request 13 is preempted
//  mid-load (its first load an orphan) and admitted again; its second
//  load's verdicts come long after the reclaim timeout, which frees the
//  orphan and only the orphan.
Test(loadtrack, rule_I2_a_live_requests_slot_is_never_reclaimed)
{
    rig_t r;
    o_setup(&r, 24, 50000);
    uint64_t now = 0;
    rig_arrive(&r, 13, 36, P_BASE, 1);
    cr_assert_eq(rig_step(&r), 1);
    kvt_verdict_t lost[16];
    o_take(&r, lost, 16);
    kvt_sched_req_info_t info;
    kvt_sched_req_info(r.s, 13, &info);
    uint32_t old_slot = info.slot;
    cr_assert_eq(kvt_sched_preempt(r.s, 13), 0, "a loading request can be preempted");
    kvt_sched_req_info(r.s, 13, &info);
    cr_assert_eq(info.state, 1, "waiting again");
    cr_assert_eq(info.slot, UINT32_MAX, "the orphan has the slot, not the record");
    rig_audit(&r);
    cr_assert_eq(rig_step(&r), 1);
    kvt_sched_req_info(r.s, 13, &info);
    cr_assert_eq(info.state, 2, "loading again");
    uint32_t live_slot = info.slot;
    cr_assert_neq(live_slot, old_slot, "the orphan's slot is still reserved");
    kvt_verdict_t delayed[16];
    uint32_t ndelayed = o_take(&r, delayed, 16);
    now += 10 * 1000000ull; //  far past the timeout, from both loads' dispatch
    kvt_sched_set_now(r.s, now);
    rig_step(&r);
    kvt_sched_stats_t st = o_stats(&r);
    cr_assert_eq(st.loads_reclaimed, 1, "the orphan is reclaimed");
    cr_assert_eq(st.load_orphans, 0);
    kvt_sched_req_info(r.s, 13, &info);
    cr_assert_eq(info.state, 2, "the live load is not");
    cr_assert_eq(info.slot, live_slot, "and keeps its slot");
    rig_audit(&r);
    for (uint32_t i = 0; i < ndelayed; i++)
        cr_assert_eq(kvt_sched_verdict(r.s, &delayed[i]), 0);
    kvt_sched_req_info(r.s, 13, &info);
    cr_assert_eq(info.state, 3, "its own verdicts settle it");
    o_run(&r, &now, 200);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  The blocks an orphaned KV load still writes are not handed to another
//  request before it settles (a dense model: the load index owns the
//  load). 12 blocks: request 3 loads [0, 128) into 8 of its 10 blocks.
Test(loadtrack, the_blocks_of_an_orphaned_load_are_not_handed_out_before_it_settles)
{
    rig_t r;
    rig_init(&r, 12, 64);
    rig_arrive(&r, 1, 150, 100, 1);
    rig_run(&r, 50);
    rig_arrive(&r, 2, 150, 90000, 1);
    rig_run(&r, 50);
    rig_arrive(&r, 3, 150, 100, 1);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.nloads, 1);
    uint32_t written[16], nw = r.plan.loads[0].nblocks;
    cr_assert_eq(nw, 8);
    memcpy(written, r.plan.loads[0].blocks, nw * sizeof *written);
    kvt_verdict_t late[4];
    uint32_t nlate = o_take(&r, late, 4);
    cr_assert_eq(kvt_sched_abort(r.s, 3), 0);
    cr_assert_eq(o_stats(&r).load_orphans, 1, "the load index owns the orphan");
    cr_assert_eq(o_stats(&r).blocks_in_use, nw, "only the blocks the load writes are held");
    //  A request that needs 10 blocks: only 4 are free.
    rig_arrive(&r, 4, 150, 300000, 1);
    rig_step(&r);
    kvt_sched_req_info_t info;
    cr_assert_eq(kvt_sched_req_info(r.s, 4, &info), 0);
    cr_assert_eq(info.state, 1, "waits: the orphan's blocks are not free");
    rig_audit(&r);
    for (uint32_t i = 0; i < nlate; i++)
        cr_assert_eq(kvt_sched_verdict(r.s, &late[i]), 0, "the late verdict settles the orphan");
    cr_assert_eq(o_stats(&r).load_orphans, 0);
    cr_assert_eq(o_stats(&r).blocks_in_use, 0);
    cr_assert_eq(rig_step(&r), 1);
    kvt_sched_req_info(r.s, 4, &info);
    cr_assert_neq(info.state, 1, "admitted once the orphan let go");
    rig_run(&r, 100);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  L2 for an orphan: its KV leg's verdict alone settles nothing (the state
//  leg may still write the slot); the last leg settles it and lets go.
Test(loadtrack, an_orphan_settles_only_once_every_leg_reported)
{
    rig_t r;
    o_setup(&r, 24, 0);
    rig_arrive(&r, 13, 36, P_BASE, 1);
    cr_assert_eq(rig_step(&r), 1);
    kvt_verdict_t late[16];
    uint32_t n = o_take(&r, late, 16);
    cr_assert_eq(n, 2);
    cr_assert_eq(kvt_sched_abort(r.s, 13), 0);
    uint32_t kv = late[0].chan == KVT_CHAN_LOAD ? 0 : 1;
    uint32_t in_use = o_stats(&r).blocks_in_use;
    cr_assert_eq(kvt_sched_verdict(r.s, &late[kv]), 0);
    cr_assert_eq(o_stats(&r).load_orphans, 1, "the state leg has not reported");
    cr_assert_eq(o_stats(&r).blocks_in_use, in_use, "nothing let go yet");
    rig_audit(&r);
    cr_assert_eq(kvt_sched_verdict(r.s, &late[1 - kv]), 0);
    cr_assert_eq(o_stats(&r).load_orphans, 0, "the last leg settles it");
    cr_assert_lt(o_stats(&r).blocks_in_use, in_use, "its blocks went back");
    rig_audit(&r);
    rig_run(&r, 100);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  An orphan owes no plan work: with its verdicts lost and nothing else
//  outstanding, the plan is not held (a held step is planned again only on
//  a verdict, so the reclaim that ends the orphan would never run) and
//  carries the abort's FINISH event; it only stays short of idle until the
//  reclaim, which a later plan with a later clock runs.
Test(loadtrack, an_orphan_with_lost_verdicts_holds_no_plan_back)
{
    rig_t r;
    o_setup(&r, 24, 50000);
    rig_arrive(&r, 13, 36, P_BASE, 1);
    cr_assert_eq(rig_step(&r), 1);
    kvt_verdict_t lost[16];
    o_take(&r, lost, 16);
    cr_assert_eq(kvt_sched_abort(r.s, 13), 0);
    uint32_t fin = r.finished;
    kvt_sched_apply(r.s, r.step, true);
    int rc = rig_step_once(&r);
    cr_assert_neq(rc, KVT_SCHED_HOLD, "held for an orphan that owes nothing");
    cr_assert_eq(r.finished, fin + 1, "the abort's FINISH went out");
    cr_assert_not(r.plan.idle, "the orphan still holds blocks and a slot");
    uint64_t now = 0;
    o_run(&r, &now, 200);
    cr_assert_eq(o_stats(&r).loads_reclaimed, 1);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}
