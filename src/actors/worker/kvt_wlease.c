/*  kvt_wlease — see kvt_wlease.h. The leases are a min-heap by deadline
    (kvt_heap: ties broken on the op, a total order), and a map from op to
    heap index that the heap's `moved` hook keeps current: put, take and
    take_due are O(log n), the next deadline O(1). */
#include "kvt_wlease.h"

#include <stdlib.h>
#include <string.h>

#include "base/kvt_heap.h"
#include "base/kvt_hmap.h"

typedef struct {
    kvt_opid_t op;     //  the lookup's id
    kvt_lease_t lease; //  its pool lease
    uint64_t deadline; //  released by the TTL at this time
} s_entry_t;

struct _kvt_wlease_t {
    s_entry_t *e;      //  leases held, a min-heap by (deadline, op)
    uint32_t n;        //  entries in use
    uint32_t cap;      //  entries allocated
    kvt_hmap_t *by_op; //  op → index in e
};

static kvt_hash_t s_key(kvt_opid_t op)
{
    kvt_hash_t k = {op.gen, op.req};
    return k;
}

static bool s_less(const void *a, const void *b, void *ctx)
{
    (void)ctx;
    const s_entry_t *x = a, *y = b;
    if (x->deadline != y->deadline)
        return x->deadline < y->deadline;
    if (x->op.req != y->op.req)
        return x->op.req < y->op.req;
    return x->op.gen < y->op.gen;
}

//  An entry moved to heap index pos: the map follows (an overwrite, which
//  never allocates).
static void s_moved(void *elem, uint32_t pos, void *ctx)
{
    kvt_wlease_t *self = ctx;
    kvt_hmap_put(self->by_op, s_key(((s_entry_t *)elem)->op), pos);
}

static const kvt_heap_ops_t s_heap = {.size = sizeof(s_entry_t), .less = s_less, .moved = s_moved};

kvt_wlease_t *kvt_wlease_new(void)
{
    kvt_wlease_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->by_op = kvt_hmap_new(64, false);
    if (!self->by_op) {
        free(self);
        return NULL;
    }
    return self;
}

void kvt_wlease_destroy(kvt_wlease_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kvt_wlease_t *self = *self_p;
    kvt_hmap_destroy(&self->by_op);
    free(self->e);
    free(self);
    *self_p = NULL;
}

int kvt_wlease_put(kvt_wlease_t *self, kvt_opid_t op, kvt_lease_t lease, uint64_t deadline)
{
    uint32_t at;
    if (kvt_hmap_get(self->by_op, s_key(op), &at))
        return -1;
    if (self->n == self->cap) {
        uint32_t cap = self->cap ? self->cap * 2 : 16;
        s_entry_t *e = realloc(self->e, (size_t)cap * sizeof *e);
        if (!e)
            return -1;
        self->e = e;
        self->cap = cap;
    }
    if (kvt_hmap_put(self->by_op, s_key(op), self->n) != 0)
        return -1;
    s_entry_t e = {.op = op, .lease = lease, .deadline = deadline};
    kvt_heap_push(self->e, &self->n, &s_heap, self, &e);
    return 0;
}

//  Removes heap entry i.
static kvt_lease_t s_remove(kvt_wlease_t *self, uint32_t i, kvt_opid_t *op)
{
    s_entry_t gone;
    kvt_heap_remove(self->e, &self->n, &s_heap, self, i, &gone);
    kvt_hmap_del(self->by_op, s_key(gone.op), NULL);
    if (op)
        *op = gone.op;
    return gone.lease;
}

bool kvt_wlease_take(kvt_wlease_t *self, kvt_opid_t op, kvt_lease_t *lease)
{
    uint32_t at;
    if (!kvt_hmap_get(self->by_op, s_key(op), &at))
        return false;
    *lease = s_remove(self, at, NULL);
    return true;
}

bool kvt_wlease_take_due(kvt_wlease_t *self, uint64_t now, kvt_opid_t *op, kvt_lease_t *lease)
{
    if (self->n == 0 || self->e[0].deadline > now)
        return false;
    *lease = s_remove(self, 0, op);
    return true;
}

bool kvt_wlease_take_any(kvt_wlease_t *self, kvt_opid_t *op, kvt_lease_t *lease)
{
    return kvt_wlease_take_due(self, UINT64_MAX, op, lease);
}

kvt_lease_t kvt_wlease_at(const kvt_wlease_t *self, uint32_t i)
{
    return self->e[i].lease;
}

uint64_t kvt_wlease_next_deadline(const kvt_wlease_t *self)
{
    return self->n ? self->e[0].deadline : UINT64_MAX;
}

uint32_t kvt_wlease_count(const kvt_wlease_t *self)
{
    return self->n;
}
