/*  kvt_lane_core — see kvt_lane_core.h.

    Every job the lane holds is on one list in enqueue order (its seq), in
    any stage; a job that already reported but whose copies may still run
    (quarantined) stays on it until they end. So the oldest job still held
    is the list's head, and a fence issued when the newest seq was S is done
    exactly when the head's seq is > S (or nothing is held).

    The timer path does O(1) work per event, not a walk over every job:
    * copies on one stream land in order, and jobs are submitted in seq
      order, so the pass that settles landed copies walks from the head and
      stops at the first job whose copies have not ended on the lane's
      current stream (jobs a reset left on an older stream are stepped over)
      or that is not submitted yet;
    * the deadlines of the jobs that have not reported are a min-heap
      (kvt_heap) by (deadline, seq); a job leaves it when it reports;
    * fences are issued in time order with one timeout, so the oldest open
      fence has the earliest deadline;
    * a submit takes the oldest queued job from a cursor (the queued jobs
      are the list's suffix), not by walking the pending ones before it. */
#include "kvt_lane_core.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kvt_heap.h"
#include "base/kvt_logf.h"
#include "kvtier/kvt_msg.h"

typedef struct s_job {
    kvt_lane_job_t j;          //  the job as enqueued (mem handles cleared once given back)
    uint64_t seq;              //  enqueue order, also the submit token
    uint64_t deadline_at;      //  when it times out if not terminal
    kvt_lane_stage_t stage;    //  QUEUED, SUBMITTING or PENDING (where its copies are)
    bool reported;             //  its one report went out (it is quarantined if still held)
    bool given;                //  its memory went back (give_back op called, or pool calls made)
    kvt_gpu_stream_t *stream;  //  the stream its submit queued on (NULL: not submitted, or
                               //  its submit queued nothing)
    kvt_gpu_event_t *event;    //  marks the end of its copies; NULL: the stream is queried
    uint32_t hpos;             //  index in the deadline heap (UINT32_MAX: not in it)
    struct s_job *prev, *next; //  the held list, in seq order
} s_job_t;

typedef struct s_fence {
    uint64_t id;          //  the caller's fence id
    uint64_t seq_hi;      //  covers every held job with seq <= seq_hi
    uint64_t deadline_at; //  when it times out (the lane then fails)
    struct s_fence *next; //  open fences, oldest first
} s_fence_t;

struct _kvt_lane_core_t {
    kvt_lane_cfg_t c;       //  configuration (borrowed handles, defaults filled)
    char name[48];          //  lane name for logs
    s_job_t *head, *tail;   //  held jobs, oldest first
    s_job_t *queued;        //  the first held job still queued (NULL: none); every job
                            //  before it has been submitted, so a submit starts here
    uint32_t nheld;         //  jobs held (every stage, quarantined included)
    uint32_t nquar;         //  held jobs that already reported
    uint32_t nwait;         //  held jobs queued or submitting that have not reported
    s_job_t *inflight;      //  the job whose submit is in flight (NULL: none)
    uint64_t next_seq;      //  seq of the next job (first is 1)
    s_fence_t *fences;      //  open fences, oldest first
    bool failed;            //  a fence timed out; refuse everything until reset
    bool fail_logged;       //  the failure was logged (once per failure)
    bool closed;            //  shut down
    kvt_lane_report_t *out; //  outbox
    uint32_t nout, outcap;  //  reports in it, slots
    uint64_t reports;       //  reports made, ever
    s_job_t **dl;           //  deadline heap: jobs that have not reported, by (deadline, seq)
    uint32_t ndl, dlcap;    //  entries in it, slots
    kvt_lane_stats_t st;    //  counters
};

//  Logs through the configured sink (no newline in fmt).
#define s_log(self, level, ...) kvt_logf((self)->c.log, (self)->c.log_arg, (level), __VA_ARGS__)

// ------------------------------------------------------ deadline heap ----

