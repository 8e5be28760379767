/*  test_gpu_devrt.c — the shared device backend (kvt_gpu_devrt.c, what CUDA
    and HIP run) driven through the public calls over a fake runtime table:
    device memory is host memory, a stream queues its copies and host
    functions and runs them only when synchronized, and every call is
    counted. The fake goes through the same selection, probe and init as a
    real runtime (kvt_gpu_open with an explicit CUDA request).

    What it proves: the probe and the device selection on every calling
    thread; copies land byte-exact in the chunk layout; a failed call is
    atomic for the caller (a refusal of the first segment queued nothing; a
    refusal part-way settles the stream before returning, so nothing runs
    on the caller's buffer, and fails the stream; a settle that fails is
    logged); a refused batch settles before the per-segment fallback and
    turns batching off; a device allocation whose clearing fails is freed.

    The kernel path: the fake "launches" the kernel by queuing the host
    emulation of its threads over the table the backend built (so the bytes
    the fake moves are the device kernel's index arithmetic), and has a
    virtual clock its calls advance by modelled costs, which makes the
    start-up micro-benchmark's choice exact. Proven: the benchmark's
    crossover and the copies that follow it, the configured crossover and
    copy_path overriding it, no compiler / a compile failure / a module that
    does not load (the backend copies as before and says so), a refused
    launch falling back to the batch and then per segment (kernel off,
    logged once), tables in flight reclaimed by their events and a full ring
    falling back without blocking.
*/
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/kvt_gpu_devrt.h"
#include "gpu/kvt_gpu_kernel.h"
#include "kvtier/kvt_gpu.h"

// ------------------------------------------------------------ the fake ----

enum {
    F_OK = 0,
    F_EINVAL = 1,
    F_ENOMEM = 2,
    F_ENODEV = 100,
    F_NOT_READY = 600,
    F_ELAUNCH = 719,
};

#define F_MAX_OPS 512

//  One queued op: a copy, or a host function when fn is set.
typedef struct {
    void *dst;           //  copy destination
    const void *src;     //  copy source
    size_t len;          //  copy length
    kvt_gpu_host_fn *fn; //  host function, or NULL
    void *arg;           //  its argument
    const uint64_t *tab; //  kernel launch: its table, or NULL
    int to_host;         //  kernel launch: gather (1) or scatter (0)
    uint32_t grid;       //  kernel launch: thread blocks
} f_op_t;

typedef struct {
    f_op_t ops[F_MAX_OPS]; //  queued ops (queued - done pending, from done)
    int queued;            //  ops queued so far
    int done;              //  ops run so far
} f_stream_t;

typedef struct {
    f_stream_t *st; //  stream of the last record, or NULL
    int mark;       //  st->queued at the record
} f_event_t;

//  The fake's knobs and counters (each Criterion test runs in its own
//  process, so one global instance is enough).
static struct {
    int count;              //  devices present
    int count_rc;           //  what get_device_count returns
    int current;            //  the calling thread's current device
    int set_device_calls;   //  set_device calls
    int last_error_calls;   //  get_last_error calls
    int live_allocs;        //  device + pinned allocations not freed
    int memset_rc;          //  what memset returns
    int copies;             //  memcpy_async calls accepted
    int fail_copy_at;       //  memcpy_async call refused (-1: none)
    int sync_calls;         //  stream_sync calls
    int sync_rc;            //  what stream_sync returns (it runs nothing on error)
    int pending_at_sync;    //  pending ops on the stream the last sync found
    int query_rc;           //  when not F_OK, what stream_query returns
    int batches;            //  memcpy_batch calls
    int batch_rc;           //  what memcpy_batch returns
    int batch_partial;      //  segments a refused batch still queues
    int pending_at_copy;    //  pending ops when the first memcpy_async after a batch ran
    bool after_batch;       //  a batch was refused; the next memcpy_async records pending
    int host_fn_rc;         //  what host_fn returns
    f_stream_t *streams[8]; //  streams created, for the invariant checks
    int nstreams;           //  entries in streams
    bool kernel;            //  the table has the kernel entries
    int image_rc;           //  what kernel_image returns (a KVT_GPU_E* code)
    int module_rc;          //  what module_load returns
    int modules;            //  modules loaded and not unloaded
    int launch_rc;          //  what launch returns
    int launch_tries;       //  launch calls
    int launches;           //  launches accepted
    uint32_t last_grid;     //  thread blocks of the last launch
    uint64_t clock;         //  virtual ns, advanced by the modelled cost of each call
} F;

//  Modelled costs (ns): a copy call, a batch entry, a launch; bytes move at
//  50 bytes / ns by copy, 25 by kernel. With 64 segments the kernel wins up
//  to 26 KB segments: the benchmark must pick 16 KiB.
#define F_CALL_NS   2000u
#define F_ENTRY_NS  600u
#define F_LAUNCH_NS 5000u
#define F_CROSSOVER 16384u

static void s_fake_reset(void)
{
    memset(&F, 0, sizeof F);
    F.count = 1;
    F.fail_copy_at = -1;
}

static const char *s_f_name(int rc)
{
    switch (rc) {
    case F_OK:
        return "fakeSuccess";
    case F_EINVAL:
        return "fakeErrorInvalidValue";
    case F_ENOMEM:
        return "fakeErrorMemoryAllocation";
    case F_ENODEV:
        return "fakeErrorNoDevice";
    case F_NOT_READY:
        return "fakeErrorNotReady";
    case F_ELAUNCH:
        return "fakeErrorLaunchFailure";
    }
    return "fakeErrorUnknown";
}

static const char *s_f_string(int rc)
{
    return rc == F_OK ? "no error" : "fake failure";
}

static int s_f_last_error(void)
{
    F.last_error_calls++;
    return F_OK;
}

static int s_f_count(int *count)
{
    if (F.count_rc != F_OK)
        return F.count_rc; //  leaves *count untouched, as CUDA does
    *count = F.count;
    return F_OK;
}

static int s_f_get_device(int *device)
{
    *device = F.current;
    return F_OK;
}

static int s_f_set_device(int device)
{
    F.set_device_calls++;
    if (device >= F.count)
        return F_EINVAL;
    F.current = device;
    return F_OK;
}

static int s_f_info(int device, char *name, size_t name_len, size_t *memory, char *runtime,
                    size_t runtime_len)
{
    snprintf(name, name_len, "fake-gpu-%d", device);
    *memory = (size_t)1 << 30;
    snprintf(runtime, runtime_len, "fake runtime 1");
    return F_OK;
}

static int s_f_ok(void)
{
    return F_OK;
}

static int s_f_malloc(void **out, size_t bytes)
{
    *out = malloc(bytes);
    if (!*out)
        return F_ENOMEM;
    F.live_allocs++;
    return F_OK;
}

static int s_f_free(void *ptr)
{
    free(ptr);
    F.live_allocs--;
    return F_OK;
}

static int s_f_memset(void *ptr, int value, size_t bytes)
{
    if (F.memset_rc != F_OK)
        return F.memset_rc;
    memset(ptr, value, bytes);
    return F_OK;
}

