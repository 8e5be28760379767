/*  kvt_store.h — types shared by the tier store classes: the CPU pool
    (kvt_pool.h), the disk backend (kvt_disk.h) and the storage manager that
    composes them (kvt_storage.h).

    An object is named by (namespace, key, kind). The key is the project's
    128-bit prefix hash (kvt_hash_t); the namespace is a 64-bit id of
    everything that changes stored bytes. A KV chunk and the state image at its
    end share the same prefix hash, so the kind is part of the name. A query
    for one kind also accepts the combined kind:

        query KV        matches KV, else KV_STATE
        query STATE     matches STATE, else KV_STATE
        query KV_STATE  matches KV_STATE only

    A KV_STATE object is the chunk's KV bytes followed by the image; the
    caller knows the chunk's byte size from its geometry and finds the image
    after it.

    Result codes: 0 success, small positive values are successful outcomes
    that did nothing (skipped, duplicate), negative values are failures.
    docs/store.md describes the design as built.
*/
#ifndef KVT_STORE_H_INCLUDED
#define KVT_STORE_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvt_hash.h"

#ifdef __cplusplus
extern "C" {
#endif

//  What an object holds.
typedef enum {
    KVT_OBJ_KV = 1,       //  one chunk of attention KV
    KVT_OBJ_STATE = 2,    //  a state image (a checkpoint's bytes)
    KVT_OBJ_KV_STATE = 3, //  a KV chunk followed by the image of the checkpoint at its end
} kvt_obj_kind_t;

#define KVT_OBJ_KIND_COUNT 3 //  kinds, numbered 1..3

//  Answer to a touch.
typedef enum {
    KVT_TOUCH_GONE = 0,      //  in no backend of this rank
    KVT_TOUCH_PRESENT = 1,   //  only on a lower backend (or still being written): not refreshed
    KVT_TOUCH_REFRESHED = 2, //  in the CPU pool, moved to the young end of its LRU
} kvt_touch_t;

//  Result codes of every store call.
typedef enum {
    KVT_STORE_OK = 0,         //  done
    KVT_STORE_SKIPPED = 1,    //  put of an object already ready here: refreshed, nothing written
    KVT_STORE_DUPLICATE = 2,  //  put of a key another writer is writing: nothing written
    KVT_STORE_ENOTFOUND = -1, //  no such object (a miss)
    KVT_STORE_ENOSPACE = -2,  //  nothing evictable can make room: failed at once, never waits
    KVT_STORE_ETOOBIG = -3,   //  larger than the backend's capacity
    KVT_STORE_EFULL = -4,     //  a preallocated table (objects, leases, pins, holders) is full
    KVT_STORE_ESTALE = -5,    //  handle unknown, already released/committed, or reclaimed (TTL)
    KVT_STORE_EINVAL = -6,    //  a bad argument (kind, size, NULL)
    KVT_STORE_EHOLDER = -7,   //  holder unknown or removed
    KVT_STORE_EIO = -8,       //  a disk read or write failed
    KVT_STORE_ECORRUPT = -9,  //  a disk file failed validation (counted, deleted)
    KVT_STORE_EBUSY = -10,    //  busy: disk write queue full, or object pinned / being written
    KVT_STORE_ENOMEM = -11,   //  a buffer could not be allocated
} kvt_store_rc_t;

//  Clock: monotonic time in nanoseconds (the actor system's clock; tests pass
//  a manual one). The store reads time only through it.
typedef uint64_t(kvt_store_clock_fn)(void *arg);

//  Log sink. Levels as kvt_ctx_log: 0 error, 1 warning, 2 info, 3 debug.
//  `line` has no trailing newline. Called without any store lock held.
typedef void(kvt_store_log_fn)(void *arg, int level, const char *line);

//  A holder: whoever owns pins, leases and reservations (a rank's lane, the
//  disk writer). Registered with a pool; 0 is never a valid holder.
typedef uint32_t kvt_holder_t;

//  A read lease (read pins on one or more objects). Released exactly once.
//  The id carries a generation, so a second release or a release after the
//  TTL reclaimed it is reported (KVT_STORE_ESTALE), never a double free.
typedef struct {
    uint64_t id; //  0 = no lease
} kvt_lease_t;

//  A write reservation: an object in the `reserved for write` state.
//  Committed or aborted exactly once.
typedef struct {
    uint64_t id; //  0 = no reservation
} kvt_resv_t;

//  Where a read landed.
typedef enum {
    KVT_TIER_POOL = 0,   //  the CPU pool
    KVT_TIER_DISK = 1,   //  the disk backend (promoted into the pool by the read)
    KVT_TIER_REMOTE = 2, //  the remote tier (promoted into the pool by the read)
} kvt_tier_t;

//  A readable object under a lease.
typedef struct {
    const void *ptr;     //  the object's bytes inside the pool arena
    size_t size;         //  its length in bytes
    kvt_obj_kind_t kind; //  its kind (may be KV_STATE for a KV or STATE query)
    kvt_tier_t tier;     //  where it was found (storage get; the pool reports POOL)
} kvt_obj_view_t;

//  Short text for a result code ("no space", ...); never NULL.
const char *kvt_store_strerror(int rc);

//  Name of a kind ("kv", "state", "kv_state"), "?" if out of range.
const char *kvt_obj_kind_name(kvt_obj_kind_t kind);

#ifdef __cplusplus
}
#endif

#endif
