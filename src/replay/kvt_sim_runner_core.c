/*  kvt_sim_runner_core — see kvt_sim_runner_core.h. */
#include "kvt_sim_runner_core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kvt_vec.h"
#include "replay/kvt_oracle.h"

#define S_NO_SLOT UINT32_MAX //  a request without a state slot

//  What a request's state slot should hold: the state at token `at` (the
//  newest block boundary its forwards reached), named by the prefix hash
//  there (zero: the initial state). One per slot, keyed by the slot its
//  owner was admitted into; the forward carries it from chunk to chunk.
typedef struct {
    uint64_t req; //  owner request
    uint32_t gen; //  its generation
    kvt_hash_t h; //  the state the slot should hold (zero hash: initial)
    uint32_t at;  //  its token
    bool open;    //  owned: the end of its owner is not checked yet
    bool loading; //  a tier load's state leg fills it; no forward read it yet
    bool swept;   //  the sweep checked this state already
} s_rec_t;

//  A state image a step saves: its checkpoint unit must hold state(h).
typedef struct {
    uint64_t req;  //  the saving request
    uint32_t unit; //  checkpoint unit the image is read from
    kvt_hash_t h;  //  the image's key: prefix hash at its boundary
} s_image_t;

//  A KV chunk a step saves: its last block must hold the oracle bytes of
//  the chunk key (the prefix hash at the chunk's end).
typedef struct {
    uint64_t req;   //  the saving request
    uint32_t block; //  the chunk's last device block
    kvt_hash_t h;   //  the chunk key
} s_chunk_t;

//  The end of a request's KV: the last block its newest forward wrote
//  (any deviation that forward carried is in it), kept per device block
//  until the block is read as a later forward's context (which carries
//  it on), or is about to be written again by a forward or a load, or the
//  end-of-run sweep: then it must still hold the oracle bytes of its hash.
//  Which blocks hold an open end is a bitmap (kvopen: one bit per block,
//  so the test before every block write stays in cache); the record is
//  read only when its bit is set.
typedef struct {
    kvt_hash_t h; //  the block's prefix hash
    uint64_t req; //  the request whose forward wrote it
} s_kvend_t;

//  A checkpoint unit's newest take: the state it copied (its hash) and
//  whether the take's check found it right. Only a take writes a unit (the
//  runner's forward; loads fill slots, saves and restores read units), so
//  until the next take of the unit its bytes are the ones that check saw.
typedef struct {
    kvt_hash_t h; //  the taken state's hash
    bool right;   //  taken and checked right (false: none, unchecked or wrong)
} s_took_t;

//  The state and KV checks' counters of one step (folded into the stats).
typedef struct {
    uint64_t reset, takes, takes_wrong, images, images_wrong, ends, ends_wrong, untracked;
    uint64_t kv_reads, kv_carried, kv_unread, saves, saves_wrong, kv_ends, kv_ends_wrong;
    uint64_t images_by_take;
} s_checks_t;

//  The step's work, copied out of the StepExec (the forward may land after
//  the message is gone), and what the forward found. Between queueing and
//  landing only the forward touches it.
typedef struct {
    uint64_t step;            //  the step
    kvt_entry_t *entries;     //  its entries (blocks / hashes point into the arrays below)
    uint32_t nentries;        //  entries
    uint32_t entries_cap;     //  allocated entries
    uint32_t *blocks;         //  every entry's block ids
    kvt_hash_t *hashes;       //  every entry's block hashes
    size_t nb_cap;            //  allocated blocks and hashes
    bool ok;                  //  result: the forward ran to the end
    uint32_t written;         //  result: blocks written
    uint32_t verified;        //  result: restored blocks checked
    uint32_t nwrong;          //  result: requests with wrong restored bytes
    uint64_t blocks_wrong;    //  result: restored blocks that were wrong
    uint64_t states_written;  //  result: checkpoint boundaries written
    uint64_t states_verified; //  result: restored slots checked
    uint64_t states_wrong;    //  result: restored slots that were wrong
    uint64_t states_restored; //  result: checkpoint units copied into slots
    uint64_t states_taken;    //  result: slots copied into checkpoint units
    bool fault;               //  result: the testing fault flipped a byte
    char why[160];            //  result: why the forward stopped (ok false)
    s_image_t *images;        //  the step's state image saves (checked after the forward)
    uint32_t nimages;         //  how many
    uint32_t images_cap;      //  allocated images
    s_chunk_t *chunks;        //  the step's KV chunk saves (checked after the forward)
    uint32_t nchunks;         //  how many
    uint32_t chunks_cap;      //  allocated chunks
    s_checks_t chk;           //  result: the state checks' counters
} s_job_t;

struct kvt_sim_runner_core_t {
    kvt_sim_runner_core_cfg_t cfg; //  configuration
    uint64_t *wrong;               //  forward scratch: requests with wrong restored bytes
    kvt_sim_runner_wrong_t *where; //  forward scratch: where each one's first wrong byte is
    uint32_t wrong_cap;            //  entries allocated in wrong and where
    uint64_t resumes;              //  forward: resumed entries with bytes to check
    s_job_t job;                   //  the step on the device (or the last one)
    bool pending;                  //  a forward is queued and has not ended
    kvt_gpu_event_t *done_ev;      //  marks the end of the pending forward (for wake)
    uint64_t last_ok1;             //  step + 1 of the newest step with a producer event (0 none)
    kvt_load_spec_t *loads;        //  the step's loads to forward
    uint32_t loads_cap;            //  allocated loads
    kvt_save_spec_t *saves;        //  the step's saves to forward
    uint32_t saves_cap;            //  allocated saves
    uint64_t state_resumes;        //  forward: restored state slots checked (corrupt_state's N)
    s_rec_t *recs;                 //  per state slot: what it should hold (state_slots)
    s_kvend_t *kvends;             //  per device block: a request's KV end (num_blocks)
    uint64_t *kvopen;              //  per device block, one bit: its KV end is open
    uint64_t *kvdefer;             //  per device block, one bit: a load of a step refused
                                   //  while a forward ran overwrites it (closed when it ends)
    s_rec_t *defer_recs;           //  per state slot: such a load's state leg (open: one is)
    bool deferred;                 //  some bit of kvdefer or some defer_recs[i] is set
    s_took_t *took;                //  per checkpoint unit: its newest take (ckpt_units)
    uint8_t *scratch;              //  restore_late: the slot as the forward read it
    uint32_t stale_seen;           //  fault_stale_slot: forwards from 0 into a held slot
    uint32_t late_seen;            //  fault_restore_late: restores whose forward advances
    uint32_t swap_seen;            //  fault_swap_slots: steps with two advancing entries
    uint32_t swap_a, swap_b;       //  forward: entries run in each other's slot (UINT32_MAX)
    uint32_t stale_block_seen;     //  fault_stale_block: forwards that read a context block
    uint8_t *stale;                //  fault_stale_block: another prefix's bytes, as read
    kvt_sim_runner_stats_t st;     //  counters
    char why[160];                 //  why the last step was refused
};

