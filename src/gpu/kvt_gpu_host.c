/*  kvt_gpu_host.c — the host backend: device memory is host memory, a
    stream is an ordered queue of ops, an event is (stream, sequence number).

    LIVE: each stream has a worker thread that runs its queue in order; a
    wait op holds the worker until the awaited stream reached the awaited
    sequence number.

    SIM: ops land on the caller's clock (kvt_gpu_host_sim.c).

    Memory (device regions, pinned buffers): kvt_gpu_host_mem.c.

    A failed op (injected) changes nothing and fails its stream: the ops
    after it fail too and so does any stream that waits on it. Everything
    here runs under gpu->mu, except copies and host functions under LIVE,
    which run on the worker with the lock released.
*/
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvt_gpu_host.h"
#include "kvt_gpu_kernel.h"

// ------------------------------------------------------------- device ----

static int s_init(kvt_gpu_t *gpu)
{
    kvt_host_t *host = calloc(1, sizeof *host);
    if (!host)
        return kvt_gpu_fail(KVT_GPU_ENOMEM, "host: out of memory");
    host->sim = gpu->opts.host_mode == KVT_GPU_HOST_SIM;
    pthread_cond_init(&host->cv_done, NULL);
    kvt_gpu_host_mem_init(gpu, &host->mem);
    gpu->impl = host;
    return 0;
}

static void s_fini(kvt_gpu_t *gpu)
{
    kvt_host_t *host = kvt_gpu_host_impl(gpu);
    if (!host)
        return;
    assert(!host->ghead && host->nheap == 0);
    pthread_cond_destroy(&host->cv_done);
    kvt_gpu_host_mem_fini(&host->mem);
    free(host->heap);
    free(host);
    gpu->impl = NULL;
}

static int s_dev_alloc(kvt_gpu_t *gpu, size_t bytes, void **out)
{
    return kvt_gpu_host_mem_alloc(gpu, &kvt_gpu_host_impl(gpu)->mem, bytes, out,
                                  "device allocation");
}

static int s_host_alloc(kvt_gpu_t *gpu, size_t bytes, void **out)
{
    return kvt_gpu_host_mem_alloc(gpu, &kvt_gpu_host_impl(gpu)->mem, bytes, out, "host allocation");
}

static void s_free(kvt_gpu_t *gpu, void *ptr)
{
    kvt_gpu_host_mem_free(gpu, &kvt_gpu_host_impl(gpu)->mem, ptr);
}

kvt_host_thp_t kvt_gpu_host_thp(kvt_gpu_t *gpu)
{
    return gpu->ops == &kvt_gpu_host_ops ? kvt_gpu_host_impl(gpu)->mem.thp : 0;
}

void kvt_gpu_host_mem_counts(kvt_gpu_t *gpu, uint64_t *huge_regions, uint64_t *advice_refused)
{
    *huge_regions = *advice_refused = 0;
    if (gpu->ops != &kvt_gpu_host_ops)
        return;
    pthread_mutex_lock(&gpu->mu);
    *huge_regions = kvt_gpu_host_impl(gpu)->mem.huge_regions;
    *advice_refused = kvt_gpu_host_impl(gpu)->mem.advice_refused;
    pthread_mutex_unlock(&gpu->mu);
}

// ----------------------------------------------------- stream plumbing ----

void kvt_gpu_host_unref(kvt_hstream_t *s)
{
    assert(s->refs > 0);
    if (--s->refs == 0) {
        assert(!s->head);
        kvt_host_t *host = kvt_gpu_host_impl(s->gpu);
        if (host->sim)
            kvt_gpu_host_sim_drop_stream(host, s);
        pthread_cond_destroy(&s->cv_work);
        free(s);
    }
}

//  Status of (stream, seq): 0, NOT_READY or EFAULT (with the message).
int kvt_gpu_host_status(kvt_hstream_t *s, uint64_t seq)
{
    if (!s || seq == 0)
        return 0;
    if (s->done_seq < seq)
        return KVT_GPU_NOT_READY;
    if (s->fail_seq <= seq)
        return kvt_gpu_fail(KVT_GPU_EFAULT, "stream '%s': op %llu failed: %s", s->name,
                            (unsigned long long)s->fail_seq, s->fail_why);
    return 0;
}

