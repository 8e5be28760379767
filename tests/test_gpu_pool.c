/*  test_gpu_pool.c — the event pool: reuse, the re-record bound, retirement,
    the ownership rule (the thread that creates a pool owns every event in
    it; events are destroyed only there: retirements elsewhere are deferred
    to the owner's next pool call, a destroy elsewhere is refused), the
    runtime check on puts (in every build), exact counters, and
    concurrent use.
*/
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "kvtier/kvt_gpu.h"

static atomic_int s_errors_logged; //  level-0 lines seen by s_count_log

static void s_count_log(void *arg, int level, const char *line)
{
    (void)arg;
    (void)line;
    if (level == 0)
        atomic_fetch_add(&s_errors_logged, 1);
}

static kvt_gpu_t *s_open(uint32_t max_rerecords)
{
    kvt_gpu_opts_t o = {0};
    o.backend = KVT_GPU_BACKEND_HOST;
    o.event_max_rerecords = max_rerecords;
    o.log = s_count_log;
    kvt_gpu_t *gpu = kvt_gpu_new(&o);
    cr_assert_not_null(gpu);
    return gpu;
}

static kvt_gpu_event_pool_stats_t s_stats(kvt_gpu_event_pool_t *pool)
{
    kvt_gpu_event_pool_stats_t st;
    kvt_gpu_event_pool_stats(pool, &st);
    //  The invariants hold at every read while the pool is open.
    cr_assert_eq(st.created, st.free + st.in_use + st.retired);
    cr_assert_eq(st.retired, st.destroyed + st.pending);
    return st;
}

//  Records `ev` until it has no record left.
static void s_use_up(kvt_gpu_event_t *ev, kvt_gpu_stream_t *s)
{
    while (kvt_gpu_event_record(ev, s) == 0)
        ;
    cr_assert_eq(kvt_gpu_event_record(ev, s), KVT_GPU_ELIMIT);
}

Test(event_pool, a_put_event_is_reused_with_its_record_count)
{
    kvt_gpu_t *gpu = s_open(0);
    kvt_gpu_stream_t *s = kvt_gpu_stream_new(gpu, "s");
    kvt_gpu_event_pool_t *pool = kvt_gpu_event_pool_new(gpu);
    kvt_gpu_event_t *ev = kvt_gpu_event_pool_get(pool);
    kvt_gpu_event_t *first = ev;
    cr_assert_eq(kvt_gpu_event_record(ev, s), 0);
    cr_assert_eq(kvt_gpu_event_record(ev, s), 0);
    kvt_gpu_event_pool_put(pool, &ev);
    cr_assert_null(ev);
    ev = kvt_gpu_event_pool_get(pool);
    cr_assert_eq(ev, first, "the free event is reused");
    cr_assert_eq(kvt_gpu_event_records(ev), 2);
    kvt_gpu_event_t *second = kvt_gpu_event_pool_get(pool);
    cr_assert_neq(second, first);
    kvt_gpu_event_pool_stats_t st = s_stats(pool);
    cr_assert_eq(st.created, 2);
    cr_assert_eq(st.recorded, 2);
    cr_assert_eq(st.in_use, 2);
    cr_assert_eq(st.free, 0);
    kvt_gpu_event_pool_put(pool, &ev);
    st = s_stats(pool);
    cr_assert_eq(st.in_use, 1);
    cr_assert_eq(st.free, 1);
    //  `second` is still out: the pool's destroy takes it too.
    kvt_gpu_event_pool_destroy(&pool);
    cr_assert_null(pool);
    kvt_gpu_stream_destroy(&s);
    kvt_gpu_destroy(&gpu);
}

