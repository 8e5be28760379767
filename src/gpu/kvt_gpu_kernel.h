/*  kvt_gpu_kernel.h — private to src/gpu: the gather / scatter kernel of
    the device backend, its table, its host emulation and its dispatch rule.

    One launch moves every (plane, layer, block) segment of one chunk, or of
    a batch of chunks, between the KV planes and the pinned chunk buffers
    (read and written in place, through the unified address space). What the
    kernel reads is one table of 64-bit words:

        header   [0] jobs   [1] entries   [2] segments (all jobs)
        entries  per (plane, layer): device base of the layer, block bytes,
                 P[p] (per-block bytes of the planes before it), layer index
        jobs     per chunk: chunk buffer, n (blocks), index of its first
                 block id, its first segment
        ids      the block ids of every job, 32-bit, job after job

    Segment s of job j (local index t = s - first segment) is entry
    e = t / n, block i = t % n: device base[e] + ids[i] x bb[e] <-> chunk
    + n x P[e] + (layer[e] x n + i) x bb[e], i.e. the documented chunk
    layout. The index arithmetic and the copy loop of one thread are one
    piece of source (KVT_GPU_KERNEL_THREAD) compiled twice: as C for the host
    emulation (the host backend's KERNEL copy path, which the conformance
    suite runs) and, stringified, into the kernel source that NVRTC / hiprtc
    compile at run time (kvt_gpu_kernel_rtc.c).
*/
#ifndef KVT_GPU_KERNEL_H_INCLUDED
#define KVT_GPU_KERNEL_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvt_gpu_int.h"

#define KVT_GPU_KERNEL_NAME    "kvt_gpu_kernel_copy" //  the kernel's symbol
#define KVT_GPU_KERNEL_THREADS 256u                  //  threads per thread block

//  One thread of the kernel: thread `tid` of `nt` in thread block `bid` of
//  `nb`. Thread blocks stride over the segments, threads over a segment's
//  16-byte words (bytes when an end or the length is not 16-byte aligned).
//  KVT_K_COPY16 (dst, src) and KVT_K_PTR (word) are defined by each side.
#define KVT_GPU_KERNEL_THREAD(QUAL)                                                      \
    QUAL void kvt_k_segment(const unsigned long long *tab, unsigned long long seg,       \
                            unsigned long long *dev, unsigned long long *host,           \
                            unsigned long long *len)                                     \
    {                                                                                    \
        unsigned long long njobs = tab[0], nent = tab[1];                                \
        const unsigned long long *ent = tab + 3;                                         \
        const unsigned long long *job = ent + 4 * nent;                                  \
        const unsigned int *ids = (const unsigned int *)(job + 4 * njobs);               \
        unsigned long long lo = 0, hi = njobs;                                           \
        while (hi - lo > 1) {                                                            \
            unsigned long long mid = lo + (hi - lo) / 2;                                 \
            if (job[4 * mid + 3] <= seg)                                                 \
                lo = mid;                                                                \
            else                                                                         \
                hi = mid;                                                                \
        }                                                                                \
        const unsigned long long *j = job + 4 * lo;                                      \
        unsigned long long n = j[1], t = seg - j[3], e = t / n, i = t % n;               \
        const unsigned long long *en = ent + 4 * e;                                      \
        unsigned long long bb = en[1];                                                   \
        *dev = en[0] + (unsigned long long)ids[j[2] + i] * bb;                           \
        *host = j[0] + n * en[2] + (en[3] * n + i) * bb;                                 \
        *len = bb;                                                                       \
    }                                                                                    \
    QUAL void kvt_k_thread(const unsigned long long *tab, int to_host, unsigned int bid, \
                           unsigned int nb, unsigned int tid, unsigned int nt)           \
    {                                                                                    \
        unsigned long long total = tab[2];                                               \
        for (unsigned long long seg = bid; seg < total; seg += nb) {                     \
            unsigned long long dev, host, len;                                           \
            kvt_k_segment(tab, seg, &dev, &host, &len);                                  \
            char *dst = KVT_K_PTR(to_host ? host : dev);                                 \
            const char *src = KVT_K_PTR(to_host ? dev : host);                           \
            if (((dev | host | len) & 15) == 0) {                                        \
                for (unsigned long long k = tid; k < len / 16; k += nt)                  \
                    KVT_K_COPY16(dst + 16 * k, src + 16 * k);                            \
            } else {                                                                     \
                for (unsigned long long k = tid; k < len; k += nt)                       \
                    dst[k] = src[k];                                                     \
            }                                                                            \
        }                                                                                \
    }

//  The kernel source (NUL-terminated CUDA / HIP C++, no include).
const char *kvt_gpu_kernel_source(void);

//  One (plane, layer) of a kernel table.
typedef struct {
    const char *base;   //  device address of the layer
    size_t block_bytes; //  bytes of one block in this layer
    size_t chunk_base;  //  P[p] of its plane
    uint32_t layer;     //  layer index within its plane
} kvt_gpu_kent_t;

