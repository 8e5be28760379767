/*  kvt_sched — the scheduler core's coordinator (see kvt_sched.h): new and
    destroy, arrival, abort, preemption, retirement, the verdict router by
    channel, and the stats as the sum of the modules' counters. Only the
    coordinator moves a request between waiting, loading, running and done.
    The modules it calls and what each owns: docs/architecture.md. */
#include "kvt_sched.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/common/kvt_prefix.h"
#include "kvt_sched_int.h"

// ---------------------------------------------------------- lifecycle ----

//  The checkpoint side of the one HBM budget (kvt_blockmgr_peer_t and the
//  pool's release hook).
static bool s_peer_victim(void *arg, uint64_t *stamp, bool *gone)
{
    return kvt_ckpt_victim(((kvt_sched_t *)arg)->ck, stamp, gone);
}

static void s_peer_evict(void *arg)
{
    kvt_ckpt_evict_one(((kvt_sched_t *)arg)->ck);
}

static uint32_t s_peer_evictable(void *arg)
{
    kvt_sched_t *self = arg;
    return kvt_ckpt_evictable(self->ck) * self->ck_blocks;
}

static void s_peer_gone(void *arg, kvt_hash_t hash)
{
    kvt_ckpt_kv_gone(((kvt_sched_t *)arg)->ck, hash);
}

static uint64_t s_ck_tick(void *arg)
{
    return kvt_blockmgr_tick(((kvt_sched_t *)arg)->bm);
}

static void s_ck_release(void *arg, uint32_t entry)
{
    (void)entry;
    kvt_sched_t *self = arg;
    kvt_blockmgr_unwithhold(self->bm, self->ck_blocks);
}

uint32_t kvt_sched_ckpt_reserve(kvt_sched_t *self, kvt_hash_t h)
{
    if (!self->ck_blocks || kvt_ckpt_known(self->ck, h))
        return kvt_ckpt_reserve(self->ck, h); //  a separate pool, or a refresh
    if (kvt_blockmgr_withhold(self->bm, self->ck_blocks) != 0) {
        kvt_ckpt_count_full(self->ck);
        return KVT_CKPT_NONE;
    }
    uint32_t e = kvt_ckpt_reserve(self->ck, h);
    assert(e != KVT_CKPT_NONE); //  the budget holds fewer checkpoints than the pool's units
    return e;
}

