/*  The transfer lane's core driven directly, on a host device (SIM on a
    test clock; LIVE for the threaded stuck submit) and a real CPU pool on
    the same clock: fences over every stage, fence timeouts that fail the
    lane, deadlines that fire while a submit is stuck, refusals until reset,
    the pool holder reset, and shutdown that drains before it frees. Every
    report is counted by id, so a second report of any job, or a missing
    one, fails the test. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "actors/lane/kvt_lane_core.h"
#include "actors/lane/kvt_lane_runner.h"
#include "kvtier/kvt_gpu.h"
#include "kvtier/kvt_msg.h"
#include "kvtier/kvt_pool.h"

#define NB    16   //  device blocks
#define BB    1000 //  bytes per block (one plane, one layer)
#define NS_ID 7    //  namespace of the test's objects
#define MS    1000000ull

//  What a job's submit copies: one block gathered into `dst`.
typedef struct {
    uint32_t block; //  device block
    void *dst;      //  the reservation's bytes
} tjob_t;

typedef struct {
    kvt_lane_report_t r; //  the report
    uint64_t at;         //  test clock when the core decided it
} got_t;

typedef struct {
    uint64_t now;              //  the test clock (device, pool; passed to the core)
    kvt_gpu_t *gpu;            //  host device
    kvt_gpu_stream_t *s;       //  the lane's stream
    kvt_gpu_event_pool_t *evp; //  events
    kvt_pool_t *pool;          //  CPU pool on the same clock
    kvt_holder_t holder;       //  the lane's holder
    kvt_lane_core_t *lane;     //  under test
    kvt_lane_ops_t ops;        //  its submit
    int fail_submit;           //  the next submit returns this instead of copying (0: copy)
    uint32_t submits;          //  submit ops run
    tjob_t tj[64];             //  job payloads by id
    got_t got[256];            //  reports drained so far
    uint32_t ngot;             //  entries
    uint32_t errors_logged;    //  level-0 log lines
} rig_t;

static rig_t R;

static uint64_t s_now(void *arg)
{
    (void)arg;
    return R.now;
}

static void s_mute(void *arg, int level, const char *line)
{
    (void)arg;
    (void)level;
    (void)line;
}

static void s_lane_log(void *arg, int level, const char *line)
{
    (void)arg;
    (void)line;
    if (level == 0)
        R.errors_logged++;
}

static int s_submit(void *arg, kvt_gpu_stream_t *s, const kvt_lane_job_t *job)
{
    (void)arg;
    R.submits++;
    if (R.fail_submit) {
        int rc = R.fail_submit;
        R.fail_submit = 0;
        return rc;
    }
    const tjob_t *t = job->arg;
    return kvt_gpu_gather(s, &t->block, 1, t->dst, BB);
}

//  A SIM device (1 byte/ns, 1 µs per copy: one block lands 2 µs after it
//  is queued), a pool with a 1 ms TTL, a lane with the given deadline and
//  fence timeout (0: defaults) and max_jobs.
static void up(uint64_t deadline_ns, uint64_t fence_ns, uint32_t max_jobs)
{
    memset(&R, 0, sizeof R);
    R.now = 1000;
    kvt_gpu_opts_t go = {.backend = KVT_GPU_BACKEND_HOST,
                         .host_mode = KVT_GPU_HOST_SIM,
                         .now = s_now,
                         .sim_bandwidth_Bps = 1000000000ull,
                         .sim_latency_ns = 1000,
                         .sim_entry_ns = KVT_GPU_SIM_ZERO_LATENCY,
                         .log = s_mute};
    R.gpu = kvt_gpu_new(&go);
    cr_assert_not_null(R.gpu);
    kvt_gpu_plane_desc_t pd = {.name = "K", .layers = 1, .num_blocks = NB, .block_bytes = BB};
    cr_assert_eq(kvt_gpu_plane_add(R.gpu, &pd), 0);
    for (uint32_t b = 0; b < NB; b++)
        memset(kvt_gpu_plane_ptr(R.gpu, 0, 0, b), 0x40 + (int)b, BB);
    R.s = kvt_gpu_stream_new(R.gpu, "lane");
    R.evp = kvt_gpu_event_pool_new(R.gpu);
    cr_assert(R.s && R.evp);
    kvt_pool_config_t pc;
    kvt_pool_config_defaults(&pc);
    pc.capacity_bytes = 256 * 1024;
    pc.align = 64;
    pc.ttl_ms = 1;
    pc.clock = s_now;
    pc.log = s_mute;
    char err[128];
    R.pool = kvt_pool_new(&pc, err, sizeof err);
    cr_assert_not_null(R.pool, "%s", err);
    cr_assert_eq(kvt_pool_holder_add(R.pool, "lane", &R.holder), 0);
    R.ops.submit = s_submit;
    kvt_lane_cfg_t lc = {.name = "test",
                         .stream = R.s,
                         .evp = R.evp,
                         .pool = R.pool,
                         .holder = R.holder,
                         .ops = &R.ops,
                         .deadline_ns = deadline_ns,
                         .fence_timeout_ns = fence_ns,
                         .max_jobs = max_jobs,
                         .log = s_lane_log};
    R.lane = kvt_lane_core_new(&lc, err, sizeof err);
    cr_assert_not_null(R.lane, "%s", err);
}

static void down(void)
{
    kvt_lane_core_destroy(&R.lane);
    kvt_gpu_event_pool_destroy(&R.evp);
    kvt_gpu_stream_destroy(&R.s);
    kvt_gpu_destroy(&R.gpu);
    kvt_pool_destroy(&R.pool);
}

//  Moves the core's outbox into R.got.
static void drain(void)
{
    uint32_t n;
    const kvt_lane_report_t *out = kvt_lane_core_outbox(R.lane, &n);
    for (uint32_t i = 0; i < n; i++) {
        cr_assert_lt(R.ngot, 256);
        R.got[R.ngot].r = out[i];
        R.got[R.ngot++].at = R.now;
    }
    kvt_lane_core_outbox_clear(R.lane);
}

static uint32_t count(bool fence, uint64_t id)
{
    uint32_t c = 0;
    for (uint32_t i = 0; i < R.ngot; i++)
        c += R.got[i].r.fence == fence && R.got[i].r.id == id;
    return c;
}

//  The one report of job (fence) `id`; fails unless there is exactly one.
static const kvt_lane_report_t *one(bool fence, uint64_t id)
{
    cr_assert_eq(count(fence, id), 1, "%s %llu reported %u times", fence ? "fence" : "job",
                 (unsigned long long)id, count(fence, id));
    for (uint32_t i = 0; i < R.ngot; i++)
        if (R.got[i].r.fence == fence && R.got[i].r.id == id)
            return &R.got[i].r;
    return NULL;
}

//  Position of the report in arrival order.
static uint32_t pos(bool fence, uint64_t id)
{
    for (uint32_t i = 0; i < R.ngot; i++)
        if (R.got[i].r.fence == fence && R.got[i].r.id == id)
            return i;
    return UINT32_MAX;
}

//  Job `id` gathering block `block` into a fresh reservation of the lane's
//  holder; deadline 0: the lane's.
static void job(uint64_t id, uint32_t block, uint64_t deadline_ns)
{
    cr_assert_lt(id, 64);
    kvt_lane_job_t j = {.id = id, .deadline_ns = deadline_ns, .arg = &R.tj[id]};
    j.mem.kind = KVT_LANE_MEM_RESV;
    void *ptr = NULL;
    kvt_hash_t key = {.hi = id, .lo = 99};
    cr_assert_eq(kvt_pool_reserve(R.pool, NS_ID, key, KVT_OBJ_KV, BB, R.holder, &j.mem.resv, &ptr),
                 KVT_STORE_OK);
    R.tj[id].block = block;
    R.tj[id].dst = ptr;
    kvt_lane_core_enqueue(R.lane, &j, R.now);
    drain();
}

static kvt_pool_stats_t pstats(void)
{
    kvt_pool_stats_t ps;
    kvt_pool_stats(R.pool, &ps);
    return ps;
}

static kvt_lane_stats_t lstats(void)
{
    kvt_lane_stats_t ls;
    kvt_lane_core_stats(R.lane, &ls);
    return ls;
}

static void tick(uint64_t at)
{
    R.now = at;
    kvt_lane_core_tick(R.lane, R.now);
    drain();
}

static bool stored(uint64_t id, uint32_t block)
{
    kvt_hash_t key = {.hi = id, .lo = 99};
    kvt_lease_t l;
    kvt_obj_view_t v;
    if (kvt_pool_acquire(R.pool, NS_ID, key, KVT_OBJ_KV, R.holder, &l, &v) != KVT_STORE_OK)
        return false;
    bool same = v.size == BB && memcmp(v.ptr, kvt_gpu_plane_ptr(R.gpu, 0, 0, block), BB) == 0;
    kvt_pool_release(R.pool, &l);
    return same;
}

// -------------------------------------------------------------- X1 ----

Test(lane, rule_X1_a_fence_covers_queued_submitting_and_pending_jobs)
{
    up(100 * MS, 100 * MS, 0);
    job(1, 1, 0);
    kvt_lane_core_pump(R.lane, R.now); //  1: pending (lands at 3000)
    job(2, 2, 0);
    kvt_lane_submit_t sub;
    cr_assert(kvt_lane_core_submit_begin(R.lane, R.now, &sub)); //  2: submitting
    job(3, 3, 0);                                               //  3: queued behind it
    cr_assert_eq(kvt_lane_core_stage(R.lane, 1), KVT_LANE_PENDING);
    cr_assert_eq(kvt_lane_core_stage(R.lane, 2), KVT_LANE_SUBMITTING);
    cr_assert_eq(kvt_lane_core_stage(R.lane, 3), KVT_LANE_QUEUED);
    kvt_lane_core_fence(R.lane, 100, R.now);
    drain();
    cr_assert_eq(count(true, 100), 0, "three jobs are held");

    tick(5000); //  1 landed; 2 is still inside its submit
    cr_assert(one(false, 1)->ok);
    cr_assert_eq(count(true, 100), 0, "the submitting job is covered");
    kvt_lane_core_submit_end(R.lane, sub.token, kvt_lane_submit_run(&sub), R.now);
    drain();
    tick(8000); //  2 landed; 3 is still queued
    cr_assert(one(false, 2)->ok);
    cr_assert_eq(count(true, 100), 0, "the queued job is covered");
    kvt_lane_core_pump(R.lane, R.now);
    tick(9000); //  not landed yet (lands at 10000)
    cr_assert_eq(count(true, 100), 0, "the pending job is covered");
    tick(10000);
    cr_assert(one(false, 3)->ok);
    cr_assert(one(true, 100)->ok);
    cr_assert_gt(pos(true, 100), pos(false, 3), "the fence reports after what it covers");
    cr_assert(stored(1, 1) && stored(2, 2) && stored(3, 3));
    cr_assert_eq(lstats().held, 0);
    down();
}

Test(lane, rule_X1_a_fence_with_only_a_queued_job_waits_for_it)
{
    up(100 * MS, 100 * MS, 0);
    job(1, 4, 0);
    kvt_lane_core_fence(R.lane, 100, R.now);
    drain();
    tick(50000);
    cr_assert_eq(count(true, 100), 0, "nothing is pending, but a job is queued");
    kvt_lane_core_pump(R.lane, R.now);
    tick(R.now + 2000);
    cr_assert(one(false, 1)->ok);
    cr_assert(one(true, 100)->ok);
    cr_assert_gt(pos(true, 100), pos(false, 1));
    //  A fence over nothing reports at once.
    kvt_lane_core_fence(R.lane, 101, R.now);
    drain();
    cr_assert(one(true, 101)->ok);
    down();
}

Test(lane, rule_X1_a_fence_waits_for_the_copies_of_a_job_that_already_reported)
{
    up(1 * MS, 100 * MS, 0);
    kvt_gpu_stream_inject(R.s, KVT_GPU_FAULT_STALL, 0);
    job(1, 1, 0);
    kvt_lane_core_pump(R.lane, R.now);
    tick(R.now + MS); //  its deadline: reported, its copy still queued
    cr_assert_eq(one(false, 1)->cause, KVT_LANE_CAUSE_DEADLINE);
    kvt_lane_core_fence(R.lane, 100, R.now);
    drain();
    tick(R.now + 10 * MS);
    cr_assert_eq(count(true, 100), 0, "a copy that may still write is covered");
    kvt_gpu_stream_inject(R.s, KVT_GPU_FAULT_NONE, 0);
    tick(R.now + 5000);
    cr_assert(one(true, 100)->ok);
    cr_assert_eq(pstats().objects_writing, 0);
    cr_assert_eq(R.ngot, 2);
    down();
}

Test(lane, rule_X1_a_fence_timeout_fails_the_lane)
{
    up(100 * MS, 1 * MS, 0);
    cr_assert_eq(kvt_gpu_stream_inject(R.s, KVT_GPU_FAULT_STALL, 0), 0);
    job(1, 1, 0);
    kvt_lane_core_pump(R.lane, R.now); //  1: pending behind the stall
    job(2, 2, 0);
    kvt_lane_submit_t sub;
    cr_assert(kvt_lane_core_submit_begin(R.lane, R.now, &sub)); //  2: submit stuck
    job(3, 3, 0);                                               //  3: queued
    uint64_t t0 = R.now;
    kvt_lane_core_fence(R.lane, 100, t0);
    drain();
    tick(t0 + MS - 1);
    cr_assert_eq(R.ngot, 0, "nothing reports before the fence timeout");
    cr_assert_not(kvt_lane_core_failed(R.lane));

    tick(t0 + MS);
    cr_assert(kvt_lane_core_failed(R.lane), "a fence timeout is fail-stop");
    for (uint64_t id = 1; id <= 3; id++) {
        const kvt_lane_report_t *r = one(false, id);
        cr_assert_not(r->ok);
        cr_assert_eq(r->cause, KVT_LANE_CAUSE_FENCE, "job %llu", (unsigned long long)id);
        cr_assert_eq(r->detail, KVT_DETAIL_TIMEOUT);
    }
    cr_assert_eq(one(false, 1)->stage, KVT_LANE_PENDING);
    cr_assert_eq(one(false, 2)->stage, KVT_LANE_SUBMITTING);
    cr_assert_eq(one(false, 3)->stage, KVT_LANE_QUEUED);
    const kvt_lane_report_t *f = one(true, 100);
    cr_assert_not(f->ok);
    cr_assert_eq(R.errors_logged, 1, "logged once");
    //  The queued job's reservation went back (nothing ran); the pending
    //  and the submitting job keep theirs: a copy may still write into them.
    cr_assert_eq(pstats().objects_writing, 2);
    cr_assert_eq(lstats().quarantined, 2);

    //  The stuck submit returns: its result is dropped, nothing reports.
    kvt_lane_core_submit_end(R.lane, sub.token, kvt_lane_submit_run(&sub), R.now);
    drain();
    cr_assert_eq(R.ngot, 4);
    cr_assert_eq(lstats().late_returns, 1);
    //  The stream recovers: the copies land, the memory goes back, silently.
    cr_assert_eq(kvt_gpu_stream_inject(R.s, KVT_GPU_FAULT_NONE, 0), 0);
    tick(R.now + 10000);
    cr_assert_eq(R.ngot, 4);
    cr_assert_eq(pstats().objects_writing, 0);
    cr_assert_eq(pstats().objects, 0, "a failed job's reservation is never committed");
    cr_assert_eq(lstats().held, 0);
    down();
}

// -------------------------------------------------------------- X2 ----

Test(lane, rule_X2_a_stuck_submit_still_hits_its_deadline)
{
    up(1 * MS, 100 * MS, 0);
    uint64_t t0 = R.now;
    job(1, 5, 0);
    job(2, 6, 0); //  queued behind the stuck submit: its deadline fires too
    kvt_lane_submit_t sub;
    cr_assert(kvt_lane_core_submit_begin(R.lane, R.now, &sub));
    //  The submitter is inside the submit op; the lane's timer still runs.
    tick(t0 + MS - 1);
    cr_assert_eq(R.ngot, 0);
    cr_assert_eq(kvt_lane_core_next_wake(R.lane, R.now), t0 + MS);
    tick(t0 + MS);
    const kvt_lane_report_t *r = one(false, 1);
    cr_assert_not(r->ok);
    cr_assert_eq(r->cause, KVT_LANE_CAUSE_DEADLINE);
    cr_assert_eq(r->detail, KVT_DETAIL_TIMEOUT);
    cr_assert_eq(r->stage, KVT_LANE_SUBMITTING);
    cr_assert_eq(one(false, 2)->cause, KVT_LANE_CAUSE_DEADLINE);
    cr_assert_eq(one(false, 2)->stage, KVT_LANE_QUEUED);
    cr_assert_not(kvt_lane_core_failed(R.lane), "a deadline fails the job, not the lane");
    //  Job 1's reservation is still held: the submit may yet queue a copy.
    cr_assert_eq(pstats().objects_writing, 1);
    cr_assert_eq(kvt_lane_core_stage(R.lane, 1), KVT_LANE_TERMINAL);

    //  The submit returns late and queues its copy: no second report, and
    //  the reservation stays until the copy landed (lands 2 µs later).
    kvt_lane_core_submit_end(R.lane, sub.token, kvt_lane_submit_run(&sub), R.now);
    drain();
    tick(R.now + 1000);
    cr_assert_eq(R.ngot, 2);
    cr_assert_eq(pstats().objects_writing, 1, "never given back under a running copy");
    tick(R.now + 1000);
    cr_assert_eq(R.ngot, 2, "a late return reports nothing");
    cr_assert_eq(pstats().objects_writing, 0);
    cr_assert_eq(pstats().objects, 0);
    kvt_lane_stats_t ls = lstats();
    cr_assert_eq(ls.late_returns, 1);
    cr_assert_eq(ls.quarantine_freed, 1);
    cr_assert_eq(ls.deadlines, 2);
    cr_assert_eq(ls.held, 0);
    down();
}

Test(lane, rule_X2_a_pending_copy_that_never_lands_hits_its_deadline)
{
    up(1 * MS, 100 * MS, 0);
    cr_assert_eq(kvt_gpu_stream_inject(R.s, KVT_GPU_FAULT_STALL, 0), 0);
    uint64_t t0 = R.now;
    job(1, 1, 0);
    kvt_lane_core_pump(R.lane, R.now);
    cr_assert_eq(kvt_lane_core_next_wake(R.lane, R.now), R.now + KVT_LANE_POLL_NS,
                 "behind a stall the device cannot say: poll");
    tick(t0 + MS);
    cr_assert_eq(one(false, 1)->cause, KVT_LANE_CAUSE_DEADLINE);
    cr_assert_eq(one(false, 1)->stage, KVT_LANE_PENDING);
    cr_assert_eq(pstats().objects_writing, 1, "quarantined while the copy may run");
    tick(t0 + 50 * MS);
    cr_assert_eq(pstats().objects_writing, 1);
    cr_assert_eq(kvt_gpu_stream_inject(R.s, KVT_GPU_FAULT_NONE, 0), 0);
    tick(R.now + 5000);
    cr_assert_eq(R.ngot, 1);
    cr_assert_eq(pstats().objects_writing, 0);
    down();
}

//  A submitter thread blocked inside the submit op while the test thread,
//  as the lane's timer would, ticks the core under the same mutex (LIVE
//  host device: real threads, real stream worker).
typedef struct {
    pthread_mutex_t mu;   //  the shell's mutex around every core call
    pthread_cond_t cv;    //  signals `release` and `inside`
    bool inside;          //  the submitter is in the submit op
    bool release;         //  let the submit op return
    kvt_lane_core_t *lan; //  the core
    kvt_gpu_t *gpu;       //  LIVE device
    uint8_t buf[BB];      //  gather target
    uint32_t block;       //  block gathered
} thr_t;

static int s_blocking_submit(void *arg, kvt_gpu_stream_t *s, const kvt_lane_job_t *job)
{
    thr_t *t = arg;
    (void)job;
    pthread_mutex_lock(&t->mu);
    t->inside = true;
    pthread_cond_broadcast(&t->cv);
    while (!t->release)
        pthread_cond_wait(&t->cv, &t->mu);
    pthread_mutex_unlock(&t->mu);
    return kvt_gpu_gather(s, &t->block, 1, t->buf, BB);
}

static void *s_submitter(void *arg)
{
    thr_t *t = arg;
    kvt_lane_submit_t sub;
    pthread_mutex_lock(&t->mu);
    bool have = kvt_lane_core_submit_begin(t->lan, 0, &sub);
    pthread_mutex_unlock(&t->mu);
    if (!have)
        return NULL;
    int rc = kvt_lane_submit_run(&sub); //  without the mutex: it blocks
    pthread_mutex_lock(&t->mu);
    kvt_lane_core_submit_end(t->lan, sub.token, rc, 0);
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

Test(lane, rule_X2_a_submit_blocked_in_another_thread_still_hits_its_deadline)
{
    static thr_t t;
    memset(&t, 0, sizeof t);
    pthread_mutex_init(&t.mu, NULL);
    pthread_cond_init(&t.cv, NULL);
    kvt_gpu_opts_t go = {.backend = KVT_GPU_BACKEND_HOST, .log = s_mute};
    t.gpu = kvt_gpu_new(&go);
    cr_assert_not_null(t.gpu);
    kvt_gpu_plane_desc_t pd = {.name = "K", .layers = 1, .num_blocks = NB, .block_bytes = BB};
    cr_assert_eq(kvt_gpu_plane_add(t.gpu, &pd), 0);
    kvt_gpu_stream_t *s = kvt_gpu_stream_new(t.gpu, "lane");
    kvt_gpu_event_pool_t *evp = kvt_gpu_event_pool_new(t.gpu);
    kvt_lane_ops_t ops = {.submit = s_blocking_submit};
    kvt_lane_cfg_t lc = {.stream = s, .evp = evp, .ops = &ops, .ops_arg = &t, .deadline_ns = 500};
    char err[128];
    t.lan = kvt_lane_core_new(&lc, err, sizeof err);
    cr_assert_not_null(t.lan, "%s", err);
    kvt_lane_job_t j = {.id = 9};
    kvt_lane_core_enqueue(t.lan, &j, 0);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, s_submitter, &t), 0);
    pthread_mutex_lock(&t.mu);
    while (!t.inside)
        pthread_cond_wait(&t.cv, &t.mu);
    //  The submitter is stuck inside the op. The timer path fires anyway.
    kvt_lane_core_tick(t.lan, 1000);
    uint32_t n;
    const kvt_lane_report_t *out = kvt_lane_core_outbox(t.lan, &n);
    cr_assert_eq(n, 1);
    cr_assert_eq(out[0].id, 9);
    cr_assert_eq(out[0].cause, KVT_LANE_CAUSE_DEADLINE);
    cr_assert_eq(out[0].stage, KVT_LANE_SUBMITTING);
    kvt_lane_core_outbox_clear(t.lan);
    t.release = true;
    pthread_cond_broadcast(&t.cv);
    pthread_mutex_unlock(&t.mu);
    pthread_join(th, NULL);
    //  The late return reported nothing; once its copy ended the job is gone.
    cr_assert_eq(kvt_gpu_stream_synchronize(s), KVT_GPU_OK);
    pthread_mutex_lock(&t.mu);
    kvt_lane_core_tick(t.lan, 2000);
    kvt_lane_core_outbox(t.lan, &n);
    cr_assert_eq(n, 0, "a stuck submit's late return reports nothing");
    kvt_lane_stats_t ls;
    kvt_lane_core_stats(t.lan, &ls);
    cr_assert_eq(ls.late_returns, 1);
    cr_assert_eq(ls.held, 0);
    pthread_mutex_unlock(&t.mu);
    cr_assert_eq(memcmp(t.buf, kvt_gpu_plane_ptr(t.gpu, 0, 0, 0), BB), 0);
    kvt_lane_core_destroy(&t.lan);
    kvt_gpu_event_pool_destroy(&evp);
    kvt_gpu_stream_destroy(&s);
    kvt_gpu_destroy(&t.gpu);
    pthread_mutex_destroy(&t.mu);
    pthread_cond_destroy(&t.cv);
}

// -------------------------------------------------------------- X3 ----

//  Fails the lane: a job behind a stalled stream and a fence that times out.
static void fail_lane(uint64_t job_id, uint64_t fence_id)
{
    cr_assert_eq(kvt_gpu_stream_inject(R.s, KVT_GPU_FAULT_STALL, 0), 0);
    job(job_id, 1, 0);
    kvt_lane_core_pump(R.lane, R.now);
    kvt_lane_core_fence(R.lane, fence_id, R.now);
    drain();
    tick(R.now + MS);
    cr_assert(kvt_lane_core_failed(R.lane));
    cr_assert_not(one(true, fence_id)->ok);
    cr_assert_not(one(false, job_id)->ok);
}

Test(lane, rule_X3_a_failed_lane_fails_every_later_job_until_reset)
{
    up(100 * MS, 1 * MS, 0);
    fail_lane(1, 100);
    cr_assert_eq(R.errors_logged, 1);
    uint32_t submits = R.submits;
    for (uint64_t id = 2; id <= 5; id++) {
        job(id, (uint32_t)id, 0);
        const kvt_lane_report_t *r = one(false, id);
        cr_assert_not(r->ok);
        cr_assert_eq(r->cause, KVT_LANE_CAUSE_FAILED);
        cr_assert_eq(r->detail, KVT_DETAIL_IO);
    }
    kvt_lane_core_pump(R.lane, R.now);
    tick(R.now + 10 * MS);
    cr_assert_eq(R.submits, submits, "a failed lane submits nothing");
    kvt_lane_core_fence(R.lane, 101, R.now);
    drain();
    cr_assert_not(one(true, 101)->ok, "nor vouches for anything");
    cr_assert_eq(R.errors_logged, 1, "the failure is logged once, refusals are counted");
    cr_assert_eq(lstats().refused, 4);
    cr_assert_eq(pstats().objects_writing, 1, "refused jobs' reservations went back");

    //  Reset (a new stream: the stalled one is the failed one's).
    kvt_gpu_stream_t *fresh = kvt_gpu_stream_new(R.gpu, "lane2");
    kvt_lane_core_reset(R.lane, fresh, R.now);
    cr_assert_not(kvt_lane_core_failed(R.lane));
    job(6, 6, 0);
    kvt_lane_core_pump(R.lane, R.now);
    tick(R.now + 5000);
    cr_assert(one(false, 6)->ok, "a reset lane runs jobs again");
    cr_assert(stored(6, 6));
    //  A second failure is logged again (once).
    kvt_gpu_stream_t *old = R.s;
    R.s = fresh;
    fail_lane(7, 102);
    cr_assert_eq(R.errors_logged, 2);
    kvt_gpu_stream_inject(old, KVT_GPU_FAULT_NONE, 0);
    kvt_gpu_stream_inject(fresh, KVT_GPU_FAULT_NONE, 0);
    tick(R.now + 10000);
    cr_assert_eq(lstats().held, 0);
    kvt_gpu_stream_destroy(&old);
    down();
}

Test(lane, rule_X3_a_reset_frees_what_the_pool_quarantined_for_the_lane)
{
    up(100 * MS, 1 * MS, 0);
    fail_lane(1, 100); //  job 1's copy is stuck; its reservation stays with the lane
    //  The pool's TTL passes under the stuck copy: the pool quarantines the
    //  reservation of its live holder (its bytes kept, unindexed).
    R.now += 2 * MS;
    kvt_pool_reclaim(R.pool);
    cr_assert_eq(pstats().objects_quarantined, 1);
    //  The reset hands the holder's quarantine to the pool's drain: freed a
    //  pool TTL later (no copy of the lane's old stream is trusted longer).
    kvt_lane_core_reset(R.lane, NULL, R.now);
    R.now += 2 * MS;
    kvt_pool_reclaim(R.pool);
    kvt_pool_stats_t ps = pstats();
    cr_assert_eq(ps.objects_quarantined, 0, "the reset freed the quarantined reservation");
    cr_assert_eq(ps.quarantined_bytes, 0);
    cr_assert_eq(ps.used_bytes, 0);
    kvt_gpu_stream_inject(R.s, KVT_GPU_FAULT_NONE, 0);
    tick(R.now + 10000);
    cr_assert_eq(R.ngot, 2, "the late landing reports nothing");
    cr_assert_eq(lstats().held, 0);
    down();
}

// -------------------------------------------------------------- X4 ----

Test(lane, rule_X4_shutdown_drains_before_it_frees)
{
    up(100 * MS, 100 * MS, 0);
    //  A pending copy that has not landed: the shell waits for the stream
    //  (SIM lands it at once), then the core settles it as it drained.
    job(1, 7, 0);
    kvt_lane_core_pump(R.lane, R.now);
    int st = kvt_gpu_stream_synchronize(R.s);
    cr_assert(st == KVT_GPU_OK || st == KVT_GPU_FORCED);
    //  Behind a stall: a pending job, a stuck submit, a queued job, a fence.
    kvt_gpu_stream_t *stalled = R.s;
    kvt_gpu_stream_inject(stalled, KVT_GPU_FAULT_STALL, 0);
    job(2, 8, 0);
    kvt_lane_core_pump(R.lane, R.now);
    job(3, 9, 0);
    kvt_lane_submit_t sub;
    cr_assert(kvt_lane_core_submit_begin(R.lane, R.now, &sub));
    job(4, 10, 0);
    kvt_lane_core_fence(R.lane, 100, R.now);
    drain();
    cr_assert_eq(kvt_gpu_stream_synchronize(stalled), KVT_GPU_NOT_READY, "cannot drain");

    uint32_t made = kvt_lane_core_shutdown(R.lane, R.now);
    drain();
    cr_assert_eq(made, 5);
    cr_assert(one(false, 1)->ok, "the drained job reports its copy's result (cause %d)",
              one(false, 1)->cause);
    cr_assert(stored(1, 7));
    for (uint64_t id = 2; id <= 4; id++) {
        cr_assert_not(one(false, id)->ok);
        cr_assert_eq(one(false, id)->detail, KVT_DETAIL_SHUTDOWN, "job %llu",
                     (unsigned long long)id);
    }
    cr_assert_not(one(true, 100)->ok);
    //  Jobs 2 (copy stalled) and 3 (inside its submit) keep their memory;
    //  job 4 never ran, its reservation went back.
    cr_assert_eq(pstats().objects_writing, 2, "nothing freed under a copy that has not ended");
    cr_assert_eq(lstats().quarantined, 2);
    //  A later job is refused.
    job(5, 11, 0);
    cr_assert_eq(one(false, 5)->cause, KVT_LANE_CAUSE_SHUTDOWN);
    //  The submit returns, the stream recovers: memory goes back, no report.
    kvt_lane_core_submit_end(R.lane, sub.token, kvt_lane_submit_run(&sub), R.now);
    kvt_gpu_stream_inject(stalled, KVT_GPU_FAULT_NONE, 0);
    tick(R.now + 20000);
    cr_assert_eq(R.ngot, 6);
    cr_assert_eq(pstats().objects_writing, 0);
    cr_assert_eq(lstats().held, 0);
    down();
}

Test(lane, shutdown_leaves_memory_under_a_stuck_copy_to_the_pool_holder)
{
    up(100 * MS, 100 * MS, 0);
    kvt_gpu_stream_inject(R.s, KVT_GPU_FAULT_STALL, 0);
    job(1, 1, 0);
    kvt_lane_core_pump(R.lane, R.now);
    cr_assert_eq(kvt_lane_core_shutdown(R.lane, R.now), 1);
    drain();
    cr_assert_eq(one(false, 1)->detail, KVT_DETAIL_SHUTDOWN);
    kvt_lane_core_destroy(&R.lane);
    //  The destroyed lane did not free the reservation: its holder's
    //  removal orphans it and the pool reclaims it a TTL later.
    cr_assert_eq(pstats().objects_writing, 1);
    cr_assert_eq(kvt_pool_holder_remove(R.pool, R.holder), KVT_STORE_OK);
    R.now += 2 * MS;
    kvt_pool_reclaim(R.pool);
    cr_assert_eq(pstats().used_bytes, 0);
    kvt_gpu_stream_inject(R.s, KVT_GPU_FAULT_NONE, 0);
    down();
}

// -------------------------------------------------------- exactly once ----

Test(lane, every_path_reports_each_job_exactly_once)
{
    up(1 * MS, 100 * MS, 6);
    job(1, 1, 0); //  ok
    kvt_lane_core_pump(R.lane, R.now);
    R.fail_submit = KVT_GPU_EINVAL;
    job(2, 2, 0); //  its submit is refused
    kvt_lane_core_pump(R.lane, R.now);
    drain();
    cr_assert_eq(one(false, 2)->cause, KVT_LANE_CAUSE_SUBMIT);
    cr_assert_eq(one(false, 2)->detail, KVT_DETAIL_INVALID);
    tick(R.now + 5000);
    cr_assert(one(false, 1)->ok);

    //  5's submit is stuck; 6 waits behind it; both reach their deadline.
    job(5, 5, 0);
    kvt_lane_submit_t sub;
    cr_assert(kvt_lane_core_submit_begin(R.lane, R.now, &sub));
    job(6, 6, 0);
    tick(R.now + MS);
    cr_assert_eq(one(false, 5)->cause, KVT_LANE_CAUSE_DEADLINE);
    cr_assert_eq(one(false, 6)->cause, KVT_LANE_CAUSE_DEADLINE);
    kvt_lane_core_submit_end(R.lane, sub.token, kvt_lane_submit_run(&sub), R.now);
    tick(R.now + 5000);

    //  7's copy fails on the device.
    kvt_gpu_stream_inject(R.s, KVT_GPU_FAULT_FAIL, 1);
    job(7, 7, 0);
    kvt_lane_core_pump(R.lane, R.now);
    tick(R.now + 5000);
    cr_assert_eq(one(false, 7)->cause, KVT_LANE_CAUSE_COPY);
    cr_assert_eq(one(false, 7)->detail, KVT_DETAIL_IO);

    //  A failed stream is recovered by a new one. Then 6 jobs fill the lane,
    //  the 7th is refused, and shutdown settles the rest.
    kvt_gpu_stream_t *fresh = kvt_gpu_stream_new(R.gpu, "lane2");
    kvt_lane_core_reset(R.lane, fresh, R.now);
    for (uint64_t id = 8; id <= 14; id++)
        job(id, (uint32_t)id, 0);
    cr_assert_eq(one(false, 14)->cause, KVT_LANE_CAUSE_FULL);
    cr_assert_eq(one(false, 14)->detail, KVT_DETAIL_NO_SPACE);
    kvt_lane_core_shutdown(R.lane, R.now);
    drain();
    for (uint64_t id = 8; id <= 13; id++)
        cr_assert_eq(one(false, id)->cause, KVT_LANE_CAUSE_SHUTDOWN);
    tick(R.now + 10 * MS);

    uint64_t ids[] = {1, 2, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        one(false, ids[i]);
    cr_assert_eq(R.ngot, sizeof ids / sizeof ids[0], "no other report");
    kvt_lane_stats_t ls = lstats();
    cr_assert_eq(ls.ok + ls.failed, R.ngot);
    cr_assert_eq(ls.held, 0);
    kvt_pool_stats_t ps = pstats();
    cr_assert_eq(ps.objects_writing, 0, "every reservation committed or aborted");
    cr_assert_eq(ps.objects, 1);
    cr_assert(stored(1, 1));
    kvt_gpu_stream_t *old = R.s;
    R.s = fresh;
    kvt_gpu_stream_destroy(&old);
    down();
}

// ------------------------------------------------------------- runner ----

/*  The runner: the core behind its mutex with the submit on a thread of
    its own (LIVE host device), and inline under a SIM device. */

