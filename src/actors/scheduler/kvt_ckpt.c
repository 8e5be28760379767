/*  kvt_ckpt — see kvt_ckpt.h. */
#include "kvt_ckpt.h"

#include <assert.h>
#include <stdlib.h>

#include "base/kvt_heap.h"
#include "base/kvt_hmap.h"
#include "base/kvt_ilist.h"

enum { E_FREE = 0, E_RESERVED, E_VALID };

struct _kvt_ckpt_t {
    uint32_t nslots;              //  state slots
    uint8_t *slot_used;           //  per slot: held
    uint32_t *slot_free;          //  free slot stack
    uint32_t nslot_free;          //  entries in slot_free
    uint32_t nentries;            //  checkpoint entries
    uint8_t *state;               //  E_* per entry
    uint32_t *pins;               //  pins per entry (a reservation holds one)
    kvt_hash_t *hash;             //  prefix hash per non-free entry
    uint8_t *src;                 //  kvt_ckpt_src_t per non-free entry
    uint32_t *prev;               //  LRU links
    uint32_t *next;               //  LRU links
    kvt_ilist_t lru;              //  valid entries with no pin, old → young
    kvt_ilist_t dead;             //  the same, their KV gone from HBM (evicted first)
    uint8_t *gone;                //  per entry: its KV left HBM
    uint8_t *saved;               //  per entry: a save lease read it (its image went to the tier)
    uint64_t *stamp;              //  recency stamp of an entry in lru
    uint64_t own_clock;           //  the recency clock when not shared
    kvt_ckpt_tick_fn *tick;       //  shared: the block manager's clock (NULL: own_clock)
    kvt_ckpt_release_fn *release; //  shared: an entry went (NULL: not shared)
    void *share_arg;              //  argument of tick and release
    uint32_t *free_stack;         //  free entries
    uint32_t nfree;               //  entries in free_stack
    kvt_hmap_t *index;            //  hash → entry (reserved or valid)
    kvt_ckpt_order_t order;       //  which unpinned valid entry an eviction takes
    uint64_t state_bytes;         //  MARCONI: bytes of one checkpoint
    uint64_t kv_token_bytes;      //  MARCONI: bytes of one token's KV
    uint32_t *from;               //  per entry: its span's start (kvt_ckpt_set_span)
    uint32_t *at;                 //  per entry: its boundary
    uint32_t *hits;               //  per entry: restores since it was reserved
    uint32_t *heap;               //  VALUE: the lru list's entries, least priority on top
    uint32_t nheap;               //  entries in heap
    uint32_t *hpos;               //  per entry: its index in heap (UINT32_MAX: not in it)
    double *prio;                 //  VALUE: per entry, its priority L + value at its last use
    double inflation;             //  VALUE: L, the priority of the last entry evicted
    kvt_ckpt_stats_t stats;       //  counters
};

