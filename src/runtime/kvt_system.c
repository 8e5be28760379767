/*  kvt_system.c — the system: options, topology (names, endpoints, the
    name table), posting from outside the actors, the lifecycle calls that
    dispatch to the driver, counters, and logging.
*/
#include <assert.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "kvt_runtime_int.h"

uint64_t kvt_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

// ------------------------------------------------------------- logging ----

void kvt_log_v(kvt_system_t *sys, const char *who, int level, const char *fmt, va_list ap)
{
    if (level > sys->log_level)
        return;
    static const char letters[] = "EWID";
    char text[1024];
    vsnprintf(text, sizeof text, fmt, ap);
    uint64_t t = kvt_system_now(sys);
    //  One fputs per line so lines from actor threads do not interleave.
    char line[1200];
    snprintf(line, sizeof line, "%s %" PRIu64 ".%09" PRIu64 " %s %c: %s\n", sys->name,
             t / 1000000000u, t % 1000000000u, who,
             letters[level < 0   ? 0
                     : level > 3 ? 3
                                 : level],
             text);
    fputs(line, stderr);
}

void kvt_log(kvt_system_t *sys, const char *who, int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kvt_log_v(sys, who, level, fmt, ap);
    va_end(ap);
}

// ------------------------------------------------------------ topology ----

//  Printable ASCII without space, not starting with '$' (reserved).
static bool s_name_ok(const char *name, size_t max)
{
    if (!name || !name[0] || name[0] == '$')
        return false;
    size_t len = strnlen(name, max);
    if (len >= max)
        return false;
    for (size_t i = 0; i < len; i++)
        if (name[i] < 0x21 || name[i] > 0x7e)
            return false;
    return true;
}

static bool s_endpoint_ok(const char *ep)
{
    size_t len = strnlen(ep, KVT_ENDPOINT_MAX);
    if (len >= KVT_ENDPOINT_MAX)
        return false;
    static const char *prefixes[] = {"inproc://", "ipc://", "tcp://"};
    for (size_t i = 0; i < 3; i++) {
        size_t n = strlen(prefixes[i]);
        if (strncmp(ep, prefixes[i], n) == 0)
            return len > n;
    }
    return false;
}

static uint32_t s_name_slot(const char *name, size_t len)
{
    return (uint32_t)XXH3_64bits(name, len) & (KVT_NAME_TABLE - 1);
}

kvt_aid_t kvt_system_find(kvt_system_t *self, const char *name, size_t len)
{
    assert(self);
    if (len == strlen(KVT_SYSTEM_NAME) && memcmp(name, KVT_SYSTEM_NAME, len) == 0)
        return KVT_AID_SYSTEM;
    if (len == 0 || len >= KVT_ACTOR_NAME_MAX)
        return KVT_AID_NONE;
    for (uint32_t slot = s_name_slot(name, len);; slot = (slot + 1) & (KVT_NAME_TABLE - 1)) {
        uint16_t v = self->names[slot];
        if (v == 0)
            return KVT_AID_NONE;
        kvt_actor_t *a = self->actors[v - 1];
        if (strncmp(a->name, name, len) == 0 && a->name[len] == 0)
            return a->aid;
    }
}

kvt_actor_t *kvt_system_actor(kvt_system_t *self, kvt_aid_t aid)
{
    if (aid == KVT_AID_SYSTEM)
        return &self->sysactor;
    return aid < self->nactors ? self->actors[aid] : NULL;
}

static kvt_aid_t s_add(kvt_system_t *self, const char *name, const kvt_actor_class_t *cls,
                       void *args, const char *endpoint, bool remote)
{
    if (self->started) {
        kvt_log(self, KVT_SYSTEM_NAME, 0, "add '%s': the system already started", name);
        return KVT_AID_NONE;
    }
    if (!s_name_ok(name, KVT_ACTOR_NAME_MAX)) {
        kvt_log(self, KVT_SYSTEM_NAME, 0, "add: bad actor name '%s'", name ? name : "(null)");
        return KVT_AID_NONE;
    }
    if (kvt_system_find(self, name, strlen(name)) != KVT_AID_NONE) {
        kvt_log(self, KVT_SYSTEM_NAME, 0, "add: duplicate actor name '%s'", name);
        return KVT_AID_NONE;
    }
    if (endpoint && !s_endpoint_ok(endpoint)) {
        kvt_log(self, KVT_SYSTEM_NAME, 0, "add '%s': bad endpoint '%s'", name, endpoint);
        return KVT_AID_NONE;
    }
    if (self->nactors >= KVT_MAX_ACTORS) {
        kvt_log(self, KVT_SYSTEM_NAME, 0, "add '%s': topology full", name);
        return KVT_AID_NONE;
    }
    kvt_actor_t *a = calloc(1, sizeof *a);
    if (!a)
        return KVT_AID_NONE;
    a->aid = (kvt_aid_t)self->nactors;
    snprintf(a->name, sizeof a->name, "%s", name);
    a->cls = cls;
    a->args = args;
    a->remote = remote;
    if (endpoint)
        snprintf(a->endpoint, sizeof a->endpoint, "%s", endpoint);
    else
        snprintf(a->endpoint, sizeof a->endpoint, "inproc://%s-%s", self->name, name);
    a->ctx = (kvt_ctx_t){.sys = self, .actor = a};
    kvt_rng_seed(&a->rng, self->seed ^ XXH3_64bits(name, strlen(name)));
    self->actors[self->nactors++] = a;
    uint32_t slot = s_name_slot(name, strlen(name));
    while (self->names[slot] != 0)
        slot = (slot + 1) & (KVT_NAME_TABLE - 1);
    self->names[slot] = (uint16_t)(a->aid + 1);
    return a->aid;
}

