/*  kvt_sched — see kvt_sched.h. This file: records, arrival, the state pool
    and the engine-side calls. kvt_sched_step.c: applying the last step and
    the step plan; kvt_sched_admit.c: admission; kvt_sched_save.c: saves,
    verdicts, counters and the audit. */
#include "kvt_sched.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/common/kvt_prefix.h"
#include "kvt_sched_int.h"

// ------------------------------------------------------------ helpers ----

int kvt_sched_reserve_scratch(kvt_sched_t *self, uint32_t nblocks, uint32_t nkeys)
{
    return kvt_planbuf_reserve(self->pb, nblocks, nkeys);
}

void kvt_sched_fill_spec(kvt_sched_t *self, kvt_sreq_t *r, uint32_t start, uint32_t end,
                         kvt_load_spec_t *sp)
{
    uint32_t nchunks = (end - start) / self->cfg.chunk_size;
    uint32_t nblocks = (end - start) / self->cfg.block_size;
    kvt_hash_t *keys =
        kvt_planbuf_fill_spec(self->pb, sp, (kvt_opid_t){r->id, r->gen}, start, end,
                              r->blocks + start / self->cfg.block_size, nblocks, nchunks);
    for (uint32_t c = 0; c < nchunks; c++)
        keys[c] = kvt_sched_chunk_key(self, r, start / self->cfg.chunk_size + c);
}

void kvt_sched_event(kvt_sched_t *self, uint64_t req, uint32_t gen, uint8_t type, uint32_t a,
                     uint32_t b, uint32_t c)
{
    kvt_planbuf_event(self->pb, req, gen, type, a, b, c);
}

kvt_hash_t kvt_sched_hash_at(kvt_sched_t *self, kvt_sreq_t *r, uint32_t b)
{
    uint32_t bs = self->cfg.block_size;
    while (r->nhashed <= b) {
        kvt_hash_t prev = r->nhashed ? r->hashes[r->nhashed - 1] : self->cfg.ns;
        r->hashes[r->nhashed] = kvt_block_hash(prev, r->tokens + (size_t)r->nhashed * bs, bs);
        r->nhashed++;
    }
    return r->hashes[b];
}

kvt_hash_t kvt_sched_chunk_key(kvt_sched_t *self, kvt_sreq_t *r, uint32_t chunk)
{
    return kvt_sched_hash_at(self, r, (chunk + 1) * self->bpc - 1);
}

void kvt_sched_free_record(kvt_sched_t *self, uint32_t slot)
{
    kvt_sreq_t *r = &self->reqs[slot];
    kvt_hmap_del(self->by_id, kvt_hmap_key64(r->id), NULL);
    assert(r->nhit_pins == 0);
    free(r->tokens);
    free(r->hashes);
    free(r->blocks);
    free(r->hit_pins);
    memset(r, 0, sizeof(*r));
    self->req_free[self->nreq_free++] = slot;
    self->stats.records--;
}

void kvt_sched_release_blocks(kvt_sched_t *self, kvt_sreq_t *r)
{
    //  Last block first: the tail lands at the old end of the LRU, so HBM
    //  evicts suffixes before the prefixes other requests share.
    for (uint32_t i = r->nblocks; i-- > 0;)
        kvt_blockmgr_unref(self->bm, r->blocks[i]);
    r->nblocks = 0;
}

void kvt_sched_index_blocks(kvt_sched_t *self, kvt_sreq_t *r, uint32_t upto_tokens)
{
    uint32_t full = upto_tokens / self->cfg.block_size;
    for (uint32_t b = r->registered; b < full; b++) {
        kvt_hash_t h = kvt_sched_hash_at(self, r, b);
        kvt_blockmgr_register(self->bm, r->blocks[b], h,
                              r->tokens + (size_t)b * self->cfg.block_size);
    }
    if (full > r->registered)
        r->registered = full;
}

bool kvt_sched_plan_fits(const kvt_sched_t *self, size_t bytes)
{
    return kvt_planbuf_fits(self->pb, bytes);
}

