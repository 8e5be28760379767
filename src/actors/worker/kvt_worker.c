/*  kvt_worker — see kvt_worker.h. The shell: decodes nothing itself (the
    runtime did), hands each spec to the core with the context's time, sends
    what the core decided, and keeps one poll timer armed for the core's
    next wake. */
#include "kvt_worker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/common/kvt_counters.h"
#include "kvt_wcore.h"

#define S_TIMER_POLL 1 //  timer tag: poll pending jobs

typedef struct {
    kvt_worker_args_t a;                        //  configuration (borrowed pointers)
    kvt_ctx_t *ctx;                             //  this actor's context (the core's log sink)
    kvt_aid_t agg;                              //  aggregator id
    kvt_holder_t holder;                        //  pool holder of this worker's pinned lookups
    kvt_holder_t lholder[KVT_WCORE_LANES];      //  each lane's pool holder
    kvt_gpu_stream_t *stream[KVT_WCORE_LANES];  //  each lane's stream
    kvt_gpu_event_pool_t *evp[KVT_WCORE_LANES]; //  each lane's events
    kvt_lane_runner_t *lane[KVT_WCORE_LANES];   //  load, state, save lanes
    kvt_wcore_t *core;                          //  records, seen ids, reports
    uint64_t poll_timer;                        //  armed poll timer id (0 = none)
    uint64_t poll_at;                           //  context time the armed timer fires
    uint64_t send_errors;                       //  Completions that could not be sent
    uint64_t epoch;                             //  incarnation stamped on every report
} s_worker_t;

static void s_log(void *arg, int level, const char *line)
{
    kvt_ctx_log((kvt_ctx_t *)arg, level, "%s", line);
}

//  Sends every Completion the core decided, in order.
static void s_flush_outbox(kvt_ctx_t *ctx, s_worker_t *self)
{
    uint32_t n;
    const kvt_completion_t *out = kvt_wcore_outbox(self->core, &n);
    for (uint32_t i = 0; i < n; i++) {
        kvt_msg_t m;
        memset(&m, 0, sizeof m);
        m.kind = KVT_MSG_COMPLETION;
        m.u.completion = out[i];
        if (kvt_ctx_send(ctx, self->agg, &m) != 0) {
            self->send_errors++;
            kvt_ctx_log(ctx, 0, "cannot send Completion for %llu/%u",
                        (unsigned long long)out[i].op.req, out[i].op.gen);
        }
    }
    kvt_wcore_outbox_clear(self->core);
}

//  Keeps the poll timer armed for the core's next wake (the device's
//  landing time when it knows it, else the poll interval; never later than
//  a pending job's renewal), re-arming earlier when a new job lands first.
static void s_arm(kvt_ctx_t *ctx, s_worker_t *self)
{
    uint64_t now = kvt_ctx_now(ctx);
    uint64_t at = kvt_wcore_next_wake(self->core, now);
    if (at == UINT64_MAX)
        return;
    if (self->poll_timer) {
        if (self->poll_at <= at)
            return;
        kvt_ctx_cancel(ctx, self->poll_timer);
    }
    self->poll_at = at;
    self->poll_timer = kvt_ctx_timer(ctx, at - now, S_TIMER_POLL);
}

static int s_on_load(kvt_ctx_t *ctx, void *selfp, kvt_aid_t from, kvt_msg_t *msg)
{
    s_worker_t *self = selfp;
    kvt_wcore_load(self->core, &msg->u.load_spec, kvt_ctx_now(ctx));
    s_flush_outbox(ctx, self);
    s_arm(ctx, self);
    return 0;
}

static int s_on_save(kvt_ctx_t *ctx, void *selfp, kvt_aid_t from, kvt_msg_t *msg)
{
    s_worker_t *self = selfp;
    kvt_wcore_save(self->core, &msg->u.save_spec, kvt_ctx_now(ctx));
    s_flush_outbox(ctx, self);
    s_arm(ctx, self);
    return 0;
}

static int s_on_touch(kvt_ctx_t *ctx, void *selfp, kvt_aid_t from, kvt_msg_t *msg)
{
    s_worker_t *self = selfp;
    kvt_wcore_touch(self->core, &msg->u.touch, kvt_ctx_now(ctx));
    s_flush_outbox(ctx, self);
    return 0;
}

