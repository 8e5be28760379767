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

//  The namespace every rank of a run keys its tier with: model geometry and
//  TP width (the same configuration gives the same namespace in every process).
kvt_hash_t kvt_rank_namespace(const kvt_replay_cfg_t *cfg);

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
kvt_storage_t *kvt_rank_storage(const kvt_rank_t *rank);

//  Destroys the device and tier. Call after the system that runs the
//  rank's actors was stopped (or destroyed). Safe on NULL.
void kvt_rank_destroy(kvt_rank_t **rank_p);

#endif
