/*  cmd_bench_store_evict.c — eviction under pressure for `kvtier bench
    store`: one seeded synthetic stream of prefix lookups and puts against a
    CPU pool smaller than the stream's working set, run once in LRU order
    and once in VALUE order (docs/store.md §4), reporting the hit ratio of
    each.

    The stream: S_SYS system prompts of S_SYS_CHUNKS chunks each, chosen
    Zipf-like (s = 1); under each, S_CONV conversations, also Zipf-like,
    each adding 4..24 chunks of its own. A request is the whole chain of
    one conversation: a lookup of its chunk keys (counts the leading chunks
    present, refreshes them), then the deepest state image at a 4-chunk
    boundary inside that prefix is what it resumes from (a hybrid model
    resumes only where an image exists), then puts of the chunks past the
    resume point and of an image at every 4th chunk. A hit is a chunk of
    the resumed prefix; bytes hit add the image. The stream's draws never
    depend on what the pool holds, so both orders see the same requests. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmd_bench_store_evict.h"

#define S_SYS        32          //  system prompts
#define S_SYS_CHUNKS 8           //  chunks of a system prompt
#define S_CONV       64          //  conversations per system prompt
#define S_CONV_MAX   24          //  most chunks a conversation adds (at least 4)
#define S_EVERY      4           //  a state image at every 4th chunk
#define S_CHUNK      (16u << 10) //  chunk bytes
#define S_IMAGE      (4u << 10)  //  image bytes
#define S_POOL       (32u << 20) //  pool bytes: about 1/16 of the working set
#define S_REQUESTS   40000       //  requests in the stream
#define S_SEED       0x9e3779b97f4a7c15ull
#define S_NS         2u //  namespace of the stream's objects
#define S_MAXLEN     (S_SYS_CHUNKS + S_CONV_MAX)

static uint64_t s_next(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

//  Cumulative Zipf (s = 1) weights of n items, scaled to 1.
static void s_zipf(double *cdf, int n)
{
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += 1.0 / (i + 1);
    double acc = 0;
    for (int i = 0; i < n; i++) {
        acc += 1.0 / (i + 1) / sum;
        cdf[i] = acc;
    }
    cdf[n - 1] = 1.0;
}

static int s_pick(const double *cdf, int n, uint64_t *x)
{
    double u = (double)(s_next(x) >> 11) / 9007199254740992.0;
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (cdf[mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static uint64_t s_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

//  The prefix hash of position p of conversation c under system prompt s:
//  the system prompt's chunks are shared by all its conversations.
static kvt_hash_t s_key(int s, int c, int p)
{
    uint64_t id = p < S_SYS_CHUNKS ? ((uint64_t)s << 40) | (uint64_t)p
                                   : ((uint64_t)s << 40) | ((uint64_t)(c + 1) << 20) | (uint64_t)p;
    return (kvt_hash_t){.hi = s_mix(id), .lo = s_mix(id ^ 0x5bd1e995ull)};
}

static int s_conv_len(int s, int c)
{
    return 4 + (int)(s_mix(((uint64_t)s << 32) | (uint64_t)c) % (S_CONV_MAX - 3));
}

static int s_run(kvt_pool_evict_t evict, kvt_bevict_t *r)
{
    kvt_pool_config_t cfg;
    kvt_pool_config_defaults(&cfg);
    cfg.name = evict == KVT_POOL_EVICT_VALUE ? "bench.value" : "bench.lru";
    cfg.capacity_bytes = S_POOL;
    cfg.max_objects = S_POOL / S_IMAGE;
    cfg.evict = evict;
    char err[256];
    kvt_pool_t *pool = kvt_pool_new(&cfg, err, sizeof(err));
    static uint8_t src[S_CHUNK];
    if (!pool)
        return -1;
    double sys_cdf[S_SYS], conv_cdf[S_CONV];
    s_zipf(sys_cdf, S_SYS);
    s_zipf(conv_cdf, S_CONV);
    uint64_t x = S_SEED;
    *r = (kvt_bevict_t){0};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = 0;
    for (uint64_t q = 0; q < S_REQUESTS && rc == 0; q++) {
        int s = s_pick(sys_cdf, S_SYS, &x), c = s_pick(conv_cdf, S_CONV, &x);
        int len = S_SYS_CHUNKS + s_conv_len(s, c);
        kvt_hash_t keys[S_MAXLEN];
        for (int p = 0; p < len; p++)
            keys[p] = s_key(s, c, p);
        int n = kvt_pool_lookup(pool, S_NS, keys, (size_t)len, KVT_OBJ_KV, 0, NULL);
        if (n < 0) {
            rc = -1;
            break;
        }
        int resume = n / S_EVERY * S_EVERY;
        while (resume > 0 && !kvt_pool_contains(pool, S_NS, keys[resume - 1], KVT_OBJ_STATE))
            resume -= S_EVERY;
        if (resume > 0)
            kvt_pool_touch(pool, S_NS, keys[resume - 1], KVT_OBJ_STATE);
        r->requests++;
        r->want_chunks += (uint64_t)len;
        r->hit_chunks += (uint64_t)resume;
        r->hit_bytes += (uint64_t)resume * S_CHUNK + (resume > 0 ? S_IMAGE : 0);
        for (int p = resume; p < len && rc == 0; p++) {
            int a = kvt_pool_put(pool, S_NS, keys[p], KVT_OBJ_KV, src, S_CHUNK);
            if ((p + 1) % S_EVERY == 0 && (a == KVT_STORE_OK || a == KVT_STORE_SKIPPED))
                a = kvt_pool_put(pool, S_NS, keys[p], KVT_OBJ_STATE, src, S_IMAGE);
            if (a != KVT_STORE_OK && a != KVT_STORE_SKIPPED)
                rc = -1;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    kvt_pool_stats_t st;
    kvt_pool_stats(pool, &st);
    r->evictions = st.evictions;
    r->orphan_images = st.evicted_orphan_images;
    r->hit_ratio = r->want_chunks ? (double)r->hit_chunks / (double)r->want_chunks : 0;
    r->seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    kvt_pool_destroy(&pool);
    return rc;
}

int kvt_bench_store_evict(kvt_bevict_pair_t *out)
{
    uint64_t work = 0;
    for (int s = 0; s < S_SYS; s++) {
        work += S_SYS_CHUNKS * (uint64_t)S_CHUNK + S_SYS_CHUNKS / S_EVERY * (uint64_t)S_IMAGE;
        for (int c = 0; c < S_CONV; c++) {
            int len = S_SYS_CHUNKS + s_conv_len(s, c);
            work += (uint64_t)(len - S_SYS_CHUNKS) * S_CHUNK +
                    (uint64_t)(len / S_EVERY - S_SYS_CHUNKS / S_EVERY) * S_IMAGE;
        }
    }
    *out = (kvt_bevict_pair_t){.pool_bytes = S_POOL,
                               .work_bytes = work,
                               .chunk_bytes = S_CHUNK,
                               .image_bytes = S_IMAGE,
                               .seed = S_SEED};
    if (s_run(KVT_POOL_EVICT_LRU, &out->lru) != 0 || s_run(KVT_POOL_EVICT_VALUE, &out->value) != 0)
        return -1;
    return 0;
}
