/*  kvt_gpu_devrt.c — the device backend, one implementation for CUDA and
    HIP over a table of runtime calls (kvt_gpu_devrt.h; the tables are in
    kvt_gpu_cuda.c and kvt_gpu_hip.c). It includes no runtime header.

    Streams are non-blocking runtime streams, events carry no timing. The
    device is selected on every call (it is per thread in both runtimes, and
    the caller's own code may change it). A gather / scatter is one copy
    batch, sent on the first of three paths that applies (kvt_gpu_dispatch):
    one kernel launch over every segment (the table in a pinned ring the
    kernel reads in place, the chunk buffer read or written in place), one
    batched call, or one async copy per merged segment. A kernel launch or a
    batch that the runtime refuses turns that path off for the device and
    the batch goes down to the next path. Which of kernel and batch serves
    which segment size is measured at open (a micro-benchmark) unless the
    options say.

    A failed call is atomic for the caller: when the runtime refuses a
    segment after earlier ones of the same call were queued (or refuses a
    batch, which does not promise that it queued nothing), the stream is
    settled (synchronized) before the call returns and marked failed, so
    nothing that touches the caller's buffers is still running. A refusal of
    the first segment queued nothing and leaves the stream usable.
*/
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvt_gpu_devrt.h"
#include "kvt_gpu_kernel.h"

#define KVT_KTAB_RING         (256u << 10) //  bytes of a stream's pinned table ring
#define KVT_KTAB_SLOTS        32u          //  kernel tables in flight per stream
#define KVT_DEFAULT_CROSSOVER 32768u       //  kernel up to this segment size when not measured
#define KVT_BENCH_SEGS        64u          //  segments of one micro-benchmark copy
#define KVT_BENCH_REPS        3u           //  timed repetitions (after one warm-up)
#define KVT_BENCH_NSIZES      7u           //  segment sizes measured

static const size_t s_bench_size[KVT_BENCH_NSIZES] = {2048,  4096,  8192,  16384,
                                                      32768, 65536, 131072};

//  The device state (gpu->impl).
typedef struct {
    const kvt_devrt_t *rt; //  the runtime's calls
    int device;            //  device ordinal
    char name[256];        //  device name
    size_t memory;         //  device memory, bytes
    atomic_bool batch_ok;  //  the batched copy accepted so far (any thread)
    atomic_bool kernel_ok; //  the kernel is loaded and no launch was refused (any thread)
    void *module;          //  the loaded kernel image, or NULL
    void *fn;              //  the kernel in it
    size_t crossover;      //  AUTO: the kernel serves segments up to this size
} s_dev_t;

//  A table span in a stream's ring, in use until its event completes.
typedef struct {
    size_t at;  //  offset in the ring
    size_t len; //  bytes (16-byte multiple)
} s_span_t;

//  A stream (fs->impl).
typedef struct {
    void *h;                       //  the runtime stream
    char *ring;                    //  pinned table ring, KVT_KTAB_RING bytes (NULL until used)
    s_span_t span[KVT_KTAB_SLOTS]; //  tables in flight, oldest at `first`
    void *event[KVT_KTAB_SLOTS];   //  recorded after each span's launch (created on use)
    uint32_t first;                //  oldest span in flight
    uint32_t count;                //  spans in flight
    pthread_mutex_t mu;            //  guards the ring (two threads may queue on one stream)
} s_strm_t;

static void s_kernel_setup(kvt_gpu_t *gpu);

//  The runtime stream of a front stream.
static void *s_h(const kvt_gpu_stream_t *fs)
{
    return ((s_strm_t *)fs->impl)->h;
}

//  Sets the last error for a refused runtime call and returns EDEVICE.
static int s_err(const kvt_devrt_t *rt, const char *call, int rc)
{
    return kvt_gpu_fail(KVT_GPU_EDEVICE, "%s: %s: %s (%s)", rt->name, call, rt->error_name(rc),
                        rt->error_string(rc));
}

//  s_err for a mirrored call named by its suffix ("Malloc" -> cudaMalloc).
static int s_err_rt(const kvt_devrt_t *rt, const char *suffix, int rc)
{
    char call[64];
    kvt_gpu_fmt(call, sizeof call, "%s%s", rt->name, suffix);
    return s_err(rt, call, rc);
}

//  Selects the device on the calling thread.
static int s_bind(kvt_gpu_t *gpu)
{
    s_dev_t *d = gpu->impl;
    const kvt_devrt_t *rt = d->rt;
    int current = -1;
    if (rt->get_device(&current) == rt->ok && current == d->device)
        return 0;
    int rc = rt->set_device(d->device);
    return rc == rt->ok ? 0 : s_err_rt(rt, "SetDevice", rc);
}

