/*  Scheduler core: the defects of issues 14 §3 and 17 §4, each with the
    test that failed before its fix — a load no rank reports on settles at
    its deadline, an abort never needs memory to keep what a load writes, a
    save skipped for a key in flight elsewhere is not a hole when that save
    fails, and the plan's event backlog (its size estimate, its drain, the
    refused re-arrival's FINISH). Driven directly, no actors. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "actors/common/kvt_prefix.h"
#include "actors/scheduler/kvt_planbuf.h"
#include "actors/scheduler/kvt_sched.h"

// ------------------------------------------------- allocation failure ----

//  Out of memory at chosen moments: while s_oom is set every allocation of
//  this process fails. The allocator is glibc's own, reached by its
//  exported names; not under a sanitizer, which owns malloc itself.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define S_CAN_FAIL_ALLOC 0
#else
#define S_CAN_FAIL_ALLOC 1
extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);
extern void __libc_free(void *p);
static volatile int s_oom;
static volatile unsigned s_oom_refused; //  allocations refused while s_oom was set

void *malloc(size_t n)
{
    if (s_oom) {
        s_oom_refused++;
        return NULL;
    }
    return __libc_malloc(n);
}

void *calloc(size_t n, size_t size)
{
    if (s_oom) {
        s_oom_refused++;
        return NULL;
    }
    return __libc_calloc(n, size);
}

void *realloc(void *p, size_t n)
{
    if (s_oom) {
        s_oom_refused++;
        return NULL;
    }
    return __libc_realloc(p, n);
}

void free(void *p)
{
    __libc_free(p);
}
#endif

// ---------------------------------------------------------------- rig ----

#define BS 16
#define CS 64

typedef struct {
    kvt_sched_t *s;             //  the core
    kvt_step_plan_t plan;       //  last plan
    uint64_t step;              //  step counter
    kvt_verdict_t pending[512]; //  verdicts of the last plans, not delivered yet
    uint32_t npending;          //  entries in pending
    bool fail_saves;            //  save verdicts fail (NO_SPACE)
    uint32_t retreats;          //  RETREAT events
    uint32_t retreat_detail;    //  detail of the last one
    uint32_t finished;          //  FINISH events (c = 0)
    uint32_t refused;           //  FINISH events of refused arrivals (c = 1)
    uint32_t refused_gen;       //  generation of the last one
    uint32_t events;            //  events handed out
    uint32_t loads;             //  load specs planned
    kvt_hash_t stored[1024];    //  chunk keys the ranks hold (ok save verdicts delivered)
    uint32_t nstored;           //  entries in stored
} rig_t;

static bool rig_holds(const rig_t *r, kvt_hash_t k)
{
    for (uint32_t i = 0; i < r->nstored; i++)
        if (kvt_hash_eq(r->stored[i], k))
            return true;
    return false;
}

static kvt_sched_cfg_t rig_cfg(uint32_t hbm_blocks, uint32_t tier_chunks)
{
    kvt_sched_cfg_t cfg = {.block_size = BS,
                           .chunk_size = CS,
                           .hbm_blocks = hbm_blocks,
                           .tier_chunks = tier_chunks,
                           .max_running = 8,
                           .step_tokens = 256,
                           .save_retries = 1,
                           .ns = kvt_namespace_hash("test")};
    return cfg;
}

static void rig_init(rig_t *r, const kvt_sched_cfg_t *cfg)
{
    memset(r, 0, sizeof *r);
    char err[128];
    r->s = kvt_sched_new(cfg, err, sizeof err);
    cr_assert_not_null(r->s, "%s", err);
}

static void rig_arrive(rig_t *r, uint64_t id, uint32_t n, uint32_t base, uint32_t max_new)
{
    uint32_t t[1024];
    cr_assert_leq(n, 1024);
    for (uint32_t i = 0; i < n; i++)
        t[i] = base + i;
    kvt_arrival_t a = {.req = id, .tokens = t, .ntokens = n, .max_new_tokens = max_new};
    cr_assert_eq(kvt_sched_arrive(r->s, &a), 0);
}

static void rig_audit(rig_t *r)
{
    char err[256];
    cr_assert_eq(kvt_sched_audit(r->s, err, sizeof err), 0, "%s", err);
}

static void rig_queue(rig_t *r, const kvt_verdict_t *v)
{
    cr_assert_lt(r->npending, sizeof r->pending / sizeof r->pending[0]);
    r->pending[r->npending++] = *v;
}

//  One plan: its events counted, a verdict queued for each load and each
//  chunk save. Returns the plan's return code.
static int rig_step(rig_t *r)
{
    int rc = kvt_sched_plan(r->s, ++r->step, false, &r->plan);
    if (rc == KVT_SCHED_HOLD)
        r->step--;
    if (rc < 0)
        return rc;
    const kvt_step_plan_t *p = &r->plan;
    r->events += p->nevents;
    for (uint32_t i = 0; i < p->nevents; i++) {
        const kvt_event_t *e = &p->events[i];
        if (e->type == KVT_EV_RETREAT) {
            r->retreats++;
            r->retreat_detail = e->b;
        } else if (e->type == KVT_EV_FINISH && e->c == 1) {
            r->refused++;
            r->refused_gen = e->op.gen;
        } else if (e->type == KVT_EV_FINISH)
            r->finished++;
    }
    //  A lookup's answer: the leading keys the ranks hold.
    for (uint32_t i = 0; i < p->nlookups; i++) {
        kvt_verdict_t v = {.chan = KVT_CHAN_LOOKUP, .op = p->lookups[i].op, .ok = true};
        while (v.held < p->lookups[i].nkeys && rig_holds(r, p->lookups[i].keys[v.held]))
            v.held++;
        rig_queue(r, &v);
    }
    for (uint32_t i = 0; i < p->nloads; i++) {
        kvt_verdict_t v = {.chan = KVT_CHAN_LOAD, .op = p->loads[i].op, .ok = true};
        rig_queue(r, &v);
        r->loads++;
    }
    for (uint32_t i = 0; i < p->nsaves; i++)
        for (uint32_t k = 0; k < p->saves[i].nkeys; k++) {
            kvt_verdict_t v = {.chan = KVT_CHAN_SAVE,
                               .op = p->saves[i].op,
                               .key = p->saves[i].keys[k],
                               .attempt = p->saves[i].attempt,
                               .ok = !r->fail_saves,
                               .detail = r->fail_saves ? KVT_DETAIL_NO_SPACE : 0};
            rig_queue(r, &v);
        }
    return rc;
}

static void rig_deliver(rig_t *r)
{
    for (uint32_t i = 0; i < r->npending; i++) {
        const kvt_verdict_t *v = &r->pending[i];
        if (v->chan == KVT_CHAN_SAVE && v->ok && !rig_holds(r, v->key) && r->nstored < 1024)
            r->stored[r->nstored++] = v->key;
        kvt_sched_verdict(r->s, v);
    }
    r->npending = 0;
}

//  Delivers the lookups' answers only (a plan that just asked), keeping
//  the rest.
static void rig_answer_lookups(rig_t *r)
{
    uint32_t keep = 0;
    for (uint32_t i = 0; i < r->npending; i++)
        if (r->pending[i].chan == KVT_CHAN_LOOKUP)
            kvt_sched_verdict(r->s, &r->pending[i]);
        else
            r->pending[keep++] = r->pending[i];
    r->npending = keep;
}

//  Runs until idle, delivering verdicts after every plan, the clock
//  advancing 1 ms a plan from *now.
static void rig_run(rig_t *r, uint64_t *now, uint32_t max_steps)
{
    for (uint32_t i = 0; i < max_steps; i++) {
        *now += 1000;
        kvt_sched_set_now(r->s, *now);
        int rc = rig_step(r);
        rig_deliver(r);
        rig_audit(r);
        if (rc == 0 && r->plan.idle)
            return;
    }
    kvt_sched_stats_t st;
    kvt_sched_stats(r->s, &st);
    cr_assert_fail("did not go idle in %u steps: waiting %u running %u loading %u saves out %u "
                   "lookups out %u orphans %u",
                   max_steps, st.waiting, st.running, st.loading, st.saves_outstanding,
                   st.lookups_out, st.load_orphans);
}

static kvt_sched_stats_t rig_stats(rig_t *r)
{
    kvt_sched_stats_t st;
    kvt_sched_stats(r->s, &st);
    return st;
}

//  12 blocks of HBM and a tier: request 1's prompt is saved, request 2's
//  evicts it, request 3 (request 1's prompt) loads [0, 128) from the tier
//  into 8 fresh blocks; its load's verdict is taken out of the rig.
static kvt_verdict_t rig_load_setup(rig_t *r, const kvt_sched_cfg_t *cfg, uint64_t *now)
{
    rig_init(r, cfg);
    rig_arrive(r, 1, 150, 100, 1);
    rig_run(r, now, 50);
    rig_arrive(r, 2, 150, 90000, 1);
    rig_run(r, now, 50);
    rig_arrive(r, 3, 150, 100, 1);
    *now += 1000;
    kvt_sched_set_now(r->s, *now);
    cr_assert_eq(rig_step(r), 1); //  its lookup
    rig_answer_lookups(r);
    cr_assert_eq(rig_step(r), 1);
    cr_assert_eq(r->plan.nloads, 1);
    cr_assert_eq(r->plan.loads[0].nblocks, 8);
    cr_assert_eq(r->npending, 1);
    kvt_verdict_t v = r->pending[0];
    r->npending = 0;
    return v;
}

// ---------------------------------------------- 14 §3: load deadline ----

//  No rank ever reports on the load (TP = 1, the rank died mid-load): the
//  aggregator's timeout never starts, so the core's own deadline settles
//  it, failed with TIMEOUT. A rank may still write the load's blocks and
//  state slot, so the load drains for the orphan bound before its request
//  retreats and finishes; the verdict that comes meanwhile is dropped
//  and counted, not applied.
Test(sched_defects, a_load_no_rank_reports_on_settles_failed_at_its_deadline)
{
    static rig_t r;
    uint64_t now = 0;
    kvt_sched_cfg_t cfg = rig_cfg(12, 64);
    cfg.load_deadline_us = 5000;
    cfg.orphan_reclaim_us = 3000;
    kvt_verdict_t late = rig_load_setup(&r, &cfg, &now);
    uint64_t dispatched = now;
    cr_assert_eq(kvt_sched_next_deadline(r.s), dispatched + 5000);
    //  Before the deadline the plan holds (nothing else can run).
    kvt_sched_set_now(r.s, dispatched + 4999);
    cr_assert_eq(rig_step(&r), KVT_SCHED_HOLD);
    cr_assert_eq(rig_stats(&r).loading, 1);
    //  At it the load settles failed, but drains: the request stays
    //  loading, its destination its own, until the drain bound.
    kvt_sched_set_now(r.s, dispatched + 5000);
    cr_assert_eq(rig_step(&r), KVT_SCHED_HOLD);
    kvt_sched_stats_t st = rig_stats(&r);
    cr_assert_eq(st.loads_timed_out, 1);
    cr_assert_eq(st.loads_drained, 1);
    cr_assert_eq(st.loading, 1, "a timed-out load drains before it retreats");
    cr_assert_eq(r.retreats, 0);
    cr_assert_eq(kvt_sched_next_deadline(r.s), dispatched + 8000);
    rig_audit(&r);
    //  The late verdict is dropped and counted (not stale, not applied).
    cr_assert_eq(kvt_sched_verdict(r.s, &late), 0);
    st = rig_stats(&r);
    cr_assert_eq(st.load_late_verdicts, 1);
    cr_assert_eq(st.stale_verdicts, 0);
    cr_assert_eq(st.loads_ok, 0);
    kvt_sched_set_now(r.s, dispatched + 7999);
    cr_assert_eq(rig_step(&r), KVT_SCHED_HOLD);
    cr_assert_eq(rig_stats(&r).loading, 1);
    //  Drained: the load settles failed and the request runs from its HBM hit.
    kvt_sched_set_now(r.s, dispatched + 8000);
    cr_assert_eq(rig_step(&r), 1);
    st = rig_stats(&r);
    cr_assert_eq(st.loads_failed, 1);
    cr_assert_eq(st.loading, 0);
    cr_assert_eq(r.retreats, 1);
    cr_assert_eq(r.retreat_detail, KVT_DETAIL_TIMEOUT);
    cr_assert_eq(r.plan.nentries, 1, "the request runs in the plan that settled its load");
    cr_assert_eq(kvt_sched_next_deadline(r.s), UINT64_MAX);
    rig_audit(&r);
    rig_deliver(&r);
    rig_run(&r, &now, 100);
    cr_assert_eq(r.finished, 3);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  The aggregator settled a leg by its bound (TIMEOUT: a rank never
//  reported, its transfer may be on its way): the load drains before it
//  retreats, and a request aborted meanwhile leaves the blocks and slot
//  the late transfer may write with an orphan, not the free list.
Test(sched_defects, a_leg_the_aggregator_timed_out_drains_before_its_retreat)
{
    static rig_t r;
    uint64_t now = 0;
    kvt_sched_cfg_t cfg = rig_cfg(12, 64);
    cfg.orphan_reclaim_us = 3000;
    kvt_verdict_t v = rig_load_setup(&r, &cfg, &now);
    uint64_t at = now;
    v.ok = false;
    v.detail = KVT_DETAIL_TIMEOUT;
    cr_assert_eq(kvt_sched_verdict(r.s, &v), 0);
    //  What that leg reports during the drain is late: dropped and counted
    //  as late, not as stale.
    uint64_t stale = rig_stats(&r).stale_verdicts;
    cr_assert_eq(kvt_sched_verdict(r.s, &v), 0);
    cr_assert_eq(rig_stats(&r).load_late_verdicts, 1);
    cr_assert_eq(rig_stats(&r).stale_verdicts, stale);
    kvt_sched_set_now(r.s, at + 2999);
    cr_assert_eq(rig_step(&r), KVT_SCHED_HOLD);
    kvt_sched_stats_t st = rig_stats(&r);
    cr_assert_eq(st.loads_drained, 1);
    cr_assert_eq(st.loading, 1);
    cr_assert_eq(r.retreats, 0);
    rig_audit(&r);
    //  A failure with any other detail retreats at once: only a leg some
    //  rank never reported on can still be written.
    kvt_sched_set_now(r.s, at + 3000);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.retreats, 1);
    cr_assert_eq(rig_stats(&r).loading, 0);
    rig_deliver(&r);
    rig_run(&r, &now, 100);
    cr_assert_eq(r.finished, 3);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(sched_defects, a_request_aborted_while_its_load_drains_leaves_its_destination_held)
{
    static rig_t r;
    uint64_t now = 0;
    kvt_sched_cfg_t cfg = rig_cfg(12, 64);
    cfg.orphan_reclaim_us = 3000;
    kvt_verdict_t v = rig_load_setup(&r, &cfg, &now);
    v.ok = false;
    v.detail = KVT_DETAIL_TIMEOUT;
    cr_assert_eq(kvt_sched_verdict(r.s, &v), 0);
    cr_assert_eq(rig_stats(&r).loads_drained, 1);
    cr_assert_eq(kvt_sched_abort(r.s, 3), 0);
    kvt_sched_stats_t st = rig_stats(&r);
    cr_assert_eq(st.load_orphans, 1, "the blocks the late transfer may write stay held");
    cr_assert_eq(st.blocks_in_use, 8, "the orphan keeps the 8 blocks the load was writing");
    cr_assert_eq(st.loading, 0);
    rig_audit(&r);
    rig_run(&r, &now, 100);
    st = rig_stats(&r);
    cr_assert_eq(st.load_orphans, 0);
    cr_assert_eq(st.loads_reclaimed, 1);
    cr_assert_eq(st.blocks_in_use, 0);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  Deadlines are kept in order without a scan: three loads dispatched at
//  three times expire one by one, each exactly at its own deadline.
Test(sched_defects, loads_expire_in_deadline_order_each_at_its_own_deadline)
{
    static rig_t r;
    uint64_t now = 0;
    kvt_sched_cfg_t cfg = rig_cfg(64, 64);
    cfg.load_deadline_us = 10000;
    cfg.orphan_reclaim_us = 20000; //  the timed-out loads drain within the run
    rig_init(&r, &cfg);
    //  Three prompts saved, then evicted by a long one.
    for (uint64_t id = 1; id <= 3; id++) {
        rig_arrive(&r, id, 150, (uint32_t)id * 1000, 1);
        rig_run(&r, &now, 50);
    }
    for (uint64_t id = 4; id <= 7; id++) {
        rig_arrive(&r, id, 250, (uint32_t)id * 100000, 1);
        rig_run(&r, &now, 50);
    }
    uint64_t at[3];
    for (uint64_t id = 1; id <= 3; id++) {
        now += 1000;
        kvt_sched_set_now(r.s, now);
        rig_arrive(&r, 10 + id, 150, (uint32_t)id * 1000, 1);
        uint32_t loads = r.loads;
        cr_assert_geq(rig_step(&r), 0); //  its lookup
        rig_answer_lookups(&r);
        r.npending = 0;
        cr_assert_geq(rig_step(&r), 0);
        cr_assert_eq(r.loads, loads + 1, "request %llu loads", (unsigned long long)(10 + id));
        uint32_t keep = 0; //  no rank reports on the load
        for (uint32_t i = 0; i < r.npending; i++)
            if (r.pending[i].chan != KVT_CHAN_LOAD)
                r.pending[keep++] = r.pending[i];
        r.npending = keep;
        at[id - 1] = now;
    }
    for (uint32_t k = 0; k < 3; k++) {
        cr_assert_eq(kvt_sched_next_deadline(r.s), at[k] + 10000);
        kvt_sched_set_now(r.s, at[k] + 9999);
        rig_step(&r);
        cr_assert_eq(rig_stats(&r).loads_timed_out, k);
        kvt_sched_set_now(r.s, at[k] + 10000);
        rig_step(&r);
        cr_assert_eq(rig_stats(&r).loads_timed_out, k + 1);
        rig_audit(&r);
    }
    rig_deliver(&r);
    now = at[2] + 10000;
    rig_run(&r, &now, 200);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

// --------------------------- 17 §4: the orphan holding, reserved early ----

//  The request is aborted mid-load while no allocation can succeed: the
//  blocks its load writes must stay held (an orphan) until the load's
//  verdict, not go back to the free list under the lane writing them.
Test(sched_defects, an_abort_out_of_memory_still_holds_what_its_load_writes)
{
#if !S_CAN_FAIL_ALLOC
    cr_skip_test("allocation failure is not injected under a sanitizer");
#else
    static rig_t r;
    uint64_t now = 0;
    kvt_sched_cfg_t cfg = rig_cfg(12, 64);
    kvt_verdict_t late = rig_load_setup(&r, &cfg, &now);
    s_oom_refused = 0;
    s_oom = 1;
    int rc = kvt_sched_abort(r.s, 3);
    s_oom = 0;
    cr_assert_eq(rc, 0);
    kvt_sched_stats_t st = rig_stats(&r);
    cr_assert_eq(st.load_orphans, 1, "the load is an orphan holding its blocks");
    cr_assert_eq(st.loads_reclaimed, 0, "nothing was released without its verdict");
    cr_assert_eq(st.blocks_in_use, 8, "the 8 blocks the load writes stay referenced");
    rig_audit(&r);
    //  The late verdict settles the orphan and lets the blocks go.
    cr_assert_eq(kvt_sched_verdict(r.s, &late), 0);
    st = rig_stats(&r);
    cr_assert_eq(st.load_orphans, 0);
    cr_assert_eq(st.blocks_in_use, 0);
    rig_run(&r, &now, 50);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
#endif
}

//  An admission that cannot reserve its load's holding does not commit the
//  load: it waits, and is admitted once memory is back.
Test(sched_defects, a_load_whose_holding_cannot_be_reserved_is_not_dispatched)
{
#if !S_CAN_FAIL_ALLOC
    cr_skip_test("allocation failure is not injected under a sanitizer");
#else
    static rig_t r;
    uint64_t now = 0;
    kvt_sched_cfg_t cfg = rig_cfg(12, 64);
    rig_init(&r, &cfg);
    rig_arrive(&r, 1, 150, 100, 1);
    rig_run(&r, &now, 50);
    rig_arrive(&r, 2, 150, 90000, 1);
    rig_run(&r, &now, 50);
    rig_arrive(&r, 3, 150, 100, 1);
    now += 1000;
    kvt_sched_set_now(r.s, now);
    cr_assert_eq(rig_step(&r), 1); //  its lookup
    rig_answer_lookups(&r);
    s_oom = 1;
    int rc = kvt_sched_plan(r.s, ++r.step, false, &r.plan);
    s_oom = 0;
    cr_assert_geq(rc, 0);
    cr_assert_eq(r.plan.nloads, 0);
    kvt_sched_stats_t st = rig_stats(&r);
    cr_assert_eq(st.loads_dispatched, 0);
    cr_assert_eq(st.waiting, 1);
    rig_audit(&r);
    rig_run(&r, &now, 50);
    cr_assert_eq(rig_stats(&r).loads_ok, 1);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
#endif
}

//  S4 (moved here from test_saves.c, whose filler was the defect below): a
//  finished request's tail that its one plan cannot carry — here because
//  that plan cannot allocate its saves — is retired at end_plan and its
//  lease released. The filler used to be a 200,000-event backlog crowding
//  the plan, which the backlog fix no longer allows.
static uint64_t rig_counter(rig_t *r, const char *name)
{
    static kvt_counter_t c[256];
    uint32_t n = 0;
    kvt_sched_counters(r->s, c, &n, 256);
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(c[i].name, name) == 0)
            return c[i].value;
    cr_assert_fail("no counter %s", name);
    return 0;
}

Test(sched_defects, rule_S4_a_tail_the_plan_cannot_carry_is_retired_at_end_plan_and_released)
{
#if !S_CAN_FAIL_ALLOC
    cr_skip_test("allocation failure is not injected under a sanitizer");
#else
    static rig_t r;
    uint64_t now = 0;
    kvt_sched_cfg_t cfg = rig_cfg(64, 64);
    rig_init(&r, &cfg);
    rig_arrive(&r, 1, 128, 5, 1);
    cr_assert_eq(rig_step(&r), 1); //  its lookup
    rig_answer_lookups(&r);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.nentries, 1);
    cr_assert_eq(kvt_sched_apply(r.s, r.step, true), 0);
    kvt_sched_stats_t st = rig_stats(&r);
    cr_assert_eq(st.leased_blocks, 8);
    s_oom = 1;
    int rc = kvt_sched_plan(r.s, ++r.step, false, &r.plan);
    s_oom = 0;
    cr_assert_eq(rc, 0);
    cr_assert_eq(r.plan.nsaves, 0, "the plan had no room for the tail");
    st = rig_stats(&r);
    cr_assert_eq(rig_counter(&r, "savetrack.tails_retired"), 1, "end_plan retired it");
    cr_assert_eq(rig_counter(&r, "savetrack.chunks_retired"), 2);
    cr_assert_eq(st.leased_blocks, 0, "and released its lease");
    cr_assert_eq(st.blocks_in_use, 0);
    cr_assert_eq(st.records, 0);
    rig_audit(&r);
    r.npending = 0;
    rig_run(&r, &now, 100);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
#endif
}

// ------------------------- 17 §4: a skipped save is not left a hole ----

//  Request 2 shares request 1's first two chunks; their saves are in flight
//  (request 1's tail), so request 2 skips them and saves only its third.
//  Request 1's saves then fail (it retired: nobody re-emits them). Request
//  2's frontier must go back to the chunks it skipped and save them:
//  otherwise its third chunk sits in the tier behind a hole, unreachable.
Test(sched_defects, a_chunk_skipped_for_a_save_that_fails_is_saved_by_the_skipper)
{
    static rig_t r;
    uint64_t now = 0;
    kvt_sched_cfg_t cfg = rig_cfg(64, 64);
    rig_init(&r, &cfg);
    rig_arrive(&r, 1, 128, 100, 1);
    cr_assert_eq(rig_step(&r), 1); //  its lookup
    rig_answer_lookups(&r);
    cr_assert_eq(rig_step(&r), 1); //  its prefill [0, 128): it finishes
    r.fail_saves = true;
    cr_assert_eq(rig_step(&r), 1); //  its tail: the saves of chunks 0 and 1, failing
    r.fail_saves = false;
    cr_assert_eq(r.plan.nsaves, 1);
    cr_assert_eq(r.plan.saves[0].nkeys, 2);
    kvt_hash_t k0 = r.plan.saves[0].keys[0], k1 = r.plan.saves[0].keys[1];
    //  Request 2 (the same 128 tokens, then 64 of its own) while they fly.
    uint32_t t[192];
    for (uint32_t i = 0; i < 192; i++)
        t[i] = i < 128 ? 100 + i : 5000 + i;
    kvt_arrival_t a = {.req = 2, .tokens = t, .ntokens = 192, .max_new_tokens = 16};
    cr_assert_eq(kvt_sched_arrive(r.s, &a), 0);
    cr_assert_eq(rig_step(&r), 1); //  its lookup (the ranks hold nothing yet)
    rig_answer_lookups(&r);
    cr_assert_eq(rig_step(&r), 1); //  admitted on its HBM hit: prefill [128, 192)
    cr_assert_eq(rig_step(&r), 1); //  its saves: chunks 0 and 1 skipped, chunk 2 saved
    cr_assert_eq(r.plan.nsaves, 1);
    cr_assert_eq(r.plan.saves[0].start, 128);
    cr_assert_eq(rig_stats(&r).saves_skipped, 2);
    rig_deliver(&r); //  request 1's saves fail, request 2's chunk 2 is stored
    cr_assert_eq(rig_counter(&r, "savetrack.skips_rewound"), 2);
    rig_run(&r, &now, 100);
    cr_assert(rig_holds(&r, k0) && rig_holds(&r, k1),
              "the chunks request 2 skipped were saved after the save it relied on failed");
    cr_assert_eq(rig_counter(&r, "savetrack.skips_waiting"), 0);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

// ------------------------------------------ 17 §4: the event backlog ----

//  A backlog of queued events larger than one plan's budget (200,000 × 64
//  bytes > 12 MiB) must not crowd the plan out: only the events that go
//  with it (one message's worth) count in its size.
Test(sched_defects, an_event_backlog_does_not_crowd_the_entries_out_of_the_plan)
{
    static rig_t r;
    uint64_t now = 0;
    kvt_sched_cfg_t cfg = rig_cfg(64, 0);
    rig_init(&r, &cfg);
    uint32_t tok = 1;
    for (uint64_t id = 0; id < 200000; id++) {
        kvt_arrival_t a = {.req = 1000000 + id, .tokens = &tok, .ntokens = 0, .max_new_tokens = 1};
        cr_assert_eq(kvt_sched_arrive(r.s, &a), -1); //  refused: a FINISH event each
    }
    rig_arrive(&r, 1, 100, 100, 1);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.nentries, 1, "the request's entry fits beside the backlog");
    cr_assert_eq(r.plan.nevents, KVT_MSG_MAX_ENTRIES);
    rig_deliver(&r);
    rig_run(&r, &now, 200);
    cr_assert_eq(r.refused, 200000, "every refusal reported once");
    cr_assert_eq(r.finished, 1);
    kvt_sched_destroy(&r.s);
}

//  Draining a backlog hands every event out once, in order, and moves each
//  queued event to the front of the queue at most about once (amortised
//  O(1) per event; a memmove of the rest on every plan is quadratic).
Test(sched_defects, the_event_backlog_drains_in_order_with_linear_work)
{
    kvt_planbuf_t *pb = kvt_planbuf_new();
    cr_assert_not_null(pb);
    const uint32_t n = 100000;
    for (uint32_t i = 0; i < n; i++)
        kvt_planbuf_event(pb, i, 1, KVT_EV_FINISH, 0, 0, 0);
    uint64_t next = 0;
    for (uint32_t plans = 0; next < n; plans++) {
        cr_assert_lt(plans, n / KVT_MSG_MAX_ENTRIES + 2);
        kvt_planbuf_open(pb);
        //  One event arrives during each plan (it queues behind the backlog).
        kvt_planbuf_event(pb, n + plans, 1, KVT_EV_ADMIT, 0, 0, 0);
        kvt_step_plan_t plan;
        kvt_planbuf_finish(pb, plans + 1, &plan);
        for (uint32_t i = 0; i < plan.nevents; i++, next++)
            if (next < n)
                cr_assert_eq(plan.events[i].op.req, next, "event %llu out of order",
                             (unsigned long long)next);
    }
    kvt_planbuf_stats_t st;
    kvt_planbuf_stats(pb, &st);
    cr_assert_leq(st.backlog_moved, n, "%llu events moved for %u queued",
                  (unsigned long long)st.backlog_moved, n);
    kvt_planbuf_destroy(&pb);
}

//  A re-arrival of an id the core still holds is refused; its FINISH must
//  not carry the op id of that id's admission (live here, finished later):
//  the engine would end the wrong admission, or count one twice.
Test(sched_defects, a_refused_rearrival_names_no_admission_of_its_id)
{
    static rig_t r;
    uint64_t now = 0;
    kvt_sched_cfg_t cfg = rig_cfg(64, 64);
    rig_init(&r, &cfg);
    rig_arrive(&r, 7, 100, 100, 4);
    now += 1000;
    kvt_sched_set_now(r.s, now);
    cr_assert_eq(rig_step(&r), 1);
    kvt_sched_req_info_t info;
    cr_assert_eq(kvt_sched_req_info(r.s, 7, &info), 0);
    uint32_t t[4] = {1, 2, 3, 4};
    kvt_arrival_t again = {.req = 7, .tokens = t, .ntokens = 4, .max_new_tokens = 1};
    cr_assert_eq(kvt_sched_arrive(r.s, &again), -1);
    rig_deliver(&r);
    rig_run(&r, &now, 100);
    cr_assert_eq(r.refused, 1);
    cr_assert_eq(r.finished, 1);
    cr_assert_neq(r.refused_gen, info.gen, "the refusal names the live admission %u", info.gen);
    cr_assert_eq(r.refused_gen, KVT_SCHED_REFUSED_GEN);
    kvt_sched_destroy(&r.s);
}

// ------------------------- chaos defects 1 and 2: the save deadline ----

//  Steps at 1 ms a plan, answering lookups only (no save verdict is
//  delivered: the ranks' reports or the aggregator's verdict were lost),
//  until a plan built saves; returns the clock it was built at.
static uint64_t rig_until_saves(rig_t *r, uint64_t *now, uint32_t max_steps)
{
    for (uint32_t i = 0; i < max_steps; i++) {
        *now += 1000;
        kvt_sched_set_now(r->s, *now);
        int rc = rig_step(r);
        cr_assert_neq(rc, KVT_SCHED_REFUSED);
        rig_answer_lookups(r);
        rig_audit(r);
        if (r->plan.nsaves > 0 && rc != KVT_SCHED_HOLD)
            return *now;
    }
    cr_assert_fail("no saves in %u steps", max_steps);
    return 0;
}

//  Request 1's two chunk saves never get a verdict (TP 1 with its rank's
//  report dropped, or the aggregator's Verdict lost). Its record keeps its
//  blocks while they are out, so request 2, which needs the whole pool,
//  waits, and every plan holds: before the save deadline the run wedged.
//  At the deadline (load_deadline_us after the build) they settle failed,
//  but a rank may still read their source blocks, so the saves' leases
//  hold them orphan_reclaim_us more (the drain): request 2 is admitted only
//  when the drain ends. The late verdicts are dropped and counted.
Test(sched_defects, a_save_with_no_verdict_settles_failed_at_its_deadline_and_drains)
{
    static rig_t r;
    uint64_t now = 0;
    kvt_sched_cfg_t cfg = rig_cfg(12, 64);
    cfg.load_deadline_us = 5000;
    cfg.orphan_reclaim_us = 3000;
    rig_init(&r, &cfg);
    rig_arrive(&r, 1, 150, 100, 1);
    uint64_t built = rig_until_saves(&r, &now, 20);
    uint32_t nsaves = 0;
    for (uint32_t i = 0; i < r.npending; i++)
        nsaves += r.pending[i].chan == KVT_CHAN_SAVE;
    cr_assert_eq(nsaves, 2, "request 1's two chunks are saved");
    static kvt_verdict_t late[8];
    memcpy(late, r.pending, nsaves * sizeof late[0]);
    r.npending = 0;
    cr_assert_eq(kvt_sched_next_deadline(r.s), built + 5000);
    //  Request 2 needs all 12 blocks: it waits while request 1's are held.
    rig_arrive(&r, 2, 180, 90000, 1);
    for (now = built + 1000; now < built + 5000; now += 1000) {
        kvt_sched_set_now(r.s, now);
        cr_assert_neq(rig_step(&r), KVT_SCHED_REFUSED);
        rig_answer_lookups(&r);
        rig_audit(&r);
    }
    kvt_sched_stats_t st = rig_stats(&r);
    cr_assert_eq(st.waiting, 1, "request 2 cannot fit while the saves are out");
    cr_assert_eq(st.saves_outstanding, 2);
    cr_assert_eq(st.saves_expired, 0);
    //  At the deadline: settled failed (as a TIMEOUT would), leases held.
    kvt_sched_set_now(r.s, built + 5000);
    cr_assert_neq(rig_step(&r), KVT_SCHED_REFUSED);
    rig_answer_lookups(&r);
    st = rig_stats(&r);
    cr_assert_eq(st.saves_expired, 2);
    cr_assert_eq(st.saves_failed, 2);
    cr_assert_eq(st.saves_outstanding, 0);
    cr_assert_eq(st.saves_drained, 0);
    cr_assert_eq(st.leased_blocks, 8, "the drain holds the sources of both saves");
    cr_assert_eq(st.blocks_in_use, 8, "request 1's other blocks went, its sources did not");
    cr_assert_eq(st.waiting, 1, "request 2 cannot take the drained blocks");
    cr_assert_eq(st.records, 1, "request 1's record went with its saves");
    cr_assert_eq(kvt_sched_next_deadline(r.s) <= built + 8000, true);
    cr_assert(!kvt_sched_quiescent(r.s));
    rig_audit(&r);
    //  The late verdicts (ok: the store had them) are dropped, not applied.
    for (uint32_t i = 0; i < nsaves; i++)
        cr_assert_eq(kvt_sched_verdict(r.s, &late[i]), 0);
    st = rig_stats(&r);
    cr_assert_eq(st.save_late_verdicts, 2);
    cr_assert_eq(st.saves_ok, 0);
    cr_assert_eq(st.stale_verdicts, 0);
    cr_assert_eq(st.leased_blocks, 8, "a late verdict does not end the drain");
    rig_audit(&r);
    kvt_sched_set_now(r.s, built + 7999);
    cr_assert_neq(rig_step(&r), KVT_SCHED_REFUSED);
    rig_answer_lookups(&r);
    st = rig_stats(&r);
    cr_assert_eq(st.leased_blocks, 8);
    cr_assert_eq(st.waiting, 1);
    //  The drain ends: the sources go back and request 2 runs.
    kvt_sched_set_now(r.s, built + 8000);
    cr_assert_eq(rig_step(&r), 1);
    st = rig_stats(&r);
    cr_assert_eq(st.saves_drained, 2);
    cr_assert_eq(st.leased_blocks, 0);
    cr_assert_eq(st.waiting, 0, "request 2 was admitted once the drain ended");
    cr_assert_eq(rig_counter(&r, "sched.saves_expired"), 2);
    cr_assert_eq(rig_counter(&r, "sched.saves_drained"), 2);
    cr_assert_eq(rig_counter(&r, "sched.save_late_verdicts"), 2);
    rig_audit(&r);
    //  A verdict after the drain is stale (nothing of the save is left).
    cr_assert_eq(kvt_sched_verdict(r.s, &late[0]), -1);
    now = built + 8000;
    rig_deliver(&r);
    rig_run(&r, &now, 100);
    cr_assert_eq(r.finished, 2);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  A running request's save with no verdict settles failed at its deadline
//  and is re-emitted (S3, a new attempt) once its drain began: the request
//  goes on saving, and the save's late verdict is not taken for the
//  re-emit's.
Test(sched_defects, a_running_requests_expired_save_is_reemitted)
{
    static rig_t r;
    uint64_t now = 0;
    kvt_sched_cfg_t cfg = rig_cfg(64, 64);
    cfg.load_deadline_us = 5000;
    cfg.orphan_reclaim_us = 3000;
    rig_init(&r, &cfg);
    rig_arrive(&r, 1, 150, 100, 40); //  decodes 40 steps: still running at the deadline
    uint64_t built = rig_until_saves(&r, &now, 20);
    cr_assert_eq(r.plan.saves[0].attempt, 0);
    kvt_verdict_t first = r.pending[0];
    cr_assert_eq(first.chan, KVT_CHAN_SAVE);
    r.npending = 0;
    uint32_t reemitted_attempt = 0;
    for (now = built + 1000; now <= built + 5000; now += 1000) {
        kvt_sched_set_now(r.s, now);
        cr_assert_neq(rig_step(&r), KVT_SCHED_REFUSED);
        if (r.plan.nsaves > 0)
            reemitted_attempt = r.plan.saves[0].attempt;
        rig_answer_lookups(&r);
        if (now < built + 5000)
            r.npending = 0; //  lost; the re-emits of the deadline's plan are answered
        rig_audit(&r);
    }
    kvt_sched_stats_t st = rig_stats(&r);
    cr_assert_eq(st.saves_expired, 2);
    cr_assert_eq(st.saves_reemitted, 1);
    cr_assert_eq(st.running, 1);
    cr_assert_eq(reemitted_attempt, 1, "re-emitted in the plan of the deadline, new attempt");
    cr_assert_eq(kvt_sched_verdict(r.s, &first), 0);
    cr_assert_eq(rig_stats(&r).save_late_verdicts, 1);
    cr_assert_eq(rig_stats(&r).saves_ok, 0);
    rig_audit(&r);
    rig_run(&r, &now, 200);
    st = rig_stats(&r);
    cr_assert_eq(r.finished, 1);
    cr_assert_geq(st.saves_ok, 2, "the re-emits stored");
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}
