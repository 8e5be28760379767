/*  kvt_admit — see kvt_admit.h. */
#include "kvt_admit.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvt_joint.h"

typedef struct {
    uint64_t hbm_hit_tokens;   //  HBM hits recorded as found (B3)
    uint64_t gate_lost_tokens; //  block hit above the gated hit (hybrid)
    uint64_t state_resumes;    //  hybrid admissions with any KV to resume from
    uint64_t state_tax_tokens; //  KV alone could have resumed minus the boundary chosen
    kvt_joint_stats_t joint;   //  joint outcomes of committed admissions
    uint64_t convoy_waits;     //  waits for another admission's load of the same chunks
    uint64_t touches_planned;  //  touches put into plans (I5)
    uint64_t verify_holds;     //  admissions held for a touch verdict (I6)
    uint64_t state_loads;      //  loads with a state leg
} s_stats_t;

struct _kvt_admit_t {
    kvt_admit_cfg_t cfg;     //  configuration
    kvt_reqtab_t *rt;        //  request records (borrowed)
    kvt_planbuf_t *pb;       //  the plan under construction (borrowed)
    kvt_blockmgr_t *bm;      //  HBM blocks (borrowed)
    kvt_ckpt_t *ck;          //  state slots and HBM checkpoints (borrowed; NULL when dense)
    kvt_stidx_t *stidx;      //  state images (borrowed; NULL when dense)
    kvt_lookups_t *lk;       //  tier lookups (borrowed)
    kvt_loadtrack_t *lt;     //  loads in flight: convoys, holdings reserved (borrowed)
    kvt_saves_t *sv;         //  saves, for the save floor (borrowed)
    uint32_t *blocks;        //  block ids of the match (hbm_blocks)
    uint32_t *unref;         //  unreferenced-block prefix counts of the match (hbm_blocks + 1)
    kvt_sched_probe_t probe; //  the last admission probe (rule B1)
    s_stats_t st;            //  counters
};

kvt_admit_t *kvt_admit_new(const kvt_admit_cfg_t *cfg, kvt_reqtab_t *rt, kvt_planbuf_t *pb,
                           kvt_blockmgr_t *bm, kvt_ckpt_t *ck, kvt_stidx_t *stidx,
                           kvt_lookups_t *lk, kvt_loadtrack_t *lt, kvt_saves_t *sv)
{
    kvt_admit_t *self = calloc(1, sizeof(*self));
    if (!self)
        return NULL;
    self->cfg = *cfg;
    self->rt = rt;
    self->pb = pb;
    self->bm = bm;
    self->ck = ck;
    self->stidx = stidx;
    self->lk = lk;
    self->lt = lt;
    self->sv = sv;
    self->blocks = malloc((size_t)cfg->hbm_blocks * sizeof(uint32_t));
    self->unref = malloc(((size_t)cfg->hbm_blocks + 1) * sizeof(uint32_t));
    if (!self->blocks || !self->unref)
        kvt_admit_destroy(&self);
    return self;
}

void kvt_admit_destroy(kvt_admit_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    free((*self_p)->blocks);
    free((*self_p)->unref);
    free(*self_p);
    *self_p = NULL;
}

// ------------------------------------------------------------- probe ----

//  Probes r (rule B1): every probe starts reset and carries the demand only
//  when the fit passed. Returns the demand whether or not it fits.
//  Blocks an admission may count on when it will pin `pins` checkpoints it
//  resumes from: with one HBM budget an evictable checkpoint's blocks count
//  as available, so each one it pins is left out (pinned already or not: a
//  bound that is exact whenever it was evictable).
static uint32_t s_room(const kvt_admit_t *self, uint32_t pins)
{
    uint32_t avail = kvt_blockmgr_available(self->bm), keep = pins * self->cfg.ck_blocks;
    return avail > keep ? avail - keep : 0;
}

