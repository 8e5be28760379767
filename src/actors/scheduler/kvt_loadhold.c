/*  kvt_loadhold — see kvt_loadhold.h. */
#include "kvt_loadhold.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kvt_hmap.h"
#include "base/kvt_seen.h"
#include "base/kvt_vec.h"

struct _kvt_loadhold_t {
    kvt_hold_t *h;                    //  holdings
    uint32_t cap;                     //  holdings allocated
    uint32_t *free_ids;               //  free holding slots
    uint32_t nfree;                   //  entries in free_ids
    kvt_hmap_t *by_op;                //  {gen, req} → holding of that load
    uint32_t dl_head[KVT_HOLD_LISTS]; //  per list: the earliest deadline (KVT_HOLD_NONE: none)
    uint32_t dl_tail[KVT_HOLD_LISTS]; //  per list: the latest deadline
    uint32_t nlive;                   //  gauge: live holdings
    kvt_seen_t *late;                 //  timed-out loads' ops (their late verdicts are dropped)
    kvt_hmap_t *keys;                 //  chunk key → loads in flight covering it (convoys)
};

static kvt_hash_t s_opkey(kvt_opid_t op)
{
    kvt_hash_t k = {op.gen, op.req};
    return k;
}

kvt_loadhold_t *kvt_loadhold_new(void)
{
    kvt_loadhold_t *self = calloc(1, sizeof(*self));
    if (!self)
        return NULL;
    self->by_op = kvt_hmap_new(64, false);
    for (int l = 0; l < KVT_HOLD_LISTS; l++)
        self->dl_head[l] = self->dl_tail[l] = KVT_HOLD_NONE;
    self->late = kvt_seen_new(KVT_LOADHOLD_LATE_IDS);
    self->keys = kvt_hmap_new(256, false);
    if (!self->by_op || !self->late || !self->keys)
        kvt_loadhold_destroy(&self);
    return self;
}

void kvt_loadhold_destroy(kvt_loadhold_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kvt_loadhold_t *self = *self_p;
    for (uint32_t i = 0; i < self->cap; i++)
        free(self->h[i].blocks);
    free(self->h);
    free(self->free_ids);
    kvt_hmap_destroy(&self->by_op);
    kvt_hmap_destroy(&self->keys);
    kvt_seen_destroy(&self->late);
    free(self);
    *self_p = NULL;
}

//  Doubles the holdings (and their free-slot stack).
static int s_grow(kvt_loadhold_t *self)
{
    uint32_t old = self->cap, cap = old, free_cap = old;
    if (kvt_vec_reserve((void **)&self->h, &cap, old + 1, sizeof(kvt_hold_t)) ||
        kvt_vec_reserve((void **)&self->free_ids, &free_cap, cap, sizeof(uint32_t)))
        return -1;
    memset(self->h + old, 0, (size_t)(cap - old) * sizeof(kvt_hold_t));
    for (uint32_t i = cap; i-- > old;)
        self->free_ids[self->nfree++] = i;
    self->cap = cap;
    return 0;
}

int kvt_loadhold_reserve(kvt_loadhold_t *self, kvt_opid_t op, uint32_t nblocks)
{
    if (kvt_loadhold_find(self, op) != KVT_HOLD_NONE || (self->nfree == 0 && s_grow(self) != 0))
        return -1;
    uint32_t i = self->free_ids[self->nfree - 1];
    kvt_hold_t *o = &self->h[i];
    o->blocks = nblocks ? malloc((size_t)nblocks * sizeof(uint32_t)) : NULL;
    if ((nblocks && !o->blocks) || kvt_hmap_put(self->by_op, s_opkey(op), i) != 0) {
        free(o->blocks);
        o->blocks = NULL;
        return -1;
    }
    self->nfree--;
    o->op = op;
    o->blk_cap = nblocks;
    o->sslot = UINT32_MAX;
    o->dl_prev = o->dl_next = KVT_HOLD_NONE;
    o->use = KVT_HOLD_RESERVED;
    return 0;
}

uint32_t kvt_loadhold_find(const kvt_loadhold_t *self, kvt_opid_t op)
{
    uint32_t i;
    return kvt_hmap_get(self->by_op, s_opkey(op), &i) ? i : KVT_HOLD_NONE;
}

kvt_hold_t *kvt_loadhold_at(const kvt_loadhold_t *self, uint32_t i)
{
    return &self->h[i];
}

//  Appends live holding i to list l, due at deadline_us.
static void s_append(kvt_loadhold_t *self, uint32_t i, uint8_t l, uint64_t deadline_us)
{
    kvt_hold_t *o = &self->h[i];
    o->list = l;
    o->deadline_us = deadline_us;
    o->dl_prev = self->dl_tail[l];
    o->dl_next = KVT_HOLD_NONE;
    if (self->dl_tail[l] != KVT_HOLD_NONE)
        self->h[self->dl_tail[l]].dl_next = i;
    else
        self->dl_head[l] = i;
    self->dl_tail[l] = i;
}

