/*  kvt_report — see kvt_report.h. */
#include "kvt_report.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    kvt_report_sample_t *s; //  samples, oldest first (cap of them allocated)
    uint32_t n;             //  samples held
    uint64_t period_us;     //  modelled time between samples (doubles at each decimation)
} s_series_t;

struct kvt_report_t {
    uint32_t cap;       //  samples per instance (even, >= 2)
    uint64_t period_us; //  every instance's first period
    s_series_t *inst;   //  one series per instance started
    uint32_t ninst;     //  instances started
};

kvt_report_t *kvt_report_new(uint32_t cap, uint64_t period_us)
{
    kvt_report_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    cap = cap ? cap : KVT_REPORT_DEFAULT_CAP;
    self->cap = cap < 2 ? 2 : cap & ~1u;
    self->period_us = period_us ? period_us : KVT_REPORT_DEFAULT_PERIOD_US;
    return self;
}

void kvt_report_destroy(kvt_report_t **self_p)
{
    kvt_report_t *self = *self_p;
    if (!self)
        return;
    for (uint32_t k = 0; k < self->ninst; k++)
        free(self->inst[k].s);
    free(self->inst);
    free(self);
    *self_p = NULL;
}

int kvt_report_instance(kvt_report_t *self)
{
    s_series_t *grown = realloc(self->inst, (self->ninst + 1) * sizeof *grown);
    if (!grown)
        return -1;
    self->inst = grown;
    s_series_t *s = &self->inst[self->ninst];
    memset(s, 0, sizeof *s);
    s->s = calloc(self->cap, sizeof *s->s);
    if (!s->s)
        return -1;
    s->period_us = self->period_us;
    self->ninst++;
    return 0;
}

bool kvt_report_due(const kvt_report_t *self, uint64_t t_us)
{
    if (!self->ninst)
        return false;
    const s_series_t *s = &self->inst[self->ninst - 1];
    return s->n == 0 || t_us >= s->s[s->n - 1].t_us + s->period_us;
}

int kvt_report_add(kvt_report_t *self, const kvt_report_sample_t *x)
{
    if (!self->ninst)
        return -1;
    s_series_t *s = &self->inst[self->ninst - 1];
    if (s->n == self->cap) {
        //  Every other sample, the first kept; the period doubles so the
        //  spacing stays even.
        for (uint32_t i = 0; 2 * i < s->n; i++)
            s->s[i] = s->s[2 * i];
        s->n /= 2;
        s->period_us *= 2;
    }
    s->s[s->n++] = *x;
    return 0;
}

uint32_t kvt_report_instances(const kvt_report_t *self)
{
    return self->ninst;
}

const kvt_report_sample_t *kvt_report_samples(const kvt_report_t *self, uint32_t k, uint32_t *n)
{
    *n = k < self->ninst ? self->inst[k].n : 0;
    return k < self->ninst ? self->inst[k].s : NULL;
}

uint64_t kvt_report_period(const kvt_report_t *self, uint32_t k)
{
    return k < self->ninst ? self->inst[k].period_us : 0;
}

static int s_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

//  a += b for a gauge (unknown stays unknown).
static void s_gauge_add(uint64_t *a, uint64_t b)
{
    *a = *a == KVT_REPORT_UNKNOWN || b == KVT_REPORT_UNKNOWN ? KVT_REPORT_UNKNOWN : *a + b;
}

