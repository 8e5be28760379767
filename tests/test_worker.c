/*  The worker driven directly: its core (every path reports exactly once,
    refusals, leases of failed loads, repeated specs) and the seen-ids ring
    it remembers accepted items in. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>

#include "actors/common/kvt_fence_board.h"
#include "actors/lane/kvt_lane_runner.h"
#include "actors/worker/kvt_wcore.h"
#include "actors/worker/kvt_wlease.h"
#include "base/kvt_seen.h"
#include "kvtier/kvt_gpu.h"
#include "kvtier/kvt_storage.h"
#include "replay/kvt_oracle.h"

static kvt_hash_t H(uint64_t i)
{
    return (kvt_hash_t){.hi = i * 31 + 7, .lo = i};
}

Test(seen, an_id_is_new_once_then_remembered)
{
    kvt_seen_t *s = kvt_seen_new(8);
    cr_assert_not_null(s);
    cr_assert_not(kvt_seen_contains(s, H(1)));
    cr_assert(kvt_seen_add(s, H(1)), "first time: new");
    cr_assert(kvt_seen_contains(s, H(1)));
    cr_assert_not(kvt_seen_add(s, H(1)), "second time: a repeat");
    cr_assert_eq(kvt_seen_size(s), 1);
    //  The zero id is an id like any other.
    cr_assert(kvt_seen_add(s, H(0)));
    cr_assert_not(kvt_seen_add(s, H(0)));
    kvt_seen_destroy(&s);
    cr_assert_null(s);
    kvt_seen_destroy(&s);
}

Test(seen, a_full_ring_forgets_the_oldest_in_arrival_order)
{
    kvt_seen_t *s = kvt_seen_new(4);
    for (uint64_t i = 0; i < 4; i++)
        cr_assert(kvt_seen_add(s, H(i)));
    //  A repeat does not move an id to the young end.
    cr_assert_not(kvt_seen_add(s, H(0)));
    cr_assert(kvt_seen_add(s, H(4)));
    cr_assert_eq(kvt_seen_size(s), 4);
    cr_assert_not(kvt_seen_contains(s, H(0)), "the oldest is forgotten");
    for (uint64_t i = 1; i <= 4; i++)
        cr_assert(kvt_seen_contains(s, H(i)), "id %llu", (unsigned long long)i);
    cr_assert(kvt_seen_add(s, H(0)), "a forgotten id is new again");
    cr_assert_not(kvt_seen_contains(s, H(1)));
    kvt_seen_destroy(&s);
}

Test(seen, many_ids_stay_bounded_and_exact)
{
    const uint32_t cap = 1000;
    kvt_seen_t *s = kvt_seen_new(cap);
    cr_assert_eq(kvt_seen_capacity(s), cap);
    for (uint64_t i = 0; i < 50000; i++)
        cr_assert(kvt_seen_add(s, H(i)));
    cr_assert_eq(kvt_seen_size(s), cap);
    for (uint64_t i = 0; i < 50000; i++)
        cr_assert_eq(kvt_seen_contains(s, H(i)), i >= 50000 - cap, "id %llu",
                     (unsigned long long)i);
    kvt_seen_destroy(&s);
}

Test(seen, capacity_one_remembers_the_last_id)
{
    kvt_seen_t *s = kvt_seen_new(1);
    cr_assert(kvt_seen_add(s, H(1)));
    cr_assert_not(kvt_seen_add(s, H(1)));
    cr_assert(kvt_seen_add(s, H(2)));
    cr_assert_not(kvt_seen_contains(s, H(1)));
    cr_assert(kvt_seen_contains(s, H(2)));
    kvt_seen_destroy(&s);
}

Test(wlease, due_leases_come_out_in_deadline_order_and_take_finds_any)
{
    kvt_wlease_t *t = kvt_wlease_new();
    cr_assert_not_null(t);
    //  Deadlines 1000 * ((i * 7) % 50): a permutation of 0..49.
    for (uint64_t i = 0; i < 50; i++) {
        kvt_lease_t l = {.id = 100 + i};
        cr_assert_eq(kvt_wlease_put(t, (kvt_opid_t){i, 1}, l, 1000 * ((i * 7) % 50)), 0);
    }
    cr_assert_eq(kvt_wlease_put(t, (kvt_opid_t){3, 1}, (kvt_lease_t){.id = 1}, 0), -1,
                 "one lease per lookup");
    cr_assert_eq(kvt_wlease_next_deadline(t), 0);
    //  Take a few out of the middle by op.
    kvt_lease_t l;
    for (uint64_t i = 10; i < 20; i++) {
        cr_assert(kvt_wlease_take(t, (kvt_opid_t){i, 1}, &l));
        cr_assert_eq(l.id, 100 + i);
        cr_assert_not(kvt_wlease_take(t, (kvt_opid_t){i, 1}, &l), "taken once");
    }
    uint64_t last = 0;
    uint32_t n = 0;
    kvt_opid_t op;
    while (kvt_wlease_take_due(t, 30000, &op, &l)) {
        uint64_t d = 1000 * ((op.req * 7) % 50);
        cr_assert_leq(d, 30000, "lease %llu is not due", (unsigned long long)op.req);
        cr_assert_geq(d, last, "out of deadline order");
        cr_assert_eq(l.id, 100 + op.req);
        last = d;
        n++;
    }
    //  31 deadlines in 0..30000 ms, minus those among the ten taken (i = 10..19).
    uint32_t taken_due = 0;
    for (uint64_t i = 10; i < 20; i++)
        taken_due += (i * 7) % 50 <= 30;
    cr_assert_eq(n, 31 - taken_due);
    cr_assert_eq(kvt_wlease_count(t), 40 - n);
    cr_assert_geq(kvt_wlease_next_deadline(t), 31000);
    while (kvt_wlease_take_any(t, &op, &l))
        ;
    cr_assert_eq(kvt_wlease_count(t), 0);
    cr_assert_eq(kvt_wlease_next_deadline(t), UINT64_MAX);
    kvt_wlease_destroy(&t);
}

// ---------------------------------------------------------------- core ----

/*  The worker's core on a SIM host device and a real CPU pool, both on a
    test clock: every report is counted by key, so a second report of any
    item, or a missing one, fails the test. */

#define BS     16
#define CS     64
#define BPC    (CS / BS)
#define NB     64 //  device blocks
#define PLANES 2
#define TOKB   16 //  bytes per token per plane (one layer)

typedef struct {
    kvt_completion_t c; //  the report (images copied into img)
    uint64_t at;        //  test clock when the core decided it
    uint8_t img[16];    //  the first bytes of a lookup report's image bitmap
} got_t;

#define SLOTS 8    //  state slots (and HBM checkpoint units)
#define SB    4096 //  bytes of one state unit

typedef struct {
    uint64_t now;                               //  the test clock (device, pool and core)
    kvt_gpu_t *gpu;                             //  SIM host device
    kvt_gpu_stream_t *ls;                       //  load lane's stream
    kvt_gpu_stream_t *ts;                       //  state lane's stream
    kvt_gpu_stream_t *ss;                       //  save lane's stream
    kvt_gpu_event_pool_t *evp[KVT_WCORE_LANES]; //  each lane's events
    kvt_lane_runner_t *lane[KVT_WCORE_LANES];   //  the lanes (inline)
    kvt_holder_t lholder[KVT_WCORE_LANES];      //  each lane's pool holder
    kvt_fence_board_t *board;                   //  the fence board (NULL unless a test adds it)
    kvt_storage_t *st;                          //  the tier (NULL in the no-tier rig)
    kvt_holder_t holder;                        //  the core's (lookups') pool holder
    kvt_wcore_t *core;                          //  under test
    got_t got[256];                             //  reports drained so far
    uint32_t ngot;                              //  entries
    uint64_t lane_deadline_ns;                  //  lanes' deadline (0: default), set before w_up
    uint64_t fence_timeout_ns;                  //  lanes' fence timeout (0: default)
    bool with_board;                            //  w_up adds a fence board
    bool no_state;                              //  w_up registers no state pools
    bool threaded[KVT_WCORE_LANES];             //  lanes that submit on their own thread
    const kvt_lane_ops_t *ops[KVT_WCORE_LANES]; //  lanes' ops (NULL: kvt_wcore_lane_ops)
} wrig_t;

static wrig_t W;
static uint64_t s_epoch; //  epoch the next w_up gives the core (0 = default)

//  The clock may be read by a lane's submitter thread (the threaded tests
//  set it with w_set_now while one runs).
static uint64_t s_now(void *arg)
{
    return __atomic_load_n(&W.now, __ATOMIC_ACQUIRE);
}

static void w_set_now(uint64_t t)
{
    __atomic_store_n(&W.now, t, __ATOMIC_RELEASE);
}

static void s_mute(void *arg, int level, const char *line)
{
}

//  pool_chunks 0: no tier. ttl_ms / renew_ns 0: defaults.
static void w_up(uint64_t bandwidth, uint32_t pool_chunks, uint64_t ttl_ms, uint64_t renew_ns)
{
    uint64_t dl = W.lane_deadline_ns, ft = W.fence_timeout_ns;
    bool board = W.with_board, no_state = W.no_state;
    bool threaded[KVT_WCORE_LANES];
    const kvt_lane_ops_t *ops[KVT_WCORE_LANES];
    memcpy(threaded, W.threaded, sizeof threaded);
    memcpy(ops, W.ops, sizeof ops);
    memset(&W, 0, sizeof W);
    W.now = 1000;
    kvt_gpu_opts_t go = {.backend = KVT_GPU_BACKEND_HOST,
                         .host_mode = KVT_GPU_HOST_SIM,
                         .now = s_now,
                         .sim_bandwidth_Bps = bandwidth,
                         .sim_entry_ns = KVT_GPU_SIM_ZERO_LATENCY, //  one cost per copy op
                         .log = s_mute};
    W.gpu = kvt_gpu_new(&go);
    cr_assert_not_null(W.gpu);
    for (int p = 0; p < PLANES; p++) {
        kvt_gpu_plane_desc_t pd = {.layers = 1, .num_blocks = NB, .block_bytes = BS * TOKB};
        cr_assert_geq(kvt_gpu_plane_add(W.gpu, &pd), 0);
    }
    kvt_gpu_state_desc_t sd = {.count = SLOTS, .state_bytes = SB};
    if (!no_state) {
        cr_assert_eq(kvt_gpu_state_add(W.gpu, KVT_GPU_STATE_SLOTS, &sd), 0);
        cr_assert_eq(kvt_gpu_state_add(W.gpu, KVT_GPU_STATE_CKPT, &sd), 0);
    }
    W.ls = kvt_gpu_stream_new(W.gpu, "load");
    W.ts = kvt_gpu_stream_new(W.gpu, "state");
    W.ss = kvt_gpu_stream_new(W.gpu, "save");
    cr_assert(W.ls && W.ts && W.ss);
    if (board)
        W.board = kvt_fence_board_new(W.gpu, 0);
    if (pool_chunks) {
        kvt_storage_config_t sc;
        kvt_storage_config_defaults(&sc);
        sc.pool.capacity_bytes = pool_chunks * BPC * kvt_gpu_block_bytes(W.gpu);
        sc.pool.align = 64;
        if (ttl_ms)
            sc.pool.ttl_ms = ttl_ms;
        sc.pool.clock = s_now;
        sc.pool.log = s_mute;
        char err[256];
        W.st = kvt_storage_new(&sc, err, sizeof err);
        cr_assert_not_null(W.st, "%s", err);
        cr_assert_eq(kvt_pool_holder_add(kvt_storage_pool(W.st), "worker", &W.holder), 0);
    }
    kvt_gpu_stream_t *streams[KVT_WCORE_LANES] = {W.ls, W.ts, W.ss};
    const char *names[KVT_WCORE_LANES] = {"load", "state", "save"};
    for (int l = 0; l < KVT_WCORE_LANES; l++) {
        W.evp[l] = kvt_gpu_event_pool_new(W.gpu);
        cr_assert_not_null(W.evp[l]);
        if (W.st)
            cr_assert_eq(kvt_pool_holder_add(kvt_storage_pool(W.st), names[l], &W.lholder[l]), 0);
        kvt_lane_cfg_t lc = {.name = names[l],
                             .stream = streams[l],
                             .evp = W.evp[l],
                             .pool = W.st ? kvt_storage_pool(W.st) : NULL,
                             .holder = W.lholder[l],
                             .ops = ops[l] ? ops[l] : &kvt_wcore_lane_ops,
                             .deadline_ns = dl,
                             .fence_timeout_ns = ft,
                             .log = s_mute};
        char lerr[128];
        W.lane[l] = kvt_lane_runner_new(&lc, threaded[l], lerr, sizeof lerr);
        cr_assert_not_null(W.lane[l], "%s", lerr);
    }
    kvt_wcore_cfg_t cc = {.rank = 1,
                          .gpu = W.gpu,
                          .board = W.board,
                          .source_safe = true,
                          .storage = W.st,
                          .holder = W.holder,
                          .ns = 7,
                          .block_size = BS,
                          .chunk_size = CS,
                          .renew_ns = renew_ns,
                          .epoch = s_epoch,
                          .log = s_mute};
    for (int l = 0; l < KVT_WCORE_LANES; l++)
        cc.lanes[l] = (kvt_wcore_lane_t){.runner = W.lane[l], .holder = W.lholder[l]};
    char err[128];
    W.core = kvt_wcore_new(&cc, err, sizeof err);
    cr_assert_not_null(W.core, "%s", err);
}

