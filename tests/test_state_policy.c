/*  State policies (issue 15 §3, §4): which checkpoints a hybrid model takes
    (kvt_sched_cfg_t.state_policy) and which HBM checkpoint goes first when
    bytes run short (kvt_ckpt_order_t). The orders are driven on the
    checkpoint pool directly; the sources through the scheduler core's
    public API (the rig), on one scenario whose expected takes and resumes
    are worked out by hand for each policy. */
#include <criterion/criterion.h>

#include "actors/scheduler/kvt_ckpt.h"
#include "common/kvt_test_sched_rig.h"

static kvt_hash_t H(uint64_t x)
{
    kvt_hash_t h = {x * 13 + 5, x};
    return h;
}

//  Reserves and commits a checkpoint of H(x) at boundary `at`, taken by a
//  request whose previous checkpoint was `from`; returns its entry.
static uint32_t take(kvt_ckpt_t *c, uint64_t x, uint32_t from, uint32_t at)
{
    uint32_t e = kvt_ckpt_reserve(c, H(x));
    cr_assert_neq(e, KVT_CKPT_NONE, "reserve of %llu refused", (unsigned long long)x);
    kvt_ckpt_set_span(c, e, from, at);
    kvt_ckpt_commit(c, e);
    return e;
}

//  A restore reads the checkpoint of H(x) (pin, count, unpin).
static void restore(kvt_ckpt_t *c, uint64_t x)
{
    uint32_t e = kvt_ckpt_pin(c, H(x));
    cr_assert_neq(e, KVT_CKPT_NONE);
    kvt_ckpt_count_restore(c, e);
    kvt_ckpt_unpin(c, e);
}

static kvt_ckpt_t *s_pool(uint32_t n, kvt_ckpt_order_t order)
{
    kvt_ckpt_t *c = kvt_ckpt_new(1, n);
    cr_assert_not_null(c);
    kvt_ckpt_set_order(c, order, 1u << 20, 64);
    return c;
}

//  ckpt.evicted_unsaved counts an eviction of a checkpoint no save lease
//  read (its image never left HBM), not one a save's lease pinned once.
Test(state_policy, an_eviction_before_any_save_read_the_checkpoint_is_counted_unsaved)
{
    kvt_ckpt_t *c = s_pool(1, KVT_CKPT_ORDER_LRU);
    uint32_t e = take(c, 1, 0, 64);
    kvt_ckpt_pin_entry(c, e); //  a save lease reads its image
    kvt_ckpt_unpin(c, e);
    take(c, 2, 0, 64); //  evicts H(1): saved
    take(c, 3, 0, 64); //  evicts H(2): never saved
    kvt_ckpt_stats_t st;
    kvt_ckpt_stats(c, &st);
    cr_assert_eq(st.evicted, 2);
    cr_assert_eq(st.evicted_unsaved, 1);
    kvt_ckpt_destroy(&c);
}

// ------------------------------------------------------------- orders ----

Test(state_policy, each_policy_has_its_eviction_order)
{
    cr_assert_eq(kvt_ckpt_order_of(KVT_STATE_POLICY_KVTIER, false), KVT_CKPT_ORDER_LRU);
    cr_assert_eq(kvt_ckpt_order_of(KVT_STATE_POLICY_KVTIER, true), KVT_CKPT_ORDER_VALUE);
    for (int v = 0; v < 2; v++) {
        cr_assert_eq(kvt_ckpt_order_of(KVT_STATE_POLICY_INTERVAL, v), KVT_CKPT_ORDER_LRU);
        cr_assert_eq(kvt_ckpt_order_of(KVT_STATE_POLICY_EVERY_CHUNK, v), KVT_CKPT_ORDER_LRU);
        cr_assert_eq(kvt_ckpt_order_of(KVT_STATE_POLICY_MARCONI, v), KVT_CKPT_ORDER_MARCONI);
    }
}

