/*  kvt_sched_save — the scheduler core's saves, all through the save
    tracker (kvt_savetrack: the frontier, leases taken and released through
    one path, re-emits, finished requests' tails, the save floor), its
    verdicts (loads: resume or retreat; saves: settle, source_safe: release
    the leases), its counters and its audit. See kvt_sched.h. */
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
    kvt_sreq_t *r = &self->reqs[slot];
    if (!self->track)
        return;
    kvt_savetrack_forwarded(self->track, (kvt_opid_t){r->id, r->gen}, r->computed);
    uint32_t a, b;
    if (kvt_savetrack_finish(self->track, r->id, r->blocks, r->nblocks, -1) == 0 &&
        kvt_savetrack_next(self->track, r->id, &a, &b, NULL))
        kvt_ilist_append(&self->tails, KVT_SCHED_REQ_LINKS(self), slot);
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
    while (self->tails.head != KVT_ILIST_NONE) {
        uint32_t slot = self->tails.head;
        kvt_ilist_unlink(&self->tails, KVT_SCHED_REQ_LINKS(self), slot);
        if (!kvt_sched_tracked(self, &self->reqs[slot]))
            kvt_sched_forget(self, slot);
    }
}

//  Appends a SaveSpec for [start, end) of request r. The scratch was
//  reserved by the caller, so this cannot fail.
static kvt_save_spec_t *s_plan_save(kvt_sched_t *self, kvt_sreq_t *r, uint32_t start, uint32_t end,
                                    uint32_t attempt)
{
    kvt_save_spec_t *sp = &self->p_saves[self->p_nsaves++];
    kvt_sched_fill_spec(self, r, start, end, sp);
    sp->attempt = attempt;
    return sp;
}

