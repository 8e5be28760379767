/*  kvt_sched_audit — the scheduler core's counters and its audit (the
    counters' identities, the save tracker's own check, every block
    reference and state slot accounted for). See kvt_sched.h. */
#include <stdio.h>
#include <stdlib.h>

#include "actors/common/kvt_counters.h"
#include "kvt_sched_int.h"

// ----------------------------------------------------------- counters ----

void kvt_sched_counters(const kvt_sched_t *self, kvt_counter_t *c, uint32_t *n, uint32_t cap)
{
    kvt_sched_stats_t st;
    kvt_sched_stats(self, &st);
#define S_C(field) kvt_counter_add(c, n, cap, "sched." #field, st.field)
    S_C(arrivals);
    S_C(rejected);
    S_C(admitted);
    S_C(finished);
    S_C(hbm_hit_tokens);
    S_C(tier_hit_tokens);
    S_C(lower_hit_tokens);
    S_C(hbm_lost_tokens);
    S_C(loads_dispatched);
    S_C(loads_ok);
    S_C(loads_failed);
    S_C(saves_dispatched);
    S_C(saves_ok);
    S_C(saves_failed);
    S_C(saves_reemitted);
    S_C(saves_skipped);
    S_C(saves_stopped);
    S_C(stale_verdicts);
    S_C(stale_schedules);
    S_C(steps);
    S_C(steps_failed);
    S_C(plan_deferred);
    S_C(tokens_planned);
    S_C(waiting);
    S_C(running);
    S_C(loading);
    S_C(saves_outstanding);
    S_C(leased_blocks);
    S_C(blocks_in_use);
    S_C(records);
    S_C(aborted);
    S_C(preempted);
    S_C(loads_orphaned);
    S_C(loads_reclaimed);
    S_C(load_orphans);
    S_C(loads_timed_out);
    S_C(load_late_verdicts);
    S_C(loads_drained);
    S_C(saves_expired);
    S_C(saves_drained);
    S_C(save_late_verdicts);
    S_C(save_late_images);
    S_C(lookups_sent);
    S_C(lookup_timeouts);
    S_C(lookup_failed);
    S_C(lookup_releases);
    S_C(lookup_pins_used);
    S_C(lookup_refreshes);
    S_C(lookups_out);
    S_C(touches_planned);
    S_C(verify_holds);
    if (kvt_sched_hybrid(self)) {
        S_C(gate_lost_tokens);
        S_C(joint_state_hbm);
        S_C(joint_state_tier);
        S_C(tier_within_hbm);
        S_C(no_rung_above_hbm);
        S_C(partial_chunk_no_room);
        S_C(no_probe_demand);
        S_C(below_min_load);
        S_C(retreats_to_hbm);
        S_C(retreats_to_zero);
        S_C(convoy_waits);
        S_C(state_restores);
        S_C(state_loads);
        S_C(ckpt_takes);
        S_C(state_tax_tokens);
        S_C(state_resumes);
        S_C(grid_interval);
        S_C(grid_thinned);
    }
#undef S_C
    kvt_blockmgr_stats_t b;
    kvt_blockmgr_stats(self->bm, &b);
    kvt_counter_add(c, n, cap, "blocks.total", kvt_blockmgr_total(self->bm));
#define S_C(prefix, st, field) kvt_counter_add(c, n, cap, prefix #field, st.field)
    S_C("blocks.", b, allocated);
    S_C("blocks.", b, evicted);
    S_C("blocks.", b, registered);
    S_C("blocks.", b, duplicate_regs);
    S_C("blocks.", b, hit_blocks);
    S_C("blocks.", b, token_mismatch);
    S_C("blocks.", b, evicted_low);
    S_C("blocks.", b, peer_evictions);
    S_C("blocks.", b, withheld);
    if (kvt_saves_tracker(self->sv))
        kvt_savetrack_counters(kvt_saves_tracker(self->sv), c, n, cap);
    if (kvt_sched_hybrid(self)) {
        kvt_ckpt_stats_t k;
        kvt_ckpt_stats(self->ck, &k);
        static const char *const src_name[KVT_CKPT_SRCS] = {"grid", "branch", "prompt_end",
                                                            "decode_keep"};
        char name[48];
        for (int i = 0; i < KVT_CKPT_SRCS; i++) {
            snprintf(name, sizeof name, "ckpt.taken.%s", src_name[i]);
            kvt_counter_add(c, n, cap, name, k.taken_src[i]);
            snprintf(name, sizeof name, "ckpt.restored.%s", src_name[i]);
            kvt_counter_add(c, n, cap, name, k.restored_src[i]);
        }
        S_C("ckpt.", k, slots_taken);
        S_C("ckpt.", k, slots_refused);
        S_C("ckpt.", k, reserved);
        S_C("ckpt.", k, committed);
        S_C("ckpt.", k, abandoned);
        S_C("ckpt.", k, refreshed);
        S_C("ckpt.", k, evicted);
        S_C("ckpt.", k, evicted_gone);
        S_C("ckpt.", k, evicted_by_value);
        S_C("ckpt.", k, evicted_unsaved);
        S_C("ckpt.", k, full);
        S_C("ckpt.", k, slots_in_use);
        S_C("ckpt.", k, valid);
        S_C("ckpt.", k, pinned_entries);
        kvt_stidx_counters(self->stidx, c, n, cap);
    }
#undef S_C
}

