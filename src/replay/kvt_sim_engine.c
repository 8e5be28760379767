/*  kvt_engine — see kvt_engine.h. */
#include "kvt_sim_engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_TIMER_START 1 //  timer tag: the first Schedule

enum { W_NONE = 0, W_PLAN, W_STEP, W_STATS };

typedef struct {
    kvt_sim_engine_args_t a;      //  configuration (borrowed pointers)
    kvt_sim_engine_result_t *out; //  results
    kvt_aid_t sched;              //  scheduler id
    kvt_aid_t *runners;           //  runner ids, one per rank
    uint32_t next;                //  next request to arrive
    uint64_t step;                //  current step number
    uint64_t clock_us;            //  modelled clock
    int waiting_for;              //  W_*
    uint32_t step_pending;        //  ranks that have not answered StepDone
    uint8_t *step_answered;       //  per rank: answered the running step's StepDone
    bool step_failed;             //  a rank reported the running step failed
    uint64_t step_us;             //  modelled cost of the running step
    uint64_t *first_token_us;     //  per request: modelled time of the first token (0 = not yet)
    uint8_t *wrong;               //  per request: a rank reported wrong restored bytes
    uint32_t ended;               //  requests finished or rejected
    uint32_t stats_expected;      //  Stats replies awaited
    uint32_t stats_received;      //  Stats replies received
    uint64_t empty_steps;         //  plans with no work that were not idle (should not happen)
} s_engine_t;

int kvt_sim_engine_result_add(kvt_sim_engine_result_t *self, const char *actor, const char *name,
                              uint64_t value)
{
    if (self->ncounters == self->counters_cap) {
        uint32_t cap = self->counters_cap ? self->counters_cap * 2 : 256;
        kvt_sim_engine_counter_t *c = realloc(self->counters, (size_t)cap * sizeof *c);
        if (!c)
            return -1;
        self->counters = c;
        self->counters_cap = cap;
    }
    kvt_sim_engine_counter_t *c = &self->counters[self->ncounters++];
    snprintf(c->actor, sizeof c->actor, "%s", actor);
    snprintf(c->c.name, sizeof c->c.name, "%s", name);
    c->c.value = value;
    return 0;
}

void kvt_sim_engine_result_clear(kvt_sim_engine_result_t *self)
{
    free(self->counters);
    memset(self, 0, sizeof *self);
}

static int s_send_schedule(kvt_ctx_t *ctx, s_engine_t *self)
{
    const kvt_workload_t *wl = self->a.wl;
    uint32_t first = self->next, n = 0;
    uint64_t bytes = 0;
    while (first + n < wl->n && wl->reqs[first + n].arrival_us <= self->clock_us &&
           n < KVT_MSG_MAX_ENTRIES) {
        uint64_t b = (uint64_t)wl->reqs[first + n].input_len * 4;
        if (n > 0 && bytes + b > self->a.max_arrival_bytes)
            break; //  the rest goes with the next step
        bytes += b;
        n++;
    }
    kvt_arrival_t *arr = n ? calloc(n, sizeof *arr) : NULL;
    int rc = 0;
    if (n && !arr)
        return -1;
    for (uint32_t i = 0; i < n; i++) {
        const kvt_wreq_t *r = &wl->reqs[first + i];
        arr[i].req = first + i;
        arr[i].ntokens = r->input_len;
        arr[i].max_new_tokens = r->output_len;
        arr[i].arrival_us = r->arrival_us;
        arr[i].tokens = malloc((size_t)r->input_len * sizeof(uint32_t));
        if (!arr[i].tokens) {
            rc = -1;
            goto done;
        }
        kvt_workload_tokens(wl, first + i, arr[i].tokens);
    }
    kvt_msg_t m;
    memset(&m, 0, sizeof m);
    m.kind = KVT_MSG_SCHEDULE;
    m.u.schedule.step = ++self->step;
    m.u.schedule.arrivals = arr;
    m.u.schedule.narrivals = n;
    m.u.schedule.now_us = self->clock_us;
    m.u.schedule.prev_failed = self->step_failed;
    rc = kvt_ctx_send(ctx, self->sched, &m);
    if (rc == 0) {
        self->next += n;
        self->waiting_for = W_PLAN;
        self->step_failed = false;
    }
done:
    for (uint32_t i = 0; i < n; i++)
        free(arr[i].tokens);
    free(arr);
    if (rc != 0)
        kvt_ctx_log(ctx, 0, "cannot send Schedule for step %llu", (unsigned long long)self->step);
    return rc;
}

static void s_request_stats(kvt_ctx_t *ctx, s_engine_t *self)
{
    self->waiting_for = W_STATS;
    kvt_msg_t m;
    memset(&m, 0, sizeof m);
    m.kind = KVT_MSG_STATS;
    m.u.stats.request = true;
    snprintf(m.u.stats.from, sizeof m.u.stats.from, "%s", kvt_ctx_name(ctx, kvt_ctx_self(ctx)));
    self->stats_expected = 0;
    for (const char *const *name = self->a.stats_from; name && *name; name++) {
        kvt_aid_t aid = kvt_ctx_lookup(ctx, *name);
        if (aid != KVT_AID_NONE && kvt_ctx_send(ctx, aid, &m) == 0)
            self->stats_expected++;
    }
    if (self->stats_expected == 0)
        kvt_ctx_exit(ctx, 0);
}

