/*  kvt_agg — see kvt_agg.h. */
#include "kvt_agg.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/kvt_hmap.h"
#include "base/kvt_ilist.h"
#include "base/kvt_seen.h"

#define S_WORDS (KVT_MSG_MAX_RANKS / 64) //  rank bitmap words

typedef struct {
    kvt_completion_t first;  //  the first report (channel, op, key)
    kvt_hash_t id;           //  hash of (chan, op, key, attempt)
    uint64_t since;          //  time of the first report
    uint64_t ranks[S_WORDS]; //  ranks that reported
    uint32_t nreported;      //  popcount of ranks
    uint32_t nfailed;        //  ranks that reported failure
    uint32_t detail;         //  first failing rank's detail
    uint32_t lower;          //  largest `lower` reported
    bool surfaced;           //  already reported as stale
} s_open_t;

struct _kvt_agg_t {
    uint32_t nranks;       //  reports per key
    uint64_t stale_ns;     //  age bound for open keys
    s_open_t *open;        //  open key slots (grows)
    uint32_t nopen_cap;    //  slots allocated
    uint32_t *prev;        //  age order links
    uint32_t *next;        //  age order links
    kvt_ilist_t age;       //  open keys not yet surfaced, oldest first
    kvt_ilist_t surfaced;  //  open keys already surfaced as stale
    uint32_t *free_slots;  //  unused slots
    uint32_t nfree;        //  entries in free_slots
    kvt_hmap_t *by_id;     //  id → open slot
    kvt_seen_t *tomb;      //  tombstones: ids of the last settled keys
    kvt_agg_stats_t stats; //  counters
};

static kvt_hash_t s_id(const kvt_completion_t *c)
{
    uint8_t buf[1 + 8 + 4 + 16 + 4];
    buf[0] = c->chan;
    memcpy(buf + 1, &c->op.req, 8);
    memcpy(buf + 9, &c->op.gen, 4);
    memcpy(buf + 13, &c->key.hi, 8);
    memcpy(buf + 21, &c->key.lo, 8);
    memcpy(buf + 29, &c->attempt, 4);
    XXH128_hash_t h = XXH3_128bits(buf, sizeof buf);
    kvt_hash_t out = {h.high64, h.low64};
    return out;
}

kvt_agg_t *kvt_agg_new(uint32_t nranks, uint32_t tombstones, uint64_t stale_ns)
{
    assert(nranks >= 1 && nranks <= KVT_MSG_MAX_RANKS);
    kvt_agg_t *self = calloc(1, sizeof(*self));
    if (!self)
        return NULL;
    self->nranks = nranks;
    self->stale_ns = stale_ns;
    self->tomb = kvt_seen_new(tombstones ? tombstones : 1);
    self->by_id = kvt_hmap_new(64, false);
    kvt_ilist_init(&self->age);
    kvt_ilist_init(&self->surfaced);
    if (!self->tomb || !self->by_id) {
        kvt_agg_destroy(&self);
        return NULL;
    }
    return self;
}

void kvt_agg_destroy(kvt_agg_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kvt_agg_t *self = *self_p;
    free(self->open);
    free(self->prev);
    free(self->next);
    free(self->free_slots);
    kvt_seen_destroy(&self->tomb);
    kvt_hmap_destroy(&self->by_id);
    free(self);
    *self_p = NULL;
}

static int s_grow(kvt_agg_t *self)
{
    uint32_t cap = self->nopen_cap ? self->nopen_cap * 2 : 64;
    s_open_t *open = realloc(self->open, (size_t)cap * sizeof(s_open_t));
    if (!open)
        return -1;
    self->open = open;
    uint32_t *prev = realloc(self->prev, (size_t)cap * sizeof(uint32_t));
    if (!prev)
        return -1;
    self->prev = prev;
    uint32_t *next = realloc(self->next, (size_t)cap * sizeof(uint32_t));
    if (!next)
        return -1;
    self->next = next;
    uint32_t *free_slots = realloc(self->free_slots, (size_t)cap * sizeof(uint32_t));
    if (!free_slots)
        return -1;
    self->free_slots = free_slots;
    for (uint32_t i = cap; i-- > self->nopen_cap;)
        self->free_slots[self->nfree++] = i;
    self->nopen_cap = cap;
    return 0;
}

