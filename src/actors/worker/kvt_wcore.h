/*  kvt_wcore — the worker's core: specs in, lane jobs out, reports out.

    A plain state machine over the handles it is given (the rank's device,
    its tier, three transfer lanes and the rank's fence board): it validates
    LoadSpec / SaveSpec (refuse, never clamp: rule L4), takes the tier's
    leases and reservations, turns each spec into lane jobs, joins the legs
    and decides every report. It reads no clock (time is passed in), owns no
    socket or thread and never waits. The Completions it decides go to an
    outbox that the actor shell sends.

    Lanes (kvt_lane_runner.h; one per kind, each on its own stream):
    * load:  a load's KV leg (chunk bytes scattered into blocks);
    * state: a load's state leg (the tier's image into the state slot);
    * save:  a save's gathers (chunks, the image of a checkpoint unit).
    A lane job is one leg. The lane runs its submit (device calls only: the
    copies, the fence board's waits and the restore record), enforces its
    deadline in every stage (rule X2), covers it with fences (X1), fails
    stop (X3), and gives its memory back through kvt_wcore_lane_ops only
    when no copy of it can still run (X4). Whether a lane's submit runs in
    the calling thread (kvt_lane_core_pump: a submit that cannot block) or
    on the runner's submitter thread is the lane runner's configuration,
    chosen by whoever builds the rank; this core calls the same runner
    functions either way and its timer path (kvt_wcore_poll) ticks every
    lane, so a deadline fires while a submit is stuck.

    Exactly one report per dispatched item, on every path (rule L1):

    * a load (key: op, attempt, the zero key) reports once on `load`, ok
      when every leg it has landed ok, after both legs' copies ended (L2):
      failed when the spec is refused (INVALID), a chunk or the image is
      missing (MISS), the tier has no room for a promotion (NO_SPACE), a copy
      failed (IO), a deadline or fence timeout hit (TIMEOUT), a lease was
      reclaimed under the copy (TIMEOUT) or the lanes shut down (SHUTDOWN);
    * a load with a state leg also reports once on `state` (key: the state
      hash): the leg's real verdict if it ran (ok, MISS, IO, TIMEOUT, ...),
      NEUTRAL (ok, SKIPPED) if it did not (refused, the KV leg failed before
      it started, shut down before it ran) — so the key always settles;
    * a save reports once per item on `store`: per chunk key, and for an
      image-only save once under the state hash; a chunk that carries the
      image (object kind KV_STATE) is ok only when both were gathered and
      committed. Reports carry fenced = true when the save's stream waited
      on the step's producer event (rule S1). A save whose producer event is
      missing (producer_failed, or the board has none) refuses every item
      (IO, "producer fence missing"; rule S2);
    * a save reports once on `source_safe` (key: its last item key) when
      nothing reads its sources any more: ok, or failed when a copy may
      still read them (TIMEOUT: a deadline or fence timeout under a running
      copy; SHUTDOWN: the drain found it running — the device outlives the
      worker, so its lease must stay);
    * a Fence reports once on `fence` (op {id, 1}, key zero): ok when every
      job the named lanes held ended, TIMEOUT when a lane's fence timed out
      (that lane then refuses every later job until it is reset).

    A report never precedes the copies it covers (rule L2): a job reports
    when its lane says its copies landed; a failure reported under a running
    copy keeps that job's memory in the lane (quarantined) until the copy
    ends.

    * a touch (id: prefix hash, round) reports twice, once on each touch
      channel: `touch` ok unless the object is GONE, `touch_refresh` ok only
      when it was REFRESHED in the CPU pool; both carry the answer;
    * a lookup (id: op) reports once on `lookup`: the leading chunks this
      rank holds and, per held chunk, whether it carries an image (object
      kind KV_STATE); a rank-0-only lookup (rank0_only) is answered by
      rank 0 alone, with rank0_only in its report, and skipped by every
      other rank (no report, no pin). A pinned lookup keeps the
      pool-resident chunks read-pinned under one lease that exactly one of
      three releases: the LoadSpec naming the lookup (after its own reads
      took their leases), a LookupRelease, or the TTL (kvt_wlease.h);
      shutdown releases the rest. Release paths are counted separately.

    Every report carries the worker's epoch (its incarnation), so the
    aggregator can drop what an earlier incarnation of this rank reported.

    A spec that arrives twice (a duplicated message) runs once: the ids of
    the last KVT_WCORE_SEEN items accepted are remembered and a repeat is
    dropped without a report (counted in `duplicates`). */
