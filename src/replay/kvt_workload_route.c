/*  kvt_workload_route — see kvt_workload.h: routing a workload over engine
    instances by prefix affinity, and the subset each instance replays. */
#include <stdbool.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "kvt_workload.h"

//  Open addressing over block ids: slot = id + 1 (0 = empty), its instance.
typedef struct {
    uint32_t *key;  //  block id + 1, 0 = empty
    uint32_t *inst; //  the last instance a request with that id went to
    uint64_t mask;  //  capacity - 1 (a power of two)
} s_map_t;

static uint64_t s_slot(const s_map_t *m, uint32_t id)
{
    uint64_t h = ((uint64_t)id + 1) * 0x9E3779B97F4A7C15ull;
    uint64_t i = (h >> 29) & m->mask;
    while (m->key[i] && m->key[i] != id + 1)
        i = (i + 1) & m->mask;
    return i;
}

int kvt_workload_route(const kvt_workload_t *self, uint32_t n, uint32_t *inst_of)
{
    if (n <= 1) {
        for (uint32_t i = 0; i < self->n; i++)
            inst_of[i] = 0;
        return 0;
    }
    uint64_t ids = 0;
    for (uint32_t i = 0; i < self->n; i++)
        ids += self->reqs[i].nids;
    uint64_t cap = 16;
    while (cap < 2 * ids + 2)
        cap <<= 1;
    s_map_t m = {calloc(cap, sizeof(uint32_t)), calloc(cap, sizeof(uint32_t)), cap - 1};
    uint64_t *load = calloc(n, sizeof *load);
    int rc = -1;
    if (!m.key || !m.inst || !load)
        goto cleanup;
    for (uint32_t i = 0; i < self->n; i++) {
        const kvt_wreq_t *r = &self->reqs[i];
        uint32_t k = 0, at = 0;
        while (k < r->nids) {
            uint64_t s = s_slot(&m, r->ids[k]);
            if (!m.key[s])
                break;
            at = m.inst[s];
            k++;
        }
        uint64_t matched = (uint64_t)k * KVT_WL_BLOCK_TOKENS;
        uint32_t least = 0;
        for (uint32_t j = 1; j < n; j++)
            if (load[j] < load[least])
                least = j;
        //  Affinity unless it would pile onto one instance (a prefix every
        //  request shares, a system prompt, would send them all there).
        bool follow = k > 0 && 2 * matched >= r->input_len &&
                      load[at] <= 2 * load[least] + 4ull * r->input_len;
        uint32_t to = follow ? at : least;
        inst_of[i] = to;
        load[to] += r->input_len;
        for (uint32_t b = 0; b < r->nids; b++) {
            uint64_t s = s_slot(&m, r->ids[b]);
            m.key[s] = r->ids[b] + 1;
            m.inst[s] = to;
        }
    }
    rc = 0;
cleanup:
    free(m.key);
    free(m.inst);
    free(load);
    return rc;
}

kvt_workload_t *kvt_workload_subset(const kvt_workload_t *self, const uint32_t *inst_of, uint32_t k)
{
    kvt_workload_t *wl = calloc(1, sizeof *wl);
    if (!wl)
        return NULL;
    uint32_t n = 0;
    for (uint32_t i = 0; i < self->n; i++)
        n += inst_of[i] == k;
    wl->reqs = calloc(n ? n : 1, sizeof *wl->reqs);
    if (!wl->reqs)
        goto oom;
    for (uint32_t i = 0; i < self->n; i++) {
        if (inst_of[i] != k)
            continue;
        kvt_wreq_t *r = &wl->reqs[wl->n];
        *r = self->reqs[i];
        r->ids = malloc((size_t)(r->nids ? r->nids : 1) * sizeof *r->ids);
        if (!r->ids)
            goto oom;
        memcpy(r->ids, self->reqs[i].ids, (size_t)r->nids * sizeof *r->ids);
        wl->n++;
        wl->input_tokens += r->input_len;
    }
    snprintf(wl->source, sizeof wl->source, "%.200s (instance %u)", self->source, k);
    return wl;
oom:
    kvt_workload_destroy(&wl);
    return NULL;
}
