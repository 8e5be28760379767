/*  kvt_sim.c — the SIM driver: every actor in the caller's thread, a
    virtual clock, seeded delivery order, fault hooks, crash and restart.

    Channels. Every (sender → receiver) pair that ever carried a message has
    a channel: a FIFO ring of encoded frames, each with a delivery time. A
    frame's delivery time is max(now + latency (+ fault delay), delivery
    time of the frame before it on the channel), so a frame never overtakes
    an earlier one on its channel and the head is always the earliest.

    Scheduling. A non-empty channel is in exactly one of two sets: READY (its
    head is deliverable at the current virtual time) or PENDING (a min-heap
    on (head time, channel id)). Idle channels are in neither, so one step
    costs O(log channels), never a scan of all sender × receiver pairs.

    One step of kvt_sim_run:
      1. a timer whose deadline is <= now fires (earliest deadline, then arm
         order);
      2. otherwise pending channels whose head became deliverable move to
         READY, and if READY is not empty one channel is chosen uniformly
         with the driver's seeded generator and its head is delivered;
      3. otherwise the clock jumps to the earliest head time or timer
         deadline; with neither the system is quiescent.
    Every structure is indexed by actor ids and creation order, so the run
    depends only on the seed and on what the actors do. Fault rules are
    matched in kvt_sim_fault.c; their effect on a frame is applied here.
*/
#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/kvt_heap.h"
#include "base/kvt_vec.h"
#include "kvt_runtime_int.h"

#define S_IDLE    0 //  channel empty: in no set
#define S_READY   1 //  head deliverable now: in ready[]
#define S_PENDING 2 //  head deliverable later: in the pending heap

#define S_SYSTEM_ROW KVT_MAX_ACTORS //  channel row of "$system"

//  One frame in flight.
typedef struct {
    uint64_t at;  //  delivery time (virtual ns)
    uint8_t *buf; //  encoded frame (owned)
    uint32_t len; //  frame length
} s_frame_t;

//  One sender → receiver channel.
typedef struct {
    s_frame_t *q;     //  ring of frames, capacity a power of two
    uint32_t head;    //  ring index of the oldest frame
    uint32_t count;   //  frames queued
    uint32_t cap;     //  ring capacity
    uint64_t tail_at; //  delivery time of the newest frame (FIFO floor)
    kvt_aid_t from;   //  sender (KVT_AID_SYSTEM for posts)
    kvt_aid_t to;     //  receiver
    uint32_t id;      //  creation index: tie-break in the pending heap
    uint8_t where;    //  S_IDLE / S_READY / S_PENDING
    uint32_t pos;     //  index in ready[] or in the pending heap
} s_chan_t;

struct _kvt_sim_t {
    uint64_t now;                        //  virtual clock (ns)
    kvt_rng_t rng;                       //  delivery choice and latency jitter
    s_chan_t **rows[KVT_MAX_ACTORS + 1]; //  rows[from][to], rows allocated on first use
    s_chan_t **chans;                    //  every channel, in creation order
    uint32_t nchans;                     //  channels created
    uint32_t chans_cap;                  //  capacity of chans
    s_chan_t **ready;                    //  channels with a deliverable head
    uint32_t nready;                     //  length of ready
    uint32_t ready_cap;                  //  capacity of ready (>= nchans)
    s_chan_t **pending;                  //  min-heap of channels on (head time, id)
    uint32_t npending;                   //  length of pending
    uint32_t pending_cap;                //  capacity of pending (>= nchans)
    kvt_timers_t timers;                 //  every actor's timers
    kvt_faults_t faults;                 //  fault rules
    uint64_t events;                     //  deliveries + timers run
    uint64_t inflight;                   //  frames queued on all channels
    bool exit_req;                       //  an actor called kvt_ctx_exit
    int exit_code;                       //  its code
    kvt_aid_t current;                   //  actor being run, KVT_AID_NONE outside
};

// ------------------------------------------------------------ channels ----

static s_frame_t *s_head(s_chan_t *ch)
{
    assert(ch->count > 0);
    return &ch->q[ch->head];
}

static bool s_pend_less(const void *x, const void *y, void *ctx)
{
    const s_chan_t *a = *(s_chan_t *const *)x, *b = *(s_chan_t *const *)y;
    uint64_t ta = a->q[a->head].at, tb = b->q[b->head].at;
    return ta != tb ? ta < tb : a->id < b->id;
}

static void s_pend_moved(void *elem, uint32_t pos, void *ctx)
{
    (*(s_chan_t **)elem)->pos = pos;
}

static const kvt_heap_ops_t s_pend_ops = {sizeof(s_chan_t *), s_pend_less, s_pend_moved};

