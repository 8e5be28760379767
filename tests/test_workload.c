/*  Workloads: the Mooncake trace reader and the synthetic generator. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "replay/kvt_workload.h"

static char s_path[256];

static const char *s_write(const char *text)
{
    snprintf(s_path, sizeof s_path, "/tmp/kvt-wl-%d.jsonl", (int)getpid());
    FILE *f = fopen(s_path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
    return s_path;
}

static void s_expect_error(const char *text, const char *needle)
{
    char err[512] = "";
    kvt_workload_t *wl = kvt_workload_mooncake(s_write(text), 0, err, sizeof err);
    cr_assert_null(wl, "accepted: %s", text);
    cr_assert(strstr(err, needle) != NULL, "error '%s' lacks '%s'", err, needle);
    unlink(s_path);
}

Test(workload, reads_mooncake_lines_in_timestamp_order)
{
    char err[256];
    const char *t = "{\"timestamp\": 5, \"input_length\": 600, \"output_length\": 3, "
                    "\"hash_ids\": [0, 1]}\n"
                    "\n"
                    "{\"timestamp\": 2, \"input_length\": 10, \"output_length\": 0, "
                    "\"hash_ids\": [7], \"extra\": {\"a\": [1, 2.5, null]}}\n";
    kvt_workload_t *wl = kvt_workload_mooncake(s_write(t), 0, err, sizeof err);
    cr_assert_not_null(wl, "%s", err);
    cr_assert_eq(wl->n, 2);
    cr_assert_eq(wl->reqs[0].arrival_us, 2000);
    cr_assert_eq(wl->reqs[0].output_len, 1, "output 0 still produces the first token");
    cr_assert_eq(wl->reqs[1].input_len, 600);
    cr_assert_eq(wl->input_tokens, 610);
    kvt_workload_destroy(&wl);
    unlink(s_path);
}

Test(workload, limit_reads_only_the_first_lines)
{
    char err[256];
    const char *t = "{\"timestamp\":0,\"input_length\":1,\"output_length\":1,\"hash_ids\":[0]}\n"
                    "{\"timestamp\":1,\"input_length\":1,\"output_length\":1,\"hash_ids\":[1]}\n"
                    "garbage that is never read\n";
    kvt_workload_t *wl = kvt_workload_mooncake(s_write(t), 2, err, sizeof err);
    cr_assert_not_null(wl, "%s", err);
    cr_assert_eq(wl->n, 2);
    kvt_workload_destroy(&wl);
    unlink(s_path);
}

Test(workload, bad_lines_are_errors_naming_line_and_field)
{
    s_expect_error("{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 1, "
                   "\"hash_ids\": [1]}\n",
                   ":1: field 'hash_ids'");
    s_expect_error("{\"timestamp\": 0, \"output_length\": 1, \"hash_ids\": [1]}\n",
                   "field 'input_length': missing");
    s_expect_error("{\"timestamp\": -4, \"input_length\": 1, \"output_length\": 1, "
                   "\"hash_ids\": [1]}\n",
                   "field 'timestamp': -4 is negative");
    s_expect_error("{\"timestamp\": 0, \"input_length\": 1.5, \"output_length\": 1, "
                   "\"hash_ids\": [1]}\n",
                   "field 'input_length'");
    s_expect_error("{\"timestamp\": 0, \"input_length\": 0, \"output_length\": 1, "
                   "\"hash_ids\": []}\n",
                   "field 'input_length': 0 is out of range (1 .. ");
    s_expect_error("{\"timestamp\": 0, \"timestamp\": 1, \"input_length\": 1, "
                   "\"output_length\": 1, \"hash_ids\": [1]}\n",
                   "duplicate");
    s_expect_error("{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, "
                   "\"hash_ids\": [1]} x\n",
                   "end of file expected");
    s_expect_error("{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, "
                   "\"hash_ids\": [\"a\"]}\n",
                   "hash_ids");
    s_expect_error("{\"timestamp\":0,\"input_length\":1,\"output_length\":1,\"hash_ids\":[1]}\n"
                   "{\"timestamp\":0,\"input_length\":1\n",
                   ":2:");
    s_expect_error("", "no requests");
    s_expect_error("[1, 2]\n", "expected an object, not an array");
}

Test(workload, missing_file_is_an_error)
{
    char err[256];
    cr_assert_null(kvt_workload_mooncake("/nonexistent/trace.jsonl", 0, err, sizeof err));
    cr_assert(strstr(err, "cannot open") != NULL);
}

Test(workload, equal_prefix_ids_give_equal_tokens)
{
    char err[256];
    const char *t =
        "{\"timestamp\":0,\"input_length\":700,\"output_length\":1,\"hash_ids\":[3,4]}\n"
        "{\"timestamp\":0,\"input_length\":900,\"output_length\":1,\"hash_ids\":[3,9]}\n";
    kvt_workload_t *wl = kvt_workload_mooncake(s_write(t), 0, err, sizeof err);
    cr_assert_not_null(wl, "%s", err);
    uint32_t a[700], b[900];
    kvt_workload_tokens(wl, 0, a);
    kvt_workload_tokens(wl, 1, b);
    cr_assert_eq(memcmp(a, b, 512 * sizeof(uint32_t)), 0);
    cr_assert_neq(memcmp(a + 512, b + 512, 188 * sizeof(uint32_t)), 0);
    kvt_workload_destroy(&wl);
    unlink(s_path);
}

Test(workload, synthetic_is_seeded_sorted_and_shares_the_system_prompt)
{
    kvt_synth_cfg_t c = {.seed = 7, .sessions = 10, .turns = 4};
    kvt_workload_t *a = kvt_workload_synthetic(&c, 0);
    kvt_workload_t *b = kvt_workload_synthetic(&c, 0);
    cr_assert_eq(a->n, 40);
    cr_assert_eq(a->input_tokens, b->input_tokens);
    for (uint32_t i = 0; i < a->n; i++) {
        cr_assert_eq(a->reqs[i].arrival_us, b->reqs[i].arrival_us);
        cr_assert_eq(a->reqs[i].nids, b->reqs[i].nids);
        cr_assert_eq(memcmp(a->reqs[i].ids, b->reqs[i].ids, a->reqs[i].nids * 4), 0);
        if (i)
            cr_assert_geq(a->reqs[i].arrival_us, a->reqs[i - 1].arrival_us);
        cr_assert_eq(a->reqs[i].ids[0], 0, "every prompt starts with the system prompt");
        cr_assert_eq(a->reqs[i].nids, (a->reqs[i].input_len + 511) / 512);
    }
    c.seed = 8;
    kvt_workload_t *d = kvt_workload_synthetic(&c, 0);
    cr_assert_neq(a->input_tokens, d->input_tokens);
    kvt_workload_destroy(&a);
    kvt_workload_destroy(&b);
    kvt_workload_destroy(&d);
}

Test(workload, synthetic_turns_extend_the_previous_prompt)
{
    kvt_synth_cfg_t c = {.seed = 3, .sessions = 1, .turns = 3};
    kvt_workload_t *w = kvt_workload_synthetic(&c, 0);
    cr_assert_eq(w->n, 3);
    for (uint32_t t = 1; t < 3; t++) {
        const kvt_wreq_t *p = &w->reqs[t - 1], *q = &w->reqs[t];
        cr_assert_gt(q->nids, p->nids - 1);
        cr_assert_eq(memcmp(p->ids, q->ids, (p->nids - 1) * 4), 0);
    }
    kvt_workload_destroy(&w);
}

Test(workload, escapes_are_decoded_and_bad_ones_refused)
{
    char err[256];
    const char *t = "{\"time\\u0073tamp\": 3, \"input_length\": 1, \"output_length\": 1, "
                    "\"hash_ids\": [0], \"note\": \"a\\\"b\\\\c\\n\"}\n";
    kvt_workload_t *wl = kvt_workload_mooncake(s_write(t), 0, err, sizeof err);
    cr_assert_not_null(wl, "%s", err);
    cr_assert_eq(wl->reqs[0].arrival_us, 3000, "\\u0073 is 's': the key is timestamp");
    kvt_workload_destroy(&wl);
    unlink(s_path);
    s_expect_error("{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, "
                   "\"hash_ids\": [0], \"x\": \"bad \\q escape\"}\n",
                   "invalid escape");
    s_expect_error("{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, "
                   "\"hash_ids\": [0], \"x\": \"\\u12\"}\n",
                   "escape");
}

Test(workload, absurd_numbers_are_refused)
{
    s_expect_error("{\"timestamp\": 1e30, \"input_length\": 1, \"output_length\": 1, "
                   "\"hash_ids\": [0]}\n",
                   "field 'timestamp'");
    s_expect_error("{\"timestamp\": 2000000000000000, \"input_length\": 1, \"output_length\": 1, "
                   "\"hash_ids\": [0]}\n",
                   "field 'timestamp': 2000000000000000 is out of range");
    s_expect_error("{\"timestamp\": 0, \"input_length\": 1048577, \"output_length\": 1, "
                   "\"hash_ids\": [0]}\n",
                   "field 'input_length'");
}

Test(workload, equal_timestamps_keep_file_order)
{
    char err[256];
    const char *t = "{\"timestamp\":5,\"input_length\":1,\"output_length\":1,\"hash_ids\":[10]}\n"
                    "{\"timestamp\":1,\"input_length\":1,\"output_length\":1,\"hash_ids\":[11]}\n"
                    "{\"timestamp\":5,\"input_length\":1,\"output_length\":1,\"hash_ids\":[12]}\n"
                    "{\"timestamp\":1,\"input_length\":1,\"output_length\":1,\"hash_ids\":[13]}\n"
                    "{\"timestamp\":5,\"input_length\":1,\"output_length\":1,\"hash_ids\":[14]}\n";
    kvt_workload_t *wl = kvt_workload_mooncake(s_write(t), 0, err, sizeof err);
    cr_assert_not_null(wl, "%s", err);
    uint32_t want[5] = {11, 13, 10, 12, 14};
    for (int i = 0; i < 5; i++)
        cr_assert_eq(wl->reqs[i].ids[0], want[i], "position %d", i);
    kvt_workload_destroy(&wl);
    unlink(s_path);
}

//  Prefix affinity: a request whose routed prefix covers half its prompt
//  follows it; a new one goes to the instance with the fewest tokens.
Test(workload_route, follows_a_long_enough_prefix_and_balances_the_rest)
{
    const char *text =
        "{\"timestamp\": 0, \"input_length\": 1024, \"output_length\": 1, \"hash_ids\": [1, 2]}\n"
        "{\"timestamp\": 1, \"input_length\": 1024, \"output_length\": 1, \"hash_ids\": [3, 4]}\n"
        "{\"timestamp\": 2, \"input_length\": 1536, \"output_length\": 1, \"hash_ids\": [3, 4, "
        "5]}\n"
        "{\"timestamp\": 3, \"input_length\": 2048, \"output_length\": 1, "
        "\"hash_ids\": [1, 6, 7, 8]}\n"
        "{\"timestamp\": 4, \"input_length\": 512, \"output_length\": 1, \"hash_ids\": [9]}\n";
    char err[256];
    kvt_workload_t *wl = kvt_workload_mooncake(s_write(text), 0, err, sizeof err);
    cr_assert_not_null(wl, "%s", err);
    uint32_t inst[5];
    cr_assert_eq(kvt_workload_route(wl, 2, inst), 0);
    cr_assert_eq(inst[0], 0, "the first goes to instance 0");
    cr_assert_eq(inst[1], 1, "a new prefix goes to the least loaded");
    cr_assert_eq(inst[2], 1, "2 of 3 blocks routed to 1: it follows them");
    //  Only 1 of 4 blocks matched: balanced (instance 0 has 1024 tokens,
    //  instance 1 2560).
    cr_assert_eq(inst[3], 0);
    cr_assert_eq(inst[4], 1, "0 has 3072 tokens now, 1 has 2560");
    uint32_t again[5];
    cr_assert_eq(kvt_workload_route(wl, 2, again), 0);
    cr_assert_eq(memcmp(inst, again, sizeof inst), 0, "deterministic");
    kvt_workload_t *sub = kvt_workload_subset(wl, inst, 1);
    cr_assert_not_null(sub);
    cr_assert_eq(sub->n, 3);
    cr_assert_eq(sub->input_tokens, 1024 + 1536 + 512);
    cr_assert_eq(sub->reqs[1].nids, 3);
    cr_assert_eq(sub->reqs[1].ids[2], 5);
    kvt_workload_destroy(&sub);
    cr_assert_eq(kvt_workload_route(wl, 1, inst), 0);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(inst[i], 0);
    kvt_workload_destroy(&wl);
}