// -------------------------------------------------------------- audit ----

//  Audit walkers: a lease's block references, a lease's checkpoint pin.
typedef struct {
    uint32_t *expect; //  references expected per block
    uint32_t blocks;  //  block references the leases hold
} s_audit_t;

static void s_audit_lease_blocks(void *arg, const uint32_t *blocks, uint32_t n, int32_t ck)
{
    s_audit_t *a = arg;
    for (uint32_t i = 0; i < n; i++)
        a->expect[blocks[i]]++;
    a->blocks += n;
    (void)ck;
}

static void s_audit_lease_ck(void *arg, const uint32_t *blocks, uint32_t n, int32_t ck)
{
    uint32_t *expect = arg;
    if (ck >= 0)
        expect[ck]++;
    (void)blocks;
    (void)n;
}

//  Every checkpoint pin belongs to a request (its hit, its restore, its
//  take) or a save lease (its image), and every held slot to a live
//  admission or an orphaned load.
static int s_audit_state(const kvt_sched_t *self, uint32_t orphan_slots, char *err, size_t errlen)
{
    uint32_t cap = kvt_ckpt_capacity(self->ck);
    uint32_t *expect = calloc(cap, sizeof(uint32_t));
    if (!expect) {
        snprintf(err, errlen, "audit: out of memory");
        return -1;
    }
    uint32_t slots = orphan_slots; //  an orphan's slot stays held until it settles (I2)
    for (uint32_t i = 0; i < kvt_reqtab_cap(self->rt); i++) {
        const kvt_sreq_t *r = kvt_reqtab_at(self->rt, i);
        if (r->state == R_FREE)
            continue;
        slots += r->sslot != KVT_CKPT_NONE;
        uint32_t e[3] = {r->load.ck_hit, r->ck_restore, r->ck_take};
        for (int k = 0; k < 3; k++)
            if (e[k] != KVT_CKPT_NONE)
                expect[e[k]]++;
    }
    kvt_saves_leases(self->sv, s_audit_lease_ck, expect);
    kvt_ckpt_stats_t k;
    kvt_ckpt_stats(self->ck, &k);
    int rc = -1;
    for (uint32_t e = 0; e < cap; e++)
        if (expect[e] != kvt_ckpt_pins(self->ck, e)) {
            snprintf(err, errlen, "audit: checkpoint %u has %u pins, expected %u", e,
                     kvt_ckpt_pins(self->ck, e), expect[e]);
            goto done;
        }
    if (slots != k.slots_in_use) {
        snprintf(err, errlen, "audit: %u state slots held, records hold %u", k.slots_in_use, slots);
        goto done;
    }
    rc = 0;
done:
    free(expect);
    return rc;
}

