/*  The content oracle: a filled range checks, every wrong byte is found and
    located, and bytes made for another (prefix hash, layer, plane, rank) are
    refused. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "replay/kvt_oracle.h"

static const kvt_hash_t s_h = {0x0123456789ABCDEFull, 0xFEDCBA9876543210ull};

//  Sizes around the word (8 B) and the compare run (256 B) boundaries, and
//  the replay's default block (16 tokens x 16 B).
static const size_t s_sizes[] = {1, 7, 8, 9, 255, 256, 257, 263, 1000, 4096, 4099};
#define S_NSIZES (sizeof s_sizes / sizeof s_sizes[0])

static uint8_t *s_filled(size_t n, kvt_hash_t h, uint32_t layer, uint32_t plane, uint32_t rank)
{
    uint8_t *b = malloc(n);
    cr_assert_not_null(b);
    kvt_oracle_fill(b, n, h, layer, plane, rank);
    return b;
}

Test(oracle, fill_then_check_passes)
{
    for (size_t s = 0; s < S_NSIZES; s++) {
        size_t n = s_sizes[s];
        uint8_t *b = s_filled(n, s_h, 3, 1, 2);
        cr_assert(kvt_oracle_check(b, n, s_h, 3, 1, 2), "size %zu", n);
        cr_assert_eq(kvt_oracle_mismatch(b, n, s_h, 3, 1, 2), n, "size %zu", n);
        //  The state tag is a layer like any other.
        kvt_oracle_fill(b, n, s_h, KVT_ORACLE_STATE, 0, 2);
        cr_assert(kvt_oracle_check(b, n, s_h, KVT_ORACLE_STATE, 0, 2), "size %zu", n);
        free(b);
    }
    cr_assert(kvt_oracle_check(NULL, 0, s_h, 0, 0, 0), "an empty range has no wrong byte");
}

Test(oracle, fill_writes_exactly_n_bytes_and_check_reads_no_further)
{
    for (size_t s = 0; s < S_NSIZES; s++) {
        size_t n = s_sizes[s];
        uint8_t *b = malloc(n + 16);
        memset(b, 0xA5, n + 16);
        kvt_oracle_fill(b, n, s_h, 0, 0, 0);
        for (size_t i = n; i < n + 16; i++)
            cr_assert_eq(b[i], 0xA5, "size %zu: fill wrote byte %zu", n, i);
        cr_assert(kvt_oracle_check(b, n, s_h, 0, 0, 0), "size %zu", n);
        free(b);
    }
}

Test(oracle, flipped_byte_at_first_middle_and_last_fails_and_says_where)
{
    for (size_t s = 0; s < S_NSIZES; s++) {
        size_t n = s_sizes[s];
        uint8_t *b = s_filled(n, s_h, 1, 0, 0);
        size_t at[3] = {0, n / 2, n - 1};
        for (int k = 0; k < 3; k++) {
            b[at[k]] ^= 0x01;
            cr_assert(!kvt_oracle_check(b, n, s_h, 1, 0, 0), "size %zu: byte %zu", n, at[k]);
            cr_assert_eq(kvt_oracle_mismatch(b, n, s_h, 1, 0, 0), at[k], "size %zu", n);
            b[at[k]] ^= 0x01;
        }
        cr_assert(kvt_oracle_check(b, n, s_h, 1, 0, 0));
        free(b);
    }
}

Test(oracle, two_wrong_bytes_report_the_first)
{
    size_t n = 4096;
    uint8_t *b = s_filled(n, s_h, 0, 1, 0);
    b[3000] ^= 0x10;
    b[700] ^= 0x80;
    cr_assert_eq(kvt_oracle_mismatch(b, n, s_h, 0, 1, 0), 700);
    free(b);
}

//  A compare that skips a prefix, a suffix, a stride of words or some bytes
//  of a word misses one of these flips.
Test(oracle, every_byte_of_the_range_is_compared)
{
    size_t sizes[] = {263, 1000, 4099};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t n = sizes[s];
        uint8_t *b = s_filled(n, s_h, 2, 1, 3);
        for (size_t i = 0; i < n; i++) {
            uint8_t bit = (uint8_t)(1u << (i % 8));
            b[i] ^= bit;
            size_t got = kvt_oracle_mismatch(b, n, s_h, 2, 1, 3);
            b[i] ^= bit;
            if (got != i)
                cr_assert_fail("size %zu: byte %zu flipped, mismatch says %zu", n, i, got);
        }
        cr_assert(kvt_oracle_check(b, n, s_h, 2, 1, 3));
        free(b);
    }
}

Test(oracle, bytes_of_another_hash_layer_plane_or_rank_fail)
{
    size_t n = 256;
    uint8_t *b = s_filled(n, s_h, 1, 1, 1);
    kvt_hash_t hi = s_h, lo = s_h;
    hi.hi ^= 1;
    lo.lo ^= 1ull << 63;
    cr_assert(kvt_oracle_check(b, n, s_h, 1, 1, 1));
    cr_assert(!kvt_oracle_check(b, n, hi, 1, 1, 1), "another prefix hash (high half)");
    cr_assert(!kvt_oracle_check(b, n, lo, 1, 1, 1), "another prefix hash (low half)");
    cr_assert(!kvt_oracle_check(b, n, s_h, 0, 1, 1), "another layer");
    cr_assert(!kvt_oracle_check(b, n, s_h, KVT_ORACLE_STATE, 1, 1), "state bytes");
    cr_assert(!kvt_oracle_check(b, n, s_h, 1, 0, 1), "another plane");
    cr_assert(!kvt_oracle_check(b, n, s_h, 1, 1, 0), "another rank");
    cr_assert(!kvt_oracle_check(b, n, s_h, 1, 1, 2), "another rank");
    //  Layer and plane do not stand in for each other.
    uint8_t *swapped = s_filled(n, s_h, 2, 1, 1);
    uint8_t *other = s_filled(n, s_h, 1, 2, 1);
    cr_assert(!kvt_oracle_check(other, n, s_h, 2, 1, 1), "plane and layer swapped");
    cr_assert(!kvt_oracle_check(swapped, n, s_h, 1, 2, 1), "plane and layer swapped");
    //  Another key is wrong in its first byte already (every word differs).
    cr_assert_lt(kvt_oracle_mismatch(b, n, s_h, 1, 1, 0), 8);
    free(swapped);
    free(other);
    free(b);
}

Test(oracle, state_bytes_are_the_state_tag_of_the_hash_at_b_and_rank)
{
    const size_t n = 1000;
    uint8_t *b = malloc(n);
    cr_assert_not_null(b);
    kvt_oracle_state_fill(b, n, s_h, 1);
    cr_assert_eq(kvt_oracle_state_mismatch(b, n, s_h, 1), n);
    cr_assert(kvt_oracle_check(b, n, s_h, KVT_ORACLE_STATE, 0, 1), "PRF (hash at B, state, rank)");
    cr_assert_lt(kvt_oracle_state_mismatch(b, n, s_h, 0), n, "another rank's state differs");
    kvt_hash_t other = {s_h.hi, s_h.lo ^ 1};
    cr_assert_lt(kvt_oracle_state_mismatch(b, n, other, 1), n, "another boundary's state differs");
    //  KV bytes of layer 0 for the same hash are not state bytes.
    kvt_oracle_fill(b, n, s_h, 0, 0, 1);
    cr_assert_lt(kvt_oracle_state_mismatch(b, n, s_h, 1), n);
    b[n - 1] ^= 1;
    kvt_oracle_state_fill(b, n, s_h, 1);
    b[n - 1] ^= 1;
    cr_assert_eq(kvt_oracle_state_mismatch(b, n, s_h, 1), n - 1, "says where");
    free(b);
}

//  The state recurrence: advancing from the state at A gives the state at B
//  exactly; from any other bytes the deviation is carried into the result
//  unchanged (and reported where it is); the zero hash is the initial
//  state, all zeros.
Test(oracle, state_advance_carries_any_deviation_of_the_state_read)
{
    static const kvt_hash_t b = {0x1111ull, 0x2222ull}, zero = {0, 0};
    for (size_t s = 0; s < S_NSIZES; s++) {
        size_t n = s_sizes[s];
        uint8_t *st = malloc(n), *out = malloc(n);
        cr_assert(st && out);
        kvt_oracle_state_fill(st, n, zero, 1);
        for (size_t i = 0; i < n; i++)
            cr_assert_eq(st[i], 0, "the initial state is zeros (size %zu)", n);
        cr_assert_eq(kvt_oracle_state_mismatch(st, n, zero, 1), n);
        //  From the initial state to A, from A to B, in place.
        cr_assert_eq(kvt_oracle_state_advance(st, st, n, zero, s_h, 1), n, "size %zu", n);
        cr_assert_eq(kvt_oracle_state_mismatch(st, n, s_h, 1), n);
        cr_assert_eq(kvt_oracle_state_advance(out, st, n, s_h, b, 1), n, "size %zu", n);
        cr_assert_eq(kvt_oracle_state_mismatch(out, n, b, 1), n);
        //  A wrong byte read is a wrong byte written, at the same place.
        st[n / 2] ^= 0x10;
        cr_assert_eq(kvt_oracle_state_advance(out, st, n, s_h, b, 1), n / 2, "size %zu", n);
        cr_assert_eq(out[n / 2] ^ 0x10, (kvt_oracle_state_fill(st, n, b, 1), st[n / 2]),
                     "carried unchanged");
        //  Another request's state read (the state at B, not at A) is wrong too.
        kvt_oracle_state_fill(st, n, b, 1);
        cr_assert_lt(kvt_oracle_state_advance(out, st, n, s_h, b, 1), n, "size %zu", n);
        //  A stale state read by a forward from token 0.
        kvt_oracle_state_fill(st, n, b, 1);
        cr_assert_lt(kvt_oracle_state_advance(st, st, n, zero, s_h, 1), n, "size %zu", n);
        free(st);
        free(out);
    }
}

//  The stream as kvt_oracle.c defines it, written out again: word i of
//  (hash, layer, plane, rank) is mix (seed ^ i * K1) with seed the XXH3 of
//  the four inputs.
static uint64_t s_ref_word(kvt_hash_t h, uint32_t layer, uint32_t plane, uint32_t rank, size_t i)
{
    uint64_t in[4] = {h.hi, h.lo, ((uint64_t)layer << 32) | plane, rank};
    uint64_t seed = XXH3_64bits(in, sizeof in);
    uint64_t z = (seed ^ (i * 0x9E3779B97F4A7C15ull)) * 0xBF58476D1CE4E5B9ull;
    return z ^ (z >> 31);
}

//  The vectorised loops and the baseline ones write, accept and advance
//  the same bytes, which are the stream's (a replay's oracle does not
//  depend on the CPU it runs on).
Test(oracle, simd_and_baseline_loops_give_the_same_bytes)
{
    const size_t n = 205824 + 5; //  a qwen3-next-like state slot, and a tail
    uint8_t *a = malloc(n), *b = malloc(n), *c = malloc(n);
    cr_assert(a && b && c);
    kvt_oracle_use_simd(false);
    kvt_oracle_fill(a, n, s_h, 3, 1, 2);
    bool v4 = kvt_oracle_use_simd(true);
    kvt_oracle_fill(b, n, s_h, 3, 1, 2);
    cr_assert_eq(memcmp(a, b, n), 0, "fill (avx-512 loops: %d)", v4);
    for (size_t i = 0; i < n / 8; i += 997) {
        uint64_t w, want = s_ref_word(s_h, 3, 1, 2, i);
        memcpy(&w, b + 8 * i, 8);
        cr_assert_eq(w, want, "word %zu is the stream's", i);
    }
    static const kvt_hash_t hb = {0x1111ull, 0x2222ull};
    for (int simd = 0; simd <= 1; simd++) {
        kvt_oracle_use_simd(simd);
        cr_assert_eq(kvt_oracle_mismatch(a, n, s_h, 3, 1, 2), n, "simd %d", simd);
        a[n / 3] ^= 4;
        cr_assert_eq(kvt_oracle_mismatch(a, n, s_h, 3, 1, 2), n / 3, "simd %d", simd);
        a[n / 3] ^= 4;
    }
    //  Both advance the state at s_h (c) to the state at hb, into a and b.
    kvt_oracle_state_fill(c, n, s_h, 1);
    kvt_oracle_use_simd(false);
    cr_assert_eq(kvt_oracle_state_advance(a, c, n, s_h, hb, 1), n);
    kvt_oracle_use_simd(true);
    cr_assert_eq(kvt_oracle_state_advance(b, c, n, s_h, hb, 1), n);
    cr_assert_eq(memcmp(a, b, n), 0, "advance");
    kvt_oracle_use_simd(true);
    free(a);
    free(b);
    free(c);
}
