/*  kvt_sched — the scheduler core as a C API an engine embeds directly:
    requests, their block tables, admission with HBM and tier hits, loads on
    the chunk grid, saves with leases, and the step plan. Pure: no I/O, no
    clock, no threads. The scheduler actor (src/actors/scheduler) is a shell
    that decodes messages, calls these functions and sends what they
    return; an engine that wants a library instead calls them itself (see
    docs/api.md).

    Ownership: the core copies what it is given (arrivals' tokens, verdicts,
    configuration); what it returns (plans, state ops, probes' chains,
    request info) is borrowed from the core and valid until the next call
    that changes it, as each function says. The core is not thread-safe:
    one caller at a time.

    The calls an engine makes, in order:
      kvt_sched_new            once (validates the configuration)
      kvt_sched_set_now        per step: the engine's clock (µs)
      kvt_sched_arrive         per new request (queued for admission)
      kvt_sched_probe          optional: what an admission would find now
      kvt_sched_apply          after step N ran (or failed) on every rank
      kvt_sched_plan           step N + 1: admissions, loads, saves, entries
      kvt_sched_plan_state     its state work (hybrid models)
      kvt_sched_verdict        per quorum result of a load leg or a save
      kvt_sched_finish         a request stopped early (end of sequence)
      kvt_sched_abort / _preempt
      kvt_sched_stats / _counters / _audit
      kvt_sched_destroy

    Lifecycle of a request:
      WAITING  → admitted when its blocks fit (FIFO)
      LOADING  → its tier load is out; parked until the load verdict, or
                 load_deadline_us after dispatch (settled failed, TIMEOUT:
                 it retreats); an abort or preemption orphans the load
                 (kvt_sched_abort)
      RUNNING  → computes prefill chunks, then one token per step
      DONE     → generated max_new_tokens; blocks released; the record is
                 freed once its last save verdict arrived (or its save
                 deadline, load_deadline_us after the build, passed: the
                 save settles failed, its sources leased orphan_reclaim_us
                 more)

    A step: kvt_sched_plan (step N) is called once step N-1 ran on every rank.
    It first applies step N-1 (tokens computed, full blocks indexed, finished
    requests retired with their last saves), then emits saves for chunks that
    are now complete, admits waiting requests, and lists the tokens each
    running request computes in step N. Saves are built one step after the
    forward that completed their chunk, so they only read written KV.

    Hybrid models (state_bytes > 0): every admitted request holds a state
    slot; HBM checkpoints are taken (a) every checkpoint_interval tokens,
    (b) at the last chunk boundary of every prompt and at the prompt's end
    when it lies on the block grid (HBM only: no chunk ends there), (c) at
    the last chunk boundary a decode reaches before the request finishes
    (a decode keep); prefill chunks are clipped to end on those boundaries.
    A chunk save whose end holds an HBM checkpoint carries its image. The
    HBM hit is gated to the newest HBM checkpoint at or below the block hit
    and the joint planner chooses the resume point above it (design §4).
    The state-offload index (kvt_stidx) holds which images the tier has and
    owns every state load from its record to its settlement (a KV-only
    load, in any model, is owned by the core's load index, the same type
    with no images). A
    dense model (state_bytes == 0) has no slots, checkpoints or joints. */
#ifndef KVTIER_KVT_SCHED_H_INCLUDED
#define KVTIER_KVT_SCHED_H_INCLUDED

#include <stdbool.h>
#include <stdint.h>

#include "kvt_msg.h"

typedef struct _kvt_sched_t kvt_sched_t;

