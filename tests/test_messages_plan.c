/*  test_messages_plan.c — the StepPlan and StepExec arrays the scheduler's
    tier lookups need: lookups, lookup releases and touches round-trip
    field by field, are optional on the wire (a plan without them encodes
    as before), and a bad element is refused naming its field. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "kvtier/kvt_msg.h"

static kvt_hash_t s_h(uint64_t i)
{
    kvt_hash_t h = {.hi = 0x1000 + i, .lo = 0x77 * (i + 1)};
    return h;
}

static kvt_hash_t g_keys[3];
static kvt_lookup_t g_lookups[2];
static kvt_lookup_release_t g_releases[1];
static kvt_touch_msg_t g_touches[2];

static void s_fill(void)
{
    for (uint32_t i = 0; i < 3; i++)
        g_keys[i] = s_h(i);
    g_lookups[0] =
        (kvt_lookup_t){.op = {7, 3}, .keys = g_keys, .nkeys = 3, .pin = true, .ttl_ms = 250};
    g_lookups[1] = (kvt_lookup_t){.op = {9, 1}, .keys = g_keys, .nkeys = 1, .rank0_only = true};
    g_releases[0] = (kvt_lookup_release_t){.op = {11, 2}};
    g_touches[0] = (kvt_touch_msg_t){.hash = s_h(40), .round = 5};
    g_touches[1] = (kvt_touch_msg_t){.hash = s_h(41), .round = 1, .keys = g_keys + 1, .nkeys = 2};
}

static void s_roundtrip(const kvt_msg_t *in, kvt_msg_t *out, size_t *len_out)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    cr_assert_eq(kvt_msg_encode(in, &buf, &len), 0);
    kvt_msg_err_t err;
    memset(out, 0, sizeof *out);
    cr_assert_eq(kvt_msg_decode(buf, len, out, &err), 0);
    free(buf);
    if (len_out)
        *len_out = len;
}

static void s_check_arrays(const kvt_lookup_t *l, uint32_t nl, const kvt_lookup_release_t *r,
                           uint32_t nr, const kvt_touch_msg_t *t, uint32_t nt)
{
    cr_assert_eq(nl, 2);
    cr_assert_eq(l[0].op.req, 7);
    cr_assert_eq(l[0].op.gen, 3);
    cr_assert_eq(l[0].nkeys, 3);
    for (uint32_t i = 0; i < 3; i++)
        cr_assert(kvt_hash_eq(l[0].keys[i], s_h(i)));
    cr_assert(l[0].pin);
    cr_assert_eq(l[0].ttl_ms, 250);
    cr_assert_eq(l[1].op.req, 9);
    cr_assert(!l[1].pin);
    cr_assert_not(l[0].rank0_only);
    cr_assert(l[1].rank0_only, "a rank-0-only lookup stays one in the plan and the exec");
    cr_assert_eq(l[1].nkeys, 1);
    cr_assert_eq(nr, 1);
    cr_assert_eq(r[0].op.req, 11);
    cr_assert_eq(r[0].op.gen, 2);
    cr_assert_eq(nt, 2);
    cr_assert(kvt_hash_eq(t[0].hash, s_h(40)));
    cr_assert_eq(t[0].round, 5);
    cr_assert_eq(t[0].nkeys, 0);
    cr_assert(kvt_hash_eq(t[1].hash, s_h(41)));
    cr_assert_eq(t[1].nkeys, 2);
    cr_assert(kvt_hash_eq(t[1].keys[1], s_h(2)));
}

Test(messages_plan, step_plan_carries_lookups_releases_touches)
{
    s_fill();
    kvt_msg_t m = {.kind = KVT_MSG_STEP_PLAN};
    m.u.step_plan = (kvt_step_plan_t){.step = 4,
                                      .lookups = g_lookups,
                                      .nlookups = 2,
                                      .lookup_releases = g_releases,
                                      .nlookup_releases = 1,
                                      .touches = g_touches,
                                      .ntouches = 2};
    kvt_msg_t got;
    s_roundtrip(&m, &got, NULL);
    cr_assert_eq(got.kind, KVT_MSG_STEP_PLAN);
    const kvt_step_plan_t *p = &got.u.step_plan;
    cr_assert_eq(p->step, 4);
    s_check_arrays(p->lookups, p->nlookups, p->lookup_releases, p->nlookup_releases, p->touches,
                   p->ntouches);
    kvt_msg_clear(&got);
}

Test(messages_plan, step_exec_carries_lookups_releases_touches)
{
    s_fill();
    kvt_msg_t m = {.kind = KVT_MSG_STEP_EXEC};
    m.u.step_exec = (kvt_step_exec_t){.step = 9,
                                      .rank = 1,
                                      .lookups = g_lookups,
                                      .nlookups = 2,
                                      .lookup_releases = g_releases,
                                      .nlookup_releases = 1,
                                      .touches = g_touches,
                                      .ntouches = 2};
    kvt_msg_t got;
    s_roundtrip(&m, &got, NULL);
    const kvt_step_exec_t *x = &got.u.step_exec;
    cr_assert_eq(x->step, 9);
    cr_assert_eq(x->rank, 1);
    s_check_arrays(x->lookups, x->nlookups, x->lookup_releases, x->nlookup_releases, x->touches,
                   x->ntouches);
    kvt_msg_clear(&got);
}

//  The arrays are optional: a plan without them is as small as before
//  and decodes with empty arrays.
Test(messages_plan, arrays_are_optional)
{
    s_fill();
    kvt_msg_t m = {.kind = KVT_MSG_STEP_PLAN};
    m.u.step_plan.step = 2;
    kvt_msg_t got;
    size_t small = 0, big = 0;
    s_roundtrip(&m, &got, &small);
    cr_assert_eq(got.u.step_plan.nlookups, 0);
    cr_assert_null(got.u.step_plan.lookups);
    cr_assert_eq(got.u.step_plan.ntouches, 0);
    kvt_msg_clear(&got);
    m.u.step_plan.lookup_releases = g_releases;
    m.u.step_plan.nlookup_releases = 1;
    s_roundtrip(&m, &got, &big);
    cr_assert_gt(big, small);
    cr_assert_eq(got.u.step_plan.nlookup_releases, 1);
    kvt_msg_clear(&got);
}

//  A lookup inside a plan is checked like a Lookup message: gen 0 is
//  refused naming the field.
Test(messages_plan, bad_lookup_in_plan_refused)
{
    s_fill();
    kvt_lookup_t bad = g_lookups[0];
    bad.op.gen = 0;
    kvt_msg_t m = {.kind = KVT_MSG_STEP_PLAN};
    m.u.step_plan = (kvt_step_plan_t){.step = 1, .lookups = &bad, .nlookups = 1};
    kvt_msg_err_t err;
    cr_assert_neq(kvt_msg_check(&m, &err), 0);
    char text[256];
    cr_assert(strstr(kvt_msg_err_str(&err, text, sizeof text), "gen") != NULL, "%s", text);
}
