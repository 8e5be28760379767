/*  kvt_keymap.c — the store's (namespace, key) index over kvt_hmap; see
    kvt_keymap.h. */
#include "kvt_keymap.h"

int kvt_keymap_init(kvt_keymap_t *self, uint32_t max_keys)
{
    self->map = kvt_hmap_new_values(max_keys, true, sizeof(kvt_keymap_entry_t));
    self->max = max_keys;
    return self->map ? 0 : -1;
}

void kvt_keymap_fini(kvt_keymap_t *self)
{
    kvt_hmap_destroy(&self->map);
}

int kvt_keymap_set(kvt_keymap_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind,
                   uint32_t value)
{
    //  One probe: insert while below max, only look up at max.
    kvt_keymap_entry_t *e = kvt_hmap_size(self->map) < self->max
                                ? kvt_hmap_insert(self->map, ns, key, NULL)
                                : kvt_hmap_find(self->map, ns, key);
    if (!e)
        return -1;
    e->slot[kind - 1] = value;
    return 0;
}

void kvt_keymap_clear(kvt_keymap_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind)
{
    kvt_keymap_entry_t *e = kvt_hmap_find(self->map, ns, key);
    if (!e)
        return;
    e->slot[kind - 1] = 0;
    if (!e->slot[0] && !e->slot[1] && !e->slot[2])
        kvt_hmap_remove(self->map, ns, key);
}
