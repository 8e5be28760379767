/*  kvt_pool.h — the CPU pool: one arena of fixed byte size holding tier
    objects, one LRU over all of them, read pins, write reservations, holders
    and TTLs.

    Object life: `reserved for write` (kvt_pool_reserve) → `ready`
    (kvt_pool_commit) → read-pinned by leases (kvt_pool_acquire,
    kvt_pool_lookup with a lease) → ready → evicted or removed. A reader never
    sees an object that is being written; an object that is being written or
    is pinned is never evicted. A put of a key that is already being written
    is a counted no-op (KVT_STORE_DUPLICATE); a put of a key that is already
    ready refreshes it and is a counted skip (KVT_STORE_SKIPPED).

    Allocation under pressure evicts ready, unpinned objects from the old end
    of the LRU (with evict = KVT_POOL_EVICT_VALUE: lowest
    Greedy-Dual-Size-Frequency priority first), only those whose eviction
    can help make a contiguous extent; when that cannot make room the call
    evicts nothing and fails at once with a reason (ENOSPACE, ETOOBIG,
    EFULL) — it never sleeps or retries.

    Every lease and reservation records its holder and its start time; it
    expires `ttl` after it started (kvt_pool_lease_renew and
    kvt_pool_resv_renew restart it). kvt_pool_reclaim, and allocation under
    pressure, reclaim expired ones: the reclaimed handle's next release /
    commit returns KVT_STORE_ESTALE, so a reader learns that its bytes may
    have been reused and must fail its load, and a late writer's bytes are
    never made ready. A live holder's expired reservation is quarantined,
    not freed: unindexed, its bytes kept until its commit / abort (which
    answer ESTALE and free them) or its holder's reset / removal, so a copy
    still writing into it corrupts nothing. Reclaims are counted, and logged
    once per holder (and once more after each reset).

    The memory may be the caller's (a buffer from the device layer) or an
    anonymous mapping the pool makes (2 MiB aligned, advised onto
    transparent huge pages, never written at creation: its resident size
    grows with the bytes stored). The arena is cut into registration regions
    (region_bytes); no object straddles a boundary. With register_fn, a
    background thread started by kvt_pool_new registers (pins) the regions
    in address order and only registered regions serve allocations
    (docs/store.md, "Pool memory"). Nothing is
    allocated after kvt_pool_new: object table, key index, allocator
    metadata, leases, pins and holders are preallocated.

    Thread-safety: every call may be made from any thread. One mutex guards
    the metadata; copies (kvt_pool_put's memcpy, a caller's gather into a
    reservation, reads through a lease) happen outside it.
*/
#ifndef KVT_POOL_H_INCLUDED
#define KVT_POOL_H_INCLUDED

#include "kvt_store.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct _kvt_pool_t kvt_pool_t;

//  The pool's eviction order (docs/store.md §4).
typedef enum {
    KVT_POOL_EVICT_LRU = 0,   //  least recently used first (the default)
    KVT_POOL_EVICT_VALUE = 1, //  lowest Greedy-Dual-Size-Frequency priority first
} kvt_pool_evict_t;

//  Registers (pins) [ptr, ptr + len) of the arena with a device (a host
//  register through the device runtime); returns 0, or non-zero when
//  refused. Called from the pool's registration thread, one region at a
//  time, in address order.
typedef int(kvt_pool_register_fn)(void *arg, void *ptr, size_t len);

//  Undoes a successful registration (at kvt_pool_destroy).
typedef void(kvt_pool_unregister_fn)(void *arg, void *ptr);

