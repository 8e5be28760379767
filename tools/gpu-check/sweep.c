/*  sweep.c — the copy-path sweep of tools/gpu-check.sh: gathers and
    scatters of `count` segments of `size` bytes (one plane of one layer,
    every other block, so no two segments merge) on each copy path (kernel,
    batch, per-segment, and AUTO as the dispatch chooses), plus the time to
    allocate and free pinned host memory per GiB. Prints one markdown table.

    Not part of the kvtier binary (whose sources are the .c files directly
    in tools): CMake builds it as kvt_gpu_sweep against the static library. On the host backend the
   kernel path is the host emulation, so the sweep also runs (and is checked) on a machine without a
   GPU.

    Usage: sweep [--backend cuda|hip|host] [--reps N] [--quick]
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvtier/kvt_gpu.h"

static uint64_t s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void s_quiet(void *arg, int level, const char *line)
{
    (void)arg;
    if (level <= 1)
        fprintf(stderr, "sweep: %s\n", line);
}

//  Mean ns of one gather (to_host) or scatter of `count` segments of
//  `size` bytes on `path`; 0 when the device could not be set up.
static double s_time(kvt_gpu_backend_t be, kvt_gpu_copy_path_t path, size_t size, uint32_t count,
                     bool to_host, uint32_t reps, char *desc, size_t desc_len)
{
    kvt_gpu_opts_t o = {.backend = be, .copy_path = path, .log = s_quiet};
    kvt_gpu_t *gpu = kvt_gpu_new(&o);
    if (!gpu)
        return 0;
    if (desc)
        snprintf(desc, desc_len, "%s", kvt_gpu_describe(gpu));
    double ns = 0;
    kvt_gpu_plane_desc_t d = {"K", 1, 2 * count, size, NULL};
    uint32_t *ids = malloc(count * sizeof *ids);
    uint8_t *buf = NULL;
    kvt_gpu_stream_t *s = NULL;
    if (!ids || kvt_gpu_plane_add(gpu, &d) != 0)
        goto cleanup;
    for (uint32_t i = 0; i < count; i++)
        ids[i] = 2 * (count - 1 - i);
    buf = kvt_gpu_host_alloc(gpu, (size_t)count * size);
    s = kvt_gpu_stream_new(gpu, "sweep");
    if (!buf || !s)
        goto cleanup;
    for (uint32_t r = 0; r <= reps; r++) {
        uint64_t t0 = s_now();
        int rc = to_host ? kvt_gpu_gather(s, ids, count, buf, (size_t)count * size)
                         : kvt_gpu_scatter(s, ids, count, buf, (size_t)count * size);
        if (rc != 0 || kvt_gpu_stream_synchronize(s) != 0) {
            fprintf(stderr, "sweep: %s\n", kvt_gpu_last_error());
            ns = 0;
            goto cleanup;
        }
        if (r > 0) //  the first run warms up
            ns += (double)(s_now() - t0);
    }
    ns /= reps;

cleanup:
    kvt_gpu_stream_destroy(&s);
    kvt_gpu_host_free(gpu, buf);
    kvt_gpu_destroy(&gpu);
    free(ids);
    return ns;
}

int main(int argc, char **argv)
{
    kvt_gpu_backend_t be = KVT_GPU_BACKEND_AUTO;
    uint32_t reps = 20;
    bool quick = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc) {
            const char *v = argv[++i];
            be = strcmp(v, "cuda") == 0   ? KVT_GPU_BACKEND_CUDA
                 : strcmp(v, "hip") == 0  ? KVT_GPU_BACKEND_HIP
                 : strcmp(v, "host") == 0 ? KVT_GPU_BACKEND_HOST
                                          : (kvt_gpu_backend_t)-1;
            if ((int)be < 0) {
                fprintf(stderr, "sweep: bad value '%s' for --backend\n", v);
                return 2;
            }
        } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = (uint32_t)strtoul(argv[++i], NULL, 10);
            if (reps == 0 || reps > 100000) {
                fprintf(stderr, "sweep: bad value for --reps\n");
                return 2;
            }
        } else if (strcmp(argv[i], "--quick") == 0) {
            quick = true;
        } else {
            fprintf(stderr, "usage: sweep [--backend cuda|hip|host] [--reps N] [--quick]\n");
            return 2;
        }
    }
    static const size_t sizes[] = {1024, 4096, 16384, 65536, 262144};
    static const uint32_t counts[] = {16, 128, 1024};
    static const kvt_gpu_copy_path_t paths[] = {KVT_GPU_PATH_KERNEL, KVT_GPU_PATH_BATCH,
                                                KVT_GPU_PATH_SEGMENT, KVT_GPU_PATH_AUTO};
    static const char *const path_name[] = {"auto", "kernel", "batch", "per-segment"};
    char desc[800] = "";
    if (s_time(be, KVT_GPU_PATH_AUTO, 4096, 16, true, 1, desc, sizeof desc) == 0) {
        fprintf(stderr, "sweep: cannot open the device: %s\n", kvt_gpu_last_error());
        return 1;
    }
    printf("Device: %s\n\n", desc);
    printf("| direction | segment | segments | path | us per op | GB/s |\n");
    printf("|---|---|---|---|---|---|\n");
    for (int dir = 0; dir < 2; dir++)
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
            for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
                if (sizes[k] * counts[c] > ((size_t)256 << 20))
                    continue; //  at most 256 MiB per op
                if (quick && (c == 2 || k == 0))
                    continue;
                for (size_t p = 0; p < sizeof paths / sizeof paths[0]; p++) {
                    double ns = s_time(be, paths[p], sizes[k], counts[c], dir == 0, reps, NULL, 0);
                    if (ns == 0) {
                        printf("| %s | %zu KiB | %u | %s | failed | |\n",
                               dir == 0 ? "gather" : "scatter", sizes[k] >> 10, counts[c],
                               path_name[paths[p]]);
                        continue;
                    }
                    printf("| %s | %zu KiB | %u | %s | %.1f | %.2f |\n",
                           dir == 0 ? "gather" : "scatter", sizes[k] >> 10, counts[c],
                           path_name[paths[p]], ns / 1e3, (double)(sizes[k] * counts[c]) / ns);
                }
            }
    //  Pinned host memory: allocate 1 GiB (the layer zeroes it, which makes
    //  it resident) and free it.
    kvt_gpu_opts_t o = {.backend = be, .log = s_quiet};
    kvt_gpu_t *gpu = kvt_gpu_new(&o);
    if (gpu) {
        size_t gib = (size_t)1 << 30;
        uint64_t t0 = s_now();
        char *p = kvt_gpu_host_alloc(gpu, gib);
        uint64_t t1 = s_now();
        kvt_gpu_host_free(gpu, p);
        uint64_t t2 = s_now();
        if (p)
            printf("\nPinned host memory: allocate %.1f ms per GiB, free %.1f ms per GiB\n",
                   (double)(t1 - t0) / 1e6, (double)(t2 - t1) / 1e6);
        else
            printf("\nPinned host memory: 1 GiB could not be allocated (%s)\n",
                   kvt_gpu_last_error());
        kvt_gpu_destroy(&gpu);
    }
    return 0;
}
