/*  kvt_ckpt — see kvt_ckpt.h. */
#include "kvt_ckpt.h"

#include <assert.h>
#include <stdlib.h>

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
    uint64_t *stamp;              //  recency stamp of an entry in lru
    uint64_t own_clock;           //  the recency clock when not shared
    kvt_ckpt_tick_fn *tick;       //  shared: the block manager's clock (NULL: own_clock)
    kvt_ckpt_release_fn *release; //  shared: an entry went (NULL: not shared)
    void *share_arg;              //  argument of tick and release
    uint32_t *free_stack;         //  free entries
    uint32_t nfree;               //  entries in free_stack
    kvt_hmap_t *index;            //  hash → entry (reserved or valid)
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
    self->stamp = calloc(checkpoints, sizeof(uint64_t));
    self->prev = malloc((size_t)checkpoints * sizeof(uint32_t));
    self->next = malloc((size_t)checkpoints * sizeof(uint32_t));
    self->free_stack = malloc((size_t)checkpoints * sizeof(uint32_t));
    self->index = kvt_hmap_new(checkpoints, true);
    if (!self->slot_used || !self->slot_free || !self->state || !self->pins || !self->hash ||
        !self->src || !self->gone || !self->stamp || !self->prev || !self->next ||
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
    free(self->stamp);
    free(self->prev);
    free(self->next);
    free(self->free_stack);
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

//  An unpinned valid entry joins the young end of its list.
static void s_push(kvt_ckpt_t *self, uint32_t e)
{
    self->stamp[e] = self->tick ? self->tick(self->share_arg) : ++self->own_clock;
    kvt_ilist_push_tail(s_list(self, e), self->prev, self->next, e);
}

static void s_pin(kvt_ckpt_t *self, uint32_t e)
{
    if (self->pins[e]++ == 0) {
        self->stats.pinned_entries++;
        if (self->state[e] == E_VALID)
            kvt_ilist_remove(s_list(self, e), self->prev, self->next, e);
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

void kvt_ckpt_evict_one(kvt_ckpt_t *self)
{
    kvt_ilist_t *l = self->dead.count ? &self->dead : &self->lru;
    uint32_t e = kvt_ilist_pop_head(l, self->prev, self->next);
    assert(e != KVT_ILIST_NONE); //  the caller asked kvt_ckpt_victim
    if (l == &self->dead)
        self->stats.evicted_gone++;
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
        kvt_ilist_remove(&self->lru, self->prev, self->next, e);
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
        kvt_ilist_remove(&self->dead, self->prev, self->next, e);
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
            kvt_ilist_remove(&self->lru, self->prev, self->next, e);
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
