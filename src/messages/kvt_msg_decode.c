/*  kvt_msg_decode.c — the strict decoder.

    Reads the frame with kvt_wire (our own bounded reader; kvt_wire.h says
    why not msgpack_unpack_next) straight into the message: every header
    count is checked against the bytes left and against the field's limit
    before its array is allocated, every scalar against its range before it
    is stored, then the body's cross-field rules run. On any failure the
    partial message is freed with kvt_msg_clear, so nothing leaks and *msg is
    left empty.
*/
#include "kvt_msg_schema.h"
#include "kvt_msg_test.h"
#include "kvt_wire.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    KVT_F_PTR(base, f) = counters;
    KVT_F_COUNT(base, f) = n;
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
    KVT_F_PTR(base, f) = array;
    KVT_F_COUNT(base, f) = n; //  elements are zeroed, so a clear midway is safe
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
    void *at = KVT_F_AT(base, f->off);
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
        KVT_F_COUNT(base, f) = n;
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
        KVT_F_COUNT(base, f) = n;
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
        KVT_F_COUNT(base, f) = n;
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
        KVT_F_COUNT(base, f) = n;
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

//  Fails on the unknown map key `key`; its name ("key 99") is formatted only
//  here, never on the success path.
static int s_key_fail(s_dec_t *d, uint64_t key, kvt_wire_rc_t rc)
{
    char unknown[32];
    snprintf(unknown, sizeof unknown, "key %" PRIu64, key);
    if (rc == KVT_WIRE_OK)
        return kvt_path_fail(&d->path, unknown, "duplicate key %" PRIu64, key);
    return s_wire_fail(d, unknown, rc, "a value");
}

//  The field with map key `key`, or NULL. Fields are in key order and an
//  encoder writes them in that order, so the one after the previous key's
//  (*hint) is tried first; any order still finds it.
static const kvt_field_t *s_field(const kvt_schema_t *schema, uint64_t key, uint32_t *hint)
{
    uint32_t i = *hint;
    if (i < schema->nfields && schema->fields[i].key == key) {
        *hint = i + 1;
        return &schema->fields[i];
    }
    for (i = 0; i < schema->nfields; i++)
        if (schema->fields[i].key == key) {
            *hint = i + 1;
            return &schema->fields[i];
        }
    return NULL;
}

static int s_decode_body(s_dec_t *d, const kvt_schema_t *schema, void *base, uint32_t nkeys)
{
    //  The map itself is named "body" at the top and "entries[3]" inside.
    const char *self = d->path.depth ? "" : "body";
    //  Keys seen so far: a bit per key below 256 (every known key is a
    //  uint8_t), a list for the larger ones (unknown keys only).
    uint64_t small[4] = {0};
    uint64_t large[KVT_MSG_MAX_KEYS];
    uint32_t nlarge = 0;
    uint64_t seen = 0;                 //  bit i: schema->fields[i] was decoded
    uint32_t counts[KVT_MSG_MAX_KEYS]; //  counts[i] is set when bit i of seen is
    uint32_t hint = 0;
    assert(schema->nfields <= KVT_MSG_MAX_KEYS && KVT_MSG_MAX_KEYS <= 64);
    if (nkeys > KVT_MSG_MAX_KEYS)
        return kvt_path_fail(&d->path, self, "map of %u keys, at most %d", nkeys, KVT_MSG_MAX_KEYS);
    for (uint32_t i = 0; i < nkeys; i++) {
        uint64_t key;
        kvt_wire_rc_t rc = kvt_wire_read_uint(&d->rd, &key);
        if (rc != KVT_WIRE_OK)
            return s_wire_fail(d, self, rc, "uint map key");
        const kvt_field_t *f = s_field(schema, key, &hint);
        bool dup = false;
        if (key < 256) {
            uint64_t bit = (uint64_t)1 << (key % 64);
            dup = (small[key / 64] & bit) != 0;
            small[key / 64] |= bit;
        } else {
            for (uint32_t j = 0; j < nlarge && !dup; j++)
                dup = large[j] == key;
            large[nlarge++] = key;
        }
        if (dup) {
            if (f)
                return kvt_path_fail(&d->path, f->name, "duplicate key %" PRIu64, key);
            return s_key_fail(d, key, KVT_WIRE_OK);
        }
        if (!f) {
            //  Unknown key: a newer sender's field. Skip it, still bounded.
            rc = kvt_wire_skip(&d->rd, KVT_WIRE_MAX_DEPTH);
            if (rc != KVT_WIRE_OK)
                return s_key_fail(d, key, rc);
            continue;
        }
        if (s_decode_field(d, f, base) != 0)
            return -1;
        uint32_t index = (uint32_t)(f - schema->fields);
        seen |= (uint64_t)1 << index;
        if (kvt_field_is_array(f->type))
            counts[index] = KVT_F_COUNT(base, f);
        else
            counts[index] = 0;
    }
    for (uint32_t i = 0; i < schema->nfields; i++) {
        const kvt_field_t *f = &schema->fields[i];
        bool have = (seen >> i & 1) != 0;
        if (!have && !f->optional)
            return kvt_path_fail(&d->path, f->name, "missing mandatory field (key %u)", f->key);
        if (f->same_count_as >= 0) {
            uint32_t other = (uint32_t)f->same_count_as;
            uint32_t mine = have ? counts[i] : 0;
            uint32_t theirs = (seen >> other & 1) != 0 ? counts[other] : 0;
            if (mine != theirs)
                return kvt_path_fail(&d->path, f->name, "%u %s for %u %s", mine, f->name, theirs,
                                     schema->fields[other].name);
        }
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
