/*  kvt_savetrack — see kvt_savetrack.h; the frontier and leases walks, the
    stats, the audit and the counters are in kvt_savetrack_check.c. */
#include "kvt_savetrack_int.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kvt_hmap.h"
#include "base/kvt_ilist.h"
#include "base/kvt_vec.h"

kvt_savetrack_t *kvt_savetrack_new(const kvt_savetrack_cfg_t *cfg)
{
    if (!cfg->acquire || !cfg->release || cfg->block_size == 0 || cfg->chunk_size == 0 ||
        cfg->chunk_size % cfg->block_size != 0)
        return NULL;
    kvt_savetrack_t *self = calloc(1, sizeof(*self));
    if (!self)
        return NULL;
    self->cfg = *cfg;
    self->bpc = cfg->chunk_size / cfg->block_size;
    self->by_req = kvt_hmap_new(64, false);
    self->by_id = kvt_hmap_new(64, false);
    self->by_key = kvt_hmap_new(64, false);
    self->by_spec = kvt_hmap_new(64, false);
    if (!self->by_req || !self->by_id || !self->by_key || !self->by_spec) {
        kvt_savetrack_destroy(&self);
        return NULL;
    }
    kvt_ilist_init(&self->rec_free);
    kvt_ilist_init(&self->tails);
    kvt_ilist_init(&self->save_free);
    kvt_ilist_init(&self->deadlines);
    kvt_ilist_init(&self->drains);
    self->skip_free = S_NONE;
    return self;
}

void kvt_savetrack_destroy(kvt_savetrack_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kvt_savetrack_t *self = *self_p;
    for (uint32_t i = 0; i < self->recs_cap; i++)
        free(self->recs[i].tail_blocks);
    free(self->recs);
    free(self->saves);
    free(self->save_blocks);
    free(self->skips);
    kvt_hmap_destroy(&self->by_req);
    kvt_hmap_destroy(&self->by_id);
    kvt_hmap_destroy(&self->by_key);
    kvt_hmap_destroy(&self->by_spec);
    free(self);
    *self_p = NULL;
}

// --------------------------------------------------------------- leases --

//  The one lease path (S4): every lease is taken here and released here,
//  exactly once.
static void s_acquire(kvt_savetrack_t *self, const uint32_t *blocks, uint32_t n, int32_t slot)
{
    self->cfg.acquire(self->cfg.arg, blocks, n, slot);
    self->stats.leases_taken++;
    self->stats.leases_outstanding++;
}

static void s_release(kvt_savetrack_t *self, const uint32_t *blocks, uint32_t n, int32_t slot)
{
    assert(self->stats.leases_outstanding > 0);
    self->cfg.release(self->cfg.arg, blocks, n, slot);
    self->stats.leases_released++;
    self->stats.leases_outstanding--;
}

static void s_release_save(kvt_savetrack_t *self, kvt_savetrack_save_t *sv)
{
    if (!sv->leased)
        return;
    sv->leased = false;
    uint32_t i = (uint32_t)(sv - self->saves);
    s_release(self, self->save_blocks + (size_t)i * self->bpc, self->bpc, sv->slot);
}

static void s_release_tail(kvt_savetrack_t *self, kvt_savetrack_rec_t *r)
{
    if (!r->has_tail)
        return;
    r->has_tail = false;
    kvt_ilist_unlink(&self->tails, S_REC_LINKS(self), (uint32_t)(r - self->recs));
    uint32_t bs = self->cfg.block_size;
    s_release(self, r->tail_blocks, (r->tail_end - r->tail_start) / bs, r->tail_slot);
}

// -------------------------------------------------------------- records --

//  The record of admission op exactly (NULL for another generation).
static kvt_savetrack_rec_t *s_rec_op(const kvt_savetrack_t *self, kvt_opid_t op)
{
    kvt_savetrack_rec_t *r = kvt_savetrack_rec(self, op.req);
    return r && r->op.gen == op.gen ? r : NULL;
}