int kvt_agg_report(kvt_agg_t *self, const kvt_completion_t *c, uint64_t now, kvt_verdict_t *verdict)
{
    if (c->rank >= self->nranks) {
        self->stats.bad_rank++;
        return -1;
    }
    kvt_hash_t id = s_id(c);
    if (kvt_seen_contains(self->tomb, id)) {
        self->stats.late_dropped++;
        return -1;
    }
    uint32_t slot;
    if (!kvt_hmap_get(self->by_id, id, &slot)) {
        if (self->nfree == 0 && s_grow(self) != 0)
            return -1;
        slot = self->free_slots[--self->nfree];
        s_open_t *o = &self->open[slot];
        memset(o, 0, sizeof(*o));
        o->first = *c;
        o->id = id;
        o->since = now;
        if (kvt_hmap_put(self->by_id, id, slot) != 0) {
            self->free_slots[self->nfree++] = slot;
            return -1;
        }
        kvt_ilist_push_tail(&self->age, self->prev, self->next, slot);
        self->stats.open++;
    }
    s_open_t *o = &self->open[slot];
    uint64_t bit = 1ull << (c->rank % 64);
    if (o->ranks[c->rank / 64] & bit) {
        self->stats.dup_dropped++;
        return -1;
    }
    o->ranks[c->rank / 64] |= bit;
    o->nreported++;
    self->stats.reports++;
    if (c->lower > o->lower)
        o->lower = c->lower;
    if (!c->ok) {
        //  The detail is the first failing rank's, except that a miss on any
        //  rank wins: the scheduler corrects its tier view only on a miss, so
        //  that must not depend on which rank reported first.
        uint32_t d = c->detail ? c->detail : KVT_DETAIL_IO;
        if (o->nfailed == 0 || d == KVT_DETAIL_MISS)
            o->detail = d;
        o->nfailed++;
    }
    if (o->nreported < self->nranks)
        return 0;

    memset(verdict, 0, sizeof(*verdict));
    verdict->chan = o->first.chan;
    verdict->op = o->first.op;
    verdict->key = o->first.key;
    verdict->ok = o->nfailed == 0;
    verdict->detail = o->nfailed ? o->detail : KVT_DETAIL_OK;
    verdict->nfailed = o->nfailed;
    verdict->attempt = o->first.attempt;
    verdict->lower = o->lower;
    kvt_hmap_del(self->by_id, id, NULL);
    kvt_ilist_remove(o->surfaced ? &self->surfaced : &self->age, self->prev, self->next, slot);
    self->free_slots[self->nfree++] = slot;
    self->stats.open--;
    self->stats.settled++;
    if (!verdict->ok)
        self->stats.settled_failed++;
    if (verdict->chan != KVT_CHAN_TOUCH)
        kvt_seen_add(self->tomb, id);
    return 1;
}

uint32_t kvt_agg_check_stale(kvt_agg_t *self, uint64_t now, kvt_completion_t *out, uint32_t max)
{
    if (self->stale_ns == 0)
        return 0;
    uint32_t found = 0;
    //  Unsurfaced open keys are in age order; stop at the first one younger
    //  than the bound. A surfaced key moves to its own list, so each is
    //  reported once and the scan is proportional to the newly stale keys.
    while (self->age.head != KVT_ILIST_NONE) {
        uint32_t slot = self->age.head;
        s_open_t *o = &self->open[slot];
        if (now < o->since || now - o->since < self->stale_ns)
            break;
        o->surfaced = true;
        kvt_ilist_remove(&self->age, self->prev, self->next, slot);
        kvt_ilist_push_tail(&self->surfaced, self->prev, self->next, slot);
        if (out && found < max)
            out[found] = o->first;
        found++;
        self->stats.stale++;
    }
    return found;
}

uint64_t kvt_agg_next_stale(const kvt_agg_t *self)
{
    if (self->stale_ns == 0 || self->age.head == KVT_ILIST_NONE)
        return UINT64_MAX;
    return self->open[self->age.head].since + self->stale_ns;
}

void kvt_agg_stats(const kvt_agg_t *self, kvt_agg_stats_t *out)
{
    *out = self->stats;
}
