/*  kvt_ledger — see kvt_ledger.h. */
#include "kvt_ledger.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/kvt_hmap.h"

static const struct {
    const char *key;   //  JSON key
    const char *label; //  table label
} s_reasons[KVT_LOSS_COUNT] = {
    [KVT_LOSS_REJECTED] = {"rejected", "request rejected (too long for the pool)"},
    [KVT_LOSS_OTHER_INSTANCE] = {"other_instance", "prefix routed to another instance"},
    [KVT_LOSS_IN_FLIGHT] = {"in_flight", "not computed yet when admitted"},
    [KVT_LOSS_LOOKUP_TIMEOUT] = {"lookup_timeout", "tier lookup timed out"},
    [KVT_LOSS_HBM_KV] = {"hbm_kv", "capacity: HBM KV evicted"},
    [KVT_LOSS_CPU_CHUNK] = {"cpu_chunk", "capacity: CPU chunk evicted"},
    [KVT_LOSS_DISK] = {"disk", "capacity: gone from disk / remote"},
    [KVT_LOSS_CKPT_NEVER] = {"ckpt_never_taken", "no checkpoint: never taken"},
    [KVT_LOSS_HBM_CKPT] = {"hbm_ckpt", "no checkpoint: HBM checkpoint evicted"},
    [KVT_LOSS_CPU_IMAGE] = {"cpu_image", "no checkpoint: CPU image evicted"},
    [KVT_LOSS_MIN_LOAD] = {"below_min_load", "joint skipped: below min_load_tokens"},
    [KVT_LOSS_NO_PROBE] = {"no_probe_demand", "joint skipped: no probe demand"},
    [KVT_LOSS_NO_ROOM] = {"partial_chunk_no_room", "joint skipped: partial chunk, no room"},
    [KVT_LOSS_LOAD_FAILED] = {"load_failed", "load failed or retreated"},
    [KVT_LOSS_ABORTED] = {"aborted", "request aborted by the engine"},
    [KVT_LOSS_PREEMPTED] = {"preempted", "request preempted (admission undone)"},
};

//  The joint planner's reasons as the OUTCOME event carries them
//  (kvt_joint_reason_t; the replay does not include the scheduler's
//  private headers).
enum {
    S_J_OK = 0,
    S_J_TIER_WITHIN_HBM = 1,
    S_J_NO_RUNG = 2,
    S_J_MIN_LOAD = 3,
    S_J_NO_PROBE = 4,
    S_J_NO_ROOM = 5,
};

typedef struct {
    uint32_t ideal;      //  the trace's ideal (tokens)
    uint32_t ideal_inst; //  the ideal among its instance's requests
    uint32_t avail;      //  computed by its instance when it was admitted (grid)
    uint32_t gated;      //  ADMIT a: the HBM hit
    uint32_t chosen;     //  ADMIT a + b: the resume point decided
    uint32_t lost;       //  RETREAT c: HBM hit tokens a retreat could not keep
    uint32_t loaded;     //  LOADED b: tier tokens restored
    uint32_t lower;      //  LOADED c: of them, from below the CPU pool
    uint32_t computed;   //  prompt tokens its entries computed so far
    uint32_t touched;    //  depth of its chain entered in the computed map
    uint32_t carried;    //  tier KV found above its ideal (a warm tier)
    uint8_t member;      //  served by an instance fed so far
    uint8_t admits;      //  ADMIT events
    uint8_t outcomes;    //  OUTCOME events
    uint8_t ended;       //  FINISH seen
    uint8_t rejected;    //  FINISH said rejected
    uint8_t aborted;     //  FINISH said aborted
    uint8_t preempted;   //  admitted again under a newer generation
    uint32_t gen;        //  the generation of its first admission (0: none)
} s_req_t;