//  Decides whether `op` fails as it completes (and records why).
bool kvt_gpu_host_fails(kvt_hop_t *op)
{
    kvt_hstream_t *s = op->stream;
    if (s->fail_seq != KVT_HOST_NONE)
        return true;
    if (op->inject_fail)
        kvt_gpu_fmt(s->fail_why, sizeof s->fail_why, "injected failure");
    else if (op->kind == KVT_HOP_WAIT && op->target->fail_seq <= op->target_seq)
        kvt_gpu_fmt(s->fail_why, sizeof s->fail_why, "awaited stream '%s' failed (op %llu)",
                    op->target->name, (unsigned long long)op->target->fail_seq);
    else
        return false;
    s->fail_seq = op->seq;
    return true;
}

void kvt_gpu_host_execute(kvt_hop_t *op)
{
    if (op->kind == KVT_HOP_COPY) {
        if (!kvt_gpu_kernel_run_copy(op->stream->gpu, op->copy))
            kvt_gpu_copy_run(op->copy);
    } else if (op->kind == KVT_HOP_FN)
        op->fn(op->arg);
}

//  Completes the stream's head op (under the lock) and frees it.
void kvt_gpu_host_complete(kvt_gpu_t *gpu, kvt_hop_t *op, bool failed)
{
    kvt_hstream_t *s = op->stream;
    assert(s->head == op);
    s->head = op->next;
    if (!s->head)
        s->tail = NULL;
    s->done_seq = op->seq;
    if (failed)
        gpu->stats.ops_failed++;
    else
        gpu->stats.ops_done++;
    if (op->kind == KVT_HOP_WAIT)
        kvt_gpu_host_unref(op->target);
    free(op->copy);
    free(op);
    kvt_gpu_host_unref(s);
}

// ---------------------------------------------------------------- LIVE ----

static void s_live_wait_done(kvt_host_t *host, kvt_gpu_t *gpu)
{
    host->done_waiters++;
    pthread_cond_wait(&host->cv_done, &gpu->mu);
    host->done_waiters--;
}

static void *s_worker(void *arg)
{
    kvt_hstream_t *s = arg;
    kvt_gpu_t *gpu = s->gpu;
    kvt_host_t *host = kvt_gpu_host_impl(gpu);
    pthread_mutex_lock(&gpu->mu);
    while (true) {
        kvt_hop_t *op = s->head;
        if (!op) {
            if (s->stop)
                break;
            pthread_cond_wait(&s->cv_work, &gpu->mu);
            continue;
        }
        if (s->stalled) {
            pthread_cond_wait(&s->cv_work, &gpu->mu);
            continue;
        }
        if (op->kind == KVT_HOP_WAIT && op->target->done_seq < op->target_seq) {
            s_live_wait_done(host, gpu);
            continue;
        }
        bool failed = kvt_gpu_host_fails(op);
        if (!failed && op->kind != KVT_HOP_WAIT) {
            pthread_mutex_unlock(&gpu->mu);
            kvt_gpu_host_execute(op);
            pthread_mutex_lock(&gpu->mu);
        }
        kvt_gpu_host_complete(gpu, op, failed);
        if (host->done_waiters)
            pthread_cond_broadcast(&host->cv_done);
    }
    pthread_mutex_unlock(&gpu->mu);
    return NULL;
}

// ------------------------------------------------------------- streams ----

static int s_stream_new(kvt_gpu_stream_t *fs)
{
    kvt_gpu_t *gpu = fs->gpu;
    kvt_hstream_t *s = calloc(1, sizeof *s);
    if (!s)
        return kvt_gpu_fail(KVT_GPU_ENOMEM, "stream_new: out of memory");
    s->gpu = gpu;
    kvt_gpu_fmt(s->name, sizeof s->name, "%s", fs->name);
    s->refs = 1;
    s->fail_seq = KVT_HOST_NONE;
    s->heap_at = KVT_HOST_NO_HEAP;
    kvt_host_t *host = kvt_gpu_host_impl(gpu);
    if (host->sim) {
        pthread_mutex_lock(&gpu->mu);
        int rc = kvt_gpu_host_sim_add_stream(host);
        pthread_mutex_unlock(&gpu->mu);
        if (rc != 0) {
            free(s);
            return rc;
        }
    }
    pthread_cond_init(&s->cv_work, NULL);
    if (!host->sim) {
        //  The worker only touches `s` under gpu->mu, which we do not hold.
        int rc = pthread_create(&s->thread, NULL, s_worker, s);
        if (rc != 0) {
            pthread_cond_destroy(&s->cv_work);
            free(s);
            return kvt_gpu_fail(KVT_GPU_ERR, "stream_new: cannot start a worker thread (%s)",
                                strerror(rc));
        }
    }
    fs->impl = s;
    return 0;
}

