/*  kvt_config_resolve — the checks between settings (C1, C3), what AUTO
    resolves to, and the derived values, the namespace (C2) among them. */
#include "kvt_config_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#include "base/kvt_namespace.h"
#include "kvtier/kvt_metrics.h"

//  Presets. The attention side keeps the replay's toy scale (16 bytes per
//  token per layer per plane, 4 layers); a hybrid preset's state image is
//  as many tokens' worth of that KV as the real model's image is of its own
//  KV per rank at TP 2 (docs/configuration.md gives the arithmetic).
static const kvt_config_preset_t s_presets[] = {
    [KVT_MODEL_DENSE] = {"dense", KVT_LAYOUT_DENSE, 4, 2, 16, 0, 0},
    [KVT_MODEL_QWEN3_NEXT_LIKE] = {"qwen3-next-like", KVT_LAYOUT_GDN, 4, 2, 16, 1608 * 128, 1024},
    [KVT_MODEL_KIMI_LINEAR_LIKE] = {"kimi-linear-like", KVT_LAYOUT_KDA, 4, 1, 32, 1392 * 128, 1024},
};

const kvt_config_preset_t *kvt_config_preset(kvt_model_t model)
{
    if ((unsigned)model >= sizeof s_presets / sizeof s_presets[0])
        return &s_presets[KVT_MODEL_DENSE];
    return &s_presets[model];
}

const char *kvt_config_layout_name(kvt_layout_t layout)
{
    static const char *const names[] = {"auto", "dense", "gdn", "kda"};
    return (unsigned)layout < 4 ? names[layout] : "?";
}

const char *kvt_config_dtype_name(kvt_dtype_t dtype)
{
    static const char *const names[] = {"bf16", "fp16", "fp32", "fp8_e4m3", "fp8_e5m2"};
    return (unsigned)dtype < 5 ? names[dtype] : "?";
}

static bool s_owns_state(kvt_layout_t layout)
{
    return layout == KVT_LAYOUT_GDN || layout == KVT_LAYOUT_KDA;
}

//  The model a state-owning layout belongs to.
static const char *s_owner_of(kvt_layout_t layout)
{
    for (size_t i = 0; i < sizeof s_presets / sizeof s_presets[0]; i++)
        if (s_presets[i].layout == layout)
            return s_presets[i].name;
    return "?";
}

typedef struct {
    kvt_config_origin_fn *fn; //  where a setting came from; NULL: not known
    void *arg;                //  its argument
    char buf[4][1200];        //  " (ORIGIN)" texts, a few alive at once
    unsigned next;            //  next buffer to use
} s_from_t;

//  " (ORIGIN)" for a setting, or "" when the origin is not known.
static const char *s_from(s_from_t *f, const char *key)
{
    const char *o = f->fn ? f->fn(f->arg, key) : NULL;
    if (!o)
        return "";
    char *b = f->buf[f->next++ % 4];
    snprintf(b, sizeof f->buf[0], " (%s)", o);
    return b;
}

static void s_log(kvt_config_log_fn *log, void *arg, const char *key, const char *value,
                  const char *why)
{
    if (log)
        log(arg, key, value, why);
}

static void s_dur_text(uint64_t ns, char *buf, size_t len)
{
    if (ns % 1000000000ull == 0)
        snprintf(buf, len, "%" PRIu64 " s", (uint64_t)(ns / 1000000000ull));
    else
        snprintf(buf, len, "%" PRIu64 " ms", (uint64_t)(ns / 1000000ull));
}

//  C2: everything that changes the stored bytes, in a stable form (the
//  values, never how they were spelt or where they came from). Pool sizes,
//  timeouts and the checkpoint interval change what is kept and when, never
//  the bytes of a key, so they stay out. The one format of the namespace.
void kvt_config_namespace(kvt_config_t *cfg)
{
    const kvt_config_preset_t *preset = kvt_config_preset(cfg->model);
    if (cfg->layout == KVT_LAYOUT_AUTO)
        cfg->layout = preset->layout;
    if (cfg->model_id[0] == 0)
        snprintf(cfg->model_id, sizeof cfg->model_id, "%s", preset->name);
    char tp[32];
    if (cfg->tp_rank_collapse == KVT_ON)
        snprintf(tp, sizeof tp, "collapsed");
    else
        snprintf(tp, sizeof tp, "%u", cfg->tp);
    snprintf(cfg->ns_desc, sizeof cfg->ns_desc,
             "kvtier/2 model=%s layout=%s layers=%u planes=%u token_bytes=%u block=%u chunk=%u "
             "state_bytes=%" PRIu64 " dtype=%s tp=%s pp=%u spec=%s",
             cfg->model_id, kvt_config_layout_name(cfg->layout), cfg->layers, cfg->planes,
             cfg->token_bytes, cfg->block_size, cfg->chunk_size, cfg->state_bytes,
             kvt_config_dtype_name(cfg->dtype), tp, cfg->pipeline_parallel, cfg->speculative);
    cfg->ns = kvt_namespace_hash(cfg->ns_desc);
}