Test(event_pool, an_event_out_of_rerecords_is_retired_after_31_rerecords_and_replaced)
{
    kvt_gpu_t *gpu = s_open(0); //  the default bound: 31 re-records
    kvt_gpu_stream_t *s = kvt_gpu_stream_new(gpu, "s");
    kvt_gpu_event_pool_t *pool = kvt_gpu_event_pool_new(gpu);
    kvt_gpu_event_t *ev = kvt_gpu_event_pool_get(pool);
    for (int i = 0; i < 32; i++)
        cr_assert_eq(kvt_gpu_event_record(ev, s), 0);
    cr_assert_eq(kvt_gpu_event_record(ev, s), KVT_GPU_ELIMIT);
    kvt_gpu_event_pool_put(pool, &ev);
    kvt_gpu_event_pool_stats_t st = s_stats(pool);
    cr_assert_eq(st.retired, 1);
    cr_assert_eq(st.destroyed, 1, "retired on the owner thread: destroyed at once");
    cr_assert_eq(st.deferred, 0);
    cr_assert_eq(st.pending, 0);
    cr_assert_eq(st.free, 0);
    ev = kvt_gpu_event_pool_get(pool);
    cr_assert_eq(kvt_gpu_event_records(ev), 0, "a fresh event replaces it");
    st = s_stats(pool);
    cr_assert_eq(st.created, 2);
    cr_assert_eq(st.recorded, 32);
    kvt_gpu_event_pool_put(pool, &ev);
    kvt_gpu_event_pool_destroy(&pool);
    kvt_gpu_stream_destroy(&s);
    kvt_gpu_destroy(&gpu);
}

//  Retiring removes an event from the pool's table by moving the last one
//  into its place: the moved event must still be found where it now is, so
//  retiring it next (and destroying the pool) works on the right entries.
Test(event_pool, retiring_two_events_of_one_pool_keeps_the_table_right)
{
    kvt_gpu_t *gpu = s_open(0);
    kvt_gpu_stream_t *s = kvt_gpu_stream_new(gpu, "s");
    kvt_gpu_event_pool_t *pool = kvt_gpu_event_pool_new(gpu);
    kvt_gpu_event_t *e1 = kvt_gpu_event_pool_get(pool);
    kvt_gpu_event_t *e2 = kvt_gpu_event_pool_get(pool);
    kvt_gpu_event_t *e3 = kvt_gpu_event_pool_get(pool);
    cr_assert(e1 && e2 && e3);
    for (int i = 0; i < 32; i++) {
        cr_assert_eq(kvt_gpu_event_record(e1, s), 0);
        cr_assert_eq(kvt_gpu_event_record(e3, s), 0);
    }
    kvt_gpu_event_pool_put(pool, &e1); //  e3 (the last) moves into e1's place
    kvt_gpu_event_pool_put(pool, &e3); //  retired from where it now is
    kvt_gpu_event_pool_stats_t st = s_stats(pool);
    cr_assert_eq(st.retired, 2);
    cr_assert_eq(st.destroyed, 2);
    kvt_gpu_event_pool_put(pool, &e2);
    st = s_stats(pool);
    cr_assert_eq(st.free, 1, "e2 is the one event left, free");
    kvt_gpu_event_pool_destroy(&pool);
    kvt_gpu_stream_destroy(&s);
    kvt_gpu_destroy(&gpu);
}

//  A helper thread running one step at a time on request, so that the test
//  controls which thread makes which pool call.
typedef enum {
    STEP_NONE = 0,
    STEP_NEW_POOL,     //  pool = event_pool_new
    STEP_GET,          //  ev = get
    STEP_RETIRE_PUT,   //  record ev until it has no record left, then put it
    STEP_COLLECT,      //  result = collect
    STEP_DESTROY_POOL, //  event_pool_destroy (&pool_arg); result = pool_arg still set
    STEP_EXIT,         //  return
} step_t;

typedef struct {
    kvt_gpu_t *gpu;             //  device
    kvt_gpu_stream_t *stream;   //  stream to record on
    kvt_gpu_event_pool_t *pool; //  the pool it works on (or created)
    kvt_gpu_event_t *ev;        //  the event it holds
    pthread_mutex_t mu;         //  guards step / done
    pthread_cond_t cv;          //  signalled on change
    step_t step;                //  requested step, STEP_NONE when done
    int result;                 //  what the step returned
    char error[320];            //  the helper's last error after the step
} helper_t;