//  The value rule: a shallow checkpoint saves less recompute than a deep
//  one, so it goes first although the deep one is older. LRU takes the
//  oldest instead (the same operations).
Test(state_policy, the_value_order_evicts_the_checkpoint_that_saves_least)
{
    for (int lru = 0; lru < 2; lru++) {
        kvt_ckpt_t *c = s_pool(3, lru ? KVT_CKPT_ORDER_LRU : KVT_CKPT_ORDER_VALUE);
        take(c, 1, 0, 1024);
        take(c, 2, 1024, 2048);
        take(c, 3, 0, 256);
        cr_assert_gt(kvt_ckpt_value(c, kvt_ckpt_find(c, H(1))),
                     kvt_ckpt_value(c, kvt_ckpt_find(c, H(3))));
        take(c, 4, 0, 512);
        kvt_ckpt_stats_t st;
        kvt_ckpt_stats(c, &st);
        cr_assert_eq(st.evicted, 1);
        if (lru) {
            cr_assert_not(kvt_ckpt_has(c, H(1)), "LRU: the oldest goes");
            cr_assert(kvt_ckpt_has(c, H(3)));
            cr_assert_eq(st.evicted_by_value, 0);
        } else {
            cr_assert_not(kvt_ckpt_has(c, H(3)), "value: the 256-token one goes");
            cr_assert(kvt_ckpt_has(c, H(1)) && kvt_ckpt_has(c, H(2)));
            cr_assert_eq(st.evicted_by_value, 1, "not the least recently used");
        }
        kvt_ckpt_destroy(&c);
    }
}

//  Restores count: a checkpoint restored three times outweighs a deeper
//  one never restored.
Test(state_policy, restores_protect_a_checkpoint_in_the_value_order)
{
    kvt_ckpt_t *c = s_pool(3, KVT_CKPT_ORDER_VALUE);
    take(c, 1, 0, 1024);
    take(c, 2, 0, 2048);
    take(c, 3, 0, 4096);
    for (int i = 0; i < 3; i++)
        restore(c, 1);
    cr_assert_gt(kvt_ckpt_value(c, kvt_ckpt_find(c, H(1))),
                 kvt_ckpt_value(c, kvt_ckpt_find(c, H(2))));
    take(c, 4, 0, 8192);
    cr_assert(kvt_ckpt_has(c, H(1)), "restored three times: kept");
    cr_assert_not(kvt_ckpt_has(c, H(2)), "the 2048-token one, never restored, goes");
    kvt_ckpt_destroy(&c);
}

//  GDSF's inflation: each eviction raises L to the evicted priority, so a
//  valuable checkpoint nobody uses again goes once enough cheaper ones went
//  after it — never in the first rounds, always within a bound.
Test(state_policy, an_unused_valuable_checkpoint_ages_out_of_the_value_order)
{
    kvt_ckpt_t *c = s_pool(2, KVT_CKPT_ORDER_VALUE);
    take(c, 1, 0, 8192);
    uint32_t gone_at = 0;
    for (uint32_t i = 2; i < 200 && !gone_at; i++) {
        take(c, i, 0, 256);
        if (!kvt_ckpt_has(c, H(1)))
            gone_at = i;
    }
    cr_assert_gt(gone_at, 10, "kept while it is worth more than the churn (%u)", gone_at);
    cr_assert_neq(gone_at, 0, "aged out within 200 takes");
    kvt_ckpt_destroy(&c);
}

//  A checkpoint whose KV left HBM is worthless and goes first, whatever
//  its value.
Test(state_policy, a_checkpoint_whose_kv_left_goes_first_in_the_value_order)
{
    kvt_ckpt_t *c = s_pool(2, KVT_CKPT_ORDER_VALUE);
    take(c, 1, 0, 8192);
    take(c, 2, 0, 256);
    kvt_ckpt_kv_gone(c, H(1));
    take(c, 3, 0, 512);
    cr_assert_not(kvt_ckpt_has(c, H(1)));
    cr_assert(kvt_ckpt_has(c, H(2)));
    kvt_ckpt_stats_t st;
    kvt_ckpt_stats(c, &st);
    cr_assert_eq(st.evicted_gone, 1);
    //  A restore brings it back to the value order: the pins and the heap
    //  stay consistent through pin, gone, revive and unpin.
    take(c, 4, 0, 1024);
    uint32_t e = kvt_ckpt_pin(c, H(4));
    kvt_ckpt_kv_gone(c, H(4));
    kvt_ckpt_unpin(c, e);
    cr_assert_eq(kvt_ckpt_evictable(c), 2);
    take(c, 5, 0, 4096);
    cr_assert_not(kvt_ckpt_has(c, H(4)), "gone while pinned: first once unpinned");
    kvt_ckpt_destroy(&c);
}