static uint32_t s_probe(kvt_admit_t *self, kvt_sreq_t *r, kvt_sched_probe_t *p)
{
    memset(p, 0, sizeof(*p));
    p->req = r->id;
    uint32_t bs = self->cfg.block_size, tail = self->cfg.tail;
    uint32_t max_hit_blocks = r->nprompt > tail ? (r->nprompt - tail) / bs : 0;
    for (uint32_t b = 0; b < max_hit_blocks; b++)
        kvt_reqtab_hash_at(self->rt, r, b);
    uint32_t m = kvt_blockmgr_match(self->bm, r->hashes, r->tokens, max_hit_blocks, self->blocks);
    p->chain = r->hashes;
    p->nchain = max_hit_blocks;
    p->block_hit = m * bs;
    self->unref[0] = 0;
    for (uint32_t i = 0; i < m; i++)
        self->unref[i + 1] = self->unref[i] + (kvt_blockmgr_refs(self->bm, self->blocks[i]) == 0);
    //  Gate: KV alone cannot resume a hybrid request, so the hit is the
    //  newest HBM checkpoint at or below the block hit.
    uint32_t g = m;
    if (self->ck)
        for (g = m; g > 0 && !kvt_ckpt_has(self->ck, r->hashes[g - 1]); g--)
            ;
    uint32_t need = kvt_reqtab_blocks_needed(self->rt, r->nfeed);
    //  When the room is the gate checkpoint's own blocks, resume from 0.
    if (g > 0 && s_room(self, 1) < need - g + self->unref[g])
        g = kvt_blockmgr_available(self->bm) >= need ? 0 : g;
    p->hbm = g * bs;
    uint32_t demand = need - g + self->unref[g];
    bool slot_ok = !self->ck || kvt_ckpt_slots_free(self->ck) > 0;
    if (slot_ok && s_room(self, g > 0) >= demand) {
        p->has_demand = true;
        p->num_new_blocks = demand;
    }
    return demand;
}

void kvt_admit_requeued(kvt_admit_t *self, kvt_sreq_t *r)
{
    (void)self;
    memset(&r->adm, 0, sizeof(r->adm));
}

void kvt_admit_probe(kvt_admit_t *self, kvt_sreq_t *r, kvt_sched_probe_t *p)
{
    (void)s_probe(self, r, p);
}

// ---------------------------------------------------------- boundary ----

