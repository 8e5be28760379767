/*  kvt_worker — see kvt_worker.h. */
#include "kvt_worker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "actors/common/kvt_counters.h"
#include "actors/common/kvt_detail.h"
#include "base/kvt_hmap.h"

#define S_SEEN_RING 65536 //  item ids remembered to drop a repeated spec

#define S_TIMER_POLL 1 //  timer tag: poll pending jobs

typedef enum { J_LOAD = 1, J_SAVE = 2 } s_job_kind_t;

typedef struct s_job {
    s_job_kind_t kind;      //  load or save
    kvt_opid_t op;          //  operation id
    uint32_t attempt;       //  the spec's attempt (part of every report key)
    uint32_t nchunks;       //  chunks in the job
    kvt_hash_t *keys;       //  chunk keys (save: one report per key)
    kvt_lease_t *leases;    //  load: one lease per chunk
    kvt_resv_t *resvs;      //  save: one reservation per chunk (id 0 = nothing to commit)
    uint32_t ndisk;         //  load: chunks that came from the disk
    kvt_gpu_event_t *event; //  marks the end of the job's copies
    uint64_t renewed_at;    //  when its handles' TTL was last restarted
    struct s_job *next;     //  FIFO of pending jobs
} s_job_t;

typedef struct {
    kvt_worker_args_t a;       //  configuration (borrowed pointers)
    kvt_aid_t agg;             //  aggregator id
    kvt_holder_t holder;       //  pool holder id of this worker
    kvt_gpu_stream_t *load_s;  //  stream for loads
    kvt_gpu_stream_t *save_s;  //  stream for saves
    kvt_gpu_event_pool_t *evp; //  reusable events
    size_t chunk_bytes;        //  bytes of one chunk buffer
    uint32_t bpc;              //  blocks per chunk
    s_job_t *head;             //  oldest pending job
    s_job_t *tail;             //  newest pending job
    uint32_t pending;          //  jobs pending
    uint64_t poll_timer;       //  armed poll timer id (0 = none)
    uint64_t poll_at;          //  driver time the armed timer fires
    kvt_hmap_t *seen;          //  ids of items this worker accepted (in flight or settled)
    kvt_hash_t *seen_ring;     //  the same ids in arrival order, to forget the oldest
    uint32_t seen_pos;         //  next ring slot
    uint32_t seen_used;        //  ring entries in use
    bool copy_failed_logged;   //  a failed copy stream was logged (once)
    //  counters (reported in Stats)
    uint64_t loads_ok;         //  load completions ok
    uint64_t loads_failed;     //  load completions failed
    uint64_t loads_refused;    //  load specs refused by validation
    uint64_t load_chunks;      //  chunks restored
    uint64_t load_chunks_disk; //  ... of which came from the disk
    uint64_t saves_ok;         //  chunk saves stored
    uint64_t saves_present;    //  chunk saves the pool already held (refreshed)
    uint64_t saves_failed;     //  chunk saves failed
    uint64_t saves_refused;    //  save specs refused by validation
    uint64_t copy_errors;      //  device copies that failed
    uint64_t drained_at_stop;  //  items reported failed at shutdown
    uint64_t duplicates;       //  items dropped because this worker already accepted them
    uint64_t quarantined;      //  leases / reservations kept because their copy could not finish
} s_worker_t;

//  Sends one Completion. `lower`: for a load, the chunks read from the disk.
static void s_report_lower(kvt_ctx_t *ctx, s_worker_t *self, uint8_t chan, kvt_opid_t op,
                           uint32_t attempt, kvt_hash_t key, bool ok, uint32_t detail,
                           uint32_t lower)
{
    kvt_msg_t m;
    memset(&m, 0, sizeof m);
    m.kind = KVT_MSG_COMPLETION;
    m.u.completion.chan = chan;
    m.u.completion.op = op;
    m.u.completion.key = key;
    m.u.completion.rank = self->a.rank;
    m.u.completion.ok = ok;
    m.u.completion.detail = ok ? KVT_DETAIL_OK : detail;
    m.u.completion.attempt = attempt;
    m.u.completion.lower = lower;
    if (kvt_ctx_send(ctx, self->agg, &m) != 0)
        kvt_ctx_log(ctx, 0, "cannot send Completion for %llu/%u", (unsigned long long)op.req,
                    op.gen);
}

