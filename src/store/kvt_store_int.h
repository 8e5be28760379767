/*  kvt_store_int.h — helpers shared by the store classes (private to
    src/store): the default clock, formatted logging, kind matching, key
    hashing. */
#ifndef KVT_STORE_INT_H_INCLUDED
#define KVT_STORE_INT_H_INCLUDED

#include <stdarg.h>

#include "kvtier/kvt_store.h"

#define KVT_NIL UINT32_MAX //  "no index" in intrusive lists and tables

//  CLOCK_MONOTONIC in nanoseconds: the default clock when the caller gives none.
uint64_t kvt_store_monotonic_ns(void *arg);

//  Default log sink: levels 0 and 1 to stderr.
void kvt_store_log_stderr(void *arg, int level, const char *line);

//  Formats a line ("<name>: ...") into buf (never overflows, always terminated).
void kvt_store_format(char *buf, size_t cap, const char *name, const char *fmt, va_list ap);

//  Writes "setting=value: why" to err (if err is non-NULL).
void kvt_store_seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

//  Kinds that answer a query for `kind`, best first; returns how many (0 if
//  the kind is invalid).
int kvt_store_candidates(kvt_obj_kind_t kind, kvt_obj_kind_t out[2]);

//  True if kind is one of the three object kinds.
static inline bool kvt_store_kind_ok(kvt_obj_kind_t kind)
{
    return kind >= KVT_OBJ_KV && kind <= KVT_OBJ_KV_STATE;
}

//  Packs / unpacks a handle id: generation in the high half, index + 1 in
//  the low half (so 0 is never a valid id).
static inline uint64_t kvt_store_handle(uint32_t idx, uint32_t gen)
{
    return ((uint64_t)gen << 32) | ((uint64_t)idx + 1);
}

static inline bool kvt_store_unhandle(uint64_t id, uint32_t n, uint32_t *idx, uint32_t *gen)
{
    uint32_t low = (uint32_t)(id & 0xffffffffu);
    if (low == 0 || low > n)
        return false;
    *idx = low - 1;
    *gen = (uint32_t)(id >> 32);
    return true;
}

#endif