static bool s_dl_less(const void *a, const void *b, void *ctx)
{
    (void)ctx;
    const s_job_t *x = *(s_job_t *const *)a, *y = *(s_job_t *const *)b;
    if (x->deadline_at != y->deadline_at)
        return x->deadline_at < y->deadline_at;
    return x->seq < y->seq;
}

static void s_dl_moved(void *elem, uint32_t pos, void *ctx)
{
    (void)ctx;
    (*(s_job_t **)elem)->hpos = pos;
}

static const kvt_heap_ops_t s_dl_ops = {
    .size = sizeof(s_job_t *), .less = s_dl_less, .moved = s_dl_moved};

static void s_dl_remove(kvt_lane_core_t *self, s_job_t *job)
{
    if (job->hpos == UINT32_MAX)
        return;
    kvt_heap_remove(self->dl, &self->ndl, &s_dl_ops, NULL, job->hpos, NULL);
    job->hpos = UINT32_MAX;
}

// ------------------------------------------------------------- outbox ----

static void s_push(kvt_lane_core_t *self, const kvt_lane_report_t *r)
{
    self->reports++;
    if (self->nout == self->outcap) {
        uint32_t cap = self->outcap ? self->outcap * 2 : 64;
        kvt_lane_report_t *out = realloc(self->out, (size_t)cap * sizeof *out);
        if (!out) {
            self->st.unreported++;
            s_log(self, 0, "%s: out of memory: the report of %llu is lost", self->name,
                  (unsigned long long)r->id);
            return;
        }
        self->out = out;
        self->outcap = cap;
    }
    self->out[self->nout++] = *r;
}

static uint32_t s_detail(kvt_lane_cause_t cause, int rc)
{
    switch (cause) {
    case KVT_LANE_CAUSE_DONE:
        return KVT_DETAIL_OK;
    case KVT_LANE_CAUSE_SUBMIT:
        return rc == KVT_GPU_EINVAL ? KVT_DETAIL_INVALID : KVT_DETAIL_IO;
    case KVT_LANE_CAUSE_COMMIT:
    case KVT_LANE_CAUSE_DEADLINE:
    case KVT_LANE_CAUSE_FENCE:
        return KVT_DETAIL_TIMEOUT;
    case KVT_LANE_CAUSE_SHUTDOWN:
        return KVT_DETAIL_SHUTDOWN;
    case KVT_LANE_CAUSE_FULL:
        return KVT_DETAIL_NO_SPACE;
    case KVT_LANE_CAUSE_COPY:
    case KVT_LANE_CAUSE_FAILED:
    default:
        return KVT_DETAIL_IO;
    }
}

//  A job's one report. Every path that ends a job comes through here.
static void s_report_job(kvt_lane_core_t *self, s_job_t *job, kvt_lane_cause_t cause, int rc)
{
    assert(!job->reported);
    job->reported = true;
    s_dl_remove(self, job);
    self->nquar++; //  until it is unlinked: quarantined if it stays held
    if (job->stage != KVT_LANE_PENDING)
        self->nwait--;
    bool ok = cause == KVT_LANE_CAUSE_DONE;
    kvt_lane_report_t r = {.fence = false,
                           .id = job->j.id,
                           .ok = ok,
                           .detail = s_detail(cause, rc),
                           .cause = cause,
                           .stage = job->stage};
    s_push(self, &r);
    if (ok) {
        self->st.ok++;
        return;
    }
    self->st.failed++;
    if (cause == KVT_LANE_CAUSE_DEADLINE)
        self->st.deadlines++;
    else if (cause == KVT_LANE_CAUSE_SUBMIT)
        self->st.submit_failed++;
    else if (cause == KVT_LANE_CAUSE_COPY)
        self->st.copy_failed++;
    else if (cause == KVT_LANE_CAUSE_FENCE)
        self->st.fence_failed++;
    else if (cause == KVT_LANE_CAUSE_SHUTDOWN)
        self->st.shutdown++;
}

