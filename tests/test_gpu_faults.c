/*  test_gpu_faults.c — injected failures and stalls on the host backend,
    under LIVE and SIM: a failed op changes nothing and reports on every
    event recorded after it, on later enqueues, and on streams that wait on
    it; events recorded before it stay successful. Stalls hold a stream
    until cleared and shutdown ends them.

    A failed call is atomic for the caller: on the host backend a
    refused call queues nothing (its buffer can be freed at once). The
    device backend's side of it is in test_gpu_devrt.c (a fake runtime).
*/
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kvtier/kvt_gpu.h"

static int s_modes[] = {KVT_GPU_HOST_LIVE, KVT_GPU_HOST_SIM};

static uint64_t s_clock(void *arg)
{
    return atomic_load((_Atomic uint64_t *)arg);
}

static atomic_int s_errors_logged; //  level-0 log lines

static void s_quiet(void *arg, int level, const char *line)
{
    (void)arg;
    (void)line;
    if (level == 0)
        atomic_fetch_add(&s_errors_logged, 1);
}

typedef struct {
    _Atomic uint64_t now; //  SIM clock
    kvt_gpu_t *gpu;       //  the device
    uint8_t buf[4096];    //  scratch
} dev_t;

static void s_open(dev_t *d, int mode)
{
    memset(d, 0, sizeof *d);
    kvt_gpu_opts_t o = {0};
    o.backend = KVT_GPU_BACKEND_HOST;
    o.host_mode = (kvt_gpu_host_mode_t)mode;
    o.now = s_clock;
    o.now_arg = (void *)&d->now;
    o.log = s_quiet;
    d->gpu = kvt_gpu_new(&o);
    cr_assert_not_null(d->gpu);
    kvt_gpu_plane_desc_t p = {"K", 2, 16, 64, NULL};
    cr_assert_eq(kvt_gpu_plane_add(d->gpu, &p), 0);
}

//  Completes whatever `ev` marks: SIM by synchronize (forced), LIVE by
//  synchronize. Returns the status (negative on failure).
static int s_sync(kvt_gpu_event_t *ev)
{
    int rc = kvt_gpu_event_synchronize(ev);
    return rc == KVT_GPU_FORCED ? 0 : rc;
}