#ifndef KVT_WCORE_H_INCLUDED
#define KVT_WCORE_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "actors/common/kvt_fence_board.h"
#include "actors/lane/kvt_lane_runner.h"
#include "kvtier/kvt_gpu.h"
#include "kvtier/kvt_msg.h"
#include "kvtier/kvt_storage.h"

#define KVT_WCORE_SEEN 65536 //  accepted item ids remembered to drop a repeated spec

//  The lanes, by index in kvt_wcore_cfg_t.lanes; the bit of each in a
//  Fence's `lanes` mask is 1 << index.
typedef enum {
    KVT_WCORE_LANE_LOAD = 0,  //  KV legs of loads
    KVT_WCORE_LANE_STATE = 1, //  state legs of loads
    KVT_WCORE_LANE_SAVE = 2,  //  saves (chunks and images)
    KVT_WCORE_LANES = 3,
} kvt_wcore_lane_id_t;

//  One lane as the core uses it.
typedef struct {
    kvt_lane_runner_t *runner; //  the lane (borrowed); created with ops = kvt_wcore_lane_ops
    kvt_holder_t holder;       //  the pool holder of its leases and reservations (the lane's)
} kvt_wcore_lane_t;

//  The ops every lane of a worker core runs (ops_arg unused: each job
//  carries what its submit needs).
extern const kvt_lane_ops_t kvt_wcore_lane_ops;

//  A log sink: level 0 error, 1 warning, 2 info; `line` has no newline.
typedef void(kvt_wcore_log_fn)(void *arg, int level, const char *line);

//  What the core works with. Every pointer is borrowed and must outlive it.
typedef struct {
    uint32_t rank;                           //  this worker's TP rank (stamped on every report)
    kvt_gpu_t *gpu;                          //  the rank's device (geometry, state pools)
    kvt_wcore_lane_t lanes[KVT_WCORE_LANES]; //  load, state, save (each runner required)
    kvt_fence_board_t *board;                //  the rank's fence board (NULL: no fencing)
    kvt_storage_t *storage;                  //  the rank's tier; NULL: every item fails
    kvt_holder_t holder;                     //  pool holder of pinned lookups' leases
    uint64_t ns;                             //  namespace id of stored objects
    uint32_t block_size;                     //  tokens per block (>= 1)
    uint32_t chunk_size;                     //  tokens per chunk (a multiple of block_size)
    uint64_t renew_ns;                       //  restart the TTL of a pending job's leases and
                                             //  reservations this often (0 = 1 s; keep it well
                                             //  under the pool's TTL)
    uint64_t epoch;                          //  incarnation stamped on every report (0 = 1)
    bool source_safe;                        //  report on KVT_CHAN_SOURCE_SAFE (false: no
                                             //  such reports, for consumers that do not
                                             //  expect them)
    uint64_t lookup_ttl_ns;                  //  lifetime of a pinned lookup's lease when the
                                             //  Lookup names none (0 = 5 s)
    uint32_t miss_state;                     //  testing fault: the Nth state leg's read
                                             //  misses (answered MISS, nothing read; 0 = off)
    kvt_wcore_log_fn *log;                   //  log sink (NULL: none)
    void *log_arg;                           //  argument of log
} kvt_wcore_cfg_t;

//  Counters (reported in Stats as worker.<name>, see docs/metrics.md).
//  A histogram of transfers, per-bucket counts (kvt_wcore_hist_bounds).
#define KVT_WCORE_HIST_MAX 16 //  buckets, the +Inf one included
typedef struct {
    uint64_t n[KVT_WCORE_HIST_MAX]; //  observations per bucket (bound i, or +Inf past the last)
    uint64_t sum;                   //  sum of the observations
    uint64_t count;                 //  observations
} kvt_wcore_hist_t;

