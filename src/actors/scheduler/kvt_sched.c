/*  kvt_sched — see kvt_sched.h. */
#include "kvt_sched.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "actors/common/kvt_counters.h"
#include "actors/common/kvt_hmap.h"
#include "actors/common/kvt_ilist.h"
#include "actors/common/kvt_prefix.h"
#include "kvt_blockmgr.h"
#include "kvt_tierindex.h"

enum { R_FREE = 0, R_WAITING, R_LOADING, R_RUNNING, R_DONE };

typedef struct {
    uint64_t id;             //  request id
    uint32_t gen;            //  generation of the current admission
    uint8_t state;           //  R_*
    uint32_t *tokens;        //  prompt + predetermined outputs (nfeed + 1 tokens)
    uint32_t nprompt;        //  prompt tokens
    uint32_t max_new;        //  tokens to generate
    uint32_t nfeed;          //  tokens that go through a forward: nprompt + max_new - 1
    kvt_hash_t *hashes;      //  prefix hash per full block of the fed tokens
    uint32_t nhashed;        //  hashes[0..nhashed) computed
    uint32_t *blocks;        //  block table (ceil (nfeed / bs) entries once admitted)
    uint32_t nblocks;        //  entries in blocks (0 while waiting)
    uint32_t computed;       //  tokens whose KV is valid in the blocks
    uint32_t load_floor;     //  first token of the outstanding load
    uint32_t load_end;       //  resume point B of the outstanding load
    uint32_t save_frontier;  //  tokens [0, frontier) are in the tier or being saved
    uint32_t saves_inflight; //  chunk saves without a verdict
    uint32_t save_budget;    //  failed-save re-emits left
    uint32_t save_attempt;   //  attempt number of the request's saves (bumped by a re-emit)
    uint32_t verify_end;     //  > 0: the next entry asks the runner to verify [0, verify_end)
    uint32_t registered;     //  blocks [0, registered) are shared or indexed
    uint32_t planned_end;    //  end token of this request's entry in the last plan (0 = none)
    uint64_t arrival_us;     //  trace arrival time
} s_req_t;

typedef struct {
    uint32_t req_slot; //  request record
    kvt_opid_t op;     //  save operation id
    kvt_hash_t key;    //  chunk key
    uint32_t start;    //  first token of the chunk
    bool live;         //  slot in use
} s_save_t;

struct _kvt_sched_t {
    kvt_sched_cfg_t cfg;      //  configuration
    uint32_t bpc;             //  blocks per chunk
    kvt_blockmgr_t *bm;       //  HBM blocks
    kvt_tierindex_t *tier;    //  tier view
    s_req_t *reqs;            //  request records
    uint32_t nreqs_cap;       //  records allocated
    uint32_t *req_prev;       //  queue links (waiting / active lists)
    uint32_t *req_next;       //  queue links
    uint32_t *req_free;       //  free record slots
    uint32_t nreq_free;       //  entries in req_free
    kvt_hmap_t *by_id;        //  request id → slot
    kvt_ilist_t waiting;      //  R_WAITING, arrival order
    kvt_ilist_t active;       //  R_LOADING and R_RUNNING, admission order
    s_save_t *saves;          //  outstanding chunk saves
    uint32_t *save_blocks;    //  bpc leased blocks per save slot
    uint32_t nsaves_cap;      //  save slots allocated
    uint32_t *save_free;      //  free save slots
    uint32_t nsave_free;      //  entries in save_free
    kvt_hmap_t *save_by_id;   //  hash (op, key) → save slot
    kvt_hmap_t *inflight;     //  chunk key → 1 while any request's save of it is out
    uint32_t leased;          //  block references held by saves
    uint32_t *scratch_blocks; //  block ids for the match at admission
    //  plan scratch (valid until the next plan)
    kvt_entry_t *p_entries;   //  entries
    uint32_t p_nentries;      //  used
    uint32_t p_entries_cap;   //  allocated
    kvt_load_spec_t *p_loads; //  loads
    uint32_t p_nloads;        //  used
    uint32_t p_loads_cap;     //  allocated
    kvt_save_spec_t *p_saves; //  saves
    uint32_t p_nsaves;        //  used
    uint32_t p_saves_cap;     //  allocated
    uint32_t *p_u32;          //  block ids of entries, loads and saves
    size_t p_nu32;            //  used
    size_t p_u32_cap;         //  allocated
    kvt_hash_t *p_h;          //  hashes / keys of entries, loads and saves
    size_t p_nh;              //  used
    size_t p_h_cap;           //  allocated
    kvt_event_t *events;      //  events since the last plan
    uint32_t nevents;         //  used
    uint32_t events_cap;      //  allocated
    kvt_event_t *p_events;    //  events handed out with the last plan
    uint32_t p_events_cap;    //  allocated
    kvt_sched_stats_t stats;  //  counters
};

