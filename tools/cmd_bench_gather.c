/*  kvtier bench gather — throughput of the device layer's gather (blocks ->
    contiguous chunk buffer) and scatter (back), each against a baseline
    measured in the same run on the same bytes.

    * Geometry: `planes` planes x `layers` layers; a block is 16, 64 or 256
      KiB across all of them (so one (plane, layer) segment is block /
      (planes x layers) bytes); 16 blocks per chunk. The block pool is much
      bigger than the last-level cache (default 1 GiB) and every chunk's
      block list is drawn at random across it (distinct ids).
    * Destinations: a ring of pinned chunk buffers (default 512 MiB), so
      neither side stays cache-resident; the baseline writes the same ring.
    * Baseline: host backend: one plain memcpy of the chunk's bytes between
      a random contiguous run of the pool and the ring, in the same
      direction as the op (pool -> chunk for gather, chunk -> pool for
      scatter); the targets are ratios to it. Host backend, second
      baseline: a plain memcpy per segment over the same block lists and
      chunk layout (the same bytes in the same access pattern), which shows
      what the copy loop adds over the naive loop. HIP / CUDA: one
      contiguous device <-> pinned copy of the same bytes through the same
      stream (a state unit of chunk size).
    * Every byte of the pool and the ring is written once before anything
      is timed: the device's memory is committed lazily, and a page fault
      must not count against either side.
    * Each measurement runs for --round-ms (ops kept --inflight deep on the
      stream, then drained). After a warm-up, --rounds rounds run the op and
      its baselines back to back (rotating which goes first), so drifts of
      the machine's memory bandwidth hit all of them; reported are the
      medians of each series and the median of the per-round ratios. One
      chunk is verified byte for byte (round trip, and against the planes
      directly on the host backend) before anything is timed.
*/
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd_bench_gather.h"
#include "kvt_cli.h"
#include "kvt_cmd.h"
#include "kvtier/kvt_gpu.h"

#define S_NSIZES   3    //  block sizes measured
#define S_TARGET   0.85 //  ratio target for blocks >= 64 KiB (host backend)
#define S_TARGET16 0.70 //  ratio target for 16 KiB blocks (host backend)

static const unsigned s_sizes_kib[S_NSIZES] = {16, 64, 256};

static void s_usage(FILE *out)
{
    fprintf(out, "usage: kvtier bench gather [options]\n"
                 "  --json PATH          write the results as JSON\n"
                 "  --backend B          auto | host | hip | cuda (default auto)\n"
                 "  --planes N           KV planes (default 2)\n"
                 "  --layers N           layers per plane (default 4)\n"
                 "  --blocks N           blocks per chunk (default 16)\n"
                 "  --pool SIZE          block pool per size (default 1GiB)\n"
                 "  --ring SIZE          chunk buffers written in turn (default 512MiB)\n"
                 "  --rounds N           measured rounds (op and baselines) (default 25)\n"
                 "  --round-ms MS        length of one measurement (default 40)\n"
                 "  --inflight N         ops queued ahead on the stream (default 8)\n"
                 "  --seed S             seed of the block lists (default 1)\n"
                 "  --quiet              no table\n"
                 "Block sizes are 16, 64 and 256 KiB across all planes and layers; the\n"
                 "top-level JSON ratios are for 64 KiB blocks.\n");
}