typedef struct {
    uint64_t loads_ok;           //  load completions ok
    uint64_t loads_failed;       //  load completions failed (refusals included)
    uint64_t loads_refused;      //  load specs refused by validation
    uint64_t load_chunks;        //  chunks restored
    uint64_t load_chunks_disk;   //  ... of which came from the disk
    uint64_t saves_ok;           //  chunk saves stored (or already present)
    uint64_t saves_present;      //  chunk saves the pool already held (refreshed)
    uint64_t saves_failed;       //  chunk saves failed (refusals included)
    uint64_t saves_refused;      //  save specs refused by validation
    uint64_t copy_errors;        //  device copies refused or failed
    uint64_t pending;            //  jobs waiting for their copies (gauge)
    uint64_t drained_at_stop;    //  items reported failed at shutdown
    uint64_t duplicates;         //  items dropped because this worker already accepted them
    uint64_t quarantined;        //  leases / reservations kept because their copy could not finish
    uint64_t unreported;         //  items dropped unreported: no memory to hold their report
    uint64_t touches;            //  touches answered
    uint64_t touches_refreshed;  //  ... REFRESHED (in the CPU pool, moved young)
    uint64_t touches_present;    //  ... PRESENT (only on a lower tier: not refreshed)
    uint64_t touches_gone;       //  ... GONE
    uint64_t lookups;            //  lookups answered
    uint64_t lookups_failed;     //  ... with ok = false (a store error, no room to pin)
    uint64_t lookups_not_asked;  //  rank-0-only lookups a rank other than 0 skipped
    uint64_t lookup_pins;        //  pinned lookups that took a lease
    uint64_t lookup_rel_load;    //  lookup leases released by the load that used them
    uint64_t lookup_rel_msg;     //  ... by a LookupRelease
    uint64_t lookup_rel_ttl;     //  ... by their TTL
    uint64_t lookup_rel_stop;    //  ... at shutdown
    uint64_t lookup_rel_none;    //  releases (load or LookupRelease) that found no lease
    uint64_t lookup_rel_stale;   //  leases the pool had already reclaimed when released
    uint64_t lookup_leases;      //  lookup leases held (gauge)
    uint64_t states_ok;          //  state verdicts ok (the image landed in its slot)
    uint64_t states_failed;      //  state verdicts failed (miss, copy, deadline, ...)
    uint64_t states_neutral;     //  state verdicts neutral (the leg did not run)
    uint64_t images_saved;       //  state images stored (alone or with their chunk)
    uint64_t source_safe;        //  source_safe reports ok
    uint64_t source_unsafe;      //  ... failed: a copy may still read the sources
    uint64_t producer_refused;   //  save items refused: no producer event for their step
    uint64_t fenced_saves;       //  save items whose stream waited on the producer event
    uint64_t compute_misses;     //  loads with `after` whose compute event the board lacked
    uint64_t lane_timeouts;      //  lane jobs ended by a deadline or a fence timeout
    uint64_t fences_ok;          //  Fence reports ok
    uint64_t fences_failed;      //  Fence reports failed (a lane's fence timed out)
    uint64_t lane_resets;        //  failed lanes reset once they drained (serving again)
    uint64_t faults_injected;    //  testing faults applied (miss_state)
    kvt_wcore_hist_t load_us;    //  loads that ended ok: spec accepted → report, in µs
    kvt_wcore_hist_t save_us;    //  saves whose every item stored: spec accepted → reports
    kvt_wcore_hist_t load_bytes; //  ... their bytes moved (chunks and state image)
    kvt_wcore_hist_t save_bytes; //  ... their bytes moved (chunks and images)
} kvt_wcore_stats_t;

//  The finite bounds of the latency (µs; bytes false) or size (bytes true)
//  buckets, ascending; *n of them (bucket *n is +Inf).
const uint64_t *kvt_wcore_hist_bounds(bool bytes, uint32_t *n);

typedef struct _kvt_wcore_t kvt_wcore_t;