static void *s_helper_main(void *arg)
{
    helper_t *h = arg;
    while (true) {
        pthread_mutex_lock(&h->mu);
        while (h->step == STEP_NONE)
            pthread_cond_wait(&h->cv, &h->mu);
        step_t step = h->step;
        pthread_mutex_unlock(&h->mu);
        if (step == STEP_EXIT)
            return NULL;
        int result = 0;
        switch (step) {
        case STEP_NEW_POOL:
            h->pool = kvt_gpu_event_pool_new(h->gpu);
            result = h->pool != NULL;
            break;
        case STEP_GET:
            h->ev = kvt_gpu_event_pool_get(h->pool);
            result = h->ev != NULL;
            break;
        case STEP_RETIRE_PUT:
            while (kvt_gpu_event_record(h->ev, h->stream) == 0)
                ;
            kvt_gpu_event_pool_put(h->pool, &h->ev);
            break;
        case STEP_COLLECT:
            result = kvt_gpu_event_pool_collect(h->pool);
            break;
        case STEP_DESTROY_POOL: {
            kvt_gpu_event_pool_t *p = h->pool;
            kvt_gpu_event_pool_destroy(&p);
            result = p != NULL;
            if (!p)
                h->pool = NULL;
            break;
        }
        default:
            break;
        }
        snprintf(h->error, sizeof h->error, "%s", kvt_gpu_last_error());
        pthread_mutex_lock(&h->mu);
        h->result = result;
        h->step = STEP_NONE;
        pthread_cond_broadcast(&h->cv);
        pthread_mutex_unlock(&h->mu);
    }
}

static void s_helper_start(helper_t *h, pthread_t *th, kvt_gpu_t *gpu, kvt_gpu_stream_t *s,
                           kvt_gpu_event_pool_t *pool)
{
    memset(h, 0, sizeof *h);
    h->gpu = gpu;
    h->stream = s;
    h->pool = pool;
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    cr_assert_eq(pthread_create(th, NULL, s_helper_main, h), 0);
}

//  Runs one step on the helper thread and returns its result.
static int s_helper_do(helper_t *h, step_t step)
{
    pthread_mutex_lock(&h->mu);
    h->step = step;
    pthread_cond_broadcast(&h->cv);
    while (h->step != STEP_NONE)
        pthread_cond_wait(&h->cv, &h->mu);
    int result = h->result;
    pthread_mutex_unlock(&h->mu);
    return result;
}

static void s_helper_stop(helper_t *h, pthread_t th)
{
    pthread_mutex_lock(&h->mu);
    h->step = STEP_EXIT;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    pthread_join(th, NULL);
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
}

Test(event_pool, a_retirement_off_the_owner_thread_waits_for_the_owners_next_call)
{
    kvt_gpu_t *gpu = s_open(1);
    kvt_gpu_stream_t *s = kvt_gpu_stream_new(gpu, "s");
    kvt_gpu_event_pool_t *pool = kvt_gpu_event_pool_new(gpu); //  this thread owns it
    helper_t h;
    pthread_t th;
    s_helper_start(&h, &th, gpu, s, pool);
    //  The helper's get creates the event; the pool's owner still owns it.
    cr_assert_eq(s_helper_do(&h, STEP_GET), 1);
    s_helper_do(&h, STEP_RETIRE_PUT);
    kvt_gpu_event_pool_stats_t st = s_stats(pool);
    cr_assert_eq(st.retired, 1);
    cr_assert_eq(st.deferred, 1);
    cr_assert_eq(st.pending, 1);
    cr_assert_eq(st.destroyed, 0, "not destroyed off the owner thread");
    //  The helper's own pool calls do not destroy it, though it created it.
    cr_assert_eq(s_helper_do(&h, STEP_COLLECT), 0);
    cr_assert_eq(s_helper_do(&h, STEP_GET), 1);
    s_helper_do(&h, STEP_RETIRE_PUT);
    st = s_stats(pool);
    cr_assert_eq(st.pending, 2);
    cr_assert_eq(st.destroyed, 0);
    s_helper_stop(&h, th);
    //  The owner's next pool call (here a get) destroys both, here.
    kvt_gpu_event_t *ev = kvt_gpu_event_pool_get(pool);
    cr_assert_not_null(ev);
    st = s_stats(pool);
    cr_assert_eq(st.pending, 0);
    cr_assert_eq(st.destroyed, 2);
    cr_assert_eq(st.retired, 2);
    cr_assert_eq(st.created, 3);
    cr_assert_eq(st.in_use, 1);
    kvt_gpu_event_pool_put(pool, &ev);
    kvt_gpu_event_pool_destroy(&pool);
    cr_assert_null(pool);
    kvt_gpu_stream_destroy(&s);
    kvt_gpu_destroy(&gpu);
}

