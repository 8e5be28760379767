/*  kvt_rank — see kvt_rank.h. */
#include "kvt_rank.h"

#include <czmq.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "actors/common/kvt_prefix.h"
#include "actors/worker/kvt_worker.h"
#include "replay/kvt_replay_config.h"
#include "replay/kvt_sim_runner.h"
#include "kvtier/kvt_pool.h"

struct kvt_rank_t {
    const kvt_replay_cfg_t *cfg;  //  the replay's configuration (borrowed)
    uint32_t r;                   //  this rank
    kvt_gpu_t *gpu;               //  its device
    kvt_storage_t *storage;       //  its tier (NULL without a CPU pool)
    kvt_fence_board_t *board;     //  the device events its runner and worker share
    char disk_dir[512];           //  its disk directory
    char disk_name[32];           //  its disk tier's name in logs ("disk.r")
    char runner_name[32];         //  "runner.r"
    char worker_name[32];         //  "worker.r"
    kvt_sim_runner_args_t runner; //  runner args (outlive the system)
    kvt_worker_args_t worker;     //  worker args
    kvt_gpu_stream_t *lanes[3];   //  its worker's lane streams while it is up (fault plans)
};

kvt_hash_t kvt_rank_namespace(const kvt_replay_cfg_t *cfg)
{
    if (!kvt_hash_is_zero(cfg->ns))
        return cfg->ns; //  the configuration's (rule C2)
    //  A configuration filled by hand: the namespace the configuration gives
    //  the same model, geometry and TP width (kvt_config_namespace, the one
    //  format), so it is the one `kvtier replay` keys the same settings with.
    kvt_config_t kc;
    kvt_config_defaults(&kc);
    for (kvt_model_t m = KVT_MODEL_DENSE; m <= KVT_MODEL_KIMI_LINEAR_LIKE; m++)
        if (cfg->model && strcmp(cfg->model, kvt_replay_model_name(m)) == 0)
            kc.model = m;
    kc.layout = KVT_LAYOUT_AUTO;
    kc.model_id[0] = 0;
    kc.layers = cfg->layers;
    kc.planes = cfg->planes;
    kc.token_bytes = cfg->token_bytes;
    kc.block_size = cfg->block_size;
    kc.chunk_size = cfg->chunk_size;
    kc.state_bytes = cfg->state_bytes;
    kc.tp = cfg->tp;
    kvt_config_namespace(&kc);
    return kc.ns;
}

