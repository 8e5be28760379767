/*  kvt_namespace — see kvt_namespace.h. */
#include "kvt_namespace.h"

#include <string.h>
#include <xxhash.h>

kvt_hash_t kvt_namespace_hash(const char *desc)
{
    XXH128_hash_t h = XXH3_128bits(desc, strlen(desc));
    kvt_hash_t out = {h.high64, h.low64};
    return out;
}

uint64_t kvt_namespace_id(kvt_hash_t ns)
{
    return ns.lo ^ (ns.hi * 0x9E3779B97F4A7C15ull);
}
