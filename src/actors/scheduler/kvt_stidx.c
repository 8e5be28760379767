/*  kvt_stidx — see kvt_stidx.h. */
#include "kvt_stidx.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/common/kvt_counters.h"
#include "base/kvt_hmap.h"
#include "base/kvt_ilist.h"
#include "base/kvt_vec.h"
#include "kvtier/kvt_store.h"

enum { E_FREE = 0, E_ARMED, E_OUT, E_ORPHAN };

//  One indexed image.
typedef struct {
    kvt_hash_t hash;       //  prefix hash of the image
    uint64_t verified_us;  //  last evidence that every rank holds it
    uint64_t touch_us;     //  last touch sent (the throttle)
    uint64_t hold_from_us; //  first hold of the current hold
    uint64_t fresh_round;  //  touch rounds <= this are older than the newest evidence
    bool verified;         //  verified_us is set
    bool touched;          //  touch_us is set
    bool holding;          //  an admission is held on it (hold_from_us is set)
    bool hold_spent;       //  a hold expired: admit without waiting until new evidence
    bool indexed;          //  in the LRU and under its hash (else on the free stack)
    kvt_ilink_t link;      //  LRU (used) or free stack
} s_image_t;

//  One state load.
typedef struct {
    kvt_opid_t op;    //  the admission that owes the report
    kvt_hash_t hash;  //  the image it loads
    uint32_t slot;    //  destination state slot (reserved while the entry lives)
    uint8_t state;    //  E_*
    uint64_t t_us;    //  request time; orphan time once orphaned
    kvt_ilink_t link; //  armed list, orphan list (orphan order) or free list
} s_load_t;

//  Phases of a key-set pass, in order.
enum { C_LOADS = 0, C_BY_OP, C_BY_SLOT, C_BY_REQ, C_IMAGES, C_DONE };

//  Where a key-set pass stands: the stats reads' pass advances a slice per
//  read; kvt_stidx_check runs a whole pass on a cursor of its own.
typedef struct {
    uint8_t phase;    //  C_*
    uint32_t at;      //  next record index or map slot of the phase
    uint64_t epoch;   //  the phase's table epoch when the phase began
    uint64_t live;    //  C_LOADS: live records seen
    uint64_t armed;   //  C_LOADS: armed records seen
    uint64_t orphans; //  C_LOADS: orphaned records seen
    uint32_t images;  //  C_IMAGES: indexed records seen
} s_cursor_t;

struct _kvt_stidx_t {
    kvt_stidx_cfg_t cfg;     //  configuration (defaults applied)
    s_image_t *images;       //  image records (hash_cap)
    kvt_ilist_t lru;         //  indexed images, old → young
    kvt_ilist_t img_free;    //  unused image records
    kvt_hmap_t *by_hash;     //  hash → image record
    uint64_t round;          //  last touch round handed out
    s_load_t *loads;         //  load records
    uint32_t loads_cap;      //  records allocated
    kvt_ilist_t load_free;   //  unused load records
    kvt_ilist_t armed;       //  E_ARMED, request order
    kvt_ilist_t orphans;     //  E_ORPHAN, orphan order (oldest at the head)
    kvt_hmap_t *by_op;       //  {gen, req} → load record
    kvt_hmap_t *by_req;      //  req → load record of its latest admission
    kvt_hmap_t *by_slot;     //  slot → load record holding it
    uint64_t slotless;       //  live loads with no slot (KVT_STIDX_NO_SLOT)
    uint64_t load_epoch;     //  bumped when a load record changes state
    uint64_t img_epoch;      //  bumped when an image record is indexed or freed
    s_cursor_t cur;          //  the stats reads' key-set pass
    bool warned_expiry;      //  the first expired hold was warned
    bool warned_invariant;   //  the first invariant violation was warned
    kvt_stidx_stats_t stats; //  counters
};

#define S_IMG_LINKS(self)  KVT_ILINKS((self)->images, link)
#define S_LOAD_LINKS(self) KVT_ILINKS((self)->loads, link)

static void s_log(kvt_stidx_t *self, const char *line)
{
    if (self->cfg.log)
        self->cfg.log(self->cfg.log_arg, line);
}

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
    self->images = calloc(n, sizeof(s_image_t));
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
    s_log(self, line);
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