//  Chunks of r forwarded but never to be saved.
static void s_count_retired(kvt_savetrack_t *self, const kvt_savetrack_rec_t *r, uint32_t upto)
{
    if (upto > r->frontier)
        self->stats.chunks_retired += (upto - r->frontier) / self->cfg.chunk_size;
}

//  Frees a retired record once nothing of it is left.
static void s_maybe_free(kvt_savetrack_t *self, kvt_savetrack_rec_t *r)
{
    if (!r->retired || r->inflight > 0 || r->has_tail)
        return;
    uint32_t i = (uint32_t)(r - self->recs);
    kvt_hmap_del(self->by_req, kvt_hmap_key64(r->op.req), NULL);
    uint32_t *tb = r->tail_blocks, tc = r->tail_cap;
    memset(r, 0, sizeof(*r));
    r->tail_blocks = tb; //  kept for reuse
    r->tail_cap = tc;
    r->last_built = S_NONE;
    kvt_ilist_prepend(&self->rec_free, S_REC_LINKS(self), i);
    self->stats.records--;
}

int kvt_savetrack_admit(kvt_savetrack_t *self, kvt_opid_t op, uint32_t frontier)
{
    kvt_savetrack_rec_t *r = kvt_savetrack_rec(self, op.req);
    if (r && r->op.gen >= op.gen) {
        self->stats.refused++;
        return -1;
    }
    if (!r) {
        if (self->rec_free.count == 0) {
            uint32_t old = self->recs_cap, cap = old;
            if (kvt_vec_reserve((void **)&self->recs, &cap, old + 1, sizeof(kvt_savetrack_rec_t)) !=
                0) {
                self->stats.refused++;
                return -1;
            }
            memset(self->recs + old, 0, (size_t)(cap - old) * sizeof(kvt_savetrack_rec_t));
            for (uint32_t i = old; i < cap; i++)
                kvt_ilist_append(&self->rec_free, S_REC_LINKS(self), i);
            self->recs_cap = cap;
        }
        uint32_t i = self->rec_free.head;
        if (kvt_hmap_put(self->by_req, kvt_hmap_key64(op.req), i) != 0) {
            self->stats.refused++;
            return -1;
        }
        kvt_ilist_unlink(&self->rec_free, S_REC_LINKS(self), i);
        r = &self->recs[i];
        r->live = true;
        r->last_built = S_NONE;
        self->stats.records++;
    } else if (r->has_tail) {
        s_count_retired(self, r, r->tail_end);
        self->stats.tails_retired++;
        s_release_tail(self, r); //  a re-admission's earlier tail is never built
    }
    uint32_t cs = self->cfg.chunk_size;
    r->op = op;
    r->frontier = frontier / cs * cs;
    r->last_built = S_NONE; //  a new admission's saves start a new SaveSpec
    r->forwarded = 0;
    r->attempt = 0;
    r->retries_left = self->cfg.retries;
    r->floor_set = false;
    r->waiting = false;
    r->stopped = false;
    r->retired = false;
    return 0;
}

int kvt_savetrack_load_decided(kvt_savetrack_t *self, kvt_opid_t op, uint32_t hbm, uint32_t hit)
{
    kvt_savetrack_rec_t *r = s_rec_op(self, op);
    if (!r || hit < hbm) {
        self->stats.refused++;
        return -1;
    }
    if (r->floor_set) {
        self->stats.floors_ignored++;
        return 0;
    }
    r->floor_set = true;
    r->floor_hbm = hbm;
    r->floor_hit = hit;
    uint32_t grid = hit / self->cfg.chunk_size * self->cfg.chunk_size;
    if (r->frontier < grid)
        r->frontier = grid; //  the tier holds [.., hit): nothing below it needs a save
    self->stats.floors_recorded++;
    return 0;
}

int kvt_savetrack_hit_lost(kvt_savetrack_t *self, kvt_opid_t op)
{
    kvt_savetrack_rec_t *r = s_rec_op(self, op);
    if (!r || !r->floor_set) {
        self->stats.refused++;
        return -1;
    }
    uint32_t floor = r->floor_hbm / self->cfg.chunk_size * self->cfg.chunk_size;
    if (r->frontier > floor)
        r->frontier = floor;
    self->stats.floors_reopened++;
    return 0;
}

