/*  kvt_sched — see kvt_sched.h. This file: records, applying the last step
    and the step plan. kvt_sched_admit.c: admission; kvt_sched_save.c:
    saves, verdicts, counters and the audit. */
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
    if (kvt_vec_reserve((void **)&self->p_u32, &self->p_u32_cap, self->p_nu32 + nblocks,
                        sizeof(uint32_t)) ||
        kvt_vec_reserve((void **)&self->p_h, &self->p_h_cap, self->p_nh + nkeys,
                        sizeof(kvt_hash_t)))
        return -1;
    return 0;
}

void kvt_sched_fill_spec(kvt_sched_t *self, kvt_sreq_t *r, uint32_t start, uint32_t end,
                         kvt_load_spec_t *sp)
{
    uint32_t nchunks = (end - start) / self->cfg.chunk_size;
    uint32_t nblocks = (end - start) / self->cfg.block_size;
    memset(sp, 0, sizeof(*sp));
    sp->op.req = r->id;
    sp->op.gen = r->gen;
    sp->start = start;
    sp->end = end;
    sp->blocks = (uint32_t *)(uintptr_t)self->p_nu32;
    sp->nblocks = nblocks;
    sp->keys = (kvt_hash_t *)(uintptr_t)self->p_nh;
    sp->nkeys = nchunks;
    memcpy(self->p_u32 + self->p_nu32, r->blocks + start / self->cfg.block_size,
           (size_t)nblocks * sizeof(uint32_t));
    self->p_nu32 += nblocks;
    for (uint32_t c = 0; c < nchunks; c++)
        self->p_h[self->p_nh++] = kvt_sched_chunk_key(self, r, start / self->cfg.chunk_size + c);
    self->p_bytes += KVT_SCHED_SPEC_BYTES(nblocks, nchunks);
}

