/*  kvt_config.h — one configuration for the engine side and the ranks.

    Three layers, each overriding the one before it, whatever order they are
    given in: a YAML file (a flat mapping of settings, `cpu_pool: 8GiB`),
    then KVTIER_<SETTING> environment variables (`KVTIER_CPU_POOL=8GiB`),
    then command-line flags (`--cpu-pool 8GiB`). A setting's name is the
    flag's name with underscores; the loader accepts `cpu_pool`, `cpu-pool`
    and `--cpu-pool` alike.

    kvt_config_loader_build validates everything once, before anything
    starts: a value that does not parse or is out of range, an unknown
    setting, a YAML syntax error, a state tier under pipeline parallelism
    (rule C1), a layout that is not a state-owning model's own (C3) — each is
    refused with a message naming the setting, the value and where it came
    from (`FILE:LINE`, the environment variable or the flag). An empty value
    selects the setting's default, whatever a lower layer said. Then the
    derived values (the verified window, the state tier, the namespace of
    C2, ...) are resolved and each is passed once to the log callback.

    Values: sizes are bytes with an optional KiB / MiB / GiB / TiB suffix
    (binary; K, KB, M, MB, ... read the same way), durations an integer with
    a unit (ns, us, ms, s, min, h), booleans true/false, yes/no, on/off, 1/0.
    docs/configuration.md lists every setting with its default and unit.
*/
#ifndef KVT_CONFIG_H_INCLUDED
#define KVT_CONFIG_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvt_actor.h"
#include "kvt_hash.h"

