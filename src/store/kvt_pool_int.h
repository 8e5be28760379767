/*  kvt_pool_int.h — the CPU pool's state, shared by kvt_pool.c (creation,
    objects, writes), kvt_pool_evict.c (allocation with eviction),
    kvt_pool_read.c (reads, lookup, touch), kvt_pool_lease.c (holders,
    leases, pins, reclaim) and kvt_pool_value.c (the VALUE order's heap).
    Private to src/store. Every function here expects the pool lock held
    unless it says otherwise. */
#ifndef KVT_POOL_INT_H_INCLUDED
#define KVT_POOL_INT_H_INCLUDED

#include <pthread.h>

#include "base/kvt_ilist.h"
#include "kvt_extent.h"
#include "kvt_keymap.h"
#include "kvtier/kvt_pool.h"

#define KVT_POOL_NAME_MAX  32  //  bytes of a pool or holder name, NUL included
#define KVT_POOL_LOG_LINES 8   //  log lines queued under the lock, emitted after unlock
#define KVT_POOL_LOG_LEN   192 //  bytes of one queued log line

typedef enum {
    KVT_POBJ_FREE = 0,        //  table slot unused
    KVT_POBJ_WRITING = 1,     //  reserved for write: invisible to readers, never evicted
    KVT_POBJ_READY = 2,       //  readable; evictable when unpinned
    KVT_POBJ_QUARANTINED = 3, //  a live holder's reservation past its TTL: unindexed, its
                              //  bytes kept (a late copy may land) until its commit / abort
    KVT_POBJ_QDRAIN = 4,      //  quarantined, and its holder since reset or removed: freed
                              //  at the TTL after that (writing list)
} kvt_pobj_state_t;

typedef struct {
    uint64_t ns;      //  namespace
    kvt_hash_t key;   //  prefix hash
    uint64_t size;    //  bytes requested
    uint64_t units;   //  allocation units held
    uint64_t off;     //  byte offset of the bytes in the arena
    uint64_t t_start; //  reservation / last renew time (writing), drain start (qdrain)
    uint32_t extent;  //  allocator extent id
    uint32_t gen;     //  generation, bumped whenever the slot is freed
    kvt_ilink_t link; //  in the LRU (ready), writing or quarantine list; next: free list
    uint32_t pins;    //  read pins held by leases
    uint32_t holder;  //  writer (while writing)
    uint32_t epoch;   //  writer's holder epoch at reserve
    double prio;      //  (VALUE) GDSF priority H at its last refresh
    uint64_t seq;     //  (VALUE) refresh sequence number: breaks ties, older first
    uint32_t hits;    //  (VALUE) refreshes since it became ready
    uint32_t hpos;    //  (VALUE) heap index; KVT_NIL out of it, KVT_POOL_STASHED in a walk
    uint8_t kind;     //  kvt_obj_kind_t
    uint8_t state;    //  kvt_pobj_state_t
} kvt_pobj_t;

typedef struct {
    uint64_t t_start;   //  acquire / last renew time
    uint32_t gen;       //  generation, bumped whenever the slot is freed
    uint32_t holder;    //  owner
    uint32_t epoch;     //  owner's epoch at acquire
    uint32_t first_pin; //  head of its pin list
    uint32_t npins;     //  pins in the list
    kvt_ilink_t link;   //  in the active list (ordered by t_start); next: free list
    uint8_t used;       //  1 while outstanding
} kvt_plea_t;

typedef enum {
    KVT_PREG_PENDING = 0,    //  not yet registered: not served
    KVT_PREG_REGISTERED = 1, //  registered (or no registration asked): served
    KVT_PREG_FAILED = 2,     //  registration refused: served only with serve_unpinned
} kvt_preg_state_t;

typedef struct {
    uint32_t obj;  //  pinned object
    uint32_t next; //  next pin of the same lease / free list link
} kvt_ppin_t;

typedef enum {
    KVT_PHOLD_FREE = 0, //  slot unused (epoch kept, so old handles stay orphans)
    KVT_PHOLD_LIVE = 1, //  registered
} kvt_phold_state_t;

