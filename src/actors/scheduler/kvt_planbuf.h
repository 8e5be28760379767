/*  kvt_planbuf — the step plan under construction (a module of the
    scheduler core): its entries, load and save specs, lookups, lookup
    releases, touches, state ops and events, and the byte budget that keeps
    one plan within one message (KVT_SCHED_PLAN_BYTES).

    While the plan grows, the array fields of entries and specs hold
    offsets into the plan's block-id and hash scratch (the scratch may move
    when it grows); kvt_planbuf_finish turns them into pointers and hands
    the plan out, valid until the plan is opened again. Every add either
    fits and is written whole, or writes nothing; a caller that must not
    fail halfway reserves first (kvt_planbuf_reserve*).

    It owns the plan's counters (deferred work, tokens planned). It calls
    only base; what it is asked to write (block ids, keys) comes from its
    callers. */
#ifndef KVT_PLANBUF_H_INCLUDED
#define KVT_PLANBUF_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvtier/kvt_msg.h"
#include "kvtier/kvt_sched.h"

//  Upper bound of a plan's encoded size: entries, loads and saves stop being
//  added past it (the frame cap is KVT_MSG_MAX_FRAME; events and the
//  envelope need the rest).
#define KVT_SCHED_PLAN_BYTES (12u << 20)

//  Encoded-size estimates of plan elements (msgpack overhead plus payload).
#define KVT_SCHED_ENTRY_BYTES(nblocks)       (48u + 20u * (size_t)(nblocks))
#define KVT_SCHED_SPEC_BYTES(nblocks, nkeys) (48u + 4u * (size_t)(nblocks) + 16u * (size_t)(nkeys))

typedef struct _kvt_planbuf_t kvt_planbuf_t;

//  Its counters (summed into kvt_sched_stats_t by the coordinator).
typedef struct {
    uint64_t plan_deferred;  //  work left for the next plan (message size)
    uint64_t tokens_planned; //  tokens listed in entries
    uint64_t backlog_moved;  //  queued events / releases moved to the front (amortised O(1) each)
} kvt_planbuf_stats_t;

//  What the plan holds so far.
typedef struct {
    uint32_t entries;  //  entries
    uint32_t loads;    //  load specs
    uint32_t saves;    //  save specs
    uint32_t state;    //  state ops
    uint32_t lookups;  //  lookups
    uint32_t touches;  //  touches
    uint32_t releases; //  lookup releases queued (handed out with the next plan)
    uint32_t events;   //  events queued
} kvt_planbuf_counts_t;

//  A new, empty plan buffer, or NULL when out of memory.
kvt_planbuf_t *kvt_planbuf_new(void);

void kvt_planbuf_destroy(kvt_planbuf_t **self_p);

//  Starts the plan afresh unless it is open already (an apply may have put
//  saves into it before the plan call).
void kvt_planbuf_open(kvt_planbuf_t *self);

//  The plan under construction was dropped (a held plan): the next open
//  starts afresh.
void kvt_planbuf_close(kvt_planbuf_t *self);

//  True while the plan may grow by `bytes` more.
bool kvt_planbuf_fits(const kvt_planbuf_t *self, size_t bytes);

//  Counts one piece of work left for the next plan.
void kvt_planbuf_defer(kvt_planbuf_t *self);

//  Room for `nblocks` more block ids and `nkeys` more hashes: 0, or -1.
int kvt_planbuf_reserve(kvt_planbuf_t *self, uint32_t nblocks, uint32_t nkeys);

//  Room for `n` more load specs / save specs / state ops: 0, or -1.
int kvt_planbuf_reserve_loads(kvt_planbuf_t *self, uint32_t n);
int kvt_planbuf_reserve_saves(kvt_planbuf_t *self, uint32_t n);
int kvt_planbuf_reserve_state(kvt_planbuf_t *self, uint32_t n);

//  Fills spec `sp` for op's [start, end): nblocks block ids copied from
//  `blocks` into the scratch, nkeys key slots reserved, whose address it
//  returns for the caller to write (valid until the scratch grows). The
//  caller reserved the scratch.
kvt_hash_t *kvt_planbuf_fill_spec(kvt_planbuf_t *self, kvt_load_spec_t *sp, kvt_opid_t op,
                                  uint32_t start, uint32_t end, const uint32_t *blocks,
                                  uint32_t nblocks, uint32_t nkeys);

//  The next load spec / save spec, reserved by the caller (counted now).
kvt_load_spec_t *kvt_planbuf_next_load(kvt_planbuf_t *self);
kvt_save_spec_t *kvt_planbuf_next_save(kvt_planbuf_t *self);

//  The load spec added last (NULL when none).
kvt_load_spec_t *kvt_planbuf_last_load(kvt_planbuf_t *self);

//  The entry added last (NULL when none), for its state fields.
kvt_entry_t *kvt_planbuf_last_entry(kvt_planbuf_t *self);

//  Adds a load spec with no KV leg (no blocks, no keys): a state-only load.
//  The caller reserved it.
kvt_load_spec_t *kvt_planbuf_add_empty_load(kvt_planbuf_t *self, kvt_opid_t op);

//  Adds an entry for op's [start, end) over n blocks from first_block:
//  *blocks and *hashes receive where the caller writes its n block ids and
//  hashes. 0, -1 when the plan cannot carry it (counted as deferred) or out
//  of memory.
int kvt_planbuf_add_entry(kvt_planbuf_t *self, kvt_opid_t op, uint32_t start, uint32_t end,
                          uint32_t first_block, uint32_t verify_end, uint32_t n, uint32_t **blocks,
                          kvt_hash_t **hashes);

//  Adds a lookup of nkeys keys (`bytes` its size): the lookup to fill and
//  in *keys where its keys go. NULL when the plan cannot carry it.
kvt_lookup_t *kvt_planbuf_add_lookup(kvt_planbuf_t *self, uint32_t nkeys, size_t bytes,
                                     kvt_hash_t **keys);

//  Queues a lookup release for the next plan (any call may): 0, or -1.
int kvt_planbuf_queue_release(kvt_planbuf_t *self, kvt_opid_t op);

//  Adds a touch: 0, or -1 when out of memory.
int kvt_planbuf_add_touch(kvt_planbuf_t *self, kvt_hash_t h, uint64_t round);

//  Adds a state op: 0, or -1 when out of memory.
int kvt_planbuf_add_state(kvt_planbuf_t *self, const kvt_sched_state_op_t *op);

//  Queues an event for the next plan (an event lost to out of memory only
//  affects measurements).
void kvt_planbuf_event(kvt_planbuf_t *self, uint64_t req, uint32_t gen, uint8_t type, uint32_t a,
                       uint32_t b, uint32_t c);

//  What the plan holds so far.
void kvt_planbuf_counts(const kvt_planbuf_t *self, kvt_planbuf_counts_t *out);

//  The plan's state ops (valid until the next open).
void kvt_planbuf_state_ops(const kvt_planbuf_t *self, const kvt_sched_state_op_t **ops,
                           uint32_t *n);

//  Hands the plan out as step `step`: offsets become pointers; the events
//  and releases queued go with it (at most what one message carries).
void kvt_planbuf_finish(kvt_planbuf_t *self, uint64_t step, kvt_step_plan_t *plan);

void kvt_planbuf_stats(const kvt_planbuf_t *self, kvt_planbuf_stats_t *out);

#endif