//  Doubles the request records (and the free-slot stack with them).
static int s_grow_reqs(kvt_sched_t *self)
{
    uint32_t old = self->nreqs_cap, cap = old, free_cap = old;
    if (kvt_vec_reserve((void **)&self->reqs, &cap, old + 1, sizeof(kvt_sreq_t)) ||
        kvt_vec_reserve((void **)&self->req_free, &free_cap, cap, sizeof(uint32_t)))
        return -1;
    memset(self->reqs + old, 0, (size_t)(cap - old) * sizeof(kvt_sreq_t));
    for (uint32_t i = cap; i-- > old;)
        self->req_free[self->nreq_free++] = i;
    self->nreqs_cap = cap;
    return 0;
}

// ---------------------------------------------------------- lifecycle ----

kvt_sched_t *kvt_sched_new(const kvt_sched_cfg_t *cfg, char *err, size_t errlen)
{
    const char *bad = NULL;
    if (cfg->block_size == 0 || cfg->block_size > 4096)
        bad = "block_size must be in 1..4096";
    else if (cfg->chunk_size == 0 || cfg->chunk_size % cfg->block_size)
        bad = "chunk_size must be a positive multiple of block_size";
    else if (cfg->hbm_blocks < cfg->chunk_size / cfg->block_size * 2)
        bad = "hbm_blocks must hold at least two chunks";
    else if (cfg->max_running == 0 || cfg->max_running > KVT_MSG_MAX_ENTRIES)
        bad = "max_running must be in 1..4096 (entries one StepPlan carries)";
    else if (cfg->step_tokens < cfg->max_running)
        bad = "step_tokens must be ≥ max_running (every running request decodes one token)";
    else if (cfg->state_bytes > 0 &&
             (cfg->checkpoint_interval == 0 || cfg->checkpoint_interval % cfg->chunk_size))
        bad = "checkpoint_interval must be a positive multiple of chunk_size (hybrid model)";
    else if (cfg->lookup_ranks != KVT_SCHED_LOOKUP_ALL &&
             cfg->lookup_ranks != KVT_SCHED_LOOKUP_RANK0)
        bad = "lookup_ranks must be KVT_SCHED_LOOKUP_ALL or KVT_SCHED_LOOKUP_RANK0";
    if (bad) {
        snprintf(err, errlen, "scheduler: %s", bad);
        return NULL;
    }
    kvt_sched_t *self = calloc(1, sizeof(*self));
    if (!self)
        goto oom;
    self->cfg = *cfg;
    self->bpc = cfg->chunk_size / cfg->block_size;
    self->next_step = 1;
    self->applied = true; //  no step ran before the first plan
    self->bm = kvt_blockmgr_new(cfg->hbm_blocks, cfg->block_size);
    self->by_id = kvt_hmap_new(256, false);
    self->scratch_blocks = malloc((size_t)cfg->hbm_blocks * sizeof(uint32_t));
    self->scratch_unref = malloc(((size_t)cfg->hbm_blocks + 1) * sizeof(uint32_t));
    kvt_stidx_cfg_t lc = {.hash_cap = 0, .can_load = false}; //  loads only, no images
    self->kvidx = kvt_stidx_new(&lc);
    self->orph_by_op = kvt_hmap_new(64, false);
    self->pb = kvt_planbuf_new();
    if (!self->pb || !self->bm || !self->by_id || !self->scratch_blocks || !self->scratch_unref ||
        !self->kvidx || !self->orph_by_op || kvt_sched_track_new(self) != 0)
        goto oom;
    if (cfg->state_bytes > 0) {
        uint32_t nck = cfg->hbm_checkpoints ? cfg->hbm_checkpoints : 4 * cfg->max_running;
        self->ck = kvt_ckpt_new(cfg->max_running, nck);
        kvt_stidx_cfg_t sc = {
            .hash_cap = cfg->tier_chunks,
            .can_load = true,
            .window_us = cfg->cpu_pool_bytes ? kvt_stidx_window_us(cfg->cpu_pool_bytes) : 0,
            .hold_bound_us = cfg->hold_bound_us,
            .log = cfg->log,
            .log_arg = cfg->log_arg};
        if (cfg->verified_window_us)
            sc.window_us = cfg->verified_window_us; //  the configuration's, not derived
        self->stidx = kvt_stidx_new(&sc);
        self->loading_keys = kvt_hmap_new(256, false);
        if (!self->ck || !self->stidx || !self->loading_keys)
            goto oom;
    }
    kvt_ilist_init(&self->waiting);
    kvt_ilist_init(&self->active);
    kvt_ilist_init(&self->tails);
    return self;
oom:
    kvt_sched_destroy(&self);
    snprintf(err, errlen, "scheduler: out of memory");
    return NULL;
}