//  Marconi's utility over the least recently used: normalised recency +
//  FLOP efficiency. The middle one adds 16 tokens on its branch (low
//  efficiency: the state's bytes for little recompute) and goes, not the
//  oldest (which adds 1024).
Test(state_policy, marconi_evicts_the_least_flop_efficient_of_the_oldest)
{
    for (int lru = 0; lru < 2; lru++) {
        kvt_ckpt_t *c = s_pool(3, lru ? KVT_CKPT_ORDER_LRU : KVT_CKPT_ORDER_MARCONI);
        take(c, 1, 0, 1024);
        take(c, 2, 1024, 1040);
        take(c, 3, 2048, 3072);
        take(c, 4, 0, 512);
        cr_assert(kvt_ckpt_has(c, H(3)));
        if (lru)
            cr_assert_not(kvt_ckpt_has(c, H(1)), "LRU: the oldest");
        else
            cr_assert(kvt_ckpt_has(c, H(1)) && !kvt_ckpt_has(c, H(2)), "Marconi: the 16-token");
        kvt_ckpt_destroy(&c);
    }
}

// ------------------------------------------------------------ sources ----

typedef struct {
    uint64_t grid, branch, prompt_end, decode_keep; //  ckpt.taken.*
    uint32_t third_hit;                             //  the third request's HBM resume
} outcome_t;

//  A hybrid core of blocks of 16 and chunks of 64 tokens, a checkpoint grid
//  of `interval`, under `policy`.
static void s_rig(rig_t *r, kvt_sched_state_policy_t policy, uint32_t interval)
{
    kvt_sched_cfg_t cfg = hybrid_cfg(16, 64, interval, 64, 0);
    cfg.state_policy = policy;
    rig_init_cfg(r, &cfg);
}

//  Three 200-token prompts (s_rig): the second and third share the first
//  128 tokens of the first and leave it there.
static outcome_t s_scenario(kvt_sched_state_policy_t policy, uint32_t interval)
{
    rig_t r;
    s_rig(&r, policy, interval);
    uint32_t t[200];
    for (uint32_t i = 0; i < 200; i++)
        t[i] = 100 + i;
    rig_arrive_tokens(&r, 1, t, 200, 1);
    rig_run(&r, 100);
    for (uint32_t i = 128; i < 200; i++)
        t[i] = 5000 + i;
    rig_arrive_tokens(&r, 2, t, 200, 1);
    rig_run(&r, 100);
    for (uint32_t i = 128; i < 200; i++)
        t[i] = 9000 + i;
    r.admit_hbm = 0;
    rig_arrive_tokens(&r, 3, t, 200, 1);
    rig_run(&r, 100);
    outcome_t o = {counter(&r, "ckpt.taken.grid"), counter(&r, "ckpt.taken.branch"),
                   counter(&r, "ckpt.taken.prompt_end"), counter(&r, "ckpt.taken.decode_keep"),
                   r.admit_hbm};
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
    return o;
}

//  kvtier: prompt ends (192 each) and the branch at 128 the second prompt
//  leaves, where the third resumes.
Test(state_policy, kvtier_takes_prompt_ends_and_the_branch_and_the_third_resumes_there)
{
    outcome_t o = s_scenario(KVT_STATE_POLICY_KVTIER, 1024);
    cr_assert_eq(o.grid, 0);
    cr_assert_eq(o.branch, 1);
    cr_assert_eq(o.prompt_end, 3);
    cr_assert_eq(o.third_hit, 128);
}

