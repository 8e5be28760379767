/*  kvt_sim_engine — the simulated engine that drives a replay: a thin actor
    shell over kvt_sim_engine_core.

    It starts the core on a timer, sends what the core returns (Schedule to
    the scheduler, StepExec to every rank's runner, Stats requests to every
    actor in stats_from), feeds it every StepPlan, StepDone (after checking
    that it came from that rank's runner) and Stats reply, logs its notes,
    and exits the system when the core says the replay is over. When it
    cannot go on (a send fails, the core runs out of memory) it writes why
    into the result and exits with KVT_SIM_ENGINE_EXIT_FAILED rather than
    wait for a message that will never come. It takes a Stats reply only
    from an actor it asked, once, under that actor's own name (others are
    dropped and counted). The
    modelled clock, admission on it, the cost model and the TTFT percentiles
    are the core's (see kvt_sim_engine_core.h); they are the same under both
    drivers and independent of how fast the replay itself runs.

    Paced (args.pace), the engine sends a Schedule no earlier on the
    driver's clock than the start plus the modelled time the core's clock
    has advanced since its first Schedule: a step then spends its modelled
    duration on the clock the lanes, the aggregator and the scheduler's
    timers run on, so a save or a load takes in modelled time what it takes
    on that clock. Unpaced, the engine starts the next step as soon as the
    last one ended and a step spends only the driver's time of its messages
    and forward (tens of microseconds under SIM against milliseconds
    modelled). The pacing only delays sends; the core's clock, and so
    admission and TTFT, are the core's either way. */
#ifndef KVT_SIM_ENGINE_H_INCLUDED
#define KVT_SIM_ENGINE_H_INCLUDED

#include <stdint.h>

#include "kvt_workload.h"
#include "kvtier/kvt_actor.h"
#include "replay/kvt_sim_engine_core.h"

//  Called every 64 steps with the result so far (finished, rejected,
//  hit and input tokens count up as the run goes) and the modelled clock.
typedef void(kvt_sim_engine_progress_fn)(void *arg, const kvt_sim_engine_result_t *so_far,
                                         uint64_t clock_us);

//  The report's sampler: called after every step with the result so far
//  and the modelled clock, and once with `final` when the workload has
//  ended (before the counters round). It must not change the run.
typedef void(kvt_sim_engine_sample_fn)(void *arg, const kvt_sim_engine_result_t *so_far,
                                       uint64_t clock_us, bool final);

typedef struct {
    const kvt_workload_t *wl;             //  the requests (borrowed)
    uint32_t tp;                          //  ranks: runner.0 .. runner.(tp-1)
    const char *scheduler;                //  scheduler actor name
    const char *const *stats_from;        //  actors asked for counters at the end (NULL-terminated)
    kvt_cost_cfg_t cost;                  //  cost model (prefill_tps 0: dense defaults at tp)
    uint32_t max_arrival_bytes;           //  token bytes per Schedule message (default 4 MiB)
    kvt_sim_engine_result_t *out;         //  where results go (owned by the caller)
    kvt_sim_engine_progress_fn *progress; //  NULL: none
    void *progress_arg;                   //  its argument
    kvt_sim_engine_sample_fn *sample;     //  NULL: none
    void *sample_arg;                     //  its argument
    kvt_ledger_t *ledger;                 //  the loss ledger, fed every plan (NULL: none)
    uint32_t closed_loop;   //  C > 0: C requests in flight (kvt_sim_engine_core_cfg_t)
    uint32_t fault_abort;   //  testing fault: one request in N is aborted (0 = off)
    uint32_t fault_preempt; //  testing fault: one request in N is preempted (0 = off)
    bool pace;              //  each Schedule waits on the driver's clock until the modelled
                            //  time since the start has passed on it (one clock for the
                            //  engine and the data path); false: sent at once
} kvt_sim_engine_args_t;

//  Exit code of a run the engine stopped because it could not go on (a send
//  failed, out of memory; the result's error says why).
#define KVT_SIM_ENGINE_EXIT_FAILED 3

//  The actor class.
extern const kvt_actor_class_t kvt_sim_engine_class;

#endif
