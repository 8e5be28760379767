/*  kvt_sched — applying the last step and the step plan; see kvt_sched.h and
    kvt_sched.c. */
#include <string.h>

#include "kvt_sched_int.h"

//  The state side of an applied step: the checkpoint the entry took becomes
//  valid (or is dropped when the step failed), a restore that ran lets its
//  checkpoint go.
static void s_apply_state(kvt_sched_t *self, kvt_sreq_t *r, bool failed)
{
    if (!kvt_sched_hybrid(self))
        return;
    if (r->ck_take != KVT_CKPT_NONE) {
        if (failed)
            kvt_ckpt_abandon(self->ck, r->ck_take);
        else
            kvt_ckpt_commit(self->ck, r->ck_take);
        r->ck_take = KVT_CKPT_NONE;
    }
    if (r->restore_planned && !failed) {
        kvt_ckpt_count_restore(self->ck, r->ck_restore);
        kvt_ckpt_unpin(self->ck, r->ck_restore);
        r->ck_restore = KVT_CKPT_NONE;
        self->stats.state_restores++;
    }
    r->restore_planned = false;
}

//  The next boundary above `from` where request r takes a checkpoint, or 0,
//  and why (*src), from the sources its state policy uses
//  (cfg.state_policy): (a) the interval grid (every chunk boundary with
//  EVERY_CHUNK; none with MARCONI), (b) the prompt's last chunk boundary and
//  its end on the block grid (all but EVERY_CHUNK: for MARCONI they stand
//  for its "last decoded token", since a trace's outputs never recur in a
//  later prompt, the next turn resumes where the prompt ended), (c) the last
//  chunk boundary of the fed tokens (a decode keep: all but EVERY_CHUNK),
//  (d) the chunk boundary where its prompt left a cached prefix at admission
//  (a branch: KVTIER, MARCONI); (b)-(d) never with cfg.interval_checkpoints.
//  A boundary with two reasons counts as the first.
static uint32_t s_next_ckpt(const kvt_sched_t *self, const kvt_sreq_t *r, uint32_t from,
                            kvt_ckpt_src_t *src)
{
    kvt_sched_state_policy_t pol = self->cfg.state_policy;
    uint32_t cs = self->cfg.chunk_size;
    uint32_t iv = pol == KVT_STATE_POLICY_EVERY_CHUNK ? cs
                  : self->grid_iv                     ? self->grid_iv
                                                      : self->cfg.checkpoint_interval;
    uint64_t best = pol == KVT_STATE_POLICY_MARCONI ? UINT64_MAX : ((uint64_t)from / iv + 1) * iv;
    *src = KVT_CKPT_SRC_GRID;
    uint32_t extra[4] = {r->nprompt / cs * cs,
                         r->nprompt / self->cfg.block_size * self->cfg.block_size,
                         r->nfeed / cs * cs, r->branch_at};
    const kvt_ckpt_src_t why[4] = {KVT_CKPT_SRC_PROMPT_END, KVT_CKPT_SRC_PROMPT_END,
                                   KVT_CKPT_SRC_DECODE_KEEP, KVT_CKPT_SRC_BRANCH};
    //  Per policy, which of the four extra boundaries count.
    static const bool use[KVT_STATE_POLICIES][4] = {
        [KVT_STATE_POLICY_KVTIER] = {true, true, true, true},
        [KVT_STATE_POLICY_INTERVAL] = {true, true, true, false},
        [KVT_STATE_POLICY_EVERY_CHUNK] = {false, false, false, false},
        [KVT_STATE_POLICY_MARCONI] = {true, true, true, true},
    };
    for (int i = 0; i < 4 && !self->cfg.interval_checkpoints; i++)
        if (use[pol][i] && extra[i] > from && extra[i] < best) {
            best = extra[i];
            *src = why[i];
        }
    return best > r->nfeed ? 0 : (uint32_t)best;
}