//  Takes a channel out of whichever set it is in.
static void s_unschedule(kvt_sim_t *sim, s_chan_t *ch)
{
    if (ch->where == S_READY) {
        s_chan_t *last = sim->ready[--sim->nready];
        sim->ready[ch->pos] = last;
        last->pos = ch->pos;
    } else if (ch->where == S_PENDING) {
        kvt_heap_remove(sim->pending, &sim->npending, &s_pend_ops, NULL, ch->pos, NULL);
    }
    ch->where = S_IDLE;
}

//  Puts an unscheduled channel into the set its head belongs to.
static void s_schedule(kvt_sim_t *sim, s_chan_t *ch)
{
    assert(ch->where == S_IDLE);
    if (ch->count == 0)
        return;
    if (s_head(ch)->at <= sim->now) {
        ch->where = S_READY;
        ch->pos = sim->nready;
        sim->ready[sim->nready++] = ch;
    } else {
        ch->where = S_PENDING;
        assert(sim->npending < sim->pending_cap);
        kvt_heap_push(sim->pending, &sim->npending, &s_pend_ops, NULL, &ch);
    }
}

static s_chan_t *s_chan_get(kvt_sim_t *sim, kvt_aid_t from, kvt_aid_t to)
{
    uint32_t row = from == KVT_AID_SYSTEM ? S_SYSTEM_ROW : from;
    if (!sim->rows[row]) {
        sim->rows[row] = calloc(KVT_MAX_ACTORS, sizeof(s_chan_t *));
        if (!sim->rows[row])
            return NULL;
    }
    s_chan_t *ch = sim->rows[row][to];
    if (ch)
        return ch;
    //  ready and pending hold every channel at most once: sized here, so
    //  scheduling never allocates.
    uint32_t need = sim->nchans + 1;
    if (kvt_vec_reserve((void **)&sim->chans, &sim->chans_cap, need, sizeof *sim->chans) ||
        kvt_vec_reserve((void **)&sim->ready, &sim->ready_cap, need, sizeof *sim->ready) ||
        kvt_vec_reserve((void **)&sim->pending, &sim->pending_cap, need, sizeof *sim->pending))
        return NULL;
    ch = calloc(1, sizeof *ch);
    if (!ch)
        return NULL;
    ch->from = from;
    ch->to = to;
    ch->id = sim->nchans;
    sim->chans[sim->nchans++] = ch;
    sim->rows[row][to] = ch;
    return ch;
}

static int s_chan_push(s_chan_t *ch, uint64_t at, uint8_t *buf, size_t len)
{
    if (ch->count == ch->cap) {
        uint32_t cap = ch->cap ? ch->cap * 2 : 8;
        s_frame_t *q = malloc(cap * sizeof *q);
        if (!q)
            return -1;
        for (uint32_t i = 0; i < ch->count; i++)
            q[i] = ch->q[(ch->head + i) & (ch->cap - 1)];
        free(ch->q);
        ch->q = q;
        ch->cap = cap;
        ch->head = 0;
    }
    ch->q[(ch->head + ch->count) & (ch->cap - 1)] =
        (s_frame_t){.at = at, .buf = buf, .len = (uint32_t)len};
    ch->count++;
    ch->tail_at = at;
    return 0;
}

static s_frame_t s_chan_pop(s_chan_t *ch)
{
    s_frame_t f = *s_head(ch);
    ch->head = (ch->head + 1) & (ch->cap - 1);
    ch->count--;
    return f;
}

//  Empties a channel, counting its frames on the receiver under `stat`.
static void s_chan_purge(kvt_system_t *sys, s_chan_t *ch, kvt_stat_t stat)
{
    kvt_sim_t *sim = sys->sim;
    if (ch->count == 0)
        return;
    s_unschedule(sim, ch);
    kvt_count_add(&sys->actors[ch->to]->stats, stat, ch->count);
    sim->inflight -= ch->count;
    while (ch->count > 0) {
        s_frame_t f = s_chan_pop(ch);
        free(f.buf);
    }
}

static void s_purge_all(kvt_system_t *sys, kvt_stat_t stat)
{
    for (uint32_t i = 0; i < sys->sim->nchans; i++)
        s_chan_purge(sys, sys->sim->chans[i], stat);
    for (uint32_t i = 0; i < sys->nactors; i++)
        kvt_count_add(&sys->actors[i]->stats, KVT_ST_TIMERS_LOST,
                      kvt_timers_remove_owner(&sys->sim->timers, (kvt_aid_t)i));
}

// ------------------------------------------------------------ lifecycle ---

