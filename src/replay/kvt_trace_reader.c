/*  kvt_trace_reader — see kvt_trace_reader.h. */
#include "kvt_trace_reader.h"

#include <assert.h>
#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_FIRST_BUF   (64u << 10) //  first buffer size; it doubles up to the bound + 1
#define S_VALUE_CHARS 48          //  a value quoted in an error, at most

struct _kvt_trace_reader_t {
    FILE *file;      //  the trace
    char *path;      //  its path, for messages
    char *buf;       //  read-ahead: buf[pos .. len) is not consumed yet
    size_t cap;      //  allocated bytes of buf, at most max_line + 1
    size_t pos;      //  start of the next line in buf
    size_t len;      //  bytes held in buf
    size_t max_line; //  line bound: bytes of a line without its LF
    uint64_t line;   //  number of the line read last
    bool eof;        //  the file has no more bytes
    char error[512]; //  the error returned, returned again by later calls; "" while none
};

// ------------------------------------------------------ one line, JSON ----

//  Writes a short JSON rendering of v (an over-long one is cut, with "...").
static void s_value_text(const json_t *v, char *buf, size_t size)
{
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!s) {
        snprintf(buf, size, "(a value)");
        return;
    }
    if (strlen(s) > S_VALUE_CHARS)
        snprintf(buf, size, "%.*s...", S_VALUE_CHARS, s);
    else
        snprintf(buf, size, "%s", s);
    free(s);
}

static const char *s_kind(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_REAL:
        return "a real number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
        return "null";
    default:
        return "an integer";
    }
}

//  Reads an integer field in min .. max. The JSON value must be an integer
//  token (no fraction, no exponent): a real is refused even when integral.
static bool s_uint(const json_t *v, const char *field, uint64_t min, uint64_t max, uint64_t *out,
                   char *err, size_t errlen)
{
    char text[S_VALUE_CHARS + 8];
    if (!json_is_integer(v)) {
        s_value_text(v, text, sizeof text);
        snprintf(err, errlen, "field '%s': %s is not an integer (%s)", field, text, s_kind(v));
        return false;
    }
    json_int_t x = json_integer_value(v);
    if (x < 0) {
        snprintf(err, errlen, "field '%s': %" JSON_INTEGER_FORMAT " is negative", field, x);
        return false;
    }
    if ((uint64_t)x < min || (uint64_t)x > max) {
        snprintf(err, errlen, "field '%s': %" JSON_INTEGER_FORMAT " is out of range (%llu .. %llu)",
                 field, x, (unsigned long long)min, (unsigned long long)max);
        return false;
    }
    *out = (uint64_t)x;
    return true;
}

//  A number beyond the 64-bit range stops jansson's parse ("too big
//  integer") just after its token. To name the field, the line is parsed
//  again with integers read as reals, and the known fields are searched for
//  a value outside the 64-bit range.
static void s_overflow(const char *line, size_t len, const json_error_t *je, char *err,
                       size_t errlen)
{
    size_t end = je->position > 0 && (size_t)je->position <= len ? (size_t)je->position : 0;
    size_t start = end;
    while (start > 0 &&
           (line[start - 1] == '-' || (line[start - 1] >= '0' && line[start - 1] <= '9')))
        start--;
    size_t n = end - start;
    char token[S_VALUE_CHARS + 8];
    snprintf(token, sizeof token, "%.*s%s", (int)(n > S_VALUE_CHARS ? S_VALUE_CHARS : n),
             line + start, n > S_VALUE_CHARS ? "..." : "");
    char field[48] = "";
    json_error_t je2;
    json_t *root = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, &je2);
    if (root && json_is_object(root)) {
        static const char *const names[] = {"timestamp", "input_length", "output_length"};
        for (size_t i = 0; i < 3 && !field[0]; i++) {
            const json_t *v = json_object_get(root, names[i]);
            double d = v ? json_number_value(v) : 0;
            if (d >= 0x1p63 || d < -0x1p63)
                snprintf(field, sizeof field, "%s", names[i]);
        }
        const json_t *ids = json_object_get(root, "hash_ids");
        for (size_t i = 0; json_is_array(ids) && i < json_array_size(ids) && !field[0]; i++) {
            double d = json_number_value(json_array_get(ids, i));
            if (d >= 0x1p63 || d < -0x1p63)
                snprintf(field, sizeof field, "hash_ids[%zu]", i);
        }
    }
    json_decref(root);
    if (field[0])
        snprintf(err, errlen, "field '%s': %s is %s", field, token,
                 token[0] == '-' ? "negative" : "out of range");
    else
        snprintf(err, errlen,
                 "column %d: %s is beyond the 64-bit integer range (refused even under an "
                 "ignored key)",
                 je->column, token);
}

