/*  kvt_config_loader — the loader's three layers (a YAML file, the
    KVTIER_* environment, flags) and the build that applies them in that
    order over the defaults and the model preset. See kvt_config.h. */
#include "kvt_config_int.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

enum { L_FILE, L_ENV, L_FLAG, L_COUNT };

#define S_ORIGIN_MAX (KVT_CONFIG_PATH_MAX + 64)

typedef struct {
    char *value;               //  the text given (owned); NULL: not given at this layer
    char origin[S_ORIGIN_MAX]; //  FILE:LINE, KVTIER_X or --x
} s_given_t;

struct _kvt_config_loader_t {
    s_given_t given[KVT_CONFIG_NKEYS][L_COUNT];  //  what each layer said of each setting
    bool file_read;                              //  a file layer was loaded (at most one)
    char origin[KVT_CONFIG_NKEYS][S_ORIGIN_MAX]; //  where each value of the last build came from
};

kvt_config_loader_t *kvt_config_loader_new(void)
{
    kvt_config_loader_t *self = calloc(1, sizeof *self);
    return self;
}

static void s_forget(kvt_config_loader_t *self, int layer)
{
    for (size_t i = 0; i < KVT_CONFIG_NKEYS; i++) {
        free(self->given[i][layer].value);
        self->given[i][layer].value = NULL;
    }
}

void kvt_config_loader_destroy(kvt_config_loader_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kvt_config_loader_t *self = *self_p;
    for (int l = 0; l < L_COUNT; l++)
        s_forget(self, l);
    free(self);
    *self_p = NULL;
}

//  Records what a layer says of setting k. -1 when out of memory.
static int s_put(kvt_config_loader_t *self, int layer, int k, const char *value, const char *origin)
{
    size_t n = strlen(value);
    char *copy = malloc(n + 1);
    if (!copy)
        return -1;
    memcpy(copy, value, n + 1);
    s_given_t *g = &self->given[k][layer];
    free(g->value);
    g->value = copy;
    snprintf(g->origin, sizeof g->origin, "%s", origin);
    return 0;
}

typedef struct {
    kvt_config_loader_t *self;       //  the loader the file's settings go to
    const char *name;                //  the file's name in messages
    unsigned line[KVT_CONFIG_NKEYS]; //  line each setting was given on (0: not yet)
} s_file_ctx_t;

static int s_file_entry(void *arg, const char *key, const char *value, unsigned line, char *err,
                        size_t errlen)
{
    s_file_ctx_t *ctx = arg;
    int k = kvt_config_key_index(key);
    //  A file spells settings with underscores only, as the docs show them.
    if (k < 0 || strcmp(kvt_config_key_name(k), key) != 0) {
        snprintf(err, errlen, "%s:%u: unknown setting '%s'", ctx->name, line, key);
        return -1;
    }
    if (ctx->line[k]) {
        snprintf(err, errlen, "%s:%u: setting '%s' given twice (first on line %u)", ctx->name, line,
                 key, ctx->line[k]);
        return -1;
    }
    ctx->line[k] = line;
    char origin[S_ORIGIN_MAX];
    snprintf(origin, sizeof origin, "%s:%u", ctx->name, line);
    if (s_put(ctx->self, L_FILE, k, value, origin) != 0) {
        snprintf(err, errlen, "%s:%u: out of memory", ctx->name, line);
        return -1;
    }
    return 0;
}

int kvt_config_loader_yaml(kvt_config_loader_t *self, const char *text, size_t len,
                           const char *name, char *err, size_t errlen)
{
    if (self->file_read) {
        snprintf(err, errlen, "%s: only one configuration file may be given", name);
        return -1;
    }
    s_file_ctx_t ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.self = self;
    ctx.name = name;
    if (kvt_config_yaml_read(text, len, name, s_file_entry, &ctx, err, errlen) != 0) {
        s_forget(self, L_FILE); //  all or nothing
        return -1;
    }
    self->file_read = true;
    return 0;
}

int kvt_config_loader_file(kvt_config_loader_t *self, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "config: cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    //  A configuration is a page of text; anything past 1 MiB is not one.
    enum { MAX = 1 << 20 };
    char *buf = malloc(MAX + 1);
    size_t n = buf ? fread(buf, 1, MAX + 1, f) : 0;
    bool bad = buf && ferror(f);
    fclose(f);
    int rc = -1;
    if (!buf)
        snprintf(err, errlen, "config: %s: out of memory", path);
    else if (bad)
        snprintf(err, errlen, "config: cannot read %s", path);
    else if (n > MAX)
        snprintf(err, errlen, "config: %s is larger than %d bytes", path, MAX);
    else
        rc = kvt_config_loader_yaml(self, buf, n, path, err, errlen);
    free(buf);
    return rc;
}

