/*  kvtier replay --hbm-baseline — see cmd_replay_baseline.h. */
#include "cmd_replay_baseline.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

void kvt_hbm_baseline_cfg(const kvt_replay_cfg_t *in, kvt_replay_cfg_t *out)
{
    *out = *in;
    out->cpu_pool_bytes = 0;
    out->disk_dir = NULL;
    out->remote = NULL;
    //  The main run's shell, not the workload: one progress bar, one
    //  metrics endpoint, one recording, one fault plan (the testing faults
    //  are the main run's experiment; the baseline is what HBM alone gives).
    out->progress = NULL;
    out->progress_arg = NULL;
    out->metrics = NULL;
    out->report = NULL; //  the run's time series (--report) is the run's alone
    out->record = NULL;
    out->sim_run = NULL;
    out->sim_run_arg = NULL;
    out->log_level = 0;
    out->fault_corrupt_resume = 0;
    out->fault_corrupt_state = 0;
    out->fault_miss_state = 0;
    out->fault_stale_slot = 0;
    out->fault_restore_late = 0;
    out->fault_swap_slots = 0;
    out->fault_stale_block = 0;
    out->fault_abort = 0;
    out->fault_preempt = 0;
}

bool kvt_hbm_baseline_applies(const kvt_replay_cfg_t *cfg, const char **why)
{
    const char *no = NULL;
    if (cfg->cpu_pool_bytes == 0 && !cfg->disk_dir && !cfg->remote)
        no = "the run has no tier below HBM (--cpu-pool 0): it is its own baseline";
    else if (cfg->rank_endpoint)
        no = "the ranks are at an external endpoint (--rank-endpoint): a second replay cannot "
             "reach ranks of its own";
    if (why)
        *why = no;
    return no == NULL;
}

void kvt_hbm_baseline_from_report(const kvt_replay_report_t *r, kvt_hbm_baseline_t *out)
{
    const kvt_sim_engine_result_t *e = &r->engine;
    memset(out, 0, sizeof *out);
    out->ran = true;
    out->failed = r->failed;
    snprintf(out->failures, sizeof out->failures, "%.*s", (int)sizeof out->failures - 1,
             r->failures);
    out->requests = e->requests;
    out->finished = e->finished;
    out->rejected = e->rejected;
    out->input_tokens = e->input_tokens;
    out->hit_tokens = e->hbm_hit_tokens;
    out->wrong_resumes = e->wrong_resumes;
    out->model_time_us = e->model_time_us;
    out->span_us = e->span_us;
    out->ttft_p50_ms = e->ttft_p50_ms;
    out->ttft_p90_ms = e->ttft_p90_ms;
    out->ttft_p99_ms = e->ttft_p99_ms;
    out->utilisation = e->utilisation;
    out->saturated = e->saturated;
    out->wall_s = r->wall_s;
}

//  Runs the baseline here, into *out.
static void s_run(const kvt_replay_cfg_t *cfg, kvt_hbm_baseline_t *out)
{
    memset(out, 0, sizeof *out);
    kvt_replay_report_t *rep = calloc(1, sizeof *rep);
    char err[512] = "";
    if (!rep) {
        snprintf(out->err, sizeof out->err, "out of memory");
        return;
    }
    if (kvt_replay_run(cfg, rep, err, sizeof err) != 0)
        snprintf(out->err, sizeof out->err, "%.*s", (int)sizeof out->err - 1,
                 err[0] ? err : "the replay did not start");
    else
        kvt_hbm_baseline_from_report(rep, out);
    kvt_replay_report_clear(rep);
    free(rep);
}

int kvt_hbm_baseline_start(kvt_hbm_baseline_run_t *b, const kvt_replay_cfg_t *cfg, char *err,
                           size_t errlen)
{
    memset(b, 0, sizeof *b);
    b->fd = -1;
    kvt_hbm_baseline_cfg(cfg, &b->cfg);
    if (cfg->driver != KVT_DRIVER_SIM)
        return 0; //  LIVE: after the main run (kvt_hbm_baseline_finish)
    int p[2];
    if (pipe(p) != 0) {
        snprintf(err, errlen, "cannot start the HBM-only baseline: pipe: %s", strerror(errno));
        return -1;
    }
    fflush(NULL); //  the child must not write the parent's buffered output again
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "cannot start the HBM-only baseline: fork: %s", strerror(errno));
        close(p[0]);
        close(p[1]);
        return -1;
    }
    if (pid == 0) {
        close(p[0]);
        kvt_hbm_baseline_t out;
        s_run(&b->cfg, &out);
        const char *q = (const char *)&out;
        size_t left = sizeof out;
        while (left > 0) {
            ssize_t n = write(p[1], q, left);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                _exit(1);
            q += n;
            left -= (size_t)n;
        }
        _exit(0);
    }
    close(p[1]);
    b->pid = pid;
    b->fd = p[0];
    return 0;
}

void kvt_hbm_baseline_finish(kvt_hbm_baseline_run_t *b, kvt_hbm_baseline_t *out)
{
    memset(out, 0, sizeof *out);
    if (b->fd < 0) {
        s_run(&b->cfg, out);
        return;
    }
    char *q = (char *)out;
    size_t got = 0;
    while (got < sizeof *out) {
        ssize_t n = read(b->fd, q + got, sizeof *out - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(b->fd);
    b->fd = -1;
    int st = 0;
    while (waitpid(b->pid, &st, 0) < 0 && errno == EINTR)
        ;
    b->pid = 0;
    if (got != sizeof *out) {
        memset(out, 0, sizeof *out);
        if (WIFSIGNALED(st))
            snprintf(out->err, sizeof out->err, "its process died (signal %d)", WTERMSIG(st));
        else
            snprintf(out->err, sizeof out->err, "its process ended without a result (exit %d)",
                     WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    }
    out->err[sizeof out->err - 1] = 0;
    out->failures[sizeof out->failures - 1] = 0;
}

void kvt_hbm_baseline_cancel(kvt_hbm_baseline_run_t *b)
{
    if (b->fd >= 0) {
        kill(b->pid, SIGKILL);
        close(b->fd);
        b->fd = -1;
        while (waitpid(b->pid, NULL, 0) < 0 && errno == EINTR)
            ;
        b->pid = 0;
    }
}
