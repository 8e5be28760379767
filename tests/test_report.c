/*  The replay's report: the time series core (kvt_report), its sampler in
    the replay, and `kvtier replay --report DIR` / --progress end to end. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/kvt_test_cli.h"
#include "replay/kvt_ledger.h"
#include "replay/kvt_replay.h"
#include "replay/kvt_report.h"

//  The small synthetic run the end-to-end tests share: a 2 MiB HBM pool
//  spills the working set, so the CPU tier restores.
#define SMALL "replay --limit 80 --hbm-pool 2MiB --cpu-pool 32MiB --byte-scale 1 --log-level 0"

static kvt_report_sample_t s_at(uint64_t t, uint64_t v)
{
    kvt_report_sample_t s;
    memset(&s, 0, sizeof s);
    s.t_us = t;
    s.finished = v;
    s.input_tokens = 10 * v;
    s.admitted_tokens = 10 * v;
    s.hbm_tokens = v;
    s.running = s.waiting = 1;
    s.hbm_used = s.cpu_used = s.disk_used = 5;
    s.hbm_cap = s.cpu_cap = 10;
    return s;
}

// ------------------------------------------------------------ the core

Test(kvt_report, decimation_keeps_the_bound_the_first_and_the_last_sample)
{
    kvt_report_t *r = kvt_report_new(8, 10);
    cr_assert(r);
    cr_assert_eq(kvt_report_instance(r), 0);
    uint64_t added = 0, last_t = 0;
    for (uint64_t t = 0; t < 100000; t++) {
        if (!kvt_report_due(r, t))
            continue;
        kvt_report_sample_t s = s_at(t, t);
        cr_assert_eq(kvt_report_add(r, &s), 0);
        added++;
        last_t = t;
        uint32_t n;
        const kvt_report_sample_t *x = kvt_report_samples(r, 0, &n);
        cr_assert_leq(n, 8, "bound kept after %llu samples", (unsigned long long)added);
        cr_assert_eq(x[0].t_us, 0, "the first sample is kept");
        cr_assert_eq(x[n - 1].t_us, t, "the sample just added is the last");
    }
    uint32_t n;
    const kvt_report_sample_t *x = kvt_report_samples(r, 0, &n);
    cr_assert_gt(added, 16, "decimation happened (%llu samples taken)", (unsigned long long)added);
    cr_assert_gt(kvt_report_period(r, 0), 10, "the period doubled");
    //  An even spread: every gap but the last one (to the newest sample) is
    //  the same.
    for (uint32_t i = 2; i + 1 < n; i++)
        cr_assert_eq(x[i].t_us - x[i - 1].t_us, x[1].t_us - x[0].t_us, "gap %u", i);
    //  The final sample of an instance is added whether due or not.
    kvt_report_sample_t fin = s_at(last_t + 1, 7);
    cr_assert(!kvt_report_due(r, last_t + 1));
    cr_assert_eq(kvt_report_add(r, &fin), 0);
    x = kvt_report_samples(r, 0, &n);
    cr_assert_eq(x[n - 1].t_us, last_t + 1);
    kvt_report_destroy(&r);
    cr_assert_null(r);
}

Test(kvt_report, due_waits_one_period_after_the_last_sample)
{
    kvt_report_t *r = kvt_report_new(0, 100);
    cr_assert(!kvt_report_due(r, 0), "no instance started: nothing is due");
    kvt_report_sample_t s = s_at(5, 1);
    cr_assert_eq(kvt_report_add(r, &s), -1, "no instance started");
    cr_assert_eq(kvt_report_instance(r), 0);
    cr_assert(kvt_report_due(r, 5), "the first sample is due at once");
    kvt_report_add(r, &s);
    cr_assert(!kvt_report_due(r, 104));
    cr_assert(kvt_report_due(r, 105));
    kvt_report_destroy(&r);
}

Test(kvt_report, merged_sums_each_instances_last_sample_at_or_before_each_time)
{
    kvt_report_t *r = kvt_report_new(0, 1);
    kvt_report_instance(r);
    kvt_report_sample_t a0 = s_at(0, 1), a1 = s_at(20, 3);
    kvt_report_add(r, &a0);
    kvt_report_add(r, &a1);
    kvt_report_instance(r);
    kvt_report_sample_t b0 = s_at(10, 5), b1 = s_at(30, 8);
    b1.cpu_used = KVT_REPORT_UNKNOWN;
    kvt_report_add(r, &b0);
    kvt_report_add(r, &b1);
    uint32_t n;
    kvt_report_sample_t *m = kvt_report_merged(r, &n);
    cr_assert_eq(n, 4);
    uint64_t t[4] = {0, 10, 20, 30}, fin[4] = {1, 6, 8, 11}, cap[4] = {10, 20, 20, 20};
    for (uint32_t i = 0; i < 4; i++) {
        cr_assert_eq(m[i].t_us, t[i]);
        cr_assert_eq(m[i].finished, fin[i], "row %u: %llu", i, (unsigned long long)m[i].finished);
        cr_assert_eq(m[i].input_tokens, 10 * fin[i]);
        cr_assert_eq(m[i].hbm_cap, cap[i], "capacity of the instances started by then");
    }
    cr_assert_eq(m[1].hbm_used, 10);
    cr_assert_eq(m[3].cpu_used, KVT_REPORT_UNKNOWN, "an unknown gauge stays unknown");
    free(m);
    kvt_report_destroy(&r);
}

Test(kvt_report, ttft_cdf_spans_the_minimum_to_the_maximum)
{
    uint64_t v[1000];
    for (uint32_t i = 0; i < 1000; i++)
        v[i] = 100 + i;
    double q[50];
    uint64_t val[50];
    cr_assert_eq(kvt_report_ttft_cdf(v, 1000, q, val, 50), 50);
    cr_assert_eq(val[0], 100);
    cr_assert_eq(val[49], 1099);
    cr_assert(q[49] > 1.0 - 1e-9 && q[49] < 1.0 + 1e-9, "the last point is the whole set (%g)",
              q[49]);
    for (uint32_t i = 1; i < 50; i++)
        cr_assert_geq(val[i], val[i - 1]);
    cr_assert_eq(kvt_report_ttft_cdf(v, 3, q, val, 50), 3, "fewer values than points");
    cr_assert_eq(kvt_report_ttft_cdf(v, 0, q, val, 50), 0);
}

//  Fields of a TSV line (tabs + 1).
static int s_fields(const char *line)
{
    int n = 1;
    for (const char *p = line; *p && *p != '\n'; p++)
        n += *p == '\t';
    return n;
}

//  Every line of path: the header starts with '#', each has `cols` fields;
//  returns the data lines.
static int s_check_tsv(const char *path, int cols)
{
    FILE *f = fopen(path, "r");
    cr_assert(f, "%s exists", path);
    char line[4096];
    int rows = 0, lines = 0;
    while (fgets(line, sizeof line, f)) {
        cr_assert_eq(s_fields(line), cols, "%s line %d: %s", path, lines + 1, line);
        if (lines++ == 0)
            cr_assert_eq(line[0], '#', "%s starts with its header", path);
        else
            rows++;
    }
    fclose(f);
    return rows;
}

Test(kvt_report, series_tsv_has_its_columns_and_unknowns_as_dashes)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/kvt-report-tsv-%d", (int)getpid());
    FILE *f = fopen(path, "w");
    kvt_report_sample_t rows[2] = {s_at(0, 1), s_at(1000000, 2)};
    rows[1].running = KVT_REPORT_UNKNOWN;
    rows[1].disk_cap = 0;
    cr_assert_eq(kvt_report_write_series(f, rows, 2), 0);
    fclose(f);
    cr_assert_eq(s_check_tsv(path, KVT_REPORT_SERIES_COLUMNS), 2);
    char buf[4096];
    kvt_tcli_slurp(path, buf, sizeof buf);
    cr_assert(strstr(buf, "1.000000\t2\t0\t-\t1\t20\t2\t"), "%s", buf);
    cr_assert(strstr(buf, "\t50.00\t-\t-\t20\n"), "no disk tier: dashes (%s)", buf);
}

// ------------------------------------------------------------ the sampler

static void s_small(kvt_replay_cfg_t *c)
{
    kvt_replay_defaults(c);
    c->limit = 80;
    c->hbm_pool_bytes = 2ull << 20;
    c->cpu_pool_bytes = 32ull << 20;
    c->instances = 2;
    c->log_level = 0;
}

Test(replay_report, the_series_last_sample_agrees_with_the_final_counters, .timeout = 60)
{
    kvt_replay_cfg_t c;
    s_small(&c);
    kvt_report_t *series = kvt_report_new(16, 100000);
    c.report = series;
    kvt_replay_report_t *r = calloc(1, sizeof *r);
    char err[512];
    cr_assert_eq(kvt_replay_run(&c, r, err, sizeof err), 0, "%s", err);
    cr_assert(!r->failed, "%s", r->failures);
    cr_assert_gt(r->hit_cpu_tokens, 0, "the run restores from the CPU tier");
    cr_assert_eq(kvt_report_instances(series), 2);
    for (uint32_t k = 0; k < 2; k++) {
        uint32_t n;
        kvt_report_samples(series, k, &n);
        cr_assert_geq(n, 2, "instance %u sampled", k);
        cr_assert_leq(n, 16);
    }
    uint32_t n;
    kvt_report_sample_t *m = kvt_report_merged(series, &n);
    cr_assert(m);
    const kvt_report_sample_t *last = &m[n - 1];
    cr_assert_eq(last->finished, r->engine.finished);
    cr_assert_eq(last->rejected, r->engine.rejected);
    cr_assert_eq(last->input_tokens, r->engine.input_tokens);
    cr_assert_eq(last->admitted_tokens, r->engine.input_tokens, "every request admitted once");
    cr_assert_eq(last->hbm_tokens, r->engine.hbm_hit_tokens);
    cr_assert_eq(last->cpu_tokens, r->hit_cpu_tokens);
    cr_assert_eq(last->disk_tokens, r->hit_disk_tokens);
    cr_assert_eq(last->running, 0, "nothing runs at the end");
    cr_assert_eq(last->waiting, 0);
    cr_assert_neq(last->cpu_used, KVT_REPORT_UNKNOWN, "the pools were read");
    cr_assert_gt(last->cpu_used, 0, "the CPU tier holds the saves");
    cr_assert_eq(last->cpu_cap, 2 * c.cpu_pool_bytes, "two instances' pools");
    bool hbm_seen = false;
    for (uint32_t i = 0; i < n; i++)
        hbm_seen |= m[i].hbm_used != KVT_REPORT_UNKNOWN && m[i].hbm_used > 0;
    cr_assert(hbm_seen, "the scheduler's HBM gauge was read");
    free(m);
    kvt_replay_report_clear(r);
    free(r);
    kvt_report_destroy(&series);
}

Test(replay_report, sampling_does_not_change_the_run, .timeout = 60)
{
    kvt_replay_cfg_t c;
    s_small(&c);
    kvt_replay_report_t *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
    char err[512];
    cr_assert_eq(kvt_replay_run(&c, a, err, sizeof err), 0, "%s", err);
    kvt_report_t *series = kvt_report_new(4, 1000); //  a small cap: many decimations
    c.report = series;
    cr_assert_eq(kvt_replay_run(&c, b, err, sizeof err), 0, "%s", err);
    cr_assert_eq(a->trace_hash, b->trace_hash, "the same deliveries");
    cr_assert_eq(a->events, b->events);
    cr_assert_eq(a->engine.hbm_hit_tokens, b->engine.hbm_hit_tokens);
    cr_assert_eq(a->hit_cpu_tokens, b->hit_cpu_tokens);
    cr_assert_eq(a->engine.model_time_us, b->engine.model_time_us);
    kvt_replay_report_clear(a);
    kvt_replay_report_clear(b);
    free(a);
    free(b);
    kvt_report_destroy(&series);
}

// ------------------------------------------------------------ the command

static char s_out[1 << 16], s_out2[1 << 16], s_err[1 << 16];

//  A fresh report directory for this test process (its parent missing).
static void s_dir(char *dir, size_t len, const char *tag)
{
    snprintf(dir, len, "/tmp/kvt-report-%d-%s/sub", (int)getpid(), tag);
}

static bool s_exists(const char *dir, const char *name, bool nonempty)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    return stat(path, &st) == 0 && (!nonempty || st.st_size > 0);
}

static void s_read(const char *dir, const char *name, char *buf, size_t cap)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    cr_assert(f, "%s exists", path);
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = 0;
    fclose(f);
}

//  stdout without its wall line (the one line that differs between runs).
static void s_drop_wall(char *out)
{
    char *w = strstr(out, "  wall ");
    if (w) {
        char *nl = strchr(w, '\n');
        memmove(w, nl ? nl + 1 : w + strlen(w), strlen(nl ? nl + 1 : "") + 1);
    }
}

static bool s_have_gnuplot(void)
{
    return system("command -v gnuplot >/dev/null 2>&1") == 0;
}

Test(replay_report, report_files_exist_and_parse, .timeout = 60)
{
    char dir[256], cmd[600], md[1 << 15];
    s_dir(dir, sizeof dir, "files");
    snprintf(cmd, sizeof cmd, SMALL " --report %s", dir);
    cr_assert_eq(kvt_tcli_run(cmd, s_out, sizeof s_out, s_err, sizeof s_err), 0, "%s", s_err);
    int rows = s_check_tsv(strcat(strcpy(md, dir), "/series.tsv"), KVT_REPORT_SERIES_COLUMNS);
    cr_assert_gt(rows, 2);
    cr_assert_gt(s_check_tsv(strcat(strcpy(md, dir), "/ttft.tsv"), 2), 2);
    cr_assert_eq(s_check_tsv(strcat(strcpy(md, dir), "/ledger.tsv"), 5), 4 + KVT_LOSS_COUNT,
                 "4 hits and every loss reason");
    cr_assert(s_exists(dir, "plots.gp", true));
    s_read(dir, "report.md", md, sizeof md);
    cr_assert(strstr(md, "--report"), "the command line");
    cr_assert(strstr(md, "## Configuration"));
    cr_assert(strstr(md, "  hit tokens    hbm "), "the summary as printed");
    cr_assert(strstr(md, "| with tiers |"), "the TTFT row");
    cr_assert(strstr(md, "## Loss ledger"));
    cr_assert(strstr(md, "identity holds"));
    cr_assert(strstr(md, "HBM-only"), "says whether the counterfactual exists");
    if (s_have_gnuplot()) {
        static const char *const png[] = {"hit_rate.png", "occupancy.png", "ttft_cdf.png",
                                          "ledger.png"};
        for (int i = 0; i < 4; i++) {
            cr_assert(s_exists(dir, png[i], true), "%s rendered", png[i]);
            cr_assert(strstr(md, png[i]), "report.md shows %s", png[i]);
        }
    }
}

Test(replay_report, the_summary_is_the_same_with_and_without_report, .timeout = 60)
{
    char dir[256], cmd[600];
    s_dir(dir, sizeof dir, "same");
    cr_assert_eq(kvt_tcli_run(SMALL, s_out, sizeof s_out, s_err, sizeof s_err), 0, "%s", s_err);
    snprintf(cmd, sizeof cmd, SMALL " --report %s --progress on --progress-interval 1", dir);
    cr_assert_eq(kvt_tcli_run(cmd, s_out2, sizeof s_out2, s_err, sizeof s_err), 0, "%s", s_err);
    cr_assert(strstr(s_out, "trace hash"));
    s_drop_wall(s_out);
    s_drop_wall(s_out2);
    cr_assert_str_eq(s_out, s_out2);
}

Test(replay_report, without_gnuplot_the_report_is_written_and_the_run_exits_0, .timeout = 60)
{
    char dir[256], cmd[600], md[1 << 15];
    s_dir(dir, sizeof dir, "nognuplot");
    setenv("PATH", "/nonexistent", 1);
    snprintf(cmd, sizeof cmd, SMALL " --report %s", dir);
    cr_assert_eq(kvt_tcli_run(cmd, s_out, sizeof s_out, s_err, sizeof s_err), 0, "%s", s_err);
    s_read(dir, "report.md", md, sizeof md);
    cr_assert(strstr(md, "not rendered: gnuplot was not found"), "%s", md);
    cr_assert(!strstr(md, "![hit share"), "no image links");
    cr_assert(s_exists(dir, "series.tsv", true));
    cr_assert(s_exists(dir, "ledger.tsv", true));
    cr_assert(!s_exists(dir, "hit_rate.png", false));
}

Test(replay_report, a_failing_gnuplot_is_named_in_the_report, .timeout = 60)
{
    char dir[256], bin[256], cmd[700], md[1 << 15];
    s_dir(dir, sizeof dir, "badgnuplot");
    snprintf(bin, sizeof bin, "/tmp/kvt-report-%d-bin", (int)getpid());
    mkdir(bin, 0755);
    snprintf(cmd, sizeof cmd, "%s/gnuplot", bin);
    FILE *f = fopen(cmd, "w");
    fprintf(f, "#!/bin/sh\necho broken >&2\nexit 3\n");
    fclose(f);
    chmod(cmd, 0755);
    char path[600];
    snprintf(path, sizeof path, "%s:/usr/bin:/bin", bin);
    setenv("PATH", path, 1);
    snprintf(cmd, sizeof cmd, SMALL " --report %s", dir);
    cr_assert_eq(kvt_tcli_run(cmd, s_out, sizeof s_out, s_err, sizeof s_err), 0, "%s", s_err);
    s_read(dir, "report.md", md, sizeof md);
    cr_assert(strstr(md, "not rendered: gnuplot failed (exit status 3"), "%s", md);
    s_read(dir, "gnuplot.log", md, sizeof md);
    cr_assert(strstr(md, "broken"), "its output is kept");
}

Test(replay_report, an_unwritable_report_dir_is_refused_before_the_replay, .timeout = 30)
{
    cr_assert_eq(
        kvt_tcli_run(SMALL " --report /dev/null/report", s_out, sizeof s_out, s_err, sizeof s_err),
        2);
    cr_assert(strstr(s_err, "--report: cannot create /dev/null"), "%s", s_err);
    cr_assert_str_eq(s_out, "", "nothing was replayed");
}

Test(replay_report, bad_progress_values_are_refused, .timeout = 30)
{
    cr_assert_eq(
        kvt_tcli_run(SMALL " --progress sometimes", s_out, sizeof s_out, s_err, sizeof s_err), 2);
    cr_assert(strstr(s_err, "--progress: bad value 'sometimes'"), "%s", s_err);
    cr_assert_eq(
        kvt_tcli_run(SMALL " --progress-interval 0", s_out, sizeof s_out, s_err, sizeof s_err), 2);
    cr_assert(strstr(s_err, "--progress-interval: bad value '0'"), "%s", s_err);
    cr_assert_eq(
        kvt_tcli_run(SMALL " --progress-interval 10ms", s_out, sizeof s_out, s_err, sizeof s_err),
        2);
    cr_assert(strstr(s_err, "--progress-interval"), "%s", s_err);
}

Test(replay_report, progress_on_draws_on_stderr_and_erases_it, .timeout = 60)
{
    cr_assert_eq(kvt_tcli_run(SMALL " --progress on --progress-interval 1", s_out, sizeof s_out,
                              s_err, sizeof s_err),
                 0);
    cr_assert(strstr(s_err, "/80 requests"), "the bar: %s", s_err);
    cr_assert(strstr(s_err, "ETA"), "%s", s_err);
    cr_assert(strstr(s_err, "elapsed"), "%s", s_err);
    cr_assert(!strstr(s_out, "ETA"), "never on stdout");
    //  Erased at the end: the last thing on stderr is a blanked line.
    size_t n = strlen(s_err);
    cr_assert_gt(n, 2);
    cr_assert_eq(s_err[n - 1], '\r', "the line is erased (ends with \\r)");
}

Test(replay_report, progress_auto_is_off_when_stderr_is_not_a_terminal, .timeout = 60)
{
    cr_assert_eq(kvt_tcli_run(SMALL, s_out, sizeof s_out, s_err, sizeof s_err), 0);
    cr_assert(!strstr(s_err, "ETA"), "%s", s_err);
    cr_assert_eq(kvt_tcli_run(SMALL " --progress off", s_out, sizeof s_out, s_err, sizeof s_err),
                 0);
    cr_assert(!strstr(s_err, "ETA"), "%s", s_err);
}

//  Redraws of the bar on stderr: lines that name the requests.
static int s_draws(const char *err)
{
    int n = 0;
    for (const char *p = err; (p = strstr(p, " requests, hits ")) != NULL; p++)
        n++;
    return n;
}

Test(replay_report, progress_interval_spaces_the_redraws, .timeout = 60)
{
    cr_assert_eq(kvt_tcli_run(SMALL " --progress on --progress-interval 3600000", s_out,
                              sizeof s_out, s_err, sizeof s_err),
                 0);
    cr_assert_eq(s_draws(s_err), 1, "an hour apart: only the first draw (%s)", s_err);
    cr_assert_eq(kvt_tcli_run(SMALL " --progress on --progress-interval 1", s_out, sizeof s_out,
                              s_err, sizeof s_err),
                 0);
    cr_assert_gt(s_draws(s_err), 1, "1 ms apart: redrawn as the run goes");
}
