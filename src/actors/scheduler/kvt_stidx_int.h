/*  kvt_stidx_int.h — the state-offload index's records and table, shared by
    kvt_stidx.c (the index and the load lifecycle) and kvt_stidx_check.c
    (the key-set audit, stats and counters). Private to this folder. */
#pragma once

#include "base/kvt_hmap.h"
#include "base/kvt_ilist.h"
#include "kvt_stidx.h"

enum { E_FREE = 0, E_ARMED, E_OUT, E_ORPHAN };

//  One indexed image.
typedef struct {
    kvt_hash_t hash;       //  prefix hash of the image
    uint64_t verified_us;  //  last evidence that every rank holds it
    uint64_t touch_us;     //  last touch sent (the throttle)
    uint64_t hold_from_us; //  first hold of the current hold
    uint64_t fresh_round;  //  touch rounds <= this are older than the newest evidence
    bool verified;         //  verified_us is set
    bool touched;          //  touch_us is set
    bool holding;          //  an admission is held on it (hold_from_us is set)
    bool hold_spent;       //  a hold expired: admit without waiting until new evidence
    bool indexed;          //  in the LRU and under its hash (else on the free stack)
    kvt_ilink_t link;      //  LRU (used) or free stack
} kvt_stidx_image_t;

//  One state load.
typedef struct {
    kvt_opid_t op;    //  the admission that owes the report
    kvt_hash_t hash;  //  the image it loads
    uint32_t slot;    //  destination state slot (reserved while the entry lives)
    uint8_t state;    //  E_*
    uint64_t t_us;    //  request time; orphan time once orphaned
    kvt_ilink_t link; //  armed list, orphan list (orphan order) or free list
} kvt_stidx_lrec_t;

//  Phases of a key-set pass, in order.
enum { C_LOADS = 0, C_BY_OP, C_BY_SLOT, C_BY_REQ, C_IMAGES, C_DONE };

//  Where a key-set pass stands: the stats reads' pass advances a slice per
//  read; kvt_stidx_check runs a whole pass on a cursor of its own.
typedef struct {
    uint8_t phase;    //  C_*
    uint32_t at;      //  next record index or map slot of the phase
    uint64_t epoch;   //  the phase's table epoch when the phase began
    uint64_t live;    //  C_LOADS: live records seen
    uint64_t armed;   //  C_LOADS: armed records seen
    uint64_t orphans; //  C_LOADS: orphaned records seen
    uint32_t images;  //  C_IMAGES: indexed records seen
} kvt_stidx_cursor_t;

struct _kvt_stidx_t {
    kvt_stidx_cfg_t cfg;       //  configuration (defaults applied)
    kvt_stidx_image_t *images; //  image records (hash_cap)
    kvt_ilist_t lru;           //  indexed images, old → young
    kvt_ilist_t img_free;      //  unused image records
    kvt_hmap_t *by_hash;       //  hash → image record
    uint64_t round;            //  last touch round handed out
    kvt_stidx_lrec_t *loads;   //  load records
    uint32_t loads_cap;        //  records allocated
    kvt_ilist_t load_free;     //  unused load records
    kvt_ilist_t armed;         //  E_ARMED, request order
    kvt_ilist_t orphans;       //  E_ORPHAN, orphan order (oldest at the head)
    kvt_hmap_t *by_op;         //  {gen, req} → load record
    kvt_hmap_t *by_req;        //  req → load record of its latest admission
    kvt_hmap_t *by_slot;       //  slot → load record holding it
    uint64_t slotless;         //  live loads with no slot (KVT_STIDX_NO_SLOT)
    uint64_t load_epoch;       //  bumped when a load record changes state
    uint64_t img_epoch;        //  bumped when an image record is indexed or freed
    kvt_stidx_cursor_t cur;    //  the stats reads' key-set pass
    bool warned_expiry;        //  the first expired hold was warned
    bool warned_invariant;     //  the first invariant violation was warned
    kvt_stidx_stats_t stats;   //  counters
};

#define S_IMG_LINKS(self)  KVT_ILINKS((self)->images, link)
#define S_LOAD_LINKS(self) KVT_ILINKS((self)->loads, link)

static inline void kvt_stidx_log(kvt_stidx_t *self, const char *line)
{
    if (self->cfg.log)
        self->cfg.log(self->cfg.log_arg, line);
}

static inline kvt_hash_t kvt_stidx_opkey(kvt_opid_t op)
{
    kvt_hash_t k = {op.gen, op.req};
    return k;
}
