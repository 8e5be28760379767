/*  cmd_replay_report — see cmd_replay_report.h. */
#include "cmd_replay_report.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvtier/kvt_config.h"
#include "replay/kvt_ledger.h"

// ------------------------------------------------------------ progress bar

int kvt_progress_mode_parse(const char *v, kvt_progress_mode_t *mode)
{
    if (!strcmp(v, "auto"))
        *mode = KVT_PROGRESS_AUTO;
    else if (!strcmp(v, "on"))
        *mode = KVT_PROGRESS_ON;
    else if (!strcmp(v, "off"))
        *mode = KVT_PROGRESS_OFF;
    else
        return -1;
    return 0;
}

bool kvt_progress_wanted(kvt_progress_mode_t mode, bool tty, bool quiet)
{
    return mode == KVT_PROGRESS_ON || (mode == KVT_PROGRESS_AUTO && tty && !quiet);
}

void kvt_progress_start(kvt_progress_t *self, uint32_t interval_ms)
{
    memset(self, 0, sizeof *self);
    clock_gettime(CLOCK_MONOTONIC, &self->t0);
    self->interval_ms = interval_ms;
}

static double s_since(const struct timespec *a, const struct timespec *b)
{
    return (double)(b->tv_sec - a->tv_sec) + (double)(b->tv_nsec - a->tv_nsec) / 1e9;
}

void kvt_progress_cb(void *arg, uint32_t instance, uint32_t instances, uint32_t total,
                     const kvt_sim_engine_result_t *e, uint64_t clock_us)
{
    kvt_progress_t *b = arg;
    if (instance != b->instance) {
        b->before += b->now;
        b->instance = instance;
    }
    b->now = e->finished + e->rejected;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    if (b->drawn && s_since(&b->last, &t) * 1e3 < (double)b->interval_ms)
        return;
    b->last = t;
    uint64_t done = b->before + b->now;
    if (total && done > total)
        done = total;
    double el = s_since(&b->t0, &t);
    double in = e->admitted_tokens ? (double)e->admitted_tokens : 1.0;
    double hit = 100.0 * (double)(e->hbm_hit_tokens + e->tier_hit_tokens) / in;
    hit = hit > 100.0 ? 100.0 : hit;
    char eta[32] = "?";
    if (total && done)
        snprintf(eta, sizeof eta, "%.0f s", el * (double)(total - done) / (double)done);
    int pct = total ? (int)(100 * done / total) : 0;
    char bar[21];
    for (int i = 0; i < 20; i++)
        bar[i] = i < pct / 5 ? '#' : '.';
    bar[20] = 0;
    char line[256];
    int w = snprintf(line, sizeof line,
                     "[%s] %3d%% %" PRIu64 "/%u requests, hits %.1f%%, elapsed %.0f s, ETA %s, "
                     "instance %u/%u, %.0f s modelled",
                     bar, pct, done, total, hit, el, eta, instance + 1, instances,
                     (double)clock_us / 1e6);
    if (w > (int)sizeof line - 1)
        w = (int)sizeof line - 1;
    //  Pads over a longer earlier line, so nothing of it stays on screen.
    fprintf(stderr, "\r%s%*s", line, b->width > w ? b->width - w : 0, "");
    if (w > b->width)
        b->width = w;
    b->drawn = true;
}

void kvt_progress_end(kvt_progress_t *self)
{
    if (self->drawn)
        fprintf(stderr, "\r%*s\r", self->width, "");
    self->drawn = false;
}

// ------------------------------------------------------------ the report

int kvt_replay_report_prepare(const char *dir, char *err, size_t errlen)
{
    char path[1024];
    if (!dir[0] || strlen(dir) >= sizeof path - 32) {
        snprintf(err, errlen, "--report: bad directory '%s'", dir);
        return -1;
    }
    snprintf(path, sizeof path, "%s", dir);
    //  Every missing parent, then the directory itself.
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(path, 0755) != 0 && errno != EEXIST) {
            snprintf(err, errlen, "--report: cannot create %s: %s", path, strerror(errno));
            return -1;
        }
        *p = '/';
    }
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "--report: cannot create %s: %s", dir, strerror(errno));
        return -1;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "--report: %s is not a directory", dir);
        return -1;
    }
    snprintf(path, sizeof path, "%s/.kvtier-report-probe", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "--report: cannot write in %s: %s", dir, strerror(errno));
        return -1;
    }
    close(fd);
    unlink(path);
    return 0;
}

