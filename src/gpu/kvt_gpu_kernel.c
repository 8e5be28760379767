/*  kvt_gpu_kernel.c — the gather / scatter kernel's source, its table
    builder, the host emulation of its threads, and the dispatch rule of the
    device backend (kernel, batched copy, one copy per segment).

    The thread code (KVT_GPU_KERNEL_THREAD in kvt_gpu_kernel.h) is compiled
    here as C and stringified into the kernel source, so what the host
    emulation checks byte for byte is the index arithmetic the device runs.
*/
#include <stdlib.h>
#include <string.h>

#include "kvt_gpu_kernel.h"

#define KVT_STR_(...) #__VA_ARGS__
#define KVT_STR(...)  KVT_STR_(__VA_ARGS__)

// ------------------------------------------------------- kernel source ----

//  The device side: pointers are the table's words, 16-byte words move as
//  one aligned vector load and store.
static const char s_source[] =
    "typedef struct { alignas(16) unsigned long long w[2]; } kvt_v16;\n"
    "#define KVT_K_PTR(word) ((char *)(word))\n"
    "#define KVT_K_COPY16(d, s) (*(kvt_v16 *)(d) = *(const kvt_v16 *)(s))\n" KVT_STR(
        KVT_GPU_KERNEL_THREAD(
            static __device__)) "\n"
                                "extern \"C\" __global__ void " KVT_GPU_KERNEL_NAME
                                "(const unsigned long long *tab, int to_host)\n"
                                "{\n"
                                "    kvt_k_thread(tab, to_host, blockIdx.x, "
                                "gridDim.x, threadIdx.x, blockDim.x);\n"
                                "}\n";

const char *kvt_gpu_kernel_source(void)
{
    return s_source;
}

// ------------------------------------------------------ host emulation ----

#define KVT_K_PTR(word)    ((char *)(uintptr_t)(word))
#define KVT_K_COPY16(d, s) memcpy((d), (s), 16)
KVT_GPU_KERNEL_THREAD(static)
#undef KVT_K_PTR
#undef KVT_K_COPY16

void kvt_gpu_ktab_run_host(const uint64_t *tab, bool to_host, uint32_t grid)
{
    //  Thread blocks and their threads one after another: the segments of a
    //  launch never overlap, so any order writes the same bytes.
    const unsigned long long *t = (const unsigned long long *)tab;
    for (uint32_t b = 0; b < grid; b++)
        for (uint32_t th = 0; th < KVT_GPU_KERNEL_THREADS; th++)
            kvt_k_thread(t, to_host, b, grid, th, KVT_GPU_KERNEL_THREADS);
}

// ---------------------------------------------------------------- table ----

size_t kvt_gpu_ktab_bytes(uint32_t njobs, uint32_t nent, uint64_t nids)
{
    return 8 * (3 + 4 * (size_t)nent + 4 * (size_t)njobs) + 8 * (size_t)((nids + 1) / 2);
}

uint64_t kvt_gpu_ktab_fill(uint64_t *tab, const kvt_gpu_kent_t *ent, uint32_t nent,
                           const kvt_gpu_kjob_t *job, uint32_t njobs)
{
    tab[0] = njobs;
    tab[1] = nent;
    uint64_t *e = tab + 3;
    for (uint32_t k = 0; k < nent; k++, e += 4) {
        e[0] = (uint64_t)(uintptr_t)ent[k].base;
        e[1] = ent[k].block_bytes;
        e[2] = ent[k].chunk_base;
        e[3] = ent[k].layer;
    }
    uint64_t *j = e;
    uint32_t *ids = (uint32_t *)(j + 4 * (size_t)njobs);
    uint64_t seg = 0, at = 0;
    for (uint32_t k = 0; k < njobs; k++, j += 4) {
        j[0] = (uint64_t)(uintptr_t)job[k].chunk;
        j[1] = job[k].n;
        j[2] = at;
        j[3] = seg;
        memcpy(ids + at, job[k].block, (size_t)job[k].n * sizeof *ids);
        at += job[k].n;
        seg += (uint64_t)nent * job[k].n;
    }
    tab[2] = seg;
    return seg;
}

uint32_t kvt_gpu_ktab_nentries(const kvt_gpu_t *gpu)
{
    uint32_t n = 0;
    for (uint32_t p = 0; p < gpu->nplanes; p++)
        n += gpu->planes[p].layers;
    return n;
}