void kvt_savetrack_forwarded(kvt_savetrack_t *self, kvt_opid_t op, uint32_t tokens)
{
    kvt_savetrack_rec_t *r = s_rec_op(self, op);
    if (r && !r->retired && tokens > r->forwarded)
        r->forwarded = tokens;
}

//  End of what req may save now (chunk grid), or 0 when nothing.
static uint32_t s_upto(const kvt_savetrack_t *self, const kvt_savetrack_rec_t *r)
{
    if (r->stopped || r->waiting)
        return 0;
    uint32_t upto;
    if (r->retired)
        upto = r->has_tail ? r->tail_end : 0;
    else
        upto = r->forwarded / self->cfg.chunk_size * self->cfg.chunk_size;
    return upto > r->frontier ? upto : 0;
}

bool kvt_savetrack_next(const kvt_savetrack_t *self, uint64_t req, uint32_t *start, uint32_t *end,
                        uint32_t *attempt)
{
    const kvt_savetrack_rec_t *r = kvt_savetrack_rec(self, req);
    uint32_t upto = r ? s_upto(self, r) : 0;
    if (upto == 0)
        return false;
    *start = r->frontier;
    *end = upto;
    if (attempt)
        *attempt = r->attempt;
    return true;
}

//  The frontier moved by one chunk: a tail fully built releases its lease
//  (each built save holds its own).
static void s_advance(kvt_savetrack_t *self, kvt_savetrack_rec_t *r)
{
    r->frontier += self->cfg.chunk_size;
    if (r->has_tail && r->frontier >= r->tail_end) {
        s_release_tail(self, r);
        s_maybe_free(self, r);
    }
}

int kvt_savetrack_build(kvt_savetrack_t *self, uint64_t req, kvt_hash_t key, const uint32_t *blocks,
                        int32_t slot, bool joins)
{
    kvt_savetrack_rec_t *r = kvt_savetrack_rec(self, req);
    if (!r || s_upto(self, r) == 0 || kvt_hmap_get(self->by_key, key, NULL) ||
        (!blocks && !r->has_tail)) {
        self->stats.refused++;
        return -1;
    }
    if (!blocks) {
        blocks = r->tail_blocks + (r->frontier - r->tail_start) / self->cfg.block_size;
        if (slot < 0)
            slot = r->tail_slot;
    }
    if (self->save_free.count == 0) {
        uint32_t old = self->saves_cap, cap = old;
        if (kvt_vec_reserve((void **)&self->saves, &cap, old + 1, sizeof(kvt_savetrack_save_t)) !=
                0 ||
            kvt_vec_reserve((void **)&self->save_blocks, &self->save_blocks_cap, cap * self->bpc,
                            sizeof(uint32_t)) != 0) {
            self->stats.refused++;
            return -1;
        }
        memset(self->saves + old, 0, (size_t)(cap - old) * sizeof(kvt_savetrack_save_t));
        for (uint32_t i = old; i < cap; i++)
            kvt_ilist_append(&self->save_free, S_SAVE_LINKS(self), i);
        self->saves_cap = cap;
    }
    uint32_t si = self->save_free.head;
    kvt_hash_t id = kvt_savetrack_save_id(r->op, key, r->attempt);
    //  An expired save of the same id still drains under it.
    if (kvt_hmap_get(self->by_id, id, NULL) || kvt_hmap_put(self->by_key, key, si) != 0) {
        self->stats.refused++;
        return -1;
    }
    if (kvt_hmap_put(self->by_id, id, si) != 0) {
        kvt_hmap_del(self->by_key, key, NULL);
        self->stats.refused++;
        return -1;
    }
    //  The save ends its SaveSpec for now: the spec is reported under its id.
    if (kvt_hmap_put(self->by_spec, id, si) != 0) {
        kvt_hmap_del(self->by_key, key, NULL);
        kvt_hmap_del(self->by_id, id, NULL);
        self->stats.refused++;
        return -1;
    }
    kvt_ilist_unlink(&self->save_free, S_SAVE_LINKS(self), si);
    kvt_savetrack_save_t *sv = &self->saves[si];
    sv->op = r->op;
    sv->key = key;
    sv->attempt = r->attempt;
    sv->rec = (uint32_t)(r - self->recs);
    sv->start = r->frontier;
    sv->slot = slot;
    sv->live = true;
    sv->leased = true;
    sv->spec_prev = sv->spec_next = S_NONE;
    sv->spec_id = id;
    sv->skippers = S_NONE;
    sv->draining = false;
    //  Due deadline_us after its build on a clock that never goes back:
    //  appending keeps the list in deadline order.
    sv->due_us = self->cfg.deadline_us ? self->now_us + self->cfg.deadline_us : UINT64_MAX;
    kvt_ilist_append(&self->deadlines, S_SAVE_LINKS(self), si);
    uint32_t lb = r->last_built;
    if (joins && lb != S_NONE && self->saves[lb].leased && self->saves[lb].attempt == r->attempt &&
        self->saves[lb].op.gen == r->op.gen && self->saves[lb].spec_next == S_NONE) {
        kvt_hmap_del(self->by_spec, self->saves[lb].spec_id, NULL);
        sv->spec_prev = lb;
        self->saves[lb].spec_next = si;
    }
    r->last_built = si;
    uint32_t *lease = self->save_blocks + (size_t)si * self->bpc;
    memcpy(lease, blocks, (size_t)self->bpc * sizeof(uint32_t));
    s_acquire(self, lease, self->bpc, slot);
    r->inflight++;
    self->stats.saves_built++;
    self->stats.saves_outstanding++;
    s_advance(self, r);
    return 0;
}

