/*  kvt_gpu_hip.c — the HIP runtime's table for the shared device backend
    (kvt_gpu_devrt.c), compiled with the system C compiler and
    __HIP_PLATFORM_AMD__ against hip_runtime_api.h (no hipcc: there are no
    kernels).

    What HIP does its own way: pinned memory is hipHostMalloc (in C the
    flags argument is mandatory); the 5.2 runtime does not export
    hipLaunchHostFunc, so host functions go through hipStreamAddCallback;
    there is no batched copy (one hipMemcpyAsync per segment). Copies from /
    to memory that is not pinned are synchronous in HIP; hipEventQuery on a
    never-recorded event reports success, as the interface documents.
*/
#include <stdlib.h>

#include <hip/hip_runtime_api.h>

#define KVT_RT(name) hip##name
#include "kvt_gpu_devrt_calls.h"

static int s_device_info(int device, char *name, size_t name_len, size_t *memory, char *runtime,
                         size_t runtime_len)
{
    hipDeviceProp_t prop;
    hipError_t rc = hipGetDeviceProperties(&prop, device);
    if (rc != hipSuccess)
        return rc;
    kvt_gpu_fmt(name, name_len, "%s", prop.name);
    *memory = prop.totalGlobalMem;
    kvt_gpu_fmt(runtime, runtime_len, "HIP %d.%d", HIP_VERSION_MAJOR, HIP_VERSION_MINOR);
    return hipSuccess;
}

static int s_host_alloc(void **out, size_t bytes)
{
    return hipHostMalloc(out, bytes, hipHostMallocDefault);
}

static int s_host_free(void *ptr)
{
    return hipHostFree(ptr);
}

//  A host function queued through hipStreamAddCallback.
typedef struct {
    kvt_gpu_host_fn *fn; //  the function
    void *arg;           //  its argument
} s_call_t;

static void s_trampoline(hipStream_t stream, hipError_t status, void *user)
{
    (void)stream;
    s_call_t *call = user;
    //  As on the other backends, a failed stream does not run it.
    if (status == hipSuccess)
        call->fn(call->arg);
    free(call);
}

static int s_host_fn(void *stream, kvt_gpu_host_fn *fn, void *arg)
{
    s_call_t *call = malloc(sizeof *call);
    if (!call)
        return hipErrorOutOfMemory;
    call->fn = fn;
    call->arg = arg;
    hipError_t rc = hipStreamAddCallback((hipStream_t)stream, s_trampoline, call, 0);
    if (rc != hipSuccess)
        free(call);
    return rc;
}

const kvt_devrt_t kvt_gpu_hip_rt = {
    KVT_DEVRT_CALLS,
    .name = "hip",
    .device_info = s_device_info,
    .host_alloc = s_host_alloc,
    .host_free = s_host_free,
    .host_alloc_call = "hipHostMalloc",
    .host_fn = s_host_fn,
    .host_fn_call = "hipStreamAddCallback",
};
