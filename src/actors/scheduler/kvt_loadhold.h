/*  kvt_loadhold — the load tracker's holdings (a leaf of the scheduler
    core): one per dispatched load, from the admission's reservation to
    the load's settlement, found by the load's op id. A live load's holding
    is on the deadline list, in deadline order (or, settled failed while a
    rank may still write its destination, on the drain list), and the chunk keys it
    loads are counted (convoys); an orphan's keeps the
    blocks and the state slot the load's legs still write (the load
    tracker fills and releases them: this table only stores them).

    Reserving takes everything an orphan may need (the slot, its by-op
    entry, room for every block the KV leg writes), so turning a live
    load's holding into an orphan's never allocates. Deadlines are appended
    in order (the caller's deadlines never decrease), so the earliest is
    the list's head: every call is O(1) but check. Calls only base. */
#ifndef KVT_LOADHOLD_H_INCLUDED
#define KVT_LOADHOLD_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvtier/kvt_msg.h"

#define KVT_HOLD_NONE UINT32_MAX

//  A holding's use.
enum {
    KVT_HOLD_FREE = 0, //  unused
    KVT_HOLD_RESERVED, //  reserved by an admission that has not committed its load yet
    KVT_HOLD_LIVE,     //  a load in flight of a LOADING request (on the deadline list)
    KVT_HOLD_ORPHAN,   //  an orphan's: holds the blocks and slot its legs still write
};

//  The two deadline lists a live holding is on: a load in flight until
//  its deadline, and a load that settled failed while a rank may still
//  write its destination (a TIMEOUT), held until its drain bound.
enum { KVT_HOLD_DEADLINE = 0, KVT_HOLD_DRAIN = 1, KVT_HOLD_LISTS = 2 };

typedef struct {
    kvt_opid_t op;        //  the admission's load
    uint32_t *blocks;     //  block references held for the load's KV leg (an orphan's)
    uint32_t blk_cap;     //  room in blocks, allocated at reservation
    uint32_t nblocks;     //  entries in blocks
    uint32_t sslot;       //  state slot the state leg writes (UINT32_MAX: none)
    kvt_hash_t st_key;    //  the state leg's key (the prefix hash at B)
    uint64_t deadline_us; //  a live load still out at this time settles failed (TIMEOUT)
    uint32_t dl_prev;     //  deadline list: earlier live load (KVT_HOLD_NONE: head)
    uint32_t dl_next;     //  deadline list: later live load (KVT_HOLD_NONE: tail)
    uint8_t legs;         //  legs without a verdict (orphan), or still written (draining)
    uint8_t legs_failed;  //  legs that reported failed
    bool st_miss;         //  the state leg failed with a real miss (I3)
    bool state;           //  owned by the state index (a state leg), else the KV-only one
    uint8_t use;          //  KVT_HOLD_*
    uint8_t list;         //  a live holding's list: KVT_HOLD_DEADLINE or KVT_HOLD_DRAIN
} kvt_hold_t;

typedef struct _kvt_loadhold_t kvt_loadhold_t;

//  NULL when out of memory.
kvt_loadhold_t *kvt_loadhold_new(void);
void kvt_loadhold_destroy(kvt_loadhold_t **self_p);

//  Reserves a holding for load op with room for nblocks block ids: 0, or
//  -1 (out of memory, or op already held).
int kvt_loadhold_reserve(kvt_loadhold_t *self, kvt_opid_t op, uint32_t nblocks);

//  The holding of op (KVT_HOLD_NONE: none) and holding i (valid until the
//  next reserve).
uint32_t kvt_loadhold_find(const kvt_loadhold_t *self, kvt_opid_t op);
kvt_hold_t *kvt_loadhold_at(const kvt_loadhold_t *self, uint32_t i);

//  Reserved holding i becomes live, due at deadline_us (>= every deadline
//  on the list): appended to the deadline list.
void kvt_loadhold_arm(kvt_loadhold_t *self, uint32_t i, uint64_t deadline_us);

//  Live holding i moves to the drain list, due at until_us (>= every
//  deadline on that list), remembering the legs whose destination a rank
//  may still write; whether live holding i is draining.
void kvt_loadhold_drain(kvt_loadhold_t *self, uint32_t i, uint8_t legs, uint64_t until_us);
bool kvt_loadhold_draining(const kvt_loadhold_t *self, uint32_t i);

//  Live holding i leaves its list (it settles, or becomes an orphan's: the
//  caller sets its use).
void kvt_loadhold_disarm(kvt_loadhold_t *self, uint32_t i);

//  The live holding with the earliest deadline on list (KVT_HOLD_NONE: none).
uint32_t kvt_loadhold_first(const kvt_loadhold_t *self, uint8_t list);

//  Room for n block ids in holding i (allocates only past the reserved
//  room): 0, or -1.
int kvt_loadhold_room(kvt_loadhold_t *self, uint32_t i, uint32_t n);

//  Holding i, off the deadline list, goes back (its by-op entry and block
//  room with it).
void kvt_loadhold_free(kvt_loadhold_t *self, uint32_t i);

//  Timed-out loads: op timed out (remembered among the last
//  KVT_LOADHOLD_LATE_IDS), and whether op is one (its late verdicts are
//  dropped).
#define KVT_LOADHOLD_LATE_IDS 1024u
void kvt_loadhold_note_late(kvt_loadhold_t *self, kvt_opid_t op);
bool kvt_loadhold_is_late(const kvt_loadhold_t *self, kvt_opid_t op);

//  Chunk keys covered by loads in flight (convoys): counts key once more
//  (delta > 0) or once less; whether any load covers key; keys counted.
void kvt_loadhold_key(kvt_loadhold_t *self, kvt_hash_t key, int delta);
bool kvt_loadhold_key_busy(const kvt_loadhold_t *self, kvt_hash_t key);
uint32_t kvt_loadhold_keys(const kvt_loadhold_t *self);

//  Holdings allocated (for walks with kvt_loadhold_at) and live ones.
uint32_t kvt_loadhold_cap(const kvt_loadhold_t *self);
uint32_t kvt_loadhold_live(const kvt_loadhold_t *self);

//  0, or -1 with a message: the deadline list holds exactly the live
//  holdings in deadline order, every holding in use is found by its op,
//  used + free = allocated.
int kvt_loadhold_check(const kvt_loadhold_t *self, char *err, size_t errlen);

#endif
