/*  The joint boundary planner (kvt_joint), driven directly: the seeds'
    reproductions on the block 4 / chunk 16 geometry. */
#include <criterion/criterion.h>
#include <string.h>

#include "actors/scheduler/kvt_joint.h"

#define BS 4
#define CS 16

//  Checkpoints held per boundary (bit c/CS), in HBM and in the tier.
typedef struct {
    uint32_t hbm;  //  bitmap of boundaries with an HBM checkpoint
    uint32_t tier; //  bitmap of boundaries with a tier image
} rungs_t;

static bool s_hbm(void *ctx, uint32_t b)
{
    return (((rungs_t *)ctx)->hbm >> (b / CS)) & 1u;
}

static bool s_tier(void *ctx, uint32_t b)
{
    return (((rungs_t *)ctx)->tier >> (b / CS)) & 1u;
}

static uint32_t unref_all[65]; //  every block of the hit unreferenced: unref[i] = i

static kvt_joint_in_t base_in(rungs_t *r)
{
    for (uint32_t i = 0; i < 65; i++)
        unref_all[i] = i;
    kvt_joint_in_t in = {.block_size = BS,
                         .chunk_size = CS,
                         .prompt = 40,
                         .tail = 1,
                         .block_hit = 20,
                         .hbm = 20,
                         .tier_kv = 32,
                         .ckpt_hbm = s_hbm,
                         .ckpt_tier = s_tier,
                         .ctx = r,
                         .has_demand = true,
                         .demand = 5,
                         .available = 100,
                         .unref = unref_all};
    return in;
}

//  Seed 002: a 20-token hit (block 4, chunk 16) with a rung at 32: [0, 16)
//  stays shared, [16, 20) is refilled privately, the tier loads [16, 32)
//  and the state at 32.
Test(joint, twenty_token_hit_with_a_rung_at_32_loads_16_to_32_into_private_blocks)
{
    rungs_t r = {.hbm = 0, .tier = 1u << 2};
    kvt_joint_in_t in = base_in(&r);
    kvt_joint_stats_t st = {0};
    kvt_joint_t d = kvt_joint_plan(&in, &st);
    cr_assert_eq(d.src, KVT_JOINT_STATE_TIER);
    cr_assert_eq(d.b, 32);
    cr_assert_eq(d.claim, 16, "the KV leg starts at the hit's chunk floor");
    cr_assert_eq(d.demand, 5 + 1, "the private copy of block 4 [16, 20) is the extra demand");
    cr_assert_eq(st.state_tier, 1);
}

Test(joint, the_compressed_hit_floor_above_the_gated_hit_is_kept_shared)
{
    //  KV resident up to 36 but the newest HBM checkpoint is at 20: the
    //  chunk floor of the block hit (32) is already above the gated hit.
    rungs_t r = {.hbm = 0, .tier = 1u << 3};
    kvt_joint_in_t in = base_in(&r);
    in.prompt = 64;
    in.block_hit = 36;
    in.tier_kv = 48;
    kvt_joint_t d = kvt_joint_plan(&in, NULL);
    cr_assert_eq(d.b, 48);
    cr_assert_eq(d.claim, 32, "claim %u: the resident [16, 32) is not refetched", d.claim);
    //  The shared blocks of [20, 32) it now references are unreferenced: +3.
    cr_assert_eq(d.demand, 5 + 3);
}

//  Seed 002's exact-fit pool: the probe's demand fits exactly, the joint's
//  private refill does not: skip the joint, keep the HBM hit.
Test(joint, the_exact_fit_pool_skips_the_joint_and_keeps_the_hbm_hit)
{
    rungs_t r = {.hbm = 0, .tier = 1u << 2};
    kvt_joint_in_t in = base_in(&r);
    in.available = in.demand;
    kvt_joint_stats_t st = {0};
    kvt_joint_t d = kvt_joint_plan(&in, &st);
    cr_assert_eq(d.src, KVT_JOINT_NONE);
    cr_assert_eq(d.reason, KVT_JOINT_PARTIAL_CHUNK_NO_ROOM);
    cr_assert_eq(d.b, 20, "the HBM hit is kept");
    cr_assert_eq(d.claim, 20);
    cr_assert_eq(st.partial_chunk_no_room, 1);
    cr_assert_eq(st.state_tier + st.state_hbm, 0, "a skip is not also a boundary");
    in.available = in.demand + 1;
    cr_assert_eq(kvt_joint_plan(&in, NULL).src, KVT_JOINT_STATE_TIER, "one more block fits");
}

