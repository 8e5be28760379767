/*  kvtier bench admit — what the scheduler core costs on its hot paths, in
    one run, each against its target (issue: the scheduler for hybrid
    models, §8). Everything goes through the embeddable API (kvt_sched.h);
    the state-offload index is read through the core's bench hook
    (kvt_sched_bench.h).

    * admit: one admission decision of a --prompt-tokens prompt (default
      128k) with an HBM hit of half of it and a tier rung above the hit, on
      the hybrid geometry (16-token blocks, 256-token chunks, a checkpoint
      every 1024 tokens, state_bytes > 0). The state is built through the
      API: request P (the whole prompt) runs with every save ok, so the
      tier view holds its chunks and its images; request X, as long as the
      HBM pool, evicts every block of P; request A (the first half of P)
      runs, so HBM holds [0, hit) and a checkpoint at the hit. Then, per
      iteration, a new request D with P's tokens arrives and the plan that
      admits it is timed (probe with its chain hashes, gate, tier count,
      joint boundary, fit, commit, LoadSpec). The admission must come out as
      a load above the hit with a KV leg or the run fails. D is aborted and
      its load verdicts (ok) delivered, which releases it without indexing
      what it loaded, so every iteration finds the same hit (the tool checks
      it). Against: hashing P's
      chain alone (kvt_prefix_hashes, every full block of the prompt), timed
      in the same iterations; admit_ratio = admit / hash (medians), target
      ≤ 2.
    * stats: --hashes images (default 1M) noted in a state-offload index,
      then rounds of 256 stats reads, each round holding exactly one deep
      (key-set) check; amortised µs per read, target ≤ 1.
    * step: --requests running requests (default 64) decoding, every save
      ok; per step the core's apply, plan and the verdicts of that plan's
      saves are timed; target ≤ 100 µs.
    Medians over iterations, one warm-up of each not counted; wall time
    (CLOCK_MONOTONIC) and the thread's CPU time (CLOCK_THREAD_CPUTIME_ID),
    which a shared machine inflates far less. Each admission, hash chain and
    round of reads starts after a 1 ms sleep, so it starts on a fresh time
    slice; admission and hash chain alternate which goes first. */
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "actors/common/kvt_prefix.h"
#include "actors/scheduler/kvt_sched_bench.h"
#include "base/kvt_hmap.h"
#include "kvt_cli.h"
#include "kvt_cmd.h"
#include "kvtier/kvt_msg.h"
#include "kvtier/kvt_sched.h"

#define S_BS              16    //  tokens per block
#define S_CS              256   //  tokens per chunk
#define S_INTERVAL        1024  //  checkpoint interval (tokens)
#define S_STEP_PROMPT     2048  //  prompt of each running request in the step bench
#define S_TARGET_RATIO    2.0   //  admit / hash chain
#define S_TARGET_STATS_US 1.0   //  per stats read, amortised
#define S_TARGET_STEP_US  100.0 //  per step

typedef struct {
    const char *json;    //  --json PATH, or NULL
    uint32_t prompt;     //  --prompt-tokens
    uint32_t iterations; //  --iterations (admissions and hash chains)
    uint32_t hashes;     //  --hashes
    uint32_t rounds;     //  --stats-rounds (256 reads each)
    uint32_t requests;   //  --requests
    uint32_t steps;      //  --steps
} s_opts_t;

//  A short sleep: the next timed call starts on a fresh time slice.
static void s_nap(void)
{
    struct timespec ts = {.tv_sec = 0, .tv_nsec = 1000000};
    nanosleep(&ts, NULL);
}

// ------------------------------------------------------------- the rig ----

//  A core driven like an engine whose every load and save succeeds.
typedef struct {
    kvt_sched_t *s;         //  the core
    kvt_step_plan_t plan;   //  last plan
    uint64_t step;          //  last step planned
    kvt_verdict_t *pending; //  verdicts of the last plans, not delivered yet
    uint32_t npending;      //  used
    uint32_t cap;           //  allocated
    kvt_hmap_t *stored;     //  chunk keys saved ok: what the ranks' lookups find
} s_rig_t;

