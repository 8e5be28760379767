/*  kvtier bench rank — what the rank's actors cost per item: loads through
    the worker and the aggregator under the LIVE driver, against a raw
    ZeroMQ inproc relay of the same messages measured in the same run.

    * The rank path: --ranks workers (a host device and a CPU pool each)
      and the aggregator, driven by an actor in the runner's and the
      scheduler's place. Each step sends --items one-chunk LoadSpecs to
      every worker and waits for their --items verdicts; the next step goes
      out when the last verdict is in. The device is the host backend in
      SIM mode on the system's clock with zero latency, zero per-entry cost
      and a huge bandwidth, so a copy lands as soon as it is queued: what is
      measured is the actors (decode, validate, lease, queue, poll, report,
      quorum, encode) and the driver's transport, not the bytes.
    * Every chunk is in the pool before anything is timed; each load
      restores it into the item's own blocks. A load that does not verdict
      ok fails the run.
    * Baseline: the same topology as threads relaying bytes over raw
      ZeroMQ inproc PAIR / PUSH-PULL sockets: per item a frame of the size of
      the encoded LoadSpec to each worker thread, from each a frame of the
      size of an encoded Completion to the aggregator thread, which sends one
      frame of the size of the encoded Verdict back once it has one per
      rank: the same messages, the same sizes, the same steps of --items in
      flight, without the codec or any handler.
    * --rounds rounds, each one baseline run and one rank run of --steps
      steps (after one warm-up round of each, not counted; the order
      alternates per round), reported as medians; the ratio is the median
      of the per-round ratios.
*/
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "actors/aggregator/kvt_aggregator.h"
#include "actors/worker/kvt_worker.h"
#include "kvt_cli.h"
#include "kvt_cmd.h"
#include "kvtier/kvt_actor.h"
#include "kvtier/kvt_gpu.h"
#include "kvtier/kvt_msg.h"
#include "kvtier/kvt_storage.h"

#define S_MAXR      8  //  ranks
#define S_BS        16 //  tokens per block
#define S_CS        64 //  tokens per chunk
#define S_BPC       (S_CS / S_BS)
#define S_TOKB      4   //  bytes per token (one plane, one layer): 256 B blocks
#define S_NS        1   //  namespace
#define S_MAXROUNDS 101 //  --rounds
#define S_TARGET_US 5.0 //  the target: the actors add at most this per item

typedef struct {
    const char *json; //  --json PATH, or NULL
    uint32_t items;   //  --items per step
    uint32_t steps;   //  --steps per round
    uint32_t rounds;  //  --rounds
    uint32_t ranks;   //  --ranks
} s_opts_t;

//  Set up by the main thread before the system starts; in a round only the
//  bench driver actor touches it; the main thread reads the results after
//  the round ended (kvt_system_run returned on the driver's exit), through
//  atomics, since that exit is not a synchronisation a race checker sees.
typedef struct {
    const s_opts_t *o;       //  options
    kvt_aid_t w[S_MAXR];     //  workers
    uint64_t next_req;       //  next request id
    uint32_t step;           //  steps done in this round
    uint32_t verdicts;       //  verdicts of this step
    _Atomic uint64_t failed; //  verdicts that were not ok (all rounds)
    _Atomic uint64_t t0;     //  round start (driver clock, ns)
    _Atomic uint64_t t1;     //  round end
} s_bench_t;

static s_bench_t s_b;

static kvt_hash_t s_key(uint32_t i)
{
    return (kvt_hash_t){.hi = 0xBE7C4000ull + i, .lo = i * 2654435761ull + 1};
}

// ----------------------------------------------------- the rank path ----

//  The LoadSpec of item i (blocks: the caller's array of S_BPC).
static void s_spec(kvt_msg_t *m, uint64_t req, uint32_t i, kvt_hash_t *key, uint32_t *blocks)
{
    *key = s_key(i);
    for (uint32_t b = 0; b < S_BPC; b++)
        blocks[b] = i * S_BPC + b;
    memset(m, 0, sizeof *m);
    m->kind = KVT_MSG_LOAD_SPEC;
    m->u.load_spec = (kvt_load_spec_t){.op = {req, 1},
                                       .start = 0,
                                       .end = S_CS,
                                       .keys = key,
                                       .nkeys = 1,
                                       .blocks = blocks,
                                       .nblocks = S_BPC};
}

