/*  kvt_sim_runner — see kvt_sim_runner.h. */
#include "kvt_sim_runner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/common/kvt_counters.h"

typedef struct {
    kvt_sim_runner_args_t a;     //  configuration (borrowed pointers)
    kvt_aid_t engine;            //  engine id
    kvt_aid_t worker;            //  worker id
    kvt_sim_runner_core_t *core; //  the step logic
} s_runner_t;

static void *s_block(void *gpu, uint32_t plane, uint32_t layer, uint32_t block)
{
    return kvt_gpu_plane_ptr(gpu, plane, layer, block);
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

static int s_on_exec(kvt_ctx_t *ctx, void *selfp, kvt_aid_t from, kvt_msg_t *msg)
{
    s_runner_t *self = selfp;
    const kvt_step_exec_t *x = &msg->u.step_exec;
    s_forward(ctx, self, KVT_MSG_LOAD_SPEC, x->loads, x->nloads);
    kvt_sim_runner_out_t out;
    kvt_sim_runner_core_exec(self->core, x, &out);
    s_forward(ctx, self, KVT_MSG_SAVE_SPEC, x->saves, x->nsaves);
    if (out.refused)
        kvt_ctx_log(ctx, 0, "step %llu refused: %s", (unsigned long long)x->step, out.refused);
    for (uint32_t i = 0; i < out.done.nwrong; i++) {
        const kvt_sim_runner_wrong_t *w = &out.where[i];
        kvt_ctx_log(ctx, 0,
                    "WRONG RESUME: request %llu has restored bytes that differ from a recompute "
                    "(rank %u, first at block %u plane %u layer %u byte %zu)",
                    (unsigned long long)w->req, self->a.rank, w->block, w->plane, w->layer,
                    w->offset);
    }
    kvt_msg_t m;
    memset(&m, 0, sizeof m);
    m.kind = KVT_MSG_STEP_DONE;
    m.u.step_done = out.done;
    return kvt_ctx_send(ctx, self->engine, &m);
}

static int s_on_stats(kvt_ctx_t *ctx, void *selfp, kvt_aid_t from, kvt_msg_t *msg)
{
    s_runner_t *self = selfp;
    if (!msg->u.stats.request)
        return 0;
    kvt_sim_runner_stats_t st;
    kvt_sim_runner_core_stats(self->core, &st);
    kvt_counter_t c[6];
    uint32_t n = 0;
    kvt_counter_add(c, &n, 6, "runner.steps", st.steps);
    kvt_counter_add(c, &n, 6, "runner.steps_failed", st.steps_failed);
    kvt_counter_add(c, &n, 6, "runner.blocks_written", st.blocks_written);
    kvt_counter_add(c, &n, 6, "runner.blocks_verified", st.blocks_verified);
    kvt_counter_add(c, &n, 6, "runner.blocks_wrong", st.blocks_wrong);
    kvt_counter_add(c, &n, 6, "runner.faults_injected", st.faults_injected);
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
    self->core = kvt_sim_runner_core_new(&cc);
    if (!self->core) {
        kvt_ctx_log(ctx, 0, "runner: bad geometry (%u planes, %u layers, block size %u)",
                    self->a.planes, self->a.layers, self->a.block_size);
        free(self);
        return NULL;
    }
    return self;
}

static void s_stop(kvt_ctx_t *ctx, void *selfp)
{
    s_runner_t *self = selfp;
    kvt_sim_runner_core_destroy(&self->core);
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
};
