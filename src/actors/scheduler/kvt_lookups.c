/*  kvt_lookups — see kvt_lookups.h. */
#include "kvt_lookups.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t lookups_sent;     //  Lookups put into plans
    uint64_t lookup_timeouts;  //  lookups not settled within the bound (HBM hit used)
    uint64_t lookup_failed;    //  lookup verdicts that failed (no tier hit)
    uint64_t lookup_releases;  //  LookupReleases queued (a pin no load used)
    uint64_t lookup_pins_used; //  loads that released their lookup's pin
    uint64_t lookup_refreshes; //  settled lookups asked again (too old)
    uint32_t lookups_out;      //  gauge: lookups without a verdict
} s_stats_t;

struct _kvt_lookups_t {
    kvt_lookups_cfg_t cfg; //  configuration
    s_stats_t st;          //  counters
    uint64_t last_due_us;  //  deadline of the lookup issued last (no later one is out)
};

kvt_lookups_t *kvt_lookups_new(const kvt_lookups_cfg_t *cfg)
{
    kvt_lookups_t *self = calloc(1, sizeof(*self));
    if (self)
        self->cfg = *cfg;
    return self;
}

void kvt_lookups_destroy(kvt_lookups_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    free(*self_p);
    *self_p = NULL;
}

// -------------------------------------------------------- tier lookups ----

//  Puts a Lookup for r's leading chunk keys [0, n) into the plan: id
//  {id, gen + 1}, the generation its admission will carry, so the load of
//  that admission names it (LoadSpec.lookup releases its pin). 0, or -1
//  when the plan cannot carry it now (tried again by the next plan).
static int s_issue_lookup(kvt_lookups_t *self, kvt_sreq_t *r, uint32_t n, const kvt_reqtab_t *rt,
                          kvt_planbuf_t *pb, uint64_t now_us)
{
    size_t bytes = 48u + 16u * (size_t)n;
    kvt_hash_t *keys;
    kvt_lookup_t *l = kvt_planbuf_add_lookup(pb, n, bytes, &keys);
    if (!l)
        return -1;
    l->op.req = r->id;
    l->op.gen = r->gen + 1;
    l->pin = self->cfg.pin;
    l->ttl_ms = self->cfg.pin ? self->cfg.ttl_ms : 0;
    //  Rank 0 only: its answer stands for every rank's. A rank whose pool
    //  disagrees (less held) fails the load that trusts it, which then
    //  retreats to the HBM hit (B2); only rank 0 takes the pin, and the
    //  load or LookupRelease that names it reaches rank 0 as it reaches all.
    l->rank0_only = self->cfg.rank0_only;
    for (uint32_t c = 0; c < n; c++)
        keys[c] = kvt_reqtab_chunk_key(rt, r, c);
    r->lk.state = S_LK_OUT;
    r->lk.timed_out = false;
    r->lk.pinned = self->cfg.pin;
    r->lk.held = 0;
    uint64_t bound = self->cfg.timeout_us ? self->cfg.timeout_us : 1000000u;
    r->lk.deadline = now_us + bound;
    if (r->lk.deadline > self->last_due_us)
        self->last_due_us = r->lk.deadline;
    self->st.lookups_sent++;
    self->st.lookups_out++;
    return 0;
}

//  Puts r's pin release into the plan when the ranks hold one; gen is
//  the lookup's generation (r->gen + 1 before the admission commits).
static void s_release_pin(kvt_lookups_t *self, kvt_sreq_t *r, uint32_t gen, kvt_planbuf_t *pb)
{
    if (!r->lk.pinned)
        return;
    r->lk.pinned = false;
    //  Queued, not put into the open plan: an abort between plans releases
    //  too; the next plan hands the queue out.
    if (kvt_planbuf_queue_release(pb, (kvt_opid_t){r->id, gen}) != 0)
        return; //  out of memory: the lease's TTL ends it on the ranks
    self->st.lookup_releases++;
}