static bool s_blank(const char *line, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (line[i] != ' ' && line[i] != '\t' && line[i] != '\r')
            return false;
    return true;
}

int kvt_trace_parse_line(const char *line, size_t len, kvt_wreq_t *req, char *err, size_t errlen)
{
    if (s_blank(line, len))
        return 0;
    const char *nul = memchr(line, 0, len);
    if (nul) {
        snprintf(err, errlen, "column %zu: NUL byte in the line", (size_t)(nul - line) + 1);
        return -1;
    }
    int rc = -1;
    uint32_t *ids = NULL;
    json_error_t je;
    json_t *root = json_loadb(line, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        if (json_error_code(&je) == json_error_numeric_overflow && !strncmp(je.text, "too big", 7))
            s_overflow(line, len, &je, err, errlen);
        else
            snprintf(err, errlen, "column %d: %s", je.column, je.text);
        goto cleanup;
    }
    if (!json_is_object(root)) {
        snprintf(err, errlen, "expected an object, not %s", s_kind(root));
        goto cleanup;
    }
    static const char *const names[] = {"timestamp", "input_length", "output_length", "hash_ids"};
    const json_t *vals[4];
    for (int i = 0; i < 4; i++) {
        vals[i] = json_object_get(root, names[i]);
        if (!vals[i]) {
            snprintf(err, errlen, "field '%s': missing", names[i]);
            goto cleanup;
        }
    }
    uint64_t ts, in, out;
    if (!s_uint(vals[0], "timestamp", 0, KVT_WL_MAX_TIMESTAMP_MS, &ts, err, errlen) ||
        !s_uint(vals[1], "input_length", 1, KVT_TRACE_MAX_TOKENS, &in, err, errlen) ||
        !s_uint(vals[2], "output_length", 0, KVT_TRACE_MAX_TOKENS, &out, err, errlen))
        goto cleanup;
    const json_t *arr = vals[3];
    if (!json_is_array(arr)) {
        char text[S_VALUE_CHARS + 8];
        s_value_text(arr, text, sizeof text);
        snprintf(err, errlen, "field 'hash_ids': %s is not an array (%s)", text, s_kind(arr));
        goto cleanup;
    }
    size_t nids = json_array_size(arr);
    if (nids > KVT_WL_MAX_IDS) {
        snprintf(err, errlen, "field 'hash_ids': %zu ids, more than %u (1 Mi tokens)", nids,
                 KVT_WL_MAX_IDS);
        goto cleanup;
    }
    uint64_t want = (in + KVT_WL_BLOCK_TOKENS - 1) / KVT_WL_BLOCK_TOKENS;
    if (nids != want) {
        snprintf(err, errlen,
                 "field 'hash_ids': %zu ids, but input_length %llu needs ceil(%llu / %u) = %llu",
                 nids, (unsigned long long)in, (unsigned long long)in, KVT_WL_BLOCK_TOKENS,
                 (unsigned long long)want);
        goto cleanup;
    }
    ids = malloc(nids * sizeof *ids);
    if (!ids) {
        snprintf(err, errlen, "out of memory");
        goto cleanup;
    }
    for (size_t i = 0; i < nids; i++) {
        char field[32];
        snprintf(field, sizeof field, "hash_ids[%zu]", i);
        uint64_t id;
        if (!s_uint(json_array_get(arr, i), field, 0, UINT32_MAX, &id, err, errlen))
            goto cleanup;
        ids[i] = (uint32_t)id;
    }
    req->arrival_us = ts * 1000;
    req->input_len = (uint32_t)in;
    req->output_len = out ? (uint32_t)out : 1;
    req->ids = ids;
    req->nids = (uint32_t)nids;
    ids = NULL;
    rc = 1;
cleanup:
    free(ids);
    json_decref(root);
    return rc;
}

