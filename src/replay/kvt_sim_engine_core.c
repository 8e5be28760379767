/*  kvt_sim_engine_core — see kvt_sim_engine_core.h. */
#include "kvt_sim_engine_core.h"

#include <math.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { W_NONE = 0, W_PLAN, W_STEP, W_STATS, W_OVER };

//  A request as the abort and preempt faults see it.
typedef struct {
    uint64_t hit_hbm;   //  HBM hit tokens its first admission counted
    uint64_t hit_tier;  //  tier tokens ...
    uint64_t hit_disk;  //  of them from disk ...
    uint64_t save_step; //  the step of its latest save (0 = none)
    uint32_t gen1;      //  its first admission's generation (0: none)
    uint8_t phase;      //  KVT_SIM_PHASE_*
    uint8_t torn;       //  an abort was sent for it
    uint8_t pr_done;    //  a preempt was sent for it
    uint8_t preempted;  //  admitted again (its first admission undone)
    uint8_t linger;     //  Schedules it stayed a target after its FINISH
} s_freq_t;

//  Plans after a save within which its request counts as saving when it
//  finishes (KVT_SIM_PHASE_DONE_SAVING).
#define S_SAVE_WINDOW 8u

struct kvt_sim_engine_core_t {
    kvt_sim_engine_core_cfg_t a;  //  configuration (defaults applied)
    kvt_sim_engine_result_t *out; //  results (borrowed)
    uint32_t next;                //  next request to arrive
    uint64_t step;                //  current step number
    uint64_t clock_us;            //  modelled clock
    int waiting_for;              //  W_*
    uint32_t step_pending;        //  ranks that have not answered StepDone
    uint8_t *step_answered;       //  per rank: answered the running step's StepDone
    bool step_failed;             //  a rank reported the running step failed
    uint64_t step_us;             //  modelled cost of the running step
    uint64_t *first_token_us;     //  per request: modelled time of the first token (0 = not yet)
    uint64_t *arrival_us;         //  per request: when it arrived (its timestamp, or its
                                  //  release by the closed loop)
    uint64_t *load_start_us;      //  per request: when its latest load was dispatched
    uint64_t *ready_us;           //  per request: when its latest load's copy ended (0 = none)
    uint8_t *load_state;          //  per request: its latest load carries a state image
    uint64_t link_free_us;        //  when the host-to-device link is free (loads queue on it)
    double save_link_ns;          //  device-to-host link time of every save so far
    uint8_t *wrong;               //  per request: a rank reported wrong restored bytes
    uint8_t *finished;            //  per request: its FINISH event was counted
    uint32_t ended;               //  requests finished or rejected
    uint32_t stats_expected;      //  Stats replies awaited
    uint32_t stats_received;      //  Stats replies received
    uint64_t empty_steps;         //  plans with no work that were not idle (should not happen)
    bool stalled;                 //  requests wait and the last plans ran, loaded, saved nothing
    uint64_t stall_from_us;       //  modelled time of the first plan of that stretch
    kvt_arrival_t *arr;           //  the last Schedule's arrivals (owned)
    uint32_t narr;                //  entries in arr
    s_freq_t *fq;                 //  per request: the faults' view (NULL: no abort or
                                  //  preempt fault configured)
    uint32_t *targets;            //  arrived fault targets not hit yet (and not ended)
    uint32_t ntargets;            //  entries in targets
    uint32_t *saving;             //  requests the last plan marked saving
    uint32_t nsaving;             //  entries in saving
    uint64_t *ab_ids;             //  the Schedule's aborts (room for every request)
    uint64_t *pr_ids;             //  the Schedule's preempts (likewise)
};

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

void kvt_sim_engine_result_percentiles(kvt_sim_engine_result_t *self)
{
    uint32_t n = self->nttft;
    if (!n)
        return;
    self->ttft_p50_ms = self->ttft_us[(n - 1) * 50 / 100] / 1e3;
    self->ttft_p90_ms = self->ttft_us[(n - 1) * 90 / 100] / 1e3;
    self->ttft_p99_ms = self->ttft_us[(n - 1) * 99 / 100] / 1e3;
}