//  Default orphan reclaim timeout: 60 s, twice the aggregator's 30 s
//  timeout (a load no rank answered settles failed by then) and well above
//  the 5 s fence timeout past which no lane writes a job's destination.
#define KVT_SCHED_ORPHAN_RECLAIM_US 60000000ull
//  The generation of the FINISH event that reports a refused arrival: no
//  admission takes it (admissions count up from 1), so a refused
//  re-arrival of an id still in the core never names that id's live or
//  finished admission.
#define KVT_SCHED_REFUSED_GEN KVT_MSG_MAX_GEN
//  Default load deadline: 60 s after dispatch, above the 5 s fence timeout
//  (no lane writes a job's destination past it, so a load retreated then is
//  not written under the recompute) and the aggregator's 30 s timeout.
#define KVT_SCHED_LOAD_DEADLINE_US 60000000ull
//  Which ranks a tier lookup asks (kvt_sched_cfg_t.lookup_ranks).
typedef enum {
    KVT_SCHED_LOOKUP_ALL = 0,   //  every rank; the tier hit is the minimum of their answers
    KVT_SCHED_LOOKUP_RANK0 = 1, //  rank 0 only (Lookup.rank0_only): one answer, taken as
                                //  every rank's; optimistic where ranks disagree
} kvt_sched_lookup_ranks_t;
//  Which checkpoints a hybrid model takes and which HBM checkpoint goes
//  first when bytes run short (kvt_sched_cfg_t.state_policy; docs/
//  architecture.md, "State policies").
typedef enum {
    KVT_STATE_POLICY_KVTIER = 0,  //  grid, prompt ends, decode keeps and branch points; LRU,
                                  //  or the value rule with value_order
    KVT_STATE_POLICY_INTERVAL,    //  grid, prompt ends, decode keeps; LRU
    KVT_STATE_POLICY_EVERY_CHUNK, // every chunk boundary; LRU
    KVT_STATE_POLICY_MARCONI,     //  branch points and the last decoded chunk; utility =
                                  //  recency + FLOP efficiency (Marconi, MLSys 2025)
    KVT_STATE_POLICIES
} kvt_sched_state_policy_t;

//  The sparsest adaptive grid (kvt_sched_cfg_t.grid_share_pct): a grid
//  checkpoint every 16 chunks.
#define KVT_SCHED_GRID_MAX_CHUNKS 16

typedef struct {
    uint32_t block_size;   //  tokens per block (default 16)
    uint32_t chunk_size;   //  tokens per chunk (default 256, multiple of block_size)
    uint32_t hbm_blocks;   //  device blocks per rank (with block_bytes: the whole HBM budget)
    uint32_t tier_chunks;  //  chunks the tier holds (0 = no tier: no lookups, no saves)
    uint32_t max_running;  //  requests admitted at once (running + loading)
    uint32_t step_tokens;  //  token budget per step
    uint32_t save_retries; //  re-emits of a failed chunk save per request
    //  An orphaned load (its request aborted or preempted mid-load) whose
    //  verdict has not arrived this long after it was orphaned is reclaimed:
    //  its blocks and state slot go back (0 = KVT_SCHED_ORPHAN_RECLAIM_US).
    //  Keep it above the ranks' fence timeout (a lane may write until then)
    //  and the aggregator's timeout (which settles a silent load failed).
    uint64_t orphan_reclaim_us;
    //  Every dispatched load settles within this bound on the core's clock:
    //  one still out this long after its dispatch settles failed (TIMEOUT)
    //  and its request retreats (0 = KVT_SCHED_LOAD_DEADLINE_US). Keep it
    //  above the ranks' fence timeout, like orphan_reclaim_us.
    uint64_t load_deadline_us;
    kvt_hash_t ns; //  namespace: seeds the prefix hash chain
    //  Hybrid models (state_bytes > 0); a dense model ignores the rest.
    uint64_t state_bytes;         //  recurrent state per request per rank (0 = dense model)
    uint32_t checkpoint_interval; //  tokens between grid checkpoints (multiple of chunk_size)
    uint32_t hbm_checkpoints;     //  HBM checkpoints the state pool holds (0 = 4 × max_running);
                                  //  ignored with block_bytes
    //  Device bytes of one block (every layer and plane). With state_bytes
    //  it makes hbm_blocks × block_bytes one budget (kvt_sched_hbm_split):
    //  the max_running state slots first, then KV blocks and HBM
    //  checkpoints sharing the rest, evicted by one rule. 0: the
    //  checkpoints are a separate pool of hbm_checkpoints units.
    uint64_t block_bytes;
    uint32_t spec_tokens;      //  speculative tokens per step (> 0: a hit leaves 2 tokens)
    uint32_t min_load_tokens;  //  a joint gaining fewer tokens than this recomputes
    bool interval_checkpoints; //  only (a), the interval grid: no prompt-end (b) or decode
                               //  keep (c) checkpoints (false, the default: all three)
    kvt_sched_state_policy_t state_policy; //  checkpoint sources and HBM checkpoint order
    //  KVTIER: the grid follows the HBM budget's pressure: each plan takes
    //  grid checkpoints every chunk x 2^k tokens (k up to 4: at most
    //  KVT_SCHED_GRID_MAX_CHUNKS chunks), the smallest such interval at
    //  which the active requests' prompts' grid checkpoints fit in this
    //  percent of the checkpoints the tiers hold: the HBM units plus, with
    //  block_bytes and state images in the tier (no_state_tier false), the
    //  images tier_chunks chunks' bytes would hold (0, or with
    //  interval_checkpoints: the fixed grid every checkpoint_interval tokens).
    uint32_t grid_share_pct;
    bool value_order; //  KVTIER: HBM checkpoints go by the value rule (GDSF), not LRU
    //  Tier lookups (tier_chunks > 0): the tier hit of an admission comes
    //  from a Lookup to the ranks, settled by the aggregator as the minimum
    //  over them (or rank 0's answer alone, lookup_ranks = RANK0).
    uint64_t lookup_timeout_us; //  a lookup unanswered this long falls back to the HBM hit
                                //  (0 = 1 s)
    bool lookup_pin;            //  pin what a lookup found until the load that uses it
    uint32_t lookup_ttl_ms;     //  the pin's lease on the ranks (0 = the worker's default)
    kvt_sched_lookup_ranks_t lookup_ranks; //  ranks a lookup asks (default ALL)
    uint64_t lookup_max_age_us; //  a settled lookup older than this when its request is still
                                //  waiting is asked again, its pin released (0 = 1 s; a pinned
                                //  one also once its lookup_ttl_ms passed)
    //  Touches and the verify hold (hybrid models, rules I5, I6).
    uint64_t cpu_pool_bytes;     //  per rank: sets the verified window (kvt_stidx_window_us;
                                 //  0 = its 5 s floor)
    uint64_t hold_bound_us;      //  a verify hold ends this long after its first hold (0 = 2 s)
    uint64_t verified_window_us; //  an image confirmed within it needs no hold (0 = derived
                                 //  from cpu_pool_bytes)
    bool no_state_tier; //  state images stay out of the tier: chunks are saved without them
                        //  and only HBM checkpoints resume (the state_tier setting off)
    void (*log)(void *arg, const char *line); //  the state index's warnings (may be NULL)
    void *log_arg;                            //  passed to log
} kvt_sched_cfg_t;

