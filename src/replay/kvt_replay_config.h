/*  kvt_replay_config — a replay's settings from the one validated
    configuration (kvt_config): `kvtier replay` collects --config FILE,
    KVTIER_* and its flags with the configuration loader, builds a
    kvt_config_t (validated once, before any rank starts) and maps it onto
    kvt_replay_cfg_t here. */
#ifndef KVT_REPLAY_CONFIG_H_INCLUDED
#define KVT_REPLAY_CONFIG_H_INCLUDED

#include "replay/kvt_replay.h"
#include "kvtier/kvt_config.h"

//  Fills *cfg (defaults first) from the resolved configuration kc: the
//  workload, driver, tiers, geometry, the model (its preset's name, state
//  bytes and checkpoint interval, the state tier), the namespace and the
//  disk layout id, the scheduler's settings (speculation, lookups, the
//  verify hold) and the data path's timeouts. kc is borrowed: its trace
//  and disk_dir strings must outlive *cfg. Returns 0, or -1 with err naming
//  a setting the replay cannot run (pipeline_parallel > 1,
//  tp_rank_collapse on).
int kvt_replay_from_config(const kvt_config_t *kc, kvt_replay_cfg_t *cfg, char *err, size_t errlen);

//  The `model` value of a preset ("dense", "qwen3-next-like", ...).
const char *kvt_replay_model_name(kvt_model_t model);

#endif
