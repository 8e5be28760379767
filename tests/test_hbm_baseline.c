/*  `kvtier replay --hbm-baseline`: the HBM-only baseline beside a replay.
    Through the binary, the report read back with jansson: the baseline is
    exactly a replay without the tiers below HBM (the same TTFT, hits and
    finished requests as a separate `--cpu-pool 0` run), it changes nothing
    of the run it stands beside, `auto` stays off when stdout is not a
    terminal, and a run with no tier to compare with, or a bad value, is
    refused naming the flag. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define KVTIER KVT_BINARY_DIR "/kvtier"
//  Sessions that resume from the CPU tier (small HBM), so the tiers change
//  what the run computes and a baseline that kept them would show it.
#define WORKLOAD \
    "--model qwen3-next-like --limit 120 --byte-scale 1 --hbm-pool 24MiB --cpu-pool 32MiB"

static char s_dir[64];

static void s_setup(void)
{
    snprintf(s_dir, sizeof s_dir, "/tmp/kvt-hb-XXXXXX");
    cr_assert_not_null(mkdtemp(s_dir));
}

static void s_teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s_dir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(hbm_baseline, .init = s_setup, .fini = s_teardown, .timeout = 240);

//  Runs `kvtier replay ARGS --json DIR/NAME.json`, stdout into DIR/NAME.out
//  and stderr into DIR/NAME.err; returns the exit status and, when asked,
//  the report (NULL when none was written).
static int s_replay(const char *args, const char *name, json_t **report)
{
    char cmd[1024], json[128];
    snprintf(json, sizeof json, "%s/%s.json", s_dir, name);
    snprintf(cmd, sizeof cmd, "%s replay %s --log-level 0 --json %s >%s/%s.out 2>%s/%s.err", KVTIER,
             args, json, s_dir, name, s_dir, name);
    int rc = system(cmd);
    cr_assert(WIFEXITED(rc), "kvtier replay %s did not exit normally", args);
    if (report) {
        json_error_t je;
        *report = access(json, R_OK) == 0 ? json_load_file(json, 0, &je) : NULL;
    }
    return WEXITSTATUS(rc);
}

static double s_num(const json_t *o, const char *path)
{
    char buf[128];
    snprintf(buf, sizeof buf, "%s", path);
    const json_t *v = o;
    for (char *save = NULL, *k = strtok_r(buf, ".", &save); k && v; k = strtok_r(NULL, ".", &save))
        v = json_object_get(v, k);
    cr_assert(json_is_number(v), "no number at %s", path);
    return json_number_value(v);
}

static long long s_counter(const json_t *root, const char *name)
{
    const json_t *counters = json_object_get(root, "counters");
    const char *actor;
    const json_t *c;
    long long sum = 0;
    json_object_foreach((json_t *)counters, actor, c)
    {
        const json_t *v = json_object_get(c, name);
        if (json_is_integer(v))
            sum += (long long)json_integer_value(v);
    }
    return sum;
}

static bool s_file_has(const char *name, const char *text)
{
    char path[128], buf[8192];
    snprintf(path, sizeof path, "%s/%s", s_dir, name);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return strstr(buf, text) != NULL;
}

Test(hbm_baseline, is_a_replay_without_the_tiers_and_changes_nothing_of_the_run)
{
    json_t *with, *plain, *hbm;
    cr_assert_eq(s_replay(WORKLOAD " --hbm-baseline on", "with", &with), 0);
    cr_assert_eq(s_replay(WORKLOAD " --hbm-baseline off", "plain", &plain), 0);
    cr_assert_eq(s_replay(WORKLOAD " --cpu-pool 0", "hbm", &hbm), 0);
    cr_assert(with && plain && hbm);
    //  The tiers matter in this workload: without them it computes more.
    cr_assert_gt(s_counter(with, "sched.tier_hit_tokens"), 0, "the CPU tier served hits");
    const json_t *b = json_object_get(with, "hbm_only");
    cr_assert_not_null(b, "--hbm-baseline on puts hbm_only in the report");
    cr_assert(json_is_true(json_object_get(b, "ran")));
    //  The baseline is the --cpu-pool 0 run, to the token and the microsecond.
    cr_assert_eq(s_num(b, "ttft_ms.p50"), s_num(hbm, "ttft_ms.p50"));
    cr_assert_eq(s_num(b, "ttft_ms.p90"), s_num(hbm, "ttft_ms.p90"));
    cr_assert_eq(s_num(b, "ttft_ms.p99"), s_num(hbm, "ttft_ms.p99"));
    cr_assert_eq(s_num(b, "finished"), s_num(hbm, "finished"));
    cr_assert_eq(s_num(b, "hit_tokens"), s_num(hbm, "hit_tokens.hbm"));
    cr_assert_eq(s_num(b, "input_tokens"), s_num(hbm, "input_tokens"));
    cr_assert_eq(s_num(b, "wrong_resumes"), 0);
    cr_assert_neq(s_num(b, "ttft_ms.p99"), s_num(with, "ttft_ms.p99"),
                  "the tiers change the TTFT here, so the comparison is not vacuous");
    //  The run beside it is the run without it: same trace, same figures.
    cr_assert_str_eq(json_string_value(json_object_get(with, "trace_hash")),
                     json_string_value(json_object_get(plain, "trace_hash")));
    cr_assert_eq(s_num(with, "ttft_ms.p50"), s_num(plain, "ttft_ms.p50"));
    cr_assert_eq(s_num(with, "ttft_ms.p99"), s_num(plain, "ttft_ms.p99"));
    cr_assert_eq(s_num(with, "recomputed_tokens"), s_num(plain, "recomputed_tokens"));
    cr_assert_null(json_object_get(plain, "hbm_only"), "off: no baseline");
    //  The summary says it.
    cr_assert(s_file_has("with.out", "vs hbm only"));
    cr_assert(!s_file_has("plain.out", "vs hbm only"));
    json_decref(with);
    json_decref(plain);
    json_decref(hbm);
}

//  auto (the default) is on for a terminal only: a pipe or a file, as in a
//  script or this test, gets the run alone.
Test(hbm_baseline, auto_is_off_when_stdout_is_not_a_terminal)
{
    json_t *r;
    cr_assert_eq(s_replay(WORKLOAD, "auto", &r), 0);
    cr_assert_not_null(r);
    cr_assert_null(json_object_get(r, "hbm_only"));
    cr_assert(!s_file_has("auto.out", "vs hbm only"));
    json_decref(r);
}

Test(hbm_baseline, a_run_without_tiers_or_a_bad_value_is_refused)
{
    cr_assert_eq(s_replay(WORKLOAD " --cpu-pool 0 --hbm-baseline on", "none", NULL), 2);
    cr_assert(s_file_has("none.err", "--hbm-baseline on: the run has no tier below HBM"));
    cr_assert_eq(s_replay(WORKLOAD " --hbm-baseline yes", "bad", NULL), 2);
    cr_assert(s_file_has("bad.err", "--hbm-baseline: bad value 'yes'"));
}

//  Under live the baseline runs after the run (its timing would disturb a
//  run beside it) and still reports.
Test(hbm_baseline, under_live_it_runs_after_the_run)
{
    json_t *r;
    cr_assert_eq(s_replay("--limit 40 --byte-scale 1 --hbm-pool 24MiB --cpu-pool 32MiB --driver "
                          "live --hbm-baseline on",
                          "live", &r),
                 0);
    cr_assert_not_null(r);
    const json_t *b = json_object_get(r, "hbm_only");
    cr_assert_not_null(b);
    cr_assert(json_is_true(json_object_get(b, "ran")));
    cr_assert_eq(s_num(b, "finished"), 40);
    cr_assert_not_null(strstr(json_string_value(json_object_get(b, "how")), "after"));
    json_decref(r);
}
