/*  test_store_memory.c — what the CPU pool's memory costs and what a run
    may ask for.

    pool_memory: a pool's own arena is mapped, never written at creation:
    no page of it is resident (mincore) until objects are stored, and the
    resident size then follows the bytes stored; fresh memory reads as zero.

    mem_limit: the limit is the smaller of MemAvailable (MemTotal without
    it) and the cgroup limit (v2 memory.max, v1 memory.limit_in_bytes, "max"
    and v1's 2^63 meaning none), read from fake /proc and cgroup trees.

    replay_mem: the start-up check refuses a run whose ranks' pools exceed
    a limit injected through the config, naming the sizes and the limit's
    source, counts it, and lets --mem-overcommit through.
*/
#define _DEFAULT_SOURCE //  mincore, mkdtemp
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvtier/kvt_pool.h"
#include "replay/kvt_replay.h"

// ------------------------------------------------------- pool_memory ----

//  Resident bytes of [p, p + len) by mincore.
static size_t s_resident(const void *p, size_t len)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)p & ~(uintptr_t)(page - 1);
    size_t n = ((uintptr_t)p + len - a + page - 1) / page;
    unsigned char *vec = malloc(n);
    cr_assert_not_null(vec);
    cr_assert_eq(mincore((void *)a, n * page, vec), 0);
    size_t res = 0;
    for (size_t i = 0; i < n; i++)
        res += vec[i] & 1;
    free(vec);
    return res * page;
}

static void s_quiet(void *arg, int level, const char *line)
{
    (void)arg, (void)level, (void)line;
}

static kvt_pool_t *s_pool(size_t bytes)
{
    kvt_pool_config_t cfg;
    kvt_pool_config_defaults(&cfg);
    cfg.capacity_bytes = bytes;
    cfg.log = s_quiet;
    char err[256] = "";
    kvt_pool_t *pool = kvt_pool_new(&cfg, err, sizeof err);
    cr_assert_not_null(pool, "%s", err);
    return pool;
}

Test(pool_memory, an_arena_is_not_resident_until_objects_are_stored)
{
    size_t cap = 256u << 20;
    kvt_pool_t *pool = s_pool(cap);
    uint8_t *base = kvt_pool_base(pool);
    cr_assert_eq((uintptr_t)base % (2u << 20), 0, "the arena is 2 MiB aligned");
    cr_assert_eq(s_resident(base, kvt_pool_capacity(pool)), 0, "creation faulted the arena");

    size_t obj = 1u << 20;
    uint8_t *src = malloc(obj);
    cr_assert_not_null(src);
    memset(src, 0x5a, obj);
    for (uint64_t k = 1; k <= 8; k++)
        cr_assert_eq(kvt_pool_put(pool, 1, (kvt_hash_t){.lo = k}, KVT_OBJ_KV, src, obj),
                     KVT_STORE_OK);
    size_t res = s_resident(base, kvt_pool_capacity(pool));
    //  8 MiB stored; huge pages round up to 2 MiB at the end of the run.
    cr_assert_geq(res, 8 * obj, "resident %zu after 8 MiB stored", res);
    cr_assert_leq(res, 8 * obj + (4u << 20), "resident %zu after 8 MiB stored", res);

    for (uint64_t k = 9; k <= 24; k++)
        cr_assert_eq(kvt_pool_put(pool, 1, (kvt_hash_t){.lo = k}, KVT_OBJ_KV, src, obj),
                     KVT_STORE_OK);
    size_t res2 = s_resident(base, kvt_pool_capacity(pool));
    cr_assert_geq(res2, 24 * obj, "resident %zu after 24 MiB stored", res2);
    cr_assert_leq(res2, 24 * obj + (4u << 20), "resident %zu after 24 MiB stored", res2);
    free(src);
    kvt_pool_destroy(&pool);
}

