/*  kvt_loadtrack — see kvt_loadtrack.h. */
#include "kvt_loadtrack.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvt_joint.h"
#include "kvt_loadhold.h"
#include "kvt_loadtrack_int.h"

kvt_loadtrack_t *kvt_loadtrack_new(const kvt_loadtrack_cfg_t *cfg, kvt_reqtab_t *rt,
                                   kvt_planbuf_t *pb, kvt_blockmgr_t *bm, kvt_ckpt_t *ck,
                                   kvt_stidx_t *stidx, kvt_savetrack_t *track)
{
    kvt_loadtrack_t *self = calloc(1, sizeof(*self));
    if (!self)
        return NULL;
    self->cfg = *cfg;
    self->rt = rt;
    self->pb = pb;
    self->bm = bm;
    self->ck = ck;
    self->stidx = stidx;
    self->track = track;
    kvt_stidx_cfg_t lc = {.hash_cap = 0, .can_load = false}; //  loads only, no images
    self->kvidx = kvt_stidx_new(&lc);
    self->holds = kvt_loadhold_new();
    if (!self->cfg.load_deadline_us)
        self->cfg.load_deadline_us = KVT_SCHED_LOAD_DEADLINE_US;
    if (!self->cfg.orphan_reclaim_us)
        self->cfg.orphan_reclaim_us = KVT_SCHED_ORPHAN_RECLAIM_US;
    if (!self->kvidx || !self->holds)
        kvt_loadtrack_destroy(&self);
    return self;
}

void kvt_loadtrack_destroy(kvt_loadtrack_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kvt_loadtrack_t *self = *self_p;
    kvt_loadhold_destroy(&self->holds);
    kvt_stidx_destroy(&self->kvidx);
    free(self);
    *self_p = NULL;
}

int kvt_loadtrack_reserve(kvt_loadtrack_t *self, kvt_opid_t op, uint32_t nblocks)
{
    return kvt_loadhold_reserve(self->holds, op, nblocks);
}

void kvt_loadtrack_unreserve(kvt_loadtrack_t *self, kvt_opid_t op)
{
    uint32_t i = kvt_loadhold_find(self->holds, op);
    if (i != KVT_HOLD_NONE && kvt_loadhold_at(self->holds, i)->use == KVT_HOLD_RESERVED)
        kvt_loadhold_free(self->holds, i);
}

void kvt_loadtrack_arrive(kvt_loadtrack_t *self, kvt_sreq_t *r)
{
    (void)self;
    memset(&r->load, 0, sizeof(r->load));
    r->load.ck_hit = KVT_CKPT_NONE;
}

void kvt_loadtrack_start(kvt_loadtrack_t *self, kvt_sreq_t *r, const kvt_load_start_t *ld,
                         uint64_t now_us)
{
    kvt_sreq_load_t *l = &r->load;
    assert(ld->legs != 0 && l->npins == 0 && !l->pins && !l->convoy);
    l->floor = ld->floor;
    l->end = ld->end;
    l->legs = ld->legs;
    l->legs_failed = 0;
    //  A leg's details are this load's: an earlier admission's stay out
    //  (a state-only load reads no kv_lower of a KV leg it never had).
    l->kv_detail = 0;
    l->st_detail = 0;
    l->kv_lower = 0;
    l->pins = ld->pins;
    l->npins = ld->npins;
    l->pin_lo = ld->pin_lo;
    l->ck_hit = ld->ck_hit;
    if (ld->convoy)
        kvt_loadtrack_convoy_mark(self, r, +1);
    self->st.loads_dispatched++;
    kvt_opid_t op = {r->id, r->gen};
    //  Its holding was reserved by the admission; it goes on the deadline
    //  list. Deadlines are now + one bound on a clock that never goes back,
    //  so appending keeps the list in deadline order (O(1) per load).
    uint32_t i = kvt_loadhold_find(self->holds, op);
    assert(i != KVT_HOLD_NONE && kvt_loadhold_at(self->holds, i)->use == KVT_HOLD_RESERVED);
    kvt_loadhold_arm(self->holds, i, now_us + self->cfg.load_deadline_us);
    if (r->joint_src == KVT_JOINT_STATE_TIER)
        return; //  recorded in stidx at admission and carried with its LoadSpec
    kvt_hash_t none = {0, 0};
    //  Refused only when out of memory: then the load has no owner, and an
    //  abort releases its blocks at once (kvt_loadtrack_orphan).
    if (kvt_stidx_request_load(self->kvidx, op, none, KVT_STIDX_NO_SLOT, now_us) == 0)
        kvt_stidx_carried(self->kvidx, op);
}

