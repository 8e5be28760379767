/*  kvt_ledger — the loss ledger of a replay: where every token the trace
    allows to resume went.

    The ideal is computed from the trace alone, independently of the
    scheduler, by the trace's token model (equal 512-token block ids at the
    same position are equal tokens; kvt_workload.h): a request's ideal is
    the longest prefix of its prompt that an earlier request of the trace
    (in arrival order) shares, with unlimited capacity, kept below the
    prefill tail (prompt - 1, or - 2 with speculative decode) and floored
    to the block (an HBM hit resumes any full block; a hybrid model's HBM
    checkpoints include one at the prompt's last full block, the tier's
    chunks and joint boundaries lie on the chunk grid). The ideal is the
    same for a dense and a hybrid model of the same geometry.

    What was measured comes from the plans the engine sees (the events
    ADMIT, OUTCOME, LOADED, RETREAT, FINISH, and the entries' progress and
    checkpoint takes; kvt_msg.h): hit tokens by tier (HBM, CPU, disk,
    remote). Every token of the ideal that was not hit is charged to
    exactly one reason (kvt_loss_t), per request, in this order from the
    top of its ideal down to what it resumed:

    * rejected: the whole ideal of a request the scheduler refused;
    * other instance: the ideal of the whole trace above the ideal of the
      requests routed to the same engine instance;
    * in flight: above what the instance had computed when the request was
      admitted (its sharer was still in prefill, or not yet admitted);
    * lookup timeout: above the KV in HBM when the tier lookup timed out
      (what the tier held is unknown);
    * capacity: KV gone from every tier; charged to the lowest configured
      tier (disk / remote, else the CPU chunk, else HBM KV), and to HBM KV
      for the part above the last full chunk (only HBM holds it);
    * hybrid: the state at the boundary: the joint planner's skip reasons
      (below min_load_tokens, no probe demand, partial chunk no room) from
      the gated hit up to the boundary it found; above that, chunk by
      chunk, no checkpoint at the chunk's end: never taken, or taken and
      evicted (the CPU image when state images go to the tier, else the
      HBM checkpoint);
    * load failed or retreated: from the boundary chosen down to what the
      request resumed after its load's verdict;
    * aborted (FINISH c = KVT_FINISH_ABORTED): the whole ideal of a request
      aborted before its admission; of one aborted after it, from the
      boundary chosen down to what it resumed (a load the abort orphaned
      resumed nothing), in place of load failed;
    * preempted: a request admitted again under a newer generation was
      preempted. Its first admission is the one the ledger reads (the
      ladder above its chosen boundary as for any request); everything it
      had chosen, resumed or not, is charged here, since the preemption
      threw it away, and it counts no hit (the engine takes its first
      admission's hits back as well). Events of later admissions are
      not read (a request ends once, whatever gen its FINISH carries).

    A tier that is warm (kvt_ledger_warm: the disk tier found objects of an
    earlier run at start, or a remote tier is configured) may hold a
    prefix this run never computed: the tier KV an admission found above
    its ideal is carried (from an earlier run), a hit on its own line, and
    the ladder starts from there; no instance or in-flight loss is charged
    below the tier KV found.

    The identity ideal + carried = hits + Σ losses holds to the token by
    construction as long as each request's facts are ordered (resumed ≤
    chosen ≤ KV available ≤ computed ≤ ideal, or ≤ the warm tier's KV);
    a request whose facts are not (the
    scheduler resumed more than the trace allows, or a report is missing)
    is counted as inconsistent, its pieces kept as measured, and the
    identity then fails: the replay fails the run as it does on a wrong
    resume. The ledger's hit total must also equal the engine's own hit
    counters (kvt_ledger_check).

    Memory: O(total block ids of the trace); every event is O(1), an
    admission O(its prompt's blocks), as hashing its chain already is. */
#ifndef KVT_LEDGER_H_INCLUDED
#define KVT_LEDGER_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kvt_workload.h"
#include "kvtier/kvt_msg.h"

struct json_t; //  jansson's object (kvt_ledger_json)

typedef enum {
    KVT_LOSS_REJECTED = 0,   //  request rejected (too long for the pool)
    KVT_LOSS_OTHER_INSTANCE, //  its prefix was routed to another engine instance
    KVT_LOSS_IN_FLIGHT,      //  not computed yet when it was admitted
    KVT_LOSS_LOOKUP_TIMEOUT, //  the tier lookup timed out
    KVT_LOSS_HBM_KV,         //  capacity: HBM KV evicted (no lower tier holds it)
    KVT_LOSS_CPU_CHUNK,      //  capacity: CPU chunk evicted (no tier below the CPU pool)
    KVT_LOSS_DISK,           //  capacity: gone from disk / remote too
    KVT_LOSS_CKPT_NEVER,     //  no checkpoint at the boundary: never taken
    KVT_LOSS_HBM_CKPT,       //  no checkpoint at the boundary: HBM checkpoint evicted
    KVT_LOSS_CPU_IMAGE,      //  no checkpoint at the boundary: its tier image evicted
    KVT_LOSS_MIN_LOAD,       //  joint skipped: below min_load_tokens
    KVT_LOSS_NO_PROBE,       //  joint skipped: no probe demand
    KVT_LOSS_NO_ROOM,        //  joint skipped: partial chunk, no room
    KVT_LOSS_LOAD_FAILED,    //  load failed or retreated
    KVT_LOSS_ABORTED,        //  the engine aborted the request (client gone)
    KVT_LOSS_PREEMPTED,      //  the engine preempted the request: its admission undone
    KVT_LOSS_COUNT
} kvt_loss_t;