kvt_sim_runner_core_t *kvt_sim_runner_core_new(const kvt_sim_runner_core_cfg_t *cfg)
{
    if (!cfg->block || cfg->planes < 1 || cfg->planes > KVT_RUNNER_MAX_PLANES || cfg->layers < 1 ||
        cfg->block_size < 1)
        return NULL;
    if (cfg->state_slots && (!cfg->state || !cfg->state_bytes || !cfg->ckpt_interval ||
                             cfg->ckpt_interval % cfg->block_size))
        return NULL;
    if ((cfg->compute && !cfg->gpu) || (cfg->board && !cfg->compute))
        return NULL;
    kvt_sim_runner_core_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->cfg = *cfg;
    self->swap_a = self->swap_b = UINT32_MAX;
    if (cfg->num_blocks) {
        self->kvends = calloc(cfg->num_blocks, sizeof *self->kvends);
        self->kvopen = calloc((cfg->num_blocks + 63) / 64, sizeof *self->kvopen);
        self->kvdefer = calloc((cfg->num_blocks + 63) / 64, sizeof *self->kvdefer);
        if (!self->kvends || !self->kvopen || !self->kvdefer) {
            free(self->kvends);
            free(self->kvopen);
            free(self->kvdefer);
            free(self);
            return NULL;
        }
    }
    if (cfg->fault_stale_block) {
        size_t most = 0;
        for (uint32_t p = 0; p < cfg->planes; p++)
            most = cfg->plane_block_bytes[p] > most ? cfg->plane_block_bytes[p] : most;
        if (!(self->stale = malloc(most ? most : 1))) {
            free(self->kvends);
            free(self->kvopen);
            free(self->kvdefer);
            free(self);
            return NULL;
        }
    }
    if (cfg->state_slots) {
        self->recs = calloc(cfg->state_slots, sizeof *self->recs);
        self->defer_recs = calloc(cfg->state_slots, sizeof *self->defer_recs);
        self->took = cfg->ckpt_units ? calloc(cfg->ckpt_units, sizeof *self->took) : NULL;
        self->scratch = cfg->fault_restore_late ? malloc(cfg->state_bytes) : NULL;
        if (!self->recs || !self->defer_recs || (cfg->ckpt_units && !self->took) ||
            (cfg->fault_restore_late && !self->scratch)) {
            free(self->recs);
            free(self->defer_recs);
            free(self->took);
            free(self->scratch);
            free(self->stale);
            free(self->kvends);
            free(self->kvopen);
            free(self->kvdefer);
            free(self);
            return NULL;
        }
    }
    return self;
}

void kvt_sim_runner_core_destroy(kvt_sim_runner_core_t **self_p)
{
    kvt_sim_runner_core_t *self = *self_p;
    if (!self)
        return;
    //  A queued forward reads the job: it must have run before it goes. One
    //  that waits behind a stalled stream still holds the core: it is left
    //  to it rather than freed under it.
    if (self->pending && kvt_gpu_stream_synchronize(self->cfg.compute) == KVT_GPU_NOT_READY) {
        *self_p = NULL;
        return;
    }
    kvt_gpu_event_destroy(&self->done_ev);
    free(self->job.entries);
    free(self->job.blocks);
    free(self->job.hashes);
    free(self->loads);
    free(self->saves);
    free(self->wrong);
    free(self->where);
    free(self->job.images);
    free(self->job.chunks);
    free(self->stale);
    free(self->recs);
    free(self->took);
    free(self->kvends);
    free(self->kvopen);
    free(self->kvdefer);
    free(self->defer_recs);
    free(self->scratch);
    free(self);
    *self_p = NULL;
}

void kvt_sim_runner_core_stats(const kvt_sim_runner_core_t *self, kvt_sim_runner_stats_t *st)
{
    *st = self->st;
}

bool kvt_sim_runner_core_busy(const kvt_sim_runner_core_t *self)
{
    return self->pending;
}

// ------------------------------------------------------------- the forward

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

//  XORs the carried deviation into every word of p[0..n) (the tail gets
//  its low bytes): a nonzero carry changes every full word.
static void s_carry(uint8_t *p, size_t n, uint64_t carry)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        w ^= carry;
        memcpy(p + i, &w, 8);
    }
    for (size_t k = 0; i + k < n; k++)
        p[i + k] ^= (uint8_t)(carry >> (8 * k));
}

//  Writes a block the forward computed: the oracle bytes of its prefix
//  hash with the deviation the forward read carried in (0: exactly them).
static bool s_write_block(kvt_sim_runner_core_t *self, uint32_t block, kvt_hash_t hash,
                          uint64_t carry)
{
    const kvt_sim_runner_core_cfg_t *c = &self->cfg;
    for (uint32_t p = 0; p < c->planes; p++)
        for (uint32_t l = 0; l < c->layers; l++) {
            void *ptr = c->block(c->block_arg, p, l, block);
            if (!ptr)
                return false;
            kvt_oracle_fill(ptr, c->plane_block_bytes[p], hash, l, p, c->rank);
            if (carry)
                s_carry(ptr, c->plane_block_bytes[p], carry);
        }
    return true;
}

//  Opens block b's KV end: request req's forward wrote it last, as hash h.
static void s_kv_open(kvt_sim_runner_core_t *self, uint32_t b, kvt_hash_t h, uint64_t req)
{
    self->kvends[b] = (s_kvend_t){h, req};
    self->kvopen[b / 64] |= 1ull << (b % 64);
}

//  Closes block b's KV end; true when one was open.
static bool s_kv_close(kvt_sim_runner_core_t *self, uint32_t b)
{
    uint64_t bit = 1ull << (b % 64);
    bool was = (self->kvopen[b / 64] & bit) != 0;
    self->kvopen[b / 64] &= ~bit;
    return was;
}

