/*  kvtier replay — replays a trace (or the built-in synthetic workload)
    through the cache and reports hits by tier, recomputed share, loads,
    saves and wrong resumes (which fail the run). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay/kvt_replay.h"
#include "kvt_cli.h"
#include "kvt_cmd.h"

static void s_usage(FILE *out)
{
    fprintf(
        out,
        "usage: kvtier replay [options]\n"
        "  --trace FILE       Mooncake jsonl trace (default: built-in synthetic workload)\n"
        "  --limit N          replay the first N requests (default: all)\n"
        "  --driver sim|live  actor driver (default sim)\n"
        "  --seed S           seed of the SIM driver and the synthetic workload (default 1)\n"
        "  --tp N             tensor-parallel ranks (default 2)\n"
        "  --hbm-pool SIZE    device KV memory per rank (default 16MiB)\n"
        "  --cpu-pool SIZE    CPU tier per rank; 0 disables it (default 512MiB)\n"
        "  --disk-dir DIR     disk tier below the CPU pool, DIR/rank<r> per rank (default none)\n"
        "  --disk-pool SIZE   disk tier per rank (default 4GiB)\n"
        "  --disk-write always|evict  write-through (default) or write-back on eviction\n"
        "  --layers N         model layers (default 4)\n"
        "  --planes N         KV planes per layer, e.g. K and V (default 2)\n"
        "  --token-bytes N    bytes per token per layer per plane (default 16)\n"
        "  --max-running N    requests admitted at once (default 64)\n"
        "  --step-tokens N    token budget of one step (default 4096)\n"
        "  --json PATH        write the report as JSON\n"
        "  --record FILE      SIM: record every delivery (read with kvtier inspect)\n"
        "  --log-level N      0 errors .. 3 debug (default 1)\n"
        "  --quiet            no human summary\n"
        "  --fault corrupt-resume=N  testing fault: flip one restored byte of the Nth resumed\n"
        "                     request on rank 0 before its oracle check (the run must fail\n"
        "                     with exactly one wrong resume)\n"
        "SIZE accepts a plain byte count or a KiB / MiB / GiB suffix.\n");
}

//  A JSON string literal (the workload names a path, which may hold any byte).
static void s_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

//  Counters grouped by actor, actors in the order they first reported.
static void s_json_counters(FILE *f, const kvt_replay_report_t *r)
{
    fprintf(f, "  \"counters\": {");
    const kvt_sim_engine_counter_t *cs = r->engine.counters;
    uint32_t n = r->engine.ncounters;
    bool first_actor = true;
    for (uint32_t i = 0; i < n; i++) {
        bool seen = false;
        for (uint32_t k = 0; k < i && !seen; k++)
            seen = strcmp(cs[k].actor, cs[i].actor) == 0;
        if (seen)
            continue;
        fprintf(f, "%s\n    \"%s\": {", first_actor ? "" : ",", cs[i].actor);
        first_actor = false;
        bool first = true;
        for (uint32_t k = i; k < n; k++) {
            if (strcmp(cs[k].actor, cs[i].actor) != 0)
                continue;
            fprintf(f, "%s\n      \"%s\": %" PRIu64, first ? "" : ",", cs[k].c.name, cs[k].c.value);
            first = false;
        }
        fprintf(f, "\n    }");
    }
    fprintf(f, "%s}", first_actor ? "" : "\n  ");
}

static int s_write_json(const char *path, const kvt_replay_cfg_t *cfg, const kvt_replay_report_t *r)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "kvtier replay: --json: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    const kvt_sim_engine_result_t *e = &r->engine;
    fprintf(f, "{\n");
    fprintf(f, "  \"workload\": ");
    s_json_string(f, r->source);
    fprintf(f, ",\n");
    fprintf(f, "  \"requests\": %" PRIu64 ",\n", e->requests);
    fprintf(f, "  \"finished\": %" PRIu64 ",\n", e->finished);
    fprintf(f, "  \"rejected\": %" PRIu64 ",\n", e->rejected);
    fprintf(f, "  \"input_tokens\": %" PRIu64 ",\n", e->input_tokens);
    fprintf(f, "  \"hit_tokens\": {\"hbm\": %" PRIu64 ", \"cpu\": %" PRIu64, e->hbm_hit_tokens,
            r->hit_cpu_tokens);
    if (cfg->disk_dir)
        fprintf(f, ", \"disk\": %" PRIu64, r->hit_disk_tokens);
    fprintf(f, "},\n");
    fprintf(f, "  \"recomputed_tokens\": %" PRIu64 ",\n", r->recomputed_tokens);
    fprintf(f, "  \"recomputed_share\": %.6f,\n", r->recomputed_share);
    fprintf(f, "  \"wrong_resumes\": %" PRIu64 ",\n", e->wrong_resumes);
    fprintf(f, "  \"loads\": {\"completed\": %" PRIu64 ", \"failed\": %" PRIu64 "},\n", e->loads_ok,
            e->loads_failed);
    fprintf(f, "  \"saves\": {\"completed\": %" PRIu64 ", \"failed\": %" PRIu64 "},\n", r->saves_ok,
            r->saves_failed);
    fprintf(f, "  \"driver\": \"%s\",\n", cfg->driver == KVT_DRIVER_SIM ? "sim" : "live");
    fprintf(f, "  \"seed\": %" PRIu64 ",\n", cfg->seed);
    if (cfg->driver == KVT_DRIVER_SIM)
        fprintf(f, "  \"trace_hash\": \"%016" PRIx64 "\",\n", r->trace_hash);
    fprintf(f, "  \"wall_s\": %.3f,\n", r->wall_s);
    fprintf(f, "  \"tp\": %u,\n", cfg->tp);
    fprintf(f, "  \"hbm_pool_bytes\": %" PRIu64 ",\n", cfg->hbm_pool_bytes);
    fprintf(f, "  \"cpu_pool_bytes\": %" PRIu64 ",\n", cfg->cpu_pool_bytes);
    fprintf(f, "  \"steps\": %" PRIu64 ",\n", e->steps);
    fprintf(f, "  \"model_time_s\": %.3f,\n", (double)e->model_time_us / 1e6);
    fprintf(f, "  \"ttft_ms\": {\"p50\": %.2f, \"p90\": %.2f, \"p99\": %.2f},\n", e->ttft_p50_ms,
            e->ttft_p90_ms, e->ttft_p99_ms);
    fprintf(f, "  \"quiescent\": %s,\n", r->quiescent ? "true" : "false");
    s_json_counters(f, r);
    fprintf(f, "\n}\n");
    if (fclose(f) != 0) {
        fprintf(stderr, "kvtier replay: --json: cannot write %s\n", path);
        return -1;
    }
    return 0;
}

static void s_summary(const kvt_replay_cfg_t *cfg, const kvt_replay_report_t *r)
{
    const kvt_sim_engine_result_t *e = &r->engine;
    double in = e->input_tokens ? (double)e->input_tokens : 1.0;
    printf("kvtier replay: %s\n", r->source);
    printf("  driver %s, seed %" PRIu64 ", tp %u, hbm-pool %" PRIu64 " MiB/rank, cpu-pool %" PRIu64
           " MiB/rank\n",
           cfg->driver == KVT_DRIVER_SIM ? "sim" : "live", cfg->seed, cfg->tp,
           cfg->hbm_pool_bytes >> 20, cfg->cpu_pool_bytes >> 20);
    printf("  requests      %" PRIu64 " (%" PRIu64 " finished, %" PRIu64 " rejected)\n",
           e->requests, e->finished, e->rejected);
    printf("  input tokens  %" PRIu64 "\n", e->input_tokens);
    printf("  hit tokens    hbm %" PRIu64 " (%.1f%%), cpu %" PRIu64 " (%.1f%%)", e->hbm_hit_tokens,
           100.0 * (double)e->hbm_hit_tokens / in, r->hit_cpu_tokens,
           100.0 * (double)r->hit_cpu_tokens / in);
    if (cfg->disk_dir)
        printf(", disk %" PRIu64 " (%.1f%%)", r->hit_disk_tokens,
               100.0 * (double)r->hit_disk_tokens / in);
    printf("\n");
    printf("  recomputed    %" PRIu64 " (%.1f%%)\n", r->recomputed_tokens,
           100.0 * r->recomputed_share);
    printf("  loads         %" PRIu64 " completed, %" PRIu64 " failed\n", e->loads_ok,
           e->loads_failed);
    printf("  saves         %" PRIu64 " completed, %" PRIu64 " failed\n", r->saves_ok,
           r->saves_failed);
    printf("  ttft (model)  p50 %.1f ms, p90 %.1f ms, p99 %.1f ms over %.1f s modelled\n",
           e->ttft_p50_ms, e->ttft_p90_ms, e->ttft_p99_ms, (double)e->model_time_us / 1e6);
    printf("  wrong resumes %" PRIu64 "\n", e->wrong_resumes);
    if (cfg->driver == KVT_DRIVER_SIM)
        printf("  trace hash    %016" PRIx64 " (%" PRIu64 " events)\n", r->trace_hash, r->events);
    printf("  wall          %.2f s, %" PRIu64 " steps\n", r->wall_s, e->steps);
    if (!r->quiescent)
        printf("  NOT QUIESCENT: %s\n", r->problem);
}

int kvt_cmd_replay(int argc, char **argv)
{
    kvt_replay_cfg_t cfg;
    kvt_replay_defaults(&cfg);
    const char *json = NULL;
    bool quiet = false, disk_pool_set = false, disk_write_set = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            s_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--quiet")) {
            quiet = true;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "kvtier replay: %s needs a value (see --help)\n", a);
            return 2;
        }
        const char *v = argv[++i];
        uint64_t n;
        int rc = 0;
        if (!strcmp(a, "--trace"))
            cfg.trace = v;
        else if (!strcmp(a, "--json"))
            json = v;
        else if (!strcmp(a, "--record"))
            cfg.record = v;
        else if (!strcmp(a, "--fault")) {
            const char *key = "corrupt-resume=";
            if (strncmp(v, key, strlen(key)) != 0 ||
                (rc = kvt_cli_uint(v + strlen(key), 1, UINT32_MAX, &n)) != 0)
                rc = -1;
            else
                cfg.fault_corrupt_resume = (uint32_t)n;
        } else if (!strcmp(a, "--driver")) {
            if (!strcmp(v, "sim"))
                cfg.driver = KVT_DRIVER_SIM;
            else if (!strcmp(v, "live"))
                cfg.driver = KVT_DRIVER_LIVE;
            else
                rc = -1;
        } else if (!strcmp(a, "--limit")) {
            if ((rc = kvt_cli_uint(v, 0, UINT32_MAX, &n)) == 0)
                cfg.limit = (uint32_t)n;
        } else if (!strcmp(a, "--seed"))
            rc = kvt_cli_uint(v, 0, UINT64_MAX, &cfg.seed);
        else if (!strcmp(a, "--tp")) {
            if ((rc = kvt_cli_uint(v, 1, 64, &n)) == 0)
                cfg.tp = (uint32_t)n;
        } else if (!strcmp(a, "--log-level")) {
            if ((rc = kvt_cli_uint(v, 0, 3, &n)) == 0)
                cfg.log_level = (int)n;
        } else if (!strcmp(a, "--layers")) {
            if ((rc = kvt_cli_uint(v, 1, 1024, &n)) == 0)
                cfg.layers = (uint32_t)n;
        } else if (!strcmp(a, "--planes")) {
            if ((rc = kvt_cli_uint(v, 1, 8, &n)) == 0)
                cfg.planes = (uint32_t)n;
        } else if (!strcmp(a, "--token-bytes")) {
            if ((rc = kvt_cli_uint(v, 1, 1u << 20, &n)) == 0)
                cfg.token_bytes = (uint32_t)n;
        } else if (!strcmp(a, "--max-running")) {
            if ((rc = kvt_cli_uint(v, 1, KVT_MSG_MAX_ENTRIES, &n)) == 0)
                cfg.max_running = (uint32_t)n;
        } else if (!strcmp(a, "--step-tokens")) {
            if ((rc = kvt_cli_uint(v, 1, 1u << 20, &n)) == 0)
                cfg.step_tokens = (uint32_t)n;
        } else if (!strcmp(a, "--hbm-pool"))
            rc = kvt_cli_size(v, &cfg.hbm_pool_bytes);
        else if (!strcmp(a, "--disk-dir"))
            cfg.disk_dir = v;
        else if (!strcmp(a, "--disk-pool")) {
            rc = kvt_cli_size(v, &cfg.disk_pool_bytes);
            disk_pool_set = true;
        } else if (!strcmp(a, "--disk-write")) {
            disk_write_set = true;
            if (!strcmp(v, "always"))
                cfg.disk_write_on_evict = false;
            else if (!strcmp(v, "evict"))
                cfg.disk_write_on_evict = true;
            else
                rc = -1;
        } else if (!strcmp(a, "--cpu-pool"))
            rc = kvt_cli_size(v, &cfg.cpu_pool_bytes);
        else {
            fprintf(stderr, "kvtier replay: unknown option '%s' (see --help)\n", a);
            return 2;
        }
        if (rc != 0) {
            fprintf(stderr, "kvtier replay: %s: bad value '%s'\n", a, v);
            return 2;
        }
    }
    char err[512];
    if (cfg.record && cfg.driver != KVT_DRIVER_SIM) {
        fprintf(stderr, "kvtier replay: --record needs --driver sim\n");
        return 2;
    }
    if (!cfg.disk_dir && (disk_pool_set || disk_write_set)) {
        fprintf(stderr, "kvtier replay: %s needs --disk-dir\n",
                disk_pool_set ? "--disk-pool" : "--disk-write");
        return 2;
    }
    if (kvt_replay_validate(&cfg, err, sizeof err) != 0) {
        fprintf(stderr, "kvtier replay: %s\n", err);
        return 2;
    }
    kvt_replay_report_t *rep = calloc(1, sizeof *rep);
    if (!rep) {
        fprintf(stderr, "kvtier replay: out of memory\n");
        return 1;
    }
    int status = 0;
    if (kvt_replay_run(&cfg, rep, err, sizeof err) != 0) {
        fprintf(stderr, "kvtier replay: %s\n", err);
        kvt_replay_report_clear(rep);
        free(rep);
        return 2;
    }
    if (!quiet)
        s_summary(&cfg, rep);
    if (json && s_write_json(json, &cfg, rep) != 0)
        status = 1;
    if (rep->failed) {
        for (const char *p = rep->failures; *p;) {
            const char *nl = strchr(p, '\n');
            int len = nl ? (int)(nl - p) : (int)strlen(p);
            fprintf(stderr, "kvtier replay: FAILED: %.*s\n", len, p);
            p += len + (nl != NULL);
        }
        status = 1;
    }
    kvt_replay_report_clear(rep);
    free(rep);
    return status;
}
