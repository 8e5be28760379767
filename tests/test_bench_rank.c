/*  `kvtier bench rank`: it runs loads through the worker and aggregator
    actors and the raw ZeroMQ relay, writes the JSON it promises (every
    field present and positive) and refuses bad values naming the flag. */
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

Test(bench_rank, writes_its_json_with_every_field_positive, .timeout = 120)
{
    char json[64], args[256];
    snprintf(json, sizeof json, "/tmp/kvt-bench-rank-%d.json", (int)getpid());
    snprintf(args, sizeof args, "bench rank --items 8 --steps 4 --rounds 1 --ranks 2 --json %s",
             json);
    cr_assert_eq(s_run(args), 0, "%s", s_err);
    json_error_t jerr;
    json_t *doc = json_load_file(json, 0, &jerr);
    unlink(json);
    cr_assert_not_null(doc, "not JSON: %s (line %d)", jerr.text, jerr.line);
    cr_assert_str_eq(json_string_value(json_object_get(doc, "bench")), "rank");
    double us = s_num(doc, "us_per_item"), base = s_num(doc, "baseline_us_per_item");
    double ratio = s_num(doc, "rank_overhead_ratio");
    cr_assert_gt(us, 0);
    cr_assert_gt(base, 0);
    cr_assert_gt(ratio, 0);
    //  One round: the ratio is that round's, i.e. the two divided.
    double off = ratio - us / base;
    cr_assert(off <= 1e-3 * ratio && -off <= 1e-3 * ratio, "ratio %f, %f / %f", ratio, us, base);
    cr_assert_eq(s_num(doc, "items"), 8 * 4);
    cr_assert_eq(s_num(doc, "ranks"), 2);
    cr_assert_eq(s_num(doc, "messages_per_item"), 5, "two specs, two completions, one verdict");
    cr_assert_gt(s_num(doc, "items_per_s"), 0);
    cr_assert_gt(s_num(doc, "cpu_us_per_item"), 0);
    cr_assert_gt(s_num(doc, "baseline_cpu_us_per_item"), 0);
    json_t *bytes = json_object_get(doc, "message_bytes");
    cr_assert(json_is_object(bytes));
    for (const char **k = (const char *[]){"load_spec", "completion", "verdict", NULL}; *k; k++)
        cr_assert_gt(s_num(bytes, *k), 0, "message_bytes.%s", *k);
    json_t *cpu = json_object_get(json_object_get(doc, "machine"), "cpu");
    cr_assert(json_is_string(cpu) && json_string_length(cpu) > 0, "machine.cpu");
    json_decref(doc);
}

Test(bench_rank, bad_values_exit_2_naming_the_flag)
{
    static const char *bad[][2] = {
        {"bench rank --items 0", "--items"}, {"bench rank --items 5000", "--items"},
        {"bench rank --ranks 9", "--ranks"}, {"bench rank --steps x", "--steps"},
        {"bench rank --rounds", "--rounds"}, {"bench rank --fast", "--fast"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(s_run(bad[i][0]), 2, "kvtier %s", bad[i][0]);
        cr_assert(strstr(s_err, bad[i][1]) != NULL, "kvtier %s: '%s' does not name %s", bad[i][0],
                  s_err, bad[i][1]);
    }
}