static kvt_verdict_t *s_push(s_rig_t *g)
{
    if (g->npending == g->cap) {
        uint32_t cap = g->cap ? 2 * g->cap : 1024;
        kvt_verdict_t *p = realloc(g->pending, (size_t)cap * sizeof *p);
        if (!p)
            return NULL;
        g->pending = p;
        g->cap = cap;
    }
    kvt_verdict_t *v = &g->pending[g->npending++];
    memset(v, 0, sizeof *v);
    return v;
}

//  Queues an ok verdict for every leg and save the last plan dispatched.
static int s_collect(s_rig_t *g)
{
    const kvt_sched_state_op_t *ops;
    uint32_t nops;
    kvt_sched_plan_state(g->s, &ops, &nops);
    for (uint32_t i = 0; i < nops; i++) {
        if (ops[i].kind != KVT_SCHED_STATE_LOAD)
            continue;
        kvt_verdict_t *v = s_push(g);
        if (!v)
            return -1;
        *v = (kvt_verdict_t){.chan = KVT_CHAN_STATE, .op = ops[i].op, .key = ops[i].key, .ok = 1};
    }
    const kvt_step_plan_t *p = &g->plan;
    for (uint32_t i = 0; i < p->nlookups; i++) {
        kvt_verdict_t *v = s_push(g);
        if (!v)
            return -1;
        uint32_t held = 0;
        while (held < p->lookups[i].nkeys &&
               kvt_hmap_get(g->stored, p->lookups[i].keys[held], NULL))
            held++;
        *v = (kvt_verdict_t){
            .chan = KVT_CHAN_LOOKUP, .op = p->lookups[i].op, .ok = true, .held = held};
    }
    for (uint32_t i = 0; i < p->nloads; i++) {
        if (p->loads[i].nkeys == 0)
            continue; //  a state-only load reports on the state channel
        kvt_verdict_t *v = s_push(g);
        if (!v)
            return -1;
        *v = (kvt_verdict_t){.chan = KVT_CHAN_LOAD, .op = p->loads[i].op, .ok = true};
    }
    for (uint32_t i = 0; i < p->nsaves; i++)
        for (uint32_t k = 0; k < p->saves[i].nkeys; k++) {
            kvt_verdict_t *v = s_push(g);
            if (!v)
                return -1;
            *v = (kvt_verdict_t){.chan = KVT_CHAN_SAVE,
                                 .op = p->saves[i].op,
                                 .key = p->saves[i].keys[k],
                                 .attempt = p->saves[i].attempt,
                                 .ok = true};
            if (kvt_hmap_put(g->stored, p->saves[i].keys[k], 1) < 0)
                return -1;
        }
    return 0;
}

static void s_deliver(s_rig_t *g)
{
    for (uint32_t i = 0; i < g->npending; i++)
        (void)kvt_sched_verdict(g->s, &g->pending[i]);
    g->npending = 0;
}

//  Plans the next step (a held step keeps its number). Returns the plan's
//  return code; -3 when out of memory.
static int s_plan(s_rig_t *g)
{
    int rc = kvt_sched_plan(g->s, ++g->step, false, &g->plan);
    if (rc == KVT_SCHED_HOLD || rc == KVT_SCHED_REFUSED)
        g->step--;
    return rc;
}

//  Steps until the core is idle, every verdict ok. 0, or -1.
static int s_run_idle(s_rig_t *g, uint32_t max_steps)
{
    for (uint32_t i = 0; i < max_steps; i++) {
        int rc = s_plan(g);
        if (rc == KVT_SCHED_REFUSED || s_collect(g) != 0)
            return -1;
        s_deliver(g);
        if (rc == 0 && g->plan.idle)
            return 0;
    }
    return -1;
}

static int s_arrive(s_rig_t *g, uint64_t id, uint32_t *tokens, uint32_t n, uint32_t max_new)
{
    kvt_arrival_t a = {.req = id, .tokens = tokens, .ntokens = n, .max_new_tokens = max_new};
    return kvt_sched_arrive(g->s, &a);
}

static void s_rig_down(s_rig_t *g)
{
    kvt_sched_destroy(&g->s);
    kvt_hmap_destroy(&g->stored);
    free(g->pending);
    memset(g, 0, sizeof *g);
}

