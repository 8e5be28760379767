/*  End to end: kvtier replay through every actor, under both drivers. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "replay/kvt_replay.h"
#include "replay/kvt_replay_config.h"

#define TRACE KVT_SOURCE_DIR "/../shared/traces/conversation_trace.jsonl"

static kvt_replay_report_t *s_run(const kvt_replay_cfg_t *cfg)
{
    kvt_replay_report_t *r = calloc(1, sizeof *r);
    char err[512];
    cr_assert_eq(kvt_replay_run(cfg, r, err, sizeof err), 0, "%s", err);
    return r;
}

static void s_assert_clean(const kvt_replay_report_t *r)
{
    cr_assert_eq(r->engine.wrong_resumes, 0, "wrong resumes");
    cr_assert(r->quiescent, "not quiescent: %s", r->problem);
    cr_assert(r->engine.done);
    cr_assert_eq(r->engine.finished + r->engine.rejected, r->engine.requests);
    cr_assert_eq(r->runtime_errors, 0, "runtime errors (see rt.* counters)");
    cr_assert_eq(kvt_replay_counter(r, NULL, "runner.blocks_wrong"), 0);
    cr_assert(!r->failed, "the run failed: %s", r->failures);
    //  Exactly once means nothing arrived twice either: no replay here
    //  injects duplicates, so the aggregator dropped no late or duplicate
    //  report and no worker dropped a repeated spec.
    cr_assert_eq(kvt_replay_counter(r, "aggregator", "agg.late_dropped"), 0);
    cr_assert_eq(kvt_replay_counter(r, "aggregator", "agg.dup_dropped"), 0);
    cr_assert_eq(kvt_replay_counter(r, NULL, "worker.duplicates"), 0);
}

static void s_small(kvt_replay_cfg_t *c)
{
    kvt_replay_defaults(c);
    c->limit = 160;
    c->hbm_pool_bytes = 2ull << 20; //  1024 blocks: the synthetic working set spills
    c->cpu_pool_bytes = 32ull << 20;
    c->log_level = 0;
}

Test(replay, sim_synthetic_runs_clean_and_restores_from_cpu, .timeout = 120)
{
    kvt_replay_cfg_t c;
    s_small(&c);
    kvt_replay_report_t *r = s_run(&c);
    s_assert_clean(r);
    cr_assert_gt(r->hit_cpu_tokens, 0, "a small HBM pool must restore from the CPU tier");
    cr_assert_gt(r->engine.loads_ok, 0);
    cr_assert_gt(kvt_replay_counter(r, NULL, "runner.blocks_verified"), 0,
                 "restored blocks were checked by the oracle");
    cr_assert_neq(r->trace_hash, 0);
    kvt_replay_report_clear(r);
    free(r);
}

Test(replay, live_synthetic_runs_clean_and_restores_from_cpu, .timeout = 120)
{
    kvt_replay_cfg_t c;
    s_small(&c);
    c.driver = KVT_DRIVER_LIVE;
    kvt_replay_report_t *r = s_run(&c);
    s_assert_clean(r);
    cr_assert_gt(r->hit_cpu_tokens, 0);
    cr_assert_eq(r->trace_hash, 0, "LIVE has no trace hash");
    kvt_replay_report_clear(r);
    free(r);
}

Test(replay, sim_same_seed_same_trace_hash, .timeout = 180)
{
    kvt_replay_cfg_t c;
    s_small(&c);
    c.limit = 80;
    uint64_t h[3];
    for (int i = 0; i < 3; i++) {
        kvt_replay_report_t *r = s_run(&c);
        s_assert_clean(r);
        h[i] = r->trace_hash;
        kvt_replay_report_clear(r);
        free(r);
    }
    cr_assert_eq(h[0], h[1]);
    cr_assert_eq(h[1], h[2]);
    c.seed = 2;
    kvt_replay_report_t *r = s_run(&c);
    cr_assert_neq(r->trace_hash, h[0]);
    kvt_replay_report_clear(r);
    free(r);
}

//  The testing fault flips one restored byte of the third resumed request on
//  rank 0 before the runner checks it: the oracle must catch exactly that one.
static void s_assert_one_wrong_resume(const kvt_replay_report_t *r)
{
    cr_assert_eq(kvt_replay_counter(r, "runner.0", "runner.faults_injected"), 1);
    cr_assert_eq(kvt_replay_counter(r, NULL, "runner.faults_injected"), 1);
    cr_assert_eq(r->engine.wrong_resumes, 1);
    cr_assert_eq(kvt_replay_counter(r, "runner.0", "runner.blocks_wrong"), 1);
    cr_assert_eq(kvt_replay_counter(r, NULL, "runner.blocks_wrong"), 1);
    cr_assert(r->failed, "a wrong resume fails the run");
    cr_assert(strstr(r->failures, "1 wrong resumes") != NULL, "%s", r->failures);
    //  Nothing else went wrong.
    cr_assert(r->quiescent, "not quiescent: %s", r->problem);
    cr_assert_eq(r->engine.finished + r->engine.rejected, r->engine.requests);
    cr_assert_eq(r->runtime_errors, 0);
    cr_assert_eq(r->engine.steps_failed, 0);
}

Test(replay, corrupted_restore_is_exactly_one_wrong_resume_and_fails_the_run, .timeout = 120)
{
    kvt_replay_cfg_t c;
    s_small(&c);
    c.fault_corrupt_resume = 3;
    kvt_replay_report_t *r = s_run(&c);
    s_assert_one_wrong_resume(r);
    kvt_replay_report_clear(r);
    free(r);
    c.driver = KVT_DRIVER_LIVE;
    r = s_run(&c);
    s_assert_one_wrong_resume(r);
    kvt_replay_report_clear(r);
    free(r);
    //  A fault past the last resume never fires: the run passes.
    c.driver = KVT_DRIVER_SIM;
    c.limit = 20;
    c.fault_corrupt_resume = 100000;
    r = s_run(&c);
    s_assert_clean(r);
    cr_assert_eq(kvt_replay_counter(r, NULL, "runner.faults_injected"), 0);
    kvt_replay_report_clear(r);
    free(r);
}

Test(replay, cpu_tier_lowers_recomputed_share, .timeout = 120)
{
    kvt_replay_cfg_t c;
    s_small(&c);
    kvt_replay_report_t *with = s_run(&c);
    c.cpu_pool_bytes = 0;
    kvt_replay_report_t *without = s_run(&c);
    s_assert_clean(with);
    s_assert_clean(without);
    cr_assert_eq(without->hit_cpu_tokens, 0);
    cr_assert_eq(without->saves_ok, 0, "no tier: nothing is saved");
    cr_assert_eq(with->engine.input_tokens, without->engine.input_tokens);
    cr_assert_lt(with->recomputed_share, without->recomputed_share);
    kvt_replay_report_clear(with);
    free(with);
    kvt_replay_report_clear(without);
    free(without);
}

Test(replay, tp1_and_tp4_run_clean, .timeout = 120)
{
    kvt_replay_cfg_t c;
    s_small(&c);
    c.limit = 80;
    c.tp = 1;
    kvt_replay_report_t *r = s_run(&c);
    s_assert_clean(r);
    kvt_replay_report_clear(r);
    free(r);
    c.tp = 4;
    r = s_run(&c);
    s_assert_clean(r);
    cr_assert_eq(kvt_replay_counter(r, "worker.3", "worker.saves_ok"),
                 kvt_replay_counter(r, "worker.0", "worker.saves_ok"));
    kvt_replay_report_clear(r);
    free(r);
}

Test(replay, bad_configuration_is_refused_naming_the_setting)
{
    kvt_replay_cfg_t c;
    kvt_replay_defaults(&c);
    c.hbm_pool_bytes = 1000;
    char err[256];
    kvt_replay_report_t r;
    cr_assert_eq(kvt_replay_run(&c, &r, err, sizeof err), -1);
    cr_assert(strstr(err, "hbm-pool") != NULL, "%s", err);
    kvt_replay_defaults(&c);
    c.cpu_pool_bytes = 1000;
    cr_assert_eq(kvt_replay_validate(&c, err, sizeof err), -1);
    cr_assert(strstr(err, "cpu-pool") != NULL, "%s", err);
    kvt_replay_defaults(&c);
    c.trace = "/nonexistent.jsonl";
    cr_assert_eq(kvt_replay_run(&c, &r, err, sizeof err), -1);
    cr_assert(strstr(err, "nonexistent") != NULL, "%s", err);
}

Test(replay, mooncake_conversation_trace_sim_and_live, .timeout = 600)
{
    if (access(TRACE, R_OK) != 0)
        cr_skip_test("%s is not present", TRACE);
    kvt_replay_cfg_t c;
    kvt_replay_defaults(&c);
    c.trace = TRACE;
    //  The run is 500 requests; sanitizer builds replay the first
    //  200, which still restore from the CPU tier.
#ifdef KVTIER_SANITIZER
    c.limit = 200;
#else
    c.limit = 500;
#endif
    c.log_level = 0;
    kvt_replay_report_t *sim = s_run(&c);
    s_assert_clean(sim);
    cr_assert_gt(sim->hit_cpu_tokens, 0);
    c.cpu_pool_bytes = 0;
    kvt_replay_report_t *hbm_only = s_run(&c);
    s_assert_clean(hbm_only);
    cr_assert_lt(sim->recomputed_share, hbm_only->recomputed_share);
    c.cpu_pool_bytes = 512ull << 20;
    c.driver = KVT_DRIVER_LIVE;
    kvt_replay_report_t *live = s_run(&c);
    s_assert_clean(live);
    cr_assert_gt(live->hit_cpu_tokens, 0);
    kvt_replay_report_clear(sim);
    free(sim);
    kvt_replay_report_clear(hbm_only);
    free(hbm_only);
    kvt_replay_report_clear(live);
    free(live);
}

static void s_rmdir_tree(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

Test(replay, disk_tier_restores_what_the_cpu_pool_evicted, .timeout = 240)
{
    char dir[256];
    snprintf(dir, sizeof dir, "/tmp/kvt-replay-disk-%d", (int)getpid());
    s_rmdir_tree(dir);
    kvt_replay_cfg_t c;
    s_small(&c);
    c.cpu_pool_bytes = 1ull << 20; //  32 chunks: almost everything spills to disk
    c.disk_dir = dir;
    c.disk_pool_bytes = 256ull << 20;
    kvt_replay_report_t *r = s_run(&c);
    s_assert_clean(r);
    cr_assert_gt(r->hit_disk_tokens, 0, "restores must come from the disk tier");
    cr_assert_gt(kvt_replay_counter(r, NULL, "storage.promotions"), 0);
    //  Under SIM the store runs every disk write inside the call that
    //  queued it (io_mode INLINE), never on its writer threads.
    cr_assert_gt(kvt_replay_counter(r, NULL, "disk.writes_inline"), 0);
    uint64_t h = r->trace_hash;
    kvt_replay_report_clear(r);
    free(r);
    //  Same seed, fresh directory: the same run (disk writes are awaited
    //  under SIM, so thread timing cannot change the outcome).
    s_rmdir_tree(dir);
    r = s_run(&c);
    cr_assert_eq(r->trace_hash, h);
    kvt_replay_report_clear(r);
    free(r);
    //  Write-back on eviction: deterministic too.
    c.disk_write_on_evict = true;
    s_rmdir_tree(dir);
    r = s_run(&c);
    s_assert_clean(r);
    cr_assert_gt(r->hit_disk_tokens, 0);
    h = r->trace_hash;
    kvt_replay_report_clear(r);
    free(r);
    s_rmdir_tree(dir);
    r = s_run(&c);
    cr_assert_eq(r->trace_hash, h, "write-back runs differ");
    kvt_replay_report_clear(r);
    free(r);
    c.disk_write_on_evict = false;
    s_rmdir_tree(dir);
    c.driver = KVT_DRIVER_LIVE;
    r = s_run(&c);
    s_assert_clean(r);
    cr_assert_gt(r->hit_disk_tokens, 0);
    cr_assert_eq(kvt_replay_counter(r, NULL, "disk.writes_inline"), 0,
                 "live: the writer threads write");
    kvt_replay_report_clear(r);
    free(r);
    s_rmdir_tree(dir);
}

// ------------------------------------------- the engine under its peers ----
//  The engine actor with a stand-in scheduler and stand-in counter sources
//  under the SIM driver: what it does when a send fails, with repeated
//  FINISH events and with Stats replies it did not ask for.

#include "replay/kvt_sim_engine.h"
#include "replay/kvt_sim_engine_core.h"

typedef struct {
    uint32_t finish_repeats; //  FINISH events sent per arrival (1 = correct)
    bool finish_unknown;     //  also a FINISH for a request that does not exist
} s_stub_sched_args_t;

//  Answers every Schedule with an idle plan that rejects its arrivals.
static int s_stub_on_schedule(kvt_ctx_t *ctx, void *self, kvt_aid_t from, kvt_msg_t *msg)
{
    const s_stub_sched_args_t *a = self;
    const kvt_schedule_t *s = &msg->u.schedule;
    kvt_event_t ev[16];
    uint32_t n = 0;
    for (uint32_t i = 0; i < s->narrivals; i++)
        for (uint32_t k = 0; k < a->finish_repeats && n < 15; k++)
            ev[n++] = (kvt_event_t){.op = {s->arrivals[i].req, 1}, .type = KVT_EV_FINISH, .c = 1};
    if (a->finish_unknown && s->narrivals)
        ev[n++] = (kvt_event_t){.op = {777, 1}, .type = KVT_EV_FINISH, .c = 1};
    kvt_msg_t m;
    memset(&m, 0, sizeof m);
    m.kind = KVT_MSG_STEP_PLAN;
    m.u.step_plan.step = s->step;
    m.u.step_plan.events = ev;
    m.u.step_plan.nevents = n;
    m.u.step_plan.idle = true;
    return kvt_ctx_send(ctx, from, &m);
}

static void *s_stub_init(kvt_ctx_t *ctx, void *args)
{
    (void)ctx;
    return args;
}

static void s_stub_stop(kvt_ctx_t *ctx, void *self)
{
    (void)ctx;
    (void)self;
}

static const kvt_actor_class_t s_stub_sched_class = {
    .type = "stub-scheduler",
    .init = s_stub_init,
    .stop = s_stub_stop,
    .on = {[KVT_MSG_SCHEDULE] = s_stub_on_schedule},
};

typedef struct {
    const char *spoof; //  also send a second reply naming this actor (NULL = no)
} s_stub_stats_args_t;

//  Replies to a Stats request with one counter "<name>.real" = 1; with
//  spoof set, first a reply naming that actor and after its own a repeat.
static int s_stub_on_stats(kvt_ctx_t *ctx, void *self, kvt_aid_t from, kvt_msg_t *msg)
{
    const s_stub_stats_args_t *a = self;
    if (!msg->u.stats.request)
        return 0;
    const char *me = kvt_ctx_name(ctx, kvt_ctx_self(ctx));
    kvt_counter_t c;
    memset(&c, 0, sizeof c);
    snprintf(c.name, sizeof c.name, "%s.real", me);
    c.value = 1;
    kvt_msg_t m;
    memset(&m, 0, sizeof m);
    m.kind = KVT_MSG_STATS;
    snprintf(m.u.stats.from, sizeof m.u.stats.from, "%s", me);
    m.u.stats.counters = &c;
    m.u.stats.ncounters = 1;
    int rc = 0;
    if (a->spoof) { //  first a reply naming another actor
        kvt_counter_t fake = c;
        snprintf(fake.name, sizeof fake.name, "spoofed");
        snprintf(m.u.stats.from, sizeof m.u.stats.from, "%s", a->spoof);
        m.u.stats.counters = &fake;
        rc |= kvt_ctx_send(ctx, from, &m);
        snprintf(m.u.stats.from, sizeof m.u.stats.from, "%s", me);
        m.u.stats.counters = &c;
    }
    rc |= kvt_ctx_send(ctx, from, &m);
    if (a->spoof) //  then its own reply once more
        rc |= kvt_ctx_send(ctx, from, &m);
    return rc;
}

static const kvt_actor_class_t s_stub_stats_class = {
    .type = "stub-stats",
    .init = s_stub_init,
    .stop = s_stub_stop,
    .on = {[KVT_MSG_STATS] = s_stub_on_stats},
};

//  A one-request workload of `len` prompt tokens (freed with s_wl_free).
static kvt_workload_t *s_wl_one(uint32_t len)
{
    kvt_workload_t *wl = calloc(1, sizeof *wl);
    cr_assert_not_null(wl);
    wl->n = 1;
    wl->reqs = calloc(1, sizeof *wl->reqs);
    cr_assert_not_null(wl->reqs);
    wl->reqs[0].input_len = len;
    wl->reqs[0].output_len = 1;
    wl->reqs[0].nids = (len + KVT_WL_BLOCK_TOKENS - 1) / KVT_WL_BLOCK_TOKENS;
    wl->reqs[0].ids = calloc(wl->reqs[0].nids ? wl->reqs[0].nids : 1, sizeof(uint32_t));
    wl->input_tokens = len;
    return wl;
}

static void s_wl_free(kvt_workload_t *wl)
{
    free(wl->reqs[0].ids);
    free(wl->reqs);
    free(wl);
}

typedef struct {
    kvt_system_t *sys;
    kvt_sim_engine_args_t ea;
    s_stub_sched_args_t sa;
    s_stub_stats_args_t a, b;
    kvt_sim_engine_result_t res;
    const char *stats_from[3];
} s_eng_t;

//  engine, scheduler (stub), runner.0 (a stand-in that is never sent to
//  by these workloads), a, b (counter sources) under SIM with `seed`.
static void s_eng_build(s_eng_t *t, const kvt_workload_t *wl, uint64_t seed)
{
    kvt_system_opts_t so;
    memset(&so, 0, sizeof so);
    so.driver = KVT_DRIVER_SIM;
    so.seed = seed;
    so.name = "eng";
    so.log_level = 0;
    t->sys = kvt_system_new(&so);
    cr_assert_not_null(t->sys);
    t->stats_from[0] = "a";
    t->stats_from[1] = "b";
    t->stats_from[2] = NULL;
    t->ea.wl = wl;
    t->ea.tp = 1;
    t->ea.scheduler = "scheduler";
    t->ea.stats_from = t->stats_from;
    t->ea.out = &t->res;
    cr_assert_neq(kvt_system_add(t->sys, "engine", &kvt_sim_engine_class, &t->ea, NULL),
                  KVT_AID_NONE);
    cr_assert_neq(kvt_system_add(t->sys, "scheduler", &s_stub_sched_class, &t->sa, NULL),
                  KVT_AID_NONE);
    cr_assert_neq(kvt_system_add(t->sys, "runner.0", &s_stub_stats_class, &t->b, NULL),
                  KVT_AID_NONE);
    cr_assert_neq(kvt_system_add(t->sys, "a", &s_stub_stats_class, &t->a, NULL), KVT_AID_NONE);
    cr_assert_neq(kvt_system_add(t->sys, "b", &s_stub_stats_class, &t->b, NULL), KVT_AID_NONE);
    cr_assert_eq(kvt_system_start(t->sys), 0);
}

static void s_eng_free(s_eng_t *t)
{
    kvt_system_destroy(&t->sys);
    kvt_sim_engine_result_clear(&t->res);
}

//  A Schedule that does not encode (a request with no prompt token) is a
//  send failure: the engine ends the run saying why instead of leaving it
//  to wait forever (under LIVE nothing else would ever end it).
Test(sim_engine, a_failed_send_stops_the_run_and_says_why)
{
    kvt_workload_t *wl = s_wl_one(0);
    s_eng_t t;
    memset(&t, 0, sizeof t);
    t.sa.finish_repeats = 1;
    s_eng_build(&t, wl, 1);
    int rc = kvt_system_run(t.sys, 0, 0);
    cr_assert_eq(rc, KVT_SIM_ENGINE_EXIT_FAILED, "run returned %d", rc);
    cr_assert(!t.res.done);
    cr_assert(strstr(t.res.error, "cannot send Schedule for step 1") != NULL, "error '%s'",
              t.res.error);
    s_eng_free(&t);
    s_wl_free(wl);
}

//  A request ends once: a repeated FINISH and one for no request are
//  dropped and counted, and a replay that saw one fails.
Test(sim_engine, repeated_and_unknown_finish_events_are_dropped_and_counted)
{
    kvt_workload_t *wl = s_wl_one(16);
    s_eng_t t;
    memset(&t, 0, sizeof t);
    t.sa.finish_repeats = 2;
    t.sa.finish_unknown = true;
    s_eng_build(&t, wl, 1);
    cr_assert_eq(kvt_system_run(t.sys, 0, 0), 0);
    cr_assert(t.res.done);
    cr_assert_eq(t.res.rejected, 1, "the request ended %llu times",
                 (unsigned long long)t.res.rejected);
    cr_assert_eq(t.res.finish_dropped, 2);
    s_eng_free(&t);
    s_wl_free(wl);
}

//  Only the actors asked answer, once each, under their own names: "a"
//  first sends a reply naming "b", then its own, then its own again.
//  Whatever the delivery order (20 seeds), the engine waits for b's own
//  reply, files b's counter under b and drops the impostor and the repeat
//  (counted when they come before the end).
Test(sim_engine, a_stats_reply_counts_only_from_the_actor_asked_once)
{
    kvt_workload_t *wl = s_wl_one(16);
    uint64_t dropped = 0;
    for (uint64_t seed = 1; seed <= 20; seed++) {
        s_eng_t t;
        memset(&t, 0, sizeof t);
        t.sa.finish_repeats = 1;
        t.a.spoof = "b";
        s_eng_build(&t, wl, seed);
        cr_assert_eq(kvt_system_run(t.sys, 0, 0), 0);
        cr_assert(t.res.done);
        bool a_real = false, b_real = false, spoofed = false;
        for (uint32_t i = 0; i < t.res.ncounters; i++) {
            const kvt_sim_engine_counter_t *c = &t.res.counters[i];
            a_real |= !strcmp(c->actor, "a") && !strcmp(c->c.name, "a.real");
            b_real |= !strcmp(c->actor, "b") && !strcmp(c->c.name, "b.real");
            spoofed |= !strcmp(c->c.name, "spoofed");
        }
        cr_assert(a_real && b_real, "seed %llu: a %d b %d", (unsigned long long)seed, a_real,
                  b_real);
        cr_assert(!spoofed, "seed %llu: the impostor's counters were taken",
                  (unsigned long long)seed);
        cr_assert_leq(t.res.stats_unexpected, 2, "seed %llu", (unsigned long long)seed);
        dropped += t.res.stats_unexpected;
        s_eng_free(&t);
    }
    cr_assert_gt(dropped, 0, "no seed delivered the impostor before b's reply");
    s_wl_free(wl);
}

//  A StepDone naming a request that does not exist as wrong is a wrong
//  report: counted (the replay fails on it), never silently ignored.
Test(sim_engine, a_wrong_id_naming_no_request_is_counted)
{
    kvt_workload_t *wl = s_wl_one(16);
    kvt_sim_engine_result_t res;
    memset(&res, 0, sizeof res);
    kvt_sim_engine_core_cfg_t cc;
    memset(&cc, 0, sizeof cc);
    cc.wl = wl;
    cc.tp = 1;
    kvt_sim_engine_core_t *core = kvt_sim_engine_core_new(&cc, &res);
    cr_assert_not_null(core);
    kvt_sim_engine_out_t out;
    cr_assert_eq(kvt_sim_engine_core_start(core, &out), 0);
    cr_assert_eq(out.what, KVT_SIM_ENGINE_SCHEDULE);
    kvt_entry_t e;
    memset(&e, 0, sizeof e);
    e.op = (kvt_opid_t){0, 1};
    e.end = 16;
    kvt_step_plan_t p;
    memset(&p, 0, sizeof p);
    p.step = 1;
    p.entries = &e;
    p.nentries = 1;
    cr_assert_eq(kvt_sim_engine_core_plan(core, &p, &out), 0);
    cr_assert_eq(out.what, KVT_SIM_ENGINE_EXEC);
    uint64_t wrong[2] = {0, 5};
    kvt_step_done_t d;
    memset(&d, 0, sizeof d);
    d.step = 1;
    d.ok = true;
    d.wrong = wrong;
    d.nwrong = 2;
    cr_assert_eq(kvt_sim_engine_core_done(core, &d, &out), 0);
    cr_assert_eq(res.wrong_resumes, 1);
    cr_assert_eq(res.bad_wrong_ids, 1);
    cr_assert(strstr(out.note, "request 5") != NULL, "note '%s'", out.note);
    kvt_sim_engine_core_destroy(&core);
    kvt_sim_engine_result_clear(&res);
    s_wl_free(wl);
}

//  A live run that cannot end in time fails with a clear error instead of
//  running (or hanging) on.
Test(replay, live_run_past_its_wall_limit_fails_naming_the_limit, .timeout = 60)
{
    kvt_replay_cfg_t c;
    s_small(&c);
    c.driver = KVT_DRIVER_LIVE;
    c.wall_limit_ms = 1;
    kvt_replay_report_t *r = s_run(&c);
    cr_assert(r->failed);
    cr_assert_eq(r->exit_code, KVT_RUN_TIME_LIMIT);
    cr_assert(strstr(r->failures, "wall-clock limit of 1 ms") != NULL, "failures: %s", r->failures);
    cr_assert(r->wall_s < 5.0, "took %.2f s", r->wall_s);
    kvt_replay_report_clear(r);
    free(r);
}

//  `--lookup rank0` (the configuration's `lookup` setting) reaches the
//  replay's scheduler: on two ranks every tier lookup is answered by rank 0
//  alone and settles on its report (none times out), admissions restore
//  from the CPU tier on both ranks and every resume is right. Without the
//  flag every rank is asked.
Test(replay, lookup_rank0_asks_rank_0_only_and_restores_clean, .timeout = 120)
{
    char err[256];
    for (int asked = 0; asked < 2; asked++) {
        kvt_config_loader_t *ld = kvt_config_loader_new();
        cr_assert_not_null(ld);
        if (asked)
            cr_assert_eq(kvt_config_loader_flag(ld, "--lookup", "rank0", err, sizeof err), 0, "%s",
                         err);
        kvt_config_t kc;
        cr_assert_eq(kvt_config_loader_build(ld, &kc, NULL, NULL, err, sizeof err), 0, "%s", err);
        kvt_config_loader_destroy(&ld);
        kvt_replay_cfg_t c;
        cr_assert_eq(kvt_replay_from_config(&kc, &c, err, sizeof err), 0, "%s", err);
        cr_assert_eq(c.lookup_rank0, asked == 1);
    }
    kvt_replay_cfg_t c;
    s_small(&c);
    c.lookup_rank0 = true;
    kvt_replay_report_t *r = s_run(&c);
    s_assert_clean(r);
    cr_assert_gt(r->hit_cpu_tokens, 0);
    cr_assert_gt(r->engine.loads_ok, 0);
    cr_assert_eq(r->engine.loads_failed, 0);
    uint64_t sent = kvt_replay_counter(r, "scheduler", "sched.lookups_sent");
    cr_assert_gt(sent, 0);
    cr_assert_eq(kvt_replay_counter(r, "worker.0", "worker.lookups"), sent);
    cr_assert_eq(kvt_replay_counter(r, "worker.1", "worker.lookups"), 0, "rank 1 is never asked");
    cr_assert_eq(kvt_replay_counter(r, "worker.1", "worker.lookups_not_asked"), sent);
    cr_assert_eq(kvt_replay_counter(r, "aggregator", "agg.not_asked"), 0);
    cr_assert_eq(kvt_replay_counter(r, "scheduler", "sched.lookup_timeouts"), 0,
                 "every lookup settled on rank 0's report");
    kvt_replay_report_clear(r);
    free(r);
    //  Without the flag every rank is asked.
    s_small(&c);
    r = s_run(&c);
    s_assert_clean(r);
    sent = kvt_replay_counter(r, "scheduler", "sched.lookups_sent");
    cr_assert_gt(sent, 0);
    cr_assert_eq(kvt_replay_counter(r, "worker.1", "worker.lookups"), sent, "rank 1 is asked too");
    cr_assert_eq(kvt_replay_counter(r, "worker.1", "worker.lookups_not_asked"), 0);
    kvt_replay_report_clear(r);
    free(r);
}

//  The byte scale keeps every decision: K = 64 with 64 times the sizes
//  stores what K = 1 stores, so hits, loads and the trace hash agree.
Test(replay, byte_scale_64_makes_the_same_decisions_as_1, .timeout = 120)
{
    kvt_replay_cfg_t c;
    s_small(&c);
    c.limit = 60;
    kvt_replay_report_t *a = s_run(&c);
    s_assert_clean(a);
    c.byte_scale = 64;
    c.hbm_pool_bytes *= 64;
    c.cpu_pool_bytes *= 64;
    kvt_replay_report_t *b = s_run(&c);
    s_assert_clean(b);
    cr_assert_gt(a->hit_cpu_tokens, 0, "the small run restores from the CPU tier");
    cr_assert_eq(a->hit_cpu_tokens, b->hit_cpu_tokens);
    cr_assert_eq(a->engine.hbm_hit_tokens, b->engine.hbm_hit_tokens);
    cr_assert_eq(a->engine.loads_ok, b->engine.loads_ok);
    cr_assert_eq(a->saves_ok, b->saves_ok);
    cr_assert_eq(a->trace_hash, b->trace_hash);
    kvt_replay_report_clear(a);
    kvt_replay_report_clear(b);
    free(a);
    free(b);
    //  Scaled without the sizes, the pools are 64 times smaller: refused.
    s_small(&c);
    c.byte_scale = 64;
    char err[256];
    cr_assert_neq(kvt_replay_validate(&c, err, sizeof err), 0);
    cr_assert(strstr(err, "byte scale 64"), "%s", err);
}

Test(replay, a_bad_cost_knob_is_refused_naming_it)
{
    kvt_replay_cfg_t c;
    s_small(&c);
    char err[256];
    c.cost = "prefill_tps=5e4,h2d_GBps=25";
    cr_assert_eq(kvt_replay_validate(&c, err, sizeof err), 0, "%s", err);
    c.cost = "prefill_tps=5e4,h2d_gbps=25";
    cr_assert_neq(kvt_replay_validate(&c, err, sizeof err), 0);
    cr_assert(strstr(err, "h2d_gbps"), "%s", err);
    c.cost = "prefill_tps=0";
    cr_assert_neq(kvt_replay_validate(&c, err, sizeof err), 0);
    cr_assert(strstr(err, "prefill_tps"), "%s", err);
    c.cost = "disk_GBps=-1";
    cr_assert_neq(kvt_replay_validate(&c, err, sizeof err), 0);
}

//  Two instances: every request served by one of them, the counts add up,
//  each instance ends clean.
Test(replay, two_instances_serve_every_request_once, .timeout = 120)
{
    kvt_replay_cfg_t c;
    s_small(&c);
    c.limit = 60;
    kvt_replay_report_t *one = s_run(&c);
    s_assert_clean(one);
    c.instances = 2;
    kvt_replay_report_t *r = s_run(&c);
    s_assert_clean(r);
    cr_assert_eq(r->engine.requests, 60);
    cr_assert_eq(r->engine.finished, 60);
    cr_assert_eq(r->engine.input_tokens, one->engine.input_tokens);
    cr_assert_eq(r->engine.nttft, 60, "one first token per request");
    cr_assert_eq(kvt_replay_counter(r, "scheduler", "sched.audit_ok"), 2, "both audited");
    cr_assert(strstr(r->source, "over 2 instances"), "%s", r->source);
    kvt_replay_report_clear(one);
    kvt_replay_report_clear(r);
    free(one);
    free(r);
}

//  A testing fault fires in the first instance only: over two instances
//  that both resume, --fault corrupt-resume=N is still exactly one wrong
//  resume.
Test(replay, a_fault_over_instances_is_still_exactly_one_wrong_resume, .timeout = 120)
{
    kvt_replay_cfg_t c;
    s_small(&c);
    c.instances = 2;
    c.fault_corrupt_resume = 3;
    kvt_replay_report_t *r = s_run(&c);
    s_assert_one_wrong_resume(r);
    kvt_replay_report_clear(r);
    free(r);
}
