/*  kvt_stidx — see kvt_stidx.h; the key-set audit, stats and counters are in
    kvt_stidx_check.c. */
#include "kvt_stidx_int.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kvt_hmap.h"
#include "base/kvt_ilist.h"
#include "base/kvt_vec.h"
#include "kvtier/kvt_store.h"

uint64_t kvt_stidx_window_us(uint64_t cpu_pool_bytes)
{
    //  0.25 s per GiB: 250000 µs per 2^30 bytes, in MiB to stay exact.
    uint64_t mib = cpu_pool_bytes >> 20;
    if (mib >= (KVT_STIDX_WINDOW_MAX_US * 1024u) / 250000u)
        return KVT_STIDX_WINDOW_MAX_US;
    uint64_t w = mib * 250000u / 1024u;
    if (w < KVT_STIDX_WINDOW_MIN_US)
        return KVT_STIDX_WINDOW_MIN_US;
    return w;
}

kvt_stidx_t *kvt_stidx_new(const kvt_stidx_cfg_t *cfg)
{
    kvt_stidx_t *self = calloc(1, sizeof(*self));
    if (!self)
        return NULL;
    self->cfg = *cfg;
    if (self->cfg.touch_interval_us == 0)
        self->cfg.touch_interval_us = KVT_STIDX_TOUCH_INTERVAL_US;
    if (self->cfg.window_us == 0)
        self->cfg.window_us = KVT_STIDX_WINDOW_MIN_US;
    if (self->cfg.hold_bound_us == 0)
        self->cfg.hold_bound_us = KVT_STIDX_HOLD_BOUND_US;
    uint32_t n = cfg->hash_cap ? cfg->hash_cap : 1;
    self->images = calloc(n, sizeof(kvt_stidx_image_t));
    self->by_hash = kvt_hmap_new(n, true);
    self->by_op = kvt_hmap_new(64, false);
    self->by_req = kvt_hmap_new(64, false);
    self->by_slot = kvt_hmap_new(64, false);
    if (!self->images || !self->by_hash || !self->by_op || !self->by_req || !self->by_slot) {
        kvt_stidx_destroy(&self);
        return NULL;
    }
    kvt_ilist_init(&self->lru);
    kvt_ilist_init(&self->img_free);
    kvt_ilist_init(&self->load_free);
    kvt_ilist_init(&self->armed);
    kvt_ilist_init(&self->orphans);
    for (uint32_t i = 0; i < cfg->hash_cap; i++)
        kvt_ilist_append(&self->img_free, S_IMG_LINKS(self), i);
    char line[160];
    snprintf(line, sizeof line,
             "stidx: verified window %llu ms, verify hold bound %llu ms, touch interval %llu ms",
             (unsigned long long)(self->cfg.window_us / 1000),
             (unsigned long long)(self->cfg.hold_bound_us / 1000),
             (unsigned long long)(self->cfg.touch_interval_us / 1000));
    kvt_stidx_log(self, line);
    return self;
}

void kvt_stidx_destroy(kvt_stidx_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kvt_stidx_t *self = *self_p;
    free(self->images);
    free(self->loads);
    kvt_hmap_destroy(&self->by_hash);
    kvt_hmap_destroy(&self->by_op);
    kvt_hmap_destroy(&self->by_req);
    kvt_hmap_destroy(&self->by_slot);
    free(self);
    *self_p = NULL;
}

// ---------------------------------------------------------------- images --

static kvt_stidx_image_t *s_image(const kvt_stidx_t *self, kvt_hash_t h)
{
    uint32_t i;
    if (!kvt_hmap_get(self->by_hash, h, &i))
        return NULL;
    return &self->images[i];
}

//  Evidence that every rank holds the image: confirms it and ends a hold.
static void s_confirm(kvt_stidx_t *self, kvt_stidx_image_t *img, uint64_t now_us)
{
    if (img->holding)
        self->stats.holds_released++;
    img->verified = true;
    img->verified_us = now_us;
    img->holding = img->hold_spent = false;
}