uint64_t kvt_rank_link_id(const kvt_replay_cfg_t *cfg)
{
    kvt_hash_t ns = kvt_rank_namespace(cfg);
    uint64_t words[3] = {ns.hi, ns.lo, cfg->tp};
    uint64_t id = XXH3_64bits(words, sizeof words);
    return id ? id : 1; //  0 means "none"
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
    //  The CPU pool's eviction order (evict_order): LRU, or the value rule
    //  (GDSF, docs/store.md). A chunk's recompute is its chunk_size tokens,
    //  an image's the tokens to the image below it (checkpoint_interval):
    //  per byte an image weighs (interval / chunk) x (chunk bytes / state
    //  bytes) of a chunk.
    sc.pool.evict = cfg->evict_value ? KVT_POOL_EVICT_VALUE : KVT_POOL_EVICT_LRU;
    if (cfg->state_bytes && cfg->checkpoint_interval) {
        sc.pool.value_w_kv = 1.0;
        sc.pool.value_w_state = (double)cfg->checkpoint_interval / cfg->chunk_size *
                                (double)chunk_bytes / (double)cfg->state_bytes;
    }
    sc.pool.ttl_ms = cfg->pool_ttl_ns / 1000000u;
    //  The layout id the disk and remote tiers record: the configuration's,
    //  or one hashed from the geometry.
    char layout[160];
    snprintf(layout, sizeof layout, "block_bytes=%zu layers=%u planes=%u chunk=%u", bb, cfg->layers,
             cfg->planes, cfg->chunk_size);
    uint64_t layout_id =
        cfg->layout_id ? cfg->layout_id : kvt_namespace_id(kvt_namespace_hash(layout));
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
        sc.disk.rank = r;
        sc.disk.world_size = cfg->tp;
        sc.disk.layout_id = layout_id;
        sc.disk.ns_id = kvt_namespace_id(kvt_rank_namespace(cfg));
        //  Under SIM every disk write runs inside the storage call
        //  that queued it: the tier never depends on thread timing.
        sc.disk.io_mode = cfg->driver == KVT_DRIVER_SIM ? KVT_DISK_IO_INLINE : KVT_DISK_IO_THREADS;
        sc.write_policy = cfg->disk_write_on_evict ? KVT_WRITE_ON_EVICT : KVT_WRITE_ALWAYS;
    }
    if (cfg->remote) {
        //  Whose bytes these are, as on disk: a value of another namespace,
        //  rank, TP width or geometry is a counted miss, never a resume.
        sc.remote_enabled = true;
        sc.remote.seeds = cfg->remote;
        sc.remote.rank = r;
        sc.remote.world_size = cfg->tp;
        sc.remote.layout_id = layout_id;
        sc.remote.ns_id = kvt_namespace_id(kvt_rank_namespace(cfg));
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
    //  The scheduler's split of the one HBM budget: KV planes for the
    //  blocks KV and checkpoints share, the slots, and as many checkpoint
    //  units as those blocks could hold.
    kvt_sched_hbm_split_t split;
    if (kvt_replay_hbm_split(cfg, cfg->hbm_pool_bytes, &split, err, errlen) != 0)
        goto fail;
    uint32_t hbm_blocks = split.kv_blocks;
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
    //  A hybrid model: the state slots (one per running request) and the
    //  HBM checkpoint pool (same unit size); the runner writes and checks
    //  state in them (it reads the pools from the device).
    if (cfg->state_bytes) {
        kvt_gpu_state_desc_t sd = {KVT_REPLAY_STATE_SLOTS(cfg), (size_t)cfg->state_bytes, NULL};
        kvt_gpu_state_desc_t cd = {split.ckpt_units, (size_t)cfg->state_bytes, NULL};
        if (kvt_gpu_state_add(rk->gpu, KVT_GPU_STATE_SLOTS, &sd) != 0 ||
            kvt_gpu_state_add(rk->gpu, KVT_GPU_STATE_CKPT, &cd) != 0) {
            snprintf(err, errlen, "rank %u: cannot register the state pools: %s", r,
                     kvt_gpu_last_error());
            goto fail;
        }
    }
    rk->board = kvt_fence_board_new(rk->gpu, 0);
    if (!rk->board) {
        snprintf(err, errlen, "rank %u: out of memory for the fence board", r);
        goto fail;
    }

    kvt_sim_runner_args_t *ra = &rk->runner;
    ra->rank = r;
    ra->gpu = rk->gpu;
    ra->block_size = cfg->block_size;
    ra->planes = cfg->planes;
    ra->layers = cfg->layers;
    ra->engine = "engine";
    ra->worker = rk->worker_name;
    ra->corrupt_resume = r == 0 ? cfg->fault_corrupt_resume : 0;
    ra->corrupt_state = r == 0 ? cfg->fault_corrupt_state : 0;
    ra->fault_stale_slot = r == 0 ? cfg->fault_stale_slot : 0;
    ra->fault_restore_late = r == 0 ? cfg->fault_restore_late : 0;
    ra->fault_swap_slots = r == 0 ? cfg->fault_swap_slots : 0;
    ra->fault_stale_block = r == 0 ? cfg->fault_stale_block : 0;
    ra->board = rk->board;
    ra->chunk_size = cfg->chunk_size;
    kvt_worker_args_t *wa = &rk->worker;
    wa->rank = r;
    wa->gpu = rk->gpu;
    wa->storage = rk->storage;
    wa->ns = kvt_namespace_id(kvt_rank_namespace(cfg));
    wa->block_size = cfg->block_size;
    wa->chunk_size = cfg->chunk_size;
    wa->aggregator = "aggregator";
    wa->board = rk->board;
    wa->lookup_ttl_ns = cfg->lookup_ttl_ns;
    wa->lane_deadline_ns = cfg->lane_deadline_ns;
    wa->fence_timeout_ns = cfg->fence_timeout_ns;
    wa->fault_miss_state = r == 0 ? cfg->fault_miss_state : 0;
    wa->lane_streams = rk->lanes;
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

kvt_gpu_stream_t *kvt_rank_lane_stream(const kvt_rank_t *rk, uint32_t lane)
{
    return rk && lane < 3 ? rk->lanes[lane] : NULL;
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
    kvt_fence_board_destroy(&rk->board);
    kvt_gpu_destroy(&rk->gpu);
    free(rk);
    *rank_p = NULL;
}

// ------------------------------------------------------ ranks as processes

int kvt_rank_endpoint(const char *base, uint32_t index, const char *name, char *out, size_t len)
{
    if (strncmp(base, "ipc://", 6) == 0) {
        //  The socket path's own bound (sun_path) is 108 bytes.
        if (strlen(base) + 1 + strlen(name) > 100)
            return -1;
        int n = snprintf(out, len, "%s/%s", base, name);
        return n > 0 && (size_t)n < len ? 0 : -1;
    }
    if (strncmp(base, "tcp://", 6) == 0) {
        const char *colon = strrchr(base + 6, ':');
        if (!colon || colon == base + 6)
            return -1;
        char *end = NULL;
        errno = 0;
        unsigned long port = strtoul(colon + 1, &end, 10);
        if (errno || !end || *end || colon[1] < '0' || colon[1] > '9' || port == 0 ||
            port + index > 65535)
            return -1;
        int n = snprintf(out, len, "%.*s:%lu", (int)(colon - base), base, port + index);
        return n > 0 && (size_t)n < len ? 0 : -1;
    }
    return -1;
}

void kvt_rank_describe_status(int status, char *out, size_t len)
{
    if (WIFEXITED(status))
        snprintf(out, len, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(out, len, "was killed by signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else
        snprintf(out, len, "ended with wait status 0x%x", (unsigned)status);
}

int kvt_rank_spawn(const char *exe, const kvt_replay_cfg_t *cfg, uint32_t r, const char *base,
                   char *err, size_t errlen)
{
    //  Every value as a plain decimal: what `kvtier rank` reads back.
    char v[40][448];
    char *argv[80];
    int n = 0, k = 0;
#define S_ARG(s)   (argv[n++] = (char *)(s))
#define S_VAL(...) (snprintf(v[k], sizeof v[k], __VA_ARGS__), argv[n++] = v[k++])
    S_ARG(exe);
    S_ARG("rank");
    S_ARG("--rank");
    S_VAL("%u", r);
    S_ARG("--world");
    S_VAL("%u", cfg->tp);
    S_ARG("--engine");
    S_VAL("%s", base);
    S_ARG("--engine-pid");
    S_VAL("%d", (int)getpid());
    S_ARG("--seed");
    S_VAL("%llu", (unsigned long long)cfg->seed);
    S_ARG("--log-level");
    S_VAL("%d", cfg->log_level);
    S_ARG("--hbm-pool");
    S_VAL("%llu", (unsigned long long)cfg->hbm_pool_bytes);
    S_ARG("--cpu-pool");
    S_VAL("%llu", (unsigned long long)cfg->cpu_pool_bytes);
    S_ARG("--layers");
    S_VAL("%u", cfg->layers);
    S_ARG("--planes");
    S_VAL("%u", cfg->planes);
    S_ARG("--token-bytes");
    S_VAL("%u", cfg->token_bytes);
    S_ARG("--block-size");
    S_VAL("%u", cfg->block_size);
    S_ARG("--chunk-size");
    S_VAL("%u", cfg->chunk_size);
    if (cfg->disk_dir) {
        S_ARG("--disk-dir");
        S_VAL("%s", cfg->disk_dir);
        S_ARG("--disk-pool");
        S_VAL("%llu", (unsigned long long)cfg->disk_pool_bytes);
        S_ARG("--disk-write");
        S_ARG(cfg->disk_write_on_evict ? "evict" : "always");
    }
    if (cfg->remote) {
        S_ARG("--remote");
        S_VAL("%s", cfg->remote);
    }
    const char *curve_flags[] = {"--curve-secret-key", "--curve-public-keys", "--curve-server-key"};
    const char *curve_vals[] = {cfg->curve_secret_key, cfg->curve_public_keys,
                                cfg->curve_server_key};
    for (int i = 0; i < 3; i++)
        if (curve_vals[i]) {
            S_ARG(curve_flags[i]);
            S_VAL("%s", curve_vals[i]);
        }
    //  A hybrid rank's state lane: its unit and the pools it sizes (one
    //  slot per running request, its HBM checkpoints).
    //  The model first: the configuration checks the state bytes against
    //  its layout, and the checkpoint interval against the chunk size.
    if (cfg->model) {
        S_ARG("--model");
        S_VAL("%s", cfg->model);
    }
    if (cfg->state_bytes) {
        S_ARG("--state-bytes");
        S_VAL("%llu", (unsigned long long)cfg->state_bytes);
        S_ARG("--max-running");
        S_VAL("%u", cfg->max_running);
        S_ARG("--checkpoint-interval");
        S_VAL("%u", cfg->checkpoint_interval);
    }
    if (cfg->evict_value) {
        S_ARG("--evict-order");
        S_ARG("value");
    }
    if (!kvt_hash_is_zero(cfg->ns)) {
        S_ARG("--namespace");
        S_VAL("%016llx%016llx", (unsigned long long)cfg->ns.hi, (unsigned long long)cfg->ns.lo);
    }
    if (cfg->layout_id) {
        S_ARG("--layout-id");
        S_VAL("%016llx", (unsigned long long)cfg->layout_id);
    }
    const char *tname[] = {"--lookup-ttl", "--lane-deadline", "--fence-timeout", "--pool-ttl"};
    const uint64_t tval[] = {cfg->lookup_ttl_ns, cfg->lane_deadline_ns, cfg->fence_timeout_ns,
                             cfg->pool_ttl_ns};
    for (int t = 0; t < 4; t++)
        if (tval[t]) {
            S_ARG(tname[t]);
            S_VAL("%lluns", (unsigned long long)tval[t]);
        }
    if (cfg->metrics)
        S_ARG("--with-metrics");
    if (r == 0 && cfg->fault_corrupt_resume) {
        S_ARG("--fault");
        S_VAL("corrupt-resume=%u", cfg->fault_corrupt_resume);
    }
    argv[n] = NULL;
#undef S_ARG
#undef S_VAL
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "rank %u: cannot start a process: %s", r, strerror(errno));
        return -1;
    }
    if (pid == 0) {
        //  Only async-signal-safe calls until exec (the parent has threads).
        //  Until the rank installs its own (kvt_rank_process_run), the
        //  parent's death kills it outright.
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(KVT_RANK_EXIT_NO_ENGINE);
        execv(exe, argv);
        _exit(127);
    }
    return (int)pid;
}

//  SIGUSR2: the parent (engine) died. Lock-free atomic: the handler may run
//  on any thread (a libzmq or czmq one), and the main loop reads it.
static atomic_int s_parent_died;

static void s_on_parent_death(int sig)
{
    (void)sig;
    atomic_store(&s_parent_died, 1);
}

static uint64_t s_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

//  A connection to the engine's inbox that never carries a message, under
//  a ZeroMQ socket monitor: CONNECTED once the engine's end is up,
//  DISCONNECTED when it closes (the engine stopped or its process died;
//  the kernel closes the socket either way).
typedef struct {
    zsock_t *push;  //  connected to the engine's inbox, never sent on
    zsock_t *mon;   //  the monitor's events
    bool connected; //  the connection came up
    bool lost;      //  ... and went down again
} s_watch_t;

static int s_watch_open(s_watch_t *w, kvt_system_t *sys, const char *ep, uint32_t rank)
{
    memset(w, 0, sizeof *w);
    char mep[80];
    snprintf(mep, sizeof mep, "inproc://kvt-rank-watch-%u-%d", rank, (int)getpid());
    w->push = zsock_new(ZMQ_PUSH);
    w->mon = zsock_new(ZMQ_PAIR);
    if (!w->push || !w->mon)
        return -1;
    zsock_set_linger(w->push, 0);
    kvt_system_secure_client(sys, w->push, ep);
    if (zmq_socket_monitor(zsock_resolve(w->push), mep,
                           ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED) != 0)
        return -1;
    if (zsock_connect(w->mon, "%s", mep) != 0 || zsock_connect(w->push, "%s", ep) != 0)
        return -1;
    return 0;
}

static void s_watch_poll(s_watch_t *w)
{
    void *mon = zsock_resolve(w->mon);
    while (true) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, mon, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            return;
        }
        uint16_t ev = 0;
        if (zmq_msg_size(&m) >= sizeof ev)
            memcpy(&ev, zmq_msg_data(&m), sizeof ev);
        bool more = zmq_msg_more(&m);
        zmq_msg_close(&m);
        while (more) { //  the event's address frame
            zmq_msg_init(&m);
            more = zmq_msg_recv(&m, mon, 0) >= 0 && zmq_msg_more(&m);
            zmq_msg_close(&m);
        }
        if (ev == ZMQ_EVENT_CONNECTED)
            w->connected = true;
        else if (ev == ZMQ_EVENT_DISCONNECTED && w->connected)
            w->lost = true;
    }
}

