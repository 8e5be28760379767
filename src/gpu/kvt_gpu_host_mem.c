/*  kvt_gpu_host_mem.c — the host backend's memory: anonymous mappings,
    zeroed by the kernel and never written here (a region costs nothing
    until used), on transparent huge pages where the system allows.

    Why huge pages: a gather / scatter touches one segment per (plane,
    layer, block) at a random place of a region of GiBs; on base pages
    nearly every segment also misses the TLB. The measurements are in
    docs/performance.md.
*/
#define _DEFAULT_SOURCE //  MAP_ANONYMOUS, madvise
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/kvt_vec.h"
#include "kvt_gpu_host_mem.h"

static int s_madvise(void *addr, size_t len, int advice)
{
    return madvise(addr, len, advice);
}

int (*kvt_gpu_host_madvise)(void *addr, size_t len, int advice) = s_madvise;

static size_t s_page(void)
{
    long page = sysconf(_SC_PAGESIZE);
    return page > 0 ? (size_t)page : 4096;
}

//  True when the sysfs file `path` selects "[never]".
static bool s_sysfs_never(const char *path, bool *inherit)
{
    char line[256] = "";
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    bool got = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    if (inherit)
        *inherit = got && strstr(line, "[inherit]") != NULL;
    return got && strstr(line, "[never]") != NULL;
}

void kvt_gpu_host_mem_init(kvt_gpu_t *gpu, kvt_host_mem_t *mem)
{
    size_t page = s_page();
#ifdef MADV_HUGEPAGE
    //  A trial advice on an untouched mapping: refused where the kernel has
    //  no THP (EINVAL) or forbids it for the process.
    void *p =
        mmap(NULL, KVT_HOST_HUGE_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    int err = 0;
    if (p == MAP_FAILED)
        err = errno;
    else {
        if (kvt_gpu_host_madvise(p, KVT_HOST_HUGE_BYTES, MADV_HUGEPAGE) != 0)
            err = errno ? errno : EINVAL;
        munmap(p, KVT_HOST_HUGE_BYTES);
    }
    bool inherit = true;
    bool never2m =
        s_sysfs_never("/sys/kernel/mm/transparent_hugepage/hugepages-2048kB/enabled", &inherit);
    bool never =
        never2m || (inherit && s_sysfs_never("/sys/kernel/mm/transparent_hugepage/enabled", NULL));
    if (err != 0) {
        mem->thp = KVT_HOST_THP_REFUSED;
        kvt_gpu_fmt(mem->thp_why, sizeof mem->thp_why,
                    "%zu KiB pages (madvise (MADV_HUGEPAGE) failed: %s)", page >> 10,
                    strerror(err));
    } else if (never) {
        mem->thp = KVT_HOST_THP_NEVER;
        kvt_gpu_fmt(mem->thp_why, sizeof mem->thp_why,
                    "%zu KiB pages (transparent huge pages are 'never' here)", page >> 10);
    } else {
        mem->thp = KVT_HOST_THP_ON;
        kvt_gpu_fmt(mem->thp_why, sizeof mem->thp_why,
                    "%u MiB transparent huge pages (madvise) for regions >= %u MiB",
                    KVT_HOST_HUGE_BYTES >> 20, KVT_HOST_HUGE_BYTES >> 20);
    }
#else
    mem->thp = KVT_HOST_THP_NONE;
    kvt_gpu_fmt(mem->thp_why, sizeof mem->thp_why, "%zu KiB pages (no MADV_HUGEPAGE here)",
                page >> 10);
#endif
    size_t used = strlen(gpu->describe);
    kvt_gpu_fmt(gpu->describe + used, sizeof gpu->describe - used, "; memory: %s", mem->thp_why);
}

void kvt_gpu_host_mem_fini(kvt_host_mem_t *mem)
{
    for (uint32_t i = 0; i < mem->nmaps; i++)
        munmap(mem->maps[i].ptr, mem->maps[i].len);
    free(mem->maps);
    mem->maps = NULL;
    mem->nmaps = mem->maps_cap = 0;
}

int kvt_gpu_host_mem_alloc(kvt_gpu_t *gpu, kvt_host_mem_t *mem, size_t bytes, void **out,
                           const char *what)
{
    size_t page = s_page();
    bool huge = mem->thp == KVT_HOST_THP_ON && bytes >= KVT_HOST_HUGE_BYTES;
    size_t unit = huge ? KVT_HOST_HUGE_BYTES : page;
    size_t len = (bytes + unit - 1) & ~(unit - 1);
    size_t map_len = huge ? len + KVT_HOST_HUGE_BYTES : len;
    if (bytes == 0 || len < bytes || map_len < len)
        return kvt_gpu_fail(KVT_GPU_ENOMEM, "host: %s of %zu bytes: size overflows", what, bytes);
    char *p = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return kvt_gpu_fail(KVT_GPU_ENOMEM, "host: %s of %zu bytes failed (%s)", what, bytes,
                            strerror(errno));
    char *start = p;
    bool refused = false;
    if (huge) {
        //  Keep the aligned middle, so every 2 MiB of it can be one page.
        start = (char *)(((uintptr_t)p + KVT_HOST_HUGE_BYTES - 1) &
                         ~(uintptr_t)(KVT_HOST_HUGE_BYTES - 1));
        if (start > p)
            munmap(p, (size_t)(start - p));
        if (p + map_len > start + len)
            munmap(start + len, (size_t)(p + map_len - (start + len)));
#ifdef MADV_HUGEPAGE
        refused = kvt_gpu_host_madvise(start, len, MADV_HUGEPAGE) != 0;
#endif
    }
    pthread_mutex_lock(&gpu->mu);
    int rc =
        kvt_vec_reserve((void **)&mem->maps, &mem->maps_cap, mem->nmaps + 1, sizeof *mem->maps);
    bool first_refusal = false;
    if (rc == 0) {
        mem->maps[mem->nmaps++] = (kvt_host_map_t){start, len};
        if (huge && refused)
            first_refusal = mem->advice_refused++ == 0;
        else if (huge)
            mem->huge_regions++;
    }
    pthread_mutex_unlock(&gpu->mu);
    if (rc != 0) {
        munmap(start, len);
        return kvt_gpu_fail(KVT_GPU_ENOMEM, "host: %s of %zu bytes: out of memory", what, bytes);
    }
    //  The region works on base pages all the same; say so once.
    if (first_refusal)
        kvt_gpu_log(gpu, 1,
                    "host: madvise (MADV_HUGEPAGE) refused for a %s of %zu bytes: "
                    "base pages for the regions it refuses",
                    what, bytes);
    *out = start;
    return 0;
}

void kvt_gpu_host_mem_free(kvt_gpu_t *gpu, kvt_host_mem_t *mem, void *ptr)
{
    if (!ptr)
        return;
    kvt_host_map_t found = {NULL, 0};
    pthread_mutex_lock(&gpu->mu);
    for (uint32_t i = mem->nmaps; i-- > 0;)
        if (mem->maps[i].ptr == ptr) {
            found = mem->maps[i];
            mem->maps[i] = mem->maps[--mem->nmaps];
            break;
        }
    pthread_mutex_unlock(&gpu->mu);
    //  The front frees only what a backend allocation returned.
    assert(found.ptr);
    if (found.ptr)
        munmap(found.ptr, found.len);
}
