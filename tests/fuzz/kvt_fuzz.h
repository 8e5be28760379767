/*  kvt_fuzz.h — the fuzz targets' entry functions (tests/fuzz/fuzz_*.c).

    Each target's work is one function, kvt_fuzz_<target> (data, size),
    that aborts when a property fails. The libFuzzer binary
    (build-fuzz/fuzz_<target>) calls it from LLVMFuzzerTestOneInput; the
    ordinary suite (tests/test_fuzz_corpus.c, built without libFuzzer, in
    the plain and ASan stages) feeds it every file of tests/corpus/<target>/,
    so each crash the fuzzer found stays a test. KVT_FUZZ_REPLAY leaves the
    libFuzzer entry out. */
#ifndef KVT_FUZZ_H_INCLUDED
#define KVT_FUZZ_H_INCLUDED

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int kvt_fuzz_decode(const uint8_t *data, size_t size);
int kvt_fuzz_trace(const uint8_t *data, size_t size);
int kvt_fuzz_config(const uint8_t *data, size_t size);
int kvt_fuzz_disk_object(const uint8_t *data, size_t size);
int kvt_fuzz_disk_manifest(const uint8_t *data, size_t size);
int kvt_fuzz_frame(const uint8_t *data, size_t size);

//  A failed property: what, then abort (the fuzzer keeps the input).
#define KVT_FUZZ_DIE(...)                      \
    do {                                       \
        fprintf(stderr, "fuzz: " __VA_ARGS__); \
        fputc('\n', stderr);                   \
        abort();                               \
    } while (0)

#ifdef KVT_FUZZ_REPLAY
#define KVT_FUZZ_ENTRY(fn)
#else
#define KVT_FUZZ_ENTRY(fn)                                        \
    int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size); \
    int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)  \
    {                                                             \
        return fn(data, size);                                    \
    }
#endif

#endif
