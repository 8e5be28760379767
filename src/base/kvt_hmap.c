/*  kvt_hmap — see kvt_hmap.h. */
#include "kvt_hmap.h"

#include <stdlib.h>
#include <string.h>

struct _kvt_hmap_t {
    kvt_hash_t *keys; //  slot keys
    uint32_t *values; //  slot values
    uint8_t *used;    //  1 when the slot holds an entry
    uint32_t mask;    //  capacity - 1 (capacity is a power of two)
    uint32_t size;    //  entries held
    bool fixed;       //  never grows
};

static uint32_t s_slot(kvt_hash_t key, uint32_t mask)
{
    uint64_t x = key.lo ^ (key.hi * 0x9E3779B97F4A7C15ull);
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDull;
    x ^= x >> 33;
    return (uint32_t)x & mask;
}

static int s_alloc(kvt_hmap_t *self, uint32_t capacity)
{
    self->keys = malloc((size_t)capacity * sizeof(kvt_hash_t));
    self->values = malloc((size_t)capacity * sizeof(uint32_t));
    self->used = calloc(capacity, 1);
    if (!self->keys || !self->values || !self->used) {
        free(self->keys);
        free(self->values);
        free(self->used);
        return -1;
    }
    self->mask = capacity - 1;
    self->size = 0;
    return 0;
}

kvt_hmap_t *kvt_hmap_new(uint32_t expected, bool fixed)
{
    uint32_t capacity = 16;
    while (capacity < 0x80000000u && capacity < (uint64_t)expected * 2 + 2)
        capacity <<= 1;
    kvt_hmap_t *self = calloc(1, sizeof(*self));
    if (!self)
        return NULL;
    self->fixed = fixed;
    if (s_alloc(self, capacity) != 0) {
        free(self);
        return NULL;
    }
    return self;
}

void kvt_hmap_destroy(kvt_hmap_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kvt_hmap_t *self = *self_p;
    free(self->keys);
    free(self->values);
    free(self->used);
    free(self);
    *self_p = NULL;
}

static bool s_find(const kvt_hmap_t *self, kvt_hash_t key, uint32_t *slot)
{
    uint32_t i = s_slot(key, self->mask);
    while (self->used[i]) {
        if (kvt_hash_eq(self->keys[i], key)) {
            *slot = i;
            return true;
        }
        i = (i + 1) & self->mask;
    }
    *slot = i;
    return false;
}

bool kvt_hmap_get(const kvt_hmap_t *self, kvt_hash_t key, uint32_t *value)
{
    uint32_t slot;
    if (!s_find(self, key, &slot))
        return false;
    if (value)
        *value = self->values[slot];
    return true;
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
        if (!old.used[i])
            continue;
        uint32_t slot;
        s_find(self, old.keys[i], &slot);
        self->used[slot] = 1;
        self->keys[slot] = old.keys[i];
        self->values[slot] = old.values[i];
        self->size++;
    }
    free(old.keys);
    free(old.values);
    free(old.used);
    return 0;
}

int kvt_hmap_put(kvt_hmap_t *self, kvt_hash_t key, uint32_t value)
{
    uint32_t slot;
    if (s_find(self, key, &slot)) {
        self->values[slot] = value;
        return 0;
    }
    if ((uint64_t)(self->size + 1) * 2 > (uint64_t)self->mask + 1) {
        if (self->fixed || s_grow(self) != 0)
            return -1;
        s_find(self, key, &slot);
    }
    self->used[slot] = 1;
    self->keys[slot] = key;
    self->values[slot] = value;
    self->size++;
    return 0;
}

bool kvt_hmap_del(kvt_hmap_t *self, kvt_hash_t key, uint32_t *value)
{
    uint32_t slot;
    if (!s_find(self, key, &slot))
        return false;
    if (value)
        *value = self->values[slot];
    //  Backward-shift: move later members of the probe run into the hole
    //  when their home slot does not lie cyclically in (hole, j].
    uint32_t hole = slot;
    uint32_t j = slot;
    while (true) {
        j = (j + 1) & self->mask;
        if (!self->used[j])
            break;
        uint32_t home = s_slot(self->keys[j], self->mask);
        bool in_between = (hole <= j) ? (hole < home && home <= j) : (hole < home || home <= j);
        if (in_between)
            continue;
        self->keys[hole] = self->keys[j];
        self->values[hole] = self->values[j];
        hole = j;
    }
    self->used[hole] = 0;
    self->size--;
    return true;
}

uint32_t kvt_hmap_size(const kvt_hmap_t *self)
{
    return self->size;
}

void kvt_hmap_clear(kvt_hmap_t *self)
{
    memset(self->used, 0, (size_t)self->mask + 1);
    self->size = 0;
}

bool kvt_hmap_next(const kvt_hmap_t *self, uint32_t *cursor, kvt_hash_t *key, uint32_t *value)
{
    for (uint32_t i = *cursor; i <= self->mask; i++) {
        if (self->used[i]) {
            if (key)
                *key = self->keys[i];
            if (value)
                *value = self->values[i];
            *cursor = i + 1;
            return true;
        }
    }
    *cursor = self->mask + 1;
    return false;
}
