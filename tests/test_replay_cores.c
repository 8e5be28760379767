/*  The replay's simulated runner and engine cores, driven directly: no
    actors, no driver, device memory is a plain array. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "actors/common/kvt_fence_board.h"
#include "kvtier/kvt_gpu.h"
#include "replay/kvt_oracle.h"
#include "replay/kvt_sim_engine_core.h"
#include "replay/kvt_sim_runner_core.h"

// ------------------------------------------------------------- runner core

#define BS      16 //  tokens per block
#define PLANES  2  //  planes
#define LAYERS  3  //  layers
#define NBLOCKS 8  //  device blocks
#define PBB     64 //  bytes of one block in one (plane, layer)

static uint8_t s_mem[PLANES][LAYERS][NBLOCKS][PBB]; //  the "device"

static void *s_block(void *arg, uint32_t p, uint32_t l, uint32_t b)
{
    (void)arg;
    return p < PLANES && l < LAYERS && b < NBLOCKS ? s_mem[p][l][b] : NULL;
}

static kvt_sim_runner_core_t *s_runner(uint32_t rank, uint32_t corrupt_resume)
{
    memset(s_mem, 0, sizeof s_mem);
    kvt_sim_runner_core_cfg_t c;
    memset(&c, 0, sizeof c);
    c.rank = rank;
    c.block_size = BS;
    c.planes = PLANES;
    c.layers = LAYERS;
    c.num_blocks = NBLOCKS;
    for (int p = 0; p < PLANES; p++)
        c.plane_block_bytes[p] = PBB;
    c.block = s_block;
    c.corrupt_resume = corrupt_resume;
    kvt_sim_runner_core_t *r = kvt_sim_runner_core_new(&c);
    cr_assert_not_null(r);
    return r;
}

static kvt_hash_t s_h(uint32_t i)
{
    return (kvt_hash_t){0xA000 + i, 0x9E3779B97F4A7C15ull * (i + 1)};
}

//  Fills a block the way a forward of (hash, rank) would.
static void s_fill(uint32_t block, kvt_hash_t h, uint32_t rank)
{
    for (uint32_t p = 0; p < PLANES; p++)
        for (uint32_t l = 0; l < LAYERS; l++)
            kvt_oracle_fill(s_mem[p][l][block], PBB, h, l, p, rank);
}

static bool s_holds(uint32_t block, kvt_hash_t h, uint32_t rank)
{
    for (uint32_t p = 0; p < PLANES; p++)
        for (uint32_t l = 0; l < LAYERS; l++)
            if (!kvt_oracle_check(s_mem[p][l][block], PBB, h, l, p, rank))
                return false;
    return true;
}

static bool s_untouched(uint32_t block)
{
    for (uint32_t p = 0; p < PLANES; p++)
        for (uint32_t l = 0; l < LAYERS; l++)
            for (uint32_t i = 0; i < PBB; i++)
                if (s_mem[p][l][block][i])
                    return false;
    return true;
}

static kvt_entry_t s_entry(uint64_t req, uint32_t start, uint32_t end, uint32_t first_block,
                           uint32_t *blocks, kvt_hash_t *hashes, uint32_t n, uint32_t verify_end)
{
    kvt_entry_t e;
    memset(&e, 0, sizeof e);
    e.op.req = req;
    e.op.gen = 1;
    e.start = start;
    e.end = end;
    e.first_block = first_block;
    e.blocks = blocks;
    e.hashes = hashes;
    e.nblocks = n;
    e.verify_end = verify_end;
    return e;
}

static kvt_step_exec_t s_exec(uint64_t step, uint32_t rank, kvt_entry_t *entries, uint32_t n)
{
    kvt_step_exec_t x;
    memset(&x, 0, sizeof x);
    x.step = step;
    x.rank = rank;
    x.entries = entries;
    x.nentries = n;
    return x;
}

Test(sim_runner_core, forward_writes_exactly_the_blocks_the_step_completes)
{
    kvt_sim_runner_core_t *r = s_runner(1, 0);
    kvt_sim_runner_out_t out;
    //  Tokens [0, 40): blocks 0 and 1 become full, block 2 stays partial.
    uint32_t b1[] = {2, 4, 6};
    kvt_hash_t h1[] = {s_h(0), s_h(1), {0, 0}};
    kvt_entry_t e1 = s_entry(5, 0, 40, 0, b1, h1, 3, 0);
    kvt_step_exec_t x = s_exec(1, 1, &e1, 1);
    kvt_sim_runner_core_exec(r, &x, &out);
    cr_assert(out.done.ok);
    cr_assert_null(out.refused);
    cr_assert_eq(out.done.step, 1);
    cr_assert_eq(out.done.rank, 1);
    cr_assert_eq(out.done.blocks_written, 2);
    cr_assert(s_holds(2, s_h(0), 1) && s_holds(4, s_h(1), 1), "the rank's oracle bytes");
    cr_assert(!s_holds(2, s_h(0), 0), "another rank's bytes differ");
    cr_assert(s_untouched(6), "a partial block is not written");
    //  Tokens [40, 50): block 2 becomes full.
    uint32_t b2[] = {6, 7};
    kvt_hash_t h2[] = {s_h(2), {0, 0}};
    kvt_entry_t e2 = s_entry(5, 40, 50, 2, b2, h2, 2, 0);
    x = s_exec(2, 1, &e2, 1);
    kvt_sim_runner_core_exec(r, &x, &out);
    cr_assert_eq(out.done.blocks_written, 1);
    cr_assert(s_holds(6, s_h(2), 1));
    //  Tokens [48, 50) with the whole table: blocks full before the step
    //  (block 2 ends exactly at 48) are not written again.
    s_mem[0][0][6][0] ^= 0xFF;
    uint32_t b3[] = {2, 4, 6, 7};
    kvt_hash_t h3[] = {s_h(0), s_h(1), s_h(2), {0, 0}};
    kvt_entry_t e3 = s_entry(5, 48, 50, 0, b3, h3, 4, 0);
    x = s_exec(3, 1, &e3, 1);
    kvt_sim_runner_core_exec(r, &x, &out);
    cr_assert_eq(out.done.blocks_written, 0);
    cr_assert(!s_holds(6, s_h(2), 1), "a block full before the step was rewritten");
    kvt_sim_runner_stats_t st;
    kvt_sim_runner_core_stats(r, &st);
    cr_assert_eq(st.blocks_written, 3);
    cr_assert_eq(st.steps, 3);
    kvt_sim_runner_core_destroy(&r);
    cr_assert_null(r);
}

Test(sim_runner_core, checks_every_restored_block_and_names_the_wrong_request)
{
    kvt_sim_runner_core_t *r = s_runner(0, 0);
    kvt_sim_runner_out_t out;
    s_fill(1, s_h(0), 0);
    s_fill(3, s_h(1), 0);
    s_fill(5, s_h(2), 0);
    uint32_t b[] = {1, 3, 5, 7};
    kvt_hash_t h[] = {s_h(0), s_h(1), s_h(2), {0, 0}};
    //  Resumed at 48: blocks 0..2 are checked before the forward.
    kvt_entry_t e = s_entry(9, 48, 50, 0, b, h, 4, 48);
    kvt_step_exec_t x = s_exec(1, 0, &e, 1);
    kvt_sim_runner_core_exec(r, &x, &out);
    cr_assert(out.done.ok);
    cr_assert_eq(out.done.blocks_verified, 3);
    cr_assert_eq(out.done.nwrong, 0);
    //  One wrong byte in the last byte of the last restored block.
    s_mem[1][2][5][PBB - 1] ^= 0x40;
    x.step = 2;
    kvt_sim_runner_core_exec(r, &x, &out);
    cr_assert(out.done.ok, "a wrong resume is reported, the step still ran");
    cr_assert_eq(out.done.nwrong, 1);
    cr_assert_eq(out.done.wrong[0], 9);
    cr_assert_eq(out.where[0].req, 9);
    cr_assert_eq(out.where[0].block, 5);
    cr_assert_eq(out.where[0].plane, 1);
    cr_assert_eq(out.where[0].layer, 2);
    cr_assert_eq(out.where[0].offset, PBB - 1);
    s_mem[1][2][5][PBB - 1] ^= 0x40;
    //  A restored block without a hash is wrong, whatever its bytes.
    s_fill(3, (kvt_hash_t){0, 0}, 0);
    kvt_hash_t hz[] = {s_h(0), {0, 0}, s_h(2), {0, 0}};
    e.hashes = hz;
    x.step = 3;
    kvt_sim_runner_core_exec(r, &x, &out);
    cr_assert_eq(out.done.nwrong, 1);
    cr_assert_eq(out.where[0].block, 3);
    kvt_sim_runner_stats_t st;
    kvt_sim_runner_core_stats(r, &st);
    cr_assert_eq(st.blocks_verified, 9);
    cr_assert_eq(st.blocks_wrong, 2);
    kvt_sim_runner_core_destroy(&r);
}

Test(sim_runner_core, refuses_a_step_for_another_rank_and_still_answers_once)
{
    kvt_sim_runner_core_t *r = s_runner(1, 0);
    kvt_sim_runner_out_t out;
    uint32_t b[] = {0};
    kvt_hash_t h[] = {s_h(0)};
    kvt_entry_t e = s_entry(1, 0, 16, 0, b, h, 1, 0);
    kvt_step_exec_t x = s_exec(4, 0, &e, 1);
    kvt_sim_runner_core_exec(r, &x, &out);
    cr_assert(!out.done.ok);
    cr_assert_eq(out.done.detail, KVT_DETAIL_INVALID);
    cr_assert_eq(out.done.step, 4);
    cr_assert_eq(out.done.rank, 1, "the StepDone names the rank that ran it");
    cr_assert_eq(out.done.blocks_written, 0);
    cr_assert_not_null(out.refused);
    cr_assert(strstr(out.refused, "rank") != NULL, "%s", out.refused);
    cr_assert(s_untouched(0));
    kvt_sim_runner_stats_t st;
    kvt_sim_runner_core_stats(r, &st);
    cr_assert_eq(st.steps_failed, 1);
    cr_assert_eq(st.steps, 0);
    kvt_sim_runner_core_destroy(&r);
}

Test(sim_runner_core, refuses_a_misshapen_entry_before_writing_anything)
{
    kvt_sim_runner_core_t *r = s_runner(0, 0);
    kvt_sim_runner_out_t out;
    uint32_t good_b[] = {0};
    kvt_hash_t good_h[] = {s_h(0)};
    uint32_t short_b[] = {1, 2};
    kvt_hash_t short_h[] = {s_h(1), s_h(2)};
    uint32_t far_b[] = {NBLOCKS};
    kvt_hash_t far_h[] = {s_h(3)};
    uint32_t ver_b[] = {3};
    kvt_hash_t ver_h[] = {s_h(4)};
    struct {
        kvt_entry_t bad; //  the second entry of the step
        const char *why; //  what the refusal names
    } cases[] = {
        //  [0, 48) needs 3 blocks, 2 given.
        {s_entry(2, 0, 48, 0, short_b, short_h, 2, 0), "cover"},
        {s_entry(2, 0, 16, 0, far_b, far_h, 1, 0), "beyond"},
        //  Verify [0, 16) with a table that starts at block 1.
        {s_entry(2, 16, 32, 1, ver_b, ver_h, 1, 16), "verify"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kvt_entry_t es[2] = {s_entry(1, 0, 16, 0, good_b, good_h, 1, 0), cases[i].bad};
        kvt_step_exec_t x = s_exec(i + 1, 0, es, 2);
        kvt_sim_runner_core_exec(r, &x, &out);
        cr_assert(!out.done.ok, "case %zu", i);
        cr_assert_eq(out.done.blocks_written, 0, "case %zu", i);
        cr_assert(s_untouched(0), "case %zu: the good entry was written", i);
        cr_assert(strstr(out.refused, "entry 1") && strstr(out.refused, cases[i].why), "%s",
                  out.refused);
    }
    kvt_sim_runner_core_destroy(&r);
}

Test(sim_runner_core, corrupt_resume_fault_gives_exactly_one_wrong_resume)
{
    kvt_sim_runner_core_t *r = s_runner(0, 2);
    kvt_sim_runner_out_t out;
    s_fill(1, s_h(0), 0);
    s_fill(3, s_h(1), 0);
    uint32_t b[] = {1, 3, 5};
    kvt_hash_t h[] = {s_h(0), s_h(1), {0, 0}};
    kvt_entry_t e = s_entry(7, 32, 40, 0, b, h, 3, 32);
    uint32_t wrong[3];
    bool fault[3];
    for (int i = 0; i < 3; i++) {
        e.op.req = 7 + (uint64_t)i;
        kvt_step_exec_t x = s_exec(1 + (uint64_t)i, 0, &e, 1);
        kvt_sim_runner_core_exec(r, &x, &out);
        wrong[i] = out.done.nwrong;
        fault[i] = out.fault_injected;
        if (i == 1) {
            cr_assert_eq(out.done.wrong[0], 8, "the second resume is the wrong one");
            cr_assert_eq(out.where[0].block, 3, "in its last restored block");
            cr_assert_eq(out.where[0].plane, PLANES - 1);
            cr_assert_eq(out.where[0].layer, LAYERS - 1);
            cr_assert_eq(out.where[0].offset, PBB / 2);
        }
        cr_assert(s_holds(3, s_h(1), 0), "step %d: the flipped byte was put back", i + 1);
    }
    cr_assert_eq(wrong[0], 0);
    cr_assert_eq(wrong[1], 1);
    cr_assert_eq(wrong[2], 0);
    cr_assert(!fault[0] && fault[1] && !fault[2]);
    kvt_sim_runner_stats_t st;
    kvt_sim_runner_core_stats(r, &st);
    cr_assert_eq(st.faults_injected, 1);
    cr_assert_eq(st.blocks_wrong, 1);
    kvt_sim_runner_core_destroy(&r);
}

Test(sim_runner_core, refuses_an_unusable_configuration)
{
    kvt_sim_runner_core_cfg_t c;
    memset(&c, 0, sizeof c);
    c.block_size = BS;
    c.planes = PLANES;
    c.layers = LAYERS;
    cr_assert_null(kvt_sim_runner_core_new(&c), "no block accessor");
    c.block = s_block;
    c.planes = KVT_RUNNER_MAX_PLANES + 1;
    cr_assert_null(kvt_sim_runner_core_new(&c), "too many planes");
    c.planes = PLANES;
    c.layers = 0;
    cr_assert_null(kvt_sim_runner_core_new(&c), "no layer");
    kvt_sim_runner_core_t *none = NULL;
    kvt_sim_runner_core_destroy(&none);
}

// ------------------------------------------- runner core on a SIM device
//
//  The forward is a host function on the compute stream landing in
//  modelled time (manual clock): bytes change when it lands, so a copy on
//  another stream races it unless a fence orders the two on the device.

#define SLOTS   4  //  state slots (and checkpoint units)
#define SBYTES  96 //  bytes of one state unit
#define CKPT_IV 32 //  tokens between state checkpoints (2 blocks)

typedef struct {
    uint64_t now;              //  the manual clock
    kvt_gpu_t *gpu;            //  PLANES planes x LAYERS x NBLOCKS x PBB, SLOTS slots + units
    kvt_gpu_stream_t *compute; //  the runner's compute stream
    kvt_gpu_stream_t *lane;    //  a worker lane's stream
    kvt_fence_board_t *board;  //  the rank's fence board
    kvt_sim_runner_core_t *r;  //  the runner core under test
} rdev_t;

static uint64_t s_dev_clock(void *arg)
{
    return *(uint64_t *)arg;
}

static void s_dev_quiet(void *arg, int level, const char *line)
{
    (void)arg;
    (void)level;
    (void)line;
}

static void *s_dev_block(void *gpu, uint32_t p, uint32_t l, uint32_t b)
{
    return kvt_gpu_plane_ptr(gpu, p, l, b);
}

static void *s_dev_state(void *gpu, kvt_gpu_state_pool_t pool, uint32_t i)
{
    return kvt_gpu_state_ptr(gpu, pool, i);
}

//  A device whose copies cost 1000 ns + 1 ns per byte; the forward costs
//  forward_ns; with_state registers SLOTS slots and checkpoint units.
static void s_dev_open(rdev_t *d, uint64_t forward_ns, bool with_state)
{
    memset(d, 0, sizeof *d);
    kvt_gpu_opts_t o = {0};
    o.host_mode = KVT_GPU_HOST_SIM;
    o.now = s_dev_clock;
    o.now_arg = &d->now;
    o.sim_bandwidth_Bps = 1000000000;
    o.sim_latency_ns = 1000;
    o.sim_entry_ns = KVT_GPU_SIM_ZERO_LATENCY;
    o.log = s_dev_quiet;
    d->gpu = kvt_gpu_new(&o);
    cr_assert_not_null(d->gpu, "%s", kvt_gpu_last_error());
    for (int p = 0; p < PLANES; p++) {
        kvt_gpu_plane_desc_t pd = {"P", LAYERS, NBLOCKS, PBB, NULL};
        cr_assert_geq(kvt_gpu_plane_add(d->gpu, &pd), 0);
    }
    if (with_state) {
        kvt_gpu_state_desc_t sd = {SLOTS, SBYTES, NULL};
        cr_assert_eq(kvt_gpu_state_add(d->gpu, KVT_GPU_STATE_SLOTS, &sd), 0);
        cr_assert_eq(kvt_gpu_state_add(d->gpu, KVT_GPU_STATE_CKPT, &sd), 0);
    }
    d->compute = kvt_gpu_stream_new(d->gpu, "compute");
    d->lane = kvt_gpu_stream_new(d->gpu, "lane");
    d->board = kvt_fence_board_new(d->gpu, 0);
    cr_assert(d->compute && d->lane && d->board);
    kvt_sim_runner_core_cfg_t c;
    memset(&c, 0, sizeof c);
    c.rank = 0;
    c.block_size = BS;
    c.planes = PLANES;
    c.layers = LAYERS;
    c.num_blocks = NBLOCKS;
    for (int p = 0; p < PLANES; p++)
        c.plane_block_bytes[p] = PBB;
    c.block = s_dev_block;
    c.block_arg = d->gpu;
    c.gpu = d->gpu;
    c.compute = d->compute;
    c.board = d->board;
    c.forward_ns = forward_ns;
    if (with_state) {
        c.state_slots = SLOTS;
        c.ckpt_units = SLOTS;
        c.state_bytes = SBYTES;
        c.ckpt_interval = CKPT_IV;
        c.state = s_dev_state;
        c.state_arg = d->gpu;
    }
    d->r = kvt_sim_runner_core_new(&c);
    cr_assert_not_null(d->r);
}

static void s_dev_close(rdev_t *d)
{
    kvt_sim_runner_core_destroy(&d->r);
    kvt_fence_board_destroy(&d->board);
    kvt_gpu_stream_destroy(&d->compute);
    kvt_gpu_stream_destroy(&d->lane);
    kvt_gpu_destroy(&d->gpu);
}

//  Moves the clock to t and lands what is due.
static void s_dev_run_to(rdev_t *d, uint64_t t)
{
    d->now = t;
    kvt_gpu_progress(d->gpu);
}

//  Writes a block's oracle bytes directly (what an earlier forward left).
static void s_dev_fill(rdev_t *d, uint32_t block, kvt_hash_t h)
{
    for (uint32_t p = 0; p < PLANES; p++)
        for (uint32_t l = 0; l < LAYERS; l++)
            kvt_oracle_fill(kvt_gpu_plane_ptr(d->gpu, p, l, block), PBB, h, l, p, 0);
}

//  True when a chunk buffer of n blocks holds the oracle bytes of hashes.
static bool s_chunk_holds(rdev_t *d, const uint8_t *buf, uint32_t n, const kvt_hash_t *h)
{
    for (uint32_t p = 0; p < PLANES; p++)
        for (uint32_t l = 0; l < LAYERS; l++)
            for (uint32_t i = 0; i < n; i++)
                if (!kvt_oracle_check(buf + kvt_gpu_chunk_offset(d->gpu, p, l, n, i), PBB, h[i], l,
                                      p, 0))
                    return false;
    return true;
}

//  Polls the pending step at t; true when it gave its StepDone.
static bool s_dev_done_at(rdev_t *d, uint64_t t, kvt_sim_runner_out_t *out)
{
    s_dev_run_to(d, t);
    return kvt_sim_runner_core_poll(d->r, out);
}

static kvt_save_spec_t s_save(uint64_t req, uint32_t *blocks, uint32_t n)
{
    kvt_save_spec_t s;
    memset(&s, 0, sizeof s);
    s.op.req = req;
    s.op.gen = 1;
    s.start = 0;
    s.end = n * BS;
    s.blocks = blocks;
    s.nblocks = n;
    return s;
}

//  Step 1 computes [0, 32) of request 5 into blocks 2 and 3 (50 µs on the
//  device); the step's save of those blocks is gathered on the lane, after
//  the producer wait when `wait`. Returns whether the gathered chunk holds
//  the forward's bytes.
static bool s_save_reads_fresh(bool wait)
{
    rdev_t d;
    s_dev_open(&d, 50000, false);
    uint32_t b[] = {2, 3};
    kvt_hash_t h[] = {s_h(0), s_h(1)};
    kvt_entry_t e = s_entry(5, 0, 32, 0, b, h, 2, 0);
    kvt_save_spec_t sv = s_save(5, b, 2);
    kvt_step_exec_t x = s_exec(1, 0, &e, 1);
    x.saves = &sv;
    x.nsaves = 1;
    kvt_sim_runner_out_t out;
    kvt_sim_runner_core_exec(d.r, &x, &out);
    cr_assert(out.pending, "the forward runs on the device");
    cr_assert_eq(out.nsaves, 1);
    cr_assert_eq(out.saves[0].producer, 2, "the save waits for step 1's producer (step + 1)");
    cr_assert(!out.saves[0].producer_failed);
    uint8_t buf[2 * PLANES * LAYERS * PBB];
    if (wait)
        cr_assert_eq(kvt_fence_board_wait_producer(d.board, out.saves[0].producer - 1, d.lane), 0);
    cr_assert_eq(kvt_gpu_gather(d.lane, b, 2, buf, sizeof buf), 0);
    cr_assert(!s_dev_done_at(&d, 10000, &out), "the forward has not landed at 10 µs");
    cr_assert(s_dev_done_at(&d, 200000, &out));
    cr_assert(out.done.ok);
    cr_assert_eq(out.done.blocks_written, 2);
    bool fresh = s_chunk_holds(&d, buf, 2, h);
    s_dev_close(&d);
    return fresh;
}

Test(sim_runner_core, rule_S1_save_without_producer_wait_reads_stale_bytes)
{
    cr_assert(!s_save_reads_fresh(false), "an unfenced save gathers before the forward landed");
}

Test(sim_runner_core, rule_S1_save_with_producer_wait_reads_fresh_bytes)
{
    cr_assert(s_save_reads_fresh(true), "the fenced save gathers the forward's bytes");
}

Test(sim_runner_core, rule_S2_failed_event_record_rejects_that_steps_saves_only)
{
    rdev_t d;
    s_dev_open(&d, 50000, false);
    uint32_t b[] = {2, 3}, lb[] = {6};
    kvt_hash_t h[] = {s_h(0), s_h(1)};
    kvt_entry_t e = s_entry(5, 0, 32, 0, b, h, 2, 0);
    kvt_save_spec_t sv[2] = {s_save(5, b, 1), s_save(5, b + 1, 1)};
    kvt_load_spec_t ld = s_save(9, lb, 1);
    kvt_step_exec_t x = s_exec(1, 0, &e, 1);
    x.saves = sv;
    x.nsaves = 2;
    x.loads = &ld;
    x.nloads = 1;
    kvt_sim_runner_out_t out;
    //  Step 1 records; step 2's record fails; step 3 records again.
    kvt_sim_runner_core_exec(d.r, &x, &out);
    cr_assert(!out.producer_failed);
    cr_assert(s_dev_done_at(&d, 100000, &out));
    kvt_fence_board_fail_next(d.board, 1);
    e.start = 16;
    e.first_block = 0;
    x.step = 2;
    kvt_sim_runner_core_exec(d.r, &x, &out);
    cr_assert(out.producer_failed);
    cr_assert_eq(out.nsaves, 2, "the saves still go out (to be refused with a report each)");
    for (uint32_t i = 0; i < 2; i++) {
        cr_assert(out.saves[i].producer_failed, "save %u of step 2", i);
        cr_assert_eq(out.saves[i].producer, 0);
    }
    cr_assert_eq(out.nloads, 1, "the step's loads still go out");
    cr_assert(!out.loads[0].producer_failed);
    cr_assert_eq(out.loads[0].after, 2, "waiting for step 1's compute");
    //  No event answers for step 2's compute, so none of it is left
    //  running: the forward already landed although its time has not come.
    cr_assert(s_dev_done_at(&d, d.now, &out), "the unrecorded compute was drained");
    cr_assert(out.done.ok, "the forward itself ran");
    x.step = 3;
    kvt_sim_runner_core_exec(d.r, &x, &out);
    cr_assert(!out.producer_failed, "not a latch: step 3 records again");
    for (uint32_t i = 0; i < 2; i++) {
        cr_assert(!out.saves[i].producer_failed);
        cr_assert_eq(out.saves[i].producer, 4);
    }
    cr_assert_eq(out.loads[0].after, 2, "step 2 has no event: step 1's is the newest");
    cr_assert(s_dev_done_at(&d, d.now + 100000, &out));
    kvt_sim_runner_stats_t st;
    kvt_sim_runner_core_stats(d.r, &st);
    cr_assert_eq(st.producer_failures, 1);
    cr_assert_eq(st.steps, 3);
    kvt_fence_board_stats_t fb;
    kvt_fence_board_stats(d.board, &fb);
    cr_assert_eq(fb.producers_recorded, 2);
    cr_assert_eq(fb.producer_failures, 1);
    s_dev_close(&d);
}

//  Step 1 resumes request 7 on blocks 4, 5 (their restored bytes are
//  right) with a 50 µs forward; meanwhile the blocks are handed to another
//  request whose load scatters its own bytes into them (2 µs), after the
//  compute wait when `wait`. Returns the wrong resumes the forward saw.
static uint32_t s_load_under_compute(bool wait)
{
    rdev_t d;
    s_dev_open(&d, 50000, false);
    uint32_t b[] = {4, 5};
    kvt_hash_t h[] = {s_h(0), s_h(1)};
    s_dev_fill(&d, 4, h[0]);
    s_dev_fill(&d, 5, h[1]);
    kvt_entry_t e =
        s_entry(7, 32, 40, 0, (uint32_t[]){4, 5, 6}, (kvt_hash_t[]){h[0], h[1], {0}}, 3, 32);
    kvt_step_exec_t x = s_exec(1, 0, &e, 1);
    kvt_sim_runner_out_t out;
    kvt_sim_runner_core_exec(d.r, &x, &out);
    cr_assert(out.pending);
    //  The load of the next step carries after = 2 (step 1's compute).
    if (wait)
        cr_assert_eq(kvt_fence_board_wait_compute(d.board, 1, d.lane), 0);
    uint8_t buf[2 * PLANES * LAYERS * PBB];
    memset(buf, 0x5A, sizeof buf);
    cr_assert_eq(kvt_gpu_scatter(d.lane, b, 2, buf, sizeof buf), 0);
    cr_assert(s_dev_done_at(&d, 200000, &out));
    uint32_t wrong = out.done.nwrong;
    //  The next step's loads name step 1's compute.
    kvt_load_spec_t ld = s_save(8, b, 2);
    kvt_entry_t e2 = s_entry(7, 40, 41, 2, (uint32_t[]){6}, (kvt_hash_t[]){{0}}, 1, 0);
    x = s_exec(2, 0, &e2, 1);
    x.loads = &ld;
    x.nloads = 1;
    kvt_sim_runner_core_exec(d.r, &x, &out);
    cr_assert_eq(out.loads[0].after, 2);
    cr_assert(s_dev_done_at(&d, 400000, &out));
    s_dev_close(&d);
    return wrong;
}

Test(sim_runner_core, load_waits_for_compute_that_reads_its_blocks)
{
    cr_assert_eq(s_load_under_compute(false), 1,
                 "unfenced, the load overwrote the forward's input");
    cr_assert_eq(s_load_under_compute(true), 0, "fenced, the forward read the right bytes");
}

static void s_idle_fn(void *arg)
{
    (void)arg;
}

//  A load restores blocks 4, 5 of request 7 on the lane (behind 40 µs of
//  other lane work) and records a restore event when `record`; step 1
//  resumes request 7 with a 1 µs forward. Returns the wrong resumes.
static uint32_t s_forward_after_restore(bool record)
{
    rdev_t d;
    s_dev_open(&d, 1000, false);
    uint32_t b[] = {4, 5};
    kvt_hash_t h[] = {s_h(0), s_h(1)};
    //  The restored chunk, made the way a save of those bytes would be.
    s_dev_fill(&d, 4, h[0]);
    s_dev_fill(&d, 5, h[1]);
    uint8_t buf[2 * PLANES * LAYERS * PBB];
    cr_assert_eq(kvt_gpu_gather(d.lane, b, 2, buf, sizeof buf), 0);
    cr_assert_eq(kvt_gpu_stream_synchronize(d.lane), KVT_GPU_FORCED);
    cr_assert(s_chunk_holds(&d, buf, 2, h));
    memset(kvt_gpu_plane_ptr(d.gpu, 0, 0, 4), 0, PBB); //  blocks hold other bytes now
    cr_assert_eq(kvt_gpu_launch_host_fn(d.lane, s_idle_fn, NULL, 40000), 0);
    cr_assert_eq(kvt_gpu_scatter(d.lane, b, 2, buf, sizeof buf), 0);
    if (record)
        cr_assert_eq(kvt_fence_board_record_restore(d.board, d.lane), 0);
    kvt_entry_t e =
        s_entry(7, 32, 40, 0, (uint32_t[]){4, 5, 6}, (kvt_hash_t[]){h[0], h[1], {0}}, 3, 32);
    kvt_step_exec_t x = s_exec(1, 0, &e, 1);
    kvt_sim_runner_out_t out;
    kvt_sim_runner_core_exec(d.r, &x, &out);
    cr_assert(out.pending);
    cr_assert(s_dev_done_at(&d, 200000, &out));
    cr_assert_eq(out.done.blocks_verified, 2);
    uint32_t wrong = out.done.nwrong;
    s_dev_close(&d);
    return wrong;
}

Test(sim_runner_core, compute_waits_for_restores)
{
    cr_assert_eq(s_forward_after_restore(false), 1, "unfenced, the forward read before the load");
    cr_assert_eq(s_forward_after_restore(true), 0, "fenced, the forward read the restored bytes");
}

Test(sim_runner_core, a_step_while_the_forward_runs_is_refused_and_answered)
{
    rdev_t d;
    s_dev_open(&d, 50000, false);
    uint32_t b[] = {2};
    kvt_hash_t h[] = {s_h(0)};
    kvt_entry_t e = s_entry(5, 0, 16, 0, b, h, 1, 0);
    kvt_step_exec_t x = s_exec(1, 0, &e, 1);
    kvt_sim_runner_out_t out;
    kvt_sim_runner_core_exec(d.r, &x, &out);
    cr_assert(out.pending && kvt_sim_runner_core_busy(d.r));
    x.step = 2;
    kvt_sim_runner_core_exec(d.r, &x, &out);
    cr_assert(!out.pending && !out.done.ok);
    cr_assert_eq(out.done.step, 2);
    cr_assert(strstr(out.refused, "still runs") != NULL, "%s", out.refused);
    cr_assert(s_dev_done_at(&d, 100000, &out), "step 1 still ends");
    cr_assert(out.done.ok);
    cr_assert_eq(out.done.step, 1);
    cr_assert_eq(out.done.blocks_written, 1);
    s_dev_close(&d);
}

//  A step refused while a forward runs still sends its loads (each gets
//  its report); what they overwrite stops being checked as the earlier
//  owners' once the forward ends: request 5's KV end in block 2 is not
//  swept against request 9's bytes that the refused step's load put there.
Test(sim_runner_core, a_refused_steps_loads_close_their_destinations_when_the_forward_ends)
{
    rdev_t d;
    s_dev_open(&d, 50000, false);
    uint32_t b[] = {2};
    kvt_hash_t h[] = {s_h(0)};
    kvt_entry_t e = s_entry(5, 0, 16, 0, b, h, 1, 0);
    kvt_step_exec_t x = s_exec(1, 0, &e, 1);
    kvt_sim_runner_out_t out;
    kvt_sim_runner_core_exec(d.r, &x, &out);
    cr_assert(out.pending);
    kvt_hash_t keys[] = {s_h(40)};
    kvt_load_spec_t ld;
    memset(&ld, 0, sizeof ld);
    ld.op = (kvt_opid_t){9, 1};
    ld.start = 0;
    ld.end = 16;
    ld.blocks = b;
    ld.nblocks = 1;
    ld.keys = keys;
    ld.nkeys = 1;
    kvt_step_exec_t y = s_exec(2, 0, NULL, 0);
    y.loads = &ld;
    y.nloads = 1;
    kvt_sim_runner_core_exec(d.r, &y, &out);
    cr_assert(!out.pending && !out.done.ok);
    cr_assert_eq(out.nloads, 1, "the refused step's load still goes out");
    cr_assert(s_dev_done_at(&d, 100000, &out), "step 1 ends");
    cr_assert(out.done.ok);
    s_dev_fill(&d, 2, s_h(40)); //  the load lands: request 9's bytes
    const kvt_sim_runner_wrong_t *where;
    cr_assert_eq(kvt_sim_runner_core_sweep(d.r, &where), 0,
                 "request 5's end in block 2 was overwritten by the load, not by a wrong forward");
    kvt_sim_runner_stats_t st;
    kvt_sim_runner_core_stats(d.r, &st);
    cr_assert_eq(st.sweep_wrong, 0);
    s_dev_close(&d);
}

static bool s_state_holds(rdev_t *d, kvt_gpu_state_pool_t pool, uint32_t i, kvt_hash_t h)
{
    return kvt_oracle_state_mismatch(kvt_gpu_state_ptr(d->gpu, pool, i), SBYTES, h, 0) == SBYTES;
}

//  An entry with state work in slot `slot` (no restore, no take).
static kvt_entry_t s_sentry(uint64_t req, uint32_t start, uint32_t end, uint32_t first_block,
                            uint32_t *blocks, kvt_hash_t *hashes, uint32_t n, uint32_t verify_end,
                            uint32_t slot)
{
    kvt_entry_t e = s_entry(req, start, end, first_block, blocks, hashes, n, verify_end);
    e.state = true;
    e.state_slot = slot;
    return e;
}

//  A tier load's state leg of request req: the image at `boundary` in `slot`.
static kvt_load_spec_t s_state_load(uint64_t req, uint32_t boundary, kvt_hash_t h, uint32_t slot)
{
    kvt_load_spec_t ld;
    memset(&ld, 0, sizeof ld);
    ld.op = (kvt_opid_t){req, 1};
    ld.state = true;
    ld.state_boundary = boundary;
    ld.state_hash = h;
    ld.state_slot = slot;
    return ld;
}

//  The same for a refused step's state leg: request 5's state in slot 1 is
//  not swept once the load put request 9's image there.
Test(sim_runner_core, a_refused_steps_state_leg_owns_its_slot_when_the_forward_ends)
{
    rdev_t d;
    s_dev_open(&d, 50000, true);
    uint32_t b[] = {2};
    kvt_hash_t h[] = {s_h(0)};
    kvt_entry_t e = s_sentry(5, 0, 16, 0, b, h, 1, 0, 1);
    kvt_step_exec_t x = s_exec(1, 0, &e, 1);
    kvt_sim_runner_out_t out;
    kvt_sim_runner_core_exec(d.r, &x, &out);
    cr_assert(out.pending);
    kvt_load_spec_t ld = s_state_load(9, 16, s_h(40), 1);
    kvt_step_exec_t y = s_exec(2, 0, NULL, 0);
    y.loads = &ld;
    y.nloads = 1;
    kvt_sim_runner_core_exec(d.r, &y, &out);
    cr_assert(!out.pending && !out.done.ok);
    cr_assert_eq(out.nloads, 1, "the refused step's load still goes out");
    cr_assert(s_dev_done_at(&d, 100000, &out), "step 1 ends");
    kvt_oracle_state_fill(kvt_gpu_state_ptr(d.gpu, KVT_GPU_STATE_SLOTS, 1), SBYTES, s_h(40), 0);
    const kvt_sim_runner_wrong_t *where;
    cr_assert_eq(kvt_sim_runner_core_sweep(d.r, &where), 0,
                 "slot 1 holds the loaded image, the state the load's record names");
    s_dev_close(&d);
}

Test(sim_runner_core, forward_writes_state_at_every_checkpoint_boundary_it_crosses)
{
    rdev_t d;
    s_dev_open(&d, 1000, true);
    uint32_t b[] = {0, 1, 2, 3, 4, 5, 6};
    kvt_hash_t h[] = {s_h(0), s_h(1), s_h(2), s_h(3), s_h(4), s_h(5), {0}};
    //  [0, 64) in the slot the entry names (1): boundaries 32 and 64 (the
    //  step's end); the slot ends at 64's state.
    kvt_entry_t e = s_sentry(3, 0, 64, 0, b, h, 4, 0, 1);
    kvt_step_exec_t x = s_exec(1, 0, &e, 1);
    kvt_sim_runner_out_t out;
    kvt_sim_runner_core_exec(d.r, &x, &out);
    cr_assert(!s_state_holds(&d, KVT_GPU_STATE_SLOTS, 1, h[3]), "not before it lands");
    cr_assert(s_dev_done_at(&d, 10000, &out));
    cr_assert(out.done.ok, "%s", out.refused ? out.refused : "");
    cr_assert(s_state_holds(&d, KVT_GPU_STATE_SLOTS, 1, h[3]), "state at B = 64");
    for (uint32_t i = 0; i < SLOTS; i++)
        cr_assert(!s_state_holds(&d, KVT_GPU_STATE_CKPT, i, h[3]), "no take: no unit written");
    //  [64, 100): crosses 96 = block 5's end; takes the slot into unit 3.
    kvt_entry_t e2 = s_sentry(3, 64, 100, 4, b + 4, h + 4, 3, 0, 1);
    e2.take_unit = 3;
    e2.take_at = 96;
    x = s_exec(2, 0, &e2, 1);
    kvt_sim_runner_core_exec(d.r, &x, &out);
    cr_assert(s_dev_done_at(&d, 20000, &out));
    cr_assert(s_state_holds(&d, KVT_GPU_STATE_SLOTS, 1, h[5]));
    cr_assert(s_state_holds(&d, KVT_GPU_STATE_CKPT, 3, h[5]), "the taken checkpoint unit");
    //  [100, 110) crosses no boundary: the state stays.
    kvt_entry_t e3 = s_sentry(3, 100, 110, 6, b + 6, h + 6, 1, 0, 1);
    x = s_exec(3, 0, &e3, 1);
    kvt_sim_runner_core_exec(d.r, &x, &out);
    cr_assert(s_dev_done_at(&d, 30000, &out));
    cr_assert(s_state_holds(&d, KVT_GPU_STATE_SLOTS, 1, h[5]));
    for (uint32_t i = 0; i < SLOTS; i++)
        if (i != 1)
            cr_assert(!s_state_holds(&d, KVT_GPU_STATE_SLOTS, i, h[5]), "only the entry's slot");
    kvt_sim_runner_stats_t st;
    kvt_sim_runner_core_stats(d.r, &st);
    cr_assert_eq(st.states_written, 2, "one advance per step reaching a new block boundary");
    cr_assert_eq(st.states_taken, 1);
    s_dev_close(&d);
}

//  A step ending on the block grid off the chunk grid (a prompt's end,
//  where the scheduler may take a checkpoint) leaves that boundary's state
//  in the slot, and a resume there has its state checked.
Test(sim_runner_core, state_at_a_prompt_end_off_the_chunk_grid_is_written_and_checked)
{
    rdev_t d;
    s_dev_open(&d, 0, true);
    uint32_t b[] = {0, 1, 2, 3};
    kvt_hash_t h[] = {s_h(0), s_h(1), s_h(2), {0}};
    //  [0, 48): chunk boundary 32, then the step's end 48 (block 2's end).
    kvt_entry_t e = s_sentry(8, 0, 48, 0, b, h, 3, 0, 1);
    e.take_unit = 2;
    e.take_at = 48;
    kvt_step_exec_t x = s_exec(1, 0, &e, 1);
    kvt_sim_runner_out_t out;
    kvt_sim_runner_core_exec(d.r, &x, &out);
    cr_assert(s_dev_done_at(&d, 10000, &out));
    cr_assert(out.done.ok);
    cr_assert(s_state_holds(&d, KVT_GPU_STATE_SLOTS, 1, h[2]), "the state at 48");
    cr_assert(s_state_holds(&d, KVT_GPU_STATE_CKPT, 2, h[2]), "taken at 48");
    //  Request 8 resumes at 48 from that checkpoint into slot 3: checked, right.
    kvt_entry_t r = s_sentry(8, 48, 52, 0, b, h, 4, 48, 3);
    r.restore_unit = 2;
    r.restore_at = 48;
    x = s_exec(2, 0, &r, 1);
    kvt_sim_runner_core_exec(d.r, &x, &out);
    cr_assert(s_dev_done_at(&d, 20000, &out));
    cr_assert_eq(out.done.nwrong, 0);
    //  The same resume from a unit holding the state at 32 is wrong.
    kvt_oracle_state_fill(kvt_gpu_state_ptr(d.gpu, KVT_GPU_STATE_CKPT, 2), SBYTES, h[1], 0);
    x.step = 3;
    kvt_sim_runner_core_exec(d.r, &x, &out);
    cr_assert(s_dev_done_at(&d, 30000, &out));
    cr_assert_eq(out.done.nwrong, 1);
    cr_assert_eq(out.where[0].plane, KVT_RUNNER_STATE);
    kvt_sim_runner_stats_t st;
    kvt_sim_runner_core_stats(d.r, &st);
    cr_assert_eq(st.states_written, 1, "one advance, to 48 (the resumes reach no new block)");
    cr_assert_eq(st.states_verified, 2);
    cr_assert_eq(st.states_restored, 2);
    s_dev_close(&d);
}

Test(sim_runner_core, restored_state_slot_is_checked_against_the_oracle)
{
    rdev_t d;
    s_dev_open(&d, 1000, true);
    uint32_t b[] = {0, 1, 2, 3, 4};
    kvt_hash_t h[] = {s_h(0), s_h(1), s_h(2), s_h(3), {0}};
    for (uint32_t i = 0; i < 4; i++)
        s_dev_fill(&d, b[i], h[i]);
    //  The load's state leg put request 4's image at B = 64 into slot 2
    //  (the worker's copy); the entry names slot 2.
    kvt_oracle_state_fill(kvt_gpu_state_ptr(d.gpu, KVT_GPU_STATE_SLOTS, 2), SBYTES, h[3], 0);
    kvt_load_spec_t ld = s_state_load(4, 64, h[3], 2);
    kvt_entry_t e = s_sentry(4, 64, 70, 0, b, h, 5, 64, 2);
    kvt_step_exec_t x = s_exec(1, 0, &e, 1);
    x.loads = &ld;
    x.nloads = 1;
    kvt_sim_runner_out_t out;
    kvt_sim_runner_core_exec(d.r, &x, &out);
    cr_assert(s_dev_done_at(&d, 10000, &out));
    cr_assert(out.done.ok, "%s", out.refused ? out.refused : "");
    cr_assert_eq(out.done.nwrong, 0);
    //  A slot holding another boundary's state is a wrong resume.
    kvt_oracle_state_fill(kvt_gpu_state_ptr(d.gpu, KVT_GPU_STATE_SLOTS, 2), SBYTES, h[1], 0);
    x.step = 2;
    x.nloads = 0;
    kvt_sim_runner_core_exec(d.r, &x, &out);
    cr_assert(s_dev_done_at(&d, 20000, &out));
    cr_assert_eq(out.done.nwrong, 1);
    cr_assert_eq(out.done.wrong[0], 4);
    cr_assert_eq(out.where[0].plane, KVT_RUNNER_STATE);
    cr_assert_eq(out.where[0].block, 2, "names the slot");
    cr_assert_eq(out.where[0].offset, 0);
    kvt_sim_runner_stats_t st;
    kvt_sim_runner_core_stats(d.r, &st);
    cr_assert_eq(st.states_verified, 2);
    cr_assert_eq(st.states_wrong, 1);
    cr_assert_eq(st.blocks_wrong, 0, "the KV blocks were right");
    s_dev_close(&d);
}

//  Requests 4 and 5 resume at B = 32 from the tier, their state images in
//  slots 1 and 2 (where their loads put them); request 4's entry names
//  slot 2: the oracle sees request 5's state there, a wrong resume.
Test(sim_runner_core, entry_naming_another_requests_slot_is_a_wrong_resume)
{
    rdev_t d;
    s_dev_open(&d, 1000, true);
    uint32_t b4[] = {0, 1, 2}, b5[] = {3, 4, 5};
    kvt_hash_t h4[] = {s_h(0), s_h(1), {0}}, h5[] = {s_h(10), s_h(11), {0}};
    for (uint32_t i = 0; i < 2; i++) {
        s_dev_fill(&d, b4[i], h4[i]);
        s_dev_fill(&d, b5[i], h5[i]);
    }
    kvt_oracle_state_fill(kvt_gpu_state_ptr(d.gpu, KVT_GPU_STATE_SLOTS, 1), SBYTES, h4[1], 0);
    kvt_oracle_state_fill(kvt_gpu_state_ptr(d.gpu, KVT_GPU_STATE_SLOTS, 2), SBYTES, h5[1], 0);
    kvt_load_spec_t ld[] = {s_state_load(4, 32, h4[1], 1), s_state_load(5, 32, h5[1], 2)};
    kvt_entry_t es[] = {s_sentry(4, 32, 40, 0, b4, h4, 3, 32, 2),
                        s_sentry(5, 32, 40, 0, b5, h5, 3, 32, 2)};
    kvt_step_exec_t x = s_exec(1, 0, es, 2);
    x.loads = ld;
    x.nloads = 2;
    kvt_sim_runner_out_t out;
    kvt_sim_runner_core_exec(d.r, &x, &out);
    cr_assert(s_dev_done_at(&d, 10000, &out));
    cr_assert_eq(out.done.nwrong, 1, "request 4 sees another request's state");
    cr_assert_eq(out.done.wrong[0], 4);
    cr_assert_eq(out.where[0].plane, KVT_RUNNER_STATE);
    cr_assert_eq(out.where[0].block, 2, "names the slot the entry named");
    kvt_sim_runner_stats_t st;
    kvt_sim_runner_core_stats(d.r, &st);
    cr_assert_eq(st.states_verified, 2);
    cr_assert_eq(st.states_wrong, 1);
    cr_assert_eq(st.blocks_wrong, 0, "the KV blocks were right");
    s_dev_close(&d);
}

//  On a device with state slots the runner has no slot of its own: an
//  entry that names none, or one the device lacks, refuses the step
//  before anything is written (and the loads still go out).
Test(sim_runner_core, refuses_an_entry_without_a_state_slot_the_device_has)
{
    rdev_t d;
    s_dev_open(&d, 0, true);
    uint32_t b[] = {0, 1};
    kvt_hash_t h[] = {s_h(0), s_h(1)};
    kvt_load_spec_t ld = s_state_load(9, 32, h[1], 0);
    kvt_entry_t cases[] = {s_entry(6, 0, 32, 0, b, h, 2, 0),
                           s_sentry(6, 0, 32, 0, b, h, 2, 0, SLOTS)};
    const char *why[] = {"no state slot", "state_slot beyond"};
    for (uint32_t i = 0; i < 2; i++) {
        kvt_entry_t es[] = {s_sentry(7, 0, 16, 0, b, h, 1, 0, 0), cases[i]};
        kvt_step_exec_t x = s_exec(1 + i, 0, es, 2);
        x.loads = &ld;
        x.nloads = 1;
        kvt_sim_runner_out_t out;
        kvt_sim_runner_core_exec(d.r, &x, &out);
        cr_assert(!out.pending && !out.done.ok, "case %u: refused at once", i);
        cr_assert_eq(out.done.detail, KVT_DETAIL_INVALID);
        cr_assert(out.refused && strstr(out.refused, "entry 1") && strstr(out.refused, why[i]),
                  "%s", out.refused ? out.refused : "(none)");
        cr_assert_eq(out.nloads, 1, "the step's loads still go out");
        cr_assert_eq(out.done.blocks_written, 0);
        for (uint32_t s = 0; s < SLOTS; s++)
            cr_assert(!s_state_holds(&d, KVT_GPU_STATE_SLOTS, s, h[0]), "nothing written");
        kvt_sim_runner_stats_t st;
        kvt_sim_runner_core_stats(d.r, &st);
        cr_assert_eq(st.slots_refused, i + 1);
        cr_assert_eq(st.steps_failed, i + 1);
    }
    //  The same step with the slots named runs.
    kvt_entry_t ok = s_sentry(6, 0, 32, 0, b, h, 2, 0, 3);
    kvt_step_exec_t x = s_exec(3, 0, &ok, 1);
    kvt_sim_runner_out_t out;
    kvt_sim_runner_core_exec(d.r, &x, &out);
    cr_assert(s_dev_done_at(&d, 10000, &out));
    cr_assert(out.done.ok);
    cr_assert(s_state_holds(&d, KVT_GPU_STATE_SLOTS, 3, h[1]));
    s_dev_close(&d);
}

//  corrupt_state = 2: the second restored state slot checked has one byte
//  flipped before its check and put back after it.
Test(sim_runner_core, corrupt_state_fault_gives_exactly_one_wrong_state)
{
    rdev_t d;
    s_dev_open(&d, 0, true);
    kvt_sim_runner_core_destroy(&d.r);
    kvt_sim_runner_core_cfg_t c;
    memset(&c, 0, sizeof c);
    c.block_size = BS;
    c.planes = PLANES;
    c.layers = LAYERS;
    c.num_blocks = NBLOCKS;
    for (int p = 0; p < PLANES; p++)
        c.plane_block_bytes[p] = PBB;
    c.block = s_dev_block;
    c.block_arg = d.gpu;
    c.state_slots = SLOTS;
    c.ckpt_units = SLOTS;
    c.state_bytes = SBYTES;
    c.ckpt_interval = CKPT_IV;
    c.state = s_dev_state;
    c.state_arg = d.gpu;
    c.corrupt_state = 2;
    d.r = kvt_sim_runner_core_new(&c);
    cr_assert_not_null(d.r);
    uint32_t b[] = {0, 1, 2};
    kvt_hash_t h[] = {s_h(0), s_h(1), {0}};
    s_dev_fill(&d, 0, h[0]);
    s_dev_fill(&d, 1, h[1]);
    uint32_t wrong[3];
    bool fault[3];
    //  Three resumes from the same slot (a flip left behind would be seen again).
    kvt_oracle_state_fill(kvt_gpu_state_ptr(d.gpu, KVT_GPU_STATE_SLOTS, 1), SBYTES, h[1], 0);
    for (uint32_t i = 0; i < 3; i++) {
        kvt_entry_t e = s_sentry(20 + i, 32, 40, 0, b, h, 3, 32, 1);
        kvt_step_exec_t x = s_exec(1 + i, 0, &e, 1);
        kvt_sim_runner_out_t out;
        kvt_sim_runner_core_exec(d.r, &x, &out);
        cr_assert(out.done.ok);
        wrong[i] = out.done.nwrong;
        fault[i] = out.fault_injected;
        if (i == 1) {
            cr_assert_eq(out.done.wrong[0], 21, "the second state check is the wrong one");
            cr_assert_eq(out.where[0].plane, KVT_RUNNER_STATE);
            cr_assert_eq(out.where[0].block, 1);
            cr_assert_eq(out.where[0].offset, SBYTES / 2);
        }
    }
    cr_assert(wrong[0] == 0 && wrong[1] == 1 && wrong[2] == 0);
    cr_assert(s_state_holds(&d, KVT_GPU_STATE_SLOTS, 1, h[1]), "the flipped byte was put back");
    cr_assert(!fault[0] && fault[1] && !fault[2]);
    kvt_sim_runner_stats_t st;
    kvt_sim_runner_core_stats(d.r, &st);
    cr_assert_eq(st.faults_injected, 1);
    cr_assert_eq(st.states_wrong, 1);
    cr_assert_eq(st.blocks_wrong, 0, "the KV bytes were right");
    s_dev_close(&d);
}

// ------------------------------------------------------------- engine core

//  A workload of n requests with the given arrivals (µs) and input lengths.
static kvt_workload_t *s_wl(uint32_t n, const uint64_t *arrival_us, const uint32_t *input_len)
{
    kvt_workload_t *wl = calloc(1, sizeof *wl);
    wl->reqs = calloc(n, sizeof *wl->reqs);
    wl->n = n;
    for (uint32_t i = 0; i < n; i++) {
        kvt_wreq_t *r = &wl->reqs[i];
        r->arrival_us = arrival_us[i];
        r->input_len = input_len[i];
        r->output_len = 4;
        r->nids = (input_len[i] + KVT_WL_BLOCK_TOKENS - 1) / KVT_WL_BLOCK_TOKENS;
        r->ids = calloc(r->nids, sizeof *r->ids);
        for (uint32_t k = 0; k < r->nids; k++)
            r->ids[k] = 100 * i + k;
        wl->input_tokens += input_len[i];
    }
    return wl;
}

static void s_wl_free(kvt_workload_t *wl)
{
    for (uint32_t i = 0; i < wl->n; i++)
        free(wl->reqs[i].ids);
    free(wl->reqs);
    free(wl);
}

//  Cost model of these tests: a step costs 1000 µs + 10 µs per token (no
//  attention, decode or copy costs).
static void s_linear_cost(kvt_cost_cfg_t *c)
{
    memset(c, 0, sizeof *c);
    c->name = "linear";
    c->step_us = 1000;
    c->prefill_tps = 100000;
}

static kvt_sim_engine_core_t *s_engine(const kvt_workload_t *wl, uint32_t tp,
                                       kvt_sim_engine_result_t *res)
{
    kvt_sim_engine_core_cfg_t c;
    memset(&c, 0, sizeof c);
    c.wl = wl;
    c.tp = tp;
    s_linear_cost(&c.cost);
    memset(res, 0, sizeof *res);
    kvt_sim_engine_core_t *e = kvt_sim_engine_core_new(&c, res);
    cr_assert_not_null(e);
    return e;
}

static kvt_step_plan_t s_plan(uint64_t step, kvt_entry_t *entries, uint32_t n, bool idle)
{
    kvt_step_plan_t p;
    memset(&p, 0, sizeof p);
    p.step = step;
    p.entries = entries;
    p.nentries = n;
    p.idle = idle;
    return p;
}

static kvt_step_done_t s_done(uint64_t step, uint32_t rank, bool ok)
{
    kvt_step_done_t d;
    memset(&d, 0, sizeof d);
    d.step = step;
    d.rank = rank;
    d.ok = ok;
    return d;
}

static kvt_entry_t s_work(uint64_t req, uint32_t start, uint32_t end)
{
    return s_entry(req, start, end, 0, NULL, NULL, 0, 0);
}

//  Runs one step with the given entries on every rank; returns the last
//  answer (the next Schedule).
static void s_step(kvt_sim_engine_core_t *e, uint32_t tp, kvt_entry_t *entries, uint32_t n,
                   kvt_sim_engine_out_t *out)
{
    uint64_t step = out->schedule.step;
    kvt_step_plan_t p = s_plan(step, entries, n, false);
    cr_assert_eq(kvt_sim_engine_core_plan(e, &p, out), 0, "%s", out->note);
    cr_assert_eq(out->what, KVT_SIM_ENGINE_EXEC);
    for (uint32_t r = 0; r < tp; r++) {
        kvt_step_done_t d = s_done(step, r, true);
        cr_assert_eq(kvt_sim_engine_core_done(e, &d, out), 0, "%s", out->note);
    }
    cr_assert_eq(out->what, KVT_SIM_ENGINE_SCHEDULE);
}

Test(sim_engine_core, admits_requests_when_the_modelled_clock_reaches_them)
{
    uint64_t at[] = {0, 0, 5000, 2000000};
    uint32_t len[] = {100, 100, 100, 100};
    kvt_workload_t *wl = s_wl(4, at, len);
    kvt_sim_engine_result_t res;
    kvt_sim_engine_core_t *e = s_engine(wl, 2, &res);
    kvt_sim_engine_out_t out;
    cr_assert_eq(kvt_sim_engine_core_start(e, &out), 0);
    cr_assert_eq(out.what, KVT_SIM_ENGINE_SCHEDULE);
    cr_assert_eq(out.schedule.step, 1);
    cr_assert_eq(out.schedule.now_us, 0);
    cr_assert_eq(out.schedule.narrivals, 2, "only the requests that arrived");
    cr_assert_eq(out.schedule.arrivals[1].req, 1);
    cr_assert_eq(out.schedule.arrivals[1].ntokens, 100);
    cr_assert_not_null(out.schedule.arrivals[1].tokens);
    //  200 tokens: 1000 + 2000 µs.
    kvt_entry_t w1[] = {s_work(0, 0, 100), s_work(1, 0, 100)};
    s_step(e, 2, w1, 2, &out);
    cr_assert_eq(out.schedule.now_us, 3000);
    cr_assert_eq(out.schedule.narrivals, 0, "request 2 arrives at 5000");
    //  Two decode tokens: 1020 µs.
    kvt_entry_t w2[] = {s_work(0, 100, 101), s_work(1, 100, 101)};
    s_step(e, 2, w2, 2, &out);
    cr_assert_eq(out.schedule.now_us, 4020);
    cr_assert_eq(out.schedule.narrivals, 0);
    //  Idle: the clock jumps to the next arrival.
    kvt_step_plan_t p = s_plan(out.schedule.step, NULL, 0, true);
    cr_assert_eq(kvt_sim_engine_core_plan(e, &p, &out), 0);
    cr_assert_eq(out.what, KVT_SIM_ENGINE_SCHEDULE);
    cr_assert_eq(out.schedule.now_us, 5000);
    cr_assert_eq(out.schedule.narrivals, 1);
    cr_assert_eq(out.schedule.arrivals[0].req, 2);
    //  Not idle but nothing ran (no room): one step's base cost, no arrival.
    p = s_plan(out.schedule.step, NULL, 0, false);
    cr_assert_eq(kvt_sim_engine_core_plan(e, &p, &out), 0);
    cr_assert_eq(out.schedule.now_us, 6000);
    cr_assert_eq(out.schedule.narrivals, 0);
    p = s_plan(out.schedule.step, NULL, 0, true);
    cr_assert_eq(kvt_sim_engine_core_plan(e, &p, &out), 0);
    cr_assert_eq(out.schedule.now_us, 2000000);
    cr_assert_eq(out.schedule.narrivals, 1);
    cr_assert_eq(kvt_sim_engine_core_clock(e), 2000000);
    kvt_sim_engine_core_destroy(&e);
    cr_assert_null(e);
    kvt_sim_engine_result_clear(&res);
    s_wl_free(wl);
}

Test(sim_engine_core, a_schedule_carries_at_most_max_arrival_bytes_but_one_request)
{
    uint64_t at[] = {0, 0, 0};
    uint32_t len[] = {300, 200, 200}; //  1200, 800, 800 bytes of token ids
    kvt_workload_t *wl = s_wl(3, at, len);
    kvt_sim_engine_result_t res;
    memset(&res, 0, sizeof res);
    kvt_sim_engine_core_cfg_t c;
    memset(&c, 0, sizeof c);
    c.wl = wl;
    c.tp = 1;
    c.max_arrival_bytes = 1000;
    kvt_sim_engine_core_t *e = kvt_sim_engine_core_new(&c, &res);
    kvt_sim_engine_out_t out;
    cr_assert_eq(kvt_sim_engine_core_start(e, &out), 0);
    cr_assert_eq(out.schedule.narrivals, 1, "one request over the bound still goes");
    kvt_step_plan_t p = s_plan(1, NULL, 0, false);
    cr_assert_eq(kvt_sim_engine_core_plan(e, &p, &out), 0);
    cr_assert_eq(out.schedule.narrivals, 1, "800 + 800 bytes exceed 1000");
    cr_assert_eq(out.schedule.arrivals[0].req, 1);
    kvt_sim_engine_core_destroy(&e);
    kvt_sim_engine_result_clear(&res);
    s_wl_free(wl);
}

Test(sim_engine_core, ttft_runs_from_arrival_to_the_end_of_the_step_that_ends_the_prompt)
{
    //  11 requests at t = 0, one prompt (100 tokens, 2000 µs) per step:
    //  request i's first token at 2000 (i + 1).
    uint64_t at[11] = {0};
    uint32_t len[11];
    for (int i = 0; i < 11; i++)
        len[i] = 100;
    kvt_workload_t *wl = s_wl(11, at, len);
    kvt_sim_engine_result_t res;
    kvt_sim_engine_core_t *e = s_engine(wl, 1, &res);
    kvt_sim_engine_out_t out;
    cr_assert_eq(kvt_sim_engine_core_start(e, &out), 0);
    cr_assert_eq(out.schedule.narrivals, 11);
    for (uint32_t i = 0; i < 11; i++) {
        //  The next request's first half of the prompt runs in the same
        //  step: it does not produce a token yet.
        kvt_entry_t w[] = {s_work(i, i ? 50 : 0, 100), s_work(i + 1, 0, 50)};
        uint32_t n = i + 1 < 11 ? 2 : 1;
        if (i == 0)
            w[0] = s_work(0, 0, 100);
        s_step(e, 1, w, n, &out);
    }
    //  Decodes do not move the first token.
    kvt_entry_t d[] = {s_work(0, 100, 101)};
    s_step(e, 1, d, 1, &out);
    kvt_step_plan_t p = s_plan(out.schedule.step, NULL, 0, true);
    cr_assert_eq(kvt_sim_engine_core_plan(e, &p, &out), 0);
    cr_assert_eq(out.what, KVT_SIM_ENGINE_STATS);
    kvt_sim_engine_core_stats_asked(e, 0, &out);
    cr_assert_eq(out.what, KVT_SIM_ENGINE_EXIT);
    cr_assert(res.done);
    //  Step costs: step 1 = 1000 + 150 tokens; steps 2..10 = 1000 + 100;
    //  step 11 = 1000 + 50. First tokens at the end of steps 1..11.
    uint64_t ft[11], t = 0;
    for (int i = 0; i < 11; i++) {
        t += i == 0 ? 2500 : i < 10 ? 2000 : 1500;
        ft[i] = t;
    }
    cr_assert(res.ttft_p50_ms == ft[5] / 1e3, "%f ms", res.ttft_p50_ms);
    cr_assert(res.ttft_p90_ms == ft[9] / 1e3, "%f ms", res.ttft_p90_ms);
    cr_assert(res.ttft_p99_ms == ft[9] / 1e3, "%f ms", res.ttft_p99_ms);
    cr_assert_eq(res.model_time_us, t + 1010);
    cr_assert_eq(res.steps, 13);
    kvt_sim_engine_core_destroy(&e);
    kvt_sim_engine_result_clear(&res);
    s_wl_free(wl);
}

Test(sim_engine_core, waits_for_exactly_one_step_done_per_rank)
{
    uint64_t at[] = {0};
    uint32_t len[] = {100};
    kvt_workload_t *wl = s_wl(1, at, len);
    kvt_sim_engine_result_t res;
    kvt_sim_engine_core_t *e = s_engine(wl, 3, &res);
    kvt_sim_engine_out_t out;
    kvt_step_done_t early = s_done(1, 0, true);
    cr_assert_eq(kvt_sim_engine_core_done(e, &early, &out), -1, "no step runs yet");
    cr_assert_eq(kvt_sim_engine_core_start(e, &out), 0);
    cr_assert_eq(kvt_sim_engine_core_start(e, &out), -1, "started twice");
    kvt_step_plan_t wrong_step = s_plan(2, NULL, 0, false);
    cr_assert_eq(kvt_sim_engine_core_plan(e, &wrong_step, &out), -1);
    cr_assert(strstr(out.note, "unexpected StepPlan") != NULL, "%s", out.note);
    kvt_entry_t w[] = {s_work(0, 0, 100)};
    kvt_step_plan_t p = s_plan(1, w, 1, false);
    cr_assert_eq(kvt_sim_engine_core_plan(e, &p, &out), 0);
    cr_assert_eq(out.what, KVT_SIM_ENGINE_EXEC);
    cr_assert_eq(out.exec.step, 1);
    cr_assert_eq(out.exec.nentries, 1);
    cr_assert_eq(kvt_sim_engine_core_plan(e, &p, &out), -1, "a plan while the step runs");
    kvt_step_done_t d0 = s_done(1, 0, true), d1 = s_done(1, 1, true), d2 = s_done(1, 2, true);
    kvt_step_done_t other = s_done(7, 1, true), beyond = s_done(1, 3, true);
    cr_assert_eq(kvt_sim_engine_core_done(e, &d0, &out), 0);
    cr_assert_eq(out.what, KVT_SIM_ENGINE_WAIT);
    cr_assert_eq(kvt_sim_engine_core_done(e, &d0, &out), -1, "rank 0 answered twice");
    cr_assert(strstr(out.note, "unexpected StepDone") != NULL, "%s", out.note);
    cr_assert_eq(kvt_sim_engine_core_done(e, &other, &out), -1, "another step");
    cr_assert_eq(kvt_sim_engine_core_done(e, &beyond, &out), -1, "no rank 3");
    cr_assert_eq(kvt_sim_engine_core_done(e, &d1, &out), 0);
    cr_assert_eq(out.what, KVT_SIM_ENGINE_WAIT, "rank 2 has not answered");
    cr_assert_eq(kvt_sim_engine_core_done(e, &d2, &out), 0);
    cr_assert_eq(out.what, KVT_SIM_ENGINE_SCHEDULE);
    cr_assert_eq(out.schedule.step, 2);
    cr_assert_eq(kvt_sim_engine_core_done(e, &d2, &out), -1, "the step is over");
    kvt_sim_engine_core_destroy(&e);
    kvt_sim_engine_result_clear(&res);
    s_wl_free(wl);
}

Test(sim_engine_core, a_failed_step_is_rolled_back_and_a_wrong_resume_counts_once)
{
    uint64_t at[] = {0, 0};
    uint32_t len[] = {100, 100};
    kvt_workload_t *wl = s_wl(2, at, len);
    kvt_sim_engine_result_t res;
    kvt_sim_engine_core_t *e = s_engine(wl, 2, &res);
    kvt_sim_engine_out_t out;
    cr_assert_eq(kvt_sim_engine_core_start(e, &out), 0);
    kvt_entry_t w[] = {s_work(1, 0, 100)};
    kvt_step_plan_t p = s_plan(1, w, 1, false);
    cr_assert_eq(kvt_sim_engine_core_plan(e, &p, &out), 0);
    uint64_t wrong[] = {1};
    kvt_step_done_t d0 = s_done(1, 0, false), d1 = s_done(1, 1, true);
    d0.wrong = wrong;
    d0.nwrong = 1;
    d1.wrong = wrong;
    d1.nwrong = 1;
    cr_assert_eq(kvt_sim_engine_core_done(e, &d0, &out), 0);
    cr_assert_eq(kvt_sim_engine_core_done(e, &d1, &out), 0);
    cr_assert_eq(out.what, KVT_SIM_ENGINE_SCHEDULE);
    cr_assert(out.schedule.prev_failed, "rank 0 failed step 1");
    cr_assert_eq(res.steps_failed, 1);
    cr_assert_eq(res.wrong_resumes, 1, "both ranks name request 1: one wrong resume");
    s_step(e, 2, w, 1, &out);
    cr_assert(!out.schedule.prev_failed, "step 2 ran on every rank");
    cr_assert_eq(res.wrong_resumes, 1);
    kvt_sim_engine_core_destroy(&e);
    kvt_sim_engine_result_clear(&res);
    s_wl_free(wl);
}

Test(sim_engine_core, counts_events_and_exits_after_the_last_stats_reply)
{
    uint64_t at[] = {0, 0};
    uint32_t len[] = {600, 600};
    kvt_workload_t *wl = s_wl(2, at, len);
    kvt_sim_engine_result_t res;
    kvt_sim_engine_core_t *e = s_engine(wl, 1, &res);
    kvt_sim_engine_out_t out;
    cr_assert_eq(kvt_sim_engine_core_start(e, &out), 0);
    kvt_event_t ev[] = {
        {{0, 1}, KVT_EV_ADMIT, 256, 0, 600},  {{1, 1}, KVT_EV_ADMIT, 512, 256, 600},
        {{1, 1}, KVT_EV_LOADED, 512, 256, 0}, {{0, 1}, KVT_EV_FINISH, 600, 4, 0},
        {{1, 1}, KVT_EV_FINISH, 600, 4, 0},
    };
    kvt_step_plan_t p = s_plan(1, NULL, 0, true);
    p.events = ev;
    p.nevents = 5;
    cr_assert_eq(kvt_sim_engine_core_plan(e, &p, &out), 0);
    cr_assert_eq(out.what, KVT_SIM_ENGINE_STATS, "idle, every request arrived and ended");
    cr_assert_eq(out.note[0], 0, "%s", out.note);
    cr_assert_eq(res.hbm_hit_tokens, 768);
    cr_assert_eq(res.tier_hit_tokens, 256);
    cr_assert_eq(res.loads_ok, 1);
    cr_assert_eq(res.finished, 2);
    cr_assert_eq(res.input_tokens, 1200);
    kvt_sim_engine_core_stats_asked(e, 2, &out);
    cr_assert_eq(out.what, KVT_SIM_ENGINE_WAIT);
    kvt_stats_t st;
    memset(&st, 0, sizeof st);
    kvt_counter_t c[] = {{"x.one", 1}};
    st.counters = c;
    st.ncounters = 1;
    st.request = true;
    cr_assert_eq(kvt_sim_engine_core_stats(e, &st, &out), 0);
    cr_assert_eq(out.what, KVT_SIM_ENGINE_WAIT, "a request is not a reply");
    st.request = false;
    strcpy(st.from, "a");
    cr_assert_eq(kvt_sim_engine_core_stats(e, &st, &out), 0);
    cr_assert_eq(out.what, KVT_SIM_ENGINE_WAIT, "one of two replies");
    cr_assert(!res.done);
    strcpy(st.from, "b");
    cr_assert_eq(kvt_sim_engine_core_stats(e, &st, &out), 0);
    cr_assert_eq(out.what, KVT_SIM_ENGINE_EXIT);
    cr_assert(res.done);
    cr_assert_eq(res.ncounters, 2);
    cr_assert_str_eq(res.counters[1].actor, "b");
    kvt_sim_engine_core_destroy(&e);
    kvt_sim_engine_result_clear(&res);
    s_wl_free(wl);
}

Test(cost, attention_grows_with_context_and_decode_reads_its_kv)
{
    kvt_cost_cfg_t c;
    s_linear_cost(&c);
    c.attn_ps = 1000; //  1 ns per token per context token
    c.hbm_GBps = 1;   //  1 byte per ns
    c.kv_token_bytes = 10;
    kvt_cost_work_t w0, w1, d;
    memset(&w0, 0, sizeof w0);
    memset(&w1, 0, sizeof w1);
    memset(&d, 0, sizeof d);
    kvt_cost_work_add(&w0, 0, 256, 10000);
    kvt_cost_work_add(&w1, 8192, 8448, 10000);
    //  Same tokens, 8192 more context each: 256 x 8192 ns more.
    cr_assert_eq(kvt_cost_step_ns(&c, &w1) - kvt_cost_step_ns(&c, &w0), 256ull * 8192);
    //  256 tokens at 10 µs, pairs 256 x 257 / 2 at 1 ns, 1 ms fixed.
    cr_assert_eq(kvt_cost_step_ns(&c, &w0), 1000000 + 2560000 + 256 * 257 / 2);
    //  A decode token at context 1000 reads 1000 tokens' KV: 10,000 ns.
    kvt_cost_work_add(&d, 1000, 1001, 1000);
    cr_assert_eq(d.decode_ctx, 1000);
    cr_assert_eq(kvt_cost_step_ns(&c, &d), 1000000 + 10000 + 1001 + 10000);
}

Test(cost, a_cpu_hit_a_disk_hit_and_a_recompute_each_cost_their_own)
{
    kvt_cost_cfg_t c;
    kvt_cost_defaults(&c, "dense", 2);
    cr_assert(c.kv_token_bytes == 73728, "Qwen3-8B at TP 2: %f", c.kv_token_bytes);
    //  4096 tokens: over the link at 51 GB/s plus its latency; from disk
    //  the disk read comes first.
    uint64_t cpu = kvt_cost_load_ns(&c, 4096, 0, 0);
    uint64_t disk = kvt_cost_load_ns(&c, 4096, 4096, 0);
    double bytes = 4096.0 * 73728;
    cr_assert_eq(cpu, (uint64_t)(20000 + bytes / 51 + 0.5));
    cr_assert_eq(disk, (uint64_t)(20000 + bytes / 51 + 100000 + bytes / 3.6 + 0.5));
    kvt_cost_work_t w;
    memset(&w, 0, sizeof w);
    //  Recomputing them 32k tokens into a prompt: the attention over that
    //  context makes even the disk read cheaper.
    kvt_cost_work_add(&w, 32768, 36864, 65536);
    uint64_t recompute = kvt_cost_step_ns(&c, &w) - (uint64_t)(c.step_us * 1e3);
    cr_assert(cpu < disk && disk < recompute, "cpu %llu disk %llu recompute %llu",
              (unsigned long long)cpu, (unsigned long long)disk, (unsigned long long)recompute);
    cr_assert_eq(kvt_cost_load_ns(&c, 0, 0, 0), 0, "nothing to copy costs nothing");
    kvt_cost_defaults(&c, "qwen3-next-like", 2);
    cr_assert_gt(kvt_cost_load_ns(&c, 256, 0, 1), kvt_cost_load_ns(&c, 256, 0, 0),
                 "a state image adds its bytes");
    char err[128];
    cr_assert_eq(kvt_cost_set(&c, "h2d_GBps=25", err, sizeof err), 0, "%s", err);
    cr_assert(c.h2d_GBps == 25);
    cr_assert_neq(kvt_cost_set(&c, "h2d_GBps=", err, sizeof err), 0);
    cr_assert_neq(kvt_cost_set(&c, "nope=1", err, sizeof err), 0);
}

//  A request restored from the CPU tier gets its first token one step after
//  its copy ended: the copy time is what the hit costs. Another request in
//  the same step is not delayed.
Test(sim_engine_core, a_load_delays_the_first_token_of_its_request_by_the_copy_time)
{
    uint64_t at[] = {0, 0};
    uint32_t len[] = {1024, 100};
    kvt_workload_t *wl = s_wl(2, at, len);
    kvt_sim_engine_result_t res;
    kvt_sim_engine_core_cfg_t c;
    memset(&c, 0, sizeof c);
    c.wl = wl;
    c.tp = 1;
    s_linear_cost(&c.cost);
    c.cost.kv_token_bytes = 1000;
    c.cost.h2d_GBps = 0.1; //  768 tokens x 1000 B at 0.1 B/ns: 7.68 ms
    c.cost.h2d_lat_us = 20;
    memset(&res, 0, sizeof res);
    kvt_sim_engine_core_t *e = kvt_sim_engine_core_new(&c, &res);
    kvt_sim_engine_out_t out;
    cr_assert_eq(kvt_sim_engine_core_start(e, &out), 0);
    //  Step 1 (t = 0): the load of [0, 768) goes out; request 1 prefills.
    kvt_load_spec_t ld;
    memset(&ld, 0, sizeof ld);
    ld.op.req = 0;
    ld.op.gen = 1;
    ld.start = 0;
    ld.end = 768;
    kvt_entry_t w1[] = {s_work(1, 0, 50)};
    kvt_step_plan_t p = s_plan(1, w1, 1, false);
    p.loads = &ld;
    p.nloads = 1;
    cr_assert_eq(kvt_sim_engine_core_plan(e, &p, &out), 0, "%s", out.note);
    kvt_step_done_t d = s_done(1, 0, true);
    cr_assert_eq(kvt_sim_engine_core_done(e, &d, &out), 0);
    cr_assert_eq(out.schedule.now_us, 1500, "1000 + 50 x 10 µs");
    //  Step 2 (t = 1500): the verdict; the tail [768, 1024) and the rest of
    //  request 1 run: 1000 + 306 x 10 = 4060 µs, ending at 5560. The copy
    //  ended at 20 + 7680 = 7700, so request 0's first token comes at
    //  7700 + 4060; request 1's at the step's end.
    kvt_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.op = ld.op;
    ev.type = KVT_EV_LOADED;
    ev.a = 768;
    ev.b = 768;
    kvt_entry_t w2[] = {s_work(0, 768, 1024), s_work(1, 50, 100)};
    p = s_plan(2, w2, 2, false);
    p.events = &ev;
    p.nevents = 1;
    cr_assert_eq(kvt_sim_engine_core_plan(e, &p, &out), 0, "%s", out.note);
    d = s_done(2, 0, true);
    cr_assert_eq(kvt_sim_engine_core_done(e, &d, &out), 0);
    p = s_plan(3, NULL, 0, true);
    cr_assert_eq(kvt_sim_engine_core_plan(e, &p, &out), 0);
    kvt_sim_engine_core_stats_asked(e, 0, &out);
    cr_assert(res.done);
    cr_assert(res.ttft_p50_ms == 5.56, "request 1 is not delayed: %f", res.ttft_p50_ms);
    cr_assert_eq(res.load_copy_us, 7700);
    cr_assert_eq(res.load_wait_us, 7700 + 4060 - 5560, "request 0 waited for its copy");
    kvt_sim_engine_core_destroy(&e);
    kvt_sim_engine_result_clear(&res);
    s_wl_free(wl);
}

//  The drain ends at the last first token: a long decode after it is the
//  request's own service time, not a queue, so it is not saturation.
Test(sim_engine_core, a_long_decode_after_the_last_first_token_is_not_saturation)
{
    uint64_t at[] = {0};
    uint32_t len[] = {100};
    kvt_workload_t *wl = s_wl(1, at, len);
    kvt_sim_engine_result_t res;
    kvt_sim_engine_core_t *e = s_engine(wl, 1, &res);
    kvt_sim_engine_out_t out;
    cr_assert_eq(kvt_sim_engine_core_start(e, &out), 0);
    kvt_entry_t w[] = {s_work(0, 0, 100)};
    s_step(e, 1, w, 1, &out);
    //  12,000 decode steps of 1,010 µs: the run ends 12 s after its arrival.
    for (uint32_t k = 0; k < 12000; k++) {
        kvt_entry_t d[] = {s_work(0, 100 + k, 101 + k)};
        s_step(e, 1, d, 1, &out);
    }
    kvt_step_plan_t p = s_plan(out.schedule.step, NULL, 0, true);
    cr_assert_eq(kvt_sim_engine_core_plan(e, &p, &out), 0);
    kvt_sim_engine_core_stats_asked(e, 0, &out);
    cr_assert(res.done);
    cr_assert_gt(res.model_time_us, 12000000);
    cr_assert_eq(res.drain_us, 2000, "up to the first token: %llu",
                 (unsigned long long)res.drain_us);
    cr_assert(!res.saturated);
    kvt_sim_engine_core_destroy(&e);
    kvt_sim_engine_result_clear(&res);
    s_wl_free(wl);
}

//  The instances a saturated run is told to try: enough for 60 % of the
//  span, always more than it had, at most 64.
Test(sim_engine_core, a_saturated_run_is_told_how_many_instances_to_try)
{
    //  220 s of steps over a 102 s span: 220 / 61.2 -> 4.
    cr_assert_eq(kvt_sim_engine_instances_for(220000000, 102000000, 1), 4);
    cr_assert_eq(kvt_sim_engine_instances_for(220000000, 102000000, 8), 9, "more than it had");
    cr_assert_eq(kvt_sim_engine_instances_for(220000000, 0, 3), 4, "no span: one more");
    cr_assert_eq(kvt_sim_engine_instances_for(UINT64_MAX / 2, 1000000, 1), 64);
}

Test(sim_engine_core, a_run_that_ends_long_after_its_last_arrival_is_saturated)
{
    cr_assert(!kvt_sim_engine_saturated(9000000, 0), "under 10 s of drain");
    cr_assert(!kvt_sim_engine_saturated(50000000, 1000000000), "under a tenth of the span");
    cr_assert(kvt_sim_engine_saturated(150000000, 1000000000));
    //  One request at t = 0 whose prompt takes 20 s: the drain is 20 s.
    uint64_t at[] = {0};
    uint32_t len[] = {2000000};
    kvt_workload_t *wl = s_wl(1, at, len);
    kvt_sim_engine_result_t res;
    kvt_sim_engine_core_t *e = s_engine(wl, 1, &res);
    kvt_sim_engine_out_t out;
    cr_assert_eq(kvt_sim_engine_core_start(e, &out), 0);
    kvt_entry_t w[] = {s_work(0, 0, 2000000)};
    s_step(e, 1, w, 1, &out);
    kvt_step_plan_t p = s_plan(out.schedule.step, NULL, 0, true);
    cr_assert_eq(kvt_sim_engine_core_plan(e, &p, &out), 0);
    kvt_sim_engine_core_stats_asked(e, 0, &out);
    cr_assert(res.done);
    cr_assert_eq(res.busy_us, 1000 + 20000000);
    cr_assert(res.utilisation == 1.0, "%f", res.utilisation);
    cr_assert_eq(res.drain_us, 20001000);
    cr_assert(res.saturated);
    kvt_sim_engine_core_destroy(&e);
    kvt_sim_engine_result_clear(&res);
    s_wl_free(wl);
}

//  Forward progress (kvtier chaos): max_stall_us is the longest modelled
//  stretch of plans that ran, loaded and saved nothing while the scheduler
//  was not idle; a plan with work ends a stretch, an idle one is no stall.
Test(sim_engine_core, max_stall_is_the_longest_stretch_of_plans_without_work)
{
    uint64_t at[] = {0, 0};
    uint32_t len[] = {100, 100};
    kvt_workload_t *wl = s_wl(2, at, len);
    kvt_sim_engine_result_t res;
    kvt_sim_engine_core_t *e = s_engine(wl, 1, &res);
    kvt_sim_engine_out_t out;
    cr_assert_eq(kvt_sim_engine_core_start(e, &out), 0);
    kvt_entry_t w[] = {s_work(0, 0, 100)};
    s_step(e, 1, w, 1, &out);
    cr_assert_eq(res.max_stall_us, 0, "a plan with work is no stall");
    //  Three plans without work, 1000 µs each: 2000 µs from the first to the last.
    for (int i = 0; i < 3; i++) {
        kvt_step_plan_t p = s_plan(out.schedule.step, NULL, 0, false);
        cr_assert_eq(kvt_sim_engine_core_plan(e, &p, &out), 0, "%s", out.note);
    }
    cr_assert_eq(res.max_stall_us, 2000);
    s_step(e, 1, w, 1, &out);
    //  A shorter stretch after work leaves the longest one.
    for (int i = 0; i < 2; i++) {
        kvt_step_plan_t p = s_plan(out.schedule.step, NULL, 0, false);
        cr_assert_eq(kvt_sim_engine_core_plan(e, &p, &out), 0, "%s", out.note);
    }
    cr_assert_eq(res.max_stall_us, 2000);
    kvt_sim_engine_core_destroy(&e);
    kvt_sim_engine_result_clear(&res);
    s_wl_free(wl);
}
