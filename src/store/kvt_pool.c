/*  kvt_pool.c — the CPU pool: creation, objects, writes (reserve / commit /
    abort / put), removal, stats. Allocation with eviction is in
    kvt_pool_evict.c; reads, lookup and touch in kvt_pool_read.c; holders,
    leases and reclaim in kvt_pool_lease.c; the design is described in
    kvt_pool.h and docs/store.md. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvt_pool_int.h"

#define S_DEFAULT_ALIGN   4096u
#define S_DEFAULT_LEASES  4096u
#define S_DEFAULT_PINS    65536u
#define S_DEFAULT_HOLDERS 64u
#define S_DEFAULT_TTL_MS  60000u
#define S_MAX_OBJECTS     (4u << 20)
#define S_MAX_LEASES      (1u << 24)
#define S_MAX_PINS        (1u << 26)
#define S_MAX_HOLDERS     4096u
#define S_MAX_TTL_MS      (365ull * 24 * 3600 * 1000)

void kvt_pool_config_defaults(kvt_pool_config_t *cfg)
{
    *cfg = (kvt_pool_config_t){.name = "pool",
                               .align = S_DEFAULT_ALIGN,
                               .max_leases = S_DEFAULT_LEASES,
                               .max_pins = S_DEFAULT_PINS,
                               .max_holders = S_DEFAULT_HOLDERS,
                               .ttl_ms = S_DEFAULT_TTL_MS};
}

// ------------------------------------------------------------- locking --

void kvt_pool_lock(kvt_pool_t *self)
{
    pthread_mutex_lock(&self->mu);
}

void kvt_pool_unlock(kvt_pool_t *self)
{
    if (self->nlogq == 0) {
        pthread_mutex_unlock(&self->mu);
        return;
    }
    char lines[KVT_POOL_LOG_LINES][KVT_POOL_LOG_LEN];
    int levels[KVT_POOL_LOG_LINES];
    int n = self->nlogq;
    for (int i = 0; i < n; i++) {
        levels[i] = self->logq[i][0] - '0';
        memcpy(lines[i], self->logq[i] + 1, KVT_POOL_LOG_LEN - 1);
        lines[i][KVT_POOL_LOG_LEN - 1] = 0;
    }
    self->nlogq = 0;
    pthread_mutex_unlock(&self->mu);
    for (int i = 0; i < n; i++)
        self->log(self->log_arg, levels[i], lines[i]);
}

void kvt_pool_logq(kvt_pool_t *self, int level, const char *fmt, ...)
{
    if (self->nlogq >= KVT_POOL_LOG_LINES)
        return;
    char *line = self->logq[self->nlogq++];
    line[0] = (char)('0' + (level < 0 ? 0 : level > 3 ? 3 : level));
    va_list ap;
    va_start(ap, fmt);
    kvt_store_format(line + 1, KVT_POOL_LOG_LEN - 1, self->name, fmt, ap);
    va_end(ap);
}

// ---------------------------------------------------------- creation --

//  True when setting `name` is at most `max`; else the error names it.
static bool s_at_most(const char *name, uint64_t value, uint64_t max, char *err, size_t errlen)
{
    if (value <= max)
        return true;
    kvt_store_seterr(err, errlen, "pool.%s=%llu: must be at most %llu", name,
                     (unsigned long long)value, (unsigned long long)max);
    return false;
}

static int s_validate(const kvt_pool_config_t *in, kvt_pool_config_t *cfg, char *err, size_t errlen)
{
    *cfg = *in;
    if (!cfg->name)
        cfg->name = "pool";
    if (cfg->align == 0)
        cfg->align = S_DEFAULT_ALIGN;
    if (cfg->max_leases == 0)
        cfg->max_leases = S_DEFAULT_LEASES;
    if (cfg->max_pins == 0)
        cfg->max_pins = S_DEFAULT_PINS;
    if (cfg->max_holders == 0)
        cfg->max_holders = S_DEFAULT_HOLDERS;
    if (cfg->ttl_ms == 0)
        cfg->ttl_ms = S_DEFAULT_TTL_MS;
    if (cfg->capacity_bytes == 0) {
        kvt_store_seterr(err, errlen, "pool.capacity_bytes=0: must be > 0");
        return -1;
    }
    if (cfg->align < 64 || cfg->align > (2u << 20) || (cfg->align & (cfg->align - 1))) {
        kvt_store_seterr(err, errlen, "pool.align=%zu: must be a power of 2 in [64, 2097152]",
                         cfg->align);
        return -1;
    }
    if (cfg->capacity_bytes < 2 * cfg->align) {
        kvt_store_seterr(err, errlen, "pool.capacity_bytes=%zu: must be at least 2 x align (%zu)",
                         cfg->capacity_bytes, cfg->align);
        return -1;
    }
    if (cfg->max_objects == 0) {
        uint64_t n = cfg->capacity_bytes / (64u << 10);
        cfg->max_objects = (uint32_t)(n < 64 ? 64 : n > S_MAX_OBJECTS ? S_MAX_OBJECTS : n);
    }
    if (!s_at_most("max_objects", cfg->max_objects, S_MAX_OBJECTS, err, errlen) ||
        !s_at_most("max_leases", cfg->max_leases, S_MAX_LEASES, err, errlen) ||
        !s_at_most("max_pins", cfg->max_pins, S_MAX_PINS, err, errlen) ||
        !s_at_most("max_holders", cfg->max_holders, S_MAX_HOLDERS, err, errlen) ||
        !s_at_most("ttl_ms", cfg->ttl_ms, S_MAX_TTL_MS, err, errlen))
        return -1;
    if (kvt_pool_value_check(cfg, err, errlen) != 0)
        return -1;
    if (!cfg->clock)
        cfg->clock = kvt_store_monotonic_ns;
    if (!cfg->log)
        cfg->log = kvt_store_log_stderr;
    return 0;
}

static int s_arena(kvt_pool_t *self, const kvt_pool_config_t *cfg, char *err, size_t errlen)
{
    size_t align = cfg->align;
    if (cfg->base) {
        uintptr_t start = ((uintptr_t)cfg->base + align - 1) & ~(uintptr_t)(align - 1);
        size_t pad = start - (uintptr_t)cfg->base;
        size_t usable = cfg->capacity_bytes > pad ? cfg->capacity_bytes - pad : 0;
        self->base = (uint8_t *)start;
        self->capacity = usable & ~(align - 1);
    } else {
        self->capacity = cfg->capacity_bytes & ~(align - 1);
        if (kvt_pool_arena_map(self, err, errlen) != 0)
            return -1;
        kvt_pool_arena_numa(self, cfg);
    }
    if (self->capacity < align) {
        kvt_store_seterr(err, errlen, "pool.base: %zu bytes left after aligning to %zu",
                         self->capacity, align);
        return -1;
    }
    return 0;
}

kvt_pool_t *kvt_pool_new(const kvt_pool_config_t *in, char *err, size_t errlen)
{
    assert(in);
    kvt_pool_config_t cfg;
    if (s_validate(in, &cfg, err, errlen) != 0)
        return NULL;
    kvt_pool_t *self = calloc(1, sizeof(*self));
    if (!self) {
        kvt_store_seterr(err, errlen, "pool: out of memory");
        return NULL;
    }
    snprintf(self->name, sizeof(self->name), "%s", cfg.name);
    pthread_mutex_init(&self->mu, NULL);
    pthread_cond_init(&self->reg_cond, NULL);
    self->align = cfg.align;
    self->shift = (unsigned)__builtin_ctzll(cfg.align);
    self->ttl_ns = cfg.ttl_ms * 1000000ull;
    self->clock = cfg.clock;
    self->clock_arg = cfg.clock_arg;
    self->log = cfg.log;
    self->log_arg = cfg.log_arg;
    if (s_arena(self, &cfg, err, errlen) != 0 ||
        kvt_pool_regions_init(self, &cfg, err, errlen) != 0)
        goto cleanup;
    self->nobjs = cfg.max_objects;
    self->nleases = cfg.max_leases;
    self->npins = cfg.max_pins;
    self->nholders = cfg.max_holders + 1; //  + the internal put holder
    self->objs = calloc(self->nobjs, sizeof(kvt_pobj_t));
    self->leases = calloc(self->nleases, sizeof(kvt_plea_t));
    self->pins = calloc(self->npins, sizeof(kvt_ppin_t));
    self->holders = calloc(self->nholders, sizeof(kvt_phold_t));
    if (!self->objs || !self->leases || !self->pins || !self->holders ||
        kvt_keymap_init(&self->map, self->nobjs) != 0) {
        kvt_store_seterr(err, errlen, "pool.max_objects=%u: cannot allocate the tables",
                         self->nobjs);
        goto cleanup;
    }
    if (kvt_pool_value_init(self, &cfg, err, errlen) != 0)
        goto cleanup;
    self->obj_free = KVT_NIL;
    for (uint32_t i = self->nobjs; i-- > 0;) {
        self->objs[i].gen = 1;
        self->objs[i].link.next = self->obj_free;
        self->obj_free = i;
    }
    self->lease_free = KVT_NIL;
    for (uint32_t i = self->nleases; i-- > 0;) {
        self->leases[i].gen = 1;
        self->leases[i].link.next = self->lease_free;
        self->lease_free = i;
    }
    self->pin_free = KVT_NIL;
    for (uint32_t i = self->npins; i-- > 0;) {
        self->pins[i].next = self->pin_free;
        self->pin_free = i;
    }
    self->pins_avail = self->npins;
    kvt_ilist_init(&self->lru);
    kvt_ilist_init(&self->writing);
    kvt_ilist_init(&self->quarantine);
    kvt_ilist_init(&self->active);
    if (kvt_pool_holder_add(self, "pool.put", &self->put_holder) != 0 ||
        kvt_pool_regions_start(self, err, errlen) != 0)
        goto cleanup;
    return self;

cleanup:
    kvt_pool_destroy(&self);
    return NULL;
}

void kvt_pool_destroy(kvt_pool_t **self_p)
{
    assert(self_p);
    kvt_pool_t *self = *self_p;
    if (!self)
        return;
    kvt_pool_regions_fini(self); //  first: the registration thread uses the pool
    kvt_keymap_fini(&self->map);
    kvt_extents_fini(&self->ext);
    kvt_pool_value_fini(self);
    free(self->objs);
    free(self->leases);
    free(self->pins);
    free(self->holders);
    kvt_pool_arena_unmap(self);
    pthread_cond_destroy(&self->reg_cond);
    pthread_mutex_destroy(&self->mu);
    free(self);
    *self_p = NULL;
}

// ---------------------------------------------------- object helpers --

//  The pool threads three lists through the objects' links (an object is
//  in one at a time): the LRU of ready objects, the objects being written
//  (and draining quarantine), and the quarantined reservations.

//  A ready object to the young end of the LRU (a use or a touch).
static void s_young(kvt_pool_t *self, uint32_t i)
{
    assert(self->objs[i].state == KVT_POBJ_READY);
    kvt_ilist_to_tail(&self->lru, KVT_POOL_OBJ_LINKS(self), i);
}

void kvt_pool_refresh(kvt_pool_t *self, uint32_t i)
{
    s_young(self, i);
    kvt_pool_value_hit(self, i);
}

void kvt_pool_renew(kvt_pool_t *self, uint32_t i)
{
    s_young(self, i);
    kvt_pool_value_renew(self, i);
}

uint32_t kvt_pool_find(kvt_pool_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind,
                       kvt_pobj_state_t state)
{
    kvt_obj_kind_t cand[2];
    int nc = kvt_store_candidates(kind, cand);
    kvt_keymap_entry_t *e = kvt_keymap_find(&self->map, ns, key);
    if (!e)
        return KVT_NIL;
    for (int c = 0; c < nc; c++) {
        uint32_t v = e->slot[cand[c] - 1];
        if (v && self->objs[v - 1].state == state)
            return v - 1;
    }
    return KVT_NIL;
}

uint64_t kvt_pool_free_obj(kvt_pool_t *self, uint32_t i)
{
    kvt_pobj_t *o = &self->objs[i];
    bool indexed = true;
    if (o->state == KVT_POBJ_READY) {
        assert(o->pins == 0);
        kvt_ilist_unlink(&self->lru, KVT_POOL_OBJ_LINKS(self), i);
        kvt_pool_value_gone(self, i);
        self->evictable_units -= o->units;
        self->st.objects--;
    } else if (o->state == KVT_POBJ_WRITING) {
        kvt_ilist_unlink(&self->writing, KVT_POOL_OBJ_LINKS(self), i);
        self->st.writing_bytes -= o->size;
        self->st.objects_writing--;
    } else {
        assert(o->state == KVT_POBJ_QUARANTINED || o->state == KVT_POBJ_QDRAIN);
        if (o->state == KVT_POBJ_QUARANTINED)
            kvt_ilist_unlink(&self->quarantine, KVT_POOL_OBJ_LINKS(self), i);
        else
            kvt_ilist_unlink(&self->writing, KVT_POOL_OBJ_LINKS(self), i);
        self->st.quarantined_bytes -= o->size;
        self->st.objects_quarantined--;
        indexed = false;
    }
    if (indexed)
        kvt_keymap_clear(&self->map, o->ns, o->key, (kvt_obj_kind_t)o->kind);
    uint32_t hole = kvt_extents_free(&self->ext, o->extent);
    o->state = KVT_POBJ_FREE;
    o->gen++;
    o->link.next = self->obj_free;
    self->obj_free = i;
    return self->ext.ext[hole].len;
}

bool kvt_pool_resv_live(kvt_pool_t *self, uint32_t i)
{
    const kvt_pobj_t *o = &self->objs[i];
    const kvt_phold_t *h = kvt_pool_holder(self, o->holder);
    return o->state == KVT_POBJ_WRITING && h && h->epoch == o->epoch;
}

void kvt_pool_quarantine(kvt_pool_t *self, uint32_t i)
{
    kvt_pobj_t *o = &self->objs[i];
    assert(o->state == KVT_POBJ_WRITING);
    kvt_ilist_unlink(&self->writing, KVT_POOL_OBJ_LINKS(self), i);
    self->st.writing_bytes -= o->size;
    self->st.objects_writing--;
    kvt_keymap_clear(&self->map, o->ns, o->key, (kvt_obj_kind_t)o->kind);
    o->state = KVT_POBJ_QUARANTINED;
    kvt_ilist_append(&self->quarantine, KVT_POOL_OBJ_LINKS(self), i);
    self->st.quarantined_bytes += o->size;
    self->st.objects_quarantined++;
}

void kvt_pool_drain_holder(kvt_pool_t *self, kvt_holder_t holder, uint64_t now)
{
    uint32_t i = self->quarantine.head;
    while (i != KVT_NIL) {
        uint32_t next = self->objs[i].link.next;
        kvt_pobj_t *o = &self->objs[i];
        if (o->holder == holder) {
            kvt_ilist_unlink(&self->quarantine, KVT_POOL_OBJ_LINKS(self), i);
            o->state = KVT_POBJ_QDRAIN;
            o->t_start = now;
            kvt_ilist_append(&self->writing, KVT_POOL_OBJ_LINKS(self), i);
        }
        i = next;
    }
}

// ------------------------------------------------------------ writes --

int kvt_pool_reserve(kvt_pool_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind,
                     size_t size, kvt_holder_t holder, kvt_resv_t *resv, void **ptr)
{
    assert(self && resv && ptr);
    if (!kvt_store_kind_ok(kind) || size == 0)
        return KVT_STORE_EINVAL;
    int rc = KVT_STORE_OK;
    kvt_pool_lock(self);
    if (!kvt_pool_holder(self, holder)) {
        rc = KVT_STORE_EHOLDER;
        goto cleanup;
    }
    uint32_t i = kvt_pool_find(self, ns, key, kind, KVT_POBJ_READY);
    if (i != KVT_NIL) {
        kvt_pool_refresh(self, i);
        self->st.puts_skipped++;
        rc = KVT_STORE_SKIPPED;
        goto cleanup;
    }
    if (kvt_pool_find(self, ns, key, kind, KVT_POBJ_WRITING) != KVT_NIL) {
        self->st.puts_duplicate++;
        rc = KVT_STORE_DUPLICATE;
        goto cleanup;
    }
    //  Compared before rounding up: a size near SIZE_MAX would wrap. An
    //  object never straddles a region, so a region bounds it.
    if (size > self->region_bytes) {
        self->st.alloc_failed++;
        self->st.alloc_failed_toobig++;
        rc = KVT_STORE_ETOOBIG;
        goto cleanup;
    }
    uint64_t units = ((uint64_t)size + self->align - 1) >> self->shift;
    uint64_t now = kvt_pool_now(self);
    uint32_t extent;
    rc = kvt_pool_make_room(self, units, now, &extent);
    if (rc != KVT_STORE_OK)
        goto cleanup;
    i = self->obj_free;
    kvt_pobj_t *o = &self->objs[i];
    self->obj_free = o->link.next;
    o->ns = ns;
    o->key = key;
    o->kind = (uint8_t)kind;
    o->size = size;
    o->units = units;
    o->extent = extent;
    kvt_extents_set_owner(&self->ext, extent, i);
    o->off = kvt_extents_off(&self->ext, extent) << self->shift;
    o->pins = 0;
    o->holder = holder;
    o->epoch = self->holders[holder - 1].epoch;
    o->t_start = now;
    o->state = KVT_POBJ_WRITING;
    int set = kvt_keymap_set(&self->map, ns, key, kind, i + 1);
    assert(set == 0); //  the map holds max_objects keys, one per live object at most
    (void)set;
    kvt_ilist_append(&self->writing, KVT_POOL_OBJ_LINKS(self), i);
    self->st.writing_bytes += size;
    self->st.objects_writing++;
    resv->id = kvt_store_handle(i, o->gen);
    *ptr = self->base + o->off;
cleanup:
    kvt_pool_unlock(self);
    return rc;
}

//  The writing or quarantined object a reservation names, or KVT_NIL
//  (counted).
static uint32_t s_resv_obj(kvt_pool_t *self, const kvt_resv_t *resv)
{
    uint32_t i, gen;
    if (resv && kvt_store_unhandle(resv->id, self->nobjs, &i, &gen) && self->objs[i].gen == gen) {
        uint8_t state = self->objs[i].state;
        if (state == KVT_POBJ_WRITING || state == KVT_POBJ_QUARANTINED || state == KVT_POBJ_QDRAIN)
            return i;
    }
    self->st.release_errors++;
    return KVT_NIL;
}

int kvt_pool_commit(kvt_pool_t *self, kvt_resv_t *resv, kvt_lease_t *lease)
{
    return kvt_pool_commit_ex(self, resv, lease, 0, NULL, NULL);
}

int kvt_pool_commit_ex(kvt_pool_t *self, kvt_resv_t *resv, kvt_lease_t *lease, kvt_holder_t second,
                       kvt_lease_t *second_lease, kvt_pool_info_t *info)
{
    assert(self);
    int rc = KVT_STORE_OK;
    kvt_pool_lock(self);
    uint32_t i = s_resv_obj(self, resv);
    if (i == KVT_NIL) {
        rc = KVT_STORE_ESTALE;
        goto cleanup;
    }
    if (!kvt_pool_resv_live(self, i)) {
        //  Quarantined, or an orphan (its holder was reset or removed): never
        //  made ready. The writer is done with the bytes, so they are freed.
        kvt_pool_free_obj(self, i);
        self->st.release_errors++;
        rc = KVT_STORE_ESTALE;
        goto cleanup;
    }
    if (lease && (self->lease_free == KVT_NIL || self->pins_avail == 0)) {
        rc = KVT_STORE_EFULL; //  the reservation stays: commit without a lease or abort
        goto cleanup;
    }
    kvt_pobj_t *o = &self->objs[i];
    kvt_ilist_unlink(&self->writing, KVT_POOL_OBJ_LINKS(self), i);
    self->st.writing_bytes -= o->size;
    self->st.objects_writing--;
    o->state = KVT_POBJ_READY;
    kvt_ilist_append(&self->lru, KVT_POOL_OBJ_LINKS(self), i);
    kvt_pool_value_ready(self, i);
    self->st.objects++;
    self->evictable_units += o->units;
    self->st.puts++;
    self->st.put_bytes += o->size;
    if (lease) {
        uint32_t l = kvt_pool_lease_new(self, o->holder, kvt_pool_now(self));
        kvt_pool_pin(self, l, i);
        lease->id = kvt_store_handle(l, self->leases[l].gen);
    }
    if (second && second_lease && kvt_pool_holder(self, second) && self->lease_free != KVT_NIL &&
        self->pins_avail > 0) {
        uint32_t l = kvt_pool_lease_new(self, second, kvt_pool_now(self));
        kvt_pool_pin(self, l, i);
        second_lease->id = kvt_store_handle(l, self->leases[l].gen);
    }
    if (info)
        *info = (kvt_pool_info_t){.ns = o->ns,
                                  .key = o->key,
                                  .kind = (kvt_obj_kind_t)o->kind,
                                  .ptr = self->base + o->off,
                                  .size = o->size};
    resv->id = 0;
cleanup:
    kvt_pool_unlock(self);
    return rc;
}

int kvt_pool_abort(kvt_pool_t *self, kvt_resv_t *resv)
{
    assert(self);
    int rc = KVT_STORE_OK;
    kvt_pool_lock(self);
    uint32_t i = s_resv_obj(self, resv);
    if (i == KVT_NIL) {
        rc = KVT_STORE_ESTALE;
        goto cleanup;
    }
    bool quarantined = self->objs[i].state != KVT_POBJ_WRITING;
    kvt_pool_free_obj(self, i);
    if (quarantined) { //  reclaimed at its TTL: the writer learns it, the bytes go now
        self->st.release_errors++;
        rc = KVT_STORE_ESTALE;
        goto cleanup;
    }
    self->st.aborts++;
    resv->id = 0;
cleanup:
    kvt_pool_unlock(self);
    return rc;
}

int kvt_pool_resv_renew(kvt_pool_t *self, kvt_resv_t resv)
{
    assert(self);
    int rc = KVT_STORE_OK;
    kvt_pool_lock(self);
    uint32_t i = s_resv_obj(self, &resv);
    if (i == KVT_NIL) {
        rc = KVT_STORE_ESTALE;
        goto cleanup;
    }
    kvt_pobj_t *o = &self->objs[i];
    if (!kvt_pool_resv_live(self, i)) { //  quarantined, or its holder was reset / removed
        self->st.release_errors++;
        rc = KVT_STORE_ESTALE;
        goto cleanup;
    }
    o->t_start = kvt_pool_now(self);
    kvt_ilist_unlink(&self->writing, KVT_POOL_OBJ_LINKS(self), i);
    kvt_ilist_append(&self->writing, KVT_POOL_OBJ_LINKS(self), i);
cleanup:
    kvt_pool_unlock(self);
    return rc;
}

int kvt_pool_put(kvt_pool_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind,
                 const void *src, size_t size)
{
    assert(self && (src || size == 0));
    kvt_resv_t resv = {0};
    void *dst = NULL;
    int rc = kvt_pool_reserve(self, ns, key, kind, size, self->put_holder, &resv, &dst);
    if (rc != KVT_STORE_OK)
        return rc;
    memcpy(dst, src, size);
    return kvt_pool_commit(self, &resv, NULL);
}

int kvt_pool_remove(kvt_pool_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind)
{
    assert(self);
    if (!kvt_store_kind_ok(kind))
        return KVT_STORE_EINVAL;
    int rc = KVT_STORE_OK;
    kvt_pool_lock(self);
    kvt_keymap_entry_t *e = kvt_keymap_find(&self->map, ns, key);
    uint32_t v = e ? e->slot[kind - 1] : 0;
    if (!v) {
        rc = KVT_STORE_ENOTFOUND;
        goto cleanup;
    }
    kvt_pobj_t *o = &self->objs[v - 1];
    if (o->state != KVT_POBJ_READY || o->pins > 0) {
        rc = KVT_STORE_EBUSY;
        goto cleanup;
    }
    kvt_pool_free_obj(self, v - 1);
    self->st.removals++;
cleanup:
    kvt_pool_unlock(self);
    return rc;
}

void kvt_pool_set_evict_hook(kvt_pool_t *self, kvt_pool_evict_fn *fn, void *arg)
{
    assert(self);
    kvt_pool_lock(self);
    self->evict_fn = fn;
    self->evict_arg = arg;
    kvt_pool_unlock(self);
}

void kvt_pool_stats(kvt_pool_t *self, kvt_pool_stats_t *stats)
{
    assert(self && stats);
    kvt_pool_lock(self);
    *stats = self->st;
    stats->capacity_bytes = self->capacity;
    stats->used_bytes = self->ext.used_units << self->shift;
    stats->free_extents = self->ext.free_extents;
    stats->largest_free_bytes = kvt_extents_largest_free(&self->ext) << self->shift;
    stats->regions = self->nregions;
    if (!self->reg_fn)
        stats->regions_registered = self->nregions;
    stats->regions_pending = self->nregions - self->regions_settled;
    stats->evict_value = self->val.on;
    kvt_pool_unlock(self);
}

void *kvt_pool_base(kvt_pool_t *self)
{
    assert(self);
    return self->base;
}

size_t kvt_pool_capacity(kvt_pool_t *self)
{
    assert(self);
    return self->capacity;
}
