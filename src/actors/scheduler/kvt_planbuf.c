/*  kvt_planbuf — see kvt_planbuf.h. */
#include "kvt_planbuf.h"

#include <stdlib.h>
#include <string.h>

#include "base/kvt_vec.h"

struct _kvt_planbuf_t {
    bool open;                      //  holds the plan being built
    kvt_sched_state_op_t *state;    //  state work of the plan
    uint32_t nstate;                //  used
    uint32_t state_cap;             //  allocated
    kvt_entry_t *entries;           //  entries
    uint32_t nentries;              //  used
    uint32_t entries_cap;           //  allocated
    kvt_load_spec_t *loads;         //  loads
    uint32_t nloads;                //  used
    uint32_t loads_cap;             //  allocated
    kvt_save_spec_t *saves;         //  saves
    uint32_t nsaves;                //  used
    uint32_t saves_cap;             //  allocated
    uint32_t *u32;                  //  block ids of entries, loads and saves
    uint32_t nu32;                  //  used
    uint32_t u32_cap;               //  allocated
    kvt_hash_t *h;                  //  hashes / keys of entries, loads, saves and lookups
    uint32_t nh;                    //  used
    uint32_t h_cap;                 //  allocated
    size_t bytes;                   //  estimated encoded size of the plan so far
    kvt_lookup_t *lookups;          //  lookups (keys hold offsets into h until finished)
    uint32_t nlookups;              //  used
    uint32_t lookups_cap;           //  allocated
    kvt_lookup_release_t *releases; //  lookup releases handed out
    uint32_t nreleases;             //  used
    uint32_t releases_cap;          //  allocated
    kvt_lookup_release_t *rel_q;    //  releases queued: [rel_head, nrel_q) not handed out yet
    uint32_t rel_head;              //  first release not handed out
    uint32_t nrel_q;                //  used (end of the queue)
    uint32_t rel_q_cap;             //  allocated
    kvt_touch_msg_t *touches;       //  touches
    uint32_t ntouches;              //  used
    uint32_t touches_cap;           //  allocated
    kvt_event_t *events;            //  events queued: [ev_head, nevents) not handed out yet
    uint32_t ev_head;               //  first event not handed out
    uint32_t nevents;               //  used (end of the queue)
    uint32_t events_cap;            //  allocated
    kvt_event_t *out_events;        //  events handed out with the last plan
    uint32_t out_events_cap;        //  allocated
    kvt_planbuf_stats_t stats;      //  counters
};

kvt_planbuf_t *kvt_planbuf_new(void)
{
    return calloc(1, sizeof(kvt_planbuf_t));
}

void kvt_planbuf_destroy(kvt_planbuf_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kvt_planbuf_t *self = *self_p;
    free(self->state);
    free(self->entries);
    free(self->loads);
    free(self->saves);
    free(self->u32);
    free(self->h);
    free(self->events);
    free(self->out_events);
    free(self->lookups);
    free(self->releases);
    free(self->rel_q);
    free(self->touches);
    free(self);
    *self_p = NULL;
}

void kvt_planbuf_open(kvt_planbuf_t *self)
{
    if (self->open)
        return;
    self->nentries = self->nloads = self->nsaves = self->nstate = 0;
    self->nlookups = self->nreleases = self->ntouches = 0;
    self->nu32 = self->nh = 0;
    //  The events that go with this plan: at most one message's worth of
    //  the queue (the rest wait), so a backlog never crowds the plan out.
    uint32_t queued = self->nevents - self->ev_head;
    uint32_t going = queued < KVT_MSG_MAX_ENTRIES ? queued : KVT_MSG_MAX_ENTRIES;
    self->bytes = 64u * (size_t)going + 256u;
    self->open = true;
}

void kvt_planbuf_close(kvt_planbuf_t *self)
{
    self->open = false;
}

bool kvt_planbuf_fits(const kvt_planbuf_t *self, size_t bytes)
{
    return self->bytes + bytes <= KVT_SCHED_PLAN_BYTES;
}

void kvt_planbuf_defer(kvt_planbuf_t *self)
{
    self->stats.plan_deferred++;
}

