/*  test_gpu_kernel.c — the gather / scatter kernel (kvt_gpu_kernel.h): its
    source compiled at run time by NVRTC and by hiprtc (both present on the
    development machine: there the test compiles and checks the image; it
    skips, naming what is missing, where a library is absent), its table and
    the host emulation of its threads against the documented chunk layout
    (one chunk and a batch of chunks, any thread-block cap), and the dispatch
    rule and crossover choice of the device backend as pure functions.

    That the emulation passes the whole backend contract byte for byte is
    test_gpu_conformance.c's host KERNEL rows.
*/
#define _GNU_SOURCE //  memmem
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/kvt_gpu_kernel.h"
#include "kvtier/kvt_gpu.h"

// ------------------------------------------------------ the compilers ----

Test(kernel, the_source_compiles_with_nvrtc_to_ptx_that_has_the_kernel)
{
    char why[256];
    if (!kvt_gpu_rtc_available(KVT_GPU_RTC_NVRTC, why, sizeof why))
        cr_skip_test("NVRTC not present here: %s", why);
    void *image = NULL;
    size_t len = 0;
    int rc = kvt_gpu_rtc_compile(KVT_GPU_RTC_NVRTC, "compute_80", &image, &len, why, sizeof why);
    cr_assert_eq(rc, 0, "%s", why);
    cr_assert_gt(len, 100, "a PTX image: %zu bytes", len);
    const char *ptx = image;
    cr_assert_eq(ptx[len - 1], 0, "PTX is NUL-terminated");
    cr_assert(strstr(ptx, ".entry " KVT_GPU_KERNEL_NAME), "the kernel's entry is in the PTX");
    cr_assert(strstr(ptx, ".target sm_80"), "compiled for the asked architecture");
    //  The 16-byte words move as vector loads and stores.
    cr_assert(strstr(ptx, ".v2.u64") || strstr(ptx, ".v2.b64") || strstr(ptx, ".v4.u32"),
              "vector copies in the PTX");
    cr_assert(strstr(why, "nvrtc"), "%s", why);
    free(image);
}

Test(kernel, the_source_compiles_with_hiprtc_to_a_code_object)
{
    char why[256];
    if (!kvt_gpu_rtc_available(KVT_GPU_RTC_HIPRTC, why, sizeof why))
        cr_skip_test("hiprtc not present here: %s", why);
    void *image = NULL;
    size_t len = 0;
    int rc = kvt_gpu_rtc_compile(KVT_GPU_RTC_HIPRTC, "gfx90a", &image, &len, why, sizeof why);
    cr_assert_eq(rc, 0, "%s", why);
    cr_assert_gt(len, 100, "a code object: %zu bytes", len);
    //  An ELF code object or an offload bundle that carries one, naming the
    //  kernel.
    const char *p = image;
    bool elf = memcmp(p, "\177ELF", 4) == 0;
    bool bundle = len > 24 && memcmp(p, "__CLANG_OFFLOAD_BUNDLE__", 24) == 0;
    cr_assert(elf || bundle, "an ELF or offload bundle (starts %02x %02x %02x %02x)",
              (unsigned char)p[0], (unsigned char)p[1], (unsigned char)p[2], (unsigned char)p[3]);
    cr_assert_not_null(memmem(image, len, KVT_GPU_KERNEL_NAME, strlen(KVT_GPU_KERNEL_NAME)),
                       "the kernel's symbol is in the code object");
    free(image);
}

Test(kernel, a_compile_failure_names_the_compiler_and_the_target)
{
    char why[256];
    if (!kvt_gpu_rtc_available(KVT_GPU_RTC_NVRTC, why, sizeof why))
        cr_skip_test("NVRTC not present here: %s", why);
    void *image = (void *)1;
    size_t len = 7;
    int rc = kvt_gpu_rtc_compile(KVT_GPU_RTC_NVRTC, "compute_1", &image, &len, why, sizeof why);
    cr_assert_eq(rc, KVT_GPU_EDEVICE);
    cr_assert_null(image);
    cr_assert_eq(len, 0);
    cr_assert(strstr(why, "nvrtc") && strstr(why, "compiling for compute_1 failed"), "%s", why);
}

