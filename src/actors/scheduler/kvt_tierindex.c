/*  kvt_tierindex — see kvt_tierindex.h. */
#include "kvt_tierindex.h"

#include <assert.h>
#include <stdlib.h>

#include "base/kvt_hmap.h"
#include "base/kvt_ilist.h"

struct _kvt_tierindex_t {
    uint32_t capacity;           //  slots
    kvt_hash_t *keys;            //  key per slot
    uint32_t *prev;              //  LRU links
    uint32_t *next;              //  LRU links
    kvt_ilist_t lru;             //  used slots, old → young
    uint32_t *free_slots;        //  unused slots (stack)
    uint32_t nfree;              //  entries in free_slots
    kvt_hmap_t *map;             //  key → slot
    kvt_tierindex_stats_t stats; //  counters
};

kvt_tierindex_t *kvt_tierindex_new(uint32_t capacity)
{
    kvt_tierindex_t *self = calloc(1, sizeof(*self));
    if (!self)
        return NULL;
    self->capacity = capacity;
    uint32_t n = capacity ? capacity : 1;
    self->keys = calloc(n, sizeof(kvt_hash_t));
    self->prev = malloc((size_t)n * sizeof(uint32_t));
    self->next = malloc((size_t)n * sizeof(uint32_t));
    self->free_slots = malloc((size_t)n * sizeof(uint32_t));
    self->map = kvt_hmap_new(n, true);
    if (!self->keys || !self->prev || !self->next || !self->free_slots || !self->map) {
        kvt_tierindex_destroy(&self);
        return NULL;
    }
    kvt_ilist_init(&self->lru);
    for (uint32_t i = 0; i < capacity; i++)
        self->free_slots[i] = capacity - 1 - i;
    self->nfree = capacity;
    return self;
}

void kvt_tierindex_destroy(kvt_tierindex_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kvt_tierindex_t *self = *self_p;
    free(self->keys);
    free(self->prev);
    free(self->next);
    free(self->free_slots);
    kvt_hmap_destroy(&self->map);
    free(self);
    *self_p = NULL;
}

static void s_refresh(kvt_tierindex_t *self, uint32_t slot)
{
    kvt_ilist_remove(&self->lru, self->prev, self->next, slot);
    kvt_ilist_push_tail(&self->lru, self->prev, self->next, slot);
}

uint32_t kvt_tierindex_lookup(kvt_tierindex_t *self, const kvt_hash_t *keys, uint32_t n)
{
    self->stats.lookups++;
    uint32_t hit = 0;
    while (hit < n && kvt_hmap_get(self->map, keys[hit], NULL))
        hit++;
    //  Deepest first: the first key ends up youngest.
    for (uint32_t i = hit; i-- > 0;) {
        uint32_t slot;
        kvt_hmap_get(self->map, keys[i], &slot);
        s_refresh(self, slot);
    }
    self->stats.hit_keys += hit;
    return hit;
}

uint32_t kvt_tierindex_count(const kvt_tierindex_t *self, const kvt_hash_t *keys, uint32_t n)
{
    uint32_t hit = 0;
    while (hit < n && kvt_hmap_get(self->map, keys[hit], NULL))
        hit++;
    return hit;
}

bool kvt_tierindex_contains(const kvt_tierindex_t *self, kvt_hash_t key)
{
    return kvt_hmap_get(self->map, key, NULL);
}

void kvt_tierindex_insert(kvt_tierindex_t *self, kvt_hash_t key)
{
    if (self->capacity == 0)
        return;
    uint32_t slot;
    if (kvt_hmap_get(self->map, key, &slot)) {
        s_refresh(self, slot);
        return;
    }
    if (self->nfree == 0) {
        slot = kvt_ilist_pop_head(&self->lru, self->prev, self->next);
        assert(slot != KVT_ILIST_NONE);
        kvt_hmap_del(self->map, self->keys[slot], NULL);
        self->stats.evicted++;
    } else
        slot = self->free_slots[--self->nfree];
    self->keys[slot] = key;
    int rc = kvt_hmap_put(self->map, key, slot);
    assert(rc == 0);
    (void)rc;
    kvt_ilist_push_tail(&self->lru, self->prev, self->next, slot);
    self->stats.inserted++;
}

bool kvt_tierindex_retract(kvt_tierindex_t *self, kvt_hash_t key)
{
    uint32_t slot;
    if (!kvt_hmap_del(self->map, key, &slot))
        return false;
    kvt_ilist_remove(&self->lru, self->prev, self->next, slot);
    self->free_slots[self->nfree++] = slot;
    self->stats.retracted++;
    return true;
}

uint32_t kvt_tierindex_size(const kvt_tierindex_t *self)
{
    return kvt_hmap_size(self->map);
}

void kvt_tierindex_stats(const kvt_tierindex_t *self, kvt_tierindex_stats_t *out)
{
    *out = self->stats;
}