static void s_report(kvt_ctx_t *ctx, s_worker_t *self, uint8_t chan, kvt_opid_t op,
                     uint32_t attempt, kvt_hash_t key, bool ok, uint32_t detail)
{
    s_report_lower(ctx, self, chan, op, attempt, key, ok, detail, 0);
}

//  An item is a load (op, attempt) or one chunk of a save (op, key,
//  attempt). A spec that reaches the worker twice (a duplicated message)
//  must not run twice: a second scatter could land in blocks that belong to
//  another request by then, and a second save would race the first one's
//  reservation. Returns true when the item is new (and remembers it).
static bool s_first_time(s_worker_t *self, uint8_t chan, kvt_opid_t op, uint32_t attempt,
                         kvt_hash_t key)
{
    uint64_t in[6] = {chan, op.req, op.gen, attempt, key.hi, key.lo};
    XXH128_hash_t h = XXH3_128bits(in, sizeof in);
    kvt_hash_t id = {h.high64, h.low64};
    if (kvt_hmap_get(self->seen, id, NULL)) {
        self->duplicates++;
        return false;
    }
    if (self->seen_used == S_SEEN_RING) {
        kvt_hmap_del(self->seen, self->seen_ring[self->seen_pos], NULL);
        self->seen_used--;
    }
    if (kvt_hmap_put(self->seen, id, 1) == 0) {
        self->seen_ring[self->seen_pos] = id;
        self->seen_pos = (self->seen_pos + 1) % S_SEEN_RING;
        self->seen_used++;
    }
    return true;
}

//  Under SIM, disk writes queued by this handler (write-through, write-back
//  of an eviction, a promotion) finish before it returns, so the disk tier's
//  contents do not depend on I/O thread timing.
static void s_sync_disk(s_worker_t *self)
{
    if (self->a.sync_disk && self->a.storage)
        kvt_storage_flush(self->a.storage);
}

//  True when a synchronize left nothing running (done, landed ahead of the
//  SIM clock, or failed); false when copies are stuck behind a stall.
static bool s_drained(int st)
{
    return st == KVT_GPU_OK || st == KVT_GPU_FORCED || st == KVT_GPU_EFAULT;
}

static void s_job_free(s_worker_t *self, s_job_t *job)
{
    if (job->event)
        kvt_gpu_event_pool_put(self->evp, &job->event);
    free(job->keys);
    free(job->leases);
    free(job->resvs);
    free(job);
}

//  Validates a spec's shape against the geometry (rule L4: refuse, never
//  clamp). Returns NULL or what was wrong.
static const char *s_validate(s_worker_t *self, const kvt_load_spec_t *sp)
{
    uint32_t cs = self->a.chunk_size, bs = self->a.block_size;
    if (sp->start % cs || sp->end % cs || sp->start >= sp->end)
        return "range is not a non-empty span on the chunk grid";
    if (sp->nkeys != (sp->end - sp->start) / cs)
        return "key count does not match the range";
    if (sp->nblocks != (sp->end - sp->start) / bs)
        return "block count does not match the range";
    uint32_t nb = kvt_gpu_num_blocks(self->a.gpu);
    for (uint32_t i = 0; i < sp->nblocks; i++)
        if (sp->blocks[i] >= nb)
            return "block id beyond the device's blocks";
    return NULL;
}

static void s_enqueue(kvt_ctx_t *ctx, s_worker_t *self, s_job_t *job);

// -------------------------------------------------------------- loads ----

