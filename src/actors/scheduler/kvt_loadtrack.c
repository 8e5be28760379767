/*  kvt_loadtrack — see kvt_loadtrack.h. */
#include "kvt_loadtrack.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kvt_hmap.h"
#include "base/kvt_vec.h"
#include "kvt_joint.h"

#define S_RECLAIM_BATCH 16u //  orphans freed per reclaim call (looped until fewer)

//  What an orphaned load still holds: the load was handed to its index
//  (stidx for a load with a state leg, kvidx for a KV-only one) when its
//  request was torn down mid-load; the blocks it writes and its state slot
//  stay off the free lists until that index settles it (a late verdict) or
//  reclaims it, and go back only through s_release.
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
} s_orphan_t;

typedef struct {
    uint64_t loads_dispatched; //  loads sent to the ranks
    uint64_t loads_ok;         //  settled ok
    uint64_t loads_failed;     //  settled failed
    uint64_t loads_orphaned;   //  torn down mid-load
    uint64_t loads_reclaimed;  //  orphans freed without a verdict
    uint32_t load_orphans;     //  gauge: orphans still holding
    uint64_t tier_hit_tokens;  //  tokens restored from the tier
    uint64_t lower_hit_tokens; //  ... of which read from below the CPU pool
    uint64_t hbm_lost_tokens;  //  HBM hit tokens lost by a retreat
    uint64_t retreats_to_hbm;  //  failed joints resumed at the gated HBM hit
    uint64_t retreats_to_zero; //  failed joints resumed at token 0
} s_stats_t;

struct _kvt_loadtrack_t {
    kvt_loadtrack_cfg_t cfg;  //  configuration
    kvt_reqtab_t *rt;         //  request records (borrowed)
    kvt_planbuf_t *pb;        //  the plan (borrowed; events)
    kvt_blockmgr_t *bm;       //  HBM blocks (borrowed)
    kvt_ckpt_t *ck;           //  state pool (borrowed; NULL when dense)
    kvt_stidx_t *stidx;       //  state images and state loads (borrowed; NULL when dense)
    kvt_savetrack_t *track;   //  saves (borrowed; NULL: no tier)
    kvt_stidx_t *kvidx;       //  KV-only loads' lifecycle (owned; no images)
    kvt_hmap_t *loading_keys; //  chunk key → loads in flight covering it (convoys)
    s_orphan_t *orph;         //  orphaned loads' holdings
    uint32_t norph_cap;       //  holdings allocated
    uint32_t *orph_free;      //  free holding slots
    uint32_t norph_free;      //  entries in orph_free
    kvt_hmap_t *orph_by_op;   //  {gen, req} → holding of that orphan
    uint32_t gen_floor;       //  every generation orphaned so far is <= this
    s_stats_t st;             //  counters
};

static kvt_hash_t s_opkey(kvt_opid_t op)
{
    kvt_hash_t k = {op.gen, op.req};
    return k;
}

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
    self->orph_by_op = kvt_hmap_new(64, false);
    self->loading_keys = kvt_hmap_new(256, false);
    if (!self->kvidx || !self->orph_by_op || !self->loading_keys)
        kvt_loadtrack_destroy(&self);
    return self;
}

void kvt_loadtrack_destroy(kvt_loadtrack_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kvt_loadtrack_t *self = *self_p;
    for (uint32_t i = 0; i < self->norph_cap; i++)
        free(self->orph[i].blocks);
    free(self->orph);
    free(self->orph_free);
    kvt_hmap_destroy(&self->orph_by_op);
    kvt_hmap_destroy(&self->loading_keys);
    kvt_stidx_destroy(&self->kvidx);
    free(self);
    *self_p = NULL;
}

//  The index that owns request r's live load: stidx for a load with a
//  state leg, kvidx otherwise.
static kvt_stidx_t *s_index(kvt_loadtrack_t *self, const kvt_sreq_t *r)
{
    return r->joint_src == KVT_JOINT_STATE_TIER ? self->stidx : self->kvidx;
}

