/*  kvt_storage.h — the storage manager: a rank's tier, the CPU pool with an
    optional disk backend below it.

    * put / commit: into the pool; to disk per the write policy (ALWAYS:
      write-through after the commit, the disk writer holding a read lease on
      the pool object until its file is written; ON_EVICT: the bytes of an
      object evicted from the pool are copied and written to disk if the disk
      does not hold it; NEVER). A put of an object whose touch would be
      REFRESHED is skipped and counted; one that is only on disk (PRESENT) is
      stored again into the pool.
    * get: pool first; a disk hit is read into a pool reservation, verified
      and committed (promotion), and returned under a lease like a pool hit.
      The disk file is pinned meanwhile, so the promotion's own evictions
      (and their write-back) never delete it.
    * lookup: leading keys present in any backend (pool first), refreshed
      deepest first in each backend; with a lease, the pool-resident ones are
      pinned (disk files are not pinned).
    * touch: REFRESHED (in the pool, refreshed) / PRESENT (only on disk, or
      still being written, or only in the remote tier) / GONE.
    * remote tier (optional, kvt_remote.h): below the disk. Every commit is
      also written to it (write-through, synchronous, a failure dropped and
      counted); a get that misses the pool and the disk reads it, verifies
      it and promotes it into the pool; a lookup asks it, in one pipelined
      round, only for the keys after the prefix the local backends hold.

    Holders are the pool's: register them with kvt_pool_holder_add on
    kvt_storage_pool (). Leases from storage calls are pool leases: release
    them with kvt_storage_release or kvt_pool_release.

    Disk I/O: cfg.disk.io_mode THREADS (default) writes on the disk's I/O
    threads; INLINE runs every write a call queues (write-through after a
    commit, write-back of what a reservation evicted) to completion on the
    calling thread before that call returns — same results, same counters,
    and a disk tier that does not depend on thread timing (the replay
    selects it under the sim driver).

    Thread-safety: as the pool and the disk backend; every call may be made
    from any thread. Lock order is pool, then disk; I/O threads never hold the
    disk lock while calling into the pool.
*/
#ifndef KVT_STORAGE_H_INCLUDED
#define KVT_STORAGE_H_INCLUDED

#include "kvt_counter.h"
#include "kvt_disk.h"
#include "kvt_pool.h"
#include "kvt_remote.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct _kvt_storage_t kvt_storage_t;

//  When the disk gets a copy.
typedef enum {
    KVT_WRITE_ALWAYS = 0,   //  write-through: every commit is also queued to disk
    KVT_WRITE_ON_EVICT = 1, //  write-back: an object evicted from the pool goes to disk
    KVT_WRITE_NEVER = 2,    //  the disk is only read (e.g. filled by an earlier run)
} kvt_write_policy_t;

//  Creation settings; kvt_storage_config_defaults fills every field.
typedef struct {
    kvt_pool_config_t pool;          //  the CPU pool (capacity_bytes required)
    bool disk_enabled;               //  whether there is a disk backend, default false
    kvt_disk_config_t disk;          //  the disk backend (dir, capacity_bytes required if enabled)
    kvt_write_policy_t write_policy; //  when the disk gets a copy, default ALWAYS
    bool remote_enabled;             //  whether there is a remote tier, default false
    kvt_remote_config_t remote;      //  the remote tier (seeds required if enabled)
} kvt_storage_config_t;

//  Per-backend counters plus the manager's own.
typedef struct {
    kvt_pool_stats_t pool;         //  the CPU pool
    kvt_disk_stats_t disk;         //  the disk backend (zero without one)
    bool disk_enabled;             //  whether `disk` is meaningful
    uint64_t gets;                 //  kvt_storage_get calls
    uint64_t get_hits_pool;        //  gets served by the pool
    uint64_t get_hits_disk;        //  gets served by the disk (promoted)
    uint64_t get_misses;           //  gets found nowhere (or only in a corrupt file)
    uint64_t promotions;           //  disk hits committed into the pool
    uint64_t promotion_failed;     //  disk hits the pool had no room for / that failed to read
    uint64_t puts;                 //  put / commit calls that stored into the pool
    uint64_t puts_skipped;         //  puts whose object was REFRESHED in the pool
    uint64_t puts_restored;        //  puts that stored an object that was only on disk
    uint64_t writes_queued;        //  disk writes queued (write-through or write-back)
    uint64_t writes_not_queued;    //  disk writes refused (queue full, no room) — not on disk
    uint64_t writeback_skipped;    //  evicted objects already on disk (ON_EVICT)
    uint64_t touches_refreshed;    //  touches answered REFRESHED
    uint64_t touches_present;      //  touches answered PRESENT
    uint64_t touches_gone;         //  touches answered GONE
    uint64_t lookups;              //  lookups
    uint64_t lookup_keys_pool;     //  leading keys found in the pool
    uint64_t lookup_keys_disk;     //  leading keys found only on disk
    kvt_remote_stats_t remote;     //  the remote tier (zero without one)
    bool remote_enabled;           //  whether `remote` is meaningful
    uint64_t get_hits_remote;      //  gets served by the remote tier (promoted)
    uint64_t lookup_keys_remote;   //  leading keys found only in the remote tier
    uint64_t remote_writes;        //  commits also written to the remote tier
    uint64_t remote_writes_failed; //  of those, dropped (counted, never retried)
    uint64_t touches_remote;       //  touches answered PRESENT by the remote tier
} kvt_storage_stats_t;

