/*  test_messages_reject.c — every malformed body is refused with the field
    named, and every schema violation is refused by the encoder.

    Bad frames are made from a valid sample frame: msgpack-c (an independent
    parser) unpacks it, and it is packed again with one change at a path
    (replace a value, remove / duplicate a key, add an unknown key). The
    field catalog below is written from docs/protocol.md, not taken from the
    codec's own tables, so a wrong key number in either shows up here.
*/
#include <criterion/criterion.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvtier/kvt_msg.h"
#include "messages/kvt_msg_test.h"

// ------------------------------------------------------------- mutation --

typedef enum {
    M_REPLACE, //  the value at path becomes raw
    M_REMOVE,  //  the key at path is dropped from its map
    M_DUP,     //  the key at path appears twice
    M_ADD,     //  the map at path gets key add_key → raw
} s_op_t;

typedef struct {
    s_op_t op;          //  what to do
    const int *path;    //  steps from the envelope: array index or map key, ends with -1
    const uint8_t *raw; //  msgpack bytes of the new value
    size_t nraw;        //  length of raw
    uint64_t add_key;   //  key for M_ADD
} s_mut_t;

static bool s_key_is(const msgpack_object *key, int want)
{
    return key->type == MSGPACK_OBJECT_POSITIVE_INTEGER && key->via.u64 == (uint64_t)want;
}

static void s_pack_mut(msgpack_packer *pk, msgpack_sbuffer *sb, const msgpack_object *o,
                       const int *path, const s_mut_t *m)
{
    if (path[0] < 0 && m->op == M_REPLACE) {
        cr_assert_eq(msgpack_sbuffer_write(sb, (const char *)m->raw, m->nraw), 0);
        return;
    }
    if (path[0] < 0 && m->op == M_ADD) {
        cr_assert_eq(o->type, MSGPACK_OBJECT_MAP, "M_ADD needs a map");
        msgpack_pack_map(pk, o->via.map.size + 1);
        for (uint32_t i = 0; i < o->via.map.size; i++) {
            msgpack_pack_object(pk, o->via.map.ptr[i].key);
            msgpack_pack_object(pk, o->via.map.ptr[i].val);
        }
        msgpack_pack_uint64(pk, m->add_key);
        cr_assert_eq(msgpack_sbuffer_write(sb, (const char *)m->raw, m->nraw), 0);
        return;
    }
    cr_assert_geq(path[0], 0, "path ends inside a scalar");
    bool found = false;
    if (o->type == MSGPACK_OBJECT_MAP) {
        bool last = path[1] < 0 && (m->op == M_REMOVE || m->op == M_DUP);
        uint32_t n = o->via.map.size;
        if (last)
            n = m->op == M_DUP ? n + 1 : n - 1;
        msgpack_pack_map(pk, n);
        for (uint32_t i = 0; i < o->via.map.size; i++) {
            const msgpack_object_kv *kv = &o->via.map.ptr[i];
            if (!s_key_is(&kv->key, path[0])) {
                msgpack_pack_object(pk, kv->key);
                msgpack_pack_object(pk, kv->val);
                continue;
            }
            found = true;
            if (last && m->op == M_REMOVE)
                continue;
            msgpack_pack_object(pk, kv->key);
            if (last) {
                msgpack_pack_object(pk, kv->val);
                msgpack_pack_object(pk, kv->key);
                msgpack_pack_object(pk, kv->val);
            } else {
                s_pack_mut(pk, sb, &kv->val, path + 1, m);
            }
        }
    } else if (o->type == MSGPACK_OBJECT_ARRAY) {
        msgpack_pack_array(pk, o->via.array.size);
        for (uint32_t i = 0; i < o->via.array.size; i++) {
            if ((int)i == path[0]) {
                found = true;
                s_pack_mut(pk, sb, &o->via.array.ptr[i], path + 1, m);
            } else {
                msgpack_pack_object(pk, o->via.array.ptr[i]);
            }
        }
    }
    cr_assert(found, "path step %d not found", path[0]);
}

//  The sample shape a table row names: 0 (unset) is TYPICAL, SHAPE_MIN MIN.
#define SHAPE_MIN (-1)
static int s_shape(int shape)
{
    return shape == SHAPE_MIN ? KVT_SAMPLE_MIN : shape ? shape : KVT_SAMPLE_TYPICAL;
}

//  Encodes sample (kind, shape) and applies m; the caller frees *buf.
static void s_mutated(int kind, int shape, const s_mut_t *m, uint8_t **buf, size_t *len)
{
    kvt_msg_t msg;
    uint8_t *frame;
    size_t flen;
    cr_assert_eq(kvt_msg_sample(kind, s_shape(shape), &msg), 0);
    cr_assert_eq(kvt_msg_encode(&msg, &frame, &flen), 0);
    kvt_msg_clear(&msg);
    msgpack_unpacked root;
    msgpack_unpacked_init(&root);
    size_t off = 0;
    cr_assert_eq(msgpack_unpack_next(&root, (const char *)frame, flen, &off),
                 MSGPACK_UNPACK_SUCCESS);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    s_pack_mut(&pk, &sb, &root.data, m->path, m);
    msgpack_unpacked_destroy(&root);
    free(frame);
    *len = sb.size;
    *buf = (uint8_t *)msgpack_sbuffer_release(&sb);
}

//  Applies m to the sample and asserts the decoder refuses it naming field.
static void s_expect_reject(int kind, int shape, const s_mut_t *m, int err_kind, const char *field,
                            const char *reason)
{
    uint8_t *buf;
    size_t len;
    s_mutated(kind, shape, m, &buf, &len);
    kvt_msg_t msg;
    kvt_msg_err_t err;
    char text[256];
    int rc = kvt_msg_decode(buf, len, &msg, &err);
    free(buf);
    cr_assert_eq(rc, -1, "%s: expected a rejection on %s (%s)", kvt_msg_kind_name(kind), field,
                 reason);
    static const kvt_msg_t zero;
    cr_assert(memcmp(&msg, &zero, sizeof zero) == 0, "message not left empty");
    kvt_msg_err_str(&err, text, sizeof text);
    cr_assert_eq((int)err.kind, err_kind, "%s", text);
    cr_assert_str_eq(err.field, field, "%s: got %s", kvt_msg_kind_name(kind), text);
    cr_assert(strstr(err.reason, reason), "%s: reason \"%s\", want \"%s\"", kvt_msg_kind_name(kind),
              err.reason, reason);
}

//  Applies m and asserts the result decodes; returns it (caller clears).
static void s_expect_accept(int kind, int shape, const s_mut_t *m, kvt_msg_t *msg)
{
    uint8_t *buf;
    size_t len;
    s_mutated(kind, shape, m, &buf, &len);
    kvt_msg_err_t err;
    char text[256];
    int rc = kvt_msg_decode(buf, len, msg, &err);
    free(buf);
    cr_assert_eq(rc, 0, "%s", kvt_msg_err_str(&err, text, sizeof text));
}

//  Encoding of a message, for comparing two messages.
static void s_same_as_sample(const kvt_msg_t *msg, int shape)
{
    kvt_msg_t sample;
    uint8_t *a, *b;
    size_t na, nb;
    cr_assert_eq(kvt_msg_sample(msg->kind, s_shape(shape), &sample), 0);
    cr_assert_eq(kvt_msg_encode(&sample, &a, &na), 0);
    cr_assert_eq(kvt_msg_encode(msg, &b, &nb), 0);
    cr_assert(na == nb && memcmp(a, b, na) == 0, "differs from the sample");
    free(a);
    free(b);
    kvt_msg_clear(&sample);
}

// ------------------------------------------------------- field catalog --

typedef enum { W_UINT, W_BOOL, W_BIN, W_STR, W_ARRAY, W_MAP } s_wt_t;

typedef struct {
    int key;          //  map key
    const char *name; //  field name
    s_wt_t type;      //  msgpack type
    bool optional;    //  may be absent
    const char *tied; //  optional, but this sample's other fields need it: its
                      //  removal is refused naming this field (NULL: accepted)
} s_tf_t;

#define END_FIELDS                   \
    {                                \
        0, NULL, W_UINT, false, NULL \
    }

static const s_tf_t f_ping[] = {
    {1, "seq", W_UINT, 0, NULL}, {2, "payload", W_BIN, 1, NULL}, END_FIELDS};
static const s_tf_t f_schedule[] = {{1, "step", W_UINT, 0, NULL},
                                    {2, "arrivals", W_ARRAY, 0, NULL},
                                    {3, "now_us", W_UINT, 0, NULL},
                                    {4, "prev_failed", W_BOOL, 1, NULL},
                                    {5, "aborts", W_ARRAY, 1, NULL},
                                    {6, "preempts", W_ARRAY, 1, NULL},
                                    END_FIELDS};
static const s_tf_t f_arrival[] = {{1, "req", W_UINT, 0, NULL},
                                   {2, "tokens", W_BIN, 0, NULL},
                                   {3, "max_new_tokens", W_UINT, 0, NULL},
                                   {4, "arrival_us", W_UINT, 0, NULL},
                                   END_FIELDS};
static const s_tf_t f_plan[] = {{1, "step", W_UINT, 0, NULL},
                                {2, "entries", W_ARRAY, 0, NULL},
                                {3, "loads", W_ARRAY, 0, NULL},
                                {4, "saves", W_ARRAY, 0, NULL},
                                {5, "events", W_ARRAY, 0, NULL},
                                {6, "idle", W_BOOL, 0, NULL},
                                END_FIELDS};
