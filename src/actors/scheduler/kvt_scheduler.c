/*  kvt_scheduler — see kvt_scheduler.h. */
#include "kvt_scheduler.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/common/kvt_counters.h"

typedef struct {
    kvt_scheduler_args_t a;     //  configuration
    kvt_sched_t *core;          //  the scheduler's state
    kvt_aid_t engine;           //  where plans go
    bool held;                  //  a Schedule is waiting for a verdict
    uint64_t held_step;         //  the step of the held Schedule
    uint64_t holds;             //  counter: replies held for a verdict
    uint64_t arrivals_refused;  //  counter: arrivals the core refused
    uint64_t schedules_refused; //  counter: Schedules for a step other than the next
    uint64_t aborts_refused;    //  counter: Schedule.aborts ids the core did not hold (or done)
    uint64_t preempts_refused;  //  counter: Schedule.preempts ids neither running nor loading
    uint64_t audit_credit;      //  deep-audit units the Stats reads paid since the last one
    bool changed;               //  a Schedule or Verdict reached the core since the last one
    bool audit_ok;              //  the last deep audit passed (true before the first)
    uint64_t audits_deep;       //  counter: deep audits run
    uint64_t timer;             //  armed while held: plans again at the next load deadline
    uint64_t held_core_us;      //  the core's clock when the hold began
    uint64_t held_ctx_ns;       //  the driver's clock then (the core's advances with it)
} s_scheduler_t;

#define S_COUNTERS 192 //  room in a Stats reply (the core's counters and the shell's)

#define S_TIMER_DEADLINE 1

//  A held plan waits for a verdict, which may never come (a rank that died
//  mid-load, a lost report or Verdict): a timer plans again at the core's
//  next deadline (a load's or a save's, a drain's end, the lookup bound),
//  the core's clock advanced by the driver's time held.
static void s_arm_deadline(kvt_ctx_t *ctx, s_scheduler_t *self)
{
    if (self->timer)
        return;
    uint64_t due = kvt_sched_next_deadline(self->core);
    if (due == UINT64_MAX)
        return;
    uint64_t now = self->held_core_us + (kvt_ctx_now(ctx) - self->held_ctx_ns) / 1000;
    uint64_t after_us = due > now ? due - now : 0;
    self->timer = kvt_ctx_timer(ctx, after_us > UINT64_MAX / 1000 ? UINT64_MAX : after_us * 1000,
                                S_TIMER_DEADLINE);
}

static int s_try_plan(kvt_ctx_t *ctx, s_scheduler_t *self, uint64_t step, bool prev_failed);

static void s_on_timer(kvt_ctx_t *ctx, void *selfp, uint64_t tag)
{
    s_scheduler_t *self = selfp;
    self->timer = 0;
    if (tag != S_TIMER_DEADLINE || !self->held)
        return;
    self->changed = true;
    kvt_sched_set_now(self->core,
                      self->held_core_us + (kvt_ctx_now(ctx) - self->held_ctx_ns) / 1000);
    if (s_try_plan(ctx, self, self->held_step, false) != 0)
        kvt_ctx_log(ctx, 0, "sending the plan after a load deadline failed");
}

//  Plans `step` and sends it, or holds the reply. Returns 0 or -1.
static int s_try_plan(kvt_ctx_t *ctx, s_scheduler_t *self, uint64_t step, bool prev_failed)
{
    kvt_msg_t m;
    memset(&m, 0, sizeof m);
    int rc = kvt_sched_plan(self->core, step, prev_failed, &m.u.step_plan);
    if (rc == KVT_SCHED_REFUSED) {
        kvt_ctx_log(ctx, 1, "Schedule for step %llu refused: not the next step",
                    (unsigned long long)step);
        return 0;
    }
    if (rc == KVT_SCHED_HOLD) {
        if (!self->held) {
            self->holds++;
            self->held_ctx_ns = kvt_ctx_now(ctx);
            self->held_core_us = kvt_sched_now(self->core);
        }
        self->held = true;
        self->held_step = step;
        s_arm_deadline(ctx, self);
        return 0;
    }
    self->held = false;
    if (self->timer) {
        kvt_ctx_cancel(ctx, self->timer);
        self->timer = 0;
    }
    m.kind = KVT_MSG_STEP_PLAN;
    return kvt_ctx_send(ctx, self->engine, &m);
}