int kvt_planbuf_reserve(kvt_planbuf_t *self, uint32_t nblocks, uint32_t nkeys)
{
    if (kvt_vec_reserve((void **)&self->u32, &self->u32_cap, self->nu32 + nblocks,
                        sizeof(uint32_t)) ||
        kvt_vec_reserve((void **)&self->h, &self->h_cap, self->nh + nkeys, sizeof(kvt_hash_t)))
        return -1;
    return 0;
}

int kvt_planbuf_reserve_loads(kvt_planbuf_t *self, uint32_t n)
{
    return kvt_vec_reserve((void **)&self->loads, &self->loads_cap, self->nloads + n,
                           sizeof(kvt_load_spec_t));
}

int kvt_planbuf_reserve_saves(kvt_planbuf_t *self, uint32_t n)
{
    return kvt_vec_reserve((void **)&self->saves, &self->saves_cap, self->nsaves + n,
                           sizeof(kvt_save_spec_t));
}

int kvt_planbuf_reserve_state(kvt_planbuf_t *self, uint32_t n)
{
    return kvt_vec_reserve((void **)&self->state, &self->state_cap, self->nstate + n,
                           sizeof(kvt_sched_state_op_t));
}

kvt_hash_t *kvt_planbuf_fill_spec(kvt_planbuf_t *self, kvt_load_spec_t *sp, kvt_opid_t op,
                                  uint32_t start, uint32_t end, const uint32_t *blocks,
                                  uint32_t nblocks, uint32_t nkeys)
{
    memset(sp, 0, sizeof(*sp));
    sp->op = op;
    sp->start = start;
    sp->end = end;
    sp->blocks = (uint32_t *)(uintptr_t)self->nu32;
    sp->nblocks = nblocks;
    sp->keys = (kvt_hash_t *)(uintptr_t)self->nh;
    sp->nkeys = nkeys;
    memcpy(self->u32 + self->nu32, blocks, (size_t)nblocks * sizeof(uint32_t));
    self->nu32 += nblocks;
    kvt_hash_t *keys = self->h + self->nh;
    self->nh += nkeys;
    self->bytes += KVT_SCHED_SPEC_BYTES(nblocks, nkeys);
    return keys;
}

kvt_load_spec_t *kvt_planbuf_next_load(kvt_planbuf_t *self)
{
    return &self->loads[self->nloads++];
}

kvt_save_spec_t *kvt_planbuf_next_save(kvt_planbuf_t *self)
{
    return &self->saves[self->nsaves++];
}

kvt_load_spec_t *kvt_planbuf_last_load(kvt_planbuf_t *self)
{
    return self->nloads ? &self->loads[self->nloads - 1] : NULL;
}

kvt_entry_t *kvt_planbuf_last_entry(kvt_planbuf_t *self)
{
    return self->nentries ? &self->entries[self->nentries - 1] : NULL;
}

kvt_load_spec_t *kvt_planbuf_add_empty_load(kvt_planbuf_t *self, kvt_opid_t op)
{
    kvt_load_spec_t *l = &self->loads[self->nloads++];
    memset(l, 0, sizeof(*l));
    l->op = op;
    l->blocks = (uint32_t *)(uintptr_t)self->nu32;
    l->keys = (kvt_hash_t *)(uintptr_t)self->nh;
    self->bytes += KVT_SCHED_SPEC_BYTES(0, 0);
    return l;
}

int kvt_planbuf_add_entry(kvt_planbuf_t *self, kvt_opid_t op, uint32_t start, uint32_t end,
                          uint32_t first_block, uint32_t verify_end, uint32_t n, uint32_t **blocks,
                          kvt_hash_t **hashes)
{
    if (!kvt_planbuf_fits(self, KVT_SCHED_ENTRY_BYTES(n)) ||
        self->nentries >= KVT_MSG_MAX_ENTRIES) {
        self->stats.plan_deferred++;
        return -1;
    }
    if (kvt_vec_reserve((void **)&self->entries, &self->entries_cap, self->nentries + 1,
                        sizeof(kvt_entry_t)) ||
        kvt_planbuf_reserve(self, n, n))
        return -1;
    kvt_entry_t *e = &self->entries[self->nentries++];
    memset(e, 0, sizeof(*e));
    e->op = op;
    e->start = start;
    e->end = end;
    e->first_block = first_block;
    e->verify_end = verify_end;
    e->blocks = (uint32_t *)(uintptr_t)self->nu32;
    e->hashes = (kvt_hash_t *)(uintptr_t)self->nh;
    e->nblocks = n;
    *blocks = self->u32 + self->nu32;
    *hashes = self->h + self->nh;
    self->nu32 += n;
    self->nh += n;
    self->bytes += KVT_SCHED_ENTRY_BYTES(n);
    self->stats.tokens_planned += end - start;
    return 0;
}