static int s_f_stream_create(void **out)
{
    f_stream_t *st = calloc(1, sizeof *st);
    cr_assert_not_null(st);
    cr_assert_lt(F.nstreams, 8);
    F.streams[F.nstreams++] = st;
    *out = st;
    return F_OK;
}

static void s_f_run(f_stream_t *st, int upto)
{
    for (; st->done < upto; st->done++) {
        f_op_t *op = &st->ops[st->done % F_MAX_OPS];
        if (op->fn)
            op->fn(op->arg);
        else if (op->tab)
            kvt_gpu_ktab_run_host(op->tab, op->to_host, op->grid);
        else
            memcpy(op->dst, op->src, op->len);
    }
}

static int s_f_stream_destroy(void *stream)
{
    f_stream_t *st = stream;
    cr_assert_eq(st->done, st->queued, "destroyed with ops pending");
    for (int i = 0; i < F.nstreams; i++)
        if (F.streams[i] == st)
            F.streams[i] = F.streams[--F.nstreams];
    free(st);
    return F_OK;
}

static int s_f_stream_query(void *stream)
{
    f_stream_t *st = stream;
    if (F.query_rc != F_OK)
        return F.query_rc;
    return st->done == st->queued ? F_OK : F_NOT_READY;
}

static int s_f_stream_sync(void *stream)
{
    f_stream_t *st = stream;
    F.sync_calls++;
    F.pending_at_sync = st->queued - st->done;
    if (F.sync_rc != F_OK)
        return F.sync_rc;
    s_f_run(st, st->queued);
    return F_OK;
}

static int s_f_event_create(void **out)
{
    *out = calloc(1, sizeof(f_event_t));
    return *out ? F_OK : F_ENOMEM;
}

static int s_f_event_destroy(void *event)
{
    free(event);
    return F_OK;
}

static int s_f_event_record(void *event, void *stream)
{
    f_event_t *e = event;
    e->st = stream;
    e->mark = e->st->queued;
    return F_OK;
}

static int s_f_wait(void *stream, void *event)
{
    (void)stream;
    (void)event;
    return F_OK;
}

static int s_f_event_query(void *event)
{
    f_event_t *e = event;
    return !e->st || e->st->done >= e->mark ? F_OK : F_NOT_READY;
}

static int s_f_event_sync(void *event)
{
    f_event_t *e = event;
    if (e->st)
        s_f_run(e->st, e->mark);
    return F_OK;
}

static void s_f_queue(f_stream_t *st, f_op_t op)
{
    cr_assert_lt(st->queued - st->done, F_MAX_OPS, "fake queue full");
    st->ops[st->queued++ % F_MAX_OPS] = op;
}

static int s_f_memcpy(void *dst, const void *src, size_t len, kvt_gpu_dir_t dir, void *stream)
{
    (void)dir;
    f_stream_t *st = stream;
    if (F.after_batch) {
        F.after_batch = false;
        F.pending_at_copy = st->queued - st->done;
    }
    if (F.copies == F.fail_copy_at)
        return F_EINVAL;
    F.copies++;
    F.clock += F_CALL_NS + len / 50;
    s_f_queue(st, (f_op_t){.dst = dst, .src = src, .len = len});
    return F_OK;
}

static int s_f_batch(const kvt_gpu_copy_t *copy, void *stream, size_t *fail_idx)
{
    f_stream_t *st = stream;
    F.batches++;
    uint32_t n = F.batch_rc == F_OK ? copy->count : (uint32_t)F.batch_partial;
    F.clock += F_CALL_NS + (uint64_t)copy->count * F_ENTRY_NS + copy->bytes / 50;
    for (uint32_t k = 0; k < n; k++)
        s_f_queue(st, (f_op_t){.dst = copy->dst[k], .src = copy->src[k], .len = copy->len[k]});
    if (F.batch_rc != F_OK) {
        *fail_idx = n;
        F.after_batch = true;
    }
    return F.batch_rc;
}

static int s_f_host_fn(void *stream, kvt_gpu_host_fn *fn, void *arg)
{
    if (F.host_fn_rc != F_OK)
        return F.host_fn_rc;
    s_f_queue(stream, (f_op_t){.fn = fn, .arg = arg});
    return F_OK;
}

static int s_f_image(int device, void **image, size_t *len, char *why, size_t why_len)
{
    (void)device;
    if (F.image_rc != 0) {
        snprintf(why, why_len, "%s",
                 F.image_rc == KVT_GPU_EUNSUPPORTED ? "fakertc: no library"
                                                    : "fakertc: compiling failed: syntax");
        return F.image_rc;
    }
    *image = strdup(kvt_gpu_kernel_source());
    *len = strlen(*image) + 1;
    snprintf(why, why_len, "fakertc 1.0, fake_arch");
    return 0;
}

static int s_f_module_load(const void *image, size_t len, void **module, void **fn)
{
    cr_assert_eq(strcmp(image, kvt_gpu_kernel_source()), 0, "the image is the kernel's");
    cr_assert_eq(len, strlen(image) + 1);
    if (F.module_rc != F_OK)
        return F.module_rc;
    F.modules++;
    *module = &F.modules;
    *fn = &F.launches;
    return F_OK;
}

static int s_f_module_unload(void *module)
{
    cr_assert_eq(module, &F.modules);
    F.modules--;
    return F_OK;
}

//  Bytes a kernel table moves (every job's blocks in every entry).
static uint64_t s_f_tab_bytes(const uint64_t *tab)
{
    uint64_t per_block = 0, blocks = 0;
    for (uint64_t e = 0; e < tab[1]; e++)
        per_block += tab[3 + 4 * e + 1];
    for (uint64_t j = 0; j < tab[0]; j++)
        blocks += tab[3 + 4 * tab[1] + 4 * j + 1];
    return per_block * blocks;
}

static int s_f_launch(void *fn, uint32_t grid, uint32_t threads, const void *tab, int to_host,
                      void *stream)
{
    F.launch_tries++;
    cr_assert_eq(fn, &F.launches, "the kernel of the loaded module");
    cr_assert_eq(threads, KVT_GPU_KERNEL_THREADS);
    if (F.launch_rc != F_OK)
        return F.launch_rc;
    F.launches++;
    F.last_grid = grid;
    F.clock += F_LAUNCH_NS + s_f_tab_bytes(tab) / 25;
    s_f_queue(stream, (f_op_t){.tab = tab, .to_host = to_host, .grid = grid});
    return F_OK;
}

static uint64_t s_f_now(void)
{
    return F.clock;
}

//  The fake's table; `batch` adds the batched copy.
//  Registration of caller memory: pins nothing, but says yes.
static int s_f_register(void *ptr, size_t bytes)
{
    (void)ptr;
    (void)bytes;
    return F_OK;
}

static int s_f_unregister(void *ptr)
{
    (void)ptr;
    return F_OK;
}

