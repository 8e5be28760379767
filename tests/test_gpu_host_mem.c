/*  test_gpu_host_mem.c — the host backend's memory (kvt_gpu_host_mem.c) and
    its copy loop (kvt_gpu_copy_run in kvt_gpu_copy.c).

    host_mem: regions are untouched when handed out (no resident page
    before the first write), read as zero, sit on 2 MiB boundaries with the
    huge-page advice when the probe found THP, and fall back to base pages
    (still working, said in the selection line, warned once) when madvise
    refuses, at the probe or later.

    copy_loop: every length and both alignments, below and above the
    streaming thresholds, in every direction, copy exactly the segment's
    bytes and nothing next to them.
*/
#define _DEFAULT_SOURCE //  mincore, MAP_ANONYMOUS
#include <criterion/criterion.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gpu/kvt_gpu_host_mem.h"
#include "gpu/kvt_gpu_int.h"
#include "kvtier/kvt_gpu.h"

// ------------------------------------------------------------ helpers ----

static atomic_int s_warnings; //  level-1 log lines
static char s_last_warning[512];

static void s_log(void *arg, int level, const char *line)
{
    (void)arg;
    if (level == 1) {
        atomic_fetch_add(&s_warnings, 1);
        snprintf(s_last_warning, sizeof s_last_warning, "%s", line);
    }
}

static int (*s_real_madvise)(void *, size_t, int);
static atomic_int s_advice_calls; //  calls that reached the replacement

//  Refuses every advice, as a kernel without THP does.
static int s_madvise_refuse(void *addr, size_t len, int advice)
{
    (void)addr, (void)len, (void)advice;
    atomic_fetch_add(&s_advice_calls, 1);
    errno = EINVAL;
    return -1;
}

//  Accepts the first advice (the open-time probe), refuses the later ones.
static int s_madvise_refuse_after_probe(void *addr, size_t len, int advice)
{
    if (atomic_fetch_add(&s_advice_calls, 1) == 0)
        return s_real_madvise(addr, len, advice);
    errno = EPERM;
    return -1;
}

static void s_setup(void)
{
    s_real_madvise = kvt_gpu_host_madvise;
    atomic_store(&s_advice_calls, 0);
    atomic_store(&s_warnings, 0);
}

static void s_teardown(void)
{
    kvt_gpu_host_madvise = s_real_madvise;
}

static kvt_gpu_t *s_open(void)
{
    kvt_gpu_opts_t o = {0};
    o.backend = KVT_GPU_BACKEND_HOST;
    o.log = s_log;
    kvt_gpu_t *gpu = kvt_gpu_new(&o);
    cr_assert_not_null(gpu, "%s", kvt_gpu_last_error());
    return gpu;
}

//  Resident pages of [p, p + len) (mincore).
static size_t s_resident(const void *p, size_t len)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t start = (uintptr_t)p & ~(uintptr_t)(page - 1);
    size_t n = ((uintptr_t)p + len - start + page - 1) / page;
    unsigned char *vec = malloc(n);
    cr_assert_not_null(vec);
    cr_assert_eq(mincore((void *)start, n * page, vec), 0, "mincore: %s", strerror(errno));
    size_t in = 0;
    for (size_t i = 0; i < n; i++)
        in += vec[i] & 1;
    free(vec);
    return in;
}

//  The VmFlags line of the mapping of /proc/self/smaps that holds p, into
//  flags (empty when none holds it).
static void s_vmflags(const void *p, char *flags, size_t len)
{
    flags[0] = 0;
    FILE *f = fopen("/proc/self/smaps", "r");
    cr_assert_not_null(f);
    char line[512];
    bool inside = false;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
            continue;
        }
        if (inside && strncmp(line, "VmFlags:", 8) == 0) {
            snprintf(flags, len, "%s", line + 8);
            break;
        }
    }
    fclose(f);
}

//  True when the VmFlags of p's mapping name the huge-page advice ("hg").
static bool s_advised_huge(const void *p)
{
    char flags[512];
    s_vmflags(p, flags, sizeof flags);
    cr_assert(flags[0], "no mapping holds %p", p);
    return strstr(flags, " hg") != NULL;
}

//  A plane of `layers` layers of `nb` blocks of `bb` bytes; its layer 0.
static uint8_t *s_plane(kvt_gpu_t *gpu, uint32_t layers, uint32_t nb, size_t bb)
{
    kvt_gpu_plane_desc_t d = {NULL, layers, nb, bb, NULL};
    cr_assert_geq(kvt_gpu_plane_add(gpu, &d), 0, "%s", kvt_gpu_last_error());
    uint8_t *p = kvt_gpu_plane_ptr(gpu, kvt_gpu_plane_count(gpu) - 1, 0, 0);
    cr_assert_not_null(p);
    return p;
}

