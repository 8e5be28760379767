/*  kvt_cli — strict parsing of command-line values shared by the kvtier
    subcommands. Each returns 0, or -1 when the whole string is not a valid
    value in range (no partial parses, no silent wrap-around). */
#ifndef KVT_CLI_H_INCLUDED
#define KVT_CLI_H_INCLUDED

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

//  A decimal integer in [min, max].
int kvt_cli_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out);

//  A byte size: an integer with an optional suffix B, KiB, MiB, GiB, TiB
//  (binary; K/M/G/T and KB/MB/GB/TB are read as binary too).
int kvt_cli_size(const char *s, uint64_t *out);

//  One integer flag of a benchmark's command line.
typedef struct {
    const char *flag;  //  "--steps"
    uint64_t lo, hi;   //  its range
    uint64_t multiple; //  the value must be a multiple of this (0: any)
    uint32_t *dst;     //  where the value goes
} kvt_cli_num_t;

//  Parses argv[1..argc) of the command `cmd` ("kvtier bench rank"): each
//  flag of nums[0..n) takes an integer in its range, --json takes a path
//  (*json), --help / -h prints usage to stdout and returns 1. An unknown
//  flag (usage to stderr too), a missing or bad value: a message naming
//  the flag and the value on stderr, -1. 0 when every flag parsed.
int kvt_cli_parse_nums(const char *cmd, int argc, char **argv, const kvt_cli_num_t *nums,
                       uint32_t n, const char **json, void (*usage)(FILE *out));

//  The CPU's model name from /proc/cpuinfo ("unknown" when it cannot be
//  read), for the benchmarks' reports.
void kvt_cli_cpu_model(char *cpu, size_t cap);

//  The 1-minute load average from /proc/loadavg, or -1.
double kvt_cli_loadavg(void);

//  For the benchmarks' timings, in seconds: wall time (CLOCK_MONOTONIC),
//  the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID) and the whole
//  process's (every thread, CLOCK_PROCESS_CPUTIME_ID).
double kvt_cli_now(void);
double kvt_cli_cpu_now(void);
double kvt_cli_proc_cpu_now(void);

//  The median of v[0..n), n > 0 (sorts v in place).
double kvt_cli_median(double *v, uint32_t n);

#endif