static int s_sim_new(kvt_system_t *sys)
{
    kvt_sim_t *sim = calloc(1, sizeof *sim);
    if (!sim)
        return -1;
    kvt_rng_seed(&sim->rng, sys->seed ^ 0x5EEDC0DE5EEDC0DEull);
    kvt_timers_init(&sim->timers);
    sim->current = KVT_AID_NONE;
    sys->sim = sim;
    return 0;
}

static void s_sim_destroy(kvt_system_t *sys)
{
    kvt_sim_t *sim = sys->sim;
    if (!sim)
        return;
    for (uint32_t i = 0; i < sim->nchans; i++) {
        s_chan_t *ch = sim->chans[i];
        while (ch->count > 0)
            free(s_chan_pop(ch).buf);
        free(ch->q);
        free(ch);
    }
    for (uint32_t i = 0; i <= KVT_MAX_ACTORS; i++)
        free(sim->rows[i]);
    free(sim->chans);
    free(sim->ready);
    free(sim->pending);
    kvt_faults_fini(&sim->faults);
    kvt_timers_fini(&sim->timers);
    free(sim);
    sys->sim = NULL;
}

//  Calls the class's stop on an UP actor and leaves it in `state`.
static void s_actor_stop(kvt_system_t *sys, kvt_actor_t *a, kvt_actor_state_t state)
{
    assert(a->run_state == KVT_ACTOR_UP);
    sys->sim->current = a->aid;
    if (a->cls->stop)
        a->cls->stop(&a->ctx, a->state);
    sys->sim->current = KVT_AID_NONE;
    a->state = NULL;
    a->run_state = state;
}

static int s_sim_start(kvt_system_t *sys)
{
    kvt_sim_t *sim = sys->sim;
    if (kvt_trace_begin(sys) != 0)
        return -1;
    for (uint32_t i = 0; i < sys->nactors; i++) {
        kvt_actor_t *a = sys->actors[i];
        sim->current = a->aid;
        a->state = a->cls->init(&a->ctx, a->args);
        sim->current = KVT_AID_NONE;
        if (a->state) {
            a->run_state = KVT_ACTOR_UP;
            continue;
        }
        kvt_log(sys, a->name, 0, "init of %s failed; stopping the actors already started",
                a->cls->type ? a->cls->type : "actor");
        for (uint32_t j = i; j-- > 0;)
            s_actor_stop(sys, sys->actors[j], KVT_ACTOR_STOPPED);
        s_purge_all(sys, KVT_ST_DROPPED_AT_STOP);
        return -1;
    }
    return 0;
}

static void s_sim_stop(kvt_system_t *sys)
{
    for (uint32_t i = sys->nactors; i-- > 0;) {
        kvt_actor_t *a = sys->actors[i];
        if (a->run_state == KVT_ACTOR_UP)
            s_actor_stop(sys, a, KVT_ACTOR_STOPPED);
        else
            a->run_state = KVT_ACTOR_STOPPED;
    }
    s_purge_all(sys, KVT_ST_DROPPED_AT_STOP);
    kvt_trace_flush(sys);
}

static uint64_t s_sim_now(kvt_system_t *sys)
{
    return sys->sim ? sys->sim->now : 0;
}

static void s_sim_exit(kvt_system_t *sys, int code)
{
    if (sys->sim->exit_req)
        return; //  the first exit wins
    sys->sim->exit_req = true;
    sys->sim->exit_code = code;
}

// ----------------------------------------------------------------- send ---

static int s_sim_send(kvt_system_t *sys, kvt_aid_t from, kvt_aid_t to, int kind, uint8_t *buf,
                      size_t len)
{
    kvt_sim_t *sim = sys->sim;
    assert(to < sys->nactors);
    kvt_actor_t *dst = sys->actors[to];
    if (dst->run_state == KVT_ACTOR_CRASHED || dst->run_state == KVT_ACTOR_STOPPED) {
        kvt_count(&dst->stats, dst->run_state == KVT_ACTOR_CRASHED ? KVT_ST_DROPPED_DOWN
                                                                   : KVT_ST_DROPPED_AT_STOP);
        free(buf);
        return 0; //  sent; lost in the network like any message to a dead peer
    }
    uint64_t extra = 0;
    kvt_fault_type_t fault = kvt_faults_match(&sim->faults, from, to, kind, &extra);
    if (fault == KVT_FAULT_DROP) {
        kvt_count(&dst->stats, KVT_ST_DROPPED_FAULT);
        free(buf);
        return 0;
    }
    bool dup = fault == KVT_FAULT_DUPLICATE;
    uint64_t lat = sys->lat_min_ns;
    if (sys->lat_jitter_ns)
        lat += kvt_rng_next(&sim->rng) % (sys->lat_jitter_ns + 1);
    uint64_t at = sim->now + lat + extra;
    uint8_t *copy = NULL;
    s_chan_t *ch = s_chan_get(sim, from, to);
    if (!ch)
        goto fail;
    if (dup) {
        copy = malloc(len ? len : 1);
        if (!copy)
            goto fail;
        memcpy(copy, buf, len);
    }
    if (at < ch->tail_at)
        at = ch->tail_at;
    bool was_empty = ch->count == 0;
    if (s_chan_push(ch, at, buf, len) != 0)
        goto fail;
    sim->inflight++;
    buf = NULL;
    if (copy) {
        if (s_chan_push(ch, at, copy, len) != 0)
            free(copy);
        else
            sim->inflight++;
    }
    if (was_empty)
        s_schedule(sim, ch);
    return 0;
fail:
    free(buf);
    free(copy);
    return -1;
}

