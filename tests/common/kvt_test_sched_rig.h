/*  kvt_test_sched_rig — the scheduler core driven directly (no actors), as
    an engine drives it, shared by the core's test binaries (test_sched,
    test_admit, test_loadtrack, test_lookups, test_saves, test_sched_hold).
    A step plans, records what the plan asks and queues a verdict for each
    of its lookups, load legs and chunk saves: ok, or failed for the kinds
    the test sets to fail; rig_deliver hands the queued verdicts to the
    core. Only the core's public API (kvtier/kvt_sched.h). Test code: it
    asserts (Criterion). */
#ifndef KVT_TEST_SCHED_RIG_H_INCLUDED
#define KVT_TEST_SCHED_RIG_H_INCLUDED

#include <stdbool.h>
#include <stdint.h>

#include "base/kvt_namespace.h"
#include "kvtier/kvt_sched.h"

#define BS              16   //  rig_init's block size (tokens)
#define CS              64   //  rig_init's chunk size (tokens)
#define P_BASE          500  //  first token of joint_setup's shared prompt
#define RIG_MAX_PENDING 4096 //  verdicts queued at most
#define RIG_MAX_STORED  8192 //  chunk keys the ranks hold at most

typedef struct {
    kvt_sched_t *s;                         //  the core
    kvt_step_plan_t plan;                   //  last plan
    uint64_t step;                          //  step counter
    kvt_verdict_t pending[RIG_MAX_PENDING]; //  verdicts the test will deliver
    uint32_t npending;                      //  entries in pending
    bool fail_loads;                        //  make load verdicts fail (MISS)
    bool fail_saves;                        //  make save verdicts fail
    uint32_t loads_seen;                    //  loads planned
    uint32_t saves_seen;                    //  chunk saves planned
    uint32_t verify_entries;                //  entries with verify_end > 0
    uint32_t admit_hbm;                     //  sum of ADMIT a
    uint32_t admit_tier;                    //  sum of ADMIT b
    uint32_t loaded;                        //  LOADED events
    uint32_t retreats;                      //  RETREAT events
    uint32_t finished;                      //  FINISH events
    uint32_t max_attempt;                   //  highest save attempt seen
    bool fail_state;                        //  make state-leg verdicts fail (MISS)
    uint32_t takes[64];                     //  boundaries of the checkpoints planned (first 64)
    uint32_t ntakes;                        //  TAKE ops seen
    uint32_t restores;                      //  RESTORE ops seen
    uint32_t state_loads;                   //  LOAD (state leg) ops seen
    kvt_hash_t stored[RIG_MAX_STORED]; //  chunk keys the ranks hold (ok save verdicts delivered)
    uint32_t nstored;                  //  entries in stored
    uint32_t lookups_seen;             //  Lookups planned
    uint32_t releases_seen;            //  LookupReleases planned
    uint32_t pins_used;                //  loads planned with LoadSpec.lookup
    bool lose_lookups;                 //  plan lookups get no verdict
} rig_t;

// ------------------------------------------------------------ the core ----

//  A core of BS-token blocks and CS-token chunks, 8 running at most, 256
//  tokens a step, one save retry; lookups pin (TTL 500 ms) when pin is set.
void rig_init_pin(rig_t *r, uint32_t hbm_blocks, uint32_t tier_chunks, bool pin);

//  rig_init_pin without a pin.
void rig_init(rig_t *r, uint32_t hbm_blocks, uint32_t tier_chunks);

//  A core of the configuration given.
void rig_init_cfg(rig_t *r, const kvt_sched_cfg_t *cfg);

//  A hybrid model's configuration: blocks of bs tokens, chunks of cs, a
//  checkpoint every interval tokens, 16 HBM checkpoints, 4 running at most.
kvt_sched_cfg_t hybrid_cfg(uint32_t bs, uint32_t cs, uint32_t interval, uint32_t hbm_blocks,
                           uint32_t tier_chunks);

//  Seed 002 on the scheduler, block 4 / chunk 16: request C leaves chunks
//  [0, 32) with images at 16 and 32 in the tier, X (x_len tokens) evicts C
//  from HBM past its first chunk, A (the first 20 tokens) leaves a 20-token
//  HBM hit with its checkpoint.
void joint_setup(rig_t *r, uint32_t hbm_blocks, uint32_t x_len);

// ------------------------------------------------------------ requests ----

//  Request id arrives with the n tokens base, base + 1, ... (asserted
//  accepted).
void rig_arrive(rig_t *r, uint64_t id, uint32_t n, uint32_t base, uint32_t max_new);

//  Request id arrives with the n tokens t (asserted accepted).
void rig_arrive_tokens(rig_t *r, uint64_t id, const uint32_t *t, uint32_t n, uint32_t max_new);

// --------------------------------------------------------------- steps ----

//  One step: plan, record what the plan asks, queue verdicts for its loads
//  and saves. Returns the plan's return code.
int rig_step_once(rig_t *r);

//  One step as the engine sees it. A plan that only sends lookups has
//  their answers delivered at once and the next step planned, so the tests
//  look at the plan that admits (the lookup tests step once).
int rig_step(rig_t *r);

//  Delivers the queued verdicts; an ok save verdict's key is then held by
//  the ranks (what later lookups find).
void rig_deliver(rig_t *r);

//  Runs until idle, delivering verdicts and auditing after every step.
void rig_run(rig_t *r, uint32_t max_steps);

// ------------------------------------------------------------- reading ----

//  True when the ranks hold chunk key k.
bool rig_holds(const rig_t *r, kvt_hash_t k);

//  The ranks' answer to a lookup: leading keys held (as the aggregator
//  settles it).
uint32_t rig_held(const rig_t *r, const kvt_lookup_t *l);

//  The core's audit holds (asserted).
void rig_audit(const rig_t *r);

//  A named counter of the core (kvt_sched_counters); asserts it exists.
uint64_t counter(const rig_t *r, const char *name);

//  The core's stats.
kvt_sched_stats_t o_stats(const rig_t *r);

//  The plan goes out as a StepPlan message: it must encode and decode back.
void plan_round_trips(const kvt_step_plan_t *plan);

//  The source_safe verdict of a planned SaveSpec (keyed by its last chunk).
kvt_verdict_t safe_of(const kvt_save_spec_t *sp, bool ok);

#endif
