/*  kvt_test_sched_rig — see kvt_test_sched_rig.h. */
#include "kvt_test_sched_rig.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

static kvt_verdict_t *rig_push(rig_t *r)
{
    cr_assert_lt(r->npending, RIG_MAX_PENDING);
    kvt_verdict_t *v = &r->pending[r->npending++];
    memset(v, 0, sizeof *v);
    return v;
}

bool rig_holds(const rig_t *r, kvt_hash_t k)
{
    for (uint32_t i = 0; i < r->nstored; i++)
        if (kvt_hash_eq(r->stored[i], k))
            return true;
    return false;
}

uint32_t rig_held(const rig_t *r, const kvt_lookup_t *l)
{
    uint32_t n = 0;
    while (n < l->nkeys && rig_holds(r, l->keys[n]))
        n++;
    return n;
}

void rig_init_pin(rig_t *r, uint32_t hbm_blocks, uint32_t tier_chunks, bool pin)
{
    memset(r, 0, sizeof *r);
    kvt_sched_cfg_t cfg = {.lookup_pin = pin,
                           .lookup_ttl_ms = pin ? 500 : 0,
                           .block_size = BS,
                           .chunk_size = CS,
                           .hbm_blocks = hbm_blocks,
                           .tier_chunks = tier_chunks,
                           .max_running = 8,
                           .step_tokens = 256,
                           .save_retries = 1,
                           .ns = kvt_namespace_hash("test")};
    char err[128];
    r->s = kvt_sched_new(&cfg, err, sizeof err);
    cr_assert_not_null(r->s, "%s", err);
}

void rig_init(rig_t *r, uint32_t hbm_blocks, uint32_t tier_chunks)
{
    rig_init_pin(r, hbm_blocks, tier_chunks, false);
}

void rig_arrive(rig_t *r, uint64_t id, uint32_t n, uint32_t base, uint32_t max_new)
{
    uint32_t *t = malloc(n * sizeof *t);
    for (uint32_t i = 0; i < n; i++)
        t[i] = base + i;
    kvt_arrival_t a = {.req = id, .tokens = t, .ntokens = n, .max_new_tokens = max_new};
    cr_assert_eq(kvt_sched_arrive(r->s, &a), 0);
    free(t);
}

void rig_audit(const rig_t *r)
{
    char err[256];
    cr_assert_eq(kvt_sched_audit(r->s, err, sizeof err), 0, "%s", err);
}

int rig_step_once(rig_t *r)
{
    int rc = kvt_sched_plan(r->s, ++r->step, false, &r->plan);
    if (rc == KVT_SCHED_HOLD)
        r->step--; //  a held step is planned again with the same number
    if (rc < 0)
        return rc;
    const kvt_step_plan_t *p = &r->plan;
    for (uint32_t i = 0; i < p->nevents; i++) {
        const kvt_event_t *e = &p->events[i];
        if (e->type == KVT_EV_ADMIT) {
            r->admit_hbm += e->a;
            r->admit_tier += e->b;
        }
        r->loaded += e->type == KVT_EV_LOADED;
        r->retreats += e->type == KVT_EV_RETREAT;
        r->finished += e->type == KVT_EV_FINISH;
    }
    for (uint32_t i = 0; i < p->nentries; i++)
        r->verify_entries += p->entries[i].verify_end > 0;
    const kvt_sched_state_op_t *ops;
    uint32_t nops;
    kvt_sched_plan_state(r->s, &ops, &nops);
    for (uint32_t i = 0; i < nops; i++) {
        if (ops[i].kind == KVT_SCHED_STATE_TAKE && r->ntakes < 64)
            r->takes[r->ntakes++] = ops[i].at;
        r->restores += ops[i].kind == KVT_SCHED_STATE_RESTORE;
        if (ops[i].kind != KVT_SCHED_STATE_LOAD)
            continue;
        r->state_loads++;
        kvt_verdict_t *v = rig_push(r);
        v->chan = KVT_CHAN_STATE;
        v->op = ops[i].op;
        v->key = ops[i].key;
        v->ok = !r->fail_state;
        v->detail = r->fail_state ? KVT_DETAIL_MISS : 0;
    }
    for (uint32_t i = 0; i < p->nlookups && !r->lose_lookups; i++) {
        kvt_verdict_t *v = rig_push(r);
        v->chan = KVT_CHAN_LOOKUP;
        v->op = p->lookups[i].op;
        v->ok = true;
        v->held = rig_held(r, &p->lookups[i]);
    }
    r->lookups_seen += p->nlookups;
    r->releases_seen += p->nlookup_releases;
    for (uint32_t i = 0; i < p->nloads; i++) {
        r->pins_used += p->loads[i].lookup;
        if (p->loads[i].nkeys == 0)
            continue; //  a state-only load: its verdict comes on the state channel
        kvt_verdict_t *v = rig_push(r);
        v->chan = KVT_CHAN_LOAD;
        v->op = p->loads[i].op;
        v->ok = !r->fail_loads;
        v->detail = r->fail_loads ? KVT_DETAIL_MISS : 0;
        r->loads_seen++;
    }
    for (uint32_t i = 0; i < p->nsaves; i++)
        for (uint32_t k = 0; k < p->saves[i].nkeys; k++) {
            kvt_verdict_t *v = rig_push(r);
            v->chan = KVT_CHAN_SAVE;
            v->op = p->saves[i].op;
            v->key = p->saves[i].keys[k];
            v->attempt = p->saves[i].attempt;
            if (v->attempt > r->max_attempt)
                r->max_attempt = v->attempt;
            v->ok = !r->fail_saves;
            v->detail = r->fail_saves ? KVT_DETAIL_NO_SPACE : 0;
            r->saves_seen++;
        }
    return rc;
}