void kvt_sched_event(kvt_sched_t *self, uint64_t req, uint32_t gen, uint8_t type, uint32_t a,
                     uint32_t b, uint32_t c)
{
    if (kvt_vec_reserve((void **)&self->events, &self->events_cap, self->nevents + 1,
                        sizeof(kvt_event_t)) != 0)
        return; //  an event lost to OOM only affects measurements
    kvt_event_t *ev = &self->events[self->nevents++];
    ev->op.req = req;
    ev->op.gen = gen;
    ev->type = type;
    ev->a = a;
    ev->b = b;
    ev->c = c;
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
    return self->p_bytes + bytes <= KVT_SCHED_PLAN_BYTES;
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
    if (!self->bm || !self->by_id || !self->scratch_blocks || !self->scratch_unref ||
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
    free(self->p_state);
    free(self->p_entries);
    free(self->p_loads);
    free(self->p_saves);
    free(self->p_u32);
    free(self->p_h);
    free(self->events);
    free(self->p_events);
    free(self->p_lookups);
    free(self->p_releases);
    free(self->rel_q);
    free(self->p_touches);
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
    if (kvt_vec_reserve((void **)&self->p_state, &self->p_state_cap, self->p_nstate + 1,
                        sizeof(kvt_sched_state_op_t)) != 0)
        return -1;
    kvt_sched_state_op_t *op = &self->p_state[self->p_nstate++];
    memset(op, 0, sizeof(*op));
    op->op.req = r->id;
    op->op.gen = r->gen;
    op->kind = kind;
    op->slot = r->sslot;
    op->entry = entry;
    op->at = at;
    op->key = kvt_sched_hash_at(self, (kvt_sreq_t *)r, at / self->cfg.block_size - 1);
    return 0;
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

//  The state side of an applied step: the checkpoint the entry took becomes
//  valid (or is dropped when the step failed), a restore that ran lets its
//  checkpoint go.
static void s_apply_state(kvt_sched_t *self, kvt_sreq_t *r, bool failed)
{
    if (!kvt_sched_hybrid(self))
        return;
    if (r->ck_take != KVT_CKPT_NONE) {
        if (failed)
            kvt_ckpt_abandon(self->ck, r->ck_take);
        else
            kvt_ckpt_commit(self->ck, r->ck_take);
        r->ck_take = KVT_CKPT_NONE;
    }
    if (r->restore_planned && !failed) {
        kvt_ckpt_unpin(self->ck, r->ck_restore);
        r->ck_restore = KVT_CKPT_NONE;
        self->stats.state_restores++;
    }
    r->restore_planned = false;
}

//  The next boundary above `from` where request r takes a checkpoint, or 0:
//  (a) the interval grid, (b) the prompt's last chunk boundary and its end
//  on the block grid, (c) the last chunk boundary of the fed tokens (a
//  decode keep); (b) and (c) not with cfg.interval_checkpoints.
static uint32_t s_next_ckpt(const kvt_sched_t *self, const kvt_sreq_t *r, uint32_t from)
{
    uint32_t iv = self->cfg.checkpoint_interval, cs = self->cfg.chunk_size;
    uint64_t best = ((uint64_t)from / iv + 1) * iv;
    uint32_t extra[3] = {r->nprompt / cs * cs,
                         r->nprompt / self->cfg.block_size * self->cfg.block_size,
                         r->nfeed / cs * cs};
    for (int i = 0; i < 3 && !self->cfg.interval_checkpoints; i++)
        if (extra[i] > from && extra[i] < best)
            best = extra[i];
    return best > r->nfeed ? 0 : (uint32_t)best;
}

// ----------------------------------------------------------- applying ----

//  Applies the step that just ran: its tokens are computed, its full blocks
//  become shareable, finished requests retire (saving their last chunks).
//  With `failed`, none of it counts: the tokens are planned again.
static void s_apply_last_step(kvt_sched_t *self, bool failed)
{
    if (failed)
        self->stats.steps_failed++;
    uint32_t slot = self->active.head;
    while (slot != KVT_ILIST_NONE) {
        uint32_t next = kvt_ilist_next(KVT_SCHED_REQ_LINKS(self), slot);
        kvt_sreq_t *r = &self->reqs[slot];
        if (r->state == R_RUNNING && r->planned_end > 0) {
            s_apply_state(self, r, failed);
            if (!failed) {
                r->computed = r->planned_end;
                kvt_sched_index_blocks(self, r, r->computed);
            }
            r->planned_end = 0;
        }
        if (r->state == R_RUNNING && (r->computed >= r->nfeed || r->stop)) {
            uint32_t generated = r->computed >= r->nfeed     ? r->max_new
                                 : r->computed >= r->nprompt ? r->computed - r->nprompt + 1
                                                             : 0;
            r->state = R_DONE;
            kvt_ilist_unlink(&self->active, KVT_SCHED_REQ_LINKS(self), slot);
            self->stats.running--;
            self->stats.finished++;
            kvt_sched_event(self, r->id, r->gen, KVT_EV_FINISH, r->nprompt, generated, 0);
            kvt_sched_track_finish(self, slot);
            kvt_sched_retire(self, slot);
        }
        slot = next;
    }
}

// ----------------------------------------------------------- planning ----

static int s_plan_entry(kvt_sched_t *self, kvt_sreq_t *r, uint32_t start, uint32_t end)
{
    uint32_t bs = self->cfg.block_size;
    uint32_t first = r->verify_end ? 0 : start / bs;
    uint32_t last = (end - 1) / bs;
    uint32_t n = last - first + 1;
    if (!kvt_sched_plan_fits(self, KVT_SCHED_ENTRY_BYTES(n)) ||
        self->p_nentries >= KVT_MSG_MAX_ENTRIES) {
        self->stats.plan_deferred++;
        return -1;
    }
    if (kvt_vec_reserve((void **)&self->p_entries, &self->p_entries_cap, self->p_nentries + 1,
                        sizeof(kvt_entry_t)) ||
        kvt_sched_reserve_scratch(self, n, n))
        return -1;
    kvt_entry_t *e = &self->p_entries[self->p_nentries++];
    memset(e, 0, sizeof(*e));
    e->op.req = r->id;
    e->op.gen = r->gen;
    e->start = start;
    e->end = end;
    e->first_block = first;
    e->verify_end = r->verify_end;
    e->blocks = (uint32_t *)(uintptr_t)self->p_nu32;
    e->hashes = (kvt_hash_t *)(uintptr_t)self->p_nh;
    e->nblocks = n;
    for (uint32_t b = first; b <= last; b++) {
        self->p_u32[self->p_nu32++] = r->blocks[b];
        kvt_hash_t zero = {0, 0};
        self->p_h[self->p_nh++] = (b + 1) * bs <= end ? kvt_sched_hash_at(self, r, b) : zero;
    }
    self->p_bytes += KVT_SCHED_ENTRY_BYTES(n);
    r->verify_end = 0;
    r->planned_end = end;
    self->stats.tokens_planned += end - start;
    return 0;
}

//  The state work of a hybrid entry ending at `end`: the restore its slot
//  still needs (before the forward) and the checkpoint it takes at a
//  checkpoint boundary (after it).
static void s_plan_entry_state(kvt_sched_t *self, kvt_sreq_t *r, uint32_t end, bool boundary)
{
    if (r->ck_restore != KVT_CKPT_NONE &&
        kvt_sched_state_op(self, r, KVT_SCHED_STATE_RESTORE, r->ck_restore, r->restore_at) == 0)
        r->restore_planned = true;
    if (!boundary || r->ck_take != KVT_CKPT_NONE)
        return;
    kvt_hash_t h = kvt_sched_hash_at(self, r, end / self->cfg.block_size - 1);
    uint32_t e = kvt_ckpt_reserve(self->ck, h);
    if (e == KVT_CKPT_NONE)
        return; //  already held (refreshed), or every entry pinned (counted by the pool)
    if (kvt_sched_state_op(self, r, KVT_SCHED_STATE_TAKE, e, end) != 0) {
        kvt_ckpt_abandon(self->ck, e);
        return;
    }
    r->ck_take = e;
    r->take_at = end;
    self->stats.ckpt_takes++;
}

static void s_finish_plan(kvt_sched_t *self, uint64_t step, kvt_step_plan_t *plan)
{
    for (uint32_t i = 0; i < self->p_nentries; i++) {
        kvt_entry_t *e = &self->p_entries[i];
        e->blocks = self->p_u32 + (uintptr_t)e->blocks;
        e->hashes = self->p_h + (uintptr_t)e->hashes;
    }
    for (uint32_t i = 0; i < self->p_nloads; i++) {
        kvt_load_spec_t *l = &self->p_loads[i];
        l->blocks = self->p_u32 + (uintptr_t)l->blocks;
        l->keys = self->p_h + (uintptr_t)l->keys;
    }
    for (uint32_t i = 0; i < self->p_nsaves; i++) {
        kvt_save_spec_t *s = &self->p_saves[i];
        s->blocks = self->p_u32 + (uintptr_t)s->blocks;
        s->keys = self->p_h + (uintptr_t)s->keys;
    }
    //  Hand the accumulated events out with this plan (at most what one
    //  message carries; the rest go with the next plan).
    uint32_t nev = self->nevents < KVT_MSG_MAX_ENTRIES ? self->nevents : KVT_MSG_MAX_ENTRIES;
    if (kvt_vec_reserve((void **)&self->p_events, &self->p_events_cap, nev ? nev : 1,
                        sizeof(kvt_event_t)) != 0)
        nev = 0;
    if (nev > 0) {
        memcpy(self->p_events, self->events, (size_t)nev * sizeof(kvt_event_t));
        memmove(self->events, self->events + nev,
                (size_t)(self->nevents - nev) * sizeof(kvt_event_t));
        self->nevents -= nev;
    }
    memset(plan, 0, sizeof(*plan));
    plan->step = step;
    plan->entries = self->p_entries;
    plan->nentries = self->p_nentries;
    plan->loads = self->p_loads;
    plan->nloads = self->p_nloads;
    plan->saves = self->p_saves;
    plan->nsaves = self->p_nsaves;
    plan->events = self->p_events;
    plan->nevents = nev;
    for (uint32_t i = 0; i < self->p_nlookups; i++)
        self->p_lookups[i].keys = self->p_h + (uintptr_t)self->p_lookups[i].keys;
    plan->lookups = self->p_nlookups ? self->p_lookups : NULL;
    plan->nlookups = self->p_nlookups;
    //  Queued releases, at most what one message carries (the rest next).
    uint32_t nrel = self->nrel_q < KVT_MSG_MAX_ENTRIES ? self->nrel_q : KVT_MSG_MAX_ENTRIES;
    if (kvt_vec_reserve((void **)&self->p_releases, &self->p_releases_cap, nrel ? nrel : 1,
                        sizeof(kvt_lookup_release_t)) != 0)
        nrel = 0;
    if (nrel > 0) {
        memcpy(self->p_releases, self->rel_q, (size_t)nrel * sizeof(kvt_lookup_release_t));
        memmove(self->rel_q, self->rel_q + nrel,
                (size_t)(self->nrel_q - nrel) * sizeof(kvt_lookup_release_t));
        self->nrel_q -= nrel;
    }
    self->p_nreleases = nrel;
    plan->lookup_releases = self->p_nreleases ? self->p_releases : NULL;
    plan->nlookup_releases = self->p_nreleases;
    plan->touches = self->p_ntouches ? self->p_touches : NULL;
    plan->ntouches = self->p_ntouches;
}

//  Starts the plan scratch afresh once per plan (kvt_sched_apply may have
//  put the saves of finished requests into it already).
static void s_open_plan(kvt_sched_t *self)
{
    if (self->p_open)
        return;
    self->p_nentries = self->p_nloads = self->p_nsaves = self->p_nstate = 0;
    self->p_nlookups = self->p_nreleases = self->p_ntouches = 0;
    self->p_nu32 = self->p_nh = 0;
    self->p_bytes = 64u * self->nevents + 256u;
    self->p_open = true;
}

void kvt_sched_set_now(kvt_sched_t *self, uint64_t now_us)
{
    if (now_us > self->now_us)
        self->now_us = now_us;
}

int kvt_sched_apply(kvt_sched_t *self, uint64_t step, bool ok)
{
    if (self->applied || step + 1 != self->next_step)
        return -1;
    s_open_plan(self);
    s_apply_last_step(self, !ok);
    self->applied = true;
    return 0;
}

int kvt_sched_finish(kvt_sched_t *self, uint64_t req)
{
    uint32_t slot;
    if (!kvt_hmap_get(self->by_id, kvt_hmap_key64(req), &slot))
        return -1;
    kvt_sreq_t *r = &self->reqs[slot];
    if (r->state != R_RUNNING || r->stop)
        return -1;
    r->stop = true;
    return 0;
}

int kvt_sched_plan(kvt_sched_t *self, uint64_t step, bool prev_failed, kvt_step_plan_t *plan)
{
    if (step != self->next_step) {
        self->stats.stale_schedules++;
        return KVT_SCHED_REFUSED;
    }
    s_open_plan(self);
    //  A held step's second call (or a plan after kvt_sched_apply) finds
    //  the last step applied already.
    if (!self->applied)
        s_apply_last_step(self, prev_failed);
    self->applied = true;
    //  Orphans whose verdict never came go back before admission (I2).
    kvt_sched_reclaim(self);

    //  Saves: the tails of requests that finished (their one chance), then
    //  the chunks the step that just ran completed.
    for (uint32_t slot = self->tails.head; slot != KVT_ILIST_NONE;
         slot = kvt_ilist_next(KVT_SCHED_REQ_LINKS(self), slot))
        kvt_sched_emit_saves(self, slot);
    for (uint32_t slot = self->active.head; slot != KVT_ILIST_NONE;
         slot = kvt_ilist_next(KVT_SCHED_REQ_LINKS(self), slot))
        if (self->reqs[slot].state == R_RUNNING)
            kvt_sched_emit_saves(self, slot);

    //  Admission, FIFO: stop at the first request that does not fit. A
    //  request waiting for its tier lookup holds up no one behind it, but
    //  takes a place among the max_running candidates (so lookups go out
    //  only for requests that could be admitted).
    uint32_t lookup_waits = 0;
    for (uint32_t slot = self->waiting.head;
         slot != KVT_ILIST_NONE &&
         self->stats.running + self->stats.loading + lookup_waits < self->cfg.max_running;) {
        uint32_t next = kvt_ilist_next(KVT_SCHED_REQ_LINKS(self), slot);
        int rc = kvt_sched_admit(self, slot);
        if (rc == 0)
            break;
        lookup_waits += rc == S_ADMIT_LOOKUP;
        slot = next;
    }

    //  Decodes first (one token each), then prefill chunks within the budget.
    uint32_t budget = self->cfg.step_tokens;
    for (uint32_t pass = 0; pass < 2; pass++) {
        for (uint32_t slot = self->active.head; slot != KVT_ILIST_NONE && budget > 0;
             slot = kvt_ilist_next(KVT_SCHED_REQ_LINKS(self), slot)) {
            kvt_sreq_t *r = &self->reqs[slot];
            if (r->state != R_RUNNING || r->stop)
                continue;
            bool decoding = r->computed >= r->nprompt;
            if (decoding != (pass == 0))
                continue;
            uint32_t end = decoding ? r->computed + 1 : r->nprompt;
            if (end - r->computed > budget)
                end = r->computed + budget;
            //  A hybrid prefill chunk ends on the next checkpoint boundary,
            //  so the state there can be taken.
            uint32_t ckb = kvt_sched_hybrid(self) ? s_next_ckpt(self, r, r->computed) : 0;
            if (ckb && end > ckb)
                end = ckb;
            if (s_plan_entry(self, r, r->computed, end) != 0)
                break;
            budget -= end - r->computed;
            if (kvt_sched_hybrid(self))
                s_plan_entry_state(self, r, end, end == ckb);
        }
    }
    bool work = self->p_nentries || self->p_nloads || self->p_nsaves || self->p_nstate ||
                self->p_nlookups || self->nrel_q || self->p_ntouches;
    bool outstanding = self->stats.loading > 0 || kvt_sched_saves_outstanding(self) > 0 ||
                       self->stats.lookups_out > 0 || self->stats.load_orphans > 0;
    kvt_sched_end_plan(self);
    if (!work && outstanding) {
        self->p_open = false; //  nothing was added: the next call starts afresh
        return KVT_SCHED_HOLD;
    }
    self->stats.steps++;
    self->next_step = step + 1;
    self->applied = false;
    self->p_open = false;
    s_finish_plan(self, step, plan);
    plan->idle = !work && !outstanding && self->stats.waiting == 0 && self->nevents == 0;
    return work ? 1 : 0;
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
    *ops = self->p_state;
    *n = self->p_nstate;
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
