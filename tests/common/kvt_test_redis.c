/*  kvt_test_redis — see kvt_test_redis.h. */
#include "common/kvt_test_redis.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

bool kvt_tredis_available(void)
{
    return system("command -v redis-server >/dev/null 2>&1") == 0;
}

static void s_sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

//  Whether a TCP port on 127.0.0.1 can be bound now.
static bool s_port_free(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return false;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

//  A client port whose cluster bus port (+10000) is free too.
static int s_pick_port(unsigned *seed)
{
    for (int tries = 0; tries < 1000; tries++) {
        int p = 20000 + (int)(rand_r(seed) % 25000);
        if (s_port_free(p) && s_port_free(p + 10000))
            return p;
    }
    cr_assert_fail("no free loopback port pair");
    return -1;
}

static pid_t s_spawn(const kvt_tredis_t *r, int port)
{
    char sport[16], conf[64], log[200];
    snprintf(sport, sizeof sport, "%d", port);
    snprintf(conf, sizeof conf, "nodes-%d.conf", port);
    snprintf(log, sizeof log, "%s/redis-%d.log", r->dir, port);
    pid_t parent = getpid();
    pid_t pid = fork();
    cr_assert_geq(pid, 0, "fork");
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); //  never outlive the test
        if (getppid() != parent)
            _exit(1);
        FILE *f = freopen(log, "w", stdout);
        (void)f;
        dup2(1, 2);
        execlp("redis-server", "redis-server", "--port", sport, "--bind", "127.0.0.1",
               "--cluster-enabled", "yes", "--cluster-config-file", conf, "--dir", r->dir, "--save",
               "", "--appendonly", "no", "--cluster-node-timeout", "1000", "--protected-mode", "no",
               "--daemonize", "no", (char *)NULL);
        _exit(127);
    }
    return pid;
}

redisContext *kvt_tredis_conn(const kvt_tredis_t *r, int i)
{
    struct timeval tv = {.tv_sec = 2};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", r->port[i], tv);
    if (c && !c->err)
        redisSetTimeout(c, tv);
    return c;
}

redisReply *kvt_tredis_cmd(const kvt_tredis_t *r, int i, const char *fmt, ...)
{
    redisContext *c = kvt_tredis_conn(r, i);
    cr_assert(c && !c->err, "node %d (port %d) unreachable", i, r->port[i]);
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = redisvCommand(c, fmt, ap);
    va_end(ap);
    cr_assert_not_null(rep, "node %d: %s: no reply", i, fmt);
    redisFree(c);
    return rep;
}

//  Node i answers PING (and is still running).
static bool s_up(kvt_tredis_t *r, int i)
{
    redisContext *c = kvt_tredis_conn(r, i);
    bool ok = false;
    if (c && !c->err) {
        redisReply *rep = redisCommand(c, "PING");
        ok = rep && rep->type == REDIS_REPLY_STATUS;
        freeReplyObject(rep);
    }
    if (c)
        redisFree(c);
    return ok;
}

//  Whether CLUSTER INFO of node i says state ok and `known` nodes.
static bool s_cluster_ok(const kvt_tredis_t *r, int i, int known)
{
    redisReply *rep = kvt_tredis_cmd(r, i, "CLUSTER INFO");
    char want[64];
    snprintf(want, sizeof want, "cluster_known_nodes:%d\r", known);
    bool ok = rep->type == REDIS_REPLY_STRING;
    ok = ok && strstr(rep->str, "cluster_state:ok") && strstr(rep->str, want);
    freeReplyObject(rep);
    return ok;
}