//  Settles request r's live load in its index (its verdicts all arrived).
static void s_settle(kvt_loadtrack_t *self, kvt_sreq_t *r, bool ok, bool state_miss,
                     uint64_t now_us)
{
    uint32_t unused;
    kvt_opid_t op = {r->id, r->gen};
    kvt_stidx_t *idx = kvt_loadtrack_index(self, r);
    int rc = ok ? kvt_stidx_complete(idx, op, now_us, &unused)
                : kvt_stidx_fail(idx, op, state_miss, &unused);
    //  A live load settles live; only a KV-only load recorded without memory
    //  is unknown to its index.
    assert(rc == KVT_STIDX_LIVE || (rc == KVT_STIDX_STALE && idx == self->kvidx));
    (void)rc;
}

void kvt_loadtrack_convoy_mark(kvt_loadtrack_t *self, kvt_sreq_t *r, int delta)
{
    uint32_t cs = self->cfg.chunk_size;
    for (uint32_t t = r->load.floor; t < r->load.end; t += cs)
        kvt_loadhold_key(self->holds, kvt_reqtab_chunk_key(self->rt, r, t / cs), delta);
    r->load.convoy = delta > 0;
}

void kvt_loadtrack_let_go(kvt_loadtrack_t *self, kvt_sreq_t *r)
{
    if (r->load.ck_hit != KVT_CKPT_NONE)
        kvt_ckpt_unpin(self->ck, r->load.ck_hit);
    r->load.ck_hit = KVT_CKPT_NONE;
    if (r->load.convoy)
        kvt_loadtrack_convoy_mark(self, r, -1);
}

//  The retreat pins go (their references moved or dropped by the caller).
static void s_drop_pins(kvt_sreq_t *r)
{
    free(r->load.pins);
    r->load.pins = NULL;
    r->load.npins = 0;
}

bool kvt_loadtrack_convoy_busy(const kvt_loadtrack_t *self, kvt_hash_t key)
{
    return kvt_loadhold_key_busy(self->holds, key);
}

//  A failed load retreats to the HBM hit (rule B2): the blocks of
//  [floor, hbm) that are still cached are shared again (the private copies
//  the load was filling go back), the rest is recomputed in place.
//  The pins taken at admission make the whole hit come back.
static uint32_t s_retreat(kvt_loadtrack_t *self, kvt_sreq_t *r)
{
    uint32_t bs = self->cfg.block_size;
    uint32_t b0 = r->load.pin_lo;
    for (uint32_t i = 0; i < r->load.npins; i++) {
        kvt_blockmgr_unref(self->bm, r->blocks[b0 + i]);
        r->blocks[b0 + i] = r->load.pins[i]; //  the pin's reference moves into the table
    }
    s_drop_pins(r);
    r->registered = r->hbm_hit / bs;
    if (self->ck) {
        //  The state goes back to the hit's checkpoint, pinned since the
        //  admission; with no HBM hit the slot starts from zero at token 0.
        if (r->ck_restore != KVT_CKPT_NONE)
            kvt_ckpt_unpin(self->ck, r->ck_restore);
        r->ck_restore = r->load.ck_hit;
        r->restore_at = r->hbm_hit;
        r->load.ck_hit = KVT_CKPT_NONE;
        if (r->hbm_hit > 0)
            self->st.retreats_to_hbm++;
        else
            self->st.retreats_to_zero++;
    }
    return r->hbm_hit;
}

static void s_unpin_hit(kvt_loadtrack_t *self, kvt_sreq_t *r)
{
    for (uint32_t i = 0; i < r->load.npins; i++)
        kvt_blockmgr_unref(self->bm, r->load.pins[i]);
    s_drop_pins(r);
}

static int s_conclude(kvt_loadtrack_t *self, kvt_sreq_t *r, uint64_t now_us);

//  r's load settled failed while a rank may still write the destination of
//  legs: its holding moves to the drain list and the request stays LOADING,
//  its blocks and slot its own, until the drain bound (orphan_reclaim_us,
//  the bound an aborted load's destination is held for) has passed; then
//  it retreats (kvt_loadtrack_expire).
static void s_drain(kvt_loadtrack_t *self, kvt_sreq_t *r, uint8_t legs, uint64_t now_us)
{
    uint32_t h = kvt_loadhold_find(self->holds, (kvt_opid_t){r->id, r->gen});
    assert(h != KVT_HOLD_NONE && kvt_loadhold_at(self->holds, h)->use == KVT_HOLD_LIVE);
    kvt_loadhold_drain(self->holds, h, legs, now_us + self->cfg.orphan_reclaim_us);
    //  What its settled legs report from now on is late (dropped, counted).
    kvt_loadhold_note_late(self->holds, (kvt_opid_t){r->id, r->gen});
    self->st.loads_drained++;
}

