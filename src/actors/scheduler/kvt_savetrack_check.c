/*  kvt_savetrack — the frontier and leases walks, the stats, the audit and the
    counters; see kvt_savetrack.h. */
#include <stdio.h>
#include <stdlib.h>

#include "actors/common/kvt_counters.h"
#include "kvt_savetrack_int.h"

// ---------------------------------------------------- stats and audit --

bool kvt_savetrack_frontier(const kvt_savetrack_t *self, uint64_t req, uint32_t *frontier)
{
    const kvt_savetrack_rec_t *r = kvt_savetrack_rec(self, req);
    if (!r)
        return false;
    *frontier = r->frontier;
    return true;
}

void kvt_savetrack_leases(const kvt_savetrack_t *self,
                          void (*fn)(void *arg, const uint32_t *blocks, uint32_t nblocks,
                                     int32_t slot),
                          void *arg)
{
    for (uint32_t i = 0; i < self->saves_cap; i++)
        if (self->saves[i].live && self->saves[i].leased)
            fn(arg, self->save_blocks + (size_t)i * self->bpc, self->bpc, self->saves[i].slot);
    for (uint32_t i = 0; i < self->recs_cap; i++) {
        const kvt_savetrack_rec_t *r = &self->recs[i];
        if (r->live && r->has_tail)
            fn(arg, r->tail_blocks, (r->tail_end - r->tail_start) / self->cfg.block_size,
               r->tail_slot);
    }
}

void kvt_savetrack_stats(const kvt_savetrack_t *self, kvt_savetrack_stats_t *out)
{
    *out = self->stats;
}

