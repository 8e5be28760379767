/*  kvt_keymap.h — fixed-capacity open-addressing index from (namespace, key)
    to one slot per object kind (private to src/store). Linear probing with
    backward-shift deletion, so there are no tombstones and a lookup stays
    O(1) however many inserts and deletes have happened. All memory is
    allocated at init. */
#ifndef KVT_KEYMAP_H_INCLUDED
#define KVT_KEYMAP_H_INCLUDED

#include "kvt_store_int.h"

typedef struct {
    uint64_t ns;      //  namespace
    kvt_hash_t key;   //  prefix hash
    uint32_t slot[3]; //  per kind (kind - 1): an owner's index + 1, 0 = none
    uint32_t used;    //  1 if this table entry is occupied
} kvt_keymap_entry_t;

typedef struct {
    kvt_keymap_entry_t *tab; //  2^k entries
    uint32_t mask;           //  2^k - 1
    uint32_t count;          //  occupied entries
    uint32_t max;            //  most keys ever held (half the table or less)
} kvt_keymap_t;

//  Sizes the table for max_keys keys. 0 or -1 (out of memory).
int kvt_keymap_init(kvt_keymap_t *self, uint32_t max_keys);
void kvt_keymap_fini(kvt_keymap_t *self);

//  The entry for (ns, key), or NULL. The pointer is valid until the next
//  insert or delete.
kvt_keymap_entry_t *kvt_keymap_find(const kvt_keymap_t *self, uint64_t ns, kvt_hash_t key);

//  Sets slot `kind` of (ns, key) to value (an index + 1), creating the entry.
//  -1 if the table already holds max keys.
int kvt_keymap_set(kvt_keymap_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind,
                   uint32_t value);

//  Clears slot `kind` of (ns, key); deletes the entry when no slot is left.
void kvt_keymap_clear(kvt_keymap_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind);

#endif
