/*  kvt_gpu_int.h — private to src/gpu: the front-end objects shared by every
    backend and the backend vtable (one table per backend, redis-ae style).

    The front (kvt_gpu.c, kvt_gpu_stream.c, kvt_gpu_event_pool.c,
    kvt_gpu_copy.c) validates every argument, keeps the geometry, the
    counters and the lists of open objects, and turns gather / scatter /
    state copies into one copy batch (kvt_gpu_copy_t) per op. A backend only
    moves bytes and orders work. Two vtables: the host backend
    (kvt_gpu_host.c) and the device backend (kvt_gpu_devrt.c), which CUDA
    and HIP share through their runtime tables (kvt_gpu_devrt.h).

    Locking: gpu->mu protects the front's lists, counters and `frozen`. The
    host backend uses the same mutex for its queues. The front never holds
    gpu->mu while calling into a backend.
*/
#ifndef KVT_GPU_INT_H_INCLUDED
#define KVT_GPU_INT_H_INCLUDED

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/kvt_logf.h"
#include "kvtier/kvt_gpu.h"

#define KVT_GPU_MAX_PLANES 16 //  planes per device
#define KVT_GPU_NAME_MAX   32 //  bytes in a plane / stream name

//  Defaults of kvt_gpu_opts_t (docs/gpu.md lists them).
#define KVT_GPU_DEFAULT_BW_BPS        25000000000ull //  SIM bandwidth, bytes/s
#define KVT_GPU_DEFAULT_LATENCY_NS    5000ull        //  SIM cost per copy op, ns
#define KVT_GPU_DEFAULT_MAX_RERECORDS 31u            //  re-records per event
#define KVT_GPU_DEFAULT_KERNEL_BLOCKS 16u            //  thread blocks per kernel launch
#define KVT_GPU_DEFAULT_SIM_ENTRY_NS  600ull         //  SIM CPU cost per batch entry, ns

//  Direction of a copy batch.
typedef enum {
    KVT_GPU_D2H = 1, //  device memory -> host memory (gather, state to host)
    KVT_GPU_H2D = 2, //  host memory -> device memory (scatter, state from host)
    KVT_GPU_D2D = 3, //  device memory -> device memory (state copy)
} kvt_gpu_dir_t;

//  One chunk of a gather / scatter: its buffer and its block list.
typedef struct {
    char *chunk;           //  the chunk buffer
    const uint32_t *block; //  its block ids
    uint32_t n;            //  how many
} kvt_gpu_kjob_t;

//  One op's byte movement: `count` segments, allocated as one block (free
//  it with free ()). The segments never overlap each other.
typedef struct {
    kvt_gpu_dir_t dir;         //  direction of every segment
    uint32_t count;            //  number of segments
    size_t bytes;              //  sum of len[]
    void **dst;                //  count destination pointers
    const void **src;          //  count source pointers
    size_t *len;               //  count segment lengths
    const kvt_gpu_kjob_t *job; //  gather / scatter: its chunks (kernel path), else NULL
    bool mapped;               //  every chunk buffer is device-addressable at its host
                               //  address (kvt_gpu_host_alloc memory): the kernel may run
    uint32_t njobs;            //  entries in job
    uint64_t nblocks;          //  block ids of all its chunks
} kvt_gpu_copy_t;

//  A registered KV page plane.
typedef struct {
    char name[KVT_GPU_NAME_MAX]; //  "K", "V", "plane2"...
    uint32_t layers;             //  layers in the plane
    size_t block_bytes;          //  bytes of one block in one layer
    size_t chunk_base;           //  P[p]: per-block bytes of the planes before it
    char **layer_base;           //  layers device pointers (array owned here)
    void *owned;                 //  the region the layer allocated, or NULL
} kvt_gpu_plane_t;

//  A registered state pool.
typedef struct {
    uint32_t count; //  units; 0 = not registered
    size_t bytes;   //  bytes per unit
    char *base;     //  device pointer of unit 0
    bool owned;     //  the layer allocated base (and frees it)
} kvt_gpu_spool_t;

//  A pinned host allocation (tracked to validate frees and to tell
//  backends whether a buffer is pinned).
typedef struct {
    void *ptr;       //  start
    size_t bytes;    //  length
    bool registered; //  caller memory registered by kvt_gpu_host_register (not ours to free)
} kvt_gpu_hostbuf_t;

typedef struct _kvt_gpu_ops_t kvt_gpu_ops_t;
typedef struct _kvt_devrt_t kvt_devrt_t; //  device-runtime calls (kvt_gpu_devrt.h)

