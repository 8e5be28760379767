/*  kvt_saves — see kvt_saves.h. */
#include "kvt_saves.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct _kvt_saves_t {
    kvt_saves_cfg_t cfg;    //  configuration
    kvt_reqtab_t *rt;       //  request records (borrowed)
    kvt_planbuf_t *pb;      //  the plan (borrowed)
    kvt_blockmgr_t *bm;     //  HBM blocks (borrowed)
    kvt_ckpt_t *ck;         //  state pool (borrowed; NULL when dense)
    kvt_stidx_t *stidx;     //  state images (borrowed; NULL when dense)
    kvt_savetrack_t *track; //  saves: frontier, leases, re-emits (owned; NULL: no tier)
    uint32_t leased;        //  block references held by save leases
    uint64_t late_images;   //  images indexed from a late ok store verdict (an expired save)
};

// ------------------------------------------------------ save tracker ----

//  The one lease path (S4): a lease holds a reference on each source block
//  and a pin on the checkpoint its image is read from.
static void s_lease_acquire(void *arg, const uint32_t *blocks, uint32_t n, int32_t ck)
{
    kvt_saves_t *self = arg;
    for (uint32_t i = 0; i < n; i++)
        kvt_blockmgr_ref(self->bm, blocks[i]);
    self->leased += n;
    if (ck >= 0)
        kvt_ckpt_pin_entry(self->ck, (uint32_t)ck);
}

static void s_lease_release(void *arg, const uint32_t *blocks, uint32_t n, int32_t ck)
{
    kvt_saves_t *self = arg;
    //  Last block first: a suffix lands at the old end of the LRU.
    for (uint32_t i = n; i-- > 0;)
        kvt_blockmgr_unref(self->bm, blocks[i]);
    self->leased -= n;
    if (ck >= 0)
        kvt_ckpt_unpin(self->ck, (uint32_t)ck);
}

static int s_track_new(kvt_saves_t *self)
{
    if (self->cfg.tier_chunks == 0)
        return 0;
    kvt_savetrack_cfg_t c = {.chunk_size = self->cfg.chunk_size,
                             .block_size = self->cfg.block_size,
                             .retries = self->cfg.save_retries,
                             .deadline_us = self->cfg.deadline_us,
                             .drain_us = self->cfg.drain_us,
                             .acquire = s_lease_acquire,
                             .release = s_lease_release,
                             .arg = self};
    self->track = kvt_savetrack_new(&c);
    return self->track ? 0 : -1;
}

void kvt_saves_admit(kvt_saves_t *self, kvt_sreq_t *r, uint32_t frontier, uint32_t hbm,
                     uint32_t hit)
{
    if (!self->track)
        return;
    kvt_opid_t op = {r->id, r->gen};
    //  Refused only when out of memory: the admission then saves nothing.
    if (kvt_savetrack_admit(self->track, op, frontier) == 0 && hit > hbm)
        kvt_savetrack_load_decided(self->track, op, hbm, hit);
}

void kvt_saves_finish(kvt_saves_t *self, uint32_t slot)
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

void kvt_saves_abort(kvt_saves_t *self, kvt_sreq_t *r)
{
    if (self->track)
        kvt_savetrack_abort(self->track, r->id);
}

bool kvt_saves_tracked(const kvt_saves_t *self, const kvt_sreq_t *r)
{
    uint32_t f;
    return self->track && kvt_savetrack_frontier(self->track, r->id, &f);
}

uint64_t kvt_saves_outstanding(const kvt_saves_t *self)
{
    if (!self->track)
        return 0;
    kvt_savetrack_stats_t t;
    kvt_savetrack_stats(self->track, &t);
    return t.saves_outstanding + t.saves_draining;
}

uint64_t kvt_saves_next_deadline(const kvt_saves_t *self)
{
    return self->track ? kvt_savetrack_next_deadline(self->track) : UINT64_MAX;
}

void kvt_saves_expire(kvt_saves_t *self, uint64_t now_us)
{
    uint64_t req;
    uint32_t slot;
    while (self->track && kvt_savetrack_expire(self->track, now_us, &req))
        //  Settled failed (or drained): a finished record goes once the
        //  tracker holds nothing of it (a drain's lease holds its blocks).
        if (kvt_reqtab_find(self->rt, req, &slot) &&
            kvt_reqtab_at(self->rt, slot)->state == R_DONE &&
            !kvt_saves_tracked(self, kvt_reqtab_at(self->rt, slot)))
            kvt_reqtab_forget(self->rt, slot, self->bm);
}

void kvt_saves_end_plan(kvt_saves_t *self)
{
    if (!self->track)
        return;
    kvt_savetrack_end_plan(self->track);
    while (kvt_reqtab_head(self->rt, KVT_RQ_TAILS) != KVT_ILIST_NONE) {
        uint32_t slot = kvt_reqtab_head(self->rt, KVT_RQ_TAILS);
        kvt_reqtab_unlink(self->rt, KVT_RQ_TAILS, slot);
        if (!kvt_saves_tracked(self, kvt_reqtab_at(self->rt, slot)))
            kvt_reqtab_forget(self->rt, slot, self->bm);
    }
}

//  Appends a SaveSpec for [start, end) of request r. The scratch was
//  reserved by the caller, so this cannot fail.
static kvt_save_spec_t *s_plan_save(kvt_saves_t *self, kvt_sreq_t *r, uint32_t start, uint32_t end,
                                    uint32_t attempt)
{
    kvt_save_spec_t *sp = kvt_planbuf_next_save(self->pb);
    uint32_t nb = (end - start) / self->cfg.block_size, nk = (end - start) / self->cfg.chunk_size;
    kvt_reqtab_chunk_keys(self->rt, r, start / self->cfg.chunk_size, nk,
                          kvt_planbuf_fill_spec(self->pb, sp, (kvt_opid_t){r->id, r->gen}, start,
                                                end, r->blocks + start / self->cfg.block_size, nb,
                                                nk));
    sp->attempt = attempt;
    return sp;
}

