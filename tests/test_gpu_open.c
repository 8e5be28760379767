/*  test_gpu_open.c — opening a device: option validation, backend selection
    (AUTO, explicit HOST / HIP / CUDA, SIM), the one log line that says which
    backend was selected and why, and the compiled-in / probe queries that
    `kvtier version` prints.
*/
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "kvtier/kvt_gpu.h"

//  Captures log lines.
typedef struct {
    int lines;      //  lines seen
    int info;       //  lines at level 2
    char last[600]; //  the last line
} capture_t;

static void s_capture(void *arg, int level, const char *line)
{
    capture_t *c = arg;
    c->lines++;
    if (level == 2)
        c->info++;
    snprintf(c->last, sizeof c->last, "%s", line);
}

static uint64_t s_zero(void *arg)
{
    (void)arg;
    return 0;
}

Test(open, one_log_line_names_the_backend_and_why)
{
    capture_t c = {0};
    kvt_gpu_opts_t o = {0};
    o.backend = KVT_GPU_BACKEND_HOST;
    o.log = s_capture;
    o.log_arg = &c;
    kvt_gpu_t *gpu = kvt_gpu_new(&o);
    cr_assert_not_null(gpu);
    cr_assert_eq(c.lines, 1);
    cr_assert_eq(c.info, 1);
    cr_assert(strstr(c.last, "host (live"), "%s", c.last);
    cr_assert(strstr(c.last, "requested"), "%s", c.last);
    cr_assert(strstr(kvt_gpu_describe(gpu), "requested"));
    cr_assert_eq(kvt_gpu_backend(gpu), KVT_GPU_BACKEND_HOST);
    cr_assert_not(kvt_gpu_is_sim(gpu));
    kvt_gpu_destroy(&gpu);
}

Test(open, auto_without_a_device_falls_back_to_host_and_says_why)
{
    char why[400];
    if (kvt_gpu_probe(why, sizeof why) != KVT_GPU_BACKEND_HOST)
        cr_skip_test("a device is present: %s", why);
    cr_assert(strstr(why, "cuda:") && strstr(why, "hip:"), "%s", why);
    capture_t c = {0};
    kvt_gpu_opts_t o = {0};
    o.log = s_capture;
    o.log_arg = &c;
    kvt_gpu_t *gpu = kvt_gpu_new(&o);
    cr_assert_not_null(gpu);
    cr_assert_eq(kvt_gpu_backend(gpu), KVT_GPU_BACKEND_HOST);
    cr_assert_eq(c.lines, 1);
    cr_assert(strstr(c.last, "AUTO"), "%s", c.last);
    cr_assert(strstr(c.last, "cuda:") && strstr(c.last, "hip:"), "%s", c.last);
    kvt_gpu_destroy(&gpu);
    //  NULL options: the same.
    gpu = kvt_gpu_new(NULL);
    cr_assert_not_null(gpu);
    cr_assert_eq(kvt_gpu_backend(gpu), KVT_GPU_BACKEND_HOST);
    kvt_gpu_destroy(&gpu);
}

static void s_explicit(kvt_gpu_backend_t want)
{
    char why[400];
    kvt_gpu_backend_t probe = kvt_gpu_probe(why, sizeof why);
    if (kvt_gpu_compiled(want) && probe == want)
        cr_skip_test("a %s device is present", kvt_gpu_backend_name(want));
    capture_t c = {0};
    kvt_gpu_opts_t o = {0};
    o.backend = want;
    o.log = s_capture;
    o.log_arg = &c;
    kvt_gpu_t *gpu = kvt_gpu_new(&o);
    cr_assert_null(gpu, "an explicit %s request must not fall back", kvt_gpu_backend_name(want));
    cr_assert(strstr(kvt_gpu_last_error(), kvt_gpu_backend_name(want)), "%s", kvt_gpu_last_error());
}

Test(open, explicit_cuda_without_a_device_is_an_error)
{
    s_explicit(KVT_GPU_BACKEND_CUDA);
}

