/*  kvt_reqtab — the scheduler core's request records (a module of the
    core): the record slots and their by-id map, the waiting, active and
    tails lists, the tokens, the lazy prefix-hash chain (hash_at,
    chunk_key), the block table's release and indexing, and forget. A record
    is kvt_sreq_t: the fields every module reads (id, gen, state, tokens,
    hashes, blocks, computed), below them the fields of the module that
    writes them (each group names its owner), and the sub-records of the
    modules that own them alone (r->lk: kvt_lookups; r->adm: kvt_admit;
    r->load: kvt_loadtrack). r->gen moves only here (kvt_reqtab_add,
    kvt_reqtab_next_gen).

    It calls only the block manager (unref, register), kvt_prefix and base.
    A kvt_sreq_t pointer stays valid until the next kvt_reqtab_add (the
    records may move when they grow). */
#ifndef KVT_REQTAB_H_INCLUDED
#define KVT_REQTAB_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/kvt_ilist.h"
#include "kvt_blockmgr.h"
#include "kvt_ckpt.h"
#include "kvtier/kvt_hash.h"

//  A record's state; only the coordinator moves a request between them.
enum { R_FREE = 0, R_WAITING, R_LOADING, R_RUNNING, R_DONE };

//  Load legs (the load tracker's; in r->load.legs).
#define S_LEG_KV    0x1
#define S_LEG_STATE 0x2

//  Tier lookup of a waiting request (the lookups module's).
enum { S_LK_NONE = 0, S_LK_OUT, S_LK_READY };

//  Sub-records: each is written only by the module that owns its fact
//  (tests/test_layout_sched.c checks it); every module may read them.

//  The tier lookup of a waiting request's next admission (id {id, gen + 1}).
//  Written only by kvt_lookups.
typedef struct {
    uint8_t state;     //  S_LK_*
    bool pinned;       //  the ranks hold its pin: a load or a release must drop it
    uint32_t held;     //  settled: leading chunks every rank holds
    uint64_t deadline; //  out: when it falls back to the HBM hit
    uint64_t at;       //  settled: when (past lookup_max_age_us it is asked again)
    bool seen;         //  settled: an admission attempt has used the answer (only a
                       //  used answer can go stale, so a slow round trip never loops)
    bool timed_out;    //  settled by its timeout: the tier hit is unknown (the ledger)
} kvt_slookup_t;

//  What the admission decision keeps of a waiting request between attempts.
//  Written only by kvt_admit.
typedef struct {
    uint32_t probe_demand; //  fresh blocks the last admission probe needed (0 = none yet)
    bool convoy_waited;    //  counted once in convoy_waits for this wait
} kvt_sadmit_t;

//  The request's load in flight and what a retreat needs (B2): set when
//  the admission hands its load to kvt_loadtrack_start; the pins go when
//  the load settles or retreats, everything when it is orphaned. Written
//  only by kvt_loadtrack (tests/test_layout_sched.c checks it).
typedef struct {
    uint32_t floor;      //  first token of the outstanding load (chunk floor of hbm_hit)
    uint32_t end;        //  resume point B of the outstanding load
    uint8_t legs;        //  legs without a verdict (S_LEG_KV | S_LEG_STATE)
    uint8_t legs_failed; //  legs that reported failed
    uint32_t kv_detail;  //  detail of a failed KV leg
    uint32_t st_detail;  //  detail of a failed state leg
    uint32_t kv_lower;   //  chunks the KV leg read from below the CPU pool
    bool convoy;         //  its KV leg's keys are counted in loading_keys
    uint32_t *pins;      //  what a retreat swaps into the table at pin_lo (owned): the
                         //  shared HBM-hit blocks of [floor, hbm), or fresh spares
                         //  for [hbm, claim) when the claim is above the hit
    uint32_t npins;      //  entries in pins
    uint32_t pin_lo;     //  block index of pins[0] in the table
    uint32_t ck_hit;     //  checkpoint at hbm_hit, pinned for a retreat (hybrid; NONE:
                         //  none, set by kvt_loadtrack_arrive before any admission)
} kvt_sreq_load_t;

typedef struct {
    uint64_t id;          //  request id
    uint32_t gen;         //  generation of the current admission (moved only by kvt_reqtab)
    uint8_t state;        //  R_*
    uint32_t *tokens;     //  prompt + predetermined outputs (nfeed + 1 tokens)
    uint32_t nprompt;     //  prompt tokens
    uint32_t max_new;     //  tokens to generate
    uint32_t nfeed;       //  tokens that go through a forward: nprompt + max_new - 1
    kvt_hash_t *hashes;   //  prefix hash per full block of the fed tokens
    uint32_t nhashed;     //  hashes[0..nhashed) computed
    uint32_t *blocks;     //  block table (ceil (nfeed / bs) entries once admitted)
    uint32_t nblocks;     //  entries in blocks (0 while waiting)
    uint32_t computed;    //  tokens whose KV is valid in the blocks
    uint32_t hbm_hit;     //  HBM hit at admission (tokens)
    uint32_t verify_end;  //  > 0: the next entry asks the runner to verify [0, verify_end)
    uint32_t registered;  //  blocks [0, registered) are shared or indexed
    uint32_t planned_end; //  end token of this request's entry in the last plan (0 = none)
    //  Hybrid requests (UINT32_MAX / 0 for a dense one).
    uint32_t block_hit;   //  ungated HBM block hit at admission (tokens)
    uint32_t sslot;       //  state slot (KVT_CKPT_NONE: none)
    uint32_t ck_restore;  //  checkpoint to restore into the slot before the next forward
    uint32_t restore_at;  //  its boundary (tokens)
    uint32_t ck_take;     //  checkpoint entry the planned entry takes after its forward
    uint32_t take_at;     //  its boundary (tokens)
    uint32_t branch_at;   //  chunk boundary where the prompt left a cached prefix (0 = none)
    uint32_t ck_from;     //  its last checkpoint or resume point: a new checkpoint's span
                          //  (the recompute it saves) counts from here (kvt_ckpt_set_span)
    uint32_t keep_below;  //  released blocks at or above this index go to the low LRU
                          //  (above its deepest HBM checkpoint; UINT32_MAX = none)
    bool restore_planned; //  the last plan listed the restore (applied with its step)
    uint8_t joint_src;    //  kvt_joint_src_t of the admission
    bool stop;            //  the engine finished it early: retires at the next apply
    uint64_t arrival_us;  //  trace arrival time
    kvt_sadmit_t adm;     //  the admission decision's (kvt_admit)
    kvt_slookup_t lk;     //  the tier lookup's (kvt_lookups)
    kvt_sreq_load_t load; //  the load in flight (kvt_loadtrack)
    kvt_ilink_t link;     //  in the waiting or the active list
} kvt_sreq_t;