typedef struct {
    pthread_mutex_t mu; //  guards the fields below
    pthread_cond_t cv;  //  signals `release`
    bool block_next;    //  the next submit blocks until `release`
    bool release;       //  let a blocked submit return
    int fail_next;      //  the next submit returns this (0: copy)
    kvt_gpu_t *gpu;     //  LIVE device
    uint8_t buf[BB];    //  gather target
} rn_t;

static rn_t N;

static int s_runner_submit(void *arg, kvt_gpu_stream_t *s, const kvt_lane_job_t *job)
{
    (void)arg;
    (void)job;
    pthread_mutex_lock(&N.mu);
    bool block = N.block_next;
    N.block_next = false;
    int fail = N.fail_next;
    N.fail_next = 0;
    //  Bounded (2 s), so that a lane that waits for the submit on the
    //  caller's thread fails the test instead of hanging it.
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 2;
    while (block && !N.release)
        if (pthread_cond_timedwait(&N.cv, &N.mu, &until) != 0)
            break;
    pthread_mutex_unlock(&N.mu);
    if (fail)
        return fail;
    uint32_t b = 3;
    return kvt_gpu_gather(s, &b, 1, N.buf, BB);
}

static kvt_lane_runner_t *rn_up(kvt_gpu_stream_t **s, kvt_gpu_event_pool_t **evp)
{
    memset(&N, 0, sizeof N);
    pthread_mutex_init(&N.mu, NULL);
    pthread_cond_init(&N.cv, NULL);
    kvt_gpu_opts_t go = {.backend = KVT_GPU_BACKEND_HOST, .log = s_mute};
    N.gpu = kvt_gpu_new(&go);
    cr_assert_not_null(N.gpu);
    kvt_gpu_plane_desc_t pd = {.name = "K", .layers = 1, .num_blocks = NB, .block_bytes = BB};
    cr_assert_eq(kvt_gpu_plane_add(N.gpu, &pd), 0);
    *s = kvt_gpu_stream_new(N.gpu, "lane");
    *evp = kvt_gpu_event_pool_new(N.gpu);
    static kvt_lane_ops_t ops = {.submit = s_runner_submit};
    kvt_lane_cfg_t lc = {.stream = *s, .evp = *evp, .ops = &ops, .deadline_ns = 1000};
    char err[128];
    kvt_lane_runner_t *r = kvt_lane_runner_new(&lc, true, err, sizeof err);
    cr_assert_not_null(r, "%s", err);
    return r;
}

