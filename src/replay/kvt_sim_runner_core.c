/*  kvt_sim_runner_core — see kvt_sim_runner_core.h. */
#include "kvt_sim_runner_core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay/kvt_oracle.h"

struct kvt_sim_runner_core_t {
    kvt_sim_runner_core_cfg_t cfg; //  configuration
    uint64_t *wrong;               //  scratch: requests with wrong restored bytes this step
    kvt_sim_runner_wrong_t *where; //  scratch: where each one's first wrong byte is
    uint32_t wrong_cap;            //  entries allocated in wrong and where
    uint64_t resumes;              //  resumed entries seen in steps that ran
    kvt_sim_runner_stats_t st;     //  counters
    char why[160];                 //  why the last step was refused
};

kvt_sim_runner_core_t *kvt_sim_runner_core_new(const kvt_sim_runner_core_cfg_t *cfg)
{
    if (!cfg->block || cfg->planes < 1 || cfg->planes > KVT_RUNNER_MAX_PLANES || cfg->layers < 1 ||
        cfg->block_size < 1)
        return NULL;
    kvt_sim_runner_core_t *self = calloc(1, sizeof *self);
    if (self)
        self->cfg = *cfg;
    return self;
}

void kvt_sim_runner_core_destroy(kvt_sim_runner_core_t **self_p)
{
    if (!*self_p)
        return;
    free((*self_p)->wrong);
    free((*self_p)->where);
    free(*self_p);
    *self_p = NULL;
}

void kvt_sim_runner_core_stats(const kvt_sim_runner_core_t *self, kvt_sim_runner_stats_t *st)
{
    *st = self->st;
}

//  Checks one block against the oracle; false on any wrong byte (or a
//  block the device does not have), with where the first one is.
static bool s_verify_block(kvt_sim_runner_core_t *self, uint32_t block, kvt_hash_t hash,
                           kvt_sim_runner_wrong_t *where)
{
    const kvt_sim_runner_core_cfg_t *c = &self->cfg;
    for (uint32_t p = 0; p < c->planes; p++)
        for (uint32_t l = 0; l < c->layers; l++) {
            const void *ptr = c->block(c->block_arg, p, l, block);
            size_t n = c->plane_block_bytes[p];
            size_t at = ptr ? kvt_oracle_mismatch(ptr, n, hash, l, p, c->rank) : 0;
            if (!ptr || at < n) {
                where->block = block;
                where->plane = p;
                where->layer = l;
                where->offset = at;
                return false;
            }
        }
    return true;
}

static bool s_write_block(kvt_sim_runner_core_t *self, uint32_t block, kvt_hash_t hash)
{
    const kvt_sim_runner_core_cfg_t *c = &self->cfg;
    for (uint32_t p = 0; p < c->planes; p++)
        for (uint32_t l = 0; l < c->layers; l++) {
            void *ptr = c->block(c->block_arg, p, l, block);
            if (!ptr)
                return false;
            kvt_oracle_fill(ptr, c->plane_block_bytes[p], hash, l, p, c->rank);
        }
    return true;
}

//  The testing fault: flips one byte of a restored block (see the header).
static uint8_t *s_corrupt(kvt_sim_runner_core_t *self, uint32_t block)
{
    const kvt_sim_runner_core_cfg_t *c = &self->cfg;
    uint8_t *ptr = c->block(c->block_arg, c->planes - 1, c->layers - 1, block);
    if (!ptr)
        return NULL;
    ptr += c->plane_block_bytes[c->planes - 1] / 2;
    *ptr ^= 0x01;
    self->st.faults_injected++;
    return ptr;
}

//  Checks an entry's shape against the geometry before anything is written:
//  its blocks must cover exactly [first_block * bs, end), exist on the
//  device, and include every block to verify. NULL or what was wrong.
static const char *s_check_entry(const kvt_sim_runner_core_t *self, const kvt_entry_t *en)
{
    uint32_t bs = self->cfg.block_size;
    uint64_t last = (en->end - 1) / bs;
    if (en->first_block > last || en->nblocks != last - en->first_block + 1)
        return "blocks do not cover [first_block, end)";
    if (en->verify_end % bs)
        return "verify_end is not on a block boundary (a partial block cannot be checked)";
    if (en->verify_end > 0 && (en->first_block != 0 || en->verify_end / bs > en->nblocks))
        return "verify range not covered by the blocks";
    for (uint32_t i = 0; i < en->nblocks; i++)
        if (en->blocks[i] >= self->cfg.num_blocks)
            return "block id beyond the device's blocks";
    return NULL;
}

