/*  kvt_lane_runner — a lane core behind its mutex, with the submit path on
    a thread of its own, so that a submit that blocks never blocks the
    caller's timer path (rule X2 end to end).

    The runner applies the core's lock and ordering rules
    (kvt_lane_core.h): every core call under one mutex; the submit op runs
    without it, on the submitter thread (threaded mode), which takes the
    oldest queued job, runs its submit and hands the result back. The caller
    (an actor shell's handlers and its timer) enqueues, fences, ticks and
    takes reports; a report the submitter thread made (a refused submit)
    waits in the outbox, and kvt_lane_runner_next_wake answers `now` while
    one does, so the caller's timer picks it up. While a job is queued or
    inside its submit, next_wake is at most poll_ns away (a submit that
    returned made its job pending; only the caller's next look learns when
    its copies land).

    Inline mode (threaded false) runs every submit in the calling thread
    (kvt_lane_core_pump after each enqueue and tick): deterministic, for a composition
    whose submits never block.

    Thread safety: every call may be made from any thread except
    kvt_lane_runner_destroy, which must not race the others. In threaded
    mode the submitter thread queues on the lane's stream and takes events
    from cfg->evp (a get from a non-owner thread is allowed); nothing else
    may queue on that stream, and the event pool is owned by the caller's
    thread (retired events are destroyed by its next pool call). */
#ifndef KVT_LANE_RUNNER_H_INCLUDED
#define KVT_LANE_RUNNER_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvt_lane_core.h"

typedef struct _kvt_lane_runner_t kvt_lane_runner_t;

//  Creates the core from cfg and, when threaded, starts the submitter
//  thread. NULL with a message naming the setting (or "cannot start the
//  submitter thread") in err.
kvt_lane_runner_t *kvt_lane_runner_new(const kvt_lane_cfg_t *cfg, bool threaded, char *err,
                                       size_t errlen);

//  Stops the submitter thread and destroys the core. It joins the thread,
//  so it WAITS for a submit that is stuck to return: call it once the lane
//  was shut down and the device drained (a submit that never returns holds
//  the caller here). NULL-safe; nulls the pointer.
void kvt_lane_runner_destroy(kvt_lane_runner_t **self_p);

//  kvt_lane_core_enqueue / _fence / _tick / _next_wake / _shutdown under the
//  mutex; enqueue wakes the submitter (inline: submits at once).
void kvt_lane_runner_enqueue(kvt_lane_runner_t *self, const kvt_lane_job_t *job, uint64_t now);
void kvt_lane_runner_fence(kvt_lane_runner_t *self, uint64_t id, uint64_t now);
void kvt_lane_runner_tick(kvt_lane_runner_t *self, uint64_t now);
uint64_t kvt_lane_runner_next_wake(kvt_lane_runner_t *self, uint64_t now);
uint32_t kvt_lane_runner_shutdown(kvt_lane_runner_t *self, uint64_t now);

//  Resets the lane (kvt_lane_core_reset) under the mutex.
void kvt_lane_runner_reset(kvt_lane_runner_t *self, kvt_gpu_stream_t *stream, uint64_t now);

//  The recovery policy's test, under the mutex, O(1): true when the lane has
//  failed and drained — it holds no job in any stage (every job reported
//  and every quarantined copy ended, so a reset orphans no handle a copy
//  still uses) and no submit is in flight — and then resets it. False (and
//  nothing done) otherwise.
bool kvt_lane_runner_reset_if_drained(kvt_lane_runner_t *self, uint64_t now);

//  Moves up to `cap` of the oldest reports into out; returns how many.
uint32_t kvt_lane_runner_take(kvt_lane_runner_t *self, kvt_lane_report_t *out, uint32_t cap);

//  Snapshot of the core's counters, and whether a submit is running now.
void kvt_lane_runner_stats(kvt_lane_runner_t *self, kvt_lane_stats_t *out);
bool kvt_lane_runner_submitting(kvt_lane_runner_t *self);

#endif
