/*  kvt_gpu_hip.c — the HIP runtime's table for the shared device backend
    (kvt_gpu_devrt.c), compiled with the system C compiler and
    __HIP_PLATFORM_AMD__ against hip_runtime_api.h (no hipcc: the gather
    kernel is compiled at run time by hiprtc, loaded with dlopen,
    kvt_gpu_kernel_rtc.c).

    What HIP does its own way: pinned memory is hipHostMalloc (in C the
    flags argument is mandatory; mapped, so the kernel reads the chunk buffer
    and its table in place); the 5.2 runtime does not export
    hipLaunchHostFunc, so host functions go through hipStreamAddCallback;
    hipMemcpyBatchAsync is looked up in the loaded runtime (ROCm 7 has it,
    5.2 does not: one hipMemcpyAsync per segment there), with no attributes
    (HIP documents them as not supported); the kernel's code object is loaded
    with hipModuleLoadData and launched with hipModuleLaunchKernel. Copies
    from / to memory that is not pinned are synchronous in HIP; hipEventQuery
    on a never-recorded event reports success, as the interface documents.
*/
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <hip/hip_runtime_api.h>

#define KVT_RT(name) hip##name
#include "kvt_gpu_devrt_calls.h"
#include "kvt_gpu_kernel.h"

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

static int s_host_register(void *ptr, size_t bytes)
{
    return hipHostRegister(ptr, bytes, hipHostRegisterPortable);
}

static int s_host_unregister(void *ptr)
{
    return hipHostUnregister(ptr);
}

static int s_pci_bus_id(int device, char *buf, int len)
{
    return hipDeviceGetPCIBusId(buf, len, device);
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

//  hipMemcpyBatchAsync as ROCm 7 declares it (attrs unused: NULL, 0).
typedef hipError_t (*s_batch_fn)(void **dsts, void **srcs, size_t *sizes, size_t count, void *attrs,
                                 size_t *attrs_idxs, size_t num_attrs, size_t *fail_idx,
                                 hipStream_t stream);

static s_batch_fn s_batch_sym;
static pthread_once_t s_batch_once = PTHREAD_ONCE_INIT;

static void s_batch_lookup(void)
{
    void *p = dlsym(RTLD_DEFAULT, "hipMemcpyBatchAsync");
    memcpy(&s_batch_sym, &p, sizeof p);
}

static bool s_batch_probe(void)
{
    pthread_once(&s_batch_once, s_batch_lookup);
    return s_batch_sym != NULL;
}

static int s_batch(const kvt_gpu_copy_t *copy, void *stream, size_t *fail_idx)
{
    if (!s_batch_probe())
        return hipErrorNotSupported;
    *fail_idx = SIZE_MAX;
    return s_batch_sym(copy->dst, (void **)copy->src, copy->len, copy->count, NULL, NULL, 0,
                       fail_idx, (hipStream_t)stream);
}

//  A code object of the kernel for the device's architecture.
static int s_kernel_image(int device, void **image, size_t *len, char *why, size_t why_len)
{
    hipDeviceProp_t prop;
    if (hipGetDeviceProperties(&prop, device) != hipSuccess) {
        (void)hipGetLastError();
        kvt_gpu_fmt(why, why_len, "hip: architecture of device %d unknown", device);
        return KVT_GPU_EDEVICE;
    }
    return kvt_gpu_rtc_compile(KVT_GPU_RTC_HIPRTC, prop.gcnArchName, image, len, why, why_len);
}

static int s_module_load(const void *image, size_t len, void **module, void **fn)
{
    (void)len;
    hipModule_t mod = NULL;
    hipError_t rc = hipModuleLoadData(&mod, image);
    if (rc != hipSuccess)
        return rc;
    hipFunction_t f = NULL;
    rc = hipModuleGetFunction(&f, mod, KVT_GPU_KERNEL_NAME);
    if (rc != hipSuccess) {
        hipModuleUnload(mod);
        return rc;
    }
    *module = mod;
    *fn = f;
    return hipSuccess;
}

static int s_module_unload(void *module)
{
    return hipModuleUnload((hipModule_t)module);
}

static int s_launch(void *fn, uint32_t grid, uint32_t threads, const void *tab, int to_host,
                    void *stream)
{
    void *args[] = {&tab, &to_host};
    return hipModuleLaunchKernel((hipFunction_t)fn, grid, 1, 1, threads, 1, 1, 0,
                                 (hipStream_t)stream, args, NULL);
}

const kvt_devrt_t kvt_gpu_hip_rt = {
    KVT_DEVRT_CALLS,
    .name = "hip",
    .device_info = s_device_info,
    .host_alloc = s_host_alloc,
    .host_free = s_host_free,
    .host_alloc_call = "hipHostMalloc",
    .host_register = s_host_register,
    .host_unregister = s_host_unregister,
    .host_register_call = "hipHostRegister",
    .pci_bus_id = s_pci_bus_id,
    .host_fn = s_host_fn,
    .host_fn_call = "hipStreamAddCallback",
    .memcpy_batch = s_batch,
    .batch_probe = s_batch_probe,
    .batch_call = "hipMemcpyBatchAsync",
    .kernel_image = s_kernel_image,
    .module_load = s_module_load,
    .module_unload = s_module_unload,
    .launch = s_launch,
    .launch_call = "hipModuleLaunchKernel",
    .rtc = KVT_GPU_RTC_HIPRTC,
};
