/*  kvt_gpu_copy.c — copy batches: the segments of one op (built by the
    front in the chunk layout, merged where both ends continue) and the host
    backend's copy loop. The device backend queues them in kvt_gpu_devrt.c.
*/
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "kvt_gpu_int.h"

kvt_gpu_copy_t *kvt_gpu_copy_alloc_extra(kvt_gpu_dir_t dir, uint32_t count, size_t extra,
                                         void **extra_p)
{
    size_t bytes =
        sizeof(kvt_gpu_copy_t) + (size_t)count * (2 * sizeof(void *) + sizeof(size_t)) + extra;
    kvt_gpu_copy_t *copy = malloc(bytes);
    if (!copy)
        return NULL;
    copy->dir = dir;
    copy->count = 0;
    copy->bytes = 0;
    copy->dst = (void **)(copy + 1);
    copy->src = (const void **)(copy->dst + count);
    copy->len = (size_t *)(copy->src + count);
    copy->job = NULL;
    copy->mapped = false;
    copy->njobs = 0;
    copy->nblocks = 0;
    if (extra_p)
        *extra_p = copy->len + count;
    return copy;
}

kvt_gpu_copy_t *kvt_gpu_copy_alloc(kvt_gpu_dir_t dir, uint32_t count)
{
    return kvt_gpu_copy_alloc_extra(dir, count, 0, NULL);
}

void kvt_gpu_copy_push(kvt_gpu_copy_t *copy, void *dst, const void *src, size_t len)
{
    uint32_t k = copy->count;
    if (k > 0 && (char *)copy->dst[k - 1] + copy->len[k - 1] == (char *)dst &&
        (const char *)copy->src[k - 1] + copy->len[k - 1] == (const char *)src) {
        copy->len[k - 1] += len;
    } else {
        copy->dst[k] = dst;
        copy->src[k] = src;
        copy->len[k] = len;
        copy->count = k + 1;
    }
    copy->bytes += len;
}

#ifdef __SSE2__
//  Copies with non-temporal (streaming) stores: the destination is written
//  without being read into the cache first. Any length and alignment: the
//  bytes before the first 16-byte boundary of dst and the last len % 64
//  go through memcpy. Needs an sfence before the bytes are published to
//  another thread.
static void s_copy_stream(char *dst, const char *src, size_t len)
{
    size_t head = (16 - ((uintptr_t)dst & 15)) & 15;
    if (head > len)
        head = len;
    memcpy(dst, src, head);
    dst += head;
    src += head;
    len -= head;
    __m128i *d = (__m128i *)(void *)dst;
    const __m128i *s = (const __m128i *)(const void *)src;
    size_t n = len / 64;
    for (size_t i = 0; i < n; i++, d += 4, s += 4) {
        __m128i a = _mm_loadu_si128(s), b = _mm_loadu_si128(s + 1);
        __m128i c = _mm_loadu_si128(s + 2), e = _mm_loadu_si128(s + 3);
        _mm_stream_si128(d, a);
        _mm_stream_si128(d + 1, b);
        _mm_stream_si128(d + 2, c);
        _mm_stream_si128(d + 3, e);
    }
    memcpy(d, s, len % 64);
}
#endif

//  Starts loading the first KVT_COPY_PREFETCH bytes of a segment (at most
//  its length) that lies at a random place (the block side), so its DRAM
//  and page-walk latency overlaps the copy of the segment before it.
static void s_prefetch_head(const char *p, size_t len, bool for_write)
{
    size_t end = len < KVT_COPY_PREFETCH ? len : KVT_COPY_PREFETCH;
    for (size_t off = 0; off < end; off += 64) {
        if (for_write)
            __builtin_prefetch(p + off, 1, 3);
        else
            __builtin_prefetch(p + off, 0, 3);
    }
}

//  True when a segment of `len` bytes of an op of `op_bytes` bytes is
//  written with streaming stores.
static bool s_streams(size_t op_bytes, size_t len)
{
    return op_bytes >= KVT_COPY_STREAM_OP && len >= KVT_COPY_STREAM_SEG;
}

void kvt_gpu_copy_run(const kvt_gpu_copy_t *copy)
{
    //  Loop shape, from measurements (docs/performance.md):
    //  * an op of KVT_COPY_STREAM_OP bytes or more does not fit the cache it
    //    would fill: its segments from KVT_COPY_STREAM_SEG bytes up are
    //    written with streaming stores (no read-for-ownership of the
    //    destination, no eviction of what the cache holds);
    //  * gather (D2H): the source side is the random one: prefetch the head
    //    of the next segment while this one is copied;
    //  * scatter (H2D): the destination is the random one: a streamed
    //    segment needs no prefetch (prefetching it for write only to stream
    //    over it costs a read); a plain one is prefetched for write.
    bool gather = copy->dir == KVT_GPU_D2H;
    bool scatter = copy->dir == KVT_GPU_H2D;
    bool streamed = false;
    for (uint32_t k = 0; k < copy->count; k++) {
        size_t len = copy->len[k];
        if (k + 1 < copy->count) {
            size_t next = copy->len[k + 1];
            if (gather)
                s_prefetch_head(copy->src[k + 1], next, false);
            else if (scatter && !s_streams(copy->bytes, next))
                s_prefetch_head(copy->dst[k + 1], next, true);
        }
#ifdef __SSE2__
        if (s_streams(copy->bytes, len)) {
            s_copy_stream(copy->dst[k], copy->src[k], len);
            streamed = true;
            continue;
        }
#endif
        memcpy(copy->dst[k], copy->src[k], len);
    }
#ifdef __SSE2__
    //  Streaming stores are weakly ordered: fence before the op completes.
    if (streamed)
        _mm_sfence();
#else
    (void)streamed;
#endif
}
