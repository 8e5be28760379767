/*  kvt_savetrack — the save tracker: per request, how far its KV has been
    handed to the tier, and the leases its saves hold (rules S3–S5).

    Frontier. Tokens [0, frontier) of a request are in the tier or being
    saved. Only forwarded chunks are saved: next offers the whole chunks the
    forward wrote past the frontier; build records the save of the chunk at
    the frontier (skip passes over one that needs none) and moves it on.

    Leases (S4). A built save leases its source blocks and the state
    resource its image is read from (a state slot or an HBM checkpoint
    unit: the `slot` of the calls, opaque here) until every rank reported
    source_safe or its store verdict came, whichever is first; a finished
    request's forwarded tail not yet built keeps a lease on its blocks and
    slot until the next plan builds it or end_plan retires it. Every lease
    is taken through the acquire callback and released exactly once through
    the release callback: the one path.

    Skips. A chunk whose key another request's save has in flight is
    skipped (skip_inflight): the skipper is remembered on that save, and if
    the save fails its frontier goes back to the skipped chunk, so the
    chunks it saved above are never left behind a hole.

    Failures (S3). A failed save leaves the frontier at the failed chunk
    (never past it) and is re-emitted with a new attempt number once every
    save of the request settled (all ranks quiescent); a failure after the
    request retired, or of an earlier admission, is dropped. With no re-emit
    left, the request saves nothing more (a gap could never be closed).

    Save floor (S5). When a load is decided, [hbm, hit) comes from the tier:
    the floor is recorded once for that admission and the frontier moves to
    hit. A lost or failed tier hit reopens [hbm, hit) for saving: the
    frontier goes back to hbm's chunk floor. A load withdrawn for any other
    reason reopens nothing (the tier still holds what is recomputed).

    Deadline. A save still without its store verdict deadline_us after it
    was built (on the owner's clock, set_now) settles failed as a TIMEOUT
    verdict would (S3: re-emit, or stop), but a rank may still read its
    sources, so its lease is held drain_us longer (the save drains) before
    it is released; its verdicts meanwhile are late, dropped and counted.
    Builds are due in build order and drains end in expiry order, so both
    are lists in time order (expire: O(1) per save).

    Reports are keyed like the SaveSpec: a store verdict by (op, chunk key,
    attempt), a source_safe by (op, the spec's last chunk key, attempt):
    builds that join the one before them form one SaveSpec, and its
    source_safe releases every save of it still in flight. Every call is
    O(1) but sources_safe (O(chunks of the spec)), end_plan (O(finished
    tails)) and kvt_savetrack_check with deep. Pure: no I/O, no clock of its own
    (the owner's, set_now / expire), no threads; one owner. */
#ifndef KVT_SAVETRACK_H_INCLUDED
#define KVT_SAVETRACK_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvtier/kvt_msg.h"

typedef struct _kvt_savetrack_t kvt_savetrack_t;

typedef struct {
    uint32_t chunk_size; //  tokens per chunk (a multiple of block_size)
    uint32_t block_size; //  tokens per block
    uint32_t retries;    //  re-emits of failed saves per admission (0: a failure stops them)
    //  A save with no store verdict this long after its build settles
    //  failed (as a TIMEOUT would; 0: no deadline), and its lease is held
    //  drain_us longer: a rank may still read its sources.
    uint64_t deadline_us;
    uint64_t drain_us;
    //  The one lease path: acquire when a lease is taken, release once when
    //  it ends. slot < 0: no slot. May not be NULL.
    void (*acquire)(void *arg, const uint32_t *blocks, uint32_t nblocks, int32_t slot);
    void (*release)(void *arg, const uint32_t *blocks, uint32_t nblocks, int32_t slot);
    void *arg; //  passed to acquire and release
} kvt_savetrack_cfg_t;