static void w_down(void)
{
    cr_assert(!W.core || kvt_wcore_pending(W.core) == 0, "a test left a job pending");
    kvt_wcore_destroy(&W.core);
    for (int l = 0; l < KVT_WCORE_LANES; l++) {
        kvt_lane_runner_destroy(&W.lane[l]);
        kvt_gpu_event_pool_destroy(&W.evp[l]);
    }
    kvt_gpu_stream_destroy(&W.ls);
    kvt_gpu_stream_destroy(&W.ts);
    kvt_gpu_stream_destroy(&W.ss);
    kvt_fence_board_destroy(&W.board);
    kvt_storage_destroy(&W.st);
    kvt_gpu_destroy(&W.gpu);
}

//  Moves the core's outbox into W.got; returns how many came.
static uint32_t w_drain(void)
{
    uint32_t n;
    const kvt_completion_t *out = kvt_wcore_outbox(W.core, &n);
    for (uint32_t i = 0; i < n; i++) {
        cr_assert_lt(W.ngot, 256);
        W.got[W.ngot].c = out[i];
        memset(W.got[W.ngot].img, 0, sizeof W.got[W.ngot].img);
        if (out[i].images)
            memcpy(W.got[W.ngot].img, out[i].images,
                   out[i].nimages < sizeof W.got[W.ngot].img ? out[i].nimages
                                                             : sizeof W.got[W.ngot].img);
        W.got[W.ngot].c.images = NULL; //  the core's copy is gone after the clear
        W.got[W.ngot++].at = W.now;
        cr_assert_eq(out[i].rank, 1, "reports carry the rank");
    }
    kvt_wcore_outbox_clear(W.core);
    return n;
}

//  Polls at every wake the core asks for until nothing is pending.
static void w_settle(void)
{
    for (int guard = 0; guard < 10000; guard++) {
        w_drain();
        uint64_t at = kvt_wcore_next_wake(W.core, W.now);
        if (at == UINT64_MAX)
            return;
        cr_assert_geq(at, W.now);
        W.now = at;
        kvt_wcore_poll(W.core, W.now);
    }
    cr_assert_fail("the core never settled");
}

//  Reports on (chan, req, key), any attempt.
static uint32_t w_count(uint8_t chan, uint64_t req, kvt_hash_t key)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < W.ngot; i++)
        n +=
            W.got[i].c.chan == chan && W.got[i].c.op.req == req && kvt_hash_eq(W.got[i].c.key, key);
    return n;
}

static const got_t *w_find(uint8_t chan, uint64_t req, kvt_hash_t key)
{
    for (uint32_t i = 0; i < W.ngot; i++)
        if (W.got[i].c.chan == chan && W.got[i].c.op.req == req && kvt_hash_eq(W.got[i].c.key, key))
            return &W.got[i];
    return NULL;
}

static kvt_hash_t K(uint64_t i)
{
    return (kvt_hash_t){.hi = 0xABCDull + i, .lo = i * 977 + 1};
}

static const kvt_hash_t ZERO = {0, 0};

//  Exactly one report for the load `req`, with this outcome.
static const got_t *w_load_once(uint64_t req, bool ok, uint32_t detail)
{
    cr_assert_eq(w_count(KVT_CHAN_LOAD, req, ZERO), 1, "load %llu reported %u times",
                 (unsigned long long)req, w_count(KVT_CHAN_LOAD, req, ZERO));
    const got_t *g = w_find(KVT_CHAN_LOAD, req, ZERO);
    cr_assert_eq(g->c.ok, ok, "load %llu ok=%d detail %u", (unsigned long long)req, g->c.ok,
                 g->c.detail);
    cr_assert_eq(g->c.detail, detail, "load %llu detail %u, expected %u", (unsigned long long)req,
                 g->c.detail, detail);
    return g;
}

//  Exactly one report for each chunk K(key0 ..) of the save `req`.
static void w_save_once(uint64_t req, uint64_t key0, uint32_t n, bool ok, uint32_t detail)
{
    for (uint32_t i = 0; i < n; i++) {
        cr_assert_eq(w_count(KVT_CHAN_SAVE, req, K(key0 + i)), 1, "chunk %u reported %u times", i,
                     w_count(KVT_CHAN_SAVE, req, K(key0 + i)));
        const got_t *g = w_find(KVT_CHAN_SAVE, req, K(key0 + i));
        cr_assert_eq(g->c.ok, ok, "chunk %u ok=%d detail %u", i, g->c.ok, g->c.detail);
        cr_assert_eq(g->c.detail, detail, "chunk %u detail %u, expected %u", i, g->c.detail,
                     detail);
    }
}

//  A spec over [start, start + nchunks * CS) with keys K(key0 ..).
typedef struct {
    kvt_hash_t keys[16]; //  chunk keys
    uint32_t blocks[64]; //  blocks
    kvt_load_spec_t sp;  //  the spec (points into the arrays above)
} wspec_t;

static void w_spec(wspec_t *s, uint64_t req, uint32_t start, uint32_t nchunks,
                   const uint32_t *blocks, uint64_t key0)
{
    memset(s, 0, sizeof *s);
    for (uint32_t i = 0; i < nchunks; i++)
        s->keys[i] = K(key0 + i);
    memcpy(s->blocks, blocks, nchunks * BPC * sizeof(uint32_t));
    s->sp = (kvt_load_spec_t){.op = {req, 1},
                              .start = start,
                              .end = start + nchunks * CS,
                              .keys = s->keys,
                              .nkeys = nchunks,
                              .blocks = s->blocks,
                              .nblocks = nchunks * BPC};
}

static void w_fill(const uint32_t *blocks, uint32_t n, uint64_t key0)
{
    for (uint32_t b = 0; b < n; b++)
        for (uint32_t p = 0; p < PLANES; p++)
            kvt_oracle_fill(kvt_gpu_plane_ptr(W.gpu, p, 0, blocks[b]), BS * TOKB, K(key0 + b / BPC),
                            b % BPC, p, 1);
}

static bool w_check(const uint32_t *blocks, uint32_t n, uint64_t key0)
{
    for (uint32_t b = 0; b < n; b++)
        for (uint32_t p = 0; p < PLANES; p++)
            if (!kvt_oracle_check(kvt_gpu_plane_ptr(W.gpu, p, 0, blocks[b]), BS * TOKB,
                                  K(key0 + b / BPC), b % BPC, p, 1))
                return false;
    return true;
}

static kvt_pool_stats_t w_pool(void)
{
    kvt_pool_stats_t ps;
    kvt_pool_stats(kvt_storage_pool(W.st), &ps);
    return ps;
}

//  Nothing of the core's is left in the pool.
static void w_pool_clean(void)
{
    kvt_pool_stats_t ps = w_pool();
    cr_assert_eq(ps.leases_active, 0, "%llu leases left", (unsigned long long)ps.leases_active);
    cr_assert_eq(ps.pinned_bytes, 0);
    cr_assert_eq(ps.objects_writing, 0, "%llu reservations left",
                 (unsigned long long)ps.objects_writing);
}

static kvt_wcore_stats_t w_stats(void)
{
    kvt_wcore_stats_t s;
    kvt_wcore_stats(W.core, &s);
    return s;
}

//  Saves nchunks chunks from SRC (filled with K(key0 ..)) and settles them.
static void w_store(uint64_t req, const uint32_t *blocks, uint32_t nchunks, uint64_t key0)
{
    w_fill(blocks, nchunks * BPC, key0);
    wspec_t s;
    w_spec(&s, req, 0, nchunks, blocks, key0);
    kvt_wcore_save(W.core, &s.sp, W.now);
    w_settle();
    w_save_once(req, key0, nchunks, true, KVT_DETAIL_OK);
}

static const uint32_t SRC[8] = {3, 9, 1, 40, 22, 23, 5, 60};
static const uint32_t DST[8] = {11, 12, 13, 14, 30, 31, 32, 33};

Test(wcore, save_and_load_report_once_each_after_their_copies)
{
    w_up(1000000ull, 16, 0, 0); //  1 MB/s: a 2 KiB chunk copy takes ~2 ms
    uint64_t cost = kvt_gpu_sim_cost_ns(W.gpu, BPC * kvt_gpu_block_bytes(W.gpu));
    w_fill(SRC, 8, 100);
    wspec_t s;
    w_spec(&s, 1, 0, 2, SRC, 100);
    uint64_t t0 = W.now;
    kvt_wcore_save(W.core, &s.sp, W.now);
    cr_assert_eq(w_drain(), 0, "nothing is reported before the gathers landed");
    cr_assert_eq(kvt_wcore_pending(W.core), 1);
    cr_assert_eq(kvt_wcore_next_wake(W.core, W.now), t0 + 2 * cost,
                 "the core wakes when the device says the copies land");
    //  A poll before they landed reports nothing (rule L2).
    W.now = t0 + cost;
    kvt_wcore_poll(W.core, W.now);
    cr_assert_eq(w_drain(), 0, "a save reported before its gathers landed");
    w_settle();
    w_save_once(1, 100, 2, true, KVT_DETAIL_OK);
    cr_assert_geq(w_find(KVT_CHAN_SAVE, 1, K(100))->at - t0, 2 * cost);
    w_spec(&s, 2, 0, 2, DST, 100);
    t0 = W.now;
    kvt_wcore_load(W.core, &s.sp, W.now);
    cr_assert_eq(w_drain(), 0);
    W.now = t0 + 2 * cost - 1;
    kvt_wcore_poll(W.core, W.now);
    cr_assert_eq(w_drain(), 0, "a load reported before its scatters landed");
    w_settle();
    const got_t *g = w_load_once(2, true, KVT_DETAIL_OK);
    cr_assert_geq(g->at - t0, 2 * cost, "the load report preceded its scatters");
    cr_assert(w_check(DST, 8, 100), "restored bytes differ");
    cr_assert_eq(W.ngot, 4, "one report per item and the save's source_safe, nothing else");
    cr_assert_eq(w_count(KVT_CHAN_SOURCE_SAFE, 1, K(101)), 1,
                 "source_safe keyed by the last chunk");
    kvt_wcore_stats_t st = w_stats();
    cr_assert_eq(st.saves_ok, 2);
    cr_assert_eq(st.loads_ok, 1);
    cr_assert_eq(st.load_chunks, 2);
    cr_assert_eq(st.duplicates, 0);
    w_pool_clean();
    w_down();
}

