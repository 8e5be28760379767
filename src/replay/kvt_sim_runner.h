/*  kvt_sim_runner — the rank's model runner as the replay simulates it.

    For each StepExec it: forwards the step's LoadSpecs to the rank's worker
    (loads start before the forward); for every entry that resumes from a
    cache hit, checks each restored block against the content oracle before
    the forward touches it; runs the "forward": writes the oracle bytes
    PRF (prefix hash, layer, plane, rank) into every block the step completes;
    forwards the step's SaveSpecs (which read blocks completed in earlier
    steps); and answers StepDone with the blocks it wrote and verified and
    the requests whose restored bytes were wrong.

    Testing fault (corrupt_resume = N > 0): on the runner that has it, after
    the Nth resumed entry's restore landed and before that entry is checked,
    one byte of its last restored block (last plane, last layer, middle byte)
    is flipped; the byte is flipped back after the check, so exactly one
    request sees wrong bytes. It proves the check: the replay must then
    report exactly one wrong resume.

    The forward writes device memory directly (the host backend's plane
    pointers), so the replay runs on the host backend; on a device whose
    memory is not host-addressable the runner refuses to start. */
#ifndef KVT_SIM_RUNNER_H_INCLUDED
#define KVT_SIM_RUNNER_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

#include "kvtier/kvt_actor.h"
#include "kvtier/kvt_gpu.h"

#define KVT_RUNNER_MAX_PLANES 8 //  planes a replay model may have

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
