/*  kvt_sched_lookup — the scheduler core's tier lookups (see kvt_sched.h):
    a waiting request's Lookup into the plan, its verdict, its staleness and
    refresh, its pin and the tier hit an admission reads from it
    (kvt_sched_admit.c). */
#include <string.h>

#include "kvt_sched_int.h"

// -------------------------------------------------------- tier lookups ----

//  Puts a Lookup for r's leading chunk keys [0, n) into the plan: id
//  {id, gen + 1}, the generation its admission will carry, so the load of
//  that admission names it (LoadSpec.lookup releases its pin). 0, or -1
//  when the plan cannot carry it now (tried again by the next plan).
static int s_issue_lookup(kvt_sched_t *self, kvt_sreq_t *r, uint32_t n)
{
    size_t bytes = 48u + 16u * (size_t)n;
    kvt_hash_t *keys;
    kvt_lookup_t *l = kvt_planbuf_add_lookup(self->pb, n, bytes, &keys);
    if (!l)
        return -1;
    l->op.req = r->id;
    l->op.gen = r->gen + 1;
    l->pin = self->cfg.lookup_pin;
    l->ttl_ms = self->cfg.lookup_pin ? self->cfg.lookup_ttl_ms : 0;
    //  Rank 0 only: its answer stands for every rank's. A rank whose pool
    //  disagrees (less held) fails the load that trusts it, which then
    //  retreats to the HBM hit (B2); only rank 0 takes the pin, and the
    //  load or LookupRelease that names it reaches rank 0 as it reaches all.
    l->rank0_only = self->cfg.lookup_ranks == KVT_SCHED_LOOKUP_RANK0;
    for (uint32_t c = 0; c < n; c++)
        keys[c] = kvt_sched_chunk_key(self, r, c);
    r->lk = S_LK_OUT;
    r->lk_pinned = self->cfg.lookup_pin;
    r->lk_held = 0;
    uint64_t bound = self->cfg.lookup_timeout_us ? self->cfg.lookup_timeout_us : 1000000u;
    r->lk_deadline = self->now_us + bound;
    self->stats.lookups_sent++;
    self->stats.lookups_out++;
    return 0;
}

//  Puts r's pin release into the plan when the ranks hold one.
static void s_release_pin(kvt_sched_t *self, kvt_sreq_t *r)
{
    if (!r->lk_pinned)
        return;
    r->lk_pinned = false;
    //  Queued, not put into the open plan: an abort between plans releases
    //  too; the next plan hands the queue out.
    if (kvt_planbuf_queue_release(self->pb, (kvt_opid_t){r->id, r->gen + 1}) != 0)
        return; //  out of memory: the lease's TTL ends it on the ranks
    self->stats.lookup_releases++;
}

void kvt_sched_lookup_drop(kvt_sched_t *self, kvt_sreq_t *r)
{
    if (r->lk == S_LK_OUT)
        self->stats.lookups_out--;
    s_release_pin(self, r);
    r->lk = S_LK_NONE;
}

int kvt_sched_lookup_verdict(kvt_sched_t *self, const kvt_verdict_t *v)
{
    uint32_t slot;
    if (!kvt_hmap_get(self->by_id, kvt_hmap_key64(v->op.req), &slot))
        return -1;
    kvt_sreq_t *r = &self->reqs[slot];
    if (r->state != R_WAITING || r->lk != S_LK_OUT || v->op.gen != r->gen + 1)
        return -1;
    self->stats.lookups_out--;
    r->lk = S_LK_READY;
    r->lk_at = self->now_us;
    r->lk_seen = false;
    r->lk_held = v->ok ? v->held : 0;
    if (!v->ok)
        self->stats.lookup_failed++;
    return 0;
}

