/*  The hybrid rank data path as actors under the SIM driver: two real
    workers (a device with KV planes and state pools, a tier, three lanes
    each), the real aggregator, and a probe in the scheduler's place that
    records verdicts. Specs are posted to the workers as the runners would
    send them. The rules: one load report and one state report per rank on
    every path (L1, L2), the state key settling even when a rank's KV leg
    failed first (L2), state-only loads (L3), refusals (L4), the fused cost
    (L2) and the Fence report (X1, X3). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "common/kvt_test_rig.h"
#include "replay/kvt_oracle.h"

#define BS     16
#define CS     64
#define BPC    (CS / BS)
#define NB     64 //  device blocks per rank
#define TP     2
#define PLANES 2
#define TOKB   16   //  bytes per token per plane (one layer)
#define SLOTS  8    //  state slots per rank
#define SB     4096 //  bytes of one state unit

static kvt_trig_probe_t *const P = &kvt_trig_probe;
static kvt_trig_t R;

//  fence_ns: the lanes' fence timeout (0: default).
static void rig_up(uint64_t bandwidth, uint64_t fence_ns)
{
    kvt_trig_cfg_t cfg = {
        .seed = 11,
        .name = "rank_rules",
        .nranks = TP,
        .dev = {.bandwidth = bandwidth,
                .zero_latency = true,
                .planes = PLANES,
                .blocks = NB,
                .block_bytes = BS * TOKB,
                .slots = SLOTS,
                .state_bytes = SB},
        .pool_bytes = 64 * BPC * PLANES * BS * TOKB,
        .agg_timeout_ns = 1000000000ull,
        .wa = {.ns = 7, .block_size = BS, .chunk_size = CS, .fence_timeout_ns = fence_ns}};
    kvt_trig_up(&R, &cfg);
}

static void rig_down(void)
{
    kvt_trig_down(&R);
}

static void rig_run(void)
{
    kvt_trig_settle(&R);
}

static uint64_t rig_counter(kvt_aid_t aid, const char *name)
{
    return kvt_trig_count(&R, aid, name);
}

//  Nothing reported twice, nothing left open.
static void rig_exactly_once(void)
{
    cr_assert_eq(rig_counter(R.agg, "agg.late_dropped") + rig_counter(R.agg, "agg.dup_dropped"), 0,
                 "a report came twice");
    cr_assert_eq(rig_counter(R.agg, "agg.open"), 0, "a key never settled");
    cr_assert_eq(rig_counter(R.agg, "agg.timeouts"), 0, "a key settled by the bound");
    for (int r = 0; r < TP; r++)
        cr_assert_eq(rig_counter(R.w[r], "worker.duplicates"), 0);
}

static kvt_hash_t K(uint64_t i)
{
    return (kvt_hash_t){.hi = 0xABCDull + i, .lo = i * 977 + 1};
}

static const kvt_hash_t ST = {0x5151, 0xA0A0}; //  the checkpoint's state hash
static const kvt_hash_t ZERO = {0, 0};
static const uint32_t DST[8] = {11, 12, 13, 14, 30, 31, 32, 33};

//  Stores chunk K(key) (its oracle bytes) on rank r.
static void rig_put_chunk(int r, uint64_t key)
{
    static uint8_t buf[BPC * BS * TOKB * PLANES];
    size_t bb = BS * TOKB;
    for (uint32_t p = 0; p < PLANES; p++)
        for (uint32_t b = 0; b < BPC; b++)
            kvt_oracle_fill(buf + ((size_t)p * BPC + b) * bb, bb, K(key), b, p, (uint32_t)r);
    cr_assert_eq(kvt_storage_put(R.st[r], 7, K(key), KVT_OBJ_KV, buf, sizeof buf), 0);
}

static void rig_put_image(int r, kvt_hash_t hash)
{
    static uint8_t img[SB];
    kvt_oracle_state_fill(img, SB, hash, (uint32_t)r);
    cr_assert_eq(kvt_storage_put(R.st[r], 7, hash, KVT_OBJ_STATE, img, SB), 0);
}

//  Posts a load to every worker: the KV leg [0, CS) from K(key) (nkv 0: none)
//  and the state leg of ST into `slot` at `boundary`.
static void rig_load(uint64_t req, uint32_t nkv, uint64_t key, uint32_t slot, uint32_t boundary)
{
    kvt_hash_t keys[1] = {K(key)};
    kvt_msg_t m;
    memset(&m, 0, sizeof m);
    m.kind = KVT_MSG_LOAD_SPEC;
    kvt_load_spec_t *sp = &m.u.load_spec;
    sp->op = (kvt_opid_t){req, 1};
    if (nkv) {
        sp->end = CS;
        sp->keys = keys;
        sp->nkeys = 1;
        sp->blocks = (uint32_t *)DST;
        sp->nblocks = BPC;
    }
    sp->state = true;
    sp->state_hash = ST;
    sp->state_slot = slot;
    sp->state_boundary = boundary;
    for (int r = 0; r < TP; r++)
        cr_assert_eq(kvt_system_post(R.sys, R.w[r], &m), 0);
}

//  The one verdict on (chan, req, key).
static const kvt_verdict_t *rig_verdict(uint8_t chan, uint64_t req, kvt_hash_t key, uint64_t *at)
{
    const kvt_verdict_t *v = NULL;
    uint32_t n = 0;
    for (uint32_t i = 0; i < P->nverdicts; i++)
        if (P->verdicts[i].chan == chan && P->verdicts[i].op.req == req &&
            kvt_hash_eq(P->verdicts[i].key, key)) {
            v = &P->verdicts[i];
            if (at)
                *at = P->at[i];
            n++;
        }
    cr_assert_eq(n, 1, "channel %u, load %llu: %u verdicts", chan, (unsigned long long)req, n);
    return v;
}

Test(rank_rules, rule_L2_a_rank_whose_kv_leg_fails_still_reports_on_the_state_key, .timeout = 30)
{
    rig_up(25000000000ull, 0);
    //  Both ranks hold the image; only rank 0 holds the chunk.
    rig_put_chunk(0, 100);
    for (int r = 0; r < TP; r++)
        rig_put_image(r, ST);
    rig_load(1, 1, 100, 2, CS);
    rig_run();
    const kvt_verdict_t *ld = rig_verdict(KVT_CHAN_LOAD, 1, ZERO, NULL);
    cr_assert_not(ld->ok, "rank 1's KV leg missed");
    cr_assert_eq(ld->detail, KVT_DETAIL_MISS);
    const kvt_verdict_t *sv = rig_verdict(KVT_CHAN_STATE, 1, ST, NULL);
    cr_assert(sv->ok, "rank 0's real hit and rank 1's neutral report: ok");
    cr_assert_eq(sv->nfailed, 0);
    cr_assert_eq(rig_counter(R.w[1], "worker.states_neutral"), 1);
    cr_assert_eq(rig_counter(R.w[0], "worker.states_ok"), 1);
    cr_assert_eq(P->nverdicts, 2, "one load and one state verdict");
    rig_exactly_once();
    rig_down();
}

Test(rank_rules, rule_L1_one_completion_per_rank_on_refusal_and_miss, .timeout = 30)
{
    rig_up(25000000000ull, 0);
    rig_put_image(0, ST); //  rank 1 misses the image
    //  A state-only load: rank 0 hits, rank 1 misses (a real MISS verdict).
    rig_load(2, 0, 0, 1, CS);
    //  A refused one (boundary off the grid): every rank neutral.
    rig_load(3, 0, 0, 1, CS + 1);
    rig_run();
    const kvt_verdict_t *v = rig_verdict(KVT_CHAN_LOAD, 2, ZERO, NULL);
    cr_assert_not(v->ok);
    v = rig_verdict(KVT_CHAN_STATE, 2, ST, NULL);
    cr_assert_not(v->ok);
    cr_assert_eq(v->detail, KVT_DETAIL_MISS, "a real state miss retracts (rule I3)");
    v = rig_verdict(KVT_CHAN_LOAD, 3, ZERO, NULL);
    cr_assert_eq(v->detail, KVT_DETAIL_INVALID);
    v = rig_verdict(KVT_CHAN_STATE, 3, ST, NULL);
    cr_assert(v->ok);
    cr_assert_eq(v->detail, KVT_DETAIL_SKIPPED, "every rank was neutral");
    cr_assert_eq(P->nverdicts, 4);
    rig_exactly_once();
    rig_down();
}

Test(rank_rules, rule_L3_state_only_load_restores_the_slot_on_every_rank, .timeout = 30)
{
    rig_up(25000000000ull, 0);
    for (int r = 0; r < TP; r++)
        rig_put_image(r, ST);
    rig_load(4, 0, 0, 5, 2 * CS);
    rig_run();
    cr_assert(rig_verdict(KVT_CHAN_LOAD, 4, ZERO, NULL)->ok);
    cr_assert(rig_verdict(KVT_CHAN_STATE, 4, ST, NULL)->ok);
    for (int r = 0; r < TP; r++)
        cr_assert_eq(kvt_oracle_state_mismatch(kvt_gpu_state_ptr(R.gpu[r], KVT_GPU_STATE_SLOTS, 5),
                                               SB, ST, (uint32_t)r),
                     SB, "rank %d restored wrong state bytes", r);
    rig_exactly_once();
    rig_down();
}

Test(rank_rules, rule_L2_fused_load_costs_max_not_sum, .timeout = 30)
{
    //  1 MB/s: the KV leg (2 KiB) ~2 ms, the state leg (4 KiB) ~4 ms.
    rig_up(1000000ull, 0);
    for (int r = 0; r < TP; r++) {
        rig_put_chunk(r, 200);
        rig_put_image(r, ST);
    }
    uint64_t kv = kvt_gpu_sim_cost_ns(R.gpu[0], BPC * kvt_gpu_block_bytes(R.gpu[0]));
    uint64_t st = kvt_gpu_sim_cost_ns(R.gpu[0], SB);
    uint64_t t0 = kvt_system_now(R.sys);
    rig_load(5, 1, 200, 3, CS);
    rig_run();
    uint64_t at = 0;
    cr_assert(rig_verdict(KVT_CHAN_LOAD, 5, ZERO, &at)->ok);
    uint64_t took = at - t0, max = kv > st ? kv : st;
    cr_assert_geq(took, max, "the verdict preceded a leg's copy");
    cr_assert_lt(took, kv + st, "legs in series: %llu ns (max %llu, sum %llu)",
                 (unsigned long long)took, (unsigned long long)max, (unsigned long long)(kv + st));
    rig_exactly_once();
    rig_down();
}

Test(rank_rules, rule_X1_a_fence_reports_once_per_rank_and_settles, .timeout = 30)
{
    rig_up(1000000ull, 0);
    for (int r = 0; r < TP; r++) {
        rig_put_chunk(r, 300);
        rig_put_image(r, ST);
    }
    rig_load(6, 1, 300, 4, CS);
    kvt_msg_t m;
    memset(&m, 0, sizeof m);
    m.kind = KVT_MSG_FENCE;
    m.u.fence = (kvt_fence_msg_t){.id = 42, .lanes = 0};
    for (int r = 0; r < TP; r++)
        cr_assert_eq(kvt_system_post(R.sys, R.w[r], &m), 0);
    rig_run();
    uint64_t fence_at = 0, load_at = 0;
    const kvt_verdict_t *f = rig_verdict(KVT_CHAN_FENCE, 42, ZERO, &fence_at);
    cr_assert(f->ok);
    cr_assert(rig_verdict(KVT_CHAN_LOAD, 6, ZERO, &load_at)->ok);
    cr_assert_geq(fence_at, load_at, "the fence settled before the load it covers");
    rig_exactly_once();
    rig_down();
}