//  Bytes of the table for `njobs` jobs, `nent` entries, `nids` block ids.
size_t kvt_gpu_ktab_bytes(uint32_t njobs, uint32_t nent, uint64_t nids);

//  Writes the table into `tab` (kvt_gpu_ktab_bytes long, 8-byte aligned);
//  returns the number of segments.
uint64_t kvt_gpu_ktab_fill(uint64_t *tab, const kvt_gpu_kent_t *ent, uint32_t nent,
                           const kvt_gpu_kjob_t *job, uint32_t njobs);

//  The entries of a device's planes (gpu->planes, every layer); returns how
//  many (≤ cap).
uint32_t kvt_gpu_ktab_entries(const kvt_gpu_t *gpu, kvt_gpu_kent_t *ent, uint32_t cap);

//  Entries of every plane and layer a device has.
uint32_t kvt_gpu_ktab_nentries(const kvt_gpu_t *gpu);

//  Runs the kernel's threads on the CPU over `tab` (grid thread blocks of
//  KVT_GPU_KERNEL_THREADS): the host emulation.
void kvt_gpu_ktab_run_host(const uint64_t *tab, bool to_host, uint32_t grid);

//  The copy batch of a gather / scatter of `njobs` chunks with room for
//  `count` segments and a copy of the chunks and their block ids, which it
//  records (copy->job, ->njobs, ->nblocks): the kernel path builds its table
//  from them. One block: free it with free ().
kvt_gpu_copy_t *kvt_gpu_kernel_copy_alloc(kvt_gpu_dir_t dir, uint32_t count,
                                          const kvt_gpu_kjob_t *jobs, uint32_t njobs);

//  Builds the table of one gather / scatter batch (malloc'd, *bytes set) or
//  NULL (out of memory, or not a block batch).
uint64_t *kvt_gpu_ktab_of_copy(const kvt_gpu_t *gpu, const kvt_gpu_copy_t *copy, size_t *bytes);

//  The host backend's KERNEL copy path: runs a gather / scatter batch
//  through its kernel table on the CPU (kvt_gpu_ktab_run_host) and returns
//  true; false when the device is not configured for it, the batch is not
//  a gather / scatter, or the table cannot be allocated (the caller then
//  runs its ordinary loop, which writes the same bytes).
bool kvt_gpu_kernel_run_copy(const kvt_gpu_t *gpu, const kvt_gpu_copy_t *copy);

//  Thread blocks of a launch over `segments`, capped at max_blocks.
uint32_t kvt_gpu_kernel_grid(uint64_t segments, uint32_t max_blocks);

//  The dispatch rule of the device backend for one copy batch.
typedef struct {
    kvt_gpu_copy_path_t path; //  the configured path (AUTO: by segment size)
    bool kernel_ready;        //  a kernel is loaded and not turned off
    bool batch_ready;         //  the runtime has a batched copy and it is not turned off
    size_t crossover_bytes;   //  AUTO: segments up to this size take the kernel (0: never)
} kvt_gpu_dispatch_t;

//  The path a batch takes first: KERNEL, BATCH or SEGMENT (never AUTO).
//  `segments` counts (plane, layer, block) segments before merging, `merged`
//  the batch's merged segments, `bytes` their sum; `blocks` tells a gather /
//  scatter (the kernel needs one) and `pinned` a pinned host buffer.
kvt_gpu_copy_path_t kvt_gpu_dispatch(const kvt_gpu_dispatch_t *d, bool blocks, bool pinned,
                                     uint64_t segments, uint32_t merged, size_t bytes);

//  The start-up micro-benchmark's choice: with time_kernel[k] and
//  time_other[k] the times of the same copy of count segments of size[k]
//  bytes (sizes ascending), the largest size up to which the kernel was
//  faster at every measured size (0: never faster at the smallest).
size_t kvt_gpu_kernel_crossover(const size_t *size, const uint64_t *time_kernel,
                                const uint64_t *time_other, uint32_t nsizes);

//  Run-time compilers (kvt_gpu_kernel_rtc.c), loaded with dlopen.
typedef enum {
    KVT_GPU_RTC_NVRTC = 1,  //  NVIDIA NVRTC (libnvrtc)
    KVT_GPU_RTC_HIPRTC = 2, //  AMD hiprtc (libhiprtc, or inside libamdhip64 up to ROCm 5)
} kvt_gpu_rtc_t;

//  Compiles the kernel source for `arch` ("compute_90", "gfx90a") into a
//  loadable image (PTX for NVRTC, a code object for hiprtc), malloc'd, in
//  *image / *len. 0; or KVT_GPU_EUNSUPPORTED when the compiler library is
//  absent, KVT_GPU_EDEVICE when compilation fails; `why` says which library
//  and version was used or what failed (with the compiler's log head).
int kvt_gpu_rtc_compile(kvt_gpu_rtc_t rtc, const char *arch, void **image, size_t *len, char *why,
                        size_t why_len);

//  Whether the compiler library loads; `why` names it and its version, or
//  what was tried.
bool kvt_gpu_rtc_available(kvt_gpu_rtc_t rtc, char *why, size_t why_len);

#endif
