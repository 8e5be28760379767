/*  kvt_msg_sample.c — deterministic valid messages of every kind and shape,
    for the codec's tests, the fuzz corpus and other areas' tests.
*/
#include "kvt_msg_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

//  Deterministic value stream (splitmix64).
typedef struct {
    uint64_t state; //  advances by the golden-ratio constant
} s_rng_t;

static uint64_t s_next(s_rng_t *rng)
{
    uint64_t z = (rng->state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static kvt_hash_t s_hash(s_rng_t *rng)
{
    kvt_hash_t h = {.hi = s_next(rng), .lo = s_next(rng)};
    return h;
}

//  Allocation for a sample; *ok goes false when it fails.
static void *s_calloc(size_t n, size_t size, bool *ok)
{
    if (n == 0)
        return NULL;
    void *p = calloc(n, size);
    if (!p)
        *ok = false;
    return p;
}

static uint32_t *s_blocks(s_rng_t *rng, uint32_t n, bool *ok)
{
    uint32_t *blocks = s_calloc(n, sizeof *blocks, ok);
    for (uint32_t i = 0; blocks && i < n; i++)
        blocks[i] = (uint32_t)s_next(rng);
    return blocks;
}

static kvt_hash_t *s_hashes(s_rng_t *rng, uint32_t n, uint32_t zero_tail, bool *ok)
{
    kvt_hash_t *hashes = s_calloc(n, sizeof *hashes, ok);
    for (uint32_t i = 0; hashes && i + zero_tail < n; i++)
        hashes[i] = s_hash(rng);
    return hashes;
}

static void s_entry(s_rng_t *rng, kvt_entry_t *e, uint32_t nblocks, bool verify, bool *ok)
{
    e->op.req = s_next(rng) >> 8;
    e->op.gen = 1 + (uint32_t)(s_next(rng) % 5);
    uint32_t span = 16 * (nblocks ? nblocks : 1);
    if (verify) {
        //  First forward after a cache hit: verify [0, start), blocks from 0.
        e->first_block = 0;
        e->start = 16 * (nblocks / 2);
        e->end = span - 1;
        e->verify_end = e->start;
        //  A hybrid resume (no draws: the other samples stay as they were):
        //  restore the checkpoint at start, take one at end.
        e->state = true;
        e->state_slot = e->op.gen;
        e->restore_at = e->start;
        e->restore_unit = e->start ? nblocks : 0;
        e->take_at = e->end;
        e->take_unit = nblocks + 1;
    } else {
        e->first_block = (uint32_t)(s_next(rng) % 64);
        e->start = e->first_block * 16 + 3;
        e->end = e->first_block * 16 + span;
        e->verify_end = 0;
    }
    e->nblocks = nblocks;
    e->blocks = s_blocks(rng, nblocks, ok);
    e->hashes = s_hashes(rng, nblocks, nblocks > 1 ? 1 : 0, ok); //  last block partial
}

static void s_spec(s_rng_t *rng, kvt_load_spec_t *s, uint32_t nkeys, uint32_t nblocks, bool *ok)
{
    s->op.req = s_next(rng) >> 4;
    s->op.gen = 1 + (uint32_t)(s_next(rng) % 3);
    s->start = 256 * (uint32_t)(s_next(rng) % 8);
    s->end = s->start + 256 * (nkeys ? nkeys : 1);
    s->nkeys = nkeys;
    s->keys = s_hashes(rng, nkeys, 0, ok);
    s->nblocks = nblocks;
    s->blocks = s_blocks(rng, nblocks, ok);
    s->attempt = 1 + (uint32_t)(s_next(rng) % 3);
}

//  A state leg at the spec's end (both legs), or a state-only spec.
static void s_state_leg(s_rng_t *rng, kvt_load_spec_t *s, bool save, bool only)
{
    if (only) {
        s->start = s->end = 0;
        s->nkeys = s->nblocks = 0;
        free(s->keys);
        free(s->blocks);
        s->keys = NULL;
        s->blocks = NULL;
        s->state_boundary = 256 * (1 + (uint32_t)(s_next(rng) % 8));
    } else {
        s->state_boundary = s->end;
    }
    s->state_hash = s_hash(rng);
    s->state_slot = 1 + (uint32_t)(s_next(rng) % 7);
    if (save) {
        s->image = true;
        s->producer = 1 + s_next(rng) % 100;
        s->producer_failed = true;
    } else {
        s->state = true;
        s->after = only ? 0 : 1 + s_next(rng) % 100;
    }
}

static void s_event(s_rng_t *rng, kvt_event_t *ev, uint8_t type)
{
    ev->op.req = s_next(rng) >> 16;
    ev->op.gen = 1 + (uint32_t)(s_next(rng) % 4);
    ev->type = type;
    ev->a = (uint32_t)s_next(rng);
    ev->b = (uint32_t)(s_next(rng) % 1000);
    ev->c = type == KVT_EV_ADMIT ? 4096 : 0;
}

//  A lookup report's shape: chan LOOKUP, held chunks and an image bitmap
//  with no bit at or past held (every chunk imaged at max).
static void s_images(bool max, uint8_t *chan, uint32_t *held, uint8_t **images, uint32_t *n,
                     bool *ok)
{
    *chan = KVT_CHAN_LOOKUP;
    *held = max ? KVT_MSG_MAX_CHUNKS : 10;
    *n = max ? KVT_MSG_MAX_IMAGES : 2;
    *images = s_calloc(*n, 1, ok);
    if (!*images)
        return;
    if (max) {
        memset(*images, 0xff, *n);
    } else {
        (*images)[0] = 0xa5;
        (*images)[1] = 0x02;
    }
}

//  Entries / loads / saves shared by StepPlan and StepExec.
static void s_step_arrays(s_rng_t *rng, int shape, kvt_entry_t **entries, uint32_t *nentries,
                          kvt_load_spec_t **loads, uint32_t *nloads, kvt_save_spec_t **saves,
                          uint32_t *nsaves, bool *ok)
{
    uint32_t ne = shape == KVT_SAMPLE_MAX ? KVT_MSG_MAX_ENTRIES : 3;
    uint32_t ns = shape == KVT_SAMPLE_MAX ? KVT_MSG_MAX_ENTRIES : 2;
    *entries = s_calloc(ne, sizeof **entries, ok);
    *loads = s_calloc(ns, sizeof **loads, ok);
    *saves = s_calloc(ns, sizeof **saves, ok);
    if (!*ok)
        return;
    *nentries = ne;
    *nloads = ns;
    *nsaves = ns;
    for (uint32_t i = 0; i < ne; i++) {
        uint32_t nb = shape == KVT_SAMPLE_MAX ? (i == 0 ? KVT_MSG_MAX_BLOCKS : 1) : 1 + i * 7;
        s_entry(rng, &(*entries)[i], nb, i == 1, ok);
    }
    for (uint32_t i = 0; i < ns; i++) {
        bool big = shape == KVT_SAMPLE_MAX && i == 0;
        s_spec(rng, &(*loads)[i], big ? KVT_MSG_MAX_CHUNKS : 1 + i % 2,
               big ? KVT_MSG_MAX_BLOCKS : 16, ok);
        (*loads)[i].lookup = true;
        s_spec(rng, &(*saves)[i], big ? KVT_MSG_MAX_CHUNKS : 2 - i % 2,
               big ? KVT_MSG_MAX_BLOCKS : 32, ok);
        if (shape != KVT_SAMPLE_MAX && *ok) {
            //  [0]: both legs, [1]: state-only load / image-only save.
            s_state_leg(rng, &(*loads)[i], false, i == 1);
            s_state_leg(rng, &(*saves)[i], true, i == 1);
        }
    }
}

//  A report's key and op per channel shape: a touch report (gen
//  KVT_TOUCH_GEN, key the prefix hash), a fence report (key zero).
static void s_fill(kvt_msg_t *msg, int shape, s_rng_t *rng, bool *ok)
{
    bool max = shape == KVT_SAMPLE_MAX;
    bool min = shape == KVT_SAMPLE_MIN;
    bool alt1 = shape == KVT_SAMPLE_ALT1;
    bool alt2 = shape == KVT_SAMPLE_ALT2;
    switch (msg->kind) {
    case KVT_MSG_PING: {
        kvt_ping_t *p = &msg->u.ping;
        p->seq = max ? UINT64_MAX : min ? 0 : 42;
        p->npayload = max ? KVT_MSG_MAX_BYTES : min ? 0 : 37;
        p->payload = s_calloc(p->npayload, 1, ok);
        for (uint32_t i = 0; p->payload && i < p->npayload; i++)
            p->payload[i] = (uint8_t)s_next(rng);
        break;
    }
    case KVT_MSG_SCHEDULE: {
        kvt_schedule_t *s = &msg->u.schedule;
        s->step = max ? UINT64_MAX : min ? 0 : 7;
        s->now_us = max ? UINT64_MAX : min ? 0 : 1234567;
        s->prev_failed = !min;
        s->narrivals = max ? KVT_MSG_MAX_ENTRIES : min ? 0 : 3;
        s->arrivals = s_calloc(s->narrivals, sizeof *s->arrivals, ok);
        for (uint32_t i = 0; s->arrivals && i < s->narrivals; i++) {
            kvt_arrival_t *a = &s->arrivals[i];
            static const uint32_t typical[3] = {5, 17, 300};
            a->req = max ? UINT64_MAX - i : 1000 + i;
            a->ntokens = max ? (i == 0 ? KVT_MSG_MAX_TOKENS : 1) : typical[i % 3];
            a->tokens = s_blocks(rng, a->ntokens, ok);
            a->max_new_tokens = max ? UINT32_MAX : 1 + i * 50;
            a->arrival_us = max ? UINT64_MAX : 1000000 + 333 * i;
        }
        s->naborts = max ? KVT_MSG_MAX_ENTRIES : min ? 0 : 2;
        s->aborts = s_calloc(s->naborts, sizeof *s->aborts, ok);
        for (uint32_t i = 0; s->aborts && i < s->naborts; i++)
            s->aborts[i] = max ? UINT64_MAX - i : 2000 + i;
        s->npreempts = max ? KVT_MSG_MAX_ENTRIES : min ? 0 : 3;
        s->preempts = s_calloc(s->npreempts, sizeof *s->preempts, ok);
        for (uint32_t i = 0; s->preempts && i < s->npreempts; i++)
            s->preempts[i] = max ? UINT64_MAX - 4096 - i : 3000 + i;
        break;
    }
    case KVT_MSG_STEP_PLAN: {
        kvt_step_plan_t *p = &msg->u.step_plan;
        p->step = max ? UINT64_MAX : min ? 0 : 7;
        p->idle = min;
        if (min)
            break;
        s_step_arrays(rng, shape, &p->entries, &p->nentries, &p->loads, &p->nloads, &p->saves,
                      &p->nsaves, ok);
        p->nevents = max ? KVT_MSG_MAX_ENTRIES : KVT_EV_MAX;
        p->events = s_calloc(p->nevents, sizeof *p->events, ok);
        for (uint32_t i = 0; p->events && i < p->nevents; i++)
            s_event(rng, &p->events[i], (uint8_t)(1 + i % KVT_EV_MAX));
        break;
    }
    case KVT_MSG_STEP_EXEC: {
        kvt_step_exec_t *x = &msg->u.step_exec;
        x->step = max ? UINT64_MAX : min ? 0 : 7;
        x->rank = max ? KVT_MSG_MAX_RANKS - 1 : min ? 0 : 3;
        if (!min)
            s_step_arrays(rng, shape, &x->entries, &x->nentries, &x->loads, &x->nloads, &x->saves,
                          &x->nsaves, ok);
        break;
    }
    case KVT_MSG_STEP_DONE: {
        kvt_step_done_t *d = &msg->u.step_done;
        d->step = max ? UINT64_MAX : min ? 0 : 7;
        d->rank = max ? KVT_MSG_MAX_RANKS - 1 : min ? 0 : 1;
        d->ok = !min && !max;
        d->blocks_written = max ? UINT32_MAX : min ? 0 : 48;
        d->blocks_verified = max ? UINT32_MAX : min ? 0 : 16;
        d->detail = max ? KVT_DETAIL_MAX : 0;
        d->nwrong = max ? KVT_MSG_MAX_ENTRIES : min ? 0 : 2;
        d->wrong = s_calloc(d->nwrong, sizeof *d->wrong, ok);
        for (uint32_t i = 0; d->wrong && i < d->nwrong; i++)
            d->wrong[i] = max ? UINT64_MAX - i : s_next(rng);
        break;
    }
    case KVT_MSG_LOAD_SPEC:
    case KVT_MSG_SAVE_SPEC: {
        kvt_load_spec_t *s = &msg->u.load_spec;
        if (min) {
            s->op.gen = 1;
            s->end = 1;
        } else if (max) {
            s_spec(rng, s, KVT_MSG_MAX_CHUNKS, KVT_MSG_MAX_BLOCKS, ok);
            s->op.req = UINT64_MAX;
            s->op.gen = KVT_MSG_MAX_GEN;
            s->start = UINT32_MAX - 1;
            s->end = UINT32_MAX;
        } else {
            s_spec(rng, s, 2, 32, ok);
        }
        if (max)
            s->attempt = UINT32_MAX;
        s->lookup = msg->kind == KVT_MSG_LOAD_SPEC && !min;
        bool save = msg->kind == KVT_MSG_SAVE_SPEC;
        if (max) {
            s->state_boundary = UINT32_MAX;
            s->state_hash = (kvt_hash_t){.hi = UINT64_MAX, .lo = UINT64_MAX};
            s->state_slot = UINT32_MAX;
            if (save) {
                s->image = true;
                s->producer = UINT64_MAX;
                s->producer_failed = true;
            } else {
                s->state = true;
                s->after = UINT64_MAX;
            }
        } else if (!min && *ok) {
            s_state_leg(rng, s, save, alt1);
        }
        break;
    }
    case KVT_MSG_COMPLETION: {
        //  MIN: a load; TYPICAL: a lookup (held, images); MAX: a store report
        //  (fenced, every scalar at its top); ALT1: a touch; ALT2: a fence.
        kvt_completion_t *c = &msg->u.completion;
        c->chan = max    ? KVT_CHAN_SAVE
                  : min  ? KVT_CHAN_LOAD
                  : alt1 ? KVT_CHAN_TOUCH
                  : alt2 ? KVT_CHAN_FENCE
                         : KVT_CHAN_LOOKUP;
        c->op.req = max ? UINT64_MAX : min ? 0 : 77;
        c->op.gen = max ? KVT_MSG_MAX_GEN : min || alt1 || alt2 ? 1 : 2;
        if (max)
            c->key = (kvt_hash_t){.hi = UINT64_MAX, .lo = UINT64_MAX};
        else if (alt1)
            c->key = s_hash(rng);
        c->rank = max ? KVT_MSG_MAX_RANKS - 1 : min ? 0 : 5;
        c->ok = !min && !max && !alt2;
        c->detail = max ? KVT_DETAIL_MAX : alt2 ? KVT_DETAIL_TIMEOUT : 0;
        c->attempt = max ? UINT32_MAX : min ? 0 : 2;
        c->lower = max ? KVT_MSG_MAX_CHUNKS : min ? 0 : 3;
        c->epoch = max ? UINT64_MAX : min ? 0 : 3;
        c->touch = alt1 ? 1 : 0;
        c->fenced = max;
        if (!min && !max && !alt1 && !alt2) {
            s_images(false, &c->chan, &c->held, &c->images, &c->nimages, ok);
            c->rank0_only = true;
        }
        break;
    }
    case KVT_MSG_VERDICT: {
        //  MIN: a load; TYPICAL and MAX: a lookup (MAX: every image bit);
        //  ALT1: a touch_refresh; ALT2: a fenced store verdict.
        kvt_verdict_t *v = &msg->u.verdict;
        v->chan = min    ? KVT_CHAN_LOAD
                  : alt1 ? KVT_CHAN_TOUCH_REFRESH
                  : alt2 ? KVT_CHAN_SAVE
                         : KVT_CHAN_LOOKUP;
        v->op.req = max ? UINT64_MAX : min ? 0 : 77;
        v->op.gen = max ? KVT_MSG_MAX_GEN : min || alt1 ? 1 : 2;
        if (alt1 || alt2)
            v->key = s_hash(rng);
        v->ok = !min && !max;
        v->detail = max ? KVT_DETAIL_MAX : 0;
        v->nfailed = max ? KVT_MSG_MAX_RANKS : 0;
        v->attempt = max ? UINT32_MAX : min ? 0 : 2;
        v->lower = max ? KVT_MSG_MAX_CHUNKS : min ? 0 : 3;
        v->touch = alt1 ? KVT_MSG_MAX_TOUCH : 0;
        v->fenced = alt2;
        if (!min && !alt1 && !alt2)
            s_images(max, &v->chan, &v->held, &v->images, &v->nimages, ok);
        break;
    }
    case KVT_MSG_TOUCH: {
        kvt_touch_msg_t *t = &msg->u.touch;
        if (max)
            t->hash = (kvt_hash_t){.hi = UINT64_MAX, .lo = UINT64_MAX};
        else if (!min)
            t->hash = s_hash(rng);
        t->round = max ? UINT64_MAX : min ? 0 : 9;
        t->nkeys = max ? KVT_MSG_MAX_CHUNKS : min ? 0 : 3;
        t->keys = s_hashes(rng, t->nkeys, 0, ok);
        break;
    }
    case KVT_MSG_LOOKUP: {
        kvt_lookup_t *l = &msg->u.lookup;
        l->op.req = max ? UINT64_MAX : min ? 0 : 55;
        l->op.gen = max ? KVT_MSG_MAX_GEN : min ? 1 : 2;
        l->nkeys = max ? KVT_MSG_MAX_CHUNKS : min ? 0 : 4;
        l->keys = s_hashes(rng, l->nkeys, 0, ok);
        l->pin = !min;
        l->ttl_ms = max ? UINT32_MAX : min ? 0 : 500;
        l->rank0_only = !min;
        break;
    }
    case KVT_MSG_LOOKUP_RELEASE: {
        kvt_lookup_release_t *r = &msg->u.lookup_release;
        r->op.req = max ? UINT64_MAX : min ? 0 : 55;
        r->op.gen = max ? KVT_MSG_MAX_GEN : min ? 1 : 2;
        break;
    }
    case KVT_MSG_FENCE: {
        kvt_fence_msg_t *f = &msg->u.fence;
        f->id = max ? UINT64_MAX : min ? 0 : 12;
        f->lanes = max   ? KVT_FENCE_LANES_ALL
                   : min ? 0
                         : (uint8_t)(KVT_FENCE_LANE_LOAD | KVT_FENCE_LANE_SAVE);
        break;
    }
    case KVT_MSG_STATS: {
        kvt_stats_t *s = &msg->u.stats;
        s->request = min;
        if (max)
            memset(s->from, 'w', KVT_MSG_MAX_NAME);
        else if (!min)
            snprintf(s->from, sizeof s->from, "worker0");
        s->ncounters = max ? KVT_MSG_MAX_STATS : min ? 0 : 5;
        s->counters = s_calloc(s->ncounters, sizeof *s->counters, ok);
        for (uint32_t i = 0; s->counters && i < s->ncounters; i++) {
            kvt_counter_t *c = &s->counters[i];
            if (max) {
                memset(c->name, 'c', KVT_MSG_MAX_NAME);
                snprintf(c->name + KVT_MSG_MAX_NAME - 4, 5, "%04u", i % 10000);
            } else {
                snprintf(c->name, sizeof c->name, "counter_%u", i);
            }
            c->value = max ? UINT64_MAX - i : s_next(rng) >> (i * 8);
        }
        break;
    }
    case KVT_MSG_SHUTDOWN: {
        kvt_shutdown_t *s = &msg->u.shutdown;
        s->code = max ? UINT32_MAX : min ? 0 : 3;
        if (max)
            memset(s->text, 't', KVT_MSG_MAX_TEXT);
        else if (!min)
            snprintf(s->text, sizeof s->text, "lane failed: io");
        break;
    }
    default:
        *ok = false;
        break;
    }
}

int kvt_msg_sample(int kind, int shape, kvt_msg_t *msg)
{
    memset(msg, 0, sizeof *msg);
    if (kind <= KVT_MSG_NONE || kind >= KVT_MSG_KIND_COUNT || shape < 0 ||
        shape >= KVT_SAMPLE_COUNT)
        return -1;
    msg->kind = (kvt_msg_kind_t)kind;
    s_rng_t rng = {.state = (uint64_t)kind * 1000 + (uint64_t)shape};
    bool ok = true;
    s_fill(msg, shape, &rng, &ok);
    if (!ok) {
        kvt_msg_clear(msg);
        return -1;
    }
    return 0;
}
