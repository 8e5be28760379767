/*  kvt_msg.c — the codec's schema-driven encode side: check, encode, clear,
    plus kind names and error formatting. Decoding is in kvt_msg_decode.c.

    Envelope: msgpack array [version, kind, body], body a map with small
    unsigned-integer keys (tables in kvt_msg_schema.c).

    Encoding runs kvt_msg_check (the same tables and cross-field rules the
    decoder applies) first, so the encoder never produces a frame the decoder
    refuses, then writes the frame itself, byte for byte what msgpack-c
    would pack (shortest headers), into a stack buffer that moves to the
    heap only when it outgrows it. u32 and hash arrays travel as bin,
    little-endian. Schema violations return -1; they are not asserted, so a
    sender can count them and tests can check them.
*/
#include "kvt_msg_schema.h"
#include "kvt_wire.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const s_kind_names[KVT_MSG_KIND_COUNT] = {
    "None",     "Ping",     "Schedule",      "StepPlan", "StepExec", "StepDone",
    "LoadSpec", "SaveSpec", "Completion",    "Verdict",  "Stats",    "Shutdown",
    "Touch",    "Lookup",   "LookupRelease", "Fence",
};

const char *kvt_msg_kind_name(int kind)
{
    if (kind < 0 || kind >= KVT_MSG_KIND_COUNT)
        return "?";
    return s_kind_names[kind];
}

// ----------------------------------------------------------------- clear --

static void s_free_body(const kvt_schema_t *schema, void *base)
{
    for (uint32_t i = 0; i < schema->nfields; i++) {
        const kvt_field_t *f = &schema->fields[i];
        if (!kvt_field_is_array(f->type))
            continue;
        void *array = KVT_F_PTR(base, f);
        if (array && f->type == KVT_F_STRUCTS) {
            uint32_t n = KVT_F_COUNT(base, f);
            for (uint32_t j = 0; j < n; j++)
                s_free_body(f->sub, (char *)array + (size_t)j * f->sub->size);
        }
        free(array);
        KVT_F_PTR(base, f) = NULL;
    }
}

void kvt_msg_clear(kvt_msg_t *msg)
{
    if (!msg)
        return;
    const kvt_schema_t *schema = kvt_msg_schema(msg->kind);
    if (schema)
        s_free_body(schema, &msg->u);
    memset(msg, 0, sizeof *msg);
}

// ----------------------------------------------------------------- check --

static int s_check_body(kvt_path_t *path, const kvt_schema_t *schema, const void *base,
                        size_t *bulk);

//  Bytes the array takes on the wire at least, per element.
static size_t s_wire_width(const kvt_field_t *f)
{
    switch (f->type) {
    case KVT_F_U32S:
        return 4;
    case KVT_F_HASHES:
        return 16;
    default:
        return 1;
    }
}

