/*  kvtier replay — replays a trace (or the built-in synthetic workload)
    through the cache and reports hits by tier, recomputed share, loads,
    saves and wrong resumes (which fail the run). */
#include <errno.h>
#include <sys/stat.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "replay/kvt_replay.h"
#include "replay/kvt_replay_config.h"
#include "kvt_cli.h"
#include "kvt_cmd.h"
#include "cmd_replay_baseline.h"
#include "replay/kvt_sim_engine_core.h"
#include "cmd_replay_report.h"

//  Engine instances of a trace replay when --instances is not given: enough
//  that the bundled conversation trace does not saturate them
//  (docs/configuration.md).
#define S_DEFAULT_INSTANCES 8

static int s_engine_json(json_t *root, const kvt_replay_cfg_t *cfg, const kvt_replay_report_t *r);

static const char *s_sweep;                              //  --sweep KEY=V1,V2,... (NULL = one run)
static const char *s_report;                             //  --report DIR (NULL = none)
static kvt_progress_mode_t s_progress_mode;              //  --progress (default auto)
static uint32_t s_progress_ms = KVT_PROGRESS_DEFAULT_MS; //  --progress-interval
static int s_argc;                                       //  the command line, for the report
static char **s_argv;                                    //  ...
static const char *s_baseline = "auto";                  //  --hbm-baseline on|off|auto
static int s_cmd_replay_run(kvt_replay_cfg_t *cfgp, const char *json, bool quiet, char *err,
                            size_t errlen);

static void s_usage(FILE *out)
{
    fprintf(
        out,
        "usage: kvtier replay [options]\n"
        "  --trace FILE       Mooncake jsonl trace (default: built-in synthetic workload)\n"
        "  --limit N          replay the first N requests (default: all)\n"
        "  --time-scale X     arrival = trace timestamp x X, trace or synthetic, every\n"
        "                     instance (real > 0, at most 1000; default 1; 2 halves the\n"
        "                     offered load, 0.5 doubles it)\n"
        "  --closed-loop C    closed loop: C requests in flight per instance, the first C at\n"
        "                     time 0, the next (in trace order) when one finishes or is\n"
        "                     rejected; timestamps ignored, so --time-scale must stay 1\n"
        "                     (default 0 = open loop by timestamps)\n"
        "  --pace auto|on|off  on: a step spends its modelled time on the driver's clock\n"
        "                     and SIM copies run at the cost model's host link (one clock\n"
        "                     for the engine and the data path); auto (default): on under\n"
        "                     sim, off under live\n"
        "  --driver sim|live  actor driver (default sim; live with --ranks-as-processes)\n"
        "  --ranks-as-processes  live: run every rank as its own process (kvtier rank), over\n"
        "                     ipc:// in a private temporary directory; a rank process that\n"
        "                     exits fails the run naming the rank\n"
        "  --rank-endpoint E  with --ranks-as-processes: tcp://HOST:PORT (actor i of the\n"
        "                     topology at HOST:PORT+i) or ipc://DIR instead of a private\n"
        "                     temporary directory\n"
        "  --wall-limit SEC   live: fail the run when it has not ended after SEC seconds\n"
        "                     (default 600; 0 = no limit)\n"
        "  --seed S           seed of the SIM driver and the synthetic workload (default 1)\n"
        "  --tp N             tensor-parallel ranks (default 2)\n"
        "  --hbm-pool SIZE    device KV memory per rank, real bytes (default: the model's\n"
        "                     GPU, 56GiB dense, 32GiB qwen3-next-like, 64GiB kimi-linear-like)\n"
        "  --cpu-pool SIZE    CPU tier per rank, real bytes; 0 disables it (default 128GiB)\n"
        "  --disk-dir DIR     disk tier below the CPU pool, DIR/rank<r> per rank (default none)\n"
        "  --remote SEEDS     remote tier below CPU / disk on a Redis Cluster:\n"
        "                     redis://HOST:PORT[,HOST:PORT...] (default none)\n"
        "  --disk-pool SIZE   disk tier per rank, real bytes (default 1TiB)\n"
        "  --curve-secret-key CERT  authenticate tcp:// links with CURVE: this process's\n"
        "                     certificate (kvtier keygen; default none: unauthenticated)\n"
        "  --curve-public-keys DIR  the public certificates allowed to connect\n"
        "  --curve-server-key CERT  the peers' server certificate (default: CERT's own)\n"
        "  --instances N      N modelled engine instances (1..64; default 8 with --trace, 1\n"
        "                     for the synthetic workload), each its own\n"
        "                     scheduler, ranks, HBM, CPU pool and disk directory; requests\n"
        "                     routed by prefix affinity (docs/user-guide.md)\n"
        "  --sweep KEY=V1,V2,...  one run per value of cpu_pool, hbm_pool, disk_pool or\n"
        "                     instances, one after another, and a comparison table\n"
        "  --report DIR       one run: DIR/report.md (command line, configuration, summary,\n"
        "                     TTFT, loss ledger), series.tsv, ttft.tsv, ledger.tsv, plots.gp\n"
        "                     and the PNGs gnuplot renders (hit_rate, occupancy, ttft_cdf,\n"
        "                     ledger; without gnuplot report.md says so); DIR is created.\n"
        "                     With --sweep: DIR/sweep.md, DIR/sweep.tsv and sweep.png\n"
        "  --progress on|off|auto  a progress line on stderr (requests done / total, %%,\n"
        "                     hit %%, elapsed, ETA), erased at the end; auto (default): on\n"
        "                     when stderr is a terminal and not --quiet\n"
        "  --progress-interval MS  wall-clock ms between its redraws (default 200)\n"
        "  --hbm-baseline on|off|auto  also replay without the tiers below HBM (a second\n"
        "                     replay: beside the run under sim, after it under live) and put\n"
        "                     TTFT, throughput and hits without them beside the run's;\n"
        "                     auto (default): on when stdout is a terminal\n"
        "  --byte-scale K     pools store K times fewer bytes than their real size (default:\n"
        "                     the model's real KV bytes per token per rank over the stored\n"
        "                     geometry's, said at start; 1 = sizes are stored bytes)\n"
        "  --cost K=V,...     cost model knobs over the model's defaults: prefill_tps,\n"
        "                     attn_ps, step_us, hbm_GBps, kv_token_bytes, state_bytes,\n"
        "                     h2d_GBps, h2d_lat_us, d2h_GBps, disk_GBps, disk_lat_us\n"
        "                     (docs/configuration.md#cost-model)\n"
        "  --disk-write always|evict  write-through (default) or write-back on eviction\n"
        "  --layers N         model layers (default 4)\n"
        "  --planes N         KV planes per layer, e.g. K and V (default 2)\n"
        "  --token-bytes N    bytes per token per layer per plane (default 16)\n"
        "  --model M          dense (default), qwen3-next-like or kimi-linear-like: the\n"
        "                     geometry preset; a hybrid one adds state slots, HBM\n"
        "                     checkpoints and the joint / state report\n"
        "  --state-bytes SIZE recurrent state per request per rank (default: the model's)\n"
        "  --checkpoint-interval N  tokens between state checkpoints (default: the model's)\n"
        "  --min-load-tokens N  a joint load gaining fewer tokens recomputes (default 0)\n"
        "  --checkpoints all|interval  hybrid: checkpoints on the interval grid, at prompt ends\n"
        "                     and decode keeps (all, default) or on the grid only\n"
        "  --block-size N, --chunk-size N  tokens per block / chunk (default 16 / 256)\n"
        "  --config FILE      settings from a YAML file (KVTIER_* and flags override it;\n"
        "                     every setting of docs/configuration.md)\n"
        "  --max-running N    requests admitted at once (default 64)\n"
        "  --step-tokens N    token budget of one step (default 4096)\n"
        "  --lookup all|rank0 tier lookups ask every rank, the minimum (default), or rank 0 only\n"
        "  --json PATH        write the report as JSON\n"
        "  --metrics-addr HOST:PORT  serve Prometheus /metrics there while the replay runs\n"
        "                     (IPv4 or localhost; port 0 = any free one, said at start;\n"
        "                     default off); --metrics-interval D between Stats rounds (1s)\n"
        "  --record FILE      SIM: record every delivery (read with kvtier inspect)\n"
        "  --log-level N      0 errors .. 3 debug (default 1)\n"
        "  --quiet            no human summary\n"
        "  --mem-overcommit   start even when tp x (cpu-pool + hbm-pool) exceeds the memory\n"
        "                     this process can have (MemAvailable, cgroup limit)\n"
        "  --fault corrupt-resume=N  testing fault: flip one restored byte of the Nth resumed\n"
        "                     request on rank 0 before its oracle check (the run must fail\n"
        "                     with exactly one wrong resume)\n"
        "  --fault corrupt-state=N  testing fault (hybrid): flip one byte of the Nth restored\n"
        "                     state slot on rank 0 before its oracle check (must fail likewise)\n"
        "  --fault miss-state=N  testing fault (hybrid): rank 0's Nth state leg read misses\n"
        "                     (the load retreats, B2; no wrong resume)\n"
        "  --fault stale-slot=N  testing fault (hybrid): rank 0's Nth forward from token 0\n"
        "                     into a slot holding another state does not reset it\n"
        "  --fault restore-late=N  testing fault (hybrid): rank 0's Nth HBM checkpoint\n"
        "                     restore lands after the forward read the slot\n"
        "  --fault swap-slots=N  testing fault (hybrid): rank 0's Nth step with two running\n"
        "                     requests advancing their state runs each in the other's slot\n"
        "                     (these three must each fail the run with a wrong resume)\n"
        "  --fault stale-block=N  testing fault: rank 0's Nth forward that reads the KV\n"
        "                     block before its chunk reads another prefix's bytes there\n"
        "                     (the carry must fail the run with a wrong resume)\n"
        "  --fault abort=N    testing fault: the engine aborts one request in N, the kth\n"
        "                     of them in phase k mod 5 (waiting, parked on a load,\n"
        "                     running, mid-save, finished with a save pending)\n"
        "  --fault preempt=N  testing fault: ... preempts one in N (it waits again and is\n"
        "                     re-admitted; no wrong resume, the run passes)\n"
        "SIZE accepts a plain byte count or a KiB / MiB / GiB suffix.\n");
}

