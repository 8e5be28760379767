/*  kvt_wcore — see kvt_wcore.h. Loads, saves and their jobs, the outbox,
    the lifecycle; touches and lookups are in kvt_wcore_probe.c. */
#include "kvt_wcore.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "actors/common/kvt_detail.h"
#include "kvt_wcore_int.h"

typedef enum { J_LOAD = 1, J_SAVE = 2 } s_kind_t;

//  A dispatched spec whose copies are queued: it settles when its fence
//  (the event recorded after them, else its stream) says they finished.
typedef struct s_job {
    s_kind_t kind;            //  load or save
    kvt_opid_t op;            //  operation id
    uint32_t attempt;         //  the spec's attempt (part of every report key)
    uint32_t n;               //  load: chunks; save: items held (one reservation each)
    uint32_t items;           //  reports it owes (load: 1; save: n)
    kvt_lease_t *leases;      //  load: one lease per chunk (id 0 = none taken)
    uint32_t detail;          //  load: the failure decided while queueing (0 = none)
    uint32_t ndisk;           //  load: chunks that came from the disk
    kvt_hash_t *keys;         //  save: the chunk key of each item
    kvt_resv_t *resvs;        //  save: the reservation of each item
    uint32_t *fail;           //  save: the item's failure decided while queueing (0 = none)
    kvt_gpu_stream_t *stream; //  the stream its copies run on
    kvt_gpu_event_t *event;   //  marks the end of its copies; NULL: the stream is queried
    uint64_t renewed_at;      //  when its handles' TTL was last restarted
    struct s_job *next;       //  FIFO of pending jobs
} s_job_t;

void kvt_wcore_log_(kvt_wcore_t *self, int level, const char *fmt, ...)
{
    if (!self->c.log)
        return;
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    self->c.log(self->c.log_arg, level, line);
}

// ------------------------------------------------------------- outbox ----

//  Makes room for k more reports beyond the outbox and what pending jobs
//  owe. A spec whose reports cannot be held is dropped unreported (counted,
//  logged; the aggregator settles the key failed by its timeout, rule A4).
int kvt_wcore_reserve_(kvt_wcore_t *self, uint32_t k, kvt_opid_t op)
{
    uint64_t need = (uint64_t)self->nout + self->owed + k;
    if (need <= self->outcap)
        return 0;
    uint64_t cap = self->outcap ? self->outcap : 16;
    while (cap < need)
        cap *= 2;
    kvt_completion_t *out = cap <= UINT32_MAX ? realloc(self->out, cap * sizeof *out) : NULL;
    if (!out) {
        self->st.unreported += k;
        kvt_wcore_log_(self, 0, "out of memory: %u item(s) of %llu/%u dropped unreported", k,
                       (unsigned long long)op.req, op.gen);
        return -1;
    }
    self->out = out;
    self->outcap = (uint32_t)cap;
    return 0;
}

kvt_completion_t *kvt_wcore_out_(kvt_wcore_t *self, uint8_t chan, kvt_opid_t op, uint32_t attempt,
                                 kvt_hash_t key, bool ok, uint32_t detail, uint32_t lower)
{
    assert(self->nout < self->outcap);
    kvt_completion_t *c = &self->out[self->nout++];
    memset(c, 0, sizeof *c);
    c->epoch = self->c.epoch;
    c->chan = chan;
    c->op = op;
    c->key = key;
    c->rank = self->c.rank;
    c->ok = ok;
    c->detail = ok ? KVT_DETAIL_OK : detail;
    c->attempt = attempt;
    c->lower = ok ? lower : 0;
    return c;
}

static void s_load_report(kvt_wcore_t *self, kvt_opid_t op, uint32_t attempt, bool ok,
                          uint32_t detail, uint32_t lower)
{
    kvt_hash_t zero = {0, 0};
    if (ok)
        self->st.loads_ok++;
    else
        self->st.loads_failed++;
    kvt_wcore_out_(self, KVT_CHAN_LOAD, op, attempt, zero, ok, detail, lower);
}

