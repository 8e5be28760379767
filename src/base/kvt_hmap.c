/*  kvt_hmap — see kvt_hmap.h. */
#include "kvt_hmap.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

//  The head of a slot; the value follows at voff (28 or 32). Fields are
//  written one by one, never by struct assignment: a 4-byte-aligned value
//  lives in what would be the struct's tail padding.
typedef struct {
    kvt_hash_t key; //  key
    uint64_t ns;    //  namespace
    uint32_t used;  //  1 when the slot holds an entry
} s_slot_t;

struct _kvt_hmap_t {
    unsigned char *tab; //  mask + 1 slots of `stride` bytes
    size_t stride;      //  bytes per slot (a multiple of 8)
    size_t voff;        //  offset of the value in a slot
    size_t vsize;       //  value bytes
    uint32_t mask;      //  capacity - 1 (capacity is a power of two)
    uint32_t size;      //  entries held
    bool fixed;         //  never grows
};

static inline s_slot_t *s_at(const kvt_hmap_t *self, uint32_t i)
{
    return (s_slot_t *)(self->tab + (size_t)i * self->stride);
}

//  Copies a whole slot. Slots are a few 8-byte words: a short loop the
//  compiler keeps inline beats a call to memcpy with a run-time size.
static inline void s_copy_slot(const kvt_hmap_t *self, s_slot_t *to, const s_slot_t *from)
{
    uint64_t *d = (uint64_t *)(void *)to;
    const uint64_t *f = (const uint64_t *)(const void *)from;
    for (size_t w = 0; w < self->stride / 8; w++)
        d[w] = f[w];
}

static inline uint32_t s_home(uint64_t ns, kvt_hash_t key, uint32_t mask)
{
    //  Keys are XXH3 outputs already; fold in the namespace and mix.
    uint64_t x = key.lo ^ (key.hi * 0x9E3779B97F4A7C15ull) ^ (ns * 0xC2B2AE3D27D4EB4Full);
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDull;
    x ^= x >> 33;
    return (uint32_t)x & mask;
}

static inline bool s_same(const s_slot_t *s, uint64_t ns, kvt_hash_t key)
{
    return s->key.lo == key.lo && s->key.hi == key.hi && s->ns == ns;
}

static int s_alloc(kvt_hmap_t *self, uint32_t capacity)
{
    self->tab = calloc(capacity, self->stride);
    if (!self->tab)
        return -1;
    self->mask = capacity - 1;
    self->size = 0;
    return 0;
}

kvt_hmap_t *kvt_hmap_new_values(uint32_t expected, bool fixed, size_t value_size)
{
    if (value_size == 0 || value_size > KVT_HMAP_VALUE_MAX)
        return NULL;
    uint32_t capacity = 16;
    while (capacity < 0x80000000u && capacity < (uint64_t)expected * 2 + 2)
        capacity <<= 1;
    kvt_hmap_t *self = calloc(1, sizeof(*self));
    if (!self)
        return NULL;
    self->fixed = fixed;
    self->vsize = value_size;
    self->voff = value_size % 8 == 0 ? sizeof(s_slot_t) : offsetof(s_slot_t, used) + 4;
    self->stride = (self->voff + value_size + 7) & ~(size_t)7;
    if (s_alloc(self, capacity) != 0) {
        free(self);
        return NULL;
    }
    return self;
}

kvt_hmap_t *kvt_hmap_new(uint32_t expected, bool fixed)
{
    return kvt_hmap_new_values(expected, fixed, sizeof(uint32_t));
}

void kvt_hmap_destroy(kvt_hmap_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kvt_hmap_t *self = *self_p;
    free(self->tab);
    free(self);
    *self_p = NULL;
}

//  The index of (ns, key)'s slot, or of the empty slot that ends its probe
//  run; *found tells which.
static inline uint32_t s_probe(const kvt_hmap_t *self, uint64_t ns, kvt_hash_t key, bool *found)
{
    uint32_t i = s_home(ns, key, self->mask);
    while (true) {
        const s_slot_t *s = s_at(self, i);
        if (!s->used || s_same(s, ns, key)) {
            *found = s->used != 0;
            return i;
        }
        i = (i + 1) & self->mask;
    }
}

void *kvt_hmap_find(const kvt_hmap_t *self, uint64_t ns, kvt_hash_t key)
{
    bool found;
    uint32_t i = s_probe(self, ns, key, &found);
    return found ? (unsigned char *)s_at(self, i) + self->voff : NULL;
}

