/*  kvt_reqtab — see kvt_reqtab.h. */
#include "kvt_reqtab.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/common/kvt_prefix.h"
#include "base/kvt_hmap.h"
#include "base/kvt_vec.h"

struct _kvt_reqtab_t {
    uint32_t block_size;              //  tokens per block
    uint32_t chunk_size;              //  tokens per chunk
    uint32_t bpc;                     //  blocks per chunk
    kvt_hash_t ns;                    //  namespace: seeds the chain
    kvt_sreq_t *reqs;                 //  request records
    uint32_t nreqs_cap;               //  records allocated
    uint32_t *req_free;               //  free record slots (capacity nreqs_cap)
    uint32_t nreq_free;               //  entries in req_free
    kvt_hmap_t *by_id;                //  request id → slot
    kvt_ilist_t lists[KVT_RQ_NLISTS]; //  waiting, active, tails
    uint32_t records;                 //  gauge: records alive
};

#define S_LINKS(self) KVT_ILINKS((self)->reqs, link)

kvt_reqtab_t *kvt_reqtab_new(uint32_t block_size, uint32_t chunk_size, kvt_hash_t ns)
{
    kvt_reqtab_t *self = calloc(1, sizeof(*self));
    if (!self)
        return NULL;
    self->block_size = block_size;
    self->chunk_size = chunk_size;
    self->bpc = chunk_size / block_size;
    self->ns = ns;
    self->by_id = kvt_hmap_new(256, false);
    if (!self->by_id) {
        free(self);
        return NULL;
    }
    for (int l = 0; l < KVT_RQ_NLISTS; l++)
        kvt_ilist_init(&self->lists[l]);
    return self;
}

void kvt_reqtab_destroy(kvt_reqtab_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kvt_reqtab_t *self = *self_p;
    for (uint32_t i = 0; i < self->nreqs_cap; i++) {
        free(self->reqs[i].tokens);
        free(self->reqs[i].hashes);
        free(self->reqs[i].blocks);
        free(self->reqs[i].load.pins);
    }
    free(self->reqs);
    free(self->req_free);
    kvt_hmap_destroy(&self->by_id);
    free(self);
    *self_p = NULL;
}

//  Doubles the request records (and the free-slot stack with them).
static int s_grow_reqs(kvt_reqtab_t *self)
{
    uint32_t old = self->nreqs_cap, cap = old, free_cap = old;
    if (kvt_vec_reserve((void **)&self->reqs, &cap, old + 1, sizeof(kvt_sreq_t)) ||
        kvt_vec_reserve((void **)&self->req_free, &free_cap, cap, sizeof(uint32_t)))
        return -1;
    memset(self->reqs + old, 0, (size_t)(cap - old) * sizeof(kvt_sreq_t));
    for (uint32_t i = cap; i-- > old;)
        self->req_free[self->nreq_free++] = i;
    self->nreqs_cap = cap;
    return 0;
}

kvt_sreq_t *kvt_reqtab_add(kvt_reqtab_t *self, uint64_t id, const uint32_t *tokens,
                           uint32_t ntokens, uint32_t max_new, uint32_t gen, uint32_t *slot_out)
{
    uint64_t nfeed = (uint64_t)ntokens + max_new - 1;
    if (self->nreq_free == 0 && s_grow_reqs(self) != 0)
        return NULL;
    uint32_t slot = self->req_free[self->nreq_free - 1];
    kvt_sreq_t *r = &self->reqs[slot];
    memset(r, 0, sizeof(*r));
    r->tokens = malloc(((size_t)nfeed + 1) * sizeof(uint32_t));
    r->hashes = malloc((nfeed / self->block_size + 1) * sizeof(kvt_hash_t));
    if (!r->tokens || !r->hashes || kvt_hmap_put(self->by_id, kvt_hmap_key64(id), slot) != 0) {
        free(r->tokens);
        free(r->hashes);
        memset(r, 0, sizeof(*r));
        return NULL;
    }
    self->nreq_free--;
    r->sslot = r->ck_restore = r->ck_take = KVT_CKPT_NONE;
    r->keep_below = UINT32_MAX;
    r->id = id;
    r->gen = gen;
    r->nprompt = ntokens;
    r->max_new = max_new;
    r->nfeed = (uint32_t)nfeed;
    memcpy(r->tokens, tokens, (size_t)ntokens * sizeof(uint32_t));
    //  Generated tokens are predetermined per request so a replay is
    //  reproducible; they never match another request's prompt.
    for (uint32_t i = ntokens; i <= r->nfeed; i++) {
        uint64_t x = (r->id + 1) * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull;
        x ^= x >> 31;
        r->tokens[i] = (uint32_t)(x % 100000u) + 1000u;
    }
    self->records++;
    *slot_out = slot;
    return r;
}

uint32_t kvt_reqtab_next_gen(const kvt_reqtab_t *self, kvt_sreq_t *r)
{
    (void)self;
    return ++r->gen;
}

kvt_sreq_t *kvt_reqtab_find(const kvt_reqtab_t *self, uint64_t id, uint32_t *slot)
{
    if (!kvt_hmap_get(self->by_id, kvt_hmap_key64(id), slot))
        return NULL;
    return &self->reqs[*slot];
}

