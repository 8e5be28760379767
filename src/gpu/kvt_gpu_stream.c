/*  kvt_gpu_stream.c — streams, events and the ops queued on streams: the
    front validates (block ids, sizes, indices; refuses, never clamps),
    builds the copy batch in the chunk layout, counts, and hands the batch to
    the backend.

    A call that returns an error leaves nothing running that touches its
    buffers. The host backend queues an op whole or not at all; the device
    backend (kvt_gpu_devrt.c), when part of a call was queued as it failed,
    settles the stream first and marks it failed (kvt_gpu_stream_fail); the
    front then refuses every later call that queues on that stream.
*/
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvt_gpu_int.h"
#include "kvt_gpu_kernel.h"

//  Counts a refused call and returns its code (the message is already set).
static int s_refused(kvt_gpu_t *gpu, int code)
{
    pthread_mutex_lock(&gpu->mu);
    gpu->stats.refused++;
    pthread_mutex_unlock(&gpu->mu);
    return code;
}

// -------------------------------------------------------------- streams ----

kvt_gpu_stream_t *kvt_gpu_stream_new(kvt_gpu_t *gpu, const char *name)
{
    assert(gpu);
    kvt_gpu_stream_t *self = calloc(1, sizeof *self);
    if (!self) {
        kvt_gpu_fail(KVT_GPU_ENOMEM, "stream_new: out of memory");
        return NULL;
    }
    self->gpu = gpu;
    kvt_gpu_fmt(self->name, sizeof self->name, "%s", name ? name : "stream");
    if (gpu->ops->stream_new(self) != 0) {
        free(self);
        return NULL;
    }
    pthread_mutex_lock(&gpu->mu);
    self->next = gpu->streams;
    if (gpu->streams)
        gpu->streams->prev = self;
    gpu->streams = self;
    pthread_mutex_unlock(&gpu->mu);
    return self;
}

void kvt_gpu_stream_destroy(kvt_gpu_stream_t **self_p)
{
    assert(self_p);
    kvt_gpu_stream_t *self = *self_p;
    if (!self)
        return;
    kvt_gpu_t *gpu = self->gpu;
    gpu->ops->stream_destroy(self);
    pthread_mutex_lock(&gpu->mu);
    if (self->prev)
        self->prev->next = self->next;
    else
        gpu->streams = self->next;
    if (self->next)
        self->next->prev = self->prev;
    pthread_mutex_unlock(&gpu->mu);
    free(self);
    *self_p = NULL;
}

void kvt_gpu_stream_fail(kvt_gpu_stream_t *s, const char *why)
{
    kvt_gpu_t *gpu = s->gpu;
    pthread_mutex_lock(&gpu->mu);
    bool first = !s->failed;
    if (first) {
        s->failed = true;
        kvt_gpu_fmt(s->fail_why, sizeof s->fail_why, "%s", why);
    }
    pthread_mutex_unlock(&gpu->mu);
    if (first)
        kvt_gpu_log(gpu, 1, "stream '%s' failed: %s", s->name, why);
}

//  EFAULT when a device backend failed `s` part-way through a call, else 0.
static int s_check_failed(kvt_gpu_stream_t *s, const char *what)
{
    kvt_gpu_t *gpu = s->gpu;
    int rc = 0;
    pthread_mutex_lock(&gpu->mu);
    if (s->failed)
        rc = kvt_gpu_fail(KVT_GPU_EFAULT, "%s: stream '%s' failed earlier (%s)", what, s->name,
                          s->fail_why);
    pthread_mutex_unlock(&gpu->mu);
    return rc;
}

int kvt_gpu_stream_query(kvt_gpu_stream_t *self)
{
    assert(self);
    int rc = s_check_failed(self, "stream_query");
    return rc != 0 ? rc : self->gpu->ops->stream_query(self);
}

int kvt_gpu_stream_synchronize(kvt_gpu_stream_t *self)
{
    assert(self);
    //  A failed stream was settled when it failed: nothing to wait for.
    int rc = s_check_failed(self, "stream_synchronize");
    return rc != 0 ? rc : self->gpu->ops->stream_sync(self);
}

