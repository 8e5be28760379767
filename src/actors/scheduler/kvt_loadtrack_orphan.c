/*  kvt_loadtrack_orphan — the load tracker's orphans (see kvt_loadtrack.h):
    a load torn down mid-flight keeps its destination in a holding until
    every leg reported or the reclaim bound passed; and the audit of those
    holdings against the indexes. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>

#include "kvt_loadtrack_int.h"

//  The one release path of an orphan's holding: its blocks (tail first) and
//  its state slot go back. Called only once its index settled the orphan.
static void s_release(kvt_loadtrack_t *self, uint32_t i)
{
    kvt_hold_t *o = kvt_loadhold_at(self->holds, i);
    assert(o->use == KVT_HOLD_ORPHAN);
    for (uint32_t b = o->nblocks; b-- > 0;)
        kvt_blockmgr_unref(self->bm, o->blocks[b]);
    if (o->sslot != KVT_CKPT_NONE)
        kvt_ckpt_slot_give(self->ck, o->sslot);
    kvt_loadhold_free(self->holds, i);
    self->st.load_orphans--;
}

void kvt_loadtrack_orphan(kvt_loadtrack_t *self, kvt_sreq_t *r, uint64_t now_us)
{
    assert(r->state == R_LOADING);
    kvt_opid_t op = {r->id, r->gen};
    uint32_t bs = self->cfg.block_size;
    kvt_stidx_t *idx = kvt_loadtrack_index(self, r);
    self->st.loads_orphaned++;
    if (r->gen > self->gen_floor)
        self->gen_floor = r->gen; //  a later record of this id starts above it (A3)
    //  The retreat pins: no retreat will come (the hit's checkpoint pin
    //  goes with the record's state, kvt_loadtrack_let_go).
    for (uint32_t i = 0; i < r->load.npins; i++)
        kvt_blockmgr_unref(self->bm, r->load.pins[i]);
    free(r->load.pins);
    r->load.pins = NULL;
    r->load.npins = 0;
    int rc = kvt_stidx_orphan(idx, op, now_us);
    //  The holding was reserved when the load was dispatched: it becomes
    //  the orphan's without allocating anything.
    uint32_t i = kvt_loadhold_find(self->holds, op);
    assert(i != KVT_HOLD_NONE && kvt_loadhold_at(self->holds, i)->use == KVT_HOLD_LIVE);
    //  A draining load's settled legs may still be written: held as well.
    if (kvt_loadhold_draining(self->holds, i))
        r->load.legs |= kvt_loadhold_at(self->holds, i)->legs;
    kvt_loadhold_disarm(self->holds, i);
    uint32_t lo = (r->load.legs & S_LEG_KV) ? r->load.floor / bs : 0;
    uint32_t hi = (r->load.legs & S_LEG_KV) ? r->load.end / bs : 0;
    if (rc == 1 && kvt_loadhold_room(self->holds, i, hi - lo) == 0) {
        kvt_hold_t *o = kvt_loadhold_at(self->holds, i);
        //  The holding takes its own reference on each block the KV leg
        //  writes; the record drops its references as on any release.
        for (uint32_t b = lo; b < hi; b++) {
            o->blocks[o->nblocks++] = r->blocks[b];
            kvt_blockmgr_ref(self->bm, r->blocks[b]);
        }
        o->legs = r->load.legs;
        o->legs_failed = r->load.legs_failed;
        o->st_miss = (r->load.legs_failed & S_LEG_STATE) && r->load.st_detail == KVT_DETAIL_MISS;
        o->state = idx == self->stidx;
        o->sslot = KVT_CKPT_NONE;
        if (o->state) {
            //  The slot stays reserved in stidx and off the free list.
            o->sslot = r->sslot;
            o->st_key = kvt_reqtab_hash_at(self->rt, r, r->load.end / bs - 1);
            r->sslot = KVT_CKPT_NONE;
        }
        o->use = KVT_HOLD_ORPHAN;
        self->st.load_orphans++;
    } else {
        //  Never sent (settled by the index as abandoned), unknown to its
        //  index, or (never: the room was reserved) out of memory for the
        //  holding: nothing keeps the load (an orphan is abandoned, its
        //  slot and blocks go with the record).
        if (rc == 1)
            kvt_stidx_abandon(idx, op, NULL);
        kvt_loadhold_free(self->holds, i);
        self->st.loads_reclaimed++;
    }
    if (r->load.convoy)
        kvt_loadtrack_convoy_mark(self, r, -1); //  uses [load.floor, load.end): before they go
    r->load.legs = r->load.legs_failed = 0;
    r->load.floor = r->load.end = 0;
}

int kvt_loadtrack_orphan_verdict(kvt_loadtrack_t *self, const kvt_verdict_t *v, uint64_t now_us)
{
    if (v->attempt != 0)
        return -1;
    uint32_t i = kvt_loadhold_find(self->holds, v->op);
    if (i == KVT_HOLD_NONE || kvt_loadhold_at(self->holds, i)->use != KVT_HOLD_ORPHAN) {
        //  A load that timed out settled without it: dropped, counted.
        if (!kvt_loadhold_is_late(self->holds, v->op))
            return -1;
        self->st.late_verdicts++;
        return 0;
    }
    kvt_hold_t *o = kvt_loadhold_at(self->holds, i);
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
            uint32_t i = kvt_loadhold_find(self->holds, ops[k]);
            bool found =
                i != KVT_HOLD_NONE && kvt_loadhold_at(self->holds, i)->use == KVT_HOLD_ORPHAN;
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
    uint64_t timeout = self->cfg.orphan_reclaim_us;
    s_reclaim(self, self->kvidx, timeout, now_us);
    if (self->stidx)
        s_reclaim(self, self->stidx, timeout, now_us);
}

int kvt_loadtrack_check(const kvt_loadtrack_t *self, uint32_t *expect, uint32_t *slots, char *err,
                        size_t errlen)
{
    if (kvt_loadhold_check(self->holds, err, errlen) != 0)
        return -1;
    uint32_t live = 0;
    *slots = 0;
    for (uint32_t i = 0; i < kvt_loadhold_cap(self->holds); i++) {
        const kvt_hold_t *o = kvt_loadhold_at(self->holds, i);
        if (o->use != KVT_HOLD_ORPHAN)
            continue;
        live++;
        kvt_stidx_t *idx = o->state ? self->stidx : self->kvidx;
        if (!kvt_stidx_is_orphan(idx, o->op)) {
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
    if (live != self->st.load_orphans || a.orphans + b.orphans != live) {
        snprintf(err, errlen, "audit: %u orphan holdings, gauge %u, indexes hold %llu orphans",
                 live, self->st.load_orphans, (unsigned long long)(a.orphans + b.orphans));
        return -1;
    }
    return kvt_stidx_check(self->kvidx, true, err, errlen);
}
