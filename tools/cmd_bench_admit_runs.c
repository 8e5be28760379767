/*  cmd_bench_admit_runs — what `kvtier bench admit` times (cmd_bench_admit.h;
    the command and what each measurement is: cmd_bench_admit.c). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "actors/common/kvt_prefix.h"
#include "actors/scheduler/kvt_sched_bench.h"
#include "base/kvt_hmap.h"
#include "cmd_bench_admit.h"
#include "kvt_cli.h"
#include "kvtier/kvt_msg.h"
#include "kvtier/kvt_sched.h"

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

int kvt_badmit_admit(const kvt_badmit_opts_t *o, kvt_badmit_admit_t *out)
{
    uint32_t n = o->prompt, hit = n / 2;
    uint32_t hbm = n / KVT_BADMIT_BS + 64;
    kvt_sched_cfg_t cfg = {.block_size = KVT_BADMIT_BS,
                           .chunk_size = KVT_BADMIT_CS,
                           .hbm_blocks = hbm,
                           .tier_chunks = 4 * (n / KVT_BADMIT_CS) + 64,
                           .max_running = 4,
                           .step_tokens = 8192,
                           .save_retries = 1,
                           .ns = kvt_namespace_hash("kvtier bench admit"),
                           .state_bytes = 1u << 20,
                           .checkpoint_interval = KVT_BADMIT_INTERVAL,
                           .hbm_checkpoints = 2};
    out->hbm_blocks = hbm;
    out->tier_keys = cfg.tier_chunks;
    int rc = -1;
    s_rig_t g = {0};
    uint32_t nx = hbm * KVT_BADMIT_BS;
    uint32_t *p = malloc((size_t)n * sizeof *p), *x = malloc((size_t)nx * sizeof *x);
    kvt_hash_t *chain = malloc((size_t)(n / KVT_BADMIT_BS) * sizeof *chain);
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
                nh = kvt_prefix_hashes(cfg.ns, p, n, KVT_BADMIT_BS, chain);
                h1 = kvt_cli_now(), hc1 = kvt_cli_cpu_now();
            } else {
                t0 = kvt_cli_now(), c0 = kvt_cli_cpu_now();
                prc = s_plan(&g);
                t1 = kvt_cli_now(), c1 = kvt_cli_cpu_now();
            }
        }
        if (nh != n / KVT_BADMIT_BS) {
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

static kvt_hash_t s_image(uint32_t i)
{
    return (kvt_hash_t){.hi = 0x57A7E000ull + i, .lo = (i + 1) * 0x9E3779B97F4A7C15ull};
}

int kvt_badmit_stats(const kvt_badmit_opts_t *o, kvt_badmit_stats_t *out)
{
    int rc = -1;
    uint64_t images = 0, violations = 0;
    //  A hybrid core whose index holds --hashes images (its hash cap).
    kvt_sched_cfg_t cfg = {.block_size = KVT_BADMIT_BS,
                           .chunk_size = KVT_BADMIT_CS,
                           .hbm_blocks = 64,
                           .tier_chunks = o->hashes,
                           .max_running = 4,
                           .step_tokens = 8192,
                           .save_retries = 1,
                           .ns = kvt_namespace_hash("kvtier bench admit stats"),
                           .state_bytes = 1u << 20,
                           .checkpoint_interval = KVT_BADMIT_INTERVAL};
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

//  Prompt of running request r of n: staggered over a chunk, so that every
//  few steps some request completes a chunk and saves it.
uint32_t kvt_badmit_step_len(uint32_t r, uint32_t n)
{
    return KVT_BADMIT_STEP_PROMPT + (uint32_t)((uint64_t)r * KVT_BADMIT_CS / n);
}

int kvt_badmit_step(const kvt_badmit_opts_t *o, kvt_badmit_step_t *out)
{
    uint32_t nreq = o->requests, max_new = o->steps + 4096;
    uint32_t per =
        (KVT_BADMIT_STEP_PROMPT + KVT_BADMIT_CS + max_new + KVT_BADMIT_BS - 1) / KVT_BADMIT_BS;
    kvt_sched_cfg_t cfg = {.block_size = KVT_BADMIT_BS,
                           .chunk_size = KVT_BADMIT_CS,
                           .hbm_blocks = nreq * per + 64,
                           .tier_chunks = 1u << 16,
                           .max_running = nreq,
                           .step_tokens = 8192 > nreq ? 8192 : nreq,
                           .save_retries = 1,
                           .ns = kvt_namespace_hash("kvtier bench admit step"),
                           .state_bytes = 1u << 20,
                           .checkpoint_interval = KVT_BADMIT_INTERVAL};
    int rc = -1;
    s_rig_t g = {0};
    uint32_t *tok = malloc((KVT_BADMIT_STEP_PROMPT + KVT_BADMIT_CS) * sizeof *tok);
    double *w = calloc(o->steps, sizeof *w), *c = calloc(o->steps, sizeof *c);
    if (!tok || !w || !c || s_rig_up(&g, &cfg) != 0)
        goto cleanup;
    for (uint32_t r = 0; r < nreq; r++) {
        uint32_t len = kvt_badmit_step_len(r, nreq);
        for (uint32_t i = 0; i < len; i++)
            tok[i] = 1000 + r * (KVT_BADMIT_STEP_PROMPT + KVT_BADMIT_CS) + i;
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
                       info.computed >= kvt_badmit_step_len(r, nreq);
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
