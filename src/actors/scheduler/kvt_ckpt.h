/*  kvt_ckpt — the scheduler's state pool for hybrid models: the live state
    slot of every admitted request and a separate pool of HBM checkpoints.

    A state slot holds one running request's recurrent state in device
    memory. It is taken at admission and given back on every path that ends
    the admission (finish, preemption, abort), through the same call.

    An HBM checkpoint is a copy of the state after the first B tokens of a
    prefix, keyed by the prefix hash at B. A checkpoint is reserved when a
    plan asks the runner to take it (after the forward that reaches B), and
    becomes valid when that step has run; a step that failed abandons it.
    Valid checkpoints nobody reads sit in an LRU (old → young) and are
    evicted from the old end when a reservation needs room; a restore, a
    save of its image or a reservation pins one, and a pinned checkpoint is
    never evicted. Every operation is O(1).

    Shared with KV (kvt_ckpt_share): the pool's entries are then only
    indices; its bytes are blocks the caller withholds from the block
    manager for every reservation, and every entry that goes (an abandon or
    an eviction) calls the release hook once, which gives them back. The
    block manager asks for victims (kvt_ckpt_victim / kvt_ckpt_evict_one)
    and says when a block's KV left HBM (kvt_ckpt_kv_gone): a valid
    checkpoint at that hash is worthless from HBM and goes first. */
#ifndef KVT_CKPT_H_INCLUDED
#define KVT_CKPT_H_INCLUDED

#include <stdbool.h>
#include <stdint.h>

#include "kvtier/kvt_hash.h"
#include "kvtier/kvt_sched.h"

typedef struct _kvt_ckpt_t kvt_ckpt_t;

#define KVT_CKPT_NONE UINT32_MAX //  "no checkpoint / no slot"

//  Why a checkpoint was taken (its source), counted per source when it
//  becomes valid and when a restore reads it.
typedef enum {
    KVT_CKPT_SRC_GRID = 0,    //  the checkpoint_interval grid
    KVT_CKPT_SRC_BRANCH,      //  where the prompt leaves a cached prefix
    KVT_CKPT_SRC_PROMPT_END,  //  the prompt's last chunk boundary or its end on the block grid
    KVT_CKPT_SRC_DECODE_KEEP, //  the last chunk boundary of the fed tokens
    KVT_CKPT_SRCS
} kvt_ckpt_src_t;

//  Which unpinned valid checkpoint an eviction takes (kvt_ckpt_set_order).
//  A checkpoint whose KV left HBM always goes first; then:
typedef enum {
    KVT_CKPT_ORDER_LRU = 0, //  the least recently used
    //  The value rule, Greedy-Dual-Size-Frequency: each unpinned valid
    //  checkpoint has priority L + (1 + restores) x the recompute a resume
    //  there saves (its B tokens, each costing 1 + position /
    //  KVT_CKPT_CTX_TOKENS), set when it was last used; the least priority
    //  goes (the older on a tie) and L becomes its priority, so what stays
    //  ages against what went. Every checkpoint has the same bytes, so value
    //  per byte orders as value. A binary heap: O(log n) per event.
    KVT_CKPT_ORDER_VALUE,
    //  Marconi's utility over the KVT_CKPT_SAMPLE least recently used:
    //  normalised recency + alpha x normalised FLOP efficiency (recompute
    //  saved over the bytes of the state and the span's KV), alpha = 1;
    //  the least goes. O(KVT_CKPT_SAMPLE) per eviction.
    KVT_CKPT_ORDER_MARCONI,
} kvt_ckpt_order_t;

#define KVT_CKPT_SAMPLE     8     //  least recently used checkpoints MARCONI weighs
#define KVT_CKPT_CTX_TOKENS 16384 //  position at which a token's recompute cost has doubled

typedef struct {
    uint64_t taken_src[KVT_CKPT_SRCS];    //  reservations that became valid, by source
    uint64_t restored_src[KVT_CKPT_SRCS]; //  restores that read a checkpoint, by its source
    uint64_t slots_taken;                 //  state slots handed out
    uint64_t slots_refused;               //  slot requests with every slot in use
    uint64_t reserved;                    //  checkpoints reserved for a take
    uint64_t committed;                   //  reservations that became valid checkpoints
    uint64_t abandoned;                   //  reservations dropped (their step failed)
    uint64_t refreshed;                   //  takes of a hash already valid (moved to the young end)
    uint64_t evicted;                     //  valid checkpoints evicted for a reservation
    uint64_t full;                        //  reservations refused: every entry pinned or reserved
    uint64_t evicted_gone;                //  of evicted: their KV had left HBM
    uint64_t evicted_by_value;            //  of evicted: not the least recently used (the
                                          //  order's rule chose a younger one)
    uint64_t evicted_unsaved;             //  of evicted: no save lease had read it (its
                                          //  image never left HBM)
    uint32_t slots_in_use;                //  gauge: state slots held
    uint32_t valid;                       //  gauge: valid checkpoints
    uint32_t pinned_entries;              //  gauge: entries with a pin (valid or reserved)
} kvt_ckpt_stats_t;

//  A pool of `slots` state slots and `checkpoints` HBM checkpoints (both
//  ≥ 1). NULL when out of memory.
kvt_ckpt_t *kvt_ckpt_new(uint32_t slots, uint32_t checkpoints);
void kvt_ckpt_destroy(kvt_ckpt_t **self_p);

//  Called once for every entry that goes (abandoned or evicted).
typedef void kvt_ckpt_release_fn(void *arg, uint32_t entry);
//  The shared recency clock: advances it and returns the new value.
typedef uint64_t kvt_ckpt_tick_fn(void *arg);

