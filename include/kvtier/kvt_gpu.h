/*  kvt_gpu.h — the device layer: device memory for KV page planes and
    recurrent state, pinned host buffers, streams, events, and the batched
    gather / scatter of block lists between device memory and contiguous
    chunk buffers in host memory.

    One interface, three backends chosen when a device is opened:

    * HOST (always built): device memory is host memory; a stream is an
      ordered queue; an event is (stream, sequence number). Two modes:
      - LIVE: each stream has a worker thread that runs its ops in order;
      - SIM: ops advance on a caller-supplied clock (the actor system's
        virtual clock). An op costs latency_ns + bytes / bandwidth and takes
        effect only when its landing time is <= now: until then its
        destination bytes are unchanged.
    * HIP (AMD) and CUDA (NVIDIA): built when their runtime is found. Under
      AUTO a runtime without a usable device falls back to HOST (with a log
      line saying why); asking for HIP or CUDA explicitly fails instead.

    Every open logs one line naming the backend and why it was selected.
    No HIP or CUDA type appears here: every handle is opaque.

    Status codes. Calls return 0 (KVT_GPU_OK) on success, a positive status
    where documented (KVT_GPU_NOT_READY, KVT_GPU_FORCED), or a negative
    KVT_GPU_E* code; kvt_gpu_last_error () then names what failed. A failed
    op reports on its stream and on every event recorded after it (query
    returns KVT_GPU_EFAULT); nothing fails silently.

    Failed calls are atomic for the caller. A call that returns an error
    has left nothing running that touches its buffers: it queued nothing,
    or (HIP / CUDA, a copy the runtime refused part-way) it waited for the
    stream before returning and marked the stream failed, so that every
    later call that queues on it, and query / synchronize, return
    KVT_GPU_EFAULT (recovery is a new stream). The caller may free or reuse
    the buffers of a failed call at once. (Only when the runtime cannot even
    synchronize, a sticky error that loses the device context, is this left
    to the runtime having stopped the work; that is logged at level 0.)

    Chunk buffer layout (identical on every backend). For a block list of n
    blocks, the chunk buffer holds, plane after plane in registration order,
    layer after layer, the n blocks' bytes in list order:

        offset (p, l, i) = n * P[p] + (l * n + i) * block_bytes[p]
        P[p]             = sum over q < p of layers[q] * block_bytes[q]
        chunk bytes      = n * kvt_gpu_block_bytes (gpu)

    so each (plane, layer) is one contiguous run of n blocks. Block lists
    must hold distinct ids < num_blocks (duplicates and out-of-range ids are
    refused, never clamped); any order is allowed.

    Thread safety. Opening, registering planes / state pools and destroying
    the device happen on one thread before (resp. after) any stream work;
    registration is refused once an op has been queued. Every other call is
    safe from any thread: different streams may be driven from different
    threads. Ops queued on one stream run in the order the calls returned;
    drive one stream from one thread at a time to keep that order meaningful.
    An event must not be destroyed while another thread uses it. An event
    pool and its events are destroyed only on the thread that created the
    pool (see the event pool). The last error is per thread. HIP / CUDA: the layer selects the
   device on every thread that calls it.

    docs/gpu.md describes the backends, the SIM landing model, the event
    pool and every configuration knob with its default and unit.
*/
#ifndef KVT_GPU_H_INCLUDED
#define KVT_GPU_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct _kvt_gpu_t kvt_gpu_t;                       //  an open device
typedef struct _kvt_gpu_stream_t kvt_gpu_stream_t;         //  an ordered op queue
typedef struct _kvt_gpu_event_t kvt_gpu_event_t;           //  a point in a stream
typedef struct _kvt_gpu_event_pool_t kvt_gpu_event_pool_t; //  reusable events

// -------------------------------------------------------- status codes ----