ParameterizedTestParameters(faults, a_failed_op_changes_nothing_and_reports_everywhere)
{
    return cr_make_param_array(int, s_modes, 2);
}
ParameterizedTest(int *mode, faults, a_failed_op_changes_nothing_and_reports_everywhere)
{
    dev_t d;
    s_open(&d, *mode);
    kvt_gpu_stream_t *a = kvt_gpu_stream_new(d.gpu, "a");
    kvt_gpu_stream_t *b = kvt_gpu_stream_new(d.gpu, "b");
    const uint32_t blk[] = {3};
    memset(d.buf, 0x77, 128);
    cr_assert_eq(kvt_gpu_gather(a, blk, 1, d.buf + 1024, 128), 0);
    kvt_gpu_event_t *before = kvt_gpu_event_new(d.gpu);
    cr_assert_eq(kvt_gpu_event_record(before, a), 0);

    cr_assert_eq(kvt_gpu_stream_inject(a, KVT_GPU_FAULT_FAIL, 1), 0);
    cr_assert_eq(kvt_gpu_scatter(a, blk, 1, d.buf, 128), 0, "queued; fails when it runs");
    kvt_gpu_event_t *after = kvt_gpu_event_new(d.gpu);
    cr_assert_eq(kvt_gpu_event_record(after, a), 0);
    //  B is held until its work is queued (else, under LIVE, its wait could
    //  fail, and refuse the gather, before the gather is queued).
    cr_assert_eq(kvt_gpu_stream_inject(b, KVT_GPU_FAULT_STALL, 0), 0);
    cr_assert_eq(kvt_gpu_stream_wait_event(b, after), 0);
    memset(d.buf + 2048, 0xEE, 128);
    cr_assert_eq(kvt_gpu_gather(b, blk, 1, d.buf + 2048, 128), 0);
    kvt_gpu_event_t *eb = kvt_gpu_event_new(d.gpu);
    cr_assert_eq(kvt_gpu_event_record(eb, b), 0);
    cr_assert_eq(kvt_gpu_stream_inject(b, KVT_GPU_FAULT_NONE, 0), 0);

    cr_assert_eq(s_sync(before), 0, "work before the failure succeeded");
    cr_assert_eq(s_sync(after), KVT_GPU_EFAULT);
    cr_assert(strstr(kvt_gpu_last_error(), "injected"), "%s", kvt_gpu_last_error());
    cr_assert_eq(kvt_gpu_event_query(after), KVT_GPU_EFAULT);
    cr_assert_eq(kvt_gpu_stream_query(a), KVT_GPU_EFAULT);
    uint8_t *blk3 = kvt_gpu_plane_ptr(d.gpu, 0, 0, 3);
    cr_assert_eq(blk3[0], 0, "the failed scatter wrote");
    //  The waiting stream fails too and its gather did not run.
    cr_assert_eq(s_sync(eb), KVT_GPU_EFAULT);
    cr_assert(strstr(kvt_gpu_last_error(), "awaited stream 'a'"), "%s", kvt_gpu_last_error());
    cr_assert_eq(d.buf[2048], 0xEE);
    //  Later enqueues on a failed stream are refused.
    cr_assert_eq(kvt_gpu_gather(a, blk, 1, d.buf, 128), KVT_GPU_EFAULT);
    cr_assert(strstr(kvt_gpu_last_error(), "failed earlier"), "%s", kvt_gpu_last_error());
    kvt_gpu_stats_t st;
    kvt_gpu_stats(d.gpu, &st);
    cr_assert_eq(st.ops_failed, 3, "scatter, B's wait and B's gather");
    //  A fresh stream works.
    kvt_gpu_stream_t *c = kvt_gpu_stream_new(d.gpu, "c");
    cr_assert_eq(kvt_gpu_scatter(c, blk, 1, d.buf, 128), 0);
    cr_assert_eq(kvt_gpu_stream_synchronize(c) < 0, 0);
    cr_assert_eq(blk3[0], 0x77);
    kvt_gpu_event_destroy(&before);
    kvt_gpu_event_destroy(&after);
    kvt_gpu_event_destroy(&eb);
    kvt_gpu_stream_destroy(&a);
    kvt_gpu_stream_destroy(&b);
    kvt_gpu_stream_destroy(&c);
    kvt_gpu_destroy(&d.gpu);
}

ParameterizedTestParameters(faults, a_stalled_stream_holds_until_cleared)
{
    return cr_make_param_array(int, s_modes, 2);
}
ParameterizedTest(int *mode, faults, a_stalled_stream_holds_until_cleared)
{
    dev_t d;
    s_open(&d, *mode);
    kvt_gpu_stream_t *a = kvt_gpu_stream_new(d.gpu, "a");
    cr_assert_eq(kvt_gpu_stream_inject(a, KVT_GPU_FAULT_STALL, 0), 0);
    const uint32_t blk[] = {9};
    memset(d.buf, 0x42, 128);
    cr_assert_eq(kvt_gpu_scatter(a, blk, 1, d.buf, 128), 0);
    kvt_gpu_event_t *ev = kvt_gpu_event_new(d.gpu);
    cr_assert_eq(kvt_gpu_event_record(ev, a), 0);
    atomic_store(&d.now, 1000000);
    cr_assert_eq(kvt_gpu_event_query(ev), KVT_GPU_NOT_READY);
    cr_assert_eq(((uint8_t *)kvt_gpu_plane_ptr(d.gpu, 0, 0, 9))[0], 0);
    cr_assert_eq(kvt_gpu_stream_inject(a, KVT_GPU_FAULT_NONE, 0), 0);
    cr_assert_eq(s_sync(ev), 0);
    cr_assert_eq(((uint8_t *)kvt_gpu_plane_ptr(d.gpu, 0, 0, 9))[0], 0x42);
    //  A stall left in place is ended by shutdown (which drains).
    cr_assert_eq(kvt_gpu_stream_inject(a, KVT_GPU_FAULT_STALL, 0), 0);
    memset(d.buf, 0x43, 128);
    cr_assert_eq(kvt_gpu_scatter(a, blk, 1, d.buf, 128), 0);
    kvt_gpu_event_destroy(&ev);
    kvt_gpu_destroy(&d.gpu);
}