//  The report is built as a jansson tree. Its strings are bytes (the
//  workload names a trace path, which may hold any byte) but JSON strings
//  are UTF-8: a value that is not valid UTF-8 is written with each invalid
//  byte replaced by U+FFFD, and a sibling field `<key>_hex` holds every byte
//  of the original in lowercase hex (lossless). Object keys (actor and
//  counter names) get the replacement only. See docs/metrics.md.

//  Length of the valid UTF-8 sequence at s (at most n bytes), 0 if none:
//  no overlong forms, no surrogates, nothing above U+10FFFF.
static size_t s_utf8_seq(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len = c < 0x80                 ? 1
                 : c >= 0xC2 && c <= 0xDF ? 2
                 : c >= 0xE0 && c <= 0xEF ? 3
                 : c >= 0xF0 && c <= 0xF4 ? 4
                                          : 0;
    if (len == 0 || len > n)
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    if ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] > 0x9F) || (c == 0xF0 && s[1] < 0x90) ||
        (c == 0xF4 && s[1] > 0x8F))
        return 0;
    return len;
}

//  A UTF-8 copy of s, invalid bytes replaced by U+FFFD; *lossy tells
//  whether any was. NULL when out of memory.
static char *s_utf8_copy(const char *s, bool *lossy)
{
    size_t n = strlen(s);
    char *out = malloc(3 * n + 1);
    if (!out)
        return NULL;
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, o = 0;
    *lossy = false;
    while (i < n) {
        size_t len = s_utf8_seq(p + i, n - i);
        if (len) {
            memcpy(out + o, p + i, len);
            o += len;
            i += len;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
            *lossy = true;
        }
    }
    out[o] = 0;
    return out;
}

//  obj[key] = the string s (and obj[key_hex] when s is not valid UTF-8).
static int s_set_text(json_t *obj, const char *key, const char *s)
{
    bool lossy;
    char *u = s_utf8_copy(s, &lossy);
    if (!u)
        return -1;
    int rc = json_object_set_new(obj, key, json_string(u));
    free(u);
    if (rc == 0 && lossy) {
        size_t n = strlen(s);
        char *hex = malloc(2 * n + 1);
        char hkey[64];
        snprintf(hkey, sizeof hkey, "%s_hex", key);
        for (size_t i = 0; hex && i < n; i++)
            snprintf(hex + 2 * i, 3, "%02x", (unsigned char)s[i]);
        if (hex)
            hex[2 * n] = 0;
        rc = hex ? json_object_set_new(obj, hkey, json_string(hex)) : -1;
        free(hex);
    }
    return rc;
}

//  The object obj[name] (created), for a name that may not be UTF-8.
static json_t *s_child(json_t *obj, const char *name)
{
    bool lossy;
    char *key = s_utf8_copy(name, &lossy);
    if (!key)
        return NULL;
    json_t *child = json_object_get(obj, key);
    if (!child && json_object_set_new(obj, key, json_object()) == 0)
        child = json_object_get(obj, key);
    free(key);
    return child;
}

//  A u64 as a JSON integer; above jansson's range (2^63 - 1) as a string of
//  its decimal digits, so no count or seed is rounded.
static json_t *s_u64(uint64_t v)
{
    if (v <= INT64_MAX)
        return json_integer((json_int_t)v);
    char buf[24];
    snprintf(buf, sizeof buf, "%" PRIu64, v);
    return json_string(buf);
}

//  A real rounded to `decimals` places (the report's precision).
static json_t *s_real(double v, int decimals)
{
    double scale = pow(10, decimals);
    return json_real(round(v * scale) / scale);
}

//  A scheduler counter of the run (0 when it did not report it).
static uint64_t s_sc(const kvt_replay_report_t *r, const char *name)
{
    return kvt_replay_counter(r, "scheduler", name);
}

//  The state tax per resume: tokens KV alone could have resumed minus the
//  boundary chosen, over the admissions where KV alone could have resumed.
static double s_tax_per_resume(const kvt_replay_report_t *r)
{
    uint64_t n = s_sc(r, "sched.state_resumes");
    return n ? (double)s_sc(r, "sched.state_tax_tokens") / (double)n : 0.0;
}

//  A hybrid model's sections (docs/metrics.md): joint{}, state_loads{},
//  touches{}, holds{}, state_tax{}, from the scheduler's counters.
static int s_hybrid_json(json_t *root, const kvt_replay_report_t *r)
{
    json_t *joint = json_object(), *bounds = json_object(), *retreats = json_object();
    json_t *sl = json_object(), *touches = json_object(), *holds = json_object();
    json_t *tax = json_object();
    int rc = joint && bounds && retreats && sl && touches && holds && tax ? 0 : -1;
    rc |= json_object_set_new(bounds, "state_hbm", s_u64(s_sc(r, "sched.joint_state_hbm")));
    rc |= json_object_set_new(bounds, "state_tier", s_u64(s_sc(r, "sched.joint_state_tier")));
    rc |= json_object_set(joint, "boundaries", bounds);
    static const char *const skips[] = {
        "tier_within_hbm", "no_rung_above_hbm", "partial_chunk_no_room", "no_probe_demand",
        "below_min_load",  "convoy_waits",      "lookup_timeouts"};
    char name[64];
    for (size_t i = 0; i < sizeof skips / sizeof skips[0]; i++) {
        snprintf(name, sizeof name, "sched.%s", skips[i]);
        rc |= json_object_set_new(joint, skips[i], s_u64(s_sc(r, name)));
    }
    rc |= json_object_set_new(retreats, "to_hbm", s_u64(s_sc(r, "sched.retreats_to_hbm")));
    rc |= json_object_set_new(retreats, "to_zero", s_u64(s_sc(r, "sched.retreats_to_zero")));
    rc |= json_object_set(joint, "retreats", retreats);
    rc |= json_object_set(root, "joint", joint);
    static const char *const legs[] = {"dispatched", "completed", "failed",
                                       "abandoned",  "orphaned",  "reclaimed"};
    for (size_t i = 0; i < sizeof legs / sizeof legs[0]; i++) {
        snprintf(name, sizeof name, "stidx.%s", legs[i]);
        rc |= json_object_set_new(sl, legs[i], s_u64(s_sc(r, name)));
    }
    rc |= json_object_set(root, "state_loads", sl);
    rc |= json_object_set_new(touches, "sent", s_u64(s_sc(r, "stidx.touches_sent")));
    rc |= json_object_set_new(touches, "gone", s_u64(s_sc(r, "stidx.forgotten_gone")));
    rc |= json_object_set_new(touches, "unrefreshed", s_u64(s_sc(r, "stidx.touches_unrefreshed")));
    rc |= json_object_set(root, "touches", touches);
    rc |= json_object_set_new(holds, "held", s_u64(s_sc(r, "stidx.holds")));
    rc |= json_object_set_new(holds, "expired", s_u64(s_sc(r, "stidx.holds_expired")));
    rc |= json_object_set(root, "holds", holds);
    rc |= json_object_set_new(tax, "tokens", s_u64(s_sc(r, "sched.state_tax_tokens")));
    rc |= json_object_set_new(tax, "resumes", s_u64(s_sc(r, "sched.state_resumes")));
    rc |= json_object_set_new(tax, "tokens_per_resume", s_real(s_tax_per_resume(r), 3));
    rc |= json_object_set(root, "state_tax", tax);
    json_decref(joint);
    json_decref(bounds);
    json_decref(retreats);
    json_decref(sl);
    json_decref(touches);
    json_decref(holds);
    json_decref(tax);
    return rc;
}