static int s_rig_up(s_rig_t *g, const kvt_sched_cfg_t *cfg)
{
    memset(g, 0, sizeof *g);
    char err[256];
    g->s = kvt_sched_new(cfg, err, sizeof err);
    g->stored = kvt_hmap_new(1024, false);
    if (!g->s || !g->stored) {
        fprintf(stderr, "kvtier bench admit: %s\n", err);
        return -1;
    }
    return 0;
}

// ------------------------------------------------------------- admit ----

typedef struct {
    double admit_us, admit_cpu_us;  //  medians
    double hash_us, hash_cpu_us;    //  medians
    uint32_t hit, resume;           //  the HBM hit and the resume point B
    uint32_t floor;                 //  first token of the KV leg
    uint32_t block_hit;             //  the ungated block hit
    uint8_t joint_src;              //  1 state from HBM, 2 from the tier
    uint32_t hbm_blocks, tier_keys; //  geometry
} s_admit_t;

static int s_bench_admit(const s_opts_t *o, s_admit_t *out)
{
    uint32_t n = o->prompt, hit = n / 2;
    uint32_t hbm = n / S_BS + 64;
    kvt_sched_cfg_t cfg = {.block_size = S_BS,
                           .chunk_size = S_CS,
                           .hbm_blocks = hbm,
                           .tier_chunks = 4 * (n / S_CS) + 64,
                           .max_running = 4,
                           .step_tokens = 8192,
                           .save_retries = 1,
                           .ns = kvt_namespace_hash("kvtier bench admit"),
                           .state_bytes = 1u << 20,
                           .checkpoint_interval = S_INTERVAL,
                           .hbm_checkpoints = 2};
    out->hbm_blocks = hbm;
    out->tier_keys = cfg.tier_chunks;
    int rc = -1;
    s_rig_t g = {0};
    uint32_t nx = hbm * S_BS;
    uint32_t *p = malloc((size_t)n * sizeof *p), *x = malloc((size_t)nx * sizeof *x);
    kvt_hash_t *chain = malloc((size_t)(n / S_BS) * sizeof *chain);
    double *aw = calloc(o->iterations, sizeof *aw), *ac = calloc(o->iterations, sizeof *ac);
    double *hw = calloc(o->iterations, sizeof *hw), *hc = calloc(o->iterations, sizeof *hc);
    if (!p || !x || !chain || !aw || !ac || !hw || !hc || s_rig_up(&g, &cfg) != 0)
        goto cleanup;
    for (uint32_t i = 0; i < n; i++)
        p[i] = 1000 + i;
    for (uint32_t i = 0; i < nx; i++)
        x[i] = 0x40000000u + i;
    //  P leaves its chunks and images in the tier, X evicts P from HBM, A
    //  leaves [0, hit) and its checkpoint at the hit in HBM.
    if (s_arrive(&g, 1, p, n, 1) != 0 || s_run_idle(&g, 100000) != 0 ||
        s_arrive(&g, 2, x, nx, 1) != 0 || s_run_idle(&g, 100000) != 0 ||
        s_arrive(&g, 3, p, hit, 1) != 0 || s_run_idle(&g, 100000) != 0) {
        fprintf(stderr, "kvtier bench admit: building the cached state failed\n");
        goto cleanup;
    }
    //  Iteration 0 warms up and is not counted.
    for (uint32_t it = 0; it <= o->iterations; it++) {
        uint64_t id = 100 + it;
        if (s_arrive(&g, id, p, n, 1) != 0) {
            fprintf(stderr, "kvtier bench admit: request %llu refused\n", (unsigned long long)id);
            goto cleanup;
        }
        //  D's tier lookup goes out and is answered first: the timed plan
        //  is the one that admits it.
        if (s_plan(&g) != 1 || s_collect(&g) != 0) {
            fprintf(stderr, "kvtier bench admit: request %llu's lookup failed\n",
                    (unsigned long long)id);
            goto cleanup;
        }
        s_deliver(&g);
        //  The order alternates; each timed call starts on a fresh time
        //  slice (after a short sleep), so on a loaded machine neither
        //  side is the one that tends to run out of it.
        double h0 = 0, h1 = 0, hc0 = 0, hc1 = 0, t0 = 0, t1 = 0, c0 = 0, c1 = 0;
        uint32_t nh = 0;
        int prc = 0;
        for (int k = 0; k < 2; k++) {
            s_nap();
            if ((k == 0) == (it % 2 == 0)) {
                h0 = kvt_cli_now(), hc0 = kvt_cli_cpu_now();
                nh = kvt_prefix_hashes(cfg.ns, p, n, S_BS, chain);
                h1 = kvt_cli_now(), hc1 = kvt_cli_cpu_now();
            } else {
                t0 = kvt_cli_now(), c0 = kvt_cli_cpu_now();
                prc = s_plan(&g);
                t1 = kvt_cli_now(), c1 = kvt_cli_cpu_now();
            }
        }
        if (nh != n / S_BS) {
            fprintf(stderr, "kvtier bench admit: the chain has %u hashes\n", nh);
            goto cleanup;
        }
        kvt_sched_req_info_t info = {0};
        if (prc != 1 || kvt_sched_req_info(g.s, id, &info) != 0 || info.state != 2 ||
            info.hbm_hit != hit || info.load_end <= hit || info.joint_src == 0 ||
            info.load_floor >= info.load_end) {
            fprintf(stderr,
                    "kvtier bench admit: iteration %u: the admission was not a load above an "
                    "HBM hit of %u with a KV leg (plan %d, state %u, hit %u, floor %u, resume "
                    "%u, joint %u)\n",
                    it, hit, prc, info.state, info.hbm_hit, info.load_floor, info.load_end,
                    info.joint_src);
            goto cleanup;
        }
        out->hit = info.hbm_hit;
        out->block_hit = info.block_hit;
        out->resume = info.load_end;
        out->floor = info.load_floor;
        out->joint_src = info.joint_src;
        //  Released without indexing what it loaded: the next D finds the
        //  same hit and the same rung.
        if (s_collect(&g) != 0 || kvt_sched_abort(g.s, id) != 0) {
            fprintf(stderr, "kvtier bench admit: releasing request %llu failed\n",
                    (unsigned long long)id);
            goto cleanup;
        }
        s_deliver(&g);
        if (s_run_idle(&g, 1000) != 0) {
            fprintf(stderr, "kvtier bench admit: the core did not settle after an abort\n");
            goto cleanup;
        }
        if (it == 0)
            continue;
        aw[it - 1] = (t1 - t0) * 1e6;
        ac[it - 1] = (c1 - c0) * 1e6;
        hw[it - 1] = (h1 - h0) * 1e6;
        hc[it - 1] = (hc1 - hc0) * 1e6;
    }
    char err[256];
    if (kvt_sched_audit(g.s, err, sizeof err) != 0) {
        fprintf(stderr, "kvtier bench admit: %s\n", err);
        goto cleanup;
    }
    out->admit_us = kvt_cli_median(aw, o->iterations);
    out->admit_cpu_us = kvt_cli_median(ac, o->iterations);
    out->hash_us = kvt_cli_median(hw, o->iterations);
    out->hash_cpu_us = kvt_cli_median(hc, o->iterations);
    rc = 0;
cleanup:
    s_rig_down(&g);
    free(p);
    free(x);
    free(chain);
    free(aw);
    free(ac);
    free(hw);
    free(hc);
    return rc;
}

