/*  test_store_remote.c — the remote tier under the storage manager, against
    a real 3-master Redis Cluster each test starts itself (free loopback
    ports, a temporary directory, killed at the end): what one storage wrote
    another reads back (promoted into its pool), a lookup extends the local
    prefix with what only the cluster holds, a corrupted value and a value
    of another rank or namespace are counted misses, and two replays in a
    row — the second resumes from what the first stored, 0 wrong resumes.
    Skipped, saying so, where redis-server is not installed. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/kvt_test_redis.h"
#include "kvtier/kvt_storage.h"
#include "replay/kvt_replay.h"
#include "store/kvt_rcluster.h"

#define UNIT 4096
#define NS   0x42u

static kvt_tredis_t s_r;

static void s_start(void)
{
    if (!kvt_tredis_available())
        cr_skip_test("redis-server is not installed (tools/setup.sh installs it)");
    kvt_tredis_start(&s_r, 3, 0);
}

static void s_stop(void)
{
    kvt_tredis_stop(&s_r);
}

TestSuite(storage_remote, .init = s_start, .fini = s_stop, .timeout = 60);

static void s_quiet(void *arg, int level, const char *line)
{
    (void)arg;
    (void)level;
    (void)line;
}

static kvt_hash_t s_key(uint64_t i)
{
    return (kvt_hash_t){.hi = i * 0x9E3779B97F4A7C15ull, .lo = 0x7777000000000000ull + i};
}

static void s_fill(uint8_t *buf, size_t n, uint64_t i)
{
    for (size_t j = 0; j < n; j++)
        buf[j] = (uint8_t)(i * 31 + j * 7 + (j >> 8));
}

//  A storage with a 64-unit pool over the test's cluster, as rank `rank`
//  of `world` writing namespace id `ns_id`.
static kvt_storage_t *s_storage(uint32_t rank, uint32_t world, uint64_t ns_id)
{
    kvt_storage_config_t cfg;
    kvt_storage_config_defaults(&cfg);
    cfg.pool.capacity_bytes = 64 * UNIT;
    cfg.pool.log = s_quiet;
    cfg.remote_enabled = true;
    cfg.remote.seeds = s_r.seeds;
    cfg.remote.rank = rank;
    cfg.remote.world_size = world;
    cfg.remote.ns_id = ns_id;
    cfg.remote.layout_id = 0xABCDu;
    char err[256] = "";
    kvt_storage_t *s = kvt_storage_new(&cfg, err, sizeof err);
    cr_assert_not_null(s, "kvt_storage_new: %s", err);
    return s;
}

static kvt_holder_t s_holder(kvt_storage_t *s)
{
    kvt_holder_t h = 0;
    cr_assert_eq(kvt_pool_holder_add(kvt_storage_pool(s), "test", &h), KVT_STORE_OK);
    return h;
}

static void s_put(kvt_storage_t *s, uint64_t i)
{
    uint8_t buf[UNIT];
    s_fill(buf, sizeof buf, i);
    cr_assert_eq(kvt_storage_put(s, NS, s_key(i), KVT_OBJ_KV, buf, sizeof buf), KVT_STORE_OK);
}

//  Gets object i and checks its bytes; returns where it was found.
static kvt_tier_t s_get_ok(kvt_storage_t *s, kvt_holder_t h, uint64_t i)
{
    kvt_lease_t lease = {0};
    kvt_obj_view_t view;
    int rc = kvt_storage_get(s, NS, s_key(i), KVT_OBJ_KV, h, &lease, &view);
    cr_assert_eq(rc, KVT_STORE_OK, "get %llu: %s", (unsigned long long)i, kvt_store_strerror(rc));
    uint8_t want[UNIT];
    s_fill(want, sizeof want, i);
    cr_assert_eq(view.size, sizeof want);
    cr_assert_eq(memcmp(view.ptr, want, sizeof want), 0, "object %llu: wrong bytes",
                 (unsigned long long)i);
    kvt_tier_t tier = view.tier;
    cr_assert_eq(kvt_storage_release(s, &lease), KVT_STORE_OK);
    return tier;
}

static int s_get(kvt_storage_t *s, kvt_holder_t h, uint64_t i)
{
    kvt_lease_t lease = {0};
    kvt_obj_view_t view;
    int rc = kvt_storage_get(s, NS, s_key(i), KVT_OBJ_KV, h, &lease, &view);
    if (rc == KVT_STORE_OK)
        kvt_storage_release(s, &lease);
    return rc;
}

Test(storage_remote, a_second_storage_reads_what_the_first_wrote)
{
    kvt_storage_t *a = s_storage(0, 1, 7);
    for (uint64_t i = 0; i < 8; i++)
        s_put(a, i);
    kvt_storage_stats_t st;
    kvt_storage_stats(a, &st);
    cr_assert_eq(st.remote.puts, 8,
                 "every commit is written through (%llu writes, %llu failed, %llu dropped)",
                 (unsigned long long)st.remote_writes, (unsigned long long)st.remote_writes_failed,
                 (unsigned long long)st.remote.puts_dropped);
    cr_assert_eq(st.remote_writes_failed, 0);

    kvt_storage_t *b = s_storage(0, 1, 7); //  another engine: an empty pool
    kvt_holder_t h = s_holder(b);
    cr_assert_eq(kvt_storage_touch(b, NS, s_key(3), KVT_OBJ_KV), KVT_TOUCH_PRESENT,
                 "only in the remote tier: present, not refreshed");
    cr_assert_eq(kvt_storage_touch(b, NS, s_key(99), KVT_OBJ_KV), KVT_TOUCH_GONE);
    for (uint64_t i = 0; i < 8; i++)
        cr_assert_eq(s_get_ok(b, h, i), KVT_TIER_REMOTE, "object %llu", (unsigned long long)i);
    for (uint64_t i = 0; i < 8; i++)
        cr_assert_eq(s_get_ok(b, h, i), KVT_TIER_POOL, "promoted into the pool");
    kvt_storage_stats(b, &st);
    cr_assert_eq(st.get_hits_remote, 8);
    cr_assert_eq(st.remote.get_hits, 8);
    cr_assert_eq(st.touches_remote, 1);
    cr_assert_eq(s_get(b, h, 100), KVT_STORE_ENOTFOUND);
    kvt_storage_stats(b, &st);
    cr_assert_eq(st.remote.get_misses, 1);
    kvt_storage_destroy(&a);
    kvt_storage_destroy(&b);
}

Test(storage_remote, a_lookup_adds_what_only_the_cluster_holds)
{
    kvt_storage_t *a = s_storage(0, 1, 7);
    kvt_storage_t *b = s_storage(0, 1, 7);
    for (uint64_t i = 0; i < 3; i++)
        s_put(b, i); //  local to b (and written through)
    for (uint64_t i = 3; i < 8; i++)
        s_put(a, i); //  only in the cluster, for b
    kvt_hash_t keys[10];
    for (uint64_t i = 0; i < 10; i++)
        keys[i] = s_key(i == 9 ? 5 : i); //  key 8 is nowhere: the prefix ends there
    kvt_holder_t h = s_holder(b);
    int k = kvt_storage_lookup(b, NS, keys, 10, KVT_OBJ_KV, h, NULL, NULL);
    cr_assert_eq(k, 8);
    kvt_storage_stats_t st;
    kvt_storage_stats(b, &st);
    cr_assert_eq(st.lookup_keys_pool, 3);
    cr_assert_eq(st.lookup_keys_remote, 5);
    cr_assert_eq(st.remote.lookups, 1, "one pipelined round");
    //  A lookup the local tiers answer in full does not ask the cluster.
    k = kvt_storage_lookup(b, NS, keys, 3, KVT_OBJ_KV, h, NULL, NULL);
    cr_assert_eq(k, 3);
    kvt_storage_stats(b, &st);
    cr_assert_eq(st.remote.lookups, 1);
    kvt_storage_destroy(&a);
    kvt_storage_destroy(&b);
}

//  A raw copy of object i's value from one writer's key to another's,
//  optionally with one byte flipped.
static void s_copy_value(const char *src_key, const char *dst_key, long flip_at)
{
    char err[256] = "";
    kvt_rcluster_t *rc = kvt_rcluster_new(s_r.seeds, NULL, err, sizeof err);
    cr_assert_not_null(rc, "%s", err);
    kvt_rc_cmd_t get = {.op = KVT_RC_GET, .key = src_key, .keylen = strlen(src_key)};
    kvt_rcluster_exec(rc, &get, 1);
    cr_assert_eq(get.status, KVT_RC_OK, "%s", src_key);
    if (flip_at >= 0) {
        cr_assert_lt((size_t)flip_at, get.replylen);
        ((unsigned char *)get.reply)[flip_at] ^= 0x01;
    }
    kvt_rc_cmd_t set = {.op = KVT_RC_SET,
                        .key = dst_key,
                        .keylen = strlen(dst_key),
                        .value = get.reply,
                        .valuelen = get.replylen};
    kvt_rcluster_exec(rc, &set, 1);
    cr_assert_eq(set.status, KVT_RC_OK);
    free(get.reply);
    kvt_rcluster_destroy(&rc);
}

//  The cluster key of object i as a writer (rank, world, ns_id) names it.
static void s_name(uint32_t rank, uint32_t world, uint64_t ns_id, uint64_t i, char *buf, size_t cap)
{
    kvt_remote_config_t c;
    kvt_remote_config_defaults(&c);
    c.seeds = s_r.seeds;
    c.rank = rank;
    c.world_size = world;
    c.ns_id = ns_id;
    c.layout_id = 0xABCDu;
    char err[256] = "";
    kvt_remote_t *r = kvt_remote_new(&c, err, sizeof err);
    cr_assert_not_null(r, "%s", err);
    kvt_remote_key(r, NS, s_key(i), KVT_OBJ_KV, buf, cap);
    kvt_remote_destroy(&r);
}

Test(storage_remote, a_corrupted_value_is_a_counted_miss)
{
    kvt_storage_t *a = s_storage(0, 1, 7);
    s_put(a, 1);
    s_put(a, 2);
    char k1[160], k2[160];
    s_name(0, 1, 7, 1, k1, sizeof k1);
    s_name(0, 1, 7, 2, k2, sizeof k2);
    s_copy_value(k1, k1, KVT_REMOTE_HEADER + 100); //  a payload byte
    s_copy_value(k2, k2, 44);                      //  a header byte only the header checksum covers
    kvt_storage_t *b = s_storage(0, 1, 7);
    kvt_holder_t h = s_holder(b);
    cr_assert_eq(s_get(b, h, 1), KVT_STORE_ENOTFOUND);
    cr_assert_eq(s_get(b, h, 2), KVT_STORE_ENOTFOUND);
    kvt_storage_stats_t st;
    kvt_storage_stats(b, &st);
    cr_assert_eq(st.remote.get_corrupt, 2);
    cr_assert_eq(st.get_hits_remote, 0);
    cr_assert_eq(st.get_misses, 2);
    cr_assert_eq(st.pool.objects, 0, "nothing was promoted");
    kvt_storage_destroy(&a);
    kvt_storage_destroy(&b);
}

Test(storage_remote, a_value_of_another_rank_or_namespace_is_a_counted_miss)
{
    kvt_storage_t *r1 = s_storage(1, 2, 7);    //  rank 1 of 2
    kvt_storage_t *other = s_storage(0, 2, 8); //  rank 0, another namespace id
    s_put(r1, 4);
    s_put(other, 5);
    char from1[160], from_other[160], ours4[160], ours5[160];
    s_name(1, 2, 7, 4, from1, sizeof from1);
    s_name(0, 2, 8, 5, from_other, sizeof from_other);
    s_name(0, 2, 7, 4, ours4, sizeof ours4);
    s_name(0, 2, 7, 5, ours5, sizeof ours5);
    s_copy_value(from1, ours4, -1);
    s_copy_value(from_other, ours5, -1);
    kvt_storage_t *r0 = s_storage(0, 2, 7);
    kvt_holder_t h = s_holder(r0);
    cr_assert_eq(s_get(r0, h, 4), KVT_STORE_ENOTFOUND, "rank 1's bytes under rank 0's name");
    cr_assert_eq(s_get(r0, h, 5), KVT_STORE_ENOTFOUND, "another namespace's bytes");
    kvt_storage_stats_t st;
    kvt_storage_stats(r0, &st);
    cr_assert_eq(st.remote.get_foreign, 2);
    cr_assert_eq(st.get_hits_remote, 0);
    cr_assert_eq(st.pool.objects, 0);
    kvt_storage_destroy(&r1);
    kvt_storage_destroy(&other);
    kvt_storage_destroy(&r0);
}

static kvt_replay_report_t *s_run(const kvt_replay_cfg_t *cfg)
{
    kvt_replay_report_t *r = calloc(1, sizeof *r);
    char err[512] = "";
    cr_assert_eq(kvt_replay_run(cfg, r, err, sizeof err), 0, "%s", err);
    return r;
}

Test(storage_remote, a_second_replay_resumes_from_what_the_first_stored)
{
    kvt_replay_cfg_t c;
    kvt_replay_defaults(&c);
    c.limit = 60;
    c.hbm_pool_bytes = 1ull << 20;
    c.cpu_pool_bytes = 4ull << 20;
    c.remote = s_r.seeds;
    c.log_level = 0;
    kvt_replay_report_t *r = s_run(&c);
    cr_assert_eq(r->engine.wrong_resumes, 0);
    uint64_t written = kvt_replay_counter(r, NULL, "remote.puts");
    cr_assert_gt(written, 0, "the first run writes through to the cluster");
    cr_assert_eq(kvt_replay_counter(r, NULL, "remote.puts_dropped"), 0);
    kvt_replay_report_clear(r);
    free(r);

    r = s_run(&c); //  a new engine and new ranks: empty pools
    cr_assert_eq(r->engine.wrong_resumes, 0);
    cr_assert_eq(kvt_replay_counter(r, NULL, "runner.blocks_wrong"), 0);
    cr_assert(r->quiescent, "not quiescent: %s", r->problem);
    uint64_t hits = kvt_replay_counter(r, NULL, "storage.get_hits_remote");
    cr_assert_gt(hits, 0, "the second run restores from the first run's objects");
    cr_assert_gt(kvt_replay_counter(r, NULL, "storage.lookup_keys_remote"), 0);
    cr_assert_eq(kvt_replay_counter(r, NULL, "remote.get_foreign") +
                     kvt_replay_counter(r, NULL, "remote.get_corrupt"),
                 0);
    kvt_replay_report_clear(r);
    free(r);
}

static void s_start_replicated(void)
{
    if (!kvt_tredis_available())
        cr_skip_test("redis-server is not installed (tools/setup.sh installs it)");
    kvt_tredis_start(&s_r, 3, 1);
}

//  The first object (from `from`) whose key lands in master m's slots (the
//  test cluster gives master m slots [m*16384/3, (m+1)*16384/3)).
static uint64_t s_object_on(uint32_t m, uint64_t from)
{
    for (uint64_t i = from;; i++) {
        char name[160];
        s_name(0, 1, 7, i, name, sizeof name);
        unsigned slot = kvt_rcluster_slot(name, strlen(name));
        if (slot >= m * 16384u / 3 && slot < (m + 1) * 16384u / 3)
            return i;
    }
}

Test(storage_failover, a_killed_master_is_a_counted_miss_until_its_replica_takes_over,
     .init = s_start_replicated, .fini = s_stop, .timeout = 60)
{
    kvt_storage_t *a = s_storage(0, 1, 7);
    uint64_t i = s_object_on(0, 0), j = s_object_on(0, i + 1), other = s_object_on(1, 0);
    s_put(a, i);
    s_put(a, other);
    //  The replica (node 3) has it before the master dies.
    char name[160];
    s_name(0, 1, 7, i, name, sizeof name);
    redisContext *rc3 = kvt_tredis_conn(&s_r, 3);
    cr_assert(rc3 && !rc3->err);
    freeReplyObject(redisCommand(rc3, "READONLY"));
    bool replicated = false;
    for (int w = 0; w < 500 && !replicated; w++) {
        redisReply *rep = redisCommand(rc3, "EXISTS %s", name);
        replicated = rep && rep->type == REDIS_REPLY_INTEGER && rep->integer == 1;
        freeReplyObject(rep);
        if (!replicated) {
            struct timespec ts = {.tv_nsec = 10000000L};
            nanosleep(&ts, NULL);
        }
    }
    redisFree(rc3);
    cr_assert(replicated, "the replica never got %s", name);
    kvt_tredis_kill(&s_r, 0);

    kvt_storage_t *b = s_storage(0, 1, 7);
    kvt_holder_t h = s_holder(b);
    cr_assert_eq(s_get(b, h, i), KVT_STORE_ENOTFOUND, "its master is down: a miss");
    cr_assert_eq(s_get_ok(b, h, other), KVT_TIER_REMOTE, "the other masters still serve");
    uint8_t buf[UNIT];
    s_fill(buf, sizeof buf, j);
    cr_assert_eq(kvt_storage_put(b, NS, s_key(j), KVT_OBJ_KV, buf, sizeof buf), KVT_STORE_OK,
                 "the pool still takes it");
    kvt_storage_stats_t st;
    kvt_storage_stats(b, &st);
    cr_assert_geq(st.remote.get_errors, 1);
    cr_assert_eq(st.remote_writes_failed, 1, "the write to the dead master is dropped, counted");

    //  The cluster fails the master over to its replica (node 3).
    bool over = false;
    for (int w = 0; w < 300 && !over; w++) {
        over = kvt_tredis_owner(&s_r, 1, 0) == 3;
        if (!over) {
            struct timespec ts = {.tv_nsec = 20000000L};
            nanosleep(&ts, NULL);
        }
    }
    cr_assert(over, "the replica did not take over");
    kvt_storage_t *c = s_storage(0, 1, 7);
    kvt_holder_t hc = s_holder(c);
    cr_assert_eq(s_get_ok(c, hc, i), KVT_TIER_REMOTE, "served by the promoted replica");
    cr_assert_eq(s_get_ok(b, h, i), KVT_TIER_REMOTE, "the old client reloads its map and follows");
    kvt_storage_destroy(&a);
    kvt_storage_destroy(&b);
    kvt_storage_destroy(&c);
}