// ------------------------------------------------------------------ ops ----

//  True when [ptr, ptr + len) lies in one pinned allocation of this device.
static bool s_pinned(kvt_gpu_t *gpu, const void *ptr, size_t len)
{
    return kvt_gpu_host_pinned(gpu, ptr, len);
}

//  Freezes the geometry and counts one queued op of `bytes` into `counter`
//  before the backend queues it (so ops_done never runs ahead of
//  ops_queued); a call the backend refuses is taken back (`back`).
static void s_count_op(kvt_gpu_t *gpu, uint64_t *counter, uint64_t *bytes_counter, size_t bytes,
                       bool back)
{
    pthread_mutex_lock(&gpu->mu);
    gpu->frozen = true;
    if (back) {
        gpu->stats.ops_queued--;
        if (counter)
            (*counter)--;
        if (bytes_counter)
            *bytes_counter -= bytes;
    } else {
        gpu->stats.ops_queued++;
        if (counter)
            (*counter)++;
        if (bytes_counter)
            *bytes_counter += bytes;
    }
    pthread_mutex_unlock(&gpu->mu);
}

//  Hands a batch to the backend and counts it (taken back on failure).
static int s_queue_copy(kvt_gpu_stream_t *s, kvt_gpu_copy_t *copy, bool pinned, uint64_t *counter,
                        uint64_t *bytes_counter, size_t bytes)
{
    kvt_gpu_t *gpu = s->gpu;
    s_count_op(gpu, counter, bytes_counter, bytes, false);
    int rc = gpu->ops->copy(s, copy, pinned);
    if (rc != 0)
        s_count_op(gpu, counter, bytes_counter, bytes, true);
    return rc;
}

static int s_cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

//  Checks a block list: n >= 1, every id < num_blocks, no duplicates.
static int s_check_blocks(kvt_gpu_t *gpu, const char *what, const uint32_t *blocks, uint32_t n)
{
    if (gpu->nplanes == 0)
        return kvt_gpu_fail(KVT_GPU_ESTATE, "%s: no KV plane registered", what);
    if (!blocks || n == 0)
        return kvt_gpu_fail(KVT_GPU_EINVAL, "%s: empty block list (n = %u)", what, n);
    if (n > gpu->num_blocks)
        return kvt_gpu_fail(KVT_GPU_EINVAL, "%s: %u blocks > num_blocks %u (a duplicate)", what, n,
                            gpu->num_blocks);
    for (uint32_t i = 0; i < n; i++)
        if (blocks[i] >= gpu->num_blocks)
            return kvt_gpu_fail(KVT_GPU_EINVAL, "%s: block id %u at index %u >= num_blocks %u",
                                what, blocks[i], i, gpu->num_blocks);
    if (n <= 64) {
        for (uint32_t i = 1; i < n; i++)
            for (uint32_t j = 0; j < i; j++)
                if (blocks[i] == blocks[j])
                    return kvt_gpu_fail(KVT_GPU_EINVAL,
                                        "%s: duplicate block id %u at indexes %u and %u", what,
                                        blocks[i], j, i);
        return 0;
    }
    uint32_t *sorted = malloc((size_t)n * sizeof *sorted);
    if (!sorted)
        return kvt_gpu_fail(KVT_GPU_ENOMEM, "%s: out of memory", what);
    memcpy(sorted, blocks, (size_t)n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, s_cmp_u32);
    int rc = 0;
    for (uint32_t i = 1; i < n && rc == 0; i++)
        if (sorted[i] == sorted[i - 1])
            rc = kvt_gpu_fail(KVT_GPU_EINVAL, "%s: duplicate block id %u", what, sorted[i]);
    free(sorted);
    return rc;
}