static void s_report_fence(kvt_lane_core_t *self, uint64_t id, kvt_lane_cause_t cause)
{
    bool ok = cause == KVT_LANE_CAUSE_DONE;
    kvt_lane_report_t r = {.fence = true,
                           .id = id,
                           .ok = ok,
                           .detail = s_detail(cause, 0),
                           .cause = cause,
                           .stage = KVT_LANE_UNKNOWN};
    s_push(self, &r);
    if (ok)
        self->st.fences_ok++;
    else
        self->st.fences_failed++;
}

const kvt_lane_report_t *kvt_lane_core_outbox(const kvt_lane_core_t *self, uint32_t *n)
{
    *n = self->nout;
    return self->out;
}

void kvt_lane_core_outbox_clear(kvt_lane_core_t *self)
{
    self->nout = 0;
}

void kvt_lane_core_outbox_consume(kvt_lane_core_t *self, uint32_t k)
{
    if (k >= self->nout) {
        self->nout = 0;
        return;
    }
    memmove(self->out, self->out + k, (size_t)(self->nout - k) * sizeof *self->out);
    self->nout -= k;
}

// ------------------------------------------------------------- memory ----

//  Gives a job's memory back once nothing runs that touches it. `ok`: its
//  copies landed and succeeded, so a reservation is committed; otherwise it
//  is aborted. Returns false when a handle was stale (the pool reclaimed it
//  under the copy: its bytes cannot be trusted).
static bool s_mem_give_back(kvt_lane_core_t *self, const kvt_lane_job_t *j, kvt_lane_mem_t *mem,
                            bool *given, bool ok)
{
    if (*given)
        return true;
    *given = true;
    if (self->c.ops->give_back)
        return self->c.ops->give_back(self->c.ops_arg, j,
                                      ok ? KVT_LANE_GIVE_COMMIT : KVT_LANE_GIVE_ABORT);
    int rc = KVT_STORE_OK;
    if (mem->kind == KVT_LANE_MEM_LEASE)
        rc = kvt_pool_release(self->c.pool, &mem->lease);
    else if (mem->kind == KVT_LANE_MEM_RESV)
        rc = ok ? kvt_pool_commit(self->c.pool, &mem->resv, NULL)
                : kvt_pool_abort(self->c.pool, &mem->resv);
    mem->kind = KVT_LANE_MEM_NONE;
    return rc == KVT_STORE_OK;
}

// --------------------------------------------------------------- jobs ----

static void s_unlink(kvt_lane_core_t *self, s_job_t *job)
{
    if (self->queued == job)
        self->queued = job->next;
    if (job->prev)
        job->prev->next = job->next;
    else
        self->head = job->next;
    if (job->next)
        job->next->prev = job->prev;
    else
        self->tail = job->prev;
    self->nheld--;
    if (job->reported)
        self->nquar--;
}

static void s_free_job(kvt_lane_core_t *self, s_job_t *job)
{
    s_unlink(self, job);
    if (job->event)
        kvt_gpu_event_pool_put(self->c.evp, &job->event);
    free(job);
}

//  The copies of `job` ended: 0 (done), KVT_GPU_NOT_READY, or an error.
//  A job that never queued a copy has ended.
static int s_copies(s_job_t *job)
{
    if (!job->stream)
        return KVT_GPU_OK;
    int st = job->event ? kvt_gpu_event_query(job->event) : kvt_gpu_stream_query(job->stream);
    return st == KVT_GPU_NOT_READY ? st : st == KVT_GPU_OK ? KVT_GPU_OK : KVT_GPU_EFAULT;
}

