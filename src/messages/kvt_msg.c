/*  kvt_msg.c — the strict codec: schema-driven decode, check, encode, clear.

    Envelope: msgpack array [version, kind, body], body a map with small
    unsigned-integer keys (tables in kvt_msg_schema.c).

    Decoding reads the frame with kvt_wire (our own bounded reader, see
    kvt_wire.h for why not msgpack_unpack_next) straight into the message:
    every header count is checked against the bytes left and against the
    field's limit before its array is allocated, every scalar against its
    range before it is stored, then the body's cross-field rules run. On any
    failure the partial message is freed with kvt_msg_clear, so nothing leaks
    and *msg is left empty.

    Encoding runs kvt_msg_check (the same tables and cross-field rules) first,
    so the encoder never produces a frame the decoder refuses, then packs with
    msgpack-c. u32 and hash arrays travel as bin, little-endian.
*/
#include "kvt_msg_schema.h"
#include "kvt_msg_test.h"
#include "kvt_wire.h"

#include <assert.h>
#include <inttypes.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_AT(base, off)   ((void *)((char *)(base) + (off)))
#define S_CAT(base, off)  ((const void *)((const char *)(base) + (off)))
#define S_PTR(base, f)    (*(void **)S_AT(base, (f)->off))
#define S_CPTR(base, f)   (*(void *const *)S_CAT(base, (f)->off))
#define S_COUNT(base, f)  (*(uint32_t *)S_AT(base, (f)->count_off))
#define S_CCOUNT(base, f) (*(const uint32_t *)S_CAT(base, (f)->count_off))

static const char *s_kind_names[KVT_MSG_KIND_COUNT] = {
    "None",     "Ping",     "Schedule",   "StepPlan", "StepExec", "StepDone",
    "LoadSpec", "SaveSpec", "Completion", "Verdict",  "Stats",    "Shutdown",
};

const char *kvt_msg_kind_name(int kind)
{
    if (kind < 0 || kind >= KVT_MSG_KIND_COUNT)
        return "?";
    return s_kind_names[kind];
}

static bool s_is_array(kvt_ftype_t type)
{
    return type == KVT_F_BYTES || type == KVT_F_U32S || type == KVT_F_HASHES ||
           type == KVT_F_U64S || type == KVT_F_STRUCTS || type == KVT_F_COUNTERS;
}

// ----------------------------------------------------------------- clear --

