/*  kvt_lane_core — one transfer lane's pure core: an ordered copy queue on
    one device stream, with deadlines, fences, fail-stop and reset.

    A lane owns one device stream (borrowed) and the jobs queued on it. A job
    moves queued → submitting → pending → terminal:

    * queued:     accepted, waiting for the one submit slot (jobs are
                  submitted in the order they were enqueued);
    * submitting: handed to the submitter (kvt_lane_core_submit_begin); the
                  ops table's submit runs OUTSIDE the core and may block (a
                  slow disk read, a device call that does not return);
    * pending:    the submit returned OK; an event recorded after it (or the
                  stream itself) says when the copies landed;
    * terminal:   reported, exactly once (the outbox).

    A job that reports before its copies are known to have ended (its
    deadline fired while it was submitting or pending, a fence timed out, the
    lane shut down) keeps its memory: it is QUARANTINED until the stream says
    its copies finished, and only then is its lease released or its
    reservation aborted. A stuck submit that returns later has its result
    dropped (no second report); if it queued copies, an event recorded after
    them decides when its memory may go. Memory is never handed back under a
    running copy.

    No clock, no sockets, no threads: time is passed in. The core is not
    thread-safe. Lock and ordering rules for a shell that submits on another
    thread (docs/architecture.md "Transfer lanes"):

    1. Every kvt_lane_core_* call is made under one mutex the shell owns.
    2. kvt_lane_core_submit_begin (under the mutex) moves the head job to
       submitting and fills a kvt_lane_submit_t; kvt_lane_submit_run (called
       WITHOUT the mutex) calls the ops table's submit with what it holds and
       touches no core state; kvt_lane_core_submit_end (under the mutex)
       hands the result back. The job's payload stays valid until submit_end
       for its token, whatever the core decided in between.
    3. The timer path (kvt_lane_core_tick) is a separate call: while a submit
       is stuck, the timer still fires deadlines and fences.
    4. At most one submit is in flight (the lane is ordered): submit_begin
       answers false while one is.
    5. kvt_lane_core_destroy only once no submit is in flight.

    Every job has a deadline (its own, or the lane's deadline_ns): when it
    passes before the job is terminal — in any stage, a stuck submit
    included — the job reports failed with KVT_DETAIL_TIMEOUT (rule X2).

    A fence (preemption, shutdown) covers every job the lane holds when it is
    issued, in every stage, quarantined copies included: it reports ok once
    all of them are terminal and their copies ended — a fence with only a
    queued job waits for it. If that takes longer than fence_timeout_ns the
    lane FAILS (fail-stop, rules X1, X3): every job it holds reports failed,
    every open fence reports failed, one error is logged, and every later job
    and fence is refused (reported failed at once) until kvt_lane_core_reset.
    A reset also resets the lane's pool holder (kvt_pool_holder_reset), so
    reservations the pool quarantined for it are freed (a pool TTL later).

    Shutdown (rule X4) settles every job before anything is freed: a pending
    job whose copies ended reports their result (it drained), every other
    job reports failed with KVT_DETAIL_SHUTDOWN, and memory under a copy that
    has not ended stays quarantined (never freed by the lane; the pool
    holder's reset or removal reclaims it). */
#ifndef KVT_LANE_CORE_H_INCLUDED
#define KVT_LANE_CORE_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvtier/kvt_gpu.h"
#include "kvtier/kvt_pool.h"

#define KVT_LANE_DEADLINE_NS      2000000000ull //  default job deadline: 2 s
#define KVT_LANE_FENCE_TIMEOUT_NS 5000000000ull //  default fence timeout: 5 s
#define KVT_LANE_POLL_NS          20000ull      //  default re-query interval: 20 µs
#define KVT_LANE_MAX_JOBS         4096          //  default bound on jobs held

//  What memory a job's copies use, handed to the lane with the job.
typedef enum {
    KVT_LANE_MEM_NONE = 0,  //  nothing the lane gives back
    KVT_LANE_MEM_LEASE = 1, //  a read lease (a load's source): released when the copy ended
    KVT_LANE_MEM_RESV = 2,  //  a write reservation (a save's target): committed when the job
                            //  ends ok, aborted when it failed and its copy ended
} kvt_lane_mem_kind_t;

