/*  test_store_concurrency.c — lanes sharing one storage manager: threads
    doing put / reserve-commit / get / lookup-with-pin / touch / remove while
    another reclaims, reads counters and advances the manual clock, with
    disk write-through on I/O threads. Lanes also hold reservations and
    leases past the TTL on purpose, so reclaim races live handles: a late
    write into a reclaimed reservation must land in quarantined bytes that
    no other object uses. Every byte read under a lease is checked against
    the bytes its key was written with, and the books balance at the end.
    The TSan build runs this binary (tools/check.sh). */
#include <criterion/criterion.h>
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvtier/kvt_storage.h"

#define NS      5u
#define UNIT    4096u
#define KEYS    128u //  distinct objects
#define WORKERS 3    //  lane threads
#define OPS     2500 //  operations per lane
#define LEAKED  8    //  leases a dead holder leaves behind
#define S_MS    1000000ull
#define TTL_MS  1000ull //  pool ttl
#define STEP_MS 100ull  //  clock advance per reclaimer pass (less than the ttl)
#define WAITS   200000  //  yields a lane waits at most for the clock to pass a ttl

static char s_dir[256];
static uint64_t s_now; //  manual clock (ns), read atomically
static int s_readers;  //  lanes reading through a lease now (the clock waits for 0)

static uint64_t s_clock(void *arg)
{
    (void)arg;
    return __atomic_load_n(&s_now, __ATOMIC_RELAXED);
}

static void s_quiet(void *arg, int level, const char *line)
{
    (void)arg;
    (void)level;
    (void)line;
}