Test(wcore, rule_L4_bad_specs_are_refused_naming_what_is_wrong)
{
    w_up(25000000000ull, 16, 0, 0);
    struct {
        uint32_t start, nchunks; //  range
        int tweak;               //  0 none, 1 one key less, 2 one block less, 3 block id
                                 //  beyond, 4 a block named twice, 5 empty range
        const char *why;         //  expected reason (substring)
    } cases[] = {
        {16, 2, 0, "chunk grid"},       {0, 2, 1, "key count"},   {0, 2, 2, "block count"},
        {0, 2, 3, "beyond the device"}, {0, 2, 4, "named twice"}, {64, 1, 5, "chunk grid"},
    };
    uint64_t req = 10;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++, req++) {
        wspec_t s;
        w_spec(&s, req, cases[i].start, cases[i].nchunks, SRC, 200 + 10 * i);
        switch (cases[i].tweak) {
        case 1:
            s.sp.nkeys--;
            break;
        case 2:
            s.sp.nblocks--;
            break;
        case 3:
            s.blocks[5] = NB;
            break;
        case 4:
            s.blocks[6] = s.blocks[1];
            break;
        case 5:
            s.sp.end = s.sp.start;
            break;
        }
        const char *why = kvt_wcore_check_spec(W.core, &s.sp);
        cr_assert_not_null(why, "case %zu accepted", i);
        cr_assert(strstr(why, cases[i].why), "case %zu: '%s'", i, why);
        kvt_wcore_load(W.core, &s.sp, W.now);
        cr_assert_eq(w_drain(), 1, "a refused load reports at once");
        w_load_once(req, false, KVT_DETAIL_INVALID);
        kvt_wcore_save(W.core, &s.sp, W.now);
        w_drain();
        w_save_once(req, 200 + 10 * i, s.sp.nkeys, false, KVT_DETAIL_INVALID);
    }
    kvt_gpu_stats_t gs;
    kvt_gpu_stats(W.gpu, &gs);
    cr_assert_eq(gs.ops_queued, 0, "a refused spec queues no copy");
    kvt_wcore_stats_t st = w_stats();
    cr_assert_eq(st.loads_refused, 6);
    cr_assert_eq(st.saves_refused, 6);
    cr_assert_eq(kvt_wcore_pending(W.core), 0);
    //  The duplicate check leaves nothing behind: a good spec over the
    //  same blocks is accepted.
    wspec_t s;
    w_spec(&s, 99, 0, 2, SRC, 300);
    cr_assert_null(kvt_wcore_check_spec(W.core, &s.sp));
    w_pool_clean();
    w_down();
}

Test(wcore, rule_L1_missing_chunks_fail_the_load_once_without_a_copy)
{
    w_up(25000000000ull, 16, 0, 0);
    wspec_t s;
    w_spec(&s, 5, 0, 2, DST, 900);
    kvt_wcore_load(W.core, &s.sp, W.now);
    cr_assert_eq(w_drain(), 1, "nothing was queued: the miss reports at once");
    w_settle();
    w_load_once(5, false, KVT_DETAIL_MISS);
    kvt_gpu_stats_t gs;
    kvt_gpu_stats(W.gpu, &gs);
    cr_assert_eq(gs.scatters, 0);
    w_pool_clean();
    w_down();
}

Test(wcore, a_partly_missing_load_fails_at_once_without_a_copy_and_releases_its_leases)
{
    w_up(1000000ull, 16, 0, 0);
    //  Chunk 1 is stored, chunk 0 is not: every read is decided before any
    //  copy is queued, so the load fails at once and the lease it took on
    //  chunk 1 goes back.
    w_fill(SRC + 4, 4, 401);
    wspec_t s;
    w_spec(&s, 1, 0, 1, SRC + 4, 401);
    kvt_wcore_save(W.core, &s.sp, W.now);
    w_settle();
    w_spec(&s, 2, 0, 2, DST, 400);
    kvt_wcore_load(W.core, &s.sp, W.now);
    cr_assert_eq(w_drain(), 1, "the failed load reports at once");
    w_load_once(2, false, KVT_DETAIL_MISS);
    cr_assert_eq(kvt_wcore_pending(W.core), 0);
    kvt_gpu_stats_t gs;
    kvt_gpu_stats(W.gpu, &gs);
    cr_assert_eq(gs.scatters, 0, "no copy for a load that cannot complete");
    w_pool_clean();
    cr_assert_eq(w_stats().loads_failed, 1);
    w_down();
}

Test(wcore, a_short_object_fails_the_load_as_invalid_and_releases_its_lease)
{
    w_up(25000000000ull, 16, 0, 0);
    char small[100] = {0};
    cr_assert_eq(kvt_storage_put(W.st, 7, K(600), KVT_OBJ_KV, small, sizeof small), 0);
    wspec_t s;
    w_spec(&s, 3, 0, 1, DST, 600);
    kvt_wcore_load(W.core, &s.sp, W.now);
    w_settle();
    w_load_once(3, false, KVT_DETAIL_INVALID);
    w_pool_clean();
    w_down();
}

Test(wcore, a_failed_copy_reports_io_once_and_gives_the_memory_back)
{
    w_up(25000000000ull, 16, 0, 0);
    w_store(1, SRC, 2, 500);
    //  The load's second scatter fails on the device.
    cr_assert_eq(kvt_gpu_stream_inject(W.ls, KVT_GPU_FAULT_FAIL, 1), 0);
    wspec_t s;
    w_spec(&s, 2, 0, 2, DST, 500);
    kvt_wcore_load(W.core, &s.sp, W.now);
    cr_assert_eq(w_drain(), 0);
    w_settle();
    w_load_once(2, false, KVT_DETAIL_IO);
    w_pool_clean();
    //  A save whose gathers fail: each chunk reports IO once, nothing is
    //  committed.
    cr_assert_eq(kvt_gpu_stream_inject(W.ss, KVT_GPU_FAULT_FAIL, 2), 0);
    w_fill(SRC, 8, 700);
    w_spec(&s, 3, 0, 2, SRC, 700);
    kvt_wcore_save(W.core, &s.sp, W.now);
    w_settle();
    w_save_once(3, 700, 2, false, KVT_DETAIL_IO);
    cr_assert_not(kvt_pool_contains(kvt_storage_pool(W.st), 7, K(700), KVT_OBJ_KV));
    w_pool_clean();
    kvt_wcore_stats_t st = w_stats();
    cr_assert_eq(st.copy_errors, 2, "one failed job per stream");
    cr_assert_eq(st.loads_failed, 1);
    cr_assert_eq(st.saves_failed, 2);
    w_down();
}

Test(wcore, shutdown_reports_every_pending_item_once)
{
    w_up(1000000ull, 16, 0, 0);
    w_store(1, SRC, 1, 800);
    wspec_t ld, sv;
    w_spec(&ld, 2, 0, 1, DST, 800);
    kvt_wcore_load(W.core, &ld.sp, W.now);
    w_fill(SRC + 4, 4, 810);
    w_spec(&sv, 3, 0, 1, SRC + 4, 810);
    kvt_wcore_save(W.core, &sv.sp, W.now);
    cr_assert_eq(kvt_wcore_pending(W.core), 2);
    cr_assert_eq(w_drain(), 0);
    //  What the shell's stop does: shut down, wait for the streams, poll.
    cr_assert_eq(kvt_wcore_shutdown(W.core, W.now), 2);
    w_drain();
    w_load_once(2, false, KVT_DETAIL_SHUTDOWN);
    w_save_once(3, 810, 1, false, KVT_DETAIL_SHUTDOWN);
    const got_t *safe = w_find(KVT_CHAN_SOURCE_SAFE, 3, K(810));
    cr_assert(safe && !safe->c.ok, "its gather may still read the sources: not safe");
    cr_assert_eq(safe->c.detail, KVT_DETAIL_SHUTDOWN, "the cause is the drain, not a timeout");
    cr_assert_eq(w_stats().quarantined, 2, "memory under the copies is kept until they end");
    cr_assert_geq(kvt_gpu_stream_synchronize(W.ls), 0);
    cr_assert_geq(kvt_gpu_stream_synchronize(W.ss), 0);
    kvt_wcore_poll(W.core, W.now);
    cr_assert_eq(kvt_wcore_next_wake(W.core, W.now), UINT64_MAX);
    kvt_wcore_poll(W.core, W.now + 1000000000ull);
    cr_assert_eq(w_drain(), 0, "nothing reports twice");
    w_pool_clean();
    cr_assert_not(kvt_pool_contains(kvt_storage_pool(W.st), 7, K(810), KVT_OBJ_KV));
    kvt_wcore_stats_t st = w_stats();
    cr_assert_eq(st.drained_at_stop, 2);
    cr_assert_eq(st.quarantined, 0, "the drain gave the memory back");
    w_down();
}

Test(wcore, rule_X4_an_undrained_stream_keeps_its_memory_and_still_reports)
{
    w_up(1000000ull, 16, 0, 0);
    w_store(1, SRC, 1, 850);
    cr_assert_eq(kvt_gpu_stream_inject(W.ls, KVT_GPU_FAULT_STALL, 0), 0);
    wspec_t ld;
    w_spec(&ld, 2, 0, 1, DST, 850);
    kvt_wcore_load(W.core, &ld.sp, W.now);
    W.now += 50000000ull;
    kvt_wcore_poll(W.core, W.now);
    cr_assert_eq(w_drain(), 0, "a stalled copy does not settle");
    cr_assert_eq(kvt_wcore_shutdown(W.core, W.now), 1);
    w_drain();
    w_load_once(2, false, KVT_DETAIL_SHUTDOWN);
    cr_assert_eq(w_stats().quarantined, 1, "the lease a running copy reads is kept");
    cr_assert_eq(w_pool().leases_active, 1);
    //  The drain's poll and the lanes' destruction leave it to the holder.
    kvt_wcore_poll(W.core, W.now);
    kvt_wcore_destroy(&W.core);
    for (int l = 0; l < KVT_WCORE_LANES; l++)
        kvt_lane_runner_destroy(&W.lane[l]);
    cr_assert_eq(w_pool().leases_active, 1, "nothing is freed under a copy that never ended");
    cr_assert_eq(kvt_gpu_stream_inject(W.ls, KVT_GPU_FAULT_NONE, 0), 0);
    w_down();
}

Test(wcore, a_lease_reclaimed_under_the_copy_fails_the_load_with_timeout)
{
    //  100 kB/s: a chunk takes ~20 ms; the pool TTL is 5 ms and the core
    //  would renew only after 10 s.
    w_up(100000ull, 16, 5, 10000000000ull);
    w_store(1, SRC, 1, 1100);
    wspec_t ld;
    w_spec(&ld, 2, 0, 1, DST, 1100);
    kvt_wcore_load(W.core, &ld.sp, W.now);
    W.now += 10000000ull;
    kvt_wcore_poll(W.core, W.now); //  not landed; the pool reclaims the expired lease
    cr_assert_eq(w_drain(), 0);
    w_settle();
    w_load_once(2, false, KVT_DETAIL_TIMEOUT);
    w_pool_clean();
    w_down();
}

Test(wcore, pending_handles_are_renewed_through_a_copy_longer_than_the_ttl)
{
    w_up(100000ull, 16, 5, 1000000ull); //  renew every 1 ms
    w_store(1, SRC, 1, 1200);
    wspec_t ld;
    w_spec(&ld, 2, 0, 1, DST, 1200);
    uint64_t t0 = W.now;
    kvt_wcore_load(W.core, &ld.sp, W.now);
    cr_assert_eq(kvt_wcore_next_wake(W.core, W.now), t0 + 1000000ull,
                 "the wake comes no later than the renewal");
    w_settle();
    w_load_once(2, true, KVT_DETAIL_OK);
    cr_assert(w_check(DST, 4, 1200));
    w_pool_clean();
    w_down();
}