//  The request lists (a record is in at most one of them).
typedef enum {
    KVT_RQ_WAITING = 0, //  R_WAITING, arrival order (a preempted request goes first)
    KVT_RQ_ACTIVE,      //  R_LOADING and R_RUNNING, admission order
    KVT_RQ_TAILS,       //  finished requests whose unbuilt saves the next plan builds
    KVT_RQ_NLISTS
} kvt_rq_list_t;

typedef struct _kvt_reqtab_t kvt_reqtab_t;

//  A new table for blocks of block_size tokens and chunks of chunk_size,
//  the chain seeded by ns; NULL when out of memory.
kvt_reqtab_t *kvt_reqtab_new(uint32_t block_size, uint32_t chunk_size, kvt_hash_t ns);

//  Frees every record (and what each holds in memory) and the table.
void kvt_reqtab_destroy(kvt_reqtab_t **self_p);

//  A new record for request id (not in the table) at generation gen: its
//  ntokens prompt tokens copied, its max_new - 1 generated tokens
//  predetermined per request (so a replay is reproducible; they never
//  match another request's prompt); everything else zero, the checkpoint
//  fields NONE (r->load's are the load tracker's: kvt_loadtrack_arrive).
//  NULL when out of memory. *slot receives its slot.
kvt_sreq_t *kvt_reqtab_add(kvt_reqtab_t *self, uint64_t id, const uint32_t *tokens,
                           uint32_t ntokens, uint32_t max_new, uint32_t gen, uint32_t *slot);

//  Advances r's generation by one and returns it: the one place r->gen
//  moves after kvt_reqtab_add (an admission commits, or a lookup's id
//  {id, gen + 1} is spent and skipped).
uint32_t kvt_reqtab_next_gen(const kvt_reqtab_t *self, kvt_sreq_t *r);

//  The record of request id, or NULL; *slot receives its slot.
kvt_sreq_t *kvt_reqtab_find(const kvt_reqtab_t *self, uint64_t id, uint32_t *slot);

//  The record in `slot` (R_FREE when unused; slot < kvt_reqtab_cap).
kvt_sreq_t *kvt_reqtab_at(const kvt_reqtab_t *self, uint32_t slot);

//  Record slots allocated (used or free), for walks.
uint32_t kvt_reqtab_cap(const kvt_reqtab_t *self);

//  Records alive (gauge).
uint32_t kvt_reqtab_records(const kvt_reqtab_t *self);

//  Frees the record in `slot` (its block table must be released).
void kvt_reqtab_free(kvt_reqtab_t *self, uint32_t slot);

//  List operations (O(1)).
void kvt_reqtab_append(kvt_reqtab_t *self, kvt_rq_list_t l, uint32_t slot);
void kvt_reqtab_prepend(kvt_reqtab_t *self, kvt_rq_list_t l, uint32_t slot);
void kvt_reqtab_unlink(kvt_reqtab_t *self, kvt_rq_list_t l, uint32_t slot);
uint32_t kvt_reqtab_head(const kvt_reqtab_t *self, kvt_rq_list_t l);
uint32_t kvt_reqtab_next(const kvt_reqtab_t *self, uint32_t slot);

//  Blocks that hold nfeed tokens.
uint32_t kvt_reqtab_blocks_needed(const kvt_reqtab_t *self, uint64_t nfeed);

//  Hash of block b of request r (computed on demand); key of chunk c; the
//  keys of chunks [first, first + n) into out.
kvt_hash_t kvt_reqtab_hash_at(const kvt_reqtab_t *self, kvt_sreq_t *r, uint32_t b);
kvt_hash_t kvt_reqtab_chunk_key(const kvt_reqtab_t *self, kvt_sreq_t *r, uint32_t chunk);
void kvt_reqtab_chunk_keys(const kvt_reqtab_t *self, kvt_sreq_t *r, uint32_t first, uint32_t n,
                           kvt_hash_t *out);

//  Drops every block reference the request's table holds (tail first).
void kvt_reqtab_release_blocks(kvt_reqtab_t *self, kvt_sreq_t *r, kvt_blockmgr_t *bm);

//  Indexes the request's blocks that are full below upto_tokens.
void kvt_reqtab_index_blocks(kvt_reqtab_t *self, kvt_sreq_t *r, uint32_t upto_tokens,
                             kvt_blockmgr_t *bm);

//  Releases a retired record's blocks (tail first) and frees it.
void kvt_reqtab_forget(kvt_reqtab_t *self, uint32_t slot, kvt_blockmgr_t *bm);

//  0, or -1 with a message: the map holds every live record once.
int kvt_reqtab_check(const kvt_reqtab_t *self, char *err, size_t errlen);

#endif
