/*  kvt_metrics_collect — the collector actor: a Stats round every interval,
    published to a kvt_metrics_t. See kvt_metrics.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvtier/kvt_metrics.h"
#include "kvtier/kvt_msg.h"

#define S_RT_MAX  10                             //  runtime counters added per target
#define S_PER_SRC (KVT_MSG_MAX_STATS + S_RT_MAX) //  counter slots per target
#define S_SELF_N  4                              //  the collector's own counters

//  One target of the rounds.
typedef struct {
    const char *name; //  its actor name (borrowed from the args)
    kvt_aid_t aid;    //  its id
    bool replied;     //  replied in this round
    kvt_counter_t *c; //  its counters of this round (S_PER_SRC slots)
    uint32_t n;       //  entries of c
} s_target_t;

typedef struct {
    kvt_metrics_collector_args_t a; //  arguments (borrowed)
    s_target_t *t;                  //  the targets found in the system
    uint32_t nt;                    //  entries of t
    uint32_t waiting;               //  targets of the open round that have not replied
    bool open;                      //  a round was asked and not published yet
    uint64_t rounds;                //  rounds published
    uint64_t partial;               //  of those, published before every target replied
    uint64_t dropped;               //  Stats replies from no target, or a second one
    uint64_t last_events;           //  SIM: the driver's event count at the last tick
    uint64_t own_events;            //  SIM: this collector's events since the last tick
    uint64_t quiet_since;           //  SIM: since when the ticks saw only the collector's
                                    //  events (UINT64_MAX: they do not)
    kvt_metrics_source_t *src;      //  scratch for a publish (nt + 1)
    kvt_counter_t self_c[S_SELF_N]; //  the collector's own counters
} s_coll_t;

static void s_add(kvt_counter_t *c, uint32_t *n, uint32_t cap, const char *name, uint64_t v)
{
    if (*n >= cap)
        return;
    snprintf(c[*n].name, sizeof c[*n].name, "%s", name);
    c[*n].value = v;
    (*n)++;
}

//  Publishes the open round: every target that replied, with its runtime
//  counters, and the collector's own.
static void s_publish(kvt_ctx_t *ctx, s_coll_t *self)
{
    if (self->waiting > 0)
        self->partial++;
    self->rounds++;
    kvt_system_t *sys = kvt_ctx_system(ctx);
    uint32_t ns = 0;
    for (uint32_t i = 0; i < self->nt; i++) {
        s_target_t *t = &self->t[i];
        if (!t->replied)
            continue;
        kvt_actor_stats_t rt;
        if (kvt_system_actor_stats(sys, t->aid, &rt) == 0) { //  a local actor
            s_add(t->c, &t->n, S_PER_SRC, "rt.delivered", rt.delivered);
            s_add(t->c, &t->n, S_PER_SRC, "rt.sent", rt.sent);
            s_add(t->c, &t->n, S_PER_SRC, "rt.send_errors", rt.send_errors);
            s_add(t->c, &t->n, S_PER_SRC, "rt.decode_errors", rt.decode_errors);
            s_add(t->c, &t->n, S_PER_SRC, "rt.unhandled", rt.unhandled);
            s_add(t->c, &t->n, S_PER_SRC, "rt.handler_errors", rt.handler_errors);
            s_add(t->c, &t->n, S_PER_SRC, "rt.timers_fired", rt.timers_fired);
            s_add(t->c, &t->n, S_PER_SRC, "rt.dropped_at_stop", rt.dropped_at_stop);
            s_add(t->c, &t->n, S_PER_SRC, "rt.auth_rejected", rt.auth_rejected);
            s_add(t->c, &t->n, S_PER_SRC, "rt.foreign_frames", rt.foreign_frames);
        }
        self->src[ns++] = (kvt_metrics_source_t){t->name, t->c, t->n};
    }
    uint32_t n = 0;
    s_add(self->self_c, &n, S_SELF_N, "metrics.rounds", self->rounds);
    s_add(self->self_c, &n, S_SELF_N, "metrics.rounds_partial", self->partial);
    s_add(self->self_c, &n, S_SELF_N, "metrics.replies_dropped", self->dropped);
    s_add(self->self_c, &n, S_SELF_N, "metrics.targets", self->nt);
    self->src[ns++] = (kvt_metrics_source_t){kvt_ctx_name(ctx, kvt_ctx_self(ctx)), self->self_c, n};
    if (kvt_metrics_publish(self->a.metrics, self->src, ns) != 0)
        kvt_ctx_log(ctx, 1, "metrics: a round of %u sources was refused", ns);
    self->open = false;
}

//  Starts a round: a Stats request to every target.
static void s_ask(kvt_ctx_t *ctx, s_coll_t *self)
{
    kvt_msg_t m;
    memset(&m, 0, sizeof m);
    m.kind = KVT_MSG_STATS;
    m.u.stats.request = true;
    snprintf(m.u.stats.from, sizeof m.u.stats.from, "%s", kvt_ctx_name(ctx, kvt_ctx_self(ctx)));
    self->waiting = 0;
    for (uint32_t i = 0; i < self->nt; i++) {
        self->t[i].replied = false;
        self->t[i].n = 0;
        if (kvt_ctx_send(ctx, self->t[i].aid, &m) == 0)
            self->waiting++;
    }
    self->own_events += self->waiting; //  each request is one delivery
    self->open = true;
    if (self->waiting == 0)
        s_publish(ctx, self);
}

static uint64_t s_interval(const s_coll_t *self)
{
    return self->a.interval_ns ? self->a.interval_ns : 1000000000ull;
}

//  Under SIM a timer that always re-arms would keep the system from ever
//  being quiescent, so a stalled run would tick forever instead of ending:
//  once the ticks have seen nothing but the collector's own events (its
//  timer, its requests, the replies) for the quiet window (1000 intervals,
//  at most 60 s of virtual time), the rounds stop. LIVE has no event count
//  (kvt_sim_events is 0): there the rounds never stop.
static bool s_quiet(kvt_ctx_t *ctx, s_coll_t *self)
{
    uint64_t ev = kvt_sim_events(kvt_ctx_system(ctx));
    uint64_t now = kvt_ctx_now(ctx);
    bool only_ours = ev > 0 && self->last_events > 0 && ev - self->last_events <= self->own_events;
    self->last_events = ev;
    self->own_events = 1; //  the next tick's own timer
    if (!only_ours) {
        self->quiet_since = UINT64_MAX;
        return false;
    }
    if (self->quiet_since == UINT64_MAX)
        self->quiet_since = now;
    uint64_t window = s_interval(self) * 1000u;
    if (window > 60000000000ull)
        window = 60000000000ull;
    return now - self->quiet_since >= window;
}

static void s_on_timer(kvt_ctx_t *ctx, void *selfp, uint64_t tag)
{
    (void)tag;
    s_coll_t *self = selfp;
    if (self->open) //  the next round is due first: publish what arrived
        s_publish(ctx, self);
    if (s_quiet(ctx, self)) {
        kvt_ctx_log(ctx, 2, "metrics: only the rounds ran for the quiet window: they stop");
        return;
    }
    s_ask(ctx, self);
    kvt_ctx_timer(ctx, s_interval(self), 0);
}

static int s_on_stats(kvt_ctx_t *ctx, void *selfp, kvt_aid_t from, kvt_msg_t *msg)
{
    s_coll_t *self = selfp;
    const kvt_stats_t *st = &msg->u.stats;
    self->own_events++; //  this delivery
    if (st->request)
        return 0; //  the collector has no counters to give but its own, published
    s_target_t *t = NULL;
    for (uint32_t i = 0; i < self->nt; i++) //  a handful of targets, once per round each
        if (self->t[i].aid == from)
            t = &self->t[i];
    if (!t || !self->open || t->replied) {
        self->dropped++;
        return 0;
    }
    uint32_t n = st->ncounters < KVT_MSG_MAX_STATS ? st->ncounters : KVT_MSG_MAX_STATS;
    memcpy(t->c, st->counters, (size_t)n * sizeof *t->c);
    t->n = n;
    t->replied = true;
    if (--self->waiting == 0)
        s_publish(ctx, self);
    return 0;
}

static void s_stop(kvt_ctx_t *ctx, void *selfp)
{
    (void)ctx;
    s_coll_t *self = selfp;
    if (!self)
        return;
    for (uint32_t i = 0; i < self->nt; i++)
        free(self->t[i].c);
    free(self->t);
    free(self->src);
    free(self);
}

static void *s_init(kvt_ctx_t *ctx, void *args)
{
    const kvt_metrics_collector_args_t *a = args;
    if (!a || !a->metrics)
        return NULL;
    s_coll_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->a = *a;
    self->quiet_since = UINT64_MAX;
    uint32_t cap = 0;
    for (const char *const *p = a->targets; p && *p; p++)
        cap++;
    self->t = calloc(cap + 1, sizeof *self->t);
    self->src = calloc(cap + 1, sizeof *self->src);
    if (!self->t || !self->src)
        goto fail;
    for (uint32_t i = 0; i < cap; i++) {
        kvt_aid_t aid = kvt_ctx_lookup(ctx, a->targets[i]);
        if (aid == KVT_AID_NONE) {
            kvt_ctx_log(ctx, 1, "metrics: no actor named '%s': left out of the rounds",
                        a->targets[i]);
            continue;
        }
        s_target_t *t = &self->t[self->nt];
        t->name = a->targets[i];
        t->aid = aid;
        t->c = calloc(S_PER_SRC, sizeof *t->c);
        if (!t->c)
            goto fail;
        self->nt++;
    }
    if (kvt_ctx_timer(ctx, s_interval(self), 0) == 0)
        goto fail;
    return self;
fail:
    s_stop(ctx, self);
    return NULL;
}

const kvt_actor_class_t kvt_metrics_collector_class = {
    .type = "metrics",
    .init = s_init,
    .stop = s_stop,
    .on =
        {
            [KVT_MSG_STATS] = s_on_stats,
        },
    .on_timer = s_on_timer,
};
