/*  kvt_loadtrack — the one engine-side owner of a load (a module of the
    scheduler core; rules I1, I2, L2, B2, A3).

    A load starts when an admission commits it (kvt_loadtrack_start: a
    KV-only load is recorded in the load index here, kvidx; a load with a
    state leg was recorded in the state-offload index, stidx, by the
    admission). Its legs report (kvt_loadtrack_verdict, L2); once all did it
    settles in its index and either resumes at B or retreats to the HBM hit
    (B2: the pins taken at admission come back into the block table, the
    state goes back to the hit's checkpoint, the tier hit is reopened for
    saving). It counts the chunks of loads in flight (convoys). A load whose
    request is torn down mid-load becomes an orphan of its index; what it
    still writes (its KV leg's blocks, its state leg's slot) moves to an
    orphan holding here and goes back only once the index settles it (late
    verdicts) or reclaims it (timed from orphan time, I2). A later record of
    the same id starts above every orphaned generation (A3).

    It alone writes the load sub-record of a request record (r->load:
    floor / end, legs, details, kv_lower, convoy, the retreat pins and the
    hit's checkpoint pin; tests/test_layout_sched.c checks it) and returns
    outcomes; it never changes r->state or r->gen (the coordinator moves
    the request, the request table its generation). It owns the load
    counters. Every dispatched load has a holding from its reservation at
    admission to its settlement, and a deadline (load_deadline_us after
    dispatch, on the core's clock): a load no rank reports on settles
    failed (TIMEOUT) then, in deadline order, with no scan (the live loads
    form a list in deadline order). Collaborators are borrowed at creation: the request table,
    the plan buffer (events), the block manager, the state pool and the
    state index (NULL for a dense model), the save tracker (NULL: no tier). */
#ifndef KVT_LOADTRACK_H_INCLUDED
#define KVT_LOADTRACK_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvt_blockmgr.h"
#include "kvt_ckpt.h"
#include "kvt_planbuf.h"
#include "kvt_reqtab.h"
#include "kvt_savetrack.h"
#include "kvt_stidx.h"

typedef struct {
    uint32_t block_size;        //  tokens per block
    uint32_t chunk_size;        //  tokens per chunk
    uint64_t orphan_reclaim_us; //  orphans unsettled this long are reclaimed (0 = default)
    uint64_t load_deadline_us;  //  a live load still out this long settles failed (0 = default)
} kvt_loadtrack_cfg_t;

typedef struct _kvt_loadtrack_t kvt_loadtrack_t;

//  Outcomes of a live load's verdict.
enum {
    KVT_LOAD_STALE = -1,    //  no leg of this load (counted stale by the caller)
    KVT_LOAD_PENDING = 0,   //  a leg reported, others still out
    KVT_LOAD_SETTLED = 1,   //  settled ok: the request resumes at load.end
    KVT_LOAD_RETREATED = 2, //  settled failed: the request resumes at its HBM hit
};

kvt_loadtrack_t *kvt_loadtrack_new(const kvt_loadtrack_cfg_t *cfg, kvt_reqtab_t *rt,
                                   kvt_planbuf_t *pb, kvt_blockmgr_t *bm, kvt_ckpt_t *ck,
                                   kvt_stidx_t *stidx, kvt_savetrack_t *track);

void kvt_loadtrack_destroy(kvt_loadtrack_t **self_p);

//  Before an admission commits load op (whose KV leg writes nblocks
//  blocks): reserves its holding, so that an abort or preemption mid-load
//  never needs memory to keep what the lanes still write. 0, or -1 (out
//  of memory, or op already held): the admission must not commit it.
int kvt_loadtrack_reserve(kvt_loadtrack_t *self, kvt_opid_t op, uint32_t nblocks);

//  The admission that reserved op did not commit its load after all.
void kvt_loadtrack_unreserve(kvt_loadtrack_t *self, kvt_opid_t op);

//  What an admission decided about request r's load (kvt_loadtrack_start).
typedef struct {
    uint32_t floor;  //  first token of the load (the KV leg starts here)
    uint32_t end;    //  its resume point B
    uint8_t legs;    //  the legs it dispatches (S_LEG_KV | S_LEG_STATE; never 0: an HBM
                     //  state at B above the gated hit implies a KV leg)
    bool convoy;     //  count its KV leg's chunk keys as loading (hybrid)
    uint32_t *pins;  //  the retreat pins, npins entries (consumed: r->load owns it)
    uint32_t npins;  //  entries in pins
    uint32_t pin_lo; //  block index of pins[0] in the table
    uint32_t ck_hit; //  the hit's checkpoint, pinned for a retreat (KVT_CKPT_NONE: none)
} kvt_load_start_t;