//  Builds the report tree; NULL when out of memory.
static json_t *s_report_json(const kvt_replay_cfg_t *cfg, const kvt_replay_report_t *r)
{
    const kvt_sim_engine_result_t *e = &r->engine;
    json_t *root = json_object();
    json_t *hits = json_object();
    json_t *loads = json_object();
    json_t *saves = json_object();
    json_t *ttft = json_object();
    json_t *counters = json_object();
    int rc = root && hits && loads && saves && ttft && counters ? 0 : -1;
    rc |= s_set_text(root, "workload", r->source);
    rc |= json_object_set_new(root, "requests", s_u64(e->requests));
    rc |= json_object_set_new(root, "finished", s_u64(e->finished));
    rc |= json_object_set_new(root, "rejected", s_u64(e->rejected));
    if (cfg->fault_abort || cfg->fault_preempt) {
        rc |= json_object_set_new(root, "aborted", s_u64(e->aborted));
        rc |= json_object_set_new(root, "aborts_sent", s_u64(e->aborts_sent));
        rc |= json_object_set_new(root, "preempts_sent", s_u64(e->preempts_sent));
        rc |= json_object_set_new(root, "preempted", s_u64(e->preempted));
    }
    rc |= json_object_set_new(root, "input_tokens", s_u64(e->input_tokens));
    rc |= json_object_set_new(hits, "hbm", s_u64(e->hbm_hit_tokens));
    rc |= json_object_set_new(hits, "cpu", s_u64(r->hit_cpu_tokens));
    if (cfg->disk_dir)
        rc |= json_object_set_new(hits, "disk", s_u64(r->hit_disk_tokens));
    rc |= json_object_set(root, "hit_tokens", hits);
    rc |= json_object_set_new(root, "recomputed_tokens", s_u64(r->recomputed_tokens));
    rc |= json_object_set_new(root, "recomputed_share", s_real(r->recomputed_share, 6));
    rc |= kvt_ledger_json(&r->ledger, root);
    rc |= json_object_set_new(root, "wrong_resumes", s_u64(e->wrong_resumes));
    rc |= json_object_set_new(loads, "completed", s_u64(e->loads_ok));
    rc |= json_object_set_new(loads, "failed", s_u64(e->loads_failed));
    rc |= json_object_set(root, "loads", loads);
    rc |= json_object_set_new(saves, "completed", s_u64(r->saves_ok));
    rc |= json_object_set_new(saves, "failed", s_u64(r->saves_failed));
    rc |= json_object_set(root, "saves", saves);
    rc |= json_object_set_new(root, "driver",
                              json_string(cfg->driver == KVT_DRIVER_SIM ? "sim" : "live"));
    rc |= json_object_set_new(root, "seed", s_u64(cfg->seed));
    rc |= json_object_set_new(root, "time_scale",
                              json_real(cfg->time_scale > 0 ? cfg->time_scale : 1.0));
    rc |= json_object_set_new(root, "closed_loop", json_integer(cfg->closed_loop));
    rc |= json_object_set_new(root, "pace", json_boolean(kvt_replay_paced(cfg)));
    if (cfg->driver == KVT_DRIVER_SIM) {
        char hash[24];
        snprintf(hash, sizeof hash, "%016" PRIx64, r->trace_hash);
        rc |= json_object_set_new(root, "trace_hash", json_string(hash));
    }
    rc |= json_object_set_new(root, "wall_s", s_real(r->wall_s, 3));
    rc |= json_object_set_new(root, "tp", json_integer(cfg->tp));
    rc |= json_object_set_new(root, "hbm_pool_bytes", s_u64(cfg->hbm_pool_bytes));
    rc |= json_object_set_new(root, "cpu_pool_bytes", s_u64(cfg->cpu_pool_bytes));
    rc |= json_object_set_new(root, "evict_order", json_string(cfg->evict_value ? "value" : "lru"));
    rc |= json_object_set_new(root, "steps", s_u64(e->steps));
    rc |= json_object_set_new(root, "model_time_s", s_real((double)e->model_time_us / 1e6, 3));
    rc |= json_object_set_new(root, "driver_time_s", s_real((double)e->driver_us / 1e6, 3));
    rc |= json_object_set_new(ttft, "p50", s_real(e->ttft_p50_ms, 2));
    rc |= json_object_set_new(ttft, "p90", s_real(e->ttft_p90_ms, 2));
    rc |= json_object_set_new(ttft, "p99", s_real(e->ttft_p99_ms, 2));
    rc |= json_object_set(root, "ttft_ms", ttft);
    rc |= json_object_set_new(root, "quiescent", json_boolean(r->quiescent));
    rc |= json_object_set_new(root, "model", json_string(cfg->model ? cfg->model : "dense"));
    if (cfg->state_bytes != 0) {
        rc |= json_object_set_new(root, "state_bytes", s_u64(cfg->state_bytes));
        rc |= json_object_set_new(root, "checkpoint_interval",
                                  json_integer(cfg->checkpoint_interval));
        rc |= json_object_set_new(root, "checkpoints",
                                  json_string(cfg->interval_checkpoints ? "interval" : "all"));
        rc |= json_object_set_new(
            root, "state_policy",
            json_string(kvt_config_state_policy_name((kvt_state_policy_t)cfg->state_policy)));
        rc |= s_hybrid_json(root, r);
    }
    rc |= s_engine_json(root, cfg, r);
    //  Counters grouped by actor, actors in the order they first reported.
    for (uint32_t i = 0; rc == 0 && i < e->ncounters; i++) {
        const kvt_sim_engine_counter_t *c = &e->counters[i];
        json_t *actor = s_child(counters, c->actor);
        bool lossy;
        char *name = s_utf8_copy(c->c.name, &lossy);
        //  With several instances an actor name repeats: its values add up.
        json_t *had = actor && name ? json_object_get(actor, name) : NULL;
        uint64_t v = c->c.value + (had ? (uint64_t)json_integer_value(had) : 0);
        rc |= actor && name ? json_object_set_new(actor, name, s_u64(v)) : -1;
        free(name);
    }
    rc |= json_object_set(root, "counters", counters);
    json_decref(hits);
    json_decref(loads);
    json_decref(saves);
    json_decref(ttft);
    json_decref(counters);
    if (rc != 0)
        json_decref(root);
    return rc == 0 ? root : NULL;
}

//  Requests finished per modelled second (0 when no time passed).
static double s_finished_rps(uint64_t finished, uint64_t model_time_us)
{
    return model_time_us ? (double)finished * 1e6 / (double)model_time_us : 0.0;
}

