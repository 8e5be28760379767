/*  cmd_replay_report — the shell of `kvtier replay`'s output beside the
    summary: the progress bar on stderr (--progress, --progress-interval)
    and a single run's report directory (--report DIR without --sweep):
    report.md, series.tsv, ttft.tsv, ledger.tsv, plots.gp and the PNGs
    gnuplot renders from them (docs/configuration.md, "The report"). */
#ifndef CMD_REPLAY_REPORT_H_INCLUDED
#define CMD_REPLAY_REPORT_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "replay/kvt_replay.h"
#include "replay/kvt_report.h"

//  --progress: KVT_PROGRESS_AUTO draws when stderr is a terminal (and the
//  run is not --quiet).
typedef enum { KVT_PROGRESS_AUTO = 0, KVT_PROGRESS_ON, KVT_PROGRESS_OFF } kvt_progress_mode_t;

//  Default --progress-interval, wall-clock ms between redraws.
#define KVT_PROGRESS_DEFAULT_MS 200u

//  The bar's state: one line on stderr, redrawn in place.
typedef struct {
    struct timespec t0;   //  when the run started
    struct timespec last; //  the last redraw
    uint32_t interval_ms; //  between redraws (wall clock)
    uint64_t before;      //  requests ended by earlier instances
    uint64_t now;         //  requests ended as of the last call (this instance)
    uint32_t instance;    //  the instance of the last call
    bool drawn;           //  a line is on the screen
    int width;            //  characters of the longest line drawn
} kvt_progress_t;

//  Parses --progress's value ("on", "off", "auto"): 0, or -1.
int kvt_progress_mode_parse(const char *v, kvt_progress_mode_t *mode);

//  Whether the bar draws: mode, whether stderr is a terminal, --quiet.
bool kvt_progress_wanted(kvt_progress_mode_t mode, bool tty, bool quiet);

//  Starts the bar (the clock starts now).
void kvt_progress_start(kvt_progress_t *self, uint32_t interval_ms);

//  kvt_replay_cfg_t.progress: redraws when interval_ms passed since the
//  last redraw (requests done / total, %, hit %, elapsed, ETA).
void kvt_progress_cb(void *arg, uint32_t instance, uint32_t instances, uint32_t total,
                     const kvt_sim_engine_result_t *e, uint64_t clock_us);

//  Erases the line (when one was drawn).
void kvt_progress_end(kvt_progress_t *self);

//  Before the run: creates dir (and its parents) when missing and checks
//  that a file can be written in it. 0, or -1 with err naming the
//  directory and why.
int kvt_replay_report_prepare(const char *dir, char *err, size_t errlen);

//  What the report is written from.
typedef struct {
    const char *dir;                //  the report's directory (prepared)
    int argc;                       //  the command line
    char **argv;                    //  ...
    const kvt_replay_cfg_t *cfg;    //  the run's configuration
    const kvt_replay_report_t *rep; //  its result
    const kvt_report_t *series;     //  its time series
    const char *summary;            //  the summary the replay prints ("" with --quiet)
    const char *gnuplot;            //  the program run on plots.gp (NULL: "gnuplot" on PATH)
    uint32_t gnuplot_timeout_ms;    //  it is killed after this (0: 60 s)
} kvt_replay_report_in_t;

//  Writes every file of the report and runs gnuplot on plots.gp. A gnuplot
//  that is missing, fails or times out leaves report.md saying so (and
//  returns 0); *plotted says whether the PNGs were rendered. -1 (err
//  names the file) when a file could not be written.
int kvt_replay_report_write(const kvt_replay_report_in_t *in, bool *plotted, char *err,
                            size_t errlen);

#endif
