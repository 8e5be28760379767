/*  kvt_hash — the 128-bit name every layer shares.

    A prefix hash (XXH3-128) names a prefix, a block and a chunk key. It lives
    in its own header so that the store, the device layer and the messages can
    all speak of keys without depending on one another. */
#ifndef KVT_HASH_H_INCLUDED
#define KVT_HASH_H_INCLUDED

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

//  128-bit prefix hash (XXH3-128): the name of a prefix, a block, a chunk key.
typedef struct {
    uint64_t hi; //  high 64 bits
    uint64_t lo; //  low 64 bits
} kvt_hash_t;

static inline bool kvt_hash_eq(kvt_hash_t a, kvt_hash_t b)
{
    return a.hi == b.hi && a.lo == b.lo;
}

static inline bool kvt_hash_is_zero(kvt_hash_t a)
{
    return a.hi == 0 && a.lo == 0;
}

#ifdef __cplusplus
}
#endif
#endif
