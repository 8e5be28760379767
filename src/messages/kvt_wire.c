/*  kvt_wire.c — checked msgpack reader (see kvt_wire.h for why it exists).

    Every value starts with a header: the first byte, maybe followed by a
    length or count. s_head decodes any header into (class, header size,
    length or count) and checks, before anything is consumed, that the
    header itself is complete and that what it claims fits in the bytes
    left. The typed readers and the skipper are built on it.
*/
#include "kvt_wire.h"

#include <assert.h>

//  What a header introduces.
typedef enum {
    S_SCALAR, //  fixed-size value: n payload bytes follow the header
    S_BYTES,  //  str / bin / ext: n payload bytes follow the header
    S_ARRAY,  //  n values follow
    S_MAP,    //  n key/value pairs follow
} s_class_t;

static uint64_t s_be(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

//  Decodes the header at r->off. On success *hdr is the header size and *n the
//  payload length (S_SCALAR, S_BYTES) or the item count (S_ARRAY, S_MAP).
static kvt_wire_rc_t s_head(kvt_wire_rd_t *r, s_class_t *cls, size_t *hdr, uint64_t *n)
{
    size_t left = kvt_wire_left(r);
    if (left == 0)
        return KVT_WIRE_TRUNCATED;
    const uint8_t *p = r->buf + r->off;
    uint8_t b = p[0];
    size_t lenbytes = 0; //  bytes of big-endian length/count after the first byte
    size_t extra = 0;    //  other header bytes (the ext type byte)
    *hdr = 1;
    *n = 0;
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
        *cls = S_SCALAR;
        return KVT_WIRE_OK;
    }
    if (b <= 0x8f) {
        *cls = S_MAP;
        *n = b & 0x0f;
    } else if (b <= 0x9f) {
        *cls = S_ARRAY;
        *n = b & 0x0f;
    } else if (b <= 0xbf) {
        *cls = S_BYTES;
        *n = b & 0x1f;
    } else {
        switch (b) {
        case 0xc1:
            return KVT_WIRE_BAD_BYTE;
        case 0xc4:
        case 0xc5:
        case 0xc6: //  bin 8/16/32
            *cls = S_BYTES;
            lenbytes = (size_t)1 << (b - 0xc4);
            break;
        case 0xc7:
        case 0xc8:
        case 0xc9: //  ext 8/16/32
            *cls = S_BYTES;
            lenbytes = (size_t)1 << (b - 0xc7);
            extra = 1;
            break;
        case 0xca: //  float32
            *cls = S_SCALAR;
            *n = 4;
            break;
        case 0xcb: //  float64
            *cls = S_SCALAR;
            *n = 8;
            break;
        case 0xcc:
        case 0xcd:
        case 0xce:
        case 0xcf: //  uint 8/16/32/64
            *cls = S_SCALAR;
            *n = (uint64_t)1 << (b - 0xcc);
            break;
        case 0xd0:
        case 0xd1:
        case 0xd2:
        case 0xd3: //  int 8/16/32/64
            *cls = S_SCALAR;
            *n = (uint64_t)1 << (b - 0xd0);
            break;
        case 0xd4:
        case 0xd5:
        case 0xd6:
        case 0xd7:
        case 0xd8: //  fixext 1..16
            *cls = S_SCALAR;
            *n = (uint64_t)1 << (b - 0xd4);
            extra = 1;
            break;
        case 0xd9:
        case 0xda:
        case 0xdb: //  str 8/16/32
            *cls = S_BYTES;
            lenbytes = (size_t)1 << (b - 0xd9);
            break;
        case 0xdc:
        case 0xdd: //  array 16/32
            *cls = S_ARRAY;
            lenbytes = (size_t)2 << (b - 0xdc);
            break;
        default: //  0xde, 0xdf: map 16/32
            assert(b == 0xde || b == 0xdf);
            *cls = S_MAP;
            lenbytes = (size_t)2 << (b - 0xde);
            break;
        }
    }
    *hdr = 1 + lenbytes + extra;
    if (left < *hdr)
        return KVT_WIRE_TRUNCATED;
    if (lenbytes)
        *n = s_be(p + 1, lenbytes);
    left -= *hdr;
    //  An array item takes at least one byte, a map entry at least two.
    uint64_t need = *cls == S_MAP ? 2 * *n : *n;
    if (need > left) {
        if (*cls == S_SCALAR)
            return KVT_WIRE_TRUNCATED;
        r->claim = *n;
        return KVT_WIRE_TOO_BIG;
    }
    return KVT_WIRE_OK;
}

