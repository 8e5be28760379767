/*  kvt_metrics_int.h — the snapshot holder's state, shared by
    kvt_metrics.c (snapshots, names, rendering) and kvt_metrics_http.c (the
    endpoint). Private to src/runtime. */
#ifndef KVT_METRICS_INT_H_INCLUDED
#define KVT_METRICS_INT_H_INCLUDED

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "kvtier/kvt_metrics.h"

//  What a series is.
typedef enum {
    KVT_MTYPE_COUNTER = 0,   //  only goes up (family ends in _total)
    KVT_MTYPE_GAUGE = 1,     //  goes up and down
    KVT_MTYPE_HISTOGRAM = 2, //  one part of a histogram (bucket, sum or count)
} kvt_mtype_t;

//  One series of a snapshot.
typedef struct {
    char *family;     //  metric family name (kvtier_...)
    char *labels;     //  its labels, rendered (`actor="worker",rank="0"`), maybe empty
    char help[96];    //  the counter name(s) it comes from, for # HELP
    kvt_mtype_t type; //  counter, gauge or histogram part
    uint8_t part;     //  histogram: 0 bucket, 1 sum, 2 count
    uint64_t le;      //  histogram bucket bound (UINT64_MAX: +Inf)
    bool scale_us;    //  histogram of microseconds: bounds and sum shown in seconds
    uint64_t value;   //  the counter's value
    uint32_t seq;     //  publish order (ties keep it)
} kvt_mrow_t;

//  An immutable snapshot; the holder and each scrape in progress hold it.
typedef struct {
    atomic_uint refs; //  holders
    kvt_mrow_t *rows; //  series in render order
    uint32_t n;       //  entries of rows
} kvt_msnap_t;

struct MHD_Daemon;

struct _kvt_metrics_t {
    pthread_mutex_t mu;                 //  guards snap (the swap and taking a reference only)
    kvt_msnap_t *snap;                  //  the current snapshot (NULL: none yet)
    struct MHD_Daemon *daemon;          //  the endpoint (NULL: not listening)
    uint16_t port;                      //  the port it is bound to
    atomic_uint_fast64_t publishes;     //  snapshots published
    atomic_uint_fast64_t refused;       //  publishes refused
    atomic_uint_fast64_t duplicates;    //  series dropped as repeats
    atomic_uint_fast64_t scrapes;       //  GET /metrics answered
    atomic_uint_fast64_t bad_requests;  //  404 / 405 answers
    atomic_uint_fast64_t render_failed; //  500 answers
};

//  The current snapshot with a reference taken (NULL: none); drop it with
//  kvt_msnap_unref_.
kvt_msnap_t *kvt_msnap_get_(kvt_metrics_t *self);
void kvt_msnap_unref_(kvt_msnap_t *s);

//  Stops the endpoint if it runs (kvt_metrics_http.c).
void kvt_metrics_stop_http_(kvt_metrics_t *self);

//  Whether a normalised counter name is a gauge (tests use it too).
bool kvt_metrics_is_gauge_(const char *norm);

//  The i-th name of the gauge list, NULL past its end (tests).
const char *kvt_metrics_gauge_at_(size_t i);

#endif
