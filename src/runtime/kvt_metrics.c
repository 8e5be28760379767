/*  kvt_metrics — the snapshot holder: how a published round of counters
    becomes metric series, and how a snapshot is rendered in the Prometheus
    text format. See kvt_metrics.h; the HTTP side is kvt_metrics_http.c, the
    collector actor kvt_metrics_collect.c. */
#include "kvt_metrics_int.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

//  Counter names (tier prefix replaced by "tier.", kind suffix stripped)
//  whose value goes up and down: docs/metrics.md's gauges and 0/1 flags.
//  Every other name is a counter.
static const char *const s_gauges[] = {
    "sched.waiting",
    "sched.running",
    "sched.loading",
    "sched.saves_outstanding",
    "sched.leased_blocks",
    "sched.blocks_in_use",
    "sched.records",
    "sched.audit_ok",
    "sched.quiescent",
    "sched.lookups_out",
    "sched.load_orphans",
    "sched.grid_interval",
    "blocks.total",
    "ckpt.slots_in_use",
    "ckpt.valid",
    "ckpt.pinned_entries",
    "stidx.images",
    "stidx.outstanding",
    "stidx.armed",
    "stidx.orphans",
    "savetrack.records",
    "savetrack.saves_outstanding",
    "savetrack.leases_outstanding",
    "agg.open",
    "worker.pending",
    "worker.quarantined",
    "worker.lookup_leases",
    "worker.epoch",
    "tier.capacity_bytes",
    "tier.used_bytes",
    "tier.pinned_bytes",
    "tier.writing_bytes",
    "tier.objects",
    "tier.objects_writing",
    "tier.free_extents",
    "tier.largest_free_bytes",
    "tier.leases_active",
    "tier.quarantined_bytes",
    "tier.objects_quarantined",
    "tier.regions_pending",
    "tier.evict_value",
    "blocks.withheld",
    "savetrack.skips_waiting",
    "savetrack.saves_draining",
    "metrics.targets",
};

//  Tier counters: the prefix a tier's counters carry and the tier label.
static const struct {
    const char *prefix; //  counter name prefix, its dot included
    const char *tier;   //  the tier label's value
} s_tiers[] = {{"pool.", "cpu"}, {"disk.", "disk"}, {"remote.", "remote"}};

//  Kind-indexed counters end in one of these (the kind label's value).
static const char *const s_kinds[] = {"kv_state", "kv", "state"};

//  A histogram's base may end in one of these (the channel label's value).
static const char *const s_channels[] = {"load", "save", "state", "touch", "lookup"};

#define N_OF(a) (sizeof a / sizeof a[0])

const char *kvt_metrics_gauge_at_(size_t i)
{
    return i < N_OF(s_gauges) ? s_gauges[i] : NULL;
}

bool kvt_metrics_is_gauge_(const char *norm)
{
    for (size_t i = 0; i < N_OF(s_gauges); i++)
        if (strcmp(s_gauges[i], norm) == 0)
            return true;
    return false;
}

//  ---- snapshots -------------------------------------------------------------

static void s_snap_free(kvt_msnap_t *s)
{
    if (!s)
        return;
    for (uint32_t i = 0; i < s->n; i++) {
        free(s->rows[i].family);
        free(s->rows[i].labels);
    }
    free(s->rows);
    free(s);
}

void kvt_msnap_unref_(kvt_msnap_t *s)
{
    if (s && atomic_fetch_sub(&s->refs, 1) == 1)
        s_snap_free(s);
}

kvt_msnap_t *kvt_msnap_get_(kvt_metrics_t *self)
{
    pthread_mutex_lock(&self->mu);
    kvt_msnap_t *s = self->snap;
    if (s)
        atomic_fetch_add(&s->refs, 1);
    pthread_mutex_unlock(&self->mu);
    return s;
}

kvt_metrics_t *kvt_metrics_new(void)
{
    kvt_metrics_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    pthread_mutex_init(&self->mu, NULL);
    return self;
}

void kvt_metrics_destroy(kvt_metrics_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kvt_metrics_t *self = *self_p;
    kvt_metrics_stop_http_(self);
    kvt_msnap_unref_(self->snap);
    pthread_mutex_destroy(&self->mu);
    free(self);
    *self_p = NULL;
}

