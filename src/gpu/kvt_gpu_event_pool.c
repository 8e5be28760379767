/*  kvt_gpu_event_pool.c — reusable events with a bounded number of
    re-records.

    Ownership, one rule: the thread that creates a pool owns the pool and
    every event in it (whichever thread's get created the backend event).
    Events are destroyed only on the owner thread:
    * an event out of records is retired when it is put back: destroyed at
      once on the owner thread, else parked on the deferred stack;
    * the owner's next pool call (get, put, collect, destroy) destroys the
      deferred events;
    * kvt_gpu_event_pool_destroy off the owner thread is refused, and so is
      kvt_gpu_event_destroy of a pool event (kvt_gpu_stream.c).
    Threads are told apart by kvt_gpu_thread_token, which is never reused
    (a pthread_t of an exited thread can be).

    A put of an event this pool has not handed out (put twice, another
    pool's or device's, a plain event) is refused and counted at run time,
    in every build: pushing an event on the free stack twice would hand it
    to two jobs.

    Every state change happens under gpu->mu; backend destroys and log
    lines happen outside it.
*/
#include <assert.h>
#include <stdlib.h>

#include "base/kvt_vec.h"
#include "kvt_gpu_int.h"

kvt_gpu_event_pool_t *kvt_gpu_event_pool_new(kvt_gpu_t *gpu)
{
    assert(gpu);
    kvt_gpu_event_pool_t *self = calloc(1, sizeof *self);
    if (!self) {
        kvt_gpu_fail(KVT_GPU_ENOMEM, "event_pool_new: out of memory");
        return NULL;
    }
    self->gpu = gpu;
    self->owner = kvt_gpu_thread_token();
    pthread_mutex_lock(&gpu->mu);
    self->next = gpu->pools;
    if (gpu->pools)
        gpu->pools->prev = self;
    gpu->pools = self;
    pthread_mutex_unlock(&gpu->mu);
    return self;
}

//  Takes `ev` out of the pool's events table (under gpu->mu; the last
//  entry moves into its place); the caller destroys it.
static void s_unlink(kvt_gpu_event_pool_t *self, kvt_gpu_event_t *ev)
{
    assert(ev->pool_at < self->nevents && self->events[ev->pool_at] == ev);
    kvt_gpu_event_t *last = self->events[--self->nevents];
    self->events[ev->pool_at] = last;
    last->pool_at = ev->pool_at;
    ev->link = NULL;
    ev->pool = NULL;
    ev->state = KVT_GPU_EV_PLAIN;
    self->stats.destroyed++;
}

//  On the owner thread: destroys the deferred events. Returns how many.
static int s_collect(kvt_gpu_event_pool_t *self)
{
    if (self->owner != kvt_gpu_thread_token())
        return 0;
    kvt_gpu_t *gpu = self->gpu;
    pthread_mutex_lock(&gpu->mu);
    kvt_gpu_event_t *list = self->deferred;
    self->deferred = NULL;
    kvt_gpu_event_t *done = NULL;
    while (list) {
        kvt_gpu_event_t *ev = list;
        list = ev->link;
        s_unlink(self, ev);
        ev->link = done;
        done = ev;
    }
    pthread_mutex_unlock(&gpu->mu);
    int count = 0;
    while (done) {
        kvt_gpu_event_t *ev = done;
        done = ev->link;
        kvt_gpu_event_free(ev);
        count++;
    }
    return count;
}

int kvt_gpu_event_pool_collect(kvt_gpu_event_pool_t *self)
{
    assert(self);
    return s_collect(self);
}

kvt_gpu_event_t *kvt_gpu_event_pool_get(kvt_gpu_event_pool_t *self)
{
    assert(self);
    s_collect(self);
    kvt_gpu_t *gpu = self->gpu;
    pthread_mutex_lock(&gpu->mu);
    kvt_gpu_event_t *ev = self->free;
    if (ev) {
        self->free = ev->link;
        ev->link = NULL;
        ev->state = KVT_GPU_EV_OUT;
    }
    pthread_mutex_unlock(&gpu->mu);
    if (ev)
        return ev;
    ev = kvt_gpu_event_new(gpu);
    if (!ev)
        return NULL;
    pthread_mutex_lock(&gpu->mu);
    int rc = kvt_vec_reserve((void **)&self->events, &self->events_cap, self->nevents + 1,
                             sizeof *self->events);
    if (rc == 0) {
        ev->pool = self;
        ev->state = KVT_GPU_EV_OUT;
        ev->pool_at = self->nevents;
        self->events[self->nevents++] = ev;
        self->stats.created++;
    }
    pthread_mutex_unlock(&gpu->mu);
    if (rc != 0) {
        kvt_gpu_event_free(ev); //  a plain event still: the creating thread may destroy it
        kvt_gpu_fail(KVT_GPU_ENOMEM, "event_pool_get: out of memory");
        return NULL;
    }
    return ev;
}

