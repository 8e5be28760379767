/*  kvt_savetrack_int.h — the save tracker's records and table, shared by
    kvt_savetrack.c (the tracker) and kvt_savetrack_check.c (the frontier and
    leases walks, the stats, the audit and the counters). Private to this
    folder. */
#pragma once

#include <xxhash.h>

#include "base/kvt_hmap.h"
#include "base/kvt_ilist.h"
#include "kvt_savetrack.h"

//  One tracked request.
typedef struct {
    kvt_opid_t op;         //  current admission
    bool live;             //  record in use
    uint32_t frontier;     //  [0, frontier) in the tier or being saved
    uint32_t forwarded;    //  tokens the forward wrote
    uint32_t attempt;      //  attempt number of the saves built now
    uint32_t retries_left; //  re-emits left to this admission
    uint32_t inflight;     //  built saves with no store verdict (any admission)
    uint32_t floor_hbm;    //  save floor: the HBM hit when the load was decided
    uint32_t floor_hit;    //  save floor: the tier hit it loaded up to
    bool floor_set;        //  the floor was recorded for this admission
    bool waiting;          //  a failed save waits for quiescence before its re-emit
    bool stopped;          //  a failure with no re-emit left: save nothing more
    bool retired;          //  finished or torn down
    bool has_tail;         //  a finished request's unbuilt tail holds a lease
    uint32_t tail_start;   //  token of tail_blocks[0] (chunk grid)
    uint32_t tail_end;     //  end of the tail (chunk grid)
    uint32_t *tail_blocks; //  leased blocks of [tail_start, tail_end)
    uint32_t tail_cap;     //  allocated entries of tail_blocks
    int32_t tail_slot;     //  leased state slot of the tail (-1: none)
    uint32_t last_built;   //  save record built last for it (S_NONE: none or settled)
    kvt_ilink_t link;      //  tails list (has_tail) or free list
} kvt_savetrack_rec_t;

//  One built chunk save.
typedef struct {
    kvt_opid_t op;      //  admission that built it
    kvt_hash_t key;     //  chunk key
    uint32_t attempt;   //  attempt it was sent with
    uint32_t rec;       //  its request's record
    uint32_t start;     //  first token of the chunk
    int32_t slot;       //  leased state slot (-1: none)
    bool live;          //  in use
    bool leased;        //  its lease is still held
    uint32_t spec_prev; //  save before it in its SaveSpec (S_NONE: first)
    uint32_t spec_next; //  save after it in its SaveSpec (S_NONE: last)
    kvt_hash_t spec_id; //  at the spec's last save in flight: the spec's report id
    uint32_t skippers;  //  first request that skipped its key for it (S_NONE: none)
    bool draining;      //  past its deadline, settled failed: only its lease is left
    uint64_t due_us;    //  in flight: its deadline; draining: the end of its drain
    kvt_ilink_t link;   //  deadline list (in flight), drain list (draining) or free list
} kvt_savetrack_save_t;

//  A request that passed over a chunk because this save of its key was in
//  flight: if the save fails, the skipper's frontier goes back to the chunk
//  (else every chunk it saved above would sit behind a hole).
typedef struct {
    kvt_opid_t op;  //  the skipper's admission
    uint32_t rec;   //  its record
    uint32_t start; //  first token of the chunk it skipped
    uint32_t next;  //  next skipper of the same save (S_NONE: last); free list link
} kvt_savetrack_skip_t;

#define S_NONE UINT32_MAX

struct _kvt_savetrack_t {
    kvt_savetrack_cfg_t cfg;     //  configuration
    uint32_t bpc;                //  blocks per chunk
    kvt_savetrack_rec_t *recs;   //  request records
    uint32_t recs_cap;           //  allocated
    kvt_ilist_t rec_free;        //  unused records
    kvt_ilist_t tails;           //  records holding a tail lease
    kvt_hmap_t *by_req;          //  req → record
    kvt_savetrack_save_t *saves; //  save records
    uint32_t *save_blocks;       //  bpc leased blocks per save record
    uint32_t saves_cap;          //  allocated save records
    uint32_t save_blocks_cap;    //  allocated entries of save_blocks
    kvt_ilist_t save_free;       //  unused save records
    kvt_ilist_t deadlines;       //  saves in flight, in deadline order (built order)
    kvt_ilist_t drains;          //  expired saves holding their lease, in drain-end order
    uint64_t now_us;             //  the owner's clock (never goes back): builds are due from it
    kvt_hmap_t *by_id;           //  hash (op, key, attempt) → save record
    kvt_hmap_t *by_key;          //  chunk key → save record in flight
    kvt_hmap_t *by_spec; //  SaveSpec id (op, last chunk key, attempt) → its last save in flight
    kvt_savetrack_skip_t *skips; //  skip records
    uint32_t skips_cap;          //  allocated
    uint32_t skip_free;          //  first unused skip record (S_NONE: none)
    kvt_savetrack_stats_t stats; //  counters
};

#define S_REC_LINKS(self)  KVT_ILINKS((self)->recs, link)
#define S_SAVE_LINKS(self) KVT_ILINKS((self)->saves, link)

static inline kvt_hash_t kvt_savetrack_save_id(kvt_opid_t op, kvt_hash_t key, uint32_t attempt)
{
    uint64_t in[5] = {op.req, op.gen, key.hi, key.lo, attempt};
    XXH128_hash_t h = XXH3_128bits(in, sizeof in);
    kvt_hash_t out = {h.high64, h.low64};
    return out;
}
static inline kvt_savetrack_rec_t *kvt_savetrack_rec(const kvt_savetrack_t *self, uint64_t req)
{
    uint32_t i;
    if (!kvt_hmap_get(self->by_req, kvt_hmap_key64(req), &i))
        return NULL;
    return &self->recs[i];
}
