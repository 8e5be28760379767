/*  kvt_gpu_devrt.c — the device backend, one implementation for CUDA and
    HIP over a table of runtime calls (kvt_gpu_devrt.h; the tables are in
    kvt_gpu_cuda.c and kvt_gpu_hip.c). It includes no runtime header.

    Streams are non-blocking runtime streams, events carry no timing. The
    device is selected on every call (it is per thread in both runtimes, and
    the caller's own code may change it). A gather / scatter is one copy
    batch: one batched call when the runtime has one and the host side is
    pinned, otherwise one async copy per merged segment.

    A failed call is atomic for the caller: when the runtime refuses a
    segment after earlier ones of the same call were queued (or refuses a
    batch, which does not promise that it queued nothing), the stream is
    settled (synchronized) before the call returns and marked failed, so
    nothing that touches the caller's buffers is still running. A refusal of
    the first segment queued nothing and leaves the stream usable.
*/
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvt_gpu_devrt.h"

//  The device state (gpu->impl).
typedef struct {
    const kvt_devrt_t *rt; //  the runtime's calls
    int device;            //  device ordinal
    char name[256];        //  device name
    size_t memory;         //  device memory, bytes
    atomic_bool batch_ok;  //  the batched copy accepted so far (any thread)
} s_dev_t;

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
    return 0;

cleanup:
    free(d);
    gpu->impl = NULL;
    return rc;
}

static void s_fini(kvt_gpu_t *gpu)
{
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

// -------------------------------------------------------------- streams ----

static int s_stream_new(kvt_gpu_stream_t *fs)
{
    const kvt_devrt_t *rt = fs->gpu->rt;
    int rc = s_bind(fs->gpu);
    if (rc != 0)
        return rc;
    void *st = NULL;
    int drc = rt->stream_create(&st);
    if (drc != rt->ok)
        return s_err_rt(rt, "StreamCreateWithFlags", drc);
    fs->impl = st;
    return 0;
}

static void s_stream_destroy(kvt_gpu_stream_t *fs)
{
    if (s_bind(fs->gpu) == 0) {
        fs->gpu->rt->stream_sync(fs->impl);
        fs->gpu->rt->stream_destroy(fs->impl);
    }
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
    return rc != 0 ? rc : s_status(rt, "stream", fs->name, rt->stream_query(fs->impl));
}

static int s_stream_sync(kvt_gpu_stream_t *fs)
{
    const kvt_devrt_t *rt = fs->gpu->rt;
    int rc = s_bind(fs->gpu);
    return rc != 0 ? rc : s_status(rt, "stream", fs->name, rt->stream_sync(fs->impl));
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
    int drc = rt->event_record(ev->impl, fs->impl);
    return drc == rt->ok ? 0 : s_err_rt(rt, "EventRecord", drc);
}

static int s_stream_wait(kvt_gpu_stream_t *fs, kvt_gpu_event_t *ev)
{
    const kvt_devrt_t *rt = fs->gpu->rt;
    int rc = s_bind(fs->gpu);
    if (rc != 0)
        return rc;
    int drc = rt->stream_wait_event(fs->impl, ev->impl);
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
    int drc = rt->stream_sync(fs->impl);
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
        int drc = rt->memcpy_async(copy->dst[k], copy->src[k], copy->len[k], copy->dir, fs->impl);
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
static int s_batch(kvt_gpu_stream_t *fs, const kvt_gpu_copy_t *copy, bool pinned)
{
    kvt_gpu_t *gpu = fs->gpu;
    s_dev_t *d = gpu->impl;
    const kvt_devrt_t *rt = d->rt;
    if (!rt->memcpy_batch || copy->count < 2 || !pinned || !atomic_load(&d->batch_ok))
        return 1;
    size_t fail_idx = SIZE_MAX;
    int drc = rt->memcpy_batch(copy, fs->impl, &fail_idx);
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

static int s_copy(kvt_gpu_stream_t *fs, kvt_gpu_copy_t *copy, bool pinned)
{
    int rc = s_bind(fs->gpu);
    if (rc == 0)
        rc = s_batch(fs, copy, pinned);
    if (rc == 1)
        rc = s_issue(fs, copy);
    free(copy);
    return rc;
}

static int s_host_fn(kvt_gpu_stream_t *fs, kvt_gpu_host_fn *fn, void *arg, uint64_t sim_cost_ns)
{
    (void)sim_cost_ns;
    const kvt_devrt_t *rt = fs->gpu->rt;
    int rc = s_bind(fs->gpu);
    if (rc != 0)
        return rc;
    int drc = rt->host_fn(fs->impl, fn, arg);
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