//  Ends a job whose copies landed ok: its memory goes back first (a stale
//  handle turns the report into a failure), then it reports and is freed.
static void s_finish_ok(kvt_lane_core_t *self, s_job_t *job)
{
    bool fresh = s_mem_give_back(self, &job->j, &job->j.mem, &job->given, true);
    s_report_job(self, job, fresh ? KVT_LANE_CAUSE_DONE : KVT_LANE_CAUSE_COMMIT, 0);
    s_free_job(self, job);
}

//  Ends a job failed. Its memory goes back only when no copy of it can be
//  running (never submitted, a refused submit, copies ended); otherwise it
//  stays held, quarantined, until they end (kvt_lane_core_tick) or its
//  stuck submit returns (kvt_lane_core_submit_end).
static void s_finish_fail(kvt_lane_core_t *self, s_job_t *job, kvt_lane_cause_t cause, int rc)
{
    s_report_job(self, job, cause, rc);
    bool running = job == self->inflight ||
                   (job->stage == KVT_LANE_PENDING && s_copies(job) == KVT_GPU_NOT_READY);
    if (running)
        return;
    s_mem_give_back(self, &job->j, &job->j.mem, &job->given, false);
    s_free_job(self, job);
}

//  A quarantined job whose copies ended gives its memory back.
static void s_unquarantine(kvt_lane_core_t *self, s_job_t *job)
{
    s_mem_give_back(self, &job->j, &job->j.mem, &job->given, false);
    self->st.quarantine_freed++;
    s_free_job(self, job);
}

//  Refuses a job at enqueue: one failed report, its memory given back.
static void s_refuse(kvt_lane_core_t *self, const kvt_lane_job_t *j, kvt_lane_cause_t cause)
{
    kvt_lane_report_t r = {.fence = false,
                           .id = j->id,
                           .ok = false,
                           .detail = s_detail(cause, 0),
                           .cause = cause,
                           .stage = KVT_LANE_QUEUED};
    s_push(self, &r);
    self->st.failed++;
    self->st.refused++;
    kvt_lane_mem_t mem = j->mem;
    bool given = false;
    if (self->c.pool || self->c.ops->give_back)
        s_mem_give_back(self, j, &mem, &given, false);
}

void kvt_lane_core_enqueue(kvt_lane_core_t *self, const kvt_lane_job_t *j, uint64_t now)
{
    if (self->closed) {
        s_refuse(self, j, KVT_LANE_CAUSE_SHUTDOWN);
        return;
    }
    if (self->failed) {
        //  Fail-stop: the failure was logged once; refusals are counted.
        s_refuse(self, j, KVT_LANE_CAUSE_FAILED);
        return;
    }
    if (j->mem.kind != KVT_LANE_MEM_NONE && !self->c.pool && !self->c.ops->give_back) {
        s_log(self, 1, "%s: job %llu carries memory but the lane has no pool", self->name,
              (unsigned long long)j->id);
        kvt_lane_report_t r = {
            false, j->id, false, KVT_DETAIL_INVALID, KVT_LANE_CAUSE_SUBMIT, KVT_LANE_QUEUED};
        s_push(self, &r);
        self->st.failed++;
        self->st.refused++;
        return;
    }
    if (self->ndl == self->dlcap && self->nheld < self->c.max_jobs) {
        uint32_t cap = self->dlcap ? self->dlcap * 2 : 64;
        s_job_t **dl = realloc(self->dl, (size_t)cap * sizeof *dl);
        if (dl) {
            self->dl = dl;
            self->dlcap = cap;
        }
    }
    s_job_t *job =
        self->nheld < self->c.max_jobs && self->ndl < self->dlcap ? calloc(1, sizeof *job) : NULL;
    if (!job) {
        s_refuse(self, j, KVT_LANE_CAUSE_FULL);
        return;
    }
    job->j = *j;
    job->seq = self->next_seq++;
    uint64_t d = j->deadline_ns ? j->deadline_ns : self->c.deadline_ns;
    job->deadline_at = now + d < now ? UINT64_MAX : now + d;
    job->stage = KVT_LANE_QUEUED;
    kvt_heap_push(self->dl, &self->ndl, &s_dl_ops, NULL, &job);
    job->prev = self->tail;
    if (self->tail)
        self->tail->next = job;
    else
        self->head = job;
    self->tail = job;
    if (!self->queued)
        self->queued = job;
    self->nheld++;
    self->nwait++;
    self->st.enqueued++;
}