//  dir/name opened for writing, or NULL with err.
static FILE *s_open(const char *dir, const char *name, char *err, size_t errlen)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f)
        snprintf(err, errlen, "--report: cannot write %s: %s", path, strerror(errno));
    return f;
}

//  Closes f; -1 with err when a write to it failed.
static int s_close(FILE *f, const char *dir, const char *name, int bad, char *err, size_t errlen)
{
    if (fclose(f) != 0 || bad) {
        snprintf(err, errlen, "--report: cannot write %s/%s", dir, name);
        return -1;
    }
    return 0;
}

//  The ledger's rows: hits by tier, then every loss reason.
typedef struct {
    const char *kind;  //  "hit" or "loss"
    const char *key;   //  short name (the bar chart's x tic)
    const char *label; //  words
    uint64_t tokens;   //  tokens
} s_ledger_row_t;

static uint32_t s_ledger_rows(const kvt_ledger_report_t *l, s_ledger_row_t *rows)
{
    uint32_t n = 0;
    rows[n++] = (s_ledger_row_t){"hit", "hit_hbm", "hit: HBM", l->hit_hbm};
    rows[n++] = (s_ledger_row_t){"hit", "hit_cpu", "hit: CPU tier", l->hit_cpu};
    rows[n++] = (s_ledger_row_t){"hit", "hit_disk", "hit: disk tier", l->hit_disk};
    rows[n++] = (s_ledger_row_t){"hit", "hit_remote", "hit: remote tier", l->hit_remote};
    for (int r = 0; r < KVT_LOSS_COUNT; r++)
        rows[n++] = (s_ledger_row_t){"loss", kvt_ledger_loss_key((kvt_loss_t)r),
                                     kvt_ledger_loss_label((kvt_loss_t)r), l->loss[r]};
    return n;
}

static int s_write_ledger(const char *dir, const kvt_ledger_report_t *l, char *err, size_t errlen)
{
    FILE *f = s_open(dir, "ledger.tsv", err, errlen);
    if (!f)
        return -1;
    s_ledger_row_t rows[4 + KVT_LOSS_COUNT];
    uint32_t n = s_ledger_rows(l, rows);
    double in = l->input_tokens ? (double)l->input_tokens : 1.0;
    int bad = fprintf(f, "# kind\tkey\tlabel\ttokens\tshare_pct\n") < 0;
    for (uint32_t i = 0; i < n; i++)
        bad |= fprintf(f, "%s\t%s\t%s\t%" PRIu64 "\t%.2f\n", rows[i].kind, rows[i].key,
                       rows[i].label, rows[i].tokens, 100.0 * (double)rows[i].tokens / in) < 0;
    return s_close(f, dir, "ledger.tsv", bad, err, errlen);
}

//  Points of the TTFT CDF in ttft.tsv.
#define S_CDF_POINTS 200u

static int s_write_ttft(const char *dir, const kvt_sim_engine_result_t *e, char *err, size_t errlen)
{
    FILE *f = s_open(dir, "ttft.tsv", err, errlen);
    if (!f)
        return -1;
    double q[S_CDF_POINTS];
    uint64_t v[S_CDF_POINTS];
    uint32_t n = kvt_report_ttft_cdf(e->ttft_us, e->nttft, q, v, S_CDF_POINTS);
    int bad = fprintf(f, "# quantile\tttft_ms\n") < 0;
    for (uint32_t i = 0; i < n; i++)
        bad |= fprintf(f, "%.4f\t%.3f\n", q[i], (double)v[i] / 1e3) < 0;
    return s_close(f, dir, "ttft.tsv", bad, err, errlen);
}