static kvt_devrt_t s_fake_rt(bool batch)
{
    return (kvt_devrt_t){
        .name = "fake",
        .ok = F_OK,
        .not_ready = F_NOT_READY,
        .error_name = s_f_name,
        .error_string = s_f_string,
        .get_last_error = s_f_last_error,
        .get_device_count = s_f_count,
        .get_device = s_f_get_device,
        .set_device = s_f_set_device,
        .device_info = s_f_info,
        .device_sync = s_f_ok,
        .dev_malloc = s_f_malloc,
        .dev_free = s_f_free,
        .memset = s_f_memset,
        .host_alloc = s_f_malloc,
        .host_free = s_f_free,
        .host_alloc_call = "fakeHostAlloc",
        .host_register = s_f_register,
        .host_unregister = s_f_unregister,
        .host_register_call = "fakeHostRegister",
        .stream_create = s_f_stream_create,
        .stream_destroy = s_f_stream_destroy,
        .stream_query = s_f_stream_query,
        .stream_sync = s_f_stream_sync,
        .event_create = s_f_event_create,
        .event_destroy = s_f_event_destroy,
        .event_record = s_f_event_record,
        .stream_wait_event = s_f_wait,
        .event_query = s_f_event_query,
        .event_sync = s_f_event_sync,
        .memcpy_async = s_f_memcpy,
        .memcpy_batch = batch ? s_f_batch : NULL,
        .host_fn = s_f_host_fn,
        .host_fn_call = "fakeLaunchHostFunc",
        .batch_call = "fakeMemcpyBatch",
        .kernel_image = F.kernel ? s_f_image : NULL,
        .module_load = F.kernel ? s_f_module_load : NULL,
        .module_unload = F.kernel ? s_f_module_unload : NULL,
        .launch = F.kernel ? s_f_launch : NULL,
        .launch_call = "fakeLaunchKernel",
        .now_ns = s_f_now,
    };
}

// ------------------------------------------------------------- helpers ----

static atomic_int s_errors_logged;   //  level-0 log lines
static atomic_int s_warnings_logged; //  level-1 log lines
static char s_last_line[600];        //  the last log line
static char s_last_warning[600];     //  the last level-1 line

static void s_log(void *arg, int level, const char *line)
{
    (void)arg;
    if (level == 0)
        atomic_fetch_add(&s_errors_logged, 1);
    if (level == 1) {
        atomic_fetch_add(&s_warnings_logged, 1);
        snprintf(s_last_warning, sizeof s_last_warning, "%s", line);
    }
    snprintf(s_last_line, sizeof s_last_line, "%s", line);
}

#define NB 16  //  blocks per layer
#define BB 100 //  bytes of one block in one layer
#define NL 2   //  layers

//  A device on the fake runtime `rt` with one plane (NL layers x NB blocks
//  x BB bytes) and two slots of 64 bytes.
static kvt_gpu_t *s_open(const kvt_devrt_t *rt, int device)
{
    kvt_gpu_opts_t o = {0};
    o.backend = KVT_GPU_BACKEND_CUDA;
    o.device = device;
    o.log = s_log;
    kvt_gpu_t *gpu = kvt_gpu_open(&o, rt);
    cr_assert_not_null(gpu, "%s", kvt_gpu_last_error());
    kvt_gpu_plane_desc_t p = {"K", NL, NB, BB, NULL};
    cr_assert_eq(kvt_gpu_plane_add(gpu, &p), 0, "%s", kvt_gpu_last_error());
    kvt_gpu_state_desc_t slots = {2, 64, NULL};
    cr_assert_eq(kvt_gpu_state_add(gpu, KVT_GPU_STATE_SLOTS, &slots), 0);
    return gpu;
}

//  Ops queued on a stream's fake runtime stream and not run yet.
static int s_pending(kvt_gpu_stream_t *s)
{
    f_stream_t *st = kvt_gpu_devrt_stream(s);
    return st->queued - st->done;
}

//  Blocks that cannot merge (every other one): NL * n segments per copy.
static const uint32_t s_sparse[] = {1, 3, 5, 7, 9};

// --------------------------------------------------------------- tests ----

Test(devrt, a_device_opens_on_the_runtime_table_and_says_which)
{
    s_fake_reset();
    F.count = 2;
    kvt_devrt_t rt = s_fake_rt(false);
    kvt_gpu_t *gpu = s_open(&rt, 1);
    cr_assert_eq(kvt_gpu_backend(gpu), KVT_GPU_BACKEND_CUDA);
    const char *d = kvt_gpu_describe(gpu);
    cr_assert(strstr(d, "cuda (device 1: fake-gpu-1, 1.0 GiB, fake runtime 1): requested"), "%s",
              d);
    cr_assert_eq(F.current, 1, "the requested device was selected");
    cr_assert_eq(F.live_allocs, 2, "the plane and the slots");
    kvt_gpu_destroy(&gpu);
    cr_assert_eq(F.live_allocs, 0, "everything allocated was freed");

    //  A device the runtime does not have, and a runtime that has none.
    kvt_gpu_opts_t o = {.backend = KVT_GPU_BACKEND_CUDA, .device = 2, .log = s_log};
    cr_assert_null(kvt_gpu_open(&o, &rt));
    cr_assert(strstr(kvt_gpu_last_error(), "device 2 requested, 2 present"), "%s",
              kvt_gpu_last_error());
    F.count_rc = F_ENODEV;
    o.device = 0;
    cr_assert_null(kvt_gpu_open(&o, &rt));
    cr_assert(strstr(kvt_gpu_last_error(), "unusable: no usable device (fakeErrorNoDevice"), "%s",
              kvt_gpu_last_error());
    cr_assert_eq(F.last_error_calls, 1, "the sticky error was cleared");
}

Test(devrt, the_device_is_selected_again_when_the_caller_changed_it)
{
    s_fake_reset();
    F.count = 2;
    kvt_devrt_t rt = s_fake_rt(false);
    kvt_gpu_t *gpu = s_open(&rt, 1);
    kvt_gpu_stream_t *s = kvt_gpu_stream_new(gpu, "s");
    uint8_t buf[NB * NL * BB];
    int calls = F.set_device_calls;
    cr_assert_eq(kvt_gpu_gather(s, s_sparse, 1, buf, NL * BB), 0);
    cr_assert_eq(F.set_device_calls, calls, "already current: not set again");
    F.current = 0; //  the caller's own code switched devices on this thread
    cr_assert_eq(kvt_gpu_gather(s, s_sparse, 1, buf, NL * BB), 0);
    cr_assert_eq(F.current, 1, "selected again before queuing");
    cr_assert_eq(F.set_device_calls, calls + 1);
    cr_assert_eq(kvt_gpu_stream_synchronize(s), 0);
    kvt_gpu_stream_destroy(&s);
    kvt_gpu_destroy(&gpu);
}