// ------------------------------------------------------------- submit ----

bool kvt_lane_core_submit_begin(kvt_lane_core_t *self, uint64_t now, kvt_lane_submit_t *out)
{
    (void)now;
    if (self->inflight || self->closed || self->failed)
        return false;
    //  Jobs are submitted in seq order and enter at the tail, so the queued
    //  ones are a suffix of the held list: no walk over the pending ones.
    s_job_t *job = self->queued;
    while (job && (job->stage != KVT_LANE_QUEUED || job->reported)) {
        job = job->next;
        self->st.submit_skips++;
    }
    self->queued = job;
    if (!job)
        return false;
    self->queued = job->next;
    job->stage = KVT_LANE_SUBMITTING;
    job->stream = self->c.stream; //  its copies run here, even if a reset swaps the stream
    self->inflight = job;
    out->token = job->seq;
    out->ops = self->c.ops;
    out->ops_arg = self->c.ops_arg;
    out->stream = self->c.stream;
    out->job = &job->j;
    return true;
}

int kvt_lane_submit_run(const kvt_lane_submit_t *sub)
{
    return sub->ops->submit(sub->ops_arg, sub->stream, sub->job);
}

//  Tracks the copies a returned submit queued: an event recorded after
//  them, or (no event could be had) the stream, which covers later copies
//  too, so the job may end late, never early.
static void s_track(kvt_lane_core_t *self, s_job_t *job)
{
    job->event = kvt_gpu_event_pool_get(self->c.evp);
    if (job->event && kvt_gpu_event_record(job->event, job->stream) != KVT_GPU_OK)
        kvt_gpu_event_pool_put(self->c.evp, &job->event);
}

static void s_check_fences(kvt_lane_core_t *self);

void kvt_lane_core_submit_end(kvt_lane_core_t *self, uint64_t token, int rc, uint64_t now)
{
    (void)now;
    s_job_t *job = self->inflight;
    if (!job || job->seq != token) {
        s_log(self, 0, "%s: submit_end for token %llu, which is not in flight", self->name,
              (unsigned long long)token);
        return;
    }
    self->inflight = NULL;
    if (job->reported) {
        //  Its deadline, a fence timeout or shutdown reported it while the
        //  submit was stuck: the result is dropped. Copies it queued may
        //  still run into its memory, so it stays quarantined until they end.
        self->st.late_returns++;
        s_log(self, 1, "%s: the submit of job %llu returned (%s) after it had reported; dropped",
              self->name, (unsigned long long)job->j.id, kvt_gpu_strerror(rc));
        if (rc == KVT_GPU_OK) {
            s_track(self, job);
            job->stage = KVT_LANE_PENDING;
        } else {
            job->stream = NULL;
            s_unquarantine(self, job);
        }
        s_check_fences(self);
        return;
    }
    if (rc != KVT_GPU_OK) {
        //  A refused submit left nothing running (kvt_gpu.h): memory goes back.
        s_log(self, 1, "%s: submit of job %llu failed: %s", self->name,
              (unsigned long long)job->j.id, kvt_gpu_strerror(rc));
        job->stream = NULL;
        s_finish_fail(self, job, KVT_LANE_CAUSE_SUBMIT, rc);
        s_check_fences(self);
        return;
    }
    s_track(self, job);
    job->stage = KVT_LANE_PENDING;
    self->nwait--;
}

