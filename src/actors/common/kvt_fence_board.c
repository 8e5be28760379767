/*  kvt_fence_board — see kvt_fence_board.h. */
#include "kvt_fence_board.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

//  One step's producer event.
typedef struct {
    uint64_t step1;      //  step + 1 this slot holds (0 = none)
    kvt_gpu_event_t *ev; //  its event (kept for re-records; NULL until first used)
} s_step_t;

//  The latest restore event of one stream.
typedef struct {
    kvt_gpu_stream_t *s; //  the stream (NULL = free entry)
    kvt_gpu_event_t *ev; //  its latest restore event
} s_restore_t;

struct kvt_fence_board_t {
    pthread_mutex_t mu;                            //  guards everything below
    kvt_gpu_t *gpu;                                //  the rank's device (borrowed)
    uint32_t depth;                                //  steps kept
    s_step_t *steps;                               //  ring by step % depth
    s_restore_t restores[KVT_FENCE_BOARD_STREAMS]; //  latest restore per stream
    uint32_t fail_next;                            //  record_producer calls still to fail
    kvt_fence_board_stats_t st;                    //  counters
};

kvt_fence_board_t *kvt_fence_board_new(kvt_gpu_t *gpu, uint32_t depth)
{
    if (!gpu)
        return NULL;
    kvt_fence_board_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->gpu = gpu;
    self->depth = depth ? depth : KVT_FENCE_BOARD_DEPTH;
    self->steps = calloc(self->depth, sizeof *self->steps);
    if (!self->steps || pthread_mutex_init(&self->mu, NULL) != 0) {
        free(self->steps);
        free(self);
        return NULL;
    }
    return self;
}

void kvt_fence_board_destroy(kvt_fence_board_t **self_p)
{
    kvt_fence_board_t *self = *self_p;
    if (!self)
        return;
    for (uint32_t i = 0; i < self->depth; i++)
        kvt_gpu_event_destroy(&self->steps[i].ev);
    for (uint32_t i = 0; i < KVT_FENCE_BOARD_STREAMS; i++)
        kvt_gpu_event_destroy(&self->restores[i].ev);
    pthread_mutex_destroy(&self->mu);
    free(self->steps);
    free(self);
    *self_p = NULL;
}

//  Records *evp on s, replacing an event whose re-records ran out (its
//  marks stay with the waits that saw them). Under the mutex.
static int s_record(kvt_fence_board_t *self, kvt_gpu_event_t **evp, kvt_gpu_stream_t *s)
{
    if (!*evp && !(*evp = kvt_gpu_event_new(self->gpu)))
        return KVT_GPU_ENOMEM;
    int rc = kvt_gpu_event_record(*evp, s);
    if (rc == KVT_GPU_ELIMIT) {
        kvt_gpu_event_destroy(evp);
        if (!(*evp = kvt_gpu_event_new(self->gpu)))
            return KVT_GPU_ENOMEM;
        rc = kvt_gpu_event_record(*evp, s);
    }
    return rc;
}

//  Queues s's wait on ev and counts it. Under the mutex.
static int s_wait(kvt_fence_board_t *self, kvt_gpu_stream_t *s, kvt_gpu_event_t *ev,
                  uint64_t *counter)
{
    int rc = kvt_gpu_stream_wait_event(s, ev);
    if (rc == 0)
        (*counter)++;
    else
        self->st.wait_failures++;
    return rc;
}

int kvt_fence_board_record_producer(kvt_fence_board_t *self, uint64_t step,
                                    kvt_gpu_stream_t *compute)
{
    pthread_mutex_lock(&self->mu);
    s_step_t *slot = &self->steps[step % self->depth];
    //  The slot's older step is forgotten whatever happens: a failed
    //  record must not leave an earlier step's event answering for this one.
    slot->step1 = 0;
    int rc;
    if (self->fail_next > 0) {
        self->fail_next--;
        self->st.faults_injected++;
        rc = KVT_GPU_EDEVICE;
    } else
        rc = s_record(self, &slot->ev, compute);
    if (rc == 0) {
        slot->step1 = step + 1;
        self->st.producers_recorded++;
    } else
        self->st.producer_failures++;
    pthread_mutex_unlock(&self->mu);
    return rc;
}

