/*  kvt_worker — the rank's offload worker actor: the shell around kvt_wcore.

    Turns LoadSpec and SaveSpec messages into copies between the rank's device
    blocks and its tier (the storage manager: CPU pool, disk below it), and
    emits exactly one Completion per dispatched item on every path (the core,
    kvt_wcore.h, decides each one; this shell sends them):

    * a load reports once, on KVT_CHAN_LOAD keyed by its operation id, after
      every chunk was scattered into its blocks (or once, failed, when a
      chunk is missing, the spec is refused or a copy fails) — never before
      the copies it queued finished;
    * a save reports once per chunk, on KVT_CHAN_SAVE keyed by the chunk key,
      after its bytes were gathered into a pool reservation and committed
      (or once, failed, when the pool has no room, the key is being written
      by another writer, or the copy failed). A chunk the pool already holds
      is refreshed and reported ok without a copy.

    * a Touch reports on KVT_CHAN_TOUCH and KVT_CHAN_TOUCH_REFRESH, a
      Lookup once on KVT_CHAN_LOOKUP; a LookupRelease reports nothing.

    Every report carries the worker's epoch: a restarted worker (its actor
    crashed and restarted) comes back with the next one, so the aggregator drops what
    its predecessor still had in flight.

    * a load with a state leg also reports on KVT_CHAN_STATE (real or
      neutral), a save once on KVT_CHAN_SOURCE_SAFE, a Fence once on
      KVT_CHAN_FENCE (kvt_wcore.h).

    Specs are validated and refused, never clamped (rule L4). Copies run on
    three transfer lanes (load, state, save), each a kvt_lane_runner on a
    stream of its own with its own pool holder and event pool. Where a
    lane's submit runs is configuration (`lanes_threaded`), chosen by
    whoever builds the rank, never by this actor: inline (the submit runs in
    the handler that enqueued it, kvt_lane_core_pump: for a device whose
    calls never block, such as the host backend) or on the runner's
    submitter thread (a device call that may block then never blocks the
    worker's handlers or its timer). Either way one poll timer is armed for
    the core's next wake (the landing time when the device knows it, a
    deadline, a fence timeout, a renewal), and that timer path ticks every
    lane, so a deadline fires while a submit is stuck (rule X2). On shutdown
    it drains (rule X4): it waits for every lane's stream, shuts the lanes
    down (each job reports: drained, or failed SHUTDOWN; memory under a copy
    that did not end stays with the lane's pool holder), waits for the disk
    writes its commits queued, and only then frees lanes, events and
    streams. */
#ifndef KVT_WORKER_H_INCLUDED
#define KVT_WORKER_H_INCLUDED

#include <stdint.h>

#include "actors/common/kvt_fence_board.h"
#include "kvtier/kvt_actor.h"
#include "kvtier/kvt_gpu.h"
#include "kvtier/kvt_storage.h"

#define KVT_WORKER_EPOCH_SPAN (1ull << 40) //  epochs one process incarnation spans

typedef struct {
    uint32_t rank;             //  this worker's TP rank
    kvt_gpu_t *gpu;            //  the rank's device (shared with its runner)
    kvt_storage_t *storage;    //  the rank's tier; NULL: no tier (every item fails MISS / NO_SPACE)
    uint64_t ns;               //  namespace id of stored objects
    uint32_t block_size;       //  tokens per block
    uint32_t chunk_size;       //  tokens per chunk
    const char *aggregator;    //  name of the aggregator actor
    uint64_t poll_ns;          //  re-query interval when the device cannot say when a copy
                               //  lands (default 20 µs)
    uint64_t renew_ns;         //  restart the TTL of a pending job's leases and reservations this
                               //  often (default 1 s; keep it well under the pool's TTL)
    uint64_t epoch;            //  process incarnation (default 1, < 2^24): the worker stamps
                               //  epoch × KVT_WORKER_EPOCH_SPAN + (messages and timers its
                               //  actor handled before this start) + 1 on every report, so a
                               //  restarted actor gets a larger one; a rank process started again
                               //  passes a larger epoch (its start count)
    uint64_t lookup_ttl_ns;    //  lifetime of a pinned lookup's lease when the Lookup names none
                               //  (default 5 s; keep it under the pool's TTL)
    kvt_fence_board_t *board;  //  the rank's fence board, shared with its runner (NULL: loads
                               //  and saves never wait on the compute)
    bool lanes_threaded;       //  lanes submit on threads of their own (a device whose calls may
                               //  block); false: in the handler (default; deterministic)
    uint64_t lane_deadline_ns; //  a lane job's deadline (default 2 s)
    uint64_t fence_timeout_ns; //  a lane fence's timeout; past it the lane fails (default 5 s)
    bool no_source_safe;       //  true: no KVT_CHAN_SOURCE_SAFE reports (default false: each save
                               //  reports once, and the scheduler releases its leases on it)
    uint32_t fault_miss_state; //  testing fault: the Nth state leg's read misses (0 = off)
    kvt_gpu_stream_t **lane_streams; //  fault plans: the worker writes its lanes' streams here
                                     //  (3 entries: load, state, save) once they are up and
                                     //  NULLs them before it frees them (NULL = nowhere)
} kvt_worker_args_t;

//  The actor class.
extern const kvt_actor_class_t kvt_worker_class;

#endif
