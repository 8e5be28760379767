/*  kvt_tierindex — the scheduler's view of which chunk keys the tier holds.

    A key enters when its save reached quorum (every rank stored it) and
    leaves when a load reports it missing or when the view's own LRU, sized
    like the rank pools, pushes it out. The ranks' pools evict on their own,
    so the view can be stale in one direction only (it may advertise a chunk
    a rank has lost): a load of such a chunk fails on that rank, the verdict
    is failed (failure-dominant), the request retreats and recomputes, and
    the key is retracted. It never causes wrong bytes: those can only come
    from a tier, and the worker checks every chunk's key before it copies.
    Lookup refreshes deepest-first so a shared prefix stays younger than the
    suffixes behind it, like the pools do. O(1) per key. */
#ifndef KVT_TIERINDEX_H_INCLUDED
#define KVT_TIERINDEX_H_INCLUDED

#include <stdbool.h>
#include <stdint.h>

#include "kvtier/kvt_msg.h"

typedef struct _kvt_tierindex_t kvt_tierindex_t;

typedef struct {
    uint64_t inserted;  //  keys indexed after a save quorum
    uint64_t evicted;   //  keys pushed out by the view's LRU
    uint64_t retracted; //  keys removed after a load reported them missing
    uint64_t lookups;   //  prefix lookups
    uint64_t hit_keys;  //  keys found by lookups
} kvt_tierindex_stats_t;

//  capacity: chunks the view holds (0 = no tier: nothing is ever indexed).
kvt_tierindex_t *kvt_tierindex_new(uint32_t capacity);
void kvt_tierindex_destroy(kvt_tierindex_t **self_p);

//  Number of leading keys[0..n) present; refreshes them deepest first.
uint32_t kvt_tierindex_lookup(kvt_tierindex_t *self, const kvt_hash_t *keys, uint32_t n);

//  Number of leading keys[0..n) present; pure (no refresh, no counters).
uint32_t kvt_tierindex_count(const kvt_tierindex_t *self, const kvt_hash_t *keys, uint32_t n);

bool kvt_tierindex_contains(const kvt_tierindex_t *self, kvt_hash_t key);

//  Indexes key at the young end (refreshes it when present).
void kvt_tierindex_insert(kvt_tierindex_t *self, kvt_hash_t key);

//  Removes key; true when it was present.
bool kvt_tierindex_retract(kvt_tierindex_t *self, kvt_hash_t key);

uint32_t kvt_tierindex_size(const kvt_tierindex_t *self);
void kvt_tierindex_stats(const kvt_tierindex_t *self, kvt_tierindex_stats_t *out);

#endif
