/*  kvt_fence_board — the device events one rank's runner and worker share,
    so that each side orders its streams after the other's on the device.

    Two fences (DESIGN §3.4, rules S1 / S2):
    * producer: the runner records one event per step on its compute stream
      after that step's forward (record_producer); a save of the step waits
      on it before any pack work (wait_producer), and a load into blocks the
      compute may still read waits for the compute of that step
      (wait_compute).
    * restores: after queueing a load's copies on a stream the worker
      records a restore event (record_restore, the latest per stream); the
      runner's compute waits for every restore recorded so far before its
      next forward (wait_restores).

    The board names device events only: the actors share no other memory.
    It is rank-local and mutex-protected (runner and worker run on
    different threads under the live driver); every event it holds is used
    only under its mutex, so none is destroyed while another thread uses
    it. Steps are the runner's step numbers; it keeps the last `depth`
    steps (a step older than that is covered by any newer one for
    wait_compute, and has no event for wait_producer).

    Fault hook: kvt_fence_board_fail_next (b, n) makes the next n
    record_producer calls fail as a device refusal would (KVT_GPU_EDEVICE),
    for tests and the replay's fault injection. */
#ifndef KVT_FENCE_BOARD_H_INCLUDED
#define KVT_FENCE_BOARD_H_INCLUDED

#include <stdint.h>

#include "kvtier/kvt_gpu.h"

#define KVT_FENCE_BOARD_DEPTH   64 //  steps kept when depth is 0
#define KVT_FENCE_BOARD_STREAMS 16 //  streams whose latest restore is kept

typedef struct kvt_fence_board_t kvt_fence_board_t;

//  Counters.
typedef struct {
    uint64_t producers_recorded; //  producer events recorded
    uint64_t producer_failures;  //  record_producer calls that failed (injected included)
    uint64_t faults_injected;    //  of them, failures made by fail_next
    uint64_t producer_waits;     //  waits queued on a producer event
    uint64_t producer_misses;    //  wait_producer for a step without an event
    uint64_t compute_waits;      //  waits queued on the compute (wait_compute)
    uint64_t compute_misses;     //  wait_compute with no event covering the step
    uint64_t restores_recorded;  //  restore events recorded
    uint64_t restore_failures;   //  record_restore calls that failed (device, no room)
    uint64_t restore_waits;      //  waits the compute queued on restore events
    uint64_t wait_failures;      //  stream waits the device refused
} kvt_fence_board_stats_t;

//  A board for the device `gpu` (borrowed) keeping the last `depth` steps
//  (0 = KVT_FENCE_BOARD_DEPTH). NULL when out of memory.
kvt_fence_board_t *kvt_fence_board_new(kvt_gpu_t *gpu, uint32_t depth);

//  Destroys the board and its events (the streams' waits keep the marks
//  they saw). NULL-safe; nulls the pointer.
void kvt_fence_board_destroy(kvt_fence_board_t **self_p);

//  Runner: records step's producer event on `compute` after the forward's
//  work was queued. 0, or a negative KVT_GPU_E* (no event for that step:
//  its saves go out with producer_failed; the next step records again).
int kvt_fence_board_record_producer(kvt_fence_board_t *self, uint64_t step,
                                    kvt_gpu_stream_t *compute);

//  Worker: `s` waits on the device for step's producer event. 0; -1 when
//  the board has no event for that step; a negative KVT_GPU_E* when the
//  device refused the wait.
int kvt_fence_board_wait_producer(kvt_fence_board_t *self, uint64_t step, kvt_gpu_stream_t *s);

//  Worker (loads): `s` waits for the compute of `step` and everything
//  before it on the compute stream: step's producer event, or, when it has
//  none (dropped past the depth), the oldest newer step's. 0; -1 when no
//  recorded event covers the step; a negative KVT_GPU_E* when the device
//  refused the wait.
int kvt_fence_board_wait_compute(kvt_fence_board_t *self, uint64_t step, kvt_gpu_stream_t *s);

//  Worker: after queueing a load's copies on `s`, records a restore event
//  on it (the board keeps the latest per stream, up to
//  KVT_FENCE_BOARD_STREAMS streams). 0 or a negative KVT_GPU_E*.
int kvt_fence_board_record_restore(kvt_fence_board_t *self, kvt_gpu_stream_t *s);

//  Runner: before the next forward, `compute` waits for every restore
//  recorded so far. 0, or the first negative KVT_GPU_E* of a refused wait
//  (the others are still queued).
int kvt_fence_board_wait_restores(kvt_fence_board_t *self, kvt_gpu_stream_t *compute);

//  Fault hook: the next n record_producer calls fail (KVT_GPU_EDEVICE).
void kvt_fence_board_fail_next(kvt_fence_board_t *self, uint32_t n);

//  Copies the counters.
void kvt_fence_board_stats(kvt_fence_board_t *self, kvt_fence_board_stats_t *out);

#endif