static int s_on_schedule(kvt_ctx_t *ctx, void *selfp, kvt_aid_t from, kvt_msg_t *msg)
{
    s_scheduler_t *self = selfp;
    const kvt_schedule_t *sc = &msg->u.schedule;
    if (self->held && sc->step == self->held_step) {
        //  A repeat of the held Schedule: its arrivals are already in.
        kvt_ctx_log(ctx, 1, "repeated Schedule for held step %llu dropped",
                    (unsigned long long)sc->step);
        return 0;
    }
    if (sc->step != kvt_sched_next_step(self->core)) {
        kvt_ctx_log(ctx, 1, "Schedule for step %llu refused: expected step %llu",
                    (unsigned long long)sc->step,
                    (unsigned long long)kvt_sched_next_step(self->core));
        self->schedules_refused++;
        return 0;
    }
    self->changed = true; //  arrivals and a plan change the core (an audit at quiescence)
    kvt_sched_set_now(self->core, sc->now_us);
    for (uint32_t i = 0; i < sc->narrivals; i++)
        if (kvt_sched_arrive(self->core, &sc->arrivals[i]) != 0) {
            self->arrivals_refused++;
            kvt_ctx_log(ctx, 1, "request %llu refused (duplicate id or longer than the pool)",
                        (unsigned long long)sc->arrivals[i].req);
        }
    //  The engine's preemptions, then its aborts, after the arrivals (a
    //  request may arrive and go in one Schedule) and before the plan
    //  applies the previous step: a request torn down now computes nothing
    //  more, and its in-flight load and saves stay owned by their indexes.
    for (uint32_t i = 0; i < sc->npreempts; i++)
        if (kvt_sched_preempt(self->core, sc->preempts[i]) != 0) {
            self->preempts_refused++;
            kvt_ctx_log(ctx, 1, "preempt of request %llu refused (not running or loading)",
                        (unsigned long long)sc->preempts[i]);
        }
    for (uint32_t i = 0; i < sc->naborts; i++)
        if (kvt_sched_abort(self->core, sc->aborts[i]) != 0) {
            self->aborts_refused++;
            kvt_ctx_log(ctx, 1, "abort of request %llu refused (unknown or finished)",
                        (unsigned long long)sc->aborts[i]);
        }
    return s_try_plan(ctx, self, sc->step, sc->prev_failed);
}

static int s_on_verdict(kvt_ctx_t *ctx, void *selfp, kvt_aid_t from, kvt_msg_t *msg)
{
    s_scheduler_t *self = selfp;
    self->changed = true; //  so does a verdict
    if (kvt_sched_verdict(self->core, &msg->u.verdict) != 0)
        kvt_ctx_log(ctx, 3, "stale verdict chan=%u op=%llu/%u", msg->u.verdict.chan,
                    (unsigned long long)msg->u.verdict.op.req, msg->u.verdict.op.gen);
    if (self->held)
        return s_try_plan(ctx, self, self->held_step, false);
    return 0;
}

//  What a deep audit walks, in units: every HBM block, every image the
//  state-offload index can hold (tier_chunks, its cap), every record, save
//  in flight and orphan.
static uint64_t s_audit_cost(const s_scheduler_t *self, const kvt_sched_stats_t *st)
{
    uint64_t images = self->a.cfg.state_bytes > 0 ? self->a.cfg.tier_chunks : 0;
    return (uint64_t)self->a.cfg.hbm_blocks + images + st->records + st->saves_outstanding +
           st->load_orphans;
}

