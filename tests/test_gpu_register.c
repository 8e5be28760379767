/*  test_gpu_register.c — pinned memory for a device backend without a
    second buffer: a CPU pool registers its own arena, region by region,
    through the device runtime table (cudaHostRegister / hipHostRegister),
    on a fake runtime as in test_gpu_devrt.c.

    gpu_register: the pool's regions reach the runtime in address order
    with their sizes and are unregistered at the pool's destroy; pinned
    lookups (kvt_gpu_host_pinned) over many ranges kept in address order;
    an overlapping registration refused before the runtime is called; a
    runtime without registration (EUNSUPPORTED) and a refused registration
    (EDEVICE naming the call) leave the pool's regions unserved or, with
    serve_unpinned, served unpinned; the host backend needs no registration;
    destroy unregisters what is still registered.
*/
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/kvt_gpu_devrt.h"
#include "gpu/kvt_gpu_int.h"
#include "kvtier/kvt_gpu.h"
#include "kvtier/kvt_pool.h"

#define F_OK     0
#define F_EINVAL 1
#define F_EREG   2
#define S_MIB    (1u << 20)

//  The fake runtime's state; the pool's registration thread calls it too.
static struct {
    pthread_mutex_t mu;
    int register_rc; //  what host_register answers
    int registers;   //  host_register calls
    int unregisters; //  host_unregister calls
    void *ptrs[16];  //  their pointers, in call order
    size_t lens[16]; //  their lengths
} F = {.mu = PTHREAD_MUTEX_INITIALIZER};

static const char *s_f_name(int rc)
{
    return rc == F_OK ? "fakeSuccess" : rc == F_EREG ? "fakeErrorHostRegister" : "fakeError";
}

static int s_f_ok(void)
{
    return F_OK;
}

static int s_f_count(int *n)
{
    *n = 1;
    return F_OK;
}

static int s_f_get_device(int *d)
{
    *d = 0;
    return F_OK;
}

static int s_f_set_device(int d)
{
    return d == 0 ? F_OK : F_EINVAL;
}

static int s_f_info(int device, char *name, size_t name_len, size_t *memory, char *runtime,
                    size_t runtime_len)
{
    snprintf(name, name_len, "fake-gpu-%d", device);
    *memory = (size_t)1 << 30;
    snprintf(runtime, runtime_len, "fake runtime 1");
    return F_OK;
}

static int s_f_malloc(void **out, size_t bytes)
{
    *out = calloc(1, bytes);
    return *out ? F_OK : F_EINVAL;
}

static int s_f_free(void *p)
{
    free(p);
    return F_OK;
}

static int s_f_register(void *ptr, size_t bytes)
{
    pthread_mutex_lock(&F.mu);
    if (F.registers < 16) {
        F.ptrs[F.registers] = ptr;
        F.lens[F.registers] = bytes;
    }
    F.registers++;
    int rc = F.register_rc;
    pthread_mutex_unlock(&F.mu);
    return rc;
}

static int s_f_unregister(void *ptr)
{
    (void)ptr;
    pthread_mutex_lock(&F.mu);
    F.unregisters++;
    pthread_mutex_unlock(&F.mu);
    return F_OK;
}

static int s_f_bus_id(int device, char *buf, int len)
{
    snprintf(buf, (size_t)len, "0000:3B:%02X.0", device);
    return F_OK;
}

static kvt_devrt_t s_rt(bool can_register)
{
    return (kvt_devrt_t){
        .name = "fake",
        .ok = F_OK,
        .not_ready = 99,
        .error_name = s_f_name,
        .error_string = s_f_name,
        .get_last_error = s_f_ok,
        .get_device_count = s_f_count,
        .get_device = s_f_get_device,
        .set_device = s_f_set_device,
        .device_info = s_f_info,
        .device_sync = s_f_ok,
        .dev_malloc = s_f_malloc,
        .dev_free = s_f_free,
        .host_alloc = s_f_malloc,
        .host_free = s_f_free,
        .host_alloc_call = "fakeHostAlloc",
        .host_register = can_register ? s_f_register : NULL,
        .host_unregister = can_register ? s_f_unregister : NULL,
        .host_register_call = "fakeHostRegister",
        .pci_bus_id = can_register ? s_f_bus_id : NULL,
    };
}