int kvt_savetrack_skip(kvt_savetrack_t *self, uint64_t req)
{
    kvt_savetrack_rec_t *r = kvt_savetrack_rec(self, req);
    if (!r || s_upto(self, r) == 0) {
        self->stats.refused++;
        return -1;
    }
    self->stats.saves_skipped++;
    s_advance(self, r);
    return 0;
}

int kvt_savetrack_skip_inflight(kvt_savetrack_t *self, uint64_t req, kvt_hash_t key)
{
    kvt_savetrack_rec_t *r = kvt_savetrack_rec(self, req);
    uint32_t si;
    if (!r || s_upto(self, r) == 0 || !kvt_hmap_get(self->by_key, key, &si)) {
        self->stats.refused++;
        return -1;
    }
    if (self->skip_free == S_NONE) {
        uint32_t old = self->skips_cap, cap = old;
        if (kvt_vec_reserve((void **)&self->skips, &cap, old + 1, sizeof(kvt_savetrack_skip_t))) {
            self->stats.refused++;
            return -1;
        }
        for (uint32_t i = cap; i-- > old;) {
            self->skips[i].next = self->skip_free;
            self->skip_free = i;
        }
        self->skips_cap = cap;
    }
    uint32_t k = self->skip_free;
    kvt_savetrack_skip_t *sk = &self->skips[k];
    self->skip_free = sk->next;
    sk->op = r->op;
    sk->rec = (uint32_t)(r - self->recs);
    sk->start = r->frontier;
    sk->next = self->saves[si].skippers;
    self->saves[si].skippers = k;
    self->stats.skips_waiting++;
    return kvt_savetrack_skip(self, req);
}

//  Save sv settled: the requests that skipped its key for it let go of
//  their skip; if it failed, each goes back to the chunk it skipped (its
//  frontier, never forward), unless it retired, stopped saving or was
//  re-admitted since.
static void s_settle_skippers(kvt_savetrack_t *self, kvt_savetrack_save_t *sv, bool ok)
{
    for (uint32_t k = sv->skippers; k != S_NONE;) {
        kvt_savetrack_skip_t *sk = &self->skips[k];
        uint32_t next = sk->next;
        if (!ok) {
            kvt_savetrack_rec_t *r = &self->recs[sk->rec];
            bool same = r->live && r->op.req == sk->op.req && r->op.gen == sk->op.gen;
            if (same && !r->retired && !r->stopped) {
                //  The chunks above it are built again under a new attempt
                //  number: a worker drops a repeat of a report key it saw.
                if (sk->start < r->frontier) {
                    r->frontier = sk->start;
                    r->attempt++;
                }
                self->stats.skips_rewound++;
            } else
                self->stats.skips_lost++;
        }
        sk->next = self->skip_free;
        self->skip_free = k;
        self->stats.skips_waiting--;
        k = next;
    }
    sv->skippers = S_NONE;
}