//  Builds and queues the batch of a gather (D2H) or a scatter (H2D) of
//  `count` chunks as one op (kvt_gpu_gather / scatter: one chunk). Every
//  chunk is checked before anything is queued; the messages of a batch name
//  the chunk.
static int s_blocks_op(kvt_gpu_stream_t *s, kvt_gpu_dir_t dir, const kvt_gpu_chunk_t *chunks,
                       uint32_t count, bool batch)
{
    assert(s);
    kvt_gpu_t *gpu = s->gpu;
    const char *op = dir == KVT_GPU_D2H ? "gather" : "scatter";
    char what[64];
    if (batch && (!chunks || count == 0 || count > KVT_GPU_MAX_CHUNKS))
        return s_refused(gpu, kvt_gpu_fail(KVT_GPU_EINVAL, "%s_chunks: %u chunks (1..%u)", op,
                                           chunks ? count : 0, KVT_GPU_MAX_CHUNKS));
    uint64_t ids = 0;
    size_t need_all = 0;
    for (uint32_t c = 0; c < count; c++) {
        const kvt_gpu_chunk_t *ch = &chunks[c];
        if (batch)
            kvt_gpu_fmt(what, sizeof what, "%s_chunks: chunk %u", op, c);
        else
            kvt_gpu_fmt(what, sizeof what, "%s", op);
        int rc = s_check_blocks(gpu, what, ch->blocks, ch->n);
        if (rc != 0)
            return s_refused(gpu, rc);
        size_t need = (size_t)ch->n * gpu->block_bytes;
        if (!ch->buf || ch->len < need)
            return s_refused(
                gpu, kvt_gpu_fail(KVT_GPU_EINVAL,
                                  "%s: buffer of %zu bytes < %u blocks x %zu bytes = %zu", what,
                                  ch->buf ? ch->len : 0, ch->n, gpu->block_bytes, need));
        ids += ch->n;
        need_all += need;
    }
    if (batch && dir == KVT_GPU_H2D && count > 1) {
        //  The chunks of a scatter land in parallel: no block in two of them.
        uint32_t *all = ids <= gpu->num_blocks ? malloc((size_t)ids * sizeof *all) : NULL;
        if (!all && ids <= gpu->num_blocks)
            return kvt_gpu_fail(KVT_GPU_ENOMEM, "scatter_chunks: out of memory");
        uint64_t at = 0;
        for (uint32_t c = 0; all && c < count; c++)
            for (uint32_t i = 0; i < chunks[c].n; i++)
                all[at++] = chunks[c].blocks[i];
        int rc =
            s_check_blocks(gpu, "scatter_chunks: the chunks together", all ? all : chunks[0].blocks,
                           all ? (uint32_t)ids : gpu->num_blocks + 1);
        free(all);
        if (rc != 0)
            return s_refused(gpu, rc);
    }
    int rc =
        s_check_failed(s, batch ? (dir == KVT_GPU_D2H ? "gather_chunks" : "scatter_chunks") : op);
    if (rc != 0)
        return rc;
    uint64_t segs = 0;
    for (uint32_t p = 0; p < gpu->nplanes; p++)
        segs += (uint64_t)gpu->planes[p].layers * ids;
    if (segs > UINT32_MAX)
        return s_refused(gpu, kvt_gpu_fail(KVT_GPU_EINVAL, "%s: too many segments", op));
    kvt_gpu_kjob_t jobs_one, *jobs = count == 1 ? &jobs_one : malloc(count * sizeof *jobs);
    if (!jobs)
        return kvt_gpu_fail(KVT_GPU_ENOMEM, "%s: out of memory", op);
    for (uint32_t c = 0; c < count; c++)
        jobs[c] =
            (kvt_gpu_kjob_t){.chunk = chunks[c].buf, .block = chunks[c].blocks, .n = chunks[c].n};
    kvt_gpu_copy_t *copy = kvt_gpu_kernel_copy_alloc(dir, (uint32_t)segs, jobs, count);
    if (jobs != &jobs_one)
        free(jobs);
    if (!copy)
        return kvt_gpu_fail(KVT_GPU_ENOMEM, "%s: out of memory", op);
    bool pinned = gpu->backend != KVT_GPU_BACKEND_HOST;
    bool mapped = true;
    for (uint32_t c = 0; c < count; c++) {
        const kvt_gpu_chunk_t *ch = &chunks[c];
        char *host = ch->buf;
        uint32_t n = ch->n;
        for (uint32_t p = 0; p < gpu->nplanes; p++) {
            const kvt_gpu_plane_t *pl = &gpu->planes[p];
            size_t bb = pl->block_bytes;
            for (uint32_t l = 0; l < pl->layers; l++) {
                char *chunk = host + (size_t)n * pl->chunk_base + (size_t)l * n * bb;
                char *base = pl->layer_base[l];
                for (uint32_t i = 0; i < n; i++) {
                    char *dev = base + (size_t)ch->blocks[i] * bb;
                    if (dir == KVT_GPU_D2H)
                        kvt_gpu_copy_push(copy, chunk + (size_t)i * bb, dev, bb);
                    else
                        kvt_gpu_copy_push(copy, dev, chunk + (size_t)i * bb, bb);
                }
            }
        }
        if (pinned)
            pinned = s_pinned(gpu, host, (size_t)n * gpu->block_bytes);
        if (pinned)
            mapped = mapped && kvt_gpu_host_mapped(gpu, host, (size_t)n * gpu->block_bytes);
    }
    copy->mapped = pinned && mapped;
    int out = s_queue_copy(
        s, copy, pinned, NULL,
        dir == KVT_GPU_D2H ? &gpu->stats.bytes_gathered : &gpu->stats.bytes_scattered, need_all);
    if (out == 0) {
        pthread_mutex_lock(&gpu->mu);
        if (dir == KVT_GPU_D2H)
            gpu->stats.gathers += count;
        else
            gpu->stats.scatters += count;
        pthread_mutex_unlock(&gpu->mu);
    }
    return out;
}

