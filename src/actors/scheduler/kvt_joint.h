/*  kvt_joint — the joint boundary planner for hybrid requests (design §4).

    A hybrid request can resume at B only where KV for [0, B) and a state
    checkpoint at B both exist. Given the request's HBM hits, the tier's KV
    hit, where checkpoints are held and the admission probe's demand, the
    planner chooses B and how the blocks below it are split:

    * B is the highest chunk-grid boundary above the gated HBM hit `hbm`,
      at most prompt - tail, with KV up to B (all in HBM, or in the tier)
      and a checkpoint at B (HBM or a tier image).
    * The KV leg starts on the chunk grid at `claim`: the chunk floor of the
      ungated block hit when that floor is already ≥ hbm (the resident KV
      stays shared), else the chunk floor of hbm. Blocks below claim stay
      shared; [claim, B) is written into fresh private blocks, so no shared
      block is ever written. Below hbm that is a private refill of
      [claim, hbm).
    * Fit before commit: the probe's demand (fresh blocks plus the
      unreferenced blocks it pins, for an admission at hbm) plus what the
      joint adds must fit. A retreat must always be able to resume at hbm,
      so the joint holds what that needs until the load settles: the shared
      hit blocks of [claim, hbm) when claim < hbm (their fresh copies are
      the extra demand), or fresh spares for [hbm, claim) when claim > hbm
      (only the unreferenced shared blocks there add demand). No room:
      skip the joint and keep the HBM hit (partial_chunk_no_room). A probe
      without demand skips the joint (no_probe_demand): fail closed.
    * B - hbm < min_load: recompute instead of loading (below_min_load).

    Pure: no allocation, no side effects except the counters it is given. */
#ifndef KVT_JOINT_H_INCLUDED
#define KVT_JOINT_H_INCLUDED

#include <stdbool.h>
#include <stdint.h>

typedef enum {
    KVT_JOINT_NONE = 0,   //  no joint: resume at the HBM hit
    KVT_JOINT_STATE_HBM,  //  the state at B comes from an HBM checkpoint
    KVT_JOINT_STATE_TIER, //  the state at B comes from a tier image
} kvt_joint_src_t;

typedef enum {
    KVT_JOINT_OK = 0,                //  a joint boundary was chosen
    KVT_JOINT_TIER_WITHIN_HBM,       //  neither the tier nor HBM KV reaches past the HBM hit
    KVT_JOINT_NO_RUNG_ABOVE_HBM,     //  KV reaches further, but no checkpoint above the hit
    KVT_JOINT_BELOW_MIN_LOAD,        //  the gain B - hbm is below min_load_tokens
    KVT_JOINT_NO_PROBE_DEMAND,       //  the probe carried no demand (fail closed)
    KVT_JOINT_PARTIAL_CHUNK_NO_ROOM, //  the joint's extra blocks do not fit
} kvt_joint_reason_t;

//  Checkpoint availability at a boundary (tokens, on the chunk grid).
typedef bool (*kvt_joint_has_fn)(void *ctx, uint32_t boundary);

typedef struct {
    uint32_t block_size;        //  tokens per block
    uint32_t chunk_size;        //  tokens per chunk (multiple of block_size)
    uint32_t prompt;            //  prompt tokens
    uint32_t tail;              //  tokens a hit always leaves to compute (1, 2 with speculation)
    uint32_t min_load;          //  min_load_tokens (0 = any gain loads)
    uint32_t block_hit;         //  ungated HBM block hit (tokens, block grid; the "compressed hit")
    uint32_t hbm;               //  gated HBM hit (tokens, ≤ block_hit)
    uint32_t tier_kv;           //  tier KV hit: leading chunks [0, tier_kv) held (tokens)
    kvt_joint_has_fn ckpt_hbm;  //  an HBM checkpoint is held at a boundary
    kvt_joint_has_fn ckpt_tier; //  a tier image is held at a boundary
    void *ctx;                  //  passed to both
    bool has_demand;            //  the probe's fit passed and set demand (rule B1)
    uint32_t demand;            //  the probe's num_new_blocks for an admission at hbm
    uint32_t available;         //  blocks an allocation can obtain now
    uint32_t hbm_pin_cost;      //  blocks a state from HBM at B takes out of available when
                                //  pinned (one HBM budget: a checkpoint's blocks; 0 = none)
    //  unref[i]: blocks of the block hit [0, i) with no reference (length
    //  block_hit / block_size + 1); the fit counts the ones the joint pins.
    const uint32_t *unref;
} kvt_joint_in_t;

typedef struct {
    kvt_joint_src_t src;       //  where the state at B comes from (NONE: no joint)
    kvt_joint_reason_t reason; //  why (OK when src != NONE)
    uint32_t b;                //  resume point (hbm when there is no joint)
    uint32_t cand;             //  the boundary found above hbm, also when skipped (0: none)
    uint32_t claim;            //  KV leg start; blocks below stay shared (hbm when no joint)
    uint32_t demand;           //  blocks the commit needs (the probe's demand when no joint)
} kvt_joint_t;

typedef struct {
    uint64_t state_hbm;             //  boundaries whose state comes from HBM
    uint64_t state_tier;            //  boundaries whose state comes from the tier
    uint64_t tier_within_hbm;       //  no joint: nothing reaches past the HBM hit
    uint64_t no_rung_above_hbm;     //  no joint: no checkpoint above the HBM hit
    uint64_t partial_chunk_no_room; //  joint skipped: its extra blocks did not fit
    uint64_t no_probe_demand;       //  joint skipped: the probe carried no demand
    uint64_t below_min_load;        //  joint skipped: gain below min_load_tokens
} kvt_joint_stats_t;

//  Plans the joint boundary for `in`; counts the outcome into `st` (may be
//  NULL: a dry run).
kvt_joint_t kvt_joint_plan(const kvt_joint_in_t *in, kvt_joint_stats_t *st);

#endif