//  The plots' script: each plot only with data to draw.
static int s_write_plots(const char *dir, const kvt_report_sample_t *last, bool ttft, char *err,
                         size_t errlen)
{
    FILE *f = s_open(dir, "plots.gp", err, errlen);
    if (!f)
        return -1;
    int bad = fprintf(f, "# kvtier replay --report: gnuplot plots.gp (in this directory)\n"
                         "set terminal png noenhanced size 1100,500\n"
                         "set datafile separator '\\t'\n"
                         "set datafile missing '-'\n"
                         "set key outside right\n"
                         "set grid\n") < 0;
    bad |=
        fprintf(
            f,
            "\nset output 'hit_rate.png'\n"
            "set title 'Prompt tokens resumed, cumulative share of the admitted prompts, by tier'\n"
            "set xlabel 'modelled time (s)'\nset ylabel '%% of admitted prompt tokens'\n"
            "set yrange [0:100]\n"
            "plot 'series.tsv' using 1:11 with lines lw 2 title 'all tiers', \\\n"
            "  '' using 1:($18 > 0 ? 100.0 * $7 / $18 : 0) with lines title 'HBM', \\\n"
            "  '' using 1:($18 > 0 ? 100.0 * $8 / $18 : 0) with lines title 'CPU', \\\n"
            "  '' using 1:($18 > 0 ? 100.0 * $9 / $18 : 0) with lines title 'disk'\n") < 0;
    //  Occupancy: the tiers the run has and the sampler could read.
    char items[400] = "";
    size_t used = 0;
    struct {
        uint64_t u, c;
        int col;
        const char *name;
    } tiers[3] = {
        {last ? last->hbm_used : KVT_REPORT_UNKNOWN, last ? last->hbm_cap : 0, 13, "HBM"},
        {last ? last->cpu_used : KVT_REPORT_UNKNOWN, last ? last->cpu_cap : 0, 15, "CPU"},
        {last ? last->disk_used : KVT_REPORT_UNKNOWN, last ? last->disk_cap : 0, 17, "disk"}};
    for (int i = 0; i < 3; i++)
        if (tiers[i].u != KVT_REPORT_UNKNOWN && tiers[i].c)
            used += (size_t)snprintf(items + used, sizeof items - used,
                                     "%s'series.tsv' using 1:%d with lines lw 2 title '%s'",
                                     used ? ", " : "", tiers[i].col, tiers[i].name);
    if (used)
        bad |= fprintf(f,
                       "\nset output 'occupancy.png'\n"
                       "set title 'Tier occupancy (HBM: blocks referenced; CPU, disk: bytes "
                       "stored)'\nset xlabel 'modelled time (s)'\nset ylabel '%% of capacity'\n"
                       "set yrange [0:100]\nplot %s\n",
                       items) < 0;
    if (ttft)
        bad |= fprintf(f, "\nset output 'ttft_cdf.png'\n"
                          "set title 'TTFT CDF (modelled, with tiers)'\n"
                          "set xlabel 'TTFT (ms)'\nset ylabel 'share of requests'\n"
                          "set logscale x\nset yrange [0:1]\n"
                          "plot 'ttft.tsv' using 2:1 with lines lw 2 title 'with tiers'\n"
                          "unset logscale x\n") < 0;
    bad |=
        fprintf(
            f,
            "\nset output 'ledger.png'\n"
            "set title 'Loss ledger: where the ideal prefix tokens went (%% of input)'\n"
            "set xlabel ''\nset ylabel '%% of input tokens'\nset autoscale y\n"
            "set style fill solid 0.7\nset boxwidth 0.7\nset xtics rotate by -40\nset rmargin 12\n"
            "unset key\n"
            "plot 'ledger.tsv' using 0:5:xtic(2) with boxes\n") < 0;
    return s_close(f, dir, "plots.gp", bad, err, errlen);
}

//  Runs gnuplot on dir/plots.gp (output in dir/gnuplot.log). 0 when it
//  exited 0; else -1 with why.
static int s_gnuplot(const char *dir, const char *prog, uint32_t timeout_ms, char *why, size_t len)
{
    char log[1100];
    snprintf(log, sizeof log, "%s/gnuplot.log", dir);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(why, len, "cannot start gnuplot: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int nul = open("/dev/null", O_RDONLY);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
        }
        if (nul >= 0)
            dup2(nul, STDIN_FILENO);
        if (chdir(dir) != 0)
            _exit(126);
        execlp(prog, prog, "plots.gp", (char *)NULL);
        _exit(127);
    }
    int st = 0;
    uint32_t waited = 0;
    pid_t got;
    while ((got = waitpid(pid, &st, WNOHANG)) == 0 && waited < timeout_ms) {
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
        waited += 10;
    }
    if (got == 0) {
        kill(pid, SIGKILL);
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
        snprintf(why, len, "gnuplot did not finish within %u ms (killed)", timeout_ms);
        return -1;
    }
    if (got < 0) {
        snprintf(why, len, "cannot wait for gnuplot: %s", strerror(errno));
        return -1;
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) == 127) {
        snprintf(why, len,
                 "%s was not found on the PATH (install Debian's gnuplot-nox; tools/setup.sh "
                 "does)",
                 prog);
        return -1;
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        snprintf(why, len, "%s failed (%s %d; its output is in gnuplot.log)", prog,
                 WIFEXITED(st) ? "exit status" : "signal",
                 WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
        return -1;
    }
    return 0;
}