ParameterizedTestParameters(faults, bad_injections_are_refused)
{
    return cr_make_param_array(int, s_modes, 2);
}
ParameterizedTest(int *mode, faults, bad_injections_are_refused)
{
    dev_t d;
    s_open(&d, *mode);
    kvt_gpu_stream_t *a = kvt_gpu_stream_new(d.gpu, "a");
    cr_assert_eq(kvt_gpu_stream_inject(a, KVT_GPU_FAULT_FAIL, 0), KVT_GPU_EINVAL);
    cr_assert_eq(kvt_gpu_stream_inject(a, (kvt_gpu_fault_t)9, 1), KVT_GPU_EINVAL);
    cr_assert_eq(kvt_gpu_launch_host_fn(a, NULL, NULL, 0), KVT_GPU_EINVAL);
    kvt_gpu_destroy(&d.gpu);
}

static void s_set_flag(void *arg)
{
    atomic_store((atomic_int *)arg, 1);
}

ParameterizedTestParameters(faults, a_refused_call_queues_nothing_and_its_buffer_can_go)
{
    return cr_make_param_array(int, s_modes, 2);
}
ParameterizedTest(int *mode, faults, a_refused_call_queues_nothing_and_its_buffer_can_go)
{
    dev_t d;
    s_open(&d, *mode);
    kvt_gpu_stream_t *a = kvt_gpu_stream_new(d.gpu, "a");
    kvt_gpu_stream_t *b = kvt_gpu_stream_new(d.gpu, "b");
    const uint32_t blk[] = {3};
    //  Fail `a` and observe it.
    cr_assert_eq(kvt_gpu_stream_inject(a, KVT_GPU_FAULT_FAIL, 1), 0);
    cr_assert_eq(kvt_gpu_scatter(a, blk, 1, d.buf, 128), 0);
    cr_assert_eq(kvt_gpu_stream_synchronize(a), KVT_GPU_EFAULT);
    //  Keep `b` busy behind a stall, so a wrongly queued op would still be
    //  pending when its buffer goes.
    cr_assert_eq(kvt_gpu_stream_inject(b, KVT_GPU_FAULT_STALL, 0), 0);
    cr_assert_eq(kvt_gpu_gather(b, blk, 1, d.buf + 2048, 128), 0);
    kvt_gpu_stats_t before, after;
    kvt_gpu_stats(d.gpu, &before);

    uint8_t *buf = malloc(128);
    cr_assert_not_null(buf);
    cr_assert_eq(kvt_gpu_gather(a, blk, 1, buf, 128), KVT_GPU_EFAULT);
    cr_assert_eq(kvt_gpu_state_to_host(a, KVT_GPU_STATE_SLOTS, 0, buf, 128), KVT_GPU_EINVAL);
    const uint32_t bad[] = {3, 99};
    cr_assert_eq(kvt_gpu_gather(b, bad, 2, buf, 128), KVT_GPU_EINVAL);
    cr_assert_eq(kvt_gpu_gather(b, blk, 1, buf, 127), KVT_GPU_EINVAL);
    atomic_int ran = 0;
    cr_assert_eq(kvt_gpu_launch_host_fn(a, s_set_flag, &ran, 0), KVT_GPU_EFAULT);
    //  The caller frees at once (ASan catches a copy that still runs).
    free(buf);
    kvt_gpu_stats(d.gpu, &after);
    cr_assert_eq(after.ops_queued, before.ops_queued, "nothing was queued");
    cr_assert_eq(after.gathers, before.gathers);
    cr_assert_eq(after.bytes_gathered, before.bytes_gathered);

    cr_assert_eq(kvt_gpu_stream_inject(b, KVT_GPU_FAULT_NONE, 0), 0);
    int rc = kvt_gpu_stream_synchronize(b);
    cr_assert(rc == 0 || rc == KVT_GPU_FORCED, "%d", rc);
    kvt_gpu_stats(d.gpu, &after);
    cr_assert_eq(after.ops_done + after.ops_failed, after.ops_queued);
    cr_assert_eq(atomic_load(&ran), 0);
    kvt_gpu_stream_destroy(&a);
    kvt_gpu_stream_destroy(&b);
    kvt_gpu_destroy(&d.gpu);
}
