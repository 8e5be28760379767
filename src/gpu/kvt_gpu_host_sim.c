/*  kvt_gpu_host_sim.c — the host backend's SIM landing model: ops never run
    on their own; each gets a landing time when queued (and again when a
    stall changes or a synchronize forces work):

        ready (op) = max (queued at, landing of the stream's previous op,
                          end of the stream's last stall,
                          landing of the awaited op, for a wait)
        land (op)  = ready (op) + cost (op)
        cost       = copy of k segments, B bytes, on the device's copy path:
                       BATCH (AUTO)  latency + k x entry + ceil (B * 1e9 / bw)
                       SEGMENT       k x latency + ceil (B * 1e9 / bw)
                       KERNEL        latency + ceil (B * 1e9 / bw)
                     (k = 1: latency + ceil (B * 1e9 / bw) on every path);
                     wait: 0; host function: its sim_cost_ns

    and takes effect when a call under the device lock finds land <= now.
    A stalled stream's ops have no landing time (KVT_HOST_NONE) until the
    stall ends.

    Cost. Landing times never decrease along a stream, so a stream's head is
    its earliest op. The streams with pending ops sit in a binary min-heap
    on (head's landing time, head's queue order): landing what is due costs
    O(log streams) per landed op and O(1) when nothing is due, next_eta is
    O(1), and a stream's pending ops are found by sequence number in a ring
    (eta, waits) in O(1). Due ops land in (landing time, queue order) order:
    a wait lands no earlier than the op it awaits, which was queued before
    it, so every op lands after its dependencies. Replans (a stall starts or
    ends, a forced synchronize) walk every pending op in queue order
    (ghead list): O(pending ops), rare by design.
*/
#include <assert.h>
#include <stdlib.h>

#include "base/kvt_heap.h"
#include "base/kvt_vec.h"
#include "kvt_gpu_host.h"

//  Landing time of `op` given the landing time of its stream predecessor.
uint64_t kvt_gpu_sim_copy_cost_ns(const kvt_gpu_t *self, uint32_t segments, size_t bytes)
{
    //  A batched copy spends CPU per entry, separate copies pay the fixed
    //  cost each, one kernel launch moves every segment for one fixed cost.
    uint64_t cost = kvt_gpu_sim_cost_ns(self, bytes);
    if (segments <= 1)
        return cost;
    switch (self->opts.copy_path) {
    case KVT_GPU_PATH_KERNEL:
        return cost;
    case KVT_GPU_PATH_SEGMENT: {
        unsigned __int128 more = (unsigned __int128)(segments - 1) * self->opts.sim_latency_ns;
        return kvt_gpu_sat_add(cost, more > UINT64_MAX ? UINT64_MAX : (uint64_t)more);
    }
    default: {
        unsigned __int128 more = (unsigned __int128)segments * self->opts.sim_entry_ns;
        return kvt_gpu_sat_add(cost, more > UINT64_MAX ? UINT64_MAX : (uint64_t)more);
    }
    }
}

uint64_t kvt_gpu_host_sim_plan(kvt_hop_t *op, uint64_t prev_land)
{
    if (op->stream->stalled || prev_land == KVT_HOST_NONE)
        return KVT_HOST_NONE;
    uint64_t ready = kvt_gpu_host_max(op->queued_ns, prev_land);
    if (op->kind == KVT_HOP_WAIT && op->target->done_seq < op->target_seq) {
        if (op->dep->land_ns == KVT_HOST_NONE)
            return KVT_HOST_NONE;
        ready = kvt_gpu_host_max(ready, op->dep->land_ns);
    }
    return kvt_gpu_sat_add(ready, op->cost_ns);
}

uint64_t kvt_gpu_host_sim_base(kvt_hstream_t *s)
{
    return kvt_gpu_host_max(s->last_land_ns, s->release_ns);
}

// ------------------------------------------------------- stream heap ----

//  True when stream x's head lands before stream y's (ties: queue order).
static bool s_before(const void *x, const void *y, void *ctx)
{
    const kvt_hop_t *a = (*(kvt_hstream_t *const *)x)->head;
    const kvt_hop_t *b = (*(kvt_hstream_t *const *)y)->head;
    return a->land_ns < b->land_ns || (a->land_ns == b->land_ns && a->gseq < b->gseq);
}