Test(devrt, copies_land_byte_exact_when_the_stream_runs)
{
    s_fake_reset();
    kvt_devrt_t rt = s_fake_rt(false);
    kvt_gpu_t *gpu = s_open(&rt, 0);
    kvt_gpu_stream_t *s = kvt_gpu_stream_new(gpu, "s");
    static uint8_t in[5 * NL * BB], out[5 * NL * BB];
    for (size_t k = 0; k < sizeof in; k++)
        in[k] = (uint8_t)(k * 13 + 7);
    const uint32_t run[] = {4, 5, 6, 11, 0};
    cr_assert_eq(kvt_gpu_scatter(s, run, 5, in, sizeof in), 0);
    //  Per layer: {4, 5, 6} is one segment, 11 and 0 one each.
    cr_assert_eq(F.copies, NL * 3, "consecutive blocks merged into one copy");
    kvt_gpu_event_t *ev = kvt_gpu_event_new(gpu);
    cr_assert_eq(kvt_gpu_event_record(ev, s), 0);
    cr_assert_eq(kvt_gpu_event_query(ev), KVT_GPU_NOT_READY);
    cr_assert_eq(kvt_gpu_stream_query(s), KVT_GPU_NOT_READY);
    cr_assert_eq(kvt_gpu_gather(s, run, 5, out, sizeof out), 0);
    cr_assert_eq(kvt_gpu_event_synchronize(ev), 0);
    cr_assert_eq(kvt_gpu_stream_query(s), KVT_GPU_NOT_READY, "the gather is behind the mark");
    cr_assert_eq(kvt_gpu_stream_synchronize(s), 0);
    cr_assert_eq(memcmp(in, out, sizeof in), 0);
    //  A state unit and a host function in stream order.
    uint8_t img[64], back[64];
    memset(img, 0x5A, sizeof img);
    cr_assert_eq(kvt_gpu_state_from_host(s, KVT_GPU_STATE_SLOTS, 1, img, sizeof img), 0);
    cr_assert_eq(kvt_gpu_state_copy(s, KVT_GPU_STATE_SLOTS, 0, KVT_GPU_STATE_SLOTS, 1), 0);
    cr_assert_eq(kvt_gpu_state_to_host(s, KVT_GPU_STATE_SLOTS, 0, back, sizeof back), 0);
    cr_assert_eq(kvt_gpu_stream_synchronize(s), 0);
    cr_assert_eq(memcmp(img, back, sizeof img), 0);
    //  A runtime error on query is EFAULT naming it.
    F.query_rc = F_ELAUNCH;
    cr_assert_eq(kvt_gpu_stream_query(s), KVT_GPU_EFAULT);
    cr_assert(strstr(kvt_gpu_last_error(), "fake: stream 's': fakeErrorLaunchFailure"), "%s",
              kvt_gpu_last_error());
    F.query_rc = F_OK;
    kvt_gpu_event_destroy(&ev);
    kvt_gpu_stream_destroy(&s);
    kvt_gpu_destroy(&gpu);
}

static void s_set_flag(void *arg)
{
    atomic_store((atomic_int *)arg, 1);
}

Test(devrt, host_functions_run_in_stream_order_and_a_refusal_names_the_call)
{
    s_fake_reset();
    kvt_devrt_t rt = s_fake_rt(false);
    kvt_gpu_t *gpu = s_open(&rt, 0);
    kvt_gpu_stream_t *s = kvt_gpu_stream_new(gpu, "s");
    atomic_int ran = 0;
    cr_assert_eq(kvt_gpu_launch_host_fn(s, s_set_flag, &ran, 0), 0);
    cr_assert_eq(atomic_load(&ran), 0, "not before the stream runs it");
    cr_assert_eq(kvt_gpu_stream_synchronize(s), 0);
    cr_assert_eq(atomic_load(&ran), 1);
    F.host_fn_rc = F_EINVAL;
    cr_assert_eq(kvt_gpu_launch_host_fn(s, s_set_flag, &ran, 0), KVT_GPU_EDEVICE);
    cr_assert(strstr(kvt_gpu_last_error(), "fake: fakeLaunchHostFunc: fakeErrorInvalidValue"), "%s",
              kvt_gpu_last_error());
    kvt_gpu_stats_t st;
    kvt_gpu_stats(gpu, &st);
    cr_assert_eq(st.ops_queued, 1, "the refused call is not counted");
    kvt_gpu_stream_destroy(&s);
    kvt_gpu_destroy(&gpu);
}

Test(devrt, a_copy_refused_at_its_first_segment_queued_nothing_and_the_stream_stays_usable)
{
    s_fake_reset();
    kvt_devrt_t rt = s_fake_rt(false);
    kvt_gpu_t *gpu = s_open(&rt, 0);
    kvt_gpu_stream_t *s = kvt_gpu_stream_new(gpu, "load");
    uint8_t buf[5 * NL * BB];
    F.fail_copy_at = 0;
    cr_assert_eq(kvt_gpu_gather(s, s_sparse, 5, buf, sizeof buf), KVT_GPU_EDEVICE);
    cr_assert(strstr(kvt_gpu_last_error(), "fake: fakeMemcpyAsync: fakeErrorInvalidValue"), "%s",
              kvt_gpu_last_error());
    cr_assert_eq(s_pending(s), 0);
    cr_assert_eq(F.sync_calls, 0, "nothing to wait for");
    kvt_gpu_stats_t st;
    kvt_gpu_stats(gpu, &st);
    cr_assert_eq(st.ops_queued, 0);
    cr_assert_eq(st.gathers, 0);
    //  The stream stays usable.
    F.fail_copy_at = -1;
    cr_assert_eq(kvt_gpu_gather(s, s_sparse, 5, buf, sizeof buf), 0);
    cr_assert_eq(F.copies, NL * 5);
    cr_assert_eq(kvt_gpu_stream_synchronize(s), 0);
    kvt_gpu_stream_destroy(&s);
    kvt_gpu_destroy(&gpu);
}

