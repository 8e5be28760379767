/*  kvt_pool_regions.c — the CPU pool's registration regions.

    A device reads and writes pinned host memory; the pool registers its
    existing arena rather than a second buffer. Some drivers refuse one very
    large registration, so the arena is cut into regions of region_bytes
    (the last shorter), registered one at a time in address order by a
    background thread. The extent allocator keeps every object inside one
    region (it never coalesces across a boundary) and serves only the
    regions already registered: a region stays closed until its
    registration returns. A refused region is counted and logged; it is
    served unpinned only with serve_unpinned. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>

#include "kvt_pool_int.h"

#define S_DEFAULT_REGION (64ull << 30)

int kvt_pool_regions_init(kvt_pool_t *self, const kvt_pool_config_t *cfg, char *err, size_t errlen)
{
    uint64_t rb = cfg->region_bytes ? cfg->region_bytes : S_DEFAULT_REGION;
    rb &= ~(uint64_t)(self->align - 1);
    if (rb < self->align) {
        kvt_store_seterr(err, errlen, "pool.region_bytes=%zu: must be at least align (%zu)",
                         cfg->region_bytes, self->align);
        return -1;
    }
    if (rb > self->capacity)
        rb = self->capacity;
    uint64_t n = (self->capacity + rb - 1) / rb;
    if (n > (1u << 20)) {
        kvt_store_seterr(err, errlen, "pool.region_bytes=%zu: %llu regions, at most %u",
                         cfg->region_bytes, (unsigned long long)n, 1u << 20);
        return -1;
    }
    self->region_bytes = rb;
    self->nregions = (uint32_t)n;
    self->reg_fn = cfg->register_fn;
    self->unreg_fn = cfg->unregister_fn;
    self->reg_arg = cfg->register_arg;
    self->serve_unpinned = cfg->serve_unpinned;
    self->region_state = calloc(n, 1);
    bool open = self->reg_fn == NULL;
    if (!self->region_state ||
        kvt_extents_init_regions(&self->ext, self->capacity >> self->shift, cfg->max_objects,
                                 rb >> self->shift, open) != 0) {
        kvt_store_seterr(err, errlen, "pool.max_objects=%u: cannot allocate the tables",
                         cfg->max_objects);
        return -1;
    }
    if (open) {
        for (uint32_t r = 0; r < self->nregions; r++)
            self->region_state[r] = KVT_PREG_REGISTERED;
        self->regions_settled = self->nregions;
    }
    return 0;
}

static void *s_register_main(void *arg)
{
    kvt_pool_t *self = arg;
    for (uint32_t r = 0; r < self->nregions; r++) {
        kvt_pool_lock(self);
        bool stop = self->reg_stop;
        kvt_pool_unlock(self);
        if (stop)
            break;
        uint64_t off = (uint64_t)r * self->region_bytes;
        uint64_t len =
            self->capacity - off < self->region_bytes ? self->capacity - off : self->region_bytes;
        int rc = self->reg_fn(self->reg_arg, self->base + off, len);
        kvt_pool_lock(self);
        if (rc == 0) {
            self->region_state[r] = KVT_PREG_REGISTERED;
            self->st.regions_registered++;
            kvt_extents_open(&self->ext, r);
        } else {
            self->region_state[r] = KVT_PREG_FAILED;
            self->st.regions_failed++;
            if (self->serve_unpinned)
                kvt_extents_open(&self->ext, r);
            kvt_pool_logq(self, 1,
                          "region %u (%llu bytes at offset %llu): registration refused (%d); %s", r,
                          (unsigned long long)len, (unsigned long long)off, rc,
                          self->serve_unpinned ? "served unpinned" : "not served");
        }
        self->regions_settled = r + 1;
        pthread_cond_broadcast(&self->reg_cond);
        kvt_pool_unlock(self);
    }
    return NULL;
}

int kvt_pool_regions_start(kvt_pool_t *self, char *err, size_t errlen)
{
    if (!self->reg_fn)
        return 0;
    if (pthread_create(&self->reg_thread, NULL, s_register_main, self) != 0) {
        kvt_store_seterr(err, errlen, "pool.register_fn: cannot start the registration thread");
        return -1;
    }
    self->reg_started = true;
    return 0;
}

void kvt_pool_regions_fini(kvt_pool_t *self)
{
    if (self->reg_started) {
        kvt_pool_lock(self);
        self->reg_stop = true;
        kvt_pool_unlock(self);
        pthread_join(self->reg_thread, NULL);
        self->reg_started = false;
        for (uint32_t r = 0; self->unreg_fn && r < self->nregions; r++)
            if (self->region_state[r] == KVT_PREG_REGISTERED)
                self->unreg_fn(self->reg_arg, self->base + (uint64_t)r * self->region_bytes);
    }
    free(self->region_state);
    self->region_state = NULL;
}

uint32_t kvt_pool_regions_wait(kvt_pool_t *self, uint32_t n)
{
    assert(self);
    kvt_pool_lock(self);
    if (n > self->nregions)
        n = self->nregions;
    while (self->regions_settled < n)
        pthread_cond_wait(&self->reg_cond, &self->mu);
    uint32_t reg = 0;
    for (uint32_t r = 0; r < self->nregions; r++)
        reg += self->region_state[r] == KVT_PREG_REGISTERED;
    kvt_pool_unlock(self);
    return reg;
}

bool kvt_pool_pinned(kvt_pool_t *self, const void *ptr, size_t len)
{
    assert(self);
    const uint8_t *p = ptr;
    if (p < self->base || len == 0 || (size_t)(p - self->base) >= self->capacity ||
        len > self->capacity - (size_t)(p - self->base))
        return false;
    uint64_t off = (uint64_t)(p - self->base);
    uint64_t r = off / self->region_bytes;
    if ((off + len - 1) / self->region_bytes != r)
        return false; //  straddles a boundary: two registrations, not one range
    kvt_pool_lock(self);
    bool pinned = self->reg_fn && self->region_state[r] == KVT_PREG_REGISTERED;
    kvt_pool_unlock(self);
    return pinned;
}