//  The forward's read of the entry's context block (the block just before
//  the first block it writes; the entry carries it): its deviation from
//  the oracle bytes, OR-folded over its planes and layers, 0 when right
//  or when the entry writes nothing or has no context block (a forward
//  from token 0). Testing fault fault_stale_block = N: the Nth read sees
//  another prefix's bytes (the block itself is not touched).
static uint64_t s_read_context(kvt_sim_runner_core_t *self, const kvt_entry_t *en)
{
    const kvt_sim_runner_core_cfg_t *c = &self->cfg;
    uint32_t bs = c->block_size, b0 = en->start / bs;
    if (b0 == 0 || en->end / bs <= b0)
        return 0;
    uint32_t i = b0 - 1 - en->first_block;
    if (b0 - 1 < en->first_block || i >= en->nblocks || kvt_hash_is_zero(en->hashes[i])) {
        self->job.chk.kv_unread++; //  the entry does not name its context block
        return 0;
    }
    kvt_hash_t h = en->hashes[i];
    bool stale = c->fault_stale_block && ++self->stale_block_seen == c->fault_stale_block;
    kvt_hash_t other = {h.hi, h.lo ^ 1};
    uint64_t dev = 0;
    for (uint32_t p = 0; p < c->planes; p++)
        for (uint32_t l = 0; l < c->layers; l++) {
            const void *ptr = c->block(c->block_arg, p, l, en->blocks[i]);
            size_t n = c->plane_block_bytes[p];
            if (stale) {
                kvt_oracle_fill(self->stale, n, other, l, p, c->rank);
                ptr = self->stale;
            }
            if (ptr)
                dev |= kvt_oracle_deviation(ptr, n, h, l, p, c->rank);
        }
    s_kv_close(self, en->blocks[i]); //  read: its deviation goes on in the writes
    self->job.chk.kv_reads++;
    self->job.chk.kv_carried += dev != 0;
    self->job.fault |= stale;
    return dev;
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
    return ptr;
}