//  KVTIER with grid_share_pct > 0: the grid follows the tiers' pressure.
//  At interval I the active requests' prompts want (sum of their prompt
//  tokens) / I grid checkpoints; the interval is the smallest
//  checkpoint_interval x 2^k (up to KVT_SCHED_GRID_MAX_CHUNKS chunks) whose
//  checkpoints take at most grid_share_pct % of the checkpoints the tiers
//  hold, so tiers with room keep the configured grid and small ones take a
//  grid checkpoint only every few thousand tokens, where a grid state and
//  its image would crowd out more KV than they save. O(active requests)
//  once per plan, as the plan's own walk.
static void s_grid(kvt_sched_t *self)
{
    self->grid_iv = 0;
    if (!kvt_sched_hybrid(self) || self->cfg.state_policy != KVT_STATE_POLICY_KVTIER ||
        self->cfg.grid_share_pct == 0 || self->cfg.interval_checkpoints)
        return;
    uint64_t want = 0;
    for (uint32_t slot = kvt_reqtab_head(self->rt, KVT_RQ_ACTIVE); slot != KVT_ILIST_NONE;
         slot = kvt_reqtab_next(self->rt, slot))
        want += kvt_reqtab_at(self->rt, slot)->nprompt;
    //  The checkpoints the two tiers hold: the HBM budget's units and, with
    //  state images in the tier, the images its chunks' bytes would hold.
    const kvt_sched_cfg_t *c = &self->cfg;
    uint64_t units = kvt_ckpt_capacity(self->ck);
    if (!c->no_state_tier && c->tier_chunks && c->block_bytes)
        units += (uint64_t)c->tier_chunks * self->bpc * c->block_bytes / c->state_bytes;
    //  want / iv > room, in integers: want x 100 > iv x pct x units.
    uint64_t room = (uint64_t)c->grid_share_pct * units;
    uint32_t iv = self->cfg.checkpoint_interval,
             most = KVT_SCHED_GRID_MAX_CHUNKS * self->cfg.chunk_size;
    while (iv < most && want * 100 > (uint64_t)iv * room)
        iv *= 2;
    self->grid_iv = iv;
    if (want)
        self->stats.grid_interval = iv;
    self->stats.grid_thinned += iv > self->cfg.checkpoint_interval;
}

//  Appends a state op of request r to the plan (0, or -1 when out of
//  memory).
static int s_state_op(kvt_sched_t *self, kvt_sreq_t *r, uint8_t kind, uint32_t entry, uint32_t at)
{
    kvt_sched_state_op_t op = {.op = {r->id, r->gen},
                               .kind = kind,
                               .slot = r->sslot,
                               .entry = entry,
                               .at = at,
                               .key =
                                   kvt_reqtab_hash_at(self->rt, r, at / self->cfg.block_size - 1)};
    return kvt_planbuf_add_state(self->pb, &op);
}

// ----------------------------------------------------------- applying ----

//  Applies the step that just ran: its tokens are computed, its full blocks
//  become shareable, finished requests retire (saving their last chunks).
//  With `failed`, none of it counts: the tokens are planned again.
static void s_apply_last_step(kvt_sched_t *self, bool failed)
{
    if (failed)
        self->stats.steps_failed++;
    uint32_t slot = kvt_reqtab_head(self->rt, KVT_RQ_ACTIVE);
    while (slot != KVT_ILIST_NONE) {
        uint32_t next = kvt_reqtab_next(self->rt, slot);
        kvt_sreq_t *r = kvt_reqtab_at(self->rt, slot);
        if (r->state == R_RUNNING && r->planned_end > 0) {
            s_apply_state(self, r, failed);
            if (!failed) {
                r->computed = r->planned_end;
                kvt_reqtab_index_blocks(self->rt, r, r->computed, self->bm);
            }
            r->planned_end = 0;
        }
        if (r->state == R_RUNNING && (r->computed >= r->nfeed || r->stop)) {
            uint32_t generated = r->computed >= r->nfeed     ? r->max_new
                                 : r->computed >= r->nprompt ? r->computed - r->nprompt + 1
                                                             : 0;
            r->state = R_DONE;
            kvt_reqtab_unlink(self->rt, KVT_RQ_ACTIVE, slot);
            self->stats.running--;
            self->stats.finished++;
            kvt_sched_event(self, r->id, r->gen, KVT_EV_FINISH, r->nprompt, generated, 0);
            kvt_saves_finish(self->sv, slot);
            kvt_sched_retire(self, slot);
        }
        slot = next;
    }
}

// ----------------------------------------------------------- planning ----

static int s_plan_entry(kvt_sched_t *self, kvt_sreq_t *r, uint32_t start, uint32_t end)
{
    uint32_t bs = self->cfg.block_size;
    //  A continuing entry starts one block before its first token: the
    //  forward reads that block (its context) and carries it (the oracle).
    uint32_t first = r->verify_end ? 0 : start / bs > 0 ? start / bs - 1 : 0;
    uint32_t last = (end - 1) / bs;
    uint32_t n = last - first + 1;
    uint32_t *blocks;
    kvt_hash_t *hashes;
    if (kvt_planbuf_add_entry(self->pb, (kvt_opid_t){r->id, r->gen}, start, end, first,
                              r->verify_end, n, &blocks, &hashes) != 0)
        return -1;
    for (uint32_t b = first; b <= last; b++) {
        *blocks++ = r->blocks[b];
        kvt_hash_t zero = {0, 0};
        *hashes++ = (b + 1) * bs <= end ? kvt_reqtab_hash_at(self->rt, r, b) : zero;
    }
    //  A hybrid entry names the request's state slot (its restore and take
    //  are added with their ops, s_plan_entry_state).
    if (r->sslot != KVT_CKPT_NONE) {
        kvt_entry_t *e = kvt_planbuf_last_entry(self->pb);
        e->state = true;
        e->state_slot = r->sslot;
    }
    r->verify_end = 0;
    r->planned_end = end;
    return 0;
}

