/*  kvt_oracle — the content oracle.

    A simulated forward writes into every KV block the bytes
    PRF (prefix hash of the block, layer, plane, rank) and into a state slot
    at boundary B the bytes PRF (prefix hash at B, KVT_ORACLE_STATE, 0, rank).
    Any block or slot can then be checked against what a recompute would have
    produced; a resume whose bytes differ is a wrong resume. Every byte of the
    range is compared; the check says where the first wrong byte is. */
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

//  The state bytes of a slot (or checkpoint unit) at boundary B:
//  PRF (prefix hash at B, KVT_ORACLE_STATE, 0, rank).
void kvt_oracle_state_fill(void *dst, size_t n, kvt_hash_t hash_at_b, uint32_t rank);

//  Offset of the first byte of src[0..n) that differs from the state bytes
//  of (hash at B, rank); n when all match.
size_t kvt_oracle_state_mismatch(const void *src, size_t n, kvt_hash_t hash_at_b, uint32_t rank);

#endif
