/*  kvt_sim_runner — the rank's model runner as the replay simulates it: a
    thin actor shell over kvt_sim_runner_core.

    For each StepExec it forwards the step's LoadSpecs to the rank's worker
    (loads start before the forward; their blocks belong to parked requests
    that no entry of the step touches), runs the step in the core (the
    oracle check of every resumed request's blocks, then the forward that
    writes the oracle bytes of every block the step completes), forwards
    the step's SaveSpecs (which read blocks completed in earlier steps),
    logs a refused step and every wrong resume, and answers StepDone.
    Loads and saves go to the worker even when the step is refused: each
    owes exactly one report, and the worker drops a spec it has already
    seen.

    The forward writes device memory directly (the host backend's plane
    pointers), so the replay runs on the host backend; on a device whose
    memory is not host-addressable the runner refuses to start. The testing
    fault corrupt_resume is described in kvt_sim_runner_core.h. */
#ifndef KVT_SIM_RUNNER_H_INCLUDED
#define KVT_SIM_RUNNER_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

#include "kvtier/kvt_actor.h"
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
} kvt_sim_runner_args_t;

//  The actor class.
extern const kvt_actor_class_t kvt_sim_runner_class;

#endif