//  How one HBM budget of `hbm_blocks` blocks of `block_bytes` splits for a
//  hybrid model with `state_bytes` per state and `slots` state slots: the
//  slots are reserved first, each taking ckpt_blocks blocks; KV blocks and
//  HBM checkpoints share the kv_blocks left, a checkpoint taking
//  ckpt_blocks of them; ckpt_units is the most checkpoints that share can
//  hold (the device's checkpoint units). The scheduler and the device use
//  this one computation.
typedef struct {
    uint32_t ckpt_blocks; //  blocks one state (slot or checkpoint) takes: ⌈state / block⌉
    uint32_t slot_blocks; //  blocks the slots take, reserved first
    uint32_t kv_blocks;   //  blocks KV and checkpoints share (the block manager's)
    uint32_t ckpt_units;  //  most checkpoints the share holds: kv_blocks / ckpt_blocks
} kvt_sched_hbm_split_t;

//  Fills *out; returns 0, or -1 (with err naming both sizes) when the
//  slots leave fewer than `min_kv_blocks` for KV.
int kvt_sched_hbm_split(uint32_t hbm_blocks, uint64_t block_bytes, uint64_t state_bytes,
                        uint32_t slots, uint32_t min_kv_blocks, kvt_sched_hbm_split_t *out,
                        char *err, size_t errlen);

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
    uint64_t saves_skipped;    //  complete chunks not saved: a save of the key was in flight
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
    uint32_t saves_outstanding;  //  gauge: chunk saves without a verdict
    uint32_t leased_blocks;      //  gauge: block references held by save leases
    uint32_t blocks_in_use;      //  gauge: blocks with a reference
    uint32_t records;            //  gauge: request records alive (incl. DONE with saves out)
    uint64_t aborted;            //  requests aborted by the engine
    uint64_t preempted;          //  requests preempted (back to waiting, recomputed)
    uint64_t loads_orphaned;     //  loads whose request was aborted or preempted mid-load
    uint64_t loads_reclaimed;    //  orphaned loads freed by orphan_reclaim_us (no verdict)
    uint32_t load_orphans;       //  gauge: orphaned loads still holding blocks or a slot
    uint64_t loads_timed_out;    //  loads settled failed (TIMEOUT) at load_deadline_us
    uint64_t load_late_verdicts; //  verdicts of a timed-out load, dropped
    uint64_t loads_drained;      //  timed-out loads held until no rank could still write them
    uint64_t saves_expired;      //  saves settled failed at load_deadline_us after their build
    uint64_t saves_drained;      //  expired saves whose sources were held orphan_reclaim_us more
    uint64_t save_late_verdicts; //  verdicts of an expired save, dropped
    uint64_t save_late_images;   //  of those, ok store verdicts whose image the index learnt
    //  Hybrid admissions (design §4); all zero for a dense model.
    uint64_t gate_lost_tokens;      //  block-hit tokens above the gated HBM hit (no checkpoint)
    uint64_t joint_state_hbm;       //  joint boundaries whose state comes from HBM
    uint64_t joint_state_tier;      //  joint boundaries whose state comes from the tier
    uint64_t tier_within_hbm;       //  no joint: no KV reaches past the HBM hit
    uint64_t no_rung_above_hbm;     //  no joint: no checkpoint above the HBM hit
    uint64_t partial_chunk_no_room; //  joint skipped, HBM hit kept: its extra blocks did not fit
    uint64_t no_probe_demand;       //  joint skipped: the probe carried no demand
    uint64_t below_min_load;        //  joint skipped: gain below min_load_tokens
    uint64_t retreats_to_hbm;       //  failed joints resumed at the gated HBM hit
    uint64_t retreats_to_zero;      //  failed joints resumed at token 0 (no HBM hit)
    uint64_t convoy_waits;          //  admissions that waited for another request's load
    uint64_t state_restores;        //  HBM checkpoints restored into a slot
    uint64_t state_loads;           //  state legs dispatched (tier image → slot)
    uint64_t ckpt_takes;            //  checkpoints planned (interval, prompt end, decode keep)
    uint64_t state_tax_tokens;      //  per admission: max (block hit, tier KV hit) − resume point
    uint64_t grid_interval;         //  gauge: the grid interval of the last plan with active
                                    //  requests (tokens; 0: the fixed grid, or a dense model)
    uint64_t grid_thinned;          //  plans whose grid was sparser than checkpoint_interval
    uint64_t state_resumes;         //  admissions where KV alone could have resumed (> 0)
    //  Tier lookups.
    uint64_t lookups_sent;     //  Lookups put into plans
    uint64_t lookup_timeouts;  //  lookups not settled within lookup_timeout_us (HBM hit used)
    uint64_t lookup_failed;    //  lookup verdicts that failed (no tier hit)
    uint64_t lookup_releases;  //  LookupReleases put into plans (a pin no load used)
    uint64_t lookup_pins_used; //  loads that released their lookup's pin (LoadSpec.lookup)
    uint64_t lookup_refreshes; //  settled lookups asked again: too old for a request still waiting
    uint32_t lookups_out;      //  gauge: lookups without a verdict
    uint64_t touches_planned;  //  Touches put into plans (a tier hit voting for an image)
    uint64_t verify_holds;     //  admission passes held for a touch verdict (I6)
} kvt_sched_stats_t;

