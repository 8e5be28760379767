/*  A request aborted (client gone) or preempted (memory pressure) in every
    phase, through the core's entry points (kvt_sched_abort / _preempt, the
    ones the scheduler actor calls for Schedule.aborts / preempts): waiting
    for its lookup or its blocks, parked on a load, running, mid-save,
    finished with a save pending; a preempted request re-admitted; unknown
    ids refused. Every lifecycle keeps one owner: what a load or a save
    still touches stays held until its verdicts, and the core ends
    quiescent. Also the Schedule fields' codec (round trip, bad values). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "actors/scheduler/kvt_scheduler.h"
#include "base/kvt_namespace.h"
#include "common/kvt_test_sched_rig.h"
#include "kvtier/kvt_actor.h"

//  The FINISH event of request req in the last plan (NULL: none).
static const kvt_event_t *s_finish_of(const rig_t *r, uint64_t req)
{
    for (uint32_t i = 0; i < r->plan.nevents; i++)
        if (r->plan.events[i].type == KVT_EV_FINISH && r->plan.events[i].op.req == req)
            return &r->plan.events[i];
    return NULL;
}

//  The ADMIT event of request req in the last plan (NULL: none).
static const kvt_event_t *s_admit_of(const rig_t *r, uint64_t req)
{
    for (uint32_t i = 0; i < r->plan.nevents; i++)
        if (r->plan.events[i].type == KVT_EV_ADMIT && r->plan.events[i].op.req == req)
            return &r->plan.events[i];
    return NULL;
}

//  Request 3 parked on a load of request 1's chunks (request 2 evicted them
//  from HBM): the rig of sched/hold_until_verdict_when_everything_waits_on_loads.
static void s_parked_on_load(rig_t *r)
{
    rig_init(r, 12, 64);
    rig_arrive(r, 1, 150, 100, 1);
    rig_run(r, 50);
    rig_arrive(r, 2, 150, 90000, 1);
    rig_run(r, 50);
    rig_arrive(r, 3, 150, 100, 1);
    cr_assert_eq(rig_step(r), 1);
    cr_assert_eq(r->plan.nloads, 1, "request 3 loads");
    kvt_sched_req_info_t info;
    cr_assert_eq(kvt_sched_req_info(r->s, 3, &info), 0);
    cr_assert_eq(info.state, 2, "parked on its load");
}

//  The known defect: a request aborted while it waits for its tier lookup
//  (never admitted) had its FINISH emitted under generation 0, which no
//  Event may carry: the plan did not encode, the shell dropped it and the
//  run wedged. It goes under KVT_SCHED_REFUSED_GEN now.
Test(sched_abort, a_request_aborted_while_waiting_for_its_lookup_finishes_under_the_refused_gen)
{
    rig_t r;
    rig_init(&r, 64, 64);
    rig_arrive(&r, 1, 100, 1, 4);
    cr_assert_eq(rig_step_once(&r), 1);
    cr_assert_eq(r.plan.nlookups, 1, "request 1 waits for its lookup");
    cr_assert_eq(kvt_sched_abort(r.s, 1), 0);
    kvt_sched_req_info_t info;
    cr_assert_neq(kvt_sched_req_info(r.s, 1, &info), 0, "its record is gone at once");
    rig_step_once(&r);
    const kvt_event_t *f = s_finish_of(&r, 1);
    cr_assert_not_null(f, "the abort's FINISH went out");
    cr_assert_eq(f->op.gen, KVT_SCHED_REFUSED_GEN, "no admission's generation (was 0)");
    cr_assert_eq(f->c, KVT_FINISH_ABORTED, "told apart from a finish and a refusal");
    plan_round_trips(&r.plan);
    rig_deliver(&r); //  the lookup's late verdict: stale, its pin released
    rig_run(&r, 50);
    kvt_sched_stats_t st = o_stats(&r);
    cr_assert_eq(st.aborted, 1);
    cr_assert_eq(st.lookups_out, 0);
    rig_audit(&r);
    cr_assert(kvt_sched_quiescent(r.s), "no pin, block or record left");
    kvt_sched_destroy(&r.s);
}

//  No tier: the request waits for blocks it cannot have (another holds
//  them), is never planned, and is aborted there.
Test(sched_abort, a_request_aborted_before_it_was_ever_planned_leaves_nothing)
{
    rig_t r;
    rig_init(&r, 8, 0);
    rig_arrive(&r, 1, 100, 1, 20); //  7 of the 8 blocks
    cr_assert_eq(rig_step(&r), 1);
    rig_arrive(&r, 2, 100, 5000, 4); //  does not fit beside request 1
    cr_assert_eq(rig_step(&r), 1);
    kvt_sched_req_info_t info;
    cr_assert_eq(kvt_sched_req_info(r.s, 2, &info), 0);
    cr_assert_eq(info.state, 1, "request 2 waits");
    cr_assert_eq(kvt_sched_abort(r.s, 2), 0);
    rig_step(&r);
    const kvt_event_t *f = s_finish_of(&r, 2);
    cr_assert_not_null(f);
    cr_assert_eq(f->op.gen, KVT_SCHED_REFUSED_GEN);
    cr_assert_eq(f->c, KVT_FINISH_ABORTED);
    plan_round_trips(&r.plan);
    rig_run(&r, 200);
    kvt_sched_stats_t st = o_stats(&r);
    cr_assert_eq(st.finished, 1, "request 1 still finished");
    cr_assert_eq(st.waiting, 0);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  I1/I2: an abort while the load is in flight hands the load to its index
//  as an orphan that keeps the blocks the lane writes until it reports.
Test(sched_abort, a_request_aborted_parked_on_a_load_leaves_the_loads_blocks_held_until_it_reports)
{
    rig_t r;
    s_parked_on_load(&r);
    kvt_sched_req_info_t info;
    kvt_sched_req_info(r.s, 3, &info);
    uint32_t gen = info.gen;
    uint32_t before = o_stats(&r).blocks_in_use;
    cr_assert_eq(kvt_sched_abort(r.s, 3), 0);
    kvt_sched_stats_t st = o_stats(&r);
    cr_assert_eq(st.load_orphans, 1, "the orphan holds the load's destination");
    cr_assert_eq(st.loading, 0);
    cr_assert_gt(st.blocks_in_use, 0, "the blocks the lane writes are not free");
    cr_assert_leq(st.blocks_in_use, before);
    rig_audit(&r);
    cr_assert_eq(rig_step(&r), 0, "nothing runs");
    const kvt_event_t *f = s_finish_of(&r, 3);
    cr_assert_not_null(f);
    cr_assert_eq(f->op.gen, gen, "an admitted request's FINISH names its admission");
    cr_assert_eq(f->c, KVT_FINISH_ABORTED);
    cr_assert_eq(o_stats(&r).load_orphans, 1, "still held: no verdict yet");
    rig_deliver(&r); //  the lane reports
    st = o_stats(&r);
    cr_assert_eq(st.load_orphans, 0, "settled by its verdict");
    cr_assert_eq(st.blocks_in_use, 0);
    rig_run(&r, 50);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(sched_abort, a_running_request_aborted_computes_nothing_more_and_gives_back_its_blocks)
{
    rig_t r;
    rig_init(&r, 64, 0);
    rig_arrive(&r, 1, 40, 1, 50);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(rig_step(&r), 1);
    kvt_sched_req_info_t info;
    kvt_sched_req_info(r.s, 1, &info);
    cr_assert_eq(info.state, 3, "running");
    cr_assert_gt(o_stats(&r).blocks_in_use, 0);
    cr_assert_eq(kvt_sched_abort(r.s, 1), 0);
    cr_assert_eq(kvt_sched_abort(r.s, 1), -1, "aborted once");
    cr_assert_eq(o_stats(&r).blocks_in_use, 0, "no save reads them: freed at once");
    cr_assert_eq(rig_step(&r), 0);
    cr_assert_eq(r.plan.nentries, 0, "it computes nothing more");
    const kvt_event_t *f = s_finish_of(&r, 1);
    cr_assert_not_null(f);
    cr_assert_eq(f->c, KVT_FINISH_ABORTED);
    cr_assert_eq(f->b, 0, "no generated tokens reported for an abort");
    kvt_sched_stats_t st = o_stats(&r);
    cr_assert_eq(st.aborted, 1);
    cr_assert_eq(st.finished, 0);
    cr_assert_eq(st.running, 0);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  S-rules: a save in flight reads the request's blocks; the abort must not
//  free them before the save's verdicts.
Test(sched_abort, an_abort_mid_save_keeps_the_blocks_the_save_reads_until_its_verdicts)
{
    rig_t r;
    rig_init(&r, 64, 64);
    rig_arrive(&r, 1, 128, 5, 40);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.nsaves, 1, "two chunks saved");
    cr_assert_eq(kvt_sched_abort(r.s, 1), 0);
    kvt_sched_stats_t st = o_stats(&r);
    cr_assert_eq(st.saves_outstanding, 2);
    cr_assert_geq(st.blocks_in_use, 8, "the two chunks' blocks (%u) are held for the save",
                  st.blocks_in_use);
    rig_audit(&r);
    cr_assert_eq(rig_step(&r), KVT_SCHED_HOLD, "nothing runs, the saves are out");
    cr_assert_geq(o_stats(&r).blocks_in_use, 8, "still held: no verdict yet");
    rig_deliver(&r);
    st = o_stats(&r);
    cr_assert_eq(st.saves_ok, 2, "the save completes: its chunks are good");
    cr_assert_eq(st.blocks_in_use, 0);
    rig_step(&r);
    cr_assert_not_null(s_finish_of(&r, 1), "the held FINISH goes with the next plan");
    rig_run(&r, 50);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  An abort racing the request's own FINISH (the engine saw the client go
//  before the plan that finished it): refused, the pending save untouched.
Test(sched_abort, an_abort_of_a_request_finished_with_a_save_pending_is_refused_and_changes_nothing)
{
    rig_t r;
    rig_init(&r, 64, 64);
    rig_arrive(&r, 1, 128, 5, 1);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_not_null(s_finish_of(&r, 1), "finished");
    kvt_sched_stats_t st = o_stats(&r);
    cr_assert_gt(st.saves_outstanding, 0, "its save is still out");
    uint32_t held = st.blocks_in_use;
    cr_assert_gt(held, 0);
    cr_assert_eq(kvt_sched_abort(r.s, 1), -1);
    cr_assert_eq(kvt_sched_preempt(r.s, 1), -1);
    st = o_stats(&r);
    cr_assert_eq(st.aborted, 0);
    cr_assert_eq(st.blocks_in_use, held, "nothing the save reads was freed");
    rig_deliver(&r);
    rig_run(&r, 50);
    st = o_stats(&r);
    cr_assert_eq(st.saves_failed, 0);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  A preempted request gives back its HBM, waits at the head of the queue,
//  is looked up and admitted again under a new generation, verified where
//  it resumes (never resuming wrong bytes), and finishes.
Test(sched_abort, a_preempted_running_request_is_readmitted_under_a_new_generation_and_finishes)
{
    rig_t r;
    rig_init(&r, 64, 64);
    rig_arrive(&r, 1, 128, 5, 40);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(rig_step(&r), 1);
    rig_deliver(&r);
    kvt_sched_req_info_t info;
    kvt_sched_req_info(r.s, 1, &info);
    uint32_t gen = info.gen;
    cr_assert_eq(kvt_sched_preempt(r.s, 1), 0);
    kvt_sched_req_info(r.s, 1, &info);
    cr_assert_eq(info.state, 1, "waiting again");
    cr_assert_eq(info.nblocks, 0, "its HBM went back");
    cr_assert_eq(info.computed, 0, "it recomputes from its resume point");
    cr_assert_eq(kvt_sched_preempt(r.s, 1), -1, "a waiting request has nothing to give back");
    uint32_t admits = 0, new_gen = 0, finish_c = 99;
    bool verified = false;
    for (uint32_t i = 0; i < 200 && finish_c == 99; i++) {
        int rc = rig_step(&r);
        const kvt_event_t *a = s_admit_of(&r, 1);
        if (a) {
            admits++;
            new_gen = a->op.gen;
        }
        for (uint32_t e = 0; e < r.plan.nentries; e++)
            verified |= r.plan.entries[e].op.req == 1 && r.plan.entries[e].verify_end > 0;
        const kvt_event_t *f = s_finish_of(&r, 1);
        if (f)
            finish_c = f->c;
        rig_deliver(&r);
        rig_audit(&r);
        if (rc == 0 && r.plan.idle)
            break;
    }
    cr_assert_eq(admits, 1, "admitted once more");
    cr_assert_gt(new_gen, gen, "under a newer generation: the old one's reports never reach it");
    cr_assert(verified, "its resume is checked against the oracle");
    cr_assert_eq(finish_c, KVT_FINISH_DONE, "it finishes normally");
    rig_run(&r, 50);
    kvt_sched_stats_t st = o_stats(&r);
    cr_assert_eq(st.preempted, 1);
    cr_assert_eq(st.finished, 1);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  Preempted mid-load: the load is orphaned (held until it reports), the
//  request waits and is admitted again.
Test(sched_abort, a_request_preempted_parked_on_a_load_orphans_it_and_is_readmitted)
{
    rig_t r;
    s_parked_on_load(&r);
    cr_assert_eq(kvt_sched_preempt(r.s, 3), 0);
    kvt_sched_stats_t st = o_stats(&r);
    cr_assert_eq(st.load_orphans, 1);
    cr_assert_eq(st.waiting, 1);
    rig_audit(&r);
    rig_deliver(&r);
    cr_assert_eq(o_stats(&r).load_orphans, 0);
    rig_run(&r, 100);
    st = o_stats(&r);
    cr_assert_eq(st.finished, 3, "request 3 finished after its re-admission");
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(sched_abort, unknown_ids_are_refused_and_change_nothing)
{
    rig_t r;
    rig_init(&r, 64, 0);
    rig_arrive(&r, 1, 40, 1, 4);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(kvt_sched_abort(r.s, 77), -1);
    cr_assert_eq(kvt_sched_preempt(r.s, 77), -1);
    kvt_sched_stats_t st = o_stats(&r);
    cr_assert_eq(st.aborted, 0);
    cr_assert_eq(st.preempted, 0);
    cr_assert_eq(st.running, 1);
    rig_run(&r, 50);
    cr_assert_eq(o_stats(&r).finished, 1);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

// ------------------------------------------------------------ the codec ----

static void s_decode_fails(const uint8_t *b, size_t n, const char *field, const char *why)
{
    kvt_msg_t m;
    kvt_msg_err_t err;
    char e[256];
    cr_assert_eq(kvt_msg_decode(b, n, &m, &err), -1, "%s must be refused", field);
    kvt_msg_err_str(&err, e, sizeof e);
    cr_assert_eq(err.kind, KVT_MSG_SCHEDULE, "%s", e);
    cr_assert_str_eq(err.field, field, "%s", e);
    cr_assert(strstr(err.reason, why) != NULL, "%s", e);
    cr_assert_eq(m.kind, KVT_MSG_NONE, "nothing half-decoded");
}

Test(sched_abort, schedule_aborts_and_preempts_round_trip_and_an_older_sender_omits_them)
{
    uint64_t ab[2] = {7, UINT64_MAX}, pr[1] = {9};
    kvt_msg_t m = {.kind = KVT_MSG_SCHEDULE};
    m.u.schedule = (kvt_schedule_t){
        .step = 3, .now_us = 5, .aborts = ab, .naborts = 2, .preempts = pr, .npreempts = 1};
    uint8_t *buf;
    size_t len;
    cr_assert_eq(kvt_msg_encode(&m, &buf, &len), 0);
    kvt_msg_t back;
    kvt_msg_err_t err;
    cr_assert_eq(kvt_msg_decode(buf, len, &back, &err), 0);
    cr_assert_eq(back.u.schedule.naborts, 2);
    cr_assert_eq(back.u.schedule.aborts[0], 7);
    cr_assert_eq(back.u.schedule.aborts[1], UINT64_MAX);
    cr_assert_eq(back.u.schedule.npreempts, 1);
    cr_assert_eq(back.u.schedule.preempts[0], 9);
    kvt_msg_clear(&back);
    free(buf);
    //  [1, 2, {1: 3, 2: [], 3: 5}]: a sender of before the fields.
    static const uint8_t old[] = {0x93, 0x01, 0x02, 0x83, 0x01, 0x03, 0x02, 0x90, 0x03, 0x05};
    cr_assert_eq(kvt_msg_decode(old, sizeof old, &back, &err), 0);
    cr_assert_eq(back.u.schedule.naborts, 0);
    cr_assert_eq(back.u.schedule.npreempts, 0);
    cr_assert_null(back.u.schedule.aborts);
    kvt_msg_clear(&back);
    //  Empty arrays are not written (optional fields omitted when empty).
    m.u.schedule.naborts = m.u.schedule.npreempts = 0;
    cr_assert_eq(kvt_msg_encode(&m, &buf, &len), 0);
    cr_assert_eq(len, sizeof old, "an empty abort list costs no byte");
    free(buf);
}

Test(sched_abort, schedule_aborts_or_preempts_of_the_wrong_type_are_refused_naming_the_field)
{
    //  5: true (not an array)
    static const uint8_t a_bool[] = {0x93, 0x01, 0x02, 0x84, 0x01, 0x03,
                                     0x02, 0x90, 0x03, 0x05, 0x05, 0xc3};
    s_decode_fails(a_bool, sizeof a_bool, "aborts", "");
    //  6: [1, "x"] (an element not a uint)
    static const uint8_t p_str[] = {0x93, 0x01, 0x02, 0x84, 0x01, 0x03, 0x02, 0x90,
                                    0x03, 0x05, 0x06, 0x92, 0x01, 0xa1, 'x'};
    s_decode_fails(p_str, sizeof p_str, "preempts[1]", "");
    //  5: [-1] (a negative id)
    static const uint8_t a_neg[] = {0x93, 0x01, 0x02, 0x84, 0x01, 0x03, 0x02,
                                    0x90, 0x03, 0x05, 0x05, 0x91, 0xff};
    s_decode_fails(a_neg, sizeof a_neg, "aborts[0]", "");
}

// ------------------------------------------------- the scheduler actor ----

//  The engine of the actor test: Schedule 1 brings requests 1 and 2 and
//  asks to abort 77 and preempt 78 (unknown: refused); Schedule 2 aborts
//  request 1 (running) and preempts request 2 (running); then one Schedule
//  per plan until idle, and a Stats read.
typedef struct {
    kvt_aid_t sched;                        //  the scheduler
    uint64_t step;                          //  last step asked for
    uint32_t plans;                         //  StepPlans received
    uint32_t tokens[40];                    //  the prompts (request 2's offset by 1000)
    uint32_t tokens2[40];                   //  request 2's prompt
    uint32_t finish_c[3];                   //  FINISH c of requests 1 and 2 (99: none yet)
    uint32_t admits2;                       //  ADMIT events of request 2
    uint64_t aborts_refused;                //  from the Stats reply
    uint64_t preempts_refused;              //  ...
    uint64_t aborted, preempted, quiescent; //  ...
    bool read;                              //  the Stats reply came
} s_eng_t;

static uint64_t s_ctr(const kvt_stats_t *st, const char *name)
{
    for (uint32_t i = 0; i < st->ncounters; i++)
        if (strcmp(st->counters[i].name, name) == 0)
            return st->counters[i].value;
    cr_assert_fail("no counter %s", name);
    return 0;
}

static int s_eng_schedule(kvt_ctx_t *ctx, s_eng_t *p)
{
    kvt_msg_t m;
    memset(&m, 0, sizeof m);
    m.kind = KVT_MSG_SCHEDULE;
    kvt_arrival_t a[2] = {{.req = 1, .tokens = p->tokens, .ntokens = 40, .max_new_tokens = 30},
                          {.req = 2, .tokens = p->tokens2, .ntokens = 40, .max_new_tokens = 30}};
    uint64_t ab = 0, pr = 0;
    m.u.schedule.step = ++p->step;
    m.u.schedule.now_us = p->step * 1000;
    if (p->step == 1) {
        m.u.schedule.arrivals = a;
        m.u.schedule.narrivals = 2;
        ab = 77, pr = 78;
    } else if (p->step == 3) {
        ab = 1, pr = 2;
    }
    if (ab) {
        m.u.schedule.aborts = &ab;
        m.u.schedule.naborts = 1;
        m.u.schedule.preempts = &pr;
        m.u.schedule.npreempts = 1;
    }
    return kvt_ctx_send(ctx, p->sched, &m);
}

static void *s_eng_init(kvt_ctx_t *ctx, void *args)
{
    s_eng_t *p = args;
    p->sched = kvt_ctx_lookup(ctx, "scheduler");
    for (uint32_t i = 0; i < 40; i++)
        p->tokens[i] = 100 + i, p->tokens2[i] = 5000 + i;
    p->finish_c[1] = p->finish_c[2] = 99;
    return kvt_ctx_timer(ctx, 1, 0) ? p : NULL;
}

static void s_eng_stop(kvt_ctx_t *ctx, void *self)
{
    (void)ctx;
    (void)self;
}

static void s_eng_timer(kvt_ctx_t *ctx, void *self, uint64_t tag)
{
    (void)tag;
    cr_assert_eq(s_eng_schedule(ctx, self), 0);
}

static int s_eng_plan(kvt_ctx_t *ctx, void *self, kvt_aid_t from, kvt_msg_t *msg)
{
    s_eng_t *p = self;
    (void)from;
    const kvt_step_plan_t *pl = &msg->u.step_plan;
    cr_assert_lt(++p->plans, 200, "the run never went idle");
    for (uint32_t i = 0; i < pl->nevents; i++) {
        const kvt_event_t *e = &pl->events[i];
        if (e->type == KVT_EV_FINISH && e->op.req >= 1 && e->op.req <= 2)
            p->finish_c[e->op.req] = e->c;
        p->admits2 += e->type == KVT_EV_ADMIT && e->op.req == 2;
    }
    if (pl->idle && p->step > 3) {
        kvt_msg_t m;
        memset(&m, 0, sizeof m);
        m.kind = KVT_MSG_STATS;
        m.u.stats.request = true;
        return kvt_ctx_send(ctx, p->sched, &m);
    }
    return s_eng_schedule(ctx, p);
}

static int s_eng_stats(kvt_ctx_t *ctx, void *self, kvt_aid_t from, kvt_msg_t *msg)
{
    s_eng_t *p = self;
    (void)from;
    const kvt_stats_t *st = &msg->u.stats;
    p->aborts_refused = s_ctr(st, "sched.aborts_refused");
    p->preempts_refused = s_ctr(st, "sched.preempts_refused");
    p->aborted = s_ctr(st, "sched.aborted");
    p->preempted = s_ctr(st, "sched.preempted");
    p->quiescent = s_ctr(st, "sched.quiescent");
    p->read = true;
    kvt_ctx_exit(ctx, 0);
    return 0;
}

static const kvt_actor_class_t s_eng_class = {
    .type = "probe",
    .init = s_eng_init,
    .stop = s_eng_stop,
    .on = {[KVT_MSG_STEP_PLAN] = s_eng_plan, [KVT_MSG_STATS] = s_eng_stats},
    .on_timer = s_eng_timer,
};

Test(sched_abort, the_actor_applies_schedule_aborts_and_preempts_and_counts_the_refused)
{
    static s_eng_t p;
    memset(&p, 0, sizeof p);
    static kvt_scheduler_args_t sa;
    memset(&sa, 0, sizeof sa);
    sa.cfg = (kvt_sched_cfg_t){.block_size = 16,
                               .chunk_size = 64,
                               .hbm_blocks = 64,
                               .max_running = 4,
                               .step_tokens = 256,
                               .save_retries = 1,
                               .ns = kvt_namespace_hash("test_sched_abort")};
    sa.engine = "engine";
    kvt_system_opts_t so = {.driver = KVT_DRIVER_SIM, .seed = 7, .log_level = 0};
    kvt_system_t *sys = kvt_system_new(&so);
    cr_assert_not_null(sys);
    cr_assert_neq(kvt_system_add(sys, "engine", &s_eng_class, &p, NULL), KVT_AID_NONE);
    cr_assert_neq(kvt_system_add(sys, "scheduler", &kvt_scheduler_class, &sa, NULL), KVT_AID_NONE);
    cr_assert_eq(kvt_system_start(sys), 0);
    cr_assert_eq(kvt_system_run(sys, 0, 100000), 0, "the probe did not finish");
    kvt_system_destroy(&sys);
    cr_assert(p.read, "the Stats reply came");
    cr_assert_eq(p.aborts_refused, 1, "abort of unknown 77 refused and counted");
    cr_assert_eq(p.preempts_refused, 1, "preempt of unknown 78 refused and counted");
    cr_assert_eq(p.aborted, 1);
    cr_assert_eq(p.preempted, 1);
    cr_assert_eq(p.finish_c[1], KVT_FINISH_ABORTED, "request 1 ended aborted");
    cr_assert_eq(p.finish_c[2], KVT_FINISH_DONE, "request 2 was re-admitted and finished");
    cr_assert_eq(p.admits2, 2, "request 2 admitted twice");
    cr_assert_eq(p.quiescent, 1);
}
