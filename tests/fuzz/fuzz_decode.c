/*  fuzz_decode.c — libFuzzer target for the message decoder.

    Properties checked on every input:
    * a rejected frame leaves the message empty and names a field and reason;
    * an accepted frame allocated at most a small multiple of its size, and
      msgpack-c (an independent parser) agrees it is one complete object;
    * an accepted message re-encodes, the encoding decodes, and encoding that
      gives the same bytes again (the codec is a fixed point after one trip).

    Build: cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DKVTIER_FUZZ=ON
           cmake --build build-fuzz --target fuzz_decode
    Run:   ./build-fuzz/fuzz_decode -max_len=8192 -dict=tests/fuzz/decode.dict corpus-tmp \
               tests/corpus/decode
*/
#include <msgpack.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvtier/kvt_msg.h"
#include "fuzz/kvt_fuzz.h"
#include "messages/kvt_msg_test.h"

static void s_decode_die(const char *what, const kvt_msg_err_t *err)
{
    char text[256];
    fprintf(stderr, "fuzz_decode: %s (%s)\n", what,
            err ? kvt_msg_err_str(err, text, sizeof text) : "-");
    abort();
}

static bool s_decode_msgpack_c_accepts(const uint8_t *data, size_t size)
{
    msgpack_unpacked result;
    msgpack_unpacked_init(&result);
    size_t off = 0;
    msgpack_unpack_return rc = msgpack_unpack_next(&result, (const char *)data, size, &off);
    msgpack_unpacked_destroy(&result);
    return rc == MSGPACK_UNPACK_SUCCESS && off == size;
}

int kvt_fuzz_decode(const uint8_t *data, size_t size)
{
    static const kvt_msg_t zero;
    kvt_msg_t msg, back;
    kvt_msg_err_t err;
    size_t alloc = 0;
    if (kvt_msg_decode_ex(data, size, &msg, &err, &alloc) != 0) {
        if (memcmp(&msg, &zero, sizeof zero) != 0)
            s_decode_die("rejected frame left a non-empty message", &err);
        if (err.field[0] == '\0' || err.reason[0] == '\0')
            s_decode_die("rejection without a field or reason", &err);
        return 0;
    }
    if (alloc > 4 * size + 65536)
        s_decode_die("decode allocated more than 4 × frame + 64 KiB", NULL);
    if (!s_decode_msgpack_c_accepts(data, size))
        s_decode_die("accepted a frame msgpack-c calls malformed", NULL);
    uint8_t *first = NULL, *second = NULL;
    size_t nfirst = 0, nsecond = 0;
    if (kvt_msg_check(&msg, &err) != 0)
        s_decode_die("decoded message fails kvt_msg_check", &err);
    if (kvt_msg_encode(&msg, &first, &nfirst) != 0)
        s_decode_die("decoded message does not encode", NULL);
    if (kvt_msg_decode(first, nfirst, &back, &err) != 0)
        s_decode_die("re-encoded message does not decode", &err);
    if (kvt_msg_encode(&back, &second, &nsecond) != 0)
        s_decode_die("second trip does not encode", NULL);
    if (nfirst != nsecond || memcmp(first, second, nfirst) != 0)
        s_decode_die("encode ∘ decode is not stable", NULL);
    free(first);
    free(second);
    kvt_msg_clear(&back);
    kvt_msg_clear(&msg);
    return 0;
}

KVT_FUZZ_ENTRY(kvt_fuzz_decode)
