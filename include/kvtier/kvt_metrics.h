/*  kvt_metrics.h — a Prometheus /metrics endpoint over published snapshots.

    A kvt_metrics_t holds the newest snapshot of named counters, each under
    the source that reported it (an actor name: "scheduler", "worker.0").
    Whoever gathers the counters publishes a whole round at once; a scrape
    renders the snapshot that was current when it began. The publisher and
    the scraper share only a pointer swap under a mutex (a scrape holds a
    reference to its snapshot, never the lock, while it renders), so a
    scrape never stalls the thread that publishes, and a publish never
    waits for a scrape.

    kvt_metrics_listen serves GET /metrics in the Prometheus text format
    (0.0.4) with libmicrohttpd on its own thread. docs/metrics.md
    (§Prometheus) gives how a counter name becomes a metric: its family,
    type and the labels actor, rank, tier, kind and channel.

    kvt_metrics_collector_class is an actor that gathers the rounds: every
    interval it asks each of its targets for their counters (a Stats
    request), adds each local target's runtime counters (rt.*), and
    publishes the round once every target replied (or, when the next round
    is due first, what arrived: a partial round, counted). */
#ifndef KVT_METRICS_H_INCLUDED
#define KVT_METRICS_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

#include "kvt_actor.h"
#include "kvt_counter.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVT_METRICS_MAX_SOURCES 256    //  sources in one snapshot
#define KVT_METRICS_MAX_SERIES  262144 //  counters in one snapshot, all sources

typedef struct _kvt_metrics_t kvt_metrics_t;

//  One source's counters, as handed to kvt_metrics_publish (borrowed).
typedef struct {
    const char *source;            //  who reported them: an actor name ("worker.0")
    const kvt_counter_t *counters; //  its counters
    uint32_t n;                    //  entries of counters
} kvt_metrics_source_t;

//  What the endpoint itself counted (its own series, kvtier_metrics_*).
typedef struct {
    uint64_t publishes;     //  snapshots published
    uint64_t refused;       //  publishes refused (bad input: a NULL or empty source name,
                            //  too many sources or counters); the snapshot before stays
    uint64_t duplicates;    //  series dropped because a source reported a name twice
    uint64_t scrapes;       //  GET /metrics answered
    uint64_t bad_requests;  //  requests answered 404 (another path) or 405 (not GET / HEAD)
    uint64_t render_failed; //  scrapes answered 500 (out of memory)
    uint64_t series;        //  gauge: series in the current snapshot
} kvt_metrics_stats_t;

//  A holder with an empty snapshot and no endpoint; NULL when out of memory.
kvt_metrics_t *kvt_metrics_new(void);

//  Stops the endpoint (if any; waits for scrapes in progress) and frees
//  everything. NULL-safe; nulls the pointer.
void kvt_metrics_destroy(kvt_metrics_t **self_p);

//  Checks an endpoint address: "HOST:PORT", HOST an IPv4 address or
//  `localhost`, PORT 0..65535 (0: any free port). 0, or -1 with err naming
//  the value and what is wrong with it. What the configuration's
//  metrics_addr setting is validated with.
int kvt_metrics_check_addr(const char *addr, char *err, size_t errlen);

//  Starts serving GET /metrics on addr (kvt_metrics_check_addr). At most one
//  endpoint per holder. 0, or -1 with err naming the address and the cause
//  (bad address, the port taken, a second listen).
int kvt_metrics_listen(kvt_metrics_t *self, const char *addr, char *err, size_t errlen);

//  The port the endpoint is bound to (the real one for port 0); 0 when not
//  listening.
uint16_t kvt_metrics_port(const kvt_metrics_t *self);

//  Replaces the snapshot with a copy of src[0..n): every counter of every
//  source, mapped to its metric (docs/metrics.md §Prometheus). O(counters
//  log counters) on the caller's thread; a scrape in progress keeps the
//  snapshot it began with. 0, or -1 (refused, counted; the old snapshot
//  stays) for a NULL or empty source name, more than KVT_METRICS_MAX_SOURCES
//  sources or KVT_METRICS_MAX_SERIES counters, or no memory.
int kvt_metrics_publish(kvt_metrics_t *self, const kvt_metrics_source_t *src, uint32_t n);

//  The current snapshot in the Prometheus text format, as a scrape gets it:
//  a malloc'd NUL-terminated string (*len bytes, NUL excluded) the caller
//  frees; NULL when out of memory.
char *kvt_metrics_render(kvt_metrics_t *self, size_t *len);

//  The endpoint's own counters.
void kvt_metrics_stats(kvt_metrics_t *self, kvt_metrics_stats_t *out);

// --------------------------------------------------------- collector ----

//  Arguments of kvt_metrics_collector_class (borrowed; must outlive the
//  system).
typedef struct {
    kvt_metrics_t *metrics;     //  where the rounds are published
    const char *const *targets; //  actors asked for counters (NULL-terminated)
    uint64_t interval_ns;       //  driver time between rounds (0 = 1 s)
} kvt_metrics_collector_args_t;

//  The collector actor. Targets that name no actor of the system are
//  logged once at start and left out. Its own counters are published as
//  the source "metrics" (metrics.rounds, metrics.rounds_partial,
//  metrics.replies_dropped, metrics.targets).
extern const kvt_actor_class_t kvt_metrics_collector_class;

#ifdef __cplusplus
}
#endif
#endif