int kvt_gpu_devrt_probe(const kvt_devrt_t *rt, int *count, char *why, size_t why_len)
{
    //  The count is left untouched on error (CUDA): start from 0.
    int n = 0;
    int rc = rt->get_device_count(&n);
    if (rc != rt->ok) {
        kvt_gpu_fmt(why, why_len, "no usable device (%s: %s)", rt->error_name(rc),
                    rt->error_string(rc));
        (void)rt->get_last_error();
        *count = 0;
        return KVT_GPU_ENODEV;
    }
    *count = n;
    kvt_gpu_fmt(why, why_len, "%d device(s)", n);
    return 0;
}

static int s_init(kvt_gpu_t *gpu)
{
    const kvt_devrt_t *rt = gpu->rt;
    int count = 0;
    char why[160];
    if (kvt_gpu_devrt_probe(rt, &count, why, sizeof why) != 0 || count <= 0)
        return kvt_gpu_fail(KVT_GPU_ENODEV, "%s: %s", rt->name, why);
    if (gpu->opts.device >= count)
        return kvt_gpu_fail(KVT_GPU_ENODEV, "%s: device %d requested, %d present", rt->name,
                            gpu->opts.device, count);
    s_dev_t *d = calloc(1, sizeof *d);
    if (!d)
        return kvt_gpu_fail(KVT_GPU_ENOMEM, "%s: out of memory", rt->name);
    d->rt = rt;
    d->device = gpu->opts.device;
    atomic_init(&d->batch_ok, true);
    atomic_init(&d->kernel_ok, false);
    gpu->impl = d;
    int rc = s_bind(gpu);
    if (rc != 0)
        goto cleanup;
    char runtime[64] = "";
    int drc =
        rt->device_info(d->device, d->name, sizeof d->name, &d->memory, runtime, sizeof runtime);
    if (drc != rt->ok) {
        rc = s_err_rt(rt, "GetDeviceProperties", drc);
        goto cleanup;
    }
    kvt_gpu_fmt(gpu->device_desc, sizeof gpu->device_desc, "device %d: %s, %.1f GiB, %s", d->device,
                d->name, (double)d->memory / (1u << 30), runtime);
    s_kernel_setup(gpu);
    return 0;

cleanup:
    free(d);
    gpu->impl = NULL;
    return rc;
}

static void s_fini(kvt_gpu_t *gpu)
{
    s_dev_t *d = gpu->impl;
    if (d && d->module && d->rt->module_unload && s_bind(gpu) == 0)
        d->rt->module_unload(d->module);
    free(gpu->impl);
    gpu->impl = NULL;
}

static int s_dev_alloc(kvt_gpu_t *gpu, size_t bytes, void **out)
{
    const kvt_devrt_t *rt = gpu->rt;
    int rc = s_bind(gpu);
    if (rc != 0)
        return rc;
    int drc = rt->dev_malloc(out, bytes);
    if (drc != rt->ok)
        return s_err_rt(rt, "Malloc", drc);
    //  Our streams do not synchronise with the null stream: wait for the
    //  memset here.
    drc = rt->memset(*out, 0, bytes);
    if (drc == rt->ok)
        drc = rt->device_sync();
    if (drc != rt->ok) {
        rt->dev_free(*out);
        *out = NULL;
        return s_err_rt(rt, "Memset", drc);
    }
    return 0;
}

static void s_dev_free(kvt_gpu_t *gpu, void *ptr)
{
    if (s_bind(gpu) == 0)
        gpu->rt->dev_free(ptr);
}

static int s_host_alloc(kvt_gpu_t *gpu, size_t bytes, void **out)
{
    const kvt_devrt_t *rt = gpu->rt;
    int rc = s_bind(gpu);
    if (rc != 0)
        return rc;
    int drc = rt->host_alloc(out, bytes);
    if (drc != rt->ok)
        return s_err(rt, rt->host_alloc_call, drc);
    memset(*out, 0, bytes);
    return 0;
}

static void s_host_free(kvt_gpu_t *gpu, void *ptr)
{
    if (s_bind(gpu) == 0)
        gpu->rt->host_free(ptr);
}

static int s_host_register(kvt_gpu_t *gpu, void *ptr, size_t bytes)
{
    const kvt_devrt_t *rt = gpu->rt;
    if (!rt->host_register || !rt->host_unregister)
        return kvt_gpu_fail(KVT_GPU_EUNSUPPORTED, "%s: no host registration in this runtime",
                            rt->name);
    int rc = s_bind(gpu);
    if (rc != 0)
        return rc;
    int drc = rt->host_register(ptr, bytes);
    return drc == rt->ok ? 0 : s_err(rt, rt->host_register_call, drc);
}