kvt_ckpt_t *kvt_ckpt_new(uint32_t slots, uint32_t checkpoints)
{
    assert(slots > 0 && checkpoints > 0);
    kvt_ckpt_t *self = calloc(1, sizeof(*self));
    if (!self)
        return NULL;
    self->nslots = slots;
    self->nentries = checkpoints;
    self->slot_used = calloc(slots, 1);
    self->slot_free = malloc((size_t)slots * sizeof(uint32_t));
    self->state = calloc(checkpoints, 1);
    self->pins = calloc(checkpoints, sizeof(uint32_t));
    self->hash = calloc(checkpoints, sizeof(kvt_hash_t));
    self->src = calloc(checkpoints, 1);
    self->gone = calloc(checkpoints, 1);
    self->saved = calloc(checkpoints, 1);
    self->stamp = calloc(checkpoints, sizeof(uint64_t));
    self->prev = malloc((size_t)checkpoints * sizeof(uint32_t));
    self->next = malloc((size_t)checkpoints * sizeof(uint32_t));
    self->free_stack = malloc((size_t)checkpoints * sizeof(uint32_t));
    self->index = kvt_hmap_new(checkpoints, true);
    self->from = calloc(checkpoints, sizeof(uint32_t));
    self->at = calloc(checkpoints, sizeof(uint32_t));
    self->hits = calloc(checkpoints, sizeof(uint32_t));
    self->heap = malloc((size_t)checkpoints * sizeof(uint32_t));
    self->hpos = malloc((size_t)checkpoints * sizeof(uint32_t));
    self->prio = calloc(checkpoints, sizeof(double));
    if (!self->from || !self->at || !self->hits || !self->heap || !self->hpos || !self->prio ||
        !self->slot_used || !self->slot_free || !self->state || !self->pins || !self->hash ||
        !self->src || !self->gone || !self->saved || !self->stamp || !self->prev || !self->next ||
        !self->free_stack || !self->index) {
        kvt_ckpt_destroy(&self);
        return NULL;
    }
    //  Lowest indices on top of both stacks, so the order is predictable.
    for (uint32_t i = 0; i < slots; i++)
        self->slot_free[i] = slots - 1 - i;
    self->nslot_free = slots;
    for (uint32_t i = 0; i < checkpoints; i++) {
        self->free_stack[i] = checkpoints - 1 - i;
        self->prev[i] = self->next[i] = KVT_ILIST_NONE;
        self->hpos[i] = UINT32_MAX;
    }
    self->nfree = checkpoints;
    kvt_ilist_init(&self->lru);
    kvt_ilist_init(&self->dead);
    return self;
}

void kvt_ckpt_destroy(kvt_ckpt_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kvt_ckpt_t *self = *self_p;
    free(self->slot_used);
    free(self->slot_free);
    free(self->state);
    free(self->pins);
    free(self->hash);
    free(self->src);
    free(self->gone);
    free(self->saved);
    free(self->stamp);
    free(self->prev);
    free(self->next);
    free(self->free_stack);
    free(self->from);
    free(self->at);
    free(self->hits);
    free(self->heap);
    free(self->hpos);
    free(self->prio);
    kvt_hmap_destroy(&self->index);
    free(self);
    *self_p = NULL;
}

void kvt_ckpt_count_full(kvt_ckpt_t *self)
{
    self->stats.full++;
}

uint32_t kvt_ckpt_slot_take(kvt_ckpt_t *self)
{
    if (self->nslot_free == 0) {
        self->stats.slots_refused++;
        return KVT_CKPT_NONE;
    }
    uint32_t s = self->slot_free[--self->nslot_free];
    self->slot_used[s] = 1;
    self->stats.slots_taken++;
    self->stats.slots_in_use++;
    return s;
}

void kvt_ckpt_slot_give(kvt_ckpt_t *self, uint32_t slot)
{
    assert(slot < self->nslots && self->slot_used[slot]);
    self->slot_used[slot] = 0;
    self->slot_free[self->nslot_free++] = slot;
    self->stats.slots_in_use--;
}

uint32_t kvt_ckpt_slots_free(const kvt_ckpt_t *self)
{
    return self->nslot_free;
}

bool kvt_ckpt_has(const kvt_ckpt_t *self, kvt_hash_t hash)
{
    uint32_t e;
    return kvt_hmap_get(self->index, hash, &e) && self->state[e] == E_VALID;
}

void kvt_ckpt_share(kvt_ckpt_t *self, kvt_ckpt_tick_fn *tick, kvt_ckpt_release_fn *release,
                    void *arg)
{
    self->tick = tick;
    self->release = release;
    self->share_arg = arg;
}

bool kvt_ckpt_known(const kvt_ckpt_t *self, kvt_hash_t hash)
{
    return kvt_hmap_get(self->index, hash, NULL);
}

//  The list an unpinned valid entry sits in.
static kvt_ilist_t *s_list(kvt_ckpt_t *self, uint32_t e)
{
    return self->gone[e] ? &self->dead : &self->lru;
}

