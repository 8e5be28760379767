/*  kvt_workload — see kvt_workload.h. */
#include "kvt_workload.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvt_trace_reader.h"

// ------------------------------------------------------------- tokens ----

static inline uint64_t s_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void kvt_workload_tokens(const kvt_workload_t *self, uint32_t i, uint32_t *out)
{
    const kvt_wreq_t *r = &self->reqs[i];
    for (uint32_t t = 0; t < r->input_len; t++) {
        uint64_t id = r->ids[t / KVT_WL_BLOCK_TOKENS];
        uint64_t j = t % KVT_WL_BLOCK_TOKENS;
        //  A vocabulary of ~150k ids, as large models have.
        out[t] = (uint32_t)(s_mix(id * 0x9E3779B97F4A7C15ull + j + 1) % 151000u);
    }
}

void kvt_workload_time_scale(kvt_workload_t *self, double factor)
{
    for (uint32_t i = 0; i < self->n; i++)
        self->reqs[i].arrival_us = (uint64_t)llround((double)self->reqs[i].arrival_us * factor);
}

void kvt_workload_destroy(kvt_workload_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kvt_workload_t *self = *self_p;
    for (uint32_t i = 0; i < self->n; i++)
        free(self->reqs[i].ids);
    free(self->reqs);
    free(self);
    *self_p = NULL;
}

static int s_push(kvt_workload_t *wl, uint32_t *cap, const kvt_wreq_t *r)
{
    if (wl->n == *cap) {
        uint32_t n = *cap ? *cap * 2 : 256;
        kvt_wreq_t *p = realloc(wl->reqs, (size_t)n * sizeof *p);
        if (!p)
            return -1;
        wl->reqs = p;
        *cap = n;
    }
    wl->reqs[wl->n++] = *r;
    wl->input_tokens += r->input_len;
    return 0;
}

//  Stable merge sort by arrival time: requests that arrive together keep
//  their source order, so a replay never depends on allocation addresses.
static int s_sort_by_arrival(kvt_workload_t *wl)
{
    uint32_t n = wl->n;
    kvt_wreq_t *tmp = malloc((size_t)(n ? n : 1) * sizeof *tmp);
    if (!tmp)
        return -1;
    kvt_wreq_t *a = wl->reqs, *b = tmp;
    for (uint32_t width = 1; width < n; width *= 2) {
        for (uint32_t lo = 0; lo < n; lo += 2 * width) {
            uint32_t mid = lo + width < n ? lo + width : n;
            uint32_t hi = lo + 2 * width < n ? lo + 2 * width : n;
            uint32_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                b[k++] = a[j].arrival_us < a[i].arrival_us ? a[j++] : a[i++];
            while (i < mid)
                b[k++] = a[i++];
            while (j < hi)
                b[k++] = a[j++];
        }
        kvt_wreq_t *t = a;
        a = b;
        b = t;
    }
    if (a != wl->reqs)
        memcpy(wl->reqs, a, (size_t)n * sizeof *a);
    free(tmp);
    return 0;
}

// ----------------------------------------------------------- mooncake ----

kvt_workload_t *kvt_workload_mooncake(const char *path, uint32_t limit, char *err, size_t errlen)
{
    kvt_trace_reader_t *rd = kvt_trace_reader_new(path, 0, err, errlen);
    if (!rd)
        return NULL;
    kvt_workload_t *wl = calloc(1, sizeof *wl);
    uint32_t cap = 0;
    bool ok = wl != NULL;
    if (!ok)
        snprintf(err, errlen, "%s: out of memory", path);
    while (ok && (limit == 0 || wl->n < limit)) {
        kvt_wreq_t r;
        int rc = kvt_trace_reader_next(rd, &r, err, errlen);
        if (rc <= 0) {
            ok = rc == 0;
            break;
        }
        if (s_push(wl, &cap, &r) != 0) {
            free(r.ids);
            snprintf(err, errlen, "%s:%llu: out of memory", path,
                     (unsigned long long)kvt_trace_reader_line(rd));
            ok = false;
        }
    }
    kvt_trace_reader_destroy(&rd);
    if (ok && wl->n == 0) {
        snprintf(err, errlen, "%s: no requests in the trace", path);
        ok = false;
    }
    if (ok && s_sort_by_arrival(wl) != 0) {
        snprintf(err, errlen, "%s: out of memory", path);
        ok = false;
    }
    if (!ok) {
        kvt_workload_destroy(&wl);
        return NULL;
    }
    snprintf(wl->source, sizeof wl->source, "mooncake:%s", path);
    return wl;
}

