/*  kvt_sched_orphan — the scheduler core's loads after their request is
    gone (rules I1, I2, A3). Every load has one owner for its lifecycle: the
    state-offload index (stidx) when it has a state leg, the load index
    (kvidx, the same kvt_stidx type with no images) when it is KV-only. A
    request torn down mid-load (kvt_sched_abort, kvt_sched_preempt) hands
    its load to that index as an orphan; what the load still writes (the
    blocks of its KV leg, the state slot of its state leg) moves to an
    orphan holding here, keyed by the load's operation id, and goes back
    only through kvt_sched_orphan_release, which runs only when the owning
    index settled the orphan: by its late verdicts (complete / fail) or by
    reclaim, timed from orphan time. The request's record is freed at once;
    a later admission of the same id carries a newer generation
    (gen_floor), so the orphan's reports never reach it. See kvt_sched.h. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvt_joint.h"
#include "kvt_sched_int.h"

#define S_RECLAIM_BATCH 16u //  orphans freed per reclaim call (looped until fewer)

static kvt_hash_t s_opkey(kvt_opid_t op)
{
    kvt_hash_t k = {op.gen, op.req};
    return k;
}

kvt_stidx_t *kvt_sched_load_index(kvt_sched_t *self, const kvt_sreq_t *r)
{
    return r->joint_src == KVT_JOINT_STATE_TIER ? self->stidx : self->kvidx;
}

void kvt_sched_load_out(kvt_sched_t *self, kvt_sreq_t *r)
{
    if (r->joint_src == KVT_JOINT_STATE_TIER)
        return; //  recorded in stidx at admission and carried with its LoadSpec
    kvt_opid_t op = {r->id, r->gen};
    kvt_hash_t none = {0, 0};
    //  Refused only when out of memory: then the load has no owner, and an
    //  abort releases its blocks at once (kvt_sched_orphan_load).
    if (kvt_stidx_request_load(self->kvidx, op, none, KVT_STIDX_NO_SLOT, self->now_us) == 0)
        kvt_stidx_carried(self->kvidx, op);
}

void kvt_sched_load_settle(kvt_sched_t *self, kvt_sreq_t *r, bool ok, bool state_miss)
{
    uint32_t unused;
    kvt_opid_t op = {r->id, r->gen};
    kvt_stidx_t *idx = kvt_sched_load_index(self, r);
    int rc = ok ? kvt_stidx_complete(idx, op, self->now_us, &unused)
                : kvt_stidx_fail(idx, op, state_miss, &unused);
    //  A live load settles live; only a KV-only load recorded without memory
    //  is unknown to its index.
    assert(rc == KVT_STIDX_LIVE || (rc == KVT_STIDX_STALE && idx == self->kvidx));
    (void)rc;
}

//  Doubles the holdings (and their free-slot stack).
static int s_grow(kvt_sched_t *self)
{
    uint32_t old = self->norph_cap, cap = old, free_cap = old;
    if (kvt_vec_reserve((void **)&self->orph, &cap, old + 1, sizeof(kvt_sorphan_t)) ||
        kvt_vec_reserve((void **)&self->orph_free, &free_cap, cap, sizeof(uint32_t)))
        return -1;
    memset(self->orph + old, 0, (size_t)(cap - old) * sizeof(kvt_sorphan_t));
    for (uint32_t i = cap; i-- > old;)
        self->orph_free[self->norph_free++] = i;
    self->norph_cap = cap;
    return 0;
}

//  The one release path of an orphan's holding: its blocks (tail first) and
//  its state slot go back. Called only once its index settled the orphan.
static void s_release(kvt_sched_t *self, uint32_t i)
{
    kvt_sorphan_t *o = &self->orph[i];
    assert(o->live);
    kvt_hmap_del(self->orph_by_op, s_opkey(o->op), NULL);
    for (uint32_t b = o->nblocks; b-- > 0;)
        kvt_blockmgr_unref(self->bm, o->blocks[b]);
    if (o->sslot != KVT_CKPT_NONE)
        kvt_ckpt_slot_give(self->ck, o->sslot);
    free(o->blocks);
    memset(o, 0, sizeof(*o));
    self->orph_free[self->norph_free++] = i;
    self->stats.load_orphans--;
}

void kvt_sched_orphan_load(kvt_sched_t *self, kvt_sreq_t *r)
{
    assert(r->state == R_LOADING);
    kvt_opid_t op = {r->id, r->gen};
    uint32_t bs = self->cfg.block_size;
    kvt_stidx_t *idx = kvt_sched_load_index(self, r);
    self->stats.loading--;
    self->stats.loads_orphaned++;
    if (r->gen > self->gen_floor)
        self->gen_floor = r->gen; //  a later record of this id starts above it (A3)
    //  The retreat pins and the hit's checkpoint pin: no retreat will come.
    for (uint32_t i = 0; i < r->nhit_pins; i++)
        kvt_blockmgr_unref(self->bm, r->hit_pins[i]);
    r->nhit_pins = 0;
    int rc = kvt_stidx_orphan(idx, op, self->now_us);
    uint32_t i = 0;
    bool held = rc == 1 && (self->norph_free > 0 || s_grow(self) == 0);
    kvt_sorphan_t *o = NULL;
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
            self->stats.load_orphans++;
        }
    }
    if (!held) {
        //  Never sent (settled by the index as abandoned), unknown to its
        //  index, or out of memory for the holding: nothing keeps the load
        //  (an orphan is abandoned, its slot and blocks go with the record).
        if (rc == 1)
            kvt_stidx_abandon(idx, op, NULL);
        self->stats.loads_reclaimed++;
    }
    if (r->convoy)
        kvt_sched_convoy_mark(self, r, -1); //  uses [load_floor, load_end): before they go
    r->legs = r->legs_failed = 0;
    r->load_floor = r->load_end = 0;
}

int kvt_sched_orphan_verdict(kvt_sched_t *self, const kvt_verdict_t *v)
{
    uint32_t i;
    if (v->attempt != 0 || !kvt_hmap_get(self->orph_by_op, s_opkey(v->op), &i))
        return -1;
    kvt_sorphan_t *o = &self->orph[i];
    uint8_t leg = v->chan == KVT_CHAN_STATE ? S_LEG_STATE : S_LEG_KV;
    if (!(o->legs & leg) || (leg == S_LEG_STATE && !kvt_hash_eq(v->key, o->st_key)))
        return -1;
    o->legs &= (uint8_t)~leg;
    if (!v->ok || kvt_stidx_neutral(v)) { //  a leg no rank ran did not land
        o->legs_failed |= leg;
        if (leg == S_LEG_STATE && v->detail == KVT_DETAIL_MISS)
            o->st_miss = true;
    }
    if (o->legs)
        return 0;
    bool ok = o->legs_failed == 0;
    kvt_stidx_t *idx = o->state ? self->stidx : self->kvidx;
    uint32_t unused;
    int rc = ok ? kvt_stidx_complete(idx, v->op, self->now_us, &unused)
                : kvt_stidx_fail(idx, v->op, o->st_miss, &unused);
    assert(rc == KVT_STIDX_ORPHAN); //  the holding lives exactly as long as the orphan
    (void)rc;
    if (ok)
        self->stats.loads_ok++;
    else
        self->stats.loads_failed++;
    s_release(self, i);
    return 0;
}

//  Reclaims idx's orphans past the timeout: their holdings go back.
static void s_reclaim(kvt_sched_t *self, kvt_stidx_t *idx, uint64_t timeout)
{
    uint32_t slots[S_RECLAIM_BATCH];
    kvt_opid_t ops[S_RECLAIM_BATCH];
    uint32_t n;
    do {
        n = kvt_stidx_reclaim(idx, self->now_us, timeout, slots, ops, S_RECLAIM_BATCH);
        for (uint32_t k = 0; k < n; k++) {
            uint32_t i;
            bool found = kvt_hmap_get(self->orph_by_op, s_opkey(ops[k]), &i);
            assert(found); //  every orphan of the indexes has its holding
            if (!found)
                continue;
            self->stats.loads_reclaimed++;
            s_release(self, i);
        }
    } while (n == S_RECLAIM_BATCH);
}

void kvt_sched_reclaim(kvt_sched_t *self)
{
    if (self->stats.load_orphans == 0)
        return;
    uint64_t timeout =
        self->cfg.orphan_reclaim_us ? self->cfg.orphan_reclaim_us : KVT_SCHED_ORPHAN_RECLAIM_US;
    s_reclaim(self, self->kvidx, timeout);
    if (self->stidx)
        s_reclaim(self, self->stidx, timeout);
}

int kvt_sched_orphan_audit(const kvt_sched_t *self, uint32_t *expect, uint32_t *slots, char *err,
                           size_t errlen)
{
    uint32_t live = 0;
    *slots = 0;
    for (uint32_t i = 0; i < self->norph_cap; i++) {
        const kvt_sorphan_t *o = &self->orph[i];
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
    if (live != self->stats.load_orphans || kvt_hmap_size(self->orph_by_op) != live ||
        a.orphans + b.orphans != live) {
        snprintf(err, errlen, "audit: %u orphan holdings, gauge %u, indexes hold %llu orphans",
                 live, self->stats.load_orphans, (unsigned long long)(a.orphans + b.orphans));
        return -1;
    }
    return 0;
}

void kvt_sched_orphan_destroy(kvt_sched_t *self)
{
    for (uint32_t i = 0; i < self->norph_cap; i++)
        free(self->orph[i].blocks);
    free(self->orph);
    free(self->orph_free);
    kvt_hmap_destroy(&self->orph_by_op);
    kvt_stidx_destroy(&self->kvidx);
}