static int s_on_lookup(kvt_ctx_t *ctx, void *selfp, kvt_aid_t from, kvt_msg_t *msg)
{
    s_worker_t *self = selfp;
    kvt_wcore_lookup(self->core, &msg->u.lookup, kvt_ctx_now(ctx));
    s_flush_outbox(ctx, self);
    s_arm(ctx, self); //  a pinned lease's TTL needs the timer
    return 0;
}

static int s_on_fence(kvt_ctx_t *ctx, void *selfp, kvt_aid_t from, kvt_msg_t *msg)
{
    s_worker_t *self = selfp;
    kvt_wcore_fence(self->core, &msg->u.fence, kvt_ctx_now(ctx));
    s_flush_outbox(ctx, self);
    s_arm(ctx, self);
    return 0;
}

static int s_on_lookup_release(kvt_ctx_t *ctx, void *selfp, kvt_aid_t from, kvt_msg_t *msg)
{
    s_worker_t *self = selfp;
    kvt_wcore_lookup_release(self->core, msg->u.lookup_release.op);
    return 0;
}

static void s_on_timer(kvt_ctx_t *ctx, void *selfp, uint64_t tag)
{
    s_worker_t *self = selfp;
    if (tag != S_TIMER_POLL)
        return;
    self->poll_timer = 0;
    kvt_wcore_poll(self->core, kvt_ctx_now(ctx));
    s_flush_outbox(ctx, self);
    s_arm(ctx, self);
}

//  A transfer histogram as cumulative counters: NAME.le_<bound> for each
//  bound, NAME.le_inf, NAME.sum and NAME.count (docs/metrics.md §Prometheus).
static void s_hist(kvt_counter_t *c, uint32_t *n, uint32_t cap, const char *name,
                   const kvt_wcore_hist_t *h, bool bytes)
{
    uint32_t nb;
    const uint64_t *b = kvt_wcore_hist_bounds(bytes, &nb);
    uint64_t cum = 0;
    char key[KVT_COUNTER_NAME_MAX + 1];
    for (uint32_t i = 0; i <= nb; i++) {
        cum += h->n[i];
        if (i < nb)
            snprintf(key, sizeof key, "%s.le_%llu", name, (unsigned long long)b[i]);
        else
            snprintf(key, sizeof key, "%s.le_inf", name);
        kvt_counter_add(c, n, cap, key, cum);
    }
    snprintf(key, sizeof key, "%s.sum", name);
    kvt_counter_add(c, n, cap, key, h->sum);
    snprintf(key, sizeof key, "%s.count", name);
    kvt_counter_add(c, n, cap, key, h->count);
}

