/*  kvt_agg — the aggregator's core: quorum per report key over TP ranks.

    A key (channel, operation id, item key, attempt) settles when every rank
    has reported on it (rule A1), on every channel alike: `ok` is the AND of
    the reports (failure-dominant) and the detail is the first failing
    rank's, except that a miss on any rank wins. Channels that carry a
    measure take its minimum over the ranks: a touch's answer (GONE <
    PRESENT < REFRESHED) and a lookup's held chunks; a lookup's image bitmap
    is the AND of the ranks' bitmaps, cut at that minimum (a chunk counts
    only when every rank holds it with its image). A lookup that asked rank
    0 only (its report carries rank0_only) settles on rank 0's report
    alone; a rank0_only report from any other rank is dropped and counted
    (not_asked), so such a key settles exactly once.

    State channel (neutral verdicts): a rank whose state leg did not run
    reports ok with detail SKIPPED; it does not vote. The verdict's ok is
    the AND over the other ranks, its detail SKIPPED only when every rank
    was neutral, else as above. Store channel: the verdict is `fenced` only
    when every rank's save waited on its producer event (AND).

    Settled keys go into a bounded tombstone ring so a late duplicate is
    dropped rather than opening a key that could never settle (A2), on every
    channel but the touch ones (`load`, `store`, `state`, `lookup`,
    `source_safe`, `fence`). Touch keys (`touch`, `touch_refresh`) are never
    tombstoned: a touch id (prefix hash, round) is unique per round, so
    touch traffic cannot push store, source or load tombstones out of the
    ring. The last KVT_AGG_TOUCH_MEMORY settled touch ids are remembered in
    a ring of their own, so a late duplicate of a touch report is dropped
    too instead of opening a key that would only time out. A second report
    from the same rank on an open key is a duplicate and is dropped.

    No immortal key (A4): an open key older than `timeout_ns` is settled by
    kvt_agg_expire with ok = false, detail TIMEOUT (a timeout is always a
    failure), counted, remembered like any settled key, and the first
    timeout on each channel is flagged for the caller's one warning.

    Epochs: every worker stamps its incarnation on each report. The core
    keeps the newest epoch seen per rank and drops (and counts) a report of
    an older one: a restarted worker's predecessor can no longer vote. Keys
    the crash stranded settle by the timeout. Epoch 0 (unstamped) is never
    dropped.

    No clock: `now` is passed in. All operations are O(1) amortised (a
    lookup report costs O(held / 8) for its bitmap); the expiry looks only
    at the oldest open keys. */
#ifndef KVT_AGG_H_INCLUDED
#define KVT_AGG_H_INCLUDED

#include <stdbool.h>
#include <stdint.h>

#include "kvtier/kvt_msg.h"

typedef struct _kvt_agg_t kvt_agg_t;

//  Settled touch ids remembered to drop their late duplicates (their own
//  ring, apart from the tombstones).
#define KVT_AGG_TOUCH_MEMORY 4096

typedef struct {
    uint64_t reports;        //  completions accepted
    uint64_t settled;        //  verdicts emitted (timeouts included)
    uint64_t settled_failed; //  verdicts with ok = false (timeouts included)
    uint64_t late_dropped;   //  reports on a settled key (tombstone or touch ring)
    uint64_t dup_dropped;    //  second report from a rank on an open key
    uint64_t bad_rank;       //  reports from a rank ≥ nranks
    uint64_t epoch_dropped;  //  reports of an epoch older than the rank's newest
    uint64_t timeouts;       //  open keys settled failed by the bound (A4)
    uint64_t oom_dropped;    //  reports dropped: no memory to open their key
    uint64_t not_asked;      //  rank-0-only lookup reports from another rank: dropped
    uint64_t open;           //  keys waiting for ranks (gauge)
} kvt_agg_stats_t;

//  nranks: reports needed per key (1..KVT_MSG_MAX_RANKS); tombstones: ring
//  size; timeout_ns: age at which an open key is settled failed (0 = never).
kvt_agg_t *kvt_agg_new(uint32_t nranks, uint32_t tombstones, uint64_t timeout_ns);
void kvt_agg_destroy(kvt_agg_t **self_p);

//  Accepts one report. Returns 1 and fills *verdict when the key settled,
//  0 when it is still open, -1 when the report was dropped (late,
//  duplicate, bad rank, old epoch; counted). A verdict's images point into
//  the core and stay valid until the next call.
int kvt_agg_report(kvt_agg_t *self, const kvt_completion_t *c, uint64_t now,
                   kvt_verdict_t *verdict);

//  Settles up to `max` open keys that are `timeout_ns` old at `now`, oldest
//  first, each with ok = false and detail TIMEOUT, into out[]; warn[i] is
//  true when out[i] is the first timeout on its channel. Returns how many
//  (call again while it returns max).
uint32_t kvt_agg_expire(kvt_agg_t *self, uint64_t now, kvt_verdict_t *out, bool *warn,
                        uint32_t max);

//  When the oldest open key times out; UINT64_MAX when none is open (or
//  there is no bound).
uint64_t kvt_agg_next_expiry(const kvt_agg_t *self);

//  The newest epoch seen from `rank` (0 = none yet).
uint64_t kvt_agg_epoch(const kvt_agg_t *self, uint32_t rank);

void kvt_agg_stats(const kvt_agg_t *self, kvt_agg_stats_t *out);

#endif