static void s_quiet(void *arg, int level, const char *line)
{
    (void)arg, (void)level, (void)line;
}

static kvt_gpu_t *s_open(const kvt_devrt_t *rt)
{
    pthread_mutex_lock(&F.mu);
    F.register_rc = F_OK;
    F.registers = F.unregisters = 0;
    pthread_mutex_unlock(&F.mu);
    kvt_gpu_opts_t o = {0};
    o.backend = KVT_GPU_BACKEND_CUDA;
    o.log = s_quiet;
    kvt_gpu_t *gpu = kvt_gpu_open(&o, rt);
    cr_assert_not_null(gpu, "%s", kvt_gpu_last_error());
    return gpu;
}

static kvt_pool_t *s_pool(kvt_gpu_t *gpu, bool unpinned)
{
    kvt_pool_config_t cfg;
    kvt_pool_config_defaults(&cfg);
    cfg.capacity_bytes = 12 * S_MIB;
    cfg.region_bytes = 4 * S_MIB;
    cfg.register_fn = kvt_gpu_host_register_fn;
    cfg.unregister_fn = kvt_gpu_host_unregister_fn;
    cfg.register_arg = gpu;
    cfg.serve_unpinned = unpinned;
    cfg.log = s_quiet;
    char err[256] = "";
    kvt_pool_t *p = kvt_pool_new(&cfg, err, sizeof err);
    cr_assert_not_null(p, "%s", err);
    return p;
}

Test(gpu_register, the_pool_registers_its_arena_region_by_region_through_the_runtime)
{
    kvt_devrt_t rt = s_rt(true);
    kvt_gpu_t *gpu = s_open(&rt);
    kvt_pool_t *pool = s_pool(gpu, false);
    cr_assert_eq(kvt_pool_regions_wait(pool, 3), 3);
    uint8_t *base = kvt_pool_base(pool);
    cr_assert_eq(F.registers, 3);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(F.ptrs[i], base + (size_t)i * 4 * S_MIB, "address order");
        cr_assert_eq(F.lens[i], 4 * S_MIB);
    }
    cr_assert(kvt_gpu_host_pinned(gpu, base, 4 * S_MIB));
    cr_assert(kvt_gpu_host_pinned(gpu, base + 9 * S_MIB, S_MIB));
    cr_assert_not(kvt_gpu_host_pinned(gpu, base + 4 * S_MIB - 8, 16),
                  "two registrations are not one pinned range");
    cr_assert_not(kvt_gpu_host_pinned(gpu, base + 12 * S_MIB, 1), "past the arena");
    //  The device copies straight from the pool's objects.
    kvt_resv_t resv = {0};
    void *ptr = NULL;
    kvt_holder_t h;
    cr_assert_eq(kvt_pool_holder_add(pool, "t", &h), KVT_STORE_OK);
    cr_assert_eq(
        kvt_pool_reserve(pool, 1, (kvt_hash_t){.lo = 1}, KVT_OBJ_KV, S_MIB, h, &resv, &ptr),
        KVT_STORE_OK);
    cr_assert(kvt_gpu_host_pinned(gpu, ptr, S_MIB));
    kvt_pool_destroy(&pool);
    cr_assert_eq(F.unregisters, 3, "the pool's destroy unregisters its regions");
    cr_assert_not(kvt_gpu_host_pinned(gpu, base, 1));
    kvt_gpu_destroy(&gpu);
    cr_assert_eq(F.unregisters, 3, "nothing left for the device's destroy");
}

