/*  kvt_extent.h — the pool's arena allocator (private to src/store).

    The arena is a run of units (the pool's alignment). Extents — allocated
    or free — are described in a side table allocated at init, never inside
    the arena (which may be device-registered memory). Free extents are
    coalesced with their address neighbours on free and kept in size
    classes: 16 linear classes per power of two (lengths below 32 units have
    a class each), with a two-level bitmap over the classes. An allocation
    takes the first fit among the first few extents of its own class, else
    the head of the next non-empty larger class (which always fits: every
    length in it is larger than the request; one `ctz` per bitmap level).
    Only when no larger free extent exists at all does it finish the scan of
    its own class, which holds lengths within 1/16 of the request. Every
    operation but that last resort is O(1).

    Regions: the arena may be cut into regions of `region_units` (the last
    one shorter), the units a device registers (pins) in one call. No
    extent ever straddles a region boundary: the arena starts as one free
    extent per region and a free never coalesces across a boundary. A
    region starts closed (its extent neither free nor allocated, so nothing
    is served from it) until kvt_extents_open.

    With at most N allocations live in R regions, free extents never exceed
    N + R (no two free extents of one region are adjacent), so 2N + 2R
    descriptors always suffice. */
#ifndef KVT_EXTENT_H_INCLUDED
#define KVT_EXTENT_H_INCLUDED

#include "base/kvt_ilist.h"
#include "kvt_store_int.h"

#define KVT_EXT_SL_BITS 4                                  //  log2(classes per power of two)
#define KVT_EXT_CLASSES (16 + (64 - KVT_EXT_SL_BITS) * 16) //  size classes
#define KVT_EXT_WORDS   ((KVT_EXT_CLASSES + 63) / 64)      //  words of the class bitmap

typedef struct {
    uint64_t off;    //  first unit
    uint64_t len;    //  units
    uint32_t prev;   //  address-order neighbour below (KVT_NIL at the start)
    uint32_t next;   //  address-order neighbour above; next free descriptor when unused
    kvt_ilink_t bin; //  in its free class's list
    uint32_t owner;  //  allocated: the caller's tag (kvt_extents_set_owner)
    uint32_t mark;   //  scratch for the caller's scans (the pool's visit stamp)
    uint16_t cls;    //  its size class while free
    uint8_t free;    //  1 if this extent is free
    uint8_t closed;  //  1 while it is a whole region not yet opened
} kvt_extent_t;

typedef struct {
    kvt_extent_t *ext;                 //  descriptor table
    uint32_t nmax;                     //  descriptors
    uint32_t unused;                   //  head of the unused-descriptor list
    kvt_ilist_t bins[KVT_EXT_CLASSES]; //  free extents per class, most recently freed first
    uint64_t classmap[KVT_EXT_WORDS];  //  bit c set when bins[c] is non-empty
    uint64_t wordmap;                  //  bit w set when classmap[w] is non-zero
    uint64_t units;                    //  arena size in units
    uint64_t region_units;             //  units per region (the last may be shorter)
    uint32_t nregions;                 //  regions (descriptors 0..nregions-1 start as theirs)
    uint64_t used_units;               //  units allocated
    uint64_t free_extents;             //  free extents now
    uint64_t scanned;                  //  free extents examined by allocations (cost gauge)
} kvt_extents_t;

//  Prepares an arena of `units` for at most max_allocs live allocations
//  (one open region).
int kvt_extents_init(kvt_extents_t *self, uint64_t units, uint32_t max_allocs);

//  The same in regions of region_units (0 or >= units: one region), all
//  open when `open`, else all closed.
int kvt_extents_init_regions(kvt_extents_t *self, uint64_t units, uint32_t max_allocs,
                             uint64_t region_units, bool open);

//  Opens closed region r: its units become one free extent. No-op when open.
void kvt_extents_open(kvt_extents_t *self, uint32_t r);

//  True when units `a` and `b` lie in one region.
static inline bool kvt_extents_same_region(const kvt_extents_t *self, uint64_t a, uint64_t b)
{
    return a / self->region_units == b / self->region_units;
}
void kvt_extents_fini(kvt_extents_t *self);

//  Allocates `units` (≥ 1) inside one open region; returns the extent id or
//  KVT_NIL if no free extent is large enough.
uint32_t kvt_extents_alloc(kvt_extents_t *self, uint64_t units);

//  Frees an allocated extent and coalesces it; returns the free extent that
//  now covers it.
uint32_t kvt_extents_free(kvt_extents_t *self, uint32_t id);

//  First unit of an allocated extent.
static inline uint64_t kvt_extents_off(const kvt_extents_t *self, uint32_t id)
{
    return self->ext[id].off;
}

//  Tags an allocated extent with its owner (read back from ext[id].owner).
static inline void kvt_extents_set_owner(kvt_extents_t *self, uint32_t id, uint32_t owner)
{
    self->ext[id].owner = owner;
}

//  Length in units of the largest free extent.
uint64_t kvt_extents_largest_free(const kvt_extents_t *self);

#endif
