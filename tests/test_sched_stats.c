/*  The scheduler actor's Stats reads (kvt_scheduler.h): O(1) amortised.
    The deep audit runs at the first read that finds the core quiescent
    after a change, and otherwise only when the reads' credit
    (KVT_SCHEDULER_AUDIT_CREDIT units each) covers its cost; counted in
    sched.audits_deep. Driven through the actor under the SIM driver, with
    a probe actor as the engine. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "actors/common/kvt_prefix.h"
#include "actors/scheduler/kvt_scheduler.h"
#include "kvtier/kvt_actor.h"

#define S_MAX_READS 512

//  The engine: makes `pre` Stats reads, then runs request 1 to its end (one
//  Schedule per StepPlan) when `run` is set, then reads until `reads`
//  replies came, one read at a time.
typedef struct {
    uint32_t pre;                 //  Stats reads before the run
    bool run;                     //  run a request after them
    uint32_t reads;               //  Stats reads to make
    uint32_t n;                   //  Stats replies received
    uint64_t audits[S_MAX_READS]; //  sched.audits_deep at reply i
    uint64_t ok[S_MAX_READS];     //  sched.audit_ok at reply i
    uint64_t quiet[S_MAX_READS];  //  sched.quiescent at reply i
    uint64_t step;                //  last step asked for
    uint32_t plans;               //  StepPlans received
    kvt_aid_t sched;              //  the scheduler
    uint32_t tokens[40];          //  request 1's prompt
} s_probe_t;

static uint64_t s_counter(const kvt_stats_t *st, const char *name)
{
    for (uint32_t i = 0; i < st->ncounters; i++)
        if (strcmp(st->counters[i].name, name) == 0)
            return st->counters[i].value;
    return UINT64_MAX;
}

static int s_read(kvt_ctx_t *ctx, s_probe_t *p)
{
    kvt_msg_t m;
    memset(&m, 0, sizeof m);
    m.kind = KVT_MSG_STATS;
    m.u.stats.request = true;
    return kvt_ctx_send(ctx, p->sched, &m);
}

static int s_schedule(kvt_ctx_t *ctx, s_probe_t *p)
{
    kvt_msg_t m;
    memset(&m, 0, sizeof m);
    m.kind = KVT_MSG_SCHEDULE;
    kvt_arrival_t a = {.req = 1, .tokens = p->tokens, .ntokens = 40, .max_new_tokens = 2};
    m.u.schedule.step = ++p->step;
    m.u.schedule.now_us = p->step * 1000;
    if (p->step == 1) {
        m.u.schedule.arrivals = &a;
        m.u.schedule.narrivals = 1;
    }
    return kvt_ctx_send(ctx, p->sched, &m);
}

static void *s_init(kvt_ctx_t *ctx, void *args)
{
    s_probe_t *p = args;
    p->sched = kvt_ctx_lookup(ctx, "scheduler");
    for (uint32_t i = 0; i < 40; i++)
        p->tokens[i] = 100 + i;
    return kvt_ctx_timer(ctx, 1, 0) ? p : NULL;
}

static void s_stop(kvt_ctx_t *ctx, void *self)
{
    (void)ctx;
    (void)self;
}

static void s_timer(kvt_ctx_t *ctx, void *self, uint64_t tag)
{
    s_probe_t *p = self;
    (void)tag;
    cr_assert_eq(p->run && p->pre == 0 ? s_schedule(ctx, p) : s_read(ctx, p), 0);
}

static int s_on_plan(kvt_ctx_t *ctx, void *self, kvt_aid_t from, kvt_msg_t *msg)
{
    s_probe_t *p = self;
    (void)from;
    p->plans++;
    cr_assert_lt(p->plans, 100, "request 1 never ended");
    if (msg->u.step_plan.idle)
        return s_read(ctx, p);
    return s_schedule(ctx, p);
}

static int s_on_stats(kvt_ctx_t *ctx, void *self, kvt_aid_t from, kvt_msg_t *msg)
{
    s_probe_t *p = self;
    (void)from;
    const kvt_stats_t *st = &msg->u.stats;
    cr_assert_not(st->request);
    cr_assert_lt(p->n, S_MAX_READS);
    p->audits[p->n] = s_counter(st, "sched.audits_deep");
    p->ok[p->n] = s_counter(st, "sched.audit_ok");
    p->quiet[p->n] = s_counter(st, "sched.quiescent");
    cr_assert_neq(p->audits[p->n], UINT64_MAX, "the reply lacks sched.audits_deep");
    if (++p->n == p->reads) {
        kvt_ctx_exit(ctx, 0);
        return 0;
    }
    if (p->run && p->n == p->pre)
        return s_schedule(ctx, p);
    return s_read(ctx, p);
}

static const kvt_actor_class_t s_probe_class = {
    .type = "probe",
    .init = s_init,
    .stop = s_stop,
    .on = {[KVT_MSG_STEP_PLAN] = s_on_plan, [KVT_MSG_STATS] = s_on_stats},
    .on_timer = s_timer,
};

//  A dense core of `hbm_blocks` blocks, no tier: a deep audit costs
//  hbm_blocks units (+ records), so reads pay for one every
//  hbm_blocks / KVT_SCHEDULER_AUDIT_CREDIT reads.
static void s_run(s_probe_t *p, uint32_t hbm_blocks)
{
    static kvt_scheduler_args_t sa;
    memset(&sa, 0, sizeof sa);
    sa.cfg = (kvt_sched_cfg_t){.block_size = 16,
                               .chunk_size = 64,
                               .hbm_blocks = hbm_blocks,
                               .max_running = 4,
                               .step_tokens = 256,
                               .save_retries = 1,
                               .ns = kvt_namespace_hash("test_sched_stats")};
    sa.engine = "engine";
    kvt_system_opts_t so = {.driver = KVT_DRIVER_SIM, .seed = 7, .log_level = 0};
    kvt_system_t *sys = kvt_system_new(&so);
    cr_assert_not_null(sys);
    cr_assert_neq(kvt_system_add(sys, "engine", &s_probe_class, p, NULL), KVT_AID_NONE);
    cr_assert_neq(kvt_system_add(sys, "scheduler", &kvt_scheduler_class, &sa, NULL), KVT_AID_NONE);
    cr_assert_eq(kvt_system_start(sys), 0);
    cr_assert_eq(kvt_system_run(sys, 0, 100000), 0, "the probe did not finish");
    cr_assert_eq(p->n, p->reads);
    kvt_system_destroy(&sys);
}

//  4096 blocks at 64 units a read: one deep audit per 64 reads, not one per
//  read; the first read audits (quiescent after the start).
Test(sched_stats, the_deep_audit_runs_once_per_cost_over_credit_reads_not_on_every_read)
{
    static s_probe_t p;
    memset(&p, 0, sizeof p);
    uint32_t per = 4096 / KVT_SCHEDULER_AUDIT_CREDIT;
    p.reads = 1 + 2 * per;
    s_run(&p, 4096);
    cr_assert_eq(p.audits[0], 1, "the first read finds the core quiescent after its start");
    for (uint32_t i = 1; i < per; i++)
        cr_assert_eq(p.audits[i], 1, "read %u ran a deep audit the credit did not cover", i);
    cr_assert_eq(p.audits[per], 2, "read %u's credit covers the audit's cost", per);
    cr_assert_eq(p.audits[2 * per - 1], 2);
    cr_assert_eq(p.audits[2 * per], 3);
    for (uint32_t i = 0; i < p.reads; i++)
        cr_assert_eq(p.ok[i], 1);
}

//  After a request ran to its end, the first read that finds the core
//  quiescent audits it at once, whatever the credit; the next read does
//  not (nothing changed since).
Test(sched_stats, the_first_quiescent_read_after_a_change_runs_the_deep_audit)
{
    static s_probe_t p;
    memset(&p, 0, sizeof p);
    p.pre = 2;
    p.run = true;
    p.reads = 4;
    s_run(&p, 4096);
    cr_assert_eq(p.audits[0], 1, "the first read audits the core it was built with");
    cr_assert_eq(p.audits[1], 1, "nothing changed since: no audit");
    cr_assert_gt(p.plans, 2, "request 1 ran");
    cr_assert_eq(p.quiet[2], 1);
    cr_assert_eq(p.audits[2], 2, "the quiescent read after the run audits");
    cr_assert_eq(p.ok[2], 1);
    cr_assert_eq(p.audits[3], 2, "nothing changed since: no audit");
}
