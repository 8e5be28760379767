/*  The simulated forward as a recurrence (kvt_sim_runner_core without a
    device: the forward runs inside exec over plain memory). The state a
    forward leaves is computed from the state it read, so a wrong slot stays
    wrong; the oracle sees it where the state is observable: a checkpoint
    taken, an image saved, a request's end (when its slot gets its next
    owner, or the end-of-run sweep). Each state fault (stale slot, late
    restore, swapped slots) is caught there and not by the resume check. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "replay/kvt_oracle.h"
#include "replay/kvt_sim_runner_core.h"

#define BS     16  //  tokens per block
#define IV     32  //  checkpoint interval (chunk)
#define NBLK   64  //  device blocks
#define PBB    64  //  bytes of a block in one (plane, layer)
#define SLOTS  4   //  state slots
#define UNITS  8   //  checkpoint units
#define SBYTES 520 //  bytes of a state (not a multiple of the compare run)

typedef struct {
    uint8_t kv[NBLK][PBB];        //  one plane, one layer
    uint8_t slots[SLOTS][SBYTES]; //  state slots
    uint8_t units[UNITS][SBYTES]; //  checkpoint units
    kvt_sim_runner_core_t *r;     //  the core under test
} dev_t_;

static void *s_block(void *arg, uint32_t plane, uint32_t layer, uint32_t block)
{
    dev_t_ *d = arg;
    return plane == 0 && layer == 0 && block < NBLK ? d->kv[block] : NULL;
}

static void *s_state(void *arg, kvt_gpu_state_pool_t pool, uint32_t i)
{
    dev_t_ *d = arg;
    if (pool == KVT_GPU_STATE_SLOTS)
        return i < SLOTS ? d->slots[i] : NULL;
    return i < UNITS ? d->units[i] : NULL;
}

//  A device and a core with the given state faults.
static dev_t_ *s_open(uint32_t stale, uint32_t late, uint32_t swap)
{
    dev_t_ *d = calloc(1, sizeof *d);
    cr_assert_not_null(d);
    kvt_sim_runner_core_cfg_t c;
    memset(&c, 0, sizeof c);
    c.block_size = BS;
    c.planes = 1;
    c.layers = 1;
    c.num_blocks = NBLK;
    c.plane_block_bytes[0] = PBB;
    c.block = s_block;
    c.block_arg = d;
    c.state_slots = SLOTS;
    c.ckpt_units = UNITS;
    c.state_bytes = SBYTES;
    c.ckpt_interval = IV;
    c.state = s_state;
    c.state_arg = d;
    c.fault_stale_slot = stale;
    c.fault_restore_late = late;
    c.fault_swap_slots = swap;
    d->r = kvt_sim_runner_core_new(&c);
    cr_assert_not_null(d->r);
    return d;
}

static void s_close(dev_t_ *d)
{
    kvt_sim_runner_core_destroy(&d->r);
    free(d);
}

//  Request req's prefix: block i's hash, distinct per request (its blocks
//  are blocks req*8 + i on the device).
static kvt_hash_t s_h(uint64_t req, uint32_t i)
{
    return (kvt_hash_t){0xA000 + req, 0xB000 + i};
}

//  What one request computes in a step, with room for its arrays.
typedef struct {
    kvt_entry_t e;        //  the entry
    uint32_t blocks[8];   //  its device blocks
    kvt_hash_t hashes[8]; //  their hashes
} ent_t;

//  Request req (prefix of `pfx`'s hashes and blocks) computes [start, end)
//  in slot `slot`; first_block 0 when it verifies.
static void s_ent(ent_t *x, uint64_t req, uint64_t pfx, uint32_t start, uint32_t end,
                  uint32_t verify_end, uint32_t slot)
{
    memset(x, 0, sizeof *x);
    uint32_t first = verify_end ? 0 : start / BS, last = (end - 1) / BS;
    for (uint32_t b = first; b <= last; b++) {
        x->blocks[b - first] = (uint32_t)pfx * 8 + b;
        x->hashes[b - first] = (b + 1) * BS <= end ? s_h(pfx, b) : (kvt_hash_t){0, 0};
    }
    x->e.op = (kvt_opid_t){req, 1};
    x->e.start = start;
    x->e.end = end;
    x->e.first_block = first;
    x->e.blocks = x->blocks;
    x->e.hashes = x->hashes;
    x->e.nblocks = last - first + 1;
    x->e.verify_end = verify_end;
    x->e.state = true;
    x->e.state_slot = slot;
}

//  Runs one step of n entries (and `saves`); returns its StepDone's wrong count.
static uint32_t s_step(dev_t_ *d, uint64_t step, ent_t *xs, uint32_t n, kvt_save_spec_t *saves,
                       uint32_t nsaves, kvt_load_spec_t *loads, uint32_t nloads,
                       kvt_sim_runner_out_t *out)
{
    kvt_entry_t es[4];
    for (uint32_t i = 0; i < n; i++)
        es[i] = xs[i].e;
    kvt_step_exec_t x;
    memset(&x, 0, sizeof x);
    x.step = step;
    x.entries = n ? es : NULL;
    x.nentries = n;
    x.saves = saves;
    x.nsaves = nsaves;
    x.loads = loads;
    x.nloads = nloads;
    kvt_sim_runner_core_exec(d->r, &x, out);
    cr_assert(!out->pending);
    cr_assert(out->done.ok, "step %llu: %s", (unsigned long long)step,
              out->refused ? out->refused : "");
    return out->done.nwrong;
}

static kvt_sim_runner_stats_t s_stats(dev_t_ *d)
{
    kvt_sim_runner_stats_t st;
    kvt_sim_runner_core_stats(d->r, &st);
    return st;
}

//  Request 1 computes [0, 32) in slot 0 and takes unit 0 at 32 (step 1).
static void s_first_request(dev_t_ *d)
{
    ent_t a;
    kvt_sim_runner_out_t out;
    s_ent(&a, 1, 1, 0, 32, 0, 0);
    a.e.take_unit = 0;
    a.e.take_at = 32;
    cr_assert_eq(s_step(d, 1, &a, 1, NULL, 0, NULL, 0, &out), 0);
}

//  An image save of request req's state h from checkpoint unit `unit`.
static kvt_save_spec_t s_image(uint64_t req, uint32_t unit, kvt_hash_t h)
{
    kvt_save_spec_t sv;
    memset(&sv, 0, sizeof sv);
    sv.op = (kvt_opid_t){req, 1};
    sv.image = true;
    sv.state_boundary = 32;
    sv.state_hash = h;
    sv.state_slot = unit;
    return sv;
}

//  A chaos-free sequence: two admissions from 0, a resume from the
//  checkpoint, continuing chunks with takes, an image save, a slot reused,
//  the sweep: every check runs, none is wrong, nothing is untracked.
Test(oracle_carry, chaos_free_sequence_checks_everything_and_finds_nothing)
{
    dev_t_ *d = s_open(0, 0, 0);
    kvt_sim_runner_out_t out;
    s_first_request(d);
    //  Request 2 resumes at 32 from unit 0 into slot 1 and goes to 64.
    ent_t b[2];
    s_ent(&b[0], 2, 1, 32, 64, 32, 1);
    b[0].e.restore_unit = 0;
    b[0].e.restore_at = 32;
    b[0].e.take_unit = 1;
    b[0].e.take_at = 64;
    s_ent(&b[1], 1, 1, 32, 40, 0, 0); //  request 1 decodes in its block
    cr_assert_eq(s_step(d, 2, b, 2, NULL, 0, NULL, 0, &out), 0);
    //  Step 3 saves unit 1's image; request 1 crosses 48.
    kvt_save_spec_t sv;
    memset(&sv, 0, sizeof sv);
    sv.op = (kvt_opid_t){2, 1};
    sv.image = true;
    sv.state_boundary = 64;
    sv.state_hash = s_h(1, 3);
    sv.state_slot = 1;
    ent_t c;
    s_ent(&c, 1, 1, 40, 49, 0, 0);
    cr_assert_eq(s_step(d, 3, &c, 1, &sv, 1, NULL, 0, &out), 0);
    //  Request 1 ended; request 3 is admitted from 0 into slot 0.
    ent_t e;
    s_ent(&e, 3, 3, 0, 16, 0, 0);
    cr_assert_eq(s_step(d, 4, &e, 1, NULL, 0, NULL, 0, &out), 0);
    const kvt_sim_runner_wrong_t *where;
    cr_assert_eq(kvt_sim_runner_core_sweep(d->r, &where), 0);
    kvt_sim_runner_stats_t st = s_stats(d);
    cr_assert_eq(st.takes_checked, 2);
    cr_assert_eq(st.images_checked, 1);
    cr_assert_eq(st.ends_checked, 1, "request 1's end, at request 3's admission");
    cr_assert_eq(st.sweep_checked, 5, "the slots of requests 2 and 3, the KV ends of 1, 2 and 3");
    cr_assert_eq(st.kv_ends_checked, 0, "no KV end was overwritten before the sweep");
    cr_assert_eq(st.states_reset, 2);
    cr_assert_eq(st.states_written, 4, "32, 64, 48, 16");
    cr_assert_eq(st.takes_wrong + st.images_wrong + st.ends_wrong + st.sweep_wrong, 0);
    cr_assert_eq(st.states_untracked, 0);
    cr_assert_eq(st.states_verified, 1);
    cr_assert_eq(st.states_wrong, 0);
    s_close(d);
}

//  A forward from token 0 starts from the initial state: the runner resets
//  the slot (the engine's part), so a slot left by another request is
//  harmless; with fault_stale_slot = 1 it is not reset, and the state the
//  forward computes from it is wrong at the checkpoint it takes.
static void s_stale(uint32_t fault, uint32_t *wrong, kvt_sim_runner_stats_t *st)
{
    dev_t_ *d = s_open(fault, 0, 0);
    kvt_sim_runner_out_t out;
    s_first_request(d);
    ent_t b;
    s_ent(&b, 2, 2, 0, 32, 0, 0); //  request 2 takes slot 0 from token 0
    b.e.take_unit = 1;
    b.e.take_at = 32;
    *wrong = s_step(d, 2, &b, 1, NULL, 0, NULL, 0, &out);
    if (*wrong) {
        cr_assert_eq(out.done.wrong[0], 2);
        cr_assert_eq(out.where[0].check, KVT_RUNNER_AT_TAKE);
        cr_assert_eq(out.where[0].block, 1, "names the checkpoint unit");
    }
    *st = s_stats(d);
    s_close(d);
}

Test(oracle_carry, stale_slot_is_caught_at_the_checkpoint_taken)
{
    uint32_t wrong;
    kvt_sim_runner_stats_t st;
    s_stale(0, &wrong, &st);
    cr_assert_eq(wrong, 0, "reset: right");
    cr_assert_eq(st.states_reset, 2);
    s_stale(1, &wrong, &st);
    cr_assert_eq(wrong, 1, "the stale slot is carried into the checkpoint");
    cr_assert_eq(st.faults_injected, 1);
    cr_assert_eq(st.states_reset, 1);
    cr_assert_eq(st.takes_wrong, 1);
    cr_assert_eq(st.states_wrong + st.blocks_wrong, 0, "no resume check saw it");
}

//  fault_restore_late = 1: request 2's checkpoint restore lands after its
//  forward read the slot (the resume check still sees the restored bytes):
//  the forward computed from the slot's old bytes, the checkpoint it takes
//  is wrong.
static void s_late(uint32_t fault, uint32_t *wrong, kvt_sim_runner_stats_t *st)
{
    dev_t_ *d = s_open(0, fault, 0);
    kvt_sim_runner_out_t out;
    s_first_request(d);
    ent_t b;
    s_ent(&b, 2, 1, 32, 64, 32, 1);
    b.e.restore_unit = 0;
    b.e.restore_at = 32;
    b.e.take_unit = 1;
    b.e.take_at = 64;
    *wrong = s_step(d, 2, &b, 1, NULL, 0, NULL, 0, &out);
    if (*wrong)
        cr_assert_eq(out.where[0].check, KVT_RUNNER_AT_TAKE);
    *st = s_stats(d);
    s_close(d);
}

Test(oracle_carry, late_restore_is_caught_at_the_checkpoint_taken)
{
    uint32_t wrong;
    kvt_sim_runner_stats_t st;
    s_late(0, &wrong, &st);
    cr_assert_eq(wrong, 0);
    s_late(1, &wrong, &st);
    cr_assert_eq(wrong, 1);
    cr_assert_eq(st.faults_injected, 1);
    cr_assert_eq(st.states_verified, 1, "the resume was checked ...");
    cr_assert_eq(st.states_wrong, 0, "... and looked right");
    cr_assert_eq(st.takes_wrong, 1);
}

//  fault_swap_slots = 1: requests 1 and 2 (slots 0 and 1) run one step in
//  each other's slot, then a step in their own; neither takes a
//  checkpoint, so their ends show it (the sweep here).
static void s_swap(uint32_t fault, uint32_t *wrong, kvt_sim_runner_stats_t *st)
{
    dev_t_ *d = s_open(0, 0, fault);
    kvt_sim_runner_out_t out;
    ent_t a[2];
    s_ent(&a[0], 1, 1, 0, 20, 0, 0);
    s_ent(&a[1], 2, 2, 0, 20, 0, 1);
    cr_assert_eq(s_step(d, 1, a, 2, NULL, 0, NULL, 0, &out), 0, "admissions are not swapped");
    s_ent(&a[0], 1, 1, 20, 33, 0, 0);
    s_ent(&a[1], 2, 2, 20, 33, 0, 1);
    cr_assert_eq(s_step(d, 2, a, 2, NULL, 0, NULL, 0, &out), 0, "the swap step itself");
    //  Back in their own slots, both advance again (to 48): the forward
    //  computes from what the swap left there, so that stays wrong.
    s_ent(&a[0], 1, 1, 33, 49, 0, 0);
    s_ent(&a[1], 2, 2, 33, 49, 0, 1);
    cr_assert_eq(s_step(d, 3, a, 2, NULL, 0, NULL, 0, &out), 0);
    const kvt_sim_runner_wrong_t *where;
    *wrong = kvt_sim_runner_core_sweep(d->r, &where);
    if (*wrong)
        cr_assert_eq(where[0].check, KVT_RUNNER_AT_SWEEP);
    cr_assert_eq(kvt_sim_runner_core_sweep(d->r, &where), 0, "each state is swept once");
    *st = s_stats(d);
    s_close(d);
}

Test(oracle_carry, swapped_slots_are_caught_at_the_requests_ends)
{
    uint32_t wrong;
    kvt_sim_runner_stats_t st;
    s_swap(0, &wrong, &st);
    cr_assert_eq(wrong, 0);
    //  These entries name no context block (first_block = start / bs), so
    //  no step reads the last block of the one before: the sweep finds each
    //  step's KV end open, three per request.
    cr_assert_eq(st.sweep_checked, 2 + 6, "both slots and six KV ends");
    s_swap(1, &wrong, &st);
    cr_assert_eq(wrong, 2, "both requests computed from the other's state");
    cr_assert_eq(st.faults_injected, 1);
    cr_assert_eq(st.sweep_wrong, 2);
    cr_assert_eq(st.states_wrong + st.blocks_wrong, 0);
}

//  A slot changed after its owner's last forward: seen when its next owner
//  comes, whether that is a forward from token 0 or a tier load's state
//  leg (checked as the load goes out, before it overwrites the slot).
Test(oracle_carry, a_requests_end_is_checked_when_its_slot_gets_a_new_owner)
{
    for (int via_load = 0; via_load < 2; via_load++) {
        dev_t_ *d = s_open(0, 0, 0);
        kvt_sim_runner_out_t out;
        s_first_request(d);
        d->slots[0][7] ^= 1; //  after request 1's last forward
        ent_t b;
        kvt_load_spec_t ld;
        memset(&ld, 0, sizeof ld);
        ld.op = (kvt_opid_t){2, 1};
        ld.state = true;
        ld.state_boundary = 32;
        ld.state_hash = s_h(1, 1);
        ld.state_slot = 0;
        s_ent(&b, 2, 2, 0, 16, 0, 0);
        uint32_t wrong = via_load ? s_step(d, 2, NULL, 0, NULL, 0, &ld, 1, &out)
                                  : s_step(d, 2, &b, 1, NULL, 0, NULL, 0, &out);
        cr_assert_eq(wrong, 1, "via load %d", via_load);
        cr_assert_eq(out.done.wrong[0], 1, "the slot's previous owner");
        cr_assert_eq(out.where[0].check, KVT_RUNNER_AT_END);
        cr_assert_eq(out.where[0].offset, 7);
        kvt_sim_runner_stats_t st = s_stats(d);
        cr_assert_eq(st.ends_wrong, 1);
        s_close(d);
    }
}

//  A checkpoint unit changed between its take and its image's save.
//  An image the scheduler saves from a unit that no longer holds its state
//  (the unit was taken again, for another request's state, while the
//  image's save was pending) is compared byte by byte and caught.
Test(oracle_carry, a_saved_image_is_checked_in_its_checkpoint_unit)
{
    dev_t_ *d = s_open(0, 0, 0);
    kvt_sim_runner_out_t out;
    s_first_request(d); //  unit 0 holds request 1's state at 32
    ent_t b;
    s_ent(&b, 2, 2, 0, 32, 0, 1); //  request 2 takes unit 0 too
    b.e.take_unit = 0;
    b.e.take_at = 32;
    cr_assert_eq(s_step(d, 2, &b, 1, NULL, 0, NULL, 0, &out), 0);
    kvt_save_spec_t sv = s_image(1, 0, s_h(1, 1));
    ent_t c;
    s_ent(&c, 1, 1, 32, 33, 0, 0);
    cr_assert_eq(s_step(d, 3, &c, 1, &sv, 1, NULL, 0, &out), 1);
    cr_assert_eq(out.done.wrong[0], 1);
    cr_assert_eq(out.where[0].check, KVT_RUNNER_AT_IMAGE);
    cr_assert_eq(out.where[0].block, 0);
    kvt_sim_runner_stats_t st = s_stats(d);
    cr_assert_eq(st.images_wrong, 1);
    cr_assert_eq(st.images_by_take, 0);
    cr_assert_eq(st.takes_wrong, 0, "both takes were right");
    s_close(d);
}

//  An image of the state its unit's newest take copied and checked right
//  needs no second pass (only a take writes a unit); one of a unit whose
//  take was wrong, or that was never taken, is compared.
Test(oracle_carry, an_image_of_its_units_newest_right_take_is_proved_by_that_take)
{
    dev_t_ *d = s_open(0, 0, 0);
    kvt_sim_runner_out_t out;
    s_first_request(d);
    kvt_save_spec_t sv[2] = {s_image(1, 0, s_h(1, 1)), s_image(1, 5, s_h(1, 1))};
    ent_t c;
    s_ent(&c, 1, 1, 32, 33, 0, 0);
    cr_assert_eq(s_step(d, 2, &c, 1, sv, 2, NULL, 0, &out), 1, "unit 5 was never taken");
    cr_assert_eq(out.where[0].block, 5);
    kvt_sim_runner_stats_t st = s_stats(d);
    cr_assert_eq(st.images_checked, 2);
    cr_assert_eq(st.images_by_take, 1, "unit 0: its take's check stands");
    cr_assert_eq(st.images_wrong, 1);
    s_close(d);
    //  A stale slot makes request 2's take of unit 1 wrong: its image is
    //  compared (and wrong again), not taken on the take's word.
    d = s_open(1, 0, 0);
    s_first_request(d);
    ent_t b;
    s_ent(&b, 2, 2, 0, 32, 0, 0);
    b.e.take_unit = 1;
    b.e.take_at = 32;
    cr_assert_eq(s_step(d, 2, &b, 1, NULL, 0, NULL, 0, &out), 1);
    kvt_save_spec_t wrong_take = s_image(2, 1, s_h(2, 1));
    ent_t e;
    s_ent(&e, 3, 3, 0, 16, 0, 1);
    cr_assert_eq(s_step(d, 3, &e, 1, &wrong_take, 1, NULL, 0, &out), 1);
    cr_assert_eq(out.where[0].check, KVT_RUNNER_AT_IMAGE);
    st = s_stats(d);
    cr_assert_eq(st.images_by_take, 0);
    cr_assert_eq(st.images_wrong, 1);
    s_close(d);
}