static int s_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void s_finish(kvt_ctx_t *ctx, s_engine_t *self)
{
    const kvt_workload_t *wl = self->a.wl;
    uint64_t *ttft = malloc((size_t)(wl->n ? wl->n : 1) * sizeof *ttft);
    uint32_t n = 0;
    for (uint32_t i = 0; ttft && i < wl->n; i++)
        if (self->first_token_us[i])
            ttft[n++] = self->first_token_us[i] - wl->reqs[i].arrival_us;
    if (ttft && n) {
        qsort(ttft, n, sizeof *ttft, s_cmp_u64);
        self->out->ttft_p50_ms = ttft[(n - 1) * 50 / 100] / 1e3;
        self->out->ttft_p90_ms = ttft[(n - 1) * 90 / 100] / 1e3;
        self->out->ttft_p99_ms = ttft[(n - 1) * 99 / 100] / 1e3;
    }
    free(ttft);
    self->out->model_time_us = self->clock_us;
    self->out->steps = self->step;
    self->out->done = true;
    kvt_ctx_exit(ctx, 0);
}

static void s_events(s_engine_t *self, const kvt_step_plan_t *p)
{
    kvt_sim_engine_result_t *o = self->out;
    for (uint32_t i = 0; i < p->nevents; i++) {
        const kvt_event_t *ev = &p->events[i];
        switch (ev->type) {
        case KVT_EV_ADMIT:
            o->hbm_hit_tokens += ev->a;
            break;
        case KVT_EV_LOADED:
            o->tier_hit_tokens += ev->b;
            o->disk_hit_tokens += ev->c;
            o->loads_ok++;
            break;
        case KVT_EV_RETREAT:
            o->loads_failed++;
            //  c: HBM hit tokens the retreat could not keep.
            o->hbm_hit_tokens -= ev->c < o->hbm_hit_tokens ? ev->c : o->hbm_hit_tokens;
            break;
        case KVT_EV_FINISH:
            self->ended++;
            if (ev->c == 1)
                o->rejected++;
            else {
                o->finished++;
                o->input_tokens += ev->a;
            }
            break;
        default:
            break;
        }
    }
}

static int s_on_plan(kvt_ctx_t *ctx, void *selfp, kvt_aid_t from, kvt_msg_t *msg)
{
    s_engine_t *self = selfp;
    const kvt_step_plan_t *p = &msg->u.step_plan;
    if (self->waiting_for != W_PLAN || p->step != self->step) {
        kvt_ctx_log(ctx, 1, "unexpected StepPlan for step %llu (at step %llu)",
                    (unsigned long long)p->step, (unsigned long long)self->step);
        return -1;
    }
    s_events(self, p);
    bool work = p->nentries || p->nloads || p->nsaves;
    if (!work) {
        uint32_t n = self->a.wl->n;
        if (p->idle && self->next >= n) {
            if (self->ended < n)
                kvt_ctx_log(ctx, 0, "the scheduler is idle but %u of %u requests never ended",
                            n - self->ended, n);
            s_request_stats(ctx, self);
            return 0;
        }
        if (p->idle && self->a.wl->reqs[self->next].arrival_us > self->clock_us)
            self->clock_us = self->a.wl->reqs[self->next].arrival_us;
        else if (!p->idle) {
            //  Nothing ran although something is waiting: the scheduler
            //  found no room; advance the clock so the replay cannot spin.
            self->empty_steps++;
            self->clock_us += self->a.step_base_us;
            if (self->empty_steps % 100000 == 0)
                kvt_ctx_log(ctx, 1, "%llu empty steps (%u of %u requests ended)",
                            (unsigned long long)self->empty_steps, self->ended, n);
        }
        return s_send_schedule(ctx, self);
    }
    uint64_t tokens = 0;
    for (uint32_t i = 0; i < p->nentries; i++)
        tokens += p->entries[i].end - p->entries[i].start;
    self->step_us = self->a.step_base_us + tokens * self->a.token_ns / 1000;
    uint64_t step_end = self->clock_us + self->step_us;
    for (uint32_t i = 0; i < p->nentries; i++) {
        const kvt_entry_t *e = &p->entries[i];
        if (e->op.req < self->a.wl->n && !self->first_token_us[e->op.req] &&
            e->end >= self->a.wl->reqs[e->op.req].input_len)
            self->first_token_us[e->op.req] = step_end;
    }
    kvt_msg_t m;
    memset(&m, 0, sizeof m);
    m.kind = KVT_MSG_STEP_EXEC;
    m.u.step_exec.step = p->step;
    m.u.step_exec.entries = p->entries;
    m.u.step_exec.nentries = p->nentries;
    m.u.step_exec.loads = p->loads;
    m.u.step_exec.nloads = p->nloads;
    m.u.step_exec.saves = p->saves;
    m.u.step_exec.nsaves = p->nsaves;
    self->step_pending = 0;
    self->step_failed = false;
    memset(self->step_answered, 0, self->a.tp);
    for (uint32_t r = 0; r < self->a.tp; r++) {
        m.u.step_exec.rank = r;
        if (kvt_ctx_send(ctx, self->runners[r], &m) != 0) {
            kvt_ctx_log(ctx, 0, "cannot send StepExec to rank %u", r);
            return -1;
        }
        self->step_pending++;
    }
    self->waiting_for = W_STEP;
    return 0;
}