static int s_check_field(kvt_path_t *path, const kvt_field_t *f, const void *base, size_t *bulk)
{
    const void *at = KVT_F_CAT(base, f->off);
    uint64_t v;
    switch (f->type) {
    case KVT_F_U64:
    case KVT_F_U32:
    case KVT_F_U8:
        v = f->type == KVT_F_U64   ? *(const uint64_t *)at
            : f->type == KVT_F_U32 ? *(const uint32_t *)at
                                   : *(const uint8_t *)at;
        if (v < f->min || v > f->max)
            return kvt_path_fail(path, f->name, "%" PRIu64 " out of range %" PRIu64 "..%" PRIu64, v,
                                 f->min, f->max);
        return 0;
    case KVT_F_BOOL:
        return 0;
    case KVT_F_HASH:
        *bulk += 16;
        return 0;
    case KVT_F_STR: {
        const char *nul = memchr(at, '\0', (size_t)f->max + 1);
        if (!nul)
            return kvt_path_fail(path, f->name, "not NUL-terminated within %" PRIu64 " bytes",
                                 f->max);
        size_t size = (size_t)(nul - (const char *)at);
        if (size < f->min)
            return kvt_path_fail(path, f->name, "%zu bytes, allowed %" PRIu64 "..%" PRIu64, size,
                                 f->min, f->max);
        *bulk += size;
        return 0;
    }
    default:
        break;
    }
    uint32_t n = KVT_F_CCOUNT(base, f);
    const void *array = KVT_F_CPTR(base, f);
    if (n < f->min || n > f->max) {
        if (n < f->min)
            return kvt_path_fail(path, f->name, "%u items, at least %" PRIu64 " needed", n, f->min);
        return kvt_path_fail(path, f->name, "array longer than %" PRIu64 " (%u items)", f->max, n);
    }
    if (n > 0 && !array)
        return kvt_path_fail(path, f->name, "NULL array with %u items", n);
    if (f->type == KVT_F_STRUCTS) {
        for (uint32_t i = 0; i < n; i++) {
            size_t old = kvt_path_enter(path, f->name, i);
            if (s_check_body(path, f->sub, (const char *)array + (size_t)i * f->sub->size, bulk))
                return -1;
            kvt_path_leave(path, old);
        }
    } else if (f->type == KVT_F_COUNTERS) {
        const kvt_counter_t *counters = array;
        for (uint32_t i = 0; i < n; i++) {
            size_t size = strnlen(counters[i].name, KVT_MSG_MAX_NAME + 1);
            if (!kvt_msg_name_ok(counters[i].name, size)) {
                kvt_path_enter(path, f->name, i);
                return kvt_path_fail(path, "", "counter name of %zu bytes (1..%d)", size,
                                     KVT_MSG_MAX_NAME);
            }
            for (uint32_t j = 0; j < i; j++)
                if (strcmp(counters[j].name, counters[i].name) == 0) {
                    kvt_path_enter(path, f->name, i);
                    return kvt_path_fail(path, "", "duplicate counter name \"%s\"",
                                         counters[i].name);
                }
            *bulk += size + 1;
        }
    } else {
        *bulk += (size_t)n * s_wire_width(f);
    }
    if (*bulk > KVT_MSG_MAX_FRAME)
        return kvt_path_fail(path, f->name, "message exceeds the %u-byte frame cap",
                             KVT_MSG_MAX_FRAME);
    return 0;
}

static int s_check_body(kvt_path_t *path, const kvt_schema_t *schema, const void *base,
                        size_t *bulk)
{
    for (uint32_t i = 0; i < schema->nfields; i++)
        if (s_check_field(path, &schema->fields[i], base, bulk) != 0)
            return -1;
    return schema->check ? schema->check(base, path) : 0;
}

int kvt_msg_check(const kvt_msg_t *msg, kvt_msg_err_t *err)
{
    assert(msg);
    kvt_msg_err_t local;
    if (!err)
        err = &local;
    memset(err, 0, sizeof *err);
    kvt_path_t path = {.err = err};
    const kvt_schema_t *schema = kvt_msg_schema(msg->kind);
    if (!schema)
        return kvt_path_fail(&path, "kind", "unknown kind %d", (int)msg->kind);
    err->kind = msg->kind;
    size_t bulk = 0;
    return s_check_body(&path, schema, &msg->u, &bulk);
}

// ---------------------------------------------------------------- encode --

//  The frame being written: a stack buffer first (every report and most
//  specs fit), the heap once it outgrows it. The bytes are msgpack-c's:
//  every header in its shortest form, as msgpack_pack_* writes it
//  (tests/test_messages.c compares the two at every format boundary).
typedef struct {
    uint8_t *buf;        //  where the frame is written (local or heap)
    size_t len;          //  bytes written
    size_t cap;          //  bytes buf holds
    bool failed;         //  out of memory or over the frame cap
    uint8_t local[1024]; //  the first buf
} s_out_t;

static bool s_grow(s_out_t *o, size_t need)
{
    if (o->failed)
        return false;
    if (o->len + need > (size_t)KVT_MSG_MAX_FRAME + 64) {
        o->failed = true; //  the peer would refuse it; stop growing
        return false;
    }
    size_t cap = o->cap * 2;
    while (cap < o->len + need)
        cap *= 2;
    uint8_t *buf = o->buf == o->local ? malloc(cap) : realloc(o->buf, cap);
    if (!buf) {
        o->failed = true;
        return false;
    }
    if (o->buf == o->local)
        memcpy(buf, o->local, o->len);
    o->buf = buf;
    o->cap = cap;
    return true;
}

static void s_put(s_out_t *o, const void *data, size_t size)
{
    if (o->cap - o->len < size && !s_grow(o, size))
        return;
    memcpy(o->buf + o->len, data, size);
    o->len += size;
}

