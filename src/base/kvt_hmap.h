/*  kvt_hmap — open-addressing map from a 128-bit key to a 32-bit value.

    Linear probing with backward-shift deletion (no tombstones), so lookups
    stay O(1) however many deletes happen. Capacity is a power of two; the
    map doubles when it passes 1/2 load (amortised O(1) insert) unless it was
    created fixed, in which case an insert into a full map fails. The zero key
    is a valid key (occupancy is tracked separately). Not thread-safe: each
    map has one owner. */
#ifndef KVT_HMAP_H_INCLUDED
#define KVT_HMAP_H_INCLUDED

#include <stdbool.h>
#include <stdint.h>

#include "kvtier/kvt_hash.h"

typedef struct _kvt_hmap_t kvt_hmap_t;

//  Creates a map sized for `expected` entries. `fixed`: never grows (an
//  insert beyond 1/2 load fails). NULL when out of memory.
kvt_hmap_t *kvt_hmap_new(uint32_t expected, bool fixed);

//  Destroys the map; NULL-safe, nulls the pointer.
void kvt_hmap_destroy(kvt_hmap_t **self_p);

//  Finds key; returns true and sets *value when present.
bool kvt_hmap_get(const kvt_hmap_t *self, kvt_hash_t key, uint32_t *value);

//  Inserts or overwrites key. Returns 0, or -1 when full / out of memory.
int kvt_hmap_put(kvt_hmap_t *self, kvt_hash_t key, uint32_t value);

//  Removes key; returns true when it was present (and sets *value if non-NULL).
bool kvt_hmap_del(kvt_hmap_t *self, kvt_hash_t key, uint32_t *value);

//  Number of entries.
uint32_t kvt_hmap_size(const kvt_hmap_t *self);

//  Removes every entry (keeps the capacity).
void kvt_hmap_clear(kvt_hmap_t *self);

//  Iteration over slots: *cursor starts at 0; returns false at the end.
//  The map must not be modified during the iteration.
bool kvt_hmap_next(const kvt_hmap_t *self, uint32_t *cursor, kvt_hash_t *key, uint32_t *value);

//  Key for a 64-bit id.
static inline kvt_hash_t kvt_hmap_key64(uint64_t id)
{
    kvt_hash_t k = {0, id};
    return k;
}

#endif
