/*  kvt_lane_runner — see kvt_lane_runner.h. */
#include "kvt_lane_runner.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct _kvt_lane_runner_t {
    pthread_mutex_t mu;    //  guards every core call and the fields below
    pthread_cond_t cv;     //  wakes the submitter: a job was queued, or stop
    kvt_lane_core_t *core; //  the lane
    bool threaded;         //  submits run on `thread` (else inline)
    pthread_t thread;      //  the submitter (threaded)
    bool stop;             //  the submitter should exit
    bool in_submit;        //  the submitter is inside a submit op
    uint64_t last_now;     //  the latest time a caller passed (the submitter has no clock)
    uint64_t poll_ns;      //  threaded: how often the caller looks for a returned submit
};

static void *s_submitter(void *arg)
{
    kvt_lane_runner_t *self = arg;
    pthread_mutex_lock(&self->mu);
    while (!self->stop) {
        kvt_lane_submit_t sub;
        if (!kvt_lane_core_submit_begin(self->core, self->last_now, &sub)) {
            pthread_cond_wait(&self->cv, &self->mu);
            continue;
        }
        self->in_submit = true;
        pthread_mutex_unlock(&self->mu);
        int rc = kvt_lane_submit_run(&sub); //  without the mutex: it may block
        pthread_mutex_lock(&self->mu);
        self->in_submit = false;
        kvt_lane_core_submit_end(self->core, sub.token, rc, self->last_now);
    }
    pthread_mutex_unlock(&self->mu);
    return NULL;
}

kvt_lane_runner_t *kvt_lane_runner_new(const kvt_lane_cfg_t *cfg, bool threaded, char *err,
                                       size_t errlen)
{
    kvt_lane_runner_t *self = calloc(1, sizeof *self);
    if (!self) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    self->core = kvt_lane_core_new(cfg, err, errlen);
    if (!self->core) {
        free(self);
        return NULL;
    }
    pthread_mutex_init(&self->mu, NULL);
    pthread_cond_init(&self->cv, NULL);
    self->threaded = threaded;
    self->poll_ns = cfg->poll_ns ? cfg->poll_ns : KVT_LANE_POLL_NS;
    if (threaded && pthread_create(&self->thread, NULL, s_submitter, self) != 0) {
        snprintf(err, errlen, "cannot start the submitter thread");
        self->threaded = false;
        kvt_lane_runner_destroy(&self);
        return NULL;
    }
    return self;
}

void kvt_lane_runner_destroy(kvt_lane_runner_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kvt_lane_runner_t *self = *self_p;
    if (self->threaded) {
        pthread_mutex_lock(&self->mu);
        self->stop = true;
        pthread_cond_broadcast(&self->cv);
        pthread_mutex_unlock(&self->mu);
        pthread_join(self->thread, NULL);
    }
    kvt_lane_core_destroy(&self->core);
    pthread_cond_destroy(&self->cv);
    pthread_mutex_destroy(&self->mu);
    free(self);
    *self_p = NULL;
}

//  Takes the mutex and notes the caller's time.
static void s_enter(kvt_lane_runner_t *self, uint64_t now)
{
    pthread_mutex_lock(&self->mu);
    if (now > self->last_now)
        self->last_now = now;
}

//  Hands queued jobs to the submitter, or (inline) submits them here.
static void s_leave(kvt_lane_runner_t *self, uint64_t now)
{
    if (self->threaded)
        pthread_cond_signal(&self->cv);
    else
        kvt_lane_core_pump(self->core, now);
    pthread_mutex_unlock(&self->mu);
}

void kvt_lane_runner_enqueue(kvt_lane_runner_t *self, const kvt_lane_job_t *job, uint64_t now)
{
    s_enter(self, now);
    kvt_lane_core_enqueue(self->core, job, now);
    s_leave(self, now);
}

void kvt_lane_runner_fence(kvt_lane_runner_t *self, uint64_t id, uint64_t now)
{
    s_enter(self, now);
    kvt_lane_core_fence(self->core, id, now);
    pthread_mutex_unlock(&self->mu);
}

void kvt_lane_runner_tick(kvt_lane_runner_t *self, uint64_t now)
{
    s_enter(self, now);
    kvt_lane_core_tick(self->core, now);
    s_leave(self, now);
}

uint64_t kvt_lane_runner_next_wake(kvt_lane_runner_t *self, uint64_t now)
{
    s_enter(self, now);
    uint32_t n;
    kvt_lane_core_outbox(self->core, &n);
    uint64_t at = n ? now : kvt_lane_core_next_wake(self->core, now);
    //  A submit returning on the submitter thread makes its job pending;
    //  only the caller's next look learns when its copies land.
    if (self->threaded && kvt_lane_core_unsubmitted(self->core) && now + self->poll_ns < at)
        at = now + self->poll_ns;
    pthread_mutex_unlock(&self->mu);
    return at;
}

uint32_t kvt_lane_runner_shutdown(kvt_lane_runner_t *self, uint64_t now)
{
    s_enter(self, now);
    uint32_t n = kvt_lane_core_shutdown(self->core, now);
    pthread_mutex_unlock(&self->mu);
    return n;
}

void kvt_lane_runner_reset(kvt_lane_runner_t *self, kvt_gpu_stream_t *stream, uint64_t now)
{
    s_enter(self, now);
    kvt_lane_core_reset(self->core, stream, now);
    s_leave(self, now);
}

uint32_t kvt_lane_runner_take(kvt_lane_runner_t *self, kvt_lane_report_t *out, uint32_t cap)
{
    pthread_mutex_lock(&self->mu);
    uint32_t n;
    const kvt_lane_report_t *box = kvt_lane_core_outbox(self->core, &n);
    uint32_t k = n < cap ? n : cap;
    if (k)
        memcpy(out, box, (size_t)k * sizeof *out);
    kvt_lane_core_outbox_consume(self->core, k);
    pthread_mutex_unlock(&self->mu);
    return k;
}

void kvt_lane_runner_stats(kvt_lane_runner_t *self, kvt_lane_stats_t *out)
{
    pthread_mutex_lock(&self->mu);
    kvt_lane_core_stats(self->core, out);
    pthread_mutex_unlock(&self->mu);
}

bool kvt_lane_runner_reset_if_drained(kvt_lane_runner_t *self, uint64_t now)
{
    pthread_mutex_lock(&self->mu);
    kvt_lane_stats_t st;
    kvt_lane_core_stats(self->core, &st);
    bool drained = kvt_lane_core_failed(self->core) && st.held == 0 && !self->in_submit;
    if (drained)
        kvt_lane_core_reset(self->core, NULL, now);
    pthread_mutex_unlock(&self->mu);
    return drained;
}

bool kvt_lane_runner_submitting(kvt_lane_runner_t *self)
{
    pthread_mutex_lock(&self->mu);
    bool in = self->in_submit;
    pthread_mutex_unlock(&self->mu);
    return in;
}