//  Records a wrong request; false when the scratch cannot grow (the
//  request is still counted in blocks_wrong).
static bool s_add_wrong(kvt_sim_runner_core_t *self, uint32_t n, const kvt_sim_runner_wrong_t *w)
{
    if (n >= KVT_MSG_MAX_ENTRIES)
        return false;
    if (n == self->wrong_cap) {
        uint32_t cap = self->wrong_cap ? self->wrong_cap * 2 : 16;
        uint64_t *wr = realloc(self->wrong, cap * sizeof *wr);
        if (wr)
            self->wrong = wr;
        kvt_sim_runner_wrong_t *wh = realloc(self->where, cap * sizeof *wh);
        if (wh)
            self->where = wh;
        if (!wr || !wh)
            return false;
        self->wrong_cap = cap;
    }
    self->wrong[n] = w->req;
    self->where[n] = *w;
    return true;
}

//  Checks a resumed entry's blocks [0, verify_end) (the testing fault
//  applies here); true when all are right, else *w says where.
static bool s_verify_entry(kvt_sim_runner_core_t *self, const kvt_entry_t *en, uint32_t *verified,
                           bool *fault, kvt_sim_runner_wrong_t *w)
{
    uint32_t nverify = en->verify_end / self->cfg.block_size;
    uint8_t *flipped = NULL;
    //  Only a resume with bytes to check counts toward the fault's N.
    if (nverify > 0 && ++self->resumes == self->cfg.corrupt_resume) {
        flipped = s_corrupt(self, en->blocks[nverify - 1]);
        *fault = flipped != NULL;
    }
    bool good = true;
    for (uint32_t b = 0; b < nverify; b++) {
        (*verified)++;
        //  A block still without a hash cannot be a restored one.
        kvt_sim_runner_wrong_t here = {en->op.req, en->blocks[b], 0, 0, 0};
        bool zero = kvt_hash_is_zero(en->hashes[b]);
        if (zero || !s_verify_block(self, en->blocks[b], en->hashes[b], &here)) {
            if (good)
                *w = here;
            good = false;
            self->st.blocks_wrong++;
        }
    }
    if (flipped)
        *flipped ^= 0x01;
    return good;
}

void kvt_sim_runner_core_exec(kvt_sim_runner_core_t *self, const kvt_step_exec_t *x,
                              kvt_sim_runner_out_t *out)
{
    uint32_t bs = self->cfg.block_size;
    uint32_t written = 0, verified = 0, nwrong = 0;
    memset(out, 0, sizeof *out);
    bool ok = x->rank == self->cfg.rank;
    if (!ok)
        snprintf(self->why, sizeof self->why, "StepExec for rank %u delivered to rank %u", x->rank,
                 self->cfg.rank);
    for (uint32_t e = 0; ok && e < x->nentries; e++) {
        const char *bad = s_check_entry(self, &x->entries[e]);
        if (bad) {
            snprintf(self->why, sizeof self->why, "entry %u (request %llu): %s", e,
                     (unsigned long long)x->entries[e].op.req, bad);
            ok = false;
        }
    }
    for (uint32_t e = 0; ok && e < x->nentries; e++) {
        const kvt_entry_t *en = &x->entries[e];
        kvt_sim_runner_wrong_t w;
        //  The oracle check: every block of a resumed request, before the
        //  forward.
        if (en->verify_end > 0 && !s_verify_entry(self, en, &verified, &out->fault_injected, &w) &&
            s_add_wrong(self, nwrong, &w))
            nwrong++;
        //  The forward: blocks that become full in this step get their bytes.
        for (uint32_t i = 0; i < en->nblocks; i++) {
            uint32_t b = en->first_block + i;
            if (kvt_hash_is_zero(en->hashes[i]) || (b + 1) * bs <= en->start)
                continue;
            if (!s_write_block(self, en->blocks[i], en->hashes[i])) {
                snprintf(self->why, sizeof self->why,
                         "entry %u (request %llu): block %u has no device memory", e,
                         (unsigned long long)en->op.req, en->blocks[i]);
                ok = false;
                break;
            }
            written++;
        }
    }
    if (ok)
        self->st.steps++;
    else
        self->st.steps_failed++;
    self->st.blocks_written += written;
    self->st.blocks_verified += verified;

    out->done.step = x->step;
    out->done.rank = self->cfg.rank;
    out->done.ok = ok;
    out->done.blocks_written = written;
    out->done.blocks_verified = verified;
    out->done.wrong = nwrong ? self->wrong : NULL;
    out->done.nwrong = nwrong;
    out->done.detail = ok ? KVT_DETAIL_OK : KVT_DETAIL_INVALID;
    out->where = nwrong ? self->where : NULL;
    out->refused = ok ? NULL : self->why;
}