struct kvt_ledger_t {
    const kvt_workload_t *wl;      //  the workload (borrowed)
    kvt_ledger_cfg_t cfg;          //  geometry and tiers
    uint32_t grid;                 //  a resume's grid: the block
    s_req_t *req;                  //  per request of the workload
    uint64_t *chain;               //  per request, the hash of its first d ids at off[i] + d - 1
    uint64_t *off;                 //  per request, its chain's offset
    const uint32_t *global_of;     //  the current instance's request ids (NULL: identity)
    uint32_t ninst;                //  its requests
    bool warm;                     //  its lower tier may hold an earlier run's KV
    kvt_hmap_t *computed;          //  (chain hash, depth) → tokens computed under it
    kvt_hmap_t *taken;             //  (chain hash, boundary) → a checkpoint was taken there
    uint64_t loss[KVT_LOSS_COUNT]; //  losses charged at admissions and rejections
    uint64_t inconsistent;         //  requests whose facts are out of order
    char problem[200];             //  the first of them
};

const char *kvt_ledger_loss_key(kvt_loss_t reason)
{
    return reason < KVT_LOSS_COUNT ? s_reasons[reason].key : "?";
}

const char *kvt_ledger_loss_label(kvt_loss_t reason)
{
    return reason < KVT_LOSS_COUNT ? s_reasons[reason].label : "?";
}

uint64_t kvt_ledger_hits(const kvt_ledger_report_t *r)
{
    return r->hit_hbm + r->hit_cpu + r->hit_disk + r->hit_remote;
}

uint64_t kvt_ledger_losses(const kvt_ledger_report_t *r)
{
    uint64_t s = 0;
    for (int i = 0; i < KVT_LOSS_COUNT; i++)
        s += r->loss[i];
    return s;
}

void kvt_ledger_report_add(kvt_ledger_report_t *a, const kvt_ledger_report_t *b)
{
    a->input_tokens += b->input_tokens;
    a->ideal += b->ideal;
    a->hit_hbm += b->hit_hbm;
    a->hit_cpu += b->hit_cpu;
    a->hit_disk += b->hit_disk;
    a->hit_remote += b->hit_remote;
    a->carried += b->carried;
    for (int i = 0; i < KVT_LOSS_COUNT; i++)
        a->loss[i] += b->loss[i];
    a->requests += b->requests;
    a->inconsistent += b->inconsistent;
    if (!a->problem[0])
        snprintf(a->problem, sizeof a->problem, "%s", b->problem);
}

bool kvt_ledger_holds(const kvt_ledger_report_t *r, char *err, size_t errlen)
{
    uint64_t rhs = kvt_ledger_hits(r) + kvt_ledger_losses(r);
    if (rhs == r->ideal + r->carried && r->inconsistent == 0)
        return true;
    snprintf(err, errlen,
             "loss ledger: ideal %" PRIu64 " + carried %" PRIu64 " != hits %" PRIu64
             " + losses %" PRIu64 " (%" PRIu64 " request(s) inconsistent%s%s)",
             r->ideal, r->carried, kvt_ledger_hits(r), kvt_ledger_losses(r), r->inconsistent,
             r->problem[0] ? ": " : "", r->problem);
    return false;
}

void kvt_ledger_print(const kvt_ledger_report_t *r, FILE *out, const char *indent)
{
    double in = r->input_tokens ? (double)r->input_tokens : 1.0;
    fprintf(out, "%sloss ledger (shares of all %" PRIu64 " input tokens, rejected included)\n",
            indent, r->input_tokens);
    fprintf(out, "%s  %-44s %12" PRIu64 " %6.2f%%\n", indent, "ideal (KV only, unlimited)",
            r->ideal, 100.0 * (double)r->ideal / in);
    if (r->carried)
        fprintf(out, "%s  %-44s %12" PRIu64 " %6.2f%%\n", indent,
                "carried: tier KV from an earlier run", r->carried,
                100.0 * (double)r->carried / in);
    const struct {
        const char *name;
        uint64_t v;
    } hit[] = {{"hit: HBM", r->hit_hbm},
               {"hit: CPU", r->hit_cpu},
               {"hit: disk", r->hit_disk},
               {"hit: remote", r->hit_remote}};
    for (size_t i = 0; i < sizeof hit / sizeof hit[0]; i++)
        fprintf(out, "%s  %-44s %12" PRIu64 " %6.2f%%\n", indent, hit[i].name, hit[i].v,
                100.0 * (double)hit[i].v / in);
    uint32_t zero = 0;
    for (int i = 0; i < KVT_LOSS_COUNT; i++) {
        if (!r->loss[i]) {
            zero++;
            continue;
        }
        char name[64];
        snprintf(name, sizeof name, "lost: %s", s_reasons[i].label);
        fprintf(out, "%s  %-44s %12" PRIu64 " %6.2f%%\n", indent, name, r->loss[i],
                100.0 * (double)r->loss[i] / in);
    }
    char why[320];
    bool holds = kvt_ledger_holds(r, why, sizeof why);
    fprintf(out, "%s  (%u other reasons lost nothing) identity ideal%s = hits + losses: %s\n",
            indent, zero, r->carried ? " + carried" : "", holds ? "holds" : why);
}

