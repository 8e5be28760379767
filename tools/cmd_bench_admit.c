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
      tier holds its chunks and its images; request X, as long as the
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
    * stats through the actor: the same read as an engine's scrape, a Stats
      request to the scheduler actor (kvt_scheduler.c) and its reply, under
      the SIM driver, on a core primed (kvt_scheduler_args_t.prime) with
      --hashes HBM blocks and --hashes images; one request in flight at a
      time. The reads are timed from the reply of the first deep audit to
      the reply of the third (two whole periods of the audit's decimation),
      so the figure is amortised, the audits included; no target (the
      message round trip dominates), but it must stay O(1) in the core's
      size.
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
#include <unistd.h>

#include "actors/scheduler/kvt_sched_bench.h"
#include "cmd_bench_admit.h"
#include "kvt_cli.h"
#include "kvt_cmd.h"
#include "kvtier/kvt_msg.h"
#include "kvtier/kvt_sched.h"

#define S_TARGET_RATIO    2.0   //  admit / hash chain
#define S_TARGET_STATS_US 1.0   //  per stats read, amortised
#define S_TARGET_STEP_US  100.0 //  per step

// ---------------------------------------------------------------- main --

static void s_usage(FILE *out)
{
    fprintf(out,
            "usage: kvtier bench admit [--json PATH] [--prompt-tokens N] [--iterations N]\n"
            "                          [--hashes N] [--stats-rounds N] [--requests N] [--steps N]\n"
            "                          [--actor-reads N]\n"
            "  --json PATH          also write the results as JSON\n"
            "  --prompt-tokens N    prompt of the admission, default 131072 (multiple of 2048,\n"
            "                       2048..1048576); the HBM hit is half of it\n"
            "  --iterations N       admissions and hash chains timed, default 21 (1..1001)\n"
            "  --hashes N           images in the state-offload index, default 1048576\n"
            "                       (256..16777216)\n"
            "  --stats-rounds N     rounds of 256 stats reads, default 21 (1..1001)\n"
            "  --requests N         running requests of the step, default 64 (1..4096)\n"
            "  --steps N            steps timed, default 200 (1..100000)\n"
            "  --actor-reads N      Stats reads through the scheduler actor at most, default\n"
            "                       262144 (3..16777216); --hashes HBM blocks and images\n");
}

static int s_parse(int argc, char **argv, kvt_badmit_opts_t *o)
{
    *o = (kvt_badmit_opts_t){.prompt = 131072,
                             .iterations = 21,
                             .hashes = 1u << 20,
                             .rounds = 21,
                             .requests = 64,
                             .steps = 200,
                             .actor_reads = 1u << 18};
    const kvt_cli_num_t nums[] = {{"--prompt-tokens", 2048, 1u << 20, 2048, &o->prompt},
                                  {"--iterations", 1, 1001, 0, &o->iterations},
                                  {"--hashes", 256, 1u << 24, 0, &o->hashes},
                                  {"--stats-rounds", 1, 1001, 0, &o->rounds},
                                  {"--requests", 1, KVT_MSG_MAX_ENTRIES, 0, &o->requests},
                                  {"--steps", 1, 100000, 0, &o->steps},
                                  {"--actor-reads", 3, 1u << 24, 0, &o->actor_reads}};
    return kvt_cli_parse_nums("kvtier bench admit", argc, argv, nums, sizeof nums / sizeof nums[0],
                              &o->json, s_usage);
}

static void s_set(json_t *o, const char *k, json_t *v)
{
    json_object_set_new(o, k, v);
}

int kvt_cmd_bench_admit(int argc, char **argv)
{
    kvt_badmit_opts_t o;
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
    kvt_badmit_admit_t a = {0};
    kvt_badmit_stats_t st = {0};
    kvt_badmit_step_t sp = {0};
    kvt_badmit_actor_t ac = {0};
    if (kvt_badmit_admit(&o, &a) != 0 || kvt_badmit_stats(&o, &st) != 0 ||
        kvt_badmit_actor(&o, &ac) != 0 || kvt_badmit_step(&o, &sp) != 0)
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
    printf("stats read through the scheduler actor, %u blocks, %llu images: %.1f us amortised "
           "(CPU %.1f) over %u reads holding %llu deep audits (deep read %.0f us, other reads "
           "%.1f us)\n",
           ac.blocks, (unsigned long long)ac.images, ac.us, ac.cpu_us, ac.reads,
           (unsigned long long)ac.audits, ac.deep_us, ac.other_us);
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
    s_set(geo, "block_size", json_integer(KVT_BADMIT_BS));
    s_set(geo, "chunk_size", json_integer(KVT_BADMIT_CS));
    s_set(geo, "checkpoint_interval", json_integer(KVT_BADMIT_INTERVAL));
    s_set(geo, "prompt_tokens", json_integer(o.prompt));
    s_set(geo, "block_hit_tokens", json_integer(a.block_hit));
    s_set(geo, "hbm_hit_tokens", json_integer(a.hit));
    s_set(geo, "load_floor_tokens", json_integer(a.floor));
    s_set(geo, "resume_tokens", json_integer(a.resume));
    s_set(geo, "state_from", json_string(a.joint_src == 2 ? "tier" : "hbm"));
    s_set(geo, "hbm_blocks", json_integer(a.hbm_blocks));
    s_set(geo, "stats_images", json_integer((json_int_t)st.images));
    s_set(geo, "stats_actor_hbm_blocks", json_integer(ac.blocks));
    s_set(geo, "stats_actor_images", json_integer((json_int_t)ac.images));
    s_set(geo, "step_requests", json_integer(o.requests));
    s_set(geo, "step_prompt_tokens_min", json_integer(KVT_BADMIT_STEP_PROMPT));
    s_set(geo, "step_prompt_tokens_max",
          json_integer(kvt_badmit_step_len(o.requests - 1, o.requests)));
    s_set(doc, "geometry", geo);
    s_set(its, "admit", json_integer(o.iterations));
    s_set(its, "stats_reads", json_integer((json_int_t)o.rounds * kvt_sched_bench_deep_every()));
    s_set(its, "stats_rounds", json_integer(o.rounds));
    s_set(its, "stats_actor_reads", json_integer(ac.reads));
    s_set(its, "stats_actor_deep_audits", json_integer((json_int_t)ac.audits));
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
    s_set(doc, "stats_us_1m_actor", json_real(ac.us));
    s_set(doc, "stats_cpu_us_1m_actor", json_real(ac.cpu_us));
    s_set(doc, "stats_actor_deep_read_us_1m", json_real(ac.deep_us));
    s_set(doc, "stats_actor_other_read_us_1m", json_real(ac.other_us));
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
