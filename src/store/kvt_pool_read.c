/*  kvt_pool_read.c — the CPU pool's reads: acquire / release under a lease,
    lookup of a prefix (refreshed deepest first, optionally pinned), pure
    counts, touch, contains. */
#include <assert.h>

#include "kvt_pool_int.h"

#define S_LOOKUP_CACHE 1024 //  matched objects remembered between a lookup's two passes

int kvt_pool_acquire(kvt_pool_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind,
                     kvt_holder_t holder, kvt_lease_t *lease, kvt_obj_view_t *view)
{
    assert(self && lease && view);
    if (!kvt_store_kind_ok(kind))
        return KVT_STORE_EINVAL;
    int rc = KVT_STORE_OK;
    kvt_pool_lock(self);
    if (!kvt_pool_holder(self, holder)) {
        rc = KVT_STORE_EHOLDER;
        goto cleanup;
    }
    uint32_t i = kvt_pool_find(self, ns, key, kind, KVT_POBJ_READY);
    if (i == KVT_NIL) {
        self->st.misses[kind - 1]++;
        rc = KVT_STORE_ENOTFOUND;
        goto cleanup;
    }
    if (self->lease_free == KVT_NIL || self->pins_avail == 0) {
        rc = KVT_STORE_EFULL;
        goto cleanup;
    }
    uint32_t l = kvt_pool_lease_new(self, holder, kvt_pool_now(self));
    kvt_pool_pin(self, l, i);
    kvt_pool_refresh(self, i);
    self->st.hits[kind - 1]++;
    kvt_pobj_t *o = &self->objs[i];
    lease->id = kvt_store_handle(l, self->leases[l].gen);
    *view = (kvt_obj_view_t){.ptr = self->base + o->off,
                             .size = o->size,
                             .kind = (kvt_obj_kind_t)o->kind,
                             .tier = KVT_TIER_POOL};
cleanup:
    kvt_pool_unlock(self);
    return rc;
}

int kvt_pool_release(kvt_pool_t *self, kvt_lease_t *lease)
{
    assert(self);
    int rc = KVT_STORE_OK;
    kvt_pool_lock(self);
    uint32_t l = kvt_pool_lease_slot(self, lease ? lease->id : 0);
    if (l == KVT_NIL) {
        rc = KVT_STORE_ESTALE;
        goto cleanup;
    }
    kvt_pool_lease_drop(self, l);
    lease->id = 0;
cleanup:
    kvt_pool_unlock(self);
    return rc;
}

int kvt_pool_lookup(kvt_pool_t *self, uint64_t ns, const kvt_hash_t *keys, size_t n,
                    kvt_obj_kind_t kind, kvt_holder_t holder, kvt_lease_t *lease)
{
    assert(self && (keys || n == 0));
    if (!kvt_store_kind_ok(kind))
        return KVT_STORE_EINVAL;
    if (n > INT32_MAX)
        n = INT32_MAX;
    uint32_t cache[S_LOOKUP_CACHE];
    int rc = 0;
    uint32_t l = KVT_NIL;
    kvt_pool_lock(self);
    if (lease) {
        if (!kvt_pool_holder(self, holder)) {
            rc = KVT_STORE_EHOLDER;
            goto cleanup;
        }
        if (lease->id != 0) {
            l = kvt_pool_lease_slot(self, lease->id);
            if (l == KVT_NIL) {
                rc = KVT_STORE_ESTALE;
                goto cleanup;
            }
            if (self->leases[l].holder != holder) {
                rc = KVT_STORE_EINVAL;
                goto cleanup;
            }
            if (!kvt_pool_lease_live(self, l)) {
                //  An orphan (its holder was reset since): never extended.
                self->st.release_errors++;
                rc = KVT_STORE_ESTALE;
                goto cleanup;
            }
        }
    }
    size_t k = 0;
    for (; k < n; k++) {
        uint32_t i = kvt_pool_find(self, ns, keys[k], kind, KVT_POBJ_READY);
        if (i == KVT_NIL)
            break;
        if (k < S_LOOKUP_CACHE)
            cache[k] = i;
    }
    if (lease && k > 0) {
        if (k > self->pins_avail) {
            k = self->pins_avail;
            self->st.pin_table_full++;
        }
        if (l == KVT_NIL && k > 0) {
            l = kvt_pool_lease_new(self, holder, kvt_pool_now(self));
            if (l == KVT_NIL) {
                k = 0;
                self->st.pin_table_full++;
            } else {
                lease->id = kvt_store_handle(l, self->leases[l].gen);
            }
        }
    }
    //  Deepest first, so keys[0] ends youngest: eviction takes suffixes
    //  before the prefixes other requests share.
    for (size_t j = k; j-- > 0;) {
        uint32_t i =
            j < S_LOOKUP_CACHE ? cache[j] : kvt_pool_find(self, ns, keys[j], kind, KVT_POBJ_READY);
        kvt_pool_refresh(self, i);
        if (lease)
            kvt_pool_pin(self, l, i);
    }
    self->st.lookups++;
    self->st.lookup_keys += k;
    self->st.hits[kind - 1] += k;
    if (k < n)
        self->st.misses[kind - 1]++;
    rc = (int)k;
cleanup:
    kvt_pool_unlock(self);
    return rc;
}

size_t kvt_pool_count(kvt_pool_t *self, uint64_t ns, const kvt_hash_t *keys, size_t n,
                      kvt_obj_kind_t kind)
{
    assert(self && (keys || n == 0));
    if (!kvt_store_kind_ok(kind))
        return 0;
    kvt_pool_lock(self);
    size_t k = 0;
    while (k < n && kvt_pool_find(self, ns, keys[k], kind, KVT_POBJ_READY) != KVT_NIL)
        k++;
    kvt_pool_unlock(self);
    return k;
}

size_t kvt_pool_count_missing(kvt_pool_t *self, uint64_t ns, const kvt_hash_t *keys, size_t n,
                              kvt_obj_kind_t kind)
{
    kvt_pool_lock(self);
    size_t k = 0;
    while (k < n && kvt_pool_find(self, ns, keys[k], kind, KVT_POBJ_READY) == KVT_NIL)
        k++;
    kvt_pool_unlock(self);
    return k;
}

kvt_touch_t kvt_pool_touch(kvt_pool_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind)
{
    assert(self);
    if (!kvt_store_kind_ok(kind))
        return KVT_TOUCH_GONE;
    kvt_touch_t t = KVT_TOUCH_GONE;
    kvt_pool_lock(self);
    uint32_t i = kvt_pool_find(self, ns, key, kind, KVT_POBJ_READY);
    if (i != KVT_NIL) {
        kvt_pool_renew(self, i); //  kept alive, not used: no hit
        self->st.touches_refreshed++;
        t = KVT_TOUCH_REFRESHED;
    } else if (kvt_pool_find(self, ns, key, kind, KVT_POBJ_WRITING) != KVT_NIL) {
        t = KVT_TOUCH_PRESENT;
    } else {
        self->st.touches_gone++;
    }
    kvt_pool_unlock(self);
    return t;
}

bool kvt_pool_contains(kvt_pool_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind)
{
    assert(self);
    if (!kvt_store_kind_ok(kind))
        return false;
    kvt_pool_lock(self);
    bool found = kvt_pool_find(self, ns, key, kind, KVT_POBJ_READY) != KVT_NIL;
    kvt_pool_unlock(self);
    return found;
}