void kvt_sim_engine_result_clear(kvt_sim_engine_result_t *self)
{
    free(self->ttft_us);
    free(self->counters);
    memset(self, 0, sizeof *self);
}

static void s_free_arrivals(kvt_sim_engine_core_t *self)
{
    for (uint32_t i = 0; i < self->narr; i++)
        free(self->arr[i].tokens);
    free(self->arr);
    self->arr = NULL;
    self->narr = 0;
}

kvt_sim_engine_core_t *kvt_sim_engine_core_new(const kvt_sim_engine_core_cfg_t *cfg,
                                               kvt_sim_engine_result_t *result)
{
    if (!cfg->wl || cfg->tp == 0 || !result)
        return NULL;
    kvt_sim_engine_core_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->a = *cfg;
    self->out = result;
    if (!(self->a.cost.prefill_tps > 0))
        kvt_cost_defaults(&self->a.cost, "dense", cfg->tp);
    if (!self->a.max_arrival_bytes)
        self->a.max_arrival_bytes = 4u << 20;
    uint32_t n = cfg->wl->n ? cfg->wl->n : 1;
    self->first_token_us = calloc(n, sizeof(uint64_t));
    self->arrival_us = calloc(n, sizeof(uint64_t));
    self->wrong = calloc(n, 1);
    self->finished = calloc(n, 1);
    self->load_start_us = calloc(n, sizeof(uint64_t));
    self->ready_us = calloc(n, sizeof(uint64_t));
    self->load_state = calloc(n, 1);
    self->step_answered = calloc(cfg->tp, 1);
    if (cfg->fault_abort || cfg->fault_preempt) {
        self->fq = calloc(n, sizeof *self->fq);
        self->targets = calloc(n, sizeof(uint32_t));
        self->saving = calloc(n, sizeof(uint32_t));
        self->ab_ids = calloc(n, sizeof(uint64_t));
        self->pr_ids = calloc(n, sizeof(uint64_t));
    }
    bool faults_ok = !(cfg->fault_abort || cfg->fault_preempt) ||
                     (self->fq && self->targets && self->saving && self->ab_ids && self->pr_ids);
    if (!self->first_token_us || !self->arrival_us || !self->wrong || !self->finished ||
        !self->step_answered || !self->load_start_us || !self->ready_us || !self->load_state ||
        !faults_ok) {
        kvt_sim_engine_core_destroy(&self);
        return NULL;
    }
    kvt_sim_engine_result_clear(result);
    result->requests = cfg->wl->n;
    return self;
}

void kvt_sim_engine_core_destroy(kvt_sim_engine_core_t **self_p)
{
    kvt_sim_engine_core_t *self = *self_p;
    if (!self)
        return;
    s_free_arrivals(self);
    free(self->first_token_us);
    free(self->arrival_us);
    free(self->wrong);
    free(self->finished);
    free(self->load_start_us);
    free(self->ready_us);
    free(self->load_state);
    free(self->step_answered);
    free(self->fq);
    free(self->targets);
    free(self->saving);
    free(self->ab_ids);
    free(self->pr_ids);
    free(self);
    *self_p = NULL;
}

bool kvt_sim_engine_saturated(uint64_t drain_us, uint64_t span_us)
{
    return drain_us > 10000000u && drain_us > span_us / 10;
}

uint32_t kvt_sim_engine_instances_for(uint64_t busy_us, uint64_t span_us, uint32_t instances)
{
    uint32_t n = instances ? instances : 1;
    //  Enough instances that their steps would fill 60 % of the arrival
    //  span, and at least one more than now.
    double need = span_us ? ceil((double)busy_us / (0.6 * (double)span_us)) : n + 1.0;
    if (need < n + 1.0)
        need = n + 1.0;
    return need > 64 ? 64u : (uint32_t)need;
}

