/*  kvt_prefix — see kvt_prefix.h. */
#include "kvt_prefix.h"

#define XXH_STATIC_LINKING_ONLY //  XXH3_state_t on the stack
#include <xxhash.h>

kvt_hash_t kvt_block_hash(kvt_hash_t prev, const uint32_t *tokens, uint32_t n)
{
    XXH3_state_t st;
    XXH3_128bits_reset(&st);
    uint8_t head[16];
    for (int i = 0; i < 8; i++) {
        head[i] = (uint8_t)(prev.hi >> (8 * i));
        head[8 + i] = (uint8_t)(prev.lo >> (8 * i));
    }
    XXH3_128bits_update(&st, head, sizeof head);
    //  Tokens are hashed as little-endian u32 so the key does not depend on
    //  the host's byte order.
    uint8_t buf[256];
    uint32_t done = 0;
    while (done < n) {
        uint32_t batch = n - done < 64 ? n - done : 64;
        for (uint32_t i = 0; i < batch; i++) {
            uint32_t t = tokens[done + i];
            buf[4 * i] = (uint8_t)t;
            buf[4 * i + 1] = (uint8_t)(t >> 8);
            buf[4 * i + 2] = (uint8_t)(t >> 16);
            buf[4 * i + 3] = (uint8_t)(t >> 24);
        }
        XXH3_128bits_update(&st, buf, (size_t)batch * 4);
        done += batch;
    }
    XXH128_hash_t h = XXH3_128bits_digest(&st);
    kvt_hash_t out = {h.high64, h.low64};
    return out;
}

uint32_t kvt_prefix_hashes(kvt_hash_t ns, const uint32_t *tokens, uint32_t ntokens,
                           uint32_t block_size, kvt_hash_t *out)
{
    uint32_t nblocks = ntokens / block_size;
    kvt_hash_t prev = ns;
    for (uint32_t i = 0; i < nblocks; i++) {
        prev = kvt_block_hash(prev, tokens + (size_t)i * block_size, block_size);
        out[i] = prev;
    }
    return nblocks;
}
