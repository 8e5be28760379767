/*  test_pool_value.c — the CPU pool's VALUE eviction order (Greedy-Dual-
    Size-Frequency, docs/store.md §4): hits protect an object, state images
    weigh more than chunks and go with their chunk, L inflation ages old
    favourites out, ties keep a lookup's prefix, pins and run-reach work as
    in LRU order. Each test contrasts LRU where the orders differ. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kvtier/kvt_pool.h"

#define UNIT 4096u //  pool alignment used by these tests
#define NS   7u    //  namespace used by these tests

static uint64_t s_now; //  manual clock, ns (never advanced: no TTL expires)

static uint64_t s_clock(void *arg)
{
    (void)arg;
    return s_now;
}

static kvt_hash_t s_key(uint64_t i)
{
    return (kvt_hash_t){.hi = 0x5EED000000000000ull ^ (i * 0x9E3779B97F4A7C15ull), .lo = i};
}

//  A pool of `units` 4 KiB units in eviction order `evict`.
static kvt_pool_t *s_pool(size_t units, kvt_pool_evict_t evict)
{
    kvt_pool_config_t cfg;
    kvt_pool_config_defaults(&cfg);
    cfg.capacity_bytes = units * UNIT;
    cfg.align = UNIT;
    cfg.max_objects = 64;
    cfg.clock = s_clock;
    cfg.evict = evict;
    char err[256] = "";
    kvt_pool_t *pool = kvt_pool_new(&cfg, err, sizeof(err));
    cr_assert_not_null(pool, "kvt_pool_new: %s", err);
    return pool;
}

static int s_put_kind(kvt_pool_t *pool, uint64_t i, kvt_obj_kind_t kind, size_t units)
{
    static uint8_t buf[8 * UNIT];
    cr_assert(units * UNIT <= sizeof(buf));
    return kvt_pool_put(pool, NS, s_key(i), kind, buf, units * UNIT);
}

static void s_put(kvt_pool_t *pool, uint64_t i)
{
    int rc = s_put_kind(pool, i, KVT_OBJ_KV, 1);
    cr_assert_eq(rc, KVT_STORE_OK, "put %llu: %s", (unsigned long long)i, kvt_store_strerror(rc));
}

static void s_put_image(kvt_pool_t *pool, uint64_t i)
{
    int rc = s_put_kind(pool, i, KVT_OBJ_STATE, 1);
    cr_assert_eq(rc, KVT_STORE_OK, "image %llu: %s", (unsigned long long)i, kvt_store_strerror(rc));
}

static bool s_has(kvt_pool_t *pool, uint64_t i)
{
    return kvt_pool_contains(pool, NS, s_key(i), KVT_OBJ_KV);
}

static bool s_has_image(kvt_pool_t *pool, uint64_t i)
{
    return kvt_pool_contains(pool, NS, s_key(i), KVT_OBJ_STATE);
}

static void s_touch(kvt_pool_t *pool, uint64_t i, int times)
{
    for (int t = 0; t < times; t++)
        cr_assert_eq(kvt_pool_touch(pool, NS, s_key(i), KVT_OBJ_KV), KVT_TOUCH_REFRESHED);
}

//  A use: a lookup that finds object i (no lease).
static void s_hit(kvt_pool_t *pool, uint64_t i, int times)
{
    kvt_hash_t k = s_key(i);
    for (int t = 0; t < times; t++)
        cr_assert_eq(kvt_pool_lookup(pool, NS, &k, 1, KVT_OBJ_KV, 0, NULL), 1);
}

//  Objects 0..3 fill a 4-unit pool; 0 is hit three times, then 1, 2, 3
//  once each (so 0's last refresh is the oldest). Then 4 needs room.
static void s_hits_scenario(kvt_pool_t *pool)
{
    for (uint64_t i = 0; i < 4; i++)
        s_put(pool, i);
    s_hit(pool, 0, 3);
    for (uint64_t i = 1; i < 4; i++)
        s_hit(pool, i, 1);
    s_put(pool, 4);
}

Test(pool_value, an_object_hit_often_survives_a_newer_object_hit_once)
{
    kvt_pool_t *lru = s_pool(4, KVT_POOL_EVICT_LRU);
    s_hits_scenario(lru);
    cr_assert_not(s_has(lru, 0), "LRU takes the least recent, however often it was hit");
    cr_assert(s_has(lru, 1));
    kvt_pool_destroy(&lru);

    kvt_pool_t *pool = s_pool(4, KVT_POOL_EVICT_VALUE);
    s_hits_scenario(pool);
    cr_assert(s_has(pool, 0), "four uses outweigh one, though 0's last use is oldest");
    cr_assert_not(s_has(pool, 1), "of the once-hit objects, the oldest refresh goes");
    cr_assert(s_has(pool, 2) && s_has(pool, 3) && s_has(pool, 4));
    kvt_pool_stats_t st;
    kvt_pool_stats(pool, &st);
    cr_assert_eq(st.evictions, 1);
    kvt_pool_destroy(&pool);
}

//  8 units: a lone image (key 100), chunks 0, 1, 2 with the image at chunk
//  2's end (same key 2), chunks 3, 4, 5. Then chunks 6, 7, 8 need room.
static void s_images_scenario(kvt_pool_t *pool)
{
    s_put_image(pool, 100);
    for (uint64_t i = 0; i < 3; i++)
        s_put(pool, i);
    s_put_image(pool, 2);
    for (uint64_t i = 3; i < 6; i++)
        s_put(pool, i);
    for (uint64_t i = 6; i < 9; i++)
        s_put(pool, i);
}

Test(pool_value, state_images_outweigh_chunks_and_a_chunks_image_goes_with_it)
{
    kvt_pool_t *lru = s_pool(8, KVT_POOL_EVICT_LRU);
    s_images_scenario(lru);
    cr_assert_not(s_has_image(lru, 100), "LRU takes the oldest object, an image or not");
    kvt_pool_destroy(&lru);

    kvt_pool_t *pool = s_pool(8, KVT_POOL_EVICT_VALUE);
    s_images_scenario(pool);
    cr_assert(s_has_image(pool, 100), "an image weighs more per byte than a chunk");
    cr_assert_not(s_has(pool, 0) || s_has(pool, 1) || s_has(pool, 2), "the oldest chunks go");
    cr_assert_not(s_has_image(pool, 2), "the image at chunk 2's end went with chunk 2");
    for (uint64_t i = 3; i < 9; i++)
        cr_assert(s_has(pool, i), "chunk %llu", (unsigned long long)i);
    kvt_pool_stats_t st;
    kvt_pool_stats(pool, &st);
    cr_assert_eq(st.evicted_orphan_images, 1);
    cr_assert_eq(st.evictions, 4, "three chunks and the orphan image");
    cr_assert_eq(st.evicted_bytes, 4 * UNIT);
    kvt_pool_destroy(&pool);
}

Test(pool_value, an_object_hit_many_times_long_ago_ages_out_as_newer_ones_are_evicted)
{
    kvt_pool_t *pool = s_pool(4, KVT_POOL_EVICT_VALUE);
    s_put(pool, 0);
    s_hit(pool, 0, 5); //  H = 6: six uses
    for (uint64_t i = 1; i < 4; i++)
        s_put(pool, i);
    //  A stream of objects used once: each new one evicts one. Without L
    //  rising to what is evicted, a new object's H would stay 1 and object
    //  0 would stay forever.
    uint64_t gone_at = 0;
    for (uint64_t i = 4; i < 64 && gone_at == 0; i++) {
        s_put(pool, i);
        if (!s_has(pool, 0))
            gone_at = i;
    }
    cr_assert_neq(gone_at, 0, "object 0 never aged out");
    cr_assert_gt(gone_at, 9, "its hits protected it for a while (gone at put %llu)",
                 (unsigned long long)gone_at);
    kvt_pool_destroy(&pool);
}

Test(pool_value, a_lookups_refresh_order_makes_pressure_take_the_deepest_key_first)
{
    kvt_pool_t *pool = s_pool(4, KVT_POOL_EVICT_VALUE);
    for (uint64_t i = 0; i < 4; i++) //  prefix order: the prefix is put first
        s_put(pool, i);
    kvt_hash_t keys[4] = {s_key(0), s_key(1), s_key(2), s_key(3)};
    cr_assert_eq(kvt_pool_lookup(pool, NS, keys, 4, KVT_OBJ_KV, 0, NULL), 4);
    s_put(pool, 10); //  equal H: the tie-break takes the deepest key's older refresh
    cr_assert_not(s_has(pool, 3));
    cr_assert(s_has(pool, 0) && s_has(pool, 1) && s_has(pool, 2));
    s_put(pool, 11);
    cr_assert_not(s_has(pool, 2));
    cr_assert(s_has(pool, 0) && s_has(pool, 1));
    kvt_pool_destroy(&pool);
}

Test(pool_value, pinned_objects_are_never_evicted_and_a_short_run_evicts_nothing)
{
    kvt_pool_t *pool = s_pool(4, KVT_POOL_EVICT_VALUE);
    kvt_holder_t h = 0;
    cr_assert_eq(kvt_pool_holder_add(pool, "load", &h), KVT_STORE_OK);
    for (uint64_t i = 0; i < 4; i++) //  A B C D in address order
        s_put(pool, i);
    kvt_lease_t la = {0}, lc = {0};
    kvt_obj_view_t v;
    cr_assert_eq(kvt_pool_acquire(pool, NS, s_key(0), KVT_OBJ_KV, h, &la, &v), KVT_STORE_OK);
    cr_assert_eq(kvt_pool_acquire(pool, NS, s_key(2), KVT_OBJ_KV, h, &lc, &v), KVT_STORE_OK);
    //  A(pinned) B C(pinned) D: no two adjacent evictable units.
    cr_assert_eq(s_put_kind(pool, 9, KVT_OBJ_KV, 2), KVT_STORE_ENOSPACE);
    kvt_pool_stats_t st;
    kvt_pool_stats(pool, &st);
    cr_assert_eq(st.evictions, 0);
    cr_assert_eq(st.alloc_failed_pinned, 1);
    //  One unit at a time: only B and D can go, A and C stay whatever comes.
    for (uint64_t i = 20; i < 30; i++)
        s_put(pool, i);
    cr_assert(s_has(pool, 0) && s_has(pool, 2), "pinned objects are never evicted");
    //  Released, C is evictable again: C and its free-or-evictable
    //  neighbour make the 2-unit extent.
    cr_assert_eq(kvt_pool_release(pool, &lc), KVT_STORE_OK);
    cr_assert_eq(s_put_kind(pool, 9, KVT_OBJ_KV, 2), KVT_STORE_OK);
    cr_assert_not(s_has(pool, 2));
    cr_assert(s_has(pool, 0));
    kvt_pool_release(pool, &la);
    kvt_pool_destroy(&pool);
}

Test(pool_value, eviction_takes_only_the_run_the_allocation_needs_and_keeps_the_rest_in_order)
{
    kvt_pool_t *pool = s_pool(6, KVT_POOL_EVICT_VALUE);
    kvt_holder_t h = 0;
    cr_assert_eq(kvt_pool_holder_add(pool, "load", &h), KVT_STORE_OK);
    for (uint64_t i = 0; i < 6; i++) //  A B C D E F in address and priority order
        s_put(pool, i);
    kvt_lease_t lb = {0};
    kvt_obj_view_t v;
    cr_assert_eq(kvt_pool_acquire(pool, NS, s_key(1), KVT_OBJ_KV, h, &lb, &v), KVT_STORE_OK);
    //  A is lowest but pinned B bounds its run: C and D go, A stays.
    cr_assert_eq(s_put_kind(pool, 9, KVT_OBJ_KV, 2), KVT_STORE_OK);
    kvt_pool_stats_t st;
    kvt_pool_stats(pool, &st);
    cr_assert_eq(st.evictions, 2);
    cr_assert(s_has(pool, 0), "A was not needed");
    cr_assert_not(s_has(pool, 2) || s_has(pool, 3));
    cr_assert(s_has(pool, 4) && s_has(pool, 5));
    //  The walk set A aside and put it back: it is still the lowest, so the
    //  next one-unit put takes it (not E, F or the new object).
    cr_assert_eq(kvt_pool_release(pool, &lb), KVT_STORE_OK);
    s_put(pool, 30);
    cr_assert_not(s_has(pool, 0), "A is next");
    cr_assert(s_has(pool, 1) && s_has(pool, 4) && s_has(pool, 5) && s_has(pool, 9));
    kvt_pool_destroy(&pool);
}

//  The state index touches a held image every ~500 ms to keep it alive: a
//  touch renews recency (the object is priced again against the current
//  L, its refresh the newest) but is no use. Objects 0..3 fill the pool;
//  0 is touched ten times, 1 used once; then three puts need room. The
//  untouched 2 and 3 go first (3 after 2, though 0 was put before it: the
//  touches renewed 0), then 0 (H = L + 1), not 1 (H = L + 2).
Test(pool_value, a_touch_renews_recency_but_is_not_a_hit)
{
    kvt_pool_t *pool = s_pool(4, KVT_POOL_EVICT_VALUE);
    for (uint64_t i = 0; i < 4; i++)
        s_put(pool, i);
    s_touch(pool, 0, 10);
    s_hit(pool, 1, 1);
    s_put(pool, 4);
    cr_assert_not(s_has(pool, 2));
    s_put(pool, 5);
    cr_assert_not(s_has(pool, 3), "the older refresh of two unused objects goes");
    cr_assert(s_has(pool, 0), "touched after 3 was put: its recency renewed");
    s_put(pool, 6);
    cr_assert_not(s_has(pool, 0), "ten touches are no use");
    cr_assert(s_has(pool, 1), "one use outweighs them");
    kvt_pool_stats_t st;
    kvt_pool_stats(pool, &st);
    cr_assert_eq(st.touches_refreshed, 10);
    cr_assert_eq(st.evictions, 3);
    kvt_pool_destroy(&pool);
}

Test(pool_value, bad_value_settings_are_refused_with_their_name_and_value)
{
    kvt_pool_config_t cfg;
    kvt_pool_config_defaults(&cfg);
    cfg.capacity_bytes = 4 * UNIT;
    cfg.evict = (kvt_pool_evict_t)7;
    char err[256] = "";
    cr_assert_null(kvt_pool_new(&cfg, err, sizeof(err)));
    cr_assert(strstr(err, "pool.evict=7"), "%s", err);
    cfg.evict = KVT_POOL_EVICT_VALUE;
    cfg.value_w_state = -2;
    cr_assert_null(kvt_pool_new(&cfg, err, sizeof(err)));
    cr_assert(strstr(err, "pool.value_w_state=-2"), "%s", err);
    cfg.value_w_state = 0;
    cfg.value_w_kv = NAN;
    cr_assert_null(kvt_pool_new(&cfg, err, sizeof(err)));
    cr_assert(strstr(err, "pool.value_w_kv"), "%s", err);
}

Test(pool_value, bad_value_settings_are_refused_before_the_arena_is_mapped)
{
    //  An arena no address space holds (4 EiB): mapping it fails, so a
    //  refusal that names the setting, not the mapping, came first.
    kvt_pool_config_t cfg;
    kvt_pool_config_defaults(&cfg);
    cfg.capacity_bytes = (size_t)1 << 62;
    char err[256] = "";
    cr_assert_null(kvt_pool_new(&cfg, err, sizeof(err)));
    cr_assert(strstr(err, "cannot map the arena"), "the arena cannot be mapped: %s", err);
    cfg.evict = (kvt_pool_evict_t)7;
    cr_assert_null(kvt_pool_new(&cfg, err, sizeof(err)));
    cr_assert(strstr(err, "pool.evict=7"), "%s", err);
    cfg.evict = KVT_POOL_EVICT_VALUE;
    cfg.value_w_kv = -1;
    cr_assert_null(kvt_pool_new(&cfg, err, sizeof(err)));
    cr_assert(strstr(err, "pool.value_w_kv=-1"), "%s", err);
    cfg.value_w_kv = 0;
    cfg.value_w_state = INFINITY;
    cr_assert_null(kvt_pool_new(&cfg, err, sizeof(err)));
    cr_assert(strstr(err, "pool.value_w_state=inf"), "%s", err);
}
