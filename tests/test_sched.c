/*  Scheduler core: block manager, admission, saves, orphans, lookups and
    the step planner, driven
    directly (no actors). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "actors/common/kvt_prefix.h"
#include "actors/scheduler/kvt_blockmgr.h"
#include "actors/scheduler/kvt_sched.h"
#include "kvtier/kvt_store.h"

static kvt_hash_t H(uint64_t x)
{
    kvt_hash_t h = {x * 7 + 1, x};
    return h;
}

// ------------------------------------------------------- block manager ----

Test(blockmgr, alloc_then_free_returns_every_block)
{
    kvt_blockmgr_t *bm = kvt_blockmgr_new(8, 4);
    uint32_t b[8];
    cr_assert_eq(kvt_blockmgr_alloc(bm, 8, b), 0);
    cr_assert_eq(kvt_blockmgr_available(bm), 0);
    cr_assert_eq(kvt_blockmgr_alloc(bm, 1, b), -1, "over-allocation must fail, not block");
    for (int i = 0; i < 8; i++)
        kvt_blockmgr_unref(bm, b[i]);
    cr_assert_eq(kvt_blockmgr_available(bm), 8);
    cr_assert_eq(kvt_blockmgr_in_use(bm), 0);
    kvt_blockmgr_destroy(&bm);
    cr_assert_null(bm);
}

Test(blockmgr, cached_blocks_are_shared_and_evicted_oldest_first)
{
    kvt_blockmgr_t *bm = kvt_blockmgr_new(4, 2);
    uint32_t toks[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    uint32_t b[4];
    cr_assert_eq(kvt_blockmgr_alloc(bm, 4, b), 0);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(kvt_blockmgr_register(bm, b[i], H(i), toks + 2 * i), 0);
    //  Release in order 2, 0, 3, 1: the LRU's old end is block 2.
    int order[4] = {2, 0, 3, 1};
    for (int i = 0; i < 4; i++)
        kvt_blockmgr_unref(bm, b[order[i]]);
    kvt_hash_t hs[4] = {H(0), H(1), H(2), H(3)};
    uint32_t got[4];
    cr_assert_eq(kvt_blockmgr_match(bm, hs, toks, 4, got), 4);
    //  Allocating one block evicts the oldest free cached block (b[2]).
    uint32_t nb;
    cr_assert_eq(kvt_blockmgr_alloc(bm, 1, &nb), 0);
    cr_assert_eq(nb, b[2]);
    cr_assert_eq(kvt_blockmgr_match(bm, hs, toks, 4, got), 2, "prefix stops at the evicted block");
    kvt_blockmgr_stats_t st;
    kvt_blockmgr_stats(bm, &st);
    cr_assert_eq(st.evicted, 1);
    kvt_blockmgr_destroy(&bm);
}

Test(blockmgr, referenced_cached_block_is_never_evicted)
{
    kvt_blockmgr_t *bm = kvt_blockmgr_new(2, 1);
    uint32_t t[2] = {5, 6};
    uint32_t b[2];
    kvt_blockmgr_alloc(bm, 2, b);
    kvt_blockmgr_register(bm, b[0], H(0), t);
    kvt_blockmgr_register(bm, b[1], H(1), t + 1);
    kvt_blockmgr_unref(bm, b[0]);
    kvt_blockmgr_unref(bm, b[1]);
    kvt_blockmgr_ref(bm, b[0]); //  a request shares block 0 again
    uint32_t nb[2];
    cr_assert_eq(kvt_blockmgr_alloc(bm, 2, nb), -1);
    cr_assert_eq(kvt_blockmgr_alloc(bm, 1, nb), 0);
    cr_assert_eq(nb[0], b[1]);
    kvt_blockmgr_destroy(&bm);
}

Test(blockmgr, token_mismatch_on_hash_hit_is_a_miss)
{
    kvt_blockmgr_t *bm = kvt_blockmgr_new(2, 2);
    uint32_t t[2] = {1, 2}, other[2] = {1, 3};
    uint32_t b;
    kvt_blockmgr_alloc(bm, 1, &b);
    kvt_blockmgr_register(bm, b, H(9), t);
    kvt_hash_t h = H(9);
    uint32_t got;
    cr_assert_eq(kvt_blockmgr_match(bm, &h, other, 1, &got), 0);
    cr_assert_eq(kvt_blockmgr_match(bm, &h, t, 1, &got), 1);
    kvt_blockmgr_stats_t st;
    kvt_blockmgr_stats(bm, &st);
    cr_assert_eq(st.token_mismatch, 1);
    kvt_blockmgr_destroy(&bm);
}

Test(blockmgr, duplicate_hash_keeps_first_block)
{
    kvt_blockmgr_t *bm = kvt_blockmgr_new(2, 1);
    uint32_t t[1] = {1};
    uint32_t b[2];
    kvt_blockmgr_alloc(bm, 2, b);
    cr_assert_eq(kvt_blockmgr_register(bm, b[0], H(1), t), 0);
    cr_assert_eq(kvt_blockmgr_register(bm, b[1], H(1), t), 1);
    kvt_blockmgr_unref(bm, b[1]); //  private: back to the free stack
    kvt_blockmgr_unref(bm, b[0]);
    kvt_hash_t h = H(1);
    uint32_t got;
    cr_assert_eq(kvt_blockmgr_match(bm, &h, t, 1, &got), 1);
    cr_assert_eq(got, b[0]);
    kvt_blockmgr_destroy(&bm);
}

// ------------------------------------------------------------ scheduler ----

#define BS 16
#define CS 64

typedef struct {
    kvt_sched_t *s;              //  the core
    kvt_step_plan_t plan;        //  last plan
    uint64_t step;               //  step counter
    kvt_verdict_t pending[4096]; //  verdicts the test will deliver
    uint32_t npending;           //  entries in pending
    bool fail_loads;             //  make load verdicts fail (MISS)
    bool fail_saves;             //  make save verdicts fail
    uint32_t loads_seen;         //  loads planned
    uint32_t saves_seen;         //  chunk saves planned
    uint32_t verify_entries;     //  entries with verify_end > 0
    uint32_t admit_hbm;          //  sum of ADMIT a
    uint32_t admit_tier;         //  sum of ADMIT b
    uint32_t loaded;             //  LOADED events
    uint32_t retreats;           //  RETREAT events
    uint32_t finished;           //  FINISH events
    uint32_t max_attempt;        //  highest save attempt seen
    bool fail_state;             //  make state-leg verdicts fail (MISS)
    uint32_t takes[64];          //  boundaries of the checkpoints planned (first 64)
    uint32_t ntakes;             //  TAKE ops seen
    uint32_t restores;           //  RESTORE ops seen
    uint32_t state_loads;        //  LOAD (state leg) ops seen
    kvt_hash_t stored[8192];     //  chunk keys the ranks hold (ok save verdicts delivered)
    uint32_t nstored;            //  entries in stored
    uint32_t lookups_seen;       //  Lookups planned
    uint32_t releases_seen;      //  LookupReleases planned
    uint32_t pins_used;          //  loads planned with LoadSpec.lookup
    bool lose_lookups;           //  plan lookups get no verdict
} rig_t;

static bool rig_holds(const rig_t *r, kvt_hash_t k)
{
    for (uint32_t i = 0; i < r->nstored; i++)
        if (kvt_hash_eq(r->stored[i], k))
            return true;
    return false;
}

//  The ranks' answer to a lookup: leading keys held (as the aggregator
//  settles it).
static uint32_t rig_held(const rig_t *r, const kvt_lookup_t *l)
{
    uint32_t n = 0;
    while (n < l->nkeys && rig_holds(r, l->keys[n]))
        n++;
    return n;
}

static void rig_init_pin(rig_t *r, uint32_t hbm_blocks, uint32_t tier_chunks, bool pin)
{
    memset(r, 0, sizeof *r);
    kvt_sched_cfg_t cfg = {.lookup_pin = pin,
                           .lookup_ttl_ms = pin ? 500 : 0,
                           .block_size = BS,
                           .chunk_size = CS,
                           .hbm_blocks = hbm_blocks,
                           .tier_chunks = tier_chunks,
                           .max_running = 8,
                           .step_tokens = 256,
                           .save_retries = 1,
                           .ns = kvt_namespace_hash("test")};
    char err[128];
    r->s = kvt_sched_new(&cfg, err, sizeof err);
    cr_assert_not_null(r->s, "%s", err);
}

static void rig_init(rig_t *r, uint32_t hbm_blocks, uint32_t tier_chunks)
{
    rig_init_pin(r, hbm_blocks, tier_chunks, false);
}

static void rig_arrive(rig_t *r, uint64_t id, uint32_t n, uint32_t base, uint32_t max_new)
{
    uint32_t *t = malloc(n * sizeof *t);
    for (uint32_t i = 0; i < n; i++)
        t[i] = base + i;
    kvt_arrival_t a = {.req = id, .tokens = t, .ntokens = n, .max_new_tokens = max_new};
    cr_assert_eq(kvt_sched_arrive(r->s, &a), 0);
    free(t);
}

static void rig_audit(rig_t *r)
{
    char err[256];
    cr_assert_eq(kvt_sched_audit(r->s, err, sizeof err), 0, "%s", err);
}

//  One step: plan, record what the plan asks, queue verdicts for its loads
//  and saves. Returns the plan's return code.
static int rig_step_once(rig_t *r)
{
    int rc = kvt_sched_plan(r->s, ++r->step, false, &r->plan);
    if (rc == KVT_SCHED_HOLD)
        r->step--; //  a held step is planned again with the same number
    if (rc < 0)
        return rc;
    const kvt_step_plan_t *p = &r->plan;
    for (uint32_t i = 0; i < p->nevents; i++) {
        const kvt_event_t *e = &p->events[i];
        if (e->type == KVT_EV_ADMIT) {
            r->admit_hbm += e->a;
            r->admit_tier += e->b;
        }
        r->loaded += e->type == KVT_EV_LOADED;
        r->retreats += e->type == KVT_EV_RETREAT;
        r->finished += e->type == KVT_EV_FINISH;
    }
    for (uint32_t i = 0; i < p->nentries; i++)
        r->verify_entries += p->entries[i].verify_end > 0;
    const kvt_sched_state_op_t *ops;
    uint32_t nops;
    kvt_sched_plan_state(r->s, &ops, &nops);
    for (uint32_t i = 0; i < nops; i++) {
        if (ops[i].kind == KVT_SCHED_STATE_TAKE && r->ntakes < 64)
            r->takes[r->ntakes++] = ops[i].at;
        r->restores += ops[i].kind == KVT_SCHED_STATE_RESTORE;
        if (ops[i].kind != KVT_SCHED_STATE_LOAD)
            continue;
        r->state_loads++;
        kvt_verdict_t *v = &r->pending[r->npending++];
        memset(v, 0, sizeof *v);
        v->chan = KVT_CHAN_STATE;
        v->op = ops[i].op;
        v->key = ops[i].key;
        v->ok = !r->fail_state;
        v->detail = r->fail_state ? KVT_DETAIL_MISS : 0;
    }
    for (uint32_t i = 0; i < p->nlookups && !r->lose_lookups; i++) {
        kvt_verdict_t *v = &r->pending[r->npending++];
        memset(v, 0, sizeof *v);
        v->chan = KVT_CHAN_LOOKUP;
        v->op = p->lookups[i].op;
        v->ok = true;
        v->held = rig_held(r, &p->lookups[i]);
    }
    r->lookups_seen += p->nlookups;
    r->releases_seen += p->nlookup_releases;
    for (uint32_t i = 0; i < p->nloads; i++) {
        r->pins_used += p->loads[i].lookup;
        if (p->loads[i].nkeys == 0)
            continue; //  a state-only load: its verdict comes on the state channel
        kvt_verdict_t *v = &r->pending[r->npending++];
        memset(v, 0, sizeof *v);
        v->chan = KVT_CHAN_LOAD;
        v->op = p->loads[i].op;
        v->ok = !r->fail_loads;
        v->detail = r->fail_loads ? KVT_DETAIL_MISS : 0;
        r->loads_seen++;
    }
    for (uint32_t i = 0; i < p->nsaves; i++)
        for (uint32_t k = 0; k < p->saves[i].nkeys; k++) {
            kvt_verdict_t *v = &r->pending[r->npending++];
            memset(v, 0, sizeof *v);
            v->chan = KVT_CHAN_SAVE;
            v->op = p->saves[i].op;
            v->key = p->saves[i].keys[k];
            v->attempt = p->saves[i].attempt;
            if (v->attempt > r->max_attempt)
                r->max_attempt = v->attempt;
            v->ok = !r->fail_saves;
            v->detail = r->fail_saves ? KVT_DETAIL_NO_SPACE : 0;
            r->saves_seen++;
        }
    return rc;
}

//  One step as the engine sees it. A plan that only sends lookups has
//  their answers delivered at once and the next step planned, so the tests
//  look at the plan that admits (test_sched's lookup tests step once).
static int rig_step(rig_t *r)
{
    for (;;) {
        int rc = rig_step_once(r);
        const kvt_step_plan_t *p = &r->plan;
        if (rc < 0 || r->lose_lookups || p->nlookups == 0 || p->nentries || p->nloads || p->nsaves)
            return rc;
        uint32_t keep = 0;
        for (uint32_t i = 0; i < r->npending; i++) {
            if (r->pending[i].chan == KVT_CHAN_LOOKUP)
                kvt_sched_verdict(r->s, &r->pending[i]);
            else
                r->pending[keep++] = r->pending[i];
        }
        r->npending = keep;
    }
}

static void rig_deliver(rig_t *r)
{
    for (uint32_t i = 0; i < r->npending; i++) {
        const kvt_verdict_t *v = &r->pending[i];
        if (v->chan == KVT_CHAN_SAVE && v->ok && !rig_holds(r, v->key) && r->nstored < 8192)
            r->stored[r->nstored++] = v->key;
        kvt_sched_verdict(r->s, v);
    }
    r->npending = 0;
}

//  Runs until idle, delivering verdicts after every step.
static void rig_run(rig_t *r, uint32_t max_steps)
{
    for (uint32_t i = 0; i < max_steps; i++) {
        int rc = rig_step(r);
        rig_deliver(r);
        rig_audit(r);
        if (rc == 0 && r->plan.idle)
            return;
    }
    cr_assert_fail("did not go idle in %u steps", max_steps);
}

Test(sched, admission_is_fifo_and_stops_at_the_first_request_that_does_not_fit)
{
    static rig_t r;
    rig_init(&r, 16, 0);
    rig_arrive(&r, 1, 200, 1000, 4); //  13 blocks
    rig_arrive(&r, 2, 100, 5000, 4); //  7 blocks: does not fit beside request 1
    rig_arrive(&r, 3, 16, 9000, 4);  //  2 blocks: would fit, but waits behind 2
    cr_assert_eq(rig_step(&r), 1);
    uint32_t admitted = 0;
    for (uint32_t i = 0; i < r.plan.nevents; i++)
        if (r.plan.events[i].type == KVT_EV_ADMIT) {
            cr_assert_eq(r.plan.events[i].op.req, 1, "request %llu admitted out of order",
                         (unsigned long long)r.plan.events[i].op.req);
            admitted++;
        }
    cr_assert_eq(admitted, 1);
    cr_assert_eq(r.plan.nentries, 1);
    cr_assert_eq(r.plan.entries[0].op.req, 1);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.waiting, 2);
    rig_deliver(&r);
    rig_run(&r, 200);
    cr_assert_eq(r.finished, 3);
    kvt_sched_destroy(&r.s);
}

Test(sched, single_request_computes_saves_and_goes_quiescent)
{
    rig_t r;
    rig_init(&r, 64, 64);
    rig_arrive(&r, 1, 200, 1000, 4);
    rig_run(&r, 100);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.finished, 1);
    cr_assert_eq(r.finished, 1);
    //  200 prompt + 3 fed outputs = 203 tokens: 3 complete chunks of 64.
    cr_assert_eq(st.saves_ok, 3);
    cr_assert_eq(r.saves_seen, 3);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(sched, saves_are_built_only_after_the_forward_that_completed_them)
{
    rig_t r;
    rig_init(&r, 64, 64);
    rig_arrive(&r, 1, 200, 1000, 4);
    cr_assert_eq(rig_step(&r), 1);
    //  The first plan computes the prompt but saves nothing yet.
    cr_assert_eq(r.plan.nentries, 1);
    cr_assert_eq(r.plan.nsaves, 0);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.nsaves, 1);
    cr_assert_eq(r.plan.saves[0].start, 0);
    cr_assert_eq(r.plan.saves[0].end, 192);
    rig_deliver(&r);
    kvt_sched_destroy(&r.s);
}

Test(sched, repeated_prompt_hits_hbm_and_leaves_a_token_to_compute)
{
    rig_t r;
    rig_init(&r, 64, 0);
    rig_arrive(&r, 1, 128, 5, 1);
    rig_run(&r, 50);
    rig_arrive(&r, 2, 128, 5, 1);
    rig_run(&r, 50);
    //  128 tokens = 8 full blocks, but a hit must leave one token: 7 blocks.
    cr_assert_eq(r.admit_hbm, 112);
    cr_assert_eq(r.verify_entries, 1, "the resumed request is verified before its forward");
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(sched, evicted_prefix_is_restored_from_the_tier)
{
    rig_t r;
    //  12 blocks of HBM: the second request's prompt evicts the first's.
    rig_init(&r, 12, 64);
    rig_arrive(&r, 1, 150, 100, 1);
    rig_run(&r, 50);
    rig_arrive(&r, 2, 150, 90000, 1);
    rig_run(&r, 50);
    rig_arrive(&r, 3, 150, 100, 1);
    rig_run(&r, 50);
    cr_assert_eq(r.loads_seen, 1);
    cr_assert_eq(r.loaded, 1);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    //  Request 2 evicted request 1's tail: 2 blocks (32 tokens) are still in
    //  HBM. The load refills [0, 128) from the tier (the chunk floor of the
    //  32-token hit is 0); the hit is credited to HBM (rule B3), the rest to
    //  the tier.
    cr_assert_eq(r.admit_hbm - 0, st.hbm_hit_tokens);
    cr_assert_eq(st.tier_hit_tokens, 128 - 32);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(sched, failed_load_retreats_retracts_and_recomputes)
{
    rig_t r;
    rig_init(&r, 12, 64);
    rig_arrive(&r, 1, 150, 100, 1);
    rig_run(&r, 50);
    rig_arrive(&r, 2, 150, 90000, 1);
    rig_run(&r, 50);
    r.fail_loads = true;
    rig_arrive(&r, 3, 150, 100, 1);
    rig_run(&r, 50);
    cr_assert_eq(r.retreats, 1);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.loads_failed, 1);
    cr_assert_eq(st.tier_hit_tokens, 0);
    //  The missing keys were retracted and saved again by the recompute.
    cr_assert_eq(st.saves_ok, 2 + 2 + 2);
    cr_assert_eq(st.finished, 3);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(sched, released_blocks_evict_suffix_before_prefix)
{
    rig_t r;
    rig_init(&r, 16, 0);
    rig_arrive(&r, 1, 200, 100, 1); //  13 blocks
    rig_run(&r, 50);
    rig_arrive(&r, 2, 100, 90000, 1); //  7 blocks: 3 free + 4 evicted
    rig_run(&r, 50);
    r.admit_hbm = 0;
    rig_arrive(&r, 3, 200, 100, 1);
    rig_run(&r, 50);
    //  The 4 evicted blocks were request 1's last ones: 9 blocks remain.
    cr_assert_eq(r.admit_hbm, 144);
    kvt_sched_destroy(&r.s);
}

Test(sched, unaligned_hbm_hit_loads_from_the_chunk_floor)
{
    rig_t r;
    rig_init(&r, 16, 64);
    rig_arrive(&r, 1, 200, 100, 1);
    rig_run(&r, 50);
    rig_arrive(&r, 2, 100, 90000, 1);
    rig_run(&r, 50);
    r.admit_hbm = r.admit_tier = 0;
    rig_arrive(&r, 3, 200, 100, 1);
    cr_assert_eq(rig_step(&r), 1);
    //  HBM holds 144 tokens (9 blocks, off the 64-token grid); the tier
    //  holds 192. Keep the 128 below the chunk floor shared, load [128, 192)
    //  into fresh blocks.
    cr_assert_eq(r.plan.nloads, 1);
    cr_assert_eq(r.plan.loads[0].start, 128);
    cr_assert_eq(r.plan.loads[0].end, 192);
    cr_assert_eq(r.plan.loads[0].nblocks, 4);
    //  The hit is recorded as found (rule B3): 144 from HBM, 48 from the tier.
    cr_assert_eq(r.admit_hbm, 144);
    cr_assert_eq(r.admit_tier, 48);
    rig_deliver(&r);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.entries[0].start, 192);
    cr_assert_eq(r.plan.entries[0].verify_end, 192);
    rig_deliver(&r);
    rig_run(&r, 50);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(sched, hold_until_verdict_when_everything_waits_on_loads)
{
    rig_t r;
    rig_init(&r, 12, 64);
    rig_arrive(&r, 1, 150, 100, 1);
    rig_run(&r, 50);
    rig_arrive(&r, 2, 150, 90000, 1);
    rig_run(&r, 50);
    rig_arrive(&r, 3, 150, 100, 1);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.nloads, 1);
    //  Nothing can run until the load's verdict: the caller must hold.
    cr_assert_eq(rig_step(&r), -1);
    rig_deliver(&r);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.nentries, 1);
    cr_assert_eq(r.plan.entries[0].verify_end, 128);
    rig_deliver(&r);
    kvt_sched_destroy(&r.s);
}

Test(sched, rule_A3_stale_generation_verdict_is_ignored)
{
    rig_t r;
    rig_init(&r, 12, 64);
    rig_arrive(&r, 1, 150, 100, 1);
    rig_run(&r, 50);
    rig_arrive(&r, 2, 150, 90000, 1);
    rig_run(&r, 50);
    rig_arrive(&r, 3, 150, 100, 1);
    rig_step(&r);
    cr_assert_eq(r.npending, 1);
    kvt_verdict_t v = r.pending[0];
    v.op.gen += 1;
    cr_assert_eq(kvt_sched_verdict(r.s, &v), -1);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.loading, 1, "a verdict for another generation must not settle the load");
    cr_assert_eq(st.stale_verdicts, 1);
    rig_deliver(&r);
    rig_run(&r, 50);
    kvt_sched_destroy(&r.s);
}

Test(sched, finished_request_keeps_leases_until_save_verdicts)
{
    rig_t r;
    rig_init(&r, 64, 64);
    rig_arrive(&r, 1, 64, 1, 1);
    cr_assert_eq(rig_step(&r), 1); //  computes 64 tokens, finishes
    cr_assert_eq(rig_step(&r), 1); //  retires it and saves its chunk
    cr_assert_eq(r.plan.nsaves, 1);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.leased_blocks, CS / BS);
    cr_assert_eq(st.blocks_in_use, CS / BS, "the finished request keeps its blocks");
    cr_assert_eq(st.records, 1);
    rig_audit(&r);
    rig_deliver(&r);
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.blocks_in_use, 0);
    cr_assert_eq(st.records, 0);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(sched, failed_save_is_reemitted_once_while_running)
{
    rig_t r;
    rig_init(&r, 64, 64);
    r.fail_saves = true;
    rig_arrive(&r, 1, 64, 1, 40); //  long decode keeps it running
    rig_run(&r, 100);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.saves_reemitted, 1);
    //  The re-emitted chunk carried a new attempt, so its reports open a new key.
    cr_assert_eq(r.max_attempt, 1);
    cr_assert_eq(st.saves_failed, st.saves_dispatched);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(sched, no_tier_means_no_saves)
{
    rig_t r;
    rig_init(&r, 64, 0);
    rig_arrive(&r, 1, 300, 1, 2);
    rig_run(&r, 50);
    cr_assert_eq(r.saves_seen, 0);
    kvt_sched_destroy(&r.s);
}

Test(sched, request_larger_than_the_pool_is_refused_with_an_event)
{
    rig_t r;
    rig_init(&r, 8, 64);
    uint32_t t[200] = {0};
    kvt_arrival_t a = {.req = 5, .tokens = t, .ntokens = 200, .max_new_tokens = 1};
    cr_assert_eq(kvt_sched_arrive(r.s, &a), -1);
    cr_assert_eq(rig_step(&r), 0);
    cr_assert_eq(r.finished, 1);
    cr_assert_eq(r.plan.events[0].c, 1, "refusal is flagged");
    kvt_sched_destroy(&r.s);
}

Test(sched, bad_configuration_is_refused_naming_the_setting)
{
    kvt_sched_cfg_t cfg = {
        .block_size = 16, .chunk_size = 100, .hbm_blocks = 64, .max_running = 4, .step_tokens = 64};
    char err[128];
    cr_assert_null(kvt_sched_new(&cfg, err, sizeof err));
    cr_assert(strstr(err, "chunk_size") != NULL, "%s", err);
}

Test(sched, many_requests_under_pressure_stay_consistent)
{
    rig_t r;
    rig_init(&r, 40, 16);
    for (uint64_t i = 0; i < 40; i++)
        rig_arrive(&r, i, 60 + (uint32_t)(i * 37 % 200), (uint32_t)(i % 5) * 1000, 1 + i % 9);
    rig_run(&r, 2000);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.finished, 40);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(sched, repeated_or_skipped_step_is_refused_without_side_effects)
{
    rig_t r;
    rig_init(&r, 64, 0); //  no tier: the first plan admits
    rig_arrive(&r, 1, 100, 1, 4);
    kvt_step_plan_t p;
    cr_assert_eq(kvt_sched_plan(r.s, 1, false, &p), 1);
    cr_assert_eq(kvt_sched_plan(r.s, 1, false, &p), KVT_SCHED_REFUSED, "step 1 again");
    cr_assert_eq(kvt_sched_plan(r.s, 3, false, &p), KVT_SCHED_REFUSED, "step 2 was skipped");
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.stale_schedules, 2);
    cr_assert_eq(st.steps, 1);
    cr_assert_eq(st.tokens_planned, 100, "the refused calls planned nothing");
    cr_assert_eq(kvt_sched_plan(r.s, 2, false, &p), 1);
    cr_assert_eq(p.entries[0].start, 100, "step 2 starts where step 1 ended");
    kvt_sched_destroy(&r.s);
}

Test(sched, failed_step_is_rolled_back_and_planned_again)
{
    rig_t r;
    rig_init(&r, 64, 0); //  no tier: the first plan admits
    rig_arrive(&r, 1, 100, 1, 2);
    kvt_step_plan_t p;
    cr_assert_eq(kvt_sched_plan(r.s, 1, false, &p), 1);
    cr_assert_eq(p.entries[0].end, 100);
    cr_assert_eq(kvt_sched_plan(r.s, 2, true, &p), 1);
    cr_assert_eq(p.entries[0].start, 0, "none of step 1's tokens counted");
    cr_assert_eq(p.entries[0].end, 100);
    kvt_blockmgr_stats_t b;
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.steps_failed, 1);
    cr_assert_eq(kvt_sched_plan(r.s, 3, false, &p), 1);
    cr_assert_eq(p.entries[0].start, 100);
    (void)b;
    kvt_sched_destroy(&r.s);
}

Test(sched, rule_B2_failed_load_retreats_to_the_hbm_hit_sharing_its_blocks)
{
    rig_t r;
    rig_init(&r, 16, 64);
    rig_arrive(&r, 1, 200, 100, 1);
    rig_run(&r, 50);
    rig_arrive(&r, 2, 100, 90000, 1);
    rig_run(&r, 50);
    r.fail_loads = true;
    rig_arrive(&r, 3, 200, 100, 1);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.loads[0].start, 128);
    rig_deliver(&r);
    cr_assert_eq(rig_step(&r), 1);
    //  HBM still held 144 tokens: the retreat shares [128, 144) again and
    //  resumes at the hit, not at the chunk floor.
    cr_assert_eq(r.retreats, 1);
    cr_assert_eq(r.plan.entries[0].start, 144);
    cr_assert_eq(r.plan.entries[0].verify_end, 144);
    rig_deliver(&r);
    rig_run(&r, 50);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.hbm_lost_tokens, 0);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(sched, one_save_in_flight_per_chunk_key_across_requests)
{
    rig_t r;
    rig_init(&r, 64, 64);
    //  Two requests with the same 130-token prompt admitted together: both
    //  compute the same two chunks in the same step.
    rig_arrive(&r, 1, 130, 7, 1);
    rig_arrive(&r, 2, 130, 7, 1);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.nentries, 2);
    cr_assert_eq(rig_step(&r), 1);
    //  Request 2's first chunk is complete too, but request 1's save of the
    //  same key is already out: not sent twice.
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.saves_dispatched, 2);
    cr_assert_eq(st.saves_skipped, 1);
    rig_deliver(&r);
    rig_run(&r, 50);
    kvt_sched_stats(r.s, &st);
    //  Request 2's second chunk completes once request 1's save of it
    //  settled: nothing of that key is in flight, and the scheduler keeps
    //  no view of what the tier holds, so it is saved again (the tier
    //  takes a repeated key as stored).
    cr_assert_eq(st.saves_dispatched, 3, "a key in flight is not sent twice");
    cr_assert_eq(st.saves_skipped, 1);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(sched, rule_S3_a_failure_with_no_retry_left_stops_the_requests_saves)
{
    rig_t r;
    rig_init(&r, 64, 64);
    r.fail_saves = true;
    rig_arrive(&r, 1, 200, 1, 80); //  decodes long enough to see several rounds
    rig_run(&r, 200);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.saves_reemitted, 1);
    cr_assert_eq(st.saves_stopped, 1);
    cr_assert_eq(st.saves_ok, 0);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(sched, max_running_beyond_one_message_is_refused)
{
    kvt_sched_cfg_t cfg = {.block_size = 16,
                           .chunk_size = 64,
                           .hbm_blocks = 64,
                           .max_running = KVT_MSG_MAX_ENTRIES + 1,
                           .step_tokens = 1u << 20};
    char err[128];
    cr_assert_null(kvt_sched_new(&cfg, err, sizeof err));
    cr_assert(strstr(err, "max_running") != NULL, "%s", err);
}

Test(sched, a_plan_stays_within_one_message)
{
    rig_t r;
    kvt_sched_cfg_t cfg = {.block_size = 16,
                           .chunk_size = 64,
                           .hbm_blocks = 1u << 20,
                           .tier_chunks = 0,
                           .max_running = KVT_MSG_MAX_ENTRIES,
                           .step_tokens = 1u << 24,
                           .ns = kvt_namespace_hash("x")};
    char err[128];
    memset(&r, 0, sizeof r);
    r.s = kvt_sched_new(&cfg, err, sizeof err);
    cr_assert_not_null(r.s, "%s", err);
    //  600 requests of 60k tokens: one step computing all of them would need
    //  600 × 3750 block ids, far beyond one 16 MiB frame.
    for (uint64_t i = 0; i < 600; i++)
        rig_arrive(&r, i, 60000, (uint32_t)i * 100000, 1);
    cr_assert_eq(rig_step(&r), 1);
    kvt_msg_t m = {.kind = KVT_MSG_STEP_PLAN};
    m.u.step_plan = r.plan;
    uint8_t *buf;
    size_t len;
    cr_assert_eq(kvt_msg_encode(&m, &buf, &len), 0, "the plan must encode");
    cr_assert_leq(len, KVT_MSG_MAX_FRAME);
    free(buf);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_gt(st.plan_deferred, 0);
    kvt_sched_destroy(&r.s);
}

//  S3 end to end: one failed chunk save sends the frontier back to that
//  chunk, so the re-emitted save (a new attempt) covers exactly the failed
//  key again, and once it succeeds every chunk is stored.
Test(sched, rule_S3_a_failed_save_is_saved_again_from_the_failed_chunk)
{
    rig_t r;
    rig_init(&r, 64, 64);
    rig_arrive(&r, 1, 200, 1, 80);
    kvt_hash_t failed = {0, 0};
    uint32_t failed_attempt = 0;
    bool failed_once = false, resaved = false;
    for (uint32_t i = 0; i < 400; i++) {
        int rc = rig_step(&r);
        for (uint32_t k = 0; k < r.npending; k++) {
            kvt_verdict_t *v = &r.pending[k];
            if (v->chan != KVT_CHAN_SAVE)
                continue;
            if (!failed_once) {
                v->ok = false;
                v->detail = KVT_DETAIL_NO_SPACE;
                failed = v->key;
                failed_attempt = v->attempt;
                failed_once = true;
            } else if (kvt_hash_eq(v->key, failed)) {
                cr_assert_gt(v->attempt, failed_attempt, "the re-emit carries a new attempt");
                resaved = true;
            }
        }
        rig_deliver(&r);
        rig_audit(&r);
        if (rc == 0 && r.plan.idle)
            break;
    }
    cr_assert(failed_once);
    cr_assert(resaved, "the failed chunk was never saved again");
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.saves_failed, 1);
    cr_assert_eq(st.saves_reemitted, 1);
    cr_assert_eq(st.saves_stopped, 0);
    //  200 prompt + 80 decoded tokens: chunks [0, 256) of 64 tokens. The
    //  first plan saved [0, 192) and chunk 0 failed: the re-emit goes from
    //  the failed chunk (the frontier never passes a gap), so chunks 1 and
    //  2 are stored twice, 0 and 3 once.
    cr_assert_eq(st.saves_ok, 6, "saves_ok %llu", (unsigned long long)st.saves_ok);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  S5: the save floor of a request that loads is where its load ends — the
//  chunks the tier just gave back are never saved again.
Test(sched, rule_S5_a_loaded_prefix_is_not_saved_again)
{
    rig_t r;
    rig_init(&r, 12, 64);
    rig_arrive(&r, 1, 150, 100, 1);
    rig_run(&r, 50);
    rig_arrive(&r, 2, 150, 90000, 1);
    rig_run(&r, 50);
    cr_assert_eq(r.saves_seen, 4, "two full chunks of each 150-token prompt saved");
    rig_arrive(&r, 3, 150, 100, 1);
    rig_run(&r, 50);
    cr_assert_eq(r.loaded, 1, "request 3 restored [0, 128) from the tier");
    cr_assert_eq(r.saves_seen, 4, "request 3 saved %u chunks the tier already held",
                 r.saves_seen - 4);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

// ------------------------------------------------------ hybrid models ----

//  A named counter of the core (kvt_sched_counters), or UINT64_MAX.
static uint64_t counter(const rig_t *r, const char *name)
{
    static kvt_counter_t c[256];
    uint32_t n = 0;
    kvt_sched_counters(r->s, c, &n, 256);
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(c[i].name, name) == 0)
            return c[i].value;
    return UINT64_MAX;
}

//  The plan goes out as a StepPlan message: it must encode and decode back.
static void plan_round_trips(const kvt_step_plan_t *plan)
{
    kvt_msg_t m = {.kind = KVT_MSG_STEP_PLAN};
    m.u.step_plan = *plan;
    uint8_t *buf;
    size_t len;
    kvt_msg_err_t err;
    char e[256];
    cr_assert_eq(kvt_msg_check(&m, &err), 0, "%s", kvt_msg_err_str(&err, e, sizeof e));
    cr_assert_eq(kvt_msg_encode(&m, &buf, &len), 0, "the plan must encode");
    kvt_msg_t back;
    cr_assert_eq(kvt_msg_decode(buf, len, &back, &err), 0, "%s",
                 kvt_msg_err_str(&err, e, sizeof e));
    cr_assert_eq(back.u.step_plan.nloads, plan->nloads);
    cr_assert_eq(back.u.step_plan.nsaves, plan->nsaves);
    kvt_msg_clear(&back);
    free(buf);
}

static void rig_init_cfg(rig_t *r, const kvt_sched_cfg_t *cfg)
{
    memset(r, 0, sizeof *r);
    char err[128];
    r->s = kvt_sched_new(cfg, err, sizeof err);
    cr_assert_not_null(r->s, "%s", err);
}

static kvt_sched_cfg_t hybrid_cfg(uint32_t bs, uint32_t cs, uint32_t interval, uint32_t hbm_blocks,
                                  uint32_t tier_chunks)
{
    kvt_sched_cfg_t cfg = {.block_size = bs,
                           .chunk_size = cs,
                           .hbm_blocks = hbm_blocks,
                           .tier_chunks = tier_chunks,
                           .max_running = 4,
                           .step_tokens = 256,
                           .save_retries = 1,
                           .ns = kvt_namespace_hash("hybrid"),
                           .state_bytes = 1u << 20,
                           .checkpoint_interval = interval,
                           .hbm_checkpoints = 16};
    return cfg;
}

//  The token at position i of request id's fed stream (prompt base + i,
//  then the core's predetermined outputs).
static uint32_t fed_token(uint64_t id, uint32_t nprompt, uint32_t base, uint32_t i)
{
    if (i < nprompt)
        return base + i;
    uint64_t x = (id + 1) * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull;
    x ^= x >> 31;
    return (uint32_t)(x % 100000u) + 1000u;
}

static void rig_arrive_tokens(rig_t *r, uint64_t id, const uint32_t *t, uint32_t n,
                              uint32_t max_new)
{
    kvt_arrival_t a = {.req = id, .tokens = (uint32_t *)t, .ntokens = n, .max_new_tokens = max_new};
    cr_assert_eq(kvt_sched_arrive(r->s, &a), 0);
}

static bool took(const rig_t *r, uint32_t at)
{
    for (uint32_t i = 0; i < r->ntakes && i < 64; i++)
        if (r->takes[i] == at)
            return true;
    return false;
}

//  (a) the interval grid, (b) the prompt's last chunk boundary and its end
//  on the block grid, (c) the last chunk boundary the decode reaches;
//  prefill chunks end on them.
Test(sched, checkpoints_are_taken_on_the_interval_at_the_prompt_end_and_at_the_decode_keep)
{
    rig_t r;
    kvt_sched_cfg_t cfg = hybrid_cfg(16, 64, 256, 64, 0);
    rig_init_cfg(&r, &cfg);
    rig_arrive(&r, 1, 210, 100, 120); //  fed: 210 + 119 = 329 tokens
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.entries[0].end, 192, "the prefill is clipped to the prompt's last chunk");
    rig_deliver(&r);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.entries[0].end, 208, "then to the prompt's end on the block grid");
    rig_deliver(&r);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.entries[0].end, 210);
    rig_deliver(&r);
    rig_run(&r, 400);
    cr_assert(took(&r, 192), "(b) the last chunk boundary of the prompt");
    cr_assert(took(&r, 208), "(b) the prompt's end on the block grid");
    cr_assert(took(&r, 256), "(a) the interval grid, reached while decoding");
    cr_assert(took(&r, 320), "(c) the decode keep");
    cr_assert_eq(r.ntakes, 4, "%u checkpoints taken", r.ntakes);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(sched, a_dense_model_takes_no_checkpoints_and_is_not_clipped)
{
    rig_t r;
    kvt_sched_cfg_t cfg = hybrid_cfg(16, 64, 256, 64, 0);
    cfg.state_bytes = 0;
    rig_init_cfg(&r, &cfg);
    rig_arrive(&r, 1, 210, 100, 120);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.entries[0].end, 210);
    rig_deliver(&r);
    rig_run(&r, 400);
    cr_assert_eq(r.ntakes, 0);
    kvt_sched_destroy(&r.s);
}

//  Request 1 leaves KV up to 320 (its fed tokens) and checkpoints at 192,
//  208, 256 and 320; request 2's prompt is the first `n` fed tokens of 1.
static void gated_setup(rig_t *r, uint32_t spec, uint32_t n, uint32_t *prompt)
{
    kvt_sched_cfg_t cfg = hybrid_cfg(16, 64, 256, 64, 0);
    cfg.spec_tokens = spec;
    rig_init_cfg(r, &cfg);
    rig_arrive(r, 1, 210, 100, 120);
    rig_run(r, 400);
    for (uint32_t i = 0; i < n; i++)
        prompt[i] = fed_token(1, 210, 100, i);
    r->admit_hbm = 0;
    r->restores = 0;
}

//  Three prompts share their first 128 tokens. The first checkpoints only
//  at its prompt end (192); the second leaves the cached prefix at 128,
//  where no checkpoint exists, so its prefill is clipped there and a branch
//  checkpoint is taken; the third resumes from it.
Test(sched, a_branch_checkpoint_is_taken_where_a_prompt_leaves_a_cached_prefix)
{
    rig_t r;
    kvt_sched_cfg_t cfg = hybrid_cfg(16, 64, 1024, 64, 0);
    rig_init_cfg(&r, &cfg);
    uint32_t t[200];
    for (uint32_t i = 0; i < 200; i++)
        t[i] = 100 + i;
    rig_arrive_tokens(&r, 1, t, 200, 1);
    rig_run(&r, 100);
    cr_assert(took(&r, 192) && !took(&r, 128), "the first takes only its prompt end");
    for (uint32_t i = 128; i < 200; i++)
        t[i] = 5000 + i;
    r.ntakes = 0;
    rig_arrive_tokens(&r, 2, t, 200, 1);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.entries[0].end, 128, "the second's prefill ends where it branches");
    rig_deliver(&r);
    rig_run(&r, 100);
    cr_assert(took(&r, 128), "a checkpoint is taken at the branch");
    cr_assert_eq(counter(&r, "ckpt.taken.branch"), 1);
    for (uint32_t i = 128; i < 200; i++)
        t[i] = 9000 + i;
    r.admit_hbm = r.restores = 0;
    rig_arrive_tokens(&r, 3, t, 200, 1);
    rig_run(&r, 100);
    cr_assert_eq(r.admit_hbm, 128, "the third resumes at the branch (HBM hit %u)", r.admit_hbm);
    cr_assert_eq(r.restores, 1);
    cr_assert_eq(counter(&r, "ckpt.restored.branch"), 1, "the restore counts as a branch's");
    cr_assert_eq(counter(&r, "ckpt.restored.prompt_end"), 0);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(sched, the_hbm_hit_is_gated_to_the_newest_checkpoint_at_or_below_the_block_hit)
{
    rig_t r;
    uint32_t prompt[300];
    gated_setup(&r, 0, 300, prompt);
    kvt_sched_stats_t st0;
    kvt_sched_stats(r.s, &st0);
    rig_arrive_tokens(&r, 2, prompt, 300, 1);
    cr_assert_eq(rig_step(&r), 1);
    kvt_sched_req_info_t info;
    cr_assert_eq(kvt_sched_req_info(r.s, 2, &info), 0);
    cr_assert_eq(info.block_hit, 288, "KV is resident up to 288 (299 / 16 blocks)");
    cr_assert_eq(info.hbm_hit, 256, "but the newest checkpoint below it is at 256");
    cr_assert_eq(r.plan.entries[0].start, 256);
    cr_assert_eq(r.restores, 1, "the slot is restored from the checkpoint at 256");
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.gate_lost_tokens, 32);
    cr_assert_eq(r.admit_hbm, 256);
    //  The state tax: KV alone could have resumed at 288.
    cr_assert_eq(st.state_tax_tokens - st0.state_tax_tokens, 32);
    cr_assert_eq(st.state_resumes - st0.state_resumes, 1);
    rig_deliver(&r);
    rig_run(&r, 100);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(sched, a_hit_leaves_one_token_and_two_with_speculative_decoding)
{
    rig_t r;
    uint32_t prompt[257];
    gated_setup(&r, 0, 257, prompt);
    rig_arrive_tokens(&r, 2, prompt, 257, 1);
    rig_step(&r);
    kvt_sched_req_info_t info;
    kvt_sched_req_info(r.s, 2, &info);
    cr_assert_eq(info.hbm_hit, 256, "one token left to compute");
    rig_deliver(&r);
    rig_run(&r, 100);
    kvt_sched_destroy(&r.s);

    gated_setup(&r, 3, 257, prompt);
    rig_arrive_tokens(&r, 2, prompt, 257, 1);
    rig_step(&r);
    kvt_sched_req_info(r.s, 2, &info);
    cr_assert_eq(info.hbm_hit, 208, "hit %u: two tokens left, so the hit is gated below 255",
                 info.hbm_hit);
    rig_deliver(&r);
    rig_run(&r, 100);
    kvt_sched_destroy(&r.s);
}

//  Seed 002 on the scheduler, block 4 / chunk 16: request C leaves chunks
//  [0, 32) with images at 16 and 32 in the tier, X (x_len tokens) evicts C
//  from HBM past its first chunk, A (the first 20 tokens) leaves a 20-token
//  HBM hit with its checkpoint.
#define P_BASE 500
static void joint_setup(rig_t *r, uint32_t hbm_blocks, uint32_t x_len)
{
    kvt_sched_cfg_t cfg = hybrid_cfg(4, 16, 16, hbm_blocks, 64);
    cfg.hbm_checkpoints = 2;
    rig_init_cfg(r, &cfg);
    rig_arrive(r, 10, 40, P_BASE, 1);
    rig_run(r, 100);
    rig_arrive(r, 11, x_len, 90000, 1);
    rig_run(r, 100);
    rig_arrive(r, 12, 20, P_BASE, 1);
    rig_run(r, 100);
    r->loads_seen = r->state_loads = r->restores = 0;
    r->admit_hbm = r->admit_tier = 0;
}

Test(sched, the_twenty_token_hit_with_a_rung_at_32_loads_16_to_32_into_private_blocks)
{
    rig_t r;
    joint_setup(&r, 12, 44);
    kvt_sched_stats_t st0, st;
    kvt_sched_stats(r.s, &st0);
    uint64_t disp0 = counter(&r, "stidx.dispatched"), done0 = counter(&r, "stidx.completed");
    rig_arrive(&r, 13, 36, P_BASE, 1);
    cr_assert_eq(rig_step(&r), 1);
    kvt_sched_req_info_t info;
    cr_assert_eq(kvt_sched_req_info(r.s, 13, &info), 0);
    cr_assert_eq(info.hbm_hit, 20);
    cr_assert_eq(info.state, 2, "loading");
    cr_assert_eq(info.load_floor, 16);
    cr_assert_eq(info.load_end, 32);
    cr_assert_eq(info.joint_src, 2, "the state from the tier");
    cr_assert_eq(r.plan.nloads, 1);
    cr_assert_eq(r.plan.loads[0].start, 16);
    cr_assert_eq(r.plan.loads[0].end, 32);
    cr_assert_eq(r.plan.loads[0].nblocks, 4);
    //  Block 4 ([16, 20)) is written by the load: it is the request's own
    //  fresh block, not the shared one the hit found.
    cr_assert_eq(r.plan.loads[0].blocks[0], info.blocks[4]);
    cr_assert_eq(r.state_loads, 1, "the state at 32 comes from the tier");
    //  The state leg rides in the same LoadSpec (one completion per rank).
    cr_assert(r.plan.loads[0].state);
    cr_assert_eq(r.plan.loads[0].state_boundary, 32);
    cr_assert_eq(r.plan.loads[0].state_slot, info.slot);
    cr_assert_neq(info.slot, UINT32_MAX);
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.joint_state_tier - st0.joint_state_tier, 1);
    cr_assert_eq(st.hbm_hit_tokens - st0.hbm_hit_tokens, 20, "rule B3: the hit, not the floor");
    cr_assert_eq(st.state_tax_tokens - st0.state_tax_tokens, 0, "the joint reaches the KV hit");
    rig_audit(&r);
    //  The load settles once both legs reported, in either order.
    for (uint32_t i = 0; i < r.npending; i++)
        if (r.pending[i].chan == KVT_CHAN_STATE)
            cr_assert_eq(kvt_sched_verdict(r.s, &r.pending[i]), 0);
    kvt_sched_req_info(r.s, 13, &info);
    cr_assert_eq(info.state, 2, "still loading: the KV leg has not reported");
    for (uint32_t i = 0; i < r.npending; i++)
        if (r.pending[i].chan != KVT_CHAN_STATE)
            kvt_sched_verdict(r.s, &r.pending[i]);
    r.npending = 0;
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.entries[0].start, 32);
    cr_assert_eq(r.plan.entries[0].verify_end, 32);
    //  The state index owned the state load and settled it (I1).
    cr_assert_eq(counter(&r, "stidx.dispatched") - disp0, 1);
    cr_assert_eq(counter(&r, "stidx.completed") - done0, 1);
    cr_assert_eq(counter(&r, "stidx.outstanding"), 0);
    rig_deliver(&r);
    rig_run(&r, 100);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  Seed 002's exact-fit pool on the scheduler: a running request holds
//  three blocks, so the pool fits the admission at the HBM hit exactly but
//  not the joint's private refill of [16, 20). The joint is skipped, the
//  request keeps its 20-token hit and computes from there (no crash).
Test(sched, the_exact_fit_pool_skips_the_joint_instead_of_crashing)
{
    rig_t r;
    joint_setup(&r, 12, 44);
    kvt_sched_stats_t st0, st;
    kvt_sched_stats(r.s, &st0);
    rig_arrive(&r, 20, 4, 70000, 8); //  3 blocks, decodes while 13 is admitted
    rig_arrive(&r, 13, 36, P_BASE, 1);
    cr_assert_eq(rig_step(&r), 1); //  20 runs, 13 asks the tier
    rig_deliver(&r);
    cr_assert_eq(rig_step(&r), 1);
    kvt_sched_req_info_t info;
    cr_assert_eq(kvt_sched_req_info(r.s, 13, &info), 0);
    cr_assert_eq(info.state, 3, "running at the HBM hit, not loading");
    cr_assert_eq(info.hbm_hit, 20);
    cr_assert_eq(info.computed, 20);
    cr_assert_eq(r.plan.nloads, 0);
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.partial_chunk_no_room - st0.partial_chunk_no_room, 1);
    cr_assert_eq(st.state_tax_tokens - st0.state_tax_tokens, 12, "the tier's 32 minus the 20");
    cr_assert_eq(st.joint_state_tier - st0.joint_state_tier, 0, "the skip is not a boundary");
    cr_assert_eq(st.blocks_in_use, 12, "the pool is used exactly");
    rig_audit(&r);
    rig_deliver(&r);
    rig_run(&r, 100);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(sched, rule_B2_a_failed_state_leg_retreats_to_the_gated_hbm_hit_on_its_blocks)
{
    rig_t r;
    joint_setup(&r, 12, 44);
    r.fail_state = true;
    rig_arrive(&r, 13, 36, P_BASE, 1);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.nloads, 1);
    kvt_sched_req_info_t before;
    kvt_sched_req_info(r.s, 13, &before);
    uint32_t fresh4 = before.blocks[4];
    rig_deliver(&r); //  the KV leg lands, the state leg misses
    r.fail_state = false;
    r.restores = 0;
    cr_assert_eq(rig_step(&r), 1);
    kvt_sched_req_info_t info;
    kvt_sched_req_info(r.s, 13, &info);
    cr_assert_eq(r.retreats, 1);
    cr_assert_eq(info.state, 3);
    cr_assert_eq(r.plan.entries[0].start, 20, "prefill resumes at the hit, not at 16 or 0");
    cr_assert_eq(r.plan.entries[0].verify_end, 20);
    cr_assert_neq(info.blocks[4], fresh4, "the shared hit block [16, 20) is back in the table");
    cr_assert_eq(r.restores, 1, "the hit's checkpoint is restored into the slot");
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.retreats_to_hbm, 1);
    cr_assert_eq(st.retreats_to_zero, 0);
    cr_assert_eq(st.hbm_lost_tokens, 0);
    //  The state leg's own miss retracts the image at 32 (I3).
    cr_assert_eq(counter(&r, "stidx.failed"), 1, "the only failed state load");
    cr_assert_eq(counter(&r, "stidx.forgotten_miss"), 1);
    rig_audit(&r);
    rig_deliver(&r);
    rig_run(&r, 100);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(sched, rule_B2_a_failed_joint_without_an_hbm_hit_retreats_to_token_zero)
{
    rig_t r;
    kvt_sched_cfg_t cfg = hybrid_cfg(4, 16, 16, 12, 64);
    cfg.hbm_checkpoints = 2;
    rig_init_cfg(&r, &cfg);
    rig_arrive(&r, 10, 40, P_BASE, 1);
    rig_run(&r, 100);
    rig_arrive(&r, 11, 44, 90000, 1);
    rig_run(&r, 100);
    r.fail_loads = true;
    rig_arrive(&r, 12, 20, P_BASE, 1); //  no HBM checkpoint left: the hit gates to 0
    cr_assert_eq(rig_step(&r), 1);
    kvt_sched_req_info_t info;
    kvt_sched_req_info(r.s, 12, &info);
    cr_assert_eq(info.hbm_hit, 0);
    cr_assert_eq(info.load_end, 16);
    rig_deliver(&r);
    r.fail_loads = false;
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.entries[0].start, 0);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.retreats_to_zero, 1);
    cr_assert_eq(st.retreats_to_hbm, 0);
    rig_deliver(&r);
    rig_run(&r, 100);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(sched, rule_B1_a_refused_reprobe_carries_no_demand)
{
    rig_t r;
    kvt_sched_cfg_t cfg = hybrid_cfg(16, 64, 64, 16, 0);
    rig_init_cfg(&r, &cfg);
    rig_arrive(&r, 1, 200, 100, 1);  //  13 blocks
    rig_arrive(&r, 2, 100, 5000, 1); //  7 blocks
    kvt_sched_probe_t p;
    cr_assert_eq(kvt_sched_probe(r.s, 2, &p), 0);
    cr_assert(p.has_demand, "an empty pool fits request 2");
    cr_assert_eq(p.num_new_blocks, 7);
    cr_assert_eq(rig_step(&r), 1); //  admits 1; 2 no longer fits
    cr_assert_eq(kvt_sched_probe(r.s, 2, &p), 0);
    cr_assert_not(p.has_demand, "the refused re-probe must not carry the earlier demand");
    cr_assert_eq(p.num_new_blocks, 0);
    cr_assert_eq(p.req, 2);
    cr_assert_eq(kvt_sched_probe(r.s, 1, &p), -1, "request 1 is no longer waiting");
    rig_deliver(&r);
    rig_run(&r, 200);
    kvt_sched_destroy(&r.s);
}

//  Two requests needing the same tier chunks in the same pass: the second
//  waits for the first's load (convoy_waits) and then resumes from the
//  KV it brought into HBM, loading only the state.
Test(sched, no_load_convoys_a_second_request_waits_for_the_chunks_being_loaded)
{
    rig_t r;
    joint_setup(&r, 24, 80);
    uint32_t p1[36], p2[36];
    for (uint32_t i = 0; i < 36; i++)
        p1[i] = p2[i] = P_BASE + i;
    p2[35] = 1; //  a different last token: same chunks [0, 32)
    rig_arrive_tokens(&r, 13, p1, 36, 1);
    rig_arrive_tokens(&r, 14, p2, 36, 1);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.nloads, 1, "one KV load of [16, 32), not two");
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.convoy_waits, 1);
    kvt_sched_req_info_t info;
    kvt_sched_req_info(r.s, 14, &info);
    cr_assert_eq(info.state, 1, "request 14 waits");
    rig_deliver(&r);
    r.loads_seen = 0;
    cr_assert_eq(rig_step(&r), 1);
    kvt_sched_req_info(r.s, 14, &info);
    cr_assert_eq(info.block_hit, 32, "the KV request 13 loaded is shared");
    cr_assert_eq(r.loads_seen, 0, "no KV leg: only the state at 32 is loaded");
    cr_assert_eq(r.plan.nloads, 1);
    cr_assert_eq(r.plan.loads[0].nkeys, 0, "a state-only LoadSpec (rule L3)");
    cr_assert(r.plan.loads[0].state);
    plan_round_trips(&r.plan);
    cr_assert_eq(r.state_loads, 2);
    rig_deliver(&r);
    rig_run(&r, 100);
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.convoy_waits, 1, "counted once per wait");
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(sched, abort_and_preempt_release_slots_and_checkpoint_pins_through_the_finish_path)
{
    rig_t r;
    joint_setup(&r, 24, 80);
    rig_arrive(&r, 13, 36, P_BASE, 1);
    rig_arrive(&r, 14, 30, 40000, 20);
    cr_assert_eq(rig_step(&r), 1); //  13 loads, 14 computes its prompt
    cr_assert_eq(kvt_sched_abort(r.s, 13), 0);
    cr_assert_eq(kvt_sched_abort(r.s, 13), -1, "aborted once");
    kvt_sched_req_info_t info;
    cr_assert_neq(kvt_sched_req_info(r.s, 13, &info), 0, "the record is freed at once");
    kvt_sched_stats_t os;
    kvt_sched_stats(r.s, &os);
    cr_assert_eq(os.load_orphans, 1, "its load is an orphan until its verdicts arrive");
    rig_audit(&r);
    rig_deliver(&r);
    kvt_sched_stats(r.s, &os);
    cr_assert_eq(os.load_orphans, 0, "settled by the load's verdicts");
    cr_assert_eq(rig_step(&r), 1);
    rig_deliver(&r);
    cr_assert_eq(kvt_sched_preempt(r.s, 14), 0);
    kvt_sched_req_info(r.s, 14, &info);
    cr_assert_eq(info.state, 1, "waiting again");
    cr_assert_eq(info.slot, UINT32_MAX, "its state slot went back");
    cr_assert_eq(info.nblocks, 0);
    rig_audit(&r);
    rig_run(&r, 200);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.aborted, 1);
    cr_assert_eq(st.preempted, 1);
    cr_assert(kvt_sched_quiescent(r.s), "no slot, pin or block left");
    kvt_sched_destroy(&r.s);
}

// -------------------------------------------------- embeddable API ----

Test(sched, an_explicit_apply_replaces_the_plans_prev_failed)
{
    rig_t r;
    rig_init(&r, 64, 0); //  no tier: the first plan admits
    rig_arrive(&r, 1, 100, 1, 2);
    kvt_step_plan_t p;
    cr_assert_eq(kvt_sched_plan(r.s, 1, false, &p), 1);
    cr_assert_eq(kvt_sched_apply(r.s, 2, true), -1, "step 2 was not planned");
    cr_assert_eq(kvt_sched_apply(r.s, 1, false), 0);
    cr_assert_eq(kvt_sched_apply(r.s, 1, true), -1, "applied once");
    cr_assert_eq(kvt_sched_plan(r.s, 2, false, &p), 1);
    cr_assert_eq(p.entries[0].start, 0, "step 1 was rolled back by the apply");
    cr_assert_eq(kvt_sched_apply(r.s, 2, true), 0);
    cr_assert_eq(kvt_sched_plan(r.s, 3, true, &p), 1);
    cr_assert_eq(p.entries[0].start, 100, "an applied step is not rolled back by the plan");
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.steps_failed, 1);
    kvt_sched_destroy(&r.s);
}

//  A request that finished in the applied step saves its last chunk in the
//  next plan: the apply's saves survive into it.
Test(sched, the_saves_an_apply_emits_go_out_with_the_next_plan)
{
    rig_t r;
    rig_init(&r, 64, 64);
    rig_arrive(&r, 1, 64, 1, 1);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(kvt_sched_apply(r.s, 1, true), 0);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.nsaves, 1, "the finished request's chunk save is in the plan");
    rig_deliver(&r);
    rig_audit(&r);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(sched, a_request_finished_early_retires_at_the_next_apply_with_its_saves)
{
    rig_t r;
    rig_init(&r, 64, 64);
    rig_arrive(&r, 1, 100, 1, 200);
    for (int i = 0; i < 30; i++) {
        rig_step(&r);
        rig_deliver(&r);
    }
    cr_assert_eq(kvt_sched_finish(r.s, 1), 0);
    cr_assert_eq(kvt_sched_finish(r.s, 1), -1, "once");
    r.finished = 0;
    rig_run(&r, 50);
    cr_assert_eq(r.finished, 1);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.finished, 1);
    //  100 prompt tokens + 29 decoded: chunks [0, 128) saved.
    cr_assert_eq(st.saves_ok, 2, "saves_ok %llu", (unsigned long long)st.saves_ok);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(sched, a_chunk_save_carries_the_image_of_the_checkpoint_at_its_end)
{
    rig_t r;
    kvt_sched_cfg_t cfg = hybrid_cfg(16, 64, 128, 64, 64);
    rig_init_cfg(&r, &cfg);
    rig_arrive(&r, 1, 200, 100, 1); //  checkpoints at 128 (interval) and 192 (prompt)
    uint32_t images = 0, specs = 0;
    for (int i = 0; i < 20; i++) {
        int rc = rig_step(&r);
        for (uint32_t k = 0; k < r.plan.nsaves; k++) {
            const kvt_save_spec_t *sp = &r.plan.saves[k];
            specs++;
            plan_round_trips(&r.plan);
            if (!sp->image)
                continue;
            images++;
            cr_assert_eq(sp->state_boundary, sp->end, "the image goes with the last chunk");
            cr_assert(kvt_hash_eq(sp->state_hash, sp->keys[sp->nkeys - 1]));
            cr_assert(sp->end == 128 || sp->end == 192, "image at %u", sp->end);
        }
        rig_deliver(&r);
        rig_audit(&r);
        if (rc == 0 && r.plan.idle)
            break;
    }
    cr_assert_eq(images, 2);
    cr_assert_eq(specs, 2, "[0, 128) with the image at 128, [128, 192) with the one at 192");
    cr_assert(kvt_sched_quiescent(r.s), "the saves' checkpoint pins went back");
    kvt_sched_destroy(&r.s);
}

// ---------------------------------------------------- random sequences ----

static uint64_t s_rng(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static kvt_sched_stats_t o_stats(const rig_t *r)
{
    kvt_sched_stats_t st;
    kvt_sched_stats(r->s, &st);
    return st;
}

//  True when v is a load leg's verdict that no live load waits for (its
//  request was aborted or preempted mid-load: an orphan's).
static bool s_orphan_verdict(const rig_t *r, const kvt_verdict_t *v)
{
    if (v->chan != KVT_CHAN_LOAD && v->chan != KVT_CHAN_STATE)
        return false;
    kvt_sched_req_info_t info;
    return kvt_sched_req_info(r->s, v->op.req, &info) != 0 || info.gen != v->op.gen ||
           info.state != 2;
}

//  Random hybrid runs: arrivals sharing prefixes, verdicts delayed and
//  reordered across steps, failed legs and saves, aborts, preemptions and
//  early finishes, loads torn down mid-flight (aborted or preempted; an
//  aborted id may arrive again at once) with some of their late verdicts
//  lost, so only reclaim frees them. After every step the audit holds
//  (block references = tables + pins + leases + orphan holdings,
//  checkpoint pins = restores + retreat targets + takes + image saves,
//  slots = live admissions + orphans, dispatched = settled + outstanding in
//  the core and in both indexes); at the end nothing is left. The seeds run
//  at least 10,000 steps in all.
static kvt_verdict_t safe_of(const kvt_save_spec_t *sp, bool ok);

Test(sched, random_hybrid_sequences_keep_the_audit_and_end_quiescent)
{
    static rig_t r;
    static kvt_verdict_t carry[8192];
    uint64_t steps = 0, torn = 0, lost = 0, reclaimed = 0;
    for (uint64_t seed = 1; seed <= 100; seed++) {
        uint64_t x = seed * 0x9E3779B97F4A7C15ull;
        kvt_sched_cfg_t cfg = hybrid_cfg(4, 16, 32, 64, 48);
        cfg.hbm_checkpoints = 6;
        cfg.step_tokens = 64;
        cfg.spec_tokens = seed % 3 == 0 ? 2 : 0;
        cfg.min_load_tokens = seed % 4 == 0 ? 16 : 0;
        cfg.orphan_reclaim_us = 20000; //  20 steps of 1 ms
        rig_init_cfg(&r, &cfg);
        uint32_t ncarry = 0;
        uint64_t next_id = 1, now = 0;
        for (uint32_t step = 0; step < 300; step++, steps++) {
            now += 1000;
            kvt_sched_set_now(r.s, now);
            if (s_rng(&x) % 4 == 0 && next_id < 200) {
                uint32_t n = 8 + (uint32_t)(s_rng(&x) % 120);
                uint32_t *t = malloc(n * sizeof *t);
                uint32_t fam = (uint32_t)(s_rng(&x) % 3);
                uint32_t cut = (uint32_t)(s_rng(&x) % (n + 1));
                for (uint32_t i = 0; i < n; i++)
                    t[i] = i < cut ? fam * 100000 + i : 500000 + (uint32_t)next_id * 1000 + i;
                kvt_arrival_t a = {.req = next_id++,
                                   .tokens = t,
                                   .ntokens = n,
                                   .max_new_tokens = 1 + (uint32_t)(s_rng(&x) % 30)};
                kvt_sched_arrive(r.s, &a);
                free(t);
            }
            uint64_t victim = 1 + s_rng(&x) % next_id;
            switch (s_rng(&x) % 40) {
            case 0:
                kvt_sched_abort(r.s, victim);
                break;
            case 1:
                kvt_sched_preempt(r.s, victim);
                break;
            case 2:
                kvt_sched_finish(r.s, victim);
                break;
            default:
                break;
            }
            //  A load torn down mid-flight: the request is aborted (its id
            //  may arrive again at once) or preempted.
            uint64_t loading[64];
            uint32_t nloading = 0;
            for (uint64_t id = 1; id <= next_id && nloading < 64; id++) {
                kvt_sched_req_info_t info;
                if (kvt_sched_req_info(r.s, id, &info) == 0 && info.state == 2)
                    loading[nloading++] = id;
            }
            if (nloading > 0 && s_rng(&x) % 4 != 0) {
                uint64_t id = loading[s_rng(&x) % nloading];
                torn++;
                if (s_rng(&x) % 2 == 0)
                    kvt_sched_preempt(r.s, id);
                else if (kvt_sched_abort(r.s, id) == 0 && s_rng(&x) % 2 == 0) {
                    uint32_t n = 8 + (uint32_t)(s_rng(&x) % 120);
                    uint32_t *t = malloc(n * sizeof *t);
                    uint32_t fam = (uint32_t)(s_rng(&x) % 3);
                    for (uint32_t i = 0; i < n; i++)
                        t[i] = fam * 100000 + i;
                    kvt_arrival_t a = {.req = id, .tokens = t, .ntokens = n, .max_new_tokens = 4};
                    kvt_sched_arrive(r.s, &a); //  refused while saves keep the record
                    free(t);
                }
            }
            r.fail_loads = s_rng(&x) % 8 == 0;
            r.fail_state = s_rng(&x) % 8 == 0;
            r.fail_saves = s_rng(&x) % 10 == 0;
            int rc = rig_step(&r);
            //  Deliver some of what is pending now, carry the rest.
            for (uint32_t i = 0; i < r.npending; i++)
                if (ncarry < 8192)
                    carry[ncarry++] = r.pending[i];
            r.npending = 0;
            //  Each SaveSpec's source_safe, some lost, a few unsafe.
            for (uint32_t i = 0; i < r.plan.nsaves && rc >= 0; i++)
                if (ncarry < 8192 && s_rng(&x) % 4 != 0)
                    carry[ncarry++] = safe_of(&r.plan.saves[i], s_rng(&x) % 8 != 0);
            uint32_t kept = 0;
            for (uint32_t i = 0; i < ncarry; i++) {
                if (s_rng(&x) % 3 == 0)
                    carry[kept++] = carry[i];
                else if (s_orphan_verdict(&r, &carry[i]) && s_rng(&x) % 2 == 0)
                    lost++; //  an orphan's verdict that never comes
                else
                    kvt_sched_verdict(r.s, &carry[i]);
            }
            ncarry = kept;
            rig_audit(&r);
            (void)rc;
        }
        for (uint32_t i = 0; i < ncarry; i++)
            kvt_sched_verdict(r.s, &carry[i]);
        r.fail_loads = r.fail_state = r.fail_saves = false;
        rig_audit(&r);
        //  To idle, the clock running: orphans whose verdicts were lost are
        //  reclaimed.
        bool idle = false;
        for (uint32_t i = 0; i < 5000 && !idle; i++, steps++) {
            now += 1000;
            kvt_sched_set_now(r.s, now);
            int rc = rig_step(&r);
            rig_deliver(&r);
            rig_audit(&r);
            idle = rc == 0 && r.plan.idle;
        }
        cr_assert(idle, "seed %llu: did not go idle", (unsigned long long)seed);
        reclaimed += o_stats(&r).loads_reclaimed;
        char err[256];
        cr_assert_eq(kvt_sched_audit(r.s, err, sizeof err), 0, "seed %llu: %s",
                     (unsigned long long)seed, err);
        cr_assert(kvt_sched_quiescent(r.s), "seed %llu: something is left",
                  (unsigned long long)seed);
        kvt_sched_destroy(&r.s);
    }
    cr_assert_geq(steps, 10000, "%llu steps over the seeds", (unsigned long long)steps);
    cr_assert_gt(torn, 0, "loads were torn down mid-flight");
    cr_assert_gt(lost, 0, "orphans' verdicts were lost");
    cr_assert_gt(reclaimed, 0, "and reclaimed");
    cr_log_info("%llu steps, %llu loads torn down, %llu verdicts lost, %llu reclaimed",
                (unsigned long long)steps, (unsigned long long)torn, (unsigned long long)lost,
                (unsigned long long)reclaimed);
}

//  B3: the 20-token hit loads from its chunk floor (16), but the HBM hit
//  recorded (the counter and the admission event) is the 20 found.
Test(sched, rule_B3_the_hbm_hit_counts_the_gated_hit_found_not_the_chunk_floor)
{
    rig_t r;
    joint_setup(&r, 12, 44);
    kvt_sched_stats_t st0, st;
    kvt_sched_stats(r.s, &st0);
    r.admit_hbm = r.admit_tier = 0;
    rig_arrive(&r, 13, 36, P_BASE, 1);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.loads[0].start, 16, "the KV leg starts at the floor");
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.hbm_hit_tokens - st0.hbm_hit_tokens, 20);
    cr_assert_eq(r.admit_hbm, 20, "the admission event carries the hit");
    cr_assert_eq(r.admit_tier, 12, "the tier is credited with [20, 32) only");
    rig_deliver(&r);
    rig_run(&r, 100);
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.tier_hit_tokens - st0.tier_hit_tokens, 12);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(sched, a_dense_hit_leaves_two_tokens_with_speculative_decoding)
{
    rig_t r;
    kvt_sched_cfg_t cfg = hybrid_cfg(16, 64, 256, 64, 0);
    cfg.state_bytes = 0;
    cfg.spec_tokens = 3;
    rig_init_cfg(&r, &cfg);
    rig_arrive(&r, 1, 256, 100, 2);
    rig_run(&r, 50);
    r.admit_hbm = 0;
    rig_arrive(&r, 2, 257, 100, 1);
    rig_run(&r, 50);
    cr_assert_eq(r.admit_hbm, 240, "hit %u: 257 - 2 tokens, on the block grid", r.admit_hbm);
    kvt_sched_destroy(&r.s);
}

//  I3 on the core: a state miss retracts the image even when its verdict is
//  stale for the scheduler (no load of that operation is outstanding).
Test(sched, a_state_miss_retracts_the_image_without_its_request)
{
    rig_t r;
    joint_setup(&r, 12, 44);
    uint32_t p[36];
    for (uint32_t i = 0; i < 36; i++)
        p[i] = P_BASE + i;
    kvt_sched_probe_t pr;
    rig_arrive_tokens(&r, 13, p, 36, 1);
    cr_assert_eq(kvt_sched_probe(r.s, 13, &pr), 0);
    kvt_verdict_t v = {.chan = KVT_CHAN_STATE,
                       .op = {.req = 999, .gen = 1},
                       .key = pr.chain[7], //  the prefix hash at 32: the image's key
                       .ok = false,
                       .detail = KVT_DETAIL_MISS};
    cr_assert_eq(kvt_sched_verdict(r.s, &v), -1, "no such load: stale");
    cr_assert_eq(counter(&r, "stidx.forgotten_miss"), 1, "but the image is retracted");
    cr_assert_eq(rig_step(&r), 1);
    kvt_sched_req_info_t info;
    kvt_sched_req_info(r.s, 13, &info);
    cr_assert_eq(info.state, 3, "no rung at 32 any more: it runs from its HBM hit");
    cr_assert_eq(info.computed, 20);
    rig_deliver(&r);
    rig_run(&r, 100);
    kvt_sched_destroy(&r.s);
}

// ------------------------------------------------------- tier lookups ----

//  Request 1 (150 tokens) leaves [0, 128) in the tier, request 2 evicts all
//  but its first 32 tokens from HBM; request 3 repeats request 1's prompt.
//  Lookups are not answered by the rig: each test delivers its own.
static void lk_setup(rig_t *r, bool pin)
{
    rig_init_pin(r, 12, 64, pin);
    rig_arrive(r, 1, 150, 100, 1);
    rig_run(r, 50);
    rig_arrive(r, 2, 150, 90000, 1);
    rig_run(r, 50);
    r->lose_lookups = true;
    r->releases_seen = r->pins_used = 0; //  requests 1 and 2 released theirs (nothing held)
}

static kvt_lookup_t lk_only(const rig_t *r)
{
    cr_assert_eq(r->plan.nlookups, 1);
    return r->plan.lookups[0];
}

static int lk_answer(rig_t *r, kvt_opid_t op, bool ok, uint32_t held)
{
    kvt_verdict_t v = {.chan = KVT_CHAN_LOOKUP, .op = op, .ok = ok, .held = held};
    return kvt_sched_verdict(r->s, &v);
}

//  The aggregator settles a lookup with the fewest chunks any rank holds:
//  the admission loads exactly that much, not what it asked for.
Test(sched, lookup_admission_loads_the_chunks_every_rank_holds)
{
    static rig_t r;
    lk_setup(&r, false);
    rig_arrive(&r, 3, 150, 100, 1);
    rig_step_once(&r);
    kvt_lookup_t l = lk_only(&r);
    cr_assert_eq(l.op.req, 3);
    cr_assert_eq(l.nkeys, 2, "the prompt's leading chunks below its tail");
    cr_assert(rig_holds(&r, l.keys[0]) && rig_holds(&r, l.keys[1]));
    kvt_sched_req_info_t info;
    cr_assert_eq(kvt_sched_req_info(r.s, 3, &info), 0);
    cr_assert_eq(info.state, 1, "waiting for its lookup");
    cr_assert_eq(lk_answer(&r, l.op, true, 1), 0, "one rank holds only the first chunk");
    rig_deliver(&r);
    cr_assert_eq(rig_step_once(&r), 1);
    cr_assert_eq(r.plan.nloads, 1);
    cr_assert_eq(r.plan.loads[0].start, 0);
    cr_assert_eq(r.plan.loads[0].end, CS, "the minimum over the ranks, one chunk");
    cr_assert_not(r.plan.loads[0].lookup, "no pin asked");
    r.lose_lookups = false;
    rig_deliver(&r);
    rig_run(&r, 100);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  A request waiting for its lookup holds up no one: the short request
//  behind it (no chunk to look up) is admitted in the same plan.
Test(sched, a_request_waiting_for_its_lookup_does_not_block_the_next)
{
    static rig_t r;
    lk_setup(&r, false);
    rig_arrive(&r, 3, 150, 100, 1);
    rig_arrive(&r, 4, 40, 50000, 2);
    cr_assert_eq(rig_step_once(&r), 1);
    kvt_lookup_t l = lk_only(&r);
    bool entry4 = false;
    for (uint32_t i = 0; i < r.plan.nentries; i++)
        entry4 |= r.plan.entries[i].op.req == 4;
    cr_assert(entry4, "request 4 runs while 3 waits for its lookup");
    kvt_sched_req_info_t info;
    cr_assert_eq(kvt_sched_req_info(r.s, 3, &info), 0);
    cr_assert_eq(info.state, 1);
    cr_assert_eq(lk_answer(&r, l.op, true, 2), 0);
    r.lose_lookups = false;
    rig_deliver(&r);
    rig_run(&r, 100);
    cr_assert_eq(r.finished, 4);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  A lookup that does not settle within lookup_timeout_us (default 1 s)
//  falls back to the HBM hit, counted; its late verdict is stale.
Test(sched, a_lookup_past_its_bound_falls_back_to_the_hbm_hit)
{
    static rig_t r;
    lk_setup(&r, false);
    kvt_sched_set_now(r.s, 5000000);
    rig_arrive(&r, 3, 150, 100, 1);
    rig_step_once(&r);
    kvt_lookup_t l = lk_only(&r);
    kvt_sched_set_now(r.s, 5000000 + 999999);
    cr_assert_eq(rig_step_once(&r), KVT_SCHED_HOLD, "still inside the bound: wait");
    kvt_sched_set_now(r.s, 5000000 + 1000000);
    cr_assert_eq(rig_step_once(&r), 1);
    kvt_sched_req_info_t info;
    cr_assert_eq(kvt_sched_req_info(r.s, 3, &info), 0);
    cr_assert_eq(info.state, 3, "running from the HBM hit");
    cr_assert_eq(info.hbm_hit, 32);
    cr_assert_eq(r.plan.nloads, 0);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.lookup_timeouts, 1);
    cr_assert_eq(st.lookups_out, 0);
    cr_assert_eq(lk_answer(&r, l.op, true, 2), -1, "the late verdict is stale");
    r.lose_lookups = false;
    rig_deliver(&r);
    rig_run(&r, 100);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  A pinned lookup's lease is released by the load that uses it
//  (LoadSpec.lookup), never also by a LookupRelease.
Test(sched, a_pinned_lookup_is_released_by_its_load)
{
    static rig_t r;
    lk_setup(&r, true);
    rig_arrive(&r, 3, 150, 100, 1);
    rig_step_once(&r);
    kvt_lookup_t l = lk_only(&r);
    cr_assert(l.pin);
    cr_assert_eq(l.ttl_ms, 500);
    cr_assert_eq(lk_answer(&r, l.op, true, 2), 0);
    cr_assert_eq(rig_step_once(&r), 1);
    cr_assert_eq(r.plan.nloads, 1);
    cr_assert(r.plan.loads[0].lookup, "the load releases the pin");
    cr_assert(r.plan.loads[0].op.req == l.op.req && r.plan.loads[0].op.gen == l.op.gen,
              "the load carries the lookup's id");
    r.lose_lookups = false;
    rig_deliver(&r);
    rig_run(&r, 100);
    cr_assert_eq(r.releases_seen, 0, "released once, by the load");
    cr_assert_eq(r.pins_used, 1);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  An admission that does not load (the tier holds nothing above the HBM
//  hit) releases the pin with one LookupRelease of the lookup's id.
Test(sched, a_pinned_lookup_no_load_uses_is_released_once)
{
    static rig_t r;
    lk_setup(&r, true);
    rig_arrive(&r, 3, 150, 100, 1);
    rig_step_once(&r);
    kvt_lookup_t l = lk_only(&r);
    cr_assert_eq(lk_answer(&r, l.op, true, 0), 0);
    cr_assert_eq(rig_step_once(&r), 1);
    cr_assert_eq(r.plan.nloads, 0);
    cr_assert_eq(r.plan.nlookup_releases, 1);
    cr_assert_eq(r.plan.lookup_releases[0].op.req, 3);
    cr_assert_eq(r.plan.lookup_releases[0].op.gen, l.op.gen);
    r.lose_lookups = false;
    rig_deliver(&r);
    rig_run(&r, 100);
    cr_assert_eq(r.releases_seen, 1, "exactly once");
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  A request aborted while its pinned lookup is out releases the pin in
//  the next plan; the lookup's verdict then finds no request.
Test(sched, an_abort_while_the_lookup_is_out_releases_its_pin)
{
    static rig_t r;
    lk_setup(&r, true);
    rig_arrive(&r, 3, 150, 100, 1);
    rig_step_once(&r);
    kvt_lookup_t l = lk_only(&r);
    cr_assert_eq(kvt_sched_abort(r.s, 3), 0);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.lookups_out, 0);
    rig_step_once(&r);
    cr_assert_eq(r.plan.nlookup_releases, 1);
    cr_assert_eq(r.plan.lookup_releases[0].op.req, 3);
    cr_assert_eq(lk_answer(&r, l.op, true, 2), -1, "stale: the request is gone");
    r.lose_lookups = false;
    rig_deliver(&r);
    rig_run(&r, 100);
    cr_assert_eq(r.releases_seen, 1);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

// ------------------------------------------- touches and the verify hold ----

//  The touch a plan carries for the image a tier hit votes for.
static kvt_touch_msg_t touch_of(const rig_t *r, kvt_hash_t h)
{
    for (uint32_t i = 0; i < r->plan.ntouches; i++)
        if (kvt_hash_eq(r->plan.touches[i].hash, h))
            return r->plan.touches[i];
    cr_assert_fail("the plan carries no touch of the image");
    return (kvt_touch_msg_t){0};
}

//  A tier hit that votes for an image touches it; a GONE verdict of that
//  touch forgets the image (I5).
Test(sched, rule_I5_a_tier_hit_touches_its_image_and_a_gone_touch_forgets_it)
{
    static rig_t r;
    joint_setup(&r, 12, 44);
    uint64_t images0 = counter(&r, "stidx.images");
    kvt_sched_stats_t st0;
    kvt_sched_stats(r.s, &st0);
    rig_arrive(&r, 13, 36, P_BASE, 1);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.nloads, 1);
    cr_assert(r.plan.loads[0].state);
    kvt_touch_msg_t t = touch_of(&r, r.plan.loads[0].state_hash);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.touches_planned - st0.touches_planned, 1);
    kvt_verdict_t v = {.chan = KVT_CHAN_TOUCH,
                       .op = {t.round, KVT_TOUCH_GEN},
                       .key = t.hash,
                       .ok = false,
                       .detail = KVT_DETAIL_MISS,
                       .touch = KVT_TOUCH_GONE};
    cr_assert_eq(kvt_sched_verdict(r.s, &v), 0);
    cr_assert_eq(counter(&r, "stidx.forgotten_gone"), 1);
    cr_assert_eq(counter(&r, "stidx.images"), images0 - 1);
    rig_deliver(&r);
    rig_run(&r, 100);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  Seed 000's lost verdict: an image stored longer ago than the verified
//  window holds the admission that would load it for its touch's verdict;
//  the verdict never comes, and the hold ends once its bound (2 s from the
//  first hold, not from the later passes or touches) has passed (I6).
Test(sched, rule_I6_the_lost_touch_verdict_releases_the_hold_within_the_bound)
{
    static rig_t r;
    joint_setup(&r, 12, 44);
    uint64_t t0 = 10000000; //  10 s: past the 5 s window since the store
    kvt_sched_set_now(r.s, t0);
    rig_arrive(&r, 13, 36, P_BASE, 1);
    cr_assert_eq(rig_step(&r), 1, "the plan carries the touch");
    cr_assert_eq(r.plan.nloads, 0, "held: no load yet");
    cr_assert_eq(r.plan.ntouches, 1);
    kvt_sched_req_info_t info;
    cr_assert_eq(kvt_sched_req_info(r.s, 13, &info), 0);
    cr_assert_eq(info.state, 1, "waiting for the touch verdict");
    r.npending = 0; //  the touch verdict is lost
    kvt_sched_set_now(r.s, t0 + 1000000);
    rig_step(&r);
    cr_assert_eq(r.plan.nloads, 0, "still inside the bound");
    kvt_sched_set_now(r.s, t0 + 2000000);
    rig_step(&r);
    cr_assert_eq(r.plan.nloads, 0, "still held at the bound");
    r.npending = 0;
    kvt_sched_set_now(r.s, t0 + 2000001);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.nloads, 1, "past the bound the hold ended");
    cr_assert_eq(kvt_sched_req_info(r.s, 13, &info), 0);
    cr_assert_eq(info.state, 2);
    cr_assert_eq(info.joint_src, 2);
    cr_assert_eq(counter(&r, "stidx.holds_expired"), 1);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_geq(st.verify_holds, 2);
    rig_deliver(&r);
    rig_run(&r, 100);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  A failed lookup verdict (an aggregator timeout, a store error on some
//  rank) gives no tier hit: the admission runs from its HBM hit, counted.
Test(sched, a_failed_lookup_verdict_gives_no_tier_hit)
{
    static rig_t r;
    lk_setup(&r, false);
    rig_arrive(&r, 3, 150, 100, 1);
    rig_step_once(&r);
    kvt_lookup_t l = lk_only(&r);
    cr_assert_eq(lk_answer(&r, l.op, false, 2), 0);
    cr_assert_eq(rig_step_once(&r), 1);
    cr_assert_eq(r.plan.nloads, 0, "no load on a failed lookup");
    kvt_sched_req_info_t info;
    cr_assert_eq(kvt_sched_req_info(r.s, 3, &info), 0);
    cr_assert_eq(info.state, 3);
    cr_assert_eq(info.computed, 32, "from the HBM hit");
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.lookup_failed, 1);
    r.lose_lookups = false;
    rig_deliver(&r);
    rig_run(&r, 100);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  A pinned lookup that times out releases its pin once (no load will use
//  it); its late verdict is stale and releases nothing more.
Test(sched, a_pinned_lookup_past_its_bound_is_released_once)
{
    static rig_t r;
    lk_setup(&r, true);
    rig_arrive(&r, 3, 150, 100, 1);
    rig_step_once(&r);
    kvt_lookup_t l = lk_only(&r);
    kvt_sched_set_now(r.s, 1000000);
    cr_assert_eq(rig_step_once(&r), 1);
    cr_assert_eq(r.plan.nloads, 0);
    cr_assert_eq(r.plan.nlookup_releases, 1, "the timed-out pin is released");
    cr_assert_eq(r.plan.lookup_releases[0].op.gen, l.op.gen);
    cr_assert_eq(lk_answer(&r, l.op, true, 2), -1);
    r.lose_lookups = false;
    rig_deliver(&r);
    rig_run(&r, 100);
    cr_assert_eq(r.releases_seen, 1, "exactly once");
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

// ----------------------------------- orphaned loads (rules I1, I2, A3) ----

//  A request torn down mid-load hands its load to its index as an orphan:
//  the record goes at once, the blocks the load writes and its state slot
//  stay held until the load's late verdicts settle it or reclaim (timed
//  from orphan time) frees it.

//  Takes the verdicts the last plan produced out of the rig (the test
//  delivers them late, or never).
static uint32_t o_take(rig_t *r, kvt_verdict_t *out, uint32_t cap)
{
    uint32_t n = r->npending < cap ? r->npending : cap;
    memcpy(out, r->pending, n * sizeof *out);
    r->npending = 0;
    return n;
}

//  joint_setup with the orphan reclaim timeout set: request 13 (36
//  tokens, a 20-token HBM hit) then loads [16, 32) with its state at 32
//  from the tier.
static void o_setup(rig_t *r, uint32_t hbm_blocks, uint64_t reclaim_us)
{
    kvt_sched_cfg_t cfg = hybrid_cfg(4, 16, 16, hbm_blocks, 64);
    cfg.hbm_checkpoints = 2;
    cfg.orphan_reclaim_us = reclaim_us;
    rig_init_cfg(r, &cfg);
    rig_arrive(r, 10, 40, P_BASE, 1);
    rig_run(r, 100);
    rig_arrive(r, 11, 80, 90000, 1);
    rig_run(r, 100);
    rig_arrive(r, 12, 20, P_BASE, 1);
    rig_run(r, 100);
}

//  Runs to idle as rig_run does, advancing the clock by 1 ms a step (so
//  reclaim can come due).
static void o_run(rig_t *r, uint64_t *now, uint32_t max_steps)
{
    for (uint32_t i = 0; i < max_steps; i++) {
        *now += 1000;
        kvt_sched_set_now(r->s, *now);
        int rc = rig_step(r);
        rig_deliver(r);
        rig_audit(r);
        if (rc == 0 && r->plan.idle)
            return;
    }
    cr_assert_fail("did not go idle in %u steps", max_steps);
}

//  A3: the id of an aborted request arrives again while the first
//  admission's load is an orphan; the new admission carries a newer
//  generation, so the orphan's late reports settle only the orphan.
Test(sched, rule_A3_a_readmitted_requests_old_orphan_cannot_settle_its_new_load)
{
    rig_t r;
    o_setup(&r, 24, 0);
    rig_arrive(&r, 13, 36, P_BASE, 1);
    cr_assert_eq(rig_step(&r), 1);
    kvt_sched_req_info_t info;
    cr_assert_eq(kvt_sched_req_info(r.s, 13, &info), 0);
    cr_assert_eq(info.state, 2, "loading");
    uint32_t gen1 = info.gen;
    kvt_verdict_t old[16];
    uint32_t nold = o_take(&r, old, 16);
    cr_assert_eq(nold, 2, "a KV leg and a state leg");
    cr_assert_eq(kvt_sched_abort(r.s, 13), 0);
    cr_assert_neq(kvt_sched_req_info(r.s, 13, &info), 0, "the record is freed at once");
    cr_assert_eq(o_stats(&r).load_orphans, 1);
    rig_arrive(&r, 13, 36, P_BASE, 1); //  the same id again
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(kvt_sched_req_info(r.s, 13, &info), 0);
    cr_assert_eq(info.state, 2, "the new admission loads again");
    cr_assert_gt(info.gen, gen1, "with a newer generation");
    for (uint32_t i = 0; i < nold; i++)
        cr_assert_eq(kvt_sched_verdict(r.s, &old[i]), 0, "the orphan's own reports reach it");
    cr_assert_eq(o_stats(&r).load_orphans, 0, "the orphan settled");
    cr_assert_eq(kvt_sched_req_info(r.s, 13, &info), 0);
    cr_assert_eq(info.state, 2, "the new load is still out: the old reports did not settle it");
    rig_audit(&r);
    rig_deliver(&r); //  the new load's own verdicts
    kvt_sched_req_info(r.s, 13, &info);
    cr_assert_eq(info.state, 3, "running");
    rig_run(&r, 200);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  I2: reclaim is timed from orphan time, not from the load's dispatch: a
//  load out for longer than the timeout but orphaned for less stays held.
Test(sched, rule_I2_an_orphan_is_reclaimed_timed_from_orphan_time)
{
    rig_t r;
    const uint64_t S = 1000000;
    o_setup(&r, 24, 10 * S);
    kvt_sched_set_now(r.s, 1 * S);
    rig_arrive(&r, 13, 36, P_BASE, 1);
    cr_assert_eq(rig_step(&r), 1); //  dispatched at 1 s
    kvt_verdict_t lost[16];
    o_take(&r, lost, 16); //  never delivered
    kvt_sched_set_now(r.s, 8 * S);
    cr_assert_eq(kvt_sched_abort(r.s, 13), 0); //  orphaned at 8 s
    kvt_sched_set_now(r.s, 12 * S);            //  11 s after dispatch, 4 s after the abort
    rig_step(&r);
    cr_assert_eq(o_stats(&r).load_orphans, 1, "not due: 4 s since it was orphaned");
    kvt_sched_set_now(r.s, 18 * S - 1);
    rig_step(&r);
    cr_assert_eq(o_stats(&r).load_orphans, 1);
    kvt_sched_set_now(r.s, 18 * S);
    rig_step(&r);
    kvt_sched_stats_t st = o_stats(&r);
    cr_assert_eq(st.load_orphans, 0, "reclaimed 10 s after the abort");
    cr_assert_eq(st.loads_reclaimed, 1);
    cr_assert_eq(counter(&r, "stidx.reclaimed"), 1, "reclaimed by the state-offload index");
    rig_audit(&r);
    kvt_sched_destroy(&r.s);
}

//  A lost verdict of an aborted load leaves nothing immortal: reclaim frees
//  the blocks and the slot, and the core ends quiescent.
Test(sched, a_lost_verdict_of_an_aborted_load_is_reclaimed_and_the_core_ends_quiescent)
{
    rig_t r;
    o_setup(&r, 24, 50000);
    uint64_t now = 0;
    rig_arrive(&r, 13, 36, P_BASE, 1);
    cr_assert_eq(rig_step(&r), 1);
    kvt_verdict_t lost[16];
    o_take(&r, lost, 16);
    cr_assert_eq(kvt_sched_abort(r.s, 13), 0);
    kvt_sched_stats_t st = o_stats(&r);
    cr_assert_eq(st.records, 0, "no record waits for the verdict");
    cr_assert_gt(st.blocks_in_use, 0, "the blocks the load writes are held");
    cr_assert(!kvt_sched_quiescent(r.s), "the orphan holds its slot and blocks");
    o_run(&r, &now, 200);
    cr_assert(kvt_sched_quiescent(r.s), "reclaim freed the orphan's slot and blocks");
    cr_assert_eq(o_stats(&r).loads_reclaimed, 1);
    kvt_sched_destroy(&r.s);
}

//  After reclaim, the orphan's late verdicts are stale: nothing is freed a
//  second time, and a request admitted since keeps what it holds.
Test(sched, a_late_verdict_after_reclaim_is_stale_and_frees_nothing_twice)
{
    rig_t r;
    o_setup(&r, 24, 50000);
    uint64_t now = 0;
    rig_arrive(&r, 13, 36, P_BASE, 1);
    cr_assert_eq(rig_step(&r), 1);
    kvt_verdict_t late[16];
    uint32_t nlate = o_take(&r, late, 16);
    cr_assert_eq(kvt_sched_abort(r.s, 13), 0);
    o_run(&r, &now, 200);
    cr_assert_eq(o_stats(&r).loads_reclaimed, 1);
    rig_arrive(&r, 14, 60, 70000, 8); //  another request holds blocks and a slot
    cr_assert_eq(rig_step(&r), 1);
    rig_deliver(&r);
    kvt_sched_stats_t st0 = o_stats(&r);
    for (uint32_t i = 0; i < nlate; i++)
        cr_assert_eq(kvt_sched_verdict(r.s, &late[i]), -1, "stale");
    kvt_sched_stats_t st = o_stats(&r);
    cr_assert_eq(st.stale_verdicts, st0.stale_verdicts + nlate);
    cr_assert_eq(st.blocks_in_use, st0.blocks_in_use, "nothing freed twice");
    cr_assert_eq(st.loads_ok + st.loads_failed, st0.loads_ok + st0.loads_failed);
    rig_audit(&r);
    o_run(&r, &now, 200);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  I2: a live request's slot is never taken back. Request 13 is preempted
//  mid-load (its first load an orphan) and admitted again; its second
//  load's verdicts come long after the reclaim timeout, which frees the
//  orphan and only the orphan.
Test(sched, rule_I2_a_live_requests_slot_is_never_reclaimed)
{
    rig_t r;
    o_setup(&r, 24, 50000);
    uint64_t now = 0;
    rig_arrive(&r, 13, 36, P_BASE, 1);
    cr_assert_eq(rig_step(&r), 1);
    kvt_verdict_t lost[16];
    o_take(&r, lost, 16);
    kvt_sched_req_info_t info;
    kvt_sched_req_info(r.s, 13, &info);
    uint32_t old_slot = info.slot;
    cr_assert_eq(kvt_sched_preempt(r.s, 13), 0, "a loading request can be preempted");
    kvt_sched_req_info(r.s, 13, &info);
    cr_assert_eq(info.state, 1, "waiting again");
    cr_assert_eq(info.slot, UINT32_MAX, "the orphan has the slot, not the record");
    rig_audit(&r);
    cr_assert_eq(rig_step(&r), 1);
    kvt_sched_req_info(r.s, 13, &info);
    cr_assert_eq(info.state, 2, "loading again");
    uint32_t live_slot = info.slot;
    cr_assert_neq(live_slot, old_slot, "the orphan's slot is still reserved");
    kvt_verdict_t delayed[16];
    uint32_t ndelayed = o_take(&r, delayed, 16);
    now += 10 * 1000000ull; //  far past the timeout, from both loads' dispatch
    kvt_sched_set_now(r.s, now);
    rig_step(&r);
    kvt_sched_stats_t st = o_stats(&r);
    cr_assert_eq(st.loads_reclaimed, 1, "the orphan is reclaimed");
    cr_assert_eq(st.load_orphans, 0);
    kvt_sched_req_info(r.s, 13, &info);
    cr_assert_eq(info.state, 2, "the live load is not");
    cr_assert_eq(info.slot, live_slot, "and keeps its slot");
    rig_audit(&r);
    for (uint32_t i = 0; i < ndelayed; i++)
        cr_assert_eq(kvt_sched_verdict(r.s, &delayed[i]), 0);
    kvt_sched_req_info(r.s, 13, &info);
    cr_assert_eq(info.state, 3, "its own verdicts settle it");
    o_run(&r, &now, 200);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  The blocks an orphaned KV load still writes are not handed to another
//  request before it settles (a dense model: the load index owns the
//  load). 12 blocks: request 3 loads [0, 128) into 8 of its 10 blocks.
Test(sched, the_blocks_of_an_orphaned_load_are_not_handed_out_before_it_settles)
{
    rig_t r;
    rig_init(&r, 12, 64);
    rig_arrive(&r, 1, 150, 100, 1);
    rig_run(&r, 50);
    rig_arrive(&r, 2, 150, 90000, 1);
    rig_run(&r, 50);
    rig_arrive(&r, 3, 150, 100, 1);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.nloads, 1);
    uint32_t written[16], nw = r.plan.loads[0].nblocks;
    cr_assert_eq(nw, 8);
    memcpy(written, r.plan.loads[0].blocks, nw * sizeof *written);
    kvt_verdict_t late[4];
    uint32_t nlate = o_take(&r, late, 4);
    cr_assert_eq(kvt_sched_abort(r.s, 3), 0);
    cr_assert_eq(o_stats(&r).load_orphans, 1, "the load index owns the orphan");
    cr_assert_eq(o_stats(&r).blocks_in_use, nw, "only the blocks the load writes are held");
    //  A request that needs 10 blocks: only 4 are free.
    rig_arrive(&r, 4, 150, 300000, 1);
    rig_step(&r);
    kvt_sched_req_info_t info;
    cr_assert_eq(kvt_sched_req_info(r.s, 4, &info), 0);
    cr_assert_eq(info.state, 1, "waits: the orphan's blocks are not free");
    rig_audit(&r);
    for (uint32_t i = 0; i < nlate; i++)
        cr_assert_eq(kvt_sched_verdict(r.s, &late[i]), 0, "the late verdict settles the orphan");
    cr_assert_eq(o_stats(&r).load_orphans, 0);
    cr_assert_eq(o_stats(&r).blocks_in_use, 0);
    cr_assert_eq(rig_step(&r), 1);
    kvt_sched_req_info(r.s, 4, &info);
    cr_assert_neq(info.state, 1, "admitted once the orphan let go");
    rig_run(&r, 100);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  L2 for an orphan: its KV leg's verdict alone settles nothing (the state
//  leg may still write the slot); the last leg settles it and lets go.
Test(sched, an_orphan_settles_only_once_every_leg_reported)
{
    rig_t r;
    o_setup(&r, 24, 0);
    rig_arrive(&r, 13, 36, P_BASE, 1);
    cr_assert_eq(rig_step(&r), 1);
    kvt_verdict_t late[16];
    uint32_t n = o_take(&r, late, 16);
    cr_assert_eq(n, 2);
    cr_assert_eq(kvt_sched_abort(r.s, 13), 0);
    uint32_t kv = late[0].chan == KVT_CHAN_LOAD ? 0 : 1;
    uint32_t in_use = o_stats(&r).blocks_in_use;
    cr_assert_eq(kvt_sched_verdict(r.s, &late[kv]), 0);
    cr_assert_eq(o_stats(&r).load_orphans, 1, "the state leg has not reported");
    cr_assert_eq(o_stats(&r).blocks_in_use, in_use, "nothing let go yet");
    rig_audit(&r);
    cr_assert_eq(kvt_sched_verdict(r.s, &late[1 - kv]), 0);
    cr_assert_eq(o_stats(&r).load_orphans, 0, "the last leg settles it");
    cr_assert_lt(o_stats(&r).blocks_in_use, in_use, "its blocks went back");
    rig_audit(&r);
    rig_run(&r, 100);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

// ----------------------------------- rank-0-only lookups, stale lookups ----

//  lk_setup's scene with the lookup settings under test: `ranks`, a pin
//  (lease TTL 500 ms) or none, and lookup_max_age_us (0: its default).
static void lk2_init(rig_t *r, bool pin, kvt_sched_lookup_ranks_t ranks, uint64_t max_age_us)
{
    memset(r, 0, sizeof *r);
    kvt_sched_cfg_t cfg = {.lookup_pin = pin,
                           .lookup_ttl_ms = pin ? 500 : 0,
                           .lookup_ranks = ranks,
                           .lookup_max_age_us = max_age_us,
                           .block_size = BS,
                           .chunk_size = CS,
                           .hbm_blocks = 12,
                           .tier_chunks = 64,
                           .max_running = 8,
                           .step_tokens = 256,
                           .save_retries = 1,
                           .ns = kvt_namespace_hash("test")};
    char err[128];
    r->s = kvt_sched_new(&cfg, err, sizeof err);
    cr_assert_not_null(r->s, "%s", err);
    rig_arrive(r, 1, 150, 100, 1);
    rig_run(r, 50);
    rig_arrive(r, 2, 150, 90000, 1);
    rig_run(r, 50);
    r->lose_lookups = true;
    r->releases_seen = r->pins_used = 0;
}

Test(sched, lookup_rank0_asks_rank_0_only_and_admits_on_its_answer)
{
    static rig_t r;
    lk_setup(&r, false);
    rig_arrive(&r, 3, 150, 100, 1);
    rig_step_once(&r);
    cr_assert_not(lk_only(&r).rank0_only, "by default every rank is asked");
    kvt_sched_destroy(&r.s);

    lk2_init(&r, true, KVT_SCHED_LOOKUP_RANK0, 0);
    rig_arrive(&r, 3, 150, 100, 1);
    rig_step_once(&r);
    kvt_lookup_t l = lk_only(&r);
    cr_assert(l.rank0_only, "rank 0 only");
    cr_assert(l.pin, "rank 0 pins what it found");
    cr_assert_eq(lk_answer(&r, l.op, true, 2), 0, "rank 0's answer settles the lookup");
    cr_assert_eq(rig_step_once(&r), 1);
    cr_assert_eq(r.plan.nloads, 1);
    cr_assert_eq(r.plan.loads[0].end, 2 * CS, "the two chunks rank 0 holds");
    cr_assert(r.plan.loads[0].lookup && r.plan.loads[0].op.gen == l.op.gen,
              "the load releases rank 0's pin");
    r.lose_lookups = false;
    rig_deliver(&r);
    rig_run(&r, 100);
    cr_assert_eq(r.releases_seen, 0);
    cr_assert_eq(r.pins_used, 1);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(sched, a_lookup_ranks_value_out_of_range_is_refused_naming_it)
{
    kvt_sched_cfg_t cfg = {.block_size = BS,
                           .chunk_size = CS,
                           .hbm_blocks = 12,
                           .tier_chunks = 64,
                           .max_running = 8,
                           .step_tokens = 256,
                           .lookup_ranks = (kvt_sched_lookup_ranks_t)2};
    char err[160] = "";
    kvt_sched_t *s = kvt_sched_new(&cfg, err, sizeof err);
    cr_assert_null(s);
    cr_assert(strstr(err, "lookup_ranks"), "%s", err);
    cfg.lookup_ranks = KVT_SCHED_LOOKUP_RANK0;
    s = kvt_sched_new(&cfg, err, sizeof err);
    cr_assert_not_null(s, "%s", err);
    kvt_sched_destroy(&s);
}

//  Request 3's lookup settles at t0 (held 2) while request 4 holds blocks
//  request 3 needs, so it keeps waiting; request 4 then runs to its end
//  with the clock at t0 + dt. Leaves r->plan at the first plan that asks
//  again or loads for request 3.
static void lk2_wait(rig_t *r, uint64_t t0, uint64_t dt, kvt_lookup_t *first)
{
    kvt_sched_set_now(r->s, t0);
    rig_arrive(r, 3, 150, 100, 1);
    rig_arrive(r, 4, 40, 50000, 40);
    rig_step_once(r);
    *first = lk_only(r);
    cr_assert_eq(lk_answer(r, first->op, true, 2), 0);
    rig_deliver(r);
    rig_step_once(r);
    cr_assert_eq(r->plan.nlookups + r->plan.nloads, 0);
    kvt_sched_req_info_t info;
    cr_assert_eq(kvt_sched_req_info(r->s, 3, &info), 0);
    cr_assert_eq(info.state, 1, "request 3's blocks do not fit beside request 4's");
    kvt_sched_set_now(r->s, t0 + dt);
    for (uint32_t i = 0; i < 200; i++) {
        rig_deliver(r);
        rig_step_once(r);
        if (r->plan.nlookups || r->plan.nloads)
            return;
    }
    cr_assert_fail("request 3 was neither admitted nor asked again");
}

//  Steps (delivering every verdict but the lookups') until a plan loads.
static void lk2_until_load(rig_t *r)
{
    for (uint32_t i = 0; i < 200; i++) {
        rig_deliver(r);
        rig_step_once(r);
        if (r->plan.nloads)
            return;
    }
    cr_assert_fail("no load within 200 steps");
}

//  Request 4 still runs: the refresh came while request 3 waited for its
//  blocks, not when they freed up.
static void lk2_assert_while_blocked(const rig_t *r)
{
    kvt_sched_req_info_t info;
    cr_assert_eq(kvt_sched_req_info(r->s, 4, &info), 0);
    cr_assert_eq(info.state, 3, "asked again while request 4 still holds the blocks");
    cr_assert_eq(kvt_sched_req_info(r->s, 3, &info), 0);
    cr_assert_eq(info.state, 1);
}

//  A settled lookup is trusted up to lookup_max_age_us; past it the
//  request that keeps waiting for its blocks asks again (a new id) while it
//  waits, and loads on the fresh answer once its blocks free up.
Test(sched, a_settled_lookup_is_used_up_to_its_max_age_and_asked_again_past_it)
{
    static rig_t r;
    kvt_lookup_t l;
    lk2_init(&r, false, KVT_SCHED_LOOKUP_ALL, 300000);
    lk2_wait(&r, 10000000, 300000, &l);
    cr_assert_eq(r.plan.nlookups, 0, "at its max age the answer still stands");
    cr_assert_eq(r.plan.nloads, 1);
    cr_assert_eq(r.plan.loads[0].end, 2 * CS);
    cr_assert_eq(r.plan.loads[0].op.gen, l.op.gen);
    r.lose_lookups = false;
    rig_deliver(&r);
    rig_run(&r, 200);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);

    lk2_init(&r, false, KVT_SCHED_LOOKUP_ALL, 300000);
    lk2_wait(&r, 10000000, 300001, &l);
    cr_assert_eq(r.plan.nlookups, 1, "past it the request asks again");
    cr_assert_eq(r.plan.nloads, 0, "and does not load on the stale answer");
    lk2_assert_while_blocked(&r);
    kvt_lookup_t l2 = r.plan.lookups[0];
    cr_assert_eq(l2.op.req, 3);
    cr_assert_neq(l2.op.gen, l.op.gen, "under a new id");
    cr_assert_eq(r.plan.nlookup_releases, 0, "nothing was pinned");
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.lookup_refreshes, 1);
    cr_assert_eq(st.lookups_out, 1);
    cr_assert_eq(lk_answer(&r, l.op, true, 2), -1, "the old id is stale");
    cr_assert_eq(lk_answer(&r, l2.op, true, 1), 0, "the tier holds less now");
    lk2_until_load(&r);
    cr_assert_eq(r.plan.nloads, 1);
    cr_assert_eq(r.plan.nlookups, 0, "the fresh answer needs no second refresh");
    cr_assert_eq(r.plan.loads[0].end, CS, "the fresh answer is the one used");
    cr_assert_eq(r.plan.loads[0].op.gen, l2.op.gen, "the load carries the new id");
    r.lose_lookups = false;
    rig_deliver(&r);
    rig_run(&r, 200);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  A pinned settled lookup is stale once its lease's TTL (500 ms) passed,
//  under the 1 s default max age: the waiting request asks again, and the old pin
//  is released once (a LookupRelease of the old id) while the new one is
//  released by the load that uses it.
Test(sched, a_stale_pinned_lookup_is_asked_again_and_its_old_pin_released_once)
{
    static rig_t r;
    kvt_lookup_t l;
    lk2_init(&r, true, KVT_SCHED_LOOKUP_ALL, 0);
    lk2_wait(&r, 10000000, 600000, &l);
    cr_assert_eq(r.plan.nlookups, 1, "past the pin's TTL the request asks again");
    cr_assert_eq(r.plan.nloads, 0);
    lk2_assert_while_blocked(&r);
    kvt_lookup_t l2 = r.plan.lookups[0];
    cr_assert(l2.pin);
    cr_assert_neq(l2.op.gen, l.op.gen);
    cr_assert_eq(r.plan.nlookup_releases, 1, "the old pin is released");
    cr_assert_eq(r.plan.lookup_releases[0].op.req, 3);
    cr_assert_eq(r.plan.lookup_releases[0].op.gen, l.op.gen, "under the old id");
    cr_assert_eq(lk_answer(&r, l2.op, true, 2), 0);
    lk2_until_load(&r);
    cr_assert_eq(r.plan.nloads, 1);
    cr_assert(r.plan.loads[0].lookup && r.plan.loads[0].op.gen == l2.op.gen,
              "the new pin goes with the load");
    r.lose_lookups = false;
    rig_deliver(&r);
    rig_run(&r, 200);
    cr_assert_eq(r.releases_seen, 1, "the old pin, once");
    cr_assert_eq(r.pins_used, 1);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.lookup_refreshes, 1);
    kvt_sched_req_info_t info;
    cr_assert_eq(kvt_sched_req_info(r.s, 3, &info), -1, "finished and freed");
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  The other way a stale answer is met: the request's blocks free up in
//  the very plan that finds its settled lookup past its max age (no plan in
//  between saw it wait). It asks again there instead of loading on it.
Test(sched, a_stale_lookup_met_at_admission_is_asked_again_before_use)
{
    static rig_t r;
    lk2_init(&r, false, KVT_SCHED_LOOKUP_ALL, 300000);
    uint64_t t0 = 10000000;
    kvt_sched_set_now(r.s, t0);
    rig_arrive(&r, 3, 150, 100, 1);
    rig_arrive(&r, 4, 40, 50000, 40);
    rig_step_once(&r);
    kvt_lookup_t l = lk_only(&r);
    cr_assert_eq(lk_answer(&r, l.op, true, 2), 0);
    rig_deliver(&r);
    rig_step_once(&r);
    cr_assert_eq(r.plan.nlookups + r.plan.nloads, 0, "request 3 waits for its blocks");
    //  Request 4 stops before it completes a chunk: nothing leases its
    //  blocks, so the next plan frees them and considers request 3.
    cr_assert_eq(kvt_sched_finish(r.s, 4), 0);
    kvt_sched_set_now(r.s, t0 + 300001);
    rig_deliver(&r);
    rig_step_once(&r);
    kvt_sched_req_info_t info;
    cr_assert_eq(kvt_sched_req_info(r.s, 4, &info), -1, "request 4 retired in this plan");
    cr_assert_eq(r.plan.nloads, 0, "no load on the stale answer");
    cr_assert_eq(r.plan.nlookups, 1, "asked again");
    kvt_lookup_t l2 = r.plan.lookups[0];
    cr_assert_neq(l2.op.gen, l.op.gen);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.lookup_refreshes, 1);
    cr_assert_eq(lk_answer(&r, l2.op, true, 2), 0);
    cr_assert_eq(rig_step_once(&r), 1);
    cr_assert_eq(r.plan.nloads, 1, "admitted on the fresh answer");
    cr_assert_eq(r.plan.loads[0].op.gen, l2.op.gen);
    r.lose_lookups = false;
    rig_deliver(&r);
    rig_run(&r, 200);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  A hybrid request keeps its settled lookup fresh while it waits for its
//  blocks, on both paths where it waits: the probe that finds no room
//  (scene 0) and, later, a last probe's demand still above what is free
//  (scene 1).
Test(sched, a_hybrid_request_waiting_for_its_blocks_keeps_its_lookup_fresh)
{
    for (int scene = 0; scene < 2; scene++) {
        static rig_t r;
        kvt_sched_cfg_t cfg = hybrid_cfg(16, 64, 64, 16, 64);
        cfg.lookup_max_age_us = 300000;
        rig_init_cfg(&r, &cfg);
        r.lose_lookups = true;
        uint64_t t0 = 10000000;
        kvt_sched_set_now(r.s, t0);
        rig_arrive(&r, 3, 150, 100, 1);   //  10 blocks
        rig_arrive(&r, 4, 60, 50000, 60); //  8 blocks, no chunk to look up
        rig_step_once(&r);
        kvt_lookup_t l = lk_only(&r);
        cr_assert_eq(lk_answer(&r, l.op, true, 2), 0);
        if (scene == 1) {
            rig_deliver(&r);
            rig_step_once(&r);
            cr_assert_eq(r.plan.nlookups, 0, "a fresh answer is kept while it waits");
        }
        kvt_sched_set_now(r.s, t0 + 300001);
        rig_deliver(&r);
        rig_step_once(&r);
        if (scene == 0) {
            //  No plan used the answer yet: this one does (the request
            //  waits on it), and only a used answer goes stale.
            cr_assert_eq(r.plan.nlookups, 0, "asked again before its answer was used once");
            kvt_sched_set_now(r.s, t0 + 600002);
            rig_deliver(&r);
            rig_step_once(&r);
        }
        cr_assert_eq(r.plan.nlookups, 1, "scene %d: asked again while it waits", scene);
        kvt_lookup_t l2 = r.plan.lookups[0];
        cr_assert_eq(l2.op.req, 3);
        cr_assert_neq(l2.op.gen, l.op.gen);
        lk2_assert_while_blocked(&r);
        kvt_sched_stats_t st;
        kvt_sched_stats(r.s, &st);
        cr_assert_eq(st.lookup_refreshes, 1);
        cr_assert_eq(lk_answer(&r, l2.op, true, 2), 0);
        r.lose_lookups = false;
        rig_deliver(&r);
        rig_run(&r, 300);
        cr_assert(kvt_sched_quiescent(r.s));
        kvt_sched_destroy(&r.s);
    }
}

// ------------------------------------------- the save tracker, wired ----

//  The source_safe verdict of a planned SaveSpec (keyed by its last chunk).
static kvt_verdict_t safe_of(const kvt_save_spec_t *sp, bool ok)
{
    kvt_verdict_t v = {.chan = KVT_CHAN_SOURCE_SAFE,
                       .op = sp->op,
                       .key = sp->keys[sp->nkeys - 1],
                       .attempt = sp->attempt,
                       .ok = ok};
    return v;
}

Test(sched, rule_S4_a_finished_requests_tail_keeps_its_lease_until_the_next_plan_builds_it)
{
    rig_t r;
    rig_init(&r, 64, 64);
    rig_arrive(&r, 1, 128, 5, 1); //  finishes with the step that computes [0, 128)
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.nsaves, 0, "nothing forwarded yet");
    cr_assert_eq(kvt_sched_apply(r.s, r.step, true), 0);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.finished, 1);
    cr_assert_eq(st.leased_blocks, 8, "the unbuilt tail [0, 128) holds its 8 blocks");
    cr_assert_eq(counter(&r, "savetrack.tails_leased"), 1);
    rig_audit(&r);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.nsaves, 1, "the next plan builds the tail");
    cr_assert_eq(r.plan.saves[0].op.req, 1);
    cr_assert_eq(r.plan.saves[0].start, 0);
    cr_assert_eq(r.plan.saves[0].end, 128);
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.leased_blocks, 8, "the built saves hold the lease now");
    cr_assert_eq(counter(&r, "savetrack.tails_retired"), 0);
    rig_audit(&r);
    rig_deliver(&r);
    rig_run(&r, 20);
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.saves_ok, 2);
    cr_assert_eq(st.leased_blocks, 0);
    cr_assert_eq(st.blocks_in_use, 0);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(sched, rule_S4_a_tail_the_plan_cannot_carry_is_retired_at_end_plan_and_released)
{
    rig_t r;
    rig_init(&r, 64, 64);
    rig_arrive(&r, 1, 128, 5, 1);
    cr_assert_eq(rig_step(&r), 1);
    //  Refused arrivals queue an event each: enough of them fill the next
    //  plan, which then cannot carry the finished request's tail.
    for (uint32_t i = 0; i < 200000; i++) {
        kvt_arrival_t a = {.req = 1000 + i, .ntokens = 0, .max_new_tokens = 1};
        kvt_sched_arrive(r.s, &a);
    }
    cr_assert_eq(kvt_sched_apply(r.s, r.step, true), 0);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.leased_blocks, 8);
    cr_assert_eq(kvt_sched_plan(r.s, ++r.step, false, &r.plan), 0);
    cr_assert_eq(r.plan.nsaves, 0, "the plan had no room for the tail");
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(counter(&r, "savetrack.tails_retired"), 1, "end_plan retired it");
    cr_assert_eq(counter(&r, "savetrack.chunks_retired"), 2);
    cr_assert_eq(st.leased_blocks, 0, "and released its lease");
    cr_assert_eq(st.blocks_in_use, 0);
    cr_assert_eq(st.records, 0);
    rig_audit(&r);
    rig_run(&r, 100); //  hands the queued events out
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(sched, rule_S4_source_safe_releases_a_saves_blocks_before_its_store_verdict)
{
    rig_t r;
    rig_init(&r, 64, 64);
    rig_arrive(&r, 1, 128, 5, 40);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.nsaves, 1);
    kvt_save_spec_t sp = r.plan.saves[0];
    cr_assert_eq(sp.nkeys, 2);
    kvt_hash_t keys[2] = {sp.keys[0], sp.keys[1]};
    sp.keys = keys;
    //  Preempted: the request lets its blocks go; the save's lease keeps
    //  the two chunks it reads.
    cr_assert_eq(kvt_sched_preempt(r.s, 1), 0);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.leased_blocks, 8);
    cr_assert_eq(st.blocks_in_use, 8);
    rig_audit(&r);
    //  A rank may still read them (a quarantined copy): nothing is released.
    kvt_verdict_t unsafe = safe_of(&sp, false);
    cr_assert_eq(kvt_sched_verdict(r.s, &unsafe), 0);
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.leased_blocks, 8);
    kvt_verdict_t safe = safe_of(&sp, true);
    cr_assert_eq(kvt_sched_verdict(r.s, &safe), 0);
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.leased_blocks, 0, "both chunks of the spec are released");
    cr_assert_eq(st.blocks_in_use, 0, "before the store verdicts");
    cr_assert_eq(st.saves_outstanding, 2, "the saves still wait for their store verdicts");
    rig_audit(&r);
    cr_assert_eq(kvt_sched_verdict(r.s, &safe), -1, "a duplicate is stale");
    uint64_t stale = st.stale_verdicts;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.stale_verdicts, stale + 1);
    rig_deliver(&r); //  the store verdicts
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.saves_ok, 2);
    cr_assert_eq(kvt_sched_verdict(r.s, &safe), -1, "a source_safe after the store is stale");
    rig_run(&r, 200);
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(counter(&r, "savetrack.leases_outstanding"), 0);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(sched, rule_S3_a_failed_save_is_reemitted_once_the_requests_saves_settled)
{
    rig_t r;
    rig_init(&r, 64, 64);
    rig_arrive(&r, 1, 128, 5, 200);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.nsaves, 1);
    cr_assert_eq(r.npending, 2, "two chunk saves");
    kvt_verdict_t second = r.pending[1];
    //  Chunk 0 fails while chunk 1 is still out: no re-emit yet.
    r.pending[0].ok = false;
    r.pending[0].detail = KVT_DETAIL_NO_SPACE;
    kvt_sched_verdict(r.s, &r.pending[0]);
    r.npending = 0;
    for (uint32_t i = 0; i < 3; i++) {
        cr_assert_eq(rig_step(&r), 1);
        cr_assert_eq(r.plan.nsaves, 0, "a re-emit waits until every save of the request settled");
    }
    kvt_sched_verdict(r.s, &second);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.nsaves, 1, "all quiescent: re-emitted");
    cr_assert_eq(r.plan.saves[0].start, 0, "from the failed chunk");
    cr_assert_eq(r.plan.saves[0].attempt, 1, "with a new attempt");
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.saves_reemitted, 1);
    rig_deliver(&r);
    rig_run(&r, 400);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(sched, rule_S3_a_failed_save_of_a_retired_request_is_dropped)
{
    rig_t r;
    rig_init(&r, 64, 64);
    rig_arrive(&r, 1, 128, 5, 40);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.npending, 2);
    cr_assert_eq(kvt_sched_abort(r.s, 1), 0);
    r.pending[0].ok = false;
    r.pending[0].detail = KVT_DETAIL_NO_SPACE;
    rig_deliver(&r);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.saves_failed, 1);
    cr_assert_eq(st.saves_reemitted, 0, "a retired request re-emits nothing");
    cr_assert_eq(counter(&r, "savetrack.saves_dropped"), 1);
    rig_run(&r, 20);
    cr_assert_eq(r.saves_seen, 2, "nothing was saved again");
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(sched, rule_S5_a_lost_tier_hit_reopens_hbm_to_hit_and_nothing_else)
{
    rig_t r;
    rig_init(&r, 12, 64);
    rig_arrive(&r, 1, 150, 100, 1);
    rig_run(&r, 50);
    rig_arrive(&r, 2, 150, 90000, 1); //  evicts request 1's blocks but 2
    rig_run(&r, 50);
    uint32_t before = r.saves_seen;
    //  Request 3 loads [0, 128) from the tier above its 32-token HBM hit
    //  (chunk floor 0); the load fails: [0, 128) is saved again by the
    //  recompute, and nothing below the floor or above the hit is reopened.
    r.fail_loads = true;
    rig_arrive(&r, 3, 150, 100, 1);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.nloads, 1);
    uint32_t lo = r.plan.loads[0].start, hi = r.plan.loads[0].end;
    cr_assert_eq(lo, 0);
    cr_assert_eq(hi, 128);
    rig_deliver(&r);
    r.fail_loads = false;
    uint32_t saved_lo = UINT32_MAX, saved_hi = 0;
    for (uint32_t i = 0; i < 50; i++) {
        int rc = rig_step(&r);
        for (uint32_t k = 0; k < r.plan.nsaves; k++) {
            if (r.plan.saves[k].op.req != 3)
                continue;
            if (r.plan.saves[k].start < saved_lo)
                saved_lo = r.plan.saves[k].start;
            if (r.plan.saves[k].end > saved_hi)
                saved_hi = r.plan.saves[k].end;
        }
        rig_deliver(&r);
        if (rc == 0 && r.plan.idle)
            break;
    }
    cr_assert_eq(saved_lo, lo, "the lost hit [%u, %u) is saved again", lo, hi);
    cr_assert_eq(saved_hi, hi, "the 150-token prompt has no third full chunk");
    cr_assert_eq(r.saves_seen - before, 2);
    //  A load that succeeds reopens nothing (rule_S5_a_loaded_prefix_...).
    cr_assert_eq(counter(&r, "savetrack.floors_reopened"), 1);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  B1: the fit counts the cached blocks an HBM hit keeps when nothing
//  references them (they sit in the evictable pool, so taking them shrinks
//  what is available for the fresh blocks). 8 blocks: request 1's 4 blocks
//  stay cached, request 2 runs in 1; request 3 (128 tokens, 8 blocks) hits
//  request 1's prefix and needs 4 fresh blocks plus those 4: 7 are
//  available, so it waits for request 2 instead of failing its allocation.
Test(sched, rule_B1_the_fit_counts_the_unreferenced_cached_blocks_a_hit_keeps)
{
    rig_t r;
    rig_init(&r, 8, 0);
    rig_arrive(&r, 1, 64, 1, 1);
    rig_run(&r, 50);
    rig_arrive(&r, 2, 8, 5000, 20);
    cr_assert_eq(rig_step(&r), 1);
    rig_deliver(&r);
    rig_arrive(&r, 3, 128, 1, 1);
    rig_step(&r);
    rig_deliver(&r);
    rig_audit(&r);
    kvt_sched_req_info_t info;
    cr_assert_eq(kvt_sched_req_info(r.s, 2, &info), 0);
    cr_assert_eq(info.state, 3, "request 2 still runs");
    cr_assert_eq(kvt_sched_req_info(r.s, 3, &info), 0);
    cr_assert_eq(info.state, 1, "request 3 waits: 4 fresh + 4 kept > 7 available");
    rig_run(&r, 200);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.finished, 3);
    cr_assert_gt(st.hbm_hit_tokens, 0, "request 3 was admitted on its hit once request 2 ended");
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  A lookup bound shorter than a lookup's round trip: the answer is older
//  than lookup_max_age_us by the plan after it settled, every time. An
//  answer no admission attempt has used is not stale, so the request is
//  admitted on it instead of asking again forever.
Test(sched, a_max_age_below_the_round_trip_still_admits_on_the_first_answer)
{
    static rig_t r;
    lk2_init(&r, false, KVT_SCHED_LOOKUP_ALL, 1);
    uint64_t now = 10000000;
    kvt_sched_set_now(r.s, now);
    rig_arrive(&r, 3, 150, 100, 1);
    rig_step_once(&r);
    kvt_lookup_t l = lk_only(&r);
    cr_assert_eq(lk_answer(&r, l.op, true, 2), 0);
    kvt_sched_set_now(r.s, now + 1000); //  1 ms later: past the 1 µs bound
    rig_deliver(&r);
    cr_assert_eq(rig_step_once(&r), 1);
    cr_assert_eq(r.plan.nlookups, 0, "asked again before the answer was ever used");
    cr_assert_eq(r.plan.nloads, 1, "admitted on its answer");
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.lookup_refreshes, 0);
    r.lose_lookups = false;
    rig_deliver(&r);
    rig_run(&r, 200);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  An orphan owes no plan work: with its verdicts lost and nothing else
//  outstanding, the plan is not held (a held step is planned again only on
//  a verdict, so the reclaim that ends the orphan would never run) and
//  carries the abort's FINISH event; it only stays short of idle until the
//  reclaim, which a later plan with a later clock runs.
Test(sched, an_orphan_with_lost_verdicts_holds_no_plan_back)
{
    rig_t r;
    o_setup(&r, 24, 50000);
    rig_arrive(&r, 13, 36, P_BASE, 1);
    cr_assert_eq(rig_step(&r), 1);
    kvt_verdict_t lost[16];
    o_take(&r, lost, 16);
    cr_assert_eq(kvt_sched_abort(r.s, 13), 0);
    uint32_t fin = r.finished;
    kvt_sched_apply(r.s, r.step, true);
    int rc = rig_step_once(&r);
    cr_assert_neq(rc, KVT_SCHED_HOLD, "held for an orphan that owes nothing");
    cr_assert_eq(r.finished, fin + 1, "the abort's FINISH went out");
    cr_assert_not(r.plan.idle, "the orphan still holds blocks and a slot");
    uint64_t now = 0;
    o_run(&r, &now, 200);
    cr_assert_eq(o_stats(&r).loads_reclaimed, 1);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}
