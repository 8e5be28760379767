/*  test_gpu_sim.c — the host backend's SIM landing model on a manual clock:
    the cost arithmetic (latency + bytes / bandwidth), stream order, parallel
    streams, waits, stalls, forced synchronize, eta / next_eta, and that an
    op that has not landed has not changed its destination.
*/
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvtier/kvt_gpu.h"

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

//  A SIM device: one plane of 64 blocks x 1 layer x 1000 bytes, bandwidth
//  1 byte/ns (so n blocks cost 1000 + n * 1000 ns), 2 slots of 500 bytes.
typedef struct {
    uint64_t now;      //  the manual clock
    kvt_gpu_t *gpu;    //  the device
    uint8_t buf[8000]; //  a chunk buffer
} sim_t;

static void s_open(sim_t *s, uint64_t bw, uint64_t lat)
{
    memset(s, 0, sizeof *s);
    kvt_gpu_opts_t o = {0};
    o.host_mode = KVT_GPU_HOST_SIM;
    o.now = s_clock;
    o.now_arg = &s->now;
    o.sim_bandwidth_Bps = bw;
    o.sim_latency_ns = lat;
    //  The landing arithmetic below counts one cost per copy op; the
    //  per-entry cost of batched copies has its own tests (s_open_path).
    o.sim_entry_ns = KVT_GPU_SIM_ZERO_LATENCY;
    o.log = s_quiet;
    s->gpu = kvt_gpu_new(&o);
    cr_assert_not_null(s->gpu, "%s", kvt_gpu_last_error());
    cr_assert(kvt_gpu_is_sim(s->gpu));
    kvt_gpu_plane_desc_t d = {"K", 1, 64, 1000, NULL};
    cr_assert_eq(kvt_gpu_plane_add(s->gpu, &d), 0);
    kvt_gpu_state_desc_t slots = {2, 500, NULL};
    cr_assert_eq(kvt_gpu_state_add(s->gpu, KVT_GPU_STATE_SLOTS, &slots), 0);
}

static kvt_gpu_event_t *s_mark(sim_t *s, kvt_gpu_stream_t *st)
{
    kvt_gpu_event_t *ev = kvt_gpu_event_new(s->gpu);
    cr_assert_eq(kvt_gpu_event_record(ev, st), 0);
    return ev;
}

static uint8_t *s_block(sim_t *s, uint32_t b)
{
    return kvt_gpu_plane_ptr(s->gpu, 0, 0, b);
}

static void s_count_fn(void *arg)
{
    (*(int *)arg)++;
}

Test(sim, cost_is_latency_plus_bytes_over_bandwidth)
{
    sim_t s;
    s_open(&s, 1000000000, 1000);
    cr_assert_eq(kvt_gpu_sim_cost_ns(s.gpu, 0), 1000);
    cr_assert_eq(kvt_gpu_sim_cost_ns(s.gpu, 1), 1001);
    cr_assert_eq(kvt_gpu_sim_cost_ns(s.gpu, 4096), 5096);
    kvt_gpu_destroy(&s.gpu);

    s_open(&s, 3000000000ull, 7); //  3 bytes / ns: partial ns round up
    cr_assert_eq(kvt_gpu_sim_cost_ns(s.gpu, 1), 8);
    cr_assert_eq(kvt_gpu_sim_cost_ns(s.gpu, 3), 8);
    cr_assert_eq(kvt_gpu_sim_cost_ns(s.gpu, 4), 9);
    //  25 GB/s for 1 GiB: 42.9 ms, no overflow on the way.
    kvt_gpu_destroy(&s.gpu);
    s_open(&s, 25000000000ull, 5000);
    cr_assert_eq(kvt_gpu_sim_cost_ns(s.gpu, 1ull << 30), 5000 + 42949673);
    cr_assert_eq(kvt_gpu_sim_cost_ns(s.gpu, SIZE_MAX), 5000 + 737869762948382065ull);
    kvt_gpu_destroy(&s.gpu);
    s_open(&s, 1, 5000); //  1 byte per second
    cr_assert_eq(kvt_gpu_sim_cost_ns(s.gpu, 2), 5000 + 2000000000ull);
    cr_assert_eq(kvt_gpu_sim_cost_ns(s.gpu, SIZE_MAX), UINT64_MAX, "saturates");
    kvt_gpu_destroy(&s.gpu);
}

Test(sim, zero_latency_is_asked_for_explicitly)
{
    sim_t s;
    s_open(&s, 1000000000, KVT_GPU_SIM_ZERO_LATENCY);
    cr_assert_eq(kvt_gpu_sim_cost_ns(s.gpu, 0), 0);
    cr_assert_eq(kvt_gpu_sim_cost_ns(s.gpu, 1000), 1000);
    kvt_gpu_destroy(&s.gpu);
}

