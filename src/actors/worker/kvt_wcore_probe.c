/*  kvt_wcore_probe — the worker core's touches and lookups (see
    kvt_wcore.h): answers from the tier, decided at once into the outbox,
    and the pinned lookups' leases with their three release paths. */
#include <stdlib.h>
#include <string.h>

#include "actors/common/kvt_detail.h"
#include "kvt_wcore_int.h"

void kvt_wcore_touch(kvt_wcore_t *self, const kvt_touch_msg_t *t, uint64_t now)
{
    kvt_opid_t op = {t->round, KVT_TOUCH_GEN};
    if (kvt_wcore_reserve_(self, 2, op) != 0)
        return;
    if (!kvt_wcore_first_time_(self, KVT_CHAN_TOUCH, op, 0, t->hash))
        return;
    kvt_touch_t ans = KVT_TOUCH_GONE;
    if (self->c.storage && t->nkeys == 0) {
        ans = kvt_storage_touch(self->c.storage, self->c.ns, t->hash, KVT_OBJ_STATE);
    } else if (self->c.storage) {
        //  Every key is touched (deepest first, so the prefix ends
        //  youngest); the answer is the worst of them.
        ans = KVT_TOUCH_REFRESHED;
        for (uint32_t i = t->nkeys; i-- > 0;) {
            kvt_touch_t a = kvt_storage_touch(self->c.storage, self->c.ns, t->keys[i], KVT_OBJ_KV);
            if (a < ans)
                ans = a;
        }
    }
    self->st.touches++;
    if (ans == KVT_TOUCH_REFRESHED)
        self->st.touches_refreshed++;
    else if (ans == KVT_TOUCH_PRESENT)
        self->st.touches_present++;
    else
        self->st.touches_gone++;
    if (ans == KVT_TOUCH_PRESENT && !self->present_logged) {
        self->present_logged = true;
        kvt_wcore_log_(self, 1,
                       "a touch found its object only on a lower tier: present, not refreshed "
                       "(counted in worker.touches_present; logged once)");
    }
    uint32_t miss = ans == KVT_TOUCH_GONE ? KVT_DETAIL_MISS : KVT_DETAIL_SKIPPED;
    kvt_completion_t *c = kvt_wcore_out_(self, KVT_CHAN_TOUCH, op, 0, t->hash,
                                         ans != KVT_TOUCH_GONE, KVT_DETAIL_MISS, 0);
    c->touch = (uint8_t)ans;
    c = kvt_wcore_out_(self, KVT_CHAN_TOUCH_REFRESH, op, 0, t->hash, ans == KVT_TOUCH_REFRESHED,
                       miss, 0);
    c->touch = (uint8_t)ans;
}

//  Fills the image bitmap of the first `held` keys: bit i when chunk i is
//  stored with the image of the checkpoint at its end (pure counts, no
//  refresh: the lookup already refreshed them).
static void s_images(kvt_wcore_t *self, const kvt_hash_t *keys, uint32_t held, uint8_t *bits)
{
    kvt_pool_t *pool = kvt_storage_pool(self->c.storage);
    kvt_disk_t *disk = kvt_storage_disk(self->c.storage);
    for (uint32_t i = 0; i < held; i++) {
        bool img = kvt_pool_count(pool, self->c.ns, &keys[i], 1, KVT_OBJ_KV_STATE) == 1 ||
                   (disk && kvt_disk_count(disk, self->c.ns, &keys[i], 1, KVT_OBJ_KV_STATE) == 1);
        if (img)
            bits[i / 8] |= (uint8_t)(1u << (i % 8));
    }
}

