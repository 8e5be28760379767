/*  The Mooncake trace reader: strict JSON per line (jansson), integers that
    are JSON integers in range, errors naming line / field / value, and the
    line bound that keeps /dev/zero from eating memory. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "replay/kvt_trace_reader.h"
#include "replay/kvt_workload.h"

//  The real trace next to the checkout (not copied into the repository).
#define S_REAL_TRACE KVT_SOURCE_DIR "/../shared/traces/conversation_trace.jsonl"

//  A trace line from the JSON text of its four fields.
#define S_LINE(ts, in, out, ids)                                                \
    "{\"timestamp\": " ts ", \"input_length\": " in ", \"output_length\": " out \
    ", \"hash_ids\": " ids "}\n"
#define S_GOOD S_LINE("0", "1", "1", "[0]")

static char s_path[256];

static const char *s_write_n(const char *text, size_t len)
{
    snprintf(s_path, sizeof s_path, "/tmp/kvt-tr-%d.jsonl", (int)getpid());
    FILE *f = fopen(s_path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(text, 1, len, f), len);
    cr_assert_eq(fclose(f), 0);
    return s_path;
}

static const char *s_write(const char *text)
{
    return s_write_n(text, strlen(text));
}

//  Loads text as a trace; it must be refused with an error containing
//  needle.
static void s_refused(const char *text, const char *needle)
{
    char err[1024] = "";
    kvt_workload_t *wl = kvt_workload_mooncake(s_write(text), 0, err, sizeof err);
    unlink(s_path);
    cr_assert_null(wl, "accepted: %s", text);
    cr_assert(strstr(err, needle) != NULL, "error '%s' lacks '%s' (line: %s)", err, needle, text);
}

//  Loads text as a trace; it must be accepted. The caller destroys it.
static kvt_workload_t *s_accepted(const char *text)
{
    char err[1024] = "";
    kvt_workload_t *wl = kvt_workload_mooncake(s_write(text), 0, err, sizeof err);
    unlink(s_path);
    cr_assert_not_null(wl, "refused: %s: %s", text, err);
    return wl;
}

static uint64_t s_fnv(uint64_t h, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++) {
        h ^= (v >> (8 * i)) & 0xff;
        h *= 0x100000001b3ull;
    }
    return h;
}

//  FNV-1a over every parsed field, in replay order.
static uint64_t s_digest(const kvt_workload_t *wl)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint32_t i = 0; i < wl->n; i++) {
        const kvt_wreq_t *r = &wl->reqs[i];
        h = s_fnv(h, r->arrival_us, 8);
        h = s_fnv(h, r->input_len, 4);
        h = s_fnv(h, r->output_len, 4);
        h = s_fnv(h, r->nids, 4);
        for (uint32_t k = 0; k < r->nids; k++)
            h = s_fnv(h, r->ids[k], 4);
    }
    return h;
}

Test(trace_reader, real_trace_reads_as_the_hand_written_parser_did)
{
    if (access(S_REAL_TRACE, R_OK) != 0)
        cr_skip_test("%s is not there", S_REAL_TRACE);
    char err[1024];
    kvt_workload_t *wl = kvt_workload_mooncake(S_REAL_TRACE, 0, err, sizeof err);
    cr_assert_not_null(wl, "%s", err);
    //  Computed once with the hand-written parser this reader replaced.
    cr_assert_eq(wl->n, 12031);
    cr_assert_eq(wl->input_tokens, 144793823ull);
    cr_assert_eq(s_digest(wl), 0x7b94c8f896bf45d2ull, "digest %016llx",
                 (unsigned long long)s_digest(wl));
    kvt_workload_destroy(&wl);
}

Test(trace_reader, integers_written_as_reals_are_refused)
{
    s_refused(S_LINE("0", "12.0", "1", "[0]"),
              ":1: field 'input_length': 12.0 is not an integer (a real number)");
    s_refused(S_LINE("1e3", "1", "1", "[0]"),
              "field 'timestamp': 1000.0 is not an integer (a real number)");
    s_refused(S_LINE("0", "1.00000000000000000001", "1", "[0]"),
              "field 'input_length': 1.0 is not an integer");
    s_refused(S_LINE("0", "1", "2E1", "[0]"), "field 'output_length': 20.0 is not an integer");
    s_refused(S_LINE("0", "1", "1", "[0.99999999999999999999]"),
              "field 'hash_ids[0]': 1.0 is not an integer (a real number)");
    s_refused(S_LINE("0", "600", "1", "[0, 1.5]"), "field 'hash_ids[1]': 1.5 is not an integer");
    s_refused(S_LINE("-0.0", "1", "1", "[0]"), "field 'timestamp': -0.0 is not an integer");
}

Test(trace_reader, numbers_json_does_not_define_are_refused)
{
    const char *bad[] = {"007", "12.", "+1", ".5", "0x10", "NaN", "Infinity", "1e", "--1", "0 1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char line[256];
        snprintf(line, sizeof line, S_LINE("0", "1", "%s", "[0]"), bad[i]);
        s_refused(line, ":1: column ");
        snprintf(line, sizeof line, S_LINE("0", "1", "1", "[%s]"), bad[i]);
        s_refused(line, ":1: column ");
    }
}

Test(trace_reader, negative_zero_is_zero)
{
    kvt_workload_t *wl = s_accepted(S_LINE("-0", "1", "-0", "[-0]"));
    cr_assert_eq(wl->n, 1);
    cr_assert_eq(wl->reqs[0].arrival_us, 0);
    cr_assert_eq(wl->reqs[0].output_len, 1, "output 0 is a prefill-only request");
    cr_assert_eq(wl->reqs[0].ids[0], 0);
    kvt_workload_destroy(&wl);
    s_refused(S_LINE("0", "-0", "1", "[]"), "field 'input_length': 0 is out of range (1 .. ");
}

Test(trace_reader, whitespace_json_allows_is_accepted)
{
    kvt_workload_t *wl = s_accepted("\t{\t\"timestamp\"\t:\t7\t,\r\"input_length\" :600\t, "
                                    "\"output_length\":\t2\t,\"hash_ids\":[\t3\t,\t4\t]\t,"
                                    "\"extra\":\t1.5\t, \"more\": [1\t, -0\t]\t}\t \r\n");
    cr_assert_eq(wl->n, 1);
    cr_assert_eq(wl->reqs[0].arrival_us, 7000);
    cr_assert_eq(wl->reqs[0].input_len, 600);
    cr_assert_eq(wl->reqs[0].output_len, 2);
    cr_assert_eq(wl->reqs[0].ids[1], 4);
    kvt_workload_destroy(&wl);
}

Test(trace_reader, bad_values_are_refused_naming_line_field_and_value)
{
    struct {
        const char *line; //  the second line of the trace
        const char *want; //  the error must contain this
    } cases[] = {
        {S_LINE("-1", "1", "1", "[0]"), ":2: field 'timestamp': -1 is negative"},
        {S_LINE("1099511627777", "1", "1", "[0]"),
         ":2: field 'timestamp': 1099511627777 is out of range (0 .. 1099511627776)"},
        {S_LINE("99999999999999999999", "1", "1", "[0]"),
         ":2: field 'timestamp': 99999999999999999999 is out of range"},
        {S_LINE("0", "-99999999999999999999", "1", "[0]"),
         ":2: field 'input_length': -99999999999999999999 is negative"},
        {S_LINE("0", "1048577", "1", "[0]"), ":2: field 'input_length': 1048577 is out of range"},
        {S_LINE("0", "0", "1", "[]"), ":2: field 'input_length': 0 is out of range (1 .. 1048576)"},
        {S_LINE("0", "1", "1048577", "[0]"), ":2: field 'output_length': 1048577 is out of range"},
        {S_LINE("0", "1", "-3", "[0]"), ":2: field 'output_length': -3 is negative"},
        {S_LINE("0", "1", "1", "[4294967296]"),
         ":2: field 'hash_ids[0]': 4294967296 is out of range (0 .. 4294967295)"},
        {S_LINE("0", "600", "1", "[0, -1]"), ":2: field 'hash_ids[1]': -1 is negative"},
        {S_LINE("0", "600", "1", "[0, 99999999999999999999]"),
         ":2: field 'hash_ids[1]': 99999999999999999999 is out of range"},
        {S_LINE("\"5\"", "1", "1", "[0]"),
         ":2: field 'timestamp': \"5\" is not an integer (a string)"},
        {S_LINE("null", "1", "1", "[0]"), ":2: field 'timestamp': null is not an integer (null)"},
        {S_LINE("0", "true", "1", "[0]"),
         ":2: field 'input_length': true is not an integer (a boolean)"},
        {S_LINE("0", "1", "[1]", "[0]"),
         ":2: field 'output_length': [1] is not an integer (an array)"},
        {S_LINE("0", "1", "1", "[{}]"),
         ":2: field 'hash_ids[0]': {} is not an integer (an object)"},
        {S_LINE("0", "1", "1", "\"0\""), ":2: field 'hash_ids': \"0\" is not an array (a string)"},
        {S_LINE("0", "600", "1", "[0]"), ":2: field 'hash_ids': 1 ids, but input_length 600 needs"},
        {"{\"input_length\": 1, \"output_length\": 1, \"hash_ids\": [0]}\n",
         ":2: field 'timestamp': missing"},
        {"{\"timestamp\": 0, \"output_length\": 1, \"hash_ids\": [0]}\n",
         ":2: field 'input_length': missing"},
        {"{\"timestamp\": 0, \"input_length\": 1, \"hash_ids\": [0]}\n",
         ":2: field 'output_length': missing"},
        {"{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1}\n",
         ":2: field 'hash_ids': missing"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[512];
        snprintf(text, sizeof text, "%s%s", S_GOOD, cases[i].line);
        s_refused(text, cases[i].want);
    }
}

Test(trace_reader, more_ids_than_a_request_may_have_are_refused)
{
    size_t cap = 64 + 2049 * 3;
    char *line = malloc(cap);
    size_t n = (size_t)snprintf(line, cap,
                                "{\"timestamp\":0,\"input_length\":1,\"output_length\":1,"
                                "\"hash_ids\":[0");
    for (int i = 1; i < 2049; i++)
        n += (size_t)snprintf(line + n, cap - n, ",0");
    snprintf(line + n, cap - n, "]}\n");
    s_refused(line, ":1: field 'hash_ids': 2049 ids, more than 2048");
    free(line);
}

Test(trace_reader, syntax_errors_duplicates_and_non_objects_are_refused)
{
    s_refused(S_GOOD "{\"timestamp\": 0, \"timestamp\": 1, \"input_length\": 1, "
                     "\"output_length\": 1, \"hash_ids\": [0]}\n",
              ":2: column ");
    s_refused(S_GOOD "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, "
                     "\"hash_ids\": [0], \"x\": 1, \"x\": 2}\n",
              "duplicate object key");
    s_refused(
        "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [0]} x\n",
        ":1: column ");
    s_refused("{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [0]}"
              "{}\n",
              "end of file expected");
    s_refused("[1, 2]\n", ":1: expected an object, not an array");
    s_refused("{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [0],\n",
              ":1: column ");
    s_refused(S_GOOD "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, "
                     "\"hash_ids\": [0], \"x\": 99999999999999999999}\n",
              ":2: column ");
    s_refused(S_LINE("1e400", "1", "1", "[0]"), ":1: column 19: real number overflow");
}

Test(trace_reader, invalid_utf8_and_nul_bytes_are_refused)
{
    s_refused("{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [0], "
              "\"note\": \"\xff\"}\n",
              "unable to decode byte 0xff");
    s_refused("{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [0], "
              "\"note\": \"\xc0\xaf\"}\n",
              ":1: column ");
    const char nul[] = S_GOOD "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, "
                              "\"hash_ids\": [0]}\0\n";
    char err[512] = "";
    kvt_workload_t *wl = kvt_workload_mooncake(s_write_n(nul, sizeof nul - 1), 0, err, sizeof err);
    unlink(s_path);
    cr_assert_null(wl);
    cr_assert(strstr(err, ":2: column 73: NUL byte") != NULL, "%s", err);
}

static long s_maxrss_kib(void)
{
    struct rusage ru;
    cr_assert_eq(getrusage(RUSAGE_SELF, &ru), 0);
    return ru.ru_maxrss;
}

Test(trace_reader, dev_zero_stops_at_the_line_bound, .timeout = 10)
{
    long before = s_maxrss_kib();
    char err[1024] = "";
    kvt_workload_t *wl = kvt_workload_mooncake("/dev/zero", 0, err, sizeof err);
    cr_assert_null(wl);
    cr_assert(strstr(err, "/dev/zero:1: line longer than 1048576 bytes") != NULL, "%s", err);
    long grown = s_maxrss_kib() - before;
    cr_assert_lt(grown, 32 * 1024, "the reader grew by %ld KiB", grown);
}

//  A line of exactly len bytes (a valid request padded by an ignored key).
static char *s_padded_line(size_t len)
{
    const char *head = "{\"timestamp\":0,\"input_length\":1,\"output_length\":1,\"hash_ids\":[0],"
                       "\"pad\":\"";
    char *line = malloc(len + 2);
    size_t h = strlen(head);
    cr_assert_gt(len, h + 2);
    memcpy(line, head, h);
    memset(line + h, 'x', len - h - 2);
    memcpy(line + len - 2, "\"}\n", 4);
    return line;
}

Test(trace_reader, over_long_line_stops_naming_line_and_bound, .timeout = 20)
{
    char *at = s_padded_line(KVT_TRACE_MAX_LINE);
    char *over = s_padded_line(KVT_TRACE_MAX_LINE + 1);
    size_t cap = strlen(at) + strlen(over) + 256;
    char *text = malloc(cap);
    snprintf(text, cap, "%s%s%s", S_GOOD, at, S_GOOD);
    kvt_workload_t *wl = s_accepted(text);
    cr_assert_eq(wl->n, 3, "a line of exactly the bound is read");
    kvt_workload_destroy(&wl);
    snprintf(text, cap, "%s%s%s", S_GOOD, over, S_GOOD);
    s_refused(text, ":2: line longer than 1048576 bytes (the trace line bound)");
    free(text);
    free(at);
    free(over);
}

Test(trace_reader, empty_and_blank_files_have_no_requests)
{
    s_refused("", "no requests in the trace");
    s_refused("\n \t\r\n\r\n", "no requests in the trace");
}

Test(trace_reader, last_line_without_newline_is_read)
{
    kvt_workload_t *wl = s_accepted(S_GOOD "{\"timestamp\": 9, \"input_length\": 1, "
                                           "\"output_length\": 1, \"hash_ids\": [5]}");
    cr_assert_eq(wl->n, 2);
    cr_assert_eq(wl->reqs[1].arrival_us, 9000);
    cr_assert_eq(wl->reqs[1].ids[0], 5);
    kvt_workload_destroy(&wl);
    s_refused(S_GOOD "{\"timestamp\": 9, \"input_length\": 1", ":2: column ");
}

Test(trace_reader, crlf_lines_read_as_lf_lines)
{
    const char *lf =
        "{\"timestamp\":3,\"input_length\":600,\"output_length\":4,\"hash_ids\":[1,2]}\n"
        "\n"
        "{\"timestamp\":1,\"input_length\":5,\"output_length\":0,\"hash_ids\":[7]}\n";
    const char *crlf =
        "{\"timestamp\":3,\"input_length\":600,\"output_length\":4,\"hash_ids\":[1,2]}\r\n"
        "\r\n"
        "{\"timestamp\":1,\"input_length\":5,\"output_length\":0,\"hash_ids\":[7]}\r\n";
    kvt_workload_t *a = s_accepted(lf);
    kvt_workload_t *b = s_accepted(crlf);
    cr_assert_eq(a->n, 2);
    cr_assert_eq(b->n, 2);
    cr_assert_eq(s_digest(a), s_digest(b));
    kvt_workload_destroy(&a);
    kvt_workload_destroy(&b);
    //  Lines end at LF only: a lone CR does not end a line.
    s_refused("{\"timestamp\":3,\"input_length\":1,\"output_length\":4,\"hash_ids\":[1]}\r"
              "{\"timestamp\":3,\"input_length\":1,\"output_length\":4,\"hash_ids\":[1]}\n",
              ":1: column ");
}

Test(trace_reader, blank_lines_count_in_line_numbers)
{
    s_refused(S_GOOD "\n \t\r\n" S_LINE("0", "1", "1", "[-5]"), ":4: field 'hash_ids[0]': -5");
}

Test(trace_reader, reader_stays_at_its_error)
{
    const char *text =
        S_GOOD "{\"timestamp\":0,\"input_length\":1,\"output_length\":1,"
               "\"hash_ids\":[0],\"pad\":\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}\n" S_GOOD;
    char err[512] = "";
    kvt_trace_reader_t *rd = kvt_trace_reader_new(s_write(text), 100, err, sizeof err);
    cr_assert_not_null(rd, "%s", err);
    kvt_wreq_t r;
    cr_assert_eq(kvt_trace_reader_next(rd, &r, err, sizeof err), 1, "%s", err);
    free(r.ids);
    cr_assert_eq(kvt_trace_reader_next(rd, &r, err, sizeof err), -1);
    cr_assert(strstr(err, ":2: line longer than 100 bytes") != NULL, "%s", err);
    err[0] = 0;
    cr_assert_eq(kvt_trace_reader_next(rd, &r, err, sizeof err), -1, "no line after the error");
    cr_assert(strstr(err, ":2: line longer than 100 bytes") != NULL, "%s", err);
    cr_assert_eq(kvt_trace_reader_line(rd), 1);
    kvt_trace_reader_destroy(&rd);
    cr_assert_null(rd);
    unlink(s_path);
}

Test(trace_reader, small_reads_join_lines_across_buffer_refills)
{
    //  A 200-line trace read with an 80-byte bound: lines straddle every
    //  refill of the read-ahead.
    char *text = malloc(200 * 80);
    size_t n = 0;
    for (int i = 0; i < 200; i++)
        n += (size_t)snprintf(text + n, 200 * 80 - n,
                              "{\"timestamp\":%d,\"input_length\":1,\"output_length\":1,"
                              "\"hash_ids\":[%d]}\n",
                              i, i);
    char err[512] = "";
    kvt_trace_reader_t *rd = kvt_trace_reader_new(s_write(text), 80, err, sizeof err);
    cr_assert_not_null(rd, "%s", err);
    kvt_wreq_t r;
    for (int i = 0; i < 200; i++) {
        cr_assert_eq(kvt_trace_reader_next(rd, &r, err, sizeof err), 1, "line %d: %s", i + 1, err);
        cr_assert_eq(r.arrival_us, (uint64_t)i * 1000);
        cr_assert_eq(r.ids[0], (uint32_t)i);
        free(r.ids);
    }
    cr_assert_eq(kvt_trace_reader_next(rd, &r, err, sizeof err), 0);
    cr_assert_eq(kvt_trace_reader_line(rd), 200);
    kvt_trace_reader_destroy(&rd);
    unlink(s_path);
    free(text);
}