Test(sim, defaults_are_25_GBps_and_5_us)
{
    uint64_t now = 0;
    kvt_gpu_opts_t o = {0};
    o.host_mode = KVT_GPU_HOST_SIM;
    o.now = s_clock;
    o.now_arg = &now;
    o.log = s_quiet;
    kvt_gpu_t *gpu = kvt_gpu_new(&o);
    cr_assert_eq(kvt_gpu_sim_cost_ns(gpu, 25000), 5000 + 1000);
    cr_assert(strstr(kvt_gpu_describe(gpu), "sim"), "%s", kvt_gpu_describe(gpu));
    kvt_gpu_destroy(&gpu);
}

Test(sim, a_copy_changes_nothing_until_it_lands)
{
    sim_t s;
    s_open(&s, 1000000000, 1000);
    kvt_gpu_stream_t *st = kvt_gpu_stream_new(s.gpu, "s");
    s.now = 100;
    const uint32_t blocks[] = {9, 2};
    memset(s.buf, 0xAB, 2000);
    cr_assert_eq(kvt_gpu_scatter(st, blocks, 2, s.buf, 2000), 0);
    kvt_gpu_event_t *ev = s_mark(&s, st);
    cr_assert_eq(kvt_gpu_event_eta(ev), 100 + 1000 + 2000);
    cr_assert_eq(kvt_gpu_next_eta(s.gpu), 3100);
    s.now = 3099;
    cr_assert_eq(kvt_gpu_event_query(ev), KVT_GPU_NOT_READY);
    cr_assert_eq(kvt_gpu_progress(s.gpu), 0);
    for (int k = 0; k < 1000; k++)
        cr_assert(s_block(&s, 9)[k] == 0 && s_block(&s, 2)[k] == 0, "changed before landing");
    s.now = 3100;
    cr_assert_eq(kvt_gpu_progress(s.gpu), 1);
    cr_assert_eq(kvt_gpu_event_query(ev), 0);
    cr_assert_eq(s_block(&s, 9)[999], 0xAB);
    cr_assert_eq(s_block(&s, 2)[0], 0xAB);
    cr_assert_eq(kvt_gpu_next_eta(s.gpu), UINT64_MAX);
    cr_assert_leq(kvt_gpu_event_eta(ev), s.now);
    kvt_gpu_event_destroy(&ev);
    kvt_gpu_stream_destroy(&st);
    kvt_gpu_destroy(&s.gpu);
}

Test(sim, ops_on_one_stream_run_one_after_another)
{
    sim_t s;
    s_open(&s, 1000000000, 1000);
    kvt_gpu_stream_t *st = kvt_gpu_stream_new(s.gpu, "s");
    const uint32_t one[] = {1}, three[] = {4, 5, 6};
    cr_assert_eq(kvt_gpu_gather(st, one, 1, s.buf, 1000), 0);
    kvt_gpu_event_t *e1 = s_mark(&s, st);
    cr_assert_eq(kvt_gpu_gather(st, three, 3, s.buf + 1000, 3000), 0);
    kvt_gpu_event_t *e2 = s_mark(&s, st);
    cr_assert_eq(kvt_gpu_event_eta(e1), 2000);
    cr_assert_eq(kvt_gpu_event_eta(e2), 2000 + 4000);
    //  Queued later, on an idle stream: starts when queued.
    s.now = 10000;
    cr_assert_eq(kvt_gpu_event_query(e2), 0);
    cr_assert_eq(kvt_gpu_gather(st, one, 1, s.buf, 1000), 0);
    kvt_gpu_event_t *e3 = s_mark(&s, st);
    cr_assert_eq(kvt_gpu_event_eta(e3), 12000);
    kvt_gpu_event_destroy(&e1);
    kvt_gpu_event_destroy(&e2);
    kvt_gpu_event_destroy(&e3);
    kvt_gpu_stream_destroy(&st);
    kvt_gpu_destroy(&s.gpu);
}

Test(sim, separate_streams_run_in_parallel)
{
    sim_t s;
    s_open(&s, 1000000000, 1000);
    kvt_gpu_stream_t *a = kvt_gpu_stream_new(s.gpu, "a");
    kvt_gpu_stream_t *b = kvt_gpu_stream_new(s.gpu, "b");
    const uint32_t x[] = {1, 2}, y[] = {3};
    cr_assert_eq(kvt_gpu_gather(a, x, 2, s.buf, 2000), 0);
    cr_assert_eq(kvt_gpu_gather(b, y, 1, s.buf + 2000, 1000), 0);
    kvt_gpu_event_t *ea = s_mark(&s, a), *eb = s_mark(&s, b);
    cr_assert_eq(kvt_gpu_event_eta(ea), 3000);
    cr_assert_eq(kvt_gpu_event_eta(eb), 2000);
    cr_assert_eq(kvt_gpu_next_eta(s.gpu), 2000);
    kvt_gpu_event_destroy(&ea);
    kvt_gpu_event_destroy(&eb);
    kvt_gpu_stream_destroy(&a);
    kvt_gpu_stream_destroy(&b);
    kvt_gpu_destroy(&s.gpu);
}