// -------------------------------------------------------------- system ----

kvt_system_t *kvt_system_new(const kvt_system_opts_t *opts)
{
    kvt_system_opts_t o = {.driver = KVT_DRIVER_SIM, .log_level = 1};
    if (opts)
        o = *opts;
    kvt_system_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->seed = o.seed;
    self->link_id = o.link_id;
    self->log_level = 1; //  until the option is validated
    snprintf(self->name, sizeof self->name, "%s", "kvt");
    self->lat_min_ns = o.sim_lat_min_ns == KVT_LAT_ZERO ? 0
                       : o.sim_lat_min_ns               ? o.sim_lat_min_ns
                                                        : 1000;
    self->lat_jitter_ns = o.sim_lat_jitter_ns == KVT_LAT_ZERO ? 0
                          : o.sim_lat_jitter_ns               ? o.sim_lat_jitter_ns
                                                              : 4000;
    self->sysactor.aid = KVT_AID_SYSTEM;
    snprintf(self->sysactor.name, sizeof self->sysactor.name, "%s", KVT_SYSTEM_NAME);
    self->sysactor.ctx = (kvt_ctx_t){.sys = self, .actor = &self->sysactor};
    //  The one place the driver is chosen: everything after asks its table.
    self->ops = o.driver == KVT_DRIVER_SIM    ? &kvt_sim_driver
                : o.driver == KVT_DRIVER_LIVE ? &kvt_live_driver
                                              : NULL;
    if (!self->ops) {
        kvt_log(self, KVT_SYSTEM_NAME, 0, "bad driver %d", (int)o.driver);
        goto fail;
    }
    if (o.log_level < 0 || o.log_level > 3) {
        kvt_log(self, KVT_SYSTEM_NAME, 0, "bad log_level %d (0..3)", o.log_level);
        goto fail;
    }
    if (o.name && !s_name_ok(o.name, KVT_SYS_NAME_MAX)) {
        kvt_log(self, KVT_SYSTEM_NAME, 0, "bad system name '%s'", o.name);
        goto fail;
    }
    if (o.name)
        snprintf(self->name, sizeof self->name, "%s", o.name);
    self->log_level = o.log_level;
    self->actors = calloc(KVT_MAX_ACTORS, sizeof *self->actors);
    if (!self->actors)
        goto fail;
    if (self->ops->create(self) != 0)
        goto fail;
    return self;
fail:
    kvt_system_destroy(&self);
    return NULL;
}

void kvt_system_destroy(kvt_system_t **self_p)
{
    assert(self_p);
    kvt_system_t *self = *self_p;
    if (!self)
        return;
    if (self->started)
        kvt_system_stop(self);
    if (self->ops)
        self->ops->destroy(self);
    kvt_curve_destroy(&self->curve);
    if (self->actors)
        for (uint32_t i = 0; i < self->nactors; i++)
            free(self->actors[i]);
    free(self->actors);
    free(self);
    *self_p = NULL;
}

kvt_aid_t kvt_system_add(kvt_system_t *self, const char *name, const kvt_actor_class_t *cls,
                         void *args, const char *endpoint)
{
    assert(self && cls && cls->init);
    return s_add(self, name, cls, args, endpoint, false);
}

kvt_aid_t kvt_system_add_remote(kvt_system_t *self, const char *name, const char *endpoint)
{
    assert(self);
    if (!self->ops->remote_actors) {
        kvt_log(self, KVT_SYSTEM_NAME, 0, "add_remote '%s': remote actors need the LIVE driver",
                name ? name : "(null)");
        return KVT_AID_NONE;
    }
    if (!endpoint || strncmp(endpoint, "inproc://", 9) == 0) {
        kvt_log(self, KVT_SYSTEM_NAME, 0, "add_remote '%s': needs an ipc:// or tcp:// endpoint",
                name ? name : "(null)");
        return KVT_AID_NONE;
    }
    return s_add(self, name, NULL, NULL, endpoint, true);
}