//  A first byte and `width` bytes of v, big-endian.
static void s_put_be(s_out_t *o, uint8_t first, uint64_t v, size_t width)
{
    uint8_t head[9];
    head[0] = first;
    for (size_t i = 0; i < width; i++)
        head[1 + i] = (uint8_t)(v >> (8 * (width - 1 - i)));
    s_put(o, head, 1 + width);
}

static void s_put_uint(s_out_t *o, uint64_t v)
{
    if (v < 128) {
        uint8_t b = (uint8_t)v;
        s_put(o, &b, 1);
    } else if (v < 256)
        s_put_be(o, 0xcc, v, 1);
    else if (v < 65536)
        s_put_be(o, 0xcd, v, 2);
    else if (v <= UINT32_MAX)
        s_put_be(o, 0xce, v, 4);
    else
        s_put_be(o, 0xcf, v, 8);
}

//  An array / map header: fix (n < 16), then 16-bit, then 32-bit counts.
static void s_put_count(s_out_t *o, uint8_t fix, uint8_t b16, uint32_t n)
{
    if (n < 16) {
        uint8_t b = (uint8_t)(fix | n);
        s_put(o, &b, 1);
    } else if (n < 65536)
        s_put_be(o, b16, n, 2);
    else
        s_put_be(o, (uint8_t)(b16 + 1), n, 4);
}

static void s_put_bin_head(s_out_t *o, size_t size)
{
    if (size <= UINT8_MAX)
        s_put_be(o, 0xc4, size, 1);
    else if (size < 65536)
        s_put_be(o, 0xc5, size, 2);
    else
        s_put_be(o, 0xc6, size, 4);
}

static void s_put_str(s_out_t *o, const char *data, size_t size)
{
    if (size < 32) {
        uint8_t b = (uint8_t)(0xa0 | size);
        s_put(o, &b, 1);
    } else if (size < 256)
        s_put_be(o, 0xd9, size, 1);
    else if (size < 65536)
        s_put_be(o, 0xda, size, 2);
    else
        s_put_be(o, 0xdb, size, 4);
    s_put(o, data, size);
}

//  Packs n elements of `width` bytes as one bin, little-endian, straight
//  into the frame.
static void s_put_packed(s_out_t *o, const void *array, uint32_t n, uint32_t width)
{
    size_t size = (size_t)n * width;
    s_put_bin_head(o, size);
    if (o->cap - o->len < size && !s_grow(o, size))
        return;
    uint8_t *p = o->buf + o->len;
    for (uint32_t i = 0; i < n; i++) {
        if (width == 4)
            kvt_wire_put_u32le(p + 4 * (size_t)i, ((const uint32_t *)array)[i]);
        else
            kvt_wire_put_hash(p + 16 * (size_t)i, ((const kvt_hash_t *)array)[i]);
    }
    o->len += size;
}

static void s_put_body(s_out_t *o, const kvt_schema_t *schema, const void *base);

static bool s_present(const kvt_field_t *f, const void *base)
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
        //  An optional scalar (hash included) is omitted when zero (the
        //  decoder's default); an optional array when empty.
        assert(kvt_field_is_array(f->type));
        return KVT_F_CCOUNT(base, f) > 0;
    }
}

