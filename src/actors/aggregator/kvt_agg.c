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
    kvt_completion_t first;  //  the first report (channel, op, key; arrays not kept)
    kvt_hash_t id;           //  hash of (chan, op, key, attempt)
    uint64_t since;          //  time of the first report
    uint64_t ranks[S_WORDS]; //  ranks that reported
    uint32_t nreported;      //  popcount of ranks
    uint32_t nfailed;        //  ranks that reported failure
    uint32_t nneutral;       //  state channel: ranks whose leg did not run (ok, SKIPPED)
    uint32_t detail;         //  first failing rank's detail (a miss wins)
    uint32_t lower;          //  largest `lower` reported
    uint8_t touch;           //  touch channels: lowest answer reported
    uint32_t held;           //  lookup: fewest held chunks reported
    uint8_t *images;         //  lookup: AND of the bitmaps, its first (held + 7) / 8 bytes
    bool unfenced;           //  store: some rank's save did not wait on its producer event
} s_open_t;

struct _kvt_agg_t {
    uint32_t nranks;                     //  reports per key
    uint64_t timeout_ns;                 //  age bound for open keys
    s_open_t *open;                      //  open key slots (grows)
    uint32_t nopen_cap;                  //  slots allocated
    uint32_t *prev;                      //  age order links
    uint32_t *next;                      //  age order links
    kvt_ilist_t age;                     //  open keys, oldest first
    uint32_t *free_slots;                //  unused slots
    uint32_t nfree;                      //  entries in free_slots
    kvt_hmap_t *by_id;                   //  id → open slot
    kvt_seen_t *tomb;                    //  tombstones: ids of the last settled keys
    kvt_seen_t *touched;                 //  ids of the last settled touch keys (own ring)
    uint64_t epoch[KVT_MSG_MAX_RANKS];   //  newest epoch seen per rank
    bool warned[KVT_CHAN_MAX + 1];       //  a timeout on this channel was flagged
    uint8_t scratch[KVT_MSG_MAX_IMAGES]; //  the last verdict's image bitmap
    kvt_agg_stats_t stats;               //  counters
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

//  Touch ids are unique per round: they need no tombstone, and taking one
//  would push store / source / load tombstones out of the ring (A2).
static bool s_tombstoned(uint8_t chan)
{
    return chan != KVT_CHAN_TOUCH && chan != KVT_CHAN_TOUCH_REFRESH;
}

kvt_agg_t *kvt_agg_new(uint32_t nranks, uint32_t tombstones, uint64_t timeout_ns)
{
    assert(nranks >= 1 && nranks <= KVT_MSG_MAX_RANKS);
    kvt_agg_t *self = calloc(1, sizeof(*self));
    if (!self)
        return NULL;
    self->nranks = nranks;
    self->timeout_ns = timeout_ns;
    self->tomb = kvt_seen_new(tombstones ? tombstones : 1);
    self->touched = kvt_seen_new(KVT_AGG_TOUCH_MEMORY);
    self->by_id = kvt_hmap_new(64, false);
    kvt_ilist_init(&self->age);
    if (!self->tomb || !self->touched || !self->by_id) {
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
    for (uint32_t i = self->age.head; i != KVT_ILIST_NONE; i = self->next[i])
        free(self->open[i].images);
    free(self->open);
    free(self->prev);
    free(self->next);
    free(self->free_slots);
    kvt_seen_destroy(&self->tomb);
    kvt_seen_destroy(&self->touched);
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

//  Opens a slot for the key of c. Returns the slot or UINT32_MAX (no memory).
static uint32_t s_open(kvt_agg_t *self, const kvt_completion_t *c, kvt_hash_t id, uint64_t now)
{
    if (self->nfree == 0 && s_grow(self) != 0)
        return UINT32_MAX;
    uint32_t slot = self->free_slots[--self->nfree];
    s_open_t *o = &self->open[slot];
    memset(o, 0, sizeof(*o));
    o->first = *c;
    o->first.images = NULL;
    o->first.nimages = 0;
    o->id = id;
    o->since = now;
    o->touch = KVT_MSG_MAX_TOUCH;
    o->held = KVT_MSG_MAX_CHUNKS;
    if (c->chan == KVT_CHAN_LOOKUP) {
        //  The first report's held chunks bound the verdict's (it takes the
        //  minimum): only that many bitmap bytes are ever kept or folded.
        o->images = malloc(c->held / 8 + 1);
        if (!o->images) {
            self->free_slots[self->nfree++] = slot;
            return UINT32_MAX;
        }
    }
    if (kvt_hmap_put(self->by_id, id, slot) != 0) {
        free(o->images);
        self->free_slots[self->nfree++] = slot;
        return UINT32_MAX;
    }
    kvt_ilist_push_tail(&self->age, self->prev, self->next, slot);
    self->stats.open++;
    return slot;
}

//  Folds a lookup report's bitmap into the key's: bytes past the report's
//  bitmap are zero (no image there); bytes at or past the fewest held chunks
//  so far can never count again, so only those before are touched:
//  O(held / 8) per report, not the whole bitmap.
static void s_fold_images(s_open_t *o, const kvt_completion_t *c, bool first)
{
    uint32_t bytes = (o->held + 7) / 8;
    if (first)
        memset(o->images, 0xff, bytes);
    for (uint32_t i = 0; i < bytes; i++)
        o->images[i] &= i < c->nimages ? c->images[i] : 0;
}

//  A state-channel report from a rank whose state leg did not run: it does
//  not vote (the KV leg or validation failed first, or it shut down).
static bool s_neutral(const kvt_completion_t *c)
{
    return c->chan == KVT_CHAN_STATE && c->ok && c->detail == KVT_DETAIL_SKIPPED;
}

//  Folds one rank's report into its open key; `first`: the key's first.
static void s_fold(s_open_t *o, const kvt_completion_t *c, bool first)
{
    if (c->lower > o->lower)
        o->lower = c->lower;
    if (c->touch < o->touch)
        o->touch = c->touch;
    if (c->held < o->held)
        o->held = c->held;
    if (o->images)
        s_fold_images(o, c, first);
    if (!c->fenced)
        o->unfenced = true;
    if (s_neutral(c))
        o->nneutral++;
    if (!c->ok) {
        //  The detail is the first failing rank's, except that a miss on any
        //  rank wins: only a real miss retracts an image or reopens a lost tier
        //  hit, so that must not depend on which rank reported first.
        uint32_t d = c->detail ? c->detail : KVT_DETAIL_IO;
        if (o->nfailed == 0 || d == KVT_DETAIL_MISS)
            o->detail = d;
        o->nfailed++;
    }
}

//  The measures of a settled lookup / touch key: the minimum over the
//  ranks, and the lookup's image bitmap cut at its held chunks (it points
//  into the core's scratch, valid until the next call).
static void s_measures(kvt_agg_t *self, const s_open_t *o, kvt_verdict_t *v)
{
    if (v->chan == KVT_CHAN_TOUCH || v->chan == KVT_CHAN_TOUCH_REFRESH)
        v->touch = o->touch;
    if (v->chan != KVT_CHAN_LOOKUP)
        return;
    v->held = o->held;
    uint32_t n = (o->held + 7) / 8;
    memcpy(self->scratch, o->images, n);
    if (o->held % 8)
        self->scratch[n - 1] &= (uint8_t)((1u << (o->held % 8)) - 1);
    while (n > 0 && self->scratch[n - 1] == 0)
        n--;
    v->images = n ? self->scratch : NULL;
    v->nimages = n;
}

//  Frees a settled key's slot and remembers its id: in the tombstone ring,
//  or a touch key's in the touch ring. Whether every rank reported or the
//  bound settled it, a rank that still reports on it later must be dropped
//  as late, never open the key again (and so time out, and settle, a
//  second time).
static void s_retire(kvt_agg_t *self, uint32_t slot, bool ok)
{
    s_open_t *o = &self->open[slot];
    kvt_hash_t id = o->id;
    uint8_t chan = o->first.chan;
    free(o->images);
    o->images = NULL;
    kvt_hmap_del(self->by_id, id, NULL);
    kvt_ilist_remove(&self->age, self->prev, self->next, slot);
    self->free_slots[self->nfree++] = slot;
    self->stats.open--;
    self->stats.settled++;
    if (!ok)
        self->stats.settled_failed++;
    //  Touch ids have their own ring, settled or timed out: a late report
    //  on one is dropped, yet touch traffic never evicts a store, source,
    //  load or lookup tombstone (A2).
    if (s_tombstoned(chan)) {
        kvt_seen_add(self->tomb, id);
    } else {
        kvt_seen_add(self->touched, id);
    }
}

int kvt_agg_report(kvt_agg_t *self, const kvt_completion_t *c, uint64_t now, kvt_verdict_t *verdict)
{
    if (c->rank >= self->nranks) {
        self->stats.bad_rank++;
        return -1;
    }
    //  A report of an older incarnation than one this rank already spoke
    //  from: the worker that made it is gone, its vote is void.
    if (c->epoch != 0 && c->epoch < self->epoch[c->rank]) {
        self->stats.epoch_dropped++;
        return -1;
    }
    if (c->epoch > self->epoch[c->rank])
        self->epoch[c->rank] = c->epoch;
    //  A rank-0-only lookup settles on rank 0's report: another rank's
    //  answer was not asked for and must not vote (nor open the key).
    if (c->rank0_only && c->rank != 0) {
        self->stats.not_asked++;
        return -1;
    }
    kvt_hash_t id = s_id(c);
    if (kvt_seen_contains(s_tombstoned(c->chan) ? self->tomb : self->touched, id)) {
        self->stats.late_dropped++;
        return -1;
    }
    uint32_t slot;
    if (!kvt_hmap_get(self->by_id, id, &slot)) {
        slot = s_open(self, c, id, now);
        if (slot == UINT32_MAX) {
            self->stats.oom_dropped++; //  no room for the key: said, never silent
            return -1;
        }
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
    s_fold(o, c, o->nreported == 1);
    if (o->nreported < self->nranks && !c->rank0_only)
        return 0;

    memset(verdict, 0, sizeof(*verdict));
    verdict->chan = o->first.chan;
    verdict->op = o->first.op;
    verdict->key = o->first.key;
    verdict->ok = o->nfailed == 0;
    verdict->detail = o->nfailed ? o->detail : KVT_DETAIL_OK;
    //  State channel: neutral ranks do not vote; SKIPPED only when none did.
    if (o->nneutral == self->nranks)
        verdict->detail = KVT_DETAIL_SKIPPED;
    verdict->nfailed = o->nfailed;
    verdict->attempt = o->first.attempt;
    verdict->lower = o->lower;
    verdict->fenced = verdict->chan == KVT_CHAN_SAVE && !o->unfenced;
    s_measures(self, o, verdict);
    s_retire(self, slot, verdict->ok);
    return 1;
}

uint32_t kvt_agg_expire(kvt_agg_t *self, uint64_t now, kvt_verdict_t *out, bool *warn, uint32_t max)
{
    if (self->timeout_ns == 0)
        return 0;
    uint32_t n = 0;
    //  Open keys are in age order: stop at the first one younger than the
    //  bound, so the scan is proportional to the keys that time out.
    while (n < max && self->age.head != KVT_ILIST_NONE) {
        uint32_t slot = self->age.head;
        const s_open_t *o = &self->open[slot];
        if (now < o->since || now - o->since < self->timeout_ns)
            break;
        uint8_t chan = o->first.chan;
        //  Ranks that never reported count as failed: a timeout is always a
        //  failure, so the key retreats.
        kvt_verdict_t *v = &out[n];
        memset(v, 0, sizeof(*v));
        v->chan = chan;
        v->op = o->first.op;
        v->key = o->first.key;
        v->attempt = o->first.attempt;
        v->ok = false;
        v->detail = KVT_DETAIL_TIMEOUT;
        v->nfailed = o->nfailed + (self->nranks - o->nreported);
        s_retire(self, slot, v->ok);
        warn[n] = !self->warned[chan];
        self->warned[chan] = true;
        self->stats.timeouts++;
        n++;
    }
    return n;
}

uint64_t kvt_agg_next_expiry(const kvt_agg_t *self)
{
    if (self->timeout_ns == 0 || self->age.head == KVT_ILIST_NONE)
        return UINT64_MAX;
    return self->open[self->age.head].since + self->timeout_ns;
}

uint64_t kvt_agg_epoch(const kvt_agg_t *self, uint32_t rank)
{
    return rank < KVT_MSG_MAX_RANKS ? self->epoch[rank] : 0;
}

void kvt_agg_stats(const kvt_agg_t *self, kvt_agg_stats_t *out)
{
    *out = self->stats;
}