//  Shares the pool's bytes with KV: entries are stamped from `tick` (the
//  block manager's recency clock) and every entry that goes calls
//  `release`; both get `arg`.
void kvt_ckpt_share(kvt_ckpt_t *self, kvt_ckpt_tick_fn *tick, kvt_ckpt_release_fn *release,
                    void *arg);

//  The eviction order of a state policy (kvt_ckpt_split.c): Marconi's
//  utility for MARCONI, for KVTIER the value rule with `value` (the setting
//  evict_order) and LRU without, LRU for INTERVAL and EVERY_CHUNK.
kvt_ckpt_order_t kvt_ckpt_order_of(kvt_sched_state_policy_t policy, bool value);

//  Sets the eviction order (default LRU), before the first reservation. state_bytes and
//  kv_token_bytes (bytes of one checkpoint and of one token's KV) weigh MARCONI's FLOP efficiency;
//  the other orders ignore them.
void kvt_ckpt_set_order(kvt_ckpt_t *self, kvt_ckpt_order_t order, uint64_t state_bytes,
                        uint64_t kv_token_bytes);

//  Records where a reserved entry lies: it holds the state at `at` (the
//  value rule's B), taken by a request whose previous checkpoint or resume
//  point was `from` (from < at; MARCONI's span, the tokens it adds on its
//  branch). Default: at = from = 0 (no value, no span).
void kvt_ckpt_set_span(kvt_ckpt_t *self, uint32_t entry, uint32_t from, uint32_t at);

//  The value order's score of an entry: (1 + restores) x the recompute of
//  its B tokens (pure; tests and audits).
double kvt_ckpt_value(const kvt_ckpt_t *self, uint32_t entry);

//  True when `hash` has an entry, valid or reserved (pure).
bool kvt_ckpt_known(const kvt_ckpt_t *self, kvt_hash_t hash);

//  The checkpoint an eviction would take now: true with its recency stamp
//  and whether its KV left HBM (those go first); false when every valid
//  entry is pinned.
bool kvt_ckpt_victim(const kvt_ckpt_t *self, uint64_t *stamp, bool *gone);

//  Evicts the victim (counted; the release hook runs).
void kvt_ckpt_evict_one(kvt_ckpt_t *self);

//  The KV block ending at `hash` left HBM: a valid checkpoint there is
//  worthless from HBM (it goes first once unpinned) until a take or a
//  restore of it shows the prefix is back.
void kvt_ckpt_kv_gone(kvt_ckpt_t *self, kvt_hash_t hash);

//  A reservation the caller refused for want of bytes (counted as full).
void kvt_ckpt_count_full(kvt_ckpt_t *self);

//  Takes a free state slot: its index, or KVT_CKPT_NONE when all are held.
uint32_t kvt_ckpt_slot_take(kvt_ckpt_t *self);

//  Gives a slot back (the one path every release takes).
void kvt_ckpt_slot_give(kvt_ckpt_t *self, uint32_t slot);

//  Free state slots.
uint32_t kvt_ckpt_slots_free(const kvt_ckpt_t *self);

//  True when a valid checkpoint of `hash` is held (pure: no refresh).
bool kvt_ckpt_has(const kvt_ckpt_t *self, kvt_hash_t hash);

//  Reserves an entry for a take of `hash` and pins it: its index, or
//  KVT_CKPT_NONE when `hash` is already valid or reserved (nothing to take;
//  a valid one is refreshed) or when every entry is pinned (counted).
uint32_t kvt_ckpt_reserve(kvt_ckpt_t *self, kvt_hash_t hash);

//  Records why a reserved entry is taken (default: the grid); the source
//  stays with the entry while it is valid (a refresh keeps it).
void kvt_ckpt_set_source(kvt_ckpt_t *self, uint32_t entry, kvt_ckpt_src_t src);

//  A restore read the entry (pinned by the caller): counted by its source.
void kvt_ckpt_count_restore(kvt_ckpt_t *self, uint32_t entry);

//  The step that took a reserved checkpoint ran: it becomes valid, its
//  reservation pin is dropped (young end of the LRU unless pinned again).
void kvt_ckpt_commit(kvt_ckpt_t *self, uint32_t entry);

//  The step that was to take a reserved checkpoint failed: the entry is
//  freed.
void kvt_ckpt_abandon(kvt_ckpt_t *self, uint32_t entry);

//  Pins the valid checkpoint of `hash` (a restore or a save reads it): its
//  index, or KVT_CKPT_NONE when there is none.
uint32_t kvt_ckpt_pin(kvt_ckpt_t *self, kvt_hash_t hash);

//  The valid checkpoint of `hash` (pure: no pin, no refresh), or
//  KVT_CKPT_NONE.
uint32_t kvt_ckpt_find(const kvt_ckpt_t *self, kvt_hash_t hash);

//  Pins an entry that is valid or pinned already (a save lease takes it:
//  the entry counts as saved, so its eviction is not evicted_unsaved).
void kvt_ckpt_pin_entry(kvt_ckpt_t *self, uint32_t entry);

//  Drops one pin of an entry; at zero a valid entry goes to the young end.
void kvt_ckpt_unpin(kvt_ckpt_t *self, uint32_t entry);

//  Pins held on an entry (tests and audits).
uint32_t kvt_ckpt_pins(const kvt_ckpt_t *self, uint32_t entry);

//  Checkpoint entries (the pool's capacity).
uint32_t kvt_ckpt_capacity(const kvt_ckpt_t *self);

//  Valid checkpoints that a reservation could evict now.
uint32_t kvt_ckpt_evictable(const kvt_ckpt_t *self);

void kvt_ckpt_stats(const kvt_ckpt_t *self, kvt_ckpt_stats_t *out);

#endif