kvt_aid_t kvt_system_lookup(kvt_system_t *self, const char *name)
{
    assert(self);
    if (!name)
        return KVT_AID_NONE;
    return kvt_system_find(self, name, strnlen(name, KVT_ACTOR_NAME_MAX));
}

const char *kvt_system_endpoint(kvt_system_t *self, kvt_aid_t aid)
{
    assert(self);
    return aid < self->nactors ? self->actors[aid]->endpoint : NULL;
}

//  Sends `buf` (malloc'ed; consumed) from "$system".
static int s_post_bytes(kvt_system_t *self, kvt_aid_t to, int kind, uint8_t *buf, size_t len)
{
    kvt_counters_t *st = &self->sysactor.stats;
    if (to >= self->nactors) {
        free(buf);
        kvt_count(st, KVT_ST_SEND_ERRORS);
        return -1;
    }
    int rc = self->ops->send(self, NULL, to, kind, buf, len);
    kvt_count(st, rc == 0 ? KVT_ST_SENT : KVT_ST_SEND_ERRORS);
    return rc;
}

int kvt_system_post(kvt_system_t *self, kvt_aid_t to, const kvt_msg_t *msg)
{
    assert(self && msg);
    uint8_t *buf = NULL;
    size_t len = 0;
    if (kvt_msg_encode(msg, &buf, &len) != 0) {
        kvt_count(&self->sysactor.stats, KVT_ST_SEND_ERRORS);
        kvt_log(self, KVT_SYSTEM_NAME, 1, "post: %s does not encode", kvt_msg_kind_name(msg->kind));
        return -1;
    }
    return s_post_bytes(self, to, msg->kind, buf, len);
}

int kvt_system_post_raw(kvt_system_t *self, kvt_aid_t to, const void *bytes, size_t len)
{
    assert(self && (bytes || len == 0));
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        return -1;
    if (len)
        memcpy(buf, bytes, len);
    return s_post_bytes(self, to, KVT_MSG_NONE, buf, len);
}

int kvt_system_start(kvt_system_t *self)
{
    assert(self);
    if (self->started || self->stopped) {
        kvt_log(self, KVT_SYSTEM_NAME, 0, "start: the system was already started");
        return -1;
    }
    int rc = self->ops->start(self);
    if (rc == 0)
        self->started = true;
    return rc;
}

int kvt_system_run(kvt_system_t *self, uint64_t until_ns, uint64_t max_events)
{
    assert(self);
    if (!self->started || self->stopped) {
        kvt_log(self, KVT_SYSTEM_NAME, 0, "run: the system is not running");
        return KVT_RUN_QUIESCENT;
    }
    return self->ops->run(self, until_ns, max_events);
}

void kvt_system_stop(kvt_system_t *self)
{
    assert(self);
    if (!self->started || self->stopped)
        return;
    self->ops->stop(self);
    self->stopped = true;
}

uint64_t kvt_system_now(kvt_system_t *self)
{
    assert(self);
    return self->ops ? self->ops->now(self) : 0; //  no driver yet: a log line of new
}

int kvt_system_actor_stats(kvt_system_t *self, kvt_aid_t aid, kvt_actor_stats_t *out)
{
    assert(self && out);
    kvt_actor_t *a = kvt_system_actor(self, aid);
    if (!a || a->remote)
        return -1;
    kvt_counters_t *c = &a->stats;
    *out = (kvt_actor_stats_t){
        .delivered = kvt_count_get(c, KVT_ST_DELIVERED),
        .sent = kvt_count_get(c, KVT_ST_SENT),
        .send_errors = kvt_count_get(c, KVT_ST_SEND_ERRORS),
        .decode_errors = kvt_count_get(c, KVT_ST_DECODE_ERRORS),
        .unhandled = kvt_count_get(c, KVT_ST_UNHANDLED),
        .handler_errors = kvt_count_get(c, KVT_ST_HANDLER_ERRORS),
        .timers_fired = kvt_count_get(c, KVT_ST_TIMERS_FIRED),
        .dropped_at_stop = kvt_count_get(c, KVT_ST_DROPPED_AT_STOP),
        .bad_frames = kvt_count_get(c, KVT_ST_BAD_FRAMES),
        .dropped_down = kvt_count_get(c, KVT_ST_DROPPED_DOWN),
        .dropped_fault = kvt_count_get(c, KVT_ST_DROPPED_FAULT),
        .timers_lost = kvt_count_get(c, KVT_ST_TIMERS_LOST),
        .restarts = kvt_count_get(c, KVT_ST_RESTARTS),
        .auth_rejected = kvt_count_get(c, KVT_ST_AUTH_REJECTED),
        .foreign_frames = kvt_count_get(c, KVT_ST_FOREIGN_FRAMES),
    };
    return 0;
}