//  The recompute of tokens [from, at): each token at position p costs
//  1 + p / KVT_CKPT_CTX_TOKENS (the attention layers' work grows with the
//  context), so the sum is n (1 + (from + at - 1) / (2 CTX)).
static double s_recompute(uint32_t from, uint32_t at)
{
    double n = (double)(at - from);
    return n * (1.0 + ((double)from + (double)at - 1.0) / (2.0 * KVT_CKPT_CTX_TOKENS));
}

double kvt_ckpt_value(const kvt_ckpt_t *self, uint32_t entry)
{
    assert(entry < self->nentries);
    return (1.0 + self->hits[entry]) * s_recompute(0, self->at[entry]);
}

//  The value heap's order: the least priority first, the older on a tie
//  (stamps are unique), so the order is total and the pops reproducible.
static bool s_heap_less(const void *a, const void *b, void *ctx)
{
    const kvt_ckpt_t *self = ctx;
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    if (self->prio[x] != self->prio[y])
        return self->prio[x] < self->prio[y];
    return self->stamp[x] < self->stamp[y];
}

static void s_heap_moved(void *elem, uint32_t pos, void *ctx)
{
    ((kvt_ckpt_t *)ctx)->hpos[*(uint32_t *)elem] = pos;
}

static const kvt_heap_ops_t s_heap_ops = {sizeof(uint32_t), s_heap_less, s_heap_moved};

//  An unpinned valid entry joins the young end of its list; with VALUE an
//  entry of the lru list also joins the heap at priority L + its value.
static void s_push(kvt_ckpt_t *self, uint32_t e)
{
    self->stamp[e] = self->tick ? self->tick(self->share_arg) : ++self->own_clock;
    kvt_ilist_push_tail(s_list(self, e), self->prev, self->next, e);
    if (self->order == KVT_CKPT_ORDER_VALUE && !self->gone[e]) {
        self->prio[e] = self->inflation + kvt_ckpt_value(self, e);
        kvt_heap_push(self->heap, &self->nheap, &s_heap_ops, self, &e);
    }
}

//  An entry leaves its list (and the heap).
static void s_unlist(kvt_ckpt_t *self, uint32_t e)
{
    kvt_ilist_remove(s_list(self, e), self->prev, self->next, e);
    if (self->hpos[e] != UINT32_MAX) {
        kvt_heap_remove(self->heap, &self->nheap, &s_heap_ops, self, self->hpos[e], NULL);
        self->hpos[e] = UINT32_MAX;
    }
}

static void s_pin(kvt_ckpt_t *self, uint32_t e)
{
    if (self->pins[e]++ == 0) {
        self->stats.pinned_entries++;
        if (self->state[e] == E_VALID)
            s_unlist(self, e);
    }
}

static void s_free_entry(kvt_ckpt_t *self, uint32_t e)
{
    kvt_hmap_del(self->index, self->hash[e], NULL);
    self->state[e] = E_FREE;
    self->gone[e] = 0;
    self->free_stack[self->nfree++] = e;
    if (self->release)
        self->release(self->share_arg, e);
}

bool kvt_ckpt_victim(const kvt_ckpt_t *self, uint64_t *stamp, bool *gone)
{
    if (self->dead.count) {
        *stamp = self->stamp[self->dead.head];
        *gone = true;
        return true;
    }
    if (!self->lru.count)
        return false;
    *stamp = self->stamp[self->lru.head];
    *gone = false;
    return true;
}

void kvt_ckpt_set_order(kvt_ckpt_t *self, kvt_ckpt_order_t order, uint64_t state_bytes,
                        uint64_t kv_token_bytes)
{
    assert(self->lru.count == 0 && self->dead.count == 0 && self->nfree == self->nentries);
    self->order = order;
    self->state_bytes = state_bytes;
    self->kv_token_bytes = kv_token_bytes;
}

void kvt_ckpt_set_span(kvt_ckpt_t *self, uint32_t entry, uint32_t from, uint32_t at)
{
    assert(entry < self->nentries && self->state[entry] == E_RESERVED && from < at);
    self->from[entry] = from;
    self->at[entry] = at;
}

