/*  kvt_rcluster.c — a Redis Cluster client over hiredis: slots, the slot
    map, redirects, pipelined batches. See kvt_rcluster.h. */
#include "kvt_rcluster.h"

#include <assert.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_NONE UINT16_MAX //  "no node" in the slot map

typedef struct {
    char host[64];   //  address as the cluster announces it
    int port;        //  its client port
    char addr[80];   //  "host:port"
    redisContext *c; //  the one connection, or NULL until first used / after it broke
} s_node_t;

struct _kvt_rcluster_t {
    kvt_rcluster_config_t cfg;        //  settings
    s_node_t *nodes;                  //  every node seen (seeds first)
    uint32_t nnodes;                  //  their number
    uint16_t slot_node[KVT_RC_SLOTS]; //  slot → node index, S_NONE if unowned
    bool stale;                       //  a redirect or a broken connection asks for a refresh
    bool *broken;                     //  per node, scratch of one round: its send failed
    kvt_rcluster_stats_t st;          //  counters
};

//  Per-command routing of one exec.
typedef struct {
    uint16_t slot; //  the key's slot
    uint16_t node; //  where it goes this round
    uint16_t ask;  //  ASK target for the next round, S_NONE if none
    bool asking;   //  this round sends ASKING first
    bool todo;     //  still to send
} s_route_t;

void kvt_rcluster_config_defaults(kvt_rcluster_config_t *cfg)
{
    assert(cfg);
    cfg->connect_timeout_ms = 500;
    cfg->io_timeout_ms = 1000;
    cfg->max_redirects = 5;
    cfg->max_nodes = 64;
}

// ---------------------------------------------------------------- slots --

