/*  kvt_storage.c — the storage manager: the CPU pool over an optional disk
    backend; write policies, promotion on get, lookups across backends. See
    kvt_storage.h and docs/store.md. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "kvt_storage_int.h"

#define S_MAX_SEGMENTS 16 //  alternations pool/disk a lookup follows before it stops counting

#define S_COUNT(self, field, n)            \
    do {                                   \
        pthread_mutex_lock(&(self)->mu);   \
        (self)->st.field += (n);           \
        pthread_mutex_unlock(&(self)->mu); \
    } while (0)

void kvt_storage_config_defaults(kvt_storage_config_t *cfg)
{
    assert(cfg);
    memset(cfg, 0, sizeof(*cfg));
    kvt_pool_config_defaults(&cfg->pool);
    kvt_disk_config_defaults(&cfg->disk);
    kvt_remote_config_defaults(&cfg->remote);
    cfg->disk_enabled = false;
    cfg->write_policy = KVT_WRITE_ALWAYS;
}

// ------------------------------------------------ write-through / back --

static kvt_swrite_t *s_write_get(kvt_storage_t *self)
{
    pthread_mutex_lock(&self->mu);
    kvt_swrite_t *w = NULL;
    if (self->write_free != KVT_NIL) {
        w = &self->writes[self->write_free];
        self->write_free = w->next;
    }
    pthread_mutex_unlock(&self->mu);
    return w;
}

static void s_write_put(kvt_storage_t *self, kvt_swrite_t *w)
{
    pthread_mutex_lock(&self->mu);
    w->next = self->write_free;
    self->write_free = (uint32_t)(w - self->writes);
    pthread_mutex_unlock(&self->mu);
}

//  The disk writer finished reading the pool object: release its lease. A
//  lease the TTL reclaimed means the bytes may have changed under the
//  writer, so the file is discarded.
static int s_write_done(void *arg, int rc)
{
    (void)rc;
    kvt_swrite_t *w = arg;
    kvt_storage_t *self = w->owner;
    int released = kvt_pool_release(self->pool, &w->lease);
    s_write_put(self, w);
    return released == KVT_STORE_OK ? 0 : 1;
}

//  Queues a write-through of a committed object (the caller's lease on it
//  is passed in and handed to the disk writer, or released here).
static void s_write_through(kvt_storage_t *self, const kvt_pool_info_t *info, kvt_lease_t lease)
{
    if (lease.id == 0) {
        S_COUNT(self, writes_not_queued, 1);
        return;
    }
    kvt_swrite_t *w = s_write_get(self);
    if (!w) {
        kvt_pool_release(self->pool, &lease);
        S_COUNT(self, writes_not_queued, 1);
        return;
    }
    w->owner = self;
    w->lease = lease;
    int rc = kvt_disk_put(self->disk, info->ns, info->key, info->kind, info->ptr, info->size,
                          s_write_done, w);
    if (rc == KVT_STORE_OK) {
        S_COUNT(self, writes_queued, 1);
        return;
    }
    kvt_pool_release(self->pool, &w->lease);
    s_write_put(self, w);
    if (rc != KVT_STORE_SKIPPED && rc != KVT_STORE_DUPLICATE)
        S_COUNT(self, writes_not_queued, 1);
}

//  Pool eviction hook (under the pool lock): ON_EVICT write-back.
static void s_on_evict(void *arg, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind,
                       const void *bytes, size_t size)
{
    kvt_storage_t *self = arg;
    int rc = kvt_disk_put_copy(self->disk, ns, key, kind, bytes, size);
    if (rc == KVT_STORE_OK)
        S_COUNT(self, writes_queued, 1);
    else if (rc == KVT_STORE_SKIPPED || rc == KVT_STORE_DUPLICATE)
        S_COUNT(self, writeback_skipped, 1);
    else
        S_COUNT(self, writes_not_queued, 1);
}

// ---------------------------------------------------------- creation --

kvt_storage_t *kvt_storage_new(const kvt_storage_config_t *cfg, char *err, size_t errlen)
{
    assert(cfg);
    if (cfg->write_policy < KVT_WRITE_ALWAYS || cfg->write_policy > KVT_WRITE_NEVER) {
        kvt_store_seterr(err, errlen, "write_policy=%d: must be always, on_evict or never",
                         (int)cfg->write_policy);
        return NULL;
    }
    kvt_storage_t *self = calloc(1, sizeof(*self));
    if (!self) {
        kvt_store_seterr(err, errlen, "storage: out of memory");
        return NULL;
    }
    pthread_mutex_init(&self->mu, NULL);
    self->policy = cfg->write_policy;
    self->write_free = KVT_NIL;
    self->pool = kvt_pool_new(&cfg->pool, err, errlen);
    if (!self->pool)
        goto cleanup;
    if (kvt_pool_holder_add(self->pool, "storage.put", &self->put_holder) != KVT_STORE_OK ||
        kvt_pool_holder_add(self->pool, "storage.disk", &self->disk_holder) != KVT_STORE_OK) {
        kvt_store_seterr(err, errlen, "pool.max_holders=%u: too small for the storage manager",
                         cfg->pool.max_holders);
        goto cleanup;
    }
    if (cfg->disk_enabled) {
        kvt_disk_config_t dcfg = cfg->disk;
        if (!dcfg.clock) {
            dcfg.clock = cfg->pool.clock;
            dcfg.clock_arg = cfg->pool.clock_arg;
        }
        if (!dcfg.log) {
            dcfg.log = cfg->pool.log;
            dcfg.log_arg = cfg->pool.log_arg;
        }
        self->disk = kvt_disk_new(&dcfg, err, errlen);
        if (!self->disk)
            goto cleanup;
        uint32_t depth = dcfg.queue_depth ? dcfg.queue_depth : 64;
        self->nwrites = 2 * depth + 64; //  queued writes plus callers racing for a slot
        self->writes = calloc(self->nwrites, sizeof(kvt_swrite_t));
        if (!self->writes) {
            kvt_store_seterr(err, errlen, "disk.queue_depth=%u: out of memory", depth);
            goto cleanup;
        }
        for (uint32_t i = self->nwrites; i-- > 0;) {
            self->writes[i].next = self->write_free;
            self->write_free = i;
        }
        if (self->policy == KVT_WRITE_ON_EVICT)
            kvt_pool_set_evict_hook(self->pool, s_on_evict, self);
    }
    if (cfg->remote_enabled) {
        self->remote = kvt_remote_new(&cfg->remote, err, errlen);
        if (!self->remote)
            goto cleanup;
    }
    self->st.disk_enabled = self->disk != NULL;
    self->st.remote_enabled = self->remote != NULL;
    return self;

cleanup:
    kvt_storage_destroy(&self);
    return NULL;
}

void kvt_storage_destroy(kvt_storage_t **self_p)
{
    assert(self_p);
    kvt_storage_t *self = *self_p;
    if (!self)
        return;
    //  The disk goes first: its last writes release leases in the pool.
    kvt_disk_destroy(&self->disk);
    kvt_remote_destroy(&self->remote);
    kvt_pool_destroy(&self->pool);
    free(self->writes);
    pthread_mutex_destroy(&self->mu);
    free(self);
    *self_p = NULL;
}

kvt_pool_t *kvt_storage_pool(kvt_storage_t *self)
{
    assert(self);
    return self->pool;
}

kvt_disk_t *kvt_storage_disk(kvt_storage_t *self)
{
    assert(self);
    return self->disk;
}

// ------------------------------------------------------------ writes --

int kvt_storage_reserve(kvt_storage_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind,
                        size_t size, kvt_holder_t holder, kvt_resv_t *resv, void **ptr)
{
    assert(self);
    int rc = kvt_pool_reserve(self->pool, ns, key, kind, size, holder, resv, ptr);
    if (rc == KVT_STORE_SKIPPED)
        S_COUNT(self, puts_skipped, 1);
    else if (rc == KVT_STORE_OK && self->disk &&
             kvt_disk_stat(self->disk, ns, key, kind, NULL, NULL) == KVT_STORE_OK)
        S_COUNT(self, puts_restored, 1);
    return rc;
}

int kvt_storage_commit(kvt_storage_t *self, kvt_resv_t *resv, kvt_lease_t *lease)
{
    assert(self);
    bool through = self->disk && self->policy == KVT_WRITE_ALWAYS;
    //  The remote write reads the object under the same lease as the disk
    //  writer (taken in the commit's step, so no eviction comes between).
    bool held = through || self->remote;
    kvt_lease_t wl = {0};
    kvt_pool_info_t info;
    int rc = kvt_pool_commit_ex(self->pool, resv, lease, held ? self->disk_holder : 0, &wl, &info);
    if (rc != KVT_STORE_OK)
        return rc;
    S_COUNT(self, puts, 1);
    if (self->remote) {
        int r = wl.id != 0 ? kvt_remote_put(self->remote, info.ns, info.key, info.kind, info.ptr,
                                            info.size)
                           : KVT_STORE_EFULL;
        pthread_mutex_lock(&self->mu);
        self->st.remote_writes++;
        self->st.remote_writes_failed += r != KVT_STORE_OK;
        pthread_mutex_unlock(&self->mu);
    }
    if (through)
        s_write_through(self, &info, wl);
    else if (wl.id != 0)
        kvt_pool_release(self->pool, &wl);
    return rc;
}

int kvt_storage_abort(kvt_storage_t *self, kvt_resv_t *resv)
{
    assert(self);
    return kvt_pool_abort(self->pool, resv);
}

int kvt_storage_resv_renew(kvt_storage_t *self, kvt_resv_t resv)
{
    assert(self);
    return kvt_pool_resv_renew(self->pool, resv);
}

int kvt_storage_put(kvt_storage_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind,
                    const void *src, size_t size)
{
    assert(self && (src || size == 0));
    kvt_resv_t resv = {0};
    void *dst = NULL;
    int rc = kvt_storage_reserve(self, ns, key, kind, size, self->put_holder, &resv, &dst);
    if (rc != KVT_STORE_OK)
        return rc;
    memcpy(dst, src, size);
    return kvt_storage_commit(self, &resv, NULL);
}

// ------------------------------------------------------------- reads --

//  Copies a lower tier's object (`size` bytes of kind `kind`) into dst:
//  KVT_STORE_OK, or why it could not (the reservation is then aborted).
typedef int (*s_fill_fn)(kvt_storage_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind,
                         void *dst, size_t size, void *arg);

//  The one promotion path of every lower tier: a pool reservation for the
//  object, filled by the tier, committed and leased to the caller. A pool
//  hit that appeared meanwhile is acquired instead; another promotion of
//  the same key in flight answers EBUSY.
static int s_promote_into_pool(kvt_storage_t *self, uint64_t ns, kvt_hash_t key,
                               kvt_obj_kind_t kind, kvt_obj_kind_t found, size_t size,
                               kvt_holder_t holder, kvt_lease_t *lease, kvt_obj_view_t *view,
                               kvt_tier_t tier, s_fill_fn fill, void *arg)
{
    kvt_resv_t resv = {0};
    void *dst = NULL;
    int rc = kvt_pool_reserve(self->pool, ns, key, found, size, holder, &resv, &dst);
    if (rc == KVT_STORE_SKIPPED) //  someone stored it meanwhile: a pool hit after all
        return kvt_pool_acquire(self->pool, ns, key, kind, holder, lease, view);
    if (rc == KVT_STORE_DUPLICATE)
        return KVT_STORE_EBUSY; //  another reader is promoting it right now
    if (rc != KVT_STORE_OK)
        return rc;
    rc = fill(self, ns, key, found, dst, size, arg);
    if (rc != KVT_STORE_OK) {
        kvt_pool_abort(self->pool, &resv);
        return rc;
    }
    rc = kvt_pool_commit(self->pool, &resv, lease);
    if (rc == KVT_STORE_EFULL) //  no lease for the caller: the reservation stays, discard it
        kvt_pool_abort(self->pool, &resv);
    if (rc != KVT_STORE_OK) //  ESTALE: reclaimed while reading (too slow); already freed
        return rc;
    *view = (kvt_obj_view_t){.ptr = dst, .size = size, .kind = found, .tier = tier};
    return KVT_STORE_OK;
}

static int s_fill_disk(kvt_storage_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind,
                       void *dst, size_t size, void *arg)
{
    (void)arg;
    size_t got = 0;
    kvt_obj_kind_t got_kind = kind;
    int rc = kvt_disk_read(self->disk, ns, key, kind, dst, size, &got, &got_kind);
    if (rc != KVT_STORE_OK)
        return rc;
    return got == size && got_kind == kind ? KVT_STORE_OK : KVT_STORE_ENOTFOUND;
}

//  A disk hit read into a pool reservation, verified, committed and leased.
//  The file is pinned from the stat to the read: the reservation may evict
//  pool objects, and under ON_EVICT their write-back makes room on the disk,
//  which must not be this file.
static int s_promote(kvt_storage_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind,
                     kvt_holder_t holder, kvt_lease_t *lease, kvt_obj_view_t *view)
{
    size_t size = 0;
    kvt_obj_kind_t found = kind;
    uint64_t pin = 0;
    int rc = kvt_disk_pin(self->disk, ns, key, kind, &size, &found, &pin);
    if (rc != KVT_STORE_OK)
        return rc;
    rc = s_promote_into_pool(self, ns, key, kind, found, size, holder, lease, view, KVT_TIER_DISK,
                             s_fill_disk, NULL);
    kvt_disk_unpin(self->disk, pin);
    return rc;
}

static int s_fill_bytes(kvt_storage_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind,
                        void *dst, size_t size, void *arg)
{
    (void)self, (void)ns, (void)key, (void)kind;
    memcpy(dst, arg, size);
    return KVT_STORE_OK;
}

//  A remote hit, verified by the remote tier, promoted like a disk hit.
static int s_promote_remote(kvt_storage_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind,
                            kvt_holder_t holder, kvt_lease_t *lease, kvt_obj_view_t *view)
{
    void *bytes = NULL;
    size_t size = 0;
    kvt_obj_kind_t found = kind;
    int rc = kvt_remote_get(self->remote, ns, key, kind, &bytes, &size, &found);
    if (rc != KVT_STORE_OK)
        return rc;
    rc = s_promote_into_pool(self, ns, key, kind, found, size, holder, lease, view, KVT_TIER_REMOTE,
                             s_fill_bytes, bytes);
    free(bytes);
    return rc;
}

int kvt_storage_get(kvt_storage_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind,
                    kvt_holder_t holder, kvt_lease_t *lease, kvt_obj_view_t *view)
{
    assert(self && lease && view);
    int rc = kvt_pool_acquire(self->pool, ns, key, kind, holder, lease, view);
    if (rc == KVT_STORE_ENOTFOUND && !self->disk && self->remote) {
        rc = s_promote_remote(self, ns, key, kind, holder, lease, view);
        pthread_mutex_lock(&self->mu);
        self->st.gets++;
        if (rc == KVT_STORE_OK && view->tier == KVT_TIER_REMOTE) {
            self->st.get_hits_remote++;
            self->st.promotions++;
        } else if (rc == KVT_STORE_OK) {
            self->st.get_hits_pool++;
        } else if (rc == KVT_STORE_ENOTFOUND) {
            self->st.get_misses++;
        } else {
            self->st.promotion_failed++;
        }
        pthread_mutex_unlock(&self->mu);
        return rc;
    }
    if (rc == KVT_STORE_OK || rc != KVT_STORE_ENOTFOUND || !self->disk) {
        pthread_mutex_lock(&self->mu);
        self->st.gets++;
        if (rc == KVT_STORE_OK)
            self->st.get_hits_pool++;
        else if (rc == KVT_STORE_ENOTFOUND)
            self->st.get_misses++;
        pthread_mutex_unlock(&self->mu);
        return rc;
    }
    rc = s_promote(self, ns, key, kind, holder, lease, view);
    if (rc == KVT_STORE_ECORRUPT)
        rc = KVT_STORE_ENOTFOUND; //  a corrupt file is a (counted) miss
    if (rc == KVT_STORE_ENOTFOUND && self->remote)
        rc = s_promote_remote(self, ns, key, kind, holder, lease, view);
    pthread_mutex_lock(&self->mu);
    self->st.gets++;
    if (rc == KVT_STORE_OK && view->tier == KVT_TIER_REMOTE) {
        self->st.get_hits_remote++;
        self->st.promotions++;
    } else if (rc == KVT_STORE_OK && view->tier == KVT_TIER_DISK) {
        self->st.get_hits_disk++;
        self->st.promotions++;
    } else if (rc == KVT_STORE_OK) {
        self->st.get_hits_pool++;
    } else if (rc == KVT_STORE_ENOTFOUND) {
        self->st.get_misses++;
    } else {
        self->st.promotion_failed++;
    }
    pthread_mutex_unlock(&self->mu);
    return rc;
}

int kvt_storage_release(kvt_storage_t *self, kvt_lease_t *lease)
{
    assert(self);
    return kvt_pool_release(self->pool, lease);
}

static int s_lookup_local(kvt_storage_t *self, uint64_t ns, const kvt_hash_t *keys, size_t n,
                          kvt_obj_kind_t kind, kvt_holder_t holder, kvt_lease_t *lease,
                          size_t *on_disk);

int kvt_storage_lookup(kvt_storage_t *self, uint64_t ns, const kvt_hash_t *keys, size_t n,
                       kvt_obj_kind_t kind, kvt_holder_t holder, kvt_lease_t *lease,
                       size_t *on_disk)
{
    assert(self && (keys || n == 0));
    int k = s_lookup_local(self, ns, keys, n, kind, holder, lease, on_disk);
    if (k < 0 || !self->remote || (size_t)k >= n)
        return k;
    //  Only the keys after the local prefix, in one pipelined round; they
    //  are not pinned (a get reads and verifies them).
    size_t m = kvt_remote_count(self->remote, ns, keys + k, n - (size_t)k, kind);
    S_COUNT(self, lookup_keys_remote, m);
    size_t total = (size_t)k + m;
    return (int)(total > INT32_MAX ? INT32_MAX : total);
}

static int s_lookup_local(kvt_storage_t *self, uint64_t ns, const kvt_hash_t *keys, size_t n,
                          kvt_obj_kind_t kind, kvt_holder_t holder, kvt_lease_t *lease,
                          size_t *on_disk)
{
    assert(self && (keys || n == 0));
    if (on_disk)
        *on_disk = 0;
    if (!self->disk) {
        int k = kvt_pool_lookup(self->pool, ns, keys, n, kind, holder, lease);
        if (k >= 0) {
            pthread_mutex_lock(&self->mu);
            self->st.lookups++;
            self->st.lookup_keys_pool += (uint64_t)k;
            pthread_mutex_unlock(&self->mu);
        }
        return k;
    }
    if (!kvt_store_kind_ok(kind))
        return KVT_STORE_EINVAL;
    //  Pass 1, no side effects: segments alternating pool / disk.
    size_t start[S_MAX_SEGMENTS], len[S_MAX_SEGMENTS];
    bool in_pool[S_MAX_SEGMENTS];
    int nseg = 0;
    size_t pos = 0;
    while (pos < n && nseg < S_MAX_SEGMENTS) {
        bool pool_turn = nseg == 0 || !in_pool[nseg - 1];
        size_t k;
        if (pool_turn) {
            k = kvt_pool_count(self->pool, ns, keys + pos, n - pos, kind);
        } else {
            //  Pool first per key: a disk run ends where the pool has a key again.
            k = kvt_disk_count(self->disk, ns, keys + pos, n - pos, kind);
            if (k > 0)
                k = kvt_pool_count_missing(self->pool, ns, keys + pos, k, kind);
        }
        if (k == 0 && nseg > 0)
            break;
        if (k > 0) {
            start[nseg] = pos;
            len[nseg] = k;
            in_pool[nseg] = pool_turn;
            nseg++;
            pos += k;
        } else {
            //  Nothing in the pool at the start: let the disk have a turn.
            start[nseg] = pos;
            len[nseg] = 0;
            in_pool[nseg] = true;
            nseg++;
        }
    }
    //  Pass 2: refresh (and pin) deepest segment first; anything evicted
    //  since pass 1 shortens the prefix.
    bool fresh = lease && lease->id == 0; //  a lease this call creates
    size_t total = pos;
    for (int s = nseg; s-- > 0;) {
        if (len[s] == 0)
            continue;
        size_t k;
        if (in_pool[s]) {
            int r = kvt_pool_lookup(self->pool, ns, keys + start[s], len[s], kind, holder, lease);
            if (r < 0) {
                //  A deeper segment may have created and pinned the lease
                //  (the holder was reset or removed since): no pin may
                //  outlive an error. Pins added to a caller's own lease go
                //  with its release.
                if (fresh && lease->id != 0) {
                    kvt_pool_release(self->pool, lease);
                    lease->id = 0;
                }
                return r;
            }
            k = (size_t)r;
        } else {
            k = kvt_disk_lookup(self->disk, ns, keys + start[s], len[s], kind);
        }
        if (k < len[s] && start[s] + k < total)
            total = start[s] + k;
    }
    size_t disk_keys = 0;
    for (int s = 0; s < nseg; s++) {
        if (in_pool[s] || start[s] >= total)
            continue;
        size_t end = start[s] + len[s] < total ? start[s] + len[s] : total;
        disk_keys += end - start[s];
    }
    if (on_disk)
        *on_disk = disk_keys;
    pthread_mutex_lock(&self->mu);
    self->st.lookups++;
    self->st.lookup_keys_pool += total - disk_keys;
    self->st.lookup_keys_disk += disk_keys;
    pthread_mutex_unlock(&self->mu);
    return (int)(total > INT32_MAX ? INT32_MAX : total);
}

kvt_touch_t kvt_storage_touch(kvt_storage_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind)
{
    assert(self);
    kvt_touch_t t = kvt_pool_touch(self->pool, ns, key, kind);
    if (t == KVT_TOUCH_GONE && self->disk)
        t = kvt_disk_touch(self->disk, ns, key, kind);
    bool remote = false;
    if (t == KVT_TOUCH_GONE && self->remote && kvt_remote_exists(self->remote, ns, key, kind)) {
        t = KVT_TOUCH_PRESENT;
        remote = true;
    }
    pthread_mutex_lock(&self->mu);
    self->st.touches_remote += remote;
    if (t == KVT_TOUCH_REFRESHED)
        self->st.touches_refreshed++;
    else if (t == KVT_TOUCH_PRESENT)
        self->st.touches_present++;
    else
        self->st.touches_gone++;
    pthread_mutex_unlock(&self->mu);
    return t;
}

size_t kvt_storage_reclaim(kvt_storage_t *self)
{
    assert(self);
    return kvt_pool_reclaim(self->pool);
}

void kvt_storage_flush(kvt_storage_t *self)
{
    assert(self);
    if (self->disk)
        kvt_disk_flush(self->disk);
}

void kvt_storage_stats(kvt_storage_t *self, kvt_storage_stats_t *stats)
{
    assert(self && stats);
    pthread_mutex_lock(&self->mu);
    *stats = self->st;
    pthread_mutex_unlock(&self->mu);
    kvt_pool_stats(self->pool, &stats->pool);
    if (self->disk)
        kvt_disk_stats(self->disk, &stats->disk);
    else
        memset(&stats->disk, 0, sizeof(stats->disk));
    stats->disk_enabled = self->disk != NULL;
    if (self->remote)
        kvt_remote_stats(self->remote, &stats->remote);
    else
        memset(&stats->remote, 0, sizeof(stats->remote));
    stats->remote_enabled = self->remote != NULL;
}
