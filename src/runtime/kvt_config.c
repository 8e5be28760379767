/*  kvt_config — the settings table, their values' parsers and the loader's
    three layers. See kvt_config.h; the checks between settings and the
    derived values are in kvt_config_resolve.c, the YAML reader in
    kvt_config_yaml.c. */
#include "kvt_config_int.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

//  How a setting's text becomes its field.
typedef enum {
    T_U32,       //  decimal integer into a uint32_t
    T_U64,       //  decimal integer into a uint64_t
    T_INT,       //  decimal integer into an int
    T_SIZE32,    //  byte size into a uint32_t
    T_SIZE64,    //  byte size into a uint64_t
    T_DUR,       //  duration into a uint64_t of ns
    T_DUR_AUTO,  //  duration, or `auto` (stored as 0: derived)
    T_BOOL,      //  boolean into a bool
    T_ENUM,      //  one of names[] into an int-sized enum (value = index)
    T_ENUM_BOOL, //  one of two names into a bool (index 1 = true)
    T_TRI,       //  auto / off / on (and the boolean spellings) into kvt_tristate_t
    T_PATH,      //  text up to KVT_CONFIG_PATH_MAX - 1 bytes
    T_TEXT,      //  a name up to KVT_CONFIG_TEXT_MAX - 1 bytes, no spaces
    T_SPEC,      //  speculative decoding: off | METHOD:TOKENS
    T_REAL,      //  a finite real > 0 and <= max into a double
} s_type_t;

typedef struct {
    const char *key;          //  the setting's name (the flag's, with underscores)
    s_type_t type;            //  how its text is parsed
    size_t off;               //  its field in kvt_config_t
    uint64_t min, max;        //  range of a number (bytes, ns, count)
    const char *const *names; //  T_ENUM / T_ENUM_BOOL: the values' names, by value (NULL: none)
    unsigned nnames;          //  entries of names
    const char *def;          //  the default as text; NULL: from the model preset
    const char *unit;         //  unit or values, for the docs and messages
} s_key_t;

#define OFF(f)   offsetof(kvt_config_t, f)
#define NAMES(a) a, (unsigned)(sizeof a / sizeof a[0])
#define MS       1000000ull
#define SEC      1000000000ull
#define HOUR     (3600 * SEC)

static const char *const s_drivers[] = {NULL, "sim", "live"};
static const char *const s_disk_write[] = {"always", "evict"};
static const char *const s_evict_order[] = {"lru", "value"};
static const char *const s_models[] = {"dense", "qwen3-next-like", "kimi-linear-like"};
static const char *const s_layouts[] = {"auto", "dense", "gdn", "kda"};
static const char *const s_dtypes[] = {"bf16", "fp16", "fp32", "fp8_e4m3", "fp8_e5m2"};
static const char *const s_lookups[] = {"all", "rank0"};
static const char *const s_policies[] = {"kvtier", "interval", "every-chunk", "marconi"};

_Static_assert(sizeof(kvt_driver_t) == sizeof(int), "enums are stored as int");
_Static_assert(sizeof(kvt_model_t) == sizeof(int), "enums are stored as int");
_Static_assert(sizeof(kvt_tristate_t) == sizeof(int), "enums are stored as int");
_Static_assert(sizeof(kvt_state_policy_t) == sizeof(int), "enums are stored as int");