//  Scatters a pattern through `list` and gathers it back.
static void s_round_trip(kvt_gpu_t *gpu, const uint32_t *list, uint32_t n, size_t chunk)
{
    uint8_t *a = kvt_gpu_host_alloc(gpu, chunk), *b = kvt_gpu_host_alloc(gpu, chunk);
    cr_assert(a && b, "%s", kvt_gpu_last_error());
    for (size_t k = 0; k < chunk; k++)
        a[k] = (uint8_t)(k * 7 + k / 251 + 3);
    kvt_gpu_stream_t *s = kvt_gpu_stream_new(gpu, "t");
    cr_assert_not_null(s);
    cr_assert_eq(kvt_gpu_scatter(s, list, n, a, chunk), 0, "%s", kvt_gpu_last_error());
    cr_assert_eq(kvt_gpu_gather(s, list, n, b, chunk), 0, "%s", kvt_gpu_last_error());
    cr_assert_eq(kvt_gpu_stream_synchronize(s), 0, "%s", kvt_gpu_last_error());
    cr_assert(memcmp(a, b, chunk) == 0, "the round trip changed the bytes");
    kvt_gpu_stream_destroy(&s);
    kvt_gpu_host_free(gpu, a);
    kvt_gpu_host_free(gpu, b);
}

// ------------------------------------------------------------ host_mem ----

TestSuite(host_mem, .init = s_setup, .fini = s_teardown);

Test(host_mem, regions_are_untouched_and_zero_until_written)
{
    kvt_gpu_t *gpu = s_open();
    const size_t layer = (size_t)1024 * 16384; //  16 MiB per layer, 4 layers
    uint8_t *p = s_plane(gpu, 4, 1024, 16384);
    cr_assert_eq(s_resident(p, 4 * layer), 0, "a fresh plane has resident pages");
    uint8_t *h = kvt_gpu_host_alloc(gpu, 8u << 20);
    cr_assert_not_null(h);
    cr_assert_eq(s_resident(h, 8u << 20), 0, "a fresh host buffer has resident pages");
    //  Zero where read, and only what is touched becomes resident.
    for (size_t off = 0; off < 4 * layer; off += layer / 2)
        cr_assert_eq(p[off], 0);
    cr_assert_eq(h[(8u << 20) - 1], 0);
    cr_assert_leq(s_resident(p, 4 * layer),
                  8 * (KVT_HOST_HUGE_BYTES / (size_t)sysconf(_SC_PAGESIZE)),
                  "reading 8 bytes committed more than 8 huge pages");
    kvt_gpu_destroy(&gpu);
}

Test(host_mem, the_probe_is_in_the_selection_line_and_big_regions_are_advised_huge)
{
    kvt_gpu_t *gpu = s_open();
    const char *d = kvt_gpu_describe(gpu);
    cr_assert(strstr(d, "; memory: "), "%s", d);
    kvt_host_thp_t thp = kvt_gpu_host_thp(gpu);
    cr_assert(thp == KVT_HOST_THP_ON || thp == KVT_HOST_THP_NEVER || thp == KVT_HOST_THP_REFUSED);
    uint8_t *big = s_plane(gpu, 2, 256, 16384); //  8 MiB region
    uint8_t *small = kvt_gpu_host_alloc(gpu, 64u << 10);
    cr_assert_not_null(small);
    uint64_t huge = 0, refused = 0;
    kvt_gpu_host_mem_counts(gpu, &huge, &refused);
    cr_assert_eq(refused, 0);
    cr_assert_eq(s_advised_huge(small), false, "a 64 KiB buffer was advised huge");
    if (thp != KVT_HOST_THP_ON) {
        cr_assert(strstr(d, "KiB pages"), "%s", d);
        cr_assert_eq(huge, 0);
        kvt_gpu_destroy(&gpu);
        cr_skip_test("transparent huge pages are not available here: %s", d);
    }
    cr_assert(strstr(d, "transparent huge pages (madvise)"), "%s", d);
    cr_assert_eq((uintptr_t)big % KVT_HOST_HUGE_BYTES, 0, "an 8 MiB region is not 2 MiB aligned");
    cr_assert(s_advised_huge(big), "an 8 MiB region carries no huge-page advice");
    cr_assert_eq(huge, 1, "one region advised");
    uint32_t list[4] = {3, 250, 0, 77};
    s_round_trip(gpu, list, 4, 4 * kvt_gpu_block_bytes(gpu));
    kvt_gpu_destroy(&gpu);
}