#define KVT_GPU_OK           0    //  success / complete
#define KVT_GPU_NOT_READY    1    //  query: queued work has not finished
#define KVT_GPU_FORCED       2    //  SIM synchronize: landed ahead of the clock
#define KVT_GPU_ERR          (-1) //  unspecified failure
#define KVT_GPU_EINVAL       (-2) //  bad argument (block id, size, index, option)
#define KVT_GPU_ENOMEM       (-3) //  host or device allocation failed
#define KVT_GPU_EDEVICE      (-4) //  the device runtime failed a call
#define KVT_GPU_EFAULT       (-5) //  an op on the stream (or one it waited on) failed
#define KVT_GPU_ELIMIT       (-6) //  an event reached its record bound
#define KVT_GPU_ESTATE       (-7) //  not allowed now (e.g. registration after work)
#define KVT_GPU_EUNSUPPORTED (-8) //  not available on this backend / not compiled in
#define KVT_GPU_ENODEV       (-9) //  the requested backend found no usable device

//  Text for a status code ("not ready", "bad argument", ...). Never NULL.
const char *kvt_gpu_strerror(int code);

//  What the last failing kvt_gpu call on this thread failed on, e.g.
//  "gather: block id 4096 at index 3 >= num_blocks 4096". "" if none.
const char *kvt_gpu_last_error(void);

// ---------------------------------------------------------------- open ----

typedef enum {
    KVT_GPU_BACKEND_AUTO = 0, //  CUDA, else HIP, else HOST: the first with a device
    KVT_GPU_BACKEND_HOST = 1, //  host memory, worker threads or virtual clock
    KVT_GPU_BACKEND_HIP = 2,  //  AMD GPU through the HIP runtime
    KVT_GPU_BACKEND_CUDA = 3, //  NVIDIA GPU through the CUDA runtime
} kvt_gpu_backend_t;

typedef enum {
    KVT_GPU_HOST_LIVE = 0, //  one worker thread per stream (default)
    KVT_GPU_HOST_SIM = 1,  //  ops land on the caller's clock
} kvt_gpu_host_mode_t;

//  A clock in nanoseconds (SIM). Wrap kvt_system_now for the actor system.
typedef uint64_t(kvt_gpu_clock_fn)(void *arg);

//  A log sink: level 0 error, 1 warning, 2 info, 3 debug; `line` has no
//  trailing newline. Called from the thread that made the call.
typedef void(kvt_gpu_log_fn)(void *arg, int level, const char *line);

//  sim_latency_ns (or sim_entry_ns) value that asks for exactly zero cost (0
//  selects the default).
#define KVT_GPU_SIM_ZERO_LATENCY UINT64_MAX

//  How a gather / scatter moves its segments (docs/gpu.md "Copy paths").
//  On HIP / CUDA: the first path tried (AUTO: the kernel for segments up to
//  the crossover, else the batched copy, else one copy per segment; a path
//  that is not available or fails falls back to the next). On the host
//  backend: KERNEL runs the host emulation of the kernel (LIVE and SIM);
//  under SIM the path also selects the cost model (AUTO = BATCH).
typedef enum {
    KVT_GPU_PATH_AUTO = 0,    //  by segment size and count (default)
    KVT_GPU_PATH_KERNEL = 1,  //  one kernel launch per chunk
    KVT_GPU_PATH_BATCH = 2,   //  one batched copy call per chunk
    KVT_GPU_PATH_SEGMENT = 3, //  one async copy per merged segment
} kvt_gpu_copy_path_t;