// ------------------------------------------------------------- stats ----

typedef struct {
    double us, cpu_us;   //  amortised per read (median over rounds)
    double deep_us;      //  the round's deep read (median over rounds)
    double cheap_us;     //  the other reads of a round, each (median over rounds)
    uint64_t images;     //  images indexed when read
    uint64_t violations; //  invariant violations the reads counted
} s_stats_t;

static kvt_hash_t s_image(uint32_t i)
{
    return (kvt_hash_t){.hi = 0x57A7E000ull + i, .lo = (i + 1) * 0x9E3779B97F4A7C15ull};
}

static int s_bench_stats(const s_opts_t *o, s_stats_t *out)
{
    int rc = -1;
    uint64_t images = 0, violations = 0;
    //  A hybrid core whose index holds --hashes images (its hash cap).
    kvt_sched_cfg_t cfg = {.block_size = S_BS,
                           .chunk_size = S_CS,
                           .hbm_blocks = 64,
                           .tier_chunks = o->hashes,
                           .max_running = 4,
                           .step_tokens = 8192,
                           .save_retries = 1,
                           .ns = kvt_namespace_hash("kvtier bench admit stats"),
                           .state_bytes = 1u << 20,
                           .checkpoint_interval = S_INTERVAL};
    char err[256];
    kvt_sched_t *x = kvt_sched_new(&cfg, err, sizeof err);
    if (!x)
        fprintf(stderr, "kvtier bench admit: %s\n", err);
    const uint32_t deep = kvt_sched_bench_deep_every();
    double *w = calloc(o->rounds, sizeof *w), *c = calloc(o->rounds, sizeof *c);
    double *dr = calloc(o->rounds, sizeof *dr), *cheap = calloc(o->rounds, sizeof *cheap);
    double *t = malloc((deep + 1) * sizeof *t);
    if (!x || !w || !c || !dr || !cheap || !t)
        goto cleanup;
    for (uint32_t i = 0; i < o->hashes; i++) {
        kvt_hash_t h = s_image(i);
        if (kvt_sched_bench_note_images(x, &h, 1, 1) != 0)
            goto cleanup;
    }
    //  One warm-up round, not counted.
    for (uint32_t i = 0; i < deep; i++)
        kvt_sched_bench_index_read(x, &images, &violations);
    for (uint32_t r = 0; r < o->rounds; r++) {
        s_nap();
        double c0 = kvt_cli_cpu_now();
        t[0] = kvt_cli_now();
        for (uint32_t i = 0; i < deep; i++) {
            kvt_sched_bench_index_read(x, &images, &violations);
            t[i + 1] = kvt_cli_now();
        }
        double c1 = kvt_cli_cpu_now();
        double max = 0;
        for (uint32_t i = 0; i < deep; i++)
            if (t[i + 1] - t[i] > max)
                max = t[i + 1] - t[i];
        w[r] = (t[deep] - t[0]) * 1e6 / deep;
        c[r] = (c1 - c0) * 1e6 / deep;
        //  The round's one deep check is its slowest read.
        dr[r] = max * 1e6;
        cheap[r] = ((t[deep] - t[0]) - max) * 1e6 / (deep - 1);
    }
    out->images = images;
    out->violations = violations;
    out->us = kvt_cli_median(w, o->rounds);
    out->cpu_us = kvt_cli_median(c, o->rounds);
    out->deep_us = kvt_cli_median(dr, o->rounds);
    out->cheap_us = kvt_cli_median(cheap, o->rounds);
    if (out->images != o->hashes || out->violations != 0) {
        fprintf(stderr,
                "kvtier bench admit: the index holds %llu images (%u noted), %llu "
                "invariant violations\n",
                (unsigned long long)out->images, o->hashes, (unsigned long long)out->violations);
        goto cleanup;
    }
    rc = 0;
cleanup:
    kvt_sched_destroy(&x);
    free(w);
    free(c);
    free(dr);
    free(cheap);
    free(t);
    return rc;
}

