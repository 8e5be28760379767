/*  kvt_extent.c — segregated-fit arena allocator; see kvt_extent.h. */
#include <assert.h>
#include <stdlib.h>

#include "kvt_extent.h"

#define S_BIN_SCAN 16 //  extents examined in the request's own bin before moving up

static unsigned s_bin(uint64_t len)
{
    return 63u - (unsigned)__builtin_clzll(len);
}

static void s_bin_insert(kvt_extents_t *self, uint32_t id)
{
    kvt_extent_t *e = &self->ext[id];
    unsigned b = s_bin(e->len);
    e->bin = (uint8_t)b;
    e->free = 1;
    e->bprev = KVT_NIL;
    e->bnext = self->bins[b];
    if (e->bnext != KVT_NIL)
        self->ext[e->bnext].bprev = id;
    self->bins[b] = id;
    self->binmap |= 1ull << b;
    self->free_extents++;
}

static void s_bin_remove(kvt_extents_t *self, uint32_t id)
{
    kvt_extent_t *e = &self->ext[id];
    assert(e->free);
    if (e->bprev != KVT_NIL)
        self->ext[e->bprev].bnext = e->bnext;
    else
        self->bins[e->bin] = e->bnext;
    if (e->bnext != KVT_NIL)
        self->ext[e->bnext].bprev = e->bprev;
    if (self->bins[e->bin] == KVT_NIL)
        self->binmap &= ~(1ull << e->bin);
    e->free = 0;
    self->free_extents--;
}

static uint32_t s_desc_get(kvt_extents_t *self)
{
    uint32_t id = self->unused;
    if (id != KVT_NIL)
        self->unused = self->ext[id].next;
    return id;
}

static void s_desc_put(kvt_extents_t *self, uint32_t id)
{
    self->ext[id].next = self->unused;
    self->unused = id;
}

int kvt_extents_init(kvt_extents_t *self, uint64_t units, uint32_t max_allocs)
{
    self->nmax = 2 * max_allocs + 2;
    self->ext = calloc(self->nmax, sizeof(kvt_extent_t));
    if (!self->ext)
        return -1;
    for (unsigned b = 0; b < 64; b++)
        self->bins[b] = KVT_NIL;
    self->binmap = 0;
    self->units = units;
    self->used_units = 0;
    self->free_extents = 0;
    self->unused = KVT_NIL;
    for (uint32_t i = self->nmax; i-- > 1;)
        s_desc_put(self, i);
    self->ext[0] = (kvt_extent_t){.off = 0, .len = units, .prev = KVT_NIL, .next = KVT_NIL};
    s_bin_insert(self, 0);
    return 0;
}

void kvt_extents_fini(kvt_extents_t *self)
{
    free(self->ext);
    self->ext = NULL;
}

uint32_t kvt_extents_alloc(kvt_extents_t *self, uint64_t units)
{
    assert(units >= 1);
    if (units > self->units)
        return KVT_NIL;
    unsigned b = s_bin(units);
    uint32_t id = KVT_NIL;
    int scanned = 0;
    for (uint32_t c = self->bins[b]; c != KVT_NIL && scanned < S_BIN_SCAN;
         c = self->ext[c].bnext, scanned++) {
        if (self->ext[c].len >= units) {
            id = c;
            break;
        }
    }
    if (id == KVT_NIL && b < 63) {
        uint64_t above = self->binmap & (~0ull << (b + 1));
        if (above)
            id = self->bins[__builtin_ctzll(above)];
    }
    if (id == KVT_NIL) {
        //  Only the own bin can still fit: finish its scan.
        for (uint32_t c = self->bins[b]; c != KVT_NIL; c = self->ext[c].bnext) {
            if (self->ext[c].len >= units) {
                id = c;
                break;
            }
        }
    }
    if (id == KVT_NIL)
        return KVT_NIL;
    s_bin_remove(self, id);
    kvt_extent_t *e = &self->ext[id];
    if (e->len > units) {
        uint32_t r = s_desc_get(self);
        //  2N + 2 descriptors cannot run out (see the header); without one the
        //  whole extent is handed out, which only wastes its tail.
        if (r != KVT_NIL) {
            kvt_extent_t *rest = &self->ext[r];
            *rest = (kvt_extent_t){
                .off = e->off + units, .len = e->len - units, .prev = id, .next = e->next};
            if (e->next != KVT_NIL)
                self->ext[e->next].prev = r;
            e->next = r;
            e->len = units;
            s_bin_insert(self, r);
        }
    }
    self->used_units += e->len;
    return id;
}

void kvt_extents_free(kvt_extents_t *self, uint32_t id)
{
    kvt_extent_t *e = &self->ext[id];
    assert(!e->free);
    self->used_units -= e->len;
    uint32_t n = e->next;
    if (n != KVT_NIL && self->ext[n].free) {
        s_bin_remove(self, n);
        e->len += self->ext[n].len;
        e->next = self->ext[n].next;
        if (e->next != KVT_NIL)
            self->ext[e->next].prev = id;
        s_desc_put(self, n);
    }
    uint32_t p = e->prev;
    if (p != KVT_NIL && self->ext[p].free) {
        s_bin_remove(self, p);
        self->ext[p].len += e->len;
        self->ext[p].next = e->next;
        if (e->next != KVT_NIL)
            self->ext[e->next].prev = p;
        s_desc_put(self, id);
        id = p;
    }
    s_bin_insert(self, id);
}

uint64_t kvt_extents_largest_free(const kvt_extents_t *self)
{
    if (!self->binmap)
        return 0;
    unsigned b = s_bin(self->binmap);
    uint64_t best = 0;
    for (uint32_t c = self->bins[b]; c != KVT_NIL; c = self->ext[c].bnext)
        if (self->ext[c].len > best)
            best = self->ext[c].len;
    return best;
}