static void s_put_field(s_out_t *o, const kvt_field_t *f, const void *base)
{
    const void *at = KVT_F_CAT(base, f->off);
    uint8_t hash[16];
    switch (f->type) {
    case KVT_F_U64:
        s_put_uint(o, *(const uint64_t *)at);
        return;
    case KVT_F_U32:
        s_put_uint(o, *(const uint32_t *)at);
        return;
    case KVT_F_U8:
        s_put_uint(o, *(const uint8_t *)at);
        return;
    case KVT_F_BOOL:
        hash[0] = *(const bool *)at ? 0xc3 : 0xc2;
        s_put(o, hash, 1);
        return;
    case KVT_F_HASH:
        kvt_wire_put_hash(hash, *(const kvt_hash_t *)at);
        s_put_bin_head(o, sizeof hash);
        s_put(o, hash, sizeof hash);
        return;
    case KVT_F_STR:
        s_put_str(o, at, strlen(at)); //  kvt_msg_check found the NUL
        return;
    default:
        break;
    }
    uint32_t n = KVT_F_CCOUNT(base, f);
    const void *array = KVT_F_CPTR(base, f);
    switch (f->type) {
    case KVT_F_BYTES:
        s_put_bin_head(o, n);
        if (n)
            s_put(o, array, n);
        return;
    case KVT_F_U32S:
        s_put_packed(o, array, n, 4);
        return;
    case KVT_F_HASHES:
        s_put_packed(o, array, n, 16);
        return;
    case KVT_F_U64S:
        s_put_count(o, 0x90, 0xdc, n);
        for (uint32_t i = 0; i < n; i++)
            s_put_uint(o, ((const uint64_t *)array)[i]);
        return;
    case KVT_F_STRUCTS:
        s_put_count(o, 0x90, 0xdc, n);
        for (uint32_t i = 0; i < n; i++)
            s_put_body(o, f->sub, (const char *)array + (size_t)i * f->sub->size);
        return;
    case KVT_F_COUNTERS:
        s_put_count(o, 0x80, 0xde, n);
        for (uint32_t i = 0; i < n; i++) {
            const kvt_counter_t *c = &((const kvt_counter_t *)array)[i];
            s_put_str(o, c->name, strlen(c->name));
            s_put_uint(o, c->value);
        }
        return;
    default:
        break;
    }
    assert(!"unhandled field type");
    o->failed = true;
}

static void s_put_body(s_out_t *o, const kvt_schema_t *schema, const void *base)
{
    //  Presence is decided once per field: the map header needs the count.
    uint64_t present = 0;
    uint32_t npresent = 0;
    assert(schema->nfields <= 64);
    for (uint32_t i = 0; i < schema->nfields; i++)
        if (s_present(&schema->fields[i], base)) {
            present |= (uint64_t)1 << i;
            npresent++;
        }
    s_put_count(o, 0x80, 0xde, npresent);
    for (uint32_t i = 0; i < schema->nfields; i++) {
        if (!(present >> i & 1))
            continue;
        const kvt_field_t *f = &schema->fields[i];
        s_put_uint(o, f->key);
        s_put_field(o, f, base);
    }
}

int kvt_msg_encode(const kvt_msg_t *msg, uint8_t **buf_p, size_t *len_p)
{
    assert(msg);
    assert(buf_p);
    assert(len_p);
    *buf_p = NULL;
    *len_p = 0;
    if (kvt_msg_check(msg, NULL) != 0)
        return -1;
    const kvt_schema_t *schema = kvt_msg_schema(msg->kind);
    s_out_t o;
    o.buf = o.local;
    o.len = 0;
    o.cap = sizeof o.local;
    o.failed = false;
    int rc = -1;
    s_put_count(&o, 0x90, 0xdc, 3);
    s_put_uint(&o, KVT_MSG_VERSION);
    s_put_uint(&o, (uint8_t)msg->kind);
    s_put_body(&o, schema, &msg->u);
    if (o.failed || o.len > KVT_MSG_MAX_FRAME)
        goto cleanup; //  out of memory, or the peer would refuse it
    if (o.buf == o.local) {
        uint8_t *buf = malloc(o.len);
        if (!buf)
            goto cleanup;
        memcpy(buf, o.local, o.len);
        *buf_p = buf;
    } else {
        *buf_p = o.buf;
        o.buf = o.local;
    }
    *len_p = o.len;
    rc = 0;
cleanup:
    if (o.buf != o.local)
        free(o.buf);
    return rc;
}

// ---------------------------------------------------------------- errors --

const char *kvt_msg_err_str(const kvt_msg_err_t *err, char *buf, size_t size)
{
    if (!buf || size == 0)
        return buf;
    if (!err) {
        snprintf(buf, size, "no error");
        return buf;
    }
    const char *kind = err->kind != KVT_MSG_NONE ? kvt_msg_kind_name(err->kind) : NULL;
    if (kind && err->field[0])
        snprintf(buf, size, "%s.%s: %s", kind, err->field, err->reason);
    else if (kind)
        snprintf(buf, size, "%s: %s", kind, err->reason);
    else if (err->field[0])
        snprintf(buf, size, "%s: %s", err->field, err->reason);
    else
        snprintf(buf, size, "%s", err->reason);
    return buf;
}
