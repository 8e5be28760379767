/*  kvt_wcore_int.h — the worker core's state, shared by its files:
    kvt_wcore.c (loads, saves, their records, the outbox, the lifecycle),
    kvt_wcore_join.c (the lanes' reports joined into records, fences, the
    timer path, shutdown), kvt_wcore_lane.c (the lane jobs: what a lane's
    submit queues and how a job's memory goes back) and kvt_wcore_probe.c
    (touches, lookups, lookup leases). Private to src/actors/worker. */
#ifndef KVT_WCORE_INT_H_INCLUDED
#define KVT_WCORE_INT_H_INCLUDED

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/kvt_logf.h"
#include "base/kvt_seen.h"
#include "kvt_wcore.h"
#include "kvt_wlease.h"

//  What an item of a lane job moves.
#define KVT_WITEM_KV    1u //  a chunk's KV bytes (blocks <-> host bytes)
#define KVT_WITEM_IMAGE 2u //  a state image (state unit <-> host bytes after the KV, if any)

//  One item of a lane job: a chunk, an image, or a chunk and its image.
typedef struct {
    uint8_t what;      //  KVT_WITEM_* bits
    uint32_t block0;   //  KV: index in the job's blocks of the chunk's first block
    void *host;        //  the pool bytes: KV at host, the image after it (or at host)
    kvt_lease_t lease; //  load: the read lease on the object (id 0: none)
    kvt_resv_t resv;   //  save: the reservation written into
    uint32_t fail;     //  the item's failure the submit or the commit decided (0: none)
} kvt_witem_t;

//  What a lane job's submit waits for first.
typedef enum {
    KVT_WWAIT_NONE = 0,     //  nothing
    KVT_WWAIT_COMPUTE = 1,  //  load: the compute of step `wait_step` (fence board)
    KVT_WWAIT_PRODUCER = 2, //  save: the producer event of step `wait_step`
} kvt_wwait_t;

//  One lane job (a leg of a spec). Shared by the lane (its arg until the
//  lane gave its memory back) and the core's record (until the core took
//  the lane's report): whichever lets go last frees it. The core writes it
//  before the enqueue; after that the submit writes `fail`, `fenced`,
//  `refused`, `compute_miss` (read by the core only after a report that
//  says the submit ended: DONE or COMMIT) and give_back writes `fail`.
typedef struct kvt_wjob {
    atomic_uint refs;           //  holders: the lane and the core's record
    void *rec;                  //  the core's record this job is a leg of
    uint8_t lane;               //  kvt_wcore_lane_id_t
    kvt_storage_t *storage;     //  the tier (commit, abort, release)
    kvt_fence_board_t *board;   //  the fence board (NULL: none)
    kvt_wwait_t wait;           //  what the submit waits for first
    uint64_t wait_step;         //  the step it waits for
    bool restore;               //  record a restore event after the copies (loads)
    bool save;                  //  gathers into reservations (else scatters from leases)
    kvt_gpu_state_pool_t spool; //  image items: the state pool
    uint32_t sindex;            //  image items: the unit
    size_t sbytes;              //  image items: bytes of one unit
    size_t chunk_bytes;         //  KV items: bytes of one chunk
    uint32_t bpc;               //  KV items: blocks per chunk
    uint32_t n;                 //  items
    kvt_witem_t *items;         //  the items (n)
    uint32_t *blocks;           //  KV items' blocks (bpc per KV item)
    bool fenced;                //  the producer wait was queued before any pack work
    bool refused;               //  a copy call was refused (the device queued nothing of it)
    bool compute_miss;          //  the board had no compute event for `after`
    bool producer_missing;      //  the board had no producer event for the step
} kvt_wjob_t;

//  A job for n items and nblocks blocks, one reference held for the core
//  (the enqueue adds the lane's). NULL when out of memory.
kvt_wjob_t *kvt_wjob_new(uint32_t n, uint32_t nblocks);

//  Drops one reference; the last one frees the job.
void kvt_wjob_unref(kvt_wjob_t *job);

//  Restarts the TTL of the job's leases / reservations (the core, every
//  renew_ns while the job is pending; the handles are never written after
//  the enqueue).
void kvt_wjob_renew(kvt_wjob_t *job);

//  Gives back the memory of a job the lane never took (the core decided
//  it failed before the enqueue): releases leases, aborts reservations.
void kvt_wjob_abort(kvt_wjob_t *job);

//  What a record is the report side of.
typedef enum { KVT_WREC_LOAD = 1, KVT_WREC_SAVE = 2 } kvt_wrec_kind_t;

//  The legs of a load (index in kvt_wrec_t.leg).
#define KVT_WLEG_KV    0
#define KVT_WLEG_STATE 1

//  A spec with a lane job out: what its reports need once its legs ended.
typedef struct kvt_wrec {
    kvt_wrec_kind_t kind;  //  load or save
    kvt_opid_t op;         //  operation id
    uint32_t attempt;      //  the spec's attempt (part of every report key)
    kvt_wjob_t *leg[2];    //  load: KV, state leg; save: leg[0] (NULL: absent or reported)
    uint32_t legs;         //  lane jobs that have not reported
    uint32_t items;        //  reports it owes
    bool has_state;        //  load: carries a state leg (reports on `state`)
    kvt_hash_t state_hash; //  load: the state verdict's key
    uint32_t detail[2];    //  load: each leg's failure (0: none)
    bool state_ran;        //  load: the state leg ran (a real verdict)
    uint32_t nkv;          //  load: chunks of the KV leg
    uint32_t ndisk;        //  load: chunks that came from the disk
    uint64_t started;      //  when the spec was accepted (the transfer histograms)
    uint64_t bytes;        //  bytes the legs that reported moved (KV chunks, images)
    bool all_ok;           //  save: every item reported so far stored
    kvt_hash_t *keys;      //  save: the store key of each job item
    kvt_hash_t safe_key;   //  save: the source_safe key (its last item key)
    bool image;            //  save: the last job item carries an image
    struct kvt_wrec *prev; //  open records, oldest first
    struct kvt_wrec *next; //  ...
} kvt_wrec_t;