static int s_on_stats(kvt_ctx_t *ctx, void *selfp, kvt_aid_t from, kvt_msg_t *msg)
{
    s_worker_t *self = selfp;
    if (!msg->u.stats.request)
        return 0;
    kvt_wcore_stats_t s;
    kvt_wcore_stats(self->core, &s);
    kvt_counter_t c[KVT_MSG_MAX_STATS];
    uint32_t n = 0, cap = KVT_MSG_MAX_STATS;
    kvt_counter_add(c, &n, cap, "worker.loads_ok", s.loads_ok);
    kvt_counter_add(c, &n, cap, "worker.loads_failed", s.loads_failed);
    kvt_counter_add(c, &n, cap, "worker.loads_refused", s.loads_refused);
    kvt_counter_add(c, &n, cap, "worker.load_chunks", s.load_chunks);
    kvt_counter_add(c, &n, cap, "worker.load_chunks_disk", s.load_chunks_disk);
    kvt_counter_add(c, &n, cap, "worker.saves_ok", s.saves_ok);
    kvt_counter_add(c, &n, cap, "worker.saves_present", s.saves_present);
    kvt_counter_add(c, &n, cap, "worker.saves_failed", s.saves_failed);
    kvt_counter_add(c, &n, cap, "worker.saves_refused", s.saves_refused);
    kvt_counter_add(c, &n, cap, "worker.copy_errors", s.copy_errors);
    kvt_counter_add(c, &n, cap, "worker.pending", s.pending);
    kvt_counter_add(c, &n, cap, "worker.drained_at_stop", s.drained_at_stop);
    kvt_counter_add(c, &n, cap, "worker.duplicates", s.duplicates);
    kvt_counter_add(c, &n, cap, "worker.quarantined", s.quarantined);
    kvt_counter_add(c, &n, cap, "worker.unreported", s.unreported);
    kvt_counter_add(c, &n, cap, "worker.touches", s.touches);
    kvt_counter_add(c, &n, cap, "worker.touches_refreshed", s.touches_refreshed);
    kvt_counter_add(c, &n, cap, "worker.touches_present", s.touches_present);
    kvt_counter_add(c, &n, cap, "worker.touches_gone", s.touches_gone);
    kvt_counter_add(c, &n, cap, "worker.lookups", s.lookups);
    kvt_counter_add(c, &n, cap, "worker.lookups_failed", s.lookups_failed);
    kvt_counter_add(c, &n, cap, "worker.lookups_not_asked", s.lookups_not_asked);
    kvt_counter_add(c, &n, cap, "worker.lookup_pins", s.lookup_pins);
    kvt_counter_add(c, &n, cap, "worker.lookup_rel_load", s.lookup_rel_load);
    kvt_counter_add(c, &n, cap, "worker.lookup_rel_msg", s.lookup_rel_msg);
    kvt_counter_add(c, &n, cap, "worker.lookup_rel_ttl", s.lookup_rel_ttl);
    kvt_counter_add(c, &n, cap, "worker.lookup_rel_stop", s.lookup_rel_stop);
    kvt_counter_add(c, &n, cap, "worker.lookup_rel_none", s.lookup_rel_none);
    kvt_counter_add(c, &n, cap, "worker.lookup_rel_stale", s.lookup_rel_stale);
    kvt_counter_add(c, &n, cap, "worker.lookup_leases", s.lookup_leases);
    kvt_counter_add(c, &n, cap, "worker.states_ok", s.states_ok);
    kvt_counter_add(c, &n, cap, "worker.states_failed", s.states_failed);
    kvt_counter_add(c, &n, cap, "worker.states_neutral", s.states_neutral);
    kvt_counter_add(c, &n, cap, "worker.images_saved", s.images_saved);
    kvt_counter_add(c, &n, cap, "worker.source_safe", s.source_safe);
    kvt_counter_add(c, &n, cap, "worker.source_unsafe", s.source_unsafe);
    kvt_counter_add(c, &n, cap, "worker.producer_refused", s.producer_refused);
    kvt_counter_add(c, &n, cap, "worker.fenced_saves", s.fenced_saves);
    kvt_counter_add(c, &n, cap, "worker.compute_misses", s.compute_misses);
    kvt_counter_add(c, &n, cap, "worker.lane_timeouts", s.lane_timeouts);
    kvt_counter_add(c, &n, cap, "worker.fences_ok", s.fences_ok);
    kvt_counter_add(c, &n, cap, "worker.fences_failed", s.fences_failed);
    kvt_counter_add(c, &n, cap, "worker.lane_resets", s.lane_resets);
    kvt_counter_add(c, &n, cap, "worker.faults_injected", s.faults_injected);
    kvt_counter_add(c, &n, cap, "worker.epoch", self->epoch);
    kvt_counter_add(c, &n, cap, "worker.send_errors", self->send_errors);
    s_hist(c, &n, cap, "worker.transfer_us.load", &s.load_us, false);
    s_hist(c, &n, cap, "worker.transfer_us.save", &s.save_us, false);
    s_hist(c, &n, cap, "worker.transfer_bytes.load", &s.load_bytes, true);
    s_hist(c, &n, cap, "worker.transfer_bytes.save", &s.save_bytes, true);
    if (self->a.storage) {
        size_t total = kvt_storage_counters(self->a.storage, c + n, cap - n);
        n += total < cap - n ? (uint32_t)total : cap - n;
    }
    return kvt_counters_reply(ctx, from, c, n);
}

// ---------------------------------------------------------- lifecycle ----

