/*  kvt_gpu_hip.c — the HIP backend (AMD), through the HIP runtime C API,
    compiled with the system C compiler and __HIP_PLATFORM_AMD__ (no hipcc:
    there are no kernels).

    Streams are non-blocking HIP streams; events are created with
    hipEventDisableTiming. A gather / scatter is one hipMemcpyAsync per
    merged segment (HIP has no batched copy), through kvt_gpu_copy_issue
    (a refusal part-way settles the stream and fails it, so a failed call
    leaves nothing running); copies from / to memory that is not pinned
    (kvt_gpu_host_alloc) are synchronous in HIP. The device is
    selected on every call (it is per thread in HIP).
    hipEventQuery on a never-recorded event reports success, which is the
    interface's documented behaviour too.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hip/hip_runtime_api.h>

#include "kvt_gpu_int.h"

//  The device state.
typedef struct {
    int device;     //  device ordinal
    char name[256]; //  device name
    size_t memory;  //  device memory, bytes
} s_hip_t;

static int s_err(const char *what, hipError_t rc)
{
    return kvt_gpu_fail(KVT_GPU_EDEVICE, "hip: %s: %s (%s)", what, hipGetErrorName(rc),
                        hipGetErrorString(rc));
}

//  Selects the device on the calling thread (the current device is per
//  thread, and the caller's own code may have changed it since).
static int s_bind(kvt_gpu_t *gpu)
{
    s_hip_t *h = gpu->impl;
    int current = -1;
    if (hipGetDevice(&current) == hipSuccess && current == h->device)
        return 0;
    hipError_t rc = hipSetDevice(h->device);
    if (rc != hipSuccess)
        return s_err("hipSetDevice", rc);
    return 0;
}

int kvt_gpu_hip_probe(int *count, char *why, size_t why_len)
{
    int n = 0;
    hipError_t rc = hipGetDeviceCount(&n);
    if (rc != hipSuccess) {
        kvt_gpu_fmt(why, why_len, "no usable device (%s: %s)", hipGetErrorName(rc),
                    hipGetErrorString(rc));
        (void)hipGetLastError();
        *count = 0;
        return KVT_GPU_ENODEV;
    }
    *count = n;
    kvt_gpu_fmt(why, why_len, "%d device(s)", n);
    return 0;
}

static int s_init(kvt_gpu_t *gpu)
{
    int count = 0;
    char why[160];
    if (kvt_gpu_hip_probe(&count, why, sizeof why) != 0 || count <= 0)
        return kvt_gpu_fail(KVT_GPU_ENODEV, "hip: %s", why);
    if (gpu->opts.device >= count)
        return kvt_gpu_fail(KVT_GPU_ENODEV, "hip: device %d requested, %d present",
                            gpu->opts.device, count);
    s_hip_t *h = calloc(1, sizeof *h);
    if (!h)
        return kvt_gpu_fail(KVT_GPU_ENOMEM, "hip: out of memory");
    h->device = gpu->opts.device;
    gpu->impl = h;
    int rc = s_bind(gpu);
    if (rc != 0)
        goto cleanup;
    hipDeviceProp_t prop;
    hipError_t hrc = hipGetDeviceProperties(&prop, h->device);
    if (hrc != hipSuccess) {
        rc = s_err("hipGetDeviceProperties", hrc);
        goto cleanup;
    }
    kvt_gpu_fmt(h->name, sizeof h->name, "%s", prop.name);
    h->memory = prop.totalGlobalMem;
    kvt_gpu_fmt(gpu->device_desc, sizeof gpu->device_desc, "device %d: %s, %.1f GiB, HIP %d.%d",
                h->device, h->name, (double)h->memory / (1u << 30), HIP_VERSION_MAJOR,
                HIP_VERSION_MINOR);
    return 0;

cleanup:
    free(h);
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
    int rc = s_bind(gpu);
    if (rc != 0)
        return rc;
    hipError_t hrc = hipMalloc(out, bytes);
    if (hrc != hipSuccess)
        return s_err("hipMalloc", hrc);
    //  Our streams do not synchronise with the null stream: wait here.
    hrc = hipMemset(*out, 0, bytes);
    if (hrc == hipSuccess)
        hrc = hipDeviceSynchronize();
    if (hrc != hipSuccess) {
        hipFree(*out);
        *out = NULL;
        return s_err("hipMemset", hrc);
    }
    return 0;
}

static void s_dev_free(kvt_gpu_t *gpu, void *ptr)
{
    if (s_bind(gpu) == 0)
        hipFree(ptr);
}

static int s_host_alloc(kvt_gpu_t *gpu, size_t bytes, void **out)
{
    int rc = s_bind(gpu);
    if (rc != 0)
        return rc;
    //  In C the flags argument is mandatory.
    hipError_t hrc = hipHostMalloc(out, bytes, hipHostMallocDefault);
    if (hrc != hipSuccess)
        return s_err("hipHostMalloc", hrc);
    memset(*out, 0, bytes);
    return 0;
}

static void s_host_free(kvt_gpu_t *gpu, void *ptr)
{
    if (s_bind(gpu) == 0)
        hipHostFree(ptr);
}

static int s_stream_new(kvt_gpu_stream_t *fs)
{
    int rc = s_bind(fs->gpu);
    if (rc != 0)
        return rc;
    hipStream_t st = NULL;
    hipError_t hrc = hipStreamCreateWithFlags(&st, hipStreamNonBlocking);
    if (hrc != hipSuccess)
        return s_err("hipStreamCreateWithFlags", hrc);
    fs->impl = st;
    return 0;
}

static void s_stream_destroy(kvt_gpu_stream_t *fs)
{
    if (s_bind(fs->gpu) == 0) {
        hipStreamSynchronize(fs->impl);
        hipStreamDestroy(fs->impl);
    }
    fs->impl = NULL;
}

//  Maps a query / synchronize result.
static int s_status(const char *what, const char *name, hipError_t rc)
{
    if (rc == hipSuccess)
        return 0;
    if (rc == hipErrorNotReady)
        return KVT_GPU_NOT_READY;
    return kvt_gpu_fail(KVT_GPU_EFAULT, "hip: %s '%s': %s (%s)", what, name, hipGetErrorName(rc),
                        hipGetErrorString(rc));
}

static int s_stream_query(kvt_gpu_stream_t *fs)
{
    int rc = s_bind(fs->gpu);
    return rc != 0 ? rc : s_status("stream", fs->name, hipStreamQuery(fs->impl));
}

static int s_stream_sync(kvt_gpu_stream_t *fs)
{
    int rc = s_bind(fs->gpu);
    return rc != 0 ? rc : s_status("stream", fs->name, hipStreamSynchronize(fs->impl));
}

static int s_event_new(kvt_gpu_event_t *ev)
{
    int rc = s_bind(ev->gpu);
    if (rc != 0)
        return rc;
    hipEvent_t e = NULL;
    hipError_t hrc = hipEventCreateWithFlags(&e, hipEventDisableTiming);
    if (hrc != hipSuccess)
        return s_err("hipEventCreateWithFlags", hrc);
    ev->impl = e;
    return 0;
}

static void s_event_destroy(kvt_gpu_event_t *ev)
{
    if (ev->impl && s_bind(ev->gpu) == 0)
        hipEventDestroy(ev->impl);
    ev->impl = NULL;
}

static int s_event_record(kvt_gpu_event_t *ev, kvt_gpu_stream_t *fs)
{
    int rc = s_bind(ev->gpu);
    if (rc != 0)
        return rc;
    hipError_t hrc = hipEventRecord(ev->impl, fs->impl);
    return hrc == hipSuccess ? 0 : s_err("hipEventRecord", hrc);
}

static int s_stream_wait(kvt_gpu_stream_t *fs, kvt_gpu_event_t *ev)
{
    int rc = s_bind(fs->gpu);
    if (rc != 0)
        return rc;
    hipError_t hrc = hipStreamWaitEvent(fs->impl, ev->impl, 0);
    return hrc == hipSuccess ? 0 : s_err("hipStreamWaitEvent", hrc);
}

static int s_event_query(kvt_gpu_event_t *ev)
{
    int rc = s_bind(ev->gpu);
    return rc != 0 ? rc : s_status("event", "query", hipEventQuery(ev->impl));
}

static int s_event_sync(kvt_gpu_event_t *ev)
{
    int rc = s_bind(ev->gpu);
    return rc != 0 ? rc : s_status("event", "synchronize", hipEventSynchronize(ev->impl));
}

//  Queues one segment / waits for the stream, for kvt_gpu_copy_issue.
typedef struct {
    hipStream_t st;     //  the stream
    hipMemcpyKind kind; //  direction of every segment
} s_issue_t;

static int s_issue(void *ctx, void *dst, const void *src, size_t len)
{
    s_issue_t *is = ctx;
    hipError_t hrc = hipMemcpyAsync(dst, src, len, is->kind, is->st);
    return hrc == hipSuccess ? 0 : s_err("hipMemcpyAsync", hrc);
}

static int s_settle(void *ctx)
{
    s_issue_t *is = ctx;
    hipError_t hrc = hipStreamSynchronize(is->st);
    return hrc == hipSuccess ? 0 : s_err("hipStreamSynchronize", hrc);
}

static int s_copy(kvt_gpu_stream_t *fs, kvt_gpu_copy_t *copy, bool pinned)
{
    (void)pinned;
    s_issue_t is = {fs->impl, copy->dir == KVT_GPU_D2H   ? hipMemcpyDeviceToHost
                              : copy->dir == KVT_GPU_H2D ? hipMemcpyHostToDevice
                                                         : hipMemcpyDeviceToDevice};
    kvt_gpu_issuer_t io = {s_issue, s_settle, &is};
    int rc = s_bind(fs->gpu);
    if (rc == 0)
        rc = kvt_gpu_copy_issue(fs, copy, &io);
    free(copy);
    return rc;
}

//  A host function queued through hipStreamAddCallback (the 5.2 runtime
//  does not export hipLaunchHostFunc).
typedef struct {
    kvt_gpu_host_fn *fn; //  the function
    void *arg;           //  its argument
} s_call_t;

static void s_trampoline(hipStream_t stream, hipError_t status, void *user)
{
    s_call_t *call = user;
    //  As on the other backends, a failed stream does not run it.
    if (status == hipSuccess)
        call->fn(call->arg);
    free(call);
}

static int s_host_fn(kvt_gpu_stream_t *fs, kvt_gpu_host_fn *fn, void *arg, uint64_t sim_cost_ns)
{
    int rc = s_bind(fs->gpu);
    if (rc != 0)
        return rc;
    s_call_t *call = malloc(sizeof *call);
    if (!call)
        return kvt_gpu_fail(KVT_GPU_ENOMEM, "hip: out of memory");
    call->fn = fn;
    call->arg = arg;
    hipError_t hrc = hipStreamAddCallback(fs->impl, s_trampoline, call, 0);
    if (hrc != hipSuccess) {
        free(call);
        return s_err("hipStreamAddCallback", hrc);
    }
    return 0;
}

const kvt_gpu_ops_t kvt_gpu_hip_ops = {
    .name = "hip",
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