//  The state work of a hybrid entry ending at `end`: the restore its slot
//  still needs (before the forward) and the checkpoint it takes at a
//  checkpoint boundary (after it), as state ops and on the entry itself
//  (the core emits whole entries).
static void s_plan_entry_state(kvt_sched_t *self, kvt_sreq_t *r, uint32_t end, bool boundary,
                               kvt_ckpt_src_t src)
{
    kvt_entry_t *en = kvt_planbuf_last_entry(self->pb);
    if (r->ck_restore != KVT_CKPT_NONE &&
        s_state_op(self, r, KVT_SCHED_STATE_RESTORE, r->ck_restore, r->restore_at) == 0) {
        r->restore_planned = true;
        if (r->restore_at > 0) {
            en->restore_unit = r->ck_restore;
            en->restore_at = r->restore_at;
        }
    }
    if (!boundary || r->ck_take != KVT_CKPT_NONE)
        return;
    kvt_hash_t h = kvt_reqtab_hash_at(self->rt, r, end / self->cfg.block_size - 1);
    uint32_t e = kvt_sched_ckpt_reserve(self, h);
    uint32_t from = r->ck_from < end ? r->ck_from : 0;
    r->ck_from = end;
    if (e == KVT_CKPT_NONE)
        return; //  already held (refreshed), or every entry pinned (counted by the pool)
    if (s_state_op(self, r, KVT_SCHED_STATE_TAKE, e, end) != 0) {
        kvt_ckpt_abandon(self->ck, e);
        return;
    }
    kvt_ckpt_set_source(self->ck, e, src);
    kvt_ckpt_set_span(self->ck, e, from, end);
    r->ck_take = e;
    r->take_at = end;
    en->take_unit = e;
    en->take_at = end;
    self->stats.ckpt_takes++;
}

//  Admits the waiting request in `slot` when the admission decides so
//  (kvt_admit): the coordinator moves it to the active list, loading (the
//  admission handed its load to the load tracker) or running. KVT_ADMIT_WAIT (admission
//  stops), KVT_ADMIT_LOOKUP (it waits, others go on), or 1 when admitted.
static int s_admit(kvt_sched_t *self, uint32_t slot)
{
    kvt_sreq_t *r = kvt_reqtab_at(self->rt, slot);
    int rc = kvt_admit_try(self->ad, r, self->now_us);
    if (rc == KVT_ADMIT_WAIT || rc == KVT_ADMIT_LOOKUP)
        return rc;
    kvt_reqtab_unlink(self->rt, KVT_RQ_WAITING, slot);
    kvt_reqtab_append(self->rt, KVT_RQ_ACTIVE, slot);
    self->stats.waiting--;
    self->stats.admitted++;
    if (rc == KVT_ADMIT_LOADING) {
        r->state = R_LOADING; //  the admission handed its load to kvt_loadtrack_start
        self->stats.loading++;
        r->ck_from = r->load.end;
    } else {
        r->ck_from = r->computed;
        r->state = R_RUNNING;
        self->stats.running++;
    }
    return 1;
}

void kvt_sched_set_now(kvt_sched_t *self, uint64_t now_us)
{
    if (now_us > self->now_us)
        self->now_us = now_us;
}

uint64_t kvt_sched_now(const kvt_sched_t *self)
{
    return self->now_us;
}

int kvt_sched_apply(kvt_sched_t *self, uint64_t step, bool ok)
{
    if (self->applied || step + 1 != self->next_step)
        return -1;
    kvt_planbuf_open(self->pb);
    s_apply_last_step(self, !ok);
    self->applied = true;
    return 0;
}

int kvt_sched_finish(kvt_sched_t *self, uint64_t req)
{
    uint32_t slot;
    if (!kvt_reqtab_find(self->rt, req, &slot))
        return -1;
    kvt_sreq_t *r = kvt_reqtab_at(self->rt, slot);
    if (r->state != R_RUNNING || r->stop)
        return -1;
    r->stop = true;
    return 0;
}