int kvt_ledger_json(const kvt_ledger_report_t *r, json_t *root)
{
    json_t *l = json_object(), *hit = json_object(), *loss = json_object();
    int rc = l && hit && loss ? 0 : -1;
    rc |= json_object_set_new(l, "ideal", json_integer((json_int_t)r->ideal));
    rc |= json_object_set_new(l, "input_tokens", json_integer((json_int_t)r->input_tokens));
    rc |= json_object_set_new(l, "carried", json_integer((json_int_t)r->carried));
    rc |= json_object_set_new(hit, "hbm", json_integer((json_int_t)r->hit_hbm));
    rc |= json_object_set_new(hit, "cpu", json_integer((json_int_t)r->hit_cpu));
    rc |= json_object_set_new(hit, "disk", json_integer((json_int_t)r->hit_disk));
    rc |= json_object_set_new(hit, "remote", json_integer((json_int_t)r->hit_remote));
    for (int i = 0; i < KVT_LOSS_COUNT; i++)
        rc |= json_object_set_new(loss, s_reasons[i].key, json_integer((json_int_t)r->loss[i]));
    char why[320];
    rc |= json_object_set_new(l, "identity_holds",
                              json_boolean(kvt_ledger_holds(r, why, sizeof why)));
    rc |= json_object_set_new(l, "inconsistent", json_integer((json_int_t)r->inconsistent));
    rc |= json_object_set(l, "hit", hit);
    rc |= json_object_set(l, "loss", loss);
    rc |= json_object_set(root, "ledger", l);
    json_decref(l);
    json_decref(hit);
    json_decref(loss);
    return rc ? -1 : 0;
}

// --------------------------------------------------------------- chain ----

static inline uint64_t s_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

//  Hash of request i's first d block ids (d ≥ 1).
static inline uint64_t s_h(const kvt_ledger_t *self, uint32_t i, uint32_t d)
{
    return self->chain[self->off[i] + d - 1];
}

static inline kvt_hash_t s_key(uint64_t h, uint64_t x)
{
    return (kvt_hash_t){h, x};
}

static uint32_t s_depth(uint32_t tokens)
{
    return (tokens + KVT_WL_BLOCK_TOKENS - 1) / KVT_WL_BLOCK_TOKENS;
}

//  The ideal of request i against the requests entered in map (chain
//  hash, depth) → the longest prompt under it, then enters i. The deepest
//  depth present on i's chain gives the longest shared prefix: every
//  request under a deeper node shares more than any under a shallower one.
static uint32_t s_ideal(kvt_ledger_t *self, kvt_hmap_t *map, uint32_t i)
{
    const kvt_wreq_t *r = &self->wl->reqs[i];
    uint32_t shared = 0;
    for (uint32_t d = 1; d <= r->nids; d++) {
        uint32_t longest;
        if (!kvt_hmap_get(map, s_key(s_h(self, i, d), d), &longest))
            break;
        uint32_t s = d * KVT_WL_BLOCK_TOKENS;
        s = s < longest ? s : longest;
        shared = s < r->input_len ? s : r->input_len;
    }
    for (uint32_t d = 1; d <= r->nids; d++) {
        kvt_hash_t k = s_key(s_h(self, i, d), d);
        uint32_t longest = 0;
        (void)kvt_hmap_get(map, k, &longest);
        if (r->input_len > longest && kvt_hmap_put(map, k, r->input_len) != 0)
            return UINT32_MAX;
    }
    uint32_t cap = r->input_len > self->cfg.tail ? r->input_len - self->cfg.tail : 0;
    shared = shared < cap ? shared : cap;
    return shared / self->grid * self->grid;
}

