/*  kvt_remote.c — the remote tier: object keys and value headers over the
    cluster client. See kvt_remote.h. */
#include "kvtier/kvt_remote.h"

#include <assert.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "kvt_rcluster.h"
#include "kvt_store_int.h"

#define S_MAGIC   "KVTRMT1"
#define S_KEY_MAX 128 //  bytes of a cluster key (it needs 99)

struct _kvt_remote_t {
    kvt_remote_config_t cfg; //  settings (seeds not kept)
    kvt_rcluster_t *rc;      //  the cluster client
    pthread_mutex_t mu;      //  guards rc and st
    kvt_remote_stats_t st;   //  counters
};

void kvt_remote_config_defaults(kvt_remote_config_t *cfg)
{
    assert(cfg);
    memset(cfg, 0, sizeof *cfg);
    cfg->world_size = 1;
    cfg->max_value_bytes = 512ull << 20;
    cfg->connect_timeout_ms = 500;
    cfg->io_timeout_ms = 1000;
}

kvt_remote_t *kvt_remote_new(const kvt_remote_config_t *cfg, char *err, size_t errlen)
{
    assert(cfg);
    if (!cfg->seeds || !cfg->seeds[0]) {
        kvt_store_seterr(err, errlen, "remote: no seed nodes (redis://HOST:PORT[,...])");
        return NULL;
    }
    if (cfg->world_size == 0 || cfg->rank >= cfg->world_size) {
        kvt_store_seterr(err, errlen, "remote: rank=%u world_size=%u: rank must be below it",
                         cfg->rank, cfg->world_size);
        return NULL;
    }
    kvt_remote_t *self = calloc(1, sizeof *self);
    if (!self) {
        kvt_store_seterr(err, errlen, "remote: out of memory");
        return NULL;
    }
    self->cfg = *cfg;
    self->cfg.seeds = NULL;
    pthread_mutex_init(&self->mu, NULL);
    kvt_rcluster_config_t rcc;
    kvt_rcluster_config_defaults(&rcc);
    rcc.connect_timeout_ms = cfg->connect_timeout_ms ? cfg->connect_timeout_ms : 500;
    rcc.io_timeout_ms = cfg->io_timeout_ms ? cfg->io_timeout_ms : 1000;
    self->rc = kvt_rcluster_new(cfg->seeds, &rcc, err, errlen);
    if (!self->rc) {
        kvt_remote_destroy(&self);
        return NULL;
    }
    return self;
}

void kvt_remote_destroy(kvt_remote_t **self_p)
{
    assert(self_p);
    kvt_remote_t *self = *self_p;
    if (!self)
        return;
    kvt_rcluster_destroy(&self->rc);
    pthread_mutex_destroy(&self->mu);
    free(self);
    *self_p = NULL;
}

size_t kvt_remote_key(const kvt_remote_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind,
                      char *buf, size_t cap)
{
    int n = snprintf(buf, cap,
                     "kvt:%016" PRIx64 ":%016" PRIx64 ":%016" PRIx64 ":%u.%u:%d:%016" PRIx64
                     "%016" PRIx64,
                     ns, self->cfg.ns_id, self->cfg.layout_id, self->cfg.rank, self->cfg.world_size,
                     (int)kind, key.hi, key.lo);
    return n < 0 ? 0 : (size_t)n;
}

// -------------------------------------------------------------- header --

static void s_put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void s_put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t s_get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 8; i-- > 0;)
        v = (v << 8) | p[i];
    return v;
}

static void s_header(const kvt_remote_t *self, unsigned char *h, uint64_t ns, kvt_hash_t key,
                     kvt_obj_kind_t kind, const void *payload, size_t size)
{
    memset(h, 0, KVT_REMOTE_HEADER);
    memcpy(h, S_MAGIC, 8);
    s_put64(h + 8, ns);
    s_put64(h + 16, self->cfg.ns_id);
    s_put64(h + 24, self->cfg.layout_id);
    s_put32(h + 32, self->cfg.rank);
    s_put32(h + 36, self->cfg.world_size);
    s_put32(h + 40, (uint32_t)kind);
    s_put64(h + 48, key.hi);
    s_put64(h + 56, key.lo);
    s_put64(h + 64, (uint64_t)size);
    s_put64(h + 72, XXH3_64bits(payload, size));
    s_put64(h + 80, XXH3_64bits(h, 80));
}