static void s_free_body(const kvt_schema_t *schema, void *base)
{
    for (uint32_t i = 0; i < schema->nfields; i++) {
        const kvt_field_t *f = &schema->fields[i];
        if (!s_is_array(f->type))
            continue;
        void *array = S_PTR(base, f);
        if (array && f->type == KVT_F_STRUCTS) {
            uint32_t n = S_COUNT(base, f);
            for (uint32_t j = 0; j < n; j++)
                s_free_body(f->sub, (char *)array + (size_t)j * f->sub->size);
        }
        free(array);
        S_PTR(base, f) = NULL;
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

// ---------------------------------------------------------------- decode --

typedef struct {
    kvt_wire_rd_t rd; //  reader over the frame
    kvt_path_t path;  //  error sink and current field path
    size_t alloc;     //  bytes of arrays requested so far (test hook)
} s_dec_t;

static void *s_alloc(s_dec_t *d, size_t n, size_t size)
{
    //  n is bounded by a KVT_MSG_MAX_* limit and by the frame, so no overflow.
    d->alloc += n * size;
    return calloc(n, size);
}

//  Turns a reader failure into an error on `field`; `want` names the type.
static int s_wire_fail(s_dec_t *d, const char *field, kvt_wire_rc_t rc, const char *want)
{
    switch (rc) {
    case KVT_WIRE_TYPE:
        return kvt_path_fail(&d->path, field, "expected %s, got %s", want,
                             kvt_wire_type_name(kvt_wire_peek(&d->rd)));
    case KVT_WIRE_NEGATIVE:
        return kvt_path_fail(&d->path, field, "negative integer, expected %s", want);
    case KVT_WIRE_TOO_BIG:
        return kvt_path_fail(&d->path, field,
                             "header claims %" PRIu64 ", more than the %zu bytes left", d->rd.claim,
                             kvt_wire_left(&d->rd));
    case KVT_WIRE_TOO_DEEP:
        return kvt_path_fail(&d->path, field, "nested deeper than %d", KVT_WIRE_MAX_DEPTH);
    case KVT_WIRE_BAD_BYTE:
        return kvt_path_fail(&d->path, field, "reserved byte 0xc1");
    case KVT_WIRE_TRUNCATED:
    case KVT_WIRE_OK:
        break;
    }
    return kvt_path_fail(&d->path, field, "truncated");
}

static int s_count_fail(s_dec_t *d, const kvt_field_t *f, uint64_t n)
{
    if (n < f->min)
        return kvt_path_fail(&d->path, f->name, "%" PRIu64 " items, at least %" PRIu64 " needed", n,
                             f->min);
    return kvt_path_fail(&d->path, f->name, "array longer than %" PRIu64 " (%" PRIu64 " items)",
                         f->max, n);
}

static int s_decode_body(s_dec_t *d, const kvt_schema_t *schema, void *base, uint32_t nkeys);

//  Reads a bin holding `width`-byte elements; returns its bytes and count.
static int s_decode_packed(s_dec_t *d, const kvt_field_t *f, uint32_t width, const uint8_t **data,
                           uint32_t *count)
{
    uint32_t size;
    kvt_wire_rc_t rc = kvt_wire_read_bin(&d->rd, data, &size);
    if (rc != KVT_WIRE_OK)
        return s_wire_fail(d, f->name, rc, "bin");
    if (size % width != 0)
        return kvt_path_fail(&d->path, f->name, "bin length %u is not a multiple of %u", size,
                             width);
    *count = size / width;
    if (*count < f->min || *count > f->max)
        return s_count_fail(d, f, *count);
    return 0;
}

static int s_decode_counters(s_dec_t *d, const kvt_field_t *f, void *base)
{
    uint32_t n;
    kvt_wire_rc_t rc = kvt_wire_read_map(&d->rd, &n);
    if (rc != KVT_WIRE_OK)
        return s_wire_fail(d, f->name, rc, "map");
    if (n < f->min || n > f->max)
        return s_count_fail(d, f, n);
    if (n == 0)
        return 0;
    kvt_counter_t *counters = s_alloc(d, n, sizeof *counters);
    if (!counters)
        return kvt_path_fail(&d->path, f->name, "out of memory");
    S_PTR(base, f) = counters;
    S_COUNT(base, f) = n;
    for (uint32_t i = 0; i < n; i++) {
        size_t old = kvt_path_enter(&d->path, f->name, i);
        const uint8_t *name;
        uint32_t size;
        rc = kvt_wire_read_str(&d->rd, &name, &size);
        if (rc != KVT_WIRE_OK)
            return s_wire_fail(d, "", rc, "str");
        if (!kvt_msg_name_ok((const char *)name, size))
            return kvt_path_fail(&d->path, "", "counter name of %u bytes (1..%d, no NUL)", size,
                                 KVT_MSG_MAX_NAME);
        memcpy(counters[i].name, name, size);
        for (uint32_t j = 0; j < i; j++)
            if (strcmp(counters[j].name, counters[i].name) == 0)
                return kvt_path_fail(&d->path, "", "duplicate counter name \"%s\"",
                                     counters[i].name);
        rc = kvt_wire_read_uint(&d->rd, &counters[i].value);
        if (rc != KVT_WIRE_OK)
            return s_wire_fail(d, "", rc, "uint");
        kvt_path_leave(&d->path, old);
    }
    return 0;
}

static int s_decode_structs(s_dec_t *d, const kvt_field_t *f, void *base)
{
    uint32_t n;
    kvt_wire_rc_t rc = kvt_wire_read_array(&d->rd, &n);
    if (rc != KVT_WIRE_OK)
        return s_wire_fail(d, f->name, rc, "array");
    if (n < f->min || n > f->max)
        return s_count_fail(d, f, n);
    if (n == 0)
        return 0;
    char *array = s_alloc(d, n, f->sub->size);
    if (!array)
        return kvt_path_fail(&d->path, f->name, "out of memory");
    S_PTR(base, f) = array;
    S_COUNT(base, f) = n; //  elements are zeroed, so a clear midway is safe
    for (uint32_t i = 0; i < n; i++) {
        size_t old = kvt_path_enter(&d->path, f->name, i);
        uint32_t nkeys;
        rc = kvt_wire_read_map(&d->rd, &nkeys);
        if (rc != KVT_WIRE_OK)
            return s_wire_fail(d, "", rc, "map");
        if (s_decode_body(d, f->sub, array + (size_t)i * f->sub->size, nkeys) != 0)
            return -1;
        kvt_path_leave(&d->path, old);
    }
    return 0;
}

static int s_decode_field(s_dec_t *d, const kvt_field_t *f, void *base)
{
    void *at = S_AT(base, f->off);
    kvt_wire_rc_t rc;
    const uint8_t *data;
    uint32_t n;
    switch (f->type) {
    case KVT_F_U64:
    case KVT_F_U32:
    case KVT_F_U8: {
        uint64_t v;
        rc = kvt_wire_read_uint(&d->rd, &v);
        if (rc != KVT_WIRE_OK)
            return s_wire_fail(d, f->name, rc, "uint");
        if (v < f->min || v > f->max)
            return kvt_path_fail(&d->path, f->name,
                                 "%" PRIu64 " out of range %" PRIu64 "..%" PRIu64, v, f->min,
                                 f->max);
        if (f->type == KVT_F_U64)
            *(uint64_t *)at = v;
        else if (f->type == KVT_F_U32)
            *(uint32_t *)at = (uint32_t)v;
        else
            *(uint8_t *)at = (uint8_t)v;
        return 0;
    }
    case KVT_F_BOOL:
        rc = kvt_wire_read_bool(&d->rd, (bool *)at);
        return rc == KVT_WIRE_OK ? 0 : s_wire_fail(d, f->name, rc, "bool");
    case KVT_F_HASH:
        rc = kvt_wire_read_bin(&d->rd, &data, &n);
        if (rc != KVT_WIRE_OK)
            return s_wire_fail(d, f->name, rc, "bin");
        if (n != 16)
            return kvt_path_fail(&d->path, f->name, "expected 16 bytes, got %u", n);
        *(kvt_hash_t *)at = kvt_wire_get_hash(data);
        return 0;
    case KVT_F_STR:
        rc = kvt_wire_read_str(&d->rd, &data, &n);
        if (rc != KVT_WIRE_OK)
            return s_wire_fail(d, f->name, rc, "str");
        if (n < f->min || n > f->max)
            return kvt_path_fail(&d->path, f->name, "%u bytes, allowed %" PRIu64 "..%" PRIu64, n,
                                 f->min, f->max);
        if (memchr(data, '\0', n))
            return kvt_path_fail(&d->path, f->name, "contains a NUL byte");
        memcpy(at, data, n);
        ((char *)at)[n] = '\0';
        return 0;
    case KVT_F_BYTES:
        if (s_decode_packed(d, f, 1, &data, &n) != 0)
            return -1;
        if (n > 0) {
            uint8_t *bytes = s_alloc(d, n, 1);
            if (!bytes)
                return kvt_path_fail(&d->path, f->name, "out of memory");
            memcpy(bytes, data, n);
            *(uint8_t **)at = bytes;
        }
        S_COUNT(base, f) = n;
        return 0;
    case KVT_F_U32S:
        if (s_decode_packed(d, f, 4, &data, &n) != 0)
            return -1;
        if (n > 0) {
            uint32_t *values = s_alloc(d, n, sizeof *values);
            if (!values)
                return kvt_path_fail(&d->path, f->name, "out of memory");
            for (uint32_t i = 0; i < n; i++)
                values[i] = kvt_wire_get_u32le(data + 4 * (size_t)i);
            *(uint32_t **)at = values;
        }
        S_COUNT(base, f) = n;
        return 0;
    case KVT_F_HASHES:
        if (s_decode_packed(d, f, 16, &data, &n) != 0)
            return -1;
        if (n > 0) {
            kvt_hash_t *hashes = s_alloc(d, n, sizeof *hashes);
            if (!hashes)
                return kvt_path_fail(&d->path, f->name, "out of memory");
            for (uint32_t i = 0; i < n; i++)
                hashes[i] = kvt_wire_get_hash(data + 16 * (size_t)i);
            *(kvt_hash_t **)at = hashes;
        }
        S_COUNT(base, f) = n;
        return 0;
    case KVT_F_U64S: {
        rc = kvt_wire_read_array(&d->rd, &n);
        if (rc != KVT_WIRE_OK)
            return s_wire_fail(d, f->name, rc, "array");
        if (n < f->min || n > f->max)
            return s_count_fail(d, f, n);
        if (n == 0)
            return 0;
        uint64_t *values = s_alloc(d, n, sizeof *values);
        if (!values)
            return kvt_path_fail(&d->path, f->name, "out of memory");
        *(uint64_t **)at = values;
        S_COUNT(base, f) = n;
        for (uint32_t i = 0; i < n; i++) {
            rc = kvt_wire_read_uint(&d->rd, &values[i]);
            if (rc != KVT_WIRE_OK) {
                kvt_path_enter(&d->path, f->name, i);
                return s_wire_fail(d, "", rc, "uint");
            }
        }
        return 0;
    }
    case KVT_F_STRUCTS:
        return s_decode_structs(d, f, base);
    case KVT_F_COUNTERS:
        return s_decode_counters(d, f, base);
    }
    return kvt_path_fail(&d->path, f->name, "unsupported field type");
}

static int s_decode_body(s_dec_t *d, const kvt_schema_t *schema, void *base, uint32_t nkeys)
{
    //  The map itself is named "body" at the top and "entries[3]" inside.
    const char *self = d->path.len ? "" : "body";
    uint64_t keys[KVT_MSG_MAX_KEYS];
    bool seen[KVT_MSG_MAX_KEYS] = {false};
    uint32_t counts[KVT_MSG_MAX_KEYS] = {0};
    assert(schema->nfields <= KVT_MSG_MAX_KEYS);
    if (nkeys > KVT_MSG_MAX_KEYS)
        return kvt_path_fail(&d->path, self, "map of %u keys, at most %d", nkeys, KVT_MSG_MAX_KEYS);
    for (uint32_t i = 0; i < nkeys; i++) {
        uint64_t key;
        kvt_wire_rc_t rc = kvt_wire_read_uint(&d->rd, &key);
        if (rc != KVT_WIRE_OK)
            return s_wire_fail(d, self, rc, "uint map key");
        const kvt_field_t *f = NULL;
        uint32_t index = 0;
        for (index = 0; index < schema->nfields; index++)
            if (schema->fields[index].key == key) {
                f = &schema->fields[index];
                break;
            }
        char unknown[32];
        snprintf(unknown, sizeof unknown, "key %" PRIu64, key);
        for (uint32_t j = 0; j < i; j++)
            if (keys[j] == key)
                return kvt_path_fail(&d->path, f ? f->name : unknown, "duplicate key %" PRIu64,
                                     key);
        keys[i] = key;
        if (!f) {
            //  Unknown key: a newer sender's field. Skip it, still bounded.
            rc = kvt_wire_skip(&d->rd, KVT_WIRE_MAX_DEPTH);
            if (rc != KVT_WIRE_OK)
                return s_wire_fail(d, unknown, rc, "a value");
            continue;
        }
        if (s_decode_field(d, f, base) != 0)
            return -1;
        seen[index] = true;
        if (s_is_array(f->type))
            counts[index] = S_COUNT(base, f);
    }
    for (uint32_t i = 0; i < schema->nfields; i++) {
        const kvt_field_t *f = &schema->fields[i];
        if (!seen[i] && !f->optional)
            return kvt_path_fail(&d->path, f->name, "missing mandatory field (key %u)", f->key);
        if (f->same_count_as >= 0 && counts[i] != counts[f->same_count_as])
            return kvt_path_fail(&d->path, f->name, "%u %s for %u %s", counts[i], f->name,
                                 counts[f->same_count_as], schema->fields[f->same_count_as].name);
    }
    return schema->check ? schema->check(base, &d->path) : 0;
}

int kvt_msg_decode_ex(const uint8_t *buf, size_t len, kvt_msg_t *msg, kvt_msg_err_t *err,
                      size_t *alloc_bytes)
{
    assert(msg);
    assert(buf || len == 0);
    kvt_msg_err_t local;
    if (!err)
        err = &local;
    memset(err, 0, sizeof *err);
    memset(msg, 0, sizeof *msg);
    s_dec_t d = {.path = {.err = err}};
    int rc = -1;
    if (len == 0) {
        kvt_path_fail(&d.path, "frame", "empty frame");
        goto cleanup;
    }
    if (len > KVT_MSG_MAX_FRAME) {
        kvt_path_fail(&d.path, "frame", "%zu bytes, more than the %u-byte cap", len,
                      KVT_MSG_MAX_FRAME);
        goto cleanup;
    }
    kvt_wire_rd_init(&d.rd, buf, len);
    uint32_t n;
    kvt_wire_rc_t wrc = kvt_wire_read_array(&d.rd, &n);
    if (wrc != KVT_WIRE_OK) {
        s_wire_fail(&d, "envelope", wrc, "array");
        goto cleanup;
    }
    if (n == 0) {
        kvt_path_fail(&d.path, "envelope", "empty array");
        goto cleanup;
    }
    //  The version comes first: another version may shape the rest differently.
    uint64_t version;
    wrc = kvt_wire_read_uint(&d.rd, &version);
    if (wrc != KVT_WIRE_OK) {
        s_wire_fail(&d, "version", wrc, "uint");
        goto cleanup;
    }
    if (version != KVT_MSG_VERSION) {
        kvt_path_fail(&d.path, "version", "unsupported version %" PRIu64 " (expected %d)", version,
                      KVT_MSG_VERSION);
        goto cleanup;
    }
    if (n != 3) {
        kvt_path_fail(&d.path, "envelope", "array of %u elements, expected 3", n);
        goto cleanup;
    }
    uint64_t kind;
    wrc = kvt_wire_read_uint(&d.rd, &kind);
    if (wrc != KVT_WIRE_OK) {
        s_wire_fail(&d, "kind", wrc, "uint");
        goto cleanup;
    }
    const kvt_schema_t *schema = kind < KVT_MSG_KIND_COUNT ? kvt_msg_schema((int)kind) : NULL;
    if (!schema) {
        kvt_path_fail(&d.path, "kind", "unknown kind %" PRIu64, kind);
        goto cleanup;
    }
    err->kind = (kvt_msg_kind_t)kind;
    msg->kind = (kvt_msg_kind_t)kind;
    uint32_t nkeys;
    wrc = kvt_wire_read_map(&d.rd, &nkeys);
    if (wrc != KVT_WIRE_OK) {
        s_wire_fail(&d, "body", wrc, "map");
        goto cleanup;
    }
    if (s_decode_body(&d, schema, &msg->u, nkeys) != 0)
        goto cleanup;
    if (kvt_wire_left(&d.rd) != 0) {
        kvt_path_fail(&d.path, "frame", "%zu trailing bytes after the message",
                      kvt_wire_left(&d.rd));
        goto cleanup;
    }
    rc = 0;
cleanup:
    if (rc != 0)
        kvt_msg_clear(msg);
    if (alloc_bytes)
        *alloc_bytes = d.alloc;
    return rc;
}

int kvt_msg_decode(const uint8_t *buf, size_t len, kvt_msg_t *msg, kvt_msg_err_t *err)
{
    return kvt_msg_decode_ex(buf, len, msg, err, NULL);
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
    const void *at = S_CAT(base, f->off);
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
    uint32_t n = S_CCOUNT(base, f);
    const void *array = S_CPTR(base, f);
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

//  Packs n elements of `width` bytes as one bin, converting to little-endian
//  through a small stack buffer so no copy of the whole array is made.
static int s_pack_packed(msgpack_packer *pk, const void *array, uint32_t n, uint32_t width)
{
    uint8_t chunk[4096];
    uint32_t per = (uint32_t)sizeof chunk / width;
    if (msgpack_pack_bin(pk, (size_t)n * width) != 0)
        return -1;
    for (uint32_t i = 0; i < n; i += per) {
        uint32_t m = n - i < per ? n - i : per;
        for (uint32_t j = 0; j < m; j++) {
            if (width == 4)
                kvt_wire_put_u32le(chunk + 4 * j, ((const uint32_t *)array)[i + j]);
            else
                kvt_wire_put_hash(chunk + 16 * j, ((const kvt_hash_t *)array)[i + j]);
        }
        if (msgpack_pack_bin_body(pk, chunk, (size_t)m * width) != 0)
            return -1;
    }
    return 0;
}

static int s_pack_body(msgpack_packer *pk, const kvt_schema_t *schema, const void *base);

//  Not msgpack_pack_*_with_body: msgpack-c 4.0 declares those plain `inline`
//  in its header, which C11 may leave without an external definition.
static int s_pack_bin(msgpack_packer *pk, const void *data, size_t size)
{
    if (msgpack_pack_bin(pk, size) != 0)
        return -1;
    return size ? msgpack_pack_bin_body(pk, data, size) : 0;
}

static int s_pack_str(msgpack_packer *pk, const char *data, size_t size)
{
    if (msgpack_pack_str(pk, size) != 0)
        return -1;
    return size ? msgpack_pack_str_body(pk, data, size) : 0;
}

static bool s_present(const kvt_field_t *f, const void *base)
{
    if (!f->optional)
        return true;
    if (f->type == KVT_F_STR)
        return *(const char *)S_CAT(base, f->off) != '\0';
    assert(s_is_array(f->type));
    return S_CCOUNT(base, f) > 0;
}

static int s_pack_field(msgpack_packer *pk, const kvt_field_t *f, const void *base)
{
    const void *at = S_CAT(base, f->off);
    uint8_t hash[16];
    switch (f->type) {
    case KVT_F_U64:
        return msgpack_pack_uint64(pk, *(const uint64_t *)at);
    case KVT_F_U32:
        return msgpack_pack_uint32(pk, *(const uint32_t *)at);
    case KVT_F_U8:
        return msgpack_pack_uint8(pk, *(const uint8_t *)at);
    case KVT_F_BOOL:
        return *(const bool *)at ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
    case KVT_F_HASH:
        kvt_wire_put_hash(hash, *(const kvt_hash_t *)at);
        return s_pack_bin(pk, hash, sizeof hash);
    case KVT_F_STR: {
        size_t size = strlen(at); //  kvt_msg_check found the NUL
        return s_pack_str(pk, at, size);
    }
    default:
        break;
    }
    uint32_t n = S_CCOUNT(base, f);
    const void *array = S_CPTR(base, f);
    switch (f->type) {
    case KVT_F_BYTES:
        return s_pack_bin(pk, array, n);
    case KVT_F_U32S:
        return s_pack_packed(pk, array, n, 4);
    case KVT_F_HASHES:
        return s_pack_packed(pk, array, n, 16);
    case KVT_F_U64S:
        if (msgpack_pack_array(pk, n) != 0)
            return -1;
        for (uint32_t i = 0; i < n; i++)
            if (msgpack_pack_uint64(pk, ((const uint64_t *)array)[i]) != 0)
                return -1;
        return 0;
    case KVT_F_STRUCTS:
        if (msgpack_pack_array(pk, n) != 0)
            return -1;
        for (uint32_t i = 0; i < n; i++)
            if (s_pack_body(pk, f->sub, (const char *)array + (size_t)i * f->sub->size) != 0)
                return -1;
        return 0;
    case KVT_F_COUNTERS:
        if (msgpack_pack_map(pk, n) != 0)
            return -1;
        for (uint32_t i = 0; i < n; i++) {
            const kvt_counter_t *c = &((const kvt_counter_t *)array)[i];
            if (s_pack_str(pk, c->name, strlen(c->name)) != 0 ||
                msgpack_pack_uint64(pk, c->value) != 0)
                return -1;
        }
        return 0;
    default:
        break;
    }
    assert(!"unhandled field type");
    return -1;
}

static int s_pack_body(msgpack_packer *pk, const kvt_schema_t *schema, const void *base)
{
    uint32_t present = 0;
    for (uint32_t i = 0; i < schema->nfields; i++)
        present += s_present(&schema->fields[i], base);
    if (msgpack_pack_map(pk, present) != 0)
        return -1;
    for (uint32_t i = 0; i < schema->nfields; i++) {
        const kvt_field_t *f = &schema->fields[i];
        if (!s_present(f, base))
            continue;
        if (msgpack_pack_uint8(pk, f->key) != 0 || s_pack_field(pk, f, base) != 0)
            return -1;
    }
    return 0;
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
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    int rc = -1;
    if (msgpack_pack_array(&pk, 3) != 0 || msgpack_pack_uint8(&pk, KVT_MSG_VERSION) != 0 ||
        msgpack_pack_uint8(&pk, (uint8_t)msg->kind) != 0 || s_pack_body(&pk, schema, &msg->u) != 0)
        goto cleanup;
    if (sb.size > KVT_MSG_MAX_FRAME)
        goto cleanup; //  the peer would refuse it
    *len_p = sb.size;
    *buf_p = (uint8_t *)msgpack_sbuffer_release(&sb);
    rc = 0;
cleanup:
    msgpack_sbuffer_destroy(&sb);
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
