/*  kvt_replay — see kvt_replay.h. */
#include "kvt_replay.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <czmq.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "actors/aggregator/kvt_aggregator.h"
#include "actors/common/kvt_prefix.h"
#include "replay/kvt_rank.h"
#include "replay/kvt_sim_runner.h"
#include "actors/scheduler/kvt_scheduler.h"
#include "kvtier/kvt_config.h"
#include "kvtier/kvt_gpu.h"
#include "kvtier/kvt_storage.h"

#define S_MAX_TP   64          //  ranks a replay may simulate in one process
#define S_SLICE_NS 50000000ull //  LIVE: how often the run loop checks ranks, signals, the limit
#define S_REAP_MS  5000        //  a rank process gets this long to stop after SIGTERM, then SIGKILL
//  Any of the state-carry testing faults is set.
#define S_STATE_FAULTS(c) \
    ((c)->fault_stale_slot || (c)->fault_restore_late || (c)->fault_swap_slots)

void kvt_replay_defaults(kvt_replay_cfg_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->driver = KVT_DRIVER_SIM;
    cfg->seed = 1;
    cfg->time_scale = 1.0;
    cfg->tp = 2;
    cfg->hbm_pool_bytes = 16ull << 20;
    cfg->cpu_pool_bytes = 512ull << 20;
    cfg->disk_pool_bytes = 4ull << 30;
    cfg->layers = 4;
    cfg->planes = 2;
    cfg->token_bytes = 16;
    cfg->block_size = 16;
    cfg->chunk_size = 256;
    cfg->max_running = 64;
    cfg->step_tokens = 4096;
    cfg->lookup_pin = true;
    cfg->grid_share_pct = 2;
    cfg->byte_scale = 1;
    cfg->sim_bw_Bps = 0; //  derived (kvt_replay_sim_bw)
    cfg->sim_lat_ns = 5000;
    cfg->log_level = 1;
    cfg->wall_limit_ms = 600000;
}

static size_t s_block_bytes(const kvt_replay_cfg_t *c)
{
    return (size_t)c->planes * c->layers * c->block_size * c->token_bytes;
}

int kvt_replay_hbm_split(const kvt_replay_cfg_t *c, uint64_t hbm_stored, kvt_sched_hbm_split_t *out,
                         char *err, size_t errlen)
{
    size_t bb = s_block_bytes(c);
    uint64_t blocks = hbm_stored / bb;
    memset(out, 0, sizeof *out);
    if (!c->state_bytes) {
        out->kv_blocks = blocks > UINT32_MAX ? UINT32_MAX : (uint32_t)blocks;
        return 0;
    }
    uint32_t min_kv = 2 * c->chunk_size / c->block_size;
    if (kvt_sched_hbm_split(blocks > UINT32_MAX ? UINT32_MAX : (uint32_t)blocks, bb, c->state_bytes,
                            c->max_running, min_kv, out, err, errlen) != 0) {
        uint64_t per = (c->state_bytes + bb - 1) / bb * bb;
        snprintf(err, errlen,
                 "hbm-pool: %llu bytes stored (byte scale %u) cannot hold the %u state slots "
                 "(max-running x %llu bytes stored = %llu bytes) and two chunks of KV (%llu "
                 "bytes); raise --hbm-pool or lower --max-running",
                 (unsigned long long)hbm_stored, c->byte_scale > 1 ? c->byte_scale : 1,
                 c->max_running, (unsigned long long)per, (unsigned long long)per * c->max_running,
                 (unsigned long long)min_kv * bb);
        return -1;
    }
    return 0;
}

bool kvt_replay_paced(const kvt_replay_cfg_t *c)
{
    return c->pace == KVT_ON || (c->pace == KVT_AUTO && c->driver == KVT_DRIVER_SIM);
}

uint64_t kvt_replay_sim_bw(const kvt_replay_cfg_t *c, const kvt_cost_cfg_t *cost)
{
    if (c->sim_bw_Bps)
        return c->sim_bw_Bps;
    if (!kvt_replay_paced(c))
        return 25000000000ull;
    //  A stored byte stands for kv_token_bytes / (planes x layers x
    //  token_bytes) real ones (whatever the byte scale: the pools' sizes
    //  scale, a chunk's stored bytes do not), and a paced step spends its
    //  modelled time on the driver's clock: a stored chunk then crosses in
    //  the time its real bytes take on the host link.
    double stored = (double)c->planes * c->layers * c->token_bytes;
    double link = cost->h2d_GBps < cost->d2h_GBps ? cost->h2d_GBps : cost->d2h_GBps;
    double real_per_stored =
        stored > 0 && cost->kv_token_bytes > 0 ? cost->kv_token_bytes / stored : 1;
    double bw = link * 1e9 / real_per_stored;
    return bw >= 1e15 ? 1000000000000000ull : bw < 1e6 ? 1000000ull : (uint64_t)llround(bw);
}

uint32_t kvt_replay_byte_scale(const kvt_replay_cfg_t *c)
{
    kvt_cost_cfg_t cost;
    kvt_cost_defaults(&cost, c->model, c->tp);
    double stored = (double)c->planes * c->layers * c->token_bytes;
    double k = stored > 0 ? cost.kv_token_bytes / stored + 0.5 : 1;
    return k < 1 ? 1u : k > (1u << 20) ? (1u << 20) : (uint32_t)k;
}

void kvt_replay_real_sizes(const char *model, uint64_t *hbm, uint64_t *cpu, uint64_t *disk)
{
    //  What the named GPU leaves for KV once the weights at TP 2 are in
    //  (docs/configuration.md); the CPU and disk tiers of a host of 8 GPUs.
    *hbm = 56ull << 30;
    if (model && !strcmp(model, "qwen3-next-like"))
        *hbm = 32ull << 30;
    else if (model && !strcmp(model, "kimi-linear-like"))
        *hbm = 64ull << 30;
    *cpu = 128ull << 30;
    *disk = 1ull << 40;
}

int kvt_replay_cost(const kvt_replay_cfg_t *c, kvt_cost_cfg_t *cost, char *err, size_t errlen)
{
    kvt_cost_defaults(cost, c->model, c->tp);
    if (!c->state_bytes)
        cost->state_bytes = 0;
    const char *p = c->cost;
    while (p && *p) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char one[128];
        if (len == 0 || len >= sizeof one) {
            snprintf(err, errlen, "cost: bad knob list '%s' (k=v,k=v)", c->cost);
            return -1;
        }
        memcpy(one, p, len);
        one[len] = 0;
        if (kvt_cost_set(cost, one, err, errlen) != 0)
            return -1;
        p = comma ? comma + 1 : p + len;
    }
    return 0;
}

//  What a pool stores: its size over the byte scale.
static uint64_t s_stored(const kvt_replay_cfg_t *c, uint64_t bytes)
{
    return c->byte_scale > 1 ? bytes / c->byte_scale : bytes;
}

