/*  kvt_config: the three layers (YAML file < KVTIER_* environment <
    flags), value parsing and its errors, the checks between settings
    (rules C1, C3), the derived values logged once, and the namespace (C2). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "kvtier/kvt_config.h"

#define GiB (1ull << 30)
#define MiB (1ull << 20)
#define SEC 1000000000ull

static char s_err[2048]; //  the last error

//  Builds a configuration from a YAML text (NULL: no file), an environment
//  (NULL-terminated, NULL: none) and flags (name, value pairs ending with a
//  NULL name). Returns the build's result; the loader's origins go to *ld
//  when ld is not NULL (the caller destroys it).
static int s_build3(const char *yaml, const char *const *env, const char *const *flags,
                    kvt_config_t *cfg, kvt_config_loader_t **ld, kvt_config_log_fn *log, void *arg)
{
    kvt_config_loader_t *l = kvt_config_loader_new();
    cr_assert_not_null(l);
    s_err[0] = 0;
    int rc = 0;
    if (yaml)
        rc = kvt_config_loader_yaml(l, yaml, strlen(yaml), "cfg.yaml", s_err, sizeof s_err);
    if (rc == 0 && env) {
        char *const *e = (char *const *)env;
        rc = kvt_config_loader_env(l, e, s_err, sizeof s_err);
    }
    for (size_t i = 0; rc == 0 && flags && flags[i]; i += 2)
        rc = kvt_config_loader_flag(l, flags[i], flags[i + 1], s_err, sizeof s_err);
    if (rc == 0)
        rc = kvt_config_loader_build(l, cfg, log, arg, s_err, sizeof s_err);
    if (ld)
        *ld = l;
    else
        kvt_config_loader_destroy(&l);
    return rc;
}

static int s_yaml(const char *yaml, kvt_config_t *cfg)
{
    return s_build3(yaml, NULL, NULL, cfg, NULL, NULL, NULL);
}

//  One flag, on top of nothing.
static int s_flag(const char *name, const char *value, kvt_config_t *cfg)
{
    const char *flags[] = {name, value, NULL};
    return s_build3(NULL, NULL, flags, cfg, NULL, NULL, NULL);
}

static void s_refused(int rc, const char *what, const char *const *needles)
{
    cr_assert_eq(rc, -1, "%s: accepted", what);
    for (size_t i = 0; needles[i]; i++)
        cr_assert(strstr(s_err, needles[i]) != NULL, "%s: '%s' does not name '%s'", what, s_err,
                  needles[i]);
}

#define REFUSED(rc, what, ...)                  \
    do {                                        \
        const char *n_[] = {__VA_ARGS__, NULL}; \
        s_refused((rc), (what), n_);            \
    } while (0)

//  ---- values ----------------------------------------------------------------

Test(config, sizes_read_every_spelling_as_the_same_bytes)
{
    const char *same[] = {"8GiB", "8192MiB", "8388608KiB", "8589934592", "8 GiB",
                          "8gib", "8G",      "8GB",        "8192M",      "8589934592B"};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        kvt_config_t c;
        cr_assert_eq(s_flag("cpu_pool", same[i], &c), 0, "%s: %s", same[i], s_err);
        cr_assert_eq(c.cpu_pool_bytes, 8 * GiB, "%s read as %llu", same[i],
                     (unsigned long long)c.cpu_pool_bytes);
    }
    kvt_config_t c;
    cr_assert_eq(s_flag("token_bytes", "1KiB", &c), 0, "%s", s_err);
    cr_assert_eq(c.token_bytes, 1024);
    const char *bad[] = {"8XB",           "1.5GiB", "-1", "GiB", "8 G i B", "99999999999999999999",
                         "17179869184TiB"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        REFUSED(s_flag("cpu_pool", bad[i], &c), bad[i], "cpu_pool", bad[i], "--cpu-pool");
}

Test(config, durations_need_a_unit_and_a_range)
{
    kvt_config_t c;
    struct {
        const char *text; //  spelling
        uint64_t ns;      //  what it reads as
    } ok[] = {{"1500ms", 1500000000ull}, {"2s", 2 * SEC},    {"1min", 60 * SEC},
              {"3000000us", 3 * SEC},    {"1h", 3600 * SEC}, {"5000000000ns", 5 * SEC},
              {"250 MS", 250000000ull}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        cr_assert_eq(s_flag("lookup_timeout", ok[i].text, &c), 0, "%s: %s", ok[i].text, s_err);
        cr_assert_eq(c.lookup_timeout_ns, ok[i].ns, "%s", ok[i].text);
    }
    REFUSED(s_flag("lookup_timeout", "30", &c), "no unit", "lookup_timeout", "'30'", "unit");
    REFUSED(s_flag("lookup_timeout", "0s", &c), "zero", "lookup_timeout", "out of range");
    REFUSED(s_flag("lookup_timeout", "2h", &c), "too long", "lookup_timeout", "out of range");
    REFUSED(s_flag("lookup_timeout", "1.5s", &c), "fraction", "lookup_timeout", "1.5s");
    REFUSED(s_flag("agg_timeout", "soon", &c), "word", "agg_timeout", "soon");
}

Test(config, booleans_and_enums_read_their_words_and_refuse_others)
{
    kvt_config_t c;
    const char *yes[] = {"true", "yes", "on", "1", "TRUE", "Yes"};
    const char *no[] = {"false", "no", "off", "0", "False"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        cr_assert_eq(s_flag("mem_overcommit", yes[i], &c), 0, "%s", s_err);
        cr_assert(c.mem_overcommit, "%s", yes[i]);
    }
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        cr_assert_eq(s_flag("lookup_pin", no[i], &c), 0, "%s", s_err);
        cr_assert_not(c.lookup_pin, "%s", no[i]);
    }
    REFUSED(s_flag("lookup_pin", "maybe", &c), "bool", "lookup_pin", "maybe", "boolean");
    cr_assert_eq(s_flag("driver", "live", &c), 0, "%s", s_err);
    cr_assert_eq(c.driver, KVT_DRIVER_LIVE);
    cr_assert_eq(s_flag("disk_write", "evict", &c), -1, "disk_write needs a disk_dir");
    const char *disk[] = {"disk_dir", "/tmp/x", "disk_write", "evict", NULL};
    cr_assert_eq(s_build3(NULL, NULL, disk, &c, NULL, NULL, NULL), 0, "%s", s_err);
    cr_assert(c.disk_write_on_evict);
    cr_assert_eq(s_flag("lookup", "rank0", &c), 0, "%s", s_err);
    cr_assert_eq(c.lookup, KVT_LOOKUP_RANK0);
    REFUSED(s_flag("driver", "fast", &c), "enum", "driver", "fast", "sim | live");
    REFUSED(s_flag("lookup", "rank1", &c), "enum", "lookup", "rank1", "all | rank0");
    REFUSED(s_flag("dtype", "int4", &c), "enum", "dtype", "int4", "bf16");
}

Test(config, a_state_policy_name_is_the_word_its_setting_reads)
{
    kvt_config_t c;
    const char *names[] = {"kvtier", "interval", "every-chunk", "marconi"};
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(s_flag("state_policy", names[i], &c), 0, "%s", s_err);
        cr_assert_eq((int)c.state_policy, i, "%s", names[i]);
        cr_assert_str_eq(kvt_config_state_policy_name(c.state_policy), names[i]);
    }
    cr_assert_str_eq(kvt_config_state_policy_name((kvt_state_policy_t)4), "?");
}

Test(config, speculative_config_has_one_stable_form)
{
    kvt_config_t c;
    cr_assert_eq(s_flag("speculative", "MTP:02", &c), 0, "%s", s_err);
    cr_assert_str_eq(c.speculative, "mtp:2");
    cr_assert_eq(c.speculative_tokens, 2);
    cr_assert_eq(c.min_tail_tokens, 2, "a hit leaves 2 tokens under speculative decoding");
    cr_assert_eq(s_flag("speculative", "none", &c), 0, "%s", s_err);
    cr_assert_str_eq(c.speculative, "off");
    cr_assert_eq(c.min_tail_tokens, 1);
    REFUSED(s_flag("speculative", "mtp", &c), "no count", "speculative", "'mtp'");
    REFUSED(s_flag("speculative", "mtp:17", &c), "too many", "speculative", "mtp:17");
    REFUSED(s_flag("speculative", "m p:1", &c), "space", "speculative");
}

//  ---- layers ----------------------------------------------------------------

Test(config, precedence_is_file_then_environment_then_flags)
{
    const char *yaml = "cpu_pool: 1GiB\ntp: 4\n";
    const char *env[] = {"KVTIER_CPU_POOL=2GiB", "HOME=/x", NULL};
    const char *flags[] = {"--cpu-pool", "3GiB", NULL};
    kvt_config_t c;
    kvt_config_loader_t *ld;
    cr_assert_eq(s_build3(yaml, env, flags, &c, &ld, NULL, NULL), 0, "%s", s_err);
    cr_assert_eq(c.cpu_pool_bytes, 3 * GiB, "the flag wins");
    cr_assert_eq(c.tp, 4, "what only the file says stays");
    cr_assert_str_eq(kvt_config_loader_origin(ld, "cpu_pool"), "--cpu-pool");
    cr_assert_str_eq(kvt_config_loader_origin(ld, "tp"), "cfg.yaml:2");
    cr_assert_str_eq(kvt_config_loader_origin(ld, "seed"), "default");
    kvt_config_loader_destroy(&ld);
    cr_assert_null(ld);
    cr_assert_eq(s_build3(yaml, env, NULL, &c, &ld, NULL, NULL), 0, "%s", s_err);
    cr_assert_eq(c.cpu_pool_bytes, 2 * GiB, "the environment beats the file");
    cr_assert_str_eq(kvt_config_loader_origin(ld, "cpu_pool"), "KVTIER_CPU_POOL");
    kvt_config_loader_destroy(&ld);
    cr_assert_eq(s_yaml(yaml, &c), 0, "%s", s_err);
    cr_assert_eq(c.cpu_pool_bytes, 1 * GiB);

    //  The order of the calls does not matter: flags first, file last.
    kvt_config_loader_t *l = kvt_config_loader_new();
    cr_assert_eq(kvt_config_loader_flag(l, "cpu-pool", "3GiB", s_err, sizeof s_err), 0);
    cr_assert_eq(kvt_config_loader_env(l, (char *const *)env, s_err, sizeof s_err), 0);
    cr_assert_eq(kvt_config_loader_yaml(l, yaml, strlen(yaml), "f", s_err, sizeof s_err), 0);
    cr_assert_eq(kvt_config_loader_build(l, &c, NULL, NULL, s_err, sizeof s_err), 0, "%s", s_err);
    cr_assert_eq(c.cpu_pool_bytes, 3 * GiB);
    kvt_config_loader_destroy(&l);
}

Test(config, flags_take_every_spelling_and_the_last_one_wins)
{
    kvt_config_t c;
    const char *flags[] = {"--cpu-pool",       "1GiB", "cpu-pool", "2GiB", "cpu_pool", "4GiB",
                           "--mem-overcommit", NULL,   NULL};
    cr_assert_eq(s_build3(NULL, NULL, flags, &c, NULL, NULL, NULL), 0, "%s", s_err);
    cr_assert_eq(c.cpu_pool_bytes, 4 * GiB);
    cr_assert(c.mem_overcommit, "a boolean flag standing alone is true");
    REFUSED(s_flag("--tp", NULL, &c), "no value", "--tp", "needs a value");
    const char *eq[] = {"--lookup-pin=false", NULL, "--tp=4", NULL, "--speculative=", NULL, NULL};
    cr_assert_eq(s_build3(NULL, NULL, eq, &c, NULL, NULL, NULL), 0, "%s", s_err);
    cr_assert_not(c.lookup_pin, "--lookup-pin=false");
    cr_assert_eq(c.tp, 4, "--tp=4");
    cr_assert_str_eq(c.speculative, "off");
    REFUSED(s_flag("--tp=x", NULL, &c), "carried", "tp = 'x'", "--tp");
    bool carried = false;
    cr_assert(kvt_config_has_key("--lookup-pin=false", &carried) && carried);
    bool is_bool = true;
    cr_assert(kvt_config_has_key("--disk-dir", &is_bool));
    cr_assert_not(is_bool);
    cr_assert(kvt_config_has_key("mem-overcommit", &is_bool));
    cr_assert(is_bool);
    cr_assert_not(kvt_config_has_key("--json", NULL), "the report's outputs are no settings");
}

Test(config, rule_C1_an_empty_value_is_the_default)
{
    kvt_config_t c, d;
    kvt_config_defaults(&d);
    cr_assert_eq(s_yaml("cpu_pool:\ntp: ~\nspeculative: ''\nlookup_timeout: null\n", &c), 0, "%s",
                 s_err);
    cr_assert_eq(c.cpu_pool_bytes, d.cpu_pool_bytes);
    cr_assert_eq(c.tp, d.tp);
    cr_assert_str_eq(c.speculative, "off");
    cr_assert_eq(c.lookup_timeout_ns, d.lookup_timeout_ns);
    //  An empty value in a higher layer is the default, not the lower layer's value.
    const char *env[] = {"KVTIER_CPU_POOL=", NULL};
    kvt_config_loader_t *ld;
    cr_assert_eq(s_build3("cpu_pool: 1GiB\n", env, NULL, &c, &ld, NULL, NULL), 0, "%s", s_err);
    cr_assert_eq(c.cpu_pool_bytes, 512 * MiB);
    cr_assert(strstr(kvt_config_loader_origin(ld, "cpu_pool"), "empty") != NULL);
    kvt_config_loader_destroy(&ld);
    //  A preset's geometry is the default of a geometry setting.
    const char *flags[] = {"model", "qwen3-next-like", "state_bytes", "", NULL};
    cr_assert_eq(s_build3("state_bytes: 1MiB\n", NULL, flags, &c, NULL, NULL, NULL), 0, "%s",
                 s_err);
    cr_assert_eq(c.state_bytes, 1608 * 128);
    //  An empty disk setting says nothing, so it needs no disk; a value does.
    cr_assert_eq(s_yaml("disk_pool:\ndisk_write: ''\n", &c), 0, "%s", s_err);
    REFUSED(s_yaml("disk_pool: 1GiB\n", &c), "a disk size without a disk", "disk_pool",
            "needs disk_dir");
}

Test(config, rule_C1_a_bad_width_size_or_timeout_is_refused_naming_it)
{
    kvt_config_t c;
    REFUSED(s_flag("tp", "0", &c), "width 0", "tp = '0'", "--tp", "out of range");
    REFUSED(s_flag("tp", "65", &c), "width 65", "tp = '65'", "out of range");
    REFUSED(s_flag("tp", "two", &c), "width word", "tp = 'two'", "not a whole number");
    REFUSED(s_flag("pipeline_parallel", "0", &c), "pp 0", "pipeline_parallel = '0'");
    REFUSED(s_yaml("\nhbm_pool: lots\n", &c), "size", "hbm_pool = 'lots'", "cfg.yaml:2");
    const char *env[] = {"KVTIER_VERIFY_HOLD=2", NULL};
    REFUSED(s_build3(NULL, env, NULL, &c, NULL, NULL, NULL), "timeout", "verify_hold = '2'",
            "KVTIER_VERIFY_HOLD", "unit");
}

Test(config, every_rejection_names_the_setting_its_value_and_its_source)
{
    static const char *const keys[][2] = {
        {"limit", "-1"},
        {"time_scale", "0"},
        {"closed_loop", "-1"},
        {"pace", "sometimes"},
        {"grid_share", "1001"},
        {"driver", "x"},
        {"seed", "1e3"},
        {"log_level", "4"},
        {"tp", "100"},
        {"pipeline_parallel", "x"},
        {"hbm_pool", "0"},
        {"cpu_pool", "big"},
        {"disk_pool", "0"},
        {"disk_write", "never"},
        {"evict_order", "gdsf"},
        {"mem_overcommit", "2"},
        {"state_tier", "maybe"},
        {"model", "llama"},
        {"model_id", "a b"},
        {"layout", "mla"},
        {"dtype", "fp4"},
        {"layers", "0"},
        {"planes", "9"},
        {"token_bytes", "2MiB"},
        {"state_bytes", "5GiB"},
        {"block_size", "0"},
        {"chunk_size", "65537"},
        {"checkpoint_interval", "x"},
        {"tp_rank_collapse", "x"},
        {"speculative", "x"},
        {"max_running", "4097"},
        {"step_tokens", "0"},
        {"min_load_tokens", "x"},
        {"state_policy", "lru"},
        {"lookup", "x"},
        {"lookup_pin", "x"},
        {"lookup_timeout", "1"},
        {"lookup_max_age", "0s"},
        {"verified_window", "x"},
        {"verify_hold", "0ms"},
        {"orphan_reclaim", "2h"},
        {"load_deadline", "0s"},
        {"agg_timeout", "2h"},
        {"lane_deadline", "x"},
        {"fence_timeout", "1"},
        {"lookup_ttl", "x"},
        {"pool_ttl", "0s"},
        {"metrics_addr", "nohost"},
        {"metrics_interval", "0s"},
    };
    size_t n = sizeof keys / sizeof keys[0];
    //  Every setting that can be refused for its value is in the list.
    cr_assert_eq(n + 6, kvt_config_key_count(),
                 "trace, disk_dir, remote and the three curve_* paths take any text");
    for (size_t i = 0; i < n; i++) {
        char yaml[256], envv[256], flag[64], envname[64];
        snprintf(yaml, sizeof yaml, "# a comment\n%s: '%s'\n", keys[i][0], keys[i][1]);
        kvt_config_t c;
        REFUSED(s_yaml(yaml, &c), keys[i][0], keys[i][0], keys[i][1], "cfg.yaml:2");
        size_t len = strlen(keys[i][0]);
        memcpy(envname, "KVTIER_", 7);
        memcpy(flag, "--", 2);
        for (size_t j = 0; j <= len; j++) {
            char ch = keys[i][0][j];
            envname[7 + j] = (char)(ch >= 'a' && ch <= 'z' ? ch - 'a' + 'A' : ch);
            flag[2 + j] = ch == '_' ? '-' : ch;
        }
        snprintf(envv, sizeof envv, "%s=%s", envname, keys[i][1]);
        const char *env[] = {envv, NULL};
        REFUSED(s_build3(NULL, env, NULL, &c, NULL, NULL, NULL), envv, keys[i][0], keys[i][1],
                envname);
        REFUSED(s_flag(flag, keys[i][1], &c), flag, keys[i][0], keys[i][1], flag);
    }
}

Test(config, unknown_settings_are_refused_naming_them)
{
    kvt_config_t c;
    REFUSED(s_yaml("tp: 2\ncpu_pol: 1GiB\n", &c), "file", "cpu_pol", "cfg.yaml:2", "unknown");
    REFUSED(s_yaml("cpu-pool: 1GiB\n", &c), "file with dashes", "cpu-pool", "unknown");
    const char *env[] = {"KVTIER_CPU_POL=1", NULL};
    REFUSED(s_build3(NULL, env, NULL, &c, NULL, NULL, NULL), "env", "KVTIER_CPU_POL", "unknown");
    REFUSED(s_flag("--cpu-pol", "1", &c), "flag", "--cpu-pol", "unknown");
    //  Other variables are none of the configuration's business.
    const char *other[] = {"KVTIERX=1", "PATH=/bin", "kvtier_tp=9", NULL};
    cr_assert_eq(s_build3(NULL, other, NULL, &c, NULL, NULL, NULL), 0, "%s", s_err);
    cr_assert_eq(c.tp, 2);
}

Test(config, yaml_syntax_errors_name_the_line)
{
    kvt_config_t c;
    REFUSED(s_yaml("tp: 2\ncpu_pool: 1GiB\nseed: 1: 2\n", &c), "mapping value",
            "cfg.yaml:3: column 8: YAML syntax error", "mapping values are not allowed");
    REFUSED(s_yaml("tp: 2\n\n\n\tlimit: 1\n", &c), "tab", "cfg.yaml:4:", "YAML syntax error",
            "tab");
    REFUSED(s_yaml("tp: 2\nseed: \"2\n\n", &c), "open quote",
            "cfg.yaml:4:", "quoted scalar started on line 2");
}

Test(config, yaml_structure_is_one_flat_mapping)
{
    kvt_config_t c;
    REFUSED(s_yaml("tp: 2\ncpu_pool: 1GiB\ntp: 4\n", &c), "twice", "'tp' given twice", "cfg.yaml:3",
            "line 1");
    REFUSED(s_yaml("tp: [1, 2]\n", &c), "list", "'tp'", "a list", "cfg.yaml:1");
    REFUSED(s_yaml("tp:\n  ranks: 2\n", &c), "nested", "'tp'", "a mapping");
    REFUSED(s_yaml("tp: &x 2\nseed: *x\n", &c), "alias", "'seed'", "an alias");
    REFUSED(s_yaml("just text\n", &c), "scalar", "mapping of settings");
    REFUSED(s_yaml("- tp\n", &c), "sequence", "cfg.yaml:1", "a list");
    REFUSED(s_yaml("tp: 2\n---\ntp: 3\n", &c), "documents", "cfg.yaml:2", "one YAML document");
    //  A name cut at a NUL byte would read as another setting (found by fuzz_config).
    REFUSED(s_yaml("tp: 2\n\"cpu_pool\\0x\": 1GiB\n", &c), "NUL in a name", "cfg.yaml:2",
            "name holds a NUL byte");
    REFUSED(s_yaml("\"\\0\": 1\n", &c), "a name that is only a NUL", "cfg.yaml:1", "NUL byte");
    cr_assert_eq(s_yaml("", &c), 0, "an empty file: %s", s_err);
    cr_assert_eq(s_yaml("# nothing\n", &c), 0, "only a comment: %s", s_err);
    cr_assert_eq(s_yaml("---\ntp: 3\n...\n", &c), 0, "%s", s_err);
    cr_assert_eq(c.tp, 3);
}

Test(config, a_file_is_kept_whole_or_not_at_all)
{
    kvt_config_loader_t *l = kvt_config_loader_new();
    const char *bad = "tp: 4\nnope: 1\n";
    cr_assert_eq(kvt_config_loader_yaml(l, bad, strlen(bad), "f", s_err, sizeof s_err), -1);
    kvt_config_t c;
    cr_assert_eq(kvt_config_loader_build(l, &c, NULL, NULL, s_err, sizeof s_err), 0, "%s", s_err);
    cr_assert_eq(c.tp, 2, "the refused file's tp was kept");
    const char *good = "tp: 8\n";
    cr_assert_eq(kvt_config_loader_yaml(l, good, strlen(good), "f", s_err, sizeof s_err), 0);
    REFUSED(kvt_config_loader_yaml(l, good, strlen(good), "g", s_err, sizeof s_err), "second",
            "only one");
    cr_assert_eq(kvt_config_loader_build(l, &c, NULL, NULL, s_err, sizeof s_err), 0, "%s", s_err);
    cr_assert_eq(c.tp, 8);
    //  The environment too: one unknown variable keeps none of them.
    kvt_config_loader_t *e = kvt_config_loader_new();
    char *env[] = {"KVTIER_TP=4", "KVTIER_NOPE=1", NULL};
    cr_assert_eq(kvt_config_loader_env(e, env, s_err, sizeof s_err), -1);
    cr_assert_eq(kvt_config_loader_build(e, &c, NULL, NULL, s_err, sizeof s_err), 0, "%s", s_err);
    cr_assert_eq(c.tp, 2);
    kvt_config_loader_destroy(&e);
    kvt_config_loader_destroy(&l);
    kvt_config_loader_destroy(&l);
}

Test(config, reads_a_file_from_disk)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/kvt-config-%d.yaml", (int)getpid());
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("# kvtier\ncpu_pool: 8GiB\nmodel: kimi-linear-like\n", f);
    fclose(f);
    kvt_config_loader_t *l = kvt_config_loader_new();
    cr_assert_eq(kvt_config_loader_file(l, path, s_err, sizeof s_err), 0, "%s", s_err);
    kvt_config_t c;
    cr_assert_eq(kvt_config_loader_build(l, &c, NULL, NULL, s_err, sizeof s_err), 0, "%s", s_err);
    cr_assert_eq(c.cpu_pool_bytes, 8 * GiB);
    cr_assert_eq(c.layout, KVT_LAYOUT_KDA);
    char origin[128];
    snprintf(origin, sizeof origin, "%s:3", path);
    cr_assert_str_eq(kvt_config_loader_origin(l, "model"), origin);
    kvt_config_loader_destroy(&l);
    unlink(path);
    l = kvt_config_loader_new();
    REFUSED(kvt_config_loader_file(l, path, s_err, sizeof s_err), "missing", path, "cannot open");
    kvt_config_loader_destroy(&l);
}

//  ---- rules -------------------------------------------------------------------

Test(config, rule_C1_a_state_tier_under_pipeline_parallelism_is_refused)
{
    kvt_config_t c;
    REFUSED(s_yaml("model: qwen3-next-like\npipeline_parallel: 2\n", &c), "auto tier",
            "state_tier = on", "pipeline_parallel = 2", "cfg.yaml:2", "rule C1");
    REFUSED(s_yaml("model: kimi-linear-like\nstate_tier: on\npipeline_parallel: 4\n", &c),
            "explicit tier", "state_tier = on", "cfg.yaml:2", "pipeline_parallel = 4");
    //  Without a tier to host, pipeline parallelism starts.
    cr_assert_eq(s_yaml("model: qwen3-next-like\nstate_tier: off\npipeline_parallel: 2\n", &c), 0,
                 "%s", s_err);
    cr_assert_eq(c.state_tier, KVT_OFF);
    cr_assert_eq(s_yaml("model: dense\npipeline_parallel: 2\n", &c), 0, "%s", s_err);
    cr_assert_eq(c.state_tier, KVT_OFF);
    cr_assert_eq(s_yaml("model: qwen3-next-like\ncpu_pool: 0\npipeline_parallel: 2\n", &c), 0,
                 "no CPU tier, no state tier: %s", s_err);
    cr_assert_eq(s_yaml("model: qwen3-next-like\npipeline_parallel: 1\n", &c), 0, "%s", s_err);
    cr_assert_eq(c.state_tier, KVT_ON);
}

Test(config, rule_C1_the_check_runs_on_a_struct_filled_by_hand)
{
    kvt_config_t c;
    kvt_config_defaults(&c);
    c.model = KVT_MODEL_QWEN3_NEXT_LIKE;
    c.layout = KVT_LAYOUT_AUTO;
    c.state_bytes = 1 * MiB;
    c.state_tier = KVT_AUTO;
    c.pipeline_parallel = 2;
    REFUSED(kvt_config_resolve(&c, NULL, NULL, s_err, sizeof s_err), "hand", "state_tier",
            "pipeline_parallel = 2");
    kvt_config_defaults(&c);
    c.tp = 0;
    REFUSED(kvt_config_resolve(&c, NULL, NULL, s_err, sizeof s_err), "tp 0", "tp = 0",
            "out of range");
    kvt_config_defaults(&c);
    c.lookup = (kvt_lookup_mode_t)7;
    REFUSED(kvt_config_resolve(&c, NULL, NULL, s_err, sizeof s_err), "enum", "lookup = 7");
    kvt_config_defaults(&c);
    snprintf(c.speculative, sizeof c.speculative, "EAGLE:3");
    cr_assert_eq(kvt_config_resolve(&c, NULL, NULL, s_err, sizeof s_err), 0, "%s", s_err);
    cr_assert_str_eq(c.speculative, "eagle:3");
    cr_assert_eq(c.speculative_tokens, 3);
}

Test(config, rule_C3_a_state_owning_layout_accepts_only_its_own)
{
    kvt_config_t c;
    REFUSED(s_yaml("model: qwen3-next-like\nlayout: kda\n", &c), "qwen on kda", "layout = kda",
            "cfg.yaml:2", "qwen3-next-like", "gdn", "rule C3");
    REFUSED(s_yaml("model: kimi-linear-like\nlayout: gdn\n", &c), "kimi on gdn", "layout = gdn",
            "rule C3");
    REFUSED(s_yaml("model: qwen3-next-like\nlayout: dense\n", &c), "qwen on dense",
            "layout = dense", "rule C3");
    REFUSED(s_yaml("model: dense\nlayout: gdn\n", &c), "dense on gdn", "layout = gdn",
            "qwen3-next-like", "rule C3");
    cr_assert_eq(s_yaml("model: qwen3-next-like\nlayout: gdn\n", &c), 0, "own: %s", s_err);
    cr_assert_eq(c.layout, KVT_LAYOUT_GDN);
    cr_assert_eq(s_yaml("model: kimi-linear-like\n", &c), 0, "auto: %s", s_err);
    cr_assert_eq(c.layout, KVT_LAYOUT_KDA);
    cr_assert_eq(s_yaml("layout: dense\n", &c), 0, "dense on dense: %s", s_err);
    cr_assert_eq(c.layout, KVT_LAYOUT_DENSE);
}

Test(config, a_state_owning_layout_keeps_a_copy_per_rank_and_a_state)
{
    kvt_config_t c;
    REFUSED(s_yaml("model: qwen3-next-like\ntp_rank_collapse: on\n", &c), "collapse",
            "tp_rank_collapse = on", "cfg.yaml:2", "gdn");
    cr_assert_eq(s_yaml("tp_rank_collapse: on\n", &c), 0, "dense collapses: %s", s_err);
    cr_assert_eq(c.tp_rank_collapse, KVT_ON);
    REFUSED(s_yaml("model: qwen3-next-like\nstate_bytes: 0\n", &c), "no state", "state_bytes = 0",
            "gdn");
    REFUSED(s_yaml("state_bytes: 1MiB\n", &c), "dense state", "state_bytes = 1048576", "dense");
    REFUSED(s_yaml("state_tier: on\n", &c), "dense tier", "state_tier = on", "no state");
    REFUSED(s_yaml("model: qwen3-next-like\nstate_tier: on\ncpu_pool: 0\n", &c), "no pool",
            "state_tier = on", "cpu_pool = 0");
}

Test(config, settings_that_only_work_together_are_checked_together)
{
    kvt_config_t c;
    REFUSED(s_yaml("chunk_size: 100\n", &c), "chunk", "chunk_size = 100", "block_size = 16");
    REFUSED(s_yaml("model: qwen3-next-like\ncheckpoint_interval: 300\n", &c), "interval",
            "checkpoint_interval = 300", "chunk_size = 256");
    REFUSED(s_yaml("step_tokens: 10\nmax_running: 20\n", &c), "budget", "step_tokens = 10",
            "max_running = 20");
    REFUSED(s_yaml("fence_timeout: 2s\n", &c), "fence", "fence_timeout = 2 s", "lane_deadline");
    REFUSED(s_yaml("lookup_ttl: 60s\n", &c), "ttl", "lookup_ttl = 60 s", "pool_ttl = 60 s");
    REFUSED(s_yaml("disk_pool: 1GiB\n", &c), "disk", "disk_pool", "cfg.yaml:1", "disk_dir");
    cr_assert_eq(s_yaml("disk_pool: 1GiB\ndisk_dir: /tmp/d\n", &c), 0, "%s", s_err);
    cr_assert_str_eq(c.disk_dir, "/tmp/d");
}

Test(config, presets_give_the_geometry_no_layer_sets)
{
    kvt_config_t c;
    cr_assert_eq(s_flag("model", "qwen3-next-like", &c), 0, "%s", s_err);
    cr_assert_eq(c.state_bytes, 1608 * 128);
    cr_assert_eq(c.checkpoint_interval, 1024);
    cr_assert_eq(c.layers, 4);
    cr_assert_str_eq(c.model_id, "qwen3-next-like");
    cr_assert_eq(s_flag("model", "kimi-linear-like", &c), 0, "%s", s_err);
    cr_assert_eq(c.state_bytes, 1392 * 128);
    cr_assert_eq(c.planes, 1);
    cr_assert_eq(c.token_bytes, 32);
    //  A geometry setting from any layer beats the preset, even one below
    //  the layer that names the model.
    const char *flags[] = {"model", "qwen3-next-like", NULL};
    kvt_config_loader_t *ld;
    cr_assert_eq(s_build3("state_bytes: 1MiB\n", NULL, flags, &c, &ld, NULL, NULL), 0, "%s", s_err);
    cr_assert_eq(c.state_bytes, 1 * MiB);
    cr_assert_str_eq(kvt_config_loader_origin(ld, "checkpoint_interval"), "preset qwen3-next-like");
    kvt_config_loader_destroy(&ld);
    kvt_config_defaults(&c);
    cr_assert_eq(c.state_bytes, 0);
    cr_assert_eq(c.block_bytes, 2048, "planes 2 x layers 4 x 16 tokens x 16 bytes");
    cr_assert_eq(c.chunk_bytes, 32768);
}

//  ---- derived values ---------------------------------------------------------

typedef struct {
    char keys[32][32];    //  derived settings logged, in order
    char values[32][160]; //  their values
    unsigned n;           //  entries
} s_log_t;

static void s_log(void *arg, const char *key, const char *value, const char *why)
{
    s_log_t *l = arg;
    cr_assert_lt(l->n, 32);
    snprintf(l->keys[l->n], sizeof l->keys[0], "%s", key);
    snprintf(l->values[l->n], sizeof l->values[0], "%s", value);
    l->n++;
    cr_assert_not_null(why);
}

static const char *s_logged(const s_log_t *l, const char *key)
{
    const char *v = NULL;
    for (unsigned i = 0; i < l->n; i++)
        if (strcmp(l->keys[i], key) == 0) {
            cr_assert_null(v, "%s logged twice", key);
            v = l->values[i];
        }
    return v;
}

Test(config, every_derived_value_is_logged_once)
{
    s_log_t l;
    memset(&l, 0, sizeof l);
    kvt_config_t c;
    cr_assert_eq(s_build3("model: qwen3-next-like\n", NULL, NULL, &c, NULL, s_log, &l), 0, "%s",
                 s_err);
    static const char *const derived[] = {"layout",      "state_tier",      "tp_rank_collapse",
                                          "model_id",    "verified_window", "min_tail_tokens",
                                          "block_bytes", "chunk_bytes",     "namespace"};
    size_t n = sizeof derived / sizeof derived[0];
    for (size_t i = 0; i < n; i++)
        cr_assert_not_null(s_logged(&l, derived[i]), "%s not logged", derived[i]);
    cr_assert_eq(l.n, n, "logged %u values, expected %zu", l.n, n);
    cr_assert_str_eq(s_logged(&l, "layout"), "gdn");
    cr_assert_str_eq(s_logged(&l, "state_tier"), "on");
    char ns[40];
    snprintf(ns, sizeof ns, "%016llx%016llx", (unsigned long long)c.ns.hi,
             (unsigned long long)c.ns.lo);
    cr_assert_str_eq(s_logged(&l, "namespace"), ns);
}

static uint64_t s_window(const char *cpu_pool)
{
    kvt_config_t c;
    cr_assert_eq(s_flag("cpu_pool", cpu_pool, &c), 0, "%s", s_err);
    return c.verified_window_ns;
}

Test(config, the_verified_window_is_derived_from_the_pool)
{
    //  clamp (0.25 s/GiB x pool GiB, 5 s, 60 s)
    cr_assert_eq(s_window("512MiB"), 5 * SEC, "clamped up to 5 s");
    cr_assert_eq(s_window("0"), 5 * SEC);
    cr_assert_eq(s_window("100GiB"), 25 * SEC, "0.25 s x 100");
    cr_assert_eq(s_window("40GiB"), 10 * SEC);
    cr_assert_eq(s_window("1TiB"), 60 * SEC, "clamped down to 60 s");
    kvt_config_t c;
    const char *flags[] = {"cpu_pool", "100GiB", "verified_window", "7s", NULL};
    cr_assert_eq(s_build3(NULL, NULL, flags, &c, NULL, NULL, NULL), 0, "%s", s_err);
    cr_assert_eq(c.verified_window_ns, 7 * SEC, "a window that is set is kept");
}

//  ---- the namespace (C2) -----------------------------------------------------

static kvt_hash_t s_ns(const char *yaml)
{
    kvt_config_t c;
    cr_assert_eq(s_yaml(yaml, &c), 0, "%s: %s", yaml, s_err);
    XXH128_hash_t h = XXH3_128bits(c.ns_desc, strlen(c.ns_desc));
    cr_assert(c.ns.hi == h.high64 && c.ns.lo == h.low64, "the namespace is XXH3-128 of its text");
    return c.ns;
}

Test(config, rule_C2_the_namespace_changes_with_everything_that_changes_stored_bytes)
{
    //  A base with every namespace input set, and each input changed alone.
    const char *base = "model: qwen3-next-like\nmodel_id: m\nlayers: 4\nplanes: 2\n"
                       "token_bytes: 16\nstate_bytes: 1MiB\nblock_size: 16\nchunk_size: 256\n"
                       "checkpoint_interval: 1024\ndtype: bf16\ntp: 2\n"
                       "tp_rank_collapse: off\nspeculative: off\npipeline_parallel: 1\n"
                       "state_tier: off\n";
    static const char *const change[][2] = {
        {"model_id: m", "model_id: n"},
        {"model: qwen3-next-like", "model: kimi-linear-like"}, //  layout gdn -> kda
        {"layers: 4", "layers: 5"},
        {"planes: 2", "planes: 3"},
        {"token_bytes: 16", "token_bytes: 32"},
        {"state_bytes: 1MiB", "state_bytes: 2MiB"},
        {"block_size: 16", "block_size: 32"},
        {"chunk_size: 256", "chunk_size: 512"},
        {"dtype: bf16", "dtype: fp8_e4m3"},
        {"tp: 2", "tp: 4"},
        {"speculative: off", "speculative: mtp:1"},
        {"pipeline_parallel: 1", "pipeline_parallel: 2"},
    };
    kvt_hash_t h0 = s_ns(base);
    for (size_t i = 0; i < sizeof change / sizeof change[0]; i++) {
        char yaml[1024];
        const char *at = strstr(base, change[i][0]);
        cr_assert_not_null(at);
        snprintf(yaml, sizeof yaml, "%.*s%s%s", (int)(at - base), base, change[i][1],
                 at + strlen(change[i][0]));
        kvt_hash_t h = s_ns(yaml);
        cr_assert_not(kvt_hash_eq(h, h0), "'%s' left the namespace as it was", change[i][1]);
    }
    //  TP collapse: a dense model, collapsed or not.
    kvt_hash_t d0 = s_ns("tp: 2\ntp_rank_collapse: off\n");
    kvt_hash_t d1 = s_ns("tp: 2\ntp_rank_collapse: on\n");
    cr_assert_not(kvt_hash_eq(d0, d1), "TP collapse is in the namespace");
    cr_assert(kvt_hash_eq(d1, s_ns("tp: 4\ntp_rank_collapse: on\n")),
              "collapsed ranks store the same bytes whatever the TP width");
}

Test(config, rule_C2_the_namespace_ignores_spelling_order_and_what_moves_no_bytes)
{
    kvt_hash_t a = s_ns("model: qwen3-next-like\nstate_bytes: 1MiB\ntoken_bytes: 16\n"
                        "speculative: mtp:2\ncpu_pool: 8GiB\n");
    kvt_hash_t b = s_ns("# the same, otherwise written\ncpu_pool: 8192MiB\nspeculative: MTP:02\n"
                        "token_bytes: 16B\nstate_bytes: 1024KiB\nmodel: 'qwen3-next-like'\n");
    cr_assert(kvt_hash_eq(a, b), "order or spelling changed the namespace");
    kvt_hash_t c = s_ns("model: qwen3-next-like\nstate_bytes: 1MiB\ntoken_bytes: 16\n"
                        "speculative: mtp:2\ncpu_pool: 1GiB\nhbm_pool: 1GiB\nlookup_timeout: 3s\n"
                        "checkpoint_interval: 2048\nmax_running: 8\nseed: 9\n");
    cr_assert(kvt_hash_eq(a, c), "a setting that moves no stored bytes changed the namespace");
    //  The layer a value comes from does not matter either.
    kvt_config_t x;
    const char *env[] = {"KVTIER_MODEL=qwen3-next-like", "KVTIER_STATE_BYTES=1MiB",
                         "KVTIER_SPECULATIVE=mtp:2", NULL};
    cr_assert_eq(s_build3(NULL, env, NULL, &x, NULL, NULL, NULL), 0, "%s", s_err);
    cr_assert(kvt_hash_eq(a, x.ns));
}

//  ---- docs ---------------------------------------------------------------------

Test(config, the_docs_list_every_setting_with_its_default)
{
    FILE *f = fopen(KVT_SOURCE_DIR "/docs/configuration.md", "r");
    cr_assert_not_null(f);
    static char doc[1 << 17];
    size_t n = fread(doc, 1, sizeof doc - 1, f);
    fclose(f);
    doc[n] = 0;
    for (size_t i = 0; i < kvt_config_key_count(); i++) {
        const char *name, *def, *unit;
        cr_assert_eq(kvt_config_key_at(i, &name, &def, &unit), 0);
        char row[96];
        snprintf(row, sizeof row, "| `%s` |", name);
        const char *at = strstr(doc, row);
        cr_assert_not_null(at, "docs/configuration.md has no row for %s", name);
        const char *eol = strchr(at, '\n');
        char line[1024];
        snprintf(line, sizeof line, "%.*s", (int)(eol ? eol - at : (long)strlen(at)), at);
        if (def[0]) {
            //  The default cell is the table's default, then optionally a
            //  note in parentheses (what `kvtier replay` uses instead).
            char cell[96], noted[96];
            snprintf(cell, sizeof cell, "| `%s` |", def);
            snprintf(noted, sizeof noted, "| `%s` (", def);
            cr_assert(strstr(line, cell) != NULL || strstr(line, noted) != NULL,
                      "the docs' row of %s does not give `%s`: %s", name, def, line);
        }
    }
    cr_assert_eq(kvt_config_key_at(kvt_config_key_count(), &(const char *){0}, &(const char *){0},
                                   &(const char *){0}),
                 -1);
}

Test(config, the_docs_example_file_builds)
{
    FILE *f = fopen(KVT_SOURCE_DIR "/docs/configuration.md", "r");
    cr_assert_not_null(f);
    static char doc[1 << 17];
    size_t n = fread(doc, 1, sizeof doc - 1, f);
    fclose(f);
    doc[n] = 0;
    const char *at = strstr(doc, "```yaml\n");
    cr_assert_not_null(at, "docs/configuration.md has no example file");
    at += strlen("```yaml\n");
    const char *end = strstr(at, "```");
    cr_assert_not_null(end);
    char yaml[4096];
    snprintf(yaml, sizeof yaml, "%.*s", (int)(end - at), at);
    kvt_config_t c;
    cr_assert_eq(s_yaml(yaml, &c), 0, "the example: %s", s_err);
    cr_assert_eq(c.layout, KVT_LAYOUT_GDN);
    cr_assert_eq(c.cpu_pool_bytes, 200 * GiB);
    cr_assert_eq(c.verified_window_ns, 50 * SEC);
    cr_assert_eq(c.min_tail_tokens, 2);
}

Test(config, the_docs_defaults_file_lists_every_setting_and_builds_the_defaults)
{
    FILE *f = fopen(KVT_SOURCE_DIR "/docs/configuration.md", "r");
    cr_assert_not_null(f);
    static char doc[1 << 17];
    size_t n = fread(doc, 1, sizeof doc - 1, f);
    fclose(f);
    doc[n] = 0;
    const char *at = strstr(doc, "(`kvtier-defaults.yaml`");
    cr_assert_not_null(at, "docs/configuration.md has no defaults file");
    at = strstr(at, "```yaml\n");
    cr_assert_not_null(at);
    at += strlen("```yaml\n");
    const char *end = strstr(at, "```");
    cr_assert_not_null(end);
    static char yaml[8192];
    snprintf(yaml, sizeof yaml, "\n%.*s", (int)(end - at), at);
    for (size_t i = 0; i < kvt_config_key_count(); i++) {
        const char *name, *def, *unit;
        cr_assert_eq(kvt_config_key_at(i, &name, &def, &unit), 0);
        char line[96];
        snprintf(line, sizeof line, "\n%s:", name);
        cr_assert_not_null(strstr(yaml, line), "the defaults file does not list %s", name);
    }
    kvt_config_t c, d;
    cr_assert_eq(s_yaml(yaml + 1, &c), 0, "the defaults file: %s", s_err);
    kvt_config_defaults(&d);
    cr_assert(kvt_hash_eq(c.ns, d.ns), "the defaults file gives another namespace: %s", c.ns_desc);
    cr_assert_eq(c.hbm_pool_bytes, d.hbm_pool_bytes);
    cr_assert_eq(c.cpu_pool_bytes, d.cpu_pool_bytes);
    cr_assert_eq(c.verified_window_ns, d.verified_window_ns);
    cr_assert_eq(c.lookup_timeout_ns, d.lookup_timeout_ns);
    cr_assert_eq(c.pool_ttl_ns, d.pool_ttl_ns);
    cr_assert_eq(c.lookup_pin, d.lookup_pin);
    cr_assert_eq(c.state_tier, d.state_tier);
    cr_assert_eq(c.max_running, d.max_running);
}

Test(config, a_bad_value_is_refused_even_where_a_higher_layer_overrides_it)
{
    kvt_config_t c;
    const char *flags[] = {"cpu_pool", "1GiB", NULL};
    REFUSED(s_build3("cpu_pool: 1XB\n", NULL, flags, &c, NULL, NULL, NULL), "file",
            "cpu_pool = '1XB'", "cfg.yaml:1");
    const char *env[] = {"KVTIER_TP=zero", NULL};
    const char *tp[] = {"tp", "4", NULL};
    REFUSED(s_build3(NULL, env, tp, &c, NULL, NULL, NULL), "env", "tp = 'zero'", "KVTIER_TP");
}

Test(config, rule_C3_a_tier_recorded_with_another_layout_is_refused)
{
    kvt_config_t q, k, q2, d;
    cr_assert_eq(s_yaml("model: qwen3-next-like\n", &q), 0, "%s", s_err);
    cr_assert_eq(s_yaml("model: kimi-linear-like\nplanes: 2\ntoken_bytes: 16\n"
                        "state_bytes: 205824\n",
                        &k),
                 0, "%s", s_err);
    cr_assert_eq(s_yaml("model: qwen3-next-like\nstate_bytes: 201KiB\ncpu_pool: 1GiB\n", &q2), 0,
                 "%s", s_err);
    cr_assert_eq(s_yaml("", &d), 0, "%s", s_err);
    uint64_t qid = kvt_config_layout_id(&q);
    cr_assert_eq(qid, kvt_config_layout_id(&q2), "spelling and pool size moved the layout id");
    cr_assert_neq(qid, kvt_config_layout_id(&k), "same geometry, another layout: same id");
    cr_assert_eq(kvt_config_check_tier_layout(&q, qid, "dir", s_err, sizeof s_err), 0);
    REFUSED(
        kvt_config_check_tier_layout(&q, kvt_config_layout_id(&k), "/d/rank0", s_err, sizeof s_err),
        "kda tier under gdn", "/d/rank0", "gdn", "rule C3");
    REFUSED(kvt_config_check_tier_layout(&k, qid, "dir", s_err, sizeof s_err), "gdn under kda",
            "kda", "rule C3");
    //  The dense layout owns no state: another layout's objects are misses.
    cr_assert_eq(kvt_config_check_tier_layout(&d, qid, "dir", s_err, sizeof s_err), 1);
    cr_assert_eq(
        kvt_config_check_tier_layout(&d, kvt_config_layout_id(&d), "dir", s_err, sizeof s_err), 0);
    //  The state geometry is part of it.
    kvt_config_t q3;
    cr_assert_eq(s_yaml("model: qwen3-next-like\nstate_bytes: 202KiB\n", &q3), 0, "%s", s_err);
    cr_assert_neq(qid, kvt_config_layout_id(&q3));
}
