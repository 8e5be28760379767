/*  kvt_rank — see kvt_rank.h. */
#include "kvt_rank.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/common/kvt_prefix.h"
#include "actors/worker/kvt_worker.h"
#include "replay/kvt_sim_runner.h"
#include "kvtier/kvt_pool.h"

struct kvt_rank_t {
    const kvt_replay_cfg_t *cfg;  //  the replay's configuration (borrowed)
    uint32_t r;                   //  this rank
    kvt_gpu_t *gpu;               //  its device
    kvt_storage_t *storage;       //  its tier (NULL without a CPU pool)
    char disk_dir[512];           //  its disk directory
    char disk_name[32];           //  its disk tier's name in logs ("disk.r")
    char runner_name[32];         //  "runner.r"
    char worker_name[32];         //  "worker.r"
    kvt_sim_runner_args_t runner; //  runner args (outlive the system)
    kvt_worker_args_t worker;     //  worker args
};

kvt_hash_t kvt_rank_namespace(const kvt_replay_cfg_t *cfg)
{
    char nsdesc[256];
    snprintf(nsdesc, sizeof nsdesc,
             "kvtier/1 model=replay layers=%u planes=%u token_bytes=%u block=%u chunk=%u tp=%u "
             "dtype=oracle",
             cfg->layers, cfg->planes, cfg->token_bytes, cfg->block_size, cfg->chunk_size, cfg->tp);
    return kvt_namespace_hash(nsdesc);
}

void kvt_rank_names(uint32_t r, char *runner, char *worker, size_t len)
{
    snprintf(runner, len, "runner.%u", r);
    snprintf(worker, len, "worker.%u", r);
}

//  Device and store log lines follow the replay's log level.
static void s_log(void *arg, int level, const char *line)
{
    if (level <= *(const int *)arg)
        fprintf(stderr, "%s\n", line);
}

static uint64_t s_clock(void *arg)
{
    return kvt_system_now((kvt_system_t *)arg);
}

static size_t s_block_bytes(const kvt_replay_cfg_t *c)
{
    return (size_t)c->planes * c->layers * c->block_size * c->token_bytes;
}

//  The rank's tier: a CPU pool over its own arena, registered with the
//  rank's device, and the disk tier below it when the run has one.
static int s_storage(kvt_rank_t *rk, kvt_system_t *sys, char *err, size_t errlen)
{
    const kvt_replay_cfg_t *cfg = rk->cfg;
    uint32_t r = rk->r;
    size_t bb = s_block_bytes(cfg);
    size_t chunk_bytes = bb * (cfg->chunk_size / cfg->block_size);
    kvt_storage_config_t sc;
    kvt_storage_config_defaults(&sc);
    //  The pool maps its own arena (committed only as it fills) and
    //  registers it with the rank's device region by region, so a
    //  device backend pins the memory it already has instead of a
    //  second buffer; placed on the device's NUMA node when the
    //  device has one.
    sc.pool.base = NULL;
    sc.pool.register_fn = kvt_gpu_host_register_fn;
    sc.pool.unregister_fn = kvt_gpu_host_unregister_fn;
    sc.pool.register_arg = rk->gpu;
    char pci[64];
    if (kvt_gpu_pci_bus_id(rk->gpu, pci, sizeof pci) == 0) {
        int node = kvt_numa_node_of_pci("/sys", pci);
        if (node >= 0)
            sc.pool.numa_bind = 1 + node;
    }
    sc.pool.capacity_bytes = cfg->cpu_pool_bytes;
    sc.pool.clock = s_clock;
    sc.pool.clock_arg = sys;
    sc.pool.log = s_log;
    sc.pool.log_arg = (void *)&cfg->log_level;
    sc.pool.max_objects = (uint32_t)(cfg->cpu_pool_bytes / chunk_bytes) + 64;
    if (cfg->disk_dir) {
        snprintf(rk->disk_dir, sizeof rk->disk_dir, "%s/rank%u", cfg->disk_dir, r);
        sc.disk_enabled = true;
        sc.disk.dir = rk->disk_dir;
        snprintf(rk->disk_name, sizeof rk->disk_name, "disk.%u", r);
        sc.disk.name = rk->disk_name;
        sc.disk.capacity_bytes = cfg->disk_pool_bytes;
        sc.disk.clock = s_clock;
        sc.disk.clock_arg = sys;
        sc.disk.log = s_log;
        sc.disk.log_arg = (void *)&cfg->log_level;
        sc.disk.max_objects = (uint32_t)(cfg->disk_pool_bytes / chunk_bytes) + 64;
        //  Whose bytes these are: a file of another rank, TP width
        //  or geometry is a counted miss, never a resume.
        char layout[160];
        snprintf(layout, sizeof layout, "block_bytes=%zu layers=%u planes=%u chunk=%u", bb,
                 cfg->layers, cfg->planes, cfg->chunk_size);
        sc.disk.rank = r;
        sc.disk.world_size = cfg->tp;
        sc.disk.layout_id = kvt_namespace_id(kvt_namespace_hash(layout));
        //  Under SIM every disk write runs inside the storage call
        //  that queued it: the tier never depends on thread timing.
        sc.disk.io_mode = cfg->driver == KVT_DRIVER_SIM ? KVT_DISK_IO_INLINE : KVT_DISK_IO_THREADS;
        sc.write_policy = cfg->disk_write_on_evict ? KVT_WRITE_ON_EVICT : KVT_WRITE_ALWAYS;
    }
    rk->storage = kvt_storage_new(&sc, err, errlen);
    if (!rk->storage)
        return -1;
    //  Every region registered before the first step: what the pool
    //  can serve never depends on the registration thread's timing.
    kvt_pool_t *pool = kvt_storage_pool(rk->storage);
    uint32_t nreg = kvt_pool_regions_wait(pool, UINT32_MAX);
    kvt_pool_stats_t pst;
    kvt_pool_stats(pool, &pst);
    if (nreg < pst.regions) {
        snprintf(err, errlen,
                 "rank %u: the device registered %u of the CPU pool's %llu regions: %s", r, nreg,
                 (unsigned long long)pst.regions, kvt_gpu_last_error());
        return -1;
    }
    return 0;
}

