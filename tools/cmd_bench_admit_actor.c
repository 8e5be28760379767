/*  cmd_bench_admit_actor — the stats read through the scheduler actor's
    own Stats path (stats_us_1m_actor; cmd_bench_admit.c says what it is):
    a SIM system of the scheduler actor, its core primed through the
    shell's bench hook (kvt_scheduler_args_t.prime) with --hashes HBM
    blocks and --hashes images, and a probe actor that sends one Stats
    request at a time and times each reply. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/common/kvt_prefix.h"
#include "actors/scheduler/kvt_sched_bench.h"
#include "actors/scheduler/kvt_scheduler.h"
#include "cmd_bench_admit.h"
#include "kvt_cli.h"
#include "kvtier/kvt_actor.h"
#include "kvtier/kvt_sched.h"

#define S_AUDITS 3u //  the probe stops at the reply that reports the third deep audit

//  The probe: one Stats request in flight; at each reply the wall and CPU
//  clocks and the scheduler's sched.audits_deep.
typedef struct {
    uint32_t cap;         //  replies at most
    uint32_t n;           //  replies received
    double *wall, *cpu;   //  clocks at reply i (cap entries each)
    uint64_t *audits;     //  sched.audits_deep at reply i
    uint64_t images;      //  stidx.images of the last reply
    int32_t at;           //  index of sched.audits_deep in a reply (-1: not found yet)
    bool bad;             //  a reply lacked sched.audits_deep
    kvt_aid_t sched;      //  the scheduler
    double start, cstart; //  clocks when the first request went out
} s_probe_t;

static int s_ask(kvt_ctx_t *ctx, s_probe_t *p)
{
    kvt_msg_t m;
    memset(&m, 0, sizeof m);
    m.kind = KVT_MSG_STATS;
    m.u.stats.request = true;
    return kvt_ctx_send(ctx, p->sched, &m);
}

static void *s_probe_init(kvt_ctx_t *ctx, void *args)
{
    s_probe_t *p = args;
    p->sched = kvt_ctx_lookup(ctx, "scheduler");
    if (p->sched == KVT_AID_NONE || kvt_ctx_timer(ctx, 1, 0) == 0)
        return NULL;
    return p;
}

static void s_probe_stop(kvt_ctx_t *ctx, void *self)
{
    (void)ctx;
    (void)self;
}

static void s_probe_timer(kvt_ctx_t *ctx, void *self, uint64_t tag)
{
    s_probe_t *p = self;
    (void)tag;
    p->start = kvt_cli_now();
    p->cstart = kvt_cli_cpu_now();
    if (s_ask(ctx, p) != 0)
        kvt_ctx_exit(ctx, 1);
}

static int s_probe_reply(kvt_ctx_t *ctx, void *self, kvt_aid_t from, kvt_msg_t *msg)
{
    s_probe_t *p = self;
    double t = kvt_cli_now(), c = kvt_cli_cpu_now();
    const kvt_stats_t *st = &msg->u.stats;
    (void)from;
    if (st->request)
        return 0;
    //  The counters come in a fixed order: find the audit count once.
    if (p->at < 0 || (uint32_t)p->at >= st->ncounters ||
        strcmp(st->counters[p->at].name, "sched.audits_deep") != 0) {
        p->at = -1;
        for (uint32_t i = 0; i < st->ncounters; i++) {
            if (strcmp(st->counters[i].name, "sched.audits_deep") == 0)
                p->at = (int32_t)i;
            if (strcmp(st->counters[i].name, "stidx.images") == 0)
                p->images = st->counters[i].value;
        }
    }
    if (p->at < 0) {
        p->bad = true;
        kvt_ctx_exit(ctx, 1);
        return 0;
    }
    p->wall[p->n] = t;
    p->cpu[p->n] = c;
    p->audits[p->n] = st->counters[p->at].value;
    p->n++;
    if (p->audits[p->n - 1] >= S_AUDITS || p->n == p->cap) {
        kvt_ctx_exit(ctx, 0);
        return 0;
    }
    if (s_ask(ctx, p) != 0)
        kvt_ctx_exit(ctx, 1);
    return 0;
}

static const kvt_actor_class_t s_probe_class = {
    .type = "bench-probe",
    .init = s_probe_init,
    .stop = s_probe_stop,
    .on = {[KVT_MSG_STATS] = s_probe_reply},
    .on_timer = s_probe_timer,
};

//  The shell's bench hook: --hashes images noted in the core's index.
static int s_prime(kvt_sched_t *core, void *arg)
{
    uint32_t n = *(const uint32_t *)arg;
    for (uint32_t i = 0; i < n; i++) {
        kvt_hash_t h = {.hi = 0xAC7E0000ull + i, .lo = (i + 1) * 0x9E3779B97F4A7C15ull};
        if (kvt_sched_bench_note_images(core, &h, 1, 1) != 0)
            return -1;
    }
    return 0;
}

int kvt_badmit_actor(const kvt_badmit_opts_t *o, kvt_badmit_actor_t *out)
{
    int rc = -1;
    uint32_t images = o->hashes;
    kvt_scheduler_args_t sa = {.cfg = {.block_size = KVT_BADMIT_BS,
                                       .chunk_size = KVT_BADMIT_CS,
                                       .hbm_blocks = o->hashes,
                                       .tier_chunks = o->hashes,
                                       .max_running = 4,
                                       .step_tokens = 8192,
                                       .save_retries = 1,
                                       .ns = kvt_namespace_hash("kvtier bench admit actor"),
                                       .state_bytes = 1u << 20,
                                       .checkpoint_interval = KVT_BADMIT_INTERVAL},
                               .engine = "probe",
                               .prime = s_prime,
                               .prime_arg = &images};
    s_probe_t p = {.cap = o->actor_reads, .at = -1};
    p.wall = calloc(p.cap, sizeof *p.wall);
    p.cpu = calloc(p.cap, sizeof *p.cpu);
    p.audits = calloc(p.cap, sizeof *p.audits);
    double *other = calloc(p.cap, sizeof *other);
    kvt_system_opts_t so = {.driver = KVT_DRIVER_SIM, .seed = 1, .name = "badmit", .log_level = 0};
    kvt_system_t *sys = p.wall && p.cpu && p.audits && other ? kvt_system_new(&so) : NULL;
    if (!sys || kvt_system_add(sys, "probe", &s_probe_class, &p, NULL) == KVT_AID_NONE ||
        kvt_system_add(sys, "scheduler", &kvt_scheduler_class, &sa, NULL) == KVT_AID_NONE ||
        kvt_system_start(sys) != 0) {
        fprintf(stderr, "kvtier bench admit: the scheduler actor did not start\n");
        goto cleanup;
    }
    int run = kvt_system_run(sys, 0, 0);
    if (run != 0 || p.bad || p.n < 2) {
        fprintf(stderr, "kvtier bench admit: the Stats reads stopped after %u replies (%d%s)\n",
                p.n, run, p.bad ? ", no sched.audits_deep" : "");
        goto cleanup;
    }
    //  The measured span: from the reply of the first deep audit (the first
    //  read, at quiescence after the start) to the reply of the last, so it
    //  holds whole periods of the audit's decimation. Each read's time is
    //  the span since the previous reply.
    uint32_t first = 0, last = p.n - 1;
    while (first < last && p.audits[first] == 0)
        first++;
    if (p.audits[last] == p.audits[first]) {
        fprintf(stderr,
                "kvtier bench admit: no deep audit after the first within %u Stats reads "
                "(raise --actor-reads)\n",
                p.cap);
        goto cleanup;
    }
    uint32_t reads = last - first, nother = 0;
    double deep = 0;
    for (uint32_t i = first + 1; i <= last; i++) {
        double dt = (p.wall[i] - p.wall[i - 1]) * 1e6;
        if (p.audits[i] != p.audits[i - 1])
            deep = dt > deep ? dt : deep;
        else
            other[nother++] = dt;
    }
    out->us = (p.wall[last] - p.wall[first]) * 1e6 / reads;
    out->cpu_us = (p.cpu[last] - p.cpu[first]) * 1e6 / reads;
    out->deep_us = deep;
    out->other_us = nother ? kvt_cli_median(other, nother) : 0;
    out->reads = reads;
    out->audits = p.audits[last] - p.audits[first];
    out->blocks = o->hashes;
    out->images = p.images;
    if (out->images != o->hashes) {
        fprintf(stderr, "kvtier bench admit: the actor's index holds %llu images (%u primed)\n",
                (unsigned long long)out->images, o->hashes);
        goto cleanup;
    }
    rc = 0;
cleanup:
    kvt_system_destroy(&sys);
    free(p.wall);
    free(p.cpu);
    free(p.audits);
    free(other);
    return rc;
}