typedef struct {
    uint64_t records;            //  gauge: requests tracked
    uint64_t saves_built;        //  chunk saves built (leased, sent)
    uint64_t saves_skipped;      //  chunks passed with no save
    uint64_t saves_ok;           //  store verdicts ok
    uint64_t saves_failed;       //  store verdicts failed
    uint64_t saves_outstanding;  //  gauge: built, no store verdict yet
    uint64_t saves_reemitted;    //  re-emits started after a failure (S3)
    uint64_t saves_stopped;      //  requests whose saves stopped (no re-emit left)
    uint64_t saves_dropped;      //  failures not re-emitted: request retired / earlier admission
    uint64_t tails_leased;       //  finished requests whose unbuilt tail kept a lease
    uint64_t tails_retired;      //  unbuilt tails retired, their lease released (S4)
    uint64_t chunks_retired;     //  forwarded chunks never saved because their request retired
    uint64_t leases_taken;       //  leases acquired
    uint64_t leases_released;    //  leases released
    uint64_t leases_outstanding; //  gauge: leases held
    uint64_t floors_recorded;    //  save floors recorded (S5)
    uint64_t floors_ignored;     //  second floor of one admission, ignored
    uint64_t floors_reopened;    //  lost tier hits reopened for saving
    uint64_t stale_reports;      //  reports for no outstanding save (late, duplicate)
    uint64_t refused;            //  calls refused (nothing to build, old generation, bad span)
    uint64_t skips_rewound;      //  skippers sent back to a chunk whose save in flight failed
    uint64_t skips_lost;         //  ... not sent back: retired, stopped or re-admitted since
    uint64_t skips_waiting;      //  gauge: skips whose save is still in flight
    uint64_t saves_expired;      //  saves settled failed at their deadline (counted in failed)
    uint64_t saves_drained;      //  expired saves whose drain ended (or that held no lease)
    uint64_t saves_draining;     //  gauge: expired saves still holding their lease
    uint64_t late_verdicts;      //  reports of an expired save, dropped
} kvt_savetrack_stats_t;

//  NULL when out of memory or when the geometry is invalid.
kvt_savetrack_t *kvt_savetrack_new(const kvt_savetrack_cfg_t *cfg);
void kvt_savetrack_destroy(kvt_savetrack_t **self_p);

//  Begins tracking admission op with the frontier at `frontier` (rounded
//  down to the chunk grid). A newer admission of a tracked request starts
//  afresh (its earlier saves still settle by their ids). 0, or -1 (an older
//  generation, out of memory).
int kvt_savetrack_admit(kvt_savetrack_t *self, kvt_opid_t op, uint32_t frontier);

//  S5: op's load was decided, [hbm, hit) from the tier. The first call of
//  an admission records the floor and moves the frontier to hit's chunk
//  grid; later calls are ignored. 0, or -1 (unknown op, hit < hbm).
int kvt_savetrack_load_decided(kvt_savetrack_t *self, kvt_opid_t op, uint32_t hbm, uint32_t hit);

//  S5: op's tier hit was lost (its load failed, or was refused because the
//  tier no longer holds it): reopens [hbm, hit) from the recorded floor.
//  0, or -1 (unknown op, no floor recorded).
int kvt_savetrack_hit_lost(kvt_savetrack_t *self, kvt_opid_t op);

//  The forward wrote op's KV up to `tokens`.
void kvt_savetrack_forwarded(kvt_savetrack_t *self, kvt_opid_t op, uint32_t tokens);

//  What the next plan may save for request req: whole forwarded chunks
//  [*start, *end) past the frontier, saved with *attempt. False when none:
//  nothing forwarded past it, a failed save waiting for quiescence, saves
//  stopped, or a retired request with no tail.
bool kvt_savetrack_next(const kvt_savetrack_t *self, uint64_t req, uint32_t *start, uint32_t *end,
                        uint32_t *attempt);

//  Builds the save of the chunk at req's frontier under `key`: leases its
//  chunk_size / block_size source `blocks` and the state `slot` its image is
//  read from (-1: none) and moves the frontier on. blocks NULL: the
//  finished request's tail lease names them (and, with slot < 0, its
//  slot). joins: the chunk travels in the same SaveSpec as the save built
//  just before it for req (a run of consecutive chunks; source_safe names
//  a spec by its last chunk). 0, or -1 (nothing buildable: see next; key
//  already in flight; out of memory).
int kvt_savetrack_build(kvt_savetrack_t *self, uint64_t req, kvt_hash_t key, const uint32_t *blocks,
                        int32_t slot, bool joins);

//  Moves req's frontier over the chunk at it without a save (the tier
//  holds it, or another request's save of its key is in flight). 0 / -1.
int kvt_savetrack_skip(kvt_savetrack_t *self, uint64_t req);

//  Moves req's frontier over the chunk at it because another save of its
//  key is in flight: if that save fails, the frontier goes back to this
//  chunk (so no hole is left below the chunks saved above it). 0, or -1
//  (nothing buildable, no save of key in flight, out of memory: the
//  frontier stays).
int kvt_savetrack_skip_inflight(kvt_savetrack_t *self, uint64_t req, kvt_hash_t key);

