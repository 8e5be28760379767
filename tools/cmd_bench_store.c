/*  kvtier bench store — throughput and latency of the tier store, each
    against a baseline measured in the same run.

    * put / get: a chunk of 16 blocks copied into the CPU pool (reserve,
      16 memcpy from scattered source blocks, commit — into a full pool, so
      every put also evicts) and out of it (acquire, 16 memcpy to scattered
      blocks, release), for 16, 64 and 256 KiB blocks. Baseline: the same
      16 memcpy between the same source/destination blocks and a plain
      buffer as large as the pool. The plane and that buffer are on the
      same kind of pages as the pool's own arena (anonymous, 2 MiB aligned,
      advised onto transparent huge pages where the system has them), so
      the baseline differs from the pool only by the pool. After a warm-up pass, S_REPEATS pairs
      of (baseline, pool) measurements run back to back, alternating which
      goes first; reported are the medians and the median of the per-pair
      ratios. Targets: put and get >= 0.9 x the baseline at 64 KiB blocks.
    * lookup of a 512-chunk prefix (without and with pin + release), touch.
    * disk: put (queued zero-copy writes of 1 MiB objects until flushed) and
      get (synchronous verified reads). On a machine with free memory these
      are page-cache bound, not device bound.
    * fragmentation: a mixed workload of chunks, images and chunk+image
      objects into a full pool: occupancy and eviction overhead.
    * eviction under pressure: a seeded stream of prefix lookups and puts
      (Zipf-like shared prefixes, a state image every 4th chunk) against a
      pool smaller than its working set, in LRU and in VALUE order: hit
      ratio of each and VALUE / LRU (cmd_bench_store_evict.c).
*/
#define _DEFAULT_SOURCE //  MAP_ANONYMOUS, madvise
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd_bench_store_evict.h"
#include "kvt_cli.h"
#include "kvt_cmd.h"
#include "kvtier/kvt_disk.h"
#include "kvtier/kvt_pool.h"

#define S_BLOCKS  16           //  blocks per chunk
#define S_REPEATS 11           //  pairs of baseline / pool measurements
#define S_TARGET  0.9          //  put / get ratio target at 64 KiB blocks
#define S_PLANE   (256u << 20) //  bytes of the scattered block plane
#define S_NS      1u           //  namespace of every bench object

typedef struct {
    double seconds;      //  per measurement (split over repeats)
    uint64_t pool_bytes; //  CPU pool size
    const char *json;    //  --json PATH, or NULL
    const char *disk_in; //  --disk-dir, or NULL
    uint64_t disk_bytes; //  bytes written by the disk bench
} s_opts_t;

typedef struct {
    unsigned block_kib; //  block size
    double put, get;    //  pool GB/s (median)
    double mput, mget;  //  memcpy baseline GB/s (median)
    double rput, rget;  //  median of the per-pair ratios pool / memcpy
} s_size_t;

typedef struct {
    kvt_pool_t *pool;   //  the pool under test
    kvt_holder_t h;     //  bench holder
    uint8_t *plane;     //  scattered source / destination blocks
    uint8_t *flat;      //  baseline buffer as large as the pool
    size_t block;       //  block bytes
    size_t nblocks;     //  blocks in the plane
    size_t nslots;      //  chunks in the pool / flat buffer
    uint64_t next_key;  //  next fresh key for puts
    uint64_t first_key; //  oldest key still resident (for gets)
} s_ctx_t;

#define S_HUGE (2u << 20) //  a transparent huge page

