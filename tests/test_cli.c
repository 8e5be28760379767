/*  The `kvtier` command: exit codes, error messages naming the bad flag,
    and that every subcommand runs and writes what it promises. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/kvt_test_cli.h"

static char s_out[65536]; //  stdout of the last run
static char s_err[65536]; //  stderr of the last run

//  Runs `kvtier ARGS`, returns its exit status.
static int s_run(const char *args)
{
    return kvt_tcli_run(args, s_out, sizeof s_out, s_err, sizeof s_err);
}

static void s_bad(const char *args, const char *needle)
{
    cr_assert_eq(s_run(args), 2, "kvtier %s: expected exit 2", args);
    cr_assert(strstr(s_err, needle) != NULL, "kvtier %s: stderr '%s' does not name '%s'", args,
              s_err, needle);
}

Test(cli, bad_flags_and_values_exit_2_naming_them)
{
    s_bad("", "usage");
    s_bad("frobnicate", "frobnicate");
    s_bad("replay --tp 0", "--tp");
    s_bad("replay --tp two", "--tp");
    s_bad("replay --limit -3", "--limit");
    s_bad("replay --driver fast", "--driver");
    s_bad("replay --hbm-pool 12XB", "--hbm-pool");
    s_bad("replay --cpu-pool", "--cpu-pool");
    s_bad("replay --hbm-pool 1KiB", "hbm-pool");
    s_bad("replay --cpu-pool 1000", "cpu-pool");
    s_bad("replay --seed 99999999999999999999999", "--seed");
    s_bad("replay --no-such-flag 1", "--no-such-flag");
    s_bad("replay --disk-dir /tmp/x --cpu-pool 0", "disk-dir");
    s_bad("replay --disk-write sometimes", "--disk-write");
    s_bad("replay --fault corrupt-resume=0", "--fault");
    s_bad("replay --fault corrupt-resume=", "--fault");
    s_bad("replay --fault corrupt-resume=3x", "--fault");
    s_bad("replay --fault flip-a-coin=1", "--fault");
    s_bad("replay --trace /nonexistent/trace.jsonl", "/nonexistent/trace.jsonl");
    s_bad("bench", "gather");
    s_bad("bench teleport", "teleport");
    s_bad("inspect", "usage");
    s_bad("replay --ranks-as-processes --driver sim", "ranks-as-processes");
    s_bad("replay --rank-endpoint tcp://127.0.0.1:5000", "rank-endpoint");
    s_bad("replay --ranks-as-processes --rank-endpoint udp://x:1", "rank-endpoint");
    s_bad("replay --wall-limit soon", "--wall-limit");
    s_bad("replay --time-scale 0", "--time-scale");
    s_bad("replay --time-scale -2", "--time-scale");
    s_bad("replay --time-scale fast", "--time-scale");
    s_bad("replay --closed-loop many", "--closed-loop");
    s_bad("replay --closed-loop 4 --time-scale 2", "closed-loop");
    s_bad("rank", "--rank");
    s_bad("rank --rank 0 --world 2", "--engine");
    s_bad("rank --rank 2 --world 2 --engine ipc:///tmp/x", "--rank 2");
    s_bad("rank --rank 0 --world 1 --engine udp://x:1", "--engine");
    s_bad("rank --rank 0 --world 1 --engine tcp://127.0.0.1:65534", "--engine");
    s_bad("rank --rank 0 --world 1 --engine ipc:///tmp/x --hbm-pool 1KiB", "hbm-pool");
    s_bad("rank --rank 0 --world 1 --engine ipc:///tmp/x --frobnicate 1", "--frobnicate");
}

//  The settings a rank process takes beyond the KV geometry (the state
//  lane, the namespace, the layout id, the timeouts), and what a replay
//  cannot run: each bad value exits 2 naming it, before anything starts.
Test(cli, rank_state_namespace_and_timeout_flags_are_checked_naming_them)
{
#define R0 "rank --rank 0 --world 1 --engine ipc:///tmp/x --connect-timeout 100 "
    s_bad(R0 "--model qwen3-next-like --state-bytes 0", "(--state-bytes)");
    s_bad(R0 "--state-bytes 5GiB", "(--state-bytes)");
    s_bad(R0 "--max-running 5000", "--max-running");
    s_bad(R0 "--namespace 0123", "--namespace");
    s_bad(R0 "--namespace 0123456789abcdef0123456789abcdeg", "--namespace");
    s_bad(R0 "--namespace 00000000000000000000000000000000", "--namespace");
    s_bad(R0 "--layout-id 0x0123456789abcd", "--layout-id");
    s_bad(R0 "--layout-id 0123456789abcdeX", "--layout-id");
    s_bad(R0 "--lane-deadline 0", "--lane-deadline");
    s_bad(R0 "--pool-ttl soon", "--pool-ttl");
    s_bad(R0 "--layout-id 0000000000000000", "--layout-id");
    s_bad(R0 "--pool-ttl 500", "(--pool-ttl): a duration needs a unit");
    s_bad(R0 "--lane-deadline 2h", "(--lane-deadline): out of range (1 ms .. 3600 s)");
    s_bad(R0 "--lookup-ttl 18446744073709551615", "--lookup-ttl");
    s_bad(R0 "--lane-deadline 5s --fence-timeout 1ms",
          "fence_timeout = 1 ms (--fence-timeout) must be above lane_deadline = 5 s "
          "(--lane-deadline)");
    s_bad(R0 "--lookup-ttl 70s", "lookup_ttl = 70 s (--lookup-ttl) must be below pool_ttl");
#undef R0
    s_bad("replay --checkpoints interval", "checkpoints: needs a model with state");
    s_bad("replay --pipeline-parallel 2", "pipeline_parallel = 2");
    s_bad("replay --tp-rank-collapse on", "tp_rank_collapse = on");
}

//  kvtier rank's settings come from the configuration's table, as
//  replay's do: a YAML file, KVTIER_* and flags each reach the rank (here
//  its disk tier, which it builds before it looks for the engine), and the
//  table's cross-checks refuse what does not go together, naming where each
//  value came from.
Test(cli, rank_settings_come_from_the_configuration_file_environment_and_flags)
{
#define R0 "rank --rank 0 --world 1 --engine ipc:///tmp/x --connect-timeout 100 "
    char path[64], args[256];
    snprintf(path, sizeof path, "/tmp/kvt-cli-rank-%d.yaml", (int)getpid());
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("disk_dir: /proc/kvt-cli-from-yaml\npool_ttl: 2s\n", f);
    fclose(f);
    snprintf(args, sizeof args, R0 "--config %s --lookup-ttl 1s", path);
    cr_assert_eq(s_run(args), 1, "the rank did not build the file's disk tier: %s", s_err);
    cr_assert(strstr(s_err, "/proc/kvt-cli-from-yaml"), "%s", s_err);
    snprintf(args, sizeof args, R0 "--config %s --lookup-ttl 3s", path);
    char want[160];
    snprintf(want, sizeof want,
             "lookup_ttl = 3 s (--lookup-ttl) must be below pool_ttl = 2 s (%s:2)", path);
    s_bad(args, want);
    unlink(path);
    s_bad("rank --rank 1 --world 1 --engine ipc:///tmp/x", "--rank 1 is not below --world 1");

    setenv("KVTIER_DISK_DIR", "/proc/kvt-cli-from-env", 1);
    cr_assert_eq(s_run(R0), 1, "%s", s_err);
    cr_assert(strstr(s_err, "/proc/kvt-cli-from-env"), "%s", s_err);
    cr_assert_eq(s_run(R0 "--disk-dir /proc/kvt-cli-from-flag"), 1, "%s", s_err);
    cr_assert(strstr(s_err, "/proc/kvt-cli-from-flag"), "the flag did not win: %s", s_err);
    unsetenv("KVTIER_DISK_DIR");
    setenv("KVTIER_LANE_DEADLINE", "6s", 1);
    s_bad(R0, "fence_timeout = 5 s (default) must be above lane_deadline = 6 s "
              "(KVTIER_LANE_DEADLINE)");
    unsetenv("KVTIER_LANE_DEADLINE");
#undef R0
}

Test(cli, bad_trace_line_exits_2_naming_line_and_field)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/kvt-cli-%d.jsonl", (int)getpid());
    FILE *f = fopen(path, "w");
    fputs("{\"timestamp\":0,\"input_length\":10,\"output_length\":2,\"hash_ids\":[1]}\n"
          "{\"timestamp\":1,\"input_length\":10,\"output_length\":2,\"hash_ids\":[1,2]}\n",
          f);
    fclose(f);
    char args[128];
    snprintf(args, sizeof args, "replay --trace %s", path);
    s_bad(args, ":2: field 'hash_ids'");
    unlink(path);
}

Test(cli, sizes_accept_binary_suffixes)
{
    cr_assert_eq(
        s_run("replay --byte-scale 1 --limit 5 --hbm-pool 8MiB --cpu-pool 33554432 --quiet"), 0,
        "%s", s_err);
    cr_assert_eq(s_run("replay --byte-scale 1 --limit 5 --hbm-pool 8m --cpu-pool 0.5GiB --quiet"),
                 2);
    cr_assert_eq(s_run("replay --byte-scale 1 --limit 5 --hbm-pool 8M --cpu-pool 1GiB --quiet"), 0,
                 "%s", s_err);
}

Test(cli, version_names_the_backends)
{
    cr_assert_eq(s_run("version"), 0);
    cr_assert(strstr(s_out, "kvtier") != NULL);
    cr_assert(strstr(s_out, "host") != NULL, "%s", s_out);
    cr_assert(strstr(s_out, "AUTO") != NULL || strstr(s_out, "select") != NULL, "%s", s_out);
}

Test(cli, replay_writes_the_json_report_and_summary, .timeout = 120)
{
    char json[64], args[256];
    snprintf(json, sizeof json, "/tmp/kvt-cli-%d.json", (int)getpid());
    snprintf(args, sizeof args, "replay --limit 40 --tp 2 --json %s", json);
    cr_assert_eq(s_run(args), 0, "%s", s_err);
    cr_assert(strstr(s_out, "wrong resumes 0") != NULL, "%s", s_out);
    char buf[65536];
    kvt_tcli_slurp(json, buf, sizeof buf);
    const char *fields[] = {"\"requests\"",
                            "\"input_tokens\"",
                            "\"hit_tokens\"",
                            "\"hbm\"",
                            "\"cpu\"",
                            "\"recomputed_tokens\"",
                            "\"recomputed_share\"",
                            "\"wrong_resumes\": 0",
                            "\"loads\"",
                            "\"completed\"",
                            "\"failed\"",
                            "\"saves\"",
                            "\"driver\": \"sim\"",
                            "\"seed\": 1",
                            "\"trace_hash\"",
                            "\"wall_s\"",
                            "\"counters\""};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        cr_assert(strstr(buf, fields[i]) != NULL, "JSON lacks %s", fields[i]);
}

static int s_count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

//  Copies s without blanks, so a JSON check does not depend on the layout.
static void s_squeeze(const char *s, char *out, size_t size)
{
    size_t n = 0;
    for (; *s && n + 1 < size; s++)
        if (*s != ' ' && *s != '\n' && *s != '\t' && *s != '\r')
            out[n++] = *s;
    out[n] = 0;
}

Test(cli, corrupted_restore_exits_1_reporting_one_wrong_resume, .timeout = 60)
{
    char json[64], args[256];
    snprintf(json, sizeof json, "/tmp/kvt-cli-%d-fault.json", (int)getpid());
    snprintf(args, sizeof args,
             "replay --byte-scale 1 --limit 160 --hbm-pool 2MiB --cpu-pool 32MiB --fault "
             "corrupt-resume=3 "
             "--log-level 0 --json %s",
             json);
    cr_assert_eq(s_run(args), 1, "a wrong resume exits 1: %s", s_err);
    cr_assert(strstr(s_out, "wrong resumes 1\n") != NULL, "%s", s_out);
    cr_assert(strstr(s_err, "FAILED: 1 wrong resumes") != NULL, "%s", s_err);
    cr_assert(strstr(s_err, "WRONG RESUME: request") != NULL, "%s", s_err);
    cr_assert_eq(s_count(s_err, "FAILED: "), 1, "the wrong resume is the only failure: %s", s_err);
    static char buf[65536], flat[65536];
    kvt_tcli_slurp(json, buf, sizeof buf);
    s_squeeze(buf, flat, sizeof flat);
    cr_assert(strstr(flat, "\"wrong_resumes\":1,") != NULL, "JSON: %s", buf);
}

//  The SIM trace hash of the last run: from the summary, checked against the
//  JSON report. 0 when the summary has none.
static uint64_t s_trace_hash(const char *json)
{
    const char *at = strstr(s_out, "trace hash");
    unsigned long long h = 0;
    cr_assert(at && sscanf(at, "trace hash %16llx", &h) == 1, "no trace hash in: %s", s_out);
    static char buf[65536], flat[65536], want[64];
    kvt_tcli_slurp(json, buf, sizeof buf);
    s_squeeze(buf, flat, sizeof flat);
    snprintf(want, sizeof want, "\"trace_hash\":\"%016llx\"", h);
    cr_assert(strstr(flat, want) != NULL, "JSON lacks %s: %s", want, buf);
    return h;
}

//  Each run is its own process: nothing of the process (its id, addresses,
//  the time) may reach the SIM driver or the actors.
Test(cli, same_seed_in_two_processes_gives_one_trace_hash_two_seeds_two, .timeout = 60)
{
    char trace[64], json[64], args[512];
    snprintf(trace, sizeof trace, "/tmp/kvt-cli-%d-det.jsonl", (int)getpid());
    snprintf(json, sizeof json, "/tmp/kvt-cli-%d-det.json", (int)getpid());
    //  One workload for every run (a trace, so the seed changes only the
    //  driver): 40 requests of 5 sessions sharing a 2-block prefix.
    FILE *f = fopen(trace, "w");
    cr_assert_not_null(f);
    for (int i = 0; i < 40; i++)
        fprintf(f,
                "{\"timestamp\":%d,\"input_length\":1736,\"output_length\":20,"
                "\"hash_ids\":[1,2,%d,%d]}\n",
                i * 200, 100 + i % 5, 1000 + i);
    fclose(f);
    uint64_t h[3];
    for (int run = 0; run < 3; run++) {
        snprintf(args, sizeof args,
                 "replay --trace %s --seed %d --byte-scale 1 --hbm-pool 2MiB --cpu-pool 32MiB "
                 "--log-level 0 "
                 "--json %s",
                 trace, run < 2 ? 7 : 8, json);
        cr_assert_eq(s_run(args), 0, "%s", s_err);
        h[run] = s_trace_hash(json);
    }
    unlink(trace);
    cr_assert_eq(h[0], h[1], "seed 7 in two processes: %016llx and %016llx",
                 (unsigned long long)h[0], (unsigned long long)h[1]);
    cr_assert_neq(h[0], h[2], "seeds 7 and 8 on one workload give one hash");
}

Test(cli, recorded_trace_is_readable_by_inspect, .timeout = 60)
{
    char rec[64], args[256];
    snprintf(rec, sizeof rec, "/tmp/kvt-cli-%d.trace", (int)getpid());
    snprintf(args, sizeof args, "replay --limit 3 --quiet --record %s", rec);
    cr_assert_eq(s_run(args), 0, "%s", s_err);
    snprintf(args, sizeof args, "inspect %s", rec);
    cr_assert_eq(s_run(args), 0, "%s", s_err);
    cr_assert(strstr(s_out, "Schedule") != NULL, "inspect output lacks message kinds");
    cr_assert(strstr(s_out, "StepPlan") != NULL);
    FILE *f = fopen(rec, "r+");
    cr_assert_not_null(f);
    fputs("garbage!", f);
    fclose(f);
    cr_assert_eq(s_run(args), 1, "a corrupt trace file is an error");
    cr_assert(strstr(s_err, "magic") != NULL, "%s", s_err);
    unlink(rec);
}

Test(cli, benchmarks_run_and_write_their_json, .timeout = 300)
{
    char json[64], args[256], buf[65536];
    snprintf(json, sizeof json, "/tmp/kvt-cli-%d-g.json", (int)getpid());
    snprintf(args, sizeof args,
             "bench gather --pool 64MiB --ring 32MiB --rounds 2 --round-ms 10 --quiet --json %s",
             json);
    cr_assert_eq(s_run(args), 0, "%s", s_err);
    kvt_tcli_slurp(json, buf, sizeof buf);
    const char *g[] = {"gather_GBps",  "scatter_GBps",  "memcpy_GBps",
                       "gather_ratio", "scatter_ratio", "sizes"};
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++)
        cr_assert(strstr(buf, g[i]) != NULL, "bench gather JSON lacks %s", g[i]);
    snprintf(json, sizeof json, "/tmp/kvt-cli-%d-s.json", (int)getpid());
    snprintf(args, sizeof args,
             "bench store --seconds 0.1 --pool 64MiB --disk-bytes 16MiB --json %s", json);
    cr_assert_eq(s_run(args), 0, "%s", s_err);
    kvt_tcli_slurp(json, buf, sizeof buf);
    const char *s[] = {"put_GBps", "get_GBps", "lookup_us_512",  "touch_ns",
                       "disk",     "sizes",    "evict_pressure", "value_over_lru"};
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++)
        cr_assert(strstr(buf, s[i]) != NULL, "bench store JSON lacks %s", s[i]);
}

//  A sweep runs once per value and its rows are what separate runs give;
//  without gnuplot the report still writes its tables.
Test(cli, sweep_writes_one_row_per_value_as_separate_runs_do, .timeout = 120)
{
    char dir[64], args[512], path[96];
    snprintf(dir, sizeof dir, "/tmp/kvt-cli-%d-sweep", (int)getpid());
    snprintf(args, sizeof args,
             "replay --byte-scale 1 --hbm-pool 2MiB --limit 60 --log-level 0 "
             "--sweep cpu_pool=0,32MiB --report %s",
             dir);
    cr_assert_eq(s_run(args), 0, "%s", s_err);
    snprintf(path, sizeof path, "%s/sweep.tsv", dir);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    char line[512], val[2][32];
    unsigned long long cpu[2] = {0, 0};
    int rows = 0;
    while (fgets(line, sizeof line, f))
        if (line[0] != '#' && rows < 2 && sscanf(line, "%31s %*u %llu", val[rows], &cpu[rows]) == 2)
            rows++;
        else if (line[0] != '#')
            rows = 99;
    fclose(f);
    cr_assert_eq(rows, 2, "one row per value");
    cr_assert_str_eq(val[0], "0");
    cr_assert_str_eq(val[1], "32MiB");
    cr_assert_eq(cpu[0], 0, "no CPU tier, no CPU hits");
    cr_assert_gt(cpu[1], 0);
    cr_assert_eq(s_run("replay --byte-scale 1 --hbm-pool 2MiB --limit 60 --log-level 0 "
                       "--cpu-pool 32MiB"),
                 0, "%s", s_err);
    char want[64];
    snprintf(want, sizeof want, "cpu %llu (", cpu[1]);
    cr_assert(strstr(s_out, want), "the separate run's hits differ: %s", s_out);
    snprintf(path, sizeof path, "%s/sweep.md", dir);
    cr_assert_eq(access(path, R_OK), 0, "the Markdown table is written");
    snprintf(path, sizeof path, "%s/sweep.png", dir);
    if (system("command -v gnuplot >/dev/null 2>&1") == 0) {
        FILE *png = fopen(path, "rb");
        cr_assert_not_null(png, "gnuplot is installed: the plot is written");
        fseek(png, 0, SEEK_END);
        cr_assert_gt(ftell(png), 1000, "a non-empty PNG");
        fclose(png);
    }
    s_bad("replay --sweep foo=1", "--sweep foo");
    s_bad("replay --report /dev/null/x", "--report: cannot create /dev/null/x");
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}
