/*  kvt_test_redis — a private Redis Cluster for a test: N masters (and
    optionally one replica each) on free loopback ports, in a temporary
    directory, slots assigned with CLUSTER ADDSLOTSRANGE and joined with
    CLUSTER MEET. The servers die with the test process (parent-death
    signal) and kvt_tredis_stop kills them and removes the directory. Test
    code: it asserts (Criterion). */
#ifndef KVT_TEST_REDIS_H_INCLUDED
#define KVT_TEST_REDIS_H_INCLUDED

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <sys/types.h>

#define KVT_TREDIS_MAX 8 //  nodes a test cluster holds

typedef struct {
    int n;                       //  nodes (masters first, then replicas)
    int masters;                 //  masters
    int port[KVT_TREDIS_MAX];    //  client ports
    pid_t pid[KVT_TREDIS_MAX];   //  server processes (0: stopped)
    char id[KVT_TREDIS_MAX][48]; //  node ids
    char dir[128];               //  working directory
    char seeds[256];             //  "redis://127.0.0.1:P,127.0.0.1:Q"
} kvt_tredis_t;

//  True when redis-server is on PATH; otherwise the caller skips.
bool kvt_tredis_available(void);

//  Starts masters (each with `replicas` replicas, 0 or 1) and waits until
//  every node says cluster_state:ok.
void kvt_tredis_start(kvt_tredis_t *r, int masters, int replicas);

//  Kills every server and removes the directory (safe to call twice).
void kvt_tredis_stop(kvt_tredis_t *r);

//  Kills node i (SIGKILL) and reaps it.
void kvt_tredis_kill(kvt_tredis_t *r, int i);

//  A fresh connection to node i (the caller frees it).
redisContext *kvt_tredis_conn(const kvt_tredis_t *r, int i);

//  Runs a command on node i and returns its reply (the caller frees it);
//  asserts that the connection answered.
redisReply *kvt_tredis_cmd(const kvt_tredis_t *r, int i, const char *fmt, ...);

//  The node (index) that owns slot, asked of node `ask`; -1 if none.
int kvt_tredis_owner(const kvt_tredis_t *r, int ask, int slot);

#endif