Test(sim, a_wait_delays_the_waiting_stream_to_the_awaited_landing)
{
    sim_t s;
    s_open(&s, 1000000000, 1000);
    kvt_gpu_stream_t *a = kvt_gpu_stream_new(s.gpu, "a");
    kvt_gpu_stream_t *b = kvt_gpu_stream_new(s.gpu, "b");
    const uint32_t blk[] = {7};
    //  A: scatter 0x11 into block 7 (lands 2000). B: wait, then gather
    //  block 7 (lands 2000 + 2000), then another gather (6000).
    memset(s.buf, 0x11, 1000);
    cr_assert_eq(kvt_gpu_scatter(a, blk, 1, s.buf, 1000), 0);
    kvt_gpu_event_t *ea = s_mark(&s, a);
    cr_assert_eq(kvt_gpu_stream_wait_event(b, ea), 0);
    cr_assert_eq(kvt_gpu_gather(b, blk, 1, s.buf + 1000, 1000), 0);
    kvt_gpu_event_t *eb = s_mark(&s, b);
    cr_assert_eq(kvt_gpu_gather(b, blk, 1, s.buf + 2000, 1000), 0);
    kvt_gpu_event_t *eb2 = s_mark(&s, b);
    cr_assert_eq(kvt_gpu_event_eta(ea), 2000);
    cr_assert_eq(kvt_gpu_event_eta(eb), 4000);
    cr_assert_eq(kvt_gpu_event_eta(eb2), 6000);
    s.now = 3999;
    cr_assert_eq(kvt_gpu_event_query(ea), 0);
    cr_assert_eq(kvt_gpu_event_query(eb), KVT_GPU_NOT_READY);
    cr_assert_eq(s.buf[1000], 0, "gathered before landing");
    s.now = 4000;
    cr_assert_eq(kvt_gpu_event_query(eb), 0);
    cr_assert_eq(s.buf[1000], 0x11, "the gather saw the scatter's bytes");
    cr_assert_eq(s.buf[1999], 0x11);
    kvt_gpu_stats_t st;
    kvt_gpu_stats(s.gpu, &st);
    cr_assert_eq(st.waits, 1);
    kvt_gpu_event_destroy(&ea);
    kvt_gpu_event_destroy(&eb);
    kvt_gpu_event_destroy(&eb2);
    kvt_gpu_stream_destroy(&a);
    kvt_gpu_stream_destroy(&b);
    kvt_gpu_destroy(&s.gpu);
}

Test(sim, a_wait_on_landed_work_adds_nothing)
{
    sim_t s;
    s_open(&s, 1000000000, 1000);
    kvt_gpu_stream_t *a = kvt_gpu_stream_new(s.gpu, "a");
    kvt_gpu_stream_t *b = kvt_gpu_stream_new(s.gpu, "b");
    const uint32_t blk[] = {7};
    cr_assert_eq(kvt_gpu_gather(a, blk, 1, s.buf, 1000), 0);
    kvt_gpu_event_t *ea = s_mark(&s, a);
    s.now = 5000;
    cr_assert_eq(kvt_gpu_stream_wait_event(b, ea), 0);
    cr_assert_eq(kvt_gpu_gather(b, blk, 1, s.buf, 1000), 0);
    kvt_gpu_event_t *eb = s_mark(&s, b);
    cr_assert_eq(kvt_gpu_event_eta(eb), 7000);
    kvt_gpu_event_destroy(&ea);
    kvt_gpu_event_destroy(&eb);
    kvt_gpu_stream_destroy(&a);
    kvt_gpu_stream_destroy(&b);
    kvt_gpu_destroy(&s.gpu);
}

Test(sim, a_host_function_costs_its_sim_cost_and_runs_when_it_lands)
{
    sim_t s;
    s_open(&s, 1000000000, 1000);
    kvt_gpu_stream_t *a = kvt_gpu_stream_new(s.gpu, "a");
    int ran = 0;
    cr_assert_eq(kvt_gpu_launch_host_fn(a, s_count_fn, &ran, 777), 0);
    kvt_gpu_event_t *ev = s_mark(&s, a);
    cr_assert_eq(kvt_gpu_event_eta(ev), 777);
    s.now = 776;
    cr_assert_eq(kvt_gpu_progress(s.gpu), 0);
    cr_assert_eq(ran, 0);
    s.now = 777;
    cr_assert_eq(kvt_gpu_progress(s.gpu), 1);
    cr_assert_eq(ran, 1);
    kvt_gpu_event_destroy(&ev);
    kvt_gpu_stream_destroy(&a);
    kvt_gpu_destroy(&s.gpu);
}