int kvt_replay_validate(const kvt_replay_cfg_t *c, char *err, size_t errlen)
{
    const char *bad = NULL;
    bool state_fault = c->fault_corrupt_state || c->fault_miss_state || S_STATE_FAULTS(c);
    if (c->driver != KVT_DRIVER_SIM && c->driver != KVT_DRIVER_LIVE)
        bad = "driver: must be sim or live";
    else if (!isfinite(c->time_scale) || c->time_scale < 0 || c->time_scale > 1000)
        bad = "time-scale: must be a number in > 0 .. 1000";
    else if (c->closed_loop > 65536)
        bad = "closed-loop: must be in 0..65536 (0 = open loop)";
    else if (c->closed_loop && c->time_scale != 0 && c->time_scale != 1.0)
        bad = "closed-loop: arrivals follow completions, so --time-scale (which stretches "
              "timestamps) must stay 1";
    else if (c->tp < 1 || c->tp > S_MAX_TP)
        bad = "tp: must be in 1..64";
    else if (c->layers < 1 || c->layers > 1024)
        bad = "layers: must be in 1..1024";
    else if (c->planes < 1 || c->planes > KVT_RUNNER_MAX_PLANES)
        bad = "planes: must be in 1..8";
    else if (c->token_bytes < 1 || c->token_bytes > (1u << 20))
        bad = "token_bytes: must be in 1..1 MiB";
    else if (c->block_size < 1 || c->block_size > 1024)
        bad = "block_size: must be in 1..1024";
    else if (c->chunk_size < c->block_size || c->chunk_size % c->block_size)
        bad = "chunk_size: must be a multiple of block_size";
    else if (c->max_running < 1 || c->max_running > KVT_MSG_MAX_ENTRIES)
        bad = "max-running: must be in 1..4096 (entries one step message carries)";
    else if (c->step_tokens < c->max_running)
        bad = "step_tokens: must be at least max_running";
    else if (c->byte_scale > (1u << 20))
        bad = "byte-scale: must be in 1..1048576";
    else if (c->instances > 64)
        bad = "instances: must be in 1..64";
    else if (c->ranks_as_processes && c->driver != KVT_DRIVER_LIVE)
        bad = "ranks-as-processes: needs the live driver (--driver live)";
    else if (c->rank_endpoint && !c->ranks_as_processes)
        bad = "rank-endpoint: needs --ranks-as-processes";
    else if (c->state_bytes > (1ull << 32))
        bad = "state-bytes: must be at most 4 GiB per request per rank";
    else if (c->checkpoint_interval % c->chunk_size)
        bad = "checkpoint-interval: must be a multiple of chunk_size";
    else if (c->rank_endpoint && strncmp(c->rank_endpoint, "tcp://", 6) != 0 &&
             strncmp(c->rank_endpoint, "ipc://", 6) != 0)
        bad = "rank-endpoint: must be ipc://DIR or tcp://HOST:PORT";
    else if (state_fault && !c->state_bytes)
        bad = "fault: corrupt-state / miss-state / stale-slot / restore-late / swap-slots need a "
              "model with state (state-bytes > 0)";
    else if (c->state_policy >= KVT_STATE_POLICIES)
        bad = "state-policy: must be kvtier, interval, every-chunk or marconi";
    else if (c->interval_checkpoints && !c->state_bytes)
        bad = "checkpoints: needs a model with state (--model qwen3-next-like | "
              "kimi-linear-like)";
    else if (c->fault_stale_block && c->ranks_as_processes)
        bad = "fault: stale-block needs the ranks as threads";
    else if (state_fault && c->ranks_as_processes)
        bad = "fault: corrupt-state / miss-state / stale-slot / restore-late / swap-slots need "
              "the ranks as threads";
    if (bad) {
        snprintf(err, errlen, "%s", bad);
        return -1;
    }
    kvt_cost_cfg_t cost;
    if (kvt_replay_cost(c, &cost, err, errlen) != 0)
        return -1;
    //  The sizes below are what the pools store (the byte scale applied).
    uint64_t hbm_pool = s_stored(c, c->hbm_pool_bytes), cpu_pool = s_stored(c, c->cpu_pool_bytes),
             disk_pool = s_stored(c, c->disk_pool_bytes);
    size_t bb = s_block_bytes(c);
    uint64_t blocks = hbm_pool / bb;
    uint64_t min_blocks = 2ull * c->chunk_size / c->block_size;
    if (blocks < min_blocks || blocks > UINT32_MAX / 2) {
        snprintf(err, errlen,
                 "hbm-pool: %llu bytes stored (byte scale %u) gives %llu blocks of %zu bytes; need "
                 "%llu..%u",
                 (unsigned long long)hbm_pool, c->byte_scale ? c->byte_scale : 1,
                 (unsigned long long)blocks, bb, (unsigned long long)min_blocks, UINT32_MAX / 2);
        return -1;
    }
    kvt_sched_hbm_split_t split;
    if (kvt_replay_hbm_split(c, hbm_pool, &split, err, errlen) != 0)
        return -1;
    size_t chunk = bb * (c->chunk_size / c->block_size);
    if (c->cpu_pool_bytes != 0 && cpu_pool < chunk * 2) {
        snprintf(err, errlen,
                 "cpu-pool: %llu bytes stored holds fewer than two chunks of %zu bytes (0 "
                 "disables the CPU tier)",
                 (unsigned long long)cpu_pool, chunk);
        return -1;
    }
    if (c->disk_dir && c->cpu_pool_bytes == 0) {
        snprintf(err, errlen, "disk-dir: a disk tier needs the CPU tier above it (cpu-pool > 0)");
        return -1;
    }
    if (c->disk_dir && disk_pool < chunk * 2) {
        snprintf(err, errlen,
                 "disk-pool: %llu bytes stored holds fewer than two chunks of %zu bytes",
                 (unsigned long long)disk_pool, chunk);
        return -1;
    }
    if (c->disk_dir && strlen(c->disk_dir) > 400) {
        snprintf(err, errlen, "disk-dir: path longer than 400 bytes");
        return -1;
    }
    if (c->remote && c->cpu_pool_bytes == 0) {
        snprintf(err, errlen, "remote: a remote tier needs the CPU tier above it (cpu-pool > 0)");
        return -1;
    }
    return 0;
}

static _Atomic uint64_t s_mem_refusals; //  runs the memory check refused

uint64_t kvt_replay_mem_refusals(void)
{
    return s_mem_refusals;
}

int kvt_replay_mem_check(const kvt_replay_cfg_t *c, char *err, size_t errlen)
{
    size_t bb = s_block_bytes(c);
    //  What each rank maps: its CPU pool arena and its device planes (host
    //  backend regions). The disk tier maps nothing up front.
    uint64_t cpu = s_stored(c, c->cpu_pool_bytes);
    uint64_t hbm = (s_stored(c, c->hbm_pool_bytes) / bb) * bb;
    //  A hybrid model: the device maps the slots, the KV planes of the
    //  blocks left and checkpoint units for as many checkpoints as those
    //  blocks could hold (kvt_rank.c); the scheduler keeps the KV and the
    //  checkpoints in use within the blocks left, so the units are a second
    //  view of the same budget that the host backend maps too.
    uint64_t state = 0;
    kvt_sched_hbm_split_t split;
    char ignore[256];
    if (c->state_bytes && kvt_replay_hbm_split(c, hbm, &split, ignore, sizeof ignore) == 0)
        state = c->state_bytes * split.ckpt_units;
    uint64_t total = (cpu + hbm + state) * c->tp;
    kvt_mem_limit_t lim;
    kvt_mem_limit_fn *fn = c->mem_limit ? c->mem_limit : kvt_mem_limit_system;
    if (fn(c->mem_limit_arg, &lim) != 0 || total <= lim.bytes)
        return 0;
    s_mem_refusals++;
    snprintf(err, errlen,
             "memory: the run asks for %llu MiB (tp %u x (cpu-pool %llu MiB + hbm-pool %llu MiB), "
             "stored at byte scale %u) but can have %llu MiB (%s); lower --tp, --cpu-pool or "
             "--hbm-pool, raise --byte-scale, or pass --mem-overcommit",
             (unsigned long long)(total >> 20), c->tp, (unsigned long long)(cpu >> 20),
             (unsigned long long)(hbm >> 20), c->byte_scale > 1 ? c->byte_scale : 1,
             (unsigned long long)(lim.bytes >> 20), lim.source);
    if (!c->mem_overcommit)
        return -1;
    if (c->log_level >= 1)
        fprintf(stderr, "kvtier replay: warning: %s (overridden)\n", err);
    return 0;
}