// ------------------------------------------------------------ lifecycle ----

kvt_ledger_t *kvt_ledger_new(const kvt_workload_t *wl, const kvt_ledger_cfg_t *cfg)
{
    if (!wl || !cfg->block_size || !cfg->chunk_size || cfg->chunk_size % cfg->block_size)
        return NULL;
    kvt_ledger_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->wl = wl;
    self->cfg = *cfg;
    self->grid = cfg->block_size;
    uint32_t n = wl->n ? wl->n : 1;
    uint64_t ids = 0;
    for (uint32_t i = 0; i < wl->n; i++)
        ids += wl->reqs[i].nids;
    self->req = calloc(n, sizeof *self->req);
    self->off = calloc(n, sizeof *self->off);
    self->chain = calloc(ids ? ids : 1, sizeof *self->chain);
    self->computed = kvt_hmap_new(1024, false);
    self->taken = kvt_hmap_new(1024, false);
    kvt_hmap_t *ideal = kvt_hmap_new((uint32_t)(ids < (1u << 30) ? ids : 1u << 30), false);
    if (!self->req || !self->off || !self->chain || !self->computed || !self->taken || !ideal)
        goto fail;
    uint64_t at = 0;
    for (uint32_t i = 0; i < wl->n; i++) {
        const kvt_wreq_t *r = &wl->reqs[i];
        self->off[i] = at;
        uint64_t h = 0x6c6564676572ull; //  "ledger"
        for (uint32_t d = 0; d < r->nids; d++) {
            h = s_mix(h ^ ((uint64_t)r->ids[d] * 0x9E3779B97F4A7C15ull + d + 1));
            self->chain[at++] = h;
        }
    }
    for (uint32_t i = 0; i < wl->n; i++) {
        uint32_t v = s_ideal(self, ideal, i);
        if (v == UINT32_MAX)
            goto fail;
        self->req[i].ideal = v;
    }
    kvt_hmap_destroy(&ideal);
    return self;
fail:
    kvt_hmap_destroy(&ideal);
    kvt_ledger_destroy(&self);
    return NULL;
}

void kvt_ledger_destroy(kvt_ledger_t **self_p)
{
    kvt_ledger_t *self = *self_p;
    if (!self)
        return;
    free(self->req);
    free(self->off);
    free(self->chain);
    kvt_hmap_destroy(&self->computed);
    kvt_hmap_destroy(&self->taken);
    free(self);
    *self_p = NULL;
}

uint32_t kvt_ledger_ideal(const kvt_ledger_t *self, uint32_t i)
{
    return i < self->wl->n ? self->req[i].ideal : 0;
}

int kvt_ledger_instance(kvt_ledger_t *self, const uint32_t *global_of, uint32_t n)
{
    self->global_of = global_of;
    self->ninst = global_of ? n : self->wl->n;
    kvt_hmap_clear(self->computed);
    kvt_hmap_clear(self->taken);
    kvt_hmap_t *ideal = kvt_hmap_new(1024, false);
    if (!ideal)
        return -1;
    for (uint32_t j = 0; j < self->ninst; j++) {
        uint32_t g = global_of ? global_of[j] : j;
        if (g >= self->wl->n)
            continue;
        uint32_t v = s_ideal(self, ideal, g);
        if (v == UINT32_MAX) {
            kvt_hmap_destroy(&ideal);
            return -1;
        }
        self->req[g].ideal_inst = v;
        self->req[g].member = 1;
    }
    kvt_hmap_destroy(&ideal);
    return 0;
}

void kvt_ledger_warm(kvt_ledger_t *self, bool warm)
{
    self->warm = warm;
}

// ---------------------------------------------------------------- plans ----