static void rn_down(kvt_lane_runner_t **r, kvt_gpu_stream_t **s, kvt_gpu_event_pool_t **evp)
{
    kvt_lane_runner_destroy(r);
    kvt_gpu_event_pool_destroy(evp);
    kvt_gpu_stream_destroy(s);
    kvt_gpu_destroy(&N.gpu);
    pthread_mutex_destroy(&N.mu);
    pthread_cond_destroy(&N.cv);
}

static void s_nap(void)
{
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
}

//  Waits (wall time, bounded) until cond holds.
#define WAIT_FOR(cond)                                   \
    do {                                                 \
        for (int i_ = 0; i_ < 5000 && !(cond); i_++)     \
            s_nap();                                     \
        cr_assert(cond, "timed out waiting for " #cond); \
    } while (0)

Test(lane_runner, rule_X2_a_submit_stuck_on_the_submitter_thread_still_hits_its_deadline)
{
    kvt_gpu_stream_t *s;
    kvt_gpu_event_pool_t *evp;
    kvt_lane_runner_t *r = rn_up(&s, &evp);
    N.block_next = true;
    kvt_lane_job_t j1 = {.id = 1}, j2 = {.id = 2};
    kvt_lane_runner_enqueue(r, &j1, 0);
    WAIT_FOR(kvt_lane_runner_submitting(r)); //  the submitter is stuck in job 1's submit
    kvt_lane_runner_enqueue(r, &j2, 0);
    cr_assert_eq(kvt_lane_runner_next_wake(r, 0), 1000);
    //  The caller's timer path runs while the submit is stuck.
    kvt_lane_runner_tick(r, 1000);
    kvt_lane_report_t got[8];
    uint32_t n = kvt_lane_runner_take(r, got, 8);
    cr_assert_eq(n, 2);
    cr_assert_eq(got[0].id, 1);
    cr_assert_eq(got[0].cause, KVT_LANE_CAUSE_DEADLINE);
    cr_assert_eq(got[0].stage, KVT_LANE_SUBMITTING);
    cr_assert_eq(got[1].id, 2);
    cr_assert_eq(got[1].cause, KVT_LANE_CAUSE_DEADLINE);
    cr_assert(kvt_lane_runner_submitting(r), "still stuck");

    pthread_mutex_lock(&N.mu);
    N.release = true;
    pthread_cond_broadcast(&N.cv);
    pthread_mutex_unlock(&N.mu);
    kvt_lane_stats_t ls;
    WAIT_FOR((kvt_lane_runner_stats(r, &ls), ls.late_returns == 1));
    //  A later job runs normally once the submitter is free.
    kvt_lane_job_t j3 = {.id = 3, .deadline_ns = 1000000000000ull};
    kvt_lane_runner_enqueue(r, &j3, 2000);
    uint64_t now = 2000;
    for (int i = 0; i < 5000 && n == 2; i++) {
        s_nap();
        kvt_lane_runner_tick(r, ++now);
        n += kvt_lane_runner_take(r, got + n, 8 - n);
    }
    cr_assert_eq(n, 3);
    cr_assert_eq(got[2].id, 3);
    cr_assert(got[2].ok);
    cr_assert_eq(memcmp(N.buf, kvt_gpu_plane_ptr(N.gpu, 0, 0, 3), BB), 0);
    WAIT_FOR((kvt_lane_runner_tick(r, ++now), kvt_lane_runner_stats(r, &ls), ls.held == 0));
    cr_assert_eq(kvt_lane_runner_take(r, got, 8), 0, "the late return reported nothing");
    kvt_lane_runner_shutdown(r, now);
    rn_down(&r, &s, &evp);
}

Test(lane_runner, a_refused_submit_on_the_submitter_thread_wakes_the_caller)
{
    kvt_gpu_stream_t *s;
    kvt_gpu_event_pool_t *evp;
    kvt_lane_runner_t *r = rn_up(&s, &evp);
    N.fail_next = KVT_GPU_EDEVICE;
    kvt_lane_job_t j = {.id = 5, .deadline_ns = 1000000000000ull};
    kvt_lane_runner_enqueue(r, &j, 10);
    kvt_lane_stats_t ls;
    WAIT_FOR((kvt_lane_runner_stats(r, &ls), ls.submit_failed == 1));
    //  Its report waits in the outbox: the caller's timer is told to run now.
    cr_assert_eq(kvt_lane_runner_next_wake(r, 20), 20);
    kvt_lane_report_t got[2];
    cr_assert_eq(kvt_lane_runner_take(r, got, 2), 1);
    cr_assert_eq(got[0].id, 5);
    cr_assert_eq(got[0].cause, KVT_LANE_CAUSE_SUBMIT);
    cr_assert_eq(got[0].detail, KVT_DETAIL_IO);
    cr_assert_eq(kvt_lane_runner_next_wake(r, 20), UINT64_MAX, "nothing held");
    kvt_lane_runner_shutdown(r, 30);
    rn_down(&r, &s, &evp);
}

Test(lane_runner, inline_mode_submits_in_the_calling_thread)
{
    up(100 * MS, 100 * MS, 0);
    kvt_lane_cfg_t lc = {.stream = R.s,
                         .evp = R.evp,
                         .pool = R.pool,
                         .holder = R.holder,
                         .ops = &R.ops,
                         .log = s_lane_log};
    char err[128];
    kvt_lane_runner_t *r = kvt_lane_runner_new(&lc, false, err, sizeof err);
    cr_assert_not_null(r, "%s", err);
    kvt_lane_job_t j = {.id = 1, .arg = &R.tj[1]};
    j.mem.kind = KVT_LANE_MEM_RESV;
    void *ptr;
    kvt_hash_t key = {.hi = 1, .lo = 99};
    cr_assert_eq(kvt_pool_reserve(R.pool, NS_ID, key, KVT_OBJ_KV, BB, R.holder, &j.mem.resv, &ptr),
                 0);
    R.tj[1] = (tjob_t){.block = 2, .dst = ptr};
    kvt_lane_runner_enqueue(r, &j, R.now);
    cr_assert_eq(R.submits, 1, "submitted before enqueue returned");
    cr_assert_eq(kvt_lane_runner_next_wake(r, R.now), R.now + 2000, "the SIM landing time");
    R.now += 2000;
    kvt_lane_runner_tick(r, R.now);
    kvt_lane_report_t got[2];
    cr_assert_eq(kvt_lane_runner_take(r, got, 2), 1);
    cr_assert(got[0].ok);
    cr_assert(stored(1, 2));
    kvt_lane_runner_shutdown(r, R.now);
    kvt_lane_runner_destroy(&r);
    down();
}

// ------------------------------------------------------- timer path ----

Test(lane, rule_X2_deadlines_fire_in_deadline_order_not_enqueue_order)
{
    up(100 * MS, 0, 0);
    cr_assert_eq(kvt_gpu_stream_inject(R.s, KVT_GPU_FAULT_STALL, 0), 0);
    uint64_t t0 = R.now;
    job(1, 1, 10 * MS);
    job(2, 2, 1 * MS); //  enqueued later, due first
    job(3, 3, 0);      //  the lane's 100 ms
    kvt_lane_core_pump(R.lane, R.now);
    tick(t0 + 1 * MS);
    cr_assert_eq(one(false, 2)->cause, KVT_LANE_CAUSE_DEADLINE);
    cr_assert_eq(count(false, 1), 0, "job 1 is not due yet");
    tick(t0 + 10 * MS);
    cr_assert_eq(one(false, 1)->cause, KVT_LANE_CAUSE_DEADLINE);
    cr_assert_eq(count(false, 3), 0);
    cr_assert_eq(kvt_lane_core_next_wake(R.lane, R.now) <= t0 + 100 * MS, true);
    tick(t0 + 100 * MS);
    cr_assert_eq(one(false, 3)->cause, KVT_LANE_CAUSE_DEADLINE);
    cr_assert_eq(lstats().quarantined, 3, "their copies never ran: memory kept");
    //  The stream resumes: the copies land in order and the memory goes back.
    cr_assert_eq(kvt_gpu_stream_inject(R.s, KVT_GPU_FAULT_NONE, 0), 0);
    for (int i = 0; i < 100 && lstats().held; i++)
        tick(R.now + MS);
    cr_assert_eq(lstats().held, 0);
    cr_assert_eq(lstats().quarantine_freed, 3);
    cr_assert_eq(pstats().objects_writing, 0);
    cr_assert_eq(R.ngot, 3, "one report per job");
    down();
}

Test(lane, landed_copies_settle_in_stream_order_behind_a_slow_head)
{
    up(0, 0, 0);
    //  Five jobs on one stream: each lands 2 µs after the one before it. A
    //  tick before the first landed settles nothing; one after the third
    //  settles exactly the first three, in order.
    uint64_t t0 = R.now;
    for (uint64_t id = 1; id <= 5; id++)
        job(id, (uint32_t)id, 0);
    kvt_lane_core_pump(R.lane, R.now);
    tick(t0 + 1000);
    cr_assert_eq(R.ngot, 0);
    uint64_t w = kvt_lane_core_next_wake(R.lane, R.now);
    cr_assert_gt(w, R.now, "nothing landed yet");
    tick(t0 + 6500);
    cr_assert_eq(R.ngot, 3, "the copies that landed, no more: %u", R.ngot);
    for (uint64_t id = 1; id <= 3; id++) {
        cr_assert(one(false, id)->ok);
        cr_assert_eq(pos(false, id), id - 1, "stream order");
        cr_assert(stored(id, (uint32_t)id));
    }
    tick(t0 + 20000);
    cr_assert(one(false, 4)->ok && one(false, 5)->ok);
    cr_assert_eq(lstats().held, 0);
    down();
}

Test(lane, a_submit_does_not_walk_the_pending_jobs)
{
    up(0, 0, 0);
    //  Forty jobs enqueued and submitted one by one while none has landed:
    //  each submit takes the next queued job without stepping over the
    //  pending ones before it (a walk from the head would step over 780).
    uint64_t t0 = R.now;
    for (uint64_t id = 1; id <= 40; id++) {
        job(id, (uint32_t)(id % NB), 0);
        cr_assert_eq(kvt_lane_core_pump(R.lane, R.now), 1);
    }
    cr_assert_eq(R.submits, 40);
    cr_assert_eq(lstats().submit_skips, 0, "stepped over %llu",
                 (unsigned long long)lstats().submit_skips);
    tick(t0 + 1000000);
    for (uint64_t id = 1; id <= 40; id++)
        cr_assert(one(false, id)->ok);
    cr_assert_eq(lstats().held, 0);
    down();
}