void kvt_lookups_drop(kvt_lookups_t *self, kvt_sreq_t *r, kvt_planbuf_t *pb)
{
    if (r->lk.state == S_LK_OUT)
        self->st.lookups_out--;
    s_release_pin(self, r, r->gen + 1, pb);
    r->lk.state = S_LK_NONE;
}

int kvt_lookups_verdict(kvt_lookups_t *self, const kvt_reqtab_t *rt, const kvt_verdict_t *v,
                        uint64_t now_us)
{
    uint32_t slot;
    kvt_sreq_t *r = kvt_reqtab_find(rt, v->op.req, &slot);
    if (!r)
        return -1;
    if (r->state != R_WAITING || r->lk.state != S_LK_OUT || v->op.gen != r->gen + 1)
        return -1;
    self->st.lookups_out--;
    r->lk.state = S_LK_READY;
    r->lk.at = now_us;
    r->lk.seen = false;
    r->lk.held = v->ok ? v->held : 0;
    if (!v->ok)
        self->st.lookup_failed++;
    return 0;
}

//  True when r's settled lookup is too old to admit with: past
//  lookup_max_age_us, or, pinned, past its lease's TTL on the ranks. An
//  answer no admission attempt has used yet is never stale: with a bound
//  shorter than a lookup's round trip, every fresh answer would otherwise
//  be asked again before it is ever used, and the request never admitted.
static bool s_lookup_stale(const kvt_lookups_t *self, const kvt_sreq_t *r, uint64_t now_us)
{
    if (!r->lk.seen)
        return false;
    uint64_t age = self->cfg.max_age_us ? self->cfg.max_age_us : 1000000u;
    if (r->lk.pinned && self->cfg.ttl_ms && (uint64_t)self->cfg.ttl_ms * 1000u < age)
        age = (uint64_t)self->cfg.ttl_ms * 1000u;
    return now_us - r->lk.at > age;
}

//  Drops r's stale settled lookup so that it is asked again: counted, its
//  pin released, a generation skipped. The id {id, gen + 1} is spent (its
//  reports are tombstoned, the ranks remember it), so the new lookup and
//  the load that uses it share a fresh one.
static void s_lookup_refresh(kvt_lookups_t *self, kvt_sreq_t *r, const kvt_reqtab_t *rt,
                             kvt_planbuf_t *pb)
{
    self->st.lookup_refreshes++;
    s_release_pin(self, r, r->gen + 1, pb);
    kvt_reqtab_next_gen(rt, r); //  a generation skipped: the new lookup's id is fresh
    r->lk.state = S_LK_NONE;
}

//  A request that waits for its blocks (admission stops at it) keeps its
//  settled lookup fresh: a stale one is asked again now, so the answer is
//  current when its blocks free up and it is admitted then, rather than
//  stepping aside for a new lookup while the requests behind it take the
//  blocks.
void kvt_lookups_keep_fresh(kvt_lookups_t *self, kvt_sreq_t *r, const kvt_reqtab_t *rt,
                            kvt_planbuf_t *pb, uint64_t now_us)
{
    if (r->lk.state != S_LK_READY)
        return;
    if (!s_lookup_stale(self, r, now_us)) {
        r->lk.seen = true; //  this plan weighed the answer: it can go stale from now on
        return;
    }
    uint32_t tail = self->cfg.tail;
    uint32_t n = r->nprompt > tail ? (r->nprompt - tail) / self->cfg.chunk_size : 0;
    s_lookup_refresh(self, r, rt, pb);
    (void)s_issue_lookup(self, r, n < KVT_MSG_MAX_CHUNKS ? n : KVT_MSG_MAX_CHUNKS, rt, pb, now_us);
}