void kvt_sched_mark_low(kvt_sched_t *self, kvt_sreq_t *r)
{
    r->keep_below = UINT32_MAX;
    if (!self->ck_blocks)
        return;
    //  The deepest registered block ending at a valid HBM checkpoint: the
    //  blocks above it cannot resume from HBM (O(blocks), as the release).
    uint32_t b = r->registered;
    while (b > 0 && !kvt_ckpt_has(self->ck, kvt_reqtab_hash_at(self->rt, r, b - 1)))
        b--;
    r->keep_below = b;
}

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
    else if ((unsigned)cfg->state_policy >= KVT_STATE_POLICIES)
        bad = "state_policy must be one of kvt_sched_state_policy_t";
    if (bad) {
        snprintf(err, errlen, "scheduler: %s", bad);
        return NULL;
    }
    kvt_sched_hbm_split_t split = {0};
    if (cfg->state_bytes > 0 && cfg->block_bytes > 0 &&
        kvt_sched_hbm_split(cfg->hbm_blocks, cfg->block_bytes, cfg->state_bytes, cfg->max_running,
                            cfg->chunk_size / cfg->block_size * 2, &split, err, errlen) != 0)
        return NULL;
    kvt_sched_t *self = calloc(1, sizeof(*self));
    if (!self)
        goto oom;
    self->cfg = *cfg;
    self->bpc = cfg->chunk_size / cfg->block_size;
    self->next_step = 1;
    self->applied = true; //  no step ran before the first plan
    self->ck_blocks = split.ckpt_blocks;
    self->bm =
        kvt_blockmgr_new(split.kv_blocks ? split.kv_blocks : cfg->hbm_blocks, cfg->block_size);
    self->rt = kvt_reqtab_new(cfg->block_size, cfg->chunk_size, cfg->ns);
    self->pb = kvt_planbuf_new();
    //  A hit always leaves a prefill tail: one token, two with speculation.
    uint32_t tail = cfg->spec_tokens > 0 ? 2 : 1;
    kvt_lookups_cfg_t lkc = {.tier_chunks = cfg->tier_chunks,
                             .chunk_size = cfg->chunk_size,
                             .tail = tail,
                             .pin = cfg->lookup_pin,
                             .ttl_ms = cfg->lookup_ttl_ms,
                             .rank0_only = cfg->lookup_ranks == KVT_SCHED_LOOKUP_RANK0,
                             .timeout_us = cfg->lookup_timeout_us,
                             .max_age_us = cfg->lookup_max_age_us};
    self->lk = kvt_lookups_new(&lkc);
    if (!self->pb || !self->lk || !self->bm || !self->rt)
        goto oom;
    if (cfg->state_bytes > 0) {
        uint32_t nck = split.ckpt_units       ? split.ckpt_units
                       : cfg->hbm_checkpoints ? cfg->hbm_checkpoints
                                              : 4 * cfg->max_running;
        self->ck = kvt_ckpt_new(cfg->max_running, nck);
        if (self->ck)
            kvt_ckpt_set_order(self->ck, kvt_ckpt_order_of(cfg->state_policy, cfg->value_order),
                               cfg->state_bytes, cfg->block_bytes / cfg->block_size);
        if (self->ck && self->ck_blocks) {
            kvt_ckpt_share(self->ck, s_ck_tick, s_ck_release, self);
            kvt_blockmgr_peer_t peer = {s_peer_victim, s_peer_evict, s_peer_evictable, s_peer_gone,
                                        self};
            kvt_blockmgr_set_peer(self->bm, &peer);
        }
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
        if (!self->ck || !self->stidx)
            goto oom;
    }
    kvt_saves_cfg_t svc = {
        .block_size = cfg->block_size,
        .chunk_size = cfg->chunk_size,
        .bpc = self->bpc,
        .tier_chunks = cfg->tier_chunks,
        .save_retries = cfg->save_retries,
        .deadline_us = cfg->load_deadline_us ? cfg->load_deadline_us : KVT_SCHED_LOAD_DEADLINE_US,
        .drain_us = cfg->orphan_reclaim_us ? cfg->orphan_reclaim_us : KVT_SCHED_ORPHAN_RECLAIM_US,
        .no_state_tier = cfg->no_state_tier};
    self->sv = kvt_saves_new(&svc, self->rt, self->pb, self->bm, self->ck, self->stidx);
    if (!self->sv)
        goto oom;
    kvt_loadtrack_cfg_t ltc = {.block_size = cfg->block_size,
                               .chunk_size = cfg->chunk_size,
                               .orphan_reclaim_us = cfg->orphan_reclaim_us,
                               .load_deadline_us = cfg->load_deadline_us};
    self->lt = kvt_loadtrack_new(&ltc, self->rt, self->pb, self->bm, self->ck, self->stidx,
                                 kvt_saves_tracker(self->sv));
    if (!self->lt)
        goto oom;
    kvt_admit_cfg_t adc = {.block_size = cfg->block_size,
                           .chunk_size = cfg->chunk_size,
                           .hbm_blocks = cfg->hbm_blocks,
                           .tail = tail,
                           .min_load = cfg->min_load_tokens,
                           .tier = cfg->tier_chunks > 0,
                           .ck_blocks = self->ck_blocks};
    self->ad = kvt_admit_new(&adc, self->rt, self->pb, self->bm, self->ck, self->stidx, self->lk,
                             self->lt, self->sv);
    if (!self->ad)
        goto oom;
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
    //  The modules first (they borrow the leaves), then the leaves.
    kvt_admit_destroy(&self->ad);
    kvt_loadtrack_destroy(&self->lt);
    kvt_saves_destroy(&self->sv);
    kvt_lookups_destroy(&self->lk);
    kvt_planbuf_destroy(&self->pb);
    kvt_reqtab_destroy(&self->rt);
    kvt_ckpt_destroy(&self->ck);
    kvt_stidx_destroy(&self->stidx);
    kvt_blockmgr_destroy(&self->bm);
    free(self);
    *self_p = NULL;
}