//  Indexes h at the young end (refreshing it when present); NULL when the
//  index has no capacity.
static kvt_stidx_image_t *s_index(kvt_stidx_t *self, kvt_hash_t h)
{
    uint32_t i;
    if (kvt_hmap_get(self->by_hash, h, &i)) {
        kvt_ilist_to_tail(&self->lru, S_IMG_LINKS(self), i);
        return &self->images[i];
    }
    if (self->cfg.hash_cap == 0)
        return NULL;
    i = kvt_ilist_take_head(&self->img_free, S_IMG_LINKS(self));
    if (i == KVT_ILIST_NONE) {
        i = kvt_ilist_take_head(&self->lru, S_IMG_LINKS(self));
        assert(i != KVT_ILIST_NONE);
        kvt_hmap_del(self->by_hash, self->images[i].hash, NULL);
        self->stats.evicted++;
    }
    kvt_stidx_image_t *img = &self->images[i];
    memset(img, 0, sizeof(*img));
    img->hash = h;
    img->indexed = true;
    self->img_epoch++;
    int rc = kvt_hmap_put(self->by_hash, h, i);
    assert(rc == 0); //  fixed map sized for hash_cap entries
    (void)rc;
    kvt_ilist_append(&self->lru, S_IMG_LINKS(self), i);
    self->stats.noted++;
    return img;
}

void kvt_stidx_note_stored(kvt_stidx_t *self, kvt_hash_t h, uint64_t now_us)
{
    kvt_stidx_image_t *img = s_index(self, h);
    if (!img)
        return;
    img->fresh_round = self->round;
    s_confirm(self, img, now_us);
}

void kvt_stidx_note_present(kvt_stidx_t *self, kvt_hash_t h, uint64_t now_us)
{
    kvt_stidx_image_t *img = s_index(self, h);
    if (!img)
        return;
    img->fresh_round = self->round;
    s_confirm(self, img, now_us);
}

//  Drops h and its touch and hold state with it.
static bool s_forget(kvt_stidx_t *self, kvt_hash_t h)
{
    uint32_t i;
    if (!kvt_hmap_del(self->by_hash, h, &i))
        return false;
    kvt_ilist_unlink(&self->lru, S_IMG_LINKS(self), i);
    memset(&self->images[i], 0, sizeof(kvt_stidx_image_t));
    self->img_epoch++;
    kvt_ilist_append(&self->img_free, S_IMG_LINKS(self), i);
    return true;
}

bool kvt_stidx_forget(kvt_stidx_t *self, kvt_hash_t h)
{
    if (!s_forget(self, h))
        return false;
    self->stats.forgotten_miss++;
    return true;
}

bool kvt_stidx_could_serve(const kvt_stidx_t *self, kvt_hash_t h)
{
    return self->cfg.can_load && kvt_hmap_get(self->by_hash, h, NULL);
}

bool kvt_stidx_want_touch(kvt_stidx_t *self, kvt_hash_t h, uint64_t now_us, uint64_t *round)
{
    if (!kvt_stidx_could_serve(self, h))
        return false;
    uint32_t vi;
    kvt_hmap_get(self->by_hash, h, &vi);
    kvt_ilist_to_tail(&self->lru, S_IMG_LINKS(self), vi); //  a hit that votes for it: young
    kvt_stidx_image_t *img = &self->images[vi];
    if (img->touched && now_us - img->touch_us < self->cfg.touch_interval_us) {
        self->stats.touches_throttled++;
        return false;
    }
    img->touched = true;
    img->touch_us = now_us;
    self->stats.touches_sent++;
    if (round)
        *round = ++self->round;
    else
        ++self->round;
    return true;
}

int kvt_stidx_touch_verdict(kvt_stidx_t *self, kvt_hash_t h, uint64_t round, uint8_t answer,
                            uint64_t now_us)
{
    if (answer > KVT_TOUCH_REFRESHED)
        return -1;
    kvt_stidx_image_t *img = s_image(self, h);
    if (!img) {
        self->stats.touches_stale++;
        return 0;
    }
    if (answer == KVT_TOUCH_GONE) {
        //  A store or lookup that landed after this touch was sent, or the
        //  verdict of a later touch, is newer than what this touch saw.
        if (round <= img->fresh_round) {
            self->stats.touches_stale++;
            return 0;
        }
        s_forget(self, h);
        self->stats.forgotten_gone++;
        return 0;
    }
    if (answer == KVT_TOUCH_PRESENT)
        self->stats.touches_unrefreshed++;
    if (round > img->fresh_round)
        img->fresh_round = round;
    s_confirm(self, img, now_us);
    return 0;
}

