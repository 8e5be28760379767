/*  kvt_pool_lease.c — the CPU pool's holders, leases, pins and reclaim.

    A lease is a slot in a preallocated table with a list of pin nodes (one
    per pinned object). Its id carries the slot's generation, which is
    bumped whenever the slot is freed, so a second release or a release after
    a reclaim is recognised and refused. Outstanding leases are kept in a
    list ordered by start time and reservations in one ordered by reserve
    time, so a reclaim pass only looks at what has expired. */
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "kvt_pool_int.h"

kvt_phold_t *kvt_pool_holder(kvt_pool_t *self, kvt_holder_t id)
{
    if (id == 0 || id > self->nholders)
        return NULL;
    kvt_phold_t *h = &self->holders[id - 1];
    return h->state == KVT_PHOLD_LIVE ? h : NULL;
}

int kvt_pool_holder_add(kvt_pool_t *self, const char *name, kvt_holder_t *id)
{
    assert(self && id);
    int rc = KVT_STORE_EFULL;
    kvt_pool_lock(self);
    //  Prefer a never-used slot, so a removed holder's name stays in logs
    //  about its orphans for as long as possible.
    uint32_t pick = KVT_NIL;
    for (uint32_t i = 0; i < self->nholders; i++) {
        kvt_phold_t *h = &self->holders[i];
        if (h->state != KVT_PHOLD_FREE)
            continue;
        if (h->epoch == 0) {
            pick = i;
            break;
        }
        if (pick == KVT_NIL)
            pick = i;
    }
    if (pick != KVT_NIL) {
        kvt_phold_t *h = &self->holders[pick];
        snprintf(h->name, sizeof(h->name), "%s", name ? name : "?");
        h->state = KVT_PHOLD_LIVE;
        h->orphan_logged = 0;
        h->expired_logged = 0;
        *id = pick + 1;
        rc = KVT_STORE_OK;
    }
    kvt_pool_unlock(self);
    return rc;
}

int kvt_pool_holder_reset(kvt_pool_t *self, kvt_holder_t holder)
{
    assert(self);
    int rc = KVT_STORE_OK;
    kvt_pool_lock(self);
    kvt_phold_t *h = kvt_pool_holder(self, holder);
    if (h) {
        h->epoch++;
        kvt_pool_drain_holder(self, holder, kvt_pool_now(self));
    } else {
        rc = KVT_STORE_EHOLDER;
    }
    kvt_pool_unlock(self);
    return rc;
}

int kvt_pool_holder_remove(kvt_pool_t *self, kvt_holder_t holder)
{
    assert(self);
    int rc = KVT_STORE_OK;
    kvt_pool_lock(self);
    kvt_phold_t *h = kvt_pool_holder(self, holder);
    if (h && holder != self->put_holder) {
        h->epoch++;
        h->state = KVT_PHOLD_FREE;
        kvt_pool_drain_holder(self, holder, kvt_pool_now(self));
    } else {
        rc = KVT_STORE_EHOLDER;
    }
    kvt_pool_unlock(self);
    return rc;
}

uint32_t kvt_pool_lease_new(kvt_pool_t *self, kvt_holder_t holder, uint64_t now)
{
    uint32_t l = self->lease_free;
    if (l == KVT_NIL)
        return KVT_NIL;
    kvt_plea_t *e = &self->leases[l];
    self->lease_free = e->link.next;
    e->used = 1;
    e->holder = holder;
    e->epoch = self->holders[holder - 1].epoch;
    e->t_start = now;
    e->first_pin = KVT_NIL;
    e->npins = 0;
    kvt_ilist_append(&self->active, KVT_POOL_LEASE_LINKS(self), l);
    self->st.leases++;
    self->st.leases_active++;
    return l;
}

void kvt_pool_pin(kvt_pool_t *self, uint32_t l, uint32_t obj)
{
    assert(self->pin_free != KVT_NIL);
    uint32_t p = self->pin_free;
    self->pin_free = self->pins[p].next;
    self->pins_avail--;
    self->pins[p].obj = obj;
    self->pins[p].next = self->leases[l].first_pin;
    self->leases[l].first_pin = p;
    self->leases[l].npins++;
    kvt_pobj_t *o = &self->objs[obj];
    if (o->pins++ == 0) {
        kvt_pool_value_pinned(self, obj);
        self->evictable_units -= o->units;
        self->st.pinned_bytes += o->size;
    }
}

void kvt_pool_lease_drop(kvt_pool_t *self, uint32_t l)
{
    kvt_plea_t *e = &self->leases[l];
    uint32_t p = e->first_pin;
    while (p != KVT_NIL) {
        uint32_t next = self->pins[p].next;
        kvt_pobj_t *o = &self->objs[self->pins[p].obj];
        assert(o->pins > 0 && o->state == KVT_POBJ_READY);
        if (--o->pins == 0) {
            kvt_pool_value_unpinned(self, self->pins[p].obj);
            self->evictable_units += o->units;
            self->st.pinned_bytes -= o->size;
        }
        self->pins[p].next = self->pin_free;
        self->pin_free = p;
        self->pins_avail++;
        p = next;
    }
    kvt_ilist_unlink(&self->active, KVT_POOL_LEASE_LINKS(self), l);
    e->used = 0;
    e->gen++;
    e->link.next = self->lease_free;
    self->lease_free = l;
    self->st.leases_active--;
}