static void s_host_unregister(kvt_gpu_t *gpu, void *ptr)
{
    if (s_bind(gpu) == 0 && gpu->rt->host_unregister)
        gpu->rt->host_unregister(ptr);
}

static int s_pci_bus_id(kvt_gpu_t *gpu, char *buf, size_t len)
{
    s_dev_t *d = gpu->impl;
    const kvt_devrt_t *rt = gpu->rt;
    if (!rt->pci_bus_id)
        return kvt_gpu_fail(KVT_GPU_EUNSUPPORTED, "%s: no PCI bus id in this runtime", rt->name);
    int drc = rt->pci_bus_id(d->device, buf, len > 64 ? 64 : (int)len);
    return drc == rt->ok ? 0 : s_err_rt(rt, "DeviceGetPCIBusId", drc);
}

// -------------------------------------------------------------- streams ----

static int s_stream_new(kvt_gpu_stream_t *fs)
{
    const kvt_devrt_t *rt = fs->gpu->rt;
    int rc = s_bind(fs->gpu);
    if (rc != 0)
        return rc;
    s_strm_t *st = calloc(1, sizeof *st);
    if (!st)
        return kvt_gpu_fail(KVT_GPU_ENOMEM, "%s: out of memory", rt->name);
    int drc = rt->stream_create(&st->h);
    if (drc != rt->ok) {
        free(st);
        return s_err_rt(rt, "StreamCreateWithFlags", drc);
    }
    pthread_mutex_init(&st->mu, NULL);
    fs->impl = st;
    return 0;
}

//  Drains and frees a stream's runtime objects (its ring once drained).
static void s_strm_free(const kvt_devrt_t *rt, s_strm_t *st)
{
    rt->stream_sync(st->h);
    for (uint32_t k = 0; k < KVT_KTAB_SLOTS; k++)
        if (st->event[k])
            rt->event_destroy(st->event[k]);
    if (st->ring)
        rt->host_free(st->ring);
    rt->stream_destroy(st->h);
    pthread_mutex_destroy(&st->mu);
    free(st);
}

static void s_stream_destroy(kvt_gpu_stream_t *fs)
{
    if (s_bind(fs->gpu) == 0)
        s_strm_free(fs->gpu->rt, fs->impl);
    else
        free(fs->impl);
    fs->impl = NULL;
}

//  Maps a query / synchronize result.
static int s_status(const kvt_devrt_t *rt, const char *what, const char *name, int rc)
{
    if (rc == rt->ok)
        return 0;
    if (rc == rt->not_ready)
        return KVT_GPU_NOT_READY;
    return kvt_gpu_fail(KVT_GPU_EFAULT, "%s: %s '%s': %s (%s)", rt->name, what, name,
                        rt->error_name(rc), rt->error_string(rc));
}

static int s_stream_query(kvt_gpu_stream_t *fs)
{
    const kvt_devrt_t *rt = fs->gpu->rt;
    int rc = s_bind(fs->gpu);
    return rc != 0 ? rc : s_status(rt, "stream", fs->name, rt->stream_query(s_h(fs)));
}

static int s_stream_sync(kvt_gpu_stream_t *fs)
{
    const kvt_devrt_t *rt = fs->gpu->rt;
    int rc = s_bind(fs->gpu);
    return rc != 0 ? rc : s_status(rt, "stream", fs->name, rt->stream_sync(s_h(fs)));
}

// --------------------------------------------------------------- events ----

static int s_event_new(kvt_gpu_event_t *ev)
{
    const kvt_devrt_t *rt = ev->gpu->rt;
    int rc = s_bind(ev->gpu);
    if (rc != 0)
        return rc;
    void *e = NULL;
    int drc = rt->event_create(&e);
    if (drc != rt->ok)
        return s_err_rt(rt, "EventCreateWithFlags", drc);
    ev->impl = e;
    return 0;
}

static void s_event_destroy(kvt_gpu_event_t *ev)
{
    if (ev->impl && s_bind(ev->gpu) == 0)
        ev->gpu->rt->event_destroy(ev->impl);
    ev->impl = NULL;
}

static int s_event_record(kvt_gpu_event_t *ev, kvt_gpu_stream_t *fs)
{
    const kvt_devrt_t *rt = ev->gpu->rt;
    int rc = s_bind(ev->gpu);
    if (rc != 0)
        return rc;
    int drc = rt->event_record(ev->impl, s_h(fs));
    return drc == rt->ok ? 0 : s_err_rt(rt, "EventRecord", drc);
}

