/*  kvt_gpu_cuda.c — the CUDA backend (NVIDIA), through the CUDA runtime C
    API, compiled with the system C compiler (no nvcc: there are no kernels).

    Streams are non-blocking CUDA streams; events are created with
    cudaEventDisableTiming. A gather / scatter is one copy batch: on CUDA
    >= 12.8 it goes out as one cudaMemcpyBatchAsync when the host side is
    pinned (kvt_gpu_host_alloc), otherwise one cudaMemcpyAsync per merged
    segment through kvt_gpu_copy_issue (a refusal part-way settles the
    stream and fails it, so a failed call leaves nothing running).
    cudaGetDeviceCount leaves its argument untouched on error, so
    the count is initialised and the return code checked. The device is
    selected on every call (it is per thread in CUDA).
*/
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "kvt_gpu_int.h"

//  The device state.
typedef struct {
    int device;           //  device ordinal
    char name[256];       //  device name
    size_t memory;        //  device memory, bytes
    atomic_bool batch_ok; //  cudaMemcpyBatchAsync accepted so far (any thread)
} s_cuda_t;

static int s_err(const char *what, cudaError_t rc)
{
    return kvt_gpu_fail(KVT_GPU_EDEVICE, "cuda: %s: %s (%s)", what, cudaGetErrorName(rc),
                        cudaGetErrorString(rc));
}

//  Selects the device on the calling thread (the current device is per
//  thread, and the caller's own code may have changed it since).
static int s_bind(kvt_gpu_t *gpu)
{
    s_cuda_t *c = gpu->impl;
    int current = -1;
    if (cudaGetDevice(&current) == cudaSuccess && current == c->device)
        return 0;
    cudaError_t rc = cudaSetDevice(c->device);
    if (rc != cudaSuccess)
        return s_err("cudaSetDevice", rc);
    return 0;
}

int kvt_gpu_cuda_probe(int *count, char *why, size_t why_len)
{
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc != cudaSuccess) {
        kvt_gpu_fmt(why, why_len, "no usable device (%s: %s)", cudaGetErrorName(rc),
                    cudaGetErrorString(rc));
        (void)cudaGetLastError();
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
    if (kvt_gpu_cuda_probe(&count, why, sizeof why) != 0 || count <= 0)
        return kvt_gpu_fail(KVT_GPU_ENODEV, "cuda: %s", why);
    if (gpu->opts.device >= count)
        return kvt_gpu_fail(KVT_GPU_ENODEV, "cuda: device %d requested, %d present",
                            gpu->opts.device, count);
    s_cuda_t *c = calloc(1, sizeof *c);
    if (!c)
        return kvt_gpu_fail(KVT_GPU_ENOMEM, "cuda: out of memory");
    c->device = gpu->opts.device;
    atomic_init(&c->batch_ok, true);
    gpu->impl = c;
    int rc = s_bind(gpu);
    if (rc != 0)
        goto cleanup;
    struct cudaDeviceProp prop;
    cudaError_t crc = cudaGetDeviceProperties(&prop, c->device);
    if (crc != cudaSuccess) {
        rc = s_err("cudaGetDeviceProperties", crc);
        goto cleanup;
    }
    kvt_gpu_fmt(c->name, sizeof c->name, "%s", prop.name);
    c->memory = prop.totalGlobalMem;
    kvt_gpu_fmt(gpu->device_desc, sizeof gpu->device_desc, "device %d: %s, %.1f GiB, runtime %d",
                c->device, c->name, (double)c->memory / (1u << 30), CUDART_VERSION);
    return 0;

cleanup:
    free(c);
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
    cudaError_t crc = cudaMalloc(out, bytes);
    if (crc != cudaSuccess)
        return s_err("cudaMalloc", crc);
    //  Our streams do not synchronise with the legacy stream: wait for the
    //  memset here.
    crc = cudaMemset(*out, 0, bytes);
    if (crc == cudaSuccess)
        crc = cudaDeviceSynchronize();
    if (crc != cudaSuccess) {
        cudaFree(*out);
        *out = NULL;
        return s_err("cudaMemset", crc);
    }
    return 0;
}