void kvt_tredis_start(kvt_tredis_t *r, int masters, int replicas)
{
    memset(r, 0, sizeof *r);
    cr_assert(masters >= 1 && replicas >= 0 && replicas <= 1 &&
              masters * (1 + replicas) <= KVT_TREDIS_MAX);
    r->masters = masters;
    r->n = masters * (1 + replicas);
    snprintf(r->dir, sizeof r->dir, "/tmp/kvt-redis-%d-XXXXXX", (int)getpid());
    cr_assert_not_null(mkdtemp(r->dir), "mkdtemp");
    unsigned seed = (unsigned)getpid() * 2654435761u ^ (unsigned)time(NULL);
    for (int i = 0; i < r->n; i++) {
        bool up = false;
        for (int attempt = 0; attempt < 5 && !up; attempt++) {
            r->port[i] = s_pick_port(&seed);
            r->pid[i] = s_spawn(r, r->port[i]);
            for (int w = 0; w < 200 && !up; w++) {
                int st;
                if (waitpid(r->pid[i], &st, WNOHANG) == r->pid[i]) { //  lost a port race
                    r->pid[i] = 0;
                    break;
                }
                up = s_up(r, i);
                if (!up)
                    s_sleep_ms(10);
            }
        }
        cr_assert(up, "redis-server on port %d did not start (see %s)", r->port[i], r->dir);
        redisReply *rep = kvt_tredis_cmd(r, i, "CLUSTER MYID");
        cr_assert_eq(rep->type, REDIS_REPLY_STRING);
        snprintf(r->id[i], sizeof r->id[i], "%s", rep->str);
        freeReplyObject(rep);
    }
    for (int m = 0; m < masters; m++) {
        int lo = m * 16384 / masters, hi = (m + 1) * 16384 / masters - 1;
        redisReply *rep = kvt_tredis_cmd(r, m, "CLUSTER ADDSLOTSRANGE %d %d", lo, hi);
        cr_assert_eq(rep->type, REDIS_REPLY_STATUS, "ADDSLOTSRANGE: %s", rep->str);
        freeReplyObject(rep);
    }
    for (int i = 1; i < r->n; i++) {
        redisReply *rep = kvt_tredis_cmd(r, 0, "CLUSTER MEET 127.0.0.1 %d", r->port[i]);
        freeReplyObject(rep);
    }
    //  Replicas attach once they know their master.
    for (int i = masters; i < r->n; i++) {
        int m = i - masters;
        bool ok = false;
        for (int w = 0; w < 500 && !ok; w++) {
            redisReply *rep = kvt_tredis_cmd(r, i, "CLUSTER REPLICATE %s", r->id[m]);
            ok = rep->type == REDIS_REPLY_STATUS;
            freeReplyObject(rep);
            if (!ok)
                s_sleep_ms(10);
        }
        cr_assert(ok, "node %d could not replicate node %d", i, m);
    }
    int p = 0;
    for (int i = 0; i < r->n; i++) {
        bool ok = false;
        for (int w = 0; w < 1000 && !ok; w++) {
            ok = s_cluster_ok(r, i, r->n);
            if (!ok)
                s_sleep_ms(10);
        }
        cr_assert(ok, "node %d: the cluster did not become ok", i);
        if (i < masters)
            p += snprintf(r->seeds + p, sizeof r->seeds - (size_t)p, "%s127.0.0.1:%d",
                          i ? "," : "redis://", r->port[i]);
    }
}

void kvt_tredis_kill(kvt_tredis_t *r, int i)
{
    if (r->pid[i] > 0) {
        kill(r->pid[i], SIGKILL);
        waitpid(r->pid[i], NULL, 0);
        r->pid[i] = 0;
    }
}

void kvt_tredis_stop(kvt_tredis_t *r)
{
    for (int i = 0; i < r->n; i++)
        kvt_tredis_kill(r, i);
    if (r->dir[0]) {
        char cmd[200];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", r->dir);
        if (system(cmd) != 0)
            fprintf(stderr, "kvt_tredis_stop: could not remove %s\n", r->dir);
        r->dir[0] = 0;
    }
}

int kvt_tredis_owner(const kvt_tredis_t *r, int ask, int slot)
{
    redisReply *rep = kvt_tredis_cmd(r, ask, "CLUSTER SLOTS");
    int owner = -1;
    for (size_t e = 0; rep->type == REDIS_REPLY_ARRAY && e < rep->elements; e++) {
        redisReply *x = rep->element[e];
        if (x->element[0]->integer <= slot && slot <= x->element[1]->integer) {
            int port = (int)x->element[2]->element[1]->integer;
            for (int i = 0; i < r->n; i++)
                if (r->port[i] == port)
                    owner = i;
        }
    }
    freeReplyObject(rep);
    return owner;
}
