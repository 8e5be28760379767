/*  kvt_agg — the aggregator's core: quorum per report key over TP ranks.

    A key (channel, operation id, item key, attempt) settles when every rank has
    reported on it; the verdict's ok is the AND of the reports (failure-
    dominant) and its detail is the first failing rank's (rule A1). Settled
    keys go into a bounded tombstone ring so a late duplicate is dropped
    rather than opening a new key that could never settle (A2); touch keys
    are never tombstoned, so touch traffic cannot push store or load keys out
    of the ring. A second report from the same rank on an open key is a
    duplicate and is dropped. Keys older than `stale_ns` that have not
    settled are surfaced once each (counter + the caller's one warning) and
    kept: the rule is that every asked rank reports (A4); the bound makes a
    violation visible instead of silent. All operations are O(1) amortised;
    the stale check looks only at the oldest open keys. */
#ifndef KVT_AGG_H_INCLUDED
#define KVT_AGG_H_INCLUDED

#include <stdbool.h>
#include <stdint.h>

#include "kvtier/kvt_msg.h"

typedef struct _kvt_agg_t kvt_agg_t;

typedef struct {
    uint64_t reports;        //  completions accepted
    uint64_t settled;        //  verdicts emitted
    uint64_t settled_failed; //  verdicts with ok = false
    uint64_t late_dropped;   //  reports on a tombstoned (settled) key
    uint64_t dup_dropped;    //  second report from a rank on an open key
    uint64_t bad_rank;       //  reports from a rank ≥ nranks
    uint64_t stale;          //  open keys surfaced as older than the bound
    uint64_t open;           //  keys waiting for ranks (gauge)
} kvt_agg_stats_t;

//  nranks: reports needed per key (1..KVT_MSG_MAX_RANKS); tombstones: ring
//  size; stale_ns: age at which an open key is surfaced (0 = never).
kvt_agg_t *kvt_agg_new(uint32_t nranks, uint32_t tombstones, uint64_t stale_ns);
void kvt_agg_destroy(kvt_agg_t **self_p);

//  Accepts one report. Returns 1 and fills *verdict when the key settled,
//  0 when it is still open, -1 when the report was dropped (late, duplicate,
//  bad rank; counted).
int kvt_agg_report(kvt_agg_t *self, const kvt_completion_t *c, uint64_t now,
                   kvt_verdict_t *verdict);

//  Surfaces open keys older than the bound at `now` that were not surfaced
//  before. Writes up to `max` of them to out[] (may be NULL) and returns how
//  many were newly surfaced.
uint32_t kvt_agg_check_stale(kvt_agg_t *self, uint64_t now, kvt_completion_t *out, uint32_t max);

//  When the oldest open key that was not surfaced yet becomes stale;
//  UINT64_MAX when there is none (or no bound).
uint64_t kvt_agg_next_stale(const kvt_agg_t *self);

void kvt_agg_stats(const kvt_agg_t *self, kvt_agg_stats_t *out);

#endif
