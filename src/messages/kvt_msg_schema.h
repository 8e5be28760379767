/*  kvt_msg_schema.h — the message catalog as data.

    One table per body lists its fields: key number, name, wire type, where
    the value lives in the C struct, and its range. The decoder, the encoder,
    the checker (kvt_msg_check) and kvt_msg_clear all walk these tables, so
    what one side accepts the other produces, and docs/protocol.md describes
    exactly these tables. Rules that involve two fields (start < end, equal
    counts, …) are a per-body check function shared by encode and decode.
*/
#ifndef KVT_MSG_SCHEMA_H_INCLUDED
#define KVT_MSG_SCHEMA_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvtier/kvt_msg.h"

//  A body map has at most this many entries (known and unknown keys).
#define KVT_MSG_MAX_KEYS 64

//  Wire type of a field and how it maps to C.
typedef enum {
    KVT_F_U64,     //  uint → uint64_t, in [min, max]
    KVT_F_U32,     //  uint → uint32_t, in [min, max]
    KVT_F_U8,      //  uint → uint8_t, in [min, max]
    KVT_F_BOOL,    //  bool → bool
    KVT_F_HASH,    //  bin of exactly 16 bytes → kvt_hash_t
    KVT_F_STR,     //  str of ≤ max bytes, no NUL → char[max + 1]
    KVT_F_BYTES,   //  bin of [min, max] bytes → uint8_t * + uint32_t count
    KVT_F_U32S,    //  bin of 4 × n bytes (u32 LE), n in [min, max] → uint32_t * + count
    KVT_F_HASHES,  //  bin of 16 × n bytes, n in [min, max] → kvt_hash_t * + count
    KVT_F_U64S,    //  array of n uint, n in [min, max] → uint64_t * + count
    KVT_F_STRUCTS, //  array of n maps (sub schema), n in [min, max] → T * + count
    KVT_F_COUNTERS //  map of n str → uint, n in [min, max] → kvt_counter_t * + count
} kvt_ftype_t;

typedef struct kvt_schema kvt_schema_t;
typedef struct kvt_path kvt_path_t;

//  One field of a body.
typedef struct {
    uint8_t key;             //  map key on the wire (never reused)
    const char *name;        //  field name in errors and docs
    kvt_ftype_t type;        //  wire type and C representation
    bool optional;           //  may be absent (and is omitted when empty)
    size_t off;              //  offset of the value / array pointer in the body
    size_t count_off;        //  offset of the uint32_t count (array types)
    uint64_t min;            //  smallest value / count / length
    uint64_t max;            //  largest value / count / length
    const kvt_schema_t *sub; //  element schema (KVT_F_STRUCTS)
    int8_t same_count_as;    //  index of the field whose count must be equal, or -1
} kvt_field_t;

//  Cross-field rule of a body; returns 0 or kvt_path_fail ().
typedef int(kvt_check_fn)(const void *body, kvt_path_t *path);

struct kvt_schema {
    const char *name;          //  body name ("Entry")
    size_t size;               //  sizeof the body struct
    const kvt_field_t *fields; //  fields in key order
    uint32_t nfields;          //  length of fields
    kvt_check_fn *check;       //  cross-field rules, or NULL
};

//  Error sink with the path of the value being looked at ("entries[3].").
#define KVT_PATH_DEPTH 8 //  array levels a path remembers (the catalog nests 2)

//  The path to the field being decoded or checked, kept as a stack of
//  (array name, index) frames and formatted only when something fails: the
//  success path formats nothing, whatever the number of elements.
struct kvt_path {
    kvt_msg_err_t *err; //  where a failure is written (never NULL)
    struct {
        const char *name;     //  array field name (static string from the schema)
        uint32_t index;       //  element index
    } frames[KVT_PATH_DEPTH]; //  enclosing array elements, outermost first
    size_t len;               //  frames in use (deeper levels are not remembered)
    size_t depth;             //  levels entered (may exceed len)
};

//  Where a field lives in a body.
#define KVT_F_AT(base, off)   ((void *)((char *)(base) + (off)))
#define KVT_F_CAT(base, off)  ((const void *)((const char *)(base) + (off)))
#define KVT_F_PTR(base, f)    (*(void **)KVT_F_AT(base, (f)->off))
#define KVT_F_CPTR(base, f)   (*(void *const *)KVT_F_CAT(base, (f)->off))
#define KVT_F_COUNT(base, f)  (*(uint32_t *)KVT_F_AT(base, (f)->count_off))
#define KVT_F_CCOUNT(base, f) (*(const uint32_t *)KVT_F_CAT(base, (f)->count_off))

//  The field is a pointer + count that kvt_msg_clear frees.
static inline bool kvt_field_is_array(kvt_ftype_t type)
{
    return type == KVT_F_BYTES || type == KVT_F_U32S || type == KVT_F_HASHES ||
           type == KVT_F_U64S || type == KVT_F_STRUCTS || type == KVT_F_COUNTERS;
}

//  Schema of a message kind's body, or NULL for NONE / unknown kinds.
const kvt_schema_t *kvt_msg_schema(int kind);

//  Writes the path ("entries[3].blocks") and the formatted reason into
//  path->err and returns -1. Only the first failure is kept. `field` "" names
//  the innermost element itself.
int kvt_path_fail(kvt_path_t *path, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

//  Enters element `index` of array field `name` (no formatting: O(1)) and
//  returns the old depth for kvt_path_leave.
size_t kvt_path_enter(kvt_path_t *path, const char *name, uint32_t index);
void kvt_path_leave(kvt_path_t *path, size_t old_depth);

//  Checks a counter name (1..KVT_MSG_MAX_NAME bytes, no NUL) given by length.
bool kvt_msg_name_ok(const char *name, size_t size);

#endif