Test(devrt, a_copy_refused_part_way_settles_before_returning_then_fails_the_stream)
{
    s_fake_reset();
    kvt_devrt_t rt = s_fake_rt(false);
    kvt_gpu_t *gpu = s_open(&rt, 0);
    kvt_gpu_stream_t *s = kvt_gpu_stream_new(gpu, "load");
    kvt_gpu_event_t *before = kvt_gpu_event_new(gpu);
    kvt_gpu_event_t *ev = kvt_gpu_event_new(gpu);
    cr_assert_eq(kvt_gpu_event_record(before, s), 0);
    uint8_t *buf = malloc(5 * NL * BB);
    cr_assert_not_null(buf);

    F.fail_copy_at = 3;
    cr_assert_eq(kvt_gpu_gather(s, s_sparse, 5, buf, 5 * NL * BB), KVT_GPU_EDEVICE);
    cr_assert_eq(F.sync_calls, 1, "settled before returning");
    cr_assert_eq(F.pending_at_sync, 3, "after the 3 queued segments");
    cr_assert_eq(s_pending(s), 0, "nothing queued is left to touch the buffer");
    //  The caller frees at once (ASan would catch a copy still to run).
    free(buf);
    const char *err = kvt_gpu_last_error();
    cr_assert(strstr(err, "segment 4 of 10 refused with 3 queued") &&
                  strstr(err, "fakeErrorInvalidValue") && strstr(err, "waited for the stream"),
              "%s", err);

    //  Every later call that queues on it, and query / synchronize, fail.
    F.fail_copy_at = -1;
    uint8_t small[NL * BB];
    const uint32_t blk[] = {1};
    cr_assert_eq(kvt_gpu_gather(s, blk, 1, small, sizeof small), KVT_GPU_EFAULT);
    cr_assert(strstr(kvt_gpu_last_error(), "stream 'load' failed earlier (copy segment 4 of 10"),
              "%s", kvt_gpu_last_error());
    cr_assert_eq(kvt_gpu_scatter(s, blk, 1, small, sizeof small), KVT_GPU_EFAULT);
    atomic_int ran = 0;
    cr_assert_eq(kvt_gpu_launch_host_fn(s, s_set_flag, &ran, 0), KVT_GPU_EFAULT);
    cr_assert_eq(kvt_gpu_event_record(ev, s), KVT_GPU_EFAULT);
    cr_assert_eq(kvt_gpu_event_records(ev), 0);
    cr_assert_eq(kvt_gpu_stream_wait_event(s, before), KVT_GPU_EFAULT);
    cr_assert_eq(kvt_gpu_stream_query(s), KVT_GPU_EFAULT);
    cr_assert_eq(kvt_gpu_stream_synchronize(s), KVT_GPU_EFAULT);
    cr_assert_eq(F.copies, 3, "nothing more reached the runtime");
    //  Work recorded before the failure is unaffected.
    cr_assert_eq(kvt_gpu_event_synchronize(before), 0);
    kvt_gpu_stats_t st;
    kvt_gpu_stats(gpu, &st);
    cr_assert_eq(st.ops_queued, 0, "the failed calls are not counted");
    //  Recovery is a new stream.
    kvt_gpu_stream_t *fresh = kvt_gpu_stream_new(gpu, "load2");
    cr_assert_eq(kvt_gpu_gather(fresh, blk, 1, small, sizeof small), 0);
    cr_assert_eq(kvt_gpu_stream_synchronize(fresh), 0);
    kvt_gpu_event_destroy(&before);
    kvt_gpu_event_destroy(&ev);
    kvt_gpu_stream_destroy(&s);
    kvt_gpu_stream_destroy(&fresh);
    kvt_gpu_destroy(&gpu);
}

Test(devrt, a_settle_that_fails_is_logged_and_still_fails_the_stream)
{
    s_fake_reset();
    atomic_store(&s_errors_logged, 0);
    kvt_devrt_t rt = s_fake_rt(false);
    kvt_gpu_t *gpu = s_open(&rt, 0);
    kvt_gpu_stream_t *s = kvt_gpu_stream_new(gpu, "save");
    uint8_t buf[5 * NL * BB];
    F.fail_copy_at = 2;
    F.sync_rc = F_ELAUNCH;
    cr_assert_eq(kvt_gpu_gather(s, s_sparse, 5, buf, sizeof buf), KVT_GPU_EDEVICE);
    cr_assert_eq(F.sync_calls, 1);
    const char *err = kvt_gpu_last_error();
    cr_assert(strstr(err, "segment 3 of 10") && strstr(err, "waiting for the stream failed") &&
                  strstr(err, "fakeErrorLaunchFailure"),
              "%s", err);
    cr_assert_eq(atomic_load(&s_errors_logged), 1, "logged at level 0");
    cr_assert_eq(kvt_gpu_stream_query(s), KVT_GPU_EFAULT);
    //  The context is gone in this story; let the fake drain for teardown.
    F.sync_rc = F_OK;
    kvt_gpu_stream_destroy(&s);
    kvt_gpu_destroy(&gpu);
}

Test(devrt, a_pinned_batch_goes_out_in_one_call)
{
    s_fake_reset();
    kvt_devrt_t rt = s_fake_rt(true);
    kvt_gpu_t *gpu = s_open(&rt, 0);
    kvt_gpu_stream_t *s = kvt_gpu_stream_new(gpu, "s");
    size_t len = 5 * NL * BB;
    uint8_t *pinned = kvt_gpu_host_alloc(gpu, len);
    cr_assert_not_null(pinned);
    cr_assert_eq(kvt_gpu_gather(s, s_sparse, 5, pinned, len), 0);
    cr_assert_eq(F.batches, 1);
    cr_assert_eq(F.copies, 0);
    //  Host memory that is not pinned goes per segment, and so does a
    //  batch of one segment.
    static uint8_t plain[5 * NL * BB];
    cr_assert_eq(kvt_gpu_gather(s, s_sparse, 5, plain, len), 0);
    cr_assert_eq(F.batches, 1);
    cr_assert_eq(F.copies, NL * 5);
    cr_assert_eq(kvt_gpu_state_to_host(s, KVT_GPU_STATE_SLOTS, 0, pinned, 64), 0);
    cr_assert_eq(F.batches, 1);
    cr_assert_eq(kvt_gpu_stream_synchronize(s), 0);
    kvt_gpu_host_free(gpu, pinned);
    kvt_gpu_stream_destroy(&s);
    kvt_gpu_destroy(&gpu);
}

Test(devrt, a_refused_batch_settles_before_the_per_segment_fallback_and_turns_batching_off)
{
    s_fake_reset();
    atomic_store(&s_warnings_logged, 0);
    kvt_devrt_t rt = s_fake_rt(true);
    kvt_gpu_t *gpu = s_open(&rt, 0);
    kvt_gpu_stream_t *s = kvt_gpu_stream_new(gpu, "s");
    size_t len = 5 * NL * BB;
    uint8_t *in = kvt_gpu_host_alloc(gpu, len);
    uint8_t *out = kvt_gpu_host_alloc(gpu, len);
    cr_assert(in && out);
    for (size_t k = 0; k < len; k++)
        in[k] = (uint8_t)(k * 31 + 1);
    F.batch_rc = F_EINVAL;
    F.batch_partial = 4; //  the refused batch still queued 4 of its copies
    cr_assert_eq(kvt_gpu_scatter(s, s_sparse, 5, in, len), 0, "%s", kvt_gpu_last_error());
    cr_assert_eq(F.batches, 1);
    cr_assert_eq(F.sync_calls, 1, "settled after the refusal");
    cr_assert_eq(F.pending_at_sync, 4);
    cr_assert_eq(F.pending_at_copy, 0, "the fallback starts on a settled stream");
    cr_assert_eq(F.copies, NL * 5, "then one copy per segment");
    cr_assert_eq(atomic_load(&s_warnings_logged), 1);
    cr_assert(strstr(s_last_line, "fake: batched copy refused (fakeErrorInvalidValue)"), "%s",
              s_last_line);
    //  Batching stays off for the device.
    cr_assert_eq(kvt_gpu_gather(s, s_sparse, 5, out, len), 0);
    cr_assert_eq(F.batches, 1);
    cr_assert_eq(F.copies, 2 * NL * 5);
    cr_assert_eq(atomic_load(&s_warnings_logged), 1, "logged once");
    cr_assert_eq(kvt_gpu_stream_synchronize(s), 0);
    cr_assert_eq(memcmp(in, out, len), 0);
    kvt_gpu_host_free(gpu, in);
    kvt_gpu_host_free(gpu, out);
    kvt_gpu_stream_destroy(&s);
    kvt_gpu_destroy(&gpu);
}

