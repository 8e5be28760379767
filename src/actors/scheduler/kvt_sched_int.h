/*  kvt_sched_int.h — private to the scheduler core's coordinator: the
    core's struct (the modules it holds, the configuration, its own
    counters) and what the coordinator's files share. Only the
    coordinator's files and the bench hook include it (tests/
    test_layout_sched.c checks it); the modules below never do. */
#ifndef KVT_SCHED_INT_H_INCLUDED
#define KVT_SCHED_INT_H_INCLUDED

#include "base/kvt_hmap.h"
#include "base/kvt_ilist.h"
#include "base/kvt_vec.h"
#include "kvt_admit.h"
#include "kvt_blockmgr.h"
#include "kvt_ckpt.h"
#include "kvt_loadtrack.h"
#include "kvt_lookups.h"
#include "kvt_planbuf.h"
#include "kvt_reqtab.h"
#include "kvt_saves.h"
#include "kvt_savetrack.h"
#include "kvtier/kvt_sched.h"
#include "kvt_stidx.h"

struct _kvt_sched_t {
    kvt_sched_cfg_t cfg;     //  configuration
    uint32_t bpc;            //  blocks per chunk
    uint64_t next_step;      //  the step number the next plan must carry
    bool applied;            //  the last planned step was applied (apply or plan did it)
    kvt_blockmgr_t *bm;      //  HBM blocks
    kvt_loadtrack_t *lt;     //  loads: start, verdicts, settle or retreat, convoys, orphans
    kvt_saves_t *sv;         //  saves through the save tracker
    kvt_lookups_t *lk;       //  tier lookups
    kvt_reqtab_t *rt;        //  request records, their lists and hash chains
    kvt_ckpt_t *ck;          //  state slots and HBM checkpoints (hybrid; NULL when dense)
    uint32_t ck_blocks;      //  blocks one HBM checkpoint withholds (0: a separate pool)
    kvt_stidx_t *stidx;      //  state images and state loads (hybrid; NULL when dense)
    uint64_t now_us;         //  the caller's clock (kvt_sched_set_now)
    kvt_admit_t *ad;         //  the admission decision
    kvt_planbuf_t *pb;       //  the plan under construction
    uint32_t grid_iv;        //  KVTIER: this plan's grid interval (0: checkpoint_interval)
    kvt_sched_stats_t stats; //  counters
};

//  Queues an event for the next plan.
void kvt_sched_event(kvt_sched_t *self, uint64_t req, uint32_t gen, uint8_t type, uint32_t a,
                     uint32_t b, uint32_t c);

//  Loads past their deadline settle failed and their requests run
//  (kvt_sched.c; every plan, O(1) per load expired).
void kvt_sched_expire_loads(kvt_sched_t *self);

//  Reserves an HBM checkpoint for a take of `h` (kvt_sched.c): with one
//  HBM budget its blocks are withheld first, by the budget's rule.
uint32_t kvt_sched_ckpt_reserve(kvt_sched_t *self, kvt_hash_t h);

//  Hybrid: marks the blocks of r above the deepest HBM checkpoint of its
//  chain as low value before they are released (kvt_sched.c).
void kvt_sched_mark_low(kvt_sched_t *self, kvt_sreq_t *r);

//  True for a hybrid model.
static inline bool kvt_sched_hybrid(const kvt_sched_t *self)
{
    return self->ck != NULL;
}

//  Releases what an admission holds besides its blocks: the state slot and
//  every checkpoint pin or reservation (the one path finish, preemption,
//  abort and a settled abort take).
void kvt_sched_release_state(kvt_sched_t *self, kvt_sreq_t *r);

//  Retires request `slot` whose admission ended (finished or aborted): its
//  state goes back now, its blocks once no save reads them.
void kvt_sched_retire(kvt_sched_t *self, uint32_t slot);

#endif
