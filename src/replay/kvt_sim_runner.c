/*  kvt_sim_runner — see kvt_sim_runner.h. */
#include "kvt_sim_runner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/common/kvt_counters.h"

#define S_TIMER_FORWARD 1 //  timer tag: look whether the pending forward landed

typedef struct {
    kvt_sim_runner_args_t a;     //  configuration (borrowed pointers)
    kvt_aid_t engine;            //  engine id
    kvt_aid_t worker;            //  worker id
    kvt_gpu_stream_t *compute;   //  the rank's compute stream (the forward's)
    kvt_sim_runner_core_t *core; //  the step logic
    uint64_t timer;              //  the armed forward timer (0 = none)
} s_runner_t;

static void *s_block(void *gpu, uint32_t plane, uint32_t layer, uint32_t block)
{
    return kvt_gpu_plane_ptr(gpu, plane, layer, block);
}

static void *s_state(void *gpu, kvt_gpu_state_pool_t pool, uint32_t index)
{
    return kvt_gpu_state_ptr(gpu, pool, index);
}

static void s_forward(kvt_ctx_t *ctx, s_runner_t *self, kvt_msg_kind_t kind,
                      const kvt_load_spec_t *specs, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        kvt_msg_t m;
        memset(&m, 0, sizeof m);
        m.kind = kind;
        m.u.load_spec = specs[i];
        if (kvt_ctx_send(ctx, self->worker, &m) != 0)
            kvt_ctx_log(ctx, 0, "cannot forward %s to the worker", kvt_msg_kind_name(kind));
    }
}

//  Logs what the step found and sends its StepDone.
static int s_answer(kvt_ctx_t *ctx, s_runner_t *self, const kvt_sim_runner_out_t *out)
{
    if (out->refused)
        kvt_ctx_log(ctx, 0, "step %llu refused: %s", (unsigned long long)out->done.step,
                    out->refused);
    for (uint32_t i = 0; i < out->done.nwrong; i++) {
        const kvt_sim_runner_wrong_t *w = &out->where[i];
        static const char *const at[] = {"a restored state", "a checkpoint taken with a state",
                                         "a saved image with a state", "ended with a state"};
        static const char *const unit[] = {"state slot", "checkpoint unit", "checkpoint unit",
                                           "state slot"};
        if (w->plane == KVT_RUNNER_STATE && w->check <= KVT_RUNNER_AT_END)
            kvt_ctx_log(ctx, 0,
                        "WRONG RESUME: request %llu has %s that differs from a recompute "
                        "(rank %u, %s %u byte %zu)",
                        (unsigned long long)w->req, at[w->check], self->a.rank, unit[w->check],
                        w->block, w->offset);
        else
            kvt_ctx_log(ctx, 0,
                        "WRONG RESUME: request %llu has %s that differ from a recompute (rank "
                        "%u, first at block %u plane %u layer %u byte %zu)",
                        (unsigned long long)w->req,
                        w->check == KVT_RUNNER_AT_SAVE  ? "KV in a chunk it saves"
                        : w->check == KVT_RUNNER_AT_END ? "KV at its end"
                                                        : "restored bytes",
                        self->a.rank, w->block, w->plane, w->layer, w->offset);
    }
    kvt_msg_t m;
    memset(&m, 0, sizeof m);
    m.kind = KVT_MSG_STEP_DONE;
    m.u.step_done = out->done;
    return kvt_ctx_send(ctx, self->engine, &m);
}

//  Answers the pending step if its forward ended, else arms the timer for
//  when it should have.
static int s_settle(kvt_ctx_t *ctx, s_runner_t *self)
{
    kvt_sim_runner_out_t out;
    if (kvt_sim_runner_core_poll(self->core, &out))
        return s_answer(ctx, self, &out);
    uint64_t now = kvt_ctx_now(ctx);
    uint64_t at = kvt_sim_runner_core_wake(self->core, now, self->a.poll_ns);
    self->timer = kvt_ctx_timer(ctx, at > now ? at - now : 0, S_TIMER_FORWARD);
    if (!self->timer) {
        kvt_ctx_log(ctx, 0, "runner: cannot arm the forward timer");
        return -1;
    }
    return 0;
}

