/*  Scheduler core: saves through the save tracker (kvt_saves.c), driven
    directly (no actors) through the rig in tests/common/kvt_test_sched_rig.h:
    when a save is built, one in flight per chunk key, leases and
    source_safe (S4), failed saves and their re-emit (S3), the save floor
    (S5) and the image a chunk save carries. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "common/kvt_test_sched_rig.h"

Test(saves, saves_are_built_only_after_the_forward_that_completed_them)
{
    rig_t r;
    rig_init(&r, 64, 64);
    rig_arrive(&r, 1, 200, 1000, 4);
    cr_assert_eq(rig_step(&r), 1);
    //  The first plan computes the prompt but saves nothing yet.
    cr_assert_eq(r.plan.nentries, 1);
    cr_assert_eq(r.plan.nsaves, 0);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.nsaves, 1);
    cr_assert_eq(r.plan.saves[0].start, 0);
    cr_assert_eq(r.plan.saves[0].end, 192);
    rig_deliver(&r);
    kvt_sched_destroy(&r.s);
}

Test(saves, finished_request_keeps_leases_until_save_verdicts)
{
    rig_t r;
    rig_init(&r, 64, 64);
    rig_arrive(&r, 1, 64, 1, 1);
    cr_assert_eq(rig_step(&r), 1); //  computes 64 tokens, finishes
    cr_assert_eq(rig_step(&r), 1); //  retires it and saves its chunk
    cr_assert_eq(r.plan.nsaves, 1);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.leased_blocks, CS / BS);
    cr_assert_eq(st.blocks_in_use, CS / BS, "the finished request keeps its blocks");
    cr_assert_eq(st.records, 1);
    rig_audit(&r);
    rig_deliver(&r);
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.blocks_in_use, 0);
    cr_assert_eq(st.records, 0);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(saves, failed_save_is_reemitted_once_while_running)
{
    rig_t r;
    rig_init(&r, 64, 64);
    r.fail_saves = true;
    rig_arrive(&r, 1, 64, 1, 40); //  long decode keeps it running
    rig_run(&r, 100);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.saves_reemitted, 1);
    //  The re-emitted chunk carried a new attempt, so its reports open a new key.
    cr_assert_eq(r.max_attempt, 1);
    cr_assert_eq(st.saves_failed, st.saves_dispatched);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(saves, no_tier_means_no_saves)
{
    rig_t r;
    rig_init(&r, 64, 0);
    rig_arrive(&r, 1, 300, 1, 2);
    rig_run(&r, 50);
    cr_assert_eq(r.saves_seen, 0);
    kvt_sched_destroy(&r.s);
}

Test(saves, one_save_in_flight_per_chunk_key_across_requests)
{
    rig_t r;
    rig_init(&r, 64, 64);
    //  Two requests with the same 130-token prompt admitted together: both
    //  compute the same two chunks in the same step.
    rig_arrive(&r, 1, 130, 7, 1);
    rig_arrive(&r, 2, 130, 7, 1);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.nentries, 2);
    cr_assert_eq(rig_step(&r), 1);
    //  Request 2's first chunk is complete too, but request 1's save of the
    //  same key is already out: not sent twice.
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.saves_dispatched, 2);
    cr_assert_eq(st.saves_skipped, 1);
    rig_deliver(&r);
    rig_run(&r, 50);
    kvt_sched_stats(r.s, &st);
    //  Request 2's second chunk completes once request 1's save of it
    //  settled: nothing of that key is in flight, and the scheduler keeps
    //  no view of what the tier holds, so it is saved again (the tier
    //  takes a repeated key as stored).
    cr_assert_eq(st.saves_dispatched, 3, "a key in flight is not sent twice");
    cr_assert_eq(st.saves_skipped, 1);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(saves, rule_S3_a_failure_with_no_retry_left_stops_the_requests_saves)
{
    rig_t r;
    rig_init(&r, 64, 64);
    r.fail_saves = true;
    rig_arrive(&r, 1, 200, 1, 80); //  decodes long enough to see several rounds
    rig_run(&r, 200);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.saves_reemitted, 1);
    cr_assert_eq(st.saves_stopped, 1);
    cr_assert_eq(st.saves_ok, 0);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  S3 end to end: one failed chunk save sends the frontier back to that
//  chunk, so the re-emitted save (a new attempt) covers exactly the failed
//  key again, and once it succeeds every chunk is stored.
Test(saves, rule_S3_a_failed_save_is_saved_again_from_the_failed_chunk)
{
    rig_t r;
    rig_init(&r, 64, 64);
    rig_arrive(&r, 1, 200, 1, 80);
    kvt_hash_t failed = {0, 0};
    uint32_t failed_attempt = 0;
    bool failed_once = false, resaved = false;
    for (uint32_t i = 0; i < 400; i++) {
        int rc = rig_step(&r);
        for (uint32_t k = 0; k < r.npending; k++) {
            kvt_verdict_t *v = &r.pending[k];
            if (v->chan != KVT_CHAN_SAVE)
                continue;
            if (!failed_once) {
                v->ok = false;
                v->detail = KVT_DETAIL_NO_SPACE;
                failed = v->key;
                failed_attempt = v->attempt;
                failed_once = true;
            } else if (kvt_hash_eq(v->key, failed)) {
                cr_assert_gt(v->attempt, failed_attempt, "the re-emit carries a new attempt");
                resaved = true;
            }
        }
        rig_deliver(&r);
        rig_audit(&r);
        if (rc == 0 && r.plan.idle)
            break;
    }
    cr_assert(failed_once);
    cr_assert(resaved, "the failed chunk was never saved again");
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.saves_failed, 1);
    cr_assert_eq(st.saves_reemitted, 1);
    cr_assert_eq(st.saves_stopped, 0);
    //  200 prompt + 80 decoded tokens: chunks [0, 256) of 64 tokens. The
    //  first plan saved [0, 192) and chunk 0 failed: the re-emit goes from
    //  the failed chunk (the frontier never passes a gap), so chunks 1 and
    //  2 are stored twice, 0 and 3 once.
    cr_assert_eq(st.saves_ok, 6, "saves_ok %llu", (unsigned long long)st.saves_ok);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  S5: the save floor of a request that loads is where its load ends — the
//  chunks the tier just gave back are never saved again.
Test(saves, rule_S5_a_loaded_prefix_is_not_saved_again)
{
    rig_t r;
    rig_init(&r, 12, 64);
    rig_arrive(&r, 1, 150, 100, 1);
    rig_run(&r, 50);
    rig_arrive(&r, 2, 150, 90000, 1);
    rig_run(&r, 50);
    cr_assert_eq(r.saves_seen, 4, "two full chunks of each 150-token prompt saved");
    rig_arrive(&r, 3, 150, 100, 1);
    rig_run(&r, 50);
    cr_assert_eq(r.loaded, 1, "request 3 restored [0, 128) from the tier");
    cr_assert_eq(r.saves_seen, 4, "request 3 saved %u chunks the tier already held",
                 r.saves_seen - 4);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(saves, a_chunk_save_carries_the_image_of_the_checkpoint_at_its_end)
{
    rig_t r;
    kvt_sched_cfg_t cfg = hybrid_cfg(16, 64, 128, 64, 64);
    rig_init_cfg(&r, &cfg);
    rig_arrive(&r, 1, 200, 100, 1); //  checkpoints at 128 (interval) and 192 (prompt)
    uint32_t images = 0, specs = 0;
    for (int i = 0; i < 20; i++) {
        int rc = rig_step(&r);
        for (uint32_t k = 0; k < r.plan.nsaves; k++) {
            const kvt_save_spec_t *sp = &r.plan.saves[k];
            specs++;
            plan_round_trips(&r.plan);
            if (!sp->image)
                continue;
            images++;
            cr_assert_eq(sp->state_boundary, sp->end, "the image goes with the last chunk");
            cr_assert(kvt_hash_eq(sp->state_hash, sp->keys[sp->nkeys - 1]));
            cr_assert(sp->end == 128 || sp->end == 192, "image at %u", sp->end);
        }
        rig_deliver(&r);
        rig_audit(&r);
        if (rc == 0 && r.plan.idle)
            break;
    }
    cr_assert_eq(images, 2);
    cr_assert_eq(specs, 2, "[0, 128) with the image at 128, [128, 192) with the one at 192");
    cr_assert(kvt_sched_quiescent(r.s), "the saves' checkpoint pins went back");
    kvt_sched_destroy(&r.s);
}

//  Saves whose store verdicts come only after their deadline (they expired
//  and drain) but say ok: the tier holds the chunks and the images that rode
//  with them, so the state index learns both images (sched.save_late_images)
//  although the saves settled failed; the drain still holds the leases.
Test(saves, a_late_ok_store_verdict_still_indexes_the_image_it_carried)
{
    rig_t r;
    kvt_sched_cfg_t cfg = hybrid_cfg(16, 64, 128, 64, 64);
    cfg.load_deadline_us = 5000;
    cfg.orphan_reclaim_us = 3000;
    cfg.save_retries = 0;
    rig_init_cfg(&r, &cfg);
    rig_arrive(&r, 1, 200, 100, 1); //  images at 128 (interval) and 192 (prompt)
    static kvt_verdict_t late[16];
    uint32_t nlate = 0, images = 0;
    for (int i = 0; i < 12; i++) {
        int rc = rig_step(&r);
        cr_assert_neq(rc, KVT_SCHED_REFUSED);
        for (uint32_t k = 0; rc > 0 && k < r.plan.nsaves; k++)
            images += r.plan.saves[k].image;
        //  The save verdicts are held back, the rest is delivered (a held
        //  plan, rc < 0, leaves the last plan in r.plan: not counted again).
        uint32_t keep = 0;
        for (uint32_t k = 0; k < r.npending; k++)
            if (r.pending[k].chan == KVT_CHAN_SAVE && nlate < 16)
                late[nlate++] = r.pending[k];
            else
                r.pending[keep++] = r.pending[k];
        r.npending = keep;
        rig_deliver(&r);
    }
    cr_assert_eq(images, 2, "images %u, saves held %u, finished %u", images, nlate, r.finished);
    cr_assert_eq(counter(&r, "stidx.images"), 0, "no verdict came yet");
    //  The deadline passes: both saves settle failed and drain.
    kvt_sched_set_now(r.s, 5000);
    cr_assert_neq(rig_step(&r), KVT_SCHED_REFUSED);
    rig_deliver(&r);
    cr_assert_eq(o_stats(&r).saves_expired, nlate);
    for (uint32_t k = 0; k < nlate; k++)
        cr_assert_eq(kvt_sched_verdict(r.s, &late[k]), 0);
    kvt_sched_stats_t st = o_stats(&r);
    cr_assert_eq(st.save_late_verdicts, nlate);
    cr_assert_eq(st.saves_ok, 0, "a late verdict settles nothing");
    cr_assert_eq(st.save_late_images, 2);
    cr_assert_eq(counter(&r, "stidx.images"), 2, "the tier holds both images: indexed");
    cr_assert_eq(counter(&r, "sched.save_late_images"), 2);
    rig_audit(&r);
    //  The drain ends: the leases go, nothing is left.
    kvt_sched_set_now(r.s, 8000);
    rig_run(&r, 50);
    cr_assert_eq(o_stats(&r).leased_blocks, 0);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(saves, rule_S4_a_finished_requests_tail_keeps_its_lease_until_the_next_plan_builds_it)
{
    rig_t r;
    rig_init(&r, 64, 64);
    rig_arrive(&r, 1, 128, 5, 1); //  finishes with the step that computes [0, 128)
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.nsaves, 0, "nothing forwarded yet");
    cr_assert_eq(kvt_sched_apply(r.s, r.step, true), 0);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.finished, 1);
    cr_assert_eq(st.leased_blocks, 8, "the unbuilt tail [0, 128) holds its 8 blocks");
    cr_assert_eq(counter(&r, "savetrack.tails_leased"), 1);
    rig_audit(&r);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.nsaves, 1, "the next plan builds the tail");
    cr_assert_eq(r.plan.saves[0].op.req, 1);
    cr_assert_eq(r.plan.saves[0].start, 0);
    cr_assert_eq(r.plan.saves[0].end, 128);
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.leased_blocks, 8, "the built saves hold the lease now");
    cr_assert_eq(counter(&r, "savetrack.tails_retired"), 0);
    rig_audit(&r);
    rig_deliver(&r);
    rig_run(&r, 20);
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.saves_ok, 2);
    cr_assert_eq(st.leased_blocks, 0);
    cr_assert_eq(st.blocks_in_use, 0);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

//  rule_S4_a_tail_the_plan_cannot_carry_is_retired_at_end_plan_and_released
//  is in test_sched_defects.c: it needs a plan that cannot carry the tail,
//  which only an allocation failure gives now.

Test(saves, rule_S4_source_safe_releases_a_saves_blocks_before_its_store_verdict)
{
    rig_t r;
    rig_init(&r, 64, 64);
    rig_arrive(&r, 1, 128, 5, 40);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.nsaves, 1);
    kvt_save_spec_t sp = r.plan.saves[0];
    cr_assert_eq(sp.nkeys, 2);
    kvt_hash_t keys[2] = {sp.keys[0], sp.keys[1]};
    sp.keys = keys;
    //  Preempted: the request lets its blocks go; the save's lease keeps
    //  the two chunks it reads.
    cr_assert_eq(kvt_sched_preempt(r.s, 1), 0);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.leased_blocks, 8);
    cr_assert_eq(st.blocks_in_use, 8);
    rig_audit(&r);
    //  A rank may still read them (a quarantined copy): nothing is released.
    kvt_verdict_t unsafe = safe_of(&sp, false);
    cr_assert_eq(kvt_sched_verdict(r.s, &unsafe), 0);
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.leased_blocks, 8);
    kvt_verdict_t safe = safe_of(&sp, true);
    cr_assert_eq(kvt_sched_verdict(r.s, &safe), 0);
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.leased_blocks, 0, "both chunks of the spec are released");
    cr_assert_eq(st.blocks_in_use, 0, "before the store verdicts");
    cr_assert_eq(st.saves_outstanding, 2, "the saves still wait for their store verdicts");
    rig_audit(&r);
    cr_assert_eq(kvt_sched_verdict(r.s, &safe), -1, "a duplicate is stale");
    uint64_t stale = st.stale_verdicts;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.stale_verdicts, stale + 1);
    rig_deliver(&r); //  the store verdicts
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.saves_ok, 2);
    cr_assert_eq(kvt_sched_verdict(r.s, &safe), -1, "a source_safe after the store is stale");
    rig_run(&r, 200);
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(counter(&r, "savetrack.leases_outstanding"), 0);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(saves, rule_S3_a_failed_save_is_reemitted_once_the_requests_saves_settled)
{
    rig_t r;
    rig_init(&r, 64, 64);
    rig_arrive(&r, 1, 128, 5, 200);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.nsaves, 1);
    cr_assert_eq(r.npending, 2, "two chunk saves");
    kvt_verdict_t second = r.pending[1];
    //  Chunk 0 fails while chunk 1 is still out: no re-emit yet.
    r.pending[0].ok = false;
    r.pending[0].detail = KVT_DETAIL_NO_SPACE;
    kvt_sched_verdict(r.s, &r.pending[0]);
    r.npending = 0;
    for (uint32_t i = 0; i < 3; i++) {
        cr_assert_eq(rig_step(&r), 1);
        cr_assert_eq(r.plan.nsaves, 0, "a re-emit waits until every save of the request settled");
    }
    kvt_sched_verdict(r.s, &second);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.nsaves, 1, "all quiescent: re-emitted");
    cr_assert_eq(r.plan.saves[0].start, 0, "from the failed chunk");
    cr_assert_eq(r.plan.saves[0].attempt, 1, "with a new attempt");
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.saves_reemitted, 1);
    rig_deliver(&r);
    rig_run(&r, 400);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(saves, rule_S3_a_failed_save_of_a_retired_request_is_dropped)
{
    rig_t r;
    rig_init(&r, 64, 64);
    rig_arrive(&r, 1, 128, 5, 40);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.npending, 2);
    cr_assert_eq(kvt_sched_abort(r.s, 1), 0);
    r.pending[0].ok = false;
    r.pending[0].detail = KVT_DETAIL_NO_SPACE;
    rig_deliver(&r);
    kvt_sched_stats_t st;
    kvt_sched_stats(r.s, &st);
    cr_assert_eq(st.saves_failed, 1);
    cr_assert_eq(st.saves_reemitted, 0, "a retired request re-emits nothing");
    cr_assert_eq(counter(&r, "savetrack.saves_dropped"), 1);
    rig_run(&r, 20);
    cr_assert_eq(r.saves_seen, 2, "nothing was saved again");
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}

Test(saves, rule_S5_a_lost_tier_hit_reopens_hbm_to_hit_and_nothing_else)
{
    rig_t r;
    rig_init(&r, 12, 64);
    rig_arrive(&r, 1, 150, 100, 1);
    rig_run(&r, 50);
    rig_arrive(&r, 2, 150, 90000, 1); //  evicts request 1's blocks but 2
    rig_run(&r, 50);
    uint32_t before = r.saves_seen;
    //  Request 3 loads [0, 128) from the tier above its 32-token HBM hit
    //  (chunk floor 0); the load fails: [0, 128) is saved again by the
    //  recompute, and nothing below the floor or above the hit is reopened.
    r.fail_loads = true;
    rig_arrive(&r, 3, 150, 100, 1);
    cr_assert_eq(rig_step(&r), 1);
    cr_assert_eq(r.plan.nloads, 1);
    uint32_t lo = r.plan.loads[0].start, hi = r.plan.loads[0].end;
    cr_assert_eq(lo, 0);
    cr_assert_eq(hi, 128);
    rig_deliver(&r);
    r.fail_loads = false;
    uint32_t saved_lo = UINT32_MAX, saved_hi = 0;
    for (uint32_t i = 0; i < 50; i++) {
        int rc = rig_step(&r);
        for (uint32_t k = 0; k < r.plan.nsaves; k++) {
            if (r.plan.saves[k].op.req != 3)
                continue;
            if (r.plan.saves[k].start < saved_lo)
                saved_lo = r.plan.saves[k].start;
            if (r.plan.saves[k].end > saved_hi)
                saved_hi = r.plan.saves[k].end;
        }
        rig_deliver(&r);
        if (rc == 0 && r.plan.idle)
            break;
    }
    cr_assert_eq(saved_lo, lo, "the lost hit [%u, %u) is saved again", lo, hi);
    cr_assert_eq(saved_hi, hi, "the 150-token prompt has no third full chunk");
    cr_assert_eq(r.saves_seen - before, 2);
    //  A load that succeeds reopens nothing (rule_S5_a_loaded_prefix_...).
    cr_assert_eq(counter(&r, "savetrack.floors_reopened"), 1);
    cr_assert(kvt_sched_quiescent(r.s));
    kvt_sched_destroy(&r.s);
}