uint64_t kvt_sim_engine_core_clock(const kvt_sim_engine_core_t *self)
{
    return self->clock_us;
}

static void s_reset(kvt_sim_engine_out_t *out)
{
    memset(out, 0, sizeof *out);
}

static void s_note(kvt_sim_engine_out_t *out, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void s_note(kvt_sim_engine_out_t *out, int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out->note, sizeof out->note, fmt, ap);
    va_end(ap);
    out->note_level = level;
}

//  Whether request i (the next in order) has arrived by the modelled clock:
//  its timestamp (open loop), or a free place among the closed loop's C in
//  flight. `idle`: the scheduler holds no request, so none is in flight
//  whatever the count says (the loop never waits on a request it lost).
static bool s_arrived(const kvt_sim_engine_core_t *self, uint32_t i, bool idle)
{
    if (!self->a.closed_loop)
        return self->a.wl->reqs[i].arrival_us <= self->clock_us;
    return idle || i - self->ended < self->a.closed_loop;
}

//  The phase fault k of its kind aims at: the kth target of one kind goes
//  to phase k mod KVT_SIM_PHASES.
static uint32_t s_aim(uint32_t i, uint32_t every)
{
    return ((i + 1) / every - 1) % KVT_SIM_PHASES;
}

//  Whether request i is a target of a fault of rate `every`, not hit yet.
static bool s_target(uint32_t i, uint32_t every, uint8_t done)
{
    return every && (i + 1) % every == 0 && !done;
}

//  The testing faults of the Schedule being built: one request in
//  fault_abort is aborted, one in fault_preempt preempted, each once, in
//  the phase its turn aims at (the kth target at phase k mod
//  KVT_SIM_PHASES), at the first Schedule that finds it there; a target
//  that ends before it reaches that phase is not hit. Only requests of
//  earlier Schedules: the scheduler knows them.
static void s_faults(kvt_sim_engine_core_t *self, kvt_sim_engine_out_t *out)
{
    uint32_t na = self->a.fault_abort, np = self->a.fault_preempt;
    if (!na && !np)
        return;
    uint32_t keep = 0, nab = 0, npr = 0;
    for (uint32_t k = 0; k < self->ntargets; k++) {
        uint32_t i = self->targets[k];
        uint32_t ph = self->fq[i].phase;
        bool gone = self->finished[i] && ph != KVT_SIM_PHASE_DONE_SAVING;
        if (s_target(i, np, self->fq[i].pr_done) && !gone && ph == s_aim(i, np)) {
            self->fq[i].pr_done = 1;
            self->pr_ids[npr++] = i;
            self->out->preempts_sent++;
            self->out->fault_phase[ph]++;
            //  Taken when it runs or loads: it waits again (refused otherwise).
            if (ph != KVT_SIM_PHASE_DONE_SAVING)
                self->fq[i].phase = KVT_SIM_PHASE_WAITING;
        } else if (s_target(i, na, self->fq[i].torn) && !gone && ph == s_aim(i, na)) {
            self->fq[i].torn = 1;
            self->ab_ids[nab++] = i;
            self->out->aborts_sent++;
            self->out->fault_phase[ph]++;
        }
        //  A finished target waits two more Schedules: its last chunk's
        //  save goes with the plan after its FINISH.
        bool left = (s_target(i, np, self->fq[i].pr_done) || s_target(i, na, self->fq[i].torn)) &&
                    (!self->finished[i] || self->fq[i].linger++ < 2);
        if (left)
            self->targets[keep++] = i;
    }
    self->ntargets = keep;
    out->schedule.aborts = nab ? self->ab_ids : NULL;
    out->schedule.naborts = nab;
    out->schedule.preempts = npr ? self->pr_ids : NULL;
    out->schedule.npreempts = npr;
}