// -------------------------------------------------------------- step ----

typedef struct {
    double us, cpu_us; //  per step (medians)
    uint32_t entries;  //  fewest entries a measured plan carried
    uint64_t saves;    //  saves the measured plans carried
    uint64_t takes;    //  checkpoints the measured plans took
} s_step_t;

//  Prompt of running request r of n: staggered over a chunk, so that every
//  few steps some request completes a chunk and saves it.
static uint32_t s_step_len(uint32_t r, uint32_t n)
{
    return S_STEP_PROMPT + (uint32_t)((uint64_t)r * S_CS / n);
}

static int s_bench_step(const s_opts_t *o, s_step_t *out)
{
    uint32_t nreq = o->requests, max_new = o->steps + 4096;
    uint32_t per = (S_STEP_PROMPT + S_CS + max_new + S_BS - 1) / S_BS;
    kvt_sched_cfg_t cfg = {.block_size = S_BS,
                           .chunk_size = S_CS,
                           .hbm_blocks = nreq * per + 64,
                           .tier_chunks = 1u << 16,
                           .max_running = nreq,
                           .step_tokens = 8192 > nreq ? 8192 : nreq,
                           .save_retries = 1,
                           .ns = kvt_namespace_hash("kvtier bench admit step"),
                           .state_bytes = 1u << 20,
                           .checkpoint_interval = S_INTERVAL};
    int rc = -1;
    s_rig_t g = {0};
    uint32_t *tok = malloc((S_STEP_PROMPT + S_CS) * sizeof *tok);
    double *w = calloc(o->steps, sizeof *w), *c = calloc(o->steps, sizeof *c);
    if (!tok || !w || !c || s_rig_up(&g, &cfg) != 0)
        goto cleanup;
    for (uint32_t r = 0; r < nreq; r++) {
        uint32_t len = s_step_len(r, nreq);
        for (uint32_t i = 0; i < len; i++)
            tok[i] = 1000 + r * (S_STEP_PROMPT + S_CS) + i;
        if (s_arrive(&g, 1 + r, tok, len, max_new) != 0)
            goto cleanup;
    }
    //  Warm up until every request decodes.
    uint32_t warm = 0;
    for (;; warm++) {
        bool decoding = true;
        for (uint32_t r = 0; r < nreq && decoding; r++) {
            kvt_sched_req_info_t info = {0};
            decoding = kvt_sched_req_info(g.s, 1 + r, &info) == 0 && info.state == 3 &&
                       info.computed >= s_step_len(r, nreq);
        }
        if (decoding)
            break;
        if (warm >= 4000 || s_plan(&g) < 0 || s_collect(&g) != 0) {
            fprintf(stderr, "kvtier bench admit: the %u requests did not reach decode\n", nreq);
            goto cleanup;
        }
        s_deliver(&g);
    }
    out->entries = UINT32_MAX;
    //  The step the warm-up planned last is applied inside the first timed
    //  step.
    for (uint32_t s = 0; s < o->steps; s++) {
        double t0 = kvt_cli_now(), c0 = kvt_cli_cpu_now();
        int arc = kvt_sched_apply(g.s, g.step, true);
        int prc = s_plan(&g);
        double t1 = kvt_cli_now(), c1 = kvt_cli_cpu_now();
        if (arc != 0 || prc != 1 || s_collect(&g) != 0) {
            fprintf(stderr, "kvtier bench admit: step %llu: apply %d, plan %d\n",
                    (unsigned long long)g.step, arc, prc);
            goto cleanup;
        }
        if (g.plan.nentries < out->entries)
            out->entries = g.plan.nentries;
        out->saves += g.plan.nsaves;
        const kvt_sched_state_op_t *ops;
        uint32_t nops;
        kvt_sched_plan_state(g.s, &ops, &nops);
        for (uint32_t i = 0; i < nops; i++)
            out->takes += ops[i].kind == KVT_SCHED_STATE_TAKE;
        double t2 = kvt_cli_now(), c2 = kvt_cli_cpu_now();
        s_deliver(&g);
        double t3 = kvt_cli_now(), c3 = kvt_cli_cpu_now();
        w[s] = ((t1 - t0) + (t3 - t2)) * 1e6;
        c[s] = ((c1 - c0) + (c3 - c2)) * 1e6;
    }
    if (out->entries != nreq) {
        fprintf(stderr, "kvtier bench admit: a measured step ran %u of %u requests\n", out->entries,
                nreq);
        goto cleanup;
    }
    out->us = kvt_cli_median(w, o->steps);
    out->cpu_us = kvt_cli_median(c, o->steps);
    rc = 0;
cleanup:
    s_rig_down(&g);
    free(tok);
    free(w);
    free(c);
    return rc;
}

