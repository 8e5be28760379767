/*  test_messages.c — the codec's round trips, framing, robustness and corpus.

    Rejections with the field named (wrong types, ranges, limits, missing and
    duplicate keys) live in test_messages_reject.c.
*/
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "kvtier/kvt_msg.h"
#include "messages/kvt_msg_schema.h"
#include "messages/kvt_msg_test.h"

#define CORPUS_DIR KVT_SOURCE_DIR "/tests/corpus/decode"

//  What one decode may allocate: the kept arrays are at most a few times
//  the bytes they came from, plus the fixed-size tables (counters).
#define ALLOC_BOUND(len) (4 * (size_t)(len) + 65536)

static const char *s_shape_name[KVT_SAMPLE_COUNT] = {"min", "typical", "max", "alt1", "alt2"};

static void s_sample(int kind, int shape, kvt_msg_t *msg)
{
    cr_assert_eq(kvt_msg_sample(kind, shape, msg), 0, "sample %s/%s", kvt_msg_kind_name(kind),
                 s_shape_name[shape]);
}

static void s_encode(const kvt_msg_t *msg, uint8_t **buf, size_t *len)
{
    kvt_msg_err_t err;
    char text[256];
    int rc = kvt_msg_check(msg, &err);
    cr_assert_eq(rc, 0, "check: %s", kvt_msg_err_str(&err, text, sizeof text));
    cr_assert_eq(kvt_msg_encode(msg, buf, len), 0, "encode %s", kvt_msg_kind_name(msg->kind));
    cr_assert(*buf && *len > 0);
}

static bool s_is_empty(const kvt_msg_t *msg)
{
    static const kvt_msg_t zero;
    return memcmp(msg, &zero, sizeof zero) == 0;
}

static bool s_contains(const uint8_t *hay, size_t n, const uint8_t *needle, size_t m)
{
    for (size_t i = 0; i + m <= n; i++)
        if (memcmp(hay + i, needle, m) == 0)
            return true;
    return false;
}

static double s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

// ------------------------------------------------------------- equality --

static void s_eq_bytes(const void *a, const void *b, size_t n, const char *what)
{
    if (n == 0)
        return;
    cr_assert(a && b, "%s: NULL array with %zu bytes", what, n);
    cr_assert(memcmp(a, b, n) == 0, "%s differs", what);
}

static void s_eq_op(kvt_opid_t a, kvt_opid_t b)
{
    cr_assert_eq(a.req, b.req);
    cr_assert_eq(a.gen, b.gen);
}

static void s_eq_entry(const kvt_entry_t *a, const kvt_entry_t *b)
{
    s_eq_op(a->op, b->op);
    cr_assert_eq(a->start, b->start);
    cr_assert_eq(a->end, b->end);
    cr_assert_eq(a->first_block, b->first_block);
    cr_assert_eq(a->nblocks, b->nblocks);
    s_eq_bytes(a->blocks, b->blocks, a->nblocks * sizeof *a->blocks, "entry blocks");
    s_eq_bytes(a->hashes, b->hashes, a->nblocks * sizeof *a->hashes, "entry hashes");
    cr_assert_eq(a->verify_end, b->verify_end);
}

static void s_eq_spec(const kvt_load_spec_t *a, const kvt_load_spec_t *b)
{
    s_eq_op(a->op, b->op);
    cr_assert_eq(a->start, b->start);
    cr_assert_eq(a->end, b->end);
    cr_assert_eq(a->nkeys, b->nkeys);
    s_eq_bytes(a->keys, b->keys, a->nkeys * sizeof *a->keys, "spec keys");
    cr_assert_eq(a->nblocks, b->nblocks);
    s_eq_bytes(a->blocks, b->blocks, a->nblocks * sizeof *a->blocks, "spec blocks");
    cr_assert_eq(a->attempt, b->attempt);
    cr_assert_eq(a->lookup, b->lookup);
    cr_assert_eq(a->state, b->state);
    cr_assert_eq(a->state_boundary, b->state_boundary);
    cr_assert(kvt_hash_eq(a->state_hash, b->state_hash), "state_hash differs");
    cr_assert_eq(a->state_slot, b->state_slot);
    cr_assert_eq(a->after, b->after);
    cr_assert_eq(a->image, b->image);
    cr_assert_eq(a->producer, b->producer);
    cr_assert_eq(a->producer_failed, b->producer_failed);
}

static void s_eq_event(const kvt_event_t *a, const kvt_event_t *b)
{
    s_eq_op(a->op, b->op);
    cr_assert_eq(a->type, b->type);
    cr_assert_eq(a->a, b->a);
    cr_assert_eq(a->b, b->b);
    cr_assert_eq(a->c, b->c);
}

static void s_eq_steps(const kvt_entry_t *ea, const kvt_entry_t *eb, uint32_t ne,
                       const kvt_load_spec_t *la, const kvt_load_spec_t *lb, uint32_t nl,
                       const kvt_save_spec_t *sa, const kvt_save_spec_t *sb, uint32_t ns)
{
    for (uint32_t i = 0; i < ne; i++)
        s_eq_entry(&ea[i], &eb[i]);
    for (uint32_t i = 0; i < nl; i++)
        s_eq_spec(&la[i], &lb[i]);
    for (uint32_t i = 0; i < ns; i++)
        s_eq_spec(&sa[i], &sb[i]);
}