//  Requests [first, first + n) arrive: the faults' targets among them
//  join the pending list (s_faults hits them from the next Schedule on).
static void s_add_targets(kvt_sim_engine_core_t *self, uint32_t first, uint32_t n)
{
    uint32_t na = self->a.fault_abort, np = self->a.fault_preempt;
    for (uint32_t i = first; i < first + n; i++)
        if ((na && (i + 1) % na == 0) || (np && (i + 1) % np == 0))
            self->targets[self->ntargets++] = i;
}

//  The next Schedule: the requests that arrived by the modelled clock, at
//  most max_arrival_bytes of token ids (at least one request).
static int s_schedule(kvt_sim_engine_core_t *self, bool idle, kvt_sim_engine_out_t *out)
{
    const kvt_workload_t *wl = self->a.wl;
    uint32_t first = self->next, n = 0;
    uint64_t bytes = 0;
    while (first + n < wl->n && n < KVT_MSG_MAX_ENTRIES &&
           s_arrived(self, first + n, idle && n == 0)) {
        uint64_t b = (uint64_t)wl->reqs[first + n].input_len * 4;
        if (n > 0 && bytes + b > self->a.max_arrival_bytes)
            break; //  the rest goes with the next step
        bytes += b;
        n++;
    }
    s_free_arrivals(self);
    self->arr = n ? calloc(n, sizeof *self->arr) : NULL;
    if (n && !self->arr)
        goto oom;
    self->narr = n;
    for (uint32_t i = 0; i < n; i++) {
        const kvt_wreq_t *r = &wl->reqs[first + i];
        kvt_arrival_t *a = &self->arr[i];
        a->req = first + i;
        a->ntokens = r->input_len;
        a->max_new_tokens = r->output_len;
        self->arrival_us[first + i] = self->a.closed_loop ? self->clock_us : r->arrival_us;
        a->arrival_us = self->arrival_us[first + i];
        a->tokens = malloc((size_t)r->input_len * sizeof(uint32_t));
        if (!a->tokens)
            goto oom;
        kvt_workload_tokens(wl, first + i, a->tokens);
    }
    out->what = KVT_SIM_ENGINE_SCHEDULE;
    out->schedule.step = ++self->step;
    out->schedule.arrivals = self->arr;
    out->schedule.narrivals = n;
    out->schedule.now_us = self->clock_us;
    out->schedule.prev_failed = self->step_failed;
    s_faults(self, out);
    s_add_targets(self, first, n);
    self->next += n;
    if (self->next - self->ended > self->out->max_in_flight)
        self->out->max_in_flight = self->next - self->ended;
    self->waiting_for = W_PLAN;
    self->step_failed = false;
    return 0;
oom:
    s_free_arrivals(self);
    s_note(out, 0, "cannot build the Schedule for step %llu: out of memory",
           (unsigned long long)self->step + 1);
    out->fatal = true;
    return -1;
}

static int s_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

//  The end: TTFT percentiles over the requests that produced a token.
static void s_finish(kvt_sim_engine_core_t *self, kvt_sim_engine_out_t *out)
{
    const kvt_workload_t *wl = self->a.wl;
    uint64_t *ttft = malloc((size_t)(wl->n ? wl->n : 1) * sizeof *ttft);
    uint32_t n = 0;
    for (uint32_t i = 0; ttft && i < wl->n; i++)
        if (self->first_token_us[i])
            ttft[n++] = self->first_token_us[i] - self->arrival_us[i];
    if (ttft && n) {
        qsort(ttft, n, sizeof *ttft, s_cmp_u64);
        free(self->out->ttft_us);
        self->out->ttft_us = ttft;
        self->out->nttft = n;
        kvt_sim_engine_result_percentiles(self->out);
    } else if (ttft)
        free(ttft);
    else
        s_note(out, 0, "out of memory computing the TTFT percentiles");
    self->out->model_time_us = self->clock_us;
    self->out->steps = self->step;
    self->out->save_link_us = (uint64_t)(self->save_link_ns / 1e3);
    if (wl->n) {
        //  The arrivals as they happened (a closed loop's follow the ends).
        uint64_t first = self->arrival_us[0], last = self->arrival_us[wl->n - 1];
        self->out->span_us = last > first ? last - first : 0;
        //  Up to the last first token, not the end: the decode of the last
        //  requests is their own service time, not a queue.
        uint64_t served = 0;
        for (uint32_t i = 0; i < wl->n; i++)
            if (self->first_token_us[i] > served)
                served = self->first_token_us[i];
        self->out->drain_us = served > last ? served - last : 0;
        uint64_t run = self->clock_us > first ? self->clock_us - first : 0;
        self->out->utilisation = run ? (double)self->out->busy_us / (double)run : 0;
        self->out->saturated = kvt_sim_engine_saturated(self->out->drain_us, self->out->span_us);
    }
    self->out->done = true;
    self->waiting_for = W_OVER;
    out->what = KVT_SIM_ENGINE_EXIT;
}