static void s_load(kvt_ctx_t *ctx, s_worker_t *self, const kvt_load_spec_t *sp)
{
    kvt_hash_t zero = {0, 0};
    const char *bad = s_validate(self, sp);
    if (bad) {
        kvt_ctx_log(ctx, 1, "refusing load %llu/%u [%u,%u): %s", (unsigned long long)sp->op.req,
                    sp->op.gen, sp->start, sp->end, bad);
        self->loads_refused++;
        self->loads_failed++;
        s_report(ctx, self, KVT_CHAN_LOAD, sp->op, sp->attempt, zero, false, KVT_DETAIL_INVALID);
        return;
    }
    if (!self->a.storage) {
        self->loads_failed++;
        s_report(ctx, self, KVT_CHAN_LOAD, sp->op, sp->attempt, zero, false, KVT_DETAIL_MISS);
        return;
    }
    s_job_t *job = calloc(1, sizeof *job);
    if (job)
        job->leases = calloc(sp->nkeys, sizeof(kvt_lease_t));
    if (!job || !job->leases) {
        free(job);
        self->loads_failed++;
        s_report(ctx, self, KVT_CHAN_LOAD, sp->op, sp->attempt, zero, false, KVT_DETAIL_NO_SPACE);
        return;
    }
    job->kind = J_LOAD;
    job->op = sp->op;
    job->attempt = sp->attempt;
    job->nchunks = sp->nkeys;
    uint32_t detail = KVT_DETAIL_OK;
    bool queued = false;
    //  Deepest chunk first: each get refreshes its object, so the prefix
    //  ends up youngest and eviction takes suffixes first.
    for (uint32_t c = sp->nkeys; c-- > 0;) {
        kvt_obj_view_t view;
        int rc = kvt_storage_get(self->a.storage, self->a.ns, sp->keys[c], KVT_OBJ_KV, self->holder,
                                 &job->leases[c], &view);
        s_sync_disk(self); //  a promotion may have evicted (write-back) under SIM
        if (rc != KVT_STORE_OK) {
            job->leases[c].id = 0;
            detail = kvt_detail_of_store(rc);
            break;
        }
        if (view.size < self->chunk_bytes) {
            detail = KVT_DETAIL_INVALID;
            break;
        }
        job->ndisk += view.tier == KVT_TIER_DISK;
        rc = kvt_gpu_scatter(self->load_s, sp->blocks + (size_t)c * self->bpc, self->bpc, view.ptr,
                             self->chunk_bytes);
        if (rc != KVT_GPU_OK) {
            kvt_ctx_log(ctx, 1, "load %llu/%u: scatter refused: %s", (unsigned long long)sp->op.req,
                        sp->op.gen, kvt_gpu_last_error());
            detail = rc == KVT_GPU_EINVAL ? KVT_DETAIL_INVALID : KVT_DETAIL_IO;
            self->copy_errors++;
            queued = queued || rc != KVT_GPU_EINVAL;
            break;
        }
        queued = true;
    }
    if (detail == KVT_DETAIL_OK) {
        job->event = kvt_gpu_event_pool_get(self->evp);
        if (!job->event || kvt_gpu_event_record(job->event, self->load_s) != KVT_GPU_OK)
            detail = KVT_DETAIL_IO;
    }
    if (detail != KVT_DETAIL_OK) {
        //  Copies already queued read leased bytes: the leases go only once
        //  they finished (the report never precedes them, rule L2). If they
        //  cannot finish (a stalled stream), the leases are kept: the TTL
        //  fails the bytes' next reader rather than a copy reading reused
        //  memory.
        bool drained = !queued || s_drained(kvt_gpu_stream_synchronize(self->load_s));
        for (uint32_t i = 0; i < sp->nkeys; i++)
            if (job->leases[i].id != 0) {
                if (drained)
                    kvt_storage_release(self->a.storage, &job->leases[i]);
                else
                    self->quarantined++;
            }
        s_job_free(self, job);
        self->loads_failed++;
        s_report(ctx, self, KVT_CHAN_LOAD, sp->op, sp->attempt, zero, false, detail);
        return;
    }
    s_enqueue(ctx, self, job);
}