Test(devrt, a_device_allocation_whose_clearing_fails_is_freed)
{
    s_fake_reset();
    kvt_devrt_t rt = s_fake_rt(false);
    kvt_gpu_opts_t o = {.backend = KVT_GPU_BACKEND_CUDA, .log = s_log};
    kvt_gpu_t *gpu = kvt_gpu_open(&o, &rt);
    cr_assert_not_null(gpu);
    F.memset_rc = F_EINVAL;
    kvt_gpu_plane_desc_t p = {"K", NL, NB, BB, NULL};
    cr_assert_eq(kvt_gpu_plane_add(gpu, &p), KVT_GPU_EDEVICE);
    cr_assert(strstr(kvt_gpu_last_error(), "fake: fakeMemset: fakeErrorInvalidValue"), "%s",
              kvt_gpu_last_error());
    cr_assert_eq(F.live_allocs, 0, "the allocation was given back");
    cr_assert_eq(kvt_gpu_plane_count(gpu), 0);
    kvt_gpu_destroy(&gpu);
}

// --------------------------------------------------------- kernel path ----

//  A device on the fake with the kernel: one plane of NL layers x NB blocks
//  x `bb` bytes; `o` gives the copy options (path, crossover).
static kvt_gpu_t *s_open_k(const kvt_devrt_t *rt, size_t bb, kvt_gpu_copy_path_t path,
                           size_t crossover)
{
    kvt_gpu_opts_t o = {0};
    o.backend = KVT_GPU_BACKEND_CUDA;
    o.log = s_log;
    o.copy_path = path;
    o.kernel_crossover_bytes = crossover;
    kvt_gpu_t *gpu = kvt_gpu_open(&o, rt);
    cr_assert_not_null(gpu, "%s", kvt_gpu_last_error());
    kvt_gpu_plane_desc_t p = {"K", NL, NB, bb, NULL};
    cr_assert_eq(kvt_gpu_plane_add(gpu, &p), 0, "%s", kvt_gpu_last_error());
    return gpu;
}

//  Scatters a pattern into s_sparse's blocks one copy per segment (through
//  a buffer that is not pinned), gathers them back through `pinned` and
//  checks every byte; returns how the gather went out through F.
static void s_round_trip(kvt_gpu_t *gpu, kvt_gpu_stream_t *s, uint8_t *pinned, size_t bb,
                         uint32_t salt)
{
    size_t len = 5 * NL * bb;
    uint8_t *in = malloc(len);
    cr_assert_not_null(in);
    for (size_t k = 0; k < len; k++)
        in[k] = (uint8_t)(k * 29 + salt);
    cr_assert_eq(kvt_gpu_scatter(s, s_sparse, 5, in, len), 0, "%s", kvt_gpu_last_error());
    memset(pinned, 0, len);
    cr_assert_eq(kvt_gpu_gather(s, s_sparse, 5, pinned, len), 0, "%s", kvt_gpu_last_error());
    cr_assert_eq(kvt_gpu_stream_synchronize(s), 0, "%s", kvt_gpu_last_error());
    cr_assert_eq(memcmp(in, pinned, len), 0, "the gather brought back what was scattered");
    free(in);
}

Test(devrt, the_start_up_benchmark_picks_the_kernel_up_to_the_crossover)
{
    s_fake_reset();
    F.kernel = true;
    kvt_devrt_t rt = s_fake_rt(true);
    kvt_gpu_t *gpu = s_open_k(&rt, BB, KVT_GPU_PATH_AUTO, 0);
    const char *d = kvt_gpu_describe(gpu);
    cr_assert(strstr(d, "copy paths: kernel (fakertc 1.0, fake_arch; 16 thread blocks; up to "
                        "16384-byte segments, measured"),
              "%s", d);
    cr_assert(strstr(d, "batch (fakeMemcpyBatch), per-segment"), "%s", d);
    cr_assert_gt(F.launches, 0, "the benchmark ran the kernel");
    cr_assert_eq(F.modules, 1);
    kvt_gpu_stream_t *s = kvt_gpu_stream_new(gpu, "s");
    uint8_t *pinned = kvt_gpu_host_alloc(gpu, 5 * NL * BB);
    int launches = F.launches, batches = F.batches, copies = F.copies;
    s_round_trip(gpu, s, pinned, BB, 3);
    cr_assert_eq(F.launches, launches + 1,
                 "100-byte segments: one launch for the gather (%d %d %d)", F.launches - launches,
                 F.batches - batches, F.copies - copies);
    cr_assert_eq(F.last_grid, 10, "one thread block per segment when under the cap");
    cr_assert_eq(F.batches, batches, "no batch");
    cr_assert_eq(F.copies, copies + NL * 5, "the scatter from plain memory: per segment");
    //  One block is still NL segments: one launch.
    cr_assert_eq(kvt_gpu_gather(s, s_sparse, 1, pinned, NL * BB), 0);
    cr_assert_eq(kvt_gpu_stream_synchronize(s), 0);
    cr_assert_eq(F.launches, launches + 2);
    cr_assert_eq(F.last_grid, NL);
    kvt_gpu_host_free(gpu, pinned);
    kvt_gpu_stream_destroy(&s);
    kvt_gpu_destroy(&gpu);
    cr_assert_eq(F.modules, 0, "the module is unloaded");
    cr_assert_eq(F.live_allocs, 0, "rings, scratch and buffers freed");

    //  Segments above the crossover go out as one batch.
    gpu = s_open_k(&rt, 2 * F_CROSSOVER, KVT_GPU_PATH_AUTO, 0);
    s = kvt_gpu_stream_new(gpu, "s");
    pinned = kvt_gpu_host_alloc(gpu, 5 * NL * 2 * F_CROSSOVER);
    launches = F.launches;
    batches = F.batches;
    s_round_trip(gpu, s, pinned, 2 * F_CROSSOVER, 5);
    cr_assert_eq(F.launches, launches, "32 KiB segments: no launch");
    cr_assert_eq(F.batches, batches + 1);
    kvt_gpu_host_free(gpu, pinned);
    kvt_gpu_stream_destroy(&s);
    kvt_gpu_destroy(&gpu);
}