typedef struct {
    kvt_lane_mem_kind_t kind; //  which handle is set
    kvt_lease_t lease;        //  KVT_LANE_MEM_LEASE: the lease (of the lane's holder)
    kvt_resv_t resv;          //  KVT_LANE_MEM_RESV: the reservation (of the lane's holder)
} kvt_lane_mem_t;

//  A job as enqueued. The core keeps a copy; `arg` is the caller's.
typedef struct {
    uint64_t id;          //  the caller's id, echoed in the report
    uint64_t deadline_ns; //  time from enqueue to deadline (0: the lane's deadline_ns)
    void *arg;            //  what the submit op copies (block list, buffers, ...)
    kvt_lane_mem_t mem;   //  memory the copies use; the lane gives it back
} kvt_lane_job_t;

//  How a job's copies are queued. `submit` queues them on `stream` and
//  returns KVT_GPU_OK, or a negative KVT_GPU_E* code when it queued nothing
//  that still runs (the device layer's failed calls are atomic). It may
//  block. It is called without the core's mutex and must not call the core.
//
//  `give_back` (optional) replaces the lane's own pool calls for a caller
//  whose jobs carry memory a single lease or reservation cannot name (a
//  load's chunks, a save's chunks and image) or whose commit must go
//  through the tier's write policy. The lane calls it exactly once for
//  every job it accepted or refused, at the moment it would give the job's
//  memory back: KVT_LANE_GIVE_COMMIT when the copies landed ok (it returns
//  false when a handle was stale: the job then reports KVT_LANE_CAUSE_COMMIT),
//  KVT_LANE_GIVE_ABORT when the job failed and no copy of it can run,
//  KVT_LANE_GIVE_LEAVE at destroy for a job whose copies may still run (touch
//  no memory; the pool holder keeps it). After it returns the lane never
//  reads job->arg again. It runs under the core's mutex, possibly on the
//  submitter thread, and must not call the core.
typedef enum {
    KVT_LANE_GIVE_COMMIT = 0, //  copies landed ok: commit / release
    KVT_LANE_GIVE_ABORT = 1,  //  failed, nothing runs: abort / release
    KVT_LANE_GIVE_LEAVE = 2,  //  destroy under a running copy: leave the memory alone
} kvt_lane_give_t;

typedef struct {
    int (*submit)(void *ops_arg, kvt_gpu_stream_t *stream, const kvt_lane_job_t *job);
    bool (*give_back)(void *ops_arg, const kvt_lane_job_t *job, kvt_lane_give_t how);
} kvt_lane_ops_t;

//  A log sink: level 0 error, 1 warning, 2 info; `line` has no newline.
typedef void(kvt_lane_log_fn)(void *arg, int level, const char *line);

typedef struct {
    const char *name;          //  lane name in logs ("load.0"); default "lane"
    kvt_gpu_stream_t *stream;  //  the lane's stream (borrowed; see kvt_lane_core_reset)
    kvt_gpu_event_pool_t *evp; //  events marking the end of a job's copies (borrowed)
    kvt_pool_t *pool;          //  the pool jobs' leases / reservations belong to (may be NULL
                               //  when no job carries memory)
    kvt_holder_t holder;       //  the lane's pool holder (reset with the lane)
    const kvt_lane_ops_t *ops; //  how jobs are submitted (required)
    void *ops_arg;             //  argument of the ops
    uint64_t deadline_ns;      //  default job deadline, ns (0: KVT_LANE_DEADLINE_NS)
    uint64_t fence_timeout_ns; //  fence timeout, ns (0: KVT_LANE_FENCE_TIMEOUT_NS)
    uint64_t poll_ns;          //  re-query interval when the device cannot say when a copy
                               //  lands, ns (0: KVT_LANE_POLL_NS)
    uint32_t max_jobs;         //  jobs held at once, quarantined included (0: KVT_LANE_MAX_JOBS)
    kvt_lane_log_fn *log;      //  log sink (NULL: none)
    void *log_arg;             //  argument of log
} kvt_lane_cfg_t;