void kvt_stidx_state_verdict(kvt_stidx_t *self, kvt_hash_t h, bool ok, uint32_t detail,
                             uint64_t now_us)
{
    if (ok && detail == KVT_DETAIL_SKIPPED) {
        self->stats.neutral_verdicts++; //  no rank read the image: no evidence
        return;
    }
    if (ok) {
        kvt_stidx_image_t *img = s_image(self, h);
        if (img)
            s_confirm(self, img, now_us);
    } else if (detail == KVT_DETAIL_MISS)
        kvt_stidx_forget(self, h);
}

bool kvt_stidx_hold(kvt_stidx_t *self, kvt_hash_t h, uint64_t now_us)
{
    if (!kvt_stidx_could_serve(self, h))
        return false;
    kvt_stidx_image_t *img = s_image(self, h);
    if (img->verified && now_us - img->verified_us <= self->cfg.window_us)
        return false;
    if (img->hold_spent)
        return false;
    if (!img->holding) {
        img->holding = true;
        img->hold_from_us = now_us;
        self->stats.holds++;
        return true;
    }
    if (now_us - img->hold_from_us > self->cfg.hold_bound_us) {
        img->holding = false;
        img->hold_spent = true;
        self->stats.holds_expired++;
        if (!self->warned_expiry) {
            self->warned_expiry = true;
            char line[160];
            snprintf(line, sizeof line,
                     "stidx: a verify hold expired after %llu ms with no touch verdict "
                     "(verdicts lost or late); admitting without one (counted in "
                     "stidx.holds_expired)",
                     (unsigned long long)(self->cfg.hold_bound_us / 1000));
            kvt_stidx_log(self, line);
        }
        return false;
    }
    self->stats.hold_passes++;
    return true;
}

// ----------------------------------------------------------------- loads --

static kvt_stidx_lrec_t *s_load(const kvt_stidx_t *self, kvt_opid_t op)
{
    uint32_t i;
    if (!kvt_hmap_get(self->by_op, kvt_stidx_opkey(op), &i))
        return NULL;
    return &self->loads[i];
}

static int s_grow_loads(kvt_stidx_t *self)
{
    uint32_t old = self->loads_cap, cap = old;
    if (kvt_vec_reserve((void **)&self->loads, &cap, old + 1, sizeof(kvt_stidx_lrec_t)) != 0)
        return -1;
    memset(self->loads + old, 0, (size_t)(cap - old) * sizeof(kvt_stidx_lrec_t));
    for (uint32_t i = old; i < cap; i++)
        kvt_ilist_append(&self->load_free, S_LOAD_LINKS(self), i);
    self->loads_cap = cap;
    return 0;
}

//  Orphans the live load e at now_us: its slot stays reserved.
static void s_orphan(kvt_stidx_t *self, kvt_stidx_lrec_t *e, uint64_t now_us)
{
    uint32_t i = (uint32_t)(e - self->loads);
    if (e->state == E_ARMED) {
        kvt_ilist_unlink(&self->armed, S_LOAD_LINKS(self), i);
        self->stats.armed--;
    }
    e->state = E_ORPHAN;
    self->load_epoch++;
    e->t_us = now_us; //  reclaim is timed from orphan time, not request time
    kvt_ilist_append(&self->orphans, S_LOAD_LINKS(self), i);
    self->stats.orphans++;
    self->stats.orphaned++;
}