//  The deep audit, decimated (kvt_scheduler.h): at the first read that
//  finds the core quiescent after a change, and whenever the reads' credit
//  covers its cost.
static void s_audit(kvt_ctx_t *ctx, s_scheduler_t *self, bool quiescent)
{
    kvt_sched_stats_t st;
    kvt_sched_stats(self->core, &st);
    self->audit_credit += KVT_SCHEDULER_AUDIT_CREDIT;
    if (!(quiescent && self->changed) && self->audit_credit < s_audit_cost(self, &st))
        return;
    char err[256];
    int audit = kvt_sched_audit(self->core, err, sizeof err);
    if (audit != 0)
        kvt_ctx_log(ctx, 0, "%s", err);
    self->audit_ok = audit == 0;
    self->audits_deep++;
    self->audit_credit = 0;
    self->changed = false;
}

static int s_on_stats(kvt_ctx_t *ctx, void *selfp, kvt_aid_t from, kvt_msg_t *msg)
{
    s_scheduler_t *self = selfp;
    if (!msg->u.stats.request)
        return 0;
    kvt_counter_t c[S_COUNTERS];
    uint32_t n = 0;
    kvt_sched_counters(self->core, c, &n, S_COUNTERS);
    bool quiescent = kvt_sched_quiescent(self->core);
    s_audit(ctx, self, quiescent);
    kvt_counter_add(c, &n, S_COUNTERS, "sched.audit_ok", self->audit_ok);
    kvt_counter_add(c, &n, S_COUNTERS, "sched.quiescent", quiescent);
    kvt_counter_add(c, &n, S_COUNTERS, "sched.holds", self->holds);
    kvt_counter_add(c, &n, S_COUNTERS, "sched.arrivals_refused", self->arrivals_refused);
    kvt_counter_add(c, &n, S_COUNTERS, "sched.schedules_refused", self->schedules_refused);
    kvt_counter_add(c, &n, S_COUNTERS, "sched.aborts_refused", self->aborts_refused);
    kvt_counter_add(c, &n, S_COUNTERS, "sched.preempts_refused", self->preempts_refused);
    kvt_counter_add(c, &n, S_COUNTERS, "sched.audits_deep", self->audits_deep);
    return kvt_counters_reply(ctx, from, c, n);
}

//  The state-offload index's warnings (the verified window at start, the
//  first expired hold) go to the actor's log; ctx lives as long as the actor.
static void s_index_log(void *arg, const char *line)
{
    kvt_ctx_log(arg, 1, "%s", line);
}

static void *s_init(kvt_ctx_t *ctx, void *args)
{
    s_scheduler_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->a = *(const kvt_scheduler_args_t *)args;
    self->engine = kvt_ctx_lookup(ctx, self->a.engine);
    if (!self->a.cfg.log) {
        self->a.cfg.log = s_index_log;
        self->a.cfg.log_arg = ctx;
    }
    char err[256];
    self->core = self->engine == KVT_AID_NONE ? NULL : kvt_sched_new(&self->a.cfg, err, sizeof err);
    if (!self->core) {
        kvt_ctx_log(ctx, 0, "%s", self->engine == KVT_AID_NONE ? "no engine actor" : err);
        free(self);
        return NULL;
    }
    if (self->a.prime && self->a.prime(self->core, self->a.prime_arg) != 0) {
        kvt_ctx_log(ctx, 0, "priming the core failed");
        kvt_sched_destroy(&self->core);
        free(self);
        return NULL;
    }
    self->audit_ok = true;
    self->changed = true; //  the first quiescent read audits what it was built (and primed) with
    return self;
}

static void s_stop(kvt_ctx_t *ctx, void *selfp)
{
    s_scheduler_t *self = selfp;
    kvt_sched_destroy(&self->core);
    free(self);
}

const kvt_actor_class_t kvt_scheduler_class = {
    .type = "scheduler",
    .init = s_init,
    .stop = s_stop,
    .on_timer = s_on_timer,
    .on =
        {
            [KVT_MSG_SCHEDULE] = s_on_schedule,
            [KVT_MSG_VERDICT] = s_on_verdict,
            [KVT_MSG_STATS] = s_on_stats,
        },
};
