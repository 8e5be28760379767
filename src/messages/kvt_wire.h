/*  kvt_wire.h — a checked, allocation-free msgpack reader over one frame,
    and the little-endian helpers for the bin-packed arrays.

    Why a reader of our own instead of msgpack_unpack_next: msgpack-c builds
    an object tree in a zone and pre-allocates `n × 24` bytes for an array
    header before reading a single element, so a 5-byte frame can demand
    gigabytes, and a legal 16 MiB frame of small elements costs ~24× its size.
    This reader never allocates: every array/map count is checked against the
    bytes left (an element takes at least one byte, a map entry two), every
    str/bin/ext length against the bytes left, and the nesting depth of a
    skipped value against a small bound, before anything is consumed. The
    decoder then allocates only the arrays it keeps, after checking their
    counts against the KVT_MSG_MAX_* limits, so what one decode allocates is
    bounded by a small multiple of the frame size. Bulk bin arrays are copied
    once, straight from the frame. The encoder (kvt_msg.c) writes frames
    itself, byte for byte as msgpack-c packs them.

    Read functions leave the reader where it was when they fail, so the caller
    can name what it found (kvt_wire_peek).
*/
#ifndef KVT_WIRE_H_INCLUDED
#define KVT_WIRE_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvtier/kvt_msg.h"

//  Deepest nesting of a skipped (unknown) value.
#define KVT_WIRE_MAX_DEPTH 16

typedef struct {
    const uint8_t *buf; //  the frame
    size_t len;         //  frame length
    size_t off;         //  next byte to read
    uint64_t claim;     //  the count or length a header claimed (set on KVT_WIRE_TOO_BIG)
} kvt_wire_rd_t;

typedef enum {
    KVT_WIRE_OK = 0,
    KVT_WIRE_TRUNCATED, //  the frame ends inside the value
    KVT_WIRE_TYPE,      //  the value has another msgpack type
    KVT_WIRE_NEGATIVE,  //  a negative integer where an unsigned one is expected
    KVT_WIRE_TOO_BIG,   //  a header claims more items or bytes than the frame has left
    KVT_WIRE_TOO_DEEP,  //  a skipped value nests deeper than KVT_WIRE_MAX_DEPTH
    KVT_WIRE_BAD_BYTE,  //  0xc1, which msgpack never uses
} kvt_wire_rc_t;

//  The msgpack type family of a value, by its first byte.
typedef enum {
    KVT_WT_END = 0, //  no byte left
    KVT_WT_NIL,     //  nil
    KVT_WT_BOOL,    //  true / false
    KVT_WT_UINT,    //  non-negative integer (any width, signed formats included)
    KVT_WT_INT,     //  integer in a signed format (sign unknown until read)
    KVT_WT_FLOAT,   //  float32 / float64
    KVT_WT_STR,     //  str
    KVT_WT_BIN,     //  bin
    KVT_WT_ARRAY,   //  array
    KVT_WT_MAP,     //  map
    KVT_WT_EXT,     //  ext / fixext
    KVT_WT_BAD,     //  0xc1
} kvt_wire_type_t;

//  Starts reading buf[0, len).
void kvt_wire_rd_init(kvt_wire_rd_t *r, const uint8_t *buf, size_t len);

//  Bytes not yet read.
size_t kvt_wire_left(const kvt_wire_rd_t *r);

//  Type of the next value, without consuming it.
kvt_wire_type_t kvt_wire_peek(const kvt_wire_rd_t *r);

//  "uint", "str", … for error messages.
const char *kvt_wire_type_name(kvt_wire_type_t type);

//  Reads an integer ≥ 0 in any integer format.
kvt_wire_rc_t kvt_wire_read_uint(kvt_wire_rd_t *r, uint64_t *value);

//  Reads true / false.
kvt_wire_rc_t kvt_wire_read_bool(kvt_wire_rd_t *r, bool *value);

//  Reads a str / bin header and returns its bytes in place (not NUL-terminated).
kvt_wire_rc_t kvt_wire_read_str(kvt_wire_rd_t *r, const uint8_t **data, uint32_t *size);
kvt_wire_rc_t kvt_wire_read_bin(kvt_wire_rd_t *r, const uint8_t **data, uint32_t *size);

//  Reads an array / map header; the count is ≤ the bytes left (map: ≤ half).
kvt_wire_rc_t kvt_wire_read_array(kvt_wire_rd_t *r, uint32_t *count);
kvt_wire_rc_t kvt_wire_read_map(kvt_wire_rd_t *r, uint32_t *count);

//  Skips one value of any type, nested at most max_depth levels.
kvt_wire_rc_t kvt_wire_skip(kvt_wire_rd_t *r, int max_depth);

//  Little-endian helpers for bin-packed arrays. A hash is 16 bytes: lo then
//  hi, each 8 bytes little-endian (the 128-bit value in little-endian).
static inline uint32_t kvt_wire_get_u32le(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t kvt_wire_get_u64le(const uint8_t *p)
{
    return (uint64_t)kvt_wire_get_u32le(p) | (uint64_t)kvt_wire_get_u32le(p + 4) << 32;
}

static inline void kvt_wire_put_u32le(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static inline void kvt_wire_put_u64le(uint8_t *p, uint64_t v)
{
    kvt_wire_put_u32le(p, (uint32_t)v);
    kvt_wire_put_u32le(p + 4, (uint32_t)(v >> 32));
}

static inline kvt_hash_t kvt_wire_get_hash(const uint8_t *p)
{
    kvt_hash_t h = {.hi = kvt_wire_get_u64le(p + 8), .lo = kvt_wire_get_u64le(p)};
    return h;
}

static inline void kvt_wire_put_hash(uint8_t *p, kvt_hash_t h)
{
    kvt_wire_put_u64le(p, h.lo);
    kvt_wire_put_u64le(p + 8, h.hi);
}

#endif