kvt_lookup_t *kvt_planbuf_add_lookup(kvt_planbuf_t *self, uint32_t nkeys, size_t bytes,
                                     kvt_hash_t **keys)
{
    if (!kvt_planbuf_fits(self, bytes) || self->nlookups >= KVT_MSG_MAX_ENTRIES ||
        kvt_vec_reserve((void **)&self->lookups, &self->lookups_cap, self->nlookups + 1,
                        sizeof(kvt_lookup_t)) ||
        kvt_planbuf_reserve(self, 0, nkeys))
        return NULL;
    kvt_lookup_t *l = &self->lookups[self->nlookups++];
    memset(l, 0, sizeof(*l));
    l->keys = (kvt_hash_t *)(uintptr_t)self->nh;
    l->nkeys = nkeys;
    *keys = self->h + self->nh;
    self->nh += nkeys;
    self->bytes += bytes;
    return l;
}

//  Drops the handed-out head [0, *head) of a queue of *n elements of
//  `size` bytes once it is at least as long as what is left, so every
//  element is moved at most once per time the queue's length doubles
//  (amortised O(1) per element; a memmove per plan would be quadratic
//  under a backlog). Counts the elements moved.
static void s_compact(kvt_planbuf_t *self, void *base, uint32_t *head, uint32_t *n, size_t size)
{
    uint32_t left = *n - *head;
    if (left == 0) {
        *head = *n = 0;
        return;
    }
    if (*head < left)
        return;
    memmove(base, (char *)base + (size_t)*head * size, (size_t)left * size);
    self->stats.backlog_moved += left;
    *head = 0;
    *n = left;
}

int kvt_planbuf_queue_release(kvt_planbuf_t *self, kvt_opid_t op)
{
    if (kvt_vec_reserve((void **)&self->rel_q, &self->rel_q_cap, self->nrel_q + 1,
                        sizeof(kvt_lookup_release_t)) != 0)
        return -1;
    self->rel_q[self->nrel_q++].op = op;
    return 0;
}

int kvt_planbuf_add_touch(kvt_planbuf_t *self, kvt_hash_t h, uint64_t round)
{
    if (kvt_vec_reserve((void **)&self->touches, &self->touches_cap, self->ntouches + 1,
                        sizeof(kvt_touch_msg_t)) != 0)
        return -1;
    self->touches[self->ntouches++] = (kvt_touch_msg_t){.hash = h, .round = round};
    self->bytes += 48;
    return 0;
}

int kvt_planbuf_add_state(kvt_planbuf_t *self, const kvt_sched_state_op_t *op)
{
    if (kvt_planbuf_reserve_state(self, 1) != 0)
        return -1;
    self->state[self->nstate++] = *op;
    return 0;
}

void kvt_planbuf_event(kvt_planbuf_t *self, uint64_t req, uint32_t gen, uint8_t type, uint32_t a,
                       uint32_t b, uint32_t c)
{
    if (kvt_vec_reserve((void **)&self->events, &self->events_cap, self->nevents + 1,
                        sizeof(kvt_event_t)) != 0)
        return; //  an event lost to OOM only affects measurements
    kvt_event_t *ev = &self->events[self->nevents++];
    //  An event queued while the plan is built goes with it if there is
    //  room in its message: it counts in the plan's size.
    if (self->open && self->nevents - self->ev_head <= KVT_MSG_MAX_ENTRIES)
        self->bytes += 64u;
    ev->op.req = req;
    ev->op.gen = gen;
    ev->type = type;
    ev->a = a;
    ev->b = b;
    ev->c = c;
}