Test(host_mem, a_refused_probe_falls_back_to_base_pages_and_says_so)
{
    kvt_gpu_host_madvise = s_madvise_refuse;
    kvt_gpu_t *gpu = s_open();
    const char *d = kvt_gpu_describe(gpu);
    cr_assert_eq(kvt_gpu_host_thp(gpu), KVT_HOST_THP_REFUSED);
    cr_assert(strstr(d, "; memory: "), "%s", d);
    cr_assert(strstr(d, "KiB pages (madvise (MADV_HUGEPAGE) failed: Invalid argument)"), "%s", d);
    cr_assert_null(strstr(d, "huge pages (madvise)"), "%s", d);
    //  Big regions work all the same, on base pages, without asking again.
    int calls = atomic_load(&s_advice_calls);
    uint8_t *big = s_plane(gpu, 2, 512, 8192);
    uint8_t *buf = kvt_gpu_host_alloc(gpu, 4u << 20);
    cr_assert(big && buf);
    cr_assert_eq(atomic_load(&s_advice_calls), calls, "advice asked again after a refused probe");
    cr_assert_eq(s_advised_huge(big), false);
    cr_assert_eq(big[0] | big[2 * 512 * 8192 - 1], 0);
    uint64_t huge = 1, refused = 1;
    kvt_gpu_host_mem_counts(gpu, &huge, &refused);
    cr_assert_eq(huge, 0);
    cr_assert_eq(refused, 0);
    uint32_t list[3] = {511, 1, 200};
    s_round_trip(gpu, list, 3, 3 * kvt_gpu_block_bytes(gpu));
    kvt_gpu_host_free(gpu, buf);
    kvt_gpu_destroy(&gpu);
    cr_assert_eq(atomic_load(&s_warnings), 0, "a refused probe is said in the line, not warned");
}

Test(host_mem, advice_refused_after_a_good_probe_keeps_the_region_and_warns_once)
{
    kvt_gpu_host_madvise = s_madvise_refuse_after_probe;
    kvt_gpu_t *gpu = s_open();
    if (kvt_gpu_host_thp(gpu) != KVT_HOST_THP_ON) {
        const char *d = kvt_gpu_describe(gpu);
        kvt_gpu_destroy(&gpu);
        cr_skip_test("transparent huge pages are not available here: %s", d);
    }
    uint8_t *a = s_plane(gpu, 1, 256, 16384);
    uint8_t *b = kvt_gpu_host_alloc(gpu, 6u << 20);
    cr_assert(a && b, "a refused advice failed an allocation: %s", kvt_gpu_last_error());
    cr_assert_eq(atomic_load(&s_advice_calls), 3, "probe + two regions");
    uint64_t huge = 0, refused = 0;
    kvt_gpu_host_mem_counts(gpu, &huge, &refused);
    cr_assert_eq(refused, 2);
    cr_assert_eq(huge, 0);
    cr_assert_eq(atomic_load(&s_warnings), 1, "one warning for all refusals");
    cr_assert(strstr(s_last_warning, "madvise (MADV_HUGEPAGE) refused"), "%s", s_last_warning);
    memset(b, 0xab, 6u << 20);
    cr_assert_eq(a[256 * 16384 - 1], 0);
    kvt_gpu_host_free(gpu, b);
    kvt_gpu_destroy(&gpu);
}

Test(host_mem, a_freed_buffer_is_unmapped)
{
    kvt_gpu_t *gpu = s_open();
    uint8_t *h = kvt_gpu_host_alloc(gpu, 3u << 20);
    cr_assert_not_null(h);
    h[0] = 1;
    unsigned char vec[1];
    cr_assert_eq(mincore(h, 1, vec), 0);
    kvt_gpu_host_free(gpu, h);
    errno = 0;
    cr_assert_eq(mincore(h, 1, vec), -1, "the buffer is still mapped after its free");
    cr_assert_eq(errno, ENOMEM);
    kvt_gpu_destroy(&gpu);
}

// ----------------------------------------------------------- copy_loop ----

#define GUARD 0xEEu