//  `bytes` of anonymous memory, 2 MiB aligned and advised onto huge pages
//  like the pool's arena (*huge says whether the advice was taken), then
//  written with `fill` so that no page fault is timed. NULL on failure.
static uint8_t *s_map(size_t bytes, int fill, bool *huge)
{
    size_t len = (bytes + S_HUGE - 1) & ~(size_t)(S_HUGE - 1);
    uint8_t *p =
        mmap(NULL, len + S_HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    uint8_t *start = (uint8_t *)(((uintptr_t)p + S_HUGE - 1) & ~(uintptr_t)(S_HUGE - 1));
    if (start > p)
        munmap(p, (size_t)(start - p));
    if (p + len + S_HUGE > start + len)
        munmap(start + len, (size_t)(p + len + S_HUGE - (start + len)));
    *huge = false;
#ifdef MADV_HUGEPAGE
    *huge = madvise(start, len, MADV_HUGEPAGE) == 0;
#endif
    memset(start, fill, bytes);
    return start;
}

static void s_unmap(uint8_t *p, size_t bytes)
{
    if (p)
        munmap(p, (bytes + S_HUGE - 1) & ~(size_t)(S_HUGE - 1));
}

static kvt_hash_t s_key(uint64_t i)
{
    return (kvt_hash_t){.hi = 0xBE7C000000000000ull ^ i, .lo = i * 0x9E3779B97F4A7C15ull};
}

//  Block j of chunk i: a fixed pseudo-random permutation of the plane.
static uint8_t *s_block(s_ctx_t *c, uint64_t i, unsigned j)
{
    uint64_t b = ((i * S_BLOCKS + j) * 0x9E3779B97F4A7C15ull) & (c->nblocks - 1);
    return c->plane + b * c->block;
}

// ----------------------------------------------------------- put / get --

typedef int (*s_step_fn)(s_ctx_t *c, uint64_t i);

static int s_put_pool(s_ctx_t *c, uint64_t i)
{
    (void)i;
    kvt_resv_t r;
    void *p;
    uint64_t k = c->next_key++;
    int rc =
        kvt_pool_reserve(c->pool, S_NS, s_key(k), KVT_OBJ_KV, S_BLOCKS * c->block, c->h, &r, &p);
    if (rc != KVT_STORE_OK)
        return rc;
    for (unsigned j = 0; j < S_BLOCKS; j++)
        memcpy((uint8_t *)p + j * c->block, s_block(c, k, j), c->block);
    return kvt_pool_commit(c->pool, &r, NULL);
}

static int s_put_base(s_ctx_t *c, uint64_t i)
{
    uint8_t *dst = c->flat + (i % c->nslots) * S_BLOCKS * c->block;
    for (unsigned j = 0; j < S_BLOCKS; j++)
        memcpy(dst + j * c->block, s_block(c, i, j), c->block);
    return 0;
}

static int s_get_pool(s_ctx_t *c, uint64_t i)
{
    uint64_t live = c->next_key - c->first_key;
    uint64_t k = c->first_key + (i % live);
    kvt_lease_t l;
    kvt_obj_view_t v;
    int rc = kvt_pool_acquire(c->pool, S_NS, s_key(k), KVT_OBJ_KV, c->h, &l, &v);
    if (rc != KVT_STORE_OK)
        return rc;
    for (unsigned j = 0; j < S_BLOCKS; j++)
        memcpy(s_block(c, k, j), (const uint8_t *)v.ptr + j * c->block, c->block);
    return kvt_pool_release(c->pool, &l);
}

static int s_get_base(s_ctx_t *c, uint64_t i)
{
    const uint8_t *src = c->flat + (i % c->nslots) * S_BLOCKS * c->block;
    for (unsigned j = 0; j < S_BLOCKS; j++)
        memcpy(s_block(c, i, j), src + j * c->block, c->block);
    return 0;
}

//  Runs fn for `seconds`; returns GB/s, or -1 on a store error.
static double s_run(s_ctx_t *c, s_step_fn fn, double seconds, uint64_t *iter)
{
    size_t chunk = S_BLOCKS * c->block;
    uint64_t n = 0;
    double t0 = kvt_cli_now(), t;
    do {
        for (int b = 0; b < 8; b++, n++)
            if (fn(c, (*iter)++) != 0)
                return -1;
        t = kvt_cli_now();
    } while (t - t0 < seconds);
    return (double)n * (double)chunk / (t - t0) / 1e9;
}

//  Alternating baseline / pool repeats: medians into *base and *pool, and
//  the median of the ratios of adjacent pairs (robust to drift on a shared
//  machine) into *ratio.
static int s_pair(s_ctx_t *c, s_step_fn base_fn, s_step_fn pool_fn, double seconds, double *base,
                  double *pool, double *ratio)
{
    double b[S_REPEATS], p[S_REPEATS], q[S_REPEATS];
    uint64_t ib = 0, ip = 0;
    //  Warm-up: one pass over the whole pool for each.
    double warm = seconds / S_REPEATS;
    if (s_run(c, base_fn, warm, &ib) < 0 || s_run(c, pool_fn, warm, &ip) < 0)
        return -1;
    for (int r = 0; r < S_REPEATS; r++) {
        //  Alternate which goes first, so a drift hits both sides alike.
        if (r % 2 == 0) {
            b[r] = s_run(c, base_fn, seconds / S_REPEATS, &ib);
            p[r] = s_run(c, pool_fn, seconds / S_REPEATS, &ip);
        } else {
            p[r] = s_run(c, pool_fn, seconds / S_REPEATS, &ip);
            b[r] = s_run(c, base_fn, seconds / S_REPEATS, &ib);
        }
        if (b[r] < 0 || p[r] < 0)
            return -1;
        q[r] = p[r] / b[r];
    }
    *ratio = kvt_cli_median(q, S_REPEATS);
    *base = kvt_cli_median(b, S_REPEATS);
    *pool = kvt_cli_median(p, S_REPEATS);
    return 0;
}

static kvt_pool_t *s_pool(uint64_t bytes, kvt_holder_t *h)
{
    kvt_pool_config_t cfg;
    kvt_pool_config_defaults(&cfg);
    cfg.capacity_bytes = bytes;
    cfg.name = "bench.pool";
    char err[256];
    kvt_pool_t *pool = kvt_pool_new(&cfg, err, sizeof(err));
    if (!pool) {
        fprintf(stderr, "kvtier bench store: %s\n", err);
        return NULL;
    }
    if (kvt_pool_holder_add(pool, "bench", h) != KVT_STORE_OK)
        kvt_pool_destroy(&pool);
    return pool;
}

//  put / get at one block size; the pool is left full for lookup / touch.
static int s_bench_size(const s_opts_t *o, s_ctx_t *c, s_size_t *out)
{
    size_t chunk = S_BLOCKS * c->block;
    c->nblocks = S_PLANE / c->block;
    c->nslots = o->pool_bytes / chunk;
    c->next_key = c->first_key = (uint64_t)c->block << 32;
    //  Fill the pool with chunks of this size first: puts run into a full pool.
    for (size_t i = 0; i < c->nslots; i++)
        if (s_put_pool(c, 0) != 0)
            return -1;
    if (s_pair(c, s_put_base, s_put_pool, o->seconds, &out->mput, &out->put, &out->rput) != 0)
        return -1;
    //  The pool is full of the newest puts; gets read those that are resident.
    kvt_pool_stats_t st;
    kvt_pool_stats(c->pool, &st);
    c->first_key = c->next_key - st.objects;
    if (s_pair(c, s_get_base, s_get_pool, o->seconds, &out->mget, &out->get, &out->rget) != 0)
        return -1;
    return 0;
}

// ------------------------------------------------------- lookup, touch --

typedef struct {
    double median; //  median over batches (per operation)
    double mean;   //  mean over the whole run (per operation)
} s_lat_t;

//  One operation of the latency bench: 0 lookup, 1 lookup with pin, 2 touch.
static void s_lat_op(s_ctx_t *c, const kvt_hash_t *keys, int what, uint64_t n)
{
    if (what == 2) {
        kvt_pool_touch(c->pool, S_NS, keys[n & 511], KVT_OBJ_KV);
        return;
    }
    kvt_lease_t l = {0};
    int k = kvt_pool_lookup(c->pool, S_NS, keys, 512, KVT_OBJ_KV, c->h, what ? &l : NULL);
    if (k != 512)
        fprintf(stderr, "kvtier bench store: lookup found %d of 512 keys\n", k);
    if (what)
        kvt_pool_release(c->pool, &l);
}

//  Runs an operation in short batches for `seconds`: the median batch is
//  the typical latency on a machine shared with other work; the mean
//  includes preemptions.
static s_lat_t s_latency(s_ctx_t *c, const kvt_hash_t *keys, int what, double seconds)
{
    enum { S_MAX_BATCHES = 100000 };
    static const int per_batch[3] = {4, 4, 256};
    double *batch = malloc(S_MAX_BATCHES * sizeof(double));
    int nb = 0;
    uint64_t n = 0;
    double t0 = kvt_cli_now(), t = t0;
    while (t - t0 < seconds && nb < S_MAX_BATCHES && batch) {
        double b0 = t;
        for (int i = 0; i < per_batch[what]; i++)
            s_lat_op(c, keys, what, n++);
        t = kvt_cli_now();
        batch[nb++] = (t - b0) / per_batch[what];
    }
    s_lat_t r = {.median = nb ? kvt_cli_median(batch, nb) : 0,
                 .mean = n ? (t - t0) / (double)n : 0};
    free(batch);
    return r;
}

static void s_bench_lookup(s_ctx_t *c, double seconds, s_lat_t lat[3])
{
    kvt_hash_t keys[512];
    for (int i = 0; i < 512; i++)
        keys[i] = s_key(c->first_key + (uint64_t)i);
    for (int what = 0; what < 3; what++)
        lat[what] = s_latency(c, keys, what, seconds / 3);
}

// ---------------------------------------------------------------- disk --

static void s_rm_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    char path[4200];
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

static int s_bench_disk(const s_opts_t *o, uint8_t *src, double *put, double *get, char *dir,
                        size_t dirlen)
{
    snprintf(dir, dirlen, "%s/kvtier-bench-store-%d-XXXXXX", o->disk_in ? o->disk_in : "/tmp",
             (int)getpid());
    if (!mkdtemp(dir)) {
        fprintf(stderr, "kvtier bench store: --disk-dir %s: %s\n", o->disk_in ? o->disk_in : "/tmp",
                strerror(errno));
        return -1;
    }
    const size_t obj = S_BLOCKS * (64u << 10);
    size_t n = (size_t)(o->disk_bytes / obj);
    kvt_disk_config_t cfg;
    kvt_disk_config_defaults(&cfg);
    cfg.dir = dir;
    cfg.capacity_bytes = o->disk_bytes * 2;
    char err[256];
    kvt_disk_t *disk = kvt_disk_new(&cfg, err, sizeof(err));
    int rc = -1;
    if (!disk) {
        fprintf(stderr, "kvtier bench store: %s\n", err);
        goto cleanup;
    }
    double t0 = kvt_cli_now();
    for (size_t i = 0; i < n; i++) {
        const uint8_t *p = src + (i * obj) % (S_PLANE - obj + 1);
        int r;
        //  A full queue refuses at once; the bench (not the store) waits.
        while ((r = kvt_disk_put(disk, S_NS, s_key(i), KVT_OBJ_KV, p, obj, NULL, NULL)) ==
               KVT_STORE_EBUSY)
            sched_yield();
        if (r != KVT_STORE_OK) {
            fprintf(stderr, "kvtier bench store: disk put: %s\n", kvt_store_strerror(r));
            goto cleanup;
        }
    }
    kvt_disk_flush(disk);
    *put = (double)(n * obj) / (kvt_cli_now() - t0) / 1e9;
    uint8_t *dst = malloc(obj);
    if (!dst)
        goto cleanup;
    t0 = kvt_cli_now();
    for (size_t i = 0; i < n; i++) {
        size_t got;
        kvt_obj_kind_t kind;
        int r = kvt_disk_read(disk, S_NS, s_key(i), KVT_OBJ_KV, dst, obj, &got, &kind);
        if (r != KVT_STORE_OK) {
            fprintf(stderr, "kvtier bench store: disk read: %s\n", kvt_store_strerror(r));
            free(dst);
            goto cleanup;
        }
    }
    *get = (double)(n * obj) / (kvt_cli_now() - t0) / 1e9;
    free(dst);
    rc = 0;
cleanup:
    kvt_disk_destroy(&disk);
    s_rm_tree(dir);
    return rc;
}

// ------------------------------------------------------- fragmentation --

typedef struct {
    double occupancy; //  mean used / capacity after each put, once full
    double min_occ;   //  lowest used / capacity seen once full
    uint64_t failed;  //  failed allocations
    uint64_t extents; //  free extents (holes) at the end
    uint64_t largest; //  largest free extent at the end, bytes
} s_frag_t;

//  70 % 1 MiB chunks, 20 % images of 16..256 KiB, 10 % chunk + image, with
//  two refreshes of random recent objects per put (as lookups and gets do),
//  so that LRU order drifts away from address order. Capacity lost to holes
//  is 1 - occupancy.
static int s_bench_frag(s_frag_t *f)
{
    kvt_holder_t h;
    kvt_pool_t *pool = s_pool(256u << 20, &h);
    uint8_t *src = calloc(1, (1u << 20) + (256u << 10));
    if (!pool || !src) {
        kvt_pool_destroy(&pool);
        free(src);
        return -1;
    }
    uint64_t x = 88172645463325252ull, samples = 0;
    double occ = 0, min_occ = 1;
    kvt_pool_stats_t st;
    for (uint64_t i = 0; i < 20000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        unsigned r = (unsigned)(x % 100);
        size_t image = (16u << 10) * (1 + (x >> 20) % 16);
        size_t size = r < 70 ? (1u << 20) : r < 90 ? image : (1u << 20) + image;
        kvt_obj_kind_t kind = r < 70 ? KVT_OBJ_KV : r < 90 ? KVT_OBJ_STATE : KVT_OBJ_KV_STATE;
        kvt_pool_put(pool, S_NS, s_key(i), kind, src, size);
        for (int t = 0; t < 2 && i > 0; t++) {
            uint64_t k = i - 1 - ((x >> (24 + 16 * t)) % (i < 500 ? i : 500));
            for (int kk = KVT_OBJ_KV; kk <= KVT_OBJ_KV_STATE; kk++)
                kvt_pool_touch(pool, S_NS, s_key(k), (kvt_obj_kind_t)kk);
        }
        kvt_pool_stats(pool, &st);
        if (i >= 2000) {
            double o = (double)st.used_bytes / (double)st.capacity_bytes;
            occ += o;
            min_occ = o < min_occ ? o : min_occ;
            samples++;
        }
    }
    *f = (s_frag_t){.occupancy = occ / (double)samples,
                    .min_occ = min_occ,
                    .failed = st.alloc_failed,
                    .extents = st.free_extents,
                    .largest = st.largest_free_bytes};
    free(src);
    kvt_pool_destroy(&pool);
    return 0;
}

// ---------------------------------------------------------------- main --

static void s_usage(FILE *out)
{
    fprintf(out, "usage: kvtier bench store [--json PATH] [--disk-dir DIR] [--seconds S]\n"
                 "                          [--pool SIZE] [--disk-bytes SIZE]\n"
                 "  --json PATH        also write the results as JSON\n"
                 "  --disk-dir DIR     where the disk bench writes (a temporary directory\n"
                 "                     inside DIR, removed after); default /tmp\n"
                 "  --seconds S        time per measurement, default 0.5 (0.05..60)\n"
                 "  --pool SIZE        CPU pool size, default 1GiB (64MiB..64GiB)\n"
                 "  --disk-bytes SIZE  bytes written by the disk bench, default 512MiB\n");
}

static int s_parse(int argc, char **argv, s_opts_t *o)
{
    *o = (s_opts_t){.seconds = 0.5, .pool_bytes = 1ull << 30, .disk_bytes = 512ull << 20};
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (strcmp(f, "--help") == 0 || strcmp(f, "-h") == 0) {
            s_usage(stdout);
            return 1;
        }
        bool known = !strcmp(f, "--json") || !strcmp(f, "--disk-dir") || !strcmp(f, "--seconds") ||
                     !strcmp(f, "--pool") || !strcmp(f, "--disk-bytes");
        if (!known) {
            fprintf(stderr, "kvtier bench store: unknown flag '%s'\n", f);
            s_usage(stderr);
            return -1;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "kvtier bench store: %s needs a value\n", f);
            return -1;
        }
        const char *v = argv[++i];
        if (!strcmp(f, "--json")) {
            o->json = v;
        } else if (!strcmp(f, "--disk-dir")) {
            struct stat sb;
            if (stat(v, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
                fprintf(stderr, "kvtier bench store: --disk-dir %s: not a directory\n", v);
                return -1;
            }
            o->disk_in = v;
        } else if (!strcmp(f, "--seconds")) {
            char *end = NULL;
            errno = 0;
            double s = strtod(v, &end);
            if (errno || end == v || *end || !(s >= 0.05 && s <= 60)) {
                fprintf(stderr, "kvtier bench store: --seconds %s: expected 0.05..60\n", v);
                return -1;
            }
            o->seconds = s;
        } else {
            uint64_t n;
            bool pool = !strcmp(f, "--pool");
            uint64_t lo = pool ? 64ull << 20 : 16ull << 20, hi = 64ull << 30;
            if (kvt_cli_size(v, &n) != 0 || n < lo || n > hi) {
                fprintf(stderr,
                        "kvtier bench store: %s %s: expected a size in [%llu MiB, 64 GiB]\n", f, v,
                        (unsigned long long)(lo >> 20));
                return -1;
            }
            *(pool ? &o->pool_bytes : &o->disk_bytes) = n;
        }
    }
    return 0;
}