int kvt_gpu_gather(kvt_gpu_stream_t *s, const uint32_t *blocks, uint32_t n, void *dst,
                   size_t dst_len)
{
    kvt_gpu_chunk_t one = {.blocks = blocks, .n = n, .buf = dst, .len = dst_len};
    return s_blocks_op(s, KVT_GPU_D2H, &one, 1, false);
}

int kvt_gpu_scatter(kvt_gpu_stream_t *s, const uint32_t *blocks, uint32_t n, const void *src,
                    size_t src_len)
{
    //  The batch only reads `src` (H2D); the cast keeps one builder.
    kvt_gpu_chunk_t one = {.blocks = blocks, .n = n, .buf = (void *)(uintptr_t)src, .len = src_len};
    return s_blocks_op(s, KVT_GPU_H2D, &one, 1, false);
}

int kvt_gpu_gather_chunks(kvt_gpu_stream_t *s, const kvt_gpu_chunk_t *chunks, uint32_t count)
{
    return s_blocks_op(s, KVT_GPU_D2H, chunks, count, true);
}

int kvt_gpu_scatter_chunks(kvt_gpu_stream_t *s, const kvt_gpu_chunk_t *chunks, uint32_t count)
{
    return s_blocks_op(s, KVT_GPU_H2D, chunks, count, true);
}

//  The unit (pool, index) as a device pointer, or NULL with the error set.
static char *s_unit(kvt_gpu_t *gpu, const char *what, kvt_gpu_state_pool_t pool, uint32_t index)
{
    const kvt_gpu_spool_t *sp = pool == KVT_GPU_STATE_SLOTS  ? &gpu->state[0]
                                : pool == KVT_GPU_STATE_CKPT ? &gpu->state[1]
                                                             : NULL;
    if (!sp) {
        kvt_gpu_fail(KVT_GPU_EINVAL, "%s: pool %d is not SLOTS or CKPT", what, (int)pool);
        return NULL;
    }
    const char *name = pool == KVT_GPU_STATE_SLOTS ? "slot" : "checkpoint unit";
    if (sp->count == 0) {
        kvt_gpu_fail(KVT_GPU_EINVAL, "%s: no %s pool registered", what, name);
        return NULL;
    }
    if (index >= sp->count) {
        kvt_gpu_fail(KVT_GPU_EINVAL, "%s: %s %u >= count %u", what, name, index, sp->count);
        return NULL;
    }
    return sp->base + (size_t)index * sp->bytes;
}

