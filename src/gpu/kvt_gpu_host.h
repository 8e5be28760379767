/*  kvt_gpu_host.h — private to the host backend (kvt_gpu_host.c: device,
    streams, events, LIVE workers; kvt_gpu_host_sim.c: the SIM landing
    model). Everything here is used under gpu->mu.
*/
#ifndef KVT_GPU_HOST_H_INCLUDED
#define KVT_GPU_HOST_H_INCLUDED

#include "kvt_gpu_int.h"

#define KVT_HOST_NONE UINT64_MAX //  "no failure" / "unknown landing time"

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

//  Recomputes every queued op's landing time (queue order).
void kvt_gpu_host_sim_replan(kvt_host_t *host);

//  Lands every op due at `now`. Returns how many landed.
int kvt_gpu_host_sim_progress(kvt_gpu_t *gpu, uint64_t now);

//  SIM synchronize on (s, seq): lands the ops it depends on at once.
int kvt_gpu_host_sim_sync(kvt_gpu_t *gpu, kvt_hstream_t *s, uint64_t seq);

#endif