static void s_dev_free(kvt_gpu_t *gpu, void *ptr)
{
    if (s_bind(gpu) == 0)
        cudaFree(ptr);
}

static int s_host_alloc(kvt_gpu_t *gpu, size_t bytes, void **out)
{
    int rc = s_bind(gpu);
    if (rc != 0)
        return rc;
    cudaError_t crc = cudaHostAlloc(out, bytes, cudaHostAllocPortable);
    if (crc != cudaSuccess)
        return s_err("cudaHostAlloc", crc);
    memset(*out, 0, bytes);
    return 0;
}

static void s_host_free(kvt_gpu_t *gpu, void *ptr)
{
    if (s_bind(gpu) == 0)
        cudaFreeHost(ptr);
}

static int s_stream_new(kvt_gpu_stream_t *fs)
{
    int rc = s_bind(fs->gpu);
    if (rc != 0)
        return rc;
    cudaStream_t st = NULL;
    cudaError_t crc = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    if (crc != cudaSuccess)
        return s_err("cudaStreamCreateWithFlags", crc);
    fs->impl = st;
    return 0;
}

static void s_stream_destroy(kvt_gpu_stream_t *fs)
{
    if (s_bind(fs->gpu) == 0) {
        cudaStreamSynchronize(fs->impl);
        cudaStreamDestroy(fs->impl);
    }
    fs->impl = NULL;
}

//  Maps a query / synchronize result.
static int s_status(const char *what, const char *name, cudaError_t rc)
{
    if (rc == cudaSuccess)
        return 0;
    if (rc == cudaErrorNotReady)
        return KVT_GPU_NOT_READY;
    return kvt_gpu_fail(KVT_GPU_EFAULT, "cuda: %s '%s': %s (%s)", what, name, cudaGetErrorName(rc),
                        cudaGetErrorString(rc));
}

static int s_stream_query(kvt_gpu_stream_t *fs)
{
    int rc = s_bind(fs->gpu);
    return rc != 0 ? rc : s_status("stream", fs->name, cudaStreamQuery(fs->impl));
}

static int s_stream_sync(kvt_gpu_stream_t *fs)
{
    int rc = s_bind(fs->gpu);
    return rc != 0 ? rc : s_status("stream", fs->name, cudaStreamSynchronize(fs->impl));
}

static int s_event_new(kvt_gpu_event_t *ev)
{
    int rc = s_bind(ev->gpu);
    if (rc != 0)
        return rc;
    cudaEvent_t e = NULL;
    cudaError_t crc = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    if (crc != cudaSuccess)
        return s_err("cudaEventCreateWithFlags", crc);
    ev->impl = e;
    return 0;
}

static void s_event_destroy(kvt_gpu_event_t *ev)
{
    if (ev->impl && s_bind(ev->gpu) == 0)
        cudaEventDestroy(ev->impl);
    ev->impl = NULL;
}

static int s_event_record(kvt_gpu_event_t *ev, kvt_gpu_stream_t *fs)
{
    int rc = s_bind(ev->gpu);
    if (rc != 0)
        return rc;
    cudaError_t crc = cudaEventRecord(ev->impl, fs->impl);
    return crc == cudaSuccess ? 0 : s_err("cudaEventRecord", crc);
}

static int s_stream_wait(kvt_gpu_stream_t *fs, kvt_gpu_event_t *ev)
{
    int rc = s_bind(fs->gpu);
    if (rc != 0)
        return rc;
    cudaError_t crc = cudaStreamWaitEvent(fs->impl, ev->impl, 0);
    return crc == cudaSuccess ? 0 : s_err("cudaStreamWaitEvent", crc);
}

static int s_event_query(kvt_gpu_event_t *ev)
{
    int rc = s_bind(ev->gpu);
    return rc != 0 ? rc : s_status("event", "query", cudaEventQuery(ev->impl));
}

static int s_event_sync(kvt_gpu_event_t *ev)
{
    int rc = s_bind(ev->gpu);
    return rc != 0 ? rc : s_status("event", "synchronize", cudaEventSynchronize(ev->impl));
}

//  Queues one segment / waits for the stream, for kvt_gpu_copy_issue.
typedef struct {
    cudaStream_t st;          //  the stream
    enum cudaMemcpyKind kind; //  direction of every segment
} s_issue_t;

