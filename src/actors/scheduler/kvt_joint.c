/*  kvt_joint — see kvt_joint.h. */
#include "kvt_joint.h"

#include <stddef.h>

static bool s_has(kvt_joint_has_fn fn, void *ctx, uint32_t boundary)
{
    return fn && fn(ctx, boundary);
}

static kvt_joint_t s_skip(kvt_joint_t out, kvt_joint_reason_t why, uint64_t *counter)
{
    out.src = KVT_JOINT_NONE;
    out.reason = why;
    if (counter)
        (*counter)++;
    return out;
}

kvt_joint_t kvt_joint_plan(const kvt_joint_in_t *in, kvt_joint_stats_t *st)
{
    uint32_t cs = in->chunk_size, bs = in->block_size;
    kvt_joint_t out = {.src = KVT_JOINT_NONE,
                       .reason = KVT_JOINT_OK,
                       .b = in->hbm,
                       .claim = in->hbm,
                       .demand = in->demand};
    kvt_joint_stats_t dummy;
    if (!st)
        st = &dummy;
    //  The highest boundary with KV below it: all of it in HBM (the chunk
    //  floor of the block hit) or in the tier, never past the prefill tail.
    uint32_t limit = in->prompt > in->tail ? in->prompt - in->tail : 0;
    uint32_t cf = in->block_hit / cs * cs;
    uint32_t kv_top = cf > in->tier_kv / cs * cs ? cf : in->tier_kv / cs * cs;
    if (kv_top > limit)
        kv_top = limit / cs * cs;
    uint32_t b = 0;
    bool from_hbm = false;
    for (uint32_t c = kv_top; c > in->hbm && c >= cs; c -= cs) {
        from_hbm = s_has(in->ckpt_hbm, in->ctx, c);
        if (from_hbm || s_has(in->ckpt_tier, in->ctx, c)) {
            b = c;
            break;
        }
    }
    if (b == 0)
        return kv_top <= in->hbm ? s_skip(out, KVT_JOINT_TIER_WITHIN_HBM, &st->tier_within_hbm)
                                 : s_skip(out, KVT_JOINT_NO_RUNG_ABOVE_HBM, &st->no_rung_above_hbm);
    out.cand = b;
    if (b - in->hbm < in->min_load)
        return s_skip(out, KVT_JOINT_BELOW_MIN_LOAD, &st->below_min_load);
    //  Fail closed before any shortcut: without the probe's demand the fit
    //  cannot be checked (rule B1).
    if (!in->has_demand)
        return s_skip(out, KVT_JOINT_NO_PROBE_DEMAND, &st->no_probe_demand);
    //  The KV leg starts on the grid: keep the resident prefix shared when
    //  its chunk floor already reaches the gated hit, else refill
    //  [floor, hbm) privately.
    uint32_t claim = cf >= in->hbm ? cf : in->hbm / cs * cs;
    if (claim > b)
        claim = b;
    uint32_t hb = in->hbm / bs, clb = claim / bs;
    uint64_t need = in->demand;
    if (clb < hb)
        need += hb - clb; //  fresh copies of [claim, hbm); the hit blocks stay pinned
    else
        need += in->unref[clb] - in->unref[hb]; //  shared [hbm, claim) it now references
    //  A state from HBM: its checkpoint is pinned before the allocation.
    if (need + (from_hbm ? in->hbm_pin_cost : 0) > in->available)
        return s_skip(out, KVT_JOINT_PARTIAL_CHUNK_NO_ROOM, &st->partial_chunk_no_room);
    out.src = from_hbm ? KVT_JOINT_STATE_HBM : KVT_JOINT_STATE_TIER;
    out.b = b;
    out.claim = claim;
    out.demand = (uint32_t)need;
    if (from_hbm)
        st->state_hbm++;
    else
        st->state_tier++;
    return out;
}