static void s_inconsistent(kvt_ledger_t *self, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void s_inconsistent(kvt_ledger_t *self, const char *fmt, ...)
{
    self->inconsistent++;
    if (self->problem[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(self->problem, sizeof self->problem, fmt, ap);
    va_end(ap);
}

//  The instance's request id as an index of the workload (UINT32_MAX: none).
static uint32_t s_global(const kvt_ledger_t *self, uint64_t req)
{
    if (req >= self->ninst)
        return UINT32_MAX;
    uint32_t g = self->global_of ? self->global_of[req] : (uint32_t)req;
    return g < self->wl->n ? g : UINT32_MAX;
}

//  Tokens of request g's prompt its instance had computed (any request's
//  entries), on the grid, below the tail.
static uint32_t s_avail(const kvt_ledger_t *self, uint32_t g)
{
    const kvt_wreq_t *r = &self->wl->reqs[g];
    uint32_t best = 0;
    for (uint32_t d = 1; d <= r->nids; d++) {
        uint32_t v;
        if (!kvt_hmap_get(self->computed, s_key(s_h(self, g, d), d), &v))
            break; //  depths are entered from 1 up: none deeper
        best = v;
    }
    uint32_t cap = r->input_len > self->cfg.tail ? r->input_len - self->cfg.tail : 0;
    best = best < r->input_len ? best : r->input_len;
    best = best < cap ? best : cap;
    return best / self->grid * self->grid;
}

//  Request g's entries computed its prompt up to end.
static void s_progress(kvt_ledger_t *self, uint32_t g, uint32_t end)
{
    s_req_t *q = &self->req[g];
    const kvt_wreq_t *r = &self->wl->reqs[g];
    uint32_t c = end < r->input_len ? end : r->input_len;
    if (c <= q->computed)
        return;
    uint32_t d0 = q->touched ? q->touched : 1, d1 = s_depth(c);
    for (uint32_t d = d0; d <= d1; d++) {
        kvt_hash_t k = s_key(s_h(self, g, d), d);
        uint32_t cover = d * KVT_WL_BLOCK_TOKENS < c ? d * KVT_WL_BLOCK_TOKENS : c, v = 0;
        (void)kvt_hmap_get(self->computed, k, &v);
        if (cover > v && kvt_hmap_put(self->computed, k, cover) != 0) {
            s_inconsistent(self, "out of memory tracking computed prefixes");
            return;
        }
    }
    q->computed = c;
    q->touched = d1;
}

//  A checkpoint was taken at boundary t of request g's prompt.
static void s_take(kvt_ledger_t *self, uint32_t g, uint32_t t)
{
    const kvt_wreq_t *r = &self->wl->reqs[g];
    if (t == 0 || t > r->input_len)
        return; //  beyond the prompt: no other prompt shares decoded tokens
    if (kvt_hmap_put(self->taken, s_key(s_h(self, g, s_depth(t)), t), 1) != 0)
        s_inconsistent(self, "out of memory tracking checkpoints");
}

static bool s_was_taken(const kvt_ledger_t *self, uint32_t g, uint32_t t)
{
    uint32_t v;
    return t > 0 && kvt_hmap_get(self->taken, s_key(s_h(self, g, s_depth(t)), t), &v);
}

//  Charges [floor, *level) of request g to reason and lowers *level; a
//  floor above the level means the facts are out of order.
static void s_charge(kvt_ledger_t *self, uint32_t g, kvt_loss_t reason, uint32_t floor,
                     uint32_t *level, bool *bad)
{
    if (floor > *level) {
        if (!*bad)
            s_inconsistent(self,
                           "request %u: %s floor %u above %u (ideal %u, instance ideal %u, "
                           "computed %u, chosen %u)",
                           g, s_reasons[reason].key, floor, *level, self->req[g].ideal,
                           self->req[g].ideal_inst, self->req[g].avail, self->req[g].chosen);
        *bad = true;
        return;
    }
    self->loss[reason] += *level - floor;
    *level = floor;
}

//  The checkpoint losses of request g from *level down to floor, chunk by
//  chunk: the chunk ending at c is lost for want of a checkpoint at c.
static void s_no_ckpt(kvt_ledger_t *self, uint32_t g, uint32_t floor, uint32_t *level, bool *bad)
{
    uint32_t cs = self->cfg.chunk_size;
    kvt_loss_t evicted = self->cfg.state_tier ? KVT_LOSS_CPU_IMAGE : KVT_LOSS_HBM_CKPT;
    while (*level > floor && !*bad) {
        uint32_t c = *level, lo = (c - 1) / cs * cs;
        lo = lo > floor ? lo : floor;
        s_charge(self, g, s_was_taken(self, g, c) ? evicted : KVT_LOSS_CKPT_NEVER, lo, level, bad);
    }
    s_charge(self, g, KVT_LOSS_CKPT_NEVER, floor, level, bad);
}

//  What an admission found (OUTCOME: a = KV in HBM, b = tier KV, c = flags).
static void s_outcome(kvt_ledger_t *self, uint32_t g, const kvt_event_t *ev)
{
    s_req_t *q = &self->req[g];
    if (++q->outcomes > 1 || q->admits != 1) {
        s_inconsistent(self, "request %u: outcome %u after %u admission(s)", g, q->outcomes,
                       q->admits);
        return;
    }
    uint32_t cs = self->cfg.chunk_size, grid = self->grid;
    uint32_t level = q->ideal;
    bool bad = false;
    uint32_t kv_hbm = ev->a / grid * grid;
    uint32_t kv = ev->b > kv_hbm ? ev->b : kv_hbm;
    //  A warm tier's KV above the ideal is an earlier run's: carried. Below
    //  what it held, the prefix was neither elsewhere nor in flight.
    uint32_t held = self->warm ? ev->b : 0;
    if (held > level) {
        q->carried = held - level;
        level = held;
    }
    s_charge(self, g, KVT_LOSS_OTHER_INSTANCE, q->ideal_inst > held ? q->ideal_inst : held, &level,
             &bad);
    s_charge(self, g, KVT_LOSS_IN_FLIGHT, q->avail > held ? q->avail : held, &level, &bad);
    if (ev->c & KVT_EV_OUTCOME_LOOKUP_TIMEOUT)
        s_charge(self, g, KVT_LOSS_LOOKUP_TIMEOUT, kv, &level, &bad);
    else {
        //  Only HBM holds the part above the last full chunk.
        uint32_t chunked = level / cs * cs;
        s_charge(self, g, KVT_LOSS_HBM_KV, kv > chunked ? kv : chunked, &level, &bad);
        kvt_loss_t low = self->cfg.disk_tier || self->cfg.remote_tier ? KVT_LOSS_DISK
                         : self->cfg.cpu_tier                         ? KVT_LOSS_CPU_CHUNK
                                                                      : KVT_LOSS_HBM_KV;
        s_charge(self, g, low, kv, &level, &bad);
    }
    if (self->cfg.hybrid && !bad) {
        uint32_t reason = KVT_EV_OUTCOME_REASON(ev->c);
        uint32_t cand = KVT_EV_OUTCOME_CAND(ev->c) * cs;
        kvt_loss_t skip = reason == S_J_MIN_LOAD   ? KVT_LOSS_MIN_LOAD
                          : reason == S_J_NO_PROBE ? KVT_LOSS_NO_PROBE
                          : reason == S_J_NO_ROOM  ? KVT_LOSS_NO_ROOM
                                                   : KVT_LOSS_COUNT;
        if (skip != KVT_LOSS_COUNT && cand > q->chosen) {
            s_no_ckpt(self, g, cand, &level, &bad);
            s_charge(self, g, skip, q->chosen, &level, &bad);
        } else
            s_no_ckpt(self, g, q->chosen, &level, &bad);
    }
    //  A dense admission loads whatever the tier holds above HBM; a load
    //  the plan could not carry is a failed one.
    s_charge(self, g, KVT_LOSS_LOAD_FAILED, q->chosen, &level, &bad);
}

static void s_event(kvt_ledger_t *self, const kvt_event_t *ev)
{
    uint32_t g = s_global(self, ev->op.req);
    if (g == UINT32_MAX) {
        s_inconsistent(self, "an event names request %" PRIu64 ", not in the instance", ev->op.req);
        return;
    }
    s_req_t *q = &self->req[g];
    //  Only the first admission is read: a later one's events follow a
    //  preemption (kvt_ledger.h).
    if (ev->type != KVT_EV_FINISH && q->admits && ev->op.gen != q->gen) {
        if (ev->type == KVT_EV_ADMIT)
            q->preempted = 1;
        return;
    }
    switch (ev->type) {
    case KVT_EV_ADMIT:
        q->gen = ev->op.gen;
        if (++q->admits > 1) {
            s_inconsistent(self, "request %u admitted %u times", g, q->admits);
            break;
        }
        q->gated = ev->a;
        q->chosen = ev->a + ev->b;
        q->avail = s_avail(self, g);
        break;
    case KVT_EV_OUTCOME:
        s_outcome(self, g, ev);
        break;
    case KVT_EV_LOADED:
        q->loaded += ev->b;
        q->lower += ev->c < ev->b ? ev->c : ev->b;
        break;
    case KVT_EV_RETREAT:
        q->lost += ev->c;
        break;
    case KVT_EV_FINISH:
        if (q->ended)
            break; //  the engine drops a repeated FINISH too
        q->ended = 1;
        if (ev->c == KVT_FINISH_REJECTED) {
            q->rejected = 1;
            self->loss[KVT_LOSS_REJECTED] += q->ideal;
        } else if (ev->c == KVT_FINISH_ABORTED) {
            q->aborted = 1;
            if (!q->admits) //  never admitted: its whole ideal
                self->loss[KVT_LOSS_ABORTED] += q->ideal;
        }
        break;
    default:
        break;
    }
}

void kvt_ledger_plan(kvt_ledger_t *self, const kvt_step_plan_t *p)
{
    //  Admissions weigh what earlier plans computed: events first.
    for (uint32_t i = 0; i < p->nevents; i++)
        s_event(self, &p->events[i]);
    for (uint32_t i = 0; i < p->nentries; i++) {
        const kvt_entry_t *e = &p->entries[i];
        uint32_t g = s_global(self, e->op.req);
        if (g == UINT32_MAX)
            continue; //  the engine counts entries for no request
        s_progress(self, g, e->end);
        if (e->state && e->take_at)
            s_take(self, g, e->take_at);
    }
}

void kvt_ledger_report(const kvt_ledger_t *self, kvt_ledger_report_t *out)
{
    memset(out, 0, sizeof *out);
    out->inconsistent = self->inconsistent;
    snprintf(out->problem, sizeof out->problem, "%s", self->problem);
    memcpy(out->loss, self->loss, sizeof out->loss);
    for (uint32_t g = 0; g < self->wl->n; g++) {
        const s_req_t *q = &self->req[g];
        if (!q->member)
            continue;
        out->requests++;
        out->input_tokens += self->wl->reqs[g].input_len;
        out->ideal += q->ideal;
        bool never = q->rejected || (q->aborted && q->admits == 0);
        bool fine = q->ended && (never ? q->admits == 0 : q->admits == 1 && q->outcomes == 1);
        if (!fine) {
            out->inconsistent++;
            if (!out->problem[0])
                snprintf(out->problem, sizeof out->problem,
                         "request %u: %s, %u admission(s), %u outcome(s)", g,
                         q->ended ? "ended" : "never ended", q->admits, q->outcomes);
            continue;
        }
        if (never)
            continue;
        if (q->preempted) {
            //  Its admission was undone: what it chose goes, no hit.
            out->loss[KVT_LOSS_PREEMPTED] += q->chosen;
            continue;
        }
        uint32_t hbm = q->gated > q->lost ? q->gated - q->lost : 0;
        uint64_t resumed = (uint64_t)hbm + q->loaded;
        out->carried += q->carried;
        out->hit_hbm += hbm;
        out->hit_cpu += q->loaded - q->lower;
        if (self->cfg.disk_tier || !self->cfg.remote_tier)
            out->hit_disk += q->lower;
        else
            out->hit_remote += q->lower;
        if (resumed > q->chosen || q->lost > q->gated) {
            out->inconsistent++;
            if (!out->problem[0])
                snprintf(out->problem, sizeof out->problem,
                         "request %u resumed %" PRIu64 " tokens, more than the %u chosen", g,
                         resumed, q->chosen);
            continue;
        }
        out->loss[q->aborted ? KVT_LOSS_ABORTED : KVT_LOSS_LOAD_FAILED] += q->chosen - resumed;
    }
}
