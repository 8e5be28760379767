/*  kvt_seen — the last N ids seen, in arrival order, with O(1) membership.

    A ring of the ids in arrival order and a hash map over them: adding an
    id to a full set forgets the oldest one. Used wherever a bounded memory
    of settled or accepted items drops a repeat (the worker's accepted item
    ids, the aggregator's tombstones). Not thread-safe: one owner. */
#ifndef KVT_SEEN_H_INCLUDED
#define KVT_SEEN_H_INCLUDED

#include <stdbool.h>
#include <stdint.h>

#include "kvtier/kvt_hash.h"

typedef struct _kvt_seen_t kvt_seen_t;

//  A set that remembers the last `capacity` ids (>= 1). NULL when out of
//  memory.
kvt_seen_t *kvt_seen_new(uint32_t capacity);

//  Destroys the set; NULL-safe, nulls the pointer.
void kvt_seen_destroy(kvt_seen_t **self_p);

//  True when `id` is among the remembered ids.
bool kvt_seen_contains(const kvt_seen_t *self, kvt_hash_t id);

//  Remembers `id` as the newest, forgetting the oldest when the set is full.
//  Returns true when it was new, false when it was already remembered (its
//  place in the arrival order is then unchanged).
bool kvt_seen_add(kvt_seen_t *self, kvt_hash_t id);

//  Ids remembered now (<= capacity).
uint32_t kvt_seen_size(const kvt_seen_t *self);

//  How many ids it remembers at most.
uint32_t kvt_seen_capacity(const kvt_seen_t *self);

#endif