//  Options for kvt_gpu_new. Zero-initialise; a zero field means its default.
typedef struct {
    kvt_gpu_backend_t backend;     //  which backend (default AUTO)
    kvt_gpu_host_mode_t host_mode; //  host backend mode (default LIVE); SIM implies HOST
    int device;                    //  HIP / CUDA device ordinal (default 0)
    kvt_gpu_clock_fn *now;         //  SIM: the clock ops land on (required under SIM)
    void *now_arg;                 //  SIM: argument passed to now
    uint64_t sim_bandwidth_Bps;    //  SIM: bytes per second of one copy (default 25e9)
    uint64_t sim_latency_ns;       //  SIM: fixed cost of one copy op, ns (default 5000)
    uint32_t event_max_rerecords;  //  re-records allowed per event (default 31)
    kvt_gpu_log_fn *log;           //  log sink (default: stderr, levels 0..2)
    void *log_arg;                 //  argument passed to log
    kvt_gpu_copy_path_t copy_path; //  gather / scatter path (default AUTO)
    size_t kernel_crossover_bytes; //  AUTO: kernel for segments up to this (default: measured)
    uint32_t kernel_max_blocks;    //  thread blocks per kernel launch (default 16)
    uint64_t sim_entry_ns;         //  SIM: CPU cost per batch entry, ns (default 600)
} kvt_gpu_opts_t;

//  Opens a device. `opts` may be NULL (all defaults). Logs one line saying
//  which backend was selected and why. Returns NULL on failure (bad options,
//  explicit HIP / CUDA without a usable device, allocation failure), with
//  kvt_gpu_last_error () saying why.
kvt_gpu_t *kvt_gpu_new(const kvt_gpu_opts_t *opts);

//  Drains every stream (SIM: lands every queued op at once), then destroys
//  the streams, events and pools still open, the memory the layer
//  allocated, and the device. NULL-safe; nulls the pointer. Refused before
//  touching anything (logged at level 0, last error set, counted in
//  `refused`, *self_p left) while an event pool created by another thread
//  is open: that pool's owner must destroy it first.
void kvt_gpu_destroy(kvt_gpu_t **self_p);

//  The backend in use, and its name ("host", "hip", "cuda"; "auto").
kvt_gpu_backend_t kvt_gpu_backend(const kvt_gpu_t *self);
const char *kvt_gpu_backend_name(kvt_gpu_backend_t backend);

//  True when the host backend runs in SIM mode. For tests and compositions
//  that set up a clock; actors never branch on it (they arm their timers
//  with kvt_gpu_event_wake).
bool kvt_gpu_is_sim(const kvt_gpu_t *self);

//  The selection line logged at open ("host (live): AUTO: cuda: no device
//  (cudaErrorNoDevice); hip: ..."). Valid until kvt_gpu_destroy.
const char *kvt_gpu_describe(const kvt_gpu_t *self);

//  True when `backend` is compiled into this build (HOST always is).
bool kvt_gpu_compiled(kvt_gpu_backend_t backend);

//  The backend AUTO would select now (probes HIP / CUDA for devices without
//  opening one) and, in `why` (may be NULL), the reason.
kvt_gpu_backend_t kvt_gpu_probe(char *why, size_t why_len);

// ------------------------------------------------------ KV page planes ----

//  One KV page plane (K, V, scales, ...): `layers` regions of
//  num_blocks × block_bytes each.
typedef struct {
    const char *name;        //  for messages ("K", "V", "scale"); may be NULL
    uint32_t layers;         //  layers in the plane, >= 1
    uint32_t num_blocks;     //  blocks per layer; the same for every plane of a device
    size_t block_bytes;      //  bytes of one block in one layer, >= 1
    void *const *layer_base; //  NULL: the layer allocates (zeroed) and frees; else
                             //  `layers` device pointers the caller owns (copied)
} kvt_gpu_plane_desc_t;

//  Registers a plane. Returns its index (0, 1, ... in registration order),
//  or a negative code: bad geometry, a num_blocks different from the planes
//  already registered, allocation failure, or KVT_GPU_ESTATE once an op has
//  been queued on this device.
int kvt_gpu_plane_add(kvt_gpu_t *self, const kvt_gpu_plane_desc_t *desc);