bool kvt_savetrack_key_inflight(const kvt_savetrack_t *self, kvt_hash_t key)
{
    return kvt_hmap_get(self->by_key, key, NULL);
}

// -------------------------------------------------------------- reports --

int kvt_savetrack_sources_safe(kvt_savetrack_t *self, kvt_opid_t op, kvt_hash_t key,
                               uint32_t attempt)
{
    //  The report names the SaveSpec by its last chunk: every save of the
    //  spec still in flight lets its sources go (the last one may have
    //  settled already, when the store had it).
    uint32_t si, n = 0;
    if (kvt_hmap_get(self->by_spec, kvt_savetrack_save_id(op, key, attempt), &si))
        for (; si != S_NONE; si = self->saves[si].spec_prev)
            if (self->saves[si].leased) {
                s_release_save(self, &self->saves[si]);
                n++;
            }
    if (n == 0) {
        //  The spec's last save expired and drains: its lease stays.
        kvt_hash_t id = kvt_savetrack_save_id(op, key, attempt);
        if (kvt_hmap_get(self->by_id, id, &si) && self->saves[si].draining) {
            self->stats.late_verdicts++;
            return 1;
        }
        self->stats.stale_reports++;
        return -1;
    }
    return 0;
}

bool kvt_savetrack_save_slot(const kvt_savetrack_t *self, kvt_opid_t op, kvt_hash_t key,
                             uint32_t attempt, int32_t *slot)
{
    uint32_t si;
    if (!kvt_hmap_get(self->by_id, kvt_savetrack_save_id(op, key, attempt), &si))
        return false;
    if (slot)
        *slot = self->saves[si].slot;
    return true;
}

//  Takes a settled save out of its SaveSpec; the spec's last save in
//  flight carries its report id.
static void s_spec_unlink(kvt_savetrack_t *self, kvt_savetrack_save_t *sv)
{
    if (sv->spec_next == S_NONE) {
        if (sv->spec_prev != S_NONE) {
            self->saves[sv->spec_prev].spec_id = sv->spec_id;
            //  The entry is replaced in place: the map does not grow.
            kvt_hmap_del(self->by_spec, sv->spec_id, NULL);
            (void)kvt_hmap_put(self->by_spec, sv->spec_id, sv->spec_prev);
        } else
            kvt_hmap_del(self->by_spec, sv->spec_id, NULL);
    }
    if (sv->spec_prev != S_NONE)
        self->saves[sv->spec_prev].spec_next = sv->spec_next;
    if (sv->spec_next != S_NONE)
        self->saves[sv->spec_next].spec_prev = sv->spec_prev;
}

//  A failed save of record r (S3): the frontier goes back to the failed
//  chunk, never past it, and the re-emit waits until every save of the
//  request settled. A failure of a retired request or an earlier
//  admission is dropped.
static void s_failed(kvt_savetrack_t *self, kvt_savetrack_rec_t *r, const kvt_savetrack_save_t *sv)
{
    if (r->retired || r->op.gen != sv->op.gen || r->stopped) {
        self->stats.saves_dropped++;
        return;
    }
    if (sv->start < r->frontier)
        r->frontier = sv->start;
    r->waiting = true;
}