static const s_tf_t f_entry[] = {{1, "req", W_UINT, 0, NULL},
                                 {2, "gen", W_UINT, 0, NULL},
                                 {3, "start", W_UINT, 0, NULL},
                                 {4, "end", W_UINT, 0, NULL},
                                 {5, "first_block", W_UINT, 0, NULL},
                                 {6, "blocks", W_BIN, 0, NULL},
                                 {7, "hashes", W_BIN, 0, NULL},
                                 {8, "verify_end", W_UINT, 0, NULL},
                                 END_FIELDS};
//  SaveSpec with both legs (KV chunks + the image at their end) and an
//  image-only one: the state fields are optional on the wire but the image
//  needs its boundary and hash; without `image` the boundary is orphaned
//  (both legs) or no leg is left (image only).
#define F_SPEC_KV                                                                                \
    {1, "req", W_UINT, 0, NULL}, {2, "gen", W_UINT, 0, NULL}, {3, "start", W_UINT, 0, NULL},     \
        {4, "end", W_UINT, 0, NULL}, {5, "keys", W_BIN, 0, NULL}, {6, "blocks", W_BIN, 0, NULL}, \
    {                                                                                            \
        7, "attempt", W_UINT, 1, NULL                                                            \
    }
static const s_tf_t f_spec[] = {F_SPEC_KV,
                                {10, "state_boundary", W_UINT, 1, "state_boundary"},
                                {11, "state_hash", W_BIN, 1, "state_hash"},
                                {12, "state_slot", W_UINT, 1, NULL},
                                {14, "image", W_BOOL, 1, "state_boundary"},
                                {15, "producer", W_UINT, 1, NULL},
                                {16, "producer_failed", W_BOOL, 1, NULL},
                                END_FIELDS};
static const s_tf_t f_spec_image_only[] = {F_SPEC_KV,
                                           {10, "state_boundary", W_UINT, 1, "state_boundary"},
                                           {11, "state_hash", W_BIN, 1, "state_hash"},
                                           {12, "state_slot", W_UINT, 1, NULL},
                                           {14, "image", W_BOOL, 1, "image"},
                                           {15, "producer", W_UINT, 1, NULL},
                                           {16, "producer_failed", W_BOOL, 1, NULL},
                                           END_FIELDS};
//  LoadSpec with both legs and a state-only one (rule L3), as above.
static const s_tf_t f_load[] = {F_SPEC_KV,
                                {8, "lookup", W_BOOL, 1, NULL},
                                {9, "state", W_BOOL, 1, "state_boundary"},
                                {10, "state_boundary", W_UINT, 1, "state_boundary"},
                                {11, "state_hash", W_BIN, 1, "state_hash"},
                                {12, "state_slot", W_UINT, 1, NULL},
                                {13, "after", W_UINT, 1, NULL},
                                END_FIELDS};
static const s_tf_t f_load_state_only[] = {F_SPEC_KV,
                                           {8, "lookup", W_BOOL, 1, NULL},
                                           {9, "state", W_BOOL, 1, "state"},
                                           {10, "state_boundary", W_UINT, 1, "state_boundary"},
                                           {11, "state_hash", W_BIN, 1, "state_hash"},
                                           {12, "state_slot", W_UINT, 1, NULL},
                                           END_FIELDS};
static const s_tf_t f_event[] = {{1, "req", W_UINT, 0, NULL},
                                 {2, "gen", W_UINT, 0, NULL},
                                 {3, "type", W_UINT, 0, NULL},
                                 {4, "a", W_UINT, 0, NULL},
                                 {5, "b", W_UINT, 0, NULL},
                                 {6, "c", W_UINT, 0, NULL},
                                 END_FIELDS};
static const s_tf_t f_exec[] = {{1, "step", W_UINT, 0, NULL},     {2, "rank", W_UINT, 0, NULL},
                                {3, "entries", W_ARRAY, 0, NULL}, {4, "loads", W_ARRAY, 0, NULL},
                                {5, "saves", W_ARRAY, 0, NULL},   END_FIELDS};
static const s_tf_t f_done[] = {{1, "step", W_UINT, 0, NULL},
                                {2, "rank", W_UINT, 0, NULL},
                                {3, "ok", W_BOOL, 0, NULL},
                                {4, "blocks_written", W_UINT, 0, NULL},
                                {5, "blocks_verified", W_UINT, 0, NULL},
                                {6, "wrong", W_ARRAY, 0, NULL},
                                {7, "detail", W_UINT, 0, NULL},
                                END_FIELDS};
//  Completion per channel shape: the common fields, then the channel's own.
#define F_COMPLETION                                                                          \
    {1, "chan", W_UINT, 0, NULL}, {2, "req", W_UINT, 0, NULL}, {3, "gen", W_UINT, 0, NULL},   \
        {4, "key", W_BIN, 0, NULL}, {5, "rank", W_UINT, 0, NULL}, {6, "ok", W_BOOL, 0, NULL}, \
        {7, "detail", W_UINT, 0, NULL}, {8, "attempt", W_UINT, 1, NULL},                      \
        {9, "lower", W_UINT, 1, NULL},                                                        \
    {                                                                                         \
        10, "epoch", W_UINT, 1, NULL                                                          \
    }
static const s_tf_t f_completion[] = {F_COMPLETION,
                                      {12, "held", W_UINT, 1, NULL},
                                      {13, "images", W_BIN, 1, NULL},
                                      {15, "rank0_only", W_BOOL, 1, NULL},
                                      END_FIELDS};
static const s_tf_t f_completion_touch[] = {
    F_COMPLETION, {11, "touch", W_UINT, 1, NULL}, END_FIELDS};
static const s_tf_t f_completion_store[] = {
    F_COMPLETION, {14, "fenced", W_BOOL, 1, NULL}, END_FIELDS};
static const s_tf_t f_completion_fence[] = {F_COMPLETION, END_FIELDS};
#define F_VERDICT                                                                               \
    {1, "chan", W_UINT, 0, NULL}, {2, "req", W_UINT, 0, NULL}, {3, "gen", W_UINT, 0, NULL},     \
        {4, "key", W_BIN, 0, NULL}, {5, "ok", W_BOOL, 0, NULL}, {6, "detail", W_UINT, 0, NULL}, \
        {7, "nfailed", W_UINT, 0, NULL}, {8, "attempt", W_UINT, 1, NULL},                       \
    {                                                                                           \
        9, "lower", W_UINT, 1, NULL                                                             \
    }
static const s_tf_t f_verdict[] = {
    F_VERDICT, {11, "held", W_UINT, 1, NULL}, {12, "images", W_BIN, 1, NULL}, END_FIELDS};
static const s_tf_t f_verdict_touch[] = {F_VERDICT, {10, "touch", W_UINT, 1, NULL}, END_FIELDS};
static const s_tf_t f_verdict_store[] = {F_VERDICT, {13, "fenced", W_BOOL, 1, NULL}, END_FIELDS};
static const s_tf_t f_fence[] = {
    {1, "id", W_UINT, 0, NULL}, {2, "lanes", W_UINT, 1, NULL}, END_FIELDS};
static const s_tf_t f_touch[] = {{1, "hash", W_BIN, 0, NULL},
                                 {2, "round", W_UINT, 0, NULL},
                                 {3, "keys", W_BIN, 1, NULL},
                                 END_FIELDS};
static const s_tf_t f_lookup[] = {{1, "req", W_UINT, 0, NULL},
                                  {2, "gen", W_UINT, 0, NULL},
                                  {3, "keys", W_BIN, 0, NULL},
                                  {4, "pin", W_BOOL, 1, NULL},
                                  {5, "ttl_ms", W_UINT, 1, NULL},
                                  {6, "rank0_only", W_BOOL, 1, NULL},
                                  END_FIELDS};
static const s_tf_t f_lookup_release[] = {
    {1, "req", W_UINT, 0, NULL}, {2, "gen", W_UINT, 0, NULL}, END_FIELDS};
static const s_tf_t f_stats[] = {{1, "request", W_BOOL, 0, NULL},
                                 {2, "from", W_STR, 0, NULL},
                                 {3, "counters", W_MAP, 0, NULL},
                                 END_FIELDS};
static const s_tf_t f_shutdown[] = {
    {1, "code", W_UINT, 0, NULL}, {2, "text", W_STR, 1, NULL}, END_FIELDS};

//  A map to sweep: the top-level body of a kind, or one element inside it.
typedef struct {
    int kind;             //  sample kind
    const char *prefix;   //  field path prefix in errors ("entries[1].")
    int path[4];          //  steps to the map, ends with -1
    const s_tf_t *fields; //  its fields
    int shape;            //  sample shape (0: TYPICAL)
} s_body_t;

