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
//  bytes and checkpoint interval) and the scheduler's settings. kc is
//  borrowed: its trace and disk_dir strings must outlive *cfg.
void kvt_replay_from_config(const kvt_config_t *kc, kvt_replay_cfg_t *cfg);

//  The `model` value of a preset ("dense", "qwen3-next-like", ...).
const char *kvt_replay_model_name(kvt_model_t model);

#endif
