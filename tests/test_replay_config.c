/*  kvt_replay_config: every setting of the one configuration reaches the
    part of a replay that uses it (issue 9 §7, rule C1: no setting is
    accepted and then ignored). The map from kvt_config to the replay's
    settings is checked field by field; each setting that reaches an actor
    is then changed in a small SIM replay and the counter it moves is
    checked, against the same run with the setting left alone. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/kvt_namespace.h"
#include "kvtier/kvt_config.h"
#include "kvtier/kvt_disk.h"
#include "replay/kvt_rank.h"
#include "replay/kvt_replay.h"
#include "replay/kvt_replay_config.h"

#define MS 1000000ull

static char s_err[1024];

//  A configuration from flags (name, value, ..., NULL).
static int s_config(const char *const *flags, kvt_config_t *kc)
{
    kvt_config_loader_t *ld = kvt_config_loader_new();
    cr_assert_not_null(ld);
    int rc = 0;
    for (size_t i = 0; rc == 0 && flags[i]; i += 2)
        rc = kvt_config_loader_flag(ld, flags[i], flags[i + 1], s_err, sizeof s_err);
    if (rc == 0)
        rc = kvt_config_loader_build(ld, kc, NULL, NULL, s_err, sizeof s_err);
    kvt_config_loader_destroy(&ld);
    return rc;
}

Test(replay_config, every_setting_reaches_the_replay)
{
    const char *flags[] = {"model",
                           "qwen3-next-like",
                           "tp",
                           "4",
                           "dtype",
                           "fp16",
                           "state_tier",
                           "off",
                           "speculative",
                           "mtp:2",
                           "lookup_pin",
                           "false",
                           "lookup_timeout",
                           "250ms",
                           "lookup_ttl",
                           "3s",
                           "verified_window",
                           "7s",
                           "verify_hold",
                           "1500ms",
                           "agg_timeout",
                           "20s",
                           "lane_deadline",
                           "1s",
                           "fence_timeout",
                           "4s",
                           "pool_ttl",
                           "40s",
                           "min_load_tokens",
                           "512",
                           NULL};
    kvt_config_t kc;
    cr_assert_eq(s_config(flags, &kc), 0, "%s", s_err);
    kvt_replay_cfg_t c;
    cr_assert_eq(kvt_replay_from_config(&kc, &c, s_err, sizeof s_err), 0, "%s", s_err);
    cr_assert_eq(c.tp, 4);
    cr_assert_eq(c.state_bytes, kc.state_bytes);
    cr_assert(c.no_state_tier, "state_tier off did not reach the replay");
    cr_assert_eq(c.spec_tokens, 2, "speculative mtp:2 did not reach the scheduler's setting");
    cr_assert(kvt_hash_eq(c.ns, kc.ns), "the configuration's namespace is not the replay's");
    cr_assert(kvt_hash_eq(kvt_rank_namespace(&c), kc.ns), "the ranks key with another namespace");
    cr_assert_eq(c.layout_id, kvt_config_layout_id(&kc), "the disk tier records another id");
    cr_assert_not(c.lookup_pin);
    cr_assert_eq(c.lookup_timeout_ns, 250 * MS);
    cr_assert_eq(c.lookup_ttl_ns, 3000 * MS);
    cr_assert_eq(c.verified_window_ns, 7000 * MS);
    cr_assert_eq(c.verify_hold_ns, 1500 * MS);
    cr_assert_eq(c.agg_timeout_ns, 20000 * MS);
    cr_assert_eq(c.lane_deadline_ns, 1000 * MS);
    cr_assert_eq(c.fence_timeout_ns, 4000 * MS);
    cr_assert_eq(c.pool_ttl_ns, 40000 * MS);
    cr_assert_eq(c.min_load_tokens, 512);
    //  Left alone: the defaults, the state tier on (auto), a derived window.
    const char *none[] = {"model", "qwen3-next-like", NULL};
    cr_assert_eq(s_config(none, &kc), 0, "%s", s_err);
    cr_assert_eq(kvt_replay_from_config(&kc, &c, s_err, sizeof s_err), 0, "%s", s_err);
    cr_assert_not(c.no_state_tier, "auto resolves to a state tier with a CPU pool");
    cr_assert_eq(c.spec_tokens, 0);
    cr_assert(c.lookup_pin, "lookup_pin defaults to true");
    cr_assert_eq(c.verified_window_ns, kc.verified_window_ns);
    cr_assert_eq(c.verified_window_ns, 5000 * MS, "auto: the 5 s floor for 512 MiB");
}

Test(replay_config, the_dtype_and_the_model_id_change_the_keys_and_the_disk_layout)
{
    const char *bf[] = {"dtype", "bf16", NULL}, *fp[] = {"dtype", "fp32", NULL},
               *id[] = {"model_id", "other", NULL};
    kvt_config_t a, b, m;
    cr_assert_eq(s_config(bf, &a), 0, "%s", s_err);
    cr_assert_eq(s_config(fp, &b), 0, "%s", s_err);
    cr_assert_eq(s_config(id, &m), 0, "%s", s_err);
    kvt_replay_cfg_t ca, cb, cm;
    cr_assert_eq(kvt_replay_from_config(&a, &ca, s_err, sizeof s_err), 0);
    cr_assert_eq(kvt_replay_from_config(&b, &cb, s_err, sizeof s_err), 0);
    cr_assert_eq(kvt_replay_from_config(&m, &cm, s_err, sizeof s_err), 0);
    cr_assert_not(kvt_hash_eq(kvt_rank_namespace(&ca), kvt_rank_namespace(&cb)),
                  "another dtype keys the same objects");
    cr_assert_not(kvt_hash_eq(kvt_rank_namespace(&ca), kvt_rank_namespace(&cm)),
                  "another model id keys the same objects");
    cr_assert_neq(ca.layout_id, cb.layout_id, "another dtype records the same layout id");
    cr_assert_eq(ca.layout_id, cm.layout_id, "the model id is not part of the layout");
}

//  One namespace, one format: the configuration describes it ("kvtier/2
//  ...") and hashes it with the one function, and a rank given a
//  hand-filled configuration (no namespace of its own) keys with the same
//  namespace the configuration gives the same model, geometry and TP width.
Test(replay_config, a_hand_filled_configuration_keys_with_the_configurations_namespace)
{
    kvt_config_t kc;
    kvt_config_defaults(&kc);
    cr_assert_eq(strncmp(kc.ns_desc, "kvtier/2 model=dense ", 21), 0, "%s", kc.ns_desc);
    cr_assert(kvt_hash_eq(kc.ns, kvt_namespace_hash(kc.ns_desc)),
              "the configuration hashes its namespace with another function");
    kvt_replay_cfg_t c;
    kvt_replay_defaults(&c);
    cr_assert(kvt_hash_is_zero(c.ns));
    cr_assert(kvt_hash_eq(kvt_rank_namespace(&c), kc.ns),
              "a hand-filled dense configuration keys with another namespace");

    const char *flags[] = {"model", "qwen3-next-like", "tp", "4", "layers", "6", NULL};
    cr_assert_eq(s_config(flags, &kc), 0, "%s", s_err);
    kvt_replay_defaults(&c);
    c.model = "qwen3-next-like";
    c.state_bytes = kc.state_bytes;
    c.tp = 4;
    c.layers = 6;
    cr_assert(kvt_hash_eq(kvt_rank_namespace(&c), kc.ns),
              "a hand-filled hybrid configuration keys with another namespace");
    c.tp = 2;
    cr_assert_not(kvt_hash_eq(kvt_rank_namespace(&c), kc.ns), "the TP width is not in it");
}

Test(replay_config, a_replay_refuses_what_it_cannot_run_naming_the_setting)
{
    const char *pp[] = {"pipeline_parallel", "2", NULL};
    kvt_config_t kc;
    cr_assert_eq(s_config(pp, &kc), 0, "a dense model builds under PP: %s", s_err);
    kvt_replay_cfg_t c;
    s_err[0] = 0;
    cr_assert_eq(kvt_replay_from_config(&kc, &c, s_err, sizeof s_err), -1,
                 "a replay of one stage ran as if it were two");
    cr_assert(strstr(s_err, "pipeline_parallel = 2"), "%s", s_err);
    const char *col[] = {"tp_rank_collapse", "on", NULL};
    cr_assert_eq(s_config(col, &kc), 0, "%s", s_err);
    cr_assert_eq(kvt_replay_from_config(&kc, &c, s_err, sizeof s_err), -1,
                 "collapsed ranks ran as shards");
    cr_assert(strstr(s_err, "tp_rank_collapse = on"), "%s", s_err);
}

// ------------------------------------------------- settings in a replay --

static void s_small(kvt_replay_cfg_t *c, bool hybrid)
{
    kvt_replay_defaults(c);
    c->limit = 60;
    c->hbm_pool_bytes = 2ull << 20;
    c->cpu_pool_bytes = 32ull << 20;
    c->log_level = 0;
    if (hybrid) {
        c->model = "qwen3-next-like";
        c->state_bytes = 205824;
        c->checkpoint_interval = 1024;
        c->hbm_pool_bytes = 24ull << 20; //  the 64 state slots come out of it (13 MB)
    }
}

static kvt_replay_report_t *s_run(const kvt_replay_cfg_t *c)
{
    kvt_replay_report_t *r = calloc(1, sizeof *r);
    char err[512] = "";
    cr_assert_eq(kvt_replay_run(c, r, err, sizeof err), 0, "%s", err);
    return r;
}

static uint64_t s_count(const kvt_replay_cfg_t *c, const char *name)
{
    kvt_replay_report_t *r = s_run(c);
    uint64_t v = kvt_replay_counter(r, NULL, name);
    kvt_replay_report_clear(r);
    free(r);
    return v;
}

Test(replay_config, lookup_pin_pins_what_a_lookup_found, .timeout = 120)
{
    kvt_replay_cfg_t c;
    s_small(&c, false);
    cr_assert_gt(s_count(&c, "worker.lookup_pins"), 0, "lookup_pin on: no lookup pinned");
    c.lookup_pin = false;
    cr_assert_eq(s_count(&c, "worker.lookup_pins"), 0, "lookup_pin off: lookups pinned");
}

Test(replay_config, state_tier_off_keeps_state_images_out_of_the_tier, .timeout = 120)
{
    kvt_replay_cfg_t c;
    s_small(&c, true);
    kvt_replay_report_t *r = s_run(&c);
    cr_assert_gt(kvt_replay_counter(r, NULL, "worker.images_saved"), 0);
    kvt_replay_report_clear(r);
    free(r);
    c.no_state_tier = true;
    r = s_run(&c);
    cr_assert_eq(kvt_replay_counter(r, NULL, "worker.images_saved"), 0, "images reached the tier");
    cr_assert_eq(kvt_replay_counter(r, NULL, "sched.joint_state_tier"), 0);
    cr_assert_gt(kvt_replay_counter(r, NULL, "sched.saves_ok"), 0, "KV is still saved");
    cr_assert_eq(r->engine.wrong_resumes, 0);
    cr_assert_not(r->failed, "%s", r->failures);
    kvt_replay_report_clear(r);
    free(r);
}

Test(replay_config, the_data_path_timeouts_reach_their_actors, .timeout = 240)
{
    kvt_replay_cfg_t c;
    s_small(&c, false);
    kvt_replay_report_t *r = s_run(&c);
    const char *names[] = {"sched.lookup_timeouts", "agg.timeouts", "worker.lane_timeouts",
                           "pool.reclaimed_expired", "worker.lookup_rel_ttl"};
    for (int i = 0; i < 5; i++)
        cr_assert_eq(kvt_replay_counter(r, NULL, names[i]), 0, "%s by default", names[i]);
    kvt_replay_report_clear(r);
    free(r);
    s_small(&c, false);
    c.lookup_timeout_ns = 1000; //  1 µs: before any rank can answer
    c.pace = KVT_OFF;           //  the next Schedule, a modelled step later, then comes
                                //  microseconds of driver time later: before the answers
    cr_assert_gt(s_count(&c, "sched.lookup_timeouts"), 0, "lookup_timeout");
    s_small(&c, false);
    c.agg_timeout_ns = 1000;
    cr_assert_gt(s_count(&c, "agg.timeouts"), 0, "agg_timeout");
    s_small(&c, false);
    c.lane_deadline_ns = 1000; //  under a copy's 5 µs
    cr_assert_gt(s_count(&c, "worker.lane_timeouts"), 0, "lane_deadline");
    //  A pool under pressure reclaims what is held past its TTL: copies of
    //  5 ms hold their leases longer than a TTL of 1 ms.
    s_small(&c, false);
    c.cpu_pool_bytes = 256u << 10;
    c.sim_lat_ns = 5 * MS;
    cr_assert_eq(s_count(&c, "pool.reclaimed_expired"), 0, "pool_ttl left alone");
    c.pool_ttl_ns = 1 * MS;
    cr_assert_gt(s_count(&c, "pool.reclaimed_expired"), 0, "pool_ttl");
    s_small(&c, false);
    c.lookup_ttl_ns = 1000; //  1 µs: past before the next plan releases the pin
    cr_assert_gt(s_count(&c, "worker.lookup_rel_ttl"), 0, "lookup_ttl");
}

Test(replay_config, speculative_decoding_leaves_two_tokens_to_compute, .timeout = 60)
{
    //  The same 513-token prompt twice: its second arrival finds all of it
    //  in HBM, and a hit leaves 1 token to compute (512 of 513 hit), 2
    //  under speculative decoding (the block grid then stops at 496).
    char path[128];
    snprintf(path, sizeof path, "/tmp/kvt-replay-config-%d.jsonl", (int)getpid());
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    for (int i = 0; i < 2; i++)
        fprintf(f,
                "{\"timestamp\": %d, \"input_length\": 513, \"output_length\": 4, "
                "\"hash_ids\": [1, 2]}\n",
                i * 1000);
    cr_assert_eq(fclose(f), 0);
    kvt_replay_cfg_t c;
    s_small(&c, false);
    c.trace = path;
    c.limit = 0;
    uint64_t plain = s_count(&c, "sched.hbm_hit_tokens");
    c.spec_tokens = 1;
    uint64_t spec = s_count(&c, "sched.hbm_hit_tokens");
    unlink(path);
    cr_assert_eq(plain, 512, "without speculation: %llu", (unsigned long long)plain);
    cr_assert_eq(spec, 496, "with speculation: %llu", (unsigned long long)spec);
}

//  What a replay writes to stderr (the actors' log lines), as a string.
static char *s_stderr_of(const kvt_replay_cfg_t *c)
{
    char path[128];
    snprintf(path, sizeof path, "/tmp/kvt-replay-config-%d.log", (int)getpid());
    fflush(stderr);
    int saved = dup(2), fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0600);
    cr_assert(saved >= 0 && fd >= 0);
    dup2(fd, 2);
    kvt_replay_report_t *r = s_run(c);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    kvt_replay_report_clear(r);
    free(r);
    off_t len = lseek(fd, 0, SEEK_END);
    char *text = calloc(1, (size_t)len + 1);
    cr_assert_eq(pread(fd, text, (size_t)len, 0), len);
    close(fd);
    unlink(path);
    return text;
}

Test(replay_config, the_verified_window_and_the_hold_bound_reach_the_state_index, .timeout = 120)
{
    kvt_replay_cfg_t c;
    s_small(&c, true);
    c.limit = 4;
    c.log_level = 1;
    char *text = s_stderr_of(&c);
    cr_assert(strstr(text, "verified window 5000 ms, verify hold bound 2000 ms"), "%s", text);
    free(text);
    c.verified_window_ns = 7000 * MS;
    c.verify_hold_ns = 1500 * MS;
    text = s_stderr_of(&c);
    cr_assert(strstr(text, "verified window 7000 ms, verify hold bound 1500 ms"),
              "the settings did not reach the state index: %s", text);
    free(text);
}

//  A replay built from flags (the workload kept small) on disk_dir; the
//  kvt_replay_run result, its error in err.
static int s_disk_run(const char *dir, const char *key, const char *value, char *err, size_t errlen)
{
    const char *flags[] = {"limit", "8",         "hbm_pool", "2MiB", "cpu_pool", "1MiB", "disk_dir",
                           dir,     "log_level", "0",        key,    value,      NULL};
    kvt_config_t kc;
    cr_assert_eq(s_config(flags, &kc), 0, "%s", s_err);
    kvt_replay_cfg_t c;
    cr_assert_eq(kvt_replay_from_config(&kc, &c, s_err, sizeof s_err), 0, "%s", s_err);
    kvt_replay_report_t *r = calloc(1, sizeof *r);
    int rc = kvt_replay_run(&c, r, err, errlen);
    if (rc == 0)
        cr_assert_not(r->failed, "%s", r->failures);
    kvt_replay_report_clear(r);
    free(r);
    return rc;
}

Test(replay_config, a_disk_tier_refuses_the_directory_of_another_dtype_or_model, .timeout = 120)
{
    char dir[128], cmd[200], err[512] = "";
    snprintf(dir, sizeof dir, "/tmp/kvt-replay-config-disk-%d", (int)getpid());
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
    cr_assert_eq(s_disk_run(dir, "dtype", "bf16", err, sizeof err), 0, "%s", err);
    cr_assert_eq(s_disk_run(dir, "dtype", "bf16", err, sizeof err), 0, "the same again: %s", err);
    uint64_t refused = kvt_disk_manifest_refusals();
    cr_assert_eq(s_disk_run(dir, "dtype", "fp32", err, sizeof err), -1,
                 "fp32 ranks opened a directory of bf16 bytes");
    cr_assert(strstr(err, "layout_id"), "%s", err);
    cr_assert(strstr(err, "/rank0"), "%s", err);
    cr_assert_eq(s_disk_run(dir, "model_id", "another", err, sizeof err), -1,
                 "another model's ranks opened the directory");
    cr_assert(strstr(err, "namespace"), "%s", err);
    cr_assert_eq(kvt_disk_manifest_refusals(), refused + 2);
    cr_assert_eq(system(cmd), 0);
}

Test(replay_config, every_rank_setting_travels_to_a_rank_process, .timeout = 30)
{
    //  kvt_rank_spawn's command line, caught by a script in place of kvtier.
    char exe[128], out[128];
    snprintf(exe, sizeof exe, "/tmp/kvt-replay-config-exe-%d", (int)getpid());
    snprintf(out, sizeof out, "/tmp/kvt-replay-config-args-%d", (int)getpid());
    FILE *f = fopen(exe, "w");
    cr_assert_not_null(f);
    fprintf(f, "#!/bin/sh\necho \"$@\" > %s\n", out);
    cr_assert_eq(fclose(f), 0);
    cr_assert_eq(chmod(exe, 0700), 0);
    const char *flags[] = {"model",
                           "qwen3-next-like",
                           "max_running",
                           "8",
                           "driver",
                           "live",
                           "lookup_ttl",
                           "3s",
                           "pool_ttl",
                           "40s",
                           "lane_deadline",
                           "1s",
                           "fence_timeout",
                           "4s",
                           NULL};
    kvt_config_t kc;
    cr_assert_eq(s_config(flags, &kc), 0, "%s", s_err);
    kvt_replay_cfg_t c;
    cr_assert_eq(kvt_replay_from_config(&kc, &c, s_err, sizeof s_err), 0, "%s", s_err);
    c.ranks_as_processes = true;
    int pid = kvt_rank_spawn(exe, &c, 1, "ipc:///tmp/x", s_err, sizeof s_err);
    cr_assert_gt(pid, 0, "%s", s_err);
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
    char args[4096] = "", want[160];
    f = fopen(out, "r");
    cr_assert_not_null(f);
    size_t n = fread(args, 1, sizeof args - 1, f);
    args[n] = 0;
    fclose(f);
    unlink(out);
    unlink(exe);
    snprintf(want, sizeof want, "--state-bytes %llu --max-running 8 ",
             (unsigned long long)kc.state_bytes);
    cr_assert(strstr(args, want), "no state lane: %s", args);
    snprintf(want, sizeof want, "--namespace %016llx%016llx ", (unsigned long long)kc.ns.hi,
             (unsigned long long)kc.ns.lo);
    cr_assert(strstr(args, want), "no namespace: %s", args);
    snprintf(want, sizeof want, "--layout-id %016llx ",
             (unsigned long long)kvt_config_layout_id(&kc));
    cr_assert(strstr(args, want), "no layout id: %s", args);
    cr_assert(strstr(args, "--model qwen3-next-like "), "no model: %s", args);
    snprintf(want, sizeof want, "--checkpoint-interval %u ", c.checkpoint_interval);
    cr_assert(strstr(args, want), "no checkpoint interval: %s", args);
    //  Durations with their unit: the configuration's table parses them.
    cr_assert(strstr(args, "--lookup-ttl 3000000000ns "), "%s", args);
    cr_assert(strstr(args, "--lane-deadline 1000000000ns "), "%s", args);
    cr_assert(strstr(args, "--fence-timeout 4000000000ns "), "%s", args);
    cr_assert(strstr(args, "--pool-ttl 40000000000ns"), "%s", args);
}

Test(replay_config, lookup_max_age_reaches_the_scheduler)
{
    const char *age[] = {"lookup_max_age", "250ms", NULL};
    kvt_config_t kc;
    cr_assert_eq(s_config(age, &kc), 0, "%s", s_err);
    kvt_replay_cfg_t c;
    cr_assert_eq(kvt_replay_from_config(&kc, &c, s_err, sizeof s_err), 0, "%s", s_err);
    cr_assert_eq(c.lookup_max_age_us, 250000);
}