Test(sim, a_stall_holds_the_stream_and_its_waiters_until_cleared)
{
    sim_t s;
    s_open(&s, 1000000000, 1000);
    kvt_gpu_stream_t *a = kvt_gpu_stream_new(s.gpu, "a");
    kvt_gpu_stream_t *b = kvt_gpu_stream_new(s.gpu, "b");
    const uint32_t blk[] = {3};
    cr_assert_eq(kvt_gpu_stream_inject(a, KVT_GPU_FAULT_STALL, 0), 0);
    memset(s.buf, 0x22, 1000);
    cr_assert_eq(kvt_gpu_scatter(a, blk, 1, s.buf, 1000), 0);
    kvt_gpu_event_t *ea = s_mark(&s, a);
    cr_assert_eq(kvt_gpu_stream_wait_event(b, ea), 0);
    cr_assert_eq(kvt_gpu_gather(b, blk, 1, s.buf + 1000, 1000), 0);
    kvt_gpu_event_t *eb = s_mark(&s, b);
    cr_assert_eq(kvt_gpu_event_eta(ea), UINT64_MAX);
    cr_assert_eq(kvt_gpu_event_eta(eb), UINT64_MAX);
    cr_assert_eq(kvt_gpu_next_eta(s.gpu), UINT64_MAX);
    s.now = 1000000;
    cr_assert_eq(kvt_gpu_event_query(ea), KVT_GPU_NOT_READY);
    //  synchronize cannot force through a stall.
    cr_assert_eq(kvt_gpu_event_synchronize(eb), KVT_GPU_NOT_READY);
    cr_assert_eq(s_block(&s, 3)[0], 0);
    cr_assert_eq(s.buf[1000], 0);
    //  Cleared at t = 1 ms: A lands 2 us later, B 2 us after that.
    cr_assert_eq(kvt_gpu_stream_inject(a, KVT_GPU_FAULT_NONE, 0), 0);
    cr_assert_eq(kvt_gpu_event_eta(ea), 1002000);
    cr_assert_eq(kvt_gpu_event_eta(eb), 1004000);
    s.now = 1004000;
    cr_assert_eq(kvt_gpu_event_query(eb), 0);
    cr_assert_eq(s.buf[1000], 0x22);
    kvt_gpu_event_destroy(&ea);
    kvt_gpu_event_destroy(&eb);
    kvt_gpu_stream_destroy(&a);
    kvt_gpu_stream_destroy(&b);
    kvt_gpu_destroy(&s.gpu);
}

//  An actor arms its timer with kvt_gpu_event_wake: under SIM that is the
//  mark's landing time exactly (so the actor wakes at the tick the copy
//  lands, never a poll period later); behind a stall the landing is
//  unknown and it polls; a failed mark wakes at once.
Test(sim, event_wake_is_the_landing_time_exactly)
{
    sim_t s;
    s_open(&s, 1000000000, 1000);
    kvt_gpu_stream_t *a = kvt_gpu_stream_new(s.gpu, "a");
    kvt_gpu_stream_t *b = kvt_gpu_stream_new(s.gpu, "b");
    const uint32_t one[] = {1}, three[] = {4, 5, 6};
    s.now = 40;
    cr_assert_eq(kvt_gpu_gather(a, three, 3, s.buf, 3000), 0);
    kvt_gpu_event_t *e1 = s_mark(&s, a);
    cr_assert_eq(kvt_gpu_gather(a, one, 1, s.buf + 3000, 1000), 0);
    kvt_gpu_event_t *e2 = s_mark(&s, a);
    cr_assert_eq(kvt_gpu_gather(b, one, 1, s.buf + 4000, 1000), 0);
    kvt_gpu_event_t *e3 = s_mark(&s, b);
    const uint64_t poll = 1000000;
    cr_assert_eq(kvt_gpu_event_wake(e1, 40, poll), 40 + 4000);
    cr_assert_eq(kvt_gpu_event_wake(e2, 40, poll), 40 + 4000 + 2000);
    cr_assert_eq(kvt_gpu_event_wake(e3, 40, poll), 40 + 2000);
    //  Woken at e3's landing: e3 is done, the others still say their time.
    s.now = 2040;
    cr_assert_eq(kvt_gpu_event_wake(e3, 2040, poll), 2040);
    cr_assert_eq(kvt_gpu_event_query(e3), 0);
    cr_assert_eq(kvt_gpu_event_wake(e1, 2040, poll), 4040);
    s.now = 4040;
    cr_assert_eq(kvt_gpu_event_wake(e1, 4040, poll), 4040);
    cr_assert_eq(kvt_gpu_event_query(e1), 0, "landed when it said");
    cr_assert_eq(kvt_gpu_event_wake(e2, 4040, poll), 6040);

    //  Behind a stall nothing is known: poll.
    cr_assert_eq(kvt_gpu_stream_inject(b, KVT_GPU_FAULT_STALL, 0), 0);
    cr_assert_eq(kvt_gpu_gather(b, one, 1, s.buf + 4000, 1000), 0);
    kvt_gpu_event_t *e4 = s_mark(&s, b);
    cr_assert_eq(kvt_gpu_event_wake(e4, 4040, poll), 4040 + poll);
    cr_assert_eq(kvt_gpu_stream_inject(b, KVT_GPU_FAULT_NONE, 0), 0);
    cr_assert_eq(kvt_gpu_event_wake(e4, 4040, poll), 4040 + 2000, "known again once cleared");

    //  A failed mark wakes at once (its failure is what the caller reads).
    cr_assert_eq(kvt_gpu_stream_inject(a, KVT_GPU_FAULT_FAIL, 1), 0);
    cr_assert_eq(kvt_gpu_gather(a, one, 1, s.buf, 1000), 0);
    kvt_gpu_event_t *e5 = s_mark(&s, a);
    uint64_t land5 = kvt_gpu_event_wake(e5, 4040, poll);
    cr_assert_eq(land5, 6040 + 2000);
    s.now = land5;
    cr_assert_eq(kvt_gpu_event_wake(e5, land5, poll), land5);
    cr_assert_eq(kvt_gpu_event_query(e5), KVT_GPU_EFAULT);
    kvt_gpu_event_destroy(&e1);
    kvt_gpu_event_destroy(&e2);
    kvt_gpu_event_destroy(&e3);
    kvt_gpu_event_destroy(&e4);
    kvt_gpu_event_destroy(&e5);
    kvt_gpu_stream_destroy(&a);
    kvt_gpu_stream_destroy(&b);
    kvt_gpu_destroy(&s.gpu);
}