typedef struct {
    kvt_admit_t *self; //  the admission
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

//  A dense request's boundary: the tier hit when it reaches past the HBM
//  hit (a load with no state leg), else the HBM hit. The KV leg starts on
//  the chunk grid: the shared blocks below the chunk floor of the hit are
//  kept and [floor, B) is refilled privately, so no shared block is ever
//  written; the hit's blocks above the floor stay pinned until the verdict
//  (a failed load retreats to the hit, B2), so the demand counts every
//  unreferenced block of the hit.
static kvt_joint_t s_plan_dense(const kvt_admit_t *self, const kvt_sched_probe_t *p, uint32_t tier,
                                uint32_t need)
{
    uint32_t bs = self->cfg.block_size, cs = self->cfg.chunk_size;
    kvt_joint_t d = {.src = KVT_JOINT_NONE, .b = p->hbm, .claim = p->hbm};
    if (tier > p->hbm) {
        d.b = tier;
        d.claim = p->hbm / cs * cs;
    }
    d.demand = need - d.claim / bs + self->unref[p->hbm / bs];
    return d;
}

//  A hybrid request's boundary: the joint planner's (design §4).
static kvt_joint_t s_plan_hybrid(kvt_admit_t *self, kvt_sreq_t *r, const kvt_sched_probe_t *p,
                                 uint32_t tier, kvt_joint_stats_t *js)
{
    s_joint_ctx_t jc = {self, r};
    kvt_joint_in_t in = {.block_size = self->cfg.block_size,
                         .chunk_size = self->cfg.chunk_size,
                         .prompt = r->nprompt,
                         .tail = self->cfg.tail,
                         .min_load = self->cfg.min_load,
                         .block_hit = p->block_hit,
                         .hbm = p->hbm,
                         .tier_kv = tier,
                         .ckpt_hbm = s_ckpt_hbm,
                         .ckpt_tier = self->cfg.tier ? s_ckpt_tier : NULL,
                         .ctx = &jc,
                         .has_demand = p->has_demand,
                         .demand = p->num_new_blocks,
                         .available = s_room(self, p->hbm > 0),
                         .hbm_pin_cost = self->cfg.ck_blocks,
                         .unref = self->unref};
    return kvt_joint_plan(&in, js);
}

// ------------------------------------------------------------ commit ----

static uint32_t s_nloads(const kvt_admit_t *self)
{
    kvt_planbuf_counts_t pc;
    kvt_planbuf_counts(self->pb, &pc);
    return pc.loads;
}

//  The KV leg of r's load, [start, end) (whole chunks), into the plan; the
//  caller reserved the spec and the scratch.
static void s_plan_load(kvt_admit_t *self, kvt_sreq_t *r, uint32_t start, uint32_t end)
{
    uint32_t nchunks = (end - start) / self->cfg.chunk_size;
    uint32_t nblocks = (end - start) / self->cfg.block_size;
    kvt_hash_t *keys = kvt_planbuf_fill_spec(
        self->pb, kvt_planbuf_next_load(self->pb), (kvt_opid_t){r->id, r->gen}, start, end,
        r->blocks + start / self->cfg.block_size, nblocks, nchunks);
    for (uint32_t c = 0; c < nchunks; c++)
        keys[c] = kvt_reqtab_chunk_key(self->rt, r, start / self->cfg.chunk_size + c);
}

static void s_release(kvt_sreq_t *r, uint32_t *pins)
{
    free(r->blocks);
    free(pins);
    r->blocks = NULL;
}

static void s_add_joint_stats(kvt_joint_stats_t *to, const kvt_joint_stats_t *js)
{
    to->state_hbm += js->state_hbm;
    to->state_tier += js->state_tier;
    to->tier_within_hbm += js->tier_within_hbm;
    to->no_rung_above_hbm += js->no_rung_above_hbm;
    to->partial_chunk_no_room += js->partial_chunk_no_room;
    to->no_probe_demand += js->no_probe_demand;
    to->below_min_load += js->below_min_load;
}

//  The request waits (admission stops at it): its settled lookup is kept
//  fresh meanwhile.
static int s_wait(kvt_admit_t *self, kvt_sreq_t *r, uint64_t now_us)
{
    kvt_lookups_keep_fresh(self->lk, r, self->rt, self->pb, now_us);
    return KVT_ADMIT_WAIT;
}

//  The probe (HBM match, tier count, fit) has no side effects; only a
//  committed admission counts hits.
int kvt_admit_try(kvt_admit_t *self, kvt_sreq_t *r, uint64_t now_us)
{
    uint32_t bs = self->cfg.block_size, cs = self->cfg.chunk_size;
    bool hybrid = self->ck != NULL;
    //  The last probe needed more fresh blocks than exist now: nothing that
    //  could help has happened (a probe's demand only shrinks when blocks
    //  free up), so skip the probe (rule B1: the demand travels with it).
    if (r->adm.probe_demand > kvt_blockmgr_available(self->bm) ||
        (hybrid && kvt_ckpt_slots_free(self->ck) == 0)) {
        return s_wait(self, r, now_us); //  waiting: no blocks or no slot for it yet
    }
    kvt_sched_probe_t *p = &self->probe;
    uint32_t want = s_probe(self, r, p);
    //  A hybrid request that cannot resume at its gated hit waits before
    //  its lookup; a dense one learns its tier hit first (its fit depends
    //  on it, below).
    if (hybrid && !p->has_demand) {
        r->adm.probe_demand = want;
        return s_wait(self, r, now_us); //  waiting: its probe found no room
    }
    uint32_t tail = self->cfg.tail;
    uint32_t max_chunks = r->nprompt > tail ? (r->nprompt - tail) / cs : 0;
    uint32_t tier_chunks;
    if (!kvt_lookups_tier_hit(self->lk, r, max_chunks, &tier_chunks, self->rt, self->pb, now_us))
        return KVT_ADMIT_LOOKUP;
    uint32_t tier = tier_chunks * cs;
    uint32_t need = kvt_reqtab_blocks_needed(self->rt, r->nfeed);
    kvt_joint_stats_t js = {0};
    kvt_joint_t d =
        hybrid ? s_plan_hybrid(self, r, p, tier, &js) : s_plan_dense(self, p, tier, need);
    //  The fit (the joint planner checked a hybrid one): the blocks the
    //  commit takes must be free now.
    uint32_t pins = hybrid ? (p->hbm > 0) + (d.src == KVT_JOINT_STATE_HBM) : 0;
    if (s_room(self, pins) < d.demand) {
        r->adm.probe_demand = d.demand;
        return KVT_ADMIT_WAIT;
    }
    bool load = d.b > p->hbm;
    bool kv_leg = load && d.claim < d.b;
    //  No load convoys: chunks another admission is loading are waited for
    //  (its verdict indexes them in HBM), not loaded a second time. Only
    //  hybrid loads count their chunks (kvt_loadtrack_convoy_mark).
    for (uint32_t t = kv_leg ? d.claim : d.b; hybrid && kv_leg && t < d.b; t += cs)
        if (kvt_loadtrack_convoy_busy(self->lt, kvt_reqtab_chunk_key(self->rt, r, t / cs))) {
            if (!r->adm.convoy_waited)
                self->st.convoy_waits++;
            r->adm.convoy_waited = true;
            return KVT_ADMIT_WAIT;
        }
    //  Every tier hit that votes for an image touches it (I5, throttled per
    //  hash by the index); an image not confirmed within the verified
    //  window holds the admission for the touch's verdict, bounded from the
    //  first hold (I6). A held request holds up no one behind it.
    if (d.src == KVT_JOINT_STATE_TIER) {
        kvt_hash_t h = kvt_reqtab_hash_at(self->rt, r, d.b / bs - 1);
        uint64_t round;
        if (kvt_stidx_want_touch(self->stidx, h, now_us, &round) &&
            kvt_planbuf_add_touch(self->pb, h, round) == 0)
            self->st.touches_planned++;
        if (kvt_stidx_hold(self->stidx, h, now_us)) {
            self->st.verify_holds++;
            return KVT_ADMIT_LOOKUP;
        }
    }
    //  The plan must be able to carry the load and the request's first entry.
    uint32_t kv_tokens = kv_leg ? d.b - d.claim : 0;
    size_t bytes = KVT_SCHED_ENTRY_BYTES(need) +
                   (load ? KVT_SCHED_SPEC_BYTES(kv_tokens / bs, kv_tokens / cs) : 0);
    if (!kvt_planbuf_fits(self->pb, bytes) || s_nloads(self) >= KVT_MSG_MAX_ENTRIES) {
        kvt_planbuf_defer(self->pb);
        return KVT_ADMIT_WAIT;
    }
    //  Reserve every array the commit writes, so the commit cannot fail.
    uint32_t hb = p->hbm / bs, clb = load ? d.claim / bs : hb;
    uint32_t lo = clb < hb ? clb : hb, nret = load ? (clb < hb ? hb - clb : clb - hb) : 0;
    r->blocks = malloc((size_t)need * sizeof(uint32_t));
    uint32_t *rpins = nret ? malloc((size_t)nret * sizeof(uint32_t)) : NULL; //  retreat pins
    //  The load's holding too (what an abort mid-load keeps): reserved now,
    //  an abort never needs memory (kvt_loadtrack_reserve).
    kvt_opid_t lop = {r->id, r->gen + 1}; //  the admission's id once committed
    if (!r->blocks || (nret && !rpins) || kvt_planbuf_reserve_loads(self->pb, 1) ||
        kvt_planbuf_reserve(self->pb, kv_tokens / bs, kv_tokens / cs) ||
        (hybrid && kvt_planbuf_reserve_state(self->pb, 1)) ||
        (load && kvt_loadtrack_reserve(self->lt, lop, kv_tokens / bs) != 0)) {
        s_release(r, rpins);
        return KVT_ADMIT_WAIT;
    }
    //  The state index owns the state load's lifecycle (I1): recorded
    //  before anything is committed, carried by this plan's LoadSpec.
    if (hybrid) {
        r->sslot = kvt_ckpt_slot_take(self->ck);
        assert(r->sslot != KVT_CKPT_NONE); //  checked by the probe
    }
    if (d.src == KVT_JOINT_STATE_TIER &&
        kvt_stidx_request_load(self->stidx, (kvt_opid_t){r->id, r->gen + 1},
                               kvt_reqtab_hash_at(self->rt, r, d.b / bs - 1), r->sslot,
                               now_us) != 0) {
        kvt_loadtrack_unreserve(self->lt, lop);
        kvt_ckpt_slot_give(self->ck, r->sslot);
        r->sslot = KVT_CKPT_NONE;
        s_release(r, rpins);
        return KVT_ADMIT_WAIT;
    }
    //  Blocks below the claim are shared. A retreat must find the hit
    //  again: below it the hit's own blocks stay pinned (the table gets
    //  fresh copies), above it fresh spares wait (the table shares).
    for (uint32_t i = 0; i < clb; i++) {
        r->blocks[i] = self->blocks[i];
        kvt_blockmgr_ref(self->bm, r->blocks[i]);
    }
    for (uint32_t i = clb; i < hb; i++) {
        rpins[i - clb] = self->blocks[i];
        kvt_blockmgr_ref(self->bm, self->blocks[i]);
    }
    //  The checkpoints it resumes from are pinned before the allocation,
    //  which may evict checkpoints (one HBM budget; the fit left them out).
    uint32_t ck_gate = hybrid && hb > 0 ? kvt_ckpt_pin(self->ck, r->hashes[hb - 1]) : KVT_CKPT_NONE;
    uint32_t ck_b = d.src == KVT_JOINT_STATE_HBM
                        ? kvt_ckpt_pin(self->ck, kvt_reqtab_hash_at(self->rt, r, d.b / bs - 1))
                        : KVT_CKPT_NONE;
    int rc = kvt_blockmgr_alloc(self->bm, need - clb, r->blocks + clb);
    if (rc == 0 && clb > hb)
        rc = kvt_blockmgr_alloc(self->bm, nret, rpins);
    assert(rc == 0); //  the fit (probe demand + the joint's extra) was checked
    (void)rc;
    r->nblocks = need;
    r->registered = clb;
    r->adm.probe_demand = 0;
    r->adm.convoy_waited = false;
    kvt_reqtab_next_gen(self->rt, r);
    r->hbm_hit = p->hbm;
    r->block_hit = hybrid ? p->block_hit : 0;
    r->joint_src = (uint8_t)d.src;
    kvt_blockmgr_count_hit(self->bm, hb);
    s_add_joint_stats(&self->st.joint, &js);
    //  The HBM hit is recorded as found (rule B3): the gated hit, never the
    //  chunk floor the KV leg starts from.
    self->st.hbm_hit_tokens += p->hbm;
    self->st.gate_lost_tokens += p->block_hit - p->hbm;
    //  The state tax: what KV alone could have resumed minus the boundary
    //  chosen (design §4.8).
    uint32_t kv_alone = p->block_hit > tier ? p->block_hit : tier;
    uint32_t chosen = load ? d.b : p->hbm;
    r->branch_at = kv_alone / cs * cs > chosen ? kv_alone / cs * cs : 0;
    if (hybrid && kv_alone > 0) {
        self->st.state_resumes++;
        self->st.state_tax_tokens += kv_alone > chosen ? kv_alone - chosen : 0;
    }
    kvt_planbuf_event(self->pb, r->id, r->gen, KVT_EV_ADMIT, p->hbm, load ? d.b - p->hbm : 0,
                      r->nprompt);
    //  What the admission found, for the replay's loss ledger: the KV hit
    //  before any gate, the tier's reach, and why the boundary is where it is.
    kvt_planbuf_event(
        self->pb, r->id, r->gen, KVT_EV_OUTCOME, hybrid ? p->block_hit : p->hbm, tier,
        KVT_EV_OUTCOME_C(hybrid ? d.reason : 0, r->lk.timed_out, hybrid ? d.cand / cs : 0));
    if (!load) {
        kvt_lookups_settle(self->lk, r, NULL, self->pb);
        if (hybrid && hb > 0) {
            r->ck_restore = ck_gate;
            r->restore_at = p->hbm;
            assert(r->ck_restore != KVT_CKPT_NONE); //  the gate found it
        }
        r->computed = p->hbm;
        //  Chunks the tier already holds need no save.
        kvt_saves_admit(self->sv, r, tier < p->hbm ? tier : p->hbm, 0, 0);
        r->verify_end = p->hbm;
        return KVT_ADMIT_RUNNING;
    }
    //  The load tracker owns the load from here (I1): its boundaries, legs
    //  and retreat pins; the hit's checkpoint stays pinned until the load
    //  settles, a retreat restores it (B2).
    kvt_load_start_t ld = {.floor = d.claim,
                           .end = d.b,
                           .legs = (uint8_t)((kv_leg ? S_LEG_KV : 0) |
                                             (d.src == KVT_JOINT_STATE_TIER ? S_LEG_STATE : 0)),
                           .convoy = hybrid && kv_leg,
                           .pins = rpins,
                           .npins = nret,
                           .pin_lo = lo,
                           .ck_hit = hybrid ? ck_gate : KVT_CKPT_NONE};
    kvt_hash_t hb_key = d.src != KVT_JOINT_NONE ? kvt_reqtab_hash_at(self->rt, r, d.b / bs - 1)
                                                : (kvt_hash_t){0, 0};
    if (d.src == KVT_JOINT_STATE_HBM) {
        r->ck_restore = ck_b;
        r->restore_at = d.b;
    } else if (d.src == KVT_JOINT_STATE_TIER) {
        kvt_sched_state_op_t op = {.op = {r->id, r->gen},
                                   .kind = KVT_SCHED_STATE_LOAD,
                                   .slot = r->sslot,
                                   .entry = KVT_CKPT_NONE,
                                   .at = d.b,
                                   .key = hb_key};
        kvt_planbuf_add_state(self->pb, &op);
        self->st.state_loads++;
    }
    r->computed = d.claim;
    kvt_loadtrack_start(self->lt, r, &ld, now_us);
    if (kv_leg)
        s_plan_load(self, r, d.claim, d.b);
    else if (d.src == KVT_JOINT_STATE_TIER) //  state only (rule L3): no KV leg, keys, blocks
        kvt_planbuf_add_empty_load(self->pb, (kvt_opid_t){r->id, r->gen});
    if (d.src == KVT_JOINT_STATE_TIER) {
        //  The state leg rides in the same LoadSpec (one completion per rank).
        kvt_load_spec_t *l = kvt_planbuf_last_load(self->pb);
        l->state = true;
        l->state_boundary = d.b;
        l->state_hash = hb_key;
        l->state_slot = r->sslot;
        int rc_c = kvt_stidx_carried(self->stidx, l->op);
        assert(rc_c == 0); //  recorded above, armed until now
        (void)rc_c;
    }
    kvt_lookups_settle(self->lk, r, kvt_planbuf_last_load(self->pb), self->pb);
    //  The save floor, recorded once when the load is decided (S5).
    kvt_saves_admit(self->sv, r, tier < p->hbm ? tier : p->hbm, p->hbm, d.b);
    r->verify_end = d.b;
    return KVT_ADMIT_LOADING;
}

// ------------------------------------------------------------- stats ----

void kvt_admit_stats(const kvt_admit_t *self, kvt_sched_stats_t *out)
{
    const s_stats_t *s = &self->st;
    out->hbm_hit_tokens = s->hbm_hit_tokens;
    out->gate_lost_tokens = s->gate_lost_tokens;
    out->state_resumes = s->state_resumes;
    out->state_tax_tokens = s->state_tax_tokens;
    out->joint_state_hbm = s->joint.state_hbm;
    out->joint_state_tier = s->joint.state_tier;
    out->tier_within_hbm = s->joint.tier_within_hbm;
    out->no_rung_above_hbm = s->joint.no_rung_above_hbm;
    out->partial_chunk_no_room = s->joint.partial_chunk_no_room;
    out->no_probe_demand = s->joint.no_probe_demand;
    out->below_min_load = s->joint.below_min_load;
    out->convoy_waits = s->convoy_waits;
    out->touches_planned = s->touches_planned;
    out->verify_holds = s->verify_holds;
    out->state_loads = s->state_loads;
}

int kvt_admit_check(const kvt_admit_t *self, char *err, size_t errlen)
{
    if (self->st.state_loads != self->st.joint.state_tier) {
        snprintf(err, errlen, "admit: %llu state loads for %llu joints from the tier",
                 (unsigned long long)self->st.state_loads,
                 (unsigned long long)self->st.joint.state_tier);
        return -1;
    }
    return 0;
}