int kvt_config_resolve_from(kvt_config_t *cfg, kvt_config_origin_fn *origin, void *origin_arg,
                            kvt_config_log_fn *log, void *log_arg, char *err, size_t errlen)
{
    s_from_t f;
    f.fn = origin;
    f.arg = origin_arg;
    f.next = 0;
    if (kvt_config_check_fields(cfg, origin, origin_arg, err, errlen) != 0)
        return -1;
    const kvt_config_preset_t *preset = kvt_config_preset(cfg->model);
    char val[160], why[400];

    //  Geometry.
    if (cfg->chunk_size % cfg->block_size != 0) {
        snprintf(err, errlen, "chunk_size = %u%s is not a multiple of block_size = %u%s",
                 cfg->chunk_size, s_from(&f, "chunk_size"), cfg->block_size,
                 s_from(&f, "block_size"));
        return -1;
    }
    if (cfg->checkpoint_interval % cfg->chunk_size != 0) {
        snprintf(err, errlen, "checkpoint_interval = %u%s is not a multiple of chunk_size = %u%s",
                 cfg->checkpoint_interval, s_from(&f, "checkpoint_interval"), cfg->chunk_size,
                 s_from(&f, "chunk_size"));
        return -1;
    }
    if (cfg->step_tokens < cfg->max_running) {
        snprintf(err, errlen,
                 "step_tokens = %u%s is below max_running = %u%s (every running "
                 "request decodes a token each step)",
                 cfg->step_tokens, s_from(&f, "step_tokens"), cfg->max_running,
                 s_from(&f, "max_running"));
        return -1;
    }

    //  The metrics endpoint's address (it is bound later, by whoever serves it).
    if (cfg->metrics_addr[0]) {
        char why_addr[200];
        if (kvt_metrics_check_addr(cfg->metrics_addr, why_addr, sizeof why_addr) != 0) {
            snprintf(err, errlen, "metrics_addr%s: %s", s_from(&f, "metrics_addr"), why_addr);
            return -1;
        }
    }

    //  Authenticated links: the keys come as a set (the files are read when
    //  the system starts: kvt_system_set_curve).
    if (cfg->curve_secret_key[0] && !cfg->curve_public_keys[0]) {
        snprintf(err, errlen,
                 "curve_secret_key%s needs curve_public_keys (the directory of the public "
                 "certificates allowed to connect)",
                 s_from(&f, "curve_secret_key"));
        return -1;
    }
    static const char *curve_deps[] = {"curve_public_keys", "curve_server_key"};
    const char *curve_vals[] = {cfg->curve_public_keys, cfg->curve_server_key};
    for (int i = 0; i < 2; i++)
        if (curve_vals[i][0] && !cfg->curve_secret_key[0]) {
            snprintf(err, errlen, "%s%s needs curve_secret_key (this process's certificate)",
                     curve_deps[i], s_from(&f, curve_deps[i]));
            return -1;
        }

    //  C3: a state-owning layout accepts only its own layout.
    kvt_layout_t own = preset->layout;
    bool layout_auto = cfg->layout == KVT_LAYOUT_AUTO;
    if (layout_auto)
        cfg->layout = own;
    else if (cfg->layout != own && (s_owns_state(own) || s_owns_state(cfg->layout))) {
        if (s_owns_state(own))
            snprintf(err, errlen,
                     "layout = %s%s: model %s%s owns its state in layout %s and accepts only "
                     "its own layout (rule C3)",
                     kvt_config_layout_name(cfg->layout), s_from(&f, "layout"), preset->name,
                     s_from(&f, "model"), kvt_config_layout_name(own));
        else
            snprintf(err, errlen,
                     "layout = %s%s: a state-owning layout accepts only its own model (%s), "
                     "not model %s%s (rule C3)",
                     kvt_config_layout_name(cfg->layout), s_from(&f, "layout"),
                     s_owner_of(cfg->layout), preset->name, s_from(&f, "model"));
        return -1;
    }
    bool state = s_owns_state(cfg->layout);
    if (state && cfg->state_bytes == 0) {
        snprintf(err, errlen, "state_bytes = 0%s: layout %s stores a recurrent state per request",
                 s_from(&f, "state_bytes"), kvt_config_layout_name(cfg->layout));
        return -1;
    }
    if (!state && cfg->state_bytes != 0) {
        snprintf(err, errlen, "state_bytes = %" PRIu64 "%s: layout %s has no recurrent state",
                 cfg->state_bytes, s_from(&f, "state_bytes"), kvt_config_layout_name(cfg->layout));
        return -1;
    }
    if (cfg->tp_rank_collapse == KVT_ON && state) {
        snprintf(err, errlen,
                 "tp_rank_collapse = on%s: layout %s keeps one copy of its state per rank "
                 "(each rank's state is its own shard)",
                 s_from(&f, "tp_rank_collapse"), kvt_config_layout_name(cfg->layout));
        return -1;
    }

    //  The state tier, then C1: refused under pipeline parallelism.
    bool tier_auto = cfg->state_tier == KVT_AUTO;
    if (cfg->state_tier == KVT_ON && !state) {
        snprintf(err, errlen, "state_tier = on%s: layout %s has no state to keep in a tier",
                 s_from(&f, "state_tier"), kvt_config_layout_name(cfg->layout));
        return -1;
    }
    if (cfg->state_tier == KVT_ON && cfg->cpu_pool_bytes == 0) {
        snprintf(err, errlen, "state_tier = on%s needs a CPU tier (cpu_pool = 0%s)",
                 s_from(&f, "state_tier"), s_from(&f, "cpu_pool"));
        return -1;
    }
    if (tier_auto)
        cfg->state_tier = state && cfg->cpu_pool_bytes > 0 ? KVT_ON : KVT_OFF;
    if (cfg->state_tier == KVT_ON && cfg->pipeline_parallel > 1) {
        snprintf(err, errlen,
                 "state_tier = on%s%s under pipeline_parallel = %u%s: a state tier is refused "
                 "under pipeline parallelism (rule C1); state_tier: off runs without one",
                 tier_auto ? " (auto: the layout owns a state)" : "", s_from(&f, "state_tier"),
                 cfg->pipeline_parallel, s_from(&f, "pipeline_parallel"));
        return -1;
    }

    //  Timeouts that only work in order.
    char a[32], b[32];
    if (cfg->fence_timeout_ns <= cfg->lane_deadline_ns) {
        s_dur_text(cfg->fence_timeout_ns, a, sizeof a);
        s_dur_text(cfg->lane_deadline_ns, b, sizeof b);
        snprintf(err, errlen,
                 "fence_timeout = %s%s must be above lane_deadline = %s%s (a slow job fails on "
                 "its own; only a copy that never ends fails the lane)",
                 a, s_from(&f, "fence_timeout"), b, s_from(&f, "lane_deadline"));
        return -1;
    }
    if (cfg->lookup_ttl_ns >= cfg->pool_ttl_ns) {
        s_dur_text(cfg->lookup_ttl_ns, a, sizeof a);
        s_dur_text(cfg->pool_ttl_ns, b, sizeof b);
        snprintf(err, errlen, "lookup_ttl = %s%s must be below pool_ttl = %s%s", a,
                 s_from(&f, "lookup_ttl"), b, s_from(&f, "pool_ttl"));
        return -1;
    }

    //  Derived values, each logged once.
    snprintf(why, sizeof why, layout_auto ? "auto: model %s's own" : "set; model %s's own",
             preset->name);
    s_log(log, log_arg, "layout", kvt_config_layout_name(cfg->layout), why);
    snprintf(why, sizeof why, "%s%s", tier_auto ? "auto: " : "set",
             !tier_auto ? ""
             : state    ? (cfg->state_tier == KVT_ON ? "the layout owns a state" : "no CPU tier")
                        : "the layout has no state");
    s_log(log, log_arg, "state_tier", cfg->state_tier == KVT_ON ? "on" : "off", why);
    bool collapse_auto = cfg->tp_rank_collapse == KVT_AUTO;
    if (collapse_auto)
        cfg->tp_rank_collapse = KVT_OFF;
    s_log(log, log_arg, "tp_rank_collapse", cfg->tp_rank_collapse == KVT_ON ? "on" : "off",
          collapse_auto ? "auto: every rank stores its own shard" : "set");
    bool id_auto = cfg->model_id[0] == 0;
    if (id_auto)
        snprintf(cfg->model_id, sizeof cfg->model_id, "%s", preset->name);
    s_log(log, log_arg, "model_id", cfg->model_id, id_auto ? "auto: the model's name" : "set");

    //  I6: clamp (0.25 s/GiB x cpu_pool in GiB, 5 s, 60 s).
    double gib = (double)cfg->cpu_pool_bytes / (double)(1ull << 30);
    if (cfg->verified_window_ns == 0) {
        double w = 0.25e9 * gib;
        w = w < 5e9 ? 5e9 : w > 60e9 ? 60e9 : w;
        cfg->verified_window_ns = (uint64_t)w;
        snprintf(why, sizeof why, "auto: clamp(0.25 s/GiB x %.3f GiB, 5 s, 60 s)", gib);
    } else {
        snprintf(why, sizeof why, "set");
    }
    snprintf(val, sizeof val, "%.3f s", (double)cfg->verified_window_ns / 1e9);
    s_log(log, log_arg, "verified_window", val, why);

    cfg->min_tail_tokens = cfg->speculative_tokens ? 2 : 1;
    snprintf(val, sizeof val, "%u", cfg->min_tail_tokens);
    s_log(log, log_arg, "min_tail_tokens", val,
          cfg->speculative_tokens ? "speculative decoding: 2" : "1");

    cfg->block_bytes =
        (uint64_t)cfg->planes * cfg->layers * (uint64_t)cfg->block_size * cfg->token_bytes;
    cfg->chunk_bytes = cfg->block_bytes * (cfg->chunk_size / cfg->block_size);
    snprintf(val, sizeof val, "%" PRIu64, cfg->block_bytes);
    s_log(log, log_arg, "block_bytes", val, "planes x layers x block_size x token_bytes");
    snprintf(val, sizeof val, "%" PRIu64, cfg->chunk_bytes);
    s_log(log, log_arg, "chunk_bytes", val, "block_bytes x chunk_size / block_size");

    kvt_config_namespace(cfg);
    snprintf(val, sizeof val, "%016" PRIx64 "%016" PRIx64, cfg->ns.hi, cfg->ns.lo);
    s_log(log, log_arg, "namespace", val, cfg->ns_desc);
    return 0;
}

