/*  kvt_extent.c — segregated-fit arena allocator; see kvt_extent.h. */
#include <assert.h>
#include <stdlib.h>

#include "kvt_extent.h"

#define S_CLASS_SCAN 16 //  extents examined in the request's own class before moving up
#define S_SL         (1u << KVT_EXT_SL_BITS)

//  Size class of a length: exact below 2 * S_SL, then S_SL linear classes
//  per power of two. Monotonic in len.
static unsigned s_class(uint64_t len)
{
    if (len < S_SL)
        return (unsigned)len;
    unsigned b = 63u - (unsigned)__builtin_clzll(len);
    return S_SL + (b - KVT_EXT_SL_BITS) * S_SL +
           (unsigned)((len >> (b - KVT_EXT_SL_BITS)) & (S_SL - 1));
}

static void s_mark(kvt_extents_t *self, unsigned c)
{
    self->classmap[c >> 6] |= 1ull << (c & 63);
    self->wordmap |= 1ull << (c >> 6);
}

static void s_unmark(kvt_extents_t *self, unsigned c)
{
    self->classmap[c >> 6] &= ~(1ull << (c & 63));
    if (!self->classmap[c >> 6])
        self->wordmap &= ~(1ull << (c >> 6));
}

//  The first non-empty class above c, or KVT_EXT_CLASSES.
static unsigned s_class_above(const kvt_extents_t *self, unsigned c)
{
    unsigned from = c + 1;
    if (from >= KVT_EXT_CLASSES)
        return KVT_EXT_CLASSES;
    unsigned w = from >> 6;
    uint64_t bits = self->classmap[w] & (~0ull << (from & 63));
    if (bits)
        return (w << 6) + (unsigned)__builtin_ctzll(bits);
    uint64_t words = w + 1 < 64 ? self->wordmap & (~0ull << (w + 1)) : 0;
    if (!words)
        return KVT_EXT_CLASSES;
    w = (unsigned)__builtin_ctzll(words);
    return (w << 6) + (unsigned)__builtin_ctzll(self->classmap[w]);
}

#define S_BIN_LINKS(self) KVT_ILINKS((self)->ext, bin)

static void s_bin_insert(kvt_extents_t *self, uint32_t id)
{
    kvt_extent_t *e = &self->ext[id];
    unsigned c = s_class(e->len);
    e->cls = (uint16_t)c;
    e->free = 1;
    kvt_ilist_prepend(&self->bins[c], S_BIN_LINKS(self), id);
    s_mark(self, c);
    self->free_extents++;
}

static void s_bin_remove(kvt_extents_t *self, uint32_t id)
{
    kvt_extent_t *e = &self->ext[id];
    assert(e->free);
    kvt_ilist_unlink(&self->bins[e->cls], S_BIN_LINKS(self), id);
    if (self->bins[e->cls].count == 0)
        s_unmark(self, e->cls);
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
    return kvt_extents_init_regions(self, units, max_allocs, 0, true);
}

int kvt_extents_init_regions(kvt_extents_t *self, uint64_t units, uint32_t max_allocs,
                             uint64_t region_units, bool open)
{
    if (region_units == 0 || region_units > units)
        region_units = units;
    uint64_t nreg = (units + region_units - 1) / region_units;
    if (nreg > UINT32_MAX / 4 || max_allocs > UINT32_MAX / 4)
        return -1;
    self->nregions = (uint32_t)nreg;
    self->region_units = region_units;
    self->nmax = 2 * max_allocs + 2 * self->nregions;
    self->ext = calloc(self->nmax, sizeof(kvt_extent_t));
    if (!self->ext)
        return -1;
    for (unsigned c = 0; c < KVT_EXT_CLASSES; c++)
        kvt_ilist_init(&self->bins[c]);
    for (unsigned w = 0; w < KVT_EXT_WORDS; w++)
        self->classmap[w] = 0;
    self->wordmap = 0;
    self->units = units;
    self->used_units = 0;
    self->free_extents = 0;
    self->scanned = 0;
    self->unused = KVT_NIL;
    for (uint32_t i = self->nmax; i-- > self->nregions;)
        s_desc_put(self, i);
    for (uint32_t r = 0; r < self->nregions; r++) {
        uint64_t off = (uint64_t)r * region_units;
        uint64_t len = units - off < region_units ? units - off : region_units;
        self->ext[r] = (kvt_extent_t){.off = off,
                                      .len = len,
                                      .prev = r == 0 ? KVT_NIL : r - 1,
                                      .next = r + 1 < self->nregions ? r + 1 : KVT_NIL,
                                      .closed = 1};
        if (open)
            kvt_extents_open(self, r);
    }
    return 0;
}