//  A Fence waiting for the lanes it named.
typedef struct kvt_wfence {
    uint64_t id;             //  the Fence's id
    uint32_t left;           //  lanes that have not reported it
    uint32_t detail;         //  the first failure a lane reported (0: none)
    struct kvt_wfence *next; //  open fences
} kvt_wfence_t;

struct _kvt_wcore_t {
    kvt_wcore_cfg_t c;           //  configuration (borrowed handles)
    uint32_t bpc;                //  blocks per chunk
    size_t chunk_bytes;          //  bytes of one chunk buffer
    uint32_t nblocks;            //  device blocks (block ids are < nblocks)
    uint64_t *marks;             //  scratch bitmap over block ids (duplicate check)
    kvt_seen_t *seen;            //  ids of the last items accepted
    struct kvt_wrec *head;       //  oldest open record (a spec with a lane job out)
    struct kvt_wrec *tail;       //  newest open record
    uint32_t npending;           //  open records
    uint64_t renewed_at;         //  when the open records' handles were last renewed
    struct kvt_wfence *fences;   //  open Fences
    uint64_t owed;               //  reports the open records and fences owe
    kvt_completion_t *out;       //  outbox
    uint32_t nout;               //  reports in the outbox
    uint32_t outcap;             //  outbox slots (>= nout + owed, so a settle never fails)
    uint8_t **imgs;              //  image bitmaps the outbox's lookup reports point to
    uint32_t nimgs;              //  entries of imgs in use
    uint32_t imgcap;             //  entries of imgs allocated
    kvt_wlease_t *lookups;       //  pinned lookups' leases
    uint64_t lookups_renewed_at; //  when the lookup leases' TTL was last restarted
    uint64_t state_legs;         //  state legs started (the miss_state fault's count)
    bool copy_failed_logged;     //  a failed copy stream was logged (once)
    bool present_logged;         //  a touch answered PRESENT was logged (once)
    bool producer_logged;        //  a missing producer fence was logged (once)
    uint64_t now;                //  the time of the poll or shutdown being served
    kvt_wcore_stats_t st;        //  counters
};

//  Logs through the configured sink (no newline in fmt).
#define kvt_wcore_log_(self, level, ...) \
    kvt_logf((self)->c.log, (self)->c.log_arg, (level), __VA_ARGS__)

//  Makes room for k more reports beyond the outbox and what pending jobs
//  owe; -1 (counted in unreported, logged) when memory ran out.
int kvt_wcore_reserve_(kvt_wcore_t *self, uint32_t k, kvt_opid_t op);

//  Appends one report (room reserved) stamped with the rank and the epoch;
//  returns it so the caller can fill the channel's own fields.
kvt_completion_t *kvt_wcore_out_(kvt_wcore_t *self, uint8_t chan, kvt_opid_t op, uint32_t attempt,
                                 kvt_hash_t key, bool ok, uint32_t detail, uint32_t lower);

//  True when the item (chan, op, attempt, key) is new (and remembers it);
//  a repeat is counted in duplicates.
bool kvt_wcore_first_time_(kvt_wcore_t *self, uint8_t chan, kvt_opid_t op, uint32_t attempt,
                           kvt_hash_t key);

//  The reports of each channel (counted; room reserved): a load, its state
//  verdict (`ran` false: the neutral one), a store item, a save's
//  source_safe (nothing when the switch is off; failed, it carries the
//  cause: TIMEOUT for a deadline or fence timeout, SHUTDOWN for a drain).
void kvt_wcore_load_report_(kvt_wcore_t *self, kvt_opid_t op, uint32_t attempt, bool ok,
                            uint32_t detail, uint32_t lower);
void kvt_wcore_state_report_(kvt_wcore_t *self, kvt_opid_t op, uint32_t attempt, kvt_hash_t key,
                             bool ran, uint32_t detail);
void kvt_wcore_save_report_(kvt_wcore_t *self, kvt_opid_t op, uint32_t attempt, kvt_hash_t key,
                            bool ok, uint32_t detail, bool fenced);
void kvt_wcore_safe_report_(kvt_wcore_t *self, kvt_opid_t op, uint32_t attempt, kvt_hash_t key,
                            bool ok, uint32_t detail);

//  Takes an open record off the list (what it owes leaves `owed`), frees one.
void kvt_wcore_unlink_(kvt_wcore_t *self, kvt_wrec_t *rec);
void kvt_wcore_rec_free_(kvt_wrec_t *rec);

//  Lookup leases, for the job side: the load that named lookup `op` took
//  its own leases; a poll at `now` (TTL releases, renewals); the earliest
//  of `at` and the lookups' next wake; shutdown.
void kvt_wcore_lookup_used_(kvt_wcore_t *self, kvt_opid_t op);
void kvt_wcore_lookup_poll_(kvt_wcore_t *self, uint64_t now);
uint64_t kvt_wcore_lookup_wake_(const kvt_wcore_t *self, uint64_t at);
void kvt_wcore_lookup_stop_(kvt_wcore_t *self);

#endif
