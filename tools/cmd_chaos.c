/*  kvtier chaos — seeded fault-plan sweeps over small SIM replays
    (src/replay/kvt_chaos.h, docs/reliability.md#chaos). Every run that
    fails prints the one command that replays it and keeps its recorded
    message trace (kvtier inspect FILE). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "kvt_cli.h"
#include "kvt_cmd.h"
#include "replay/kvt_chaos.h"

static void s_usage(FILE *out)
{
    fprintf(out,
            "usage: kvtier chaos [options]\n"
            "  --plan P         one fault plan, or all (default): none, drop, duplicate, delay,\n"
            "                   reorder, lost-verdict, crash-load, crash-save, evict,\n"
            "                   disk-truncate, disk-corrupt, disk-delete, tiny-pool, mix,\n"
            "                   late-spec, lane-stall, abort, preempt\n"
            "  --seed N         run only seed N (with --plan and --model: one exact run)\n"
            "  --seeds N        seeds per plan and model (default 20)\n"
            "  --first N        the first seed (default 1)\n"
            "  --model M        dense, hybrid or both (default both)\n"
            "  --tp N           ranks, 1..3 (default: drawn from the seed, 2 or 3)\n"
            "  --stall-bound S  forward-progress bound, seconds of modelled time (default 20)\n"
            "  --record FILE    record the run's deliveries (with --seed)\n"
            "  --keep DIR       where a failing run's recorded trace goes (default .)\n"
            "  --tmp DIR        where disk tiers are made (default $TMPDIR or /tmp)\n"
            "  --verbose        one line per run\n"
            "exit: 0 every run passed, 1 a run failed, 2 bad usage\n");
}

typedef struct {
    uint64_t runs, passed, faults, requests, loads, loads_failed, wrong, wedged;
    uint64_t max_stall_us;
    uint64_t phase[5]; //  aborts + preempts sent, by the phase they hit
} s_tally_t;

int kvt_cmd_chaos(int argc, char **argv)
{
    int plan = -1; //  -1: all
    uint64_t seed = 0, seeds = 20, first = 1, n;
    bool one = false, verbose = false;
    int model = 2; //  0 dense, 1 hybrid, 2 both
    uint64_t bound_s = 20, tp = 0;
    const char *record = NULL, *keep = ".", *tmp = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            s_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--verbose")) {
            verbose = true;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "kvtier chaos: %s needs a value (see --help)\n", a);
            return 2;
        }
        const char *v = argv[++i];
        int bad = 0;
        if (!strcmp(a, "--plan")) {
            kvt_chaos_plan_t p;
            if (!strcmp(v, "all"))
                plan = -1;
            else if (kvt_chaos_plan_parse(v, &p) == 0)
                plan = (int)p;
            else
                bad = -1;
        } else if (!strcmp(a, "--seed")) {
            bad = kvt_cli_uint(v, 0, UINT64_MAX, &seed);
            one = true;
        } else if (!strcmp(a, "--seeds")) {
            bad = kvt_cli_uint(v, 1, 100000000, &seeds);
        } else if (!strcmp(a, "--first")) {
            bad = kvt_cli_uint(v, 0, UINT64_MAX / 2, &first);
        } else if (!strcmp(a, "--model")) {
            model = !strcmp(v, "dense")    ? 0
                    : !strcmp(v, "hybrid") ? 1
                    : !strcmp(v, "both")   ? 2
                                           : -1;
            bad = model < 0 ? -1 : 0;
        } else if (!strcmp(a, "--tp")) {
            bad = kvt_cli_uint(v, 1, 3, &tp);
        } else if (!strcmp(a, "--stall-bound")) {
            if ((bad = kvt_cli_uint(v, 1, 1000000, &n)) == 0)
                bound_s = n;
        } else if (!strcmp(a, "--record")) {
            record = v;
        } else if (!strcmp(a, "--keep")) {
            keep = v;
        } else if (!strcmp(a, "--tmp")) {
            tmp = v;
        } else {
            fprintf(stderr, "kvtier chaos: unknown option '%s' (see --help)\n", a);
            return 2;
        }
        if (bad != 0) {
            fprintf(stderr, "kvtier chaos: %s: bad value '%s'\n", a, v);
            return 2;
        }
    }
    if (record && !one) {
        fprintf(stderr, "kvtier chaos: --record needs --seed (one run)\n");
        return 2;
    }
    if (one) {
        first = seed;
        seeds = 1;
    }
    mkdir(keep, 0755); //  a failing run's trace goes there (an error shows on the first)
    s_tally_t tally[KVT_CHAOS_PLANS];
    memset(tally, 0, sizeof tally);
    uint64_t failed = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (uint64_t s = first; s < first + seeds; s++) {
        for (int p = 0; p < KVT_CHAOS_PLANS; p++) {
            if (plan >= 0 && p != plan)
                continue;
            for (int m = 0; m < 2; m++) {
                if (model != 2 && m != model)
                    continue;
                kvt_chaos_cfg_t c = {.plan = (kvt_chaos_plan_t)p,
                                     .seed = s,
                                     .hybrid = m == 1,
                                     .tp = (uint32_t)tp,
                                     .stall_bound_us = bound_s * 1000000ull,
                                     .tmp_dir = tmp,
                                     .record = record};
                kvt_chaos_result_t r;
                char err[512];
                if (kvt_chaos_run(&c, &r, err, sizeof err) != 0) {
                    fprintf(stderr, "kvtier chaos: %s seed %" PRIu64 ": %s\n",
                            kvt_chaos_plan_name(c.plan), s, err);
                    return 2;
                }
                s_tally_t *t = &tally[p];
                t->runs++;
                t->passed += !r.failed;
                t->faults += r.faults;
                t->requests += r.requests;
                t->loads += r.loads;
                t->loads_failed += r.loads_failed;
                t->wrong += r.wrong_resumes;
                t->wedged += r.wedged;
                for (int k = 0; k < 5; k++)
                    t->phase[k] += r.fault_phase[k];
                t->max_stall_us =
                    r.max_stall_us > t->max_stall_us ? r.max_stall_us : t->max_stall_us;
                char cmd[512];
                if (verbose)
                    printf("%-13s %-6s seed %-8" PRIu64 " %s faults %" PRIu64 " requests %" PRIu64
                           " loads %" PRIu64 " (%" PRIu64 " failed) saves expired %" PRIu64
                           " stall %.3f s events %" PRIu64 " hash %016" PRIx64 "\n",
                           kvt_chaos_plan_name(c.plan), m ? "hybrid" : "dense", s,
                           r.failed ? "FAIL" : "ok  ", r.faults, r.requests, r.loads,
                           r.loads_failed, r.saves_expired, (double)r.max_stall_us / 1e6, r.events,
                           r.trace_hash);
                if (verbose && r.desc[0])
                    printf("  plan: %s\n", r.desc);
                if (!r.failed)
                    continue;
                failed++;
                //  The same triple replays the same run: record it again.
                char path[600];
                if (!record) {
                    snprintf(path, sizeof path, "%s/chaos-%s-%s-%" PRIu64 ".trace", keep,
                             kvt_chaos_plan_name(c.plan), m ? "hybrid" : "dense", s);
                    c.record = path;
                    kvt_chaos_result_t again;
                    if (kvt_chaos_run(&c, &again, err, sizeof err) != 0)
                        snprintf(path, sizeof path, "(not recorded: %s)", err);
                }
                kvt_chaos_command(&c, cmd, sizeof cmd);
                printf("FAIL %s %s seed %" PRIu64 ":\n%s  plan:   %s\n  replay: %s\n  trace:  "
                       "kvtier inspect %s\n",
                       kvt_chaos_plan_name(c.plan), m ? "hybrid" : "dense", s, r.why,
                       r.desc[0] ? r.desc : "(nothing armed)", cmd, c.record);
                fflush(stdout);
            }
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double wall = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("%-13s %7s %7s %8s %9s %8s %8s %6s %6s %9s\n", "plan", "runs", "passed", "faults",
           "requests", "loads", "failed", "wrong", "wedged", "stall(s)");
    s_tally_t all;
    memset(&all, 0, sizeof all);
    for (int p = 0; p < KVT_CHAOS_PLANS; p++) {
        const s_tally_t *t = &tally[p];
        if (!t->runs)
            continue;
        printf("%-13s %7" PRIu64 " %7" PRIu64 " %8" PRIu64 " %9" PRIu64 " %8" PRIu64 " %8" PRIu64
               " %6" PRIu64 " %6" PRIu64 " %9.3f\n",
               kvt_chaos_plan_name((kvt_chaos_plan_t)p), t->runs, t->passed, t->faults, t->requests,
               t->loads, t->loads_failed, t->wrong, t->wedged, (double)t->max_stall_us / 1e6);
        all.runs += t->runs;
        all.passed += t->passed;
        all.faults += t->faults;
        all.requests += t->requests;
        all.wrong += t->wrong;
        all.wedged += t->wedged;
    }
    for (int p = 0; p < KVT_CHAOS_PLANS; p++) {
        const s_tally_t *t = &tally[p];
        uint64_t any = t->phase[0] + t->phase[1] + t->phase[2] + t->phase[3] + t->phase[4];
        if (any)
            printf("%-13s aborts/preempts by phase: %" PRIu64 " waiting, %" PRIu64
                   " parked on a load, %" PRIu64 " running, %" PRIu64 " mid-save, %" PRIu64
                   " finished with a save pending\n",
                   kvt_chaos_plan_name((kvt_chaos_plan_t)p), t->phase[0], t->phase[1], t->phase[2],
                   t->phase[3], t->phase[4]);
    }
    printf("total: %" PRIu64 " runs, %" PRIu64 " passed, %" PRIu64 " faults injected, %" PRIu64
           " requests, %" PRIu64 " wrong resumes, %" PRIu64 " wedged, %.1f s\n",
           all.runs, all.passed, all.faults, all.requests, all.wrong, all.wedged, wall);
    return failed ? 1 : 0;
}