kvt_sreq_t *kvt_reqtab_at(const kvt_reqtab_t *self, uint32_t slot)
{
    return &self->reqs[slot];
}

uint32_t kvt_reqtab_cap(const kvt_reqtab_t *self)
{
    return self->nreqs_cap;
}

uint32_t kvt_reqtab_records(const kvt_reqtab_t *self)
{
    return self->records;
}

void kvt_reqtab_free(kvt_reqtab_t *self, uint32_t slot)
{
    kvt_sreq_t *r = &self->reqs[slot];
    kvt_hmap_del(self->by_id, kvt_hmap_key64(r->id), NULL);
    assert(r->load.npins == 0);
    free(r->tokens);
    free(r->hashes);
    free(r->blocks);
    free(r->load.pins);
    memset(r, 0, sizeof(*r));
    self->req_free[self->nreq_free++] = slot;
    self->records--;
}

void kvt_reqtab_append(kvt_reqtab_t *self, kvt_rq_list_t l, uint32_t slot)
{
    kvt_ilist_append(&self->lists[l], S_LINKS(self), slot);
}

void kvt_reqtab_prepend(kvt_reqtab_t *self, kvt_rq_list_t l, uint32_t slot)
{
    kvt_ilist_prepend(&self->lists[l], S_LINKS(self), slot);
}

void kvt_reqtab_unlink(kvt_reqtab_t *self, kvt_rq_list_t l, uint32_t slot)
{
    kvt_ilist_unlink(&self->lists[l], S_LINKS(self), slot);
}

uint32_t kvt_reqtab_head(const kvt_reqtab_t *self, kvt_rq_list_t l)
{
    return self->lists[l].head;
}

uint32_t kvt_reqtab_next(const kvt_reqtab_t *self, uint32_t slot)
{
    return kvt_ilist_next(S_LINKS(self), slot);
}

uint32_t kvt_reqtab_blocks_needed(const kvt_reqtab_t *self, uint64_t nfeed)
{
    return (uint32_t)((nfeed + self->block_size - 1) / self->block_size);
}

kvt_hash_t kvt_reqtab_hash_at(const kvt_reqtab_t *self, kvt_sreq_t *r, uint32_t b)
{
    uint32_t bs = self->block_size;
    while (r->nhashed <= b) {
        kvt_hash_t prev = r->nhashed ? r->hashes[r->nhashed - 1] : self->ns;
        r->hashes[r->nhashed] = kvt_block_hash(prev, r->tokens + (size_t)r->nhashed * bs, bs);
        r->nhashed++;
    }
    return r->hashes[b];
}

kvt_hash_t kvt_reqtab_chunk_key(const kvt_reqtab_t *self, kvt_sreq_t *r, uint32_t chunk)
{
    return kvt_reqtab_hash_at(self, r, (chunk + 1) * self->bpc - 1);
}

void kvt_reqtab_chunk_keys(const kvt_reqtab_t *self, kvt_sreq_t *r, uint32_t first, uint32_t n,
                           kvt_hash_t *out)
{
    for (uint32_t c = 0; c < n; c++)
        out[c] = kvt_reqtab_chunk_key(self, r, first + c);
}

void kvt_reqtab_release_blocks(kvt_reqtab_t *self, kvt_sreq_t *r, kvt_blockmgr_t *bm)
{
    (void)self;
    //  Last block first: the tail lands at the old end of the LRU, so HBM
    //  evicts suffixes before the prefixes other requests share.
    //  Blocks at or above keep_below lie above the request's deepest HBM
    //  checkpoint (kvt_sched_mark_low): the low LRU.
    for (uint32_t i = r->nblocks; i-- > 0;)
        if (i >= r->keep_below)
            kvt_blockmgr_unref_low(bm, r->blocks[i]);
        else
            kvt_blockmgr_unref(bm, r->blocks[i]);
    r->nblocks = 0;
    r->keep_below = UINT32_MAX;
}

void kvt_reqtab_index_blocks(kvt_reqtab_t *self, kvt_sreq_t *r, uint32_t upto_tokens,
                             kvt_blockmgr_t *bm)
{
    uint32_t full = upto_tokens / self->block_size;
    for (uint32_t b = r->registered; b < full; b++) {
        kvt_hash_t h = kvt_reqtab_hash_at(self, r, b);
        kvt_blockmgr_register(bm, r->blocks[b], h, r->tokens + (size_t)b * self->block_size);
    }
    if (full > r->registered)
        r->registered = full;
}

void kvt_reqtab_forget(kvt_reqtab_t *self, uint32_t slot, kvt_blockmgr_t *bm)
{
    kvt_reqtab_release_blocks(self, &self->reqs[slot], bm);
    kvt_reqtab_free(self, slot);
}

int kvt_reqtab_check(const kvt_reqtab_t *self, char *err, size_t errlen)
{
    if (kvt_hmap_size(self->by_id) != self->records) {
        snprintf(err, errlen, "audit: the map holds %u requests, the gauge says %u",
                 kvt_hmap_size(self->by_id), self->records);
        return -1;
    }
    return 0;
}
