/*  kvt_blockmgr — see kvt_blockmgr.h. */
#include "kvt_blockmgr.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "base/kvt_hmap.h"
#include "base/kvt_ilist.h"

#define S_CACHED 0x1 //  block is indexed by its hash
#define S_LOW    0x2 //  free and cached, in the low LRU (above its last checkpoint)

struct _kvt_blockmgr_t {
    uint32_t nblocks;           //  blocks managed
    uint32_t block_size;        //  tokens per block
    uint32_t *refs;             //  reference count per block
    uint8_t *flags;             //  S_CACHED
    kvt_hash_t *hash;           //  prefix hash of a cached block
    uint32_t *tokens;           //  block_size tokens per cached block (collision check)
    uint32_t *prev;             //  LRU links
    uint32_t *next;             //  LRU links
    kvt_ilist_t lru;            //  cached blocks with no reference, old → young
    kvt_ilist_t low;            //  the same, released above their last checkpoint
    uint64_t *stamp;            //  recency stamp of a block in lru or low
    uint64_t clock;             //  the recency clock (kvt_blockmgr_tick)
    uint32_t *free_stack;       //  uncached free blocks
    uint32_t nfree;             //  entries in free_stack
    uint32_t *held;             //  blocks withheld for checkpoints (a stack)
    uint32_t nheld;             //  entries in held
    kvt_blockmgr_peer_t peer;   //  the checkpoint side (all NULL: none)
    uint32_t in_use;            //  blocks with refs > 0
    kvt_hmap_t *index;          //  hash → block for cached blocks
    kvt_blockmgr_stats_t stats; //  counters
};

kvt_blockmgr_t *kvt_blockmgr_new(uint32_t nblocks, uint32_t block_size)
{
    assert(nblocks > 0 && block_size > 0);
    kvt_blockmgr_t *self = calloc(1, sizeof(*self));
    if (!self)
        return NULL;
    self->nblocks = nblocks;
    self->block_size = block_size;
    self->refs = calloc(nblocks, sizeof(uint32_t));
    self->flags = calloc(nblocks, 1);
    self->hash = calloc(nblocks, sizeof(kvt_hash_t));
    self->tokens = calloc((size_t)nblocks * block_size, sizeof(uint32_t));
    self->prev = malloc((size_t)nblocks * sizeof(uint32_t));
    self->next = malloc((size_t)nblocks * sizeof(uint32_t));
    self->free_stack = malloc((size_t)nblocks * sizeof(uint32_t));
    self->held = malloc((size_t)nblocks * sizeof(uint32_t));
    self->stamp = calloc(nblocks, sizeof(uint64_t));
    self->index = kvt_hmap_new(nblocks, true);
    if (!self->refs || !self->flags || !self->hash || !self->tokens || !self->prev || !self->next ||
        !self->free_stack || !self->held || !self->stamp || !self->index) {
        kvt_blockmgr_destroy(&self);
        return NULL;
    }
    kvt_ilist_init(&self->lru);
    kvt_ilist_init(&self->low);
    //  Lowest ids on top of the stack, so allocation order is predictable.
    for (uint32_t i = 0; i < nblocks; i++) {
        self->free_stack[i] = nblocks - 1 - i;
        self->prev[i] = self->next[i] = KVT_ILIST_NONE;
    }
    self->nfree = nblocks;
    return self;
}

void kvt_blockmgr_destroy(kvt_blockmgr_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kvt_blockmgr_t *self = *self_p;
    free(self->refs);
    free(self->flags);
    free(self->hash);
    free(self->tokens);
    free(self->prev);
    free(self->next);
    free(self->free_stack);
    free(self->held);
    free(self->stamp);
    kvt_hmap_destroy(&self->index);
    free(self);
    *self_p = NULL;
}

void kvt_blockmgr_set_peer(kvt_blockmgr_t *self, const kvt_blockmgr_peer_t *peer)
{
    self->peer = *peer;
}

uint64_t kvt_blockmgr_tick(kvt_blockmgr_t *self)
{
    return ++self->clock;
}

uint32_t kvt_blockmgr_available(const kvt_blockmgr_t *self)
{
    uint32_t peer = self->peer.evictable ? self->peer.evictable(self->peer.arg) : 0;
    return self->nfree + self->lru.count + self->low.count + peer;
}

//  Evicts the cached free block b from list l: it leaves the index, and a
//  checkpoint at its hash loses its KV.
static void s_evict_block(kvt_blockmgr_t *self, kvt_ilist_t *l, uint32_t b)
{
    kvt_ilist_remove(l, self->prev, self->next, b);
    kvt_hmap_del(self->index, self->hash[b], NULL);
    self->flags[b] = 0;
    self->stats.evicted++;
    if (l == &self->low)
        self->stats.evicted_low++;
    if (self->peer.gone)
        self->peer.gone(self->peer.arg, self->hash[b]);
}