uint32_t kvt_lane_core_pump(kvt_lane_core_t *self, uint64_t now)
{
    uint32_t n = 0;
    kvt_lane_submit_t sub;
    while (kvt_lane_core_submit_begin(self, now, &sub)) {
        kvt_lane_core_submit_end(self, sub.token, kvt_lane_submit_run(&sub), now);
        n++;
    }
    return n;
}

// ------------------------------------------------------------- fences ----

//  Reports the fences whose covered jobs have all ended.
static void s_check_fences(kvt_lane_core_t *self)
{
    uint64_t oldest = self->head ? self->head->seq : UINT64_MAX;
    while (self->fences && self->fences->seq_hi < oldest) {
        s_fence_t *f = self->fences;
        self->fences = f->next;
        s_report_fence(self, f->id, KVT_LANE_CAUSE_DONE);
        free(f);
    }
}

void kvt_lane_core_fence(kvt_lane_core_t *self, uint64_t id, uint64_t now)
{
    if (self->closed || self->failed) {
        s_report_fence(self, id, self->closed ? KVT_LANE_CAUSE_SHUTDOWN : KVT_LANE_CAUSE_FAILED);
        return;
    }
    if (!self->head) {
        s_report_fence(self, id, KVT_LANE_CAUSE_DONE);
        return;
    }
    s_fence_t *f = calloc(1, sizeof *f);
    if (!f) {
        s_report_fence(self, id, KVT_LANE_CAUSE_FULL);
        return;
    }
    f->id = id;
    f->seq_hi = self->next_seq - 1;
    f->deadline_at =
        now + self->c.fence_timeout_ns < now ? UINT64_MAX : now + self->c.fence_timeout_ns;
    s_fence_t **pp = &self->fences;
    while (*pp)
        pp = &(*pp)->next;
    *pp = f;
}

//  Fail-stop (rules X1, X3): a fence timed out. Everything the lane holds
//  reports failed, every open fence too; one error is logged; the lane
//  refuses everything until it is reset.
static void s_fail_lane(kvt_lane_core_t *self, uint64_t fence_id)
{
    self->failed = true;
    self->st.lane_failures++;
    uint32_t jobs = 0;
    for (s_job_t *job = self->head, *next; job; job = next) {
        next = job->next;
        if (job->reported)
            continue;
        jobs++;
        s_finish_fail(self, job, KVT_LANE_CAUSE_FENCE, 0);
    }
    uint32_t fences = 0;
    while (self->fences) {
        s_fence_t *f = self->fences;
        self->fences = f->next;
        s_report_fence(self, f->id, KVT_LANE_CAUSE_FENCE);
        free(f);
        fences++;
    }
    if (!self->fail_logged) {
        self->fail_logged = true;
        s_log(self, 0,
              "%s: fence %llu timed out: lane failed; %u job(s) and %u fence(s) reported "
              "failed, every later job is refused until the lane is reset",
              self->name, (unsigned long long)fence_id, jobs, fences);
    }
}

// --------------------------------------------------------------- timer ----

//  What the stream says settles `job`, if it can: a reported (quarantined)
//  job's memory goes back once its copies ended (a job still inside a stuck
//  submit waits for submit_end); a pending job whose copies landed reports
//  ok, one whose copy failed reports the failure (logged when `log`). True
//  when the job needs nothing more this pass.
static bool s_settle_landed(kvt_lane_core_t *self, s_job_t *job, bool log)
{
    if (job->reported) {
        if (job != self->inflight && s_copies(job) != KVT_GPU_NOT_READY)
            s_unquarantine(self, job);
        return true;
    }
    if (job->stage != KVT_LANE_PENDING)
        return false;
    int st = s_copies(job);
    if (st == KVT_GPU_OK) {
        s_finish_ok(self, job);
        return true;
    }
    if (st == KVT_GPU_NOT_READY)
        return false;
    if (log)
        s_log(self, 1, "%s: a copy of job %llu failed", self->name, (unsigned long long)job->j.id);
    s_finish_fail(self, job, KVT_LANE_CAUSE_COPY, st);
    return true;
}

