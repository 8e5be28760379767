/*  End to end: kvtier replay through every actor, under both drivers. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "replay/kvt_replay.h"

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
