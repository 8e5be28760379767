/*  The hybrid block manager's state pool (kvt_ckpt): state slots and the
    LRU pool of HBM checkpoints, driven directly. */
#include <criterion/criterion.h>

#include "actors/scheduler/kvt_ckpt.h"

static kvt_hash_t H(uint64_t x)
{
    kvt_hash_t h = {x * 13 + 5, x};
    return h;
}

//  Reserves and commits a checkpoint of H(x); returns its entry.
static uint32_t take(kvt_ckpt_t *c, uint64_t x)
{
    uint32_t e = kvt_ckpt_reserve(c, H(x));
    cr_assert_neq(e, KVT_CKPT_NONE, "reserve of %llu refused", (unsigned long long)x);
    cr_assert_not(kvt_ckpt_has(c, H(x)), "a reservation is not valid before its step ran");
    kvt_ckpt_commit(c, e);
    cr_assert(kvt_ckpt_has(c, H(x)));
    return e;
}

Test(ckpt, state_slots_are_taken_and_given_back_through_one_path)
{
    kvt_ckpt_t *c = kvt_ckpt_new(2, 4);
    uint32_t a = kvt_ckpt_slot_take(c), b = kvt_ckpt_slot_take(c);
    cr_assert_neq(a, b);
    cr_assert_eq(kvt_ckpt_slot_take(c), KVT_CKPT_NONE, "two slots only");
    cr_assert_eq(kvt_ckpt_slots_free(c), 0);
    kvt_ckpt_slot_give(c, a);
    cr_assert_eq(kvt_ckpt_slots_free(c), 1);
    cr_assert_eq(kvt_ckpt_slot_take(c), a);
    kvt_ckpt_stats_t st;
    kvt_ckpt_stats(c, &st);
    cr_assert_eq(st.slots_refused, 1);
    cr_assert_eq(st.slots_in_use, 2);
    kvt_ckpt_destroy(&c);
    cr_assert_null(c);
}

Test(ckpt, checkpoints_are_evicted_oldest_first_and_a_refresh_makes_one_young)
{
    kvt_ckpt_t *c = kvt_ckpt_new(1, 3);
    take(c, 1);
    take(c, 2);
    take(c, 3);
    //  Taking 1 again only refreshes it: 2 is now the oldest.
    cr_assert_eq(kvt_ckpt_reserve(c, H(1)), KVT_CKPT_NONE);
    take(c, 4);
    cr_assert_not(kvt_ckpt_has(c, H(2)), "the oldest checkpoint is evicted");
    cr_assert(kvt_ckpt_has(c, H(1)));
    cr_assert(kvt_ckpt_has(c, H(3)));
    kvt_ckpt_stats_t st;
    kvt_ckpt_stats(c, &st);
    cr_assert_eq(st.evicted, 1);
    cr_assert_eq(st.refreshed, 1);
    cr_assert_eq(st.valid, 3);
    kvt_ckpt_destroy(&c);
}

Test(ckpt, a_pinned_checkpoint_is_never_evicted_while_a_restore_reads_it)
{
    kvt_ckpt_t *c = kvt_ckpt_new(1, 2);
    uint32_t e1 = take(c, 1);
    take(c, 2);
    cr_assert_eq(kvt_ckpt_pin(c, H(1)), e1);
    cr_assert_eq(kvt_ckpt_evictable(c), 1);
    take(c, 3); //  evicts 2, not the pinned 1
    cr_assert(kvt_ckpt_has(c, H(1)));
    cr_assert_not(kvt_ckpt_has(c, H(2)));
    cr_assert_eq(kvt_ckpt_pin(c, H(3)), kvt_ckpt_pin(c, H(3)));
    //  Every entry pinned: a reservation is refused, nothing is evicted.
    cr_assert_eq(kvt_ckpt_reserve(c, H(4)), KVT_CKPT_NONE);
    kvt_ckpt_stats_t st;
    kvt_ckpt_stats(c, &st);
    cr_assert_eq(st.full, 1);
    cr_assert_eq(st.pinned_entries, 2);
    kvt_ckpt_unpin(c, e1);
    cr_assert_eq(kvt_ckpt_pins(c, e1), 0);
    take(c, 4);
    cr_assert_not(kvt_ckpt_has(c, H(1)), "unpinned, it is evictable again");
    kvt_ckpt_destroy(&c);
}

Test(ckpt, an_abandoned_reservation_leaves_nothing_behind)
{
    kvt_ckpt_t *c = kvt_ckpt_new(1, 1);
    uint32_t e = kvt_ckpt_reserve(c, H(7));
    cr_assert_neq(e, KVT_CKPT_NONE);
    cr_assert_eq(kvt_ckpt_pins(c, e), 1, "a reservation holds its entry");
    cr_assert_eq(kvt_ckpt_reserve(c, H(8)), KVT_CKPT_NONE, "the only entry is reserved");
    kvt_ckpt_abandon(c, e);
    cr_assert_not(kvt_ckpt_has(c, H(7)));
    cr_assert_eq(kvt_ckpt_pin(c, H(7)), KVT_CKPT_NONE);
    take(c, 8);
    kvt_ckpt_stats_t st;
    kvt_ckpt_stats(c, &st);
    cr_assert_eq(st.abandoned, 1);
    cr_assert_eq(st.pinned_entries, 0);
    kvt_ckpt_destroy(&c);
}
