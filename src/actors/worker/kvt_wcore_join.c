/*  kvt_wcore_join — the worker core's side of its lanes (kvt_wcore.h):
    joining the lanes' reports into the records' reports, Fences, the timer
    path (poll, next wake) and shutdown.

    A record is a spec with a lane job out. Each lane job reports exactly
    once (the lane's rule); its id is the job's address, which stays valid
    until the core took that report (the core holds a reference), so a
    report finds its record in O(1); a Fence is named by its record's
    address the same way. */
#include <stdlib.h>

#include "kvt_wcore_int.h"

static const kvt_hash_t ZERO = {0, 0};

//  Bucket bounds of the transfer histograms: latency in µs, size in bytes.
static const uint64_t s_lat_us[] = {10,   50,    100,   250,   500,    1000,   2500,
                                    5000, 10000, 25000, 50000, 100000, 250000, 1000000};
static const uint64_t s_size[] = {4096,     16384,     65536,     262144,     1u << 20,
                                  4u << 20, 16u << 20, 64u << 20, 256u << 20, 1u << 30};
_Static_assert(sizeof s_lat_us / sizeof s_lat_us[0] < KVT_WCORE_HIST_MAX, "latency buckets");
_Static_assert(sizeof s_size / sizeof s_size[0] < KVT_WCORE_HIST_MAX, "size buckets");

const uint64_t *kvt_wcore_hist_bounds(bool bytes, uint32_t *n)
{
    *n = bytes ? (uint32_t)(sizeof s_size / sizeof s_size[0])
               : (uint32_t)(sizeof s_lat_us / sizeof s_lat_us[0]);
    return bytes ? s_size : s_lat_us;
}

//  One observation: the first bucket whose bound is at least v (a dozen
//  bounds: a short scan, once per transfer).
static void s_observe(kvt_wcore_hist_t *h, bool bytes, uint64_t v)
{
    uint32_t nb;
    const uint64_t *b = kvt_wcore_hist_bounds(bytes, &nb);
    uint32_t i = 0;
    while (i < nb && v > b[i])
        i++;
    h->n[i]++;
    h->sum += v;
    h->count++;
}

//  A record whose every leg reported: its latency and bytes, when it
//  moved everything it was asked to.
static void s_transfer_done(kvt_wcore_t *self, const kvt_wrec_t *rec, bool ok)
{
    if (!ok)
        return;
    uint64_t us = self->now > rec->started ? (self->now - rec->started) / 1000u : 0;
    bool load = rec->kind == KVT_WREC_LOAD;
    s_observe(load ? &self->st.load_us : &self->st.save_us, false, us);
    s_observe(load ? &self->st.load_bytes : &self->st.save_bytes, true, rec->bytes);
}

//  Bytes a job's items move.
static uint64_t s_job_bytes(const kvt_wjob_t *job)
{
    uint64_t b = 0;
    for (uint32_t i = 0; i < job->n; i++)
        b += ((job->items[i].what & KVT_WITEM_KV) ? job->chunk_bytes : 0) +
             ((job->items[i].what & KVT_WITEM_IMAGE) ? job->sbytes : 0);
    return b;
}

//  Both legs reported: the load's one report and its state verdict.
static void s_load_done(kvt_wcore_t *self, kvt_wrec_t *rec)
{
    uint32_t detail =
        rec->detail[KVT_WLEG_KV] ? rec->detail[KVT_WLEG_KV] : rec->detail[KVT_WLEG_STATE];
    bool ok = detail == 0;
    if (ok) {
        self->st.load_chunks += rec->nkv;
        self->st.load_chunks_disk += rec->ndisk;
    }
    kvt_wcore_load_report_(self, rec->op, rec->attempt, ok, detail, rec->ndisk);
    s_transfer_done(self, rec, ok);
    if (rec->has_state)
        kvt_wcore_state_report_(self, rec->op, rec->attempt, rec->state_hash, rec->state_ran,
                                rec->detail[KVT_WLEG_STATE]);
}

// ------------------------------------------------------------- fences ----

void kvt_wcore_fence(kvt_wcore_t *self, const kvt_fence_msg_t *f, uint64_t now)
{
    kvt_opid_t op = {f->id, 1};
    if (kvt_wcore_reserve_(self, 1, op) != 0)
        return;
    if (!kvt_wcore_first_time_(self, KVT_CHAN_FENCE, op, 0, ZERO))
        return;
    uint32_t mask = f->lanes ? f->lanes : (1u << KVT_WCORE_LANES) - 1;
    kvt_wfence_t *fe = calloc(1, sizeof *fe);
    if (!fe) {
        self->st.fences_failed++;
        kvt_wcore_out_(self, KVT_CHAN_FENCE, op, 0, ZERO, false, KVT_DETAIL_NO_SPACE, 0);
        return;
    }
    fe->id = f->id;
    for (int l = 0; l < KVT_WCORE_LANES; l++)
        fe->left += (mask >> l) & 1;
    if (fe->left == 0) {
        free(fe);
        self->st.fences_ok++;
        kvt_wcore_out_(self, KVT_CHAN_FENCE, op, 0, ZERO, true, 0, 0);
        return;
    }
    fe->next = self->fences;
    self->fences = fe;
    self->owed++;
    for (int l = 0; l < KVT_WCORE_LANES; l++)
        if ((mask >> l) & 1)
            kvt_lane_runner_fence(self->c.lanes[l].runner, (uint64_t)(uintptr_t)fe, now);
}