Test(pool_memory, fresh_arena_memory_reads_as_zero)
{
    kvt_pool_t *pool = s_pool(16u << 20);
    kvt_holder_t h;
    cr_assert_eq(kvt_pool_holder_add(pool, "t", &h), KVT_STORE_OK);
    kvt_resv_t resv = {0};
    void *ptr = NULL;
    cr_assert_eq(
        kvt_pool_reserve(pool, 1, (kvt_hash_t){.lo = 7}, KVT_OBJ_KV, 1u << 20, h, &resv, &ptr),
        KVT_STORE_OK);
    const uint8_t *b = ptr;
    for (size_t i = 0; i < (1u << 20); i += 997)
        cr_assert_eq(b[i], 0);
    cr_assert_eq(kvt_pool_abort(pool, &resv), KVT_STORE_OK);
    kvt_pool_destroy(&pool);
}

// --------------------------------------------------------- mem_limit ----

static char s_dir[64];

static void s_write(const char *rel, const char *text)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", s_dir, rel);
    //  Parent folders, one level at a time.
    for (char *p = path + strlen(s_dir) + 1; (p = strchr(p, '/')); p++) {
        *p = 0;
        mkdir(path, 0700);
        *p = '/';
    }
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    fputs(text, f);
    fclose(f);
}

static void s_tree(void)
{
    snprintf(s_dir, sizeof s_dir, "/tmp/kvt_memlim_%d_XXXXXX", (int)getpid());
    cr_assert_not_null(mkdtemp(s_dir));
}

static void s_read(kvt_mem_limit_t *lim, int want_rc)
{
    char proc[128], cg[128];
    snprintf(proc, sizeof proc, "%s/proc", s_dir);
    snprintf(cg, sizeof cg, "%s/cg", s_dir);
    cr_assert_eq(kvt_mem_limit_read(proc, cg, lim), want_rc);
}

static const char *s_meminfo = "MemTotal:       32000000 kB\n"
                               "MemFree:         1000000 kB\n"
                               "MemAvailable:   20000000 kB\n";

Test(mem_limit, v2_max_means_no_limit_and_memavailable_wins, .init = s_tree)
{
    s_write("proc/meminfo", s_meminfo);
    s_write("proc/self/cgroup", "0::/\n");
    s_write("cg/memory.max", "max\n");
    kvt_mem_limit_t lim;
    s_read(&lim, 0);
    cr_assert_eq(lim.bytes, 20000000ull << 10);
    cr_assert_eq(lim.cgroup_bytes, UINT64_MAX);
    cr_assert(strstr(lim.source, "MemAvailable"), "%s", lim.source);
}

Test(mem_limit, a_v2_limit_below_ram_wins_and_names_its_file, .init = s_tree)
{
    s_write("proc/meminfo", s_meminfo);
    s_write("proc/self/cgroup", "0::/job/a\n");
    s_write("cg/job/a/memory.max", "6442450944\n");
    kvt_mem_limit_t lim;
    s_read(&lim, 0);
    cr_assert_eq(lim.bytes, 6ull << 30);
    cr_assert(strstr(lim.source, "cgroup v2 memory.max"), "%s", lim.source);
    cr_assert(strstr(lim.source, "job/a/memory.max"), "%s", lim.source);
}

Test(mem_limit, a_v1_limit_counts_and_its_unlimited_value_does_not, .init = s_tree)
{
    s_write("proc/meminfo", s_meminfo);
    s_write("proc/self/cgroup", "4:memory:/box\n0::/\n");
    s_write("cg/memory/box/memory.limit_in_bytes", "9223372036854771712\n");
    kvt_mem_limit_t lim;
    s_read(&lim, 0);
    cr_assert_eq(lim.cgroup_bytes, UINT64_MAX, "v1 unlimited read as a limit");
    s_write("cg/memory/box/memory.limit_in_bytes", "1073741824\n");
    s_read(&lim, 0);
    cr_assert_eq(lim.bytes, 1ull << 30);
    cr_assert(strstr(lim.source, "v1 memory.limit_in_bytes"), "%s", lim.source);
}

