/*  test_store_storage.c — the storage manager (kvt_storage): touch's three
    answers, put skipped when refreshed and re-stored when only on disk,
    promotion on get (its source file pinned), write policies (write-through
    discarded when its lease expired), lookups across backends (refresh
    order, disk refresh, no pin left after an error), a restart, per-backend
    counters. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvtier/kvt_storage.h"
#include "store/kvt_disk_int.h"

#define NS   11u
#define UNIT 4096u

static char s_dir[256];

static void s_mkdir(void)
{
    snprintf(s_dir, sizeof(s_dir), "/tmp/kvt-test-storage-%d-XXXXXX", (int)getpid());
    cr_assert_not_null(mkdtemp(s_dir));
}

static void s_rmdir(void)
{
    DIR *d = opendir(s_dir);
    if (!d)
        return;
    struct dirent *de;
    char path[512];
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", s_dir, de->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(s_dir);
}

TestSuite(storage, .init = s_mkdir, .fini = s_rmdir);

static void s_quiet(void *arg, int level, const char *line)
{
    (void)arg;
    (void)level;
    (void)line;
}

static kvt_hash_t s_key(uint64_t i)
{
    return (kvt_hash_t){.hi = i * 0x9E3779B97F4A7C15ull, .lo = 0x5555000000000000ull + i};
}

static void s_fill(uint8_t *buf, size_t n, uint64_t i)
{
    for (size_t j = 0; j < n; j++)
        buf[j] = (uint8_t)(i * 31 + j * 7 + (j >> 8));
}

static uint64_t s_now; //  manual clock of the tests that pass s_clock (ns)

static uint64_t s_clock(void *arg)
{
    (void)arg;
    return s_now;
}

//  Settings: pool of `units` 4 KiB units; disk of 1 MiB in s_dir (if disk).
static kvt_storage_config_t s_config(size_t units, bool disk, kvt_write_policy_t policy)
{
    kvt_storage_config_t cfg;
    kvt_storage_config_defaults(&cfg);
    cfg.pool.capacity_bytes = units * UNIT;
    cfg.pool.log = s_quiet;
    cfg.disk_enabled = disk;
    cfg.disk.dir = s_dir;
    cfg.disk.capacity_bytes = 1 << 20;
    cfg.write_policy = policy;
    return cfg;
}

static kvt_storage_t *s_new(const kvt_storage_config_t *cfg)
{
    char err[256] = "";
    kvt_storage_t *s = kvt_storage_new(cfg, err, sizeof(err));
    cr_assert_not_null(s, "kvt_storage_new: %s", err);
    return s;
}

static kvt_storage_t *s_storage(size_t units, bool disk, kvt_write_policy_t policy)
{
    kvt_storage_config_t cfg = s_config(units, disk, policy);
    return s_new(&cfg);
}

static int s_put(kvt_storage_t *s, uint64_t i)
{
    uint8_t buf[UNIT];
    s_fill(buf, sizeof(buf), i);
    return kvt_storage_put(s, NS, s_key(i), KVT_OBJ_KV, buf, sizeof(buf));
}

static kvt_holder_t s_holder(kvt_storage_t *s)
{
    kvt_holder_t h = 0;
    cr_assert_eq(kvt_pool_holder_add(kvt_storage_pool(s), "lane", &h), KVT_STORE_OK);
    return h;
}

//  Gets object i, checks its bytes, releases; returns the tier or -rc.
static int s_get(kvt_storage_t *s, kvt_holder_t h, uint64_t i)
{
    kvt_lease_t l = {0};
    kvt_obj_view_t v;
    int rc = kvt_storage_get(s, NS, s_key(i), KVT_OBJ_KV, h, &l, &v);
    if (rc != KVT_STORE_OK)
        return rc < 0 ? rc : -100;
    uint8_t want[UNIT];
    s_fill(want, sizeof(want), i);
    cr_assert_eq(v.size, UNIT);
    cr_assert_eq(memcmp(v.ptr, want, UNIT), 0);
    cr_assert_eq(kvt_storage_release(s, &l), KVT_STORE_OK);
    return (int)v.tier;
}

//  Drops object i from the pool only (as an eviction would).
static void s_drop_from_pool(kvt_storage_t *s, uint64_t i)
{
    cr_assert_eq(kvt_pool_remove(kvt_storage_pool(s), NS, s_key(i), KVT_OBJ_KV), KVT_STORE_OK);
}

Test(storage, touch_answers_refreshed_present_for_a_disk_only_object_and_gone)
{
    kvt_storage_t *s = s_storage(8, true, KVT_WRITE_ALWAYS);
    cr_assert_eq(s_put(s, 1), KVT_STORE_OK);
    cr_assert_eq(s_put(s, 2), KVT_STORE_OK);
    kvt_storage_flush(s);
    s_drop_from_pool(s, 2);
    cr_assert_eq(kvt_storage_touch(s, NS, s_key(1), KVT_OBJ_KV), KVT_TOUCH_REFRESHED);
    cr_assert_eq(kvt_storage_touch(s, NS, s_key(2), KVT_OBJ_KV), KVT_TOUCH_PRESENT);
    cr_assert_eq(kvt_storage_touch(s, NS, s_key(3), KVT_OBJ_KV), KVT_TOUCH_GONE);
    kvt_storage_stats_t st;
    kvt_storage_stats(s, &st);
    cr_assert_eq(st.touches_refreshed, 1);
    cr_assert_eq(st.touches_present, 1);
    cr_assert_eq(st.touches_gone, 1);
    cr_assert_eq(st.disk.touches_present, 1);
    kvt_storage_destroy(&s);
    cr_assert_null(s);
}

Test(storage, put_is_skipped_when_refreshed_and_restored_when_only_on_disk)
{
    kvt_storage_t *s = s_storage(8, true, KVT_WRITE_ALWAYS);
    cr_assert_eq(s_put(s, 1), KVT_STORE_OK);
    cr_assert_eq(s_put(s, 1), KVT_STORE_SKIPPED);
    kvt_storage_flush(s);
    s_drop_from_pool(s, 1);
    cr_assert_eq(s_put(s, 1), KVT_STORE_OK, "only on disk: stored into the pool again");
    cr_assert(kvt_pool_contains(kvt_storage_pool(s), NS, s_key(1), KVT_OBJ_KV));
    kvt_storage_flush(s);
    kvt_storage_stats_t st;
    kvt_storage_stats(s, &st);
    cr_assert_eq(st.puts_skipped, 1);
    cr_assert_eq(st.puts_restored, 1);
    cr_assert_eq(st.puts, 2);
    cr_assert_eq(st.pool.puts_skipped, 1);
    cr_assert_eq(st.disk.puts, 1, "the disk copy was not written twice");
    cr_assert_eq(st.disk.puts_skipped, 1);
    kvt_storage_destroy(&s);
}

Test(storage, get_promotes_a_disk_hit_into_the_pool)
{
    kvt_storage_t *s = s_storage(8, true, KVT_WRITE_ALWAYS);
    kvt_holder_t h = s_holder(s);
    cr_assert_eq(s_put(s, 1), KVT_STORE_OK);
    kvt_storage_flush(s);
    s_drop_from_pool(s, 1);
    cr_assert_eq(s_get(s, h, 1), KVT_TIER_DISK);
    cr_assert(kvt_pool_contains(kvt_storage_pool(s), NS, s_key(1), KVT_OBJ_KV));
    cr_assert_eq(s_get(s, h, 1), KVT_TIER_POOL);
    cr_assert_eq(s_get(s, h, 2), KVT_STORE_ENOTFOUND);
    kvt_storage_stats_t st;
    kvt_storage_stats(s, &st);
    cr_assert_eq(st.gets, 3);
    cr_assert_eq(st.get_hits_disk, 1);
    cr_assert_eq(st.get_hits_pool, 1);
    cr_assert_eq(st.get_misses, 1);
    cr_assert_eq(st.promotions, 1);
    cr_assert_eq(st.pool.pinned_bytes, 0);
    kvt_storage_destroy(&s);
}

Test(storage, a_corrupt_disk_copy_is_a_counted_miss_never_promoted)
{
    kvt_storage_t *s = s_storage(8, true, KVT_WRITE_ALWAYS);
    kvt_holder_t h = s_holder(s);
    cr_assert_eq(s_put(s, 1), KVT_STORE_OK);
    kvt_storage_flush(s);
    s_drop_from_pool(s, 1);
    char path[512];
    kvt_hash_t k = s_key(1);
    snprintf(path, sizeof(path), "%s/%016llx-%016llx%016llx-1-00000000-00000001-%016llx.kvt", s_dir,
             (unsigned long long)NS, (unsigned long long)k.hi, (unsigned long long)k.lo, 0ull);
    int fd = open(path, O_WRONLY);
    cr_assert_geq(fd, 0);
    cr_assert_eq(pwrite(fd, "X", 1, KVT_DISK_HEADER_BYTES + 100), 1);
    close(fd);
    cr_assert_eq(s_get(s, h, 1), KVT_STORE_ENOTFOUND);
    cr_assert_not(kvt_pool_contains(kvt_storage_pool(s), NS, s_key(1), KVT_OBJ_KV));
    kvt_storage_stats_t st;
    kvt_storage_stats(s, &st);
    cr_assert_eq(st.disk.corrupt, 1);
    cr_assert_eq(st.get_misses, 1);
    cr_assert_eq(st.pool.used_bytes, 0, "the promotion's reservation was aborted");
    cr_assert_eq(kvt_storage_touch(s, NS, s_key(1), KVT_OBJ_KV), KVT_TOUCH_GONE);
    kvt_storage_destroy(&s);
}

Test(storage, a_restarted_rank_keeps_its_disk_tier)
{
    kvt_storage_t *s = s_storage(4, true, KVT_WRITE_ALWAYS);
    for (uint64_t i = 0; i < 8; i++) {
        cr_assert_eq(s_put(s, i), KVT_STORE_OK); //  the pool holds 4, the disk all 8
        kvt_storage_flush(s);                    //  (a queued write pins its pool object)
    }
    kvt_storage_destroy(&s);
    s = s_storage(4, true, KVT_WRITE_ALWAYS);
    kvt_holder_t h = s_holder(s);
    kvt_hash_t keys[8];
    for (uint64_t i = 0; i < 8; i++)
        keys[i] = s_key(i);
    size_t on_disk = 99;
    cr_assert_eq(kvt_storage_lookup(s, NS, keys, 8, KVT_OBJ_KV, 0, NULL, &on_disk), 8);
    cr_assert_eq(on_disk, 8);
    for (uint64_t i = 0; i < 8; i++)
        cr_assert_eq(s_get(s, h, i), KVT_TIER_DISK);
    kvt_storage_stats_t st;
    kvt_storage_stats(s, &st);
    cr_assert_eq(st.disk.rescanned, 8);
    kvt_storage_destroy(&s);
}

Test(storage, write_policy_never_leaves_the_disk_alone)
{
    kvt_storage_t *s = s_storage(2, true, KVT_WRITE_NEVER);
    for (uint64_t i = 0; i < 4; i++)
        cr_assert_eq(s_put(s, i), KVT_STORE_OK);
    kvt_storage_flush(s);
    kvt_storage_stats_t st;
    kvt_storage_stats(s, &st);
    cr_assert_eq(st.disk.puts, 0);
    cr_assert_eq(st.writes_queued, 0);
    cr_assert_eq(kvt_storage_touch(s, NS, s_key(0), KVT_OBJ_KV), KVT_TOUCH_GONE);
    kvt_storage_destroy(&s);
}

Test(storage, write_policy_on_evict_writes_back_what_the_pool_evicts)
{
    kvt_storage_t *s = s_storage(2, true, KVT_WRITE_ON_EVICT);
    kvt_holder_t h = s_holder(s);
    cr_assert_eq(s_put(s, 0), KVT_STORE_OK);
    cr_assert_eq(s_put(s, 1), KVT_STORE_OK);
    kvt_storage_flush(s);
    kvt_storage_stats_t st;
    kvt_storage_stats(s, &st);
    cr_assert_eq(st.disk.puts, 0, "nothing written before an eviction");
    cr_assert_eq(s_put(s, 2), KVT_STORE_OK); //  evicts 0
    kvt_storage_flush(s);
    kvt_storage_stats(s, &st);
    cr_assert_eq(st.disk.puts, 1);
    cr_assert_eq(kvt_storage_touch(s, NS, s_key(0), KVT_OBJ_KV), KVT_TOUCH_PRESENT);
    cr_assert_eq(s_get(s, h, 0), KVT_TIER_DISK, "the written-back bytes are intact");
    kvt_storage_flush(s); //  the promotion evicted 1, written back too
    kvt_storage_stats(s, &st);
    cr_assert_eq(st.disk.puts, 2);
    cr_assert_eq(s_put(s, 3), KVT_STORE_OK); //  evicts 2 ... or 0, already on disk
    cr_assert_eq(s_put(s, 4), KVT_STORE_OK);
    kvt_storage_flush(s);
    kvt_storage_stats(s, &st);
    cr_assert_eq(st.writeback_skipped, 1, "0 was already on disk");
    kvt_storage_destroy(&s);
}

Test(storage, write_policy_always_writes_through_and_releases_the_writer_lease)
{
    kvt_storage_t *s = s_storage(8, true, KVT_WRITE_ALWAYS);
    for (uint64_t i = 0; i < 5; i++)
        cr_assert_eq(s_put(s, i), KVT_STORE_OK);
    kvt_storage_flush(s);
    kvt_storage_stats_t st;
    kvt_storage_stats(s, &st);
    cr_assert_eq(st.disk.puts, 5);
    cr_assert_eq(st.writes_queued, 5);
    cr_assert_eq(st.pool.pinned_bytes, 0);
    cr_assert_eq(st.pool.leases_active, 0);
    kvt_storage_destroy(&s);
}

Test(storage, zero_copy_reserve_and_commit_write_through_too)
{
    kvt_storage_t *s = s_storage(8, true, KVT_WRITE_ALWAYS);
    kvt_holder_t h = s_holder(s);
    kvt_resv_t r = {0};
    void *p = NULL;
    cr_assert_eq(kvt_storage_reserve(s, NS, s_key(7), KVT_OBJ_KV, UNIT, h, &r, &p), KVT_STORE_OK);
    s_fill(p, UNIT, 7);
    kvt_lease_t l = {0};
    cr_assert_eq(kvt_storage_commit(s, &r, &l), KVT_STORE_OK);
    cr_assert_neq(l.id, 0);
    cr_assert_eq(kvt_storage_release(s, &l), KVT_STORE_OK);
    cr_assert_eq(kvt_storage_release(s, &l), KVT_STORE_ESTALE);
    kvt_storage_flush(s);
    s_drop_from_pool(s, 7);
    cr_assert_eq(s_get(s, h, 7), KVT_TIER_DISK);
    cr_assert_eq(kvt_storage_reserve(s, NS, s_key(8), KVT_OBJ_KV, UNIT, h, &r, &p), KVT_STORE_OK);
    cr_assert_eq(kvt_storage_abort(s, &r), KVT_STORE_OK);
    kvt_storage_stats_t st;
    kvt_storage_stats(s, &st);
    cr_assert_eq(st.pool.aborts, 1);
    cr_assert_eq(st.pool.release_errors, 1);
    kvt_storage_destroy(&s);
}

Test(storage, lookup_counts_leading_keys_in_any_backend_pool_first)
{
    kvt_storage_t *s = s_storage(16, true, KVT_WRITE_ALWAYS);
    kvt_holder_t h = s_holder(s);
    for (uint64_t i = 0; i < 8; i++)
        cr_assert_eq(s_put(s, i), KVT_STORE_OK);
    kvt_storage_flush(s);
    s_drop_from_pool(s, 3); //  pool: 0 1 2 _ _ 5 6 7   disk: all
    s_drop_from_pool(s, 4);
    kvt_pool_t *pool = kvt_storage_pool(s);
    kvt_disk_t *disk = kvt_storage_disk(s);
    cr_assert_eq(kvt_disk_remove(disk, NS, s_key(6), KVT_OBJ_KV), KVT_STORE_OK);
    kvt_hash_t keys[9];
    for (uint64_t i = 0; i < 9; i++)
        keys[i] = s_key(i);
    size_t on_disk = 0;
    kvt_lease_t l = {0};
    cr_assert_eq(kvt_storage_lookup(s, NS, keys, 9, KVT_OBJ_KV, h, &l, &on_disk), 8);
    cr_assert_eq(on_disk, 2);
    kvt_pool_stats_t ps;
    kvt_pool_stats(pool, &ps);
    cr_assert_eq(ps.pinned_bytes, 6 * UNIT, "the pool-resident hits are pinned");
    cr_assert_eq(kvt_storage_release(s, &l), KVT_STORE_OK);
    //  A missing key ends the prefix even if later keys are present.
    cr_assert_eq(kvt_disk_remove(disk, NS, s_key(4), KVT_OBJ_KV), KVT_STORE_OK);
    cr_assert_eq(kvt_storage_lookup(s, NS, keys, 9, KVT_OBJ_KV, 0, NULL, &on_disk), 4);
    cr_assert_eq(on_disk, 1);
    kvt_storage_stats_t st;
    kvt_storage_stats(s, &st);
    cr_assert_eq(st.lookups, 2);
    cr_assert_eq(st.lookup_keys_disk, 3);
    cr_assert_eq(st.lookup_keys_pool, 9);
    kvt_storage_destroy(&s);
}

Test(storage, lookup_refreshes_disk_only_keys_in_the_disk_lru)
{
    kvt_storage_config_t cfg = s_config(8, true, KVT_WRITE_ALWAYS);
    cfg.disk.capacity_bytes = 3 * (UNIT + KVT_DISK_HEADER_BYTES); //  three files
    kvt_storage_t *s = s_new(&cfg);
    kvt_disk_t *disk = kvt_storage_disk(s);
    for (uint64_t i = 0; i < 3; i++) {
        cr_assert_eq(s_put(s, i), KVT_STORE_OK);
        kvt_storage_flush(s);
    }
    s_drop_from_pool(s, 0); //  0: only on disk, and the oldest file there
    kvt_hash_t k0 = s_key(0);
    size_t on_disk = 0;
    cr_assert_eq(kvt_storage_lookup(s, NS, &k0, 1, KVT_OBJ_KV, 0, NULL, &on_disk), 1);
    cr_assert_eq(on_disk, 1);
    cr_assert_eq(s_put(s, 3), KVT_STORE_OK); //  its write-through evicts the oldest file
    kvt_storage_flush(s);
    kvt_hash_t k1 = s_key(1);
    cr_assert_eq(kvt_disk_count(disk, NS, &k0, 1, KVT_OBJ_KV), 1, "the lookup refreshed 0");
    cr_assert_eq(kvt_disk_count(disk, NS, &k1, 1, KVT_OBJ_KV), 0, "1 went instead");
    kvt_storage_destroy(&s);
}

Test(storage, lookup_refreshes_the_deepest_segment_first_so_the_prefix_ends_youngest)
{
    kvt_storage_t *s = s_storage(4, true, KVT_WRITE_ALWAYS);
    cr_assert_eq(s_put(s, 2), KVT_STORE_OK);
    kvt_storage_flush(s);
    s_drop_from_pool(s, 2); //  pool: 0 1 _ 3 4   disk: 2 (and the rest)
    uint64_t order[4] = {0, 1, 3, 4};
    for (int j = 0; j < 4; j++) {
        cr_assert_eq(s_put(s, order[j]), KVT_STORE_OK);
        kvt_storage_flush(s);
    }
    kvt_hash_t keys[5];
    for (uint64_t i = 0; i < 5; i++)
        keys[i] = s_key(i);
    cr_assert_eq(kvt_storage_lookup(s, NS, keys, 5, KVT_OBJ_KV, 0, NULL, NULL), 5);
    //  Segments pool{0,1} disk{2} pool{3,4}, refreshed deepest first: the
    //  pool's LRU is now 4 3 1 0 (old to young), so the next eviction takes
    //  the deepest key, never the prefix.
    cr_assert_eq(s_put(s, 5), KVT_STORE_OK);
    kvt_pool_t *pool = kvt_storage_pool(s);
    cr_assert_not(kvt_pool_contains(pool, NS, s_key(4), KVT_OBJ_KV));
    for (int j = 0; j < 3; j++)
        cr_assert(kvt_pool_contains(pool, NS, s_key(order[j]), KVT_OBJ_KV), "%llu evicted",
                  (unsigned long long)order[j]);
    kvt_storage_destroy(&s);
}

//  L3: a holder removed between the segments of one lookup.
static struct {
    pthread_mutex_t mu; //  guards the fields below
    pthread_cond_t cv;  //  signalled on every stage change
    bool armed;         //  the next pool clock call starts the dance
    int stage;          //  1 lease created, 2 disk lock held, 3 holder removed
    kvt_storage_t *s;   //  the manager
    kvt_holder_t h;     //  the holder removed
} s_race = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void s_race_wait(int stage)
{
    while (s_race.stage < stage)
        pthread_cond_wait(&s_race.cv, &s_race.mu);
}

static void s_race_set(int stage)
{
    s_race.stage = stage;
    pthread_cond_broadcast(&s_race.cv);
}

//  Called by the pool under its lock when the deepest segment creates the
//  lease: holds the caller there until the disk segment is sure to block.
static uint64_t s_race_clock(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&s_race.mu);
    if (s_race.armed) {
        s_race.armed = false;
        s_race_set(1);
        s_race_wait(2);
    }
    pthread_mutex_unlock(&s_race.mu);
    return 0;
}

//  Holds the disk lock (no pool lock) until the holder is gone.
static void *s_race_disk_holder(void *arg)
{
    (void)arg;
    kvt_disk_t *d = kvt_storage_disk(s_race.s);
    pthread_mutex_lock(&s_race.mu);
    s_race_wait(1);
    pthread_mutex_unlock(&s_race.mu);
    pthread_mutex_lock(&d->mu);
    pthread_mutex_lock(&s_race.mu);
    s_race_set(2);
    s_race_wait(3);
    pthread_mutex_unlock(&s_race.mu);
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

//  Removes the holder once the deepest segment's pool lookup returned.
static void *s_race_remover(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&s_race.mu);
    s_race_wait(2);
    pthread_mutex_unlock(&s_race.mu);
    cr_assert_eq(kvt_pool_holder_remove(kvt_storage_pool(s_race.s), s_race.h), KVT_STORE_OK);
    pthread_mutex_lock(&s_race.mu);
    s_race_set(3);
    pthread_mutex_unlock(&s_race.mu);
    return NULL;
}

Test(storage, a_lookup_that_fails_after_a_deeper_segment_pinned_releases_its_lease)
{
    kvt_storage_config_t cfg = s_config(8, true, KVT_WRITE_ALWAYS);
    cfg.pool.clock = s_race_clock;
    kvt_storage_t *s = s_new(&cfg);
    kvt_holder_t h = s_holder(s);
    for (uint64_t i = 0; i < 3; i++)
        cr_assert_eq(s_put(s, i), KVT_STORE_OK);
    kvt_storage_flush(s);
    s_drop_from_pool(s, 1); //  segments: pool{0} disk{1} pool{2}
    s_race.s = s;
    s_race.h = h;
    s_race.armed = true;
    pthread_t a, b;
    cr_assert_eq(pthread_create(&a, NULL, s_race_disk_holder, NULL), 0);
    cr_assert_eq(pthread_create(&b, NULL, s_race_remover, NULL), 0);
    kvt_hash_t keys[3] = {s_key(0), s_key(1), s_key(2)};
    kvt_lease_t l = {0};
    int rc = kvt_storage_lookup(s, NS, keys, 3, KVT_OBJ_KV, h, &l, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    cr_assert_eq(rc, KVT_STORE_EHOLDER);
    cr_assert_eq(l.id, 0);
    kvt_pool_stats_t ps;
    kvt_pool_stats(kvt_storage_pool(s), &ps);
    cr_assert_eq(ps.leases_active, 0, "no lease outlives the error");
    cr_assert_eq(ps.pinned_bytes, 0);
    kvt_storage_destroy(&s);
}

Test(storage, a_promotion_never_evicts_its_own_source_file)
{
    kvt_storage_config_t cfg = s_config(2, true, KVT_WRITE_ON_EVICT);
    cfg.disk.capacity_bytes = 3 * (UNIT + KVT_DISK_HEADER_BYTES);
    kvt_storage_t *s = s_new(&cfg);
    kvt_holder_t h = s_holder(s);
    for (uint64_t i = 1; i <= 5; i++) { //  1 2 3 end on disk (1 oldest), 4 5 in the pool
        cr_assert_eq(s_put(s, i), KVT_STORE_OK);
        kvt_storage_flush(s);
    }
    kvt_disk_t *disk = kvt_storage_disk(s);
    kvt_hash_t k1 = s_key(1), k2 = s_key(2);
    cr_assert_eq(kvt_disk_count(disk, NS, &k1, 1, KVT_OBJ_KV), 1, "on disk (count: no refresh)");
    //  The promotion's reservation evicts 4 from the pool, whose write-back
    //  needs a file's room on the disk: it must not be 1's.
    cr_assert_eq(s_get(s, h, 1), KVT_TIER_DISK);
    kvt_storage_flush(s);
    kvt_storage_stats_t st;
    kvt_storage_stats(s, &st);
    cr_assert_eq(st.promotions, 1);
    cr_assert_eq(st.disk.evictions, 1);
    cr_assert_eq(kvt_disk_count(disk, NS, &k2, 1, KVT_OBJ_KV), 0,
                 "the oldest file that was not being read went");
    kvt_storage_destroy(&s);
}

//  Holds the disk's only I/O thread until opened.
static struct {
    pthread_mutex_t mu; //  guards the fields below
    pthread_cond_t cv;  //  signalled on change
    bool open;          //  the writer may finish
    bool entered;       //  the writer is inside
} s_gate = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static int s_gate_done(void *arg, int rc)
{
    (void)arg;
    (void)rc;
    pthread_mutex_lock(&s_gate.mu);
    s_gate.entered = true;
    pthread_cond_broadcast(&s_gate.cv);
    while (!s_gate.open)
        pthread_cond_wait(&s_gate.cv, &s_gate.mu);
    pthread_mutex_unlock(&s_gate.mu);
    return 0;
}

Test(storage, a_write_through_whose_pool_lease_expired_is_discarded)
{
    kvt_storage_config_t cfg = s_config(8, true, KVT_WRITE_ALWAYS);
    cfg.pool.clock = s_clock;
    cfg.pool.ttl_ms = 1000;
    cfg.disk.io_threads = 1;
    cfg.disk.queue_depth = 2;
    kvt_storage_t *s = s_new(&cfg);
    static uint8_t other[UNIT];
    cr_assert_eq(kvt_disk_put(kvt_storage_disk(s), NS, s_key(100), KVT_OBJ_KV, other, UNIT,
                              s_gate_done, NULL),
                 KVT_STORE_OK);
    pthread_mutex_lock(&s_gate.mu);
    while (!s_gate.entered)
        pthread_cond_wait(&s_gate.cv, &s_gate.mu);
    pthread_mutex_unlock(&s_gate.mu);
    //  The disk is stuck: object 1's write-through waits in the queue,
    //  leasing the pool object, past the ttl.
    cr_assert_eq(s_put(s, 1), KVT_STORE_OK);
    s_now += 1000 * 1000000ull;
    cr_assert_eq(kvt_storage_reclaim(s), 1);
    pthread_mutex_lock(&s_gate.mu);
    s_gate.open = true;
    pthread_cond_broadcast(&s_gate.cv);
    pthread_mutex_unlock(&s_gate.mu);
    kvt_storage_flush(s);
    kvt_storage_stats_t st;
    kvt_storage_stats(s, &st);
    cr_assert_eq(st.pool.reclaimed_expired, 1);
    cr_assert_eq(st.disk.puts_discarded, 1, "its bytes may have changed under the writer");
    cr_assert_eq(st.disk.puts, 1, "only the other file");
    kvt_hash_t k1 = s_key(1);
    cr_assert_eq(kvt_disk_count(kvt_storage_disk(s), NS, &k1, 1, KVT_OBJ_KV), 0);
    cr_assert_eq(kvt_storage_touch(s, NS, s_key(1), KVT_OBJ_KV), KVT_TOUCH_REFRESHED);
    kvt_storage_destroy(&s);
}

Test(storage, a_pool_only_manager_works_without_a_disk)
{
    kvt_storage_t *s = s_storage(2, false, KVT_WRITE_ALWAYS);
    kvt_holder_t h = s_holder(s);
    cr_assert_null(kvt_storage_disk(s));
    cr_assert_eq(s_put(s, 1), KVT_STORE_OK);
    cr_assert_eq(s_get(s, h, 1), KVT_TIER_POOL);
    cr_assert_eq(s_get(s, h, 2), KVT_STORE_ENOTFOUND);
    kvt_hash_t k = s_key(1);
    cr_assert_eq(kvt_storage_lookup(s, NS, &k, 1, KVT_OBJ_KV, 0, NULL, NULL), 1);
    cr_assert_eq(kvt_storage_touch(s, NS, s_key(2), KVT_OBJ_KV), KVT_TOUCH_GONE);
    kvt_storage_destroy(&s);
}

Test(storage, counters_name_every_backend_and_match_the_stats)
{
    kvt_storage_t *s = s_storage(8, true, KVT_WRITE_ALWAYS);
    cr_assert_eq(s_put(s, 1), KVT_STORE_OK);
    kvt_storage_flush(s);
    size_t n = kvt_storage_counters(s, NULL, 0);
    cr_assert_gt(n, 60);
    kvt_counter_t *c = calloc(n, sizeof(*c));
    cr_assert_eq(kvt_storage_counters(s, c, n), n);
    kvt_storage_stats_t st;
    kvt_storage_stats(s, &st);
    bool saw_used = false, saw_disk = false, saw_kind = false;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(c[i].name, "pool.used_bytes") == 0) {
            saw_used = true;
            cr_assert_eq(c[i].value, st.pool.used_bytes);
        }
        if (strcmp(c[i].name, "disk.puts") == 0) {
            saw_disk = true;
            cr_assert_eq(c[i].value, 1);
        }
        if (strcmp(c[i].name, "pool.hits.kv_state") == 0)
            saw_kind = true;
        for (size_t j = 0; j < i; j++)
            cr_assert_str_neq(c[i].name, c[j].name, "names are unique");
    }
    cr_assert(saw_used && saw_disk && saw_kind);
    free(c);
    kvt_storage_destroy(&s);
}

Test(storage, a_bad_setting_is_refused_with_its_name)
{
    kvt_storage_config_t cfg;
    char err[256];
    kvt_storage_config_defaults(&cfg);
    cfg.pool.capacity_bytes = 1 << 20;
    cfg.write_policy = (kvt_write_policy_t)7;
    cr_assert_null(kvt_storage_new(&cfg, err, sizeof(err)));
    cr_assert(strstr(err, "write_policy=7"), "%s", err);
    cfg.write_policy = KVT_WRITE_ALWAYS;
    cfg.disk_enabled = true;
    cr_assert_null(kvt_storage_new(&cfg, err, sizeof(err)));
    cr_assert(strstr(err, "disk.dir"), "%s", err);
}

// ------------------------------------------------- disk I/O modes, flush --

//  FNV-1a over the sorted names and contents of the files in dir.
static uint64_t s_dir_digest(const char *dir, size_t *nfiles)
{
    struct dirent **list = NULL;
    int n = scandir(dir, &list, NULL, alphasort);
    cr_assert_geq(n, 0);
    uint64_t h = 1469598103934665603ull;
    *nfiles = 0;
    for (int i = 0; i < n; i++) {
        const char *name = list[i]->d_name;
        if (name[0] != '.') {
            char path[600];
            snprintf(path, sizeof(path), "%s/%s", dir, name);
            FILE *f = fopen(path, "rb");
            cr_assert_not_null(f, "%s", path);
            for (const char *c = name; *c; c++)
                h = (h ^ (uint8_t)*c) * 1099511628211ull;
            int ch;
            while ((ch = fgetc(f)) != EOF)
                h = (h ^ (uint8_t)ch) * 1099511628211ull;
            fclose(f);
            (*nfiles)++;
        }
        free(list[i]);
    }
    free(list);
    return h;
}

//  One fixed sequence of storage calls in INLINE mode, in dir; writes every
//  counter into c (returns how many). Every write is checked to be on disk
//  when the call that queued it returns, without a flush.
static size_t s_inline_run(const char *dir, kvt_write_policy_t policy, kvt_counter_t *c, size_t cap)
{
    kvt_storage_config_t cfg = s_config(8, true, policy);
    cfg.disk.dir = dir;
    cfg.disk.io_mode = KVT_DISK_IO_INLINE;
    cfg.disk.queue_depth = 1; //  any write still queued would make the next one EBUSY
    cfg.disk.capacity_bytes = 24 * (UNIT + KVT_DISK_HEADER_BYTES); //  the disk evicts too
    kvt_storage_t *s = s_new(&cfg);
    kvt_holder_t h = s_holder(s);
    kvt_disk_t *d = kvt_storage_disk(s);
    kvt_hash_t keys[64];
    for (uint64_t i = 0; i < 60; i++) {
        keys[i] = s_key(i);
        cr_assert_eq(s_put(s, i), KVT_STORE_OK);
        kvt_disk_stats_t ds;
        kvt_disk_stats(d, &ds);
        cr_assert_eq(ds.objects_writing, 0, "put %llu: a write still queued when the call returned",
                     (unsigned long long)i);
        if (policy == KVT_WRITE_ALWAYS)
            cr_assert_eq(kvt_disk_stat(d, NS, s_key(i), KVT_OBJ_KV, NULL, NULL), KVT_STORE_OK,
                         "put %llu is not on disk when the call returns", (unsigned long long)i);
        if (i % 7 == 6) {
            int tier = s_get(s, h, i / 2);
            cr_assert(tier == KVT_TIER_POOL || tier == KVT_TIER_DISK || tier == KVT_STORE_ENOTFOUND,
                      "get %llu: %d", (unsigned long long)(i / 2), tier);
            kvt_disk_stats(d, &ds);
            cr_assert_eq(ds.objects_writing, 0);
        }
        if (i % 5 == 4) {
            kvt_lease_t l = {0};
            cr_assert_geq(kvt_storage_lookup(s, NS, keys, (size_t)i + 1, KVT_OBJ_KV, h, &l, NULL),
                          0);
            if (l.id)
                cr_assert_eq(kvt_storage_release(s, &l), KVT_STORE_OK);
        }
        kvt_storage_touch(s, NS, s_key(i / 3), KVT_OBJ_KV);
    }
    kvt_storage_stats_t st;
    kvt_storage_stats(s, &st);
    cr_assert_eq(st.writes_not_queued, 0, "a write found the queue busy");
    cr_assert_eq(st.disk.puts_dropped, 0);
    cr_assert_gt(st.disk.evictions, 0);
    size_t n = kvt_storage_counters(s, c, cap);
    kvt_storage_destroy(&s);
    return n;
}

static void s_inline_twice(kvt_write_policy_t policy)
{
    char a[300], b[300];
    snprintf(a, sizeof(a), "%s/a", s_dir);
    snprintf(b, sizeof(b), "%s/b", s_dir);
    kvt_counter_t ca[256], cb[256];
    size_t na = s_inline_run(a, policy, ca, 256);
    size_t nb = s_inline_run(b, policy, cb, 256);
    cr_assert_eq(na, nb);
    cr_assert_leq(na, 256);
    for (size_t i = 0; i < na; i++) {
        cr_assert_str_eq(ca[i].name, cb[i].name);
        cr_assert_eq(ca[i].value, cb[i].value, "%s: %llu then %llu", ca[i].name,
                     (unsigned long long)ca[i].value, (unsigned long long)cb[i].value);
    }
    size_t fa = 0, fb = 0;
    uint64_t da = s_dir_digest(a, &fa), db = s_dir_digest(b, &fb);
    cr_assert_gt(fa, 0);
    cr_assert_eq(fa, fb);
    cr_assert_eq(da, db, "the two disk tiers hold different files");
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'", a, b);
    cr_assert_eq(system(cmd), 0);
}

Test(storage, inline_disk_io_gives_the_same_tier_for_the_same_calls_write_through)
{
    s_inline_twice(KVT_WRITE_ALWAYS);
}

Test(storage, inline_disk_io_gives_the_same_tier_for_the_same_calls_write_back)
{
    s_inline_twice(KVT_WRITE_ON_EVICT);
}

Test(storage, flush_waits_for_every_write_and_releases_the_writers_leases)
{
    kvt_storage_config_t cfg = s_config(256, true, KVT_WRITE_ALWAYS);
    cfg.pool.max_objects = 512;
    cfg.disk.max_objects = 512;
    cfg.disk.capacity_bytes = 4 << 20;
    cfg.disk.io_threads = 1;
    cfg.disk.queue_depth = 256;
    kvt_storage_t *s = s_new(&cfg);
    for (uint64_t i = 0; i < 200; i++)
        cr_assert_eq(s_put(s, i), KVT_STORE_OK);
    kvt_storage_flush(s);
    kvt_storage_stats_t st;
    kvt_storage_stats(s, &st);
    cr_assert_eq(st.writes_queued, 200);
    cr_assert_eq(st.disk.objects_writing, 0, "flush returned with writes in flight");
    cr_assert_eq(st.disk.puts, 200);
    cr_assert_eq(st.pool.leases_active, 0, "a write job's pool lease outlived the flush");
    cr_assert_eq(st.pool.pinned_bytes, 0);
    kvt_storage_destroy(&s);
}

Test(storage, a_bad_disk_io_mode_is_refused_with_its_name)
{
    kvt_storage_config_t cfg = s_config(8, true, KVT_WRITE_ALWAYS);
    cfg.disk.io_mode = (kvt_disk_io_mode_t)5;
    char err[256] = "";
    cr_assert_null(kvt_storage_new(&cfg, err, sizeof(err)));
    cr_assert(strstr(err, "disk.io_mode=5"), "%s", err);
}