static int s_on_load(kvt_ctx_t *ctx, void *selfp, kvt_aid_t from, kvt_msg_t *msg)
{
    s_worker_t *self = selfp;
    const kvt_load_spec_t *sp = &msg->u.load_spec;
    kvt_hash_t zero = {0, 0};
    if (!s_first_time(self, KVT_CHAN_LOAD, sp->op, sp->attempt, zero)) {
        kvt_ctx_log(ctx, 1, "dropping a repeated load %llu/%u (attempt %u)",
                    (unsigned long long)sp->op.req, sp->op.gen, sp->attempt);
        return 0;
    }
    s_load(ctx, self, sp);
    s_sync_disk(self);
    return 0;
}

// -------------------------------------------------------------- saves ----

static void s_save(kvt_ctx_t *ctx, s_worker_t *self, const kvt_save_spec_t *sp)
{
    const char *bad = s_validate(self, sp);
    if (bad) {
        kvt_ctx_log(ctx, 1, "refusing save %llu/%u [%u,%u): %s", (unsigned long long)sp->op.req,
                    sp->op.gen, sp->start, sp->end, bad);
        self->saves_refused++;
        //  Every chunk key in the spec was dispatched: report each once.
        for (uint32_t i = 0; i < sp->nkeys; i++) {
            if (!s_first_time(self, KVT_CHAN_SAVE, sp->op, sp->attempt, sp->keys[i]))
                continue;
            self->saves_failed++;
            s_report(ctx, self, KVT_CHAN_SAVE, sp->op, sp->attempt, sp->keys[i], false,
                     KVT_DETAIL_INVALID);
        }
        return;
    }
    s_job_t *job = calloc(1, sizeof *job);
    if (job) {
        job->keys = malloc((size_t)sp->nkeys * sizeof(kvt_hash_t));
        job->resvs = calloc(sp->nkeys, sizeof(kvt_resv_t));
    }
    if (!job || !job->keys || !job->resvs) {
        if (job)
            s_job_free(self, job);
        for (uint32_t i = 0; i < sp->nkeys; i++) {
            if (!s_first_time(self, KVT_CHAN_SAVE, sp->op, sp->attempt, sp->keys[i]))
                continue;
            self->saves_failed++;
            s_report(ctx, self, KVT_CHAN_SAVE, sp->op, sp->attempt, sp->keys[i], false,
                     KVT_DETAIL_NO_SPACE);
        }
        return;
    }
    job->kind = J_SAVE;
    job->op = sp->op;
    job->attempt = sp->attempt;
    uint32_t queued = 0;
    for (uint32_t c = 0; c < sp->nkeys; c++) {
        kvt_hash_t key = sp->keys[c];
        if (!s_first_time(self, KVT_CHAN_SAVE, sp->op, sp->attempt, key)) {
            kvt_ctx_log(ctx, 1, "dropping a repeated save of a chunk of %llu/%u (attempt %u)",
                        (unsigned long long)sp->op.req, sp->op.gen, sp->attempt);
            continue;
        }
        if (!self->a.storage) {
            self->saves_failed++;
            s_report(ctx, self, KVT_CHAN_SAVE, sp->op, sp->attempt, key, false,
                     KVT_DETAIL_NO_SPACE);
            continue;
        }
        kvt_resv_t resv = {0};
        void *ptr = NULL;
        int rc = kvt_storage_reserve(self->a.storage, self->a.ns, key, KVT_OBJ_KV,
                                     self->chunk_bytes, self->holder, &resv, &ptr);
        s_sync_disk(self); //  the reservation may have evicted (write-back) under SIM
        if (rc == KVT_STORE_SKIPPED) {
            self->saves_present++;
            self->saves_ok++;
            s_report(ctx, self, KVT_CHAN_SAVE, sp->op, sp->attempt, key, true, KVT_DETAIL_OK);
            continue;
        }
        if (rc != KVT_STORE_OK) {
            self->saves_failed++;
            s_report(ctx, self, KVT_CHAN_SAVE, sp->op, sp->attempt, key, false,
                     rc == KVT_STORE_DUPLICATE ? KVT_DETAIL_DUPLICATE : kvt_detail_of_store(rc));
            continue;
        }
        rc = kvt_gpu_gather(self->save_s, sp->blocks + (size_t)c * self->bpc, self->bpc, ptr,
                            self->chunk_bytes);
        if (rc != KVT_GPU_OK) {
            kvt_ctx_log(ctx, 1, "save %llu/%u: gather refused: %s", (unsigned long long)sp->op.req,
                        sp->op.gen, kvt_gpu_last_error());
            //  A device error may leave part of the copy running into the
            //  reservation: it is given back only once nothing writes it.
            if (rc == KVT_GPU_EINVAL || s_drained(kvt_gpu_stream_synchronize(self->save_s)))
                kvt_storage_abort(self->a.storage, &resv);
            else
                self->quarantined++;
            self->copy_errors++;
            self->saves_failed++;
            s_report(ctx, self, KVT_CHAN_SAVE, sp->op, sp->attempt, key, false,
                     rc == KVT_GPU_EINVAL ? KVT_DETAIL_INVALID : KVT_DETAIL_IO);
            continue;
        }
        job->keys[queued] = key;
        job->resvs[queued] = resv;
        queued++;
    }
    job->nchunks = queued;
    if (queued == 0) {
        s_job_free(self, job);
        return;
    }
    job->event = kvt_gpu_event_pool_get(self->evp);
    if (!job->event || kvt_gpu_event_record(job->event, self->save_s) != KVT_GPU_OK) {
        //  Without an event the gathers cannot be tracked: wait for them,
        //  then discard (their bytes are not trusted) and report.
        bool drained = s_drained(kvt_gpu_stream_synchronize(self->save_s));
        for (uint32_t i = 0; i < queued; i++) {
            if (drained)
                kvt_storage_abort(self->a.storage, &job->resvs[i]);
            else
                self->quarantined++;
            self->saves_failed++;
            s_report(ctx, self, KVT_CHAN_SAVE, sp->op, sp->attempt, job->keys[i], false,
                     KVT_DETAIL_IO);
        }
        s_job_free(self, job);
        return;
    }
    s_enqueue(ctx, self, job);
}

