/*  kvt_test_rig — see kvt_test_rig.h. */
#include "kvt_test_rig.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

kvt_trig_counters_t kvt_trig_counters;
kvt_trig_probe_t kvt_trig_probe;

uint64_t kvt_trig_clock(void *arg)
{
    return kvt_system_now((kvt_system_t *)arg);
}

void kvt_trig_quiet(void *arg, int level, const char *line)
{
    (void)arg;
    (void)level;
    (void)line;
}

kvt_gpu_t *kvt_trig_gpu(kvt_system_t *sys, const kvt_trig_dev_t *d)
{
    kvt_gpu_opts_t go = {.backend = KVT_GPU_BACKEND_HOST,
                         .host_mode = KVT_GPU_HOST_SIM,
                         .now = kvt_trig_clock,
                         .now_arg = sys,
                         .sim_bandwidth_Bps = d->bandwidth,
                         .log = kvt_trig_quiet};
    if (d->zero_latency)
        go.sim_entry_ns = KVT_GPU_SIM_ZERO_LATENCY;
    kvt_gpu_t *gpu = kvt_gpu_new(&go);
    cr_assert_not_null(gpu);
    for (uint32_t p = 0; p < d->planes; p++) {
        kvt_gpu_plane_desc_t pd = {
            .layers = 1, .num_blocks = d->blocks, .block_bytes = d->block_bytes};
        cr_assert_geq(kvt_gpu_plane_add(gpu, &pd), 0);
    }
    kvt_gpu_state_desc_t sd = {.count = d->slots, .state_bytes = d->state_bytes};
    if (d->slots)
        cr_assert_eq(kvt_gpu_state_add(gpu, KVT_GPU_STATE_SLOTS, &sd), 0);
    sd.count = d->ckpt_units;
    if (d->ckpt_units)
        cr_assert_eq(kvt_gpu_state_add(gpu, KVT_GPU_STATE_CKPT, &sd), 0);
    return gpu;
}

kvt_storage_t *kvt_trig_storage(kvt_system_t *sys, uint64_t capacity, uint64_t ttl_ms)
{
    return kvt_trig_storage_disk(sys, capacity, ttl_ms, NULL);
}

kvt_storage_t *kvt_trig_storage_disk(kvt_system_t *sys, uint64_t capacity, uint64_t ttl_ms,
                                     const char *dir)
{
    kvt_storage_config_t sc;
    kvt_storage_config_defaults(&sc);
    sc.pool.capacity_bytes = capacity;
    sc.pool.align = 64;
    if (ttl_ms)
        sc.pool.ttl_ms = ttl_ms;
    sc.pool.clock = kvt_trig_clock;
    sc.pool.clock_arg = sys;
    sc.pool.log = kvt_trig_quiet;
    if (dir) {
        sc.disk_enabled = true;
        sc.disk.dir = dir;
        sc.disk.capacity_bytes = 64ull << 20;
        sc.disk.io_mode = KVT_DISK_IO_THREADS;
        sc.disk.log = kvt_trig_quiet;
        sc.write_policy = KVT_WRITE_ALWAYS;
    }
    char err[256];
    kvt_storage_t *st = kvt_storage_new(&sc, err, sizeof err);
    cr_assert_not_null(st, "%s", err);
    return st;
}

kvt_aid_t kvt_trig_add_worker(kvt_system_t *sys, kvt_worker_args_t *wa)
{
    char name[32];
    snprintf(name, sizeof name, "worker.%u", wa->rank);
    return kvt_system_add(sys, name, &kvt_worker_class, wa, NULL);
}

void kvt_trig_run(kvt_system_t *sys, uint64_t max_events)
{
    int rc = kvt_system_run(sys, 0, max_events);
    cr_assert_eq(rc, KVT_RUN_QUIESCENT, "run ended with %d", rc);
}

// ------------------------------------------------------------ counters --

int kvt_trig_on_stats(kvt_ctx_t *ctx, void *self, kvt_aid_t from, kvt_msg_t *m)
{
    (void)ctx;
    (void)self;
    (void)from;
    kvt_trig_counters.n = m->u.stats.ncounters < 256 ? m->u.stats.ncounters : 256;
    memcpy(kvt_trig_counters.c, m->u.stats.counters, kvt_trig_counters.n * sizeof(kvt_counter_t));
    return 0;
}

int kvt_trig_on_ping(kvt_ctx_t *ctx, void *self, kvt_aid_t from, kvt_msg_t *m)
{
    (void)self;
    (void)from;
    kvt_msg_t q;
    memset(&q, 0, sizeof q);
    q.kind = KVT_MSG_STATS;
    q.u.stats.request = true;
    return kvt_ctx_send(ctx, (kvt_aid_t)m->u.ping.seq, &q);
}