uint32_t kvt_pool_lease_slot(kvt_pool_t *self, uint64_t id)
{
    uint32_t l, gen;
    if (kvt_store_unhandle(id, self->nleases, &l, &gen) && self->leases[l].used &&
        self->leases[l].gen == gen)
        return l;
    self->st.release_errors++;
    return KVT_NIL;
}

bool kvt_pool_lease_live(kvt_pool_t *self, uint32_t l)
{
    const kvt_plea_t *e = &self->leases[l];
    const kvt_phold_t *h = kvt_pool_holder(self, e->holder);
    return h && h->epoch == e->epoch;
}

int kvt_pool_lease_renew(kvt_pool_t *self, kvt_lease_t lease)
{
    assert(self);
    int rc = KVT_STORE_OK;
    kvt_pool_lock(self);
    uint32_t l = kvt_pool_lease_slot(self, lease.id);
    if (l == KVT_NIL) {
        rc = KVT_STORE_ESTALE;
    } else if (!kvt_pool_lease_live(self, l)) {
        self->st.release_errors++; //  an orphan: released at its TTL, never kept alive
        rc = KVT_STORE_ESTALE;
    } else {
        self->leases[l].t_start = kvt_pool_now(self);
        kvt_ilist_unlink(&self->active, KVT_POOL_LEASE_LINKS(self), l);
        kvt_ilist_append(&self->active, KVT_POOL_LEASE_LINKS(self), l);
    }
    kvt_pool_unlock(self);
    return rc;
}

//  Counts one reclaimed handle of (holder, epoch) and logs the first one of
//  each kind per holder. Returns whether it was an orphan.
static bool s_note(kvt_pool_t *self, uint32_t holder, uint32_t epoch, const char *what)
{
    kvt_phold_t *h = &self->holders[holder - 1];
    bool orphan = h->state != KVT_PHOLD_LIVE || h->epoch != epoch;
    unsigned long long ttl_ms = (unsigned long long)(self->ttl_ns / 1000000u);
    if (orphan) {
        self->st.reclaimed_orphaned++;
        if (h->orphan_logged != h->epoch + 1) {
            h->orphan_logged = h->epoch + 1;
            kvt_pool_logq(self, 1,
                          "reclaimed a %s of holder '%s' after its %s and the %llu ms ttl; "
                          "more are counted (reclaimed_orphaned), not logged",
                          what, h->name, h->state == KVT_PHOLD_LIVE ? "reset" : "removal", ttl_ms);
        }
    } else {
        self->st.reclaimed_expired++;
        if (!h->expired_logged) {
            h->expired_logged = 1;
            kvt_pool_logq(self, 1,
                          "reclaimed a %s of live holder '%s' held past the %llu ms ttl; "
                          "more are counted (reclaimed_expired), not logged",
                          what, h->name, ttl_ms);
        }
    }
    return orphan;
}

size_t kvt_pool_reclaim_locked(kvt_pool_t *self, uint64_t now)
{
    size_t n = 0;
    uint32_t l;
    while ((l = self->active.head) != KVT_NIL && now - self->leases[l].t_start >= self->ttl_ns &&
           now >= self->leases[l].t_start) {
        s_note(self, self->leases[l].holder, self->leases[l].epoch, "lease");
        kvt_pool_lease_drop(self, l);
        n++;
    }
    uint32_t i;
    while ((i = self->writing.head) != KVT_NIL && now >= self->objs[i].t_start &&
           now - self->objs[i].t_start >= self->ttl_ns) {
        kvt_pobj_t *o = &self->objs[i];
        if (o->state == KVT_POBJ_QDRAIN) {
            //  Quarantined earlier (counted then); its holder was reset or
            //  removed a TTL ago, so no copy of that lane is still running.
            kvt_pool_free_obj(self, i);
            continue;
        }
        if (s_note(self, o->holder, o->epoch, "write reservation")) {
            //  An orphan: freed at its TTL, as leases are (the lane is gone).
            kvt_pool_free_obj(self, i);
        } else {
            //  A live holder may still be copying into it: unindex it (its
            //  commit answers ESTALE) but keep the bytes until it commits,
            //  aborts, or is reset / removed.
            kvt_pool_quarantine(self, i);
            self->st.reclaimed_quarantined++;
        }
        n++;
    }
    return n;
}

size_t kvt_pool_reclaim(kvt_pool_t *self)
{
    assert(self);
    kvt_pool_lock(self);
    size_t n = kvt_pool_reclaim_locked(self, kvt_pool_now(self));
    kvt_pool_unlock(self);
    return n;
}
