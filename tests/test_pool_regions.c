/*  test_pool_regions.c — the CPU pool's registration regions and NUMA
    binding.

    extents_regions: the allocator keeps every extent inside one region (it
    never coalesces across a boundary), and closed regions serve nothing
    until opened.

    pool_regions: the region planner (sizes, the shorter last region, bad
    settings named, objects larger than a region refused); registration in
    a background thread, in address order, serving only the regions already
    registered; a refused region never served (or served unpinned when
    asked); kvt_pool_pinned; destroy unregisters what was registered.

    pool_numa: the arena is bound (mbind) before first touch to the asked
    node or interleaved over all; one node, a node that does not exist and
    a refused mbind fall back to first-touch placement and say so.
*/
#define _DEFAULT_SOURCE //  mincore
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/kvt_extent.h"
#include "store/kvt_pool_int.h"

// --------------------------------------------------- extents_regions ----

//  Every allocated and free extent lies inside one region.
static void s_no_straddle(const kvt_extents_t *a)
{
    for (uint32_t e = 0; e != KVT_NIL; e = a->ext[e].next) {
        const kvt_extent_t *x = &a->ext[e];
        cr_assert(kvt_extents_same_region(a, x->off, x->off + x->len - 1),
                  "extent [%llu, +%llu) straddles a boundary", (unsigned long long)x->off,
                  (unsigned long long)x->len);
    }
}

Test(extents_regions, no_extent_ever_straddles_a_region_boundary)
{
    kvt_extents_t a;
    cr_assert_eq(kvt_extents_init_regions(&a, 100, 64, 32, true), 0);
    cr_assert_eq(a.nregions, 4);
    cr_assert_eq(a.free_extents, 4, "one free extent per region");
    cr_assert_eq(kvt_extents_alloc(&a, 33), KVT_NIL, "larger than a region");
    uint32_t ids[64];
    uint32_t n = 0;
    uint64_t seed = 7;
    for (int round = 0; round < 2000; round++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        if (n < 64 && (seed >> 40) % 3 != 0) {
            uint64_t len = 1 + (seed >> 20) % 20;
            uint32_t id = kvt_extents_alloc(&a, len);
            if (id != KVT_NIL)
                ids[n++] = id;
        } else if (n > 0) {
            uint32_t k = (uint32_t)((seed >> 33) % n);
            kvt_extents_free(&a, ids[k]);
            ids[k] = ids[--n];
        }
        s_no_straddle(&a);
    }
    while (n > 0)
        kvt_extents_free(&a, ids[--n]);
    s_no_straddle(&a);
    cr_assert_eq(a.free_extents, 4, "freeing everything leaves one extent per region");
    cr_assert_eq(kvt_extents_largest_free(&a), 32);
    kvt_extents_fini(&a);
}

Test(extents_regions, closed_regions_serve_nothing_until_opened)
{
    kvt_extents_t a;
    cr_assert_eq(kvt_extents_init_regions(&a, 96, 16, 32, false), 0);
    cr_assert_eq(kvt_extents_alloc(&a, 1), KVT_NIL);
    kvt_extents_open(&a, 2);
    uint32_t id = kvt_extents_alloc(&a, 10);
    cr_assert_neq(id, KVT_NIL);
    cr_assert_eq(kvt_extents_off(&a, id), 64);
    uint32_t id2 = kvt_extents_alloc(&a, 22);
    cr_assert_neq(id2, KVT_NIL);
    cr_assert_eq(kvt_extents_alloc(&a, 1), KVT_NIL, "region 2 is full, 0 and 1 closed");
    kvt_extents_free(&a, id);
    kvt_extents_free(&a, id2);
    cr_assert_eq(a.free_extents, 1, "the closed neighbours were not coalesced");
    kvt_extents_fini(&a);
}

// ------------------------------------------------------ pool_regions ----

#define S_MIB (1u << 20)

static atomic_int s_warnings;

