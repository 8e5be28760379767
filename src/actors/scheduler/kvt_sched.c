/*  kvt_sched — see kvt_sched.h. This file: records, admission and the step
    plan. kvt_sched_save.c: saves, verdicts, counters and the audit. */
#include "kvt_sched.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/common/kvt_prefix.h"
#include "kvt_sched_int.h"

// ------------------------------------------------------------ helpers ----

int kvt_sched_reserve(void **arr, uint32_t *cap, uint32_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    uint32_t n = *cap ? *cap : 16;
    while (n < need)
        n *= 2;
    void *p = realloc(*arr, (size_t)n * elem);
    if (!p)
        return -1;
    *arr = p;
    *cap = n;
    return 0;
}

int kvt_sched_reserve_sz(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 256;
    while (n < need)
        n *= 2;
    void *p = realloc(*arr, n * elem);
    if (!p)
        return -1;
    *arr = p;
    *cap = n;
    return 0;
}

void kvt_sched_event(kvt_sched_t *self, uint64_t req, uint32_t gen, uint8_t type, uint32_t a,
                     uint32_t b, uint32_t c)
{
    if (kvt_sched_reserve((void **)&self->events, &self->events_cap, self->nevents + 1,
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

static int s_grow_reqs(kvt_sched_t *self)
{
    uint32_t cap = self->nreqs_cap ? self->nreqs_cap * 2 : 64;
    kvt_sreq_t *reqs = realloc(self->reqs, (size_t)cap * sizeof(kvt_sreq_t));
    if (!reqs)
        return -1;
    self->reqs = reqs;
    memset(reqs + self->nreqs_cap, 0, (size_t)(cap - self->nreqs_cap) * sizeof(kvt_sreq_t));
    uint32_t *p = realloc(self->req_prev, (size_t)cap * sizeof(uint32_t));
    if (!p)
        return -1;
    self->req_prev = p;
    p = realloc(self->req_next, (size_t)cap * sizeof(uint32_t));
    if (!p)
        return -1;
    self->req_next = p;
    p = realloc(self->req_free, (size_t)cap * sizeof(uint32_t));
    if (!p)
        return -1;
    self->req_free = p;
    for (uint32_t i = cap; i-- > self->nreqs_cap;)
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
    self->bm = kvt_blockmgr_new(cfg->hbm_blocks, cfg->block_size);
    self->tier = kvt_tierindex_new(cfg->tier_chunks);
    self->by_id = kvt_hmap_new(256, false);
    self->save_by_id = kvt_hmap_new(256, false);
    self->inflight = kvt_hmap_new(256, false);
    self->scratch_blocks = malloc((size_t)cfg->hbm_blocks * sizeof(uint32_t));
    if (!self->bm || !self->tier || !self->by_id || !self->save_by_id || !self->inflight ||
        !self->scratch_blocks)
        goto oom;
    kvt_ilist_init(&self->waiting);
    kvt_ilist_init(&self->active);
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
    free(self->req_prev);
    free(self->req_next);
    free(self->req_free);
    kvt_hmap_destroy(&self->by_id);
    free(self->saves);
    free(self->save_blocks);
    free(self->save_free);
    kvt_hmap_destroy(&self->save_by_id);
    kvt_hmap_destroy(&self->inflight);
    free(self->scratch_blocks);
    free(self->p_entries);
    free(self->p_loads);
    free(self->p_saves);
    free(self->p_u32);
    free(self->p_h);
    free(self->events);
    free(self->p_events);
    kvt_blockmgr_destroy(&self->bm);
    kvt_tierindex_destroy(&self->tier);
    free(self);
    *self_p = NULL;
}

static uint32_t s_blocks_needed(const kvt_sched_t *self, uint64_t nfeed)
{
    return (uint32_t)((nfeed + self->cfg.block_size - 1) / self->cfg.block_size);
}

int kvt_sched_arrive(kvt_sched_t *self, const kvt_arrival_t *a)
{
    self->stats.arrivals++;
    bool refuse = a->ntokens == 0 || a->max_new_tokens == 0 ||
                  kvt_hmap_get(self->by_id, kvt_hmap_key64(a->req), NULL);
    uint64_t nfeed = (uint64_t)a->ntokens + a->max_new_tokens - 1;
    //  A request must fit the pool and one entry of a StepPlan.
    if (!refuse &&
        (nfeed > KVT_MSG_MAX_TOKENS * 2ull || s_blocks_needed(self, nfeed) > self->cfg.hbm_blocks ||
         s_blocks_needed(self, nfeed) > KVT_MSG_MAX_BLOCKS))
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
    r->id = a->req;
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
    kvt_ilist_push_tail(&self->waiting, self->req_prev, self->req_next, slot);
    self->stats.waiting++;
    self->stats.records++;
    return 0;
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
        uint32_t next = self->req_next[slot];
        kvt_sreq_t *r = &self->reqs[slot];
        if (r->state == R_RUNNING && r->planned_end > 0) {
            if (failed) {
                r->planned_end = 0;
                slot = next;
                continue;
            }
            r->computed = r->planned_end;
            r->planned_end = 0;
            kvt_sched_index_blocks(self, r, r->computed);
            if (r->computed >= r->nfeed) {
                r->state = R_DONE;
                kvt_ilist_remove(&self->active, self->req_prev, self->req_next, slot);
                self->stats.running--;
                self->stats.finished++;
                kvt_sched_event(self, r->id, r->gen, KVT_EV_FINISH, r->nprompt, r->max_new, 0);
                kvt_sched_emit_saves(self, slot);
                //  With saves out, the record keeps its blocks until the last
                //  verdict and releases them all at once, tail first, so the
                //  LRU order does not depend on the order verdicts arrive.
                if (r->saves_inflight == 0) {
                    kvt_sched_release_blocks(self, r);
                    kvt_sched_free_record(self, slot);
                }
            }
        }
        slot = next;
    }
}

// ---------------------------------------------------------- admission ----

static int s_plan_load(kvt_sched_t *self, kvt_sreq_t *r, uint32_t floor_tok, uint32_t end_tok)
{
    uint32_t nchunks = (end_tok - floor_tok) / self->cfg.chunk_size;
    uint32_t nblocks = (end_tok - floor_tok) / self->cfg.block_size;
    if (kvt_sched_reserve((void **)&self->p_loads, &self->p_loads_cap, self->p_nloads + 1,
                          sizeof(kvt_load_spec_t)) ||
        kvt_sched_reserve_sz((void **)&self->p_u32, &self->p_u32_cap, self->p_nu32 + nblocks,
                             sizeof(uint32_t)) ||
        kvt_sched_reserve_sz((void **)&self->p_h, &self->p_h_cap, self->p_nh + nchunks,
                             sizeof(kvt_hash_t)))
        return -1;
    kvt_load_spec_t *ld = &self->p_loads[self->p_nloads++];
    memset(ld, 0, sizeof(*ld));
    ld->op.req = r->id;
    ld->op.gen = r->gen;
    ld->start = floor_tok;
    ld->end = end_tok;
    ld->blocks = (uint32_t *)(uintptr_t)self->p_nu32;
    ld->nblocks = nblocks;
    ld->keys = (kvt_hash_t *)(uintptr_t)self->p_nh;
    ld->nkeys = nchunks;
    memcpy(self->p_u32 + self->p_nu32, r->blocks + floor_tok / self->cfg.block_size,
           (size_t)nblocks * sizeof(uint32_t));
    self->p_nu32 += nblocks;
    for (uint32_t c = 0; c < nchunks; c++)
        self->p_h[self->p_nh++] =
            kvt_sched_chunk_key(self, r, floor_tok / self->cfg.chunk_size + c);
    self->p_bytes += KVT_SCHED_SPEC_BYTES(nblocks, nchunks);
    return 0;
}

//  Tries to admit the request in `slot`. The probe (HBM match, tier count,
//  fit) has no side effects; only a committed admission refreshes the tier
//  view and counts hits. Returns 1 when admitted, 0 when it must wait.
static int s_admit(kvt_sched_t *self, uint32_t slot)
{
    kvt_sreq_t *r = &self->reqs[slot];
    uint32_t bs = self->cfg.block_size, cs = self->cfg.chunk_size;
    uint32_t need = s_blocks_needed(self, r->nfeed);
    //  The last probe needed more fresh blocks than exist now: nothing that
    //  could help has happened (a probe's demand only shrinks when blocks
    //  free up), so skip the probe (rule B1: the demand travels with it).
    if (r->probe_demand > kvt_blockmgr_available(self->bm))
        return 0;
    //  A hit always leaves at least one prompt token to compute.
    uint32_t max_hit_blocks = (r->nprompt - 1) / bs;
    for (uint32_t b = 0; b < max_hit_blocks; b++)
        kvt_sched_hash_at(self, r, b);
    uint32_t m =
        kvt_blockmgr_match(self->bm, r->hashes, r->tokens, max_hit_blocks, self->scratch_blocks);
    uint32_t hbm = m * bs;

    uint32_t max_chunks = (r->nprompt - 1) / cs;
    uint32_t tier = 0;
    kvt_hash_t keys[64];
    if (self->cfg.tier_chunks > 0 && max_chunks > 0) {
        //  Count in batches so a long prompt needs no allocation.
        uint32_t c = 0;
        while (c < max_chunks) {
            uint32_t n = max_chunks - c < 64 ? max_chunks - c : 64;
            for (uint32_t i = 0; i < n; i++)
                keys[i] = kvt_sched_chunk_key(self, r, c + i);
            uint32_t got = kvt_tierindex_count(self->tier, keys, n);
            c += got;
            if (got < n)
                break;
        }
        tier = c * cs;
    }
    bool load = tier > hbm;
    //  The KV leg starts on the chunk grid: keep the shared blocks below the
    //  chunk floor of the HBM hit and refill [floor, B) privately, so no
    //  shared block is ever written.
    uint32_t keep_tokens = load ? hbm / cs * cs : hbm;
    uint32_t keep = keep_tokens / bs;
    uint32_t fresh = need - keep;
    //  Loading from the floor, the hit's blocks above it stay referenced
    //  (pinned) until the verdict, so a failed load retreats to the hit.
    uint32_t held = load ? m : keep;
    uint32_t unreferenced_kept = 0;
    for (uint32_t i = 0; i < held; i++)
        if (kvt_blockmgr_refs(self->bm, self->scratch_blocks[i]) == 0)
            unreferenced_kept++;
    if (kvt_blockmgr_available(self->bm) < (uint64_t)fresh + unreferenced_kept) {
        r->probe_demand = fresh + unreferenced_kept;
        return 0;
    }
    //  The plan must be able to carry the load and the request's first entry.
    size_t bytes =
        KVT_SCHED_ENTRY_BYTES(need) +
        (load ? KVT_SCHED_SPEC_BYTES((tier - keep_tokens) / bs, (tier - keep_tokens) / cs) : 0);
    if (!kvt_sched_plan_fits(self, bytes) || self->p_nloads >= KVT_MSG_MAX_ENTRIES) {
        self->stats.plan_deferred++;
        return 0;
    }
    r->blocks = malloc((size_t)need * sizeof(uint32_t));
    r->hit_pins = held > keep ? malloc((size_t)(held - keep) * sizeof(uint32_t)) : NULL;
    if (!r->blocks || (held > keep && !r->hit_pins)) {
        free(r->blocks);
        free(r->hit_pins);
        r->blocks = r->hit_pins = NULL;
        return 0;
    }
    for (uint32_t i = keep; i < held; i++) {
        r->hit_pins[i - keep] = self->scratch_blocks[i];
        kvt_blockmgr_ref(self->bm, self->scratch_blocks[i]);
    }
    r->nhit_pins = held - keep;
    for (uint32_t i = 0; i < keep; i++) {
        r->blocks[i] = self->scratch_blocks[i];
        kvt_blockmgr_ref(self->bm, r->blocks[i]);
    }
    int rc = kvt_blockmgr_alloc(self->bm, fresh, r->blocks + keep);
    assert(rc == 0);
    (void)rc;
    r->nblocks = need;
    r->registered = keep;
    r->probe_demand = 0;
    r->gen++;
    r->hbm_hit = hbm;
    kvt_blockmgr_count_hit(self->bm, m);
    if (self->cfg.tier_chunks > 0 && tier > 0) {
        //  Refresh what the admission votes for, deepest first (the view
        //  mirrors the pools' LRU discipline).
        for (uint32_t c = 0; c < tier / cs; c += 64) {
            uint32_t n = tier / cs - c < 64 ? tier / cs - c : 64;
            for (uint32_t i = 0; i < n; i++)
                keys[i] = kvt_sched_chunk_key(self, r, c + i);
            kvt_tierindex_lookup(self->tier, keys, n);
        }
    }
    kvt_ilist_remove(&self->waiting, self->req_prev, self->req_next, slot);
    kvt_ilist_push_tail(&self->active, self->req_prev, self->req_next, slot);
    self->stats.waiting--;
    self->stats.admitted++;
    //  The HBM hit is recorded as found (rule B3), even when the load starts
    //  at its chunk floor; the tier is credited with what lies above it.
    self->stats.hbm_hit_tokens += hbm;
    kvt_sched_event(self, r->id, r->gen, KVT_EV_ADMIT, hbm, load ? tier - hbm : 0, r->nprompt);
    r->save_budget = self->cfg.save_retries;
    if (load && s_plan_load(self, r, keep_tokens, tier) == 0) {
        r->state = R_LOADING;
        r->computed = keep_tokens;
        r->load_floor = keep_tokens;
        r->load_end = tier;
        //  The save floor, recorded once when the load is decided (S5).
        r->save_frontier = tier;
        r->verify_end = tier;
        self->stats.loading++;
        self->stats.loads_dispatched++;
        return 1;
    }
    r->state = R_RUNNING;
    r->computed = keep_tokens;
    //  Chunks the tier already holds need no save.
    r->save_frontier = tier < keep_tokens ? tier : keep_tokens / cs * cs;
    r->verify_end = keep_tokens;
    self->stats.running++;
    return 1;
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
    if (kvt_sched_reserve((void **)&self->p_entries, &self->p_entries_cap, self->p_nentries + 1,
                          sizeof(kvt_entry_t)) ||
        kvt_sched_reserve_sz((void **)&self->p_u32, &self->p_u32_cap, self->p_nu32 + n,
                             sizeof(uint32_t)) ||
        kvt_sched_reserve_sz((void **)&self->p_h, &self->p_h_cap, self->p_nh + n,
                             sizeof(kvt_hash_t)))
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
    if (kvt_sched_reserve((void **)&self->p_events, &self->p_events_cap, nev ? nev : 1,
                          sizeof(kvt_event_t)) != 0)
        nev = 0;
    memcpy(self->p_events, self->events, (size_t)nev * sizeof(kvt_event_t));
    memmove(self->events, self->events + nev, (size_t)(self->nevents - nev) * sizeof(kvt_event_t));
    self->nevents -= nev;
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
}

int kvt_sched_plan(kvt_sched_t *self, uint64_t step, bool prev_failed, kvt_step_plan_t *plan)
{
    if (step != self->next_step) {
        self->stats.stale_schedules++;
        return KVT_SCHED_REFUSED;
    }
    self->p_nentries = self->p_nloads = self->p_nsaves = 0;
    self->p_nu32 = self->p_nh = 0;
    self->p_bytes = 64u * self->nevents + 256u;
    //  Applying is idempotent: a held step's second call finds nothing planned.
    s_apply_last_step(self, prev_failed);

    //  Saves for chunks completed by the step that just ran.
    for (uint32_t slot = self->active.head; slot != KVT_ILIST_NONE; slot = self->req_next[slot])
        if (self->reqs[slot].state == R_RUNNING)
            kvt_sched_emit_saves(self, slot);

    //  Admission, FIFO: stop at the first request that does not fit.
    while (self->waiting.head != KVT_ILIST_NONE &&
           self->stats.running + self->stats.loading < self->cfg.max_running)
        if (!s_admit(self, self->waiting.head))
            break;

    //  Decodes first (one token each), then prefill chunks within the budget.
    uint32_t budget = self->cfg.step_tokens;
    for (uint32_t pass = 0; pass < 2; pass++) {
        for (uint32_t slot = self->active.head; slot != KVT_ILIST_NONE && budget > 0;
             slot = self->req_next[slot]) {
            kvt_sreq_t *r = &self->reqs[slot];
            if (r->state != R_RUNNING)
                continue;
            bool decoding = r->computed >= r->nprompt;
            if (decoding != (pass == 0))
                continue;
            uint32_t end = decoding ? r->computed + 1 : r->nprompt;
            if (end - r->computed > budget)
                end = r->computed + budget;
            if (s_plan_entry(self, r, r->computed, end) != 0)
                break;
            budget -= end - r->computed;
        }
    }
    bool work = self->p_nentries || self->p_nloads || self->p_nsaves;
    bool outstanding = self->stats.loading > 0 || self->stats.saves_outstanding > 0;
    if (!work && outstanding)
        return KVT_SCHED_HOLD;
    self->stats.steps++;
    self->next_step = step + 1;
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
    return self->stats.records == 0 && self->stats.saves_outstanding == 0 &&
           kvt_blockmgr_in_use(self->bm) == 0;
}

void kvt_sched_stats(const kvt_sched_t *self, kvt_sched_stats_t *out)
{
    *out = self->stats;
    out->leased_blocks = self->leased;
    out->blocks_in_use = kvt_blockmgr_in_use(self->bm);
}
