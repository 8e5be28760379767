/*  kvtier rank — runs one rank of a replay (runner, worker, its tier) as
    this process, talking to the engine's actors at ENDPOINT: ipc://DIR
    (same host; actor NAME at ipc://DIR/NAME) or tcp://HOST:PORT (topology
    actor i at HOST:PORT+i). `kvtier replay --ranks-as-processes` starts
    these itself; the settings must match the engine's (geometry, tiers,
    world size), since both sides derive the namespace and the topology
    from them. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay/kvt_rank.h"
#include "kvt_cli.h"
#include "kvt_cmd.h"

//  Exactly `digits` hex digits into *out (big-endian text); 0 or -1.
#define S_MS   1000000ull       //  ns: the configuration's timeout bounds are 1 ms ..
#define S_SEC  1000000000ull    //  ..
#define S_HOUR 3600000000000ull //  .. 1 h

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
        "  --world N          ranks of the run (the replay's --tp)\n"
        "  --engine ENDPOINT  ipc://DIR (actor NAME at ipc://DIR/NAME) or tcp://HOST:PORT\n"
        "                     (topology actor i at HOST:PORT+i: engine, scheduler,\n"
        "                     aggregator, runner.0, worker.0, runner.1, ...)\n"
        "  --engine-pid PID   the engine's process, this one's parent: exit when it is gone\n"
        "  --connect-timeout MS  exit when the engine is not reached within MS (default 10000)\n"
        "  --seed S, --log-level N, --hbm-pool SIZE, --cpu-pool SIZE, --disk-dir DIR,\n"
        "  --disk-pool SIZE, --disk-write always|evict, --layers N, --planes N,\n"
        "  --token-bytes N, --block-size N, --chunk-size N, --fault corrupt-resume=N\n"
        "                     as for kvtier replay (they must match the engine's)\n"
        "  --state-bytes N, --max-running N  a hybrid model's state lane: bytes of one\n"
        "                     state image per rank, and the requests the slot and\n"
        "                     checkpoint pools are sized for\n"
        "  --namespace HEX32  the run's namespace (kvt_config's); --layout-id HEX16 the\n"
        "                     id its disk directories record (default: from the geometry)\n"
        "  --lookup-ttl NS, --lane-deadline NS, --fence-timeout NS, --pool-ttl NS\n"
        "                     the data path's timeouts, in ns, 1 ms .. 1 h (default: each\n"
        "                     one's own; fence > lane deadline, lookup ttl < pool ttl)\n"
        "Exit status: 0 stopped by SIGTERM/SIGINT with a quiescent pool; 1 set-up failed;\n"
        "2 bad usage; 3 stopped but not quiescent or an actor erred; 4 the engine went\n"
        "away (its connection closed, its process exited, or it was never reached).\n");
}

int kvt_cmd_rank(int argc, char **argv)
{
    kvt_rank_proc_cfg_t pc;
    memset(&pc, 0, sizeof pc);
    kvt_replay_defaults(&pc.cfg);
    pc.cfg.driver = KVT_DRIVER_LIVE;
    bool have_rank = false, have_world = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            s_usage(stdout);
            return 0;
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
                pc.rank = (uint32_t)n, have_rank = true;
        } else if (!strcmp(a, "--world")) {
            if ((rc = kvt_cli_uint(v, 1, 64, &n)) == 0)
                pc.cfg.tp = (uint32_t)n, have_world = true;
        } else if (!strcmp(a, "--engine"))
            pc.engine = v;
        else if (!strcmp(a, "--engine-pid")) {
            if ((rc = kvt_cli_uint(v, 1, INT32_MAX, &n)) == 0)
                pc.engine_pid = (int)n;
        } else if (!strcmp(a, "--connect-timeout")) {
            if ((rc = kvt_cli_uint(v, 1, UINT32_MAX, &n)) == 0)
                pc.connect_timeout_ms = (uint32_t)n;
        } else if (!strcmp(a, "--seed"))
            rc = kvt_cli_uint(v, 0, UINT64_MAX, &pc.cfg.seed);
        else if (!strcmp(a, "--log-level")) {
            if ((rc = kvt_cli_uint(v, 0, 3, &n)) == 0)
                pc.cfg.log_level = (int)n;
        } else if (!strcmp(a, "--hbm-pool"))
            rc = kvt_cli_size(v, &pc.cfg.hbm_pool_bytes);
        else if (!strcmp(a, "--cpu-pool"))
            rc = kvt_cli_size(v, &pc.cfg.cpu_pool_bytes);
        else if (!strcmp(a, "--disk-dir"))
            pc.cfg.disk_dir = v;
        else if (!strcmp(a, "--disk-pool"))
            rc = kvt_cli_size(v, &pc.cfg.disk_pool_bytes);
        else if (!strcmp(a, "--disk-write")) {
            if (!strcmp(v, "always"))
                pc.cfg.disk_write_on_evict = false;
            else if (!strcmp(v, "evict"))
                pc.cfg.disk_write_on_evict = true;
            else
                rc = -1;
        } else if (!strcmp(a, "--layers")) {
            if ((rc = kvt_cli_uint(v, 1, 1024, &n)) == 0)
                pc.cfg.layers = (uint32_t)n;
        } else if (!strcmp(a, "--planes")) {
            if ((rc = kvt_cli_uint(v, 1, 8, &n)) == 0)
                pc.cfg.planes = (uint32_t)n;
        } else if (!strcmp(a, "--token-bytes")) {
            if ((rc = kvt_cli_uint(v, 1, 1u << 20, &n)) == 0)
                pc.cfg.token_bytes = (uint32_t)n;
        } else if (!strcmp(a, "--block-size")) {
            if ((rc = kvt_cli_uint(v, 1, 1024, &n)) == 0)
                pc.cfg.block_size = (uint32_t)n;
        } else if (!strcmp(a, "--chunk-size")) {
            if ((rc = kvt_cli_uint(v, 1, 1u << 20, &n)) == 0)
                pc.cfg.chunk_size = (uint32_t)n;
        } else if (!strcmp(a, "--state-bytes"))
            rc = kvt_cli_uint(v, 1, 1ull << 32, &pc.cfg.state_bytes);
        else if (!strcmp(a, "--max-running")) {
            if ((rc = kvt_cli_uint(v, 1, 4096, &n)) == 0)
                pc.cfg.max_running = (uint32_t)n;
        } else if (!strcmp(a, "--namespace")) {
            rc = strlen(v) == 32 ? 0 : -1;
            char hi[17];
            snprintf(hi, sizeof hi, "%.16s", v);
            if (rc == 0 && (s_hex(hi, 16, &pc.cfg.ns.hi) != 0 ||
                            s_hex(v + 16, 16, &pc.cfg.ns.lo) != 0 || kvt_hash_is_zero(pc.cfg.ns)))
                rc = -1;
        } else if (!strcmp(a, "--layout-id"))
            rc = s_hex(v, 16, &pc.cfg.layout_id) != 0 || pc.cfg.layout_id == 0 ? -1 : 0;
        else if (!strcmp(a, "--lookup-ttl"))
            rc = kvt_cli_uint(v, S_MS, S_HOUR, &pc.cfg.lookup_ttl_ns);
        else if (!strcmp(a, "--lane-deadline"))
            rc = kvt_cli_uint(v, S_MS, S_HOUR, &pc.cfg.lane_deadline_ns);
        else if (!strcmp(a, "--fence-timeout"))
            rc = kvt_cli_uint(v, S_MS, S_HOUR, &pc.cfg.fence_timeout_ns);
        else if (!strcmp(a, "--pool-ttl"))
            rc = kvt_cli_uint(v, S_MS, S_HOUR, &pc.cfg.pool_ttl_ns);
        else if (!strcmp(a, "--fault")) {
            const char *key = "corrupt-resume=";
            if (strncmp(v, key, strlen(key)) != 0 ||
                kvt_cli_uint(v + strlen(key), 1, UINT32_MAX, &n) != 0)
                rc = -1;
            else
                pc.cfg.fault_corrupt_resume = (uint32_t)n;
        } else {
            fprintf(stderr, "kvtier rank: unknown option '%s' (see --help)\n", a);
            return 2;
        }
        if (rc != 0) {
            fprintf(stderr, "kvtier rank: %s: bad value '%s'\n", a, v);
            return 2;
        }
    }
    //  The configuration's cross-field rules, with the defaults standing in
    //  for a timeout not given.
    uint64_t lane = pc.cfg.lane_deadline_ns ? pc.cfg.lane_deadline_ns : 2 * S_SEC;
    uint64_t fence = pc.cfg.fence_timeout_ns ? pc.cfg.fence_timeout_ns : 5 * S_SEC;
    uint64_t lttl = pc.cfg.lookup_ttl_ns ? pc.cfg.lookup_ttl_ns : 5 * S_SEC;
    uint64_t pttl = pc.cfg.pool_ttl_ns ? pc.cfg.pool_ttl_ns : 60 * S_SEC;
    if (fence <= lane) {
        fprintf(stderr,
                "kvtier rank: --fence-timeout (%" PRIu64 " ns) must exceed --lane-deadline "
                "(%" PRIu64 " ns)\n",
                fence, lane);
        return 2;
    }
    if (lttl >= pttl) {
        fprintf(stderr,
                "kvtier rank: --lookup-ttl (%" PRIu64 " ns) must be below --pool-ttl "
                "(%" PRIu64 " ns)\n",
                lttl, pttl);
        return 2;
    }
    if (!have_rank || !have_world || !pc.engine) {
        fprintf(stderr, "kvtier rank: %s is required (see --help)\n",
                !have_rank    ? "--rank"
                : !have_world ? "--world"
                              : "--engine");
        return 2;
    }
    if (pc.rank >= pc.cfg.tp) {
        fprintf(stderr, "kvtier rank: --rank %u is not below --world %u\n", pc.rank, pc.cfg.tp);
        return 2;
    }
    char err[512] = "", ep[128];
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
