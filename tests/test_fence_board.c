/*  test_fence_board.c — the rank's fence board on the host SIM backend
    (streams land in modelled time on a manual clock): producer events order
    a save's gather after the forward that wrote its blocks, compute events
    order a load after the forward that reads its blocks, restore events
    order the next forward after the loads, a failed record answers for no
    step, and the fault hook. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "actors/common/kvt_fence_board.h"
#include "kvtier/kvt_gpu.h"

#define S_BLOCK 1000 //  bytes of a block (bandwidth 1 byte/ns: a block costs 1000 ns + latency)

static uint64_t s_clock(void *arg)
{
    return *(uint64_t *)arg;
}

static void s_quiet(void *arg, int level, const char *line)
{
    (void)arg;
    (void)level;
    (void)line;
}

typedef struct {
    uint64_t now;              //  the manual clock
    kvt_gpu_t *gpu;            //  the device: one plane, 16 blocks x 1 layer x S_BLOCK
    kvt_gpu_stream_t *compute; //  the runner's compute stream
    kvt_gpu_stream_t *lane;    //  a worker lane's stream
    kvt_fence_board_t *board;  //  the board under test
    uint8_t buf[S_BLOCK];      //  a chunk buffer of one block
} fx_t;

static void s_open(fx_t *f, uint32_t depth)
{
    memset(f, 0, sizeof *f);
    kvt_gpu_opts_t o = {0};
    o.host_mode = KVT_GPU_HOST_SIM;
    o.now = s_clock;
    o.now_arg = &f->now;
    o.sim_bandwidth_Bps = 1000000000;
    o.sim_latency_ns = 1000;
    o.sim_entry_ns = KVT_GPU_SIM_ZERO_LATENCY;
    o.log = s_quiet;
    f->gpu = kvt_gpu_new(&o);
    cr_assert_not_null(f->gpu, "%s", kvt_gpu_last_error());
    kvt_gpu_plane_desc_t d = {"K", 1, 16, S_BLOCK, NULL};
    cr_assert_eq(kvt_gpu_plane_add(f->gpu, &d), 0);
    f->compute = kvt_gpu_stream_new(f->gpu, "compute");
    f->lane = kvt_gpu_stream_new(f->gpu, "lane");
    f->board = kvt_fence_board_new(f->gpu, depth);
    cr_assert(f->compute && f->lane && f->board);
}

static void s_close(fx_t *f)
{
    kvt_fence_board_destroy(&f->board);
    cr_assert_null(f->board);
    kvt_gpu_stream_destroy(&f->compute);
    kvt_gpu_stream_destroy(&f->lane);
    kvt_gpu_destroy(&f->gpu);
}

//  A "forward" writing one byte value into a block when it lands.
typedef struct {
    uint8_t *dst; //  the block's bytes
    uint8_t v;    //  the value
} fill_t;

static void s_fill_fn(void *arg)
{
    fill_t *w = arg;
    memset(w->dst, w->v, S_BLOCK);
}

//  Lands everything due up to t.
static void s_run_to(fx_t *f, uint64_t t)
{
    f->now = t;
    kvt_gpu_progress(f->gpu);
}

static bool s_all(const uint8_t *p, uint8_t v)
{
    for (size_t i = 0; i < S_BLOCK; i++)
        if (p[i] != v)
            return false;
    return true;
}

//  The forward writes block 3 in 50 µs; a save gathers it (2 µs).
static void s_forward_then_gather(fx_t *f, fill_t *w, bool wait)
{
    w->dst = kvt_gpu_plane_ptr(f->gpu, 0, 0, 3);
    w->v = 0xAB;
    cr_assert_eq(kvt_gpu_launch_host_fn(f->compute, s_fill_fn, w, 50000), 0);
    cr_assert_eq(kvt_fence_board_record_producer(f->board, 7, f->compute), 0);
    if (wait)
        cr_assert_eq(kvt_fence_board_wait_producer(f->board, 7, f->lane), 0);
    uint32_t b = 3;
    cr_assert_eq(kvt_gpu_gather(f->lane, &b, 1, f->buf, sizeof f->buf), 0);
    s_run_to(f, 100000);
}

Test(fence_board, producer_wait_orders_the_gather_after_the_forward)
{
    fx_t f;
    fill_t w;
    s_open(&f, 0);
    s_forward_then_gather(&f, &w, true);
    cr_assert(s_all(f.buf, 0xAB), "the gather waited for the forward: fresh bytes");
    kvt_fence_board_stats_t st;
    kvt_fence_board_stats(f.board, &st);
    cr_assert_eq(st.producers_recorded, 1);
    cr_assert_eq(st.producer_waits, 1);
    s_close(&f);
}

Test(fence_board, gather_without_producer_wait_reads_stale_bytes)
{
    fx_t f;
    fill_t w;
    s_open(&f, 0);
    s_forward_then_gather(&f, &w, false);
    cr_assert(s_all(f.buf, 0x00), "unfenced, the gather landed before the forward");
    s_close(&f);
}

Test(fence_board, wait_producer_for_a_step_without_event_is_refused)
{
    fx_t f;
    s_open(&f, 4);
    cr_assert_eq(kvt_fence_board_wait_producer(f.board, 1, f.lane), -1, "nothing recorded");
    cr_assert_eq(kvt_fence_board_record_producer(f.board, 1, f.compute), 0);
    cr_assert_eq(kvt_fence_board_wait_producer(f.board, 1, f.lane), 0);
    cr_assert_eq(kvt_fence_board_wait_producer(f.board, 5, f.lane), -1,
                 "step 5 shares step 1's slot but has no event");
    cr_assert_eq(kvt_fence_board_record_producer(f.board, 5, f.compute), 0);
    cr_assert_eq(kvt_fence_board_wait_producer(f.board, 1, f.lane), -1,
                 "step 1 was dropped past the depth");
    kvt_fence_board_stats_t st;
    kvt_fence_board_stats(f.board, &st);
    cr_assert_eq(st.producer_misses, 3);
    cr_assert_eq(st.producer_waits, 1);
    s_close(&f);
}

Test(fence_board, failed_record_answers_for_no_step_and_is_not_a_latch)
{
    fx_t f;
    s_open(&f, 4);
    cr_assert_eq(kvt_fence_board_record_producer(f.board, 2, f.compute), 0);
    kvt_fence_board_fail_next(f.board, 2);
    //  Step 6 falls on step 2's slot: its failure must not let step 2's
    //  event answer for it.
    cr_assert_eq(kvt_fence_board_record_producer(f.board, 6, f.compute), KVT_GPU_EDEVICE);
    cr_assert_eq(kvt_fence_board_record_producer(f.board, 7, f.compute), KVT_GPU_EDEVICE);
    cr_assert_eq(kvt_fence_board_wait_producer(f.board, 6, f.lane), -1);
    cr_assert_eq(kvt_fence_board_wait_producer(f.board, 7, f.lane), -1);
    cr_assert_eq(kvt_fence_board_wait_producer(f.board, 2, f.lane), -1,
                 "step 2 is past the depth once step 6 was recorded, failed or not");
    cr_assert_eq(kvt_fence_board_record_producer(f.board, 8, f.compute), 0,
                 "the next step records");
    cr_assert_eq(kvt_fence_board_wait_producer(f.board, 8, f.lane), 0);
    kvt_fence_board_stats_t st;
    kvt_fence_board_stats(f.board, &st);
    cr_assert_eq(st.producer_failures, 2);
    cr_assert_eq(st.faults_injected, 2);
    cr_assert_eq(st.producer_misses, 3);
    cr_assert_eq(st.producers_recorded, 2);
    s_close(&f);
}

Test(fence_board, records_past_the_events_rerecord_bound)
{
    fx_t f;
    s_open(&f, 1);
    //  One slot, re-recorded every step: its event runs out of re-records
    //  (31 by default) and is replaced, never refused.
    for (uint64_t step = 0; step < 100; step++) {
        cr_assert_eq(kvt_fence_board_record_producer(f.board, step, f.compute), 0, "step %llu",
                     (unsigned long long)step);
        cr_assert_eq(kvt_fence_board_record_restore(f.board, f.lane), 0);
    }
    kvt_fence_board_stats_t st;
    kvt_fence_board_stats(f.board, &st);
    cr_assert_eq(st.producers_recorded, 100);
    cr_assert_eq(st.restores_recorded, 100);
    s_close(&f);
}

//  The forward reads (here: overwrites with its own pass) block 5 in 50 µs,
//  a load scatters new bytes into it (2 µs): the load must land after.
static void s_compute_then_scatter(fx_t *f, fill_t *w, bool wait)
{
    w->dst = kvt_gpu_plane_ptr(f->gpu, 0, 0, 5);
    w->v = 0x11;
    cr_assert_eq(kvt_gpu_launch_host_fn(f->compute, s_fill_fn, w, 50000), 0);
    cr_assert_eq(kvt_fence_board_record_producer(f->board, 3, f->compute), 0);
    if (wait)
        cr_assert_eq(kvt_fence_board_wait_compute(f->board, 3, f->lane), 0);
    memset(f->buf, 0x22, sizeof f->buf);
    uint32_t b = 5;
    cr_assert_eq(kvt_gpu_scatter(f->lane, &b, 1, f->buf, sizeof f->buf), 0);
    s_run_to(f, 100000);
}

Test(fence_board, compute_wait_orders_the_load_after_the_forward)
{
    fx_t f;
    fill_t w;
    s_open(&f, 0);
    s_compute_then_scatter(&f, &w, true);
    cr_assert(s_all(kvt_gpu_plane_ptr(f.gpu, 0, 0, 5), 0x22), "the load landed last");
    s_close(&f);
}

Test(fence_board, load_without_compute_wait_lands_under_the_forward)
{
    fx_t f;
    fill_t w;
    s_open(&f, 0);
    s_compute_then_scatter(&f, &w, false);
    cr_assert(s_all(kvt_gpu_plane_ptr(f.gpu, 0, 0, 5), 0x11), "the forward overwrote the load");
    s_close(&f);
}

Test(fence_board, compute_wait_falls_back_to_a_newer_step)
{
    fx_t f;
    s_open(&f, 2);
    cr_assert_eq(kvt_fence_board_wait_compute(f.board, 1, f.lane), -1, "nothing recorded");
    cr_assert_eq(kvt_fence_board_record_producer(f.board, 1, f.compute), 0);
    cr_assert_eq(kvt_fence_board_record_producer(f.board, 2, f.compute), 0);
    cr_assert_eq(kvt_fence_board_record_producer(f.board, 3, f.compute), 0);
    //  Step 1 was dropped (depth 2): step 2's mark covers it.
    cr_assert_eq(kvt_fence_board_wait_compute(f.board, 1, f.lane), 0);
    cr_assert_eq(kvt_fence_board_wait_compute(f.board, 3, f.lane), 0);
    cr_assert_eq(kvt_fence_board_wait_compute(f.board, 4, f.lane), -1, "step 4 has not run");
    kvt_fence_board_stats_t st;
    kvt_fence_board_stats(f.board, &st);
    cr_assert_eq(st.compute_waits, 2);
    cr_assert_eq(st.compute_misses, 2);
    s_close(&f);
}

//  A load scatters block 9 (2 µs, after 40 µs of earlier lane work); the
//  next forward checks it with a 1 µs pass that copies what it found.
typedef struct {
    uint8_t *src; //  block 9
    uint8_t seen; //  first byte the forward saw
    bool ran;     //  the forward ran
} read_t;

static void s_read_fn(void *arg)
{
    read_t *r = arg;
    r->seen = r->src[0];
    r->ran = true;
}

static void s_nothing_fn(void *arg)
{
    (void)arg;
}

static void s_restore_then_forward(fx_t *f, read_t *r, bool wait)
{
    cr_assert_eq(kvt_gpu_launch_host_fn(f->lane, s_nothing_fn, NULL, 40000), 0);
    memset(f->buf, 0x33, sizeof f->buf);
    uint32_t b = 9;
    cr_assert_eq(kvt_gpu_scatter(f->lane, &b, 1, f->buf, sizeof f->buf), 0);
    cr_assert_eq(kvt_fence_board_record_restore(f->board, f->lane), 0);
    if (wait)
        cr_assert_eq(kvt_fence_board_wait_restores(f->board, f->compute), 0);
    r->src = kvt_gpu_plane_ptr(f->gpu, 0, 0, 9);
    cr_assert_eq(kvt_gpu_launch_host_fn(f->compute, s_read_fn, r, 1000), 0);
    s_run_to(f, 100000);
    cr_assert(r->ran);
}

Test(fence_board, restore_wait_orders_the_forward_after_the_load)
{
    fx_t f;
    read_t r = {0};
    s_open(&f, 0);
    s_restore_then_forward(&f, &r, true);
    cr_assert_eq(r.seen, 0x33, "the forward read the restored bytes");
    kvt_fence_board_stats_t st;
    kvt_fence_board_stats(f.board, &st);
    cr_assert_eq(st.restore_waits, 1);
    s_close(&f);
}

Test(fence_board, forward_without_restore_wait_reads_before_the_load)
{
    fx_t f;
    read_t r = {0};
    s_open(&f, 0);
    s_restore_then_forward(&f, &r, false);
    cr_assert_eq(r.seen, 0x00, "unfenced, the forward ran before the restore landed");
    s_close(&f);
}

Test(fence_board, a_failed_restore_does_not_fail_the_compute)
{
    fx_t f;
    s_open(&f, 0);
    cr_assert_eq(kvt_gpu_stream_inject(f.lane, KVT_GPU_FAULT_FAIL, 1), 0);
    uint32_t b = 2;
    cr_assert_eq(kvt_gpu_scatter(f.lane, &b, 1, f.buf, sizeof f.buf), 0);
    cr_assert_eq(kvt_fence_board_record_restore(f.board, f.lane), 0);
    s_run_to(&f, 100000);
    cr_assert_eq(kvt_fence_board_wait_restores(f.board, f.compute), 0);
    fill_t w = {kvt_gpu_plane_ptr(f.gpu, 0, 0, 4), 0x44};
    cr_assert_eq(kvt_gpu_launch_host_fn(f.compute, s_fill_fn, &w, 1000), 0);
    s_run_to(&f, 200000);
    cr_assert_eq(kvt_gpu_stream_query(f.compute), 0, "the compute stream is still good");
    cr_assert(s_all(kvt_gpu_plane_ptr(f.gpu, 0, 0, 4), 0x44));
    kvt_fence_board_stats_t st;
    kvt_fence_board_stats(f.board, &st);
    cr_assert_eq(st.restore_waits, 0, "a finished (failed) restore needs no wait");
    s_close(&f);
}

Test(fence_board, destroy_is_null_safe)
{
    kvt_fence_board_t *b = NULL;
    kvt_fence_board_destroy(&b);
    cr_assert_null(b);
    cr_assert_null(kvt_fence_board_new(NULL, 0));
}