static s_image_t *s_image(const kvt_stidx_t *self, kvt_hash_t h)
{
    uint32_t i;
    if (!kvt_hmap_get(self->by_hash, h, &i))
        return NULL;
    return &self->images[i];
}

//  Evidence that every rank holds the image: confirms it and ends a hold.
static void s_confirm(kvt_stidx_t *self, s_image_t *img, uint64_t now_us)
{
    if (img->holding)
        self->stats.holds_released++;
    img->verified = true;
    img->verified_us = now_us;
    img->holding = img->hold_spent = false;
}

//  Indexes h at the young end (refreshing it when present); NULL when the
//  index has no capacity.
static s_image_t *s_index(kvt_stidx_t *self, kvt_hash_t h)
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
    s_image_t *img = &self->images[i];
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
    s_image_t *img = s_index(self, h);
    if (!img)
        return;
    img->fresh_round = self->round;
    s_confirm(self, img, now_us);
}

void kvt_stidx_note_present(kvt_stidx_t *self, kvt_hash_t h, uint64_t now_us)
{
    s_image_t *img = s_index(self, h);
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
    memset(&self->images[i], 0, sizeof(s_image_t));
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
    s_image_t *img = &self->images[vi];
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
    s_image_t *img = s_image(self, h);
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
    if (ok) {
        s_image_t *img = s_image(self, h);
        if (img)
            s_confirm(self, img, now_us);
    } else if (detail == KVT_DETAIL_MISS)
        kvt_stidx_forget(self, h);
}

bool kvt_stidx_hold(kvt_stidx_t *self, kvt_hash_t h, uint64_t now_us)
{
    if (!kvt_stidx_could_serve(self, h))
        return false;
    s_image_t *img = s_image(self, h);
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
            s_log(self, line);
        }
        return false;
    }
    self->stats.hold_passes++;
    return true;
}

// ----------------------------------------------------------------- loads --

static kvt_hash_t s_opkey(kvt_opid_t op)
{
    kvt_hash_t k = {op.gen, op.req};
    return k;
}

static s_load_t *s_load(const kvt_stidx_t *self, kvt_opid_t op)
{
    uint32_t i;
    if (!kvt_hmap_get(self->by_op, s_opkey(op), &i))
        return NULL;
    return &self->loads[i];
}

static int s_grow_loads(kvt_stidx_t *self)
{
    uint32_t old = self->loads_cap, cap = old;
    if (kvt_vec_reserve((void **)&self->loads, &cap, old + 1, sizeof(s_load_t)) != 0)
        return -1;
    memset(self->loads + old, 0, (size_t)(cap - old) * sizeof(s_load_t));
    for (uint32_t i = old; i < cap; i++)
        kvt_ilist_append(&self->load_free, S_LOAD_LINKS(self), i);
    self->loads_cap = cap;
    return 0;
}

//  Orphans the live load e at now_us: its slot stays reserved.
static void s_orphan(kvt_stidx_t *self, s_load_t *e, uint64_t now_us)
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
    if (kvt_hmap_put(self->by_op, s_opkey(op), i) != 0) {
        self->stats.refused++;
        return -1;
    }
    if ((has_slot && kvt_hmap_put(self->by_slot, kvt_hmap_key64(slot), i) != 0) ||
        kvt_hmap_put(self->by_req, kvt_hmap_key64(op.req), i) != 0) {
        kvt_hmap_del(self->by_op, s_opkey(op), NULL);
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
    s_load_t *e = &self->loads[i];
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
    s_load_t *e = s_load(self, op);
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
static int s_settle(kvt_stidx_t *self, s_load_t *e, uint32_t *free_slot)
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
    kvt_hmap_del(self->by_op, s_opkey(e->op), NULL);
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
    s_load_t *e = s_load(self, op);
    if (!e || e->state != E_ARMED)
        return -1;
    s_settle(self, e, NULL);
    self->stats.declined++;
    return 0;
}

uint32_t kvt_stidx_seal_step(kvt_stidx_t *self, kvt_opid_t *out, uint32_t cap)
{
    uint32_t n = 0;
    while (self->armed.head != KVT_ILIST_NONE) {
        s_load_t *e = &self->loads[self->armed.head];
        if (n < cap)
            out[n] = e->op;
        n++;
        s_settle(self, e, NULL);
        self->stats.declined++;
    }
    return n;
}