Test(open, explicit_hip_without_a_device_is_an_error)
{
    s_explicit(KVT_GPU_BACKEND_HIP);
}

Test(open, sim_runs_on_the_host_backend)
{
    kvt_gpu_opts_t o = {0};
    o.host_mode = KVT_GPU_HOST_SIM;
    o.now = s_zero;
    capture_t c = {0};
    o.log = s_capture;
    o.log_arg = &c;
    kvt_gpu_t *gpu = kvt_gpu_new(&o);
    cr_assert_not_null(gpu);
    cr_assert(kvt_gpu_is_sim(gpu));
    cr_assert(strstr(c.last, "sim"), "%s", c.last);
    kvt_gpu_destroy(&gpu);
}

Test(open, bad_options_are_refused_naming_the_option)
{
    kvt_gpu_opts_t o = {0};
    o.host_mode = KVT_GPU_HOST_SIM;
    cr_assert_null(kvt_gpu_new(&o));
    cr_assert(strstr(kvt_gpu_last_error(), "clock"), "%s", kvt_gpu_last_error());
    o.now = s_zero;
    o.backend = KVT_GPU_BACKEND_CUDA;
    cr_assert_null(kvt_gpu_new(&o));
    cr_assert(strstr(kvt_gpu_last_error(), "SIM"), "%s", kvt_gpu_last_error());
    memset(&o, 0, sizeof o);
    o.backend = (kvt_gpu_backend_t)9;
    cr_assert_null(kvt_gpu_new(&o));
    cr_assert(strstr(kvt_gpu_last_error(), "backend"), "%s", kvt_gpu_last_error());
    memset(&o, 0, sizeof o);
    o.host_mode = (kvt_gpu_host_mode_t)5;
    cr_assert_null(kvt_gpu_new(&o));
    cr_assert(strstr(kvt_gpu_last_error(), "host_mode"), "%s", kvt_gpu_last_error());
    memset(&o, 0, sizeof o);
    o.device = -1;
    cr_assert_null(kvt_gpu_new(&o));
    cr_assert(strstr(kvt_gpu_last_error(), "device"), "%s", kvt_gpu_last_error());
}

Test(open, compiled_backends_match_the_build)
{
    cr_assert(kvt_gpu_compiled(KVT_GPU_BACKEND_HOST));
#ifdef KVT_HAVE_HIP
    cr_assert(kvt_gpu_compiled(KVT_GPU_BACKEND_HIP));
#else
    cr_assert_not(kvt_gpu_compiled(KVT_GPU_BACKEND_HIP));
#endif
#ifdef KVT_HAVE_CUDA
    cr_assert(kvt_gpu_compiled(KVT_GPU_BACKEND_CUDA));
#else
    cr_assert_not(kvt_gpu_compiled(KVT_GPU_BACKEND_CUDA));
#endif
    cr_assert_not(kvt_gpu_compiled(KVT_GPU_BACKEND_AUTO));
    cr_assert_str_eq(kvt_gpu_backend_name(KVT_GPU_BACKEND_CUDA), "cuda");
    cr_assert_str_eq(kvt_gpu_backend_name(KVT_GPU_BACKEND_HIP), "hip");
    cr_assert_str_eq(kvt_gpu_backend_name(KVT_GPU_BACKEND_HOST), "host");
}

Test(open, status_codes_have_text)
{
    int codes[] = {KVT_GPU_OK,     KVT_GPU_NOT_READY, KVT_GPU_FORCED,       KVT_GPU_ERR,
                   KVT_GPU_EINVAL, KVT_GPU_ENOMEM,    KVT_GPU_EDEVICE,      KVT_GPU_EFAULT,
                   KVT_GPU_ELIMIT, KVT_GPU_ESTATE,    KVT_GPU_EUNSUPPORTED, KVT_GPU_ENODEV};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        for (size_t j = 0; j < i; j++)
            if (codes[i] != KVT_GPU_ERR && codes[j] != KVT_GPU_ERR)
                cr_assert_str_neq(kvt_gpu_strerror(codes[i]), kvt_gpu_strerror(codes[j]));
}
