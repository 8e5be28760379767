/*  kvt_blockmgr — the HBM block manager: device KV blocks, their prefix
    hashes and reference counts.

    A block is private (owned by one request while it computes it), cached
    (full, valid, indexed by its prefix hash so other requests can share
    it), or free. Free blocks are either uncached (a stack) or cached with
    no reference (an LRU: the young end is the most recently released).
    Allocation takes uncached blocks first and then evicts cached ones from
    the old end. A reference is held by every request that uses a block and
    by every save that still reads it (a lease), so a block is never reused
    while anything reads it. Every operation is O(1) per block.

    One HBM byte budget (hybrid models): the blocks are the bytes that KV
    and HBM checkpoints share. A checkpoint holds blocks withheld from KV
    (kvt_blockmgr_withhold) and gives them back when it goes. A peer (the
    checkpoint pool, wired by the coordinator) offers its oldest evictable
    checkpoint, and whenever bytes are needed one rule picks what goes:
    (1) a free block; (2) a checkpoint whose KV below it left HBM (it
    cannot resume from HBM any more); (3) a cached block released above the
    deepest checkpoint of its request (KV a hybrid model cannot resume from
    HBM: the low LRU); (4) the older of the block LRU's head and the
    checkpoint LRU's head, by one recency clock. docs/configuration.md
    (HBM budget) states the rule. */
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
    uint64_t evicted_low;    //  of evicted: from the low LRU (above their last checkpoint)
    uint64_t peer_evictions; //  checkpoints the rule evicted to free blocks
    uint32_t withheld;       //  gauge: blocks held by checkpoints (the peer)
} kvt_blockmgr_stats_t;

//  The checkpoint side of the budget (all NULL: blocks only).
typedef struct {
    //  The oldest evictable checkpoint: true with its recency stamp and
    //  whether its KV is gone; false when none can be evicted.
    bool (*victim)(void *arg, uint64_t *stamp, bool *gone);
    //  Evicts that checkpoint; its blocks come back through
    //  kvt_blockmgr_unwithhold before it returns.
    void (*evict)(void *arg);
    //  Blocks the peer's evictable checkpoints would give back now.
    uint32_t (*evictable)(void *arg);
    //  A cached block's hash left HBM (a checkpoint at it lost its KV).
    void (*gone)(void *arg, kvt_hash_t hash);
    void *arg; //  passed to each
} kvt_blockmgr_peer_t;

//  Creates a manager over `nblocks` blocks of `block_size` tokens.
kvt_blockmgr_t *kvt_blockmgr_new(uint32_t nblocks, uint32_t block_size);
void kvt_blockmgr_destroy(kvt_blockmgr_t **self_p);

//  Wires the checkpoint side of the budget (copied).
void kvt_blockmgr_set_peer(kvt_blockmgr_t *self, const kvt_blockmgr_peer_t *peer);

//  The recency clock both sides stamp their LRU entries with: advances it
//  and returns the new value.
uint64_t kvt_blockmgr_tick(kvt_blockmgr_t *self);

//  Takes n blocks out of the KV side for a checkpoint, by the rule above.
//  Returns 0, or -1 when fewer than n can be obtained (nothing taken).
int kvt_blockmgr_withhold(kvt_blockmgr_t *self, uint32_t n);

//  Gives n withheld blocks back (free, uncached).
void kvt_blockmgr_unwithhold(kvt_blockmgr_t *self, uint32_t n);

//  Blocks an allocation can obtain now (uncached free + unreferenced cached
//  + what the peer's evictable checkpoints hold).
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

//  As kvt_blockmgr_unref, but a cached block freed goes to the low LRU (it
//  lies above the deepest checkpoint of the request that released it).
void kvt_blockmgr_unref_low(kvt_blockmgr_t *self, uint32_t block);

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