void kvt_sched_destroy(kvt_sched_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kvt_sched_t *self = *self_p;
    for (uint32_t i = 0; i < self->nreqs_cap; i++) {
        free(self->reqs[i].tokens);
        free(self->reqs[i].hashes);
        free(self->reqs[i].blocks);
        free(self->reqs[i].hit_pins);
    }
    free(self->reqs);
    free(self->req_free);
    kvt_hmap_destroy(&self->by_id);
    kvt_savetrack_destroy(&self->track);
    free(self->scratch_blocks);
    kvt_ckpt_destroy(&self->ck);
    kvt_stidx_destroy(&self->stidx);
    kvt_sched_orphan_destroy(self);
    kvt_hmap_destroy(&self->loading_keys);
    free(self->scratch_unref);
    kvt_planbuf_destroy(&self->pb);
    kvt_blockmgr_destroy(&self->bm);
    free(self);
    *self_p = NULL;
}

int kvt_sched_arrive(kvt_sched_t *self, const kvt_arrival_t *a)
{
    self->stats.arrivals++;
    bool refuse = a->ntokens == 0 || a->max_new_tokens == 0 ||
                  kvt_hmap_get(self->by_id, kvt_hmap_key64(a->req), NULL);
    uint64_t nfeed = (uint64_t)a->ntokens + a->max_new_tokens - 1;
    //  A request must fit the pool and one entry of a StepPlan.
    if (!refuse && (nfeed > KVT_MSG_MAX_TOKENS * 2ull ||
                    kvt_sched_blocks_needed(self, nfeed) > self->cfg.hbm_blocks ||
                    kvt_sched_blocks_needed(self, nfeed) > KVT_MSG_MAX_BLOCKS))
        refuse = true;
    uint32_t slot = 0;
    kvt_sreq_t *r = NULL;
    if (!refuse && (self->nreq_free > 0 || s_grow_reqs(self) == 0)) {
        slot = self->req_free[self->nreq_free - 1];
        r = &self->reqs[slot];
        memset(r, 0, sizeof(*r));
        r->tokens = malloc(((size_t)nfeed + 1) * sizeof(uint32_t));
        r->hashes = malloc((nfeed / self->cfg.block_size + 1) * sizeof(kvt_hash_t));
        if (!r->tokens || !r->hashes ||
            kvt_hmap_put(self->by_id, kvt_hmap_key64(a->req), slot) != 0) {
            free(r->tokens);
            free(r->hashes);
            memset(r, 0, sizeof(*r));
            r = NULL;
        }
    }
    if (!r) {
        //  Refused (or out of memory): the engine still hears about it. A
        //  refusal is reported as the request's first (and only) generation.
        self->stats.rejected++;
        kvt_sched_event(self, a->req, 1, KVT_EV_FINISH, a->ntokens, 0, 1);
        return -1;
    }
    self->nreq_free--;
    r->sslot = r->ck_hit = r->ck_restore = r->ck_take = KVT_CKPT_NONE;
    r->id = a->req;
    r->gen = self->gen_floor; //  above every orphaned admission of this id (A3)
    r->nprompt = a->ntokens;
    r->max_new = a->max_new_tokens;
    r->nfeed = (uint32_t)nfeed;
    r->arrival_us = a->arrival_us;
    memcpy(r->tokens, a->tokens, (size_t)a->ntokens * sizeof(uint32_t));
    //  Generated tokens are predetermined per request so a replay is
    //  reproducible; they never match another request's prompt.
    for (uint32_t i = a->ntokens; i <= r->nfeed; i++) {
        uint64_t x = (r->id + 1) * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull;
        x ^= x >> 31;
        r->tokens[i] = (uint32_t)(x % 100000u) + 1000u;
    }
    r->state = R_WAITING;
    kvt_ilist_append(&self->waiting, KVT_SCHED_REQ_LINKS(self), slot);
    self->stats.waiting++;
    self->stats.records++;
    return 0;
}

// ------------------------------------------------------- state pool ----