//  0 verified; 1 corrupt (short, bad magic, checksum); 2 foreign (another
//  writer or object under this name).
static int s_verify(const kvt_remote_t *self, const unsigned char *v, size_t len, uint64_t ns,
                    kvt_hash_t key, kvt_obj_kind_t kind)
{
    if (len < KVT_REMOTE_HEADER || memcmp(v, S_MAGIC, 8) != 0 ||
        s_get64(v + 80) != XXH3_64bits(v, 80))
        return 1;
    if (s_get64(v + 64) != len - KVT_REMOTE_HEADER)
        return 1;
    unsigned char want[KVT_REMOTE_HEADER];
    s_header(self, want, ns, key, kind, NULL, 0);
    if (memcmp(v + 8, want + 8, 56) != 0) //  namespace .. key: whose and which object
        return 2;
    if (s_get64(v + 72) != XXH3_64bits(v + KVT_REMOTE_HEADER, len - KVT_REMOTE_HEADER))
        return 1;
    return 0;
}

// --------------------------------------------------------------- calls --

int kvt_remote_put(kvt_remote_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind,
                   const void *bytes, size_t size)
{
    assert(self && (bytes || size == 0));
    if (!kvt_store_kind_ok(kind))
        return KVT_STORE_EINVAL;
    if (size > self->cfg.max_value_bytes) {
        pthread_mutex_lock(&self->mu);
        self->st.puts_dropped++;
        pthread_mutex_unlock(&self->mu);
        return KVT_STORE_ETOOBIG;
    }
    unsigned char *v = malloc(KVT_REMOTE_HEADER + size);
    if (!v) {
        pthread_mutex_lock(&self->mu);
        self->st.puts_dropped++;
        pthread_mutex_unlock(&self->mu);
        return KVT_STORE_ENOMEM;
    }
    s_header(self, v, ns, key, kind, bytes, size);
    memcpy(v + KVT_REMOTE_HEADER, bytes, size);
    char name[S_KEY_MAX];
    kvt_rc_cmd_t cmd = {.op = KVT_RC_SET,
                        .key = name,
                        .keylen = kvt_remote_key(self, ns, key, kind, name, sizeof name),
                        .value = v,
                        .valuelen = KVT_REMOTE_HEADER + size};
    pthread_mutex_lock(&self->mu);
    kvt_rcluster_exec(self->rc, &cmd, 1);
    if (cmd.status == KVT_RC_OK) {
        self->st.puts++;
        self->st.put_bytes += size;
    } else {
        self->st.puts_dropped++;
    }
    pthread_mutex_unlock(&self->mu);
    free(v);
    return cmd.status == KVT_RC_OK ? KVT_STORE_OK : KVT_STORE_EIO;
}

int kvt_remote_get(kvt_remote_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind, void **out,
                   size_t *size, kvt_obj_kind_t *found)
{
    assert(self && out && size && found);
    *out = NULL;
    *size = 0;
    kvt_obj_kind_t cand[2];
    int nc = kvt_store_candidates(kind, cand);
    if (nc == 0)
        return KVT_STORE_EINVAL;
    char names[2][S_KEY_MAX];
    kvt_rc_cmd_t cmds[2];
    for (int i = 0; i < nc; i++)
        cmds[i] = (kvt_rc_cmd_t){
            .op = KVT_RC_GET,
            .key = names[i],
            .keylen = kvt_remote_key(self, ns, key, cand[i], names[i], sizeof names[i])};
    pthread_mutex_lock(&self->mu);
    kvt_rcluster_exec(self->rc, cmds, (size_t)nc);
    int rc = KVT_STORE_ENOTFOUND;
    self->st.gets++;
    int why = -1; //  the best candidate's reason for a miss
    for (int i = 0; i < nc; i++) {
        if (rc == KVT_STORE_OK || cmds[i].status != KVT_RC_OK) {
            if (why < 0 && cmds[i].status < 0)
                why = 3;
            continue;
        }
        int v = s_verify(self, cmds[i].reply, cmds[i].replylen, ns, key, cand[i]);
        if (v != 0) {
            if (why < 0 || why == 3)
                why = v;
            continue;
        }
        size_t n = cmds[i].replylen - KVT_REMOTE_HEADER;
        //  The payload is moved to the front of the reply buffer in place.
        memmove(cmds[i].reply, (unsigned char *)cmds[i].reply + KVT_REMOTE_HEADER, n);
        *out = cmds[i].reply;
        cmds[i].reply = NULL;
        *size = n;
        *found = cand[i];
        rc = KVT_STORE_OK;
    }
    if (rc == KVT_STORE_OK)
        self->st.get_hits++;
    else if (why == 1)
        self->st.get_corrupt++;
    else if (why == 2)
        self->st.get_foreign++;
    else if (why == 3)
        self->st.get_errors++;
    else
        self->st.get_misses++;
    pthread_mutex_unlock(&self->mu);
    for (int i = 0; i < nc; i++)
        free(cmds[i].reply);
    return rc;
}

