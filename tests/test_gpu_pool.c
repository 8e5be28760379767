/*  test_gpu_pool.c — the event pool: reuse, the re-record bound, retirement,
    destruction only on the owner thread (deferred otherwise, collected on
    the owner's next pool call), counters, and concurrent use.
*/
#include <criterion/criterion.h>
#include <pthread.h>
#include <string.h>

#include "kvtier/kvt_gpu.h"

static void s_quiet(void *arg, int level, const char *line)
{
    (void)arg;
    (void)level;
    (void)line;
}

static kvt_gpu_t *s_open(uint32_t max_rerecords)
{
    kvt_gpu_opts_t o = {0};
    o.backend = KVT_GPU_BACKEND_HOST;
    o.event_max_rerecords = max_rerecords;
    o.log = s_quiet;
    kvt_gpu_t *gpu = kvt_gpu_new(&o);
    cr_assert_not_null(gpu);
    return gpu;
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
    kvt_gpu_event_pool_stats_t st;
    kvt_gpu_event_pool_stats(pool, &st);
    cr_assert_eq(st.created, 2);
    cr_assert_eq(st.recorded, 2);
    cr_assert_eq(st.in_use, 2);
    cr_assert_eq(st.free, 0);
    kvt_gpu_event_pool_put(pool, &ev);
    kvt_gpu_event_pool_stats(pool, &st);
    cr_assert_eq(st.in_use, 1);
    cr_assert_eq(st.free, 1);
    //  `second` is still out: the pool's destroy takes it too.
    kvt_gpu_event_pool_destroy(&pool);
    cr_assert_null(pool);
    kvt_gpu_stream_destroy(&s);
    kvt_gpu_destroy(&gpu);
}

Test(event_pool, an_event_out_of_rerecords_is_retired_and_replaced)
{
    kvt_gpu_t *gpu = s_open(31);
    kvt_gpu_stream_t *s = kvt_gpu_stream_new(gpu, "s");
    kvt_gpu_event_pool_t *pool = kvt_gpu_event_pool_new(gpu);
    kvt_gpu_event_t *ev = kvt_gpu_event_pool_get(pool);
    for (int i = 0; i < 32; i++)
        cr_assert_eq(kvt_gpu_event_record(ev, s), 0);
    cr_assert_eq(kvt_gpu_event_record(ev, s), KVT_GPU_ELIMIT);
    kvt_gpu_event_pool_put(pool, &ev);
    kvt_gpu_event_pool_stats_t st;
    kvt_gpu_event_pool_stats(pool, &st);
    cr_assert_eq(st.retired, 1);
    cr_assert_eq(st.destroyed, 1, "retired on its owner thread: destroyed at once");
    cr_assert_eq(st.deferred, 0);
    cr_assert_eq(st.free, 0);
    ev = kvt_gpu_event_pool_get(pool);
    cr_assert_eq(kvt_gpu_event_records(ev), 0, "a fresh event replaces it");
    kvt_gpu_event_pool_stats(pool, &st);
    cr_assert_eq(st.created, 2);
    cr_assert_eq(st.recorded, 32);
    kvt_gpu_event_pool_put(pool, &ev);
    kvt_gpu_event_pool_destroy(&pool);
    kvt_gpu_stream_destroy(&s);
    kvt_gpu_destroy(&gpu);
}

//  The owner thread: creates an event through the pool, hands it over, and
//  later (on request) makes its next pool call.
typedef struct {
    kvt_gpu_event_pool_t *pool; //  shared pool
    pthread_mutex_t mu;         //  guards what follows
    pthread_cond_t cv;          //  signalled on change
    kvt_gpu_event_t *ev;        //  the event it created
    bool collect;               //  main asks it to call collect
    int collected;              //  what collect returned
    bool done;                  //  it returned
} owner_t;

static void *s_owner(void *arg)
{
    owner_t *o = arg;
    kvt_gpu_event_t *ev = kvt_gpu_event_pool_get(o->pool);
    pthread_mutex_lock(&o->mu);
    o->ev = ev;
    pthread_cond_broadcast(&o->cv);
    while (!o->collect)
        pthread_cond_wait(&o->cv, &o->mu);
    pthread_mutex_unlock(&o->mu);
    int n = kvt_gpu_event_pool_collect(o->pool);
    pthread_mutex_lock(&o->mu);
    o->collected = n;
    o->done = true;
    pthread_mutex_unlock(&o->mu);
    return NULL;
}