static int s_on_save(kvt_ctx_t *ctx, void *selfp, kvt_aid_t from, kvt_msg_t *msg)
{
    s_worker_t *self = selfp;
    s_save(ctx, self, &msg->u.save_spec);
    s_sync_disk(self);
    return 0;
}

// ----------------------------------------------------------- progress ----

//  Settles a job whose copies ended with status `st` (0 ok). When the
//  copies succeeded but the store refuses the lease / reservation (the TTL
//  reclaimed it while the copy ran), the item fails with KVT_DETAIL_TIMEOUT.
//  `drained` false: the copies may still be running (a stalled stream at
//  shutdown), so the memory they touch is kept (quarantined), never given
//  back; the items are still reported, failed.
static void s_settle(kvt_ctx_t *ctx, s_worker_t *self, s_job_t *job, int st, uint32_t fail_detail,
                     bool drained)
{
    kvt_hash_t zero = {0, 0};
    if (job->kind == J_LOAD) {
        bool ok = st == KVT_GPU_OK && drained;
        //  A lease reclaimed by the TTL means the bytes may have been reused
        //  while they were copied: the load must not be trusted.
        for (uint32_t i = 0; i < job->nchunks; i++) {
            if (!drained) {
                self->quarantined++;
                continue;
            }
            if (kvt_storage_release(self->a.storage, &job->leases[i]) != KVT_STORE_OK)
                ok = false;
        }
        if (ok) {
            self->loads_ok++;
            self->load_chunks += job->nchunks;
            self->load_chunks_disk += job->ndisk;
        } else {
            self->loads_failed++;
            if (st != KVT_GPU_OK)
                self->copy_errors++;
        }
        s_report_lower(ctx, self, KVT_CHAN_LOAD, job->op, job->attempt, zero, ok,
                       st == KVT_GPU_OK ? KVT_DETAIL_TIMEOUT : fail_detail, ok ? job->ndisk : 0);
        return;
    }
    //  Deepest chunk first: each commit puts its object at the young end, so
    //  the prefix ends up youngest.
    for (uint32_t i = job->nchunks; i-- > 0;) {
        bool ok = false;
        if (!drained)
            self->quarantined++;
        else if (st == KVT_GPU_OK)
            ok = kvt_storage_commit(self->a.storage, &job->resvs[i], NULL) == KVT_STORE_OK;
        else
            kvt_storage_abort(self->a.storage, &job->resvs[i]);
        s_sync_disk(self); //  write-through queued by the commit
        if (ok)
            self->saves_ok++;
        else
            self->saves_failed++;
        s_report(ctx, self, KVT_CHAN_SAVE, job->op, job->attempt, job->keys[i], ok,
                 st == KVT_GPU_OK ? KVT_DETAIL_TIMEOUT : fail_detail);
    }
    if (st != KVT_GPU_OK)
        self->copy_errors++;
}