// ------------------------------------------------------------- timers -----

static uint64_t s_sim_timer(kvt_system_t *sys, kvt_actor_t *a, uint64_t after_ns, uint64_t tag)
{
    uint64_t deadline = sys->sim->now + after_ns;
    if (deadline < sys->sim->now)
        deadline = UINT64_MAX;
    return kvt_timers_arm(&sys->sim->timers, deadline, tag, a->aid);
}

static int s_sim_cancel(kvt_system_t *sys, kvt_actor_t *a, uint64_t id)
{
    return kvt_timers_cancel(&sys->sim->timers, id, a->aid);
}

// ----------------------------------------------------------------- run ----

static void s_deliver(kvt_system_t *sys, s_chan_t *ch)
{
    kvt_sim_t *sim = sys->sim;
    s_frame_t f = s_chan_pop(ch);
    sim->inflight--;
    //  Re-place the channel before the handler runs: it may send on it.
    s_unschedule(sim, ch);
    s_schedule(sim, ch);
    kvt_actor_t *a = sys->actors[ch->to];
    if (a->run_state != KVT_ACTOR_UP) {
        kvt_count(&a->stats, KVT_ST_DROPPED_DOWN);
        free(f.buf);
        return;
    }
    int kind;
    sim->current = a->aid;
    int flags = kvt_actor_dispatch(sys, a, ch->from, f.buf, f.len, &kind);
    sim->current = KVT_AID_NONE;
    kvt_trace_record(sys, KVT_TRACE_DELIVERY, flags, kind, ch->from, ch->to, f.len, sim->now,
                     XXH3_64bits(f.buf, f.len));
    free(f.buf);
}

static void s_fire(kvt_system_t *sys, const kvt_timer_t *tm)
{
    kvt_actor_t *a = sys->actors[tm->owner];
    if (a->run_state != KVT_ACTOR_UP)
        return; //  crash and stop remove an actor's timers; defensive
    sys->sim->current = a->aid;
    kvt_actor_fire(sys, a, tm->tag);
    sys->sim->current = KVT_AID_NONE;
    kvt_trace_record(sys, KVT_TRACE_TIMER, 0, 0, tm->owner, tm->owner, 0, sys->sim->now, tm->tag);
}

static int s_sim_run(kvt_system_t *sys, uint64_t until_ns, uint64_t max_events)
{
    kvt_sim_t *sim = sys->sim;
    uint64_t ran = 0;
    int rc;
    while (true) {
        if (sim->exit_req) {
            sim->exit_req = false;
            rc = sim->exit_code;
            break;
        }
        if (max_events && ran >= max_events) {
            rc = KVT_RUN_EVENT_LIMIT;
            break;
        }
        if (until_ns && sim->now > until_ns) {
            rc = KVT_RUN_TIME_LIMIT;
            break;
        }
        kvt_timer_t tm;
        if (kvt_timers_pop_due(&sim->timers, sim->now, &tm)) {
            s_fire(sys, &tm);
            ran++;
            sim->events++;
            continue;
        }
        while (sim->npending > 0 && s_head(sim->pending[0])->at <= sim->now) {
            s_chan_t *ch = sim->pending[0];
            s_unschedule(sim, ch);
            s_schedule(sim, ch);
        }
        if (sim->nready > 0) {
            uint32_t pick = sim->nready > 1 ? (uint32_t)(kvt_rng_next(&sim->rng) % sim->nready) : 0;
            s_deliver(sys, sim->ready[pick]);
            ran++;
            sim->events++;
            continue;
        }
        uint64_t next = UINT64_MAX;
        bool any = kvt_timers_peek(&sim->timers, &next);
        if (sim->npending > 0) {
            uint64_t at = s_head(sim->pending[0])->at;
            next = any && next < at ? next : at;
            any = true;
        }
        if (!any) {
            rc = KVT_RUN_QUIESCENT;
            break;
        }
        if (until_ns && next > until_ns) {
            sim->now = until_ns > sim->now ? until_ns : sim->now;
            rc = KVT_RUN_TIME_LIMIT;
            break;
        }
        assert(next >= sim->now);
        sim->now = next;
    }
    kvt_trace_flush(sys);
    return rc;
}