static void s_moved(void *elem, uint32_t pos, void *ctx)
{
    (*(kvt_hstream_t **)elem)->heap_at = pos;
}

static const kvt_heap_ops_t s_heap_ops = {sizeof(kvt_hstream_t *), s_before, s_moved};

//  Restores the heap around a stream whose head (key) changed.
static void s_heap_fix(kvt_host_t *host, kvt_hstream_t *s)
{
    kvt_heap_fix(host->heap, host->nheap, &s_heap_ops, NULL, s->heap_at);
}

static void s_heap_remove(kvt_host_t *host, kvt_hstream_t *s)
{
    assert(s->heap_at < host->nheap && host->heap[s->heap_at] == s);
    kvt_heap_remove(host->heap, &host->nheap, &s_heap_ops, NULL, s->heap_at, NULL);
    s->heap_at = KVT_HOST_NO_HEAP;
}

int kvt_gpu_host_sim_add_stream(kvt_host_t *host)
{
    //  The heap holds each live stream at most once: sized here, so queueing
    //  never allocates.
    if (kvt_vec_reserve((void **)&host->heap, &host->heap_cap, host->nstreams + 1,
                        sizeof *host->heap) != 0)
        return kvt_gpu_fail(KVT_GPU_ENOMEM, "stream_new: out of memory");
    host->nstreams++;
    return 0;
}

void kvt_gpu_host_sim_drop_stream(kvt_host_t *host, kvt_hstream_t *s)
{
    assert(s->heap_at == KVT_HOST_NO_HEAP);
    assert(host->nstreams > 0);
    host->nstreams--;
    free(s->ring);
    s->ring = NULL;
}

// --------------------------------------------------------------- ring ----

int kvt_gpu_host_sim_reserve(kvt_hstream_t *s)
{
    uint64_t pending = s->queued_seq - s->done_seq;
    if (pending < s->ring_cap)
        return 0;
    uint64_t cap = s->ring_cap ? s->ring_cap * 2 : 16;
    kvt_hop_t **ring = calloc(cap, sizeof *ring);
    if (!ring)
        return kvt_gpu_fail(KVT_GPU_ENOMEM, "host: out of memory");
    for (kvt_hop_t *op = s->head; op; op = op->next)
        ring[op->seq & (cap - 1)] = op;
    free(s->ring);
    s->ring = ring;
    s->ring_cap = cap;
    return 0;
}

kvt_hop_t *kvt_gpu_host_sim_op(kvt_hstream_t *s, uint64_t seq)
{
    if (seq <= s->done_seq || seq > s->queued_seq)
        return NULL;
    kvt_hop_t *op = s->ring[seq & (s->ring_cap - 1)];
    assert(op && op->seq == seq);
    return op;
}

void kvt_gpu_host_sim_queued(kvt_host_t *host, kvt_hop_t *op)
{
    kvt_hstream_t *s = op->stream;
    assert(s->queued_seq - s->done_seq <= s->ring_cap);
    s->ring[op->seq & (s->ring_cap - 1)] = op;
    if (s->head == op) {
        assert(host->nheap < host->heap_cap);
        kvt_heap_push(host->heap, &host->nheap, &s_heap_ops, NULL, &s);
    }
}

uint64_t kvt_gpu_host_sim_next(kvt_host_t *host)
{
    return host->nheap ? host->heap[0]->head->land_ns : KVT_HOST_NONE;
}

// -------------------------------------------------------------- landing ----

//  Recomputes every pending op's landing time (queue order).
void kvt_gpu_host_sim_replan(kvt_host_t *host)
{
    uint64_t epoch = ++host->epoch;
    for (kvt_hop_t *op = host->ghead; op; op = op->gnext) {
        kvt_hstream_t *s = op->stream;
        if (s->plan_epoch != epoch) {
            s->plan_epoch = epoch;
            s->plan_land = kvt_gpu_host_sim_base(s);
        }
        op->land_ns = kvt_gpu_host_sim_plan(op, s->plan_land);
        s->plan_land = op->land_ns;
    }
    kvt_heap_build(host->heap, host->nheap, &s_heap_ops, NULL);
}