struct _kvt_gpu_t {
    const kvt_gpu_ops_t *ops;                   //  the backend's vtable
    void *impl;                                 //  the backend's device state
    const kvt_devrt_t *rt;                      //  HIP / CUDA: the runtime table; NULL on host
    kvt_gpu_backend_t backend;                  //  HOST, HIP or CUDA
    kvt_gpu_opts_t opts;                        //  options with defaults filled in
    char describe[800];                         //  the selection line
    char device_desc[200];                      //  HIP / CUDA: the device, set by init
    char copy_paths[280];                       //  HIP / CUDA: the copy paths in use, set by init
    kvt_gpu_plane_t planes[KVT_GPU_MAX_PLANES]; //  registered planes
    uint32_t nplanes;                           //  planes registered
    uint32_t num_blocks;                        //  blocks per layer (all planes)
    size_t block_bytes;                         //  bytes of one block, all planes and layers
    kvt_gpu_spool_t state[2];                   //  [0] slots, [1] checkpoint units
    pthread_mutex_t mu;                         //  guards what follows and the host queues
    bool frozen;                                //  an op was queued: geometry is fixed
    kvt_gpu_stats_t stats;                      //  counters
    kvt_gpu_stream_t *streams;                  //  open streams (list)
    kvt_gpu_event_t *events;                    //  open events (list)
    kvt_gpu_event_pool_t *pools;                //  open event pools (list)
    kvt_gpu_hostbuf_t *hostbufs;                //  pinned allocations and registrations, by address
    size_t nhostbufs;                           //  entries used in hostbufs
    size_t hostbufs_cap;                        //  entries allocated in hostbufs
};

struct _kvt_gpu_stream_t {
    kvt_gpu_t *gpu;              //  device it belongs to
    char name[KVT_GPU_NAME_MAX]; //  for messages
    void *impl;                  //  backend stream
    bool failed;                 //  a call failed with part of its work queued (under gpu->mu)
    char fail_why[240];          //  what failed first (under gpu->mu)
    kvt_gpu_stream_t *prev;      //  gpu->streams list
    kvt_gpu_stream_t *next;      //  gpu->streams list
};

//  Where a pool event is.
typedef enum {
    KVT_GPU_EV_PLAIN = 0, //  not a pool event
    KVT_GPU_EV_FREE = 1,  //  in the pool's free list
    KVT_GPU_EV_OUT = 2,   //  handed out by get
    KVT_GPU_EV_DEFER = 3, //  retired, waiting for its owner thread
} kvt_gpu_ev_state_t;

struct _kvt_gpu_event_t {
    kvt_gpu_t *gpu;             //  device it belongs to
    void *impl;                 //  backend event
    uint32_t records;           //  times recorded (under gpu->mu)
    uint32_t max_records;       //  1 + max re-records
    kvt_gpu_event_pool_t *pool; //  pool it belongs to, or NULL (under gpu->mu)
    kvt_gpu_ev_state_t state;   //  where it is in its pool
    uint32_t pool_at;           //  index in its pool's events table
    kvt_gpu_event_t *link;      //  pool's free or deferred stack
    kvt_gpu_event_t *prev;      //  gpu->events list
    kvt_gpu_event_t *next;      //  gpu->events list
};

struct _kvt_gpu_event_pool_t {
    kvt_gpu_t *gpu;                   //  device it belongs to
    uint64_t owner;                   //  thread token of its creator, who owns every event
    kvt_gpu_event_t **events;         //  every event of the pool (ev->pool_at is its index)
    uint32_t nevents;                 //  entries in events
    uint32_t events_cap;              //  capacity of events
    kvt_gpu_event_t *free;            //  events ready for get (link stack)
    kvt_gpu_event_t *deferred;        //  retired events waiting for the owner thread (link stack)
    kvt_gpu_event_pool_stats_t stats; //  counters (free / in_use / pending computed on read)
    kvt_gpu_event_pool_t *prev;       //  gpu->pools list
    kvt_gpu_event_pool_t *next;       //  gpu->pools list
};

//  This thread's token: unique for the life of the process (a pthread_t
//  can be reused by a later thread, a token never is).
uint64_t kvt_gpu_thread_token(void);

//  Destroys an event that is in no pool (any more): unlinks it from the
//  device, destroys the backend event, frees it.
void kvt_gpu_event_free(kvt_gpu_event_t *ev);