static int s_stream_wait(kvt_gpu_stream_t *fs, kvt_gpu_event_t *ev)
{
    const kvt_devrt_t *rt = fs->gpu->rt;
    int rc = s_bind(fs->gpu);
    if (rc != 0)
        return rc;
    int drc = rt->stream_wait_event(s_h(fs), ev->impl);
    return drc == rt->ok ? 0 : s_err_rt(rt, "StreamWaitEvent", drc);
}

static int s_event_query(kvt_gpu_event_t *ev)
{
    const kvt_devrt_t *rt = ev->gpu->rt;
    int rc = s_bind(ev->gpu);
    return rc != 0 ? rc : s_status(rt, "event", "query", rt->event_query(ev->impl));
}

static int s_event_sync(kvt_gpu_event_t *ev)
{
    const kvt_devrt_t *rt = ev->gpu->rt;
    int rc = s_bind(ev->gpu);
    return rc != 0 ? rc : s_status(rt, "event", "synchronize", rt->event_sync(ev->impl));
}

// --------------------------------------------------------------- copies ----

//  Settles `fs` after a call that may have queued part of its work failed
//  (`why` says what): returns once nothing queued on it is still running.
//  0 then; else the runtime cannot even synchronize (a sticky error: the
//  context is lost and its work stopped, nothing more can be proven), and the
//  stream is marked failed, the failure logged at level 0 and returned.
static int s_settle(kvt_gpu_stream_t *fs, const char *why)
{
    const kvt_devrt_t *rt = fs->gpu->rt;
    int drc = rt->stream_sync(s_h(fs));
    if (drc == rt->ok)
        return 0;
    s_err_rt(rt, "StreamSynchronize", drc);
    char what[240];
    kvt_gpu_fmt(what, sizeof what, "%s; then waiting for the stream failed: %s", why,
                kvt_gpu_last_error());
    kvt_gpu_log(fs->gpu, 0, "stream '%s': %s", fs->name, what);
    kvt_gpu_stream_fail(fs, what);
    return kvt_gpu_fail(KVT_GPU_EDEVICE, "%s", what);
}

//  Queues a batch one segment at a time. When segment k > 0 is refused,
//  segments 0..k-1 are already queued and the caller will free or reuse its
//  buffer once we return an error: the stream is settled first and marked
//  failed. Returns 0 or the refusal's code.
static int s_issue(kvt_gpu_stream_t *fs, const kvt_gpu_copy_t *copy)
{
    const kvt_devrt_t *rt = fs->gpu->rt;
    for (uint32_t k = 0; k < copy->count; k++) {
        int drc = rt->memcpy_async(copy->dst[k], copy->src[k], copy->len[k], copy->dir, s_h(fs));
        if (drc == rt->ok)
            continue;
        int rc = s_err_rt(rt, "MemcpyAsync", drc);
        if (k == 0)
            return rc;
        char why[240];
        kvt_gpu_fmt(why, sizeof why, "copy segment %u of %u refused with %u queued (%s)", k + 1,
                    copy->count, k, kvt_gpu_last_error());
        if (s_settle(fs, why) != 0)
            return rc; //  failed and logged, the last error says both
        kvt_gpu_stream_fail(fs, why);
        return kvt_gpu_fail(rc, "%s; waited for the stream, which is now failed", why);
    }
    return 0;
}

//  The batched call: 0 when it queued the batch; 1 when it was not used or
//  refused and the stream is settled (the caller queues per segment); or a
//  negative code when settling after a refusal failed.
//  Only ever called for a path kvt_gpu_dispatch chose, which takes the
//  batch for pinned host memory only (one place decides).
static int s_batch(kvt_gpu_stream_t *fs, const kvt_gpu_copy_t *copy)
{
    kvt_gpu_t *gpu = fs->gpu;
    s_dev_t *d = gpu->impl;
    const kvt_devrt_t *rt = d->rt;
    if (!rt->memcpy_batch || copy->count < 2 || !atomic_load(&d->batch_ok))
        return 1;
    size_t fail_idx = SIZE_MAX;
    int drc = rt->memcpy_batch(copy, s_h(fs), &fail_idx);
    if (drc == rt->ok)
        return 0;
    (void)rt->get_last_error();
    if (atomic_exchange(&d->batch_ok, false))
        kvt_gpu_log(gpu, 1, "%s: batched copy refused (%s); one copy per segment", rt->name,
                    rt->error_name(drc));
    //  A refused batch may have queued some of its copies: wait for the
    //  stream before queuing the segments one by one (a segment copied twice
    //  writes the same bytes again).
    char why[200];
    if (fail_idx == SIZE_MAX)
        kvt_gpu_fmt(why, sizeof why, "batched copy of %u segments refused (%s)", copy->count,
                    rt->error_name(drc));
    else
        kvt_gpu_fmt(why, sizeof why, "batched copy of %u segments refused at copy %zu (%s)",
                    copy->count, fail_idx, rt->error_name(drc));
    int rc = s_settle(fs, why);
    return rc != 0 ? rc : 1;
}