static void s_fence_report(kvt_wcore_t *self, const kvt_lane_report_t *r)
{
    kvt_wfence_t *fe = (kvt_wfence_t *)(uintptr_t)r->id;
    if (!r->ok && fe->detail == 0)
        fe->detail = r->detail ? r->detail : KVT_DETAIL_IO;
    if (--fe->left > 0)
        return;
    kvt_wfence_t **pp = &self->fences;
    while (*pp != fe)
        pp = &(*pp)->next;
    *pp = fe->next;
    self->owed--;
    kvt_opid_t op = {fe->id, 1};
    if (fe->detail == 0)
        self->st.fences_ok++;
    else
        self->st.fences_failed++;
    kvt_wcore_out_(self, KVT_CHAN_FENCE, op, 0, ZERO, fe->detail == 0, fe->detail, 0);
    free(fe);
}

// ------------------------------------------------------- lane reports ----

//  True when a report says a job's copies may still run (it reported
//  under a running submit or a pending copy).
static bool s_may_run(const kvt_lane_report_t *r)
{
    bool stopped = r->cause == KVT_LANE_CAUSE_DEADLINE || r->cause == KVT_LANE_CAUSE_FENCE ||
                   r->cause == KVT_LANE_CAUSE_SHUTDOWN;
    return stopped && (r->stage == KVT_LANE_SUBMITTING || r->stage == KVT_LANE_PENDING);
}

static void s_job_report(kvt_wcore_t *self, const kvt_lane_report_t *r)
{
    kvt_wjob_t *job = (kvt_wjob_t *)(uintptr_t)r->id;
    kvt_wrec_t *rec = job->rec;
    //  DONE and COMMIT come after the submit returned and the memory went
    //  back: only then are the fields the submit writes read.
    bool ended = r->cause == KVT_LANE_CAUSE_DONE || r->cause == KVT_LANE_CAUSE_COMMIT ||
                 r->cause == KVT_LANE_CAUSE_SUBMIT;
    if (r->cause == KVT_LANE_CAUSE_DEADLINE || r->cause == KVT_LANE_CAUSE_FENCE)
        self->st.lane_timeouts++;
    if (r->cause == KVT_LANE_CAUSE_COPY || (ended && job->refused)) {
        self->st.copy_errors++;
        if (!self->copy_failed_logged) {
            self->copy_failed_logged = true;
            kvt_wcore_log_(self, 0, "a copy failed on lane %u: its items fail (logged once)",
                           job->lane);
        }
    }
    if (ended && job->compute_miss)
        self->st.compute_misses++;
    if (rec->kind == KVT_WREC_LOAD) {
        int leg = rec->leg[KVT_WLEG_KV] == job ? KVT_WLEG_KV : KVT_WLEG_STATE;
        uint32_t detail = r->ok ? 0 : r->detail;
        for (uint32_t i = 0; r->ok && i < job->n && !detail; i++)
            detail = job->items[i].fail;
        rec->detail[leg] = detail;
        rec->bytes += detail == 0 ? s_job_bytes(job) : 0;
        if (leg == KVT_WLEG_STATE)
            //  A state leg the lanes shut down before it ran is neutral.
            rec->state_ran = !(r->cause == KVT_LANE_CAUSE_SHUTDOWN && r->stage == KVT_LANE_QUEUED);
        rec->leg[leg] = NULL;
    } else {
        bool producer_missing = r->cause == KVT_LANE_CAUSE_SUBMIT && job->producer_missing;
        if (producer_missing) {
            self->st.producer_refused += job->n;
            if (!self->producer_logged) {
                self->producer_logged = true;
                kvt_wcore_log_(self, 1,
                               "save %llu/%u refused: producer fence missing (counted in "
                               "worker.producer_refused; logged once)",
                               (unsigned long long)rec->op.req, rec->op.gen);
            }
        }
        //  The sources are free before the store settles: source_safe goes
        //  first, so the scheduler's lease ends before the store verdict.
        kvt_wcore_safe_report_(self, rec->op, rec->attempt, rec->safe_key, !s_may_run(r),
                               r->detail);
        bool fenced = r->ok && job->fenced;
        for (uint32_t i = 0; i < job->n; i++) {
            uint32_t detail = r->ok ? job->items[i].fail : r->detail;
            if (fenced)
                self->st.fenced_saves++;
            if (detail == 0 && (job->items[i].what & KVT_WITEM_IMAGE))
                self->st.images_saved++;
            rec->all_ok = rec->all_ok && detail == 0;
            kvt_wcore_save_report_(self, rec->op, rec->attempt, rec->keys[i], detail == 0, detail,
                                   fenced);
        }
        rec->bytes += s_job_bytes(job);
        rec->leg[0] = NULL;
    }
    kvt_wjob_unref(job); //  the core's reference
    if (--rec->legs > 0)
        return;
    kvt_wcore_unlink_(self, rec);
    if (rec->kind == KVT_WREC_LOAD)
        s_load_done(self, rec);
    else
        s_transfer_done(self, rec, rec->all_ok);
    kvt_wcore_rec_free_(rec);
}

