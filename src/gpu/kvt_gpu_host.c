/*  kvt_gpu_host.c — the host backend: device memory is host memory, a
    stream is an ordered queue of ops, an event is (stream, sequence number).

    LIVE: each stream has a worker thread that runs its queue in order; a
    wait op holds the worker until the awaited stream reached the awaited
    sequence number.

    SIM: ops never run on their own. Each op gets a landing time when it is
    queued (and again whenever a stall changes or a synchronize forces
    work):

        ready (op) = max (queued at, landing of the stream's previous op,
                          end of the stream's last stall,
                          landing of the awaited op, for a wait)
        land (op)  = ready (op) + cost (op)
        cost       = copy: latency + ceil (bytes * 1e9 / bandwidth);
                     wait: 0; host function: its sim_cost_ns

    and takes effect (bytes move, the host function runs, the stream's done
    sequence advances) when a call under the device lock finds land <= now.
    Every op's dependencies were queued before it, so landing the due ops in
    queue order lands dependencies first. A stalled stream's ops have no
    landing time (UINT64_MAX) until the stall ends.

    A failed op (injected) changes nothing and fails its stream: the ops
    after it fail too and so does any stream that waits on it. Everything
    here runs under gpu->mu, except copies and host functions under LIVE,
    which run on the worker with the lock released.
*/
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvt_gpu_int.h"

#define S_NONE UINT64_MAX //  "no failure" / "unknown landing time"

typedef enum {
    S_OP_COPY = 1, //  a copy batch
    S_OP_WAIT = 2, //  wait until (target, target_seq) completed
    S_OP_FN = 3,   //  a host function
} s_op_kind_t;

typedef struct _s_hstream_t s_hstream_t;
typedef struct _s_op_t s_op_t;

struct _s_op_t {
    s_op_kind_t kind;     //  what it does
    s_hstream_t *stream;  //  stream it is queued on (holds a reference)
    uint64_t seq;         //  position on its stream, from 1
    s_op_t *next;         //  next op on the same stream
    s_op_t *gprev;        //  SIM: previous pending op, queue order
    s_op_t *gnext;        //  SIM: next pending op, queue order
    kvt_gpu_copy_t *copy; //  S_OP_COPY: the batch (owned)
    s_hstream_t *target;  //  S_OP_WAIT: awaited stream (holds a reference)
    uint64_t target_seq;  //  S_OP_WAIT: awaited sequence number
    s_op_t *dep;          //  S_OP_WAIT, SIM: awaited op while it is pending
    kvt_gpu_host_fn *fn;  //  S_OP_FN: the function
    void *arg;            //  S_OP_FN: its argument
    uint64_t cost_ns;     //  SIM: cost of the op
    uint64_t queued_ns;   //  SIM: clock when it was queued
    uint64_t land_ns;     //  SIM: landing time, S_NONE while unknown
    bool inject_fail;     //  an injected failure
    bool forced;          //  SIM: marked by a forced landing
};

struct _s_hstream_t {
    kvt_gpu_t *gpu;              //  device
    char name[KVT_GPU_NAME_MAX]; //  for messages
    int refs;                    //  handle + events + waits + pending ops
    s_op_t *head;                //  oldest pending op (LIVE: maybe running)
    s_op_t *tail;                //  newest pending op
    uint64_t queued_seq;         //  sequence number of the newest op queued
    uint64_t done_seq;           //  sequence number of the newest op completed
    uint64_t fail_seq;           //  first failed op, S_NONE if none
    char fail_why[96];           //  why it failed
    uint32_t fail_next;          //  injected failures left for the next ops
    bool stalled;                //  injected stall in force
    uint64_t release_ns;         //  SIM: end of the last stall
    uint64_t last_land_ns;       //  SIM: landing time of the newest completed op
    uint64_t force_seq;          //  SIM: scratch of a forced landing
    uint64_t plan_epoch;         //  SIM: scratch of a replan
    uint64_t plan_land;          //  SIM: scratch of a replan
    pthread_cond_t cv_work;      //  LIVE: work queued, stall ended, stop
    pthread_t thread;            //  LIVE: the worker
    bool stop;                   //  LIVE: the worker should exit once drained
};

