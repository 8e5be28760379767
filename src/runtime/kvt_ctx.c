/*  kvt_ctx.c — the handler context: what a handler may do (send, look up,
    arm and cancel timers, read driver time, draw random numbers, log, ask
    the system to exit), dispatched to the driver, and the seeded generator.

    A context is only used from its actor's own execution: under SIM the
    caller's thread while the driver runs that actor (init, a handler, a
    timer, stop), under LIVE the actor's thread.
*/
#include <assert.h>
#include <stdarg.h>
#include <stdlib.h>

#include "kvt_runtime_int.h"

// ------------------------------------------------------------- random -----

static uint64_t s_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void kvt_rng_seed(kvt_rng_t *rng, uint64_t seed)
{
    assert(rng);
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        rng->s[i] = s_splitmix64(&x);
    if ((rng->s[0] | rng->s[1] | rng->s[2] | rng->s[3]) == 0)
        rng->s[0] = 1;
}

static inline uint64_t s_rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t kvt_rng_next(kvt_rng_t *rng)
{
    uint64_t *s = rng->s;
    uint64_t result = s_rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = s_rotl(s[3], 45);
    return result;
}

// ------------------------------------------------------------ context -----

int kvt_ctx_send(kvt_ctx_t *ctx, kvt_aid_t to, const kvt_msg_t *msg)
{
    assert(ctx && msg);
    kvt_system_t *sys = ctx->sys;
    kvt_actor_t *a = ctx->actor;
    if (to >= sys->nactors) {
        kvt_count(&a->stats, KVT_ST_SEND_ERRORS);
        kvt_log(sys, a->name, 1, "send %s: unknown actor id %u", kvt_msg_kind_name(msg->kind),
                (unsigned)to);
        return -1;
    }
    uint8_t *buf = NULL;
    size_t len = 0;
    if (kvt_msg_encode(msg, &buf, &len) != 0) {
        kvt_count(&a->stats, KVT_ST_SEND_ERRORS);
        kvt_log(sys, a->name, 1, "send %s to %s: the message does not encode",
                kvt_msg_kind_name(msg->kind), sys->actors[to]->name);
        return -1;
    }
    int rc = sys->ops->send(sys, a, to, msg->kind, buf, len);
    kvt_count(&a->stats, rc == 0 ? KVT_ST_SENT : KVT_ST_SEND_ERRORS);
    return rc;
}

kvt_aid_t kvt_ctx_lookup(kvt_ctx_t *ctx, const char *name)
{
    assert(ctx);
    return kvt_system_lookup(ctx->sys, name);
}

kvt_aid_t kvt_ctx_self(kvt_ctx_t *ctx)
{
    assert(ctx);
    return ctx->actor->aid;
}

const char *kvt_ctx_name(kvt_ctx_t *ctx, kvt_aid_t aid)
{
    assert(ctx);
    kvt_actor_t *a = kvt_system_actor(ctx->sys, aid);
    return a ? a->name : "?";
}

uint64_t kvt_ctx_timer(kvt_ctx_t *ctx, uint64_t after_ns, uint64_t tag)
{
    assert(ctx);
    return ctx->sys->ops->timer(ctx->sys, ctx->actor, after_ns, tag);
}

int kvt_ctx_cancel(kvt_ctx_t *ctx, uint64_t timer_id)
{
    assert(ctx);
    return ctx->sys->ops->cancel(ctx->sys, ctx->actor, timer_id);
}

uint64_t kvt_ctx_now(kvt_ctx_t *ctx)
{
    assert(ctx);
    return kvt_system_now(ctx->sys);
}

uint64_t kvt_ctx_rand(kvt_ctx_t *ctx)
{
    assert(ctx);
    return kvt_rng_next(&ctx->actor->rng);
}

void kvt_ctx_log(kvt_ctx_t *ctx, int level, const char *fmt, ...)
{
    assert(ctx && fmt);
    va_list ap;
    va_start(ap, fmt);
    kvt_log_v(ctx->sys, ctx->actor->name, level, fmt, ap);
    va_end(ap);
}

void kvt_ctx_exit(kvt_ctx_t *ctx, int code)
{
    assert(ctx);
    ctx->sys->ops->exit(ctx->sys, ctx->actor, code);
}

kvt_system_t *kvt_ctx_system(kvt_ctx_t *ctx)
{
    assert(ctx);
    return ctx->sys;
}

// ----------------------------------------------------------- dispatch -----

#define S_DECODE_LOG 8 //  decode errors per actor logged as warnings; the rest at debug

int kvt_actor_dispatch(kvt_system_t *sys, kvt_actor_t *a, kvt_aid_t from, const uint8_t *buf,
                       size_t len, int *kind_out)
{
    kvt_msg_t msg;
    kvt_msg_err_t err;
    *kind_out = 0;
    if (kvt_msg_decode(buf, len, &msg, &err) != 0) {
        kvt_count(&a->stats, KVT_ST_DECODE_ERRORS);
        char why[200];
        kvt_log(sys, a->name, a->decode_logged < S_DECODE_LOG ? 1 : 3,
                "dropped a frame from %s that does not decode (%zu bytes): %s",
                kvt_system_actor(sys, from)->name, len, kvt_msg_err_str(&err, why, sizeof why));
        a->decode_logged++;
        return KVT_TRACE_F_DECODE;
    }
    *kind_out = msg.kind;
    kvt_handler_fn *fn = NULL;
    if (msg.kind > KVT_MSG_NONE && msg.kind < KVT_MSG_KIND_COUNT)
        fn = a->cls->on[msg.kind];
    int flags = 0;
    if (!fn) {
        flags = KVT_TRACE_F_UNHANDLED;
        kvt_count(&a->stats, KVT_ST_UNHANDLED);
        kvt_log(sys, a->name, 3, "no handler for %s from %s", kvt_msg_kind_name(msg.kind),
                kvt_system_actor(sys, from)->name);
    } else {
        kvt_count(&a->stats, KVT_ST_DELIVERED);
        int rc = fn(&a->ctx, a->state, from, &msg);
        if (rc < 0) {
            kvt_count(&a->stats, KVT_ST_HANDLER_ERRORS);
            kvt_log(sys, a->name, 1, "handler for %s from %s returned %d",
                    kvt_msg_kind_name(msg.kind), kvt_system_actor(sys, from)->name, rc);
        }
    }
    kvt_msg_clear(&msg);
    return flags;
}

void kvt_actor_fire(kvt_system_t *sys, kvt_actor_t *a, uint64_t tag)
{
    if (!a->cls->on_timer) {
        kvt_log(sys, a->name, 1, "timer (tag %llu) fired but the class has no on_timer",
                (unsigned long long)tag);
        return;
    }
    kvt_count(&a->stats, KVT_ST_TIMERS_FIRED);
    a->cls->on_timer(&a->ctx, a->state, tag);
}