//  MARCONI's victim: of the KVT_CKPT_SAMPLE least recently used entries,
//  the one of least utility = recency + FLOP efficiency, each normalised
//  over the sample to [0, 1] (min-max), alpha = 1; the older on a tie.
static uint32_t s_marconi_pick(const kvt_ckpt_t *self)
{
    uint32_t cand[KVT_CKPT_SAMPLE] = {0}, n = 0;
    assert(self->lru.count > 0);
    for (uint32_t e = self->lru.head; e != KVT_ILIST_NONE && n < KVT_CKPT_SAMPLE; e = self->next[e])
        cand[n++] = e;
    double eff[KVT_CKPT_SAMPLE], emin = 0, emax = 0;
    uint64_t smin = self->stamp[cand[0]], smax = self->stamp[cand[n - 1]];
    for (uint32_t i = 0; i < n; i++) {
        uint32_t e = cand[i];
        uint32_t span = self->at[e] > self->from[e] ? self->at[e] - self->from[e] : 0;
        double bytes = (double)self->state_bytes + (double)span * (double)self->kv_token_bytes;
        eff[i] = span ? s_recompute(self->from[e], self->at[e]) / (bytes > 0 ? bytes : 1) : 0;
        emin = i == 0 || eff[i] < emin ? eff[i] : emin;
        emax = i == 0 || eff[i] > emax ? eff[i] : emax;
    }
    uint32_t best = 0;
    double best_u = 0;
    for (uint32_t i = 0; i < n; i++) {
        double rec =
            smax > smin ? (double)(self->stamp[cand[i]] - smin) / (double)(smax - smin) : 0;
        double u = rec + (emax > emin ? (eff[i] - emin) / (emax - emin) : 0);
        if (i == 0 || u < best_u) {
            best = i;
            best_u = u;
        }
    }
    return cand[best];
}

void kvt_ckpt_evict_one(kvt_ckpt_t *self)
{
    kvt_ilist_t *l = self->dead.count ? &self->dead : &self->lru;
    uint32_t e = l->head;
    if (l == &self->lru && self->order == KVT_CKPT_ORDER_VALUE) {
        assert(self->nheap == self->lru.count);
        e = self->heap[0];
        self->inflation = self->prio[e]; //  GDSF: what stays ages against it
    } else if (l == &self->lru && self->order == KVT_CKPT_ORDER_MARCONI)
        e = s_marconi_pick(self);
    assert(e != KVT_ILIST_NONE); //  the caller asked kvt_ckpt_victim
    if (e != l->head)
        self->stats.evicted_by_value++;
    s_unlist(self, e);
    if (l == &self->dead)
        self->stats.evicted_gone++;
    if (!self->saved[e])
        self->stats.evicted_unsaved++;
    self->stats.valid--;
    self->stats.evicted++;
    s_free_entry(self, e);
}

void kvt_ckpt_kv_gone(kvt_ckpt_t *self, kvt_hash_t hash)
{
    uint32_t e;
    if (!kvt_hmap_get(self->index, hash, &e) || self->state[e] != E_VALID || self->gone[e])
        return;
    if (self->pins[e] == 0) {
        s_unlist(self, e);
        self->gone[e] = 1;
        kvt_ilist_push_tail(&self->dead, self->prev, self->next, e);
    } else
        self->gone[e] = 1;
}

//  The prefix below a valid entry is back (a take or a restore of it).
static void s_revive(kvt_ckpt_t *self, uint32_t e)
{
    if (!self->gone[e])
        return;
    if (self->pins[e] == 0)
        s_unlist(self, e);
    self->gone[e] = 0;
    if (self->pins[e] == 0)
        s_push(self, e);
}