// --------------------------------------------- table and host emulation ----

//  Two planes: 3 layers of 48-byte blocks (16-byte words) and 2 layers of
//  20-byte blocks (bytes), NB blocks each.
#define NB 23
static const uint32_t s_nl[2] = {3, 2};
static const size_t s_bb[2] = {48, 20};
#define PER_BLOCK (3 * 48 + 2 * 20)

typedef struct {
    uint8_t *layer[5];     //  layer regions, plane 0 then plane 1
    kvt_gpu_kent_t ent[5]; //  the table entries
} planes_t;

static uint8_t s_pat(uint32_t e, uint32_t b, size_t k)
{
    uint32_t x = (e * 977u + b) * 2654435761u + (uint32_t)k * 40503u;
    return (uint8_t)(x >> 13);
}

static void s_planes(planes_t *pl)
{
    uint32_t e = 0;
    size_t before = 0;
    for (uint32_t p = 0; p < 2; p++) {
        for (uint32_t l = 0; l < s_nl[p]; l++, e++) {
            //  16-byte aligned, as device allocations are.
            pl->layer[e] = aligned_alloc(16, (NB * s_bb[p] + 15) & ~(size_t)15);
            cr_assert_not_null(pl->layer[e]);
            for (uint32_t b = 0; b < NB; b++)
                for (size_t k = 0; k < s_bb[p]; k++)
                    pl->layer[e][b * s_bb[p] + k] = s_pat(e, b, k);
            pl->ent[e] = (kvt_gpu_kent_t){(const char *)pl->layer[e], s_bb[p], before, l};
        }
        before += s_nl[p] * s_bb[p];
    }
}

static void s_planes_free(planes_t *pl)
{
    for (int e = 0; e < 5; e++)
        free(pl->layer[e]);
}

//  Offset of (plane p, layer l, list index i) in a chunk of n blocks, from
//  the documented layout.
static size_t s_off(uint32_t p, uint32_t l, uint32_t n, uint32_t i)
{
    size_t before = p == 0 ? 0 : s_nl[0] * s_bb[0];
    return n * before + ((size_t)l * n + i) * s_bb[p];
}

//  Checks that `chunk` holds blocks[] of every layer in the layout.
static void s_check_chunk(const uint8_t *chunk, const uint32_t *blocks, uint32_t n)
{
    uint32_t e = 0;
    for (uint32_t p = 0; p < 2; p++)
        for (uint32_t l = 0; l < s_nl[p]; l++, e++)
            for (uint32_t i = 0; i < n; i++)
                for (size_t k = 0; k < s_bb[p]; k++)
                    cr_assert_eq(chunk[s_off(p, l, n, i) + k], s_pat(e, blocks[i], k),
                                 "plane %u layer %u block %u (index %u) byte %zu", p, l, blocks[i],
                                 i, k);
}

static uint64_t *s_table(const planes_t *pl, const kvt_gpu_kjob_t *jobs, uint32_t njobs)
{
    uint64_t nids = 0;
    for (uint32_t j = 0; j < njobs; j++)
        nids += jobs[j].n;
    uint64_t *tab = malloc(kvt_gpu_ktab_bytes(njobs, 5, nids));
    cr_assert_not_null(tab);
    uint64_t segs = kvt_gpu_ktab_fill(tab, pl->ent, 5, jobs, njobs);
    cr_assert_eq(segs, 5 * nids, "one segment per (plane, layer, block)");
    return tab;
}