static const s_body_t s_bodies[] = {
    {KVT_MSG_PING, "", {2, -1}, f_ping, 0},
    {KVT_MSG_SCHEDULE, "", {2, -1}, f_schedule, 0},
    {KVT_MSG_SCHEDULE, "arrivals[1].", {2, 2, 1, -1}, f_arrival, 0},
    {KVT_MSG_STEP_PLAN, "", {2, -1}, f_plan, 0},
    {KVT_MSG_STEP_PLAN, "entries[1].", {2, 2, 1, -1}, f_entry, 0},
    {KVT_MSG_STEP_PLAN, "loads[0].", {2, 3, 0, -1}, f_load, 0},
    {KVT_MSG_STEP_PLAN, "saves[1].", {2, 4, 1, -1}, f_spec_image_only, 0},
    {KVT_MSG_STEP_PLAN, "events[2].", {2, 5, 2, -1}, f_event, 0},
    {KVT_MSG_STEP_EXEC, "", {2, -1}, f_exec, 0},
    {KVT_MSG_STEP_EXEC, "entries[2].", {2, 3, 2, -1}, f_entry, 0},
    {KVT_MSG_STEP_EXEC, "loads[1].", {2, 4, 1, -1}, f_load_state_only, 0},
    {KVT_MSG_STEP_EXEC, "saves[0].", {2, 5, 0, -1}, f_spec, 0},
    {KVT_MSG_STEP_DONE, "", {2, -1}, f_done, 0},
    {KVT_MSG_LOAD_SPEC, "", {2, -1}, f_load, 0},
    {KVT_MSG_LOAD_SPEC, "", {2, -1}, f_load_state_only, KVT_SAMPLE_ALT1},
    {KVT_MSG_SAVE_SPEC, "", {2, -1}, f_spec, 0},
    {KVT_MSG_SAVE_SPEC, "", {2, -1}, f_spec_image_only, KVT_SAMPLE_ALT1},
    {KVT_MSG_COMPLETION, "", {2, -1}, f_completion, 0},
    {KVT_MSG_COMPLETION, "", {2, -1}, f_completion_touch, KVT_SAMPLE_ALT1},
    {KVT_MSG_COMPLETION, "", {2, -1}, f_completion_store, KVT_SAMPLE_MAX},
    {KVT_MSG_COMPLETION, "", {2, -1}, f_completion_fence, KVT_SAMPLE_ALT2},
    {KVT_MSG_VERDICT, "", {2, -1}, f_verdict, 0},
    {KVT_MSG_VERDICT, "", {2, -1}, f_verdict_touch, KVT_SAMPLE_ALT1},
    {KVT_MSG_VERDICT, "", {2, -1}, f_verdict_store, KVT_SAMPLE_ALT2},
    {KVT_MSG_FENCE, "", {2, -1}, f_fence, 0},
    {KVT_MSG_STATS, "", {2, -1}, f_stats, 0},
    {KVT_MSG_SHUTDOWN, "", {2, -1}, f_shutdown, 0},
    {KVT_MSG_TOUCH, "", {2, -1}, f_touch, 0},
    {KVT_MSG_LOOKUP, "", {2, -1}, f_lookup, 0},
    {KVT_MSG_LOOKUP_RELEASE, "", {2, -1}, f_lookup_release, 0},
};
#define NBODIES (sizeof s_bodies / sizeof s_bodies[0])

//  path of body b extended by key.
static void s_field_path(const s_body_t *b, int key, int out[8])
{
    int i = 0;
    while (b->path[i] >= 0) {
        out[i] = b->path[i];
        i++;
    }
    out[i++] = key;
    out[i] = -1;
}

static void s_name(const s_body_t *b, const char *field, char out[64])
{
    snprintf(out, 64, "%s%s", b->prefix, field);
}

Test(kvt_msg_reject, every_kind_is_swept)
{
    bool covered[KVT_MSG_KIND_COUNT] = {false};
    for (size_t i = 0; i < NBODIES; i++)
        covered[s_bodies[i].kind] = true;
    for (int k = 1; k < KVT_MSG_KIND_COUNT; k++)
        cr_assert(covered[k], "%s not swept", kvt_msg_kind_name(k));
}

Test(kvt_msg_reject, missing_mandatory_field_is_named)
{
    for (size_t i = 0; i < NBODIES; i++) {
        const s_body_t *b = &s_bodies[i];
        for (const s_tf_t *f = b->fields; f->name; f++) {
            int path[8];
            char name[64];
            s_field_path(b, f->key, path);
            s_name(b, f->name, name);
            s_mut_t m = {.op = M_REMOVE, .path = path};
            if (f->optional && f->tied) {
                char tied[64];
                s_name(b, f->tied, tied);
                s_expect_reject(b->kind, b->shape, &m, b->kind, tied, "");
            } else if (f->optional) {
                kvt_msg_t msg;
                s_expect_accept(b->kind, b->shape, &m, &msg);
                kvt_msg_clear(&msg);
            } else {
                s_expect_reject(b->kind, b->shape, &m, b->kind, name, "missing mandatory field");
            }
        }
    }
}

Test(kvt_msg_reject, duplicate_key_is_named)
{
    for (size_t i = 0; i < NBODIES; i++) {
        const s_body_t *b = &s_bodies[i];
        for (const s_tf_t *f = b->fields; f->name; f++) {
            int path[8];
            char name[64];
            s_field_path(b, f->key, path);
            s_name(b, f->name, name);
            s_mut_t m = {.op = M_DUP, .path = path};
            s_expect_reject(b->kind, b->shape, &m, b->kind, name, "duplicate key");
        }
    }
}

Test(kvt_msg_reject, wrong_type_is_named)
{
    //  For each type, values of other types that must not pass for it.
    static const uint8_t str_x[] = {0xa1, 'x'}, bin_x[] = {0xc4, 0x01, 'x'}, one[] = {0x01},
                         nil[] = {0xc0}, fmap[] = {0x80}, farr[] = {0x90},
                         flt[] = {0xca, 0, 0, 0, 0}, tru[] = {0xc3};
    struct {
        const uint8_t *raw; //  the wrong value
        size_t n;           //  its length
    } wrong[6][3] = {
        [W_UINT] = {{str_x, 2}, {flt, 5}, {tru, 1}},   [W_BOOL] = {{one, 1}, {nil, 1}, {str_x, 2}},
        [W_BIN] = {{str_x, 2}, {farr, 1}, {one, 1}},   [W_STR] = {{bin_x, 3}, {one, 1}, {nil, 1}},
        [W_ARRAY] = {{fmap, 1}, {bin_x, 3}, {one, 1}}, [W_MAP] = {{farr, 1}, {str_x, 2}, {nil, 1}},
    };
    for (size_t i = 0; i < NBODIES; i++) {
        const s_body_t *b = &s_bodies[i];
        for (const s_tf_t *f = b->fields; f->name; f++)
            for (int w = 0; w < 3; w++) {
                int path[8];
                char name[64];
                s_field_path(b, f->key, path);
                s_name(b, f->name, name);
                s_mut_t m = {.op = M_REPLACE,
                             .path = path,
                             .raw = wrong[f->type][w].raw,
                             .nraw = wrong[f->type][w].n};
                s_expect_reject(b->kind, b->shape, &m, b->kind, name, "expected");
            }
    }
}

Test(kvt_msg_reject, unknown_keys_are_ignored_at_every_level)
{
    //  {"x": [1, 2.5, nil, true, ext8(1, "ab"), {"y": bin(2)}], 7: -3}
    static const uint8_t value[] = {0x82, 0xa1, 'x',  0x96, 0x01, 0xcb, 0x40, 0x04, 0,    0,
                                    0,    0,    0,    0,    0xc0, 0xc3, 0xc7, 0x02, 0x01, 'a',
                                    'b',  0x81, 0xa1, 'y',  0xc4, 0x02, 0,    0,    0x07, 0xfd};
    for (size_t i = 0; i < NBODIES; i++) {
        const s_body_t *b = &s_bodies[i];
        s_mut_t m = {
            .op = M_ADD, .path = b->path, .raw = value, .nraw = sizeof value, .add_key = 40};
        kvt_msg_t msg;
        s_expect_accept(b->kind, b->shape, &m, &msg);
        s_same_as_sample(&msg, b->shape);
        kvt_msg_clear(&msg);
        m.add_key = 1000000; //  any unsigned key, even a large one
        s_expect_accept(b->kind, b->shape, &m, &msg);
        s_same_as_sample(&msg, b->shape);
        kvt_msg_clear(&msg);
    }
}

Test(kvt_msg_reject, negative_integers_are_refused_for_every_uint_field)
{
    static const uint8_t neg1[] = {0xff}, neg_int8[] = {0xd0, 0x80};
    for (size_t i = 0; i < NBODIES; i++) {
        const s_body_t *b = &s_bodies[i];
        for (const s_tf_t *f = b->fields; f->name; f++) {
            if (f->type != W_UINT)
                continue;
            int path[8];
            char name[64];
            s_field_path(b, f->key, path);
            s_name(b, f->name, name);
            s_mut_t m = {.op = M_REPLACE, .path = path, .raw = neg1, .nraw = 1};
            s_expect_reject(b->kind, b->shape, &m, b->kind, name, "negative");
            m.raw = neg_int8;
            m.nraw = 2;
            s_expect_reject(b->kind, b->shape, &m, b->kind, name, "negative");
        }
    }
}

// -------------------------------------------------------- value table --

#define RAW(...) (const uint8_t[]){__VA_ARGS__}, sizeof((const uint8_t[]){__VA_ARGS__})
#define P(...)   ((const int[]){__VA_ARGS__, -1})

typedef struct {
    int kind;           //  sample kind (TYPICAL shape)
    const int *path;    //  value to replace
    const uint8_t *raw; //  new value
    size_t nraw;        //  its length
    const char *field;  //  field named in the error
    const char *reason; //  substring of the reason
    int shape;          //  sample shape (0: TYPICAL)
} s_row_t;

//  u64 2^32 and u32 256 in wider formats than needed.
#define U64_2_32 0xcf, 0, 0, 0, 1, 0, 0, 0, 0
#define U16_256  0xcd, 0x01, 0x00
//  A 16-byte bin: the zero hash, and one that is not.
#define BIN16_ZERO 0xc4, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
#define BIN16_ONE  0xc4, 0x10, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
#define U32_BIG    0xce, 0x7f, 0xff, 0xff, 0xff

