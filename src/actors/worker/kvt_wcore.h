/*  kvt_wcore — the worker's core: specs in, copies queued, reports out.

    A plain state machine over the handles it is given (the rank's device
    streams and event pool, its storage): it validates LoadSpec / SaveSpec
    (refuse, never clamp: rule L4), keeps the table of pending jobs and the
    ids of the items it accepted, queues the copies, and decides every
    report. It reads no clock (time is passed in), owns no socket or thread
    and never waits: a job's copies are tracked by an event (or, when no
    event could be recorded, by its stream) that kvt_wcore_poll queries.
    The Completions it decides go to an outbox that the actor shell sends.

    Exactly one report per dispatched item, on every path (rule L1):

    * a load (report key: op, attempt, the zero key) reports once: ok after
      every chunk was scattered into its blocks; failed when the spec is
      refused (INVALID), a chunk is missing (MISS), the tier has no room for
      a promotion (NO_SPACE), a copy failed (IO), a lease was reclaimed
      under the copy (TIMEOUT) or the worker stopped first (SHUTDOWN);
    * a save reports once per chunk key: ok after its bytes were gathered
      into a pool reservation and committed (or at once when the pool
      already holds the chunk); failed otherwise, with the same details and
      DUPLICATE when another writer holds the key.

    A report never precedes the copies it covers (rule L2): a job whose
    copies were partly queued when an error hit stays pending until its
    event says they finished; only then do its leases go and its
    reservations get aborted, and it reports failed, once. Nothing here
    blocks; the shell's stop waits for the streams (rule X4) and then calls
    kvt_wcore_shutdown.

    * a touch (id: prefix hash, round) reports twice, once on each touch
      channel: `touch` ok unless the object is GONE, `touch_refresh` ok only
      when it was REFRESHED in the CPU pool; both carry the answer;
    * a lookup (id: op) reports once on `lookup`: the leading chunks this
      rank holds and, per held chunk, whether it carries an image (object
      kind KV_STATE). A pinned lookup keeps the pool-resident chunks
      read-pinned under one lease that exactly one of three releases: the
      LoadSpec naming the lookup (after its own reads took their leases),
      a LookupRelease, or the TTL (kvt_wlease.h); shutdown releases the
      rest. Release paths are counted separately.

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

#include "kvtier/kvt_gpu.h"
#include "kvtier/kvt_msg.h"
#include "kvtier/kvt_storage.h"

#define KVT_WCORE_SEEN 65536 //  accepted item ids remembered to drop a repeated spec

//  A log sink: level 0 error, 1 warning, 2 info; `line` has no newline.
typedef void(kvt_wcore_log_fn)(void *arg, int level, const char *line);

//  What the core works with. Every pointer is borrowed and must outlive it.
typedef struct {
    uint32_t rank;             //  this worker's TP rank (stamped on every report)
    kvt_gpu_t *gpu;            //  the rank's device (geometry)
    kvt_gpu_stream_t *load_s;  //  stream loads scatter on
    kvt_gpu_stream_t *save_s;  //  stream saves gather on
    kvt_gpu_event_pool_t *evp; //  events marking the end of a job's copies
    kvt_storage_t *storage;    //  the rank's tier; NULL: every item fails MISS / NO_SPACE
    kvt_holder_t holder;       //  pool holder the core's leases and reservations belong to
    uint64_t ns;               //  namespace id of stored objects
    uint32_t block_size;       //  tokens per block (>= 1)
    uint32_t chunk_size;       //  tokens per chunk (a multiple of block_size)
    uint64_t poll_ns;          //  re-query interval when the device cannot say when a copy
                               //  lands (0 = 20 µs)
    uint64_t renew_ns;         //  restart the TTL of a pending job's leases and reservations
                               //  this often (0 = 1 s; keep it well under the pool's TTL)
    uint64_t epoch;            //  incarnation stamped on every report (0 = 1)
    uint64_t lookup_ttl_ns;    //  lifetime of a pinned lookup's lease when the Lookup names
                               //  none (0 = 5 s; keep it under the pool's TTL)
    kvt_wcore_log_fn *log;     //  log sink (NULL: none)
    void *log_arg;             //  argument of log
} kvt_wcore_cfg_t;

//  Counters (reported in Stats as worker.<name>, see docs/metrics.md).
typedef struct {
    uint64_t loads_ok;          //  load completions ok
    uint64_t loads_failed;      //  load completions failed (refusals included)
    uint64_t loads_refused;     //  load specs refused by validation
    uint64_t load_chunks;       //  chunks restored
    uint64_t load_chunks_disk;  //  ... of which came from the disk
    uint64_t saves_ok;          //  chunk saves stored (or already present)
    uint64_t saves_present;     //  chunk saves the pool already held (refreshed)
    uint64_t saves_failed;      //  chunk saves failed (refusals included)
    uint64_t saves_refused;     //  save specs refused by validation
    uint64_t copy_errors;       //  device copies refused or failed
    uint64_t pending;           //  jobs waiting for their copies (gauge)
    uint64_t drained_at_stop;   //  items reported failed at shutdown
    uint64_t duplicates;        //  items dropped because this worker already accepted them
    uint64_t quarantined;       //  leases / reservations kept because their copy could not finish
    uint64_t unreported;        //  items dropped unreported: no memory to hold their report
    uint64_t touches;           //  touches answered
    uint64_t touches_refreshed; //  ... REFRESHED (in the CPU pool, moved young)
    uint64_t touches_present;   //  ... PRESENT (only on a lower tier: not refreshed)
    uint64_t touches_gone;      //  ... GONE
    uint64_t lookups;           //  lookups answered
    uint64_t lookups_failed;    //  ... with ok = false (a store error, no room to pin)
    uint64_t lookup_pins;       //  pinned lookups that took a lease
    uint64_t lookup_rel_load;   //  lookup leases released by the load that used them
    uint64_t lookup_rel_msg;    //  ... by a LookupRelease
    uint64_t lookup_rel_ttl;    //  ... by their TTL
    uint64_t lookup_rel_stop;   //  ... at shutdown
    uint64_t lookup_rel_none;   //  releases (load or LookupRelease) that found no lease
    uint64_t lookup_rel_stale;  //  leases the pool had already reclaimed when released
    uint64_t lookup_leases;     //  lookup leases held (gauge)
} kvt_wcore_stats_t;

typedef struct _kvt_wcore_t kvt_wcore_t;

//  Validates the configuration and creates a core. NULL with a message
//  naming the setting in err.
kvt_wcore_t *kvt_wcore_new(const kvt_wcore_cfg_t *cfg, char *err, size_t errlen);

//  Destroys the core (NULL-safe, nulls the pointer). Pending jobs must have
//  been settled by kvt_wcore_shutdown first.
void kvt_wcore_destroy(kvt_wcore_t **self_p);

//  What is wrong with a spec's shape against the geometry (off the chunk
//  grid, key or block counts that do not match the range, a block id beyond
//  the device's, a block named twice), or NULL when it is well formed.
const char *kvt_wcore_check_spec(kvt_wcore_t *self, const kvt_load_spec_t *sp);

//  Accepts a LoadSpec / SaveSpec at time `now`: reports decided at once go
//  to the outbox, the rest wait for their copies.
void kvt_wcore_load(kvt_wcore_t *self, const kvt_load_spec_t *sp, uint64_t now);
void kvt_wcore_save(kvt_wcore_t *self, const kvt_save_spec_t *sp, uint64_t now);

//  Answers a Touch / Lookup at time `now` (reports to the outbox at once),
//  and releases a pinned lookup's lease on a LookupRelease.
void kvt_wcore_touch(kvt_wcore_t *self, const kvt_touch_msg_t *t, uint64_t now);
void kvt_wcore_lookup(kvt_wcore_t *self, const kvt_lookup_t *l, uint64_t now);
void kvt_wcore_lookup_release(kvt_wcore_t *self, kvt_opid_t op);

//  Settles every pending job whose copies finished (reports to the
//  outbox), restarts the TTL of the handles of those still copying (every
//  renew_ns) and of the pinned lookups' leases, releases the lookup leases
//  whose TTL passed and reclaims the pool's expired leases.
void kvt_wcore_poll(kvt_wcore_t *self, uint64_t now);

//  When kvt_wcore_poll should run next: the earliest kvt_gpu_event_wake
//  over the pending jobs, no later than now + renew_ns, nor than the first
//  lookup lease's TTL; UINT64_MAX when nothing is pending or pinned.
uint64_t kvt_wcore_next_wake(kvt_wcore_t *self, uint64_t now);

//  Shutdown, after the caller waited for both streams (drained: nothing
//  queued on it is still running). Every pending item is reported failed
//  with KVT_DETAIL_SHUTDOWN; its leases are released and its reservations
//  aborted, except on a stream that did not drain, whose jobs' memory is
//  kept (counted in quarantined). Pinned lookups' leases are released.
//  Returns the items reported.
uint64_t kvt_wcore_shutdown(kvt_wcore_t *self, bool load_drained, bool save_drained);

//  The reports decided since the last kvt_wcore_outbox_clear, in order
//  (*n of them; the pointer is valid until the next core call).
const kvt_completion_t *kvt_wcore_outbox(const kvt_wcore_t *self, uint32_t *n);
void kvt_wcore_outbox_clear(kvt_wcore_t *self);

//  Jobs pending now.
uint32_t kvt_wcore_pending(const kvt_wcore_t *self);

//  Snapshot of the counters.
void kvt_wcore_stats(const kvt_wcore_t *self, kvt_wcore_stats_t *out);

#endif