// --------------------------------------------------------------- kernel ----

//  A span of `len` bytes in the stream's table ring, or NULL when the ring
//  cannot be had or is full (the caller copies another way; nothing
//  blocks). Spans in flight whose launch completed are reclaimed first.
//  *slot is the span's index; s_ring_commit makes it in flight.
static char *s_ring_reserve(const kvt_devrt_t *rt, s_strm_t *st, size_t len, uint32_t *slot,
                            size_t *at_out)
{
    if (!st->ring) {
        void *p = NULL;
        if (rt->host_alloc(&p, KVT_KTAB_RING) != rt->ok) {
            (void)rt->get_last_error();
            return NULL;
        }
        st->ring = p;
    }
    while (st->count > 0 && rt->event_query(st->event[st->first]) == rt->ok) {
        st->first = (st->first + 1) % KVT_KTAB_SLOTS;
        st->count--;
    }
    len = (len + 15) & ~(size_t)15;
    if (st->count == KVT_KTAB_SLOTS || len > KVT_KTAB_RING)
        return NULL;
    *slot = (st->first + st->count) % KVT_KTAB_SLOTS;
    if (!st->event[*slot] && rt->event_create(&st->event[*slot]) != rt->ok) {
        (void)rt->get_last_error();
        st->event[*slot] = NULL;
        return NULL;
    }
    size_t at = 0;
    if (st->count > 0) {
        size_t tail = st->span[st->first].at;
        const s_span_t *last = &st->span[(st->first + st->count - 1) % KVT_KTAB_SLOTS];
        size_t head = last->at + last->len;
        if (head > tail && head + len <= KVT_KTAB_RING)
            at = head; //  after the newest
        else if (head > tail && len <= tail)
            at = 0; //  wraps to the front
        else if (head <= tail && head + len <= tail)
            at = head; //  wrapped: between the newest and the oldest
        else
            return NULL;
    }
    st->span[*slot].at = at;
    st->span[*slot].len = len;
    *at_out = at;
    return st->ring + at;
}

//  Queues one launch over the table `tab` (built in the ring span `slot`)
//  on `h`. 0 when launched; 1 when refused (nothing queued: the kernel is
//  turned off for the device, the caller copies another way).
static int s_launch(kvt_gpu_t *gpu, s_strm_t *st, uint32_t slot, const uint64_t *tab, bool to_host)
{
    s_dev_t *d = gpu->impl;
    const kvt_devrt_t *rt = d->rt;
    uint32_t grid = kvt_gpu_kernel_grid(tab[2], gpu->opts.kernel_max_blocks);
    int drc = rt->launch(d->fn, grid, KVT_GPU_KERNEL_THREADS, tab, to_host, st->h);
    if (drc != rt->ok) {
        (void)rt->get_last_error();
        if (atomic_exchange(&d->kernel_ok, false))
            kvt_gpu_log(gpu, 1, "%s: %s refused (%s); kernel off, batched or per-segment copies",
                        rt->name, rt->launch_call, rt->error_name(drc));
        return 1;
    }
    st->count++;
    drc = rt->event_record(st->event[slot], st->h);
    if (drc != rt->ok) {
        //  The span cannot be reclaimed by its event: wait for the launch
        //  and give it back now.
        (void)rt->get_last_error();
        if (rt->stream_sync(st->h) == rt->ok)
            st->count--;
        else
            (void)rt->get_last_error();
    }
    return 0;
}

//  The kernel path of a gather / scatter: 0 queued; 1 not used (ring full,
//  launch refused: nothing queued, the caller falls back).
static int s_kernel(kvt_gpu_stream_t *fs, const kvt_gpu_copy_t *copy)
{
    kvt_gpu_t *gpu = fs->gpu;
    const kvt_devrt_t *rt = gpu->rt;
    s_strm_t *st = fs->impl;
    uint32_t nent = kvt_gpu_ktab_nentries(gpu);
    size_t bytes = kvt_gpu_ktab_bytes(copy->njobs, nent, copy->nblocks);
    kvt_gpu_kent_t *ent = malloc((size_t)nent * sizeof *ent);
    uint32_t slot = 0;
    size_t at = 0;
    int rc = 1;
    pthread_mutex_lock(&st->mu);
    char *tab = ent ? s_ring_reserve(rt, st, bytes, &slot, &at) : NULL;
    if (tab) {
        kvt_gpu_ktab_entries(gpu, ent, nent);
        kvt_gpu_ktab_fill((uint64_t *)(void *)tab, ent, nent, copy->job, copy->njobs);
        rc = s_launch(gpu, st, slot, (const uint64_t *)(void *)tab, copy->dir == KVT_GPU_D2H);
    }
    pthread_mutex_unlock(&st->mu);
    free(ent);
    return rc;
}

