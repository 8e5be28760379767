/*  kvt_hmap — the open-addressing hash map of the tree: a (namespace,
    128-bit key) pair to a fixed-size value.

    Linear probing with backward-shift deletion (no tombstones), so lookups
    stay O(1) however many deletes happen. Capacity is a power of two; the
    map doubles when it passes 1/2 load (amortised O(1) insert) unless it was
    created fixed, in which case an insert beyond 1/2 load fails (a map made
    for `expected` entries always takes that many). One slot holds the key,
    the namespace and the value side by side, so a lookup touches one cache
    line. The zero key and namespace 0 are valid (occupancy is tracked
    separately).

    Two spellings over one table: the general one (kvt_hmap_new_values,
    kvt_hmap_find / _insert / _remove: any namespace, a value of
    `value_size` bytes reached by pointer) and the 32-bit one
    (kvt_hmap_new, kvt_hmap_get / _put / _del: namespace 0, a uint32_t
    value). Not thread-safe: each map has one owner. */
#ifndef KVT_HMAP_H_INCLUDED
#define KVT_HMAP_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvtier/kvt_hash.h"

#define KVT_HMAP_VALUE_MAX 64 //  largest value, bytes

typedef struct _kvt_hmap_t kvt_hmap_t;

//  Creates a map sized for `expected` entries with values of `value_size`
//  bytes (1..KVT_HMAP_VALUE_MAX; 8-byte aligned when a multiple of 8, else
//  4-byte aligned). `fixed`: never grows. NULL when out of memory or when
//  value_size is out of range.
kvt_hmap_t *kvt_hmap_new_values(uint32_t expected, bool fixed, size_t value_size);

//  Creates a map with uint32_t values (kvt_hmap_get / _put / _del).
kvt_hmap_t *kvt_hmap_new(uint32_t expected, bool fixed);

//  Destroys the map; NULL-safe, nulls the pointer.
void kvt_hmap_destroy(kvt_hmap_t **self_p);

//  The value of (ns, key), or NULL. The pointer is valid until the next
//  insert or remove.
void *kvt_hmap_find(const kvt_hmap_t *self, uint64_t ns, kvt_hash_t key);

//  The value of (ns, key), creating the entry (value zeroed) when absent;
//  *created (if non-NULL) tells which. NULL when full / out of memory. The
//  pointer is valid until the next insert or remove.
void *kvt_hmap_insert(kvt_hmap_t *self, uint64_t ns, kvt_hash_t key, bool *created);

//  Removes (ns, key); true when it was present.
bool kvt_hmap_remove(kvt_hmap_t *self, uint64_t ns, kvt_hash_t key);

//  Finds key (namespace 0); returns true and sets *value when present.
bool kvt_hmap_get(const kvt_hmap_t *self, kvt_hash_t key, uint32_t *value);

//  Inserts or overwrites key (namespace 0). 0, or -1 when full / out of
//  memory.
int kvt_hmap_put(kvt_hmap_t *self, kvt_hash_t key, uint32_t value);

//  Removes key (namespace 0); true when it was present (and sets *value if
//  non-NULL).
bool kvt_hmap_del(kvt_hmap_t *self, kvt_hash_t key, uint32_t *value);

//  Number of entries.
uint32_t kvt_hmap_size(const kvt_hmap_t *self);

//  Removes every entry (keeps the capacity).
void kvt_hmap_clear(kvt_hmap_t *self);

//  Iteration over a uint32_t map's slots: *cursor starts at 0; returns
//  false at the end. The map must not be modified during the iteration.
bool kvt_hmap_next(const kvt_hmap_t *self, uint32_t *cursor, kvt_hash_t *key, uint32_t *value);

//  Key for a 64-bit id.
static inline kvt_hash_t kvt_hmap_key64(uint64_t id)
{
    kvt_hash_t k = {0, id};
    return k;
}

#endif