//  interval: the same without the branch, so the third recomputes.
Test(state_policy, interval_takes_no_branch_and_the_third_recomputes)
{
    outcome_t o = s_scenario(KVT_STATE_POLICY_INTERVAL, 1024);
    cr_assert_eq(o.branch, 0);
    cr_assert_eq(o.prompt_end, 3);
    cr_assert_eq(o.third_hit, 0, "no checkpoint at or below its 128-token KV hit");
}

//  every-chunk: every chunk boundary (64, 128, 192 for the first, 192 for
//  each other), whatever the grid, and no other source.
Test(state_policy, every_chunk_takes_every_chunk_boundary_and_nothing_else)
{
    outcome_t o = s_scenario(KVT_STATE_POLICY_EVERY_CHUNK, 1024);
    cr_assert_eq(o.grid, 5);
    cr_assert_eq(o.branch + o.prompt_end + o.decode_keep, 0);
    cr_assert_eq(o.third_hit, 128, "the first's checkpoint at 128");
}

//  every-chunk: a 216-token prompt ends off the chunk grid (at 208 on the
//  block grid): only the chunk boundaries 64, 128, 192 are taken; kvtier
//  takes the end too.
Test(state_policy, every_chunk_takes_no_prompt_end_off_the_chunk_grid)
{
    for (int p = 0; p < 2; p++) {
        rig_t r;
        s_rig(&r, p ? KVT_STATE_POLICY_KVTIER : KVT_STATE_POLICY_EVERY_CHUNK, 1024);
        rig_arrive(&r, 1, 216, 100, 1);
        rig_run(&r, 100);
        if (p) {
            cr_assert_eq(counter(&r, "ckpt.taken.prompt_end"), 2, "kvtier: 192 and 208");
        } else {
            cr_assert_eq(counter(&r, "ckpt.taken.grid"), 3);
            cr_assert_eq(counter(&r, "ckpt.taken.prompt_end"), 0);
        }
        kvt_sched_destroy(&r.s);
    }
}

//  marconi: no grid even where one is set; branch points and prompt ends.
Test(state_policy, marconi_takes_no_grid_checkpoint_but_branches_and_prompt_ends)
{
    outcome_t k = s_scenario(KVT_STATE_POLICY_KVTIER, 64);
    cr_assert_eq(k.grid, 5, "kvtier on a 64-token grid: 64, 128, 192 and two 192s");
    outcome_t o = s_scenario(KVT_STATE_POLICY_MARCONI, 64);
    cr_assert_eq(o.grid, 0);
    cr_assert_eq(o.branch, 1);
    cr_assert_eq(o.prompt_end, 3);
    cr_assert_eq(o.third_hit, 128);
}

// ------------------------------------------------------ adaptive grid ----

//  kvtier with grid_share_pct: one 1536-token prompt (96 blocks of 16, a
//  64-token chunk and grid) and `units` HBM checkpoints (its prompt end,
//  1536, is on every grid below 1024, where it counts as the grid's).
//  Returns the grid checkpoints taken and the last plan's interval.
static uint64_t s_grid_takes(uint32_t share, uint32_t units, uint64_t *iv)
{
    rig_t r;
    kvt_sched_cfg_t cfg = hybrid_cfg(16, 64, 64, 128, 0);
    cfg.state_policy = KVT_STATE_POLICY_KVTIER;
    cfg.hbm_checkpoints = units;
    cfg.grid_share_pct = share;
    rig_init_cfg(&r, &cfg);
    rig_arrive(&r, 1, 1536, 100, 1);
    rig_run(&r, 100);
    uint64_t n = counter(&r, "ckpt.taken.grid");
    *iv = counter(&r, "sched.grid_interval");
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
    return n;
}