//  Arms the poll timer. Under SIM it wakes exactly when the earliest
//  pending job's copies land (re-arming earlier when a new job lands
//  first); under LIVE it polls every poll_ns while jobs are pending.
static void s_arm(kvt_ctx_t *ctx, s_worker_t *self)
{
    if (!self->head)
        return;
    uint64_t now = kvt_ctx_now(ctx);
    uint64_t at = now + self->a.poll_ns;
    if (kvt_gpu_is_sim(self->a.gpu)) {
        uint64_t eta = UINT64_MAX;
        for (s_job_t *j = self->head; j; j = j->next) {
            uint64_t e = kvt_gpu_event_eta(j->event);
            if (e < eta)
                eta = e;
        }
        if (eta != UINT64_MAX)
            at = eta > now ? eta : now;
        //  Wake in time to renew the handles of a long copy.
        if (at > now + self->a.renew_ns)
            at = now + self->a.renew_ns;
    }
    if (self->poll_timer) {
        if (self->poll_at <= at)
            return;
        kvt_ctx_cancel(ctx, self->poll_timer);
    }
    self->poll_at = at;
    self->poll_timer = kvt_ctx_timer(ctx, at - now, S_TIMER_POLL);
}

static void s_poll(kvt_ctx_t *ctx, s_worker_t *self)
{
    s_job_t **pp = &self->head;
    s_job_t *prev = NULL;
    while (*pp) {
        s_job_t *job = *pp;
        int st = kvt_gpu_event_query(job->event);
        if (st == KVT_GPU_NOT_READY) {
            //  Still copying: keep its leases and reservations alive (once
            //  a second at most), so the TTL never takes memory a copy uses.
            uint64_t now = kvt_ctx_now(ctx);
            if (now - job->renewed_at >= self->a.renew_ns) {
                job->renewed_at = now;
                for (uint32_t i = 0; i < job->nchunks; i++) {
                    if (job->kind == J_LOAD)
                        kvt_pool_lease_renew(kvt_storage_pool(self->a.storage), job->leases[i]);
                    else
                        kvt_storage_resv_renew(self->a.storage, job->resvs[i]);
                }
            }
            prev = job;
            pp = &job->next;
            continue;
        }
        *pp = job->next;
        if (self->tail == job)
            self->tail = prev;
        self->pending--;
        if (st != KVT_GPU_OK && !self->copy_failed_logged) {
            kvt_ctx_log(ctx, 0, "a copy failed (%s): this rank's items fail until it is reset",
                        kvt_gpu_strerror(st));
            self->copy_failed_logged = true;
        }
        s_settle(ctx, self, job, st, KVT_DETAIL_IO, true);
        s_job_free(self, job);
    }
    if (self->a.storage)
        kvt_storage_reclaim(self->a.storage);
    s_sync_disk(self);
    s_arm(ctx, self);
}