int kvt_sim_engine_core_start(kvt_sim_engine_core_t *self, kvt_sim_engine_out_t *out)
{
    s_reset(out);
    if (self->waiting_for != W_NONE || self->step != 0) {
        s_note(out, 1, "the engine was started twice");
        return -1;
    }
    if (self->a.wl->n == 0) {
        s_finish(self, out);
        return 0;
    }
    self->clock_us = self->a.closed_loop ? 0 : self->a.wl->reqs[0].arrival_us;
    return s_schedule(self, false, out);
}

static void s_events(kvt_sim_engine_core_t *self, const kvt_step_plan_t *p)
{
    kvt_sim_engine_result_t *o = self->out;
    for (uint32_t i = 0; i < p->nevents; i++) {
        const kvt_event_t *ev = &p->events[i];
        uint64_t q = ev->op.req;
        bool known = self->fq && q < self->a.wl->n; //  the faults track it
        //  Hits count for a request's first admission only: one a
        //  preemption undid is charged to the preemption by the loss
        //  ledger, which reads the same events (kvt_ledger.h).
        bool first = known && !self->fq[q].preempted && self->fq[q].gen1 == ev->op.gen;
        switch (ev->type) {
        case KVT_EV_ADMIT:
            if (known && self->fq[q].gen1 && self->fq[q].gen1 != ev->op.gen &&
                !self->fq[q].preempted) {
                //  Admitted again: preempted. Its first admission's hits go.
                self->fq[q].preempted = 1;
                o->preempted++;
                o->hbm_hit_tokens -= self->fq[q].hit_hbm;
                o->tier_hit_tokens -= self->fq[q].hit_tier;
                o->disk_hit_tokens -= self->fq[q].hit_disk;
                first = false;
            } else if (known && !self->fq[q].gen1) {
                self->fq[q].gen1 = ev->op.gen;
                first = true;
            }
            if (known)
                self->fq[q].phase = KVT_SIM_PHASE_RUNNING;
            if (!known || first) {
                o->hbm_hit_tokens += ev->a;
                o->admitted_tokens += ev->c;
                if (known)
                    self->fq[q].hit_hbm += ev->a;
            }
            break;
        case KVT_EV_LOADED:
            if (!known || first) {
                o->tier_hit_tokens += ev->b;
                o->disk_hit_tokens += ev->c;
                if (known) {
                    self->fq[q].hit_tier += ev->b;
                    self->fq[q].hit_disk += ev->c;
                }
            }
            o->loads_ok++;
            if (known && self->fq[q].phase == KVT_SIM_PHASE_LOADING)
                self->fq[q].phase = KVT_SIM_PHASE_RUNNING;
            if (ev->op.req < self->a.wl->n) {
                //  The copy starts when its plan dispatched it, after the
                //  loads before it on the link.
                uint64_t r = ev->op.req;
                uint64_t copy =
                    kvt_cost_load_ns(&self->a.cost, ev->b, ev->c, self->load_state[r]) / 1000;
                uint64_t at = self->load_start_us[r] > self->link_free_us ? self->load_start_us[r]
                                                                          : self->link_free_us;
                self->ready_us[r] = at + copy;
                self->link_free_us = at + copy;
                o->load_copy_us += copy;
            }
            break;
        case KVT_EV_RETREAT:
            o->loads_failed++;
            //  c: HBM hit tokens the retreat could not keep.
            if (!known || first) {
                uint64_t c = ev->c < o->hbm_hit_tokens ? ev->c : o->hbm_hit_tokens;
                o->hbm_hit_tokens -= c;
                if (known)
                    self->fq[q].hit_hbm -= c < self->fq[q].hit_hbm ? c : self->fq[q].hit_hbm;
            }
            if (known && self->fq[q].phase == KVT_SIM_PHASE_LOADING)
                self->fq[q].phase = KVT_SIM_PHASE_RUNNING;
            break;
        case KVT_EV_FINISH:
            //  A request ends once: a repeated FINISH (or one for no
            //  request) is dropped and counted, never counted twice.
            if (ev->op.req >= self->a.wl->n || self->finished[ev->op.req]) {
                o->finish_dropped++;
                break;
            }
            self->finished[ev->op.req] = 1;
            self->ended++;
            if (ev->c == KVT_FINISH_REJECTED)
                o->rejected++;
            else if (ev->c == KVT_FINISH_ABORTED)
                o->aborted++;
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

//  The phases the plan moves its requests to (after its events): a load
//  parks its request, a save marks it saving (done saving if the plan
//  finished it), a saving request of an earlier plan runs on, a finished
//  one is done.
static void s_phases(kvt_sim_engine_core_t *self, const kvt_step_plan_t *p)
{
    if (!self->fq)
        return;
    uint32_t n = self->a.wl->n;
    //  Only the requests the last plan marked saving move on: a save of
    //  the last plan is still out when this plan finished its request
    //  (saves settle after the step); one done saving is over.
    for (uint32_t k = 0; k < self->nsaving; k++) {
        s_freq_t *f = &self->fq[self->saving[k]];
        if (f->phase == KVT_SIM_PHASE_SAVING)
            f->phase =
                self->finished[self->saving[k]] ? KVT_SIM_PHASE_DONE_SAVING : KVT_SIM_PHASE_RUNNING;
        else if (f->phase == KVT_SIM_PHASE_DONE_SAVING)
            f->phase = KVT_SIM_PHASE_RUNNING; //  finished: no fault hits it now
    }
    uint32_t keep = 0;
    for (uint32_t k = 0; k < self->nsaving; k++)
        if (self->fq[self->saving[k]].phase == KVT_SIM_PHASE_DONE_SAVING)
            self->saving[keep++] = self->saving[k];
    self->nsaving = keep;
    //  Finished with a save of the last S_SAVE_WINDOW plans (likely) still
    //  out: the engine sees no save verdict.
    for (uint32_t i = 0; i < p->nevents; i++) {
        uint64_t q = p->events[i].op.req;
        if (p->events[i].type == KVT_EV_FINISH && q < n && self->fq[q].save_step &&
            self->step - self->fq[q].save_step <= S_SAVE_WINDOW &&
            self->fq[q].phase != KVT_SIM_PHASE_DONE_SAVING) {
            self->fq[q].phase = KVT_SIM_PHASE_DONE_SAVING;
            self->saving[self->nsaving++] = (uint32_t)q;
        }
    }
    for (uint32_t i = 0; i < p->nloads; i++)
        if (p->loads[i].op.req < n)
            self->fq[p->loads[i].op.req].phase = KVT_SIM_PHASE_LOADING;
    for (uint32_t i = 0; i < p->nsaves; i++) {
        uint64_t q = p->saves[i].op.req;
        if (q >= n)
            continue;
        bool listed = self->fq[q].phase == KVT_SIM_PHASE_SAVING ||
                      self->fq[q].phase == KVT_SIM_PHASE_DONE_SAVING;
        self->fq[q].phase = self->finished[q] ? KVT_SIM_PHASE_DONE_SAVING : KVT_SIM_PHASE_SAVING;
        self->fq[q].save_step = self->step;
        if (!listed)
            self->saving[self->nsaving++] = (uint32_t)q;
    }
}

//  Forward progress: a plan that runs, loads or saves nothing while the
//  scheduler is not idle (requests wait) extends a stall; the longest one
//  on the modelled clock is max_stall_us (a wedge shows as one that grows
//  without end).
static void s_stall(kvt_sim_engine_core_t *self, const kvt_step_plan_t *p)
{
    if (p->idle || p->nentries || p->nloads || p->nsaves) {
        self->stalled = false;
        return;
    }
    if (!self->stalled) {
        self->stalled = true;
        self->stall_from_us = self->clock_us;
    }
    uint64_t len = self->clock_us - self->stall_from_us;
    if (len > self->out->max_stall_us)
        self->out->max_stall_us = len;
}

int kvt_sim_engine_core_plan(kvt_sim_engine_core_t *self, const kvt_step_plan_t *p,
                             kvt_sim_engine_out_t *out)
{
    s_reset(out);
    if (self->waiting_for != W_PLAN || p->step != self->step) {
        s_note(out, 1, "unexpected StepPlan for step %llu (at step %llu)",
               (unsigned long long)p->step, (unsigned long long)self->step);
        return -1;
    }
    s_events(self, p);
    s_phases(self, p);
    if (self->a.ledger)
        kvt_ledger_plan(self->a.ledger, p);
    s_stall(self, p);
    const kvt_workload_t *wl = self->a.wl;
    bool work =
        p->nentries || p->nloads || p->nsaves || p->nlookups || p->nlookup_releases || p->ntouches;
    if (!work) {
        if (p->idle && self->next >= wl->n) {
            if (self->ended < wl->n)
                s_note(out, 0, "the scheduler is idle but %u of %u requests never ended",
                       wl->n - self->ended, wl->n);
            self->waiting_for = W_STATS;
            out->what = KVT_SIM_ENGINE_STATS;
            return 0;
        }
        if (p->idle && !self->a.closed_loop && wl->reqs[self->next].arrival_us > self->clock_us)
            self->clock_us = wl->reqs[self->next].arrival_us;
        else if (!p->idle) {
            //  Nothing ran although something is waiting: the scheduler
            //  found no room; advance the clock so the replay cannot spin.
            self->empty_steps++;
            self->clock_us += (uint64_t)self->a.cost.step_us;
            if (self->empty_steps % 100000 == 0)
                s_note(out, 1, "%llu empty steps (%u of %u requests ended)",
                       (unsigned long long)self->empty_steps, self->ended, wl->n);
        }
        return s_schedule(self, p->idle, out);
    }
    for (uint32_t i = 0; i < p->nloads; i++)
        if (p->loads[i].op.req < wl->n) {
            self->load_start_us[p->loads[i].op.req] = self->clock_us;
            self->load_state[p->loads[i].op.req] = p->loads[i].state;
        }
    for (uint32_t i = 0; i < p->nsaves; i++)
        self->save_link_ns += (double)kvt_cost_save_ns(
            &self->a.cost, p->saves[i].end - p->saves[i].start, p->saves[i].image);
    kvt_cost_work_t cw;
    memset(&cw, 0, sizeof cw);
    for (uint32_t i = 0; i < p->nentries; i++) {
        const kvt_entry_t *e = &p->entries[i];
        uint32_t prompt = e->op.req < wl->n ? wl->reqs[e->op.req].input_len : UINT32_MAX;
        kvt_cost_work_add(&cw, e->start, e->end, prompt);
    }
    self->step_us = (kvt_cost_step_ns(&self->a.cost, &cw) + 500) / 1000;
    self->out->busy_us += self->step_us;
    uint64_t step_end = self->clock_us + self->step_us;
    for (uint32_t i = 0; i < p->nentries; i++) {
        const kvt_entry_t *e = &p->entries[i];
        if (e->op.req < wl->n && !self->first_token_us[e->op.req] &&
            e->end >= wl->reqs[e->op.req].input_len) {
            //  A request whose copy is still running gets its token one
            //  step after the copy ends.
            uint64_t ready = self->ready_us[e->op.req];
            uint64_t ft = step_end;
            if (ready && ready + self->step_us > step_end) {
                ft = ready + self->step_us;
                self->out->load_wait_us += ft - step_end;
            }
            self->first_token_us[e->op.req] = ft;
        }
    }
    out->what = KVT_SIM_ENGINE_EXEC;
    out->exec.step = p->step;
    out->exec.entries = p->entries;
    out->exec.nentries = p->nentries;
    out->exec.loads = p->loads;
    out->exec.nloads = p->nloads;
    out->exec.saves = p->saves;
    out->exec.nsaves = p->nsaves;
    out->exec.lookups = p->lookups;
    out->exec.nlookups = p->nlookups;
    out->exec.lookup_releases = p->lookup_releases;
    out->exec.nlookup_releases = p->nlookup_releases;
    out->exec.touches = p->touches;
    out->exec.ntouches = p->ntouches;
    self->step_pending = self->a.tp;
    self->step_failed = false;
    memset(self->step_answered, 0, self->a.tp);
    self->waiting_for = W_STEP;
    return 0;
}

int kvt_sim_engine_core_done(kvt_sim_engine_core_t *self, const kvt_step_done_t *d,
                             kvt_sim_engine_out_t *out)
{
    s_reset(out);
    if (self->waiting_for != W_STEP || d->step != self->step || d->rank >= self->a.tp ||
        self->step_answered[d->rank]) {
        s_note(out, 1, "unexpected StepDone for step %llu from rank %u",
               (unsigned long long)d->step, d->rank);
        return -1;
    }
    self->step_answered[d->rank] = 1;
    if (!d->ok) {
        if (!self->step_failed) //  one failed step, however many ranks say so
            self->out->steps_failed++;
        self->step_failed = true;
    }
    for (uint32_t i = 0; i < d->nwrong; i++) {
        if (d->wrong[i] >= self->a.wl->n) {
            self->out->bad_wrong_ids++;
            s_note(
                out, 0,
                "StepDone for step %llu from rank %u names request %llu as wrong: no such request",
                (unsigned long long)d->step, d->rank, (unsigned long long)d->wrong[i]);
            continue;
        }
        if (!self->wrong[d->wrong[i]]) {
            self->wrong[d->wrong[i]] = 1;
            self->out->wrong_resumes++;
        }
    }
    if (--self->step_pending > 0)
        return 0;
    self->clock_us += self->step_us;
    return s_schedule(self, false, out);
}

void kvt_sim_engine_core_stats_asked(kvt_sim_engine_core_t *self, uint32_t asked,
                                     kvt_sim_engine_out_t *out)
{
    s_reset(out);
    self->stats_expected = asked;
    if (asked == 0)
        s_finish(self, out);
}

int kvt_sim_engine_core_stats(kvt_sim_engine_core_t *self, const kvt_stats_t *st,
                              kvt_sim_engine_out_t *out)
{
    s_reset(out);
    if (st->request || self->waiting_for != W_STATS)
        return 0;
    for (uint32_t i = 0; i < st->ncounters; i++)
        if (kvt_sim_engine_result_add(self->out, st->from, st->counters[i].name,
                                      st->counters[i].value) != 0) {
            s_note(out, 0, "out of memory collecting counters");
            break;
        }
    if (++self->stats_received >= self->stats_expected)
        s_finish(self, out);
    return 0;
}