// ---------------------------------------------------------------- main --

static void s_usage(FILE *out)
{
    fprintf(out,
            "usage: kvtier bench admit [--json PATH] [--prompt-tokens N] [--iterations N]\n"
            "                          [--hashes N] [--stats-rounds N] [--requests N] [--steps N]\n"
            "  --json PATH          also write the results as JSON\n"
            "  --prompt-tokens N    prompt of the admission, default 131072 (multiple of 2048,\n"
            "                       2048..1048576); the HBM hit is half of it\n"
            "  --iterations N       admissions and hash chains timed, default 21 (1..1001)\n"
            "  --hashes N           images in the state-offload index, default 1048576\n"
            "                       (256..16777216)\n"
            "  --stats-rounds N     rounds of 256 stats reads, default 21 (1..1001)\n"
            "  --requests N         running requests of the step, default 64 (1..4096)\n"
            "  --steps N            steps timed, default 200 (1..100000)\n");
}

static int s_parse(int argc, char **argv, s_opts_t *o)
{
    *o = (s_opts_t){.prompt = 131072,
                    .iterations = 21,
                    .hashes = 1u << 20,
                    .rounds = 21,
                    .requests = 64,
                    .steps = 200};
    const kvt_cli_num_t nums[] = {{"--prompt-tokens", 2048, 1u << 20, 2048, &o->prompt},
                                  {"--iterations", 1, 1001, 0, &o->iterations},
                                  {"--hashes", 256, 1u << 24, 0, &o->hashes},
                                  {"--stats-rounds", 1, 1001, 0, &o->rounds},
                                  {"--requests", 1, KVT_MSG_MAX_ENTRIES, 0, &o->requests},
                                  {"--steps", 1, 100000, 0, &o->steps}};
    return kvt_cli_parse_nums("kvtier bench admit", argc, argv, nums, sizeof nums / sizeof nums[0],
                              &o->json, s_usage);
}

