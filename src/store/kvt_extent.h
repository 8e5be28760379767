/*  kvt_extent.h — the pool's arena allocator (private to src/store).

    The arena is a run of units (the pool's alignment). Extents — allocated
    or free — are described in a side table allocated at init, never inside
    the arena (which may be device-registered memory). Free extents are
    coalesced with their address neighbours on free and kept in 64
    power-of-two size bins. An allocation takes the first fit among the first
    few extents of its own bin, else the head of the next non-empty larger
    bin (which always fits), and splits off the remainder. Every operation is
    O(1) apart from that bounded in-bin scan.

    With at most N allocations live, free extents never exceed N + 1 (no two
    free extents are adjacent), so 2N + 1 descriptors always suffice. */
#ifndef KVT_EXTENT_H_INCLUDED
#define KVT_EXTENT_H_INCLUDED

#include "kvt_store_int.h"

typedef struct {
    uint64_t off;   //  first unit
    uint64_t len;   //  units
    uint32_t prev;  //  address-order neighbour below (KVT_NIL at the start)
    uint32_t next;  //  address-order neighbour above; next free descriptor when unused
    uint32_t bprev; //  previous extent in its free bin
    uint32_t bnext; //  next extent in its free bin
    uint8_t free;   //  1 if this extent is free
    uint8_t bin;    //  its bin while free
} kvt_extent_t;

typedef struct {
    kvt_extent_t *ext;     //  descriptor table
    uint32_t nmax;         //  descriptors
    uint32_t unused;       //  head of the unused-descriptor list
    uint32_t bins[64];     //  free-bin heads: bin b holds lengths in [2^b, 2^(b+1))
    uint64_t binmap;       //  bit b set when bins[b] is non-empty
    uint64_t units;        //  arena size in units
    uint64_t used_units;   //  units allocated
    uint64_t free_extents; //  free extents now
} kvt_extents_t;

//  Prepares an arena of `units` for at most max_allocs live allocations.
int kvt_extents_init(kvt_extents_t *self, uint64_t units, uint32_t max_allocs);
void kvt_extents_fini(kvt_extents_t *self);

//  Allocates `units` (≥ 1); returns the extent id or KVT_NIL if no free
//  extent is large enough.
uint32_t kvt_extents_alloc(kvt_extents_t *self, uint64_t units);

//  Frees an allocated extent and coalesces it.
void kvt_extents_free(kvt_extents_t *self, uint32_t id);

//  First unit / length of an allocated extent.
static inline uint64_t kvt_extents_off(const kvt_extents_t *self, uint32_t id)
{
    return self->ext[id].off;
}

//  Length in units of the largest free extent.
uint64_t kvt_extents_largest_free(const kvt_extents_t *self);

#endif