void kvt_planbuf_counts(const kvt_planbuf_t *self, kvt_planbuf_counts_t *out)
{
    out->entries = self->nentries;
    out->loads = self->nloads;
    out->saves = self->nsaves;
    out->state = self->nstate;
    out->lookups = self->nlookups;
    out->touches = self->ntouches;
    out->releases = self->nrel_q - self->rel_head;
    out->events = self->nevents - self->ev_head;
}

void kvt_planbuf_state_ops(const kvt_planbuf_t *self, const kvt_sched_state_op_t **ops, uint32_t *n)
{
    *ops = self->state;
    *n = self->nstate;
}

void kvt_planbuf_finish(kvt_planbuf_t *self, uint64_t step, kvt_step_plan_t *plan)
{
    for (uint32_t i = 0; i < self->nentries; i++) {
        kvt_entry_t *e = &self->entries[i];
        e->blocks = self->u32 + (uintptr_t)e->blocks;
        e->hashes = self->h + (uintptr_t)e->hashes;
    }
    for (uint32_t i = 0; i < self->nloads; i++) {
        kvt_load_spec_t *l = &self->loads[i];
        l->blocks = self->u32 + (uintptr_t)l->blocks;
        l->keys = self->h + (uintptr_t)l->keys;
    }
    for (uint32_t i = 0; i < self->nsaves; i++) {
        kvt_save_spec_t *s = &self->saves[i];
        s->blocks = self->u32 + (uintptr_t)s->blocks;
        s->keys = self->h + (uintptr_t)s->keys;
    }
    //  Hand the accumulated events out with this plan (at most what one
    //  message carries; the rest go with the next plan).
    uint32_t queued = self->nevents - self->ev_head;
    uint32_t nev = queued < KVT_MSG_MAX_ENTRIES ? queued : KVT_MSG_MAX_ENTRIES;
    if (kvt_vec_reserve((void **)&self->out_events, &self->out_events_cap, nev ? nev : 1,
                        sizeof(kvt_event_t)) != 0)
        nev = 0;
    if (nev > 0) {
        memcpy(self->out_events, self->events + self->ev_head, (size_t)nev * sizeof(kvt_event_t));
        self->ev_head += nev;
        s_compact(self, self->events, &self->ev_head, &self->nevents, sizeof(kvt_event_t));
    }
    memset(plan, 0, sizeof(*plan));
    plan->step = step;
    plan->entries = self->entries;
    plan->nentries = self->nentries;
    plan->loads = self->loads;
    plan->nloads = self->nloads;
    plan->saves = self->saves;
    plan->nsaves = self->nsaves;
    plan->events = self->out_events;
    plan->nevents = nev;
    for (uint32_t i = 0; i < self->nlookups; i++)
        self->lookups[i].keys = self->h + (uintptr_t)self->lookups[i].keys;
    plan->lookups = self->nlookups ? self->lookups : NULL;
    plan->nlookups = self->nlookups;
    //  Queued releases, at most what one message carries (the rest next).
    uint32_t nrelq = self->nrel_q - self->rel_head;
    uint32_t nrel = nrelq < KVT_MSG_MAX_ENTRIES ? nrelq : KVT_MSG_MAX_ENTRIES;
    if (kvt_vec_reserve((void **)&self->releases, &self->releases_cap, nrel ? nrel : 1,
                        sizeof(kvt_lookup_release_t)) != 0)
        nrel = 0;
    if (nrel > 0) {
        memcpy(self->releases, self->rel_q + self->rel_head,
               (size_t)nrel * sizeof(kvt_lookup_release_t));
        self->rel_head += nrel;
        s_compact(self, self->rel_q, &self->rel_head, &self->nrel_q, sizeof(kvt_lookup_release_t));
    }
    self->nreleases = nrel;
    plan->lookup_releases = self->nreleases ? self->releases : NULL;
    plan->nlookup_releases = self->nreleases;
    plan->touches = self->ntouches ? self->touches : NULL;
    plan->ntouches = self->ntouches;
    self->open = false;
}

void kvt_planbuf_stats(const kvt_planbuf_t *self, kvt_planbuf_stats_t *out)
{
    *out = self->stats;
}
