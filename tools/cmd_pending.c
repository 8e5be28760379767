/*  TEMPORARY during bring-up: weak placeholders for subcommands whose module
    has not landed yet. Each module's real definition overrides these. This
    file is deleted before the walking skeleton is signed off. */
#include <stdio.h>

#include "kvt_cmd.h"

#define PENDING(fn, what)                                       \
    __attribute__((weak)) int fn(int argc, char **argv)         \
    {                                                           \
        (void)argc;                                             \
        (void)argv;                                             \
        fprintf(stderr, "kvtier: %s is not built yet\n", what); \
        return 2;                                               \
    }

PENDING(kvt_cmd_replay, "replay")
PENDING(kvt_cmd_version, "version")
PENDING(kvt_cmd_inspect, "inspect")
PENDING(kvt_cmd_bench_gather, "bench gather")
PENDING(kvt_cmd_bench_store, "bench store")