int kvt_loadtrack_verdict(kvt_loadtrack_t *self, kvt_sreq_t *r, const kvt_verdict_t *v,
                          uint64_t now_us)
{
    //  A load settles once every leg it dispatched reported (L2).
    uint8_t leg = v->chan == KVT_CHAN_STATE ? S_LEG_STATE : S_LEG_KV;
    if (!(r->load.legs & leg)) {
        //  A leg the deadline settled, its load draining: late, dropped.
        uint32_t h = kvt_loadhold_find(self->holds, (kvt_opid_t){r->id, r->gen});
        if (h != KVT_HOLD_NONE && kvt_loadhold_draining(self->holds, h) &&
            kvt_loadhold_is_late(self->holds, (kvt_opid_t){r->id, r->gen})) {
            self->st.late_verdicts++;
            return KVT_LOAD_PENDING;
        }
        return KVT_LOAD_STALE;
    }
    if (leg == S_LEG_STATE &&
        !kvt_hash_eq(v->key,
                     kvt_reqtab_hash_at(self->rt, r, r->load.end / self->cfg.block_size - 1)))
        return KVT_LOAD_STALE;
    r->load.legs &= (uint8_t)~leg;
    if (!v->ok || kvt_stidx_neutral(v)) { //  a leg no rank ran did not land
        r->load.legs_failed |= leg;
        if (leg == S_LEG_KV)
            r->load.kv_detail = v->detail;
        else
            r->load.st_detail = v->detail;
    } else if (leg == S_LEG_KV)
        r->load.kv_lower = v->lower;
    if (r->load.legs)
        return KVT_LOAD_PENDING;
    //  A leg the aggregator settled by its bound (TIMEOUT) has a rank that
    //  never reported: its transfer may still be on its way and write the
    //  blocks and the state slot the retreat would recompute into (or hand
    //  to another request). The load drains first.
    uint8_t timed_out = 0;
    if ((r->load.legs_failed & S_LEG_KV) && r->load.kv_detail == KVT_DETAIL_TIMEOUT)
        timed_out |= S_LEG_KV;
    if ((r->load.legs_failed & S_LEG_STATE) && r->load.st_detail == KVT_DETAIL_TIMEOUT)
        timed_out |= S_LEG_STATE;
    if (timed_out) {
        s_drain(self, r, timed_out, now_us);
        return KVT_LOAD_PENDING;
    }
    return s_conclude(self, r, now_us);
}

//  Every leg of r's live load reported (or its deadline passed): it
//  settles, its holding goes, and the request resumes at B or retreats.
static int s_conclude(kvt_loadtrack_t *self, kvt_sreq_t *r, uint64_t now_us)
{
    uint32_t h = kvt_loadhold_find(self->holds, (kvt_opid_t){r->id, r->gen});
    assert(h != KVT_HOLD_NONE && kvt_loadhold_at(self->holds, h)->use == KVT_HOLD_LIVE);
    kvt_loadhold_disarm(self->holds, h);
    kvt_loadhold_free(self->holds, h);
    bool ok = r->load.legs_failed == 0;
    //  The load settles in its index (stidx with a state leg, kvidx
    //  without); the request keeps its slot (its record holds it).
    s_settle(self, r, ok,
             (r->load.legs_failed & S_LEG_STATE) && r->load.st_detail == KVT_DETAIL_MISS, now_us);
    if (r->load.convoy)
        kvt_loadtrack_convoy_mark(self, r, -1);
    uint32_t cs = self->cfg.chunk_size;
    if (ok) {
        s_unpin_hit(self, r);
        if (r->load.ck_hit != KVT_CKPT_NONE)
            kvt_ckpt_unpin(self->ck, r->load.ck_hit);
        r->load.ck_hit = KVT_CKPT_NONE;
        r->computed = r->load.end;
        kvt_reqtab_index_blocks(self->rt, r, r->computed, self->bm);
        uint32_t tier = r->load.end - r->hbm_hit;
        //  lower: the most chunks any rank had to read from below the CPU pool.
        uint64_t lower = (uint64_t)r->load.kv_lower * cs;
        uint32_t lower_tokens = lower > tier ? tier : (uint32_t)lower;
        self->st.loads_ok++;
        self->st.tier_hit_tokens += tier;
        self->st.lower_hit_tokens += lower_tokens;
        kvt_planbuf_event(self->pb, r->id, r->gen, KVT_EV_LOADED, r->load.end, tier, lower_tokens);
        return KVT_LOAD_SETTLED;
    }
    //  The tier hit is lost: [hbm, hit) is saved again (S5).
    self->st.loads_failed++;
    uint32_t resume = s_retreat(self, r);
    uint32_t lost = r->hbm_hit > resume ? r->hbm_hit - resume : 0;
    self->st.hbm_lost_tokens += lost;
    r->computed = resume;
    r->verify_end = resume;
    if (self->track)
        kvt_savetrack_hit_lost(self->track, (kvt_opid_t){r->id, r->gen});
    uint32_t detail = (r->load.legs_failed & S_LEG_KV) ? r->load.kv_detail : r->load.st_detail;
    kvt_planbuf_event(self->pb, r->id, r->gen, KVT_EV_RETREAT, resume, detail, lost);
    return KVT_LOAD_RETREATED;
}

