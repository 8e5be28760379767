/*  kvt_gpu_host_sim.c — the host backend's SIM landing model: ops never run
    on their own; each gets a landing time when queued (and again when a
    stall changes or a synchronize forces work):

        ready (op) = max (queued at, landing of the stream's previous op,
                          end of the stream's last stall,
                          landing of the awaited op, for a wait)
        land (op)  = ready (op) + cost (op)
        cost       = copy: latency + ceil (bytes * 1e9 / bandwidth);
                     wait: 0; host function: its sim_cost_ns

    and takes effect when a call under the device lock finds land <= now.
    Every op's dependencies were queued before it, so landing the due ops in
    queue order lands dependencies first. A stalled stream's ops have no
    landing time (KVT_HOST_NONE) until the stall ends.
*/
#include <assert.h>

#include "kvt_gpu_host.h"

//  Landing time of `op` given the landing time of its stream predecessor.
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
}

static void s_sim_land(kvt_gpu_t *gpu, kvt_hop_t *op)
{
    kvt_host_t *host = kvt_gpu_host_impl(gpu);
    bool failed = kvt_gpu_host_fails(op);
    if (!failed)
        kvt_gpu_host_execute(op);
    op->stream->last_land_ns = op->land_ns;
    if (op->gprev)
        op->gprev->gnext = op->gnext;
    else
        host->ghead = op->gnext;
    if (op->gnext)
        op->gnext->gprev = op->gprev;
    else
        host->gtail = op->gprev;
    kvt_gpu_host_complete(gpu, op, failed);
}

//  Lands every op due at `now`. Returns how many landed.
int kvt_gpu_host_sim_progress(kvt_gpu_t *gpu, uint64_t now)
{
    kvt_host_t *host = kvt_gpu_host_impl(gpu);
    int landed = 0;
    kvt_hop_t *next;
    for (kvt_hop_t *op = host->ghead; op; op = next) {
        next = op->gnext;
        if (op->land_ns != KVT_HOST_NONE && op->land_ns <= now) {
            s_sim_land(gpu, op);
            landed++;
        }
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