int kvt_sched_state_op(kvt_sched_t *self, const kvt_sreq_t *r, uint8_t kind, uint32_t entry,
                       uint32_t at)
{
    kvt_sched_state_op_t op = {
        .op = {r->id, r->gen},
        .kind = kind,
        .slot = r->sslot,
        .entry = entry,
        .at = at,
        .key = kvt_sched_hash_at(self, (kvt_sreq_t *)r, at / self->cfg.block_size - 1)};
    return kvt_planbuf_add_state(self->pb, &op);
}

void kvt_sched_release_state(kvt_sched_t *self, kvt_sreq_t *r)
{
    if (!kvt_sched_hybrid(self))
        return;
    if (r->ck_take != KVT_CKPT_NONE)
        kvt_ckpt_abandon(self->ck, r->ck_take);
    if (r->ck_restore != KVT_CKPT_NONE)
        kvt_ckpt_unpin(self->ck, r->ck_restore);
    if (r->ck_hit != KVT_CKPT_NONE)
        kvt_ckpt_unpin(self->ck, r->ck_hit);
    if (r->sslot != KVT_CKPT_NONE)
        kvt_ckpt_slot_give(self->ck, r->sslot);
    r->ck_take = r->ck_restore = r->ck_hit = r->sslot = KVT_CKPT_NONE;
    r->restore_planned = false;
    if (r->convoy)
        kvt_sched_convoy_mark(self, r, -1);
}

void kvt_sched_convoy_mark(kvt_sched_t *self, kvt_sreq_t *r, int delta)
{
    uint32_t cs = self->cfg.chunk_size;
    for (uint32_t t = r->load_floor; t < r->load_end; t += cs) {
        kvt_hash_t key = kvt_sched_chunk_key(self, r, t / cs);
        uint32_t n = 0;
        kvt_hmap_get(self->loading_keys, key, &n);
        if (delta > 0) {
            if (kvt_hmap_put(self->loading_keys, key, n + 1) != 0)
                continue; //  out of memory: only a convoy is missed
        } else if (n <= 1)
            kvt_hmap_del(self->loading_keys, key, NULL);
        else
            kvt_hmap_put(self->loading_keys, key, n - 1);
    }
    r->convoy = delta > 0;
}

void kvt_sched_retire(kvt_sched_t *self, uint32_t slot)
{
    kvt_sreq_t *r = &self->reqs[slot];
    kvt_sched_release_state(self, r);
    //  While the save tracker holds anything of it (saves in flight, a
    //  tail), the record stays and keeps its blocks, releasing them all at
    //  once, tail first, when the tracker lets go: the LRU order does not
    //  depend on the order verdicts arrive (kvt_sched_forget).
    if (!kvt_sched_tracked(self, r))
        kvt_sched_forget(self, slot);
}

void kvt_sched_forget(kvt_sched_t *self, uint32_t slot)
{
    kvt_sched_release_blocks(self, &self->reqs[slot]);
    kvt_sched_free_record(self, slot);
}

uint64_t kvt_sched_next_step(const kvt_sched_t *self)
{
    return self->next_step;
}

bool kvt_sched_quiescent(const kvt_sched_t *self)
{
    if (kvt_sched_hybrid(self)) {
        kvt_ckpt_stats_t c;
        kvt_ckpt_stats(self->ck, &c);
        if (c.slots_in_use != 0 || c.pinned_entries != 0 || kvt_hmap_size(self->loading_keys))
            return false;
    }
    return self->stats.records == 0 && kvt_sched_saves_outstanding(self) == 0 &&
           self->stats.load_orphans == 0 && kvt_blockmgr_in_use(self->bm) == 0;
}

void kvt_sched_stats(const kvt_sched_t *self, kvt_sched_stats_t *out)
{
    *out = self->stats;
    if (self->track) {
        kvt_savetrack_stats_t t;
        kvt_savetrack_stats(self->track, &t);
        out->saves_dispatched = t.saves_built;
        out->saves_ok = t.saves_ok;
        out->saves_failed = t.saves_failed;
        out->saves_reemitted = t.saves_reemitted;
        out->saves_skipped = t.saves_skipped;
        out->saves_stopped = t.saves_stopped;
        out->saves_outstanding = (uint32_t)t.saves_outstanding;
    }
    kvt_planbuf_stats_t pb;
    kvt_planbuf_stats(self->pb, &pb);
    out->plan_deferred = pb.plan_deferred;
    out->tokens_planned = pb.tokens_planned;
    out->leased_blocks = self->leased;
    out->blocks_in_use = kvt_blockmgr_in_use(self->bm);
}

