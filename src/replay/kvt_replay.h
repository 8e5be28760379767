/*  kvt_replay — builds a replay: the workload, one device and one tier per
    rank, and the actors (engine, scheduler, aggregator, runner.r, worker.r)
    under the chosen driver (ranks as threads of this process or, under
    LIVE, as processes of their own); runs it to the end of the workload
    or a wall-clock limit (LIVE); checks that
    the system is quiescent (no outstanding load or save, no lease, pin or
    reservation left in any pool) and reports what it measured. */
#ifndef KVT_REPLAY_H_INCLUDED
#define KVT_REPLAY_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "replay/kvt_cost.h"
#include "replay/kvt_ledger.h"
#include "replay/kvt_report.h"
#include "replay/kvt_sim_engine.h"
#include "replay/kvt_workload.h"
#include "kvtier/kvt_actor.h"
#include "kvtier/kvt_metrics.h"
#include "kvtier/kvt_pool.h"
#include "kvtier/kvt_sched.h"

typedef struct kvt_rank_t kvt_rank_t; //  one rank's device, tier and actor args (kvt_rank.h)

typedef struct {
    const char *trace;        //  Mooncake jsonl path; NULL: the built-in synthetic workload
    uint32_t limit;           //  requests to replay (0 = all)
    double time_scale;        //  arrival = trace timestamp x time_scale, every request,
                              //  trace or synthetic (> 0 .. 1000; 0 or 1 = as traced)
    uint32_t closed_loop;     //  C > 0: closed loop, C requests in flight per instance, the
                              //  next arriving when one ends (timestamps ignored; needs
                              //  time_scale 1); 0: open loop by timestamps (default)
    kvt_driver_t driver;      //  SIM or LIVE (default SIM)
    uint32_t pace;            //  kvt_tristate_t: KVT_ON, a step spends its modelled time on
                              //  the driver's clock (kvt_sim_engine_args_t.pace); KVT_OFF,
                              //  not; KVT_AUTO (0, default): ON under SIM, OFF under LIVE
    uint64_t seed;            //  seeds the synthetic workload and the SIM driver (default 1)
    uint32_t tp;              //  tensor-parallel ranks (default 2)
    uint64_t hbm_pool_bytes;  //  device KV memory per rank (default 16 MiB)
    uint64_t cpu_pool_bytes;  //  CPU tier per rank; 0 disables the tier (default 512 MiB)
    const char *disk_dir;     //  disk tier below the CPU pool: DIR/rank<r> per rank (NULL = none)
    uint64_t disk_pool_bytes; //  disk tier capacity per rank (default 4 GiB)
    bool disk_write_on_evict; //  write-back on pool eviction instead of write-through
    const char *remote;       //  remote tier below CPU / disk: cluster seeds (NULL = none)
    uint32_t layers;          //  model layers (default 4)
    uint32_t planes;          //  KV planes, e.g. K and V (default 2)
    uint32_t token_bytes;     //  bytes per token per layer per plane (default 16)
    uint32_t block_size;      //  tokens per block (default 16)
    uint32_t chunk_size;      //  tokens per chunk (default 256)
    const char *model;        //  the model preset's name, for the report (NULL = "dense")
    uint64_t state_bytes;     //  recurrent state per request per rank (0 = dense, the default)
    uint32_t checkpoint_interval; //  hybrid: tokens between state checkpoints (multiple of
                                  //  chunk_size; 0 = chunk_size)
    uint32_t min_load_tokens;     //  hybrid: a joint gaining fewer tokens recomputes (default 0)
    uint64_t orphan_reclaim_us;   //  an orphaned load is reclaimed this long after (0 = 60 s)
    uint64_t load_deadline_us;    //  a load still out this long after dispatch fails (0 = 60 s)
    uint64_t lookup_max_age_us;   //  a settled lookup older than this is asked again (0 = 1 s)
    bool no_state_tier;           //  hybrid: state images stay out of the tier (state_tier off)
    uint32_t spec_tokens;         //  speculative draft tokens per step (> 0: a hit leaves 2)
    kvt_hash_t ns;                //  namespace of every key (kvt_config's, rule C2); zero:
                                  //  derived from the geometry (kvt_rank_namespace)
    uint64_t layout_id;           //  id a disk directory records (kvt_config_layout_id); 0:
                                  //  derived from the geometry
    bool lookup_pin;              //  a lookup pins what it found until its load (default on)
    uint64_t lookup_timeout_ns;   //  a lookup not settled by then uses the HBM hit (0 = 1 s)
    uint64_t lookup_ttl_ns;       //  lifetime of a pinned lookup's lease (0 = 5 s)
    uint64_t verified_window_ns;  //  hybrid: no verify hold within it (0 = from cpu_pool)
    uint64_t verify_hold_ns;      //  hybrid: bound of a verify hold (0 = 2 s)
    uint64_t agg_timeout_ns;      //  an open aggregator key settles failed (0 = 30 s)
    uint64_t lane_deadline_ns;    //  a transfer job not terminal by then fails (0 = 2 s)
    uint64_t fence_timeout_ns;    //  a fence waiting longer fails its lane (0 = 5 s)
    uint64_t pool_ttl_ns;         //  lifetime of a pool lease not renewed (0 = 60 s)
    bool evict_value; //  evict_order value: the CPU pools and HBM checkpoints by the value rule
    uint32_t state_policy;     //  hybrid: kvt_sched_state_policy_t (default KVTIER)
    uint32_t grid_share_pct;   //  KVTIER: kvt_sched_cfg_t.grid_share_pct (default 2; 0 =
                               //  the fixed grid every checkpoint_interval)
    bool interval_checkpoints; //  hybrid: checkpoints on the interval grid only, no prompt-end
                               //  or decode-keep ones (--checkpoints interval; default off)
    uint32_t max_running;      //  requests admitted at once (default 64)
    uint32_t step_tokens;      //  token budget per step (default 4096)
    bool lookup_rank0;         //  tier lookups ask rank 0 only (default: every rank)
    uint32_t byte_scale;       //  every pool stores byte_scale times fewer bytes than its
                               //  size says (object counts, LRU order and decisions kept;
                               //  kvt_replay_byte_scale); 0 or 1 = none (default 1)
    uint32_t instances;        //  engine instances serving the workload, each its own
                               //  scheduler, ranks and pools (kvt_workload_route); 0 or
                               //  1 = one (default)
    void (*progress)(void *arg, uint32_t instance, uint32_t instances, uint32_t total,
                     const kvt_sim_engine_result_t *so_far,
                     uint64_t clock_us); //  every 64 steps of instance (0-based; total: requests
                                         //  of the whole workload); NULL: none
    void *progress_arg;                  //  its argument
    kvt_report_t *report;                //  fed every instance's time series on its modelled clock
                                         //  (kvt_report.h; borrowed; NULL: none). Sampling reads
                                         //  the scheduler core's gauges under SIM only and the
                                         //  ranks' pools only when ranks are threads; it changes
                                         //  nothing in the run
    const char *cost;                    //  cost model knobs over the model's defaults,
                                         //  "k=v,k=v" (kvt_cost_set; NULL = none)
    uint64_t sim_bw_Bps;                 //  SIM copy bandwidth of stored bytes (0, default:
                                         //  paced, the cost model's slower host link
                                         //  over the stored bytes each real byte has;
                                         //  unpaced 25e9)
    uint64_t sim_lat_ns;                 //  SIM copy latency (default 5000)
    const char *record;                  //  SIM: record every delivery to this file (NULL = no)
    int log_level;                       //  0..3 (default 1)
    uint32_t fault_corrupt_resume;       //  testing fault: rank 0 flips one restored byte of the
                                         //  Nth resumed request before its check (0 = off)
    uint32_t fault_corrupt_state; //  testing fault: rank 0 flips one byte of the Nth restored
                                  //  state slot before its check (0 = off)
    uint32_t fault_miss_state;    //  testing fault: rank 0's Nth state leg read misses (0 = off)
    uint32_t fault_stale_slot;    //  testing fault: rank 0's Nth forward from token 0 into a
                                  //  slot holding another state keeps it (0 = off)
    uint32_t fault_restore_late;  //  testing fault: rank 0's Nth checkpoint restore lands
                                  //  after the forward read the slot (0 = off)
    uint32_t fault_swap_slots;    //  testing fault: rank 0's Nth step with two entries
                                  //  advancing their state runs them swapped (0 = off)
    uint32_t fault_stale_block;   //  testing fault: rank 0's Nth forward that reads a context
                                  //  block reads another prefix's bytes there (0 = off)
    uint32_t fault_abort;         //  testing fault: the engine aborts one request in N, the
                                  //  phases rotating (kvt_sim_engine_core.h; 0 = off)
    uint32_t fault_preempt;       //  testing fault: ... preempts one in N (0 = off)
    bool mem_overcommit;          //  start even when the memory asked for exceeds the limit
    kvt_mem_limit_fn *mem_limit;  //  the limit's source; NULL: kvt_mem_limit_system
    void *mem_limit_arg;          //  its argument
    uint32_t wall_limit_ms;       //  LIVE: the run fails when it has not ended after this
                                  //  much wall time (default 600000 = 10 min; 0 = none)
    bool ranks_as_processes;      //  LIVE: every rank runs as its own process (`kvtier rank`),
                                  //  over ipc:// in a private temporary directory
    const char *rank_exe;         //  the kvtier binary those processes run (NULL:
                                  //  /proc/self/exe, so the caller must be kvtier itself)
    const char *rank_endpoint;    //  their base endpoint: NULL = ipc:// in a private
                                  //  temporary directory, or tcp://HOST:PORT (actor i of
                                  //  the topology at HOST:PORT+i, see kvt_rank.h)
    kvt_metrics_t *metrics;       //  publishes every actor's counters here: a collector
                                  //  actor's Stats rounds, then the final counters at the
                                  //  end of each instance (borrowed; NULL = none)
    uint64_t metrics_interval_ns; //  between those rounds, on the driver's clock (0 = 1 s)
    int (*sim_run)(void *arg, kvt_system_t *sys, kvt_rank_t *const *ranks,
                   const kvt_sim_engine_result_t *so_far);
    //  ^ SIM: runs the started system in place of one kvt_system_run to its
    //  end (fault plans arm rules, crash and restart actors, damage files
    //  between slices) and returns what kvt_system_run would have; ranks are
    //  the tp ranks (kvt_rank.h), so_far the engine's result as it fills.
    //  NULL: one run to the end
    void *sim_run_arg; //  its argument

    //  CURVE on tcp:// links (NULL = off; kvt_system_set_curve)
    const char *curve_secret_key;  //  this process's certificate
    const char *curve_public_keys; //  directory of the allowed public certificates
    const char *curve_server_key;  //  the peers' server certificate (NULL: curve_secret_key's)
} kvt_replay_cfg_t;