//  Why a report says what it says.
typedef enum {
    KVT_LANE_CAUSE_DONE = 0,     //  the copies landed (ok)
    KVT_LANE_CAUSE_SUBMIT = 1,   //  the submit failed (IO / INVALID)
    KVT_LANE_CAUSE_COPY = 2,     //  a copy failed on the device (IO)
    KVT_LANE_CAUSE_COMMIT = 3,   //  the reservation was stale at commit (TIMEOUT)
    KVT_LANE_CAUSE_DEADLINE = 4, //  the job's deadline passed (TIMEOUT)
    KVT_LANE_CAUSE_FENCE = 5,    //  a fence timed out: the lane failed (TIMEOUT)
    KVT_LANE_CAUSE_FAILED = 6,   //  refused: the lane has failed and was not reset (IO)
    KVT_LANE_CAUSE_SHUTDOWN = 7, //  the lane shut down first (SHUTDOWN)
    KVT_LANE_CAUSE_FULL = 8,     //  refused: max_jobs held (NO_SPACE)
} kvt_lane_cause_t;

//  A job's stage (kvt_lane_core_stage).
typedef enum {
    KVT_LANE_UNKNOWN = 0,    //  not held (never enqueued, or terminal and its memory gone)
    KVT_LANE_QUEUED = 1,     //  waiting for the submit slot
    KVT_LANE_SUBMITTING = 2, //  inside the submit op
    KVT_LANE_PENDING = 3,    //  copies queued, not landed
    KVT_LANE_TERMINAL = 4,   //  reported; its memory waits for a copy to end (quarantined)
} kvt_lane_stage_t;

typedef struct {
    bool fence;             //  false: a job's report; true: a fence's
    uint64_t id;            //  the job's or the fence's id
    bool ok;                //  job: its copies landed; fence: everything it covered ended
    uint32_t detail;        //  kvt_detail_t (KVT_DETAIL_OK when ok)
    kvt_lane_cause_t cause; //  why
    kvt_lane_stage_t stage; //  the stage the job (or, for a fence, the lane) was in
} kvt_lane_report_t;

//  What kvt_lane_core_submit_begin hands to the submitter.
typedef struct {
    uint64_t token;            //  names the job to kvt_lane_core_submit_end
    const kvt_lane_ops_t *ops; //  the lane's ops
    void *ops_arg;             //  their argument
    kvt_gpu_stream_t *stream;  //  the stream to queue on
    const kvt_lane_job_t *job; //  the job (valid until submit_end for this token)
} kvt_lane_submit_t;

typedef struct {
    uint64_t enqueued;         //  jobs accepted
    uint64_t ok;               //  jobs reported ok
    uint64_t failed;           //  jobs reported failed (every cause)
    uint64_t deadlines;        //  ... of which their deadline passed
    uint64_t submit_failed;    //  ... of which the submit failed
    uint64_t copy_failed;      //  ... of which a copy failed
    uint64_t fence_failed;     //  ... of which a fence timeout failed the lane under them
    uint64_t refused;          //  ... of which refused at once (failed lane, full, shut down)
    uint64_t shutdown;         //  ... of which the lane shut down first
    uint64_t late_returns;     //  submits that returned after their job had reported
    uint64_t fences_ok;        //  fences reported ok
    uint64_t fences_failed;    //  fences reported failed
    uint64_t lane_failures;    //  times the lane failed (fence timeouts)
    uint64_t resets;           //  kvt_lane_core_reset calls
    uint64_t quarantined;      //  jobs whose memory waits for a copy to end (gauge)
    uint64_t quarantine_freed; //  quarantined jobs whose memory was given back
    uint64_t left_to_holder;   //  quarantined handles left to the pool holder at destroy
    uint64_t unreported;       //  reports lost: no memory for the outbox
    uint64_t held;             //  jobs held now, every stage (gauge)
    uint64_t submit_skips;     //  held jobs a submit stepped over to find the next queued one
} kvt_lane_stats_t;

typedef struct _kvt_lane_core_t kvt_lane_core_t;

//  Validates the configuration and creates a core. NULL with a message
//  naming the setting in err.
kvt_lane_core_t *kvt_lane_core_new(const kvt_lane_cfg_t *cfg, char *err, size_t errlen);

//  Destroys the core (NULL-safe, nulls the pointer). No submit may be in
//  flight. Quarantined jobs' events go back to the pool (they may still be
//  pending); their leases and reservations are left to the pool holder
//  (counted in left_to_holder), never freed under a copy.
void kvt_lane_core_destroy(kvt_lane_core_t **self_p);