static void s_log(void *arg, int level, const char *line)
{
    (void)arg, (void)line;
    if (level <= 1)
        atomic_fetch_add(&s_warnings, 1);
}

//  A fake device registration: records the calls, holds region `gate_from`
//  and later until the gate opens, refuses region `refuse`.
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool gate_open;
    int gate_from; //  first region index that waits for the gate (-1: none)
    int refuse;    //  region index refused (-1: none)
    uint8_t *base; //  arena start, for region indexes (set by the first call)
    size_t region; //  region size
    int calls;
    int held; //  calls that reached the closed gate
    void *ptrs[16];
    size_t lens[16];
    int unregistered;
} s_fake_t;

static int s_register(void *arg, void *ptr, size_t len)
{
    s_fake_t *f = arg;
    pthread_mutex_lock(&f->mu);
    if (!f->base)
        f->base = ptr;
    int r = (int)(((uint8_t *)ptr - f->base) / f->region);
    if (f->gate_from >= 0 && r >= f->gate_from && !f->gate_open) {
        f->held++;
        pthread_cond_broadcast(&f->cv);
    }
    while (f->gate_from >= 0 && r >= f->gate_from && !f->gate_open)
        pthread_cond_wait(&f->cv, &f->mu);
    if (f->calls < 16) {
        f->ptrs[f->calls] = ptr;
        f->lens[f->calls] = len;
    }
    f->calls++;
    pthread_mutex_unlock(&f->mu);
    return r == f->refuse ? 701 : 0;
}

static void s_unregister(void *arg, void *ptr)
{
    s_fake_t *f = arg;
    (void)ptr;
    pthread_mutex_lock(&f->mu);
    f->unregistered++;
    pthread_mutex_unlock(&f->mu);
}

static void s_fake_init(s_fake_t *f, size_t region, int gate_from, int refuse)
{
    memset(f, 0, sizeof *f);
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    f->gate_from = gate_from;
    f->refuse = refuse;
    f->region = region;
}