int rig_step(rig_t *r)
{
    for (;;) {
        int rc = rig_step_once(r);
        const kvt_step_plan_t *p = &r->plan;
        if (rc < 0 || r->lose_lookups || p->nlookups == 0 || p->nentries || p->nloads || p->nsaves)
            return rc;
        uint32_t keep = 0;
        for (uint32_t i = 0; i < r->npending; i++) {
            if (r->pending[i].chan == KVT_CHAN_LOOKUP)
                kvt_sched_verdict(r->s, &r->pending[i]);
            else
                r->pending[keep++] = r->pending[i];
        }
        r->npending = keep;
    }
}

void rig_deliver(rig_t *r)
{
    for (uint32_t i = 0; i < r->npending; i++) {
        const kvt_verdict_t *v = &r->pending[i];
        if (v->chan == KVT_CHAN_SAVE && v->ok && !rig_holds(r, v->key) &&
            r->nstored < RIG_MAX_STORED)
            r->stored[r->nstored++] = v->key;
        kvt_sched_verdict(r->s, v);
    }
    r->npending = 0;
}

void rig_run(rig_t *r, uint32_t max_steps)
{
    for (uint32_t i = 0; i < max_steps; i++) {
        int rc = rig_step(r);
        rig_deliver(r);
        rig_audit(r);
        if (rc == 0 && r->plan.idle)
            return;
    }
    cr_assert_fail("did not go idle in %u steps", max_steps);
}

uint64_t counter(const rig_t *r, const char *name)
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

void plan_round_trips(const kvt_step_plan_t *plan)
{
    kvt_msg_t m = {.kind = KVT_MSG_STEP_PLAN};
    m.u.step_plan = *plan;
    uint8_t *buf;
    size_t len;
    kvt_msg_err_t err;
    char e[256];
    cr_assert_eq(kvt_msg_check(&m, &err), 0, "%s", kvt_msg_err_str(&err, e, sizeof e));
    cr_assert_eq(kvt_msg_encode(&m, &buf, &len), 0, "the plan must encode");
    kvt_msg_t back;
    cr_assert_eq(kvt_msg_decode(buf, len, &back, &err), 0, "%s",
                 kvt_msg_err_str(&err, e, sizeof e));
    cr_assert_eq(back.u.step_plan.nloads, plan->nloads);
    cr_assert_eq(back.u.step_plan.nsaves, plan->nsaves);
    kvt_msg_clear(&back);
    free(buf);
}

void rig_init_cfg(rig_t *r, const kvt_sched_cfg_t *cfg)
{
    memset(r, 0, sizeof *r);
    char err[128];
    r->s = kvt_sched_new(cfg, err, sizeof err);
    cr_assert_not_null(r->s, "%s", err);
}

kvt_sched_cfg_t hybrid_cfg(uint32_t bs, uint32_t cs, uint32_t interval, uint32_t hbm_blocks,
                           uint32_t tier_chunks)
{
    kvt_sched_cfg_t cfg = {.block_size = bs,
                           .chunk_size = cs,
                           .hbm_blocks = hbm_blocks,
                           .tier_chunks = tier_chunks,
                           .max_running = 4,
                           .step_tokens = 256,
                           .save_retries = 1,
                           .ns = kvt_namespace_hash("hybrid"),
                           .state_bytes = 1u << 20,
                           .checkpoint_interval = interval,
                           .hbm_checkpoints = 16};
    return cfg;
}

void rig_arrive_tokens(rig_t *r, uint64_t id, const uint32_t *t, uint32_t n, uint32_t max_new)
{
    kvt_arrival_t a = {.req = id, .tokens = (uint32_t *)t, .ntokens = n, .max_new_tokens = max_new};
    cr_assert_eq(kvt_sched_arrive(r->s, &a), 0);
}

void joint_setup(rig_t *r, uint32_t hbm_blocks, uint32_t x_len)
{
    kvt_sched_cfg_t cfg = hybrid_cfg(4, 16, 16, hbm_blocks, 64);
    cfg.hbm_checkpoints = 2;
    rig_init_cfg(r, &cfg);
    rig_arrive(r, 10, 40, P_BASE, 1);
    rig_run(r, 100);
    rig_arrive(r, 11, x_len, 90000, 1);
    rig_run(r, 100);
    rig_arrive(r, 12, 20, P_BASE, 1);
    rig_run(r, 100);
    r->loads_seen = r->state_loads = r->restores = 0;
    r->admit_hbm = r->admit_tier = 0;
}

kvt_sched_stats_t o_stats(const rig_t *r)
{
    kvt_sched_stats_t st;
    kvt_sched_stats(r->s, &st);
    return st;
}

kvt_verdict_t safe_of(const kvt_save_spec_t *sp, bool ok)
{
    kvt_verdict_t v = {.chan = KVT_CHAN_SOURCE_SAFE,
                       .op = sp->op,
                       .key = sp->keys[sp->nkeys - 1],
                       .attempt = sp->attempt,
                       .ok = ok};
    return v;
}