//  True when r's settled lookup is too old to admit with: past
//  lookup_max_age_us, or, pinned, past its lease's TTL on the ranks. An
//  answer no admission attempt has used yet is never stale: with a bound
//  shorter than a lookup's round trip, every fresh answer would otherwise
//  be asked again before it is ever used, and the request never admitted.
static bool s_lookup_stale(const kvt_sched_t *self, const kvt_sreq_t *r)
{
    if (!r->lk_seen)
        return false;
    uint64_t age = self->cfg.lookup_max_age_us ? self->cfg.lookup_max_age_us : 1000000u;
    if (r->lk_pinned && self->cfg.lookup_ttl_ms && (uint64_t)self->cfg.lookup_ttl_ms * 1000u < age)
        age = (uint64_t)self->cfg.lookup_ttl_ms * 1000u;
    return self->now_us - r->lk_at > age;
}

//  Drops r's stale settled lookup so that it is asked again: counted, its
//  pin released, a generation skipped. The id {id, gen + 1} is spent (its
//  reports are tombstoned, the ranks remember it), so the new lookup and
//  the load that uses it share a fresh one.
static void s_lookup_refresh(kvt_sched_t *self, kvt_sreq_t *r)
{
    self->stats.lookup_refreshes++;
    s_release_pin(self, r);
    r->gen++; //  a generation skipped: the new lookup's id is fresh
    r->lk = S_LK_NONE;
}

//  A request that waits for its blocks (admission stops at it) keeps its
//  settled lookup fresh: a stale one is asked again now, so the answer is
//  current when its blocks free up and it is admitted then, rather than
//  stepping aside for a new lookup while the requests behind it take the
//  blocks.
void kvt_sched_lookup_keep_fresh(kvt_sched_t *self, kvt_sreq_t *r)
{
    if (r->lk != S_LK_READY)
        return;
    if (!s_lookup_stale(self, r)) {
        r->lk_seen = true; //  this plan weighed the answer: it can go stale from now on
        return;
    }
    uint32_t tail = kvt_sched_tail(self);
    uint32_t n = r->nprompt > tail ? (r->nprompt - tail) / self->cfg.chunk_size : 0;
    s_lookup_refresh(self, r);
    (void)s_issue_lookup(self, r, n < KVT_MSG_MAX_CHUNKS ? n : KVT_MSG_MAX_CHUNKS);
}

//  The tier hit of r, in leading chunks of its first max_chunks: true with
//  *chunks when it is known (no tier: 0), false while r waits for its
//  lookup (issued now or in an earlier plan). A lookup past its bound
//  falls back to the HBM hit (counted; its pin is released). A settled
//  lookup too old to trust (its request kept waiting) is asked again under
//  a new id, its pin released first.
bool kvt_sched_tier_hit(kvt_sched_t *self, kvt_sreq_t *r, uint32_t max_chunks, uint32_t *chunks)
{
    *chunks = 0;
    if (self->cfg.tier_chunks == 0 || max_chunks == 0)
        return true;
    if (max_chunks > KVT_MSG_MAX_CHUNKS)
        max_chunks = KVT_MSG_MAX_CHUNKS;
    if (r->lk == S_LK_OUT && self->now_us >= r->lk_deadline) {
        self->stats.lookup_timeouts++;
        self->stats.lookups_out--;
        s_release_pin(self, r);
        r->lk = S_LK_READY;
        r->lk_at = self->now_us;
        r->lk_seen = false;
        r->lk_held = 0;
    }
    if (r->lk == S_LK_READY && s_lookup_stale(self, r))
        s_lookup_refresh(self, r);
    if (r->lk == S_LK_READY) {
        *chunks = r->lk_held < max_chunks ? r->lk_held : max_chunks;
        r->lk_seen = true;
        return true;
    }
    if (r->lk == S_LK_NONE)
        (void)s_issue_lookup(self, r, max_chunks);
    return false;
}

//  The admission committed: a load carrying the lookup's id releases its
//  pin (LoadSpec.lookup), any other outcome releases it in this plan.
void kvt_sched_lookup_settle(kvt_sched_t *self, kvt_sreq_t *r, kvt_load_spec_t *load)
{
    if (load && r->lk_pinned && load->op.gen == r->gen) {
        load->lookup = true;
        r->lk_pinned = false;
        self->stats.lookup_pins_used++;
    }
    //  The pin's id is {id, gen + 1} before the admission's gen++.
    r->gen--;
    s_release_pin(self, r);
    r->gen++;
    r->lk = S_LK_NONE;
}