//  Validates the configuration and creates a core. NULL with a message
//  naming the setting in err.
kvt_wcore_t *kvt_wcore_new(const kvt_wcore_cfg_t *cfg, char *err, size_t errlen);

//  Destroys the core (NULL-safe, nulls the pointer). Pending jobs must have
//  been settled by kvt_wcore_shutdown first.
void kvt_wcore_destroy(kvt_wcore_t **self_p);

//  What is wrong with a LoadSpec / SaveSpec against the geometry, or NULL
//  when it is well formed (rule L4: refused, never clamped). KV leg: off
//  the chunk grid, key or block counts that do not match the range, a block
//  id beyond the device's, a block named twice. State leg / image: the
//  boundary off the chunk grid or not the KV leg's end, a zero state hash,
//  a slot (unit) beyond the registered state pool, no state pool registered
//  at all (memory never registered), no state lane. A spec with neither leg.
const char *kvt_wcore_check_spec(kvt_wcore_t *self, const kvt_load_spec_t *sp);
const char *kvt_wcore_check_save(kvt_wcore_t *self, const kvt_save_spec_t *sp);

//  Accepts a LoadSpec / SaveSpec at time `now`: reports decided at once go
//  to the outbox, the rest wait for their copies.
void kvt_wcore_load(kvt_wcore_t *self, const kvt_load_spec_t *sp, uint64_t now);
void kvt_wcore_save(kvt_wcore_t *self, const kvt_save_spec_t *sp, uint64_t now);

//  Answers a Touch / Lookup at time `now` (reports to the outbox at once),
//  and releases a pinned lookup's lease on a LookupRelease.
void kvt_wcore_touch(kvt_wcore_t *self, const kvt_touch_msg_t *t, uint64_t now);
void kvt_wcore_lookup(kvt_wcore_t *self, const kvt_lookup_t *l, uint64_t now);
void kvt_wcore_lookup_release(kvt_wcore_t *self, kvt_opid_t op);

//  Fences the lanes of `f` (mask bit 1 << kvt_wcore_lane_id_t; 0 = all);
//  reports once on KVT_CHAN_FENCE when every one of them reported its fence.
void kvt_wcore_fence(kvt_wcore_t *self, const kvt_fence_msg_t *f, uint64_t now);

//  The timer path: ticks every lane (deadlines and fence timeouts fire,
//  landed copies settle), joins the reports the lanes made into the
//  core's, restarts the TTL of pending jobs' handles (every renew_ns) and
//  of pinned lookups' leases, releases the lookup leases whose TTL passed
//  and reclaims the pool's expired leases.
void kvt_wcore_poll(kvt_wcore_t *self, uint64_t now);

//  When kvt_wcore_poll should run next: the earliest lane wake
//  (kvt_lane_runner_next_wake), no later than the next renewal while jobs
//  are pending, nor than the first lookup lease's TTL; UINT64_MAX when
//  nothing is pending or pinned.
uint64_t kvt_wcore_next_wake(kvt_wcore_t *self, uint64_t now);

//  Shutdown (rule X4): shuts every lane down (each job reports: its result
//  when its copies already ended, else failed SHUTDOWN; memory under a copy
//  that has not ended stays quarantined in its lane) and joins their
//  reports, so every pending item reports once; pinned lookups' leases are
//  released. Returns the items reported. Then the caller waits for the
//  lanes' streams and polls once (kvt_wcore_poll), which gives back the
//  quarantined memory whose copies ended; only then may it destroy the
//  lanes, their events and streams.
uint64_t kvt_wcore_shutdown(kvt_wcore_t *self, uint64_t now);

//  The reports decided since the last kvt_wcore_outbox_clear, in order
//  (*n of them; the pointer is valid until the next core call).
const kvt_completion_t *kvt_wcore_outbox(const kvt_wcore_t *self, uint32_t *n);
void kvt_wcore_outbox_clear(kvt_wcore_t *self);

//  Jobs pending now.
uint32_t kvt_wcore_pending(const kvt_wcore_t *self);

//  Snapshot of the counters.
void kvt_wcore_stats(const kvt_wcore_t *self, kvt_wcore_stats_t *out);

#endif