//  Joins every report the lanes made so far.
static void s_take(kvt_wcore_t *self)
{
    kvt_lane_report_t box[32];
    for (int l = 0; l < KVT_WCORE_LANES; l++) {
        uint32_t k;
        while ((k = kvt_lane_runner_take(self->c.lanes[l].runner, box, 32)) > 0)
            for (uint32_t i = 0; i < k; i++) {
                if (box[i].fence)
                    s_fence_report(self, &box[i]);
                else
                    s_job_report(self, &box[i]);
            }
    }
}

// ----------------------------------------------------------- progress ----

void kvt_wcore_poll(kvt_wcore_t *self, uint64_t now)
{
    self->now = now;
    for (int l = 0; l < KVT_WCORE_LANES; l++)
        kvt_lane_runner_tick(self->c.lanes[l].runner, now);
    s_take(self);
    //  Recovery (rule X3): a lane a fence timeout failed refuses every job
    //  until it drained (nothing held, no submit in flight, every copy
    //  ended); then it is reset here and serves again.
    for (int l = 0; l < KVT_WCORE_LANES; l++)
        if (kvt_lane_runner_reset_if_drained(self->c.lanes[l].runner, now)) {
            self->st.lane_resets++;
            kvt_wcore_log_(self, 1, "the %s lane drained after its failure: reset, serving again",
                           l == KVT_WCORE_LANE_LOAD   ? "load"
                           : l == KVT_WCORE_LANE_SAVE ? "save"
                                                      : "state");
        }
    //  Still copying: keep their leases and reservations alive, so the TTL
    //  never takes memory a copy uses.
    if (self->head && now - self->renewed_at >= self->c.renew_ns) {
        self->renewed_at = now;
        for (kvt_wrec_t *rec = self->head; rec; rec = rec->next)
            for (int l = 0; l < 2; l++)
                if (rec->leg[l])
                    kvt_wjob_renew(rec->leg[l]);
    }
    kvt_wcore_lookup_poll_(self, now);
    if (self->c.storage)
        kvt_storage_reclaim(self->c.storage);
}

uint64_t kvt_wcore_next_wake(kvt_wcore_t *self, uint64_t now)
{
    uint64_t at = UINT64_MAX;
    for (int l = 0; l < KVT_WCORE_LANES; l++) {
        uint64_t w = kvt_lane_runner_next_wake(self->c.lanes[l].runner, now);
        if (w < at)
            at = w;
    }
    //  Wake in time to renew the handles of a long copy.
    if (self->head && self->renewed_at + self->c.renew_ns < at)
        at = self->renewed_at + self->c.renew_ns;
    at = kvt_wcore_lookup_wake_(self, at);
    return at == UINT64_MAX || at >= now ? at : now;
}

uint64_t kvt_wcore_shutdown(kvt_wcore_t *self, uint64_t now)
{
    self->now = now;
    uint64_t before =
        self->st.loads_ok + self->st.loads_failed + self->st.saves_ok + self->st.saves_failed;
    for (int l = 0; l < KVT_WCORE_LANES; l++)
        kvt_lane_runner_shutdown(self->c.lanes[l].runner, now);
    s_take(self);
    //  Every lane job reported at its lane's shutdown; a report the lane
    //  could not hold (out of memory) leaves its record: it reports here.
    while (self->head) {
        //  The legs are read before any report: the last leg's report frees
        //  the record.
        kvt_wjob_t *legs[2] = {self->head->leg[0], self->head->leg[1]};
        for (int l = 0; l < 2; l++) {
            if (!legs[l])
                continue;
            kvt_lane_report_t r = {.id = (uint64_t)(uintptr_t)legs[l],
                                   .ok = false,
                                   .detail = KVT_DETAIL_SHUTDOWN,
                                   .cause = KVT_LANE_CAUSE_SHUTDOWN,
                                   .stage = KVT_LANE_PENDING};
            s_job_report(self, &r);
        }
    }
    while (self->fences) {
        kvt_lane_report_t r = {.fence = true,
                               .id = (uint64_t)(uintptr_t)self->fences,
                               .ok = false,
                               .detail = KVT_DETAIL_SHUTDOWN};
        self->fences->left = 1;
        s_fence_report(self, &r);
    }
    uint64_t items = self->st.loads_ok + self->st.loads_failed + self->st.saves_ok +
                     self->st.saves_failed - before;
    self->st.drained_at_stop += items;
    kvt_wcore_lookup_stop_(self);
    return items;
}
