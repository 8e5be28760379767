/*  cmd_bench_gather_runs — one block size of `kvtier bench gather`
    (cmd_bench_gather.h; what is measured and against what:
    cmd_bench_gather.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd_bench_gather.h"
#include "kvt_cli.h"
#include "kvtier/kvt_gpu.h"

#define S_NLISTS   1024 //  precomputed block lists / baseline offsets
#define S_MAX_RING 4096 //  chunk buffers in the ring
#define S_NV       10   //  series per round: 6 kinds' GB/s, then 4 ratios

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
    const kvt_bgather_opts_t *o;  //  options
    kvt_gpu_t *gpu;               //  the device
    kvt_gpu_stream_t *stream;     //  the stream every op goes on
    kvt_gpu_event_pool_t *events; //  events for the in-flight window
    bool host;                    //  host backend: memcpy baseline
    kvt_bgather_result_t *r;      //  sizes and results
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
int kvt_bgather_measure(const kvt_bgather_opts_t *o, kvt_bgather_result_t *r, char *describe,
                        size_t describe_len, kvt_gpu_backend_t *backend)
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
