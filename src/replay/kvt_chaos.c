/*  kvt_chaos.c — one seeded fault-plan run over a small replay (see the
    header). The plan shapes the configuration (pool sizes, a disk tier,
    short timeouts) and, between slices of SIM events, arms fault rules,
    crashes and restarts a worker, and damages disk tier files; the checks
    read the replay's report. */
#define _GNU_SOURCE
#include "replay/kvt_chaos.h"

#include "kvtier/kvt_config.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvtier/kvt_actor.h"
#include "kvtier/kvt_msg.h"
#include "kvtier/kvt_gpu.h"
#include "replay/kvt_rank.h"
#include "replay/kvt_replay.h"

#define S_SLICE_EVENTS 64u       //  SIM events between two looks at the plan
#define S_EVENT_BUDGET 4000000u  //  a run still going after this many events is wedged
#define S_MAX_RULES    16        //  fault rules one run arms
#define S_MAX_DAMAGE   4         //  disk files one run damages
#define S_TP_MAX       3         //  ranks of the largest run
#define S_AGG_TIMEOUT  1500000u  //  the aggregator's timeout (virtual ns)
#define S_DELAY_MAX_NS 1000000u  //  the longest delay of the delay plan: under that timeout
#define S_LOOKUP_TTL   20000000u //  a pinned lookup's lease lifetime (virtual ns)
#define S_SETTLE_NS    (S_LOOKUP_TTL + 2000000u) //  the closing Stats round waits this long

static const char *s_names[KVT_CHAOS_PLANS] = {
    "none",       "drop",       "duplicate", "delay",         "reorder",      "lost-verdict",
    "crash-load", "crash-save", "evict",     "disk-truncate", "disk-corrupt", "disk-delete",
    "tiny-pool",  "mix",        "late-spec", "lane-stall",    "abort",        "preempt",
};

const char *kvt_chaos_plan_name(kvt_chaos_plan_t plan)
{
    return plan >= 0 && plan < KVT_CHAOS_PLANS ? s_names[plan] : "?";
}

int kvt_chaos_plan_parse(const char *name, kvt_chaos_plan_t *plan)
{
    for (int i = 0; name && i < KVT_CHAOS_PLANS; i++)
        if (strcmp(name, s_names[i]) == 0) {
            *plan = (kvt_chaos_plan_t)i;
            return 0;
        }
    return -1;
}

void kvt_chaos_command(const kvt_chaos_cfg_t *cfg, char *out, size_t len)
{
    char tp[32] = "";
    if (cfg->tp)
        snprintf(tp, sizeof tp, " --tp %u", cfg->tp);
    snprintf(out, len, "kvtier chaos --plan %s --seed %llu --model %s%s%s%s",
             kvt_chaos_plan_name(cfg->plan), (unsigned long long)cfg->seed,
             cfg->hybrid ? "hybrid" : "dense", tp, cfg->record ? " --record " : "",
             cfg->record ? cfg->record : "");
}