//  The admission probe of one request (rule B1): the hit, the chain it
//  walked and, only when the fit passed, the demand. Every probe starts
//  from a reset probe, so a refused re-probe never carries an earlier
//  demand.
typedef struct {
    uint64_t req;            //  the request probed
    uint32_t block_hit;      //  ungated HBM block hit (tokens)
    uint32_t hbm;            //  HBM hit gated to a checkpoint (hybrid; = block_hit when dense)
    const kvt_hash_t *chain; //  the prefix hashes walked (borrowed from the request)
    uint32_t nchain;         //  blocks walked
    bool has_demand;         //  the fit passed
    uint32_t num_new_blocks; //  blocks an admission at hbm takes (valid with has_demand)
} kvt_sched_probe_t;

//  State work of a plan (hybrid models): what the runner does to state
//  slots and HBM checkpoints in that step. A LOAD op duplicates the state
//  leg its LoadSpec carries (state, state_boundary, state_hash,
//  state_slot); RESTORE and TAKE are device copies within the rank. An
//  entry that starts at token 0 starts from a zero state.
typedef enum {
    KVT_SCHED_STATE_RESTORE = 1, //  before the forward: checkpoint `entry` → `slot`
    KVT_SCHED_STATE_LOAD = 2,    //  the state leg of a load: tier image `key` → `slot`
                                 //  (reported on the state channel, op and key)
    KVT_SCHED_STATE_TAKE = 3,    //  after the forward: `slot` → checkpoint `entry`
} kvt_sched_state_kind_t;