static void s_stream_destroy(kvt_gpu_stream_t *fs)
{
    kvt_gpu_t *gpu = fs->gpu;
    kvt_host_t *host = kvt_gpu_host_impl(gpu);
    kvt_hstream_t *s = fs->impl;
    pthread_mutex_lock(&gpu->mu);
    if (s->stalled) {
        s->stalled = false;
        if (host->sim) {
            s->release_ns = kvt_gpu_host_now(gpu);
            kvt_gpu_host_sim_replan(host);
        }
    }
    if (host->sim) {
        //  Cannot block virtual time: land the queue now, unless it waits
        //  behind another stalled stream (then it lands when that ends).
        if (s->done_seq < s->queued_seq)
            kvt_gpu_host_sim_sync(gpu, s, s->queued_seq);
        kvt_gpu_host_unref(s);
        pthread_mutex_unlock(&gpu->mu);
        fs->impl = NULL;
        return;
    }
    s->stop = true;
    pthread_cond_signal(&s->cv_work);
    pthread_mutex_unlock(&gpu->mu);
    pthread_join(s->thread, NULL);
    pthread_mutex_lock(&gpu->mu);
    kvt_gpu_host_unref(s);
    pthread_mutex_unlock(&gpu->mu);
    fs->impl = NULL;
}

static int s_wait_for(kvt_gpu_t *gpu, kvt_hstream_t *s, uint64_t seq)
{
    kvt_host_t *host = kvt_gpu_host_impl(gpu);
    if (host->sim)
        return kvt_gpu_host_sim_sync(gpu, s, seq);
    while (s->done_seq < seq)
        s_live_wait_done(host, gpu);
    return kvt_gpu_host_status(s, seq);
}

static int s_stream_query(kvt_gpu_stream_t *fs)
{
    kvt_gpu_t *gpu = fs->gpu;
    kvt_hstream_t *s = fs->impl;
    pthread_mutex_lock(&gpu->mu);
    if (kvt_gpu_host_impl(gpu)->sim)
        kvt_gpu_host_sim_progress(gpu, kvt_gpu_host_now(gpu));
    int rc = kvt_gpu_host_status(s, s->queued_seq);
    pthread_mutex_unlock(&gpu->mu);
    return rc;
}

static int s_stream_sync(kvt_gpu_stream_t *fs)
{
    kvt_gpu_t *gpu = fs->gpu;
    kvt_hstream_t *s = fs->impl;
    pthread_mutex_lock(&gpu->mu);
    int rc = s_wait_for(gpu, s, s->queued_seq);
    pthread_mutex_unlock(&gpu->mu);
    return rc;
}

//  Queues `op` on `fs` (takes ownership on every path).
static int s_enqueue(kvt_gpu_stream_t *fs, kvt_hop_t *op, size_t bytes)
{
    kvt_gpu_t *gpu = fs->gpu;
    kvt_host_t *host = kvt_gpu_host_impl(gpu);
    kvt_hstream_t *s = fs->impl;
    pthread_mutex_lock(&gpu->mu);
    uint64_t now = 0;
    if (host->sim) {
        now = kvt_gpu_host_now(gpu);
        kvt_gpu_host_sim_progress(gpu, now);
    }
    int rc = 0;
    if (s->fail_seq != KVT_HOST_NONE && s->done_seq >= s->fail_seq)
        rc = kvt_gpu_fail(KVT_GPU_EFAULT, "stream '%s' failed earlier (op %llu: %s)", s->name,
                          (unsigned long long)s->fail_seq, s->fail_why);
    else if (host->sim)
        rc = kvt_gpu_host_sim_reserve(s);
    if (rc != 0) {
        //  Refused whole: nothing of this call is queued.
        if (op->kind == KVT_HOP_WAIT)
            kvt_gpu_host_unref(op->target);
        pthread_mutex_unlock(&gpu->mu);
        free(op->copy);
        free(op);
        return rc;
    }
    op->stream = s;
    s->refs++;
    op->seq = ++s->queued_seq;
    if (op->kind != KVT_HOP_WAIT && s->fail_next > 0) {
        s->fail_next--;
        op->inject_fail = true;
    }
    if (host->sim) {
        op->gseq = ++host->gseq;
        op->queued_ns = now;
        op->cost_ns = op->kind == KVT_HOP_COPY
                          ? kvt_gpu_sim_copy_cost_ns(gpu, op->copy->count, bytes)
                      : op->kind == KVT_HOP_FN ? op->cost_ns
                                               : 0;
        if (op->kind == KVT_HOP_WAIT)
            op->dep = kvt_gpu_host_sim_op(op->target, op->target_seq);
        op->land_ns =
            kvt_gpu_host_sim_plan(op, s->tail ? s->tail->land_ns : kvt_gpu_host_sim_base(s));
        op->gprev = host->gtail;
        if (host->gtail)
            host->gtail->gnext = op;
        else
            host->ghead = op;
        host->gtail = op;
    }
    if (s->tail)
        s->tail->next = op;
    else
        s->head = op;
    s->tail = op;
    if (host->sim)
        kvt_gpu_host_sim_queued(host, op);
    else
        pthread_cond_signal(&s->cv_work);
    pthread_mutex_unlock(&gpu->mu);
    return 0;
}