uint32_t kvt_loadtrack_gen_floor(const kvt_loadtrack_t *self)
{
    return self->gen_floor;
}

uint32_t kvt_loadtrack_orphans(const kvt_loadtrack_t *self)
{
    return self->st.load_orphans;
}

uint32_t kvt_loadtrack_convoy_keys(const kvt_loadtrack_t *self)
{
    return kvt_loadhold_keys(self->holds);
}

void kvt_loadtrack_stats(const kvt_loadtrack_t *self, kvt_sched_stats_t *out)
{
    out->loads_dispatched = self->st.loads_dispatched;
    out->loads_ok = self->st.loads_ok;
    out->loads_failed = self->st.loads_failed;
    out->loads_orphaned = self->st.loads_orphaned;
    out->loads_reclaimed = self->st.loads_reclaimed;
    out->load_orphans = self->st.load_orphans;
    out->tier_hit_tokens = self->st.tier_hit_tokens;
    out->lower_hit_tokens = self->st.lower_hit_tokens;
    out->hbm_lost_tokens = self->st.hbm_lost_tokens;
    out->retreats_to_hbm = self->st.retreats_to_hbm;
    out->retreats_to_zero = self->st.retreats_to_zero;
    out->loads_timed_out = self->st.loads_timed_out;
    out->load_late_verdicts = self->st.late_verdicts;
    out->loads_drained = self->st.loads_drained;
}

uint64_t kvt_loadtrack_next_deadline(const kvt_loadtrack_t *self)
{
    uint64_t due = UINT64_MAX;
    for (uint8_t l = 0; l < KVT_HOLD_LISTS; l++) {
        uint32_t i = kvt_loadhold_first(self->holds, l);
        if (i != KVT_HOLD_NONE && kvt_loadhold_at(self->holds, i)->deadline_us < due)
            due = kvt_loadhold_at(self->holds, i)->deadline_us;
    }
    return due;
}

bool kvt_loadtrack_expire(kvt_loadtrack_t *self, uint64_t now_us, uint32_t *slot)
{
    //  Loads past their deadline: every leg still out failed with TIMEOUT,
    //  and what those legs still report is late. A rank may still write
    //  their destination, so they drain before they retreat.
    uint32_t i;
    while ((i = kvt_loadhold_first(self->holds, KVT_HOLD_DEADLINE)) != KVT_HOLD_NONE &&
           kvt_loadhold_at(self->holds, i)->deadline_us <= now_us) {
        kvt_opid_t op = kvt_loadhold_at(self->holds, i)->op;
        kvt_sreq_t *r = kvt_reqtab_find(self->rt, op.req, slot);
        assert(r && r->state == R_LOADING && r->gen == op.gen); //  a live holding's load is live
        if (r->load.legs & S_LEG_KV)
            r->load.kv_detail = KVT_DETAIL_TIMEOUT;
        if (r->load.legs & S_LEG_STATE)
            r->load.st_detail = KVT_DETAIL_TIMEOUT;
        uint8_t out = r->load.legs;
        r->load.legs_failed |= r->load.legs;
        r->load.legs = 0;
        self->st.loads_timed_out++;
        s_drain(self, r, out, now_us);
    }
    //  Drained loads settle failed: the request retreats (B2).
    i = kvt_loadhold_first(self->holds, KVT_HOLD_DRAIN);
    if (i == KVT_HOLD_NONE || kvt_loadhold_at(self->holds, i)->deadline_us > now_us)
        return false;
    kvt_opid_t op = kvt_loadhold_at(self->holds, i)->op;
    kvt_sreq_t *r = kvt_reqtab_find(self->rt, op.req, slot);
    assert(r && r->state == R_LOADING && r->gen == op.gen);
    int rc = s_conclude(self, r, now_us);
    assert(rc == KVT_LOAD_RETREATED);
    (void)rc;
    return true;
}