//  The HBM-only baseline beside the run (--hbm-baseline): "hbm_only".
static int s_baseline_json(json_t *root, const kvt_replay_report_t *r, const kvt_hbm_baseline_t *b,
                           bool parallel)
{
    json_t *o = json_object(), *ttft = json_object();
    int rc = o && ttft ? 0 : -1;
    rc |= json_object_set_new(o, "ran", json_boolean(b->ran));
    rc |= json_object_set_new(o, "how",
                              json_string(parallel ? "a second replay without the tiers below "
                                                     "HBM, run beside this one (sim)"
                                                   : "a second replay without the tiers below "
                                                     "HBM, run after this one (live)"));
    if (!b->ran) {
        rc |= s_set_text(o, "error", b->err);
    } else {
        double in = b->input_tokens ? (double)b->input_tokens : 1.0;
        const kvt_sim_engine_result_t *e = &r->engine;
        rc |= json_object_set_new(o, "finished", s_u64(b->finished));
        rc |= json_object_set_new(o, "rejected", s_u64(b->rejected));
        rc |= json_object_set_new(o, "input_tokens", s_u64(b->input_tokens));
        rc |= json_object_set_new(o, "hit_tokens", s_u64(b->hit_tokens));
        rc |= json_object_set_new(o, "hit_share", s_real((double)b->hit_tokens / in, 6));
        rc |= json_object_set_new(ttft, "p50", s_real(b->ttft_p50_ms, 2));
        rc |= json_object_set_new(ttft, "p90", s_real(b->ttft_p90_ms, 2));
        rc |= json_object_set_new(ttft, "p99", s_real(b->ttft_p99_ms, 2));
        rc |= json_object_set(o, "ttft_ms", ttft);
        rc |= json_object_set_new(
            o, "ttft_p50_ratio",
            s_real(b->ttft_p50_ms > 0 ? e->ttft_p50_ms / b->ttft_p50_ms : 0, 4));
        rc |= json_object_set_new(o, "model_time_s", s_real((double)b->model_time_us / 1e6, 3));
        rc |= json_object_set_new(o, "finished_per_model_s",
                                  s_real(s_finished_rps(b->finished, b->model_time_us), 3));
        rc |= json_object_set_new(o, "utilisation", s_real(b->utilisation, 4));
        rc |= json_object_set_new(o, "saturated", json_boolean(b->saturated));
        rc |= json_object_set_new(o, "wrong_resumes", s_u64(b->wrong_resumes));
        rc |= json_object_set_new(o, "failed", json_boolean(b->failed));
        rc |= json_object_set_new(o, "wall_s", s_real(b->wall_s, 3));
    }
    json_decref(ttft);
    rc |= o ? json_object_set_new(root, "hbm_only", o) : -1;
    return rc ? -1 : 0;
}

//  The baseline's lines of the human summary.
static void s_baseline_summary(const kvt_replay_report_t *r, const kvt_hbm_baseline_t *b,
                               bool parallel)
{
    const kvt_sim_engine_result_t *e = &r->engine;
    if (!b->ran) {
        printf("  hbm only      not measured: %s\n", b->err);
        return;
    }
    double in = b->input_tokens ? (double)b->input_tokens : 1.0;
    double ein = e->input_tokens ? (double)e->input_tokens : 1.0;
    printf("  vs hbm only   ttft p50 %.1f / p90 %.1f / p99 %.1f ms with the tiers, %.1f / %.1f / "
           "%.1f ms without (p50 %.2f x)\n",
           e->ttft_p50_ms, e->ttft_p90_ms, e->ttft_p99_ms, b->ttft_p50_ms, b->ttft_p90_ms,
           b->ttft_p99_ms, b->ttft_p50_ms > 0 ? e->ttft_p50_ms / b->ttft_p50_ms : 0.0);
    printf("                hits %.1f%% with, %.1f%% without; %.2f req/s finished per modelled "
           "second with, %.2f without (busy %.1f%% / %.1f%%)%s\n",
           100.0 * (1.0 - r->recomputed_share) * (double)e->input_tokens / ein,
           100.0 * (double)b->hit_tokens / in, s_finished_rps(e->finished, e->model_time_us),
           s_finished_rps(b->finished, b->model_time_us), 100.0 * e->utilisation,
           100.0 * b->utilisation, b->saturated ? "; WITHOUT THE TIERS THE ENGINE SATURATES" : "");
    printf("                (a second replay without the CPU, disk and remote tiers, %s; "
           "%.1f s wall)\n",
           parallel ? "beside this one" : "after this one", b->wall_s);
}

static int s_write_json(const char *path, const kvt_replay_cfg_t *cfg, const kvt_replay_report_t *r,
                        const kvt_hbm_baseline_t *b, bool parallel)
{
    json_t *root = s_report_json(cfg, r);
    if (root && b && s_baseline_json(root, r, b, parallel) != 0) {
        json_decref(root);
        root = NULL;
    }
    if (!root) {
        fprintf(stderr, "kvtier replay: --json: out of memory\n");
        return -1;
    }
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "kvtier replay: --json: cannot write %s: %s\n", path, strerror(errno));
        json_decref(root);
        return -1;
    }
    int rc = json_dumpf(root, f, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15));
    json_decref(root);
    if (rc == 0 && fputc('\n', f) == EOF)
        rc = -1;
    if (fclose(f) != 0 || rc != 0) {
        fprintf(stderr, "kvtier replay: --json: cannot write %s\n", path);
        return -1;
    }
    return 0;
}

//  The instances a saturated run should try (kvt_sim_engine_instances_for).
static uint32_t s_instances_for(const kvt_replay_cfg_t *cfg, const kvt_sim_engine_result_t *e)
{
    return kvt_sim_engine_instances_for(e->busy_us, e->span_us,
                                        cfg->instances ? cfg->instances : 1);
}

//  Requests per second of the arrivals (first to last; 0 when they span
//  no time). Under a closed loop they follow the ends: what was achieved.
static double s_offered_rps(const kvt_sim_engine_result_t *e)
{
    return e->span_us && e->requests > 1 ? (double)(e->requests - 1) * 1e6 / (double)e->span_us
                                         : 0.0;
}

//  The modelled engine (docs/metrics.md): its cost model, how busy it was
//  and whether queueing dominated.
static int s_engine_json(json_t *root, const kvt_replay_cfg_t *cfg, const kvt_replay_report_t *r)
{
    const kvt_sim_engine_result_t *e = &r->engine;
    kvt_cost_cfg_t cost;
    char err[160];
    json_t *eng = json_object();
    if (!eng || kvt_replay_cost(cfg, &cost, err, sizeof err) != 0) {
        json_decref(eng);
        return -1;
    }
    int rc = json_object_set_new(eng, "cost_model", json_string(cost.name));
    rc |= json_object_set_new(eng, "prefill_tps", s_real(cost.prefill_tps, 1));
    rc |= json_object_set_new(eng, "kv_token_bytes", s_real(cost.kv_token_bytes, 1));
    rc |=
        json_object_set_new(eng, "byte_scale", json_integer(cfg->byte_scale ? cfg->byte_scale : 1));
    rc |= json_object_set_new(eng, "busy_s", s_real((double)e->busy_us / 1e6, 3));
    rc |= json_object_set_new(eng, "utilisation", s_real(e->utilisation, 4));
    rc |= json_object_set_new(eng, "load_copy_s", s_real((double)e->load_copy_us / 1e6, 3));
    rc |= json_object_set_new(eng, "load_wait_s", s_real((double)e->load_wait_us / 1e6, 3));
    rc |= json_object_set_new(eng, "save_link_s", s_real((double)e->save_link_us / 1e6, 3));
    rc |= json_object_set_new(eng, "drain_s", s_real((double)e->drain_us / 1e6, 3));
    rc |= json_object_set_new(eng, "arrival_span_s", s_real((double)e->span_us / 1e6, 3));
    rc |= json_object_set_new(eng, "offered_rps", s_real(s_offered_rps(e), 3));
    rc |= json_object_set_new(eng, "max_in_flight", json_integer(e->max_in_flight));
    rc |= json_object_set_new(eng, "saturated", json_boolean(e->saturated));
    if (e->saturated)
        rc |=
            json_object_set_new(eng, "instances_suggested", json_integer(s_instances_for(cfg, e)));
    rc |= json_object_set_new(eng, "instances", json_integer(cfg->instances ? cfg->instances : 1));
    rc |= json_object_set_new(root, "engine", eng);
    rc |= json_object_set_new(root, "requests_per_wall_s",
                              s_real(r->wall_s > 0 ? (double)e->requests / r->wall_s : 0, 1));
    return rc ? -1 : 0;
}