//  Registered planes; blocks per layer (0 before the first plane); bytes of
//  one block across every plane and layer (= chunk bytes per block).
uint32_t kvt_gpu_plane_count(const kvt_gpu_t *self);
uint32_t kvt_gpu_num_blocks(const kvt_gpu_t *self);
size_t kvt_gpu_block_bytes(const kvt_gpu_t *self);

//  Offset in a chunk buffer of n blocks of (plane, layer, list position i)
//  (the layout above). SIZE_MAX on a bad argument.
size_t kvt_gpu_chunk_offset(const kvt_gpu_t *self, uint32_t plane, uint32_t layer, uint32_t n,
                            uint32_t i);

//  Host backend: a direct pointer to (plane, layer, block)'s bytes, for a
//  simulated forward that writes and verifies content in place. Such writes
//  bypass stream order. NULL on HIP / CUDA and on a bad argument.
void *kvt_gpu_plane_ptr(kvt_gpu_t *self, uint32_t plane, uint32_t layer, uint32_t block);

// ---------------------------------------------------------- state pools ----

typedef enum {
    KVT_GPU_STATE_SLOTS = 1, //  live recurrent state of running requests
    KVT_GPU_STATE_CKPT = 2,  //  HBM checkpoint pool ("PAGE units")
} kvt_gpu_state_pool_t;

//  A pool of equally sized state units.
typedef struct {
    uint32_t count;     //  units (slots or checkpoint units), >= 1
    size_t state_bytes; //  bytes of one unit, >= 1
    void *base;         //  NULL: the layer allocates (zeroed) and frees; else
                        //  count × state_bytes of device memory the caller owns
} kvt_gpu_state_desc_t;

//  Registers the slot pool or the checkpoint pool (once each). Returns 0 or
//  a negative code (bad geometry, already registered, KVT_GPU_ESTATE after
//  an op was queued, allocation failure).
int kvt_gpu_state_add(kvt_gpu_t *self, kvt_gpu_state_pool_t pool, const kvt_gpu_state_desc_t *desc);

//  Units and bytes per unit of a pool (0 when it is not registered).
uint32_t kvt_gpu_state_count(const kvt_gpu_t *self, kvt_gpu_state_pool_t pool);
size_t kvt_gpu_state_bytes(const kvt_gpu_t *self, kvt_gpu_state_pool_t pool);

//  Host backend: a direct pointer to a unit's bytes (NULL on HIP / CUDA).
void *kvt_gpu_state_ptr(kvt_gpu_t *self, kvt_gpu_state_pool_t pool, uint32_t index);

// -------------------------------------------------- pinned host memory ----

//  Pinned host memory (host backend: 4 KiB-aligned, zeroed; HIP:
//  hipHostMalloc; CUDA: cudaHostAlloc). Copies to / from it are
//  asynchronous on HIP / CUDA; other host memory works but may make the
//  copy synchronous. NULL on failure.
void *kvt_gpu_host_alloc(kvt_gpu_t *self, size_t bytes);

//  Frees memory from kvt_gpu_host_alloc. NULL-safe. Ops that use it must
//  have completed.
void kvt_gpu_host_free(kvt_gpu_t *self, void *ptr);

//  Registers (pins) existing host memory [ptr, ptr + bytes) with the device
//  (HIP: hipHostRegister; CUDA: cudaHostRegister; host backend: nothing to
//  do), so copies to / from it are as asynchronous as to kvt_gpu_host_alloc
//  memory. Thread-safe; the runtime call runs outside the device lock. 0,
//  KVT_GPU_EINVAL (NULL, 0 bytes, overlaps a pinned range),
//  KVT_GPU_EUNSUPPORTED (the runtime has no registration) or
//  KVT_GPU_EDEVICE naming the refused call.
int kvt_gpu_host_register(kvt_gpu_t *self, void *ptr, size_t bytes);

//  Undoes kvt_gpu_host_register (ptr as registered). Ops that use the
//  memory must have completed. Unregistered at kvt_gpu_destroy otherwise.
void kvt_gpu_host_unregister(kvt_gpu_t *self, void *ptr);

