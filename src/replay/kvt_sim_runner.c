/*  kvt_runner — see kvt_runner.h. */
#include "kvt_sim_runner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/common/kvt_counters.h"
#include "replay/kvt_oracle.h"

typedef struct {
    kvt_sim_runner_args_t a;  //  configuration (borrowed pointers)
    kvt_aid_t engine;         //  engine id
    kvt_aid_t worker;         //  worker id
    uint64_t *wrong;          //  scratch: requests with wrong restored bytes this step
    uint32_t wrong_cap;       //  allocated
    uint64_t blocks_written;  //  counter: blocks written by forwards
    uint64_t blocks_verified; //  counter: restored blocks checked
    uint64_t blocks_wrong;    //  counter: restored blocks whose bytes were wrong
    uint64_t steps;           //  counter: steps run
    uint64_t steps_failed;    //  counter: steps that could not run
    uint64_t resumes;         //  resumed entries seen in steps that ran
    uint64_t faults;          //  counter: testing faults injected
} s_runner_t;

//  Where a restored block's bytes first differ from the oracle's.
typedef struct {
    uint32_t block; //  device block
    uint32_t plane; //  plane
    uint32_t layer; //  layer
    size_t offset;  //  first wrong byte in the block's bytes of (plane, layer)
} s_where_t;

//  Checks one block against the oracle; false on any wrong byte (or a
//  block the device does not have), with where the first one is.
static bool s_verify_block(s_runner_t *self, uint32_t block, kvt_hash_t hash, s_where_t *where)
{
    for (uint32_t p = 0; p < self->a.planes; p++)
        for (uint32_t l = 0; l < self->a.layers; l++) {
            const void *ptr = kvt_gpu_plane_ptr(self->a.gpu, p, l, block);
            size_t n = self->a.plane_block_bytes[p];
            size_t at = ptr ? kvt_oracle_mismatch(ptr, n, hash, l, p, self->a.rank) : 0;
            if (!ptr || at < n) {
                *where = (s_where_t){block, p, l, at};
                return false;
            }
        }
    return true;
}

static bool s_write_block(s_runner_t *self, uint32_t block, kvt_hash_t hash)
{
    for (uint32_t p = 0; p < self->a.planes; p++)
        for (uint32_t l = 0; l < self->a.layers; l++) {
            void *ptr = kvt_gpu_plane_ptr(self->a.gpu, p, l, block);
            if (!ptr)
                return false;
            kvt_oracle_fill(ptr, self->a.plane_block_bytes[p], hash, l, p, self->a.rank);
        }
    return true;
}

