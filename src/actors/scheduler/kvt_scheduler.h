/*  kvt_scheduler — the scheduler actor: the shell around kvt_sched.

    Schedule (engine) → arrivals into the core, then a StepPlan back. When the
    core has nothing to run but loads or saves are outstanding, the reply is
    held until a Verdict lets something run (so the engine does not spin).
    Verdict (aggregator) → the core. Stats → every counter, and the result of
    the last deep audit of the core's invariants (sched.audit_ok).

    A Stats read is O(1) amortised: the deep audit (kvt_sched_audit) walks
    every HBM block, every record and every key of the load indexes and the
    save tracker, so a read does not run it every time. Each read pays
    KVT_SCHEDULER_AUDIT_CREDIT units into a credit, and the deep audit runs
    when the credit covers its cost (HBM blocks + tier chunks + records +
    saves outstanding + orphans, the units it walks), then starts the credit
    again; it also runs at the first read that finds the core quiescent
    after a Schedule or a Verdict reached it (so the end of a run is always
    audited). sched.audits_deep counts the deep audits. */
#ifndef KVT_SCHEDULER_H_INCLUDED
#define KVT_SCHEDULER_H_INCLUDED

#include "kvtier/kvt_sched.h"
#include "kvtier/kvt_actor.h"

//  Deep-audit units each Stats read pays for (see above).
#define KVT_SCHEDULER_AUDIT_CREDIT 64u

typedef struct {
    kvt_sched_cfg_t cfg; //  the core's configuration
    const char *engine;  //  name of the engine actor (plans go there)
    //  Bench and replay only (`kvtier bench admit` fills the core; the
    //  replay's report keeps it to read its gauges; NULL in the product):
    //  called once the core is built, before the first message. Returns 0,
    //  or -1 to fail the actor's start.
    int (*prime)(kvt_sched_t *core, void *arg);
    void *prime_arg; //  passed to prime
} kvt_scheduler_args_t;

//  The actor class.
extern const kvt_actor_class_t kvt_scheduler_class;

#endif
