/*  kvt_gpu_devrt.h — private to src/gpu: the table of device-runtime calls
    that the shared device backend (kvt_gpu_devrt.c) runs on.

    CUDA and HIP are one backend implementation over two tables: every
    runtime call the backend makes goes through a kvt_devrt_t, which
    kvt_gpu_cuda.c fills from the CUDA runtime (cudaXxx) and kvt_gpu_hip.c
    from the HIP runtime (hipXxx); tests fill one with a fake runtime. The
    shared code includes no runtime header: handles are void *, statuses are
    ints, `ok` and `not_ready` name the runtime's two special statuses.

    Every entry returns the runtime's status (as an int) unless noted. Entries
    that a runtime lacks are NULL (only memcpy_batch, batch_probe, the kernel
    entries, host_register / host_unregister and now_ns may be).
*/
#ifndef KVT_GPU_DEVRT_H_INCLUDED
#define KVT_GPU_DEVRT_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvt_gpu_int.h"

struct _kvt_devrt_t {
    const char *name; //  backend name and runtime call prefix: "cuda" (cudaMalloc), "hip"
    int ok;           //  the success status (cudaSuccess, hipSuccess)
    int not_ready;    //  "queued work has not finished" (cudaErrorNotReady, ...)

    //  Status names and text (never NULL), and the clearing of a sticky
    //  last error.
    const char *(*error_name)(int rc);
    const char *(*error_string)(int rc);
    int (*get_last_error)(void);

    //  Devices. device_info fills the device's name and memory, and `runtime`
    //  with the runtime version ("runtime 13000", "HIP 5.2").
    int (*get_device_count)(int *count);
    int (*get_device)(int *device);
    int (*set_device)(int device);
    int (*device_info)(int device, char *name, size_t name_len, size_t *memory, char *runtime,
                       size_t runtime_len);
    int (*device_sync)(void);

    //  Device memory (memset is synchronous with respect to device_sync).
    int (*dev_malloc)(void **out, size_t bytes);
    int (*dev_free)(void *ptr);
    int (*memset)(void *ptr, int value, size_t bytes);

    //  Pinned host memory, portable across devices; `host_alloc_call` names
    //  the runtime call in messages ("cudaHostAlloc", "hipHostMalloc").
    int (*host_alloc)(void **out, size_t bytes);
    int (*host_free)(void *ptr);
    const char *host_alloc_call;
    //  Registration (pinning) of existing host memory, portable across
    //  devices (NULL: the runtime has none); `host_register_call` names it.
    int (*host_register)(void *ptr, size_t bytes);
    int (*host_unregister)(void *ptr);
    const char *host_register_call;
    //  The device's PCI bus id, for its NUMA node (NULL: the runtime has none).
    int (*pci_bus_id)(int device, char *buf, int len);

    //  Streams: non-blocking (no implicit order with the null stream).
    int (*stream_create)(void **out);
    int (*stream_destroy)(void *stream);
    int (*stream_query)(void *stream);
    int (*stream_sync)(void *stream);

    //  Events: no timing.
    int (*event_create)(void **out);
    int (*event_destroy)(void *event);
    int (*event_record)(void *event, void *stream);
    int (*stream_wait_event)(void *stream, void *event);
    int (*event_query)(void *event);
    int (*event_sync)(void *event);

    //  One async copy of `len` bytes in direction `dir`.
    int (*memcpy_async)(void *dst, const void *src, size_t len, kvt_gpu_dir_t dir, void *stream);
    //  The whole batch in one call (NULL: the runtime has none). On refusal
    //  `fail_idx` is the refused copy, or SIZE_MAX when the runtime does not
    //  say. The runtime does not promise that a refused batch queued none of
    //  its copies.
    int (*memcpy_batch)(const kvt_gpu_copy_t *copy, void *stream, size_t *fail_idx);
    //  Whether memcpy_batch is usable in the loaded runtime (NULL: it is);
    //  `batch_call` names it in messages.
    bool (*batch_probe)(void);
    const char *batch_call;

    //  The gather / scatter kernel (kvt_gpu_kernel.h); all NULL: no kernel
    //  path. kernel_image returns a KVT_GPU_E* code (not a runtime status):
    //  0 with a malloc'd image for `device` (compiled at run time by `rtc`),
    //  else the reason in `why`. module_load loads an image and finds the
    //  kernel; launch queues it over `grid` thread blocks of `threads` with
    //  the arguments (tab, to_host), `tab` a device-readable address.
    int (*kernel_image)(int device, void **image, size_t *len, char *why, size_t why_len);
    int (*module_load)(const void *image, size_t len, void **module, void **fn);
    int (*module_unload)(void *module);
    int (*launch)(void *fn, uint32_t grid, uint32_t threads, const void *tab, int to_host,
                  void *stream);
    const char *launch_call; //  names launch in messages
    int rtc;                 //  the compiler kernel_image uses (kvt_gpu_rtc_t), 0 when none

    //  The start-up micro-benchmark's clock, ns (NULL: CLOCK_MONOTONIC).
    uint64_t (*now_ns)(void);

    //  A host function in stream order; it must not run on a failed stream.
    //  `host_fn_call` names the runtime call in messages.
    int (*host_fn)(void *stream, kvt_gpu_host_fn *fn, void *arg);
    const char *host_fn_call;
};

//  The shared backend vtable; a device opened on it finds its runtime table
//  in gpu->rt.
extern const kvt_gpu_ops_t kvt_gpu_devrt_ops;

//  Device count through `rt`: 0 with *count set, or KVT_GPU_ENODEV with *count
//  = 0 and `why` naming the runtime's error (the sticky error is cleared).
int kvt_gpu_devrt_probe(const kvt_devrt_t *rt, int *count, char *why, size_t why_len);

//  The runtime stream under a stream of a device opened on the shared
//  backend (tests look into their fake runtime's queues with it).
void *kvt_gpu_devrt_stream(const kvt_gpu_stream_t *s);

//  The copy paths `rt` offers on this machine (kernel with its compiler
//  when that loads, batched copy when the runtime has it, per-segment).
void kvt_gpu_devrt_paths(const kvt_devrt_t *rt, char *out, size_t out_len);

#ifdef KVT_HAVE_HIP
extern const kvt_devrt_t kvt_gpu_hip_rt;
#endif
#ifdef KVT_HAVE_CUDA
extern const kvt_devrt_t kvt_gpu_cuda_rt;
#endif

#endif