Test(devrt, the_configured_crossover_and_copy_path_override_the_benchmark)
{
    s_fake_reset();
    F.kernel = true;
    kvt_devrt_t rt = s_fake_rt(true);
    //  A crossover below the segment size: the batch; no benchmark ran.
    kvt_gpu_t *gpu = s_open_k(&rt, BB, KVT_GPU_PATH_AUTO, BB - 1);
    cr_assert_eq(F.launches, 0, "no benchmark with a configured crossover");
    cr_assert(strstr(kvt_gpu_describe(gpu), "up to 99-byte segments, configured"), "%s",
              kvt_gpu_describe(gpu));
    kvt_gpu_stream_t *s = kvt_gpu_stream_new(gpu, "s");
    uint8_t *pinned = kvt_gpu_host_alloc(gpu, 5 * NL * BB);
    s_round_trip(gpu, s, pinned, BB, 7);
    cr_assert_eq(F.launches, 0);
    cr_assert_eq(F.batches, 1);
    kvt_gpu_host_free(gpu, pinned);
    kvt_gpu_stream_destroy(&s);
    kvt_gpu_destroy(&gpu);

    //  KERNEL: the kernel even for segments above the measured crossover.
    s_fake_reset();
    F.kernel = true;
    gpu = s_open_k(&rt, 2 * F_CROSSOVER, KVT_GPU_PATH_KERNEL, 0);
    cr_assert_eq(F.launches, 0, "no benchmark when the path is forced");
    s = kvt_gpu_stream_new(gpu, "s");
    pinned = kvt_gpu_host_alloc(gpu, 5 * NL * 2 * F_CROSSOVER);
    s_round_trip(gpu, s, pinned, 2 * F_CROSSOVER, 9);
    cr_assert_eq(F.launches, 1, "the gather (the scatter from plain memory: per segment)");
    kvt_gpu_host_free(gpu, pinned);
    kvt_gpu_stream_destroy(&s);
    kvt_gpu_destroy(&gpu);

    //  BATCH: the kernel is not even loaded; SEGMENT: neither kernel nor batch.
    const kvt_gpu_copy_path_t paths[2] = {KVT_GPU_PATH_BATCH, KVT_GPU_PATH_SEGMENT};
    for (int i = 0; i < 2; i++) {
        s_fake_reset();
        F.kernel = true;
        gpu = s_open_k(&rt, BB, paths[i], 0);
        cr_assert_eq(F.modules, 0, "not loaded");
        cr_assert(strstr(kvt_gpu_describe(gpu), "no kernel (kernel not loaded (copy_path"), "%s",
                  kvt_gpu_describe(gpu));
        s = kvt_gpu_stream_new(gpu, "s");
        pinned = kvt_gpu_host_alloc(gpu, 5 * NL * BB);
        s_round_trip(gpu, s, pinned, BB, 11);
        cr_assert_eq(F.launches, 0);
        cr_assert_eq(F.batches, i == 0 ? 1 : 0, "path %d", i);
        cr_assert_eq(F.copies, i == 0 ? NL * 5 : 2 * NL * 5, "path %d", i);
        kvt_gpu_host_free(gpu, pinned);
        kvt_gpu_stream_destroy(&s);
        kvt_gpu_destroy(&gpu);
    }
}

//  Registered caller memory is pinned (the batch copy takes it) but the
//  kernel never reads it: a registration does not promise the device can
//  use its host address. Memory from kvt_gpu_host_alloc takes the kernel.
Test(devrt, registered_memory_is_batched_never_read_by_the_kernel)
{
    s_fake_reset();
    F.kernel = true;
    kvt_devrt_t rt = s_fake_rt(true);
    kvt_gpu_t *gpu = s_open_k(&rt, BB, KVT_GPU_PATH_KERNEL, 0);
    kvt_gpu_stream_t *s = kvt_gpu_stream_new(gpu, "s");
    size_t len = 5 * NL * BB;
    static uint8_t caller[5 * NL * BB];
    cr_assert_eq(kvt_gpu_host_register(gpu, caller, len), 0, "%s", kvt_gpu_last_error());
    cr_assert(kvt_gpu_host_pinned(gpu, caller, len));
    cr_assert_not(kvt_gpu_host_mapped(gpu, caller, len));
    s_round_trip(gpu, s, caller, BB, 3);
    cr_assert_eq(F.launches, 0, "the kernel read registered memory");
    cr_assert_eq(F.batches, 1, "registered memory is pinned: one batched copy");
    uint8_t *alloc = kvt_gpu_host_alloc(gpu, len);
    cr_assert(kvt_gpu_host_mapped(gpu, alloc, len));
    s_round_trip(gpu, s, alloc, BB, 4);
    cr_assert_eq(F.launches, 1, "device-mapped memory takes the kernel");
    kvt_gpu_host_free(gpu, alloc);
    kvt_gpu_host_unregister(gpu, caller);
    kvt_gpu_stream_destroy(&s);
    kvt_gpu_destroy(&gpu);
}

Test(devrt, without_a_kernel_the_device_copies_as_before_and_says_why)
{
    //  No compiler library, a compile failure, a module that does not load.
    const int image_rc[3] = {KVT_GPU_EUNSUPPORTED, KVT_GPU_EDEVICE, 0};
    const char *why[3] = {"no kernel (fakertc: no library)",
                          "no kernel (fakertc: compiling failed: syntax)",
                          "no kernel (kernel image of"};
    for (int i = 0; i < 3; i++) {
        s_fake_reset();
        F.kernel = true;
        F.image_rc = image_rc[i];
        F.module_rc = i == 2 ? F_EINVAL : F_OK;
        atomic_store(&s_warnings_logged, 0);
        kvt_devrt_t rt = s_fake_rt(true);
        kvt_gpu_t *gpu = s_open_k(&rt, BB, KVT_GPU_PATH_AUTO, 0);
        cr_assert(strstr(kvt_gpu_describe(gpu), why[i]), "%d: %s", i, kvt_gpu_describe(gpu));
        cr_assert_eq(atomic_load(&s_warnings_logged), 1, "said once at open");
        cr_assert(strstr(s_last_warning, "no gather kernel (") &&
                      strstr(s_last_warning, "batched copies as before"),
                  "%s", s_last_warning);
        kvt_gpu_stream_t *s = kvt_gpu_stream_new(gpu, "s");
        uint8_t *pinned = kvt_gpu_host_alloc(gpu, 5 * NL * BB);
        s_round_trip(gpu, s, pinned, BB, 13);
        cr_assert_eq(F.launch_tries, 0);
        cr_assert_eq(F.batches, 1, "the batch, as before");
        kvt_gpu_host_free(gpu, pinned);
        kvt_gpu_stream_destroy(&s);
        kvt_gpu_destroy(&gpu);
        cr_assert_eq(F.modules, 0);
    }
}