Test(sim, synchronize_lands_dependencies_at_once_and_says_so)
{
    sim_t s;
    s_open(&s, 1000000000, 1000);
    kvt_gpu_stream_t *a = kvt_gpu_stream_new(s.gpu, "a");
    kvt_gpu_stream_t *b = kvt_gpu_stream_new(s.gpu, "b");
    kvt_gpu_stream_t *c = kvt_gpu_stream_new(s.gpu, "c");
    const uint32_t blk[] = {3}, other[] = {40};
    memset(s.buf, 0x33, 1000);
    cr_assert_eq(kvt_gpu_scatter(a, blk, 1, s.buf, 1000), 0);
    kvt_gpu_event_t *ea = s_mark(&s, a);
    cr_assert_eq(kvt_gpu_stream_wait_event(b, ea), 0);
    cr_assert_eq(kvt_gpu_gather(b, blk, 1, s.buf + 1000, 1000), 0);
    kvt_gpu_event_t *eb = s_mark(&s, b);
    //  An unrelated stream's op is not landed by B's synchronize.
    memset(s.buf + 3000, 0x44, 1000);
    cr_assert_eq(kvt_gpu_scatter(c, other, 1, s.buf + 3000, 1000), 0);
    kvt_gpu_event_t *ec = s_mark(&s, c);
    s.now = 10;
    cr_assert_eq(kvt_gpu_event_synchronize(eb), KVT_GPU_FORCED);
    cr_assert_eq(s.buf[1000], 0x33, "B's gather ran after A's scatter");
    cr_assert_eq(kvt_gpu_event_query(ea), 0);
    cr_assert_eq(kvt_gpu_event_query(ec), KVT_GPU_NOT_READY, "C is not a dependency");
    cr_assert_eq(s_block(&s, 40)[0], 0);
    kvt_gpu_stats_t st;
    kvt_gpu_stats(s.gpu, &st);
    cr_assert_eq(st.sim_forced, 1);
    //  Already landed: 0, not counted again.
    cr_assert_eq(kvt_gpu_event_synchronize(eb), 0);
    //  The next op on B starts from now.
    cr_assert_eq(kvt_gpu_gather(b, blk, 1, s.buf + 2000, 1000), 0);
    kvt_gpu_event_t *eb2 = s_mark(&s, b);
    cr_assert_eq(kvt_gpu_event_eta(eb2), 10 + 2000);
    cr_assert_eq(kvt_gpu_stream_synchronize(c), KVT_GPU_FORCED);
    cr_assert_eq(s_block(&s, 40)[0], 0x44);
    kvt_gpu_stats(s.gpu, &st);
    cr_assert_eq(st.sim_forced, 2);
    kvt_gpu_event_destroy(&ea);
    kvt_gpu_event_destroy(&eb);
    kvt_gpu_event_destroy(&eb2);
    kvt_gpu_event_destroy(&ec);
    kvt_gpu_stream_destroy(&a);
    kvt_gpu_stream_destroy(&b);
    kvt_gpu_stream_destroy(&c);
    kvt_gpu_destroy(&s.gpu);
}