Test(gpu_register, pinned_lookups_find_every_range_among_many)
{
    kvt_devrt_t rt = s_rt(true);
    kvt_gpu_t *gpu = s_open(&rt);
    enum { N = 40 };
    uint8_t *bufs[N];
    for (int i = 0; i < N; i++) {
        bufs[i] = kvt_gpu_host_alloc(gpu, 4096 + (size_t)i * 64);
        cr_assert_not_null(bufs[i]);
    }
    static uint8_t arena[N][8192];
    for (int i = 0; i < N; i++)
        cr_assert_eq(kvt_gpu_host_register(gpu, arena[(i * 7) % N], 4096), 0, "%s",
                     kvt_gpu_last_error());
    for (int i = 0; i < N; i++) {
        size_t len = 4096 + (size_t)i * 64;
        cr_assert(kvt_gpu_host_pinned(gpu, bufs[i], len), "allocation %d", i);
        cr_assert(kvt_gpu_host_pinned(gpu, bufs[i] + len - 1, 1));
        cr_assert_not(kvt_gpu_host_pinned(gpu, bufs[i], len + 1));
        cr_assert(kvt_gpu_host_pinned(gpu, arena[i], 4096), "registration %d", i);
        cr_assert(kvt_gpu_host_pinned(gpu, arena[i] + 4095, 1));
        cr_assert_not(kvt_gpu_host_pinned(gpu, arena[i] + 4096, 1), "the gap after it");
    }
    for (int i = 0; i < N; i += 2) {
        kvt_gpu_host_free(gpu, bufs[i]);
        kvt_gpu_host_unregister(gpu, arena[i]);
    }
    for (int i = 0; i < N; i++) {
        cr_assert_eq(kvt_gpu_host_pinned(gpu, arena[i], 4096), i % 2 == 1);
        if (i % 2)
            cr_assert(kvt_gpu_host_pinned(gpu, bufs[i], 4096));
    }
    cr_assert_eq(F.unregisters, N / 2);
    kvt_gpu_destroy(&gpu);
    cr_assert_eq(F.unregisters, N, "destroy unregisters what is still registered");
}

Test(gpu_register, an_overlapping_registration_is_refused_before_the_runtime)
{
    kvt_devrt_t rt = s_rt(true);
    kvt_gpu_t *gpu = s_open(&rt);
    static uint8_t mem[3 * 4096];
    cr_assert_eq(kvt_gpu_host_register(gpu, mem + 4096, 4096), 0);
    cr_assert_eq(kvt_gpu_host_register(gpu, mem, 4097), KVT_GPU_EINVAL);
    cr_assert_eq(kvt_gpu_host_register(gpu, mem + 8191, 2), KVT_GPU_EINVAL);
    cr_assert(strstr(kvt_gpu_last_error(), "overlap"), "%s", kvt_gpu_last_error());
    cr_assert_eq(kvt_gpu_host_register(gpu, mem, 0), KVT_GPU_EINVAL);
    cr_assert_eq(F.registers, 1, "the runtime saw only the good one");
    cr_assert_eq(kvt_gpu_host_register(gpu, mem, 4096), 0, "adjacent is fine");
    kvt_gpu_destroy(&gpu);
    cr_assert_eq(F.unregisters, 2);
}

Test(gpu_register, without_registration_the_regions_serve_only_unpinned_when_asked)
{
    for (int unpinned = 0; unpinned < 2; unpinned++) {
        kvt_devrt_t rt = s_rt(false);
        kvt_gpu_t *gpu = s_open(&rt);
        static uint8_t mem[4096];
        cr_assert_eq(kvt_gpu_host_register(gpu, mem, sizeof mem), KVT_GPU_EUNSUPPORTED);
        cr_assert(strstr(kvt_gpu_last_error(), "no host registration"), "%s", kvt_gpu_last_error());
        kvt_pool_t *pool = s_pool(gpu, unpinned);
        cr_assert_eq(kvt_pool_regions_wait(pool, 3), 0);
        kvt_pool_stats_t st;
        kvt_pool_stats(pool, &st);
        cr_assert_eq(st.regions_failed, 3);
        kvt_holder_t h;
        cr_assert_eq(kvt_pool_holder_add(pool, "t", &h), KVT_STORE_OK);
        kvt_resv_t resv = {0};
        void *ptr = NULL;
        int rc =
            kvt_pool_reserve(pool, 1, (kvt_hash_t){.lo = 1}, KVT_OBJ_KV, S_MIB, h, &resv, &ptr);
        cr_assert_eq(rc, unpinned ? KVT_STORE_OK : KVT_STORE_ENOSPACE);
        if (unpinned)
            cr_assert_not(kvt_gpu_host_pinned(gpu, ptr, S_MIB));
        kvt_pool_destroy(&pool);
        kvt_gpu_destroy(&gpu);
    }
}

