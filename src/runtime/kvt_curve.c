/*  kvt_curve.c — the CURVE keys of a system's tcp:// links, and the one
    zauth actor of the process.

    kvt_system_set_curve reads every file at once and keeps nothing of a
    failed call, so a system is either configured whole or not at all. The
    LIVE driver applies the keys to its sockets (kvt_live.c); the SIM driver
    has none.

    ZeroMQ asks one ZAP handler per context (inproc://zeromq.zap.01), and
    czmq gives a process one context, so every system of a process that binds
    a CURVE inbox shares one zauth actor: held while any such system runs,
    and only for one directory of allowed keys (a second system asking for
    another one is refused, not silently given the first's).
*/
#include <assert.h>
#include <czmq.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kvt_runtime_int.h"

struct _kvt_curve_t {
    zcert_t *cert;              //  this process's certificate (public + secret)
    char server_txt[41];        //  Z85 public key remote tcp inboxes present
    char dir[KVT_ENDPOINT_MAX]; //  directory of allowed client certificates
    bool held;                  //  this system holds the process's zauth
};

static pthread_mutex_t s_auth_mu = PTHREAD_MUTEX_INITIALIZER;
static zactor_t *s_auth;                  //  the process's zauth actor (s_auth_mu)
static uint32_t s_auth_holds;             //  systems holding it (s_auth_mu)
static char s_auth_dir[KVT_ENDPOINT_MAX]; //  the directory it admits (s_auth_mu)

static bool s_zero(const byte *key)
{
    for (int i = 0; i < 32; i++)
        if (key[i])
            return false;
    return true;
}

//  Loads a certificate file; `secret` asks for its secret key too.
static zcert_t *s_load(const char *setting, const char *path, bool secret, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "%s: cannot read %s: %s", setting, path, strerror(errno));
        return NULL;
    }
    fclose(f);
    zcert_t *cert = zcert_load(path);
    if (!cert || s_zero(zcert_public_key(cert))) {
        snprintf(err, errlen, "%s: %s is not a certificate (zcert format with a public key)",
                 setting, path);
        zcert_destroy(&cert);
        return NULL;
    }
    if (secret && s_zero(zcert_secret_key(cert))) {
        snprintf(err, errlen,
                 "%s: %s holds no secret key (give the secret certificate, or the public one "
                 "with its _secret file beside it)",
                 setting, path);
        zcert_destroy(&cert);
        return NULL;
    }
    return cert;
}

int kvt_system_set_curve(kvt_system_t *self, const kvt_curve_opts_t *opts, char *err, size_t errlen)
{
    assert(self && opts && err && errlen);
    if (self->started) {
        snprintf(err, errlen, "curve: the system already started");
        return -1;
    }
    if (!opts->secret_key || !opts->secret_key[0]) {
        snprintf(err, errlen, "curve_secret_key: not set");
        return -1;
    }
    if (!opts->public_keys || !opts->public_keys[0]) {
        snprintf(err, errlen, "curve_public_keys: not set (a directory of allowed certificates)");
        return -1;
    }
    struct stat st;
    if (stat(opts->public_keys, &st) != 0) {
        snprintf(err, errlen, "curve_public_keys: cannot read %s: %s", opts->public_keys,
                 strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "curve_public_keys: %s is not a directory", opts->public_keys);
        return -1;
    }
    if (strlen(opts->public_keys) >= KVT_ENDPOINT_MAX) {
        snprintf(err, errlen, "curve_public_keys: %s is longer than %d bytes", opts->public_keys,
                 KVT_ENDPOINT_MAX - 1);
        return -1;
    }
    kvt_curve_t *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "curve: out of memory");
        return -1;
    }
    c->cert = s_load("curve_secret_key", opts->secret_key, true, err, errlen);
    if (!c->cert)
        goto fail;
    snprintf(c->server_txt, sizeof c->server_txt, "%s", zcert_public_txt(c->cert));
    if (opts->server_key && opts->server_key[0]) {
        zcert_t *server = s_load("curve_server_key", opts->server_key, false, err, errlen);
        if (!server)
            goto fail;
        snprintf(c->server_txt, sizeof c->server_txt, "%s", zcert_public_txt(server));
        zcert_destroy(&server);
    }
    snprintf(c->dir, sizeof c->dir, "%s", opts->public_keys);
    kvt_curve_destroy(&self->curve);
    self->curve = c;
    return 0;
fail:
    kvt_curve_destroy(&c);
    return -1;
}

void kvt_curve_destroy(kvt_curve_t **self_p)
{
    kvt_curve_t *self = *self_p;
    if (!self)
        return;
    kvt_curve_auth_release(self);
    zcert_destroy(&self->cert);
    free(self);
    *self_p = NULL;
}

void kvt_curve_server(kvt_curve_t *self, zsock_t *sock)
{
    zcert_apply(self->cert, sock);
    zsock_set_curve_server(sock, 1);
    zsock_set_zap_domain(sock, "kvtier");
}

void kvt_curve_client(kvt_curve_t *self, zsock_t *sock)
{
    zcert_apply(self->cert, sock);
    zsock_set_curve_serverkey(sock, self->server_txt);
}

int kvt_curve_auth_hold(kvt_curve_t *self, char *err, size_t errlen)
{
    if (self->held)
        return 0;
    int rc = -1;
    pthread_mutex_lock(&s_auth_mu);
    if (s_auth_holds > 0 && strcmp(s_auth_dir, self->dir) != 0) {
        snprintf(err, errlen,
                 "curve_public_keys: this process already admits the keys of %s; one process "
                 "admits one directory",
                 s_auth_dir);
        goto done;
    }
    if (s_auth_holds == 0) {
        s_auth = zactor_new(zauth, NULL);
        if (!s_auth || zstr_sendx(s_auth, "CURVE", self->dir, NULL) != 0 ||
            zsock_wait(s_auth) != 0) {
            snprintf(err, errlen, "curve: cannot start the authenticator");
            zactor_destroy(&s_auth);
            goto done;
        }
        snprintf(s_auth_dir, sizeof s_auth_dir, "%s", self->dir);
    }
    s_auth_holds++;
    self->held = true;
    rc = 0;
done:
    pthread_mutex_unlock(&s_auth_mu);
    return rc;
}

void kvt_curve_auth_release(kvt_curve_t *self)
{
    if (!self || !self->held)
        return;
    pthread_mutex_lock(&s_auth_mu);
    if (--s_auth_holds == 0)
        zactor_destroy(&s_auth);
    pthread_mutex_unlock(&s_auth_mu);
    self->held = false;
}

void kvt_system_secure_client(kvt_system_t *self, void *zsock, const char *endpoint)
{
    assert(self && zsock && endpoint);
    if (self->curve && strncmp(endpoint, "tcp://", 6) == 0)
        kvt_curve_client(self->curve, zsock);
}