Test(sim, destroying_a_stream_lands_its_queue)
{
    sim_t s;
    s_open(&s, 1000000000, 1000);
    kvt_gpu_stream_t *a = kvt_gpu_stream_new(s.gpu, "a");
    const uint32_t blk[] = {5};
    memset(s.buf, 0x55, 1000);
    cr_assert_eq(kvt_gpu_scatter(a, blk, 1, s.buf, 1000), 0);
    kvt_gpu_event_t *ea = s_mark(&s, a);
    kvt_gpu_stream_destroy(&a);
    cr_assert_null(a);
    cr_assert_eq(s_block(&s, 5)[0], 0x55);
    cr_assert_eq(kvt_gpu_event_query(ea), 0, "events outlive their stream");
    kvt_gpu_event_destroy(&ea);
    kvt_gpu_destroy(&s.gpu);
}

Test(sim, state_copies_land_on_the_clock)
{
    sim_t s;
    s_open(&s, 1000000000, 1000);
    kvt_gpu_stream_t *a = kvt_gpu_stream_new(s.gpu, "a");
    memset(s.buf, 0x66, 500);
    cr_assert_eq(kvt_gpu_state_from_host(a, KVT_GPU_STATE_SLOTS, 1, s.buf, 500), 0);
    kvt_gpu_event_t *ev = s_mark(&s, a);
    cr_assert_eq(kvt_gpu_event_eta(ev), 1500);
    uint8_t *slot = kvt_gpu_state_ptr(s.gpu, KVT_GPU_STATE_SLOTS, 1);
    s.now = 1499;
    cr_assert_eq(kvt_gpu_event_query(ev), KVT_GPU_NOT_READY);
    cr_assert_eq(slot[0], 0);
    s.now = 1500;
    cr_assert_eq(kvt_gpu_event_query(ev), 0);
    cr_assert_eq(slot[499], 0x66);
    kvt_gpu_event_destroy(&ev);
    kvt_gpu_stream_destroy(&a);
    kvt_gpu_destroy(&s.gpu);
}

//  A landed host function of the many-streams test.
typedef struct {
    uint64_t land;  //  its landing time in the model
    uint64_t order; //  its queue order (ties)
    int *log;       //  landing log: indexes of landed functions
    int *nlog;      //  entries in the log
    int index;      //  its index
} landed_t;

static void s_log_landing(void *arg)
{
    landed_t *l = arg;
    l->log[(*l->nlog)++] = l->index;
}