static void s_save_report(kvt_wcore_t *self, kvt_opid_t op, uint32_t attempt, kvt_hash_t key,
                          bool ok, uint32_t detail)
{
    if (ok)
        self->st.saves_ok++;
    else
        self->st.saves_failed++;
    kvt_wcore_out_(self, KVT_CHAN_SAVE, op, attempt, key, ok, detail, 0);
}

const kvt_completion_t *kvt_wcore_outbox(const kvt_wcore_t *self, uint32_t *n)
{
    *n = self->nout;
    return self->out;
}

void kvt_wcore_outbox_clear(kvt_wcore_t *self)
{
    self->nout = 0;
    for (uint32_t i = 0; i < self->nimgs; i++)
        free(self->imgs[i]);
    self->nimgs = 0;
}

// -------------------------------------------------------- validation ----

//  An item is a load (op, attempt) or one chunk of a save (op, key,
//  attempt). A spec that reaches the worker twice (a duplicated message)
//  must not run twice: a second scatter could land in blocks that belong to
//  another request by then, and a second save would race the first one's
//  reservation. Returns true when the item is new (and remembers it).
bool kvt_wcore_first_time_(kvt_wcore_t *self, uint8_t chan, kvt_opid_t op, uint32_t attempt,
                           kvt_hash_t key)
{
    uint64_t in[6] = {chan, op.req, op.gen, attempt, key.hi, key.lo};
    XXH128_hash_t h = XXH3_128bits(in, sizeof in);
    kvt_hash_t id = {h.high64, h.low64};
    if (!kvt_seen_add(self->seen, id)) {
        self->st.duplicates++;
        return false;
    }
    return true;
}

const char *kvt_wcore_check_spec(kvt_wcore_t *self, const kvt_load_spec_t *sp)
{
    uint32_t cs = self->c.chunk_size, bs = self->c.block_size;
    if (sp->start % cs || sp->end % cs || sp->start >= sp->end)
        return "range is not a non-empty span on the chunk grid";
    if (sp->nkeys != (sp->end - sp->start) / cs)
        return "key count does not match the range";
    if (sp->nblocks != (sp->end - sp->start) / bs)
        return "block count does not match the range";
    const char *bad = NULL;
    uint32_t i = 0;
    for (; i < sp->nblocks && !bad; i++) {
        uint32_t b = sp->blocks[i];
        if (b >= self->nblocks)
            bad = "block id beyond the device's blocks";
        else if (self->marks[b / 64] & (1ull << (b % 64)))
            bad = "block id named twice";
        else
            self->marks[b / 64] |= 1ull << (b % 64);
    }
    //  Clear exactly the bits this spec set (the bad id's, if any, was not).
    uint32_t set = bad ? i - 1 : i;
    for (uint32_t j = 0; j < set; j++)
        self->marks[sp->blocks[j] / 64] &= ~(1ull << (sp->blocks[j] % 64));
    return bad;
}

// --------------------------------------------------------------- jobs ----

static s_job_t *s_job_new(s_kind_t kind, const kvt_load_spec_t *sp)
{
    s_job_t *job = calloc(1, sizeof *job);
    if (!job)
        return NULL;
    job->kind = kind;
    job->op = sp->op;
    job->attempt = sp->attempt;
    bool ok;
    if (kind == J_LOAD) {
        job->leases = calloc(sp->nkeys, sizeof(kvt_lease_t));
        ok = job->leases != NULL;
    } else {
        job->keys = calloc(sp->nkeys, sizeof(kvt_hash_t));
        job->resvs = calloc(sp->nkeys, sizeof(kvt_resv_t));
        job->fail = calloc(sp->nkeys, sizeof(uint32_t));
        ok = job->keys && job->resvs && job->fail;
    }
    if (!ok) {
        free(job->leases);
        free(job->keys);
        free(job->resvs);
        free(job->fail);
        free(job);
        return NULL;
    }
    return job;
}

static void s_job_free(kvt_wcore_t *self, s_job_t *job)
{
    if (job->event)
        kvt_gpu_event_pool_put(self->c.evp, &job->event);
    free(job->leases);
    free(job->keys);
    free(job->resvs);
    free(job->fail);
    free(job);
}

