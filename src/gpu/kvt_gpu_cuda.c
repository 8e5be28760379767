/*  kvt_gpu_cuda.c — the CUDA runtime's table for the shared device backend
    (kvt_gpu_devrt.c), compiled with the system C compiler against
    cuda_runtime_api.h (no nvcc: the gather kernel is compiled at run time
    by NVRTC, loaded with dlopen, kvt_gpu_kernel_rtc.c).

    What CUDA does its own way: pinned memory is cudaHostAlloc (portable;
    with unified addressing its pointers are valid in kernels, which is how
    the kernel reads the chunk buffer and its table in place); host functions
    are cudaLaunchHostFunc; from 12.8 a batch goes out as one
    cudaMemcpyBatchAsync (PreferOverlapWithCompute), whose signature changed
    in 13.0; the kernel's PTX is loaded with cudaLibraryLoadData and launched
    with cudaLaunchKernel.
*/
#include <stdlib.h>
#include <string.h>

#include "kvt_gpu_kernel.h"

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

static int s_host_register(void *ptr, size_t bytes)
{
    return cudaHostRegister(ptr, bytes, cudaHostRegisterPortable);
}

static int s_host_unregister(void *ptr)
{
    return cudaHostUnregister(ptr);
}

static int s_pci_bus_id(int device, char *buf, int len)
{
    return cudaDeviceGetPCIBusId(buf, len, device);
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
    //  The copies leave the SMs to the forward where the driver can.
    attr.flags = cudaMemcpyFlagPreferOverlapWithCompute;
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

#if CUDART_VERSION >= 12000
//  The kernel through the library API (12.0 on): PTX of the kernel for the
//  device's compute capability.
static int s_kernel_image(int device, void **image, size_t *len, char *why, size_t why_len)
{
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
        (void)cudaGetLastError();
        kvt_gpu_fmt(why, why_len, "cuda: compute capability of device %d unknown", device);
        return KVT_GPU_EDEVICE;
    }
    char arch[32];
    kvt_gpu_fmt(arch, sizeof arch, "compute_%d%d", major, minor);
    return kvt_gpu_rtc_compile(KVT_GPU_RTC_NVRTC, arch, image, len, why, why_len);
}

static int s_module_load(const void *image, size_t len, void **module, void **fn)
{
    (void)len;
    cudaLibrary_t lib = NULL;
    cudaError_t rc = cudaLibraryLoadData(&lib, image, NULL, NULL, 0, NULL, NULL, 0);
    if (rc != cudaSuccess)
        return rc;
    cudaKernel_t k = NULL;
    rc = cudaLibraryGetKernel(&k, lib, KVT_GPU_KERNEL_NAME);
    if (rc != cudaSuccess) {
        cudaLibraryUnload(lib);
        return rc;
    }
    *module = lib;
    *fn = (void *)k;
    return cudaSuccess;
}

static int s_module_unload(void *module)
{
    return cudaLibraryUnload((cudaLibrary_t)module);
}

static int s_launch(void *fn, uint32_t grid, uint32_t threads, const void *tab, int to_host,
                    void *stream)
{
    dim3 g = {grid, 1, 1}, b = {threads, 1, 1};
    void *args[] = {&tab, &to_host};
    return cudaLaunchKernel(fn, g, b, args, 0, (cudaStream_t)stream);
}
#endif

const kvt_devrt_t kvt_gpu_cuda_rt = {
    KVT_DEVRT_CALLS,
    .name = "cuda",
    .device_info = s_device_info,
    .host_alloc = s_host_alloc,
    .host_free = s_host_free,
    .host_alloc_call = "cudaHostAlloc",
    .host_register = s_host_register,
    .host_unregister = s_host_unregister,
    .host_register_call = "cudaHostRegister",
    .pci_bus_id = s_pci_bus_id,
    .host_fn = s_host_fn,
    .host_fn_call = "cudaLaunchHostFunc",
#if CUDART_VERSION >= 12080
    .memcpy_batch = s_batch,
    .batch_call = "cudaMemcpyBatchAsync",
#endif
#if CUDART_VERSION >= 12000
    .kernel_image = s_kernel_image,
    .module_load = s_module_load,
    .module_unload = s_module_unload,
    .launch = s_launch,
    .launch_call = "cudaLaunchKernel",
    .rtc = KVT_GPU_RTC_NVRTC,
#endif
};