//  The same with `self` as void *: a CPU pool's register_fn /
//  unregister_fn (kvt_pool_config_t), register_arg the device.
int kvt_gpu_host_register_fn(void *self, void *ptr, size_t bytes);
void kvt_gpu_host_unregister_fn(void *self, void *ptr);

//  The device's PCI bus id ("0000:3B:00.0") into buf, for the NUMA node a
//  CPU pool binds to (kvt_numa_node_of_pci). 0, or KVT_GPU_EUNSUPPORTED
//  (host backend, or a runtime without it) / KVT_GPU_EDEVICE.
int kvt_gpu_pci_bus_id(kvt_gpu_t *self, char *buf, size_t len);

//  True when [ptr, ptr + len) lies inside one pinned allocation or
//  registration of this device (O(log ranges)).
bool kvt_gpu_host_pinned(kvt_gpu_t *self, const void *ptr, size_t len);

//  True when [ptr, ptr + len) lies in one kvt_gpu_host_alloc buffer of this
//  device: pinned and addressable by a kernel at its host address. Memory
//  registered with kvt_gpu_host_register is pinned (batch copies use it) but
//  never offered to the kernel path, since a registration does not promise
//  the device can use its host address.
bool kvt_gpu_host_mapped(kvt_gpu_t *self, const void *ptr, size_t len);

// -------------------------------------------------------------- streams ----

//  A new stream (`name` for messages, may be NULL). NULL on failure.
kvt_gpu_stream_t *kvt_gpu_stream_new(kvt_gpu_t *gpu, const char *name);

//  Waits for the stream's queued ops (SIM: lands them at once, counted as
//  forced), then destroys it. Events recorded on it stay valid. NULL-safe.
void kvt_gpu_stream_destroy(kvt_gpu_stream_t **self_p);

//  0 when every op queued so far has completed, KVT_GPU_NOT_READY when some
//  have not, KVT_GPU_EFAULT when one failed or a call on the stream failed
//  part-way (HIP / CUDA; the stream is then failed for good).
int kvt_gpu_stream_query(kvt_gpu_stream_t *self);

//  Blocks until every op queued so far has completed (SIM: see
//  kvt_gpu_event_synchronize). Same returns as query, never NOT_READY
//  except under SIM behind a stall.
int kvt_gpu_stream_synchronize(kvt_gpu_stream_t *self);

//  Copies the blocks' bytes (every plane, every layer) into `dst` in the
//  chunk layout. `dst` must hold n × kvt_gpu_block_bytes bytes (dst_len is
//  checked) and stay valid until the op completes; `blocks` is copied
//  before the call returns. Returns 0 when queued; KVT_GPU_EINVAL for
//  n == 0, an id >= num_blocks, a duplicate id or a short buffer.
int kvt_gpu_gather(kvt_gpu_stream_t *s, const uint32_t *blocks, uint32_t n, void *dst,
                   size_t dst_len);

//  One chunk of a batch (kvt_gpu_gather_chunks / scatter_chunks).
typedef struct {
    const uint32_t *blocks; //  its block ids (the rules of kvt_gpu_gather)
    uint32_t n;             //  how many
    void *buf;              //  its chunk buffer (scatter: only read)
    size_t len;             //  bytes of buf (>= n x kvt_gpu_block_bytes)
} kvt_gpu_chunk_t;

//  At most this many chunks in one kvt_gpu_gather_chunks / scatter_chunks.
#define KVT_GPU_MAX_CHUNKS 4096u

//  A batch of `count` chunks as one op: the bytes of `count` kvt_gpu_gather
//  calls in order, queued together (on HIP / CUDA one kernel launch when the
//  kernel path applies, else one batched copy or one copy per segment; the
//  gathers / scatters counters grow by `count`). Every chunk is checked as a
//  gather's list and buffer before anything is queued; a refusal names the
//  chunk. A scatter batch also refuses a block named in two chunks (they
//  land in parallel). The buffers must not overlap.
int kvt_gpu_gather_chunks(kvt_gpu_stream_t *s, const kvt_gpu_chunk_t *chunks, uint32_t count);
int kvt_gpu_scatter_chunks(kvt_gpu_stream_t *s, const kvt_gpu_chunk_t *chunks, uint32_t count);