//  Records a wrong request; false when the scratch cannot grow (the
//  request is still counted in blocks_wrong).
static bool s_add_wrong(kvt_sim_runner_core_t *self, uint32_t n, const kvt_sim_runner_wrong_t *w)
{
    if (n >= KVT_MSG_MAX_ENTRIES)
        return false;
    for (uint32_t i = 0; i < n; i++)
        if (self->wrong[i] == w->req)
            return false; //  one report per request per step (only on a wrong path)
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

//  Reports the state check's wrong request in the step's StepDone.
static void s_report(kvt_sim_runner_core_t *self, const kvt_sim_runner_wrong_t *w)
{
    if (s_add_wrong(self, self->job.nwrong, w))
        self->job.nwrong++;
}

//  The end of a request's KV in `block`, when one is open there and the
//  block is about to be overwritten (by a forward or a load): it must
//  still hold the oracle bytes its forward wrote, or the forward carried a
//  wrong read into it. Closes the record.
static void s_kv_end_check(kvt_sim_runner_core_t *self, uint32_t block)
{
    if (!s_kv_close(self, block))
        return;
    const s_kvend_t *k = &self->kvends[block];
    kvt_sim_runner_wrong_t w = {k->req, block, 0, 0, 0, KVT_RUNNER_AT_END};
    self->job.chk.kv_ends++;
    if (!s_verify_block(self, block, k->h, &w)) {
        self->job.chk.kv_ends_wrong++;
        s_report(self, &w);
    }
}

//  Checks a resumed entry's blocks [0, verify_end) (the testing fault
//  applies here); true when all are right, else *w says where.
static bool s_verify_entry(kvt_sim_runner_core_t *self, const kvt_entry_t *en,
                           kvt_sim_runner_wrong_t *w)
{
    s_job_t *job = &self->job;
    uint32_t nverify = en->verify_end / self->cfg.block_size;
    uint8_t *flipped = NULL;
    //  Only a resume with bytes to check counts toward the fault's N.
    if (nverify > 0 && ++self->resumes == self->cfg.corrupt_resume) {
        flipped = s_corrupt(self, en->blocks[nverify - 1]);
        job->fault = flipped != NULL;
    }
    bool good = true;
    for (uint32_t b = 0; b < nverify; b++) {
        job->verified++;
        //  A block still without a hash cannot be a restored one.
        kvt_sim_runner_wrong_t here = {en->op.req, en->blocks[b], 0, 0, 0, KVT_RUNNER_AT_RESUME};
        bool zero = kvt_hash_is_zero(en->hashes[b]);
        if (zero || !s_verify_block(self, en->blocks[b], en->hashes[b], &here)) {
            if (good)
                *w = here;
            good = false;
            job->blocks_wrong++;
        }
    }
    if (flipped)
        *flipped ^= 0x01;
    return good;
}

//  The state slot an entry names (the scheduler's), or S_NO_SLOT for an
//  entry without state work (a dense model: s_check_entry refuses one on a
//  runner with state slots).
static uint32_t s_slot(const kvt_entry_t *en)
{
    return en->state ? en->state_slot : S_NO_SLOT;
}

//  Checks a resumed entry's state slot at verify_end (on the block grid:
//  a chunk boundary or a prompt's end) against the state bytes; true when
//  right, else *w says where.
//  The testing fault corrupt_state applies here.
static bool s_verify_state(kvt_sim_runner_core_t *self, const kvt_entry_t *en, uint32_t slot,
                           kvt_sim_runner_wrong_t *w)
{
    const kvt_sim_runner_core_cfg_t *c = &self->cfg;
    uint32_t b = en->verify_end;
    if (slot == S_NO_SLOT || b == 0 || b % c->block_size)
        return true;
    self->job.states_verified++;
    kvt_hash_t h = en->hashes[b / c->block_size - 1];
    uint8_t *ptr = c->state(c->state_arg, KVT_GPU_STATE_SLOTS, slot);
    uint8_t *flipped = NULL;
    if (ptr && ++self->state_resumes == c->corrupt_state) {
        flipped = ptr + c->state_bytes / 2;
        flipped[0] ^= 0x80; //  the fault
        self->job.fault = true;
    }
    size_t at = ptr ? kvt_oracle_state_mismatch(ptr, c->state_bytes, h, c->rank) : 0;
    if (flipped)
        flipped[0] ^= 0x80; //  put back: only this check sees it
    if (ptr && at == c->state_bytes)
        return true;
    *w = (kvt_sim_runner_wrong_t){en->op.req, slot, KVT_RUNNER_STATE, 0, at, KVT_RUNNER_AT_RESUME};
    self->job.states_wrong++;
    return false;
}

//  Copies one state unit onto another (a checkpoint restore or take, in
//  the forward's stream order); false when either has no memory.
static bool s_state_copy(kvt_sim_runner_core_t *self, kvt_gpu_state_pool_t dpool, uint32_t dst,
                         kvt_gpu_state_pool_t spool, uint32_t src)
{
    const kvt_sim_runner_core_cfg_t *c = &self->cfg;
    void *d = c->state(c->state_arg, dpool, dst);
    const void *sp = c->state(c->state_arg, spool, src);
    if (!d || !sp)
        return false;
    memmove(d, sp, c->state_bytes);
    return true;
}

//  The prefix hash at token pos (on the block grid) as the entry carries
//  it: the zero hash (the initial state) at 0; false when the entry does
//  not carry that block's hash.
static bool s_hash_at(const kvt_sim_runner_core_t *self, const kvt_entry_t *en, uint32_t pos,
                      kvt_hash_t *h)
{
    *h = (kvt_hash_t){0, 0};
    if (pos == 0)
        return true;
    uint32_t i = pos / self->cfg.block_size - 1;
    if (pos % self->cfg.block_size || i < en->first_block || i - en->first_block >= en->nblocks)
        return false;
    *h = en->hashes[i - en->first_block];
    return !kvt_hash_is_zero(*h);
}

//  An entry that (re)starts its request's state: a forward from token 0,
//  a resume (its state restored or loaded at verify_end), a restore.
static bool s_is_init(const kvt_entry_t *en)
{
    return en->start == 0 || en->verify_end > 0 || en->restore_at > 0;
}

//  Where an initialising entry's state starts: token 0, the resume point,
//  or the restored checkpoint's boundary.
static uint32_t s_init_at(const kvt_entry_t *en)
{
    return en->start == 0 ? 0 : en->verify_end > 0 ? en->verify_end : en->restore_at;
}

//  Checks one state unit against state(h); true when right, else *w says
//  where (the request is rec's or the entry's).
static bool s_state_right(kvt_sim_runner_core_t *self, kvt_gpu_state_pool_t pool, uint32_t unit,
                          kvt_hash_t h, uint64_t req, uint32_t check, kvt_sim_runner_wrong_t *w)
{
    const kvt_sim_runner_core_cfg_t *c = &self->cfg;
    const void *ptr = c->state(c->state_arg, pool, unit);
    size_t at = ptr ? kvt_oracle_state_mismatch(ptr, c->state_bytes, h, c->rank) : 0;
    if (ptr && at == c->state_bytes)
        return true;
    *w = (kvt_sim_runner_wrong_t){req, unit, KVT_RUNNER_STATE, 0, at, check};
    return false;
}

//  The end of the slot's previous owner, seen when another request (or a
//  new admission of it) takes the slot: the slot must still hold the state
//  its owner's last forward left. Skipped when a load filled it and no
//  forward read it (a load that failed leaves undefined bytes), or the
//  sweep checked that state already. Closes the record.
static void s_end_check(kvt_sim_runner_core_t *self, uint32_t slot, kvt_opid_t taker)
{
    s_rec_t *rec = &self->recs[slot];
    if (!rec->open || (rec->req == taker.req && rec->gen == taker.gen))
        return;
    rec->open = false;
    if (rec->loading || rec->swept)
        return;
    kvt_sim_runner_wrong_t w;
    self->job.chk.ends++;
    if (!s_state_right(self, KVT_GPU_STATE_SLOTS, slot, rec->h, rec->req, KVT_RUNNER_AT_END, &w)) {
        self->job.chk.ends_wrong++;
        s_report(self, &w);
    }
}

//  The record a continuing entry's state starts from: its slot's when the
//  request owns it, else (it runs in a slot it was not admitted into) the
//  one of the slot it owns, found by a scan (never on a correct run's
//  path); NULL when it owns none.
static s_rec_t *s_rec_of(kvt_sim_runner_core_t *self, uint32_t slot, kvt_opid_t op)
{
    s_rec_t *rec = &self->recs[slot];
    if (rec->open && rec->req == op.req && rec->gen == op.gen)
        return rec;
    for (uint32_t i = 0; i < self->cfg.state_slots; i++) {
        rec = &self->recs[i];
        if (rec->open && rec->req == op.req && rec->gen == op.gen)
            return rec;
    }
    return NULL;
}

//  The engine's part before a forward from token 0: the slot is reset to
//  the initial state. Testing fault fault_stale_slot = N: the Nth such
//  forward into a slot that holds another state keeps that state.
static void s_reset_slot(kvt_sim_runner_core_t *self, uint32_t slot)
{
    const kvt_sim_runner_core_cfg_t *c = &self->cfg;
    uint8_t *sp = c->state(c->state_arg, KVT_GPU_STATE_SLOTS, slot);
    if (!sp)
        return;
    kvt_hash_t initial = {0, 0};
    if (c->fault_stale_slot &&
        kvt_oracle_state_mismatch(sp, c->state_bytes, initial, c->rank) < c->state_bytes &&
        ++self->stale_seen == c->fault_stale_slot) {
        self->job.fault = true;
        return;
    }
    memset(sp, 0, c->state_bytes);
    self->job.chk.reset++;
}

//  The forward's state work for an entry (after its KV writes): from the
//  state the slot held at the chunk's start (as `read` holds it), the
//  state at the newest block boundary the chunk reaches, by the oracle's
//  recurrence, so a wrong state read stays wrong; then the checkpoint the
//  scheduler named (take_unit) is taken from the slot and checked.
static void s_state_forward(kvt_sim_runner_core_t *self, const kvt_entry_t *en, uint32_t slot,
                            const uint8_t *read)
{
    const kvt_sim_runner_core_cfg_t *c = &self->cfg;
    s_job_t *job = &self->job;
    if (slot == S_NO_SLOT)
        return;
    uint8_t *sp = c->state(c->state_arg, KVT_GPU_STATE_SLOTS, slot);
    uint32_t pb = en->end / c->block_size * c->block_size;
    kvt_hash_t hb = {0, 0};
    bool known_b = s_hash_at(self, en, pb, &hb);
    s_rec_t *rec = NULL;
    if (s_is_init(en)) {
        kvt_hash_t ha;
        uint32_t pa = s_init_at(en);
        bool known = s_hash_at(self, en, pa, &ha);
        rec = &self->recs[slot];
        *rec = (s_rec_t){en->op.req, en->op.gen, ha, pa, known, false, false};
        if (!known)
            rec = NULL;
    } else {
        rec = s_rec_of(self, slot, en->op);
    }
    size_t right = SIZE_MAX; //  the advance's own check of what it wrote (SIZE_MAX: none)
    if (sp && known_b && pb > 0 && (!rec || pb > rec->at)) {
        if (rec) {
            right =
                kvt_oracle_state_advance(sp, read ? read : sp, c->state_bytes, rec->h, hb, c->rank);
            rec->h = hb;
            rec->at = pb;
            rec->swept = false;
        } else {
            //  No record of where this request's state was: it cannot be
            //  carried (counted; never on a replay's path).
            kvt_oracle_state_fill(sp, c->state_bytes, hb, c->rank);
            job->chk.untracked++;
        }
        job->states_written++;
    }
    if (rec)
        rec->loading = false;
    if (en->take_at > 0 &&
        s_state_copy(self, KVT_GPU_STATE_CKPT, en->take_unit, KVT_GPU_STATE_SLOTS, slot))
        job->states_taken++;
    else
        return;
    s_took_t *took = self->took ? &self->took[en->take_unit] : NULL;
    if (took)
        took->right = false; //  rewritten: known again once checked below
    //  The checkpoint taken holds the slot's bytes: when the advance just
    //  wrote them for this boundary it compared them already.
    kvt_hash_t ht;
    kvt_sim_runner_wrong_t w;
    if (!s_hash_at(self, en, en->take_at, &ht))
        return;
    job->chk.takes++;
    bool good;
    if (right != SIZE_MAX && en->take_at == pb) {
        good = right == c->state_bytes;
        w = (kvt_sim_runner_wrong_t){en->op.req, en->take_unit, KVT_RUNNER_STATE,
                                     0,          right,         KVT_RUNNER_AT_TAKE};
    } else {
        good = s_state_right(self, KVT_GPU_STATE_CKPT, en->take_unit, ht, en->op.req,
                             KVT_RUNNER_AT_TAKE, &w);
    }
    if (took)
        *took = (s_took_t){ht, good};
    if (!good) {
        job->chk.takes_wrong++;
        s_report(self, &w);
    }
}

//  The state images the step saves: each checkpoint unit read must hold
//  its image's state (checked after the step's takes, before the step's
//  producer event releases the saves). A unit whose newest take was of the
//  image's state and checked right still holds exactly those bytes (no
//  other write reaches a unit): that check stands for the image's (counted
//  images_by_take, no second pass over the unit). Any other image (a unit
//  taken since for another state, never taken, or taken wrong) is compared
//  byte by byte.
static void s_check_images(kvt_sim_runner_core_t *self)
{
    s_job_t *job = &self->job;
    for (uint32_t i = 0; i < job->nimages; i++) {
        kvt_sim_runner_wrong_t w;
        job->chk.images++;
        const s_took_t *t = self->took ? &self->took[job->images[i].unit] : NULL;
        if (t && t->right && kvt_hash_eq(t->h, job->images[i].h)) {
            job->chk.images_by_take++;
            continue;
        }
        if (!s_state_right(self, KVT_GPU_STATE_CKPT, job->images[i].unit, job->images[i].h,
                           job->images[i].req, KVT_RUNNER_AT_IMAGE, &w)) {
            job->chk.images_wrong++;
            s_report(self, &w);
        }
    }
}

//  The KV chunks the step saves: each one's last block must hold the
//  oracle bytes of its key (a forward's carried deviation reaches every
//  block after it, so the chunk's last block shows any in the chunk).
static void s_check_chunks(kvt_sim_runner_core_t *self)
{
    s_job_t *job = &self->job;
    for (uint32_t i = 0; i < job->nchunks; i++) {
        const s_chunk_t *ch = &job->chunks[i];
        kvt_sim_runner_wrong_t w = {ch->req, ch->block, 0, 0, 0, KVT_RUNNER_AT_SAVE};
        job->chk.saves++;
        if (!s_verify_block(self, ch->block, ch->h, &w)) {
            job->chk.saves_wrong++;
            s_report(self, &w);
        }
    }
}

//  Testing fault fault_swap_slots = N: picks the first two entries of the
//  Nth step that has two continuing entries advancing their state.
static void s_pick_swap(kvt_sim_runner_core_t *self)
{
    s_job_t *job = &self->job;
    uint32_t bs = self->cfg.block_size;
    self->swap_a = self->swap_b = UINT32_MAX;
    if (!self->cfg.fault_swap_slots || self->swap_seen >= self->cfg.fault_swap_slots)
        return;
    uint32_t a = UINT32_MAX;
    for (uint32_t e = 0; e < job->nentries; e++) {
        const kvt_entry_t *en = &job->entries[e];
        if (!en->state || s_is_init(en) || en->end / bs == en->start / bs)
            continue;
        if (a == UINT32_MAX) {
            a = e;
            continue;
        }
        if (++self->swap_seen == self->cfg.fault_swap_slots) {
            self->swap_a = a;
            self->swap_b = e;
            job->fault = true;
        }
        return;
    }
}

//  The slot entry e runs in: the one it names, but for the swap fault.
static uint32_t s_slot_of(const kvt_sim_runner_core_t *self, uint32_t e)
{
    const kvt_entry_t *en = &self->job.entries[e];
    if (e == self->swap_a)
        return s_slot(&self->job.entries[self->swap_b]);
    if (e == self->swap_b)
        return s_slot(&self->job.entries[self->swap_a]);
    return s_slot(en);
}

//  The forward over the job: the oracle check of every resumed entry, then
//  its writes. Runs inside exec, or on the compute stream when it lands.
static void s_forward(kvt_sim_runner_core_t *self)
{
    s_job_t *job = &self->job;
    const kvt_sim_runner_core_cfg_t *c = &self->cfg;
    uint32_t bs = c->block_size;
    job->ok = true;
    s_pick_swap(self);
    for (uint32_t e = 0; job->ok && e < job->nentries; e++) {
        const kvt_entry_t *en = &job->entries[e];
        kvt_sim_runner_wrong_t w;
        uint32_t slot = s_slot_of(self, e);
        const uint8_t *read = NULL; //  the slot as the forward reads it (NULL: in place)
        if (slot != S_NO_SLOT && s_is_init(en)) {
            s_end_check(self, slot, en->op);
            if (en->start == 0)
                s_reset_slot(self, slot);
        }
        //  The scheduler's checkpoint restore lands before the check (and,
        //  but for the restore_late fault, before the forward reads it).
        if (en->state && en->restore_at > 0 && slot != S_NO_SLOT) {
            uint8_t *sp = c->state(c->state_arg, KVT_GPU_STATE_SLOTS, slot);
            const uint8_t *up = c->state(c->state_arg, KVT_GPU_STATE_CKPT, en->restore_unit);
            if (c->fault_restore_late && sp && up && en->end / bs * bs > s_init_at(en) &&
                memcmp(sp, up, c->state_bytes) != 0 && ++self->late_seen == c->fault_restore_late) {
                memcpy(self->scratch, sp, c->state_bytes);
                read = self->scratch;
                job->fault = true;
            }
            if (s_state_copy(self, KVT_GPU_STATE_SLOTS, slot, KVT_GPU_STATE_CKPT, en->restore_unit))
                job->states_restored++;
        }
        if (en->verify_end > 0) {
            bool good = s_verify_entry(self, en, &w);
            if (good)
                good = s_verify_state(self, en, slot, &w);
            if (!good && s_add_wrong(self, job->nwrong, &w))
                job->nwrong++;
        }
        //  Blocks that become full in this step get their bytes, carrying
        //  what the forward read before them.
        uint64_t carry = s_read_context(self, en);
        uint32_t last = UINT32_MAX; //  the last block written (the entry's KV end)
        for (uint32_t i = 0; i < en->nblocks; i++) {
            uint32_t b = en->first_block + i;
            if (kvt_hash_is_zero(en->hashes[i]) || (b + 1) * bs <= en->start)
                continue;
            s_kv_end_check(self, en->blocks[i]);
            if (!s_write_block(self, en->blocks[i], en->hashes[i], carry)) {
                snprintf(job->why, sizeof job->why,
                         "entry %u (request %llu): block %u has no device memory", e,
                         (unsigned long long)en->op.req, en->blocks[i]);
                job->ok = false;
                break;
            }
            job->written++;
            last = i;
        }
        if (last != UINT32_MAX)
            s_kv_open(self, en->blocks[last], en->hashes[last], en->op.req);
        if (job->ok)
            s_state_forward(self, en, slot, read);
    }
    if (job->ok) {
        s_check_images(self);
        s_check_chunks(self);
    }
}

static void s_forward_fn(void *arg)
{
    s_forward(arg);
}

// ------------------------------------------------------------------- exec

//  Checks an entry's shape against the geometry before anything is written:
//  its blocks must cover exactly [first_block * bs, end), exist on the
//  device, and include every block to verify; on a runner with state
//  slots it must name a slot the device has (*slot_bad when that is what
//  was wrong). NULL or what was wrong.
static const char *s_check_entry(const kvt_sim_runner_core_t *self, const kvt_entry_t *en,
                                 bool *slot_bad)
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
    //  The forward uses exactly the slot the scheduler names: an entry of
    //  a model with state must name one the device has.
    *slot_bad = true;
    if (self->cfg.state_slots && !en->state)
        return "no state slot (the model has recurrent state: the entry must name its slot)";
    if (en->state && en->state_slot >= self->cfg.state_slots)
        return "state_slot beyond the device's state slots";
    *slot_bad = false;
    if (en->state && en->restore_at > 0 && en->restore_unit >= self->cfg.ckpt_units)
        return "restore_unit beyond the device's checkpoint units";
    if (en->state && en->take_at > 0 && en->take_unit >= self->cfg.ckpt_units)
        return "take_unit beyond the device's checkpoint units";
    return NULL;
}

