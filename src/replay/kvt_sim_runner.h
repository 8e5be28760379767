/*  kvt_sim_runner — the rank's model runner as the replay simulates it: a
    thin actor shell over kvt_sim_runner_core.

    For each StepExec it runs the step in the core, which queues the
    "forward" (the oracle check of every resumed request's blocks and state
    slot, then the writes of every block and checkpoint the step completes)
    on the rank's compute stream, ordered on the device after every restore
    the worker recorded on the fence board, and records the step's producer
    event. It then forwards the step's LoadSpecs (after = the newest
    recorded compute) and SaveSpecs (producer = step + 1, or
    producer_failed when the event could not be recorded) to the rank's
    worker, and answers StepDone once the forward landed (a timer at the
    forward's landing time, or polled every poll_ns where the device cannot
    say), logging a refused or failed step and every wrong resume. Loads
    and saves go to the worker even when the step is refused: each owes
    exactly one report, and the worker drops a spec it has already seen.

    The forward writes device memory through the host backend's plane and
    state pointers, so the replay runs on the host backend; on a device
    whose memory is not host-addressable the runner refuses to start. The
    testing faults corrupt_resume and corrupt_state are described in kvt_sim_runner_core.h;
    fault_producer_step = N makes the producer record of step N fail
    (kvt_fence_board_fail_next), so that step's saves go out refused; the
    state faults fault_stale_slot, fault_restore_late and fault_swap_slots
    and the KV fault fault_stale_block are the core's (kvt_sim_runner_core.h).

    A Stats request runs the core's end-of-run sweep first (every slot
    whose owner's end was not checked yet), logs each wrong state it finds
    and reports the count as runner.sweep_wrong: the replay asks for
    counters once, when every request has ended. */
#ifndef KVT_SIM_RUNNER_H_INCLUDED
#define KVT_SIM_RUNNER_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

#include "kvtier/kvt_actor.h"
#include "actors/common/kvt_fence_board.h"
#include "kvtier/kvt_gpu.h"
#include "replay/kvt_sim_runner_core.h"

typedef struct {
    uint32_t rank;                                   //  this runner's TP rank
    kvt_gpu_t *gpu;                                  //  the rank's device (shared with its worker)
    uint32_t block_size;                             //  tokens per block
    uint32_t planes;                                 //  KV planes registered on the device
    uint32_t layers;                                 //  layers per plane
    size_t plane_block_bytes[KVT_RUNNER_MAX_PLANES]; //  bytes of one block in one layer, per plane
    const char *engine;                              //  name of the engine actor
    const char *worker;                              //  name of this rank's worker actor
    uint32_t corrupt_resume; //  testing fault: corrupt the Nth resume (0 = off)
    uint32_t corrupt_state;  //  testing fault: corrupt the Nth restored state slot (0 = off)
    kvt_fence_board_t
        *board;          //  the rank's fence board (borrowed, shared with the worker); NULL: none
    uint64_t forward_ns; //  modelled device time of one forward, ns (default 0: lands when due)
    uint64_t poll_ns;    //  poll period where the device cannot say when it lands (default 20000)
    uint32_t chunk_size; //  tokens per chunk: the state checkpoint interval (with state pools)
    uint64_t fault_producer_step; //  testing fault: step whose producer record fails (0 = off)
    uint32_t fault_stale_slot;    //  testing fault: the Nth forward from 0 keeps a held slot's
                                  //  state (kvt_sim_runner_core.h; 0 = off)
    uint32_t fault_restore_late;  //  testing fault: the Nth checkpoint restore lands late
    uint32_t fault_swap_slots;    //  testing fault: the Nth step runs two entries swapped
    uint32_t fault_stale_block;   //  testing fault: the Nth context block read is another
                                  //  prefix's (kvt_sim_runner_core.h; 0 = off)
} kvt_sim_runner_args_t;

//  The actor class.
extern const kvt_actor_class_t kvt_sim_runner_class;

#endif