//  splitmix64: the run's own draws, apart from the driver's generator.
static uint64_t s_next(uint64_t *st)
{
    uint64_t z = (*st += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

//  Uniform in [lo, hi].
static uint64_t s_range(uint64_t *st, uint64_t lo, uint64_t hi)
{
    return lo + s_next(st) % (hi - lo + 1);
}

#define BIT(p) (1u << (p))
#define S_DISK_PLANS \
    (BIT(KVT_CHAOS_DISK_TRUNCATE) | BIT(KVT_CHAOS_DISK_CORRUPT) | BIT(KVT_CHAOS_DISK_DELETE))

//  A fault rule to arm once the run passed `at` events.
typedef struct {
    uint64_t at;           //  SIM events before it is armed
    kvt_fault_type_t type; //  drop / delay / duplicate
    const char *from;      //  sender's name (NULL = any)
    const char *to;        //  receiver's name
    int kind;              //  message kind
    uint32_t count;        //  messages it hits
    uint64_t delay_ns;     //  DELAY: by how much
    int id;                //  its rule id once armed (0 = not yet)
} s_rule_t;

//  A worker crash: armed on the first spec of `kind` to the worker after
//  `at` events (a tripwire rule that delays it by 1 ns), crashed `lag`
//  events after it fired, restarted `down_ns` of virtual time later.
typedef struct {
    bool on;          //  this run crashes a worker
    uint64_t at;      //  events before the tripwire is armed
    int kind;         //  LOAD_SPEC or SAVE_SPEC
    uint32_t rank;    //  whose worker
    uint64_t lag;     //  events between the spec and the crash
    uint64_t down_ns; //  how long the worker stays down
    int wire;         //  the tripwire rule (0 = not armed)
    uint64_t fired;   //  events when it fired (0 = not yet)
    uint64_t up_at;   //  virtual time of the restart (0 = not crashed)
    bool done;        //  crashed and restarted
} s_crash_t;

//  A lane stream stalled once the run passed `at` events (ops queued on it
//  do not run), cleared `down_ns` of virtual time later: past the lane's
//  deadline, so its jobs fail, a fence on it times out, the lane fails
//  and is reset once it drained.
typedef struct {
    bool on;             //  this run stalls a lane
    uint64_t at;         //  events before the stall
    uint32_t rank;       //  whose worker
    uint32_t lane;       //  0 load, 1 state, 2 save
    uint64_t down_ns;    //  how long it stays stalled
    kvt_gpu_stream_t *s; //  the stalled stream (NULL: not yet)
    uint64_t until;      //  virtual time of the clear
    bool done;           //  stalled and cleared
} s_stall_t;

//  A disk file to damage once the run passed `at` events.
typedef struct {
    uint64_t at;     //  events before it is tried
    uint64_t pick;   //  which object file (modulo the ones there)
    uint32_t rank;   //  in whose directory
    uint64_t offset; //  truncate to / flip at (modulo the file's length)
    int how;         //  KVT_CHAOS_DISK_TRUNCATE / _CORRUPT / _DELETE
    bool done;       //  it damaged a file
} s_damage_t;

typedef struct {
    const kvt_chaos_cfg_t *cfg;      //  the run
    const kvt_replay_cfg_t *rc;      //  its replay
    uint64_t st;                     //  the run's draws (after the configuration's)
    s_rule_t rules[S_MAX_RULES];     //  fault rules
    uint32_t nrules;                 //  entries in rules
    s_crash_t crash;                 //  the worker crash
    s_stall_t stall;                 //  the lane stall
    s_damage_t damage[S_MAX_DAMAGE]; //  disk damage
    uint32_t ndamage;                //  entries in damage
    uint64_t faults;                 //  faults injected so far
    bool wedged;                     //  the event budget ran out
    bool stalled;                    //  the stall passed its bound
    char problem[256];               //  what the plan itself could not do ("" = nothing)
    uint64_t dup_reports;            //  completions delivered twice
    uint64_t dup_specs;              //  load and save specs delivered twice
    char desc[768];                  //  what the plan did, for the report
} s_plan_t;

static void s_add_rule(s_plan_t *p, uint64_t at, kvt_fault_type_t type, const char *from,
                       const char *to, int kind, uint32_t count, uint64_t delay_ns)
{
    if (p->nrules < S_MAX_RULES)
        p->rules[p->nrules++] = (s_rule_t){.at = at,
                                           .type = type,
                                           .from = from,
                                           .to = to,
                                           .kind = kind,
                                           .count = count,
                                           .delay_ns = delay_ns};
}

static const char *s_worker[S_TP_MAX] = {"worker.0", "worker.1", "worker.2"};
static const char *s_runner[S_TP_MAX] = {"runner.0", "runner.1", "runner.2"};

//  The kinds a message fault may hit: the product's own channels (runner →
//  worker specs, worker → aggregator reports). The engine ↔ scheduler and
//  engine ↔ runner channels are the simulated engine's, whose step loop
//  waits for every answer by design (docs/reliability.md#chaos).
static const int s_kinds[] = {KVT_MSG_LOAD_SPEC, KVT_MSG_SAVE_SPEC,      KVT_MSG_TOUCH,
                              KVT_MSG_LOOKUP,    KVT_MSG_LOOKUP_RELEASE, KVT_MSG_COMPLETION};
#define S_NKINDS (sizeof s_kinds / sizeof s_kinds[0])

//  The rules of a message plan (drop / duplicate / delay; a delay stays
//  under the aggregator's timeout, S_DELAY_MAX_NS: see KVT_CHAOS_LATE_SPEC).
static void s_message_rules(s_plan_t *p, kvt_fault_type_t type, uint32_t tp, uint64_t span)
{
    uint32_t n = (uint32_t)s_range(&p->st, 1, 3);
    for (uint32_t i = 0; i < n; i++) {
        int kind = s_kinds[s_next(&p->st) % S_NKINDS];
        uint32_t r = (uint32_t)(s_next(&p->st) % tp);
        bool to_agg = kind == KVT_MSG_COMPLETION;
        s_add_rule(p, s_range(&p->st, 0, span), type, to_agg ? s_worker[r] : s_runner[r],
                   to_agg ? "aggregator" : s_worker[r], kind, (uint32_t)s_range(&p->st, 1, 4),
                   s_range(&p->st, 2000, S_DELAY_MAX_NS));
    }
}

//  Draws what the plans in `bits` do to a run of about `span` events.
static void s_draw(s_plan_t *p, uint32_t bits, uint32_t tp, uint64_t span)
{
    if (bits & BIT(KVT_CHAOS_DROP))
        s_message_rules(p, KVT_FAULT_DROP, tp, span);
    if (bits & BIT(KVT_CHAOS_DUPLICATE)) {
        s_message_rules(p, KVT_FAULT_DUPLICATE, tp, span);
        //  Every report of the last rank twice, while (hybrid) rank 0 now
        //  and then misses a state leg: a repeat counted as another rank's
        //  vote would outvote rank 0's failure.
        if (s_next(&p->st) % 2)
            s_add_rule(p, 0, KVT_FAULT_DUPLICATE, s_worker[tp - 1], "aggregator",
                       KVT_MSG_COMPLETION, 1000000, 0);
    }
    if (bits & BIT(KVT_CHAOS_DELAY))
        s_message_rules(p, KVT_FAULT_DELAY, tp, span);
    if (bits & BIT(KVT_CHAOS_REORDER)) {
        //  Every rank's reports late by its own amount: they reach the
        //  aggregator in another order than they were sent.
        uint64_t at = s_range(&p->st, 0, span);
        for (uint32_t r = 0; r < tp; r++)
            s_add_rule(p, at, KVT_FAULT_DELAY, s_worker[r], "aggregator", KVT_MSG_COMPLETION,
                       (uint32_t)s_range(&p->st, 2, 16), s_range(&p->st, 1000, 80000));
        //  ... and every rank's specs by its own amount: the ranks' copies
        //  land, and report, in another order than they were asked.
        for (uint32_t r = 0; r < tp; r++)
            s_add_rule(p, at, KVT_FAULT_DELAY, s_runner[r], s_worker[r], KVT_ANY_KIND,
                       (uint32_t)s_range(&p->st, 2, 16), s_range(&p->st, 1000, 200000));
        s_add_rule(p, at, KVT_FAULT_DELAY, "aggregator", "scheduler", KVT_MSG_VERDICT,
                   (uint32_t)s_range(&p->st, 1, 8), s_range(&p->st, 1000, 200000));
    }
    if (bits & BIT(KVT_CHAOS_LATE_SPEC)) {
        uint32_t r = (uint32_t)(s_next(&p->st) % tp);
        s_add_rule(p, s_range(&p->st, 0, span), KVT_FAULT_DELAY, s_runner[r], s_worker[r],
                   KVT_MSG_LOAD_SPEC, (uint32_t)s_range(&p->st, 1, 3),
                   S_AGG_TIMEOUT + s_range(&p->st, 200000, 2000000));
    }
    if (bits & BIT(KVT_CHAOS_LOST_VERDICT))
        s_add_rule(p, s_range(&p->st, 0, span), KVT_FAULT_DROP, "aggregator", "scheduler",
                   KVT_MSG_VERDICT, 1, 0);
    if (bits & (BIT(KVT_CHAOS_CRASH_LOAD) | BIT(KVT_CHAOS_CRASH_SAVE))) {
        bool load = (bits & BIT(KVT_CHAOS_CRASH_LOAD)) &&
                    (!(bits & BIT(KVT_CHAOS_CRASH_SAVE)) || s_next(&p->st) % 2);
        p->crash = (s_crash_t){.on = true,
                               .at = s_range(&p->st, 0, span),
                               .kind = load ? KVT_MSG_LOAD_SPEC : KVT_MSG_SAVE_SPEC,
                               .rank = (uint32_t)(s_next(&p->st) % tp),
                               .lag = s_range(&p->st, 0, 12),
                               .down_ns = s_range(&p->st, 5000, 3000000)};
    }
    if (bits & BIT(KVT_CHAOS_LANE_STALL)) {
        uint32_t lanes[] = {0, 2, 1}; //  a dense model has no state lane
        p->stall = (s_stall_t){.on = true,
                               .at = s_range(&p->st, 0, span),
                               .rank = (uint32_t)(s_next(&p->st) % tp),
                               .lane = lanes[s_next(&p->st) % (p->rc->state_bytes ? 3 : 2)],
                               .down_ns = s_range(&p->st, 1000000, 12000000)};
    }
    for (int how = KVT_CHAOS_DISK_TRUNCATE; how <= KVT_CHAOS_DISK_DELETE; how++) {
        if (!(bits & BIT(how)))
            continue;
        uint32_t n = (uint32_t)s_range(&p->st, 1, 2);
        for (uint32_t i = 0; i < n && p->ndamage < S_MAX_DAMAGE; i++)
            p->damage[p->ndamage++] = (s_damage_t){.at = s_range(&p->st, span / 8, span),
                                                   .pick = s_next(&p->st),
                                                   .rank = (uint32_t)(s_next(&p->st) % tp),
                                                   .offset = s_next(&p->st),
                                                   .how = how};
    }
}

static int s_cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

//  Damages one object file of d's rank directory (the names sorted, so the
//  seed picks the same one every time). 1 when a file was damaged, 0 when
//  there was none yet.
static int s_damage(s_plan_t *p, s_damage_t *d)
{
    char dir[600];
    snprintf(dir, sizeof dir, "%s/rank%u", p->rc->disk_dir, d->rank);
    DIR *dh = opendir(dir);
    if (!dh)
        return 0;
    char *names[512];
    uint32_t n = 0;
    struct dirent *de;
    while ((de = readdir(dh)) && n < 512) {
        size_t l = strlen(de->d_name);
        if (l > 4 && de->d_name[0] != '.' && strcmp(de->d_name + l - 4, ".kvt") == 0)
            names[n] = strdup(de->d_name), n += names[n] != NULL;
    }
    closedir(dh);
    int done = 0;
    if (n > 0) {
        qsort(names, n, sizeof names[0], s_cmp_str);
        char path[900];
        snprintf(path, sizeof path, "%s/%s", dir, names[d->pick % n]);
        struct stat sb;
        if (stat(path, &sb) == 0 && sb.st_size > 0) {
            uint64_t off = d->offset % (uint64_t)sb.st_size;
            if (d->how == KVT_CHAOS_DISK_DELETE)
                done = unlink(path) == 0;
            else if (d->how == KVT_CHAOS_DISK_TRUNCATE)
                done = truncate(path, (off_t)off) == 0;
            else {
                FILE *f = fopen(path, "r+b");
                int c = f && fseek(f, (long)off, SEEK_SET) == 0 ? fgetc(f) : EOF;
                done = c != EOF && fseek(f, (long)off, SEEK_SET) == 0 &&
                       fputc(c ^ (1 << (d->offset >> 61)), f) != EOF;
                if (f)
                    done = (fclose(f) == 0) && done;
            }
        }
    }
    for (uint32_t i = 0; i < n; i++)
        free(names[i]);
    return done;
}

static kvt_aid_t s_aid(kvt_system_t *sys, const char *name)
{
    return name ? kvt_system_lookup(sys, name) : KVT_ANY_ACTOR;
}

//  Does what is due at `events`.
static void s_act(s_plan_t *p, kvt_system_t *sys, kvt_rank_t *const *ranks, uint64_t events,
                  const kvt_sim_engine_result_t *so_far)
{
    for (uint32_t i = 0; i < p->nrules; i++) {
        s_rule_t *r = &p->rules[i];
        if (r->id || events < r->at)
            continue;
        r->id = kvt_sim_fault(sys, r->type, s_aid(sys, r->from), s_aid(sys, r->to), r->kind,
                              r->count, r->delay_ns);
        if (!r->id) {
            snprintf(p->problem, sizeof p->problem, "cannot arm a fault rule (%s -> %s kind %d)",
                     r->from ? r->from : "*", r->to, r->kind);
            r->id = -1;
        }
    }
    s_crash_t *c = &p->crash;
    kvt_aid_t w = c->on ? kvt_system_lookup(sys, s_worker[c->rank]) : KVT_AID_NONE;
    if (c->on && !c->done && !c->wire && events >= c->at)
        c->wire = kvt_sim_fault(sys, KVT_FAULT_DELAY, kvt_system_lookup(sys, s_runner[c->rank]), w,
                                c->kind, 1, 1);
    if (c->on && c->wire > 0 && !c->fired && kvt_sim_fault_hits(sys, c->wire) > 0)
        c->fired = events;
    if (c->on && c->fired && !c->up_at && !c->done && events >= c->fired + c->lag) {
        if (kvt_sim_crash(sys, w) == 0) {
            c->up_at = kvt_system_now(sys) + c->down_ns;
            p->faults++;
        } else {
            snprintf(p->problem, sizeof p->problem, "cannot crash %s", s_worker[c->rank]);
            c->done = true;
        }
    }
    //  Up again before the last requests end: the simulated engine's
    //  closing Stats round waits for every actor's answer, and one asked
    //  while the worker is down would never come.
    uint64_t ended = so_far->finished + so_far->rejected;
    if (c->on && c->up_at && !c->done &&
        (kvt_system_now(sys) >= c->up_at || ended + 4 >= p->rc->limit)) {
        if (kvt_sim_restart(sys, w) != 0)
            snprintf(p->problem, sizeof p->problem, "cannot restart %s", s_worker[c->rank]);
        c->done = true;
    }
    s_stall_t *l = &p->stall;
    if (l->on && !l->s && !l->done && events >= l->at && ended + 4 < p->rc->limit) {
        kvt_gpu_stream_t *st = kvt_rank_lane_stream(ranks[l->rank], l->lane);
        if (st && kvt_gpu_stream_inject(st, KVT_GPU_FAULT_STALL, 0) == 0) {
            l->s = st;
            l->until = kvt_system_now(sys) + l->down_ns;
            p->faults++;
        }
    }
    //  Cleared before the last requests end, as a crash is restarted.
    if (l->s && !l->done && (kvt_system_now(sys) >= l->until || ended + 4 >= p->rc->limit)) {
        if (kvt_gpu_stream_inject(l->s, KVT_GPU_FAULT_NONE, 0) != 0)
            snprintf(p->problem, sizeof p->problem, "cannot clear the stalled lane");
        l->done = true;
    }
    for (uint32_t i = 0; i < p->ndamage; i++) {
        s_damage_t *d = &p->damage[i];
        if (!d->done && events >= d->at && s_damage(p, d)) {
            d->done = true;
            p->faults++;
        }
    }
}

//  The replay's SIM loop: slices of events, the plan between them.
static int s_sim_loop(s_plan_t *p, kvt_system_t *sys, kvt_rank_t *const *ranks,
                      const kvt_sim_engine_result_t *so_far);

static int s_sim_run(void *arg, kvt_system_t *sys, kvt_rank_t *const *ranks,
                     const kvt_sim_engine_result_t *so_far)
{
    s_plan_t *p = arg;
    int rc = s_sim_loop(p, sys, ranks, so_far);
    static const char *type[] = {"?", "drop", "delay", "duplicate"};
    size_t used = 0;
    for (uint32_t i = 0; i < p->nrules && used + 1 < sizeof p->desc; i++) {
        const s_rule_t *r = &p->rules[i];
        uint32_t hits = r->id > 0 ? kvt_sim_fault_hits(sys, r->id) : 0;
        p->faults += hits;
        if (r->type == KVT_FAULT_DUPLICATE && r->kind == KVT_MSG_COMPLETION)
            p->dup_reports += hits;
        if (r->type == KVT_FAULT_DUPLICATE &&
            (r->kind == KVT_MSG_LOAD_SPEC || r->kind == KVT_MSG_SAVE_SPEC))
            p->dup_specs += hits;
        int n = snprintf(p->desc + used, sizeof p->desc - used,
                         "%s %s %s->%s x%u (+%llu ns) after %llu events: %u hit; ", type[r->type],
                         kvt_msg_kind_name(r->kind), r->from ? r->from : "*", r->to, r->count,
                         (unsigned long long)r->delay_ns, (unsigned long long)r->at, hits);
        used += n > 0 ? (size_t)n : 0;
    }
    const s_crash_t *c = &p->crash;
    if (c->on && used + 1 < sizeof p->desc) {
        int n = snprintf(p->desc + used, sizeof p->desc - used,
                         "crash %s on %s after %llu events: %s; ", s_worker[c->rank],
                         kvt_msg_kind_name(c->kind), (unsigned long long)c->at,
                         c->done    ? "crashed and restarted"
                         : c->up_at ? "crashed, not restarted"
                                    : "never fired");
        used += n > 0 ? (size_t)n : 0;
    }
    const s_stall_t *l = &p->stall;
    if (l->on && used + 1 < sizeof p->desc) {
        int n = snprintf(p->desc + used, sizeof p->desc - used,
                         "stall lane %u of worker.%u for %llu ns after %llu events: %s; ", l->lane,
                         l->rank, (unsigned long long)l->down_ns, (unsigned long long)l->at,
                         l->done ? "stalled and cleared"
                         : l->s  ? "stalled"
                                 : "never fired");
        used += n > 0 ? (size_t)n : 0;
    }
    for (uint32_t i = 0; i < p->ndamage && used + 1 < sizeof p->desc; i++) {
        const s_damage_t *d = &p->damage[i];
        int n = snprintf(p->desc + used, sizeof p->desc - used, "%s a file of rank %u: %s; ",
                         kvt_chaos_plan_name((kvt_chaos_plan_t)d->how), d->rank,
                         d->done ? "done" : "none there");
        used += n > 0 ? (size_t)n : 0;
    }
    return rc;
}

static int s_sim_loop(s_plan_t *p, kvt_system_t *sys, kvt_rank_t *const *ranks,
                      const kvt_sim_engine_result_t *so_far)
{
    //  Quiescence is judged after every bound a fault leaves to run out:
    //  the engine's closing Stats requests (the last it sends to each
    //  actor) arrive S_SETTLE_NS late, so an aggregator key a lost report
    //  left open has timed out and a lookup lease a lost release left has
    //  expired before any actor reports its counters.
    uint32_t actors = 3 + 2 * p->rc->tp;
    if (!kvt_sim_fault(sys, KVT_FAULT_DELAY, kvt_system_lookup(sys, "engine"), KVT_ANY_ACTOR,
                       KVT_MSG_STATS, actors, S_SETTLE_NS))
        snprintf(p->problem, sizeof p->problem, "cannot delay the closing Stats round");
    uint64_t bound = p->cfg->stall_bound_us ? p->cfg->stall_bound_us : KVT_CHAOS_STALL_BOUND_US;
    uint64_t t = 0;
    while (true) {
        s_act(p, sys, ranks, t, so_far);
        bool down = (p->crash.up_at && !p->crash.done) || (p->stall.s && !p->stall.done);
        int rc = kvt_system_run(sys, 0, down ? 4 : S_SLICE_EVENTS);
        t = kvt_sim_events(sys);
        if (rc != KVT_RUN_EVENT_LIMIT) {
            //  The worker restarts even when nothing else is left to do.
            bool was_down = down;
            if (rc == KVT_RUN_QUIESCENT && was_down) {
                //  Nothing else would ever run: restart or clear now.
                if (p->crash.up_at && !p->crash.done)
                    p->crash.up_at = kvt_system_now(sys);
                if (p->stall.s && !p->stall.done)
                    p->stall.until = kvt_system_now(sys);
                s_act(p, sys, ranks, t, so_far);
                if (kvt_system_run(sys, 0, 1) == KVT_RUN_EVENT_LIMIT)
                    continue;
            }
            return rc;
        }
        if (so_far->max_stall_us > bound) {
            p->stalled = true;
            return KVT_RUN_TIME_LIMIT;
        }
        if (t >= S_EVENT_BUDGET) {
            p->wedged = true;
            return KVT_RUN_EVENT_LIMIT;
        }
    }
}

//  Appends one failed check to the result.
static void s_fail(kvt_chaos_result_t *res, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void s_fail(kvt_chaos_result_t *res, const char *fmt, ...)
{
    size_t used = strlen(res->why);
    res->failed = true;
    if (used + 2 >= sizeof res->why)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(res->why + used, sizeof res->why - used - 1, fmt, ap);
    va_end(ap);
    strcat(res->why, "\n");
}

//  Disk temporaries left in a rank directory of dir.
static uint32_t s_temps(const char *dir, uint32_t tp)
{
    uint32_t n = 0;
    for (uint32_t r = 0; dir && r < tp; r++) {
        char d[600];
        snprintf(d, sizeof d, "%s/rank%u", dir, r);
        DIR *dh = opendir(d);
        struct dirent *de;
        while (dh && (de = readdir(dh)))
            n += strncmp(de->d_name, ".tmp-", 5) == 0;
        if (dh)
            closedir(dh);
    }
    return n;
}

static int s_rm(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

//  The checks on a finished run's report.
static void s_check(const s_plan_t *p, const kvt_replay_report_t *rep, kvt_chaos_result_t *res)
{
    const kvt_sim_engine_result_t *e = &rep->engine;
    const char *S = "scheduler";
    uint64_t bound = p->cfg->stall_bound_us ? p->cfg->stall_bound_us : KVT_CHAOS_STALL_BOUND_US;
    if (p->problem[0])
        s_fail(res, "the plan: %s", p->problem);
    if (p->wedged)
        s_fail(res, "wedged: still running after %u events", S_EVENT_BUDGET);
    if (p->stalled || e->max_stall_us > bound)
        s_fail(res,
               "wedged: requests waited %.3f s modelled with nothing run, loaded or saved "
               "(bound %.3f s)",
               (double)e->max_stall_us / 1e6, (double)bound / 1e6);
    if (rep->failed)
        s_fail(res, "%s", rep->failures);
    uint64_t ld = kvt_replay_counter(rep, S, "sched.loads_dispatched");
    uint64_t lok = kvt_replay_counter(rep, S, "sched.loads_ok");
    uint64_t lf = kvt_replay_counter(rep, S, "sched.loads_failed");
    uint64_t lr = kvt_replay_counter(rep, S, "sched.loads_reclaimed");
    if (ld != lok + lf + lr)
        s_fail(res, "loads: %llu dispatched != %llu ok + %llu failed + %llu reclaimed",
               (unsigned long long)ld, (unsigned long long)lok, (unsigned long long)lf,
               (unsigned long long)lr);
    uint64_t sd = kvt_replay_counter(rep, S, "sched.saves_dispatched");
    uint64_t sok = kvt_replay_counter(rep, S, "sched.saves_ok");
    uint64_t sf = kvt_replay_counter(rep, S, "sched.saves_failed");
    if (sd != sok + sf)
        s_fail(res, "saves: %llu dispatched != %llu ok + %llu failed", (unsigned long long)sd,
               (unsigned long long)sok, (unsigned long long)sf);
    uint64_t xd = kvt_replay_counter(rep, S, "stidx.dispatched");
    uint64_t xc = kvt_replay_counter(rep, S, "stidx.completed");
    uint64_t xf = kvt_replay_counter(rep, S, "stidx.failed");
    uint64_t xa = kvt_replay_counter(rep, S, "stidx.abandoned");
    if (xd != xc + xf + xa)
        s_fail(res, "state loads: %llu dispatched != %llu completed + %llu failed + %llu abandoned",
               (unsigned long long)xd, (unsigned long long)xc, (unsigned long long)xf,
               (unsigned long long)xa);
    static const struct {
        const char *actor, *name; //  counter (actor NULL: summed over every actor)
    } zero[] = {{"scheduler", "stidx.outstanding"},
                {"scheduler", "stidx.orphans"},
                {"scheduler", "sched.load_orphans"},
                {"scheduler", "sched.loading"},
                {"scheduler", "sched.lookups_out"},
                {"scheduler", "savetrack.leases_outstanding"},
                {"scheduler", "stidx.invariant_violations"},
                {"aggregator", "agg.open"},
                {NULL, "worker.pending"},
                {NULL, "worker.unreported"},
                {NULL, "pool.writing_bytes"},
                {NULL, "runner.blocks_wrong"},
                {NULL, "runner.states_wrong"},
                {NULL, "worker.lookup_leases"},
                {NULL, "pool.pinned_bytes"},
                {NULL, "pool.leases_active"}};
    for (size_t i = 0; i < sizeof zero / sizeof zero[0]; i++) {
        uint64_t v = kvt_replay_counter(rep, zero[i].actor, zero[i].name);
        if (v != 0)
            s_fail(res, "%s = %llu at the end (want 0)", zero[i].name, (unsigned long long)v);
    }
    //  Exactly one report per item per rank: a spec delivered twice runs
    //  once (the worker drops the repeat), a report delivered twice votes
    //  once (the aggregator drops it, as a duplicate or once settled).
    uint64_t wdup = kvt_replay_counter(rep, NULL, "worker.duplicates");
    uint64_t adup = kvt_replay_counter(rep, "aggregator", "agg.dup_dropped") +
                    kvt_replay_counter(rep, "aggregator", "agg.late_dropped");
    //  (A crashed worker's counters start again with its new epoch.)
    if (wdup < p->dup_specs && !p->crash.on)
        s_fail(res, "%llu specs delivered twice, %llu dropped by the workers",
               (unsigned long long)p->dup_specs, (unsigned long long)wdup);
    if (adup < p->dup_reports)
        s_fail(res, "%llu reports delivered twice, %llu dropped by the aggregator",
               (unsigned long long)p->dup_reports, (unsigned long long)adup);
    //  Every abort and preempt the engine sent was taken or refused, once;
    //  every abort taken ended its request as aborted.
    uint64_t ab = kvt_replay_counter(rep, S, "sched.aborted");
    uint64_t abr = kvt_replay_counter(rep, S, "sched.aborts_refused");
    uint64_t pr = kvt_replay_counter(rep, S, "sched.preempted");
    uint64_t prr = kvt_replay_counter(rep, S, "sched.preempts_refused");
    if (e->aborts_sent != ab + abr)
        s_fail(res, "aborts: %llu sent != %llu aborted + %llu refused",
               (unsigned long long)e->aborts_sent, (unsigned long long)ab, (unsigned long long)abr);
    if (e->preempts_sent != pr + prr)
        s_fail(res, "preempts: %llu sent != %llu preempted + %llu refused",
               (unsigned long long)e->preempts_sent, (unsigned long long)pr,
               (unsigned long long)prr);
    if (e->aborted != ab)
        s_fail(res, "%llu requests ended aborted, the scheduler aborted %llu",
               (unsigned long long)e->aborted, (unsigned long long)ab);
    if (e->preempted > pr)
        s_fail(res, "%llu requests re-admitted after %llu preemptions",
               (unsigned long long)e->preempted, (unsigned long long)pr);
    uint32_t temps = s_temps(p->rc->disk_dir, p->rc->tp);
    if (temps)
        s_fail(res, "%u disk temporaries left", temps);
}

//  The replay configuration of a run: small, with short timeouts so that
//  every recovery happens within the run.
static void s_config(const kvt_chaos_cfg_t *cfg, uint32_t bits, uint64_t *st, kvt_replay_cfg_t *c)
{
    kvt_replay_defaults(c);
    //  Unpaced: the plans' timeouts and faults are drawn on the driver's
    //  clock at the scale of an unpaced step (tens of microseconds), and the
    //  tests pin what each seed's fault hits at that scale.
    c->pace = KVT_OFF;
    c->grid_share_pct = 0; //  the fixed grid, as the pinned seeds were chosen on
    c->seed = cfg->seed;
    c->log_level = cfg->log_level;
    c->record = cfg->record;
    //  Two ranks at least: with one, a lost report leaves its key unopened
    //  at the aggregator, which no timeout covers (docs/reliability.md#chaos).
    c->tp = (uint32_t)s_range(st, 2, S_TP_MAX);
    if (cfg->tp)
        c->tp = cfg->tp;
    c->byte_scale = 1;
    uint64_t chunk = (uint64_t)c->planes * c->layers * c->token_bytes * c->chunk_size;
    c->hbm_pool_bytes = s_range(st, 2, 4) << 18; //  512 KiB .. 1 MiB: the working set spills
    c->cpu_pool_bytes = s_range(st, 64, 256) * chunk;
    c->agg_timeout_ns = S_AGG_TIMEOUT; //  1.5 ms of virtual time: below the lookup timeout,
                                       //  so a key settles before the scheduler gives up on it
    c->lane_deadline_ns = 2000000;     //  2 ms
    c->fence_timeout_ns = 4000000;     //  4 ms
    c->lookup_timeout_ns = 3000000;    //  3 ms
    c->lookup_ttl_ns = S_LOOKUP_TTL;   //  20 ms
    c->pool_ttl_ns = 50000000;         //  50 ms
    c->orphan_reclaim_us = 10000000;   //  10 s
    c->load_deadline_us = 5000000;     //  5 s
    c->lookup_pin = s_next(st) % 4 != 0;
    if (cfg->hybrid) {
        c->model = "qwen3-next-like";
        c->state_bytes = 2048;
        c->checkpoint_interval = c->chunk_size;
        c->max_running = (uint32_t)s_range(st, 4, 16);
        c->verify_hold_ns = 5000000;
    }
    if (bits & BIT(KVT_CHAOS_EVICT)) {
        //  A few requests' worth: hits, loads and evictions between them.
        c->cpu_pool_bytes = s_range(st, 40, 72) * chunk;
        c->lookup_pin = false; //  nothing holds a looked-up chunk until its load
    }
    if (bits & S_DISK_PLANS) {
        c->cpu_pool_bytes = s_range(st, 2, 6) * chunk;
        c->disk_pool_bytes = 64ull << 20;
        c->disk_write_on_evict = s_next(st) % 3 == 0;
    }
    if ((bits & BIT(KVT_CHAOS_DUPLICATE)) && cfg->hybrid)
        c->fault_miss_state = (uint32_t)s_range(st, 1, 4);
    if (bits & BIT(KVT_CHAOS_TINY_POOL)) //  the least the replay accepts: two chunks
        c->cpu_pool_bytes = 2 * chunk + s_range(st, 0, chunk - 1);
    c->limit = (uint32_t)s_range(st, 16, 48);
    //  One request in 3..6 aborted / preempted by the engine, each in the
    //  next phase in turn (kvt_sim_engine_core.h).
    if (bits & BIT(KVT_CHAOS_ABORT))
        c->fault_abort = (uint32_t)s_range(st, 3, 6);
    if (bits & BIT(KVT_CHAOS_PREEMPT))
        c->fault_preempt = (uint32_t)s_range(st, 3, 6);
}

int kvt_chaos_run(const kvt_chaos_cfg_t *cfg, kvt_chaos_result_t *res, char *err, size_t errlen)
{
    memset(res, 0, sizeof *res);
    uint64_t st = cfg->seed * 0x2545f4914f6cdd1dull + (uint64_t)cfg->plan;
    uint32_t bits = cfg->plan == KVT_CHAOS_NONE ? 0 : BIT(cfg->plan);
    if (cfg->plan == KVT_CHAOS_MIX) {
        bits = 0;
        uint32_t n = (uint32_t)s_range(&st, 2, 4);
        //  Of the plans the product handles (not the open defects).
        uint32_t open = BIT(KVT_CHAOS_LOST_VERDICT) | BIT(KVT_CHAOS_LATE_SPEC);
        //  Drawn from drop .. tiny-pool, abort and preempt (lane-stall,
        //  mix and late-spec are not drawn).
        static const kvt_chaos_plan_t more[] = {KVT_CHAOS_ABORT, KVT_CHAOS_PREEMPT};
        uint64_t span = KVT_CHAOS_TINY_POOL - KVT_CHAOS_DROP + 1;
        while (__builtin_popcount(bits) < (int)n) {
            uint64_t k = s_range(&st, 0, span + 1);
            bits |= BIT(k < span ? KVT_CHAOS_DROP + k : more[k - span]) & ~open;
        }
    }
    res->plans = bits;
    kvt_replay_cfg_t c;
    s_config(cfg, bits, &st, &c);
    char dir[512] = "";
    if (bits & S_DISK_PLANS) {
        const char *tmp = cfg->tmp_dir ? cfg->tmp_dir : getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/kvt-chaos-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(dir)) {
            snprintf(err, errlen, "cannot create a disk directory under %s: %s",
                     tmp && *tmp ? tmp : "/tmp", strerror(errno));
            return -1;
        }
        c.disk_dir = dir;
    }
    //  A pool that cannot hold one chunk is refused before any rank starts,
    //  naming the setting (rule C1).
    kvt_replay_cfg_t tiny = c;
    char why[256];
    tiny.cpu_pool_bytes = (uint64_t)c.planes * c.layers * c.token_bytes * c.chunk_size / 2;
    if ((bits & BIT(KVT_CHAOS_TINY_POOL)) &&
        (kvt_replay_validate(&tiny, why, sizeof why) == 0 || !strstr(why, "cpu-pool")))
        s_fail(res, "a CPU pool of half a chunk was not refused naming cpu-pool");
    s_plan_t *p = calloc(1, sizeof *p);
    kvt_replay_report_t *rep = calloc(1, sizeof *rep);
    int rc = -1;
    if (!p || !rep) {
        snprintf(err, errlen, "out of memory");
        goto cleanup;
    }
    p->cfg = cfg;
    p->rc = &c;
    p->st = st;
    s_draw(p, bits, c.tp, 500ull * c.limit);
    c.sim_run = s_sim_run;
    c.sim_run_arg = p;
    if (kvt_replay_run(&c, rep, err, errlen) != 0)
        goto cleanup;
    res->requests = rep->engine.requests;
    res->wrong_resumes = rep->engine.wrong_resumes;
    res->max_stall_us = rep->engine.max_stall_us;
    res->loads = kvt_replay_counter(rep, "scheduler", "sched.loads_dispatched");
    res->loads_failed = kvt_replay_counter(rep, "scheduler", "sched.loads_failed");
    res->saves_expired = kvt_replay_counter(rep, "scheduler", "sched.saves_expired");
    res->events = rep->events;
    res->trace_hash = rep->trace_hash;
    res->faults = p->faults + rep->engine.aborts_sent + rep->engine.preempts_sent;
    res->aborts = rep->engine.aborts_sent;
    res->preempts = rep->engine.preempts_sent;
    for (int i = 0; i < KVT_SIM_PHASES; i++)
        res->fault_phase[i] = rep->engine.fault_phase[i];
    if (bits & (BIT(KVT_CHAOS_EVICT) | BIT(KVT_CHAOS_TINY_POOL)))
        res->faults += kvt_replay_counter(rep, NULL, "pool.evictions");
    snprintf(res->desc, sizeof res->desc, "%s", p->desc);
    if (bits & BIT(KVT_CHAOS_LANE_STALL)) {
        size_t n = strlen(res->desc);
        snprintf(res->desc + n, sizeof res->desc - n,
                 "lane timeouts %llu, fences failed %llu, lane resets %llu",
                 (unsigned long long)kvt_replay_counter(rep, NULL, "worker.lane_timeouts"),
                 (unsigned long long)kvt_replay_counter(rep, NULL, "worker.fences_failed"),
                 (unsigned long long)kvt_replay_counter(rep, NULL, "worker.lane_resets"));
    }
    res->wedged = p->wedged || p->stalled || !rep->engine.done;
    s_check(p, rep, res);
    rc = 0;
cleanup:
    if (rep)
        kvt_replay_report_clear(rep);
    free(rep);
    free(p);
    if (dir[0])
        nftw(dir, s_rm, 16, FTW_DEPTH | FTW_PHYS);
    return rc;
}
