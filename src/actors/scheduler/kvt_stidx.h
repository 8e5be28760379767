/*  kvt_stidx — the state-offload index: which state images the tier holds,
    and the one owner of every state load's lifecycle (rules I1–I7).

    Images. An image enters on store quorum (note_stored) or on a lookup that
    every rank answered with it (note_present), and leaves on a real state
    `get` miss (state_verdict / fail with state_miss), a GONE touch verdict,
    or the index's own LRU (hash_cap). could_serve is pure (I4); want_touch
    is the separate call that registers a hit and says whether to send a
    touch now (one per hash per touch interval). Touch verdicts (I5): GONE
    forgets the hash (unless newer evidence — a store, a lookup, a later
    touch's verdict — arrived after that touch was sent: it looked before
    those bytes were there), PRESENT counts touches_unrefreshed, REFRESHED
    and PRESENT confirm it.

    Verify hold (I6). hold (h, now) says whether an admission about to load
    the image at h must wait a pass for a touch verdict: it must when h was
    not confirmed within the verified window. The hold is bounded from the
    FIRST hold of h (re-probing or re-sending a touch never extends it); any
    evidence (a touch verdict, a store, a completed load, a lookup) ends it.
    An expired hold is counted, warned once through the log callback, and h
    is then admitted without waiting until new evidence re-arms the hold.

    Loads (I1, I2, I7). request_load records that the request (op) owes a
    report on h and that `slot` stays off the free list; it is ARMED until
    the load travels in a plan (carried), then OUTSTANDING. Every load
    settles exactly once: complete, fail, abandon, decline (never carried),
    or — for an orphan — reclaim. A request torn down mid-load is orphaned:
    its slot stays reserved (the worker may still be writing it) and its
    time is restamped; reclaim frees only orphans, timed from orphan time; a
    live request's slot is never taken back. Loads are keyed by the full
    operation id (request, generation): a re-admission detaches the earlier
    admission's load (orphaning it if the caller had not), so only that
    admission's own late reports reach it and none can settle the new load.
    I7 (no armed leg without a carrier) holds by construction in the
    scheduler core: its admission records a state load and marks it carried
    in the same call that builds its LoadSpec, with no return between (the
    KV-only load index likewise, on consecutive lines), so nothing is left
    armed when a plan is done (test_sched_hold checks it after every plan of
    random sequences); decline is for a caller that records a load it then
    does not send.

    Invariant: dispatched == settled + outstanding. The cheap check runs on
    every stats read. The key-set check (every load record under its keys,
    every map entry at a live record with its key, every indexed image under
    its hash, the totals against the counters) is a pass over the index's
    tables that each stats read advances by one bounded slice
    (KVT_STIDX_SLICE records or map slots), so a broken entry is found
    within one pass of reads (tables / KVT_STIDX_SLICE, plus a few) and a
    read stays O(1). A phase's totals are compared only when its table did
    not change while the pass walked it; the entry checks hold across
    changes. kvt_stidx_check (deep) runs a whole pass at once.
    Every call on the admission path (could_serve, want_touch, hold,
    request_load, carried, load_of, the reports) is O(1); reclaim is
    O(what it frees).

    A load may have no slot (KVT_STIDX_NO_SLOT): the scheduler core keeps a
    second index of this type, with no images, for its KV-only loads
    (kvt_sched_orphan.c), so every load, dense or hybrid, has one owner of
    its lifecycle and the same orphan / reclaim rules.

    Time is passed in (µs on the caller's clock, non-decreasing); no I/O, no
    clock, no threads. One owner. */
#ifndef KVT_STIDX_H_INCLUDED
#define KVT_STIDX_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvtier/kvt_msg.h"

typedef struct _kvt_stidx_t kvt_stidx_t;

