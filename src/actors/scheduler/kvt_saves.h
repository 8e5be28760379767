/*  kvt_saves — the scheduler core's saves, all through the save tracker (a
    module of the core; rules S3, S4, S5): the one lease path (a lease holds
    a reference on each source block and a pin on the checkpoint its image
    is read from), the save floor an admission records, emitting what the
    tracker offers into the plan (a running request's forwarded chunks, a
    finished request's leased tail), the store and source_safe verdicts,
    and the end of a plan (tails it did not build retire; finished records
    nothing holds any more are forgotten), and the save deadline (a save
    with no verdict by deadline_us settles failed, its lease held drain_us
    longer: a rank may still read its sources).

    It owns the save tracker and the lease gauge. Collaborators are
    borrowed at creation: the request table, the plan buffer, the block
    manager, the state pool and the state index (NULL for a dense model).
    With no tier (tier_chunks 0) every call does nothing. */
#ifndef KVT_SAVES_H_INCLUDED
#define KVT_SAVES_H_INCLUDED

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
    uint32_t block_size;   //  tokens per block
    uint32_t chunk_size;   //  tokens per chunk
    uint32_t bpc;          //  blocks per chunk
    uint32_t tier_chunks;  //  0: no tier, no saves
    uint32_t save_retries; //  re-emits of a failed chunk save per request
    uint64_t deadline_us;  //  a save with no verdict this long after its build settles failed
    uint64_t drain_us;     //  ... and holds its lease this much longer
    bool no_state_tier;    //  chunks are saved without their images
} kvt_saves_cfg_t;

typedef struct _kvt_saves_t kvt_saves_t;

//  NULL when out of memory.
kvt_saves_t *kvt_saves_new(const kvt_saves_cfg_t *cfg, kvt_reqtab_t *rt, kvt_planbuf_t *pb,
                           kvt_blockmgr_t *bm, kvt_ckpt_t *ck, kvt_stidx_t *stidx);

void kvt_saves_destroy(kvt_saves_t **self_p);

//  The save tracker (NULL: no tier), borrowed by the load tracker to
//  reopen a lost tier hit.
kvt_savetrack_t *kvt_saves_tracker(const kvt_saves_t *self);

//  Starts tracking admission r->gen of r with the save frontier at
//  `frontier` (the tokens the tier holds); a decided load records its save
//  floor [hbm, hit) (S5; hit > hbm).
void kvt_saves_admit(kvt_saves_t *self, kvt_sreq_t *r, uint32_t frontier, uint32_t hbm,
                     uint32_t hit);

//  Request `slot` finished: its forwarded chunks not yet saved keep a
//  lease as a tail the next plan builds (S4); it goes on the tails list.
void kvt_saves_finish(kvt_saves_t *self, uint32_t slot);

//  Request r was torn down (abort, preemption): its unbuilt saves retire.
void kvt_saves_abort(kvt_saves_t *self, kvt_sreq_t *r);

//  True while the save tracker still holds something of request r.
bool kvt_saves_tracked(const kvt_saves_t *self, const kvt_sreq_t *r);

//  Saves outstanding (built, no store verdict, or expired and draining).
uint64_t kvt_saves_outstanding(const kvt_saves_t *self);

//  The earliest save deadline or drain end (UINT64_MAX: none); the saves
//  due by now_us settle failed and drain, and drains that ended release
//  their leases (a finished record nothing holds any more is forgotten).
//  O(1) per save. Every plan calls expire before it builds saves: builds
//  are due from its clock.
uint64_t kvt_saves_next_deadline(const kvt_saves_t *self);
void kvt_saves_expire(kvt_saves_t *self, uint64_t now_us);

//  Emits what the tracker offers for request `slot` into the plan.
void kvt_saves_emit(kvt_saves_t *self, uint32_t slot);

//  End of a plan: tails the plan did not build are retired (S4) and
//  finished records nothing holds any more are forgotten.
void kvt_saves_end_plan(kvt_saves_t *self);

//  A store verdict (SAVE channel) at now_us: 0, or -1 when stale.
int kvt_saves_verdict(kvt_saves_t *self, const kvt_verdict_t *v, uint64_t now_us);

//  A source_safe verdict: 0, or -1 when stale.
int kvt_saves_source_safe(kvt_saves_t *self, const kvt_verdict_t *v);

//  Calls fn for every lease held now (audits).
void kvt_saves_leases(const kvt_saves_t *self,
                      void (*fn)(void *arg, const uint32_t *blocks, uint32_t nblocks, int32_t slot),
                      void *arg);

//  Writes its counters (the tracker's and the lease gauge) into out.
void kvt_saves_stats(const kvt_saves_t *self, kvt_sched_stats_t *out);

//  0, or -1 with a message: the save tracker's own identities and walk.
int kvt_saves_check(const kvt_saves_t *self, char *err, size_t errlen);

#endif
