/*  kvt_msg_test.h — hooks for the codec's tests, fuzzer and corpus tool.
    Not part of the public API; other areas use include/kvtier/kvt_msg.h.
*/
#ifndef KVT_MSG_TEST_H_INCLUDED
#define KVT_MSG_TEST_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

#include "kvtier/kvt_msg.h"

//  kvt_msg_decode, also reporting how many bytes of arrays the decode asked
//  for (whether or not it then failed), so a test can prove that a header
//  claiming a huge count allocates nothing.
int kvt_msg_decode_ex(const uint8_t *buf, size_t len, kvt_msg_t *msg, kvt_msg_err_t *err,
                      size_t *alloc_bytes);

//  Sample message shapes.
typedef enum {
    KVT_SAMPLE_MIN = 0,     //  smallest values, empty arrays, optional fields omitted
    KVT_SAMPLE_TYPICAL = 1, //  a few items of each array, varied values
    KVT_SAMPLE_MAX = 2,     //  every array at its limit (where the frame cap allows), max values
    KVT_SAMPLE_ALT1 = 3,    //  another typical shape: a touch report, a state-only load,
                            //  an image-only save (TYPICAL for kinds without one)
    KVT_SAMPLE_ALT2 = 4,    //  a third: a store report with fenced / a fence report
                            //  (TYPICAL for kinds without one)
    KVT_SAMPLE_COUNT = 5,   //  number of shapes
} kvt_sample_t;

//  Fills *msg with a deterministic valid message of `kind` and `shape`; the
//  message owns its arrays (kvt_msg_clear frees them). Returns 0, or -1 for
//  an unknown kind / shape or when memory ran out (*msg is then empty).
int kvt_msg_sample(int kind, int shape, kvt_msg_t *msg);

#endif