typedef struct {
    kvt_opid_t op;  //  request and generation
    uint8_t kind;   //  kvt_sched_state_kind_t
    uint32_t slot;  //  the request's state slot
    uint32_t entry; //  checkpoint entry (RESTORE, TAKE; UINT32_MAX for LOAD)
    uint32_t at;    //  boundary (tokens) the state belongs to
    kvt_hash_t key; //  prefix hash at `at`
} kvt_sched_state_op_t;

//  A request as the core sees it (tests, the embedding engine).
typedef struct {
    uint8_t state;          //  1 waiting, 2 loading, 3 running, 4 done (saves out)
    uint32_t gen;           //  generation of the current admission
    uint32_t computed;      //  tokens whose KV (and state) is valid
    uint32_t hbm_hit;       //  HBM hit at admission (gated for a hybrid request)
    uint32_t block_hit;     //  ungated HBM block hit at admission
    uint32_t load_floor;    //  first token of the load (claim), when loading
    uint32_t load_end;      //  resume point B of the load, when loading
    uint8_t joint_src;      //  0 none, 1 state from HBM, 2 state from the tier
    uint32_t slot;          //  state slot (UINT32_MAX: none)
    uint32_t ck_from;       //  hybrid: start of its next checkpoint's span (Marconi's FLOP
                            //  efficiency): its last checkpoint, else its resume point
    uint32_t nblocks;       //  block table entries
    const uint32_t *blocks; //  the block table (borrowed, valid until the next call)
} kvt_sched_req_info_t;

//  Validates cfg; on error returns NULL and writes a message naming the
//  setting into err.
kvt_sched_t *kvt_sched_new(const kvt_sched_cfg_t *cfg, char *err, size_t errlen);
void kvt_sched_destroy(kvt_sched_t **self_p);

//  Adds a request to the admission queue (admission happens in a plan,
//  FIFO). Copies the tokens; the caller keeps `arrival`. Returns 0, or -1
//  when the request is refused (duplicate id, longer than the block pool can ever hold): then a
//  FINISH event with b = 0, c = 1 and gen KVT_SCHED_REFUSED_GEN is queued so the engine
//  still hears about it.
int kvt_sched_arrive(kvt_sched_t *self, const kvt_arrival_t *arrival);

//  Advances the core's clock (µs on the caller's clock; a smaller value is
//  ignored). The state index times its evidence with it, lookups and loads
//  their deadlines.
void kvt_sched_set_now(kvt_sched_t *self, uint64_t now_us);

//  The core's clock (the largest value kvt_sched_set_now was given).
uint64_t kvt_sched_now(const kvt_sched_t *self);

//  The earliest time (µs on the core's clock) at which a load in flight
//  reaches its deadline (cfg.load_deadline_us after its dispatch), or
//  UINT64_MAX when none is out: a caller holding a plan (KVT_SCHED_HOLD)
//  plans again by then, since no verdict may ever come.
uint64_t kvt_sched_next_deadline(const kvt_sched_t *self);

//  Applies the results of the last planned step `step`: `ok` when it ran on
//  every rank (its tokens count, full blocks become shareable, checkpoints
//  it took become valid, finished requests retire), else it is rolled back
//  and planned again. Optional: kvt_sched_plan (step + 1, !ok) does the same
//  when it was not called. Returns 0, or -1 when `step` is not the last
//  planned step or was already applied (nothing changes).
int kvt_sched_apply(kvt_sched_t *self, uint64_t step, bool ok);

//  A request stops before max_new_tokens (end of sequence): it finishes at
//  the next apply with what it computed, saving its complete chunks (the
//  decode keep is placed from max_new_tokens, so an early stop has none).
//  0, or -1 when it is not running.
int kvt_sched_finish(kvt_sched_t *self, uint64_t req);