//  Field-by-field equality of two messages of any kind.
static void s_eq_msg(const kvt_msg_t *a, const kvt_msg_t *b)
{
    cr_assert_eq(a->kind, b->kind);
    switch (a->kind) {
    case KVT_MSG_PING:
        cr_assert_eq(a->u.ping.seq, b->u.ping.seq);
        cr_assert_eq(a->u.ping.npayload, b->u.ping.npayload);
        s_eq_bytes(a->u.ping.payload, b->u.ping.payload, a->u.ping.npayload, "payload");
        break;
    case KVT_MSG_SCHEDULE: {
        const kvt_schedule_t *x = &a->u.schedule, *y = &b->u.schedule;
        cr_assert_eq(x->step, y->step);
        cr_assert_eq(x->now_us, y->now_us);
        cr_assert_eq(x->narrivals, y->narrivals);
        for (uint32_t i = 0; i < x->narrivals; i++) {
            const kvt_arrival_t *p = &x->arrivals[i], *q = &y->arrivals[i];
            cr_assert_eq(p->req, q->req);
            cr_assert_eq(p->ntokens, q->ntokens);
            s_eq_bytes(p->tokens, q->tokens, p->ntokens * sizeof *p->tokens, "tokens");
            cr_assert_eq(p->max_new_tokens, q->max_new_tokens);
            cr_assert_eq(p->arrival_us, q->arrival_us);
        }
        cr_assert_eq(x->prev_failed, y->prev_failed);
        cr_assert_eq(x->naborts, y->naborts);
        s_eq_bytes(x->aborts, y->aborts, x->naborts * sizeof *x->aborts, "aborts");
        cr_assert_eq(x->npreempts, y->npreempts);
        s_eq_bytes(x->preempts, y->preempts, x->npreempts * sizeof *x->preempts, "preempts");
        break;
    }
    case KVT_MSG_STEP_PLAN: {
        const kvt_step_plan_t *x = &a->u.step_plan, *y = &b->u.step_plan;
        cr_assert_eq(x->step, y->step);
        cr_assert_eq(x->nentries, y->nentries);
        cr_assert_eq(x->nloads, y->nloads);
        cr_assert_eq(x->nsaves, y->nsaves);
        cr_assert_eq(x->nevents, y->nevents);
        s_eq_steps(x->entries, y->entries, x->nentries, x->loads, y->loads, x->nloads, x->saves,
                   y->saves, x->nsaves);
        for (uint32_t i = 0; i < x->nevents; i++)
            s_eq_event(&x->events[i], &y->events[i]);
        cr_assert_eq(x->idle, y->idle);
        break;
    }
    case KVT_MSG_STEP_EXEC: {
        const kvt_step_exec_t *x = &a->u.step_exec, *y = &b->u.step_exec;
        cr_assert_eq(x->step, y->step);
        cr_assert_eq(x->rank, y->rank);
        cr_assert_eq(x->nentries, y->nentries);
        cr_assert_eq(x->nloads, y->nloads);
        cr_assert_eq(x->nsaves, y->nsaves);
        s_eq_steps(x->entries, y->entries, x->nentries, x->loads, y->loads, x->nloads, x->saves,
                   y->saves, x->nsaves);
        break;
    }
    case KVT_MSG_STEP_DONE: {
        const kvt_step_done_t *x = &a->u.step_done, *y = &b->u.step_done;
        cr_assert_eq(x->step, y->step);
        cr_assert_eq(x->rank, y->rank);
        cr_assert_eq(x->ok, y->ok);
        cr_assert_eq(x->blocks_written, y->blocks_written);
        cr_assert_eq(x->blocks_verified, y->blocks_verified);
        cr_assert_eq(x->nwrong, y->nwrong);
        s_eq_bytes(x->wrong, y->wrong, x->nwrong * sizeof *x->wrong, "wrong");
        cr_assert_eq(x->detail, y->detail);
        break;
    }
    case KVT_MSG_LOAD_SPEC:
    case KVT_MSG_SAVE_SPEC:
        s_eq_spec(&a->u.load_spec, &b->u.load_spec);
        break;
    case KVT_MSG_COMPLETION: {
        const kvt_completion_t *x = &a->u.completion, *y = &b->u.completion;
        cr_assert_eq(x->chan, y->chan);
        s_eq_op(x->op, y->op);
        cr_assert(kvt_hash_eq(x->key, y->key));
        cr_assert_eq(x->rank, y->rank);
        cr_assert_eq(x->ok, y->ok);
        cr_assert_eq(x->detail, y->detail);
        cr_assert_eq(x->attempt, y->attempt);
        cr_assert_eq(x->lower, y->lower);
        cr_assert_eq(x->epoch, y->epoch);
        cr_assert_eq(x->touch, y->touch);
        cr_assert_eq(x->held, y->held);
        cr_assert_eq(x->nimages, y->nimages);
        s_eq_bytes(x->images, y->images, x->nimages, "images");
        cr_assert_eq(x->fenced, y->fenced);
        cr_assert_eq(x->rank0_only, y->rank0_only);
        break;
    }
    case KVT_MSG_VERDICT: {
        const kvt_verdict_t *x = &a->u.verdict, *y = &b->u.verdict;
        cr_assert_eq(x->chan, y->chan);
        s_eq_op(x->op, y->op);
        cr_assert(kvt_hash_eq(x->key, y->key));
        cr_assert_eq(x->ok, y->ok);
        cr_assert_eq(x->detail, y->detail);
        cr_assert_eq(x->nfailed, y->nfailed);
        cr_assert_eq(x->attempt, y->attempt);
        cr_assert_eq(x->lower, y->lower);
        cr_assert_eq(x->touch, y->touch);
        cr_assert_eq(x->held, y->held);
        cr_assert_eq(x->nimages, y->nimages);
        s_eq_bytes(x->images, y->images, x->nimages, "images");
        cr_assert_eq(x->fenced, y->fenced);
        break;
    }
    case KVT_MSG_TOUCH: {
        const kvt_touch_msg_t *x = &a->u.touch, *y = &b->u.touch;
        cr_assert(kvt_hash_eq(x->hash, y->hash));
        cr_assert_eq(x->round, y->round);
        cr_assert_eq(x->nkeys, y->nkeys);
        s_eq_bytes(x->keys, y->keys, x->nkeys * sizeof *x->keys, "keys");
        break;
    }
    case KVT_MSG_LOOKUP: {
        const kvt_lookup_t *x = &a->u.lookup, *y = &b->u.lookup;
        s_eq_op(x->op, y->op);
        cr_assert_eq(x->nkeys, y->nkeys);
        s_eq_bytes(x->keys, y->keys, x->nkeys * sizeof *x->keys, "keys");
        cr_assert_eq(x->pin, y->pin);
        cr_assert_eq(x->ttl_ms, y->ttl_ms);
        cr_assert_eq(x->rank0_only, y->rank0_only);
        break;
    }
    case KVT_MSG_LOOKUP_RELEASE:
        s_eq_op(a->u.lookup_release.op, b->u.lookup_release.op);
        break;
    case KVT_MSG_FENCE:
        cr_assert_eq(a->u.fence.id, b->u.fence.id);
        cr_assert_eq(a->u.fence.lanes, b->u.fence.lanes);
        break;
    case KVT_MSG_STATS: {
        const kvt_stats_t *x = &a->u.stats, *y = &b->u.stats;
        cr_assert_eq(x->request, y->request);
        cr_assert_str_eq(x->from, y->from);
        cr_assert_eq(x->ncounters, y->ncounters);
        for (uint32_t i = 0; i < x->ncounters; i++) {
            cr_assert_str_eq(x->counters[i].name, y->counters[i].name);
            cr_assert_eq(x->counters[i].value, y->counters[i].value);
        }
        break;
    }
    case KVT_MSG_SHUTDOWN:
        cr_assert_eq(a->u.shutdown.code, b->u.shutdown.code);
        cr_assert_str_eq(a->u.shutdown.text, b->u.shutdown.text);
        break;
    default:
        cr_assert_fail("unexpected kind %d", a->kind);
    }
}