//  The grid is checkpoint_interval while the prompts' checkpoints fit in
//  the share of the units, and doubles (up to 16 chunks) while they do not:
//  at 100 % of 16 units, 1536 / 64 = 24 checkpoints do not fit, 1536 / 128
//  = 12 do; at 100 % of 4, 1536 / 512 = 3 fit; at 1 % of 4 none would, and
//  the grid stops at 16 chunks (1024: one checkpoint). 0: the fixed grid.
Test(state_policy, the_kvtier_grid_thins_as_the_hbm_budget_fills)
{
    uint64_t iv;
    cr_assert_eq(s_grid_takes(0, 4, &iv), 24, "the fixed grid");
    cr_assert_eq(iv, 0);
    cr_assert_eq(s_grid_takes(100, 64, &iv), 24, "room: the grid stays every chunk");
    cr_assert_eq(iv, 64);
    cr_assert_eq(s_grid_takes(100, 16, &iv), 12);
    cr_assert_eq(iv, 128);
    cr_assert_eq(s_grid_takes(100, 4, &iv), 3);
    cr_assert_eq(iv, 512);
    //  Exactly at the share (1536 / 384 = 4 of 4 units would fit; the
    //  interval is a power of two of chunks, so 512 stays).
    cr_assert_eq(s_grid_takes(75, 4, &iv), 3, "1536 / 512 = 3 = 75 %% of 4");
    cr_assert_eq(iv, 512, "at the share exactly, no thinner");
    cr_assert_eq(s_grid_takes(1, 4, &iv), 1);
    cr_assert_eq(iv, 1024, "16 chunks at most");
}

//  The tier's images count among the checkpoints the grid may fill: one
//  HBM budget of 256 blocks of 64 KiB (16 per 1 MiB state; 4 slots leave
//  12 checkpoint units) and a tier of 48 chunks of 256 KiB (12 images).
static uint64_t s_grid_takes_tier(uint32_t tier_chunks, bool no_state_tier)
{
    rig_t r;
    kvt_sched_cfg_t cfg = hybrid_cfg(16, 64, 64, 256, tier_chunks);
    cfg.state_policy = KVT_STATE_POLICY_KVTIER;
    cfg.block_bytes = 64u << 10;
    cfg.grid_share_pct = 100;
    cfg.no_state_tier = no_state_tier;
    rig_init_cfg(&r, &cfg);
    rig_arrive(&r, 1, 1536, 100, 1);
    rig_run(&r, 200);
    uint64_t n = counter(&r, "ckpt.taken.grid");
    kvt_sched_destroy(&r.s);
    return n;
}

Test(state_policy, the_tiers_images_give_the_kvtier_grid_room)
{
    cr_assert_eq(s_grid_takes_tier(0, false), 12, "12 HBM units: every 128 tokens");
    cr_assert_eq(s_grid_takes_tier(48, false), 24, "12 + 12 image units: every chunk");
    cr_assert_eq(s_grid_takes_tier(48, true), 12, "images stay out of the tier: HBM alone");
}

//  Only kvtier's grid adapts: interval keeps its fixed grid, and so does
//  kvtier with grid checkpoints only.
Test(state_policy, the_interval_policy_keeps_its_fixed_grid)
{
    rig_t r;
    kvt_sched_cfg_t cfg = hybrid_cfg(16, 64, 64, 128, 0);
    cfg.state_policy = KVT_STATE_POLICY_INTERVAL;
    cfg.hbm_checkpoints = 4;
    cfg.grid_share_pct = 1;
    rig_init_cfg(&r, &cfg);
    rig_arrive(&r, 1, 1536, 100, 1);
    rig_run(&r, 100);
    cr_assert_eq(counter(&r, "ckpt.taken.grid"), 24);
    cr_assert_eq(counter(&r, "sched.grid_interval"), 0);
    kvt_sched_destroy(&r.s);
    //  Nor does kvtier's with grid checkpoints only (--checkpoints interval:
    //  the grid it names).
    cfg.state_policy = KVT_STATE_POLICY_KVTIER;
    cfg.interval_checkpoints = true;
    rig_init_cfg(&r, &cfg);
    rig_arrive(&r, 1, 1536, 100, 1);
    rig_run(&r, 100);
    cr_assert_eq(counter(&r, "ckpt.taken.grid"), 24);
    cr_assert_eq(counter(&r, "sched.grid_thinned"), 0);
    kvt_sched_destroy(&r.s);
}

//  s_rig under marconi with room for three HBM checkpoints (the KV stays
//  in HBM: 64 blocks).
static void s_marconi3(rig_t *r)
{
    kvt_sched_cfg_t cfg = hybrid_cfg(16, 64, 1024, 64, 0);
    cfg.state_policy = KVT_STATE_POLICY_MARCONI;
    cfg.hbm_checkpoints = 3;
    rig_init_cfg(r, &cfg);
}