Test(wcore, a_repeated_spec_runs_once)
{
    w_up(1000000ull, 16, 0, 0);
    w_fill(SRC, 8, 900);
    wspec_t s;
    w_spec(&s, 1, 0, 2, SRC, 900);
    kvt_wcore_save(W.core, &s.sp, W.now);
    kvt_wcore_save(W.core, &s.sp, W.now); //  the duplicated message
    w_settle();
    w_save_once(1, 900, 2, true, KVT_DETAIL_OK);
    w_spec(&s, 2, 0, 2, DST, 900);
    kvt_wcore_load(W.core, &s.sp, W.now);
    w_settle();
    kvt_wcore_load(W.core, &s.sp, W.now); //  after the first settled
    w_settle();
    w_load_once(2, true, KVT_DETAIL_OK);
    cr_assert_eq(W.ngot, 4, "two chunks, their source_safe, the load");
    kvt_gpu_stats_t gs;
    kvt_gpu_stats(W.gpu, &gs);
    cr_assert_eq(gs.gathers, 2, "the second save spec queued nothing");
    cr_assert_eq(gs.scatters, 2, "the second load spec queued nothing");
    kvt_wcore_stats_t st = w_stats();
    cr_assert_eq(st.duplicates, 3, "two chunks and one load dropped");
    cr_assert_eq(st.saves_ok, 2);
    cr_assert_eq(st.loads_ok, 1);
    //  A new attempt is a new item.
    s.sp.attempt = 1;
    kvt_wcore_load(W.core, &s.sp, W.now);
    w_settle();
    cr_assert_eq(W.ngot, 5);
    w_pool_clean();
    w_down();
}

Test(wcore, a_chunk_the_pool_holds_reports_ok_without_a_copy)
{
    w_up(25000000000ull, 16, 0, 0);
    w_store(1, SRC, 1, 1300);
    wspec_t s;
    w_spec(&s, 2, 0, 1, SRC, 1300);
    kvt_wcore_save(W.core, &s.sp, W.now);
    cr_assert_eq(w_drain(), 2, "reported at once, with its source_safe");
    w_save_once(2, 1300, 1, true, KVT_DETAIL_OK);
    cr_assert_eq(w_stats().saves_present, 1);
    w_pool_clean();
    w_down();
}

Test(wcore, a_full_pool_fails_the_save_with_no_space_once_per_chunk)
{
    w_up(25000000000ull, 2, 0, 0);
    //  Two chunks fill the pool; pin them with leases so nothing evicts.
    w_store(1, SRC, 2, 1400);
    kvt_lease_t l[2];
    kvt_obj_view_t v;
    for (int i = 0; i < 2; i++)
        cr_assert_eq(kvt_storage_get(W.st, 7, K(1400 + i), KVT_OBJ_KV, W.holder, &l[i], &v), 0);
    w_fill(DST, 8, 1500);
    wspec_t s;
    w_spec(&s, 2, 0, 2, DST, 1500);
    kvt_wcore_save(W.core, &s.sp, W.now);
    w_settle();
    w_save_once(2, 1500, 2, false, KVT_DETAIL_NO_SPACE);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(kvt_storage_release(W.st, &l[i]), 0);
    w_pool_clean();
    w_down();
}

Test(wcore, without_a_tier_every_item_fails_once)
{
    w_up(25000000000ull, 0, 0, 0);
    wspec_t s;
    w_spec(&s, 1, 0, 2, SRC, 1600);
    kvt_wcore_load(W.core, &s.sp, W.now);
    kvt_wcore_save(W.core, &s.sp, W.now);
    w_drain();
    w_load_once(1, false, KVT_DETAIL_MISS);
    w_save_once(1, 1600, 2, false, KVT_DETAIL_NO_SPACE);
    cr_assert_eq(W.ngot, 4, "the load, two chunks, the save's source_safe");
    w_down();
}

// ------------------------------------------------------ touch, lookup ----

static kvt_touch_msg_t w_touch(kvt_hash_t hash, uint64_t round)
{
    return (kvt_touch_msg_t){.hash = hash, .round = round};
}

//  Exactly one report on each touch channel for (hash, round), with this
//  answer; returns the `touch` channel's report.
static const got_t *w_touch_once(kvt_hash_t hash, uint64_t round, kvt_touch_t ans)
{
    const got_t *t = NULL;
    for (int ch = KVT_CHAN_TOUCH; ch <= KVT_CHAN_TOUCH_REFRESH; ch++) {
        uint32_t n = 0;
        const got_t *g = NULL;
        for (uint32_t i = 0; i < W.ngot; i++)
            if (W.got[i].c.chan == ch && W.got[i].c.op.req == round &&
                kvt_hash_eq(W.got[i].c.key, hash)) {
                n++;
                g = &W.got[i];
            }
        cr_assert_eq(n, 1, "channel %d: %u reports for round %llu", ch, n,
                     (unsigned long long)round);
        cr_assert_eq(g->c.op.gen, KVT_TOUCH_GEN);
        cr_assert_eq(g->c.touch, ans, "channel %d: answer %u, expected %u", ch, g->c.touch, ans);
        bool ok = ch == KVT_CHAN_TOUCH ? ans != KVT_TOUCH_GONE : ans == KVT_TOUCH_REFRESHED;
        cr_assert_eq(g->c.ok, ok, "channel %d, answer %u: ok=%d", ch, ans, g->c.ok);
        cr_assert_eq(g->c.detail == KVT_DETAIL_OK, ok);
        if (ch == KVT_CHAN_TOUCH)
            t = g;
    }
    return t;
}

Test(wcore, touch_answers_refreshed_present_and_gone_on_both_channels)
{
    w_up(25000000000ull, 16, 0, 0);
    uint8_t img[256] = {1};
    //  H(1): a state image in the pool; H(2): being written (present, not
    //  readable); H(3): nowhere.
    cr_assert_eq(kvt_storage_put(W.st, 7, H(1), KVT_OBJ_STATE, img, sizeof img), 0);
    kvt_resv_t resv = {0};
    void *ptr;
    cr_assert_eq(
        kvt_storage_reserve(W.st, 7, H(2), KVT_OBJ_STATE, sizeof img, W.holder, &resv, &ptr), 0);
    kvt_touch_msg_t t1 = w_touch(H(1), 5), t2 = w_touch(H(2), 5), t3 = w_touch(H(3), 5);
    kvt_wcore_touch(W.core, &t1, W.now);
    kvt_wcore_touch(W.core, &t2, W.now);
    kvt_wcore_touch(W.core, &t3, W.now);
    cr_assert_eq(w_drain(), 6, "two reports per touch");
    w_touch_once(H(1), 5, KVT_TOUCH_REFRESHED);
    w_touch_once(H(2), 5, KVT_TOUCH_PRESENT);
    const got_t *g = w_touch_once(H(3), 5, KVT_TOUCH_GONE);
    cr_assert_eq(g->c.detail, KVT_DETAIL_MISS);
    cr_assert_eq(g->c.epoch, 1, "every report carries the epoch");
    kvt_wcore_stats_t st = w_stats();
    cr_assert_eq(st.touches, 3);
    cr_assert_eq(st.touches_refreshed, 1);
    cr_assert_eq(st.touches_present, 1);
    cr_assert_eq(st.touches_gone, 1);
    cr_assert_eq(st.duplicates, 0);
    //  The next round is a new id; a repeated round runs once.
    kvt_touch_msg_t t1b = w_touch(H(1), 6);
    kvt_wcore_touch(W.core, &t1b, W.now);
    kvt_wcore_touch(W.core, &t1b, W.now);
    cr_assert_eq(w_drain(), 2);
    w_touch_once(H(1), 6, KVT_TOUCH_REFRESHED);
    cr_assert_eq(w_stats().duplicates, 1);
    kvt_storage_abort(W.st, &resv);
    w_pool_clean();
    w_down();
}

Test(wcore, touch_with_chunk_keys_reports_the_worst_chunk)
{
    w_up(25000000000ull, 16, 0, 0);
    w_store(1, SRC, 2, 100);
    kvt_hash_t keys[3] = {K(100), K(101), K(102)};
    kvt_touch_msg_t t = {.hash = H(9), .round = 1, .keys = keys, .nkeys = 2};
    kvt_wcore_touch(W.core, &t, W.now);
    t.round = 2;
    t.nkeys = 3; //  K(102) was never stored
    kvt_wcore_touch(W.core, &t, W.now);
    w_drain();
    w_touch_once(H(9), 1, KVT_TOUCH_REFRESHED);
    w_touch_once(H(9), 2, KVT_TOUCH_GONE);
    w_down();
}

//  Exactly one lookup report for `req`.
static const got_t *w_lookup_once(uint64_t req, bool ok, uint32_t held)
{
    uint32_t n = 0;
    const got_t *g = NULL;
    for (uint32_t i = 0; i < W.ngot; i++)
        if (W.got[i].c.chan == KVT_CHAN_LOOKUP && W.got[i].c.op.req == req) {
            n++;
            g = &W.got[i];
        }
    cr_assert_eq(n, 1, "lookup %llu reported %u times", (unsigned long long)req, n);
    cr_assert_eq(g->c.ok, ok, "lookup %llu ok=%d detail %u", (unsigned long long)req, g->c.ok,
                 g->c.detail);
    cr_assert_eq(g->c.held, held, "lookup %llu held %u, expected %u", (unsigned long long)req,
                 g->c.held, held);
    cr_assert(kvt_hash_is_zero(g->c.key));
    return g;
}

//  Stores chunks K(key0 .. key0 + n) directly, chunk i with the image of
//  its checkpoint when bit i of `imaged` is set.
static void w_put_chunks(uint64_t key0, uint32_t n, uint32_t imaged)
{
    size_t bytes = BPC * kvt_gpu_block_bytes(W.gpu);
    uint8_t buf[BPC * BS * TOKB * PLANES + 64];
    cr_assert_leq(bytes + 64, sizeof buf);
    memset(buf, 7, sizeof buf);
    for (uint32_t i = 0; i < n; i++) {
        bool img = (imaged >> i) & 1;
        cr_assert_eq(kvt_storage_put(W.st, 7, K(key0 + i), img ? KVT_OBJ_KV_STATE : KVT_OBJ_KV, buf,
                                     img ? bytes + 64 : bytes),
                     0);
    }
}

static kvt_lookup_t w_lookup(uint64_t req, kvt_hash_t *keys, uint32_t n, bool pin, uint32_t ttl_ms)
{
    return (kvt_lookup_t){.op = {req, 1}, .keys = keys, .nkeys = n, .pin = pin, .ttl_ms = ttl_ms};
}

Test(wcore, lookup_counts_the_leading_chunks_held_and_marks_those_with_an_image)
{
    w_up(25000000000ull, 16, 0, 0);
    //  Chunks 0..4 stored, 1 and 3 with images; chunk 5 missing, 6 stored.
    w_put_chunks(200, 5, 0x0a);
    w_put_chunks(206, 1, 0x01);
    kvt_hash_t keys[7];
    for (uint32_t i = 0; i < 7; i++)
        keys[i] = K(200 + i);
    kvt_lookup_t l = w_lookup(1, keys, 7, false, 0);
    kvt_wcore_lookup(W.core, &l, W.now);
    w_drain();
    const got_t *g = w_lookup_once(1, true, 5);
    cr_assert_eq(g->c.nimages, 1);
    cr_assert_eq(g->img[0], 0x0a, "chunks 1 and 3 carry images; 6 is past the held prefix");
    cr_assert_eq(g->c.epoch, 1);
    cr_assert_eq(w_pool().leases_active, 0, "an unpinned lookup holds nothing");
    cr_assert_eq(w_stats().lookup_pins, 0);
    //  A repeated lookup runs once.
    kvt_wcore_lookup(W.core, &l, W.now);
    cr_assert_eq(w_drain(), 0);
    cr_assert_eq(w_stats().duplicates, 1);
    w_down();
}