//  Frees in the order rule X4 asks: the core (its records settled), the
//  lanes (a quarantined job's memory stays with its holder), then events
//  and streams, then the holders.
static void s_free(s_worker_t *self)
{
    kvt_wcore_destroy(&self->core);
    for (int l = 0; l < KVT_WCORE_LANES; l++)
        kvt_lane_runner_destroy(&self->lane[l]);
    for (int l = 0; l < KVT_WCORE_LANES; l++) {
        if (self->a.lane_streams)
            self->a.lane_streams[l] = NULL;
        kvt_gpu_event_pool_destroy(&self->evp[l]);
        kvt_gpu_stream_destroy(&self->stream[l]);
    }
    kvt_pool_t *pool = self->a.storage ? kvt_storage_pool(self->a.storage) : NULL;
    for (int l = 0; l < KVT_WCORE_LANES; l++)
        if (self->lholder[l])
            kvt_pool_holder_remove(pool, self->lholder[l]);
    if (self->holder)
        kvt_pool_holder_remove(pool, self->holder);
    free(self);
}

static const char *const s_lane_names[KVT_WCORE_LANES] = {"load", "state", "save"};

//  One lane: its holder, stream, events and runner.
static int s_lane_up(kvt_ctx_t *ctx, s_worker_t *self, int l)
{
    char name[64];
    snprintf(name, sizeof name, "worker.%u.%s", self->a.rank, s_lane_names[l]);
    if (self->a.storage &&
        kvt_pool_holder_add(kvt_storage_pool(self->a.storage), name, &self->lholder[l]) != 0) {
        kvt_ctx_log(ctx, 0, "cannot register the pool holder of lane %s", s_lane_names[l]);
        return -1;
    }
    snprintf(name, sizeof name, "%s.%u", s_lane_names[l], self->a.rank);
    self->stream[l] = kvt_gpu_stream_new(self->a.gpu, name);
    if (self->a.lane_streams)
        self->a.lane_streams[l] = self->stream[l];
    self->evp[l] = kvt_gpu_event_pool_new(self->a.gpu);
    if (!self->stream[l] || !self->evp[l]) {
        kvt_ctx_log(ctx, 0, "cannot create the %s lane's stream: %s", s_lane_names[l],
                    kvt_gpu_last_error());
        return -1;
    }
    kvt_lane_cfg_t lc = {.name = name,
                         .stream = self->stream[l],
                         .evp = self->evp[l],
                         .pool = self->a.storage ? kvt_storage_pool(self->a.storage) : NULL,
                         .holder = self->lholder[l],
                         .ops = &kvt_wcore_lane_ops,
                         .deadline_ns = self->a.lane_deadline_ns,
                         .fence_timeout_ns = self->a.fence_timeout_ns,
                         .poll_ns = self->a.poll_ns,
                         .log = s_log,
                         .log_arg = ctx};
    char err[128];
    self->lane[l] = kvt_lane_runner_new(&lc, self->a.lanes_threaded, err, sizeof err);
    if (!self->lane[l]) {
        kvt_ctx_log(ctx, 0, "lane %s: %s", s_lane_names[l], err);
        return -1;
    }
    return 0;
}

