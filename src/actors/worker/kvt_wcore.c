/*  kvt_wcore — see kvt_wcore.h. Loads and saves: validation, the tier's
    leases and reservations, the records and lane jobs of each spec, the
    lifecycle. The outbox and the reports of each channel are in
    kvt_wcore_out.c, joining the lanes' reports, fences and the timer path
    in kvt_wcore_join.c, what a lane job queues in kvt_wcore_lane.c,
    touches and lookups in kvt_wcore_probe.c. */
#include "kvt_wcore.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "actors/common/kvt_detail.h"
#include "kvt_wcore_int.h"

static const kvt_hash_t ZERO = {0, 0};

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

//  The KV leg is absent exactly when its range and arrays are all empty
//  (a state-only load or an image-only save, rule L3).
static bool s_has_kv(const kvt_load_spec_t *sp)
{
    return sp->nkeys || sp->nblocks || sp->start || sp->end;
}

static const char *s_check_kv(kvt_wcore_t *self, const kvt_load_spec_t *sp)
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

//  The state pool a save's image is taken from: the HBM checkpoint pool
//  when the device has one, else the slots.
static kvt_gpu_state_pool_t s_image_pool(kvt_wcore_t *self)
{
    return kvt_gpu_state_count(self->c.gpu, KVT_GPU_STATE_CKPT) ? KVT_GPU_STATE_CKPT
                                                                : KVT_GPU_STATE_SLOTS;
}

static const char *s_check_state(kvt_wcore_t *self, const kvt_load_spec_t *sp, bool kv,
                                 kvt_gpu_state_pool_t pool)
{
    if (sp->state_boundary == 0 || sp->state_boundary % self->c.chunk_size)
        return "state boundary off the chunk grid";
    if (kv && sp->state_boundary != sp->end)
        return "state boundary is not the end of the KV leg";
    if (kvt_hash_is_zero(sp->state_hash))
        return "state hash is zero";
    uint32_t units = kvt_gpu_state_count(self->c.gpu, pool);
    if (units == 0)
        return "no state memory registered on the device";
    if (sp->state_slot >= units)
        return "state slot beyond the registered state pool";
    return NULL;
}

const char *kvt_wcore_check_spec(kvt_wcore_t *self, const kvt_load_spec_t *sp)
{
    bool kv = s_has_kv(sp);
    if (!kv && !sp->state)
        return "neither a KV leg nor a state leg";
    const char *bad = kv ? s_check_kv(self, sp) : NULL;
    if (!bad && sp->state)
        bad = s_check_state(self, sp, kv, KVT_GPU_STATE_SLOTS);
    return bad;
}

const char *kvt_wcore_check_save(kvt_wcore_t *self, const kvt_save_spec_t *sp)
{
    bool kv = s_has_kv(sp);
    if (!kv && !sp->image)
        return "neither a KV leg nor an image";
    const char *bad = kv ? s_check_kv(self, sp) : NULL;
    if (!bad && sp->image)
        bad = s_check_state(self, sp, kv, s_image_pool(self));
    return bad;
}

// ------------------------------------------------------------ records ----

static kvt_wrec_t *s_rec_new(kvt_wrec_kind_t kind, const kvt_load_spec_t *sp, uint32_t nkeys,
                             uint64_t now)
{
    kvt_wrec_t *rec = calloc(1, sizeof *rec);
    if (!rec)
        return NULL;
    if (nkeys && !(rec->keys = calloc(nkeys, sizeof *rec->keys))) {
        free(rec);
        return NULL;
    }
    rec->kind = kind;
    rec->op = sp->op;
    rec->attempt = sp->attempt;
    rec->started = now;
    rec->all_ok = true;
    return rec;
}

void kvt_wcore_rec_free_(kvt_wrec_t *rec)
{
    free(rec->keys);
    free(rec);
}

static void s_link(kvt_wcore_t *self, kvt_wrec_t *rec, uint64_t now)
{
    if (!self->head)
        self->renewed_at = now; //  the renewal clock starts with the first open record
    rec->prev = self->tail;
    rec->next = NULL;
    if (self->tail)
        self->tail->next = rec;
    else
        self->head = rec;
    self->tail = rec;
    self->npending++;
    self->owed += rec->items;
}