//  Whether dir/name exists and is not empty.
static bool s_nonempty(const char *dir, const char *name)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    return stat(path, &st) == 0 && st.st_size > 0;
}

static int s_md_config(FILE *f, const kvt_replay_cfg_t *c)
{
    int bad = 0;
    bad |= fprintf(f,
                   "## Configuration\n\n| setting | value |\n| --- | --- |\n"
                   "| workload | %s |\n| limit | %u%s |\n| model | %s |\n| driver | %s |\n"
                   "| tp | %u |\n| instances | %u |\n",
                   c->trace ? c->trace : "built-in synthetic", c->limit, c->limit ? "" : " (all)",
                   c->model ? c->model : "dense", c->driver == KVT_DRIVER_SIM ? "sim" : "live",
                   c->tp, c->instances ? c->instances : 1) < 0;
    bad |=
        fprintf(f,
                "| hbm_pool (real, per rank) | %.2f GiB |\n"
                "| cpu_pool (real, per rank) | %.2f GiB |\n"
                "| disk_pool (real, per rank) | %s |\n| byte scale | %u |\n",
                (double)c->hbm_pool_bytes / (1 << 30), (double)c->cpu_pool_bytes / (1 << 30),
                c->disk_dir ? "" : "none (no --disk-dir)", c->byte_scale ? c->byte_scale : 1) < 0;
    if (c->disk_dir)
        bad |= fprintf(f, "| disk_dir | %s (%.2f GiB per rank) |\n", c->disk_dir,
                       (double)c->disk_pool_bytes / (1 << 30)) < 0;
    bad |= fprintf(f,
                   "| seed | %" PRIu64 " |\n| time_scale | %g |\n| closed_loop | %u |\n"
                   "| max_running | %u |\n| step_tokens | %u |\n| block / chunk size | %u / %u |\n",
                   c->seed, c->time_scale > 0 ? c->time_scale : 1.0, c->closed_loop, c->max_running,
                   c->step_tokens, c->block_size, c->chunk_size) < 0;
    if (c->state_bytes)
        bad |= fprintf(f,
                       "| state_bytes | %" PRIu64 " |\n| checkpoint_interval | %u |\n"
                       "| state_policy | %s |\n",
                       c->state_bytes, c->checkpoint_interval,
                       kvt_config_state_policy_name((kvt_state_policy_t)c->state_policy)) < 0;
    return bad;
}

static int s_md_ledger(FILE *f, const kvt_ledger_report_t *l)
{
    s_ledger_row_t rows[4 + KVT_LOSS_COUNT];
    uint32_t n = s_ledger_rows(l, rows);
    double in = l->input_tokens ? (double)l->input_tokens : 1.0;
    char why[256] = "";
    bool holds = kvt_ledger_holds(l, why, sizeof why);
    int bad =
        fprintf(f,
                "## Loss ledger\n\nEvery input token of the trace: %" PRIu64
                "; the KV-only ideal %" PRIu64 " (%.1f %%), carried from an earlier run %" PRIu64
                "; identity %s%s%s. Rows: `ledger.tsv`; plot: `ledger.png`.\n\n"
                "| | tokens | %% of input |\n| --- | ---: | ---: |\n",
                l->input_tokens, l->ideal, 100.0 * (double)l->ideal / in, l->carried,
                holds ? "holds" : "FAILS", holds ? "" : ": ", holds ? "" : why) < 0;
    for (uint32_t i = 0; i < n; i++)
        bad |= fprintf(f, "| %s | %" PRIu64 " | %.2f |\n", rows[i].label, rows[i].tokens,
                       100.0 * (double)rows[i].tokens / in) < 0;
    return bad;
}

