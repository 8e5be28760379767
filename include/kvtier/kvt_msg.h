/*  kvt_msg.h — the message catalog and its strict msgpack codec.

    Every message on the wire is a msgpack array `[version, kind, body]` where
    body is a map with small-integer keys. The decoder caps the frame size
    before parsing, accepts only one complete object with no trailing bytes,
    type- and range-checks every field, ignores unknown keys, requires the
    mandatory ones and copies strings and byte arrays out by length. Bulk KV
    and state bytes never travel in messages: specs carry block ids and keys.

    Ownership: a decoded message owns every array it points to; free them
    with kvt_msg_clear (). A message built for sending may point at the
    sender's own arrays; kvt_msg_encode only reads them.

    docs/protocol.md lists every message, field, key number, type and range.
*/
#ifndef KVT_MSG_H_INCLUDED
#define KVT_MSG_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvt_counter.h"
#include "kvt_hash.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVT_MSG_VERSION 1 //  wire schema version; a different value is rejected

//  Limits checked by the decoder before anything is allocated.
#define KVT_MSG_MAX_FRAME   (16u << 20) //  bytes in one encoded message
#define KVT_MSG_MAX_ENTRIES 4096        //  entries / loads / saves / arrivals / events per message
#define KVT_MSG_MAX_TOKENS  (1u << 20)  //  tokens in one request (1 Mi)
#define KVT_MSG_MAX_BLOCKS  (1u << 16)  //  block ids in one entry or spec
#define KVT_MSG_MAX_CHUNKS  4096        //  chunk keys in one spec
#define KVT_MSG_MAX_BYTES   (1u << 20)  //  opaque payload bytes (Ping)
#define KVT_MSG_MAX_TEXT    256         //  bytes in a text field
#define KVT_MSG_MAX_NAME    KVT_COUNTER_NAME_MAX     //  bytes in a name (actor, counter)
#define KVT_MSG_MAX_STATS   512                      //  counters in one Stats message
#define KVT_MSG_MAX_RANKS   256                      //  TP ranks
#define KVT_MSG_MAX_GEN     UINT32_MAX               //  operation generation
#define KVT_MSG_MAX_IMAGES  (KVT_MSG_MAX_CHUNKS / 8) //  bytes of a lookup's image bitmap
#define KVT_MSG_MAX_TOUCH   2 //  largest touch answer (kvt_touch_t: 0 GONE, 1 PRESENT, 2 REFRESHED)

//  Operation id: a request and the generation of its admission. A
//  re-admitted request gets a new generation, so its reports can never settle
//  an earlier admission's work.
typedef struct {
    uint64_t req; //  request id (unique within a replay / engine)
    uint32_t gen; //  admission generation, starts at 1
} kvt_opid_t;

typedef enum {
    KVT_MSG_NONE = 0,
    KVT_MSG_PING = 1,       //  liveness / runtime tests: any → any
    KVT_MSG_SCHEDULE = 2,   //  engine → scheduler: plan the next step
    KVT_MSG_STEP_PLAN = 3,  //  scheduler → engine: what the step runs
    KVT_MSG_STEP_EXEC = 4,  //  engine → runner r: run this step on rank r
    KVT_MSG_STEP_DONE = 5,  //  runner r → engine: step ran (with oracle findings)
    KVT_MSG_LOAD_SPEC = 6,  //  runner r → worker r: restore chunks into blocks
    KVT_MSG_SAVE_SPEC = 7,  //  runner r → worker r: store blocks as chunks
    KVT_MSG_COMPLETION = 8, //  worker r → aggregator: one report per item per rank
    KVT_MSG_VERDICT = 9,    //  aggregator → scheduler: quorum result for a key
    KVT_MSG_STATS = 10,     //  any → any: counters request / reply
    KVT_MSG_SHUTDOWN = 11,  //  any → any: stop (drain, report, exit)
    KVT_MSG_TOUCH = 12,     //  runner r → worker r: refresh an image, say whether it is there
    KVT_MSG_LOOKUP = 13,    //  runner r → worker r: how many leading chunks are held
    KVT_MSG_LOOKUP_RELEASE = 14, //  runner r → worker r: drop a pinned lookup's lease
    KVT_MSG_FENCE = 15,          //  runner / engine → worker r: fence lanes, report once
    KVT_MSG_KIND_COUNT = 16,     //  one past the last kind
} kvt_msg_kind_t;

