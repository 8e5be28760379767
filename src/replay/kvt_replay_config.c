/*  kvt_replay_config — see kvt_replay_config.h. */
#include "kvt_replay_config.h"

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

void kvt_replay_from_config(const kvt_config_t *kc, kvt_replay_cfg_t *cfg)
{
    kvt_replay_defaults(cfg);
    cfg->trace = kc->trace[0] ? kc->trace : NULL;
    cfg->limit = kc->limit;
    cfg->driver = kc->driver;
    cfg->seed = kc->seed;
    cfg->log_level = kc->log_level;
    cfg->tp = kc->tp;
    cfg->hbm_pool_bytes = kc->hbm_pool_bytes;
    cfg->cpu_pool_bytes = kc->cpu_pool_bytes;
    cfg->disk_dir = kc->disk_dir[0] ? kc->disk_dir : NULL;
    cfg->disk_pool_bytes = kc->disk_pool_bytes;
    cfg->disk_write_on_evict = kc->disk_write_on_evict;
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
    cfg->max_running = kc->max_running;
    cfg->step_tokens = kc->step_tokens;
    cfg->lookup_rank0 = kc->lookup == KVT_LOOKUP_RANK0;
}