//  Settles a job whose copies ended with status `st` (KVT_GPU_OK: they
//  finished and succeeded); `st_detail` is the failure to report when they
//  did not. `drained` false: copies may still be running (a stream that did
//  not drain at shutdown), so the memory they touch is kept (quarantined),
//  never given back; the items are still reported, failed.
static void s_settle(kvt_wcore_t *self, s_job_t *job, int st, uint32_t st_detail, bool drained)
{
    if (job->kind == J_LOAD) {
        uint32_t detail = job->detail ? job->detail : st != KVT_GPU_OK ? st_detail : KVT_DETAIL_OK;
        if (!drained)
            detail = st_detail;
        for (uint32_t i = 0; i < job->n; i++) {
            if (job->leases[i].id == 0)
                continue;
            if (!drained) {
                self->st.quarantined++;
                continue;
            }
            //  A lease the TTL reclaimed means the bytes may have been reused
            //  while they were copied: the load must not be trusted.
            if (kvt_storage_release(self->c.storage, &job->leases[i]) != KVT_STORE_OK &&
                detail == KVT_DETAIL_OK)
                detail = KVT_DETAIL_TIMEOUT;
        }
        bool ok = detail == KVT_DETAIL_OK;
        if (ok) {
            self->st.load_chunks += job->n;
            self->st.load_chunks_disk += job->ndisk;
        }
        s_load_report(self, job->op, job->attempt, ok, detail, job->ndisk);
        return;
    }
    //  Deepest chunk first: each commit puts its object at the young end, so
    //  the prefix ends up youngest.
    for (uint32_t i = job->n; i-- > 0;) {
        uint32_t detail = job->fail[i] ? job->fail[i] : st != KVT_GPU_OK ? st_detail : 0;
        if (!drained) {
            self->st.quarantined++;
            detail = st_detail;
        } else if (detail) {
            kvt_storage_abort(self->c.storage, &job->resvs[i]);
        } else {
            int rc = kvt_storage_commit(self->c.storage, &job->resvs[i], NULL);
            detail = kvt_detail_of_store(rc);
        }
        s_save_report(self, job->op, job->attempt, job->keys[i], detail == KVT_DETAIL_OK, detail);
    }
}

//  Queues a job behind its copies, or settles it at once when none of them
//  was queued (nothing is running that touches its memory).
static void s_submit(kvt_wcore_t *self, s_job_t *job, bool queued, uint64_t now)
{
    if (!queued) {
        s_settle(self, job, KVT_GPU_OK, KVT_DETAIL_OK, true);
        s_job_free(self, job);
        return;
    }
    job->event = kvt_gpu_event_pool_get(self->c.evp);
    if (job->event && kvt_gpu_event_record(job->event, job->stream) != KVT_GPU_OK)
        kvt_gpu_event_pool_put(self->c.evp, &job->event);
    if (!job->event)
        //  The stream's own query tracks the copies: it covers later jobs'
        //  copies too, so the job may settle late, never early.
        kvt_wcore_log_(self, 1, "%llu/%u: no event for its copies (%s); polling the stream",
                       (unsigned long long)job->op.req, job->op.gen, kvt_gpu_last_error());
    job->renewed_at = now;
    job->next = NULL;
    if (self->tail)
        self->tail->next = job;
    else
        self->head = job;
    self->tail = job;
    self->npending++;
    self->owed += job->items;
}

static int s_fence_query(s_job_t *job)
{
    return job->event ? kvt_gpu_event_query(job->event) : kvt_gpu_stream_query(job->stream);
}

// -------------------------------------------------------------- loads ----

static void s_load(kvt_wcore_t *self, const kvt_load_spec_t *sp, uint64_t now);

void kvt_wcore_load(kvt_wcore_t *self, const kvt_load_spec_t *sp, uint64_t now)
{
    kvt_hash_t zero = {0, 0};
    if (kvt_wcore_reserve_(self, 1, sp->op) != 0)
        return;
    if (!kvt_wcore_first_time_(self, KVT_CHAN_LOAD, sp->op, sp->attempt, zero)) {
        kvt_wcore_log_(self, 1, "dropping a repeated load %llu/%u (attempt %u)",
                       (unsigned long long)sp->op.req, sp->op.gen, sp->attempt);
        return;
    }
    s_load(self, sp, now);
    //  The load's own reads hold their leases by now (or it was refused):
    //  the lookup's pins have done their job.
    if (sp->lookup)
        kvt_wcore_lookup_used_(self, sp->op);
}