// ------------------------------------------------------------ round trip --

//  Encode, decode (from a copy that is then scribbled over, so the decoded
//  message must own its data), compare, re-encode to the same bytes.
static void s_round_trip(int shape)
{
    for (int kind = 1; kind < KVT_MSG_KIND_COUNT; kind++) {
        kvt_msg_t sent, got;
        uint8_t *buf, *again;
        size_t len, len2, alloc;
        kvt_msg_err_t err;
        char text[256];
        s_sample(kind, shape, &sent);
        s_encode(&sent, &buf, &len);
        uint8_t *copy = malloc(len);
        cr_assert(copy);
        memcpy(copy, buf, len);
        int rc = kvt_msg_decode_ex(copy, len, &got, &err, &alloc);
        cr_assert_eq(rc, 0, "%s/%s: %s", kvt_msg_kind_name(kind), s_shape_name[shape],
                     kvt_msg_err_str(&err, text, sizeof text));
        memset(copy, 0xA5, len);
        free(copy);
        cr_assert_leq(alloc, ALLOC_BOUND(len), "%s: allocated %zu for %zu bytes",
                      kvt_msg_kind_name(kind), alloc, len);
        s_eq_msg(&sent, &got);
        s_encode(&got, &again, &len2);
        cr_assert_eq(len2, len);
        cr_assert(memcmp(buf, again, len) == 0, "%s re-encodes differently",
                  kvt_msg_kind_name(kind));
        free(again);
        free(buf);
        kvt_msg_clear(&got);
        kvt_msg_clear(&sent);
    }
}

Test(kvt_msg, round_trip_min_every_kind)
{
    s_round_trip(KVT_SAMPLE_MIN);
}

Test(kvt_msg, round_trip_typical_every_kind)
{
    s_round_trip(KVT_SAMPLE_TYPICAL);
}

Test(kvt_msg, round_trip_max_arrays_every_kind)
{
    s_round_trip(KVT_SAMPLE_MAX);
}

Test(kvt_msg, round_trip_alternate_shapes_every_kind)
{
    s_round_trip(KVT_SAMPLE_ALT1);
    s_round_trip(KVT_SAMPLE_ALT2);
}

Test(kvt_msg, min_shape_omits_optional_fields_and_encodes_empty_arrays)
{
    kvt_msg_t msg;
    uint8_t *buf;
    size_t len;
    s_sample(KVT_MSG_PING, KVT_SAMPLE_MIN, &msg);
    s_encode(&msg, &buf, &len);
    //  [1, 1, {1: 0}]: no payload key
    static const uint8_t ping[] = {0x93, 0x01, 0x01, 0x81, 0x01, 0x00};
    cr_assert_eq(len, sizeof ping);
    cr_assert(memcmp(buf, ping, len) == 0);
    free(buf);
    s_sample(KVT_MSG_SHUTDOWN, KVT_SAMPLE_MIN, &msg);
    s_encode(&msg, &buf, &len);
    static const uint8_t shutdown[] = {0x93, 0x01, 0x0b, 0x81, 0x01, 0x00};
    cr_assert_eq(len, sizeof shutdown);
    cr_assert(memcmp(buf, shutdown, len) == 0);
    free(buf);
    //  Empty mandatory arrays are sent: StepExec {1: 0, 2: 0, 3: [], 4: [], 5: []}
    s_sample(KVT_MSG_STEP_EXEC, KVT_SAMPLE_MIN, &msg);
    s_encode(&msg, &buf, &len);
    static const uint8_t exec[] = {0x93, 0x01, 0x04, 0x85, 0x01, 0x00, 0x02,
                                   0x00, 0x03, 0x90, 0x04, 0x90, 0x05, 0x90};
    cr_assert_eq(len, sizeof exec);
    cr_assert(memcmp(buf, exec, len) == 0);
    free(buf);
    //  A KV-only LoadSpec sends none of the state leg's keys (9..13), the
    //  zero state_hash included: {1: 0, 2: 1, 3: 0, 4: 1, 5: bin0, 6: bin0}
    s_sample(KVT_MSG_LOAD_SPEC, KVT_SAMPLE_MIN, &msg);
    s_encode(&msg, &buf, &len);
    static const uint8_t load[] = {0x93, 0x01, 0x06, 0x86, 0x01, 0x00, 0x02, 0x01, 0x03,
                                   0x00, 0x04, 0x01, 0x05, 0xc4, 0x00, 0x06, 0xc4, 0x00};
    cr_assert_eq(len, sizeof load);
    cr_assert(memcmp(buf, load, len) == 0);
    free(buf);
    //  Fence {1: 0}: lanes 0 (every lane) is omitted.
    s_sample(KVT_MSG_FENCE, KVT_SAMPLE_MIN, &msg);
    s_encode(&msg, &buf, &len);
    static const uint8_t fence[] = {0x93, 0x01, 0x0f, 0x81, 0x01, 0x00};
    cr_assert_eq(len, sizeof fence);
    cr_assert(memcmp(buf, fence, len) == 0);
    free(buf);
}

Test(kvt_msg, u32_and_hash_arrays_travel_as_little_endian_bin)
{
    uint32_t blocks[2] = {0x04030201u, 0xA0B0C0D0u};
    kvt_hash_t keys[1] = {{.hi = 0x1112131415161718ull, .lo = 0x0102030405060708ull}};
    kvt_msg_t msg = {.kind = KVT_MSG_LOAD_SPEC};
    msg.u.load_spec = (kvt_load_spec_t){.op = {.req = 1, .gen = 1},
                                        .start = 0,
                                        .end = 256,
                                        .keys = keys,
                                        .nkeys = 1,
                                        .blocks = blocks,
                                        .nblocks = 2};
    uint8_t *buf;
    size_t len;
    s_encode(&msg, &buf, &len);
    static const uint8_t key_bin[] = {0x05, 0xc4, 0x10, 0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02,
                                      0x01, 0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11};
    static const uint8_t block_bin[] = {0x06, 0xc4, 0x08, 0x01, 0x02, 0x03,
                                        0x04, 0xD0, 0xC0, 0xB0, 0xA0};
    cr_assert(s_contains(buf, len, key_bin, sizeof key_bin), "keys not lo-LE then hi-LE");
    cr_assert(s_contains(buf, len, block_bin, sizeof block_bin), "blocks not u32 LE");
    free(buf);
}

