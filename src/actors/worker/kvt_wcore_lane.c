/*  kvt_wcore_lane — the worker core's lane jobs (kvt_wcore_int.h): what a
    lane's submit queues on its stream and how a job's memory goes back.

    The submit makes device calls only (the fence board's waits, the
    copies, the restore record): the tier's leases and reservations were
    taken by the core before the enqueue, and it may run on a submitter
    thread. A copy refused part-way leaves the copies queued before it
    running, so the submit still returns OK (the job becomes pending and its
    memory waits for them) and marks the items it could not queue failed;
    it returns an error only when it queued nothing. */
#include <stdlib.h>

#include "actors/common/kvt_detail.h"
#include "kvt_wcore_int.h"

kvt_wjob_t *kvt_wjob_new(uint32_t n, uint32_t nblocks)
{
    kvt_wjob_t *job = calloc(1, sizeof *job);
    if (!job)
        return NULL;
    job->items = calloc(n ? n : 1, sizeof *job->items);
    job->blocks = calloc(nblocks ? nblocks : 1, sizeof *job->blocks);
    if (!job->items || !job->blocks) {
        free(job->items);
        free(job->blocks);
        free(job);
        return NULL;
    }
    job->n = n;
    atomic_init(&job->refs, 1);
    return job;
}

void kvt_wjob_unref(kvt_wjob_t *job)
{
    if (!job || atomic_fetch_sub(&job->refs, 1) != 1)
        return;
    free(job->items);
    free(job->blocks);
    free(job);
}

void kvt_wjob_renew(kvt_wjob_t *job)
{
    kvt_pool_t *pool = kvt_storage_pool(job->storage);
    for (uint32_t i = 0; i < job->n; i++) {
        if (job->save)
            kvt_storage_resv_renew(job->storage, job->items[i].resv);
        else if (job->items[i].lease.id != 0)
            kvt_pool_lease_renew(pool, job->items[i].lease);
    }
}

//  Gives back every handle. `commit`: the copies landed ok, so a save's
//  items without a failure are committed (deepest first: each commit puts
//  its object at the young end, so the prefix ends up youngest) and their
//  result lands in the item's `fail`; otherwise reservations are aborted.
//  Handles are copied out before the tier call, so the fields the core may
//  read for a renewal are never written. Returns false when a load's lease
//  was stale (the pool reclaimed it under the copy).
static bool s_give(kvt_wjob_t *job, bool commit)
{
    bool fresh = true;
    for (uint32_t i = job->n; i-- > 0;) {
        kvt_witem_t *it = &job->items[i];
        if (job->save) {
            kvt_resv_t r = it->resv;
            if (commit && it->fail == 0) {
                int rc = kvt_storage_commit(job->storage, &r, NULL);
                it->fail = kvt_detail_of_store(rc);
            } else {
                kvt_storage_abort(job->storage, &r);
            }
        } else if (it->lease.id != 0) {
            kvt_lease_t l = it->lease;
            if (kvt_storage_release(job->storage, &l) != KVT_STORE_OK)
                fresh = false;
        }
    }
    return fresh;
}

void kvt_wjob_abort(kvt_wjob_t *job)
{
    s_give(job, false);
}

static bool s_give_back(void *ops_arg, const kvt_lane_job_t *lj, kvt_lane_give_t how)
{
    (void)ops_arg;
    kvt_wjob_t *job = lj->arg;
    bool fresh = true;
    if (how != KVT_LANE_GIVE_LEAVE)
        fresh = s_give(job, how == KVT_LANE_GIVE_COMMIT);
    kvt_wjob_unref(job); //  the lane's reference
    return fresh;
}

//  Fails every item from `from` on that has no failure yet.
static void s_fail_from(kvt_wjob_t *job, uint32_t from, uint32_t detail)
{
    for (uint32_t i = from; i < job->n; i++)
        if (job->items[i].fail == 0)
            job->items[i].fail = detail;
}

static uint32_t s_copy_detail(int rc)
{
    return rc == KVT_GPU_EINVAL ? KVT_DETAIL_INVALID : KVT_DETAIL_IO;
}

static int s_submit(void *ops_arg, kvt_gpu_stream_t *s, const kvt_lane_job_t *lj)
{
    (void)ops_arg;
    kvt_wjob_t *job = lj->arg;
    if (job->wait == KVT_WWAIT_PRODUCER) {
        //  Rule S1: the wait precedes every pack op. No event for the step
        //  (rule S2): nothing is queued, every item of this save fails.
        int rc = job->board ? kvt_fence_board_wait_producer(job->board, job->wait_step, s) : -1;
        if (rc != 0) {
            job->producer_missing = rc == -1;
            return rc == -1 ? KVT_GPU_ESTATE : rc;
        }
        job->fenced = true;
    } else if (job->wait == KVT_WWAIT_COMPUTE && job->board) {
        //  The compute that still reads the blocks / slot runs first. A step
        //  the board holds no event for has no compute left to wait for.
        int rc = kvt_fence_board_wait_compute(job->board, job->wait_step, s);
        if (rc == -1)
            job->compute_miss = true;
        else if (rc != 0)
            return rc;
    }
    bool queued = false;
    for (uint32_t i = 0; i < job->n; i++) {
        kvt_witem_t *it = &job->items[i];
        if (it->fail)
            continue;
        int rc = KVT_GPU_OK;
        size_t off = 0;
        if (it->what & KVT_WITEM_KV) {
            const uint32_t *b = job->blocks + it->block0;
            rc = job->save ? kvt_gpu_gather(s, b, job->bpc, it->host, job->chunk_bytes)
                           : kvt_gpu_scatter(s, b, job->bpc, it->host, job->chunk_bytes);
            off = job->chunk_bytes;
        }
        if (rc == KVT_GPU_OK && (it->what & KVT_WITEM_IMAGE)) {
            char *h = (char *)it->host + off;
            rc = job->save ? kvt_gpu_state_to_host(s, job->spool, job->sindex, h, job->sbytes)
                           : kvt_gpu_state_from_host(s, job->spool, job->sindex, h, job->sbytes);
        }
        if (rc != KVT_GPU_OK) {
            job->refused = true;
            it->fail = s_copy_detail(rc);
            if (!job->save) {
                //  A load leg stops at its first refusal: it has failed.
                s_fail_from(job, i + 1, KVT_DETAIL_IO);
                break;
            }
            continue;
        }
        queued = true;
    }
    if (queued && job->restore && job->board)
        kvt_fence_board_record_restore(job->board, s);
    return KVT_GPU_OK;
}

const kvt_lane_ops_t kvt_wcore_lane_ops = {.submit = s_submit, .give_back = s_give_back};
