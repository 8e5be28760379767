/*  kvt_wlease — see kvt_wlease.h. */
#include "kvt_wlease.h"

#include <stdlib.h>
#include <string.h>

#include "base/kvt_hmap.h"

typedef struct {
    kvt_opid_t op;     //  the lookup's id
    kvt_lease_t lease; //  its pool lease
    uint64_t deadline; //  released by the TTL at this time
} s_entry_t;

struct _kvt_wlease_t {
    s_entry_t *e;      //  leases held, dense (swap-remove)
    uint32_t n;        //  entries in use
    uint32_t cap;      //  entries allocated
    kvt_hmap_t *by_op; //  op → index in e
};

static kvt_hash_t s_key(kvt_opid_t op)
{
    kvt_hash_t k = {op.gen, op.req};
    return k;
}

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
    self->e[self->n++] = (s_entry_t){.op = op, .lease = lease, .deadline = deadline};
    return 0;
}

//  Removes entry i (swap with the last one).
static kvt_lease_t s_remove(kvt_wlease_t *self, uint32_t i, kvt_opid_t *op)
{
    s_entry_t gone = self->e[i];
    kvt_hmap_del(self->by_op, s_key(gone.op), NULL);
    self->n--;
    if (i != self->n) {
        self->e[i] = self->e[self->n];
        kvt_hmap_put(self->by_op, s_key(self->e[i].op), i);
    }
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
    for (uint32_t i = 0; i < self->n; i++)
        if (self->e[i].deadline <= now) {
            *lease = s_remove(self, i, op);
            return true;
        }
    return false;
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
    uint64_t at = UINT64_MAX;
    for (uint32_t i = 0; i < self->n; i++)
        if (self->e[i].deadline < at)
            at = self->e[i].deadline;
    return at;
}

uint32_t kvt_wlease_count(const kvt_wlease_t *self)
{
    return self->n;
}