//  Sets up a pinned lookup `req` over stored chunks K(300 ..): returns the
//  load spec that uses it (marked lookup).
static void w_pinned(wspec_t *ld, uint64_t req, uint32_t ttl_ms)
{
    w_store(req + 100, SRC, 2, 300);
    kvt_hash_t keys[2] = {K(300), K(301)};
    kvt_lookup_t l = w_lookup(req, keys, 2, true, ttl_ms);
    kvt_wcore_lookup(W.core, &l, W.now);
    w_drain();
    w_lookup_once(req, true, 2);
    cr_assert_eq(w_pool().leases_active, 1, "the held chunks are pinned under one lease");
    cr_assert_eq(w_stats().lookup_leases, 1);
    w_spec(ld, req, 0, 2, DST, 300);
    ld->sp.lookup = true;
}

//  The lookup lease was released exactly once, on the named path.
static void w_released_once(uint64_t load, uint64_t msg, uint64_t ttl, uint64_t none)
{
    kvt_wcore_stats_t st = w_stats();
    cr_assert_eq(st.lookup_pins, 1);
    cr_assert_eq(st.lookup_rel_load, load, "released by the load %llu times",
                 (unsigned long long)st.lookup_rel_load);
    cr_assert_eq(st.lookup_rel_msg, msg, "released by LookupRelease %llu times",
                 (unsigned long long)st.lookup_rel_msg);
    cr_assert_eq(st.lookup_rel_ttl, ttl, "released by the TTL %llu times",
                 (unsigned long long)st.lookup_rel_ttl);
    cr_assert_eq(st.lookup_rel_stop, 0);
    cr_assert_eq(st.lookup_rel_none, none, "%llu releases found nothing",
                 (unsigned long long)st.lookup_rel_none);
    cr_assert_eq(st.lookup_rel_stale, 0);
    cr_assert_eq(st.lookup_leases, 0);
    cr_assert_eq(st.duplicates, 0, "nothing dropped as a duplicate");
}

Test(wcore, a_pinned_lookup_lease_is_released_once_by_the_load_that_uses_it)
{
    w_up(25000000000ull, 16, 0, 0);
    wspec_t ld;
    w_pinned(&ld, 1, 100);
    kvt_wcore_load(W.core, &ld.sp, W.now);
    cr_assert_eq(w_stats().lookup_rel_load, 1, "released once the load's reads hold leases");
    w_settle();
    w_load_once(1, true, KVT_DETAIL_OK);
    cr_assert(w_check(DST, 8, 300));
    //  A late LookupRelease and the TTL find nothing more to release.
    kvt_wcore_lookup_release(W.core, (kvt_opid_t){1, 1});
    W.now += 1000000000ull;
    kvt_wcore_poll(W.core, W.now);
    w_released_once(1, 0, 0, 1);
    w_pool_clean();
    w_down();
}

Test(wcore, a_pinned_lookup_lease_is_released_once_by_lookup_release)
{
    w_up(25000000000ull, 16, 0, 0);
    wspec_t ld;
    w_pinned(&ld, 2, 100);
    kvt_wcore_lookup_release(W.core, (kvt_opid_t){2, 1});
    cr_assert_eq(w_pool().leases_active, 0);
    //  The load that would have used it, and the TTL, release nothing.
    kvt_wcore_load(W.core, &ld.sp, W.now);
    w_settle();
    w_load_once(2, true, KVT_DETAIL_OK);
    W.now += 1000000000ull;
    kvt_wcore_poll(W.core, W.now);
    w_released_once(0, 1, 0, 1);
    w_pool_clean();
    w_down();
}

Test(wcore, a_pinned_lookup_lease_is_released_once_by_its_ttl)
{
    w_up(25000000000ull, 16, 0, 0);
    wspec_t ld;
    w_pinned(&ld, 3, 50);
    uint64_t t0 = W.now; //  the lookup ran now
    cr_assert_leq(kvt_wcore_next_wake(W.core, W.now), t0 + 50000000ull,
                  "the core wakes for the lease's TTL");
    w_settle(); //  polls at every wake until nothing is pending or pinned
    cr_assert_geq(W.now, t0 + 50000000ull, "not before the TTL");
    cr_assert_eq(w_pool().leases_active, 0);
    kvt_wcore_load(W.core, &ld.sp, W.now);
    w_settle();
    w_load_once(3, true, KVT_DETAIL_OK);
    kvt_wcore_lookup_release(W.core, (kvt_opid_t){3, 1});
    w_released_once(0, 0, 1, 2);
    w_pool_clean();
    w_down();
}

Test(wcore, shutdown_releases_pinned_lookup_leases)
{
    w_up(25000000000ull, 16, 0, 0);
    wspec_t ld;
    w_pinned(&ld, 4, 0); //  the worker's default TTL
    cr_assert_eq(kvt_wcore_shutdown(W.core, W.now), 0, "no item was pending");
    kvt_wcore_stats_t st = w_stats();
    cr_assert_eq(st.lookup_rel_stop, 1);
    cr_assert_eq(st.lookup_leases, 0);
    w_pool_clean();
    w_down();
}

Test(wcore, a_pinned_lookup_keeps_its_chunks_through_pool_pressure)
{
    w_up(25000000000ull, 4, 0, 0);
    wspec_t ld;
    w_pinned(&ld, 5, 0);
    //  Four more chunks into a four-chunk pool: only the unpinned can go.
    w_put_chunks(400, 2, 0);
    kvt_pool_t *pool = kvt_storage_pool(W.st);
    cr_assert(kvt_pool_contains(pool, 7, K(300), KVT_OBJ_KV));
    cr_assert(kvt_pool_contains(pool, 7, K(301), KVT_OBJ_KV));
    kvt_wcore_lookup_release(W.core, (kvt_opid_t){5, 1});
    w_put_chunks(410, 4, 0);
    cr_assert_not(kvt_pool_contains(pool, 7, K(300), KVT_OBJ_KV), "unpinned, it was evicted");
    w_pool_clean();
    w_down();
}

Test(wcore, every_report_carries_the_configured_epoch)
{
    s_epoch = 9;
    w_up(25000000000ull, 16, 0, 0);
    s_epoch = 0;
    w_store(1, SRC, 1, 500);
    kvt_touch_msg_t t = w_touch(H(1), 1);
    kvt_wcore_touch(W.core, &t, W.now);
    kvt_lookup_t l = w_lookup(2, NULL, 0, false, 0);
    kvt_wcore_lookup(W.core, &l, W.now);
    w_drain();
    cr_assert_eq(W.ngot, 5, "store, source_safe, two touch reports, lookup");
    for (uint32_t i = 0; i < W.ngot; i++)
        cr_assert_eq(W.got[i].c.epoch, 9, "report %u epoch %llu", i,
                     (unsigned long long)W.got[i].c.epoch);
    w_down();
}

// ------------------------------------------------- hybrid loads (L1-L4) ----

static const kvt_hash_t ST = {0x5151, 0xA0A0}; //  the state hash of the tests' checkpoint

//  Polls at every wake the core asks for until `until` (for a rig whose
//  stalled stream never lets the core settle).
static void w_run_until(uint64_t until)
{
    for (;;) {
        w_drain();
        uint64_t at = kvt_wcore_next_wake(W.core, W.now);
        if (at > until) {
            W.now = until;
            kvt_wcore_poll(W.core, W.now);
            w_drain();
            return;
        }
        W.now = at > W.now ? at : W.now + 1;
        kvt_wcore_poll(W.core, W.now);
    }
}

static void *w_unit(kvt_gpu_state_pool_t pool, uint32_t i)
{
    return kvt_gpu_state_ptr(W.gpu, pool, i);
}

//  Stores the image of checkpoint `hash` (its oracle bytes) in the tier.
static void w_put_image(kvt_hash_t hash)
{
    static uint8_t img[SB];
    kvt_oracle_state_fill(img, SB, hash, 1);
    cr_assert_eq(kvt_storage_put(W.st, 7, hash, KVT_OBJ_STATE, img, SB), 0);
}

//  Adds a state leg restoring `hash` into `slot` at boundary `b`.
static void w_state(wspec_t *s, kvt_hash_t hash, uint32_t slot, uint32_t b)
{
    s->sp.state = true;
    s->sp.state_hash = hash;
    s->sp.state_slot = slot;
    s->sp.state_boundary = b;
}

//  A state-only load (rule L3: no KV leg, no token ids, no block table).
static void w_state_only(wspec_t *s, uint64_t req, kvt_hash_t hash, uint32_t slot, uint32_t b)
{
    memset(s, 0, sizeof *s);
    s->sp.op = (kvt_opid_t){req, 1};
    w_state(s, hash, slot, b);
}

//  Exactly one state verdict for `req`; ran false: the neutral one.
static const got_t *w_state_once(uint64_t req, bool ran, bool ok, uint32_t detail)
{
    cr_assert_eq(w_count(KVT_CHAN_STATE, req, ST), 1, "load %llu: %u state reports",
                 (unsigned long long)req, w_count(KVT_CHAN_STATE, req, ST));
    const got_t *g = w_find(KVT_CHAN_STATE, req, ST);
    if (!ran) {
        cr_assert(g->c.ok, "a neutral verdict is ok");
        cr_assert_eq(g->c.detail, KVT_DETAIL_SKIPPED, "load %llu: state detail %u, not neutral",
                     (unsigned long long)req, g->c.detail);
        return g;
    }
    cr_assert_eq(g->c.ok, ok, "load %llu: state ok=%d detail %u", (unsigned long long)req, g->c.ok,
                 g->c.detail);
    cr_assert_eq(g->c.detail, detail, "load %llu: state detail %u, expected %u",
                 (unsigned long long)req, g->c.detail, detail);
    return g;
}