//  The JSON key of a reason ("hbm_kv", "cpu_chunk", ...).
const char *kvt_ledger_loss_key(kvt_loss_t reason);

//  The table label of a reason ("capacity: HBM KV evicted", ...).
const char *kvt_ledger_loss_label(kvt_loss_t reason);

typedef struct {
    uint64_t input_tokens;         //  every input token of the trace, rejected requests included
    uint64_t ideal;                //  the KV-only ideal, tokens
    uint64_t hit_hbm;              //  measured: resumed from HBM
    uint64_t hit_cpu;              //  measured: restored from the CPU tier
    uint64_t hit_disk;             //  measured: restored reading the disk tier
    uint64_t hit_remote;           //  measured: restored reading the remote tier
    uint64_t carried;              //  of the hits, tier KV above the ideal: from an earlier run
    uint64_t loss[KVT_LOSS_COUNT]; //  lost tokens by reason
    uint64_t requests;             //  requests accounted
    uint64_t inconsistent;         //  requests whose facts contradict the ideal or are missing
    char problem[200];             //  the first inconsistency ("" if none)
} kvt_ledger_report_t;

//  Measured hit tokens of a report (all tiers).
uint64_t kvt_ledger_hits(const kvt_ledger_report_t *r);

//  Σ losses of a report.
uint64_t kvt_ledger_losses(const kvt_ledger_report_t *r);

//  Adds b into a (instances' ledgers of one run are one ledger).
void kvt_ledger_report_add(kvt_ledger_report_t *a, const kvt_ledger_report_t *b);

//  Prints the ledger as a table (shares of every input token of the trace)
//  to out, each line starting with indent.
void kvt_ledger_print(const kvt_ledger_report_t *r, FILE *out, const char *indent);

//  Sets root's "ledger" to {ideal, input_tokens, carried, hit{hbm, cpu,
//  disk, remote}, loss{<key>: tokens, ...}, identity_holds, inconsistent}
//  (root is a jansson json_t object). 0, or -1 when out of memory.
int kvt_ledger_json(const kvt_ledger_report_t *r, struct json_t *root);

//  Whether the identity ideal + carried = hits + Σ losses holds and nothing was
//  inconsistent; when it does not, err says by how much and why.
bool kvt_ledger_holds(const kvt_ledger_report_t *r, char *err, size_t errlen);

typedef struct {
    uint32_t block_size; //  tokens per block (≥ 1)
    uint32_t chunk_size; //  tokens per chunk (a multiple of block_size)
    uint32_t tail;       //  prefill tail a hit leaves (1, 2 with speculative decode)
    bool hybrid;         //  a hybrid model: the chunk grid, checkpoints
    bool cpu_tier;       //  a CPU tier is configured
    bool disk_tier;      //  a disk tier is configured (below the CPU pool)
    bool remote_tier;    //  a remote tier is configured (below the CPU pool / disk)
    bool state_tier;     //  state images go to the tier (hybrid)
} kvt_ledger_cfg_t;

typedef struct kvt_ledger_t kvt_ledger_t;

//  A ledger over the whole workload wl (borrowed; outlives the ledger):
//  computes every request's ideal. NULL when out of memory or the
//  geometry is unusable.
kvt_ledger_t *kvt_ledger_new(const kvt_workload_t *wl, const kvt_ledger_cfg_t *cfg);

void kvt_ledger_destroy(kvt_ledger_t **self_p);

//  The ideal of request i of the workload (tokens).
uint32_t kvt_ledger_ideal(const kvt_ledger_t *self, uint32_t i);

//  Starts an engine instance serving n requests: global_of[j] is the index
//  in the workload of the instance's request j (the request ids its plans
//  carry); NULL with n = wl->n: every request, in order. The instance's
//  own ideal and its computed prefixes start from nothing. 0, or -1 when
//  out of memory.
int kvt_ledger_instance(kvt_ledger_t *self, const uint32_t *global_of, uint32_t n);

//  Whether the current instance's lower tier may hold KV from an earlier
//  run (its disk directory held objects at start, or a remote tier):
//  tier KV above a request's ideal is then carried, not inconsistent.
void kvt_ledger_warm(kvt_ledger_t *self, bool warm);

//  Feeds one plan of the current instance (its events, then its entries).
//  Unknown request ids are counted as inconsistent.
void kvt_ledger_plan(kvt_ledger_t *self, const kvt_step_plan_t *plan);

//  The ledger of the requests fed so far (every instance). A request that
//  never ended is inconsistent.
void kvt_ledger_report(const kvt_ledger_t *self, kvt_ledger_report_t *out);

#endif
