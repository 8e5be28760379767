/*  test_store.c — the CPU pool (kvt_pool): LRU order and refresh, lookup's
    prefix-before-suffix refresh, pins and leases, allocation failure without
    blocking and without useless evictions, write / read states, TTL reclaim
    (expired reservations quarantined, orphan handles refused), capacity
    accounting, the arena allocator. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvtier/kvt_pool.h"
#include "store/kvt_extent.h"

#define UNIT 4096u //  pool alignment used by these tests
#define NS   7u    //  namespace used by these tests

typedef struct {
    uint64_t now;   //  manual clock, ns
    int lines;      //  log lines received
    char last[256]; //  last log line
} env_t;

static uint64_t s_clock(void *arg)
{
    return ((env_t *)arg)->now;
}

static void s_log(void *arg, int level, const char *line)
{
    (void)level;
    env_t *env = arg;
    env->lines++;
    snprintf(env->last, sizeof(env->last), "%s", line);
}

static kvt_hash_t s_key(uint64_t i)
{
    return (kvt_hash_t){.hi = 0xABCD000000000000ull ^ (i * 0x9E3779B97F4A7C15ull), .lo = i};
}

//  A pool of `units` 4 KiB units on a manual clock, TTL 1000 ms.
static kvt_pool_t *s_pool(env_t *env, size_t units)
{
    kvt_pool_config_t cfg;
    kvt_pool_config_defaults(&cfg);
    cfg.capacity_bytes = units * UNIT;
    cfg.align = UNIT;
    cfg.max_objects = 64;
    cfg.ttl_ms = 1000;
    cfg.clock = s_clock;
    cfg.clock_arg = env;
    cfg.log = s_log;
    cfg.log_arg = env;
    char err[256] = "";
    kvt_pool_t *pool = kvt_pool_new(&cfg, err, sizeof(err));
    cr_assert_not_null(pool, "kvt_pool_new: %s", err);
    return pool;
}

static void s_put(kvt_pool_t *pool, uint64_t i, size_t size)
{
    uint8_t *buf = malloc(size);
    memset(buf, (int)(i & 0xff), size);
    int rc = kvt_pool_put(pool, NS, s_key(i), KVT_OBJ_KV, buf, size);
    free(buf);
    cr_assert_eq(rc, KVT_STORE_OK, "put %llu: %s", (unsigned long long)i, kvt_store_strerror(rc));
}

static bool s_has(kvt_pool_t *pool, uint64_t i)
{
    return kvt_pool_contains(pool, NS, s_key(i), KVT_OBJ_KV);
}

static kvt_holder_t s_holder(kvt_pool_t *pool, const char *name)
{
    kvt_holder_t h = 0;
    cr_assert_eq(kvt_pool_holder_add(pool, name, &h), KVT_STORE_OK);
    return h;
}

// ------------------------------------------------------------------ LRU --

Test(pool, lru_evicts_the_oldest_object_first)
{
    env_t env = {0};
    kvt_pool_t *pool = s_pool(&env, 4);
    for (uint64_t i = 0; i < 4; i++)
        s_put(pool, i, UNIT);
    cr_assert_eq(kvt_pool_touch(pool, NS, s_key(0), KVT_OBJ_KV), KVT_TOUCH_REFRESHED);
    s_put(pool, 4, UNIT); //  evicts 1: 0 was refreshed
    cr_assert(s_has(pool, 0));
    cr_assert_not(s_has(pool, 1));
    cr_assert(s_has(pool, 2) && s_has(pool, 3) && s_has(pool, 4));
    s_put(pool, 5, UNIT); //  evicts 2
    cr_assert_not(s_has(pool, 2));
    kvt_pool_stats_t st;
    kvt_pool_stats(pool, &st);
    cr_assert_eq(st.evictions, 2);
    cr_assert_eq(st.evicted_bytes, 2 * UNIT);
    kvt_pool_destroy(&pool);
    cr_assert_null(pool);
}

Test(pool, lookup_refreshes_deepest_first_so_suffixes_are_evicted_before_prefixes)
{
    env_t env = {0};
    kvt_pool_t *pool = s_pool(&env, 4);
    //  Put in prefix order so that, without the lookup's refresh, the prefix
    //  is oldest.
    for (uint64_t i = 0; i < 4; i++)
        s_put(pool, i, UNIT);
    kvt_hash_t keys[4] = {s_key(0), s_key(1), s_key(2), s_key(3)};
    cr_assert_eq(kvt_pool_lookup(pool, NS, keys, 4, KVT_OBJ_KV, 0, NULL), 4);
    s_put(pool, 10, UNIT); //  must take the deepest key (3), not the prefix
    cr_assert_not(s_has(pool, 3));
    cr_assert(s_has(pool, 0) && s_has(pool, 1) && s_has(pool, 2));
    s_put(pool, 11, UNIT); //  then 2
    cr_assert_not(s_has(pool, 2));
    cr_assert(s_has(pool, 0) && s_has(pool, 1));
    kvt_pool_destroy(&pool);
}

Test(pool, lookup_counts_only_leading_present_keys)
{
    env_t env = {0};
    kvt_pool_t *pool = s_pool(&env, 8);
    s_put(pool, 0, UNIT);
    s_put(pool, 1, UNIT);
    s_put(pool, 3, UNIT);
    kvt_hash_t keys[4] = {s_key(0), s_key(1), s_key(2), s_key(3)};
    cr_assert_eq(kvt_pool_lookup(pool, NS, keys, 4, KVT_OBJ_KV, 0, NULL), 2);
    cr_assert_eq(kvt_pool_count(pool, NS, keys, 4, KVT_OBJ_KV), 2);
    cr_assert_eq(kvt_pool_lookup(pool, NS, keys + 2, 2, KVT_OBJ_KV, 0, NULL), 0);
    cr_assert_eq(kvt_pool_lookup(pool, NS + 1, keys, 4, KVT_OBJ_KV, 0, NULL), 0,
                 "another namespace sees nothing");
    kvt_pool_stats_t st;
    kvt_pool_stats(pool, &st);
    cr_assert_eq(st.lookups, 3);
    cr_assert_eq(st.lookup_keys, 2);
    kvt_pool_destroy(&pool);
}

Test(pool, put_of_a_ready_object_is_skipped_counted_and_refreshes_it)
{
    env_t env = {0};
    kvt_pool_t *pool = s_pool(&env, 2);
    s_put(pool, 0, UNIT);
    s_put(pool, 1, UNIT);
    uint8_t buf[UNIT] = {0};
    cr_assert_eq(kvt_pool_put(pool, NS, s_key(0), KVT_OBJ_KV, buf, sizeof(buf)), KVT_STORE_SKIPPED);
    s_put(pool, 2, UNIT); //  0 was refreshed by the skipped put: 1 goes
    cr_assert(s_has(pool, 0));
    cr_assert_not(s_has(pool, 1));
    kvt_pool_stats_t st;
    kvt_pool_stats(pool, &st);
    cr_assert_eq(st.puts_skipped, 1);
    cr_assert_eq(st.puts, 3);
    kvt_pool_destroy(&pool);
}

Test(pool, touch_answers_refreshed_present_while_written_and_gone)
{
    env_t env = {0};
    kvt_pool_t *pool = s_pool(&env, 4);
    kvt_holder_t h = s_holder(pool, "lane");
    s_put(pool, 0, UNIT);
    cr_assert_eq(kvt_pool_touch(pool, NS, s_key(0), KVT_OBJ_KV), KVT_TOUCH_REFRESHED);
    cr_assert_eq(kvt_pool_touch(pool, NS, s_key(9), KVT_OBJ_KV), KVT_TOUCH_GONE);
    kvt_resv_t r;
    void *p;
    cr_assert_eq(kvt_pool_reserve(pool, NS, s_key(1), KVT_OBJ_KV, 100, h, &r, &p), KVT_STORE_OK);
    cr_assert_eq(kvt_pool_touch(pool, NS, s_key(1), KVT_OBJ_KV), KVT_TOUCH_PRESENT);
    kvt_pool_stats_t st;
    kvt_pool_stats(pool, &st);
    cr_assert_eq(st.touches_refreshed, 1);
    cr_assert_eq(st.touches_gone, 1);
    kvt_pool_destroy(&pool);
}

Test(pool, a_query_kind_also_matches_the_combined_kind)
{
    env_t env = {0};
    kvt_pool_t *pool = s_pool(&env, 8);
    uint8_t buf[64] = {1};
    cr_assert_eq(kvt_pool_put(pool, NS, s_key(1), KVT_OBJ_KV_STATE, buf, 64), KVT_STORE_OK);
    cr_assert_eq(kvt_pool_put(pool, NS, s_key(2), KVT_OBJ_KV, buf, 64), KVT_STORE_OK);
    cr_assert(kvt_pool_contains(pool, NS, s_key(1), KVT_OBJ_KV));
    cr_assert(kvt_pool_contains(pool, NS, s_key(1), KVT_OBJ_STATE));
    cr_assert(kvt_pool_contains(pool, NS, s_key(1), KVT_OBJ_KV_STATE));
    cr_assert(kvt_pool_contains(pool, NS, s_key(2), KVT_OBJ_KV));
    cr_assert_not(kvt_pool_contains(pool, NS, s_key(2), KVT_OBJ_STATE));
    cr_assert_not(kvt_pool_contains(pool, NS, s_key(2), KVT_OBJ_KV_STATE));
    //  A state image put where a chunk+image is ready is skipped; a chunk
    //  and an image with the same key are two objects.
    cr_assert_eq(kvt_pool_put(pool, NS, s_key(1), KVT_OBJ_STATE, buf, 64), KVT_STORE_SKIPPED);
    cr_assert_eq(kvt_pool_put(pool, NS, s_key(2), KVT_OBJ_STATE, buf, 32), KVT_STORE_OK);
    kvt_holder_t h = s_holder(pool, "lane");
    kvt_lease_t l = {0};
    kvt_obj_view_t v;
    cr_assert_eq(kvt_pool_acquire(pool, NS, s_key(2), KVT_OBJ_STATE, h, &l, &v), KVT_STORE_OK);
    cr_assert_eq(v.kind, KVT_OBJ_STATE);
    cr_assert_eq(v.size, 32);
    cr_assert_eq(kvt_pool_release(pool, &l), KVT_STORE_OK);
    cr_assert_eq(kvt_pool_acquire(pool, NS, s_key(1), KVT_OBJ_STATE, h, &l, &v), KVT_STORE_OK);
    cr_assert_eq(v.kind, KVT_OBJ_KV_STATE);
    cr_assert_eq(kvt_pool_release(pool, &l), KVT_STORE_OK);
    kvt_pool_destroy(&pool);
}

// ---------------------------------------------------- write/read states --

Test(pool, a_reader_never_sees_an_object_being_written)
{
    env_t env = {0};
    kvt_pool_t *pool = s_pool(&env, 4);
    kvt_holder_t w = s_holder(pool, "save"), r = s_holder(pool, "load");
    kvt_resv_t resv;
    void *p;
    cr_assert_eq(kvt_pool_reserve(pool, NS, s_key(1), KVT_OBJ_KV, 1000, w, &resv, &p),
                 KVT_STORE_OK);
    cr_assert_neq(resv.id, 0);
    memset(p, 0x5a, 1000);
    kvt_lease_t l = {0};
    kvt_obj_view_t v;
    cr_assert_eq(kvt_pool_acquire(pool, NS, s_key(1), KVT_OBJ_KV, r, &l, &v), KVT_STORE_ENOTFOUND);
    kvt_hash_t k = s_key(1);
    cr_assert_eq(kvt_pool_lookup(pool, NS, &k, 1, KVT_OBJ_KV, 0, NULL), 0);
    cr_assert_not(s_has(pool, 1));
    cr_assert_eq(kvt_pool_commit(pool, &resv, NULL), KVT_STORE_OK);
    cr_assert_eq(resv.id, 0);
    cr_assert_eq(kvt_pool_acquire(pool, NS, s_key(1), KVT_OBJ_KV, r, &l, &v), KVT_STORE_OK);
    cr_assert_eq(v.size, 1000);
    cr_assert_eq(((const uint8_t *)v.ptr)[999], 0x5a);
    cr_assert_eq(kvt_pool_release(pool, &l), KVT_STORE_OK);
    kvt_pool_destroy(&pool);
}

Test(pool, put_of_a_key_being_written_is_a_counted_noop)
{
    env_t env = {0};
    kvt_pool_t *pool = s_pool(&env, 4);
    kvt_holder_t a = s_holder(pool, "save.a"), b = s_holder(pool, "save.b");
    kvt_resv_t r1, r2 = {0};
    void *p1, *p2 = NULL;
    cr_assert_eq(kvt_pool_reserve(pool, NS, s_key(1), KVT_OBJ_KV, UNIT, a, &r1, &p1), KVT_STORE_OK);
    cr_assert_eq(kvt_pool_reserve(pool, NS, s_key(1), KVT_OBJ_KV, UNIT, b, &r2, &p2),
                 KVT_STORE_DUPLICATE);
    cr_assert_eq(r2.id, 0);
    cr_assert_null(p2);
    uint8_t buf[16] = {0};
    cr_assert_eq(kvt_pool_put(pool, NS, s_key(1), KVT_OBJ_KV, buf, 16), KVT_STORE_DUPLICATE);
    kvt_pool_stats_t st;
    kvt_pool_stats(pool, &st);
    cr_assert_eq(st.puts_duplicate, 2);
    cr_assert_eq(st.objects_writing, 1);
    cr_assert_eq(st.used_bytes, UNIT, "one copy only");
    cr_assert_eq(kvt_pool_abort(pool, &r1), KVT_STORE_OK);
    cr_assert_eq(kvt_pool_abort(pool, &r1), KVT_STORE_ESTALE, "abort twice is reported");
    kvt_pool_destroy(&pool);
}

Test(pool, objects_being_written_are_never_evicted)
{
    env_t env = {0};
    kvt_pool_t *pool = s_pool(&env, 2);
    kvt_holder_t h = s_holder(pool, "save");
    kvt_resv_t r;
    void *p;
    cr_assert_eq(kvt_pool_reserve(pool, NS, s_key(1), KVT_OBJ_KV, UNIT, h, &r, &p), KVT_STORE_OK);
    s_put(pool, 2, UNIT);
    s_put(pool, 3, UNIT); //  evicts 2, not the reservation
    cr_assert_not(s_has(pool, 2));
    cr_assert_eq(kvt_pool_commit(pool, &r, NULL), KVT_STORE_OK);
    cr_assert(s_has(pool, 1));
    kvt_pool_destroy(&pool);
}

// ------------------------------------------------------- pins and leases --

Test(pool, a_pinned_object_is_never_evicted)
{
    env_t env = {0};
    kvt_pool_t *pool = s_pool(&env, 3);
    kvt_holder_t h = s_holder(pool, "load");
    for (uint64_t i = 0; i < 3; i++)
        s_put(pool, i, UNIT);
    kvt_lease_t l = {0};
    kvt_obj_view_t v;
    cr_assert_eq(kvt_pool_acquire(pool, NS, s_key(0), KVT_OBJ_KV, h, &l, &v), KVT_STORE_OK);
    s_put(pool, 3, UNIT); //  0 is oldest but pinned... acquire refreshed it; touch others
    kvt_pool_touch(pool, NS, s_key(3), KVT_OBJ_KV);
    kvt_pool_touch(pool, NS, s_key(2), KVT_OBJ_KV);
    s_put(pool, 4, UNIT); //  0 is now the oldest: skipped because pinned
    cr_assert(s_has(pool, 0));
    kvt_pool_stats_t st;
    kvt_pool_stats(pool, &st);
    cr_assert_eq(st.pinned_bytes, UNIT);
    cr_assert_eq(kvt_pool_release(pool, &l), KVT_STORE_OK);
    s_put(pool, 5, UNIT); //  unpinned now: evictable again (after 2, see below)
    s_put(pool, 6, UNIT);
    cr_assert_not(s_has(pool, 0));
    kvt_pool_destroy(&pool);
}

Test(pool, eviction_moves_a_pinned_object_it_passes_to_the_young_end)
{
    env_t env = {0};
    kvt_pool_t *pool = s_pool(&env, 3);
    kvt_holder_t h = s_holder(pool, "load");
    for (uint64_t i = 0; i < 3; i++)
        s_put(pool, i, UNIT);
    kvt_lease_t l = {0};
    kvt_obj_view_t v;
    cr_assert_eq(kvt_pool_acquire(pool, NS, s_key(0), KVT_OBJ_KV, h, &l, &v), KVT_STORE_OK);
    kvt_pool_touch(pool, NS, s_key(1), KVT_OBJ_KV);
    kvt_pool_touch(pool, NS, s_key(2), KVT_OBJ_KV); //  LRU, old to young: 0 (pinned) 1 2
    s_put(pool, 3, UNIT); //  passes 0 (in use: moved young), evicts 1; LRU: 2 0 3
    cr_assert_not(s_has(pool, 1));
    cr_assert_eq(kvt_pool_release(pool, &l), KVT_STORE_OK);
    //  The next eviction does not walk past 0 again: it was moved, so the
    //  oldest is 2 (a walk from the old end on every eviction is O(pinned)).
    s_put(pool, 4, UNIT);
    cr_assert_not(s_has(pool, 2));
    cr_assert(s_has(pool, 0) && s_has(pool, 3) && s_has(pool, 4));
    kvt_pool_destroy(&pool);
}

Test(pool, lookup_with_pin_holds_every_hit_until_the_lease_is_released)
{
    env_t env = {0};
    kvt_pool_t *pool = s_pool(&env, 3);
    kvt_holder_t h = s_holder(pool, "sched");
    for (uint64_t i = 0; i < 3; i++)
        s_put(pool, i, UNIT);
    kvt_hash_t keys[3] = {s_key(0), s_key(1), s_key(2)};
    kvt_lease_t l = {0};
    cr_assert_eq(kvt_pool_lookup(pool, NS, keys, 3, KVT_OBJ_KV, h, &l), 3);
    cr_assert_neq(l.id, 0);
    uint8_t buf[UNIT] = {0};
    cr_assert_eq(kvt_pool_put(pool, NS, s_key(9), KVT_OBJ_KV, buf, UNIT), KVT_STORE_ENOSPACE);
    kvt_pool_stats_t st;
    kvt_pool_stats(pool, &st);
    cr_assert_eq(st.pinned_bytes, 3 * UNIT);
    cr_assert_eq(st.alloc_failed_pinned, 1);
    cr_assert_eq(st.evictions, 0, "a failing allocation evicts nothing");
    cr_assert_eq(kvt_pool_release(pool, &l), KVT_STORE_OK);
    cr_assert_eq(l.id, 0);
    cr_assert_eq(kvt_pool_put(pool, NS, s_key(9), KVT_OBJ_KV, buf, UNIT), KVT_STORE_OK);
    kvt_pool_destroy(&pool);
}

Test(pool, lookup_adds_pins_to_an_existing_lease_of_the_same_holder)
{
    env_t env = {0};
    kvt_pool_t *pool = s_pool(&env, 4);
    kvt_holder_t h = s_holder(pool, "a"), g = s_holder(pool, "b");
    for (uint64_t i = 0; i < 2; i++)
        s_put(pool, i, UNIT);
    kvt_hash_t k0 = s_key(0), k1 = s_key(1);
    kvt_lease_t l = {0};
    cr_assert_eq(kvt_pool_lookup(pool, NS, &k0, 1, KVT_OBJ_KV, h, &l), 1);
    uint64_t id = l.id;
    cr_assert_eq(kvt_pool_lookup(pool, NS, &k1, 1, KVT_OBJ_KV, h, &l), 1);
    cr_assert_eq(l.id, id, "same lease");
    cr_assert_eq(kvt_pool_lookup(pool, NS, &k1, 1, KVT_OBJ_KV, g, &l), KVT_STORE_EINVAL);
    kvt_pool_stats_t st;
    kvt_pool_stats(pool, &st);
    cr_assert_eq(st.pinned_bytes, 2 * UNIT);
    cr_assert_eq(st.leases_active, 1);
    cr_assert_eq(kvt_pool_release(pool, &l), KVT_STORE_OK);
    kvt_pool_stats(pool, &st);
    cr_assert_eq(st.pinned_bytes, 0);
    kvt_pool_destroy(&pool);
}

Test(pool, release_twice_is_reported_and_never_frees_twice)
{
    env_t env = {0};
    kvt_pool_t *pool = s_pool(&env, 4);
    kvt_holder_t h = s_holder(pool, "load");
    s_put(pool, 0, UNIT);
    kvt_lease_t a = {0}, b = {0};
    kvt_obj_view_t v;
    cr_assert_eq(kvt_pool_acquire(pool, NS, s_key(0), KVT_OBJ_KV, h, &a, &v), KVT_STORE_OK);
    kvt_lease_t copy = a;
    cr_assert_eq(kvt_pool_release(pool, &a), KVT_STORE_OK);
    cr_assert_eq(kvt_pool_release(pool, &a), KVT_STORE_ESTALE, "cleared id");
    //  The slot is reused by a new lease; the old id must not release it.
    cr_assert_eq(kvt_pool_acquire(pool, NS, s_key(0), KVT_OBJ_KV, h, &b, &v), KVT_STORE_OK);
    cr_assert_eq(kvt_pool_release(pool, &copy), KVT_STORE_ESTALE);
    kvt_lease_t bogus = {.id = 0xFFFFFFFF00000001ull};
    cr_assert_eq(kvt_pool_release(pool, &bogus), KVT_STORE_ESTALE);
    kvt_pool_stats_t st;
    kvt_pool_stats(pool, &st);
    cr_assert_eq(st.release_errors, 3);
    cr_assert_eq(st.pinned_bytes, UNIT, "b still pins the object");
    cr_assert_eq(st.leases_active, 1);
    cr_assert_eq(kvt_pool_release(pool, &b), KVT_STORE_OK);
    kvt_pool_stats(pool, &st);
    cr_assert_eq(st.pinned_bytes, 0);
    cr_assert_eq(st.leases_active, 0);
    kvt_pool_destroy(&pool);
}

Test(pool, a_full_lease_table_fails_the_acquire_without_harm)
{
    env_t env = {0};
    kvt_pool_config_t cfg;
    kvt_pool_config_defaults(&cfg);
    cfg.capacity_bytes = 8 * UNIT;
    cfg.max_leases = 2;
    cfg.max_pins = 3;
    cfg.clock = s_clock;
    cfg.clock_arg = &env;
    kvt_pool_t *pool = kvt_pool_new(&cfg, NULL, 0);
    cr_assert_not_null(pool);
    kvt_holder_t h = s_holder(pool, "load");
    for (uint64_t i = 0; i < 4; i++)
        s_put(pool, i, UNIT);
    kvt_lease_t l1 = {0}, l2 = {0}, l3 = {0};
    kvt_obj_view_t v;
    cr_assert_eq(kvt_pool_acquire(pool, NS, s_key(0), KVT_OBJ_KV, h, &l1, &v), KVT_STORE_OK);
    kvt_hash_t keys[4] = {s_key(0), s_key(1), s_key(2), s_key(3)};
    //  Two pins left: the lookup's count stops at what it could pin.
    cr_assert_eq(kvt_pool_lookup(pool, NS, keys, 4, KVT_OBJ_KV, h, &l2), 2);
    cr_assert_eq(kvt_pool_acquire(pool, NS, s_key(3), KVT_OBJ_KV, h, &l3, &v), KVT_STORE_EFULL);
    kvt_pool_stats_t st;
    kvt_pool_stats(pool, &st);
    cr_assert_eq(st.pin_table_full, 1);
    cr_assert_eq(kvt_pool_release(pool, &l1), KVT_STORE_OK);
    cr_assert_eq(kvt_pool_release(pool, &l2), KVT_STORE_OK);
    kvt_pool_stats(pool, &st);
    cr_assert_eq(st.pinned_bytes, 0);
    kvt_pool_destroy(&pool);
}

// ------------------------------------------------------ allocation failure --

Test(pool, allocation_fails_at_once_with_a_reason)
{
    env_t env = {0};
    kvt_pool_t *pool = s_pool(&env, 2);
    kvt_holder_t h = s_holder(pool, "save");
    kvt_resv_t r1, r2, r3;
    void *p;
    uint8_t buf[UNIT] = {0};
    cr_assert_eq(kvt_pool_put(pool, NS, s_key(0), KVT_OBJ_KV, buf, 3 * UNIT), KVT_STORE_ETOOBIG);
    cr_assert_eq(kvt_pool_reserve(pool, NS, s_key(1), KVT_OBJ_KV, UNIT, h, &r1, &p), KVT_STORE_OK);
    cr_assert_eq(kvt_pool_reserve(pool, NS, s_key(2), KVT_OBJ_KV, UNIT, h, &r2, &p), KVT_STORE_OK);
    //  Both units are being written: nothing is evictable, the call returns.
    cr_assert_eq(kvt_pool_reserve(pool, NS, s_key(3), KVT_OBJ_KV, UNIT, h, &r3, &p),
                 KVT_STORE_ENOSPACE);
    cr_assert_eq(kvt_pool_reserve(pool, NS, s_key(3), KVT_OBJ_KV, 0, h, &r3, &p), KVT_STORE_EINVAL);
    cr_assert_eq(kvt_pool_reserve(pool, NS, s_key(3), (kvt_obj_kind_t)9, 1, h, &r3, &p),
                 KVT_STORE_EINVAL);
    cr_assert_eq(kvt_pool_reserve(pool, NS, s_key(3), KVT_OBJ_KV, 1, 999, &r3, &p),
                 KVT_STORE_EHOLDER);
    kvt_pool_stats_t st;
    kvt_pool_stats(pool, &st);
    cr_assert_eq(st.alloc_failed, 2);
    cr_assert_eq(st.alloc_failed_toobig, 1);
    cr_assert_eq(st.alloc_failed_pinned, 1);
    cr_assert_str_eq(kvt_store_strerror(KVT_STORE_ENOSPACE),
                     "no space: nothing evictable can make room");
    kvt_pool_abort(pool, &r1);
    kvt_pool_abort(pool, &r2);
    kvt_pool_destroy(&pool);
}

Test(pool, a_full_object_table_evicts_or_fails_with_efull)
{
    kvt_pool_config_t cfg;
    kvt_pool_config_defaults(&cfg);
    cfg.capacity_bytes = 64 * UNIT;
    cfg.max_objects = 2;
    kvt_pool_t *pool = kvt_pool_new(&cfg, NULL, 0);
    cr_assert_not_null(pool);
    kvt_holder_t h = s_holder(pool, "save");
    uint8_t buf[64] = {0};
    cr_assert_eq(kvt_pool_put(pool, NS, s_key(0), KVT_OBJ_KV, buf, 64), KVT_STORE_OK);
    cr_assert_eq(kvt_pool_put(pool, NS, s_key(1), KVT_OBJ_KV, buf, 64), KVT_STORE_OK);
    cr_assert_eq(kvt_pool_put(pool, NS, s_key(2), KVT_OBJ_KV, buf, 64), KVT_STORE_OK);
    cr_assert_not(s_has(pool, 0), "the table was full: the oldest went");
    kvt_resv_t r1, r2;
    void *p;
    kvt_lease_t l1 = {0}, l2 = {0};
    kvt_obj_view_t v;
    kvt_pool_acquire(pool, NS, s_key(1), KVT_OBJ_KV, h, &l1, &v);
    kvt_pool_acquire(pool, NS, s_key(2), KVT_OBJ_KV, h, &l2, &v);
    cr_assert_eq(kvt_pool_reserve(pool, NS, s_key(3), KVT_OBJ_KV, 64, h, &r1, &p), KVT_STORE_EFULL);
    kvt_pool_stats_t st;
    kvt_pool_stats(pool, &st);
    cr_assert_eq(st.alloc_failed_table, 1);
    kvt_pool_release(pool, &l1);
    kvt_pool_release(pool, &l2);
    cr_assert_eq(kvt_pool_reserve(pool, NS, s_key(3), KVT_OBJ_KV, 64, h, &r2, &p), KVT_STORE_OK);
    kvt_pool_abort(pool, &r2);
    kvt_pool_destroy(&pool);
}

Test(pool, an_allocation_that_cannot_succeed_evicts_nothing)
{
    kvt_pool_config_t cfg;
    kvt_pool_config_defaults(&cfg);
    cfg.capacity_bytes = 4 * UNIT;
    cfg.max_objects = 2;
    kvt_pool_t *pool = kvt_pool_new(&cfg, NULL, 0);
    cr_assert_not_null(pool);
    kvt_holder_t h = s_holder(pool, "load");
    s_put(pool, 0, UNIT);
    s_put(pool, 1, 3 * UNIT);
    kvt_lease_t l = {0};
    kvt_obj_view_t v;
    cr_assert_eq(kvt_pool_acquire(pool, NS, s_key(1), KVT_OBJ_KV, h, &l, &v), KVT_STORE_OK);
    //  The table is full and 2 units are wanted: evicting 0 frees a slot but
    //  only one unit, so nothing may be evicted at all.
    uint8_t buf[2 * UNIT] = {0};
    cr_assert_eq(kvt_pool_put(pool, NS, s_key(2), KVT_OBJ_KV, buf, sizeof(buf)),
                 KVT_STORE_ENOSPACE);
    cr_assert(s_has(pool, 0));
    kvt_pool_stats_t st;
    kvt_pool_stats(pool, &st);
    cr_assert_eq(st.evictions, 0);
    kvt_pool_release(pool, &l);
    kvt_pool_destroy(&pool);
}

Test(pool, eviction_without_a_long_enough_run_evicts_nothing)
{
    env_t env = {0};
    kvt_pool_t *pool = s_pool(&env, 4);
    kvt_holder_t h = s_holder(pool, "load");
    for (uint64_t i = 0; i < 4; i++) //  A B C D, one unit each, in address order
        s_put(pool, i, UNIT);
    kvt_lease_t la = {0}, lc = {0};
    kvt_obj_view_t v;
    cr_assert_eq(kvt_pool_acquire(pool, NS, s_key(0), KVT_OBJ_KV, h, &la, &v), KVT_STORE_OK);
    cr_assert_eq(kvt_pool_acquire(pool, NS, s_key(2), KVT_OBJ_KV, h, &lc, &v), KVT_STORE_OK);
    //  Two evictable units, but no two adjacent: a 2-unit put must fail
    //  without evicting B or D.
    uint8_t buf[2 * UNIT] = {0};
    cr_assert_eq(kvt_pool_put(pool, NS, s_key(9), KVT_OBJ_KV, buf, sizeof(buf)),
                 KVT_STORE_ENOSPACE);
    kvt_pool_stats_t st;
    kvt_pool_stats(pool, &st);
    cr_assert_eq(st.evictions, 0);
    cr_assert_eq(st.alloc_failed_pinned, 1);
    cr_assert(s_has(pool, 1) && s_has(pool, 3));
    cr_assert_eq(kvt_pool_release(pool, &lc), KVT_STORE_OK);
    cr_assert_eq(kvt_pool_put(pool, NS, s_key(9), KVT_OBJ_KV, buf, sizeof(buf)), KVT_STORE_OK);
    kvt_pool_release(pool, &la);
    kvt_pool_destroy(&pool);
}

Test(pool, eviction_takes_only_the_run_the_allocation_needs)
{
    env_t env = {0};
    kvt_pool_t *pool = s_pool(&env, 6);
    kvt_holder_t h = s_holder(pool, "load");
    for (uint64_t i = 0; i < 6; i++) //  A B C D E F in address and LRU order
        s_put(pool, i, UNIT);
    kvt_lease_t lb = {0};
    kvt_obj_view_t v;
    cr_assert_eq(kvt_pool_acquire(pool, NS, s_key(1), KVT_OBJ_KV, h, &lb, &v), KVT_STORE_OK);
    //  A is oldest but pinned B bounds its run; C and D are the oldest pair
    //  that make two contiguous units. Evicting A first would be for nothing.
    uint8_t buf[2 * UNIT] = {0};
    cr_assert_eq(kvt_pool_put(pool, NS, s_key(9), KVT_OBJ_KV, buf, sizeof(buf)), KVT_STORE_OK);
    kvt_pool_stats_t st;
    kvt_pool_stats(pool, &st);
    cr_assert_eq(st.evictions, 2);
    cr_assert(s_has(pool, 0), "A was not needed");
    cr_assert_not(s_has(pool, 2));
    cr_assert_not(s_has(pool, 3));
    cr_assert(s_has(pool, 4) && s_has(pool, 5));
    kvt_pool_release(pool, &lb);
    kvt_pool_destroy(&pool);
}

Test(pool, a_size_near_size_max_is_too_big_not_wrapped)
{
    env_t env = {0};
    kvt_pool_t *pool = s_pool(&env, 4);
    kvt_holder_t h = s_holder(pool, "save");
    kvt_resv_t r = {0};
    void *p = NULL;
    cr_assert_eq(kvt_pool_reserve(pool, NS, s_key(1), KVT_OBJ_KV, SIZE_MAX, h, &r, &p),
                 KVT_STORE_ETOOBIG);
    cr_assert_eq(kvt_pool_reserve(pool, NS, s_key(1), KVT_OBJ_KV, SIZE_MAX - UNIT + 2, h, &r, &p),
                 KVT_STORE_ETOOBIG);
    cr_assert_eq(r.id, 0);
    cr_assert_null(p);
    kvt_pool_stats_t st;
    kvt_pool_stats(pool, &st);
    cr_assert_eq(st.alloc_failed_toobig, 2);
    cr_assert_eq(st.used_bytes, 0);
    kvt_pool_destroy(&pool);
}

// -------------------------------------------------------- TTL and reclaim --

Test(pool, an_orphaned_lease_is_reclaimed_at_ttl_counted_and_logged_once)
{
    env_t env = {.now = 5};
    kvt_pool_t *pool = s_pool(&env, 4);
    kvt_holder_t h = s_holder(pool, "lane.load");
    s_put(pool, 0, UNIT);
    s_put(pool, 1, UNIT);
    kvt_lease_t a = {0}, b = {0};
    kvt_obj_view_t v;
    cr_assert_eq(kvt_pool_acquire(pool, NS, s_key(0), KVT_OBJ_KV, h, &a, &v), KVT_STORE_OK);
    cr_assert_eq(kvt_pool_acquire(pool, NS, s_key(1), KVT_OBJ_KV, h, &b, &v), KVT_STORE_OK);
    cr_assert_eq(kvt_pool_holder_reset(pool, h), KVT_STORE_OK);
    env.now += 999 * 1000000ull;
    cr_assert_eq(kvt_pool_reclaim(pool), 0, "not before the ttl");
    env.now += 1000000ull;
    cr_assert_eq(kvt_pool_reclaim(pool), 2);
    kvt_pool_stats_t st;
    kvt_pool_stats(pool, &st);
    cr_assert_eq(st.reclaimed_orphaned, 2);
    cr_assert_eq(st.pinned_bytes, 0);
    cr_assert_eq(st.leases_active, 0);
    cr_assert_eq(env.lines, 1, "logged once for the holder");
    cr_assert(strstr(env.last, "lane.load") && strstr(env.last, "reset"), "%s", env.last);
    cr_assert_eq(kvt_pool_release(pool, &a), KVT_STORE_ESTALE, "the holder learns it lost it");
    kvt_pool_destroy(&pool);
}

Test(pool, a_removed_holders_reservation_is_reclaimed_and_never_made_ready)
{
    env_t env = {0};
    kvt_pool_t *pool = s_pool(&env, 2);
    kvt_holder_t h = s_holder(pool, "rank1.save");
    kvt_resv_t r;
    void *p;
    cr_assert_eq(kvt_pool_reserve(pool, NS, s_key(1), KVT_OBJ_KV, UNIT, h, &r, &p), KVT_STORE_OK);
    cr_assert_eq(kvt_pool_holder_remove(pool, h), KVT_STORE_OK);
    cr_assert_eq(kvt_pool_reserve(pool, NS, s_key(2), KVT_OBJ_KV, 1, h, &r, &p), KVT_STORE_EHOLDER);
    env.now += 1000 * 1000000ull;
    cr_assert_eq(kvt_pool_reclaim(pool), 1);
    kvt_pool_stats_t st;
    kvt_pool_stats(pool, &st);
    cr_assert_eq(st.objects_writing, 0);
    cr_assert_eq(st.used_bytes, 0);
    cr_assert_eq(st.reclaimed_orphaned, 1);
    cr_assert_eq(kvt_pool_commit(pool, &r, NULL), KVT_STORE_ESTALE);
    cr_assert_not(s_has(pool, 1));
    cr_assert(strstr(env.last, "removal"), "%s", env.last);
    kvt_pool_destroy(&pool);
}

Test(pool, a_live_holders_lease_expires_at_ttl_unless_renewed)
{
    env_t env = {0};
    kvt_pool_t *pool = s_pool(&env, 4);
    kvt_holder_t h = s_holder(pool, "load");
    s_put(pool, 0, UNIT);
    kvt_lease_t l = {0};
    kvt_obj_view_t v;
    cr_assert_eq(kvt_pool_acquire(pool, NS, s_key(0), KVT_OBJ_KV, h, &l, &v), KVT_STORE_OK);
    env.now += 600 * 1000000ull;
    cr_assert_eq(kvt_pool_lease_renew(pool, l), KVT_STORE_OK);
    env.now += 600 * 1000000ull;
    cr_assert_eq(kvt_pool_reclaim(pool), 0, "renewed 600 ms ago");
    env.now += 400 * 1000000ull;
    cr_assert_eq(kvt_pool_reclaim(pool), 1);
    kvt_pool_stats_t st;
    kvt_pool_stats(pool, &st);
    cr_assert_eq(st.reclaimed_expired, 1);
    cr_assert_eq(st.reclaimed_orphaned, 0);
    cr_assert_eq(kvt_pool_release(pool, &l), KVT_STORE_ESTALE);
    cr_assert_eq(kvt_pool_lease_renew(pool, l), KVT_STORE_ESTALE);
    kvt_pool_destroy(&pool);
}

Test(pool, a_renewed_reservation_outlives_the_ttl_and_a_stale_one_is_refused)
{
    env_t env = {0};
    kvt_pool_t *pool = s_pool(&env, 4);
    kvt_holder_t h = s_holder(pool, "save");
    kvt_resv_t r = {0}, gone = {0};
    void *p;
    cr_assert_eq(kvt_pool_reserve(pool, NS, s_key(1), KVT_OBJ_KV, UNIT, h, &r, &p), KVT_STORE_OK);
    env.now += 600 * 1000000ull;
    cr_assert_eq(kvt_pool_resv_renew(pool, r), KVT_STORE_OK);
    env.now += 600 * 1000000ull;
    cr_assert_eq(kvt_pool_reclaim(pool), 0, "renewed 600 ms ago");
    cr_assert_eq(kvt_pool_commit(pool, &r, NULL), KVT_STORE_OK);
    cr_assert(s_has(pool, 1));
    kvt_resv_t copy = {.id = 0};
    cr_assert_eq(kvt_pool_reserve(pool, NS, s_key(2), KVT_OBJ_KV, UNIT, h, &gone, &p),
                 KVT_STORE_OK);
    copy = gone;
    cr_assert_eq(kvt_pool_abort(pool, &gone), KVT_STORE_OK);
    cr_assert_eq(kvt_pool_resv_renew(pool, copy), KVT_STORE_ESTALE, "aborted");
    cr_assert_eq(kvt_pool_resv_renew(pool, (kvt_resv_t){.id = 0}), KVT_STORE_ESTALE);
    kvt_pool_stats_t st;
    kvt_pool_stats(pool, &st);
    cr_assert_eq(st.release_errors, 2);
    kvt_pool_destroy(&pool);
}

Test(pool, an_expired_reservation_of_a_live_holder_is_quarantined_not_reused)
{
    env_t env = {0};
    kvt_pool_t *pool = s_pool(&env, 3);
    kvt_holder_t h = s_holder(pool, "save"), g = s_holder(pool, "load");
    kvt_resv_t r = {0};
    void *p;
    cr_assert_eq(kvt_pool_reserve(pool, NS, s_key(1), KVT_OBJ_KV, UNIT, h, &r, &p), KVT_STORE_OK);
    env.now += 1000 * 1000000ull; //  the copy into p is stalled past the ttl
    cr_assert_eq(kvt_pool_reclaim(pool), 1);
    kvt_pool_stats_t st;
    kvt_pool_stats(pool, &st);
    cr_assert_eq(st.reclaimed_expired, 1);
    cr_assert_eq(st.reclaimed_quarantined, 1);
    cr_assert_eq(st.quarantined_bytes, UNIT);
    cr_assert_eq(st.objects_quarantined, 1);
    cr_assert_eq(st.objects_writing, 0);
    cr_assert_eq(st.used_bytes, UNIT, "the bytes stay allocated");
    cr_assert_eq(kvt_pool_touch(pool, NS, s_key(1), KVT_OBJ_KV), KVT_TOUCH_GONE, "unindexed");
    //  Other objects fill the pool; none may land in the quarantined bytes.
    s_put(pool, 2, UNIT);
    s_put(pool, 3, UNIT);
    s_put(pool, 4, UNIT); //  evicts 2, never the quarantined extent
    kvt_lease_t l = {0};
    kvt_obj_view_t v;
    for (uint64_t i = 3; i <= 4; i++) {
        cr_assert_eq(kvt_pool_acquire(pool, NS, s_key(i), KVT_OBJ_KV, g, &l, &v), KVT_STORE_OK);
        cr_assert((const uint8_t *)v.ptr + UNIT <= (uint8_t *)p ||
                      (const uint8_t *)v.ptr >= (uint8_t *)p + UNIT,
                  "object %llu placed over the quarantined reservation", (unsigned long long)i);
        cr_assert_eq(kvt_pool_release(pool, &l), KVT_STORE_OK);
    }
    memset(p, 0xEE, UNIT); //  the late copy lands
    for (uint64_t i = 3; i <= 4; i++) {
        cr_assert_eq(kvt_pool_acquire(pool, NS, s_key(i), KVT_OBJ_KV, g, &l, &v), KVT_STORE_OK);
        cr_assert_eq(((const uint8_t *)v.ptr)[0], (uint8_t)i, "a committed object changed");
        cr_assert_eq(kvt_pool_release(pool, &l), KVT_STORE_OK);
    }
    cr_assert_eq(kvt_pool_resv_renew(pool, r), KVT_STORE_ESTALE);
    cr_assert_eq(kvt_pool_commit(pool, &r, NULL), KVT_STORE_ESTALE, "nothing was stored");
    cr_assert_not(s_has(pool, 1));
    kvt_pool_stats(pool, &st);
    cr_assert_eq(st.quarantined_bytes, 0, "the commit's ESTALE freed it");
    cr_assert_eq(st.objects_quarantined, 0);
    cr_assert_eq(st.used_bytes, 2 * UNIT);
    cr_assert_eq(kvt_pool_commit(pool, &r, NULL), KVT_STORE_ESTALE, "and only once");
    kvt_pool_destroy(&pool);
}

Test(pool, a_quarantined_reservation_is_freed_by_its_abort_or_a_ttl_after_its_holder_reset)
{
    env_t env = {0};
    kvt_pool_t *pool = s_pool(&env, 4);
    kvt_holder_t h = s_holder(pool, "save");
    kvt_resv_t a = {0}, b = {0}, c = {0};
    void *p;
    cr_assert_eq(kvt_pool_reserve(pool, NS, s_key(1), KVT_OBJ_KV, UNIT, h, &a, &p), KVT_STORE_OK);
    cr_assert_eq(kvt_pool_reserve(pool, NS, s_key(2), KVT_OBJ_KV, UNIT, h, &b, &p), KVT_STORE_OK);
    env.now += 1000 * 1000000ull;
    cr_assert_eq(kvt_pool_reclaim(pool), 2);
    //  The key is free again: a new writer is not a duplicate of the old one.
    cr_assert_eq(kvt_pool_reserve(pool, NS, s_key(1), KVT_OBJ_KV, UNIT, h, &c, &p), KVT_STORE_OK);
    cr_assert_eq(kvt_pool_abort(pool, &a), KVT_STORE_ESTALE);
    kvt_pool_stats_t st;
    kvt_pool_stats(pool, &st);
    cr_assert_eq(st.quarantined_bytes, UNIT, "a's bytes went with its abort");
    cr_assert_eq(st.aborts, 0);
    cr_assert_eq(kvt_pool_commit(pool, &c, NULL), KVT_STORE_OK);
    cr_assert(s_has(pool, 1));
    //  b's lane is reset: a copy it queued may still run for a ttl, then the
    //  bytes go although nobody commits or aborts b.
    cr_assert_eq(kvt_pool_holder_reset(pool, h), KVT_STORE_OK);
    env.now += 999 * 1000000ull;
    kvt_pool_reclaim(pool);
    kvt_pool_stats(pool, &st);
    cr_assert_eq(st.quarantined_bytes, UNIT);
    env.now += 1000000ull;
    kvt_pool_reclaim(pool);
    kvt_pool_stats(pool, &st);
    cr_assert_eq(st.quarantined_bytes, 0);
    cr_assert_eq(st.objects_quarantined, 0);
    cr_assert_eq(st.used_bytes, UNIT);
    cr_assert_eq(kvt_pool_commit(pool, &b, NULL), KVT_STORE_ESTALE);
    kvt_pool_destroy(&pool);
}

Test(pool, an_orphan_lease_is_never_renewed_or_extended_by_lookup)
{
    env_t env = {0};
    kvt_pool_t *pool = s_pool(&env, 4);
    kvt_holder_t h = s_holder(pool, "lane");
    s_put(pool, 0, UNIT);
    s_put(pool, 1, UNIT);
    kvt_hash_t k0 = s_key(0), k1 = s_key(1);
    kvt_lease_t l = {0};
    cr_assert_eq(kvt_pool_lookup(pool, NS, &k0, 1, KVT_OBJ_KV, h, &l), 1);
    cr_assert_eq(kvt_pool_holder_reset(pool, h), KVT_STORE_OK);
    env.now += 600 * 1000000ull;
    cr_assert_eq(kvt_pool_lease_renew(pool, l), KVT_STORE_ESTALE);
    cr_assert_eq(kvt_pool_lookup(pool, NS, &k1, 1, KVT_OBJ_KV, h, &l), KVT_STORE_ESTALE);
    kvt_pool_stats_t st;
    kvt_pool_stats(pool, &st);
    cr_assert_eq(st.pinned_bytes, UNIT, "nothing was added to the orphan");
    cr_assert_eq(st.release_errors, 2);
    env.now += 400 * 1000000ull;
    cr_assert_eq(kvt_pool_reclaim(pool), 1, "expires a ttl after it started, not after a renew");
    kvt_pool_stats(pool, &st);
    cr_assert_eq(st.reclaimed_orphaned, 1);
    cr_assert_eq(st.pinned_bytes, 0);
    kvt_pool_destroy(&pool);
}

Test(pool, an_orphan_reservation_never_commits)
{
    env_t env = {0};
    kvt_pool_t *pool = s_pool(&env, 4);
    kvt_holder_t h = s_holder(pool, "save");
    kvt_resv_t r = {0}, q = {0};
    void *p;
    cr_assert_eq(kvt_pool_reserve(pool, NS, s_key(1), KVT_OBJ_KV, UNIT, h, &r, &p), KVT_STORE_OK);
    cr_assert_eq(kvt_pool_reserve(pool, NS, s_key(2), KVT_OBJ_KV, UNIT, h, &q, &p), KVT_STORE_OK);
    cr_assert_eq(kvt_pool_holder_reset(pool, h), KVT_STORE_OK);
    cr_assert_eq(kvt_pool_resv_renew(pool, r), KVT_STORE_ESTALE);
    kvt_lease_t l = {0};
    cr_assert_eq(kvt_pool_commit(pool, &r, &l), KVT_STORE_ESTALE);
    cr_assert_eq(l.id, 0);
    cr_assert_not(s_has(pool, 1));
    cr_assert_eq(kvt_pool_abort(pool, &q), KVT_STORE_OK, "an orphan may always be given up");
    kvt_pool_stats_t st;
    kvt_pool_stats(pool, &st);
    cr_assert_eq(st.objects_writing, 0);
    cr_assert_eq(st.used_bytes, 0, "both orphans' bytes are freed by their writer's call");
    cr_assert_eq(st.puts, 0);
    kvt_pool_destroy(&pool);
}

Test(pool, allocation_pressure_reclaims_expired_pins_instead_of_failing)
{
    env_t env = {0};
    kvt_pool_t *pool = s_pool(&env, 2);
    kvt_holder_t h = s_holder(pool, "dead.lane");
    s_put(pool, 0, UNIT);
    s_put(pool, 1, UNIT);
    kvt_hash_t keys[2] = {s_key(0), s_key(1)};
    kvt_lease_t l = {0};
    cr_assert_eq(kvt_pool_lookup(pool, NS, keys, 2, KVT_OBJ_KV, h, &l), 2);
    kvt_pool_holder_remove(pool, h);
    uint8_t buf[UNIT] = {0};
    cr_assert_eq(kvt_pool_put(pool, NS, s_key(2), KVT_OBJ_KV, buf, UNIT), KVT_STORE_ENOSPACE,
                 "before the ttl the pins hold");
    env.now += 1000 * 1000000ull;
    cr_assert_eq(kvt_pool_put(pool, NS, s_key(2), KVT_OBJ_KV, buf, UNIT), KVT_STORE_OK);
    kvt_pool_stats_t st;
    kvt_pool_stats(pool, &st);
    cr_assert_eq(st.reclaimed_orphaned, 1);
    kvt_pool_destroy(&pool);
}

// ------------------------------------------------------ capacity, config --

Test(pool, capacity_accounting_returns_to_zero_after_every_object_is_freed)
{
    env_t env = {0};
    kvt_pool_t *pool = s_pool(&env, 64);
    kvt_holder_t h = s_holder(pool, "mix");
    uint8_t *buf = calloc(1, 8 * UNIT);
    kvt_lease_t leases[16] = {{0}};
    kvt_resv_t resv[8] = {{0}};
    uint64_t seed = 12345;
    for (int round = 0; round < 2000; round++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t i = (seed >> 33) % 96;
        size_t size = 1 + (size_t)((seed >> 13) % (6 * UNIT));
        kvt_obj_kind_t kind = (kvt_obj_kind_t)(1 + (seed >> 7) % 3);
        int op = (int)((seed >> 40) % 6);
        kvt_obj_view_t v;
        void *p;
        if (op <= 1) {
            kvt_pool_put(pool, NS, s_key(i), kind, buf, size);
        } else if (op == 2) {
            kvt_lease_t *l = &leases[i % 16];
            if (l->id)
                cr_assert_eq(kvt_pool_release(pool, l), KVT_STORE_OK);
            kvt_pool_acquire(pool, NS, s_key(i), kind, h, l, &v);
        } else if (op == 3) {
            kvt_resv_t *r = &resv[i % 8];
            if (r->id)
                cr_assert_eq(((seed >> 3) & 1) ? kvt_pool_commit(pool, r, NULL)
                                               : kvt_pool_abort(pool, r),
                             KVT_STORE_OK);
            kvt_pool_reserve(pool, NS, s_key(i), kind, size, h, r, &p);
        } else if (op == 4) {
            kvt_pool_remove(pool, NS, s_key(i), kind);
        } else {
            kvt_hash_t keys[4] = {s_key(i), s_key(i + 1), s_key(i + 2), s_key(i + 3)};
            kvt_lease_t *l = &leases[(i + 5) % 16];
            if (l->id)
                cr_assert_eq(kvt_pool_release(pool, l), KVT_STORE_OK);
            kvt_pool_lookup(pool, NS, keys, 4, kind, h, l);
        }
    }
    for (int j = 0; j < 16; j++)
        if (leases[j].id)
            cr_assert_eq(kvt_pool_release(pool, &leases[j]), KVT_STORE_OK);
    for (int j = 0; j < 8; j++)
        if (resv[j].id)
            cr_assert_eq(kvt_pool_abort(pool, &resv[j]), KVT_STORE_OK);
    kvt_pool_stats_t st;
    kvt_pool_stats(pool, &st);
    cr_assert_gt(st.evictions, 0, "the mix exercised eviction");
    cr_assert_eq(st.pinned_bytes, 0);
    cr_assert_eq(st.writing_bytes, 0);
    for (uint64_t i = 0; i < 100; i++)
        for (int k = 1; k <= 3; k++)
            kvt_pool_remove(pool, NS, s_key(i), (kvt_obj_kind_t)k);
    kvt_pool_stats(pool, &st);
    cr_assert_eq(st.objects, 0);
    cr_assert_eq(st.used_bytes, 0);
    cr_assert_eq(st.free_extents, 1, "free space coalesced back into one extent");
    cr_assert_eq(st.largest_free_bytes, 64 * UNIT);
    cr_assert_eq(st.leases_active, 0);
    free(buf);
    kvt_pool_destroy(&pool);
}

Test(pool, caller_memory_is_used_as_the_arena)
{
    size_t size = 16 * UNIT + 100;
    uint8_t *mem = malloc(size);
    kvt_pool_config_t cfg;
    kvt_pool_config_defaults(&cfg);
    cfg.base = mem + 100; //  misaligned on purpose
    cfg.capacity_bytes = size - 100;
    kvt_pool_t *pool = kvt_pool_new(&cfg, NULL, 0);
    cr_assert_not_null(pool);
    uint8_t *base = kvt_pool_base(pool);
    cr_assert(base >= mem + 100 && ((uintptr_t)base & (UNIT - 1)) == 0);
    cr_assert(base + kvt_pool_capacity(pool) <= mem + size);
    kvt_holder_t h = s_holder(pool, "w");
    kvt_resv_t r;
    void *p;
    cr_assert_eq(kvt_pool_reserve(pool, NS, s_key(1), KVT_OBJ_KV, 10, h, &r, &p), KVT_STORE_OK);
    cr_assert((uint8_t *)p >= base && (uint8_t *)p < base + kvt_pool_capacity(pool));
    kvt_pool_abort(pool, &r);
    kvt_pool_destroy(&pool);
    free(mem);
}

Test(pool, a_bad_setting_is_refused_with_its_name_and_value)
{
    kvt_pool_config_t cfg;
    char err[256];
    kvt_pool_config_defaults(&cfg);
    cr_assert_null(kvt_pool_new(&cfg, err, sizeof(err)));
    cr_assert(strstr(err, "pool.capacity_bytes=0"), "%s", err);
    cfg.capacity_bytes = 1 << 20;
    cfg.align = 100;
    cr_assert_null(kvt_pool_new(&cfg, err, sizeof(err)));
    cr_assert(strstr(err, "pool.align=100"), "%s", err);
    cfg.align = 4096;
    cfg.ttl_ms = 1ull << 60;
    cr_assert_null(kvt_pool_new(&cfg, err, sizeof(err)));
    cr_assert(strstr(err, "pool.ttl_ms="), "%s", err);
}

// ------------------------------------------------------------ allocator --

//  The largest free extent found by walking every extent in address order
//  (extent 0 always starts the arena), not through the size classes.
static uint64_t s_largest_free_walk(const kvt_extents_t *a)
{
    uint64_t best = 0;
    for (uint32_t e = 0; e != KVT_NIL; e = a->ext[e].next)
        if (a->ext[e].free && a->ext[e].len > best)
            best = a->ext[e].len;
    return best;
}

Test(extents, random_alloc_free_keeps_accounting_and_coalesces)
{
    kvt_extents_t a;
    cr_assert_eq(kvt_extents_init(&a, 1000, 200), 0);
    uint32_t ids[200];
    uint64_t lens[200];
    int n = 0;
    uint64_t seed = 99, used = 0;
    for (int round = 0; round < 20000; round++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        bool do_alloc = n == 0 || (n < 200 && ((seed >> 40) & 1));
        if (do_alloc) {
            uint64_t len = 1 + (seed >> 20) % 24;
            uint32_t id = kvt_extents_alloc(&a, len);
            if (id == KVT_NIL) {
                cr_assert_lt(s_largest_free_walk(&a), len, "a fitting free extent was not found");
                continue;
            }
            cr_assert_leq(kvt_extents_off(&a, id) + len, 1000);
            ids[n] = id;
            lens[n++] = len;
            used += len;
        } else {
            int j = (int)((seed >> 24) % (uint64_t)n);
            kvt_extents_free(&a, ids[j]);
            used -= lens[j];
            ids[j] = ids[--n];
            lens[j] = lens[n];
        }
        cr_assert_eq(a.used_units, used);
        cr_assert_eq(kvt_extents_largest_free(&a), s_largest_free_walk(&a));
    }
    while (n > 0)
        kvt_extents_free(&a, ids[--n]);
    cr_assert_eq(a.used_units, 0);
    cr_assert_eq(a.free_extents, 1);
    cr_assert_eq(kvt_extents_largest_free(&a), 1000);
    kvt_extents_fini(&a);
}

Test(extents, an_allocation_never_scans_holes_much_smaller_than_itself)
{
    //  Free holes of 256 units (a chunk) and a request of 300 (a chunk with
    //  its image): same power of two, but no hole fits. The request must not
    //  examine every hole, and must take a larger extent when there is one.
    kvt_extents_t a;
    cr_assert_eq(kvt_extents_init(&a, 200 * 257 + 1000, 400), 0);
    uint32_t ids[200], spacer[200];
    for (int i = 0; i < 200; i++) {
        ids[i] = kvt_extents_alloc(&a, 256);
        spacer[i] = kvt_extents_alloc(&a, 1);
        cr_assert_neq(ids[i], KVT_NIL);
        cr_assert_neq(spacer[i], KVT_NIL);
    }
    uint32_t tail = kvt_extents_alloc(&a, 1000);
    cr_assert_neq(tail, KVT_NIL);
    for (int i = 0; i < 200; i++)
        kvt_extents_free(&a, ids[i]);
    a.scanned = 0;
    cr_assert_eq(kvt_extents_alloc(&a, 300), KVT_NIL);
    cr_assert_leq(a.scanned, 16, "examined %llu holes", (unsigned long long)a.scanned);
    kvt_extents_free(&a, tail);
    a.scanned = 0;
    uint32_t big = kvt_extents_alloc(&a, 300);
    cr_assert_neq(big, KVT_NIL);
    cr_assert_eq(kvt_extents_off(&a, big), 200 * 257);
    cr_assert_leq(a.scanned, 16);
    kvt_extents_fini(&a);
}