Test(kernel, the_emulated_kernel_gathers_a_batch_of_chunks_in_the_chunk_layout)
{
    planes_t pl;
    s_planes(&pl);
    const uint32_t a[] = {22, 0, 7, 8, 9, 3};
    const uint32_t b[] = {5};
    const uint32_t c[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
    static uint8_t ca[6 * PER_BLOCK], cb[1 * PER_BLOCK], cc[20 * PER_BLOCK];
    kvt_gpu_kjob_t jobs[3] = {{(char *)ca, a, 6}, {(char *)cb, b, 1}, {(char *)cc, c, 20}};
    uint64_t *tab = s_table(&pl, jobs, 3);
    //  Any thread-block count gives the same bytes: 1, fewer than the
    //  segments, one per segment.
    const uint32_t grids[] = {1, 7, 16, 135};
    for (int g = 0; g < 4; g++) {
        memset(ca, 0, sizeof ca);
        memset(cb, 0, sizeof cb);
        memset(cc, 0, sizeof cc);
        kvt_gpu_ktab_run_host(tab, true, grids[g]);
        s_check_chunk(ca, a, 6);
        s_check_chunk(cb, b, 1);
        s_check_chunk(cc, c, 20);
    }
    free(tab);
    s_planes_free(&pl);
}

Test(kernel, the_emulated_kernel_scatters_into_the_listed_blocks_only)
{
    planes_t pl;
    s_planes(&pl);
    const uint32_t list[] = {4, 17, 11};
    static uint8_t chunk[3 * PER_BLOCK];
    //  The chunk of the pattern moved one block over: block list[i] gets
    //  pattern of block list[i] + 1.
    uint32_t e = 0;
    for (uint32_t p = 0; p < 2; p++)
        for (uint32_t l = 0; l < s_nl[p]; l++, e++)
            for (uint32_t i = 0; i < 3; i++)
                for (size_t k = 0; k < s_bb[p]; k++)
                    chunk[s_off(p, l, 3, i) + k] = s_pat(e, list[i] + 1, k);
    kvt_gpu_kjob_t job = {(char *)chunk, list, 3};
    uint64_t *tab = s_table(&pl, &job, 1);
    kvt_gpu_ktab_run_host(tab, false, 4);
    e = 0;
    for (uint32_t p = 0; p < 2; p++)
        for (uint32_t l = 0; l < s_nl[p]; l++, e++)
            for (uint32_t b = 0; b < NB; b++) {
                bool listed = b == 4 || b == 17 || b == 11;
                for (size_t k = 0; k < s_bb[p]; k++)
                    cr_assert_eq(pl.layer[e][b * s_bb[p] + k], s_pat(e, listed ? b + 1 : b, k),
                                 "layer entry %u block %u byte %zu", e, b, k);
            }
    free(tab);
    s_planes_free(&pl);
}

Test(kernel, the_table_of_a_device_batch_names_every_layer_of_every_plane)
{
    kvt_gpu_opts_t o = {.backend = KVT_GPU_BACKEND_HOST, .copy_path = KVT_GPU_PATH_KERNEL};
    kvt_gpu_t *gpu = kvt_gpu_new(&o);
    cr_assert_not_null(gpu, "%s", kvt_gpu_last_error());
    cr_assert(strstr(kvt_gpu_describe(gpu), "copy path kernel (host emulation)"), "%s",
              kvt_gpu_describe(gpu));
    kvt_gpu_plane_desc_t k = {"K", 3, NB, 48, NULL}, v = {"V", 2, NB, 20, NULL};
    cr_assert_eq(kvt_gpu_plane_add(gpu, &k), 0);
    cr_assert_eq(kvt_gpu_plane_add(gpu, &v), 1);
    cr_assert_eq(kvt_gpu_ktab_nentries(gpu), 5);
    kvt_gpu_kent_t ent[5];
    cr_assert_eq(kvt_gpu_ktab_entries(gpu, ent, 5), 5);
    for (uint32_t e = 0; e < 5; e++) {
        uint32_t p = e < 3 ? 0 : 1, l = e < 3 ? e : e - 3;
        cr_assert_eq(ent[e].base, (const char *)kvt_gpu_plane_ptr(gpu, p, l, 0), "entry %u", e);
        cr_assert_eq(ent[e].block_bytes, p == 0 ? 48 : 20);
        cr_assert_eq(ent[e].chunk_base, p == 0 ? 0 : 3 * 48);
        cr_assert_eq(ent[e].layer, l);
    }
    uint32_t list[] = {9, 2}, other[] = {4};
    char chunk[2 * PER_BLOCK], chunk2[PER_BLOCK];
    kvt_gpu_kjob_t jobs[2] = {{chunk, list, 2}, {chunk2, other, 1}};
    kvt_gpu_copy_t *copy = kvt_gpu_kernel_copy_alloc(KVT_GPU_D2H, 15, jobs, 2);
    cr_assert_not_null(copy);
    list[0] = other[0] = 77; //  the batch keeps its own copy of the ids
    cr_assert_eq(copy->njobs, 2);
    cr_assert_eq(copy->nblocks, 3);
    cr_assert_eq(copy->job[0].block[0], 9);
    cr_assert_eq(copy->job[1].block[0], 4);
    cr_assert_eq(copy->job[1].chunk, chunk2);
    size_t bytes = 0;
    uint64_t *tab = kvt_gpu_ktab_of_copy(gpu, copy, &bytes);
    cr_assert_not_null(tab);
    cr_assert_eq(bytes, kvt_gpu_ktab_bytes(2, 5, 3));
    cr_assert_eq(tab[0], 2);
    cr_assert_eq(tab[1], 5);
    cr_assert_eq(tab[2], 15);
    free(tab);
    free(copy);
    kvt_gpu_destroy(&gpu);
}

// ------------------------------------------------------------ dispatch ----

Test(kernel, the_dispatch_rule_takes_the_kernel_up_to_the_crossover_then_the_batch)
{
    kvt_gpu_dispatch_t d = {KVT_GPU_PATH_AUTO, true, true, 16384};
    //  64 segments of 4 KiB and of 16 KiB: kernel; of 32 KiB: batch.
    cr_assert_eq(kvt_gpu_dispatch(&d, true, true, 64, 64, 64 * 4096), KVT_GPU_PATH_KERNEL);
    cr_assert_eq(kvt_gpu_dispatch(&d, true, true, 64, 64, 64 * 16384), KVT_GPU_PATH_KERNEL);
    cr_assert_eq(kvt_gpu_dispatch(&d, true, true, 64, 64, 64 * 32768), KVT_GPU_PATH_BATCH);
    //  The kernel needs a gather / scatter, a pinned buffer, two segments.
    cr_assert_eq(kvt_gpu_dispatch(&d, false, true, 64, 64, 64 * 4096), KVT_GPU_PATH_BATCH);
    cr_assert_eq(kvt_gpu_dispatch(&d, true, false, 64, 64, 64 * 4096), KVT_GPU_PATH_SEGMENT);
    cr_assert_eq(kvt_gpu_dispatch(&d, true, true, 1, 1, 4096), KVT_GPU_PATH_SEGMENT);
    //  Merged into one segment: no batch either.
    d.kernel_ready = false;
    cr_assert_eq(kvt_gpu_dispatch(&d, true, true, 64, 1, 64 * 4096), KVT_GPU_PATH_SEGMENT);
    cr_assert_eq(kvt_gpu_dispatch(&d, true, true, 64, 64, 64 * 4096), KVT_GPU_PATH_BATCH);
    d.batch_ready = false;
    cr_assert_eq(kvt_gpu_dispatch(&d, true, true, 64, 64, 64 * 4096), KVT_GPU_PATH_SEGMENT);
    //  A crossover of 0: the kernel never wins in AUTO.
    d = (kvt_gpu_dispatch_t){KVT_GPU_PATH_AUTO, true, true, 0};
    cr_assert_eq(kvt_gpu_dispatch(&d, true, true, 64, 64, 64 * 2048), KVT_GPU_PATH_BATCH);
}

Test(kernel, a_configured_path_overrides_the_size_rule)
{
    kvt_gpu_dispatch_t d = {KVT_GPU_PATH_KERNEL, true, true, 4096};
    cr_assert_eq(kvt_gpu_dispatch(&d, true, true, 8, 8, 8 << 20), KVT_GPU_PATH_KERNEL);
    d.path = KVT_GPU_PATH_BATCH;
    cr_assert_eq(kvt_gpu_dispatch(&d, true, true, 8, 8, 8 * 1024), KVT_GPU_PATH_BATCH);
    d.path = KVT_GPU_PATH_SEGMENT;
    cr_assert_eq(kvt_gpu_dispatch(&d, true, true, 8, 8, 8 * 1024), KVT_GPU_PATH_SEGMENT);
    //  A forced kernel that is not available falls back.
    d = (kvt_gpu_dispatch_t){KVT_GPU_PATH_KERNEL, false, true, 4096};
    cr_assert_eq(kvt_gpu_dispatch(&d, true, true, 8, 8, 8 * 1024), KVT_GPU_PATH_BATCH);
}

Test(kernel, the_crossover_is_the_largest_size_up_to_which_the_kernel_kept_winning)
{
    const size_t size[5] = {2048, 4096, 8192, 16384, 32768};
    const uint64_t other[5] = {100, 100, 100, 100, 100};
    const uint64_t k1[5] = {10, 20, 40, 120, 30}; //  loses at 16 KiB: 8 KiB, not 32
    cr_assert_eq(kvt_gpu_kernel_crossover(size, k1, other, 5), 8192);
    const uint64_t k2[5] = {100, 20, 20, 20, 20}; //  a tie at the smallest: never
    cr_assert_eq(kvt_gpu_kernel_crossover(size, k2, other, 5), 0);
    const uint64_t k3[5] = {1, 2, 3, 4, 5};
    cr_assert_eq(kvt_gpu_kernel_crossover(size, k3, other, 5), 32768);
}

Test(kernel, a_launch_is_capped_at_max_blocks)
{
    cr_assert_eq(kvt_gpu_kernel_grid(1000, 16), 16);
    cr_assert_eq(kvt_gpu_kernel_grid(10, 16), 10);
    cr_assert_eq(kvt_gpu_kernel_grid(0, 16), 1);
}

Test(kernel, the_copy_paths_name_what_each_backend_can_use_here)
{
    char out[400];
    kvt_gpu_copy_paths(KVT_GPU_BACKEND_HOST, out, sizeof out);
    cr_assert(strstr(out, "kernel emulation (copy_path KERNEL)"), "%s", out);
    char why[256];
    if (kvt_gpu_compiled(KVT_GPU_BACKEND_CUDA)) {
        kvt_gpu_copy_paths(KVT_GPU_BACKEND_CUDA, out, sizeof out);
        bool rtc = kvt_gpu_rtc_available(KVT_GPU_RTC_NVRTC, why, sizeof why);
        cr_assert(strstr(out, rtc ? "kernel (nvrtc" : "no kernel (nvrtc"), "%s", out);
        cr_assert(strstr(out, "per-segment"), "%s", out);
    }
    if (kvt_gpu_compiled(KVT_GPU_BACKEND_HIP)) {
        kvt_gpu_copy_paths(KVT_GPU_BACKEND_HIP, out, sizeof out);
        bool rtc = kvt_gpu_rtc_available(KVT_GPU_RTC_HIPRTC, why, sizeof why);
        cr_assert(strstr(out, rtc ? "kernel (hiprtc" : "no kernel (hiprtc"), "%s", out);
        cr_assert(strstr(out, "batch (hipMemcpyBatchAsync)") || strstr(out, "no batched copy"),
                  "%s", out);
    }
}

// --------------------------------------------------- batches of chunks ----

//  A host device (LIVE, or SIM on a manual clock) on `path` with the
//  two-plane geometry above.
static uint64_t s_sim_now;

static uint64_t s_sim_clock(void *arg)
{
    (void)arg;
    return s_sim_now;
}

static kvt_gpu_t *s_open_host(bool sim, kvt_gpu_copy_path_t path)
{
    kvt_gpu_opts_t o = {.backend = KVT_GPU_BACKEND_HOST, .copy_path = path};
    if (sim) {
        o.host_mode = KVT_GPU_HOST_SIM;
        o.now = s_sim_clock;
    }
    kvt_gpu_t *gpu = kvt_gpu_new(&o);
    cr_assert_not_null(gpu, "%s", kvt_gpu_last_error());
    kvt_gpu_plane_desc_t k = {"K", 3, NB, 48, NULL}, v = {"V", 2, NB, 20, NULL};
    cr_assert_eq(kvt_gpu_plane_add(gpu, &k), 0);
    cr_assert_eq(kvt_gpu_plane_add(gpu, &v), 1);
    return gpu;
}

//  Fills every block of every layer with s_pat through the direct pointers.
static void s_fill_planes(kvt_gpu_t *gpu)
{
    uint32_t e = 0;
    for (uint32_t p = 0; p < 2; p++)
        for (uint32_t l = 0; l < s_nl[p]; l++, e++)
            for (uint32_t b = 0; b < NB; b++) {
                uint8_t *blk = kvt_gpu_plane_ptr(gpu, p, l, b);
                for (size_t k = 0; k < s_bb[p]; k++)
                    blk[k] = s_pat(e, b, k);
            }
}

static void s_drain(kvt_gpu_t *gpu, kvt_gpu_stream_t *s)
{
    if (kvt_gpu_is_sim(gpu)) {
        //  Move the clock to every pending landing.
        for (uint64_t eta; (eta = kvt_gpu_next_eta(gpu)) != UINT64_MAX;) {
            s_sim_now = eta > s_sim_now ? eta : s_sim_now;
            kvt_gpu_progress(gpu);
        }
    }
    cr_assert_eq(kvt_gpu_stream_synchronize(s), 0, "%s", kvt_gpu_last_error());
}

Test(kernel, a_batch_of_chunks_moves_the_bytes_of_one_gather_per_chunk_in_one_op)
{
    const kvt_gpu_copy_path_t paths[2] = {KVT_GPU_PATH_AUTO, KVT_GPU_PATH_KERNEL};
    for (int sim = 0; sim < 2; sim++)
        for (int p = 0; p < 2; p++) {
            s_sim_now = 1000;
            kvt_gpu_t *gpu = s_open_host(sim, paths[p]);
            s_fill_planes(gpu);
            kvt_gpu_stream_t *s = kvt_gpu_stream_new(gpu, "s");
            const uint32_t a[] = {22, 0, 7, 8, 9, 3}, b[] = {5}, c[] = {7, 6, 5, 4, 3, 2, 1};
            static uint8_t ca[6 * PER_BLOCK], cb[1 * PER_BLOCK], cc[7 * PER_BLOCK];
            memset(ca, 0, sizeof ca);
            memset(cb, 0, sizeof cb);
            memset(cc, 0, sizeof cc);
            //  Chunks may name the same block in a gather.
            kvt_gpu_chunk_t ch[3] = {
                {a, 6, ca, sizeof ca}, {b, 1, cb, sizeof cb}, {c, 7, cc, sizeof cc}};
            kvt_gpu_stats_t before, after;
            kvt_gpu_stats(gpu, &before);
            cr_assert_eq(kvt_gpu_gather_chunks(s, ch, 3), 0, "%s", kvt_gpu_last_error());
            kvt_gpu_stats(gpu, &after);
            cr_assert_eq(after.ops_queued, before.ops_queued + 1, "one op for three chunks");
            cr_assert_eq(after.gathers, before.gathers + 3);
            cr_assert_eq(after.bytes_gathered, before.bytes_gathered + 14 * PER_BLOCK);
            s_drain(gpu, s);
            s_check_chunk(ca, a, 6);
            s_check_chunk(cb, b, 1);
            s_check_chunk(cc, c, 7);

            //  Scatter the chunks back into other blocks, gather one by one.
            const uint32_t x[] = {10, 11, 12, 13, 14, 15}, y[] = {16},
                           z[] = {17, 18, 19, 20, 21, 1, 2};
            kvt_gpu_chunk_t back[3] = {
                {x, 6, ca, sizeof ca}, {y, 1, cb, sizeof cb}, {z, 7, cc, sizeof cc}};
            cr_assert_eq(kvt_gpu_scatter_chunks(s, back, 3), 0, "%s", kvt_gpu_last_error());
            s_drain(gpu, s);
            static uint8_t chk[7 * PER_BLOCK];
            cr_assert_eq(kvt_gpu_gather(s, z, 7, chk, sizeof chk), 0);
            s_drain(gpu, s);
            cr_assert_eq(memcmp(chk, cc, sizeof cc), 0, "sim %d path %d", sim, p);
            cr_assert_eq(kvt_gpu_gather(s, x, 6, chk, sizeof chk), 0);
            s_drain(gpu, s);
            cr_assert_eq(memcmp(chk, ca, sizeof ca), 0, "sim %d path %d", sim, p);
            kvt_gpu_stream_destroy(&s);
            kvt_gpu_destroy(&gpu);
        }
}

Test(kernel, a_bad_chunk_refuses_the_whole_batch_naming_it)
{
    kvt_gpu_t *gpu = s_open_host(false, KVT_GPU_PATH_KERNEL);
    kvt_gpu_stream_t *s = kvt_gpu_stream_new(gpu, "s");
    const uint32_t a[] = {1, 2}, bad[] = {3, NB}, dup[] = {2, 9};
    static uint8_t ca[2 * PER_BLOCK], cb[2 * PER_BLOCK];
    kvt_gpu_chunk_t ch[2] = {{a, 2, ca, sizeof ca}, {bad, 2, cb, sizeof cb}};
    kvt_gpu_stats_t before, after;
    kvt_gpu_stats(gpu, &before);
    cr_assert_eq(kvt_gpu_gather_chunks(s, ch, 2), KVT_GPU_EINVAL);
    cr_assert(strstr(kvt_gpu_last_error(), "gather_chunks: chunk 1: block id 23 at index 1"), "%s",
              kvt_gpu_last_error());
    ch[1] = (kvt_gpu_chunk_t){dup, 2, cb, sizeof cb - 1};
    cr_assert_eq(kvt_gpu_gather_chunks(s, ch, 2), KVT_GPU_EINVAL);
    cr_assert(strstr(kvt_gpu_last_error(), "gather_chunks: chunk 1: buffer of"), "%s",
              kvt_gpu_last_error());
    //  A block in two chunks: fine to gather, refused to scatter.
    ch[1].len = sizeof cb;
    cr_assert_eq(kvt_gpu_scatter_chunks(s, ch, 2), KVT_GPU_EINVAL);
    cr_assert(strstr(kvt_gpu_last_error(), "scatter_chunks: the chunks together: duplicate block "
                                           "id 2"),
              "%s", kvt_gpu_last_error());
    cr_assert_eq(kvt_gpu_gather_chunks(s, ch, 0), KVT_GPU_EINVAL);
    cr_assert(strstr(kvt_gpu_last_error(), "gather_chunks: 0 chunks"), "%s", kvt_gpu_last_error());
    kvt_gpu_stats(gpu, &after);
    cr_assert_eq(after.ops_queued, before.ops_queued, "nothing queued");
    cr_assert_eq(after.refused, before.refused + 4);
    cr_assert_eq(kvt_gpu_gather_chunks(s, ch, 2), 0, "%s", kvt_gpu_last_error());
    cr_assert_eq(kvt_gpu_stream_synchronize(s), 0);
    kvt_gpu_stream_destroy(&s);
    kvt_gpu_destroy(&gpu);
}
