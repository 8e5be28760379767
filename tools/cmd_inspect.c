/*  cmd_inspect.c — `kvtier inspect FILE`: prints a trace recorded by the
    simulator (kvt_sim_trace_open) one delivery or timer per line, then the
    totals and the trace hash. Exit 0, 1 when the file is unreadable or not
    a valid trace (the message names what is wrong), 2 on bad usage. */
#include <stdio.h>
#include <string.h>

#include "kvt_cmd.h"
#include "kvtier/kvt_actor.h"

static void s_usage(FILE *out)
{
    fprintf(out, "usage: kvtier inspect FILE\n"
                 "  prints a simulator trace (virtual time, event, from, to, kind,\n"
                 "  frame bytes, XXH3-64 digest), then the totals and the trace hash\n");
}

int kvt_cmd_inspect(int argc, char **argv)
{
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        s_usage(stdout);
        return 0;
    }
    if (argc != 2) {
        fprintf(stderr, "kvtier inspect: expected exactly one trace file, got %d arguments\n",
                argc - 1);
        s_usage(stderr);
        return 2;
    }
    if (argv[1][0] == '-' && argv[1][1] != 0) {
        fprintf(stderr, "kvtier inspect: unknown option '%s'\n", argv[1]);
        s_usage(stderr);
        return 2;
    }
    return kvt_trace_print(argv[1], stdout) == 0 ? 0 : 1;
}