static const s_key_t s_keys[] = {
    {"trace", T_PATH, OFF(trace), 0, 0, NULL, 0, "", "path"},
    {"limit", T_U32, OFF(limit), 0, UINT32_MAX, NULL, 0, "0", "requests, 0 = all"},
    {"time_scale", T_REAL, OFF(time_scale), 0, 1000, NULL, 0, "1", "factor, > 0 .. 1000"},
    {"closed_loop", T_U32, OFF(closed_loop), 0, 65536, NULL, 0, "0",
     "requests in flight per instance, 0 = off (open loop)"},
    {"pace", T_TRI, OFF(pace), 0, 0, NULL, 0, "auto", "auto | on | off"},
    {"driver", T_ENUM, OFF(driver), 0, 0, NAMES(s_drivers), "sim", "sim | live"},
    {"seed", T_U64, OFF(seed), 0, UINT64_MAX, NULL, 0, "1", "u64"},
    {"log_level", T_INT, OFF(log_level), 0, 3, NULL, 0, "1", "0 errors .. 3 debug"},
    {"tp", T_U32, OFF(tp), 1, 64, NULL, 0, "2", "ranks, 1..64"},
    {"pipeline_parallel", T_U32, OFF(pipeline_parallel), 1, 64, NULL, 0, "1", "stages, 1..64"},
    {"hbm_pool", T_SIZE64, OFF(hbm_pool_bytes), 1, UINT64_MAX, NULL, 0, "16MiB", "bytes per rank"},
    {"cpu_pool", T_SIZE64, OFF(cpu_pool_bytes), 0, UINT64_MAX, NULL, 0, "512MiB",
     "bytes per rank, 0 = no tier"},
    {"disk_dir", T_PATH, OFF(disk_dir), 0, 0, NULL, 0, "", "path"},
    {"remote", T_PATH, OFF(remote), 0, 0, NULL, 0, "", "redis://HOST:PORT[,HOST:PORT...]"},
    {"disk_pool", T_SIZE64, OFF(disk_pool_bytes), 1, UINT64_MAX, NULL, 0, "4GiB", "bytes per rank"},
    {"disk_write", T_ENUM_BOOL, OFF(disk_write_on_evict), 0, 0, NAMES(s_disk_write), "always",
     "always | evict"},
    {"evict_order", T_ENUM_BOOL, OFF(evict_value), 0, 0, NAMES(s_evict_order), "lru",
     "lru | value"},
    {"mem_overcommit", T_BOOL, OFF(mem_overcommit), 0, 0, NULL, 0, "false", "boolean"},
    {"state_tier", T_TRI, OFF(state_tier), 0, 0, NULL, 0, "auto", "auto | on | off"},
    {"model", T_ENUM, OFF(model), 0, 0, NAMES(s_models), "dense",
     "dense | qwen3-next-like | kimi-linear-like"},
    {"model_id", T_TEXT, OFF(model_id), 0, 0, NULL, 0, "", "name, default the model's"},
    {"layout", T_ENUM, OFF(layout), 0, 0, NAMES(s_layouts), "auto", "auto | dense | gdn | kda"},
    {"dtype", T_ENUM, OFF(dtype), 0, 0, NAMES(s_dtypes), "bf16",
     "bf16 | fp16 | fp32 | fp8_e4m3 | fp8_e5m2"},
    {"layers", T_U32, OFF(layers), 1, 1024, NULL, 0, NULL, "attention layers, 1..1024"},
    {"planes", T_U32, OFF(planes), 1, 8, NULL, 0, NULL, "KV planes per layer, 1..8"},
    {"token_bytes", T_SIZE32, OFF(token_bytes), 1, 1u << 20, NULL, 0, NULL,
     "bytes per token per layer per plane per rank, 1..1MiB"},
    {"state_bytes", T_SIZE64, OFF(state_bytes), 0, 1ull << 32, NULL, 0, NULL,
     "bytes per request per rank, 0..4GiB"},
    {"block_size", T_U32, OFF(block_size), 1, 4096, NULL, 0, "16", "tokens, 1..4096"},
    {"chunk_size", T_U32, OFF(chunk_size), 1, 65536, NULL, 0, "256",
     "tokens, a multiple of block_size"},
    {"checkpoint_interval", T_U32, OFF(checkpoint_interval), 0, 1u << 24, NULL, 0, NULL,
     "tokens, a multiple of chunk_size, 0 = none"},
    {"tp_rank_collapse", T_TRI, OFF(tp_rank_collapse), 0, 0, NULL, 0, "auto", "auto | on | off"},
    {"speculative", T_SPEC, OFF(speculative), 0, 0, NULL, 0, "off", "off | METHOD:TOKENS"},
    {"max_running", T_U32, OFF(max_running), 1, 4096, NULL, 0, "64", "requests, 1..4096"},
    {"step_tokens", T_U32, OFF(step_tokens), 1, 1u << 20, NULL, 0, "4096", "tokens"},
    {"min_load_tokens", T_U32, OFF(min_load_tokens), 0, 1u << 24, NULL, 0, "0", "tokens"},
    {"state_policy", T_ENUM, OFF(state_policy), 0, 0, NAMES(s_policies), "kvtier",
     "kvtier | interval | every-chunk | marconi"},
    {"grid_share", T_U32, OFF(grid_share_pct), 0, 1000, NULL, 0, "2",
     "percent of the HBM checkpoint units, 0 = the fixed grid"},
    {"lookup", T_ENUM, OFF(lookup), 0, 0, NAMES(s_lookups), "all", "all | rank0"},
    {"lookup_pin", T_BOOL, OFF(lookup_pin), 0, 0, NULL, 0, "true", "boolean"},
    {"lookup_timeout", T_DUR, OFF(lookup_timeout_ns), MS, HOUR, NULL, 0, "1s", "duration, 1ms..1h"},
    {"verified_window", T_DUR_AUTO, OFF(verified_window_ns), MS, HOUR, NULL, 0, "auto",
     "duration, 1ms..1h, or auto"},
    {"verify_hold", T_DUR, OFF(verify_hold_ns), MS, HOUR, NULL, 0, "2s", "duration, 1ms..1h"},
    {"lookup_max_age", T_DUR, OFF(lookup_max_age_ns), MS, HOUR, NULL, 0, "1s", "duration, 1ms..1h"},
    {"orphan_reclaim", T_DUR, OFF(orphan_reclaim_ns), MS, HOUR, NULL, 0, "60s",
     "duration, 1ms..1h"},
    {"load_deadline", T_DUR, OFF(load_deadline_ns), MS, HOUR, NULL, 0, "60s", "duration, 1ms..1h"},
    {"agg_timeout", T_DUR, OFF(agg_timeout_ns), MS, HOUR, NULL, 0, "30s", "duration, 1ms..1h"},
    {"lane_deadline", T_DUR, OFF(lane_deadline_ns), MS, HOUR, NULL, 0, "2s", "duration, 1ms..1h"},
    {"fence_timeout", T_DUR, OFF(fence_timeout_ns), MS, HOUR, NULL, 0, "5s", "duration, 1ms..1h"},
    {"lookup_ttl", T_DUR, OFF(lookup_ttl_ns), MS, HOUR, NULL, 0, "5s", "duration, 1ms..1h"},
    {"pool_ttl", T_DUR, OFF(pool_ttl_ns), MS, HOUR, NULL, 0, "60s", "duration, 1ms..1h"},
    {"metrics_addr", T_TEXT, OFF(metrics_addr), 0, 0, NULL, 0, "",
     "HOST:PORT (IPv4 or localhost, port 0 = any free one), empty = off"},
    {"metrics_interval", T_DUR, OFF(metrics_interval_ns), MS, HOUR, NULL, 0, "1s",
     "duration, 1ms..1h"},
    {"curve_secret_key", T_PATH, OFF(curve_secret_key), 0, 0, NULL, 0, "",
     "path: this process's certificate (zcert, with its secret key); empty = tcp:// "
     "unauthenticated"},
    {"curve_public_keys", T_PATH, OFF(curve_public_keys), 0, 0, NULL, 0, "",
     "directory of the public certificates allowed to connect"},
    {"curve_server_key", T_PATH, OFF(curve_server_key), 0, 0, NULL, 0, "",
     "path: public certificate the peers' tcp:// inboxes present (empty = curve_secret_key's)"},
};
#define S_NKEYS (sizeof s_keys / sizeof s_keys[0])