// ------------------------------------------- the encoder is msgpack-c --

//  The reference: the same schema walk packed with msgpack-c (what the
//  encoder did before it wrote frames itself). Every header in its shortest
//  form is msgpack-c's choice; the encoder must agree byte for byte.
static void s_ref_body(msgpack_packer *pk, const kvt_schema_t *schema, const void *base);

static void s_ref_packed(msgpack_packer *pk, const void *array, uint32_t n, uint32_t width)
{
    msgpack_pack_bin(pk, (size_t)n * width);
    for (uint32_t i = 0; i < n; i++) {
        uint8_t le[16];
        if (width == 4) {
            uint32_t v = ((const uint32_t *)array)[i];
            for (int b = 0; b < 4; b++)
                le[b] = (uint8_t)(v >> (8 * b));
        } else {
            kvt_hash_t h = ((const kvt_hash_t *)array)[i];
            for (int b = 0; b < 8; b++) {
                le[b] = (uint8_t)(h.lo >> (8 * b));
                le[8 + b] = (uint8_t)(h.hi >> (8 * b));
            }
        }
        msgpack_pack_bin_body(pk, le, width);
    }
}

static bool s_ref_present(const kvt_field_t *f, const void *base)
{
    if (!f->optional)
        return true;
    const void *at = KVT_F_CAT(base, f->off);
    switch (f->type) {
    case KVT_F_STR:
        return *(const char *)at != '\0';
    case KVT_F_U64:
        return *(const uint64_t *)at != 0;
    case KVT_F_U32:
        return *(const uint32_t *)at != 0;
    case KVT_F_U8:
        return *(const uint8_t *)at != 0;
    case KVT_F_BOOL:
        return *(const bool *)at;
    case KVT_F_HASH:
        return !kvt_hash_is_zero(*(const kvt_hash_t *)at);
    default:
        return KVT_F_CCOUNT(base, f) > 0;
    }
}

static void s_ref_field(msgpack_packer *pk, const kvt_field_t *f, const void *base)
{
    const void *at = KVT_F_CAT(base, f->off);
    uint32_t n = kvt_field_is_array(f->type) ? KVT_F_CCOUNT(base, f) : 0;
    const void *array = kvt_field_is_array(f->type) ? KVT_F_CPTR(base, f) : NULL;
    switch (f->type) {
    case KVT_F_U64:
        msgpack_pack_uint64(pk, *(const uint64_t *)at);
        break;
    case KVT_F_U32:
        msgpack_pack_uint32(pk, *(const uint32_t *)at);
        break;
    case KVT_F_U8:
        msgpack_pack_uint8(pk, *(const uint8_t *)at);
        break;
    case KVT_F_BOOL:
        *(const bool *)at ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
        break;
    case KVT_F_HASH:
        s_ref_packed(pk, at, 1, 16);
        break;
    case KVT_F_STR:
        msgpack_pack_str(pk, strlen(at));
        msgpack_pack_str_body(pk, at, strlen(at));
        break;
    case KVT_F_BYTES:
        msgpack_pack_bin(pk, n);
        msgpack_pack_bin_body(pk, array, n);
        break;
    case KVT_F_U32S:
        s_ref_packed(pk, array, n, 4);
        break;
    case KVT_F_HASHES:
        s_ref_packed(pk, array, n, 16);
        break;
    case KVT_F_U64S:
        msgpack_pack_array(pk, n);
        for (uint32_t i = 0; i < n; i++)
            msgpack_pack_uint64(pk, ((const uint64_t *)array)[i]);
        break;
    case KVT_F_STRUCTS:
        msgpack_pack_array(pk, n);
        for (uint32_t i = 0; i < n; i++)
            s_ref_body(pk, f->sub, (const char *)array + (size_t)i * f->sub->size);
        break;
    case KVT_F_COUNTERS:
        msgpack_pack_map(pk, n);
        for (uint32_t i = 0; i < n; i++) {
            const kvt_counter_t *c = &((const kvt_counter_t *)array)[i];
            msgpack_pack_str(pk, strlen(c->name));
            msgpack_pack_str_body(pk, c->name, strlen(c->name));
            msgpack_pack_uint64(pk, c->value);
        }
        break;
    }
}

static void s_ref_body(msgpack_packer *pk, const kvt_schema_t *schema, const void *base)
{
    uint32_t present = 0;
    for (uint32_t i = 0; i < schema->nfields; i++)
        present += s_ref_present(&schema->fields[i], base);
    msgpack_pack_map(pk, present);
    for (uint32_t i = 0; i < schema->nfields; i++)
        if (s_ref_present(&schema->fields[i], base)) {
            msgpack_pack_uint8(pk, schema->fields[i].key);
            s_ref_field(pk, &schema->fields[i], base);
        }
}

//  kvt_msg_encode's frame equals msgpack-c's packing of the same message.
static void s_same_as_msgpack_c(const kvt_msg_t *msg, const char *what)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 3);
    msgpack_pack_uint8(&pk, KVT_MSG_VERSION);
    msgpack_pack_uint8(&pk, (uint8_t)msg->kind);
    s_ref_body(&pk, kvt_msg_schema(msg->kind), &msg->u);
    uint8_t *buf;
    size_t len;
    cr_assert_eq(kvt_msg_encode(msg, &buf, &len), 0, "%s", what);
    cr_assert_eq(len, sb.size, "%s: %zu bytes, msgpack-c %zu", what, len, sb.size);
    cr_assert(memcmp(buf, sb.data, len) == 0, "%s: the bytes differ from msgpack-c's", what);
    free(buf);
    msgpack_sbuffer_destroy(&sb);
}