int kvt_savetrack_check(const kvt_savetrack_t *self, bool deep, char *err, size_t errlen)
{
    const kvt_savetrack_stats_t *st = &self->stats;
    if (st->saves_built != st->saves_ok + st->saves_failed + st->saves_outstanding) {
        snprintf(err, errlen, "savetrack: saves built != settled + outstanding");
        return -1;
    }
    if (st->leases_taken != st->leases_released + st->leases_outstanding) {
        snprintf(err, errlen, "savetrack: leases taken != released + outstanding");
        return -1;
    }
    if (st->saves_expired != st->saves_drained + st->saves_draining ||
        self->deadlines.count != st->saves_outstanding ||
        self->drains.count != st->saves_draining) {
        snprintf(err, errlen,
                 "savetrack: %llu expired != %llu drained + %llu draining, or lists of %u / %u",
                 (unsigned long long)st->saves_expired, (unsigned long long)st->saves_drained,
                 (unsigned long long)st->saves_draining, self->deadlines.count, self->drains.count);
        return -1;
    }
    if (kvt_hmap_size(self->by_id) != st->saves_outstanding + st->saves_draining ||
        kvt_hmap_size(self->by_key) != st->saves_outstanding ||
        kvt_hmap_size(self->by_req) != st->records) {
        snprintf(err, errlen,
                 "savetrack: maps hold %u saves / %u keys / %u requests, counters say "
                 "%llu / %llu / %llu",
                 kvt_hmap_size(self->by_id), kvt_hmap_size(self->by_key),
                 kvt_hmap_size(self->by_req),
                 (unsigned long long)(st->saves_outstanding + st->saves_draining),
                 (unsigned long long)st->saves_outstanding, (unsigned long long)st->records);
        return -1;
    }
    if (!deep)
        return 0;
    uint64_t leases = 0, live_saves = 0, draining = 0, records = 0, tails = 0, specs = 0, skips = 0;
    uint32_t *inflight = calloc(self->recs_cap ? self->recs_cap : 1, sizeof(uint32_t));
    if (!inflight) {
        snprintf(err, errlen, "savetrack: out of memory");
        return -1;
    }
    int rc = -1;
    for (uint32_t i = 0; i < self->saves_cap; i++) {
        const kvt_savetrack_save_t *sv = &self->saves[i];
        if (!sv->live)
            continue;
        leases += sv->leased;
        uint32_t j;
        if (sv->draining) {
            //  Expired: only its id (late verdicts) and its lease are left.
            draining++;
            if (!kvt_hmap_get(self->by_id, kvt_savetrack_save_id(sv->op, sv->key, sv->attempt),
                              &j) ||
                j != i || sv->skippers != S_NONE || sv->spec_prev != S_NONE ||
                sv->spec_next != S_NONE || (kvt_hmap_get(self->by_key, sv->key, &j) && j == i) ||
                !sv->leased) {
                snprintf(err, errlen,
                         "savetrack: draining save %u is not under its id alone, or holds no lease",
                         i);
                goto done;
            }
            continue;
        }
        live_saves++;
        if (sv->rec >= self->recs_cap || !self->recs[sv->rec].live ||
            !kvt_hmap_get(self->by_id, kvt_savetrack_save_id(sv->op, sv->key, sv->attempt), &j) ||
            j != i || !kvt_hmap_get(self->by_key, sv->key, &j) || j != i) {
            snprintf(err, errlen, "savetrack: save %u is not under its keys or has no request", i);
            goto done;
        }
        inflight[sv->rec]++;
        for (uint32_t k = sv->skippers; k != S_NONE && skips <= st->skips_waiting;
             k = self->skips[k].next)
            skips++;
        if (sv->spec_next == S_NONE) {
            specs++;
            if (!kvt_hmap_get(self->by_spec, sv->spec_id, &j) || j != i) {
                snprintf(err, errlen, "savetrack: save %u ends a spec not under its id", i);
                goto done;
            }
        }
    }
    for (uint32_t i = 0; i < self->recs_cap; i++) {
        const kvt_savetrack_rec_t *r = &self->recs[i];
        if (!r->live)
            continue;
        records++;
        tails += r->has_tail;
        leases += r->has_tail;
        uint32_t j;
        if (!kvt_hmap_get(self->by_req, kvt_hmap_key64(r->op.req), &j) || j != i ||
            inflight[i] != r->inflight || (r->has_tail && !r->retired) ||
            (r->retired && r->inflight == 0 && !r->has_tail)) {
            snprintf(err, errlen,
                     "savetrack: request %llu: %u saves in flight, record says %u (tail %d, "
                     "retired %d)",
                     (unsigned long long)r->op.req, inflight[i], r->inflight, r->has_tail,
                     r->retired);
            goto done;
        }
    }
    if (skips != st->skips_waiting) {
        snprintf(err, errlen, "savetrack: %llu skips under saves in flight, gauge %llu",
                 (unsigned long long)skips, (unsigned long long)st->skips_waiting);
        goto done;
    }
    if (specs != kvt_hmap_size(self->by_spec)) {
        snprintf(err, errlen, "savetrack: %llu specs in flight, %u under an id",
                 (unsigned long long)specs, kvt_hmap_size(self->by_spec));
        goto done;
    }
    if (live_saves != st->saves_outstanding || draining != st->saves_draining ||
        records != st->records || tails != self->tails.count || leases != st->leases_outstanding) {
        snprintf(err, errlen,
                 "savetrack: walk found %llu saves / %llu requests / %llu tails / %llu leases",
                 (unsigned long long)live_saves, (unsigned long long)records,
                 (unsigned long long)tails, (unsigned long long)leases);
        goto done;
    }
    rc = 0;
done:
    free(inflight);
    return rc;
}

void kvt_savetrack_counters(const kvt_savetrack_t *self, kvt_counter_t *c, uint32_t *n,
                            uint32_t cap)
{
    const kvt_savetrack_stats_t *st = &self->stats;
#define S_C(field) kvt_counter_add(c, n, cap, "savetrack." #field, st->field)
    S_C(records);
    S_C(saves_built);
    S_C(saves_skipped);
    S_C(saves_ok);
    S_C(saves_failed);
    S_C(saves_outstanding);
    S_C(saves_reemitted);
    S_C(saves_stopped);
    S_C(saves_dropped);
    S_C(tails_leased);
    S_C(tails_retired);
    S_C(chunks_retired);
    S_C(leases_taken);
    S_C(leases_released);
    S_C(leases_outstanding);
    S_C(floors_recorded);
    S_C(floors_ignored);
    S_C(floors_reopened);
    S_C(stale_reports);
    S_C(refused);
    S_C(skips_rewound);
    S_C(skips_lost);
    S_C(skips_waiting);
    S_C(saves_expired);
    S_C(saves_drained);
    S_C(saves_draining);
    S_C(late_verdicts);
#undef S_C
}
