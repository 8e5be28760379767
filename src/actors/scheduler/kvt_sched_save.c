/*  kvt_sched_save — the scheduler core's saves (frontier, leases, one save
    in flight per chunk key), its verdicts (loads: resume or retreat; saves:
    index or re-emit), its counters and its audit. See kvt_sched.h. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "actors/common/kvt_counters.h"
#include "kvt_joint.h"
#include "kvt_sched_int.h"

static kvt_hash_t s_save_id(kvt_opid_t op, kvt_hash_t key, uint32_t attempt)
{
    uint64_t in[5] = {op.req, op.gen, key.hi, key.lo, attempt};
    XXH128_hash_t h = XXH3_128bits(in, sizeof in);
    kvt_hash_t out = {h.high64, h.low64};
    return out;
}

//  Doubles the save slots (their block leases and the free-slot stack with
//  them).
static int s_grow_saves(kvt_sched_t *self)
{
    uint32_t old = self->nsaves_cap, cap = old, free_cap = old, blocks_cap = old * self->bpc;
    uint32_t ck_cap = old;
    if (kvt_vec_reserve((void **)&self->saves, &cap, old + 1, sizeof(kvt_ssave_t)) ||
        kvt_vec_reserve((void **)&self->save_free, &free_cap, cap, sizeof(uint32_t)) ||
        kvt_vec_reserve((void **)&self->save_blocks, &blocks_cap, cap * self->bpc,
                        sizeof(uint32_t)) ||
        kvt_vec_reserve((void **)&self->save_ck, &ck_cap, cap, sizeof(uint32_t)))
        return -1;
    memset(self->saves + old, 0, (size_t)(cap - old) * sizeof(kvt_ssave_t));
    for (uint32_t i = cap; i-- > old;)
        self->save_free[self->nsave_free++] = i;
    self->nsaves_cap = cap;
    return 0;
}

//  Appends a SaveSpec for [start, end) of request r. The scratch was
//  reserved by the caller, so this cannot fail.
static kvt_save_spec_t *s_plan_save(kvt_sched_t *self, kvt_sreq_t *r, uint32_t start, uint32_t end)
{
    kvt_save_spec_t *sp = &self->p_saves[self->p_nsaves++];
    kvt_sched_fill_spec(self, r, start, end, sp);
    sp->attempt = r->save_attempt;
    return sp;
}

//  Records an outstanding chunk save and leases its source blocks. Returns
//  0, or -1 when out of memory (nothing recorded).
static int s_track_save(kvt_sched_t *self, uint32_t slot, uint32_t chunk, kvt_hash_t key,
                        uint32_t *si_out)
{
    kvt_sreq_t *r = &self->reqs[slot];
    if (self->nsave_free == 0 && s_grow_saves(self) != 0)
        return -1;
    uint32_t si = self->save_free[self->nsave_free - 1];
    kvt_opid_t op = {r->id, r->gen};
    if (kvt_hmap_put(self->inflight, key, 1) != 0)
        return -1;
    if (kvt_hmap_put(self->save_by_id, s_save_id(op, key, r->save_attempt), si) != 0) {
        kvt_hmap_del(self->inflight, key, NULL);
        return -1;
    }
    self->nsave_free--;
    kvt_ssave_t *s = &self->saves[si];
    s->req_slot = slot;
    s->op = op;
    s->attempt = r->save_attempt;
    s->key = key;
    s->start = chunk * self->cfg.chunk_size;
    s->live = true;
    uint32_t *lease = self->save_blocks + (size_t)si * self->bpc;
    for (uint32_t i = 0; i < self->bpc; i++) {
        lease[i] = r->blocks[chunk * self->bpc + i];
        kvt_blockmgr_ref(self->bm, lease[i]);
    }
    self->leased += self->bpc;
    //  A chunk whose end holds an HBM checkpoint is saved with its image;
    //  the save pins the checkpoint until its verdict.
    bool image = kvt_sched_hybrid(self) && !self->cfg.no_state_tier;
    self->save_ck[si] = image ? kvt_ckpt_pin(self->ck, key) : KVT_CKPT_NONE;
    r->saves_inflight++;
    self->stats.saves_dispatched++;
    self->stats.saves_outstanding++;
    *si_out = si;
    return 0;
}

void kvt_sched_emit_saves(kvt_sched_t *self, uint32_t slot)
{
    kvt_sreq_t *r = &self->reqs[slot];
    if (self->cfg.tier_chunks == 0 || r->saves_stopped)
        return;
    uint32_t cs = self->cfg.chunk_size, bs = self->cfg.block_size;
    uint32_t upto = r->computed / cs * cs;
    if (r->save_frontier >= upto)
        return;
    //  Reserve the worst case first (every chunk saved, every chunk its own
    //  run), so that once a save is tracked its spec is always emitted.
    uint32_t nchunks = (upto - r->save_frontier) / cs;
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
        return; //  the frontier stays: these chunks are saved by a later plan
    }
    uint32_t limit = r->save_frontier + nchunks * cs;
    uint32_t run_start = UINT32_MAX;
    uint32_t t = r->save_frontier;
    for (; t < limit; t += cs) {
        kvt_hash_t key = kvt_sched_chunk_key(self, r, t / cs);
        //  A stored chunk is saved again only to add the image it lacks.
        bool stored = kvt_tierindex_contains(self->tier, key) &&
                      (!kvt_sched_hybrid(self) || self->cfg.no_state_tier ||
                       kvt_stidx_could_serve(self->stidx, key) || !kvt_ckpt_has(self->ck, key));
        bool skip = stored || kvt_hmap_get(self->inflight, key, NULL);
        uint32_t si = 0;
        if (skip)
            self->stats.saves_skipped++;
        else if (s_track_save(self, slot, t / cs, key, &si) != 0)
            break; //  out of memory: stop here, the frontier stays at t
        if (skip) {
            if (run_start != UINT32_MAX)
                s_plan_save(self, r, run_start, t);
            run_start = UINT32_MAX;
            continue;
        }
        if (run_start == UINT32_MAX)
            run_start = t;
        if (self->save_ck && self->save_ck[si] != KVT_CKPT_NONE) {
            //  The image rides with the chunk that ends at its checkpoint,
            //  the last chunk of its spec (object kind "KV chunk + image").
            kvt_save_spec_t *sp = s_plan_save(self, r, run_start, t + cs);
            sp->image = true;
            sp->state_boundary = t + cs;
            sp->state_hash = key;
            sp->state_slot = self->save_ck[si];
            run_start = UINT32_MAX;
        }
    }
    if (run_start != UINT32_MAX)
        s_plan_save(self, r, run_start, t);
    r->save_frontier = t;
    (void)bs;
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
    //  A miss means the tier view was stale: retract those keys so this
    //  request (and others) save them again rather than load them again.
    self->stats.loads_failed++;
    uint32_t resume = s_retreat(self, r);
    uint32_t lost = r->hbm_hit > resume ? r->hbm_hit - resume : 0;
    self->stats.hbm_lost_tokens += lost;
    r->computed = resume;
    r->verify_end = resume;
    r->save_frontier = r->load_floor / cs * cs;
    if ((r->legs_failed & S_LEG_KV) && r->kv_detail == KVT_DETAIL_MISS)
        for (uint32_t t = r->load_floor; t < r->load_end; t += cs)
            kvt_tierindex_retract(self->tier, kvt_sched_chunk_key(self, r, t / cs));
    uint32_t detail = (r->legs_failed & S_LEG_KV) ? r->kv_detail : r->st_detail;
    kvt_sched_event(self, r->id, r->gen, KVT_EV_RETREAT, resume, detail, lost);
    return 0;
}

static int s_save_verdict(kvt_sched_t *self, const kvt_verdict_t *v)
{
    uint32_t si;
    if (!kvt_hmap_del(self->save_by_id, s_save_id(v->op, v->key, v->attempt), &si))
        return -1;
    kvt_ssave_t *s = &self->saves[si];
    kvt_hmap_del(self->inflight, s->key, NULL);
    uint32_t *lease = self->save_blocks + (size_t)si * self->bpc;
    for (uint32_t i = 0; i < self->bpc; i++)
        kvt_blockmgr_unref(self->bm, lease[i]);
    self->leased -= self->bpc;
    if (self->save_ck[si] != KVT_CKPT_NONE) {
        kvt_ckpt_unpin(self->ck, self->save_ck[si]);
        if (v->ok)
            kvt_stidx_note_stored(self->stidx, s->key, self->now_us);
    }
    self->save_ck[si] = KVT_CKPT_NONE;
    self->stats.saves_outstanding--;
    kvt_sreq_t *r = &self->reqs[s->req_slot];
    assert(r->saves_inflight > 0 && r->id == s->op.req);
    r->saves_inflight--;
    if (v->ok) {
        kvt_tierindex_insert(self->tier, s->key);
        self->stats.saves_ok++;
    } else {
        self->stats.saves_failed++;
        //  The frontier goes back to the lowest failed chunk so it is saved
        //  again (rule S3), with a new attempt number (a fresh report key).
        //  A failure of the current attempt with no re-emit left stops the
        //  request's saves: chunks above a gap could never be reached.
        if (r->state == R_RUNNING && r->gen == s->op.gen && !r->saves_stopped) {
            bool current = s->attempt == r->save_attempt;
            if (current && r->save_budget == 0) {
                r->saves_stopped = true;
                self->stats.saves_stopped++;
            } else if (s->start < r->save_frontier) {
                r->save_frontier = s->start;
                if (current) {
                    r->save_budget--;
                    r->save_attempt++;
                    self->stats.saves_reemitted++;
                }
            }
        }
    }
    s->live = false;
    self->save_free[self->nsave_free++] = si;
    if (r->state == R_DONE && r->saves_inflight == 0) {
        kvt_sched_release_blocks(self, r);
        kvt_sched_free_record(self, s->req_slot);
    }
    return 0;
}

int kvt_sched_verdict(kvt_sched_t *self, const kvt_verdict_t *v)
{
    int rc = -1;
    if (v->chan == KVT_CHAN_LOAD || v->chan == KVT_CHAN_STATE)
        rc = s_load_verdict(self, v);
    else if (v->chan == KVT_CHAN_SAVE)
        rc = s_save_verdict(self, v);
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
    kvt_tierindex_stats_t t;
    kvt_tierindex_stats(self->tier, &t);
    kvt_counter_add(c, n, cap, "tierview.size", kvt_tierindex_size(self->tier));
    S_C("tierview.", t, inserted);
    S_C("tierview.", t, evicted);
    S_C("tierview.", t, retracted);
    S_C("tierview.", t, lookups);
    S_C("tierview.", t, hit_keys);
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

//  Every checkpoint pin belongs to a request (its hit, its restore, its
//  take) or a save (its image), and every held slot to a live admission.
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
    for (uint32_t i = 0; i < self->nsaves_cap; i++)
        if (self->saves[i].live && self->save_ck[i] != KVT_CKPT_NONE)
            expect[self->save_ck[i]]++;
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
    const kvt_sched_stats_t *st = &self->stats;
    if (st->saves_dispatched != st->saves_ok + st->saves_failed + st->saves_outstanding) {
        snprintf(err, errlen, "audit: saves dispatched != settled + outstanding");
        return -1;
    }
    if (st->loads_dispatched !=
        st->loads_ok + st->loads_failed + st->loads_reclaimed + st->loading + st->load_orphans) {
        snprintf(err, errlen, "audit: loads dispatched != settled + outstanding");
        return -1;
    }
    if (kvt_hmap_size(self->save_by_id) != st->saves_outstanding ||
        kvt_hmap_size(self->inflight) != st->saves_outstanding ||
        kvt_hmap_size(self->by_id) != st->records) {
        snprintf(err, errlen,
                 "audit: maps hold %u saves / %u in-flight keys / %u requests, gauges say %u / "
                 "%u / %u",
                 kvt_hmap_size(self->save_by_id), kvt_hmap_size(self->inflight),
                 kvt_hmap_size(self->by_id), st->saves_outstanding, st->saves_outstanding,
                 st->records);
        return -1;
    }
    //  Then the full walk: every block reference is a request's or a lease.
    uint32_t total = kvt_blockmgr_total(self->bm);
    uint32_t *expect = calloc(total, sizeof(uint32_t));
    if (!expect) {
        snprintf(err, errlen, "audit: out of memory");
        return -1;
    }
    int rc = -1;
    uint32_t waiting = 0, running = 0, loading = 0, records = 0, inflight = 0;
    for (uint32_t i = 0; i < self->nreqs_cap; i++) {
        const kvt_sreq_t *r = &self->reqs[i];
        if (r->state == R_FREE)
            continue;
        records++;
        waiting += r->state == R_WAITING;
        running += r->state == R_RUNNING;
        loading += r->state == R_LOADING;
        inflight += r->saves_inflight;
        for (uint32_t b = 0; b < r->nblocks; b++)
            expect[r->blocks[b]]++;
        for (uint32_t b = 0; b < r->nhit_pins; b++)
            expect[r->hit_pins[b]]++;
    }
    uint32_t orphan_slots = 0;
    if (kvt_sched_orphan_audit(self, expect, &orphan_slots, err, errlen) != 0)
        goto done;
    uint32_t live_saves = 0;
    for (uint32_t i = 0; i < self->nsaves_cap; i++) {
        if (!self->saves[i].live)
            continue;
        live_saves++;
        for (uint32_t b = 0; b < self->bpc; b++)
            expect[self->save_blocks[(size_t)i * self->bpc + b]]++;
    }
    for (uint32_t b = 0; b < total; b++)
        if (expect[b] != kvt_blockmgr_refs(self->bm, b)) {
            snprintf(err, errlen, "audit: block %u has %u references, expected %u", b,
                     kvt_blockmgr_refs(self->bm, b), expect[b]);
            goto done;
        }
    if (waiting != st->waiting || running != st->running || loading != st->loading ||
        records != st->records) {
        snprintf(err, errlen,
                 "audit: gauges waiting/running/loading/records %u/%u/%u/%u, records say "
                 "%u/%u/%u/%u",
                 st->waiting, st->running, st->loading, st->records, waiting, running, loading,
                 records);
        goto done;
    }
    if (live_saves != st->saves_outstanding || inflight != live_saves ||
        live_saves * self->bpc != self->leased) {
        snprintf(err, errlen, "audit: %u live saves, %u in flight per requests, gauge %u",
                 live_saves, inflight, st->saves_outstanding);
        goto done;
    }
    if (kvt_stidx_check(self->kvidx, true, err, errlen) != 0)
        goto done;
    if (kvt_sched_hybrid(self) && (s_audit_state(self, orphan_slots, err, errlen) != 0 ||
                                   kvt_stidx_check(self->stidx, true, err, errlen) != 0))
        goto done;
    rc = 0;
done:
    free(expect);
    return rc;
}
