/*  kvt_gpu_select.c — opening a device: options with their defaults, the
    choice of backend (an explicit HOST / HIP / CUDA request, SIM, or AUTO:
    CUDA, else HIP, else host), the device probes, the one log line that says
    what was selected and why, and what `kvtier version` prints (compiled-in
    backends, what AUTO would select).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvt_gpu_devrt.h"
#include "kvt_gpu_int.h"

static void s_log_stderr(void *arg, int level, const char *line)
{
    (void)arg;
    if (level <= 2)
        fprintf(stderr, "kvt_gpu: %s\n", line);
}

const char *kvt_gpu_backend_name(kvt_gpu_backend_t backend)
{
    switch (backend) {
    case KVT_GPU_BACKEND_AUTO:
        return "auto";
    case KVT_GPU_BACKEND_HOST:
        return "host";
    case KVT_GPU_BACKEND_HIP:
        return "hip";
    case KVT_GPU_BACKEND_CUDA:
        return "cuda";
    }
    return "?";
}

bool kvt_gpu_compiled(kvt_gpu_backend_t backend)
{
    switch (backend) {
    case KVT_GPU_BACKEND_HOST:
        return true;
    case KVT_GPU_BACKEND_HIP:
#ifdef KVT_HAVE_HIP
        return true;
#else
        return false;
#endif
    case KVT_GPU_BACKEND_CUDA:
#ifdef KVT_HAVE_CUDA
        return true;
#else
        return false;
#endif
    default:
        return false;
    }
}

void kvt_gpu_copy_paths(kvt_gpu_backend_t backend, char *out, size_t out_len)
{
    if (backend == KVT_GPU_BACKEND_HOST) {
        kvt_gpu_fmt(out, out_len, "memcpy loop; kernel emulation (copy_path KERNEL)");
        return;
    }
    const kvt_devrt_t *rt = NULL;
#ifdef KVT_HAVE_CUDA
    if (backend == KVT_GPU_BACKEND_CUDA)
        rt = &kvt_gpu_cuda_rt;
#endif
#ifdef KVT_HAVE_HIP
    if (backend == KVT_GPU_BACKEND_HIP)
        rt = &kvt_gpu_hip_rt;
#endif
    if (!rt) {
        kvt_gpu_fmt(out, out_len, "not compiled in");
        return;
    }
    kvt_gpu_devrt_paths(rt, out, out_len);
}

// ----------------------------------------------------------- selection ----

//  The runtime table of a device backend compiled in, else NULL.
static const kvt_devrt_t *s_rt_of(kvt_gpu_backend_t backend)
{
#ifdef KVT_HAVE_CUDA
    if (backend == KVT_GPU_BACKEND_CUDA)
        return &kvt_gpu_cuda_rt;
#endif
#ifdef KVT_HAVE_HIP
    if (backend == KVT_GPU_BACKEND_HIP)
        return &kvt_gpu_hip_rt;
#endif
    (void)backend;
    return NULL;
}

//  Probes a device runtime: 0 when it has a device, else a negative code
//  with the reason in `why`.
static int s_probe(const kvt_devrt_t *rt, char *why, size_t why_len)
{
    if (!rt) {
        kvt_gpu_fmt(why, why_len, "not compiled in");
        return KVT_GPU_EUNSUPPORTED;
    }
    int count = 0;
    int rc = kvt_gpu_devrt_probe(rt, &count, why, why_len);
    if (rc == 0 && count <= 0) {
        kvt_gpu_fmt(why, why_len, "0 devices");
        rc = KVT_GPU_ENODEV;
    }
    return rc;
}

kvt_gpu_backend_t kvt_gpu_probe(char *why, size_t why_len)
{
    char cuda[160], hip[160];
    if (s_probe(s_rt_of(KVT_GPU_BACKEND_CUDA), cuda, sizeof cuda) == 0) {
        if (why)
            kvt_gpu_fmt(why, why_len, "cuda: %s", cuda);
        return KVT_GPU_BACKEND_CUDA;
    }
    if (s_probe(s_rt_of(KVT_GPU_BACKEND_HIP), hip, sizeof hip) == 0) {
        if (why)
            kvt_gpu_fmt(why, why_len, "hip: %s; cuda: %s", hip, cuda);
        return KVT_GPU_BACKEND_HIP;
    }
    if (why)
        kvt_gpu_fmt(why, why_len, "no device backend usable (cuda: %s; hip: %s)", cuda, hip);
    return KVT_GPU_BACKEND_HOST;
}

//  Opens the device backend `backend` on runtime `rt` (explicitly requested
//  or tried by AUTO). 0 or a negative code with the reason in `why`.
static int s_try_device(kvt_gpu_t *self, kvt_gpu_backend_t backend, const kvt_devrt_t *rt,
                        char *why, size_t why_len)
{
    int rc = s_probe(rt, why, why_len);
    if (rc != 0)
        return rc;
    char probe_why[160];
    kvt_gpu_fmt(probe_why, sizeof probe_why, "%s", why);
    self->ops = &kvt_gpu_devrt_ops;
    self->rt = rt;
    self->backend = backend;
    rc = self->ops->init(self);
    if (rc != 0) {
        kvt_gpu_fmt(why, why_len, "%s; init failed: %s", probe_why, kvt_gpu_last_error());
        self->ops = NULL;
        self->rt = NULL;
        self->impl = NULL;
        return rc;
    }
    return 0;
}

static int s_fill_opts(kvt_gpu_opts_t *o, const kvt_gpu_opts_t *in)
{
    if (in)
        *o = *in;
    else
        memset(o, 0, sizeof *o);
    if ((int)o->backend < KVT_GPU_BACKEND_AUTO || (int)o->backend > KVT_GPU_BACKEND_CUDA)
        return kvt_gpu_fail(KVT_GPU_EINVAL, "gpu opts: backend %d is not AUTO/HOST/HIP/CUDA",
                            (int)o->backend);
    if ((int)o->host_mode != KVT_GPU_HOST_LIVE && (int)o->host_mode != KVT_GPU_HOST_SIM)
        return kvt_gpu_fail(KVT_GPU_EINVAL, "gpu opts: host_mode %d is not LIVE/SIM",
                            (int)o->host_mode);
    if (o->host_mode == KVT_GPU_HOST_SIM) {
        if (o->backend == KVT_GPU_BACKEND_HIP || o->backend == KVT_GPU_BACKEND_CUDA)
            return kvt_gpu_fail(KVT_GPU_EINVAL,
                                "gpu opts: host_mode SIM runs on the host backend, not %s",
                                kvt_gpu_backend_name(o->backend));
        if (!o->now)
            return kvt_gpu_fail(KVT_GPU_EINVAL, "gpu opts: host_mode SIM needs a clock (now)");
    }
    if (o->device < 0)
        return kvt_gpu_fail(KVT_GPU_EINVAL, "gpu opts: device %d < 0", o->device);
    if (o->sim_bandwidth_Bps == 0)
        o->sim_bandwidth_Bps = KVT_GPU_DEFAULT_BW_BPS;
    if (o->sim_latency_ns == 0)
        o->sim_latency_ns = KVT_GPU_DEFAULT_LATENCY_NS;
    else if (o->sim_latency_ns == KVT_GPU_SIM_ZERO_LATENCY)
        o->sim_latency_ns = 0;
    if (o->event_max_rerecords == 0)
        o->event_max_rerecords = KVT_GPU_DEFAULT_MAX_RERECORDS;
    if (o->event_max_rerecords > 1000000)
        return kvt_gpu_fail(KVT_GPU_EINVAL, "gpu opts: event_max_rerecords %u > 1000000",
                            o->event_max_rerecords);
    if ((int)o->copy_path < KVT_GPU_PATH_AUTO || (int)o->copy_path > KVT_GPU_PATH_SEGMENT)
        return kvt_gpu_fail(KVT_GPU_EINVAL,
                            "gpu opts: copy_path %d is not AUTO/KERNEL/BATCH/SEGMENT",
                            (int)o->copy_path);
    if (o->kernel_max_blocks == 0)
        o->kernel_max_blocks = KVT_GPU_DEFAULT_KERNEL_BLOCKS;
    if (o->kernel_max_blocks > 65535)
        return kvt_gpu_fail(KVT_GPU_EINVAL, "gpu opts: kernel_max_blocks %u > 65535",
                            o->kernel_max_blocks);
    if (o->sim_entry_ns == 0)
        o->sim_entry_ns = KVT_GPU_DEFAULT_SIM_ENTRY_NS;
    else if (o->sim_entry_ns == KVT_GPU_SIM_ZERO_LATENCY)
        o->sim_entry_ns = 0;
    if (!o->log) {
        o->log = s_log_stderr;
        o->log_arg = NULL;
    }
    return 0;
}

static void s_host_describe(kvt_gpu_t *self, const char *why)
{
    if (self->opts.host_mode == KVT_GPU_HOST_SIM)
        kvt_gpu_fmt(self->describe, sizeof self->describe,
                    "host (sim, %.3g GB/s, %llu ns per copy): %s",
                    (double)self->opts.sim_bandwidth_Bps / 1e9,
                    (unsigned long long)self->opts.sim_latency_ns, why);
    else
        kvt_gpu_fmt(self->describe, sizeof self->describe,
                    "host (live, a worker thread per stream): %s", why);
    if (self->opts.copy_path != KVT_GPU_PATH_AUTO) {
        static const char *const path[] = {"auto", "kernel (host emulation)", "batch",
                                           "per-segment"};
        size_t at = strlen(self->describe);
        kvt_gpu_fmt(self->describe + at, sizeof self->describe - at, "; copy path %s",
                    path[self->opts.copy_path]);
    }
}

kvt_gpu_t *kvt_gpu_new(const kvt_gpu_opts_t *opts)
{
    return kvt_gpu_open(opts, NULL);
}

kvt_gpu_t *kvt_gpu_open(const kvt_gpu_opts_t *opts, const kvt_devrt_t *rt)
{
    kvt_gpu_t *self = calloc(1, sizeof *self);
    if (!self) {
        kvt_gpu_fail(KVT_GPU_ENOMEM, "gpu: out of memory");
        return NULL;
    }
    if (s_fill_opts(&self->opts, opts) != 0) {
        free(self);
        return NULL;
    }
    pthread_mutex_init(&self->mu, NULL);
    kvt_gpu_backend_t want = self->opts.backend;
    char why[200], why2[200], line[480];
    int rc = 0;

    if (want == KVT_GPU_BACKEND_CUDA || want == KVT_GPU_BACKEND_HIP) {
        if (!rt)
            rt = s_rt_of(want);
        if (!rt) {
            rc = kvt_gpu_fail(KVT_GPU_EUNSUPPORTED,
                              "gpu: backend %s requested but not compiled into this build",
                              kvt_gpu_backend_name(want));
            goto cleanup;
        }
        rc = s_try_device(self, want, rt, why, sizeof why);
        if (rc != 0) {
            rc = kvt_gpu_fail(rc == KVT_GPU_EUNSUPPORTED ? KVT_GPU_ENODEV : rc,
                              "gpu: backend %s requested but unusable: %s",
                              kvt_gpu_backend_name(want), why);
            self->opts.log(self->opts.log_arg, 0, kvt_gpu_last_error());
            goto cleanup;
        }
        kvt_gpu_fmt(self->describe, sizeof self->describe, "%s (%s): requested; %s",
                    kvt_gpu_backend_name(want), self->device_desc, why);
    } else if (want == KVT_GPU_BACKEND_HOST || self->opts.host_mode == KVT_GPU_HOST_SIM) {
        self->ops = &kvt_gpu_host_ops;
        self->backend = KVT_GPU_BACKEND_HOST;
        s_host_describe(self, want == KVT_GPU_BACKEND_HOST
                                  ? "requested"
                                  : "AUTO: sim mode runs on the host backend");
        rc = self->ops->init(self);
    } else {
        //  AUTO, live: the first device backend with a device, else host.
        if (s_try_device(self, KVT_GPU_BACKEND_CUDA, s_rt_of(KVT_GPU_BACKEND_CUDA), why,
                         sizeof why) == 0)
            kvt_gpu_fmt(self->describe, sizeof self->describe, "cuda (%s): AUTO: %s",
                        self->device_desc, why);
        else if (s_try_device(self, KVT_GPU_BACKEND_HIP, s_rt_of(KVT_GPU_BACKEND_HIP), why2,
                              sizeof why2) == 0)
            kvt_gpu_fmt(self->describe, sizeof self->describe, "hip (%s): AUTO: %s; cuda: %s",
                        self->device_desc, why2, why);
        else {
            kvt_gpu_fmt(line, sizeof line, "AUTO: no device backend usable (cuda: %s; hip: %s)",
                        why, why2);
            self->ops = &kvt_gpu_host_ops;
            self->backend = KVT_GPU_BACKEND_HOST;
            s_host_describe(self, line);
            rc = self->ops->init(self);
        }
    }
    if (rc != 0)
        goto cleanup;
    if (self->backend != KVT_GPU_BACKEND_HOST && self->copy_paths[0]) {
        size_t at = strlen(self->describe);
        kvt_gpu_fmt(self->describe + at, sizeof self->describe - at, "; copy paths: %s",
                    self->copy_paths);
    }
    kvt_gpu_log(self, 2, "backend %s", self->describe);
    return self;

cleanup:
    pthread_mutex_destroy(&self->mu);
    free(self);
    return NULL;
}

kvt_gpu_backend_t kvt_gpu_backend(const kvt_gpu_t *self)
{
    return self->backend;
}

bool kvt_gpu_is_sim(const kvt_gpu_t *self)
{
    return self->backend == KVT_GPU_BACKEND_HOST && self->opts.host_mode == KVT_GPU_HOST_SIM;
}

const char *kvt_gpu_describe(const kvt_gpu_t *self)
{
    return self->describe;
}
