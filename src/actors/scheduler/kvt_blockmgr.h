/*  kvt_blockmgr — the HBM block manager: device KV blocks, their prefix
    hashes and reference counts.

    A block is private (owned by one request while it computes it), cached
    (full, valid, indexed by its prefix hash so other requests can share
    it), or free. Free blocks are either uncached (a stack) or cached with
    no reference (an LRU: the young end is the most recently released).
    Allocation takes uncached blocks first and then evicts cached ones from
    the old end. A reference is held by every request that uses a block and
    by every save that still reads it (a lease), so a block is never reused
    while anything reads it. Every operation is O(1) per block. */
#ifndef KVT_BLOCKMGR_H_INCLUDED
#define KVT_BLOCKMGR_H_INCLUDED

#include <stdbool.h>
#include <stdint.h>

#include "kvtier/kvt_msg.h"

typedef struct _kvt_blockmgr_t kvt_blockmgr_t;

typedef struct {
    uint64_t allocated;      //  blocks handed out by alloc
    uint64_t evicted;        //  cached blocks evicted to satisfy an allocation
    uint64_t registered;     //  blocks that became cached
    uint64_t duplicate_regs; //  registrations of a hash already cached elsewhere
    uint64_t hit_blocks;     //  blocks matched by kvt_blockmgr_match
    uint64_t token_mismatch; //  hash matched but tokens differed (treated as a miss)
} kvt_blockmgr_stats_t;

//  Creates a manager over `nblocks` blocks of `block_size` tokens.
kvt_blockmgr_t *kvt_blockmgr_new(uint32_t nblocks, uint32_t block_size);
void kvt_blockmgr_destroy(kvt_blockmgr_t **self_p);

//  Blocks an allocation can obtain now (uncached free + unreferenced cached).
uint32_t kvt_blockmgr_available(const kvt_blockmgr_t *self);
uint32_t kvt_blockmgr_total(const kvt_blockmgr_t *self);

//  Longest prefix of hashes[0..n) whose blocks are cached and whose tokens
//  (block_size per block, from `tokens`) match. Writes the block ids to
//  out[]; takes no reference and counts nothing (a probe may be repeated;
//  kvt_blockmgr_count_hit records a hit that was used). Returns the number
//  of blocks matched.
uint32_t kvt_blockmgr_match(kvt_blockmgr_t *self, const kvt_hash_t *hashes, const uint32_t *tokens,
                            uint32_t n, uint32_t *out);

//  Counts `blocks` matched blocks that an admission used.
void kvt_blockmgr_count_hit(kvt_blockmgr_t *self, uint32_t blocks);

//  Takes a reference on a block (a cached free block leaves the LRU).
void kvt_blockmgr_ref(kvt_blockmgr_t *self, uint32_t block);

//  Drops a reference; at zero the block becomes free (cached → LRU young
//  end, otherwise the free stack).
void kvt_blockmgr_unref(kvt_blockmgr_t *self, uint32_t block);

//  Allocates n private blocks with one reference each. Returns 0, or -1 when
//  fewer than n are available (nothing is allocated then).
int kvt_blockmgr_alloc(kvt_blockmgr_t *self, uint32_t n, uint32_t *out);

//  Marks a referenced block as cached under `hash` with its tokens. Returns 0,
//  or 1 when the hash is already cached in another block (this one stays
//  private and is freed normally).
int kvt_blockmgr_register(kvt_blockmgr_t *self, uint32_t block, kvt_hash_t hash,
                          const uint32_t *tokens);

//  Reference count of a block (tests and audits).
uint32_t kvt_blockmgr_refs(const kvt_blockmgr_t *self, uint32_t block);

//  Blocks with a non-zero reference count (O(1)).
uint32_t kvt_blockmgr_in_use(const kvt_blockmgr_t *self);

void kvt_blockmgr_stats(const kvt_blockmgr_t *self, kvt_blockmgr_stats_t *out);

#endif