static void s_enqueue(kvt_ctx_t *ctx, s_worker_t *self, s_job_t *job)
{
    job->next = NULL;
    job->renewed_at = kvt_ctx_now(ctx);
    if (self->tail)
        self->tail->next = job;
    else
        self->head = job;
    self->tail = job;
    self->pending++;
    s_arm(ctx, self);
}

static void s_on_timer(kvt_ctx_t *ctx, void *selfp, uint64_t tag)
{
    s_worker_t *self = selfp;
    if (tag != S_TIMER_POLL)
        return;
    self->poll_timer = 0;
    s_poll(ctx, self);
}

// -------------------------------------------------------------- stats ----

static int s_on_stats(kvt_ctx_t *ctx, void *selfp, kvt_aid_t from, kvt_msg_t *msg)
{
    s_worker_t *self = selfp;
    if (!msg->u.stats.request)
        return 0;
    kvt_counter_t c[KVT_MSG_MAX_STATS];
    uint32_t n = 0, cap = KVT_MSG_MAX_STATS;
    kvt_counter_add(c, &n, cap, "worker.loads_ok", self->loads_ok);
    kvt_counter_add(c, &n, cap, "worker.loads_failed", self->loads_failed);
    kvt_counter_add(c, &n, cap, "worker.loads_refused", self->loads_refused);
    kvt_counter_add(c, &n, cap, "worker.load_chunks", self->load_chunks);
    kvt_counter_add(c, &n, cap, "worker.load_chunks_disk", self->load_chunks_disk);
    kvt_counter_add(c, &n, cap, "worker.saves_ok", self->saves_ok);
    kvt_counter_add(c, &n, cap, "worker.saves_present", self->saves_present);
    kvt_counter_add(c, &n, cap, "worker.saves_failed", self->saves_failed);
    kvt_counter_add(c, &n, cap, "worker.saves_refused", self->saves_refused);
    kvt_counter_add(c, &n, cap, "worker.copy_errors", self->copy_errors);
    kvt_counter_add(c, &n, cap, "worker.pending", self->pending);
    kvt_counter_add(c, &n, cap, "worker.drained_at_stop", self->drained_at_stop);
    kvt_counter_add(c, &n, cap, "worker.duplicates", self->duplicates);
    kvt_counter_add(c, &n, cap, "worker.quarantined", self->quarantined);
    if (self->a.storage) {
        size_t total = kvt_storage_counters(self->a.storage, c + n, cap - n);
        n += total < cap - n ? (uint32_t)total : cap - n;
    }
    return kvt_counters_reply(ctx, from, c, n);
}

// ---------------------------------------------------------- lifecycle ----