void kvt_sched_emit_saves(kvt_sched_t *self, uint32_t slot)
{
    kvt_sreq_t *r = &self->reqs[slot];
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
    uint32_t room = self->p_nsaves < KVT_MSG_MAX_ENTRIES ? KVT_MSG_MAX_ENTRIES - self->p_nsaves : 0;
    if (nchunks > room)
        nchunks = room;
    while (nchunks > 0 &&
           !kvt_sched_plan_fits(self,
                                KVT_SCHED_SPEC_BYTES(nchunks * self->bpc, nchunks) + 48u * nchunks))
        nchunks /= 2;
    if (nchunks == 0 ||
        kvt_vec_reserve((void **)&self->p_saves, &self->p_saves_cap, self->p_nsaves + nchunks,
                        sizeof(kvt_save_spec_t)) ||
        kvt_sched_reserve_scratch(self, nchunks * self->bpc, nchunks)) {
        self->stats.plan_deferred++;
        return; //  the frontier stays: a later plan saves them (a tail retires)
    }
    uint32_t limit = start + nchunks * cs;
    uint32_t run_start = UINT32_MAX;
    uint32_t t = start;
    for (; t < limit; t += cs) {
        kvt_hash_t key = kvt_sched_chunk_key(self, r, t / cs);
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
    if (!kvt_hmap_get(self->by_id, kvt_hmap_key64(v->op.req), &slot))
        return kvt_sched_orphan_verdict(self, v);
    kvt_sreq_t *r = &self->reqs[slot];
    if (r->state != R_LOADING || r->gen != v->op.gen || v->attempt != 0)
        return kvt_sched_orphan_verdict(self, v);
    //  A load settles once every leg it dispatched reported (L2).
    uint8_t leg = v->chan == KVT_CHAN_STATE ? S_LEG_STATE : S_LEG_KV;
    if (!(r->legs & leg))
        return -1;
    if (leg == S_LEG_STATE &&
        !kvt_hash_eq(v->key, kvt_sched_hash_at(self, r, r->load_end / self->cfg.block_size - 1)))
        return -1;
    r->legs &= (uint8_t)~leg;
    if (!v->ok) {
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
        kvt_sched_index_blocks(self, r, r->computed);
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
    if (kvt_hmap_get(self->by_id, kvt_hmap_key64(v->op.req), &slot) &&
        self->reqs[slot].state == R_DONE && !kvt_sched_tracked(self, &self->reqs[slot]))
        kvt_sched_forget(self, slot);
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
        rc = kvt_sched_lookup_verdict(self, v);
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

// ----------------------------------------------------------- counters ----

void kvt_sched_counters(const kvt_sched_t *self, kvt_counter_t *c, uint32_t *n, uint32_t cap)
{
    kvt_sched_stats_t st;
    kvt_sched_stats(self, &st);
#define S_C(field) kvt_counter_add(c, n, cap, "sched." #field, st.field)
    S_C(arrivals);
    S_C(rejected);
    S_C(admitted);
    S_C(finished);
    S_C(hbm_hit_tokens);
    S_C(tier_hit_tokens);
    S_C(lower_hit_tokens);
    S_C(hbm_lost_tokens);
    S_C(loads_dispatched);
    S_C(loads_ok);
    S_C(loads_failed);
    S_C(saves_dispatched);
    S_C(saves_ok);
    S_C(saves_failed);
    S_C(saves_reemitted);
    S_C(saves_skipped);
    S_C(saves_stopped);
    S_C(stale_verdicts);
    S_C(stale_schedules);
    S_C(steps);
    S_C(steps_failed);
    S_C(plan_deferred);
    S_C(tokens_planned);
    S_C(waiting);
    S_C(running);
    S_C(loading);
    S_C(saves_outstanding);
    S_C(leased_blocks);
    S_C(blocks_in_use);
    S_C(records);
    S_C(aborted);
    S_C(preempted);
    S_C(loads_orphaned);
    S_C(loads_reclaimed);
    S_C(load_orphans);
    S_C(lookups_sent);
    S_C(lookup_timeouts);
    S_C(lookup_failed);
    S_C(lookup_releases);
    S_C(lookup_pins_used);
    S_C(lookup_refreshes);
    S_C(lookups_out);
    S_C(touches_planned);
    S_C(verify_holds);
    if (kvt_sched_hybrid(self)) {
        S_C(gate_lost_tokens);
        S_C(joint_state_hbm);
        S_C(joint_state_tier);
        S_C(tier_within_hbm);
        S_C(no_rung_above_hbm);
        S_C(partial_chunk_no_room);
        S_C(no_probe_demand);
        S_C(below_min_load);
        S_C(retreats_to_hbm);
        S_C(retreats_to_zero);
        S_C(convoy_waits);
        S_C(state_restores);
        S_C(state_loads);
        S_C(ckpt_takes);
        S_C(state_tax_tokens);
        S_C(state_resumes);
    }
#undef S_C
    kvt_blockmgr_stats_t b;
    kvt_blockmgr_stats(self->bm, &b);
    kvt_counter_add(c, n, cap, "blocks.total", kvt_blockmgr_total(self->bm));
#define S_C(prefix, st, field) kvt_counter_add(c, n, cap, prefix #field, st.field)
    S_C("blocks.", b, allocated);
    S_C("blocks.", b, evicted);
    S_C("blocks.", b, registered);
    S_C("blocks.", b, duplicate_regs);
    S_C("blocks.", b, hit_blocks);
    S_C("blocks.", b, token_mismatch);
    if (self->track)
        kvt_savetrack_counters(self->track, c, n, cap);
    if (kvt_sched_hybrid(self)) {
        kvt_ckpt_stats_t k;
        kvt_ckpt_stats(self->ck, &k);
        S_C("ckpt.", k, slots_taken);
        S_C("ckpt.", k, slots_refused);
        S_C("ckpt.", k, reserved);
        S_C("ckpt.", k, committed);
        S_C("ckpt.", k, abandoned);
        S_C("ckpt.", k, refreshed);
        S_C("ckpt.", k, evicted);
        S_C("ckpt.", k, full);
        S_C("ckpt.", k, slots_in_use);
        S_C("ckpt.", k, valid);
        S_C("ckpt.", k, pinned_entries);
        kvt_stidx_counters(self->stidx, c, n, cap);
    }
#undef S_C
}

// -------------------------------------------------------------- audit ----

//  Audit walkers: a lease's block references, a lease's checkpoint pin.
typedef struct {
    uint32_t *expect; //  references expected per block
    uint32_t blocks;  //  block references the leases hold
} s_audit_t;

static void s_audit_lease_blocks(void *arg, const uint32_t *blocks, uint32_t n, int32_t ck)
{
    s_audit_t *a = arg;
    for (uint32_t i = 0; i < n; i++)
        a->expect[blocks[i]]++;
    a->blocks += n;
    (void)ck;
}

static void s_audit_lease_ck(void *arg, const uint32_t *blocks, uint32_t n, int32_t ck)
{
    uint32_t *expect = arg;
    if (ck >= 0)
        expect[ck]++;
    (void)blocks;
    (void)n;
}

//  Every checkpoint pin belongs to a request (its hit, its restore, its
//  take) or a save lease (its image), and every held slot to a live
//  admission or an orphaned load.
static int s_audit_state(const kvt_sched_t *self, uint32_t orphan_slots, char *err, size_t errlen)
{
    uint32_t cap = kvt_ckpt_capacity(self->ck);
    uint32_t *expect = calloc(cap, sizeof(uint32_t));
    if (!expect) {
        snprintf(err, errlen, "audit: out of memory");
        return -1;
    }
    uint32_t slots = orphan_slots; //  an orphan's slot stays held until it settles (I2)
    for (uint32_t i = 0; i < self->nreqs_cap; i++) {
        const kvt_sreq_t *r = &self->reqs[i];
        if (r->state == R_FREE)
            continue;
        slots += r->sslot != KVT_CKPT_NONE;
        uint32_t e[3] = {r->ck_hit, r->ck_restore, r->ck_take};
        for (int k = 0; k < 3; k++)
            if (e[k] != KVT_CKPT_NONE)
                expect[e[k]]++;
    }
    if (self->track)
        kvt_savetrack_leases(self->track, s_audit_lease_ck, expect);
    kvt_ckpt_stats_t k;
    kvt_ckpt_stats(self->ck, &k);
    int rc = -1;
    for (uint32_t e = 0; e < cap; e++)
        if (expect[e] != kvt_ckpt_pins(self->ck, e)) {
            snprintf(err, errlen, "audit: checkpoint %u has %u pins, expected %u", e,
                     kvt_ckpt_pins(self->ck, e), expect[e]);
            goto done;
        }
    if (slots != k.slots_in_use) {
        snprintf(err, errlen, "audit: %u state slots held, records hold %u", k.slots_in_use, slots);
        goto done;
    }
    rc = 0;
done:
    free(expect);
    return rc;
}

int kvt_sched_audit(const kvt_sched_t *self, char *err, size_t errlen)
{
    //  Cheap checks first: the counters' identities and the maps' sizes.
    kvt_sched_stats_t st;
    kvt_sched_stats(self, &st);
    if (st.saves_dispatched != st.saves_ok + st.saves_failed + st.saves_outstanding) {
        snprintf(err, errlen, "audit: saves dispatched != settled + outstanding");
        return -1;
    }
    if (st.loads_dispatched !=
        st.loads_ok + st.loads_failed + st.loads_reclaimed + st.loading + st.load_orphans) {
        snprintf(err, errlen, "audit: loads dispatched != settled + outstanding");
        return -1;
    }
    if (kvt_hmap_size(self->by_id) != st.records) {
        snprintf(err, errlen, "audit: the map holds %u requests, the gauge says %u",
                 kvt_hmap_size(self->by_id), st.records);
        return -1;
    }
    //  The save tracker's own identities and walk (its leases, its saves
    //  in flight per request).
    if (self->track && kvt_savetrack_check(self->track, true, err, errlen) != 0)
        return -1;
    //  Then the full walk: every block reference is a request's or a lease.
    uint32_t total = kvt_blockmgr_total(self->bm);
    s_audit_t a = {.expect = calloc(total, sizeof(uint32_t))};
    if (!a.expect) {
        snprintf(err, errlen, "audit: out of memory");
        return -1;
    }
    int rc = -1;
    uint32_t waiting = 0, running = 0, loading = 0, records = 0;
    for (uint32_t i = 0; i < self->nreqs_cap; i++) {
        const kvt_sreq_t *r = &self->reqs[i];
        if (r->state == R_FREE)
            continue;
        records++;
        waiting += r->state == R_WAITING;
        running += r->state == R_RUNNING;
        loading += r->state == R_LOADING;
        //  A finished record stays only while the tracker holds something
        //  of it.
        if (r->state == R_DONE && !kvt_sched_tracked(self, r)) {
            snprintf(err, errlen, "audit: finished request %llu is kept for nothing",
                     (unsigned long long)r->id);
            goto done;
        }
        for (uint32_t b = 0; b < r->nblocks; b++)
            a.expect[r->blocks[b]]++;
        for (uint32_t b = 0; b < r->nhit_pins; b++)
            a.expect[r->hit_pins[b]]++;
    }
    uint32_t orphan_slots = 0;
    if (kvt_sched_orphan_audit(self, a.expect, &orphan_slots, err, errlen) != 0)
        goto done;
    if (self->track)
        kvt_savetrack_leases(self->track, s_audit_lease_blocks, &a);
    for (uint32_t b = 0; b < total; b++)
        if (a.expect[b] != kvt_blockmgr_refs(self->bm, b)) {
            snprintf(err, errlen, "audit: block %u has %u references, expected %u", b,
                     kvt_blockmgr_refs(self->bm, b), a.expect[b]);
            goto done;
        }
    if (waiting != st.waiting || running != st.running || loading != st.loading ||
        records != st.records) {
        snprintf(err, errlen,
                 "audit: gauges waiting/running/loading/records %u/%u/%u/%u, records say "
                 "%u/%u/%u/%u",
                 st.waiting, st.running, st.loading, st.records, waiting, running, loading,
                 records);
        goto done;
    }
    if (a.blocks != self->leased) {
        snprintf(err, errlen, "audit: leases hold %u block references, gauge %u", a.blocks,
                 self->leased);
        goto done;
    }
    if (kvt_stidx_check(self->kvidx, true, err, errlen) != 0)
        goto done;
    if (kvt_sched_hybrid(self) && (s_audit_state(self, orphan_slots, err, errlen) != 0 ||
                                   kvt_stidx_check(self->stidx, true, err, errlen) != 0))
        goto done;
    rc = 0;
done:
    free(a.expect);
    return rc;
}