Test(kvt_msg, encoder_writes_what_msgpack_c_packs_every_kind_and_boundary)
{
    for (int kind = KVT_MSG_NONE + 1; kind < KVT_MSG_KIND_COUNT; kind++)
        for (int shape = 0; shape < KVT_SAMPLE_COUNT; shape++) {
            kvt_msg_t m;
            char what[64];
            s_sample(kind, shape, &m);
            snprintf(what, sizeof what, "%s %s", kvt_msg_kind_name(kind), s_shape_name[shape]);
            s_same_as_msgpack_c(&m, what);
            kvt_msg_clear(&m);
        }
    //  Every integer, bin and str header width, on both sides of each boundary.
    static const uint64_t ints[] = {
        0, 1, 127, 128, 255, 256, 65535, 65536, UINT32_MAX, 1ull << 32, UINT64_MAX - 1, UINT64_MAX};
    static const uint32_t sizes[] = {1, 31, 32, 255, 256, 65535, 65536, 70000};
    static uint8_t bytes[70000];
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        for (size_t j = 0; j < sizeof sizes / sizeof sizes[0]; j++) {
            kvt_msg_t m = {.kind = KVT_MSG_PING};
            m.u.ping.seq = ints[i];
            m.u.ping.payload = bytes;
            m.u.ping.npayload = sizes[j];
            s_same_as_msgpack_c(&m, "ping");
        }
    //  Maps and arrays of 15 and 16 (fix and 16-bit headers).
    static kvt_counter_t counters[16];
    static uint64_t wrong[16];
    for (uint32_t n = 15; n <= 16; n++) {
        for (uint32_t i = 0; i < n; i++) {
            snprintf(counters[i].name, sizeof counters[i].name, "c%u", i);
            counters[i].value = ints[i % (sizeof ints / sizeof ints[0])];
            wrong[i] = ints[i % (sizeof ints / sizeof ints[0])];
        }
        kvt_msg_t m = {.kind = KVT_MSG_STATS};
        m.u.stats.counters = counters;
        m.u.stats.ncounters = n;
        snprintf(m.u.stats.from, sizeof m.u.stats.from, "w");
        s_same_as_msgpack_c(&m, "stats");
        m = (kvt_msg_t){.kind = KVT_MSG_STEP_DONE};
        m.u.step_done.wrong = wrong;
        m.u.step_done.nwrong = n;
        s_same_as_msgpack_c(&m, "step_done");
    }
    static const uint32_t texts[] = {1, 31, 32, 255, KVT_MSG_MAX_TEXT};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        for (size_t j = 0; j < sizeof texts / sizeof texts[0]; j++) {
            kvt_msg_t m = {.kind = KVT_MSG_SHUTDOWN};
            m.u.shutdown.code = (uint32_t)ints[i];
            memset(m.u.shutdown.text, 'a', texts[j]);
            s_same_as_msgpack_c(&m, "shutdown");
        }
}

Test(kvt_msg, kind_names)
{
    static const char *names[KVT_MSG_KIND_COUNT] = {
        "None",     "Ping",     "Schedule",      "StepPlan", "StepExec", "StepDone",
        "LoadSpec", "SaveSpec", "Completion",    "Verdict",  "Stats",    "Shutdown",
        "Touch",    "Lookup",   "LookupRelease", "Fence"};
    for (int k = 0; k < KVT_MSG_KIND_COUNT; k++)
        cr_assert_str_eq(kvt_msg_kind_name(k), names[k]);
    cr_assert_str_eq(kvt_msg_kind_name(-1), "?");
    cr_assert_str_eq(kvt_msg_kind_name(KVT_MSG_KIND_COUNT), "?");
}

Test(kvt_msg, err_str_formats_kind_field_reason)
{
    char buf[200];
    kvt_msg_err_t e = {.kind = KVT_MSG_STEP_EXEC,
                       .field = "entries[3].blocks",
                       .reason = "array longer than 65536"};
    cr_assert_str_eq(kvt_msg_err_str(&e, buf, sizeof buf),
                     "StepExec.entries[3].blocks: array longer than 65536");
    kvt_msg_err_t v = {.kind = KVT_MSG_NONE, .field = "version", .reason = "bad"};
    cr_assert_str_eq(kvt_msg_err_str(&v, buf, sizeof buf), "version: bad");
    char tiny[8];
    cr_assert_str_eq(kvt_msg_err_str(&e, tiny, sizeof tiny), "StepExe");
}

Test(kvt_msg, clear_is_safe_on_zeroed_cleared_and_moved_out_messages)
{
    kvt_msg_t msg = {0};
    kvt_msg_clear(&msg);
    kvt_msg_clear(NULL);
    s_sample(KVT_MSG_STEP_PLAN, KVT_SAMPLE_TYPICAL, &msg);
    //  A handler moved entries[0].blocks and the whole loads array out.
    uint32_t *blocks = msg.u.step_plan.entries[0].blocks;
    msg.u.step_plan.entries[0].blocks = NULL;
    kvt_load_spec_t *loads = msg.u.step_plan.loads;
    msg.u.step_plan.loads = NULL;
    kvt_msg_clear(&msg);
    cr_assert(s_is_empty(&msg));
    kvt_msg_clear(&msg);
    free(blocks);
    for (uint32_t i = 0; i < 2; i++) {
        free(loads[i].keys);
        free(loads[i].blocks);
    }
    free(loads);
}

Test(kvt_msg, decode_without_err_pointer)
{
    kvt_msg_t msg;
    static const uint8_t bad[] = {0x93, 0x02, 0x01, 0x80};
    cr_assert_eq(kvt_msg_decode(bad, sizeof bad, &msg, NULL), -1);
    cr_assert(s_is_empty(&msg));
}

// --------------------------------------------------------------- framing --

Test(kvt_msg, every_truncated_prefix_is_rejected)
{
    for (int shape = KVT_SAMPLE_MIN; shape <= KVT_SAMPLE_TYPICAL; shape++)
        for (int kind = 1; kind < KVT_MSG_KIND_COUNT; kind++) {
            kvt_msg_t msg;
            uint8_t *buf;
            size_t len;
            s_sample(kind, shape, &msg);
            s_encode(&msg, &buf, &len);
            kvt_msg_clear(&msg);
            for (size_t n = 0; n < len; n++) {
                kvt_msg_err_t err;
                //  A fresh copy of exactly n bytes, so ASan sees any overread.
                uint8_t *prefix = malloc(n ? n : 1);
                cr_assert(prefix);
                memcpy(prefix, buf, n);
                memset(&msg, 0x5A, sizeof msg);
                int rc = kvt_msg_decode(prefix, n, &msg, &err);
                free(prefix);
                cr_assert_eq(rc, -1, "%s/%s: prefix of %zu/%zu bytes accepted",
                             kvt_msg_kind_name(kind), s_shape_name[shape], n, len);
                cr_assert(s_is_empty(&msg), "message not left empty");
                cr_assert_neq(err.reason[0], '\0');
                cr_assert_neq(err.field[0], '\0');
            }
            free(buf);
        }
}