kvt_report_sample_t *kvt_report_merged(const kvt_report_t *self, uint32_t *n)
{
    *n = 0;
    uint32_t total = 0;
    for (uint32_t k = 0; k < self->ninst; k++)
        total += self->inst[k].n;
    if (!total)
        return NULL;
    uint64_t *t = malloc(total * sizeof *t);
    kvt_report_sample_t *rows = calloc(total, sizeof *rows);
    uint32_t *at = calloc(self->ninst, sizeof *at); //  per instance: samples at or before t
    if (!t || !rows || !at) {
        free(t);
        free(rows);
        free(at);
        return NULL;
    }
    uint32_t m = 0;
    for (uint32_t k = 0; k < self->ninst; k++)
        for (uint32_t i = 0; i < self->inst[k].n; i++)
            t[m++] = self->inst[k].s[i].t_us;
    qsort(t, m, sizeof *t, s_cmp_u64);
    uint32_t out = 0;
    for (uint32_t i = 0; i < m; i++) {
        if (out && rows[out - 1].t_us == t[i])
            continue; //  one row per distinct time
        kvt_report_sample_t *r = &rows[out++];
        r->t_us = t[i];
        for (uint32_t k = 0; k < self->ninst; k++) {
            const s_series_t *s = &self->inst[k];
            while (at[k] < s->n && s->s[at[k]].t_us <= t[i])
                at[k]++;
            if (!at[k])
                continue; //  not started by t: contributes nothing
            const kvt_report_sample_t *x = &s->s[at[k] - 1];
            r->finished += x->finished;
            r->rejected += x->rejected;
            r->input_tokens += x->input_tokens;
            r->admitted_tokens += x->admitted_tokens;
            r->hbm_tokens += x->hbm_tokens;
            r->cpu_tokens += x->cpu_tokens;
            r->disk_tokens += x->disk_tokens;
            s_gauge_add(&r->running, x->running);
            s_gauge_add(&r->waiting, x->waiting);
            s_gauge_add(&r->hbm_used, x->hbm_used);
            s_gauge_add(&r->cpu_used, x->cpu_used);
            s_gauge_add(&r->disk_used, x->disk_used);
            r->hbm_cap += x->hbm_cap;
            r->cpu_cap += x->cpu_cap;
            r->disk_cap += x->disk_cap;
        }
    }
    free(t);
    free(at);
    *n = out;
    return rows;
}

double kvt_report_hit_share(const kvt_report_sample_t *s)
{
    if (!s->admitted_tokens)
        return 0.0;
    double h =
        (double)(s->hbm_tokens + s->cpu_tokens + s->disk_tokens) / (double)s->admitted_tokens;
    return h > 1.0 ? 1.0 : h;
}

uint32_t kvt_report_ttft_cdf(const uint64_t *v, uint32_t n, double *q, uint64_t *value,
                             uint32_t cap)
{
    if (!n || !cap)
        return 0;
    uint32_t pts = n < cap ? n : cap;
    for (uint32_t i = 0; i < pts; i++) {
        double qi = pts > 1 ? (double)i / (double)(pts - 1) : 1.0;
        uint32_t idx = (uint32_t)llround(qi * (double)(n - 1));
        q[i] = qi;
        value[i] = v[idx];
    }
    return pts;
}

//  A gauge's bytes and percent of cap ("-" when unknown or no such tier).
static int s_gauge(FILE *f, uint64_t used, uint64_t cap)
{
    if (used == KVT_REPORT_UNKNOWN || cap == 0)
        return fprintf(f, "\t-\t-");
    return fprintf(f, "\t%" PRIu64 "\t%.2f", used, 100.0 * (double)used / (double)cap);
}

//  A request gauge ("-" when unknown).
static int s_count(FILE *f, uint64_t v)
{
    return v == KVT_REPORT_UNKNOWN ? fprintf(f, "\t-") : fprintf(f, "\t%" PRIu64, v);
}

int kvt_report_write_series(FILE *f, const kvt_report_sample_t *rows, uint32_t n)
{
    int bad = fprintf(f, "# t_s\tfinished\trejected\trunning\twaiting\tinput_tokens\thbm_tokens\t"
                         "cpu_tokens\tdisk_tokens\trecomputed_tokens\thit_pct\thbm_bytes\thbm_pct\t"
                         "cpu_bytes\tcpu_pct\tdisk_bytes\tdisk_pct\tadmitted_tokens\n") < 0;
    for (uint32_t i = 0; i < n; i++) {
        const kvt_report_sample_t *r = &rows[i];
        uint64_t hits = r->hbm_tokens + r->cpu_tokens + r->disk_tokens;
        bad |= fprintf(f, "%.6f\t%" PRIu64 "\t%" PRIu64, (double)r->t_us / 1e6, r->finished,
                       r->rejected) < 0;
        bad |= s_count(f, r->running) < 0;
        bad |= s_count(f, r->waiting) < 0;
        bad |= fprintf(f, "\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64 "\t%.2f",
                       r->input_tokens, r->hbm_tokens, r->cpu_tokens, r->disk_tokens,
                       r->admitted_tokens > hits ? r->admitted_tokens - hits : 0,
                       100.0 * kvt_report_hit_share(r)) < 0;
        bad |= s_gauge(f, r->hbm_used, r->hbm_cap) < 0;
        bad |= s_gauge(f, r->cpu_used, r->cpu_cap) < 0;
        bad |= s_gauge(f, r->disk_used, r->disk_cap) < 0;
        bad |= fprintf(f, "\t%" PRIu64 "\n", r->admitted_tokens) < 0;
    }
    return bad ? -1 : 0;
}