int kvt_sched_arrive(kvt_sched_t *self, const kvt_arrival_t *a)
{
    self->stats.arrivals++;
    uint32_t slot = 0;
    bool refuse =
        a->ntokens == 0 || a->max_new_tokens == 0 || kvt_reqtab_find(self->rt, a->req, &slot);
    uint64_t nfeed = (uint64_t)a->ntokens + a->max_new_tokens - 1;
    //  A request must fit the pool and one entry of a StepPlan.
    if (!refuse && (nfeed > KVT_MSG_MAX_TOKENS * 2ull ||
                    kvt_reqtab_blocks_needed(self->rt, nfeed) > kvt_blockmgr_total(self->bm) ||
                    kvt_reqtab_blocks_needed(self->rt, nfeed) > KVT_MSG_MAX_BLOCKS))
        refuse = true;
    //  A new record starts above every orphaned admission of its id (A3).
    uint32_t gen = kvt_loadtrack_gen_floor(self->lt);
    kvt_sreq_t *r = refuse ? NULL
                           : kvt_reqtab_add(self->rt, a->req, a->tokens, a->ntokens,
                                            a->max_new_tokens, gen, &slot);
    if (!r) {
        //  Refused (or out of memory): the engine still hears about it,
        //  under a generation no admission takes (KVT_SCHED_REFUSED_GEN):
        //  a refused re-arrival of an id the core still holds must not name
        //  that id's live or finished admission.
        self->stats.rejected++;
        kvt_sched_event(self, a->req, KVT_SCHED_REFUSED_GEN, KVT_EV_FINISH, a->ntokens, 0, 1);
        return -1;
    }
    kvt_loadtrack_arrive(self->lt, r);
    r->arrival_us = a->arrival_us;
    r->state = R_WAITING;
    kvt_reqtab_append(self->rt, KVT_RQ_WAITING, slot);
    self->stats.waiting++;
    return 0;
}

void kvt_sched_event(kvt_sched_t *self, uint64_t req, uint32_t gen, uint8_t type, uint32_t a,
                     uint32_t b, uint32_t c)
{
    kvt_planbuf_event(self->pb, req, gen, type, a, b, c);
}

// ------------------------------------------------------- state pool ----

void kvt_sched_release_state(kvt_sched_t *self, kvt_sreq_t *r)
{
    if (!kvt_sched_hybrid(self))
        return;
    if (r->ck_take != KVT_CKPT_NONE)
        kvt_ckpt_abandon(self->ck, r->ck_take);
    if (r->ck_restore != KVT_CKPT_NONE)
        kvt_ckpt_unpin(self->ck, r->ck_restore);
    kvt_loadtrack_let_go(self->lt, r); //  the hit's checkpoint pin, convoy keys
    if (r->sslot != KVT_CKPT_NONE)
        kvt_ckpt_slot_give(self->ck, r->sslot);
    r->ck_take = r->ck_restore = r->sslot = KVT_CKPT_NONE;
    r->restore_planned = false;
}

void kvt_sched_retire(kvt_sched_t *self, uint32_t slot)
{
    kvt_sreq_t *r = kvt_reqtab_at(self->rt, slot);
    kvt_sched_release_state(self, r);
    //  While the save tracker holds anything of it (saves in flight, a
    //  tail), the record stays and keeps its blocks, releasing them all at
    //  once, tail first, when the tracker lets go: the LRU order does not
    //  depend on the order verdicts arrive (kvt_reqtab_forget).
    kvt_sched_mark_low(self, r); //  whenever the blocks go, from what HBM holds now
    if (!kvt_saves_tracked(self->sv, r))
        kvt_reqtab_forget(self->rt, slot, self->bm);
}

uint64_t kvt_sched_next_step(const kvt_sched_t *self)
{
    return self->next_step;
}

uint64_t kvt_sched_next_deadline(const kvt_sched_t *self)
{
    uint64_t load = kvt_loadtrack_next_deadline(self->lt);
    uint64_t save = kvt_saves_next_deadline(self->sv);
    uint64_t lookup = kvt_lookups_next_deadline(self->lk, self->now_us);
    uint64_t due = load < save ? load : save;
    return lookup < due ? lookup : due;
}