static uint16_t s_crc16(const unsigned char *p, size_t n)
{
    uint16_t crc = 0;
    for (size_t i = 0; i < n; i++) {
        crc ^= (uint16_t)(p[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

uint16_t kvt_rcluster_slot(const void *key, size_t len)
{
    const unsigned char *k = key;
    size_t open = 0;
    while (open < len && k[open] != '{')
        open++;
    if (open < len) {
        size_t close = open + 1;
        while (close < len && k[close] != '}')
            close++;
        if (close < len && close > open + 1) //  a non-empty tag: only it is hashed
            return s_crc16(k + open + 1, close - open - 1) & (KVT_RC_SLOTS - 1);
    }
    return s_crc16(k, len) & (KVT_RC_SLOTS - 1);
}

// ---------------------------------------------------------------- nodes --

//  Index of host:port, added when absent (S_NONE when the table is full).
static uint16_t s_node(kvt_rcluster_t *self, const char *host, size_t hostlen, int port)
{
    if (hostlen >= sizeof self->nodes[0].host || port <= 0 || port > 65535)
        return S_NONE;
    for (uint32_t i = 0; i < self->nnodes; i++) {
        s_node_t *n = &self->nodes[i];
        if (n->port == port && strlen(n->host) == hostlen && memcmp(n->host, host, hostlen) == 0)
            return (uint16_t)i;
    }
    if (self->nnodes >= self->cfg.max_nodes)
        return S_NONE;
    s_node_t *n = &self->nodes[self->nnodes];
    memcpy(n->host, host, hostlen);
    n->host[hostlen] = 0;
    n->port = port;
    snprintf(n->addr, sizeof n->addr, "%s:%d", n->host, port);
    n->c = NULL;
    return (uint16_t)self->nnodes++;
}

//  "host:port" → node index (S_NONE if malformed or the table is full).
static uint16_t s_node_addr(kvt_rcluster_t *self, const char *s, size_t len)
{
    size_t colon = len;
    while (colon > 0 && s[colon - 1] != ':')
        colon--;
    if (colon == 0 || colon == len || colon - 1 == 0)
        return S_NONE;
    int port = 0;
    for (size_t i = colon; i < len; i++) {
        if (s[i] < '0' || s[i] > '9' || port > 65535)
            return S_NONE;
        port = port * 10 + (s[i] - '0');
    }
    return s_node(self, s, colon - 1, port);
}

static void s_drop(kvt_rcluster_t *self, uint16_t idx)
{
    s_node_t *n = &self->nodes[idx];
    if (n->c) {
        redisFree(n->c);
        n->c = NULL;
    }
    self->stale = true;
}

//  The node's connection, opened if needed; NULL when it cannot be reached.
static redisContext *s_conn(kvt_rcluster_t *self, uint16_t idx)
{
    s_node_t *n = &self->nodes[idx];
    if (n->c)
        return n->c;
    struct timeval ct = {.tv_sec = self->cfg.connect_timeout_ms / 1000,
                         .tv_usec = (self->cfg.connect_timeout_ms % 1000) * 1000};
    redisContext *c = redisConnectWithTimeout(n->host, n->port, ct);
    if (!c || c->err) {
        if (c)
            redisFree(c);
        self->st.conn_errors++;
        self->stale = true;
        return NULL;
    }
    struct timeval io = {.tv_sec = self->cfg.io_timeout_ms / 1000,
                         .tv_usec = (self->cfg.io_timeout_ms % 1000) * 1000};
    redisSetTimeout(c, io);
    n->c = c;
    self->st.connects++;
    return c;
}

// ------------------------------------------------------------- slot map --

//  Parses a CLUSTER SLOTS reply into map; the queried node's host stands
//  for an empty announced host. 0, or -1 when the reply is malformed.
static int s_parse_slots(kvt_rcluster_t *self, const redisReply *r, uint16_t asked, uint16_t *map)
{
    if (r->type != REDIS_REPLY_ARRAY)
        return -1;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
            e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER || e->element[2]->type != REDIS_REPLY_ARRAY)
            return -1;
        long long lo = e->element[0]->integer, hi = e->element[1]->integer;
        const redisReply *m = e->element[2];
        if (lo < 0 || hi < lo || hi >= KVT_RC_SLOTS || m->elements < 2 ||
            m->element[0]->type != REDIS_REPLY_STRING || m->element[1]->type != REDIS_REPLY_INTEGER)
            return -1;
        const char *host = m->element[0]->str;
        size_t hostlen = m->element[0]->len;
        if (hostlen == 0 || (hostlen == 1 && host[0] == '?')) {
            host = self->nodes[asked].host;
            hostlen = strlen(host);
        }
        uint16_t idx = s_node(self, host, hostlen, (int)m->element[1]->integer);
        if (idx == S_NONE)
            return -1;
        for (long long s = lo; s <= hi; s++)
            map[s] = idx;
    }
    return 0;
}

int kvt_rcluster_refresh(kvt_rcluster_t *self)
{
    assert(self);
    uint16_t *map = malloc(sizeof self->slot_node);
    if (!map) {
        self->st.refresh_fail++;
        return -1;
    }
    int rc = -1;
    //  Nodes may be added while parsing; the loop sees them too.
    for (uint32_t i = 0; rc != 0 && i < self->nnodes; i++) {
        redisContext *c = s_conn(self, (uint16_t)i);
        if (!c)
            continue;
        redisReply *r = redisCommand(c, "CLUSTER SLOTS");
        if (!r) {
            self->st.conn_errors++;
            s_drop(self, (uint16_t)i);
            continue;
        }
        for (size_t s = 0; s < KVT_RC_SLOTS; s++)
            map[s] = S_NONE;
        if (s_parse_slots(self, r, (uint16_t)i, map) == 0 && r->elements > 0)
            rc = 0;
        freeReplyObject(r);
    }
    if (rc == 0) {
        memcpy(self->slot_node, map, sizeof self->slot_node);
        self->stale = false;
        self->st.refreshes++;
    } else {
        self->st.refresh_fail++;
    }
    free(map);
    return rc;
}

// ------------------------------------------------------------- creation --

kvt_rcluster_t *kvt_rcluster_new(const char *seeds, const kvt_rcluster_config_t *cfg, char *err,
                                 size_t errlen)
{
    kvt_rcluster_t *self = calloc(1, sizeof *self);
    if (!self) {
        snprintf(err, errlen, "remote: out of memory");
        return NULL;
    }
    if (cfg)
        self->cfg = *cfg;
    else
        kvt_rcluster_config_defaults(&self->cfg);
    if (self->cfg.max_nodes == 0 || self->cfg.max_nodes >= S_NONE) {
        snprintf(err, errlen, "remote: max_nodes=%u: must be 1..%u", self->cfg.max_nodes,
                 S_NONE - 1);
        goto cleanup;
    }
    self->nodes = calloc(self->cfg.max_nodes, sizeof *self->nodes);
    self->broken = calloc(self->cfg.max_nodes, sizeof *self->broken);
    if (!self->nodes || !self->broken) {
        snprintf(err, errlen, "remote: out of memory");
        goto cleanup;
    }
    for (size_t s = 0; s < KVT_RC_SLOTS; s++)
        self->slot_node[s] = S_NONE;
    const char *p = seeds ? seeds : "";
    if (strncmp(p, "redis://", 8) == 0)
        p += 8;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (s_node_addr(self, p, len) == S_NONE) {
            snprintf(err, errlen, "remote=%s: seed '%.*s' is not HOST:PORT", seeds, (int)len, p);
            goto cleanup;
        }
        p += len;
        if (*p == ',')
            p++;
    }
    if (self->nnodes == 0) {
        snprintf(err, errlen, "remote=%s: no seed node (HOST:PORT[,HOST:PORT...])",
                 seeds ? seeds : "");
        goto cleanup;
    }
    if (kvt_rcluster_refresh(self) != 0) {
        snprintf(err, errlen, "remote=%s: no seed node answered CLUSTER SLOTS with a slot map",
                 seeds);
        goto cleanup;
    }
    return self;

cleanup:
    kvt_rcluster_destroy(&self);
    return NULL;
}

void kvt_rcluster_destroy(kvt_rcluster_t **self_p)
{
    assert(self_p);
    kvt_rcluster_t *self = *self_p;
    if (!self)
        return;
    for (uint32_t i = 0; self->nodes && i < self->nnodes; i++)
        if (self->nodes[i].c)
            redisFree(self->nodes[i].c);
    free(self->nodes);
    free(self->broken);
    free(self);
    *self_p = NULL;
}

const char *kvt_rcluster_node_of(kvt_rcluster_t *self, uint16_t slot)
{
    assert(self);
    if (slot >= KVT_RC_SLOTS || self->slot_node[slot] == S_NONE)
        return NULL;
    return self->nodes[self->slot_node[slot]].addr;
}

void kvt_rcluster_stats(const kvt_rcluster_t *self, kvt_rcluster_stats_t *st)
{
    assert(self && st);
    *st = self->st;
}

// ---------------------------------------------------------------- batch --

static int s_append(redisContext *c, const kvt_rc_cmd_t *cmd, bool asking)
{
    if (asking && redisAppendCommand(c, "ASKING") != REDIS_OK)
        return -1;
    const char *argv[3];
    size_t lens[3];
    int argc = 2;
    argv[1] = cmd->key;
    lens[1] = cmd->keylen;
    switch (cmd->op) {
    case KVT_RC_GET:
        argv[0] = "GET";
        break;
    case KVT_RC_SET:
        argv[0] = "SET";
        argv[2] = cmd->value;
        lens[2] = cmd->valuelen;
        argc = 3;
        break;
    case KVT_RC_EXISTS:
        argv[0] = "EXISTS";
        break;
    case KVT_RC_DEL:
    default:
        argv[0] = "DEL";
        break;
    }
    lens[0] = strlen(argv[0]);
    return redisAppendCommandArgv(c, argc, argv, lens) == REDIS_OK ? 0 : -1;
}

//  "MOVED 3999 127.0.0.1:6381" / "ASK ...": the target node; S_NONE if the
//  error is neither or malformed.
static uint16_t s_redirect(kvt_rcluster_t *self, const redisReply *r, bool *ask, uint16_t *slot)
{
    const char *s = r->str;
    size_t len = r->len;
    size_t skip;
    if (len > 6 && memcmp(s, "MOVED ", 6) == 0) {
        *ask = false;
        skip = 6;
    } else if (len > 4 && memcmp(s, "ASK ", 4) == 0) {
        *ask = true;
        skip = 4;
    } else {
        return S_NONE;
    }
    unsigned long v = 0;
    size_t i = skip;
    while (i < len && s[i] >= '0' && s[i] <= '9' && v < KVT_RC_SLOTS)
        v = v * 10 + (unsigned long)(s[i++] - '0');
    if (i == skip || i >= len || s[i] != ' ' || v >= KVT_RC_SLOTS)
        return S_NONE;
    *slot = (uint16_t)v;
    return s_node_addr(self, s + i + 1, len - i - 1);
}

//  Applies one reply to its command; true when it is to be sent again.
static bool s_settle(kvt_rcluster_t *self, kvt_rc_cmd_t *cmd, s_route_t *rt, redisReply *r)
{
    if (r->type == REDIS_REPLY_ERROR) {
        bool ask = false;
        uint16_t slot = 0;
        uint16_t to = s_redirect(self, r, &ask, &slot);
        if (to != S_NONE) {
            if (++cmd->hops > self->cfg.max_redirects) {
                cmd->status = KVT_RC_EREDIRECT;
                return false;
            }
            if (ask) {
                self->st.asked++;
                rt->ask = to;
            } else {
                self->st.moved++;
                self->slot_node[slot] = to;
                self->stale = true; //  the map is out of date: reload it before the next batch
            }
            return true;
        }
        cmd->status = KVT_RC_EREPLY;
        return false;
    }
    switch (cmd->op) {
    case KVT_RC_GET:
        if (r->type == REDIS_REPLY_NIL) {
            cmd->status = KVT_RC_NIL;
        } else if (r->type == REDIS_REPLY_STRING) {
            cmd->reply = malloc(r->len ? r->len : 1);
            if (!cmd->reply) {
                cmd->status = KVT_RC_ENOMEM;
                break;
            }
            memcpy(cmd->reply, r->str, r->len);
            cmd->replylen = r->len;
            cmd->status = KVT_RC_OK;
        } else {
            cmd->status = KVT_RC_EREPLY;
        }
        break;
    case KVT_RC_SET:
        cmd->status = r->type == REDIS_REPLY_STATUS ? KVT_RC_OK : KVT_RC_EREPLY;
        break;
    case KVT_RC_EXISTS:
    case KVT_RC_DEL:
    default:
        if (r->type == REDIS_REPLY_INTEGER)
            cmd->status = r->integer > 0 ? KVT_RC_OK : KVT_RC_NIL;
        else
            cmd->status = KVT_RC_EREPLY;
        break;
    }
    return false;
}

//  One round: routes, appends every command to its node, then reads the
//  replies node by node. Returns how many commands are to be sent again.
static size_t s_round(kvt_rcluster_t *self, kvt_rc_cmd_t *cmds, s_route_t *rt, size_t n,
                      size_t *order, uint32_t *start)
{
    //  Bucket the commands by node (a counting sort: appends and reads
    //  walk the same order).
    memset(start, 0, (self->cfg.max_nodes + 1) * sizeof *start);
    for (size_t i = 0; i < n; i++) {
        if (!rt[i].todo)
            continue;
        rt[i].asking = rt[i].ask != S_NONE;
        rt[i].node = rt[i].asking ? rt[i].ask : self->slot_node[rt[i].slot];
        rt[i].ask = S_NONE;
        if (rt[i].node == S_NONE) {
            cmds[i].status = KVT_RC_EDOWN;
            rt[i].todo = false;
            continue;
        }
        start[rt[i].node + 1]++;
    }
    uint32_t nn = self->nnodes;
    for (uint32_t k = 0; k < nn; k++)
        start[k + 1] += start[k];
    for (size_t i = 0; i < n; i++)
        if (rt[i].todo)
            order[start[rt[i].node]++] = i;
    for (uint32_t k = nn; k > 0; k--) //  start[k] is the end of bucket k; shift back
        start[k] = start[k - 1];
    start[0] = 0;
    //  Append everything, node by node.
    for (uint32_t k = 0; k < nn; k++) {
        if (start[k] == start[k + 1])
            continue;
        redisContext *c = s_conn(self, (uint16_t)k);
        for (uint32_t j = start[k]; j < start[k + 1]; j++) {
            size_t i = order[j];
            if (!c || s_append(c, &cmds[i], rt[i].asking) != 0) {
                cmds[i].status = c ? KVT_RC_ENOMEM : KVT_RC_EDOWN;
                rt[i].todo = false;
                continue;
            }
            self->st.commands++;
        }
    }
    //  Send every node's buffer before waiting on any reply, so the nodes
    //  work on their shares at the same time.
    for (uint32_t k = 0; k < nn; k++) {
        redisContext *c = self->nodes[k].c;
        self->broken[k] = false;
        int done = 0;
        while (c && start[k] != start[k + 1] && !done)
            if (redisBufferWrite(c, &done) != REDIS_OK) {
                self->broken[k] = true;
                break;
            }
    }
    //  Read the replies in the same order.
    size_t again = 0;
    for (uint32_t k = 0; k < nn; k++) {
        redisContext *c = self->nodes[k].c;
        bool broken = self->broken[k];
        for (uint32_t j = start[k]; j < start[k + 1]; j++) {
            size_t i = order[j];
            if (!rt[i].todo)
                continue;
            redisReply *r = NULL;
            if (!broken && rt[i].asking) {
                if (redisGetReply(c, (void **)&r) != REDIS_OK)
                    broken = true;
                freeReplyObject(r);
                r = NULL;
            }
            if (!broken && redisGetReply(c, (void **)&r) != REDIS_OK)
                broken = true;
            if (broken) {
                cmds[i].status = KVT_RC_EDOWN;
                rt[i].todo = false;
                continue;
            }
            rt[i].todo = s_settle(self, &cmds[i], &rt[i], r);
            freeReplyObject(r);
            again += rt[i].todo;
        }
        if (broken) {
            self->st.conn_errors++;
            s_drop(self, (uint16_t)k);
        }
    }
    return again;
}

size_t kvt_rcluster_exec(kvt_rcluster_t *self, kvt_rc_cmd_t *cmds, size_t n)
{
    assert(self && (cmds || n == 0));
    self->st.batches++;
    for (size_t i = 0; i < n; i++) {
        cmds[i].status = KVT_RC_ENOTQUEUED;
        cmds[i].reply = NULL;
        cmds[i].replylen = 0;
        cmds[i].hops = 0;
    }
    if (n == 0)
        return 0;
    s_route_t *rt = malloc(n * sizeof *rt);
    size_t *order = malloc(n * sizeof *order);
    uint32_t *start = malloc((self->cfg.max_nodes + 1) * sizeof *start);
    size_t failed = 0;
    if (!rt || !order || !start) {
        for (size_t i = 0; i < n; i++)
            cmds[i].status = KVT_RC_ENOMEM;
        failed = n;
        goto cleanup;
    }
    if (self->stale)
        kvt_rcluster_refresh(self);
    for (size_t i = 0; i < n; i++)
        rt[i] = (s_route_t){.slot = kvt_rcluster_slot(cmds[i].key, cmds[i].keylen),
                            .node = S_NONE,
                            .ask = S_NONE,
                            .todo = true};
    //  Each round either settles a command or adds a hop to it, and a
    //  command past max_redirects hops is settled: the loop ends.
    while (s_round(self, cmds, rt, n, order, start) > 0)
        ;
    for (size_t i = 0; i < n; i++)
        failed += cmds[i].status < 0;
cleanup:
    self->st.errors += failed;
    free(rt);
    free(order);
    free(start);
    return failed;
}