static void s_unlink(kvt_loadhold_t *self, uint32_t i)
{
    kvt_hold_t *o = &self->h[i];
    uint8_t l = o->list;
    if (o->dl_prev != KVT_HOLD_NONE)
        self->h[o->dl_prev].dl_next = o->dl_next;
    else
        self->dl_head[l] = o->dl_next;
    if (o->dl_next != KVT_HOLD_NONE)
        self->h[o->dl_next].dl_prev = o->dl_prev;
    else
        self->dl_tail[l] = o->dl_prev;
    o->dl_prev = o->dl_next = KVT_HOLD_NONE;
}

void kvt_loadhold_arm(kvt_loadhold_t *self, uint32_t i, uint64_t deadline_us)
{
    self->h[i].use = KVT_HOLD_LIVE;
    s_append(self, i, KVT_HOLD_DEADLINE, deadline_us);
    self->nlive++;
}

void kvt_loadhold_drain(kvt_loadhold_t *self, uint32_t i, uint8_t legs, uint64_t until_us)
{
    s_unlink(self, i);
    self->h[i].legs = legs;
    s_append(self, i, KVT_HOLD_DRAIN, until_us);
}

bool kvt_loadhold_draining(const kvt_loadhold_t *self, uint32_t i)
{
    return self->h[i].use == KVT_HOLD_LIVE && self->h[i].list == KVT_HOLD_DRAIN;
}

void kvt_loadhold_disarm(kvt_loadhold_t *self, uint32_t i)
{
    s_unlink(self, i);
    self->h[i].list = KVT_HOLD_DEADLINE;
    self->nlive--;
}

uint32_t kvt_loadhold_first(const kvt_loadhold_t *self, uint8_t list)
{
    return self->dl_head[list];
}

int kvt_loadhold_room(kvt_loadhold_t *self, uint32_t i, uint32_t n)
{
    kvt_hold_t *o = &self->h[i];
    if (n <= o->blk_cap)
        return 0;
    uint32_t *b = realloc(o->blocks, (size_t)n * sizeof(uint32_t));
    if (!b)
        return -1;
    o->blocks = b;
    o->blk_cap = n;
    return 0;
}

void kvt_loadhold_free(kvt_loadhold_t *self, uint32_t i)
{
    kvt_hold_t *o = &self->h[i];
    kvt_hmap_del(self->by_op, s_opkey(o->op), NULL);
    free(o->blocks);
    memset(o, 0, sizeof(*o));
    self->free_ids[self->nfree++] = i;
}

void kvt_loadhold_note_late(kvt_loadhold_t *self, kvt_opid_t op)
{
    kvt_seen_add(self->late, s_opkey(op));
}

bool kvt_loadhold_is_late(const kvt_loadhold_t *self, kvt_opid_t op)
{
    return kvt_seen_contains(self->late, s_opkey(op));
}

void kvt_loadhold_key(kvt_loadhold_t *self, kvt_hash_t key, int delta)
{
    uint32_t n = 0;
    kvt_hmap_get(self->keys, key, &n);
    if (delta > 0)
        (void)kvt_hmap_put(self->keys, key, n + 1); //  out of memory: only a convoy is missed
    else if (n <= 1)
        kvt_hmap_del(self->keys, key, NULL);
    else
        kvt_hmap_put(self->keys, key, n - 1);
}

bool kvt_loadhold_key_busy(const kvt_loadhold_t *self, kvt_hash_t key)
{
    return kvt_hmap_get(self->keys, key, NULL);
}

uint32_t kvt_loadhold_keys(const kvt_loadhold_t *self)
{
    return kvt_hmap_size(self->keys);
}

uint32_t kvt_loadhold_cap(const kvt_loadhold_t *self)
{
    return self->cap;
}

uint32_t kvt_loadhold_live(const kvt_loadhold_t *self)
{
    return self->nlive;
}

int kvt_loadhold_check(const kvt_loadhold_t *self, char *err, size_t errlen)
{
    uint32_t used = 0, live = 0, on_list = 0;
    for (uint32_t i = 0; i < self->cap; i++) {
        const kvt_hold_t *o = &self->h[i];
        if (o->use == KVT_HOLD_FREE)
            continue;
        used++;
        live += o->use == KVT_HOLD_LIVE;
        if (kvt_loadhold_find(self, o->op) != i) {
            snprintf(err, errlen, "audit: holding of req %llu gen %u is not found by its op",
                     (unsigned long long)o->op.req, o->op.gen);
            return -1;
        }
    }
    for (uint8_t l = 0; l < KVT_HOLD_LISTS; l++)
        for (uint32_t i = self->dl_head[l]; i != KVT_HOLD_NONE; i = self->h[i].dl_next, on_list++) {
            uint32_t n = self->h[i].dl_next;
            if (self->h[i].use != KVT_HOLD_LIVE || self->h[i].list != l ||
                (n != KVT_HOLD_NONE && self->h[n].deadline_us < self->h[i].deadline_us)) {
                snprintf(err, errlen,
                         "audit: a deadline list out of order or holding a settled load");
                return -1;
            }
        }
    if (live != self->nlive || on_list != live || used + self->nfree != self->cap ||
        kvt_hmap_size(self->by_op) != used) {
        snprintf(err, errlen,
                 "audit: %u live holdings (gauge %u), %u on the deadline list, %u used, %u free "
                 "of %u, %u found by op",
                 live, self->nlive, on_list, used, self->nfree, self->cap,
                 kvt_hmap_size(self->by_op));
        return -1;
    }
    return 0;
}