static int s_copy(kvt_gpu_stream_t *fs, kvt_gpu_copy_t *copy, bool pinned)
{
    kvt_hop_t *op = calloc(1, sizeof *op);
    if (!op) {
        free(copy);
        return kvt_gpu_fail(KVT_GPU_ENOMEM, "host: out of memory");
    }
    op->kind = KVT_HOP_COPY;
    op->copy = copy;
    return s_enqueue(fs, op, copy->bytes);
}

static int s_host_fn(kvt_gpu_stream_t *fs, kvt_gpu_host_fn *fn, void *arg, uint64_t sim_cost_ns)
{
    kvt_hop_t *op = calloc(1, sizeof *op);
    if (!op)
        return kvt_gpu_fail(KVT_GPU_ENOMEM, "host: out of memory");
    op->kind = KVT_HOP_FN;
    op->fn = fn;
    op->arg = arg;
    op->cost_ns = sim_cost_ns;
    return s_enqueue(fs, op, 0);
}

// -------------------------------------------------------------- events ----

static int s_event_new(kvt_gpu_event_t *ev)
{
    kvt_hevent_t *e = calloc(1, sizeof *e);
    if (!e)
        return kvt_gpu_fail(KVT_GPU_ENOMEM, "event_new: out of memory");
    ev->impl = e;
    return 0;
}

static void s_event_destroy(kvt_gpu_event_t *ev)
{
    kvt_hevent_t *e = ev->impl;
    if (!e)
        return;
    pthread_mutex_lock(&ev->gpu->mu);
    if (e->stream)
        kvt_gpu_host_unref(e->stream);
    pthread_mutex_unlock(&ev->gpu->mu);
    free(e);
    ev->impl = NULL;
}

static int s_event_record(kvt_gpu_event_t *ev, kvt_gpu_stream_t *fs)
{
    kvt_gpu_t *gpu = ev->gpu;
    kvt_hevent_t *e = ev->impl;
    kvt_hstream_t *s = fs->impl;
    pthread_mutex_lock(&gpu->mu);
    s->refs++;
    if (e->stream)
        kvt_gpu_host_unref(e->stream);
    e->stream = s;
    e->seq = s->queued_seq;
    pthread_mutex_unlock(&gpu->mu);
    return 0;
}

static int s_stream_wait(kvt_gpu_stream_t *fs, kvt_gpu_event_t *ev)
{
    kvt_gpu_t *gpu = fs->gpu;
    kvt_hevent_t *e = ev->impl;
    kvt_hstream_t *s = fs->impl;
    pthread_mutex_lock(&gpu->mu);
    kvt_hstream_t *target = e->stream;
    uint64_t seq = e->seq;
    bool trivial =
        !target || seq == 0 || target == s || (target->done_seq >= seq && target->fail_seq > seq);
    //  Unrecorded, same stream, or already completed without failure:
    //  nothing to order. Otherwise the wait op holds its own reference on
    //  the target (the event may be re-recorded meanwhile).
    if (!trivial)
        target->refs++;
    pthread_mutex_unlock(&gpu->mu);
    if (trivial)
        return 0;
    kvt_hop_t *op = calloc(1, sizeof *op);
    if (!op) {
        pthread_mutex_lock(&gpu->mu);
        kvt_gpu_host_unref(target);
        pthread_mutex_unlock(&gpu->mu);
        return kvt_gpu_fail(KVT_GPU_ENOMEM, "host: out of memory");
    }
    op->kind = KVT_HOP_WAIT;
    op->target = target;
    op->target_seq = seq;
    return s_enqueue(fs, op, 0);
}

static int s_event_query(kvt_gpu_event_t *ev)
{
    kvt_gpu_t *gpu = ev->gpu;
    kvt_hevent_t *e = ev->impl;
    pthread_mutex_lock(&gpu->mu);
    if (kvt_gpu_host_impl(gpu)->sim)
        kvt_gpu_host_sim_progress(gpu, kvt_gpu_host_now(gpu));
    int rc = kvt_gpu_host_status(e->stream, e->seq);
    pthread_mutex_unlock(&gpu->mu);
    return rc;
}

