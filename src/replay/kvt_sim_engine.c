/*  kvt_sim_engine — see kvt_sim_engine.h. */
#include "kvt_sim_engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_TIMER_START 1 //  timer tag: the first Schedule
#define S_TIMER_PACE  2 //  timer tag: a paced Schedule is due

typedef struct {
    kvt_sim_engine_args_t a;     //  configuration (borrowed pointers)
    kvt_sim_engine_core_t *core; //  the engine's state machine
    kvt_aid_t sched;             //  scheduler id
    kvt_aid_t *runners;          //  runner ids, one per rank
    kvt_aid_t *asked;            //  actors asked for counters (nasked of them)
    uint8_t *answered;           //  per asked actor: its reply was taken
    uint32_t nasked;             //  entries in asked
    bool stopped;                //  the engine gave up (the result says why)
    uint64_t start_ns;           //  the driver's clock at the first Schedule
    uint64_t start_us;           //  the core's clock at the first Schedule
    bool started;                //  start_ns / start_us are set
    bool held;                   //  paced: `pending` waits for its time
    kvt_schedule_t pending;      //  paced: the Schedule the timer sends
} s_engine_t;

//  The replay cannot go on (a send failed, out of memory): says why in the
//  result and ends the run, under either driver, instead of waiting forever.
static int s_abort(kvt_ctx_t *ctx, s_engine_t *self, const char *why)
{
    if (self->stopped)
        return -1;
    self->stopped = true;
    snprintf(self->a.out->error, sizeof self->a.out->error, "%s", why);
    kvt_ctx_log(ctx, 0, "engine stops the replay: %s", why);
    kvt_ctx_exit(ctx, KVT_SIM_ENGINE_EXIT_FAILED);
    return -1;
}

//  Asks every actor of stats_from for its counters; returns how many were asked.
static uint32_t s_request_stats(kvt_ctx_t *ctx, s_engine_t *self)
{
    kvt_msg_t m;
    memset(&m, 0, sizeof m);
    m.kind = KVT_MSG_STATS;
    m.u.stats.request = true;
    snprintf(m.u.stats.from, sizeof m.u.stats.from, "%s", kvt_ctx_name(ctx, kvt_ctx_self(ctx)));
    uint32_t n = 0;
    for (const char *const *name = self->a.stats_from; name && *name; name++)
        n++;
    free(self->asked);
    free(self->answered);
    self->asked = calloc(n ? n : 1, sizeof *self->asked);
    self->answered = calloc(n ? n : 1, 1);
    self->nasked = 0;
    if (!self->asked || !self->answered)
        return 0; //  nothing recorded as asked: the result is final without counters
    for (const char *const *name = self->a.stats_from; name && *name; name++) {
        kvt_aid_t aid = kvt_ctx_lookup(ctx, *name);
        if (aid != KVT_AID_NONE && kvt_ctx_send(ctx, aid, &m) == 0)
            self->asked[self->nasked++] = aid;
    }
    return self->nasked;
}

//  Whether the Schedule `s` must wait for its time on the driver's clock
//  (paced; then a timer sends it). The first Schedule anchors the two
//  clocks (also unpaced, for the result's driver_us); a later one is due
//  when as much driver time has passed as the core's clock advanced. One
//  Schedule is out at a time (the core waits for its plan), so one slot
//  holds it.
static bool s_pace(kvt_ctx_t *ctx, s_engine_t *self, const kvt_schedule_t *s)
{
    uint64_t now = kvt_ctx_now(ctx);
    if (!self->started) {
        self->started = true;
        self->start_ns = now;
        self->start_us = s->now_us;
        return false;
    }
    if (!self->a.pace)
        return false;
    uint64_t ahead_us = s->now_us > self->start_us ? s->now_us - self->start_us : 0;
    uint64_t due = ahead_us > (UINT64_MAX - self->start_ns) / 1000
                       ? UINT64_MAX
                       : self->start_ns + ahead_us * 1000;
    if (due <= now)
        return false;
    self->pending = *s;
    self->held = true;
    if (!kvt_ctx_timer(ctx, due - now, S_TIMER_PACE)) {
        self->held = false;
        s_abort(ctx, self, "cannot arm the pacing timer");
    }
    return true;
}

