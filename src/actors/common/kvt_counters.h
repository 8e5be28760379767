/*  kvt_counters — building and sending a Stats reply. */
#ifndef KVT_COUNTERS_H_INCLUDED
#define KVT_COUNTERS_H_INCLUDED

#include <stdint.h>

#include "kvtier/kvt_actor.h"

//  Appends (name, value) to c[] if *n < cap.
void kvt_counter_add(kvt_counter_t *c, uint32_t *n, uint32_t cap, const char *name, uint64_t value);

//  Sends a Stats reply carrying c[0..n) from this actor to `to`.
int kvt_counters_reply(kvt_ctx_t *ctx, kvt_aid_t to, kvt_counter_t *c, uint32_t n);

#endif