size_t kvt_remote_count(kvt_remote_t *self, uint64_t ns, const kvt_hash_t *keys, size_t n,
                        kvt_obj_kind_t kind)
{
    assert(self && (keys || n == 0));
    kvt_obj_kind_t cand[2];
    int nc = kvt_store_candidates(kind, cand);
    if (nc == 0 || n == 0)
        return 0;
    size_t ncmd = n * (size_t)nc;
    kvt_rc_cmd_t *cmds = calloc(ncmd, sizeof *cmds);
    char *names = malloc(ncmd * S_KEY_MAX);
    if (!cmds || !names) {
        free(cmds);
        free(names);
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        for (int c = 0; c < nc; c++) {
            size_t j = i * (size_t)nc + (size_t)c;
            char *name = names + j * S_KEY_MAX;
            cmds[j] = (kvt_rc_cmd_t){
                .op = KVT_RC_EXISTS,
                .key = name,
                .keylen = kvt_remote_key(self, ns, keys[i], cand[c], name, S_KEY_MAX)};
        }
    pthread_mutex_lock(&self->mu);
    kvt_rcluster_exec(self->rc, cmds, ncmd);
    size_t k = 0;
    for (; k < n; k++) {
        bool any = false, failed = false;
        for (int c = 0; c < nc; c++) {
            int s = cmds[k * (size_t)nc + (size_t)c].status;
            any |= s == KVT_RC_OK;
            failed |= s < 0;
        }
        if (!any) {
            self->st.lookup_errors += failed;
            break;
        }
    }
    self->st.lookups++;
    self->st.lookup_keys += k;
    pthread_mutex_unlock(&self->mu);
    free(cmds);
    free(names);
    return k;
}

bool kvt_remote_exists(kvt_remote_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind)
{
    assert(self);
    kvt_obj_kind_t cand[2];
    int nc = kvt_store_candidates(kind, cand);
    char names[2][S_KEY_MAX];
    kvt_rc_cmd_t cmds[2];
    for (int i = 0; i < nc; i++)
        cmds[i] = (kvt_rc_cmd_t){
            .op = KVT_RC_EXISTS,
            .key = names[i],
            .keylen = kvt_remote_key(self, ns, key, cand[i], names[i], sizeof names[i])};
    pthread_mutex_lock(&self->mu);
    kvt_rcluster_exec(self->rc, cmds, (size_t)nc);
    self->st.touches++;
    pthread_mutex_unlock(&self->mu);
    bool any = false;
    for (int i = 0; i < nc; i++)
        any |= cmds[i].status == KVT_RC_OK;
    return any;
}

void kvt_remote_stats(kvt_remote_t *self, kvt_remote_stats_t *st)
{
    assert(self && st);
    pthread_mutex_lock(&self->mu);
    *st = self->st;
    kvt_rcluster_stats_t cs;
    kvt_rcluster_stats(self->rc, &cs);
    pthread_mutex_unlock(&self->mu);
    st->moved = cs.moved;
    st->asked = cs.asked;
    st->refreshes = cs.refreshes;
    st->conn_errors = cs.conn_errors;
}