static void s_gate_open(s_fake_t *f)
{
    pthread_mutex_lock(&f->mu);
    f->gate_open = true;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

static void *s_gate_later(void *arg)
{
    usleep(200000); //  long past destroy asking the thread to stop
    s_gate_open(arg);
    return NULL;
}

static kvt_pool_t *s_pool(size_t cap, size_t region, s_fake_t *f, bool unpinned)
{
    kvt_pool_config_t cfg;
    kvt_pool_config_defaults(&cfg);
    cfg.capacity_bytes = cap;
    cfg.region_bytes = region;
    cfg.log = s_log;
    if (f) {
        cfg.register_fn = s_register;
        cfg.unregister_fn = s_unregister;
        cfg.register_arg = f;
    }
    cfg.serve_unpinned = unpinned;
    char err[256] = "";
    kvt_pool_t *p = kvt_pool_new(&cfg, err, sizeof err);
    cr_assert_not_null(p, "%s", err);
    return p;
}

//  Reserves 1 MiB objects (kept reserved, so none is evicted) until the pool
//  refuses; returns how many, their arena offsets in off[].
static int s_fill(kvt_pool_t *p, kvt_holder_t h, uint64_t key0, size_t *off, int max)
{
    int n = 0;
    while (n < max) {
        kvt_resv_t resv = {0};
        void *ptr = NULL;
        int rc = kvt_pool_reserve(p, 1, (kvt_hash_t){.lo = key0 + (uint64_t)n}, KVT_OBJ_KV, S_MIB,
                                  h, &resv, &ptr);
        if (rc != KVT_STORE_OK)
            break;
        off[n++] = (size_t)((uint8_t *)ptr - (uint8_t *)kvt_pool_base(p));
    }
    return n;
}

Test(pool_regions, the_planner_cuts_the_arena_into_regions_and_names_bad_settings)
{
    kvt_pool_t *p = s_pool(10 * S_MIB, 4 * S_MIB + 100, NULL, false);
    kvt_pool_stats_t st;
    kvt_pool_stats(p, &st);
    cr_assert_eq(st.regions, 3, "4 + 4 + 2 MiB (the size rounds down to align)");
    cr_assert_eq(st.regions_registered, 3, "no registration asked: all served");
    cr_assert_eq(st.regions_pending, 0);
    kvt_holder_t h;
    cr_assert_eq(kvt_pool_holder_add(p, "t", &h), KVT_STORE_OK);
    kvt_resv_t resv = {0};
    void *ptr;
    cr_assert_eq(
        kvt_pool_reserve(p, 1, (kvt_hash_t){.lo = 1}, KVT_OBJ_KV, 4 * S_MIB + 1, h, &resv, &ptr),
        KVT_STORE_ETOOBIG, "an object larger than a region");
    size_t off[16];
    int n = s_fill(p, h, 100, off, 16);
    cr_assert_eq(n, 10);
    for (int i = 0; i < n; i++)
        cr_assert_eq(off[i] / (4 * S_MIB), (off[i] + S_MIB - 1) / (4 * S_MIB), "straddles");
    kvt_pool_destroy(&p);

    kvt_pool_config_t cfg;
    kvt_pool_config_defaults(&cfg);
    cfg.capacity_bytes = 10 * S_MIB;
    cfg.region_bytes = 100;
    cfg.log = s_log;
    char err[256] = "";
    cr_assert_null(kvt_pool_new(&cfg, err, sizeof err));
    cr_assert(strstr(err, "pool.region_bytes=100"), "%s", err);
}

Test(pool_regions, evictable_objects_on_both_sides_of_a_boundary_make_no_room)
{
    //  Region 0: pinned, pinned, ready, ready | region 1: ready, ready, pinned,
    //  pinned (1 MiB each). Each side has 2 MiB to give, the run across the
    //  boundary 4 MiB: a 3 MiB object finds no room and nothing is evicted.
    kvt_pool_t *p = s_pool(8 * S_MIB, 4 * S_MIB, NULL, false);
    kvt_holder_t h;
    cr_assert_eq(kvt_pool_holder_add(p, "t", &h), KVT_STORE_OK);
    static uint8_t buf[S_MIB];
    for (uint64_t k = 0; k < 8; k++)
        cr_assert_eq(kvt_pool_put(p, 1, (kvt_hash_t){.lo = k}, KVT_OBJ_KV, buf, S_MIB),
                     KVT_STORE_OK);
    const uint8_t *base = kvt_pool_base(p);
    kvt_lease_t leases[8];
    for (uint64_t k = 0; k < 8; k++) {
        kvt_obj_view_t v;
        cr_assert_eq(kvt_pool_acquire(p, 1, (kvt_hash_t){.lo = k}, KVT_OBJ_KV, h, &leases[k], &v),
                     KVT_STORE_OK);
        size_t mib = (size_t)((const uint8_t *)v.ptr - base) / S_MIB;
        if (mib != 0 && mib != 1 && mib != 6 && mib != 7)
            cr_assert_eq(kvt_pool_release(p, &leases[k]), KVT_STORE_OK);
    }
    kvt_resv_t resv = {0};
    void *ptr;
    cr_assert_eq(
        kvt_pool_reserve(p, 1, (kvt_hash_t){.lo = 99}, KVT_OBJ_KV, 3 * S_MIB, h, &resv, &ptr),
        KVT_STORE_ENOSPACE);
    kvt_pool_stats_t st;
    kvt_pool_stats(p, &st);
    cr_assert_eq(st.evictions, 0, "nothing evicted for a run no region holds");
    cr_assert_eq(st.objects, 8);
    kvt_pool_destroy(&p);
}

Test(pool_regions, the_default_region_is_64_gib)
{
    kvt_pool_t *p = s_pool(8 * S_MIB, 0, NULL, false);
    cr_assert_eq(p->region_bytes, 8 * S_MIB, "capped at the arena");
    kvt_pool_destroy(&p);
    kvt_pool_config_t cfg;
    kvt_pool_config_defaults(&cfg);
    cfg.capacity_bytes = 129ull << 30; //  mapped, never touched
    cfg.log = s_log;
    char err[256] = "";
    p = kvt_pool_new(&cfg, err, sizeof err);
    cr_assert_not_null(p, "%s", err);
    kvt_pool_stats_t st;
    kvt_pool_stats(p, &st);
    cr_assert_eq(st.regions, 3, "64 + 64 + 1 GiB");
    cr_assert_eq(p->region_bytes, 64ull << 30);
    kvt_pool_destroy(&p);
}

Test(pool_regions, registration_runs_in_the_background_and_only_registered_regions_serve)
{
    s_fake_t f;
    s_fake_init(&f, 4 * S_MIB, 1, -1);
    kvt_pool_t *p = s_pool(12 * S_MIB, 4 * S_MIB, &f, false);
    kvt_holder_t h;
    cr_assert_eq(kvt_pool_holder_add(p, "t", &h), KVT_STORE_OK);
    cr_assert_eq(kvt_pool_regions_wait(p, 1), 1, "region 0 registered, 1 held at the gate");
    kvt_pool_stats_t st;
    kvt_pool_stats(p, &st);
    cr_assert_eq(st.regions_registered, 1);
    cr_assert_eq(st.regions_pending, 2);
    size_t off[16];
    int n = s_fill(p, h, 100, off, 16);
    cr_assert_eq(n, 4, "only the registered 4 MiB serve");
    uint8_t *base = kvt_pool_base(p);
    for (int i = 0; i < n; i++) {
        cr_assert_lt(off[i], 4 * S_MIB);
        cr_assert(kvt_pool_pinned(p, base + off[i], S_MIB));
    }
    cr_assert_not(kvt_pool_pinned(p, base + 5 * S_MIB, 4096), "region 1 is not registered");

    s_gate_open(&f);
    cr_assert_eq(kvt_pool_regions_wait(p, 3), 3);
    int m = s_fill(p, h, 200, off, 16);
    cr_assert_eq(m, 8, "the two regions registered since serve");
    for (int i = 0; i < m; i++)
        cr_assert_geq(off[i], 4 * S_MIB);
    kvt_pool_stats(p, &st);
    cr_assert_eq(st.regions_registered, 3);
    cr_assert(kvt_pool_pinned(p, base + 5 * S_MIB, 4096));
    cr_assert_not(kvt_pool_pinned(p, base + 4 * S_MIB - 4096, 8192), "a range over a boundary");
    cr_assert_eq(f.calls, 3);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(f.ptrs[i], base + (size_t)i * 4 * S_MIB, "address order");
        cr_assert_eq(f.lens[i], 4 * S_MIB);
    }
    kvt_pool_destroy(&p);
    cr_assert_eq(f.unregistered, 3, "destroy unregisters every registered region");
}

