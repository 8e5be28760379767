/*  kvt_stidx — the key-set audit, stats and counters; see kvt_stidx.h. */
#include <stdio.h>
#include <string.h>

#include "actors/common/kvt_counters.h"
#include "kvt_stidx_int.h"

// ------------------------------------------------------- stats and audit --

//  Enters phase p of c's pass, remembering the epoch of the table it walks.
static void s_begin(const kvt_stidx_t *self, kvt_stidx_cursor_t *c, uint8_t p)
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
static int s_check_load(const kvt_stidx_t *self, kvt_stidx_cursor_t *c, uint32_t i, char *err,
                        size_t errlen)
{
    const kvt_stidx_lrec_t *e = &self->loads[i];
    if (e->state == E_FREE)
        return 0;
    c->live++;
    c->armed += e->state == E_ARMED;
    c->orphans += e->state == E_ORPHAN;
    uint32_t j, k;
    if (!kvt_hmap_get(self->by_op, kvt_stidx_opkey(e->op), &j) || j != i ||
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
    const kvt_stidx_lrec_t *e = i < self->loads_cap ? &self->loads[i] : NULL;
    bool ok = e && e->state != E_FREE;
    if (ok && phase == C_BY_OP)
        ok = s_same(key, kvt_stidx_opkey(e->op));
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
static int s_check_image(const kvt_stidx_t *self, kvt_stidx_cursor_t *c, uint32_t i, char *err,
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
static int s_keyset(const kvt_stidx_t *self, kvt_stidx_cursor_t *c, uint64_t budget, char *err,
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
    kvt_stidx_cursor_t c;
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
            kvt_stidx_log(self, err);
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
    S_C(neutral_verdicts);
    S_C(refused);
    S_C(invariant_violations);
#undef S_C
}