static int s_send_step(kvt_ctx_t *ctx)
{
    s_b.verdicts = 0;
    for (uint32_t i = 0; i < s_b.o->items; i++) {
        kvt_msg_t m;
        kvt_hash_t key;
        uint32_t blocks[S_BPC];
        s_spec(&m, s_b.next_req++, i, &key, blocks);
        for (uint32_t r = 0; r < s_b.o->ranks; r++)
            if (kvt_ctx_send(ctx, s_b.w[r], &m) != 0)
                return -1;
    }
    return 0;
}

//  Ping from the main thread: run one round.
static int s_on_ping(kvt_ctx_t *ctx, void *self, kvt_aid_t from, kvt_msg_t *m)
{
    s_b.step = 0;
    s_b.t0 = kvt_ctx_now(ctx);
    if (s_send_step(ctx) != 0) {
        kvt_ctx_exit(ctx, 1);
        return -1;
    }
    return 0;
}

static int s_on_verdict(kvt_ctx_t *ctx, void *self, kvt_aid_t from, kvt_msg_t *m)
{
    if (!m->u.verdict.ok)
        atomic_fetch_add(&s_b.failed, 1);
    if (++s_b.verdicts < s_b.o->items)
        return 0;
    if (++s_b.step < s_b.o->steps)
        return s_send_step(ctx) == 0 ? 0 : (kvt_ctx_exit(ctx, 1), -1);
    s_b.t1 = kvt_ctx_now(ctx);
    kvt_ctx_exit(ctx, 0);
    return 0;
}

static void *s_drv_init(kvt_ctx_t *ctx, void *args)
{
    return &s_b;
}

static void s_drv_stop(kvt_ctx_t *ctx, void *self)
{
}

static const kvt_actor_class_t s_drv_class = {
    .type = "bench",
    .init = s_drv_init,
    .stop = s_drv_stop,
    .on = {[KVT_MSG_PING] = s_on_ping, [KVT_MSG_VERDICT] = s_on_verdict},
};

static uint64_t s_clock(void *arg)
{
    return kvt_system_now((kvt_system_t *)arg);
}

static void s_log(void *arg, int level, const char *line)
{
    if (level <= 1)
        fprintf(stderr, "kvtier bench rank: %s\n", line);
}

typedef struct {
    kvt_system_t *sys;            //  LIVE system
    kvt_gpu_t *gpu[S_MAXR];       //  devices
    kvt_storage_t *st[S_MAXR];    //  tiers
    kvt_worker_args_t wa[S_MAXR]; //  worker args
    kvt_aggregator_args_t aa;     //  aggregator args
    kvt_aid_t drv;                //  the bench driver
} s_rig_t;

static void s_rig_down(s_rig_t *g, uint32_t ranks)
{
    kvt_system_destroy(&g->sys);
    for (uint32_t r = 0; r < ranks; r++) {
        kvt_storage_destroy(&g->st[r]);
        kvt_gpu_destroy(&g->gpu[r]);
    }
}

