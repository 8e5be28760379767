/*  kvt_gpu.c — the device: errors and logging, destroy, geometry (KV page
    planes, state pools), pinned host memory, counters. Opening a device
    (options, backend selection, probes) is in kvt_gpu_select.c; streams,
    events and ops in kvt_gpu_stream.c, copy batches in kvt_gpu_copy.c, the
    event pool in kvt_gpu_event_pool.c.
*/
#include <assert.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvt_gpu_int.h"

static _Thread_local char s_last_error[320];   //  this thread's last error
static _Thread_local uint64_t s_token;         //  this thread's token, 0 until asked
static atomic_uint_least64_t s_next_token = 1; //  the next token handed out

uint64_t kvt_gpu_thread_token(void)
{
    if (s_token == 0)
        s_token = atomic_fetch_add(&s_next_token, 1);
    return s_token;
}

int kvt_gpu_fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s_last_error, sizeof s_last_error, fmt, ap);
    va_end(ap);
    return code;
}

void kvt_gpu_fmt(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

const char *kvt_gpu_last_error(void)
{
    return s_last_error;
}

const char *kvt_gpu_strerror(int code)
{
    switch (code) {
    case KVT_GPU_OK:
        return "ok";
    case KVT_GPU_NOT_READY:
        return "not ready";
    case KVT_GPU_FORCED:
        return "landed ahead of the clock";
    case KVT_GPU_EINVAL:
        return "bad argument";
    case KVT_GPU_ENOMEM:
        return "out of memory";
    case KVT_GPU_EDEVICE:
        return "device runtime error";
    case KVT_GPU_EFAULT:
        return "an op on the stream failed";
    case KVT_GPU_ELIMIT:
        return "event record bound reached";
    case KVT_GPU_ESTATE:
        return "not allowed in this state";
    case KVT_GPU_EUNSUPPORTED:
        return "not supported by this backend";
    case KVT_GPU_ENODEV:
        return "no usable device";
    default:
        return "failure";
    }
}

// ------------------------------------------------------------- destroy ----

//  Frees what a plane or pool registration allocated.
static void s_free_geometry(kvt_gpu_t *self)
{
    for (uint32_t p = 0; p < self->nplanes; p++) {
        if (self->planes[p].owned)
            self->ops->dev_free(self, self->planes[p].owned);
        free(self->planes[p].layer_base);
    }
    self->nplanes = 0;
    for (int i = 0; i < 2; i++)
        if (self->state[i].owned && self->state[i].base)
            self->ops->dev_free(self, self->state[i].base);
}

void kvt_gpu_destroy(kvt_gpu_t **self_p)
{
    assert(self_p);
    kvt_gpu_t *self = *self_p;
    if (!self)
        return;
    //  An event pool's events are destroyed only on its owner thread: a pool
    //  another thread still owns makes the whole destroy a refusal, decided
    //  before anything is touched (the caller can have the owner destroy it
    //  and call again).
    uint64_t me = kvt_gpu_thread_token();
    uint64_t foreign = 0;
    pthread_mutex_lock(&self->mu);
    for (kvt_gpu_event_pool_t *pool = self->pools; pool; pool = pool->next)
        foreign += pool->owner != me;
    if (foreign)
        self->stats.refused++;
    pthread_mutex_unlock(&self->mu);
    if (foreign) {
        kvt_gpu_fail(KVT_GPU_ESTATE,
                     "gpu destroy: refused, %llu event pool(s) owned by another thread are "
                     "still open (a pool's events are destroyed only on the thread that created "
                     "it: destroy them there first)",
                     (unsigned long long)foreign);
        kvt_gpu_log(self, 0, "%s", kvt_gpu_last_error());
        return;
    }
    //  End injected stalls (a drain behind one would never finish), then
    //  streams (each drains), then what may still reference them.
    if (self->ops->inject)
        for (kvt_gpu_stream_t *s = self->streams; s; s = s->next)
            self->ops->inject(s, KVT_GPU_FAULT_NONE, 0);
    while (self->streams) {
        kvt_gpu_stream_t *s = self->streams;
        kvt_gpu_stream_destroy(&s);
    }
    while (self->pools) {
        kvt_gpu_event_pool_t *pool = self->pools;
        kvt_gpu_event_pool_destroy(&pool);
    }
    while (self->events) {
        kvt_gpu_event_t *ev = self->events;
        kvt_gpu_event_destroy(&ev);
    }
    for (size_t i = 0; i < self->nhostbufs; i++) {
        if (!self->hostbufs[i].registered)
            self->ops->host_free(self, self->hostbufs[i].ptr);
        else if (self->ops->host_unregister)
            self->ops->host_unregister(self, self->hostbufs[i].ptr);
    }
    free(self->hostbufs);
    s_free_geometry(self);
    self->ops->fini(self);
    pthread_mutex_destroy(&self->mu);
    free(self);
    *self_p = NULL;
}

// ------------------------------------------------------------ geometry ----

//  Registration is allowed only before the first op. Returns 0 or ESTATE.
static int s_check_unfrozen(kvt_gpu_t *self, const char *what)
{
    pthread_mutex_lock(&self->mu);
    bool frozen = self->frozen;
    pthread_mutex_unlock(&self->mu);
    if (frozen)
        return kvt_gpu_fail(KVT_GPU_ESTATE, "%s: refused, an op was already queued on this device",
                            what);
    return 0;
}

int kvt_gpu_plane_add(kvt_gpu_t *self, const kvt_gpu_plane_desc_t *desc)
{
    assert(self);
    if (!desc)
        return kvt_gpu_fail(KVT_GPU_EINVAL, "plane_add: desc is NULL");
    int rc = s_check_unfrozen(self, "plane_add");
    if (rc != 0)
        return rc;
    if (self->nplanes == KVT_GPU_MAX_PLANES)
        return kvt_gpu_fail(KVT_GPU_EINVAL, "plane_add: already %d planes (the maximum)",
                            KVT_GPU_MAX_PLANES);
    if (desc->layers == 0 || desc->num_blocks == 0 || desc->block_bytes == 0)
        return kvt_gpu_fail(
            KVT_GPU_EINVAL,
            "plane_add: layers %u, num_blocks %u, block_bytes %zu: each must be >= 1", desc->layers,
            desc->num_blocks, desc->block_bytes);
    if (self->nplanes > 0 && desc->num_blocks != self->num_blocks)
        return kvt_gpu_fail(KVT_GPU_EINVAL,
                            "plane_add: num_blocks %u differs from the registered planes' %u",
                            desc->num_blocks, self->num_blocks);
    size_t layer_bytes = desc->block_bytes * desc->num_blocks;
    if (layer_bytes / desc->num_blocks != desc->block_bytes ||
        SIZE_MAX / desc->layers < layer_bytes ||
        SIZE_MAX - self->block_bytes < desc->block_bytes * desc->layers)
        return kvt_gpu_fail(KVT_GPU_EINVAL, "plane_add: plane size overflows");

    kvt_gpu_plane_t *pl = &self->planes[self->nplanes];
    memset(pl, 0, sizeof *pl);
    pl->layer_base = calloc(desc->layers, sizeof(char *));
    if (!pl->layer_base)
        return kvt_gpu_fail(KVT_GPU_ENOMEM, "plane_add: out of memory");
    if (desc->layer_base) {
        for (uint32_t l = 0; l < desc->layers; l++) {
            if (!desc->layer_base[l]) {
                free(pl->layer_base);
                pl->layer_base = NULL;
                return kvt_gpu_fail(KVT_GPU_EINVAL, "plane_add: layer_base[%u] is NULL", l);
            }
            pl->layer_base[l] = desc->layer_base[l];
        }
    } else {
        void *region = NULL;
        rc = self->ops->dev_alloc(self, layer_bytes * desc->layers, &region);
        if (rc != 0) {
            free(pl->layer_base);
            pl->layer_base = NULL;
            return rc;
        }
        pl->owned = region;
        for (uint32_t l = 0; l < desc->layers; l++)
            pl->layer_base[l] = (char *)region + (size_t)l * layer_bytes;
    }
    if (desc->name)
        kvt_gpu_fmt(pl->name, sizeof pl->name, "%s", desc->name);
    else
        kvt_gpu_fmt(pl->name, sizeof pl->name, "plane%u", self->nplanes);
    pl->layers = desc->layers;
    pl->block_bytes = desc->block_bytes;
    pl->chunk_base = self->block_bytes;
    self->block_bytes += desc->block_bytes * desc->layers;
    self->num_blocks = desc->num_blocks;
    return (int)self->nplanes++;
}

uint32_t kvt_gpu_plane_count(const kvt_gpu_t *self)
{
    return self->nplanes;
}

uint32_t kvt_gpu_num_blocks(const kvt_gpu_t *self)
{
    return self->num_blocks;
}

size_t kvt_gpu_block_bytes(const kvt_gpu_t *self)
{
    return self->block_bytes;
}

size_t kvt_gpu_chunk_offset(const kvt_gpu_t *self, uint32_t plane, uint32_t layer, uint32_t n,
                            uint32_t i)
{
    if (plane >= self->nplanes || layer >= self->planes[plane].layers || i >= n)
        return SIZE_MAX;
    const kvt_gpu_plane_t *pl = &self->planes[plane];
    return (size_t)n * pl->chunk_base + ((size_t)layer * n + i) * pl->block_bytes;
}

void *kvt_gpu_plane_ptr(kvt_gpu_t *self, uint32_t plane, uint32_t layer, uint32_t block)
{
    if (self->backend != KVT_GPU_BACKEND_HOST || plane >= self->nplanes ||
        layer >= self->planes[plane].layers || block >= self->num_blocks)
        return NULL;
    const kvt_gpu_plane_t *pl = &self->planes[plane];
    return pl->layer_base[layer] + (size_t)block * pl->block_bytes;
}

static kvt_gpu_spool_t *s_spool(kvt_gpu_t *self, kvt_gpu_state_pool_t pool)
{
    if (pool == KVT_GPU_STATE_SLOTS)
        return &self->state[0];
    if (pool == KVT_GPU_STATE_CKPT)
        return &self->state[1];
    return NULL;
}

int kvt_gpu_state_add(kvt_gpu_t *self, kvt_gpu_state_pool_t pool, const kvt_gpu_state_desc_t *desc)
{
    assert(self);
    kvt_gpu_spool_t *sp = s_spool(self, pool);
    if (!sp)
        return kvt_gpu_fail(KVT_GPU_EINVAL, "state_add: pool %d is not SLOTS or CKPT", (int)pool);
    const char *name = pool == KVT_GPU_STATE_SLOTS ? "slots" : "ckpt";
    if (!desc)
        return kvt_gpu_fail(KVT_GPU_EINVAL, "state_add(%s): desc is NULL", name);
    int rc = s_check_unfrozen(self, "state_add");
    if (rc != 0)
        return rc;
    if (sp->count)
        return kvt_gpu_fail(KVT_GPU_ESTATE, "state_add(%s): already registered", name);
    if (desc->count == 0 || desc->state_bytes == 0 || SIZE_MAX / desc->count < desc->state_bytes)
        return kvt_gpu_fail(KVT_GPU_EINVAL, "state_add(%s): count %u, state_bytes %zu: bad size",
                            name, desc->count, desc->state_bytes);
    if (desc->base) {
        sp->base = desc->base;
        sp->owned = false;
    } else {
        void *region = NULL;
        rc = self->ops->dev_alloc(self, (size_t)desc->count * desc->state_bytes, &region);
        if (rc != 0)
            return rc;
        sp->base = region;
        sp->owned = true;
    }
    sp->count = desc->count;
    sp->bytes = desc->state_bytes;
    return 0;
}

uint32_t kvt_gpu_state_count(const kvt_gpu_t *self, kvt_gpu_state_pool_t pool)
{
    const kvt_gpu_spool_t *sp = s_spool((kvt_gpu_t *)self, pool);
    return sp ? sp->count : 0;
}

size_t kvt_gpu_state_bytes(const kvt_gpu_t *self, kvt_gpu_state_pool_t pool)
{
    const kvt_gpu_spool_t *sp = s_spool((kvt_gpu_t *)self, pool);
    return sp ? sp->bytes : 0;
}

void *kvt_gpu_state_ptr(kvt_gpu_t *self, kvt_gpu_state_pool_t pool, uint32_t index)
{
    kvt_gpu_spool_t *sp = s_spool(self, pool);
    if (self->backend != KVT_GPU_BACKEND_HOST || !sp || index >= sp->count)
        return NULL;
    return sp->base + (size_t)index * sp->bytes;
}

// --------------------------------------------------- pinned host memory ----

//  Index of the first range starting above p (ranges are sorted by start).
static size_t s_hostbuf_above(const kvt_gpu_t *self, const void *p)
{
    size_t lo = 0, hi = self->nhostbufs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if ((uintptr_t)self->hostbufs[mid].ptr <= (uintptr_t)p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

//  Adds a range in address order (under mu). KVT_GPU_EINVAL when it
//  overlaps one, KVT_GPU_ENOMEM when the table cannot grow.
static int s_hostbuf_insert(kvt_gpu_t *self, void *ptr, size_t bytes, bool registered)
{
    size_t at = s_hostbuf_above(self, ptr);
    uintptr_t a = (uintptr_t)ptr;
    if ((at > 0 && (uintptr_t)self->hostbufs[at - 1].ptr + self->hostbufs[at - 1].bytes > a) ||
        (at < self->nhostbufs && a + bytes > (uintptr_t)self->hostbufs[at].ptr))
        return KVT_GPU_EINVAL;
    if (self->nhostbufs == self->hostbufs_cap) {
        size_t cap = self->hostbufs_cap ? self->hostbufs_cap * 2 : 16;
        kvt_gpu_hostbuf_t *grown = realloc(self->hostbufs, cap * sizeof *grown);
        if (!grown)
            return KVT_GPU_ENOMEM;
        self->hostbufs = grown;
        self->hostbufs_cap = cap;
    }
    memmove(self->hostbufs + at + 1, self->hostbufs + at,
            (self->nhostbufs - at) * sizeof *self->hostbufs);
    self->hostbufs[at] = (kvt_gpu_hostbuf_t){ptr, bytes, registered};
    self->nhostbufs++;
    return 0;
}

//  Removes the range starting at ptr of the given kind (under mu); false
//  when there is none.
static bool s_hostbuf_remove(kvt_gpu_t *self, void *ptr, bool registered)
{
    size_t at = s_hostbuf_above(self, ptr);
    if (at == 0 || self->hostbufs[at - 1].ptr != ptr ||
        self->hostbufs[at - 1].registered != registered)
        return false;
    memmove(self->hostbufs + at - 1, self->hostbufs + at,
            (self->nhostbufs - at) * sizeof *self->hostbufs);
    self->nhostbufs--;
    return true;
}

void *kvt_gpu_host_alloc(kvt_gpu_t *self, size_t bytes)
{
    assert(self);
    if (bytes == 0) {
        kvt_gpu_fail(KVT_GPU_EINVAL, "host_alloc: 0 bytes");
        return NULL;
    }
    void *ptr = NULL;
    if (self->ops->host_alloc(self, bytes, &ptr) != 0)
        return NULL;
    pthread_mutex_lock(&self->mu);
    int rc = s_hostbuf_insert(self, ptr, bytes, false);
    pthread_mutex_unlock(&self->mu);
    if (rc != 0) {
        self->ops->host_free(self, ptr);
        kvt_gpu_fail(KVT_GPU_ENOMEM, "host_alloc: out of memory");
        return NULL;
    }
    return ptr;
}

void kvt_gpu_host_free(kvt_gpu_t *self, void *ptr)
{
    assert(self);
    if (!ptr)
        return;
    pthread_mutex_lock(&self->mu);
    bool found = s_hostbuf_remove(self, ptr, false);
    pthread_mutex_unlock(&self->mu);
    //  A pointer this device did not allocate is a caller bug.
    assert(found);
    if (found)
        self->ops->host_free(self, ptr);
}

int kvt_gpu_host_register(kvt_gpu_t *self, void *ptr, size_t bytes)
{
    assert(self);
    if (!ptr || bytes == 0 || (uintptr_t)ptr + bytes < (uintptr_t)ptr)
        return kvt_gpu_fail(KVT_GPU_EINVAL, "host_register: %zu bytes at %p", bytes, ptr);
    pthread_mutex_lock(&self->mu);
    size_t at = s_hostbuf_above(self, ptr);
    bool overlaps =
        (at > 0 &&
         (uintptr_t)self->hostbufs[at - 1].ptr + self->hostbufs[at - 1].bytes > (uintptr_t)ptr) ||
        (at < self->nhostbufs && (uintptr_t)ptr + bytes > (uintptr_t)self->hostbufs[at].ptr);
    pthread_mutex_unlock(&self->mu);
    if (overlaps)
        return kvt_gpu_fail(KVT_GPU_EINVAL, "host_register: %zu bytes at %p overlap a pinned range",
                            bytes, ptr);
    //  Pinning GiBs takes the runtime a while: not under the device lock.
    if (self->ops->host_register) {
        int rc = self->ops->host_register(self, ptr, bytes);
        if (rc != 0)
            return rc;
    }
    pthread_mutex_lock(&self->mu);
    int rc = s_hostbuf_insert(self, ptr, bytes, true);
    pthread_mutex_unlock(&self->mu);
    if (rc != 0) {
        if (self->ops->host_unregister)
            self->ops->host_unregister(self, ptr);
        return kvt_gpu_fail(rc, "host_register: %zu bytes at %p: %s", bytes, ptr,
                            rc == KVT_GPU_EINVAL ? "overlaps a pinned range" : "out of memory");
    }
    return 0;
}

void kvt_gpu_host_unregister(kvt_gpu_t *self, void *ptr)
{
    assert(self);
    if (!ptr)
        return;
    pthread_mutex_lock(&self->mu);
    bool found = s_hostbuf_remove(self, ptr, true);
    pthread_mutex_unlock(&self->mu);
    assert(found); //  a range this device did not register is a caller bug
    if (found && self->ops->host_unregister)
        self->ops->host_unregister(self, ptr);
}

int kvt_gpu_pci_bus_id(kvt_gpu_t *self, char *buf, size_t len)
{
    assert(self && buf);
    if (len == 0)
        return kvt_gpu_fail(KVT_GPU_EINVAL, "pci_bus_id: empty buffer");
    buf[0] = 0;
    if (!self->ops->pci_bus_id)
        return kvt_gpu_fail(KVT_GPU_EUNSUPPORTED, "pci_bus_id: the %s backend has no PCI device",
                            self->ops->name);
    int rc = self->ops->pci_bus_id(self, buf, len);
    buf[len - 1] = 0;
    return rc;
}

int kvt_gpu_host_register_fn(void *self, void *ptr, size_t bytes)
{
    return kvt_gpu_host_register(self, ptr, bytes);
}

void kvt_gpu_host_unregister_fn(void *self, void *ptr)
{
    kvt_gpu_host_unregister(self, ptr);
}

//  True when [ptr, ptr + len) lies in one pinned range; `allocated_only`:
//  in one kvt_gpu_host_alloc buffer (not a registration).
static bool s_host_covers(kvt_gpu_t *self, const void *ptr, size_t len, bool allocated_only)
{
    assert(self);
    bool pinned = false;
    pthread_mutex_lock(&self->mu);
    size_t at = s_hostbuf_above(self, ptr);
    if (at > 0) {
        const kvt_gpu_hostbuf_t *b = &self->hostbufs[at - 1];
        size_t off = (size_t)((uintptr_t)ptr - (uintptr_t)b->ptr);
        pinned = !(allocated_only && b->registered) && len <= b->bytes && off <= b->bytes - len;
    }
    pthread_mutex_unlock(&self->mu);
    return pinned;
}

bool kvt_gpu_host_pinned(kvt_gpu_t *self, const void *ptr, size_t len)
{
    return s_host_covers(self, ptr, len, false);
}

//  Registered caller memory is pinned for copies, but a kernel reads it at
//  its host address only when the runtime mapped it there, which the
//  registration does not promise: only kvt_gpu_host_alloc memory is offered
//  to the kernel path.
bool kvt_gpu_host_mapped(kvt_gpu_t *self, const void *ptr, size_t len)
{
    return s_host_covers(self, ptr, len, true);
}

// ------------------------------------------------------------- counters ----

void kvt_gpu_stats(kvt_gpu_t *self, kvt_gpu_stats_t *out)
{
    assert(self && out);
    pthread_mutex_lock(&self->mu);
    *out = self->stats;
    pthread_mutex_unlock(&self->mu);
}

uint64_t kvt_gpu_sim_cost_ns(const kvt_gpu_t *self, size_t bytes)
{
    uint64_t bw = self->opts.sim_bandwidth_Bps;
    //  ceil (bytes * 1e9 / bw) without overflowing for any size_t.
    uint64_t whole = (uint64_t)bytes / bw;
    uint64_t rest = (uint64_t)bytes % bw;
    unsigned __int128 part = ((unsigned __int128)rest * 1000000000u + bw - 1) / bw;
    uint64_t ns = kvt_gpu_sat_add(
        whole > UINT64_MAX / 1000000000u ? UINT64_MAX : whole * 1000000000u, (uint64_t)part);
    return kvt_gpu_sat_add(ns, self->opts.sim_latency_ns);
}
