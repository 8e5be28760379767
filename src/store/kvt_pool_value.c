/*  kvt_pool_value.c — the CPU pool's VALUE eviction order: Greedy-Dual-
    Size-Frequency (Cherkasova 1998) over the ready, unpinned objects. Each
    has a priority H = L + (1 + hits) × cost / units, cost = w(kind) × units
    (what losing it costs: recomputing a chunk's tokens grows with its
    bytes); L is the pool's inflation value, raised to the H of each object
    eviction takes (kvt_pool_evict.c), so what was hit often long ago ages
    out. A binary min-heap on (H, seq) indexed by object slot makes every
    event O(log n): ready, refresh, pin, unpin, free, and each step of an
    eviction walk. Pinned objects are out of the heap; they return at unpin
    with the priority of their last refresh. docs/store.md §4. */
#include <assert.h>
#include <math.h>
#include <stdlib.h>

#include "base/kvt_heap.h"
#include "kvt_pool_int.h"

#define S_W_KV    1.0 //  default weight per unit of a KV chunk: the baseline
#define S_W_STATE 4.0 //  default weight per unit of a state image (docs/store.md §4)

//  (H, seq) order: lower priority first, the older refresh first on a tie.
static bool s_less(const void *a, const void *b, void *ctx)
{
    const kvt_pool_t *self = ctx;
    const kvt_pobj_t *x = &self->objs[*(const uint32_t *)a];
    const kvt_pobj_t *y = &self->objs[*(const uint32_t *)b];
    if (x->prio != y->prio)
        return x->prio < y->prio;
    return x->seq < y->seq;
}

static void s_moved(void *elem, uint32_t pos, void *ctx)
{
    kvt_pool_t *self = ctx;
    self->objs[*(uint32_t *)elem].hpos = pos;
}

static const kvt_heap_ops_t s_ops = {.size = sizeof(uint32_t), .less = s_less, .moved = s_moved};

//  A weight setting: 0 is the default, else finite and > 0.
static bool s_weight(const char *name, double in, double def, double *out, char *err, size_t errlen)
{
    if (in == 0) {
        *out = def;
        return true;
    }
    if (!isfinite(in) || in < 0) {
        kvt_store_seterr(err, errlen, "pool.%s=%g: must be a finite weight > 0 (0: default)", name,
                         in);
        return false;
    }
    *out = in;
    return true;
}

int kvt_pool_value_check(kvt_pool_config_t *cfg, char *err, size_t errlen)
{
    if (cfg->evict != KVT_POOL_EVICT_LRU && cfg->evict != KVT_POOL_EVICT_VALUE) {
        kvt_store_seterr(err, errlen, "pool.evict=%d: must be 0 (lru) or 1 (value)",
                         (int)cfg->evict);
        return -1;
    }
    if (!s_weight("value_w_kv", cfg->value_w_kv, S_W_KV, &cfg->value_w_kv, err, errlen) ||
        !s_weight("value_w_state", cfg->value_w_state, S_W_STATE, &cfg->value_w_state, err, errlen))
        return -1;
    return 0;
}

int kvt_pool_value_init(kvt_pool_t *self, const kvt_pool_config_t *cfg, char *err, size_t errlen)
{
    assert(cfg->value_w_kv > 0 && cfg->value_w_state > 0); //  kvt_pool_value_check ran
    self->val.w_kind[KVT_OBJ_KV - 1] = cfg->value_w_kv;
    self->val.w_kind[KVT_OBJ_STATE - 1] = cfg->value_w_state;
    self->val.w_kind[KVT_OBJ_KV_STATE - 1] =
        cfg->value_w_state; //  its image is what makes its prefix resumable
    self->val.on = cfg->evict == KVT_POOL_EVICT_VALUE;
    if (!self->val.on)
        return 0;
    self->val.heap = calloc(self->nobjs, sizeof(uint32_t));
    self->val.stash = calloc(self->nobjs, sizeof(uint32_t));
    if (!self->val.heap || !self->val.stash) {
        kvt_store_seterr(err, errlen, "pool.max_objects=%u: cannot allocate the value heap",
                         self->nobjs);
        return -1;
    }
    return 0;
}