//  A cgroup path longer than the source field keeps its end (the file that
//  holds the limit) behind "...", whole and terminated.
Test(mem_limit, a_long_cgroup_path_keeps_its_file_in_the_source, .init = s_tree)
{
    char rel[200] = "cg/", cgline[200] = "0::/";
    for (int i = 0; i < 12; i++) {
        strcat(rel, "deep-cgroup-");
        strcat(cgline, "deep-cgroup-");
        strcat(rel, i < 11 ? "/" : "end");
        strcat(cgline, i < 11 ? "/" : "end");
    }
    strcat(rel, "/memory.max");
    strcat(cgline, "\n");
    s_write("proc/meminfo", s_meminfo);
    s_write("proc/self/cgroup", cgline);
    s_write(rel, "6442450944\n");
    kvt_mem_limit_t lim;
    s_read(&lim, 0);
    cr_assert_eq(lim.bytes, 6ull << 30);
    size_t n = strlen(lim.source);
    cr_assert_lt(n, sizeof lim.source);
    cr_assert(strstr(lim.source, "cgroup v2 memory.max (..."), "%s", lim.source);
    cr_assert(n > 16 && !strcmp(lim.source + n - 16, "-end/memory.max)"), "%s", lim.source);
}

Test(mem_limit, memtotal_stands_in_for_memavailable_and_nothing_means_unknown, .init = s_tree)
{
    s_write("proc/meminfo", "MemTotal:       1048576 kB\n");
    kvt_mem_limit_t lim;
    s_read(&lim, 0);
    cr_assert_eq(lim.bytes, 1ull << 30);
    cr_assert(strstr(lim.source, "MemTotal"), "%s", lim.source);
    s_write("proc/meminfo", "Garbage: 12\n");
    s_read(&lim, -1);
    cr_assert_eq(lim.bytes, UINT64_MAX);
}

// -------------------------------------------------------- replay_mem ----

//  A 6 GiB cgroup limit with plenty of RAM, as in the OOM report.
static int s_six_gib(void *arg, kvt_mem_limit_t *out)
{
    (void)arg;
    memset(out, 0, sizeof *out);
    out->ram_bytes = 64ull << 30;
    out->cgroup_bytes = 6ull << 30;
    out->bytes = 6ull << 30;
    snprintf(out->source, sizeof out->source, "cgroup v2 memory.max (/fake/memory.max)");
    return 0;
}

static void s_cfg(kvt_replay_cfg_t *c, uint32_t tp)
{
    kvt_replay_defaults(c);
    c->tp = tp;
    c->limit = 1;
    c->log_level = 0;
    c->mem_limit = s_six_gib;
}

Test(replay_mem, a_run_over_the_cgroup_limit_is_refused_naming_the_sizes)
{
    kvt_replay_cfg_t c;
    s_cfg(&c, 64);
    char err[512] = "";
    uint64_t before = kvt_replay_mem_refusals();
    cr_assert_eq(kvt_replay_mem_check(&c, err, sizeof err), -1);
    cr_assert_eq(kvt_replay_mem_refusals(), before + 1);
    //  64 x (512 + 16) MiB against 6144 MiB.
    cr_assert(strstr(err, "33792 MiB"), "%s", err);
    cr_assert(strstr(err, "tp 64"), "%s", err);
    cr_assert(strstr(err, "cpu-pool 512 MiB"), "%s", err);
    cr_assert(strstr(err, "hbm-pool 16 MiB"), "%s", err);
    cr_assert(strstr(err, "6144 MiB"), "%s", err);
    cr_assert(strstr(err, "/fake/memory.max"), "%s", err);

    kvt_replay_report_t *rep = calloc(1, sizeof *rep);
    cr_assert_not_null(rep);
    err[0] = 0;
    cr_assert_eq(kvt_replay_run(&c, rep, err, sizeof err), -1);
    cr_assert(strstr(err, "--mem-overcommit"), "%s", err);
    cr_assert_eq(kvt_replay_mem_refusals(), before + 2);
    kvt_replay_report_clear(rep);
    free(rep);
}

Test(replay_mem, a_run_within_the_limit_and_an_overridden_one_start)
{
    kvt_replay_cfg_t c;
    s_cfg(&c, 8); //  8 x 528 MiB fits 6 GiB
    char err[512] = "";
    cr_assert_eq(kvt_replay_mem_check(&c, err, sizeof err), 0, "%s", err);
    s_cfg(&c, 64);
    c.mem_overcommit = true;
    uint64_t before = kvt_replay_mem_refusals();
    cr_assert_eq(kvt_replay_mem_check(&c, err, sizeof err), 0);
    cr_assert_eq(kvt_replay_mem_refusals(), before + 1, "an override is still counted");
}