Test(pool_regions, a_refused_region_is_never_served_unless_asked)
{
    for (int unpinned = 0; unpinned < 2; unpinned++) {
        s_fake_t f;
        s_fake_init(&f, 4 * S_MIB, -1, 1);
        atomic_store(&s_warnings, 0);
        kvt_pool_t *p = s_pool(12 * S_MIB, 4 * S_MIB, &f, unpinned);
        kvt_holder_t h;
        cr_assert_eq(kvt_pool_holder_add(p, "t", &h), KVT_STORE_OK);
        cr_assert_eq(kvt_pool_regions_wait(p, 3), 2);
        kvt_pool_stats_t st;
        kvt_pool_stats(p, &st);
        cr_assert_eq(st.regions_failed, 1);
        cr_assert_eq(st.regions_registered, 2);
        //  The warning is queued under the lock and emitted at an unlock.
        kvt_pool_stats(p, &st);
        cr_assert_eq(atomic_load(&s_warnings), 1, "the refusal is logged once");
        size_t off[16];
        int n = s_fill(p, h, 100, off, 16);
        cr_assert_eq(n, unpinned ? 12 : 8);
        uint8_t *base = kvt_pool_base(p);
        int in_refused = 0;
        for (int i = 0; i < n; i++) {
            bool r1 = off[i] / (4 * S_MIB) == 1;
            in_refused += r1;
            cr_assert_eq(kvt_pool_pinned(p, base + off[i], S_MIB), !r1);
        }
        cr_assert_eq(in_refused, unpinned ? 4 : 0);
        kvt_pool_destroy(&p);
        cr_assert_eq(f.unregistered, 2, "only the registered regions are unregistered");
    }
}

