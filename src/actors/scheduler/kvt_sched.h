/*  kvt_sched — the scheduler's core: requests, their block tables, admission
    with HBM and tier hits, loads on the chunk grid, saves with leases, and
    the step plan. Pure: no I/O, no clock, no threads; the scheduler actor
    decodes messages, calls these functions and sends what they return.

    Lifecycle of a request:
      WAITING  → admitted when its blocks fit (FIFO)
      LOADING  → its tier load is out; parked until the load verdict
      RUNNING  → computes prefill chunks, then one token per step
      DONE     → generated max_new_tokens; blocks released; the record is
                 freed once its last save verdict arrived

    A step: kvt_sched_plan (step N) is called once step N-1 ran on every rank.
    It first applies step N-1 (tokens computed, full blocks indexed, finished
    requests retired with their last saves), then emits saves for chunks that
    are now complete, admits waiting requests, and lists the tokens each
    running request computes in step N. Saves are built one step after the
    forward that completed their chunk, so they only read written KV. */
#ifndef KVT_SCHED_H_INCLUDED
#define KVT_SCHED_H_INCLUDED

#include <stdbool.h>
#include <stdint.h>

#include "kvtier/kvt_msg.h"

typedef struct _kvt_sched_t kvt_sched_t;

typedef struct {
    uint32_t block_size;   //  tokens per block (default 16)
    uint32_t chunk_size;   //  tokens per chunk (default 256, multiple of block_size)
    uint32_t hbm_blocks;   //  device blocks per rank
    uint32_t tier_chunks;  //  chunks the tier view holds (0 = no tier)
    uint32_t max_running;  //  requests admitted at once (running + loading)
    uint32_t step_tokens;  //  token budget per step
    uint32_t save_retries; //  re-emits of a failed chunk save per request
    kvt_hash_t ns;         //  namespace: seeds the prefix hash chain
} kvt_sched_cfg_t;

typedef struct {
    uint64_t arrivals;         //  requests received
    uint64_t rejected;         //  requests refused at arrival (too long for the pool, duplicate id)
    uint64_t admitted;         //  requests admitted
    uint64_t finished;         //  requests that generated all their tokens
    uint64_t hbm_hit_tokens;   //  prompt tokens served from HBM blocks
    uint64_t tier_hit_tokens;  //  prompt tokens restored from the tier (verdict ok)
    uint64_t lower_hit_tokens; //  ... of which some rank read from below the CPU pool (disk)
    uint64_t loads_dispatched; //  loads sent to the ranks
    uint64_t loads_ok;         //  load verdicts ok
    uint64_t loads_failed;     //  load verdicts failed (request retreated)
    uint64_t saves_dispatched; //  chunk saves sent to the ranks
    uint64_t saves_ok;         //  chunk save verdicts ok (indexed)
    uint64_t saves_failed;     //  chunk save verdicts failed
    uint64_t saves_reemitted;  //  failed chunk saves emitted again
    uint64_t saves_skipped;    //  complete chunks not saved because the tier holds them
    uint64_t stale_verdicts;   //  verdicts for an unknown or superseded operation
    uint64_t stale_schedules;  //  Schedules for a step already planned or not next (refused)
    uint64_t steps_failed;     //  steps that did not run on every rank (rolled back)
    uint64_t saves_stopped;    //  requests that stopped saving after a failure with no retry left
    uint64_t hbm_lost_tokens;  //  HBM hit tokens lost when a failed load retreated below the hit
    uint64_t plan_deferred;  //  entries / admissions / saves left for the next step (message size)
    uint64_t steps;          //  plans built
    uint64_t tokens_planned; //  tokens listed in plans
    uint32_t waiting;        //  gauge: requests waiting for admission
    uint32_t running;        //  gauge: requests running
    uint32_t loading;        //  gauge: requests parked on a load
    uint32_t saves_outstanding; //  gauge: chunk saves without a verdict
    uint32_t leased_blocks;     //  gauge: block references held by saves
    uint32_t blocks_in_use;     //  gauge: blocks with a reference
    uint32_t records;           //  gauge: request records alive (incl. DONE with saves out)
} kvt_sched_stats_t;

//  Validates cfg; on error returns NULL and writes a message naming the
//  setting into err.
kvt_sched_t *kvt_sched_new(const kvt_sched_cfg_t *cfg, char *err, size_t errlen);
void kvt_sched_destroy(kvt_sched_t **self_p);

//  Adds a request. Copies the tokens. Returns 0, or -1 when the request is
//  refused (duplicate id, longer than the block pool can ever hold): then a
//  FINISH event with b = 0 is queued so the engine still hears about it.
int kvt_sched_arrive(kvt_sched_t *self, const kvt_arrival_t *arrival);

//  Builds the plan for `step` (see above). Steps are numbered 1, 2, ...; a
//  plan is built once per step, so a repeated or out-of-order Schedule is
//  refused (-2) and changes nothing. `prev_failed`: step - 1 did not run on
//  every rank, so none of its tokens count (they are planned again). The
//  plan's arrays stay valid until the next call. Returns 1 when the plan
//  carries work (entries, loads or saves), 0 when it is empty (plan->idle
//  when nothing is waiting or outstanding either), -1 when it is empty but
//  loads or saves are outstanding — the caller should hold its reply until a
//  verdict arrives and call again with the same step.
#define KVT_SCHED_HOLD    (-1)
#define KVT_SCHED_REFUSED (-2)
int kvt_sched_plan(kvt_sched_t *self, uint64_t step, bool prev_failed, kvt_step_plan_t *plan);

//  Applies a verdict. Returns 0, or -1 when it was stale (counted).
int kvt_sched_verdict(kvt_sched_t *self, const kvt_verdict_t *verdict);

//  True when no request, load or save is left (every block free).
bool kvt_sched_quiescent(const kvt_sched_t *self);

//  The step number the next plan must carry.
uint64_t kvt_sched_next_step(const kvt_sched_t *self);

void kvt_sched_stats(const kvt_sched_t *self, kvt_sched_stats_t *out);

//  Appends every counter (scheduler, block manager, tier view) as named
//  counters to c[*n..cap) for a Stats reply.
void kvt_sched_counters(const kvt_sched_t *self, kvt_counter_t *c, uint32_t *n, uint32_t cap);

//  Checks internal invariants (block references = request blocks + leases,
//  gauges match the records). Returns 0, or -1 with a message in err. O(all
//  records): for tests and the end of a replay, not for every event.
int kvt_sched_audit(const kvt_sched_t *self, char *err, size_t errlen);

#endif