int kvt_sched_plan(kvt_sched_t *self, uint64_t step, bool prev_failed, kvt_step_plan_t *plan)
{
    if (step != self->next_step) {
        self->stats.stale_schedules++;
        return KVT_SCHED_REFUSED;
    }
    kvt_planbuf_open(self->pb);
    //  A held step's second call (or a plan after kvt_sched_apply) finds
    //  the last step applied already.
    if (!self->applied)
        s_apply_last_step(self, prev_failed);
    self->applied = true;
    //  Orphans whose verdict never came go back before admission (I2), and
    //  loads no rank reported on by their deadline settle failed.
    kvt_loadtrack_reclaim(self->lt, self->now_us);
    kvt_sched_expire_loads(self);

    //  Saves: the tails of requests that finished (their one chance), then
    //  the chunks the step that just ran completed.
    for (uint32_t slot = kvt_reqtab_head(self->rt, KVT_RQ_TAILS); slot != KVT_ILIST_NONE;
         slot = kvt_reqtab_next(self->rt, slot))
        kvt_saves_emit(self->sv, slot);
    for (uint32_t slot = kvt_reqtab_head(self->rt, KVT_RQ_ACTIVE); slot != KVT_ILIST_NONE;
         slot = kvt_reqtab_next(self->rt, slot))
        if (kvt_reqtab_at(self->rt, slot)->state == R_RUNNING)
            kvt_saves_emit(self->sv, slot);

    //  Admission, FIFO: stop at the first request that does not fit. A
    //  request waiting for its tier lookup holds up no one behind it, but
    //  takes a place among the max_running candidates (so lookups go out
    //  only for requests that could be admitted).
    uint32_t lookup_waits = 0;
    for (uint32_t slot = kvt_reqtab_head(self->rt, KVT_RQ_WAITING);
         slot != KVT_ILIST_NONE &&
         self->stats.running + self->stats.loading + lookup_waits < self->cfg.max_running;) {
        uint32_t next = kvt_reqtab_next(self->rt, slot);
        int rc = s_admit(self, slot);
        if (rc == 0)
            break;
        lookup_waits += rc == KVT_ADMIT_LOOKUP;
        slot = next;
    }

    s_grid(self);
    //  Decodes first (one token each), then prefill chunks within the budget.
    uint32_t budget = self->cfg.step_tokens;
    for (uint32_t pass = 0; pass < 2; pass++) {
        for (uint32_t slot = kvt_reqtab_head(self->rt, KVT_RQ_ACTIVE);
             slot != KVT_ILIST_NONE && budget > 0; slot = kvt_reqtab_next(self->rt, slot)) {
            kvt_sreq_t *r = kvt_reqtab_at(self->rt, slot);
            if (r->state != R_RUNNING || r->stop)
                continue;
            bool decoding = r->computed >= r->nprompt;
            if (decoding != (pass == 0))
                continue;
            uint32_t end = decoding ? r->computed + 1 : r->nprompt;
            if (end - r->computed > budget)
                end = r->computed + budget;
            //  A hybrid prefill chunk ends on the next checkpoint boundary,
            //  so the state there can be taken.
            kvt_ckpt_src_t src = KVT_CKPT_SRC_GRID;
            uint32_t ckb = kvt_sched_hybrid(self) ? s_next_ckpt(self, r, r->computed, &src) : 0;
            if (ckb && end > ckb)
                end = ckb;
            if (s_plan_entry(self, r, r->computed, end) != 0)
                break;
            budget -= end - r->computed;
            if (kvt_sched_hybrid(self))
                s_plan_entry_state(self, r, end, end == ckb, src);
        }
    }
    kvt_planbuf_counts_t pc;
    kvt_planbuf_counts(self->pb, &pc);
    bool work =
        pc.entries || pc.loads || pc.saves || pc.state || pc.lookups || pc.releases || pc.touches;
    //  An orphan holds no plan back: it owes no work, and the reclaim that
    //  ends a lost one runs only in a plan with a later clock, so holding
    //  for it could wait forever (and keep the abort's FINISH event in).
    //  It only keeps the core from idling.
    bool outstanding = self->stats.loading > 0 || kvt_saves_outstanding(self->sv) > 0 ||
                       kvt_lookups_out(self->lk) > 0;
    kvt_saves_end_plan(self->sv);
    if (!work && outstanding) {
        kvt_planbuf_close(self->pb); //  nothing was added: the next call starts afresh
        return KVT_SCHED_HOLD;
    }
    self->stats.steps++;
    self->next_step = step + 1;
    self->applied = false;
    kvt_planbuf_finish(self->pb, step, plan);
    kvt_planbuf_counts(self->pb, &pc);
    plan->idle = !work && !outstanding && kvt_loadtrack_orphans(self->lt) == 0 &&
                 self->stats.waiting == 0 && pc.events == 0;
    return work ? 1 : 0;
}