Test(wcore, rule_L1_a_fused_load_reports_once_on_every_path)
{
    W.lane_deadline_ns = 50000000ull; //  50 ms
    W.fence_timeout_ns = 5000000ull;  //  5 ms
    uint64_t step = 100000000ull;     //  100 ms: past every deadline
    w_up(1000000ull, 16, 0, 0);
    w_store(1, SRC, 1, 2000);
    w_put_image(ST);
    wspec_t s;
    //  Refusal: the state boundary is off the chunk grid.
    w_spec(&s, 10, 0, 1, DST, 2000);
    w_state(&s, ST, 0, CS / 2);
    kvt_wcore_load(W.core, &s.sp, W.now);
    w_settle();
    w_load_once(10, false, KVT_DETAIL_INVALID);
    w_state_once(10, false, true, 0);
    //  Tier miss on the KV leg: the state leg never started (neutral).
    w_spec(&s, 11, 0, 1, DST, 2999);
    w_state(&s, ST, 0, CS);
    kvt_wcore_load(W.core, &s.sp, W.now);
    w_settle();
    w_load_once(11, false, KVT_DETAIL_MISS);
    w_state_once(11, false, true, 0);
    //  Tier miss on the state leg: a real verdict (MISS).
    w_spec(&s, 12, 0, 1, DST, 2000);
    w_state(&s, (kvt_hash_t){9, 9}, 0, CS);
    s.sp.state_hash = (kvt_hash_t){9, 9};
    kvt_wcore_load(W.core, &s.sp, W.now);
    w_settle();
    w_load_once(12, false, KVT_DETAIL_MISS);
    cr_assert_eq(w_count(KVT_CHAN_STATE, 12, ((kvt_hash_t){9, 9})), 1);
    cr_assert_eq(w_find(KVT_CHAN_STATE, 12, ((kvt_hash_t){9, 9}))->c.detail, KVT_DETAIL_MISS);
    //  Deadline: the KV leg's copy never lands (a stalled stream).
    cr_assert_eq(kvt_gpu_stream_inject(W.ls, KVT_GPU_FAULT_STALL, 0), 0);
    w_spec(&s, 13, 0, 1, DST, 2000);
    w_state(&s, ST, 1, CS);
    kvt_wcore_load(W.core, &s.sp, W.now);
    w_run_until(W.now + step);
    w_load_once(13, false, KVT_DETAIL_TIMEOUT);
    w_state_once(13, true, true, 0);
    cr_assert_eq(w_stats().lane_timeouts, 1);
    //  Lane failure: a fence over the stalled lane times out; the next
    //  load's KV leg is refused by the failed lane.
    kvt_fence_msg_t f = {.id = 77, .lanes = 1u << KVT_WCORE_LANE_LOAD};
    w_spec(&s, 14, 0, 1, DST + 4, 2000);
    w_state(&s, ST, 2, CS);
    kvt_wcore_load(W.core, &s.sp, W.now);
    kvt_wcore_fence(W.core, &f, W.now);
    w_run_until(W.now + step);
    w_load_once(14, false, KVT_DETAIL_TIMEOUT);
    w_spec(&s, 15, 0, 1, DST, 2000);
    w_state(&s, ST, 3, CS);
    kvt_wcore_load(W.core, &s.sp, W.now);
    w_run_until(W.now + step);
    w_load_once(15, false, KVT_DETAIL_IO);
    w_state_once(15, true, true, 0);
    //  Shutdown: a load whose state leg is still copying.
    cr_assert_eq(kvt_gpu_stream_inject(W.ts, KVT_GPU_FAULT_STALL, 0), 0);
    w_state_only(&s, 16, ST, 4, CS);
    kvt_wcore_load(W.core, &s.sp, W.now);
    cr_assert_eq(kvt_wcore_shutdown(W.core, W.now), 1);
    w_drain();
    w_load_once(16, false, KVT_DETAIL_SHUTDOWN);
    cr_assert_eq(w_count(KVT_CHAN_STATE, 16, ST), 1);
    cr_assert_eq(w_stats().duplicates, 0);
    cr_assert_eq(kvt_wcore_pending(W.core), 0);
    cr_assert_eq(kvt_gpu_stream_inject(W.ls, KVT_GPU_FAULT_NONE, 0), 0);
    cr_assert_eq(kvt_gpu_stream_inject(W.ts, KVT_GPU_FAULT_NONE, 0), 0);
    w_down();
}

Test(wcore, rule_L2_fused_load_costs_max_not_sum)
{
    //  1 MB/s: the KV leg (one 2 KiB chunk) and the state leg (a 4 KiB
    //  image) cost about 2 ms and 4 ms of virtual time.
    w_up(1000000ull, 16, 0, 0);
    w_store(1, SRC, 1, 2100);
    w_put_image(ST);
    uint64_t kv = kvt_gpu_sim_cost_ns(W.gpu, BPC * kvt_gpu_block_bytes(W.gpu));
    uint64_t st = kvt_gpu_sim_cost_ns(W.gpu, SB);
    wspec_t s;
    w_spec(&s, 2, 0, 1, DST, 2100);
    w_state(&s, ST, 5, CS);
    uint64_t t0 = W.now;
    kvt_wcore_load(W.core, &s.sp, W.now);
    w_settle();
    const got_t *g = w_load_once(2, true, KVT_DETAIL_OK);
    w_state_once(2, true, true, 0);
    uint64_t took = g->at - t0, max = kv > st ? kv : st;
    cr_assert_geq(took, max, "the report preceded a leg's copy (%llu < %llu ns)",
                  (unsigned long long)took, (unsigned long long)max);
    cr_assert_lt(took, kv + st, "the legs ran one after the other: %llu ns, max %llu, sum %llu",
                 (unsigned long long)took, (unsigned long long)max, (unsigned long long)(kv + st));
    cr_assert(w_check(DST, BPC, 2100), "the KV leg's bytes");
    cr_assert_eq(kvt_oracle_state_mismatch(w_unit(KVT_GPU_STATE_SLOTS, 5), SB, ST, 1), SB,
                 "the state leg's bytes");
    w_pool_clean();
    w_down();
}

Test(wcore, rule_L2_a_rank_whose_kv_leg_fails_still_reports_on_the_state_key)
{
    w_up(1000000ull, 16, 0, 0);
    w_put_image(ST);
    //  The KV leg's chunk is not in the tier.
    wspec_t s;
    w_spec(&s, 3, 0, 1, DST, 2200);
    w_state(&s, ST, 0, CS);
    kvt_wcore_load(W.core, &s.sp, W.now);
    w_settle();
    w_load_once(3, false, KVT_DETAIL_MISS);
    w_state_once(3, false, true, 0);
    //  The KV leg's copy fails on the device while the state leg lands.
    w_store(4, SRC, 1, 2300);
    cr_assert_eq(kvt_gpu_stream_inject(W.ls, KVT_GPU_FAULT_FAIL, 1), 0);
    w_spec(&s, 5, 0, 1, DST, 2300);
    w_state(&s, ST, 1, CS);
    kvt_wcore_load(W.core, &s.sp, W.now);
    w_settle();
    w_load_once(5, false, KVT_DETAIL_IO);
    w_state_once(5, true, true, 0);
    cr_assert_eq(w_stats().states_neutral, 1);
    w_pool_clean();
    w_down();
}

Test(wcore, rule_L3_state_only_load)
{
    w_up(1000000ull, 16, 0, 0);
    w_put_image(ST);
    wspec_t s;
    w_state_only(&s, 6, ST, 7, 2 * CS);
    cr_assert_null(kvt_wcore_check_spec(W.core, &s.sp), "%s", kvt_wcore_check_spec(W.core, &s.sp));
    kvt_wcore_load(W.core, &s.sp, W.now);
    cr_assert_eq(w_drain(), 0, "the report waits for the image's copy");
    w_settle();
    w_load_once(6, true, KVT_DETAIL_OK);
    w_state_once(6, true, true, 0);
    cr_assert_eq(kvt_oracle_state_mismatch(w_unit(KVT_GPU_STATE_SLOTS, 7), SB, ST, 1), SB);
    kvt_gpu_stats_t gs;
    kvt_gpu_stats(W.gpu, &gs);
    cr_assert_eq(gs.scatters, 0, "no KV leg");
    cr_assert_eq(gs.state_copies, 1);
    //  A spec with neither leg is refused.
    memset(&s, 0, sizeof s);
    s.sp.op = (kvt_opid_t){7, 1};
    kvt_wcore_load(W.core, &s.sp, W.now);
    w_drain();
    w_load_once(7, false, KVT_DETAIL_INVALID);
    w_pool_clean();
    w_down();
}

Test(wcore, rule_L4_state_legs_are_refused_not_clamped)
{
    w_up(1000000ull, 16, 0, 0);
    w_store(1, SRC, 1, 2400);
    w_put_image(ST);
    struct {
        uint32_t slot, boundary; //  the state leg
        bool kv;                 //  with the KV leg [0, CS)
        const char *why;         //  expected reason (substring)
    } cases[] = {
        {0, CS + 16, false, "chunk grid"}, {0, 0, false, "chunk grid"},
        {SLOTS, CS, false, "beyond"},      {0, 2 * CS, true, "end of the KV leg"},
        {UINT32_MAX, CS, true, "beyond"},
    };
    uint64_t req = 20;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++, req++) {
        wspec_t s;
        if (cases[i].kv) {
            w_spec(&s, req, 0, 1, DST, 2400);
            w_state(&s, ST, cases[i].slot, cases[i].boundary);
        } else {
            w_state_only(&s, req, ST, cases[i].slot, cases[i].boundary);
        }
        const char *why = kvt_wcore_check_spec(W.core, &s.sp);
        cr_assert_not_null(why, "case %zu accepted", i);
        cr_assert(strstr(why, cases[i].why), "case %zu: '%s'", i, why);
        kvt_wcore_load(W.core, &s.sp, W.now);
        cr_assert_eq(w_drain(), 2, "case %zu: a refusal reports at once, the state key too", i);
        w_load_once(req, false, KVT_DETAIL_INVALID);
        w_state_once(req, false, true, 0);
    }
    //  A zero state hash.
    wspec_t s;
    w_state_only(&s, 40, (kvt_hash_t){0, 0}, 0, CS);
    cr_assert(strstr(kvt_wcore_check_spec(W.core, &s.sp), "hash"));
    kvt_gpu_stats_t gs;
    kvt_gpu_stats(W.gpu, &gs);
    cr_assert_eq(gs.state_copies, 0, "a refused state leg copies nothing");
    cr_assert_eq(gs.scatters, 0, "nor its KV leg");
    cr_assert_eq(w_stats().loads_refused, 5);
    w_pool_clean();
    w_down();
}

Test(wcore, rule_L4_state_memory_never_registered_is_refused)
{
    W.no_state = true;
    w_up(1000000ull, 16, 0, 0);
    wspec_t s;
    w_state_only(&s, 8, ST, 0, CS);
    const char *why = kvt_wcore_check_spec(W.core, &s.sp);
    cr_assert(why && strstr(why, "no state memory registered"), "%s", why ? why : "accepted");
    kvt_wcore_load(W.core, &s.sp, W.now);
    w_drain();
    w_load_once(8, false, KVT_DETAIL_INVALID);
    w_state_once(8, false, true, 0);
    //  An image save on that device is refused too, each item once.
    memset(&s, 0, sizeof s);
    s.sp.op = (kvt_opid_t){9, 1};
    s.sp.image = true;
    s.sp.state_hash = ST;
    s.sp.state_boundary = CS;
    kvt_wcore_save(W.core, &s.sp, W.now);
    w_drain();
    cr_assert_eq(w_count(KVT_CHAN_SAVE, 9, ST), 1);
    cr_assert_eq(w_find(KVT_CHAN_SAVE, 9, ST)->c.detail, KVT_DETAIL_INVALID);
    cr_assert_eq(w_count(KVT_CHAN_SOURCE_SAFE, 9, ST), 1);
    w_down();
}

// ---------------------------------------------- saves with images (S) ----

//  What a simulated forward writes when it lands: fresh oracle bytes for
//  the chunks K(key0 ..) into blocks (pointers taken before, as a host
//  function may not call the device layer).
typedef struct {
    void *ptr[8][PLANES]; //  plane pointers of each block
    uint32_t n;           //  blocks
    uint64_t key0;        //  the chunks' first key
} fwd_t;

static void s_forward(void *arg)
{
    fwd_t *f = arg;
    for (uint32_t b = 0; b < f->n; b++)
        for (uint32_t p = 0; p < PLANES; p++)
            kvt_oracle_fill(f->ptr[b][p], BS * TOKB, K(f->key0 + b / BPC), b % BPC, p, 1);
}

//  Queues a forward of `cost` ns on `cs` writing K(key0 ..) into blocks and
//  records its step's producer event.
static void w_forward(kvt_gpu_stream_t *cs, fwd_t *f, const uint32_t *blocks, uint32_t n,
                      uint64_t key0, uint64_t cost, uint64_t step, int expect)
{
    f->n = n;
    f->key0 = key0;
    for (uint32_t b = 0; b < n; b++)
        for (uint32_t p = 0; p < PLANES; p++)
            f->ptr[b][p] = kvt_gpu_plane_ptr(W.gpu, p, 0, blocks[b]);
    cr_assert_eq(kvt_gpu_launch_host_fn(cs, s_forward, f, cost), 0);
    cr_assert_eq(kvt_fence_board_record_producer(W.board, step, cs), expect);
}