//  The testing fault: flips one byte of a restored block (see the header).
static uint8_t *s_corrupt(s_runner_t *self, uint32_t block)
{
    uint32_t p = self->a.planes - 1;
    uint8_t *ptr = kvt_gpu_plane_ptr(self->a.gpu, p, self->a.layers - 1, block);
    if (!ptr)
        return NULL;
    ptr += self->a.plane_block_bytes[p] / 2;
    *ptr ^= 0x01;
    self->faults++;
    return ptr;
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

//  Checks an entry's shape against the geometry before anything is written:
//  its blocks must cover exactly [first_block * bs, end), exist on the
//  device, and include every block to verify. NULL or what was wrong.
static const char *s_check_entry(s_runner_t *self, const kvt_entry_t *en)
{
    uint32_t bs = self->a.block_size;
    uint64_t last = (en->end - 1) / bs;
    if (en->first_block > last || en->nblocks != last - en->first_block + 1)
        return "blocks do not cover [first_block, end)";
    if (en->verify_end > 0 && (en->first_block != 0 || en->verify_end / bs > en->nblocks))
        return "verify range not covered by the blocks";
    uint32_t nb = kvt_gpu_num_blocks(self->a.gpu);
    for (uint32_t i = 0; i < en->nblocks; i++)
        if (en->blocks[i] >= nb)
            return "block id beyond the device's blocks";
    return NULL;
}

static int s_on_exec(kvt_ctx_t *ctx, void *selfp, kvt_aid_t from, kvt_msg_t *msg)
{
    s_runner_t *self = selfp;
    const kvt_step_exec_t *x = &msg->u.step_exec;
    uint32_t bs = self->a.block_size;
    uint32_t written = 0, verified = 0, nwrong = 0;
    bool ok = x->rank == self->a.rank;
    if (!ok)
        kvt_ctx_log(ctx, 0, "StepExec for rank %u delivered to rank %u: not run", x->rank,
                    self->a.rank);
    for (uint32_t e = 0; ok && e < x->nentries; e++) {
        const char *bad = s_check_entry(self, &x->entries[e]);
        if (bad) {
            kvt_ctx_log(ctx, 0, "step %llu refused: entry %u (request %llu): %s",
                        (unsigned long long)x->step, e, (unsigned long long)x->entries[e].op.req,
                        bad);
            ok = false;
        }
    }

    //  Loads and saves always go to the worker, even when the forward does
    //  not run: each owes exactly one report, and the worker drops a spec it
    //  has already seen. Loads start before the forward; their blocks belong
    //  to parked requests that no entry of this step touches.
    s_forward(ctx, self, KVT_MSG_LOAD_SPEC, x->loads, x->nloads);

    for (uint32_t e = 0; ok && e < x->nentries; e++) {
        const kvt_entry_t *en = &x->entries[e];
        if (en->verify_end > 0) {
            //  The oracle check: every restored block, before the forward.
            bool good = true;
            s_where_t where = {0, 0, 0, 0}, here;
            uint32_t nverify = en->verify_end / bs;
            uint8_t *flipped = NULL;
            if (++self->resumes == self->a.corrupt_resume && nverify > 0)
                flipped = s_corrupt(self, en->blocks[nverify - 1]);
            for (uint32_t b = 0; b < nverify; b++) {
                verified++;
                bool zero = kvt_hash_is_zero(en->hashes[b]);
                if (zero || !s_verify_block(self, en->blocks[b], en->hashes[b], &here)) {
                    if (good)
                        where = zero ? (s_where_t){en->blocks[b], 0, 0, 0} : here;
                    good = false;
                    self->blocks_wrong++;
                }
            }
            if (flipped)
                *flipped ^= 0x01;
            if (!good) {
                if (nwrong == self->wrong_cap) {
                    uint32_t cap = self->wrong_cap ? self->wrong_cap * 2 : 16;
                    uint64_t *w = realloc(self->wrong, cap * sizeof(uint64_t));
                    if (w) {
                        self->wrong = w;
                        self->wrong_cap = cap;
                    }
                }
                if (nwrong < self->wrong_cap && nwrong < KVT_MSG_MAX_ENTRIES)
                    self->wrong[nwrong++] = en->op.req;
                kvt_ctx_log(ctx, 0,
                            "WRONG RESUME: request %llu has restored bytes that differ "
                            "from a recompute (rank %u, first at block %u plane %u layer %u "
                            "byte %zu)",
                            (unsigned long long)en->op.req, self->a.rank, where.block, where.plane,
                            where.layer, where.offset);
            }
        }
        //  The forward: blocks that become full in this step get their bytes.
        for (uint32_t i = 0; i < en->nblocks; i++) {
            uint32_t b = en->first_block + i;
            if (kvt_hash_is_zero(en->hashes[i]) || (b + 1) * bs <= en->start)
                continue;
            if (!s_write_block(self, en->blocks[i], en->hashes[i])) {
                ok = false;
                break;
            }
            written++;
        }
    }
    if (!ok)
        self->steps_failed++;
    else
        self->steps++;
    //  Saves read blocks completed by earlier steps.
    s_forward(ctx, self, KVT_MSG_SAVE_SPEC, x->saves, x->nsaves);
    self->blocks_written += written;
    self->blocks_verified += verified;

    kvt_msg_t m;
    memset(&m, 0, sizeof m);
    m.kind = KVT_MSG_STEP_DONE;
    m.u.step_done.step = x->step;
    m.u.step_done.rank = self->a.rank;
    m.u.step_done.ok = ok;
    m.u.step_done.blocks_written = written;
    m.u.step_done.blocks_verified = verified;
    m.u.step_done.wrong = self->wrong;
    m.u.step_done.nwrong = nwrong;
    m.u.step_done.detail = ok ? KVT_DETAIL_OK : KVT_DETAIL_INVALID;
    return kvt_ctx_send(ctx, self->engine, &m);
}

static int s_on_stats(kvt_ctx_t *ctx, void *selfp, kvt_aid_t from, kvt_msg_t *msg)
{
    s_runner_t *self = selfp;
    if (!msg->u.stats.request)
        return 0;
    kvt_counter_t c[6];
    uint32_t n = 0;
    kvt_counter_add(c, &n, 6, "runner.steps", self->steps);
    kvt_counter_add(c, &n, 6, "runner.steps_failed", self->steps_failed);
    kvt_counter_add(c, &n, 6, "runner.blocks_written", self->blocks_written);
    kvt_counter_add(c, &n, 6, "runner.blocks_verified", self->blocks_verified);
    kvt_counter_add(c, &n, 6, "runner.blocks_wrong", self->blocks_wrong);
    kvt_counter_add(c, &n, 6, "runner.faults_injected", self->faults);
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
    return self;
}

static void s_stop(kvt_ctx_t *ctx, void *selfp)
{
    s_runner_t *self = selfp;
    free(self->wrong);
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
