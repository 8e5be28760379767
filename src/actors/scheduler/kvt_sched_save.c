/*  kvt_sched_save — the scheduler core's saves, all through the save
    tracker (kvt_savetrack: the frontier, leases taken and released through
    one path, re-emits, finished requests' tails, the save floor), and its
    verdicts (loads: resume or retreat; saves: settle, source_safe: release
    the leases). Its counters and its audit are in kvt_sched_audit.c. See
    kvt_sched.h. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "actors/common/kvt_counters.h"
#include "kvt_joint.h"
#include "kvt_sched_int.h"

// ------------------------------------------------------ save tracker ----

//  The one lease path (S4): a lease holds a reference on each source block
//  and a pin on the checkpoint its image is read from.
static void s_lease_acquire(void *arg, const uint32_t *blocks, uint32_t n, int32_t ck)
{
    kvt_sched_t *self = arg;
    for (uint32_t i = 0; i < n; i++)
        kvt_blockmgr_ref(self->bm, blocks[i]);
    self->leased += n;
    if (ck >= 0)
        kvt_ckpt_pin_entry(self->ck, (uint32_t)ck);
}

static void s_lease_release(void *arg, const uint32_t *blocks, uint32_t n, int32_t ck)
{
    kvt_sched_t *self = arg;
    //  Last block first: a suffix lands at the old end of the LRU.
    for (uint32_t i = n; i-- > 0;)
        kvt_blockmgr_unref(self->bm, blocks[i]);
    self->leased -= n;
    if (ck >= 0)
        kvt_ckpt_unpin(self->ck, (uint32_t)ck);
}

int kvt_sched_track_new(kvt_sched_t *self)
{
    if (self->cfg.tier_chunks == 0)
        return 0;
    kvt_savetrack_cfg_t c = {.chunk_size = self->cfg.chunk_size,
                             .block_size = self->cfg.block_size,
                             .retries = self->cfg.save_retries,
                             .acquire = s_lease_acquire,
                             .release = s_lease_release,
                             .arg = self};
    self->track = kvt_savetrack_new(&c);
    return self->track ? 0 : -1;
}

void kvt_sched_track_admit(kvt_sched_t *self, kvt_sreq_t *r, uint32_t frontier, uint32_t hbm,
                           uint32_t hit)
{
    if (!self->track)
        return;
    kvt_opid_t op = {r->id, r->gen};
    //  Refused only when out of memory: the admission then saves nothing.
    if (kvt_savetrack_admit(self->track, op, frontier) == 0 && hit > hbm)
        kvt_savetrack_load_decided(self->track, op, hbm, hit);
}

void kvt_sched_track_finish(kvt_sched_t *self, uint32_t slot)
{
    kvt_sreq_t *r = kvt_reqtab_at(self->rt, slot);
    if (!self->track)
        return;
    kvt_savetrack_forwarded(self->track, (kvt_opid_t){r->id, r->gen}, r->computed);
    uint32_t a, b;
    if (kvt_savetrack_finish(self->track, r->id, r->blocks, r->nblocks, -1) == 0 &&
        kvt_savetrack_next(self->track, r->id, &a, &b, NULL))
        kvt_reqtab_append(self->rt, KVT_RQ_TAILS, slot);
}

void kvt_sched_track_abort(kvt_sched_t *self, kvt_sreq_t *r)
{
    if (self->track)
        kvt_savetrack_abort(self->track, r->id);
}

bool kvt_sched_tracked(const kvt_sched_t *self, const kvt_sreq_t *r)
{
    uint32_t f;
    return self->track && kvt_savetrack_frontier(self->track, r->id, &f);
}

uint64_t kvt_sched_saves_outstanding(const kvt_sched_t *self)
{
    if (!self->track)
        return 0;
    kvt_savetrack_stats_t t;
    kvt_savetrack_stats(self->track, &t);
    return t.saves_outstanding;
}

void kvt_sched_end_plan(kvt_sched_t *self)
{
    if (!self->track)
        return;
    kvt_savetrack_end_plan(self->track);
    while (kvt_reqtab_head(self->rt, KVT_RQ_TAILS) != KVT_ILIST_NONE) {
        uint32_t slot = kvt_reqtab_head(self->rt, KVT_RQ_TAILS);
        kvt_reqtab_unlink(self->rt, KVT_RQ_TAILS, slot);
        if (!kvt_sched_tracked(self, kvt_reqtab_at(self->rt, slot)))
            kvt_reqtab_forget(self->rt, slot, self->bm);
    }
}

//  Appends a SaveSpec for [start, end) of request r. The scratch was
//  reserved by the caller, so this cannot fail.
static kvt_save_spec_t *s_plan_save(kvt_sched_t *self, kvt_sreq_t *r, uint32_t start, uint32_t end,
                                    uint32_t attempt)
{
    kvt_save_spec_t *sp = kvt_planbuf_next_save(self->pb);
    kvt_sched_fill_spec(self, r, start, end, sp);
    sp->attempt = attempt;
    return sp;
}

void kvt_sched_emit_saves(kvt_sched_t *self, uint32_t slot)
{
    kvt_sreq_t *r = kvt_reqtab_at(self->rt, slot);
    if (!self->track)
        return;
    //  A finished request's tail names its leased blocks (its own
    //  references are gone); a running one's forward wrote up to computed.
    bool tail = r->state == R_DONE;
    if (!tail)
        kvt_savetrack_forwarded(self->track, (kvt_opid_t){r->id, r->gen}, r->computed);
    uint32_t cs = self->cfg.chunk_size, start, upto, attempt;
    if (!kvt_savetrack_next(self->track, r->id, &start, &upto, &attempt))
        return;
    //  Reserve the worst case first (every chunk saved, every chunk its own
    //  run), so that once a save is built its spec is always emitted.
    uint32_t nchunks = (upto - start) / cs;
    kvt_planbuf_counts_t pc;
    kvt_planbuf_counts(self->pb, &pc);
    uint32_t room = pc.saves < KVT_MSG_MAX_ENTRIES ? KVT_MSG_MAX_ENTRIES - pc.saves : 0;
    if (nchunks > room)
        nchunks = room;
    while (nchunks > 0 &&
           !kvt_sched_plan_fits(self,
                                KVT_SCHED_SPEC_BYTES(nchunks * self->bpc, nchunks) + 48u * nchunks))
        nchunks /= 2;
    if (nchunks == 0 || kvt_planbuf_reserve_saves(self->pb, nchunks) ||
        kvt_sched_reserve_scratch(self, nchunks * self->bpc, nchunks)) {
        kvt_planbuf_defer(self->pb);
        return; //  the frontier stays: a later plan saves them (a tail retires)
    }
    uint32_t limit = start + nchunks * cs;
    uint32_t run_start = UINT32_MAX;
    uint32_t t = start;
    for (; t < limit; t += cs) {
        kvt_hash_t key = kvt_reqtab_chunk_key(self->rt, r, t / cs);
        //  Another save of this chunk is in flight: it needs no second one.
        if (kvt_savetrack_key_inflight(self->track, key)) {
            if (kvt_savetrack_skip(self->track, r->id) != 0)
                break;
            if (run_start != UINT32_MAX)
                s_plan_save(self, r, run_start, t, attempt);
            run_start = UINT32_MAX;
            continue;
        }
        //  A chunk whose end holds an HBM checkpoint is saved with its
        //  image; the lease pins the checkpoint.
        uint32_t ck = kvt_sched_hybrid(self) && !self->cfg.no_state_tier
                          ? kvt_ckpt_find(self->ck, key)
                          : KVT_CKPT_NONE;
        const uint32_t *src = tail ? NULL : r->blocks + (size_t)(t / cs) * self->bpc;
        if (kvt_savetrack_build(self->track, r->id, key, src,
                                ck == KVT_CKPT_NONE ? -1 : (int32_t)ck,
                                run_start != UINT32_MAX) != 0)
            break; //  out of memory: the frontier stays at t
        if (run_start == UINT32_MAX)
            run_start = t;
        if (ck != KVT_CKPT_NONE) {
            //  The image rides with the chunk that ends at its checkpoint,
            //  the last chunk of its spec (object kind "KV chunk + image").
            kvt_save_spec_t *sp = s_plan_save(self, r, run_start, t + cs, attempt);
            sp->image = true;
            sp->state_boundary = t + cs;
            sp->state_hash = key;
            sp->state_slot = ck;
            run_start = UINT32_MAX;
        }
    }
    if (run_start != UINT32_MAX)
        s_plan_save(self, r, run_start, t, attempt);
}

// ----------------------------------------------------------- verdicts ----

static int s_load_verdict(kvt_sched_t *self, const kvt_verdict_t *v)
{
    //  A state verdict speaks for its image whichever load it belongs to,
    //  even one no longer known here: a real miss retracts it (I3, no
    //  request id needed).
    if (v->chan == KVT_CHAN_STATE && self->stidx)
        kvt_stidx_state_verdict(self->stidx, v->key, v->ok, v->detail, self->now_us);
    //  A verdict no live load matches may be an orphan's (its request was
    //  torn down mid-load): its index settles it.
    uint32_t slot;
    kvt_sreq_t *r = kvt_reqtab_find(self->rt, v->op.req, &slot);
    if (!r || r->state != R_LOADING || r->gen != v->op.gen || v->attempt != 0)
        return kvt_loadtrack_orphan_verdict(self->lt, v, self->now_us);
    int rc = kvt_loadtrack_verdict(self->lt, r, v, self->now_us);
    if (rc == KVT_LOAD_STALE)
        return -1;
    if (rc == KVT_LOAD_PENDING)
        return 0;
    //  Settled or retreated: the request runs from where the load left it.
    self->stats.loading--;
    self->stats.running++;
    r->state = R_RUNNING;
    return 0;
}

static int s_save_verdict(kvt_sched_t *self, const kvt_verdict_t *v)
{
    int32_t ck;
    if (!self->track || !kvt_savetrack_save_slot(self->track, v->op, v->key, v->attempt, &ck))
        return -1;
    kvt_savetrack_stored(self->track, v->op, v->key, v->attempt, v->ok);
    //  The image rode with the chunk: the tier holds it now.
    if (v->ok && ck >= 0)
        kvt_stidx_note_stored(self->stidx, v->key, self->now_us);
    //  A finished record goes once the tracker holds nothing of it.
    uint32_t slot;
    if (kvt_reqtab_find(self->rt, v->op.req, &slot) &&
        kvt_reqtab_at(self->rt, slot)->state == R_DONE &&
        !kvt_sched_tracked(self, kvt_reqtab_at(self->rt, slot)))
        kvt_reqtab_forget(self->rt, slot, self->bm);
    return 0;
}

//  Every rank reported that nothing reads a SaveSpec's sources any more
//  (its last chunk names it): the lease of each of its saves goes before
//  the store verdict. ok false: a quarantined copy may still read them,
//  the leases wait for the store verdicts.
static int s_source_safe(kvt_sched_t *self, const kvt_verdict_t *v)
{
    if (!self->track)
        return -1;
    if (v->ok)
        return kvt_savetrack_sources_safe(self->track, v->op, v->key, v->attempt);
    return kvt_savetrack_save_slot(self->track, v->op, v->key, v->attempt, NULL) ? 0 : -1;
}

int kvt_sched_verdict(kvt_sched_t *self, const kvt_verdict_t *v)
{
    int rc = -1;
    if (v->chan == KVT_CHAN_LOAD || v->chan == KVT_CHAN_STATE)
        rc = s_load_verdict(self, v);
    else if (v->chan == KVT_CHAN_SAVE)
        rc = s_save_verdict(self, v);
    else if (v->chan == KVT_CHAN_SOURCE_SAFE)
        rc = s_source_safe(self, v);
    else if (v->chan == KVT_CHAN_LOOKUP)
        rc = kvt_lookups_verdict(self->lk, self->rt, v, self->now_us);
    else if (v->chan == KVT_CHAN_TOUCH && self->stidx && v->op.gen == KVT_TOUCH_GEN) {
        //  A touch nobody answered (the aggregator's bound) is no evidence:
        //  the hold it was sent for ends by its own bound.
        if (!v->ok && v->detail == KVT_DETAIL_TIMEOUT)
            return 0;
        rc = kvt_stidx_touch_verdict(self->stidx, v->key, v->op.req, v->touch, self->now_us);
    } else if (v->chan == KVT_CHAN_TOUCH_REFRESH)
        rc = 0; //  whether the CPU pool refreshed it: the index reads the touch channel
    if (rc != 0)
        self->stats.stale_verdicts++;
    return rc;
}