//  One block for an allocation or a withhold, by the budget's rule (see
//  the header); KVT_ILIST_NONE when nothing can be freed.
static uint32_t s_take(kvt_blockmgr_t *self)
{
    for (;;) {
        if (self->nfree > 0)
            return self->free_stack[--self->nfree];
        uint64_t ps = 0;
        bool gone = false;
        bool pv = self->peer.victim && self->peer.victim(self->peer.arg, &ps, &gone);
        kvt_ilist_t *l = self->low.count ? &self->low : self->lru.count ? &self->lru : NULL;
        if (pv && (gone || !l || (l == &self->lru && ps < self->stamp[l->head]))) {
            self->peer.evict(self->peer.arg); //  its blocks land on the free stack
            self->stats.peer_evictions++;
            continue;
        }
        if (!l)
            return KVT_ILIST_NONE;
        uint32_t b = l->head;
        s_evict_block(self, l, b);
        return b;
    }
}

int kvt_blockmgr_withhold(kvt_blockmgr_t *self, uint32_t n)
{
    if (kvt_blockmgr_available(self) < n)
        return -1;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t b = s_take(self);
        assert(b != KVT_ILIST_NONE); //  available counted it
        self->held[self->nheld++] = b;
    }
    self->stats.withheld += n;
    return 0;
}

void kvt_blockmgr_unwithhold(kvt_blockmgr_t *self, uint32_t n)
{
    assert(n <= self->nheld);
    for (uint32_t i = 0; i < n; i++)
        self->free_stack[self->nfree++] = self->held[--self->nheld];
    self->stats.withheld -= n;
}

uint32_t kvt_blockmgr_total(const kvt_blockmgr_t *self)
{
    return self->nblocks;
}

uint32_t kvt_blockmgr_match(kvt_blockmgr_t *self, const kvt_hash_t *hashes, const uint32_t *tokens,
                            uint32_t n, uint32_t *out)
{
    uint32_t i = 0;
    for (; i < n; i++) {
        uint32_t b;
        if (!kvt_hmap_get(self->index, hashes[i], &b))
            break;
        if (memcmp(self->tokens + (size_t)b * self->block_size,
                   tokens + (size_t)i * self->block_size,
                   (size_t)self->block_size * sizeof(uint32_t)) != 0) {
            self->stats.token_mismatch++;
            break;
        }
        out[i] = b;
    }
    return i;
}

void kvt_blockmgr_count_hit(kvt_blockmgr_t *self, uint32_t blocks)
{
    self->stats.hit_blocks += blocks;
}

void kvt_blockmgr_ref(kvt_blockmgr_t *self, uint32_t block)
{
    assert(block < self->nblocks);
    if (self->refs[block] == 0) {
        //  Only cached blocks can be referenced from free: they are in the LRU.
        assert(self->flags[block] & S_CACHED);
        kvt_ilist_remove(self->flags[block] & S_LOW ? &self->low : &self->lru, self->prev,
                         self->next, block);
        self->flags[block] &= (uint8_t)~S_LOW;
        self->in_use++;
    }
    self->refs[block]++;
}

static void s_unref(kvt_blockmgr_t *self, uint32_t block, bool low)
{
    assert(block < self->nblocks && self->refs[block] > 0);
    if (--self->refs[block] > 0)
        return;
    self->in_use--;
    if (self->flags[block] & S_CACHED) {
        self->stamp[block] = ++self->clock;
        if (low)
            self->flags[block] |= S_LOW;
        kvt_ilist_push_tail(low ? &self->low : &self->lru, self->prev, self->next, block);
    } else
        self->free_stack[self->nfree++] = block;
}

void kvt_blockmgr_unref(kvt_blockmgr_t *self, uint32_t block)
{
    s_unref(self, block, false);
}

void kvt_blockmgr_unref_low(kvt_blockmgr_t *self, uint32_t block)
{
    s_unref(self, block, true);
}

int kvt_blockmgr_alloc(kvt_blockmgr_t *self, uint32_t n, uint32_t *out)
{
    if (kvt_blockmgr_available(self) < n)
        return -1;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t b = s_take(self);
        assert(b != KVT_ILIST_NONE); //  available counted it
        self->refs[b] = 1;
        self->in_use++;
        out[i] = b;
    }
    self->stats.allocated += n;
    return 0;
}

int kvt_blockmgr_register(kvt_blockmgr_t *self, uint32_t block, kvt_hash_t hash,
                          const uint32_t *tokens)
{
    assert(block < self->nblocks && self->refs[block] > 0);
    if (self->flags[block] & S_CACHED)
        return kvt_hash_eq(self->hash[block], hash) ? 0 : 1;
    if (kvt_hmap_get(self->index, hash, NULL)) {
        self->stats.duplicate_regs++;
        return 1;
    }
    int rc = kvt_hmap_put(self->index, hash, block);
    assert(rc == 0); //  the index holds at most nblocks entries
    (void)rc;
    self->flags[block] |= S_CACHED;
    self->hash[block] = hash;
    memcpy(self->tokens + (size_t)block * self->block_size, tokens,
           (size_t)self->block_size * sizeof(uint32_t));
    self->stats.registered++;
    return 0;
}

uint32_t kvt_blockmgr_refs(const kvt_blockmgr_t *self, uint32_t block)
{
    assert(block < self->nblocks);
    return self->refs[block];
}

uint32_t kvt_blockmgr_in_use(const kvt_blockmgr_t *self)
{
    return self->in_use;
}

void kvt_blockmgr_stats(const kvt_blockmgr_t *self, kvt_blockmgr_stats_t *out)
{
    *out = self->stats;
}
