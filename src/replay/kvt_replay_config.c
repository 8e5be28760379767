/*  kvt_replay_config — see kvt_replay_config.h. */
#include "kvt_replay_config.h"

#include <stdio.h>

const char *kvt_replay_model_name(kvt_model_t model)
{
    switch (model) {
    case KVT_MODEL_QWEN3_NEXT_LIKE:
        return "qwen3-next-like";
    case KVT_MODEL_KIMI_LINEAR_LIKE:
        return "kimi-linear-like";
    case KVT_MODEL_DENSE:
    default:
        return "dense";
    }
}

int kvt_replay_from_config(const kvt_config_t *kc, kvt_replay_cfg_t *cfg, char *err, size_t errlen)
{
    kvt_replay_defaults(cfg);
    //  What a replay cannot be: refused, never run as something else.
    if (kc->pipeline_parallel > 1) {
        snprintf(err, errlen,
                 "pipeline_parallel = %u: the replay runs one pipeline stage per rank (1)",
                 kc->pipeline_parallel);
        return -1;
    }
    if (kc->tp_rank_collapse == KVT_ON) {
        snprintf(err, errlen,
                 "tp_rank_collapse = on: the replay's ranks each store their own shard (off)");
        return -1;
    }
    cfg->trace = kc->trace[0] ? kc->trace : NULL;
    cfg->limit = kc->limit;
    cfg->time_scale = kc->time_scale;
    cfg->closed_loop = kc->closed_loop;
    cfg->pace = (uint32_t)kc->pace;
    cfg->driver = kc->driver;
    cfg->seed = kc->seed;
    cfg->log_level = kc->log_level;
    cfg->tp = kc->tp;
    cfg->hbm_pool_bytes = kc->hbm_pool_bytes;
    cfg->cpu_pool_bytes = kc->cpu_pool_bytes;
    cfg->disk_dir = kc->disk_dir[0] ? kc->disk_dir : NULL;
    cfg->disk_pool_bytes = kc->disk_pool_bytes;
    cfg->remote = kc->remote[0] ? kc->remote : NULL;
    cfg->curve_secret_key = kc->curve_secret_key[0] ? kc->curve_secret_key : NULL;
    cfg->curve_public_keys = kc->curve_public_keys[0] ? kc->curve_public_keys : NULL;
    cfg->curve_server_key = kc->curve_server_key[0] ? kc->curve_server_key : NULL;
    cfg->disk_write_on_evict = kc->disk_write_on_evict;
    cfg->evict_value = kc->evict_value;
    cfg->mem_overcommit = kc->mem_overcommit;
    cfg->layers = kc->layers;
    cfg->planes = kc->planes;
    cfg->token_bytes = kc->token_bytes;
    cfg->block_size = kc->block_size;
    cfg->chunk_size = kc->chunk_size;
    cfg->model = kvt_replay_model_name(kc->model);
    cfg->state_bytes = kc->state_bytes;
    //  A hybrid model without an interval of its own checkpoints every chunk.
    cfg->checkpoint_interval =
        kc->state_bytes && !kc->checkpoint_interval ? kc->chunk_size : kc->checkpoint_interval;
    cfg->min_load_tokens = kc->min_load_tokens;
    cfg->state_policy = (uint32_t)kc->state_policy;
    cfg->grid_share_pct = kc->grid_share_pct;
    cfg->orphan_reclaim_us = kc->orphan_reclaim_ns / 1000;
    cfg->load_deadline_us = kc->load_deadline_ns / 1000;
    cfg->lookup_max_age_us = kc->lookup_max_age_ns / 1000;
    cfg->max_running = kc->max_running;
    cfg->step_tokens = kc->step_tokens;
    cfg->no_state_tier = kc->state_bytes && kc->state_tier != KVT_ON;
    cfg->spec_tokens = kc->speculative_tokens;
    //  The namespace hashes the model id, layout, dtype, TP and speculation
    //  (C2); the layout id is what a disk directory records (C3).
    cfg->ns = kc->ns;
    cfg->layout_id = kvt_config_layout_id(kc);
    cfg->lookup_pin = kc->lookup_pin;
    cfg->lookup_timeout_ns = kc->lookup_timeout_ns;
    cfg->lookup_ttl_ns = kc->lookup_ttl_ns;
    cfg->verified_window_ns = kc->verified_window_ns;
    cfg->verify_hold_ns = kc->verify_hold_ns;
    cfg->agg_timeout_ns = kc->agg_timeout_ns;
    cfg->lane_deadline_ns = kc->lane_deadline_ns;
    cfg->fence_timeout_ns = kc->fence_timeout_ns;
    cfg->pool_ttl_ns = kc->pool_ttl_ns;
    cfg->lookup_rank0 = kc->lookup == KVT_LOOKUP_RANK0;
    return 0;
}