void kvt_saves_emit(kvt_saves_t *self, uint32_t slot)
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
           !kvt_planbuf_fits(self->pb, KVT_SCHED_SPEC_BYTES(nchunks * self->cfg.bpc, nchunks) +
                                           48u * nchunks))
        nchunks /= 2;
    if (nchunks == 0 || kvt_planbuf_reserve_saves(self->pb, nchunks) ||
        kvt_planbuf_reserve(self->pb, nchunks * self->cfg.bpc, nchunks)) {
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
            if (kvt_savetrack_skip_inflight(self->track, r->id, key) != 0)
                break;
            if (run_start != UINT32_MAX)
                s_plan_save(self, r, run_start, t, attempt);
            run_start = UINT32_MAX;
            continue;
        }
        //  A chunk whose end holds an HBM checkpoint is saved with its
        //  image; the lease pins the checkpoint.
        uint32_t ck =
            self->ck && !self->cfg.no_state_tier ? kvt_ckpt_find(self->ck, key) : KVT_CKPT_NONE;
        const uint32_t *src = tail ? NULL : r->blocks + (size_t)(t / cs) * self->cfg.bpc;
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

int kvt_saves_verdict(kvt_saves_t *self, const kvt_verdict_t *v, uint64_t now_us)
{
    int32_t ck;
    if (!self->track || !kvt_savetrack_save_slot(self->track, v->op, v->key, v->attempt, &ck))
        return -1;
    //  A late verdict of an expired save settles nothing (its drain holds
    //  on, the save failed), but an ok one still says the tier holds the
    //  chunk and the image that rode with it: the index learns the image
    //  (a later get miss retracts it, I3), or no resume could ever use it.
    int late = kvt_savetrack_stored(self->track, v->op, v->key, v->attempt, v->ok);
    //  The image rode with the chunk: the tier holds it now.
    if (v->ok && ck >= 0) {
        kvt_stidx_note_stored(self->stidx, v->key, now_us);
        self->late_images += late != 0;
    }
    if (late != 0)
        return 0;
    //  A finished record goes once the tracker holds nothing of it.
    uint32_t slot;
    if (kvt_reqtab_find(self->rt, v->op.req, &slot) &&
        kvt_reqtab_at(self->rt, slot)->state == R_DONE &&
        !kvt_saves_tracked(self, kvt_reqtab_at(self->rt, slot)))
        kvt_reqtab_forget(self->rt, slot, self->bm);
    return 0;
}

//  Every rank reported that nothing reads a SaveSpec's sources any more
//  (its last chunk names it): the lease of each of its saves goes before
//  the store verdict. ok false: a quarantined copy may still read them,
//  the leases wait for the store verdicts.
int kvt_saves_source_safe(kvt_saves_t *self, const kvt_verdict_t *v)
{
    if (!self->track)
        return -1;
    if (v->ok)
        return kvt_savetrack_sources_safe(self->track, v->op, v->key, v->attempt) < 0 ? -1 : 0;
    return kvt_savetrack_save_slot(self->track, v->op, v->key, v->attempt, NULL) ? 0 : -1;
}

kvt_saves_t *kvt_saves_new(const kvt_saves_cfg_t *cfg, kvt_reqtab_t *rt, kvt_planbuf_t *pb,
                           kvt_blockmgr_t *bm, kvt_ckpt_t *ck, kvt_stidx_t *stidx)
{
    kvt_saves_t *self = calloc(1, sizeof(*self));
    if (!self)
        return NULL;
    self->cfg = *cfg;
    self->rt = rt;
    self->pb = pb;
    self->bm = bm;
    self->ck = ck;
    self->stidx = stidx;
    if (s_track_new(self) != 0)
        kvt_saves_destroy(&self);
    return self;
}

void kvt_saves_destroy(kvt_saves_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kvt_savetrack_destroy(&(*self_p)->track);
    free(*self_p);
    *self_p = NULL;
}

kvt_savetrack_t *kvt_saves_tracker(const kvt_saves_t *self)
{
    return self->track;
}

void kvt_saves_leases(const kvt_saves_t *self,
                      void (*fn)(void *arg, const uint32_t *blocks, uint32_t nblocks, int32_t slot),
                      void *arg)
{
    if (self->track)
        kvt_savetrack_leases(self->track, fn, arg);
}

void kvt_saves_stats(const kvt_saves_t *self, kvt_sched_stats_t *out)
{
    if (self->track) {
        kvt_savetrack_stats_t t;
        kvt_savetrack_stats(self->track, &t);
        out->saves_dispatched = t.saves_built;
        out->saves_ok = t.saves_ok;
        out->saves_failed = t.saves_failed;
        out->saves_reemitted = t.saves_reemitted;
        out->saves_skipped = t.saves_skipped;
        out->saves_stopped = t.saves_stopped;
        out->saves_outstanding = (uint32_t)t.saves_outstanding;
        out->saves_expired = t.saves_expired;
        out->saves_drained = t.saves_drained;
        out->save_late_verdicts = t.late_verdicts;
        out->save_late_images = self->late_images;
    }
    out->leased_blocks = self->leased;
}

int kvt_saves_check(const kvt_saves_t *self, char *err, size_t errlen)
{
    return self->track ? kvt_savetrack_check(self->track, true, err, errlen) : 0;
}