Test(pool_regions, destroy_while_registration_is_held_stops_the_thread)
{
    s_fake_t f;
    s_fake_init(&f, 4 * S_MIB, 1, -1);
    kvt_pool_t *p = s_pool(12 * S_MIB, 4 * S_MIB, &f, false);
    cr_assert_eq(kvt_pool_regions_wait(p, 1), 1);
    //  Destroy only once the thread is inside region 1's call, held at the
    //  gate (a loaded machine may not have got it there yet).
    pthread_mutex_lock(&f.mu);
    while (f.held < 1)
        pthread_cond_wait(&f.cv, &f.mu);
    pthread_mutex_unlock(&f.mu);
    //  The held call (region 1) returns 200 ms later, long after destroy
    //  asked the thread to stop: region 2 is never registered.
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, s_gate_later, &f), 0);
    kvt_pool_destroy(&p);
    pthread_join(t, NULL);
    cr_assert_eq(f.calls, 2, "the thread stopped after the held region, not at the end");
    cr_assert_eq(f.unregistered, f.calls, "every region registered was unregistered");
}

// --------------------------------------------------------- pool_numa ----

static int s_nodes = 1;
static int s_mbind_calls, s_mbind_mode, s_mbind_rc;
static unsigned long s_mbind_mask;
static size_t s_mbind_resident; //  arena bytes resident when mbind ran

static int s_fake_nodes(void)
{
    return s_nodes;
}

static long s_fake_mbind(void *addr, unsigned long len, int mode, const unsigned long *mask,
                         unsigned long maxnode, unsigned flags)
{
    (void)maxnode, (void)flags;
    s_mbind_calls++;
    s_mbind_mode = mode;
    s_mbind_mask = mask[0];
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t n = (len + page - 1) / page;
    unsigned char *vec = malloc(n);
    cr_assert_not_null(vec);
    cr_assert_eq(mincore(addr, len, vec), 0);
    for (size_t i = 0; i < n; i++)
        s_mbind_resident += (vec[i] & 1) * page;
    free(vec);
    if (s_mbind_rc) {
        errno = EPERM;
        return -1;
    }
    return 0;
}

static kvt_pool_t *s_numa_pool(int nodes, int bind, bool interleave, int rc)
{
    kvt_pool_numa_nodes = s_fake_nodes;
    kvt_pool_mbind = s_fake_mbind;
    s_nodes = nodes;
    s_mbind_calls = 0;
    s_mbind_rc = rc;
    s_mbind_resident = 0;
    atomic_store(&s_warnings, 0);
    kvt_pool_config_t cfg;
    kvt_pool_config_defaults(&cfg);
    cfg.capacity_bytes = 8 * S_MIB;
    cfg.log = s_log;
    cfg.numa_bind = bind;
    cfg.numa_interleave = interleave;
    char err[256] = "";
    kvt_pool_t *p = kvt_pool_new(&cfg, err, sizeof err);
    cr_assert_not_null(p, "%s", err);
    return p;
}

