/*  kvt_sim_engine_core — the simulated engine's pure core: a state machine
    over a modelled clock that says, for each event, what to send next.

    It admits the workload's requests in arrival order on the modelled
    clock (a Schedule carries the requests that arrived by then: by their
    timestamps, or in a closed loop of C as earlier ones end), sends the
    scheduler's plan to every rank as StepExec, waits for exactly one
    StepDone per rank, advances the clock by the step's modelled cost and
    asks for the next Schedule; when the scheduler is idle and every request
    arrived it asks every actor for its counters, and once all answered it
    fills the result (TTFT percentiles on the modelled clock) and says to
    exit.

    The modelled clock advances by the cost model (kvt_cost) per step: a
    fixed part, the compute of every token and its attention over its
    context, and the KV a decode reads; when nothing runs it jumps to the
    next arrival. A load's copy (CPU or disk to device, over one link per
    rank, loads one after another) starts when the plan dispatches it; the
    request it restores gets its first token no sooner than one step after
    the copy ended, so a load delays only the request that waits for it.
    Saves only count link time (they run beside the step). It is the only time the core knows: no
   context, no clock reads, no messages sent (the shell sends what each call returns). */
#ifndef KVT_SIM_ENGINE_CORE_H_INCLUDED
#define KVT_SIM_ENGINE_CORE_H_INCLUDED

#include <stdbool.h>
#include <stdint.h>

#include "kvt_cost.h"
#include "kvt_ledger.h"
#include "kvt_workload.h"
#include "kvtier/kvt_msg.h"

typedef struct {
    char actor[KVT_MSG_MAX_NAME + 1]; //  reporting actor
    kvt_counter_t c;                  //  counter name and value
} kvt_sim_engine_counter_t;

//  What a replay measured. Filled by the engine before it exits.
typedef struct {
    uint64_t requests;         //  requests in the workload
    uint64_t finished;         //  requests that generated all their tokens
    uint64_t rejected;         //  requests the scheduler refused
    uint64_t aborted;          //  requests that ended aborted (FINISH c = KVT_FINISH_ABORTED)
    uint64_t aborts_sent;      //  ids the engine put in Schedule.aborts (testing fault)
    uint64_t preempts_sent;    //  ids the engine put in Schedule.preempts (testing fault)
    uint64_t preempted;        //  requests admitted again after a preemption
    uint64_t fault_phase[5];   //  aborts + preempts sent, by the phase the request was in
                               //  (KVT_SIM_PHASE_*)
    uint64_t input_tokens;     //  prompt tokens of finished requests
    uint64_t admitted_tokens;  //  prompt tokens of every admission, as admitted (a request
                               //  admitted again counts again; the report's hit share)
    uint64_t hbm_hit_tokens;   //  prompt tokens served from HBM
    uint64_t tier_hit_tokens;  //  prompt tokens restored from the tier (verdict ok)
    uint64_t disk_hit_tokens;  //  ... of them, tokens some rank read from its disk tier
    uint64_t loads_ok;         //  load verdicts ok
    uint64_t loads_failed;     //  load verdicts failed (retreats)
    uint64_t wrong_resumes;    //  requests whose restored bytes differed from a recompute
    uint64_t steps;            //  steps run
    uint64_t steps_failed;     //  step reports with ok = false
    uint64_t model_time_us;    //  modelled clock at the end
    uint64_t driver_us;        //  the driver's clock from the first Schedule to the end,
                               //  as the engine saw it (set by the shell; paced, at least
                               //  the modelled time from the first Schedule to the last)
    double ttft_p50_ms;        //  time to first token, modelled (ms)
    double ttft_p90_ms;        //  ...
    double ttft_p99_ms;        //  ...
    uint64_t busy_us;          //  modelled time the engine spent in steps
    uint64_t load_copy_us;     //  modelled copy time of every load (the link's busy time)
    uint64_t load_wait_us;     //  first tokens delayed past their step's end by a copy
    uint64_t save_link_us;     //  device-to-host link time of every save
    uint64_t drain_us;         //  modelled time from the last arrival to the last first token
    uint64_t max_stall_us;     //  longest modelled stretch in which requests waited and no
                               //  plan ran, loaded or saved anything (forward progress)
    uint64_t span_us;          //  first to last arrival
    uint32_t max_in_flight;    //  most requests arrived and not yet ended at once (a closed
                               //  loop of C keeps it at most C)
    double utilisation;        //  busy_us over the modelled time from the first arrival
    bool saturated;            //  queueing dominates: the drain exceeds 10 s and a tenth of
                               //  the span (kvt_sim_engine_saturated)
    bool done;                 //  the engine reached the end of the workload
    uint64_t bad_wrong_ids;    //  StepDone wrong[] ids naming no request (a wrong report)
    uint64_t finish_dropped;   //  FINISH events dropped: the request had ended, or no such request
    uint64_t stats_unexpected; //  Stats replies dropped: not asked, answered twice, or a
                               //  body naming another actor than the sender
    char error[160];           //  why the engine stopped before the end ("" if it did not)
    uint64_t *ttft_us;         //  every first token's TTFT, sorted (owned; NULL when none)
    uint32_t nttft;            //  entries in ttft_us
    kvt_sim_engine_counter_t
        *counters;         //  every actor's counters (owned; kvt_sim_engine_result_clear)
    uint32_t ncounters;    //  entries in counters
    uint32_t counters_cap; //  allocated entries
} kvt_sim_engine_result_t;

//  Appends a counter; returns 0 or -1 when out of memory.
int kvt_sim_engine_result_add(kvt_sim_engine_result_t *self, const char *actor, const char *name,
                              uint64_t value);