//  Publishes the counters of r (every actor's, the final Stats round and
//  the runtime's rt.*) to m, one source per actor (kvt_replay_metrics.c).
int kvt_replay_metrics_publish(kvt_metrics_t *m, const kvt_sim_engine_result_t *r);

typedef struct {
    kvt_sim_engine_result_t engine; //  what the engine measured, with every actor's counters
    char source[256];               //  workload description
    uint64_t hit_cpu_tokens;        //  restored from the CPU tier
    uint64_t hit_disk_tokens;       //  restored with some rank reading its disk tier
    uint64_t recomputed_tokens;     //  input tokens neither in HBM nor restored
    double recomputed_share;        //  recomputed / input tokens
    uint64_t saves_ok;              //  chunk saves that reached quorum
    uint64_t saves_failed;          //  chunk saves that failed on some rank
    uint64_t trace_hash;            //  SIM: hash of every delivery (0 under LIVE)
    uint64_t events;                //  SIM: deliveries + timers
    double wall_s;                  //  wall time of the run itself
    int exit_code;                  //  what kvt_system_run returned
    uint64_t runtime_errors;        //  send / decode / unhandled / handler errors over all actors
    bool quiescent;                 //  nothing was left outstanding at the end
    char problem[512];              //  the first thing found wrong at the end ("" if none)
    bool failed;                    //  the run failed: wrong resumes, not quiescent, requests
                                    //  that never ended, runtime errors or failed steps
    char failures[1024];            //  why, one reason per line ("" when it passed)
    kvt_ledger_report_t ledger;     //  the loss ledger of the whole run (kvt_ledger.h): its
                                    //  identity failing fails the run
} kvt_replay_report_t;