//  Accepts a job at time `now`. Refused at once (one failed report) when
//  the lane has failed, is shut down or holds max_jobs; its memory is then
//  given back (nothing was submitted).
void kvt_lane_core_enqueue(kvt_lane_core_t *self, const kvt_lane_job_t *job, uint64_t now);

//  Moves the oldest queued job to submitting and fills *out. False when no
//  job is queued or a submit is already in flight.
bool kvt_lane_core_submit_begin(kvt_lane_core_t *self, uint64_t now, kvt_lane_submit_t *out);

//  Runs the submit op of *sub. Touches no core state: call it without the
//  core's mutex. Returns what the op returned.
int kvt_lane_submit_run(const kvt_lane_submit_t *sub);

//  The submit for `token` returned `rc` at time `now`. If its job already
//  reported (deadline, fence timeout, shutdown), the result is dropped and
//  counted (late_returns); copies it queued are tracked until they end so
//  that its memory is given back only then. Otherwise the job becomes
//  pending (rc OK) or reports failed (rc < 0; its memory given back).
void kvt_lane_core_submit_end(kvt_lane_core_t *self, uint64_t token, int rc, uint64_t now);

//  Submits every queued job in the calling thread (begin, run, end), for a
//  caller whose submits never block. Returns how many ran.
uint32_t kvt_lane_core_pump(kvt_lane_core_t *self, uint64_t now);

//  The timer path: settles pending jobs whose copies ended, fires the
//  deadlines and fence timeouts that passed at `now` (a stuck submit
//  included), and gives back quarantined memory whose copies ended.
void kvt_lane_core_tick(kvt_lane_core_t *self, uint64_t now);

//  Issues fence `id` at time `now` over every job the lane holds. Reports
//  ok at once when it holds none; failed at once when the lane has failed
//  or is shut down.
void kvt_lane_core_fence(kvt_lane_core_t *self, uint64_t id, uint64_t now);

//  When kvt_lane_core_tick should run next: the earliest deadline, fence
//  timeout and copy wake (kvt_gpu_event_wake); UINT64_MAX when nothing is
//  held.
uint64_t kvt_lane_core_next_wake(kvt_lane_core_t *self, uint64_t now);

//  Clears a failure: resets the pool holder (its quarantined reservations
//  are freed a pool TTL later; its outstanding handles become orphans) and
//  accepts jobs again. `stream`, when not NULL, replaces the lane's stream
//  (a failed stream is recovered by a new one); quarantined jobs keep
//  tracking the stream their copies ran on. A shut-down lane stays shut.
//  Jobs still held keep running, but their handles are orphans now: a
//  reservation's commit answers ESTALE, so such a job reports failed
//  (KVT_LANE_CAUSE_COMMIT) — reset a lane once it failed, not under live jobs.
void kvt_lane_core_reset(kvt_lane_core_t *self, kvt_gpu_stream_t *stream, uint64_t now);

//  Shutdown (rule X4): every job reports (drained, or failed SHUTDOWN),
//  every open fence reports, later jobs and fences are refused. Call it
//  after waiting for the stream (kvt_gpu_stream_synchronize) so that what
//  can drain has. Returns the reports it made.
uint32_t kvt_lane_core_shutdown(kvt_lane_core_t *self, uint64_t now);

//  Jobs held that are queued or submitting and have not reported (O(1)):
//  a caller whose submits run on another thread polls while there are any.
uint32_t kvt_lane_core_unsubmitted(const kvt_lane_core_t *self);

//  True once the lane failed and until it is reset.
bool kvt_lane_core_failed(const kvt_lane_core_t *self);

//  The stage of the job with caller id `id` (the newest one with that id).
kvt_lane_stage_t kvt_lane_core_stage(const kvt_lane_core_t *self, uint64_t id);

//  Reports decided since the last kvt_lane_core_outbox_clear, in order (*n
//  of them; valid until the next core call).
const kvt_lane_report_t *kvt_lane_core_outbox(const kvt_lane_core_t *self, uint32_t *n);
void kvt_lane_core_outbox_clear(kvt_lane_core_t *self);

//  Removes the oldest `k` reports from the outbox (all of them when k is
//  larger), keeping the rest in order.
void kvt_lane_core_outbox_consume(kvt_lane_core_t *self, uint32_t k);

//  Snapshot of the counters.
void kvt_lane_core_stats(const kvt_lane_core_t *self, kvt_lane_stats_t *out);

#endif
