/*  How requests arrive in a replay (issue 16 §1): --time-scale stretches
    the trace's timestamps, --closed-loop keeps C requests in flight per
    instance, and bad values of either are refused naming the option. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "replay/kvt_replay.h"
#include "replay/kvt_replay_config.h"
#include "kvtier/kvt_config.h"

#define TRACE KVT_SOURCE_DIR "/../shared/traces/conversation_trace.jsonl"

static kvt_replay_report_t *s_run(const kvt_replay_cfg_t *cfg)
{
    kvt_replay_report_t *r = calloc(1, sizeof *r);
    char err[512];
    cr_assert_eq(kvt_replay_run(cfg, r, err, sizeof err), 0, "%s", err);
    return r;
}

static void s_free(kvt_replay_report_t *r)
{
    kvt_replay_report_clear(r);
    free(r);
}

static void s_assert_clean(const kvt_replay_report_t *r)
{
    cr_assert_eq(r->engine.wrong_resumes, 0, "wrong resumes");
    cr_assert(r->quiescent, "not quiescent: %s", r->problem);
    cr_assert(r->engine.done);
    cr_assert_eq(r->engine.finished + r->engine.rejected, r->engine.requests);
    cr_assert_eq(r->runtime_errors, 0);
    cr_assert(!r->failed, "the run failed: %s", r->failures);
}

static void s_small(kvt_replay_cfg_t *c, uint32_t limit)
{
    kvt_replay_defaults(c);
    c->limit = limit;
    c->hbm_pool_bytes = 2ull << 20;
    c->cpu_pool_bytes = 32ull << 20;
    c->log_level = 0;
}

//  ---- time scale --------------------------------------------------------------

Test(replay_arrivals, time_scale_2_doubles_every_arrival_of_the_workload)
{
    kvt_synth_cfg_t sc;
    memset(&sc, 0, sizeof sc);
    sc.seed = 3;
    kvt_workload_t *a = kvt_workload_synthetic(&sc, 50);
    kvt_workload_t *b = kvt_workload_synthetic(&sc, 50);
    cr_assert(a && b);
    kvt_workload_time_scale(b, 2.0);
    for (uint32_t i = 0; i < a->n; i++)
        cr_assert_eq(b->reqs[i].arrival_us, 2 * a->reqs[i].arrival_us, "request %u", i);
    kvt_workload_time_scale(b, 0.25);
    for (uint32_t i = 0; i < a->n; i++)
        cr_assert_eq(b->reqs[i].arrival_us, (uint64_t)llround(a->reqs[i].arrival_us * 0.5));
    kvt_workload_destroy(&a);
    kvt_workload_destroy(&b);
}

//  The replay applies it: the modelled arrival span of a trace slice
//  doubles (the first timestamp is not 0, so a shift would not pass), and
//  the run stays clean.
Test(replay_arrivals, time_scale_2_doubles_the_modelled_arrival_span_of_a_trace_slice,
     .timeout = 120)
{
    if (access(TRACE, R_OK) != 0)
        cr_skip_test("no trace at %s", TRACE);
    kvt_replay_cfg_t c;
    s_small(&c, 24);
    c.trace = TRACE;
    kvt_replay_report_t *one = s_run(&c);
    c.time_scale = 2.0;
    kvt_replay_report_t *two = s_run(&c);
    s_assert_clean(one);
    s_assert_clean(two);
    cr_assert_gt(one->engine.span_us, 0);
    cr_assert_eq(two->engine.span_us, 2 * one->engine.span_us, "span %llu vs %llu",
                 (unsigned long long)two->engine.span_us, (unsigned long long)one->engine.span_us);
    cr_assert_geq(two->engine.model_time_us, 2 * one->engine.span_us);
    s_free(one);
    s_free(two);
}

//  ---- closed loop -------------------------------------------------------------

Test(replay_arrivals, closed_loop_never_has_more_than_c_in_flight_and_every_request_ends,
     .timeout = 120)
{
    kvt_replay_cfg_t c;
    s_small(&c, 48);
    kvt_replay_report_t *open = s_run(&c);
    s_assert_clean(open);
    //  The open loop overlaps more than 3 requests here: the cap below binds.
    cr_assert_gt(open->engine.max_in_flight, 3, "open loop: %u", open->engine.max_in_flight);
    c.closed_loop = 3;
    kvt_replay_report_t *r = s_run(&c);
    s_assert_clean(r);
    cr_assert_eq(r->engine.finished, 48);
    cr_assert_eq(r->engine.max_in_flight, 3);
    s_free(open);
    s_free(r);
}

//  C = 1: each request arrives when the one before it ended, so the
//  arrivals span at least the sum of their own service (model time ends
//  after every TTFT); nothing ever overlaps.
Test(replay_arrivals, closed_loop_1_runs_requests_strictly_one_after_another, .timeout = 120)
{
    kvt_replay_cfg_t c;
    s_small(&c, 24);
    c.closed_loop = 1;
    kvt_replay_report_t *r = s_run(&c);
    s_assert_clean(r);
    cr_assert_eq(r->engine.max_in_flight, 1);
    cr_assert_eq(r->engine.finished, 24);
    //  Nobody queues: the worst TTFT is one request's own prefill.
    uint64_t sum = 0;
    for (uint32_t i = 0; i < r->engine.nttft; i++)
        sum += r->engine.ttft_us[i];
    cr_assert_leq(sum, r->engine.model_time_us);
    s_free(r);
}

Test(replay_arrivals, closed_loop_is_per_instance, .timeout = 120)
{
    kvt_replay_cfg_t c;
    s_small(&c, 40);
    c.instances = 2;
    c.closed_loop = 2;
    kvt_replay_report_t *r = s_run(&c);
    s_assert_clean(r);
    cr_assert_eq(r->engine.finished + r->engine.rejected, 40);
    cr_assert_eq(r->engine.max_in_flight, 2);
    s_free(r);
}

Test(replay_arrivals, closed_loop_under_the_live_driver, .timeout = 120)
{
    kvt_replay_cfg_t c;
    s_small(&c, 16);
    c.driver = KVT_DRIVER_LIVE;
    c.closed_loop = 2;
    kvt_replay_report_t *r = s_run(&c);
    s_assert_clean(r);
    cr_assert_eq(r->engine.finished, 16);
    cr_assert_eq(r->engine.max_in_flight, 2);
    s_free(r);
}

//  ---- settings ----------------------------------------------------------------

static char s_err[1024];

//  Builds a configuration from a YAML text and flags (name, value, ...,
//  NULL); the build's result.
static int s_build(const char *yaml, const char *const *flags, kvt_config_t *kc)
{
    kvt_config_loader_t *l = kvt_config_loader_new();
    cr_assert_not_null(l);
    s_err[0] = 0;
    int rc =
        yaml ? kvt_config_loader_yaml(l, yaml, strlen(yaml), "cfg.yaml", s_err, sizeof s_err) : 0;
    for (size_t i = 0; rc == 0 && flags && flags[i]; i += 2)
        rc = kvt_config_loader_flag(l, flags[i], flags[i + 1], s_err, sizeof s_err);
    if (rc == 0)
        rc = kvt_config_loader_build(l, kc, NULL, NULL, s_err, sizeof s_err);
    kvt_config_loader_destroy(&l);
    return rc;
}

Test(replay_arrivals, both_come_from_the_yaml_file_and_flags_into_the_replay)
{
    kvt_config_t kc;
    kvt_replay_cfg_t c;
    char err[256];
    cr_assert_eq(s_build(NULL, NULL, &kc), 0, "%s", s_err);
    cr_assert_eq(kvt_replay_from_config(&kc, &c, err, sizeof err), 0, "%s", err);
    cr_assert_eq(c.time_scale, 1.0);
    cr_assert_eq(c.closed_loop, 0);
    cr_assert_eq(s_build("time_scale: 2.5\nclosed_loop: 0\n", NULL, &kc), 0, "%s", s_err);
    cr_assert_eq(kvt_replay_from_config(&kc, &c, err, sizeof err), 0, "%s", err);
    cr_assert_eq(c.time_scale, 2.5);
    const char *flags[] = {"--closed-loop", "8", NULL};
    cr_assert_eq(s_build("closed_loop: 3\n", flags, &kc), 0, "%s", s_err);
    cr_assert_eq(kvt_replay_from_config(&kc, &c, err, sizeof err), 0, "%s", err);
    cr_assert_eq(c.closed_loop, 8);
    cr_assert_eq(kvt_replay_validate(&c, err, sizeof err), 0, "%s", err);
}

Test(replay_arrivals, bad_values_are_refused_naming_the_option)
{
    kvt_config_t kc;
    static const char *const bad_scale[] = {"0",  "-1", "-0.5",  "nan",  "NaN", "inf", "abc",
                                            "2x", " 2", "1e400", "1001", "0x0", "0.0"};
    for (size_t i = 0; i < sizeof bad_scale / sizeof bad_scale[0]; i++) {
        const char *flags[] = {"--time-scale", bad_scale[i], NULL};
        cr_assert_neq(s_build(NULL, flags, &kc), 0, "--time-scale '%s' was taken", bad_scale[i]);
        cr_assert(strstr(s_err, "time_scale") && strstr(s_err, "--time-scale"), "'%s': %s",
                  bad_scale[i], s_err);
    }
    cr_assert_neq(s_build("time_scale: -2\n", NULL, &kc), 0);
    cr_assert(strstr(s_err, "time_scale") && strstr(s_err, "cfg.yaml"), "%s", s_err);
    static const char *const bad_loop[] = {"-1", "x", "1.5", "65537"};
    for (size_t i = 0; i < sizeof bad_loop / sizeof bad_loop[0]; i++) {
        const char *flags[] = {"--closed-loop", bad_loop[i], NULL};
        cr_assert_neq(s_build(NULL, flags, &kc), 0, "--closed-loop '%s' was taken", bad_loop[i]);
        cr_assert(strstr(s_err, "closed_loop"), "'%s': %s", bad_loop[i], s_err);
    }
    //  Refused before anything runs: a replay given such a value by hand,
    //  and the two together (a closed loop has no timestamps to stretch).
    kvt_replay_cfg_t c;
    kvt_replay_report_t r;
    char err[256];
    kvt_replay_defaults(&c);
    c.time_scale = -1;
    cr_assert_eq(kvt_replay_run(&c, &r, err, sizeof err), -1);
    cr_assert(strstr(err, "time-scale"), "%s", err);
    c.time_scale = NAN;
    cr_assert_eq(kvt_replay_validate(&c, err, sizeof err), -1);
    cr_assert(strstr(err, "time-scale"), "%s", err);
    kvt_replay_defaults(&c);
    c.closed_loop = 4;
    c.time_scale = 2;
    cr_assert_eq(kvt_replay_validate(&c, err, sizeof err), -1);
    cr_assert(strstr(err, "closed-loop") && strstr(err, "time-scale"), "%s", err);
    c.time_scale = 1;
    cr_assert_eq(kvt_replay_validate(&c, err, sizeof err), 0, "%s", err);
}
