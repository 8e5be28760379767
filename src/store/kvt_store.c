/*  kvt_store.c — result codes, kind names and helpers shared by the store
    classes. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "kvt_store_int.h"

const char *kvt_store_strerror(int rc)
{
    switch (rc) {
    case KVT_STORE_OK:
        return "ok";
    case KVT_STORE_SKIPPED:
        return "skipped: already present (refreshed)";
    case KVT_STORE_DUPLICATE:
        return "duplicate: already being written";
    case KVT_STORE_ENOTFOUND:
        return "not found";
    case KVT_STORE_ENOSPACE:
        return "no space: nothing evictable can make room";
    case KVT_STORE_ETOOBIG:
        return "object larger than the backend's capacity";
    case KVT_STORE_EFULL:
        return "a preallocated table is full";
    case KVT_STORE_ESTALE:
        return "stale handle: already released, committed or reclaimed";
    case KVT_STORE_EINVAL:
        return "invalid argument";
    case KVT_STORE_EHOLDER:
        return "unknown or removed holder";
    case KVT_STORE_EIO:
        return "disk I/O error";
    case KVT_STORE_ECORRUPT:
        return "corrupt file (deleted)";
    case KVT_STORE_EBUSY:
        return "busy: queue full, or object pinned or being written";
    case KVT_STORE_ENOMEM:
        return "out of memory";
    default:
        return "unknown result";
    }
}

const char *kvt_obj_kind_name(kvt_obj_kind_t kind)
{
    switch (kind) {
    case KVT_OBJ_KV:
        return "kv";
    case KVT_OBJ_STATE:
        return "state";
    case KVT_OBJ_KV_STATE:
        return "kv_state";
    default:
        return "?";
    }
}

uint64_t kvt_store_monotonic_ns(void *arg)
{
    (void)arg;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void kvt_store_log_stderr(void *arg, int level, const char *line)
{
    (void)arg;
    if (level <= 1)
        fprintf(stderr, "kvtier %s: %s\n", level == 0 ? "error" : "warning", line);
}

void kvt_store_format(char *buf, size_t cap, const char *name, const char *fmt, va_list ap)
{
    int n = snprintf(buf, cap, "%s: ", name);
    if (n < 0 || (size_t)n >= cap)
        n = 0;
    vsnprintf(buf + n, cap - (size_t)n, fmt, ap);
}

void kvt_store_seterr(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

int kvt_store_candidates(kvt_obj_kind_t kind, kvt_obj_kind_t out[2])
{
    switch (kind) {
    case KVT_OBJ_KV:
    case KVT_OBJ_STATE:
        out[0] = kind;
        out[1] = KVT_OBJ_KV_STATE;
        return 2;
    case KVT_OBJ_KV_STATE:
        out[0] = kind;
        return 1;
    default:
        return 0;
    }
}