static void s_mkdir(void)
{
    snprintf(s_dir, sizeof(s_dir), "/tmp/kvt-test-conc-%d-XXXXXX", (int)getpid());
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

TestSuite(concurrency, .init = s_mkdir, .fini = s_rmdir, .timeout = 120);

static kvt_hash_t s_key(uint64_t i)
{
    return (kvt_hash_t){.hi = 0x7777000000000000ull | i, .lo = i * 0x9E3779B97F4A7C15ull};
}

//  Every object's size and bytes follow from its key alone.
static size_t s_size(uint64_t i)
{
    return (1 + i % 3) * UNIT - (i % 100);
}

static uint8_t s_byte(uint64_t i, size_t j)
{
    return (uint8_t)(i * 131 + j * 7 + (j >> 9));
}

static void s_fill(uint8_t *buf, uint64_t i)
{
    for (size_t j = 0; j < s_size(i); j++)
        buf[j] = s_byte(i, j);
}

static bool s_check(const uint8_t *p, size_t n, uint64_t i)
{
    if (n != s_size(i))
        return false;
    for (size_t j = 0; j < n; j++)
        if (p[j] != s_byte(i, j))
            return false;
    return true;
}

typedef struct {
    kvt_storage_t *s;   //  shared manager
    int seed;           //  per-lane seed
    int bad;            //  reads with wrong bytes
    int gets_ok;        //  reads verified
    int release_errors; //  releases that failed (outside the deliberate holds)
    int late_writes;    //  reservations written after the ttl reclaimed them
    int late_refused;   //  ... whose commit answered ESTALE
    int held_leases;    //  leases held past the ttl
    int held_refused;   //  ... whose release answered ESTALE
    volatile int *done; //  set when every lane finished (reclaimer)
} lane_t;

static uint64_t s_clock_now(void)
{
    return __atomic_load_n(&s_now, __ATOMIC_RELAXED);
}

//  Waits (yielding) until the clock is a ttl past `since`, then reclaims.
//  False if the clock did not get there in time.
static bool s_wait_past_ttl(kvt_storage_t *s, uint64_t since)
{
    for (int n = 0; s_clock_now() < since + TTL_MS * S_MS; n++) {
        if (n >= WAITS)
            return false;
        sched_yield();
    }
    kvt_storage_reclaim(s);
    return true;
}

//  A lane's reads through leases happen between these: the reclaimer only
//  advances the clock when no lane is inside, so a lease that is read is
//  never reclaimed under the reader (that would be the holder's contract
//  breach, not the store's: bytes read through a reclaimed lease may change).
static void s_read_begin(void)
{
    __atomic_fetch_add(&s_readers, 1, __ATOMIC_SEQ_CST);
}

static void s_read_end(void)
{
    __atomic_fetch_sub(&s_readers, 1, __ATOMIC_SEQ_CST);
}

static void *s_lane(void *arg)
{
    lane_t *ln = arg;
    kvt_storage_t *s = ln->s;
    kvt_pool_t *pool = kvt_storage_pool(s);
    kvt_holder_t h = 0;
    cr_assert_eq(kvt_pool_holder_add(pool, "lane", &h), KVT_STORE_OK);
    uint8_t *buf = malloc(3 * UNIT);
    uint64_t x = (uint64_t)ln->seed * 0x9E3779B97F4A7C15ull + 1;
    for (int op = 0; op < OPS; op++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        uint64_t i = (x >> 8) % KEYS;
        int what = (int)((x >> 32) % 10);
        bool hold = (x >> 44) % 8 == 0; //  what 8 / 9: hold past the ttl
        kvt_lease_t l = {0};
        kvt_obj_view_t v;
        if (what <= 1) {
            s_fill(buf, i);
            kvt_storage_put(s, NS, s_key(i), KVT_OBJ_KV, buf, s_size(i));
        } else if (what == 2) {
            kvt_resv_t r = {0};
            void *p = NULL;
            if (kvt_storage_reserve(s, NS, s_key(i), KVT_OBJ_KV, s_size(i), h, &r, &p) ==
                KVT_STORE_OK) {
                s_fill(p, i);
                if ((x >> 50) & 1)
                    kvt_storage_commit(s, &r, NULL);
                else
                    kvt_storage_abort(s, &r);
            }
        } else if (what <= 4) {
            s_read_begin();
            if (kvt_storage_get(s, NS, s_key(i), KVT_OBJ_KV, h, &l, &v) == KVT_STORE_OK) {
                bool ok = s_check(v.ptr, v.size, i);
                if (kvt_storage_release(s, &l) != KVT_STORE_OK)
                    ln->release_errors++;
                else if (!ok)
                    ln->bad++;
                else
                    ln->gets_ok++;
            }
            s_read_end();
        } else if (what == 5) {
            kvt_hash_t keys[16];
            for (uint64_t k = 0; k < 16; k++)
                keys[k] = s_key((i + k) % KEYS);
            s_read_begin();
            int n = kvt_storage_lookup(s, NS, keys, 16, KVT_OBJ_KV, h, &l, NULL);
            cr_assert_geq(n, 0);
            if (l.id && kvt_storage_release(s, &l) != KVT_STORE_OK)
                ln->release_errors++;
            s_read_end();
        } else if (what == 6) {
            kvt_storage_touch(s, NS, s_key(i), KVT_OBJ_KV);
        } else if (what == 7) {
            kvt_pool_remove(pool, NS, s_key(i), KVT_OBJ_KV);
        } else if (what == 8 && hold) {
            //  A copy into a reservation stalls past the ttl, then lands.
            kvt_resv_t r = {0};
            void *p = NULL;
            if (kvt_storage_reserve(s, NS, s_key(i), KVT_OBJ_KV, s_size(i), h, &r, &p) ==
                KVT_STORE_OK) {
                //  Read after the reserve: its start is no later than this.
                if (s_wait_past_ttl(s, s_clock_now())) {
                    for (int y = 0; y < 4; y++) //  give other lanes time to allocate
                        sched_yield();
                    s_fill(p, i);
                    ln->late_writes++;
                    if (kvt_storage_commit(s, &r, NULL) == KVT_STORE_ESTALE)
                        ln->late_refused++;
                } else {
                    kvt_storage_abort(s, &r);
                }
            }
        } else if (what == 9 && hold) {
            //  A reader keeps its lease past the ttl (reading nothing after).
            s_read_begin();
            int rc = kvt_storage_get(s, NS, s_key(i), KVT_OBJ_KV, h, &l, &v);
            if (rc == KVT_STORE_OK && !s_check(v.ptr, v.size, i))
                ln->bad++;
            uint64_t t0 = s_clock_now(); //  after the get: the lease started no later
            s_read_end();
            if (rc == KVT_STORE_OK) {
                if (s_wait_past_ttl(s, t0)) {
                    ln->held_leases++;
                    if (kvt_storage_release(s, &l) == KVT_STORE_ESTALE)
                        ln->held_refused++;
                } else {
                    kvt_storage_release(s, &l);
                }
            }
        } else {
            kvt_storage_touch(s, NS, s_key(i), KVT_OBJ_KV);
        }
    }
    free(buf);
    return NULL;
}

static void *s_reclaimer(void *arg)
{
    lane_t *ln = arg;
    kvt_counter_t c[128];
    kvt_disk_t *disk = kvt_storage_disk(ln->s);
    while (!__atomic_load_n(ln->done, __ATOMIC_ACQUIRE)) {
        kvt_storage_reclaim(ln->s);
        kvt_storage_counters(ln->s, c, 128);
        //  Time passes only while no lane reads through a lease and no disk
        //  write reads a pool object: those handles live through one step
        //  at most, far below the ttl. Everything else races the reclaim.
        kvt_disk_stats_t ds = {0};
        if (disk)
            kvt_disk_stats(disk, &ds);
        if (__atomic_load_n(&s_readers, __ATOMIC_SEQ_CST) == 0 && ds.objects_writing == 0)
            __atomic_fetch_add(&s_now, STEP_MS * S_MS, __ATOMIC_RELAXED);
        sched_yield();
    }
    return NULL;
}

static void s_run(bool disk)
{
    __atomic_store_n(&s_now, 0, __ATOMIC_RELAXED);
    kvt_storage_config_t cfg;
    kvt_storage_config_defaults(&cfg);
    cfg.pool.capacity_bytes = 96 * UNIT;
    cfg.pool.ttl_ms = TTL_MS;
    cfg.pool.clock = s_clock;
    cfg.pool.log = s_quiet;
    cfg.disk_enabled = disk;
    cfg.disk.dir = s_dir;
    cfg.disk.capacity_bytes = 200 * UNIT;
    cfg.disk.queue_depth = 16;
    char err[256] = "";
    kvt_storage_t *s = kvt_storage_new(&cfg, err, sizeof(err));
    cr_assert_not_null(s, "%s", err);
    kvt_pool_t *pool = kvt_storage_pool(s);

    //  A lane that dies holding leases and a reservation, at time 0.
    uint8_t *buf = malloc(3 * UNIT);
    for (uint64_t i = 0; i < LEAKED; i++) {
        s_fill(buf, i);
        cr_assert_geq(kvt_storage_put(s, NS, s_key(i), KVT_OBJ_KV, buf, s_size(i)), 0);
    }
    kvt_storage_flush(s);
    kvt_holder_t dead = 0;
    cr_assert_eq(kvt_pool_holder_add(pool, "dead", &dead), KVT_STORE_OK);
    for (uint64_t i = 0; i < LEAKED; i++) {
        kvt_lease_t l = {0};
        kvt_obj_view_t v;
        cr_assert_eq(kvt_storage_get(s, NS, s_key(i), KVT_OBJ_KV, dead, &l, &v), KVT_STORE_OK);
    }
    kvt_resv_t r = {0};
    void *p;
    cr_assert_eq(kvt_storage_reserve(s, NS, s_key(KEYS + 1), KVT_OBJ_KV, UNIT, dead, &r, &p),
                 KVT_STORE_OK);
    cr_assert_eq(kvt_pool_holder_remove(pool, dead), KVT_STORE_OK);
    __atomic_store_n(&s_now, 10000 * S_MS, __ATOMIC_RELAXED); //  past their TTL, not the lanes'

    volatile int done = 0;
    lane_t lanes[WORKERS + 1];
    pthread_t th[WORKERS + 1];
    for (int t = 0; t <= WORKERS; t++) {
        lanes[t] = (lane_t){.s = s, .seed = t + 1, .done = &done};
        cr_assert_eq(pthread_create(&th[t], NULL, t < WORKERS ? s_lane : s_reclaimer, &lanes[t]),
                     0);
    }
    for (int t = 0; t < WORKERS; t++)
        pthread_join(th[t], NULL);
    __atomic_store_n(&done, 1, __ATOMIC_RELEASE);
    pthread_join(th[WORKERS], NULL);

    int gets = 0, late = 0, held = 0;
    for (int t = 0; t < WORKERS; t++) {
        cr_assert_eq(lanes[t].bad, 0, "a read under a lease returned wrong bytes");
        cr_assert_eq(lanes[t].release_errors, 0);
        cr_assert_eq(lanes[t].late_refused, lanes[t].late_writes,
                     "a reservation reclaimed at its ttl was committed");
        cr_assert_eq(lanes[t].held_refused, lanes[t].held_leases,
                     "a lease reclaimed at its ttl was released without ESTALE");
        gets += lanes[t].gets_ok;
        late += lanes[t].late_writes;
        held += lanes[t].held_leases;
    }
    cr_assert_gt(gets, 100, "the mix actually read");
    cr_assert_gt(late, 0, "reservations were reclaimed under their writers");
    cr_assert_gt(held, 0, "leases were reclaimed under their readers");
    kvt_storage_flush(s);
    kvt_storage_reclaim(s);
    kvt_storage_stats_t st;
    kvt_storage_stats(s, &st);
    cr_assert_eq(st.pool.reclaimed_orphaned, LEAKED + 1, "lanes are never reset");
    cr_assert_geq(st.pool.reclaimed_quarantined, (uint64_t)late);
    cr_assert_geq(st.pool.reclaimed_expired, st.pool.reclaimed_quarantined + (uint64_t)held);
    cr_assert_eq(st.pool.quarantined_bytes, 0, "every quarantine ended with its commit");
    cr_assert_eq(st.pool.objects_quarantined, 0);
    cr_assert_eq(st.pool.leases_active, 0);
    cr_assert_eq(st.pool.pinned_bytes, 0);
    cr_assert_eq(st.pool.writing_bytes, 0);
    cr_assert_gt(st.pool.evictions, 0);
    cr_assert_leq(st.pool.used_bytes, st.pool.capacity_bytes);
    if (disk) {
        cr_assert_gt(st.disk.puts, 0);
        cr_assert_leq(st.disk.used_bytes, st.disk.capacity_bytes);
        cr_assert_eq(st.disk.corrupt, 0);
        cr_assert_eq(st.disk.io_errors, 0);
    }
    for (uint64_t i = 0; i < KEYS; i++)
        kvt_pool_remove(pool, NS, s_key(i), KVT_OBJ_KV);
    kvt_storage_stats(s, &st);
    cr_assert_eq(st.pool.used_bytes, 0);
    cr_assert_eq(st.pool.free_extents, 1);
    free(buf);
    kvt_storage_destroy(&s);
}

Test(concurrency, lanes_share_the_pool_with_disk_write_through)
{
    s_run(true);
}

Test(concurrency, lanes_share_a_pool_without_disk)
{
    s_run(false);
}
