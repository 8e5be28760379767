/*  kvt_workload — see kvt_workload.h. */
#include "kvt_workload.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

// --------------------------------------------------------- json lines ----

typedef struct {
    const char *p;   //  cursor
    const char *end; //  end of the line
    const char *err; //  first error
    char field[48];  //  field the error is about
} s_json_t;

static void s_ws(s_json_t *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\r'))
        j->p++;
}

static bool s_fail(s_json_t *j, const char *what)
{
    if (!j->err)
        j->err = what;
    return false;
}

static bool s_expect(s_json_t *j, char c)
{
    s_ws(j);
    if (j->p >= j->end || *j->p != c)
        return s_fail(j, c == ':' ? "expected ':'" : c == '{' ? "expected '{'" : "bad syntax");
    j->p++;
    return true;
}

//  Reads a JSON string (no unescaping needed for keys we know; escapes are
//  skipped correctly) into buf (truncated).
static int s_hex(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

//  Reads a JSON string into buf (truncated), decoding its escapes; an
//  escape JSON does not define is an error. A \u escape outside ASCII is
//  kept as '?' (no key the reader knows is non-ASCII).
static bool s_string(s_json_t *j, char *buf, size_t len)
{
    s_ws(j);
    if (j->p >= j->end || *j->p != '"')
        return s_fail(j, "expected a string");
    j->p++;
    size_t n = 0;
    while (j->p < j->end && *j->p != '"') {
        char c = *j->p++;
        if ((unsigned char)c < 0x20)
            return s_fail(j, "control character in a string");
        if (c == '\\') {
            if (j->p >= j->end)
                break;
            char e = *j->p++;
            switch (e) {
            case '"':
            case '\\':
            case '/':
                c = e;
                break;
            case 'b':
                c = '\b';
                break;
            case 'f':
                c = '\f';
                break;
            case 'n':
                c = '\n';
                break;
            case 'r':
                c = '\r';
                break;
            case 't':
                c = '\t';
                break;
            case 'u': {
                int v = 0;
                for (int k = 0; k < 4; k++) {
                    int h = j->p < j->end ? s_hex(*j->p) : -1;
                    if (h < 0)
                        return s_fail(j, "bad \\u escape in a string");
                    v = v * 16 + h;
                    j->p++;
                }
                c = v > 0 && v < 0x80 ? (char)v : '?';
                break;
            }
            default:
                return s_fail(j, "bad escape in a string");
            }
        }
        if (n + 1 < len)
            buf[n++] = c;
    }
    if (j->p >= j->end)
        return s_fail(j, "unterminated string");
    j->p++;
    buf[n] = 0;
    return true;
}

//  Reads a non-negative integer no larger than max. Accepts JSON numbers
//  with an integral value only ("12", not "12.5" or "-1").
static bool s_uint(s_json_t *j, uint64_t max, uint64_t *out)
{
    s_ws(j);
    const char *start = j->p;
    uint64_t v = 0;
    bool any = false;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
        uint64_t d = (uint64_t)(*j->p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return s_fail(j, "integer out of range");
        v = v * 10 + d;
        j->p++;
        any = true;
    }
    if (j->p < j->end && (*j->p == '.' || *j->p == 'e' || *j->p == 'E')) {
        //  Allow an integral value written as 12.0.
        char *endp;
        errno = 0;
        double d = strtod(start, &endp);
        if (errno || endp > j->end || d < 0 || d >= 18446744073709551616.0 ||
            d != (double)(uint64_t)d)
            return s_fail(j, "expected a non-negative integer");
        j->p = endp;
        v = (uint64_t)d;
        any = true;
    }
    if (!any)
        return s_fail(j, start < j->end && *start == '-' ? "negative value"
                                                         : "expected a non-negative integer");
    if (v > max)
        return s_fail(j, "integer out of range");
    *out = v;
    return true;
}

//  Skips any JSON value (for unknown keys), depth-limited.
static bool s_skip(s_json_t *j, int depth)
{
    s_ws(j);
    if (j->p >= j->end)
        return s_fail(j, "expected a value");
    if (depth > 32)
        return s_fail(j, "nesting too deep");
    char c = *j->p;
    if (c == '"') {
        char tmp[2];
        return s_string(j, tmp, sizeof tmp);
    }
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        j->p++;
        s_ws(j);
        if (j->p < j->end && *j->p == close) {
            j->p++;
            return true;
        }
        while (true) {
            if (c == '{') {
                char tmp[2];
                if (!s_string(j, tmp, sizeof tmp) || !s_expect(j, ':'))
                    return false;
            }
            if (!s_skip(j, depth + 1))
                return false;
            s_ws(j);
            if (j->p < j->end && *j->p == ',') {
                j->p++;
                continue;
            }
            if (j->p < j->end && *j->p == close) {
                j->p++;
                return true;
            }
            return s_fail(j, "bad syntax in a nested value");
        }
    }
    const char *start = j->p;
    while (j->p < j->end && *j->p != ',' && *j->p != '}' && *j->p != ']' && *j->p != ' ')
        j->p++;
    size_t n = (size_t)(j->p - start);
    if ((n == 4 && !memcmp(start, "true", 4)) || (n == 5 && !memcmp(start, "false", 5)) ||
        (n == 4 && !memcmp(start, "null", 4)))
        return true;
    char *endp;
    char tmp[64];
    if (n == 0 || n >= sizeof tmp)
        return s_fail(j, "bad value");
    memcpy(tmp, start, n);
    tmp[n] = 0;
    strtod(tmp, &endp);
    if (*endp)
        return s_fail(j, "bad value");
    return true;
}

