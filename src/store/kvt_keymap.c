/*  kvt_keymap.c — open-addressing (namespace, key) index; see kvt_keymap.h. */
#include <stdlib.h>

#include "kvt_keymap.h"

static uint32_t s_hash(uint64_t ns, kvt_hash_t key)
{
    //  Keys are already XXH3 outputs; mix the namespace in and fold.
    uint64_t h = key.lo ^ (key.hi * 0x9E3779B97F4A7C15ull) ^ (ns * 0xC2B2AE3D27D4EB4Full);
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDull;
    h ^= h >> 29;
    return (uint32_t)h;
}

static bool s_same(const kvt_keymap_entry_t *e, uint64_t ns, kvt_hash_t key)
{
    return e->ns == ns && e->key.lo == key.lo && e->key.hi == key.hi;
}

int kvt_keymap_init(kvt_keymap_t *self, uint32_t max_keys)
{
    uint64_t size = 16;
    while (size < 2ull * max_keys)
        size <<= 1;
    self->tab = calloc(size, sizeof(kvt_keymap_entry_t));
    if (!self->tab)
        return -1;
    self->mask = (uint32_t)(size - 1);
    self->count = 0;
    self->max = max_keys;
    return 0;
}

void kvt_keymap_fini(kvt_keymap_t *self)
{
    free(self->tab);
    self->tab = NULL;
}

kvt_keymap_entry_t *kvt_keymap_find(const kvt_keymap_t *self, uint64_t ns, kvt_hash_t key)
{
    uint32_t i = s_hash(ns, key) & self->mask;
    while (self->tab[i].used) {
        if (s_same(&self->tab[i], ns, key))
            return &self->tab[i];
        i = (i + 1) & self->mask;
    }
    return NULL;
}

int kvt_keymap_set(kvt_keymap_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind,
                   uint32_t value)
{
    uint32_t i = s_hash(ns, key) & self->mask;
    while (self->tab[i].used) {
        if (s_same(&self->tab[i], ns, key)) {
            self->tab[i].slot[kind - 1] = value;
            return 0;
        }
        i = (i + 1) & self->mask;
    }
    if (self->count >= self->max)
        return -1;
    kvt_keymap_entry_t *e = &self->tab[i];
    *e = (kvt_keymap_entry_t){.ns = ns, .key = key, .used = 1};
    e->slot[kind - 1] = value;
    self->count++;
    return 0;
}

void kvt_keymap_clear(kvt_keymap_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind)
{
    uint32_t i = s_hash(ns, key) & self->mask;
    while (self->tab[i].used && !s_same(&self->tab[i], ns, key))
        i = (i + 1) & self->mask;
    kvt_keymap_entry_t *e = &self->tab[i];
    if (!e->used)
        return;
    e->slot[kind - 1] = 0;
    if (e->slot[0] || e->slot[1] || e->slot[2])
        return;
    //  Backward-shift deletion: pull later members of the probe run into the
    //  hole unless their home lies cyclically in (hole, j].
    uint32_t hole = i;
    uint32_t j = i;
    while (true) {
        j = (j + 1) & self->mask;
        if (!self->tab[j].used)
            break;
        uint32_t home = s_hash(self->tab[j].ns, self->tab[j].key) & self->mask;
        bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
        if (stays)
            continue;
        self->tab[hole] = self->tab[j];
        hole = j;
    }
    self->tab[hole].used = 0;
    self->count--;
}