int kvt_config_resolve(kvt_config_t *cfg, kvt_config_log_fn *log, void *log_arg, char *err,
                       size_t errlen)
{
    return kvt_config_resolve_from(cfg, NULL, NULL, log, log_arg, err, errlen);
}

uint64_t kvt_config_layout_id(const kvt_config_t *cfg)
{
    char text[256];
    snprintf(text, sizeof text,
             "kvtier-layout/1 layout=%s block_bytes=%" PRIu64 " layers=%u planes=%u chunk=%u "
             "state_bytes=%" PRIu64 " dtype=%s",
             kvt_config_layout_name(cfg->layout), cfg->block_bytes, cfg->layers, cfg->planes,
             cfg->chunk_size, cfg->state_bytes, kvt_config_dtype_name(cfg->dtype));
    return XXH3_64bits(text, strlen(text));
}

int kvt_config_check_tier_layout(const kvt_config_t *cfg, uint64_t recorded_id, const char *what,
                                 char *err, size_t errlen)
{
    uint64_t own = kvt_config_layout_id(cfg);
    if (recorded_id == own)
        return 0;
    if (!s_owns_state(cfg->layout))
        return 1;
    snprintf(err, errlen,
             "%s: recorded layout id %016" PRIx64 ", but layout %s here is %016" PRIx64
             ": a state-owning layout accepts only its own layout (rule C3)",
             what, recorded_id, kvt_config_layout_name(cfg->layout), own);
    return -1;
}