void kvt_loadtrack_start(kvt_loadtrack_t *self, kvt_sreq_t *r, uint64_t now_us)
{
    self->st.loads_dispatched++;
    if (r->joint_src == KVT_JOINT_STATE_TIER)
        return; //  recorded in stidx at admission and carried with its LoadSpec
    kvt_opid_t op = {r->id, r->gen};
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
    kvt_stidx_t *idx = s_index(self, r);
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
    for (uint32_t t = r->load_floor; t < r->load_end; t += cs) {
        kvt_hash_t key = kvt_reqtab_chunk_key(self->rt, r, t / cs);
        uint32_t n = 0;
        kvt_hmap_get(self->loading_keys, key, &n);
        if (delta > 0) {
            if (kvt_hmap_put(self->loading_keys, key, n + 1) != 0)
                continue; //  out of memory: only a convoy is missed
        } else if (n <= 1)
            kvt_hmap_del(self->loading_keys, key, NULL);
        else
            kvt_hmap_put(self->loading_keys, key, n - 1);
    }
    r->convoy = delta > 0;
}

bool kvt_loadtrack_convoy_busy(const kvt_loadtrack_t *self, kvt_hash_t key)
{
    return kvt_hmap_get(self->loading_keys, key, NULL);
}

//  A failed load retreats to the HBM hit (rule B2): the blocks of
//  [floor, hbm) that are still cached are shared again (the private copies
//  the load was filling go back), the rest is recomputed in place.
//  The pins taken at admission make the whole hit come back.
static uint32_t s_retreat(kvt_loadtrack_t *self, kvt_sreq_t *r)
{
    uint32_t bs = self->cfg.block_size;
    uint32_t b0 = r->pin_lo;
    for (uint32_t i = 0; i < r->nhit_pins; i++) {
        kvt_blockmgr_unref(self->bm, r->blocks[b0 + i]);
        r->blocks[b0 + i] = r->hit_pins[i]; //  the pin's reference moves into the table
    }
    r->nhit_pins = 0;
    r->registered = r->hbm_hit / bs;
    if (self->ck) {
        //  The state goes back to the hit's checkpoint, pinned since the
        //  admission; with no HBM hit the slot starts from zero at token 0.
        if (r->ck_restore != KVT_CKPT_NONE)
            kvt_ckpt_unpin(self->ck, r->ck_restore);
        r->ck_restore = r->ck_hit;
        r->restore_at = r->hbm_hit;
        r->ck_hit = KVT_CKPT_NONE;
        if (r->hbm_hit > 0)
            self->st.retreats_to_hbm++;
        else
            self->st.retreats_to_zero++;
    }
    return r->hbm_hit;
}

static void s_unpin_hit(kvt_loadtrack_t *self, kvt_sreq_t *r)
{
    for (uint32_t i = 0; i < r->nhit_pins; i++)
        kvt_blockmgr_unref(self->bm, r->hit_pins[i]);
    r->nhit_pins = 0;
}

int kvt_loadtrack_verdict(kvt_loadtrack_t *self, kvt_sreq_t *r, const kvt_verdict_t *v,
                          uint64_t now_us)
{
    //  A load settles once every leg it dispatched reported (L2).
    uint8_t leg = v->chan == KVT_CHAN_STATE ? S_LEG_STATE : S_LEG_KV;
    if (!(r->legs & leg))
        return KVT_LOAD_STALE;
    if (leg == S_LEG_STATE &&
        !kvt_hash_eq(v->key,
                     kvt_reqtab_hash_at(self->rt, r, r->load_end / self->cfg.block_size - 1)))
        return KVT_LOAD_STALE;
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
        return KVT_LOAD_PENDING;
    bool ok = r->legs_failed == 0;
    //  The load settles in its index (stidx with a state leg, kvidx
    //  without); the request keeps its slot (its record holds it).
    s_settle(self, r, ok, (r->legs_failed & S_LEG_STATE) && r->st_detail == KVT_DETAIL_MISS,
             now_us);
    if (r->convoy)
        kvt_loadtrack_convoy_mark(self, r, -1);
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
        self->st.loads_ok++;
        self->st.tier_hit_tokens += tier;
        self->st.lower_hit_tokens += lower_tokens;
        kvt_planbuf_event(self->pb, r->id, r->gen, KVT_EV_LOADED, r->load_end, tier, lower_tokens);
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
    uint32_t detail = (r->legs_failed & S_LEG_KV) ? r->kv_detail : r->st_detail;
    kvt_planbuf_event(self->pb, r->id, r->gen, KVT_EV_RETREAT, resume, detail, lost);
    return KVT_LOAD_RETREATED;
}