static void s_machine(char *cpu, size_t cap, double *mem_gib)
{
    kvt_cli_cpu_model(cpu, cap);
    *mem_gib = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE) / (1u << 30);
}

static void s_json_size(FILE *j, const s_size_t *s, bool last)
{
    fprintf(j,
            "    \"%uKiB\": {\"chunk_KiB\": %u, \"put_GBps\": %.3f, \"get_GBps\": %.3f, "
            "\"memcpy_put_GBps\": %.3f, \"memcpy_get_GBps\": %.3f, \"put_ratio\": %.3f, "
            "\"get_ratio\": %.3f}%s\n",
            s->block_kib, s->block_kib * S_BLOCKS, s->put, s->get, s->mput, s->mget, s->rput,
            s->rget, last ? "" : ",");
}

int kvt_cmd_bench_store(int argc, char **argv)
{
    s_opts_t o;
    int p = s_parse(argc, argv, &o);
    if (p != 0)
        return p > 0 ? 0 : 2;
    char cpu[256], dir[4096] = "";
    double mem_gib;
    s_machine(cpu, sizeof(cpu), &mem_gib);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    double load0 = kvt_cli_loadavg();
    printf("kvtier bench store: %ld cpus (%s), %.1f GiB memory, pool %llu MiB, %.2f s per "
           "measurement\n",
           ncpu, cpu, mem_gib, (unsigned long long)(o.pool_bytes >> 20), o.seconds);

    int rc = 1;
    s_ctx_t c = {0};
    c.pool = s_pool(o.pool_bytes, &c.h);
    bool huge_plane = false, huge_flat = false;
    c.plane = s_map(S_PLANE, 0x5a, &huge_plane); //  page-touched, like a device plane
    c.flat = s_map(o.pool_bytes, 0xa5, &huge_flat);
    if (!c.pool || !c.plane || !c.flat) {
        fprintf(stderr, "kvtier bench store: cannot allocate %llu MiB of buffers\n",
                (unsigned long long)((o.pool_bytes * 2 + S_PLANE) >> 20));
        goto cleanup;
    }
    printf("bench buffers (plane and baseline): %s\n",
           huge_plane && huge_flat ? "advised onto transparent huge pages, like the pool arena"
                                   : "base pages (the huge-page advice was refused)");

    s_size_t sizes[3] = {{.block_kib = 16}, {.block_kib = 64}, {.block_kib = 256}};
    s_lat_t lat[3] = {{0}};
    printf("%-8s %-9s %10s %10s %7s %10s %10s %7s\n", "block", "chunk", "put GB/s", "memcpy",
           "ratio", "get GB/s", "memcpy", "ratio");
    for (int s = 0; s < 3; s++) {
        c.block = (size_t)sizes[s].block_kib << 10;
        if (s_bench_size(&o, &c, &sizes[s]) != 0) {
            fprintf(stderr, "kvtier bench store: a pool operation failed at %u KiB blocks\n",
                    sizes[s].block_kib);
            goto cleanup;
        }
        printf("%3u KiB  %5u KiB %10.2f %10.2f %7.2f %10.2f %10.2f %7.2f\n", sizes[s].block_kib,
               sizes[s].block_kib * S_BLOCKS, sizes[s].put, sizes[s].mput, sizes[s].rput,
               sizes[s].get, sizes[s].mget, sizes[s].rget);
        if (sizes[s].block_kib == 64)
            s_bench_lookup(&c, o.seconds, lat);
    }
    double lookup_us = lat[0].median * 1e6;
    printf("lookup of a 512-chunk prefix: %.2f us median (mean %.2f); with pin + release: %.2f us "
           "median (mean %.2f); touch: %.0f ns median (mean %.0f)\n",
           lookup_us, lat[0].mean * 1e6, lat[1].median * 1e6, lat[1].mean * 1e6,
           lat[2].median * 1e9, lat[2].mean * 1e9);

    double dput = 0, dget = 0;
    if (s_bench_disk(&o, c.plane, &dput, &dget, dir, sizeof(dir)) != 0)
        goto cleanup;
    printf("disk (%s, 1 MiB objects, %llu MiB): put %.2f GB/s, get %.2f GB/s "
           "(page-cache bound: the files fit in memory)\n",
           o.disk_in ? o.disk_in : "/tmp", (unsigned long long)(o.disk_bytes >> 20), dput, dget);

    s_frag_t frag;
    if (s_bench_frag(&frag) != 0)
        goto cleanup;
    printf("fragmentation (1 MiB chunks / 16-256 KiB images / chunk+image with random refreshes, "
           "full 256 MiB pool): occupancy mean %.3f min %.3f, %llu holes (largest %llu KiB), "
           "failed %llu\n",
           frag.occupancy, frag.min_occ, (unsigned long long)frag.extents,
           (unsigned long long)(frag.largest >> 10), (unsigned long long)frag.failed);

    kvt_bevict_pair_t ev;
    if (kvt_bench_store_evict(&ev) != 0) {
        fprintf(stderr, "kvtier bench store: the eviction-under-pressure run failed\n");
        goto cleanup;
    }
    double ev_ratio = ev.lru.hit_ratio > 0 ? ev.value.hit_ratio / ev.lru.hit_ratio : 0;
    printf("eviction under pressure (%llu requests, pool %llu MiB of a %llu MiB working set, "
           "%u KiB chunks, %u KiB images every 4th): hit ratio LRU %.3f (%.1f MiB hit), VALUE "
           "%.3f (%.1f MiB hit, %llu orphan images), VALUE/LRU %.3f\n",
           (unsigned long long)ev.lru.requests, (unsigned long long)(ev.pool_bytes >> 20),
           (unsigned long long)(ev.work_bytes >> 20), ev.chunk_bytes >> 10, ev.image_bytes >> 10,
           ev.lru.hit_ratio, (double)ev.lru.hit_bytes / (1 << 20), ev.value.hit_ratio,
           (double)ev.value.hit_bytes / (1 << 20), (unsigned long long)ev.value.orphan_images,
           ev_ratio);

    const s_size_t *m = &sizes[1];
    bool met = m->rput >= S_TARGET && m->rget >= S_TARGET && lookup_us <= 50;
    double load1 = kvt_cli_loadavg();
    printf("load average (1 min): %.2f at start, %.2f at end\n", load0, load1);
    printf("targets (64 KiB blocks: put and get >= %.1f x memcpy, median of %d pairs; lookup <= "
           "50 us): %s\n",
           S_TARGET, S_REPEATS, met ? "met" : "NOT met");
    if (o.json) {
        FILE *j = fopen(o.json, "w");
        if (!j) {
            fprintf(stderr, "kvtier bench store: --json %s: %s\n", o.json, strerror(errno));
            goto cleanup;
        }
        fprintf(j, "{\n  \"bench\": \"store\",\n");
        fprintf(j,
                "  \"machine\": {\"nproc\": %ld, \"cpu\": \"%s\", \"mem_GiB\": %.1f, "
                "\"load_avg_1min_start\": %.2f, \"load_avg_1min_end\": %.2f},\n",
                ncpu, cpu, mem_gib, load0, load1);
        fprintf(j,
                "  \"method\": {\"pairs\": %d, \"statistic\": \"median; ratio = median of "
                "per-pair ratios, order alternating\"},\n",
                S_REPEATS);
        fprintf(j, "  \"bench_buffers_huge_advised\": %s,\n",
                huge_plane && huge_flat ? "true" : "false");
        fprintf(j, "  \"pool_bytes\": %llu,\n  \"seconds\": %.3f,\n",
                (unsigned long long)o.pool_bytes, o.seconds);
        fprintf(j, "  \"block_KiB\": 64,\n  \"chunk_KiB\": %u,\n", 64 * S_BLOCKS);
        fprintf(j, "  \"put_GBps\": %.3f,\n  \"get_GBps\": %.3f,\n", m->put, m->get);
        fprintf(j, "  \"memcpy_put_GBps\": %.3f,\n  \"memcpy_get_GBps\": %.3f,\n", m->mput,
                m->mget);
        fprintf(j, "  \"put_ratio\": %.3f,\n  \"get_ratio\": %.3f,\n", m->rput, m->rget);
        fprintf(j, "  \"lookup_us_512\": %.3f,\n  \"lookup_us_512_mean\": %.3f,\n", lookup_us,
                lat[0].mean * 1e6);
        fprintf(j, "  \"lookup_pin_us_512\": %.3f,\n  \"lookup_pin_us_512_mean\": %.3f,\n",
                lat[1].median * 1e6, lat[1].mean * 1e6);
        fprintf(j, "  \"touch_ns\": %.1f,\n  \"touch_ns_mean\": %.1f,\n", lat[2].median * 1e9,
                lat[2].mean * 1e9);
        fprintf(j,
                "  \"disk\": {\"put_GBps\": %.3f, \"get_GBps\": %.3f, \"object_KiB\": %u, "
                "\"bytes\": %llu, \"note\": \"page-cache bound\"},\n",
                dput, dget, 64 * S_BLOCKS, (unsigned long long)o.disk_bytes);
        fprintf(j, "  \"sizes\": {\n");
        for (int s = 0; s < 3; s++)
            s_json_size(j, &sizes[s], s == 2);
        fprintf(j, "  },\n");
        fprintf(j,
                "  \"fragmentation\": {\"occupancy\": %.3f, \"occupancy_min\": %.3f, "
                "\"free_extents\": %llu, \"largest_free_bytes\": %llu, \"alloc_failed\": %llu},\n",
                frag.occupancy, frag.min_occ, (unsigned long long)frag.extents,
                (unsigned long long)frag.largest, (unsigned long long)frag.failed);
        fprintf(j,
                "  \"evict_pressure\": {\"requests\": %llu, \"pool_bytes\": %llu, "
                "\"working_set_bytes\": %llu, \"seed\": %llu,\n",
                (unsigned long long)ev.lru.requests, (unsigned long long)ev.pool_bytes,
                (unsigned long long)ev.work_bytes, (unsigned long long)ev.seed);
        for (int k = 0; k < 2; k++) {
            const kvt_bevict_t *r = k == 0 ? &ev.lru : &ev.value;
            fprintf(j,
                    "    \"%s\": {\"hit_ratio\": %.4f, \"hit_bytes\": %llu, \"evictions\": "
                    "%llu, \"orphan_images\": %llu, \"seconds\": %.3f},\n",
                    k == 0 ? "lru" : "value", r->hit_ratio, (unsigned long long)r->hit_bytes,
                    (unsigned long long)r->evictions, (unsigned long long)r->orphan_images,
                    r->seconds);
        }
        fprintf(j, "    \"value_over_lru\": %.4f},\n", ev_ratio);
        fprintf(j,
                "  \"targets\": {\"ratio_min\": %.2f, \"lookup_us_512_max\": 50, \"met\": %s}\n}\n",
                S_TARGET, met ? "true" : "false");
        fclose(j);
    }
    rc = 0;
cleanup:
    kvt_pool_destroy(&c.pool);
    s_unmap(c.plane, S_PLANE);
    s_unmap(c.flat, o.pool_bytes);
    return rc;
}