//  The inverse: writes the chunk buffer `src` back into the blocks.
int kvt_gpu_scatter(kvt_gpu_stream_t *s, const uint32_t *blocks, uint32_t n, const void *src,
                    size_t src_len);

//  Copies one state unit to a host image / a host image into a unit. `len`
//  must be >= the pool's state_bytes (exactly state_bytes are copied).
int kvt_gpu_state_to_host(kvt_gpu_stream_t *s, kvt_gpu_state_pool_t pool, uint32_t index, void *dst,
                          size_t len);
int kvt_gpu_state_from_host(kvt_gpu_stream_t *s, kvt_gpu_state_pool_t pool, uint32_t index,
                            const void *src, size_t len);

//  Device-to-device copy of one unit (slot -> checkpoint: keep a checkpoint
//  in HBM; checkpoint -> slot: resume from it). Both pools must have the
//  same state_bytes; copying a unit onto itself is refused.
int kvt_gpu_state_copy(kvt_gpu_stream_t *s, kvt_gpu_state_pool_t dst_pool, uint32_t dst_index,
                       kvt_gpu_state_pool_t src_pool, uint32_t src_index);

//  Host function run in stream order (CUDA / HIP: cudaLaunchHostFunc /
//  hipStreamAddCallback, where it must not call the device runtime; host LIVE:
//  on the stream's worker; host SIM: when it lands, costing sim_cost_ns).
//  It must not call kvt_gpu_* (under SIM it runs under the device lock); it
//  may write through kvt_gpu_plane_ptr / kvt_gpu_state_ptr pointers taken
//  before. A simulated forward uses it as its "kernel". On a failed stream it
//  does not run.
typedef void(kvt_gpu_host_fn)(void *arg);
int kvt_gpu_launch_host_fn(kvt_gpu_stream_t *s, kvt_gpu_host_fn *fn, void *arg,
                           uint64_t sim_cost_ns);

// --------------------------------------------------------------- events ----

//  A new event, not recorded yet (query says complete, as HIP does; a wait
//  on it is a no-op). NULL on failure.
kvt_gpu_event_t *kvt_gpu_event_new(kvt_gpu_t *gpu);

//  Destroys an event (pending work it marks is unaffected). NULL-safe.
//  A pool event is refused (logged at level 0, last error set, counted in
//  the pool's `refused`, *self_p left): it goes back with
//  kvt_gpu_event_pool_put.
void kvt_gpu_event_destroy(kvt_gpu_event_t **self_p);

//  Marks the current end of stream `s`: the event completes when every op
//  queued on `s` before this call has. Re-recording replaces the previous
//  mark; waits queued earlier keep the mark they saw. KVT_GPU_ELIMIT once
//  the event was recorded 1 + event_max_rerecords times.
int kvt_gpu_event_record(kvt_gpu_event_t *ev, kvt_gpu_stream_t *s);

//  Ops queued on `s` after this call start only after `ev`'s mark completed
//  (on the device: the caller does not block). If the awaited work failed,
//  `s` fails too.
int kvt_gpu_stream_wait_event(kvt_gpu_stream_t *s, kvt_gpu_event_t *ev);

//  0 complete (or never recorded), KVT_GPU_NOT_READY, or KVT_GPU_EFAULT
//  when an op up to the mark failed. Under SIM it first lands what is due.
int kvt_gpu_event_query(kvt_gpu_event_t *ev);