//  The setting a KVTIER_<NAME>=VALUE entry names (-1: none; -2: not such
//  an entry at all).
static int s_env_key(const char *entry)
{
    static const char prefix[] = "KVTIER_";
    const size_t plen = sizeof prefix - 1;
    const char *eq = strchr(entry, '=');
    if (strncmp(entry, prefix, plen) != 0 || !eq)
        return -2;
    char key[64];
    size_t n = (size_t)(eq - entry) - plen;
    if (n == 0 || n >= sizeof key)
        return -1;
    for (size_t i = 0; i < n; i++) {
        char c = entry[plen + i];
        if (!((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'))
            return -1;
        key[i] = (char)(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    }
    key[n] = 0;
    return kvt_config_key_index(key);
}

int kvt_config_loader_env(kvt_config_loader_t *self, char *const *envp, char *err, size_t errlen)
{
    if (!envp)
        envp = environ;
    //  Checked before anything is kept: all or nothing, like the file.
    for (char *const *e = envp; e && *e; e++)
        if (s_env_key(*e) == -1) {
            snprintf(err, errlen,
                     "%.*s: unknown setting (KVTIER_ variables name settings: KVTIER_CPU_POOL "
                     "for cpu_pool)",
                     (int)(strchr(*e, '=') - *e), *e);
            return -1;
        }
    for (char *const *e = envp; e && *e; e++) {
        int k = s_env_key(*e);
        if (k < 0)
            continue;
        const char *eq = strchr(*e, '=');
        char origin[96];
        snprintf(origin, sizeof origin, "%.*s", (int)(eq - *e), *e);
        if (s_put(self, L_ENV, k, eq + 1, origin) != 0) {
            s_forget(self, L_ENV);
            snprintf(err, errlen, "%s: out of memory", origin);
            return -1;
        }
    }
    return 0;
}

int kvt_config_loader_flag(kvt_config_loader_t *self, const char *name, const char *value,
                           char *err, size_t errlen)
{
    int k = kvt_config_key_index(name);
    if (k < 0) {
        snprintf(err, errlen, "%s%s: unknown setting", name && name[0] == '-' ? "" : "--",
                 name ? name : "(null)");
        return -1;
    }
    const char *eq = strchr(name, '=');
    if (eq && !value)
        value = eq + 1;
    char origin[96];
    snprintf(origin, sizeof origin, "--");
    const char *key = kvt_config_key_name(k);
    for (size_t i = 0; key[i] && i + 3 < sizeof origin; i++) {
        origin[2 + i] = key[i] == '_' ? '-' : key[i];
        origin[3 + i] = 0;
    }
    if (!value && !kvt_config_key_is_bool(k)) {
        snprintf(err, errlen, "%s: needs a value", origin);
        return -1;
    }
    if (s_put(self, L_FLAG, k, value ? value : "true", origin) != 0) {
        snprintf(err, errlen, "%s: out of memory", origin);
        return -1;
    }
    return 0;
}

static const char *s_origin_of(void *arg, const char *key)
{
    return kvt_config_loader_origin(arg, key);
}

const char *kvt_config_loader_origin(const kvt_config_loader_t *self, const char *name)
{
    int k = kvt_config_key_index(name);
    return k < 0 ? NULL : self->origin[k];
}

//  Whether the value that wins for setting k is no value at all: no layer
//  gave one, or the highest that did gave it empty (the default).
static bool s_says_nothing(const kvt_config_loader_t *self, int k)
{
    for (int l = L_COUNT; l-- > 0;)
        if (self->given[k][l].value)
            return !*self->given[k][l].value;
    return true;
}

int kvt_config_loader_build(kvt_config_loader_t *self, kvt_config_t *cfg, kvt_config_log_fn *log,
                            void *log_arg, char *err, size_t errlen)
{
    //  The model first: its preset gives the geometry's defaults. A bad
    //  model value is reported below with the others.
    int km = kvt_config_key_index("model");
    kvt_config_t probe;
    memset(&probe, 0, sizeof probe);
    kvt_model_t model = KVT_MODEL_DENSE;
    char why[192];
    for (int l = 0; l < L_COUNT; l++) {
        const char *v = self->given[km][l].value;
        if (v && kvt_config_key_parse(km, v, &probe, why, sizeof why) == 0)
            model = probe.model;
        else if (v && !*v)
            model = KVT_MODEL_DENSE;
    }
    const kvt_config_preset_t *preset = kvt_config_preset(model);
    kvt_config_fill_defaults(cfg, model);
    for (int i = 0; i < KVT_CONFIG_NKEYS; i++) {
        const char *name = kvt_config_key_name(i);
        if (kvt_config_key_from_preset(i))
            snprintf(self->origin[i], S_ORIGIN_MAX, "preset %s", preset->name);
        else
            snprintf(self->origin[i], S_ORIGIN_MAX, "default");
        //  Every layer's value is checked, also one a higher layer overrides.
        for (int l = 0; l < L_COUNT; l++) {
            const s_given_t *g = &self->given[i][l];
            if (!g->value)
                continue;
            if (!*g->value)
                kvt_config_key_default(i, model, cfg);
            else if (kvt_config_key_parse(i, g->value, cfg, why, sizeof why) != 0) {
                snprintf(err, errlen, "%s = '%s' (%s): %s", name, g->value, g->origin, why);
                return -1;
            }
            char from[S_ORIGIN_MAX]; //  a copy: restrict cannot tell g->origin from origin[i]
            snprintf(from, sizeof from, "%s%s", g->origin,
                     *g->value ? "" : " (empty: the default)");
            memcpy(self->origin[i], from, sizeof from);
        }
    }
    //  Disk settings without a disk say nothing: refused rather than ignored
    //  (an empty value, the default, says nothing either).
    static const char *const disk_only[] = {"disk_pool", "disk_write"};
    int kd = kvt_config_key_index("disk_dir");
    for (size_t i = 0; !cfg->disk_dir[0] && i < 2; i++) {
        int k = kvt_config_key_index(disk_only[i]);
        if (s_says_nothing(self, k))
            continue;
        snprintf(err, errlen, "%s (%s) needs disk_dir (%s: none)", disk_only[i], self->origin[k],
                 self->origin[kd]);
        return -1;
    }
    return kvt_config_resolve_from(cfg, s_origin_of, self, log, log_arg, err, errlen);
}