static void s_summary(FILE *out, const kvt_replay_cfg_t *cfg, const kvt_replay_report_t *r)
{
    const kvt_sim_engine_result_t *e = &r->engine;
    double in = e->input_tokens ? (double)e->input_tokens : 1.0;
    fprintf(out, "kvtier replay: %s\n", r->source);
    fprintf(out,
            "  driver %s, seed %" PRIu64 ", tp %u, hbm-pool %" PRIu64 " MiB/rank, cpu-pool %" PRIu64
            " MiB/rank (real; byte scale %u)\n",
            cfg->driver == KVT_DRIVER_SIM ? "sim" : "live", cfg->seed, cfg->tp,
            cfg->hbm_pool_bytes >> 20, cfg->cpu_pool_bytes >> 20,
            cfg->byte_scale ? cfg->byte_scale : 1);
    fprintf(out, "  requests      %" PRIu64 " (%" PRIu64 " finished, %" PRIu64 " rejected)\n",
            e->requests, e->finished, e->rejected);
    if (cfg->fault_abort || cfg->fault_preempt)
        fprintf(out,
                "  faults        %" PRIu64 " aborts sent (%" PRIu64 " aborted), %" PRIu64
                " preempts sent (%" PRIu64 " re-admitted)\n",
                e->aborts_sent, e->aborted, e->preempts_sent, e->preempted);
    if (cfg->fault_abort || cfg->fault_preempt)
        fprintf(out,
                "                by phase: %" PRIu64 " waiting, %" PRIu64 " loading, %" PRIu64
                " running, %" PRIu64 " mid-save, %" PRIu64 " finished with a save pending\n",
                e->fault_phase[0], e->fault_phase[1], e->fault_phase[2], e->fault_phase[3],
                e->fault_phase[4]);
    if (cfg->closed_loop)
        fprintf(out,
                "  arrivals      closed loop, %u in flight per instance (at most %u seen): "
                "%.2f req/s achieved over %.1f s of arrivals\n",
                cfg->closed_loop, e->max_in_flight, s_offered_rps(e), (double)e->span_us / 1e6);
    else
        fprintf(out,
                "  arrivals      open loop, time scale %g: offered %.2f req/s over %.1f s "
                "(at most %u in flight)\n",
                cfg->time_scale > 0 ? cfg->time_scale : 1.0, s_offered_rps(e),
                (double)e->span_us / 1e6, e->max_in_flight);
    fprintf(out, "  input tokens  %" PRIu64 "\n", e->input_tokens);
    fprintf(out, "  hit tokens    hbm %" PRIu64 " (%.1f%%), cpu %" PRIu64 " (%.1f%%)",
            e->hbm_hit_tokens, 100.0 * (double)e->hbm_hit_tokens / in, r->hit_cpu_tokens,
            100.0 * (double)r->hit_cpu_tokens / in);
    if (cfg->disk_dir)
        fprintf(out, ", disk %" PRIu64 " (%.1f%%)", r->hit_disk_tokens,
                100.0 * (double)r->hit_disk_tokens / in);
    fprintf(out, "\n");
    fprintf(out, "  recomputed    %" PRIu64 " (%.1f%%)\n", r->recomputed_tokens,
            100.0 * r->recomputed_share);
    kvt_ledger_print(&r->ledger, out, "  ");
    fprintf(out, "  loads         %" PRIu64 " completed, %" PRIu64 " failed\n", e->loads_ok,
            e->loads_failed);
    fprintf(out, "  saves         %" PRIu64 " completed, %" PRIu64 " failed\n", r->saves_ok,
            r->saves_failed);
    fprintf(out, "  ttft (model)  p50 %.1f ms, p90 %.1f ms, p99 %.1f ms over %.1f s modelled\n",
            e->ttft_p50_ms, e->ttft_p90_ms, e->ttft_p99_ms, (double)e->model_time_us / 1e6);
    fprintf(out,
            "  engine        busy %.1f%% of the modelled time; loads copied %.2f s (delayed first "
            "tokens %.2f s), saves used the link %.2f s\n",
            100.0 * e->utilisation, (double)e->load_copy_us / 1e6, (double)e->load_wait_us / 1e6,
            (double)e->save_link_us / 1e6);
    fprintf(out, "  clocks        modelled %.1f s, driver %.3f s (%s)\n",
            (double)e->model_time_us / 1e6, (double)e->driver_us / 1e6,
            kvt_replay_paced(cfg) ? "paced: a step spends its modelled time on the driver's clock"
                                  : "unpaced: steps start when the last ended");
    if (e->saturated)
        fprintf(out,
                "  SATURATED     the last first token came %.1f s after the last arrival (arrivals "
                "span "
                "%.1f s): queueing dominates the TTFT. Serve the trace with more engines "
                "(--instances %u) or faster ones (--tp, --cost prefill_tps=...)\n",
                (double)e->drain_us / 1e6, (double)e->span_us / 1e6, s_instances_for(cfg, e));
    if (cfg->state_bytes) {
        static const char *const how[] = {
            " (+ prompt ends, decode keeps, branch points; value order)",
            " (+ prompt ends, decode keeps; LRU)", ": every chunk instead (LRU)",
            ": none, branch points and decode keeps instead (Marconi's order)"};
        fprintf(out,
                "  model         %s, state %" PRIu64 " bytes/request/rank, state policy %s, "
                "checkpoint every %u tokens%s\n",
                cfg->model ? cfg->model : "?", cfg->state_bytes,
                kvt_config_state_policy_name((kvt_state_policy_t)cfg->state_policy),
                cfg->checkpoint_interval,
                cfg->interval_checkpoints ? " (grid only)" : how[cfg->state_policy]);
        fprintf(out,
                "  joint         state from hbm %" PRIu64 ", from tier %" PRIu64
                "; skipped: tier within hbm %" PRIu64 ", no rung above hbm %" PRIu64
                ", no room %" PRIu64 ", no demand %" PRIu64 ", below min load %" PRIu64 "\n",
                s_sc(r, "sched.joint_state_hbm"), s_sc(r, "sched.joint_state_tier"),
                s_sc(r, "sched.tier_within_hbm"), s_sc(r, "sched.no_rung_above_hbm"),
                s_sc(r, "sched.partial_chunk_no_room"), s_sc(r, "sched.no_probe_demand"),
                s_sc(r, "sched.below_min_load"));
        fprintf(out,
                "                retreats to hbm %" PRIu64 ", to zero %" PRIu64
                ", convoy waits %" PRIu64 ", lookup timeouts %" PRIu64 "\n",
                s_sc(r, "sched.retreats_to_hbm"), s_sc(r, "sched.retreats_to_zero"),
                s_sc(r, "sched.convoy_waits"), s_sc(r, "sched.lookup_timeouts"));
        fprintf(out,
                "  state loads   %" PRIu64 " dispatched, %" PRIu64 " completed, %" PRIu64
                " failed, %" PRIu64 " abandoned, %" PRIu64 " orphaned, %" PRIu64 " reclaimed\n",
                s_sc(r, "stidx.dispatched"), s_sc(r, "stidx.completed"), s_sc(r, "stidx.failed"),
                s_sc(r, "stidx.abandoned"), s_sc(r, "stidx.orphaned"), s_sc(r, "stidx.reclaimed"));
        fprintf(out,
                "  touches       %" PRIu64 " sent, %" PRIu64 " gone, %" PRIu64
                " unrefreshed; holds %" PRIu64 " held, %" PRIu64 " expired\n",
                s_sc(r, "stidx.touches_sent"), s_sc(r, "stidx.forgotten_gone"),
                s_sc(r, "stidx.touches_unrefreshed"), s_sc(r, "stidx.holds"),
                s_sc(r, "stidx.holds_expired"));
        fprintf(
            out, "  state tax     %" PRIu64 " tokens over %" PRIu64 " resumes (%.1f per resume)\n",
            s_sc(r, "sched.state_tax_tokens"), s_sc(r, "sched.state_resumes"), s_tax_per_resume(r));
    }
    fprintf(out, "  wrong resumes %" PRIu64 "\n", e->wrong_resumes);
    if (cfg->driver == KVT_DRIVER_SIM)
        fprintf(out, "  trace hash    %016" PRIx64 " (%" PRIu64 " events)\n", r->trace_hash,
                r->events);
    fprintf(out, "  wall          %.2f s, %" PRIu64 " steps\n", r->wall_s, e->steps);
    if (!r->quiescent)
        fprintf(out, "  NOT QUIESCENT: %s\n", r->problem);
}