#define KVT_STIDX_TOUCH_INTERVAL_US 500000ull   //  default: one touch per hash per 0.5 s (I4)
#define KVT_STIDX_HOLD_BOUND_US     2000000ull  //  default verify-hold bound (lookup_defer), 2 s
#define KVT_STIDX_WINDOW_MIN_US     5000000ull  //  verified window floor, 5 s
#define KVT_STIDX_WINDOW_MAX_US     60000000ull //  verified window ceiling, 60 s
#define KVT_STIDX_SLICE             8u   //  key-set units (records, map slots) per stats read
#define KVT_STIDX_DEEP_EVERY        256u //  stats reads per timing round (bench admit)

typedef struct {
    uint32_t hash_cap;          //  images indexed at most (LRU beyond); 0 = no state tier
    bool can_load;              //  false: a store-only role (could_serve and hold say no)
    uint64_t touch_interval_us; //  per-hash touch throttle (0 = the default)
    uint64_t window_us;         //  verified window (kvt_stidx_window_us); 0 = the 5 s floor
    uint64_t hold_bound_us;     //  verify hold bound from the first hold (0 = the default)
    //  Receives one line per warning (the window at start, the first
    //  expired hold, the first invariant violation); may be NULL.
    void (*log)(void *arg, const char *line);
    void *log_arg; //  passed to log
} kvt_stidx_cfg_t;

typedef struct {
    //  images
    uint64_t images;              //  gauge: hashes indexed now
    uint64_t noted;               //  hashes indexed (store quorum or lookup)
    uint64_t evicted;             //  hashes pushed out by the index's LRU
    uint64_t forgotten_miss;      //  hashes retracted by a real state get miss (I3)
    uint64_t forgotten_gone;      //  hashes retracted by a GONE touch verdict (I5)
    uint64_t touches_sent;        //  touches want_touch asked to send
    uint64_t touches_throttled;   //  want_touch calls inside the interval
    uint64_t touches_unrefreshed; //  PRESENT verdicts: held, not refreshed (I5)
    uint64_t touches_stale;       //  verdicts for an unindexed hash or older than a store
    uint64_t holds;               //  admissions held (first hold of a hash)
    uint64_t hold_passes;         //  later probes of a hash still held
    uint64_t holds_released;      //  holds ended by evidence
    uint64_t holds_expired;       //  holds that reached the bound (I6)
    //  loads (settled = completed + failed + abandoned + declined + reclaimed)
    uint64_t dispatched;           //  loads recorded by request_load
    uint64_t completed;            //  settled ok
    uint64_t failed;               //  settled failed
    uint64_t abandoned;            //  settled without a report (nothing wrote, or torn down unsent)
    uint64_t declined;             //  never carried: declined (I7)
    uint64_t reclaimed;            //  orphans freed by reclaim (I2)
    uint64_t outstanding;          //  gauge: armed + in flight + orphaned
    uint64_t armed;                //  gauge: recorded, not yet carried in a plan
    uint64_t orphans;              //  gauge: orphaned, slot still reserved
    uint64_t orphaned;             //  loads orphaned (torn down mid-load)
    uint64_t detached;             //  live loads orphaned by their request's re-admission
    uint64_t stale_reports;        //  reports for no outstanding load (late, duplicate, old gen)
    uint64_t neutral_verdicts;     //  state verdicts every rank skipped (no evidence, I6)
    uint64_t refused;              //  request_load refused (slot reserved, duplicate op, old gen)
    uint64_t invariant_violations; //  stats reads whose invariant check failed
} kvt_stidx_stats_t;

//  One load, as load_of reports it.
typedef struct {
    kvt_opid_t op;   //  the admission that owes the report
    kvt_hash_t hash; //  the image it loads
    uint32_t slot;   //  its destination state slot
    bool orphaned;   //  torn down: the slot stays reserved
    bool carried;    //  travelled in a plan
} kvt_stidx_load_t;

//  The verified window for a CPU pool of `cpu_pool_bytes` (per rank):
//  clamp (0.25 s/GiB × pool GiB, 5 s, 60 s), in µs.
uint64_t kvt_stidx_window_us(uint64_t cpu_pool_bytes);