//  Report channels. A key is unique within its channel.
typedef enum {
    KVT_CHAN_LOAD = 1,          //  a load's completion (every leg ok), key zero
    KVT_CHAN_SAVE = 2,          //  one saved chunk or image (the `store` channel)
    KVT_CHAN_STATE = 3,         //  a state leg's verdict, key = state_hash (neutral: ok, SKIPPED)
    KVT_CHAN_TOUCH = 4,         //  a touch: is the image still on this rank (ok: REFRESHED/PRESENT)
    KVT_CHAN_TOUCH_REFRESH = 5, //  a touch: was it refreshed in the CPU pool (ok: REFRESHED)
    KVT_CHAN_LOOKUP = 6,        //  a lookup: leading chunks held, which carry an image; key zero
    KVT_CHAN_SOURCE_SAFE = 7,   //  a save's sources are no longer read; key = its last item key
    KVT_CHAN_FENCE = 8,         //  a fence ended; op = {fence id, 1}, key zero
    KVT_CHAN_MAX = 8,
} kvt_chan_t;

//  Touch reports have no operation: their id (prefix hash, round) travels
//  as key = the prefix hash, op = {req = round, gen = KVT_TOUCH_GEN}.
#define KVT_TOUCH_GEN 1

//  Why an item failed; 0 is success. Carried in Completion / Verdict detail.
typedef enum {
    KVT_DETAIL_OK = 0,
    KVT_DETAIL_MISS = 1,      //  a key was not in any tier of this rank
    KVT_DETAIL_NO_SPACE = 2,  //  the tier could not allocate (nothing evictable)
    KVT_DETAIL_INVALID = 3,   //  the spec was refused (off grid, mismatched lengths)
    KVT_DETAIL_IO = 4,        //  a device or disk transfer failed
    KVT_DETAIL_SKIPPED = 5,   //  neutral: the rank had nothing to do for this key
    KVT_DETAIL_DUPLICATE = 6, //  the key is already being written by another lane
    KVT_DETAIL_SHUTDOWN = 7,  //  the worker stopped before the item finished
    KVT_DETAIL_TIMEOUT = 8,   //  the item ran past its deadline
    KVT_DETAIL_MAX = 8,
} kvt_detail_t;

// ---------------------------------------------------------------- bodies --

//  Ping: {1: seq u64, 2: payload bin ≤ KVT_MSG_MAX_BYTES (optional)}
typedef struct {
    uint64_t seq;      //  sequence number chosen by the sender
    uint8_t *payload;  //  opaque bytes, may be NULL
    uint32_t npayload; //  length of payload
} kvt_ping_t;

//  A new request handed to the scheduler.
//  {1: req u64, 2: tokens bin (u32 LE × n, 1..MAX_TOKENS), 3: max_new_tokens u32,
//   4: arrival_us u64}
typedef struct {
    uint64_t req;            //  request id
    uint32_t *tokens;        //  prompt token ids
    uint32_t ntokens;        //  prompt length, ≥ 1
    uint32_t max_new_tokens; //  tokens to generate, ≥ 1
    uint64_t arrival_us;     //  arrival time on the trace clock (µs)
} kvt_arrival_t;