//  Parses argv into `o`. 0, 1 for --help, or 2 after naming the bad flag.
static int s_parse(int argc, char **argv, kvt_bgather_opts_t *o)
{
    *o = (kvt_bgather_opts_t){
        NULL, KVT_GPU_BACKEND_AUTO, 2, 4, 16, 1ull << 30, 512ull << 20, 25, 40, 8, 1, false};
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (strcmp(f, "--help") == 0 || strcmp(f, "-h") == 0)
            return 1;
        if (strcmp(f, "--quiet") == 0) {
            o->quiet = true;
            continue;
        }
        static const char *const with_value[] = {
            "--json", "--backend", "--planes",   "--layers",   "--blocks", "--pool",
            "--ring", "--rounds",  "--round-ms", "--inflight", "--seed",
        };
        bool known = false;
        for (size_t k = 0; k < sizeof with_value / sizeof with_value[0] && !known; k++)
            known = strcmp(f, with_value[k]) == 0;
        if (!known) {
            fprintf(stderr, "kvtier bench gather: unknown flag '%s'\n", f);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "kvtier bench gather: %s needs a value\n", f);
            return 2;
        }
        const char *v = argv[++i];
        uint64_t x = 0;
        int bad = 0;
        if (strcmp(f, "--json") == 0)
            o->json = v;
        else if (strcmp(f, "--backend") == 0) {
            if (strcmp(v, "auto") == 0)
                o->backend = KVT_GPU_BACKEND_AUTO;
            else if (strcmp(v, "host") == 0)
                o->backend = KVT_GPU_BACKEND_HOST;
            else if (strcmp(v, "hip") == 0)
                o->backend = KVT_GPU_BACKEND_HIP;
            else if (strcmp(v, "cuda") == 0)
                o->backend = KVT_GPU_BACKEND_CUDA;
            else
                bad = 1;
        } else if (strcmp(f, "--planes") == 0)
            bad = kvt_cli_uint(v, 1, 16, &x) || ((o->planes = (uint32_t)x), 0);
        else if (strcmp(f, "--layers") == 0)
            bad = kvt_cli_uint(v, 1, 1024, &x) || ((o->layers = (uint32_t)x), 0);
        else if (strcmp(f, "--blocks") == 0)
            bad = kvt_cli_uint(v, 1, 4096, &x) || ((o->blocks = (uint32_t)x), 0);
        else if (strcmp(f, "--pool") == 0)
            bad = kvt_cli_size(v, &o->pool_bytes) || o->pool_bytes < (1u << 20);
        else if (strcmp(f, "--ring") == 0)
            bad = kvt_cli_size(v, &o->ring_bytes) || o->ring_bytes < (1u << 20);
        else if (strcmp(f, "--rounds") == 0)
            bad = kvt_cli_uint(v, 1, 1000, &x) || ((o->rounds = (uint32_t)x), 0);
        else if (strcmp(f, "--round-ms") == 0)
            bad = kvt_cli_uint(v, 1, 600000, &x) || ((o->round_ms = (uint32_t)x), 0);
        else if (strcmp(f, "--inflight") == 0)
            bad = kvt_cli_uint(v, 1, 256, &x) || ((o->inflight = (uint32_t)x), 0);
        else if (strcmp(f, "--seed") == 0)
            bad = kvt_cli_uint(v, 1, UINT64_MAX, &o->seed);
        else {
            fprintf(stderr, "kvtier bench gather: unknown flag '%s'\n", f);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "kvtier bench gather: bad value '%s' for %s\n", v, f);
            return 2;
        }
    }
    for (int s = 0; s < S_NSIZES; s++) {
        size_t block = (size_t)s_sizes_kib[s] << 10;
        if (block % ((size_t)o->planes * o->layers) != 0) {
            fprintf(stderr,
                    "kvtier bench gather: --planes %u x --layers %u does not divide a %u KiB "
                    "block\n",
                    o->planes, o->layers, s_sizes_kib[s]);
            return 2;
        }
        if (o->pool_bytes / block < (uint64_t)o->blocks * 2) {
            fprintf(stderr,
                    "kvtier bench gather: --pool holds fewer than 2 chunks of %u KiB "
                    "blocks\n",
                    s_sizes_kib[s]);
            return 2;
        }
    }
    return 0;
}

//  Queues one op of `kind` for list / ring slot i.
static unsigned long long s_mem_kib(void)
{
    unsigned long long kib = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return 0;
    char line[256];
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemTotal: %llu kB", &kib) == 1)
            break;
    fclose(f);
    return kib;
}

//  Whether every target holds: >= S_TARGET from 64 KiB blocks up, >=
//  S_TARGET16 at 16 KiB (gather and scatter, host backend).
static bool s_met(const kvt_bgather_result_t *res)
{
    bool met = true;
    for (int s = 0; s < S_NSIZES; s++) {
        double t = res[s].block_kib >= 64 ? S_TARGET : S_TARGET16;
        met &= res[s].gather_ratio >= t && res[s].scatter_ratio >= t;
    }
    return met;
}