Test(devrt, a_refused_launch_falls_back_to_the_batch_then_per_segment_and_turns_the_kernel_off)
{
    s_fake_reset();
    F.kernel = true;
    kvt_devrt_t rt = s_fake_rt(true);
    kvt_gpu_t *gpu = s_open_k(&rt, BB, KVT_GPU_PATH_KERNEL, 0);
    kvt_gpu_stream_t *s = kvt_gpu_stream_new(gpu, "s");
    uint8_t *pinned = kvt_gpu_host_alloc(gpu, 5 * NL * BB);
    atomic_store(&s_warnings_logged, 0);
    F.launch_rc = F_ELAUNCH;
    s_round_trip(gpu, s, pinned, BB, 17);
    cr_assert_eq(F.launch_tries, 1);
    cr_assert_eq(F.batches, 1, "the gather went out as a batch");
    cr_assert_eq(atomic_load(&s_warnings_logged), 1);
    cr_assert(
        strstr(s_last_warning, "fakeLaunchKernel refused (fakeErrorLaunchFailure); kernel off"),
        "%s", s_last_warning);
    //  The kernel stays off; with the batch refused too, per segment.
    F.launch_rc = F_OK;
    F.batch_rc = F_EINVAL;
    int copies = F.copies;
    s_round_trip(gpu, s, pinned, BB, 19);
    cr_assert_eq(F.launch_tries, 1, "no launch once refused");
    cr_assert_eq(F.batches, 2);
    cr_assert_eq(F.copies, copies + 2 * NL * 5, "scatter and gather per segment");
    cr_assert_eq(atomic_load(&s_warnings_logged), 2, "the batch refusal said once");
    kvt_gpu_host_free(gpu, pinned);
    kvt_gpu_stream_destroy(&s);
    kvt_gpu_destroy(&gpu);

    //  Without a batched call a refused launch goes per segment at once.
    s_fake_reset();
    F.kernel = true;
    rt = s_fake_rt(false);
    gpu = s_open_k(&rt, BB, KVT_GPU_PATH_KERNEL, 0);
    s = kvt_gpu_stream_new(gpu, "s");
    pinned = kvt_gpu_host_alloc(gpu, 5 * NL * BB);
    F.launch_rc = F_ELAUNCH;
    s_round_trip(gpu, s, pinned, BB, 23);
    cr_assert_eq(F.launch_tries, 1);
    cr_assert_eq(F.copies, 2 * NL * 5);
    kvt_gpu_host_free(gpu, pinned);
    kvt_gpu_stream_destroy(&s);
    kvt_gpu_destroy(&gpu);
}

Test(devrt, kernel_tables_are_reclaimed_by_their_events_and_a_full_ring_falls_back)
{
    s_fake_reset();
    F.kernel = true;
    kvt_devrt_t rt = s_fake_rt(true);
    kvt_gpu_t *gpu = s_open_k(&rt, BB, KVT_GPU_PATH_KERNEL, 0);
    kvt_gpu_stream_t *s = kvt_gpu_stream_new(gpu, "s");
    size_t len = 5 * NL * BB;
    uint8_t *pinned = kvt_gpu_host_alloc(gpu, 40 * len);
    //  The fake runs nothing until synchronized: 32 tables are in flight,
    //  then the ring is full and gathers go out as batches, never waiting.
    for (int i = 0; i < 40; i++)
        cr_assert_eq(kvt_gpu_gather(s, s_sparse, 5, pinned + (size_t)i * len, len), 0);
    cr_assert_eq(F.launches, 32);
    cr_assert_eq(F.batches, 8);
    cr_assert_eq(F.sync_calls, 0, "nothing waited");
    cr_assert_eq(kvt_gpu_stream_synchronize(s), 0);
    //  Every table was still intact when its launch ran: all 40 agree.
    for (int i = 1; i < 40; i++)
        cr_assert_eq(memcmp(pinned, pinned + (size_t)i * len, len), 0, "gather %d", i);
    //  Completed tables are reclaimed: the kernel serves again.
    for (int i = 0; i < 40; i++)
        cr_assert_eq(kvt_gpu_gather(s, s_sparse, 5, pinned + (size_t)i * len, len), 0);
    cr_assert_eq(F.launches, 64);
    cr_assert_eq(kvt_gpu_stream_synchronize(s), 0);
    kvt_gpu_host_free(gpu, pinned);
    kvt_gpu_stream_destroy(&s);
    kvt_gpu_destroy(&gpu);
    cr_assert_eq(F.live_allocs, 0);
}

Test(devrt, a_batch_of_chunks_is_one_launch_or_one_batched_copy)
{
    s_fake_reset();
    F.kernel = true;
    kvt_devrt_t rt = s_fake_rt(true);
    kvt_gpu_t *gpu = s_open_k(&rt, BB, KVT_GPU_PATH_KERNEL, 0);
    kvt_gpu_stream_t *s = kvt_gpu_stream_new(gpu, "s");
    size_t len = 5 * NL * BB;
    uint8_t *pinned = kvt_gpu_host_alloc(gpu, 4 * len);
    //  Scatter a pattern per segment (plain memory), then gather it back
    //  as three chunks in one call.
    static uint8_t in[5 * NL * BB];
    for (size_t k = 0; k < sizeof in; k++)
        in[k] = (uint8_t)(k * 7 + 1);
    cr_assert_eq(kvt_gpu_scatter(s, s_sparse, 5, in, sizeof in), 0);
    const uint32_t rev[] = {9, 7, 5, 3, 1};
    kvt_gpu_chunk_t ch[3] = {{s_sparse, 5, pinned, len},
                             {s_sparse + 2, 2, pinned + len, 2 * NL * BB},
                             {rev, 5, pinned + 2 * len, len}};
    int launches = F.launches;
    cr_assert_eq(kvt_gpu_gather_chunks(s, ch, 3), 0, "%s", kvt_gpu_last_error());
    cr_assert_eq(F.launches, launches + 1, "one launch for three chunks");
    cr_assert_eq(F.last_grid, 16, "24 segments, capped at 16 thread blocks");
    cr_assert_eq(kvt_gpu_stream_synchronize(s), 0);
    cr_assert_eq(memcmp(pinned, in, len), 0);
    for (uint32_t l = 0; l < NL; l++)
        for (uint32_t i = 0; i < 2; i++)
            cr_assert_eq(memcmp(pinned + len + (l * 2 + i) * BB, in + (l * 5 + 2 + i) * BB, BB), 0,
                         "chunk 1 layer %u block %u", l, i);
    for (uint32_t l = 0; l < NL; l++)
        for (uint32_t i = 0; i < 5; i++)
            cr_assert_eq(memcmp(pinned + 2 * len + (l * 5 + i) * BB, in + (l * 5 + 4 - i) * BB, BB),
                         0, "chunk 2 layer %u block %u", l, i);
    kvt_gpu_host_free(gpu, pinned);
    kvt_gpu_stream_destroy(&s);
    kvt_gpu_destroy(&gpu);

    //  Without the kernel: every chunk's segments in one batched call.
    s_fake_reset();
    rt = s_fake_rt(true);
    gpu = s_open_k(&rt, BB, KVT_GPU_PATH_AUTO, 0);
    s = kvt_gpu_stream_new(gpu, "s");
    pinned = kvt_gpu_host_alloc(gpu, 4 * len);
    ch[0].buf = pinned;
    ch[1].buf = pinned + len;
    ch[2].buf = pinned + 2 * len;
    cr_assert_eq(kvt_gpu_gather_chunks(s, ch, 3), 0, "%s", kvt_gpu_last_error());
    cr_assert_eq(F.batches, 1);
    cr_assert_eq(F.copies, 0);
    cr_assert_eq(kvt_gpu_stream_synchronize(s), 0);
    kvt_gpu_host_free(gpu, pinned);
    kvt_gpu_stream_destroy(&s);
    kvt_gpu_destroy(&gpu);
}