//  Schedule: {1: step u64, 2: arrivals [Arrival], 3: now_us u64,
//   4: prev_failed bool (optional), 5: aborts [u64] (optional),
//   6: preempts [u64] (optional)}
//  prev_failed: the previous step did not run on every rank; none of its
//  tokens count. aborts / preempts: requests the engine aborted (client
//  gone) or preempted (memory pressure) since the last Schedule; an older
//  sender omits them.
typedef struct {
    uint64_t step;           //  the step to plan (the previous one has completed)
    kvt_arrival_t *arrivals; //  requests that arrived since the last Schedule
    uint32_t narrivals;      //  length of arrivals
    uint64_t now_us;         //  engine's trace clock (µs)
    bool prev_failed;        //  step - 1 failed on some rank: roll it back
    uint64_t *aborts;        //  requests aborted since the last Schedule (may be NULL)
    uint32_t naborts;        //  length of aborts
    uint64_t *preempts;      //  requests preempted since the last Schedule (may be NULL)
    uint32_t npreempts;      //  length of preempts
} kvt_schedule_t;

//  One request's work in a step.
//  {1: req u64, 2: gen u32, 3: start u32, 4: end u32, 5: first_block u32,
//   6: blocks bin (u32 LE), 7: hashes bin (16 B × nblocks), 8: verify_end u32}
//  blocks[i] is the device block of the request's block (first_block + i);
//  hashes[i] is that block's prefix hash, or zero while the block is partial.
//  The blocks cover [first_block*bs, end). verify_end > 0 asks the runner to
//  check blocks [0, verify_end/bs) against the oracle before the forward
//  (first forward of a request that resumed from a cache hit); then
//  first_block is 0.
//  State work of a hybrid request's entry (optional, keys 9-14):
//   9: state bool, 10: state_slot u32, 11: restore_unit u32, 12: restore_at u32,
//   13: take_unit u32, 14: take_at u32.
//  `state` marks a hybrid entry: the forward reads and writes state slot
//  state_slot. restore_at > 0: before the forward the runner copies HBM
//  checkpoint unit restore_unit (the state at token restore_at <= start)
//  into the slot. take_at > 0: after the forward the runner copies the slot's
//  state at token take_at (start < take_at <= end) into checkpoint unit
//  take_unit, on the compute stream before the step's producer event.
//  Without `state` the other five are 0; without restore_at restore_unit is
//  0, without take_at take_unit is 0.
typedef struct {
    kvt_opid_t op;         //  request and generation
    uint32_t start;        //  first token computed this step
    uint32_t end;          //  one past the last token computed (start < end)
    uint32_t first_block;  //  index in the request's block table of blocks[0]
    uint32_t *blocks;      //  device block ids
    kvt_hash_t *hashes;    //  prefix hash per block (zero = not yet full)
    uint32_t nblocks;      //  length of blocks and hashes
    uint32_t verify_end;   //  tokens to verify before the forward (0 = none)
    bool state;            //  hybrid entry: state_slot is the request's slot (key 9)
    uint32_t state_slot;   //  the request's state slot (key 10)
    uint32_t restore_unit; //  checkpoint unit restored before the forward (key 11)
    uint32_t restore_at;   //  boundary of the restored state, tokens (0 = no restore) (key 12)
    uint32_t take_unit;    //  checkpoint unit taken after the forward (key 13)
    uint32_t take_at;      //  boundary of the taken state, tokens (0 = no take) (key 14)
} kvt_entry_t;