void kvt_wcore_unlink_(kvt_wcore_t *self, kvt_wrec_t *rec)
{
    if (rec->prev)
        rec->prev->next = rec->next;
    else
        self->head = rec->next;
    if (rec->next)
        rec->next->prev = rec->prev;
    else
        self->tail = rec->prev;
    self->npending--;
    self->owed -= rec->items;
}

//  Hands a job to its lane: the lane takes a reference; its report names
//  the job by address.
static void s_enqueue(kvt_wcore_t *self, kvt_wrec_t *rec, kvt_wjob_t *job, uint64_t now)
{
    job->rec = rec;
    atomic_fetch_add(&job->refs, 1);
    kvt_lane_job_t lj = {.id = (uint64_t)(uintptr_t)job, .arg = job};
    kvt_lane_runner_enqueue(self->c.lanes[job->lane].runner, &lj, now);
}

static kvt_wjob_t *s_job(kvt_wcore_t *self, uint8_t lane, uint32_t n, uint32_t nblocks)
{
    kvt_wjob_t *job = kvt_wjob_new(n, nblocks);
    if (!job)
        return NULL;
    job->lane = lane;
    job->storage = self->c.storage;
    job->board = self->c.board;
    job->chunk_bytes = self->chunk_bytes;
    job->bpc = self->bpc;
    return job;
}

// -------------------------------------------------------------- loads ----

//  Takes the KV leg's leases (deepest chunk first: each get refreshes its
//  object, so the prefix ends up youngest and eviction takes suffixes
//  first). Returns the failure (0: every chunk is leased).
static uint32_t s_kv_leg(kvt_wcore_t *self, const kvt_load_spec_t *sp, kvt_wjob_t *job,
                         uint32_t *ndisk)
{
    memcpy(job->blocks, sp->blocks, (size_t)sp->nblocks * sizeof *sp->blocks);
    kvt_holder_t holder = self->c.lanes[KVT_WCORE_LANE_LOAD].holder;
    for (uint32_t c = sp->nkeys; c-- > 0;) {
        kvt_witem_t *it = &job->items[c];
        kvt_obj_view_t view;
        int rc = kvt_storage_get(self->c.storage, self->c.ns, sp->keys[c], KVT_OBJ_KV, holder,
                                 &it->lease, &view);
        if (rc != KVT_STORE_OK) {
            it->lease.id = 0;
            return kvt_detail_of_store(rc);
        }
        if (view.size < self->chunk_bytes) {
            kvt_wcore_log_(self, 1, "load %llu/%u: chunk %u holds %zu bytes, not %zu",
                           (unsigned long long)sp->op.req, sp->op.gen, c, view.size,
                           self->chunk_bytes);
            return KVT_DETAIL_INVALID;
        }
        *ndisk += view.tier == KVT_TIER_DISK;
        it->what = KVT_WITEM_KV;
        it->block0 = c * self->bpc;
        it->host = (void *)view.ptr;
    }
    return 0;
}

//  Takes the state leg's lease: the image alone, or the image after the KV
//  bytes of the chunk that carries it. Returns the failure (0: leased).
static uint32_t s_state_leg(kvt_wcore_t *self, const kvt_load_spec_t *sp, kvt_wjob_t *job)
{
    kvt_witem_t *it = &job->items[0];
    job->spool = KVT_GPU_STATE_SLOTS;
    job->sindex = sp->state_slot;
    job->sbytes = kvt_gpu_state_bytes(self->c.gpu, KVT_GPU_STATE_SLOTS);
    if (self->c.miss_state && ++self->state_legs == self->c.miss_state) {
        //  The testing fault: this read misses as if the image were gone.
        it->lease.id = 0;
        self->st.faults_injected++;
        return KVT_DETAIL_MISS;
    }
    kvt_obj_view_t view;
    int rc = kvt_storage_get(self->c.storage, self->c.ns, sp->state_hash, KVT_OBJ_STATE,
                             self->c.lanes[KVT_WCORE_LANE_STATE].holder, &it->lease, &view);
    if (rc != KVT_STORE_OK) {
        it->lease.id = 0;
        return kvt_detail_of_store(rc);
    }
    size_t off = view.kind == KVT_OBJ_KV_STATE ? self->chunk_bytes : 0;
    if (view.size < off + job->sbytes) {
        kvt_wcore_log_(self, 1, "load %llu/%u: the image holds %zu bytes, not %zu",
                       (unsigned long long)sp->op.req, sp->op.gen, view.size, off + job->sbytes);
        return KVT_DETAIL_INVALID;
    }
    it->what = KVT_WITEM_IMAGE;
    it->host = (char *)view.ptr + off;
    return 0;
}