//  A hybrid model's state slots per rank: one per request admitted at once.
#define KVT_REPLAY_STATE_SLOTS(c) ((c)->state_bytes ? (c)->max_running : 0u)

//  How `hbm_stored` bytes of HBM split for c's model (kvt_sched_hbm_split:
//  the state slots first, then KV blocks and HBM checkpoints sharing the
//  rest; a dense model: every block is KV, no checkpoint units). The
//  scheduler, each rank's device and the memory check use it. 0, or -1 with
//  err naming both sizes when the slots do not fit.
int kvt_replay_hbm_split(const kvt_replay_cfg_t *c, uint64_t hbm_stored, kvt_sched_hbm_split_t *out,
                         char *err, size_t errlen);

//  kvt_replay_report_t.exit_code when a rank process exited before the end
//  (failures names the rank and its exit status).
#define KVT_REPLAY_RANK_LOST (-110)

//  Whether the replay's engine is paced (kvt_replay_cfg_t.pace resolved
//  against the driver).
bool kvt_replay_paced(const kvt_replay_cfg_t *cfg);

//  The SIM copy bandwidth the ranks' devices get: sim_bw_Bps when set;
//  otherwise, paced, the slower of the cost model's h2d / d2h links over the
//  real bytes one stored byte stands for (kv_token_bytes over planes x
//  layers x token_bytes), so a stored chunk crosses in its real bytes'
//  time; unpaced 25e9.
uint64_t kvt_replay_sim_bw(const kvt_replay_cfg_t *cfg, const kvt_cost_cfg_t *cost);