//  Lands its stream's head op `op`: runs it, completes it, and refiles the
//  stream in the heap.
static void s_sim_land(kvt_gpu_t *gpu, kvt_hop_t *op)
{
    kvt_host_t *host = kvt_gpu_host_impl(gpu);
    kvt_hstream_t *s = op->stream;
    assert(s->head == op);
    bool failed = kvt_gpu_host_fails(op);
    if (!failed)
        kvt_gpu_host_execute(op);
    s->last_land_ns = op->land_ns;
    if (op->gprev)
        op->gprev->gnext = op->gnext;
    else
        host->ghead = op->gnext;
    if (op->gnext)
        op->gnext->gprev = op->gprev;
    else
        host->gtail = op->gprev;
    s->ring[op->seq & (s->ring_cap - 1)] = NULL;
    bool last = !op->next;
    //  Completing may free the stream (its last reference can be this op's).
    if (last)
        s_heap_remove(host, s);
    kvt_gpu_host_complete(gpu, op, failed);
    if (!last)
        s_heap_fix(host, s);
}

//  Lands every op due at `now`. Returns how many landed.
int kvt_gpu_host_sim_progress(kvt_gpu_t *gpu, uint64_t now)
{
    kvt_host_t *host = kvt_gpu_host_impl(gpu);
    int landed = 0;
    while (host->nheap > 0) {
        kvt_hop_t *op = host->heap[0]->head;
        if (op->land_ns == KVT_HOST_NONE || op->land_ns > now)
            break;
        s_sim_land(gpu, op);
        landed++;
    }
    return landed;
}

//  Lands, now, the ops (stream s, seq) depends on. 0, or NOT_READY when one
//  of them is on a stalled stream (nothing is landed then).
static int s_sim_force(kvt_gpu_t *gpu, kvt_hstream_t *s, uint64_t seq, uint64_t now)
{
    kvt_host_t *host = kvt_gpu_host_impl(gpu);
    bool blocked = false;
    s->force_seq = seq;
    for (kvt_hop_t *op = host->gtail; op; op = op->gprev) {
        kvt_hstream_t *os = op->stream;
        op->forced = op->seq <= os->force_seq;
        if (!op->forced)
            continue;
        blocked |= os->stalled;
        if (op->kind == KVT_HOP_WAIT && op->target->done_seq < op->target_seq)
            op->target->force_seq = kvt_gpu_host_max(op->target->force_seq, op->target_seq);
    }
    s->force_seq = 0;
    for (kvt_hop_t *op = host->ghead; op; op = op->gnext) {
        op->stream->force_seq = 0;
        if (op->kind == KVT_HOP_WAIT)
            op->target->force_seq = 0;
    }
    if (blocked)
        return KVT_GPU_NOT_READY;
    //  In queue order each forced op is its stream's head when reached (its
    //  stream predecessors are forced too, and came first). Lowering a
    //  landing time breaks the heap order until the replan below.
    kvt_hop_t *next;
    for (kvt_hop_t *op = host->ghead; op; op = next) {
        next = op->gnext;
        if (op->forced) {
            if (op->land_ns > now)
                op->land_ns = now;
            s_sim_land(gpu, op);
        }
    }
    gpu->stats.sim_forced++;
    kvt_gpu_host_sim_replan(host);
    return 0;
}

//  SIM synchronize on (s, seq), under the lock.
int kvt_gpu_host_sim_sync(kvt_gpu_t *gpu, kvt_hstream_t *s, uint64_t seq)
{
    uint64_t now = kvt_gpu_host_now(gpu);
    kvt_gpu_host_sim_progress(gpu, now);
    int rc = kvt_gpu_host_status(s, seq);
    if (rc != KVT_GPU_NOT_READY)
        return rc;
    rc = s_sim_force(gpu, s, seq, now);
    if (rc != 0) {
        kvt_gpu_fail(KVT_GPU_NOT_READY, "synchronize: stream '%s' waits behind a stalled stream",
                     s->name);
        return rc;
    }
    rc = kvt_gpu_host_status(s, seq);
    return rc == 0 ? KVT_GPU_FORCED : rc;
}
