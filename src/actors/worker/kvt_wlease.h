/*  kvt_wlease — the worker's table of pinned lookup leases.

    A pinned Lookup keeps the chunks it counted read-pinned under one pool
    lease until exactly one of three things releases it: the LoadSpec that
    names the lookup, an explicit LookupRelease, or its TTL. The table maps
    the lookup's id (req, gen) to its lease and deadline; taking an entry
    out is the only way to get the lease back, so whichever path comes
    first releases it and the others find nothing (exactly once). Plain
    data: no clock (deadlines are passed in), no storage calls. Put, take
    and the take of a due lease are O(log n), the earliest deadline O(1). */
#ifndef KVT_WLEASE_H_INCLUDED
#define KVT_WLEASE_H_INCLUDED

#include <stdbool.h>
#include <stdint.h>

#include "kvtier/kvt_msg.h"
#include "kvtier/kvt_store.h"

typedef struct _kvt_wlease_t kvt_wlease_t;

kvt_wlease_t *kvt_wlease_new(void);
void kvt_wlease_destroy(kvt_wlease_t **self_p);

//  Records the lease of lookup `op`, to be released at `deadline` at the
//  latest. -1 when `op` already holds one or memory ran out.
int kvt_wlease_put(kvt_wlease_t *self, kvt_opid_t op, kvt_lease_t lease, uint64_t deadline);

//  Takes the lease of `op` out of the table: true and *lease filled, or
//  false when it holds none (never pinned, or already released).
bool kvt_wlease_take(kvt_wlease_t *self, kvt_opid_t op, kvt_lease_t *lease);

//  Takes out one lease whose deadline is ≤ now: true with *op and *lease
//  filled, false when none is due.
bool kvt_wlease_take_due(kvt_wlease_t *self, uint64_t now, kvt_opid_t *op, kvt_lease_t *lease);

//  Takes out any lease (shutdown): as kvt_wlease_take_due with no deadline.
bool kvt_wlease_take_any(kvt_wlease_t *self, kvt_opid_t *op, kvt_lease_t *lease);

//  The i-th lease held (i < kvt_wlease_count), for renewing their TTLs.
kvt_lease_t kvt_wlease_at(const kvt_wlease_t *self, uint32_t i);

//  The earliest deadline, UINT64_MAX when none is held.
uint64_t kvt_wlease_next_deadline(const kvt_wlease_t *self);

//  Leases held now.
uint32_t kvt_wlease_count(const kvt_wlease_t *self);

#endif
