/*  kvt_keymap.h — the store's index from (namespace, key) to one slot per
    object kind (private to src/store): a fixed-capacity kvt_hmap whose
    value is the three per-kind slots, so a lookup for any candidate kind
    is one probe. An entry exists while any of its slots is set. All memory
    is allocated at init. */
#ifndef KVT_KEYMAP_H_INCLUDED
#define KVT_KEYMAP_H_INCLUDED

#include "base/kvt_hmap.h"
#include "kvt_store_int.h"

typedef struct {
    uint32_t slot[3]; //  per kind (kind - 1): an owner's index + 1, 0 = none
} kvt_keymap_entry_t;

typedef struct {
    kvt_hmap_t *map; //  (ns, key) → kvt_keymap_entry_t
    uint32_t max;    //  most keys ever held
} kvt_keymap_t;

//  Sizes the index for max_keys keys. 0 or -1 (out of memory).
int kvt_keymap_init(kvt_keymap_t *self, uint32_t max_keys);
void kvt_keymap_fini(kvt_keymap_t *self);

//  The entry for (ns, key), or NULL. The pointer is valid until the next
//  set or clear.
static inline kvt_keymap_entry_t *kvt_keymap_find(const kvt_keymap_t *self, uint64_t ns,
                                                  kvt_hash_t key)
{
    return kvt_hmap_find(self->map, ns, key);
}

//  Sets slot `kind` of (ns, key) to value (an index + 1), creating the entry.
//  -1 if the index already holds max keys.
int kvt_keymap_set(kvt_keymap_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind,
                   uint32_t value);

//  Clears slot `kind` of (ns, key); deletes the entry when no slot is left.
void kvt_keymap_clear(kvt_keymap_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind);

#endif