//  Blocks until the event completed; same returns as query. SIM cannot
//  block virtual time: it lands the ops the mark depends on at once and
//  returns KVT_GPU_FORCED (counted in sim_forced) — or 0 when they had
//  already landed, or KVT_GPU_NOT_READY when they sit behind a stall.
int kvt_gpu_event_synchronize(kvt_gpu_event_t *ev);

//  Times the event was recorded.
uint32_t kvt_gpu_event_records(const kvt_gpu_event_t *ev);

//  SIM: the clock time at which the event completes (<= now when it has, 0
//  when never recorded), so an actor can arm a timer for it. UINT64_MAX when
//  unknown: not SIM, or behind a stalled stream.
uint64_t kvt_gpu_event_eta(kvt_gpu_event_t *ev);

//  When the caller should query `ev` again, on the clock of `now_ns` (an
//  actor's kvt_ctx_now; under SIM the device runs on the same clock). An
//  actor arms its timer with it and never asks which backend runs:
//  * the event completed or failed (query says so): now_ns;
//  * the backend knows when it lands (host SIM): that landing time, never
//    earlier than now_ns;
//  * it does not (host LIVE, HIP, CUDA, or SIM behind a stalled stream):
//    now_ns + poll_ns (saturating).
//  Under SIM it first lands what is due, as query does.
uint64_t kvt_gpu_event_wake(kvt_gpu_event_t *ev, uint64_t now_ns, uint64_t poll_ns);

// ----------------------------------------------------------- event pool ----

//  Events for reuse, each with at most 1 + event_max_rerecords records.
//
//  Ownership, one rule: the thread that creates the pool owns the pool and
//  every event in it (whichever thread's get created the event), and
//  events are destroyed only on that thread. Any thread may get and put.
//  An event put back with no record left is retired: destroyed at once on
//  the owner thread; put on another thread, it is deferred and destroyed
//  by the owner's next pool call (get, put, collect, destroy). The owner
//  must destroy the pool before it exits.
kvt_gpu_event_pool_t *kvt_gpu_event_pool_new(kvt_gpu_t *gpu);

//  On the owner thread, once no other thread uses the pool: destroys the
//  pool and every event of it (free, deferred, and handed out and not put
//  back). NULL-safe; nulls the pointer. On any other thread it is refused:
//  nothing is destroyed, *self_p is left, the last error says why
//  (KVT_GPU_ESTATE), the refusal is logged at level 0 and counted in
//  `refused`.
void kvt_gpu_event_pool_destroy(kvt_gpu_event_pool_t **self_p);

//  An event with at least one record left (reused, else new). NULL on failure.
kvt_gpu_event_t *kvt_gpu_event_pool_get(kvt_gpu_event_pool_t *self);

//  Gives an event back (it may still be pending). Nulls *ev_p. An event this
//  pool has not handed out (already put back, another pool's or device's,
//  a plain event) is refused in every build (KVT_GPU_EINVAL in the last
//  error, logged at level 0, counted in `refused`) and stays where it was,
//  so that one event is never handed to two holders. A stale put after the
//  event was handed out again cannot be told from its holder's put.
void kvt_gpu_event_pool_put(kvt_gpu_event_pool_t *self, kvt_gpu_event_t **ev_p);

//  On the owner thread: destroys the deferred events and returns how many.
//  Elsewhere: 0, nothing done.
int kvt_gpu_event_pool_collect(kvt_gpu_event_pool_t *self);

typedef struct {
    uint64_t created;   //  events created by the pool
    uint64_t recorded;  //  records of pool events
    uint64_t retired;   //  events that ran out of re-records
    uint64_t destroyed; //  events destroyed
    uint64_t deferred;  //  retirements deferred to the owner thread
    uint64_t free;      //  events waiting in the pool now
    uint64_t in_use;    //  events handed out now
    uint64_t pending;   //  deferred events not destroyed yet (now)
    uint64_t refused; //  refused puts, destroys off the owner thread, event_destroy of pool events
} kvt_gpu_event_pool_stats_t;

