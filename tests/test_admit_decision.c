/*  kvt_admit, driven directly (issue 14 §1): the admission decision is one
    path for dense and hybrid requests (a dense request is a load with no
    state leg), and it decides without moving the request — the
    coordinator alone changes r->state and the lists. */
#include <criterion/criterion.h>
#include <string.h>

#include "actors/scheduler/kvt_admit.h"
#include "actors/scheduler/kvt_joint.h"

#define S_BS     16u
#define S_CS     256u
#define S_BLOCKS 64u

typedef struct {
    kvt_blockmgr_t *bm;  //  HBM blocks
    kvt_reqtab_t *rt;    //  request records
    kvt_planbuf_t *pb;   //  the plan
    kvt_lookups_t *lk;   //  tier lookups
    kvt_saves_t *sv;     //  saves
    kvt_loadtrack_t *lt; //  loads
    kvt_admit_t *ad;     //  the module under test
} s_rig_t;

static void s_rig(s_rig_t *g)
{
    memset(g, 0, sizeof(*g));
    g->bm = kvt_blockmgr_new(S_BLOCKS, S_BS);
    g->rt = kvt_reqtab_new(S_BS, S_CS, (kvt_hash_t){1, 2});
    g->pb = kvt_planbuf_new();
    kvt_lookups_cfg_t lc = {.tier_chunks = 64,
                            .chunk_size = S_CS,
                            .tail = 1,
                            .timeout_us = 1000000,
                            .max_age_us = 1000000};
    g->lk = kvt_lookups_new(&lc);
    kvt_saves_cfg_t sc = {
        .block_size = S_BS, .chunk_size = S_CS, .bpc = S_CS / S_BS, .tier_chunks = 64};
    g->sv = kvt_saves_new(&sc, g->rt, g->pb, g->bm, NULL, NULL);
    kvt_loadtrack_cfg_t tc = {.block_size = S_BS, .chunk_size = S_CS};
    g->lt = kvt_loadtrack_new(&tc, g->rt, g->pb, g->bm, NULL, NULL, kvt_saves_tracker(g->sv));
    kvt_admit_cfg_t ac = {
        .block_size = S_BS, .chunk_size = S_CS, .hbm_blocks = S_BLOCKS, .tail = 1, .tier = true};
    g->ad = kvt_admit_new(&ac, g->rt, g->pb, g->bm, NULL, NULL, g->lk, g->lt, g->sv);
    cr_assert(g->bm && g->rt && g->pb && g->lk && g->sv && g->lt && g->ad);
    kvt_planbuf_open(g->pb);
}

static void s_unrig(s_rig_t *g)
{
    kvt_admit_destroy(&g->ad);
    kvt_loadtrack_destroy(&g->lt);
    kvt_saves_destroy(&g->sv);
    kvt_lookups_destroy(&g->lk);
    kvt_planbuf_destroy(&g->pb);
    kvt_reqtab_destroy(&g->rt);
    kvt_blockmgr_destroy(&g->bm);
}

//  A waiting dense request of `n` prompt tokens (one to generate), as the
//  coordinator leaves it at arrival.
static kvt_sreq_t *s_waiting(s_rig_t *g, uint64_t id, uint32_t n)
{
    uint32_t tokens[1024];
    cr_assert(n <= 1024);
    for (uint32_t i = 0; i < n; i++)
        tokens[i] = (uint32_t)(id * 7919u + i);
    uint32_t slot;
    kvt_sreq_t *r = kvt_reqtab_add(g->rt, id, tokens, n, 1, 0, &slot);
    cr_assert(r);
    kvt_loadtrack_arrive(g->lt, r);
    r->state = R_WAITING;
    kvt_reqtab_append(g->rt, KVT_RQ_WAITING, slot);
    return r;
}

//  The ranks answer r's lookup: every rank holds `held` leading chunks.
static void s_lookup_answer(s_rig_t *g, kvt_sreq_t *r, uint32_t held)
{
    kvt_verdict_t v = {
        .chan = KVT_CHAN_LOOKUP, .op = {r->id, r->gen + 1}, .ok = true, .held = held};
    cr_assert_eq(kvt_lookups_verdict(g->lk, g->rt, &v, 10), 0);
}