static int s_on_exec(kvt_ctx_t *ctx, void *selfp, kvt_aid_t from, kvt_msg_t *msg)
{
    s_runner_t *self = selfp;
    const kvt_step_exec_t *x = &msg->u.step_exec;
    if (self->a.fault_producer_step && x->step == self->a.fault_producer_step && self->a.board)
        kvt_fence_board_fail_next(self->a.board, 1);
    //  The scheduler's tier lookups, releases and touches go to the worker
    //  as they are, before the step's loads (a load may use a lookup's pin).
    for (uint32_t i = 0; i < x->nlookups + x->nlookup_releases + x->ntouches; i++) {
        kvt_msg_t m;
        memset(&m, 0, sizeof m);
        if (i < x->nlookups) {
            m.kind = KVT_MSG_LOOKUP;
            m.u.lookup = x->lookups[i];
        } else if (i < x->nlookups + x->nlookup_releases) {
            m.kind = KVT_MSG_LOOKUP_RELEASE;
            m.u.lookup_release = x->lookup_releases[i - x->nlookups];
        } else {
            m.kind = KVT_MSG_TOUCH;
            m.u.touch = x->touches[i - x->nlookups - x->nlookup_releases];
        }
        if (kvt_ctx_send(ctx, self->worker, &m) != 0)
            kvt_ctx_log(ctx, 0, "cannot forward %s to the worker", kvt_msg_kind_name(m.kind));
    }
    kvt_sim_runner_out_t out;
    kvt_sim_runner_core_exec(self->core, x, &out);
    s_forward(ctx, self, KVT_MSG_LOAD_SPEC, out.loads, out.nloads);
    s_forward(ctx, self, KVT_MSG_SAVE_SPEC, out.saves, out.nsaves);
    if (out.producer_failed)
        kvt_ctx_log(ctx, 1,
                    "step %llu: its producer event could not be recorded: its %u saves go out "
                    "refused, its %u loads as usual",
                    (unsigned long long)x->step, out.nsaves, out.nloads);
    //  A step refused while another ran is answered now; the running one
    //  keeps its timer.
    if (!out.pending)
        return s_answer(ctx, self, &out);
    return s_settle(ctx, self);
}

static void s_on_timer(kvt_ctx_t *ctx, void *selfp, uint64_t tag)
{
    s_runner_t *self = selfp;
    if (tag != S_TIMER_FORWARD)
        return;
    self->timer = 0;
    s_settle(ctx, self);
}

