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

#include "kvt_cli.h"
#include "kvt_cmd.h"
#include "kvtier/kvt_gpu.h"

#define S_NSIZES   3    //  block sizes measured
#define S_NLISTS   1024 //  precomputed block lists / baseline offsets
#define S_MAX_RING 4096 //  chunk buffers in the ring
#define S_TARGET   0.85 //  ratio target for blocks >= 64 KiB (host backend)
#define S_TARGET16 0.70 //  ratio target for 16 KiB blocks (host backend)
#define S_NV       10   //  series per round: 6 kinds' GB/s, then 4 ratios

static const unsigned s_sizes_kib[S_NSIZES] = {16, 64, 256};

typedef struct {
    const char *json;          //  --json PATH, or NULL
    kvt_gpu_backend_t backend; //  --backend
    uint32_t planes;           //  --planes
    uint32_t layers;           //  --layers
    uint32_t blocks;           //  --blocks (per chunk)
    uint64_t pool_bytes;       //  --pool
    uint64_t ring_bytes;       //  --ring
    uint32_t rounds;           //  --rounds
    uint32_t round_ms;         //  --round-ms
    uint32_t inflight;         //  --inflight
    uint64_t seed;             //  --seed
    bool quiet;                //  --quiet: no table
} s_opts_t;

typedef struct {
    unsigned block_kib;   //  block size across planes and layers
    size_t seg_bytes;     //  bytes of one (plane, layer) segment
    size_t chunk_bytes;   //  bytes of one chunk
    uint32_t num_blocks;  //  blocks in the pool
    double gather;        //  GB/s, median
    double scatter;       //  GB/s, median
    double base_chunk;    //  baseline pool -> chunk GB/s, median
    double base_pool;     //  baseline chunk -> pool GB/s, median
    double seg_chunk;     //  host: per-segment memcpy, gather direction, GB/s, median
    double seg_pool;      //  host: per-segment memcpy, scatter direction, GB/s, median
    double gather_ratio;  //  median over rounds of gather / baseline
    double scatter_ratio; //  median over rounds of scatter / baseline
    double gather_seg;    //  host: median over rounds of gather / per-segment memcpy
    double scatter_seg;   //  host: median over rounds of scatter / per-segment memcpy
    bool verified;        //  the byte check passed
} s_result_t;

typedef enum {
    S_GATHER = 0,     //  kvt_gpu_gather
    S_SCATTER = 1,    //  kvt_gpu_scatter
    S_BASE_CHUNK = 2, //  baseline in the gather direction
    S_BASE_POOL = 3,  //  baseline in the scatter direction
    S_SEG_CHUNK = 4,  //  host: memcpy per segment, gather direction
    S_SEG_POOL = 5,   //  host: memcpy per segment, scatter direction
} s_kind_t;

//  One size's run.
typedef struct {
    const s_opts_t *o;            //  options
    kvt_gpu_t *gpu;               //  the device
    kvt_gpu_stream_t *stream;     //  the stream every op goes on
    kvt_gpu_event_pool_t *events; //  events for the in-flight window
    bool host;                    //  host backend: memcpy baseline
    s_result_t *r;                //  sizes and results
    uint8_t *ring[S_MAX_RING];    //  pinned chunk buffers
    uint32_t nring;               //  buffers in the ring
    uint32_t *lists;              //  S_NLISTS block lists of o->blocks ids
    uint8_t *base_at[S_NLISTS];   //  host: random contiguous pool runs
    uint8_t **layer0;             //  host: block 0 of each (plane, layer), plane-major
    uint64_t rng;                 //  xorshift state
} s_ctx_t;

//  Copies `src` into out[len], truncating.
static void s_copy_str(char *out, size_t len, const char *src)
{
    size_t n = strlen(src);
    if (n >= len)
        n = len - 1;
    memcpy(out, src, n);
    out[n] = 0;
}

static uint64_t s_rand(s_ctx_t *c)
{
    c->rng ^= c->rng << 13;
    c->rng ^= c->rng >> 7;
    c->rng ^= c->rng << 17;
    return c->rng;
}

