/*  Scheduler core: the admission decision (kvt_sched_admit.c), driven
    directly (no actors) through the rig in tests/common/kvt_test_sched_rig.h:
    FIFO order and the fit (B1), the HBM hit and the tail it leaves, the
    chunk floor and the hit counted as found (B3), the hybrid gate to an
    HBM checkpoint, the joint boundary, the touch of the image a tier hit
    votes for (I5) and the verify hold (I6). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "common/kvt_test_sched_rig.h"
#include "kvtier/kvt_store.h"

//  The token at position i of request id's fed stream (prompt base + i,
//  then the core's predetermined outputs).
static uint32_t fed_token(uint64_t id, uint32_t nprompt, uint32_t base, uint32_t i)
{
    if (i < nprompt)
        return base + i;
    uint64_t x = (id + 1) * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull;
    x ^= x >> 31;
    return (uint32_t)(x % 100000u) + 1000u;
}

//  Request 1 leaves KV up to 320 (its fed tokens) and checkpoints at 192,
//  208, 256 and 320; request 2's prompt is the first `n` fed tokens of 1.
static void gated_setup(rig_t *r, uint32_t spec, uint32_t n, uint32_t *prompt)
{
    kvt_sched_cfg_t cfg = hybrid_cfg(16, 64, 256, 64, 0);
    cfg.spec_tokens = spec;
    rig_init_cfg(r, &cfg);
    rig_arrive(r, 1, 210, 100, 120);
    rig_run(r, 400);
    for (uint32_t i = 0; i < n; i++)
        prompt[i] = fed_token(1, 210, 100, i);
    r->admit_hbm = 0;
    r->restores = 0;
}

//  The touch a plan carries for the image a tier hit votes for.
static kvt_touch_msg_t touch_of(const rig_t *r, kvt_hash_t h)
{
    for (uint32_t i = 0; i < r->plan.ntouches; i++)
        if (kvt_hash_eq(r->plan.touches[i].hash, h))
            return r->plan.touches[i];
    cr_assert_fail("the plan carries no touch of the image");
    return (kvt_touch_msg_t){0};
}

Test(admit, admission_is_fifo_and_stops_at_the_first_request_that_does_not_fit)
{
    static rig_t r;
    rig_init(&r, 16, 0);
    rig_arrive(&r, 1, 200, 1000, 4); //  13 blocks
    rig_arrive(&r, 2, 100, 5000, 4); //  7 blocks: does not fit beside request 1
    rig_arrive(&r, 3, 16, 9000, 4);  //  2 blocks: would fit, but waits behind 2
    cr_assert_eq(rig_step(&r), 1);
    uint32_t admitted = 0;
    for (uint32_t i = 0; i < r.plan.nevents; i++)
        if (r.plan.events[i].type == KVT_EV_ADMIT) {
            cr_assert_eq(r.plan.events[i].op.req, 1, "request %llu admitted out of order",
                         (unsigned long long)r.plan.events[i].op.req);
            admitted++;
        }
    cr_assert_eq(admitted, 1);
    cr_assert_eq(r.plan.nentries, 1);
    cr_assert_eq(r.plan.entries[0].op.req, 1);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.waiting, 2);
    rig_deliver(&r);
    rig_run(&r, 200);
    cr_assert_eq(r.finished, 3);
    kvt_sched_destroy(&r.s);
}

Test(admit, repeated_prompt_hits_hbm_and_leaves_a_token_to_compute)
{
    rig_t r;
    rig_init(&r, 64, 0);
    rig_arrive(&r, 1, 128, 5, 1);
    rig_run(&r, 50);
    rig_arrive(&r, 2, 128, 5, 1);
    rig_run(&r, 50);
    //  128 tokens = 8 full blocks, but a hit must leave one token: 7 blocks.
    cr_assert_eq(r.admit_hbm, 112);
    cr_assert_eq(r.verify_entries, 1, "the resumed request is verified before its forward");
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(admit, evicted_prefix_is_restored_from_the_tier)
{
    rig_t r;
    //  12 blocks of HBM: the second request's prompt evicts the first's.
    rig_init(&r, 12, 64);
    rig_arrive(&r, 1, 150, 100, 1);
    rig_run(&r, 50);
    rig_arrive(&r, 2, 150, 90000, 1);
    rig_run(&r, 50);
    rig_arrive(&r, 3, 150, 100, 1);
    rig_run(&r, 50);
    cr_assert_eq(r.loads_seen, 1);
    cr_assert_eq(r.loaded, 1);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    //  Request 2 evicted request 1's tail: 2 blocks (32 tokens) are still in
    //  HBM. The load refills [0, 128) from the tier (the chunk floor of the
    //  32-token hit is 0); the hit is credited to HBM (rule B3), the rest to
    //  the tier.
    cr_assert_eq(r.admit_hbm - 0, st.hbm_hit_tokens);
    cr_assert_eq(st.tier_hit_tokens, 128 - 32);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(admit, released_blocks_evict_suffix_before_prefix)
{
    rig_t r;
    rig_init(&r, 16, 0);
    rig_arrive(&r, 1, 200, 100, 1); //  13 blocks
    rig_run(&r, 50);
    rig_arrive(&r, 2, 100, 90000, 1); //  7 blocks: 3 free + 4 evicted
    rig_run(&r, 50);
    r.admit_hbm = 0;
    rig_arrive(&r, 3, 200, 100, 1);
    rig_run(&r, 50);
    //  The 4 evicted blocks were request 1's last ones: 9 blocks remain.
    cr_assert_eq(r.admit_hbm, 144);
    kvt_sched_destroy(&r.s);
}

Test(admit, unaligned_hbm_hit_loads_from_the_chunk_floor)
{
    rig_t r;
    rig_init(&r, 16, 64);
    rig_arrive(&r, 1, 200, 100, 1);
    rig_run(&r, 50);
    rig_arrive(&r, 2, 100, 90000, 1);
    rig_run(&r, 50);
    r.admit_hbm = r.admit_tier = 0;
    rig_arrive(&r, 3, 200, 100, 1);
    cr_assert_eq(rig_step(&r), 1);
    //  HBM holds 144 tokens (9 blocks, off the 64-token grid); the tier
    //  holds 192. Keep the 128 below the chunk floor shared, load [128, 192)
    //  into fresh blocks.
    cr_assert_eq(r.plan.nloads, 1);
    cr_assert_eq(r.plan.loads[0].start, 128);
    cr_assert_eq(r.plan.loads[0].end, 192);
    cr_assert_eq(r.plan.loads[0].nblocks, 4);
    //  The hit is recorded as found (rule B3): 144 from HBM, 48 from the tier.
    cr_assert_eq(r.admit_hbm, 144);
    cr_assert_eq(r.admit_tier, 48);
    rig_deliver(&r);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.entries[0].start, 192);
    cr_assert_eq(r.plan.entries[0].verify_end, 192);
    rig_deliver(&r);
    rig_run(&r, 50);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(admit, the_hbm_hit_is_gated_to_the_newest_checkpoint_at_or_below_the_block_hit)
{
    rig_t r;
    uint32_t prompt[300];
    gated_setup(&r, 0, 300, prompt);
    kvt_sched_stats_t st0;
    kvt_sched_stats(r.s, &st0);
    rig_arrive_tokens(&r, 2, prompt, 300, 1);
    cr_assert_eq(rig_step(&r), 1);
    kvt_sched_req_info_t info;
    cr_assert_eq(kvt_sched_req_info(r.s, 2, &info), 0);
    cr_assert_eq(info.block_hit, 288, "KV is resident up to 288 (299 / 16 blocks)");
    cr_assert_eq(info.hbm_hit, 256, "but the newest checkpoint below it is at 256");
    cr_assert_eq(r.plan.entries[0].start, 256);
    cr_assert_eq(r.restores, 1, "the slot is restored from the checkpoint at 256");
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.gate_lost_tokens, 32);
    cr_assert_eq(r.admit_hbm, 256);
    //  The state tax: KV alone could have resumed at 288.
    cr_assert_eq(st.state_tax_tokens - st0.state_tax_tokens, 32);
    cr_assert_eq(st.state_resumes - st0.state_resumes, 1);
    rig_deliver(&r);
    rig_run(&r, 100);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(admit, a_hit_leaves_one_token_and_two_with_speculative_decoding)
{
    rig_t r;
    uint32_t prompt[257];
    gated_setup(&r, 0, 257, prompt);
    rig_arrive_tokens(&r, 2, prompt, 257, 1);
    rig_step(&r);
    kvt_sched_req_info_t info;
    kvt_sched_req_info(r.s, 2, &info);
    cr_assert_eq(info.hbm_hit, 256, "one token left to compute");
    rig_deliver(&r);
    rig_run(&r, 100);
    kvt_sched_destroy(&r.s);

    gated_setup(&r, 3, 257, prompt);
    rig_arrive_tokens(&r, 2, prompt, 257, 1);
    rig_step(&r);
    kvt_sched_req_info(r.s, 2, &info);
    cr_assert_eq(info.hbm_hit, 208, "hit %u: two tokens left, so the hit is gated below 255",
                 info.hbm_hit);
    rig_deliver(&r);
    rig_run(&r, 100);
    kvt_sched_destroy(&r.s);
}

Test(admit, the_twenty_token_hit_with_a_rung_at_32_loads_16_to_32_into_private_blocks)
{
    rig_t r;
    joint_setup(&r, 12, 44);
    kvt_sched_stats_t st0, st;
    kvt_sched_stats(r.s, &st0);
    uint64_t disp0 = counter(&r, "stidx.dispatched"), done0 = counter(&r, "stidx.completed");
    rig_arrive(&r, 13, 36, P_BASE, 1);
    cr_assert_eq(rig_step(&r), 1);
    kvt_sched_req_info_t info;
    cr_assert_eq(kvt_sched_req_info(r.s, 13, &info), 0);
    cr_assert_eq(info.hbm_hit, 20);
    cr_assert_eq(info.state, 2, "loading");
    cr_assert_eq(info.load_floor, 16);
    cr_assert_eq(info.load_end, 32);
    cr_assert_eq(info.joint_src, 2, "the state from the tier");
    cr_assert_eq(r.plan.nloads, 1);
    cr_assert_eq(r.plan.loads[0].start, 16);
    cr_assert_eq(r.plan.loads[0].end, 32);
    cr_assert_eq(r.plan.loads[0].nblocks, 4);
    //  Block 4 ([16, 20)) is written by the load: it is the request's own
    //  fresh block, not the shared one the hit found.
    cr_assert_eq(r.plan.loads[0].blocks[0], info.blocks[4]);
    cr_assert_eq(r.state_loads, 1, "the state at 32 comes from the tier");
    //  The state leg rides in the same LoadSpec (one completion per rank).
    cr_assert(r.plan.loads[0].state);
    cr_assert_eq(r.plan.loads[0].state_boundary, 32);
    cr_assert_eq(r.plan.loads[0].state_slot, info.slot);
    cr_assert_neq(info.slot, UINT32_MAX);
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.joint_state_tier - st0.joint_state_tier, 1);
    cr_assert_eq(st.hbm_hit_tokens - st0.hbm_hit_tokens, 20, "rule B3: the hit, not the floor");
    cr_assert_eq(st.state_tax_tokens - st0.state_tax_tokens, 0, "the joint reaches the KV hit");
    rig_audit(&r);
    //  The load settles once both legs reported, in either order.
    for (uint32_t i = 0; i < r.npending; i++)
        if (r.pending[i].chan == KVT_CHAN_STATE)
            cr_assert_eq(kvt_sched_verdict(r.s, &r.pending[i]), 0);
    kvt_sched_req_info(r.s, 13, &info);
    cr_assert_eq(info.state, 2, "still loading: the KV leg has not reported");
    for (uint32_t i = 0; i < r.npending; i++)
        if (r.pending[i].chan != KVT_CHAN_STATE)
            kvt_sched_verdict(r.s, &r.pending[i]);
    r.npending = 0;
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.entries[0].start, 32);
    cr_assert_eq(r.plan.entries[0].verify_end, 32);
    //  The state index owned the state load and settled it (I1).
    cr_assert_eq(counter(&r, "stidx.dispatched") - disp0, 1);
    cr_assert_eq(counter(&r, "stidx.completed") - done0, 1);
    cr_assert_eq(counter(&r, "stidx.outstanding"), 0);
    rig_deliver(&r);
    rig_run(&r, 100);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  Seed 002's exact-fit pool on the scheduler: a running request holds
//  three blocks, so the pool fits the admission at the HBM hit exactly but
//  not the joint's private refill of [16, 20). The joint is skipped, the
//  request keeps its 20-token hit and computes from there (no crash).
Test(admit, the_exact_fit_pool_skips_the_joint_instead_of_crashing)
{
    rig_t r;
    joint_setup(&r, 12, 44);
    kvt_sched_stats_t st0, st;
    kvt_sched_stats(r.s, &st0);
    rig_arrive(&r, 20, 4, 70000, 8); //  3 blocks, decodes while 13 is admitted
    rig_arrive(&r, 13, 36, P_BASE, 1);
    cr_assert_eq(rig_step(&r), 1); //  20 runs, 13 asks the tier
    rig_deliver(&r);
    cr_assert_eq(rig_step(&r), 1);
    kvt_sched_req_info_t info;
    cr_assert_eq(kvt_sched_req_info(r.s, 13, &info), 0);
    cr_assert_eq(info.state, 3, "running at the HBM hit, not loading");
    cr_assert_eq(info.hbm_hit, 20);
    cr_assert_eq(info.computed, 20);
    cr_assert_eq(r.plan.nloads, 0);
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.partial_chunk_no_room - st0.partial_chunk_no_room, 1);
    cr_assert_eq(st.state_tax_tokens - st0.state_tax_tokens, 12, "the tier's 32 minus the 20");
    cr_assert_eq(st.joint_state_tier - st0.joint_state_tier, 0, "the skip is not a boundary");
    cr_assert_eq(st.blocks_in_use, 12, "the pool is used exactly");
    rig_audit(&r);
    rig_deliver(&r);
    rig_run(&r, 100);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(admit, rule_B1_a_refused_reprobe_carries_no_demand)
{
    rig_t r;
    kvt_sched_cfg_t cfg = hybrid_cfg(16, 64, 64, 16, 0);
    rig_init_cfg(&r, &cfg);
    rig_arrive(&r, 1, 200, 100, 1);  //  13 blocks
    rig_arrive(&r, 2, 100, 5000, 1); //  7 blocks
    kvt_sched_probe_t p;
    cr_assert_eq(kvt_sched_probe(r.s, 2, &p), 0);
    cr_assert(p.has_demand, "an empty pool fits request 2");
    cr_assert_eq(p.num_new_blocks, 7);
    cr_assert_eq(rig_step(&r), 1); //  admits 1; 2 no longer fits
    cr_assert_eq(kvt_sched_probe(r.s, 2, &p), 0);
    cr_assert_not(p.has_demand, "the refused re-probe must not carry the earlier demand");
    cr_assert_eq(p.num_new_blocks, 0);
    cr_assert_eq(p.req, 2);
    cr_assert_eq(kvt_sched_probe(r.s, 1, &p), -1, "request 1 is no longer waiting");
    rig_deliver(&r);
    rig_run(&r, 200);
    kvt_sched_destroy(&r.s);
}

//  B3: the 20-token hit loads from its chunk floor (16), but the HBM hit
//  recorded (the counter and the admission event) is the 20 found.
Test(admit, rule_B3_the_hbm_hit_counts_the_gated_hit_found_not_the_chunk_floor)
{
    rig_t r;
    joint_setup(&r, 12, 44);
    kvt_sched_stats_t st0, st;
    kvt_sched_stats(r.s, &st0);
    r.admit_hbm = r.admit_tier = 0;
    rig_arrive(&r, 13, 36, P_BASE, 1);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.loads[0].start, 16, "the KV leg starts at the floor");
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.hbm_hit_tokens - st0.hbm_hit_tokens, 20);
    cr_assert_eq(r.admit_hbm, 20, "the admission event carries the hit");
    cr_assert_eq(r.admit_tier, 12, "the tier is credited with [20, 32) only");
    rig_deliver(&r);
    rig_run(&r, 100);
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.tier_hit_tokens - st0.tier_hit_tokens, 12);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(admit, a_dense_hit_leaves_two_tokens_with_speculative_decoding)
{
    rig_t r;
    kvt_sched_cfg_t cfg = hybrid_cfg(16, 64, 256, 64, 0);
    cfg.state_bytes = 0;
    cfg.spec_tokens = 3;
    rig_init_cfg(&r, &cfg);
    rig_arrive(&r, 1, 256, 100, 2);
    rig_run(&r, 50);
    r.admit_hbm = 0;
    rig_arrive(&r, 2, 257, 100, 1);
    rig_run(&r, 50);
    cr_assert_eq(r.admit_hbm, 240, "hit %u: 257 - 2 tokens, on the block grid", r.admit_hbm);
    kvt_sched_destroy(&r.s);
}

//  A tier hit that votes for an image touches it; a GONE verdict of that
//  touch forgets the image (I5).
Test(admit, rule_I5_a_tier_hit_touches_its_image_and_a_gone_touch_forgets_it)
{
    static rig_t r;
    joint_setup(&r, 12, 44);
    uint64_t images0 = counter(&r, "stidx.images");
    kvt_sched_stats_t st0;
    kvt_sched_stats(r.s, &st0);
    rig_arrive(&r, 13, 36, P_BASE, 1);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.nloads, 1);
    cr_assert(r.plan.loads[0].state);
    kvt_touch_msg_t t = touch_of(&r, r.plan.loads[0].state_hash);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.touches_planned - st0.touches_planned, 1);
    kvt_verdict_t v = {.chan = KVT_CHAN_TOUCH,
                       .op = {t.round, KVT_TOUCH_GEN},
                       .key = t.hash,
                       .ok = false,
                       .detail = KVT_DETAIL_MISS,
                       .touch = KVT_TOUCH_GONE};
    cr_assert_eq(kvt_sched_verdict(r.s, &v), 0);
    cr_assert_eq(counter(&r, "stidx.forgotten_gone"), 1);
    cr_assert_eq(counter(&r, "stidx.images"), images0 - 1);
    rig_deliver(&r);
    rig_run(&r, 100);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  Seed 000's lost verdict: an image stored longer ago than the verified
//  window holds the admission that would load it for its touch's verdict;
//  the verdict never comes, and the hold ends once its bound (2 s from the
//  first hold, not from the later passes or touches) has passed (I6).
Test(admit, rule_I6_the_lost_touch_verdict_releases_the_hold_within_the_bound)
{
    static rig_t r;
    joint_setup(&r, 12, 44);
    uint64_t t0 = 10000000; //  10 s: past the 5 s window since the store
    kvt_sched_set_now(r.s, t0);
    rig_arrive(&r, 13, 36, P_BASE, 1);
    cr_assert_eq(rig_step(&r), 1, "the plan carries the touch");
    cr_assert_eq(r.plan.nloads, 0, "held: no load yet");
    cr_assert_eq(r.plan.ntouches, 1);
    kvt_sched_req_info_t info;
    cr_assert_eq(kvt_sched_req_info(r.s, 13, &info), 0);
    cr_assert_eq(info.state, 1, "waiting for the touch verdict");
    r.npending = 0; //  the touch verdict is lost
    kvt_sched_set_now(r.s, t0 + 1000000);
    rig_step(&r);
    cr_assert_eq(r.plan.nloads, 0, "still inside the bound");
    kvt_sched_set_now(r.s, t0 + 2000000);
    rig_step(&r);
    cr_assert_eq(r.plan.nloads, 0, "still held at the bound");
    r.npending = 0;
    kvt_sched_set_now(r.s, t0 + 2000001);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.nloads, 1, "past the bound the hold ended");
    cr_assert_eq(kvt_sched_req_info(r.s, 13, &info), 0);
    cr_assert_eq(info.state, 2);
    cr_assert_eq(info.joint_src, 2);
    cr_assert_eq(counter(&r, "stidx.holds_expired"), 1);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_geq(st.verify_holds, 2);
    rig_deliver(&r);
    rig_run(&r, 100);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  B1: the fit counts the cached blocks an HBM hit keeps when nothing
//  references them (they sit in the evictable pool, so taking them shrinks
//  what is available for the fresh blocks). 8 blocks: request 1's 4 blocks
//  stay cached, request 2 runs in 1; request 3 (128 tokens, 8 blocks) hits
//  request 1's prefix and needs 4 fresh blocks plus those 4: 7 are
//  available, so it waits for request 2 instead of failing its allocation.
Test(admit, rule_B1_the_fit_counts_the_unreferenced_cached_blocks_a_hit_keeps)
{
    rig_t r;
    rig_init(&r, 8, 0);
    rig_arrive(&r, 1, 64, 1, 1);
    rig_run(&r, 50);
    rig_arrive(&r, 2, 8, 5000, 20);
    cr_assert_eq(rig_step(&r), 1);
    rig_deliver(&r);
    rig_arrive(&r, 3, 128, 1, 1);
    rig_step(&r);
    rig_deliver(&r);
    rig_audit(&r);
    kvt_sched_req_info_t info;
    cr_assert_eq(kvt_sched_req_info(r.s, 2, &info), 0);
    cr_assert_eq(info.state, 3, "request 2 still runs");
    cr_assert_eq(kvt_sched_req_info(r.s, 3, &info), 0);
    cr_assert_eq(info.state, 1, "request 3 waits: 4 fresh + 4 kept > 7 available");
    rig_run(&r, 200);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.finished, 3);
    cr_assert_gt(st.hbm_hit_tokens, 0, "request 3 was admitted on its hit once request 2 ended");
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}