// ------------------------------------------------------- bounded lines ----

kvt_trace_reader_t *kvt_trace_reader_new(const char *path, size_t max_line, char *err,
                                         size_t errlen)
{
    kvt_trace_reader_t *self = calloc(1, sizeof *self);
    if (!self) {
        snprintf(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    self->max_line = max_line ? max_line : KVT_TRACE_MAX_LINE;
    self->cap = self->max_line + 1 < S_FIRST_BUF ? self->max_line + 1 : S_FIRST_BUF;
    self->path = strdup(path);
    self->buf = malloc(self->cap);
    if (!self->path || !self->buf) {
        snprintf(err, errlen, "%s: out of memory", path);
        kvt_trace_reader_destroy(&self);
        return NULL;
    }
    self->file = fopen(path, "r");
    if (!self->file) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        kvt_trace_reader_destroy(&self);
        return NULL;
    }
    return self;
}

void kvt_trace_reader_destroy(kvt_trace_reader_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kvt_trace_reader_t *self = *self_p;
    if (self->file)
        fclose(self->file);
    free(self->path);
    free(self->buf);
    free(self);
    *self_p = NULL;
}

uint64_t kvt_trace_reader_line(const kvt_trace_reader_t *self)
{
    return self->line;
}

//  Finds the next line (without its LF) in the read-ahead, reading more as
//  needed but never more than max_line + 1 bytes of one line. Returns 1 for
//  a line, 0 at the end of the file, -1 on an error (in self->error).
static int s_next_line(kvt_trace_reader_t *self, const char **line, size_t *len)
{
    size_t scanned = 0; //  bytes of this line searched for the LF already
    while (true) {
        char *start = self->buf + self->pos;
        size_t have = self->len - self->pos;
        char *lf = memchr(start + scanned, '\n', have - scanned);
        if (lf) {
            *line = start;
            *len = (size_t)(lf - start);
            self->pos += *len + 1;
            self->line++;
            return 1;
        }
        scanned = have;
        if (have > self->max_line) {
            snprintf(self->error, sizeof self->error,
                     "%s:%llu: line longer than %zu bytes (the trace line bound); reading stopped",
                     self->path, (unsigned long long)self->line + 1, self->max_line);
            return -1;
        }
        if (self->eof) {
            if (have == 0)
                return 0;
            *line = start;
            *len = have;
            self->pos = self->len;
            self->line++;
            return 1;
        }
        if (self->pos > 0) {
            memmove(self->buf, start, have);
            self->pos = 0;
            self->len = have;
        }
        if (self->len == self->cap) {
            size_t cap = self->cap * 2 < self->max_line + 1 ? self->cap * 2 : self->max_line + 1;
            char *p = realloc(self->buf, cap);
            if (!p) {
                snprintf(self->error, sizeof self->error, "%s:%llu: out of memory", self->path,
                         (unsigned long long)self->line + 1);
                return -1;
            }
            self->buf = p;
            self->cap = cap;
        }
        assert(self->len < self->cap);
        size_t n = fread(self->buf + self->len, 1, self->cap - self->len, self->file);
        self->len += n;
        if (n == 0) {
            if (ferror(self->file)) {
                snprintf(self->error, sizeof self->error, "%s:%llu: read error: %s", self->path,
                         (unsigned long long)self->line + 1, strerror(errno));
                return -1;
            }
            self->eof = true;
        }
    }
}

int kvt_trace_reader_next(kvt_trace_reader_t *self, kvt_wreq_t *req, char *err, size_t errlen)
{
    while (!self->error[0]) {
        const char *line;
        size_t len;
        int rc = s_next_line(self, &line, &len);
        if (rc == 0)
            return 0;
        if (rc < 0)
            break;
        char what[400];
        rc = kvt_trace_parse_line(line, len, req, what, sizeof what);
        if (rc > 0)
            return 1;
        if (rc < 0)
            snprintf(self->error, sizeof self->error, "%s:%llu: %s", self->path,
                     (unsigned long long)self->line, what);
    }
    snprintf(err, errlen, "%s", self->error);
    return -1;
}