//  Derived configuration values, each logged once (log level >= 1).
static void s_log_derived(void *arg, const char *key, const char *value, const char *why)
{
    if (*(const int *)arg >= 1)
        fprintf(stderr, "kvtier replay: config: %s = %s (%s)\n", key, value, why);
}

//  The settings of argv: the configuration's (--config FILE < KVTIER_* <
//  flags, kvt_config) and the replay's own flags. Returns 0, 1 after
//  --help, or 2 with the message printed. kc holds the strings cfg points at.
static int s_parse(int argc, char **argv, kvt_config_t *kc, kvt_replay_cfg_t *cfg,
                   const char **json, bool *quiet)
{
    kvt_replay_cfg_t own; //  what only the replay's flags set
    kvt_replay_defaults(&own);
    s_sweep = NULL;
    s_report = NULL;
    s_baseline = "auto";
    static char cost[1024]; //  --cost knobs, joined (cfg->cost points here)
    cost[0] = 0;
    uint32_t scale = 0; //  --byte-scale (0: the model's)
    char err[1400];
    kvt_config_loader_t *ld = kvt_config_loader_new();
    if (!ld) {
        fprintf(stderr, "kvtier replay: out of memory\n");
        return 2;
    }
    int rc = 0;
    for (int i = 1; rc == 0 && i < argc; i++) {
        const char *a = argv[i];
        bool is_bool;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            s_usage(stdout);
            kvt_config_loader_destroy(&ld);
            return 1;
        }
        if (!strcmp(a, "--quiet")) {
            *quiet = true;
            continue;
        }
        if (!strcmp(a, "--ranks-as-processes")) {
            own.ranks_as_processes = true;
            continue;
        }
        if (strncmp(a, "--", 2) == 0 && kvt_config_has_key(a, &is_bool)) {
            //  A setting of the configuration: --x V, --x=V, or a boolean alone.
            const char *v = NULL;
            if (!strchr(a, '=') && !is_bool) {
                if (i + 1 >= argc) {
                    fprintf(stderr, "kvtier replay: %s needs a value (see --help)\n", a);
                    rc = 2;
                    break;
                }
                v = argv[++i];
            }
            if (kvt_config_loader_flag(ld, a, v, err, sizeof err) != 0) {
                fprintf(stderr, "kvtier replay: %s\n", err);
                rc = 2;
            }
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "kvtier replay: %s needs a value (see --help)\n", a);
            rc = 2;
            break;
        }
        const char *v = argv[++i];
        uint64_t n;
        int bad = 0;
        if (!strcmp(a, "--config")) {
            if (kvt_config_loader_file(ld, v, err, sizeof err) != 0) {
                fprintf(stderr, "kvtier replay: --config: %s\n", err);
                rc = 2;
            }
            continue;
        } else if (!strcmp(a, "--json"))
            *json = v;
        else if (!strcmp(a, "--rank-endpoint"))
            own.rank_endpoint = v;
        else if (!strcmp(a, "--record"))
            own.record = v;
        else if (!strcmp(a, "--checkpoints")) {
            if (!strcmp(v, "interval") || !strcmp(v, "all"))
                own.interval_checkpoints = !strcmp(v, "interval");
            else
                bad = -1;
        } else if (!strcmp(a, "--fault")) {
            //  KIND=N, N >= 1; each kind its own field (--fault may repeat).
            const char *kinds[] = {
                "corrupt-resume=", "corrupt-state=", "miss-state=", "stale-slot=", "restore-late=",
                "swap-slots=",     "stale-block=",   "abort=",      "preempt="};
            uint32_t *fields[] = {
                &own.fault_corrupt_resume, &own.fault_corrupt_state, &own.fault_miss_state,
                &own.fault_stale_slot,     &own.fault_restore_late,  &own.fault_swap_slots,
                &own.fault_stale_block,    &own.fault_abort,         &own.fault_preempt};
            bad = -1;
            for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
                if (strncmp(v, kinds[k], strlen(kinds[k])) == 0 &&
                    kvt_cli_uint(v + strlen(kinds[k]), 1, UINT32_MAX, &n) == 0) {
                    *fields[k] = (uint32_t)n;
                    bad = 0;
                }
        } else if (!strcmp(a, "--sweep"))
            s_sweep = v;
        else if (!strcmp(a, "--report"))
            s_report = v;
        else if (!strcmp(a, "--hbm-baseline")) {
            if (!strcmp(v, "on") || !strcmp(v, "off") || !strcmp(v, "auto"))
                s_baseline = v;
            else
                bad = -1;
        } else if (!strcmp(a, "--progress"))
            bad = kvt_progress_mode_parse(v, &s_progress_mode);
        else if (!strcmp(a, "--progress-interval")) {
            if ((bad = kvt_cli_uint(v, 1, 3600000, &n)) == 0)
                s_progress_ms = (uint32_t)n;
        } else if (!strcmp(a, "--instances")) {
            if ((bad = kvt_cli_uint(v, 1, 64, &n)) == 0)
                own.instances = (uint32_t)n;
        } else if (!strcmp(a, "--byte-scale")) {
            if ((bad = kvt_cli_uint(v, 1, 1u << 20, &n)) == 0)
                scale = (uint32_t)n;
        } else if (!strcmp(a, "--cost")) {
            //  Repeats append: one list of knobs.
            size_t used = strlen(cost);
            if (used + strlen(v) + 2 > sizeof cost)
                bad = -1;
            else
                snprintf(cost + used, sizeof cost - used, "%s%s", used ? "," : "", v);
        } else if (!strcmp(a, "--wall-limit")) {
            if ((bad = kvt_cli_uint(v, 0, UINT32_MAX / 1000, &n)) == 0)
                own.wall_limit_ms = (uint32_t)n * 1000u;
        } else {
            fprintf(stderr, "kvtier replay: unknown option '%s' (see --help)\n", a);
            rc = 2;
            break;
        }
        if (bad != 0) {
            fprintf(stderr, "kvtier replay: %s: bad value '%s'\n", a, v);
            rc = 2;
        }
    }
    if (rc == 0 && kvt_config_loader_env(ld, NULL, err, sizeof err) != 0) {
        fprintf(stderr, "kvtier replay: %s\n", err);
        rc = 2;
    }
    //  The log level decides whether the derived values are logged, so it
    //  is read from a first build (nothing logged), then the real one logs.
    kvt_config_t probe;
    int level = 1;
    if (rc == 0 && kvt_config_loader_build(ld, &probe, NULL, NULL, err, sizeof err) != 0) {
        fprintf(stderr, "kvtier replay: %s\n", err);
        rc = 2;
    } else if (rc == 0)
        level = probe.log_level;
    if (rc == 0 && kvt_config_loader_build(ld, kc, s_log_derived, &level, err, sizeof err) != 0) {
        fprintf(stderr, "kvtier replay: %s\n", err);
        rc = 2;
    }
    bool driver_set = rc == 0 && strcmp(kvt_config_loader_origin(ld, "driver"), "default") != 0;
    //  Sizes nobody set are the model's real ones (the byte scale stores them).
    bool size_default[3] = {false, false, false};
    const char *size_keys[3] = {"hbm_pool", "cpu_pool", "disk_pool"};
    for (int k = 0; rc == 0 && k < 3; k++)
        size_default[k] = !strcmp(kvt_config_loader_origin(ld, size_keys[k]), "default");
    bool window_default =
        rc == 0 && !strcmp(kvt_config_loader_origin(ld, "verified_window"), "default");
    kvt_config_loader_destroy(&ld);
    if (rc != 0)
        return rc;
    if (kvt_replay_from_config(kc, cfg, err, sizeof err) != 0) {
        fprintf(stderr, "kvtier replay: %s\n", err);
        return 2;
    }
    cfg->ranks_as_processes = own.ranks_as_processes;
    cfg->rank_endpoint = own.rank_endpoint;
    cfg->record = own.record;
    cfg->fault_corrupt_resume = own.fault_corrupt_resume;
    cfg->fault_corrupt_state = own.fault_corrupt_state;
    cfg->interval_checkpoints = own.interval_checkpoints;
    cfg->fault_miss_state = own.fault_miss_state;
    cfg->fault_stale_slot = own.fault_stale_slot;
    cfg->fault_restore_late = own.fault_restore_late;
    cfg->fault_swap_slots = own.fault_swap_slots;
    cfg->fault_stale_block = own.fault_stale_block;
    cfg->fault_abort = own.fault_abort;
    cfg->fault_preempt = own.fault_preempt;
    cfg->wall_limit_ms = own.wall_limit_ms;
    cfg->cost = cost[0] ? cost : NULL;
    //  Not given: a trace (a cluster's) gets the default instances, the
    //  synthetic workload (sized for one engine) one.
    cfg->instances = own.instances ? own.instances : cfg->trace ? S_DEFAULT_INSTANCES : 1;
    cfg->byte_scale = scale ? scale : kvt_replay_byte_scale(cfg);
    uint64_t real[3];
    kvt_replay_real_sizes(cfg->model, &real[0], &real[1], &real[2]);
    if (size_default[0])
        cfg->hbm_pool_bytes = real[0];
    if (size_default[1])
        cfg->cpu_pool_bytes = real[1];
    if (size_default[2])
        cfg->disk_pool_bytes = real[2];
    if (size_default[1] && window_default)
        cfg->verified_window_ns = 0; //  the scheduler derives it from the real CPU pool
    if (level >= 1) {
        kvt_cost_cfg_t cm;
        if (kvt_replay_cost(cfg, &cm, err, sizeof err) == 0)
            fprintf(stderr,
                    "kvtier replay: byte scale %u: %.0f real KV bytes per token per rank (%s) "
                    "stored as %u; sizes are real, pools store 1/%u of them\n",
                    cfg->byte_scale, cm.kv_token_bytes, cm.name,
                    cfg->planes * cfg->layers * cfg->token_bytes, cfg->byte_scale);
    }
    if (cfg->ranks_as_processes && !driver_set)
        cfg->driver = KVT_DRIVER_LIVE;
    if (cfg->record && cfg->driver != KVT_DRIVER_SIM) {
        fprintf(stderr, "kvtier replay: --record needs --driver sim\n");
        return 2;
    }
    if (kvt_replay_validate(cfg, err, sizeof err) != 0) {
        fprintf(stderr, "kvtier replay: %s\n", err);
        return 2;
    }
    return 0;
}