Test(event_pool, a_retirement_off_the_owner_thread_is_deferred_to_the_owner)
{
    kvt_gpu_t *gpu = s_open(1);
    kvt_gpu_stream_t *s = kvt_gpu_stream_new(gpu, "s");
    kvt_gpu_event_pool_t *pool = kvt_gpu_event_pool_new(gpu);
    owner_t o = {.pool = pool};
    pthread_mutex_init(&o.mu, NULL);
    pthread_cond_init(&o.cv, NULL);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, s_owner, &o), 0);
    pthread_mutex_lock(&o.mu);
    while (!o.ev)
        pthread_cond_wait(&o.cv, &o.mu);
    kvt_gpu_event_t *ev = o.ev;
    pthread_mutex_unlock(&o.mu);

    cr_assert_eq(kvt_gpu_event_record(ev, s), 0);
    cr_assert_eq(kvt_gpu_event_record(ev, s), 0);
    kvt_gpu_event_pool_put(pool, &ev); //  retired here, on a non-owner thread
    kvt_gpu_event_pool_stats_t st;
    kvt_gpu_event_pool_stats(pool, &st);
    cr_assert_eq(st.retired, 1);
    cr_assert_eq(st.deferred, 1);
    cr_assert_eq(st.destroyed, 0, "not destroyed off its owner thread");
    //  Our own collect does not touch it.
    cr_assert_eq(kvt_gpu_event_pool_collect(pool), 0);
    kvt_gpu_event_pool_stats(pool, &st);
    cr_assert_eq(st.destroyed, 0);

    pthread_mutex_lock(&o.mu);
    o.collect = true;
    pthread_cond_broadcast(&o.cv);
    pthread_mutex_unlock(&o.mu);
    pthread_join(th, NULL);
    cr_assert(o.done);
    cr_assert_eq(o.collected, 1);
    kvt_gpu_event_pool_stats(pool, &st);
    cr_assert_eq(st.destroyed, 1);
    kvt_gpu_event_pool_destroy(&pool);
    kvt_gpu_stream_destroy(&s);
    kvt_gpu_destroy(&gpu);
}

Test(event_pool, destroy_takes_deferred_and_handed_out_events)
{
    kvt_gpu_t *gpu = s_open(0);
    kvt_gpu_event_pool_t *pool = kvt_gpu_event_pool_new(gpu);
    for (int i = 0; i < 5; i++)
        cr_assert_not_null(kvt_gpu_event_pool_get(pool));
    kvt_gpu_event_pool_destroy(&pool);
    //  The device's destroy also takes a pool left open.
    pool = kvt_gpu_event_pool_new(gpu);
    cr_assert_not_null(kvt_gpu_event_pool_get(pool));
    kvt_gpu_destroy(&gpu);
}

typedef struct {
    kvt_gpu_t *gpu;             //  device
    kvt_gpu_event_pool_t *pool; //  shared pool
    int rounds;                 //  get / record / put rounds
    int errors;                 //  failures seen
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
    kvt_gpu_event_pool_collect(h->pool);
    kvt_gpu_stream_destroy(&s);
    return NULL;
}

Test(event_pool, concurrent_use_keeps_the_counters_consistent)
{
    kvt_gpu_t *gpu = s_open(3);
    kvt_gpu_event_pool_t *pool = kvt_gpu_event_pool_new(gpu);
    pthread_t th[3];
    hammer_t h[3];
    for (int i = 0; i < 3; i++) {
        h[i] = (hammer_t){gpu, pool, 200, 0};
        cr_assert_eq(pthread_create(&th[i], NULL, s_hammer, &h[i]), 0);
    }
    for (int i = 0; i < 3; i++) {
        pthread_join(th[i], NULL);
        cr_assert_eq(h[i].errors, 0);
    }
    kvt_gpu_event_pool_stats_t st;
    kvt_gpu_event_pool_stats(pool, &st);
    cr_assert_eq(st.recorded, 600);
    cr_assert_eq(st.in_use, 0);
    //  Every record is accounted for: each event takes at most 4.
    cr_assert_geq(st.created * 4, 600);
    //  Each event is free, handed out, or retired (destroyed or deferred).
    cr_assert_eq(st.created, st.free + st.in_use + st.retired);
    cr_assert_leq(st.destroyed, st.retired);
    kvt_gpu_event_pool_destroy(&pool);
    kvt_gpu_destroy(&gpu);
}