Test(event_pool, a_pool_created_on_another_thread_is_collected_by_that_thread)
{
    kvt_gpu_t *gpu = s_open(1);
    kvt_gpu_stream_t *s = kvt_gpu_stream_new(gpu, "s");
    helper_t h;
    pthread_t th;
    s_helper_start(&h, &th, gpu, s, NULL);
    cr_assert_eq(s_helper_do(&h, STEP_NEW_POOL), 1); //  the helper owns it
    kvt_gpu_event_pool_t *pool = h.pool;
    kvt_gpu_event_t *ev = kvt_gpu_event_pool_get(pool);
    s_use_up(ev, s);
    kvt_gpu_event_pool_put(pool, &ev); //  retired here, off the owner thread
    cr_assert_eq(kvt_gpu_event_pool_collect(pool), 0, "only the owner collects");
    kvt_gpu_event_pool_stats_t st = s_stats(pool);
    cr_assert_eq(st.pending, 1);
    cr_assert_eq(st.destroyed, 0);
    cr_assert_eq(s_helper_do(&h, STEP_COLLECT), 1, "the owner destroys it");
    st = s_stats(pool);
    cr_assert_eq(st.pending, 0);
    cr_assert_eq(st.destroyed, 1);
    cr_assert_eq(st.deferred, 1);
    //  A destroy here is refused; the owner's is not.
    kvt_gpu_event_pool_t *mine = pool;
    kvt_gpu_event_pool_destroy(&mine);
    cr_assert_eq(mine, pool);
    cr_assert_eq(s_helper_do(&h, STEP_DESTROY_POOL), 0, "%s", h.error);
    s_helper_stop(&h, th);
    kvt_gpu_stream_destroy(&s);
    kvt_gpu_destroy(&gpu);
}

Test(event_pool, a_destroy_off_the_owner_thread_is_refused)
{
    atomic_store(&s_errors_logged, 0);
    kvt_gpu_t *gpu = s_open(0);
    kvt_gpu_stream_t *s = kvt_gpu_stream_new(gpu, "s");
    kvt_gpu_event_pool_t *pool = kvt_gpu_event_pool_new(gpu);
    kvt_gpu_event_t *out = kvt_gpu_event_pool_get(pool);
    kvt_gpu_event_t *back = kvt_gpu_event_pool_get(pool);
    kvt_gpu_event_pool_put(pool, &back);
    helper_t h;
    pthread_t th;
    s_helper_start(&h, &th, gpu, s, pool);
    cr_assert_eq(s_helper_do(&h, STEP_DESTROY_POOL), 1, "refused: the pointer is left");
    cr_assert(strstr(h.error, "refused off the pool's owner thread"), "%s", h.error);
    s_helper_stop(&h, th);
    cr_assert_eq(atomic_load(&s_errors_logged), 1, "the refusal is logged");
    kvt_gpu_event_pool_stats_t st = s_stats(pool);
    cr_assert_eq(st.refused, 1);
    cr_assert_eq(st.destroyed, 0, "nothing destroyed");
    cr_assert_eq(st.in_use, 1);
    cr_assert_eq(st.free, 1);
    //  The pool still works, and its owner destroys it.
    cr_assert_eq(kvt_gpu_event_record(out, s), 0);
    kvt_gpu_event_pool_put(pool, &out);
    kvt_gpu_event_pool_destroy(&pool);
    cr_assert_null(pool);
    kvt_gpu_stream_destroy(&s);
    kvt_gpu_destroy(&gpu);
}

Test(event_pool, the_device_destroy_is_refused_while_another_threads_pool_is_open)
{
    atomic_store(&s_errors_logged, 0);
    kvt_gpu_t *gpu = s_open(0);
    helper_t h;
    pthread_t th;
    s_helper_start(&h, &th, gpu, NULL, NULL);
    cr_assert_eq(s_helper_do(&h, STEP_NEW_POOL), 1);
    cr_assert_eq(s_helper_do(&h, STEP_GET), 1);
    kvt_gpu_t *dev = gpu;
    kvt_gpu_destroy(&dev);
    cr_assert_eq(dev, gpu, "refused: the pointer is left");
    cr_assert(strstr(kvt_gpu_last_error(), "owned by another thread"), "%s", kvt_gpu_last_error());
    cr_assert_eq(atomic_load(&s_errors_logged), 1);
    kvt_gpu_stats_t st;
    kvt_gpu_stats(gpu, &st);
    cr_assert_eq(st.refused, 1);
    //  Untouched: the owner's pool still works, then goes on its thread.
    kvt_gpu_event_pool_stats_t pst = s_stats(h.pool);
    cr_assert_eq(pst.in_use, 1);
    cr_assert_eq(s_helper_do(&h, STEP_DESTROY_POOL), 0, "%s", h.error);
    s_helper_stop(&h, th);
    kvt_gpu_destroy(&gpu);
    cr_assert_null(gpu);
}