void kvt_replay_report_clear(kvt_replay_report_t *report)
{
    kvt_sim_engine_result_clear(&report->engine);
    memset(report, 0, sizeof *report);
}

uint64_t kvt_replay_counter(const kvt_replay_report_t *r, const char *actor, const char *name)
{
    uint64_t sum = 0;
    for (uint32_t i = 0; i < r->engine.ncounters; i++) {
        const kvt_sim_engine_counter_t *c = &r->engine.counters[i];
        if (strcmp(c->c.name, name) != 0)
            continue;
        if (actor && strcmp(c->actor, actor) != 0)
            continue;
        sum += c->c.value;
    }
    return sum;
}

//  Everything a run allocates, so one cleanup path frees it.
typedef struct {
    kvt_workload_t *wl;                       //  requests
    kvt_system_t *sys;                        //  actors and driver
    kvt_rank_t *rank[S_MAX_TP];               //  device, tier and actor args per rank (threads)
    int pid[S_MAX_TP];                        //  rank processes (0: none or reaped)
    int status[S_MAX_TP];                     //  their wait status once reaped
    char dir[256];                            //  their sockets' private directory ("" = none)
    char names[2 * S_MAX_TP + 4][32];         //  actor names
    const char *stats_from[2 * S_MAX_TP + 4]; //  actors asked for counters
    kvt_scheduler_args_t sched;               //  scheduler args
    kvt_aggregator_args_t agg;                //  aggregator args
    kvt_sim_engine_args_t engine;             //  engine args
    const kvt_replay_cfg_t *real;             //  the configuration (its progress callback)
    uint32_t instance;                        //  this run's instance
    uint32_t total;                           //  requests of the whole workload (every instance)
    kvt_metrics_collector_args_t metrics;     //  the metrics collector's args (cfg->metrics)
    const kvt_replay_cfg_t *scaled;           //  the configuration the ranks see (stored bytes)
    kvt_sched_t *core;                        //  the scheduler's core once built (report, SIM
                                              //  only: read on the driver's one thread)
} s_run_t;

//  The scheduler's prime hook, used by the report to keep its core.
static int s_keep_core(kvt_sched_t *core, void *arg)
{
    ((s_run_t *)arg)->core = core;
    return 0;
}

//  The report's sampler (kvt_sim_engine_sample_fn): the engine's counters,
//  the scheduler's gauges (SIM) and the ranks' pools (ranks as threads), in
//  real bytes per rank.
static void s_sample(void *arg, const kvt_sim_engine_result_t *e, uint64_t clock_us, bool final)
{
    s_run_t *run = arg;
    kvt_report_t *rp = run->real->report;
    if (!final && !kvt_report_due(rp, clock_us))
        return;
    const kvt_replay_cfg_t *real = run->real, *c = run->scaled;
    uint64_t scale = real->byte_scale > 1 ? real->byte_scale : 1;
    kvt_report_sample_t s;
    memset(&s, 0, sizeof s);
    s.t_us = clock_us;
    s.finished = e->finished;
    s.rejected = e->rejected;
    s.input_tokens = e->input_tokens;
    s.admitted_tokens = e->admitted_tokens;
    s.hbm_tokens = e->hbm_hit_tokens;
    s.disk_tokens = e->disk_hit_tokens;
    s.cpu_tokens = e->tier_hit_tokens - e->disk_hit_tokens;
    s.running = s.waiting = s.hbm_used = KVT_REPORT_UNKNOWN;
    s.hbm_cap = real->hbm_pool_bytes;
    if (run->core) {
        kvt_sched_stats_t st;
        kvt_sched_stats(run->core, &st);
        s.running = (uint64_t)st.running + st.loading;
        s.waiting = st.waiting;
        s.hbm_used = (uint64_t)st.blocks_in_use * s_block_bytes(c) * scale;
    }
    s.cpu_cap = c->cpu_pool_bytes ? real->cpu_pool_bytes : 0;
    s.disk_cap = c->cpu_pool_bytes && c->disk_dir ? real->disk_pool_bytes : 0;
    s.cpu_used = s.disk_used = KVT_REPORT_UNKNOWN;
    if (!c->ranks_as_processes && c->tp && c->cpu_pool_bytes) {
        uint64_t cpu = 0, disk = 0;
        for (uint32_t r = 0; r < c->tp; r++) {
            kvt_storage_t *t = run->rank[r] ? kvt_rank_storage(run->rank[r]) : NULL;
            if (!t)
                continue;
            kvt_pool_stats_t ps;
            kvt_pool_stats(kvt_storage_pool(t), &ps);
            cpu += ps.used_bytes;
            kvt_disk_t *d = kvt_storage_disk(t);
            if (d) {
                kvt_disk_stats_t ds;
                kvt_disk_stats(d, &ds);
                disk += ds.used_bytes;
            }
        }
        s.cpu_used = cpu / c->tp * scale;
        s.disk_used = disk / c->tp * scale;
    }
    kvt_report_add(rp, &s);
}

static void s_progress(void *arg, const kvt_sim_engine_result_t *so_far, uint64_t clock_us)
{
    const s_run_t *run = arg;
    uint32_t n = run->real->instances > 1 ? run->real->instances : 1;
    run->real->progress(run->real->progress_arg, run->instance, n, run->total, so_far, clock_us);
}

static const char *s_actor_name(s_run_t *run, kvt_aid_t aid)
{
    static const char *fixed[] = {"engine", "scheduler", "aggregator"};
    if (aid < 3)
        return fixed[aid];
    return (uint32_t)(aid - 3) < 2 * S_MAX_TP ? run->names[aid - 3] : "?";
}

static uint64_t s_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

//  Rank processes that exited by themselves (waitpid, no blocking): each is
//  reaped, its status kept. Returns the first such rank, or -1.
static int s_procs_poll(s_run_t *run, uint32_t tp)
{
    int first = -1;
    for (uint32_t r = 0; r < tp; r++) {
        if (run->pid[r] <= 0)
            continue;
        int st;
        pid_t got = waitpid(run->pid[r], &st, WNOHANG);
        if (got == run->pid[r] || (got < 0 && errno == ECHILD)) {
            run->status[r] = got == run->pid[r] ? st : 0;
            run->pid[r] = -run->pid[r]; //  reaped (its pid kept for the report)
            if (first < 0)
                first = (int)r;
        }
    }
    return first;
}