//  NULL when out of memory. Logs the window and the hold bound once.
kvt_stidx_t *kvt_stidx_new(const kvt_stidx_cfg_t *cfg);
void kvt_stidx_destroy(kvt_stidx_t **self_p);

// ---------------------------------------------------------------- images --

//  Store quorum for h: indexes it (young end) and confirms it. A GONE
//  verdict of any touch sent before now can no longer retract it.
void kvt_stidx_note_stored(kvt_stidx_t *self, kvt_hash_t h, uint64_t now_us);

//  Every rank's lookup found the image at h: indexes and confirms it.
void kvt_stidx_note_present(kvt_stidx_t *self, kvt_hash_t h, uint64_t now_us);

//  Retracts h (a real state miss, however it was learnt: needs no request
//  id, I3). True when it was indexed.
bool kvt_stidx_forget(kvt_stidx_t *self, kvt_hash_t h);

//  Pure (I4): a load of the image at h may be planned.
bool kvt_stidx_could_serve(const kvt_stidx_t *self, kvt_hash_t h);

//  Registers a tier hit that votes for the image at h (refreshes it in the
//  index's LRU) and says whether to send a touch now; then *round (if not
//  NULL) is the touch's round (Touch.round, unique). False when h is not
//  servable or a touch of h went out less than the interval ago.
bool kvt_stidx_want_touch(kvt_stidx_t *self, kvt_hash_t h, uint64_t now_us, uint64_t *round);

//  The touch verdict of (h, round): answer is kvt_touch_t (the lowest over
//  the ranks, Verdict.touch on KVT_CHAN_TOUCH). 0, or -1 when answer is out
//  of range (nothing changes).
int kvt_stidx_touch_verdict(kvt_stidx_t *self, kvt_hash_t h, uint64_t round, uint8_t answer,
                            uint64_t now_us);

//  A state-leg verdict on h (KVT_CHAN_STATE): ok confirms h; a failure with
//  detail KVT_DETAIL_MISS retracts it whatever step the load's own report
//  arrives in; any other detail (an I/O error, a timeout) changes nothing.
//  A neutral verdict (kvt_stidx_neutral) changes nothing either: counted in
//  neutral_verdicts.
void kvt_stidx_state_verdict(kvt_stidx_t *self, kvt_hash_t h, bool ok, uint32_t detail,
                             uint64_t now_us);

//  True for a state-leg verdict on which every rank skipped its leg (ok,
//  detail SKIPPED: the aggregator's all-neutral settlement). No rank read
//  the image or wrote the slot, so it is no evidence for the image (it ends
//  no verify hold, opens no verified window) and the leg did not land (the
//  load it belongs to must not settle ok on it).
static inline bool kvt_stidx_neutral(const kvt_verdict_t *v)
{
    return v->chan == KVT_CHAN_STATE && v->ok && v->detail == KVT_DETAIL_SKIPPED;
}

//  Verify hold (I6): true when an admission about to load the image at h
//  must wait one pass for a touch verdict. The caller sends the touch
//  (want_touch) as for any hit.
bool kvt_stidx_hold(kvt_stidx_t *self, kvt_hash_t h, uint64_t now_us);

// ----------------------------------------------------------------- loads --

//  The slot of a load that writes no state slot (a KV-only load, in the
//  scheduler core's load index): no slot is reserved, the lifecycle is the
//  same.
#define KVT_STIDX_NO_SLOT UINT32_MAX

//  Records op's load of the image at h into `slot` (or KVT_STIDX_NO_SLOT),
//  armed. 0, or -1 when refused (slot already reserved by another load, op
//  already has one, a newer admission of the request exists, out of
//  memory). A live load of an earlier admission of the same request is
//  orphaned (detached) first.
int kvt_stidx_request_load(kvt_stidx_t *self, kvt_opid_t op, kvt_hash_t h, uint32_t slot,
                           uint64_t now_us);

//  The load travels in a plan (its LoadSpec went out). 0, or -1 when op
//  has no armed load.
int kvt_stidx_carried(kvt_stidx_t *self, kvt_opid_t op);