//  The device's log: warnings and errors only (the table names the backend).
static void s_log(void *arg, int level, const char *line)
{
    (void)arg;
    if (level <= 1)
        fprintf(stderr, "kvt_gpu: %s\n", line);
}

//  A memcpy per segment of list i in the chunk layout (same pattern as
//  the op), on the calling thread.
static void s_seg_copy(s_ctx_t *c, uint64_t i, bool to_chunk)
{
    const uint32_t *list = c->lists + (size_t)(i % S_NLISTS) * c->o->blocks;
    uint8_t *buf = c->ring[i % c->nring];
    uint32_t n = c->o->blocks;
    size_t seg = c->r->seg_bytes;
    for (uint32_t p = 0; p < c->o->planes; p++)
        for (uint32_t l = 0; l < c->o->layers; l++) {
            uint8_t *base = c->layer0[p * c->o->layers + l];
            uint8_t *chunk = buf + ((size_t)p * c->o->layers + l) * n * seg;
            for (uint32_t b = 0; b < n; b++) {
                uint8_t *dev = base + (size_t)list[b] * seg;
                if (to_chunk)
                    memcpy(chunk + (size_t)b * seg, dev, seg);
                else
                    memcpy(dev, chunk + (size_t)b * seg, seg);
            }
        }
}

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
static int s_parse(int argc, char **argv, s_opts_t *o)
{
    *o = (s_opts_t){NULL, KVT_GPU_BACKEND_AUTO, 2, 4, 16, 1ull << 30, 512ull << 20, 25, 40, 8, 1,
                    false};
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
static int s_issue(s_ctx_t *c, s_kind_t kind, uint64_t i)
{
    const uint32_t *list = c->lists + (size_t)(i % S_NLISTS) * c->o->blocks;
    uint8_t *buf = c->ring[i % c->nring];
    size_t len = c->r->chunk_bytes;
    switch (kind) {
    case S_GATHER:
        return kvt_gpu_gather(c->stream, list, c->o->blocks, buf, len);
    case S_SCATTER:
        return kvt_gpu_scatter(c->stream, list, c->o->blocks, buf, len);
    case S_BASE_CHUNK:
        return kvt_gpu_state_to_host(c->stream, KVT_GPU_STATE_SLOTS, (uint32_t)(i % 4), buf, len);
    case S_BASE_POOL:
        return kvt_gpu_state_from_host(c->stream, KVT_GPU_STATE_SLOTS, (uint32_t)(i % 4), buf, len);
    case S_SEG_CHUNK:
    case S_SEG_POOL:
        break; //  run on the calling thread (s_round)
    }
    return -1;
}

//  One measured round: GB/s, or a negative value on a device error.
static double s_round(s_ctx_t *c, s_kind_t kind)
{
    const double min_s = c->o->round_ms / 1000.0;
    const size_t len = c->r->chunk_bytes;
    uint64_t ops = 0;
    double t0 = kvt_cli_now(), t1 = t0;
    if (kind == S_SEG_CHUNK || kind == S_SEG_POOL) {
        do {
            s_seg_copy(c, ops++, kind == S_SEG_CHUNK);
        } while (ops % 8 != 0 || ops < 16 || (t1 = kvt_cli_now()) - t0 < min_s);
        return (double)ops * (double)len / (t1 - t0) / 1e9;
    }
    if (c->host && (kind == S_BASE_CHUNK || kind == S_BASE_POOL)) {
        while (true) {
            uint8_t *pool = c->base_at[ops % S_NLISTS];
            uint8_t *buf = c->ring[ops % c->nring];
            if (kind == S_BASE_CHUNK)
                memcpy(buf, pool, len);
            else
                memcpy(pool, buf, len);
            ops++;
            if (ops % 8 == 0 && ops >= 16 && (t1 = kvt_cli_now()) - t0 >= min_s)
                break;
        }
        return (double)ops * (double)len / (t1 - t0) / 1e9;
    }
    uint32_t k = c->o->inflight;
    kvt_gpu_event_t *window[256] = {0};
    int rc = 0;
    while (rc >= 0) {
        kvt_gpu_event_t **slot = &window[ops % k];
        if (*slot) {
            rc = kvt_gpu_event_synchronize(*slot);
            kvt_gpu_event_pool_put(c->events, slot);
            if (rc < 0)
                break;
        }
        rc = s_issue(c, kind, ops);
        if (rc < 0)
            break;
        *slot = kvt_gpu_event_pool_get(c->events);
        rc = *slot ? kvt_gpu_event_record(*slot, c->stream) : -1;
        ops++;
        if (ops % k == 0 && ops >= 16 && kvt_cli_now() - t0 >= min_s)
            break;
    }
    int drain = kvt_gpu_stream_synchronize(c->stream);
    t1 = kvt_cli_now();
    for (uint32_t j = 0; j < k; j++)
        kvt_gpu_event_pool_put(c->events, &window[j]);
    if (rc < 0 || drain < 0) {
        fprintf(stderr, "kvtier bench gather: device op failed: %s\n", kvt_gpu_last_error());
        return -1;
    }
    return (double)ops * (double)len / (t1 - t0) / 1e9;
}

//  Scatters a pattern through one list, gathers it back and compares (and,
//  on the host backend, checks every segment in the planes directly).
static bool s_verify(s_ctx_t *c)
{
    const uint32_t *list = c->lists;
    uint32_t n = c->o->blocks;
    size_t len = c->r->chunk_bytes;
    uint8_t *a = c->ring[0], *b = c->ring[1];
    for (size_t k = 0; k < len; k++)
        a[k] = (uint8_t)(k * 131 + k / 4093 + 7);
    memset(b, 0, len);
    if (kvt_gpu_scatter(c->stream, list, n, a, len) != 0 ||
        kvt_gpu_gather(c->stream, list, n, b, len) != 0 ||
        kvt_gpu_stream_synchronize(c->stream) < 0)
        return false;
    if (memcmp(a, b, len) != 0)
        return false;
    if (!c->host)
        return true;
    for (uint32_t p = 0; p < c->o->planes; p++)
        for (uint32_t l = 0; l < c->o->layers; l++)
            for (uint32_t i = 0; i < n; i++) {
                const uint8_t *dev = kvt_gpu_plane_ptr(c->gpu, p, l, list[i]);
                size_t off = kvt_gpu_chunk_offset(c->gpu, p, l, n, i);
                if (!dev || off == SIZE_MAX || memcmp(dev, a + off, c->r->seg_bytes) != 0)
                    return false;
            }
    return true;
}

//  Draws S_NLISTS lists of distinct random block ids and, for the host
//  baseline, as many random contiguous chunk-sized runs of the pool.
static int s_draw(s_ctx_t *c)
{
    uint32_t n = c->o->blocks, nb = c->r->num_blocks;
    c->lists = malloc((size_t)S_NLISTS * n * sizeof *c->lists);
    if (!c->lists)
        return -1;
    for (uint32_t j = 0; j < S_NLISTS; j++) {
        uint32_t *list = c->lists + (size_t)j * n;
        for (uint32_t i = 0; i < n; i++) {
            bool dup;
            do {
                list[i] = (uint32_t)(s_rand(c) % nb);
                dup = false;
                for (uint32_t q = 0; q < i && !dup; q++)
                    dup = list[q] == list[i];
            } while (dup);
        }
        if (c->host) {
            //  A run of chunk_bytes inside one (plane, layer) region.
            uint32_t run = (uint32_t)(c->r->chunk_bytes / c->r->seg_bytes);
            uint32_t p = (uint32_t)(s_rand(c) % c->o->planes);
            uint32_t l = (uint32_t)(s_rand(c) % c->o->layers);
            uint32_t first = run >= nb ? 0 : (uint32_t)(s_rand(c) % (nb - run + 1));
            c->base_at[j] = kvt_gpu_plane_ptr(c->gpu, p, l, first);
            if (run > nb)
                return -1;
        }
    }
    return 0;
}

//  Writes every byte of the pool (host) and of the ring once, so that no
//  page fault is timed; records each (plane, layer)'s block 0 (host).
static int s_touch(s_ctx_t *c)
{
    for (uint32_t i = 0; i < c->nring; i++)
        memset(c->ring[i], 0x3c, c->r->chunk_bytes);
    if (!c->host)
        return 0;
    uint32_t pl = c->o->planes * c->o->layers;
    c->layer0 = calloc(pl, sizeof *c->layer0);
    if (!c->layer0)
        return -1;
    for (uint32_t p = 0; p < c->o->planes; p++)
        for (uint32_t l = 0; l < c->o->layers; l++) {
            uint8_t *b0 = kvt_gpu_plane_ptr(c->gpu, p, l, 0);
            if (!b0)
                return -1;
            c->layer0[p * c->o->layers + l] = b0;
            memset(b0, (int)(p * 16 + l + 1), (size_t)c->r->num_blocks * c->r->seg_bytes);
        }
    return 0;
}

static void s_ctx_free(s_ctx_t *c)
{
    free(c->layer0);
    for (uint32_t i = 0; i < c->nring; i++)
        kvt_gpu_host_free(c->gpu, c->ring[i]);
    free(c->lists);
    kvt_gpu_event_pool_destroy(&c->events);
    kvt_gpu_stream_destroy(&c->stream);
    kvt_gpu_destroy(&c->gpu);
}

//  Measures one block size into `r`. 0, or 1 on a failure (reported).
static int s_measure(const s_opts_t *o, s_result_t *r, char *describe, size_t describe_len,
                     kvt_gpu_backend_t *backend)
{
    s_ctx_t c;
    memset(&c, 0, sizeof c);
    c.o = o;
    c.r = r;
    c.rng = o->seed * 0x9E3779B97F4A7C15ull + r->block_kib;
    int rc = 1;
    double *v[S_NV] = {0}; //  per round: 6 kinds' GB/s, then the 4 ratios
    kvt_gpu_opts_t go = {0};
    go.backend = o->backend;
    go.log = s_log;
    c.gpu = kvt_gpu_new(&go);
    if (!c.gpu) {
        fprintf(stderr, "kvtier bench gather: cannot open the device: %s\n", kvt_gpu_last_error());
        return 1;
    }
    s_copy_str(describe, describe_len, kvt_gpu_describe(c.gpu));
    *backend = kvt_gpu_backend(c.gpu);
    c.host = *backend == KVT_GPU_BACKEND_HOST;
    size_t block = (size_t)r->block_kib << 10;
    r->seg_bytes = block / ((size_t)o->planes * o->layers);
    r->chunk_bytes = block * o->blocks;
    r->num_blocks = (uint32_t)(o->pool_bytes / block);
    for (uint32_t p = 0; p < o->planes; p++) {
        kvt_gpu_plane_desc_t d = {NULL, o->layers, r->num_blocks, r->seg_bytes, NULL};
        if (kvt_gpu_plane_add(c.gpu, &d) < 0) {
            fprintf(stderr, "kvtier bench gather: plane: %s\n", kvt_gpu_last_error());
            goto cleanup;
        }
    }
    if (!c.host) {
        kvt_gpu_state_desc_t units = {4, r->chunk_bytes, NULL};
        if (kvt_gpu_state_add(c.gpu, KVT_GPU_STATE_SLOTS, &units) != 0) {
            fprintf(stderr, "kvtier bench gather: baseline units: %s\n", kvt_gpu_last_error());
            goto cleanup;
        }
    }
    uint64_t nring = o->ring_bytes / r->chunk_bytes;
    if (nring > S_MAX_RING)
        nring = S_MAX_RING;
    if (nring < (uint64_t)o->inflight + 2)
        nring = o->inflight + 2;
    for (c.nring = 0; c.nring < nring; c.nring++) {
        c.ring[c.nring] = kvt_gpu_host_alloc(c.gpu, r->chunk_bytes);
        if (!c.ring[c.nring]) {
            fprintf(stderr, "kvtier bench gather: ring: %s\n", kvt_gpu_last_error());
            goto cleanup;
        }
    }
    c.stream = kvt_gpu_stream_new(c.gpu, "bench");
    c.events = kvt_gpu_event_pool_new(c.gpu);
    if (!c.stream || !c.events || s_draw(&c) != 0 || s_touch(&c) != 0) {
        fprintf(stderr, "kvtier bench gather: setup failed: %s\n", kvt_gpu_last_error());
        goto cleanup;
    }
    for (int k = 0; k < S_NV; k++) {
        v[k] = calloc(o->rounds, sizeof(double));
        if (!v[k])
            goto cleanup;
    }
    r->verified = s_verify(&c);
    if (!r->verified) {
        fprintf(stderr, "kvtier bench gather: %u KiB blocks: the byte check failed\n",
                r->block_kib);
        goto cleanup;
    }
    int nkinds = c.host ? 6 : 4;
    for (int kind = 0; kind < nkinds; kind++)
        if (s_round(&c, (s_kind_t)kind) < 0) //  warm-up
            goto cleanup;
    //  Rounds: the op and its baselines back to back (rotating which goes
    //  first), so drifts in the machine's memory bandwidth hit all of them.
    for (uint32_t i = 0; i < o->rounds; i++)
        for (int dir = 0; dir < 2; dir++) {
            s_kind_t kinds[3] = {dir == 0 ? S_GATHER : S_SCATTER,
                                 dir == 0 ? S_BASE_CHUNK : S_BASE_POOL,
                                 dir == 0 ? S_SEG_CHUNK : S_SEG_POOL};
            int nk = c.host ? 3 : 2;
            for (int j = 0; j < nk; j++) {
                s_kind_t kind = kinds[(i + (uint32_t)j) % (uint32_t)nk];
                v[kind][i] = s_round(&c, kind);
                if (v[kind][i] < 0)
                    goto cleanup;
            }
            v[6 + dir][i] = v[kinds[0]][i] / v[kinds[1]][i];
            v[8 + dir][i] = c.host ? v[kinds[0]][i] / v[kinds[2]][i] : 0;
        }
    r->gather = kvt_cli_median(v[S_GATHER], o->rounds);
    r->scatter = kvt_cli_median(v[S_SCATTER], o->rounds);
    r->base_chunk = kvt_cli_median(v[S_BASE_CHUNK], o->rounds);
    r->base_pool = kvt_cli_median(v[S_BASE_POOL], o->rounds);
    r->seg_chunk = kvt_cli_median(v[S_SEG_CHUNK], o->rounds);
    r->seg_pool = kvt_cli_median(v[S_SEG_POOL], o->rounds);
    r->gather_ratio = kvt_cli_median(v[6], o->rounds);
    r->scatter_ratio = kvt_cli_median(v[7], o->rounds);
    r->gather_seg = kvt_cli_median(v[8], o->rounds);
    r->scatter_seg = kvt_cli_median(v[9], o->rounds);
    rc = 0;

cleanup:
    for (int k = 0; k < S_NV; k++)
        free(v[k]);
    s_ctx_free(&c);
    return rc;
}

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
static bool s_met(const s_result_t *res)
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

static int s_write_json(const char *path, const s_opts_t *o, const s_result_t *res,
                        const char *describe, kvt_gpu_backend_t backend, const double load[2])
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "kvtier bench gather: cannot write --json %s: %s\n", path, strerror(errno));
        return -1;
    }
    bool host = backend == KVT_GPU_BACKEND_HOST;
    char cpu[256];
    kvt_cli_cpu_model(cpu, sizeof cpu);
    const s_result_t *mid = &res[1]; //  64 KiB
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
        const s_result_t *r = &res[s];
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
    s_opts_t o;
    int rc = s_parse(argc, argv, &o);
    if (rc == 1) {
        s_usage(stdout);
        return 0;
    }
    if (rc != 0) {
        s_usage(stderr);
        return 2;
    }
    s_result_t res[S_NSIZES];
    char describe[512] = "";
    kvt_gpu_backend_t backend = KVT_GPU_BACKEND_HOST;
    double load[2] = {kvt_cli_loadavg(), -1};
    for (int s = 0; s < S_NSIZES; s++) {
        memset(&res[s], 0, sizeof res[s]);
        res[s].block_kib = s_sizes_kib[s];
        if (s_measure(&o, &res[s], describe, sizeof describe, &backend) != 0)
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
            const s_result_t *r = &res[s];
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