//  Stops every rank process still running: SIGTERM, S_REAP_MS to exit,
//  then SIGKILL; every one is reaped before this returns.
static void s_procs_stop(s_run_t *run, uint32_t tp)
{
    for (uint32_t r = 0; r < tp; r++)
        if (run->pid[r] > 0)
            kill(run->pid[r], SIGTERM);
    uint64_t end = s_mono_ms() + S_REAP_MS;
    while (true) {
        s_procs_poll(run, tp);
        bool left = false;
        for (uint32_t r = 0; r < tp; r++)
            left |= run->pid[r] > 0;
        if (!left)
            return;
        if (s_mono_ms() >= end)
            break;
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
    for (uint32_t r = 0; r < tp; r++) {
        if (run->pid[r] <= 0)
            continue;
        kill(run->pid[r], SIGKILL);
        int st = 0;
        while (waitpid(run->pid[r], &st, 0) < 0 && errno == EINTR)
            ;
        run->status[r] = st;
        run->pid[r] = -run->pid[r];
    }
}

//  Removes the rank processes' directory and whatever a killed process's
//  sockets left in it.
static void s_dir_remove(s_run_t *run)
{
    if (!run->dir[0])
        return;
    DIR *d = opendir(run->dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            char path[600];
            snprintf(path, sizeof path, "%s/%s", run->dir, e->d_name);
            unlink(path);
        }
        closedir(d);
    }
    rmdir(run->dir);
    run->dir[0] = 0;
}

static void s_run_free(s_run_t *run, uint32_t tp)
{
    s_procs_stop(run, tp);
    kvt_system_destroy(&run->sys);
    s_dir_remove(run);
    for (uint32_t r = 0; r < tp; r++)
        kvt_rank_destroy(&run->rank[r]);
    kvt_workload_destroy(&run->wl);
    free(run);
}

//  Checks, after the system stopped, that nothing was left outstanding.
static void s_check_quiescent(s_run_t *run, const kvt_replay_cfg_t *cfg, kvt_replay_report_t *rep)
{
    rep->quiescent = true;
    const char *sched = "scheduler";
    if (!rep->engine.done) {
        snprintf(rep->problem, sizeof rep->problem, "the engine did not reach the end");
        rep->quiescent = false;
        return;
    }
    if (kvt_replay_counter(rep, sched, "sched.audit_ok") != 1 ||
        kvt_replay_counter(rep, sched, "sched.quiescent") != 1) {
        snprintf(rep->problem, sizeof rep->problem,
                 "scheduler not quiescent: %llu records, %llu saves outstanding, %llu loading, "
                 "%llu blocks in use",
                 (unsigned long long)kvt_replay_counter(rep, sched, "sched.records"),
                 (unsigned long long)kvt_replay_counter(rep, sched, "sched.saves_outstanding"),
                 (unsigned long long)kvt_replay_counter(rep, sched, "sched.loading"),
                 (unsigned long long)kvt_replay_counter(rep, sched, "sched.blocks_in_use"));
        rep->quiescent = false;
        return;
    }
    if (kvt_replay_counter(rep, "aggregator", "agg.open") != 0) {
        snprintf(rep->problem, sizeof rep->problem, "aggregator has %llu unsettled keys",
                 (unsigned long long)kvt_replay_counter(rep, "aggregator", "agg.open"));
        rep->quiescent = false;
        return;
    }
    for (uint32_t r = 0; r < cfg->tp; r++) {
        if (run->rank[r] &&
            kvt_rank_check_quiescent(run->rank[r], rep->problem, sizeof rep->problem) != 0) {
            rep->quiescent = false;
            return;
        }
    }
}

//  Appends one reason the run failed.
static void s_fail(kvt_replay_report_t *rep, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void s_fail(kvt_replay_report_t *rep, const char *fmt, ...)
{
    size_t used = strlen(rep->failures);
    if (used + 1 >= sizeof rep->failures)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rep->failures + used, sizeof rep->failures - used - 1, fmt, ap);
    va_end(ap);
    strcat(rep->failures, "\n");
    rep->failed = true;
}

//  Whether the run passed; every reason it did not goes into failures.
static void s_judge(kvt_replay_report_t *rep)
{
    const kvt_sim_engine_result_t *e = &rep->engine;
    if (e->wrong_resumes > 0)
        s_fail(rep, "%llu wrong resumes", (unsigned long long)e->wrong_resumes);
    if (!rep->quiescent)
        s_fail(rep, "%s", rep->problem);
    if (e->finished + e->rejected + e->aborted != e->requests)
        s_fail(rep, "%llu of %llu requests ended",
               (unsigned long long)(e->finished + e->rejected + e->aborted),
               (unsigned long long)e->requests);
    if (rep->runtime_errors > 0 || e->steps_failed > 0)
        s_fail(rep, "%llu runtime errors, %llu failed steps (see the rt.* and runner.* counters)",
               (unsigned long long)rep->runtime_errors, (unsigned long long)e->steps_failed);
    if (e->error[0])
        s_fail(rep, "the engine stopped the run: %s", e->error);
    if (e->bad_wrong_ids > 0)
        s_fail(rep, "%llu wrong-resume reports named no request (a wrong StepDone)",
               (unsigned long long)e->bad_wrong_ids);
    if (e->finish_dropped > 0)
        s_fail(rep, "%llu FINISH events dropped (repeated, or for no request)",
               (unsigned long long)e->finish_dropped);
    if (e->stats_unexpected > 0)
        s_fail(rep, "%llu Stats replies dropped (not asked, repeated, or naming another actor)",
               (unsigned long long)e->stats_unexpected);
}

//  The loss ledger after an instance's run (before: before it): its
//  identity holds, and its hits are the engine's, token for token.
static void s_judge_ledger(kvt_replay_report_t *rep, const kvt_ledger_t *ledger,
                           const kvt_ledger_report_t *before)
{
    kvt_ledger_report(ledger, &rep->ledger);
    char why[320];
    if (!kvt_ledger_holds(&rep->ledger, why, sizeof why))
        s_fail(rep, "%s", why);
    const kvt_sim_engine_result_t *e = &rep->engine;
    uint64_t hits = kvt_ledger_hits(&rep->ledger) - kvt_ledger_hits(before);
    if (hits != e->hbm_hit_tokens + e->tier_hit_tokens)
        s_fail(rep, "loss ledger: its hits (%llu) are not the engine's (%llu HBM + %llu tier)",
               (unsigned long long)hits, (unsigned long long)e->hbm_hit_tokens,
               (unsigned long long)e->tier_hit_tokens);
}

//  LIVE: runs until the engine exits, a signal, a rank process's exit or
//  the wall limit, checking the last three every S_SLICE_NS.
static int s_run_live(s_run_t *run, const kvt_replay_cfg_t *cfg, kvt_replay_report_t *rep)
{
    uint64_t t0 = s_mono_ms();
    while (true) {
        int rc = kvt_system_run(run->sys, S_SLICE_NS, 0);
        if (rc == KVT_RUN_INTERRUPTED || (rc == KVT_RUN_TIME_LIMIT && zsys_interrupted)) {
            s_fail(rep, "interrupted by a signal before the end (SIGINT / SIGTERM)");
            return KVT_RUN_INTERRUPTED;
        }
        if (rc != KVT_RUN_TIME_LIMIT)
            return rc;
        int lost = s_procs_poll(run, cfg->tp);
        if (lost >= 0) {
            char how[96];
            kvt_rank_describe_status(run->status[lost], how, sizeof how);
            s_fail(rep, "rank %d (process %d) %s before the end of the run", lost, -run->pid[lost],
                   how);
            if (cfg->log_level >= 0)
                fprintf(stderr,
                        "kvtier replay: rank %d (process %d) %s before the end of the run\n", lost,
                        -run->pid[lost], how);
            return KVT_REPLAY_RANK_LOST;
        }
        if (cfg->wall_limit_ms && s_mono_ms() - t0 >= cfg->wall_limit_ms) {
            s_fail(rep,
                   "the live run did not end within its wall-clock limit of %u ms (%llu steps "
                   "done; --wall-limit)",
                   cfg->wall_limit_ms, (unsigned long long)rep->engine.steps);
            return KVT_RUN_TIME_LIMIT;
        }
    }
}