//  ---- names ----------------------------------------------------------------

//  The setting a name stands for (`cpu_pool`, `cpu-pool`, `--cpu-pool`), -1 if none.
static int s_key_index(const char *name)
{
    if (!name)
        return -1;
    if (name[0] == '-' && name[1] == '-')
        name += 2;
    char norm[64];
    const char *eq = strchr(name, '='); //  a flag that carries its value: --tp=4
    size_t n = eq ? (size_t)(eq - name) : strlen(name);
    if (n == 0 || n >= sizeof norm)
        return -1;
    for (size_t i = 0; i < n; i++)
        norm[i] = name[i] == '-' ? '_' : name[i];
    norm[n] = 0;
    for (size_t i = 0; i < S_NKEYS; i++)
        if (strcmp(s_keys[i].key, norm) == 0)
            return (int)i;
    return -1;
}

bool kvt_config_has_key(const char *name, bool *is_bool)
{
    int k = s_key_index(name);
    if (is_bool)
        *is_bool = k >= 0 && s_keys[k].type == T_BOOL;
    return k >= 0;
}

size_t kvt_config_key_count(void)
{
    return S_NKEYS;
}

const char *kvt_config_state_policy_name(kvt_state_policy_t policy)
{
    unsigned n = sizeof s_policies / sizeof s_policies[0];
    return (unsigned)policy < n ? s_policies[policy] : "?";
}