Test(event_pool, destroy_takes_deferred_and_handed_out_events)
{
    kvt_gpu_t *gpu = s_open(0);
    kvt_gpu_event_pool_t *pool = kvt_gpu_event_pool_new(gpu);
    for (int i = 0; i < 5; i++)
        cr_assert_not_null(kvt_gpu_event_pool_get(pool));
    kvt_gpu_event_pool_destroy(&pool);
    //  The device's destroy also takes a pool this thread left open.
    pool = kvt_gpu_event_pool_new(gpu);
    cr_assert_not_null(kvt_gpu_event_pool_get(pool));
    kvt_gpu_destroy(&gpu);
    cr_assert_null(gpu);
}

Test(event_pool, an_event_destroy_of_a_pool_event_is_refused)
{
    atomic_store(&s_errors_logged, 0);
    kvt_gpu_t *gpu = s_open(0);
    kvt_gpu_event_pool_t *pool = kvt_gpu_event_pool_new(gpu);
    kvt_gpu_event_t *ev = kvt_gpu_event_pool_get(pool);
    kvt_gpu_event_t *keep = ev;
    kvt_gpu_event_destroy(&ev);
    cr_assert_eq(ev, keep, "refused: the pointer is left");
    cr_assert(strstr(kvt_gpu_last_error(), "belongs to an event pool"), "%s", kvt_gpu_last_error());
    cr_assert_eq(atomic_load(&s_errors_logged), 1);
    kvt_gpu_event_pool_stats_t st = s_stats(pool);
    cr_assert_eq(st.refused, 1);
    cr_assert_eq(st.in_use, 1);
    kvt_gpu_event_pool_put(pool, &ev);
    st = s_stats(pool);
    cr_assert_eq(st.free, 1);
    kvt_gpu_event_pool_destroy(&pool);
    kvt_gpu_destroy(&gpu);
}

//  The default build (RelWithDebInfo) defines NDEBUG: this check must not
//  be an assert.
Test(event_pool, a_second_put_is_refused_in_every_build)
{
    atomic_store(&s_errors_logged, 0);
    kvt_gpu_t *gpu = s_open(0);
    kvt_gpu_event_pool_t *pool = kvt_gpu_event_pool_new(gpu);
    kvt_gpu_event_t *ev = kvt_gpu_event_pool_get(pool);
    kvt_gpu_event_t *stale = ev;
    kvt_gpu_event_pool_put(pool, &ev);
    kvt_gpu_event_pool_put(pool, &stale);
    cr_assert_null(stale);
    cr_assert(strstr(kvt_gpu_last_error(), "already put back"), "%s", kvt_gpu_last_error());
    cr_assert_eq(atomic_load(&s_errors_logged), 1);
    kvt_gpu_event_pool_stats_t st = s_stats(pool);
    cr_assert_eq(st.refused, 1);
    cr_assert_eq(st.free, 1, "the event is in the free list once");
    //  So two gets hand out two different events.
    kvt_gpu_event_t *a = kvt_gpu_event_pool_get(pool);
    kvt_gpu_event_t *b = kvt_gpu_event_pool_get(pool);
    cr_assert_neq(a, b);
    st = s_stats(pool);
    cr_assert_eq(st.created, 2);
    cr_assert_eq(st.in_use, 2);
    kvt_gpu_event_pool_put(pool, &a);
    kvt_gpu_event_pool_put(pool, &b);
    kvt_gpu_event_pool_destroy(&pool);
    kvt_gpu_destroy(&gpu);
}

