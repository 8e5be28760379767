/*  kvt_config_int.h — what the configuration's files share (private to
    src/runtime): the YAML reader's entry point and the model presets. */
#ifndef KVT_CONFIG_INT_H_INCLUDED
#define KVT_CONFIG_INT_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvtier/kvt_config.h"

#define KVT_CONFIG_NKEYS 55 //  settings in the table (kvt_config.c checks it)

//  The table of settings, by index 0 .. KVT_CONFIG_NKEYS - 1 (kvt_config.c).
//  The setting a name stands for (`cpu_pool`, `cpu-pool`, `--cpu-pool`,
//  `--cpu-pool=VALUE`), -1 if none.
int kvt_config_key_index(const char *name);
//  Its name, with underscores.
const char *kvt_config_key_name(int k);
//  Whether its default comes from the model preset (the geometry).
bool kvt_config_key_from_preset(int k);
//  Whether it is a boolean (a flag that may stand alone).
bool kvt_config_key_is_bool(int k);
//  Parses text into its field of cfg: 0, or -1 with why.
int kvt_config_key_parse(int k, const char *text, kvt_config_t *cfg, char *why, size_t len);
//  Sets its field to its default (the preset of model for the geometry).
void kvt_config_key_default(int k, kvt_model_t model, kvt_config_t *cfg);
//  Every field to its default, the geometry from the preset of model.
void kvt_config_fill_defaults(kvt_config_t *cfg, kvt_model_t model);

//  One `key: value` pair of a YAML mapping; line is 1-based. Returns 0, or
//  -1 with err set (the reader then stops and returns -1).
typedef int(kvt_config_yaml_fn)(void *arg, const char *key, const char *value, unsigned line,
                                char *err, size_t errlen);

//  Reads YAML text with libyaml's event parser: one document holding one
//  flat mapping of scalar keys to scalar values (or nothing at all). A plain
//  `~` / `null` / empty value is passed as "". Returns 0, or -1 with err
//  (`NAME:LINE: ...`) on a syntax error, a value that is not a scalar, more
//  than one document, an alias, or an error of fn.
int kvt_config_yaml_read(const char *text, size_t len, const char *name, kvt_config_yaml_fn *fn,
                         void *arg, char *err, size_t errlen);

//  What a model preset gives the geometry settings no layer set.
typedef struct {
    const char *name;             //  the `model` value
    kvt_layout_t layout;          //  the model's own layout
    uint32_t layers;              //  attention layers
    uint32_t planes;              //  KV planes per layer
    uint32_t token_bytes;         //  bytes per token per layer per plane per rank
    uint64_t state_bytes;         //  recurrent state per request per rank
    uint32_t checkpoint_interval; //  tokens between checkpoints
} kvt_config_preset_t;

//  The preset of a model (never NULL for a valid kvt_model_t).
const kvt_config_preset_t *kvt_config_preset(kvt_model_t model);

//  Name of a layout / dtype / model value.
const char *kvt_config_layout_name(kvt_layout_t layout);
const char *kvt_config_dtype_name(kvt_dtype_t dtype);

//  Where a setting's value came from (`FILE:LINE`, `KVTIER_X`, `--x`,
//  `default`, ...), for messages; NULL when unknown.
typedef const char *(kvt_config_origin_fn)(void *arg, const char *key);

//  Every field against its setting's range and names (a hand-filled struct
//  may hold anything); re-parses the speculative setting into its stable
//  form. Returns 0, or -1 with err naming the setting and its value.
int kvt_config_check_fields(kvt_config_t *cfg, kvt_config_origin_fn *origin, void *origin_arg,
                            char *err, size_t errlen);

//  kvt_config_resolve, its messages naming each setting's origin.
int kvt_config_resolve_from(kvt_config_t *cfg, kvt_config_origin_fn *origin, void *origin_arg,
                            kvt_config_log_fn *log, void *log_arg, char *err, size_t errlen);

#endif
