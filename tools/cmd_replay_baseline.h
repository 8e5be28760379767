/*  The HBM-only baseline of `kvtier replay` (--hbm-baseline): the same
    replay without the tiers below HBM (no CPU pool, disk or remote tier),
    so the summary and the JSON put the TTFT and throughput with the tiers
    beside those without them, from one command.

    A second replay, not a counterfactual computed inside the first: the
    tiers change what every later step computes, queues and evicts, so only
    a run without them says what HBM alone would have given. Under the SIM
    driver it runs in a child process beside the main run (both are
    deterministic, so running them at once changes neither); under LIVE,
    whose results follow the machine's timing, after it. */
#ifndef KVT_CMD_REPLAY_BASELINE_H_INCLUDED
#define KVT_CMD_REPLAY_BASELINE_H_INCLUDED

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "replay/kvt_replay.h"

//  What the baseline measured (plain data: it crosses a pipe).
typedef struct {
    bool ran;               //  the replay ran to its end (else err says why)
    bool failed;            //  it ran and failed its own checks (failures says why)
    char err[256];          //  why it did not run ("" when it ran)
    char failures[512];     //  its failures, one per line, cut ("" when it passed)
    uint64_t requests;      //  requests in the workload
    uint64_t finished;      //  requests that generated all their tokens
    uint64_t rejected;      //  requests refused
    uint64_t input_tokens;  //  prompt tokens of the finished requests
    uint64_t hit_tokens;    //  prompt tokens served from HBM (the only tier)
    uint64_t wrong_resumes; //  resumes with bytes a recompute would not have produced
    uint64_t model_time_us; //  modelled clock at the end
    uint64_t span_us;       //  first to last arrival
    double ttft_p50_ms;     //  time to first token, modelled
    double ttft_p90_ms;     //  ...
    double ttft_p99_ms;     //  ...
    double utilisation;     //  the engine's busy share of the modelled time
    bool saturated;         //  queueing dominated its TTFT
    double wall_s;          //  wall time of the baseline replay
} kvt_hbm_baseline_t;

//  A baseline in progress.
typedef struct {
    kvt_replay_cfg_t cfg; //  the HBM-only twin of the main run's configuration
    pid_t pid;            //  the child running it (0: none, or run after the main one)
    int fd;               //  the pipe its result comes back on (-1: none)
} kvt_hbm_baseline_run_t;

//  The HBM-only twin of `in`: the same workload, engine, model, driver,
//  seed and HBM pool, no CPU pool, disk or remote tier, and nothing of the
//  main run's shell (no progress bar, no metrics endpoint, no per-run hook,
//  quiet logs). Pure.
void kvt_hbm_baseline_cfg(const kvt_replay_cfg_t *in, kvt_replay_cfg_t *out);

//  Whether `cfg` has a baseline to compare with: some tier below HBM, and
//  ranks this process starts (not an external rank endpoint). When not,
//  *why says why.
bool kvt_hbm_baseline_applies(const kvt_replay_cfg_t *cfg, const char **why);

//  Starts the baseline of `cfg`: under SIM a child process that runs it now
//  (call before the main run starts its threads); under LIVE nothing yet.
//  0, or -1 with err filled (the main run can still go on alone).
int kvt_hbm_baseline_start(kvt_hbm_baseline_run_t *b, const kvt_replay_cfg_t *cfg, char *err,
                           size_t errlen);

//  Ends it: under SIM waits for the child's result; under LIVE runs it
//  now. Fills *out (out->ran false and out->err set when it did not run).
//  Every started baseline is finished exactly once (no child is left).
void kvt_hbm_baseline_finish(kvt_hbm_baseline_run_t *b, kvt_hbm_baseline_t *out);

//  Ends a started baseline whose result is not wanted (the main run did
//  not start): stops and reaps its child, if any.
void kvt_hbm_baseline_cancel(kvt_hbm_baseline_run_t *b);

//  The part of a replay's report that the baseline keeps. Pure.
void kvt_hbm_baseline_from_report(const kvt_replay_report_t *r, kvt_hbm_baseline_t *out);

#endif