//  One batch over segments of the given lengths, each at its own dst / src
//  misalignment (mod 64) inside guard bytes; checks every byte after the
//  run: the segments hold their source, the guards are intact, the source
//  is unchanged.
static void s_check_batch(kvt_gpu_dir_t dir, const size_t *lens, uint32_t count, uint32_t salt)
{
    const size_t pad = 192; //  guard before and after each segment, room for misalignment
    size_t total = 0, room = 0;
    for (uint32_t k = 0; k < count; k++) {
        total += lens[k];
        room += lens[k] + 2 * pad;
    }
    uint8_t *src = aligned_alloc(64, (room + 63) / 64 * 64);
    uint8_t *dst = aligned_alloc(64, (room + 63) / 64 * 64);
    uint8_t *want = malloc(room);
    cr_assert(src && dst && want);
    for (size_t i = 0; i < room; i++)
        src[i] = (uint8_t)(i * 131 + (i >> 9) + salt);
    memset(dst, GUARD, room);
    memcpy(want, dst, room);
    kvt_gpu_copy_t *copy = kvt_gpu_copy_alloc(dir, count);
    cr_assert_not_null(copy);
    size_t at = 0;
    for (uint32_t k = 0; k < count; k++) {
        size_t doff = at + pad + (k * 7 + salt) % 64;
        size_t soff = at + pad + (k * 13 + salt * 3) % 64;
        //  Direct fill (not kvt_gpu_copy_push): segments stay separate.
        copy->dst[k] = dst + doff;
        copy->src[k] = src + soff;
        copy->len[k] = lens[k];
        memcpy(want + doff, src + soff, lens[k]);
        at += lens[k] + 2 * pad;
    }
    copy->count = count;
    copy->bytes = total;
    kvt_gpu_copy_run(copy);
    for (size_t i = 0; i < room; i++)
        if (dst[i] != want[i])
            cr_assert_fail(
                "dir %d, %u segments (%zu bytes), salt %u: byte %zu is 0x%02x, want 0x%02x",
                (int)dir, count, total, salt, i, dst[i], want[i]);
    for (size_t i = 0; i < room; i++)
        if (src[i] != (uint8_t)(i * 131 + (i >> 9) + salt))
            cr_assert_fail("the source changed at byte %zu", i);
    free(copy);
    free(src);
    free(dst);
    free(want);
}

//  Lengths around every edge of the loop: below / at / above the 16-byte
//  head, the 64-byte body unit, KVT_COPY_STREAM_SEG, KVT_COPY_PREFETCH.
static const size_t s_lens[] = {1,    2,    15,   16,   17,   31,   63,   64,   65,
                                127,  128,  129,  191,  255,  256,  257,  300,  319,
                                320,  511,  512,  513,  1000, 1023, 1024, 1025, 2047,
                                2048, 2049, 4095, 4097, 8191, 8193, 12345};
#define NLENS (sizeof s_lens / sizeof s_lens[0])

Test(copy_loop, small_ops_copy_every_length_and_alignment_exactly)
{
    //  Ops below KVT_COPY_STREAM_OP: plain copies, prefetching the next.
    for (int dir = KVT_GPU_D2H; dir <= KVT_GPU_D2D; dir++)
        for (uint32_t salt = 0; salt < 64; salt++) {
            size_t lens[4];
            size_t total = 0;
            for (uint32_t k = 0; k < 4; k++) {
                lens[k] = s_lens[(salt * 5 + k * 11 + (uint32_t)dir) % NLENS];
                total += lens[k];
            }
            cr_assert_lt(total, KVT_COPY_STREAM_OP);
            s_check_batch((kvt_gpu_dir_t)dir, lens, 4, salt);
        }
}

Test(copy_loop, streamed_ops_copy_every_length_and_alignment_exactly)
{
    //  Ops of KVT_COPY_STREAM_OP bytes and more: every segment from
    //  KVT_COPY_STREAM_SEG up is streamed, at each of 64 dst / src offsets.
    size_t lens[NLENS + 1];
    size_t total = 0;
    for (uint32_t k = 0; k < NLENS; k++)
        total += s_lens[k];
    for (int dir = KVT_GPU_D2H; dir <= KVT_GPU_D2D; dir++)
        for (uint32_t salt = 0; salt < 64; salt++) {
            //  The lengths in a rotated order, then one that makes the op big.
            for (uint32_t k = 0; k < NLENS; k++)
                lens[k] = s_lens[(k + salt) % NLENS];
            lens[NLENS] = KVT_COPY_STREAM_OP - total % KVT_COPY_STREAM_OP + salt;
            cr_assert_geq(total + lens[NLENS], KVT_COPY_STREAM_OP);
            s_check_batch((kvt_gpu_dir_t)dir, lens, NLENS + 1, salt);
        }
}

Test(copy_loop, a_single_streamed_segment_at_every_alignment)
{
    //  One big segment (a state unit's copy) at every dst / src offset.
    for (uint32_t salt = 0; salt < 64; salt++) {
        size_t len = KVT_COPY_STREAM_OP + salt * 3;
        s_check_batch(KVT_GPU_D2H, &len, 1, salt);
        s_check_batch(KVT_GPU_H2D, &len, 1, salt + 1);
    }
}