//  Restore chunks [start, end) of a request into device blocks (the KV leg)
//  and / or the state image at boundary B into a state slot (the state leg).
//  {1: req u64, 2: gen u32, 3: start u32, 4: end u32, 5: keys bin (16 B × nchunks),
//   6: blocks bin (u32 LE × nblocks), 7: attempt u32 (optional, default 0),
//   8: lookup bool (optional, LoadSpec only), 9: state bool (optional, LoadSpec),
//   10: state_boundary u32, 11: state_hash bin16, 12: state_slot u32 (optional),
//   13: after u64 (optional, LoadSpec), 14: image bool, 15: producer u64,
//   16: producer_failed bool (optional, SaveSpec only)}
//  A key number names the same field in both bodies; each body uses its own
//  subset (docs/protocol.md).
//  attempt numbers a re-dispatch of the same items (a failed chunk save sent
//  again): it is part of every report key, so a new attempt can never be
//  mistaken for the settled one.
//  The KV leg: start and end lie on the chunk grid; nchunks = (end-start)/chunk_size
//  and nblocks = (end-start)/block_size (checked by the worker, which knows the
//  geometry; the decoder checks start < end and array shapes). It is absent
//  exactly when nkeys, nblocks, start and end are all 0 (a state-only load,
//  rule L3); the decoder accepts that only with `state` (LoadSpec) or `image`
//  (SaveSpec) set. With both legs, state_boundary == end.
//  The state leg (state / image set): state_boundary > 0 (the worker checks the
//  grid), state_hash not zero; without it state_boundary, state_hash and
//  state_slot are 0.
typedef struct {
    kvt_opid_t op;           //  request and generation; the load's report key
    uint32_t start;          //  first token restored (chunk grid); 0 without a KV leg
    uint32_t end;            //  one past the last token restored (chunk grid); 0 without
    kvt_hash_t *keys;        //  chunk keys, one per chunk in [start, end)
    uint32_t nkeys;          //  length of keys
    uint32_t *blocks;        //  destination device blocks for [start, end)
    uint32_t nblocks;        //  length of blocks
    uint32_t attempt;        //  re-dispatch number (0 = first); part of the report key
    bool lookup;             //  load: releases the pinned lease of Lookup (req, gen) (key 8)
    bool state;              //  load: carries a state leg (key 9)
    uint32_t state_boundary; //  state leg: B, tokens (chunk grid, > 0) (key 10)
    kvt_hash_t state_hash;   //  state leg: prefix hash at B = the image's key (key 11)
    uint32_t state_slot;     //  load: destination state slot; save: checkpoint unit (key 12)
    uint64_t after;          //  load: 0, or step+1 whose compute the streams wait for (key 13)
    bool image;              //  save: carries the state image (key 14)
    uint64_t producer;       //  save: 0, or step+1 whose producer event it waits for (key 15)
    bool producer_failed;    //  save: that step's producer event is missing: refuse (key 16)
} kvt_load_spec_t;

//  Store device blocks [start, end) of a request as chunks and / or the state
//  image of checkpoint unit state_slot. Same struct as LoadSpec; blocks are the
//  sources. With a KV leg the image goes with the last chunk (object kind
//  "KV chunk + image", state_boundary = end); without one it is an image-only
//  save keyed by state_hash at state_boundary.
typedef kvt_load_spec_t kvt_save_spec_t;

//  A scheduler event the engine measures (admission, load result, finish).
//  {1: req u64, 2: gen u32, 3: type u8, 4: a u32, 5: b u32, 6: c u32}
typedef enum {
    KVT_EV_ADMIT = 1, //  admitted: a = HBM hit tokens, b = tier tokens to load, c = prompt
    KVT_EV_LOADED =
        2, //  load verdict ok: a = resume point B, b = tier tokens, c = of them from disk
    KVT_EV_RETREAT = 3, //  load verdict failed: a = new resume point, b = detail
    KVT_EV_FINISH = 4,  //  finished: a = prompt tokens, b = generated tokens, c = KVT_FINISH_*
    KVT_EV_OUTCOME = 5, //  right after ADMIT, what it found: a = KV blocks in HBM (ungated
                        //  block hit, tokens), b = tier KV hit (tokens), c = KVT_EV_OUTCOME_*
    KVT_EV_MAX = 5,
} kvt_ev_type_t;