int kvt_stidx_request_load(kvt_stidx_t *self, kvt_opid_t op, kvt_hash_t h, uint32_t slot,
                           uint64_t now_us)
{
    uint32_t prev;
    bool has_prev = kvt_hmap_get(self->by_req, kvt_hmap_key64(op.req), &prev);
    bool has_slot = slot != KVT_STIDX_NO_SLOT;
    if ((has_slot && kvt_hmap_get(self->by_slot, kvt_hmap_key64(slot), NULL)) ||
        (has_prev && self->loads[prev].op.gen >= op.gen) || s_load(self, op)) {
        self->stats.refused++;
        return -1;
    }
    if (self->load_free.count == 0 && s_grow_loads(self) != 0) {
        self->stats.refused++;
        return -1;
    }
    uint32_t i = self->load_free.head;
    if (kvt_hmap_put(self->by_op, kvt_stidx_opkey(op), i) != 0) {
        self->stats.refused++;
        return -1;
    }
    if ((has_slot && kvt_hmap_put(self->by_slot, kvt_hmap_key64(slot), i) != 0) ||
        kvt_hmap_put(self->by_req, kvt_hmap_key64(op.req), i) != 0) {
        kvt_hmap_del(self->by_op, kvt_stidx_opkey(op), NULL);
        if (has_slot)
            kvt_hmap_del(self->by_slot, kvt_hmap_key64(slot), NULL);
        if (has_prev)
            kvt_hmap_put(self->by_req, kvt_hmap_key64(op.req), prev);
        self->stats.refused++;
        return -1;
    }
    //  Re-admission: the earlier admission's load is detached — reachable
    //  only under its own operation id — and orphaned if the caller had not
    //  torn it down (its slot stays reserved, I2).
    if (has_prev && self->loads[prev].state != E_ORPHAN) {
        s_orphan(self, &self->loads[prev], now_us);
        self->stats.detached++;
    }
    kvt_ilist_unlink(&self->load_free, S_LOAD_LINKS(self), i);
    kvt_stidx_lrec_t *e = &self->loads[i];
    e->op = op;
    e->hash = h;
    e->slot = slot;
    e->state = E_ARMED;
    e->t_us = now_us;
    self->load_epoch++;
    kvt_ilist_append(&self->armed, S_LOAD_LINKS(self), i);
    self->slotless += !has_slot;
    self->stats.dispatched++;
    self->stats.outstanding++;
    self->stats.armed++;
    return 0;
}

int kvt_stidx_carried(kvt_stidx_t *self, kvt_opid_t op)
{
    kvt_stidx_lrec_t *e = s_load(self, op);
    if (!e || e->state != E_ARMED)
        return -1;
    kvt_ilist_unlink(&self->armed, S_LOAD_LINKS(self), (uint32_t)(e - self->loads));
    self->stats.armed--;
    e->state = E_OUT;
    self->load_epoch++;
    return 0;
}

//  Settles e: drops it from every map and list; returns KVT_STIDX_ORPHAN
//  with *free_slot when it was an orphan, else KVT_STIDX_LIVE.
static int s_settle(kvt_stidx_t *self, kvt_stidx_lrec_t *e, uint32_t *free_slot)
{
    uint32_t i = (uint32_t)(e - self->loads);
    int rc = KVT_STIDX_LIVE;
    if (e->state == E_ARMED) {
        kvt_ilist_unlink(&self->armed, S_LOAD_LINKS(self), i);
        self->stats.armed--;
    } else if (e->state == E_ORPHAN) {
        kvt_ilist_unlink(&self->orphans, S_LOAD_LINKS(self), i);
        self->stats.orphans--;
        rc = KVT_STIDX_ORPHAN;
        if (free_slot)
            *free_slot = e->slot;
    }
    kvt_hmap_del(self->by_op, kvt_stidx_opkey(e->op), NULL);
    if (e->slot != KVT_STIDX_NO_SLOT)
        kvt_hmap_del(self->by_slot, kvt_hmap_key64(e->slot), NULL);
    else
        self->slotless--;
    uint32_t cur;
    if (kvt_hmap_get(self->by_req, kvt_hmap_key64(e->op.req), &cur) && cur == i)
        kvt_hmap_del(self->by_req, kvt_hmap_key64(e->op.req), NULL);
    memset(e, 0, sizeof(*e));
    self->load_epoch++;
    kvt_ilist_prepend(&self->load_free, S_LOAD_LINKS(self), i);
    self->stats.outstanding--;
    return rc;
}

int kvt_stidx_decline(kvt_stidx_t *self, kvt_opid_t op)
{
    kvt_stidx_lrec_t *e = s_load(self, op);
    if (!e || e->state != E_ARMED)
        return -1;
    s_settle(self, e, NULL);
    self->stats.declined++;
    return 0;
}