static int s_grow(kvt_hmap_t *self)
{
    kvt_hmap_t old = *self;
    uint32_t capacity = (self->mask + 1) * 2;
    if (capacity == 0 || s_alloc(self, capacity) != 0) {
        *self = old;
        return -1;
    }
    for (uint32_t i = 0; i <= old.mask; i++) {
        s_slot_t *from = s_at(&old, i);
        if (!from->used)
            continue;
        bool found;
        s_copy_slot(self, s_at(self, s_probe(self, from->ns, from->key, &found)), from);
        self->size++;
    }
    free(old.tab);
    return 0;
}

void *kvt_hmap_insert(kvt_hmap_t *self, uint64_t ns, kvt_hash_t key, bool *created)
{
    bool found;
    uint32_t i = s_probe(self, ns, key, &found);
    if (created)
        *created = !found;
    if (found)
        return (unsigned char *)s_at(self, i) + self->voff;
    if ((uint64_t)(self->size + 1) * 2 > (uint64_t)self->mask + 1) {
        if (self->fixed || s_grow(self) != 0)
            return NULL;
        i = s_probe(self, ns, key, &found);
    }
    s_slot_t *s = s_at(self, i);
    s->key = key;
    s->ns = ns;
    s->used = 1;
    //  The value and the slot's tail padding, 4-byte words from voff.
    uint32_t *value = (uint32_t *)(void *)((unsigned char *)s + self->voff);
    for (size_t w = 0; w < (self->stride - self->voff) / 4; w++)
        value[w] = 0;
    self->size++;
    return value;
}

//  Empties slot `hole`: later members of its probe run move into the hole
//  unless their home lies cyclically in (hole, j] (backward shift, so no
//  tombstones are left).
static void s_erase(kvt_hmap_t *self, uint32_t hole)
{
    uint32_t j = hole;
    while (true) {
        j = (j + 1) & self->mask;
        s_slot_t *sj = s_at(self, j);
        if (!sj->used)
            break;
        uint32_t home = s_home(sj->ns, sj->key, self->mask);
        bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
        if (stays)
            continue;
        s_copy_slot(self, s_at(self, hole), sj);
        hole = j;
    }
    s_at(self, hole)->used = 0;
    self->size--;
}

bool kvt_hmap_remove(kvt_hmap_t *self, uint64_t ns, kvt_hash_t key)
{
    bool found;
    uint32_t i = s_probe(self, ns, key, &found);
    if (found)
        s_erase(self, i);
    return found;
}

bool kvt_hmap_get(const kvt_hmap_t *self, kvt_hash_t key, uint32_t *value)
{
    assert(self->vsize == sizeof(uint32_t));
    const void *v = kvt_hmap_find(self, 0, key);
    if (!v)
        return false;
    if (value)
        memcpy(value, v, sizeof(uint32_t));
    return true;
}

int kvt_hmap_put(kvt_hmap_t *self, kvt_hash_t key, uint32_t value)
{
    assert(self->vsize == sizeof(uint32_t));
    void *v = kvt_hmap_insert(self, 0, key, NULL);
    if (!v)
        return -1;
    memcpy(v, &value, sizeof(uint32_t));
    return 0;
}

bool kvt_hmap_del(kvt_hmap_t *self, kvt_hash_t key, uint32_t *value)
{
    assert(self->vsize == sizeof(uint32_t));
    bool found;
    uint32_t i = s_probe(self, 0, key, &found);
    if (!found)
        return false;
    if (value)
        memcpy(value, (unsigned char *)s_at(self, i) + self->voff, sizeof(uint32_t));
    s_erase(self, i);
    return true;
}

uint32_t kvt_hmap_size(const kvt_hmap_t *self)
{
    return self->size;
}

void kvt_hmap_clear(kvt_hmap_t *self)
{
    for (uint32_t i = 0; i <= self->mask; i++)
        s_at(self, i)->used = 0;
    self->size = 0;
}

bool kvt_hmap_next(const kvt_hmap_t *self, uint32_t *cursor, kvt_hash_t *key, uint32_t *value)
{
    assert(self->vsize == sizeof(uint32_t));
    for (uint32_t i = *cursor; i <= self->mask; i++) {
        const s_slot_t *s = s_at(self, i);
        if (s->used) {
            if (key)
                *key = s->key;
            if (value)
                memcpy(value, (const unsigned char *)s + self->voff, sizeof(uint32_t));
            *cursor = i + 1;
            return true;
        }
    }
    *cursor = self->mask + 1;
    return false;
}
