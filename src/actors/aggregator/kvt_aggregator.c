/*  kvt_aggregator — see kvt_aggregator.h. */
#include "kvt_aggregator.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/common/kvt_counters.h"
#include "kvt_agg.h"

#define S_TIMER_EXPIRE 1 //  timer tag: settle open keys past the bound

typedef struct {
    kvt_aggregator_args_t a; //  configuration
    kvt_agg_t *core;         //  quorum state
    kvt_aid_t scheduler;     //  where verdicts go
    uint64_t timer;          //  armed expiry timer (0 = none)
    uint64_t send_errors;    //  verdicts that could not be sent
} s_aggregator_t;

static void s_arm(kvt_ctx_t *ctx, s_aggregator_t *self)
{
    //  Armed for the moment the oldest open key times out, and only while
    //  there is one, so an idle system stays quiescent.
    uint64_t at = kvt_agg_next_expiry(self->core);
    if (self->timer != 0 || at == UINT64_MAX)
        return;
    uint64_t now = kvt_ctx_now(ctx);
    self->timer = kvt_ctx_timer(ctx, at > now ? at - now : 0, S_TIMER_EXPIRE);
}

static int s_on_completion(kvt_ctx_t *ctx, void *selfp, kvt_aid_t from, kvt_msg_t *msg)
{
    s_aggregator_t *self = selfp;
    kvt_msg_t v;
    memset(&v, 0, sizeof v);
    int rc = kvt_agg_report(self->core, &msg->u.completion, kvt_ctx_now(ctx), &v.u.verdict);
    if (rc == 1) {
        v.kind = KVT_MSG_VERDICT;
        if (kvt_ctx_send(ctx, self->scheduler, &v) != 0)
            self->send_errors++;
    }
    s_arm(ctx, self);
    return 0;
}

static void s_on_timer(kvt_ctx_t *ctx, void *selfp, uint64_t tag)
{
    s_aggregator_t *self = selfp;
    self->timer = 0;
    kvt_verdict_t out[16];
    bool warn[16];
    uint32_t n;
    do {
        n = kvt_agg_expire(self->core, kvt_ctx_now(ctx), out, warn, 16);
        for (uint32_t i = 0; i < n; i++) {
            //  The core flags the first timeout of each channel; later ones
            //  are only counted (agg.timeouts).
            if (warn[i])
                kvt_ctx_log(ctx, 1,
                            "channel %u: key op=%llu/%u settled failed (timeout): %u of %u "
                            "ranks did not report within %.1f s; later timeouts on this "
                            "channel are counted in agg.timeouts",
                            out[i].chan, (unsigned long long)out[i].op.req, out[i].op.gen,
                            out[i].nfailed, self->a.nranks, (double)self->a.timeout_ns / 1e9);
            kvt_msg_t v;
            memset(&v, 0, sizeof v);
            v.kind = KVT_MSG_VERDICT;
            v.u.verdict = out[i];
            if (kvt_ctx_send(ctx, self->scheduler, &v) != 0)
                self->send_errors++;
        }
    } while (n == 16);
    s_arm(ctx, self);
}

static int s_on_stats(kvt_ctx_t *ctx, void *selfp, kvt_aid_t from, kvt_msg_t *msg)
{
    s_aggregator_t *self = selfp;
    if (!msg->u.stats.request)
        return 0;
    kvt_agg_stats_t st;
    kvt_agg_stats(self->core, &st);
    enum { S_CAP = 32 }; //  12 counters today, room for more
    kvt_counter_t c[S_CAP];
    uint32_t n = 0;
    kvt_counter_add(c, &n, S_CAP, "agg.reports", st.reports);
    kvt_counter_add(c, &n, S_CAP, "agg.settled", st.settled);
    kvt_counter_add(c, &n, S_CAP, "agg.settled_failed", st.settled_failed);
    kvt_counter_add(c, &n, S_CAP, "agg.late_dropped", st.late_dropped);
    kvt_counter_add(c, &n, S_CAP, "agg.dup_dropped", st.dup_dropped);
    kvt_counter_add(c, &n, S_CAP, "agg.bad_rank", st.bad_rank);
    kvt_counter_add(c, &n, S_CAP, "agg.epoch_dropped", st.epoch_dropped);
    kvt_counter_add(c, &n, S_CAP, "agg.timeouts", st.timeouts);
    kvt_counter_add(c, &n, S_CAP, "agg.oom_dropped", st.oom_dropped);
    kvt_counter_add(c, &n, S_CAP, "agg.not_asked", st.not_asked);
    kvt_counter_add(c, &n, S_CAP, "agg.open", st.open);
    kvt_counter_add(c, &n, S_CAP, "agg.send_errors", self->send_errors);
    return kvt_counters_reply(ctx, from, c, n);
}

static void *s_init(kvt_ctx_t *ctx, void *args)
{
    s_aggregator_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->a = *(const kvt_aggregator_args_t *)args;
    if (self->a.tombstones == 0)
        self->a.tombstones = 65536;
    if (self->a.timeout_ns == 0)
        self->a.timeout_ns = 30ull * 1000000000ull;
    self->scheduler = kvt_ctx_lookup(ctx, self->a.scheduler);
    if (self->scheduler == KVT_AID_NONE || self->a.nranks == 0 ||
        self->a.nranks > KVT_MSG_MAX_RANKS) {
        kvt_ctx_log(ctx, 0, "aggregator: bad configuration (scheduler '%s', %u ranks)",
                    self->a.scheduler, self->a.nranks);
        free(self);
        return NULL;
    }
    self->core = kvt_agg_new(self->a.nranks, self->a.tombstones, self->a.timeout_ns);
    if (!self->core) {
        free(self);
        return NULL;
    }
    return self;
}

static void s_stop(kvt_ctx_t *ctx, void *selfp)
{
    s_aggregator_t *self = selfp;
    kvt_agg_destroy(&self->core);
    free(self);
}

const kvt_actor_class_t kvt_aggregator_class = {
    .type = "aggregator",
    .init = s_init,
    .stop = s_stop,
    .on =
        {
            [KVT_MSG_COMPLETION] = s_on_completion,
            [KVT_MSG_STATS] = s_on_stats,
        },
    .on_timer = s_on_timer,
};