static const s_row_t s_rows[] = {
    //  scalar ranges
    {KVT_MSG_COMPLETION, P(2, 1), RAW(0x00), "chan", "out of range 1..8", 0},
    {KVT_MSG_COMPLETION, P(2, 1), RAW(0x09), "chan", "out of range 1..8", 0},
    {KVT_MSG_COMPLETION, P(2, 1), RAW(U16_256), "chan", "out of range", 0},
    {KVT_MSG_VERDICT, P(2, 1), RAW(0x09), "chan", "out of range 1..8", 0},
    {KVT_MSG_COMPLETION, P(2, 11), RAW(0x03), "touch", "out of range 0..2", KVT_SAMPLE_ALT1},
    {KVT_MSG_VERDICT, P(2, 10), RAW(0x03), "touch", "out of range 0..2", KVT_SAMPLE_ALT1},
    {KVT_MSG_FENCE, P(2, 2), RAW(0x08), "lanes", "out of range 0..7", 0},
    {KVT_MSG_FENCE, P(2, 2), RAW(U16_256), "lanes", "out of range 0..7", 0},
    {KVT_MSG_COMPLETION, P(2, 14), RAW(0x01), "fenced", "expected bool", KVT_SAMPLE_MAX},
    {KVT_MSG_COMPLETION, P(2, 12), RAW(0xcd, 0x10, 0x01), "held", "out of range 0..4096", 0},
    {KVT_MSG_VERDICT, P(2, 11), RAW(0xcd, 0x10, 0x01), "held", "out of range 0..4096", 0},
    {KVT_MSG_LOOKUP, P(2, 2), RAW(0x00), "gen", "out of range 1..4294967295", 0},
    {KVT_MSG_LOOKUP_RELEASE, P(2, 2), RAW(0x00), "gen", "out of range 1..4294967295", 0},
    {KVT_MSG_TOUCH, P(2, 1), RAW(0xc4, 0x08, 0, 0, 0, 0, 0, 0, 0, 0), "hash",
     "expected 16 bytes, got 8", 0},
    {KVT_MSG_TOUCH, P(2, 3), RAW(0xc4, 0x01, 0), "keys", "not a multiple of 16", 0},
    {KVT_MSG_LOOKUP, P(2, 3), RAW(0xc4, 0x11, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
     "keys", "not a multiple of 16", 0},
    {KVT_MSG_COMPLETION, P(2, 3), RAW(0x00), "gen", "out of range 1..4294967295", 0},
    {KVT_MSG_COMPLETION, P(2, 3), RAW(U64_2_32), "gen", "out of range", 0},
    {KVT_MSG_VERDICT, P(2, 3), RAW(0x00), "gen", "out of range", 0},
    {KVT_MSG_LOAD_SPEC, P(2, 2), RAW(0x00), "gen", "out of range", 0},
    {KVT_MSG_SAVE_SPEC, P(2, 2), RAW(0x00), "gen", "out of range", 0},
    {KVT_MSG_SAVE_SPEC, P(2, 3), RAW(U64_2_32), "start", "out of range", 0},
    {KVT_MSG_SAVE_SPEC, P(2, 4), RAW(0x00), "end", "not above start", 0},
    {KVT_MSG_STEP_PLAN, P(2, 2, 0, 2), RAW(0x00), "entries[0].gen", "out of range", 0},
    {KVT_MSG_STEP_PLAN, P(2, 5, 1, 2), RAW(0x00), "events[1].gen", "out of range", 0},
    {KVT_MSG_STEP_EXEC, P(2, 4, 0, 3), RAW(U64_2_32), "loads[0].start", "out of range", 0},
    {KVT_MSG_COMPLETION, P(2, 5), RAW(U16_256), "rank", "out of range 0..255", 0},
    {KVT_MSG_STEP_EXEC, P(2, 2), RAW(U16_256), "rank", "out of range 0..255", 0},
    {KVT_MSG_STEP_DONE, P(2, 2), RAW(U16_256), "rank", "out of range 0..255", 0},
    {KVT_MSG_COMPLETION, P(2, 7), RAW(0x09), "detail", "out of range 0..8", 0},
    {KVT_MSG_VERDICT, P(2, 6), RAW(0x09), "detail", "out of range 0..8", 0},
    {KVT_MSG_STEP_DONE, P(2, 7), RAW(0x09), "detail", "out of range 0..8", 0},
    {KVT_MSG_VERDICT, P(2, 7), RAW(0xcd, 0x01, 0x01), "nfailed", "out of range 0..256", 0},
    {KVT_MSG_STEP_PLAN, P(2, 5, 0, 3), RAW(0x00), "events[0].type", "out of range 1..5", 0},
    {KVT_MSG_STEP_PLAN, P(2, 5, 3, 3), RAW(0x06), "events[3].type", "out of range 1..5", 0},
    {KVT_MSG_SCHEDULE, P(2, 2, 2, 3), RAW(0x00), "arrivals[2].max_new_tokens", "out of range", 0},
    {KVT_MSG_SHUTDOWN, P(2, 1), RAW(U64_2_32), "code", "out of range", 0},
    {KVT_MSG_STEP_DONE, P(2, 4), RAW(U64_2_32), "blocks_written", "out of range", 0},
    {KVT_MSG_STEP_DONE, P(2, 6, 1), RAW(0xa1, 'x'), "wrong[1]", "expected uint", 0},
    {KVT_MSG_STEP_DONE, P(2, 6, 0), RAW(0xff), "wrong[0]", "negative", 0},
    //  cross-field rules
    {KVT_MSG_STEP_PLAN, P(2, 2, 0, 4), RAW(0x00), "entries[0].end", "not above start", 0},
    {KVT_MSG_STEP_EXEC, P(2, 3, 2, 8), RAW(0xce, 0x7f, 0xff, 0xff, 0xff), "entries[2].verify_end",
     "above end", 0},
    {KVT_MSG_STEP_PLAN, P(2, 2, 1, 5), RAW(0x01), "entries[1].first_block",
     "must be 0 when verify_end > 0", 0},
    {KVT_MSG_STEP_PLAN, P(2, 2, 2, 5), RAW(0xce, 0xff, 0xff, 0xff, 0xff), "entries[2].first_block",
     "overflows", 0},
    {KVT_MSG_LOAD_SPEC, P(2, 4), RAW(0x00), "end", "not above start", 0},
    {KVT_MSG_STEP_EXEC, P(2, 5, 1, 3), RAW(0xce, 0xff, 0xff, 0xff, 0xff), "saves[1].end",
     "not above start", 0},
    {KVT_MSG_STEP_PLAN, P(2, 6), RAW(0xc3), "idle", "idle plan", 0},
    {KVT_MSG_VERDICT, P(2, 7), RAW(0x01), "nfailed", "ok verdict with 1 failed", 0},
    //  the state leg (LoadSpec: TYPICAL both legs, ALT1 state only)
    {KVT_MSG_LOAD_SPEC, P(2, 10), RAW(U32_BIG), "state_boundary", "is not the KV leg's end", 0},
    {KVT_MSG_LOAD_SPEC, P(2, 10), RAW(0x00), "state_boundary", "must be > 0", 0},
    {KVT_MSG_LOAD_SPEC, P(2, 11), RAW(BIN16_ZERO), "state_hash", "zero state_hash with state", 0},
    {KVT_MSG_LOAD_SPEC, P(2, 9), RAW(0xc2), "state_boundary", "without state", 0},
    {KVT_MSG_LOAD_SPEC, P(2, 9), RAW(0xc2), "state", "neither a KV leg", KVT_SAMPLE_ALT1},
    {KVT_MSG_LOAD_SPEC, P(2, 4), RAW(U32_BIG), "state_boundary", "is not the KV leg's end",
     KVT_SAMPLE_ALT1},
    {KVT_MSG_LOAD_SPEC, P(2, 10), RAW(0x00), "state_boundary", "must be > 0", KVT_SAMPLE_ALT1},
    {KVT_MSG_LOAD_SPEC, P(2, 4), RAW(0x00), "state", "neither a KV leg", SHAPE_MIN},
    {KVT_MSG_STEP_PLAN, P(2, 3, 0, 10), RAW(0x01), "loads[0].state_boundary",
     "is not the KV leg's end", 0},
    {KVT_MSG_STEP_EXEC, P(2, 4, 1, 9), RAW(0xc2), "loads[1].state", "neither a KV leg", 0},
    {KVT_MSG_STEP_EXEC, P(2, 4, 1, 11), RAW(BIN16_ZERO), "loads[1].state_hash", "zero state_hash",
     0},
    //  the image (SaveSpec: TYPICAL both legs, ALT1 image only)
    {KVT_MSG_SAVE_SPEC, P(2, 10), RAW(U32_BIG), "state_boundary", "is not the KV leg's end", 0},
    {KVT_MSG_SAVE_SPEC, P(2, 14), RAW(0xc2), "state_boundary", "without image", 0},
    {KVT_MSG_SAVE_SPEC, P(2, 14), RAW(0xc2), "image", "neither a KV leg", KVT_SAMPLE_ALT1},
    {KVT_MSG_SAVE_SPEC, P(2, 11), RAW(BIN16_ZERO), "state_hash", "zero state_hash with image",
     KVT_SAMPLE_ALT1},
    {KVT_MSG_SAVE_SPEC, P(2, 15), RAW(0xc3), "producer", "expected uint", 0},
    {KVT_MSG_SAVE_SPEC, P(2, 16), RAW(0x01), "producer_failed", "expected bool", 0},
    {KVT_MSG_STEP_PLAN, P(2, 4, 1, 14), RAW(0xc2), "saves[1].image", "neither a KV leg", 0},
    {KVT_MSG_STEP_EXEC, P(2, 5, 0, 10), RAW(0x00), "saves[0].state_boundary", "must be > 0", 0},
    //  per-channel rules (TYPICAL lookup, ALT1 touch, MAX store, ALT2 fence)
    {KVT_MSG_COMPLETION, P(2, 1), RAW(0x01), "key", "a load's key must be the zero hash",
     KVT_SAMPLE_ALT1},
    {KVT_MSG_VERDICT, P(2, 1), RAW(0x01), "key", "a load's key must be the zero hash",
     KVT_SAMPLE_ALT2},
    {KVT_MSG_COMPLETION, P(2, 4), RAW(BIN16_ONE), "key", "a lookup's key must be the zero hash", 0},
    {KVT_MSG_VERDICT, P(2, 4), RAW(BIN16_ONE), "key", "a lookup's key must be the zero hash", 0},
    {KVT_MSG_COMPLETION, P(2, 4), RAW(BIN16_ONE), "key", "a fence's key must be the zero hash",
     KVT_SAMPLE_ALT2},
    {KVT_MSG_COMPLETION, P(2, 3), RAW(0x02), "gen", "a touch report's gen is 2, must be 1",
     KVT_SAMPLE_ALT1},
    {KVT_MSG_VERDICT, P(2, 3), RAW(0x02), "gen", "a touch report's gen is 2, must be 1",
     KVT_SAMPLE_ALT1},
    {KVT_MSG_COMPLETION, P(2, 1), RAW(0x03), "touch", "touch on channel 3", KVT_SAMPLE_ALT1},
    {KVT_MSG_VERDICT, P(2, 1), RAW(0x02), "touch", "touch on channel 2", KVT_SAMPLE_ALT1},
    {KVT_MSG_COMPLETION, P(2, 1), RAW(0x02), "held", "held on channel 2 (only lookup", 0},
    {KVT_MSG_VERDICT, P(2, 1), RAW(0x03), "held", "held on channel 3 (only lookup", 0},
    {KVT_MSG_COMPLETION, P(2, 1), RAW(0x07), "fenced", "fenced on channel 7 (only store",
     KVT_SAMPLE_MAX},
    {KVT_MSG_VERDICT, P(2, 1), RAW(0x03), "fenced", "fenced on channel 3 (only store",
     KVT_SAMPLE_ALT2},
    //  array shapes
    {KVT_MSG_STEP_PLAN, P(2, 2, 0, 6), RAW(0xc4, 0x03, 1, 2, 3), "entries[0].blocks",
     "not a multiple of 4", 0},
    {KVT_MSG_STEP_PLAN, P(2, 2, 2, 7),
     RAW(0xc4, 0x11, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), "entries[2].hashes",
     "not a multiple of 16", 0},
    {KVT_MSG_STEP_PLAN, P(2, 2, 0, 7), RAW(0xc4, 0x00), "entries[0].hashes",
     "0 hashes for 1 blocks", 0},
    {KVT_MSG_STEP_EXEC, P(2, 3, 1, 6), RAW(0xc4, 0x04, 1, 0, 0, 0), "entries[1].hashes",
     "8 hashes for 1 blocks", 0},
    {KVT_MSG_LOAD_SPEC, P(2, 5), RAW(0xc4, 0x0f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
     "keys", "not a multiple of 16", 0},
    {KVT_MSG_SCHEDULE, P(2, 2, 0, 2), RAW(0xc4, 0x00), "arrivals[0].tokens", "at least 1", 0},
    {KVT_MSG_SCHEDULE, P(2, 2, 1, 2), RAW(0xc4, 0x02, 1, 2), "arrivals[1].tokens",
     "not a multiple of 4", 0},
    {KVT_MSG_COMPLETION, P(2, 4), RAW(0xc4, 0x0f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
     "key", "expected 16 bytes, got 15", 0},
    {KVT_MSG_VERDICT, P(2, 4), RAW(0xc4, 0x00), "key", "expected 16 bytes, got 0", 0},
    //  strings and counters
    {KVT_MSG_SHUTDOWN, P(2, 2), RAW(0xa3, 'a', 0, 'b'), "text", "NUL", 0},
    {KVT_MSG_STATS, P(2, 2), RAW(0xa2, 0, 'b'), "from", "NUL", 0},
    {KVT_MSG_STATS, P(2, 3), RAW(0x81, 0xa0, 0x01), "counters[0]", "counter name of 0 bytes", 0},
    {KVT_MSG_STATS, P(2, 3), RAW(0x82, 0xa1, 'a', 0x01, 0xa1, 'a', 0x02), "counters[1]",
     "duplicate counter name \"a\"", 0},
    {KVT_MSG_STATS, P(2, 3), RAW(0x81, 0xa2, 'a', 0, 0x01), "counters[0]", "no NUL", 0},
    {KVT_MSG_STATS, P(2, 3), RAW(0x81, 0x01, 0x01), "counters[0]", "expected str", 0},
    {KVT_MSG_STATS, P(2, 3), RAW(0x81, 0xa1, 'a', 0xff), "counters[0]", "negative", 0},
    {KVT_MSG_STATS, P(2, 3), RAW(0x81, 0xa1, 'a', 0xc2), "counters[0]", "expected uint", 0},
    //  elements of struct arrays
    {KVT_MSG_STEP_PLAN, P(2, 2, 1), RAW(0x01), "entries[1]", "expected map", 0},
    {KVT_MSG_SCHEDULE, P(2, 2, 0), RAW(0x90), "arrivals[0]", "expected map", 0},
    //  skipped values are still checked
    {KVT_MSG_PING, P(2, 1), RAW(0xc1), "seq", "reserved byte 0xc1", 0},
};

Test(kvt_msg_reject, value_table_names_the_field)
{
    for (size_t i = 0; i < sizeof s_rows / sizeof s_rows[0]; i++) {
        const s_row_t *r = &s_rows[i];
        s_mut_t m = {.op = M_REPLACE, .path = r->path, .raw = r->raw, .nraw = r->nraw};
        s_expect_reject(r->kind, r->shape, &m, r->kind, r->field, r->reason);
    }
}

//  Fields a channel or leg does not carry, added to a sample that lacks
//  them: refused naming the field.
typedef struct {
    int kind;           //  sample kind
    int shape;          //  sample shape
    uint64_t key;       //  key added to the body
    const uint8_t *raw; //  its value
    size_t nraw;        //  length of raw
    const char *field;  //  field named in the error
    const char *reason; //  substring of the reason
} s_add_row_t;

static const s_add_row_t s_add_rows[] = {
    {KVT_MSG_COMPLETION, KVT_SAMPLE_ALT2, 11, RAW(0x01), "touch", "touch on channel 8"},
    {KVT_MSG_COMPLETION, KVT_SAMPLE_ALT2, 12, RAW(0x01), "held", "held on channel 8"},
    {KVT_MSG_COMPLETION, KVT_SAMPLE_ALT2, 13, RAW(0xc4, 0x01, 0x01), "images",
     "images on channel 8 (only lookup"},
    {KVT_MSG_COMPLETION, KVT_SAMPLE_ALT1, 13, RAW(0xc4, 0x01, 0x01), "images",
     "images on channel 4"},
    {KVT_MSG_COMPLETION, KVT_SAMPLE_TYPICAL, 14, RAW(0xc3), "fenced", "fenced on channel 6"},
    {KVT_MSG_COMPLETION, KVT_SAMPLE_ALT1, 14, RAW(0xc3), "fenced", "fenced on channel 4"},
    {KVT_MSG_COMPLETION, KVT_SAMPLE_ALT2, 14, RAW(0xc3), "fenced", "fenced on channel 8"},
    {KVT_MSG_COMPLETION, SHAPE_MIN, 14, RAW(0xc3), "fenced", "fenced on channel 1"},
    {KVT_MSG_COMPLETION, SHAPE_MIN, 11, RAW(0x02), "touch", "touch on channel 1"},
    {KVT_MSG_COMPLETION, SHAPE_MIN, 15, RAW(0xc3), "rank0_only",
     "rank0_only on channel 1 (only lookup"},
    {KVT_MSG_COMPLETION, KVT_SAMPLE_ALT1, 15, RAW(0xc3), "rank0_only", "rank0_only on channel 4"},
    {KVT_MSG_COMPLETION, KVT_SAMPLE_MAX, 15, RAW(0xc3), "rank0_only", "rank0_only on channel 2"},
    {KVT_MSG_VERDICT, KVT_SAMPLE_ALT2, 10, RAW(0x01), "touch", "touch on channel 2"},
    {KVT_MSG_VERDICT, KVT_SAMPLE_ALT2, 11, RAW(0x01), "held", "held on channel 2"},
    {KVT_MSG_VERDICT, KVT_SAMPLE_ALT2, 12, RAW(0xc4, 0x01, 0x01), "images", "images on channel 2"},
    {KVT_MSG_VERDICT, KVT_SAMPLE_TYPICAL, 13, RAW(0xc3), "fenced", "fenced on channel 6"},
    {KVT_MSG_VERDICT, KVT_SAMPLE_ALT1, 13, RAW(0xc3), "fenced", "fenced on channel 5"},
    //  a state field without its leg
    {KVT_MSG_LOAD_SPEC, SHAPE_MIN, 10, RAW(0x01), "state_boundary", "without state"},
    {KVT_MSG_LOAD_SPEC, SHAPE_MIN, 11, RAW(BIN16_ONE), "state_hash", "without state"},
    {KVT_MSG_LOAD_SPEC, SHAPE_MIN, 12, RAW(0x01), "state_slot", "state_slot 1 without state"},
    {KVT_MSG_SAVE_SPEC, SHAPE_MIN, 10, RAW(0x01), "state_boundary", "without image"},
    {KVT_MSG_SAVE_SPEC, SHAPE_MIN, 11, RAW(BIN16_ONE), "state_hash", "without image"},
    {KVT_MSG_SAVE_SPEC, SHAPE_MIN, 12, RAW(0x01), "state_slot", "state_slot 1 without image"},
    //  a state flag with no state fields
    {KVT_MSG_LOAD_SPEC, SHAPE_MIN, 9, RAW(0xc3), "state_boundary", "state_boundary 0 with"},
    {KVT_MSG_SAVE_SPEC, SHAPE_MIN, 14, RAW(0xc3), "state_boundary", "state_boundary 0 with"},
};

Test(kvt_msg_reject, fields_off_their_channel_or_leg_are_named)
{
    for (size_t i = 0; i < sizeof s_add_rows / sizeof s_add_rows[0]; i++) {
        const s_add_row_t *r = &s_add_rows[i];
        s_mut_t m = {.op = M_ADD, .path = P(2), .raw = r->raw, .nraw = r->nraw, .add_key = r->key};
        s_expect_reject(r->kind, r->shape, &m, r->kind, r->field, r->reason);
    }
}

//  The new optional fields keep the old encodings valid: a LoadSpec, a
//  SaveSpec and a Completion without any of them decode as before, and the
//  fields land where docs/protocol.md says.
Test(kvt_msg_reject, specs_without_a_state_leg_decode_as_before)
{
    for (int kind = KVT_MSG_LOAD_SPEC; kind <= KVT_MSG_SAVE_SPEC; kind++) {
        kvt_msg_t msg;
        cr_assert_eq(kvt_msg_sample(kind, KVT_SAMPLE_TYPICAL, &msg), 0);
        kvt_load_spec_t *s = &msg.u.load_spec;
        s->state = s->image = s->producer_failed = false;
        s->state_boundary = s->state_slot = 0;
        s->state_hash = (kvt_hash_t){0};
        s->after = s->producer = 0;
        uint8_t *buf;
        size_t len;
        cr_assert_eq(kvt_msg_encode(&msg, &buf, &len), 0);
        kvt_msg_t got;
        kvt_msg_err_t err;
        cr_assert_eq(kvt_msg_decode(buf, len, &got, &err), 0, "%s", err.reason);
        cr_assert_eq(got.u.load_spec.nkeys, s->nkeys);
        cr_assert_eq(got.u.load_spec.end, s->end);
        cr_assert(!got.u.load_spec.state && !got.u.load_spec.image);
        free(buf);
        kvt_msg_clear(&got);
        kvt_msg_clear(&msg);
    }
    //  LoadSpec {1: 1, 2: 1, 3: 0, 4: 256, 5: bin(16), 6: bin(4), 9: true,
    //  10: 256, 11: bin(16), 12: 3, 13: 8}: every state-leg key at its number.
    static const uint8_t frame[] = {0x93, 0x01, 0x06, 0x8b,      0x01, 0x01, 0x02,      0x01, 0x03,
                                    0x00, 0x04, 0xcd, 0x01,      0x00, 0x05, BIN16_ONE, 0x06, 0xc4,
                                    0x04, 7,    0,    0,         0,    0x09, 0xc3,      0x0a, 0xcd,
                                    0x01, 0x00, 0x0b, BIN16_ONE, 0x0c, 0x03, 0x0d,      0x08};
    kvt_msg_t msg;
    kvt_msg_err_t err;
    cr_assert_eq(kvt_msg_decode(frame, sizeof frame, &msg, &err), 0, "%s", err.reason);
    const kvt_load_spec_t *s = &msg.u.load_spec;
    cr_assert(s->state);
    cr_assert_eq(s->state_boundary, 256);
    cr_assert_eq(s->state_hash.lo, 1); //  lo-LE first
    cr_assert_eq(s->state_hash.hi, 0);
    cr_assert_eq(s->state_slot, 3);
    cr_assert_eq(s->after, 8);
    cr_assert_eq(s->blocks[0], 7);
    kvt_msg_clear(&msg);
}

Test(kvt_msg_reject, wider_integer_formats_and_signed_non_negative_values_are_accepted)
{
    //  Ping seq 42 as uint64, as int8 and as int64.
    static const uint8_t forms[][9] = {
        {0xcf, 0, 0, 0, 0, 0, 0, 0, 42}, {0xd0, 42}, {0xd3, 0, 0, 0, 0, 0, 0, 0, 42}};
    static const size_t lens[] = {9, 2, 9};
    for (int i = 0; i < 3; i++) {
        s_mut_t m = {.op = M_REPLACE, .path = P(2, 1), .raw = forms[i], .nraw = lens[i]};
        kvt_msg_t msg;
        s_expect_accept(KVT_MSG_PING, 0, &m, &msg);
        cr_assert_eq(msg.u.ping.seq, 42);
        kvt_msg_clear(&msg);
    }
}

// ----------------------------------------------------------- envelope --

typedef struct {
    const uint8_t *data; //  whole frame
    size_t len;          //  its length
    int kind;            //  kind in the error
    const char *field;   //  field named
    const char *reason;  //  substring of the reason
} s_frame_row_t;

static const s_frame_row_t s_frames[] = {
    {RAW(0x81, 0x01, 0x01), 0, "envelope", "expected array, got map"},
    {RAW(0x01), 0, "envelope", "expected array, got uint"},
    {RAW(0x90), 0, "envelope", "empty array"},
    {RAW(0x93, 0x02, 0x01, 0x80), 0, "version", "unsupported version 2"},
    {RAW(0x93, 0x00, 0x01, 0x80), 0, "version", "unsupported version 0"},
    {RAW(0x93, 0xa1, '1', 0x01, 0x80), 0, "version", "expected uint, got str"},
    {RAW(0x92, 0x01, 0x01), 0, "envelope", "array of 2 elements"},
    {RAW(0x94, 0x01, 0x01, 0x80, 0x00), 0, "envelope", "array of 4 elements"},
    {RAW(0x93, 0x01, 0x00, 0x80), 0, "kind", "unknown kind 0"},
    {RAW(0x93, 0x01, 0x10, 0x80), 0, "kind", "unknown kind 16"},
    {RAW(0x93, 0x01, 0x0f, 0x80), KVT_MSG_FENCE, "id", "missing mandatory field (key 1)"},
    {RAW(0x93, 0x01, 0xcc, 0xff, 0x80), 0, "kind", "unknown kind 255"},
    {RAW(0x93, 0x01, U64_2_32, 0x80), 0, "kind", "unknown kind 4294967296"},
    {RAW(0x93, 0x01, 0xff, 0x80), 0, "kind", "negative"},
    {RAW(0x93, 0x01, 0x01, 0x91, 0x00), KVT_MSG_PING, "body", "expected map, got array"},
    {RAW(0x93, 0x01, 0x01, 0x81, 0xa1, 'x', 0x00), KVT_MSG_PING, "body", "expected uint map key"},
    {RAW(0x93, 0x01, 0x01, 0x81, 0xff, 0x00), KVT_MSG_PING, "body", "negative"},
    {RAW(0x93, 0x01, 0x0a, 0x81, 0x03, 0x81, 0xa1, 'a'), KVT_MSG_STATS, "counters[0]", "truncated"},
    {RAW(0x93, 0x01, 0x04, 0x81, 0x03, 0x91, 0x81, 0xc0, 0x00), KVT_MSG_STEP_EXEC, "entries[0]",
     "expected uint map key, got nil"},
    //  unknown key 9 whose value nests 17 arrays deep
    {RAW(0x93, 0x01, 0x0b, 0x82, 0x01, 0x00, 0x09, 0x91, 0x91, 0x91, 0x91, 0x91, 0x91, 0x91, 0x91,
         0x91, 0x91, 0x91, 0x91, 0x91, 0x91, 0x91, 0x91, 0x91, 0x00),
     KVT_MSG_SHUTDOWN, "key 9", "nested deeper than 16"},
    {RAW(0x93, 0x01, 0x0b, 0x82, 0x01, 0x00, 0x09, 0x92, 0x00, 0xc1), KVT_MSG_SHUTDOWN, "key 9",
     "reserved byte 0xc1"},
    {RAW(0x93, 0x01, 0x0b, 0x82, 0x09, 0x00, 0x09, 0x01), KVT_MSG_SHUTDOWN, "key 9",
     "duplicate key 9"},
    //  an unknown key above 255 twice (such keys are remembered in a list, not the bitmap)
    {RAW(0x93, 0x01, 0x0b, 0x83, 0x01, 0x00, 0xcd, 0x01, 0x2c, 0x00, 0xcd, 0x01, 0x2c, 0x01),
     KVT_MSG_SHUTDOWN, "key 300", "duplicate key 300"},
    //  fix headers claiming more than the frame has (a map entry takes two bytes)
    {RAW(0x9f, 0x01), 0, "envelope", "header claims 15, more than"},
    {RAW(0x93, 0x01, 0x01, 0x8f), KVT_MSG_PING, "body", "header claims 15, more than"},
    {RAW(0x93, 0x01, 0x01, 0x82, 0x01, 0x00), KVT_MSG_PING, "body", "header claims 2, more than"},
    {RAW(0x93, 0x01, 0x01, 0x81, 0x01, 0xcd, 0x01), KVT_MSG_PING, "seq", "truncated"},
};

Test(kvt_msg_reject, envelope_table_names_the_field)
{
    for (size_t i = 0; i < sizeof s_frames / sizeof s_frames[0]; i++) {
        const s_frame_row_t *r = &s_frames[i];
        kvt_msg_t msg;
        kvt_msg_err_t err;
        cr_assert_eq(kvt_msg_decode(r->data, r->len, &msg, &err), -1, "row %zu accepted", i);
        cr_assert_eq((int)err.kind, r->kind, "row %zu: kind %d", i, err.kind);
        cr_assert_str_eq(err.field, r->field, "row %zu: %s", i, err.reason);
        cr_assert(strstr(err.reason, r->reason), "row %zu: reason \"%s\"", i, err.reason);
    }
}

Test(kvt_msg_reject, nesting_at_the_bound_is_skipped)
{
    //  16 nested arrays in an unknown key: accepted.
    static const uint8_t frame[] = {0x93, 0x01, 0x0b, 0x82, 0x01, 0x00, 0x09, 0x91,
                                    0x91, 0x91, 0x91, 0x91, 0x91, 0x91, 0x91, 0x91,
                                    0x91, 0x91, 0x91, 0x91, 0x91, 0x91, 0x91, 0x00};
    kvt_msg_t msg;
    kvt_msg_err_t err;
    cr_assert_eq(kvt_msg_decode(frame, sizeof frame, &msg, &err), 0, "%s", err.reason);
    kvt_msg_clear(&msg);
}

Test(kvt_msg_reject, keys_in_any_order_and_large_unknown_keys_are_accepted)
{
    //  Shutdown {2: "x", 1: 5} plus unknown keys 300, 44 and 364 (equal modulo
    //  64 and 256): the decoder tries the field after the previous key's first,
    //  and must still find key 1 after key 2; distinct keys are no duplicates.
    static const uint8_t frame[] = {0x93, 0x01, 0x0b, 0x85, 0x02, 0xa1, 'x',  0x01, 0x05, 0xcd,
                                    0x01, 0x2c, 0x00, 0x2c, 0x00, 0xcd, 0x01, 0x6c, 0x00};
    kvt_msg_t msg;
    kvt_msg_err_t err;
    cr_assert_eq(kvt_msg_decode(frame, sizeof frame, &msg, &err), 0, "%s: %s", err.field,
                 err.reason);
    cr_assert_eq(msg.u.shutdown.code, 5);
    cr_assert_str_eq(msg.u.shutdown.text, "x");
    kvt_msg_clear(&msg);
}

Test(kvt_msg_reject, body_with_more_than_64_keys)
{
    uint8_t frame[4 + 3 + 65 * 2];
    size_t n = 0;
    frame[n++] = 0x93;
    frame[n++] = 0x01;
    frame[n++] = 0x0b;
    frame[n++] = 0xde;
    frame[n++] = 0;
    frame[n++] = 65;
    for (int k = 0; k < 65; k++) {
        frame[n++] = (uint8_t)(k == 0 ? 1 : k + 2); //  code, then unknown keys
        frame[n++] = 0;
    }
    kvt_msg_t msg;
    kvt_msg_err_t err;
    cr_assert_eq(kvt_msg_decode(frame, n, &msg, &err), -1);
    cr_assert_str_eq(err.field, "body");
    cr_assert(strstr(err.reason, "map of 65 keys"), "%s", err.reason);
    //  64 keys are fine.
    frame[5] = 64;
    cr_assert_eq(kvt_msg_decode(frame, n - 2, &msg, &err), 0, "%s", err.reason);
    kvt_msg_clear(&msg);
}

// ----------------------------------------------------- over-long arrays --

//  A bin32 of n zero bytes / a str of n 'a' / an array32 of n copies of one byte.
static uint8_t *s_big(uint8_t tag, size_t n, uint8_t fill, size_t *len)
{
    *len = 5 + n;
    uint8_t *raw = malloc(*len);
    cr_assert(raw);
    raw[0] = tag;
    raw[1] = (uint8_t)(n >> 24);
    raw[2] = (uint8_t)(n >> 16);
    raw[3] = (uint8_t)(n >> 8);
    raw[4] = (uint8_t)n;
    memset(raw + 5, fill, n);
    return raw;
}

typedef struct {
    int kind;          //  sample kind
    const int *path;   //  value to replace
    uint8_t tag;       //  0xc6 bin32, 0xdb str32, 0xdd array32, 0xdf map32
    size_t n;          //  bytes / items
    uint8_t fill;      //  item byte
    const char *field; //  field named
    const char *why;   //  substring of the reason
} s_long_t;

static const s_long_t s_longs[] = {
    {KVT_MSG_PING, P(2, 2), 0xc6, KVT_MSG_MAX_BYTES + 1, 0, "payload", "longer than 1048576"},
    {KVT_MSG_SCHEDULE, P(2, 2, 1, 2), 0xc6, 4 * (KVT_MSG_MAX_TOKENS + 1), 0, "arrivals[1].tokens",
     "longer than 1048576"},
    {KVT_MSG_SCHEDULE, P(2, 2), 0xdd, KVT_MSG_MAX_ENTRIES + 1, 0x80, "arrivals",
     "longer than 4096"},
    {KVT_MSG_STEP_PLAN, P(2, 2, 0, 6), 0xc6, 4 * (KVT_MSG_MAX_BLOCKS + 1), 0, "entries[0].blocks",
     "longer than 65536"},
    {KVT_MSG_STEP_PLAN, P(2, 2, 0, 7), 0xc6, 16 * (KVT_MSG_MAX_BLOCKS + 1), 0, "entries[0].hashes",
     "longer than 65536"},
    {KVT_MSG_STEP_PLAN, P(2, 3, 1, 5), 0xc6, 16 * (KVT_MSG_MAX_CHUNKS + 1), 0, "loads[1].keys",
     "longer than 4096"},
    {KVT_MSG_STEP_EXEC, P(2, 5, 0, 6), 0xc6, 4 * (KVT_MSG_MAX_BLOCKS + 1), 0, "saves[0].blocks",
     "longer than 65536"},
    {KVT_MSG_STEP_PLAN, P(2, 3), 0xdd, KVT_MSG_MAX_ENTRIES + 1, 0x80, "loads", "longer than 4096"},
    {KVT_MSG_STEP_PLAN, P(2, 4), 0xdd, KVT_MSG_MAX_ENTRIES + 1, 0x80, "saves", "longer than 4096"},
    {KVT_MSG_STEP_PLAN, P(2, 5), 0xdd, KVT_MSG_MAX_ENTRIES + 1, 0x80, "events", "longer than 4096"},
    {KVT_MSG_STEP_EXEC, P(2, 3), 0xdd, KVT_MSG_MAX_ENTRIES + 1, 0x80, "entries",
     "longer than 4096"},
    {KVT_MSG_STEP_DONE, P(2, 6), 0xdd, KVT_MSG_MAX_ENTRIES + 1, 0x00, "wrong", "longer than 4096"},
    {KVT_MSG_LOAD_SPEC, P(2, 5), 0xc6, 16 * (KVT_MSG_MAX_CHUNKS + 1), 0, "keys",
     "longer than 4096"},
    {KVT_MSG_SAVE_SPEC, P(2, 6), 0xc6, 4 * (KVT_MSG_MAX_BLOCKS + 1), 0, "blocks",
     "longer than 65536"},
    {KVT_MSG_STATS, P(2, 3), 0xdf, KVT_MSG_MAX_STATS + 1, 0x00, "counters", "longer than 512"},
    {KVT_MSG_STATS, P(2, 2), 0xdb, KVT_MSG_MAX_NAME + 1, 'a', "from", "65 bytes, allowed 0..64"},
    {KVT_MSG_SHUTDOWN, P(2, 2), 0xdb, KVT_MSG_MAX_TEXT + 1, 'a', "text",
     "257 bytes, allowed 0..256"},
};

Test(kvt_msg_reject, over_long_arrays_and_strings_are_named)
{
    for (size_t i = 0; i < sizeof s_longs / sizeof s_longs[0]; i++) {
        const s_long_t *l = &s_longs[i];
        size_t n = l->tag == 0xdf ? 2 * l->n : l->n; //  a map needs key + value bytes
        size_t len;
        uint8_t *raw = s_big(l->tag, n, l->fill, &len);
        if (l->tag == 0xdf) { //  the header counts entries
            raw[1] = (uint8_t)(l->n >> 24);
            raw[2] = (uint8_t)(l->n >> 16);
            raw[3] = (uint8_t)(l->n >> 8);
            raw[4] = (uint8_t)l->n;
        }
        s_mut_t m = {.op = M_REPLACE, .path = l->path, .raw = raw, .nraw = len};
        s_expect_reject(l->kind, 0, &m, l->kind, l->field, l->why);
        free(raw);
    }
}

Test(kvt_msg_reject, strings_at_their_limit_are_accepted)
{
    size_t len;
    uint8_t *raw = s_big(0xdb, KVT_MSG_MAX_TEXT, 'a', &len);
    s_mut_t m = {.op = M_REPLACE, .path = P(2, 2), .raw = raw, .nraw = len};
    kvt_msg_t msg;
    s_expect_accept(KVT_MSG_SHUTDOWN, 0, &m, &msg);
    cr_assert_eq(strlen(msg.u.shutdown.text), KVT_MSG_MAX_TEXT);
    kvt_msg_clear(&msg);
    free(raw);
}

// -------------------------------------------------------- encode side --

//  Each mutator breaks one rule of a TYPICAL sample; the message must stay
//  safe to kvt_msg_clear (free what it unlinks).
typedef void(s_mutator_fn)(kvt_msg_t *msg);

static void e_kind0(kvt_msg_t *m)
{
    m->kind = KVT_MSG_NONE;
}
static void e_chan0(kvt_msg_t *m)
{
    m->u.completion.chan = 0;
}
static void e_gen0(kvt_msg_t *m)
{
    m->u.step_plan.loads[1].op.gen = 0;
}
static void e_end_eq_start(kvt_msg_t *m)
{
    m->u.step_exec.entries[1].end = m->u.step_exec.entries[1].start;
}
static void e_blocks_over(kvt_msg_t *m)
{
    m->u.load_spec.nblocks = KVT_MSG_MAX_BLOCKS + 1;
}
static void e_blocks_null(kvt_msg_t *m)
{
    free(m->u.step_plan.entries[2].blocks);
    m->u.step_plan.entries[2].blocks = NULL;
}
static void e_payload_null(kvt_msg_t *m)
{
    free(m->u.ping.payload);
    m->u.ping.payload = NULL;
}
static void e_text_unterminated(kvt_msg_t *m)
{
    memset(m->u.shutdown.text, 'x', sizeof m->u.shutdown.text);
}
static void e_from_unterminated(kvt_msg_t *m)
{
    memset(m->u.stats.from, 'x', sizeof m->u.stats.from);
}
static void e_counter_dup(kvt_msg_t *m)
{
    strcpy(m->u.stats.counters[3].name, m->u.stats.counters[1].name);
}
static void e_counter_empty(kvt_msg_t *m)
{
    m->u.stats.counters[0].name[0] = '\0';
}
static void e_idle_with_work(kvt_msg_t *m)
{
    m->u.step_plan.idle = true;
}
static void e_tokens_zero(kvt_msg_t *m)
{
    m->u.schedule.arrivals[2].ntokens = 0;
}
static void e_verdict_ok_failed(kvt_msg_t *m)
{
    m->u.verdict.nfailed = 1;
}
static void e_rank_over(kvt_msg_t *m)
{
    m->u.step_done.rank = KVT_MSG_MAX_RANKS;
}
static void e_event_type(kvt_msg_t *m)
{
    m->u.step_plan.events[3].type = KVT_EV_MAX + 1;
}
static void e_verify_above_end(kvt_msg_t *m)
{
    m->u.step_plan.entries[0].verify_end = m->u.step_plan.entries[0].end + 1;
}
static void e_lookup_key_nonzero(kvt_msg_t *m)
{
    m->u.verdict.key.lo = 1;
}
static void e_load_key_nonzero(kvt_msg_t *m)
{
    m->u.completion.chan = KVT_CHAN_LOAD;
    m->u.completion.touch = 0;
}
static void e_touch_gen(kvt_msg_t *m)
{
    m->u.completion.op.gen = 2;
}
static void e_touch_off_touch(kvt_msg_t *m)
{
    m->u.completion.chan = KVT_CHAN_STATE;
}
static void e_fenced_off_store(kvt_msg_t *m)
{
    m->u.verdict.fenced = true; //  a lookup verdict
}
static void e_fence_key(kvt_msg_t *m)
{
    m->u.completion.chan = KVT_CHAN_FENCE;
    m->u.completion.fenced = false; //  the store sample's
}
static void e_state_boundary_off_end(kvt_msg_t *m)
{
    m->u.load_spec.state_boundary = m->u.load_spec.end - 1;
}
static void e_state_no_leg(kvt_msg_t *m)
{
    m->u.load_spec.state = false;
}
static void e_image_hash_zero(kvt_msg_t *m)
{
    m->u.save_spec.state_hash = (kvt_hash_t){0};
}
static void e_state_only_in_plan(kvt_msg_t *m)
{
    m->u.step_plan.loads[1].state_boundary = 0;
}
static void e_fence_lanes(kvt_msg_t *m)
{
    m->u.fence.lanes = KVT_FENCE_LANES_ALL + 1;
}
static void e_detail_over(kvt_msg_t *m)
{
    m->u.completion.detail = KVT_DETAIL_MAX + 1;
}
static void e_images_off_lookup(kvt_msg_t *m)
{
    m->u.completion.chan = KVT_CHAN_STATE;
    m->u.completion.held = 0;
}
static void e_images_off_lookup_verdict(kvt_msg_t *m)
{
    m->u.verdict.chan = KVT_CHAN_SOURCE_SAFE;
    m->u.verdict.held = 0;
}
static void e_lookup_keys_over(kvt_msg_t *m)
{
    m->u.lookup.nkeys = KVT_MSG_MAX_CHUNKS + 1;
}
static void e_touch_over(kvt_msg_t *m)
{
    m->u.completion.touch = KVT_MSG_MAX_TOUCH + 1;
}
static void e_entries_null(kvt_msg_t *m)
{
    kvt_step_exec_t *x = &m->u.step_exec;
    for (uint32_t i = 0; i < x->nentries; i++) {
        free(x->entries[i].blocks);
        free(x->entries[i].hashes);
    }
    free(x->entries);
    x->entries = NULL;
}

typedef struct {
    int kind;           //  sample kind
    s_mutator_fn *fn;   //  the break
    const char *field;  //  field named by kvt_msg_check
    const char *reason; //  substring of the reason
    int shape;          //  sample shape (0: TYPICAL)
} s_enc_row_t;

static const s_enc_row_t s_enc_rows[] = {
    {KVT_MSG_PING, e_kind0, "kind", "unknown kind 0", 0},
    {KVT_MSG_COMPLETION, e_chan0, "chan", "out of range", 0},
    {KVT_MSG_STEP_PLAN, e_gen0, "loads[1].gen", "out of range", 0},
    {KVT_MSG_STEP_EXEC, e_end_eq_start, "entries[1].end", "not above start", 0},
    {KVT_MSG_LOAD_SPEC, e_blocks_over, "blocks", "longer than 65536", 0},
    {KVT_MSG_STEP_PLAN, e_blocks_null, "entries[2].blocks", "NULL array", 0},
    {KVT_MSG_PING, e_payload_null, "payload", "NULL array", 0},
    {KVT_MSG_SHUTDOWN, e_text_unterminated, "text", "not NUL-terminated", 0},
    {KVT_MSG_STATS, e_from_unterminated, "from", "not NUL-terminated", 0},
    {KVT_MSG_STATS, e_counter_dup, "counters[3]", "duplicate counter name", 0},
    {KVT_MSG_STATS, e_counter_empty, "counters[0]", "counter name of 0 bytes", 0},
    {KVT_MSG_STEP_PLAN, e_idle_with_work, "idle", "idle plan", 0},
    {KVT_MSG_SCHEDULE, e_tokens_zero, "arrivals[2].tokens", "at least 1", 0},
    {KVT_MSG_VERDICT, e_verdict_ok_failed, "nfailed", "ok verdict", 0},
    {KVT_MSG_STEP_DONE, e_rank_over, "rank", "out of range", 0},
    {KVT_MSG_STEP_PLAN, e_event_type, "events[3].type", "out of range", 0},
    {KVT_MSG_STEP_PLAN, e_verify_above_end, "entries[0].verify_end", "above end", 0},
    {KVT_MSG_VERDICT, e_lookup_key_nonzero, "key", "a lookup's key must be the zero hash", 0},
    {KVT_MSG_COMPLETION, e_load_key_nonzero, "key", "a load's key", KVT_SAMPLE_ALT1},
    {KVT_MSG_COMPLETION, e_touch_gen, "gen", "a touch report's gen", KVT_SAMPLE_ALT1},
    {KVT_MSG_COMPLETION, e_touch_off_touch, "touch", "touch on channel 3", KVT_SAMPLE_ALT1},
    {KVT_MSG_VERDICT, e_fenced_off_store, "fenced", "fenced on channel 6", 0},
    {KVT_MSG_COMPLETION, e_fence_key, "key", "a fence's key", KVT_SAMPLE_MAX},
    {KVT_MSG_LOAD_SPEC, e_state_boundary_off_end, "state_boundary", "is not the KV leg's end", 0},
    {KVT_MSG_LOAD_SPEC, e_state_no_leg, "state", "neither", KVT_SAMPLE_ALT1},
    {KVT_MSG_SAVE_SPEC, e_image_hash_zero, "state_hash", "zero state_hash with image", 0},
    {KVT_MSG_STEP_PLAN, e_state_only_in_plan, "loads[1].state_boundary", "must be > 0", 0},
    {KVT_MSG_FENCE, e_fence_lanes, "lanes", "out of range 0..7", 0},
    {KVT_MSG_COMPLETION, e_detail_over, "detail", "out of range", 0},
    {KVT_MSG_STEP_EXEC, e_entries_null, "entries", "NULL array", 0},
    {KVT_MSG_COMPLETION, e_images_off_lookup, "images", "only lookup", 0},
    {KVT_MSG_VERDICT, e_images_off_lookup_verdict, "images", "only lookup", 0},
    {KVT_MSG_LOOKUP, e_lookup_keys_over, "keys", "longer than 4096", 0},
    {KVT_MSG_COMPLETION, e_touch_over, "touch", "out of range", 0},
};

Test(kvt_msg_reject, encoder_refuses_schema_violations_naming_the_field)
{
    for (size_t i = 0; i < sizeof s_enc_rows / sizeof s_enc_rows[0]; i++) {
        const s_enc_row_t *r = &s_enc_rows[i];
        kvt_msg_t msg;
        cr_assert_eq(kvt_msg_sample(r->kind, s_shape(r->shape), &msg), 0);
        int kind = msg.kind;
        r->fn(&msg);
        kvt_msg_err_t err;
        char text[256];
        cr_assert_eq(kvt_msg_check(&msg, &err), -1, "row %zu (%s) passes the check", i, r->field);
        kvt_msg_err_str(&err, text, sizeof text);
        cr_assert_str_eq(err.field, r->field, "row %zu: %s", i, text);
        cr_assert(strstr(err.reason, r->reason), "row %zu: %s", i, text);
        uint8_t *buf = (uint8_t *)&msg;
        size_t len = 1;
        cr_assert_eq(kvt_msg_encode(&msg, &buf, &len), -1, "row %zu encodes", i);
        cr_assert_null(buf);
        cr_assert_eq(len, 0);
        msg.kind = kind; //  restore what e_kind0 changed, so clear frees the body
        kvt_msg_clear(&msg);
    }
}
