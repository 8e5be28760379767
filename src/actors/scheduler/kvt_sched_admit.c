/*  kvt_sched_admit — the scheduler core's admission (see kvt_sched.h): the
    HBM match, the tier count, the fit (rule B1: the demand travels with the
    probe), the joint boundary on the chunk grid with the hit pinned for a
    retreat (B2), the hit counted as found (B3), and the load the admission
    puts into the plan. A hybrid request's admission (kvt_sched_admit_hybrid)
    gates the hit to an HBM checkpoint, takes a state slot and lets the
    joint planner (kvt_joint.h) choose the boundary. The tier count comes
    from kvt_lookups, the committed load goes to kvt_loadtrack, the save
    floor to kvt_saves. Part of the coordinator for now (it still reads the
    core's struct); also the plan helpers the coordinator's files share. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "kvt_joint.h"
#include "kvt_sched_int.h"

static uint32_t s_nloads(const kvt_sched_t *self)
{
    kvt_planbuf_counts_t pc;
    kvt_planbuf_counts(self->pb, &pc);
    return pc.loads;
}

static int s_plan_load(kvt_sched_t *self, kvt_sreq_t *r, uint32_t floor_tok, uint32_t end_tok)
{
    uint32_t nchunks = (end_tok - floor_tok) / self->cfg.chunk_size;
    uint32_t nblocks = (end_tok - floor_tok) / self->cfg.block_size;
    if (kvt_planbuf_reserve_loads(self->pb, 1) || kvt_sched_reserve_scratch(self, nblocks, nchunks))
        return -1;
    kvt_sched_fill_spec(self, r, floor_tok, end_tok, kvt_planbuf_next_load(self->pb));
    return 0;
}

// ------------------------------------------------------ plan helpers ----

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
        keys[c] = kvt_reqtab_chunk_key(self->rt, r, start / self->cfg.chunk_size + c);
}

void kvt_sched_event(kvt_sched_t *self, uint64_t req, uint32_t gen, uint8_t type, uint32_t a,
                     uint32_t b, uint32_t c)
{
    kvt_planbuf_event(self->pb, req, gen, type, a, b, c);
}

bool kvt_sched_plan_fits(const kvt_sched_t *self, size_t bytes)
{
    return kvt_planbuf_fits(self->pb, bytes);
}

int kvt_sched_state_op(kvt_sched_t *self, const kvt_sreq_t *r, uint8_t kind, uint32_t entry,
                       uint32_t at)
{
    kvt_sched_state_op_t op = {
        .op = {r->id, r->gen},
        .kind = kind,
        .slot = r->sslot,
        .entry = entry,
        .at = at,
        .key = kvt_reqtab_hash_at(self->rt, (kvt_sreq_t *)r, at / self->cfg.block_size - 1)};
    return kvt_planbuf_add_state(self->pb, &op);
}

// --------------------------------------------------------- admission ----

//  The request waits (admission stops at it): its settled lookup is kept
//  fresh meanwhile. Returns 0.
static int s_wait(kvt_sched_t *self, kvt_sreq_t *r)
{
    kvt_lookups_keep_fresh(self->lk, r, self->rt, self->pb, self->now_us);
    return 0;
}

//  The probe (HBM match, tier count, fit) has no side effects; only a
//  committed admission counts hits.
int kvt_sched_admit(kvt_sched_t *self, uint32_t slot)
{
    if (kvt_sched_hybrid(self))
        return kvt_sched_admit_hybrid(self, slot);
    kvt_sreq_t *r = kvt_reqtab_at(self->rt, slot);
    uint32_t bs = self->cfg.block_size, cs = self->cfg.chunk_size;
    uint32_t need = kvt_reqtab_blocks_needed(self->rt, r->nfeed);
    //  The last probe needed more fresh blocks than exist now: nothing that
    //  could help has happened (a probe's demand only shrinks when blocks
    //  free up), so skip the probe (rule B1: the demand travels with it).
    if (r->probe_demand > kvt_blockmgr_available(self->bm)) {
        return s_wait(self, r); //  waiting: its blocks do not fit yet
    }
    //  A hit always leaves a prefill tail: one token, two with speculation.
    uint32_t tail = kvt_sched_tail(self);
    uint32_t max_hit_blocks = r->nprompt > tail ? (r->nprompt - tail) / bs : 0;
    for (uint32_t b = 0; b < max_hit_blocks; b++)
        kvt_reqtab_hash_at(self->rt, r, b);
    uint32_t m =
        kvt_blockmgr_match(self->bm, r->hashes, r->tokens, max_hit_blocks, self->scratch_blocks);
    uint32_t hbm = m * bs;

    uint32_t max_chunks = r->nprompt > tail ? (r->nprompt - tail) / cs : 0;
    uint32_t tier_chunks;
    if (!kvt_lookups_tier_hit(self->lk, r, max_chunks, &tier_chunks, self->rt, self->pb,
                              self->now_us))
        return S_ADMIT_LOOKUP;
    uint32_t tier = tier_chunks * cs;
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
    if (!kvt_sched_plan_fits(self, bytes) || s_nloads(self) >= KVT_MSG_MAX_ENTRIES) {
        kvt_planbuf_defer(self->pb);
        return 0;
    }
    r->blocks = malloc((size_t)need * sizeof(uint32_t));
    r->hit_pins = held > keep ? malloc((size_t)(held - keep) * sizeof(uint32_t)) : NULL;
    kvt_opid_t op = {r->id, r->gen + 1}; //  the admission's id once committed
    if (!r->blocks || (held > keep && !r->hit_pins) ||
        (load && kvt_loadtrack_reserve(self->lt, op, (tier - keep_tokens) / bs) != 0)) {
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
    r->pin_lo = keep;
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
    kvt_reqtab_unlink(self->rt, KVT_RQ_WAITING, slot);
    kvt_reqtab_append(self->rt, KVT_RQ_ACTIVE, slot);
    self->stats.waiting--;
    self->stats.admitted++;
    //  The HBM hit is recorded as found (rule B3), even when the load starts
    //  at its chunk floor; the tier is credited with what lies above it.
    self->stats.hbm_hit_tokens += hbm;
    kvt_sched_event(self, r->id, r->gen, KVT_EV_ADMIT, hbm, load ? tier - hbm : 0, r->nprompt);
    bool planned = load && s_plan_load(self, r, keep_tokens, tier) == 0;
    kvt_lookups_settle(self->lk, r, planned ? kvt_planbuf_last_load(self->pb) : NULL, self->pb);
    if (load && !planned)
        kvt_loadtrack_unreserve(self->lt, op);
    if (planned) {
        r->state = R_LOADING;
        r->legs = S_LEG_KV;
        r->legs_failed = 0;
        r->computed = keep_tokens;
        r->load_floor = keep_tokens;
        r->load_end = tier;
        //  The save floor, recorded once when the load is decided (S5).
        kvt_saves_admit(self->sv, r, keep_tokens, hbm, tier);
        r->verify_end = tier;
        self->stats.loading++;
        kvt_loadtrack_start(self->lt, r, self->now_us);
        return 1;
    }
    r->state = R_RUNNING;
    r->computed = keep_tokens;
    //  Chunks the tier already holds need no save.
    kvt_saves_admit(self->sv, r, tier < keep_tokens ? tier : keep_tokens, 0, 0);
    r->verify_end = keep_tokens;
    self->stats.running++;
    return 1;
}

// ------------------------------------------------------------- hybrid ----

//  Prefill tail a hit always leaves: one token, two with speculation.
uint32_t kvt_sched_tail(const kvt_sched_t *self)
{
    return self->cfg.spec_tokens > 0 ? 2 : 1;
}

//  Probes r (rule B1): every probe starts reset and carries the demand only
//  when the fit passed. Returns the demand whether or not it fits.
static uint32_t s_probe(kvt_sched_t *self, kvt_sreq_t *r, kvt_sched_probe_t *p)
{
    memset(p, 0, sizeof(*p));
    p->req = r->id;
    uint32_t bs = self->cfg.block_size, tail = kvt_sched_tail(self);
    uint32_t max_hit_blocks = r->nprompt > tail ? (r->nprompt - tail) / bs : 0;
    for (uint32_t b = 0; b < max_hit_blocks; b++)
        kvt_reqtab_hash_at(self->rt, r, b);
    uint32_t m =
        kvt_blockmgr_match(self->bm, r->hashes, r->tokens, max_hit_blocks, self->scratch_blocks);
    p->chain = r->hashes;
    p->nchain = max_hit_blocks;
    p->block_hit = m * bs;
    self->scratch_unref[0] = 0;
    for (uint32_t i = 0; i < m; i++)
        self->scratch_unref[i + 1] =
            self->scratch_unref[i] + (kvt_blockmgr_refs(self->bm, self->scratch_blocks[i]) == 0);
    //  Gate: KV alone cannot resume a hybrid request, so the hit is the
    //  newest HBM checkpoint at or below the block hit.
    uint32_t g = m;
    if (kvt_sched_hybrid(self))
        for (g = m; g > 0 && !kvt_ckpt_has(self->ck, r->hashes[g - 1]); g--)
            ;
    p->hbm = g * bs;
    uint32_t need = kvt_reqtab_blocks_needed(self->rt, r->nfeed);
    uint32_t demand = need - g + self->scratch_unref[g];
    bool slot_ok = !kvt_sched_hybrid(self) || kvt_ckpt_slots_free(self->ck) > 0;
    if (slot_ok && kvt_blockmgr_available(self->bm) >= demand) {
        p->has_demand = true;
        p->num_new_blocks = demand;
    }
    return demand;
}

void kvt_sched_probe_req(kvt_sched_t *self, kvt_sreq_t *r, kvt_sched_probe_t *p)
{
    (void)s_probe(self, r, p);
}

typedef struct {
    kvt_sched_t *self; //  the core
    kvt_sreq_t *r;     //  the request planned
} s_joint_ctx_t;

static bool s_ckpt_hbm(void *ctx, uint32_t boundary)
{
    s_joint_ctx_t *c = ctx;
    kvt_hash_t h = kvt_reqtab_hash_at(c->self->rt, c->r, boundary / c->self->cfg.block_size - 1);
    return kvt_ckpt_has(c->self->ck, h);
}

static bool s_ckpt_tier(void *ctx, uint32_t boundary)
{
    s_joint_ctx_t *c = ctx;
    kvt_hash_t h = kvt_reqtab_hash_at(c->self->rt, c->r, boundary / c->self->cfg.block_size - 1);
    return kvt_stidx_could_serve(c->self->stidx, h);
}

static void s_add_joint_stats(kvt_sched_t *self, const kvt_joint_stats_t *js)
{
    self->stats.joint_state_hbm += js->state_hbm;
    self->stats.joint_state_tier += js->state_tier;
    self->stats.tier_within_hbm += js->tier_within_hbm;
    self->stats.no_rung_above_hbm += js->no_rung_above_hbm;
    self->stats.partial_chunk_no_room += js->partial_chunk_no_room;
    self->stats.no_probe_demand += js->no_probe_demand;
    self->stats.below_min_load += js->below_min_load;
}

int kvt_sched_admit_hybrid(kvt_sched_t *self, uint32_t slot)
{
    kvt_sreq_t *r = kvt_reqtab_at(self->rt, slot);
    uint32_t bs = self->cfg.block_size, cs = self->cfg.chunk_size;
    if (r->probe_demand > kvt_blockmgr_available(self->bm) || kvt_ckpt_slots_free(self->ck) == 0) {
        return s_wait(self, r); //  waiting: no blocks or no slot for it yet
    }
    kvt_sched_probe_t *p = &self->probe;
    uint32_t want = s_probe(self, r, p);
    if (!p->has_demand) {
        r->probe_demand = want;
        return s_wait(self, r); //  waiting: its probe found no room
    }
    uint32_t tail = kvt_sched_tail(self);
    uint32_t max_chunks = r->nprompt > tail ? (r->nprompt - tail) / cs : 0;
    uint32_t tier_chunks;
    if (!kvt_lookups_tier_hit(self->lk, r, max_chunks, &tier_chunks, self->rt, self->pb,
                              self->now_us))
        return S_ADMIT_LOOKUP;
    uint32_t tier = tier_chunks * cs;
    s_joint_ctx_t jc = {self, r};
    kvt_joint_in_t in = {.block_size = bs,
                         .chunk_size = cs,
                         .prompt = r->nprompt,
                         .tail = tail,
                         .min_load = self->cfg.min_load_tokens,
                         .block_hit = p->block_hit,
                         .hbm = p->hbm,
                         .tier_kv = tier,
                         .ckpt_hbm = s_ckpt_hbm,
                         .ckpt_tier = self->cfg.tier_chunks > 0 ? s_ckpt_tier : NULL,
                         .ctx = &jc,
                         .has_demand = p->has_demand,
                         .demand = p->num_new_blocks,
                         .available = kvt_blockmgr_available(self->bm),
                         .unref = self->scratch_unref};
    kvt_joint_stats_t js = {0};
    kvt_joint_t d = kvt_joint_plan(&in, &js);
    bool joint = d.src != KVT_JOINT_NONE;
    bool kv_leg = joint && d.claim < d.b;
    //  No load convoys: chunks another admission is loading are waited for
    //  (its verdict indexes them in HBM), not loaded a second time.
    for (uint32_t t = kv_leg ? d.claim : d.b; kv_leg && t < d.b; t += cs)
        if (kvt_loadtrack_convoy_busy(self->lt, kvt_reqtab_chunk_key(self->rt, r, t / cs))) {
            if (!r->convoy_waited)
                self->stats.convoy_waits++;
            r->convoy_waited = true;
            return 0;
        }
    //  Every tier hit that votes for an image touches it (I5, throttled per
    //  hash by the index); an image not confirmed within the verified
    //  window holds the admission for the touch's verdict, bounded from the
    //  first hold (I6). A held request holds up no one behind it.
    if (d.src == KVT_JOINT_STATE_TIER) {
        kvt_hash_t h = kvt_reqtab_hash_at(self->rt, r, d.b / bs - 1);
        uint64_t round;
        if (kvt_stidx_want_touch(self->stidx, h, self->now_us, &round) &&
            kvt_planbuf_add_touch(self->pb, h, round) == 0)
            self->stats.touches_planned++;
        if (kvt_stidx_hold(self->stidx, h, self->now_us)) {
            self->stats.verify_holds++;
            return S_ADMIT_LOOKUP;
        }
    }
    uint32_t need = kvt_reqtab_blocks_needed(self->rt, r->nfeed);
    uint32_t kv_tokens = kv_leg ? d.b - d.claim : 0;
    size_t bytes = KVT_SCHED_ENTRY_BYTES(need) +
                   (joint ? KVT_SCHED_SPEC_BYTES(kv_tokens / bs, kv_tokens / cs) : 0);
    if (!kvt_sched_plan_fits(self, bytes) || s_nloads(self) >= KVT_MSG_MAX_ENTRIES) {
        kvt_planbuf_defer(self->pb);
        return 0;
    }
    //  Reserve every array the commit writes, so the commit cannot fail.
    uint32_t hb = p->hbm / bs, clb = joint ? d.claim / bs : hb;
    uint32_t lo = clb < hb ? clb : hb, nret = joint ? (clb < hb ? hb - clb : clb - hb) : 0;
    r->blocks = malloc((size_t)need * sizeof(uint32_t));
    r->hit_pins = nret ? malloc((size_t)nret * sizeof(uint32_t)) : NULL;
    kvt_opid_t op = {r->id, r->gen + 1}; //  the admission's id once committed
    if (!r->blocks || (nret && !r->hit_pins) || kvt_planbuf_reserve_loads(self->pb, 1) ||
        kvt_sched_reserve_scratch(self, kv_tokens / bs, kv_tokens / cs) ||
        kvt_planbuf_reserve_state(self->pb, 1) ||
        (joint && kvt_loadtrack_reserve(self->lt, op, kv_tokens / bs) != 0)) {
        free(r->blocks);
        free(r->hit_pins);
        r->blocks = r->hit_pins = NULL;
        return 0;
    }
    //  The state index owns the state load's lifecycle (I1): recorded
    //  before anything is committed, carried by this plan's LoadSpec.
    r->sslot = kvt_ckpt_slot_take(self->ck);
    assert(r->sslot != KVT_CKPT_NONE); //  checked by the probe
    if (d.src == KVT_JOINT_STATE_TIER &&
        kvt_stidx_request_load(self->stidx, (kvt_opid_t){r->id, r->gen + 1},
                               kvt_reqtab_hash_at(self->rt, r, d.b / bs - 1), r->sslot,
                               self->now_us) != 0) {
        kvt_loadtrack_unreserve(self->lt, op);
        kvt_ckpt_slot_give(self->ck, r->sslot);
        r->sslot = KVT_CKPT_NONE;
        free(r->blocks);
        free(r->hit_pins);
        r->blocks = r->hit_pins = NULL;
        return 0;
    }
    //  Blocks below the claim are shared. A retreat must find the hit
    //  again: below it the hit's own blocks stay pinned (the table gets
    //  fresh copies), above it fresh spares wait (the table shares).
    for (uint32_t i = 0; i < clb; i++) {
        r->blocks[i] = self->scratch_blocks[i];
        kvt_blockmgr_ref(self->bm, r->blocks[i]);
    }
    for (uint32_t i = clb; i < hb; i++) {
        r->hit_pins[i - clb] = self->scratch_blocks[i];
        kvt_blockmgr_ref(self->bm, self->scratch_blocks[i]);
    }
    int rc = kvt_blockmgr_alloc(self->bm, need - clb, r->blocks + clb);
    if (rc == 0 && clb > hb)
        rc = kvt_blockmgr_alloc(self->bm, nret, r->hit_pins);
    assert(rc == 0); //  the fit (probe demand + the joint's extra) was checked
    (void)rc;
    r->nblocks = need;
    r->nhit_pins = nret;
    r->pin_lo = lo;
    r->registered = clb;
    r->probe_demand = 0;
    r->convoy_waited = false;
    r->gen++;
    r->hbm_hit = p->hbm;
    r->block_hit = p->block_hit;
    r->joint_src = (uint8_t)d.src;
    r->legs = r->legs_failed = 0;
    kvt_blockmgr_count_hit(self->bm, hb);
    s_add_joint_stats(self, &js);
    kvt_reqtab_unlink(self->rt, KVT_RQ_WAITING, slot);
    kvt_reqtab_append(self->rt, KVT_RQ_ACTIVE, slot);
    self->stats.waiting--;
    self->stats.admitted++;
    //  The HBM hit is recorded as found (rule B3): the gated hit, never the
    //  chunk floor the KV leg starts from.
    self->stats.hbm_hit_tokens += p->hbm;
    self->stats.gate_lost_tokens += p->block_hit - p->hbm;
    //  The state tax: what KV alone could have resumed minus the boundary
    //  chosen (design §4.8).
    uint32_t kv_alone = p->block_hit > tier ? p->block_hit : tier;
    uint32_t chosen = joint ? d.b : p->hbm;
    r->branch_at = kv_alone / cs * cs > chosen ? kv_alone / cs * cs : 0;
    if (kv_alone > 0) {
        self->stats.state_resumes++;
        self->stats.state_tax_tokens += kv_alone > chosen ? kv_alone - chosen : 0;
    }
    kvt_sched_event(self, r->id, r->gen, KVT_EV_ADMIT, p->hbm, joint ? d.b - p->hbm : 0,
                    r->nprompt);
    if (!joint) {
        kvt_lookups_settle(self->lk, r, NULL, self->pb);
        if (hb > 0) {
            r->ck_restore = kvt_ckpt_pin(self->ck, r->hashes[hb - 1]);
            r->restore_at = p->hbm;
            assert(r->ck_restore != KVT_CKPT_NONE); //  the gate found it
        }
        r->state = R_RUNNING;
        r->computed = p->hbm;
        //  Chunks the tier already holds need no save.
        kvt_saves_admit(self->sv, r, tier < p->hbm ? tier : p->hbm, 0, 0);
        r->verify_end = p->hbm;
        self->stats.running++;
        return 1;
    }
    //  The hit's checkpoint stays pinned until the load settles: a retreat
    //  restores it (B2).
    r->ck_hit = hb > 0 ? kvt_ckpt_pin(self->ck, r->hashes[hb - 1]) : KVT_CKPT_NONE;
    if (d.src == KVT_JOINT_STATE_HBM) {
        r->ck_restore = kvt_ckpt_pin(self->ck, kvt_reqtab_hash_at(self->rt, r, d.b / bs - 1));
        r->restore_at = d.b;
    } else {
        r->legs |= S_LEG_STATE;
        kvt_sched_state_op(self, r, KVT_SCHED_STATE_LOAD, KVT_CKPT_NONE, d.b);
        self->stats.state_loads++;
    }
    r->computed = d.claim;
    r->load_floor = d.claim;
    r->load_end = d.b;
    if (kv_leg) {
        r->legs |= S_LEG_KV;
        s_plan_load(self, r, d.claim, d.b);
        kvt_loadtrack_convoy_mark(self->lt, r, +1);
    } else if (d.src == KVT_JOINT_STATE_TIER) {
        //  A state-only load (rule L3): no KV leg, no keys, no blocks.
        kvt_planbuf_add_empty_load(self->pb, (kvt_opid_t){r->id, r->gen});
    }
    if (d.src == KVT_JOINT_STATE_TIER) {
        //  The state leg rides in the same LoadSpec (one completion per rank).
        kvt_load_spec_t *l = kvt_planbuf_last_load(self->pb);
        l->state = true;
        l->state_boundary = d.b;
        l->state_hash = kvt_reqtab_hash_at(self->rt, r, d.b / bs - 1);
        l->state_slot = r->sslot;
        int rc_c = kvt_stidx_carried(self->stidx, l->op);
        assert(rc_c == 0); //  recorded above, armed until now
        (void)rc_c;
    }
    assert(r->legs != 0); //  an HBM state at B above the gated hit implies a KV leg
    kvt_lookups_settle(self->lk, r, kvt_planbuf_last_load(self->pb), self->pb);
    r->state = R_LOADING;
    //  The save floor, recorded once when the load is decided (S5).
    kvt_saves_admit(self->sv, r, tier < p->hbm ? tier : p->hbm, p->hbm, d.b);
    r->verify_end = d.b;
    self->stats.loading++;
    kvt_loadtrack_start(self->lt, r, self->now_us);
    return 1;
}