//  The owner's clock: builds from now on are due deadline_us after it. A
//  clock that goes back is ignored (the deadline lists stay in order).
void kvt_savetrack_set_now(kvt_savetrack_t *self, uint64_t now_us);

//  The earliest deadline of a save in flight or end of a drain
//  (UINT64_MAX: none).
uint64_t kvt_savetrack_next_deadline(const kvt_savetrack_t *self);

//  One timed event due by now_us, the earliest first: a save in flight
//  past its deadline settles failed (S3, counted in saves_failed and
//  saves_expired) and starts its drain, its lease held (one whose sources
//  every rank reported safe holds nothing: it goes at once, counted
//  drained); or a drain ends and its lease is released. True with the save's request in *req (may
//  be NULL); false when nothing is due. O(1).
bool kvt_savetrack_expire(kvt_savetrack_t *self, uint64_t now_us, uint64_t *req);

//  True while a built save of key has no store verdict.
bool kvt_savetrack_key_inflight(const kvt_savetrack_t *self, kvt_hash_t key);

//  Every rank reported source_safe for the SaveSpec whose last chunk save
//  is (op, key, attempt): releases the lease of every save of that spec.
//  0; 1 when that save expired and drains (late: counted, its lease held
//  until the drain ends); -1 when no such save holds a lease (duplicate,
//  stale: counted).
int kvt_savetrack_sources_safe(kvt_savetrack_t *self, kvt_opid_t op, kvt_hash_t key,
                               uint32_t attempt);

//  True while save (op, key, attempt) has no store verdict (or expired
//  and drains); *slot (may be NULL): the state slot it was built with (-1:
//  none), even once its lease was released.
bool kvt_savetrack_save_slot(const kvt_savetrack_t *self, kvt_opid_t op, kvt_hash_t key,
                             uint32_t attempt, int32_t *slot);

//  The store verdict of save (op, key, attempt): settles it (its lease is
//  released if source_safe did not). ok: the caller indexes the key.
//  Failed: S3. 0; 1 when the save expired and drains (late: dropped,
//  counted, nothing applied); -1 when no such save is outstanding.
int kvt_savetrack_stored(kvt_savetrack_t *self, kvt_opid_t op, kvt_hash_t key, uint32_t attempt,
                         bool ok);

//  S4: request req finished; blocks[0..nblocks) is its block table, slot
//  its state slot (-1: none). Its forwarded tail not yet built keeps a
//  lease on those blocks and the slot, so the caller may drop its own
//  references now; the next plan may build it (build with blocks NULL),
//  end_plan retires what it did not. 0, or -1 (unknown request, a table
//  too short for the tail).
int kvt_savetrack_finish(kvt_savetrack_t *self, uint64_t req, const uint32_t *blocks,
                         uint32_t nblocks, int32_t slot);

//  Request req was torn down (abort, preemption): its unbuilt saves are
//  retired now; saves in flight still settle (a failure is dropped).
void kvt_savetrack_abort(kvt_savetrack_t *self, uint64_t req);

//  End of a plan: every finished request's tail the plan did not build is
//  retired and its lease released. Returns how many tails.
uint32_t kvt_savetrack_end_plan(kvt_savetrack_t *self);

//  The frontier of request req; false when it is not tracked.
bool kvt_savetrack_frontier(const kvt_savetrack_t *self, uint64_t req, uint32_t *frontier);

//  Calls fn once for every lease held now (a built save's, a tail's), with
//  what it holds (audits).
void kvt_savetrack_leases(const kvt_savetrack_t *self,
                          void (*fn)(void *arg, const uint32_t *blocks, uint32_t nblocks,
                                     int32_t slot),
                          void *arg);

void kvt_savetrack_stats(const kvt_savetrack_t *self, kvt_savetrack_stats_t *out);

//  Identities (saves built == settled + outstanding, leases taken ==
//  released + outstanding, map sizes): 0, or -1 with the mismatch in err.
//  deep: also walks every record and save (each request's in-flight count,
//  every lease held by a live save or a tail).
int kvt_savetrack_check(const kvt_savetrack_t *self, bool deep, char *err, size_t errlen);

//  Appends the counters as "savetrack.<name>" (docs/metrics.md).
void kvt_savetrack_counters(const kvt_savetrack_t *self, kvt_counter_t *c, uint32_t *n,
                            uint32_t cap);

#endif
