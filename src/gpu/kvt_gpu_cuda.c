/*  kvt_gpu_cuda.c — the CUDA runtime's table for the shared device backend
    (kvt_gpu_devrt.c), compiled with the system C compiler against
    cuda_runtime_api.h (no nvcc: there are no kernels).

    What CUDA does its own way: pinned memory is cudaHostAlloc (portable);
    host functions are cudaLaunchHostFunc; from 12.8 a batch goes out as one
    cudaMemcpyBatchAsync, whose signature changed in 13.0.
*/
#include <string.h>

#include <cuda_runtime_api.h>

#define KVT_RT(name) cuda##name
#include "kvt_gpu_devrt_calls.h"

static int s_device_info(int device, char *name, size_t name_len, size_t *memory, char *runtime,
                         size_t runtime_len)
{
    struct cudaDeviceProp prop;
    cudaError_t rc = cudaGetDeviceProperties(&prop, device);
    if (rc != cudaSuccess)
        return rc;
    kvt_gpu_fmt(name, name_len, "%s", prop.name);
    *memory = prop.totalGlobalMem;
    kvt_gpu_fmt(runtime, runtime_len, "runtime %d", CUDART_VERSION);
    return cudaSuccess;
}

static int s_host_alloc(void **out, size_t bytes)
{
    return cudaHostAlloc(out, bytes, cudaHostAllocPortable);
}

static int s_host_free(void *ptr)
{
    return cudaFreeHost(ptr);
}

static int s_host_fn(void *stream, kvt_gpu_host_fn *fn, void *arg)
{
    return cudaLaunchHostFunc((cudaStream_t)stream, fn, arg);
}

#if CUDART_VERSION >= 12080
//  Queues the whole batch with one call. 12.8 and 12.9 take a failIdx
//  before the stream; 13.0 dropped it (and made the arrays const).
static int s_batch(const kvt_gpu_copy_t *copy, void *stream, size_t *fail_idx)
{
    struct cudaMemcpyAttributes attr;
    memset(&attr, 0, sizeof attr);
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    size_t attr_idx = 0;
    *fail_idx = SIZE_MAX;
#if CUDART_VERSION >= 13000
    return cudaMemcpyBatchAsync(copy->dst, copy->src, copy->len, copy->count, &attr, &attr_idx, 1,
                                (cudaStream_t)stream);
#else
    return cudaMemcpyBatchAsync(copy->dst, (void **)copy->src, copy->len, copy->count, &attr,
                                &attr_idx, 1, fail_idx, (cudaStream_t)stream);
#endif
}
#endif

const kvt_devrt_t kvt_gpu_cuda_rt = {
    KVT_DEVRT_CALLS,
    .name = "cuda",
    .device_info = s_device_info,
    .host_alloc = s_host_alloc,
    .host_free = s_host_free,
    .host_alloc_call = "cudaHostAlloc",
    .host_fn = s_host_fn,
    .host_fn_call = "cudaLaunchHostFunc",
#if CUDART_VERSION >= 12080
    .memcpy_batch = s_batch,
#endif
};