//  The dispatch state of the device now.
static kvt_gpu_dispatch_t s_dispatch_of(const kvt_gpu_t *gpu)
{
    s_dev_t *d = gpu->impl;
    kvt_gpu_dispatch_t disp = {
        .path = gpu->opts.copy_path,
        .kernel_ready = d->fn && atomic_load(&d->kernel_ok),
        .batch_ready = d->rt->memcpy_batch && atomic_load(&d->batch_ok),
        .crossover_bytes = d->crossover,
    };
    return disp;
}

static int s_copy(kvt_gpu_stream_t *fs, kvt_gpu_copy_t *copy, bool pinned)
{
    kvt_gpu_t *gpu = fs->gpu;
    int rc = s_bind(gpu);
    if (rc != 0)
        goto cleanup;
    kvt_gpu_dispatch_t disp = s_dispatch_of(gpu);
    uint64_t segs = copy->job ? copy->nblocks * kvt_gpu_ktab_nentries(gpu) : copy->count;
    kvt_gpu_copy_path_t path = kvt_gpu_dispatch(&disp, copy->job != NULL && copy->mapped, pinned,
                                                segs, copy->count, copy->bytes);
    if (path == KVT_GPU_PATH_KERNEL) {
        if (s_kernel(fs, copy) == 0)
            goto cleanup;
        disp.kernel_ready = false;
        path = kvt_gpu_dispatch(&disp, copy->job != NULL && copy->mapped, pinned, segs, copy->count,
                                copy->bytes);
    }
    rc = path == KVT_GPU_PATH_BATCH ? s_batch(fs, copy) : 1;
    if (rc == 1)
        rc = s_issue(fs, copy);

cleanup:
    free(copy);
    return rc;
}

// ----------------------------------------------------- micro-benchmark ----