kvt_rank_t *kvt_rank_new(const kvt_replay_cfg_t *cfg, uint32_t r, kvt_system_t *sys, char *err,
                         size_t errlen)
{
    kvt_rank_t *rk = calloc(1, sizeof *rk);
    if (!rk) {
        snprintf(err, errlen, "rank %u: out of memory", r);
        return NULL;
    }
    rk->cfg = cfg;
    rk->r = r;
    kvt_rank_names(r, rk->runner_name, rk->worker_name, sizeof rk->runner_name);
    kvt_gpu_opts_t go;
    memset(&go, 0, sizeof go);
    go.backend = KVT_GPU_BACKEND_HOST;
    go.host_mode = cfg->driver == KVT_DRIVER_SIM ? KVT_GPU_HOST_SIM : KVT_GPU_HOST_LIVE;
    go.now = s_clock;
    go.now_arg = sys;
    go.sim_bandwidth_Bps = cfg->sim_bw_Bps;
    go.sim_latency_ns = cfg->sim_lat_ns;
    go.log = s_log;
    go.log_arg = (void *)&cfg->log_level;
    rk->gpu = kvt_gpu_new(&go);
    if (!rk->gpu) {
        snprintf(err, errlen, "rank %u: cannot open the device: %s", r, kvt_gpu_last_error());
        goto fail;
    }
    uint32_t hbm_blocks = (uint32_t)(cfg->hbm_pool_bytes / s_block_bytes(cfg));
    for (uint32_t p = 0; p < cfg->planes; p++) {
        kvt_gpu_plane_desc_t pd;
        memset(&pd, 0, sizeof pd);
        pd.name = p == 0 ? "K" : p == 1 ? "V" : "aux";
        pd.layers = cfg->layers;
        pd.num_blocks = hbm_blocks;
        pd.block_bytes = (size_t)cfg->block_size * cfg->token_bytes;
        if (kvt_gpu_plane_add(rk->gpu, &pd) < 0) {
            snprintf(err, errlen, "rank %u: cannot register plane %u: %s", r, p,
                     kvt_gpu_last_error());
            goto fail;
        }
        rk->runner.plane_block_bytes[p] = pd.block_bytes;
    }
    if (cfg->cpu_pool_bytes && s_storage(rk, sys, err, errlen) != 0)
        goto fail;

    kvt_sim_runner_args_t *ra = &rk->runner;
    ra->rank = r;
    ra->gpu = rk->gpu;
    ra->block_size = cfg->block_size;
    ra->planes = cfg->planes;
    ra->layers = cfg->layers;
    ra->engine = "engine";
    ra->worker = rk->worker_name;
    ra->corrupt_resume = r == 0 ? cfg->fault_corrupt_resume : 0;
    kvt_worker_args_t *wa = &rk->worker;
    wa->rank = r;
    wa->gpu = rk->gpu;
    wa->storage = rk->storage;
    wa->ns = kvt_namespace_id(kvt_rank_namespace(cfg));
    wa->block_size = cfg->block_size;
    wa->chunk_size = cfg->chunk_size;
    wa->aggregator = "aggregator";
    return rk;
fail:
    kvt_rank_destroy(&rk);
    return NULL;
}

int kvt_rank_add_actors(kvt_rank_t *rk, kvt_system_t *sys, const char *runner_ep,
                        const char *worker_ep)
{
    if (kvt_system_add(sys, rk->runner_name, &kvt_sim_runner_class, &rk->runner, runner_ep) ==
        KVT_AID_NONE)
        return -1;
    if (kvt_system_add(sys, rk->worker_name, &kvt_worker_class, &rk->worker, worker_ep) ==
        KVT_AID_NONE)
        return -1;
    return 0;
}

int kvt_rank_check_quiescent(const kvt_rank_t *rk, char *problem, size_t len)
{
    if (!rk->storage)
        return 0;
    kvt_pool_stats_t ps;
    kvt_pool_stats(kvt_storage_pool(rk->storage), &ps);
    if (ps.leases_active || ps.pinned_bytes || ps.writing_bytes || ps.objects_writing) {
        snprintf(problem, len,
                 "rank %u pool: %llu leases, %llu pinned bytes, %llu bytes being written", rk->r,
                 (unsigned long long)ps.leases_active, (unsigned long long)ps.pinned_bytes,
                 (unsigned long long)ps.writing_bytes);
        return -1;
    }
    return 0;
}

kvt_gpu_t *kvt_rank_gpu(const kvt_rank_t *rk)
{
    return rk->gpu;
}

kvt_storage_t *kvt_rank_storage(const kvt_rank_t *rk)
{
    return rk->storage;
}

void kvt_rank_destroy(kvt_rank_t **rank_p)
{
    kvt_rank_t *rk = *rank_p;
    if (!rk)
        return;
    kvt_storage_destroy(&rk->storage);
    kvt_gpu_destroy(&rk->gpu);
    free(rk);
    *rank_p = NULL;
}