static int s_state_host(kvt_gpu_stream_t *s, kvt_gpu_dir_t dir, kvt_gpu_state_pool_t pool,
                        uint32_t index, char *host, size_t len)
{
    assert(s);
    kvt_gpu_t *gpu = s->gpu;
    const char *what = dir == KVT_GPU_D2H ? "state_to_host" : "state_from_host";
    char *unit = s_unit(gpu, what, pool, index);
    if (!unit)
        return s_refused(gpu, KVT_GPU_EINVAL);
    size_t bytes = kvt_gpu_state_bytes(gpu, pool);
    if (!host || len < bytes)
        return s_refused(gpu,
                         kvt_gpu_fail(KVT_GPU_EINVAL, "%s: buffer of %zu bytes < state_bytes %zu",
                                      what, host ? len : 0, bytes));
    int rc = s_check_failed(s, what);
    if (rc != 0)
        return rc;
    kvt_gpu_copy_t *copy = kvt_gpu_copy_alloc(dir, 1);
    if (!copy)
        return kvt_gpu_fail(KVT_GPU_ENOMEM, "%s: out of memory", what);
    if (dir == KVT_GPU_D2H)
        kvt_gpu_copy_push(copy, host, unit, bytes);
    else
        kvt_gpu_copy_push(copy, unit, host, bytes);
    bool pinned = gpu->backend != KVT_GPU_BACKEND_HOST && s_pinned(gpu, host, bytes);
    return s_queue_copy(s, copy, pinned, &gpu->stats.state_copies, &gpu->stats.bytes_state, bytes);
}

int kvt_gpu_state_to_host(kvt_gpu_stream_t *s, kvt_gpu_state_pool_t pool, uint32_t index, void *dst,
                          size_t len)
{
    return s_state_host(s, KVT_GPU_D2H, pool, index, dst, len);
}

int kvt_gpu_state_from_host(kvt_gpu_stream_t *s, kvt_gpu_state_pool_t pool, uint32_t index,
                            const void *src, size_t len)
{
    return s_state_host(s, KVT_GPU_H2D, pool, index, (char *)(uintptr_t)src, len);
}

int kvt_gpu_state_copy(kvt_gpu_stream_t *s, kvt_gpu_state_pool_t dst_pool, uint32_t dst_index,
                       kvt_gpu_state_pool_t src_pool, uint32_t src_index)
{
    assert(s);
    kvt_gpu_t *gpu = s->gpu;
    char *dst = s_unit(gpu, "state_copy (dst)", dst_pool, dst_index);
    if (!dst)
        return s_refused(gpu, KVT_GPU_EINVAL);
    char *src = s_unit(gpu, "state_copy (src)", src_pool, src_index);
    if (!src)
        return s_refused(gpu, KVT_GPU_EINVAL);
    size_t bytes = kvt_gpu_state_bytes(gpu, dst_pool);
    if (kvt_gpu_state_bytes(gpu, src_pool) != bytes)
        return s_refused(gpu, kvt_gpu_fail(KVT_GPU_EINVAL,
                                           "state_copy: state_bytes differ (dst %zu, src %zu)",
                                           bytes, kvt_gpu_state_bytes(gpu, src_pool)));
    if (dst == src)
        return s_refused(gpu, kvt_gpu_fail(KVT_GPU_EINVAL, "state_copy: a unit onto itself"));
    int rc = s_check_failed(s, "state_copy");
    if (rc != 0)
        return rc;
    kvt_gpu_copy_t *copy = kvt_gpu_copy_alloc(KVT_GPU_D2D, 1);
    if (!copy)
        return kvt_gpu_fail(KVT_GPU_ENOMEM, "state_copy: out of memory");
    kvt_gpu_copy_push(copy, dst, src, bytes);
    return s_queue_copy(s, copy, true, &gpu->stats.state_copies, &gpu->stats.bytes_state, bytes);
}