static void *s_init(kvt_ctx_t *ctx, void *args)
{
    s_worker_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->a = *(const kvt_worker_args_t *)args;
    self->ctx = ctx;
    if (self->a.epoch >= (1ull << 24)) {
        kvt_ctx_log(ctx, 0, "epoch: %llu out of range 0..16777215",
                    (unsigned long long)self->a.epoch);
        goto fail;
    }
    self->agg = kvt_ctx_lookup(ctx, self->a.aggregator);
    if (self->agg == KVT_AID_NONE) {
        kvt_ctx_log(ctx, 0, "no aggregator actor named '%s'", self->a.aggregator);
        goto fail;
    }
    char name[64];
    snprintf(name, sizeof name, "worker.%u", self->a.rank);
    if (self->a.storage &&
        kvt_pool_holder_add(kvt_storage_pool(self->a.storage), name, &self->holder) != 0) {
        kvt_ctx_log(ctx, 0, "cannot register a pool holder");
        goto fail;
    }
    for (int l = 0; l < KVT_WCORE_LANES; l++)
        if (s_lane_up(ctx, self, l) != 0)
            goto fail;
    //  A restarted actor runs init again with the same args. What this actor
    //  slot has handled so far (messages and timers, kept across a crash)
    //  orders the incarnations: one that reported anything handled
    //  something, so the next one's epoch is larger. The base (high bits)
    //  orders processes: a rank process started again passes a larger one.
    kvt_actor_stats_t as;
    uint64_t handled = 0;
    if (kvt_system_actor_stats(kvt_ctx_system(ctx), kvt_ctx_self(ctx), &as) == 0)
        handled = as.delivered + as.timers_fired;
    if (handled >= KVT_WORKER_EPOCH_SPAN - 1)
        handled = KVT_WORKER_EPOCH_SPAN - 2;
    self->epoch = (self->a.epoch ? self->a.epoch : 1) * KVT_WORKER_EPOCH_SPAN + handled + 1;
    kvt_wcore_cfg_t cc = {.rank = self->a.rank,
                          .epoch = self->epoch,
                          .lookup_ttl_ns = self->a.lookup_ttl_ns,
                          .gpu = self->a.gpu,
                          .board = self->a.board,
                          .source_safe = !self->a.no_source_safe,
                          .miss_state = self->a.fault_miss_state,
                          .storage = self->a.storage,
                          .holder = self->holder,
                          .ns = self->a.ns,
                          .block_size = self->a.block_size,
                          .chunk_size = self->a.chunk_size,
                          .renew_ns = self->a.renew_ns,
                          .log = s_log,
                          .log_arg = ctx};
    for (int l = 0; l < KVT_WCORE_LANES; l++)
        cc.lanes[l] = (kvt_wcore_lane_t){.runner = self->lane[l], .holder = self->lholder[l]};
    char err[128];
    self->core = kvt_wcore_new(&cc, err, sizeof err);
    if (!self->core) {
        kvt_ctx_log(ctx, 0, "bad configuration: %s", err);
        goto fail;
    }
    return self;
fail:
    s_free(self);
    return NULL;
}

//  True when a synchronize left nothing running (done, landed at once by a
//  forced synchronize, or failed); false when copies are stuck behind a
//  stall.
static bool s_drained(int st)
{
    return st == KVT_GPU_OK || st == KVT_GPU_FORCED || st == KVT_GPU_EFAULT;
}

static void s_stop(kvt_ctx_t *ctx, void *selfp)
{
    s_worker_t *self = selfp;
    //  Drain before freeing events or buffers (rule X4): the lanes shut
    //  down first, so each pending item reports once (failed SHUTDOWN unless
    //  its copies already ended), then the worker waits for every lane's
    //  stream (the only place it waits) and polls once, so memory whose
    //  copies ended goes back. A stream that cannot drain (stalled) keeps
    //  its jobs' memory with the lane's holder: the copies may still touch
    //  it (counted in quarantined, logged).
    uint64_t now = kvt_ctx_now(ctx);
    uint64_t drained = kvt_wcore_shutdown(self->core, now);
    for (int l = 0; l < KVT_WCORE_LANES; l++)
        if (!s_drained(kvt_gpu_stream_synchronize(self->stream[l])))
            kvt_ctx_log(ctx, 1, "the %s lane's stream did not drain: its jobs' memory is kept",
                        s_lane_names[l]);
    kvt_wcore_poll(self->core, now);
    s_flush_outbox(ctx, self);
    //  Disk writes this worker's commits queued (write-through, write-back)
    //  hold pool leases until their file is written: wait for them, so the
    //  tier is settled once the worker stopped.
    if (self->a.storage)
        kvt_storage_flush(self->a.storage);
    kvt_wcore_stats_t s;
    kvt_wcore_stats(self->core, &s);
    if (s.quarantined)
        kvt_ctx_log(ctx, 0, "%llu leases / reservations kept: their copies never finished",
                    (unsigned long long)s.quarantined);
    if (drained)
        kvt_ctx_log(ctx, 1, "reported %llu pending items failed at shutdown",
                    (unsigned long long)drained);
    s_free(self);
}

const kvt_actor_class_t kvt_worker_class = {
    .type = "worker",
    .init = s_init,
    .stop = s_stop,
    .on =
        {
            [KVT_MSG_LOAD_SPEC] = s_on_load,
            [KVT_MSG_SAVE_SPEC] = s_on_save,
            [KVT_MSG_TOUCH] = s_on_touch,
            [KVT_MSG_LOOKUP] = s_on_lookup,
            [KVT_MSG_LOOKUP_RELEASE] = s_on_lookup_release,
            [KVT_MSG_FENCE] = s_on_fence,
            [KVT_MSG_STATS] = s_on_stats,
        },
    .on_timer = s_on_timer,
};