int kvt_config_key_at(size_t i, const char **name, const char **def, const char **unit)
{
    if (i >= S_NKEYS)
        return -1;
    *name = s_keys[i].key;
    *def = s_keys[i].def ? s_keys[i].def : "";
    *unit = s_keys[i].unit;
    return 0;
}

//  ---- values ---------------------------------------------------------------

static int s_digits(const char *s, const char **end, uint64_t *out)
{
    uint64_t v = 0;
    const char *p = s;
    if (*p < '0' || *p > '9')
        return -1;
    while (*p >= '0' && *p <= '9') {
        uint64_t d = (uint64_t)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -2;
        v = v * 10 + d;
        p++;
    }
    *end = p;
    *out = v;
    return 0;
}

//  A number followed by a unit from units[] (case-insensitive, spaces
//  between allowed). -1: not this form, -2: too large.
typedef struct {
    const char *name; //  spelling
    uint64_t scale;   //  multiplier
} s_unit_t;

static int s_scaled(const char *s, const s_unit_t *units, size_t nunits, uint64_t *out)
{
    const char *end;
    uint64_t v;
    int rc = s_digits(s, &end, &v);
    if (rc != 0)
        return rc;
    while (*end == ' ')
        end++;
    for (size_t i = 0; i < nunits; i++)
        if (strcasecmp(end, units[i].name) == 0) {
            if (v > UINT64_MAX / units[i].scale)
                return -2;
            *out = v * units[i].scale;
            return 0;
        }
    return -1;
}

static const s_unit_t s_size_units[] = {{"", 1},
                                        {"b", 1},
                                        {"k", 1ull << 10},
                                        {"kb", 1ull << 10},
                                        {"kib", 1ull << 10},
                                        {"m", 1ull << 20},
                                        {"mb", 1ull << 20},
                                        {"mib", 1ull << 20},
                                        {"g", 1ull << 30},
                                        {"gb", 1ull << 30},
                                        {"gib", 1ull << 30},
                                        {"t", 1ull << 40},
                                        {"tb", 1ull << 40},
                                        {"tib", 1ull << 40}};
static const s_unit_t s_dur_units[] = {{"ns", 1},  {"us", 1000},      {"ms", MS},
                                       {"s", SEC}, {"min", 60 * SEC}, {"h", HOUR}};

static bool s_bool_word(const char *s, bool *out)
{
    static const char *const yes[] = {"true", "yes", "on", "1"};
    static const char *const no[] = {"false", "no", "off", "0"};
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = true;
            return true;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = false;
            return true;
        }
    }
    return false;
}

//  Describes a range for messages: "1..64", "1ms..1h".
static void s_range(const s_key_t *k, char *buf, size_t len)
{
    if (k->type == T_DUR || k->type == T_DUR_AUTO)
        snprintf(buf, len, "%llu ms .. %llu s", (unsigned long long)(k->min / MS),
                 (unsigned long long)(k->max / SEC));
    else if (k->type == T_REAL)
        snprintf(buf, len, "> 0 .. %llu", (unsigned long long)k->max);
    else
        snprintf(buf, len, "%llu .. %llu", (unsigned long long)k->min, (unsigned long long)k->max);
}

//  The names of an enum, for messages: "sim | live".
static void s_choices(const s_key_t *k, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = 0;
    for (unsigned i = 0; i < k->nnames; i++) {
        if (!k->names[i])
            continue;
        int n = snprintf(buf + used, len - used, "%s%s", used ? " | " : "", k->names[i]);
        if (n < 0 || (size_t)n >= len - used)
            return;
        used += (size_t)n;
    }
}

//  Whether d is a value of the T_REAL setting k: finite, > 0 and <= max
//  (the parser and the check of a hand-filled struct both ask).
static bool s_real_ok(const s_key_t *k, double d)
{
    return isfinite(d) && d > 0 && d <= (double)k->max;
}

