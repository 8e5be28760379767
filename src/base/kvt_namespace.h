/*  kvt_namespace — the namespace's hash: the one function that turns a
    namespace's stable text into the 128-bit seed of the prefix hash chain
    (and the 64-bit id the tier files objects under). The configuration
    writes that text (kvt_config_resolve, rule C2: "kvtier/2 model=..."); it
    lives here, below the runtime, so the configuration and the actors hash
    it with the same function. */
#ifndef KVT_NAMESPACE_H_INCLUDED
#define KVT_NAMESPACE_H_INCLUDED

#include <stdint.h>

#include "kvtier/kvt_hash.h"

//  XXH3-128 of a namespace's stable text (NUL-terminated).
kvt_hash_t kvt_namespace_hash(const char *desc);

//  64-bit namespace id for the tier (the low half of the namespace hash
//  mixed with the high half).
uint64_t kvt_namespace_id(kvt_hash_t ns);

#endif
