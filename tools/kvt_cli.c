/*  kvt_cli — see kvt_cli.h. */
#include "kvt_cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static int s_digits(const char *s, const char **end, uint64_t *out)
{
    uint64_t v = 0;
    const char *p = s;
    if (*p < '0' || *p > '9')
        return -1;
    while (*p >= '0' && *p <= '9') {
        uint64_t d = (uint64_t)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
        p++;
    }
    *end = p;
    *out = v;
    return 0;
}

int kvt_cli_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    const char *end;
    uint64_t v;
    if (!s || s_digits(s, &end, &v) != 0 || *end || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

int kvt_cli_size(const char *s, uint64_t *out)
{
    const char *end;
    uint64_t v;
    if (!s || s_digits(s, &end, &v) != 0)
        return -1;
    static const struct {
        const char *suffix; //  accepted spelling
        unsigned shift;     //  power of two
    } units[] = {{"", 0},     {"b", 0},   {"k", 10},   {"kb", 10}, {"kib", 10},
                 {"m", 20},   {"mb", 20}, {"mib", 20}, {"g", 30},  {"gb", 30},
                 {"gib", 30}, {"t", 40},  {"tb", 40},  {"tib", 40}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcasecmp(end, units[i].suffix) == 0) {
            if (units[i].shift && v > (UINT64_MAX >> units[i].shift))
                return -1;
            *out = v << units[i].shift;
            return 0;
        }
    return -1;
}

int kvt_cli_parse_nums(const char *cmd, int argc, char **argv, const kvt_cli_num_t *nums,
                       uint32_t n, const char **json, void (*usage)(FILE *out))
{
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (strcmp(f, "--help") == 0 || strcmp(f, "-h") == 0) {
            usage(stdout);
            return 1;
        }
        const kvt_cli_num_t *num = NULL;
        for (uint32_t k = 0; k < n; k++)
            if (!strcmp(f, nums[k].flag))
                num = &nums[k];
        if (!num && strcmp(f, "--json") != 0) {
            fprintf(stderr, "%s: unknown flag '%s'\n", cmd, f);
            usage(stderr);
            return -1;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "%s: %s needs a value\n", cmd, f);
            return -1;
        }
        const char *v = argv[++i];
        if (!num) {
            *json = v;
            continue;
        }
        uint64_t x;
        if (kvt_cli_uint(v, num->lo, num->hi, &x) != 0) {
            fprintf(stderr, "%s: %s %s: expected an integer in [%llu, %llu]\n", cmd, f, v,
                    (unsigned long long)num->lo, (unsigned long long)num->hi);
            return -1;
        }
        if (num->multiple && x % num->multiple) {
            fprintf(stderr, "%s: %s %s: not a multiple of %llu\n", cmd, f, v,
                    (unsigned long long)num->multiple);
            return -1;
        }
        *num->dst = (uint32_t)x;
    }
    return 0;
}

void kvt_cli_cpu_model(char *cpu, size_t cap)
{
    snprintf(cpu, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof(line), f)) {
        if (strncmp(line, "model name", 10) == 0) {
            char *p = strchr(line, ':');
            if (p) {
                p += 1 + (p[1] == ' ');
                p[strcspn(p, "\n")] = 0;
                snprintf(cpu, cap, "%s", p);
            }
            break;
        }
    }
    if (f)
        fclose(f);
}

double kvt_cli_loadavg(void)
{
    double load = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (!f)
        return -1;
    if (fscanf(f, "%lf", &load) != 1)
        load = -1;
    fclose(f);
    return load;
}

static double s_clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double kvt_cli_now(void)
{
    return s_clock_s(CLOCK_MONOTONIC);
}

double kvt_cli_cpu_now(void)
{
    return s_clock_s(CLOCK_THREAD_CPUTIME_ID);
}

double kvt_cli_proc_cpu_now(void)
{
    return s_clock_s(CLOCK_PROCESS_CPUTIME_ID);
}

static int s_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double kvt_cli_median(double *v, uint32_t n)
{
    qsort(v, n, sizeof *v, s_cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