void kvt_sched_expire_loads(kvt_sched_t *self)
{
    uint32_t slot;
    while (kvt_loadtrack_expire(self->lt, self->now_us, &slot)) {
        //  Settled failed (TIMEOUT): the request runs from its HBM hit.
        kvt_sreq_t *r = kvt_reqtab_at(self->rt, slot);
        self->stats.loading--;
        self->stats.running++;
        r->state = R_RUNNING;
    }
    //  Saves no verdict settled by theirs settle failed and drain (S3).
    kvt_saves_expire(self->sv, self->now_us);
}

bool kvt_sched_quiescent(const kvt_sched_t *self)
{
    if (kvt_sched_hybrid(self)) {
        kvt_ckpt_stats_t c;
        kvt_ckpt_stats(self->ck, &c);
        if (c.slots_in_use != 0 || c.pinned_entries != 0 || kvt_loadtrack_convoy_keys(self->lt))
            return false;
    }
    return kvt_reqtab_records(self->rt) == 0 && kvt_saves_outstanding(self->sv) == 0 &&
           kvt_loadtrack_orphans(self->lt) == 0 && kvt_blockmgr_in_use(self->bm) == 0;
}

void kvt_sched_stats(const kvt_sched_t *self, kvt_sched_stats_t *out)
{
    //  The coordinator's own counters (arrivals, admissions, gauges), then the modules'.
    *out = self->stats;
    kvt_planbuf_stats_t pb;
    kvt_planbuf_stats(self->pb, &pb);
    out->plan_deferred = pb.plan_deferred;
    out->tokens_planned = pb.tokens_planned;
    out->records = kvt_reqtab_records(self->rt);
    kvt_lookups_stats(self->lk, out);
    kvt_admit_stats(self->ad, out);
    kvt_loadtrack_stats(self->lt, out);
    kvt_saves_stats(self->sv, out);
    out->blocks_in_use = kvt_blockmgr_in_use(self->bm);
}

// ------------------------------------------------- engine-side calls ----

static kvt_sreq_t *s_find(const kvt_sched_t *self, uint64_t req, uint32_t *slot)
{
    return kvt_reqtab_find(self->rt, req, slot);
}

int kvt_sched_probe(kvt_sched_t *self, uint64_t req, kvt_sched_probe_t *out)
{
    uint32_t slot;
    kvt_sreq_t *r = s_find(self, req, &slot);
    if (!r || r->state != R_WAITING)
        return -1;
    kvt_admit_probe(self->ad, r, out);
    return 0;
}

void kvt_sched_plan_state(const kvt_sched_t *self, const kvt_sched_state_op_t **ops, uint32_t *n)
{
    kvt_planbuf_state_ops(self->pb, ops, n);
}

//  Request r is torn down while LOADING: the load tracker orphans its load.
static void s_orphan(kvt_sched_t *self, kvt_sreq_t *r)
{
    self->stats.loading--;
    kvt_loadtrack_orphan(self->lt, r, self->now_us);
}