//  KVT_EV_FINISH's c: why the request ended.
#define KVT_FINISH_DONE     0u //  generated its tokens (or stopped at the end of sequence)
#define KVT_FINISH_REJECTED 1u //  the arrival was refused
#define KVT_FINISH_ABORTED  2u //  the engine aborted it (Schedule.aborts)

//  KVT_EV_OUTCOME's c: bits 0-3 the joint planner's reason (a hybrid
//  model's kvt_joint_reason_t; 0 for a dense one), bit 4 set when the tier
//  lookup timed out (the tier hit is unknown, b is 0), bits 8-31 the
//  boundary the planner found, in chunks (also when it skipped it; 0 when
//  none). The loss ledger (src/replay/kvt_ledger.h) reads it.
#define KVT_EV_OUTCOME_REASON(c)      ((c)&0xfu)
#define KVT_EV_OUTCOME_LOOKUP_TIMEOUT 0x10u
#define KVT_EV_OUTCOME_CAND(c)        ((c) >> 8)
#define KVT_EV_OUTCOME_C(reason, timeout, cand_chunks)                              \
    (((uint32_t)(reason)&0xfu) | ((timeout) ? KVT_EV_OUTCOME_LOOKUP_TIMEOUT : 0u) | \
     ((uint32_t)(cand_chunks) << 8))

typedef struct {
    kvt_opid_t op; //  request and generation
    uint8_t type;  //  kvt_ev_type_t
    uint32_t a;    //  meaning per type
    uint32_t b;    //  meaning per type
    uint32_t c;    //  meaning per type
} kvt_event_t;

//  StepPlan: {1: step u64, 2: entries [Entry], 3: loads [LoadSpec],
//   4: saves [SaveSpec], 5: events [Event], 6: idle bool,
//   7: lookups [Lookup] (optional), 8: lookup_releases [LookupRelease] (optional),
//   9: touches [Touch] (optional)}
//  idle: nothing runs and nothing is outstanding (the engine may jump its
//  clock to the next arrival). lookups, lookup_releases and touches go to
//  every rank's worker as they are (runner r sends each to worker r) when
//  the step starts; their answers come back as Verdicts on the lookup and
//  touch channels.
struct _kvt_lookup_t;
struct _kvt_lookup_release_t;
struct _kvt_touch_msg_t;
typedef struct {
    uint64_t step;                                 //  the step this plan is for
    kvt_entry_t *entries;                          //  requests that compute tokens this step
    uint32_t nentries;                             //  length of entries
    kvt_load_spec_t *loads;                        //  loads to start this step
    uint32_t nloads;                               //  length of loads
    kvt_save_spec_t *saves;                        //  saves to start this step (after the forward)
    uint32_t nsaves;                               //  length of saves
    kvt_event_t *events;                           //  scheduler events since the last plan
    uint32_t nevents;                              //  length of events
    bool idle;                                     //  no work and nothing outstanding
    struct _kvt_lookup_t *lookups;                 //  tier lookups to send this step
    uint32_t nlookups;                             //  length of lookups
    struct _kvt_lookup_release_t *lookup_releases; //  pinned lookups no load will use
    uint32_t nlookup_releases;                     //  length of lookup_releases
    struct _kvt_touch_msg_t *touches;              //  image touches to send this step
    uint32_t ntouches;                             //  length of touches
} kvt_step_plan_t;

//  StepExec: {1: step u64, 2: rank u32, 3: entries, 4: loads, 5: saves,
//   6: lookups (optional), 7: lookup_releases (optional), 8: touches (optional)}
typedef struct {
    uint64_t step;                                 //  step number
    uint32_t rank;                                 //  the rank this message is for (< MAX_RANKS)
    kvt_entry_t *entries;                          //  as in the plan
    uint32_t nentries;                             //  length of entries
    kvt_load_spec_t *loads;                        //  as in the plan
    uint32_t nloads;                               //  length of loads
    kvt_save_spec_t *saves;                        //  as in the plan
    uint32_t nsaves;                               //  length of saves
    struct _kvt_lookup_t *lookups;                 //  as in the plan
    uint32_t nlookups;                             //  length of lookups
    struct _kvt_lookup_release_t *lookup_releases; //  as in the plan
    uint32_t nlookup_releases;                     //  length of lookup_releases
    struct _kvt_touch_msg_t *touches;              //  as in the plan
    uint32_t ntouches;                             //  length of touches
} kvt_step_exec_t;