//  The span the scheduler gives a request's second checkpoint starts at
//  its first: a 216-token prompt takes 192 (span 192) and 208 (span 16);
//  a 128-token prompt fills the pool, the next one evicts. Marconi's
//  utility (recency + FLOP efficiency) takes the 16-token one at 208, not
//  the older one at 192: the prompt again resumes at 192. Spanned from the
//  admission instead (208 tokens), the one at 192 would go.
Test(state_policy, marconi_spans_a_second_checkpoint_from_the_first)
{
    rig_t r;
    s_marconi3(&r);
    rig_arrive(&r, 1, 216, 100, 1);
    rig_run(&r, 100);
    cr_assert_eq(counter(&r, "ckpt.taken.prompt_end"), 2, "192 and 208");
    rig_arrive(&r, 2, 128, 20000, 1);
    rig_run(&r, 100);
    rig_arrive(&r, 3, 128, 30000, 1);
    rig_run(&r, 100);
    cr_assert_eq(counter(&r, "ckpt.evicted"), 1);
    cr_assert_eq(counter(&r, "ckpt.evicted_by_value"), 1, "not the least recently used");
    r.admit_hbm = 0;
    rig_arrive(&r, 4, 216, 100, 1);
    rig_run(&r, 100);
    cr_assert_eq(r.admit_hbm, 192, "the checkpoint at 208 went");
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  A resumed request's checkpoint spans from its resume point: the second
//  prompt extends the first's 128 tokens by 16, resumes at 128 and takes
//  144 (span 16, not 144). With two 128-token checkpoints beside it, the
//  16-token one is the least efficient and goes: the second prompt again
//  resumes at 128. Spanned from 0 it would be the most efficient, and the
//  first's checkpoint at 128 would go.
Test(state_policy, marconi_spans_a_resumed_request_from_its_resume_point)
{
    rig_t r;
    s_marconi3(&r);
    rig_arrive(&r, 1, 128, 100, 1);
    rig_run(&r, 100);
    r.admit_hbm = 0;
    rig_arrive(&r, 2, 144, 100, 1);
    rig_run(&r, 100);
    cr_assert_eq(r.admit_hbm, 128, "resumed at the first's checkpoint");
    rig_arrive(&r, 3, 128, 20000, 1);
    rig_run(&r, 100);
    rig_arrive(&r, 4, 128, 30000, 1);
    rig_run(&r, 100);
    cr_assert_eq(counter(&r, "ckpt.evicted"), 1);
    r.admit_hbm = 0;
    rig_arrive(&r, 5, 144, 100, 1);
    rig_run(&r, 100);
    cr_assert_eq(r.admit_hbm, 128, "the checkpoint at 144 went, the one at 128 stayed");
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  A request admitted loading (joint_setup: request 13 has a 20-token HBM
//  hit and loads [16, 32) with its state at 32 from the tier) spans its
//  next checkpoint from the load's end, where its state will be.
Test(state_policy, a_loading_request_spans_its_next_checkpoint_from_the_load_end)
{
    rig_t r;
    joint_setup(&r, 24, 80);
    rig_arrive(&r, 13, 36, P_BASE, 1);
    cr_assert_eq(rig_step(&r), 1);
    kvt_sched_req_info_t info;
    cr_assert_eq(kvt_sched_req_info(r.s, 13, &info), 0);
    cr_assert_eq(info.state, 2, "loading");
    cr_assert_eq(info.load_end, 32);
    cr_assert_eq(info.ck_from, 32);
    rig_deliver(&r);
    rig_run(&r, 100);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(state_policy, a_policy_out_of_range_is_refused_naming_it)
{
    kvt_sched_cfg_t cfg = hybrid_cfg(16, 64, 64, 64, 0);
    cfg.state_policy = KVT_STATE_POLICIES;
    char err[256] = "";
    cr_assert_null(kvt_sched_new(&cfg, err, sizeof err));
    cr_assert_not_null(strstr(err, "state_policy"), "%s", err);
}
