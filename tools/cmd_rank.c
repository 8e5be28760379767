/*  kvtier rank — runs one rank of a replay (runner, worker, its tier) as
    this process, talking to the engine's actors at ENDPOINT: ipc://DIR
    (same host; actor NAME at ipc://DIR/NAME) or tcp://HOST:PORT (topology
    actor i at HOST:PORT+i). `kvtier replay --ranks-as-processes` starts
    these itself; the settings must match the engine's (geometry, tiers,
    world size), since both sides derive the namespace and the topology
    from them.

    Its settings are the configuration's (kvt_config): --config FILE <
    KVTIER_* < flags, each defined, defaulted, range-checked and checked
    against the others once, by the configuration's table, as for `kvtier
    replay`. Only what names this process in the run is the rank's own:
    --rank, --world (the run's tp), --engine, --engine-pid,
    --connect-timeout, the engine's --namespace and --layout-id, --fault. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay/kvt_rank.h"
#include "replay/kvt_replay_config.h"
#include "kvtier/kvt_config.h"
#include "kvt_cli.h"
#include "kvt_cmd.h"

//  Exactly `digits` hex digits into *out (big-endian text); 0 or -1.
static int s_hex(const char *s, size_t digits, uint64_t *out)
{
    if (strlen(s) != digits)
        return -1;
    *out = 0;
    for (size_t i = 0; i < digits; i++) {
        int c = s[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return -1;
        *out = *out << 4 | (uint64_t)d;
    }
    return 0;
}

static void s_usage(FILE *out)
{
    fprintf(
        out,
        "usage: kvtier rank --rank R --world N --engine ENDPOINT [options]\n"
        "  --rank R           this process's rank, 0..N-1\n"
        "  --world N          ranks of the run (the replay's --tp; the setting tp)\n"
        "  --engine ENDPOINT  ipc://DIR (actor NAME at ipc://DIR/NAME) or tcp://HOST:PORT\n"
        "                     (topology actor i at HOST:PORT+i: engine, scheduler,\n"
        "                     aggregator, runner.0, worker.0, runner.1, ...)\n"
        "  --engine-pid PID   the engine's process, this one's parent: exit when it is gone\n"
        "  --connect-timeout MS  exit when the engine is not reached within MS (default 10000)\n"
        "  --namespace HEX32  the run's namespace (the engine's); --layout-id HEX16 the\n"
        "                     id its disk directories record (default: each derived by\n"
        "                     the configuration from this rank's own settings)\n"
        "  --fault corrupt-resume=N  as for kvtier replay\n"
        "  --with-metrics     the engine runs a metrics collector (topology actor 3 + 2N,\n"
        "                     `metrics`): its Stats requests are answered\n"
        "  --config FILE      settings from a YAML file (KVTIER_* and flags override it)\n"
        "  --SETTING VALUE    any setting of the configuration, as for kvtier replay\n"
        "                     (docs/configuration.md); those a rank uses: --seed,\n"
        "                     --log-level, --hbm-pool, --cpu-pool, --disk-dir, --disk-pool,\n"
        "                     --disk-write, --remote, --curve-secret-key,\n"
        "                     --curve-public-keys, --curve-server-key, --model, --layers,\n"
        "                     --planes,\n"
        "                     --token-bytes,\n"
        "                     --block-size, --chunk-size, --state-bytes,\n"
        "                     --checkpoint-interval, --max-running, --evict-order, and the\n"
        "                     data path's\n"
        "                     --lookup-ttl, --lane-deadline, --fence-timeout, --pool-ttl\n"
        "                     (durations with a unit: 5s, 250ms); they must match the\n"
        "                     engine's\n"
        "Exit status: 0 stopped by SIGTERM/SIGINT with a quiescent pool; 1 set-up failed;\n"
        "2 bad usage; 3 stopped but not quiescent or an actor erred; 4 the engine went\n"
        "away (its connection closed, its process exited, or it was never reached).\n");
}

//  The rank's own flags (what names this process in the run), parsed into
//  pc; every other flag is a setting of the configuration, handed to ld.
//  Returns 0, 1 after --help, or 2 with the message printed.
static int s_parse(int argc, char **argv, kvt_rank_proc_cfg_t *pc, kvt_config_loader_t *ld,
                   bool *have_rank, bool *have_world, kvt_hash_t *ns, uint64_t *layout_id)
{
    char err[1400];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool is_bool;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            s_usage(stdout);
            return 1;
        }
        if (!strcmp(a, "--with-metrics")) {
            pc->metrics = true;
            continue;
        }
        if (strncmp(a, "--", 2) == 0 && kvt_config_has_key(a, &is_bool)) {
            //  A setting of the configuration: --x V, --x=V, or a boolean alone.
            const char *v = NULL;
            if (!strchr(a, '=') && !is_bool) {
                if (i + 1 >= argc) {
                    fprintf(stderr, "kvtier rank: %s needs a value (see --help)\n", a);
                    return 2;
                }
                v = argv[++i];
            }
            if (kvt_config_loader_flag(ld, a, v, err, sizeof err) != 0) {
                fprintf(stderr, "kvtier rank: %s\n", err);
                return 2;
            }
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "kvtier rank: %s needs a value (see --help)\n", a);
            return 2;
        }
        const char *v = argv[++i];
        uint64_t n = 0;
        int rc = 0;
        if (!strcmp(a, "--rank")) {
            if ((rc = kvt_cli_uint(v, 0, 63, &n)) == 0)
                pc->rank = (uint32_t)n, *have_rank = true;
        } else if (!strcmp(a, "--world")) {
            //  The run's tp: the configuration's setting, under the rank's name.
            if (kvt_config_loader_flag(ld, "tp", v, err, sizeof err) != 0) {
                fprintf(stderr, "kvtier rank: --world: %s\n", err);
                return 2;
            }
            *have_world = true;
        } else if (!strcmp(a, "--engine"))
            pc->engine = v;
        else if (!strcmp(a, "--engine-pid")) {
            if ((rc = kvt_cli_uint(v, 1, INT32_MAX, &n)) == 0)
                pc->engine_pid = (int)n;
        } else if (!strcmp(a, "--connect-timeout")) {
            if ((rc = kvt_cli_uint(v, 1, UINT32_MAX, &n)) == 0)
                pc->connect_timeout_ms = (uint32_t)n;
        } else if (!strcmp(a, "--config")) {
            if (kvt_config_loader_file(ld, v, err, sizeof err) != 0) {
                fprintf(stderr, "kvtier rank: --config: %s\n", err);
                return 2;
            }
        } else if (!strcmp(a, "--namespace")) {
            //  Zero means "derive one": never a value given.
            rc = strlen(v) == 32 ? 0 : -1;
            char hi[17];
            snprintf(hi, sizeof hi, "%.16s", v);
            if (rc == 0 && (s_hex(hi, 16, &ns->hi) != 0 || s_hex(v + 16, 16, &ns->lo) != 0 ||
                            kvt_hash_is_zero(*ns)))
                rc = -1;
        } else if (!strcmp(a, "--layout-id"))
            rc = s_hex(v, 16, layout_id) != 0 || *layout_id == 0 ? -1 : 0;
        else if (!strcmp(a, "--fault")) {
            const char *key = "corrupt-resume=";
            if (strncmp(v, key, strlen(key)) != 0 ||
                kvt_cli_uint(v + strlen(key), 1, UINT32_MAX, &n) != 0)
                rc = -1;
            else
                pc->cfg.fault_corrupt_resume = (uint32_t)n;
        } else {
            fprintf(stderr, "kvtier rank: unknown option '%s' (see --help)\n", a);
            return 2;
        }
        if (rc != 0) {
            fprintf(stderr, "kvtier rank: %s: bad value '%s'\n", a, v);
            return 2;
        }
    }
    if (kvt_config_loader_env(ld, NULL, err, sizeof err) != 0) {
        fprintf(stderr, "kvtier rank: %s\n", err);
        return 2;
    }
    return 0;
}

int kvt_cmd_rank(int argc, char **argv)
{
    kvt_rank_proc_cfg_t pc;
    memset(&pc, 0, sizeof pc);
    bool have_rank = false, have_world = false;
    kvt_hash_t ns = {0, 0};
    uint64_t layout_id = 0;
    char err[1400], ep[128];
    kvt_config_t kc; //  pc.cfg points at its strings for the whole run
    kvt_config_loader_t *ld = kvt_config_loader_new();
    if (!ld) {
        fprintf(stderr, "kvtier rank: out of memory\n");
        return 1;
    }
    int rc = s_parse(argc, argv, &pc, ld, &have_rank, &have_world, &ns, &layout_id);
    uint32_t fault = pc.cfg.fault_corrupt_resume; //  the rank's own: from_config resets cfg
    if (rc == 0 && (!have_rank || !have_world || !pc.engine)) {
        fprintf(stderr, "kvtier rank: %s is required (see --help)\n",
                !have_rank    ? "--rank"
                : !have_world ? "--world"
                              : "--engine");
        rc = 2;
    }
    //  Every setting defined, defaulted and checked once, by the table.
    if (rc == 0 && kvt_config_loader_build(ld, &kc, NULL, NULL, err, sizeof err) != 0) {
        fprintf(stderr, "kvtier rank: %s\n", err);
        rc = 2;
    }
    kvt_config_loader_destroy(&ld);
    if (rc != 0)
        return rc == 1 ? 0 : rc;
    if (kvt_replay_from_config(&kc, &pc.cfg, err, sizeof err) != 0) {
        fprintf(stderr, "kvtier rank: %s\n", err);
        return 2;
    }
    pc.cfg.driver = KVT_DRIVER_LIVE;
    pc.cfg.fault_corrupt_resume = fault;
    //  What the engine derived wins over what this rank's settings give.
    if (!kvt_hash_is_zero(ns))
        pc.cfg.ns = ns;
    if (layout_id)
        pc.cfg.layout_id = layout_id;
    if (pc.rank >= pc.cfg.tp) {
        fprintf(stderr, "kvtier rank: --rank %u is not below --world %u\n", pc.rank, pc.cfg.tp);
        return 2;
    }
    if (kvt_rank_endpoint(pc.engine, KVT_RANK_TOPO_WORKER(pc.cfg.tp - 1), "scheduler", ep,
                          sizeof ep) != 0) {
        fprintf(stderr,
                "kvtier rank: --engine '%s': expected ipc://DIR (under 80 bytes) or "
                "tcp://HOST:PORT with room for %u ports\n",
                pc.engine, 3 + 2 * pc.cfg.tp);
        return 2;
    }
    if (kvt_replay_validate(&pc.cfg, err, sizeof err) != 0) {
        fprintf(stderr, "kvtier rank: %s\n", err);
        return 2;
    }
    int status = kvt_rank_process_run(&pc, err, sizeof err);
    if (status != KVT_RANK_EXIT_OK)
        fprintf(stderr, "kvtier rank %u: %s\n", pc.rank, err);
    return status;
}