//  StepDone: {1: step u64, 2: rank u32, 3: ok bool, 4: blocks_written u32,
//   5: blocks_verified u32, 6: wrong [u64 req] (requests whose restored bytes
//   did not match the oracle), 7: detail u32}
typedef struct {
    uint64_t step;            //  step number
    uint32_t rank;            //  reporting rank
    bool ok;                  //  the forward ran
    uint32_t blocks_written;  //  blocks the simulated forward wrote
    uint32_t blocks_verified; //  blocks checked against the oracle
    uint64_t *wrong;          //  requests with at least one wrong restored byte
    uint32_t nwrong;          //  length of wrong
    uint32_t detail;          //  kvt_detail_t when !ok
} kvt_step_done_t;

//  Completion: {1: chan u8, 2: req u64, 3: gen u32, 4: key bin16, 5: rank u32,
//   6: ok bool, 7: detail u32, 8: attempt u32 (optional), 9: lower u32 (optional),
//   10: epoch u64 (optional), 11: touch u8 (optional), 12: held u32 (optional),
//   13: images bin (optional), 14: fenced bool (optional), 15: rank0_only bool (optional)}
//  The report key is (chan, op, key, attempt): key is the chunk key (or the
//  image's state_hash) for a save, the state_hash for a state verdict, the
//  spec's last item key for source_safe, the prefix hash for a touch and the
//  zero hash for a load, a lookup or a fence. lower: chunks a load read from
//  a tier below the CPU pool (disk). epoch: the reporting worker's
//  incarnation (grows on every restart). touch: the kvt_touch_t answer (touch
//  channels only; their gen is KVT_TOUCH_GEN). held / images: a lookup's
//  leading chunks held and a bitmap (bit i of byte i/8: chunk i carries an
//  image; only on the lookup channel); bytes past its end are zero, bits at
//  or past held mean nothing (the aggregator ignores them). fenced: the
//  save's stream waited on its producer event (store channel only).
//  rank0_only: rank 0 answered a Lookup that asked only rank 0 (lookup
//  channel only): the key settles on this one report.
typedef struct {
    uint8_t chan;     //  kvt_chan_t
    kvt_opid_t op;    //  operation id
    kvt_hash_t key;   //  item key within the operation
    uint32_t rank;    //  reporting rank
    bool ok;          //  the item succeeded on this rank
    uint32_t detail;  //  kvt_detail_t
    uint32_t attempt; //  the spec's attempt (part of the report key)
    uint32_t lower;   //  load: chunks read from a lower tier (disk) on this rank
    uint64_t epoch;   //  the worker's incarnation (0 = not stamped)
    uint8_t touch;    //  touch channels: KVT_TOUCH_GONE / PRESENT / REFRESHED
    uint32_t held;    //  lookup: leading chunks this rank holds
    uint8_t *images;  //  lookup: image bitmap over the held chunks (may be NULL)
    uint32_t nimages; //  bytes of images (≤ KVT_MSG_MAX_IMAGES)
    bool fenced;      //  store: the save waited on its producer event (S1)
    bool rank0_only;  //  lookup: the Lookup asked rank 0 only (settles on this report)
} kvt_completion_t;

