/*  The loss ledger (src/replay/kvt_ledger.h): its ideal and every loss
    against a simple independent implementation written here (token arrays
    compared element by element, every lost token classified one at a
    time), on random small workloads and plans, and its identity on real
    replays of small traces at several capacities. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <jansson.h>

#include "replay/kvt_ledger.h"
#include "replay/kvt_replay.h"

#define BS 16
#define CS 256

// ------------------------------------------------------------ workloads --

static uint64_t s_rng;

static uint32_t s_rand(uint32_t n)
{
    s_rng = s_rng * 6364136223846793005ull + 1442695040888963407ull;
    return n ? (uint32_t)((s_rng >> 33) % n) : 0;
}

//  n requests; each shares a random number of leading block ids with a
//  random earlier one (or none) and ends inside its last block.
static kvt_workload_t *s_workload(uint32_t n)
{
    kvt_workload_t *wl = calloc(1, sizeof *wl);
    wl->reqs = calloc(n, sizeof *wl->reqs);
    wl->n = n;
    uint32_t next_id = 1;
    for (uint32_t i = 0; i < n; i++) {
        kvt_wreq_t *r = &wl->reqs[i];
        r->nids = 1 + s_rand(6);
        r->ids = calloc(r->nids, sizeof *r->ids);
        uint32_t shared = 0;
        if (i > 0 && s_rand(4) != 0) {
            const kvt_wreq_t *p = &wl->reqs[s_rand(i)];
            shared = s_rand(p->nids + 1);
            shared = shared < r->nids ? shared : r->nids;
            memcpy(r->ids, p->ids, shared * sizeof *r->ids);
        }
        for (uint32_t d = shared; d < r->nids; d++)
            r->ids[d] = next_id++;
        r->input_len = (r->nids - 1) * 512 + 1 + s_rand(512);
        r->output_len = 1;
        r->arrival_us = i;
        wl->input_tokens += r->input_len;
    }
    return wl;
}

static uint32_t **s_tokens(const kvt_workload_t *wl)
{
    uint32_t **t = calloc(wl->n, sizeof *t);
    for (uint32_t i = 0; i < wl->n; i++) {
        t[i] = malloc(wl->reqs[i].input_len * sizeof **t);
        kvt_workload_tokens(wl, i, t[i]);
    }
    return t;
}

static void s_free(kvt_workload_t *wl, uint32_t **tok)
{
    for (uint32_t i = 0; i < wl->n; i++)
        free(tok[i]);
    free(tok);
    kvt_workload_destroy(&wl);
}

// -------------------------------------------- the independent implementation

//  Leading tokens of i and e that are equal.
static uint32_t s_common(const kvt_workload_t *wl, uint32_t **tok, uint32_t i, uint32_t e)
{
    uint32_t n = wl->reqs[i].input_len < wl->reqs[e].input_len ? wl->reqs[i].input_len
                                                               : wl->reqs[e].input_len;
    uint32_t k = 0;
    while (k < n && tok[i][k] == tok[e][k])
        k++;
    return k;
}

static uint32_t s_grid(uint32_t v, uint32_t len, uint32_t tail, uint32_t g)
{
    uint32_t cap = len > tail ? len - tail : 0;
    v = v < cap ? v : cap;
    return v / g * g;
}

typedef struct {
    uint32_t req;  //  whose checkpoint
    uint32_t at;   //  boundary
    uint32_t inst; //  instance it was taken in
} s_take_t;

typedef struct {
    kvt_ledger_cfg_t cfg;
    uint32_t ninst;
    uint64_t loss[KVT_LOSS_COUNT];
    uint64_t hits, hit_lower, ideal;
} s_expect_t;

//  One random scenario: the ledger is fed plans; the expectation is
//  computed here, token by token.
static void s_scenario(uint64_t seed, const kvt_ledger_cfg_t *cfg, uint32_t ninst)
{
    s_rng = seed;
    uint32_t n = 40 + s_rand(30);
    kvt_workload_t *wl = s_workload(n);
    uint32_t **tok = s_tokens(wl);
    kvt_ledger_t *lg = kvt_ledger_new(wl, cfg);
    cr_assert_not_null(lg);
    uint32_t g = BS, tail = cfg->tail;
    uint32_t *inst = calloc(n, sizeof *inst), *computed = calloc(n, sizeof *computed);
    s_take_t *takes = calloc(n * 8, sizeof *takes);
    uint32_t ntakes = 0;
    for (uint32_t i = 0; i < n; i++)
        inst[i] = ninst > 1 ? s_rand(ninst) : 0;
    s_expect_t x;
    memset(&x, 0, sizeof x);
    //  The ideal, against every earlier request of the trace.
    for (uint32_t i = 0; i < n; i++) {
        uint32_t best = 0;
        for (uint32_t e = 0; e < i; e++) {
            uint32_t c = s_common(wl, tok, i, e);
            best = c > best ? c : best;
        }
        uint32_t ideal = s_grid(best, wl->reqs[i].input_len, tail, g);
        cr_assert_eq(kvt_ledger_ideal(lg, i), ideal, "seed %llu request %u: ideal",
                     (unsigned long long)seed, i);
        x.ideal += ideal;
    }
    kvt_loss_t low = cfg->disk_tier || cfg->remote_tier ? KVT_LOSS_DISK
                     : cfg->cpu_tier                    ? KVT_LOSS_CPU_CHUNK
                                                        : KVT_LOSS_HBM_KV;
    kvt_loss_t evicted = cfg->state_tier ? KVT_LOSS_CPU_IMAGE : KVT_LOSS_HBM_CKPT;
    for (uint32_t k = 0; k < ninst; k++) {
        uint32_t *global_of = calloc(n, sizeof *global_of), m = 0;
        for (uint32_t i = 0; i < n; i++)
            if (inst[i] == k)
                global_of[m++] = i;
        cr_assert_eq(kvt_ledger_instance(lg, global_of, m), 0);
        for (uint32_t j = 0; j < m; j++) {
            uint32_t i = global_of[j], len = wl->reqs[i].input_len;
            kvt_event_t ev[6];
            kvt_entry_t en[4];
            memset(ev, 0, sizeof ev);
            memset(en, 0, sizeof en);
            uint32_t nev = 0, nen = 0;
            uint32_t ideal = kvt_ledger_ideal(lg, i), ideal_inst = 0, avail = 0;
            for (uint32_t e = 0; e < i; e++)
                if (inst[e] == k) {
                    uint32_t c = s_common(wl, tok, i, e);
                    ideal_inst = c > ideal_inst ? c : ideal_inst;
                }
            ideal_inst = s_grid(ideal_inst, len, tail, g);
            for (uint32_t e = 0; e < n; e++)
                if (inst[e] == k && computed[e]) {
                    uint32_t c = s_common(wl, tok, i, e);
                    c = c < computed[e] ? c : computed[e];
                    avail = c > avail ? c : avail;
                }
            avail = s_grid(avail, len, tail, g);
            avail = avail < ideal_inst ? avail : ideal_inst;
            if (s_rand(10) == 0) { //  rejected
                ev[nev++] = (kvt_event_t){{j, 1}, KVT_EV_FINISH, len, 0, 1};
                x.loss[KVT_LOSS_REJECTED] += ideal;
                kvt_step_plan_t p = {.events = ev, .nevents = nev};
                kvt_ledger_plan(lg, &p);
                continue;
            }
            uint32_t kv_hbm = s_rand(avail / BS + 1) * BS;
            bool timeout = cfg->cpu_tier && s_rand(8) == 0;
            uint32_t tier = timeout || !cfg->cpu_tier ? 0 : s_rand(avail / CS + 1) * CS;
            uint32_t kv_f = kv_hbm;
            uint32_t kv = tier > kv_f ? tier : kv_f;
            uint32_t gated, chosen, reason = 0, cand = 0;
            if (!cfg->hybrid) {
                gated = kv_hbm;
                chosen = s_rand(10) == 0 ? gated : (kv > gated ? kv : gated);
            } else {
                gated = s_rand(kv_f / CS + 1) * CS;
                chosen = gated;
                uint32_t above = kv > gated ? (kv - gated) / CS : 0;
                uint32_t pick = s_rand(5);
                if (above && pick <= 1)
                    chosen = gated + (1 + s_rand(above)) * CS, cand = chosen;
                else if (above && pick <= 4)
                    reason = 1 + pick, cand = gated + (1 + s_rand(above)) * CS;
                else
                    reason = kv > gated ? 2 : 1;
            }
            ev[nev++] = (kvt_event_t){{j, 1}, KVT_EV_ADMIT, gated, chosen - gated, len};
            ev[nev++] = (kvt_event_t){
                {j, 1}, KVT_EV_OUTCOME, kv_hbm, tier, KVT_EV_OUTCOME_C(reason, timeout, cand / CS)};
            uint32_t lost = 0, loaded = 0, lower = 0;
            if (chosen > gated && s_rand(5) != 0) {
                loaded = chosen - gated;
                lower = s_rand(loaded + 1);
                ev[nev++] = (kvt_event_t){{j, 1}, KVT_EV_LOADED, chosen, loaded, lower};
            } else if (chosen > gated) {
                lost = s_rand(gated + 1);
                ev[nev++] = (kvt_event_t){{j, 1}, KVT_EV_RETREAT, gated - lost, 0, lost};
            }
            ev[nev++] = (kvt_event_t){{j, 1}, KVT_EV_FINISH, len, 1, 0};
            //  Every token of its ideal, one at a time.
            uint32_t resumed = gated - lost + loaded;
            uint32_t chunked = avail / CS * CS;
            x.hits += resumed;
            x.hit_lower += lower;
            for (uint32_t t = resumed; t < ideal; t++) {
                kvt_loss_t why;
                if (t >= ideal_inst)
                    why = KVT_LOSS_OTHER_INSTANCE;
                else if (t >= avail)
                    why = KVT_LOSS_IN_FLIGHT;
                else if (t >= kv)
                    why = timeout ? KVT_LOSS_LOOKUP_TIMEOUT : t >= chunked ? KVT_LOSS_HBM_KV : low;
                else if (t >= chosen && cfg->hybrid && reason >= 3 && t < cand)
                    why = reason == 3   ? KVT_LOSS_MIN_LOAD
                          : reason == 4 ? KVT_LOSS_NO_PROBE
                                        : KVT_LOSS_NO_ROOM;
                else if (t >= chosen && cfg->hybrid) {
                    uint32_t end = (t / CS + 1) * CS;
                    end = end < kv ? end : kv; //  the top segment ends at the KV
                    bool was = false;
                    for (uint32_t q = 0; q < ntakes && !was; q++)
                        was = takes[q].inst == k && takes[q].at == end &&
                              s_common(wl, tok, i, takes[q].req) >= end;
                    why = was ? evicted : KVT_LOSS_CKPT_NEVER;
                } else
                    why = KVT_LOSS_LOAD_FAILED;
                x.loss[why]++;
            }
            //  Its forward: the prompt computed to end, checkpoints taken.
            uint32_t end = chosen + 1 + s_rand(len - chosen);
            en[nen++] = (kvt_entry_t){.op = {j, 1}, .start = chosen, .end = end};
            for (uint32_t c = (chosen / CS + 1) * CS; cfg->hybrid && c <= end && nen < 4; c += CS)
                if (s_rand(2)) {
                    en[nen++] = (kvt_entry_t){
                        .op = {j, 1}, .start = c - 1, .end = c, .state = true, .take_at = c};
                    takes[ntakes++] = (s_take_t){i, c, k};
                }
            kvt_step_plan_t p = {.events = ev, .nevents = nev, .entries = en, .nentries = nen};
            kvt_ledger_plan(lg, &p);
            computed[i] = end < len ? end : len;
        }
        free(global_of);
    }
    kvt_ledger_report_t r;
    kvt_ledger_report(lg, &r);
    char why[400];
    cr_assert(kvt_ledger_holds(&r, why, sizeof why), "seed %llu: %s", (unsigned long long)seed,
              why);
    cr_assert_eq(r.ideal, x.ideal, "seed %llu: ideal", (unsigned long long)seed);
    cr_assert_eq(r.input_tokens, wl->input_tokens, "every input token, rejected included");
    cr_assert_eq(kvt_ledger_hits(&r), x.hits, "seed %llu: hits", (unsigned long long)seed);
    cr_assert_eq(r.hit_disk + r.hit_remote, x.hit_lower);
    for (int q = 0; q < KVT_LOSS_COUNT; q++)
        cr_assert_eq(r.loss[q], x.loss[q], "seed %llu: loss %s: %llu, want %llu",
                     (unsigned long long)seed, kvt_ledger_loss_key((kvt_loss_t)q),
                     (unsigned long long)r.loss[q], (unsigned long long)x.loss[q]);
    kvt_ledger_destroy(&lg);
    free(inst);
    free(computed);
    free(takes);
    s_free(wl, tok);
}

static const kvt_ledger_cfg_t s_cfgs[] = {
    {BS, CS, 1, false, false, false, false, false}, //  dense, HBM only
    {BS, CS, 1, false, true, false, false, false},  //  dense, CPU tier
    {BS, CS, 2, false, true, true, false, false},   //  dense, disk, speculative tail
    {BS, CS, 1, true, true, false, false, true},    //  hybrid, images in the tier
    {BS, CS, 1, true, false, false, false, false},  //  hybrid, HBM only
    {BS, CS, 2, true, true, false, true, true},     //  hybrid, remote
};

Test(ledger, ideal_and_every_loss_match_an_independent_count, .timeout = 120)
{
    for (size_t c = 0; c < sizeof s_cfgs / sizeof s_cfgs[0]; c++)
        for (uint64_t seed = 1; seed <= 12; seed++)
            s_scenario(seed * 97 + c, &s_cfgs[c], 1);
}

Test(ledger, instances_charge_prefixes_routed_away, .timeout = 120)
{
    for (size_t c = 0; c < sizeof s_cfgs / sizeof s_cfgs[0]; c++)
        for (uint64_t seed = 1; seed <= 8; seed++)
            s_scenario(seed * 131 + c, &s_cfgs[c], 3);
}

//  A resume above what the trace allows is no loss: the identity fails.
Test(ledger, a_resume_above_the_ideal_fails_the_identity)
{
    s_rng = 5;
    kvt_workload_t *wl = s_workload(2);
    kvt_ledger_t *lg = kvt_ledger_new(wl, &s_cfgs[1]);
    cr_assert_eq(kvt_ledger_instance(lg, NULL, 2), 0);
    kvt_event_t ev[] = {{{0, 1}, KVT_EV_ADMIT, 0, 0, 0},     {{0, 1}, KVT_EV_OUTCOME, 0, 0, 0},
                        {{0, 1}, KVT_EV_FINISH, 1, 1, 0},    {{1, 1}, KVT_EV_ADMIT, 256, 0, 0},
                        {{1, 1}, KVT_EV_OUTCOME, 256, 0, 0}, {{1, 1}, KVT_EV_FINISH, 1, 1, 0}};
    if (kvt_ledger_ideal(lg, 1) >= 256) //  the random workload shares: make it not
        ev[3].a = ev[4].a = kvt_ledger_ideal(lg, 1) + 256;
    kvt_step_plan_t p = {.events = ev, .nevents = 6};
    kvt_ledger_plan(lg, &p);
    kvt_ledger_report_t r;
    kvt_ledger_report(lg, &r);
    char why[400];
    cr_assert_not(kvt_ledger_holds(&r, why, sizeof why));
    cr_assert_gt(r.inconsistent, 0);
    kvt_ledger_destroy(&lg);
    s_free(wl, s_tokens(wl));
}

// ------------------------------------------------------------ end to end --

//  A small Mooncake trace: sessions whose turns extend the previous
//  prompt, and a shared system prompt.
static const char *s_trace(char *path, size_t len)
{
    snprintf(path, len, "/tmp/kvt_ledger_%d.jsonl", (int)getpid());
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    s_rng = 11;
    uint32_t id = 100;
    for (uint32_t s = 0; s < 12; s++) {
        uint32_t ids[24], n = 2;
        ids[0] = 1;
        ids[1] = 2; //  the system prompt
        for (uint32_t t = 0; t < 4; t++) {
            uint32_t add = 1 + s_rand(3);
            for (uint32_t a = 0; a < add && n < 24; a++)
                ids[n++] = id++;
            fprintf(
                f,
                "{\"timestamp\": %u, \"input_length\": %u, \"output_length\": 20, \"hash_ids\": [",
                (s * 4 + t) * 700 + t * 5000, (n - 1) * 512 + 1 + s_rand(511));
            for (uint32_t a = 0; a < n; a++)
                fprintf(f, "%s%u", a ? ", " : "", ids[a]);
            fprintf(f, "]}\n");
        }
    }
    fclose(f);
    return path;
}

static void s_replay_holds(kvt_replay_cfg_t *c, const char *what)
{
    kvt_replay_report_t r;
    char err[512];
    cr_assert_eq(kvt_replay_run(c, &r, err, sizeof err), 0, "%s: %s", what, err);
    cr_assert(!r.failed, "%s: the run failed: %s", what, r.failures);
    char why[400];
    cr_assert(kvt_ledger_holds(&r.ledger, why, sizeof why), "%s: %s", what, why);
    cr_assert_eq(kvt_ledger_hits(&r.ledger), r.engine.hbm_hit_tokens + r.engine.tier_hit_tokens,
                 "%s: the ledger's hits are the engine's", what);
    cr_assert_gt(r.ledger.ideal, 0, "%s: the trace shares prefixes", what);
    //  The ideal is the trace's: the same whatever the capacity.
    kvt_workload_t *wl = kvt_workload_mooncake(c->trace, 0, err, sizeof err);
    cr_assert_not_null(wl, "%s", err);
    uint32_t **tok = s_tokens(wl);
    uint64_t ideal = 0;
    uint32_t g = c->block_size;
    for (uint32_t i = 0; i < wl->n; i++) {
        uint32_t best = 0;
        for (uint32_t e = 0; e < i; e++) {
            uint32_t m = s_common(wl, tok, i, e);
            best = m > best ? m : best;
        }
        ideal += s_grid(best, wl->reqs[i].input_len, 1, g);
    }
    cr_assert_eq(r.ledger.ideal, ideal, "%s: ideal %llu, want %llu", what,
                 (unsigned long long)r.ledger.ideal, (unsigned long long)ideal);
    cr_assert_eq(r.ledger.input_tokens, wl->input_tokens, "%s: all input tokens", what);
    if (c->state_bytes) {
        //  The state's share of the losses is the scheduler's own state
        //  tax (KV alone could have resumed minus the boundary chosen).
        const kvt_loss_t st[] = {KVT_LOSS_CKPT_NEVER, KVT_LOSS_HBM_CKPT, KVT_LOSS_CPU_IMAGE,
                                 KVT_LOSS_MIN_LOAD,   KVT_LOSS_NO_PROBE, KVT_LOSS_NO_ROOM};
        uint64_t tax = 0;
        for (size_t i = 0; i < sizeof st / sizeof st[0]; i++)
            tax += r.ledger.loss[st[i]];
        cr_assert_eq(tax, kvt_replay_counter(&r, "scheduler", "sched.state_tax_tokens"),
                     "%s: the state losses are the state tax", what);
    }
    s_free(wl, tok);
    kvt_replay_report_clear(&r);
}

static void s_base(kvt_replay_cfg_t *c, const char *trace)
{
    kvt_replay_defaults(c);
    c->trace = trace;
    c->log_level = 0;
    c->byte_scale = 1;
}

Test(ledger, replays_hold_the_identity_at_several_capacities, .timeout = 300)
{
    char path[128];
    const char *trace = s_trace(path, sizeof path);
    kvt_replay_cfg_t c;
    s_base(&c, trace);
    c.cpu_pool_bytes = 0;
    c.hbm_pool_bytes = 1ull << 20; //  512 blocks: HBM alone, evicting
    s_replay_holds(&c, "dense, small HBM, no tier");
    s_base(&c, trace);
    c.hbm_pool_bytes = 1ull << 20;
    c.cpu_pool_bytes = 2ull << 20;
    s_replay_holds(&c, "dense, small HBM, small CPU tier");
    s_base(&c, trace);
    s_replay_holds(&c, "dense, default sizes");
    s_base(&c, trace);
    c.state_bytes = 4096;
    c.checkpoint_interval = 1024;
    s_replay_holds(&c, "hybrid, default sizes");
    s_base(&c, trace);
    c.state_bytes = 4096;
    c.checkpoint_interval = 1024;
    c.hbm_pool_bytes = 2ull << 20;
    c.cpu_pool_bytes = 2ull << 20;
    s_replay_holds(&c, "hybrid, small pools");
    s_base(&c, trace);
    c.instances = 3;
    s_replay_holds(&c, "dense, three instances");
    //  Every joint gains less than min_load_tokens: the gain is charged to
    //  below_min_load, up to the boundary the planner found.
    s_base(&c, trace);
    c.state_bytes = 4096;
    c.checkpoint_interval = 1024;
    c.hbm_pool_bytes = 2ull << 20;
    c.min_load_tokens = 1u << 20;
    kvt_replay_report_t r;
    char err[512];
    cr_assert_eq(kvt_replay_run(&c, &r, err, sizeof err), 0, "%s", err);
    cr_assert(!r.failed, "%s", r.failures);
    cr_assert_gt(kvt_replay_counter(&r, "scheduler", "sched.below_min_load"), 0);
    cr_assert_gt(r.ledger.loss[KVT_LOSS_MIN_LOAD], 0, "the skipped joints' gain");
    kvt_replay_report_clear(&r);
    unlink(path);
}

//  Requests the engine aborts (--fault abort) and preempts (--fault
//  preempt): their tokens go to the reasons aborted and preempted, and the
//  identity and the engine's hit count still hold to the token, dense and
//  hybrid.
Test(ledger, aborted_and_preempted_requests_are_charged_to_their_reasons, .timeout = 300)
{
    char path[128];
    const char *trace = s_trace(path, sizeof path);
    uint64_t ab = 0, pr = 0;
    for (int m = 0; m < 2; m++) {
        kvt_replay_cfg_t c;
        s_base(&c, trace);
        c.fault_abort = 3;
        c.fault_preempt = 4;
        if (m) {
            c.state_bytes = 4096;
            c.checkpoint_interval = 1024;
        }
        s_replay_holds(&c, m ? "hybrid, aborts and preempts" : "dense, aborts and preempts");
        kvt_replay_report_t r;
        char err[512];
        cr_assert_eq(kvt_replay_run(&c, &r, err, sizeof err), 0, "%s", err);
        cr_assert_gt(r.engine.aborted, 0);
        cr_assert_gt(r.engine.preempted, 0);
        ab += r.ledger.loss[KVT_LOSS_ABORTED];
        pr += r.ledger.loss[KVT_LOSS_PREEMPTED];
        kvt_replay_report_clear(&r);
    }
    cr_assert_gt(ab, 0, "aborted requests' tokens charged to aborted");
    cr_assert_gt(pr, 0, "preempted admissions' tokens charged to preempted");
    unlink(path);
}

//  A request aborted before its admission (its FINISH under the refused
//  generation, c = aborted): its whole ideal is charged to aborted; one
//  aborted mid-load: what it did not resume.
Test(ledger, a_request_aborted_before_its_admission_charges_its_ideal_to_aborted)
{
    s_rng = 5;
    kvt_workload_t *wl = NULL;
    for (uint64_t k = 5; k < 200; k++) { //  a workload whose second request shares
        s_rng = k;
        wl = s_workload(2);
        kvt_ledger_t *probe = kvt_ledger_new(wl, &s_cfgs[1]);
        bool shares = kvt_ledger_ideal(probe, 1) > 0;
        kvt_ledger_destroy(&probe);
        if (shares)
            break;
        s_free(wl, s_tokens(wl));
        wl = NULL;
    }
    cr_assert_not_null(wl);
    kvt_ledger_t *lg = kvt_ledger_new(wl, &s_cfgs[1]);
    cr_assert_eq(kvt_ledger_instance(lg, NULL, 2), 0);
    uint32_t ideal = kvt_ledger_ideal(lg, 1);
    kvt_event_t ev[] = {{{0, 1}, KVT_EV_ADMIT, 0, 0, 0},
                        {{0, 1}, KVT_EV_OUTCOME, 0, 0, 0},
                        {{0, 1}, KVT_EV_FINISH, 1, 1, 0},
                        {{1, KVT_MSG_MAX_GEN}, KVT_EV_FINISH, 1, 0, KVT_FINISH_ABORTED}};
    kvt_step_plan_t p = {.events = ev, .nevents = 4};
    kvt_ledger_plan(lg, &p);
    kvt_ledger_report_t r;
    kvt_ledger_report(lg, &r);
    char why[400];
    cr_assert(kvt_ledger_holds(&r, why, sizeof why), "%s", why);
    cr_assert_eq(r.loss[KVT_LOSS_ABORTED], ideal);
    cr_assert_eq(r.loss[KVT_LOSS_REJECTED], 0);
    kvt_ledger_destroy(&lg);
    //  Admitted to load its whole ideal from the tier, aborted before the
    //  load's verdict: what it chose and did not resume is aborted, not a
    //  failed load.
    lg = kvt_ledger_new(wl, &s_cfgs[1]);
    cr_assert_eq(kvt_ledger_instance(lg, NULL, 2), 0);
    uint32_t len0 = wl->reqs[0].input_len, len1 = wl->reqs[1].input_len;
    kvt_event_t e1[] = {{{0, 1}, KVT_EV_ADMIT, 0, 0, len0}, {{0, 1}, KVT_EV_OUTCOME, 0, 0, 0}};
    kvt_entry_t en = {.op = {0, 1}, .start = 0, .end = len0};
    kvt_step_plan_t p1 = {.events = e1, .nevents = 2, .entries = &en, .nentries = 1};
    kvt_ledger_plan(lg, &p1);
    kvt_event_t e2[] = {{{0, 1}, KVT_EV_FINISH, len0, 1, 0},
                        {{1, 1}, KVT_EV_ADMIT, 0, ideal, len1},
                        {{1, 1}, KVT_EV_OUTCOME, 0, ideal, 0},
                        {{1, 1}, KVT_EV_FINISH, len1, 0, KVT_FINISH_ABORTED}};
    kvt_step_plan_t p2 = {.events = e2, .nevents = 4};
    kvt_ledger_plan(lg, &p2);
    kvt_ledger_report(lg, &r);
    cr_assert(kvt_ledger_holds(&r, why, sizeof why), "%s", why);
    cr_assert_eq(r.loss[KVT_LOSS_ABORTED], ideal, "the load the abort orphaned");
    cr_assert_eq(r.loss[KVT_LOSS_LOAD_FAILED], 0);
    kvt_ledger_destroy(&lg);
    s_free(wl, s_tokens(wl));
}

//  A second replay on the first's disk directory resumes prefixes the
//  disk tier carried in from the first run, above its own ideal: they are
//  carried, on their own line, and the identity ideal + carried = hits +
//  losses still holds to the token.
Test(ledger, a_disk_tier_from_an_earlier_run_is_carried, .timeout = 300)
{
    char path[128], dir[128], cmd[200];
    const char *trace = s_trace(path, sizeof path);
    snprintf(dir, sizeof dir, "/tmp/kvt_ledger_disk_%d", (int)getpid());
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
    kvt_replay_cfg_t c;
    s_base(&c, trace);
    c.hbm_pool_bytes = 2ull << 20;
    c.cpu_pool_bytes = 2ull << 20;
    c.disk_dir = dir;
    c.disk_pool_bytes = 256ull << 20;
    kvt_replay_report_t r;
    char err[512], why[400];
    for (int run = 0; run < 2; run++) {
        cr_assert_eq(kvt_replay_run(&c, &r, err, sizeof err), 0, "run %d: %s", run, err);
        cr_assert(!r.failed, "run %d failed: %s", run, r.failures);
        cr_assert(kvt_ledger_holds(&r.ledger, why, sizeof why), "run %d: %s", run, why);
        cr_assert_eq(kvt_ledger_hits(&r.ledger),
                     r.ledger.ideal + r.ledger.carried - kvt_ledger_losses(&r.ledger),
                     "run %d: ideal + carried = hits + losses", run);
        if (run == 0)
            cr_assert_eq(r.ledger.carried, 0, "a fresh directory carries nothing");
        else
            cr_assert_gt(r.ledger.carried, 0, "the first run's chunks are carried");
        kvt_replay_report_clear(&r);
    }
    //  Tier KV above the ideal: carried with a warm tier, inconsistent
    //  (the run fails) without one.
    s_rng = 5;
    kvt_workload_t *wl = s_workload(2);
    for (int warm = 0; warm < 2; warm++) {
        kvt_ledger_t *lg = kvt_ledger_new(wl, &s_cfgs[1]);
        cr_assert_eq(kvt_ledger_instance(lg, NULL, 2), 0);
        kvt_ledger_warm(lg, warm);
        uint32_t ideal = kvt_ledger_ideal(lg, 1), above = ideal + CS;
        kvt_event_t ev[] = {
            {{0, 1}, KVT_EV_ADMIT, 0, 0, 0},       {{0, 1}, KVT_EV_OUTCOME, 0, 0, 0},
            {{0, 1}, KVT_EV_FINISH, 1, 1, 0},      {{1, 1}, KVT_EV_ADMIT, 0, above, 0},
            {{1, 1}, KVT_EV_OUTCOME, 0, above, 0}, {{1, 1}, KVT_EV_LOADED, 0, above, 0},
            {{1, 1}, KVT_EV_FINISH, 1, 1, 0}};
        kvt_step_plan_t p = {.events = ev, .nevents = 7};
        kvt_ledger_plan(lg, &p);
        kvt_ledger_report(lg, &r.ledger);
        cr_assert_eq(kvt_ledger_holds(&r.ledger, why, sizeof why), warm == 1, "warm %d: %s", warm,
                     why);
        if (warm)
            cr_assert_eq(r.ledger.carried, above - ideal, "carried %llu",
                         (unsigned long long)r.ledger.carried);
        else
            cr_assert_gt(r.ledger.inconsistent, 0);
        kvt_ledger_destroy(&lg);
    }
    s_free(wl, s_tokens(wl));
    cr_assert_eq(system(cmd), 0);
    unlink(path);
}

//  A failed state load retreats: its tokens are charged to load_failed,
//  and --json carries the ledger.
Test(ledger, a_retreat_is_charged_to_load_failed, .timeout = 300)
{
    const char *trace = KVT_SOURCE_DIR "/../shared/traces/conversation_trace.jsonl";
    if (access(trace, R_OK) != 0)
        cr_skip_test("no conversation trace at %s", trace);
    char out[128], cmd[1024];
    snprintf(out, sizeof out, "/tmp/kvt_ledger_%d.json", (int)getpid());
    snprintf(cmd, sizeof cmd,
             KVT_BINARY_DIR
             "/kvtier replay --trace %s --limit 150 --instances 1 --model qwen3-next-like "
             "--fault miss-state=1 --log-level 0 --quiet --json %s >/dev/null",
             trace, out);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    json_error_t je;
    json_t *r = json_load_file(out, 0, &je);
    cr_assert_not_null(r, "%s", je.text);
    unlink(out);
    json_t *l = json_object_get(r, "ledger");
    cr_assert(json_is_true(json_object_get(l, "identity_holds")));
    cr_assert_gt(json_integer_value(json_object_get(json_object_get(r, "loads"), "failed")), 0,
                 "the fault fired");
    json_t *loss = json_object_get(l, "loss"), *hit = json_object_get(l, "hit");
    cr_assert_gt(json_integer_value(json_object_get(loss, "load_failed")), 0);
    json_int_t sum = 0;
    const char *k;
    json_t *v;
    json_object_foreach(loss, k, v) sum += json_integer_value(v);
    json_object_foreach(hit, k, v) sum += json_integer_value(v);
    cr_assert_eq(sum, json_integer_value(json_object_get(l, "ideal")), "ideal = hits + losses");
    json_decref(r);
}