static int s_on_stats(kvt_ctx_t *ctx, void *selfp, kvt_aid_t from, kvt_msg_t *msg)
{
    s_runner_t *self = selfp;
    if (!msg->u.stats.request)
        return 0;
    const kvt_sim_runner_wrong_t *where;
    uint32_t nwrong = kvt_sim_runner_core_sweep(self->core, &where);
    for (uint32_t i = 0; i < nwrong; i++) {
        if (where[i].plane == KVT_RUNNER_STATE)
            kvt_ctx_log(ctx, 0,
                        "WRONG STATE: request %llu ended with a state that differs from a "
                        "recompute (rank %u, state slot %u byte %zu, found by the end-of-run "
                        "sweep)",
                        (unsigned long long)where[i].req, self->a.rank, where[i].block,
                        where[i].offset);
        else
            kvt_ctx_log(ctx, 0,
                        "WRONG KV: request %llu ended with KV that differs from a recompute "
                        "(rank %u, block %u plane %u layer %u byte %zu, found by the end-of-run "
                        "sweep)",
                        (unsigned long long)where[i].req, self->a.rank, where[i].block,
                        where[i].plane, where[i].layer, where[i].offset);
    }
    kvt_sim_runner_stats_t st;
    kvt_sim_runner_core_stats(self->core, &st);
    enum { S_CAP = 48 }; //  40 counters today, room for more
    kvt_counter_t c[S_CAP];
    uint32_t n = 0;
    kvt_counter_add(c, &n, S_CAP, "runner.steps", st.steps);
    kvt_counter_add(c, &n, S_CAP, "runner.steps_failed", st.steps_failed);
    kvt_counter_add(c, &n, S_CAP, "runner.blocks_written", st.blocks_written);
    kvt_counter_add(c, &n, S_CAP, "runner.blocks_verified", st.blocks_verified);
    kvt_counter_add(c, &n, S_CAP, "runner.blocks_wrong", st.blocks_wrong);
    kvt_counter_add(c, &n, S_CAP, "runner.faults_injected", st.faults_injected);
    kvt_counter_add(c, &n, S_CAP, "runner.forwards_queued", st.forwards_queued);
    kvt_counter_add(c, &n, S_CAP, "runner.producer_failures", st.producer_failures);
    kvt_counter_add(c, &n, S_CAP, "runner.device_failures", st.device_failures);
    kvt_counter_add(c, &n, S_CAP, "runner.states_written", st.states_written);
    kvt_counter_add(c, &n, S_CAP, "runner.states_verified", st.states_verified);
    kvt_counter_add(c, &n, S_CAP, "runner.states_wrong", st.states_wrong);
    kvt_counter_add(c, &n, S_CAP, "runner.states_restored", st.states_restored);
    kvt_counter_add(c, &n, S_CAP, "runner.states_taken", st.states_taken);
    kvt_counter_add(c, &n, S_CAP, "runner.slots_refused", st.slots_refused);
    kvt_counter_add(c, &n, S_CAP, "runner.states_reset", st.states_reset);
    kvt_counter_add(c, &n, S_CAP, "runner.takes_checked", st.takes_checked);
    kvt_counter_add(c, &n, S_CAP, "runner.takes_wrong", st.takes_wrong);
    kvt_counter_add(c, &n, S_CAP, "runner.images_checked", st.images_checked);
    kvt_counter_add(c, &n, S_CAP, "runner.images_wrong", st.images_wrong);
    kvt_counter_add(c, &n, S_CAP, "runner.images_by_take", st.images_by_take);
    kvt_counter_add(c, &n, S_CAP, "runner.ends_checked", st.ends_checked);
    kvt_counter_add(c, &n, S_CAP, "runner.ends_wrong", st.ends_wrong);
    kvt_counter_add(c, &n, S_CAP, "runner.sweep_checked", st.sweep_checked);
    kvt_counter_add(c, &n, S_CAP, "runner.sweep_wrong", st.sweep_wrong);
    kvt_counter_add(c, &n, S_CAP, "runner.states_untracked", st.states_untracked);
    kvt_counter_add(c, &n, S_CAP, "runner.kv_reads", st.kv_reads);
    kvt_counter_add(c, &n, S_CAP, "runner.kv_carried", st.kv_carried);
    kvt_counter_add(c, &n, S_CAP, "runner.kv_unread", st.kv_unread);
    kvt_counter_add(c, &n, S_CAP, "runner.saves_checked", st.saves_checked);
    kvt_counter_add(c, &n, S_CAP, "runner.saves_wrong", st.saves_wrong);
    kvt_counter_add(c, &n, S_CAP, "runner.kv_ends_checked", st.kv_ends_checked);
    kvt_counter_add(c, &n, S_CAP, "runner.kv_ends_wrong", st.kv_ends_wrong);
    if (self->a.board) {
        kvt_fence_board_stats_t fb;
        kvt_fence_board_stats(self->a.board, &fb);
        kvt_counter_add(c, &n, S_CAP, "fence.producers_recorded", fb.producers_recorded);
        kvt_counter_add(c, &n, S_CAP, "fence.producer_waits", fb.producer_waits);
        kvt_counter_add(c, &n, S_CAP, "fence.producer_misses", fb.producer_misses);
        kvt_counter_add(c, &n, S_CAP, "fence.compute_waits", fb.compute_waits);
        kvt_counter_add(c, &n, S_CAP, "fence.restores_recorded", fb.restores_recorded);
        kvt_counter_add(c, &n, S_CAP, "fence.restore_waits", fb.restore_waits);
        kvt_counter_add(c, &n, S_CAP, "fence.wait_failures", fb.wait_failures);
    }
    return kvt_counters_reply(ctx, from, c, n);
}

