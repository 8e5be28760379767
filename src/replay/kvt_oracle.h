/*  kvt_oracle — the content oracle.

    A simulated forward writes into every KV block the bytes
    PRF (prefix hash of the block, layer, plane, rank) and into a state slot
    at boundary B the bytes PRF (prefix hash at B, KVT_ORACLE_STATE, 0, rank).
    Any block or slot can then be checked against what a recompute would have
    produced; a resume whose bytes differ is a wrong resume. Every byte of the
    range is compared; the check says where the first wrong byte is.

    The state is a recurrence: a forward computes the state after its chunk
    from the state it read (kvt_oracle_state_advance), so a wrong state read
    stays wrong in every state computed from it. The initial state (before
    token 0) is all zeros; the state functions name it by the zero hash. */
#ifndef KVT_ORACLE_H_INCLUDED
#define KVT_ORACLE_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvtier/kvt_msg.h"

#define KVT_ORACLE_STATE 0xFFFFFFFFu //  "layer" tag of state bytes

//  Fills dst[0..n) with the oracle bytes of (hash, layer, plane, rank).
void kvt_oracle_fill(void *dst, size_t n, kvt_hash_t hash, uint32_t layer, uint32_t plane,
                     uint32_t rank);

//  Offset of the first byte of src[0..n) that differs from the oracle bytes
//  of (hash, layer, plane, rank); n when all n bytes match.
size_t kvt_oracle_mismatch(const void *src, size_t n, kvt_hash_t hash, uint32_t layer,
                           uint32_t plane, uint32_t rank);

//  True when src[0..n) equals the oracle bytes of (hash, layer, plane, rank)
//  (kvt_oracle_mismatch returns n).
bool kvt_oracle_check(const void *src, size_t n, kvt_hash_t hash, uint32_t layer, uint32_t plane,
                      uint32_t rank);

//  The deviation of src[0..n) from the oracle bytes of (hash, layer, plane,
//  rank): the OR over its 8-byte words (the tail zero-padded) of word ^
//  oracle word; 0 exactly when all n bytes match. A KV forward reads it
//  from the block before its chunk and carries it into the blocks it
//  writes (kvt_sim_runner_core.h).
uint64_t kvt_oracle_deviation(const void *src, size_t n, kvt_hash_t hash, uint32_t layer,
                              uint32_t plane, uint32_t rank);

//  The state bytes of a slot (or checkpoint unit) at boundary B:
//  PRF (prefix hash at B, KVT_ORACLE_STATE, 0, rank); all zeros (the
//  initial state) for the zero hash.
void kvt_oracle_state_fill(void *dst, size_t n, kvt_hash_t hash_at_b, uint32_t rank);

//  Offset of the first byte of src[0..n) that differs from the state bytes
//  of (hash at B, rank); n when all match.
size_t kvt_oracle_state_mismatch(const void *src, size_t n, kvt_hash_t hash_at_b, uint32_t rank);

//  One forward of the recurrence, from the state at A to the state at B:
//  dst[i] = state(B)[i] ^ src[i] ^ state(A)[i] (dst may be src). dst holds
//  the state at B exactly when src held the state at A; any deviation of
//  src is carried into dst unchanged. Returns the offset of dst's first
//  byte that differs from state(B), n when dst is right (compared in the
//  same pass, so a check of what was just written costs nothing more).
size_t kvt_oracle_state_advance(void *dst, const void *src, size_t n, kvt_hash_t from_a,
                                kvt_hash_t to_b, uint32_t rank);

//  For tests and benchmarks: false runs the word loops compiled for the
//  baseline ISA, true the AVX-512 ones where the CPU has them (the default).
//  Both write and accept the same bytes. Returns whether the AVX-512 loops
//  now run.
bool kvt_oracle_use_simd(bool on);

#endif