uint32_t kvt_gpu_ktab_entries(const kvt_gpu_t *gpu, kvt_gpu_kent_t *ent, uint32_t cap)
{
    uint32_t n = 0;
    for (uint32_t p = 0; p < gpu->nplanes; p++) {
        const kvt_gpu_plane_t *pl = &gpu->planes[p];
        for (uint32_t l = 0; l < pl->layers && n < cap; l++, n++) {
            ent[n].base = pl->layer_base[l];
            ent[n].block_bytes = pl->block_bytes;
            ent[n].chunk_base = pl->chunk_base;
            ent[n].layer = l;
        }
    }
    return n;
}

kvt_gpu_copy_t *kvt_gpu_kernel_copy_alloc(kvt_gpu_dir_t dir, uint32_t count,
                                          const kvt_gpu_kjob_t *jobs, uint32_t njobs)
{
    uint64_t n = 0;
    for (uint32_t k = 0; k < njobs; k++)
        n += jobs[k].n;
    void *extra = NULL;
    kvt_gpu_copy_t *copy = kvt_gpu_copy_alloc_extra(
        dir, count, (size_t)njobs * sizeof(kvt_gpu_kjob_t) + (size_t)n * sizeof(uint32_t), &extra);
    if (!copy)
        return NULL;
    kvt_gpu_kjob_t *job = extra;
    uint32_t *ids = (uint32_t *)(job + njobs);
    for (uint32_t k = 0; k < njobs; k++) {
        memcpy(ids, jobs[k].block, (size_t)jobs[k].n * sizeof *ids);
        job[k] = (kvt_gpu_kjob_t){.chunk = jobs[k].chunk, .block = ids, .n = jobs[k].n};
        ids += jobs[k].n;
    }
    copy->job = job;
    copy->njobs = njobs;
    copy->nblocks = n;
    return copy;
}

uint64_t *kvt_gpu_ktab_of_copy(const kvt_gpu_t *gpu, const kvt_gpu_copy_t *copy, size_t *bytes)
{
    if (!copy->job || copy->nblocks == 0)
        return NULL;
    uint32_t nent = kvt_gpu_ktab_nentries(gpu);
    kvt_gpu_kent_t *ent = malloc((size_t)nent * sizeof *ent);
    *bytes = kvt_gpu_ktab_bytes(copy->njobs, nent, copy->nblocks);
    uint64_t *tab = malloc(*bytes);
    if (!ent || !tab) {
        free(ent);
        free(tab);
        return NULL;
    }
    kvt_gpu_ktab_entries(gpu, ent, nent);
    kvt_gpu_ktab_fill(tab, ent, nent, copy->job, copy->njobs);
    free(ent);
    return tab;
}

bool kvt_gpu_kernel_run_copy(const kvt_gpu_t *gpu, const kvt_gpu_copy_t *copy)
{
    if (gpu->opts.copy_path != KVT_GPU_PATH_KERNEL || !copy->job)
        return false;
    size_t bytes = 0;
    uint64_t *tab = kvt_gpu_ktab_of_copy(gpu, copy, &bytes);
    if (!tab)
        return false;
    kvt_gpu_ktab_run_host(tab, copy->dir == KVT_GPU_D2H,
                          kvt_gpu_kernel_grid(tab[2], gpu->opts.kernel_max_blocks));
    free(tab);
    return true;
}

uint32_t kvt_gpu_kernel_grid(uint64_t segments, uint32_t max_blocks)
{
    uint64_t g = segments < max_blocks ? segments : max_blocks;
    return g == 0 ? 1 : (uint32_t)g;
}

// ------------------------------------------------------------- dispatch ----

kvt_gpu_copy_path_t kvt_gpu_dispatch(const kvt_gpu_dispatch_t *d, bool blocks, bool pinned,
                                     uint64_t segments, uint32_t merged, size_t bytes)
{
    //  The kernel reads and writes the host buffer in place: it must be
    //  pinned (mapped into the device's address space).
    bool kernel = d->kernel_ready && blocks && pinned && segments > 1;
    if (kernel && d->path == KVT_GPU_PATH_KERNEL)
        return KVT_GPU_PATH_KERNEL;
    if (kernel && d->path == KVT_GPU_PATH_AUTO && bytes / segments <= d->crossover_bytes)
        return KVT_GPU_PATH_KERNEL;
    bool batch = d->batch_ready && pinned && merged > 1;
    if (batch && d->path != KVT_GPU_PATH_SEGMENT)
        return KVT_GPU_PATH_BATCH;
    return KVT_GPU_PATH_SEGMENT;
}

size_t kvt_gpu_kernel_crossover(const size_t *size, const uint64_t *time_kernel,
                                const uint64_t *time_other, uint32_t nsizes)
{
    size_t cross = 0;
    for (uint32_t k = 0; k < nsizes; k++) {
        if (time_kernel[k] >= time_other[k])
            break;
        cross = size[k];
    }
    return cross;
}