//  Creation settings. kvt_pool_config_defaults fills every field; a zero in a
//  numeric field means "the default".
typedef struct {
    const char *name;          //  name in logs, default "pool"
    void *base;                //  caller memory for the arena, or NULL: the pool allocates it
    size_t capacity_bytes;     //  arena size in bytes (with base: the size of base); required
    size_t align;              //  allocation granularity and alignment, power of 2 in
                               //  [64, 2 MiB], default 4096
    uint32_t max_objects;      //  object table size, default capacity / 64 KiB in [64, 4 Mi]
    uint32_t max_leases;       //  outstanding leases, default 4096
    uint32_t max_pins;         //  object pins held by all leases together, default 65536
    uint32_t max_holders;      //  registered holders, default 64
    uint64_t ttl_ms;           //  lease / reservation TTL in milliseconds, default 60000
    kvt_store_clock_fn *clock; //  time source (ns); NULL: CLOCK_MONOTONIC
    void *clock_arg;           //  argument of clock
    kvt_store_log_fn *log;     //  log sink; NULL: warnings and errors to stderr
    void *log_arg;             //  argument of log
    size_t region_bytes;       //  registration region, a multiple of align (rounded down),
                               //  default 64 GiB; no object straddles a region boundary
    kvt_pool_register_fn *register_fn;     //  pins each region in a background thread; only
                                           //  regions already registered are served. NULL:
                                           //  every region is served at once
    kvt_pool_unregister_fn *unregister_fn; //  undoes a registration at destroy (may be NULL)
    void *register_arg;                    //  argument of both
    bool serve_unpinned;  //  a region whose registration failed is served anyway (unpinned:
                          //  kvt_pool_pinned says no), else never (default)
    int numa_bind;        //  pool-mapped arena: 1 + the NUMA node to bind it to before first
                          //  touch (mbind), 0 = none (default)
    bool numa_interleave; //  pool-mapped arena: interleave it over every node instead
                          //  (several GPUs share the pool)

    kvt_pool_evict_t evict; //  eviction order, default KVT_POOL_EVICT_LRU
    double value_w_kv;      //  VALUE: weight per allocation unit of a KV chunk, default 1
    double value_w_state;   //  VALUE: weight per allocation unit of a state image (and of a
                            //  KV_STATE object), default 4
} kvt_pool_config_t;

//  Counters and gauges. Kind-indexed arrays use kind - 1.
typedef struct {
    uint64_t capacity_bytes;      //  arena size
    uint64_t used_bytes;          //  bytes allocated to objects (rounded up to align)
    uint64_t pinned_bytes;        //  bytes of ready objects with at least one read pin
    uint64_t writing_bytes;       //  bytes of objects reserved for write
    uint64_t objects;             //  ready objects
    uint64_t objects_writing;     //  objects reserved for write
    uint64_t free_extents;        //  free extents in the arena (fragmentation gauge)
    uint64_t largest_free_bytes;  //  largest free extent (fragmentation gauge)
    uint64_t hits[3];             //  acquire / lookup hits, by query kind
    uint64_t misses[3];           //  acquire misses and lookup stops, by query kind
    uint64_t puts;                //  objects committed (made ready)
    uint64_t put_bytes;           //  bytes committed
    uint64_t puts_skipped;        //  puts of an object already ready (refreshed instead)
    uint64_t puts_duplicate;      //  puts of a key another writer was writing
    uint64_t aborts;              //  reservations aborted by their writer
    uint64_t evictions;           //  objects evicted by allocation pressure
    uint64_t evicted_bytes;       //  bytes evicted
    uint64_t removals;            //  objects removed by kvt_pool_remove
    uint64_t alloc_failed;        //  reservations that failed for lack of room (all reasons)
    uint64_t alloc_failed_pinned; //  ... because pinned / written objects hold the room
    uint64_t alloc_failed_toobig; //  ... because the object is larger than the arena
    uint64_t alloc_failed_table;  //  ... because the object table was full of unevictable objects
    uint64_t lookups;             //  kvt_pool_lookup calls
    uint64_t lookup_keys;         //  leading keys found by lookups
    uint64_t touches_refreshed;   //  touches that found the object (REFRESHED)
    uint64_t touches_gone;        //  touches that did not (GONE here)
    uint64_t leases;              //  leases granted
    uint64_t leases_active;       //  leases outstanding now
    uint64_t release_errors;      //  release / commit / abort / renew of a stale or unknown handle
    uint64_t pin_table_full;      //  lookups whose pins were cut short by a full lease/pin table
    uint64_t reclaimed_orphaned;  //  leases + reservations reclaimed after a holder reset/removal
    uint64_t reclaimed_expired;   //  leases + reservations of a live holder reclaimed at TTL
    uint64_t reclaimed_quarantined; //  ... of which reservations whose bytes were quarantined
    uint64_t quarantined_bytes;     //  bytes of quarantined reservations (held until commit/abort)
    uint64_t objects_quarantined;   //  quarantined reservations now
    uint64_t regions;               //  registration regions of the arena
    uint64_t regions_registered;    //  ... registered (pinned) and served
    uint64_t regions_failed;        //  ... whose registration was refused
    uint64_t regions_pending;       //  ... not yet registered (not served)
    uint64_t evict_value;           //  gauge: 1 when the pool evicts by the value rule (VALUE)
    uint64_t evicted_orphan_images; //  (VALUE) of evictions, state images evicted with the
                                    //  chunk of their key (worthless without it)
} kvt_pool_stats_t;