//  Copies the step's entries into the job (they outlive the message).
static bool s_job_copy(kvt_sim_runner_core_t *self, const kvt_step_exec_t *x)
{
    s_job_t *job = &self->job;
    size_t nb = 0;
    for (uint32_t e = 0; e < x->nentries; e++)
        nb += x->entries[e].nblocks;
    if (x->nentries > job->entries_cap) {
        kvt_entry_t *en = realloc(job->entries, x->nentries * sizeof *en);
        if (!en)
            return false;
        job->entries = en;
        job->entries_cap = x->nentries;
    }
    if (nb > job->nb_cap) {
        uint32_t *b = realloc(job->blocks, nb * sizeof *b);
        if (b)
            job->blocks = b;
        kvt_hash_t *h = realloc(job->hashes, nb * sizeof *h);
        if (h)
            job->hashes = h;
        if (!b || !h)
            return false;
        job->nb_cap = nb;
    }
    size_t at = 0;
    for (uint32_t e = 0; e < x->nentries; e++) {
        const kvt_entry_t *src = &x->entries[e];
        kvt_entry_t *dst = &job->entries[e];
        *dst = *src;
        dst->blocks = job->blocks + at;
        dst->hashes = job->hashes + at;
        memcpy(dst->blocks, src->blocks, src->nblocks * sizeof *src->blocks);
        memcpy(dst->hashes, src->hashes, src->nblocks * sizeof *src->hashes);
        at += src->nblocks;
    }
    job->nentries = x->nentries;
    job->nimages = 0;
    job->nchunks = 0;
    for (uint32_t i = 0; i < x->nsaves; i++) {
        const kvt_save_spec_t *sv = &x->saves[i];
        if (!sv->nkeys || sv->nblocks % sv->nkeys)
            continue;
        uint32_t per = sv->nblocks / sv->nkeys;
        for (uint32_t k = 0; per && k < sv->nkeys; k++) {
            uint32_t block = sv->blocks[(k + 1) * per - 1];
            if (block >= self->cfg.num_blocks)
                continue;
            if (kvt_vec_reserve((void **)&job->chunks, &job->chunks_cap, job->nchunks + 1,
                                sizeof *job->chunks) != 0)
                return false;
            job->chunks[job->nchunks++] = (s_chunk_t){sv->op.req, block, sv->keys[k]};
        }
    }
    for (uint32_t i = 0; self->cfg.ckpt_units && i < x->nsaves; i++) {
        const kvt_save_spec_t *sv = &x->saves[i];
        if (!sv->image || sv->state_slot >= self->cfg.ckpt_units)
            continue;
        if (kvt_vec_reserve((void **)&job->images, &job->images_cap, job->nimages + 1,
                            sizeof *job->images) != 0)
            return false;
        job->images[job->nimages++] = (s_image_t){sv->op.req, sv->state_slot, sv->state_hash};
    }
    return true;
}

