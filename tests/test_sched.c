/*  Scheduler core: the coordinator (kvt_sched.c, kvt_sched_step.c,
    kvt_sched_audit.c), driven directly (no actors) through the rig in
    tests/common/kvt_test_sched_rig.h: a request's way from arrival to its
    end, the step and its refusals, the rolled-back and the applied step,
    the checkpoints a step takes, abort / preempt / finish, the
    configuration refusals and random sequences under the audit. The
    modules below it have their own files: test_admit.c (the admission),
    test_loadtrack.c (loads and orphans), test_lookups.c (tier lookups),
    test_saves.c (saves); the block manager's suite is in test_blockmgr.c,
    the state pool's in test_ckpt.c. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "actors/scheduler/kvt_blockmgr.h"
#include "common/kvt_test_sched_rig.h"

//  True when a checkpoint at `at` was planned (among the first 64 TAKE ops).
static bool took(const rig_t *r, uint32_t at)
{
    for (uint32_t i = 0; i < r->ntakes && i < 64; i++)
        if (r->takes[i] == at)
            return true;
    return false;
}

static uint64_t s_rng(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
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
