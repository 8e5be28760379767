/*  test_store_disk.c — the disk backend (kvt_disk): verified reads, the
    start-up rescan after a restart, corrupt / truncated / temporary files,
    which files the rescan keeps, deletes or leaves alone, its own capacity
    and LRU, pins, queued writes (duplicates, full queue, room kept, a stale
    source discarded). Every test uses its own pid-qualified directory. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvtier/kvt_disk.h"

#define NS  3u
#define HDR KVT_DISK_HEADER_BYTES

static char s_dir[256];

static void s_mkdir(void)
{
    snprintf(s_dir, sizeof(s_dir), "/tmp/kvt-test-disk-%d-XXXXXX", (int)getpid());
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

TestSuite(disk, .init = s_mkdir, .fini = s_rmdir);

static kvt_hash_t s_key(uint64_t i)
{
    return (kvt_hash_t){.hi = 0x1111000000000000ull + i, .lo = ~i};
}

static void s_fill(uint8_t *buf, size_t n, uint64_t i)
{
    uint64_t x = i * 0x9E3779B97F4A7C15ull + 1;
    for (size_t j = 0; j < n; j++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        buf[j] = (uint8_t)x;
    }
}

static int s_lines; //  log lines received (tests run in their own process)

static void s_log(void *arg, int level, const char *line)
{
    (void)arg;
    (void)level;
    (void)line;
    __atomic_fetch_add(&s_lines, 1, __ATOMIC_RELAXED);
}

static kvt_disk_t *s_disk(uint64_t capacity, uint32_t threads, uint32_t depth)
{
    kvt_disk_config_t cfg;
    kvt_disk_config_defaults(&cfg);
    cfg.log = s_log;
    cfg.dir = s_dir;
    cfg.capacity_bytes = capacity;
    cfg.io_threads = threads;
    cfg.queue_depth = depth;
    char err[256] = "";
    kvt_disk_t *d = kvt_disk_new(&cfg, err, sizeof(err));
    cr_assert_not_null(d, "kvt_disk_new: %s", err);
    return d;
}

//  A disk in `dir` written and read as `rank` of `world` with `layout`.
static kvt_disk_t *s_disk_as(const char *dir, uint32_t rank, uint32_t world, uint64_t layout)
{
    kvt_disk_config_t cfg;
    kvt_disk_config_defaults(&cfg);
    cfg.log = s_log;
    cfg.dir = dir;
    cfg.capacity_bytes = 1 << 20;
    cfg.io_threads = 1;
    cfg.rank = rank;
    cfg.world_size = world;
    cfg.layout_id = layout;
    char err[256] = "";
    kvt_disk_t *d = kvt_disk_new(&cfg, err, sizeof(err));
    cr_assert_not_null(d, "kvt_disk_new: %s", err);
    return d;
}

static void s_put(kvt_disk_t *d, uint64_t i, size_t size)
{
    uint8_t *buf = malloc(size);
    s_fill(buf, size, i);
    int rc = kvt_disk_put_copy(d, NS, s_key(i), KVT_OBJ_KV, buf, size);
    free(buf);
    cr_assert_eq(rc, KVT_STORE_OK, "put %llu: %s", (unsigned long long)i, kvt_store_strerror(rc));
}

//  Reads object i and checks its bytes.
static int s_read(kvt_disk_t *d, uint64_t i, size_t size)
{
    uint8_t *buf = malloc(size), *want = malloc(size);
    size_t got = 0;
    kvt_obj_kind_t kind;
    int rc = kvt_disk_read(d, NS, s_key(i), KVT_OBJ_KV, buf, size, &got, &kind);
    if (rc == KVT_STORE_OK) {
        s_fill(want, size, i);
        cr_assert_eq(got, size);
        cr_assert_eq(kind, KVT_OBJ_KV);
        cr_assert_eq(memcmp(buf, want, size), 0, "bytes of %llu", (unsigned long long)i);
    }
    free(buf);
    free(want);
    return rc;
}

//  The documented name of an object: namespace, key, kind, then the
//  writer's rank, world size and layout id.
static void s_name_of(char *out, size_t cap, uint64_t i, uint32_t rank, uint32_t world,
                      uint64_t layout)
{
    kvt_hash_t k = s_key(i);
    snprintf(out, cap, "%016llx-%016llx%016llx-%u-%08x-%08x-%016llx.kvt", (unsigned long long)NS,
             (unsigned long long)k.hi, (unsigned long long)k.lo, (unsigned)KVT_OBJ_KV,
             (unsigned)rank, (unsigned)world, (unsigned long long)layout);
}

//  Path of object i written with the default identity (rank 0 of 1, layout 0).
static void s_path(char *out, size_t cap, uint64_t i)
{
    char name[128];
    s_name_of(name, sizeof(name), i, 0, 1, 0);
    snprintf(out, cap, "%s/%s", s_dir, name);
}

static bool s_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

static void s_set_mtime(uint64_t i, time_t sec)
{
    char path[512];
    s_path(path, sizeof(path), i);
    struct timespec ts[2] = {{.tv_sec = sec}, {.tv_sec = sec}};
    cr_assert_eq(utimensat(AT_FDCWD, path, ts, 0), 0);
}

Test(disk, a_put_is_readable_after_its_write_with_the_same_bytes)
{
    kvt_disk_t *d = s_disk(1 << 20, 2, 8);
    cr_assert_eq(s_read(d, 1, 5000), KVT_STORE_ENOTFOUND);
    s_put(d, 1, 5000);
    kvt_disk_flush(d);
    cr_assert_eq(s_read(d, 1, 5000), KVT_STORE_OK);
    char path[512];
    s_path(path, sizeof(path), 1);
    struct stat sb;
    cr_assert_eq(stat(path, &sb), 0);
    cr_assert_eq(sb.st_size, HDR + 5000);
    kvt_disk_stats_t st;
    kvt_disk_stats(d, &st);
    cr_assert_eq(st.puts, 1);
    cr_assert_eq(st.objects, 1);
    cr_assert_eq(st.used_bytes, HDR + 5000);
    cr_assert_eq(st.hits[0], 1);
    cr_assert_eq(st.misses[0], 1);
    cr_assert_eq(kvt_disk_touch(d, NS, s_key(1), KVT_OBJ_KV), KVT_TOUCH_PRESENT);
    cr_assert_eq(kvt_disk_touch(d, NS, s_key(2), KVT_OBJ_KV), KVT_TOUCH_GONE);
    uint8_t small[10];
    size_t got;
    kvt_obj_kind_t kind;
    cr_assert_eq(kvt_disk_read(d, NS, s_key(1), KVT_OBJ_KV, small, 10, &got, &kind),
                 KVT_STORE_EINVAL, "a too small buffer is refused, not overrun");
    kvt_disk_destroy(&d);
    cr_assert_null(d);
}

Test(disk, a_restarted_process_rescans_and_keeps_the_same_objects)
{
    kvt_disk_t *d = s_disk(1 << 20, 2, 16);
    for (uint64_t i = 0; i < 10; i++)
        s_put(d, i, 1000 + 100 * i);
    kvt_disk_destroy(&d); //  flushes
    d = s_disk(1 << 20, 2, 16);
    kvt_disk_stats_t st;
    kvt_disk_stats(d, &st);
    cr_assert_eq(st.rescanned, 10);
    cr_assert_eq(st.objects, 10);
    uint64_t bytes = 0;
    for (uint64_t i = 0; i < 10; i++) {
        cr_assert_eq(s_read(d, i, 1000 + 100 * i), KVT_STORE_OK);
        bytes += HDR + 1000 + 100 * i;
    }
    kvt_disk_stats(d, &st);
    cr_assert_eq(st.used_bytes, bytes);
    kvt_disk_destroy(&d);
}

Test(disk, the_rescan_rebuilds_the_lru_from_modification_times)
{
    uint64_t cap = 3 * (HDR + 1000);
    kvt_disk_t *d = s_disk(cap, 1, 8);
    for (uint64_t i = 0; i < 3; i++)
        s_put(d, i, 1000);
    kvt_disk_destroy(&d);
    s_set_mtime(0, 1000000300); //  youngest
    s_set_mtime(1, 1000000100); //  oldest
    s_set_mtime(2, 1000000200);
    d = s_disk(cap, 1, 8);
    s_put(d, 3, 1000);
    kvt_disk_flush(d);
    cr_assert_eq(s_read(d, 1, 1000), KVT_STORE_ENOTFOUND, "the oldest file was evicted");
    cr_assert_eq(s_read(d, 0, 1000), KVT_STORE_OK);
    cr_assert_eq(s_read(d, 2, 1000), KVT_STORE_OK);
    char path[512];
    s_path(path, sizeof(path), 1);
    cr_assert_not(s_exists(path));
    kvt_disk_destroy(&d);
    //  A smaller capacity at restart keeps the newest files that fit.
    kvt_disk_config_t cfg;
    kvt_disk_config_defaults(&cfg);
    cfg.dir = s_dir;
    cfg.capacity_bytes = 2 * (HDR + 1000);
    d = kvt_disk_new(&cfg, NULL, 0);
    cr_assert_not_null(d);
    kvt_disk_stats_t st;
    kvt_disk_stats(d, &st);
    cr_assert_eq(st.rescanned, 2);
    cr_assert_eq(st.evictions, 1);
    kvt_disk_destroy(&d);
}

Test(disk, a_corrupted_file_is_a_counted_miss_and_is_deleted)
{
    kvt_disk_t *d = s_disk(1 << 20, 2, 8);
    s_put(d, 1, 4096);
    kvt_disk_flush(d);
    char path[512];
    s_path(path, sizeof(path), 1);
    int fd = open(path, O_WRONLY);
    cr_assert_geq(fd, 0);
    uint8_t x = 0xFF;
    cr_assert_eq(pwrite(fd, &x, 1, HDR + 2000), 1); //  one payload byte
    close(fd);
    cr_assert_eq(s_read(d, 1, 4096), KVT_STORE_ECORRUPT);
    cr_assert_not(s_exists(path), "deleted");
    cr_assert_eq(s_read(d, 1, 4096), KVT_STORE_ENOTFOUND, "and forgotten");
    kvt_disk_stats_t st;
    kvt_disk_stats(d, &st);
    cr_assert_eq(st.corrupt, 1);
    cr_assert_eq(st.misses[0], 2);
    cr_assert_eq(st.hits[0], 0);
    cr_assert_eq(st.objects, 0);
    cr_assert_eq(st.used_bytes, 0);
    kvt_disk_destroy(&d);
}

Test(disk, a_truncated_file_is_a_counted_miss_and_is_deleted)
{
    kvt_disk_t *d = s_disk(1 << 20, 2, 8);
    s_put(d, 1, 4096);
    kvt_disk_flush(d);
    char path[512];
    s_path(path, sizeof(path), 1);
    cr_assert_eq(truncate(path, HDR + 100), 0);
    cr_assert_eq(s_read(d, 1, 4096), KVT_STORE_ECORRUPT);
    cr_assert_not(s_exists(path));
    kvt_disk_stats_t st;
    kvt_disk_stats(d, &st);
    cr_assert_eq(st.corrupt, 1);
    kvt_disk_destroy(&d);
}

Test(disk, a_file_with_trailing_bytes_is_a_counted_miss_and_is_deleted)
{
    kvt_disk_t *d = s_disk(1 << 20, 2, 8);
    s_put(d, 1, 4096);
    kvt_disk_flush(d);
    char path[512];
    s_path(path, sizeof(path), 1);
    FILE *f = fopen(path, "a");
    cr_assert_not_null(f);
    fputs("appended", f);
    fclose(f);
    cr_assert_eq(s_read(d, 1, 4096), KVT_STORE_ECORRUPT);
    cr_assert_not(s_exists(path));
    kvt_disk_stats_t st;
    kvt_disk_stats(d, &st);
    cr_assert_eq(st.corrupt, 1);
    kvt_disk_destroy(&d);
}

Test(disk, the_rescan_deletes_temporary_and_corrupt_files_and_leaves_others)
{
    kvt_disk_t *d = s_disk(1 << 20, 1, 8);
    s_put(d, 1, 2000);
    s_put(d, 2, 2000);
    kvt_disk_destroy(&d);
    char p1[512], p2[512], tmp[600], junk[600], other[600], misnamed[600];
    s_path(p1, sizeof(p1), 1);
    s_path(p2, sizeof(p2), 2);
    char name3[128];
    s_name_of(name3, sizeof(name3), 3, 0, 1, 0);
    snprintf(tmp, sizeof(tmp), "%s/.tmp-%s.7", s_dir, name3); //  a temporary of ours
    snprintf(junk, sizeof(junk),
             "%s/0000000000000003-00000000000000000000000000000009-1-00000000-00000001-"
             "0000000000000000.kvt",
             s_dir);
    snprintf(other, sizeof(other), "%s/notes.txt", s_dir);
    s_path(misnamed, sizeof(misnamed), 5);
    FILE *f = fopen(tmp, "w");
    fputs("partial", f);
    fclose(f);
    f = fopen(junk, "w");
    fputs("not a header at all", f);
    fclose(f);
    f = fopen(other, "w");
    fputs("keep me", f);
    fclose(f);
    //  A valid file under another object's name: the header does not match.
    char cmd[1400];
    snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", p1, misnamed);
    cr_assert_eq(system(cmd), 0);
    cr_assert_eq(truncate(p2, HDR + 10), 0); //  truncated: found by the length check
    d = s_disk(1 << 20, 1, 8);
    kvt_disk_stats_t st;
    kvt_disk_stats(d, &st);
    cr_assert_eq(st.tmp_removed, 1);
    cr_assert_eq(st.corrupt, 3);
    cr_assert_eq(st.rescanned, 1);
    cr_assert_not(s_exists(tmp));
    cr_assert_not(s_exists(junk));
    cr_assert_not(s_exists(misnamed));
    cr_assert_not(s_exists(p2));
    cr_assert(s_exists(other), "files that are not ours are left alone");
    cr_assert_eq(s_read(d, 1, 2000), KVT_STORE_OK);
    cr_assert_eq(s_read(d, 2, 2000), KVT_STORE_ENOTFOUND);
    kvt_disk_destroy(&d);
}

Test(disk, capacity_is_kept_by_evicting_the_oldest_files)
{
    uint64_t cap = 3 * (HDR + 1000);
    kvt_disk_t *d = s_disk(cap, 1, 8);
    for (uint64_t i = 0; i < 3; i++) {
        s_put(d, i, 1000);
        kvt_disk_flush(d);
    }
    cr_assert_eq(kvt_disk_touch(d, NS, s_key(0), KVT_OBJ_KV), KVT_TOUCH_PRESENT);
    s_put(d, 3, 1000);
    kvt_disk_flush(d);
    cr_assert_eq(s_read(d, 1, 1000), KVT_STORE_ENOTFOUND);
    cr_assert_eq(s_read(d, 0, 1000), KVT_STORE_OK);
    uint8_t big[4 * 1000];
    cr_assert_eq(kvt_disk_put_copy(d, NS, s_key(9), KVT_OBJ_KV, big, sizeof(big)),
                 KVT_STORE_ETOOBIG);
    kvt_disk_stats_t st;
    kvt_disk_stats(d, &st);
    cr_assert_eq(st.evictions, 1);
    cr_assert_leq(st.used_bytes, cap);
    cr_assert_eq(st.puts_dropped, 1);
    kvt_hash_t keys[4] = {s_key(0), s_key(2), s_key(3), s_key(1)};
    cr_assert_eq(kvt_disk_lookup(d, NS, keys, 4, KVT_OBJ_KV), 3);
    cr_assert_eq(kvt_disk_count(d, NS, keys + 3, 1, KVT_OBJ_KV), 0);
    cr_assert_eq(kvt_disk_remove(d, NS, s_key(0), KVT_OBJ_KV), KVT_STORE_OK);
    cr_assert_eq(kvt_disk_remove(d, NS, s_key(0), KVT_OBJ_KV), KVT_STORE_ENOTFOUND);
    kvt_disk_destroy(&d);
}

Test(disk, a_read_refreshes_the_file_in_the_disk_lru)
{
    uint64_t cap = 3 * (HDR + 1000);
    kvt_disk_t *d = s_disk(cap, 1, 8);
    for (uint64_t i = 0; i < 3; i++) {
        s_put(d, i, 1000);
        kvt_disk_flush(d);
    }
    cr_assert_eq(s_read(d, 0, 1000), KVT_STORE_OK); //  0 was the oldest
    s_put(d, 3, 1000);
    kvt_disk_flush(d);
    cr_assert_eq(kvt_disk_touch(d, NS, s_key(1), KVT_OBJ_KV), KVT_TOUCH_GONE, "1 went instead");
    cr_assert_eq(kvt_disk_touch(d, NS, s_key(0), KVT_OBJ_KV), KVT_TOUCH_PRESENT);
    kvt_disk_destroy(&d);
}

Test(disk, a_file_holding_another_objects_valid_bytes_is_never_handed_out)
{
    kvt_disk_t *d = s_disk(1 << 20, 1, 8);
    s_put(d, 1, 3000);
    s_put(d, 2, 3000);
    kvt_disk_flush(d);
    //  A whole, valid file of object 2 under object 1's name: its header and
    //  payload checksums are right, its length too; only the header's name
    //  differs from what the index expects.
    char p1[512], p2[512], cmd[1100];
    s_path(p1, sizeof(p1), 1);
    s_path(p2, sizeof(p2), 2);
    snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", p2, p1);
    cr_assert_eq(system(cmd), 0);
    uint8_t buf[3000];
    size_t got = 0;
    kvt_obj_kind_t kind;
    cr_assert_eq(kvt_disk_read(d, NS, s_key(1), KVT_OBJ_KV, buf, sizeof(buf), &got, &kind),
                 KVT_STORE_ECORRUPT);
    cr_assert_not(s_exists(p1));
    cr_assert_eq(s_read(d, 2, 3000), KVT_STORE_OK);
    kvt_disk_stats_t st;
    kvt_disk_stats(d, &st);
    cr_assert_eq(st.corrupt, 1);
    kvt_disk_destroy(&d);
}

Test(disk, a_restart_with_less_room_skips_a_newest_file_that_does_not_fit)
{
    kvt_disk_t *d = s_disk(1 << 20, 1, 8);
    for (uint64_t i = 0; i < 5; i++)
        s_put(d, i, 4096);
    s_put(d, 99, 64 << 10);
    kvt_disk_destroy(&d);
    for (uint64_t i = 0; i < 5; i++)
        s_set_mtime(i, 1000000100 + (time_t)i);
    s_set_mtime(99, 1000000200); //  the newest, and too big for the new budget
    d = s_disk(32 << 10, 1, 8);  //  the five small files fit (5 x 4160 bytes)
    kvt_disk_stats_t st;
    kvt_disk_stats(d, &st);
    cr_assert_eq(st.rescanned, 5);
    cr_assert_eq(st.evictions, 1);
    for (uint64_t i = 0; i < 5; i++)
        cr_assert_eq(s_read(d, i, 4096), KVT_STORE_OK);
    char big[512];
    s_path(big, sizeof(big), 99);
    cr_assert_not(s_exists(big));
    kvt_disk_destroy(&d);
}

Test(disk, the_rescan_leaves_files_that_are_not_object_names_alone_and_counts_them)
{
    kvt_disk_t *d = s_disk(1 << 20, 1, 8);
    s_put(d, 1, 2000);
    kvt_disk_destroy(&d);
    const char *names[] = {"model.kvt", "0000000000000003-nothex-1.kvt", "README", ".hidden"};
    char path[600];
    for (size_t i = 0; i < 4; i++) {
        snprintf(path, sizeof(path), "%s/%s", s_dir, names[i]);
        FILE *f = fopen(path, "w");
        cr_assert_not_null(f);
        fputs("someone else's", f);
        fclose(f);
    }
    d = s_disk(1 << 20, 1, 8);
    kvt_disk_stats_t st;
    kvt_disk_stats(d, &st);
    cr_assert_eq(st.foreign_files, 4);
    cr_assert_eq(st.corrupt, 0);
    cr_assert_eq(st.rescanned, 1);
    for (size_t i = 0; i < 4; i++) {
        snprintf(path, sizeof(path), "%s/%s", s_dir, names[i]);
        cr_assert(s_exists(path), "%s was deleted", names[i]);
    }
    kvt_disk_destroy(&d);
}

Test(disk, a_size_near_size_max_is_too_big_not_wrapped)
{
    kvt_disk_t *d = s_disk(1 << 20, 1, 8);
    static uint8_t buf[16];
    cr_assert_eq(kvt_disk_put(d, NS, s_key(1), KVT_OBJ_KV, buf, SIZE_MAX - 20, NULL, NULL),
                 KVT_STORE_ETOOBIG);
    kvt_disk_flush(d);
    kvt_disk_stats_t st;
    kvt_disk_stats(d, &st);
    cr_assert_eq(st.puts_dropped, 1);
    cr_assert_eq(st.used_bytes, 0);
    cr_assert_eq(st.objects_writing + st.puts + st.io_errors, 0);
    kvt_disk_destroy(&d);
}

Test(disk, a_pinned_file_is_never_evicted_until_unpinned)
{
    uint64_t cap = 3 * (HDR + 1000);
    kvt_disk_t *d = s_disk(cap, 1, 8);
    for (uint64_t i = 0; i < 3; i++) {
        s_put(d, i, 1000);
        kvt_disk_flush(d);
    }
    size_t size = 0;
    kvt_obj_kind_t kind;
    uint64_t pin = 0;
    cr_assert_eq(kvt_disk_pin(d, NS, s_key(0), KVT_OBJ_KV, &size, &kind, &pin), KVT_STORE_OK);
    cr_assert_eq(size, 1000);
    cr_assert_neq(pin, 0);
    cr_assert_eq(kvt_disk_remove(d, NS, s_key(0), KVT_OBJ_KV), KVT_STORE_EBUSY);
    s_put(d, 3, 1000); //  0 is the oldest but pinned: 1 goes
    kvt_disk_flush(d);
    cr_assert_eq(s_read(d, 0, 1000), KVT_STORE_OK);
    cr_assert_eq(kvt_disk_touch(d, NS, s_key(1), KVT_OBJ_KV), KVT_TOUCH_GONE);
    //  Pinned and queued bytes are not evictable: a put that needs them fails
    //  without deleting anything.
    uint8_t big[2 * 1000 + HDR + 1];
    cr_assert_eq(kvt_disk_put_copy(d, NS, s_key(9), KVT_OBJ_KV, big, sizeof(big)),
                 KVT_STORE_ENOSPACE);
    kvt_disk_unpin(d, pin);
    kvt_disk_unpin(d, pin); //  a second unpin of the same pin changes nothing
    cr_assert_eq(kvt_disk_remove(d, NS, s_key(0), KVT_OBJ_KV), KVT_STORE_OK);
    kvt_disk_stats_t st;
    kvt_disk_stats(d, &st);
    cr_assert_eq(st.evictions, 1);
    kvt_disk_destroy(&d);
}

// ------------------------------------------ queued writes (a gated writer) --

typedef struct {
    pthread_mutex_t mu; //  guards the fields below
    pthread_cond_t cv;  //  signalled on change
    bool open;          //  writers may finish
    int entered;        //  done callbacks entered
    int verdict;        //  what done returns
} gate_t;

static int s_gated_done(void *arg, int rc)
{
    (void)rc;
    gate_t *g = arg;
    pthread_mutex_lock(&g->mu);
    g->entered++;
    pthread_cond_broadcast(&g->cv);
    while (!g->open)
        pthread_cond_wait(&g->cv, &g->mu);
    int v = g->verdict;
    pthread_mutex_unlock(&g->mu);
    return v;
}

static void s_gate_wait_entered(gate_t *g, int n)
{
    pthread_mutex_lock(&g->mu);
    while (g->entered < n)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

static void s_gate_open(gate_t *g)
{
    pthread_mutex_lock(&g->mu);
    g->open = true;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

Test(disk, a_put_of_an_object_being_written_is_a_duplicate_and_a_full_queue_refuses)
{
    kvt_disk_t *d = s_disk(1 << 20, 1, 1);
    gate_t g = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    static uint8_t buf[3000];
    cr_assert_eq(kvt_disk_put(d, NS, s_key(1), KVT_OBJ_KV, buf, sizeof(buf), s_gated_done, &g),
                 KVT_STORE_OK);
    s_gate_wait_entered(&g, 1);
    cr_assert_eq(kvt_disk_touch(d, NS, s_key(1), KVT_OBJ_KV), KVT_TOUCH_GONE,
                 "not readable before its rename");
    cr_assert_eq(kvt_disk_put_copy(d, NS, s_key(1), KVT_OBJ_KV, buf, sizeof(buf)),
                 KVT_STORE_DUPLICATE);
    cr_assert_eq(kvt_disk_put_copy(d, NS, s_key(2), KVT_OBJ_KV, buf, sizeof(buf)), KVT_STORE_EBUSY);
    cr_assert_eq(kvt_disk_remove(d, NS, s_key(1), KVT_OBJ_KV), KVT_STORE_EBUSY);
    s_gate_open(&g);
    kvt_disk_flush(d);
    cr_assert_eq(kvt_disk_touch(d, NS, s_key(1), KVT_OBJ_KV), KVT_TOUCH_PRESENT);
    cr_assert_eq(kvt_disk_put_copy(d, NS, s_key(1), KVT_OBJ_KV, buf, sizeof(buf)),
                 KVT_STORE_SKIPPED);
    kvt_disk_stats_t st;
    kvt_disk_stats(d, &st);
    cr_assert_eq(st.puts_duplicate, 1);
    cr_assert_eq(st.puts_dropped, 1);
    cr_assert_eq(st.puts_skipped, 1);
    cr_assert_eq(st.puts, 1);
    kvt_disk_destroy(&d);
}

Test(disk, a_write_whose_source_went_stale_is_discarded)
{
    kvt_disk_t *d = s_disk(1 << 20, 1, 4);
    gate_t g = {.mu = PTHREAD_MUTEX_INITIALIZER,
                .cv = PTHREAD_COND_INITIALIZER,
                .open = true,
                .verdict = 1};
    static uint8_t buf[3000];
    cr_assert_eq(kvt_disk_put(d, NS, s_key(1), KVT_OBJ_KV, buf, sizeof(buf), s_gated_done, &g),
                 KVT_STORE_OK);
    kvt_disk_flush(d);
    cr_assert_eq(g.entered, 1, "done is called exactly once");
    cr_assert_eq(kvt_disk_touch(d, NS, s_key(1), KVT_OBJ_KV), KVT_TOUCH_GONE);
    char path[512];
    s_path(path, sizeof(path), 1);
    cr_assert_not(s_exists(path));
    kvt_disk_stats_t st;
    kvt_disk_stats(d, &st);
    cr_assert_eq(st.puts_discarded, 1);
    cr_assert_eq(st.used_bytes, 0);
    kvt_disk_destroy(&d);
    //  Nothing was left behind for the next start either.
    d = s_disk(1 << 20, 1, 4);
    kvt_disk_stats(d, &st);
    cr_assert_eq(st.rescanned + st.tmp_removed + st.corrupt, 0);
    kvt_disk_destroy(&d);
}

Test(disk, a_bad_setting_is_refused_with_its_name)
{
    kvt_disk_config_t cfg;
    char err[256];
    kvt_disk_config_defaults(&cfg);
    cfg.capacity_bytes = 1 << 20;
    cr_assert_null(kvt_disk_new(&cfg, err, sizeof(err)));
    cr_assert(strstr(err, "disk.dir"), "%s", err);
    cfg.dir = s_dir;
    cfg.capacity_bytes = 0;
    cr_assert_null(kvt_disk_new(&cfg, err, sizeof(err)));
    cr_assert(strstr(err, "disk.capacity_bytes=0"), "%s", err);
    cfg.capacity_bytes = 1 << 20;
    cfg.io_threads = 1000;
    cr_assert_null(kvt_disk_new(&cfg, err, sizeof(err)));
    cr_assert(strstr(err, "disk.io_threads=1000"), "%s", err);
    cfg.io_threads = 1;
    cfg.dir = "/proc/kvtier-cannot-create";
    cr_assert_null(kvt_disk_new(&cfg, err, sizeof(err)));
    cr_assert(strstr(err, "disk.dir=/proc/kvtier-cannot-create"), "%s", err);
}

Test(disk, a_put_that_cannot_fit_beside_queued_writes_deletes_nothing)
{
    kvt_disk_t *d = s_disk(10 * (4096 + HDR), 1, 4);
    for (uint64_t i = 0; i < 4; i++) {
        s_put(d, i, 4096);
        kvt_disk_flush(d);
    }
    gate_t g = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    static uint8_t buf[6 * 4096];
    cr_assert_eq(kvt_disk_put(d, NS, s_key(50), KVT_OBJ_KV, buf, 5 * 4096, s_gated_done, &g),
                 KVT_STORE_OK);
    s_gate_wait_entered(&g, 1); //  in flight: its room is taken, it cannot be evicted
    cr_assert_eq(kvt_disk_put_copy(d, NS, s_key(60), KVT_OBJ_KV, buf, 6 * 4096),
                 KVT_STORE_ENOSPACE);
    kvt_disk_stats_t st;
    kvt_disk_stats(d, &st);
    cr_assert_eq(st.evictions, 0, "nothing deleted for a put that could not fit");
    cr_assert_eq(st.objects, 4);
    cr_assert_eq(st.puts_dropped, 1);
    //  One that fits beside the queued write evicts only what it needs.
    cr_assert_eq(kvt_disk_put_copy(d, NS, s_key(61), KVT_OBJ_KV, buf, 2 * 4096), KVT_STORE_OK);
    kvt_disk_stats(d, &st);
    cr_assert_eq(st.evictions, 1);
    s_gate_open(&g);
    kvt_disk_flush(d);
    kvt_disk_stats(d, &st);
    cr_assert_leq(st.used_bytes, st.capacity_bytes);
    cr_assert_eq(st.objects, 5);
    kvt_disk_destroy(&d);
}

// ------------------------------------------------ identity of the bytes --

//  Whole contents of a file (malloc'd), *len set; NULL if it cannot be read.
static uint8_t *s_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    uint8_t *buf = malloc(1 << 16);
    *len = fread(buf, 1, 1 << 16, f);
    fclose(f);
    return buf;
}

#define LAYOUT 0xABCDEF0123456789ull

Test(disk, a_file_of_another_rank_is_a_counted_miss_and_is_left_alone)
{
    kvt_disk_t *d = s_disk_as(s_dir, 0, 2, LAYOUT);
    for (uint64_t i = 0; i < 4; i++)
        s_put(d, i, 3000);
    kvt_disk_destroy(&d);
    char name[128], path[600];
    s_name_of(name, sizeof(name), 2, 0, 2, LAYOUT);
    snprintf(path, sizeof(path), "%s/%s", s_dir, name);
    size_t len0 = 0;
    uint8_t *before = s_slurp(path, &len0);
    cr_assert_not_null(before, "the name carries rank, world size and layout: %s", name);

    //  The same directory opened as rank 1 of the same world and layout.
    d = s_disk_as(s_dir, 1, 2, LAYOUT);
    kvt_disk_stats_t st;
    kvt_disk_stats(d, &st);
    cr_assert_eq(st.identity_mismatch, 4);
    cr_assert_eq(st.rescanned, 0);
    cr_assert_eq(st.corrupt, 0);
    cr_assert_eq(st.objects, 0);
    cr_assert_eq(s_read(d, 2, 3000), KVT_STORE_ENOTFOUND);
    kvt_disk_stats(d, &st);
    cr_assert_eq(st.misses[0], 1);
    //  Its own put of the same key goes through, beside the other rank's file.
    s_put(d, 2, 3000);
    kvt_disk_flush(d);
    cr_assert_eq(s_read(d, 2, 3000), KVT_STORE_OK);
    kvt_disk_destroy(&d);
    size_t len1 = 0;
    uint8_t *after = s_slurp(path, &len1);
    cr_assert_not_null(after, "rank 0's file was deleted");
    cr_assert_eq(len1, len0);
    cr_assert_eq(memcmp(before, after, len0), 0, "rank 0's file was changed");
    free(before);
    free(after);

    //  Another world size or layout is another identity too.
    d = s_disk_as(s_dir, 0, 4, LAYOUT);
    kvt_disk_stats(d, &st);
    cr_assert_eq(st.identity_mismatch, 5);
    cr_assert_eq(st.rescanned, 0);
    kvt_disk_destroy(&d);
    //  (Another layout is refused at open by the directory's manifest:
    //  disk.a_directory_written_with_another_layout_is_refused_naming_both.)
    //  And rank 0 still finds all of its own.
    d = s_disk_as(s_dir, 0, 2, LAYOUT);
    kvt_disk_stats(d, &st);
    cr_assert_eq(st.rescanned, 4);
    cr_assert_eq(st.identity_mismatch, 1);
    for (uint64_t i = 0; i < 4; i++)
        cr_assert_eq(s_read(d, i, 3000), KVT_STORE_OK);
    kvt_disk_destroy(&d);
}

Test(disk, a_file_under_our_name_written_by_another_rank_is_never_served_nor_deleted)
{
    char other[300];
    snprintf(other, sizeof(other), "%s-other", s_dir);
    cr_assert_eq(mkdir(other, 0700), 0);
    kvt_disk_t *mine = s_disk_as(s_dir, 0, 2, LAYOUT);
    kvt_disk_t *theirs = s_disk_as(other, 1, 2, LAYOUT);
    s_put(mine, 1, 3000);
    uint8_t buf[3000];
    s_fill(buf, sizeof(buf), 77); //  other bytes, a valid file of their own
    cr_assert_eq(kvt_disk_put_copy(theirs, NS, s_key(1), KVT_OBJ_KV, buf, sizeof(buf)),
                 KVT_STORE_OK);
    kvt_disk_destroy(&theirs);
    kvt_disk_flush(mine);
    //  Their whole, valid file under my name: header and payload checksums,
    //  length, namespace, key and kind all check out; only the identity in
    //  the header is not mine.
    char mname[128], tname[128], mpath[600], tpath[600], cmd[1600];
    s_name_of(mname, sizeof(mname), 1, 0, 2, LAYOUT);
    s_name_of(tname, sizeof(tname), 1, 1, 2, LAYOUT);
    snprintf(mpath, sizeof(mpath), "%s/%s", s_dir, mname);
    snprintf(tpath, sizeof(tpath), "%s/%s", other, tname);
    snprintf(cmd, sizeof(cmd), "cp '%s' '%s' && rm -rf '%s'", tpath, mpath, other);
    cr_assert_eq(system(cmd), 0);
    size_t len = 0;
    uint8_t *planted = s_slurp(mpath, &len);
    cr_assert_not_null(planted);

    cr_assert_eq(s_read(mine, 1, 3000), KVT_STORE_ENOTFOUND, "another rank's bytes were served");
    kvt_disk_stats_t st;
    kvt_disk_stats(mine, &st);
    cr_assert_eq(st.identity_mismatch, 1);
    cr_assert_eq(st.corrupt, 0, "not ours: neither corrupt nor deleted");
    cr_assert_eq(st.misses[0], 1);
    cr_assert_eq(st.objects, 0);
    cr_assert_eq(st.used_bytes, 0);
    cr_assert(s_exists(mpath));
    //  Its name stays taken: a put of that object is refused, nothing written over it.
    cr_assert_eq(kvt_disk_put_copy(mine, NS, s_key(1), KVT_OBJ_KV, buf, sizeof(buf)),
                 KVT_STORE_EIO);
    kvt_disk_flush(mine);
    kvt_disk_stats(mine, &st);
    cr_assert_eq(st.puts_blocked, 1);
    cr_assert_eq(kvt_disk_remove(mine, NS, s_key(1), KVT_OBJ_KV), KVT_STORE_ENOTFOUND);
    kvt_disk_destroy(&mine);

    //  A restart finds it by its header: counted, left alone, still blocked.
    mine = s_disk_as(s_dir, 0, 2, LAYOUT);
    kvt_disk_stats(mine, &st);
    cr_assert_eq(st.identity_mismatch, 1);
    cr_assert_eq(st.corrupt, 0);
    cr_assert_eq(st.rescanned, 0);
    cr_assert_eq(s_read(mine, 1, 3000), KVT_STORE_ENOTFOUND);
    cr_assert_eq(kvt_disk_put_copy(mine, NS, s_key(1), KVT_OBJ_KV, buf, sizeof(buf)),
                 KVT_STORE_EIO);
    kvt_disk_destroy(&mine);
    size_t len2 = 0;
    uint8_t *still = s_slurp(mpath, &len2);
    cr_assert_not_null(still);
    cr_assert_eq(len2, len);
    cr_assert_eq(memcmp(planted, still, len), 0);
    free(planted);
    free(still);
}

Test(disk, an_identity_outside_the_world_is_refused_with_its_name)
{
    kvt_disk_config_t cfg;
    kvt_disk_config_defaults(&cfg);
    cfg.dir = s_dir;
    cfg.capacity_bytes = 1 << 20;
    cfg.rank = 2;
    cfg.world_size = 2;
    char err[256] = "";
    cr_assert_null(kvt_disk_new(&cfg, err, sizeof(err)));
    cr_assert(strstr(err, "disk.rank=2"), "%s", err);
}

// ----------------------------------------------------------- INLINE mode --

typedef struct {
    pthread_t caller; //  the thread that called put
    int calls;        //  done callbacks
    bool on_caller;   //  the last one ran on the caller's thread
} inline_probe_t;

static int s_inline_done(void *arg, int rc)
{
    inline_probe_t *p = arg;
    p->calls++;
    p->on_caller = pthread_equal(p->caller, pthread_self()) != 0;
    return rc == KVT_STORE_OK ? 0 : 1;
}

Test(disk, an_inline_put_is_written_on_the_calling_thread_before_it_returns)
{
    kvt_disk_config_t cfg;
    kvt_disk_config_defaults(&cfg);
    cfg.log = s_log;
    cfg.dir = s_dir;
    cfg.capacity_bytes = 3 * (HDR + 1000);
    cfg.io_mode = KVT_DISK_IO_INLINE;
    cfg.queue_depth = 1;
    kvt_disk_t *d = kvt_disk_new(&cfg, NULL, 0);
    cr_assert_not_null(d);
    static uint8_t buf[1000];
    for (uint64_t i = 0; i < 6; i++) {
        inline_probe_t p = {.caller = pthread_self()};
        s_fill(buf, sizeof(buf), i);
        cr_assert_eq(kvt_disk_put(d, NS, s_key(i), KVT_OBJ_KV, buf, sizeof(buf), s_inline_done, &p),
                     KVT_STORE_OK, "put %llu", (unsigned long long)i);
        cr_assert_eq(p.calls, 1, "done before the put returned");
        cr_assert(p.on_caller, "done on the calling thread");
        cr_assert_eq(s_read(d, i, 1000), KVT_STORE_OK, "readable at once");
    }
    kvt_disk_stats_t st;
    kvt_disk_stats(d, &st);
    cr_assert_eq(st.puts, 6);
    cr_assert_eq(st.evictions, 3);
    cr_assert_eq(st.objects_writing, 0);
    cr_assert_eq(st.puts_dropped, 0, "a queue of one never found busy");
    kvt_disk_destroy(&d);
}

// ---------------------------------------------------------- manifest --

//  kvt_disk_new of dir as rank 0 of 1 with layout and ns_id; NULL with err.
static kvt_disk_t *s_try_open(const char *dir, uint64_t layout, uint64_t ns_id, char *err,
                              size_t errlen)
{
    kvt_disk_config_t cfg;
    kvt_disk_config_defaults(&cfg);
    cfg.log = s_log;
    cfg.dir = dir;
    cfg.capacity_bytes = 1 << 20;
    cfg.io_threads = 1;
    cfg.layout_id = layout;
    cfg.ns_id = ns_id;
    return kvt_disk_new(&cfg, err, errlen);
}

Test(disk, a_fresh_directory_records_its_layout_and_namespace_and_a_matching_one_opens)
{
    char err[512] = "", path[600];
    kvt_disk_t *d = s_try_open(s_dir, LAYOUT, 0x1234, err, sizeof err);
    cr_assert_not_null(d, "%s", err);
    for (uint64_t i = 0; i < 3; i++)
        s_put(d, i, 3000);
    kvt_disk_destroy(&d);
    snprintf(path, sizeof path, "%s/.kvt-manifest", s_dir);
    size_t len = 0;
    char *text = (char *)s_slurp(path, &len);
    cr_assert_not_null(text, "no manifest written");
    text = realloc(text, len + 1);
    text[len] = 0;
    cr_assert(strstr(text, "layout_id=abcdef0123456789\n"), "%s", text);
    cr_assert(strstr(text, "namespace=0000000000001234\n"), "%s", text);
    free(text);
    uint64_t refused = kvt_disk_manifest_refusals();
    d = s_try_open(s_dir, LAYOUT, 0x1234, err, sizeof err);
    cr_assert_not_null(d, "the same layout and namespace: %s", err);
    kvt_disk_stats_t st;
    kvt_disk_stats(d, &st);
    cr_assert_eq(st.rescanned, 3, "its own objects are found again");
    cr_assert_eq(st.foreign_files, 0, "the manifest is not a foreign entry");
    for (uint64_t i = 0; i < 3; i++)
        cr_assert_eq(s_read(d, i, 3000), KVT_STORE_OK);
    kvt_disk_destroy(&d);
    cr_assert_eq(kvt_disk_manifest_refusals(), refused);
}

Test(disk, a_directory_written_with_another_layout_is_refused_naming_both)
{
    char err[512] = "";
    kvt_disk_t *d = s_try_open(s_dir, LAYOUT, 7, err, sizeof err);
    cr_assert_not_null(d, "%s", err);
    s_put(d, 1, 3000);
    kvt_disk_destroy(&d);
    uint64_t refused = kvt_disk_manifest_refusals();
    cr_assert_null(s_try_open(s_dir, LAYOUT + 1, 7, err, sizeof err),
                   "a directory of another layout was opened");
    cr_assert(strstr(err, s_dir), "%s", err);
    cr_assert(strstr(err, "abcdef0123456789"), "the recorded id is not named: %s", err);
    cr_assert(strstr(err, "abcdef012345678a"), "this tier's id is not named: %s", err);
    cr_assert(strstr(err, "layout_id"), "%s", err);
    cr_assert_eq(kvt_disk_manifest_refusals(), refused + 1, "the refusal is not counted");
    //  Nothing was touched: the rightful owner still finds its object.
    d = s_try_open(s_dir, LAYOUT, 7, err, sizeof err);
    cr_assert_not_null(d, "%s", err);
    cr_assert_eq(s_read(d, 1, 3000), KVT_STORE_OK);
    kvt_disk_destroy(&d);
}

Test(disk, a_directory_written_for_another_namespace_is_refused_naming_both)
{
    char err[512] = "";
    kvt_disk_t *d = s_try_open(s_dir, LAYOUT, 0xaa, err, sizeof err);
    cr_assert_not_null(d, "%s", err);
    kvt_disk_destroy(&d);
    uint64_t refused = kvt_disk_manifest_refusals();
    cr_assert_null(s_try_open(s_dir, LAYOUT, 0xbb, err, sizeof err));
    cr_assert(strstr(err, "namespace 00000000000000aa"), "%s", err);
    cr_assert(strstr(err, "namespace is 00000000000000bb"), "%s", err);
    cr_assert_eq(kvt_disk_manifest_refusals(), refused + 1);
    //  A tier that records no namespace checks only the layout.
    d = s_try_open(s_dir, LAYOUT, 0, err, sizeof err);
    cr_assert_not_null(d, "%s", err);
    kvt_disk_destroy(&d);
}

Test(disk, a_manifest_that_is_not_one_is_refused_and_left_alone)
{
    char err[512] = "", path[600];
    snprintf(path, sizeof path, "%s/.kvt-manifest", s_dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("kvtier-disk-manifest 1\nlayout_id=zz\n", f);
    fclose(f);
    uint64_t refused = kvt_disk_manifest_refusals();
    cr_assert_null(s_try_open(s_dir, LAYOUT, 0, err, sizeof err));
    cr_assert(strstr(err, "not a kvtier disk manifest"), "%s", err);
    cr_assert_eq(kvt_disk_manifest_refusals(), refused + 1);
    size_t len = 0;
    uint8_t *still = s_slurp(path, &len);
    cr_assert_not_null(still);
    cr_assert_eq(len, strlen("kvtier-disk-manifest 1\nlayout_id=zz\n"), "it was rewritten");
    free(still);
}

//  A manifest is parsed exactly: each line as written, 16 lowercase hex
//  digits, a newline, nothing after line 3. Anything else is refused naming
//  the line, and counted.
Test(disk, a_manifest_is_parsed_exactly_and_a_bad_line_is_named)
{
    char lay[17], good2[64];
    snprintf(lay, sizeof lay, "%016" PRIx64, (uint64_t)LAYOUT);
    snprintf(good2, sizeof good2, "layout_id=%s\n", lay);
    struct {
        const char *l1, *l2, *l3, *why;
    } bad[] = {
        {"kvtier-disk-manifest 2\n", good2, "namespace=00000000000000aa\n", "line 1"},
        {"kvtier-disk-manifest 1\n", "layout_id=-1\n", "namespace=00000000000000aa\n", "line 2"},
        {"kvtier-disk-manifest 1\n", "layout_id=0x12\n", "namespace=00000000000000aa\n", "line 2"},
        {"kvtier-disk-manifest 1\n", good2, "namespace=aa\n", "line 3"},
        {"kvtier-disk-manifest 1\n", good2, "namespace=00000000000000aa ", "line 3"},
        {"kvtier-disk-manifest 1\n", good2, "", "line 3"},
        {"kvtier-disk-manifest 1\n", good2, "namespace=00000000000000aa\nmore\n", "bytes follow"},
    };
    char path[600];
    snprintf(path, sizeof path, "%s/.kvt-manifest", s_dir);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        FILE *f = fopen(path, "w");
        cr_assert_not_null(f);
        fprintf(f, "%s%s%s", bad[i].l1, bad[i].l2, bad[i].l3);
        fclose(f);
        char err[512] = "";
        uint64_t refused = kvt_disk_manifest_refusals();
        cr_assert_null(s_try_open(s_dir, LAYOUT, 0xaa, err, sizeof err), "case %zu opened", i);
        cr_assert(strstr(err, bad[i].why), "case %zu: %s", i, err);
        cr_assert_eq(kvt_disk_manifest_refusals(), refused + 1);
    }
    FILE *f = fopen(path, "w");
    fprintf(f, "kvtier-disk-manifest 1\n%snamespace=00000000000000aa\n", good2);
    fclose(f);
    char err[512] = "";
    kvt_disk_t *d = s_try_open(s_dir, LAYOUT, 0xaa, err, sizeof err);
    cr_assert_not_null(d, "the exact form opens: %s", err);
    kvt_disk_destroy(&d);
}