//  A tier load's state leg takes its slot: with `check` (a step that runs)
//  the end of the slot's previous owner is checked now (nothing writes the
//  slot before the load goes out), and the slot then holds the image's
//  state, once the load lands. Not while a forward runs (it owns the
//  records).
static void s_loads_take_slots(kvt_sim_runner_core_t *self, const kvt_step_exec_t *x, bool check)
{
    //  Their KV destinations likewise: a request's KV end there is checked
    //  before the load overwrites it. While a forward runs (a step refused
    //  for it) the records are its: the loads' are kept for when it ends
    //  (kvt_sim_runner_core_poll), unchecked (by then the load may be
    //  writing its destination).
    for (uint32_t i = 0; i < x->nloads; i++)
        for (uint32_t j = 0; j < x->loads[i].nblocks; j++) {
            uint32_t b = x->loads[i].blocks[j];
            if (b >= self->cfg.num_blocks)
                continue;
            if (self->pending) {
                self->kvdefer[b / 64] |= 1ull << (b % 64);
                self->deferred = true;
                continue;
            }
            if (check)
                s_kv_end_check(self, b);
            s_kv_close(self, b);
        }
    for (uint32_t i = 0; self->cfg.state_slots && i < x->nloads; i++) {
        const kvt_load_spec_t *ld = &x->loads[i];
        if (!ld->state || ld->state_slot >= self->cfg.state_slots)
            continue;
        s_rec_t rec = {ld->op.req, ld->op.gen, ld->state_hash, ld->state_boundary,
                       true,       true,       false};
        if (self->pending) {
            self->defer_recs[ld->state_slot] = rec;
            self->deferred = true;
            continue;
        }
        if (check)
            s_end_check(self, ld->state_slot, ld->op);
        self->recs[ld->state_slot] = rec;
    }
}

