/*  kvt_test_rig — the rank data path as actors under the SIM driver, shared
    by the tests that build it (test_actors, test_rank_rules,
    test_rank_random): host devices in SIM mode on the system's clock, a
    tier per rank, real workers and the real aggregator, and in the
    scheduler's place either the probe below (it records verdicts) or a
    test's own actor. The tests own what differs: the workers' arguments,
    what they post, what they check. Test code: it asserts (Criterion). */
#ifndef KVT_TEST_RIG_H_INCLUDED
#define KVT_TEST_RIG_H_INCLUDED

#include <stdbool.h>
#include <stdint.h>

#include "actors/aggregator/kvt_aggregator.h"
#include "actors/worker/kvt_worker.h"
#include "kvtier/kvt_actor.h"
#include "kvtier/kvt_gpu.h"
#include "kvtier/kvt_storage.h"

#define KVT_TRIG_MAXR 8 //  ranks a rig holds

// ------------------------------------------------------------ pieces ----

//  The system's virtual clock (arg: the kvt_system_t), for devices and pools.
uint64_t kvt_trig_clock(void *arg);

//  A log that drops every line.
void kvt_trig_quiet(void *arg, int level, const char *line);

//  One rank's device: the host backend in SIM mode on sys's clock.
typedef struct {
    uint64_t bandwidth;   //  copy bandwidth, bytes/s
    bool zero_latency;    //  no per-entry cost (KVT_GPU_SIM_ZERO_LATENCY)
    uint32_t planes;      //  KV planes (one layer each)
    uint32_t blocks;      //  blocks per plane
    uint32_t block_bytes; //  bytes of one block in one plane
    uint32_t slots;       //  state slots (0: no slot pool)
    uint32_t ckpt_units;  //  HBM checkpoint units (0: no checkpoint pool)
    uint32_t state_bytes; //  bytes of one state unit
} kvt_trig_dev_t;

kvt_gpu_t *kvt_trig_gpu(kvt_system_t *sys, const kvt_trig_dev_t *d);

//  One rank's tier: a CPU pool of capacity bytes (64-byte aligned) on sys's
//  clock, TTL ttl_ms (0: the default).
kvt_storage_t *kvt_trig_storage(kvt_system_t *sys, uint64_t capacity, uint64_t ttl_ms);

//  The same with a disk below the pool in dir (capacity 64 MiB, write-through,
//  writes on the disk's I/O threads); NULL dir: none.
kvt_storage_t *kvt_trig_storage_disk(kvt_system_t *sys, uint64_t capacity, uint64_t ttl_ms,
                                     const char *dir);

//  Adds the worker of wa->rank as "worker.<rank>".
kvt_aid_t kvt_trig_add_worker(kvt_system_t *sys, kvt_worker_args_t *wa);

//  Runs sys until it is quiescent (asserted) within max_events.
void kvt_trig_run(kvt_system_t *sys, uint64_t max_events);

// ------------------------------------------------------------ counters --

//  The last Stats reply an actor with the handlers below received.
typedef struct {
    kvt_counter_t c[256]; //  counters
    uint32_t n;           //  entries
} kvt_trig_counters_t;

extern kvt_trig_counters_t kvt_trig_counters;

//  Handlers for an actor in the scheduler's place: a Stats reply is kept
//  in kvt_trig_counters; Ping(seq = actor id) asks that actor for its
//  counters.
int kvt_trig_on_stats(kvt_ctx_t *ctx, void *self, kvt_aid_t from, kvt_msg_t *m);
int kvt_trig_on_ping(kvt_ctx_t *ctx, void *self, kvt_aid_t from, kvt_msg_t *m);

//  Asks actor aid for its counters: posts the Ping to `via` (an actor with
//  the handlers above) and forgets the last reply. Run the system, then
//  find a counter in the reply: true and *value when it was reported.
void kvt_trig_ping(kvt_system_t *sys, kvt_aid_t via, kvt_aid_t aid);
bool kvt_trig_find(const char *name, uint64_t *value);

// --------------------------------------------------------------- probe --

//  What the probe recorded.
typedef struct {
    kvt_verdict_t verdicts[64]; //  verdicts in arrival order (images copied to img)
    uint8_t img[64][16];        //  the first bytes of each verdict's image bitmap
    uint64_t at[64];            //  virtual time of each verdict
    uint32_t nverdicts;         //  entries
    uint32_t nsafe;             //  source_safe verdicts (counted, not in verdicts)
} kvt_trig_probe_t;

extern kvt_trig_probe_t kvt_trig_probe;

//  The probe: records verdicts in kvt_trig_probe, counters as above.
extern const kvt_actor_class_t kvt_trig_probe_class;

// ----------------------------------------------------------------- rig --

//  A whole rig: the probe as "scheduler", the aggregator, nranks workers.
typedef struct {
    kvt_system_t *sys;                      //  SIM system
    kvt_gpu_t *gpu[KVT_TRIG_MAXR];          //  one device per rank
    kvt_storage_t *st[KVT_TRIG_MAXR];       //  one tier per rank
    kvt_worker_args_t wa[KVT_TRIG_MAXR];    //  worker args
    kvt_aggregator_args_t aa;               //  aggregator args
    kvt_aid_t agg, probe, w[KVT_TRIG_MAXR]; //  ids
    uint32_t nranks;                        //  ranks
} kvt_trig_t;

typedef struct {
    uint64_t seed;           //  the SIM driver's seed
    const char *name;        //  the system's name
    uint32_t nranks;         //  ranks (1..KVT_TRIG_MAXR)
    kvt_trig_dev_t dev;      //  every rank's device
    uint64_t pool_bytes;     //  every rank's CPU pool
    uint64_t ttl_ms;         //  its TTL (0: default)
    uint64_t agg_timeout_ns; //  the aggregator's bound
    kvt_worker_args_t wa;    //  every worker's args; rank, gpu, storage, aggregator set here
    const char *disk_dir;    //  non-NULL: every tier gets a disk in <disk_dir>/rank<r>
                             //  (write-through, I/O threads)
} kvt_trig_cfg_t;

//  Builds and starts the rig (clears kvt_trig_probe and kvt_trig_counters).
void kvt_trig_up(kvt_trig_t *t, const kvt_trig_cfg_t *cfg);

//  Destroys the system, then every tier and device.
void kvt_trig_down(kvt_trig_t *t);

//  Runs the rig until it is quiescent (asserted; at most 10^6 events).
void kvt_trig_settle(kvt_trig_t *t);

//  Counter `name` of actor aid, through the probe (asserted reported).
uint64_t kvt_trig_count(kvt_trig_t *t, kvt_aid_t aid, const char *name);

#endif
