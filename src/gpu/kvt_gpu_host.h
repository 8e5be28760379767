/*  kvt_gpu_host.h — private to the host backend (kvt_gpu_host.c: device,
    streams, events, LIVE workers; kvt_gpu_host_sim.c: the SIM landing
    model). Everything here is used under gpu->mu.
*/
#ifndef KVT_GPU_HOST_H_INCLUDED
#define KVT_GPU_HOST_H_INCLUDED

#include "kvt_gpu_host_mem.h"
#include "kvt_gpu_int.h"

#define KVT_HOST_NONE    UINT64_MAX //  "no failure" / "unknown landing time"
#define KVT_HOST_NO_HEAP UINT32_MAX //  a stream that is not in the SIM heap

typedef enum {
    KVT_HOP_COPY = 1, //  a copy batch
    KVT_HOP_WAIT = 2, //  wait until (target, target_seq) completed
    KVT_HOP_FN = 3,   //  a host function
} kvt_hop_kind_t;

typedef struct _kvt_hstream_t kvt_hstream_t;
typedef struct _kvt_hop_t kvt_hop_t;

struct _kvt_hop_t {
    kvt_hop_kind_t kind;   //  what it does
    kvt_hstream_t *stream; //  stream it is queued on (holds a reference)
    uint64_t seq;          //  position on its stream, from 1
    uint64_t gseq;         //  SIM: position in the device's queue order, from 1
    kvt_hop_t *next;       //  next op on the same stream
    kvt_hop_t *gprev;      //  SIM: previous pending op, queue order
    kvt_hop_t *gnext;      //  SIM: next pending op, queue order
    kvt_gpu_copy_t *copy;  //  KVT_HOP_COPY: the batch (owned)
    kvt_hstream_t *target; //  KVT_HOP_WAIT: awaited stream (holds a reference)
    uint64_t target_seq;   //  KVT_HOP_WAIT: awaited sequence number
    kvt_hop_t *dep;        //  KVT_HOP_WAIT, SIM: awaited op while it is pending
    kvt_gpu_host_fn *fn;   //  KVT_HOP_FN: the function
    void *arg;             //  KVT_HOP_FN: its argument
    uint64_t cost_ns;      //  SIM: cost of the op
    uint64_t queued_ns;    //  SIM: clock when it was queued
    uint64_t land_ns;      //  SIM: landing time, KVT_HOST_NONE while unknown
    bool inject_fail;      //  an injected failure
    bool forced;           //  SIM: marked by a forced landing
};

struct _kvt_hstream_t {
    kvt_gpu_t *gpu;              //  device
    char name[KVT_GPU_NAME_MAX]; //  for messages
    int refs;                    //  handle + events + waits + pending ops
    kvt_hop_t *head;             //  oldest pending op (LIVE: maybe running)
    kvt_hop_t *tail;             //  newest pending op
    uint64_t queued_seq;         //  sequence number of the newest op queued
    uint64_t done_seq;           //  sequence number of the newest op completed
    uint64_t fail_seq;           //  first failed op, KVT_HOST_NONE if none
    char fail_why[96];           //  why it failed
    uint32_t fail_next;          //  injected failures left for the next ops
    bool stalled;                //  injected stall in force
    uint64_t release_ns;         //  SIM: end of the last stall
    uint64_t last_land_ns;       //  SIM: landing time of the newest completed op
    uint64_t force_seq;          //  SIM: scratch of a forced landing
    uint64_t plan_epoch;         //  SIM: scratch of a replan
    uint64_t plan_land;          //  SIM: scratch of a replan
    uint32_t heap_at;            //  SIM: index in host->heap, KVT_HOST_NO_HEAP when not there
    kvt_hop_t **ring;            //  SIM: pending ops by seq & (ring_cap - 1)
    uint64_t ring_cap;           //  SIM: slots in ring (a power of two, or 0)
    pthread_cond_t cv_work;      //  LIVE: work queued, stall ended, stop
    pthread_t thread;            //  LIVE: the worker
    bool stop;                   //  LIVE: the worker should exit once drained
};

