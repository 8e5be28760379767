/*  kvt_gpu_devrt_calls.h — the runtime calls that CUDA and HIP name and
    shape alike (cudaMalloc / hipMalloc, cudaStreamQuery / hipStreamQuery,
    cudaSuccess / hipSuccess, ...), wrapped once as kvt_devrt_t entries.

    Included only by kvt_gpu_cuda.c and kvt_gpu_hip.c, after their runtime
    header, with KVT_RT (name) defined to paste the runtime's prefix
    (cuda##name, hip##name). KVT_DEVRT_CALLS is the part of a kvt_devrt_t
    initializer these wrappers fill; the backend file adds what its runtime
    does its own way (pinned allocation, host functions, device properties,
    a batched copy).
*/
#ifndef KVT_GPU_DEVRT_CALLS_H_INCLUDED
#define KVT_GPU_DEVRT_CALLS_H_INCLUDED

#ifndef KVT_RT
#error "define KVT_RT(name) to paste the runtime prefix before including kvt_gpu_devrt_calls.h"
#endif

#include "kvt_gpu_devrt.h"

typedef KVT_RT(Error_t) s_rt_error_t;   //  the runtime's status type
typedef KVT_RT(Stream_t) s_rt_stream_t; //  the runtime's stream handle
typedef KVT_RT(Event_t) s_rt_event_t;   //  the runtime's event handle

static const char *s_rt_error_name(int rc)
{
    return KVT_RT(GetErrorName)((s_rt_error_t)rc);
}

static const char *s_rt_error_string(int rc)
{
    return KVT_RT(GetErrorString)((s_rt_error_t)rc);
}

static int s_rt_get_last_error(void)
{
    return KVT_RT(GetLastError)();
}

static int s_rt_get_device_count(int *count)
{
    return KVT_RT(GetDeviceCount)(count);
}

static int s_rt_get_device(int *device)
{
    return KVT_RT(GetDevice)(device);
}

static int s_rt_set_device(int device)
{
    return KVT_RT(SetDevice)(device);
}

static int s_rt_device_sync(void)
{
    return KVT_RT(DeviceSynchronize)();
}

static int s_rt_dev_malloc(void **out, size_t bytes)
{
    return KVT_RT(Malloc)(out, bytes);
}

static int s_rt_dev_free(void *ptr)
{
    return KVT_RT(Free)(ptr);
}

static int s_rt_memset(void *ptr, int value, size_t bytes)
{
    return KVT_RT(Memset)(ptr, value, bytes);
}

static int s_rt_stream_create(void **out)
{
    s_rt_stream_t st = NULL;
    s_rt_error_t rc = KVT_RT(StreamCreateWithFlags)(&st, KVT_RT(StreamNonBlocking));
    *out = st;
    return rc;
}

static int s_rt_stream_destroy(void *stream)
{
    return KVT_RT(StreamDestroy)((s_rt_stream_t)stream);
}

static int s_rt_stream_query(void *stream)
{
    return KVT_RT(StreamQuery)((s_rt_stream_t)stream);
}

static int s_rt_stream_sync(void *stream)
{
    return KVT_RT(StreamSynchronize)((s_rt_stream_t)stream);
}

static int s_rt_event_create(void **out)
{
    s_rt_event_t ev = NULL;
    s_rt_error_t rc = KVT_RT(EventCreateWithFlags)(&ev, KVT_RT(EventDisableTiming));
    *out = ev;
    return rc;
}

static int s_rt_event_destroy(void *event)
{
    return KVT_RT(EventDestroy)((s_rt_event_t)event);
}

static int s_rt_event_record(void *event, void *stream)
{
    return KVT_RT(EventRecord)((s_rt_event_t)event, (s_rt_stream_t)stream);
}

static int s_rt_stream_wait_event(void *stream, void *event)
{
    return KVT_RT(StreamWaitEvent)((s_rt_stream_t)stream, (s_rt_event_t)event, 0);
}

static int s_rt_event_query(void *event)
{
    return KVT_RT(EventQuery)((s_rt_event_t)event);
}

static int s_rt_event_sync(void *event)
{
    return KVT_RT(EventSynchronize)((s_rt_event_t)event);
}

static int s_rt_memcpy_async(void *dst, const void *src, size_t len, kvt_gpu_dir_t dir,
                             void *stream)
{
    return KVT_RT(MemcpyAsync)(dst, src, len,
                               dir == KVT_GPU_D2H   ? KVT_RT(MemcpyDeviceToHost)
                               : dir == KVT_GPU_H2D ? KVT_RT(MemcpyHostToDevice)
                                                    : KVT_RT(MemcpyDeviceToDevice),
                               (s_rt_stream_t)stream);
}

//  The kvt_devrt_t entries above, for the backend's table initializer.
#define KVT_DEVRT_CALLS                                                                            \
    .ok = KVT_RT(Success), .not_ready = KVT_RT(ErrorNotReady), .error_name = s_rt_error_name,      \
    .error_string = s_rt_error_string, .get_last_error = s_rt_get_last_error,                      \
    .get_device_count = s_rt_get_device_count, .get_device = s_rt_get_device,                      \
    .set_device = s_rt_set_device, .device_sync = s_rt_device_sync, .dev_malloc = s_rt_dev_malloc, \
    .dev_free = s_rt_dev_free, .memset = s_rt_memset, .stream_create = s_rt_stream_create,         \
    .stream_destroy = s_rt_stream_destroy, .stream_query = s_rt_stream_query,                      \
    .stream_sync = s_rt_stream_sync, .event_create = s_rt_event_create,                            \
    .event_destroy = s_rt_event_destroy, .event_record = s_rt_event_record,                        \
    .stream_wait_event = s_rt_stream_wait_event, .event_query = s_rt_event_query,                  \
    .event_sync = s_rt_event_sync, .memcpy_async = s_rt_memcpy_async

#endif