//  A new record r (no load yet): its load sub-record starts empty, no
//  checkpoint pinned.
void kvt_loadtrack_arrive(kvt_loadtrack_t *self, kvt_sreq_t *r);

//  The admission of r (r->gen its new generation) committed the load it
//  reserved, as `ld` says: recorded in r->load, its keys counted when
//  ld->convoy, counted dispatched, due by now_us + load_deadline_us; a
//  KV-only load is recorded in kvidx and carried. Called once per
//  committed load, by the admission.
void kvt_loadtrack_start(kvt_loadtrack_t *self, kvt_sreq_t *r, const kvt_load_start_t *ld,
                         uint64_t now_us);

//  Request r lets go of its state (finish, preemption, abort): the hit's
//  checkpoint pin of a load goes back, its convoy keys are uncounted.
void kvt_loadtrack_let_go(kvt_loadtrack_t *self, kvt_sreq_t *r);

//  The earliest deadline of a live load (UINT64_MAX: none).
uint64_t kvt_loadtrack_next_deadline(const kvt_loadtrack_t *self);

//  The live load with the earliest deadline, if that is <= now_us, settles
//  failed with TIMEOUT on every leg still out: its request retreats (as on
//  a failed verdict, KVT_LOAD_RETREATED) and true is returned with the
//  request's slot in *slot; its late verdicts are dropped and counted.
//  False when no deadline has passed. O(1) per call.
bool kvt_loadtrack_expire(kvt_loadtrack_t *self, uint64_t now_us, uint32_t *slot);

//  Counts (+1) or uncounts (-1) r's KV leg keys [load.floor, load.end) as
//  loading (convoys); true while another load in flight covers `key`.
void kvt_loadtrack_convoy_mark(kvt_loadtrack_t *self, kvt_sreq_t *r, int delta);
bool kvt_loadtrack_convoy_busy(const kvt_loadtrack_t *self, kvt_hash_t key);

//  A load or state verdict for r's live load (r LOADING, same generation,
//  attempt 0): KVT_LOAD_*.
int kvt_loadtrack_verdict(kvt_loadtrack_t *self, kvt_sreq_t *r, const kvt_verdict_t *v,
                          uint64_t now_us);

//  Request r is torn down (abort, preemption) while LOADING: its load is
//  orphaned in its index, what its legs write moves to an orphan holding,
//  everything else the load held (retreat pins, convoy keys) is let go.
void kvt_loadtrack_orphan(kvt_loadtrack_t *self, kvt_sreq_t *r, uint64_t now_us);

//  A load verdict that matches no live load: an orphan's leg, or a late
//  one of a load that timed out. 0 when it reached an orphan (settled once
//  its last leg reported) or was a timed-out load's (dropped, counted in
//  load_late_verdicts), -1 when stale.
int kvt_loadtrack_orphan_verdict(kvt_loadtrack_t *self, const kvt_verdict_t *v, uint64_t now_us);

//  Frees orphans older than the reclaim timeout (every plan; O(what it
//  frees)).
void kvt_loadtrack_reclaim(kvt_loadtrack_t *self, uint64_t now_us);

//  Every generation orphaned so far is <= this.
uint32_t kvt_loadtrack_gen_floor(const kvt_loadtrack_t *self);

//  Orphaned loads still holding blocks or a slot (gauge); chunk keys
//  counted as loading.
uint32_t kvt_loadtrack_orphans(const kvt_loadtrack_t *self);
uint32_t kvt_loadtrack_convoy_keys(const kvt_loadtrack_t *self);

//  Writes its counters into their fields of out.
void kvt_loadtrack_stats(const kvt_loadtrack_t *self, kvt_sched_stats_t *out);

//  0, or -1 with a message: every holding is under its op, owned by a live
//  orphan of its index, and counted; kvidx passes its own check. Adds the
//  holdings' block references to expect[] and returns their slots in
//  *slots (the coordinator's audit).
int kvt_loadtrack_check(const kvt_loadtrack_t *self, uint32_t *expect, uint32_t *slots, char *err,
                        size_t errlen);

#endif