//  The load of op that a report may settle: carried or orphaned (an armed
//  load never went out, so no report can be about it).
static s_load_t *s_reported(kvt_stidx_t *self, kvt_opid_t op)
{
    s_load_t *e = s_load(self, op);
    if (!e || e->state == E_ARMED) {
        self->stats.stale_reports++;
        return NULL;
    }
    return e;
}

int kvt_stidx_complete(kvt_stidx_t *self, kvt_opid_t op, uint64_t now_us, uint32_t *free_slot)
{
    s_load_t *e = s_reported(self, op);
    if (!e)
        return KVT_STIDX_STALE;
    s_image_t *img = s_image(self, e->hash);
    if (img) {
        kvt_ilist_to_tail(&self->lru, S_IMG_LINKS(self), (uint32_t)(img - self->images));
        s_confirm(self, img, now_us);
    }
    self->stats.completed++;
    return s_settle(self, e, free_slot);
}

int kvt_stidx_fail(kvt_stidx_t *self, kvt_opid_t op, bool state_miss, uint32_t *free_slot)
{
    s_load_t *e = s_reported(self, op);
    if (!e)
        return KVT_STIDX_STALE;
    if (state_miss)
        kvt_stidx_forget(self, e->hash);
    self->stats.failed++;
    return s_settle(self, e, free_slot);
}

int kvt_stidx_abandon(kvt_stidx_t *self, kvt_opid_t op, uint32_t *free_slot)
{
    s_load_t *e = s_load(self, op);
    if (!e) {
        self->stats.stale_reports++;
        return KVT_STIDX_STALE;
    }
    self->stats.abandoned++;
    return s_settle(self, e, free_slot);
}

int kvt_stidx_orphan(kvt_stidx_t *self, kvt_opid_t op, uint64_t now_us)
{
    s_load_t *e = s_load(self, op);
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
        s_load_t *e = &self->loads[self->orphans.head];
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
    const s_load_t *e = &self->loads[i];
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
    const s_load_t *e = s_load(self, op);
    return e && e->state == E_ORPHAN;
}

bool kvt_stidx_slot_reserved(const kvt_stidx_t *self, uint32_t slot)
{
    return kvt_hmap_get(self->by_slot, kvt_hmap_key64(slot), NULL);
}

// ------------------------------------------------------- stats and audit --

//  Enters phase p of c's pass, remembering the epoch of the table it walks.
static void s_begin(const kvt_stidx_t *self, s_cursor_t *c, uint8_t p)
{
    memset(c, 0, sizeof(*c));
    c->phase = p;
    c->epoch = p == C_IMAGES ? self->img_epoch : self->load_epoch;
}

static bool s_same(kvt_hash_t a, kvt_hash_t b)
{
    return a.hi == b.hi && a.lo == b.lo;
}

//  Load record i: a live record is found under its own operation id and its
//  own slot.
static int s_check_load(const kvt_stidx_t *self, s_cursor_t *c, uint32_t i, char *err,
                        size_t errlen)
{
    const s_load_t *e = &self->loads[i];
    if (e->state == E_FREE)
        return 0;
    c->live++;
    c->armed += e->state == E_ARMED;
    c->orphans += e->state == E_ORPHAN;
    uint32_t j, k;
    if (!kvt_hmap_get(self->by_op, s_opkey(e->op), &j) || j != i ||
        (e->slot != KVT_STIDX_NO_SLOT &&
         (!kvt_hmap_get(self->by_slot, kvt_hmap_key64(e->slot), &k) || k != i))) {
        snprintf(err, errlen, "stidx: load of req %llu gen %u (slot %u) is not under its keys",
                 (unsigned long long)e->op.req, e->op.gen, e->slot);
        return -1;
    }
    return 0;
}

