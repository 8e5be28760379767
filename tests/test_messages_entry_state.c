/*  test_messages_entry_state.c — an Entry's state work (keys 9-14: the
    request's state slot, the HBM checkpoint restored before the forward,
    the one taken after it) round-trips field by field inside a StepExec,
    is absent on the wire for a dense entry (which encodes as before), and
    an inconsistent one is refused naming its field. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "kvtier/kvt_msg.h"

static uint32_t g_blocks[2] = {5, 9};
static kvt_hash_t g_hashes[2];

//  A resumed hybrid entry: tokens [32, 40), blocks 0..2 of the request.
static kvt_entry_t s_entry(void)
{
    g_hashes[0] = (kvt_hash_t){.hi = 0x11, .lo = 0x22};
    g_hashes[1] = (kvt_hash_t){.hi = 0, .lo = 0};
    return (kvt_entry_t){.op = {42, 3},
                         .start = 32,
                         .end = 40,
                         .first_block = 1,
                         .blocks = g_blocks,
                         .hashes = g_hashes,
                         .nblocks = 2};
}

static kvt_msg_t s_exec(kvt_entry_t *e)
{
    kvt_msg_t m = {.kind = KVT_MSG_STEP_EXEC};
    m.u.step_exec = (kvt_step_exec_t){.step = 7, .rank = 1, .entries = e, .nentries = 1};
    return m;
}

static size_t s_roundtrip(const kvt_msg_t *in, kvt_msg_t *out)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    cr_assert_eq(kvt_msg_encode(in, &buf, &len), 0);
    kvt_msg_err_t err;
    memset(out, 0, sizeof *out);
    cr_assert_eq(kvt_msg_decode(buf, len, out, &err), 0, "%s: %s", err.field, err.reason);
    free(buf);
    return len;
}

static size_t s_len(const kvt_msg_t *in)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    cr_assert_eq(kvt_msg_encode(in, &buf, &len), 0);
    free(buf);
    return len;
}

Test(messages_entry_state, restore_and_take_round_trip_field_by_field)
{
    kvt_entry_t e = s_entry();
    e.state = true;
    e.state_slot = 6;
    e.restore_unit = 11;
    e.restore_at = 32;
    e.take_unit = 0; //  unit 0 is a unit: take_at says a take is there
    e.take_at = 40;
    kvt_msg_t in = s_exec(&e), out;
    s_roundtrip(&in, &out);
    cr_assert_eq(out.u.step_exec.nentries, 1);
    const kvt_entry_t *d = &out.u.step_exec.entries[0];
    cr_assert(d->state);
    cr_assert_eq(d->state_slot, 6);
    cr_assert_eq(d->restore_unit, 11);
    cr_assert_eq(d->restore_at, 32);
    cr_assert_eq(d->take_unit, 0);
    cr_assert_eq(d->take_at, 40);
    cr_assert_eq(d->start, 32);
    cr_assert_eq(d->blocks[1], 9);
    kvt_msg_clear(&out);
}

Test(messages_entry_state, slot_zero_without_restore_or_take_round_trips)
{
    kvt_entry_t e = s_entry();
    e.state = true; //  slot 0: the flag, not the slot, marks a hybrid entry
    kvt_msg_t in = s_exec(&e), out;
    s_roundtrip(&in, &out);
    const kvt_entry_t *d = &out.u.step_exec.entries[0];
    cr_assert(d->state);
    cr_assert_eq(d->state_slot, 0);
    cr_assert_eq(d->restore_at, 0);
    cr_assert_eq(d->take_at, 0);
    kvt_msg_clear(&out);
}

Test(messages_entry_state, dense_entry_carries_no_state_keys)
{
    kvt_entry_t dense = s_entry();
    kvt_msg_t in = s_exec(&dense), out;
    size_t base = s_roundtrip(&in, &out);
    cr_assert(!out.u.step_exec.entries[0].state);
    kvt_msg_clear(&out);
    kvt_entry_t hyb = s_entry();
    hyb.state = true;
    hyb.state_slot = 3;
    kvt_msg_t in2 = s_exec(&hyb);
    //  key 9 (bool) and key 10 (u32 3): two one-byte pairs more.
    cr_assert_eq(s_len(&in2), base + 4, "dense %zu, hybrid %zu", base, s_len(&in2));
}

//  Checks that kvt_msg_check and kvt_msg_encode refuse e naming `field`.
static void s_refused(kvt_entry_t *e, const char *field)
{
    kvt_msg_t in = s_exec(e);
    kvt_msg_err_t err;
    memset(&err, 0, sizeof err);
    cr_assert_neq(kvt_msg_check(&in, &err), 0, "accepted (%s)", field);
    cr_assert_not_null(strstr(err.field, field), "field '%s', expected %s (%s)", err.field, field,
                       err.reason);
    uint8_t *buf = NULL;
    size_t len = 0;
    cr_assert_neq(kvt_msg_encode(&in, &buf, &len), 0);
    free(buf);
}

Test(messages_entry_state, inconsistent_state_work_is_refused_naming_the_field)
{
    kvt_entry_t e = s_entry();
    e.state_slot = 4; //  a slot without the hybrid flag
    s_refused(&e, "state");
    e = s_entry();
    e.take_at = 40; //  a take without the flag
    s_refused(&e, "state");
    e = s_entry();
    e.state = true;
    e.restore_at = 33; //  restored past the first token computed
    s_refused(&e, "restore_at");
    e = s_entry();
    e.state = true;
    e.restore_unit = 2; //  a unit without a boundary
    s_refused(&e, "restore_unit");
    e = s_entry();
    e.state = true;
    e.take_at = 32; //  not after the first token computed
    s_refused(&e, "take_at");
    e = s_entry();
    e.state = true;
    e.take_at = 41; //  past end
    s_refused(&e, "take_at");
    e = s_entry();
    e.state = true;
    e.take_unit = 5; //  a unit without a boundary
    s_refused(&e, "take_unit");
}
