/*  kvt_sim_runner_core — the simulated runner's pure core: one StepExec in,
    the loads and saves to forward and the StepDone to answer out.

    For a step it: refuses the whole step (nothing written) when it is for
    another rank or an entry's shape does not match the geometry; runs the
    "forward", which for every entry that resumes from a cache hit
    (verify_end > 0) first checks each block of [0, verify_end) (and, with
    state, the request's state slot at verify_end) against the content
    oracle, then writes the oracle bytes PRF (prefix hash, layer, plane,
    rank) into every block the step completes and, with state, advances the
    request's slot as a recurrence: when the step reaches a new block
    boundary B, the slot becomes state(B) ^ read ^ state(A) (A: what the
    slot should hold at the step's start), so a wrong state read stays
    wrong (kvt_oracle_state_advance; docs/architecture.md, the content
    oracle). A forward from token 0 starts from a slot it resets to the
    initial state (zeros). The state is checked at every resume, every
    checkpoint taken, every image the step saves, and at a request's end
    (when its slot's next owner comes; kvt_sim_runner_core_sweep at the
    end of the run). KV likewise: a forward that writes blocks reads its
    context block and carries any deviation into every block it writes;
    the last block of every chunk the step saves is checked, and so is a
    request's KV end (the last block its newest forward wrote) when a
    forward or a load is about to overwrite it, or by the sweep; and it
    fills the StepDone with the blocks it wrote and verified and the
    requests whose restored bytes were wrong (each with where its first
    wrong byte is). Every step gives exactly one StepDone, on every path.

    The forward is device work. With a compute stream (cfg.compute) it is a
    host function queued on that stream (kvt_gpu_launch_host_fn, costing
    cfg.forward_ns of modelled time): under the SIM landing model its reads
    and writes happen when it lands, so anything not ordered against it on
    the device races it. The fences (cfg.board, the rank's fence board):
    * before the forward, the compute stream waits for every restore the
      worker recorded (wait_restores): the forward reads restored bytes;
    * after it, the step's producer event is recorded (record_producer);
      the step's saves go out with producer = step + 1, or, when the record
      failed, with producer_failed (that step's saves only: its loads still
      go out, and the next step records again; after a failed record the
      compute stream is synchronized, so no unrecorded compute is left
      running);
    * the step's loads go out with after = step + 1 of the newest step whose
      producer event was recorded (the compute that may still read blocks
      a load overwrites: the step's own forward touches no parked request).
    Without a compute stream (tests without a device) the forward runs
    inside exec and the step is answered at once.

    With a compute stream exec leaves the StepDone pending until the
    forward landed: the shell arms a timer at kvt_sim_runner_core_wake and
    calls kvt_sim_runner_core_poll until it gives the StepDone. One step at
    a time: a StepExec while one is pending is refused (its loads and saves
    still go out).

    State slots. The runner has no slots of its own: on a device with
    state slots every entry must carry state work (Entry.state, from the
    scheduler) naming the request's slot (state_slot), and the forward
    uses exactly that slot, first copying HBM checkpoint unit restore_unit
    into it when restore_at > 0 (before the check), and after its writes
    copying the slot into checkpoint unit take_unit when take_at > 0. A
    tier load's state leg lands in the slot its LoadSpec names (the
    worker's copy), which is the Entry's when the scheduler is right; a
    wrong slot is then a wrong resume. Both copies are part of the
    forward, so they are on the compute stream before the step's producer
    event: a save of the taken image reads the unit only after the take.
    An entry without state work, or naming a slot (or checkpoint unit)
    the device does not have, refuses the whole step before anything is
    written (counted in slots_refused for a slot).

    No context, no messages sent, no clock: device memory is reached
    through accessors (the host backend's plane / state pointers in the
    replay, plain memory in tests).

    Testing fault (corrupt_resume = N > 0): after the Nth resumed entry's
    restore landed and before that entry is checked, one byte of its last
    restored block (last plane, last layer, middle byte) is flipped; the
    byte is flipped back after the check, so exactly one request sees wrong
    bytes. It proves the check: the replay must then report exactly one
    wrong resume. Testing fault corrupt_state = N > 0: the same for the
    Nth restored state slot checked (one byte in the middle of the slot,
    flipped before its check and back after): it proves the state check.
    The state-carry faults (each must give a wrong state the new checks see
    and the resume check does not): fault_stale_slot = N skips the reset of
    the Nth forward from token 0 into a slot that holds another state;
    fault_restore_late = N lets the Nth HBM checkpoint restore whose forward
    advances the state (and changes the slot) land after the forward read
    the slot, before the resume check; fault_swap_slots = N runs the first
    two continuing, advancing entries of the Nth step that has two in each
    other's slot.

    The KV is carried the same way. A forward that writes blocks reads the
    block just before the first one it writes (its context block, which
    the entry carries: the scheduler starts an entry's blocks one before
    the step's first token), takes its deviation from the oracle bytes
    (kvt_oracle_deviation: 0 when right) and XORs it into every word of
    every block it writes. A right read writes exactly the oracle bytes; a
    wrong one leaves every block the request writes after it wrong, which
    the resume check of a later request over those blocks, or the check of
    every chunk the step saves (its last block against the chunk key), sees.
    Testing fault fault_stale_block = N: the Nth forward that reads a
    context block reads another prefix's bytes there (the block is right
    again before any check looks), which only the carry shows. */
