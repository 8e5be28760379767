/*  kvt_aggregator — the aggregator actor: the shell around kvt_agg.

    Receives a Completion from every rank for every dispatched item and sends
    one Verdict per key to the scheduler when all ranks reported (A1; on the
    state channel neutral reports do not vote, the store channel's fenced is
    an AND), drops late duplicates through its tombstone ring and, for touch
    keys, a ring of their own (A2), and reports of a restarted rank's older
    epoch, and settles every key some rank never reported on within
    `timeout_ns` as a failed Verdict with detail TIMEOUT (A4): counted, and
    warned about once per channel. One timer, armed for
    the oldest open key's expiry only while a key is open, drives it. */
#ifndef KVT_AGGREGATOR_H_INCLUDED
#define KVT_AGGREGATOR_H_INCLUDED

#include <stdint.h>

#include "kvtier/kvt_actor.h"

typedef struct {
    uint32_t nranks;       //  TP ranks that report on every key
    uint32_t tombstones;   //  settled keys remembered (default 65536)
    uint64_t timeout_ns;   //  age at which an open key settles failed (default 30 s)
    const char *scheduler; //  name of the scheduler actor
} kvt_aggregator_args_t;

//  The actor class.
extern const kvt_actor_class_t kvt_aggregator_class;

#endif
