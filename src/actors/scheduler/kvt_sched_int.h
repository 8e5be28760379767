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
    kvt_sched_cfg_t cfg;      //  configuration
    uint32_t bpc;             //  blocks per chunk
    uint64_t next_step;       //  the step number the next plan must carry
    bool applied;             //  the last planned step was applied (apply or plan did it)
    kvt_blockmgr_t *bm;       //  HBM blocks
    kvt_loadtrack_t *lt;      //  loads: start, verdicts, settle or retreat, convoys, orphans
    kvt_saves_t *sv;          //  saves through the save tracker
    kvt_lookups_t *lk;        //  tier lookups
    kvt_reqtab_t *rt;         //  request records, their lists and hash chains
    kvt_ckpt_t *ck;           //  state slots and HBM checkpoints (hybrid; NULL when dense)
    kvt_stidx_t *stidx;       //  state images and state loads (hybrid; NULL when dense)
    uint64_t now_us;          //  the caller's clock (kvt_sched_set_now)
    uint32_t *scratch_unref;  //  unreferenced-block prefix counts of the match
    kvt_sched_probe_t probe;  //  the last admission probe (rule B1)
    uint32_t *scratch_blocks; //  block ids for the match at admission
    kvt_planbuf_t *pb;        //  the plan under construction
    kvt_sched_stats_t stats;  //  counters
};

//  Room in the plan scratch for `nblocks` more block ids and `nkeys` more
//  hashes: 0, or -1 when out of memory.
int kvt_sched_reserve_scratch(kvt_sched_t *self, uint32_t nblocks, uint32_t nkeys);

//  Fills the load or save spec `sp` with [start, end) of request r (whole
//  chunks): its block ids and chunk keys go into the plan scratch, as
//  offsets until the plan is finished. The caller reserved the scratch.
void kvt_sched_fill_spec(kvt_sched_t *self, kvt_sreq_t *r, uint32_t start, uint32_t end,
                         kvt_load_spec_t *sp);

//  Queues an event for the next plan.
void kvt_sched_event(kvt_sched_t *self, uint64_t req, uint32_t gen, uint8_t type, uint32_t a,
                     uint32_t b, uint32_t c);

//  True while the plan may grow by `bytes` more.
bool kvt_sched_plan_fits(const kvt_sched_t *self, size_t bytes);

//  Loads past their deadline settle failed and their requests run
//  (kvt_sched.c; every plan, O(1) per load expired).
void kvt_sched_expire_loads(kvt_sched_t *self);

//  kvt_sched_admit: the request waits for its tier lookup (others go on).
#define S_ADMIT_LOOKUP 2

//  The prefill tail a hit always leaves (kvt_sched_admit.c).
uint32_t kvt_sched_tail(const kvt_sched_t *self);

//  True for a hybrid model.
static inline bool kvt_sched_hybrid(const kvt_sched_t *self)
{
    return self->ck != NULL;
}

//  Tries to admit the waiting request in `slot` (kvt_sched_admit.c): 1 when
//  admitted (its entry or load goes into the plan), 0 when it must wait
//  (admission stops), S_ADMIT_LOOKUP when it waits for its tier lookup.
int kvt_sched_admit(kvt_sched_t *self, uint32_t slot);

//  Hybrid admission (kvt_sched_admit.c).
int kvt_sched_admit_hybrid(kvt_sched_t *self, uint32_t slot);

//  Probes request r from a reset probe (rule B1; kvt_sched_admit.c): the
//  match, the gated hit, and the demand when the fit passes. No side
//  effects on blocks or counters.
void kvt_sched_probe_req(kvt_sched_t *self, kvt_sreq_t *r, kvt_sched_probe_t *p);

//  Appends a state op to the plan (0, or -1 when out of memory).
int kvt_sched_state_op(kvt_sched_t *self, const kvt_sreq_t *r, uint8_t kind, uint32_t entry,
                       uint32_t at);

//  Releases what an admission holds besides its blocks: the state slot and
//  every checkpoint pin or reservation (the one path finish, preemption,
//  abort and a settled abort take).
void kvt_sched_release_state(kvt_sched_t *self, kvt_sreq_t *r);

//  Retires request `slot` whose admission ended (finished or aborted): its
//  state goes back now, its blocks once no save reads them.
void kvt_sched_retire(kvt_sched_t *self, uint32_t slot);

#endif