static int s_rig_up(s_rig_t *g, const s_opts_t *o)
{
    memset(g, 0, sizeof *g);
    kvt_system_opts_t so = {.driver = KVT_DRIVER_LIVE, .seed = 1, .name = "benchrank"};
    g->sys = kvt_system_new(&so);
    if (!g->sys)
        return -1;
    g->drv = kvt_system_add(g->sys, "scheduler", &s_drv_class, NULL, NULL);
    g->aa = (kvt_aggregator_args_t){.nranks = o->ranks, .scheduler = "scheduler"};
    kvt_system_add(g->sys, "aggregator", &kvt_aggregator_class, &g->aa, NULL);
    uint8_t *chunk = malloc((size_t)S_BPC * S_BS * S_TOKB);
    if (!chunk)
        return -1;
    memset(chunk, 0x3C, (size_t)S_BPC * S_BS * S_TOKB);
    int rc = -1;
    for (uint32_t r = 0; r < o->ranks; r++) {
        kvt_gpu_opts_t go = {.backend = KVT_GPU_BACKEND_HOST,
                             .host_mode = KVT_GPU_HOST_SIM,
                             .now = s_clock,
                             .now_arg = g->sys,
                             .sim_bandwidth_Bps = UINT64_MAX / 2,
                             .sim_latency_ns = KVT_GPU_SIM_ZERO_LATENCY,
                             .sim_entry_ns = KVT_GPU_SIM_ZERO_LATENCY,
                             .log = s_log};
        g->gpu[r] = kvt_gpu_new(&go);
        if (!g->gpu[r])
            goto cleanup;
        kvt_gpu_plane_desc_t pd = {
            .layers = 1, .num_blocks = o->items * S_BPC, .block_bytes = S_BS * S_TOKB};
        if (kvt_gpu_plane_add(g->gpu[r], &pd) < 0)
            goto cleanup;
        kvt_storage_config_t sc;
        kvt_storage_config_defaults(&sc);
        sc.pool.capacity_bytes = (uint64_t)o->items * S_BPC * S_BS * S_TOKB * 4 + (16u << 20);
        sc.pool.align = 64;
        sc.pool.log = s_log;
        char err[256];
        g->st[r] = kvt_storage_new(&sc, err, sizeof err);
        if (!g->st[r]) {
            fprintf(stderr, "kvtier bench rank: storage: %s\n", err);
            goto cleanup;
        }
        for (uint32_t i = 0; i < o->items; i++)
            if (kvt_storage_put(g->st[r], S_NS, s_key(i), KVT_OBJ_KV, chunk,
                                (size_t)S_BPC * S_BS * S_TOKB) != 0)
                goto cleanup;
        g->wa[r] = (kvt_worker_args_t){.rank = r,
                                       .gpu = g->gpu[r],
                                       .storage = g->st[r],
                                       .ns = S_NS,
                                       .block_size = S_BS,
                                       .chunk_size = S_CS,
                                       .aggregator = "aggregator"};
        char name[32];
        snprintf(name, sizeof name, "worker.%u", r);
        s_b.w[r] = kvt_system_add(g->sys, name, &kvt_worker_class, &g->wa[r], NULL);
        if (s_b.w[r] == KVT_AID_NONE)
            goto cleanup;
    }
    if (kvt_system_start(g->sys) != 0)
        goto cleanup;
    rc = 0;
cleanup:
    free(chunk);
    return rc;
}

//  One round through the actors: seconds from the first spec to the last
//  verdict, and the process's CPU seconds over the round.
static int s_rank_round(s_rig_t *g, double *secs, double *cpu)
{
    double cpu0 = kvt_cli_proc_cpu_now();
    kvt_msg_t m;
    memset(&m, 0, sizeof m);
    m.kind = KVT_MSG_PING;
    if (kvt_system_post(g->sys, g->drv, &m) != 0)
        return -1;
    int rc = kvt_system_run(g->sys, 600ull * 1000000000ull, 0);
    if (rc != 0) {
        fprintf(stderr, "kvtier bench rank: the round ended with %d\n", rc);
        return -1;
    }
    *secs = (double)(atomic_load(&s_b.t1) - atomic_load(&s_b.t0)) * 1e-9;
    *cpu = kvt_cli_proc_cpu_now() - cpu0;
    return 0;
}

// ------------------------------------------------------ the baseline ----

typedef struct {
    void *zctx;         //  ZeroMQ context (inproc needs one)
    const s_opts_t *o;  //  options
    size_t spec_len;    //  encoded LoadSpec bytes
    size_t comp_len;    //  encoded Completion bytes
    size_t verdict_len; //  encoded Verdict bytes
    uint64_t messages;  //  frames relayed by the last round
    uint32_t round;     //  rounds run (endpoint names are per round)
} s_base_t;

typedef struct {
    s_base_t *b;    //  the baseline
    uint32_t rank;  //  worker thread's rank
    uint64_t total; //  items the thread relays this round
} s_thr_t;

static void *s_base_worker(void *arg)
{
    s_thr_t *t = arg;
    char ep[64];
    char agg[64];
    snprintf(ep, sizeof ep, "inproc://bench-rank-%u-w%u", t->b->round, t->rank);
    snprintf(agg, sizeof agg, "inproc://bench-rank-%u-agg", t->b->round);
    void *in = zmq_socket(t->b->zctx, ZMQ_PAIR);
    void *out = zmq_socket(t->b->zctx, ZMQ_PUSH);
    uint8_t *buf = calloc(1, t->b->spec_len + t->b->comp_len + 64);
    if (!in || !out || !buf || zmq_connect(in, ep) != 0 || zmq_connect(out, agg) != 0)
        goto cleanup;
    for (uint64_t i = 0; i < t->total; i++) {
        if (zmq_recv(in, buf, t->b->spec_len + 64, 0) < 0 ||
            zmq_send(out, buf, t->b->comp_len, 0) < 0)
            break;
    }
cleanup:
    free(buf);
    if (in)
        zmq_close(in);
    if (out)
        zmq_close(out);
    return NULL;
}