//  The stored chunk K(key) holds the oracle bytes of K(key).
static bool w_stored_fresh(uint64_t key)
{
    kvt_lease_t l;
    kvt_obj_view_t v;
    if (kvt_storage_get(W.st, 7, K(key), KVT_OBJ_KV, W.holder, &l, &v) != 0)
        return false;
    bool ok = true;
    size_t bb = BS * TOKB;
    //  Chunk layout: plane-major runs of BPC blocks (kvt_gpu.h).
    for (uint32_t p = 0; p < PLANES && ok; p++)
        for (uint32_t b = 0; b < BPC && ok; b++)
            ok = kvt_oracle_check((const char *)v.ptr + ((size_t)p * BPC + b) * bb, bb, K(key), b,
                                  p, 1);
    kvt_storage_release(W.st, &l);
    return ok;
}

Test(wcore, rule_S1_save_waits_for_producer_and_reports_fenced)
{
    W.with_board = true;
    w_up(25000000000ull, 16, 0, 0);
    kvt_gpu_stream_t *cs = kvt_gpu_stream_new(W.gpu, "compute");
    //  The blocks hold stale bytes; the forward of step 5 (10 ms) writes the
    //  chunk's real bytes when it lands.
    w_fill(SRC, BPC, 3999);
    static fwd_t f;
    w_forward(cs, &f, SRC, BPC, 4000, 10000000ull, 5, 0);
    wspec_t s;
    w_spec(&s, 1, 0, 1, SRC, 4000);
    s.sp.producer = 6;
    uint64_t t0 = W.now;
    kvt_wcore_save(W.core, &s.sp, W.now);
    w_settle();
    w_save_once(1, 4000, 1, true, KVT_DETAIL_OK);
    const got_t *g = w_find(KVT_CHAN_SAVE, 1, K(4000));
    cr_assert(g->c.fenced, "the store report says the save waited on its producer");
    cr_assert_geq(g->at - t0, 10000000ull, "the gather ran before the forward landed");
    cr_assert(w_stored_fresh(4000), "the save read the bytes from before the forward");
    cr_assert_eq(w_stats().fenced_saves, 1);
    //  Without a producer the save does not wait and does not say it did.
    w_fill(SRC + 4, BPC, 4100);
    w_spec(&s, 2, 0, 1, SRC + 4, 4100);
    kvt_wcore_save(W.core, &s.sp, W.now);
    w_settle();
    cr_assert_not(w_find(KVT_CHAN_SAVE, 2, K(4100))->c.fenced);
    w_pool_clean();
    kvt_gpu_stream_destroy(&cs);
    w_down();
}

Test(wcore, rule_S2_failed_event_rejects_that_steps_saves_and_its_loads_finish)
{
    W.with_board = true;
    w_up(25000000000ull, 16, 0, 0);
    kvt_gpu_stream_t *cs = kvt_gpu_stream_new(W.gpu, "compute");
    w_store(1, SRC, 1, 4200);
    static fwd_t f;
    //  Step 5's producer event cannot be recorded.
    kvt_fence_board_fail_next(W.board, 1);
    w_forward(cs, &f, SRC + 4, BPC, 4300, 1000000ull, 5, KVT_GPU_EDEVICE);
    wspec_t sv, ld;
    //  The runner knew (producer_failed): refused at once, every item.
    w_spec(&sv, 2, 0, 1, SRC + 4, 4300);
    sv.sp.producer = 6;
    sv.sp.producer_failed = true;
    kvt_wcore_save(W.core, &sv.sp, W.now);
    cr_assert_eq(w_drain(), 2, "the chunk and its source_safe, at once");
    w_save_once(2, 4300, 1, false, KVT_DETAIL_IO);
    //  The runner did not know: the board has no event, the lane refuses it.
    w_spec(&sv, 3, 0, 1, SRC + 4, 4300);
    sv.sp.producer = 6;
    kvt_wcore_save(W.core, &sv.sp, W.now);
    //  The step's load still goes out and finishes.
    w_spec(&ld, 4, 0, 1, DST, 4200);
    ld.sp.after = 6;
    kvt_wcore_load(W.core, &ld.sp, W.now);
    w_settle();
    w_save_once(3, 4300, 1, false, KVT_DETAIL_IO);
    cr_assert(w_find(KVT_CHAN_SOURCE_SAFE, 3, K(4300))->c.ok, "nothing read the sources");
    w_load_once(4, true, KVT_DETAIL_OK);
    cr_assert(w_check(DST, BPC, 4200));
    cr_assert_eq(w_stats().producer_refused, 2);
    cr_assert_not(kvt_pool_contains(kvt_storage_pool(W.st), 7, K(4300), KVT_OBJ_KV));
    //  Not a latch: the next step's event is recorded and its save goes out.
    w_forward(cs, &f, SRC + 4, BPC, 4300, 1000000ull, 6, 0);
    w_spec(&sv, 5, 0, 1, SRC + 4, 4300);
    sv.sp.producer = 7;
    kvt_wcore_save(W.core, &sv.sp, W.now);
    w_settle();
    w_save_once(5, 4300, 1, true, KVT_DETAIL_OK);
    cr_assert(w_find(KVT_CHAN_SAVE, 5, K(4300))->c.fenced);
    cr_assert(w_stored_fresh(4300));
    w_pool_clean();
    kvt_gpu_stream_destroy(&cs);
    w_down();
}

Test(wcore, saves_store_a_chunk_with_its_image_and_an_image_alone)
{
    w_up(1000000ull, 16, 0, 0);
    //  Checkpoint unit 3 holds the image of the checkpoint at the chunk's
    //  end; the save stores chunk + image as one KV_STATE object.
    kvt_hash_t at_end = K(4501);
    kvt_oracle_state_fill(w_unit(KVT_GPU_STATE_CKPT, 3), SB, at_end, 1);
    w_fill(SRC, 2 * BPC, 4500);
    wspec_t s;
    w_spec(&s, 1, 0, 2, SRC, 4500);
    s.sp.image = true;
    s.sp.state_slot = 3;
    s.sp.state_hash = at_end;
    s.sp.state_boundary = 2 * CS;
    kvt_wcore_save(W.core, &s.sp, W.now);
    w_settle();
    w_save_once(1, 4500, 2, true, KVT_DETAIL_OK);
    cr_assert_eq(w_count(KVT_CHAN_SOURCE_SAFE, 1, at_end), 1);
    kvt_pool_t *pool = kvt_storage_pool(W.st);
    cr_assert(kvt_pool_contains(pool, 7, K(4501), KVT_OBJ_KV_STATE),
              "the last chunk has the image");
    cr_assert(kvt_pool_contains(pool, 7, K(4500), KVT_OBJ_KV), "the first is KV only");
    cr_assert_not(kvt_pool_contains(pool, 7, K(4500), KVT_OBJ_KV_STATE));
    cr_assert_eq(w_stats().images_saved, 1);
    //  A state-only load restores the image from the combined object.
    wspec_t ld;
    memset(&ld, 0, sizeof ld);
    ld.sp.op = (kvt_opid_t){2, 1};
    ld.sp.state = true;
    ld.sp.state_hash = at_end;
    ld.sp.state_slot = 6;
    ld.sp.state_boundary = 2 * CS;
    kvt_wcore_load(W.core, &ld.sp, W.now);
    w_settle();
    w_load_once(2, true, KVT_DETAIL_OK);
    cr_assert_eq(kvt_oracle_state_mismatch(w_unit(KVT_GPU_STATE_SLOTS, 6), SB, at_end, 1), SB);
    //  An image-only save, keyed by its state hash.
    kvt_oracle_state_fill(w_unit(KVT_GPU_STATE_CKPT, 4), SB, ST, 1);
    memset(&s, 0, sizeof s);
    s.sp.op = (kvt_opid_t){3, 1};
    s.sp.image = true;
    s.sp.state_slot = 4;
    s.sp.state_hash = ST;
    s.sp.state_boundary = 3 * CS;
    kvt_wcore_save(W.core, &s.sp, W.now);
    w_settle();
    cr_assert_eq(w_count(KVT_CHAN_SAVE, 3, ST), 1);
    cr_assert(w_find(KVT_CHAN_SAVE, 3, ST)->c.ok);
    cr_assert_eq(w_count(KVT_CHAN_SOURCE_SAFE, 3, ST), 1);
    cr_assert(kvt_pool_contains(pool, 7, ST, KVT_OBJ_STATE));
    w_pool_clean();
    w_down();
}

// ------------------------------------------------- lanes (X1-X4) ----

Test(wcore, rule_X1_a_fence_covers_a_pending_leg_and_reports_once_when_it_lands)
{
    w_up(1000000ull, 16, 0, 0);
    w_store(1, SRC, 1, 4600);
    uint64_t cost = kvt_gpu_sim_cost_ns(W.gpu, BPC * kvt_gpu_block_bytes(W.gpu));
    wspec_t s;
    w_spec(&s, 2, 0, 1, DST, 4600);
    uint64_t t0 = W.now;
    kvt_wcore_load(W.core, &s.sp, W.now);
    kvt_fence_msg_t f = {.id = 5, .lanes = 0};
    kvt_wcore_fence(W.core, &f, W.now);
    kvt_wcore_poll(W.core, W.now);
    cr_assert_eq(w_drain(), 0, "the fence waits for the pending leg");
    w_settle();
    kvt_hash_t zero = {0, 0};
    cr_assert_eq(w_count(KVT_CHAN_FENCE, 5, zero), 1);
    const got_t *g = w_find(KVT_CHAN_FENCE, 5, zero);
    cr_assert(g->c.ok);
    cr_assert_eq(g->c.op.gen, 1);
    cr_assert_geq(g->at - t0, cost, "the fence reported before the copy landed");
    w_load_once(2, true, KVT_DETAIL_OK);
    //  A repeated Fence message is dropped; a fence over idle lanes is at once.
    kvt_wcore_fence(W.core, &f, W.now);
    f.id = 6;
    kvt_wcore_fence(W.core, &f, W.now);
    w_settle();
    cr_assert_eq(w_count(KVT_CHAN_FENCE, 5, zero), 1);
    cr_assert_eq(w_count(KVT_CHAN_FENCE, 6, zero), 1);
    cr_assert_eq(w_stats().fences_ok, 2);
    w_pool_clean();
    w_down();
}

Test(wcore, rule_X3_a_fence_timeout_fails_the_lane_and_every_later_job)
{
    W.fence_timeout_ns = 5000000ull; //  5 ms
    w_up(1000000ull, 16, 0, 0);
    w_store(1, SRC, 1, 4700);
    cr_assert_eq(kvt_gpu_stream_inject(W.ls, KVT_GPU_FAULT_STALL, 0), 0);
    wspec_t s;
    w_spec(&s, 2, 0, 1, DST, 4700);
    kvt_wcore_load(W.core, &s.sp, W.now);
    kvt_fence_msg_t f = {.id = 9, .lanes = 1u << KVT_WCORE_LANE_LOAD};
    kvt_wcore_fence(W.core, &f, W.now);
    w_run_until(W.now + 20000000ull);
    kvt_hash_t zero = {0, 0};
    cr_assert_eq(w_count(KVT_CHAN_FENCE, 9, zero), 1);
    const got_t *g = w_find(KVT_CHAN_FENCE, 9, zero);
    cr_assert_not(g->c.ok, "a fence timeout is a failure");
    cr_assert_eq(g->c.detail, KVT_DETAIL_TIMEOUT);
    w_load_once(2, false, KVT_DETAIL_TIMEOUT);
    //  Fail-stop: every later load on that lane fails, the save lane works.
    for (uint64_t req = 3; req < 6; req++) {
        w_spec(&s, req, 0, 1, DST + 4, 4700);
        kvt_wcore_load(W.core, &s.sp, W.now);
        w_run_until(W.now + 1000000ull);
        w_load_once(req, false, KVT_DETAIL_IO);
    }
    w_fill(SRC + 4, BPC, 4800);
    w_spec(&s, 6, 0, 1, SRC + 4, 4800);
    kvt_wcore_save(W.core, &s.sp, W.now);
    w_run_until(W.now + 20000000ull);
    w_save_once(6, 4800, 1, true, KVT_DETAIL_OK);
    cr_assert_eq(w_stats().fences_failed, 1);
    cr_assert_eq(kvt_gpu_stream_inject(W.ls, KVT_GPU_FAULT_NONE, 0), 0);
    w_settle();
    w_pool_clean();
    w_down();
}