//  Verdict: {1: chan u8, 2: req u64, 3: gen u32, 4: key bin16, 5: ok bool,
//   6: detail u32, 7: nfailed u32, 8: attempt u32 (optional), 9: lower u32 (optional),
//   10: touch u8 (optional), 11: held u32 (optional), 12: images bin (optional),
//   13: fenced bool (optional)}
//  lower: the largest Completion.lower over the ranks. touch, held: the
//  minimum over the ranks; images: the AND of the ranks' bitmaps, cut at held.
//  fenced: the AND of the ranks' Completion.fenced (store channel).
//  State channel: ranks that report neutral (ok, detail SKIPPED) do not vote;
//  the verdict is SKIPPED only when every rank was neutral.
typedef struct {
    uint8_t chan;     //  kvt_chan_t
    kvt_opid_t op;    //  operation id
    kvt_hash_t key;   //  item key
    bool ok;          //  AND over all ranks (failure-dominant)
    uint32_t detail;  //  detail of the first failing rank, or 0
    uint32_t nfailed; //  ranks that reported failure
    uint32_t attempt; //  the spec's attempt
    uint32_t lower;   //  load: most chunks any rank read from a lower tier
    uint8_t touch;    //  touch channels: the lowest answer of any rank
    uint32_t held;    //  lookup: fewest leading chunks any rank holds
    uint8_t *images;  //  lookup: chunks every rank holds with an image (may be NULL)
    uint32_t nimages; //  bytes of images
    bool fenced;      //  store: every rank's save waited on its producer event
} kvt_verdict_t;

//  Touch: {1: hash bin16, 2: round u64, 3: keys bin (16 B × n, optional)}
//  Refreshes the state image stored under the prefix hash, or, when keys
//  are given, each of those chunks; reports on KVT_CHAN_TOUCH and
//  KVT_CHAN_TOUCH_REFRESH (one report each per rank), keyed by the id.
typedef struct _kvt_touch_msg_t {
    kvt_hash_t hash;  //  the prefix hash (first half of the touch id)
    uint64_t round;   //  the touch round (second half of the id; unique per hash)
    kvt_hash_t *keys; //  chunk keys to touch instead of the image (may be NULL)
    uint32_t nkeys;   //  length of keys
} kvt_touch_msg_t;

//  Lookup: {1: req u64, 2: gen u32, 3: keys bin (16 B × n), 4: pin bool
//   (optional), 5: ttl_ms u32 (optional, pin only), 6: rank0_only bool (optional)}
//  Counts the leading keys this rank holds and which carry an image; with
//  pin, keeps the pool-resident ones read-pinned under a lease until a
//  LoadSpec with `lookup` of the same (req, gen) uses it, a LookupRelease,
//  or ttl_ms (0: the worker's default) — whichever comes first, once.
//  rank0_only: only rank 0 answers (its report says so and settles the
//  key alone); every other rank neither answers nor pins.
typedef struct _kvt_lookup_t {
    kvt_opid_t op;    //  the lookup's id (the report key with the zero key)
    kvt_hash_t *keys; //  chunk keys, in prefix order
    uint32_t nkeys;   //  length of keys
    bool pin;         //  keep the held chunks pinned under a lease
    uint32_t ttl_ms;  //  lease lifetime in ms (0 = the worker's default; ignored without pin)
    bool rank0_only;  //  only rank 0 answers (and pins); the others skip it
} kvt_lookup_t;

//  LookupRelease: {1: req u64, 2: gen u32} — drops the lease of a pinned
//  lookup that no load will use. No report (nothing was dispatched).
typedef struct _kvt_lookup_release_t {
    kvt_opid_t op; //  the lookup's id
} kvt_lookup_release_t;

