/*  kvt_prefix — the prefix hash chain and the namespace.

    h_i = XXH3-128 (h_{i-1} ‖ tokens of block i), h_{-1} = the namespace hash.
    A prefix is named by the hash of its last block; a chunk's key is the hash
    of the last block of the chunk. The namespace hashes everything that
    changes stored bytes, so two configurations never share a key; its hash
    (kvt_namespace_hash, kvt_namespace_id) is base/kvt_namespace's. */
#ifndef KVT_PREFIX_H_INCLUDED
#define KVT_PREFIX_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

#include "base/kvt_namespace.h"
#include "kvtier/kvt_msg.h"

//  Hash of one block: H (prev ‖ tokens[0..n)).
kvt_hash_t kvt_block_hash(kvt_hash_t prev, const uint32_t *tokens, uint32_t n);

//  Hashes of every full block of tokens[0..ntokens): out[i] for block i,
//  i < ntokens / block_size. Returns the number of hashes written.
uint32_t kvt_prefix_hashes(kvt_hash_t ns, const uint32_t *tokens, uint32_t ntokens,
                           uint32_t block_size, kvt_hash_t *out);

#endif
