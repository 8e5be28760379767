/*  kvt_loadtrack_int.h — the load tracker's record, shared by
    kvt_loadtrack.c (start, leg verdicts, the deadline and the drain,
    settle or retreat, the convoy) and kvt_loadtrack_orphan.c (orphans,
    their late verdicts, reclaim and the audit). Private to this folder. */
#pragma once

#include "kvt_joint.h"
#include "kvt_loadhold.h"
#include "kvt_loadtrack.h"

#define S_RECLAIM_BATCH 16u //  orphans freed per reclaim call (looped until fewer)

typedef struct {
    uint64_t loads_dispatched; //  loads sent to the ranks
    uint64_t loads_ok;         //  settled ok
    uint64_t loads_failed;     //  settled failed
    uint64_t loads_orphaned;   //  torn down mid-load
    uint64_t loads_reclaimed;  //  orphans freed without a verdict
    uint32_t load_orphans;     //  gauge: orphans still holding
    uint64_t tier_hit_tokens;  //  tokens restored from the tier
    uint64_t lower_hit_tokens; //  ... of which read from below the CPU pool
    uint64_t hbm_lost_tokens;  //  HBM hit tokens lost by a retreat
    uint64_t retreats_to_hbm;  //  failed joints resumed at the gated HBM hit
    uint64_t retreats_to_zero; //  failed joints resumed at token 0
    uint64_t loads_timed_out;  //  settled failed (TIMEOUT) at their deadline
    uint64_t late_verdicts;    //  verdicts of a timed-out load, dropped
    uint64_t loads_drained;    //  timed-out loads held until no rank can write them
} kvt_loadtrack_counts_t;

struct _kvt_loadtrack_t {
    kvt_loadtrack_cfg_t cfg;   //  configuration
    kvt_reqtab_t *rt;          //  request records (borrowed)
    kvt_planbuf_t *pb;         //  the plan (borrowed; events)
    kvt_blockmgr_t *bm;        //  HBM blocks (borrowed)
    kvt_ckpt_t *ck;            //  state pool (borrowed; NULL when dense)
    kvt_stidx_t *stidx;        //  state images and state loads (borrowed; NULL when dense)
    kvt_savetrack_t *track;    //  saves (borrowed; NULL: no tier)
    kvt_stidx_t *kvidx;        //  KV-only loads' lifecycle (owned; no images)
    kvt_loadhold_t *holds;     //  every load's holding, dispatch to settle (orphans' too)
    uint32_t gen_floor;        //  every generation orphaned so far is <= this
    kvt_loadtrack_counts_t st; //  counters
};

//  The index that owns request r's live load: stidx with a state leg
//  from the tier, the KV-only index otherwise.
static inline kvt_stidx_t *kvt_loadtrack_index(kvt_loadtrack_t *self, const kvt_sreq_t *r)
{
    return r->joint_src == KVT_JOINT_STATE_TIER ? self->stidx : self->kvidx;
}