Test(kvt_msg, trailing_bytes_are_rejected)
{
    for (int kind = 1; kind < KVT_MSG_KIND_COUNT; kind++) {
        kvt_msg_t msg;
        uint8_t *buf;
        size_t len;
        s_sample(kind, KVT_SAMPLE_TYPICAL, &msg);
        s_encode(&msg, &buf, &len);
        kvt_msg_clear(&msg);
        uint8_t *two = malloc(2 * len);
        cr_assert(two);
        memcpy(two, buf, len);
        memcpy(two + len, buf, len);
        kvt_msg_err_t err;
        static const uint8_t tails[] = {0x00, 0xc0, 0xc1};
        for (size_t t = 0; t < sizeof tails; t++) {
            two[len] = tails[t];
            cr_assert_eq(kvt_msg_decode(two, len + 1, &msg, &err), -1);
            cr_assert(s_is_empty(&msg));
            cr_assert_str_eq(err.field, "frame");
            cr_assert(strstr(err.reason, "1 trailing byte"), "%s", err.reason);
        }
        two[len] = buf[0];
        cr_assert_eq(kvt_msg_decode(two, 2 * len, &msg, &err), -1, "two messages in one frame");
        cr_assert_str_eq(err.field, "frame");
        cr_assert_eq((int)err.kind, kind);
        free(two);
        free(buf);
    }
}

//  [1, 1, {1: 0, 3: bin(n)}]: a Ping whose unknown key 3 pads the frame to `total`.
static uint8_t *s_padded_ping(size_t total)
{
    static const uint8_t head[] = {0x93, 0x01, 0x01, 0x82, 0x01, 0x00, 0x03, 0xc6};
    size_t n = total - sizeof head - 4;
    uint8_t *buf = calloc(1, total);
    cr_assert(buf);
    memcpy(buf, head, sizeof head);
    buf[8] = (uint8_t)(n >> 24);
    buf[9] = (uint8_t)(n >> 16);
    buf[10] = (uint8_t)(n >> 8);
    buf[11] = (uint8_t)n;
    return buf;
}

Test(kvt_msg, frame_at_the_cap_decodes_one_byte_over_is_rejected_before_parsing)
{
    kvt_msg_t msg;
    kvt_msg_err_t err;
    size_t alloc;
    uint8_t *buf = s_padded_ping(KVT_MSG_MAX_FRAME);
    cr_assert_eq(kvt_msg_decode(buf, KVT_MSG_MAX_FRAME, &msg, &err), 0, "%s", err.reason);
    cr_assert_eq(msg.kind, KVT_MSG_PING);
    kvt_msg_clear(&msg);
    free(buf);
    buf = s_padded_ping(KVT_MSG_MAX_FRAME + 1);
    cr_assert_eq(kvt_msg_decode_ex(buf, KVT_MSG_MAX_FRAME + 1, &msg, &err, &alloc), -1);
    cr_assert_str_eq(err.field, "frame");
    cr_assert_eq(err.kind, KVT_MSG_NONE, "rejected before the kind was read");
    cr_assert(strstr(err.reason, "cap"), "%s", err.reason);
    cr_assert_eq(alloc, 0);
    free(buf);
    cr_assert_eq(kvt_msg_decode((const uint8_t *)"", 0, &msg, &err), -1);
    cr_assert_str_eq(err.field, "frame");
}

Test(kvt_msg, encode_refuses_a_message_over_the_frame_cap_without_building_it)
{
    //  4096 entries that all share one 65536-block table: ~5 GB on the wire.
    static uint32_t blocks[KVT_MSG_MAX_BLOCKS];
    static kvt_hash_t hashes[KVT_MSG_MAX_BLOCKS];
    static kvt_entry_t entries[KVT_MSG_MAX_ENTRIES];
    for (uint32_t i = 0; i < KVT_MSG_MAX_ENTRIES; i++)
        entries[i] = (kvt_entry_t){.op = {.req = i, .gen = 1},
                                   .start = 0,
                                   .end = 16,
                                   .blocks = blocks,
                                   .hashes = hashes,
                                   .nblocks = KVT_MSG_MAX_BLOCKS};
    kvt_msg_t msg = {.kind = KVT_MSG_STEP_EXEC};
    msg.u.step_exec.entries = entries;
    msg.u.step_exec.nentries = KVT_MSG_MAX_ENTRIES;
    kvt_msg_err_t err;
    double t0 = s_now();
    cr_assert_eq(kvt_msg_check(&msg, &err), -1);
    cr_assert_str_eq(err.field, "entries[12].hashes");
    cr_assert(strstr(err.reason, "frame cap"), "%s", err.reason);
    uint8_t *buf = (uint8_t *)&msg;
    size_t len = 99;
    cr_assert_eq(kvt_msg_encode(&msg, &buf, &len), -1);
    cr_assert_null(buf);
    cr_assert_eq(len, 0);
    cr_assert_lt(s_now() - t0, 1.0);
}

// ------------------------------------------------------- hostile headers --

//  Frames whose headers claim far more than they carry. msgpack_unpack_next
//  would pre-allocate n × 24 bytes for such an array header; the decoder
//  must refuse each one before allocating anything.
typedef struct {
    const char *name;    //  what the frame is
    const uint8_t *data; //  the frame
    size_t len;          //  its length
    int kind;            //  kind in the error
    const char *field;   //  field in the error
    const char *reason;  //  substring of the reason
} s_hostile_t;

#define BYTES(...) (const uint8_t[]){__VA_ARGS__}, sizeof((const uint8_t[]){__VA_ARGS__})