//  Why `ev` cannot be put back into `self` (under gpu->mu), or NULL.
static const char *s_bad_put(kvt_gpu_event_pool_t *self, kvt_gpu_event_t *ev)
{
    if (!ev->pool)
        return "it is not a pool event (or was destroyed with its pool)";
    if (ev->pool != self)
        return "it belongs to another pool";
    if (ev->state == KVT_GPU_EV_FREE)
        return "it was already put back";
    if (ev->state == KVT_GPU_EV_DEFER)
        return "it was already put back and retired";
    return NULL;
}

void kvt_gpu_event_pool_put(kvt_gpu_event_pool_t *self, kvt_gpu_event_t **ev_p)
{
    assert(self && ev_p);
    kvt_gpu_t *gpu = self->gpu;
    kvt_gpu_event_t *ev = *ev_p;
    *ev_p = NULL;
    if (ev) {
        bool owner = self->owner == kvt_gpu_thread_token();
        bool destroy_now = false;
        const char *bad = "it belongs to another device";
        pthread_mutex_lock(&gpu->mu);
        //  Another device's event is guarded by another mutex: only its
        //  (immutable) device is read.
        if (ev->gpu == gpu)
            bad = s_bad_put(self, ev);
        if (bad)
            self->stats.refused++;
        else if (ev->records >= ev->max_records) {
            self->stats.retired++;
            if (owner) {
                s_unlink(self, ev);
                destroy_now = true;
            } else {
                self->stats.deferred++;
                ev->state = KVT_GPU_EV_DEFER;
                ev->link = self->deferred;
                self->deferred = ev;
            }
        } else {
            ev->state = KVT_GPU_EV_FREE;
            ev->link = self->free;
            self->free = ev;
        }
        pthread_mutex_unlock(&gpu->mu);
        if (bad) {
            kvt_gpu_fail(KVT_GPU_EINVAL, "event_pool_put: refused, %s", bad);
            kvt_gpu_log(gpu, 0, "%s", kvt_gpu_last_error());
        }
        if (destroy_now)
            kvt_gpu_event_free(ev);
    }
    s_collect(self);
}

void kvt_gpu_event_pool_stats(kvt_gpu_event_pool_t *self, kvt_gpu_event_pool_stats_t *out)
{
    assert(self && out);
    pthread_mutex_lock(&self->gpu->mu);
    *out = self->stats;
    out->free = 0;
    out->in_use = 0;
    out->pending = 0;
    for (uint32_t i = 0; i < self->nevents; i++) {
        const kvt_gpu_event_t *ev = self->events[i];
        if (ev->state == KVT_GPU_EV_FREE)
            out->free++;
        else if (ev->state == KVT_GPU_EV_OUT)
            out->in_use++;
        else if (ev->state == KVT_GPU_EV_DEFER)
            out->pending++;
    }
    pthread_mutex_unlock(&self->gpu->mu);
}

void kvt_gpu_event_pool_destroy(kvt_gpu_event_pool_t **self_p)
{
    assert(self_p);
    kvt_gpu_event_pool_t *self = *self_p;
    if (!self)
        return;
    kvt_gpu_t *gpu = self->gpu;
    if (self->owner != kvt_gpu_thread_token()) {
        pthread_mutex_lock(&gpu->mu);
        self->stats.refused++;
        pthread_mutex_unlock(&gpu->mu);
        kvt_gpu_fail(KVT_GPU_ESTATE,
                     "event_pool_destroy: refused off the pool's owner thread (the thread that "
                     "created it): its events are destroyed only there");
        kvt_gpu_log(gpu, 0, "%s", kvt_gpu_last_error());
        return;
    }
    pthread_mutex_lock(&gpu->mu);
    for (uint32_t i = 0; i < self->nevents; i++) {
        kvt_gpu_event_t *ev = self->events[i];
        ev->pool = NULL;
        ev->state = KVT_GPU_EV_PLAIN;
        ev->link = NULL;
    }
    self->free = self->deferred = NULL;
    if (self->prev)
        self->prev->next = self->next;
    else
        gpu->pools = self->next;
    if (self->next)
        self->next->prev = self->prev;
    pthread_mutex_unlock(&gpu->mu);
    for (uint32_t i = 0; i < self->nevents; i++)
        kvt_gpu_event_free(self->events[i]);
    free(self->events);
    free(self);
    *self_p = NULL;
}
