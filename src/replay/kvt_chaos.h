/*  kvt_chaos — seeded fault sweeps over small replays under the SIM driver
    (`kvtier chaos`, docs/reliability.md#chaos).

    One run is (plan, seed, model): everything it does — the workload, the
    delivery order, which channel a fault hits, when, how often, which rank
    crashes, which disk file is damaged — is drawn from the seed, so the
    same triple replays the same run, event for event (kvt_chaos_command
    prints it). A run is a kvt_replay_run whose SIM loop (sim_run) arms the
    plan's faults between slices of virtual time, then checks:

    * no wrong resume, every request ended, the replay's own judgement
      (quiescent scheduler and audit, no open aggregator key, no lease, pin
      or reservation in any pool, no runtime error, no failed step);
    * forward progress: the longest modelled stretch in which requests
      waited and nothing ran, loaded or saved stays under stall_bound_us,
      and the run ends within an event budget (a livelock is a wedge);
    * counters agree: aborts (preempts) the engine sent = the scheduler's
      aborted (preempted) + refused, the aborted requests the engine saw end
      = the scheduler's aborted; loads dispatched = ok + failed + reclaimed, saves
      dispatched = ok + failed, state loads dispatched = completed + failed
      + abandoned, nothing outstanding, orphaned, pending or unreported;
    * no disk temporary left in a disk tier's directory. */
#ifndef KVT_CHAOS_H_INCLUDED
#define KVT_CHAOS_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    KVT_CHAOS_NONE = 0,      //  no fault: the baseline the bounds are checked on
    KVT_CHAOS_DROP,          //  product messages lost (specs, lookups, touches, completions)
    KVT_CHAOS_DUPLICATE,     //  ... delivered twice
    KVT_CHAOS_DELAY,         //  ... delivered late (FIFO on the channel kept)
    KVT_CHAOS_REORDER,       //  one rank's completions late: ranks' reports interleave
    KVT_CHAOS_LOST_VERDICT,  //  a verdict from the aggregator to the scheduler lost
    KVT_CHAOS_CRASH_LOAD,    //  a worker crashes with a load in flight, restarts later
    KVT_CHAOS_CRASH_SAVE,    //  a worker crashes with a save in flight, restarts later
    KVT_CHAOS_EVICT,         //  a CPU tier of a few chunks: evictions race lookups and loads
    KVT_CHAOS_DISK_TRUNCATE, //  disk tier files truncated under the store
    KVT_CHAOS_DISK_CORRUPT,  //  ... a byte flipped
    KVT_CHAOS_DISK_DELETE,   //  ... deleted
    KVT_CHAOS_TINY_POOL,     //  a CPU pool smaller than one chunk
    KVT_CHAOS_MIX,           //  two to four of the plans above at once (not lost-verdict),
                             //  or abort and preempt
    KVT_CHAOS_LATE_SPEC,     //  a load spec reaches one worker after the aggregator timed
                             //  its key out (open defect: docs/reliability.md#chaos)
    KVT_CHAOS_LANE_STALL,    //  a lane's stream stalls past the lane deadline, then clears
    KVT_CHAOS_ABORT,         //  the engine aborts one request in 3..6, in every phase in turn
    KVT_CHAOS_PREEMPT,       //  the engine preempts one request in 3..6, likewise
    KVT_CHAOS_PLANS          //  one past the last plan
} kvt_chaos_plan_t;

//  The plan's name (`drop`, `lost-verdict`, ...); "?" when out of range.
const char *kvt_chaos_plan_name(kvt_chaos_plan_t plan);

//  The plan named `name`; -1 when none is.
int kvt_chaos_plan_parse(const char *name, kvt_chaos_plan_t *plan);

typedef struct {
    kvt_chaos_plan_t plan;   //  the fault plan
    uint64_t seed;           //  draws everything
    bool hybrid;             //  a hybrid model (state slots, checkpoints, images)
    uint32_t tp;             //  ranks (0 = drawn, 2 or 3; at most 3)
    uint64_t stall_bound_us; //  forward-progress bound on the modelled clock (0 = default)
    const char *tmp_dir;     //  where disk tiers go (NULL = $TMPDIR or /tmp)
    const char *record;      //  record the run's deliveries here (NULL = no)
    int log_level;           //  the replay's log level (default 0)
} kvt_chaos_cfg_t;

#define KVT_CHAOS_STALL_BOUND_US 20000000ull //  20 s of modelled time

typedef struct {
    bool failed;             //  a check failed (why says which)
    char why[1024];          //  every failed check, one per line ("" when it passed)
    uint32_t plans;          //  bit i: plan i was armed (MIX: several)
    uint64_t faults;         //  faults injected (messages hit, crashes, files damaged)
    uint64_t requests;       //  requests replayed
    uint64_t wrong_resumes;  //  wrong resumes
    uint64_t max_stall_us;   //  longest modelled stall
    uint64_t loads;          //  loads dispatched
    uint64_t loads_failed;   //  of them failed
    uint64_t saves_expired;  //  saves settled failed at the save deadline (no verdict)
    uint64_t events;         //  SIM deliveries + timers
    uint64_t trace_hash;     //  SIM trace hash (the same triple gives the same one)
    uint64_t aborts;         //  aborts the engine sent (abort plan; in faults)
    uint64_t preempts;       //  preempts the engine sent (preempt plan; in faults)
    uint64_t fault_phase[5]; //  of those, by the phase they hit (KVT_SIM_PHASE_*)
    bool wedged;             //  the event budget ran out, or the engine never ended
    char desc[768];          //  what the plan did: rules and their hits, crash, damage
} kvt_chaos_result_t;

//  Runs one (plan, seed, model). 0 when the run could be made (result
//  says whether it passed), -1 when it could not be set up (err says why).
int kvt_chaos_run(const kvt_chaos_cfg_t *cfg, kvt_chaos_result_t *result, char *err, size_t errlen);

//  The one command that replays cfg's run exactly (kvtier chaos ...).
void kvt_chaos_command(const kvt_chaos_cfg_t *cfg, char *out, size_t len);

#endif