static void s_watch_close(s_watch_t *w)
{
    if (w->push)
        zmq_socket_monitor(zsock_resolve(w->push), NULL, 0);
    zsock_destroy(&w->mon);
    zsock_destroy(&w->push);
}

//  Runtime errors of a local actor after the stop: 0, or -1 naming them.
static int s_actor_errors(kvt_system_t *sys, const char *name, char *err, size_t errlen)
{
    kvt_actor_stats_t st;
    if (kvt_system_actor_stats(sys, kvt_system_lookup(sys, name), &st) != 0)
        return 0;
    uint64_t n = st.send_errors + st.decode_errors + st.unhandled + st.handler_errors;
    if (n == 0)
        return 0;
    snprintf(err, errlen,
             "%s: %llu runtime errors (send %llu, decode %llu, unhandled %llu, handler %llu)", name,
             (unsigned long long)n, (unsigned long long)st.send_errors,
             (unsigned long long)st.decode_errors, (unsigned long long)st.unhandled,
             (unsigned long long)st.handler_errors);
    return -1;
}

int kvt_rank_process_run(const kvt_rank_proc_cfg_t *pc, char *err, size_t errlen)
{
    const kvt_replay_cfg_t *cfg = &pc->cfg;
    if (cfg->driver != KVT_DRIVER_LIVE) {
        snprintf(err, errlen, "driver: a rank process runs the live driver");
        return KVT_RANK_EXIT_SETUP;
    }
    if (kvt_replay_validate(cfg, err, errlen) != 0)
        return KVT_RANK_EXIT_SETUP;
    if (pc->rank >= cfg->tp) {
        snprintf(err, errlen, "rank: %u is not below the world size %u", pc->rank, cfg->tp);
        return KVT_RANK_EXIT_SETUP;
    }
    if (pc->engine_pid > 0) {
        //  The parent's death arrives as SIGUSR2, told apart from the
        //  SIGTERM that ends a run: when the thread that forked this
        //  process dies first, getppid() still names its process for a
        //  moment, so the signal itself must say it.
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = s_on_parent_death;
        sa.sa_flags = SA_RESTART;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGUSR2, &sa, NULL);
        prctl(PR_SET_PDEATHSIG, SIGUSR2);
        if (getppid() != pc->engine_pid) {
            snprintf(err, errlen, "engine-pid: process %d is not this process's parent (gone?)",
                     pc->engine_pid);
            return KVT_RANK_EXIT_NO_ENGINE;
        }
    }
    char ep[2 * KVT_MSG_MAX_RANKS + 4][128];
    static const char *fixed[] = {"engine", "scheduler", "aggregator"};
    char runner[32], worker[32];
    uint32_t nactors = 3 + 2 * cfg->tp + (pc->metrics ? 1 : 0);
    for (uint32_t i = 0; i < nactors; i++) {
        const char *name = i == 3 + 2 * cfg->tp ? "metrics" : fixed[i < 3 ? i : 0];
        if (i >= 3 && i < 3 + 2 * cfg->tp) {
            kvt_rank_names((i - 3) / 2, runner, worker, sizeof runner);
            name = (i - 3) % 2 ? worker : runner;
        }
        if (kvt_rank_endpoint(pc->engine, i, name, ep[i], sizeof ep[i]) != 0) {
            snprintf(err, errlen,
                     "engine: '%s' is not ipc://DIR (DIR under 80 bytes) or tcp://HOST:PORT with "
                     "room for %u ports",
                     pc->engine, nactors);
            return KVT_RANK_EXIT_SETUP;
        }
    }
    if (cfg->disk_dir && mkdir(cfg->disk_dir, 0700) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "disk-dir: cannot create %s: %s", cfg->disk_dir, strerror(errno));
        return KVT_RANK_EXIT_SETUP;
    }
    kvt_system_opts_t so;
    memset(&so, 0, sizeof so);
    so.driver = KVT_DRIVER_LIVE;
    so.seed = cfg->seed;
    so.name = "rank";
    so.log_level = cfg->log_level;
    so.link_id = kvt_rank_link_id(cfg);
    kvt_system_t *sys = kvt_system_new(&so);
    kvt_rank_t *rk = NULL;
    s_watch_t watch;
    memset(&watch, 0, sizeof watch);
    int status = KVT_RANK_EXIT_SETUP;
    if (!sys) {
        snprintf(err, errlen, "cannot create the actor system");
        goto done;
    }
    if (cfg->curve_secret_key) {
        kvt_curve_opts_t co = {cfg->curve_secret_key, cfg->curve_public_keys,
                               cfg->curve_server_key};
        if (kvt_system_set_curve(sys, &co, err, errlen) != 0)
            goto done;
    }
    bool added = true;
    for (uint32_t i = 0; added && i < 3; i++)
        added = kvt_system_add_remote(sys, fixed[i], ep[i]) != KVT_AID_NONE;
    for (uint32_t q = 0; added && q < cfg->tp; q++) {
        uint32_t ir = KVT_RANK_TOPO_RUNNER(q), iw = KVT_RANK_TOPO_WORKER(q);
        if (q == pc->rank) {
            rk = kvt_rank_new(cfg, q, sys, err, errlen);
            if (!rk)
                goto done;
            added = kvt_rank_add_actors(rk, sys, ep[ir], ep[iw]) == 0;
        } else {
            kvt_rank_names(q, runner, worker, sizeof runner);
            added = kvt_system_add_remote(sys, runner, ep[ir]) != KVT_AID_NONE &&
                    kvt_system_add_remote(sys, worker, ep[iw]) != KVT_AID_NONE;
        }
    }
    if (added && pc->metrics) //  last, as the engine adds it
        added = kvt_system_add_remote(sys, "metrics", ep[3 + 2 * cfg->tp]) != KVT_AID_NONE;
    if (!added) {
        snprintf(err, errlen, "cannot build the actor topology (endpoint in use?)");
        goto done;
    }
    if (s_watch_open(&watch, sys, ep[0], pc->rank) != 0) {
        snprintf(err, errlen, "cannot watch the engine at %s: %s", ep[0],
                 zmq_strerror(zmq_errno()));
        goto done;
    }
    if (kvt_system_start(sys) != 0) {
        snprintf(err, errlen, "an actor failed to start (see the log)");
        goto done;
    }
    uint32_t poll_ms = pc->poll_ms ? pc->poll_ms : 50;
    uint32_t connect_ms = pc->connect_timeout_ms ? pc->connect_timeout_ms : 10000;
    uint64_t t0 = s_mono_ms();
    status = KVT_RANK_EXIT_OK;
    while (true) {
        int rc = kvt_system_run(sys, (uint64_t)poll_ms * 1000000u, 0);
        s_watch_poll(&watch);
        //  The engine's loss first: it must not read as the end of the run.
        if (pc->engine_pid > 0 && (atomic_load(&s_parent_died) || getppid() != pc->engine_pid)) {
            snprintf(err, errlen, "the engine process %d is gone", pc->engine_pid);
            status = KVT_RANK_EXIT_NO_ENGINE;
            break;
        }
        if (watch.lost) {
            snprintf(err, errlen, "the engine closed its connection (%s)", ep[0]);
            status = KVT_RANK_EXIT_NO_ENGINE;
            break;
        }
        if (rc != KVT_RUN_TIME_LIMIT)
            break; //  SIGTERM / SIGINT: the end of the run
        if (!watch.connected && s_mono_ms() - t0 > connect_ms) {
            snprintf(err, errlen, "could not reach the engine at %s within %u ms", ep[0],
                     connect_ms);
            status = KVT_RANK_EXIT_NO_ENGINE;
            break;
        }
    }
    kvt_system_stop(sys);
    //  Its inboxes' socket files go with it (ZeroMQ leaves them behind when
    //  the process ends before its I/O thread closed the listener).
    for (uint32_t i = KVT_RANK_TOPO_RUNNER(pc->rank); i <= KVT_RANK_TOPO_WORKER(pc->rank); i++)
        if (strncmp(ep[i], "ipc://", 6) == 0)
            unlink(ep[i] + 6);
    if (status == KVT_RANK_EXIT_OK) {
        kvt_rank_names(pc->rank, runner, worker, sizeof runner);
        if (kvt_rank_check_quiescent(rk, err, errlen) != 0 ||
            s_actor_errors(sys, runner, err, errlen) != 0 ||
            s_actor_errors(sys, worker, err, errlen) != 0)
            status = KVT_RANK_EXIT_UNCLEAN;
    }
done:
    //  A start-up the engine's death interrupted is the engine's loss.
    if (status == KVT_RANK_EXIT_SETUP && pc->engine_pid > 0 && atomic_load(&s_parent_died)) {
        snprintf(err, errlen, "the engine process %d is gone (while this rank was starting)",
                 pc->engine_pid);
        status = KVT_RANK_EXIT_NO_ENGINE;
    }
    s_watch_close(&watch);
    kvt_system_destroy(&sys);
    kvt_rank_destroy(&rk);
    return status;
}