static void s_load(kvt_wcore_t *self, const kvt_load_spec_t *sp, uint64_t now);

void kvt_wcore_load(kvt_wcore_t *self, const kvt_load_spec_t *sp, uint64_t now)
{
    if (kvt_wcore_reserve_(self, sp->state ? 2 : 1, sp->op) != 0)
        return;
    if (!kvt_wcore_first_time_(self, KVT_CHAN_LOAD, sp->op, sp->attempt, ZERO)) {
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

//  A load that ends before any lane job: one load report and, with a
//  state leg, its verdict (real when the state leg's read was what failed).
static void s_load_now(kvt_wcore_t *self, const kvt_load_spec_t *sp, uint32_t detail,
                       bool state_ran)
{
    kvt_wcore_load_report_(self, sp->op, sp->attempt, false, detail, 0);
    if (sp->state)
        kvt_wcore_state_report_(self, sp->op, sp->attempt, sp->state_hash, state_ran, detail);
}

static void s_load(kvt_wcore_t *self, const kvt_load_spec_t *sp, uint64_t now)
{
    const char *bad = kvt_wcore_check_spec(self, sp);
    if (bad) {
        kvt_wcore_log_(self, 1, "refusing load %llu/%u [%u,%u) state %u@%u: %s",
                       (unsigned long long)sp->op.req, sp->op.gen, sp->start, sp->end,
                       sp->state_slot, sp->state_boundary, bad);
        self->st.loads_refused++;
        s_load_now(self, sp, KVT_DETAIL_INVALID, false);
        return;
    }
    bool kv = s_has_kv(sp);
    if (!self->c.storage) {
        s_load_now(self, sp, KVT_DETAIL_MISS, !kv);
        return;
    }
    kvt_wrec_t *rec = s_rec_new(KVT_WREC_LOAD, sp, 0, now);
    kvt_wjob_t *kj = kv ? s_job(self, KVT_WCORE_LANE_LOAD, sp->nkeys, sp->nblocks) : NULL;
    kvt_wjob_t *sj = sp->state ? s_job(self, KVT_WCORE_LANE_STATE, 1, 0) : NULL;
    if (!rec || (kv && !kj) || (sp->state && !sj)) {
        kvt_wcore_rec_free_(rec);
        kvt_wjob_unref(kj);
        kvt_wjob_unref(sj);
        s_load_now(self, sp, KVT_DETAIL_NO_SPACE, false);
        return;
    }
    //  The KV leg's reads first: when one fails the state leg never starts
    //  (its verdict is neutral). Then the state leg's: a miss there is the
    //  state verdict (rule I3 retracts on it) and the KV leg is not run.
    uint32_t detail = kv ? s_kv_leg(self, sp, kj, &rec->ndisk) : 0;
    bool state_ran = false;
    if (detail == 0 && sj) {
        state_ran = true;
        detail = s_state_leg(self, sp, sj);
    }
    if (detail) {
        if (kj)
            kvt_wjob_abort(kj);
        if (sj)
            kvt_wjob_abort(sj);
        kvt_wjob_unref(kj);
        kvt_wjob_unref(sj);
        kvt_wcore_rec_free_(rec);
        s_load_now(self, sp, detail, state_ran);
        return;
    }
    //  Both legs go out at once, each on its own lane (rule L2); each first
    //  waits on the device for the compute that still reads its memory.
    rec->has_state = sp->state;
    rec->state_hash = sp->state_hash;
    rec->nkv = sp->nkeys;
    rec->items = sp->state ? 2 : 1;
    rec->leg[KVT_WLEG_KV] = kj;
    rec->leg[KVT_WLEG_STATE] = sj;
    rec->legs = (kj != NULL) + (sj != NULL);
    s_link(self, rec, now);
    for (int l = 0; l < 2; l++) {
        kvt_wjob_t *j = rec->leg[l];
        if (!j)
            continue;
        j->restore = true;
        if (sp->after) {
            j->wait = KVT_WWAIT_COMPUTE;
            j->wait_step = sp->after - 1;
        }
        s_enqueue(self, rec, j, now);
    }
}

// -------------------------------------------------------------- saves ----

//  Reports a spec's source_safe ahead of its store reports already in the
//  outbox from out[first] on, as a gathered save sends it, so the
//  scheduler's leases end before the store verdicts.
static void s_safe_first(kvt_wcore_t *self, uint32_t first, const kvt_save_spec_t *sp,
                         kvt_hash_t safe_key)
{
    uint32_t n0 = self->nout;
    kvt_wcore_safe_report_(self, sp->op, sp->attempt, safe_key, true, KVT_DETAIL_OK);
    if (self->nout == n0 || first >= n0)
        return;
    kvt_completion_t c = self->out[n0];
    memmove(self->out + first + 1, self->out + first, (size_t)(n0 - first) * sizeof c);
    self->out[first] = c;
}

//  Every item of a save that goes no further reports now, and its
//  source_safe (nothing reads its sources).
static void s_save_refuse(kvt_wcore_t *self, const kvt_save_spec_t *sp, const kvt_hash_t *keys,
                          uint32_t n, kvt_hash_t safe_key, uint32_t detail)
{
    uint32_t fresh = 0, first = self->nout;
    for (uint32_t i = 0; i < n; i++)
        if (kvt_wcore_first_time_(self, KVT_CHAN_SAVE, sp->op, sp->attempt, keys[i])) {
            fresh++;
            kvt_wcore_save_report_(self, sp->op, sp->attempt, keys[i], false, detail, false);
        }
    //  A repeated spec (no item new) reports nothing, source_safe included;
    //  an empty one is remembered by its source_safe key.
    if (fresh || (n == 0 &&
                  kvt_wcore_first_time_(self, KVT_CHAN_SOURCE_SAFE, sp->op, sp->attempt, safe_key)))
        s_safe_first(self, first, sp, safe_key);
}

void kvt_wcore_save(kvt_wcore_t *self, const kvt_save_spec_t *sp, uint64_t now)
{
    bool kv = s_has_kv(sp);
    //  The items: one per chunk (the last one with the image), or the image
    //  alone under its state hash.
    uint32_t n = kv ? sp->nkeys : sp->image ? 1 : 0;
    const kvt_hash_t *keys = kv ? sp->keys : &sp->state_hash;
    kvt_hash_t safe_key = n ? keys[n - 1] : ZERO;
    if (kvt_wcore_reserve_(self, n + 1, sp->op) != 0)
        return;
    const char *bad = kvt_wcore_check_save(self, sp);
    if (bad) {
        kvt_wcore_log_(self, 1, "refusing save %llu/%u [%u,%u) image %d: %s",
                       (unsigned long long)sp->op.req, sp->op.gen, sp->start, sp->end, sp->image,
                       bad);
        self->st.saves_refused++;
        s_save_refuse(self, sp, keys, n, safe_key, KVT_DETAIL_INVALID);
        return;
    }
    if (sp->producer_failed) {
        //  Rule S2: this step's saves only; the loads of the step go out.
        if (!self->producer_logged) {
            self->producer_logged = true;
            kvt_wcore_log_(self, 1,
                           "save %llu/%u refused: producer fence missing (counted in "
                           "worker.producer_refused; logged once)",
                           (unsigned long long)sp->op.req, sp->op.gen);
        }
        self->st.producer_refused += n;
        s_save_refuse(self, sp, keys, n, safe_key, KVT_DETAIL_IO);
        return;
    }
    if (!self->c.storage) {
        s_save_refuse(self, sp, keys, n, safe_key, KVT_DETAIL_NO_SPACE);
        return;
    }
    kvt_wrec_t *rec = s_rec_new(KVT_WREC_SAVE, sp, n, now);
    kvt_wjob_t *job = rec ? s_job(self, KVT_WCORE_LANE_SAVE, n, sp->nblocks) : NULL;
    if (!job) {
        kvt_wcore_rec_free_(rec);
        s_save_refuse(self, sp, keys, n, safe_key, KVT_DETAIL_NO_SPACE);
        return;
    }
    job->save = true;
    if (sp->image) {
        job->spool = s_image_pool(self);
        job->sindex = sp->state_slot;
        job->sbytes = kvt_gpu_state_bytes(self->c.gpu, job->spool);
    }
    if (kv)
        memcpy(job->blocks, sp->blocks, (size_t)sp->nblocks * sizeof *sp->blocks);
    kvt_holder_t holder = self->c.lanes[KVT_WCORE_LANE_SAVE].holder;
    uint32_t j = 0, fresh = 0, first = self->nout;
    for (uint32_t i = 0; i < n; i++) {
        kvt_hash_t key = keys[i];
        if (!kvt_wcore_first_time_(self, KVT_CHAN_SAVE, sp->op, sp->attempt, key))
            continue;
        fresh++;
        bool img = sp->image && i == n - 1;
        kvt_obj_kind_t kind = !kv ? KVT_OBJ_STATE : img ? KVT_OBJ_KV_STATE : KVT_OBJ_KV;
        size_t size = (kv ? self->chunk_bytes : 0) + (img ? job->sbytes : 0);
        kvt_resv_t resv = {0};
        void *ptr = NULL;
        int rc =
            kvt_storage_reserve(self->c.storage, self->c.ns, key, kind, size, holder, &resv, &ptr);
        if (rc == KVT_STORE_SKIPPED) {
            self->st.saves_present++;
            kvt_wcore_save_report_(self, sp->op, sp->attempt, key, true, KVT_DETAIL_OK, false);
            continue;
        }
        if (rc != KVT_STORE_OK) {
            kvt_wcore_save_report_(self, sp->op, sp->attempt, key, false, kvt_detail_of_store(rc),
                                   false);
            continue;
        }
        kvt_witem_t *it = &job->items[j];
        it->what = (uint8_t)((kv ? KVT_WITEM_KV : 0) | (img ? KVT_WITEM_IMAGE : 0));
        it->block0 = i * self->bpc;
        it->host = ptr;
        it->resv = resv;
        rec->keys[j++] = key;
        rec->image = img;
    }
    job->n = j;
    if (j == 0) {
        //  Nothing to gather: nothing reads the sources. A repeated spec
        //  (no item new) reports nothing at all.
        kvt_wjob_unref(job);
        kvt_wcore_rec_free_(rec);
        if (fresh)
            s_safe_first(self, first, sp, safe_key);
        else
            kvt_wcore_log_(self, 1, "dropping a repeated save %llu/%u (attempt %u)",
                           (unsigned long long)sp->op.req, sp->op.gen, sp->attempt);
        return;
    }
    if (sp->producer) {
        job->wait = KVT_WWAIT_PRODUCER;
        job->wait_step = sp->producer - 1;
    }
    rec->safe_key = safe_key;
    rec->items = j + (self->c.source_safe ? 1 : 0);
    rec->leg[0] = job;
    rec->legs = 1;
    s_link(self, rec, now);
    s_enqueue(self, rec, job, now);
}

// ---------------------------------------------------------- lifecycle ----

kvt_wcore_t *kvt_wcore_new(const kvt_wcore_cfg_t *cfg, char *err, size_t errlen)
{
    const char *bad = NULL;
    if (!cfg->gpu)
        bad = "gpu: required";
    else if (!cfg->lanes[KVT_WCORE_LANE_LOAD].runner || !cfg->lanes[KVT_WCORE_LANE_STATE].runner ||
             !cfg->lanes[KVT_WCORE_LANE_SAVE].runner)
        bad = "lanes: a load, a state and a save lane are required";
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
    assert(self->head == NULL);   //  kvt_wcore_shutdown settled every record
    assert(self->fences == NULL); //  ... and every fence
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
    out->quarantined = 0;
    for (int l = 0; l < KVT_WCORE_LANES; l++) {
        kvt_lane_stats_t ls;
        kvt_lane_runner_stats(self->c.lanes[l].runner, &ls);
        out->quarantined += ls.quarantined + ls.left_to_holder;
    }
}
