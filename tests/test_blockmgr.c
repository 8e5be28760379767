/*  The block manager (kvt_blockmgr): HBM blocks, the prefix-hash index,
    reference counts and the LRU of free cached blocks, driven directly. */
#include <criterion/criterion.h>

#include "actors/scheduler/kvt_blockmgr.h"

static kvt_hash_t H(uint64_t x)
{
    kvt_hash_t h = {x * 7 + 1, x};
    return h;
}

// ------------------------------------------------------- block manager ----

Test(blockmgr, alloc_then_free_returns_every_block)
{
    kvt_blockmgr_t *bm = kvt_blockmgr_new(8, 4);
    uint32_t b[8];
    cr_assert_eq(kvt_blockmgr_alloc(bm, 8, b), 0);
    cr_assert_eq(kvt_blockmgr_available(bm), 0);
    cr_assert_eq(kvt_blockmgr_alloc(bm, 1, b), -1, "over-allocation must fail, not block");
    for (int i = 0; i < 8; i++)
        kvt_blockmgr_unref(bm, b[i]);
    cr_assert_eq(kvt_blockmgr_available(bm), 8);
    cr_assert_eq(kvt_blockmgr_in_use(bm), 0);
    kvt_blockmgr_destroy(&bm);
    cr_assert_null(bm);
}

Test(blockmgr, cached_blocks_are_shared_and_evicted_oldest_first)
{
    kvt_blockmgr_t *bm = kvt_blockmgr_new(4, 2);
    uint32_t toks[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    uint32_t b[4];
    cr_assert_eq(kvt_blockmgr_alloc(bm, 4, b), 0);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(kvt_blockmgr_register(bm, b[i], H(i), toks + 2 * i), 0);
    //  Release in order 2, 0, 3, 1: the LRU's old end is block 2.
    int order[4] = {2, 0, 3, 1};
    for (int i = 0; i < 4; i++)
        kvt_blockmgr_unref(bm, b[order[i]]);
    kvt_hash_t hs[4] = {H(0), H(1), H(2), H(3)};
    uint32_t got[4];
    cr_assert_eq(kvt_blockmgr_match(bm, hs, toks, 4, got), 4);
    //  Allocating one block evicts the oldest free cached block (b[2]).
    uint32_t nb;
    cr_assert_eq(kvt_blockmgr_alloc(bm, 1, &nb), 0);
    cr_assert_eq(nb, b[2]);
    cr_assert_eq(kvt_blockmgr_match(bm, hs, toks, 4, got), 2, "prefix stops at the evicted block");
    kvt_blockmgr_stats_t st;
    kvt_blockmgr_stats(bm, &st);
    cr_assert_eq(st.evicted, 1);
    kvt_blockmgr_destroy(&bm);
}

Test(blockmgr, referenced_cached_block_is_never_evicted)
{
    kvt_blockmgr_t *bm = kvt_blockmgr_new(2, 1);
    uint32_t t[2] = {5, 6};
    uint32_t b[2];
    kvt_blockmgr_alloc(bm, 2, b);
    kvt_blockmgr_register(bm, b[0], H(0), t);
    kvt_blockmgr_register(bm, b[1], H(1), t + 1);
    kvt_blockmgr_unref(bm, b[0]);
    kvt_blockmgr_unref(bm, b[1]);
    kvt_blockmgr_ref(bm, b[0]); //  a request shares block 0 again
    uint32_t nb[2];
    cr_assert_eq(kvt_blockmgr_alloc(bm, 2, nb), -1);
    cr_assert_eq(kvt_blockmgr_alloc(bm, 1, nb), 0);
    cr_assert_eq(nb[0], b[1]);
    kvt_blockmgr_destroy(&bm);
}

Test(blockmgr, token_mismatch_on_hash_hit_is_a_miss)
{
    kvt_blockmgr_t *bm = kvt_blockmgr_new(2, 2);
    uint32_t t[2] = {1, 2}, other[2] = {1, 3};
    uint32_t b;
    kvt_blockmgr_alloc(bm, 1, &b);
    kvt_blockmgr_register(bm, b, H(9), t);
    kvt_hash_t h = H(9);
    uint32_t got;
    cr_assert_eq(kvt_blockmgr_match(bm, &h, other, 1, &got), 0);
    cr_assert_eq(kvt_blockmgr_match(bm, &h, t, 1, &got), 1);
    kvt_blockmgr_stats_t st;
    kvt_blockmgr_stats(bm, &st);
    cr_assert_eq(st.token_mismatch, 1);
    kvt_blockmgr_destroy(&bm);
}

Test(blockmgr, duplicate_hash_keeps_first_block)
{
    kvt_blockmgr_t *bm = kvt_blockmgr_new(2, 1);
    uint32_t t[1] = {1};
    uint32_t b[2];
    kvt_blockmgr_alloc(bm, 2, b);
    cr_assert_eq(kvt_blockmgr_register(bm, b[0], H(1), t), 0);
    cr_assert_eq(kvt_blockmgr_register(bm, b[1], H(1), t), 1);
    kvt_blockmgr_unref(bm, b[1]); //  private: back to the free stack
    kvt_blockmgr_unref(bm, b[0]);
    kvt_hash_t h = H(1);
    uint32_t got;
    cr_assert_eq(kvt_blockmgr_match(bm, &h, t, 1, &got), 1);
    cr_assert_eq(got, b[0]);
    kvt_blockmgr_destroy(&bm);
}