#ifndef KVT_SIM_RUNNER_CORE_H_INCLUDED
#define KVT_SIM_RUNNER_CORE_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "actors/common/kvt_fence_board.h"
#include "kvtier/kvt_gpu.h"
#include "kvtier/kvt_msg.h"

#define KVT_RUNNER_MAX_PLANES 8          //  planes a replay model may have
#define KVT_RUNNER_STATE      UINT32_MAX //  kvt_sim_runner_wrong_t.plane of a wrong state slot

//  Bytes of one block in one (plane, layer); NULL when there are none.
typedef void *(kvt_sim_runner_block_fn)(void *arg, uint32_t plane, uint32_t layer, uint32_t block);

//  Bytes of one state unit (pool KVT_GPU_STATE_SLOTS or _CKPT); NULL when none.
typedef void *(kvt_sim_runner_state_fn)(void *arg, kvt_gpu_state_pool_t pool, uint32_t index);

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
    uint32_t corrupt_state;         //  testing fault: the Nth state check (0 = off)
    uint32_t fault_stale_slot;      //  testing fault: the Nth forward from token 0 into a slot
                                    //  holding another state is not reset (0 = off)
    uint32_t fault_restore_late;    //  testing fault: the Nth HBM checkpoint restore lands after
                                    //  the forward read the slot (0 = off)
    uint32_t fault_swap_slots;      //  testing fault: the Nth step with two running entries that
                                    //  advance their state runs them in each other's slot
    uint32_t fault_stale_block;     //  testing fault: the Nth forward that reads a context block
                                    //  reads another prefix's bytes there (0 = off)
    kvt_gpu_t *gpu;                 //  the rank's device (borrowed; required with compute)
    kvt_gpu_stream_t *compute;      //  the rank's compute stream (borrowed); NULL: forward in exec
    kvt_fence_board_t *board;       //  the rank's fence board (borrowed); NULL: no fencing
    uint64_t forward_ns;            //  modelled device time of one forward (SIM), ns
    uint32_t state_slots;           //  state slots (0: the model has no recurrent state)
    uint32_t ckpt_units;            //  HBM checkpoint units (unit = slot when slot < ckpt_units)
    size_t state_bytes;             //  bytes of one slot / checkpoint unit
    uint32_t ckpt_interval;         //  tokens between state checkpoints (the chunk size)
    kvt_sim_runner_state_fn *state; //  state accessor (required with state_slots)
    void *state_arg;                //  its argument
} kvt_sim_runner_core_cfg_t;

//  Where a wrong request's restored bytes first differ from the oracle's.
typedef struct {
    uint64_t req;   //  request
    uint32_t block; //  device block (the state slot when plane is KVT_RUNNER_STATE)
    uint32_t plane; //  plane, or KVT_RUNNER_STATE for the state slot
    uint32_t layer; //  layer
    size_t offset;  //  first wrong byte within the block's bytes of (plane, layer) / the slot
    uint32_t check; //  which check saw it (KVT_RUNNER_AT_*)
} kvt_sim_runner_wrong_t;

//  kvt_sim_runner_wrong_t.check: where the oracle looked.
enum {
    KVT_RUNNER_AT_RESUME = 0, //  a resume's restored bytes (block: device block / slot)
    KVT_RUNNER_AT_TAKE,       //  a checkpoint just taken (block: checkpoint unit)
    KVT_RUNNER_AT_IMAGE,      //  a state image the step saves (block: checkpoint unit)
    KVT_RUNNER_AT_END,        //  a request's end, when its slot got a new owner (block: slot),
                              //  or its KV end block was about to be overwritten (device block)
    KVT_RUNNER_AT_SWEEP,      //  a request's end, by the end-of-run sweep (block: slot / block)
    KVT_RUNNER_AT_SAVE,       //  a KV chunk the step saves, its last block (block: device block)
};

//  What one call gives. Pointers stay valid until the next exec / poll;
//  loads and saves borrow the StepExec's arrays.
typedef struct {
    bool pending;                        //  exec: the forward runs on the device; poll later
    kvt_step_done_t done;                //  the StepDone to send (done.wrong owned by the core)
    const kvt_sim_runner_wrong_t *where; //  per done.wrong[i], where its first wrong byte is
    const char *refused;                 //  why the step did not run / failed (NULL when ok)
    bool fault_injected;                 //  the testing fault flipped a byte in this step
    const kvt_load_spec_t *loads;        //  exec: the step's loads to forward (after set)
    uint32_t nloads;                     //  exec: how many
    const kvt_save_spec_t *saves;        //  exec: the step's saves (producer / producer_failed)
    uint32_t nsaves;                     //  exec: how many
    bool producer_failed;                //  exec: the step's producer event is missing
} kvt_sim_runner_out_t;

