/*  kvt_pool_evict.c — the CPU pool's allocation with eviction: find an
    extent for a new object, evicting ready, unpinned objects in LRU order
    (or in the VALUE order of kvt_pool_value.c) but only those whose
    eviction can make the extent (see s_evict_for and docs/store.md §6).
    Called under the pool lock by kvt_pool_reserve. */
#include <assert.h>

#include "kvt_pool_int.h"

//  Evicts a ready, unpinned object; returns the length in units of the
//  free extent its bytes are part of now.
static uint64_t s_evict_one(kvt_pool_t *self, uint32_t i)
{
    kvt_pobj_t *o = &self->objs[i];
    assert(o->state == KVT_POBJ_READY && o->pins == 0);
    if (self->evict_fn)
        self->evict_fn(self->evict_arg, o->ns, o->key, (kvt_obj_kind_t)o->kind, self->base + o->off,
                       o->size);
    self->st.evictions++;
    self->st.evicted_bytes += o->size;
    return kvt_pool_free_obj(self, i);
}

//  Evicts the object eviction chose. VALUE: L rises to its priority (never
//  falls: a priority kept through a pin may be older than L), and a KV
//  chunk takes the ready, unpinned state image of its key with it — the
//  image at the chunk's end cannot be resumed from without the chunk. The
//  chunks below are not linked: the prefix order protects them. Returns a
//  length in units of a free extent that exists now.
static uint64_t s_evict(kvt_pool_t *self, uint32_t i)
{
    kvt_pobj_t *o = &self->objs[i];
    if (!self->val.on)
        return s_evict_one(self, i);
    if (o->prio > self->val.inflation)
        self->val.inflation = o->prio;
    uint64_t ns = o->ns;
    kvt_hash_t key = o->key;
    bool chunk = o->kind == KVT_OBJ_KV;
    uint64_t len = s_evict_one(self, i);
    kvt_keymap_entry_t *e = chunk ? kvt_keymap_find(&self->map, ns, key) : NULL;
    uint32_t v = e ? e->slot[KVT_OBJ_STATE - 1] : 0;
    if (v && self->objs[v - 1].state == KVT_POBJ_READY && self->objs[v - 1].pins == 0) {
        self->st.evicted_orphan_images++;
        uint64_t img = s_evict_one(self, v - 1);
        len = img > len ? img : len;
    }
    return len;
}

//  The oldest ready, unpinned object, or KVT_NIL. A pinned object met at the
//  old end is in use right now: it goes to the young end, as a refresh would,
//  so no later call walks past it again (amortised O(1)). Only walks when
//  an unpinned object exists, so it never rotates the whole LRU.
static uint32_t s_oldest_evictable(kvt_pool_t *self)
{
    if (self->evictable_units == 0)
        return KVT_NIL;
    if (self->val.on)
        return kvt_pool_value_top(self); //  pinned objects are out of the heap
    for (uint64_t n = self->st.objects; n > 0; n--) {
        uint32_t i = self->lru.head;
        if (self->objs[i].pins == 0)
            return i;
        kvt_pool_refresh(self, i);
    }
    return KVT_NIL;
}

//  True if extent e may be part of a run: free, or held by a ready,
//  unpinned object.
static bool s_takeable(kvt_pool_t *self, uint32_t e)
{
    const kvt_extent_t *x = &self->ext.ext[e];
    if (x->free)
        return true;
    if (x->closed)
        return false;
    const kvt_pobj_t *o = &self->objs[x->owner];
    return o->state == KVT_POBJ_READY && o->pins == 0;
}

//  True if the run of free and evictable extents around extent e spans
//  `units` (it stops looking once it does). A shorter run is bounded by
//  unevictable extents, so evicting inside it can never help this
//  allocation: every extent of it is marked and skipped from then on.
static bool s_run_reaches(kvt_pool_t *self, uint32_t e, uint64_t units)
{
    kvt_extent_t *x = self->ext.ext;
    uint64_t total = x[e].len;
    uint32_t lo = e, hi = e;
    //  A run never crosses a region boundary (no extent may straddle one).
    while (total < units && x[lo].prev != KVT_NIL && s_takeable(self, x[lo].prev) &&
           kvt_extents_same_region(&self->ext, x[x[lo].prev].off, x[lo].off)) {
        lo = x[lo].prev;
        total += x[lo].len;
    }
    while (total < units && x[hi].next != KVT_NIL && s_takeable(self, x[hi].next) &&
           kvt_extents_same_region(&self->ext, x[hi].off, x[x[hi].next].off)) {
        hi = x[hi].next;
        total += x[hi].len;
    }
    if (total >= units)
        return true;
    for (uint32_t k = lo;; k = x[k].next) {
        x[k].mark = self->visit;
        if (k == hi)
            break;
    }
    return false;
}

