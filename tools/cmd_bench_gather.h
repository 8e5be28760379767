/*  cmd_bench_gather — what `kvtier bench gather` measures at one block
    size (cmd_bench_gather.c says how). Private to the command. */
#ifndef CMD_BENCH_GATHER_H_INCLUDED
#define CMD_BENCH_GATHER_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvtier/kvt_gpu.h"

typedef struct {
    const char *json;          //  --json PATH, or NULL
    kvt_gpu_backend_t backend; //  --backend
    uint32_t planes;           //  --planes
    uint32_t layers;           //  --layers
    uint32_t blocks;           //  --blocks (per chunk)
    uint64_t pool_bytes;       //  --pool
    uint64_t ring_bytes;       //  --ring
    uint32_t rounds;           //  --rounds
    uint32_t round_ms;         //  --round-ms
    uint32_t inflight;         //  --inflight
    uint64_t seed;             //  --seed
    bool quiet;                //  --quiet: no table
} kvt_bgather_opts_t;

typedef struct {
    unsigned block_kib;   //  block size across planes and layers
    size_t seg_bytes;     //  bytes of one (plane, layer) segment
    size_t chunk_bytes;   //  bytes of one chunk
    uint32_t num_blocks;  //  blocks in the pool
    double gather;        //  GB/s, median
    double scatter;       //  GB/s, median
    double base_chunk;    //  baseline pool -> chunk GB/s, median
    double base_pool;     //  baseline chunk -> pool GB/s, median
    double seg_chunk;     //  host: per-segment memcpy, gather direction, GB/s, median
    double seg_pool;      //  host: per-segment memcpy, scatter direction, GB/s, median
    double gather_ratio;  //  median over rounds of gather / baseline
    double scatter_ratio; //  median over rounds of scatter / baseline
    double gather_seg;    //  host: median over rounds of gather / per-segment memcpy
    double scatter_seg;   //  host: median over rounds of scatter / per-segment memcpy
    bool verified;        //  the byte check passed
} kvt_bgather_result_t;

//  Measures block size r->block_kib (set by the caller) with options o:
//  fills *r, the device's description in describe and the backend that
//  ran in *backend. 0, or -1 with a message on stderr.
int kvt_bgather_measure(const kvt_bgather_opts_t *o, kvt_bgather_result_t *r, char *describe,
                        size_t describe_len, kvt_gpu_backend_t *backend);

#endif