//  Fills *cfg with the defaults of every part.
void kvt_storage_config_defaults(kvt_storage_config_t *cfg);

//  Validates and creates the pool and (if enabled) the disk backend, which
//  rescans its directory. NULL with a message naming the setting in err.
kvt_storage_t *kvt_storage_new(const kvt_storage_config_t *cfg, char *err, size_t errlen);

//  Flushes queued disk writes, destroys both backends (NULL-safe).
void kvt_storage_destroy(kvt_storage_t **self_p);

//  The backends (borrowed): holders, stats, pure queries. The disk is NULL
//  when disabled.
kvt_pool_t *kvt_storage_pool(kvt_storage_t *self);
kvt_disk_t *kvt_storage_disk(kvt_storage_t *self);

//  Zero-copy put: as kvt_pool_reserve (SKIPPED when the pool already holds
//  it; an object only on disk is reserved again).
int kvt_storage_reserve(kvt_storage_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind,
                        size_t size, kvt_holder_t holder, kvt_resv_t *resv, void **ptr);

//  Commits into the pool, then applies the write policy. lease as
//  kvt_pool_commit.
int kvt_storage_commit(kvt_storage_t *self, kvt_resv_t *resv, kvt_lease_t *lease);

//  Discards a reservation.
int kvt_storage_abort(kvt_storage_t *self, kvt_resv_t *resv);

//  Restarts a reservation's TTL: as kvt_pool_resv_renew.
int kvt_storage_resv_renew(kvt_storage_t *self, kvt_resv_t resv);

//  Copying put: reserve, copy, commit.
int kvt_storage_put(kvt_storage_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind,
                    const void *src, size_t size);

//  Read-pinned object for holder: pool hit, or a disk hit promoted into the
//  pool (view->tier says which). ENOTFOUND on a miss (a corrupt file is a
//  miss), ENOSPACE if a disk hit found no room in the pool, EIO.
int kvt_storage_get(kvt_storage_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind,
                    kvt_holder_t holder, kvt_lease_t *lease, kvt_obj_view_t *view);

//  Releases a lease (exactly once; a second release is ESTALE, counted).
int kvt_storage_release(kvt_storage_t *self, kvt_lease_t *lease);

//  Leading keys present in any backend; refreshes deepest first; with lease
//  non-NULL pins the pool-resident ones for holder. Returns the count or a
//  negative error; on an error a lease this call created is released (and
//  lease->id is 0). *on_disk (may be NULL) receives how many of the counted
//  keys were only on disk.
int kvt_storage_lookup(kvt_storage_t *self, uint64_t ns, const kvt_hash_t *keys, size_t n,
                       kvt_obj_kind_t kind, kvt_holder_t holder, kvt_lease_t *lease,
                       size_t *on_disk);

//  REFRESHED / PRESENT / GONE as described above.
kvt_touch_t kvt_storage_touch(kvt_storage_t *self, uint64_t ns, kvt_hash_t key,
                              kvt_obj_kind_t kind);

//  Reclaims expired leases and reservations in the pool; returns how many.
size_t kvt_storage_reclaim(kvt_storage_t *self);

//  Waits until every queued and in-flight disk write has finished and
//  released the pool lease it held (tests, benchmarks, shutdown: call it
//  before counting leases). Under disk.io_mode INLINE every write already
//  finished inside the storage call that queued it.
void kvt_storage_flush(kvt_storage_t *self);

//  Snapshot of every counter.
void kvt_storage_stats(kvt_storage_t *self, kvt_storage_stats_t *stats);

//  Writes up to cap named counters ("pool.used_bytes", "disk.corrupt", ...)
//  for a Stats message; returns how many there are in all (may exceed cap).
size_t kvt_storage_counters(kvt_storage_t *self, kvt_counter_t *out, size_t cap);

#ifdef __cplusplus
}
#endif

#endif
