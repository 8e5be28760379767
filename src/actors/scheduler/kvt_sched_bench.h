/*  kvt_sched_bench — the internal bench hook of the scheduler core, for
    `kvtier bench admit` (tools/cmd_bench_admit.c) only: it reaches the
    state-offload index of a core built through the embeddable API
    (kvtier/kvt_sched.h), which the API does not expose one part at a time.
    Not public (not installed), no product or test path calls it; the core
    stays the only owner of its index. */
#ifndef KVT_SCHED_BENCH_H_INCLUDED
#define KVT_SCHED_BENCH_H_INCLUDED

#include <stdint.h>

#include "kvtier/kvt_sched.h"

//  How many stats reads of the index hold one deep (key-set) check (I1).
uint32_t kvt_sched_bench_deep_every(void);

//  Notes the images h[0..n) in the core's state-offload index, as their
//  store quorums at now_us would. 0, or -1 when the core has no index
//  (a dense model).
int kvt_sched_bench_note_images(kvt_sched_t *self, const kvt_hash_t *h, uint32_t n,
                                uint64_t now_us);

//  One stats read of the core's state-offload index (the cheap invariant
//  check on every read, one slice of the key-set check): the images it
//  holds and the invariant violations counted so far. 0, or -1 when the
//  core has no index.
int kvt_sched_bench_index_read(kvt_sched_t *self, uint64_t *images, uint64_t *violations);

#endif