// ------------------------------------------------- engine-side calls ----

static kvt_sreq_t *s_find(const kvt_sched_t *self, uint64_t req, uint32_t *slot)
{
    if (!kvt_hmap_get(self->by_id, kvt_hmap_key64(req), slot))
        return NULL;
    return &self->reqs[*slot];
}

int kvt_sched_probe(kvt_sched_t *self, uint64_t req, kvt_sched_probe_t *out)
{
    uint32_t slot;
    kvt_sreq_t *r = s_find(self, req, &slot);
    if (!r || r->state != R_WAITING)
        return -1;
    kvt_sched_probe_req(self, r, out);
    return 0;
}

void kvt_sched_plan_state(const kvt_sched_t *self, const kvt_sched_state_op_t **ops, uint32_t *n)
{
    kvt_planbuf_state_ops(self->pb, ops, n);
}

int kvt_sched_abort(kvt_sched_t *self, uint64_t req)
{
    uint32_t slot;
    kvt_sreq_t *r = s_find(self, req, &slot);
    if (!r || r->state == R_DONE)
        return -1;
    self->stats.aborted++;
    kvt_sched_event(self, r->id, r->gen, KVT_EV_FINISH, r->nprompt, 0, 0);
    if (r->state == R_WAITING) {
        kvt_sched_lookup_drop(self, r);
        kvt_ilist_unlink(&self->waiting, KVT_SCHED_REQ_LINKS(self), slot);
        self->stats.waiting--;
    } else {
        //  A load in flight goes to its index as an orphan, with what it
        //  still writes; the record lets go of the rest now.
        if (r->state == R_LOADING)
            kvt_sched_orphan_load(self, r);
        else
            self->stats.running--;
        kvt_ilist_unlink(&self->active, KVT_SCHED_REQ_LINKS(self), slot);
    }
    r->state = R_DONE;
    r->planned_end = 0;
    kvt_sched_track_abort(self, r);
    kvt_sched_retire(self, slot);
    return 0;
}

int kvt_sched_preempt(kvt_sched_t *self, uint64_t req)
{
    uint32_t slot;
    kvt_sreq_t *r = s_find(self, req, &slot);
    if (!r || (r->state != R_RUNNING && r->state != R_LOADING))
        return -1;
    self->stats.preempted++;
    if (r->state == R_LOADING)
        kvt_sched_orphan_load(self, r); //  as on an abort: the index owns the load
    else
        self->stats.running--;
    kvt_sched_track_abort(self, r);
    kvt_sched_release_state(self, r);
    kvt_sched_release_blocks(self, r);
    kvt_ilist_unlink(&self->active, KVT_SCHED_REQ_LINKS(self), slot);
    kvt_ilist_prepend(&self->waiting, KVT_SCHED_REQ_LINKS(self), slot);
    self->stats.waiting++;
    r->state = R_WAITING;
    r->computed = r->planned_end = r->registered = 0;
    r->hbm_hit = r->block_hit = 0;
    r->verify_end = 0;
    r->probe_demand = 0;
    free(r->blocks);
    free(r->hit_pins); //  empty while running; the next admission allocates its own
    r->blocks = r->hit_pins = NULL;
    return 0;
}

int kvt_sched_req_info(const kvt_sched_t *self, uint64_t req, kvt_sched_req_info_t *out)
{
    uint32_t slot;
    const kvt_sreq_t *r = s_find(self, req, &slot);
    if (!r)
        return -1;
    memset(out, 0, sizeof(*out));
    out->state = r->state;
    out->gen = r->gen;
    out->computed = r->computed;
    out->hbm_hit = r->hbm_hit;
    out->block_hit = r->block_hit;
    out->load_floor = r->state == R_LOADING ? r->load_floor : 0;
    out->load_end = r->state == R_LOADING ? r->load_end : 0;
    out->joint_src = r->joint_src;
    out->slot = r->sslot;
    out->nblocks = r->nblocks;
    out->blocks = r->blocks;
    return 0;
}