//  The pool's counters. While the pool is open (only retired events are
//  destroyed then): created = free + in_use + retired and
//  retired = destroyed + pending.

void kvt_gpu_event_pool_stats(kvt_gpu_event_pool_t *self, kvt_gpu_event_pool_stats_t *out);

// --------------------------------------------------------- SIM and faults ----

//  SIM: lands every op whose landing time is <= now. Returns the number of
//  ops landed (0 on other backends).
int kvt_gpu_progress(kvt_gpu_t *self);

//  SIM: earliest landing time of any queued op; UINT64_MAX when none is
//  known (nothing queued, stalled, not SIM).
uint64_t kvt_gpu_next_eta(kvt_gpu_t *self);

//  SIM: what one copy op of `bytes` costs: latency + ceil (bytes * 1e9 / bandwidth).
uint64_t kvt_gpu_sim_cost_ns(const kvt_gpu_t *self, size_t bytes);

//  SIM: what a gather / scatter of `segments` separate (merged) segments
//  and `bytes` in all costs on the device's copy_path (docs/gpu.md "SIM
//  landing model"): BATCH (and AUTO) kvt_gpu_sim_cost_ns (bytes) +
//  segments x sim_entry_ns; SEGMENT segments x sim_latency_ns + the bytes'
//  time; KERNEL kvt_gpu_sim_cost_ns (bytes). One segment costs
//  kvt_gpu_sim_cost_ns (bytes) on every path.
uint64_t kvt_gpu_sim_copy_cost_ns(const kvt_gpu_t *self, uint32_t segments, size_t bytes);

//  The copy paths (kernel / batch / per-segment) a backend can use in this
//  build and on this machine, e.g. "kernel (nvrtc 13.0), batch
//  (cudaMemcpyBatchAsync), per-segment"; what `kvtier version` prints. The
//  kernel is named available when its run-time compiler loads.
void kvt_gpu_copy_paths(kvt_gpu_backend_t backend, char *out, size_t out_len);

typedef enum {
    KVT_GPU_FAULT_NONE = 0,  //  clear: resume a stalled stream
    KVT_GPU_FAULT_FAIL = 1,  //  the next `count` ops queued on the stream fail
    KVT_GPU_FAULT_STALL = 2, //  the stream stops running ops until cleared
} kvt_gpu_fault_t;

//  Host backend only (tests, fault scenarios): inject a fault on a stream.
//  A failed op changes nothing, marks the stream failed (later ops fail too,
//  events recorded after it report KVT_GPU_EFAULT) and so does every stream
//  that waits on it. KVT_GPU_EUNSUPPORTED on HIP / CUDA.
int kvt_gpu_stream_inject(kvt_gpu_stream_t *s, kvt_gpu_fault_t fault, uint32_t count);

// --------------------------------------------------------------- stats ----

typedef struct {
    uint64_t ops_queued;      //  ops accepted onto streams
    uint64_t ops_done;        //  ops completed (host backend; 0 on HIP / CUDA)
    uint64_t ops_failed;      //  ops that failed (host backend; 0 on HIP / CUDA)
    uint64_t gathers;         //  gather ops queued
    uint64_t scatters;        //  scatter ops queued
    uint64_t state_copies;    //  state unit copies queued
    uint64_t bytes_gathered;  //  bytes of gathered chunk buffers
    uint64_t bytes_scattered; //  bytes of scattered chunk buffers
    uint64_t bytes_state;     //  bytes of state unit copies
    uint64_t records;         //  event records
    uint64_t waits;           //  stream waits queued
    uint64_t refused;         //  calls refused for a bad argument (and refused device destroys)
    uint64_t sim_forced;      //  SIM synchronizes that landed ahead of the clock
} kvt_gpu_stats_t;

//  Copies the device's counters.
void kvt_gpu_stats(kvt_gpu_t *self, kvt_gpu_stats_t *out);

#ifdef __cplusplus
}
#endif
#endif
