/*  kvt_gpu_host_mem.h — the host backend's memory (kvt_gpu_host_mem.c):
    device regions (planes, state units) and pinned chunk buffers.

    Every allocation is an anonymous mapping, zeroed by the kernel and not
    touched here, so a region costs nothing until it is written. A region
    of at least KVT_HOST_HUGE_BYTES is aligned to it and advised onto
    transparent huge pages (madvise MADV_HUGEPAGE); when the system has no
    THP, or refuses the advice, it stays on base pages and works the same.
    The device's selection line says which (probed once at open).
*/
#ifndef KVT_GPU_HOST_MEM_H_INCLUDED
#define KVT_GPU_HOST_MEM_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvt_gpu_int.h"

#define KVT_HOST_HUGE_BYTES (2u << 20) //  a transparent huge page (x86-64, arm64 4K)

//  What the open-time probe found.
typedef enum {
    KVT_HOST_THP_ON = 1,      //  madvise accepted and THP is enabled: regions get huge pages
    KVT_HOST_THP_NEVER = 2,   //  THP is switched off on this system ("never")
    KVT_HOST_THP_REFUSED = 3, //  madvise (MADV_HUGEPAGE) failed
    KVT_HOST_THP_NONE = 4,    //  no MADV_HUGEPAGE on this platform
} kvt_host_thp_t;

//  One mapping handed out (ptr is also what the caller frees).
typedef struct {
    void *ptr;  //  start (KVT_HOST_HUGE_BYTES aligned when huge)
    size_t len; //  mapped bytes (a multiple of the page size)
} kvt_host_map_t;

//  The host backend's memory state (inside kvt_host_t; under gpu->mu).
typedef struct {
    kvt_host_thp_t thp;      //  probe result
    char thp_why[120];       //  what the selection line says about pages
    kvt_host_map_t *maps;    //  live mappings
    uint32_t nmaps;          //  entries used in maps
    uint32_t maps_cap;       //  entries allocated in maps
    uint64_t huge_regions;   //  regions advised onto huge pages
    uint64_t advice_refused; //  regions whose advice failed after a good probe
} kvt_host_mem_t;

//  The madvise the host backend calls: tests replace it to make the advice
//  fail (set it before kvt_gpu_new; it is read without a lock).
extern int (*kvt_gpu_host_madvise)(void *addr, size_t len, int advice);

//  Probes THP once (a small untouched mapping) and appends what it found
//  to the device's selection line.
void kvt_gpu_host_mem_init(kvt_gpu_t *gpu, kvt_host_mem_t *mem);

//  Unmaps what is still mapped and frees the table.
void kvt_gpu_host_mem_fini(kvt_host_mem_t *mem);

//  A zeroed, untouched region of `bytes` (> 0). 0 or KVT_GPU_ENOMEM naming
//  `what` and the size.
int kvt_gpu_host_mem_alloc(kvt_gpu_t *gpu, kvt_host_mem_t *mem, size_t bytes, void **out,
                           const char *what);

//  Unmaps a region from kvt_gpu_host_mem_alloc. NULL-safe.
void kvt_gpu_host_mem_free(kvt_gpu_t *gpu, kvt_host_mem_t *mem, void *ptr);

//  The probe result of a host-backend device (tests; 0 on other backends).
kvt_host_thp_t kvt_gpu_host_thp(kvt_gpu_t *gpu);

//  Regions advised onto huge pages so far, and advice refusals after a
//  good probe (tests; 0 on other backends).
void kvt_gpu_host_mem_counts(kvt_gpu_t *gpu, uint64_t *huge_regions, uint64_t *advice_refused);

#endif