static const s_hostile_t s_hostile[] = {
    {"envelope array32", BYTES(0xdd, 0xff, 0xff, 0xff, 0xff), 0, "envelope", "header claims"},
    {"envelope map32", BYTES(0xdf, 0xff, 0xff, 0xff, 0xff), 0, "envelope", "expected array"},
    {"body map32", BYTES(0x93, 0x01, 0x02, 0xdf, 0xff, 0xff, 0xff, 0xff), KVT_MSG_SCHEDULE, "body",
     "header claims"},
    {"arrivals array32",
     BYTES(0x93, 0x01, 0x02, 0x83, 0x01, 0x00, 0x03, 0x00, 0x02, 0xdd, 0xff, 0xff, 0xff, 0xff),
     KVT_MSG_SCHEDULE, "arrivals", "header claims"},
    {"entries claim 4096 with nothing behind",
     BYTES(0x93, 0x01, 0x04, 0x82, 0x01, 0x00, 0x03, 0xdc, 0x10, 0x00), KVT_MSG_STEP_EXEC,
     "entries", "header claims 4096"},
    {"entries[0].blocks bin32",
     BYTES(0x93, 0x01, 0x04, 0x81, 0x03, 0x91, 0x81, 0x06, 0xc6, 0xff, 0xff, 0xff, 0xff),
     KVT_MSG_STEP_EXEC, "entries[0].blocks", "header claims"},
    {"payload bin32", BYTES(0x93, 0x01, 0x01, 0x81, 0x02, 0xc6, 0x7f, 0xff, 0xff, 0xff),
     KVT_MSG_PING, "payload", "header claims"},
    {"wrong array32", BYTES(0x93, 0x01, 0x05, 0x81, 0x06, 0xdd, 0x00, 0x01, 0x00, 0x00),
     KVT_MSG_STEP_DONE, "wrong", "header claims 65536"},
    {"counters map32", BYTES(0x93, 0x01, 0x0a, 0x81, 0x03, 0xdf, 0xff, 0xff, 0xff, 0xff),
     KVT_MSG_STATS, "counters", "header claims"},
    {"unknown key holding array32",
     BYTES(0x93, 0x01, 0x0b, 0x81, 0x09, 0xdd, 0xff, 0xff, 0xff, 0xff), KVT_MSG_SHUTDOWN, "key 9",
     "header claims"},
    {"unknown key holding ext32",
     BYTES(0x93, 0x01, 0x0b, 0x81, 0x09, 0xc9, 0xff, 0xff, 0xff, 0xff, 0x01), KVT_MSG_SHUTDOWN,
     "key 9", "header claims"},
    {"unknown key nesting array32 inside arrays",
     BYTES(0x93, 0x01, 0x0b, 0x81, 0x09, 0x91, 0x91, 0xdd, 0xff, 0xff, 0xff, 0xff),
     KVT_MSG_SHUTDOWN, "key 9", "header claims"},
    {"text str32", BYTES(0x93, 0x01, 0x0b, 0x81, 0x02, 0xdb, 0xff, 0xff, 0xff, 0xff),
     KVT_MSG_SHUTDOWN, "text", "header claims"},
};

Test(kvt_msg, huge_headers_are_rejected_fast_without_allocating)
{
    for (size_t i = 0; i < sizeof s_hostile / sizeof s_hostile[0]; i++) {
        const s_hostile_t *h = &s_hostile[i];
        kvt_msg_t msg;
        kvt_msg_err_t err;
        size_t alloc = 12345;
        double t0 = s_now();
        int rc = kvt_msg_decode_ex(h->data, h->len, &msg, &err, &alloc);
        double dt = s_now() - t0;
        cr_assert_eq(rc, -1, "%s accepted", h->name);
        cr_assert(s_is_empty(&msg));
        //  At most the one element that really is there, never the claim.
        cr_assert_leq(alloc, 256, "%s: allocated %zu bytes", h->name, alloc);
        cr_assert_eq((int)err.kind, h->kind, "%s: kind %d", h->name, err.kind);
        cr_assert_str_eq(err.field, h->field, "%s", h->name);
        cr_assert(strstr(err.reason, h->reason), "%s: reason \"%s\"", h->name, err.reason);
        cr_assert_lt(dt, 0.05, "%s took %.3f s", h->name, dt);
    }
}

Test(kvt_msg, a_big_claim_within_the_frame_is_still_capped_by_the_field_limit)
{
    //  StepExec {3: [4097 × {}]}: the count fits in the bytes left but is
    //  over KVT_MSG_MAX_ENTRIES, so nothing is allocated either.
    size_t n = KVT_MSG_MAX_ENTRIES + 1;
    size_t len = 8 + n;
    uint8_t *buf = malloc(len);
    cr_assert(buf);
    const uint8_t head[] = {0x93, 0x01, 0x04, 0x81, 0x03, 0xdc, (uint8_t)(n >> 8), (uint8_t)n};
    memcpy(buf, head, sizeof head);
    memset(buf + 8, 0x80, n);
    kvt_msg_t msg;
    kvt_msg_err_t err;
    size_t alloc;
    cr_assert_eq(kvt_msg_decode_ex(buf, len, &msg, &err, &alloc), -1);
    cr_assert_str_eq(err.field, "entries");
    cr_assert(strstr(err.reason, "longer than 4096"), "%s", err.reason);
    cr_assert_eq(alloc, 0);
    free(buf);
}

Test(kvt_msg, decode_allocation_is_bounded_by_the_frame_size)
{
    for (int shape = 0; shape < KVT_SAMPLE_COUNT; shape++)
        for (int kind = 1; kind < KVT_MSG_KIND_COUNT; kind++) {
            kvt_msg_t msg;
            uint8_t *buf;
            size_t len, alloc;
            s_sample(kind, shape, &msg);
            s_encode(&msg, &buf, &len);
            kvt_msg_clear(&msg);
            cr_assert_eq(kvt_msg_decode_ex(buf, len, &msg, NULL, &alloc), 0);
            cr_assert_leq(alloc, ALLOC_BOUND(len), "%s/%s: %zu for %zu bytes",
                          kvt_msg_kind_name(kind), s_shape_name[shape], alloc, len);
            kvt_msg_clear(&msg);
            free(buf);
        }
}

// ------------------------------------------------------------ bit flips --

//  msgpack-c agrees the frame is one complete, well-formed object.
static bool s_msgpack_c_accepts(const uint8_t *buf, size_t len)
{
    msgpack_unpacked result;
    msgpack_unpacked_init(&result);
    size_t off = 0;
    msgpack_unpack_return rc = msgpack_unpack_next(&result, (const char *)buf, len, &off);
    msgpack_unpacked_destroy(&result);
    return rc == MSGPACK_UNPACK_SUCCESS && off == len;
}

//  Decodes a mutated frame: it either fails cleanly or is a valid message
//  that survives encode → decode unchanged.
static bool s_decode_or_fail_cleanly(const uint8_t *buf, size_t len)
{
    kvt_msg_t msg, back;
    kvt_msg_err_t err;
    size_t alloc;
    if (kvt_msg_decode_ex(buf, len, &msg, &err, &alloc) != 0) {
        cr_assert(s_is_empty(&msg));
        cr_assert_neq(err.reason[0], '\0');
        return false;
    }
    cr_assert_leq(alloc, ALLOC_BOUND(len));
    cr_assert(s_msgpack_c_accepts(buf, len), "accepted a frame msgpack-c calls malformed");
    uint8_t *enc, *enc2;
    size_t n, n2;
    s_encode(&msg, &enc, &n);
    cr_assert_eq(kvt_msg_decode(enc, n, &back, &err), 0, "re-encoding does not decode: %s",
                 err.reason);
    s_eq_msg(&msg, &back);
    s_encode(&back, &enc2, &n2);
    cr_assert(n == n2 && memcmp(enc, enc2, n) == 0);
    free(enc);
    free(enc2);
    kvt_msg_clear(&back);
    kvt_msg_clear(&msg);
    return true;
}