static void s_load(kvt_wcore_t *self, const kvt_load_spec_t *sp, uint64_t now)
{
    const char *bad = kvt_wcore_check_spec(self, sp);
    if (bad) {
        kvt_wcore_log_(self, 1, "refusing load %llu/%u [%u,%u): %s", (unsigned long long)sp->op.req,
                       sp->op.gen, sp->start, sp->end, bad);
        self->st.loads_refused++;
        s_load_report(self, sp->op, sp->attempt, false, KVT_DETAIL_INVALID, 0);
        return;
    }
    if (!self->c.storage) {
        s_load_report(self, sp->op, sp->attempt, false, KVT_DETAIL_MISS, 0);
        return;
    }
    s_job_t *job = s_job_new(J_LOAD, sp);
    if (!job) {
        s_load_report(self, sp->op, sp->attempt, false, KVT_DETAIL_NO_SPACE, 0);
        return;
    }
    job->n = sp->nkeys;
    job->items = 1;
    job->stream = self->c.load_s;
    bool queued = false;
    //  Deepest chunk first: each get refreshes its object, so the prefix
    //  ends up youngest and eviction takes suffixes first.
    for (uint32_t c = sp->nkeys; c-- > 0;) {
        kvt_obj_view_t view;
        int rc = kvt_storage_get(self->c.storage, self->c.ns, sp->keys[c], KVT_OBJ_KV,
                                 self->c.holder, &job->leases[c], &view);
        if (rc != KVT_STORE_OK) {
            job->leases[c].id = 0;
            job->detail = kvt_detail_of_store(rc);
            break;
        }
        if (view.size < self->chunk_bytes) {
            kvt_wcore_log_(self, 1, "load %llu/%u: chunk %u holds %zu bytes, not %zu",
                           (unsigned long long)sp->op.req, sp->op.gen, c, view.size,
                           self->chunk_bytes);
            job->detail = KVT_DETAIL_INVALID;
            break;
        }
        job->ndisk += view.tier == KVT_TIER_DISK;
        rc = kvt_gpu_scatter(self->c.load_s, sp->blocks + (size_t)c * self->bpc, self->bpc,
                             view.ptr, self->chunk_bytes);
        if (rc != KVT_GPU_OK) {
            //  A failed call left nothing of its own running (kvt_gpu.h);
            //  the copies queued before it still read leased bytes.
            kvt_wcore_log_(self, 1, "load %llu/%u: scatter refused: %s",
                           (unsigned long long)sp->op.req, sp->op.gen, kvt_gpu_last_error());
            self->st.copy_errors++;
            job->detail = rc == KVT_GPU_EINVAL ? KVT_DETAIL_INVALID : KVT_DETAIL_IO;
            break;
        }
        queued = true;
    }
    s_submit(self, job, queued, now);
}

// -------------------------------------------------------------- saves ----

