/*  kvtier — command-line entry point: replay, bench, inspect, version. */
#include <stdio.h>
#include <string.h>

#include "kvt_cmd.h"

static void s_usage(FILE *out)
{
    fprintf(out, "usage: kvtier <command> [options]\n"
                 "\n"
                 "commands:\n"
                 "  replay [--trace FILE] ...   replay a trace through the cache (default: a\n"
                 "                              seeded synthetic workload); --help for options\n"
                 "  rank --rank R --world N --engine ENDPOINT ...  one rank of a replay as\n"
                 "                              its own process (--help for options)\n"
                 "  bench gather [--json PATH]  device gather/scatter throughput vs memcpy\n"
                 "  bench store [--json PATH]   tier store put/get/lookup/touch and disk\n"
                 "  bench rank [--json PATH]    per-item cost of the worker and aggregator\n"
                 "                              actors vs a raw ZeroMQ relay\n"
                 "  bench admit [--json PATH]   scheduler core: admission vs its hash chain,\n"
                 "                              state-index stats read, one step\n"
                 "  chaos [--plan P] [--seeds N] seeded fault-plan sweeps over small simulated\n"
                 "                              replays (--help for options)\n"
                 "  inspect FILE                print a recorded simulator trace\n"
                 "  keygen PATH                 a CURVE certificate for authenticated links\n"
                 "  version                     version and device backends\n");
}

#if defined(__SANITIZE_THREAD__)
//  libzmq is not instrumented: its internal hand-offs between threads look
//  like races to ThreadSanitizer (the same suppression as the TSan test
//  runner, tests/tsan/kvt_tsan_main.c; see docs/runtime.md §4.6).
const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void)
{
    return "called_from_lib:libzmq.so\n";
}
#endif

int main(int argc, char **argv)
{
    if (argc < 2) {
        s_usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "replay") == 0)
        return kvt_cmd_replay(argc - 1, argv + 1);
    if (strcmp(cmd, "rank") == 0)
        return kvt_cmd_rank(argc - 1, argv + 1);
    if (strcmp(cmd, "keygen") == 0)
        return kvt_cmd_keygen(argc - 1, argv + 1);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0)
        return kvt_cmd_version(argc - 1, argv + 1);
    if (strcmp(cmd, "chaos") == 0)
        return kvt_cmd_chaos(argc - 1, argv + 1);
    if (strcmp(cmd, "inspect") == 0)
        return kvt_cmd_inspect(argc - 1, argv + 1);
    if (strcmp(cmd, "bench") == 0) {
        if (argc < 3) {
            fprintf(stderr, "kvtier bench: expected 'gather', 'store', 'rank' or 'admit'\n");
            return 2;
        }
        if (strcmp(argv[2], "gather") == 0)
            return kvt_cmd_bench_gather(argc - 2, argv + 2);
        if (strcmp(argv[2], "store") == 0)
            return kvt_cmd_bench_store(argc - 2, argv + 2);
        if (strcmp(argv[2], "rank") == 0)
            return kvt_cmd_bench_rank(argc - 2, argv + 2);
        if (strcmp(argv[2], "admit") == 0)
            return kvt_cmd_bench_admit(argc - 2, argv + 2);
        fprintf(stderr,
                "kvtier bench: unknown benchmark '%s' (expected gather, store, rank or admit)\n",
                argv[2]);
        return 2;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        s_usage(stdout);
        return 0;
    }
    fprintf(stderr, "kvtier: unknown command '%s'\n", cmd);
    s_usage(stderr);
    return 2;
}