//  Save si settles (its store verdict, or its deadline): it leaves its
//  spec, its key and its request, and a failure is S3. Its lease and its id
//  are the caller's.
static void s_settle(kvt_savetrack_t *self, uint32_t si, bool ok)
{
    kvt_savetrack_save_t *sv = &self->saves[si];
    s_spec_unlink(self, sv);
    sv->spec_prev = sv->spec_next = S_NONE;
    kvt_hmap_del(self->by_key, sv->key, NULL);
    s_settle_skippers(self, sv, ok);
    kvt_savetrack_rec_t *r = &self->recs[sv->rec];
    if (r->last_built == si)
        r->last_built = S_NONE;
    assert(r->live && r->inflight > 0);
    r->inflight--;
    self->stats.saves_outstanding--;
    if (ok)
        self->stats.saves_ok++;
    else {
        self->stats.saves_failed++;
        s_failed(self, r, sv);
    }
    if (r->waiting && r->inflight == 0) {
        //  Every rank is quiescent for this request: re-emit from the
        //  frontier with a fresh attempt number (a new report key), or, with
        //  no re-emit left, save nothing more (chunks above a gap could
        //  never be reached).
        r->waiting = false;
        if (r->retries_left == 0) {
            r->stopped = true;
            self->stats.saves_stopped++;
        } else {
            r->attempt++;
            r->retries_left--;
            self->stats.saves_reemitted++;
        }
    }
}

static void s_free_save(kvt_savetrack_t *self, uint32_t si)
{
    memset(&self->saves[si], 0, sizeof(self->saves[si]));
    kvt_ilist_prepend(&self->save_free, S_SAVE_LINKS(self), si);
}

int kvt_savetrack_stored(kvt_savetrack_t *self, kvt_opid_t op, kvt_hash_t key, uint32_t attempt,
                         bool ok)
{
    uint32_t si;
    kvt_hash_t id = kvt_savetrack_save_id(op, key, attempt);
    if (!kvt_hmap_get(self->by_id, id, &si)) {
        self->stats.stale_reports++;
        return -1;
    }
    kvt_savetrack_save_t *sv = &self->saves[si];
    if (sv->draining) {
        //  Settled by its deadline: what it reports now is late. The
        //  drain's end, not this verdict, releases its lease.
        self->stats.late_verdicts++;
        return 1;
    }
    kvt_hmap_del(self->by_id, id, NULL);
    kvt_ilist_unlink(&self->deadlines, S_SAVE_LINKS(self), si);
    s_release_save(self, sv);
    kvt_savetrack_rec_t *r = &self->recs[sv->rec];
    s_settle(self, si, ok);
    s_free_save(self, si);
    s_maybe_free(self, r);
    return 0;
}

// ------------------------------------------------------------ deadline --

void kvt_savetrack_set_now(kvt_savetrack_t *self, uint64_t now_us)
{
    if (now_us > self->now_us)
        self->now_us = now_us;
}

uint64_t kvt_savetrack_next_deadline(const kvt_savetrack_t *self)
{
    uint64_t due = UINT64_MAX;
    if (self->deadlines.head != KVT_ILIST_NONE)
        due = self->saves[self->deadlines.head].due_us;
    if (self->drains.head != KVT_ILIST_NONE && self->saves[self->drains.head].due_us < due)
        due = self->saves[self->drains.head].due_us;
    return due;
}