static void *s_base_agg(void *arg)
{
    s_thr_t *t = arg;
    char agg[64], drv[64];
    snprintf(agg, sizeof agg, "inproc://bench-rank-%u-agg", t->b->round);
    snprintf(drv, sizeof drv, "inproc://bench-rank-%u-drv", t->b->round);
    void *in = zmq_socket(t->b->zctx, ZMQ_PULL);
    void *out = zmq_socket(t->b->zctx, ZMQ_PAIR);
    uint8_t *buf = calloc(1, t->b->comp_len + t->b->verdict_len + 64);
    if (!in || !out || !buf || zmq_bind(in, agg) != 0 || zmq_connect(out, drv) != 0)
        goto cleanup;
    uint32_t ranks = t->b->o->ranks;
    for (uint64_t i = 0; i < t->total; i++) {
        if (zmq_recv(in, buf, t->b->comp_len + 64, 0) < 0)
            break;
        if ((i + 1) % ranks == 0 && zmq_send(out, buf, t->b->verdict_len, 0) < 0)
            break;
    }
cleanup:
    free(buf);
    if (in)
        zmq_close(in);
    if (out)
        zmq_close(out);
    return NULL;
}

//  One baseline round: seconds from the first frame to the last verdict
//  frame, and the process's CPU seconds over the round.
static int s_base_round(s_base_t *b, double *secs, double *cpu)
{
    double c0 = kvt_cli_proc_cpu_now();
    const s_opts_t *o = b->o;
    uint64_t items = (uint64_t)o->items * o->steps;
    int rc = -1;
    void *down[S_MAXR] = {NULL};
    void *up = zmq_socket(b->zctx, ZMQ_PAIR);
    uint8_t *buf = calloc(1, b->spec_len + b->verdict_len + 64);
    pthread_t th[S_MAXR + 1];
    s_thr_t ta[S_MAXR + 1];
    uint32_t started = 0;
    char ep[64];
    b->round++;
    snprintf(ep, sizeof ep, "inproc://bench-rank-%u-drv", b->round);
    if (!up || !buf || zmq_bind(up, ep) != 0)
        goto cleanup;
    for (uint32_t r = 0; r < o->ranks; r++) {
        snprintf(ep, sizeof ep, "inproc://bench-rank-%u-w%u", b->round, r);
        down[r] = zmq_socket(b->zctx, ZMQ_PAIR);
        if (!down[r] || zmq_bind(down[r], ep) != 0)
            goto cleanup;
    }
    for (uint32_t r = 0; r <= o->ranks; r++) {
        ta[r] = (s_thr_t){.b = b, .rank = r, .total = r < o->ranks ? items : items * o->ranks};
        if (pthread_create(&th[r], NULL, r < o->ranks ? s_base_worker : s_base_agg, &ta[r]) != 0)
            goto join;
        started++;
    }
    double t0 = kvt_cli_now();
    for (uint32_t s = 0; s < o->steps; s++) {
        for (uint32_t i = 0; i < o->items; i++)
            for (uint32_t r = 0; r < o->ranks; r++)
                if (zmq_send(down[r], buf, b->spec_len, 0) < 0)
                    goto join;
        for (uint32_t i = 0; i < o->items; i++)
            if (zmq_recv(up, buf, b->verdict_len + 64, 0) < 0)
                goto join;
    }
    *secs = kvt_cli_now() - t0;
    b->messages = items * (2 * o->ranks + 1);
    rc = 0;
join:
    if (rc != 0)
        zmq_ctx_shutdown(b->zctx); //  unblocks the threads; the run fails
    for (uint32_t r = 0; r < started; r++)
        pthread_join(th[r], NULL);
    *cpu = kvt_cli_proc_cpu_now() - c0;
cleanup:
    free(buf);
    if (up)
        zmq_close(up);
    for (uint32_t r = 0; r < o->ranks; r++)
        if (down[r])
            zmq_close(down[r]);
    return rc;
}