int kvt_sched_abort(kvt_sched_t *self, uint64_t req)
{
    uint32_t slot;
    kvt_sreq_t *r = s_find(self, req, &slot);
    if (!r || r->state == R_DONE)
        return -1;
    self->stats.aborted++;
    //  A waiting request has no admission (gen 0 would not encode): as a refused one's.
    uint32_t gen = r->state == R_WAITING ? KVT_SCHED_REFUSED_GEN : r->gen;
    kvt_sched_event(self, r->id, gen, KVT_EV_FINISH, r->nprompt, 0, KVT_FINISH_ABORTED);
    if (r->state == R_WAITING) {
        kvt_lookups_drop(self->lk, r, self->pb);
        kvt_reqtab_unlink(self->rt, KVT_RQ_WAITING, slot);
        self->stats.waiting--;
    } else {
        //  A load in flight goes to its index as an orphan, with what it
        //  still writes; the record lets go of the rest now.
        if (r->state == R_LOADING)
            s_orphan(self, r);
        else
            self->stats.running--;
        kvt_reqtab_unlink(self->rt, KVT_RQ_ACTIVE, slot);
    }
    r->state = R_DONE;
    r->planned_end = 0;
    kvt_saves_abort(self->sv, r);
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
        s_orphan(self, r); //  as on an abort: the index owns the load
    else
        self->stats.running--;
    kvt_saves_abort(self->sv, r);
    kvt_sched_release_state(self, r);
    kvt_sched_mark_low(self, r);
    kvt_reqtab_release_blocks(self->rt, r, self->bm);
    kvt_reqtab_unlink(self->rt, KVT_RQ_ACTIVE, slot);
    kvt_reqtab_prepend(self->rt, KVT_RQ_WAITING, slot);
    self->stats.waiting++;
    r->state = R_WAITING;
    r->computed = r->planned_end = r->registered = 0;
    r->hbm_hit = r->block_hit = 0;
    r->verify_end = 0;
    kvt_admit_requeued(self->ad, r);
    free(r->blocks); //  the load's retreat pins went when it settled or was orphaned
    r->blocks = NULL;
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
    out->load_floor = r->state == R_LOADING ? r->load.floor : 0;
    out->load_end = r->state == R_LOADING ? r->load.end : 0;
    out->joint_src = r->joint_src;
    out->slot = r->sslot;
    out->ck_from = r->ck_from;
    out->nblocks = r->nblocks;
    out->blocks = r->blocks;
    return 0;
}

static int s_load_verdict(kvt_sched_t *self, const kvt_verdict_t *v)
{
    //  A state verdict speaks for its image whichever load it belongs to,
    //  even one no longer known here: a real miss retracts it (I3, no
    //  request id needed).
    if (v->chan == KVT_CHAN_STATE && self->stidx)
        kvt_stidx_state_verdict(self->stidx, v->key, v->ok, v->detail, self->now_us);
    //  A verdict no live load matches may be an orphan's (its request was
    //  torn down mid-load): its index settles it.
    uint32_t slot;
    kvt_sreq_t *r = kvt_reqtab_find(self->rt, v->op.req, &slot);
    if (!r || r->state != R_LOADING || r->gen != v->op.gen || v->attempt != 0)
        return kvt_loadtrack_orphan_verdict(self->lt, v, self->now_us);
    int rc = kvt_loadtrack_verdict(self->lt, r, v, self->now_us);
    if (rc == KVT_LOAD_STALE)
        return -1;
    if (rc == KVT_LOAD_PENDING)
        return 0;
    //  Settled or retreated: the request runs from where the load left it.
    self->stats.loading--;
    self->stats.running++;
    r->state = R_RUNNING;
    return 0;
}

int kvt_sched_verdict(kvt_sched_t *self, const kvt_verdict_t *v)
{
    int rc = -1;
    if (v->chan == KVT_CHAN_LOAD || v->chan == KVT_CHAN_STATE)
        rc = s_load_verdict(self, v);
    else if (v->chan == KVT_CHAN_SAVE)
        rc = kvt_saves_verdict(self->sv, v, self->now_us);
    else if (v->chan == KVT_CHAN_SOURCE_SAFE)
        rc = kvt_saves_source_safe(self->sv, v);
    else if (v->chan == KVT_CHAN_LOOKUP)
        rc = kvt_lookups_verdict(self->lk, self->rt, v, self->now_us);
    else if (v->chan == KVT_CHAN_TOUCH && self->stidx && v->op.gen == KVT_TOUCH_GEN) {
        //  A touch nobody answered (the aggregator's bound) is no evidence:
        //  the hold it was sent for ends by its own bound.
        if (!v->ok && v->detail == KVT_DETAIL_TIMEOUT)
            return 0;
        rc = kvt_stidx_touch_verdict(self->stidx, v->key, v->op.req, v->touch, self->now_us);
    } else if (v->chan == KVT_CHAN_TOUCH_REFRESH)
        rc = 0; //  whether the CPU pool refreshed it: the index reads the touch channel
    if (rc != 0)
        self->stats.stale_verdicts++;
    return rc;
}