//  Counters.
typedef struct {
    uint64_t steps;             //  steps run
    uint64_t steps_failed;      //  steps refused or failed on the device
    uint64_t blocks_written;    //  blocks written by forwards
    uint64_t blocks_verified;   //  restored blocks checked
    uint64_t blocks_wrong;      //  restored blocks whose bytes were wrong
    uint64_t faults_injected;   //  testing faults applied
    uint64_t forwards_queued;   //  forwards queued on the compute stream
    uint64_t producer_failures; //  steps whose saves went out producer_failed
    uint64_t device_failures;   //  forwards the device refused or failed
    uint64_t states_written;    //  checkpoint boundaries whose state bytes a forward wrote
    uint64_t states_verified;   //  restored state slots checked
    uint64_t states_wrong;      //  restored state slots whose bytes were wrong
    uint64_t states_restored;   //  checkpoint units copied into slots (entry restore_at)
    uint64_t states_taken;      //  slots copied into checkpoint units (entry take_at)
    uint64_t slots_refused;     //  entries refused: no state slot, or one beyond the device's
    uint64_t states_reset;      //  slots reset to the initial state for a forward from token 0
    uint64_t takes_checked;     //  checkpoints taken, checked against the oracle
    uint64_t takes_wrong;       //  of them wrong
    uint64_t images_checked;    //  state images saved, their checkpoint unit checked
    uint64_t images_wrong;      //  of them wrong
    uint64_t images_by_take;    //  of images_checked, proved by the unit's newest take (no pass)
    uint64_t ends_checked;      //  request ends checked (the slot's state when its next owner came)
    uint64_t ends_wrong;        //  of them wrong
    uint64_t sweep_checked;     //  slots and KV ends checked by the end-of-run sweep
    uint64_t sweep_wrong;       //  of them wrong
    uint64_t states_untracked;  //  forwards whose starting state the runner could not know
    uint64_t kv_reads;          //  context blocks read by forwards that wrote blocks
    uint64_t kv_carried;        //  of them deviating: the deviation went into the writes
    uint64_t kv_unread;         //  forwards that wrote blocks past token 0 naming no context block
    uint64_t saves_checked;     //  KV chunks saved, their last block checked
    uint64_t saves_wrong;       //  of them wrong
    uint64_t kv_ends_checked;   //  requests' KV ends (last block written) checked before reuse
    uint64_t kv_ends_wrong;     //  of them wrong
} kvt_sim_runner_stats_t;

typedef struct kvt_sim_runner_core_t kvt_sim_runner_core_t;

//  NULL when the configuration is unusable (too many planes, no layer, no
//  accessor, zero block size; state slots without state accessor, bytes or
//  checkpoint interval; a compute stream without its device, a board
//  without a compute stream) or out of memory.
kvt_sim_runner_core_t *kvt_sim_runner_core_new(const kvt_sim_runner_core_cfg_t *cfg);

//  Lands a pending forward (synchronizing the compute stream) and frees;
//  a forward stuck behind a stalled stream keeps the core (not freed).
void kvt_sim_runner_core_destroy(kvt_sim_runner_core_t **self_p);

//  Runs one StepExec (borrowed for the call and for *out's loads / saves)
//  and fills *out: the StepDone at once (pending false), or pending true
//  when the forward was queued on the compute stream.
void kvt_sim_runner_core_exec(kvt_sim_runner_core_t *self, const kvt_step_exec_t *x,
                              kvt_sim_runner_out_t *out);

//  True when the pending step's forward ended (landed, or failed on the
//  device): *out then holds its StepDone. False while it runs (or when
//  nothing is pending).
bool kvt_sim_runner_core_poll(kvt_sim_runner_core_t *self, kvt_sim_runner_out_t *out);

//  When to poll again, on the clock of now_ns (kvt_gpu_event_wake over the
//  forward's end; poll_ns when the backend cannot say). now_ns when
//  nothing is pending.
uint64_t kvt_sim_runner_core_wake(kvt_sim_runner_core_t *self, uint64_t now_ns, uint64_t poll_ns);

//  True while a forward is pending.
bool kvt_sim_runner_core_busy(const kvt_sim_runner_core_t *self);

void kvt_sim_runner_core_stats(const kvt_sim_runner_core_t *self, kvt_sim_runner_stats_t *st);

//  The end-of-run sweep: checks the state slot of every request whose end
//  has not been checked (each slot's last owner) against the state its last
//  forward left, and every KV end block nothing has read or overwritten
//  since its forward wrote it; *where (valid until the next call) says where
//  each wrong one first differs. Returns how many were wrong; 0 and nothing
//  checked while a forward is pending. A slot is checked once per state it
//  holds, a KV end once.
uint32_t kvt_sim_runner_core_sweep(kvt_sim_runner_core_t *self,
                                   const kvt_sim_runner_wrong_t **where);

#endif