void kvt_metrics_stats(kvt_metrics_t *self, kvt_metrics_stats_t *out)
{
    memset(out, 0, sizeof *out);
    out->publishes = atomic_load(&self->publishes);
    out->refused = atomic_load(&self->refused);
    out->duplicates = atomic_load(&self->duplicates);
    out->scrapes = atomic_load(&self->scrapes);
    out->bad_requests = atomic_load(&self->bad_requests);
    out->render_failed = atomic_load(&self->render_failed);
    kvt_msnap_t *s = kvt_msnap_get_(self);
    out->series = s ? s->n : 0;
    kvt_msnap_unref_(s);
}

//  ---- names -----------------------------------------------------------------

//  text[0..n) as a metric name part: '.' and anything outside [A-Za-z0-9_]
//  become '_'.
static void s_put_name(char *dst, size_t cap, size_t *at, const char *text, size_t n)
{
    for (size_t i = 0; i < n && *at + 1 < cap; i++) {
        char c = text[i];
        bool ok =
            (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
        dst[(*at)++] = ok ? c : '_';
    }
    dst[*at] = 0;
}

//  A label value with the text format's escapes (backslash, quote, newline).
static void s_put_value(char *dst, size_t cap, size_t *at, const char *text, size_t n)
{
    for (size_t i = 0; i < n && *at + 2 < cap; i++) {
        char c = text[i];
        if (c == '\\' || c == '"' || c == '\n') {
            dst[(*at)++] = '\\';
            c = c == '\n' ? 'n' : c;
        }
        dst[(*at)++] = c;
    }
    dst[*at] = 0;
}

static void s_put_label(char *dst, size_t cap, size_t *at, const char *key, const char *val,
                        size_t vn)
{
    size_t kn = strlen(key);
    if (*at + kn + 4 >= cap)
        return;
    if (*at > 0)
        dst[(*at)++] = ',';
    memcpy(dst + *at, key, kn);
    *at += kn;
    dst[(*at)++] = '=';
    dst[(*at)++] = '"';
    s_put_value(dst, cap, at, val, vn);
    if (*at + 1 < cap)
        dst[(*at)++] = '"';
    dst[*at] = 0;
}

static bool s_ends_with(const char *s, size_t n, const char *suffix, size_t *base_n)
{
    size_t k = strlen(suffix);
    if (n <= k + 1 || s[n - k - 1] != '.' || memcmp(s + n - k, suffix, k) != 0)
        return false;
    *base_n = n - k - 1;
    return true;
}

//  A histogram bucket's last segment: le_<decimal> or le_inf; *le = bound
//  (UINT64_MAX for inf).
static bool s_bucket(const char *name, size_t n, size_t *base_n, uint64_t *le)
{
    const char *dot = NULL;
    for (size_t i = n; i > 0; i--)
        if (name[i - 1] == '.') {
            dot = name + i - 1;
            break;
        }
    if (!dot || strncmp(dot + 1, "le_", 3) != 0)
        return false;
    const char *v = dot + 4;
    size_t vn = (size_t)(name + n - v);
    if (vn == 3 && memcmp(v, "inf", 3) == 0) {
        *le = UINT64_MAX;
    } else {
        if (vn == 0 || vn > 19)
            return false;
        uint64_t x = 0;
        for (size_t i = 0; i < vn; i++) {
            if (v[i] < '0' || v[i] > '9')
                return false;
            x = x * 10 + (uint64_t)(v[i] - '0');
        }
        *le = x;
    }
    *base_n = (size_t)(dot - name);
    return true;
}

//  The metric one counter of `src` becomes: family, labels, type, help name.
//  0, or -1 when out of memory.
static int s_map(const kvt_metrics_source_t *src, const char *bases, uint32_t nbases,
                 const kvt_counter_t *c, kvt_mrow_t *row)
{
    char fam[KVT_COUNTER_NAME_MAX + 64], lab[512], norm[KVT_COUNTER_NAME_MAX + 8];
    size_t fa = 0, la = 0;
    fam[0] = lab[0] = 0;
    const char *name = c->name;
    size_t n = strnlen(name, KVT_COUNTER_NAME_MAX);
    memset(row, 0, sizeof *row);
    row->value = c->value;
    row->type = KVT_MTYPE_COUNTER;

    //  actor and rank: "worker.3" is actor worker, rank 3.
    const char *s = src->source;
    size_t sn = strlen(s), an = sn;
    const char *rank = NULL;
    size_t rn = 0;
    for (size_t i = sn; i > 0; i--) {
        if (s[i - 1] >= '0' && s[i - 1] <= '9')
            continue;
        if (s[i - 1] == '.' && i < sn && i > 1) {
            rank = s + i;
            rn = sn - i;
            an = i - 1;
        }
        break;
    }
    s_put_label(lab, sizeof lab, &la, "actor", s, an);
    if (rank)
        s_put_label(lab, sizeof lab, &la, "rank", rank, rn);

    //  histogram parts: <base>.le_<N>, and <base>.sum / .count beside le_inf
    size_t base_n = n;
    uint64_t le = 0;
    bool bucket = s_bucket(name, n, &base_n, &le);
    bool part = bucket;
    int which = bucket ? 0 : -1; //  0 bucket, 1 sum, 2 count
    if (!bucket) {
        size_t bn;
        for (uint32_t i = 0, off = 0; i < nbases; i++) {
            const char *b = bases + off;
            size_t bl = strlen(b);
            off += (uint32_t)bl + 1;
            if (s_ends_with(name, n, "sum", &bn) && bn == bl && memcmp(name, b, bl) == 0)
                which = 1;
            else if (s_ends_with(name, n, "count", &bn) && bn == bl && memcmp(name, b, bl) == 0)
                which = 2;
            if (which > 0) {
                part = true;
                base_n = bl;
                break;
            }
        }
    }
    if (part) {
        row->type = KVT_MTYPE_HISTOGRAM;
        row->part = (uint8_t)which;
        row->le = le;
        size_t bn = base_n;
        //  a channel as the base's last segment
        for (size_t i = 0; i < N_OF(s_channels); i++) {
            size_t cb;
            if (s_ends_with(name, base_n, s_channels[i], &cb)) {
                s_put_label(lab, sizeof lab, &la, "channel", s_channels[i], strlen(s_channels[i]));
                bn = cb;
                break;
            }
        }
        //  microseconds are exposed in seconds
        size_t un;
        if (bn > 3 && memcmp(name + bn - 3, "_us", 3) == 0) {
            row->scale_us = true;
            un = bn - 3;
            fa = 0;
            memcpy(fam, "kvtier_", 7);
            fa = 7;
            s_put_name(fam, sizeof fam, &fa, name, un);
            s_put_name(fam, sizeof fam, &fa, "_seconds", 8);
        } else {
            memcpy(fam, "kvtier_", 7);
            fa = 7;
            s_put_name(fam, sizeof fam, &fa, name, bn);
        }
        snprintf(row->help, sizeof row->help, "%.*s%s", (int)bn, name,
                 bn < base_n ? ".<channel>" : "");
        goto done;
    }

    //  tier counters: pool.* / disk.* / remote.* are one family per name
    //  with a tier label
    const char *rest = name;
    size_t restn = n;
    const char *tier = NULL;
    for (size_t i = 0; i < N_OF(s_tiers); i++) {
        size_t pl = strlen(s_tiers[i].prefix);
        if (n > pl && memcmp(name, s_tiers[i].prefix, pl) == 0) {
            tier = s_tiers[i].tier;
            rest = name + pl;
            restn = n - pl;
            break;
        }
    }
    size_t kindless = restn;
    const char *kind = NULL;
    if (tier) {
        s_put_label(lab, sizeof lab, &la, "tier", tier, strlen(tier));
        for (size_t i = 0; i < N_OF(s_kinds); i++) {
            size_t kb;
            if (s_ends_with(rest, restn, s_kinds[i], &kb)) {
                kind = s_kinds[i];
                kindless = kb;
                break;
            }
        }
        if (kind)
            s_put_label(lab, sizeof lab, &la, "kind", kind, strlen(kind));
        snprintf(norm, sizeof norm, "tier.%.*s", (int)kindless, rest);
        snprintf(row->help, sizeof row->help, "{pool,disk,remote}.%.*s%s", (int)kindless, rest,
                 kind ? ".<kind>" : "");
        memcpy(fam, "kvtier_tier_", 12);
        fa = 12;
        s_put_name(fam, sizeof fam, &fa, rest, kindless);
    } else {
        snprintf(norm, sizeof norm, "%.*s", (int)n, name);
        snprintf(row->help, sizeof row->help, "%.*s", (int)n, name);
        memcpy(fam, "kvtier_", 7);
        fa = 7;
        s_put_name(fam, sizeof fam, &fa, name, n);
    }
    if (kvt_metrics_is_gauge_(norm)) {
        row->type = KVT_MTYPE_GAUGE;
        //  _total is a counter's suffix: a gauge named so drops it
        if (fa > 13 && strcmp(fam + fa - 6, "_total") == 0)
            fam[fa -= 6] = 0;
    } else
        s_put_name(fam, sizeof fam, &fa, "_total", 6);

done:
    row->family = strdup(fam);
    row->labels = strdup(lab);
    return row->family && row->labels ? 0 : -1;
}

//  Rows in render order: by family, then labels, then histogram part and
//  bound; ties (one source reporting a name twice) keep publish order.
static int s_row_cmp(const void *a, const void *b)
{
    const kvt_mrow_t *x = a, *y = b;
    int c = strcmp(x->family, y->family);
    if (c)
        return c;
    c = strcmp(x->labels, y->labels);
    if (c)
        return c;
    if (x->part != y->part)
        return x->part < y->part ? -1 : 1;
    if (x->le != y->le)
        return x->le < y->le ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

int kvt_metrics_publish(kvt_metrics_t *self, const kvt_metrics_source_t *src, uint32_t n)
{
    kvt_msnap_t *s = NULL;
    char *bases = NULL;
    uint64_t total = 0;
    if (n > KVT_METRICS_MAX_SOURCES || (n > 0 && !src))
        goto refused;
    for (uint32_t i = 0; i < n; i++) {
        if (!src[i].source || !src[i].source[0] || (src[i].n > 0 && !src[i].counters))
            goto refused;
        total += src[i].n;
    }
    if (total > KVT_METRICS_MAX_SERIES)
        goto refused;
    s = calloc(1, sizeof *s);
    if (!s || (total > 0 && !(s->rows = calloc(total, sizeof *s->rows))))
        goto refused;
    atomic_init(&s->refs, 1);
    for (uint32_t i = 0; i < n; i++) {
        //  this source's histogram bases (names with a .le_inf bucket)
        size_t blen = 0;
        uint32_t nb = 0;
        free(bases);
        bases = malloc((size_t)src[i].n * (KVT_COUNTER_NAME_MAX + 1) + 1);
        if (!bases)
            goto refused;
        for (uint32_t j = 0; j < src[i].n; j++) {
            const char *c = src[i].counters[j].name;
            size_t cn = strnlen(c, KVT_COUNTER_NAME_MAX), bn;
            uint64_t le;
            if (s_bucket(c, cn, &bn, &le) && le == UINT64_MAX) {
                memcpy(bases + blen, c, bn);
                bases[blen + bn] = 0;
                blen += bn + 1;
                nb++;
            }
        }
        for (uint32_t j = 0; j < src[i].n; j++) {
            kvt_mrow_t *row = &s->rows[s->n];
            int rc = s_map(&src[i], bases, nb, &src[i].counters[j], row);
            row->seq = s->n++;
            if (rc != 0)
                goto refused;
        }
    }
    qsort(s->rows, s->n, sizeof *s->rows, s_row_cmp);
    //  one series per (family, labels, part, bound): a repeat is dropped
    uint32_t w = 0;
    for (uint32_t r = 0; r < s->n; r++) {
        kvt_mrow_t *p = w > 0 ? &s->rows[w - 1] : NULL, *q = &s->rows[r];
        if (p && strcmp(p->family, q->family) == 0 && strcmp(p->labels, q->labels) == 0 &&
            p->part == q->part && p->le == q->le) {
            free(q->family);
            free(q->labels);
            atomic_fetch_add(&self->duplicates, 1);
            continue;
        }
        s->rows[w++] = s->rows[r];
    }
    s->n = w;
    free(bases);
    pthread_mutex_lock(&self->mu);
    kvt_msnap_t *old = self->snap;
    self->snap = s;
    pthread_mutex_unlock(&self->mu);
    kvt_msnap_unref_(old);
    atomic_fetch_add(&self->publishes, 1);
    return 0;

refused:
    free(bases);
    s_snap_free(s);
    atomic_fetch_add(&self->refused, 1);
    return -1;
}

//  ---- rendering -------------------------------------------------------------

typedef struct {
    char *buf;  //  the text so far
    size_t len; //  its length
    size_t cap; //  bytes allocated
    bool oom;   //  an append failed
} s_text_t;

__attribute__((format(printf, 2, 3))) static void s_printf(s_text_t *t, const char *fmt, ...)
{
    if (t->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (k < 0) {
            t->oom = true;
            return;
        }
        if ((size_t)k < t->cap - t->len) {
            t->len += (size_t)k;
            return;
        }
        size_t cap = t->cap * 2 + (size_t)k + 1;
        char *b = realloc(t->buf, cap);
        if (!b) {
            t->oom = true;
            return;
        }
        t->buf = b;
        t->cap = cap;
    }
}

static const char *s_type_name(kvt_mtype_t t)
{
    return t == KVT_MTYPE_GAUGE ? "gauge" : t == KVT_MTYPE_HISTOGRAM ? "histogram" : "counter";
}

static void s_value(s_text_t *t, uint64_t v, bool scale_us)
{
    if (scale_us)
        s_printf(t, "%.6f", (double)v / 1e6);
    else
        s_printf(t, "%" PRIu64, v);
}

static void s_series(s_text_t *t, const char *fam, const char *suffix, const char *labels,
                     const char *extra)
{
    bool any = labels[0] || extra[0];
    s_printf(t, "%s%s%s%s%s%s%s", fam, suffix, any ? "{" : "", labels,
             labels[0] && extra[0] ? "," : "", extra, any ? "}" : "");
}

char *kvt_metrics_render(kvt_metrics_t *self, size_t *len)
{
    s_text_t t = {malloc(4096), 0, 4096, false};
    if (!t.buf)
        return NULL;
    t.buf[0] = 0;
    kvt_msnap_t *s = kvt_msnap_get_(self);
    uint32_t n = s ? s->n : 0;
    for (uint32_t i = 0; i < n; i++) {
        const kvt_mrow_t *r = &s->rows[i];
        if (i == 0 || strcmp(s->rows[i - 1].family, r->family) != 0)
            s_printf(&t, "# HELP %s kvtier %s (docs/metrics.md)\n# TYPE %s %s\n", r->family,
                     r->help, r->family, s_type_name(r->type));
        if (r->type != KVT_MTYPE_HISTOGRAM) {
            s_series(&t, r->family, "", r->labels, "");
            s_printf(&t, " ");
            s_value(&t, r->value, false);
        } else if (r->part == 0) {
            char le[48];
            if (r->le == UINT64_MAX)
                snprintf(le, sizeof le, "le=\"+Inf\"");
            else if (r->scale_us)
                snprintf(le, sizeof le, "le=\"%.6f\"", (double)r->le / 1e6);
            else
                snprintf(le, sizeof le, "le=\"%" PRIu64 "\"", r->le);
            s_series(&t, r->family, "_bucket", r->labels, le);
            s_printf(&t, " ");
            s_value(&t, r->value, false);
        } else {
            s_series(&t, r->family, r->part == 1 ? "_sum" : "_count", r->labels, "");
            s_printf(&t, " ");
            s_value(&t, r->value, r->part == 1 && r->scale_us);
        }
        s_printf(&t, "\n");
    }
    kvt_msnap_unref_(s);
    //  the endpoint's own series
    kvt_metrics_stats_t st;
    kvt_metrics_stats(self, &st);
    const struct {
        const char *name, *type, *help;
        uint64_t v;
    } own[] = {
        {"kvtier_metrics_publishes_total", "counter", "snapshots published", st.publishes},
        {"kvtier_metrics_refused_total", "counter", "publishes refused (bad input)", st.refused},
        {"kvtier_metrics_duplicates_total", "counter", "series a source reported twice (dropped)",
         st.duplicates},
        {"kvtier_metrics_scrapes_total", "counter", "GET /metrics answered", st.scrapes},
        {"kvtier_metrics_bad_requests_total", "counter", "requests answered 404 or 405",
         st.bad_requests},
        {"kvtier_metrics_render_failed_total", "counter", "scrapes answered 500", st.render_failed},
        {"kvtier_metrics_series", "gauge", "series in the current snapshot", st.series},
    };
    for (size_t i = 0; i < N_OF(own); i++)
        s_printf(&t, "# HELP %s kvtier endpoint: %s\n# TYPE %s %s\n%s %" PRIu64 "\n", own[i].name,
                 own[i].help, own[i].name, own[i].type, own[i].name, own[i].v);
    if (t.oom) {
        free(t.buf);
        return NULL;
    }
    if (len)
        *len = t.len;
    return t.buf;
}