// ------------------------------------------------------------ helpers ----

static int s_reserve(void **arr, uint32_t *cap, uint32_t need, size_t elem)
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

static int s_reserve_sz(void **arr, size_t *cap, size_t need, size_t elem)
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

static kvt_hash_t s_save_id(kvt_opid_t op, kvt_hash_t key, uint32_t attempt)
{
    uint64_t in[5] = {op.req, op.gen, key.hi, key.lo, attempt};
    XXH128_hash_t h = XXH3_128bits(in, sizeof in);
    kvt_hash_t out = {h.high64, h.low64};
    return out;
}

static void s_event(kvt_sched_t *self, const s_req_t *r, uint8_t type, uint32_t a, uint32_t b,
                    uint32_t c)
{
    if (s_reserve((void **)&self->events, &self->events_cap, self->nevents + 1,
                  sizeof(kvt_event_t)) != 0)
        return; //  an event lost to OOM only affects measurements
    kvt_event_t *ev = &self->events[self->nevents++];
    ev->op.req = r->id;
    ev->op.gen = r->gen;
    ev->type = type;
    ev->a = a;
    ev->b = b;
    ev->c = c;
}

//  Hash of block b of request r, computing the chain up to it on demand.
static kvt_hash_t s_hash_at(kvt_sched_t *self, s_req_t *r, uint32_t b)
{
    uint32_t bs = self->cfg.block_size;
    while (r->nhashed <= b) {
        kvt_hash_t prev = r->nhashed ? r->hashes[r->nhashed - 1] : self->cfg.ns;
        r->hashes[r->nhashed] = kvt_block_hash(prev, r->tokens + (size_t)r->nhashed * bs, bs);
        r->nhashed++;
    }
    return r->hashes[b];
}

static kvt_hash_t s_chunk_key(kvt_sched_t *self, s_req_t *r, uint32_t chunk)
{
    return s_hash_at(self, r, (chunk + 1) * self->bpc - 1);
}

static void s_free_record(kvt_sched_t *self, uint32_t slot)
{
    s_req_t *r = &self->reqs[slot];
    kvt_hmap_del(self->by_id, kvt_hmap_key64(r->id), NULL);
    free(r->tokens);
    free(r->hashes);
    free(r->blocks);
    memset(r, 0, sizeof(*r));
    self->req_free[self->nreq_free++] = slot;
    self->stats.records--;
}