typedef struct {
    bool sim;               //  SIM mode
    pthread_cond_t cv_done; //  LIVE: some op completed
    int done_waiters;       //  LIVE: threads waiting on cv_done
    kvt_hop_t *ghead;       //  SIM: pending ops, oldest first
    kvt_hop_t *gtail;       //  SIM: pending ops, newest
    uint64_t epoch;         //  SIM: replan counter
    uint64_t gseq;          //  SIM: queue order of the newest op
    kvt_hstream_t **heap;   //  SIM: streams with pending ops, min-heap on their head op
    uint32_t nheap;         //  SIM: entries used in heap
    uint32_t heap_cap;      //  SIM: entries allocated in heap (>= live streams)
    uint32_t nstreams;      //  SIM: live streams (handles or references)
    kvt_host_mem_t mem;     //  mappings and the huge-page probe (kvt_gpu_host_mem.c)
} kvt_host_t;

//  The backend event.
typedef struct {
    kvt_hstream_t *stream; //  stream of the last record (holds a reference), or NULL
    uint64_t seq;          //  sequence number marked
} kvt_hevent_t;

static inline kvt_host_t *kvt_gpu_host_impl(kvt_gpu_t *gpu)
{
    return gpu->impl;
}

static inline uint64_t kvt_gpu_host_now(kvt_gpu_t *gpu)
{
    return gpu->opts.now(gpu->opts.now_arg);
}

static inline uint64_t kvt_gpu_host_max(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

// ------------------------------------------------ shared (kvt_gpu_host.c) ----

//  Drops a reference; frees the stream at zero (its queue must be empty).
void kvt_gpu_host_unref(kvt_hstream_t *s);

//  Status of (stream, seq): 0, KVT_GPU_NOT_READY or KVT_GPU_EFAULT (with the
//  message). A NULL stream or seq 0 (never recorded) is complete.
int kvt_gpu_host_status(kvt_hstream_t *s, uint64_t seq);

//  Decides whether `op` fails as it completes (and records why).
bool kvt_gpu_host_fails(kvt_hop_t *op);

//  Runs an op's effect (copy or host function).
void kvt_gpu_host_execute(kvt_hop_t *op);

//  Completes the stream's head op and frees it.
void kvt_gpu_host_complete(kvt_gpu_t *gpu, kvt_hop_t *op, bool failed);

// ---------------------------------------------------- SIM (kvt_gpu_host_sim.c) ----

//  Landing time of `op` given the landing time of its stream predecessor.
uint64_t kvt_gpu_host_sim_plan(kvt_hop_t *op, uint64_t prev_land);

//  Earliest start of a stream's first queued op.
uint64_t kvt_gpu_host_sim_base(kvt_hstream_t *s);

//  Recomputes every queued op's landing time (queue order) and reorders
//  the stream heap.
void kvt_gpu_host_sim_replan(kvt_host_t *host);

//  Makes room for one more stream in the heap (at stream creation), so that
//  queuing never allocates for it. 0 or KVT_GPU_ENOMEM.
int kvt_gpu_host_sim_add_stream(kvt_host_t *host);

//  Frees a stream's SIM state as the stream is freed.
void kvt_gpu_host_sim_drop_stream(kvt_host_t *host, kvt_hstream_t *s);

//  Makes room in the stream's ring for one more pending op. 0 or
//  KVT_GPU_ENOMEM (nothing changed).
int kvt_gpu_host_sim_reserve(kvt_hstream_t *s);

//  Files a just-queued op (already on its stream's list): its ring slot,
//  and the heap when it is its stream's head.
void kvt_gpu_host_sim_queued(kvt_host_t *host, kvt_hop_t *op);

//  The pending op (s, seq), or NULL when it is not pending. O(1).
kvt_hop_t *kvt_gpu_host_sim_op(kvt_hstream_t *s, uint64_t seq);

//  Earliest landing time among pending ops (KVT_HOST_NONE if none). O(1).
uint64_t kvt_gpu_host_sim_next(kvt_host_t *host);

//  Lands every op due at `now`. Returns how many landed.
int kvt_gpu_host_sim_progress(kvt_gpu_t *gpu, uint64_t now);

//  SIM synchronize on (s, seq): lands the ops it depends on at once.
int kvt_gpu_host_sim_sync(kvt_gpu_t *gpu, kvt_hstream_t *s, uint64_t seq);

#endif