//  Doubles the holdings (and their free-slot stack).
static int s_grow(kvt_loadtrack_t *self)
{
    uint32_t old = self->norph_cap, cap = old, free_cap = old;
    if (kvt_vec_reserve((void **)&self->orph, &cap, old + 1, sizeof(s_orphan_t)) ||
        kvt_vec_reserve((void **)&self->orph_free, &free_cap, cap, sizeof(uint32_t)))
        return -1;
    memset(self->orph + old, 0, (size_t)(cap - old) * sizeof(s_orphan_t));
    for (uint32_t i = cap; i-- > old;)
        self->orph_free[self->norph_free++] = i;
    self->norph_cap = cap;
    return 0;
}

//  The one release path of an orphan's holding: its blocks (tail first) and
//  its state slot go back. Called only once its index settled the orphan.
static void s_release(kvt_loadtrack_t *self, uint32_t i)
{
    s_orphan_t *o = &self->orph[i];
    assert(o->live);
    kvt_hmap_del(self->orph_by_op, s_opkey(o->op), NULL);
    for (uint32_t b = o->nblocks; b-- > 0;)
        kvt_blockmgr_unref(self->bm, o->blocks[b]);
    if (o->sslot != KVT_CKPT_NONE)
        kvt_ckpt_slot_give(self->ck, o->sslot);
    free(o->blocks);
    memset(o, 0, sizeof(*o));
    self->orph_free[self->norph_free++] = i;
    self->st.load_orphans--;
}

void kvt_loadtrack_orphan(kvt_loadtrack_t *self, kvt_sreq_t *r, uint64_t now_us)
{
    assert(r->state == R_LOADING);
    kvt_opid_t op = {r->id, r->gen};
    uint32_t bs = self->cfg.block_size;
    kvt_stidx_t *idx = s_index(self, r);
    self->st.loads_orphaned++;
    if (r->gen > self->gen_floor)
        self->gen_floor = r->gen; //  a later record of this id starts above it (A3)
    //  The retreat pins and the hit's checkpoint pin: no retreat will come.
    for (uint32_t i = 0; i < r->nhit_pins; i++)
        kvt_blockmgr_unref(self->bm, r->hit_pins[i]);
    r->nhit_pins = 0;
    int rc = kvt_stidx_orphan(idx, op, now_us);
    uint32_t i = 0;
    bool held = rc == 1 && (self->norph_free > 0 || s_grow(self) == 0);
    s_orphan_t *o = NULL;
    if (held) {
        i = self->orph_free[self->norph_free - 1];
        o = &self->orph[i];
        uint32_t lo = (r->legs & S_LEG_KV) ? r->load_floor / bs : 0;
        uint32_t hi = (r->legs & S_LEG_KV) ? r->load_end / bs : 0;
        o->blocks = hi > lo ? malloc((size_t)(hi - lo) * sizeof(uint32_t)) : NULL;
        if ((hi > lo && !o->blocks) || kvt_hmap_put(self->orph_by_op, s_opkey(op), i) != 0) {
            free(o->blocks);
            o->blocks = NULL;
            held = false;
        } else {
            self->norph_free--;
            //  The holding takes its own reference on each block the KV leg
            //  writes; the record drops its references as on any release.
            for (uint32_t b = lo; b < hi; b++) {
                o->blocks[o->nblocks++] = r->blocks[b];
                kvt_blockmgr_ref(self->bm, r->blocks[b]);
            }
            o->op = op;
            o->legs = r->legs;
            o->legs_failed = r->legs_failed;
            o->st_miss = (r->legs_failed & S_LEG_STATE) && r->st_detail == KVT_DETAIL_MISS;
            o->state = idx == self->stidx;
            o->sslot = KVT_CKPT_NONE;
            if (o->state) {
                //  The slot stays reserved in stidx and off the free list.
                o->sslot = r->sslot;
                o->st_key = kvt_reqtab_hash_at(self->rt, r, r->load_end / bs - 1);
                r->sslot = KVT_CKPT_NONE;
            }
            o->live = true;
            self->st.load_orphans++;
        }
    }
    if (!held) {
        //  Never sent (settled by the index as abandoned), unknown to its
        //  index, or out of memory for the holding: nothing keeps the load
        //  (an orphan is abandoned, its slot and blocks go with the record).
        if (rc == 1)
            kvt_stidx_abandon(idx, op, NULL);
        self->st.loads_reclaimed++;
    }
    if (r->convoy)
        kvt_loadtrack_convoy_mark(self, r, -1); //  uses [load_floor, load_end): before they go
    r->legs = r->legs_failed = 0;
    r->load_floor = r->load_end = 0;
}