bool kvt_savetrack_expire(kvt_savetrack_t *self, uint64_t now_us, uint64_t *req)
{
    kvt_savetrack_set_now(self, now_us);
    uint32_t si = self->deadlines.head;
    if (si != KVT_ILIST_NONE && self->saves[si].due_us <= now_us) {
        //  No verdict by its deadline: it settles failed (S3), but a rank
        //  may still read its sources (a late spec, a lost report), so its
        //  lease is held until its drain ends; its id stays, to tell its
        //  late verdicts from stale ones.
        kvt_savetrack_save_t *sv = &self->saves[si];
        kvt_ilist_unlink(&self->deadlines, S_SAVE_LINKS(self), si);
        self->stats.saves_expired++;
        if (req)
            *req = sv->op.req;
        kvt_savetrack_rec_t *r = &self->recs[sv->rec];
        s_settle(self, si, false);
        sv->rec = S_NONE; //  the record may go now: the drain needs only the lease
        if (sv->leased) {
            sv->draining = true;
            sv->due_us = self->now_us + self->cfg.drain_us;
            kvt_ilist_append(&self->drains, S_SAVE_LINKS(self), si);
            self->stats.saves_draining++;
        } else {
            //  Every rank reported its sources safe (only the store's
            //  verdict is missing): no rank reads them, nothing to hold;
            //  what it reports from now on is stale.
            kvt_hmap_del(self->by_id, kvt_savetrack_save_id(sv->op, sv->key, sv->attempt), NULL);
            self->stats.saves_drained++;
            s_free_save(self, si);
        }
        s_maybe_free(self, r);
        return true;
    }
    si = self->drains.head;
    if (si == KVT_ILIST_NONE || self->saves[si].due_us > now_us)
        return false;
    //  Drained: no rank reads its sources any more (the bound), they go.
    kvt_savetrack_save_t *sv = &self->saves[si];
    if (req)
        *req = sv->op.req;
    kvt_ilist_unlink(&self->drains, S_SAVE_LINKS(self), si);
    kvt_hmap_del(self->by_id, kvt_savetrack_save_id(sv->op, sv->key, sv->attempt), NULL);
    s_release_save(self, sv);
    self->stats.saves_drained++;
    self->stats.saves_draining--;
    s_free_save(self, si);
    return true;
}

// ------------------------------------------------------------ retiring --

int kvt_savetrack_finish(kvt_savetrack_t *self, uint64_t req, const uint32_t *blocks,
                         uint32_t nblocks, int32_t slot)
{
    kvt_savetrack_rec_t *r = kvt_savetrack_rec(self, req);
    if (!r || r->retired) {
        self->stats.refused++;
        return -1;
    }
    uint32_t cs = self->cfg.chunk_size, bs = self->cfg.block_size;
    uint32_t upto = s_upto(self, r);
    if (upto > 0 && (uint64_t)nblocks * bs < upto) {
        self->stats.refused++;
        return -1;
    }
    if (upto == 0) {
        if (r->waiting) //  a failed save's re-emit is dropped with its request
            self->stats.saves_dropped++;
        s_count_retired(self, r, r->stopped ? r->forwarded / cs * cs : 0);
        r->waiting = false;
        r->retired = true;
        s_maybe_free(self, r);
        return 0;
    }
    uint32_t n = (upto - r->frontier) / bs;
    if (kvt_vec_reserve((void **)&r->tail_blocks, &r->tail_cap, n, sizeof(uint32_t)) != 0) {
        //  No room for the tail lease: retire it now.
        s_count_retired(self, r, upto);
        r->retired = true;
        s_maybe_free(self, r);
        return 0;
    }
    memcpy(r->tail_blocks, blocks + r->frontier / bs, (size_t)n * sizeof(uint32_t));
    r->tail_start = r->frontier;
    r->tail_end = upto;
    r->tail_slot = slot;
    r->retired = true;
    r->has_tail = true;
    kvt_ilist_append(&self->tails, S_REC_LINKS(self), (uint32_t)(r - self->recs));
    s_acquire(self, r->tail_blocks, n, slot);
    self->stats.tails_leased++;
    return 0;
}

//  Retires r's unbuilt tail (S4): never emitted, its lease released.
static void s_retire_tail(kvt_savetrack_t *self, kvt_savetrack_rec_t *r)
{
    s_count_retired(self, r, r->tail_end);
    self->stats.tails_retired++;
    s_release_tail(self, r);
    s_maybe_free(self, r);
}

void kvt_savetrack_abort(kvt_savetrack_t *self, uint64_t req)
{
    kvt_savetrack_rec_t *r = kvt_savetrack_rec(self, req);
    if (!r)
        return;
    if (r->has_tail)
        s_retire_tail(self, r);
    else if (!r->retired) {
        if (r->waiting)
            self->stats.saves_dropped++;
        r->waiting = false;
        r->retired = true;
        s_maybe_free(self, r);
    }
}

uint32_t kvt_savetrack_end_plan(kvt_savetrack_t *self)
{
    uint32_t n = 0;
    while (self->tails.head != KVT_ILIST_NONE) {
        s_retire_tail(self, &self->recs[self->tails.head]);
        n++;
    }
    return n;
}