static int s_on_done(kvt_ctx_t *ctx, void *selfp, kvt_aid_t from, kvt_msg_t *msg)
{
    s_engine_t *self = selfp;
    const kvt_step_done_t *d = &msg->u.step_done;
    if (self->waiting_for != W_STEP || d->step != self->step || d->rank >= self->a.tp ||
        from != self->runners[d->rank] || self->step_answered[d->rank]) {
        kvt_ctx_log(ctx, 1, "unexpected StepDone for step %llu from rank %u",
                    (unsigned long long)d->step, d->rank);
        return -1;
    }
    self->step_answered[d->rank] = 1;
    if (!d->ok) {
        self->out->steps_failed++;
        self->step_failed = true;
    }
    for (uint32_t i = 0; i < d->nwrong; i++)
        if (d->wrong[i] < self->a.wl->n && !self->wrong[d->wrong[i]]) {
            self->wrong[d->wrong[i]] = 1;
            self->out->wrong_resumes++;
        }
    if (--self->step_pending > 0)
        return 0;
    self->clock_us += self->step_us;
    return s_send_schedule(ctx, self);
}

static int s_on_stats(kvt_ctx_t *ctx, void *selfp, kvt_aid_t from, kvt_msg_t *msg)
{
    s_engine_t *self = selfp;
    const kvt_stats_t *st = &msg->u.stats;
    if (st->request || self->waiting_for != W_STATS)
        return 0;
    for (uint32_t i = 0; i < st->ncounters; i++)
        if (kvt_sim_engine_result_add(self->out, st->from, st->counters[i].name,
                                      st->counters[i].value) != 0) {
            kvt_ctx_log(ctx, 0, "out of memory collecting counters");
            break;
        }
    if (++self->stats_received >= self->stats_expected)
        s_finish(ctx, self);
    return 0;
}

static void s_on_timer(kvt_ctx_t *ctx, void *selfp, uint64_t tag)
{
    s_engine_t *self = selfp;
    if (tag != S_TIMER_START || self->waiting_for != W_NONE)
        return;
    if (self->a.wl->n == 0) {
        s_finish(ctx, self);
        return;
    }
    self->clock_us = self->a.wl->reqs[0].arrival_us;
    s_send_schedule(ctx, self);
}

static void *s_init(kvt_ctx_t *ctx, void *args)
{
    s_engine_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->a = *(const kvt_sim_engine_args_t *)args;
    self->out = self->a.out;
    if (!self->a.step_base_us)
        self->a.step_base_us = 4000;
    if (!self->a.token_ns)
        self->a.token_ns = 40000;
    if (!self->a.max_arrival_bytes)
        self->a.max_arrival_bytes = 4u << 20;
    uint32_t n = self->a.wl->n ? self->a.wl->n : 1;
    self->runners = calloc(self->a.tp ? self->a.tp : 1, sizeof(kvt_aid_t));
    self->first_token_us = calloc(n, sizeof(uint64_t));
    self->step_answered = calloc(self->a.tp ? self->a.tp : 1, 1);
    self->wrong = calloc(n, 1);
    self->sched = kvt_ctx_lookup(ctx, self->a.scheduler);
    bool ok = self->runners && self->first_token_us && self->wrong && self->out &&
              self->step_answered && self->sched != KVT_AID_NONE && self->a.tp > 0;
    for (uint32_t r = 0; ok && r < self->a.tp; r++) {
        char name[32];
        snprintf(name, sizeof name, "runner.%u", r);
        self->runners[r] = kvt_ctx_lookup(ctx, name);
        ok = self->runners[r] != KVT_AID_NONE;
    }
    if (!ok) {
        kvt_ctx_log(ctx, 0, "engine: bad configuration (scheduler '%s', %u ranks)",
                    self->a.scheduler, self->a.tp);
        free(self->runners);
        free(self->first_token_us);
        free(self->wrong);
        free(self->step_answered);
        free(self);
        return NULL;
    }
    kvt_sim_engine_result_clear(self->out);
    self->out->requests = self->a.wl->n;
    kvt_ctx_timer(ctx, 0, S_TIMER_START);
    return self;
}

static void s_stop(kvt_ctx_t *ctx, void *selfp)
{
    s_engine_t *self = selfp;
    free(self->runners);
    free(self->first_token_us);
    free(self->wrong);
    free(self->step_answered);
    free(self);
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