Test(event_pool, a_put_into_the_wrong_pool_or_of_a_plain_event_is_refused)
{
    kvt_gpu_t *gpu = s_open(0);
    kvt_gpu_t *other_gpu = s_open(0);
    kvt_gpu_event_pool_t *p1 = kvt_gpu_event_pool_new(gpu);
    kvt_gpu_event_pool_t *p2 = kvt_gpu_event_pool_new(gpu);
    kvt_gpu_event_pool_t *p3 = kvt_gpu_event_pool_new(other_gpu);
    kvt_gpu_event_t *ev = kvt_gpu_event_pool_get(p1);
    kvt_gpu_event_t *alias = ev;
    kvt_gpu_event_pool_put(p2, &alias);
    cr_assert(strstr(kvt_gpu_last_error(), "another pool"), "%s", kvt_gpu_last_error());
    alias = ev;
    kvt_gpu_event_pool_put(p3, &alias);
    cr_assert(strstr(kvt_gpu_last_error(), "another device"), "%s", kvt_gpu_last_error());
    kvt_gpu_event_t *plain = kvt_gpu_event_new(gpu);
    alias = plain;
    kvt_gpu_event_pool_put(p2, &alias);
    cr_assert(strstr(kvt_gpu_last_error(), "not a pool event"), "%s", kvt_gpu_last_error());
    kvt_gpu_event_pool_stats_t st = s_stats(p2);
    cr_assert_eq(st.refused, 2);
    cr_assert_eq(st.free, 0);
    st = s_stats(p3);
    cr_assert_eq(st.refused, 1);
    cr_assert_eq(st.free, 0);
    st = s_stats(p1);
    cr_assert_eq(st.in_use, 1, "still handed out by its own pool");
    kvt_gpu_event_pool_put(p1, &ev);
    st = s_stats(p1);
    cr_assert_eq(st.free, 1);
    cr_assert_eq(st.refused, 0);
    kvt_gpu_event_destroy(&plain);
    kvt_gpu_event_pool_destroy(&p1);
    kvt_gpu_event_pool_destroy(&p2);
    kvt_gpu_event_pool_destroy(&p3);
    kvt_gpu_destroy(&gpu);
    kvt_gpu_destroy(&other_gpu);
}

typedef struct {
    kvt_gpu_t *gpu;             //  device
    kvt_gpu_event_pool_t *pool; //  shared pool
    int rounds;                 //  get / record / put rounds
    int errors;                 //  failures seen
    int collected;              //  what its collect returned
} hammer_t;

static void *s_hammer(void *arg)
{
    hammer_t *h = arg;
    kvt_gpu_stream_t *s = kvt_gpu_stream_new(h->gpu, "h");
    for (int i = 0; i < h->rounds; i++) {
        kvt_gpu_event_t *ev = kvt_gpu_event_pool_get(h->pool);
        if (!ev || kvt_gpu_event_record(ev, s) != 0 || kvt_gpu_event_synchronize(ev) != 0)
            h->errors++;
        kvt_gpu_event_pool_put(h->pool, &ev);
    }
    h->collected = kvt_gpu_event_pool_collect(h->pool);
    kvt_gpu_stream_destroy(&s);
    return NULL;
}

Test(event_pool, concurrent_use_keeps_the_counters_exact)
{
    kvt_gpu_t *gpu = s_open(3);
    kvt_gpu_event_pool_t *pool = kvt_gpu_event_pool_new(gpu);
    pthread_t th[3];
    hammer_t h[3];
    for (int i = 0; i < 3; i++) {
        h[i] = (hammer_t){gpu, pool, 200, 0, 0};
        cr_assert_eq(pthread_create(&th[i], NULL, s_hammer, &h[i]), 0);
    }
    for (int i = 0; i < 3; i++) {
        pthread_join(th[i], NULL);
        cr_assert_eq(h[i].errors, 0);
        cr_assert_eq(h[i].collected, 0, "not the owner");
    }
    kvt_gpu_event_pool_stats_t st = s_stats(pool);
    cr_assert_eq(st.recorded, 600);
    cr_assert_eq(st.in_use, 0);
    cr_assert_eq(st.refused, 0);
    //  Every retirement happened off the owner thread: all deferred, none
    //  destroyed yet.
    cr_assert_eq(st.deferred, st.retired);
    cr_assert_eq(st.pending, st.retired);
    cr_assert_eq(st.destroyed, 0);
    //  A retired event took 4 records; each free one 1 to 3.
    cr_assert_leq(st.free, 600 - 4 * st.retired);
    cr_assert_leq(600 - 4 * st.retired, 3 * st.free);
    uint64_t retired = st.retired;
    cr_assert_eq(kvt_gpu_event_pool_collect(pool), (int)retired);
    st = s_stats(pool);
    cr_assert_eq(st.pending, 0);
    cr_assert_eq(st.destroyed, retired);
    kvt_gpu_event_pool_destroy(&pool);
    kvt_gpu_destroy(&gpu);
}