//  Writes `s` as a JSON string (quotes, backslashes, control bytes escaped).
static void s_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

static int s_write_json(const char *path, const kvt_bgather_opts_t *o,
                        const kvt_bgather_result_t *res, const char *describe,
                        kvt_gpu_backend_t backend, const double load[2])
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "kvtier bench gather: cannot write --json %s: %s\n", path, strerror(errno));
        return -1;
    }
    bool host = backend == KVT_GPU_BACKEND_HOST;
    char cpu[256];
    kvt_cli_cpu_model(cpu, sizeof cpu);
    const kvt_bgather_result_t *mid = &res[1]; //  64 KiB
    bool met = s_met(res);
    fprintf(f, "{\n  \"benchmark\": \"gather\",\n  \"backend\": \"%s\",\n  \"describe\": ",
            kvt_gpu_backend_name(backend));
    s_json_str(f, describe);
    fprintf(f, ",\n  \"machine\": {\"nproc\": %ld, \"cpu\": ", sysconf(_SC_NPROCESSORS_ONLN));
    s_json_str(f, cpu);
    fprintf(f,
            ", \"mem_total_kib\": %llu, \"load_avg_1min_start\": %.2f, "
            "\"load_avg_1min_end\": %.2f},\n",
            s_mem_kib(), load[0], load[1]);
    fprintf(f,
            "  \"geometry\": {\"planes\": %u, \"layers\": %u, \"blocks_per_chunk\": %u, "
            "\"pool_bytes\": %llu, \"ring_bytes\": %llu},\n",
            o->planes, o->layers, o->blocks, (unsigned long long)o->pool_bytes,
            (unsigned long long)o->ring_bytes);
    fprintf(f,
            "  \"method\": {\"rounds\": %u, \"round_ms\": %u, \"inflight\": %u, \"seed\": %llu, "
            "\"statistic\": \"median; ratio = median of per-round ratios\"},\n",
            o->rounds, o->round_ms, o->inflight, (unsigned long long)o->seed);
    fprintf(f, "  \"baseline\": \"%s\",\n",
            host ? "memcpy of the same bytes, contiguous, same direction"
                 : "one contiguous device<->pinned copy of the same bytes, same stream");
    if (host)
        fprintf(f, "  \"baseline_segments\": \"memcpy per segment, same block lists, chunk "
                   "layout and direction\",\n");
    fprintf(f,
            "  \"gather_GBps\": %.3f,\n  \"scatter_GBps\": %.3f,\n  \"memcpy_GBps\": %.3f,\n"
            "  \"memcpy_to_pool_GBps\": %.3f,\n  \"gather_ratio\": %.3f,\n"
            "  \"scatter_ratio\": %.3f,\n  \"gather_vs_segments\": %.3f,\n"
            "  \"scatter_vs_segments\": %.3f,\n  \"target_ratio\": %.2f,\n"
            "  \"target_ratio_16KiB\": %.2f,\n  \"target_met\": %s,\n",
            mid->gather, mid->scatter, mid->base_chunk, mid->base_pool, mid->gather_ratio,
            mid->scatter_ratio, mid->gather_seg, mid->scatter_seg, S_TARGET, S_TARGET16,
            met ? "true" : "false");
    fprintf(f, "  \"sizes\": [\n");
    for (int s = 0; s < S_NSIZES; s++) {
        const kvt_bgather_result_t *r = &res[s];
        fprintf(f,
                "    {\"block_KiB\": %u, \"segment_bytes\": %zu, \"chunk_bytes\": %zu, "
                "\"num_blocks\": %u, \"gather_GBps\": %.3f, \"scatter_GBps\": %.3f, "
                "\"memcpy_GBps\": %.3f, \"memcpy_to_pool_GBps\": %.3f, "
                "\"memcpy_segments_GBps\": %.3f, \"memcpy_segments_to_pool_GBps\": %.3f, "
                "\"gather_ratio\": %.3f, \"scatter_ratio\": %.3f, \"gather_vs_segments\": %.3f, "
                "\"scatter_vs_segments\": %.3f, \"target_ratio\": %.2f, \"verified\": %s}%s\n",
                r->block_kib, r->seg_bytes, r->chunk_bytes, r->num_blocks, r->gather, r->scatter,
                r->base_chunk, r->base_pool, r->seg_chunk, r->seg_pool, r->gather_ratio,
                r->scatter_ratio, r->gather_seg, r->scatter_seg,
                r->block_kib >= 64 ? S_TARGET : S_TARGET16, r->verified ? "true" : "false",
                s + 1 < S_NSIZES ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    if (fclose(f) != 0) {
        fprintf(stderr, "kvtier bench gather: writing %s failed\n", path);
        return -1;
    }
    return 0;
}

int kvt_cmd_bench_gather(int argc, char **argv)
{
    kvt_bgather_opts_t o;
    int rc = s_parse(argc, argv, &o);
    if (rc == 1) {
        s_usage(stdout);
        return 0;
    }
    if (rc != 0) {
        s_usage(stderr);
        return 2;
    }
    kvt_bgather_result_t res[S_NSIZES];
    char describe[512] = "";
    kvt_gpu_backend_t backend = KVT_GPU_BACKEND_HOST;
    double load[2] = {kvt_cli_loadavg(), -1};
    for (int s = 0; s < S_NSIZES; s++) {
        memset(&res[s], 0, sizeof res[s]);
        res[s].block_kib = s_sizes_kib[s];
        if (kvt_bgather_measure(&o, &res[s], describe, sizeof describe, &backend) != 0)
            return 1;
    }
    load[1] = kvt_cli_loadavg();
    if (!o.quiet) {
        char cpu[256];
        kvt_cli_cpu_model(cpu, sizeof cpu);
        printf("kvtier bench gather: %s\n", describe);
        printf("cpu: %s, %ld online; load average (1 min) %.2f at start, %.2f at end\n", cpu,
               sysconf(_SC_NPROCESSORS_ONLN), load[0], load[1]);
        printf("%u planes x %u layers, %u blocks per chunk, pool %llu MiB, median of %u rounds of "
               "%u ms runs\n",
               o.planes, o.layers, o.blocks, (unsigned long long)(o.pool_bytes >> 20), o.rounds,
               o.round_ms);
        printf("baseline: %s\n", backend == KVT_GPU_BACKEND_HOST
                                     ? "memcpy of the same bytes (contiguous, same direction)"
                                     : "one contiguous device<->pinned copy of the same bytes");
        if (backend == KVT_GPU_BACKEND_HOST)
            printf("second baseline: memcpy per segment (same block lists, layout, direction)\n");
        printf("%-8s %-9s %12s %12s %12s %12s %7s %7s %8s %8s %6s\n", "block", "segment",
               "gather GB/s", "base GB/s", "scatter GB/s", "base GB/s", "gather", "scatter",
               "g/segs", "s/segs", "target");
        for (int s = 0; s < S_NSIZES; s++) {
            const kvt_bgather_result_t *r = &res[s];
            printf("%3u KiB  %6zu B  %12.2f %12.2f %12.2f %12.2f %7.2f %7.2f %8.2f %8.2f %6.2f\n",
                   r->block_kib, r->seg_bytes, r->gather, r->base_chunk, r->scatter, r->base_pool,
                   r->gather_ratio, r->scatter_ratio, r->gather_seg, r->scatter_seg,
                   r->block_kib >= 64 ? S_TARGET : S_TARGET16);
        }
        if (backend == KVT_GPU_BACKEND_HOST)
            printf("targets (gather and scatter >= %.2f x memcpy from 64 KiB blocks, >= %.2f at "
                   "16 KiB): %s\n",
                   S_TARGET, S_TARGET16, s_met(res) ? "met" : "NOT met");
    }
    if (o.json && s_write_json(o.json, &o, res, describe, backend, load) != 0)
        return 1;
    return 0;
}
