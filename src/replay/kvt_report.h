/*  kvt_report — the replay's time series for `kvtier replay --report`: a
    pure core (no I/O but the FILE it is handed, no clock) that the modelled
    engine feeds with samples on its modelled clock.

    Each engine instance has its own series of at most `cap` samples taken
    every `period_us` of modelled time (kvt_report_due). When a series is
    full, the next sample first drops every other sample (keeping the first)
    and doubles the period, so a long trace keeps an even spread and bounded
    memory; the sample just added is always the last one, so the first and
    the last sample of an instance survive every decimation. The instance's
    final sample (at its end) is added whether due or not.

    kvt_report_merged sums the instances on one time axis (each instance's
    value at t is its last sample at or before t; zero before its first),
    which is what the TSV and the plots show: instances run one after
    another on the same trace clock. TTFT samples for the CDF are kept as
    quantiles of the whole run (kvt_report_ttft_cdf). */
#ifndef KVT_REPORT_H_INCLUDED
#define KVT_REPORT_H_INCLUDED

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

//  Samples per instance when the caller does not say (kvt_report_new).
#define KVT_REPORT_DEFAULT_CAP 200u
//  First sample period, modelled µs (kvt_report_new with period 0).
#define KVT_REPORT_DEFAULT_PERIOD_US 1000000u
//  Columns of the series TSV (kvt_report_write_series).
#define KVT_REPORT_SERIES_COLUMNS 18u
//  Unknown value of a gauge the sampler could not read (running, waiting,
//  a tier's bytes): written as "-".
#define KVT_REPORT_UNKNOWN UINT64_MAX

//  One sample: counters are cumulative since the instance's start, gauges
//  the state at t_us. Bytes are real bytes per rank (stored bytes times the
//  byte scale); a capacity of 0 means the run has no such tier.
typedef struct {
    uint64_t t_us;            //  modelled time
    uint64_t finished;        //  requests that finished
    uint64_t rejected;        //  requests refused
    uint64_t running;         //  gauge: requests running (KVT_REPORT_UNKNOWN: not read)
    uint64_t waiting;         //  gauge: requests waiting for admission (likewise)
    uint64_t input_tokens;    //  prompt tokens of finished requests
    uint64_t admitted_tokens; //  prompt tokens of the admissions (as hits count: at admission)
    uint64_t hbm_tokens;      //  prompt tokens resumed from HBM
    uint64_t cpu_tokens;      //  prompt tokens restored from the CPU tier
    uint64_t disk_tokens;     //  prompt tokens restored with a disk read
    uint64_t hbm_used;  //  gauge: HBM bytes of referenced blocks (KVT_REPORT_UNKNOWN: not read)
    uint64_t hbm_cap;   //  HBM KV budget
    uint64_t cpu_used;  //  gauge: CPU pool bytes allocated (KVT_REPORT_UNKNOWN: not read)
    uint64_t cpu_cap;   //  CPU pool capacity
    uint64_t disk_used; //  gauge: disk tier bytes (KVT_REPORT_UNKNOWN: not read)
    uint64_t disk_cap;  //  disk tier capacity
} kvt_report_sample_t;

typedef struct kvt_report_t kvt_report_t;

//  A report of at most cap samples per instance (0: the default; at least
//  2, rounded down to even), the first period period_us (0: the default).
//  NULL when out of memory.
kvt_report_t *kvt_report_new(uint32_t cap, uint64_t period_us);
void kvt_report_destroy(kvt_report_t **self_p);

//  Starts the next instance's series (instances are numbered from 0 in the
//  order they start). 0, or -1 when out of memory.
int kvt_report_instance(kvt_report_t *self);

//  Whether the current instance wants a sample at modelled time t_us: its
//  first, or t_us at or past the last sample's time plus the period.
bool kvt_report_due(const kvt_report_t *self, uint64_t t_us);

//  Adds a sample to the current instance (decimating first when it is
//  full), due or not (the instance's final sample is added whatever
//  kvt_report_due says). 0, or -1 when no instance was started.
int kvt_report_add(kvt_report_t *self, const kvt_report_sample_t *s);

//  Instances started, and instance k's samples (NULL, *n 0 when k is out
//  of range); its current period.
uint32_t kvt_report_instances(const kvt_report_t *self);
const kvt_report_sample_t *kvt_report_samples(const kvt_report_t *self, uint32_t k, uint32_t *n);
uint64_t kvt_report_period(const kvt_report_t *self, uint32_t k);

//  The whole run on one time axis: every instance's sample times, each row
//  the sum over instances of their last sample at or before it (gauges:
//  an unknown in any instance is unknown; capacities add up over the
//  instances that have started). Returns a malloc'd array (caller frees)
//  and its length in *n; NULL with *n 0 when there is no sample or out of
//  memory.
kvt_report_sample_t *kvt_report_merged(const kvt_report_t *self, uint32_t *n);

//  The hit share of a sample: (hbm + cpu + disk tokens) over the admitted
//  prompt tokens (hits count at admission and load, input tokens only at
//  the finish), at most 1; 0 with nothing admitted.
double kvt_report_hit_share(const kvt_report_sample_t *s);

//  Up to cap points of the CDF of the sorted values v[0..n): point i is the
//  value at quantile q_i = i / (cap - 1) (the value at index
//  round(q_i (n - 1))), so the first is the minimum and the last the
//  maximum. Writes q and value (µs) pairs; returns how many (n when n <
//  cap, 0 when n is 0).
uint32_t kvt_report_ttft_cdf(const uint64_t *v, uint32_t n, double *q, uint64_t *value,
                             uint32_t cap);

//  Writes rows as TSV: a '#' header line naming the
//  KVT_REPORT_SERIES_COLUMNS columns (docs/metrics.md, "The report"), then
//  one line per row. 0, or -1 when a write failed.
int kvt_report_write_series(FILE *f, const kvt_report_sample_t *rows, uint32_t n);

#endif