//  Ranks as processes: the private directory of every socket of the run.
static int s_procs_dir(s_run_t *run, char *err, size_t errlen)
{
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp || strlen(tmp) > 60)
        tmp = "/tmp";
    snprintf(run->dir, sizeof run->dir, "%s/kvt-ranks-XXXXXX", tmp);
    if (!mkdtemp(run->dir)) {
        snprintf(err, errlen, "ranks-as-processes: cannot create a directory under %s: %s", tmp,
                 strerror(errno));
        run->dir[0] = 0;
        return -1;
    }
    return 0;
}

//  Appends every actor's runtime counters (rt.*) to the report, so a lost
//  or undecodable message shows up in it.
static void s_runtime_counters(s_run_t *run, kvt_replay_report_t *rep)
{
    kvt_sim_engine_result_t *e = &rep->engine;
    for (kvt_aid_t aid = 0; aid < KVT_MAX_ACTORS; aid++) {
        kvt_actor_stats_t st;
        if (kvt_system_actor_stats(run->sys, aid, &st) != 0) {
            if (!kvt_system_endpoint(run->sys, aid))
                break;
            continue; //  a rank process's actor: that process checks its own
        }
        const char *names[] = {
            "rt.delivered",     "rt.sent",           "rt.send_errors",  "rt.decode_errors",
            "rt.unhandled",     "rt.handler_errors", "rt.timers_fired", "rt.dropped_at_stop",
            "rt.auth_rejected", "rt.foreign_frames"};
        uint64_t vals[] = {st.delivered,     st.sent,           st.send_errors,  st.decode_errors,
                           st.unhandled,     st.handler_errors, st.timers_fired, st.dropped_at_stop,
                           st.auth_rejected, st.foreign_frames};
        for (int i = 0; i < 10; i++)
            kvt_sim_engine_result_add(e, s_actor_name(run, aid), names[i], vals[i]);
        rep->runtime_errors += st.send_errors + st.decode_errors + st.unhandled + st.handler_errors;
    }
}

//  Whether the instance's lower tier may hold an earlier run's KV: a
//  remote tier, or a rank's disk directory holding object files (*.kvt)
//  before its start-up rescan.
static bool s_tier_warm(const kvt_replay_cfg_t *cfg)
{
    if (cfg->remote)
        return true;
    for (uint32_t r = 0; cfg->disk_dir && r < cfg->tp; r++) {
        char dir[512];
        snprintf(dir, sizeof dir, "%s/rank%u", cfg->disk_dir, r);
        DIR *d = opendir(dir);
        if (!d)
            continue; //  not created yet: nothing from before
        bool found = false;
        for (struct dirent *e; !found && (e = readdir(d));) {
            size_t n = strlen(e->d_name);
            found = e->d_name[0] != '.' && n > 4 && strcmp(e->d_name + n - 4, ".kvt") == 0;
        }
        closedir(d);
        if (found)
            return true;
    }
    return false;
}