static kvt_planbuf_counts_t s_counts(const s_rig_t *g)
{
    kvt_planbuf_counts_t pc;
    kvt_planbuf_counts(g->pb, &pc);
    return pc;
}

Test(admit_decision, a_dense_tier_hit_is_a_load_with_no_state_leg_and_the_request_does_not_move)
{
    s_rig_t g;
    s_rig(&g);
    kvt_sreq_t *r = s_waiting(&g, 7, 600);
    cr_assert_eq(kvt_admit_try(g.ad, r, 0), KVT_ADMIT_LOOKUP, "first its tier lookup goes out");
    cr_assert_eq(s_counts(&g).lookups, 1);
    s_lookup_answer(&g, r, 2);
    uint32_t gen = r->gen;
    cr_assert_eq(kvt_admit_try(g.ad, r, 20), KVT_ADMIT_LOADING);
    //  Decided and committed, but the coordinator moves the request.
    cr_assert_eq(r->state, R_WAITING, "the admission never changes r->state");
    cr_assert_eq(kvt_reqtab_head(g.rt, KVT_RQ_WAITING), 0, "nor the lists");
    cr_assert_eq(r->gen, gen + 1);
    //  One load, KV only: [0, 512) from the tier, no state op, no joint.
    kvt_planbuf_counts_t pc = s_counts(&g);
    cr_assert_eq(pc.loads, 1);
    cr_assert_eq(pc.state, 0, "a dense load has no state leg");
    cr_assert_eq(r->joint_src, KVT_JOINT_NONE);
    cr_assert_eq(r->load.legs, S_LEG_KV, "the load tracker recorded what the admission decided");
    cr_assert_eq(r->load.floor, 0);
    cr_assert_eq(r->load.end, 512);
    cr_assert_eq(r->nblocks, (600 + S_BS - 1) / S_BS);
    kvt_sched_stats_t st;
    memset(&st, 0, sizeof st);
    kvt_admit_stats(g.ad, &st);
    cr_assert_eq(st.state_loads, 0);
    cr_assert_eq(st.state_resumes, 0, "a dense admission pays no state tax");
    char err[128];
    cr_assert_eq(kvt_admit_check(g.ad, err, sizeof err), 0, "%s", err);
    s_unrig(&g);
}

Test(admit_decision, a_dense_request_without_a_tier_hit_runs_from_its_hbm_hit_unmoved)
{
    s_rig_t g;
    s_rig(&g);
    kvt_sreq_t *r = s_waiting(&g, 8, 600);
    cr_assert_eq(kvt_admit_try(g.ad, r, 0), KVT_ADMIT_LOOKUP);
    s_lookup_answer(&g, r, 0);
    cr_assert_eq(kvt_admit_try(g.ad, r, 20), KVT_ADMIT_RUNNING);
    cr_assert_eq(r->state, R_WAITING, "the admission never changes r->state");
    cr_assert_eq(s_counts(&g).loads, 0);
    cr_assert_eq(r->computed, 0);
    s_unrig(&g);
}

//  The one path keeps the dense order: a dense request learns its tier hit
//  before its fit (its demand depends on whether it loads), and a fit that
//  fails waits with the demand kept (B1).
Test(admit_decision,
     a_dense_request_that_does_not_fit_asks_its_lookup_first_then_waits_with_its_demand)
{
    s_rig_t g;
    s_rig(&g);
    uint32_t taken[30];
    cr_assert_eq(kvt_blockmgr_alloc(g.bm, 30, taken), 0); //  34 of 64 blocks left, 38 needed
    kvt_sreq_t *r = s_waiting(&g, 9, 600);
    cr_assert_eq(kvt_admit_try(g.ad, r, 0), KVT_ADMIT_LOOKUP);
    s_lookup_answer(&g, r, 2);
    cr_assert_eq(kvt_admit_try(g.ad, r, 20), KVT_ADMIT_WAIT);
    cr_assert_eq(r->adm.probe_demand, 38, "the demand travels with the probe (B1)");
    cr_assert_eq(r->nblocks, 0, "nothing committed");
    cr_assert_eq(kvt_blockmgr_in_use(g.bm), 30);
    kvt_admit_requeued(g.ad, r);
    cr_assert_eq(r->adm.probe_demand, 0);
    for (uint32_t i = 0; i < 30; i++)
        kvt_blockmgr_unref(g.bm, taken[i]);
    s_unrig(&g);
}