Test(gpu_register, a_refused_registration_names_the_call_and_leaves_the_region_unserved)
{
    kvt_devrt_t rt = s_rt(true);
    kvt_gpu_t *gpu = s_open(&rt);
    pthread_mutex_lock(&F.mu);
    F.register_rc = F_EREG;
    pthread_mutex_unlock(&F.mu);
    static uint8_t mem[4096];
    cr_assert_eq(kvt_gpu_host_register(gpu, mem, sizeof mem), KVT_GPU_EDEVICE);
    cr_assert(strstr(kvt_gpu_last_error(), "fakeHostRegister"), "%s", kvt_gpu_last_error());
    cr_assert_not(kvt_gpu_host_pinned(gpu, mem, 1));
    kvt_pool_t *pool = s_pool(gpu, false);
    cr_assert_eq(kvt_pool_regions_wait(pool, 3), 0);
    //  Unserved: with every region refused, nothing can be reserved.
    kvt_holder_t h;
    cr_assert_eq(kvt_pool_holder_add(pool, "t", &h), KVT_STORE_OK);
    kvt_resv_t resv = {0};
    void *ptr = NULL;
    cr_assert_eq(
        kvt_pool_reserve(pool, 1, (kvt_hash_t){.lo = 1}, KVT_OBJ_KV, S_MIB, h, &resv, &ptr),
        KVT_STORE_ENOSPACE);
    kvt_pool_destroy(&pool);
    cr_assert_eq(F.unregisters, 0, "nothing was registered");
    kvt_gpu_destroy(&gpu);
}

Test(gpu_register, the_host_backend_needs_no_registration)
{
    kvt_gpu_opts_t o = {0};
    o.backend = KVT_GPU_BACKEND_HOST;
    o.log = s_quiet;
    kvt_gpu_t *gpu = kvt_gpu_new(&o);
    cr_assert_not_null(gpu, "%s", kvt_gpu_last_error());
    kvt_pool_t *pool = s_pool(gpu, false);
    cr_assert_eq(kvt_pool_regions_wait(pool, 3), 3);
    cr_assert(kvt_gpu_host_pinned(gpu, kvt_pool_base(pool), 4 * S_MIB));
    kvt_pool_destroy(&pool);
    kvt_gpu_destroy(&gpu);
}

Test(gpu_register, the_pci_bus_id_comes_from_the_runtime_or_is_unsupported)
{
    kvt_devrt_t rt = s_rt(true);
    kvt_gpu_t *gpu = s_open(&rt);
    char id[32];
    cr_assert_eq(kvt_gpu_pci_bus_id(gpu, id, sizeof id), 0, "%s", kvt_gpu_last_error());
    cr_assert_str_eq(id, "0000:3B:00.0");
    kvt_gpu_destroy(&gpu);
    rt = s_rt(false);
    gpu = s_open(&rt);
    cr_assert_eq(kvt_gpu_pci_bus_id(gpu, id, sizeof id), KVT_GPU_EUNSUPPORTED);
    cr_assert_str_eq(id, "");
    kvt_gpu_destroy(&gpu);
    kvt_gpu_opts_t o = {0};
    o.backend = KVT_GPU_BACKEND_HOST;
    o.log = s_quiet;
    gpu = kvt_gpu_new(&o);
    cr_assert_not_null(gpu);
    cr_assert_eq(kvt_gpu_pci_bus_id(gpu, id, sizeof id), KVT_GPU_EUNSUPPORTED);
    kvt_gpu_destroy(&gpu);
}