void kvt_extents_open(kvt_extents_t *self, uint32_t r)
{
    assert(r < self->nregions);
    if (!self->ext[r].closed)
        return;
    self->ext[r].closed = 0;
    s_bin_insert(self, r);
}

void kvt_extents_fini(kvt_extents_t *self)
{
    free(self->ext);
    self->ext = NULL;
}

//  First extent of class c at least `units` long, examining at most `limit`.
static uint32_t s_scan(kvt_extents_t *self, unsigned c, uint64_t units, uint64_t limit)
{
    uint64_t n = 0;
    for (uint32_t e = self->bins[c].head; e != KVT_NIL && n < limit;
         e = self->ext[e].bin.next, n++) {
        if (self->ext[e].len >= units) {
            self->scanned += n + 1;
            return e;
        }
    }
    self->scanned += n;
    return KVT_NIL;
}

uint32_t kvt_extents_alloc(kvt_extents_t *self, uint64_t units)
{
    assert(units >= 1);
    if (units > self->region_units)
        return KVT_NIL;
    unsigned c = s_class(units);
    uint32_t id = s_scan(self, c, units, S_CLASS_SCAN);
    if (id == KVT_NIL) {
        unsigned up = s_class_above(self, c);
        if (up < KVT_EXT_CLASSES)
            id = self->bins[up].head;
    }
    if (id == KVT_NIL) //  only the own class can still fit: finish its scan
        id = s_scan(self, c, units, UINT64_MAX);
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

uint32_t kvt_extents_free(kvt_extents_t *self, uint32_t id)
{
    kvt_extent_t *e = &self->ext[id];
    assert(!e->free);
    self->used_units -= e->len;
    //  Never across a region boundary: an extent stays inside its region.
    uint32_t n = e->next;
    if (n != KVT_NIL && self->ext[n].free &&
        kvt_extents_same_region(self, e->off, self->ext[n].off)) {
        s_bin_remove(self, n);
        e->len += self->ext[n].len;
        e->next = self->ext[n].next;
        if (e->next != KVT_NIL)
            self->ext[e->next].prev = id;
        s_desc_put(self, n);
    }
    uint32_t p = e->prev;
    if (p != KVT_NIL && self->ext[p].free &&
        kvt_extents_same_region(self, self->ext[p].off, e->off)) {
        s_bin_remove(self, p);
        self->ext[p].len += e->len;
        self->ext[p].next = e->next;
        if (e->next != KVT_NIL)
            self->ext[e->next].prev = p;
        s_desc_put(self, id);
        id = p;
    }
    s_bin_insert(self, id);
    return id;
}

uint64_t kvt_extents_largest_free(const kvt_extents_t *self)
{
    if (!self->wordmap)
        return 0;
    unsigned w = 63u - (unsigned)__builtin_clzll(self->wordmap);
    unsigned c = (w << 6) + 63u - (unsigned)__builtin_clzll(self->classmap[w]);
    uint64_t best = 0;
    for (uint32_t e = self->bins[c].head; e != KVT_NIL; e = self->ext[e].bin.next)
        if (self->ext[e].len > best)
            best = self->ext[e].len;
    return best;
}