int kvt_gpu_launch_host_fn(kvt_gpu_stream_t *s, kvt_gpu_host_fn *fn, void *arg,
                           uint64_t sim_cost_ns)
{
    assert(s);
    kvt_gpu_t *gpu = s->gpu;
    if (!fn)
        return s_refused(gpu, kvt_gpu_fail(KVT_GPU_EINVAL, "launch_host_fn: fn is NULL"));
    if (!gpu->ops->host_fn)
        return kvt_gpu_fail(KVT_GPU_EUNSUPPORTED, "launch_host_fn: not supported by %s",
                            kvt_gpu_backend_name(gpu->backend));
    int rc = s_check_failed(s, "launch_host_fn");
    if (rc != 0)
        return rc;
    s_count_op(gpu, NULL, NULL, 0, false);
    rc = gpu->ops->host_fn(s, fn, arg, sim_cost_ns);
    if (rc != 0)
        s_count_op(gpu, NULL, NULL, 0, true);
    return rc;
}

// --------------------------------------------------------------- events ----

kvt_gpu_event_t *kvt_gpu_event_new(kvt_gpu_t *gpu)
{
    assert(gpu);
    kvt_gpu_event_t *self = calloc(1, sizeof *self);
    if (!self) {
        kvt_gpu_fail(KVT_GPU_ENOMEM, "event_new: out of memory");
        return NULL;
    }
    self->gpu = gpu;
    self->max_records = gpu->opts.event_max_rerecords + 1;
    if (gpu->ops->event_new(self) != 0) {
        free(self);
        return NULL;
    }
    pthread_mutex_lock(&gpu->mu);
    self->next = gpu->events;
    if (gpu->events)
        gpu->events->prev = self;
    gpu->events = self;
    pthread_mutex_unlock(&gpu->mu);
    return self;
}

void kvt_gpu_event_free(kvt_gpu_event_t *self)
{
    kvt_gpu_t *gpu = self->gpu;
    pthread_mutex_lock(&gpu->mu);
    assert(!self->pool);
    if (self->prev)
        self->prev->next = self->next;
    else
        gpu->events = self->next;
    if (self->next)
        self->next->prev = self->prev;
    pthread_mutex_unlock(&gpu->mu);
    gpu->ops->event_destroy(self);
    free(self);
}

void kvt_gpu_event_destroy(kvt_gpu_event_t **self_p)
{
    assert(self_p);
    kvt_gpu_event_t *self = *self_p;
    if (!self)
        return;
    kvt_gpu_t *gpu = self->gpu;
    //  A pool event is destroyed by its pool, on the pool's owner thread.
    pthread_mutex_lock(&gpu->mu);
    bool pooled = self->pool != NULL;
    if (pooled)
        self->pool->stats.refused++;
    pthread_mutex_unlock(&gpu->mu);
    if (pooled) {
        kvt_gpu_fail(KVT_GPU_ESTATE, "event_destroy: refused, the event belongs to an event pool "
                                     "(give it back with kvt_gpu_event_pool_put)");
        kvt_gpu_log(gpu, 0, "%s", kvt_gpu_last_error());
        return;
    }
    kvt_gpu_event_free(self);
    *self_p = NULL;
}