// ------------------------------------------------------------- public -----

kvt_faults_t *kvt_sim_faults(kvt_system_t *sys)
{
    return sys->sim ? &sys->sim->faults : NULL; //  only the SIM driver creates sim
}

static bool s_sim_running(kvt_system_t *self)
{
    return self && self->sim; //  only the SIM driver creates sim
}

int kvt_sim_crash(kvt_system_t *self, kvt_aid_t aid)
{
    if (!s_sim_running(self) || !self->started || self->stopped || aid >= self->nactors)
        return -1;
    kvt_sim_t *sim = self->sim;
    kvt_actor_t *a = self->actors[aid];
    if (a->run_state != KVT_ACTOR_UP || sim->current == aid)
        return -1; //  not running, or crashing itself from its own handler
    s_actor_stop(self, a, KVT_ACTOR_CRASHED);
    for (uint32_t row = 0; row <= KVT_MAX_ACTORS; row++)
        if (sim->rows[row] && sim->rows[row][aid])
            s_chan_purge(self, sim->rows[row][aid], KVT_ST_DROPPED_DOWN);
    kvt_count_add(&a->stats, KVT_ST_TIMERS_LOST, kvt_timers_remove_owner(&sim->timers, aid));
    kvt_log(self, a->name, 2, "crashed (SIM fault)");
    return 0;
}

int kvt_sim_restart(kvt_system_t *self, kvt_aid_t aid)
{
    if (!s_sim_running(self) || !self->started || self->stopped || aid >= self->nactors)
        return -1;
    kvt_actor_t *a = self->actors[aid];
    if (a->run_state != KVT_ACTOR_CRASHED)
        return -1;
    self->sim->current = aid;
    a->state = a->cls->init(&a->ctx, a->args);
    self->sim->current = KVT_AID_NONE;
    if (!a->state) {
        kvt_log(self, a->name, 0, "restart: init failed; the actor stays down");
        return -1;
    }
    a->run_state = KVT_ACTOR_UP;
    kvt_count(&a->stats, KVT_ST_RESTARTS);
    kvt_log(self, a->name, 2, "restarted");
    return 0;
}

int kvt_sim_trace_open(kvt_system_t *self, const char *path)
{
    if (!s_sim_running(self) || self->started || !path)
        return -1;
    return kvt_trace_open(self, path);
}

uint64_t kvt_sim_trace_hash(kvt_system_t *self)
{
    if (!s_sim_running(self))
        return 0;
    return kvt_trace_hash(self);
}

uint64_t kvt_sim_events(kvt_system_t *self)
{
    if (!s_sim_running(self))
        return 0;
    return self->sim->events;
}

// -------------------------------------------------------------- driver ----

static int s_sim_create(kvt_system_t *sys)
{
    return s_sim_new(sys) == 0 && kvt_trace_new(sys) == 0 ? 0 : -1;
}

static void s_sim_free(kvt_system_t *sys)
{
    s_sim_destroy(sys);
    kvt_trace_destroy(sys);
}

//  A post after the system stopped is refused: nothing would deliver it.
static int s_sim_post(kvt_system_t *sys, kvt_actor_t *a, kvt_aid_t to, int kind, uint8_t *buf,
                      size_t len)
{
    if (sys->stopped) {
        free(buf);
        return -1;
    }
    return s_sim_send(sys, a ? a->aid : KVT_AID_SYSTEM, to, kind, buf, len);
}

static void s_sim_exit_of(kvt_system_t *sys, kvt_actor_t *a, int code)
{
    (void)a;
    s_sim_exit(sys, code);
}

const kvt_driver_ops_t kvt_sim_driver = {
    .name = "sim",
    .remote_actors = false,
    .create = s_sim_create,
    .destroy = s_sim_free,
    .start = s_sim_start,
    .run = s_sim_run,
    .stop = s_sim_stop,
    .now = s_sim_now,
    .send = s_sim_post,
    .timer = s_sim_timer,
    .cancel = s_sim_cancel,
    .exit = s_sim_exit_of,
};