//  The encoded sizes of one item's messages, as the actors send them.
static int s_sizes(s_base_t *b)
{
    kvt_msg_t m;
    kvt_hash_t key;
    uint32_t blocks[S_BPC];
    uint8_t *buf = NULL;
    size_t len = 0;
    s_spec(&m, 1u << 30, b->o->items - 1, &key, blocks);
    if (kvt_msg_encode(&m, &buf, &len) != 0)
        return -1;
    free(buf);
    b->spec_len = len;
    memset(&m, 0, sizeof m);
    m.kind = KVT_MSG_COMPLETION;
    m.u.completion = (kvt_completion_t){.chan = KVT_CHAN_LOAD,
                                        .op = {1u << 30, 1},
                                        .rank = b->o->ranks - 1,
                                        .ok = true,
                                        .epoch = KVT_WORKER_EPOCH_SPAN + (1u << 20)};
    if (kvt_msg_encode(&m, &buf, &len) != 0)
        return -1;
    free(buf);
    b->comp_len = len;
    memset(&m, 0, sizeof m);
    m.kind = KVT_MSG_VERDICT;
    m.u.verdict = (kvt_verdict_t){.chan = KVT_CHAN_LOAD, .op = {1u << 30, 1}, .ok = true};
    if (kvt_msg_encode(&m, &buf, &len) != 0)
        return -1;
    free(buf);
    b->verdict_len = len;
    return 0;
}

// ---------------------------------------------------------------- main --

static void s_usage(FILE *out)
{
    fprintf(out, "usage: kvtier bench rank [--json PATH] [--items N] [--steps N] [--rounds N]\n"
                 "                         [--ranks N]\n"
                 "  --json PATH  also write the results as JSON\n"
                 "  --items N    one-chunk loads per step, default 64 (1..4096)\n"
                 "  --steps N    steps per round, default 200 (1..1000000)\n"
                 "  --rounds N   measured rounds, default 5 (1..101), after one warm-up\n"
                 "  --ranks N    workers, default 1 (1..8)\n");
}

static int s_parse(int argc, char **argv, s_opts_t *o)
{
    *o = (s_opts_t){.items = 64, .steps = 200, .rounds = 5, .ranks = 1};
    const kvt_cli_num_t nums[] = {{"--items", 1, 4096, 0, &o->items},
                                  {"--steps", 1, 1000000, 0, &o->steps},
                                  {"--rounds", 1, S_MAXROUNDS, 0, &o->rounds},
                                  {"--ranks", 1, S_MAXR, 0, &o->ranks}};
    return kvt_cli_parse_nums("kvtier bench rank", argc, argv, nums, sizeof nums / sizeof nums[0],
                              &o->json, s_usage);
}

static int s_write_json(const char *path, json_t *doc)
{
    if (json_dump_file(doc, path, JSON_INDENT(2) | JSON_REAL_PRECISION(6)) != 0) {
        fprintf(stderr, "kvtier bench rank: --json %s: cannot write\n", path);
        return -1;
    }
    return 0;
}