void kvt_wire_rd_init(kvt_wire_rd_t *r, const uint8_t *buf, size_t len)
{
    assert(r);
    assert(buf || len == 0);
    r->buf = buf;
    r->len = len;
    r->off = 0;
    r->claim = 0;
}

size_t kvt_wire_left(const kvt_wire_rd_t *r)
{
    return r->len - r->off;
}

kvt_wire_type_t kvt_wire_peek(const kvt_wire_rd_t *r)
{
    if (kvt_wire_left(r) == 0)
        return KVT_WT_END;
    uint8_t b = r->buf[r->off];
    if (b <= 0x7f || (b >= 0xcc && b <= 0xcf))
        return KVT_WT_UINT;
    if (b >= 0xe0 || (b >= 0xd0 && b <= 0xd3))
        return KVT_WT_INT;
    if (b <= 0x8f || b == 0xde || b == 0xdf)
        return KVT_WT_MAP;
    if (b <= 0x9f || b == 0xdc || b == 0xdd)
        return KVT_WT_ARRAY;
    if (b <= 0xbf || (b >= 0xd9 && b <= 0xdb))
        return KVT_WT_STR;
    if (b >= 0xc4 && b <= 0xc6)
        return KVT_WT_BIN;
    if ((b >= 0xc7 && b <= 0xc9) || (b >= 0xd4 && b <= 0xd8))
        return KVT_WT_EXT;
    if (b == 0xca || b == 0xcb)
        return KVT_WT_FLOAT;
    if (b == 0xc0)
        return KVT_WT_NIL;
    if (b == 0xc2 || b == 0xc3)
        return KVT_WT_BOOL;
    return KVT_WT_BAD;
}

const char *kvt_wire_type_name(kvt_wire_type_t type)
{
    switch (type) {
    case KVT_WT_END:
        return "end of frame";
    case KVT_WT_NIL:
        return "nil";
    case KVT_WT_BOOL:
        return "bool";
    case KVT_WT_UINT:
        return "uint";
    case KVT_WT_INT:
        return "int";
    case KVT_WT_FLOAT:
        return "float";
    case KVT_WT_STR:
        return "str";
    case KVT_WT_BIN:
        return "bin";
    case KVT_WT_ARRAY:
        return "array";
    case KVT_WT_MAP:
        return "map";
    case KVT_WT_EXT:
        return "ext";
    case KVT_WT_BAD:
        return "reserved byte 0xc1";
    }
    return "?";
}

//  Reads the first byte and the big-endian payload directly (no s_head): map
//  keys and most fields are integers, so this is the reader's hot path.
kvt_wire_rc_t kvt_wire_read_uint(kvt_wire_rd_t *r, uint64_t *value)
{
    size_t left = kvt_wire_left(r);
    if (left == 0)
        return KVT_WIRE_TRUNCATED;
    const uint8_t *p = r->buf + r->off;
    uint8_t b = p[0];
    if (b <= 0x7f) {
        *value = b;
        r->off++;
        return KVT_WIRE_OK;
    }
    if (b >= 0xe0)
        return KVT_WIRE_NEGATIVE;
    size_t n;
    bool is_signed;
    if (b >= 0xcc && b <= 0xcf) {
        n = (size_t)1 << (b - 0xcc);
        is_signed = false;
    } else if (b >= 0xd0 && b <= 0xd3) {
        n = (size_t)1 << (b - 0xd0);
        is_signed = true;
    } else
        return KVT_WIRE_TYPE;
    if (left - 1 < n)
        return KVT_WIRE_TRUNCATED;
    uint64_t v = s_be(p + 1, n);
    //  Signed formats: a non-negative value is accepted, as msgpack-c does.
    if (is_signed && (v >> (8 * n - 1)) != 0)
        return KVT_WIRE_NEGATIVE;
    r->off += 1 + n;
    *value = v;
    return KVT_WIRE_OK;
}

kvt_wire_rc_t kvt_wire_read_bool(kvt_wire_rd_t *r, bool *value)
{
    kvt_wire_type_t type = kvt_wire_peek(r);
    if (type == KVT_WT_END)
        return KVT_WIRE_TRUNCATED;
    if (type != KVT_WT_BOOL)
        return KVT_WIRE_TYPE;
    *value = r->buf[r->off] == 0xc3;
    r->off++;
    return KVT_WIRE_OK;
}