//  One value of a sweep into cfg: 0, or -1 when it is not a value of key.
static int s_sweep_set(kvt_replay_cfg_t *cfg, const char *key, const char *v)
{
    uint64_t n;
    if (!strcmp(key, "instances")) {
        if (kvt_cli_uint(v, 1, 64, &n) != 0)
            return -1;
        cfg->instances = (uint32_t)n;
        return 0;
    }
    uint64_t *f = !strcmp(key, "cpu_pool")    ? &cfg->cpu_pool_bytes
                  : !strcmp(key, "hbm_pool")  ? &cfg->hbm_pool_bytes
                  : !strcmp(key, "disk_pool") ? &cfg->disk_pool_bytes
                                              : NULL;
    if (!f || kvt_cli_size(v, &n) != 0)
        return -1;
    *f = n;
    return 0;
}

//  --sweep: every value checked first, then one run each; a table on
//  stdout and, with --report, the same as Markdown and TSV and a plot.
static int s_run_sweep(const kvt_replay_cfg_t *base)
{
    char key[32], vals[1024];
    const char *eq = strchr(s_sweep, '=');
    if (!eq || eq == s_sweep || (size_t)(eq - s_sweep) >= sizeof key || !eq[1] ||
        strlen(eq + 1) >= sizeof vals) {
        fprintf(stderr, "kvtier replay: --sweep: expected KEY=V1,V2,... (got '%s')\n", s_sweep);
        return 2;
    }
    snprintf(key, sizeof key, "%.*s", (int)(eq - s_sweep), s_sweep);
    for (char *k = key; *k; k++)
        if (*k == '-')
            *k = '_';
    snprintf(vals, sizeof vals, "%s", eq + 1);
    const char *v[64];
    uint32_t nv = 0;
    char err[512];
    for (char *save = NULL, *t = strtok_r(vals, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        kvt_replay_cfg_t c = *base;
        if (nv == 64 || s_sweep_set(&c, key, t) != 0 ||
            kvt_replay_validate(&c, err, sizeof err) != 0) {
            fprintf(stderr,
                    "kvtier replay: --sweep %s: bad value '%s'%s%s (keys: cpu_pool, hbm_pool, "
                    "disk_pool, instances; at most 64 values)\n",
                    key, t, nv < 64 && s_sweep_set(&c, key, t) == 0 ? ": " : "",
                    nv < 64 && s_sweep_set(&c, key, t) == 0 ? err : "");
            return 2;
        }
        v[nv++] = t;
    }
    FILE *md = NULL, *tsv = NULL;
    if (s_report) {
        char path[600];
        if (mkdir(s_report, 0755) != 0 && errno != EEXIST) {
            fprintf(stderr, "kvtier replay: --report: cannot create %s: %s\n", s_report,
                    strerror(errno));
            return 2;
        }
        snprintf(path, sizeof path, "%s/sweep.md", s_report);
        md = fopen(path, "w");
        snprintf(path, sizeof path, "%s/sweep.tsv", s_report);
        tsv = fopen(path, "w");
        if (!md || !tsv) {
            fprintf(stderr, "kvtier replay: --report: cannot write in %s\n", s_report);
            if (md)
                fclose(md);
            if (tsv)
                fclose(tsv);
            return 2;
        }
        fprintf(md,
                "# kvtier replay: sweep of %s\n\n| %s | hbm hit %% | cpu hit %% | disk hit %% | "
                "recomputed %% | ttft p50 ms | ttft p90 ms | ttft p99 ms | saturated | wrong "
                "resumes |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
                key, key);
        fprintf(tsv,
                "# "
                "%s\thbm_hit_tokens\tcpu_hit_tokens\tdisk_hit_tokens\tinput_tokens\thit_"
                "share\tttft_p50_ms\tttft_p90_ms\tttft_p99_ms\tsaturated\twrong_resumes\n",
                key);
    }
    printf("%-12s %9s %9s %9s %11s %12s %12s %12s %9s %6s\n", key, "hbm hit%", "cpu hit%",
           "disk hit%", "recomputed%", "ttft p50 ms", "ttft p90 ms", "ttft p99 ms", "saturated",
           "wrong");
    int status = 0;
    kvt_replay_report_t *rep = calloc(1, sizeof *rep);
    for (uint32_t i = 0; rep && i < nv; i++) {
        kvt_replay_cfg_t c = *base;
        s_sweep_set(&c, key, v[i]);
        if (kvt_replay_run(&c, rep, err, sizeof err) != 0) {
            fprintf(stderr, "kvtier replay: --sweep %s=%s: %s\n", key, v[i], err);
            status = 2;
            break;
        }
        const kvt_sim_engine_result_t *e = &rep->engine;
        double in = e->input_tokens ? (double)e->input_tokens : 1.0;
        printf("%-12s %9.1f %9.1f %9.1f %11.1f %12.1f %12.1f %12.1f %9s %6" PRIu64 "\n", v[i],
               100.0 * (double)e->hbm_hit_tokens / in, 100.0 * (double)rep->hit_cpu_tokens / in,
               100.0 * (double)rep->hit_disk_tokens / in, 100.0 * rep->recomputed_share,
               e->ttft_p50_ms, e->ttft_p90_ms, e->ttft_p99_ms, e->saturated ? "YES" : "no",
               e->wrong_resumes);
        if (md) {
            fprintf(
                md, "| %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %s | %" PRIu64 " |\n",
                v[i], 100.0 * (double)e->hbm_hit_tokens / in,
                100.0 * (double)rep->hit_cpu_tokens / in, 100.0 * (double)rep->hit_disk_tokens / in,
                100.0 * rep->recomputed_share, e->ttft_p50_ms, e->ttft_p90_ms, e->ttft_p99_ms,
                e->saturated ? "yes" : "no", e->wrong_resumes);
            fprintf(tsv,
                    "%s\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64
                    "\t%.6f\t%.2f\t%.2f\t%.2f\t%d\t%" PRIu64 "\n",
                    v[i], e->hbm_hit_tokens, rep->hit_cpu_tokens, rep->hit_disk_tokens,
                    e->input_tokens, 1.0 - rep->recomputed_share, e->ttft_p50_ms, e->ttft_p90_ms,
                    e->ttft_p99_ms, e->saturated, e->wrong_resumes);
        }
        if (rep->failed) {
            fprintf(stderr, "kvtier replay: --sweep %s=%s FAILED: %s", key, v[i], rep->failures);
            status = 1;
        }
        kvt_replay_report_clear(rep);
    }
    free(rep);
    if (md) {
        fclose(tsv);
        //  The plot: hit share and TTFT p50 against the value, by gnuplot
        //  when it is installed (the tables stand without it).
        char cmd[1400];
        snprintf(cmd, sizeof cmd,
                 "cd '%s' && command -v gnuplot >/dev/null 2>&1 && gnuplot -e \"set terminal png "
                 "noenhanced "
                 "size 900,500; set output 'sweep.png'; set xlabel '%s'; set ylabel 'hit share'; "
                 "set y2label 'TTFT p50 (ms)'; set y2tics; set ytics nomirror; set style data "
                 "linespoints; plot 'sweep.tsv' using 0:6:xtic(1) title 'hit share' axes x1y1, '' "
                 "using 0:7 title 'TTFT p50' axes x1y2\" 2>/dev/null",
                 s_report, key);
        bool plotted = strchr(s_report, '\'') == NULL && system(cmd) == 0;
        fprintf(md, "\n%s\n",
                plotted ? "![hit share and TTFT p50 against the value](sweep.png)"
                        : "(no plot: gnuplot is not installed; install Debian's "
                          "gnuplot-nox for sweep.png)");
        fclose(md);
    }
    return status;
}

int kvt_cmd_replay(int argc, char **argv)
{
    kvt_config_t kc;
    kvt_replay_cfg_t cfg;
    const char *json = NULL;
    bool quiet = false;
    s_argc = argc;
    s_argv = argv;
    int parsed = s_parse(argc, argv, &kc, &cfg, &json, &quiet);
    if (parsed != 0)
        return parsed == 1 ? 0 : parsed;
    char err[512];
    kvt_metrics_t *metrics = NULL;
    if (kc.metrics_addr[0]) {
        metrics = kvt_metrics_new();
        if (!metrics || kvt_metrics_listen(metrics, kc.metrics_addr, err, sizeof err) != 0) {
            fprintf(stderr, "kvtier replay: %s\n", metrics ? err : "out of memory");
            kvt_metrics_destroy(&metrics);
            return 2;
        }
        fprintf(stderr, "kvtier replay: metrics at http://%.*s:%u/metrics\n",
                (int)(strrchr(kc.metrics_addr, ':') - kc.metrics_addr), kc.metrics_addr,
                (unsigned)kvt_metrics_port(metrics));
        cfg.metrics = metrics;
        cfg.metrics_interval_ns = kc.metrics_interval_ns;
    }
    int status = s_cmd_replay_run(&cfg, json, quiet, err, sizeof err);
    kvt_metrics_destroy(&metrics);
    return status;
}

//  --report DIR of a single run: the summary as printed, then every file.
static int s_write_report(const kvt_replay_cfg_t *cfg, const kvt_replay_report_t *rep,
                          const kvt_report_t *series)
{
    char *summary = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&summary, &len);
    if (m) {
        s_summary(m, cfg, rep); //  in the report also with --quiet
        fclose(m);
    }
    kvt_replay_report_in_t in = {.dir = s_report,
                                 .argc = s_argc,
                                 .argv = s_argv,
                                 .cfg = cfg,
                                 .rep = rep,
                                 .series = series,
                                 .summary = summary ? summary : ""};
    char err[600];
    bool plotted;
    int rc = kvt_replay_report_write(&in, &plotted, err, sizeof err);
    free(summary);
    if (rc != 0) {
        fprintf(stderr, "kvtier replay: %s\n", err);
        return -1;
    }
    if (cfg->log_level >= 1)
        fprintf(stderr, "kvtier replay: report in %s/report.md%s\n", s_report,
                plotted ? "" : " (plots not rendered: see it)");
    return 0;
}