//  The jobs whose copies may have ended, oldest first: from the head, up
//  to the first job not submitted yet (nothing after it is) or whose copies
//  have not ended on the lane's current stream (nothing after it on that
//  stream has landed either). `visit` is called for each; it may free the
//  job, and returns false to stop. Returns the job the walk stopped at
//  (NULL: the end).
typedef bool(s_visit_fn)(kvt_lane_core_t *self, s_job_t *job, void *arg);

static s_job_t *s_walk_landed(kvt_lane_core_t *self, s_visit_fn *visit, void *arg)
{
    for (s_job_t *job = self->head, *next; job; job = next) {
        next = job->next;
        if (job == self->inflight || (!job->reported && job->stage != KVT_LANE_PENDING))
            return job;
        if (s_copies(job) == KVT_GPU_NOT_READY) {
            if (job->stream == self->c.stream)
                return job;
            continue; //  left on an older stream by a reset
        }
        if (!visit(self, job, arg))
            return job;
    }
    return NULL;
}

static bool s_visit_settle(kvt_lane_core_t *self, s_job_t *job, void *arg)
{
    (void)arg;
    s_settle_landed(self, job, true);
    return true;
}

void kvt_lane_core_tick(kvt_lane_core_t *self, uint64_t now)
{
    s_walk_landed(self, s_visit_settle, NULL);
    //  Every stage, a submit that has not returned included (rule X2).
    while (self->ndl && now >= self->dl[0]->deadline_at)
        s_finish_fail(self, self->dl[0], KVT_LANE_CAUSE_DEADLINE, 0);
    s_check_fences(self);
    if (self->fences && now >= self->fences->deadline_at)
        s_fail_lane(self, self->fences->id);
}

//  A job whose copies ended was found: the caller should tick now.
static bool s_visit_found(kvt_lane_core_t *self, s_job_t *job, void *arg)
{
    (void)self;
    (void)job;
    *(bool *)arg = true;
    return false;
}

uint64_t kvt_lane_core_next_wake(kvt_lane_core_t *self, uint64_t now)
{
    uint64_t at = UINT64_MAX;
    bool landed = false;
    s_job_t *job = s_walk_landed(self, s_visit_found, &landed);
    if (landed)
        return now;
    //  Copies a reset left on an older stream are polled.
    for (s_job_t *q = self->head; q && q != job; q = q->next)
        if (q->stream && q->stream != self->c.stream && now + self->c.poll_ns < at)
            at = now + self->c.poll_ns;
    if (job && job->stream && job->stage == KVT_LANE_PENDING && job != self->inflight) {
        uint64_t w = job->event ? kvt_gpu_event_wake(job->event, now, self->c.poll_ns)
                                : now + self->c.poll_ns;
        if (w < at)
            at = w;
    }
    if (self->ndl && self->dl[0]->deadline_at < at)
        at = self->dl[0]->deadline_at;
    if (self->fences && self->fences->deadline_at < at)
        at = self->fences->deadline_at;
    return at == UINT64_MAX || at >= now ? at : now;
}

// ------------------------------------------------------ reset, shutdown ----

void kvt_lane_core_reset(kvt_lane_core_t *self, kvt_gpu_stream_t *stream, uint64_t now)
{
    (void)now;
    self->st.resets++;
    if (self->c.pool && self->c.holder)
        kvt_pool_holder_reset(self->c.pool, self->c.holder);
    if (stream)
        self->c.stream = stream;
    if (self->failed)
        s_log(self, 2, "%s: reset; accepting jobs again", self->name);
    self->failed = false;
    self->fail_logged = false;
}

