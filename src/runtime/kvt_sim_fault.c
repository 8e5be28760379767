/*  kvt_sim_fault.c — SIM fault rules: drop, delay or duplicate the next N
    messages that match (from, to, kind), wildcards allowed. Rules are
    checked when a message is sent, in the order they were added; the first
    matching rule with hits left applies, and only that one. What a rule
    does to the frame is the SIM driver's business (kvt_sim.c).
*/
#include <assert.h>
#include <stdlib.h>

#include "base/kvt_vec.h"
#include "kvt_runtime_int.h"

void kvt_faults_fini(kvt_faults_t *f)
{
    assert(f);
    free(f->rules);
    *f = (kvt_faults_t){0};
}

kvt_fault_type_t kvt_faults_match(kvt_faults_t *f, kvt_aid_t from, kvt_aid_t to, int kind,
                                  uint64_t *delay_ns)
{
    assert(f && delay_ns);
    if (f->active == 0)
        return (kvt_fault_type_t)0;
    for (uint32_t i = 0; i < f->n; i++) {
        kvt_fault_rule_t *r = &f->rules[i];
        if (r->remaining == 0)
            continue;
        if ((r->from != KVT_ANY_ACTOR && r->from != from) ||
            (r->to != KVT_ANY_ACTOR && r->to != to) || (r->kind != KVT_ANY_KIND && r->kind != kind))
            continue;
        r->hits++;
        if (--r->remaining == 0)
            f->active--;
        if (r->type == KVT_FAULT_DELAY)
            *delay_ns = r->delay_ns;
        return r->type;
    }
    return (kvt_fault_type_t)0;
}

int kvt_sim_fault(kvt_system_t *self, kvt_fault_type_t type, kvt_aid_t from, kvt_aid_t to, int kind,
                  uint32_t count, uint64_t delay_ns)
{
    kvt_faults_t *f = self ? kvt_sim_faults(self) : NULL;
    if (!f)
        return 0;
    kvt_aid_t nactors = (kvt_aid_t)self->nactors;
    bool from_ok = from == KVT_ANY_ACTOR || from == KVT_AID_SYSTEM || from < nactors;
    bool to_ok = to == KVT_ANY_ACTOR || to < nactors;
    bool type_ok = type == KVT_FAULT_DROP || type == KVT_FAULT_DELAY || type == KVT_FAULT_DUPLICATE;
    if (!from_ok || !to_ok || !type_ok || count == 0 || kind < 0 || kind >= KVT_MSG_KIND_COUNT) {
        kvt_log(self, KVT_SYSTEM_NAME, 0, "fault: bad rule (type %d, from %u, to %u, kind %d)",
                (int)type, (unsigned)from, (unsigned)to, kind);
        return 0;
    }
    if (kvt_vec_reserve((void **)&f->rules, &f->cap, f->n + 1, sizeof *f->rules) != 0)
        return 0;
    f->rules[f->n++] = (kvt_fault_rule_t){.type = type,
                                          .from = from,
                                          .to = to,
                                          .kind = kind,
                                          .remaining = count,
                                          .delay_ns = delay_ns};
    f->active++;
    return (int)f->n;
}

uint32_t kvt_sim_fault_hits(kvt_system_t *self, int rule_id)
{
    kvt_faults_t *f = self ? kvt_sim_faults(self) : NULL;
    if (!f || rule_id <= 0 || (uint32_t)rule_id > f->n)
        return 0;
    return f->rules[rule_id - 1].hits;
}
