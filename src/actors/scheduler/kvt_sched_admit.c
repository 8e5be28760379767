/*  kvt_sched_admit — the scheduler core's admission (see kvt_sched.h): the
    HBM match, the tier count, the fit (rule B1: the demand travels with the
    probe), the joint boundary on the chunk grid with the hit pinned for a
    retreat (B2), the hit counted as found (B3), and the load the admission
    puts into the plan. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "kvt_sched_int.h"

static int s_plan_load(kvt_sched_t *self, kvt_sreq_t *r, uint32_t floor_tok, uint32_t end_tok)
{
    uint32_t nchunks = (end_tok - floor_tok) / self->cfg.chunk_size;
    uint32_t nblocks = (end_tok - floor_tok) / self->cfg.block_size;
    if (kvt_vec_reserve((void **)&self->p_loads, &self->p_loads_cap, self->p_nloads + 1,
                        sizeof(kvt_load_spec_t)) ||
        kvt_sched_reserve_scratch(self, nblocks, nchunks))
        return -1;
    kvt_sched_fill_spec(self, r, floor_tok, end_tok, &self->p_loads[self->p_nloads++]);
    return 0;
}

//  The probe (HBM match, tier count, fit) has no side effects; only a
//  committed admission refreshes the tier view and counts hits.
int kvt_sched_admit(kvt_sched_t *self, uint32_t slot)
{
    kvt_sreq_t *r = &self->reqs[slot];
    uint32_t bs = self->cfg.block_size, cs = self->cfg.chunk_size;
    uint32_t need = kvt_sched_blocks_needed(self, r->nfeed);
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
    kvt_ilist_unlink(&self->waiting, KVT_SCHED_REQ_LINKS(self), slot);
    kvt_ilist_append(&self->active, KVT_SCHED_REQ_LINKS(self), slot);
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