static uint64_t s_now(const kvt_devrt_t *rt)
{
    if (rt->now_ns)
        return rt->now_ns();
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

//  Scratch of the micro-benchmark.
typedef struct {
    s_strm_t *st;                 //  its stream
    char *dev;                    //  device scratch, KVT_BENCH_SEGS x the largest size
    char *host;                   //  pinned scratch, as large
    uint32_t ids[KVT_BENCH_SEGS]; //  block ids (reversed: no segment merges)
    kvt_gpu_copy_t *copy;         //  the same gather as a copy batch
} s_bench_t;

//  One timed gather of KVT_BENCH_SEGS segments of `size` bytes by the kernel
//  (kernel) or the batched / per-segment copy; 0 and *ns, or -1.
static int s_bench_one(kvt_gpu_t *gpu, s_bench_t *b, size_t size, bool kernel, uint64_t *ns)
{
    s_dev_t *d = gpu->impl;
    const kvt_devrt_t *rt = d->rt;
    uint64_t t0 = s_now(rt);
    if (kernel) {
        kvt_gpu_kent_t ent = {.base = b->dev, .block_bytes = size, .chunk_base = 0, .layer = 0};
        kvt_gpu_kjob_t job = {.chunk = b->host, .block = b->ids, .n = KVT_BENCH_SEGS};
        uint32_t slot = 0;
        size_t at = 0;
        char *tab = s_ring_reserve(rt, b->st, kvt_gpu_ktab_bytes(1, 1, KVT_BENCH_SEGS), &slot, &at);
        if (!tab)
            return -1;
        kvt_gpu_ktab_fill((uint64_t *)(void *)tab, &ent, 1, &job, 1);
        if (s_launch(gpu, b->st, slot, (const uint64_t *)(void *)tab, true) != 0)
            return -1;
    } else {
        kvt_gpu_copy_t *c = b->copy;
        c->count = 0;
        c->bytes = 0;
        for (uint32_t i = 0; i < KVT_BENCH_SEGS; i++)
            kvt_gpu_copy_push(c, b->host + (size_t)i * size, b->dev + (size_t)b->ids[i] * size,
                              size);
        size_t fail_idx = SIZE_MAX;
        if (rt->memcpy_batch && atomic_load(&d->batch_ok)) {
            if (rt->memcpy_batch(c, b->st->h, &fail_idx) != rt->ok)
                return -1;
        } else {
            for (uint32_t k = 0; k < c->count; k++)
                if (rt->memcpy_async(c->dst[k], c->src[k], c->len[k], c->dir, b->st->h) != rt->ok)
                    return -1;
        }
    }
    if (rt->stream_sync(b->st->h) != rt->ok)
        return -1;
    *ns = s_now(rt) - t0;
    return 0;
}

//  Measures kernel against the other path at every size; sets d->crossover
//  and writes what it found into `out`. -1 when a step failed (the caller
//  keeps the default).
static int s_bench(kvt_gpu_t *gpu, char *out, size_t out_len)
{
    s_dev_t *d = gpu->impl;
    const kvt_devrt_t *rt = d->rt;
    size_t max = s_bench_size[KVT_BENCH_NSIZES - 1] * KVT_BENCH_SEGS;
    s_bench_t b = {0};
    int rc = -1;
    b.st = calloc(1, sizeof *b.st);
    b.copy = kvt_gpu_copy_alloc(KVT_GPU_D2H, KVT_BENCH_SEGS);
    if (!b.st || !b.copy || rt->stream_create(&b.st->h) != rt->ok) {
        free(b.st);
        b.st = NULL;
        goto cleanup;
    }
    pthread_mutex_init(&b.st->mu, NULL);
    void *p = NULL;
    if (rt->dev_malloc(&p, max) != rt->ok)
        goto cleanup;
    b.dev = p;
    p = NULL;
    if (rt->host_alloc(&p, max) != rt->ok)
        goto cleanup;
    b.host = p;
    for (uint32_t i = 0; i < KVT_BENCH_SEGS; i++)
        b.ids[i] = KVT_BENCH_SEGS - 1 - i;
    uint64_t tk[KVT_BENCH_NSIZES], to[KVT_BENCH_NSIZES];
    for (uint32_t k = 0; k < KVT_BENCH_NSIZES; k++) {
        tk[k] = to[k] = UINT64_MAX;
        for (uint32_t r = 0; r <= KVT_BENCH_REPS; r++) {
            uint64_t a = 0, o = 0;
            if (s_bench_one(gpu, &b, s_bench_size[k], true, &a) != 0 ||
                s_bench_one(gpu, &b, s_bench_size[k], false, &o) != 0)
                goto cleanup;
            if (r > 0 && a < tk[k]) //  r == 0 warms up
                tk[k] = a;
            if (r > 0 && o < to[k])
                to[k] = o;
        }
    }
    d->crossover = kvt_gpu_kernel_crossover(s_bench_size, tk, to, KVT_BENCH_NSIZES);
    size_t at = 0;
    at += (size_t)snprintf(out, out_len, "measured, kernel/%s ns at %u segments:",
                           rt->memcpy_batch && atomic_load(&d->batch_ok) ? "batch" : "per-segment",
                           KVT_BENCH_SEGS);
    for (uint32_t k = 0; k < KVT_BENCH_NSIZES && at < out_len; k++)
        at += (size_t)snprintf(out + at, out_len - at, " %zu KiB %llu/%llu", s_bench_size[k] >> 10,
                               (unsigned long long)tk[k], (unsigned long long)to[k]);
    rc = 0;

cleanup:
    if (rc != 0)
        (void)rt->get_last_error();
    if (b.st)
        s_strm_free(rt, b.st);
    if (b.dev)
        rt->dev_free(b.dev);
    if (b.host)
        rt->host_free(b.host);
    free(b.copy);
    return rc;
}

//  Loads the kernel and decides the crossover; never fails the open (the
//  device then copies as it did without a kernel, and the copy paths say
//  why). Writes the paths into gpu->copy_paths.
static void s_kernel_setup(kvt_gpu_t *gpu)
{
    s_dev_t *d = gpu->impl;
    const kvt_devrt_t *rt = d->rt;
    char why[200] = "", bench[400] = "";
    d->crossover = KVT_DEFAULT_CROSSOVER;
    if (rt->batch_probe && !rt->batch_probe())
        atomic_store(&d->batch_ok, false);
    const char *batch = rt->memcpy_batch && atomic_load(&d->batch_ok) ? rt->batch_call : NULL;
    if (!rt->kernel_image || !rt->module_load || !rt->launch) {
        kvt_gpu_fmt(why, sizeof why, "no kernel in this runtime table");
    } else if (gpu->opts.copy_path == KVT_GPU_PATH_BATCH ||
               gpu->opts.copy_path == KVT_GPU_PATH_SEGMENT) {
        kvt_gpu_fmt(why, sizeof why, "kernel not loaded (copy_path %s)",
                    gpu->opts.copy_path == KVT_GPU_PATH_BATCH ? "BATCH" : "SEGMENT");
    } else {
        void *image = NULL;
        size_t len = 0;
        int rc = rt->kernel_image(d->device, &image, &len, why, sizeof why);
        if (rc == 0) {
            int drc = rt->module_load(image, len, &d->module, &d->fn);
            if (drc != rt->ok) {
                (void)rt->get_last_error();
                kvt_gpu_fmt(why, sizeof why, "kernel image of %zu bytes not loaded (%s)", len,
                            rt->error_name(drc));
                d->module = d->fn = NULL;
            }
        }
        free(image);
        if (d->fn)
            atomic_store(&d->kernel_ok, true);
        else
            kvt_gpu_log(gpu, 1, "%s: no gather kernel (%s); %s as before", rt->name, why,
                        batch ? "batched copies" : "one copy per segment");
    }
    if (d->fn && gpu->opts.kernel_crossover_bytes) {
        d->crossover = gpu->opts.kernel_crossover_bytes;
        kvt_gpu_fmt(bench, sizeof bench, "configured");
    } else if (d->fn && gpu->opts.copy_path == KVT_GPU_PATH_AUTO) {
        if (s_bench(gpu, bench, sizeof bench) != 0) {
            d->crossover = KVT_DEFAULT_CROSSOVER;
            kvt_gpu_fmt(bench, sizeof bench, "default: the micro-benchmark failed");
        }
        kvt_gpu_log(gpu, 2, "%s: kernel up to %zu-byte segments (%s)", rt->name, d->crossover,
                    bench);
    }
    char k[320];
    if (d->fn && !atomic_load(&d->kernel_ok))
        kvt_gpu_fmt(k, sizeof k, "no kernel (%s: its launch was refused)", why);
    else if (d->fn)
        kvt_gpu_fmt(k, sizeof k, "kernel (%s; %u thread blocks; %s%zu-byte segments, %.40s)", why,
                    gpu->opts.kernel_max_blocks,
                    gpu->opts.copy_path == KVT_GPU_PATH_KERNEL ? "always, AUTO up to " : "up to ",
                    d->crossover, bench);
    else
        kvt_gpu_fmt(k, sizeof k, "no kernel (%s)", why);
    kvt_gpu_fmt(gpu->copy_paths, sizeof gpu->copy_paths, "%s, %s%s%s, per-segment", k,
                batch ? "batch (" : "no batched copy", batch ? batch : "", batch ? ")" : "");
}

void *kvt_gpu_devrt_stream(const kvt_gpu_stream_t *s)
{
    return s_h(s);
}

void kvt_gpu_devrt_paths(const kvt_devrt_t *rt, char *out, size_t out_len)
{
    char k[200];
    if (rt->kernel_image && rt->rtc) {
        char why[160];
        bool ok = kvt_gpu_rtc_available((kvt_gpu_rtc_t)rt->rtc, why, sizeof why);
        kvt_gpu_fmt(k, sizeof k, "%s (%s)", ok ? "kernel" : "no kernel", why);
    } else {
        kvt_gpu_fmt(k, sizeof k, "no kernel");
    }
    bool batch = rt->memcpy_batch && (!rt->batch_probe || rt->batch_probe());
    kvt_gpu_fmt(out, out_len, "%s, %s%s%s, per-segment", k, batch ? "batch (" : "no batched copy",
                batch ? rt->batch_call : "", batch ? ")" : "");
}

static int s_host_fn(kvt_gpu_stream_t *fs, kvt_gpu_host_fn *fn, void *arg, uint64_t sim_cost_ns)
{
    (void)sim_cost_ns;
    const kvt_devrt_t *rt = fs->gpu->rt;
    int rc = s_bind(fs->gpu);
    if (rc != 0)
        return rc;
    int drc = rt->host_fn(s_h(fs), fn, arg);
    return drc == rt->ok ? 0 : s_err(rt, rt->host_fn_call, drc);
}

const kvt_gpu_ops_t kvt_gpu_devrt_ops = {
    .name = "devrt",
    .init = s_init,
    .fini = s_fini,
    .dev_alloc = s_dev_alloc,
    .dev_free = s_dev_free,
    .host_alloc = s_host_alloc,
    .host_free = s_host_free,
    .host_register = s_host_register,
    .host_unregister = s_host_unregister,
    .pci_bus_id = s_pci_bus_id,
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
};