//  Sends a Schedule to the scheduler (now, or when its pacing timer fires).
static int s_send_schedule(kvt_ctx_t *ctx, s_engine_t *self, const kvt_schedule_t *s)
{
    kvt_msg_t m;
    memset(&m, 0, sizeof m);
    m.kind = KVT_MSG_SCHEDULE;
    m.u.schedule = *s;
    if (kvt_ctx_send(ctx, self->sched, &m) == 0)
        return 0;
    char why[96];
    snprintf(why, sizeof why, "cannot send Schedule for step %llu", (unsigned long long)s->step);
    return s_abort(ctx, self, why);
}

//  Carries out what a core call returned (rc: the call's result).
static int s_act(kvt_ctx_t *ctx, s_engine_t *self, int rc, kvt_sim_engine_out_t *out)
{
    if (out->note[0])
        kvt_ctx_log(ctx, out->note_level, "%s", out->note);
    if (rc != 0)
        return out->fatal ? s_abort(ctx, self, out->note) : rc;
    kvt_msg_t m;
    memset(&m, 0, sizeof m);
    switch (out->what) {
    case KVT_SIM_ENGINE_WAIT:
        return 0;
    case KVT_SIM_ENGINE_SCHEDULE:
        if (s_pace(ctx, self, &out->schedule))
            return self->stopped ? -1 : 0;
        return s_send_schedule(ctx, self, &out->schedule);
    case KVT_SIM_ENGINE_EXEC:
        m.kind = KVT_MSG_STEP_EXEC;
        m.u.step_exec = out->exec;
        for (uint32_t r = 0; r < self->a.tp; r++) {
            m.u.step_exec.rank = r;
            if (kvt_ctx_send(ctx, self->runners[r], &m) != 0) {
                char why[96];
                snprintf(why, sizeof why, "cannot send StepExec for step %llu to rank %u",
                         (unsigned long long)out->exec.step, r);
                return s_abort(ctx, self, why);
            }
        }
        return 0;
    case KVT_SIM_ENGINE_STATS: {
        if (self->started)
            self->a.out->driver_us = (kvt_ctx_now(ctx) - self->start_ns) / 1000;
        if (self->a.sample)
            self->a.sample(self->a.sample_arg, self->a.out, kvt_sim_engine_core_clock(self->core),
                           true);
        kvt_sim_engine_out_t next;
        kvt_sim_engine_core_stats_asked(self->core, s_request_stats(ctx, self), &next);
        return s_act(ctx, self, 0, &next);
    }
    case KVT_SIM_ENGINE_EXIT:
        kvt_ctx_exit(ctx, 0);
        return 0;
    }
    return 0;
}

static int s_on_plan(kvt_ctx_t *ctx, void *selfp, kvt_aid_t from, kvt_msg_t *msg)
{
    s_engine_t *self = selfp;
    kvt_sim_engine_out_t out;
    int rc = kvt_sim_engine_core_plan(self->core, &msg->u.step_plan, &out);
    return s_act(ctx, self, rc, &out);
}

static int s_on_done(kvt_ctx_t *ctx, void *selfp, kvt_aid_t from, kvt_msg_t *msg)
{
    s_engine_t *self = selfp;
    const kvt_step_done_t *d = &msg->u.step_done;
    if (d->rank >= self->a.tp || from != self->runners[d->rank]) {
        kvt_ctx_log(ctx, 1, "unexpected StepDone for step %llu from rank %u",
                    (unsigned long long)d->step, d->rank);
        return -1;
    }
    kvt_sim_engine_out_t out;
    int rc = kvt_sim_engine_core_done(self->core, d, &out);
    if (self->a.progress && out.what == KVT_SIM_ENGINE_SCHEDULE && out.schedule.step % 64 == 0)
        self->a.progress(self->a.progress_arg, self->a.out, kvt_sim_engine_core_clock(self->core));
    if (self->a.sample && out.what == KVT_SIM_ENGINE_SCHEDULE)
        self->a.sample(self->a.sample_arg, self->a.out, kvt_sim_engine_core_clock(self->core),
                       false);
    return s_act(ctx, self, rc, &out);
}