//  The tier hit of r, in leading chunks of its first max_chunks: true with
//  *chunks when it is known (no tier: 0), false while r waits for its
//  lookup (issued now or in an earlier plan). A lookup past its bound
//  falls back to the HBM hit (counted; its pin is released). A settled
//  lookup too old to trust (its request kept waiting) is asked again under
//  a new id, its pin released first.
bool kvt_lookups_tier_hit(kvt_lookups_t *self, kvt_sreq_t *r, uint32_t max_chunks, uint32_t *chunks,
                          const kvt_reqtab_t *rt, kvt_planbuf_t *pb, uint64_t now_us)
{
    *chunks = 0;
    if (self->cfg.tier_chunks == 0 || max_chunks == 0)
        return true;
    if (max_chunks > KVT_MSG_MAX_CHUNKS)
        max_chunks = KVT_MSG_MAX_CHUNKS;
    if (r->lk.state == S_LK_OUT && now_us >= r->lk.deadline) {
        self->st.lookup_timeouts++;
        self->st.lookups_out--;
        r->lk.timed_out = true;
        s_release_pin(self, r, r->gen + 1, pb);
        r->lk.state = S_LK_READY;
        r->lk.at = now_us;
        r->lk.seen = false;
        r->lk.held = 0;
    }
    if (r->lk.state == S_LK_READY && s_lookup_stale(self, r, now_us))
        s_lookup_refresh(self, r, rt, pb);
    if (r->lk.state == S_LK_READY) {
        *chunks = r->lk.held < max_chunks ? r->lk.held : max_chunks;
        r->lk.seen = true;
        return true;
    }
    if (r->lk.state == S_LK_NONE)
        (void)s_issue_lookup(self, r, max_chunks, rt, pb, now_us);
    return false;
}

//  The admission committed: a load carrying the lookup's id releases its
//  pin (LoadSpec.lookup), any other outcome releases it in this plan.
void kvt_lookups_settle(kvt_lookups_t *self, kvt_sreq_t *r, kvt_load_spec_t *load,
                        kvt_planbuf_t *pb)
{
    if (load && r->lk.pinned && load->op.gen == r->gen) {
        load->lookup = true;
        r->lk.pinned = false;
        self->st.lookup_pins_used++;
    }
    //  The pin's id {id, gen + 1} before the admission is its id now.
    s_release_pin(self, r, r->gen, pb);
    r->lk.state = S_LK_NONE;
}

uint64_t kvt_lookups_next_deadline(const kvt_lookups_t *self, uint64_t now_us)
{
    //  Once passed, a plan has run at it: a lookup still out then belongs
    //  to a request the admission did not reach, which no timer would move.
    return self->st.lookups_out > 0 && self->last_due_us > now_us ? self->last_due_us : UINT64_MAX;
}

uint32_t kvt_lookups_out(const kvt_lookups_t *self)
{
    return self->st.lookups_out;
}

void kvt_lookups_stats(const kvt_lookups_t *self, kvt_sched_stats_t *out)
{
    out->lookups_sent = self->st.lookups_sent;
    out->lookup_timeouts = self->st.lookup_timeouts;
    out->lookup_failed = self->st.lookup_failed;
    out->lookup_releases = self->st.lookup_releases;
    out->lookup_pins_used = self->st.lookup_pins_used;
    out->lookup_refreshes = self->st.lookup_refreshes;
    out->lookups_out = self->st.lookups_out;
}

int kvt_lookups_check(const kvt_lookups_t *self, const kvt_reqtab_t *rt, char *err, size_t errlen)
{
    uint32_t out = 0;
    for (uint32_t i = 0; i < kvt_reqtab_cap(rt); i++) {
        const kvt_sreq_t *r = kvt_reqtab_at(rt, i);
        out += r->state != R_FREE && r->lk.state == S_LK_OUT;
    }
    if (out != self->st.lookups_out) {
        snprintf(err, errlen, "audit: %u lookups out, gauge %u", out, self->st.lookups_out);
        return -1;
    }
    return 0;
}