//  Fence: {1: id u64, 2: lanes u8 (optional, 0..7)}
//  Fences the worker's lanes named in `lanes` (KVT_FENCE_LANE_* bits; 0 =
//  all): every job they hold, in any stage, ends before the worker reports
//  once on KVT_CHAN_FENCE with op = {id, 1} and the zero key (ok = false,
//  detail TIMEOUT when the fence timed out and the lane failed).
#define KVT_FENCE_LANE_LOAD  1u //  the load (KV) lane
#define KVT_FENCE_LANE_STATE 2u //  the state lane
#define KVT_FENCE_LANE_SAVE  4u //  the save lane
#define KVT_FENCE_LANES_ALL  7u //  every lane bit
typedef struct {
    uint64_t id;   //  fence id (the report's op.req)
    uint8_t lanes; //  KVT_FENCE_LANE_* bits, 0 = every lane
} kvt_fence_msg_t;

//  Stats: {1: request bool, 2: from str, 3: counters map str → u64}
typedef struct {
    bool request;                    //  true: please reply with your counters
    char from[KVT_MSG_MAX_NAME + 1]; //  the reporting actor's name
    kvt_counter_t *counters;         //  counters (reply)
    uint32_t ncounters;              //  length of counters
} kvt_stats_t;

//  Shutdown: {1: code u32, 2: text str (optional)}
typedef struct {
    uint32_t code;                   //  0 = normal, otherwise a reason code
    char text[KVT_MSG_MAX_TEXT + 1]; //  NUL-terminated reason
} kvt_shutdown_t;

//  A message: kind plus the body for that kind.
typedef struct {
    kvt_msg_kind_t kind; //  which body is valid
    union {
        kvt_ping_t ping;
        kvt_schedule_t schedule;
        kvt_step_plan_t step_plan;
        kvt_step_exec_t step_exec;
        kvt_step_done_t step_done;
        kvt_load_spec_t load_spec;
        kvt_save_spec_t save_spec;
        kvt_completion_t completion;
        kvt_verdict_t verdict;
        kvt_stats_t stats;
        kvt_shutdown_t shutdown;
        kvt_touch_msg_t touch;
        kvt_lookup_t lookup;
        kvt_lookup_release_t lookup_release;
        kvt_fence_msg_t fence;
    } u; //  body
} kvt_msg_t;

//  Why a decode failed: the message kind (if it got that far), the field path
//  and a short reason, e.g. kind=StepExec field="entries[3].blocks"
//  reason="array longer than 65536".
typedef struct {
    kvt_msg_kind_t kind; //  KVT_MSG_NONE when the envelope itself was bad
    char field[64];      //  field path
    char reason[96];     //  what was wrong
} kvt_msg_err_t;

//  Name of a kind ("StepExec"), or "?" for an unknown value.
const char *kvt_msg_kind_name(int kind);

//  Encodes msg into a freshly allocated buffer (*buf_p, *len_p); the caller
//  frees it with free (). Returns 0, or -1 when the message violates the
//  schema (not asserted: kvt_msg_check names the field), the frame would
//  exceed KVT_MSG_MAX_FRAME, or memory ran out.
int kvt_msg_encode(const kvt_msg_t *msg, uint8_t **buf_p, size_t *len_p);

//  Checks msg against the schema exactly as kvt_msg_encode does (kind,
//  ranges, counts and limits, NULL arrays, strings, cross-field rules)
//  without encoding it. Returns 0, or -1 and fills *err (if not NULL).
int kvt_msg_check(const kvt_msg_t *msg, kvt_msg_err_t *err);

//  Decodes one frame into *msg (which is overwritten, not cleared first).
//  Returns 0 on success; on failure returns -1, fills *err (if not NULL) and
//  leaves *msg empty (kind NONE, nothing to free).
int kvt_msg_decode(const uint8_t *buf, size_t len, kvt_msg_t *msg, kvt_msg_err_t *err);

//  Frees every array a decoded message owns and resets it to kind NONE.
//  Safe on a zeroed or already cleared message.
void kvt_msg_clear(kvt_msg_t *msg);

//  Formats err as "Kind.field: reason" into buf; returns buf.
const char *kvt_msg_err_str(const kvt_msg_err_t *err, char *buf, size_t size);

#ifdef __cplusplus
}
#endif
#endif
