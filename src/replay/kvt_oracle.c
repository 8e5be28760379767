/*  kvt_oracle — see kvt_oracle.h. The stream is a counter-mode mix of a
    64-bit seed (XXH3 over the inputs), so any offset can be produced
    independently and the fill runs at memory speed. */
#include "kvt_oracle.h"

#include <string.h>
#include <xxhash.h>

#define S_RUN_WORDS 32 //  words compared branch-free before looking for a difference

static uint64_t s_seed(kvt_hash_t hash, uint32_t layer, uint32_t plane, uint32_t rank)
{
    uint64_t in[4] = {hash.hi, hash.lo, ((uint64_t)layer << 32) | plane, rank};
    return XXH3_64bits(in, sizeof in);
}

//  Word i of the stream: one multiply per word, no carried state, so the
//  fill and the check vectorise. Streams of different seeds differ in
//  every word (the seed passes through a bijective mix), which is all the
//  oracle needs: any byte written for another (hash, layer, plane, rank)
//  fails the check.
static inline uint64_t s_word(uint64_t seed, uint64_t i)
{
    uint64_t z = (seed ^ (i * 0x9E3779B97F4A7C15ull)) * 0xBF58476D1CE4E5B9ull;
    return z ^ (z >> 31);
}

void kvt_oracle_fill(void *dst, size_t n, kvt_hash_t hash, uint32_t layer, uint32_t plane,
                     uint32_t rank)
{
    uint64_t seed = s_seed(hash, layer, plane, rank);
    uint8_t *p = dst;
    size_t words = n / 8;
    for (size_t i = 0; i < words; i++) {
        uint64_t w = s_word(seed, i);
        memcpy(p + 8 * i, &w, 8);
    }
    if (n % 8) {
        uint64_t w = s_word(seed, words);
        memcpy(p + 8 * words, &w, n % 8);
    }
}

//  First differing byte of word i (src bytes against the stream's word).
static size_t s_byte_in_word(const uint8_t *p, uint64_t seed, size_t i, size_t len)
{
    uint64_t w = s_word(seed, i);
    uint8_t want[8];
    memcpy(want, &w, 8);
    for (size_t k = 0; k < len; k++)
        if (p[8 * i + k] != want[k])
            return 8 * i + k;
    return 8 * i + len;
}

size_t kvt_oracle_mismatch(const void *src, size_t n, kvt_hash_t hash, uint32_t layer,
                           uint32_t plane, uint32_t rank)
{
    uint64_t seed = s_seed(hash, layer, plane, rank);
    const uint8_t *p = src;
    size_t words = n / 8;
    //  Runs of words are compared without branches (so they vectorise);
    //  only a run with a difference is walked again to find the byte.
    for (size_t run = 0; run < words; run += S_RUN_WORDS) {
        size_t end = run + S_RUN_WORDS < words ? run + S_RUN_WORDS : words;
        uint64_t diff = 0;
        for (size_t i = run; i < end; i++) {
            uint64_t w;
            memcpy(&w, p + 8 * i, 8);
            diff |= w ^ s_word(seed, i);
        }
        if (diff == 0)
            continue;
        for (size_t j = run; j < end; j++) {
            size_t at = s_byte_in_word(p, seed, j, 8);
            if (at < 8 * j + 8)
                return at;
        }
    }
    if (n % 8)
        return s_byte_in_word(p, seed, words, n % 8);
    return n;
}

bool kvt_oracle_check(const void *src, size_t n, kvt_hash_t hash, uint32_t layer, uint32_t plane,
                      uint32_t rank)
{
    return kvt_oracle_mismatch(src, n, hash, layer, plane, rank) == n;
}

void kvt_oracle_state_fill(void *dst, size_t n, kvt_hash_t hash_at_b, uint32_t rank)
{
    if (kvt_hash_is_zero(hash_at_b))
        memset(dst, 0, n);
    else
        kvt_oracle_fill(dst, n, hash_at_b, KVT_ORACLE_STATE, 0, rank);
}

size_t kvt_oracle_state_mismatch(const void *src, size_t n, kvt_hash_t hash_at_b, uint32_t rank)
{
    if (!kvt_hash_is_zero(hash_at_b))
        return kvt_oracle_mismatch(src, n, hash_at_b, KVT_ORACLE_STATE, 0, rank);
    const uint8_t *z = src; //  the initial state: every byte zero
    for (size_t i = 0; i < n; i++)
        if (z[i])
            return i;
    return n;
}

size_t kvt_oracle_state_advance(void *dst, const void *src, size_t n, kvt_hash_t from_a,
                                kvt_hash_t to_b, uint32_t rank)
{
    //  The initial state is zeros: its stream is masked off (no branch in
    //  the loop, so it vectorises).
    uint64_t ma = kvt_hash_is_zero(from_a) ? 0 : ~0ull, mb = kvt_hash_is_zero(to_b) ? 0 : ~0ull;
    uint64_t sa = s_seed(from_a, KVT_ORACLE_STATE, 0, rank);
    uint64_t sb = s_seed(to_b, KVT_ORACLE_STATE, 0, rank);
    uint8_t *d = dst;
    const uint8_t *s = src;
    size_t words = n / 8;
    uint64_t diff = 0;
    //  One pass: read, carry the deviation, write, and compare the result
    //  with state(B); only a wrong result is walked again.
    for (size_t i = 0; i < words; i++) {
        uint64_t w, eb = s_word(sb, i) & mb;
        memcpy(&w, s + 8 * i, 8);
        w ^= eb ^ (s_word(sa, i) & ma);
        memcpy(d + 8 * i, &w, 8);
        diff |= w ^ eb;
    }
    if (n % 8) {
        uint64_t w = 0, eb = s_word(sb, words) & mb;
        memcpy(&w, s + 8 * words, n % 8);
        w ^= eb ^ (s_word(sa, words) & ma);
        memcpy(d + 8 * words, &w, n % 8);
        diff |= (w ^ eb) & (~0ull >> (64 - 8 * (n % 8)));
    }
    return diff == 0 ? n : kvt_oracle_state_mismatch(d, n, to_b, rank);
}