int kvt_replay_report_write(const kvt_replay_report_in_t *in, bool *plotted, char *err,
                            size_t errlen)
{
    *plotted = false;
    const kvt_replay_report_t *rep = in->rep;
    const kvt_sim_engine_result_t *e = &rep->engine;
    uint32_t nrows = 0;
    kvt_report_sample_t *rows = in->series ? kvt_report_merged(in->series, &nrows) : NULL;
    FILE *f = s_open(in->dir, "series.tsv", err, errlen);
    if (!f) {
        free(rows);
        return -1;
    }
    int bad = kvt_report_write_series(f, rows, nrows);
    if (s_close(f, in->dir, "series.tsv", bad, err, errlen) != 0 ||
        s_write_ttft(in->dir, e, err, errlen) != 0 ||
        s_write_ledger(in->dir, &rep->ledger, err, errlen) != 0 ||
        s_write_plots(in->dir, nrows ? &rows[nrows - 1] : NULL, e->nttft > 0, err, errlen) != 0) {
        free(rows);
        return -1;
    }
    char why[400] = "";
    const char *prog = in->gnuplot ? in->gnuplot : "gnuplot";
    if (s_gnuplot(in->dir, prog, in->gnuplot_timeout_ms ? in->gnuplot_timeout_ms : 60000, why,
                  sizeof why) == 0)
        *plotted = true;
    static const char *const png[] = {"hit_rate.png", "occupancy.png", "ttft_cdf.png",
                                      "ledger.png"};
    static const char *const what[] = {"hit share by tier over time", "tier occupancy over time",
                                       "TTFT CDF", "loss ledger"};

    f = s_open(in->dir, "report.md", err, errlen);
    if (!f) {
        free(rows);
        return -1;
    }
    bad = fprintf(f, "# kvtier replay report\n\n```\n") < 0;
    for (int i = 0; i < in->argc; i++)
        bad |= fprintf(f, "%s%s", i ? " " : "", in->argv[i]) < 0;
    bad |= fprintf(f, "\n```\n\n") < 0;
    bad |= s_md_config(f, in->cfg);
    bad |= fprintf(f, "\n## Summary\n\nAs the replay printed it:\n\n```\n%s```\n\n",
                   in->summary && in->summary[0] ? in->summary : "(not printed: --quiet)\n") < 0;
    bad |= fprintf(f,
                   "## TTFT (modelled)\n\n| | p50 ms | p90 ms | p99 ms | requests |\n"
                   "| --- | ---: | ---: | ---: | ---: |\n"
                   "| with tiers | %.1f | %.1f | %.1f | %u |\n\n"
                   "TTFT with tiers vs HBM-only: not computed. The modelled engine has no "
                   "HBM-only counterfactual; replay again with `--cpu-pool 0` (same flags "
                   "otherwise) and compare the two reports.%s\n\n",
                   e->ttft_p50_ms, e->ttft_p90_ms, e->ttft_p99_ms, e->nttft,
                   e->saturated ? " **The engine was saturated: the TTFT measures the queue.**"
                                : "") < 0;
    bad |= s_md_ledger(f, &rep->ledger);
    const kvt_report_sample_t *last = nrows ? &rows[nrows - 1] : NULL;
    bad |= fprintf(f,
                   "\n## Time series\n\n`series.tsv`: %u rows over %.1f s modelled (every "
                   "instance's samples on one time axis), `ttft.tsv`: the TTFT CDF, "
                   "`plots.gp`: the gnuplot script that draws the PNGs (rerun it with `gnuplot "
                   "plots.gp` in this directory). Columns: docs/metrics.md, \"The report\".\n\n",
                   nrows, last ? (double)last->t_us / 1e6 : 0.0) < 0;
    bad |= fprintf(f, "## Plots\n\n") < 0;
    if (*plotted) {
        for (int i = 0; i < 4; i++)
            bad |= (s_nonempty(in->dir, png[i])
                        ? fprintf(f, "![%s](%s)\n\n", what[i], png[i])
                        : fprintf(f, "(%s: no data to plot)\n\n", what[i])) < 0;
    } else
        bad |= fprintf(f,
                       "The plots were not rendered: %s. The tables above and the TSV files "
                       "are complete; `gnuplot plots.gp` in this directory renders them.\n",
                       why) < 0;
    free(rows);
    return s_close(f, in->dir, "report.md", bad, err, errlen);
}