Test(pool_numa, the_arena_is_bound_to_its_node_before_first_touch)
{
    kvt_pool_t *p = s_numa_pool(4, 1 + 2, false, 0);
    cr_assert_eq(s_mbind_calls, 1);
    cr_assert_eq(s_mbind_mode, 2, "MPOL_BIND");
    cr_assert_eq(s_mbind_mask, 1ul << 2, "node 2");
    cr_assert_eq(s_mbind_resident, 0, "bound before any page was touched");
    cr_assert_eq(p->numa_mode, 2);
    kvt_pool_destroy(&p);
}

Test(pool_numa, a_shared_pool_is_interleaved_over_every_node)
{
    kvt_pool_t *p = s_numa_pool(4, 0, true, 0);
    cr_assert_eq(s_mbind_calls, 1);
    cr_assert_eq(s_mbind_mode, 3, "MPOL_INTERLEAVE");
    cr_assert_eq(s_mbind_mask, 0xful);
    kvt_pool_destroy(&p);
}

Test(pool_numa, one_node_a_missing_node_and_a_refusal_fall_back_to_first_touch)
{
    kvt_pool_t *p = s_numa_pool(1, 1, false, 0);
    cr_assert_eq(s_mbind_calls, 0, "one node: nothing to choose");
    cr_assert_eq(p->numa_mode, 0);
    kvt_pool_destroy(&p);
    p = s_numa_pool(2, 1 + 5, false, 0);
    cr_assert_eq(s_mbind_calls, 0);
    cr_assert_eq(atomic_load(&s_warnings), 1, "a node that does not exist is said");
    kvt_pool_destroy(&p);
    p = s_numa_pool(2, 1 + 1, false, 1);
    cr_assert_eq(s_mbind_calls, 1);
    cr_assert_eq(atomic_load(&s_warnings), 1, "a refused mbind is said");
    cr_assert_eq(p->numa_mode, 0);
    cr_assert_eq(kvt_pool_put(p, 1, (kvt_hash_t){.lo = 1}, KVT_OBJ_KV, "abc", 3), KVT_STORE_OK,
                 "the pool works on first-touch pages");
    kvt_pool_destroy(&p);
    p = s_numa_pool(4, 0, false, 0);
    cr_assert_eq(s_mbind_calls, 0, "nothing asked");
    kvt_pool_destroy(&p);
}

//  Writes <root>/bus/pci/devices/<id>/numa_node.
static void s_sysfs_node(const char *root, const char *id, const char *text)
{
    char path[256];
    const char *parts[] = {"bus", "pci", "devices", id};
    snprintf(path, sizeof path, "%s", root);
    for (int i = 0; i < 4; i++) {
        size_t used = strlen(path);
        snprintf(path + used, sizeof path - used, "/%s", parts[i]);
        mkdir(path, 0700);
    }
    size_t used = strlen(path);
    snprintf(path + used, sizeof path - used, "/numa_node");
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    fputs(text, f);
    fclose(f);
}

Test(pool_numa, a_gpus_node_comes_from_its_pci_device_in_sysfs)
{
    char root[64];
    snprintf(root, sizeof root, "/tmp/kvt_sysfs_%d_XXXXXX", (int)getpid());
    cr_assert_not_null(mkdtemp(root));
    s_sysfs_node(root, "0000:3b:00.0", "1\n");
    s_sysfs_node(root, "0000:5e:00.0", "-1\n");
    cr_assert_eq(kvt_numa_node_of_pci(root, "0000:3B:00.0"), 1, "CUDA's upper case");
    cr_assert_eq(kvt_numa_node_of_pci(root, "0000:3b:00.0"), 1);
    cr_assert_eq(kvt_numa_node_of_pci(root, "0000:5e:00.0"), -1, "the kernel's one-node answer");
    cr_assert_eq(kvt_numa_node_of_pci(root, "0000:99:00.0"), -1, "no such device");
    cr_assert_eq(kvt_numa_node_of_pci(root, "../../etc"), -1, "not a bus id");
    cr_assert_eq(kvt_numa_node_of_pci(root, ""), -1);
}