//  The memory a process can really have: the smaller of what RAM offers
//  (MemAvailable, else MemTotal) and the cgroup limit (v2 memory.max, v1
//  memory.limit_in_bytes; "max" is no limit). UINT64_MAX where unknown.
typedef struct {
    uint64_t bytes;          //  the limit: min(ram_bytes, cgroup_bytes)
    char source[160];        //  where `bytes` came from
    uint64_t ram_bytes;      //  MemAvailable (or MemTotal)
    char ram_source[160];    //  its file and key
    uint64_t cgroup_bytes;   //  the cgroup limit
    char cgroup_source[160]; //  its file ("" when unlimited)
} kvt_mem_limit_t;

//  A source of the limit; returns 0, or -1 when no limit is known.
typedef int(kvt_mem_limit_fn)(void *arg, kvt_mem_limit_t *out);

//  Reads the limit under proc_root ("/proc": meminfo, self/cgroup) and
//  cgroup_root (the cgroup mount, "/sys/fs/cgroup").
int kvt_mem_limit_read(const char *proc_root, const char *cgroup_root, kvt_mem_limit_t *out);

//  kvt_mem_limit_read of this machine (a kvt_mem_limit_fn; arg unused).
int kvt_mem_limit_system(void *arg, kvt_mem_limit_t *out);

//  The NUMA node of a PCI device (a GPU's kvt_gpu_pci_bus_id, any case)
//  from sysfs_root ("/sys") bus/pci/devices/<id>/numa_node; -1 when unknown
//  (no such file, or the kernel says -1: one node). A pool's numa_bind is 1
//  + this node.
int kvt_numa_node_of_pci(const char *sysfs_root, const char *bus_id);

//  Fills *cfg with the defaults (capacity_bytes stays 0: required).
void kvt_pool_config_defaults(kvt_pool_config_t *cfg);

//  Validates the configuration and creates the pool. On a bad setting
//  returns NULL and writes a message naming the setting and value to err.
kvt_pool_t *kvt_pool_new(const kvt_pool_config_t *cfg, char *err, size_t errlen);

//  Destroys the pool (NULL-safe, nulls *self_p). Outstanding handles become
//  invalid; caller memory passed as base is not freed.
void kvt_pool_destroy(kvt_pool_t **self_p);

//  Registers a holder; *id receives its id. EFULL when the table is full.
int kvt_pool_holder_add(kvt_pool_t *self, const char *name, kvt_holder_t *id);

//  A holder's lane was reset: its outstanding leases and reservations become
//  orphans, reclaimed when their TTL expires (its quarantined reservations a
//  TTL from now); their renew, commit and lookup extension answer ESTALE,
//  their release and abort still work. The holder stays usable.
int kvt_pool_holder_reset(kvt_pool_t *self, kvt_holder_t holder);

//  A holder died (its process exited): as reset, and the id is retired.
int kvt_pool_holder_remove(kvt_pool_t *self, kvt_holder_t holder);

//  Reserves `size` bytes for (ns, key, kind) on behalf of holder. OK: *resv
//  and *ptr receive a writable region inside the arena; the object is
//  invisible to readers until kvt_pool_commit. SKIPPED: an object matching
//  the query is ready (it was refreshed); DUPLICATE: one is being written.
//  Neither writes *resv. ENOSPACE / ETOOBIG / EFULL: no room, at once.
int kvt_pool_reserve(kvt_pool_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind,
                     size_t size, kvt_holder_t holder, kvt_resv_t *resv, void **ptr);

//  Makes a reservation ready (young end of the LRU) and clears *resv. With
//  lease non-NULL, also read-pins it for the same holder in the same step
//  (so it cannot be evicted in between). ESTALE if the reservation was
//  already committed / aborted, was reclaimed, or its holder was reset or
//  removed since; a quarantined or orphaned reservation is freed by it.
//  EFULL (lease non-NULL, lease table full): the reservation stays.
int kvt_pool_commit(kvt_pool_t *self, kvt_resv_t *resv, kvt_lease_t *lease);

