/*  kvt_trace_reader — reads a Mooncake jsonl trace strictly, one request
    per line, under a line-length bound.

    A line is the bytes up to an LF (or the end of the file: a last line
    without a newline is read like any other). Each line is parsed by
    jansson as one JSON text (RFC 8259: UTF-8, no leading zeros, no `12.`,
    duplicate keys refused, nothing after the object but whitespace); a CR
    before the LF is JSON whitespace, so CRLF files read the same as LF
    files. A line holding only whitespace (space, tab, CR) is skipped. The
    object's fields:

    * `timestamp`: arrival in ms, an integer in 0 .. KVT_WL_MAX_TIMESTAMP_MS;
    * `input_length`: prompt tokens, an integer in 1 .. KVT_TRACE_MAX_TOKENS;
    * `output_length`: an integer in 0 .. KVT_TRACE_MAX_TOKENS (0 is a
      prefill-only request, replayed as one output token);
    * `hash_ids`: an array of exactly ceil (input_length / 512) integers in
      0 .. UINT32_MAX (at most KVT_WL_MAX_IDS).

    "Integer" means a JSON number written without a fraction or exponent:
    `12.0`, `1e3` and `1.00000000000000000001` are refused, `-0` is 0.
    Unknown keys are ignored, but their values must be valid JSON too (a
    number beyond the 64-bit range anywhere in the line is refused: jansson
    cannot hold it). A NUL byte anywhere in a line is refused.

    A line longer than the bound (its bytes without the LF) is an error
    naming the line and the bound; the reader never holds more than
    bound + 1 bytes of a line, so /dev/zero or a file without newlines fails
    after reading bound + 1 bytes.

    Every error names the file, the line and, for a field, the field and the
    value: "PATH:LINE: field 'x': VALUE is what". */
#ifndef KVT_TRACE_READER_H_INCLUDED
#define KVT_TRACE_READER_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

#include "replay/kvt_workload.h"

#define KVT_TRACE_MAX_LINE   (1u << 20) //  default line bound: bytes per line, without its LF
#define KVT_TRACE_MAX_TOKENS (1u << 20) //  largest input_length / output_length

typedef struct _kvt_trace_reader_t kvt_trace_reader_t;

//  Opens PATH for reading; max_line is the line bound in bytes (0 means
//  KVT_TRACE_MAX_LINE). NULL on error, with the reason in err.
kvt_trace_reader_t *kvt_trace_reader_new(const char *path, size_t max_line, char *err,
                                         size_t errlen);

void kvt_trace_reader_destroy(kvt_trace_reader_t **self_p);

//  Reads the next request into req (req->ids is then the caller's to free).
//  Returns 1 for a request, 0 at the end of the file, -1 on an error (err
//  names the file and line; the reader stays at the error, later calls
//  return -1 again).
int kvt_trace_reader_next(kvt_trace_reader_t *self, kvt_wreq_t *req, char *err, size_t errlen);

//  Number of the line read last (1-based; 0 before the first).
uint64_t kvt_trace_reader_line(const kvt_trace_reader_t *self);

//  Parses one line (len bytes, no LF) into req. Returns 1 for a request, 0
//  for a blank line, -1 on an error ("field 'x': what" or the JSON syntax
//  error, without file or line) in err.
int kvt_trace_parse_line(const char *line, size_t len, kvt_wreq_t *req, char *err, size_t errlen);

#endif
