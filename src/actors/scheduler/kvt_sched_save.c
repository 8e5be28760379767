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

//  A failed load retreats to the HBM hit (rule B2): the blocks of
//  [floor, hbm) that are still cached are shared again (the private copies
//  the load was filling go back), the rest is recomputed in place.
//  The pins taken at admission make the whole hit come back.
static uint32_t s_retreat(kvt_sched_t *self, kvt_sreq_t *r)
{
    uint32_t bs = self->cfg.block_size;
    uint32_t b0 = r->pin_lo;
    for (uint32_t i = 0; i < r->nhit_pins; i++) {
        kvt_blockmgr_unref(self->bm, r->blocks[b0 + i]);
        r->blocks[b0 + i] = r->hit_pins[i]; //  the pin's reference moves into the table
    }
    r->nhit_pins = 0;
    r->registered = r->hbm_hit / bs;
    if (kvt_sched_hybrid(self)) {
        //  The state goes back to the hit's checkpoint, pinned since the
        //  admission; with no HBM hit the slot starts from zero at token 0.
        if (r->ck_restore != KVT_CKPT_NONE)
            kvt_ckpt_unpin(self->ck, r->ck_restore);
        r->ck_restore = r->ck_hit;
        r->restore_at = r->hbm_hit;
        r->ck_hit = KVT_CKPT_NONE;
        if (r->hbm_hit > 0)
            self->stats.retreats_to_hbm++;
        else
            self->stats.retreats_to_zero++;
    }
    return r->hbm_hit;
}

static void s_unpin_hit(kvt_sched_t *self, kvt_sreq_t *r)
{
    for (uint32_t i = 0; i < r->nhit_pins; i++)
        kvt_blockmgr_unref(self->bm, r->hit_pins[i]);
    r->nhit_pins = 0;
}

static int s_load_verdict(kvt_sched_t *self, const kvt_verdict_t *v)
{
    //  A state verdict speaks for its image whichever load it belongs to,
    //  even one no longer known here: a real miss retracts it (I3, no
    //  request id needed).
    if (v->chan == KVT_CHAN_STATE && self->stidx)
        kvt_stidx_state_verdict(self->stidx, v->key, v->ok, v->detail, self->now_us);
    //  A verdict no live load matches may be an orphan's (its request was
    //  torn down mid-load): its index settles it (kvt_sched_orphan.c).
    uint32_t slot;
    if (!kvt_reqtab_find(self->rt, v->op.req, &slot))
        return kvt_sched_orphan_verdict(self, v);
    kvt_sreq_t *r = kvt_reqtab_at(self->rt, slot);
    if (r->state != R_LOADING || r->gen != v->op.gen || v->attempt != 0)
        return kvt_sched_orphan_verdict(self, v);
    //  A load settles once every leg it dispatched reported (L2).
    uint8_t leg = v->chan == KVT_CHAN_STATE ? S_LEG_STATE : S_LEG_KV;
    if (!(r->legs & leg))
        return -1;
    if (leg == S_LEG_STATE &&
        !kvt_hash_eq(v->key,
                     kvt_reqtab_hash_at(self->rt, r, r->load_end / self->cfg.block_size - 1)))
        return -1;
    r->legs &= (uint8_t)~leg;
    if (!v->ok || kvt_stidx_neutral(v)) { //  a leg no rank ran did not land
        r->legs_failed |= leg;
        if (leg == S_LEG_KV)
            r->kv_detail = v->detail;
        else
            r->st_detail = v->detail;
    } else if (leg == S_LEG_KV)
        r->kv_lower = v->lower;
    if (r->legs)
        return 0;
    bool ok = r->legs_failed == 0;
    self->stats.loading--;
    //  The load settles in its index (stidx with a state leg, kvidx
    //  without); the request keeps its slot (its record holds it).
    kvt_sched_load_settle(self, r, ok,
                          (r->legs_failed & S_LEG_STATE) && r->st_detail == KVT_DETAIL_MISS);
    if (r->convoy)
        kvt_sched_convoy_mark(self, r, -1);
    self->stats.running++;
    r->state = R_RUNNING;
    uint32_t cs = self->cfg.chunk_size;
    if (ok) {
        s_unpin_hit(self, r);
        if (r->ck_hit != KVT_CKPT_NONE)
            kvt_ckpt_unpin(self->ck, r->ck_hit);
        r->ck_hit = KVT_CKPT_NONE;
        r->computed = r->load_end;
        kvt_reqtab_index_blocks(self->rt, r, r->computed, self->bm);
        uint32_t tier = r->load_end - r->hbm_hit;
        //  lower: the most chunks any rank had to read from below the CPU pool.
        uint64_t lower = (uint64_t)r->kv_lower * cs;
        uint32_t lower_tokens = lower > tier ? tier : (uint32_t)lower;
        self->stats.loads_ok++;
        self->stats.tier_hit_tokens += tier;
        self->stats.lower_hit_tokens += lower_tokens;
        kvt_sched_event(self, r->id, r->gen, KVT_EV_LOADED, r->load_end, tier, lower_tokens);
        return 0;
    }
    //  The tier hit is lost: [hbm, hit) is saved again (S5).
    self->stats.loads_failed++;
    uint32_t resume = s_retreat(self, r);
    uint32_t lost = r->hbm_hit > resume ? r->hbm_hit - resume : 0;
    self->stats.hbm_lost_tokens += lost;
    r->computed = resume;
    r->verify_end = resume;
    if (self->track)
        kvt_savetrack_hit_lost(self->track, (kvt_opid_t){r->id, r->gen});
    uint32_t detail = (r->legs_failed & S_LEG_KV) ? r->kv_detail : r->st_detail;
    kvt_sched_event(self, r->id, r->gen, KVT_EV_RETREAT, resume, detail, lost);
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