static void *s_init(kvt_ctx_t *ctx, void *args)
{
    s_worker_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->a = *(const kvt_worker_args_t *)args;
    if (self->a.poll_ns == 0)
        self->a.poll_ns = 20000;
    if (self->a.renew_ns == 0)
        self->a.renew_ns = 1000000000ull;
    self->agg = kvt_ctx_lookup(ctx, self->a.aggregator);
    if (self->agg == KVT_AID_NONE) {
        kvt_ctx_log(ctx, 0, "no aggregator actor named '%s'", self->a.aggregator);
        goto fail;
    }
    self->bpc = self->a.chunk_size / self->a.block_size;
    self->chunk_bytes = (size_t)self->bpc * kvt_gpu_block_bytes(self->a.gpu);
    char name[64];
    snprintf(name, sizeof name, "worker.%u", self->a.rank);
    if (self->a.storage &&
        kvt_pool_holder_add(kvt_storage_pool(self->a.storage), name, &self->holder) != 0) {
        kvt_ctx_log(ctx, 0, "cannot register a pool holder");
        goto fail;
    }
    snprintf(name, sizeof name, "load.%u", self->a.rank);
    self->load_s = kvt_gpu_stream_new(self->a.gpu, name);
    snprintf(name, sizeof name, "save.%u", self->a.rank);
    self->save_s = kvt_gpu_stream_new(self->a.gpu, name);
    self->evp = kvt_gpu_event_pool_new(self->a.gpu);
    self->seen = kvt_hmap_new(S_SEEN_RING, true);
    self->seen_ring = malloc(S_SEEN_RING * sizeof(kvt_hash_t));
    if (!self->seen || !self->seen_ring) {
        kvt_ctx_log(ctx, 0, "out of memory");
        goto fail;
    }
    if (!self->load_s || !self->save_s || !self->evp) {
        kvt_ctx_log(ctx, 0, "cannot create streams: %s", kvt_gpu_last_error());
        goto fail;
    }
    return self;
fail:
    kvt_gpu_event_pool_destroy(&self->evp);
    kvt_hmap_destroy(&self->seen);
    free(self->seen_ring);
    kvt_gpu_stream_destroy(&self->load_s);
    kvt_gpu_stream_destroy(&self->save_s);
    if (self->holder)
        kvt_pool_holder_remove(kvt_storage_pool(self->a.storage), self->holder);
    free(self);
    return NULL;
}

static void s_stop(kvt_ctx_t *ctx, void *selfp)
{
    s_worker_t *self = selfp;
    //  Drain before freeing events or buffers (rule X4): wait for every
    //  queued copy, then settle each pending item as failed so it still
    //  reports exactly once.
    //  A stream that cannot drain (stalled) keeps its jobs' memory: the
    //  copies may still touch it (quarantined, counted, logged).
    bool load_drained = s_drained(kvt_gpu_stream_synchronize(self->load_s));
    bool save_drained = s_drained(kvt_gpu_stream_synchronize(self->save_s));
    while (self->head) {
        s_job_t *job = self->head;
        self->head = job->next;
        self->drained_at_stop += job->kind == J_LOAD ? 1 : job->nchunks;
        s_settle(ctx, self, job, KVT_GPU_EFAULT, KVT_DETAIL_SHUTDOWN,
                 job->kind == J_LOAD ? load_drained : save_drained);
        s_job_free(self, job);
    }
    //  Disk writes this worker's commits queued (write-through, write-back)
    //  hold pool leases until their file is written: wait for them, so the
    //  tier is settled once the worker stopped.
    if (self->a.storage)
        kvt_storage_flush(self->a.storage);
    if (self->quarantined)
        kvt_ctx_log(ctx, 0, "%llu leases / reservations kept: their copies never finished",
                    (unsigned long long)self->quarantined);
    if (self->drained_at_stop)
        kvt_ctx_log(ctx, 1, "reported %llu pending items failed at shutdown",
                    (unsigned long long)self->drained_at_stop);
    kvt_gpu_event_pool_destroy(&self->evp);
    kvt_hmap_destroy(&self->seen);
    free(self->seen_ring);
    kvt_gpu_stream_destroy(&self->load_s);
    kvt_gpu_stream_destroy(&self->save_s);
    if (self->holder)
        kvt_pool_holder_remove(kvt_storage_pool(self->a.storage), self->holder);
    free(self);
}

const kvt_actor_class_t kvt_worker_class = {
    .type = "worker",
    .init = s_init,
    .stop = s_stop,
    .on =
        {
            [KVT_MSG_LOAD_SPEC] = s_on_load,
            [KVT_MSG_SAVE_SPEC] = s_on_save,
            [KVT_MSG_STATS] = s_on_stats,
        },
    .on_timer = s_on_timer,
};