//  One entry of a load map: it points at a live record with that key.
static int s_check_entry(const kvt_stidx_t *self, uint8_t phase, kvt_hash_t key, uint32_t i,
                         char *err, size_t errlen)
{
    const s_load_t *e = i < self->loads_cap ? &self->loads[i] : NULL;
    bool ok = e && e->state != E_FREE;
    if (ok && phase == C_BY_OP)
        ok = s_same(key, s_opkey(e->op));
    else if (ok && phase == C_BY_SLOT)
        ok = s_same(key, kvt_hmap_key64(e->slot));
    else if (ok)
        ok = s_same(key, kvt_hmap_key64(e->op.req));
    if (!ok) {
        snprintf(err, errlen, "stidx: %s %llu points at a settled or foreign load",
                 phase == C_BY_OP     ? "op"
                 : phase == C_BY_SLOT ? "slot"
                                      : "req",
                 (unsigned long long)key.lo);
        return -1;
    }
    return 0;
}

//  Image record i: an indexed record is found under its hash.
static int s_check_image(const kvt_stidx_t *self, s_cursor_t *c, uint32_t i, char *err,
                         size_t errlen)
{
    if (!self->images[i].indexed)
        return 0;
    c->images++;
    uint32_t j;
    if (!kvt_hmap_get(self->by_hash, self->images[i].hash, &j) || j != i) {
        snprintf(err, errlen, "stidx: image record %u is not under its hash", i);
        return -1;
    }
    return 0;
}

//  Advances c's key-set pass by at most `budget` units (a record or a map
//  slot visited is one unit), or to the end of the pass, whichever is first.
//  A phase compares its totals with the counters only when its table did not
//  change while it walked it (its epoch); the entry checks hold whatever
//  changed between two slices. 0, or -1 with the first mismatch in err.
static int s_keyset(const kvt_stidx_t *self, s_cursor_t *c, uint64_t budget, char *err,
                    size_t errlen)
{
    const kvt_stidx_stats_t *st = &self->stats;
    while (budget > 0 && c->phase != C_DONE) {
        if (c->phase == C_LOADS) {
            if (c->at < self->loads_cap) {
                budget--;
                if (s_check_load(self, c, c->at++, err, errlen) != 0)
                    return -1;
                continue;
            }
            if (c->epoch == self->load_epoch &&
                (c->live != st->outstanding || c->armed != st->armed ||
                 c->orphans != st->orphans)) {
                snprintf(err, errlen, "stidx: records hold %llu live / %llu armed / %llu orphans",
                         (unsigned long long)c->live, (unsigned long long)c->armed,
                         (unsigned long long)c->orphans);
                return -1;
            }
            s_begin(self, c, C_BY_OP);
        } else if (c->phase == C_IMAGES) {
            if (c->at < self->cfg.hash_cap) {
                budget--;
                if (s_check_image(self, c, c->at++, err, errlen) != 0)
                    return -1;
                continue;
            }
            if (c->epoch == self->img_epoch && c->images != self->lru.count) {
                snprintf(err, errlen, "stidx: %u image records indexed, the LRU holds %u",
                         c->images, self->lru.count);
                return -1;
            }
            s_begin(self, c, C_DONE);
        } else {
            const kvt_hmap_t *map = c->phase == C_BY_OP     ? self->by_op
                                    : c->phase == C_BY_SLOT ? self->by_slot
                                                            : self->by_req;
            uint32_t from = c->at, i;
            kvt_hash_t key;
            bool more = kvt_hmap_next(map, &c->at, &key, &i);
            uint32_t spent = c->at > from ? c->at - from : 1;
            budget = budget > spent ? budget - spent : 0;
            if (!more) {
                s_begin(self, c, (uint8_t)(c->phase + 1));
                continue;
            }
            if (s_check_entry(self, c->phase, key, i, err, errlen) != 0)
                return -1;
        }
    }
    return 0;
}