uint32_t kvt_ckpt_reserve(kvt_ckpt_t *self, kvt_hash_t hash)
{
    uint32_t e;
    if (kvt_hmap_get(self->index, hash, &e)) {
        if (self->state[e] == E_VALID && self->gone[e])
            s_revive(self, e);
        else if (self->state[e] == E_VALID && self->pins[e] == 0) {
            s_unlist(self, e);
            s_push(self, e);
        }
        self->stats.refreshed++;
        return KVT_CKPT_NONE;
    }
    if (self->nfree == 0) {
        uint64_t stamp;
        bool gone;
        if (!kvt_ckpt_victim(self, &stamp, &gone)) {
            self->stats.full++;
            return KVT_CKPT_NONE;
        }
        kvt_ckpt_evict_one(self);
    }
    e = self->free_stack[--self->nfree];
    self->src[e] = KVT_CKPT_SRC_GRID;
    self->from[e] = self->at[e] = self->hits[e] = 0;
    self->saved[e] = 0;
    int rc = kvt_hmap_put(self->index, hash, e);
    assert(rc == 0); //  the index holds at most nentries entries
    (void)rc;
    self->state[e] = E_RESERVED;
    self->hash[e] = hash;
    self->pins[e] = 0;
    s_pin(self, e);
    self->stats.reserved++;
    return e;
}

void kvt_ckpt_commit(kvt_ckpt_t *self, uint32_t entry)
{
    assert(entry < self->nentries && self->state[entry] == E_RESERVED);
    self->state[entry] = E_VALID;
    self->stats.valid++;
    self->stats.committed++;
    self->stats.taken_src[self->src[entry]]++;
    kvt_ckpt_unpin(self, entry);
}

void kvt_ckpt_set_source(kvt_ckpt_t *self, uint32_t entry, kvt_ckpt_src_t src)
{
    assert(entry < self->nentries && self->state[entry] == E_RESERVED && src < KVT_CKPT_SRCS);
    self->src[entry] = (uint8_t)src;
}

void kvt_ckpt_count_restore(kvt_ckpt_t *self, uint32_t entry)
{
    assert(entry < self->nentries && self->state[entry] == E_VALID);
    self->stats.restored_src[self->src[entry]]++;
    if (self->hits[entry] < UINT32_MAX)
        self->hits[entry]++;
}

void kvt_ckpt_abandon(kvt_ckpt_t *self, uint32_t entry)
{
    assert(entry < self->nentries && self->state[entry] == E_RESERVED && self->pins[entry] == 1);
    self->pins[entry] = 0;
    self->stats.pinned_entries--;
    self->stats.abandoned++;
    s_free_entry(self, entry);
}

uint32_t kvt_ckpt_pin(kvt_ckpt_t *self, kvt_hash_t hash)
{
    uint32_t e;
    if (!kvt_hmap_get(self->index, hash, &e) || self->state[e] != E_VALID)
        return KVT_CKPT_NONE;
    s_revive(self, e);
    s_pin(self, e);
    return e;
}

uint32_t kvt_ckpt_find(const kvt_ckpt_t *self, kvt_hash_t hash)
{
    uint32_t e;
    if (!kvt_hmap_get(self->index, hash, &e) || self->state[e] != E_VALID)
        return KVT_CKPT_NONE;
    return e;
}

void kvt_ckpt_pin_entry(kvt_ckpt_t *self, uint32_t entry)
{
    assert(entry < self->nentries && self->state[entry] != E_FREE);
    self->saved[entry] = 1;
    s_pin(self, entry);
}

void kvt_ckpt_unpin(kvt_ckpt_t *self, uint32_t entry)
{
    assert(entry < self->nentries && self->pins[entry] > 0);
    if (--self->pins[entry] > 0)
        return;
    self->stats.pinned_entries--;
    if (self->state[entry] == E_VALID)
        s_push(self, entry);
}

uint32_t kvt_ckpt_pins(const kvt_ckpt_t *self, uint32_t entry)
{
    assert(entry < self->nentries);
    return self->pins[entry];
}

uint32_t kvt_ckpt_capacity(const kvt_ckpt_t *self)
{
    return self->nentries;
}

uint32_t kvt_ckpt_evictable(const kvt_ckpt_t *self)
{
    return self->lru.count + self->dead.count;
}

void kvt_ckpt_stats(const kvt_ckpt_t *self, kvt_ckpt_stats_t *out)
{
    *out = self->stats;
}
