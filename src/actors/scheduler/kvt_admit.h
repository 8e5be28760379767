/*  kvt_admit — the scheduler core's admission decision (a module of the
    core; design §4, rules B1, B3, I5, I6).

    One path for dense and hybrid requests: a dense request is a load
    with no state leg. The probe (HBM match, the hit gated to an HBM
    checkpoint for a hybrid request, the unreferenced blocks it would pin,
    the demand: B1), the tier hit (kvt_lookups), the boundary (dense: the
    tier hit above the HBM hit; hybrid: the joint planner, kvt_joint.h),
    the fit, the convoy check, the touch and verify hold of a tier image
    (I5, I6), the plan's room; then the commit: the block table (shared
    below the claim, pins for a retreat, B2), the state slot, the load and
    state specs in the plan, the save floor (S5), the lookup settled.

    It owns the admission sub-record of a request record (r->adm: the
    probe's demand, a convoy wait) and writes, at its commit, the
    admission fields (blocks, the hit, the state slot and checkpoint
    pins); the new generation comes from kvt_reqtab_next_gen, and what it
    decided about a load (boundaries, legs, the retreat pins it took, the
    hit's checkpoint pin) goes to kvt_loadtrack_start, which alone writes
    r->load. It owns the admission counters (hits, joint outcomes, state
    tax, convoy waits, touches, holds, state loads). It never changes
    r->state and never moves a request between lists: kvt_admit_try says
    what the coordinator does (the request waits, runs, or loads).

    Collaborators are borrowed at creation: the request table, the plan
    buffer, the block manager, the state pool and the state index (NULL
    for a dense model), the lookups, the load tracker (convoys), the
    saves (the save floor). */
#ifndef KVT_ADMIT_H_INCLUDED
#define KVT_ADMIT_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvt_blockmgr.h"
#include "kvt_ckpt.h"
#include "kvt_loadtrack.h"
#include "kvt_lookups.h"
#include "kvt_planbuf.h"
#include "kvt_reqtab.h"
#include "kvt_saves.h"
#include "kvt_stidx.h"
#include "kvtier/kvt_sched.h"

typedef struct {
    uint32_t block_size; //  tokens per block
    uint32_t chunk_size; //  tokens per chunk
    uint32_t hbm_blocks; //  blocks in HBM (sizes the match scratch)
    uint32_t tail;       //  prefill tail a hit always leaves (1, 2 with speculation)
    uint32_t min_load;   //  min_load_tokens of a joint (hybrid)
    bool tier;           //  a tier exists (its images can serve a joint)
    uint32_t ck_blocks;  //  blocks one HBM checkpoint takes (one HBM budget; 0 = none)
} kvt_admit_cfg_t;

typedef struct _kvt_admit_t kvt_admit_t;

//  What kvt_admit_try decided.
enum {
    KVT_ADMIT_WAIT = 0,    //  the request waits; admission stops at it
    KVT_ADMIT_RUNNING = 1, //  admitted: it runs from its HBM hit
    KVT_ADMIT_LOOKUP = 2,  //  it waits for its tier lookup or a touch (others go on)
    KVT_ADMIT_LOADING = 3, //  admitted: its load is in this plan (start it)
};

//  NULL when out of memory.
kvt_admit_t *kvt_admit_new(const kvt_admit_cfg_t *cfg, kvt_reqtab_t *rt, kvt_planbuf_t *pb,
                           kvt_blockmgr_t *bm, kvt_ckpt_t *ck, kvt_stidx_t *stidx,
                           kvt_lookups_t *lk, kvt_loadtrack_t *lt, kvt_saves_t *sv);

void kvt_admit_destroy(kvt_admit_t **self_p);

//  Tries to admit the waiting request r at now_us: KVT_ADMIT_*. On
//  RUNNING or LOADING the admission is committed (r->gen is the new
//  generation); on WAIT or LOOKUP nothing is, except the probe's demand
//  kept in r (B1), its lookup's refresh and a touch.
int kvt_admit_try(kvt_admit_t *self, kvt_sreq_t *r, uint64_t now_us);

//  Request r goes back to waiting (a preemption): what an earlier attempt
//  kept (the probe's demand) no longer holds.
void kvt_admit_requeued(kvt_admit_t *self, kvt_sreq_t *r);

//  Probes request r from a reset probe (rule B1): the match, the gated
//  hit, and the demand when the fit passes. No side effects on blocks or
//  counters.
void kvt_admit_probe(kvt_admit_t *self, kvt_sreq_t *r, kvt_sched_probe_t *p);

//  Writes its counters into their fields of out.
void kvt_admit_stats(const kvt_admit_t *self, kvt_sched_stats_t *out);

//  0, or -1 with a message: every joint whose state came from the tier
//  put exactly one state load into a plan.
int kvt_admit_check(const kvt_admit_t *self, char *err, size_t errlen);

#endif