int kvt_loadtrack_orphan_verdict(kvt_loadtrack_t *self, const kvt_verdict_t *v, uint64_t now_us)
{
    uint32_t i;
    if (v->attempt != 0 || !kvt_hmap_get(self->orph_by_op, s_opkey(v->op), &i))
        return -1;
    s_orphan_t *o = &self->orph[i];
    uint8_t leg = v->chan == KVT_CHAN_STATE ? S_LEG_STATE : S_LEG_KV;
    if (!(o->legs & leg) || (leg == S_LEG_STATE && !kvt_hash_eq(v->key, o->st_key)))
        return -1;
    o->legs &= (uint8_t)~leg;
    if (!v->ok || kvt_stidx_neutral(v)) { //  an orphan's leg no rank ran did not land
        o->legs_failed |= leg;
        if (leg == S_LEG_STATE && v->detail == KVT_DETAIL_MISS)
            o->st_miss = true;
    }
    if (o->legs)
        return 0;
    bool ok = o->legs_failed == 0;
    kvt_stidx_t *idx = o->state ? self->stidx : self->kvidx;
    uint32_t unused;
    int rc = ok ? kvt_stidx_complete(idx, v->op, now_us, &unused)
                : kvt_stidx_fail(idx, v->op, o->st_miss, &unused);
    assert(rc == KVT_STIDX_ORPHAN); //  the holding lives exactly as long as the orphan
    (void)rc;
    if (ok)
        self->st.loads_ok++;
    else
        self->st.loads_failed++;
    s_release(self, i);
    return 0;
}

//  Reclaims idx's orphans past the timeout: their holdings go back.
static void s_reclaim(kvt_loadtrack_t *self, kvt_stidx_t *idx, uint64_t timeout, uint64_t now_us)
{
    uint32_t slots[S_RECLAIM_BATCH];
    kvt_opid_t ops[S_RECLAIM_BATCH];
    uint32_t n;
    do {
        n = kvt_stidx_reclaim(idx, now_us, timeout, slots, ops, S_RECLAIM_BATCH);
        for (uint32_t k = 0; k < n; k++) {
            uint32_t i;
            bool found = kvt_hmap_get(self->orph_by_op, s_opkey(ops[k]), &i);
            assert(found); //  every orphan of the indexes has its holding
            if (!found)
                continue;
            self->st.loads_reclaimed++;
            s_release(self, i);
        }
    } while (n == S_RECLAIM_BATCH);
}

void kvt_loadtrack_reclaim(kvt_loadtrack_t *self, uint64_t now_us)
{
    if (self->st.load_orphans == 0)
        return;
    uint64_t timeout =
        self->cfg.orphan_reclaim_us ? self->cfg.orphan_reclaim_us : KVT_SCHED_ORPHAN_RECLAIM_US;
    s_reclaim(self, self->kvidx, timeout, now_us);
    if (self->stidx)
        s_reclaim(self, self->stidx, timeout, now_us);
}

int kvt_loadtrack_check(const kvt_loadtrack_t *self, uint32_t *expect, uint32_t *slots, char *err,
                        size_t errlen)
{
    uint32_t live = 0;
    *slots = 0;
    for (uint32_t i = 0; i < self->norph_cap; i++) {
        const s_orphan_t *o = &self->orph[i];
        if (!o->live)
            continue;
        live++;
        uint32_t j;
        kvt_stidx_t *idx = o->state ? self->stidx : self->kvidx;
        if (!kvt_hmap_get(self->orph_by_op, s_opkey(o->op), &j) || j != i ||
            !kvt_stidx_is_orphan(idx, o->op)) {
            snprintf(err, errlen, "audit: orphan of req %llu gen %u is not its index's orphan",
                     (unsigned long long)o->op.req, o->op.gen);
            return -1;
        }
        for (uint32_t b = 0; b < o->nblocks; b++)
            expect[o->blocks[b]]++;
        *slots += o->sslot != KVT_CKPT_NONE;
    }
    kvt_stidx_stats_t a, b = {0};
    kvt_stidx_stats(self->kvidx, &a);
    if (self->stidx)
        kvt_stidx_stats(self->stidx, &b);
    if (live != self->st.load_orphans || kvt_hmap_size(self->orph_by_op) != live ||
        a.orphans + b.orphans != live) {
        snprintf(err, errlen, "audit: %u orphan holdings, gauge %u, indexes hold %llu orphans",
                 live, self->st.load_orphans, (unsigned long long)(a.orphans + b.orphans));
        return -1;
    }
    return kvt_stidx_check(self->kvidx, true, err, errlen);
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
    return kvt_hmap_size(self->loading_keys);
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
}
