/*  kvt_rank — one rank of a replay: its device (host backend, one plane per
    KV plane), its tier (CPU pool, optionally a disk tier below it) and its
    two actors, runner.r and worker.r, registered in a kvt_system.

    The replay builds one per rank when ranks run as threads of its process;
    `kvtier rank` builds exactly one in a process of its own, whose system
    names the engine's actors (and the other ranks') as remote. Either way
    the rank is built from the replay's configuration, so both processes
    agree on the geometry, the namespace and the topology.

    Topology (the same in every process that shares it): engine, scheduler,
    aggregator, then runner.0, worker.0, runner.1, worker.1, ... */
#ifndef KVT_RANK_H_INCLUDED
#define KVT_RANK_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "replay/kvt_replay.h"
#include "kvtier/kvt_actor.h"
#include "kvtier/kvt_gpu.h"
#include "kvtier/kvt_hash.h"
#include "kvtier/kvt_storage.h"

typedef struct kvt_rank_t kvt_rank_t;

//  The namespace every rank of a run keys its tier with: the configuration's
//  (cfg->ns); for a hand-filled cfg with none, the one kvt_config_namespace
//  gives its model, geometry and TP width, which is what `kvtier replay`
//  derives from the same settings (the same configuration gives the same
//  namespace in every process).
kvt_hash_t kvt_rank_namespace(const kvt_replay_cfg_t *cfg);

//  The link id of a run's actor systems (kvt_system_opts_t.link_id): its
//  namespace and its world size, so a process of another deployment, or
//  one started with another --world, has its frames dropped and counted.
uint64_t kvt_rank_link_id(const kvt_replay_cfg_t *cfg);

//  Actor names of rank r: "runner.r" / "worker.r" (buffers of at least 32 bytes).
void kvt_rank_names(uint32_t r, char *runner, char *worker, size_t len);

//  Builds rank r's device and tier for `sys` (the device and the pool follow
//  its clock). The configuration is borrowed and must outlive the rank.
//  Returns NULL with err naming what failed (the device, a plane, the pool,
//  the disk tier, a region registration).
kvt_rank_t *kvt_rank_new(const kvt_replay_cfg_t *cfg, uint32_t r, kvt_system_t *sys, char *err,
                         size_t errlen);

//  Registers runner.r and worker.r as local actors of `sys` (in that order),
//  their inboxes at runner_ep / worker_ep (NULL: inproc). Returns 0 or -1.
int kvt_rank_add_actors(kvt_rank_t *rank, kvt_system_t *sys, const char *runner_ep,
                        const char *worker_ep);

//  After the system stopped: 0 when the rank's pool holds no lease, pin or
//  write in progress; -1 with problem naming what was left.
int kvt_rank_check_quiescent(const kvt_rank_t *rank, char *problem, size_t len);

//  The rank's device and tier (borrowed; the tier is NULL without a CPU pool).
kvt_gpu_t *kvt_rank_gpu(const kvt_rank_t *rank);

//  Its worker's lane stream (0 load, 1 state, 2 save) while the worker is
//  up, for fault plans (kvt_gpu_stream_inject); NULL otherwise.
kvt_gpu_stream_t *kvt_rank_lane_stream(const kvt_rank_t *rank, uint32_t lane);
kvt_storage_t *kvt_rank_storage(const kvt_rank_t *rank);

//  Destroys the device and tier. Call after the system that runs the
//  rank's actors was stopped (or destroyed). Safe on NULL.
void kvt_rank_destroy(kvt_rank_t **rank_p);

// ------------------------------------------------------ ranks as processes

//  Index of an actor in the shared topology: engine 0, scheduler 1,
//  aggregator 2, runner.r 3 + 2r, worker.r 4 + 2r.
#define KVT_RANK_TOPO_RUNNER(r) (3u + 2u * (r))
#define KVT_RANK_TOPO_WORKER(r) (4u + 2u * (r))

//  The endpoint of topology actor `index` named `name` under `base`:
//  ipc://DIR gives ipc://DIR/NAME, tcp://HOST:PORT gives tcp://HOST:(PORT +
//  index) (every process of the run on HOST). Returns 0, or -1 when base is
//  neither or the result does not fit (an ipc path over 100 bytes).
int kvt_rank_endpoint(const char *base, uint32_t index, const char *name, char *out, size_t len);

//  Exit statuses of a rank process (kvt_rank_process_run).
#define KVT_RANK_EXIT_OK        0 //  stopped by SIGTERM / SIGINT, quiescent, no runtime error
#define KVT_RANK_EXIT_SETUP     1 //  could not be built or started
#define KVT_RANK_EXIT_UNCLEAN   3 //  stopped, but its pool was not quiescent or an actor erred
#define KVT_RANK_EXIT_NO_ENGINE 4 //  the engine went away (or was never reached)

typedef struct {
    kvt_replay_cfg_t cfg;        //  geometry, tiers, log level, seed (driver: LIVE; tp = world)
    uint32_t rank;               //  this process's rank (< cfg.tp)
    const char *engine;          //  base endpoint of the run (ipc://DIR or tcp://HOST:PORT)
    int engine_pid;              //  the engine's process (its parent), 0 = not known
    uint32_t connect_timeout_ms; //  the engine must be reached within this (default 10000)
    uint32_t poll_ms;            //  how often the engine's liveness is checked (default 50)
    bool metrics;                //  the topology ends with the engine's metrics collector
                                 //  (index 3 + 2 tp, --with-metrics): its Stats requests
                                 //  come from a known sender
} kvt_rank_proc_cfg_t;

//  Runs one rank (runner.r, worker.r and its tier) as this process's only
//  local actors, every other actor of the topology remote under `engine`.
//  Returns when the process gets SIGTERM / SIGINT (the engine's end of the
//  run) or when the engine goes away: its connection closed (a ZeroMQ
//  socket monitor on a connection to the engine's inbox), its process
//  exited (engine_pid is no longer the parent) or it was not reached within
//  connect_timeout_ms. Returns a KVT_RANK_EXIT_* status; err says why for
//  any but OK.
int kvt_rank_process_run(const kvt_rank_proc_cfg_t *pc, char *err, size_t errlen);

//  Starts rank r of the run as a process: `exe rank --rank r --world tp
//  --engine base --engine-pid <this process> ...` with every setting of cfg
//  the rank needs. The child dies with this thread (PR_SET_PDEATHSIG:
//  SIGKILL until kvt_rank_process_run makes it SIGUSR2, which it reads as
//  the engine gone). Returns the child's pid, or -1 with err.
int kvt_rank_spawn(const char *exe, const kvt_replay_cfg_t *cfg, uint32_t r, const char *base,
                   char *err, size_t errlen);

//  A waitpid status in words: "exited with status 2", "was killed by
//  signal 9 (Killed)".
void kvt_rank_describe_status(int status, char *out, size_t len);

#endif