Test(kvt_msg, bit_flip_sweep_never_crashes_every_kind)
{
    for (int shape = KVT_SAMPLE_MIN; shape <= KVT_SAMPLE_TYPICAL; shape++)
        for (int kind = 1; kind < KVT_MSG_KIND_COUNT; kind++) {
            kvt_msg_t msg;
            uint8_t *buf;
            size_t len;
            s_sample(kind, shape, &msg);
            s_encode(&msg, &buf, &len);
            kvt_msg_clear(&msg);
            size_t accepted = 0, total = 0;
            for (size_t byte = 0; byte < len; byte++)
                for (int bit = 0; bit < 8; bit++) {
                    buf[byte] ^= (uint8_t)(1u << bit);
                    accepted += s_decode_or_fail_cleanly(buf, len);
                    total++;
                    buf[byte] ^= (uint8_t)(1u << bit);
                }
            //  Flips in the envelope must always be caught.
            cr_assert_lt(accepted, total, "%s", kvt_msg_kind_name(kind));
            free(buf);
        }
}

// --------------------------------------------------------------- corpus --

//  Valid seeds are "valid-*", rejected ones "bad-*"; anything else (inputs
//  the fuzzer found) only has to decode or fail cleanly.
Test(kvt_msg, corpus_replays_without_crashing_and_valid_seeds_decode)
{
    DIR *dir = opendir(CORPUS_DIR);
    cr_assert(dir, "cannot open %s", CORPUS_DIR);
    size_t files = 0, valid = 0;
    struct dirent *ent;
    while ((ent = readdir(dir)) != NULL) {
        if (ent->d_name[0] == '.')
            continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", CORPUS_DIR, ent->d_name);
        FILE *f = fopen(path, "rb");
        cr_assert(f, "%s", path);
        uint8_t *data = malloc(KVT_MSG_MAX_FRAME + 1);
        cr_assert(data);
        size_t len = fread(data, 1, KVT_MSG_MAX_FRAME + 1, f);
        fclose(f);
        bool ok = s_decode_or_fail_cleanly(data, len);
        if (strncmp(ent->d_name, "valid-", 6) == 0) {
            cr_assert(ok, "valid seed %s does not decode", ent->d_name);
            valid++;
        } else if (strncmp(ent->d_name, "bad-", 4) == 0) {
            cr_assert(!ok, "bad seed %s decodes", ent->d_name);
        }
        free(data);
        files++;
    }
    closedir(dir);
    cr_assert_geq(valid, 2 * (KVT_MSG_KIND_COUNT - 1), "a valid seed per kind and shape");
    cr_assert_gt(files, valid, "malformed seeds too");
}

static void s_write(const char *name, const uint8_t *data, size_t len)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", CORPUS_DIR, name);
    FILE *f = fopen(path, "wb");
    cr_assert(f, "%s: %s", path, strerror(errno));
    cr_assert_eq(fwrite(data, 1, len, f), len);
    cr_assert_eq(fclose(f), 0);
}

//  Regenerates the seed corpus when KVT_REGEN_CORPUS=1 (otherwise a no-op):
//    KVT_REGEN_CORPUS=1 ./test_messages --filter 'kvt_msg/corpus_regenerate'
//  Fuzzer-found inputs (other names) are left alone.
Test(kvt_msg, corpus_regenerate)
{
    const char *env = getenv("KVT_REGEN_CORPUS");
    if (!env || strcmp(env, "1") != 0)
        return;
    mkdir(CORPUS_DIR, 0755);
    for (int kind = 1; kind < KVT_MSG_KIND_COUNT; kind++)
        for (int shape = KVT_SAMPLE_MIN; shape < KVT_SAMPLE_COUNT; shape++) {
            if (shape == KVT_SAMPLE_MAX)
                continue; //  too big for a seed
            kvt_msg_t msg;
            uint8_t *buf;
            size_t len;
            char name[128];
            s_sample(kind, shape, &msg);
            s_encode(&msg, &buf, &len);
            kvt_msg_clear(&msg);
            if (shape > KVT_SAMPLE_MAX) {
                //  An alternate shape only where the kind has one.
                uint8_t *typ;
                size_t ntyp;
                s_sample(kind, KVT_SAMPLE_TYPICAL, &msg);
                s_encode(&msg, &typ, &ntyp);
                kvt_msg_clear(&msg);
                bool same = ntyp == len && memcmp(typ, buf, len) == 0;
                free(typ);
                if (same) {
                    free(buf);
                    continue;
                }
            }
            snprintf(name, sizeof name, "valid-%s-%s", kvt_msg_kind_name(kind),
                     s_shape_name[shape]);
            s_write(name, buf, len);
            if (shape == KVT_SAMPLE_TYPICAL) {
                snprintf(name, sizeof name, "bad-%s-truncated", kvt_msg_kind_name(kind));
                s_write(name, buf, len / 2);
                buf[len / 3] ^= 0x10; //  may or may not stay valid
                snprintf(name, sizeof name, "flip-%s", kvt_msg_kind_name(kind));
                s_write(name, buf, len);
                buf[len / 3] ^= 0x10;
                uint8_t *longer = malloc(len + 1);
                cr_assert(longer);
                memcpy(longer, buf, len);
                longer[len] = 0;
                snprintf(name, sizeof name, "bad-%s-trailing", kvt_msg_kind_name(kind));
                s_write(name, longer, len + 1);
                free(longer);
            }
            free(buf);
        }
    for (size_t i = 0; i < sizeof s_hostile / sizeof s_hostile[0]; i++) {
        char name[128];
        snprintf(name, sizeof name, "bad-hostile-%02zu", i);
        s_write(name, s_hostile[i].data, s_hostile[i].len);
    }
    static const uint8_t version2[] = {0x93, 0x02, 0x01, 0x81, 0x01, 0x00};
    s_write("bad-version-2", version2, sizeof version2);
    static const uint8_t kind16[] = {0x93, 0x01, 0x10, 0x80};
    s_write("bad-kind-16", kind16, sizeof kind16);
    //  Ping {1: 5, 9: {"x": [1, 2.5, nil, {}]}}: unknown key ignored.
    static const uint8_t unknown[] = {0x93, 0x01, 0x01, 0x82, 0x01, 0x05, 0x09, 0x81,
                                      0xa1, 0x78, 0x94, 0x01, 0xcb, 0x40, 0x04, 0,
                                      0,    0,    0,    0,    0,    0xc0, 0x80};
    s_write("valid-ping-unknown-key", unknown, sizeof unknown);
}