void kvt_wcore_save(kvt_wcore_t *self, const kvt_save_spec_t *sp, uint64_t now)
{
    if (kvt_wcore_reserve_(self, sp->nkeys, sp->op) != 0)
        return;
    const char *bad = kvt_wcore_check_spec(self, sp);
    s_job_t *job = bad ? NULL : s_job_new(J_SAVE, sp);
    if (!job) {
        //  Refused, or no memory for the job: every chunk key in the spec
        //  was dispatched, so each reports once.
        if (bad) {
            kvt_wcore_log_(self, 1, "refusing save %llu/%u [%u,%u): %s",
                           (unsigned long long)sp->op.req, sp->op.gen, sp->start, sp->end, bad);
            self->st.saves_refused++;
        }
        for (uint32_t i = 0; i < sp->nkeys; i++)
            if (kvt_wcore_first_time_(self, KVT_CHAN_SAVE, sp->op, sp->attempt, sp->keys[i]))
                s_save_report(self, sp->op, sp->attempt, sp->keys[i], false,
                              bad ? KVT_DETAIL_INVALID : KVT_DETAIL_NO_SPACE);
        return;
    }
    job->stream = self->c.save_s;
    bool queued = false;
    for (uint32_t c = 0; c < sp->nkeys; c++) {
        kvt_hash_t key = sp->keys[c];
        if (!kvt_wcore_first_time_(self, KVT_CHAN_SAVE, sp->op, sp->attempt, key)) {
            kvt_wcore_log_(self, 1, "dropping a repeated save of a chunk of %llu/%u (attempt %u)",
                           (unsigned long long)sp->op.req, sp->op.gen, sp->attempt);
            continue;
        }
        if (!self->c.storage) {
            s_save_report(self, sp->op, sp->attempt, key, false, KVT_DETAIL_NO_SPACE);
            continue;
        }
        kvt_resv_t resv = {0};
        void *ptr = NULL;
        int rc = kvt_storage_reserve(self->c.storage, self->c.ns, key, KVT_OBJ_KV,
                                     self->chunk_bytes, self->c.holder, &resv, &ptr);
        if (rc == KVT_STORE_SKIPPED) {
            self->st.saves_present++;
            s_save_report(self, sp->op, sp->attempt, key, true, KVT_DETAIL_OK);
            continue;
        }
        if (rc != KVT_STORE_OK) {
            s_save_report(self, sp->op, sp->attempt, key, false, kvt_detail_of_store(rc));
            continue;
        }
        uint32_t fail = 0;
        rc = kvt_gpu_gather(self->c.save_s, sp->blocks + (size_t)c * self->bpc, self->bpc, ptr,
                            self->chunk_bytes);
        if (rc != KVT_GPU_OK) {
            kvt_wcore_log_(self, 1, "save %llu/%u: gather refused: %s",
                           (unsigned long long)sp->op.req, sp->op.gen, kvt_gpu_last_error());
            self->st.copy_errors++;
            fail = rc == KVT_GPU_EINVAL ? KVT_DETAIL_INVALID : KVT_DETAIL_IO;
        }
        queued = queued || fail == 0;
        job->keys[job->n] = key;
        job->resvs[job->n] = resv;
        job->fail[job->n] = fail;
        job->n++;
    }
    job->items = job->n;
    if (job->n == 0) {
        s_job_free(self, job);
        return;
    }
    s_submit(self, job, queued, now);
}

// ----------------------------------------------------------- progress ----

void kvt_wcore_poll(kvt_wcore_t *self, uint64_t now)
{
    s_job_t **pp = &self->head;
    s_job_t *prev = NULL;
    while (*pp) {
        s_job_t *job = *pp;
        int st = s_fence_query(job);
        if (st == KVT_GPU_NOT_READY) {
            //  Still copying: keep its leases and reservations alive, so the
            //  TTL never takes memory a copy uses.
            if (now - job->renewed_at >= self->c.renew_ns) {
                job->renewed_at = now;
                for (uint32_t i = 0; i < job->n; i++) {
                    if (job->kind == J_SAVE)
                        kvt_storage_resv_renew(self->c.storage, job->resvs[i]);
                    else if (job->leases[i].id != 0)
                        kvt_pool_lease_renew(kvt_storage_pool(self->c.storage), job->leases[i]);
                }
            }
            prev = job;
            pp = &job->next;
            continue;
        }
        *pp = job->next;
        if (self->tail == job)
            self->tail = prev;
        self->npending--;
        self->owed -= job->items;
        if (st != KVT_GPU_OK) {
            self->st.copy_errors++;
            if (!self->copy_failed_logged) {
                kvt_wcore_log_(self, 0,
                               "a copy failed (%s): this rank's items fail until it is reset",
                               kvt_gpu_strerror(st));
                self->copy_failed_logged = true;
            }
        }
        s_settle(self, job, st, KVT_DETAIL_IO, true);
        s_job_free(self, job);
    }
    kvt_wcore_lookup_poll_(self, now);
    if (self->c.storage)
        kvt_storage_reclaim(self->c.storage);
}