void kvt_wcore_lookup(kvt_wcore_t *self, const kvt_lookup_t *l, uint64_t now)
{
    kvt_hash_t zero = {0, 0};
    //  A lookup that asks rank 0 only is not this rank's to answer: no
    //  report (the aggregator settles on rank 0's), no pin (no load would
    //  release one here: a load naming it finds none, lookup_rel_none).
    if (l->rank0_only && self->c.rank != 0) {
        self->st.lookups_not_asked++;
        return;
    }
    if (kvt_wcore_reserve_(self, 1, l->op) != 0)
        return;
    if (self->nimgs == self->imgcap) {
        uint32_t cap = self->imgcap ? self->imgcap * 2 : 8;
        uint8_t **imgs = realloc(self->imgs, (size_t)cap * sizeof *imgs);
        if (!imgs) {
            self->st.unreported++;
            kvt_wcore_log_(self, 0, "out of memory: lookup %llu/%u dropped unreported",
                           (unsigned long long)l->op.req, l->op.gen);
            return;
        }
        self->imgs = imgs;
        self->imgcap = cap;
    }
    if (!kvt_wcore_first_time_(self, KVT_CHAN_LOOKUP, l->op, 0, zero))
        return;
    uint32_t held = 0, detail = KVT_DETAIL_OK;
    uint8_t *bits = NULL;
    if (self->c.storage && l->nkeys > 0) {
        kvt_lease_t lease = {0};
        int k = kvt_storage_lookup(self->c.storage, self->c.ns, l->keys, l->nkeys, KVT_OBJ_KV,
                                   self->c.holder, l->pin ? &lease : NULL, NULL);
        if (k < 0) {
            detail = kvt_detail_of_store(k); //  a lease it made was released
        } else {
            held = (uint32_t)k;
            bits = calloc((held + 7) / 8 + 1, 1);
            if (bits)
                s_images(self, l->keys, held, bits);
            else
                detail = KVT_DETAIL_NO_SPACE;
        }
        if (lease.id != 0 && detail == KVT_DETAIL_OK) {
            uint64_t ttl = l->ttl_ms ? (uint64_t)l->ttl_ms * 1000000ull : self->c.lookup_ttl_ns;
            if (kvt_wlease_count(self->lookups) == 0)
                self->lookups_renewed_at = now; //  the renewal clock starts with the first
            if (kvt_wlease_put(self->lookups, l->op, lease, now + ttl) == 0)
                self->st.lookup_pins++;
            else
                detail = KVT_DETAIL_NO_SPACE;
        }
        if (lease.id != 0 && detail != KVT_DETAIL_OK)
            kvt_storage_release(self->c.storage, &lease);
    }
    self->st.lookups++;
    bool ok = detail == KVT_DETAIL_OK;
    if (!ok)
        self->st.lookups_failed++;
    kvt_completion_t *c = kvt_wcore_out_(self, KVT_CHAN_LOOKUP, l->op, 0, zero, ok, detail, 0);
    c->held = ok ? held : 0;
    c->rank0_only = l->rank0_only;
    if (ok && bits) {
        uint32_t n = (held + 7) / 8;
        while (n > 0 && bits[n - 1] == 0)
            n--;
        c->images = n ? bits : NULL;
        c->nimages = n;
    }
    if (bits)
        self->imgs[self->nimgs++] = bits;
}

//  Releases the pinned lease of lookup `op` if it still holds one, counting
//  the release on `path`; a release that finds none is counted apart.
static void s_lookup_release(kvt_wcore_t *self, kvt_opid_t op, uint64_t *path)
{
    kvt_lease_t lease;
    if (!kvt_wlease_take(self->lookups, op, &lease)) {
        self->st.lookup_rel_none++;
        return;
    }
    (*path)++;
    if (kvt_storage_release(self->c.storage, &lease) != KVT_STORE_OK)
        self->st.lookup_rel_stale++;
}

void kvt_wcore_lookup_release(kvt_wcore_t *self, kvt_opid_t op)
{
    s_lookup_release(self, op, &self->st.lookup_rel_msg);
}

//  Releases every lookup lease past its TTL and keeps the others' pool
//  TTL running (renewed every renew_ns).
void kvt_wcore_lookup_poll_(kvt_wcore_t *self, uint64_t now)
{
    kvt_opid_t op;
    kvt_lease_t lease;
    while (kvt_wlease_take_due(self->lookups, now, &op, &lease)) {
        self->st.lookup_rel_ttl++;
        if (kvt_storage_release(self->c.storage, &lease) != KVT_STORE_OK)
            self->st.lookup_rel_stale++;
    }
    uint32_t n = kvt_wlease_count(self->lookups);
    if (n > 0 && now - self->lookups_renewed_at >= self->c.renew_ns) {
        self->lookups_renewed_at = now;
        for (uint32_t i = 0; i < n; i++)
            kvt_pool_lease_renew(kvt_storage_pool(self->c.storage),
                                 kvt_wlease_at(self->lookups, i));
    }
}

void kvt_wcore_lookup_used_(kvt_wcore_t *self, kvt_opid_t op)
{
    s_lookup_release(self, op, &self->st.lookup_rel_load);
}

uint64_t kvt_wcore_lookup_wake_(const kvt_wcore_t *self, uint64_t at)
{
    if (kvt_wlease_count(self->lookups) == 0)
        return at;
    uint64_t ttl = kvt_wlease_next_deadline(self->lookups);
    uint64_t renew = self->lookups_renewed_at + self->c.renew_ns;
    if (ttl < at)
        at = ttl;
    if (renew < at)
        at = renew;
    return at;
}

void kvt_wcore_lookup_stop_(kvt_wcore_t *self)
{
    kvt_opid_t op;
    kvt_lease_t lease;
    while (kvt_wlease_take_any(self->lookups, &op, &lease)) {
        self->st.lookup_rel_stop++;
        if (kvt_storage_release(self->c.storage, &lease) != KVT_STORE_OK)
            self->st.lookup_rel_stale++;
    }
}
