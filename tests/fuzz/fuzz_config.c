/*  fuzz_config.c — libFuzzer target for the YAML configuration
    (src/runtime/kvt_config_yaml.c through the loader, kvt_config_loader.c).

    Properties checked on every input:
    * the reader and the loader either accept the text or refuse it with a
      message naming the file ("fuzz.yaml:..."), never both or neither;
    * no accepted text holds a scalar with a NUL byte (libyaml's own event
      stream, read here independently, says which scalars do): a key or
      value cut at a NUL would read as another setting;
    * every key passed on is 1..127 bytes and every value a terminated string;
    * a configuration the loader builds passes kvt_config_check_fields.

    Build: cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DKVTIER_FUZZ=ON
           cmake --build build-fuzz --target fuzz_config
    Run:   ./build-fuzz/fuzz_config -max_len=2048 -dict=tests/fuzz/config.dict corpus-tmp \
               tests/corpus/config
*/
#include <stdbool.h>
#include <string.h>
#include <yaml.h>

#include "fuzz/kvt_fuzz.h"
#include "kvtier/kvt_config.h"
#include "runtime/kvt_config_int.h"

//  Whether libyaml's events for text hold a scalar with a NUL byte.
static bool s_config_has_nul_scalar(const uint8_t *data, size_t size)
{
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p))
        return false;
    yaml_parser_set_input_string(&p, data, size);
    bool nul = false, done = false;
    while (!done && !nul) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&p, &ev))
            break;
        if (ev.type == YAML_SCALAR_EVENT &&
            strlen((const char *)ev.data.scalar.value) != ev.data.scalar.length)
            nul = true;
        done = ev.type == YAML_STREAM_END_EVENT;
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&p);
    return nul;
}

static int s_config_entry(void *arg, const char *key, const char *value, unsigned line, char *err,
                          size_t errlen)
{
    size_t kl = strlen(key);
    if (kl == 0 || kl > 127)
        KVT_FUZZ_DIE("config: a key of %zu bytes passed on", kl);
    (void)strlen(value);
    if (line == 0)
        KVT_FUZZ_DIE("config: line 0");
    (*(unsigned *)arg)++;
    return 0;
}

static void s_config_check_err(int rc, const char *err, const char *what)
{
    if (rc != 0 && rc != -1)
        KVT_FUZZ_DIE("config: %s returned %d", what, rc);
    if (rc == -1 && strncmp(err, "fuzz.yaml", 9) != 0 && strstr(err, "fuzz.yaml") == NULL &&
        strcmp(what, "build") != 0)
        KVT_FUZZ_DIE("config: %s refused without naming the file: '%s'", what, err);
    if (rc == -1 && !err[0])
        KVT_FUZZ_DIE("config: %s refused without a reason", what);
}

int kvt_fuzz_config(const uint8_t *data, size_t size)
{
    char err[1024] = "";
    unsigned entries = 0;
    int rc = kvt_config_yaml_read((const char *)data, size, "fuzz.yaml", s_config_entry, &entries,
                                  err, sizeof err);
    s_config_check_err(rc, err, "yaml_read");
    if (rc == 0 && s_config_has_nul_scalar(data, size))
        KVT_FUZZ_DIE("config: accepted a text whose scalar holds a NUL byte");

    kvt_config_loader_t *ld = kvt_config_loader_new();
    if (!ld)
        return 0;
    err[0] = 0;
    int lrc = kvt_config_loader_yaml(ld, (const char *)data, size, "fuzz.yaml", err, sizeof err);
    s_config_check_err(lrc, err, "loader_yaml");
    if (lrc == 0) {
        kvt_config_t cfg;
        err[0] = 0;
        int brc = kvt_config_loader_build(ld, &cfg, NULL, NULL, err, sizeof err);
        s_config_check_err(brc, err, "build");
        if (brc == 0) {
            char why[1024] = "";
            if (kvt_config_check_fields(&cfg, NULL, NULL, why, sizeof why) != 0)
                KVT_FUZZ_DIE("config: a built configuration fails its own check: %s", why);
        }
    }
    kvt_config_loader_destroy(&ld);
    return 0;
}

KVT_FUZZ_ENTRY(kvt_fuzz_config)