static kvt_wire_rc_t s_read_bytes(kvt_wire_rd_t *r, kvt_wire_type_t want, const uint8_t **data,
                                  uint32_t *size)
{
    kvt_wire_type_t type = kvt_wire_peek(r);
    if (type == KVT_WT_END)
        return KVT_WIRE_TRUNCATED;
    if (type != want)
        return KVT_WIRE_TYPE;
    s_class_t cls;
    size_t hdr;
    uint64_t n;
    kvt_wire_rc_t rc = s_head(r, &cls, &hdr, &n);
    if (rc != KVT_WIRE_OK)
        return rc;
    assert(cls == S_BYTES && n <= UINT32_MAX);
    *data = r->buf + r->off + hdr;
    *size = (uint32_t)n;
    r->off += hdr + (size_t)n;
    return KVT_WIRE_OK;
}

kvt_wire_rc_t kvt_wire_read_str(kvt_wire_rd_t *r, const uint8_t **data, uint32_t *size)
{
    return s_read_bytes(r, KVT_WT_STR, data, size);
}

kvt_wire_rc_t kvt_wire_read_bin(kvt_wire_rd_t *r, const uint8_t **data, uint32_t *size)
{
    return s_read_bytes(r, KVT_WT_BIN, data, size);
}

static kvt_wire_rc_t s_read_head(kvt_wire_rd_t *r, kvt_wire_type_t want, uint32_t *count)
{
    //  fixmap / fixarray, the common case, checked as s_head would.
    size_t left = kvt_wire_left(r);
    uint8_t fix = want == KVT_WT_MAP ? 0x80 : 0x90;
    if (left > 0 && (r->buf[r->off] & 0xf0) == fix) {
        uint32_t n = r->buf[r->off] & 0x0f;
        if ((uint64_t)(want == KVT_WT_MAP ? 2 * n : n) > left - 1) {
            r->claim = n;
            return KVT_WIRE_TOO_BIG;
        }
        *count = n;
        r->off++;
        return KVT_WIRE_OK;
    }
    kvt_wire_type_t type = kvt_wire_peek(r);
    if (type == KVT_WT_END)
        return KVT_WIRE_TRUNCATED;
    if (type != want)
        return KVT_WIRE_TYPE;
    s_class_t cls;
    size_t hdr;
    uint64_t n;
    kvt_wire_rc_t rc = s_head(r, &cls, &hdr, &n);
    if (rc != KVT_WIRE_OK)
        return rc;
    assert(n <= UINT32_MAX);
    *count = (uint32_t)n;
    r->off += hdr;
    return KVT_WIRE_OK;
}

kvt_wire_rc_t kvt_wire_read_array(kvt_wire_rd_t *r, uint32_t *count)
{
    return s_read_head(r, KVT_WT_ARRAY, count);
}

kvt_wire_rc_t kvt_wire_read_map(kvt_wire_rd_t *r, uint32_t *count)
{
    return s_read_head(r, KVT_WT_MAP, count);
}

static kvt_wire_rc_t s_skip(kvt_wire_rd_t *r, int max_depth)
{
    s_class_t cls;
    size_t hdr;
    uint64_t n;
    kvt_wire_rc_t rc = s_head(r, &cls, &hdr, &n);
    if (rc != KVT_WIRE_OK)
        return rc;
    if (cls == S_SCALAR || cls == S_BYTES) {
        r->off += hdr + (size_t)n;
        return KVT_WIRE_OK;
    }
    if (max_depth <= 0)
        return KVT_WIRE_TOO_DEEP;
    r->off += hdr;
    //  s_head bounded n by the bytes left, and every item consumes at least
    //  one byte, so this loop is linear in the frame size.
    uint64_t items = cls == S_MAP ? 2 * n : n;
    for (uint64_t i = 0; i < items; i++) {
        rc = s_skip(r, max_depth - 1);
        if (rc != KVT_WIRE_OK)
            return rc;
    }
    return KVT_WIRE_OK;
}

kvt_wire_rc_t kvt_wire_skip(kvt_wire_rd_t *r, int max_depth)
{
    size_t start = r->off;
    kvt_wire_rc_t rc = s_skip(r, max_depth);
    if (rc != KVT_WIRE_OK)
        r->off = start;
    return rc;
}