typedef struct {
    char name[KVT_POOL_NAME_MAX]; //  for logs
    uint32_t epoch;               //  bumped by reset / remove
    uint32_t orphan_logged;       //  epoch + 1 whose orphan reclaims were logged, 0 = none
    uint8_t expired_logged;       //  1 once a live-holder expiry was logged
    uint8_t state;                //  kvt_phold_state_t
} kvt_phold_t;

//  The VALUE eviction order's state (kvt_pool_value.c).
typedef struct {
    bool on;                           //  the pool evicts in VALUE order (else LRU)
    double w_kind[KVT_OBJ_KIND_COUNT]; //  weight per unit, by kind - 1
    double inflation;                  //  L: raised to the priority of each object evicted
    uint64_t seq;                      //  last refresh sequence number given
    uint32_t *heap;                    //  ready, unpinned objects, a min-heap on (prio, seq)
    uint32_t nheap;                    //  its length
    uint32_t *stash;                   //  objects an eviction walk took out and set aside
    uint32_t nstash;                   //  its length
} kvt_pvalue_t;

struct _kvt_pool_t {
    char name[KVT_POOL_NAME_MAX];     //  for logs
    pthread_mutex_t mu;               //  guards everything below
    uint8_t *base;                    //  aligned start of the arena
    void *owned;                      //  arena mapping the pool made (NULL: the caller's memory)
    size_t owned_len;                 //  its length
    bool huge;                        //  the arena was advised onto transparent huge pages
    int numa_mode;                    //  the mbind policy applied to the arena (0: none)
    uint64_t region_bytes;            //  bytes per registration region (the last may be shorter)
    uint32_t nregions;                //  regions
    uint8_t *region_state;            //  kvt_preg_state_t per region
    uint32_t regions_settled;         //  leading regions registered or refused
    kvt_pool_register_fn *reg_fn;     //  registration, or NULL
    kvt_pool_unregister_fn *unreg_fn; //  its undo, or NULL
    void *reg_arg;                    //  their argument
    bool serve_unpinned;              //  refused regions are served anyway
    bool reg_stop;                    //  destroy asked the registration thread to stop
    bool reg_started;                 //  the registration thread runs (joined at destroy)
    pthread_t reg_thread;             //  registers regions in address order
    pthread_cond_t reg_cond;          //  signalled whenever a region settles
    size_t capacity;                  //  usable arena bytes (a multiple of align)
    size_t align;                     //  allocation unit, bytes
    unsigned shift;                   //  log2(align)
    uint64_t ttl_ns;                  //  lease / reservation TTL
    kvt_store_clock_fn *clock;        //  time source
    void *clock_arg;                  //  its argument
    kvt_store_log_fn *log;            //  log sink
    void *log_arg;                    //  its argument
    kvt_pool_evict_fn *evict_fn;      //  eviction hook, or NULL
    void *evict_arg;                  //  its argument
    kvt_pobj_t *objs;                 //  object table
    uint32_t nobjs;                   //  its size
    uint32_t obj_free;                //  head of free object slots
    kvt_ilist_t lru;                  //  ready objects, oldest first
    kvt_ilist_t writing;              //  reservations and draining quarantine, by t_start
    kvt_ilist_t quarantine;           //  live holders' expired reservations
    uint32_t visit;                   //  stamp of the current eviction's extent marks
    kvt_keymap_t map;                 //  (ns, key) → object index + 1 per kind
    kvt_extents_t ext;                //  arena allocator
    uint64_t evictable_units;         //  units of ready, unpinned objects
    kvt_pvalue_t val;                 //  the VALUE order (unused in LRU order)
    kvt_plea_t *leases;               //  lease table
    uint32_t nleases;                 //  its size
    uint32_t lease_free;              //  head of free lease slots
    kvt_ilist_t active;               //  outstanding leases, by t_start
    kvt_ppin_t *pins;                 //  pin nodes
    uint32_t npins;                   //  their number
    uint32_t pin_free;                //  head of free pin nodes
    uint32_t pins_avail;              //  free pin nodes
    kvt_phold_t *holders;             //  holder table (index = id - 1)
    uint32_t nholders;                //  its size
    kvt_holder_t put_holder;          //  internal holder of kvt_pool_put
    kvt_pool_stats_t st;              //  counters (gauges are filled by kvt_pool_stats)
    char logq[KVT_POOL_LOG_LINES][KVT_POOL_LOG_LEN]; //  lines queued under the lock
    int nlogq;                                       //  queued lines
};