int kvt_cmd_bench_rank(int argc, char **argv)
{
    s_opts_t o;
    int p = s_parse(argc, argv, &o);
    if (p != 0)
        return p > 0 ? 0 : 2;
    char cpu[256];
    kvt_cli_cpu_model(cpu, sizeof cpu);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    double load0 = kvt_cli_loadavg();
    uint64_t items = (uint64_t)o.items * o.steps;
    printf("kvtier bench rank: %ld cpus (%s), %u rank(s), %u items per step, %u steps per round, "
           "%u rounds\n",
           ncpu, cpu, o.ranks, o.items, o.steps, o.rounds);

    int rc = 1;
    s_b.o = &o;
    s_b.next_req = 1;
    atomic_store(&s_b.failed, 0);
    s_rig_t g;
    s_base_t b = {.o = &o};
    json_t *doc = NULL;
    double us[S_MAXROUNDS], base[S_MAXROUNDS], ratio[S_MAXROUNDS];
    double cpus[S_MAXROUNDS], base_cpu[S_MAXROUNDS];
    b.zctx = zmq_ctx_new();
    if (!b.zctx || s_sizes(&b) != 0) {
        fprintf(stderr, "kvtier bench rank: cannot set up the baseline\n");
        goto cleanup;
    }
    if (s_rig_up(&g, &o) != 0) {
        fprintf(stderr, "kvtier bench rank: cannot build the rank\n");
        goto cleanup_rig;
    }
    //  Round 0 warms both sides up and is not counted.
    for (uint32_t r = 0; r <= o.rounds; r++) {
        double ts = 0, tb = 0, cs = 0, cb = 0;
        bool base_first = r % 2 == 0;
        if ((base_first && s_base_round(&b, &tb, &cb) != 0) || s_rank_round(&g, &ts, &cs) != 0 ||
            (!base_first && s_base_round(&b, &tb, &cb) != 0)) {
            fprintf(stderr, "kvtier bench rank: round %u failed\n", r);
            goto cleanup_rig;
        }
        if (r == 0)
            continue;
        us[r - 1] = ts * 1e6 / (double)items;
        base[r - 1] = tb * 1e6 / (double)items;
        ratio[r - 1] = base[r - 1] > 0 ? us[r - 1] / base[r - 1] : 0;
        cpus[r - 1] = cs * 1e6 / (double)items;
        base_cpu[r - 1] = cb * 1e6 / (double)items;
    }
    if (atomic_load(&s_b.failed)) {
        fprintf(stderr, "kvtier bench rank: %llu loads did not verdict ok\n",
                (unsigned long long)atomic_load(&s_b.failed));
        goto cleanup_rig;
    }
    double us_med = kvt_cli_median(us, o.rounds), base_med = kvt_cli_median(base, o.rounds);
    double ratio_med = kvt_cli_median(ratio, o.rounds);
    double cpu_med = kvt_cli_median(cpus, o.rounds),
           base_cpu_med = kvt_cli_median(base_cpu, o.rounds);
    double added = us_med - base_med;
    double load1 = kvt_cli_loadavg();
    printf("through the actors: %.2f us per item (%.0f items/s); raw ZeroMQ inproc relay of the "
           "same %u messages per item (%zu + %zu + %zu B): %.2f us per item\n",
           us_med, 1e6 / us_med, 2 * o.ranks + 1, b.spec_len, b.comp_len, b.verdict_len, base_med);
    printf("ratio %.2f (median of per-round ratios); the actors add %.2f us per item (target <= "
           "%.1f: %s)\n",
           ratio_med, added, S_TARGET_US, added <= S_TARGET_US ? "met" : "NOT met");
    printf("CPU time per item (all threads): %.2f us through the actors, %.2f us for the relay\n",
           cpu_med, base_cpu_med);
    printf("load average (1 min): %.2f at start, %.2f at end\n", load0, load1);
    if (o.json) {
        doc = json_pack(
            "{s:s, s:{s:i, s:s, s:f, s:f}, s:i, s:i, s:i, s:i, s:I, s:i, s:{s:I, s:I, "
            "s:I}, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:b, s:f, s:f, s:s}",
            "bench", "rank", "machine", "nproc", (int)ncpu, "cpu", cpu, "load_avg_1min_start",
            load0, "load_avg_1min_end", load1, "ranks", (int)o.ranks, "items_per_step",
            (int)o.items, "steps", (int)o.steps, "rounds", (int)o.rounds, "items",
            (json_int_t)items, "messages_per_item", (int)(2 * o.ranks + 1), "message_bytes",
            "load_spec", (json_int_t)b.spec_len, "completion", (json_int_t)b.comp_len, "verdict",
            (json_int_t)b.verdict_len, "us_per_item", us_med, "items_per_s", 1e6 / us_med,
            "baseline_us_per_item", base_med, "rank_overhead_ratio", ratio_med, "added_us_per_item",
            added, "target_added_us_max", S_TARGET_US, "ratio_of_medians",
            base_med > 0 ? us_med / base_med : 0.0, "target_met", added <= S_TARGET_US,
            "cpu_us_per_item", cpu_med, "baseline_cpu_us_per_item", base_cpu_med, "method",
            "median over rounds; one warm-up round of each side not counted; "
            "baseline and rank rounds alternate which goes first");
        if (!doc || s_write_json(o.json, doc) != 0)
            goto cleanup_rig;
    }
    rc = 0;
cleanup_rig:
    s_rig_down(&g, o.ranks);
cleanup:
    json_decref(doc);
    if (b.zctx)
        zmq_ctx_term(b.zctx);
    return rc;
}
