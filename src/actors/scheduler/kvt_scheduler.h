/*  kvt_scheduler — the scheduler actor: the shell around kvt_sched.

    Schedule (engine) → arrivals into the core, then a StepPlan back. When the
    core has nothing to run but loads or saves are outstanding, the reply is
    held until a Verdict lets something run (so the engine does not spin).
    Verdict (aggregator) → the core. Stats → every counter, and an audit of
    the core's invariants (sched.audit_ok). */
#ifndef KVT_SCHEDULER_H_INCLUDED
#define KVT_SCHEDULER_H_INCLUDED

#include "kvtier/kvt_sched.h"
#include "kvtier/kvt_actor.h"

typedef struct {
    kvt_sched_cfg_t cfg; //  the core's configuration
    const char *engine;  //  name of the engine actor (plans go there)
} kvt_scheduler_args_t;

//  The actor class.
extern const kvt_actor_class_t kvt_scheduler_class;

#endif