//  Maps the arena (anonymous, untouched; capacity set) / unmaps it
//  (kvt_pool_mem.c). Lock not needed.
int kvt_pool_arena_map(kvt_pool_t *self, char *err, size_t errlen);
void kvt_pool_arena_unmap(kvt_pool_t *self);

//  Binds a pool-mapped arena (before first touch) as cfg asks; logs what
//  it did. Replaceable for tests: the mbind call and the node count.
void kvt_pool_arena_numa(kvt_pool_t *self, const kvt_pool_config_t *cfg);
extern long (*kvt_pool_mbind)(void *addr, unsigned long len, int mode, const unsigned long *mask,
                              unsigned long maxnode, unsigned flags);
extern int (*kvt_pool_numa_nodes)(void);

//  Plans the regions and starts registration (kvt_pool_regions.c); the
//  extent allocator must not be initialised yet. Stops it and unregisters.
int kvt_pool_regions_init(kvt_pool_t *self, const kvt_pool_config_t *cfg, char *err, size_t errlen);
int kvt_pool_regions_start(kvt_pool_t *self, char *err, size_t errlen);
void kvt_pool_regions_fini(kvt_pool_t *self);

//  Lock / unlock; unlock emits the log lines queued meanwhile.
void kvt_pool_lock(kvt_pool_t *self);
void kvt_pool_unlock(kvt_pool_t *self);