//  The load of op that a report may settle: carried or orphaned (an armed
//  load never went out, so no report can be about it).
static kvt_stidx_lrec_t *s_reported(kvt_stidx_t *self, kvt_opid_t op)
{
    kvt_stidx_lrec_t *e = s_load(self, op);
    if (!e || e->state == E_ARMED) {
        self->stats.stale_reports++;
        return NULL;
    }
    return e;
}

int kvt_stidx_complete(kvt_stidx_t *self, kvt_opid_t op, uint64_t now_us, uint32_t *free_slot)
{
    kvt_stidx_lrec_t *e = s_reported(self, op);
    if (!e)
        return KVT_STIDX_STALE;
    kvt_stidx_image_t *img = s_image(self, e->hash);
    if (img) {
        kvt_ilist_to_tail(&self->lru, S_IMG_LINKS(self), (uint32_t)(img - self->images));
        s_confirm(self, img, now_us);
    }
    self->stats.completed++;
    return s_settle(self, e, free_slot);
}

int kvt_stidx_fail(kvt_stidx_t *self, kvt_opid_t op, bool state_miss, uint32_t *free_slot)
{
    kvt_stidx_lrec_t *e = s_reported(self, op);
    if (!e)
        return KVT_STIDX_STALE;
    if (state_miss)
        kvt_stidx_forget(self, e->hash);
    self->stats.failed++;
    return s_settle(self, e, free_slot);
}

int kvt_stidx_abandon(kvt_stidx_t *self, kvt_opid_t op, uint32_t *free_slot)
{
    kvt_stidx_lrec_t *e = s_load(self, op);
    if (!e) {
        self->stats.stale_reports++;
        return KVT_STIDX_STALE;
    }
    self->stats.abandoned++;
    return s_settle(self, e, free_slot);
}

int kvt_stidx_orphan(kvt_stidx_t *self, kvt_opid_t op, uint64_t now_us)
{
    kvt_stidx_lrec_t *e = s_load(self, op);
    if (!e || e->state == E_ORPHAN)
        return -1;
    bool unsent = e->state == E_ARMED;
    if (unsent) { //  never went out: nothing can write the slot
        s_settle(self, e, NULL);
        self->stats.abandoned++;
        return 0;
    }
    s_orphan(self, e, now_us);
    return 1;
}

uint32_t kvt_stidx_reclaim(kvt_stidx_t *self, uint64_t now_us, uint64_t timeout_us, uint32_t *slots,
                           kvt_opid_t *ops, uint32_t cap)
{
    if (timeout_us == 0)
        return 0;
    uint32_t n = 0;
    while (n < cap && self->orphans.head != KVT_ILIST_NONE) {
        kvt_stidx_lrec_t *e = &self->loads[self->orphans.head];
        if (now_us < e->t_us || now_us - e->t_us < timeout_us)
            break; //  the list is in orphan order: the rest are younger
        if (ops)
            ops[n] = e->op;
        s_settle(self, e, &slots[n]);
        self->stats.reclaimed++;
        n++;
    }
    return n;
}

bool kvt_stidx_load_of(const kvt_stidx_t *self, uint64_t req, kvt_stidx_load_t *out)
{
    uint32_t i;
    if (!kvt_hmap_get(self->by_req, kvt_hmap_key64(req), &i))
        return false;
    const kvt_stidx_lrec_t *e = &self->loads[i];
    if (out) {
        out->op = e->op;
        out->hash = e->hash;
        out->slot = e->slot;
        out->orphaned = e->state == E_ORPHAN;
        out->carried = e->state != E_ARMED;
    }
    return true;
}

bool kvt_stidx_is_orphan(const kvt_stidx_t *self, kvt_opid_t op)
{
    const kvt_stidx_lrec_t *e = s_load(self, op);
    return e && e->state == E_ORPHAN;
}

bool kvt_stidx_slot_reserved(const kvt_stidx_t *self, uint32_t slot)
{
    return kvt_hmap_get(self->by_slot, kvt_hmap_key64(slot), NULL);
}