int kvt_stidx_check(const kvt_stidx_t *self, bool deep, char *err, size_t errlen)
{
    const kvt_stidx_stats_t *st = &self->stats;
    uint64_t settled = st->completed + st->failed + st->abandoned + st->declined + st->reclaimed;
    if (st->dispatched != settled + st->outstanding) {
        snprintf(err, errlen, "stidx: dispatched %llu != settled %llu + outstanding %llu",
                 (unsigned long long)st->dispatched, (unsigned long long)settled,
                 (unsigned long long)st->outstanding);
        return -1;
    }
    if (kvt_hmap_size(self->by_op) != st->outstanding ||
        kvt_hmap_size(self->by_slot) + self->slotless != st->outstanding ||
        self->armed.count != st->armed || self->orphans.count != st->orphans ||
        kvt_hmap_size(self->by_hash) != self->lru.count) {
        snprintf(err, errlen,
                 "stidx: maps hold %u loads / %u slots / %u armed / %u orphans / %u images, "
                 "counters say %llu / %llu / %llu / %llu / %u",
                 kvt_hmap_size(self->by_op), kvt_hmap_size(self->by_slot), self->armed.count,
                 self->orphans.count, kvt_hmap_size(self->by_hash),
                 (unsigned long long)st->outstanding, (unsigned long long)st->outstanding,
                 (unsigned long long)st->armed, (unsigned long long)st->orphans, self->lru.count);
        return -1;
    }
    if (!deep)
        return 0;
    //  The key sets, in one pass: every live record is found under its own
    //  operation id and its own slot, every map entry points at a live record
    //  with its key, every indexed image is found under its hash; then the
    //  LRU itself is walked.
    s_cursor_t c;
    s_begin(self, &c, C_LOADS);
    if (s_keyset(self, &c, UINT64_MAX, err, errlen) != 0)
        return -1;
    uint32_t seen = 0;
    for (uint32_t i = self->lru.head; i != KVT_ILIST_NONE;
         i = kvt_ilist_next(S_IMG_LINKS(self), i)) {
        uint32_t j;
        if (!self->images[i].indexed || !kvt_hmap_get(self->by_hash, self->images[i].hash, &j) ||
            j != i) {
            snprintf(err, errlen, "stidx: LRU image record %u is not under its hash", i);
            return -1;
        }
        seen++;
    }
    if (seen != self->lru.count) {
        snprintf(err, errlen, "stidx: LRU walk found %u images, list says %u", seen,
                 self->lru.count);
        return -1;
    }
    return 0;
}

void kvt_stidx_stats(kvt_stidx_t *self, kvt_stidx_stats_t *out)
{
    char err[256];
    int rc = kvt_stidx_check(self, false, err, sizeof err);
    if (rc == 0) {
        //  One slice of the key-set pass; a finished pass starts the next.
        if (self->cur.phase == C_DONE)
            s_begin(self, &self->cur, C_LOADS);
        rc = s_keyset(self, &self->cur, KVT_STIDX_SLICE, err, sizeof err);
    }
    if (rc != 0) {
        self->stats.invariant_violations++;
        if (!self->warned_invariant) {
            self->warned_invariant = true;
            s_log(self, err);
        }
    }
    self->stats.images = self->lru.count;
    *out = self->stats;
}

int kvt_stidx_break_for_test(kvt_stidx_t *self, int how, kvt_hash_t h)
{
    uint32_t i;
    if (how == KVT_STIDX_BREAK_IMAGE && kvt_hmap_get(self->by_hash, h, &i)) {
        self->images[i].hash.lo ^= 1; //  the record is no longer under its hash
        return 0;
    }
    if (how == KVT_STIDX_BREAK_COUNT) {
        self->stats.outstanding++;
        return 0;
    }
    return -1;
}

void kvt_stidx_counters(kvt_stidx_t *self, kvt_counter_t *c, uint32_t *n, uint32_t cap)
{
    kvt_stidx_stats_t st;
    kvt_stidx_stats(self, &st);
#define S_C(field) kvt_counter_add(c, n, cap, "stidx." #field, st.field)
    S_C(images);
    S_C(noted);
    S_C(evicted);
    S_C(forgotten_miss);
    S_C(forgotten_gone);
    S_C(touches_sent);
    S_C(touches_throttled);
    S_C(touches_unrefreshed);
    S_C(touches_stale);
    S_C(holds);
    S_C(hold_passes);
    S_C(holds_released);
    S_C(holds_expired);
    S_C(dispatched);
    S_C(completed);
    S_C(failed);
    S_C(abandoned);
    S_C(declined);
    S_C(reclaimed);
    S_C(outstanding);
    S_C(armed);
    S_C(orphans);
    S_C(orphaned);
    S_C(detached);
    S_C(stale_reports);
    S_C(refused);
    S_C(invariant_violations);
#undef S_C
}
