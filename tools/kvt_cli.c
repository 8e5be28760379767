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
