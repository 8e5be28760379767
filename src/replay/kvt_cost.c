/*  kvt_cost — see kvt_cost.h. The figures and where each comes from are in
    docs/configuration.md (cost model). */
#include "kvt_cost.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kvt_cost_defaults(kvt_cost_cfg_t *c, const char *model, uint32_t tp)
{
    memset(c, 0, sizeof *c);
    double t = tp ? (double)tp : 1.0;
    c->h2d_GBps = 51;     //  H100/H200 PCIe Gen5, pinned memory, practical peak
    c->d2h_GBps = 51;     //  the same link the other way
    c->h2d_lat_us = 20;   //  one batched copy's launch and completion
    c->disk_GBps = 3.6;   //  local NVMe: a 1 MB block read in 0.28 ms
    c->disk_lat_us = 100; //  one read's open and first byte
    if (model && !strcmp(model, "qwen3-next-like")) {
        c->name = "Qwen3-Next-80B-A3B bf16 on H200 (per instance of tp GPUs)";
        c->prefill_tps = 50000 * t;
        c->attn_ps = 330 * 2 / t;
        c->step_us = 10000 * 2 / t;
        c->hbm_GBps = 3840;
        c->kv_token_bytes = 24576 / fmin(t, 2);
        c->state_bytes = 39518208 / fmin(t, 16);
    } else if (model && !strcmp(model, "kimi-linear-like")) {
        c->name = "Kimi-Linear-48B-A3B bf16 on H200 (per instance of tp GPUs)";
        c->prefill_tps = 50000 * t;
        c->attn_ps = 240 * 2 / t;
        c->step_us = 6000 * 2 / t;
        c->hbm_GBps = 3840;
        c->kv_token_bytes = 8064; //  the MLA latent is replicated on every rank
        c->state_bytes = 22446080 / fmin(t, 16);
    } else {
        c->name = "Qwen3-8B bf16 on H100 SXM (per instance of tp GPUs)";
        c->prefill_tps = 30000 * t;
        c->attn_ps = 600 * 2 / t;
        c->step_us = 3000 * 2 / t;
        c->hbm_GBps = 2680;
        c->kv_token_bytes = 147456 / fmin(t, 8);
        c->state_bytes = 0;
    }
}

static const struct {
    const char *key; //  knob name
    size_t off;      //  its field
} s_knobs[] = {
    {"prefill_tps", offsetof(kvt_cost_cfg_t, prefill_tps)},
    {"attn_ps", offsetof(kvt_cost_cfg_t, attn_ps)},
    {"step_us", offsetof(kvt_cost_cfg_t, step_us)},
    {"hbm_GBps", offsetof(kvt_cost_cfg_t, hbm_GBps)},
    {"kv_token_bytes", offsetof(kvt_cost_cfg_t, kv_token_bytes)},
    {"state_bytes", offsetof(kvt_cost_cfg_t, state_bytes)},
    {"h2d_GBps", offsetof(kvt_cost_cfg_t, h2d_GBps)},
    {"h2d_lat_us", offsetof(kvt_cost_cfg_t, h2d_lat_us)},
    {"d2h_GBps", offsetof(kvt_cost_cfg_t, d2h_GBps)},
    {"disk_GBps", offsetof(kvt_cost_cfg_t, disk_GBps)},
    {"disk_lat_us", offsetof(kvt_cost_cfg_t, disk_lat_us)},
};

int kvt_cost_set(kvt_cost_cfg_t *c, const char *as, char *err, size_t errlen)
{
    const char *eq = strchr(as, '=');
    size_t klen = eq ? (size_t)(eq - as) : strlen(as);
    for (size_t i = 0; i < sizeof s_knobs / sizeof s_knobs[0]; i++) {
        if (strlen(s_knobs[i].key) != klen || strncmp(as, s_knobs[i].key, klen) != 0)
            continue;
        char *end = NULL;
        errno = 0;
        double v = eq && eq[1] ? strtod(eq + 1, &end) : NAN;
        if (!eq || !eq[1] || errno || *end || !isfinite(v) || v < 0 || v > 1e15 ||
            (v == 0 && !strcmp(s_knobs[i].key, "prefill_tps"))) {
            snprintf(err, errlen, "cost: %.*s: bad value '%s' (a number >= 0%s)", (int)klen, as,
                     eq ? eq + 1 : "", strcmp(s_knobs[i].key, "prefill_tps") ? "" : ", not 0");
            return -1;
        }
        *(double *)((char *)c + s_knobs[i].off) = v;
        return 0;
    }
    snprintf(err, errlen,
             "cost: unknown knob '%.*s' (prefill_tps, attn_ps, step_us, hbm_GBps, kv_token_bytes, "
             "state_bytes, h2d_GBps, h2d_lat_us, d2h_GBps, disk_GBps, disk_lat_us)",
             (int)klen, as);
    return -1;
}

void kvt_cost_work_add(kvt_cost_work_t *w, uint32_t start, uint32_t end, uint32_t prompt)
{
    if (end <= start)
        return;
    uint64_t n = end - start;
    w->tokens += n;
    //  Token i attends to the i tokens before it and itself: the sum over
    //  [start, end) of (i + 1).
    w->attn_pairs += (double)n * ((double)start + (double)end + 1) / 2;
    if (start >= prompt)
        w->decode_ctx += (uint64_t)start * n + n * (n - 1) / 2;
}

//  Bytes over GB/s, in ns (0 GB/s: free).
static double s_xfer_ns(double bytes, double GBps)
{
    return GBps > 0 ? bytes / GBps : 0;
}

uint64_t kvt_cost_step_ns(const kvt_cost_cfg_t *c, const kvt_cost_work_t *w)
{
    double ns = c->step_us * 1e3 + (double)w->tokens * 1e9 / c->prefill_tps +
                w->attn_pairs * c->attn_ps / 1e3 +
                s_xfer_ns((double)w->decode_ctx * c->kv_token_bytes, c->hbm_GBps);
    return (uint64_t)llround(ns);
}

uint64_t kvt_cost_load_ns(const kvt_cost_cfg_t *c, uint64_t tokens, uint64_t disk_tokens,
                          int with_state)
{
    double bytes = (double)tokens * c->kv_token_bytes + (with_state ? c->state_bytes : 0);
    if (bytes == 0)
        return 0;
    double ns = c->h2d_lat_us * 1e3 + s_xfer_ns(bytes, c->h2d_GBps);
    if (disk_tokens)
        ns +=
            c->disk_lat_us * 1e3 + s_xfer_ns((double)disk_tokens * c->kv_token_bytes, c->disk_GBps);
    return (uint64_t)llround(ns);
}

uint64_t kvt_cost_save_ns(const kvt_cost_cfg_t *c, uint64_t tokens, int with_state)
{
    double bytes = (double)tokens * c->kv_token_bytes + (with_state ? c->state_bytes : 0);
    return (uint64_t)llround(s_xfer_ns(bytes, c->d2h_GBps));
}
