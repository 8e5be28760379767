/*  cmd_bench_store_evict — the eviction-under-pressure figure of `kvtier
    bench store` (cmd_bench_store_evict.c says how). Private to the
    command. */
#ifndef CMD_BENCH_STORE_EVICT_H_INCLUDED
#define CMD_BENCH_STORE_EVICT_H_INCLUDED

#include <stdint.h>

#include "kvtier/kvt_pool.h"

typedef struct {
    uint64_t requests;      //  requests in the stream
    uint64_t want_chunks;   //  chunks the requests asked for
    uint64_t hit_chunks;    //  chunks of resumable prefixes found (chunks + image)
    uint64_t hit_bytes;     //  bytes of those chunks and the images resumed from
    uint64_t evictions;     //  pool evictions
    uint64_t orphan_images; //  of which images evicted with their chunk (VALUE)
    double hit_ratio;       //  hit_chunks / want_chunks
    double seconds;         //  wall time of the run
} kvt_bevict_t;

typedef struct {
    uint64_t pool_bytes;  //  pool capacity
    uint64_t work_bytes;  //  bytes of every chunk and image of the stream (its working set)
    uint32_t chunk_bytes; //  bytes of one chunk
    uint32_t image_bytes; //  bytes of one state image
    uint64_t seed;        //  stream seed
    kvt_bevict_t lru;     //  LRU order
    kvt_bevict_t value;   //  VALUE order
} kvt_bevict_pair_t;

//  Runs the same seeded stream against an LRU pool and a VALUE pool.
//  Returns 0, or -1 when a pool cannot be made or an operation fails.
int kvt_bench_store_evict(kvt_bevict_pair_t *out);

#endif
