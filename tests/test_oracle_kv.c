/*  The simulated forward carries the KV it read (kvt_sim_runner_core
    without a device: the forward runs inside exec over plain memory). A
    forward that writes blocks reads the block just before the first one
    it writes (its context block) and XORs that block's deviation from the
    oracle bytes into every block it writes, so a wrong block read stays
    wrong in everything the request writes after it; the oracle sees it in
    the last block of every chunk a step saves and at any later resume over
    those blocks. The stale-block fault (the read sees another prefix's
    bytes, the block itself stays right) is caught there and not by the
    resume check. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "replay/kvt_oracle.h"
#include "replay/kvt_sim_runner_core.h"

#define BS   16 //  tokens per block
#define CS   32 //  tokens per chunk (two blocks)
#define NBLK 32 //  device blocks
#define PBB  68 //  bytes of a block in one (plane, layer) (a partial last word)

typedef struct {
    uint8_t kv[NBLK][PBB];    //  one plane, one layer
    kvt_sim_runner_core_t *r; //  the core under test
} kvdev_t;

static void *s_block(void *arg, uint32_t plane, uint32_t layer, uint32_t block)
{
    kvdev_t *d = arg;
    return plane == 0 && layer == 0 && block < NBLK ? d->kv[block] : NULL;
}

//  A device without state and a core with the stale-block fault at N.
static kvdev_t *s_open(uint32_t stale_block)
{
    kvdev_t *d = calloc(1, sizeof *d);
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
    c.fault_stale_block = stale_block;
    d->r = kvt_sim_runner_core_new(&c);
    cr_assert_not_null(d->r);
    return d;
}

static void s_close(kvdev_t *d)
{
    kvt_sim_runner_core_destroy(&d->r);
    free(d);
}

//  Block i's prefix hash (request 1's prefix; block i is device block i).
static kvt_hash_t s_h(uint32_t i)
{
    return (kvt_hash_t){0xC000, 0xD000 + i};
}

//  What one request computes in a step, with room for its arrays.
typedef struct {
    kvt_entry_t e;         //  the entry
    uint32_t blocks[16];   //  its device blocks
    kvt_hash_t hashes[16]; //  their hashes
} ent_t;

//  Request req computes [start, end) of the prefix; as the scheduler
//  builds it: from block 0 when it verifies, else from the block before
//  the one holding `start` (the context block).
static void s_ent(ent_t *x, uint64_t req, uint32_t start, uint32_t end, uint32_t verify_end)
{
    memset(x, 0, sizeof *x);
    uint32_t first = verify_end ? 0 : start / BS > 0 ? start / BS - 1 : 0, last = (end - 1) / BS;
    for (uint32_t b = first; b <= last; b++) {
        x->blocks[b - first] = b;
        x->hashes[b - first] = (b + 1) * BS <= end ? s_h(b) : (kvt_hash_t){0, 0};
    }
    x->e.op = (kvt_opid_t){req, 1};
    x->e.start = start;
    x->e.end = end;
    x->e.first_block = first;
    x->e.blocks = x->blocks;
    x->e.hashes = x->hashes;
    x->e.nblocks = last - first + 1;
    x->e.verify_end = verify_end;
}

//  A save of request 1's chunks [start, end) (blocks and keys from the prefix).
typedef struct {
    kvt_save_spec_t s;   //  the spec
    uint32_t blocks[16]; //  its source blocks
    kvt_hash_t keys[8];  //  its chunk keys
} save_t;

static void s_save(save_t *v, uint32_t start, uint32_t end)
{
    memset(v, 0, sizeof *v);
    for (uint32_t b = start / BS; b < end / BS; b++)
        v->blocks[b - start / BS] = b;
    for (uint32_t k = start / CS; k < end / CS; k++)
        v->keys[k - start / CS] = s_h((k + 1) * CS / BS - 1);
    v->s.op = (kvt_opid_t){1, 1};
    v->s.start = start;
    v->s.end = end;
    v->s.blocks = v->blocks;
    v->s.nblocks = (end - start) / BS;
    v->s.keys = v->keys;
    v->s.nkeys = (end - start) / CS;
}

//  Runs one step of one entry (or none) and `save` (or none); returns its
//  StepDone's wrong count.
static uint32_t s_step(kvdev_t *d, uint64_t step, ent_t *x, save_t *save, kvt_sim_runner_out_t *out)
{
    kvt_step_exec_t ex;
    memset(&ex, 0, sizeof ex);
    ex.step = step;
    ex.entries = x ? &x->e : NULL;
    ex.nentries = x ? 1 : 0;
    ex.saves = save ? &save->s : NULL;
    ex.nsaves = save ? 1 : 0;
    kvt_sim_runner_core_exec(d->r, &ex, out);
    cr_assert(!out->pending);
    cr_assert(out->done.ok, "step %llu: %s", (unsigned long long)step,
              out->refused ? out->refused : "");
    return out->done.nwrong;
}

static bool s_right(kvdev_t *d, uint32_t b)
{
    return kvt_oracle_check(d->kv[b], PBB, s_h(b), 0, 0, 0);
}

static kvt_sim_runner_stats_t s_stats(kvdev_t *d)
{
    kvt_sim_runner_stats_t st;
    kvt_sim_runner_core_stats(d->r, &st);
    return st;
}

TestSuite(oracle_kv);

Test(oracle_kv, deviation_is_zero_exactly_when_every_byte_matches)
{
    uint8_t buf[PBB];
    kvt_hash_t h = s_h(3);
    kvt_oracle_fill(buf, sizeof buf, h, 2, 1, 1);
    cr_assert_eq(kvt_oracle_deviation(buf, sizeof buf, h, 2, 1, 1), 0);
    for (size_t at = 0; at < sizeof buf; at++) {
        buf[at] ^= 0x10;
        cr_assert_neq(kvt_oracle_deviation(buf, sizeof buf, h, 2, 1, 1), 0, "byte %zu", at);
        buf[at] ^= 0x10;
    }
    cr_assert_neq(kvt_oracle_deviation(buf, sizeof buf, s_h(4), 2, 1, 1), 0, "another prefix");
}

//  A right read writes exactly the oracle bytes: the carry is invisible on
//  a correct run, and the saved chunk passes its check.
Test(oracle_kv, a_right_context_read_writes_exactly_the_oracle_bytes)
{
    kvdev_t *d = s_open(0);
    kvt_sim_runner_out_t out;
    ent_t x;
    save_t v;
    s_ent(&x, 1, 0, 32, 0);
    cr_assert_eq(s_step(d, 1, &x, NULL, &out), 0);
    s_ent(&x, 1, 32, 70, 0);
    cr_assert_eq(x.e.first_block, 1, "the entry carries its context block");
    cr_assert_eq(s_step(d, 2, &x, NULL, &out), 0);
    s_save(&v, 0, 64);
    cr_assert_eq(s_step(d, 3, NULL, &v, &out), 0);
    for (uint32_t b = 0; b < 4; b++)
        cr_assert(s_right(d, b), "block %u", b);
    kvt_sim_runner_stats_t st = s_stats(d);
    cr_assert_eq(st.kv_reads, 1, "the second step read block 1");
    cr_assert_eq(st.kv_carried, 0);
    cr_assert_eq(st.saves_checked, 2);
    cr_assert_eq(st.saves_wrong, 0);
    cr_assert_eq(st.blocks_written, 4, "the context block is read, not written again");
    cr_assert_eq(st.kv_unread, 0);
    s_close(d);
}

//  An entry that does not name the block before its first token (the
//  old entry shape) cannot carry it: counted.
Test(oracle_kv, an_entry_without_its_context_block_is_counted_unread)
{
    kvdev_t *d = s_open(0);
    kvt_sim_runner_out_t out;
    ent_t x;
    s_ent(&x, 1, 0, 32, 0);
    cr_assert_eq(s_step(d, 1, &x, NULL, &out), 0);
    s_ent(&x, 1, 32, 64, 0);
    x.e.first_block = 2; //  blocks 2 and 3 only
    x.e.blocks = x.blocks + 1;
    x.e.hashes = x.hashes + 1;
    x.e.nblocks = 2;
    cr_assert_eq(s_step(d, 2, &x, NULL, &out), 0);
    kvt_sim_runner_stats_t st = s_stats(d);
    cr_assert_eq(st.kv_unread, 1);
    cr_assert_eq(st.kv_reads, 0);
    cr_assert(s_right(d, 2) && s_right(d, 3), "written by the per-block rule");
    s_close(d);
}

//  The stale-block fault: the second step's forward reads another prefix's
//  bytes in block 1 (which stays right). Nothing checks block 1 wrong, and
//  no resume happens; the chunk it then wrote is saved, and that save's
//  check sees the carried deviation.
Test(oracle_kv, stale_block_is_caught_at_the_chunk_saved)
{
    kvdev_t *d = s_open(1);
    kvt_sim_runner_out_t out;
    ent_t x;
    save_t v;
    s_ent(&x, 1, 0, 32, 0);
    cr_assert_eq(s_step(d, 1, &x, NULL, &out), 0);
    s_ent(&x, 1, 32, 64, 0);
    cr_assert_eq(s_step(d, 2, &x, NULL, &out), 0, "the forward itself reports nothing");
    cr_assert(out.fault_injected);
    cr_assert(s_right(d, 1), "the context block itself is right");
    cr_assert_not(s_right(d, 2), "the deviation read is carried into the blocks written");
    cr_assert_not(s_right(d, 3));
    s_save(&v, 0, 64);
    cr_assert_eq(s_step(d, 3, NULL, &v, &out), 1, "the save of chunk [32, 64) sees it");
    cr_assert_eq(out.done.wrong[0], 1);
    cr_assert_eq(out.where[0].check, KVT_RUNNER_AT_SAVE);
    cr_assert_eq(out.where[0].block, 3, "the chunk's last block");
    kvt_sim_runner_stats_t st = s_stats(d);
    cr_assert_eq(st.kv_carried, 1);
    cr_assert_eq(st.saves_checked, 2);
    cr_assert_eq(st.saves_wrong, 1, "chunk [0, 32) was right");
    cr_assert_eq(st.blocks_wrong, 0, "no resume check saw it");
    s_close(d);
}

//  A block that is wrong while a forward reads it (overwritten, then put
//  back) leaves every block the request writes after it wrong, step after
//  step, and a later resume over those blocks is a wrong resume.
Test(oracle_kv, a_wrong_read_stays_wrong_in_every_later_block_and_fails_a_resume)
{
    kvdev_t *d = s_open(0);
    kvt_sim_runner_out_t out;
    ent_t x;
    s_ent(&x, 1, 0, 32, 0);
    cr_assert_eq(s_step(d, 1, &x, NULL, &out), 0);
    d->kv[1][5] ^= 0x40; //  the block holds a wrong byte while the forward reads it
    s_ent(&x, 1, 32, 64, 0);
    cr_assert_eq(s_step(d, 2, &x, NULL, &out), 0);
    d->kv[1][5] ^= 0x40; //  and is right again
    s_ent(&x, 1, 64, 100, 0);
    cr_assert_eq(s_step(d, 3, &x, NULL, &out), 0);
    cr_assert(s_right(d, 0) && s_right(d, 1));
    for (uint32_t b = 2; b < 6; b++)
        cr_assert_not(s_right(d, b), "block %u carries the deviation", b);
    cr_assert_eq(s_stats(d).kv_carried, 2, "each step carried what it read");
    //  Request 2 resumes over the prefix's first 96 tokens.
    s_ent(&x, 2, 96, 100, 96);
    cr_assert_eq(s_step(d, 4, &x, NULL, &out), 1);
    cr_assert_eq(out.where[0].check, KVT_RUNNER_AT_RESUME);
    cr_assert_eq(out.where[0].block, 2, "the first block written after the wrong read");
    s_close(d);
}

//  A deviation carried into blocks nothing saves and nothing resumes from
//  is caught at the request's KV end (the last block its newest forward
//  wrote): when a forward is about to overwrite that block, when a load is
//  about to, or by the end-of-run sweep. Request 1's second forward reads
//  a stale context block (the fault) and writes blocks 2 and 3 wrong; no
//  chunk is saved.
Test(oracle_kv, a_deviation_nothing_saves_is_caught_at_the_requests_kv_end)
{
    for (int via = 0; via < 3; via++) { //  0: a forward, 1: a load, 2: the sweep
        kvdev_t *d = s_open(1);
        kvt_sim_runner_out_t out;
        ent_t x;
        s_ent(&x, 1, 0, 32, 0);
        cr_assert_eq(s_step(d, 1, &x, NULL, &out), 0);
        s_ent(&x, 1, 32, 64, 0);
        cr_assert_eq(s_step(d, 2, &x, NULL, &out), 0, "the forward itself reports nothing");
        cr_assert_not(s_right(d, 3), "the deviation is in the request's last block");
        const kvt_sim_runner_wrong_t *where = NULL;
        uint32_t wrong;
        if (via == 0) {
            s_ent(&x, 2, 0, 64, 0); //  another request's forward from 0 reuses blocks 0-3
            wrong = s_step(d, 3, &x, NULL, &out);
            where = out.where;
        } else if (via == 1) {
            uint32_t dst[2] = {2, 3};
            kvt_hash_t keys[1] = {s_h(3)};
            kvt_load_spec_t ld;
            memset(&ld, 0, sizeof ld);
            ld.op = (kvt_opid_t){2, 1};
            ld.start = 32;
            ld.end = 64;
            ld.blocks = dst;
            ld.nblocks = 2;
            ld.keys = keys;
            ld.nkeys = 1;
            kvt_step_exec_t ex;
            memset(&ex, 0, sizeof ex);
            ex.step = 3;
            ex.loads = &ld;
            ex.nloads = 1;
            kvt_sim_runner_core_exec(d->r, &ex, &out);
            cr_assert(out.done.ok);
            cr_assert_eq(out.nloads, 1, "the load still goes out");
            wrong = out.done.nwrong;
            where = out.where;
        } else {
            wrong = kvt_sim_runner_core_sweep(d->r, &where);
        }
        cr_assert_eq(wrong, 1, "via %d", via);
        cr_assert_eq(where[0].req, 1, "via %d: the request that wrote it", via);
        cr_assert_eq(where[0].block, 3, "via %d: its last block", via);
        cr_assert_eq(where[0].check, via == 2 ? KVT_RUNNER_AT_SWEEP : KVT_RUNNER_AT_END);
        kvt_sim_runner_stats_t st = s_stats(d);
        cr_assert_eq(st.kv_ends_wrong, via == 2 ? 0 : 1);
        cr_assert_eq(st.sweep_wrong, via == 2 ? 1 : 0);
        cr_assert_eq(st.saves_checked + st.blocks_wrong, 0, "no save and no resume saw it");
        cr_assert_eq(kvt_sim_runner_core_sweep(d->r, &where), 0, "checked once");
        s_close(d);
    }
}

//  On a correct run each KV end is checked once and found right, and a
//  block a later forward read as its context is not checked again.
Test(oracle_kv, right_kv_ends_pass_and_a_read_end_is_not_checked_again)
{
    kvdev_t *d = s_open(0);
    kvt_sim_runner_out_t out;
    ent_t x;
    s_ent(&x, 1, 0, 32, 0);
    cr_assert_eq(s_step(d, 1, &x, NULL, &out), 0);
    s_ent(&x, 1, 32, 64, 0); //  reads block 1 (the first step's end), ends at block 3
    cr_assert_eq(s_step(d, 2, &x, NULL, &out), 0);
    s_ent(&x, 2, 0, 64, 0); //  another request's forward overwrites blocks 0-3
    cr_assert_eq(s_step(d, 3, &x, NULL, &out), 0);
    kvt_sim_runner_stats_t st = s_stats(d);
    cr_assert_eq(st.kv_ends_checked, 1, "block 3 only: block 1's end was read");
    cr_assert_eq(st.kv_ends_wrong, 0);
    const kvt_sim_runner_wrong_t *where;
    cr_assert_eq(kvt_sim_runner_core_sweep(d->r, &where), 0);
    cr_assert_eq(s_stats(d).sweep_checked, 1, "request 2's end, block 3");
    s_close(d);
}