// ---------------------------------------------------------- synthetic ----

typedef struct {
    uint64_t s; //  state
} s_rng_t;

static uint64_t s_next(s_rng_t *r)
{
    r->s += 0x9E3779B97F4A7C15ull;
    return s_mix(r->s);
}

static uint64_t s_below(s_rng_t *r, uint64_t n)
{
    return n ? s_next(r) % n : 0;
}

kvt_workload_t *kvt_workload_synthetic(const kvt_synth_cfg_t *cfg_in, uint32_t limit)
{
    kvt_synth_cfg_t c = *cfg_in;
    if (!c.sessions)
        c.sessions = 128;
    if (!c.turns)
        c.turns = 6;
    if (!c.system_blocks)
        c.system_blocks = 4;
    if (!c.user_blocks)
        c.user_blocks = 2;
    if (!c.max_output)
        c.max_output = 256;
    if (!c.window_us)
        c.window_us = 60ull * 1000000;
    if (!c.think_us)
        c.think_us = 8ull * 1000000;
    kvt_workload_t *wl = calloc(1, sizeof *wl);
    if (!wl)
        return NULL;
    s_rng_t rng = {c.seed * 0xD1B54A32D192ED03ull + 1};
    uint32_t next_id = c.system_blocks; //  ids 0..system_blocks-1: the shared system prompt
    uint32_t cap = 0;
    uint32_t maxids = c.system_blocks + c.turns * (c.user_blocks + 2) + 2;
    uint32_t *hist = malloc(maxids * sizeof *hist);
    if (!hist)
        goto oom;
    for (uint32_t s = 0; s < c.sessions; s++) {
        uint32_t nh = 0;
        for (uint32_t i = 0; i < c.system_blocks; i++)
            hist[nh++] = i;
        uint64_t t = s_below(&rng, c.window_us);
        for (uint32_t turn = 0; turn < c.turns; turn++) {
            //  New content: the reply to the previous turn (folded into new
            //  blocks) and this turn's user message.
            uint32_t add = 1 + (uint32_t)s_below(&rng, c.user_blocks);
            for (uint32_t i = 0; i < add && nh < maxids; i++)
                hist[nh++] = next_id++;
            kvt_wreq_t r;
            memset(&r, 0, sizeof r);
            r.arrival_us = t;
            r.nids = nh;
            //  The last block is partial: a prompt rarely ends on 512 tokens.
            r.input_len =
                (nh - 1) * KVT_WL_BLOCK_TOKENS + 1 + (uint32_t)s_below(&rng, KVT_WL_BLOCK_TOKENS);
            r.output_len = c.max_output > 16 ? 16 + (uint32_t)s_below(&rng, c.max_output - 15)
                                             : 1 + (uint32_t)s_below(&rng, c.max_output);
            r.ids = malloc(nh * sizeof *r.ids);
            if (!r.ids)
                goto oom;
            memcpy(r.ids, hist, nh * sizeof *r.ids);
            if (s_push(wl, &cap, &r) != 0) {
                free(r.ids);
                goto oom;
            }
            //  The next turn keeps this prompt's full blocks; its partial
            //  last block is completed by the reply, i.e. becomes new content.
            nh--;
            t += c.think_us / 2 + s_below(&rng, c.think_us);
        }
    }
    free(hist);
    hist = NULL;
    if (s_sort_by_arrival(wl) != 0)
        goto oom;
    if (limit && wl->n > limit) {
        for (uint32_t i = limit; i < wl->n; i++) {
            wl->input_tokens -= wl->reqs[i].input_len;
            free(wl->reqs[i].ids);
        }
        wl->n = limit;
    }
    snprintf(wl->source, sizeof wl->source,
             "synthetic:seed=%llu,sessions=%u,turns=%u,system_blocks=%u",
             (unsigned long long)c.seed, c.sessions, c.turns, c.system_blocks);
    return wl;
oom:
    free(hist);
    kvt_workload_destroy(&wl);
    return NULL;
}