//  Sets the TTFT percentiles from the sorted ttft_us.
void kvt_sim_engine_result_percentiles(kvt_sim_engine_result_t *self);

//  Frees the counters and zeroes the result.
void kvt_sim_engine_result_clear(kvt_sim_engine_result_t *self);

typedef struct {
    const kvt_workload_t *wl;   //  the requests (borrowed), in arrival order
    uint32_t tp;                //  ranks (≥ 1)
    kvt_cost_cfg_t cost;        //  cost model (prefill_tps 0: kvt_cost_defaults dense at tp)
    uint32_t max_arrival_bytes; //  token bytes per Schedule message (default 4 MiB)
    kvt_ledger_t *ledger;       //  fed every plan (borrowed; NULL: none)
    uint32_t closed_loop;       //  C > 0: closed loop, the first C requests arrive at time 0
                                //  and each later one (in order) when an earlier one ends,
                                //  timestamps ignored; 0: open loop by timestamps
    uint32_t fault_abort;       //  testing fault: one request in N (ids N-1, 2N-1, ...) is
                                //  aborted once, the kth of them in phase k mod
                                //  KVT_SIM_PHASES (0 = off)
    uint32_t fault_preempt;     //  testing fault: ... preempted once (0 = off)
} kvt_sim_engine_core_cfg_t;

//  The phase of a request as the engine sees it from the plans, which the
//  abort and preempt faults rotate through (a phase with no request
//  passes to the next).
typedef enum {
    KVT_SIM_PHASE_WAITING = 0, //  arrived, not admitted (its lookup or its blocks)
    KVT_SIM_PHASE_LOADING,     //  admitted, its load dispatched and not settled
    KVT_SIM_PHASE_RUNNING,     //  admitted, computing
    KVT_SIM_PHASE_SAVING,      //  running, a save of it dispatched by the last plan
    KVT_SIM_PHASE_DONE_SAVING, //  finished by the last plan, which dispatched a save of it
    KVT_SIM_PHASES
} kvt_sim_phase_t;

//  What the shell does after a call.
typedef enum {
    KVT_SIM_ENGINE_WAIT = 0, //  nothing: wait for the next message
    KVT_SIM_ENGINE_SCHEDULE, //  send out.schedule to the scheduler
    KVT_SIM_ENGINE_EXEC,     //  send out.exec to every rank r (with rank = r)
    KVT_SIM_ENGINE_STATS,    //  ask every actor for its counters, then call _stats_asked
    KVT_SIM_ENGINE_EXIT,     //  the replay is over: exit the system
} kvt_sim_engine_do_t;

//  A call's answer. Pointers stay valid until the next call; exec's
//  arrays are the plan's.
typedef struct {
    kvt_sim_engine_do_t what; //  what to do
    kvt_schedule_t schedule;  //  SCHEDULE: the message
    kvt_step_exec_t exec;     //  EXEC: the message (rank left 0)
    int note_level;           //  log level of note
    bool fatal;               //  with -1: the replay cannot go on (out of memory); stop it
    char note[160];           //  a line to log ("" = none); with -1 from a call, why
} kvt_sim_engine_out_t;

typedef struct kvt_sim_engine_core_t kvt_sim_engine_core_t;

//  result (zeroed, or an earlier result) is borrowed and cleared; it is
//  filled as the replay runs. NULL
//  when the configuration is unusable (no workload, tp 0) or out of memory.
kvt_sim_engine_core_t *kvt_sim_engine_core_new(const kvt_sim_engine_core_cfg_t *cfg,
                                               kvt_sim_engine_result_t *result);

void kvt_sim_engine_core_destroy(kvt_sim_engine_core_t **self_p);

//  Starts the replay: the first Schedule at the first arrival, or EXIT for
//  an empty workload. -1 when already started or out of memory.
int kvt_sim_engine_core_start(kvt_sim_engine_core_t *self, kvt_sim_engine_out_t *out);

//  The scheduler's plan. -1 (note says why) when no plan was awaited or it
//  is for another step, or out of memory.
int kvt_sim_engine_core_plan(kvt_sim_engine_core_t *self, const kvt_step_plan_t *plan,
                             kvt_sim_engine_out_t *out);

//  A rank's StepDone (the shell has checked that it came from that rank's
//  runner). -1 when no step runs, it is for another step or rank, or that
//  rank already answered. Ids in wrong[] that name no request are counted
//  (bad_wrong_ids) and noted: a wrong report fails the run.
int kvt_sim_engine_core_done(kvt_sim_engine_core_t *self, const kvt_step_done_t *done,
                             kvt_sim_engine_out_t *out);

//  After STATS: how many actors were asked (0: the result is final now).
void kvt_sim_engine_core_stats_asked(kvt_sim_engine_core_t *self, uint32_t asked,
                                     kvt_sim_engine_out_t *out);

//  A Stats reply (request = false) from an actor; EXIT after the last one.
//  Replies at any other time are ignored.
int kvt_sim_engine_core_stats(kvt_sim_engine_core_t *self, const kvt_stats_t *stats,
                              kvt_sim_engine_out_t *out);

//  Whether a finished run was saturated: the engine gave its last first
//  token more than 10 s and more than a tenth of the arrival span after the
//  last arrival.
bool kvt_sim_engine_saturated(uint64_t drain_us, uint64_t span_us);

//  The instances a saturated run should try: enough that the steps it
//  modelled (busy_us over every instance) fill at most 60 % of the arrival
//  span, and more than the `instances` it ran; at most 64.
uint32_t kvt_sim_engine_instances_for(uint64_t busy_us, uint64_t span_us, uint32_t instances);

//  The modelled clock (µs on the trace clock).
uint64_t kvt_sim_engine_core_clock(const kvt_sim_engine_core_t *self);

#endif
