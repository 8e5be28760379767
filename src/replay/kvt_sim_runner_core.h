/*  kvt_sim_runner_core — the simulated runner's pure core: one StepExec in,
    the StepDone to answer out.

    For a step it: refuses the whole step (nothing written) when it is for
    another rank or an entry's shape does not match the geometry; for every
    entry that resumes from a cache hit (verify_end > 0), checks each
    block of [0, verify_end) against the content oracle before the forward
    touches it; runs the "forward": writes the oracle bytes
    PRF (prefix hash, layer, plane, rank) into every block the step
    completes; and fills the StepDone with the blocks it wrote and verified
    and the requests whose restored bytes were wrong (each with where its
    first wrong byte is). Every call gives exactly one StepDone, on every
    path.

    No context, no messages sent, no clock: the shell forwards the step's
    loads and saves to the worker and sends the StepDone. Device memory is
    reached through a block accessor (the host backend's plane pointers in
    the replay, plain memory in tests).

    Testing fault (corrupt_resume = N > 0): after the Nth resumed entry's
    restore landed and before that entry is checked, one byte of its last
    restored block (last plane, last layer, middle byte) is flipped; the
    byte is flipped back after the check, so exactly one request sees wrong
    bytes. It proves the check: the replay must then report exactly one
    wrong resume. */
#ifndef KVT_SIM_RUNNER_CORE_H_INCLUDED
#define KVT_SIM_RUNNER_CORE_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvtier/kvt_msg.h"

#define KVT_RUNNER_MAX_PLANES 8 //  planes a replay model may have

//  Bytes of one block in one (plane, layer); NULL when there are none.
typedef void *(kvt_sim_runner_block_fn)(void *arg, uint32_t plane, uint32_t layer, uint32_t block);

typedef struct {
    uint32_t rank;                                   //  this runner's TP rank
    uint32_t block_size;                             //  tokens per block
    uint32_t planes;                                 //  KV planes (1..KVT_RUNNER_MAX_PLANES)
    uint32_t layers;                                 //  layers per plane (≥ 1)
    uint32_t num_blocks;                             //  device blocks per plane
    size_t plane_block_bytes[KVT_RUNNER_MAX_PLANES]; //  bytes of one block in one layer, per plane
    kvt_sim_runner_block_fn *block;                  //  block accessor
    void *block_arg;                                 //  its argument
    uint32_t corrupt_resume;                         //  testing fault: the Nth resume (0 = off)
} kvt_sim_runner_core_cfg_t;

//  Where a wrong request's restored bytes first differ from the oracle's.
typedef struct {
    uint64_t req;   //  request
    uint32_t block; //  device block
    uint32_t plane; //  plane
    uint32_t layer; //  layer
    size_t offset;  //  first wrong byte within the block's bytes of (plane, layer)
} kvt_sim_runner_wrong_t;

//  What one step gives. Pointers stay valid until the next call.
typedef struct {
    kvt_step_done_t done;                //  the StepDone to send (done.wrong owned by the core)
    const kvt_sim_runner_wrong_t *where; //  per done.wrong[i], where its first wrong byte is
    const char *refused;                 //  why the step did not run (NULL when it ran)
    bool fault_injected;                 //  the testing fault flipped a byte in this step
} kvt_sim_runner_out_t;

//  Counters.
typedef struct {
    uint64_t steps;           //  steps run
    uint64_t steps_failed;    //  steps refused
    uint64_t blocks_written;  //  blocks written by forwards
    uint64_t blocks_verified; //  restored blocks checked
    uint64_t blocks_wrong;    //  restored blocks whose bytes were wrong
    uint64_t faults_injected; //  testing faults applied
} kvt_sim_runner_stats_t;

typedef struct kvt_sim_runner_core_t kvt_sim_runner_core_t;

//  NULL when the configuration is unusable (too many planes, no layer, no
//  accessor, zero block size) or out of memory.
kvt_sim_runner_core_t *kvt_sim_runner_core_new(const kvt_sim_runner_core_cfg_t *cfg);

void kvt_sim_runner_core_destroy(kvt_sim_runner_core_t **self_p);

//  Runs one StepExec (borrowed for the call) and fills *out.
void kvt_sim_runner_core_exec(kvt_sim_runner_core_t *self, const kvt_step_exec_t *x,
                              kvt_sim_runner_out_t *out);

void kvt_sim_runner_core_stats(const kvt_sim_runner_core_t *self, kvt_sim_runner_stats_t *st);

#endif