static void s_store_u64(void *field, s_type_t type, uint64_t v)
{
    if (type == T_U32 || type == T_SIZE32) {
        uint32_t x = (uint32_t)v;
        memcpy(field, &x, sizeof x);
    } else if (type == T_INT) {
        int x = (int)v;
        memcpy(field, &x, sizeof x);
    } else {
        memcpy(field, &v, sizeof v);
    }
}

//  Parses text into the setting's field of cfg. Returns 0, or -1 with why
//  saying what is wrong with it.
static int s_parse(const s_key_t *k, const char *text, kvt_config_t *cfg, char *why, size_t len)
{
    void *field = (char *)cfg + k->off;
    char tmp[160];
    uint64_t v = 0;
    int rc;
    switch (k->type) {
    case T_U32:
    case T_U64:
    case T_INT: {
        const char *end;
        rc = s_digits(text, &end, &v);
        if (rc == 0 && *end)
            rc = -1;
        if (rc == -1) {
            snprintf(why, len, "not a whole number");
            return -1;
        }
        goto range;
    }
    case T_SIZE32:
    case T_SIZE64:
        rc = s_scaled(text, s_size_units, sizeof s_size_units / sizeof s_size_units[0], &v);
        if (rc == -1) {
            snprintf(why, len, "not a size (bytes, with an optional KiB, MiB, GiB or TiB suffix)");
            return -1;
        }
        goto range;
    case T_DUR_AUTO:
        if (strcasecmp(text, "auto") == 0) {
            s_store_u64(field, k->type, 0);
            return 0;
        }
        //  fall through
    case T_DUR:
        rc = s_scaled(text, s_dur_units, sizeof s_dur_units / sizeof s_dur_units[0], &v);
        if (rc == -1) {
            const char *end;
            uint64_t n;
            if (s_digits(text, &end, &n) == 0 && !*end)
                snprintf(why, len, "a duration needs a unit (ns, us, ms, s, min, h)");
            else
                snprintf(why, len, "not a duration (an integer and a unit: ns, us, ms, s, min, h)");
            return -1;
        }
        goto range;
    case T_BOOL: {
        bool b;
        if (!s_bool_word(text, &b)) {
            snprintf(why, len, "not a boolean (true / false, yes / no, on / off, 1 / 0)");
            return -1;
        }
        memcpy(field, &b, sizeof b);
        return 0;
    }
    case T_TRI: {
        bool b;
        int t;
        if (strcasecmp(text, "auto") == 0)
            t = KVT_AUTO;
        else if (s_bool_word(text, &b))
            t = b ? KVT_ON : KVT_OFF;
        else {
            snprintf(why, len, "not auto, on or off");
            return -1;
        }
        memcpy(field, &t, sizeof t);
        return 0;
    }
    case T_ENUM:
    case T_ENUM_BOOL:
        for (unsigned i = 0; i < k->nnames; i++)
            if (k->names[i] && strcmp(text, k->names[i]) == 0) {
                if (k->type == T_ENUM_BOOL) {
                    bool b = i == 1;
                    memcpy(field, &b, sizeof b);
                } else {
                    int x = (int)i;
                    memcpy(field, &x, sizeof x);
                }
                return 0;
            }
        s_choices(k, tmp, sizeof tmp);
        snprintf(why, len, "not one of %s", tmp);
        return -1;
    case T_PATH:
    case T_TEXT: {
        size_t max = k->type == T_PATH ? KVT_CONFIG_PATH_MAX : KVT_CONFIG_TEXT_MAX;
        size_t n = strlen(text);
        if (n >= max) {
            snprintf(why, len, "longer than %zu bytes", max - 1);
            return -1;
        }
        if (k->type == T_TEXT)
            for (size_t i = 0; i < n; i++)
                if ((unsigned char)text[i] <= ' ' || text[i] == 0x7f) {
                    snprintf(why, len, "a name may not hold spaces or control characters");
                    return -1;
                }
        memcpy(field, text, n + 1);
        return 0;
    }
    case T_REAL: {
        //  strtod also reads nan, inf and hex forms: only a finite value
        //  in range is kept, and nothing may follow the number.
        char *end = NULL;
        errno = 0;
        double d = text[0] && text[0] != ' ' ? strtod(text, &end) : 0;
        if (!end || end == text || *end) {
            snprintf(why, len, "not a number");
            return -1;
        }
        if (errno == ERANGE || !s_real_ok(k, d)) {
            s_range(k, tmp, sizeof tmp);
            snprintf(why, len, "out of range (%s)", tmp);
            return -1;
        }
        memcpy(field, &d, sizeof d);
        return 0;
    }
    case T_SPEC: {
        //  The stable form: the method lower-cased and the token count
        //  without leading zeros, so "MTP:02" and "mtp:2" are one namespace.
        if (strcasecmp(text, "off") == 0 || strcasecmp(text, "none") == 0) {
            snprintf(cfg->speculative, sizeof cfg->speculative, "off");
            cfg->speculative_tokens = 0;
            return 0;
        }
        const char *colon = strchr(text, ':');
        size_t mlen = colon ? (size_t)(colon - text) : 0;
        char method[40];
        const char *end;
        bool ok = colon && mlen > 0 && mlen < sizeof method;
        for (size_t i = 0; ok && i < mlen; i++) {
            char c = text[i];
            ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '_' || c == '-';
            method[i] = (char)(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
        }
        ok = ok && s_digits(colon + 1, &end, &v) == 0 && !*end && v >= 1 && v <= 16;
        if (!ok) {
            snprintf(why, len, "not off or METHOD:TOKENS (a method name and 1..16 draft tokens)");
            return -1;
        }
        method[mlen] = 0;
        snprintf(cfg->speculative, sizeof cfg->speculative, "%s:%u", method, (unsigned)v);
        cfg->speculative_tokens = (uint32_t)v;
        return 0;
    }
    }
    assert(!"unknown setting type");
    return -1;
range:
    if (rc == -2 || v < k->min || v > k->max) {
        s_range(k, tmp, sizeof tmp);
        snprintf(why, len, "out of range (%s)", tmp);
        return -1;
    }
    s_store_u64(field, k->type, v);
    return 0;
}

//  Reads a numeric field back (the inverse of s_store_u64).
static uint64_t s_load_u64(const void *field, s_type_t type)
{
    if (type == T_U32 || type == T_SIZE32) {
        uint32_t x;
        memcpy(&x, field, sizeof x);
        return x;
    }
    if (type == T_INT || type == T_ENUM || type == T_TRI) {
        int x;
        memcpy(&x, field, sizeof x);
        return x < 0 ? UINT64_MAX : (uint64_t)x;
    }
    uint64_t x;
    memcpy(&x, field, sizeof x);
    return x;
}

int kvt_config_check_fields(kvt_config_t *cfg, kvt_config_origin_fn *origin, void *origin_arg,
                            char *err, size_t errlen)
{
    for (size_t i = 0; i < S_NKEYS; i++) {
        const s_key_t *k = &s_keys[i];
        const void *field = (const char *)cfg + k->off;
        const char *from = origin ? origin(origin_arg, k->key) : NULL;
        char why[192], tmp[96];
        why[0] = 0;
        uint64_t v = 0;
        switch (k->type) {
        case T_U32:
        case T_U64:
        case T_INT:
        case T_SIZE32:
        case T_SIZE64:
        case T_DUR:
        case T_DUR_AUTO:
            v = s_load_u64(field, k->type);
            if ((v < k->min || v > k->max) && !(k->type == T_DUR_AUTO && v == 0)) {
                s_range(k, tmp, sizeof tmp);
                snprintf(why, sizeof why, "out of range (%s)", tmp);
            }
            break;
        case T_ENUM:
            v = s_load_u64(field, k->type);
            if (v >= k->nnames || !k->names[v]) {
                s_choices(k, tmp, sizeof tmp);
                snprintf(why, sizeof why, "not one of %s", tmp);
            }
            break;
        case T_TRI:
            if (s_load_u64(field, k->type) > KVT_ON)
                snprintf(why, sizeof why, "not auto, on or off");
            break;
        case T_BOOL:
        case T_ENUM_BOOL:
            break;
        case T_REAL: {
            double d;
            memcpy(&d, field, sizeof d);
            if (!s_real_ok(k, d)) {
                s_range(k, tmp, sizeof tmp);
                snprintf(why, sizeof why, "%s = %g%s%s%s: out of range (%s)", k->key, d,
                         from ? " (" : "", from ? from : "", from ? ")" : "", tmp);
                snprintf(err, errlen, "%s", why);
                return -1;
            }
            break;
        }
        case T_PATH:
        case T_TEXT:
        case T_SPEC: {
            size_t max = k->type == T_PATH ? KVT_CONFIG_PATH_MAX : KVT_CONFIG_TEXT_MAX;
            if (!memchr(field, 0, max))
                snprintf(why, sizeof why, "not terminated within %zu bytes", max);
            else if (k->type == T_SPEC) {
                //  Re-parsed so that a hand-filled struct gets the stable
                //  form and a matching token count.
                char text[KVT_CONFIG_TEXT_MAX];
                memcpy(text, field, sizeof text);
                s_parse(k, text, cfg, why, sizeof why);
            }
            break;
        }
        }
        if (why[0]) {
            if (k->type == T_PATH || k->type == T_TEXT || k->type == T_SPEC)
                snprintf(err, errlen, "%s%s%s%s: %s", k->key, from ? " (" : "", from ? from : "",
                         from ? ")" : "", why);
            else
                snprintf(err, errlen, "%s = %lld%s%s%s: %s", k->key,
                         v == UINT64_MAX && k->type != T_U64 ? -1ll : (long long)v,
                         from ? " (" : "", from ? from : "", from ? ")" : "", why);
            return -1;
        }
    }
    return 0;
}

//  ---- presets and defaults ---------------------------------------------------

//  The geometry a preset gives a setting marked "from the preset".
static void s_preset_value(const s_key_t *k, const kvt_config_preset_t *p, kvt_config_t *cfg)
{
    uint64_t v = 0;
    if (k->off == OFF(layers))
        v = p->layers;
    else if (k->off == OFF(planes))
        v = p->planes;
    else if (k->off == OFF(token_bytes))
        v = p->token_bytes;
    else if (k->off == OFF(state_bytes))
        v = p->state_bytes;
    else if (k->off == OFF(checkpoint_interval))
        v = p->checkpoint_interval;
    else
        assert(!"a preset setting the presets do not give");
    s_store_u64((char *)cfg + k->off, k->type, v);
}

//  Sets a setting to its default (the preset's for geometry).
static void s_default(const s_key_t *k, const kvt_config_preset_t *p, kvt_config_t *cfg)
{
    if (!k->def) {
        s_preset_value(k, p, cfg);
        return;
    }
    char why[160];
    int rc = s_parse(k, k->def, cfg, why, sizeof why);
    assert(rc == 0 && "a default that does not parse");
    (void)rc;
}

static void s_fill_defaults(kvt_config_t *cfg, kvt_model_t model)
{
    memset(cfg, 0, sizeof *cfg);
    const kvt_config_preset_t *p = kvt_config_preset(model);
    for (size_t i = 0; i < S_NKEYS; i++)
        s_default(&s_keys[i], p, cfg);
    cfg->model = model;
}

void kvt_config_defaults(kvt_config_t *cfg)
{
    char err[256];
    s_fill_defaults(cfg, KVT_MODEL_DENSE);
    int rc = kvt_config_resolve(cfg, NULL, NULL, err, sizeof err);
    assert(rc == 0 && "the defaults do not resolve");
    (void)rc;
}

//  ---- what the loader uses ---------------------------------------------------

_Static_assert(S_NKEYS == KVT_CONFIG_NKEYS, "KVT_CONFIG_NKEYS is the table's size");

int kvt_config_key_index(const char *name)
{
    return s_key_index(name);
}

const char *kvt_config_key_name(int k)
{
    return s_keys[k].key;
}

bool kvt_config_key_from_preset(int k)
{
    return s_keys[k].def == NULL;
}

bool kvt_config_key_is_bool(int k)
{
    return s_keys[k].type == T_BOOL;
}

int kvt_config_key_parse(int k, const char *text, kvt_config_t *cfg, char *why, size_t len)
{
    return s_parse(&s_keys[k], text, cfg, why, len);
}

void kvt_config_key_default(int k, kvt_model_t model, kvt_config_t *cfg)
{
    s_default(&s_keys[k], kvt_config_preset(model), cfg);
}

void kvt_config_fill_defaults(kvt_config_t *cfg, kvt_model_t model)
{
    s_fill_defaults(cfg, model);
}