//  Queues a log line for emission at unlock (dropped beyond the queue).
void kvt_pool_logq(kvt_pool_t *self, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

//  The ready / writing object matching a query, or KVT_NIL.
uint32_t kvt_pool_find(kvt_pool_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind,
                       kvt_pobj_state_t state);

//  The objects' and the leases' list links.
#define KVT_POOL_OBJ_LINKS(self)   KVT_ILINKS((self)->objs, link)
#define KVT_POOL_LEASE_LINKS(self) KVT_ILINKS((self)->leases, link)

//  Moves a ready object to the young end of the LRU: a use (a hit in the
//  VALUE order).
void kvt_pool_refresh(kvt_pool_t *self, uint32_t obj);
//  The same for a touch: it keeps the object alive, it does not use it
//  (in the VALUE order its recency is renewed, its hits stay).
void kvt_pool_renew(kvt_pool_t *self, uint32_t obj);

//  The VALUE order (kvt_pool_value.c); each a no-op in LRU order. Init
//  takes the weights kvt_pool_value_check set and allocates the heap.
//  An object became ready (priced with zero hits) / was refreshed (one more
//  hit, priced against the current L) / got its first pin (leaves the
//  heap) / lost its last pin (returns with the priority of its last
//  refresh) / leaves the ready set.
#define KVT_POOL_STASHED (KVT_NIL - 1) //  hpos of an object an eviction walk set aside
//  The value settings of a configuration being validated (before anything
//  is mapped): refuses a bad evict or weight naming it, sets a weight left
//  0 to its default. kvt_pool_value_init takes a configuration it passed.
int kvt_pool_value_check(kvt_pool_config_t *cfg, char *err, size_t errlen);
int kvt_pool_value_init(kvt_pool_t *self, const kvt_pool_config_t *cfg, char *err, size_t errlen);
void kvt_pool_value_fini(kvt_pool_t *self);
void kvt_pool_value_ready(kvt_pool_t *self, uint32_t obj);
void kvt_pool_value_hit(kvt_pool_t *self, uint32_t obj);
//  Priced again against the current L with its hits unchanged (a touch).
void kvt_pool_value_renew(kvt_pool_t *self, uint32_t obj);
void kvt_pool_value_pinned(kvt_pool_t *self, uint32_t obj);
void kvt_pool_value_unpinned(kvt_pool_t *self, uint32_t obj);
void kvt_pool_value_gone(kvt_pool_t *self, uint32_t obj);

//  The VALUE eviction walk: the lowest-priority evictable object, taken out
//  of the heap and stashed (KVT_NIL when none is left); unstash puts every
//  stashed object that is still ready back. O(log n) each.
uint32_t kvt_pool_value_pop(kvt_pool_t *self);
void kvt_pool_value_unstash(kvt_pool_t *self);

//  The lowest-priority evictable object (the heap's top), or KVT_NIL.
uint32_t kvt_pool_value_top(kvt_pool_t *self);

//  An extent of `units` for a new object and a free object slot, evicting
//  (kvt_pool_evict.c) only objects whose eviction can help; or a failure
//  (KVT_STORE_EFULL / ENOSPACE, counted) with nothing evicted. Never waits.
int kvt_pool_make_room(kvt_pool_t *self, uint64_t units, uint64_t now, uint32_t *extent);

//  Frees an object's slot, bytes and (ready, writing) index entry; returns
//  the length in units of the free extent that now covers its bytes.
uint64_t kvt_pool_free_obj(kvt_pool_t *self, uint32_t obj);

//  A writing object whose holder is live with the epoch it reserved under
//  (not an orphan).
bool kvt_pool_resv_live(kvt_pool_t *self, uint32_t obj);

//  A live holder's writing object expired: unindexed and quarantined.
void kvt_pool_quarantine(kvt_pool_t *self, uint32_t obj);

//  Holder `id` was reset or removed: its quarantined objects start their
//  drain (freed at the TTL from now).
void kvt_pool_drain_holder(kvt_pool_t *self, kvt_holder_t id, uint64_t now);

//  A lease whose holder is live with the epoch it was granted under.
bool kvt_pool_lease_live(kvt_pool_t *self, uint32_t lease);

//  Holder `id` is live; its table entry.
kvt_phold_t *kvt_pool_holder(kvt_pool_t *self, kvt_holder_t id);

//  New lease for holder (KVT_NIL if the table is full), started now.
uint32_t kvt_pool_lease_new(kvt_pool_t *self, kvt_holder_t holder, uint64_t now);

//  Adds a read pin on obj to lease (a pin node must be available).
void kvt_pool_pin(kvt_pool_t *self, uint32_t lease, uint32_t obj);

//  Drops every pin of a lease and frees it.
void kvt_pool_lease_drop(kvt_pool_t *self, uint32_t lease);

//  Resolves a lease id to a slot; KVT_NIL (counted) if stale.
uint32_t kvt_pool_lease_slot(kvt_pool_t *self, uint64_t id);

//  Reclaims everything expired at `now`; returns the number reclaimed.
size_t kvt_pool_reclaim_locked(kvt_pool_t *self, uint64_t now);

//  What a commit made ready (for the storage manager's write-through).
typedef struct {
    uint64_t ns;         //  namespace
    kvt_hash_t key;      //  prefix hash
    kvt_obj_kind_t kind; //  kind
    const void *ptr;     //  bytes in the arena
    size_t size;         //  length
} kvt_pool_info_t;

//  kvt_pool_commit, plus (if second is non-zero) a read lease for holder
//  `second` taken in the same step — best effort: second_lease->id stays 0
//  when the tables are full — and a description of the object. Takes the lock.
int kvt_pool_commit_ex(kvt_pool_t *self, kvt_resv_t *resv, kvt_lease_t *lease, kvt_holder_t second,
                       kvt_lease_t *second_lease, kvt_pool_info_t *info);

//  Number of leading keys with no ready object matching kind (takes the lock).
size_t kvt_pool_count_missing(kvt_pool_t *self, uint64_t ns, const kvt_hash_t *keys, size_t n,
                              kvt_obj_kind_t kind);

//  Current time from the pool's clock.
static inline uint64_t kvt_pool_now(kvt_pool_t *self)
{
    return self->clock(self->clock_arg);
}

#endif
