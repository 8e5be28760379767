/*  kvt_sched_int.h — private to the scheduler core (kvt_sched.c: requests,
    applying a step, planning; kvt_sched_admit.c: admission;
    kvt_sched_save.c: saves, verdicts, counters, audit). Nothing outside
    src/actors/scheduler includes it. */
#ifndef KVT_SCHED_INT_H_INCLUDED
#define KVT_SCHED_INT_H_INCLUDED

#include "base/kvt_hmap.h"
#include "base/kvt_ilist.h"
#include "base/kvt_vec.h"
#include "kvt_blockmgr.h"
#include "kvt_ckpt.h"
#include "kvt_lookups.h"
#include "kvt_planbuf.h"
#include "kvt_reqtab.h"
#include "kvt_savetrack.h"
#include "kvt_sched.h"
#include "kvt_stidx.h"

//  What an orphaned load still holds (kvt_sched_orphan.c): the load was
//  handed to its index (stidx for a load with a state leg, kvidx for a
//  KV-only one) when its request was torn down mid-load; the blocks it
//  writes and its state slot stay off the free lists until that index
//  settles it (a late verdict) or reclaims it, and go back only through
//  kvt_sched_orphan_release.
typedef struct {
    kvt_opid_t op;       //  the torn-down admission's load
    uint32_t *blocks;    //  block references held for the load's KV leg
    uint32_t nblocks;    //  entries in blocks
    uint32_t sslot;      //  state slot the state leg writes (KVT_CKPT_NONE: none)
    kvt_hash_t st_key;   //  the state leg's key (the prefix hash at B)
    uint8_t legs;        //  legs without a verdict (S_LEG_*)
    uint8_t legs_failed; //  legs that reported failed
    bool st_miss;        //  the state leg failed with a real miss (I3)
    bool state;          //  owned by stidx (a state leg), else by kvidx
    bool live;           //  in use
} kvt_sorphan_t;

struct _kvt_sched_t {
    kvt_sched_cfg_t cfg;      //  configuration
    uint32_t bpc;             //  blocks per chunk
    uint64_t next_step;       //  the step number the next plan must carry
    bool applied;             //  the last planned step was applied (apply or plan did it)
    kvt_blockmgr_t *bm;       //  HBM blocks
    kvt_savetrack_t *track;   //  saves: frontier, leases, re-emits (NULL: no tier)
    uint32_t leased;          //  block references held by save leases
    kvt_lookups_t *lk;        //  tier lookups
    kvt_reqtab_t *rt;         //  request records, their lists and hash chains
    kvt_ckpt_t *ck;           //  state slots and HBM checkpoints (hybrid; NULL when dense)
    kvt_stidx_t *stidx;       //  state images and state loads (hybrid; NULL when dense)
    kvt_stidx_t *kvidx;       //  KV-only loads' lifecycle (every model; no images)
    kvt_sorphan_t *orph;      //  orphaned loads' holdings
    uint32_t norph_cap;       //  holdings allocated
    uint32_t *orph_free;      //  free holding slots
    uint32_t norph_free;      //  entries in orph_free
    kvt_hmap_t *orph_by_op;   //  {gen, req} → holding of that orphan
    uint32_t gen_floor;       //  every generation orphaned so far is <= this
    uint64_t now_us;          //  the caller's clock (kvt_sched_set_now)
    kvt_hmap_t *loading_keys; //  chunk key → loads in flight covering it (hybrid convoys)
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

//  Emits what the save tracker offers for the request: its forwarded
//  chunks past the save frontier, or a finished request's leased tail
//  (kvt_sched_save.c).
void kvt_sched_emit_saves(kvt_sched_t *self, uint32_t slot);

//  The save tracker of a new scheduler (NULL when there is no tier):
//  leases take block references and pin the checkpoint an image is read
//  from. 0, or -1 when out of memory.
int kvt_sched_track_new(kvt_sched_t *self);

//  Starts tracking admission r->gen of r with the save frontier at
//  `frontier` (the tokens the tier holds); a decided load records its save
//  floor [hbm, hit) (S5; hit > hbm).
void kvt_sched_track_admit(kvt_sched_t *self, kvt_sreq_t *r, uint32_t frontier, uint32_t hbm,
                           uint32_t hit);

//  Request r finished: its forwarded chunks not yet saved keep a lease as
//  a tail the next plan builds (S4); r then goes on the tails list.
void kvt_sched_track_finish(kvt_sched_t *self, uint32_t slot);

//  Request r was torn down (abort, preemption): its unbuilt saves retire.
void kvt_sched_track_abort(kvt_sched_t *self, kvt_sreq_t *r);

//  True while the save tracker still holds something of request r.
bool kvt_sched_tracked(const kvt_sched_t *self, const kvt_sreq_t *r);

//  End of a plan: tails the plan did not build are retired (S4) and
//  finished records nothing holds any more are freed.
void kvt_sched_end_plan(kvt_sched_t *self);

//  Saves outstanding (built, no store verdict).
uint64_t kvt_sched_saves_outstanding(const kvt_sched_t *self);

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

//  Counts (+1) or uncounts (-1) request r's KV leg keys [load_floor,
//  load_end) in loading_keys.
void kvt_sched_convoy_mark(kvt_sched_t *self, kvt_sreq_t *r, int delta);

//  Orphaned loads (kvt_sched_orphan.c). The index that owns request r's
//  live load: stidx for a load with a state leg, kvidx otherwise.
kvt_stidx_t *kvt_sched_load_index(kvt_sched_t *self, const kvt_sreq_t *r);

//  Request r's load went out in this plan: a KV-only load is recorded in
//  kvidx and carried (a state leg's load is recorded in stidx at admission).
void kvt_sched_load_out(kvt_sched_t *self, kvt_sreq_t *r);

//  Settles request r's live load in its index (its verdicts all arrived).
void kvt_sched_load_settle(kvt_sched_t *self, kvt_sreq_t *r, bool ok, bool state_miss);

//  Request r is torn down (abort, preemption) while LOADING: its load is
//  orphaned in its index, the blocks its KV leg writes and its state slot
//  move to an orphan holding, everything else the load held (retreat pins,
//  checkpoint pins, convoy keys) is let go. Afterwards r holds no load;
//  the caller unlinks it and releases the rest as for a running request.
void kvt_sched_orphan_load(kvt_sched_t *self, kvt_sreq_t *r);

//  A load verdict that matches no live load: an orphan's leg. 0 when it
//  reached an orphan (settled once its last leg reported), -1 when stale.
int kvt_sched_orphan_verdict(kvt_sched_t *self, const kvt_verdict_t *v);

//  Frees orphans older than cfg.orphan_reclaim_us, timed from orphan time
//  (every plan; O(what it frees)).
void kvt_sched_reclaim(kvt_sched_t *self);

//  0, or -1 with a message: every holding is under its op, owned by a live
//  orphan of its index, and counted; adds its block references to
//  expect[] and returns its slots in *slots (the audit).
int kvt_sched_orphan_audit(const kvt_sched_t *self, uint32_t *expect, uint32_t *slots, char *err,
                           size_t errlen);

//  Frees the holdings table (destroy).
void kvt_sched_orphan_destroy(kvt_sched_t *self);

//  Retires request `slot` whose admission ended (finished or aborted): its
//  state goes back now, its blocks once no save reads them.
void kvt_sched_retire(kvt_sched_t *self, uint32_t slot);

#endif
