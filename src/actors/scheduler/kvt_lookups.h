/*  kvt_lookups — the scheduler core's tier lookups (a module of the core):
    a waiting request's Lookup into the plan, its verdict, its staleness and
    refresh, its pin and its release, and the tier hit an admission reads
    from it. It owns the lookup sub-record of a request record (r->lk: no other
    module writes it) and owns the lookup counters.

    It calls the plan buffer (Lookups, LookupReleases) and reads the
    request table (records, chunk keys); nothing above it. */
#ifndef KVT_LOOKUPS_H_INCLUDED
#define KVT_LOOKUPS_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvt_planbuf.h"
#include "kvt_reqtab.h"

typedef struct {
    uint32_t tier_chunks; //  0: no tier (no lookups; every tier hit is 0)
    uint32_t chunk_size;  //  tokens per chunk
    uint32_t tail;        //  prefill tail a hit always leaves (tokens)
    bool pin;             //  lookups pin what they found until the load that uses it
    uint32_t ttl_ms;      //  the pin's lease on the ranks (0 = the worker's default)
    bool rank0_only;      //  ask rank 0 only
    uint64_t timeout_us;  //  an unanswered lookup falls back to the HBM hit (0 = 1 s)
    uint64_t max_age_us;  //  a settled lookup older than this is asked again (0 = 1 s)
} kvt_lookups_cfg_t;

typedef struct _kvt_lookups_t kvt_lookups_t;

kvt_lookups_t *kvt_lookups_new(const kvt_lookups_cfg_t *cfg);

void kvt_lookups_destroy(kvt_lookups_t **self_p);

//  Drops what request r's lookup holds: an outstanding one stops counting,
//  a pin is queued as a LookupRelease.
void kvt_lookups_drop(kvt_lookups_t *self, kvt_sreq_t *r, kvt_planbuf_t *pb);

//  Applies a lookup verdict at now_us: 0, or -1 when stale.
int kvt_lookups_verdict(kvt_lookups_t *self, const kvt_reqtab_t *rt, const kvt_verdict_t *v,
                        uint64_t now_us);

//  A request that waits for its blocks keeps its settled lookup fresh: a
//  stale one is asked again now.
void kvt_lookups_keep_fresh(kvt_lookups_t *self, kvt_sreq_t *r, const kvt_reqtab_t *rt,
                            kvt_planbuf_t *pb, uint64_t now_us);

//  The tier hit of r in leading chunks of its first max_chunks: true with
//  *chunks when known (no tier: 0), false while r waits for its lookup
//  (issued now or earlier).
bool kvt_lookups_tier_hit(kvt_lookups_t *self, kvt_sreq_t *r, uint32_t max_chunks, uint32_t *chunks,
                          const kvt_reqtab_t *rt, kvt_planbuf_t *pb, uint64_t now_us);

//  The admission of r committed (r->gen is the new generation): a load
//  carrying the lookup's id releases its pin (LoadSpec.lookup), any other
//  outcome queues its release.
void kvt_lookups_settle(kvt_lookups_t *self, kvt_sreq_t *r, kvt_load_spec_t *load,
                        kvt_planbuf_t *pb);

//  Lookups without a verdict (gauge).
uint32_t kvt_lookups_out(const kvt_lookups_t *self);

//  A time after now_us by which every lookup out is past its bound (the
//  deadline of the one issued last; UINT64_MAX: none out, or that time has
//  passed): a plan held for a lookup whose verdict was lost plans again
//  then, and falls back to the HBM hit. O(1).
uint64_t kvt_lookups_next_deadline(const kvt_lookups_t *self, uint64_t now_us);

//  Writes its counters into their fields of out.
void kvt_lookups_stats(const kvt_lookups_t *self, kvt_sched_stats_t *out);

//  0, or -1 with a message: the outstanding gauge counts exactly the
//  records whose lookup is out.
int kvt_lookups_check(const kvt_lookups_t *self, const kvt_reqtab_t *rt, char *err, size_t errlen);

#endif
