/*  fuzz_trace.c — libFuzzer target for the trace reader
    (src/replay/kvt_trace_reader.c): one Mooncake jsonl line, then the input
    as a whole file.

    Properties checked on every input:
    * kvt_trace_parse_line on the whole input: -1 names what is wrong, 0
      only for a line of spaces, tabs and CRs, 1 only with every field in
      its range (timestamp, 1 ≤ input_length, 1 ≤ output_length, one hash id
      per started 512-token block) and never for a line holding a NUL;
    * the reader on the input as a file (line bound 512 bytes) returns what
      parse_line returns line by line: the same requests in order, blank
      lines skipped, and its first error at the first bad or over-long line
      (kvt_trace_reader_line: that line, or the one before an over-long
      line, which is never read), repeated by every later call.

    Build: cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DKVTIER_FUZZ=ON
           cmake --build build-fuzz --target fuzz_trace
    Run:   ./build-fuzz/fuzz_trace -max_len=4096 -dict=tests/fuzz/trace.dict corpus-tmp \
               tests/corpus/trace
*/
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz/kvt_fuzz.h"
#include "replay/kvt_trace_reader.h"

#define S_BOUND 512 //  the reader's line bound here

static bool s_trace_blank(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r')
            return false;
    return true;
}

static void s_trace_check_line(const uint8_t *data, size_t size)
{
    //  An exact-size copy: a read past the line is an ASan report.
    char *line = malloc(size ? size : 1);
    if (!line)
        return;
    if (size)
        memcpy(line, data, size);
    kvt_wreq_t req = {0};
    char err[512] = "";
    int rc = kvt_trace_parse_line(line, size, &req, err, sizeof err);
    if (rc == -1) {
        if (!err[0] || !memchr(err, 0, sizeof err))
            KVT_FUZZ_DIE("trace: a refused line without a reason");
    } else if (rc == 0) {
        if (!s_trace_blank(data, size))
            KVT_FUZZ_DIE("trace: a line with content read as blank");
    } else if (rc == 1) {
        if (memchr(data, 0, size))
            KVT_FUZZ_DIE("trace: a line with a NUL accepted");
        if (req.input_len < 1 || req.input_len > KVT_TRACE_MAX_TOKENS || req.output_len < 1 ||
            req.output_len > KVT_TRACE_MAX_TOKENS ||
            req.arrival_us > KVT_WL_MAX_TIMESTAMP_MS * 1000)
            KVT_FUZZ_DIE("trace: accepted a field out of range (in %u out %u at %llu us)",
                         req.input_len, req.output_len, (unsigned long long)req.arrival_us);
        if (req.nids != (req.input_len + KVT_WL_BLOCK_TOKENS - 1) / KVT_WL_BLOCK_TOKENS || !req.ids)
            KVT_FUZZ_DIE("trace: %u ids for input_length %u", req.nids, req.input_len);
    } else {
        KVT_FUZZ_DIE("trace: parse_line returned %d", rc);
    }
    free(req.ids);
    free(line);
}

static bool s_trace_same(const kvt_wreq_t *a, const kvt_wreq_t *b)
{
    return a->arrival_us == b->arrival_us && a->input_len == b->input_len &&
           a->output_len == b->output_len && a->nids == b->nids &&
           (a->nids == 0 || memcmp(a->ids, b->ids, a->nids * sizeof *a->ids) == 0);
}

static void s_trace_check_file(const uint8_t *data, size_t size)
{
    static char path[64];
    if (!path[0])
        snprintf(path, sizeof path, "/tmp/kvt_fuzz_trace_%d.jsonl", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f)
        return;
    bool ok = fwrite(data, 1, size, f) == size;
    fclose(f);
    if (!ok)
        return;
    char err[512] = "";
    kvt_trace_reader_t *rd = kvt_trace_reader_new(path, S_BOUND, err, sizeof err);
    if (!rd)
        KVT_FUZZ_DIE("trace: reader_new failed on a readable file: %s", err);
    size_t pos = 0;
    uint64_t lineno = 0;
    for (;;) {
        //  What the reader should return next: the next non-blank line.
        int want = 0;
        bool too_long = false; //  the reader never reads such a line: line () stays before it
        kvt_wreq_t exp = {0};
        char eerr[512] = "";
        while (pos < size) {
            const uint8_t *lf = memchr(data + pos, '\n', size - pos);
            size_t len = lf ? (size_t)(lf - (data + pos)) : size - pos;
            lineno++;
            if (len > S_BOUND) {
                want = -1;
                too_long = true;
                break;
            }
            want = kvt_trace_parse_line((const char *)data + pos, len, &exp, eerr, sizeof eerr);
            pos += len + (lf ? 1 : 0);
            if (want != 0)
                break;
        }
        kvt_wreq_t got = {0};
        int rc = kvt_trace_reader_next(rd, &got, err, sizeof err);
        if (rc != want)
            KVT_FUZZ_DIE("trace: reader returned %d at line %llu, parse_line %d (%s)", rc,
                         (unsigned long long)lineno, want, err);
        if (rc == 1 && !s_trace_same(&got, &exp))
            KVT_FUZZ_DIE("trace: reader and parse_line differ at line %llu",
                         (unsigned long long)lineno);
        free(got.ids);
        free(exp.ids);
        if (rc == -1) {
            if (!err[0] || kvt_trace_reader_line(rd) != lineno - (too_long ? 1 : 0))
                KVT_FUZZ_DIE("trace: error at line %llu, expected line %llu (%s)",
                             (unsigned long long)kvt_trace_reader_line(rd),
                             (unsigned long long)lineno, err);
            kvt_wreq_t again = {0};
            if (kvt_trace_reader_next(rd, &again, err, sizeof err) != -1)
                KVT_FUZZ_DIE("trace: the reader went on after an error");
        }
        if (rc != 1)
            break;
    }
    kvt_trace_reader_destroy(&rd);
    unlink(path);
}

int kvt_fuzz_trace(const uint8_t *data, size_t size)
{
    s_trace_check_line(data, size);
    s_trace_check_file(data, size);
    return 0;
}

KVT_FUZZ_ENTRY(kvt_fuzz_trace)