//  Discards a reservation and clears *resv. ESTALE if it was already
//  committed / aborted or reclaimed (a quarantined one is freed by it).
int kvt_pool_abort(kvt_pool_t *self, kvt_resv_t *resv);

//  Convenience: reserve, copy `size` bytes from src (outside the lock),
//  commit. Returns as reserve (OK, SKIPPED, DUPLICATE or an error).
int kvt_pool_put(kvt_pool_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind,
                 const void *src, size_t size);

//  Read-pins the object matching (ns, key, kind) for holder and refreshes
//  it. OK: *lease and *view are filled; ENOTFOUND on a miss.
int kvt_pool_acquire(kvt_pool_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind,
                     kvt_holder_t holder, kvt_lease_t *lease, kvt_obj_view_t *view);

//  Releases a lease (all its pins) and clears *lease. A second release, a
//  release of an unknown id or of a lease the TTL reclaimed returns ESTALE
//  and is counted (release_errors); nothing is freed twice.
int kvt_pool_release(kvt_pool_t *self, kvt_lease_t *lease);

//  Restarts a lease's TTL. ESTALE as release, and for a lease of a holder
//  that was reset or removed since (an orphan).
int kvt_pool_lease_renew(kvt_pool_t *self, kvt_lease_t lease);

//  Restarts a write reservation's TTL (a copy into it is still running).
//  ESTALE if it is unknown, already committed / aborted, was reclaimed at
//  its TTL, or its holder was reset or removed since; counted in
//  release_errors.
int kvt_pool_resv_renew(kvt_pool_t *self, kvt_resv_t resv);

//  Counts the leading keys[0..n) with a ready object matching kind and
//  refreshes them deepest first, so the prefix ends younger than its suffix.
//  With lease non-NULL, also read-pins them under one lease for holder
//  (lease->id 0: a new lease; otherwise pins are added to that lease, which
//  must be the holder's — EINVAL — and not an orphan — ESTALE). Returns the
//  count (≥ 0) or a negative error. If the lease or pin table fills, the
//  count stops at the last pinned key.
int kvt_pool_lookup(kvt_pool_t *self, uint64_t ns, const kvt_hash_t *keys, size_t n,
                    kvt_obj_kind_t kind, kvt_holder_t holder, kvt_lease_t *lease);

//  Pure count of leading keys with a ready object matching kind: no refresh,
//  no pin, no counters.
size_t kvt_pool_count(kvt_pool_t *self, uint64_t ns, const kvt_hash_t *keys, size_t n,
                      kvt_obj_kind_t kind);

//  REFRESHED (ready here, moved to the young end), PRESENT (being written
//  here, not yet readable) or GONE.
kvt_touch_t kvt_pool_touch(kvt_pool_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind);

//  True if a ready object matches (no refresh, no counters).
bool kvt_pool_contains(kvt_pool_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind);

//  Removes the object with exactly this name (ns, key, kind). Returns OK,
//  ENOTFOUND, or EBUSY if it is pinned or being written (nothing removed).
int kvt_pool_remove(kvt_pool_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind);

//  Reclaims every lease and reservation whose TTL has expired (orphaned or
//  not); returns how many. Cheap when nothing expired.
size_t kvt_pool_reclaim(kvt_pool_t *self);

//  Called under the pool lock for every object evicted by allocation
//  pressure, before its bytes are reused. Must not call into the pool.
typedef void(kvt_pool_evict_fn)(void *arg, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind,
                                const void *bytes, size_t size);

//  Installs (or with fn NULL removes) the eviction hook.
void kvt_pool_set_evict_hook(kvt_pool_t *self, kvt_pool_evict_fn *fn, void *arg);

//  Snapshot of the counters and gauges.
void kvt_pool_stats(kvt_pool_t *self, kvt_pool_stats_t *stats);

//  Waits until the first n regions (all: n >= regions) are settled
//  (registered or refused); returns how many regions are registered.
uint32_t kvt_pool_regions_wait(kvt_pool_t *self, uint32_t n);

//  True when [ptr, ptr + len) lies inside one registered region of the
//  arena (O(1): regions have one size).
bool kvt_pool_pinned(kvt_pool_t *self, const void *ptr, size_t len);

//  The arena (for registering it with a device) and its size.
void *kvt_pool_base(kvt_pool_t *self);
size_t kvt_pool_capacity(kvt_pool_t *self);

#ifdef __cplusplus
}
#endif

#endif
