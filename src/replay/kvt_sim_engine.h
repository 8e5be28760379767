/*  kvt_sim_engine — the simulated engine core that drives a replay.

    It admits the workload's requests in arrival order on a modelled clock
    (the trace clock), steps the batch — Schedule to the scheduler, the plan
    to every rank's runner as StepExec, and the next Schedule once every rank
    answered StepDone — and stops when every request finished: it then asks
    every actor for its counters, records them, and exits the system.

    The modelled clock advances by a cost model per step (a fixed cost plus
    a cost per computed token); when nothing runs it jumps to the next
    arrival. It is the same under both drivers and independent of how fast
    the replay itself runs; TTFT percentiles are measured on it. */
#ifndef KVT_SIM_ENGINE_H_INCLUDED
#define KVT_SIM_ENGINE_H_INCLUDED

#include <stdint.h>

#include "kvt_workload.h"
#include "kvtier/kvt_actor.h"

typedef struct {
    char actor[KVT_MSG_MAX_NAME + 1]; //  reporting actor
    kvt_counter_t c;                  //  counter name and value
} kvt_sim_engine_counter_t;

//  What a replay measured. Filled by the engine before it exits.
typedef struct {
    uint64_t requests;        //  requests in the workload
    uint64_t finished;        //  requests that generated all their tokens
    uint64_t rejected;        //  requests the scheduler refused
    uint64_t input_tokens;    //  prompt tokens of finished requests
    uint64_t hbm_hit_tokens;  //  prompt tokens served from HBM
    uint64_t tier_hit_tokens; //  prompt tokens restored from the tier (verdict ok)
    uint64_t disk_hit_tokens; //  ... of them, tokens some rank read from its disk tier
    uint64_t loads_ok;        //  load verdicts ok
    uint64_t loads_failed;    //  load verdicts failed (retreats)
    uint64_t wrong_resumes;   //  requests whose restored bytes differed from a recompute
    uint64_t steps;           //  steps run
    uint64_t steps_failed;    //  step reports with ok = false
    uint64_t model_time_us;   //  modelled clock at the end
    double ttft_p50_ms;       //  time to first token, modelled (ms)
    double ttft_p90_ms;       //  ...
    double ttft_p99_ms;       //  ...
    bool done;                //  the engine reached the end of the workload
    kvt_sim_engine_counter_t
        *counters;         //  every actor's counters (owned; kvt_sim_engine_result_clear)
    uint32_t ncounters;    //  entries in counters
    uint32_t counters_cap; //  allocated entries
} kvt_sim_engine_result_t;

typedef struct {
    const kvt_workload_t *wl;      //  the requests (borrowed)
    uint32_t tp;                   //  ranks: runner.0 .. runner.(tp-1)
    const char *scheduler;         //  scheduler actor name
    const char *const *stats_from; //  actors asked for counters at the end (NULL-terminated)
    uint64_t step_base_us;         //  cost model: fixed cost of a step (default 4000)
    uint64_t token_ns;             //  cost model: per computed token (default 40000)
    uint32_t max_arrival_bytes;    //  token bytes per Schedule message (default 4 MiB)
    kvt_sim_engine_result_t *out;  //  where results go (owned by the caller)
} kvt_sim_engine_args_t;

//  Appends a counter; returns 0 or -1 when out of memory.
int kvt_sim_engine_result_add(kvt_sim_engine_result_t *self, const char *actor, const char *name,
                              uint64_t value);

//  Frees the counters and zeroes the result.
void kvt_sim_engine_result_clear(kvt_sim_engine_result_t *self);

//  The actor class.
extern const kvt_actor_class_t kvt_sim_engine_class;

#endif