//  True if object i qualifies for this eviction walk: unpinned, outside any
//  run already found too short, and in a run that spans `units`.
static bool s_qualifies(kvt_pool_t *self, uint32_t i, uint64_t units)
{
    const kvt_pobj_t *o = &self->objs[i];
    return o->pins == 0 && self->ext.ext[o->extent].mark != self->visit &&
           s_run_reaches(self, o->extent, units);
}

//  s_evict_for in VALUE order: pops the heap lowest priority first, sets
//  aside what does not qualify and puts it back at the end (same priority,
//  same order). O(log n) per object visited.
static bool s_evict_for_value(kvt_pool_t *self, uint64_t units)
{
    bool evicted = false, done = false;
    for (uint32_t obj = kvt_pool_value_pop(self); obj != KVT_NIL; obj = kvt_pool_value_pop(self)) {
        if (s_qualifies(self, obj, units)) {
            evicted = true;
            if (s_evict(self, obj) >= units) {
                done = true;
                break;
            }
        }
    }
    kvt_pool_value_unstash(self);
    assert(done || !evicted); //  as in LRU order: once one qualifies, its run ends the walk
    (void)evicted;
    return done;
}

//  Evicts ready, unpinned objects oldest first (VALUE: lowest priority
//  first, s_evict_for_value) — skipping those in runs too
//  short to ever hold `units` — until a free extent of `units` exists. The
//  first object that qualifies proves success before anything is evicted:
//  its run only grows as its members go, and every member qualifies, so the
//  walk ends at the latest when that run is free. False, with nothing
//  evicted, when none qualifies. Cost: O(1) per eviction plus the run checks
//  (a few extents each); O(objects) when nothing qualifies.
static bool s_evict_for(kvt_pool_t *self, uint64_t units)
{
    if (self->ext.units - self->ext.used_units + self->evictable_units < units)
        return false; //  O(1): not even every evictable byte would do
    uint32_t i = s_oldest_evictable(self);
    if (++self->visit == 0) { //  the stamp wrapped: forget every old mark
        for (uint32_t e = 0; e < self->ext.nmax; e++)
            self->ext.ext[e].mark = 0;
        self->visit = 1;
    }
    if (self->val.on)
        return s_evict_for_value(self, units);
    bool evicted = false;
    while (i != KVT_NIL) {
        uint32_t next = self->objs[i].link.next;
        if (s_qualifies(self, i, units)) {
            evicted = true;
            if (s_evict(self, i) >= units)
                return true;
        }
        i = next;
    }
    assert(!evicted); //  see above: once one qualifies, its run ends the walk
    (void)evicted;
    return false;
}

int kvt_pool_make_room(kvt_pool_t *self, uint64_t units, uint64_t now, uint32_t *extent)
{
    bool reclaimed = false;
    while (true) {
        if (self->obj_free == KVT_NIL && self->evictable_units == 0) {
            if (!reclaimed) {
                reclaimed = true;
                kvt_pool_reclaim_locked(self, now);
                continue;
            }
            self->st.alloc_failed++;
            self->st.alloc_failed_table++;
            return KVT_STORE_EFULL;
        }
        uint32_t e = kvt_extents_alloc(&self->ext, units);
        if (e == KVT_NIL && s_evict_for(self, units)) {
            e = kvt_extents_alloc(&self->ext, units);
            assert(e != KVT_NIL); //  a free extent of `units` exists now
        }
        if (e != KVT_NIL) {
            if (self->obj_free == KVT_NIL) //  a slot: the oldest evictable object's
                s_evict(self, s_oldest_evictable(self));
            *extent = e;
            return KVT_STORE_OK;
        }
        if (!reclaimed) {
            reclaimed = true;
            kvt_pool_reclaim_locked(self, now);
            continue;
        }
        self->st.alloc_failed++;
        self->st.alloc_failed_pinned++;
        return KVT_STORE_ENOSPACE;
    }
}