//  The byte scale that stores the model's real KV bytes per token per rank
//  (kvt_cost_defaults) in the configured geometry (planes x layers x
//  token_bytes): their ratio rounded, at least 1.
uint32_t kvt_replay_byte_scale(const kvt_replay_cfg_t *cfg);

//  Real default sizes per rank of a model preset (docs/configuration.md):
//  device KV memory, CPU pool, disk pool.
void kvt_replay_real_sizes(const char *model, uint64_t *hbm, uint64_t *cpu, uint64_t *disk);

//  The cost model of a run: the model's defaults at cfg->tp, cfg->cost's
//  knobs over them. 0, or -1 with err naming the bad knob.
int kvt_replay_cost(const kvt_replay_cfg_t *cfg, kvt_cost_cfg_t *cost, char *err, size_t errlen);

//  Fills *cfg with the defaults.
void kvt_replay_defaults(kvt_replay_cfg_t *cfg);

//  Validates the configuration; returns 0 or -1 with a message naming the
//  setting in err.
int kvt_replay_validate(const kvt_replay_cfg_t *cfg, char *err, size_t errlen);

//  The start-up memory check: every rank's CPU pool and host device regions
//  against the memory the process can have (cfg->mem_limit). Returns 0, or
//  -1 with err naming the total, the per-rank pieces, the limit and its
//  source (counted in kvt_replay_mem_refusals). With mem_overcommit the
//  check runs, a refusal is logged as a warning, and 0 is returned.
int kvt_replay_mem_check(const kvt_replay_cfg_t *cfg, char *err, size_t errlen);

//  Runs refused by the memory check since the process started.
uint64_t kvt_replay_mem_refusals(void);

//  Runs a replay. Returns 0 when it ran to the end (report->failed says
//  whether it passed: no wrong resume, quiescent, every request ended, no
//  runtime error or failed step), -1 when it could not be set up (err says
//  why: a bad trace, a bad setting, out of memory).
int kvt_replay_run(const kvt_replay_cfg_t *cfg, kvt_replay_report_t *report, char *err,
                   size_t errlen);

//  Frees what a report owns (its counters). Safe on a zeroed report.
void kvt_replay_report_clear(kvt_replay_report_t *report);

//  Value of a collected counter (`actor` NULL: summed over every actor that
//  reported it); 0 when absent.
uint64_t kvt_replay_counter(const kvt_replay_report_t *report, const char *actor, const char *name);

#endif