static int s_issue(void *ctx, void *dst, const void *src, size_t len)
{
    s_issue_t *is = ctx;
    cudaError_t crc = cudaMemcpyAsync(dst, src, len, is->kind, is->st);
    return crc == cudaSuccess ? 0 : s_err("cudaMemcpyAsync", crc);
}

static int s_settle(void *ctx)
{
    s_issue_t *is = ctx;
    cudaError_t crc = cudaStreamSynchronize(is->st);
    return crc == cudaSuccess ? 0 : s_err("cudaStreamSynchronize", crc);
}

#if CUDART_VERSION >= 12080
//  Queues the whole batch with one call. 12.8 and 12.9 take a failIdx
//  before the stream; 13.0 dropped it (and made the arrays const).
static cudaError_t s_batch(const kvt_gpu_copy_t *copy, cudaStream_t st, size_t *fail_idx)
{
    struct cudaMemcpyAttributes attr;
    memset(&attr, 0, sizeof attr);
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    size_t attr_idx = 0;
    *fail_idx = SIZE_MAX;
#if CUDART_VERSION >= 13000
    return cudaMemcpyBatchAsync(copy->dst, copy->src, copy->len, copy->count, &attr, &attr_idx, 1,
                                st);
#else
    return cudaMemcpyBatchAsync(copy->dst, (void **)copy->src, copy->len, copy->count, &attr,
                                &attr_idx, 1, fail_idx, st);
#endif
}
#endif

static int s_copy(kvt_gpu_stream_t *fs, kvt_gpu_copy_t *copy, bool pinned)
{
    kvt_gpu_t *gpu = fs->gpu;
    s_cuda_t *c = gpu->impl;
    s_issue_t is = {fs->impl, copy->dir == KVT_GPU_D2H   ? cudaMemcpyDeviceToHost
                              : copy->dir == KVT_GPU_H2D ? cudaMemcpyHostToDevice
                                                         : cudaMemcpyDeviceToDevice};
    kvt_gpu_issuer_t io = {s_issue, s_settle, &is};
    int rc = s_bind(gpu);
    if (rc != 0)
        goto cleanup;
#if CUDART_VERSION >= 12080
    if (copy->count > 1 && pinned && atomic_load(&c->batch_ok)) {
        size_t fail_idx = SIZE_MAX;
        cudaError_t crc = s_batch(copy, is.st, &fail_idx);
        if (crc == cudaSuccess)
            goto cleanup;
        (void)cudaGetLastError();
        if (atomic_exchange(&c->batch_ok, false))
            kvt_gpu_log(gpu, 1, "cuda: cudaMemcpyBatchAsync refused (%s); one copy per segment",
                        cudaGetErrorName(crc));
        //  The runtime does not promise that a refused batch queued none of
        //  its copies: wait for the stream before queuing the segments one
        //  by one (a segment copied twice writes the same bytes again).
        char why[200];
        if (fail_idx == SIZE_MAX)
            kvt_gpu_fmt(why, sizeof why, "cudaMemcpyBatchAsync of %u segments refused (%s)",
                        copy->count, cudaGetErrorName(crc));
        else
            kvt_gpu_fmt(why, sizeof why,
                        "cudaMemcpyBatchAsync of %u segments refused at copy %zu (%s)", copy->count,
                        fail_idx, cudaGetErrorName(crc));
        rc = kvt_gpu_stream_settle(fs, &io, why);
        if (rc != 0)
            goto cleanup;
    }
#else
    (void)c;
    (void)pinned;
#endif
    rc = kvt_gpu_copy_issue(fs, copy, &io);

cleanup:
    free(copy);
    return rc;
}

static int s_host_fn(kvt_gpu_stream_t *fs, kvt_gpu_host_fn *fn, void *arg, uint64_t sim_cost_ns)
{
    int rc = s_bind(fs->gpu);
    if (rc != 0)
        return rc;
    cudaError_t crc = cudaLaunchHostFunc(fs->impl, fn, arg);
    return crc == cudaSuccess ? 0 : s_err("cudaLaunchHostFunc", crc);
}

const kvt_gpu_ops_t kvt_gpu_cuda_ops = {
    .name = "cuda",
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