int kvt_fence_board_wait_producer(kvt_fence_board_t *self, uint64_t step, kvt_gpu_stream_t *s)
{
    pthread_mutex_lock(&self->mu);
    s_step_t *slot = &self->steps[step % self->depth];
    int rc = -1;
    if (slot->step1 == step + 1)
        rc = s_wait(self, s, slot->ev, &self->st.producer_waits);
    else
        self->st.producer_misses++;
    pthread_mutex_unlock(&self->mu);
    return rc;
}

int kvt_fence_board_wait_compute(kvt_fence_board_t *self, uint64_t step, kvt_gpu_stream_t *s)
{
    pthread_mutex_lock(&self->mu);
    //  The step's own event, else the oldest newer one: the compute stream
    //  is one ordered queue, so a later mark covers every earlier step.
    s_step_t *best = NULL;
    for (uint32_t i = 0; i < self->depth; i++) {
        s_step_t *e = &self->steps[i];
        if (e->step1 > step && (!best || e->step1 < best->step1))
            best = e;
    }
    int rc = -1;
    if (best)
        rc = s_wait(self, s, best->ev, &self->st.compute_waits);
    else
        self->st.compute_misses++;
    pthread_mutex_unlock(&self->mu);
    return rc;
}

int kvt_fence_board_record_restore(kvt_fence_board_t *self, kvt_gpu_stream_t *s)
{
    pthread_mutex_lock(&self->mu);
    s_restore_t *e = NULL, *spare = NULL;
    for (uint32_t i = 0; i < KVT_FENCE_BOARD_STREAMS && !e; i++) {
        s_restore_t *r = &self->restores[i];
        if (r->s == s)
            e = r;
        else if (!spare && (!r->s || kvt_gpu_event_query(r->ev) != KVT_GPU_NOT_READY))
            spare = r; //  free, or its latest restore finished: nothing left to wait for
    }
    if (!e && spare) {
        e = spare;
        e->s = s;
    }
    int rc = e ? s_record(self, &e->ev, s) : KVT_GPU_ELIMIT;
    if (rc == 0)
        self->st.restores_recorded++;
    else {
        self->st.restore_failures++;
        if (e && !e->ev)
            e->s = NULL;
    }
    pthread_mutex_unlock(&self->mu);
    return rc;
}

int kvt_fence_board_wait_restores(kvt_fence_board_t *self, kvt_gpu_stream_t *compute)
{
    pthread_mutex_lock(&self->mu);
    int first = 0;
    for (uint32_t i = 0; i < KVT_FENCE_BOARD_STREAMS; i++) {
        s_restore_t *r = &self->restores[i];
        if (!r->s || !r->ev)
            continue;
        //  A finished restore needs no wait; a failed one is never read
        //  (its load reports the failure) and must not fail the compute
        //  stream with it. Either way the entry is free again.
        if (kvt_gpu_event_query(r->ev) != KVT_GPU_NOT_READY) {
            r->s = NULL;
            continue;
        }
        int rc = s_wait(self, compute, r->ev, &self->st.restore_waits);
        if (rc != 0 && first == 0)
            first = rc;
    }
    pthread_mutex_unlock(&self->mu);
    return first;
}

void kvt_fence_board_fail_next(kvt_fence_board_t *self, uint32_t n)
{
    pthread_mutex_lock(&self->mu);
    self->fail_next = n;
    pthread_mutex_unlock(&self->mu);
}

void kvt_fence_board_stats(kvt_fence_board_t *self, kvt_fence_board_stats_t *out)
{
    pthread_mutex_lock(&self->mu);
    *out = self->st;
    pthread_mutex_unlock(&self->mu);
}