//  One engine instance's run over wl (consumed): cfg is the scaled
//  configuration the ranks see, real the one the cost model sees.
static int s_run_one(const kvt_replay_cfg_t *real, const kvt_replay_cfg_t *cfg, kvt_workload_t *wl,
                     uint32_t instance, uint32_t total, kvt_ledger_t *ledger,
                     kvt_replay_report_t *rep, char *err, size_t errlen)
{
    memset(rep, 0, sizeof *rep);
    s_run_t *run = calloc(1, sizeof *run);
    if (!run) {
        kvt_workload_destroy(&wl);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    run->wl = wl;
    snprintf(rep->source, sizeof rep->source, "%s", run->wl->source);
    run->instance = instance;
    run->total = total;

    size_t bb = s_block_bytes(cfg);
    uint32_t bpc = cfg->chunk_size / cfg->block_size;
    size_t chunk_bytes = bb * bpc;
    uint32_t hbm_blocks = (uint32_t)(cfg->hbm_pool_bytes / bb);
    kvt_hash_t ns = kvt_rank_namespace(cfg);

    kvt_system_opts_t so;
    memset(&so, 0, sizeof so);
    so.driver = cfg->driver;
    so.seed = cfg->seed;
    so.name = "replay";
    so.log_level = cfg->log_level;
    so.link_id = kvt_rank_link_id(cfg);
    run->sys = kvt_system_new(&so);
    if (!run->sys) {
        snprintf(err, errlen, "cannot create the actor system");
        goto fail;
    }
    if (cfg->curve_secret_key) {
        kvt_curve_opts_t co = {cfg->curve_secret_key, cfg->curve_public_keys,
                               cfg->curve_server_key};
        if (kvt_system_set_curve(run->sys, &co, err, errlen) != 0)
            goto fail;
    }
    if (cfg->record && cfg->driver == KVT_DRIVER_SIM &&
        kvt_sim_trace_open(run->sys, cfg->record) != 0) {
        snprintf(err, errlen, "record: cannot open %s", cfg->record);
        goto fail;
    }

    if (cfg->disk_dir && mkdir(cfg->disk_dir, 0700) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "disk-dir: cannot create %s: %s", cfg->disk_dir, strerror(errno));
        goto fail;
    }
    if (cfg->ranks_as_processes && !cfg->rank_endpoint && s_procs_dir(run, err, errlen) != 0)
        goto fail;
    //  A given ipc:// directory is made owner-only if it is new; an existing
    //  one open to others is refused when the inboxes bind.
    if (cfg->ranks_as_processes && cfg->rank_endpoint &&
        strncmp(cfg->rank_endpoint, "ipc://", 6) == 0 && mkdir(cfg->rank_endpoint + 6, 0700) != 0 &&
        errno != EEXIST) {
        snprintf(err, errlen, "rank-endpoint: cannot create %s: %s", cfg->rank_endpoint + 6,
                 strerror(errno));
        goto fail;
    }
    kvt_ledger_warm(ledger, s_tier_warm(cfg));
    for (uint32_t r = 0; !cfg->ranks_as_processes && r < cfg->tp; r++) {
        run->rank[r] = kvt_rank_new(cfg, r, run->sys, err, errlen);
        if (!run->rank[r])
            goto fail;
    }

    //  Topology: engine, scheduler, aggregator, then runner.r / worker.r.
    uint32_t nn = 0;
    run->sched.cfg.block_size = cfg->block_size;
    run->sched.cfg.chunk_size = cfg->chunk_size;
    run->sched.cfg.hbm_blocks = hbm_blocks;
    //  The tier holds what the pool and the disk hold together: with
    //  write-through the disk holds a superset, with write-back the union.
    uint64_t view = cfg->cpu_pool_bytes / chunk_bytes;
    if (cfg->disk_dir && cfg->cpu_pool_bytes) {
        uint64_t disk = cfg->disk_pool_bytes / (chunk_bytes + KVT_DISK_HEADER_BYTES);
        view = cfg->disk_write_on_evict ? view + disk : (disk > view ? disk : view);
    }
    run->sched.cfg.tier_chunks = view > UINT32_MAX / 2 ? UINT32_MAX / 2 : (uint32_t)view;
    run->sched.cfg.max_running = cfg->max_running;
    run->sched.cfg.step_tokens = cfg->step_tokens;
    run->sched.cfg.save_retries = 1;
    run->sched.cfg.cpu_pool_bytes = real->cpu_pool_bytes; //  sizes the verified window
    run->sched.cfg.ns = ns;
    run->sched.cfg.state_bytes = cfg->state_bytes;
    run->sched.cfg.checkpoint_interval =
        cfg->checkpoint_interval ? cfg->checkpoint_interval : cfg->chunk_size;
    run->sched.cfg.block_bytes = bb; //  one HBM budget (kvt_replay_hbm_split)
    run->sched.cfg.min_load_tokens = cfg->min_load_tokens;
    run->sched.cfg.orphan_reclaim_us = cfg->orphan_reclaim_us;
    run->sched.cfg.load_deadline_us = cfg->load_deadline_us;
    run->sched.cfg.lookup_max_age_us = cfg->lookup_max_age_us;
    run->sched.cfg.no_state_tier = cfg->no_state_tier;
    run->sched.cfg.spec_tokens = cfg->spec_tokens;
    run->sched.cfg.lookup_pin = cfg->lookup_pin;
    run->sched.cfg.lookup_timeout_us = cfg->lookup_timeout_ns / 1000u;
    run->sched.cfg.verified_window_us = cfg->verified_window_ns / 1000u;
    run->sched.cfg.hold_bound_us = cfg->verify_hold_ns / 1000u;
    run->sched.cfg.lookup_ranks = cfg->lookup_rank0 ? KVT_SCHED_LOOKUP_RANK0 : KVT_SCHED_LOOKUP_ALL;
    run->sched.cfg.interval_checkpoints = cfg->interval_checkpoints;
    run->sched.cfg.state_policy = (kvt_sched_state_policy_t)cfg->state_policy;
    run->sched.cfg.grid_share_pct = cfg->grid_share_pct;
    run->sched.cfg.value_order = cfg->evict_value;
    run->sched.engine = "engine";
    run->agg.nranks = cfg->tp;
    run->agg.timeout_ns = cfg->agg_timeout_ns;
    run->agg.scheduler = "scheduler";
    run->stats_from[nn++] = "scheduler";
    run->stats_from[nn++] = "aggregator";
    for (uint32_t r = 0; r < cfg->tp; r++) {
        kvt_rank_names(r, run->names[2 * r], run->names[2 * r + 1], sizeof run->names[0]);
        run->stats_from[nn++] = run->names[2 * r];
        run->stats_from[nn++] = run->names[2 * r + 1];
    }
    run->stats_from[nn] = NULL;
    run->engine.wl = run->wl;
    run->engine.tp = cfg->tp;
    run->engine.scheduler = "scheduler";
    run->engine.stats_from = run->stats_from;
    run->engine.out = &rep->engine;
    run->engine.ledger = ledger;
    run->engine.closed_loop = cfg->closed_loop;
    run->engine.fault_abort = cfg->fault_abort;
    run->engine.fault_preempt = cfg->fault_preempt;
    run->engine.pace = kvt_replay_paced(cfg);
    run->real = real;
    run->scaled = cfg;
    if (real->progress) {
        run->engine.progress = s_progress;
        run->engine.progress_arg = run;
    }
    if (real->report) {
        if (kvt_report_instance(real->report) != 0) {
            snprintf(err, errlen, "out of memory starting instance %u's report", instance);
            goto fail;
        }
        if (cfg->driver == KVT_DRIVER_SIM) { //  LIVE: the core is another thread's
            run->sched.prime = s_keep_core;
            run->sched.prime_arg = run;
        }
        run->engine.sample = s_sample;
        run->engine.sample_arg = run;
    }
    if (kvt_replay_cost(real, &run->engine.cost, err, errlen) != 0)
        goto fail;

    //  Ranks as processes: every actor at ipc://DIR/NAME.
    char base[300] = "", ep[4 + 2 * S_MAX_TP][128];
    uint32_t nactors = 3 + 2 * cfg->tp + (cfg->metrics ? 1 : 0); //  the collector last
    const char *fixed[] = {"engine", "scheduler", "aggregator"};
    if (cfg->ranks_as_processes) {
        if (cfg->rank_endpoint)
            snprintf(base, sizeof base, "%s", cfg->rank_endpoint);
        else
            snprintf(base, sizeof base, "ipc://%s", run->dir);
        for (uint32_t i = 0; i < nactors; i++)
            if (kvt_rank_endpoint(base, i,
                                  i < 3                 ? fixed[i]
                                  : i < 3 + 2 * cfg->tp ? run->names[i - 3]
                                                        : "metrics",
                                  ep[i], sizeof ep[i]) != 0) {
                snprintf(err, errlen,
                         "rank-endpoint: '%s' is not ipc://DIR (under 80 bytes) or "
                         "tcp://HOST:PORT with room for %u ports",
                         base, nactors);
                goto fail;
            }
    }
    bool procs = cfg->ranks_as_processes;
    bool added = kvt_system_add(run->sys, "engine", &kvt_sim_engine_class, &run->engine,
                                procs ? ep[0] : NULL) != KVT_AID_NONE &&
                 kvt_system_add(run->sys, "scheduler", &kvt_scheduler_class, &run->sched,
                                procs ? ep[1] : NULL) != KVT_AID_NONE &&
                 kvt_system_add(run->sys, "aggregator", &kvt_aggregator_class, &run->agg,
                                procs ? ep[2] : NULL) != KVT_AID_NONE;
    for (uint32_t r = 0; added && r < cfg->tp; r++) {
        if (procs)
            added = kvt_system_add_remote(run->sys, run->names[2 * r],
                                          ep[KVT_RANK_TOPO_RUNNER(r)]) != KVT_AID_NONE &&
                    kvt_system_add_remote(run->sys, run->names[2 * r + 1],
                                          ep[KVT_RANK_TOPO_WORKER(r)]) != KVT_AID_NONE;
        else
            added = kvt_rank_add_actors(run->rank[r], run->sys, NULL, NULL) == 0;
    }
    if (added && cfg->metrics) { //  last, so the ranks' topology indices stay
        run->metrics =
            (kvt_metrics_collector_args_t){cfg->metrics, run->stats_from, cfg->metrics_interval_ns};
        //  its id follows the ranks': s_actor_name reads its name from names[]
        snprintf(run->names[2 * cfg->tp], sizeof run->names[0], "metrics");
        added = kvt_system_add(run->sys, "metrics", &kvt_metrics_collector_class, &run->metrics,
                               procs ? ep[nactors - 1] : NULL) != KVT_AID_NONE;
    }
    if (!added) {
        snprintf(err, errlen, "cannot build the actor topology");
        goto fail;
    }

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    kvt_ledger_report_t ledger_before;
    kvt_ledger_report(ledger, &ledger_before);
    if (kvt_system_start(run->sys) != 0) {
        snprintf(err, errlen, "an actor failed to start (see the log)");
        goto fail;
    }
    const char *exe = cfg->rank_exe ? cfg->rank_exe : "/proc/self/exe";
    for (uint32_t r = 0; procs && r < cfg->tp; r++) {
        run->pid[r] = kvt_rank_spawn(exe, cfg, r, base, err, errlen);
        if (run->pid[r] < 0) {
            run->pid[r] = 0;
            goto fail;
        }
    }
    if (cfg->driver == KVT_DRIVER_SIM && real->sim_run)
        rep->exit_code = real->sim_run(real->sim_run_arg, run->sys, run->rank, &rep->engine);
    else if (cfg->driver == KVT_DRIVER_SIM)
        rep->exit_code = kvt_system_run(run->sys, 0, 0);
    else
        rep->exit_code = s_run_live(run, cfg, rep);
    if (procs) {
        //  The end of the run for every rank process (their exit is
        //  theirs to judge: quiescent pool, no runtime error); the
        //  engine's actors are still up, so none sees it go away first.
        bool lost = rep->exit_code == KVT_REPLAY_RANK_LOST;
        s_procs_stop(run, cfg->tp);
        for (uint32_t r = 0; r < cfg->tp; r++) {
            int st = run->status[r];
            if (WIFEXITED(st) && WEXITSTATUS(st) == KVT_RANK_EXIT_OK)
                continue;
            char how[96];
            kvt_rank_describe_status(st, how, sizeof how);
            if (!lost && rep->exit_code == 0)
                s_fail(rep, "rank %u (process %d) %s at the end of the run (see its log)", r,
                       -run->pid[r], how);
            else if (cfg->log_level >= 1)
                fprintf(stderr, "kvtier replay: rank %u (process %d) %s when stopped\n", r,
                        -run->pid[r], how);
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    rep->wall_s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    if (cfg->driver == KVT_DRIVER_SIM) {
        rep->trace_hash = kvt_sim_trace_hash(run->sys);
        rep->events = kvt_sim_events(run->sys);
    }
    kvt_system_stop(run->sys);
    s_runtime_counters(run, rep);
    if (cfg->metrics)
        kvt_replay_metrics_publish(cfg->metrics, &rep->engine);

    const kvt_sim_engine_result_t *e = &rep->engine;
    //  A chunk any rank had to read from its disk counts as a disk hit.
    rep->hit_disk_tokens = e->disk_hit_tokens;
    rep->hit_cpu_tokens = e->tier_hit_tokens - e->disk_hit_tokens;
    uint64_t served = e->hbm_hit_tokens + e->tier_hit_tokens;
    rep->recomputed_tokens = e->input_tokens > served ? e->input_tokens - served : 0;
    rep->recomputed_share =
        e->input_tokens ? (double)rep->recomputed_tokens / (double)e->input_tokens : 0.0;
    rep->saves_ok = kvt_replay_counter(rep, "scheduler", "sched.saves_ok");
    rep->saves_failed = kvt_replay_counter(rep, "scheduler", "sched.saves_failed");
    //  Wrong states the runners' end-of-run sweep found count as wrong
    //  resumes (every rank checks the same requests: the most one found).
    uint64_t swept = 0;
    for (uint32_t r = 0; r < cfg->tp; r++) {
        uint64_t w = kvt_replay_counter(rep, run->names[2 * r], "runner.sweep_wrong");
        swept = w > swept ? w : swept;
    }
    rep->engine.wrong_resumes += swept;
    s_check_quiescent(run, cfg, rep);
    s_judge(rep);
    s_judge_ledger(rep, ledger, &ledger_before);
    s_run_free(run, cfg->tp);
    return 0;
fail:
    s_run_free(run, cfg->tp);
    return -1;
}

//  Adds instance k's report (part) into the whole run's (rep).
static int s_merge(kvt_replay_report_t *rep, const kvt_replay_report_t *part, uint32_t k)
{
    kvt_sim_engine_result_t *e = &rep->engine;
    const kvt_sim_engine_result_t *p = &part->engine;
    e->requests += p->requests;
    e->finished += p->finished;
    e->rejected += p->rejected;
    e->aborted += p->aborted;
    e->aborts_sent += p->aborts_sent;
    e->preempts_sent += p->preempts_sent;
    e->preempted += p->preempted;
    for (int i = 0; i < KVT_SIM_PHASES; i++)
        e->fault_phase[i] += p->fault_phase[i];
    e->input_tokens += p->input_tokens;
    e->admitted_tokens += p->admitted_tokens;
    e->hbm_hit_tokens += p->hbm_hit_tokens;
    e->tier_hit_tokens += p->tier_hit_tokens;
    e->disk_hit_tokens += p->disk_hit_tokens;
    e->loads_ok += p->loads_ok;
    e->loads_failed += p->loads_failed;
    e->wrong_resumes += p->wrong_resumes;
    e->steps += p->steps;
    e->steps_failed += p->steps_failed;
    e->model_time_us = p->model_time_us > e->model_time_us ? p->model_time_us : e->model_time_us;
    e->driver_us = p->driver_us > e->driver_us ? p->driver_us : e->driver_us;
    e->busy_us += p->busy_us;
    e->load_copy_us += p->load_copy_us;
    e->load_wait_us += p->load_wait_us;
    e->save_link_us += p->save_link_us;
    e->drain_us = p->drain_us > e->drain_us ? p->drain_us : e->drain_us;
    e->max_stall_us = p->max_stall_us > e->max_stall_us ? p->max_stall_us : e->max_stall_us;
    e->max_in_flight = p->max_in_flight > e->max_in_flight ? p->max_in_flight : e->max_in_flight;
    //  A closed loop's arrivals follow each instance's own ends: its span.
    e->span_us = p->span_us > e->span_us ? p->span_us : e->span_us;
    e->utilisation += p->utilisation; //  summed here, averaged by the caller
    e->saturated |= p->saturated;
    bool first = rep->source[0] == 0; //  set by the caller after the first merge
    e->done = first ? p->done : e->done && p->done;
    e->bad_wrong_ids += p->bad_wrong_ids;
    e->finish_dropped += p->finish_dropped;
    e->stats_unexpected += p->stats_unexpected;
    if (!e->error[0] && p->error[0])
        snprintf(e->error, sizeof e->error, "instance %u: %.130s", k, p->error);
    if (p->nttft) {
        uint64_t *t = realloc(e->ttft_us, (size_t)(e->nttft + p->nttft) * sizeof *t);
        if (!t)
            return -1;
        memcpy(t + e->nttft, p->ttft_us, (size_t)p->nttft * sizeof *t);
        e->ttft_us = t;
        e->nttft += p->nttft;
    }
    for (uint32_t i = 0; i < p->ncounters; i++)
        if (kvt_sim_engine_result_add(e, p->counters[i].actor, p->counters[i].c.name,
                                      p->counters[i].c.value) != 0)
            return -1;
    rep->hit_cpu_tokens += part->hit_cpu_tokens;
    rep->hit_disk_tokens += part->hit_disk_tokens;
    rep->ledger = part->ledger; //  one ledger over every instance so far
    rep->recomputed_tokens += part->recomputed_tokens;
    rep->saves_ok += part->saves_ok;
    rep->saves_failed += part->saves_failed;
    rep->trace_hash = (rep->trace_hash ^ part->trace_hash) * 0x100000001B3ull + k;
    rep->events += part->events;
    rep->wall_s += part->wall_s;
    if (!rep->exit_code)
        rep->exit_code = part->exit_code;
    rep->runtime_errors += part->runtime_errors;
    rep->quiescent = first ? part->quiescent : rep->quiescent && part->quiescent;
    if (!rep->problem[0] && part->problem[0])
        snprintf(rep->problem, sizeof rep->problem, "instance %u: %.470s", k, part->problem);
    for (const char *f = part->failures; *f;) {
        const char *nl = strchr(f, '\n');
        int len = nl ? (int)(nl - f) : (int)strlen(f);
        s_fail(rep, "instance %u: %.*s", k, len, f);
        f += len + (nl != NULL);
    }
    return 0;
}

static int s_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

//  Clears every testing fault of c.
static void s_no_faults(kvt_replay_cfg_t *c)
{
    c->fault_corrupt_resume = c->fault_corrupt_state = c->fault_miss_state = 0;
    c->fault_stale_slot = c->fault_restore_late = c->fault_swap_slots = 0;
    c->fault_abort = c->fault_preempt = 0;
}

//  The run's loss ledger over the whole workload (kvt_ledger.h).
static kvt_ledger_t *s_ledger_new(const kvt_replay_cfg_t *c, const kvt_workload_t *wl)
{
    kvt_ledger_cfg_t lc = {.block_size = c->block_size,
                           .chunk_size = c->chunk_size,
                           .tail = c->spec_tokens > 0 ? 2 : 1,
                           .hybrid = c->state_bytes > 0,
                           .cpu_tier = c->cpu_pool_bytes > 0,
                           .disk_tier = c->disk_dir != NULL,
                           .remote_tier = c->remote != NULL,
                           .state_tier =
                               c->state_bytes > 0 && c->cpu_pool_bytes > 0 && !c->no_state_tier};
    return kvt_ledger_new(wl, &lc);
}

int kvt_replay_run(const kvt_replay_cfg_t *real, kvt_replay_report_t *rep, char *err, size_t errlen)
{
    if (kvt_replay_validate(real, err, errlen) != 0 || kvt_replay_mem_check(real, err, errlen) != 0)
        return -1;
    //  From here on every size is what the pools store: the ranks, their
    //  processes and the scheduler see the scaled run, the cost model and
    //  the verified window the real one.
    kvt_replay_cfg_t scaled = *real;
    scaled.hbm_pool_bytes = s_stored(real, real->hbm_pool_bytes);
    scaled.cpu_pool_bytes = s_stored(real, real->cpu_pool_bytes);
    scaled.disk_pool_bytes = s_stored(real, real->disk_pool_bytes);
    scaled.byte_scale = 1;
    kvt_cost_cfg_t cost;
    if (kvt_replay_cost(real, &cost, err, errlen) != 0)
        return -1;
    scaled.sim_bw_Bps = kvt_replay_sim_bw(real, &cost);
    memset(rep, 0, sizeof *rep);
    kvt_workload_t *wl;
    if (real->trace)
        wl = kvt_workload_mooncake(real->trace, real->limit, err, errlen);
    else {
        kvt_synth_cfg_t sc;
        memset(&sc, 0, sizeof sc);
        sc.seed = real->seed;
        wl = kvt_workload_synthetic(&sc, real->limit);
        if (!wl)
            snprintf(err, errlen, "out of memory generating the workload");
    }
    if (!wl)
        return -1;
    //  One scale for the whole workload, before it is routed: every
    //  instance sees the same stretched clock.
    if (real->time_scale > 0 && real->time_scale != 1.0)
        kvt_workload_time_scale(wl, real->time_scale);
    uint32_t n = real->instances > 1 ? real->instances : 1;
    kvt_ledger_t *ledger = s_ledger_new(real, wl);
    if (!ledger) {
        kvt_workload_destroy(&wl);
        snprintf(err, errlen, "out of memory computing the loss ledger's ideal");
        return -1;
    }
    if (n == 1) {
        int one = kvt_ledger_instance(ledger, NULL, wl->n);
        if (one != 0) {
            kvt_workload_destroy(&wl);
            snprintf(err, errlen, "out of memory starting the loss ledger");
        } else
            one = s_run_one(real, &scaled, wl, 0, wl->n, ledger, rep, err, errlen);
        kvt_ledger_destroy(&ledger);
        return one;
    }
    //  N instances, one after another, each its own scheduler, ranks and
    //  pools over the requests routed to it (its disk DIR/inst<k>).
    uint32_t *inst_of = calloc(wl->n ? wl->n : 1, sizeof *inst_of);
    uint32_t *global_of = calloc(wl->n ? wl->n : 1, sizeof *global_of);
    kvt_replay_report_t *part = calloc(1, sizeof *part);
    int rc = -1;
    if (!inst_of || !global_of || !part || kvt_workload_route(wl, n, inst_of) != 0) {
        snprintf(err, errlen, "out of memory routing the workload");
        goto cleanup;
    }
    if (real->disk_dir && mkdir(real->disk_dir, 0700) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "disk-dir: cannot create %s: %s", real->disk_dir, strerror(errno));
        goto cleanup;
    }
    uint64_t span = wl->n ? wl->reqs[wl->n - 1].arrival_us - wl->reqs[0].arrival_us : 0;
    for (uint32_t k = 0; k < n; k++) {
        kvt_workload_t *sub = kvt_workload_subset(wl, inst_of, k);
        if (!sub) {
            snprintf(err, errlen, "out of memory building instance %u's workload", k);
            goto cleanup;
        }
        if (sub->n == 0) { //  nothing routed here: nothing to run
            kvt_workload_destroy(&sub);
            continue;
        }
        uint32_t m = 0;
        for (uint32_t i = 0; i < wl->n; i++)
            if (inst_of[i] == k)
                global_of[m++] = i;
        if (kvt_ledger_instance(ledger, global_of, m) != 0) {
            kvt_workload_destroy(&sub);
            snprintf(err, errlen, "out of memory starting instance %u's loss ledger", k);
            goto cleanup;
        }
        kvt_replay_cfg_t one = scaled;
        if (rep->source[0]) //  a testing fault fires in the first instance that runs only
            s_no_faults(&one);
        char dir[440];
        if (real->disk_dir) {
            snprintf(dir, sizeof dir, "%s/inst%u", real->disk_dir, k);
            one.disk_dir = dir;
        }
        if (s_run_one(real, &one, sub, k, wl->n, ledger, part, err, errlen) != 0)
            goto cleanup;
        int merged = s_merge(rep, part, k);
        if (!rep->source[0])
            snprintf(rep->source, sizeof rep->source, "%.200s over %u instances", wl->source, n);
        kvt_replay_report_clear(part);
        if (merged != 0) {
            snprintf(err, errlen, "out of memory merging instance %u's report", k);
            goto cleanup;
        }
    }
    kvt_sim_engine_result_t *e = &rep->engine;
    qsort(e->ttft_us, e->nttft, sizeof *e->ttft_us, s_cmp_u64);
    kvt_sim_engine_result_percentiles(e);
    e->utilisation /= n;
    if (!real->closed_loop)
        e->span_us = span;
    rep->recomputed_share =
        e->input_tokens ? (double)rep->recomputed_tokens / (double)e->input_tokens : 0.0;
    rc = 0;
cleanup:
    if (rc != 0)
        kvt_replay_report_clear(rep);
    if (part)
        kvt_replay_report_clear(part);
    free(inst_of);
    free(global_of);
    free(part);
    kvt_ledger_destroy(&ledger);
    kvt_workload_destroy(&wl);
    return rc;
}
