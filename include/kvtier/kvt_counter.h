/*  kvt_counter — one named counter, as every layer reports its numbers.

    The store, the device layer and the actors all report counters by name;
    Stats messages carry them. Its own header so that a layer can report
    counters without depending on the message catalog. */
#ifndef KVT_COUNTER_H_INCLUDED
#define KVT_COUNTER_H_INCLUDED

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVT_COUNTER_NAME_MAX 64 //  bytes in a counter name, NUL excluded

//  One named counter.
typedef struct {
    char name[KVT_COUNTER_NAME_MAX + 1]; //  NUL-terminated counter name
    uint64_t value;                      //  counter value
} kvt_counter_t;

#ifdef __cplusplus
}
#endif
#endif