//  Builds the plan for `step` (see above). Steps are numbered 1, 2, ...; a
//  plan is built once per step, so a repeated or out-of-order Schedule is
//  refused (-2) and changes nothing. `prev_failed`: step - 1 did not run on
//  every rank, so none of its tokens count (they are planned again). *plan
//  is filled with arrays the core owns: valid until the next kvt_sched_plan
//  (the caller frees nothing). Returns 1 when the plan
//  carries work (entries, loads or saves), 0 when it is empty (plan->idle
//  when nothing is waiting or outstanding either), -1 when it is empty but
//  loads or saves are outstanding — the caller should hold its reply until a
//  verdict arrives and call again with the same step.
#define KVT_SCHED_HOLD    (-1)
#define KVT_SCHED_REFUSED (-2)
int kvt_sched_plan(kvt_sched_t *self, uint64_t step, bool prev_failed, kvt_step_plan_t *plan);

//  Applies a verdict: a load's KV leg (load channel), a load's state leg
//  (state channel, key = the prefix hash at B), a chunk save (store
//  channel), a SaveSpec's source_safe (key = its last chunk key: every rank
//  read its sources, so the leases on its blocks and checkpoint go before
//  the store verdicts; ok = false keeps them), a lookup, a touch. A load
//  settles once every leg it dispatched reported; any failed leg retreats
//  it (B2). A state verdict on which every rank skipped its leg (ok,
//  detail SKIPPED) counts as a failed leg (no rank wrote the slot) and is
//  no evidence for the image (it ends no verify hold). Returns 0, or -1 when it was stale (counted;
//  a duplicate or a source_safe after the store verdicts is stale).
int kvt_sched_verdict(kvt_sched_t *self, const kvt_verdict_t *verdict);

//  True when no request, load or save is left (every block free).
bool kvt_sched_quiescent(const kvt_sched_t *self);

//  The step number the next plan must carry.
uint64_t kvt_sched_next_step(const kvt_sched_t *self);

void kvt_sched_stats(const kvt_sched_t *self, kvt_sched_stats_t *out);

//  Appends every counter (scheduler, block manager, save tracker) as named
//  counters to c[*n..cap) for a Stats reply.
void kvt_sched_counters(const kvt_sched_t *self, kvt_counter_t *c, uint32_t *n, uint32_t cap);

//  Probes the waiting request `req` without side effects (rule B1): fills
//  *out from a reset probe. 0, or -1 when req is not waiting.
int kvt_sched_probe(kvt_sched_t *self, uint64_t req, kvt_sched_probe_t *out);

//  The state work of the last plan (hybrid models; none for a dense one).
//  Valid until the next plan.
void kvt_sched_plan_state(const kvt_sched_t *self, const kvt_sched_state_op_t **ops, uint32_t *n);

//  Aborts a request: its blocks, state slot and checkpoint pins go back
//  through the same path as a finish, and its record is freed at once
//  (once no save reads its blocks), so the id may arrive again. A load in
//  flight is orphaned (rules I1, I2): its index (the state-offload index
//  for a load with a state leg, the load index for a KV-only one) owns
//  it, and the blocks its KV leg writes and its state slot stay off the
//  free lists until its late verdicts settle it or orphan_reclaim_us after
//  the abort reclaims it. A later admission of the same id carries a
//  newer generation, so the orphan's reports never reach it (A3).
//  0, or -1 when unknown.
int kvt_sched_abort(kvt_sched_t *self, uint64_t req);

//  Preempts a running or loading request: blocks, slot and pins released
//  as on a finish (a load in flight is orphaned as on an abort), the
//  request waits again at the head of the queue and recomputes. 0, or -1
//  when it is neither running nor loading.
int kvt_sched_preempt(kvt_sched_t *self, uint64_t req);

//  What the core holds for request `req`. 0, or -1 when unknown.
int kvt_sched_req_info(const kvt_sched_t *self, uint64_t req, kvt_sched_req_info_t *out);

//  Checks internal invariants (block references = request blocks + leases,
//  gauges match the records). Returns 0, or -1 with a message in err. O(all
//  records): for tests and the end of a replay, not for every event.
int kvt_sched_audit(const kvt_sched_t *self, char *err, size_t errlen);

#endif