typedef struct {
    bool sim;               //  SIM mode
    pthread_cond_t cv_done; //  LIVE: some op completed
    int done_waiters;       //  LIVE: threads waiting on cv_done
    s_op_t *ghead;          //  SIM: pending ops, oldest first
    s_op_t *gtail;          //  SIM: pending ops, newest
    uint64_t epoch;         //  SIM: replan counter
} s_host_t;

//  The backend event.
typedef struct {
    s_hstream_t *stream; //  stream of the last record (holds a reference), or NULL
    uint64_t seq;        //  sequence number marked
} s_hevent_t;

static s_host_t *s_host(kvt_gpu_t *gpu)
{
    return gpu->impl;
}

static uint64_t s_now(kvt_gpu_t *gpu)
{
    return gpu->opts.now(gpu->opts.now_arg);
}

static uint64_t s_max(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

// ------------------------------------------------------------- device ----

static int s_init(kvt_gpu_t *gpu)
{
    s_host_t *host = calloc(1, sizeof *host);
    if (!host)
        return kvt_gpu_fail(KVT_GPU_ENOMEM, "host: out of memory");
    host->sim = gpu->opts.host_mode == KVT_GPU_HOST_SIM;
    pthread_cond_init(&host->cv_done, NULL);
    gpu->impl = host;
    return 0;
}

static void s_fini(kvt_gpu_t *gpu)
{
    s_host_t *host = s_host(gpu);
    if (!host)
        return;
    assert(!host->ghead);
    pthread_cond_destroy(&host->cv_done);
    free(host);
    gpu->impl = NULL;
}

static int s_alloc(size_t bytes, void **out, const char *what)
{
    size_t rounded = (bytes + 4095) & ~(size_t)4095;
    if (rounded < bytes || posix_memalign(out, 4096, rounded) != 0)
        return kvt_gpu_fail(KVT_GPU_ENOMEM, "host: %s of %zu bytes failed", what, bytes);
    memset(*out, 0, rounded);
    return 0;
}

static int s_dev_alloc(kvt_gpu_t *gpu, size_t bytes, void **out)
{
    return s_alloc(bytes, out, "device allocation");
}

static int s_host_alloc(kvt_gpu_t *gpu, size_t bytes, void **out)
{
    return s_alloc(bytes, out, "host allocation");
}

static void s_free(kvt_gpu_t *gpu, void *ptr)
{
    free(ptr);
}

// ----------------------------------------------------- stream plumbing ----

static void s_unref(s_hstream_t *s)
{
    assert(s->refs > 0);
    if (--s->refs == 0) {
        assert(!s->head);
        pthread_cond_destroy(&s->cv_work);
        free(s);
    }
}

//  Status of (stream, seq): 0, NOT_READY or EFAULT (with the message).
static int s_status(s_hstream_t *s, uint64_t seq)
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
static bool s_fails(s_op_t *op)
{
    s_hstream_t *s = op->stream;
    if (s->fail_seq != S_NONE)
        return true;
    if (op->inject_fail)
        kvt_gpu_fmt(s->fail_why, sizeof s->fail_why, "injected failure");
    else if (op->kind == S_OP_WAIT && op->target->fail_seq <= op->target_seq)
        kvt_gpu_fmt(s->fail_why, sizeof s->fail_why, "awaited stream '%s' failed (op %llu)",
                    op->target->name, (unsigned long long)op->target->fail_seq);
    else
        return false;
    s->fail_seq = op->seq;
    return true;
}

static void s_execute(s_op_t *op)
{
    if (op->kind == S_OP_COPY)
        kvt_gpu_copy_run(op->copy);
    else if (op->kind == S_OP_FN)
        op->fn(op->arg);
}

//  Completes the stream's head op (under the lock) and frees it.
static void s_complete(kvt_gpu_t *gpu, s_op_t *op, bool failed)
{
    s_hstream_t *s = op->stream;
    assert(s->head == op);
    s->head = op->next;
    if (!s->head)
        s->tail = NULL;
    s->done_seq = op->seq;
    if (failed)
        gpu->stats.ops_failed++;
    else
        gpu->stats.ops_done++;
    if (op->kind == S_OP_WAIT)
        s_unref(op->target);
    free(op->copy);
    free(op);
    s_unref(s);
}

// ---------------------------------------------------------------- SIM ----

//  Landing time of `op` given the landing time of its stream predecessor.
static uint64_t s_sim_plan(s_op_t *op, uint64_t prev_land)
{
    if (op->stream->stalled || prev_land == S_NONE)
        return S_NONE;
    uint64_t ready = s_max(op->queued_ns, prev_land);
    if (op->kind == S_OP_WAIT && op->target->done_seq < op->target_seq) {
        if (op->dep->land_ns == S_NONE)
            return S_NONE;
        ready = s_max(ready, op->dep->land_ns);
    }
    return kvt_gpu_sat_add(ready, op->cost_ns);
}

static uint64_t s_sim_base(s_hstream_t *s)
{
    return s_max(s->last_land_ns, s->release_ns);
}

//  Recomputes every pending op's landing time (queue order).
static void s_sim_replan(s_host_t *host)
{
    uint64_t epoch = ++host->epoch;
    for (s_op_t *op = host->ghead; op; op = op->gnext) {
        s_hstream_t *s = op->stream;
        if (s->plan_epoch != epoch) {
            s->plan_epoch = epoch;
            s->plan_land = s_sim_base(s);
        }
        op->land_ns = s_sim_plan(op, s->plan_land);
        s->plan_land = op->land_ns;
    }
}

static void s_sim_land(kvt_gpu_t *gpu, s_op_t *op)
{
    s_host_t *host = s_host(gpu);
    bool failed = s_fails(op);
    if (!failed)
        s_execute(op);
    op->stream->last_land_ns = op->land_ns;
    if (op->gprev)
        op->gprev->gnext = op->gnext;
    else
        host->ghead = op->gnext;
    if (op->gnext)
        op->gnext->gprev = op->gprev;
    else
        host->gtail = op->gprev;
    s_complete(gpu, op, failed);
}

//  Lands every op due at `now`. Returns how many landed.
static int s_sim_progress(kvt_gpu_t *gpu, uint64_t now)
{
    s_host_t *host = s_host(gpu);
    int landed = 0;
    s_op_t *next;
    for (s_op_t *op = host->ghead; op; op = next) {
        next = op->gnext;
        if (op->land_ns != S_NONE && op->land_ns <= now) {
            s_sim_land(gpu, op);
            landed++;
        }
    }
    return landed;
}

//  Lands, now, the ops (stream s, seq) depends on. 0, or NOT_READY when one
//  of them is on a stalled stream (nothing is landed then).
static int s_sim_force(kvt_gpu_t *gpu, s_hstream_t *s, uint64_t seq, uint64_t now)
{
    s_host_t *host = s_host(gpu);
    bool blocked = false;
    s->force_seq = seq;
    for (s_op_t *op = host->gtail; op; op = op->gprev) {
        s_hstream_t *os = op->stream;
        op->forced = op->seq <= os->force_seq;
        if (!op->forced)
            continue;
        blocked |= os->stalled;
        if (op->kind == S_OP_WAIT && op->target->done_seq < op->target_seq)
            op->target->force_seq = s_max(op->target->force_seq, op->target_seq);
    }
    s->force_seq = 0;
    for (s_op_t *op = host->ghead; op; op = op->gnext) {
        op->stream->force_seq = 0;
        if (op->kind == S_OP_WAIT)
            op->target->force_seq = 0;
    }
    if (blocked)
        return KVT_GPU_NOT_READY;
    s_op_t *next;
    for (s_op_t *op = host->ghead; op; op = next) {
        next = op->gnext;
        if (op->forced) {
            if (op->land_ns > now)
                op->land_ns = now;
            s_sim_land(gpu, op);
        }
    }
    gpu->stats.sim_forced++;
    s_sim_replan(host);
    return 0;
}

//  SIM synchronize on (s, seq), under the lock.
static int s_sim_sync(kvt_gpu_t *gpu, s_hstream_t *s, uint64_t seq)
{
    uint64_t now = s_now(gpu);
    s_sim_progress(gpu, now);
    int rc = s_status(s, seq);
    if (rc != KVT_GPU_NOT_READY)
        return rc;
    rc = s_sim_force(gpu, s, seq, now);
    if (rc != 0) {
        kvt_gpu_fail(KVT_GPU_NOT_READY, "synchronize: stream '%s' waits behind a stalled stream",
                     s->name);
        return rc;
    }
    rc = s_status(s, seq);
    return rc == 0 ? KVT_GPU_FORCED : rc;
}

// ---------------------------------------------------------------- LIVE ----

static void s_live_wait_done(s_host_t *host, kvt_gpu_t *gpu)
{
    host->done_waiters++;
    pthread_cond_wait(&host->cv_done, &gpu->mu);
    host->done_waiters--;
}

static void *s_worker(void *arg)
{
    s_hstream_t *s = arg;
    kvt_gpu_t *gpu = s->gpu;
    s_host_t *host = s_host(gpu);
    pthread_mutex_lock(&gpu->mu);
    while (true) {
        s_op_t *op = s->head;
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
        if (op->kind == S_OP_WAIT && op->target->done_seq < op->target_seq) {
            s_live_wait_done(host, gpu);
            continue;
        }
        bool failed = s_fails(op);
        if (!failed && op->kind != S_OP_WAIT) {
            pthread_mutex_unlock(&gpu->mu);
            s_execute(op);
            pthread_mutex_lock(&gpu->mu);
        }
        s_complete(gpu, op, failed);
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
    s_hstream_t *s = calloc(1, sizeof *s);
    if (!s)
        return kvt_gpu_fail(KVT_GPU_ENOMEM, "stream_new: out of memory");
    s->gpu = gpu;
    kvt_gpu_fmt(s->name, sizeof s->name, "%s", fs->name);
    s->refs = 1;
    s->fail_seq = S_NONE;
    pthread_cond_init(&s->cv_work, NULL);
    if (!s_host(gpu)->sim) {
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
    s_host_t *host = s_host(gpu);
    s_hstream_t *s = fs->impl;
    pthread_mutex_lock(&gpu->mu);
    if (s->stalled) {
        s->stalled = false;
        if (host->sim) {
            s->release_ns = s_now(gpu);
            s_sim_replan(host);
        }
    }
    if (host->sim) {
        //  Cannot block virtual time: land the queue now, unless it waits
        //  behind another stalled stream (then it lands when that ends).
        if (s->done_seq < s->queued_seq)
            s_sim_sync(gpu, s, s->queued_seq);
        s_unref(s);
        pthread_mutex_unlock(&gpu->mu);
        fs->impl = NULL;
        return;
    }
    s->stop = true;
    pthread_cond_signal(&s->cv_work);
    pthread_mutex_unlock(&gpu->mu);
    pthread_join(s->thread, NULL);
    pthread_mutex_lock(&gpu->mu);
    s_unref(s);
    pthread_mutex_unlock(&gpu->mu);
    fs->impl = NULL;
}

static int s_wait_for(kvt_gpu_t *gpu, s_hstream_t *s, uint64_t seq)
{
    s_host_t *host = s_host(gpu);
    if (host->sim)
        return s_sim_sync(gpu, s, seq);
    while (s->done_seq < seq)
        s_live_wait_done(host, gpu);
    return s_status(s, seq);
}

static int s_stream_query(kvt_gpu_stream_t *fs)
{
    kvt_gpu_t *gpu = fs->gpu;
    s_hstream_t *s = fs->impl;
    pthread_mutex_lock(&gpu->mu);
    if (s_host(gpu)->sim)
        s_sim_progress(gpu, s_now(gpu));
    int rc = s_status(s, s->queued_seq);
    pthread_mutex_unlock(&gpu->mu);
    return rc;
}

static int s_stream_sync(kvt_gpu_stream_t *fs)
{
    kvt_gpu_t *gpu = fs->gpu;
    s_hstream_t *s = fs->impl;
    pthread_mutex_lock(&gpu->mu);
    int rc = s_wait_for(gpu, s, s->queued_seq);
    pthread_mutex_unlock(&gpu->mu);
    return rc;
}

//  Queues `op` on `fs` (takes ownership on every path).
static int s_enqueue(kvt_gpu_stream_t *fs, s_op_t *op, size_t bytes)
{
    kvt_gpu_t *gpu = fs->gpu;
    s_host_t *host = s_host(gpu);
    s_hstream_t *s = fs->impl;
    pthread_mutex_lock(&gpu->mu);
    uint64_t now = 0;
    if (host->sim) {
        now = s_now(gpu);
        s_sim_progress(gpu, now);
    }
    if (s->fail_seq != S_NONE && s->done_seq >= s->fail_seq) {
        int rc = kvt_gpu_fail(KVT_GPU_EFAULT, "stream '%s' failed earlier (op %llu: %s)", s->name,
                              (unsigned long long)s->fail_seq, s->fail_why);
        if (op->kind == S_OP_WAIT)
            s_unref(op->target);
        pthread_mutex_unlock(&gpu->mu);
        free(op->copy);
        free(op);
        return rc;
    }
    op->stream = s;
    s->refs++;
    op->seq = ++s->queued_seq;
    if (op->kind != S_OP_WAIT && s->fail_next > 0) {
        s->fail_next--;
        op->inject_fail = true;
    }
    if (host->sim) {
        op->queued_ns = now;
        op->cost_ns = op->kind == S_OP_COPY ? kvt_gpu_sim_cost_ns(gpu, bytes)
                      : op->kind == S_OP_FN ? op->cost_ns
                                            : 0;
        if (op->kind == S_OP_WAIT)
            for (s_op_t *d = op->target->head; d; d = d->next)
                if (d->seq == op->target_seq)
                    op->dep = d;
        op->land_ns = s_sim_plan(op, s->tail ? s->tail->land_ns : s_sim_base(s));
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
    if (!host->sim)
        pthread_cond_signal(&s->cv_work);
    pthread_mutex_unlock(&gpu->mu);
    return 0;
}

static int s_copy(kvt_gpu_stream_t *fs, kvt_gpu_copy_t *copy, bool pinned)
{
    s_op_t *op = calloc(1, sizeof *op);
    if (!op) {
        free(copy);
        return kvt_gpu_fail(KVT_GPU_ENOMEM, "host: out of memory");
    }
    op->kind = S_OP_COPY;
    op->copy = copy;
    return s_enqueue(fs, op, copy->bytes);
}

static int s_host_fn(kvt_gpu_stream_t *fs, kvt_gpu_host_fn *fn, void *arg, uint64_t sim_cost_ns)
{
    s_op_t *op = calloc(1, sizeof *op);
    if (!op)
        return kvt_gpu_fail(KVT_GPU_ENOMEM, "host: out of memory");
    op->kind = S_OP_FN;
    op->fn = fn;
    op->arg = arg;
    op->cost_ns = sim_cost_ns;
    return s_enqueue(fs, op, 0);
}

// -------------------------------------------------------------- events ----

static int s_event_new(kvt_gpu_event_t *ev)
{
    s_hevent_t *e = calloc(1, sizeof *e);
    if (!e)
        return kvt_gpu_fail(KVT_GPU_ENOMEM, "event_new: out of memory");
    ev->impl = e;
    return 0;
}

static void s_event_destroy(kvt_gpu_event_t *ev)
{
    s_hevent_t *e = ev->impl;
    if (!e)
        return;
    pthread_mutex_lock(&ev->gpu->mu);
    if (e->stream)
        s_unref(e->stream);
    pthread_mutex_unlock(&ev->gpu->mu);
    free(e);
    ev->impl = NULL;
}

static int s_event_record(kvt_gpu_event_t *ev, kvt_gpu_stream_t *fs)
{
    kvt_gpu_t *gpu = ev->gpu;
    s_hevent_t *e = ev->impl;
    s_hstream_t *s = fs->impl;
    pthread_mutex_lock(&gpu->mu);
    s->refs++;
    if (e->stream)
        s_unref(e->stream);
    e->stream = s;
    e->seq = s->queued_seq;
    pthread_mutex_unlock(&gpu->mu);
    return 0;
}

static int s_stream_wait(kvt_gpu_stream_t *fs, kvt_gpu_event_t *ev)
{
    kvt_gpu_t *gpu = fs->gpu;
    s_hevent_t *e = ev->impl;
    s_hstream_t *s = fs->impl;
    pthread_mutex_lock(&gpu->mu);
    s_hstream_t *target = e->stream;
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
    s_op_t *op = calloc(1, sizeof *op);
    if (!op) {
        pthread_mutex_lock(&gpu->mu);
        s_unref(target);
        pthread_mutex_unlock(&gpu->mu);
        return kvt_gpu_fail(KVT_GPU_ENOMEM, "host: out of memory");
    }
    op->kind = S_OP_WAIT;
    op->target = target;
    op->target_seq = seq;
    return s_enqueue(fs, op, 0);
}

static int s_event_query(kvt_gpu_event_t *ev)
{
    kvt_gpu_t *gpu = ev->gpu;
    s_hevent_t *e = ev->impl;
    pthread_mutex_lock(&gpu->mu);
    if (s_host(gpu)->sim)
        s_sim_progress(gpu, s_now(gpu));
    int rc = s_status(e->stream, e->seq);
    pthread_mutex_unlock(&gpu->mu);
    return rc;
}

static int s_event_sync(kvt_gpu_event_t *ev)
{
    kvt_gpu_t *gpu = ev->gpu;
    s_hevent_t *e = ev->impl;
    pthread_mutex_lock(&gpu->mu);
    int rc = e->stream ? s_wait_for(gpu, e->stream, e->seq) : 0;
    pthread_mutex_unlock(&gpu->mu);
    return rc;
}

static uint64_t s_event_eta(kvt_gpu_event_t *ev)
{
    kvt_gpu_t *gpu = ev->gpu;
    s_hevent_t *e = ev->impl;
    if (!s_host(gpu)->sim)
        return S_NONE;
    pthread_mutex_lock(&gpu->mu);
    uint64_t now = s_now(gpu);
    s_sim_progress(gpu, now);
    uint64_t eta = 0;
    if (e->stream && e->seq > 0) {
        eta = now;
        for (s_op_t *op = e->stream->head; op; op = op->next)
            if (op->seq == e->seq)
                eta = op->land_ns;
    }
    pthread_mutex_unlock(&gpu->mu);
    return eta;
}

// ------------------------------------------------------- SIM and faults ----

static int s_progress(kvt_gpu_t *gpu)
{
    if (!s_host(gpu)->sim)
        return 0;
    pthread_mutex_lock(&gpu->mu);
    int landed = s_sim_progress(gpu, s_now(gpu));
    pthread_mutex_unlock(&gpu->mu);
    return landed;
}

static uint64_t s_next_eta(kvt_gpu_t *gpu)
{
    s_host_t *host = s_host(gpu);
    if (!host->sim)
        return S_NONE;
    pthread_mutex_lock(&gpu->mu);
    s_sim_progress(gpu, s_now(gpu));
    uint64_t eta = S_NONE;
    for (s_op_t *op = host->ghead; op; op = op->gnext)
        if (op->land_ns < eta)
            eta = op->land_ns;
    pthread_mutex_unlock(&gpu->mu);
    return eta;
}

static int s_inject(kvt_gpu_stream_t *fs, kvt_gpu_fault_t fault, uint32_t count)
{
    kvt_gpu_t *gpu = fs->gpu;
    s_host_t *host = s_host(gpu);
    s_hstream_t *s = fs->impl;
    if (fault == KVT_GPU_FAULT_FAIL && count == 0)
        return kvt_gpu_fail(KVT_GPU_EINVAL, "stream_inject: FAIL needs count >= 1");
    pthread_mutex_lock(&gpu->mu);
    uint64_t now = 0;
    if (host->sim) {
        now = s_now(gpu);
        s_sim_progress(gpu, now);
    }
    if (fault == KVT_GPU_FAULT_FAIL)
        s->fail_next += count;
    else if (fault == KVT_GPU_FAULT_STALL && !s->stalled) {
        s->stalled = true;
        if (host->sim)
            s_sim_replan(host);
    } else if (fault == KVT_GPU_FAULT_NONE && s->stalled) {
        s->stalled = false;
        if (host->sim) {
            s->release_ns = now;
            s_sim_replan(host);
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