Test(joint, rule_B1_a_probe_without_demand_skips_the_joint)
{
    rungs_t r = {.hbm = 0, .tier = 1u << 2};
    kvt_joint_in_t in = base_in(&r);
    in.has_demand = false;
    kvt_joint_stats_t st = {0};
    kvt_joint_t d = kvt_joint_plan(&in, &st);
    cr_assert_eq(d.src, KVT_JOINT_NONE);
    cr_assert_eq(d.reason, KVT_JOINT_NO_PROBE_DEMAND);
    cr_assert_eq(d.b, 20);
    cr_assert_eq(st.no_probe_demand, 1);
    //  Also the state-only joint with no private tail (claim == B) fails
    //  closed: the check comes before every shortcut.
    rungs_t r2 = {.hbm = 0, .tier = 1u << 2};
    kvt_joint_in_t in2 = base_in(&r2);
    in2.block_hit = 36;
    in2.tier_kv = 0;
    in2.has_demand = false;
    cr_assert_eq(kvt_joint_plan(&in2, NULL).reason, KVT_JOINT_NO_PROBE_DEMAND);
    in2.has_demand = true;
    kvt_joint_t d2 = kvt_joint_plan(&in2, NULL);
    cr_assert_eq(d2.b, 32);
    cr_assert_eq(d2.claim, 32, "KV up to 32 is in HBM: a state-only load");
}

Test(joint, an_hbm_checkpoint_at_the_boundary_is_preferred_to_the_tier_image)
{
    rungs_t r = {.hbm = 1u << 2, .tier = 1u << 2};
    kvt_joint_in_t in = base_in(&r);
    kvt_joint_stats_t st = {0};
    kvt_joint_t d = kvt_joint_plan(&in, &st);
    cr_assert_eq(d.src, KVT_JOINT_STATE_HBM);
    cr_assert_eq(st.state_hbm, 1);
    cr_assert_eq(st.state_tier, 0);
}

Test(joint, the_highest_rung_with_kv_below_it_is_chosen)
{
    rungs_t r = {.hbm = 0, .tier = (1u << 2) | (1u << 3) | (1u << 4)};
    kvt_joint_in_t in = base_in(&r);
    in.prompt = 100;
    in.tier_kv = 48; //  the image at 64 has no KV below it
    cr_assert_eq(kvt_joint_plan(&in, NULL).b, 48);
}

Test(joint, no_rung_above_the_hit_and_tier_within_hbm_are_counted_apart)
{
    rungs_t r = {.hbm = 0, .tier = 0};
    kvt_joint_in_t in = base_in(&r);
    kvt_joint_stats_t st = {0};
    kvt_joint_t d = kvt_joint_plan(&in, &st);
    cr_assert_eq(d.reason, KVT_JOINT_NO_RUNG_ABOVE_HBM);
    cr_assert_eq(st.no_rung_above_hbm, 1);
    in.tier_kv = 16;
    d = kvt_joint_plan(&in, &st);
    cr_assert_eq(d.reason, KVT_JOINT_TIER_WITHIN_HBM);
    cr_assert_eq(st.tier_within_hbm, 1);
    cr_assert_eq(d.b, 20);
}

Test(joint, a_gain_below_min_load_tokens_recomputes)
{
    rungs_t r = {.hbm = 0, .tier = 1u << 2};
    kvt_joint_in_t in = base_in(&r);
    in.min_load = 13; //  the rung at 32 gains 12 tokens over the hit at 20
    kvt_joint_stats_t st = {0};
    kvt_joint_t d = kvt_joint_plan(&in, &st);
    cr_assert_eq(d.reason, KVT_JOINT_BELOW_MIN_LOAD);
    cr_assert_eq(st.below_min_load, 1);
    in.min_load = 12;
    cr_assert_eq(kvt_joint_plan(&in, NULL).b, 32);
}

Test(joint, a_boundary_always_leaves_the_prefill_tail)
{
    rungs_t r = {.hbm = 0, .tier = 1u << 2};
    kvt_joint_in_t in = base_in(&r);
    in.prompt = 32; //  B = 32 would leave nothing to compute
    cr_assert_eq(kvt_joint_plan(&in, NULL).src, KVT_JOINT_NONE);
    in.prompt = 33;
    cr_assert_eq(kvt_joint_plan(&in, NULL).b, 32, "one token left");
    in.tail = 2; //  speculative decoding: two tokens
    cr_assert_eq(kvt_joint_plan(&in, NULL).src, KVT_JOINT_NONE);
    in.prompt = 34;
    cr_assert_eq(kvt_joint_plan(&in, NULL).b, 32);
}