static int s_grow_reqs(kvt_sched_t *self)
{
    uint32_t cap = self->nreqs_cap ? self->nreqs_cap * 2 : 64;
    s_req_t *reqs = realloc(self->reqs, (size_t)cap * sizeof(s_req_t));
    if (!reqs)
        return -1;
    self->reqs = reqs;
    memset(reqs + self->nreqs_cap, 0, (size_t)(cap - self->nreqs_cap) * sizeof(s_req_t));
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

static int s_grow_saves(kvt_sched_t *self)
{
    uint32_t cap = self->nsaves_cap ? self->nsaves_cap * 2 : 64;
    s_save_t *saves = realloc(self->saves, (size_t)cap * sizeof(s_save_t));
    if (!saves)
        return -1;
    self->saves = saves;
    memset(saves + self->nsaves_cap, 0, (size_t)(cap - self->nsaves_cap) * sizeof(s_save_t));
    uint32_t *b = realloc(self->save_blocks, (size_t)cap * self->bpc * sizeof(uint32_t));
    if (!b)
        return -1;
    self->save_blocks = b;
    uint32_t *f = realloc(self->save_free, (size_t)cap * sizeof(uint32_t));
    if (!f)
        return -1;
    self->save_free = f;
    for (uint32_t i = cap; i-- > self->nsaves_cap;)
        self->save_free[self->nsave_free++] = i;
    self->nsaves_cap = cap;
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
    else if (cfg->max_running == 0)
        bad = "max_running must be ≥ 1";
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

static uint32_t s_blocks_needed(const kvt_sched_t *self, uint32_t nfeed)
{
    return (nfeed + self->cfg.block_size - 1) / self->cfg.block_size;
}

int kvt_sched_arrive(kvt_sched_t *self, const kvt_arrival_t *a)
{
    self->stats.arrivals++;
    //  A refusal is reported as the request's first (and only) generation.
    s_req_t probe = {.id = a->req, .gen = 1};
    bool refuse = a->ntokens == 0 || a->max_new_tokens == 0 ||
                  kvt_hmap_get(self->by_id, kvt_hmap_key64(a->req), NULL);
    uint64_t nfeed = (uint64_t)a->ntokens + a->max_new_tokens - 1;
    if (!refuse && (nfeed > KVT_MSG_MAX_TOKENS * 2ull ||
                    s_blocks_needed(self, (uint32_t)nfeed) > self->cfg.hbm_blocks))
        refuse = true;
    if (refuse) {
        self->stats.rejected++;
        s_event(self, &probe, KVT_EV_FINISH, a->ntokens, 0, 1);
        return -1;
    }
    if (self->nreq_free == 0 && s_grow_reqs(self) != 0)
        return -1;
    uint32_t slot = self->req_free[self->nreq_free - 1];
    s_req_t *r = &self->reqs[slot];
    memset(r, 0, sizeof(*r));
    r->id = a->req;
    r->nprompt = a->ntokens;
    r->max_new = a->max_new_tokens;
    r->nfeed = (uint32_t)nfeed;
    r->arrival_us = a->arrival_us;
    r->tokens = malloc(((size_t)r->nfeed + 1) * sizeof(uint32_t));
    r->hashes = malloc(((size_t)r->nfeed / self->cfg.block_size + 1) * sizeof(kvt_hash_t));
    if (!r->tokens || !r->hashes || kvt_hmap_put(self->by_id, kvt_hmap_key64(r->id), slot)) {
        free(r->tokens);
        free(r->hashes);
        memset(r, 0, sizeof(*r));
        return -1;
    }
    self->nreq_free--;
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

static void s_emit_saves(kvt_sched_t *self, uint32_t slot);

static void s_release_blocks(kvt_sched_t *self, s_req_t *r)
{
    //  Last block first: the tail lands at the old end of the LRU, so HBM
    //  evicts suffixes before the prefixes other requests share.
    for (uint32_t i = r->nblocks; i-- > 0;)
        kvt_blockmgr_unref(self->bm, r->blocks[i]);
    r->nblocks = 0;
}

static void s_index_blocks(kvt_sched_t *self, s_req_t *r, uint32_t upto_tokens)
{
    uint32_t full = upto_tokens / self->cfg.block_size;
    for (uint32_t b = r->registered; b < full; b++) {
        kvt_hash_t h = s_hash_at(self, r, b);
        kvt_blockmgr_register(self->bm, r->blocks[b], h,
                              r->tokens + (size_t)b * self->cfg.block_size);
    }
    if (full > r->registered)
        r->registered = full;
}

static void s_apply_last_step(kvt_sched_t *self)
{
    uint32_t slot = self->active.head;
    while (slot != KVT_ILIST_NONE) {
        uint32_t next = self->req_next[slot];
        s_req_t *r = &self->reqs[slot];
        if (r->state == R_RUNNING && r->planned_end > 0) {
            r->computed = r->planned_end;
            r->planned_end = 0;
            s_index_blocks(self, r, r->computed);
            if (r->computed >= r->nfeed) {
                r->state = R_DONE;
                kvt_ilist_remove(&self->active, self->req_prev, self->req_next, slot);
                self->stats.running--;
                self->stats.finished++;
                s_event(self, r, KVT_EV_FINISH, r->nprompt, r->max_new, 0);
                s_emit_saves(self, slot);
                //  With saves out, the record keeps its blocks until the last
                //  verdict and releases them all at once, tail first, so the
                //  LRU order does not depend on the order verdicts arrive.
                if (r->saves_inflight == 0) {
                    s_release_blocks(self, r);
                    s_free_record(self, slot);
                }
            }
        }
        slot = next;
    }
}

// -------------------------------------------------------------- saves ----

static int s_plan_save(kvt_sched_t *self, s_req_t *r, uint32_t start, uint32_t end)
{
    uint32_t nchunks = (end - start) / self->cfg.chunk_size;
    uint32_t nblocks = (end - start) / self->cfg.block_size;
    if (s_reserve((void **)&self->p_saves, &self->p_saves_cap, self->p_nsaves + 1,
                  sizeof(kvt_save_spec_t)) ||
        s_reserve_sz((void **)&self->p_u32, &self->p_u32_cap, self->p_nu32 + nblocks,
                     sizeof(uint32_t)) ||
        s_reserve_sz((void **)&self->p_h, &self->p_h_cap, self->p_nh + nchunks, sizeof(kvt_hash_t)))
        return -1;
    kvt_save_spec_t *sp = &self->p_saves[self->p_nsaves++];
    memset(sp, 0, sizeof(*sp));
    sp->op.req = r->id;
    sp->op.gen = r->gen;
    sp->attempt = r->save_attempt;
    sp->start = start;
    sp->end = end;
    //  Pointers are fixed up once the scratch stops growing (s_finish_plan).
    sp->blocks = (uint32_t *)(uintptr_t)self->p_nu32;
    sp->nblocks = nblocks;
    sp->keys = (kvt_hash_t *)(uintptr_t)self->p_nh;
    sp->nkeys = nchunks;
    memcpy(self->p_u32 + self->p_nu32, r->blocks + start / self->cfg.block_size,
           (size_t)nblocks * sizeof(uint32_t));
    self->p_nu32 += nblocks;
    for (uint32_t c = 0; c < nchunks; c++)
        self->p_h[self->p_nh++] = s_chunk_key(self, r, start / self->cfg.chunk_size + c);
    return 0;
}

//  True while some request's save of this chunk is out: one copy of a
//  chunk in flight is enough (equal keys are equal bytes), and a second
//  writer would only be refused by the pool as a duplicate.
static bool s_save_outstanding(kvt_sched_t *self, kvt_hash_t key)
{
    return kvt_hmap_get(self->inflight, key, NULL);
}

//  Records an outstanding chunk save and leases its source blocks.
static int s_track_save(kvt_sched_t *self, uint32_t slot, uint32_t chunk, kvt_hash_t key)
{
    s_req_t *r = &self->reqs[slot];
    if (self->nsave_free == 0 && s_grow_saves(self) != 0)
        return -1;
    uint32_t si = self->save_free[self->nsave_free - 1];
    kvt_opid_t op = {r->id, r->gen};
    if (kvt_hmap_put(self->inflight, key, 1) != 0)
        return -1;
    if (kvt_hmap_put(self->save_by_id, s_save_id(op, key, r->save_attempt), si) != 0) {
        kvt_hmap_del(self->inflight, key, NULL);
        return -1;
    }
    self->nsave_free--;
    s_save_t *s = &self->saves[si];
    s->req_slot = slot;
    s->op = op;
    s->key = key;
    s->start = chunk * self->cfg.chunk_size;
    s->live = true;
    uint32_t *lease = self->save_blocks + (size_t)si * self->bpc;
    for (uint32_t i = 0; i < self->bpc; i++) {
        lease[i] = r->blocks[chunk * self->bpc + i];
        kvt_blockmgr_ref(self->bm, lease[i]);
    }
    self->leased += self->bpc;
    r->saves_inflight++;
    self->stats.saves_dispatched++;
    self->stats.saves_outstanding++;
    return 0;
}

//  Emits saves for the request's complete chunks beyond its save frontier,
//  skipping chunks the tier already holds or that are being saved, as
//  contiguous runs.
static void s_emit_saves(kvt_sched_t *self, uint32_t slot)
{
    s_req_t *r = &self->reqs[slot];
    if (self->cfg.tier_chunks == 0)
        return;
    uint32_t cs = self->cfg.chunk_size;
    uint32_t upto = r->computed / cs * cs;
    uint32_t run_start = UINT32_MAX;
    for (uint32_t t = r->save_frontier; t < upto; t += cs) {
        kvt_hash_t key = s_chunk_key(self, r, t / cs);
        bool skip = kvt_tierindex_contains(self->tier, key) || s_save_outstanding(self, key);
        if (!skip && s_track_save(self, slot, t / cs, key) != 0)
            skip = true; //  out of memory: leave it unsaved
        else if (skip)
            self->stats.saves_skipped++;
        if (skip) {
            if (run_start != UINT32_MAX)
                s_plan_save(self, r, run_start, t);
            run_start = UINT32_MAX;
        } else if (run_start == UINT32_MAX)
            run_start = t;
    }
    if (run_start != UINT32_MAX)
        s_plan_save(self, r, run_start, upto);
    if (upto > r->save_frontier)
        r->save_frontier = upto;
}

// ---------------------------------------------------------- admission ----

static int s_plan_load(kvt_sched_t *self, s_req_t *r, uint32_t floor_tok, uint32_t end_tok)
{
    uint32_t nchunks = (end_tok - floor_tok) / self->cfg.chunk_size;
    uint32_t nblocks = (end_tok - floor_tok) / self->cfg.block_size;
    if (s_reserve((void **)&self->p_loads, &self->p_loads_cap, self->p_nloads + 1,
                  sizeof(kvt_load_spec_t)) ||
        s_reserve_sz((void **)&self->p_u32, &self->p_u32_cap, self->p_nu32 + nblocks,
                     sizeof(uint32_t)) ||
        s_reserve_sz((void **)&self->p_h, &self->p_h_cap, self->p_nh + nchunks, sizeof(kvt_hash_t)))
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
        self->p_h[self->p_nh++] = s_chunk_key(self, r, floor_tok / self->cfg.chunk_size + c);
    return 0;
}

//  Tries to admit the request in `slot`. Returns 1 when admitted, 0 when its
//  blocks do not fit now.
static int s_admit(kvt_sched_t *self, uint32_t slot)
{
    s_req_t *r = &self->reqs[slot];
    uint32_t bs = self->cfg.block_size, cs = self->cfg.chunk_size;
    //  A hit always leaves at least one prompt token to compute.
    uint32_t max_hit_blocks = (r->nprompt - 1) / bs;
    if (max_hit_blocks > self->cfg.hbm_blocks)
        max_hit_blocks = self->cfg.hbm_blocks;
    for (uint32_t b = 0; b < max_hit_blocks; b++)
        s_hash_at(self, r, b);
    uint32_t m =
        kvt_blockmgr_match(self->bm, r->hashes, r->tokens, max_hit_blocks, self->scratch_blocks);
    uint32_t hbm = m * bs;

    uint32_t max_chunks = (r->nprompt - 1) / cs;
    uint32_t tier = 0;
    if (self->cfg.tier_chunks > 0 && max_chunks > 0) {
        kvt_hash_t keys[64];
        //  Look up in batches so a long prompt needs no allocation.
        uint32_t c = 0;
        while (c < max_chunks) {
            uint32_t n = max_chunks - c < 64 ? max_chunks - c : 64;
            for (uint32_t i = 0; i < n; i++)
                keys[i] = s_chunk_key(self, r, c + i);
            uint32_t got = kvt_tierindex_lookup(self->tier, keys, n);
            c += got;
            if (got < n)
                break;
        }
        tier = c * cs;
    }
    bool load = tier > hbm;
    //  The KV leg starts on the chunk grid: keep the shared blocks below the
    //  chunk floor of the HBM hit and refill [floor, hbm) privately, so no
    //  shared block is ever written.
    uint32_t keep_tokens = load ? hbm / cs * cs : hbm;
    uint32_t keep = keep_tokens / bs;
    uint32_t need = s_blocks_needed(self, r->nfeed);
    uint32_t fresh = need - keep;
    uint32_t unreferenced_kept = 0;
    for (uint32_t i = 0; i < keep; i++)
        if (kvt_blockmgr_refs(self->bm, self->scratch_blocks[i]) == 0)
            unreferenced_kept++;
    if (kvt_blockmgr_available(self->bm) < (uint64_t)fresh + unreferenced_kept)
        return 0;

    r->blocks = malloc((size_t)need * sizeof(uint32_t));
    if (!r->blocks)
        return 0;
    for (uint32_t i = 0; i < keep; i++) {
        r->blocks[i] = self->scratch_blocks[i];
        kvt_blockmgr_ref(self->bm, r->blocks[i]);
    }
    int rc = kvt_blockmgr_alloc(self->bm, fresh, r->blocks + keep);
    assert(rc == 0);
    (void)rc;
    r->nblocks = need;
    r->registered = keep;
    r->gen++;
    kvt_ilist_remove(&self->waiting, self->req_prev, self->req_next, slot);
    kvt_ilist_push_tail(&self->active, self->req_prev, self->req_next, slot);
    self->stats.waiting--;
    self->stats.admitted++;
    self->stats.hbm_hit_tokens += keep_tokens;
    s_event(self, r, KVT_EV_ADMIT, keep_tokens, load ? tier - keep_tokens : 0, r->nprompt);
    if (load && s_plan_load(self, r, keep_tokens, tier) == 0) {
        r->state = R_LOADING;
        r->computed = keep_tokens;
        r->load_floor = keep_tokens;
        r->load_end = tier;
        r->save_frontier = tier;
        r->verify_end = tier;
        self->stats.loading++;
        self->stats.loads_dispatched++;
    } else {
        r->state = R_RUNNING;
        r->computed = keep_tokens;
        //  Chunks the tier already holds need no save.
        r->save_frontier = tier < keep_tokens ? tier : keep_tokens / cs * cs;
        r->verify_end = keep_tokens;
        self->stats.running++;
    }
    r->save_budget = self->cfg.save_retries;
    return 1;
}

// ----------------------------------------------------------- planning ----

static int s_plan_entry(kvt_sched_t *self, s_req_t *r, uint32_t start, uint32_t end)
{
    uint32_t bs = self->cfg.block_size;
    uint32_t first = r->verify_end ? 0 : start / bs;
    uint32_t last = (end - 1) / bs;
    uint32_t n = last - first + 1;
    if (s_reserve((void **)&self->p_entries, &self->p_entries_cap, self->p_nentries + 1,
                  sizeof(kvt_entry_t)) ||
        s_reserve_sz((void **)&self->p_u32, &self->p_u32_cap, self->p_nu32 + n, sizeof(uint32_t)) ||
        s_reserve_sz((void **)&self->p_h, &self->p_h_cap, self->p_nh + n, sizeof(kvt_hash_t)))
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
        self->p_h[self->p_nh++] = (b + 1) * bs <= end ? s_hash_at(self, r, b) : zero;
    }
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
    //  Hand the accumulated events out with this plan.
    kvt_event_t *t = self->p_events;
    uint32_t tcap = self->p_events_cap;
    self->p_events = self->events;
    self->p_events_cap = self->events_cap;
    self->events = t;
    self->events_cap = tcap;
    memset(plan, 0, sizeof(*plan));
    plan->step = step;
    plan->entries = self->p_entries;
    plan->nentries = self->p_nentries;
    plan->loads = self->p_loads;
    plan->nloads = self->p_nloads;
    plan->saves = self->p_saves;
    plan->nsaves = self->p_nsaves;
    plan->events = self->p_events;
    plan->nevents = self->nevents;
    self->nevents = 0;
}

int kvt_sched_plan(kvt_sched_t *self, uint64_t step, kvt_step_plan_t *plan)
{
    self->p_nentries = self->p_nloads = self->p_nsaves = 0;
    self->p_nu32 = self->p_nh = 0;
    s_apply_last_step(self);

    //  Saves for chunks completed by the step that just ran.
    for (uint32_t slot = self->active.head; slot != KVT_ILIST_NONE; slot = self->req_next[slot])
        if (self->reqs[slot].state == R_RUNNING)
            s_emit_saves(self, slot);

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
            s_req_t *r = &self->reqs[slot];
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
        return -1;
    self->stats.steps++;
    s_finish_plan(self, step, plan);
    plan->idle = !work && !outstanding && self->stats.waiting == 0;
    return work ? 1 : 0;
}

// ----------------------------------------------------------- verdicts ----

static int s_load_verdict(kvt_sched_t *self, const kvt_verdict_t *v)
{
    uint32_t slot;
    if (!kvt_hmap_get(self->by_id, kvt_hmap_key64(v->op.req), &slot))
        return -1;
    s_req_t *r = &self->reqs[slot];
    if (r->state != R_LOADING || r->gen != v->op.gen)
        return -1;
    self->stats.loading--;
    self->stats.running++;
    r->state = R_RUNNING;
    if (v->ok) {
        r->computed = r->load_end;
        s_index_blocks(self, r, r->computed);
        self->stats.loads_ok++;
        self->stats.tier_hit_tokens += r->load_end - r->load_floor;
        //  lower: the most chunks any rank had to read from below the CPU pool.
        uint32_t lower_tokens = v->lower * self->cfg.chunk_size;
        if (lower_tokens > r->load_end - r->load_floor)
            lower_tokens = r->load_end - r->load_floor;
        self->stats.lower_hit_tokens += lower_tokens;
        s_event(self, r, KVT_EV_LOADED, r->load_end, r->load_end - r->load_floor, lower_tokens);
    } else {
        //  Retreat to the kept HBM prefix; the private blocks the load was
        //  filling are recomputed in place. A miss means the tier view was
        //  stale: retract those keys and let this request save them again.
        self->stats.loads_failed++;
        r->computed = r->load_floor;
        r->verify_end = r->load_floor;
        r->save_frontier = r->load_floor / self->cfg.chunk_size * self->cfg.chunk_size;
        if (v->detail == KVT_DETAIL_MISS)
            for (uint32_t t = r->load_floor; t < r->load_end; t += self->cfg.chunk_size)
                kvt_tierindex_retract(self->tier, s_chunk_key(self, r, t / self->cfg.chunk_size));
        s_event(self, r, KVT_EV_RETREAT, r->load_floor, v->detail, r->load_end);
    }
    return 0;
}

static int s_save_verdict(kvt_sched_t *self, const kvt_verdict_t *v)
{
    uint32_t si;
    if (!kvt_hmap_del(self->save_by_id, s_save_id(v->op, v->key, v->attempt), &si))
        return -1;
    s_save_t *s = &self->saves[si];
    kvt_hmap_del(self->inflight, s->key, NULL);
    uint32_t *lease = self->save_blocks + (size_t)si * self->bpc;
    for (uint32_t i = 0; i < self->bpc; i++)
        kvt_blockmgr_unref(self->bm, lease[i]);
    self->leased -= self->bpc;
    self->stats.saves_outstanding--;
    s_req_t *r = &self->reqs[s->req_slot];
    assert(r->saves_inflight > 0 && r->id == s->op.req);
    r->saves_inflight--;
    if (v->ok) {
        kvt_tierindex_insert(self->tier, s->key);
        self->stats.saves_ok++;
    } else {
        self->stats.saves_failed++;
        //  The frontier goes back so the chunk is emitted again, unless the
        //  request has retired or used its retries.
        if (r->state == R_RUNNING && r->gen == s->op.gen && r->save_budget > 0 &&
            s->start < r->save_frontier) {
            r->save_budget--;
            r->save_attempt++;
            r->save_frontier = s->start;
            self->stats.saves_reemitted++;
        }
    }
    s->live = false;
    self->save_free[self->nsave_free++] = si;
    if (r->state == R_DONE && r->saves_inflight == 0) {
        s_release_blocks(self, r);
        s_free_record(self, s->req_slot);
    }
    return 0;
}

int kvt_sched_verdict(kvt_sched_t *self, const kvt_verdict_t *v)
{
    int rc = -1;
    if (v->chan == KVT_CHAN_LOAD)
        rc = s_load_verdict(self, v);
    else if (v->chan == KVT_CHAN_SAVE)
        rc = s_save_verdict(self, v);
    if (rc != 0)
        self->stats.stale_verdicts++;
    return rc;
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

void kvt_sched_counters(const kvt_sched_t *self, kvt_counter_t *c, uint32_t *n, uint32_t cap)
{
    kvt_sched_stats_t st;
    kvt_sched_stats(self, &st);
#define S_C(field) kvt_counter_add(c, n, cap, "sched." #field, st.field)
    S_C(arrivals);
    S_C(rejected);
    S_C(admitted);
    S_C(finished);
    S_C(hbm_hit_tokens);
    S_C(tier_hit_tokens);
    S_C(lower_hit_tokens);
    S_C(loads_dispatched);
    S_C(loads_ok);
    S_C(loads_failed);
    S_C(saves_dispatched);
    S_C(saves_ok);
    S_C(saves_failed);
    S_C(saves_reemitted);
    S_C(saves_skipped);
    S_C(stale_verdicts);
    S_C(steps);
    S_C(tokens_planned);
    S_C(waiting);
    S_C(running);
    S_C(loading);
    S_C(saves_outstanding);
    S_C(leased_blocks);
    S_C(blocks_in_use);
    S_C(records);
#undef S_C
    kvt_blockmgr_stats_t b;
    kvt_blockmgr_stats(self->bm, &b);
    kvt_counter_add(c, n, cap, "blocks.total", kvt_blockmgr_total(self->bm));
    kvt_counter_add(c, n, cap, "blocks.allocated", b.allocated);
    kvt_counter_add(c, n, cap, "blocks.evicted", b.evicted);
    kvt_counter_add(c, n, cap, "blocks.registered", b.registered);
    kvt_counter_add(c, n, cap, "blocks.duplicate_regs", b.duplicate_regs);
    kvt_counter_add(c, n, cap, "blocks.hit_blocks", b.hit_blocks);
    kvt_counter_add(c, n, cap, "blocks.token_mismatch", b.token_mismatch);
    kvt_tierindex_stats_t t;
    kvt_tierindex_stats(self->tier, &t);
    kvt_counter_add(c, n, cap, "tierview.size", kvt_tierindex_size(self->tier));
    kvt_counter_add(c, n, cap, "tierview.inserted", t.inserted);
    kvt_counter_add(c, n, cap, "tierview.evicted", t.evicted);
    kvt_counter_add(c, n, cap, "tierview.retracted", t.retracted);
    kvt_counter_add(c, n, cap, "tierview.lookups", t.lookups);
    kvt_counter_add(c, n, cap, "tierview.hit_keys", t.hit_keys);
}

int kvt_sched_audit(const kvt_sched_t *self, char *err, size_t errlen)
{
    uint32_t total = kvt_blockmgr_total(self->bm);
    uint32_t *expect = calloc(total, sizeof(uint32_t));
    if (!expect) {
        snprintf(err, errlen, "audit: out of memory");
        return -1;
    }
    int rc = -1;
    uint32_t waiting = 0, running = 0, loading = 0, records = 0, inflight = 0;
    for (uint32_t i = 0; i < self->nreqs_cap; i++) {
        const s_req_t *r = &self->reqs[i];
        if (r->state == R_FREE)
            continue;
        records++;
        waiting += r->state == R_WAITING;
        running += r->state == R_RUNNING;
        loading += r->state == R_LOADING;
        inflight += r->saves_inflight;
        for (uint32_t b = 0; b < r->nblocks; b++)
            expect[r->blocks[b]]++;
    }
    uint32_t live_saves = 0;
    for (uint32_t i = 0; i < self->nsaves_cap; i++) {
        if (!self->saves[i].live)
            continue;
        live_saves++;
        for (uint32_t b = 0; b < self->bpc; b++)
            expect[self->save_blocks[(size_t)i * self->bpc + b]]++;
    }
    for (uint32_t b = 0; b < total; b++)
        if (expect[b] != kvt_blockmgr_refs(self->bm, b)) {
            snprintf(err, errlen, "audit: block %u has %u references, expected %u", b,
                     kvt_blockmgr_refs(self->bm, b), expect[b]);
            goto done;
        }
    if (waiting != self->stats.waiting || running != self->stats.running ||
        loading != self->stats.loading || records != self->stats.records) {
        snprintf(err, errlen,
                 "audit: gauges waiting/running/loading/records %u/%u/%u/%u, records say "
                 "%u/%u/%u/%u",
                 self->stats.waiting, self->stats.running, self->stats.loading, self->stats.records,
                 waiting, running, loading, records);
        goto done;
    }
    if (live_saves != self->stats.saves_outstanding || inflight != live_saves ||
        live_saves * self->bpc != self->leased) {
        snprintf(err, errlen, "audit: %u live saves, %u in flight per requests, gauge %u",
                 live_saves, inflight, self->stats.saves_outstanding);
        goto done;
    }
    if (self->stats.saves_dispatched !=
        self->stats.saves_ok + self->stats.saves_failed + self->stats.saves_outstanding) {
        snprintf(err, errlen, "audit: saves dispatched != settled + outstanding");
        goto done;
    }
    if (self->stats.loads_dispatched !=
        self->stats.loads_ok + self->stats.loads_failed + self->stats.loading) {
        snprintf(err, errlen, "audit: loads dispatched != settled + outstanding");
        goto done;
    }
    rc = 0;
done:
    free(expect);
    return rc;
}