int kvt_gpu_event_record(kvt_gpu_event_t *ev, kvt_gpu_stream_t *s)
{
    assert(ev && s);
    kvt_gpu_t *gpu = ev->gpu;
    if (s->gpu != gpu)
        return s_refused(gpu,
                         kvt_gpu_fail(KVT_GPU_EINVAL,
                                      "event_record: stream '%s' is on another device", s->name));
    int rc = s_check_failed(s, "event_record");
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&gpu->mu);
    if (ev->records >= ev->max_records) {
        pthread_mutex_unlock(&gpu->mu);
        return kvt_gpu_fail(KVT_GPU_ELIMIT,
                            "event_record: event already recorded %u times (1 + %u re-records)",
                            ev->records, ev->max_records - 1);
    }
    ev->records++;
    pthread_mutex_unlock(&gpu->mu);
    rc = gpu->ops->event_record(ev, s);
    pthread_mutex_lock(&gpu->mu);
    if (rc != 0)
        ev->records--;
    else {
        gpu->stats.records++;
        if (ev->pool)
            ev->pool->stats.recorded++;
    }
    pthread_mutex_unlock(&gpu->mu);
    return rc;
}

int kvt_gpu_stream_wait_event(kvt_gpu_stream_t *s, kvt_gpu_event_t *ev)
{
    assert(s && ev);
    kvt_gpu_t *gpu = s->gpu;
    if (ev->gpu != gpu)
        return s_refused(
            gpu, kvt_gpu_fail(KVT_GPU_EINVAL, "stream_wait_event: the event is on another device"));
    int rc = s_check_failed(s, "stream_wait_event");
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&gpu->mu);
    gpu->frozen = true;
    gpu->stats.waits++;
    pthread_mutex_unlock(&gpu->mu);
    return gpu->ops->stream_wait(s, ev);
}

int kvt_gpu_event_query(kvt_gpu_event_t *ev)
{
    assert(ev);
    return ev->gpu->ops->event_query(ev);
}

int kvt_gpu_event_synchronize(kvt_gpu_event_t *ev)
{
    assert(ev);
    return ev->gpu->ops->event_sync(ev);
}

uint32_t kvt_gpu_event_records(const kvt_gpu_event_t *ev)
{
    assert(ev);
    pthread_mutex_lock(&ev->gpu->mu);
    uint32_t records = ev->records;
    pthread_mutex_unlock(&ev->gpu->mu);
    return records;
}

uint64_t kvt_gpu_event_eta(kvt_gpu_event_t *ev)
{
    assert(ev);
    if (!ev->gpu->ops->event_eta)
        return UINT64_MAX;
    return ev->gpu->ops->event_eta(ev);
}

uint64_t kvt_gpu_event_wake(kvt_gpu_event_t *ev, uint64_t now_ns, uint64_t poll_ns)
{
    assert(ev);
    //  The query lands what is due (SIM) and settles the done / failed cases.
    if (kvt_gpu_event_query(ev) != KVT_GPU_NOT_READY)
        return now_ns;
    uint64_t eta = kvt_gpu_event_eta(ev);
    if (eta == UINT64_MAX)
        return kvt_gpu_sat_add(now_ns, poll_ns);
    return eta > now_ns ? eta : now_ns;
}

// -------------------------------------------------------- SIM and faults ----

int kvt_gpu_progress(kvt_gpu_t *self)
{
    assert(self);
    return self->ops->progress ? self->ops->progress(self) : 0;
}

uint64_t kvt_gpu_next_eta(kvt_gpu_t *self)
{
    assert(self);
    return self->ops->next_eta ? self->ops->next_eta(self) : UINT64_MAX;
}

int kvt_gpu_stream_inject(kvt_gpu_stream_t *s, kvt_gpu_fault_t fault, uint32_t count)
{
    assert(s);
    kvt_gpu_t *gpu = s->gpu;
    if (!gpu->ops->inject)
        return kvt_gpu_fail(KVT_GPU_EUNSUPPORTED, "stream_inject: not supported by %s",
                            kvt_gpu_backend_name(gpu->backend));
    if ((int)fault < KVT_GPU_FAULT_NONE || (int)fault > KVT_GPU_FAULT_STALL)
        return s_refused(
            gpu, kvt_gpu_fail(KVT_GPU_EINVAL, "stream_inject: fault %d unknown", (int)fault));
    return gpu->ops->inject(s, fault, count);
}