uint64_t kvt_wcore_next_wake(kvt_wcore_t *self, uint64_t now)
{
    uint64_t at = UINT64_MAX;
    for (s_job_t *job = self->head; job; job = job->next) {
        //  Wake in time to renew the handles of a long copy.
        uint64_t renew = job->renewed_at + self->c.renew_ns;
        uint64_t w;
        if (job->event)
            w = kvt_gpu_event_wake(job->event, now, self->c.poll_ns);
        else
            w = kvt_gpu_stream_query(job->stream) != KVT_GPU_NOT_READY ? now
                                                                       : now + self->c.poll_ns;
        if (renew < w)
            w = renew;
        if (w < at)
            at = w;
    }
    at = kvt_wcore_lookup_wake_(self, at);
    return at == UINT64_MAX || at >= now ? at : now;
}

uint64_t kvt_wcore_shutdown(kvt_wcore_t *self, bool load_drained, bool save_drained)
{
    uint64_t items = 0;
    while (self->head) {
        s_job_t *job = self->head;
        self->head = job->next;
        self->npending--;
        self->owed -= job->items;
        items += job->items;
        s_settle(self, job, KVT_GPU_EFAULT, KVT_DETAIL_SHUTDOWN,
                 job->kind == J_LOAD ? load_drained : save_drained);
        s_job_free(self, job);
    }
    self->tail = NULL;
    self->st.drained_at_stop += items;
    kvt_wcore_lookup_stop_(self);
    return items;
}

// ---------------------------------------------------------- lifecycle ----

kvt_wcore_t *kvt_wcore_new(const kvt_wcore_cfg_t *cfg, char *err, size_t errlen)
{
    const char *bad = NULL;
    if (!cfg->gpu || !cfg->load_s || !cfg->save_s || !cfg->evp)
        bad = "gpu, load_s, save_s, evp: required";
    else if (cfg->block_size == 0 || cfg->chunk_size == 0 || cfg->chunk_size % cfg->block_size)
        bad = "chunk_size: must be a positive multiple of block_size";
    else if (kvt_gpu_num_blocks(cfg->gpu) == 0 || kvt_gpu_block_bytes(cfg->gpu) == 0)
        bad = "gpu: no KV plane registered";
    if (bad) {
        snprintf(err, errlen, "%s", bad);
        return NULL;
    }
    kvt_wcore_t *self = calloc(1, sizeof *self);
    if (!self) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    self->c = *cfg;
    if (self->c.poll_ns == 0)
        self->c.poll_ns = 20000;
    if (self->c.renew_ns == 0)
        self->c.renew_ns = 1000000000ull;
    if (self->c.epoch == 0)
        self->c.epoch = 1;
    if (self->c.lookup_ttl_ns == 0)
        self->c.lookup_ttl_ns = 5000000000ull;
    self->bpc = cfg->chunk_size / cfg->block_size;
    self->chunk_bytes = (size_t)self->bpc * kvt_gpu_block_bytes(cfg->gpu);
    self->nblocks = kvt_gpu_num_blocks(cfg->gpu);
    self->marks = calloc((self->nblocks + 63) / 64, sizeof(uint64_t));
    self->seen = kvt_seen_new(KVT_WCORE_SEEN);
    self->lookups = kvt_wlease_new();
    if (!self->marks || !self->seen || !self->lookups) {
        snprintf(err, errlen, "out of memory");
        kvt_wcore_destroy(&self);
        return NULL;
    }
    return self;
}

void kvt_wcore_destroy(kvt_wcore_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kvt_wcore_t *self = *self_p;
    assert(self->head == NULL); //  kvt_wcore_shutdown settled every job
    assert(!self->lookups || kvt_wlease_count(self->lookups) == 0); //  ... and every lookup
    kvt_wcore_outbox_clear(self);
    free(self->imgs);
    kvt_wlease_destroy(&self->lookups);
    kvt_seen_destroy(&self->seen);
    free(self->marks);
    free(self->out);
    free(self);
    *self_p = NULL;
}

uint32_t kvt_wcore_pending(const kvt_wcore_t *self)
{
    return self->npending;
}

void kvt_wcore_stats(const kvt_wcore_t *self, kvt_wcore_stats_t *out)
{
    *out = self->st;
    out->pending = self->npending;
    out->lookup_leases = kvt_wlease_count(self->lookups);
}