//  The forward ended: the records of what loads of steps refused while it
//  ran overwrite become theirs (KV ends closed, the state legs' records
//  set), as they would have at once had no forward run.
static void s_undefer(kvt_sim_runner_core_t *self)
{
    if (!self->deferred)
        return;
    self->deferred = false;
    for (uint32_t w = 0; w < (self->cfg.num_blocks + 63) / 64; w++) {
        self->kvopen[w] &= ~self->kvdefer[w];
        self->kvdefer[w] = 0;
    }
    for (uint32_t i = 0; i < self->cfg.state_slots; i++)
        if (self->defer_recs[i].open) {
            self->recs[i] = self->defer_recs[i];
            self->defer_recs[i].open = false;
        }
}

//  The step's loads and saves as they go out (shallow copies of the specs:
//  their arrays stay the StepExec's).
static bool s_specs(kvt_sim_runner_core_t *self, const kvt_step_exec_t *x)
{
    if (x->nloads > self->loads_cap) {
        kvt_load_spec_t *l = realloc(self->loads, x->nloads * sizeof *l);
        if (!l)
            return false;
        self->loads = l;
        self->loads_cap = x->nloads;
    }
    if (x->nsaves > self->saves_cap) {
        kvt_save_spec_t *s = realloc(self->saves, x->nsaves * sizeof *s);
        if (!s)
            return false;
        self->saves = s;
        self->saves_cap = x->nsaves;
    }
    if (x->nloads)
        memcpy(self->loads, x->loads, x->nloads * sizeof *self->loads);
    if (x->nsaves)
        memcpy(self->saves, x->saves, x->nsaves * sizeof *self->saves);
    return true;
}

//  Sets the fences of the step's specs: loads wait for the newest recorded
//  compute; saves for the step's producer (or are refused without one).
static void s_fence_specs(kvt_sim_runner_core_t *self, const kvt_step_exec_t *x,
                          kvt_sim_runner_out_t *out, uint64_t load_after, uint64_t producer,
                          bool failed)
{
    for (uint32_t i = 0; i < x->nloads; i++)
        self->loads[i].after = load_after;
    for (uint32_t i = 0; i < x->nsaves; i++) {
        self->saves[i].producer = failed ? 0 : producer;
        self->saves[i].producer_failed = failed;
    }
    out->loads = x->nloads ? self->loads : NULL;
    out->nloads = x->nloads;
    out->saves = x->nsaves ? self->saves : NULL;
    out->nsaves = x->nsaves;
    out->producer_failed = failed;
    if (failed)
        self->st.producer_failures++;
}

//  Fills the StepDone of a step that ended with `detail` (OK: it ran),
//  folding what its forward found (job) into the counters.
static void s_finish(kvt_sim_runner_core_t *self, const s_job_t *job, uint64_t step,
                     uint32_t detail, const char *why, kvt_sim_runner_out_t *out)
{
    bool ok = detail == KVT_DETAIL_OK;
    if (ok)
        self->st.steps++;
    else
        self->st.steps_failed++;
    self->st.blocks_written += job->written;
    self->st.blocks_verified += job->verified;
    self->st.blocks_wrong += job->blocks_wrong;
    self->st.states_written += job->states_written;
    self->st.states_verified += job->states_verified;
    self->st.states_wrong += job->states_wrong;
    self->st.states_restored += job->states_restored;
    self->st.states_taken += job->states_taken;
    self->st.states_reset += job->chk.reset;
    self->st.takes_checked += job->chk.takes;
    self->st.takes_wrong += job->chk.takes_wrong;
    self->st.images_checked += job->chk.images;
    self->st.images_wrong += job->chk.images_wrong;
    self->st.ends_checked += job->chk.ends;
    self->st.ends_wrong += job->chk.ends_wrong;
    self->st.states_untracked += job->chk.untracked;
    self->st.kv_reads += job->chk.kv_reads;
    self->st.kv_carried += job->chk.kv_carried;
    self->st.kv_unread += job->chk.kv_unread;
    self->st.saves_checked += job->chk.saves;
    self->st.saves_wrong += job->chk.saves_wrong;
    self->st.kv_ends_checked += job->chk.kv_ends;
    self->st.images_by_take += job->chk.images_by_take;
    self->st.kv_ends_wrong += job->chk.kv_ends_wrong;
    if (job->fault)
        self->st.faults_injected++;
    out->pending = false;
    out->done.step = step;
    out->done.rank = self->cfg.rank;
    out->done.ok = ok;
    out->done.blocks_written = job->written;
    out->done.blocks_verified = job->verified;
    out->done.wrong = job->nwrong ? self->wrong : NULL;
    out->done.nwrong = job->nwrong;
    out->done.detail = detail;
    out->where = job->nwrong ? self->where : NULL;
    out->refused = ok ? NULL : why;
    out->fault_injected = job->fault;
}

static void s_job_reset(s_job_t *job, uint64_t step)
{
    job->step = step;
    job->nentries = 0;
    job->ok = false;
    job->written = job->verified = job->nwrong = 0;
    job->blocks_wrong = job->states_written = job->states_verified = job->states_wrong = 0;
    job->states_restored = job->states_taken = 0;
    job->nimages = 0;
    job->nchunks = 0;
    memset(&job->chk, 0, sizeof job->chk);
    job->fault = false;
    job->why[0] = 0;
}

//  Marks the end of the queued forward on done_ev (replaced when out of
//  re-records); false when it cannot (wake then polls).
static bool s_mark_done(kvt_sim_runner_core_t *self)
{
    for (int tries = 0; tries < 2; tries++) {
        if (!self->done_ev && !(self->done_ev = kvt_gpu_event_new(self->cfg.gpu)))
            return false;
        int rc = kvt_gpu_event_record(self->done_ev, self->cfg.compute);
        if (rc == 0)
            return true;
        kvt_gpu_event_destroy(&self->done_ev);
        if (rc != KVT_GPU_ELIMIT)
            return false;
    }
    return false;
}