//  Parses one trace line into r. On error fills j->err / j->field.
static bool s_parse_line(s_json_t *j, kvt_wreq_t *r)
{
    bool have_ts = false, have_in = false, have_out = false, have_ids = false;
    uint64_t ts = 0, in = 0, out = 0;
    uint32_t *ids = NULL, nids = 0, cap = 0;
    if (!s_expect(j, '{'))
        goto fail;
    s_ws(j);
    if (j->p < j->end && *j->p == '}') {
        j->p++;
        goto check;
    }
    while (true) {
        char key[48];
        if (!s_string(j, key, sizeof key) || !s_expect(j, ':'))
            goto fail;
        snprintf(j->field, sizeof j->field, "%s", key);
        bool dup = false;
        if (!strcmp(key, "timestamp")) {
            dup = have_ts;
            have_ts = true;
            if (!dup && !s_uint(j, KVT_WL_MAX_TIMESTAMP_MS, &ts))
                goto fail;
        } else if (!strcmp(key, "input_length")) {
            dup = have_in;
            have_in = true;
            if (!dup && !s_uint(j, 1u << 20, &in))
                goto fail;
        } else if (!strcmp(key, "output_length")) {
            dup = have_out;
            have_out = true;
            if (!dup && !s_uint(j, 1u << 20, &out))
                goto fail;
        } else if (!strcmp(key, "hash_ids")) {
            dup = have_ids;
            have_ids = true;
            if (!dup) {
                if (!s_expect(j, '['))
                    goto fail;
                s_ws(j);
                if (j->p < j->end && *j->p == ']')
                    j->p++;
                else
                    while (true) {
                        uint64_t v;
                        if (!s_uint(j, UINT32_MAX, &v))
                            goto fail;
                        if (nids == cap) {
                            cap = cap ? cap * 2 : 32;
                            if (cap > KVT_WL_MAX_IDS) {
                                s_fail(j, "more than 2048 block ids (1 Mi tokens)");
                                goto fail;
                            }
                            uint32_t *p = realloc(ids, cap * sizeof *ids);
                            if (!p) {
                                s_fail(j, "out of memory");
                                goto fail;
                            }
                            ids = p;
                        }
                        ids[nids++] = (uint32_t)v;
                        s_ws(j);
                        if (j->p < j->end && *j->p == ',') {
                            j->p++;
                            continue;
                        }
                        if (!s_expect(j, ']'))
                            goto fail;
                        break;
                    }
            }
        } else if (!s_skip(j, 0))
            goto fail;
        if (dup) {
            s_fail(j, "duplicate key");
            goto fail;
        }
        s_ws(j);
        if (j->p < j->end && *j->p == ',') {
            j->p++;
            continue;
        }
        if (!s_expect(j, '}'))
            goto fail;
        break;
    }
check:
    s_ws(j);
    if (j->p != j->end) {
        j->field[0] = 0;
        s_fail(j, "trailing characters after the object");
        goto fail;
    }
    const char *missing = !have_ts    ? "timestamp"
                          : !have_in  ? "input_length"
                          : !have_out ? "output_length"
                          : !have_ids ? "hash_ids"
                                      : NULL;
    if (missing) {
        snprintf(j->field, sizeof j->field, "%s", missing);
        s_fail(j, "missing");
        goto fail;
    }
    if (in == 0) {
        snprintf(j->field, sizeof j->field, "input_length");
        s_fail(j, "must be at least 1");
        goto fail;
    }
    if (nids != (in + KVT_WL_BLOCK_TOKENS - 1) / KVT_WL_BLOCK_TOKENS) {
        snprintf(j->field, sizeof j->field, "hash_ids");
        s_fail(j, "count does not match ceil(input_length / 512)");
        goto fail;
    }
    r->arrival_us = ts * 1000;
    r->input_len = (uint32_t)in;
    r->output_len = out ? (uint32_t)out : 1;
    r->ids = ids;
    r->nids = nids;
    return true;
fail:
    free(ids);
    return false;
}

kvt_workload_t *kvt_workload_mooncake(const char *path, uint32_t limit, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    kvt_workload_t *wl = calloc(1, sizeof *wl);
    char *line = NULL;
    size_t linecap = 0;
    uint32_t cap = 0, lineno = 0;
    bool ok = wl != NULL;
    ssize_t len;
    while (ok && (limit == 0 || wl->n < limit) && (len = getline(&line, &linecap, f)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            len--;
        s_json_t j = {.p = line, .end = line + len};
        s_ws(&j);
        if (j.p == j.end)
            continue; //  blank line
        if (memchr(line, 0, (size_t)len)) {
            snprintf(err, errlen, "%s:%u: NUL byte in the line", path, lineno);
            ok = false;
            break;
        }
        kvt_wreq_t r;
        if (!s_parse_line(&j, &r)) {
            if (j.field[0])
                snprintf(err, errlen, "%s:%u: field '%s': %s", path, lineno, j.field, j.err);
            else
                snprintf(err, errlen, "%s:%u: %s", path, lineno, j.err);
            ok = false;
            break;
        }
        if (s_push(wl, &cap, &r) != 0) {
            free(r.ids);
            snprintf(err, errlen, "%s:%u: out of memory", path, lineno);
            ok = false;
        }
    }
    if (ok && ferror(f)) {
        snprintf(err, errlen, "%s: read error", path);
        ok = false;
    }
    if (ok && wl->n == 0) {
        snprintf(err, errlen, "%s: no requests in the trace", path);
        ok = false;
    }
    free(line);
    fclose(f);
    if (!ok) {
        if (!wl)
            snprintf(err, errlen, "%s: out of memory", path);
        kvt_workload_destroy(&wl);
        return NULL;
    }
    if (s_sort_by_arrival(wl) != 0) {
        snprintf(err, errlen, "%s: out of memory", path);
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