int kvt_sched_audit(const kvt_sched_t *self, char *err, size_t errlen)
{
    //  Cheap checks first: the counters' identities and the maps' sizes.
    kvt_sched_stats_t st;
    kvt_sched_stats(self, &st);
    if (st.saves_dispatched != st.saves_ok + st.saves_failed + st.saves_outstanding) {
        snprintf(err, errlen, "audit: saves dispatched != settled + outstanding");
        return -1;
    }
    if (st.loads_dispatched !=
        st.loads_ok + st.loads_failed + st.loads_reclaimed + st.loading + st.load_orphans) {
        snprintf(err, errlen, "audit: loads dispatched != settled + outstanding");
        return -1;
    }
    if (kvt_reqtab_check(self->rt, err, errlen) != 0 ||
        kvt_lookups_check(self->lk, self->rt, err, errlen) != 0 ||
        kvt_admit_check(self->ad, err, errlen) != 0)
        return -1;
    //  The save tracker's own identities and walk (its leases, its saves
    //  in flight per request).
    if (kvt_saves_check(self->sv, err, errlen) != 0)
        return -1;
    //  Then the full walk: every block reference is a request's or a lease.
    uint32_t total = kvt_blockmgr_total(self->bm);
    s_audit_t a = {.expect = calloc(total, sizeof(uint32_t))};
    if (!a.expect) {
        snprintf(err, errlen, "audit: out of memory");
        return -1;
    }
    int rc = -1;
    uint32_t waiting = 0, running = 0, loading = 0, records = 0;
    for (uint32_t i = 0; i < kvt_reqtab_cap(self->rt); i++) {
        const kvt_sreq_t *r = kvt_reqtab_at(self->rt, i);
        if (r->state == R_FREE)
            continue;
        records++;
        waiting += r->state == R_WAITING;
        running += r->state == R_RUNNING;
        loading += r->state == R_LOADING;
        //  A finished record stays only while the tracker holds something
        //  of it.
        if (r->state == R_DONE && !kvt_saves_tracked(self->sv, r)) {
            snprintf(err, errlen, "audit: finished request %llu is kept for nothing",
                     (unsigned long long)r->id);
            goto done;
        }
        for (uint32_t b = 0; b < r->nblocks; b++)
            a.expect[r->blocks[b]]++;
        for (uint32_t b = 0; b < r->load.npins; b++)
            a.expect[r->load.pins[b]]++;
    }
    uint32_t orphan_slots = 0;
    if (kvt_loadtrack_check(self->lt, a.expect, &orphan_slots, err, errlen) != 0)
        goto done;
    kvt_saves_leases(self->sv, s_audit_lease_blocks, &a);
    for (uint32_t b = 0; b < total; b++)
        if (a.expect[b] != kvt_blockmgr_refs(self->bm, b)) {
            snprintf(err, errlen, "audit: block %u has %u references, expected %u", b,
                     kvt_blockmgr_refs(self->bm, b), a.expect[b]);
            goto done;
        }
    if (waiting != st.waiting || running != st.running || loading != st.loading ||
        records != st.records) {
        snprintf(err, errlen,
                 "audit: gauges waiting/running/loading/records %u/%u/%u/%u, records say "
                 "%u/%u/%u/%u",
                 st.waiting, st.running, st.loading, st.records, waiting, running, loading,
                 records);
        goto done;
    }
    if (a.blocks != st.leased_blocks) {
        snprintf(err, errlen, "audit: leases hold %u block references, gauge %u", a.blocks,
                 st.leased_blocks);
        goto done;
    }
    if (kvt_sched_hybrid(self) && (s_audit_state(self, orphan_slots, err, errlen) != 0 ||
                                   kvt_stidx_check(self->stidx, true, err, errlen) != 0))
        goto done;
    rc = 0;
done:
    free(a.expect);
    return rc;
}