static int s_on_stats(kvt_ctx_t *ctx, void *selfp, kvt_aid_t from, kvt_msg_t *msg)
{
    s_engine_t *self = selfp;
    const kvt_stats_t *st = &msg->u.stats;
    if (st->request)
        return 0; //  the engine is not asked for counters
    //  Only a reply from an actor that was asked, once, under its own name:
    //  anything else would end the collection early or file counters
    //  under the wrong actor.
    uint32_t i = 0;
    while (i < self->nasked && self->asked[i] != from)
        i++;
    if (i == self->nasked || self->answered[i] || strcmp(st->from, kvt_ctx_name(ctx, from)) != 0) {
        self->a.out->stats_unexpected++;
        kvt_ctx_log(ctx, 1, "dropped a Stats reply from %s (naming '%s'): %s",
                    kvt_ctx_name(ctx, from), st->from,
                    i == self->nasked   ? "it was not asked"
                    : self->answered[i] ? "it already answered"
                                        : "the reply names another actor");
        return 0;
    }
    self->answered[i] = 1;
    kvt_sim_engine_out_t out;
    int rc = kvt_sim_engine_core_stats(self->core, st, &out);
    return s_act(ctx, self, rc, &out);
}

static void s_on_timer(kvt_ctx_t *ctx, void *selfp, uint64_t tag)
{
    s_engine_t *self = selfp;
    if (tag == S_TIMER_PACE) {
        if (!self->held || self->stopped)
            return;
        self->held = false;
        s_send_schedule(ctx, self, &self->pending);
        return;
    }
    if (tag != S_TIMER_START)
        return;
    kvt_sim_engine_out_t out;
    int rc = kvt_sim_engine_core_start(self->core, &out);
    s_act(ctx, self, rc, &out);
}

static void s_free(s_engine_t *self)
{
    kvt_sim_engine_core_destroy(&self->core);
    free(self->runners);
    free(self->asked);
    free(self->answered);
    free(self);
}

static void *s_init(kvt_ctx_t *ctx, void *args)
{
    s_engine_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->a = *(const kvt_sim_engine_args_t *)args;
    kvt_sim_engine_core_cfg_t cc;
    memset(&cc, 0, sizeof cc);
    cc.wl = self->a.wl;
    cc.tp = self->a.tp;
    cc.cost = self->a.cost;
    cc.max_arrival_bytes = self->a.max_arrival_bytes;
    cc.ledger = self->a.ledger;
    cc.closed_loop = self->a.closed_loop;
    cc.fault_abort = self->a.fault_abort;
    cc.fault_preempt = self->a.fault_preempt;
    self->core = self->a.out ? kvt_sim_engine_core_new(&cc, self->a.out) : NULL;
    self->runners = calloc(self->a.tp ? self->a.tp : 1, sizeof(kvt_aid_t));
    self->sched = kvt_ctx_lookup(ctx, self->a.scheduler);
    bool ok = self->core && self->runners && self->sched != KVT_AID_NONE;
    for (uint32_t r = 0; ok && r < self->a.tp; r++) {
        char name[32];
        snprintf(name, sizeof name, "runner.%u", r);
        self->runners[r] = kvt_ctx_lookup(ctx, name);
        ok = self->runners[r] != KVT_AID_NONE;
    }
    if (!ok) {
        kvt_ctx_log(ctx, 0, "engine: bad configuration (scheduler '%s', %u ranks)",
                    self->a.scheduler, self->a.tp);
        s_free(self);
        return NULL;
    }
    kvt_ctx_timer(ctx, 0, S_TIMER_START);
    return self;
}

static void s_stop(kvt_ctx_t *ctx, void *selfp)
{
    s_free(selfp);
}

const kvt_actor_class_t kvt_sim_engine_class = {
    .type = "engine",
    .init = s_init,
    .stop = s_stop,
    .on =
        {
            [KVT_MSG_STEP_PLAN] = s_on_plan,
            [KVT_MSG_STEP_DONE] = s_on_done,
            [KVT_MSG_STATS] = s_on_stats,
        },
    .on_timer = s_on_timer,
};
