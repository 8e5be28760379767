/*  kvt_oracle — see kvt_oracle.h. The stream is a counter-mode mix of a
    64-bit seed (XXH3 over the inputs), so any offset can be produced
    independently and the fill runs at memory speed. */
#include "kvt_oracle.h"

#include <stdatomic.h>
#include <string.h>
#include <xxhash.h>

#define S_RUN_WORDS 32 //  words compared branch-free before looking for a difference

//  The word loops below are written once (S_INLINE bodies) and compiled
//  twice on x86-64: for the baseline ISA and for AVX-512 (which has a
//  64-bit vector multiply, so the stream vectorises), chosen once at run
//  time. Both produce the same bytes; only the speed differs.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define S_DISPATCH 1
#define S_V4       __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw")))
#define S_INLINE   static inline __attribute__((always_inline))
#else
#define S_DISPATCH 0
#define S_INLINE   static inline
#endif

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

//  True when this CPU runs the AVX-512 forms.
static bool s_cpu_v4(void)
{
#if S_DISPATCH
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw");
#else
    return false;
#endif
}

static atomic_int s_mode; //  0: not chosen yet, 1: baseline loops, 2: AVX-512 loops

//  True when the AVX-512 forms run (chosen once; a race only asks twice).
static bool s_v4(void)
{
    int k = atomic_load_explicit(&s_mode, memory_order_relaxed);
    if (k == 0) {
        k = s_cpu_v4() ? 2 : 1;
        atomic_store_explicit(&s_mode, k, memory_order_relaxed);
    }
    return k == 2;
}

bool kvt_oracle_use_simd(bool on)
{
    bool v4 = on && s_cpu_v4();
    atomic_store_explicit(&s_mode, v4 ? 2 : 1, memory_order_relaxed);
    return v4;
}

//  Words [0, words) of the stream of `seed` into p.
S_INLINE void s_fill_words(uint8_t *p, size_t words, uint64_t seed)
{
    for (size_t i = 0; i < words; i++) {
        uint64_t w = s_word(seed, i);
        memcpy(p + 8 * i, &w, 8);
    }
}

//  OR of (word ^ stream word) over words [from, to): zero when they match.
S_INLINE uint64_t s_diff_words(const uint8_t *p, size_t from, size_t to, uint64_t seed)
{
    uint64_t diff = 0;
    for (size_t i = from; i < to; i++) {
        uint64_t w;
        memcpy(&w, p + 8 * i, 8);
        diff |= w ^ s_word(seed, i);
    }
    return diff;
}

//  The advance's word loop (kvt_oracle_state_advance): returns the OR of
//  every written word ^ state(B)'s word.
S_INLINE uint64_t s_advance_words(uint8_t *d, const uint8_t *s, size_t words, uint64_t sa,
                                  uint64_t ma, uint64_t sb, uint64_t mb)
{
    uint64_t diff = 0;
    for (size_t i = 0; i < words; i++) {
        uint64_t w, eb = s_word(sb, i) & mb;
        memcpy(&w, s + 8 * i, 8);
        w ^= eb ^ (s_word(sa, i) & ma);
        memcpy(d + 8 * i, &w, 8);
        diff |= w ^ eb;
    }
    return diff;
}

#if S_DISPATCH
S_V4 static void s_fill_v4(uint8_t *p, size_t words, uint64_t seed)
{
    s_fill_words(p, words, seed);
}

S_V4 static uint64_t s_diff_v4(const uint8_t *p, size_t from, size_t to, uint64_t seed)
{
    return s_diff_words(p, from, to, seed);
}

S_V4 static uint64_t s_advance_v4(uint8_t *d, const uint8_t *s, size_t words, uint64_t sa,
                                  uint64_t ma, uint64_t sb, uint64_t mb)
{
    return s_advance_words(d, s, words, sa, ma, sb, mb);
}
#endif

static void s_fill(uint8_t *p, size_t words, uint64_t seed)
{
#if S_DISPATCH
    if (s_v4()) {
        s_fill_v4(p, words, seed);
        return;
    }
#endif
    s_fill_words(p, words, seed);
}

static uint64_t s_diff(const uint8_t *p, size_t from, size_t to, uint64_t seed)
{
#if S_DISPATCH
    if (s_v4())
        return s_diff_v4(p, from, to, seed);
#endif
    return s_diff_words(p, from, to, seed);
}

static uint64_t s_advance(uint8_t *d, const uint8_t *s, size_t words, uint64_t sa, uint64_t ma,
                          uint64_t sb, uint64_t mb)
{
#if S_DISPATCH
    if (s_v4())
        return s_advance_v4(d, s, words, sa, ma, sb, mb);
#endif
    return s_advance_words(d, s, words, sa, ma, sb, mb);
}

void kvt_oracle_fill(void *dst, size_t n, kvt_hash_t hash, uint32_t layer, uint32_t plane,
                     uint32_t rank)
{
    uint64_t seed = s_seed(hash, layer, plane, rank);
    uint8_t *p = dst;
    size_t words = n / 8;
    s_fill(p, words, seed);
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
    //  All words are compared in one pass without branches (so it
    //  vectorises); only a range with a difference is walked again, a run
    //  of words at a time, to find the byte.
    for (size_t run = s_diff(p, 0, words, seed) ? 0 : words; run < words; run += S_RUN_WORDS) {
        size_t end = run + S_RUN_WORDS < words ? run + S_RUN_WORDS : words;
        if (s_diff(p, run, end, seed) == 0)
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

uint64_t kvt_oracle_deviation(const void *src, size_t n, kvt_hash_t hash, uint32_t layer,
                              uint32_t plane, uint32_t rank)
{
    uint64_t seed = s_seed(hash, layer, plane, rank);
    const uint8_t *bytes = src;
    size_t words = n / 8;
    uint64_t diff = s_diff(bytes, 0, words, seed);
    if (n % 8) {
        uint64_t w = 0, want = s_word(seed, words);
        memcpy(&w, bytes + 8 * words, n % 8);
        diff |= (w ^ want) & (~0ull >> (64 - 8 * (n % 8)));
    }
    return diff;
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
    //  One pass: read, carry the deviation, write, and compare the result
    //  with state(B); only a wrong result is walked again.
    uint64_t diff = s_advance(d, s, words, sa, ma, sb, mb);
    if (n % 8) {
        uint64_t w = 0, eb = s_word(sb, words) & mb;
        memcpy(&w, s + 8 * words, n % 8);
        w ^= eb ^ (s_word(sa, words) & ma);
        memcpy(d + 8 * words, &w, n % 8);
        diff |= (w ^ eb) & (~0ull >> (64 - 8 * (n % 8)));
    }
    return diff == 0 ? n : kvt_oracle_state_mismatch(d, n, to_b, rank);
}