//  The load will not travel (the plan or a worker declined it, I7): settled
//  as declined; the request keeps its slot. 0, or -1 when op has no armed
//  load.
int kvt_stidx_decline(kvt_stidx_t *self, kvt_opid_t op);

//  Results of a load report.
#define KVT_STIDX_STALE  (-1) //  no outstanding load of op: a late or duplicate report
#define KVT_STIDX_LIVE   0    //  settled; the live request keeps its slot
#define KVT_STIDX_ORPHAN 1    //  settled an orphan: *free_slot goes back to the pool

//  Both legs landed: settles the load, confirms its image. Returns one of
//  the results above.
int kvt_stidx_complete(kvt_stidx_t *self, kvt_opid_t op, uint64_t now_us, uint32_t *free_slot);

//  The load failed. state_miss: the state leg's own get missed (retracts
//  the image); false for a fused failure that may be the KV leg's (I3).
int kvt_stidx_fail(kvt_stidx_t *self, kvt_opid_t op, bool state_miss, uint32_t *free_slot);

//  Settles the load with no report (nothing will write its slot): not a
//  miss, retracts nothing.
int kvt_stidx_abandon(kvt_stidx_t *self, kvt_opid_t op, uint32_t *free_slot);

//  The request was torn down mid-load. Returns 1 when the index now owns
//  the slot (in flight: reserved until its report or reclaim), 0 when the
//  load was never carried (settled as abandoned: the caller frees the
//  slot), -1 when op has no live load.
int kvt_stidx_orphan(kvt_stidx_t *self, kvt_opid_t op, uint64_t now_us);

//  Frees orphans orphaned at least timeout_us ago (0 disables), oldest
//  first: their slots go to slots[0..cap) and, when ops is not NULL, their
//  operation ids to ops[0..cap) (what the caller holds for each orphan);
//  returns how many (at most cap; the rest wait for the next call). Live
//  loads are never reclaimed (I2). O(what it frees).
uint32_t kvt_stidx_reclaim(kvt_stidx_t *self, uint64_t now_us, uint64_t timeout_us, uint32_t *slots,
                           kvt_opid_t *ops, uint32_t cap);

//  The current admission's load of request `req` (O(1)); false when none.
bool kvt_stidx_load_of(const kvt_stidx_t *self, uint64_t req, kvt_stidx_load_t *out);

//  True when op's load is an orphan not yet settled (O(1)).
bool kvt_stidx_is_orphan(const kvt_stidx_t *self, kvt_opid_t op);

//  True when `slot` is reserved by a load (live or orphaned).
bool kvt_stidx_slot_reserved(const kvt_stidx_t *self, uint32_t slot);

// ------------------------------------------------------- stats and audit --

//  Counters. Runs the cheap invariant check every read and, when it holds,
//  the next KVT_STIDX_SLICE units of the key-set pass; a failure is counted
//  in invariant_violations (and warned once); the pass goes on past it.
void kvt_stidx_stats(kvt_stidx_t *self, kvt_stidx_stats_t *out);

//  The invariant: 0, or -1 with the first mismatch in err. deep: also the
//  key-set check (every entry in its maps and lists, every slot reserved
//  once, every image in the LRU). Tests call it with deep after every step.
int kvt_stidx_check(const kvt_stidx_t *self, bool deep, char *err, size_t errlen);

//  Test only: breaks the index on purpose so a test can watch the checks
//  find it. 0, or -1 when `how` is unknown or h is not indexed.
#define KVT_STIDX_BREAK_IMAGE 1 //  h's image record loses its hash (the key-set check)
#define KVT_STIDX_BREAK_COUNT 2 //  outstanding drifts by one (the cheap check)
int kvt_stidx_break_for_test(kvt_stidx_t *self, int how, kvt_hash_t h);

//  Appends the counters as "stidx.<name>" (docs/metrics.md).
void kvt_stidx_counters(kvt_stidx_t *self, kvt_counter_t *c, uint32_t *n, uint32_t cap);

#endif
