/*  kvt_counters — see kvt_counters.h. */
#include "kvt_counters.h"

#include <stdio.h>
#include <string.h>

void kvt_counter_add(kvt_counter_t *c, uint32_t *n, uint32_t cap, const char *name, uint64_t value)
{
    if (*n >= cap)
        return;
    snprintf(c[*n].name, sizeof c[*n].name, "%s", name);
    c[*n].value = value;
    (*n)++;
}

int kvt_counters_reply(kvt_ctx_t *ctx, kvt_aid_t to, kvt_counter_t *c, uint32_t n)
{
    kvt_msg_t m;
    memset(&m, 0, sizeof m);
    m.kind = KVT_MSG_STATS;
    snprintf(m.u.stats.from, sizeof m.u.stats.from, "%s", kvt_ctx_name(ctx, kvt_ctx_self(ctx)));
    m.u.stats.counters = c;
    m.u.stats.ncounters = n;
    return kvt_ctx_send(ctx, to, &m);
}
