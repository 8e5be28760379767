/*  `kvtier bench admit`: with tiny sizes it builds the cached state, admits
    the prompt as a load above half of it, writes the JSON it promises (every
    time positive, the ratio the two medians divided, each target's verdict
    consistent with its number) and refuses bad values naming the flag. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/kvt_test_cli.h"

static char s_err[16384]; //  stderr of the last run

//  Runs `kvtier ARGS`, returns its exit status.
static int s_run(const char *args)
{
    return kvt_tcli_run(args, NULL, 0, s_err, sizeof s_err);
}

static double s_num(json_t *doc, const char *name)
{
    json_t *v = json_object_get(doc, name);
    cr_assert(json_is_number(v), "the JSON lacks the number %s", name);
    return json_number_value(v);
}

static void s_close(double got, double want, const char *what)
{
    double off = got - want;
    cr_assert(off <= 1e-4 * want && -off <= 1e-4 * want, "%s: %f, expected %f", what, got, want);
}

//  value <= target must be what the JSON says of it.
static void s_verdict(json_t *doc, const char *value, const char *target, const char *met)
{
    json_t *m = json_object_get(doc, met);
    cr_assert(json_is_boolean(m), "the JSON lacks the boolean %s", met);
    cr_assert_eq(json_is_true(m), s_num(doc, value) <= s_num(doc, target), "%s: %f vs %s %f", met,
                 s_num(doc, value), target, s_num(doc, target));
}

Test(bench_admit, writes_its_json_with_every_time_positive_and_the_ratio_of_the_medians,
     .timeout = 120)
{
    char json[64], args[512];
    snprintf(json, sizeof json, "/tmp/kvt-bench-admit-%d.json", (int)getpid());
    snprintf(args, sizeof args,
             "bench admit --prompt-tokens 4096 --iterations 3 --hashes 4096 --stats-rounds 2 "
             "--requests 4 --steps 5 --json %s",
             json);
    cr_assert_eq(s_run(args), 0, "%s", s_err);
    json_error_t jerr;
    json_t *doc = json_load_file(json, 0, &jerr);
    unlink(json);
    cr_assert_not_null(doc, "not JSON: %s (line %d)", jerr.text, jerr.line);
    cr_assert_str_eq(json_string_value(json_object_get(doc, "bench")), "admit");
    static const char *times[] = {"admit_us_128k",
                                  "admit_cpu_us_128k",
                                  "hash_chain_us_128k",
                                  "hash_chain_cpu_us_128k",
                                  "admit_ratio",
                                  "admit_cpu_ratio",
                                  "stats_us_1m",
                                  "stats_cpu_us_1m",
                                  "stats_deep_check_us_1m",
                                  "stats_other_read_us_1m",
                                  "stats_us_1m_actor",
                                  "stats_cpu_us_1m_actor",
                                  "stats_actor_deep_read_us_1m",
                                  "stats_actor_other_read_us_1m",
                                  "step_us_c64",
                                  "step_cpu_us_c64"};
    for (size_t i = 0; i < sizeof times / sizeof times[0]; i++)
        cr_assert_gt(s_num(doc, times[i]), 0, "%s", times[i]);
    s_close(s_num(doc, "admit_ratio"),
            s_num(doc, "admit_us_128k") / s_num(doc, "hash_chain_us_128k"), "admit_ratio");
    s_close(s_num(doc, "admit_cpu_ratio"),
            s_num(doc, "admit_cpu_us_128k") / s_num(doc, "hash_chain_cpu_us_128k"),
            "admit_cpu_ratio");
    cr_assert_eq(s_num(doc, "admit_ratio_target_max"), 2);
    cr_assert_eq(s_num(doc, "stats_us_target_max"), 1);
    cr_assert_eq(s_num(doc, "step_us_target_max"), 100);
    s_verdict(doc, "admit_ratio", "admit_ratio_target_max", "admit_target_met");
    s_verdict(doc, "stats_us_1m", "stats_us_target_max", "stats_target_met");
    s_verdict(doc, "step_us_c64", "step_us_target_max", "step_target_met");
    //  The deep check walks every image; the other reads do not.
    cr_assert_gt(s_num(doc, "stats_deep_check_us_1m"), s_num(doc, "stats_other_read_us_1m"));
    json_t *geo = json_object_get(doc, "geometry");
    cr_assert(json_is_object(geo), "geometry");
    cr_assert_eq(s_num(geo, "prompt_tokens"), 4096);
    cr_assert_eq(s_num(geo, "hbm_hit_tokens"), 2048, "the hit is half the prompt");
    cr_assert_eq(s_num(geo, "block_hit_tokens"), 2048);
    cr_assert_gt(s_num(geo, "resume_tokens"), 2048, "the admission loads above the hit");
    cr_assert_eq(s_num(geo, "load_floor_tokens"), 2048, "its KV leg starts at the hit");
    cr_assert_leq(s_num(geo, "resume_tokens"), 4095);
    cr_assert_str_eq(json_string_value(json_object_get(geo, "state_from")), "tier");
    cr_assert_gt(s_num(geo, "checkpoint_interval"), 0, "a hybrid geometry");
    cr_assert_eq(s_num(geo, "stats_images"), 4096);
    cr_assert_eq(s_num(geo, "stats_actor_hbm_blocks"), 4096);
    cr_assert_eq(s_num(geo, "stats_actor_images"), 4096);
    cr_assert_eq(s_num(geo, "step_requests"), 4);
    json_t *its = json_object_get(doc, "iterations");
    cr_assert(json_is_object(its), "iterations");
    cr_assert_eq(s_num(its, "admit"), 3);
    cr_assert_eq(s_num(its, "stats_rounds"), 2);
    cr_assert_eq(s_num(its, "stats_reads"), 2 * 256);
    cr_assert_eq(s_num(its, "steps"), 5);
    //  Through the actor the deep audit is decimated: two audits over two
    //  periods of (4096 blocks + 4096 images) / 64 reads each.
    cr_assert_eq(s_num(its, "stats_actor_deep_audits"), 2);
    cr_assert_eq(s_num(its, "stats_actor_reads"), 2 * 8192 / 64);
    json_t *cpu = json_object_get(json_object_get(doc, "machine"), "cpu");
    cr_assert(json_is_string(cpu) && json_string_length(cpu) > 0, "machine.cpu");
    json_decref(doc);
}

Test(bench_admit, bad_values_exit_2_naming_the_flag)
{
    static const char *bad[][2] = {{"bench admit --prompt-tokens 1024", "--prompt-tokens"},
                                   {"bench admit --prompt-tokens 3072", "--prompt-tokens"},
                                   {"bench admit --iterations 0", "--iterations"},
                                   {"bench admit --hashes x", "--hashes"},
                                   {"bench admit --stats-rounds 2000", "--stats-rounds"},
                                   {"bench admit --requests 0", "--requests"},
                                   {"bench admit --steps", "--steps"},
                                   {"bench admit --actor-reads 2", "--actor-reads"},
                                   {"bench admit --json", "--json"},
                                   {"bench admit --fast", "--fast"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(s_run(bad[i][0]), 2, "kvtier %s", bad[i][0]);
        cr_assert(strstr(s_err, bad[i][1]) != NULL, "kvtier %s: '%s' does not name %s", bad[i][0],
                  s_err, bad[i][1]);
    }
}