static int s_cmp_landing(const void *a, const void *b)
{
    const landed_t *x = a, *y = b;
    if (x->land != y->land)
        return x->land < y->land ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

//  Many streams, long queues (the rings grow while ops are pending), waits
//  across streams: every eta matches the landing model, progress lands
//  exactly the ops that are due, and due ops take effect in (landing time,
//  queue order) order.
Test(sim, many_streams_land_on_the_model_in_landing_order)
{
    enum { S = 6, N = 1200 };
    sim_t s;
    s_open(&s, 1000000000, 1000);
    kvt_gpu_stream_t *st[S];
    for (int i = 0; i < S; i++)
        st[i] = kvt_gpu_stream_new(s.gpu, "m");
    uint64_t prev_land[S] = {0};
    uint64_t *op_land = calloc(N, sizeof *op_land);     //  every queued op's landing time
    landed_t *fns = calloc(N, sizeof *fns);             //  host functions
    kvt_gpu_event_t **marks = calloc(N, sizeof *marks); //  an event after each step
    uint64_t *mark_land = calloc(N, sizeof *mark_land); //  its landing time
    int *log = calloc(N, sizeof *log);
    cr_assert(op_land && fns && marks && mark_land && log);
    int nlog = 0, nops = 0, nfns = 0;
    uint64_t rng = 42, order = 0;
    for (int i = 0; i < N; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        int a = (int)((rng >> 33) % S);
        if ((rng >> 20) % 10 < 3) {
            //  A wait on another stream's current end (trivial, and not
            //  queued, when that stream has never had an op).
            int b = (a + 1 + (int)((rng >> 40) % (S - 1))) % S;
            kvt_gpu_event_t *ev = kvt_gpu_event_new(s.gpu);
            cr_assert_eq(kvt_gpu_event_record(ev, st[b]), 0);
            cr_assert_eq(kvt_gpu_stream_wait_event(st[a], ev), 0);
            kvt_gpu_event_destroy(&ev);
            if (prev_land[b] > 0) {
                prev_land[a] = prev_land[a] > prev_land[b] ? prev_land[a] : prev_land[b];
                op_land[nops++] = prev_land[a];
                order++;
            }
        } else {
            uint64_t cost = 1 + (rng >> 44) % 5000;
            landed_t *l = &fns[nfns];
            prev_land[a] += cost;
            *l = (landed_t){prev_land[a], ++order, log, &nlog, nfns};
            cr_assert_eq(kvt_gpu_launch_host_fn(st[a], s_log_landing, l, cost), 0);
            op_land[nops++] = prev_land[a];
            nfns++;
        }
        marks[i] = kvt_gpu_event_new(s.gpu);
        cr_assert_eq(kvt_gpu_event_record(marks[i], st[a]), 0);
        mark_land[i] = prev_land[a];
    }
    uint64_t first = UINT64_MAX, last = 0;
    for (int k = 0; k < nops; k++) {
        first = op_land[k] < first ? op_land[k] : first;
        last = op_land[k] > last ? op_land[k] : last;
    }
    cr_assert_eq(kvt_gpu_next_eta(s.gpu), first);
    for (int i = 0; i < N; i++)
        cr_assert_eq(kvt_gpu_event_eta(marks[i]), mark_land[i], "mark %d", i);
    //  Walk the clock: each step lands exactly the ops due in it.
    uint64_t prev_t = 0;
    for (int step = 1; step <= 40; step++) {
        s.now = last * step / 40;
        int due = 0;
        for (int k = 0; k < nops; k++)
            due += op_land[k] > prev_t && op_land[k] <= s.now;
        cr_assert_eq(kvt_gpu_progress(s.gpu), due, "step %d", step);
        uint64_t next = UINT64_MAX;
        for (int k = 0; k < nops; k++)
            if (op_land[k] > s.now && op_land[k] < next)
                next = op_land[k];
        cr_assert_eq(kvt_gpu_next_eta(s.gpu), next);
        prev_t = s.now;
    }
    cr_assert_eq(nlog, nfns);
    landed_t *sorted = malloc((size_t)nfns * sizeof *sorted);
    memcpy(sorted, fns, (size_t)nfns * sizeof *sorted);
    qsort(sorted, (size_t)nfns, sizeof *sorted, s_cmp_landing);
    for (int k = 0; k < nfns; k++)
        cr_assert_eq(log[k], sorted[k].index, "landing %d", k);
    for (int i = 0; i < N; i++)
        kvt_gpu_event_destroy(&marks[i]);
    for (int i = 0; i < S; i++)
        kvt_gpu_stream_destroy(&st[i]);
    free(sorted);
    free(op_land);
    free(fns);
    free(marks);
    free(mark_land);
    free(log);
    kvt_gpu_destroy(&s.gpu);
}

// ------------------------------------------------------ copy-path costs ----

//  A SIM device at 25 GB/s, 5 us per copy op, with `path` and the default
//  per-entry cost (0: default; KVT_GPU_SIM_ZERO_LATENCY: none); one plane
//  of `layers` layers x 64 blocks x `bb` bytes.
static kvt_gpu_t *s_open_path(uint64_t *now, kvt_gpu_copy_path_t path, uint64_t entry_ns,
                              uint32_t layers, size_t bb)
{
    kvt_gpu_opts_t o = {0};
    o.host_mode = KVT_GPU_HOST_SIM;
    o.now = s_clock;
    o.now_arg = now;
    o.log = s_quiet;
    o.copy_path = path;
    o.sim_entry_ns = entry_ns;
    kvt_gpu_t *gpu = kvt_gpu_new(&o);
    cr_assert_not_null(gpu, "%s", kvt_gpu_last_error());
    kvt_gpu_plane_desc_t d = {"K", layers, 64, bb, NULL};
    cr_assert_eq(kvt_gpu_plane_add(gpu, &d), 0);
    return gpu;
}

Test(sim, a_batch_costs_its_entries_separate_copies_their_calls_a_kernel_one_launch)
{
    uint64_t now = 0;
    //  Defaults: 25 GB/s, 5 us per copy op, 0.6 us per batch entry.
    kvt_gpu_t *gpu = s_open_path(&now, KVT_GPU_PATH_AUTO, 0, 1, 4096);
    uint64_t bytes_ns = 4096 * 64 / 25; //  262144 bytes at 25 bytes / ns: 10485.76 -> 10486
    cr_assert_eq(kvt_gpu_sim_copy_cost_ns(gpu, 64, 64 * 4096), 5000 + 64 * 600 + bytes_ns + 1);
    cr_assert_eq(kvt_gpu_sim_copy_cost_ns(gpu, 1, 4096), kvt_gpu_sim_cost_ns(gpu, 4096),
                 "one segment: one copy on every path");
    kvt_gpu_destroy(&gpu);
    gpu = s_open_path(&now, KVT_GPU_PATH_BATCH, 250, 1, 4096);
    cr_assert_eq(kvt_gpu_sim_copy_cost_ns(gpu, 64, 64 * 4096), 5000 + 64 * 250 + bytes_ns + 1);
    kvt_gpu_destroy(&gpu);
    gpu = s_open_path(&now, KVT_GPU_PATH_SEGMENT, 0, 1, 4096);
    cr_assert_eq(kvt_gpu_sim_copy_cost_ns(gpu, 64, 64 * 4096), 64 * 5000 + bytes_ns + 1);
    kvt_gpu_destroy(&gpu);
    gpu = s_open_path(&now, KVT_GPU_PATH_KERNEL, 0, 1, 4096);
    cr_assert_eq(kvt_gpu_sim_copy_cost_ns(gpu, 64, 64 * 4096), 5000 + bytes_ns + 1);
    kvt_gpu_destroy(&gpu);
    gpu = s_open_path(&now, KVT_GPU_PATH_BATCH, KVT_GPU_SIM_ZERO_LATENCY, 1, 4096);
    cr_assert_eq(kvt_gpu_sim_copy_cost_ns(gpu, 64, 64 * 4096), 5000 + bytes_ns + 1,
                 "an entry cost of exactly zero");
    cr_assert_eq(kvt_gpu_sim_copy_cost_ns(gpu, UINT32_MAX, SIZE_MAX),
                 kvt_gpu_sim_cost_ns(gpu, SIZE_MAX), "no overflow on the way");
    kvt_gpu_destroy(&gpu);
}

//  When the gather of `n` sparse blocks (no two merge) lands on `path`.
static uint64_t s_gather_lands(kvt_gpu_copy_path_t path, uint32_t layers, size_t bb, uint32_t n)
{
    uint64_t now = 0;
    kvt_gpu_t *gpu = s_open_path(&now, path, 0, layers, bb);
    kvt_gpu_stream_t *st = kvt_gpu_stream_new(gpu, "s");
    uint32_t blocks[32];
    for (uint32_t i = 0; i < n; i++)
        blocks[i] = 2 * i;
    size_t len = (size_t)n * layers * bb;
    uint8_t *buf = malloc(len);
    cr_assert_not_null(buf);
    cr_assert_eq(kvt_gpu_gather(st, blocks, n, buf, len), 0, "%s", kvt_gpu_last_error());
    kvt_gpu_event_t *ev = kvt_gpu_event_new(gpu);
    cr_assert_eq(kvt_gpu_event_record(ev, st), 0);
    uint64_t eta = kvt_gpu_event_eta(ev);
    kvt_gpu_event_destroy(&ev);
    kvt_gpu_stream_destroy(&st);
    kvt_gpu_destroy(&gpu);
    free(buf);
    return eta;
}

Test(sim, many_small_segments_take_longer_than_one_large_copy_of_the_same_bytes)
{
    //  1 MiB either way: 32 blocks x 8 layers of 4 KiB (256 segments), or
    //  one block of one layer of 1 MiB.
    uint64_t one = s_gather_lands(KVT_GPU_PATH_AUTO, 1, 1u << 20, 1);
    uint64_t batch = s_gather_lands(KVT_GPU_PATH_AUTO, 8, 4096, 32);
    uint64_t segment = s_gather_lands(KVT_GPU_PATH_SEGMENT, 8, 4096, 32);
    uint64_t kernel = s_gather_lands(KVT_GPU_PATH_KERNEL, 8, 4096, 32);
    cr_assert_eq(one, 5000 + 41944, "1 MiB at 25 GB/s plus one copy op");
    cr_assert_eq(batch, one + 256 * 600, "a batch pays 0.6 us per entry");
    cr_assert_eq(segment, one + 255 * 5000, "separate copies pay the fixed cost each");
    cr_assert_eq(kernel, one, "one launch moves every segment");
    cr_assert_gt(batch, one);
    cr_assert_gt(segment, batch);
}

Test(sim, a_bad_copy_path_or_thread_block_cap_is_refused_naming_it)
{
    uint64_t now = 0;
    kvt_gpu_opts_t o = {.host_mode = KVT_GPU_HOST_SIM, .now = s_clock, .now_arg = &now};
    o.log = s_quiet;
    o.copy_path = (kvt_gpu_copy_path_t)7;
    cr_assert_null(kvt_gpu_new(&o));
    cr_assert(strstr(kvt_gpu_last_error(), "copy_path 7 is not AUTO/KERNEL/BATCH/SEGMENT"), "%s",
              kvt_gpu_last_error());
    o.copy_path = KVT_GPU_PATH_AUTO;
    o.kernel_max_blocks = 65536;
    cr_assert_null(kvt_gpu_new(&o));
    cr_assert(strstr(kvt_gpu_last_error(), "kernel_max_blocks 65536 > 65535"), "%s",
              kvt_gpu_last_error());
}