//  One replay (or a sweep) of a parsed command line.
static int s_cmd_replay_run(kvt_replay_cfg_t *cfgp, const char *json, bool quiet, char *err,
                            size_t errlen)
{
    kvt_replay_cfg_t cfg = *cfgp;
    if (s_sweep && !strcmp(s_baseline, "on")) {
        fprintf(stderr, "kvtier replay: --hbm-baseline on: not with --sweep (sweep cpu_pool "
                        "with a value of 0 for the HBM-only row)\n");
        return 2;
    }
    if (s_sweep)
        return s_run_sweep(&cfg);
    kvt_report_t *series = NULL;
    if (s_report) {
        if (kvt_replay_report_prepare(s_report, err, errlen) != 0) {
            fprintf(stderr, "kvtier replay: %s\n", err);
            return 2;
        }
        series = kvt_report_new(0, 0);
        if (!series) {
            fprintf(stderr, "kvtier replay: out of memory\n");
            return 1;
        }
        cfg.report = series;
    }
    kvt_replay_report_t *rep = calloc(1, sizeof *rep);
    if (!rep) {
        fprintf(stderr, "kvtier replay: out of memory\n");
        kvt_report_destroy(&series);
        return 1;
    }
    int status = 0;
    //  The HBM-only baseline starts first: under sim a child process, forked
    //  before this run starts its threads.
    const char *bl_why = NULL;
    bool bl_applies = kvt_hbm_baseline_applies(&cfg, &bl_why);
    bool bl_want = !strcmp(s_baseline, "on") ||
                   (!strcmp(s_baseline, "auto") && !quiet && isatty(STDOUT_FILENO) && bl_applies);
    if (bl_want && !bl_applies) {
        fprintf(stderr, "kvtier replay: --hbm-baseline on: %s\n", bl_why);
        free(rep);
        kvt_report_destroy(&series);
        return 2;
    }
    kvt_hbm_baseline_run_t bl_run = {.fd = -1};
    if (bl_want && kvt_hbm_baseline_start(&bl_run, &cfg, err, errlen) != 0) {
        fprintf(stderr, "kvtier replay: %s\n", err);
        free(rep);
        kvt_report_destroy(&series);
        return 2;
    }
    kvt_progress_t bar;
    kvt_progress_start(&bar, s_progress_ms);
    if (kvt_progress_wanted(s_progress_mode, isatty(STDERR_FILENO), quiet)) {
        cfg.progress = kvt_progress_cb;
        cfg.progress_arg = &bar;
    }
    int ran = kvt_replay_run(&cfg, rep, err, errlen);
    kvt_progress_end(&bar);
    if (ran != 0) {
        fprintf(stderr, "kvtier replay: %s\n", err);
        if (bl_want)
            kvt_hbm_baseline_cancel(&bl_run);
        kvt_replay_report_clear(rep);
        free(rep);
        kvt_report_destroy(&series);
        return 2;
    }
    if (!quiet)
        s_summary(stdout, &cfg, rep);
    if (s_report && s_write_report(&cfg, rep, series) != 0)
        status = 1;
    kvt_report_destroy(&series);
    if (rep->engine.saturated && cfg.log_level >= 1)
        fprintf(stderr,
                "kvtier replay: WARNING: the modelled engine is saturated (its last first token "
                "came %.1f s after the last arrival): the TTFT measures the queue, not the tiers; "
                "rerun with "
                "--instances %u (or a faster engine: --tp, --cost prefill_tps=...)\n",
                (double)rep->engine.drain_us / 1e6, s_instances_for(&cfg, &rep->engine));
    kvt_hbm_baseline_t bl;
    bool bl_parallel = bl_run.fd >= 0;
    if (bl_want) {
        kvt_hbm_baseline_finish(&bl_run, &bl);
        if (!quiet)
            s_baseline_summary(rep, &bl, bl_parallel);
        if (!bl.ran) {
            fprintf(stderr, "kvtier replay: the HBM-only baseline did not run: %s\n", bl.err);
            if (!strcmp(s_baseline, "on"))
                status = 1;
        } else if (bl.failed || bl.wrong_resumes) {
            //  Zero wrong resumes holds for the baseline too.
            fprintf(stderr, "kvtier replay: FAILED (the HBM-only baseline): %s%s",
                    bl.failures[0] ? bl.failures : "wrong resumes",
                    bl.failures[0] && bl.failures[strlen(bl.failures) - 1] == '\n' ? "" : "\n");
            status = 1;
        }
    }
    if (json && s_write_json(json, &cfg, rep, bl_want ? &bl : NULL, bl_parallel) != 0)
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
