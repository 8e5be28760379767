/*  One HBM byte budget (issue 15 §1): KV blocks and HBM checkpoints share
    the blocks left after the state slots, and one rule picks what goes
    when bytes run short. The rule is driven on the two leaves wired as the
    coordinator wires them (block manager + checkpoint pool); the budget is
    driven through the public core API (kvtier/kvt_sched.h) and through the
    replay's split that the ranks' devices use. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "actors/scheduler/kvt_blockmgr.h"
#include "actors/scheduler/kvt_ckpt.h"
#include "base/kvt_namespace.h"
#include "kvtier/kvt_sched.h"
#include "replay/kvt_replay.h"

static kvt_hash_t H(uint64_t x)
{
    kvt_hash_t h = {x * 13 + 5, x};
    return h;
}

// ------------------------------------------------ the rule, on leaves ----

//  The two leaves wired as kvt_sched.c wires them: each checkpoint
//  withholds `per` blocks.
typedef struct {
    kvt_blockmgr_t *bm; //  the blocks
    kvt_ckpt_t *ck;     //  the checkpoints
    uint32_t per;       //  blocks per checkpoint
} pair_t;

static bool p_victim(void *a, uint64_t *stamp, bool *gone)
{
    return kvt_ckpt_victim(((pair_t *)a)->ck, stamp, gone);
}

static void p_evict(void *a)
{
    kvt_ckpt_evict_one(((pair_t *)a)->ck);
}

static uint32_t p_evictable(void *a)
{
    pair_t *p = a;
    return kvt_ckpt_evictable(p->ck) * p->per;
}

static void p_gone(void *a, kvt_hash_t h)
{
    kvt_ckpt_kv_gone(((pair_t *)a)->ck, h);
}

static uint64_t p_tick(void *a)
{
    return kvt_blockmgr_tick(((pair_t *)a)->bm);
}

static void p_release(void *a, uint32_t e)
{
    (void)e;
    pair_t *p = a;
    kvt_blockmgr_unwithhold(p->bm, p->per);
}

static void pair_new(pair_t *p, uint32_t nblocks, uint32_t per)
{
    p->bm = kvt_blockmgr_new(nblocks, 4);
    p->ck = kvt_ckpt_new(1, nblocks / per);
    p->per = per;
    cr_assert(p->bm && p->ck);
    kvt_ckpt_share(p->ck, p_tick, p_release, p);
    kvt_blockmgr_peer_t peer = {p_victim, p_evict, p_evictable, p_gone, p};
    kvt_blockmgr_set_peer(p->bm, &peer);
}

static void pair_destroy(pair_t *p)
{
    kvt_ckpt_destroy(&p->ck);
    kvt_blockmgr_destroy(&p->bm);
}

//  A cached block of hash H(x), released (young end of its LRU).
static uint32_t cached(pair_t *p, uint64_t x, bool low)
{
    uint32_t b, tok[4] = {(uint32_t)x, 1, 2, 3};
    cr_assert_eq(kvt_blockmgr_alloc(p->bm, 1, &b), 0);
    cr_assert_eq(kvt_blockmgr_register(p->bm, b, H(x), tok), 0);
    if (low)
        kvt_blockmgr_unref_low(p->bm, b);
    else
        kvt_blockmgr_unref(p->bm, b);
    return b;
}

static bool resident(pair_t *p, uint64_t x)
{
    uint32_t b, tok[4] = {(uint32_t)x, 1, 2, 3};
    kvt_hash_t h = H(x);
    return kvt_blockmgr_match(p->bm, &h, tok, 1, &b) == 1;
}

//  A valid checkpoint of H(x), its blocks withheld first.
static void ckpt(pair_t *p, uint64_t x)
{
    cr_assert_eq(kvt_blockmgr_withhold(p->bm, p->per), 0);
    uint32_t e = kvt_ckpt_reserve(p->ck, H(x));
    cr_assert_neq(e, KVT_CKPT_NONE);
    kvt_ckpt_commit(p->ck, e);
}

//  n private blocks (held: they leave nothing to evict).
static void grab(pair_t *p, uint32_t n)
{
    uint32_t b[64];
    cr_assert_eq(kvt_blockmgr_alloc(p->bm, n, b), 0, "%u blocks", n);
}

Test(hbm_budget, rule_a_checkpoint_withholds_blocks_from_kv_and_gives_them_back)
{
    pair_t p;
    pair_new(&p, 8, 3);
    cr_assert_eq(kvt_blockmgr_available(p.bm), 8);
    ckpt(&p, 1);
    kvt_blockmgr_stats_t st;
    kvt_blockmgr_stats(p.bm, &st);
    cr_assert_eq(st.withheld, 3, "a checkpoint takes its bytes from KV");
    //  Its blocks still count as available: an allocation may evict it.
    cr_assert_eq(kvt_blockmgr_available(p.bm), 8);
    grab(&p, 7);
    cr_assert_not(kvt_ckpt_has(p.ck, H(1)), "KV needed the checkpoint's bytes");
    kvt_blockmgr_stats(p.bm, &st);
    cr_assert_eq(st.withheld, 0, "an evicted checkpoint gives its blocks back");
    cr_assert_eq(st.peer_evictions, 1);
    cr_assert_eq(kvt_blockmgr_available(p.bm), 1);
    pair_destroy(&p);
}

Test(hbm_budget, rule_a_checkpoint_whose_kv_left_hbm_goes_first)
{
    pair_t p;
    pair_new(&p, 8, 2);
    cached(&p, 1, false); //  the oldest block
    cached(&p, 2, false);
    cached(&p, 3, false);
    ckpt(&p, 1); //  younger than every block
    grab(&p, 3); //  the 3 free blocks: nothing evicted yet
    cr_assert(resident(&p, 1));
    grab(&p, 1); //  evicts H(1)'s block, the oldest: the checkpoint there is worthless
    cr_assert_not(resident(&p, 1));
    cr_assert(kvt_ckpt_has(p.ck, H(1)));
    grab(&p, 1); //  the worthless checkpoint goes before the older block H(2)
    cr_assert_not(kvt_ckpt_has(p.ck, H(1)), "a checkpoint without its KV goes first");
    cr_assert(resident(&p, 2), "the older block stays while a worthless checkpoint is held");
    kvt_ckpt_stats_t cs;
    kvt_ckpt_stats(p.ck, &cs);
    cr_assert_eq(cs.evicted_gone, 1);
    pair_destroy(&p);
}

Test(hbm_budget, rule_a_take_of_a_worthless_checkpoint_makes_it_worth_keeping_again)
{
    pair_t p;
    pair_new(&p, 8, 2);
    cached(&p, 1, false);
    cached(&p, 2, false);
    ckpt(&p, 1);
    grab(&p, 4);
    grab(&p, 1); //  evicts H(1): its checkpoint is worthless
    cr_assert_eq(kvt_ckpt_reserve(p.ck, H(1)), KVT_CKPT_NONE, "a take refreshes it");
    grab(&p, 1); //  now the block H(2), older than the refreshed checkpoint
    cr_assert(kvt_ckpt_has(p.ck, H(1)));
    cr_assert_not(resident(&p, 2));
    pair_destroy(&p);
}

Test(hbm_budget, rule_a_block_above_the_last_checkpoint_goes_before_older_blocks)
{
    pair_t p;
    pair_new(&p, 4, 2);
    cached(&p, 1, false);
    cached(&p, 2, true); //  younger, but above its request's last checkpoint
    grab(&p, 2);
    grab(&p, 1);
    cr_assert_not(resident(&p, 2), "the low block goes first");
    cr_assert(resident(&p, 1));
    kvt_blockmgr_stats_t st;
    kvt_blockmgr_stats(p.bm, &st);
    cr_assert_eq(st.evicted_low, 1);
    //  A low block referenced again leaves the low LRU.
    pair_destroy(&p);
}

Test(hbm_budget, rule_blocks_and_checkpoints_share_one_recency_order)
{
    pair_t p;
    pair_new(&p, 6, 2);
    cached(&p, 1, false); //  stamp 1
    ckpt(&p, 9);          //  stamp 2
    cached(&p, 2, false); //  stamp 3
    grab(&p, 2);          //  the free blocks
    grab(&p, 1);          //  oldest of all: block H(1)
    cr_assert_not(resident(&p, 1));
    cr_assert(kvt_ckpt_has(p.ck, H(9)));
    grab(&p, 1); //  the checkpoint is older than block H(2)
    cr_assert_not(kvt_ckpt_has(p.ck, H(9)), "the older of the two heads goes");
    cr_assert(resident(&p, 2));
    pair_destroy(&p);
}

Test(hbm_budget, a_pinned_checkpoint_is_not_counted_and_never_evicted)
{
    pair_t p;
    pair_new(&p, 4, 2);
    ckpt(&p, 1);
    uint32_t e = kvt_ckpt_pin(p.ck, H(1));
    cr_assert_eq(kvt_blockmgr_available(p.bm), 2);
    uint32_t b[4];
    cr_assert_eq(kvt_blockmgr_alloc(p.bm, 3, b), -1, "a pinned checkpoint's blocks are held");
    cr_assert_eq(kvt_blockmgr_withhold(p.bm, 3), -1);
    kvt_ckpt_unpin(p.ck, e);
    cr_assert_eq(kvt_blockmgr_available(p.bm), 4);
    pair_destroy(&p);
}

// ---------------------------------------------- the budget, in the core ----

static uint64_t counter(kvt_sched_t *s, const char *name)
{
    static kvt_counter_t c[256];
    uint32_t n = 0;
    kvt_sched_counters(s, c, &n, 256);
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(c[i].name, name) == 0)
            return c[i].value;
    cr_assert_fail("no counter %s", name);
    return 0;
}

//  Steps the core until idle, every step ok (no tier: nothing to report).
static void run_idle(kvt_sched_t *s, uint64_t *step)
{
    kvt_step_plan_t plan;
    for (int i = 0; i < 400; i++) {
        int rc = kvt_sched_plan(s, ++*step, false, &plan);
        cr_assert_geq(rc, 0);
        char err[256];
        cr_assert_eq(kvt_sched_audit(s, err, sizeof err), 0, "%s", err);
        if (plan.idle)
            return;
    }
    cr_assert_fail("not idle");
}

static void arrive(kvt_sched_t *s, uint64_t id, uint32_t n, uint32_t base)
{
    uint32_t *t = malloc(n * sizeof *t);
    for (uint32_t i = 0; i < n; i++)
        t[i] = base + i;
    kvt_arrival_t a = {.req = id, .tokens = t, .ntokens = n, .max_new_tokens = 1};
    cr_assert_eq(kvt_sched_arrive(s, &a), 0);
    free(t);
}

//  4-token blocks of 100 bytes, 16-token chunks, a state of 150 bytes (2
//  blocks), 2 slots, a 40-block budget: 4 blocks of slots, 36 shared.
static kvt_sched_t *budget_core_iv(uint32_t hbm_blocks, uint32_t max_running, bool interval,
                                   char *err, size_t n)
{
    kvt_sched_cfg_t cfg = {.block_size = 4,
                           .chunk_size = 16,
                           .hbm_blocks = hbm_blocks,
                           .max_running = max_running,
                           .step_tokens = 256,
                           .ns = kvt_namespace_hash("test_hbm_budget"),
                           .state_bytes = 150,
                           .checkpoint_interval = 16,
                           .interval_checkpoints = interval,
                           .block_bytes = 100};
    return kvt_sched_new(&cfg, err, n);
}

static kvt_sched_t *budget_core(uint32_t hbm_blocks, uint32_t max_running, char *err, size_t n)
{
    return budget_core_iv(hbm_blocks, max_running, false, err, n);
}

Test(hbm_budget, rule_the_slots_come_first_and_checkpoints_take_bytes_from_kv)
{
    char err[256];
    kvt_sched_t *s = budget_core(40, 2, err, sizeof err);
    cr_assert_not_null(s, "%s", err);
    cr_assert_eq(counter(s, "blocks.total"), 36, "the two slots' 4 blocks are reserved first");
    uint64_t step = 0;
    arrive(s, 1, 40, 1000);
    run_idle(s, &step);
    uint64_t valid = counter(s, "ckpt.valid");
    cr_assert_gt(valid, 0);
    cr_assert_eq(counter(s, "blocks.withheld"), 2 * valid, "each checkpoint holds 2 KV blocks");
    //  A request of 120 other tokens needs 30 of the 36 blocks: the older
    //  KV and checkpoints make room, by one rule.
    arrive(s, 2, 120, 50000);
    run_idle(s, &step);
    cr_assert_gt(counter(s, "blocks.peer_evictions"), 0, "KV took checkpoint bytes");
    cr_assert_eq(counter(s, "blocks.withheld"), 2 * counter(s, "ckpt.valid"));
    cr_assert_eq(counter(s, "sched.finished"), 2);
    kvt_sched_destroy(&s);
}

Test(hbm_budget, rule_a_resume_keeps_the_checkpoint_it_restores_through_its_allocation)
{
    char err[256];
    kvt_sched_t *s = budget_core(40, 2, err, sizeof err);
    cr_assert_not_null(s, "%s", err);
    uint64_t step = 0;
    arrive(s, 1, 40, 1000);
    run_idle(s, &step);
    //  The same 40-token prompt plus 80 more: its 30 blocks evict all but
    //  the shared prefix and the checkpoint it resumes from.
    arrive(s, 2, 120, 1000);
    run_idle(s, &step);
    cr_assert_gt(counter(s, "sched.state_restores"), 0, "it resumed from an HBM checkpoint");
    cr_assert_eq(counter(s, "sched.finished"), 2);
    kvt_sched_destroy(&s);
}

Test(hbm_budget, rule_a_request_whose_only_room_is_its_gate_checkpoint_resumes_from_zero)
{
    char err[256];
    kvt_sched_t *s = budget_core(40, 2, err, sizeof err);
    cr_assert_not_null(s, "%s", err);
    uint64_t step = 0;
    arrive(s, 1, 40, 1000);
    run_idle(s, &step);
    //  The same prompt grown to 144 tokens needs all 36 blocks: pinning its
    //  gate checkpoint at 40 would leave 34, so it resumes from 0.
    arrive(s, 2, 144, 1000);
    run_idle(s, &step);
    kvt_sched_stats_t st;
    kvt_sched_stats(s, &st);
    cr_assert_eq(st.finished, 2, "it ran (it did not wait for room that never comes)");
    cr_assert_eq(st.hbm_hit_tokens, 0, "from token 0");
    kvt_sched_destroy(&s);
}

Test(hbm_budget, rule_blocks_above_the_deepest_checkpoint_are_evicted_first)
{
    char err[256];
    //  Grid checkpoints only (16, 32): request 1's blocks [32, 40) lie above
    //  its deepest checkpoint.
    kvt_sched_t *s = budget_core_iv(40, 2, true, err, sizeof err);
    cr_assert_not_null(s, "%s", err);
    uint64_t step = 0;
    arrive(s, 1, 40, 1000);
    run_idle(s, &step);
    cr_assert_eq(counter(s, "ckpt.valid"), 2);
    //  30 blocks of other tokens: 22 are free, the next 8 come from the
    //  rule, the two low blocks first.
    arrive(s, 2, 120, 50000);
    run_idle(s, &step);
    cr_assert_eq(counter(s, "blocks.evicted_low"), 2);
    kvt_sched_destroy(&s);
}

Test(hbm_budget, rule_slots_that_do_not_fit_are_refused_naming_both_sizes)
{
    char err[256] = "";
    //  4 slots of 2 blocks leave 2 of 10 blocks: fewer than two chunks (8).
    kvt_sched_t *s = budget_core(10, 4, err, sizeof err);
    cr_assert_null(s);
    cr_assert(strstr(err, "1000 bytes"), "the pool's size: %s", err);
    cr_assert(strstr(err, "800 bytes"), "the slots' size: %s", err);
    s = budget_core(16, 4, err, sizeof err);
    cr_assert_not_null(s, "8 slot blocks + 8 of KV fit 16: %s", err);
    kvt_sched_destroy(&s);
}

Test(hbm_budget, the_replay_refuses_slots_that_do_not_fit_before_ranks_start)
{
    kvt_replay_cfg_t c;
    kvt_replay_defaults(&c);
    c.model = "qwen3-next-like";
    c.state_bytes = 205824;
    c.checkpoint_interval = 1024;
    c.byte_scale = 1;
    c.hbm_pool_bytes = 8ull << 20; //  64 slots of 206 KB do not fit 8 MiB
    c.cpu_pool_bytes = 32ull << 20;
    char err[512] = "";
    cr_assert_neq(kvt_replay_validate(&c, err, sizeof err), 0);
    cr_assert(strstr(err, "hbm-pool") && strstr(err, "8388608 bytes"), "%s", err);
    cr_assert(strstr(err, "64 state slots") && strstr(err, "13238272 bytes"), "%s", err);
    c.hbm_pool_bytes = 64ull << 20;
    cr_assert_eq(kvt_replay_validate(&c, err, sizeof err), 0, "%s", err);
}

Test(hbm_budget, the_ranks_and_the_scheduler_split_the_budget_alike)
{
    kvt_replay_cfg_t c;
    kvt_replay_defaults(&c);
    c.state_bytes = 205824;
    c.checkpoint_interval = 1024;
    c.max_running = 8;
    kvt_sched_hbm_split_t a, b;
    char err[256];
    uint64_t bb = (uint64_t)c.planes * c.layers * c.block_size * c.token_bytes;
    cr_assert_eq(kvt_replay_hbm_split(&c, 64ull << 20, &a, err, sizeof err), 0, "%s", err);
    cr_assert_eq(kvt_sched_hbm_split((uint32_t)((64ull << 20) / bb), bb, c.state_bytes, 8,
                                     2 * c.chunk_size / c.block_size, &b, err, sizeof err),
                 0);
    cr_assert_eq(memcmp(&a, &b, sizeof a), 0);
    cr_assert_eq(a.ckpt_blocks, (205824 + bb - 1) / bb);
    cr_assert_eq(a.slot_blocks, 8 * a.ckpt_blocks);
    cr_assert_eq(a.kv_blocks + a.slot_blocks, (64ull << 20) / bb);
    cr_assert_eq(a.ckpt_units, a.kv_blocks / a.ckpt_blocks);
}