static void *s_init(kvt_ctx_t *ctx, void *args)
{
    s_runner_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->a = *(const kvt_sim_runner_args_t *)args;
    self->engine = kvt_ctx_lookup(ctx, self->a.engine);
    self->worker = kvt_ctx_lookup(ctx, self->a.worker);
    if (self->engine == KVT_AID_NONE || self->worker == KVT_AID_NONE ||
        self->a.planes > KVT_RUNNER_MAX_PLANES) {
        kvt_ctx_log(ctx, 0, "runner: bad configuration (engine '%s', worker '%s', %u planes)",
                    self->a.engine, self->a.worker, self->a.planes);
        free(self);
        return NULL;
    }
    if (!kvt_gpu_plane_ptr(self->a.gpu, 0, 0, 0)) {
        kvt_ctx_log(ctx, 0,
                    "runner: the simulated forward needs host-addressable device "
                    "memory (the host backend)");
        free(self);
        return NULL;
    }
    kvt_sim_runner_core_cfg_t cc;
    memset(&cc, 0, sizeof cc);
    cc.rank = self->a.rank;
    cc.block_size = self->a.block_size;
    cc.planes = self->a.planes;
    cc.layers = self->a.layers;
    cc.num_blocks = kvt_gpu_num_blocks(self->a.gpu);
    memcpy(cc.plane_block_bytes, self->a.plane_block_bytes, sizeof cc.plane_block_bytes);
    cc.block = s_block;
    cc.block_arg = self->a.gpu;
    cc.corrupt_resume = self->a.corrupt_resume;
    cc.corrupt_state = self->a.corrupt_state;
    cc.fault_stale_slot = self->a.fault_stale_slot;
    cc.fault_restore_late = self->a.fault_restore_late;
    cc.fault_swap_slots = self->a.fault_swap_slots;
    cc.fault_stale_block = self->a.fault_stale_block;
    if (!self->a.poll_ns)
        self->a.poll_ns = 20000;
    char name[48];
    snprintf(name, sizeof name, "compute.%u", self->a.rank);
    self->compute = kvt_gpu_stream_new(self->a.gpu, name);
    cc.gpu = self->a.gpu;
    cc.compute = self->compute;
    cc.board = self->a.board;
    cc.forward_ns = self->a.forward_ns;
    //  With state pools on the device, the forward writes and checks state.
    cc.state_slots = kvt_gpu_state_count(self->a.gpu, KVT_GPU_STATE_SLOTS);
    cc.ckpt_units = kvt_gpu_state_count(self->a.gpu, KVT_GPU_STATE_CKPT);
    cc.state_bytes = kvt_gpu_state_bytes(self->a.gpu, KVT_GPU_STATE_SLOTS);
    cc.ckpt_interval = self->a.chunk_size;
    cc.state = s_state;
    cc.state_arg = self->a.gpu;
    if (cc.ckpt_units && kvt_gpu_state_bytes(self->a.gpu, KVT_GPU_STATE_CKPT) != cc.state_bytes)
        cc.ckpt_units = 0; //  a checkpoint must hold exactly a slot's state
    self->core = self->compute ? kvt_sim_runner_core_new(&cc) : NULL;
    if (!self->core) {
        kvt_ctx_log(ctx, 0,
                    "runner: bad geometry or no compute stream (%u planes, %u layers, block size "
                    "%u, %u state slots, chunk %u): %s",
                    self->a.planes, self->a.layers, self->a.block_size, cc.state_slots,
                    self->a.chunk_size, self->compute ? "" : kvt_gpu_last_error());
        kvt_gpu_stream_destroy(&self->compute);
        free(self);
        return NULL;
    }
    return self;
}

static void s_stop(kvt_ctx_t *ctx, void *selfp)
{
    s_runner_t *self = selfp;
    //  The core lands a pending forward before it goes; then the stream.
    kvt_sim_runner_core_destroy(&self->core);
    kvt_gpu_stream_destroy(&self->compute);
    free(self);
}

const kvt_actor_class_t kvt_sim_runner_class = {
    .type = "runner",
    .init = s_init,
    .stop = s_stop,
    .on =
        {
            [KVT_MSG_STEP_EXEC] = s_on_exec,
            [KVT_MSG_STATS] = s_on_stats,
        },
    .on_timer = s_on_timer,
};
