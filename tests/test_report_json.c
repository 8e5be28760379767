/*  The `kvtier replay --json` report: written with jansson, valid JSON even
    when the trace path is not UTF-8 (U+FFFD in the value, every original
    byte in `<key>_hex`), read back here with jansson. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define KVTIER KVT_BINARY_DIR "/kvtier"

static char s_dir[64];   //  the test's temporary directory
static char s_err[4096]; //  stderr of the last run

static void s_setup(void)
{
    snprintf(s_dir, sizeof s_dir, "/tmp/kvt-rj-XXXXXX");
    cr_assert_not_null(mkdtemp(s_dir));
}

static void s_teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s_dir);
    cr_assert_eq(system(cmd), 0);
}

//  Runs kvtier with argv (NULL-terminated, no shell: the path's bytes reach
//  the command untouched); returns its exit status, its stderr in s_err.
static int s_run(char *const argv[])
{
    char errpath[128];
    snprintf(errpath, sizeof errpath, "%s/stderr", s_dir);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        int fd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int null = open("/dev/null", O_WRONLY);
        if (fd < 0 || null < 0 || dup2(fd, 2) < 0 || dup2(null, 1) < 0)
            _exit(127);
        execv(KVTIER, argv);
        _exit(127);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    FILE *f = fopen(errpath, "r");
    size_t n = f ? fread(s_err, 1, sizeof s_err - 1, f) : 0;
    s_err[n] = 0;
    if (f)
        fclose(f);
    cr_assert(WIFEXITED(status), "kvtier did not exit normally");
    return WEXITSTATUS(status);
}

//  Writes a small trace of `n` requests sharing a 2-block prefix to path.
static void s_write_trace(const char *path, int n)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "cannot create the trace");
    for (int i = 0; i < n; i++)
        fprintf(f,
                "{\"timestamp\": %d, \"input_length\": 1300, \"output_length\": 4, "
                "\"hash_ids\": [0, 1, %d]}\n",
                10 * i, 2 + i);
    cr_assert_eq(fclose(f), 0);
}

//  Runs a replay of a 6-request trace at trace_name (inside the test's
//  directory) and returns the parsed report.
static json_t *s_replay(const char *trace_name, const char *seed)
{
    char trace[256], report[128];
    snprintf(trace, sizeof trace, "%s/%s", s_dir, trace_name);
    snprintf(report, sizeof report, "%s/report.json", s_dir);
    s_write_trace(trace, 6);
    //  A small CPU pool: the default one takes seconds to set up.
    char *argv[] = {KVTIER,       "replay",     "--trace",      trace, "--json",     report,
                    "--seed",     (char *)seed, "--byte-scale", "1",   "--hbm-pool", "16MiB",
                    "--cpu-pool", "4MiB",       "--quiet",      NULL};
    cr_assert_eq(s_run(argv), 0, "kvtier replay failed: %s", s_err);
    json_error_t e;
    json_t *root = json_load_file(report, JSON_REJECT_DUPLICATES, &e);
    cr_assert_not_null(root, "the report is not valid JSON: line %d: %s", e.line, e.text);
    cr_assert(json_is_object(root));
    return root;
}

static json_int_t s_int(const json_t *obj, const char *key)
{
    const json_t *v = json_object_get(obj, key);
    cr_assert(json_is_integer(v), "'%s' is not an integer", key);
    return json_integer_value(v);
}

static const char *s_str(const json_t *obj, const char *key)
{
    const json_t *v = json_object_get(obj, key);
    cr_assert(json_is_string(v), "'%s' is not a string", key);
    return json_string_value(v);
}

//  The fields every report has, with the values a 6-request replay gives.
static void s_check_fields(const json_t *root)
{
    cr_assert_eq(s_int(root, "requests"), 6);
    cr_assert_eq(s_int(root, "finished"), 6);
    cr_assert_eq(s_int(root, "rejected"), 0);
    cr_assert_eq(s_int(root, "input_tokens"), 6 * 1300);
    cr_assert_eq(s_int(root, "wrong_resumes"), 0);
    const json_t *hits = json_object_get(root, "hit_tokens");
    cr_assert_gt(s_int(hits, "hbm"), 0, "the shared prefix hits in HBM");
    s_int(hits, "cpu");
    s_int(root, "recomputed_tokens");
    cr_assert(json_is_real(json_object_get(root, "recomputed_share")));
    s_int(json_object_get(root, "loads"), "completed");
    s_int(json_object_get(root, "loads"), "failed");
    cr_assert_gt(s_int(json_object_get(root, "saves"), "completed"), 0);
    s_int(json_object_get(root, "saves"), "failed");
    cr_assert_str_eq(s_str(root, "driver"), "sim");
    cr_assert_eq(strlen(s_str(root, "trace_hash")), 16);
    cr_assert(json_is_number(json_object_get(root, "wall_s")));
    cr_assert(json_is_number(json_object_get(root, "requests_per_wall_s")));
    //  No --instances: the default (docs/configuration.md).
    cr_assert_eq(s_int(json_object_get(root, "engine"), "instances"), 8);
    cr_assert_eq(s_int(root, "tp"), 2);
    s_int(root, "hbm_pool_bytes");
    s_int(root, "cpu_pool_bytes");
    cr_assert_gt(s_int(root, "steps"), 0);
    cr_assert(json_is_number(json_object_get(root, "model_time_s")));
    cr_assert(json_is_number(json_object_get(json_object_get(root, "ttft_ms"), "p99")));
    cr_assert(json_is_true(json_object_get(root, "quiescent")));
    const json_t *sched = json_object_get(json_object_get(root, "counters"), "scheduler");
    cr_assert_eq(s_int(sched, "sched.arrivals"), 6);
}

static int s_unhex(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

Test(report_json, non_utf8_trace_path_gives_valid_json_and_its_bytes_in_hex, .init = s_setup,
     .fini = s_teardown, .timeout = 120)
{
    json_t *root = s_replay("tr\xff"
                            "ace-\xc3\xa9.jsonl",
                            "18446744073709551615");
    s_check_fields(root);
    char raw[256], shown[256];
    snprintf(raw, sizeof raw,
             "mooncake:%s/tr\xff"
             "ace-\xc3\xa9.jsonl over 8 instances",
             s_dir);
    snprintf(shown, sizeof shown,
             "mooncake:%s/tr\xef\xbf\xbd"
             "ace-\xc3\xa9.jsonl over 8 instances",
             s_dir);
    cr_assert_str_eq(s_str(root, "workload"), shown, "the bad byte is U+FFFD, the rest kept");
    const char *hex = s_str(root, "workload_hex");
    cr_assert_eq(strlen(hex), 2 * strlen(raw));
    char back[256];
    for (size_t i = 0; i < strlen(raw); i++) {
        int hi = s_unhex(hex[2 * i]), lo = s_unhex(hex[2 * i + 1]);
        cr_assert(hi >= 0 && lo >= 0, "workload_hex is lowercase hex: %s", hex);
        back[i] = (char)(hi * 16 + lo);
    }
    back[strlen(raw)] = 0;
    cr_assert_str_eq(back, raw, "workload_hex holds the original bytes");
    cr_assert_str_eq(s_str(root, "seed"), "18446744073709551615",
                     "a seed above 2^63 - 1 is written as its digits");
    json_decref(root);
}

Test(report_json, utf8_trace_path_is_kept_as_is, .init = s_setup, .fini = s_teardown,
     .timeout = 120)
{
    json_t *root = s_replay("trace-\xc3\xa9-\xe2\x82\xac.jsonl", "7");
    s_check_fields(root);
    char raw[256];
    //  The default instances (8) are named after the trace.
    snprintf(raw, sizeof raw, "mooncake:%s/trace-\xc3\xa9-\xe2\x82\xac.jsonl over 8 instances",
             s_dir);
    cr_assert_str_eq(s_str(root, "workload"), raw);
    cr_assert_null(json_object_get(root, "workload_hex"), "no hex for a valid name");
    cr_assert_eq(s_int(root, "seed"), 7);
    json_decref(root);
}