//  Recovery: a lane a fence timeout failed refuses jobs while its stalled
//  copy runs (nothing it holds is orphaned), and once the copy ended and
//  every job reported, the worker resets it on its timer path: the next
//  load on that lane lands (service resumes), counted once.
Test(wcore, rule_X3_a_failed_lane_is_reset_once_it_drained_and_serves_again)
{
    W.fence_timeout_ns = 5000000ull; //  5 ms
    w_up(1000000ull, 16, 0, 0);
    w_store(1, SRC, 1, 4900);
    cr_assert_eq(kvt_gpu_stream_inject(W.ls, KVT_GPU_FAULT_STALL, 0), 0);
    wspec_t s;
    w_spec(&s, 2, 0, 1, DST, 4900);
    kvt_wcore_load(W.core, &s.sp, W.now);
    kvt_fence_msg_t f = {.id = 11, .lanes = 1u << KVT_WCORE_LANE_LOAD};
    kvt_wcore_fence(W.core, &f, W.now);
    w_run_until(W.now + 20000000ull);
    w_load_once(2, false, KVT_DETAIL_TIMEOUT);
    //  Still stalled: the failed lane holds the quarantined copy, no reset.
    w_spec(&s, 3, 0, 1, DST + 4, 4900);
    kvt_wcore_load(W.core, &s.sp, W.now);
    w_run_until(W.now + 1000000ull);
    w_load_once(3, false, KVT_DETAIL_IO);
    cr_assert_eq(w_stats().lane_resets, 0, "reset under a copy that still runs");
    //  The copy ends: the lane drained and is reset by the poll.
    cr_assert_eq(kvt_gpu_stream_inject(W.ls, KVT_GPU_FAULT_NONE, 0), 0);
    w_settle();
    cr_assert_eq(w_stats().lane_resets, 1);
    w_fill(DST, BPC, 9999); //  other bytes: only the new load can make them right
    w_spec(&s, 4, 0, 1, DST, 4900);
    kvt_wcore_load(W.core, &s.sp, W.now);
    w_run_until(W.now + 20000000ull);
    w_load_once(4, true, KVT_DETAIL_OK);
    cr_assert(w_check(DST, BPC, 4900), "the load after the reset restored its bytes");
    cr_assert_eq(w_stats().lane_resets, 1, "one failure, one reset");
    w_settle();
    w_pool_clean();
    w_down();
}

//  A submit that blocks until the test releases it, then queues the
//  worker's copies (a device call that does not return for a while).
static struct {
    pthread_mutex_t mu; //  guards the flags
    pthread_cond_t cv;  //  signals a change
    bool inside;        //  the submitter is blocked in it
    bool release;       //  let it go on
} B = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, false};

static int s_stuck_submit(void *arg, kvt_gpu_stream_t *s, const kvt_lane_job_t *job)
{
    pthread_mutex_lock(&B.mu);
    B.inside = true;
    pthread_cond_broadcast(&B.cv);
    while (!B.release)
        pthread_cond_wait(&B.cv, &B.mu);
    pthread_mutex_unlock(&B.mu);
    return kvt_wcore_lane_ops.submit(arg, s, job);
}

Test(wcore, rule_X2_stuck_submit_hits_its_deadline)
{
    static kvt_lane_ops_t stuck;
    stuck.submit = s_stuck_submit;
    stuck.give_back = kvt_wcore_lane_ops.give_back;
    W.ops[KVT_WCORE_LANE_LOAD] = &stuck;
    W.threaded[KVT_WCORE_LANE_LOAD] = true;
    W.lane_deadline_ns = 5000000ull; //  5 ms
    w_up(25000000000ull, 16, 0, 0);
    w_store(1, SRC, 1, 4900);
    wspec_t s;
    w_spec(&s, 2, 0, 1, DST, 4900);
    kvt_wcore_load(W.core, &s.sp, W.now);
    pthread_mutex_lock(&B.mu);
    while (!B.inside)
        pthread_cond_wait(&B.cv, &B.mu);
    pthread_mutex_unlock(&B.mu);
    //  The submit is stuck on the lane's thread; the worker's timer path
    //  still fires the deadline. Meanwhile it looks again within the poll
    //  interval, so a submit that returns is noticed at once.
    uint64_t t0 = W.now;
    cr_assert_leq(kvt_wcore_next_wake(W.core, W.now), W.now + KVT_LANE_POLL_NS,
                  "a threaded lane with a submit out is polled, not left to its deadline");
    for (int i = 0; i < 1000 && w_count(KVT_CHAN_LOAD, 2, ZERO) == 0; i++) {
        w_set_now(kvt_wcore_next_wake(W.core, W.now));
        cr_assert_leq(W.now - t0, 5000000ull, "the worker slept past the deadline");
        kvt_wcore_poll(W.core, W.now);
        w_drain();
    }
    w_load_once(2, false, KVT_DETAIL_TIMEOUT);
    cr_assert(kvt_lane_runner_submitting(W.lane[KVT_WCORE_LANE_LOAD]), "still stuck");
    cr_assert_eq(w_pool().leases_active, 1, "the lease the stuck copy will read is kept");
    pthread_mutex_lock(&B.mu);
    B.release = true;
    pthread_cond_broadcast(&B.cv);
    pthread_mutex_unlock(&B.mu);
    while (kvt_lane_runner_submitting(W.lane[KVT_WCORE_LANE_LOAD]))
        sched_yield();
    //  Its late copy lands; only then does the lease go back.
    for (int i = 0; i < 1000 && w_pool().leases_active; i++) {
        w_set_now(W.now + 1000000ull);
        kvt_wcore_poll(W.core, W.now);
    }
    cr_assert_eq(w_drain(), 0, "the late return reports nothing");
    w_pool_clean();
    w_down();
}

//  The position of the first report on (chan, req, key) in arrival order.
static uint32_t w_pos(uint8_t chan, uint64_t req, kvt_hash_t key)
{
    for (uint32_t i = 0; i < W.ngot; i++)
        if (W.got[i].c.chan == chan && W.got[i].c.op.req == req && kvt_hash_eq(W.got[i].c.key, key))
            return i;
    return UINT32_MAX;
}

Test(wcore, rule_X1_a_fence_waits_for_a_queued_leg_behind_a_stuck_submit)
{
    static kvt_lane_ops_t stuck;
    stuck.submit = s_stuck_submit;
    stuck.give_back = kvt_wcore_lane_ops.give_back;
    W.ops[KVT_WCORE_LANE_STATE] = &stuck;
    W.threaded[KVT_WCORE_LANE_STATE] = true;
    w_up(25000000000ull, 16, 0, 0);
    w_put_image(ST);
    //  Load 1's state leg is stuck inside its submit; load 2's waits queued
    //  behind it. The fence covers both.
    wspec_t a, b;
    w_state_only(&a, 1, ST, 0, CS);
    w_state_only(&b, 2, ST, 1, CS);
    kvt_wcore_load(W.core, &a.sp, W.now);
    pthread_mutex_lock(&B.mu);
    while (!B.inside)
        pthread_cond_wait(&B.cv, &B.mu);
    pthread_mutex_unlock(&B.mu);
    kvt_wcore_load(W.core, &b.sp, W.now);
    kvt_fence_msg_t f = {.id = 3, .lanes = 1u << KVT_WCORE_LANE_STATE};
    kvt_wcore_fence(W.core, &f, W.now);
    kvt_wcore_poll(W.core, W.now);
    cr_assert_eq(w_drain(), 0, "the fence waits while its jobs are submitting and queued");
    pthread_mutex_lock(&B.mu);
    B.release = true;
    pthread_cond_broadcast(&B.cv);
    pthread_mutex_unlock(&B.mu);
    kvt_hash_t zero = {0, 0};
    //  1 µs steps: the two legs land one copy apart (about 5 µs) on the
    //  lane's stream, in separate polls.
    for (int i = 0; i < 200000 && w_count(KVT_CHAN_FENCE, 3, zero) == 0; i++) {
        w_set_now(W.now + 1000ull);
        kvt_wcore_poll(W.core, W.now);
        w_drain();
        sched_yield();
    }
    cr_assert_eq(w_count(KVT_CHAN_FENCE, 3, zero), 1);
    cr_assert(w_find(KVT_CHAN_FENCE, 3, zero)->c.ok);
    w_load_once(1, true, KVT_DETAIL_OK);
    w_load_once(2, true, KVT_DETAIL_OK);
    cr_assert_gt(w_pos(KVT_CHAN_FENCE, 3, zero), w_pos(KVT_CHAN_LOAD, 2, ZERO),
                 "the fence reported before the queued leg it covers ended");
    w_pool_clean();
    w_down();
}

//  A save's source_safe goes ahead of its store reports (gathered, all
//  present, or refused), so the scheduler's leases on its sources end
//  before the store verdicts.
Test(wcore, source_safe_goes_ahead_of_the_saves_store_reports)
{
    w_up(25000000000ull, 16, 0, 0);
    w_fill(SRC, 2 * BPC, 1400);
    wspec_t s;
    w_spec(&s, 1, 0, 2, SRC, 1400);
    kvt_wcore_save(W.core, &s.sp, W.now);
    w_settle();
    cr_assert_eq(W.ngot, 3);
    cr_assert_eq(W.got[0].c.chan, KVT_CHAN_SOURCE_SAFE, "gathered: source_safe first");
    cr_assert(kvt_hash_eq(W.got[0].c.key, K(1401)), "keyed by the last chunk");
    W.ngot = 0;
    //  Every chunk present: nothing to gather, reported at once.
    w_spec(&s, 2, 0, 2, SRC, 1400);
    kvt_wcore_save(W.core, &s.sp, W.now);
    cr_assert_eq(w_drain(), 3);
    cr_assert_eq(W.got[0].c.chan, KVT_CHAN_SOURCE_SAFE, "all present: source_safe first");
    cr_assert_eq(W.got[1].c.chan, KVT_CHAN_SAVE);
    cr_assert_eq(W.got[2].c.chan, KVT_CHAN_SAVE);
    W.ngot = 0;
    //  Refused (off the chunk grid): the same order.
    w_spec(&s, 3, 0, 2, SRC, 1500);
    s.sp.start += 1;
    kvt_wcore_save(W.core, &s.sp, W.now);
    cr_assert_eq(w_drain(), 3);
    cr_assert_eq(W.got[0].c.chan, KVT_CHAN_SOURCE_SAFE, "refused: source_safe first");
    cr_assert_not(W.got[1].c.ok);
    w_pool_clean();
    w_down();
}

//  A spec with no item (refused) reports its source_safe once: a duplicate
//  of it is dropped like any repeated spec, not reported again.
Test(wcore, a_repeated_empty_save_reports_its_source_safe_once)
{
    w_up(25000000000ull, 16, 0, 0);
    wspec_t s;
    w_spec(&s, 4, 0, 0, SRC, 1600);
    kvt_wcore_save(W.core, &s.sp, W.now);
    cr_assert_eq(w_drain(), 1);
    cr_assert_eq(W.got[0].c.chan, KVT_CHAN_SOURCE_SAFE);
    W.ngot = 0;
    kvt_wcore_save(W.core, &s.sp, W.now);
    cr_assert_eq(w_drain(), 0, "the repeat reported source_safe again");
    w_down();
}
