/*  kvt_gpu_event_pool.c — reusable events with a bounded number of
    re-records. An event that has no record left is retired: destroyed at
    once when the thread retiring it owns it (created it), otherwise parked
    on the deferred stack until the owner's next pool call. Every state
    change happens under gpu->mu; backend destroys run outside it.
*/
#include <assert.h>
#include <stdlib.h>

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
    self->owner = pthread_self();
    pthread_mutex_lock(&gpu->mu);
    self->next = gpu->pools;
    if (gpu->pools)
        gpu->pools->prev = self;
    gpu->pools = self;
    pthread_mutex_unlock(&gpu->mu);
    return self;
}

//  Removes `ev` from a link stack (under gpu->mu).
static void s_unstack(kvt_gpu_event_t **top, kvt_gpu_event_t *ev)
{
    for (kvt_gpu_event_t **at = top; *at; at = &(*at)->link)
        if (*at == ev) {
            *at = ev->link;
            ev->link = NULL;
            return;
        }
}

void kvt_gpu_event_pool_forget(kvt_gpu_event_t *ev)
{
    kvt_gpu_event_pool_t *pool = ev->pool;
    if (ev->state == KVT_GPU_EV_FREE)
        s_unstack(&pool->free, ev);
    else if (ev->state == KVT_GPU_EV_DEFER)
        s_unstack(&pool->deferred, ev);
    if (ev->pool_prev)
        ev->pool_prev->pool_next = ev->pool_next;
    else
        pool->events = ev->pool_next;
    if (ev->pool_next)
        ev->pool_next->pool_prev = ev->pool_prev;
    pool->stats.destroyed++;
    ev->pool = NULL;
    ev->state = KVT_GPU_EV_PLAIN;
}

//  Destroys the deferred events the calling thread owns. Returns how many.
static int s_collect(kvt_gpu_event_pool_t *self)
{
    kvt_gpu_t *gpu = self->gpu;
    pthread_t me = pthread_self();
    int count = 0;
    while (true) {
        kvt_gpu_event_t *mine = NULL;
        pthread_mutex_lock(&gpu->mu);
        for (kvt_gpu_event_t *ev = self->deferred; ev; ev = ev->link)
            if (pthread_equal(ev->owner, me)) {
                mine = ev;
                break;
            }
        pthread_mutex_unlock(&gpu->mu);
        if (!mine)
            break;
        kvt_gpu_event_destroy(&mine);
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
    ev->pool = self;
    ev->state = KVT_GPU_EV_OUT;
    ev->pool_next = self->events;
    if (self->events)
        self->events->pool_prev = ev;
    self->events = ev;
    self->stats.created++;
    pthread_mutex_unlock(&gpu->mu);
    return ev;
}

void kvt_gpu_event_pool_put(kvt_gpu_event_pool_t *self, kvt_gpu_event_t **ev_p)
{
    assert(self && ev_p);
    kvt_gpu_event_t *ev = *ev_p;
    *ev_p = NULL;
    if (ev) {
        kvt_gpu_t *gpu = self->gpu;
        bool destroy_now = false;
        pthread_mutex_lock(&gpu->mu);
        //  Only an event this pool handed out may come back.
        assert(ev->pool == self && ev->state == KVT_GPU_EV_OUT);
        if (ev->records >= ev->max_records) {
            self->stats.retired++;
            if (pthread_equal(ev->owner, pthread_self()))
                destroy_now = true;
            else {
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
        if (destroy_now)
            kvt_gpu_event_destroy(&ev);
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
    for (kvt_gpu_event_t *ev = self->events; ev; ev = ev->pool_next) {
        if (ev->state == KVT_GPU_EV_FREE)
            out->free++;
        else if (ev->state == KVT_GPU_EV_OUT)
            out->in_use++;
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
    while (true) {
        pthread_mutex_lock(&gpu->mu);
        kvt_gpu_event_t *ev = self->events;
        pthread_mutex_unlock(&gpu->mu);
        if (!ev)
            break;
        kvt_gpu_event_destroy(&ev);
    }
    pthread_mutex_lock(&gpu->mu);
    if (self->prev)
        self->prev->next = self->next;
    else
        gpu->pools = self->next;
    if (self->next)
        self->next->prev = self->prev;
    pthread_mutex_unlock(&gpu->mu);
    free(self);
    *self_p = NULL;
}
