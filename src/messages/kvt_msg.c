/*  kvt_msg.c — the codec's schema-driven encode side: check, encode, clear,
    plus kind names and error formatting. Decoding is in kvt_msg_decode.c.

    Envelope: msgpack array [version, kind, body], body a map with small
    unsigned-integer keys (tables in kvt_msg_schema.c).

    Encoding runs kvt_msg_check (the same tables and cross-field rules the
    decoder applies) first, so the encoder never produces a frame the decoder
    refuses, then packs with msgpack-c. u32 and hash arrays travel as bin,
    little-endian. Schema violations return -1; they are not asserted, so a
    sender can count them and tests can check them.
*/
#include "kvt_msg_schema.h"
#include "kvt_wire.h"

#include <assert.h>
#include <inttypes.h>
#include <msgpack.h>
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

static int s_pack_field(msgpack_packer *pk, const kvt_field_t *f, const void *base)
{
    const void *at = KVT_F_CAT(base, f->off);
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
    uint32_t n = KVT_F_CCOUNT(base, f);
    const void *array = KVT_F_CPTR(base, f);
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