void kvt_sim_runner_core_exec(kvt_sim_runner_core_t *self, const kvt_step_exec_t *x,
                              kvt_sim_runner_out_t *out)
{
    const kvt_sim_runner_core_cfg_t *c = &self->cfg;
    const s_job_t none = {0}; //  what a step that did not run found
    memset(out, 0, sizeof *out);
    //  Loads wait for the newest recorded compute (this step's forward
    //  touches no parked request's blocks); without a board, nothing.
    uint64_t after = c->board ? self->last_ok1 : 0;
    bool ok = x->rank == c->rank;
    if (!ok)
        snprintf(self->why, sizeof self->why, "StepExec for rank %u delivered to rank %u", x->rank,
                 c->rank);
    if (ok && self->pending) {
        snprintf(self->why, sizeof self->why,
                 "StepExec for step %llu while step %llu still runs on the device",
                 (unsigned long long)x->step, (unsigned long long)self->job.step);
        ok = false;
    }
    for (uint32_t e = 0; ok && e < x->nentries; e++) {
        bool slot_bad = false;
        const char *bad = s_check_entry(self, &x->entries[e], &slot_bad);
        if (bad) {
            snprintf(self->why, sizeof self->why, "entry %u (request %llu): %s", e,
                     (unsigned long long)x->entries[e].op.req, bad);
            ok = false;
            if (slot_bad)
                self->st.slots_refused++;
        }
    }
    if (!s_specs(self, x)) {
        //  Out of memory for the specs: the worker sees none of them.
        snprintf(self->why, sizeof self->why, "out of memory for the step's specs");
        s_finish(self, &none, x->step, KVT_DETAIL_INVALID, self->why, out);
        return;
    }
    if (ok) {
        s_job_reset(&self->job, x->step);
        if (!s_job_copy(self, x)) {
            snprintf(self->why, sizeof self->why, "out of memory for the step's work");
            ok = false;
        }
    }
    s_loads_take_slots(self, x, ok);
    if (!ok) {
        //  Nothing ran: its saves read blocks of earlier forwards, which
        //  the newest recorded producer covers.
        s_fence_specs(self, x, out, after, after, false);
        s_finish(self, &none, x->step, KVT_DETAIL_INVALID, self->why, out);
        return;
    }
    if (!c->compute) {
        s_forward(self);
        s_fence_specs(self, x, out, 0, 0, false);
        s_finish(self, &self->job, x->step, self->job.ok ? KVT_DETAIL_OK : KVT_DETAIL_INVALID,
                 self->job.why, out);
        return;
    }
    //  The forward reads what the loads restored: wait for them on the device.
    int rc = c->board ? kvt_fence_board_wait_restores(c->board, c->compute) : 0;
    if (rc == 0)
        rc = kvt_gpu_launch_host_fn(c->compute, s_forward_fn, self, c->forward_ns);
    if (rc != 0) {
        snprintf(self->why, sizeof self->why, "the forward was refused on the device: %s",
                 kvt_gpu_strerror(rc));
        self->st.device_failures++;
        s_fence_specs(self, x, out, after, 0, c->board != NULL);
        s_finish(self, &none, x->step, KVT_DETAIL_IO, self->why, out);
        return;
    }
    self->pending = true;
    self->st.forwards_queued++;
    s_mark_done(self);
    bool failed = false;
    if (c->board) {
        failed = kvt_fence_board_record_producer(c->board, x->step, c->compute) != 0;
        if (failed)
            //  No event answers for this step's compute: let none stay
            //  running, so the newest recorded event still covers every
            //  compute a later load could race.
            kvt_gpu_stream_synchronize(c->compute);
        else
            self->last_ok1 = x->step + 1;
    }
    s_fence_specs(self, x, out, after, c->board ? x->step + 1 : 0, failed);
    out->pending = true;
}

bool kvt_sim_runner_core_poll(kvt_sim_runner_core_t *self, kvt_sim_runner_out_t *out)
{
    if (!self->pending)
        return false;
    int rc = kvt_gpu_stream_query(self->cfg.compute);
    if (rc == KVT_GPU_NOT_READY)
        return false;
    self->pending = false;
    s_undefer(self);
    memset(out, 0, sizeof *out);
    s_job_t *job = &self->job;
    uint32_t detail = job->ok ? KVT_DETAIL_OK : KVT_DETAIL_INVALID;
    if (rc != 0) {
        snprintf(job->why, sizeof job->why, "the forward failed on the device: %s",
                 kvt_gpu_strerror(rc));
        detail = KVT_DETAIL_IO;
        self->st.device_failures++;
    }
    s_finish(self, job, job->step, detail, job->why, out);
    return true;
}

uint64_t kvt_sim_runner_core_wake(kvt_sim_runner_core_t *self, uint64_t now_ns, uint64_t poll_ns)
{
    if (!self->pending)
        return now_ns;
    if (!self->done_ev)
        return now_ns + poll_ns;
    return kvt_gpu_event_wake(self->done_ev, now_ns, poll_ns);
}

uint32_t kvt_sim_runner_core_sweep(kvt_sim_runner_core_t *self,
                                   const kvt_sim_runner_wrong_t **where)
{
    uint32_t n = 0;
    *where = NULL;
    for (uint32_t i = 0; !self->pending && i < self->cfg.state_slots; i++) {
        s_rec_t *rec = &self->recs[i];
        if (!rec->open || rec->loading || rec->swept)
            continue;
        rec->swept = true;
        self->st.sweep_checked++;
        kvt_sim_runner_wrong_t w;
        if (s_state_right(self, KVT_GPU_STATE_SLOTS, i, rec->h, rec->req, KVT_RUNNER_AT_SWEEP, &w))
            continue;
        self->st.sweep_wrong++;
        if (s_add_wrong(self, n, &w))
            n++;
    }
    //  Every request's KV end nothing has read or overwritten since.
    for (uint32_t b = 0; !self->pending && b < self->cfg.num_blocks; b++) {
        if (!self->kvopen[b / 64]) {
            b |= 63; //  a word of blocks with no open end
            continue;
        }
        if (!s_kv_close(self, b))
            continue;
        const s_kvend_t *k = &self->kvends[b];
        self->st.sweep_checked++;
        kvt_sim_runner_wrong_t w = {k->req, b, 0, 0, 0, KVT_RUNNER_AT_SWEEP};
        if (s_verify_block(self, b, k->h, &w))
            continue;
        self->st.sweep_wrong++;
        if (s_add_wrong(self, n, &w))
            n++;
    }
    *where = n ? self->where : NULL;
    return n;
}