void kvt_pool_value_fini(kvt_pool_t *self)
{
    free(self->val.heap);
    free(self->val.stash);
    self->val.heap = self->val.stash = NULL;
}

//  H from the current L and the object's hits; a new sequence number.
static void s_prioritise(kvt_pool_t *self, kvt_pobj_t *o)
{
    double units = (double)o->units;
    double cost = self->val.w_kind[o->kind - 1] * units;
    o->prio = self->val.inflation + (1.0 + (double)o->hits) * cost / units;
    o->seq = ++self->val.seq;
}

static bool s_in_heap(const kvt_pool_t *self, const kvt_pobj_t *o)
{
    return o->hpos < self->val.nheap;
}

void kvt_pool_value_ready(kvt_pool_t *self, uint32_t i)
{
    if (!self->val.on)
        return;
    kvt_pobj_t *o = &self->objs[i];
    assert(o->state == KVT_POBJ_READY && o->pins == 0);
    o->hits = 0;
    s_prioritise(self, o);
    kvt_heap_push(self->val.heap, &self->val.nheap, &s_ops, self, &i);
}

//  Priced again (after a hit or a touch), moved in the heap if it is there.
static void s_reprice(kvt_pool_t *self, uint32_t i)
{
    kvt_pobj_t *o = &self->objs[i];
    s_prioritise(self, o);
    if (s_in_heap(self, o))
        kvt_heap_fix(self->val.heap, self->val.nheap, &s_ops, self, o->hpos);
}

void kvt_pool_value_hit(kvt_pool_t *self, uint32_t i)
{
    if (!self->val.on)
        return;
    kvt_pobj_t *o = &self->objs[i];
    if (o->hits < UINT32_MAX)
        o->hits++;
    s_reprice(self, i);
}

void kvt_pool_value_renew(kvt_pool_t *self, uint32_t i)
{
    if (!self->val.on)
        return;
    s_reprice(self, i); //  recency only: the hits stay
}

void kvt_pool_value_pinned(kvt_pool_t *self, uint32_t i)
{
    if (!self->val.on)
        return;
    kvt_pobj_t *o = &self->objs[i];
    assert(!s_in_heap(self, o) || self->val.heap[o->hpos] == i);
    if (s_in_heap(self, o))
        kvt_heap_remove(self->val.heap, &self->val.nheap, &s_ops, self, o->hpos, NULL);
    o->hpos = KVT_NIL;
}

void kvt_pool_value_unpinned(kvt_pool_t *self, uint32_t i)
{
    if (!self->val.on)
        return;
    assert(!s_in_heap(self, &self->objs[i]));
    kvt_heap_push(self->val.heap, &self->val.nheap, &s_ops, self, &i);
}

void kvt_pool_value_gone(kvt_pool_t *self, uint32_t i)
{
    kvt_pool_value_pinned(self, i); //  out of the heap (or of a walk's stash: not put back)
}

uint32_t kvt_pool_value_top(kvt_pool_t *self)
{
    return self->val.nheap > 0 ? self->val.heap[0] : KVT_NIL;
}

uint32_t kvt_pool_value_pop(kvt_pool_t *self)
{
    if (self->val.nheap == 0)
        return KVT_NIL;
    uint32_t i = self->val.heap[0];
    kvt_heap_remove(self->val.heap, &self->val.nheap, &s_ops, self, 0, NULL);
    self->objs[i].hpos = KVT_POOL_STASHED;
    self->val.stash[self->val.nstash++] = i;
    return i;
}

void kvt_pool_value_unstash(kvt_pool_t *self)
{
    for (uint32_t k = 0; k < self->val.nstash; k++) {
        uint32_t i = self->val.stash[k];
        if (self->objs[i].hpos == KVT_POOL_STASHED) //  else evicted meanwhile
            kvt_heap_push(self->val.heap, &self->val.nheap, &s_ops, self, &i);
    }
    self->val.nstash = 0;
}