static int s_event_sync(kvt_gpu_event_t *ev)
{
    kvt_gpu_t *gpu = ev->gpu;
    kvt_hevent_t *e = ev->impl;
    pthread_mutex_lock(&gpu->mu);
    int rc = e->stream ? s_wait_for(gpu, e->stream, e->seq) : 0;
    pthread_mutex_unlock(&gpu->mu);
    return rc;
}

static uint64_t s_event_eta(kvt_gpu_event_t *ev)
{
    kvt_gpu_t *gpu = ev->gpu;
    kvt_hevent_t *e = ev->impl;
    if (!kvt_gpu_host_impl(gpu)->sim)
        return KVT_HOST_NONE;
    pthread_mutex_lock(&gpu->mu);
    uint64_t now = kvt_gpu_host_now(gpu);
    kvt_gpu_host_sim_progress(gpu, now);
    uint64_t eta = 0;
    if (e->stream && e->seq > 0) {
        kvt_hop_t *op = kvt_gpu_host_sim_op(e->stream, e->seq);
        eta = op ? op->land_ns : now;
    }
    pthread_mutex_unlock(&gpu->mu);
    return eta;
}

// ------------------------------------------------------- SIM and faults ----

static int s_progress(kvt_gpu_t *gpu)
{
    if (!kvt_gpu_host_impl(gpu)->sim)
        return 0;
    pthread_mutex_lock(&gpu->mu);
    int landed = kvt_gpu_host_sim_progress(gpu, kvt_gpu_host_now(gpu));
    pthread_mutex_unlock(&gpu->mu);
    return landed;
}

static uint64_t s_next_eta(kvt_gpu_t *gpu)
{
    kvt_host_t *host = kvt_gpu_host_impl(gpu);
    if (!host->sim)
        return KVT_HOST_NONE;
    pthread_mutex_lock(&gpu->mu);
    kvt_gpu_host_sim_progress(gpu, kvt_gpu_host_now(gpu));
    uint64_t eta = kvt_gpu_host_sim_next(host);
    pthread_mutex_unlock(&gpu->mu);
    return eta;
}

static int s_inject(kvt_gpu_stream_t *fs, kvt_gpu_fault_t fault, uint32_t count)
{
    kvt_gpu_t *gpu = fs->gpu;
    kvt_host_t *host = kvt_gpu_host_impl(gpu);
    kvt_hstream_t *s = fs->impl;
    if (fault == KVT_GPU_FAULT_FAIL && count == 0)
        return kvt_gpu_fail(KVT_GPU_EINVAL, "stream_inject: FAIL needs count >= 1");
    pthread_mutex_lock(&gpu->mu);
    uint64_t now = 0;
    if (host->sim) {
        now = kvt_gpu_host_now(gpu);
        kvt_gpu_host_sim_progress(gpu, now);
    }
    if (fault == KVT_GPU_FAULT_FAIL)
        s->fail_next += count;
    else if (fault == KVT_GPU_FAULT_STALL && !s->stalled) {
        s->stalled = true;
        if (host->sim)
            kvt_gpu_host_sim_replan(host);
    } else if (fault == KVT_GPU_FAULT_NONE && s->stalled) {
        s->stalled = false;
        if (host->sim) {
            s->release_ns = now;
            kvt_gpu_host_sim_replan(host);
        } else
            pthread_cond_signal(&s->cv_work);
    }
    pthread_mutex_unlock(&gpu->mu);
    return 0;
}

const kvt_gpu_ops_t kvt_gpu_host_ops = {
    .name = "host",
    .init = s_init,
    .fini = s_fini,
    .dev_alloc = s_dev_alloc,
    .dev_free = s_free,
    .host_alloc = s_host_alloc,
    .host_free = s_free,
    .stream_new = s_stream_new,
    .stream_destroy = s_stream_destroy,
    .stream_query = s_stream_query,
    .stream_sync = s_stream_sync,
    .event_new = s_event_new,
    .event_destroy = s_event_destroy,
    .event_record = s_event_record,
    .stream_wait = s_stream_wait,
    .event_query = s_event_query,
    .event_sync = s_event_sync,
    .copy = s_copy,
    .host_fn = s_host_fn,
    .inject = s_inject,
    .event_eta = s_event_eta,
    .progress = s_progress,
    .next_eta = s_next_eta,
};