uint32_t kvt_lane_core_shutdown(kvt_lane_core_t *self, uint64_t now)
{
    (void)now;
    uint64_t before = self->reports;
    self->closed = true;
    for (s_job_t *job = self->head, *next; job; job = next) {
        next = job->next;
        if (s_settle_landed(self, job, false)) //  a pending job that drained reports its result
            continue;
        //  Queued: never submitted, its memory goes back. Submitting, or
        //  pending behind a stream that did not drain: quarantined.
        s_finish_fail(self, job, KVT_LANE_CAUSE_SHUTDOWN, 0);
    }
    s_check_fences(self);
    while (self->fences) {
        s_fence_t *f = self->fences;
        self->fences = f->next;
        s_report_fence(self, f->id, KVT_LANE_CAUSE_SHUTDOWN);
        free(f);
    }
    if (self->nquar)
        s_log(self, 1,
              "%s: shut down with %u job(s) whose copies have not ended; their memory "
              "is kept",
              self->name, self->nquar);
    return (uint32_t)(self->reports - before);
}

// ---------------------------------------------------------- lifecycle ----

kvt_lane_core_t *kvt_lane_core_new(const kvt_lane_cfg_t *cfg, char *err, size_t errlen)
{
    const char *bad = NULL;
    if (!cfg->stream)
        bad = "stream: required";
    else if (!cfg->evp)
        bad = "evp: required";
    else if (!cfg->ops || !cfg->ops->submit)
        bad = "ops: a submit op is required";
    else if (cfg->pool && cfg->holder == 0)
        bad = "holder: required with a pool";
    if (bad) {
        snprintf(err, errlen, "%s", bad);
        return NULL;
    }
    kvt_lane_core_t *self = calloc(1, sizeof *self);
    if (!self) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    self->c = *cfg;
    snprintf(self->name, sizeof self->name, "%s", cfg->name ? cfg->name : "lane");
    self->c.name = self->name;
    if (!self->c.deadline_ns)
        self->c.deadline_ns = KVT_LANE_DEADLINE_NS;
    if (!self->c.fence_timeout_ns)
        self->c.fence_timeout_ns = KVT_LANE_FENCE_TIMEOUT_NS;
    if (!self->c.poll_ns)
        self->c.poll_ns = KVT_LANE_POLL_NS;
    if (!self->c.max_jobs)
        self->c.max_jobs = KVT_LANE_MAX_JOBS;
    self->next_seq = 1;
    return self;
}

void kvt_lane_core_destroy(kvt_lane_core_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kvt_lane_core_t *self = *self_p;
    assert(self->inflight == NULL); //  rule 5: no submit in flight
    while (self->head) {
        s_job_t *job = self->head;
        if (self->c.ops->give_back && !job->given) {
            job->given = true;
            self->c.ops->give_back(self->c.ops_arg, &job->j, KVT_LANE_GIVE_LEAVE);
            self->st.left_to_holder++;
        } else if (job->j.mem.kind != KVT_LANE_MEM_NONE) {
            self->st.left_to_holder++;
        }
        s_free_job(self, job);
    }
    while (self->fences) {
        s_fence_t *f = self->fences;
        self->fences = f->next;
        free(f);
    }
    free(self->out);
    free(self->dl);
    free(self);
    *self_p = NULL;
}

uint32_t kvt_lane_core_unsubmitted(const kvt_lane_core_t *self)
{
    return self->nwait;
}

bool kvt_lane_core_failed(const kvt_lane_core_t *self)
{
    return self->failed;
}

kvt_lane_stage_t kvt_lane_core_stage(const kvt_lane_core_t *self, uint64_t id)
{
    for (const s_job_t *job = self->tail; job; job = job->prev)
        if (job->j.id == id)
            return job->reported ? KVT_LANE_TERMINAL : job->stage;
    return KVT_LANE_UNKNOWN;
}

void kvt_lane_core_stats(const kvt_lane_core_t *self, kvt_lane_stats_t *out)
{
    *out = self->st;
    out->quarantined = self->nquar;
    out->held = self->nheld;
}