#ifdef __cplusplus
extern "C" {
#endif

//  Model presets: each names its layout and the geometry defaults it gives.
typedef enum {
    KVT_MODEL_DENSE = 0,            //  attention only (the replay's toy geometry)
    KVT_MODEL_QWEN3_NEXT_LIKE = 1,  //  gated delta-net recurrent layers, 3 per attention layer
    KVT_MODEL_KIMI_LINEAR_LIKE = 2, //  delta-attention recurrent layers, 3 per MLA layer
} kvt_model_t;

//  How the cached bytes are laid out; gdn and kda own a recurrent state.
typedef enum {
    KVT_LAYOUT_AUTO = 0,  //  unresolved: the model's own (never left after resolve)
    KVT_LAYOUT_DENSE = 1, //  paged KV only
    KVT_LAYOUT_GDN = 2,   //  paged KV + gated delta-net state images
    KVT_LAYOUT_KDA = 3,   //  paged KV + delta-attention state images
} kvt_layout_t;

//  KV element type (part of the namespace: it changes the stored bytes).
typedef enum {
    KVT_DTYPE_BF16 = 0,
    KVT_DTYPE_FP16 = 1,
    KVT_DTYPE_FP32 = 2,
    KVT_DTYPE_FP8_E4M3 = 3,
    KVT_DTYPE_FP8_E5M2 = 4,
} kvt_dtype_t;

//  Which ranks answer a tier lookup.
typedef enum {
    KVT_LOOKUP_ALL = 0,   //  every rank, the minimum of their answers
    KVT_LOOKUP_RANK0 = 1, //  rank 0 only
} kvt_lookup_mode_t;

//  Which checkpoints a hybrid model takes and how HBM checkpoints are
//  evicted (state_policy; the scheduler's kvt_sched_state_policy_t, same
//  values).
typedef enum {
    KVT_POLICY_KVTIER = 0,      //  grid, prompt ends, decode keeps, branch points; value order
    KVT_POLICY_INTERVAL = 1,    //  grid, prompt ends, decode keeps; LRU
    KVT_POLICY_EVERY_CHUNK = 2, //  every chunk boundary; LRU
    KVT_POLICY_MARCONI = 3,     //  branch points, last decoded chunk; Marconi's utility
} kvt_state_policy_t;

//  A setting that may be left to the configuration to decide.
typedef enum {
    KVT_AUTO = 0, //  unresolved (never left after resolve; pace: the replay resolves it)
    KVT_OFF = 1,  //  off
    KVT_ON = 2,   //  on
} kvt_tristate_t;

#define KVT_CONFIG_PATH_MAX 1024 //  bytes of a path setting, its NUL included
#define KVT_CONFIG_TEXT_MAX 128  //  bytes of a name setting, its NUL included

//  The validated configuration. Sizes in bytes, durations in ns.
typedef struct {
    //  workload and driver
    char trace[KVT_CONFIG_PATH_MAX]; //  Mooncake jsonl trace ("" = the synthetic workload)
    uint32_t limit;                  //  requests to replay (0 = all)
    double time_scale;    //  replay: arrival = trace timestamp x this (> 0, 1 = as traced)
    uint32_t closed_loop; //  replay: requests in flight per instance (0 = open loop)
    kvt_tristate_t pace;  //  replay: a step spends its modelled time on the driver's clock
                          //  (AUTO stays: the replay resolves it against the driver it
                          //  runs, ON under SIM, OFF under LIVE; kvt_replay_paced)
    kvt_driver_t driver;  //  SIM or LIVE
    uint64_t seed;        //  seeds the SIM driver, actors and synthetic workload
    int log_level;        //  0 errors .. 3 debug
    //  parallelism
    uint32_t tp;                //  tensor-parallel ranks
    uint32_t pipeline_parallel; //  pipeline stages (a state tier needs 1, rule C1)
    //  memory and tiers
    uint64_t hbm_pool_bytes;            //  device KV memory per rank
    uint64_t cpu_pool_bytes;            //  CPU tier per rank (0 = no tier)
    char disk_dir[KVT_CONFIG_PATH_MAX]; //  disk tier directory ("" = none)
    char remote[KVT_CONFIG_PATH_MAX];   //  remote tier: the cluster's seed nodes ("" = none)
    uint64_t disk_pool_bytes;           //  disk tier per rank
    bool disk_write_on_evict;           //  write-back on eviction instead of write-through
    bool evict_value;    //  evict_order value: CPU pools and HBM checkpoints by the value rule
    bool mem_overcommit; //  start even past the process's memory limit
    kvt_tristate_t state_tier; //  state images in the tier (resolved: ON / OFF)
    //  model, layout and geometry
    kvt_model_t model;                  //  the preset the geometry defaults come from
    char model_id[KVT_CONFIG_TEXT_MAX]; //  the model's name in the namespace
    kvt_layout_t layout;                //  resolved: the model's own
    kvt_dtype_t dtype;                  //  KV element type
    uint32_t layers;                    //  attention layers (KV planes are per layer)
    uint32_t planes;                    //  KV planes per layer (K, V, ...)
    uint32_t token_bytes;               //  bytes per token per layer per plane per rank
    uint64_t state_bytes;               //  recurrent state per request per rank (0: dense)
    uint32_t block_size;                //  tokens per HBM block
    uint32_t chunk_size;                //  tokens per tier chunk (a multiple of block_size)
    uint32_t checkpoint_interval;       //  tokens between checkpoints (multiple of chunk; 0 none)
    kvt_tristate_t tp_rank_collapse;    //  ranks store one copy (resolved: ON / OFF)
    char speculative[KVT_CONFIG_TEXT_MAX]; //  stable form: "off" or "METHOD:TOKENS"
    uint32_t speculative_tokens;           //  draft tokens per step (0 when off)
    //  scheduler
    uint32_t max_running;            //  requests admitted at once
    uint32_t step_tokens;            //  token budget of one step
    uint32_t min_load_tokens;        //  below this a joint load is recomputed instead
    kvt_state_policy_t state_policy; //  hybrid: checkpoint sources and HBM checkpoint order
    uint32_t grid_share_pct;         //  kvtier policy: the adaptive grid's share of the HBM
                                     //  checkpoint units, percent (0 = the fixed grid)
    kvt_lookup_mode_t lookup;        //  which ranks answer a lookup
    bool lookup_pin;                 //  a lookup pins what it found until its load
    uint64_t lookup_timeout_ns;      //  a lookup not settled by then falls back to the HBM hit
    uint64_t lookup_max_age_ns;      //  a settled lookup older than this is asked again before use
    uint64_t verified_window_ns; //  an image confirmed within it needs no verify hold (0 = derive)
    uint64_t verify_hold_ns;     //  bound of a verify hold, from the first hold
    uint64_t orphan_reclaim_ns;  //  an orphaned load with no verdict this long is reclaimed
    uint64_t load_deadline_ns;   //  a dispatched load no rank settled this long settles failed
    //  timeouts of the data path
    uint64_t agg_timeout_ns;   //  an open aggregator key settles failed after this
    uint64_t lane_deadline_ns; //  a transfer job not terminal by then fails
    uint64_t fence_timeout_ns; //  a fence waiting longer fails its lane
    uint64_t lookup_ttl_ns;    //  lifetime of a pinned lookup's lease
    uint64_t pool_ttl_ns;      //  lifetime of a pool lease not renewed
    //  observability
    char metrics_addr[KVT_CONFIG_TEXT_MAX]; //  Prometheus /metrics at HOST:PORT ("" = off)
    uint64_t metrics_interval_ns;           //  between the endpoint's Stats rounds
    //  authenticated links (tcp://, LIVE)
    char curve_secret_key[KVT_CONFIG_PATH_MAX];  //  this process's certificate ("" = CURVE off)
    char curve_public_keys[KVT_CONFIG_PATH_MAX]; //  directory of the allowed public certificates
    char curve_server_key[KVT_CONFIG_PATH_MAX];  //  the peers' server certificate ("" = own)
    //  derived (filled by resolve)
    uint64_t block_bytes;     //  bytes of one block on a rank: planes x layers x block x token
    uint64_t chunk_bytes;     //  bytes of one chunk on a rank
    uint32_t min_tail_tokens; //  a hit leaves at least this many tokens to compute
    kvt_hash_t ns;            //  the namespace (C2): XXH3-128 of ns_desc
    char ns_desc[512];        //  the stable text the namespace hashes
} kvt_config_t;

//  Receives each derived value once per build / resolve: its setting name,
//  its value as text, and how it was derived.
typedef void(kvt_config_log_fn)(void *arg, const char *key, const char *value, const char *why);

//  Fills *cfg with every default (the dense preset) and resolves it.
void kvt_config_defaults(kvt_config_t *cfg);

//  Checks the settings against each other, resolves what is AUTO and
//  derives the rest (rules C1, C3; the namespace C2); logs each derived
//  value once through log (may be NULL). For a struct filled by hand (an
//  engine that does not use the loader); the loader calls it. Returns 0, or
//  -1 with err naming the settings and their values.
int kvt_config_resolve(kvt_config_t *cfg, kvt_config_log_fn *log, void *log_arg, char *err,
                       size_t errlen);

//  The namespace (rule C2) of cfg's settings: its stable text into
//  cfg->ns_desc ("kvtier/2 model=M layout=L layers=.. planes=.. token_bytes=..
//  block=.. chunk=.. state_bytes=.. dtype=.. tp=T|collapsed pp=.. spec=.."),
//  and its XXH3-128 into cfg->ns. The one place the namespace is described
//  and hashed: kvt_config_resolve derives it with this, and a rank given a
//  hand-filled configuration (kvt_rank_namespace) too. A layout left AUTO is
//  set to the model's own, an empty model_id to the model's name.
void kvt_config_namespace(kvt_config_t *cfg);

//  The id a tier records for the bytes it holds (what a disk tier keeps as
//  its layout_id): XXH3-64 of the layout and one rank's object geometry
//  (block bytes, layers, planes, chunk, state bytes, dtype). Of a resolved
//  configuration.
uint64_t kvt_config_layout_id(const kvt_config_t *cfg);

//  Rule C3 for a tier that recorded recorded_id (what names it in err: a
//  directory): 0 when it holds this configuration's layout; for a
//  state-owning layout any other id is refused (-1, err naming both ids);
//  for the dense layout another id is 1 (its objects are misses, not a
//  refusal).
int kvt_config_check_tier_layout(const kvt_config_t *cfg, uint64_t recorded_id, const char *what,
                                 char *err, size_t errlen);

//  Whether name (`cpu_pool`, `cpu-pool`, `--cpu-pool`, `--cpu-pool=8GiB`) is a setting;
//  *is_bool tells whether it is a boolean (a flag that may stand alone).
bool kvt_config_has_key(const char *name, bool *is_bool);

//  The i-th setting (0 .. kvt_config_key_count () - 1): its name, default
//  as text ("" when it comes from the model preset or is derived) and unit.
size_t kvt_config_key_count(void);
int kvt_config_key_at(size_t i, const char **name, const char **def, const char **unit);

//  The name of a state policy as the setting state_policy spells it
//  ("kvtier", "interval", "every-chunk", "marconi"): the table the setting
//  is parsed with. "?" when out of range.
const char *kvt_config_state_policy_name(kvt_state_policy_t policy);

//  Collects the three layers, then builds one validated configuration.
typedef struct _kvt_config_loader_t kvt_config_loader_t;

//  A loader with no settings given; NULL when out of memory.
kvt_config_loader_t *kvt_config_loader_new(void);

//  NULL-safe; nulls the pointer.
void kvt_config_loader_destroy(kvt_config_loader_t **self_p);

//  The file layer from a YAML file (read with libyaml): a mapping of
//  settings to scalar values, or an empty file. All or nothing: on -1 no
//  setting of the file is kept and err names the file, the line and the
//  setting (or libyaml's problem for a syntax error). At most one file.
int kvt_config_loader_file(kvt_config_loader_t *self, const char *path, char *err, size_t errlen);

//  The same from YAML text in memory; name stands for the file in messages.
int kvt_config_loader_yaml(kvt_config_loader_t *self, const char *text, size_t len,
                           const char *name, char *err, size_t errlen);

//  The environment layer: every KVTIER_<SETTING>=VALUE of envp (NULL: the
//  process's environment). An unknown KVTIER_ variable is refused, naming it.
int kvt_config_loader_env(kvt_config_loader_t *self, char *const *envp, char *err, size_t errlen);

//  The flag layer: one setting from the command line. A name may carry its
//  value (`--tp=4`, `--lookup-pin=false`; value then NULL); otherwise value
//  NULL means "true" (a boolean flag standing alone). A flag given twice:
//  the last wins.
int kvt_config_loader_flag(kvt_config_loader_t *self, const char *name, const char *value,
                           char *err, size_t errlen);

//  Builds *cfg: defaults, the model preset's geometry for every geometry
//  setting no layer gave, then file < environment < flags, each value
//  parsed and range-checked (also those a higher layer overrides), then
//  kvt_config_resolve. Returns 0, or -1 with err (cfg then undefined).
int kvt_config_loader_build(kvt_config_loader_t *self, kvt_config_t *cfg, kvt_config_log_fn *log,
                            void *log_arg, char *err, size_t errlen);

//  Where the setting's value came from in the last build: `FILE:LINE`,
//  `KVTIER_X`, `--x`, `preset M` or `default`; NULL for an unknown name.
const char *kvt_config_loader_origin(const kvt_config_loader_t *self, const char *name);

#ifdef __cplusplus
}
#endif
#endif