static void s_set(json_t *o, const char *k, json_t *v)
{
    json_object_set_new(o, k, v);
}

int kvt_cmd_bench_admit(int argc, char **argv)
{
    s_opts_t o;
    int p = s_parse(argc, argv, &o);
    if (p != 0)
        return p > 0 ? 0 : 2;
    char cpu[256];
    kvt_cli_cpu_model(cpu, sizeof cpu);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    double load0 = kvt_cli_loadavg();
    printf("kvtier bench admit: %ld cpus (%s); prompt %u tokens, %u iterations; %u images, %u "
           "rounds of %u reads; %u requests, %u steps\n",
           ncpu, cpu, o.prompt, o.iterations, o.hashes, o.rounds, kvt_sched_bench_deep_every(),
           o.requests, o.steps);
    s_admit_t a = {0};
    s_stats_t st = {0};
    s_step_t sp = {0};
    if (s_bench_admit(&o, &a) != 0 || s_bench_stats(&o, &st) != 0 || s_bench_step(&o, &sp) != 0)
        return 1;
    double load1 = kvt_cli_loadavg();
    double ratio = a.admit_us / a.hash_us, cpu_ratio = a.admit_cpu_us / a.hash_cpu_us;
    bool admit_met = ratio <= S_TARGET_RATIO, stats_met = st.us <= S_TARGET_STATS_US;
    bool step_met = sp.us <= S_TARGET_STEP_US;
    printf("admission (hit %u, resume %u, state from %s): %.1f us (CPU %.1f); hash chain %.1f us "
           "(CPU %.1f); ratio %.2f (CPU %.2f), target <= %.0f: %s\n",
           a.hit, a.resume, a.joint_src == 2 ? "the tier" : "HBM", a.admit_us, a.admit_cpu_us,
           a.hash_us, a.hash_cpu_us, ratio, cpu_ratio, S_TARGET_RATIO,
           admit_met ? "met" : "NOT met");
    printf("stats read, %llu images: %.3f us amortised (CPU %.3f; deep check %.1f us, other reads "
           "%.3f us), target <= %.0f: %s\n",
           (unsigned long long)st.images, st.us, st.cpu_us, st.deep_us, st.cheap_us,
           S_TARGET_STATS_US, stats_met ? "met" : "NOT met");
    printf("step, %u running: %.1f us (CPU %.1f), target <= %.0f: %s\n", sp.entries, sp.us,
           sp.cpu_us, S_TARGET_STEP_US, step_met ? "met" : "NOT met");
    printf("load average (1 min): %.2f at start, %.2f at end\n", load0, load1);
    if (!o.json)
        return 0;
    json_t *doc = json_object();
    json_t *m = json_object(), *geo = json_object(), *its = json_object();
    s_set(doc, "bench", json_string("admit"));
    s_set(m, "nproc", json_integer(ncpu));
    s_set(m, "cpu", json_string(cpu));
    s_set(m, "load_avg_1min_start", json_real(load0));
    s_set(m, "load_avg_1min_end", json_real(load1));
    s_set(doc, "machine", m);
    s_set(geo, "block_size", json_integer(S_BS));
    s_set(geo, "chunk_size", json_integer(S_CS));
    s_set(geo, "checkpoint_interval", json_integer(S_INTERVAL));
    s_set(geo, "prompt_tokens", json_integer(o.prompt));
    s_set(geo, "block_hit_tokens", json_integer(a.block_hit));
    s_set(geo, "hbm_hit_tokens", json_integer(a.hit));
    s_set(geo, "load_floor_tokens", json_integer(a.floor));
    s_set(geo, "resume_tokens", json_integer(a.resume));
    s_set(geo, "state_from", json_string(a.joint_src == 2 ? "tier" : "hbm"));
    s_set(geo, "hbm_blocks", json_integer(a.hbm_blocks));
    s_set(geo, "stats_images", json_integer((json_int_t)st.images));
    s_set(geo, "step_requests", json_integer(o.requests));
    s_set(geo, "step_prompt_tokens_min", json_integer(S_STEP_PROMPT));
    s_set(geo, "step_prompt_tokens_max", json_integer(s_step_len(o.requests - 1, o.requests)));
    s_set(doc, "geometry", geo);
    s_set(its, "admit", json_integer(o.iterations));
    s_set(its, "stats_reads", json_integer((json_int_t)o.rounds * kvt_sched_bench_deep_every()));
    s_set(its, "stats_rounds", json_integer(o.rounds));
    s_set(its, "steps", json_integer(o.steps));
    s_set(doc, "iterations", its);
    s_set(doc, "admit_us_128k", json_real(a.admit_us));
    s_set(doc, "admit_cpu_us_128k", json_real(a.admit_cpu_us));
    s_set(doc, "hash_chain_us_128k", json_real(a.hash_us));
    s_set(doc, "hash_chain_cpu_us_128k", json_real(a.hash_cpu_us));
    s_set(doc, "admit_ratio", json_real(ratio));
    s_set(doc, "admit_cpu_ratio", json_real(cpu_ratio));
    s_set(doc, "admit_ratio_target_max", json_real(S_TARGET_RATIO));
    s_set(doc, "admit_target_met", json_boolean(admit_met));
    s_set(doc, "stats_us_1m", json_real(st.us));
    s_set(doc, "stats_cpu_us_1m", json_real(st.cpu_us));
    s_set(doc, "stats_deep_check_us_1m", json_real(st.deep_us));
    s_set(doc, "stats_other_read_us_1m", json_real(st.cheap_us));
    s_set(doc, "stats_us_target_max", json_real(S_TARGET_STATS_US));
    s_set(doc, "stats_target_met", json_boolean(stats_met));
    s_set(doc, "step_us_c64", json_real(sp.us));
    s_set(doc, "step_cpu_us_c64", json_real(sp.cpu_us));
    s_set(doc, "step_saves", json_integer((json_int_t)sp.saves));
    s_set(doc, "step_checkpoints_taken", json_integer((json_int_t)sp.takes));
    s_set(doc, "step_us_target_max", json_real(S_TARGET_STEP_US));
    s_set(doc, "step_target_met", json_boolean(step_met));
    s_set(doc, "method",
          json_string("medians over iterations (one warm-up of each not counted); "
                      "wall CLOCK_MONOTONIC, CPU CLOCK_THREAD_CPUTIME_ID; "
                      "admit_ratio = admit_us_128k / hash_chain_us_128k"));
    int rc = 0;
    if (json_dump_file(doc, o.json, JSON_INDENT(2) | JSON_REAL_PRECISION(6)) != 0) {
        fprintf(stderr, "kvtier bench admit: --json %s: cannot write\n", o.json);
        rc = 1;
    }
    json_decref(doc);
    return rc;
}
