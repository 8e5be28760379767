/*  kvt_sched — the scheduler core. Its API is public (an engine embeds the
    core directly): include/kvtier/kvt_sched.h. The core's private state is
    in kvt_sched_int.h. */
#ifndef KVT_SCHED_H_INCLUDED
#define KVT_SCHED_H_INCLUDED

#include "kvtier/kvt_sched.h"

#endif