//  The backend vtable. Every function returns 0 or a KVT_GPU_E* code and
//  sets the last error. NULL entries mean "not supported here".
struct _kvt_gpu_ops_t {
    const char *name; //  "host", "hip", "cuda"
    //  Device-wide state (gpu->impl); fini after every object is gone.
    int (*init)(kvt_gpu_t *gpu);
    void (*fini)(kvt_gpu_t *gpu);
    //  Device memory, zeroed; pinned host memory.
    int (*dev_alloc)(kvt_gpu_t *gpu, size_t bytes, void **out);
    void (*dev_free)(kvt_gpu_t *gpu, void *ptr);
    int (*host_alloc)(kvt_gpu_t *gpu, size_t bytes, void **out);
    void (*host_free)(kvt_gpu_t *gpu, void *ptr);
    //  Registers (pins) caller host memory / undoes it; NULL: the backend
    //  copies any host memory as its own (nothing to register).
    int (*host_register)(kvt_gpu_t *gpu, void *ptr, size_t bytes);
    void (*host_unregister)(kvt_gpu_t *gpu, void *ptr);
    //  The device's PCI bus id ("0000:3b:00.0"); NULL: none (host).
    int (*pci_bus_id)(kvt_gpu_t *gpu, char *buf, size_t len);
    //  Streams: destroy drains first.
    int (*stream_new)(kvt_gpu_stream_t *s);
    void (*stream_destroy)(kvt_gpu_stream_t *s);
    int (*stream_query)(kvt_gpu_stream_t *s);
    int (*stream_sync)(kvt_gpu_stream_t *s);
    //  Events.
    int (*event_new)(kvt_gpu_event_t *ev);
    void (*event_destroy)(kvt_gpu_event_t *ev);
    int (*event_record)(kvt_gpu_event_t *ev, kvt_gpu_stream_t *s);
    int (*stream_wait)(kvt_gpu_stream_t *s, kvt_gpu_event_t *ev);
    int (*event_query)(kvt_gpu_event_t *ev);
    int (*event_sync)(kvt_gpu_event_t *ev);
    //  Queues a copy batch; takes ownership of `copy` on every path.
    int (*copy)(kvt_gpu_stream_t *s, kvt_gpu_copy_t *copy, bool pinned);
    int (*host_fn)(kvt_gpu_stream_t *s, kvt_gpu_host_fn *fn, void *arg, uint64_t sim_cost_ns);
    //  Host backend only (NULL elsewhere).
    int (*inject)(kvt_gpu_stream_t *s, kvt_gpu_fault_t fault, uint32_t count);
    uint64_t (*event_eta)(kvt_gpu_event_t *ev);
    int (*progress)(kvt_gpu_t *gpu);
    uint64_t (*next_eta)(kvt_gpu_t *gpu);
};

extern const kvt_gpu_ops_t kvt_gpu_host_ops;

//  kvt_gpu_new, except that an explicit HIP / CUDA request runs the shared
//  device backend on `rt` instead of that runtime's table (tests drive it
//  with a fake runtime this way). NULL rt: exactly kvt_gpu_new.
kvt_gpu_t *kvt_gpu_open(const kvt_gpu_opts_t *opts, const kvt_devrt_t *rt);

//  Sets this thread's last error and returns `code`.
int kvt_gpu_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

//  snprintf that may truncate (messages).
void kvt_gpu_fmt(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

//  Logs through the device's sink.
#define kvt_gpu_log(gpu, level, ...) \
    kvt_logf((gpu)->opts.log, (gpu)->opts.log_arg, (level), __VA_ARGS__)

//  A copy batch with room for `count` segments (count, bytes = 0); NULL on
//  allocation failure.
kvt_gpu_copy_t *kvt_gpu_copy_alloc(kvt_gpu_dir_t dir, uint32_t count);
//  The same with `extra` bytes after the segment arrays (suitably aligned
//  for pointers); *extra_p points at them.
kvt_gpu_copy_t *kvt_gpu_copy_alloc_extra(kvt_gpu_dir_t dir, uint32_t count, size_t extra,
                                         void **extra_p);

//  Appends a segment, merging it into the previous one when both ends
//  continue it.
void kvt_gpu_copy_push(kvt_gpu_copy_t *copy, void *dst, const void *src, size_t len);

//  The host copy loop's shape (kvt_gpu_copy.c; measured in
//  docs/performance.md): an op of at least KVT_COPY_STREAM_OP bytes writes
//  its segments of at least KVT_COPY_STREAM_SEG bytes with streaming stores;
//  the first KVT_COPY_PREFETCH bytes of the next block-side segment are
//  prefetched while one is copied.
#define KVT_COPY_STREAM_OP  (64u << 10)
#define KVT_COPY_STREAM_SEG 256u
#define KVT_COPY_PREFETCH   256u

//  Runs a batch on the CPU (host backend): every segment, any length and
//  alignment, then a store fence when streaming stores were used.
void kvt_gpu_copy_run(const kvt_gpu_copy_t *copy);

//  Marks `s` failed (keeps the first reason): every later call that queues
//  on it, and query / synchronize, return KVT_GPU_EFAULT naming `why`.
void kvt_gpu_stream_fail(kvt_gpu_stream_t *s, const char *why);

//  Saturating a + b.
static inline uint64_t kvt_gpu_sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

#endif