void kvt_trig_ping(kvt_system_t *sys, kvt_aid_t via, kvt_aid_t aid)
{
    kvt_msg_t m;
    memset(&m, 0, sizeof m);
    m.kind = KVT_MSG_PING;
    m.u.ping.seq = aid;
    kvt_trig_counters.n = 0;
    cr_assert_eq(kvt_system_post(sys, via, &m), 0);
}

bool kvt_trig_find(const char *name, uint64_t *value)
{
    for (uint32_t i = 0; i < kvt_trig_counters.n; i++)
        if (!strcmp(kvt_trig_counters.c[i].name, name)) {
            *value = kvt_trig_counters.c[i].value;
            return true;
        }
    return false;
}

// --------------------------------------------------------------- probe --

static int s_on_verdict(kvt_ctx_t *ctx, void *self, kvt_aid_t from, kvt_msg_t *m)
{
    (void)self;
    (void)from;
    kvt_trig_probe_t *p = &kvt_trig_probe;
    if (m->u.verdict.chan == KVT_CHAN_SOURCE_SAFE) {
        p->nsafe++; //  the workers report each save's sources once (on by default)
        return 0;
    }
    if (p->nverdicts < 64) {
        uint32_t i = p->nverdicts++;
        p->at[i] = kvt_ctx_now(ctx);
        p->verdicts[i] = m->u.verdict;
        p->verdicts[i].images = NULL; //  freed with the message
        memset(p->img[i], 0, sizeof p->img[i]);
        if (m->u.verdict.images)
            memcpy(p->img[i], m->u.verdict.images,
                   m->u.verdict.nimages < 16 ? m->u.verdict.nimages : 16);
    }
    return 0;
}

static void *s_probe_init(kvt_ctx_t *ctx, void *args)
{
    (void)ctx;
    (void)args;
    return &kvt_trig_probe;
}

static void s_probe_stop(kvt_ctx_t *ctx, void *self)
{
    (void)ctx;
    (void)self;
}

const kvt_actor_class_t kvt_trig_probe_class = {
    .type = "probe",
    .init = s_probe_init,
    .stop = s_probe_stop,
    .on = {[KVT_MSG_VERDICT] = s_on_verdict,
           [KVT_MSG_STATS] = kvt_trig_on_stats,
           [KVT_MSG_PING] = kvt_trig_on_ping},
};

// ----------------------------------------------------------------- rig --

void kvt_trig_up(kvt_trig_t *t, const kvt_trig_cfg_t *cfg)
{
    cr_assert(cfg->nranks >= 1 && cfg->nranks <= KVT_TRIG_MAXR);
    memset(t, 0, sizeof *t);
    memset(&kvt_trig_probe, 0, sizeof kvt_trig_probe);
    memset(&kvt_trig_counters, 0, sizeof kvt_trig_counters);
    t->nranks = cfg->nranks;
    kvt_system_opts_t so = {.driver = KVT_DRIVER_SIM, .seed = cfg->seed, .name = cfg->name};
    t->sys = kvt_system_new(&so);
    cr_assert_not_null(t->sys);
    t->probe = kvt_system_add(t->sys, "scheduler", &kvt_trig_probe_class, NULL, NULL);
    t->aa = (kvt_aggregator_args_t){
        .nranks = cfg->nranks, .scheduler = "scheduler", .timeout_ns = cfg->agg_timeout_ns};
    t->agg = kvt_system_add(t->sys, "aggregator", &kvt_aggregator_class, &t->aa, NULL);
    for (uint32_t r = 0; r < cfg->nranks; r++) {
        t->gpu[r] = kvt_trig_gpu(t->sys, &cfg->dev);
        char dir[256];
        if (cfg->disk_dir)
            snprintf(dir, sizeof dir, "%s/rank%u", cfg->disk_dir, r);
        t->st[r] =
            kvt_trig_storage_disk(t->sys, cfg->pool_bytes, cfg->ttl_ms, cfg->disk_dir ? dir : NULL);
        t->wa[r] = cfg->wa;
        t->wa[r].rank = r;
        t->wa[r].gpu = t->gpu[r];
        t->wa[r].storage = t->st[r];
        t->wa[r].aggregator = "aggregator";
        t->w[r] = kvt_trig_add_worker(t->sys, &t->wa[r]);
    }
    cr_assert_eq(kvt_system_start(t->sys), 0);
}

void kvt_trig_down(kvt_trig_t *t)
{
    kvt_system_destroy(&t->sys);
    for (uint32_t r = 0; r < t->nranks; r++) {
        kvt_storage_destroy(&t->st[r]);
        kvt_gpu_destroy(&t->gpu[r]);
    }
}

void kvt_trig_settle(kvt_trig_t *t)
{
    kvt_trig_run(t->sys, 1000000);
}

uint64_t kvt_trig_count(kvt_trig_t *t, kvt_aid_t aid, const char *name)
{
    kvt_trig_ping(t->sys, t->probe, aid);
    kvt_trig_settle(t);
    uint64_t v = 0;
    cr_assert(kvt_trig_find(name, &v), "counter %s not reported", name);
    return v;
}
