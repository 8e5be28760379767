/*  kvt_msg_schema.c — the body tables and their cross-field rules.

    Key numbers are the wire contract: never renumber or reuse one; add new
    fields with new keys (old decoders ignore them). docs/protocol.md lists
    these tables; keep the two in step.
*/
#include "kvt_msg_schema.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define S_SCALAR(k, nm, ty, T, m, lo, hi)                                                        \
    {                                                                                            \
        .key = (k), .name = (nm), .type = (ty), .off = offsetof(T, m), .min = (lo), .max = (hi), \
        .same_count_as = -1                                                                      \
    }
#define S_ARRAY(k, nm, ty, T, m, cnt, lo, hi, sb, same)                       \
    {                                                                         \
        .key = (k), .name = (nm), .type = (ty), .off = offsetof(T, m),        \
        .count_off = offsetof(T, cnt), .min = (lo), .max = (hi), .sub = (sb), \
        .same_count_as = (same)                                               \
    }
#define S_OPTIONAL(k, nm, ty, T, m, lo, hi)                                              \
    {                                                                                    \
        .key = (k), .name = (nm), .type = (ty), .optional = true, .off = offsetof(T, m), \
        .min = (lo), .max = (hi), .same_count_as = -1                                    \
    }
#define S_OPT_ARRAY(k, nm, ty, T, m, cnt, lo, hi)                                        \
    {                                                                                    \
        .key = (k), .name = (nm), .type = (ty), .optional = true, .off = offsetof(T, m), \
        .count_off = offsetof(T, cnt), .min = (lo), .max = (hi), .same_count_as = -1     \
    }
#define S_OPT_STRUCTS(k, nm, T, m, cnt, hi, sb)                                                   \
    {                                                                                             \
        .key = (k), .name = (nm), .type = KVT_F_STRUCTS, .optional = true, .off = offsetof(T, m), \
        .count_off = offsetof(T, cnt), .min = 0, .max = (hi), .sub = (sb), .same_count_as = -1    \
    }
#define S_COUNT(fields) ((uint32_t)(sizeof(fields) / sizeof((fields)[0])))

// ---------------------------------------------------------- cross-field --

static int s_check_entry(const void *body, kvt_path_t *path)
{
    const kvt_entry_t *e = body;
    if (e->start >= e->end)
        return kvt_path_fail(path, "end", "end %u is not above start %u", e->end, e->start);
    if (e->verify_end > e->end)
        return kvt_path_fail(path, "verify_end", "verify_end %u is above end %u", e->verify_end,
                             e->end);
    if (e->verify_end > 0 && e->first_block != 0)
        return kvt_path_fail(path, "first_block", "first_block %u must be 0 when verify_end > 0",
                             e->first_block);
    if ((uint64_t)e->first_block + e->nblocks > (uint64_t)UINT32_MAX + 1)
        return kvt_path_fail(path, "first_block", "first_block %u + %u blocks overflows u32",
                             e->first_block, e->nblocks);
    if (!e->state) {
        if (e->state_slot || e->restore_at || e->restore_unit || e->take_at || e->take_unit)
            return kvt_path_fail(path, "state", "state work without state");
        return 0;
    }
    if (e->restore_at > e->start)
        return kvt_path_fail(path, "restore_at", "restore_at %u is above start %u", e->restore_at,
                             e->start);
    if (!e->restore_at && e->restore_unit)
        return kvt_path_fail(path, "restore_unit", "restore_unit %u without restore_at",
                             e->restore_unit);
    if (e->take_at && (e->take_at <= e->start || e->take_at > e->end))
        return kvt_path_fail(path, "take_at", "take_at %u is outside (start %u, end %u]",
                             e->take_at, e->start, e->end);
    if (!e->take_at && e->take_unit)
        return kvt_path_fail(path, "take_unit", "take_unit %u without take_at", e->take_unit);
    return 0;
}

//  The KV leg is absent exactly when its four fields are all zero (a
//  state-only spec, rule L3); a spec needs at least one leg, and with both
//  the KV leg ends at the state boundary. `leg` is the flag that carries the
//  state leg in this body ("state" for a load, "image" for a save).
static int s_check_legs(const kvt_load_spec_t *s, bool has_state, const char *leg, kvt_path_t *path)
{
    bool kv = s->nkeys || s->nblocks || s->start || s->end;
    if (!kv && !has_state)
        return kvt_path_fail(path, leg,
                             "neither a KV leg (start = end = 0, no keys or blocks) "
                             "nor a state leg");
    if (kv && s->start >= s->end)
        return kvt_path_fail(path, "end", "end %u is not above start %u", s->end, s->start);
    if (!has_state) {
        if (s->state_boundary)
            return kvt_path_fail(path, "state_boundary", "state_boundary %u without %s",
                                 s->state_boundary, leg);
        if (!kvt_hash_is_zero(s->state_hash))
            return kvt_path_fail(path, "state_hash", "state_hash without %s", leg);
        if (s->state_slot)
            return kvt_path_fail(path, "state_slot", "state_slot %u without %s", s->state_slot,
                                 leg);
        return 0;
    }
    if (s->state_boundary == 0)
        return kvt_path_fail(path, "state_boundary", "state_boundary 0 with %s (must be > 0)", leg);
    if (kvt_hash_is_zero(s->state_hash))
        return kvt_path_fail(path, "state_hash", "zero state_hash with %s", leg);
    if (kv && s->state_boundary != s->end)
        return kvt_path_fail(path, "state_boundary", "state_boundary %u is not the KV leg's end %u",
                             s->state_boundary, s->end);
    return 0;
}

static int s_check_load(const void *body, kvt_path_t *path)
{
    const kvt_load_spec_t *s = body;
    return s_check_legs(s, s->state, "state", path);
}

static int s_check_save(const void *body, kvt_path_t *path)
{
    const kvt_save_spec_t *s = body;
    return s_check_legs(s, s->image, "image", path);
}

static int s_check_plan(const void *body, kvt_path_t *path)
{
    const kvt_step_plan_t *p = body;
    if (p->idle && (p->nentries || p->nloads || p->nsaves))
        return kvt_path_fail(path, "idle", "idle plan has %u entries, %u loads, %u saves",
                             p->nentries, p->nloads, p->nsaves);
    return 0;
}

//  A lookup's image bitmap travels only on the lookup channel. Bits at or
//  past `held` carry nothing (the receiver ignores them): held and images
//  are both optional, so neither may make the other invalid.
static int s_check_images(uint8_t chan, uint32_t n, kvt_path_t *path)
{
    if (n != 0 && chan != KVT_CHAN_LOOKUP)
        return kvt_path_fail(path, "images", "images on channel %u (only lookup, 6)", chan);
    return 0;
}

static bool s_touch_chan(uint8_t chan)
{
    return chan == KVT_CHAN_TOUCH || chan == KVT_CHAN_TOUCH_REFRESH;
}

//  What a report (Completion or Verdict) may carry on its channel: load,
//  lookup and fence keys are the zero hash; a touch's gen is KVT_TOUCH_GEN;
//  touch answers only on the touch channels, held / images only on the
//  lookup channel, fenced only on the store channel.
static int s_check_report(uint8_t chan, kvt_opid_t op, kvt_hash_t key, uint8_t touch, uint32_t held,
                          uint32_t nimages, bool fenced, kvt_path_t *path)
{
    if (chan == KVT_CHAN_LOAD && !kvt_hash_is_zero(key))
        return kvt_path_fail(path, "key", "a load's key must be the zero hash");
    if (chan == KVT_CHAN_LOOKUP && !kvt_hash_is_zero(key))
        return kvt_path_fail(path, "key", "a lookup's key must be the zero hash");
    if (chan == KVT_CHAN_FENCE && !kvt_hash_is_zero(key))
        return kvt_path_fail(path, "key", "a fence's key must be the zero hash");
    if (s_touch_chan(chan) && op.gen != KVT_TOUCH_GEN)
        return kvt_path_fail(path, "gen", "a touch report's gen is %u, must be %u", op.gen,
                             KVT_TOUCH_GEN);
    if (touch != 0 && !s_touch_chan(chan))
        return kvt_path_fail(path, "touch", "touch on channel %u (only touch, 4 / 5)", chan);
    if (held != 0 && chan != KVT_CHAN_LOOKUP)
        return kvt_path_fail(path, "held", "held on channel %u (only lookup, 6)", chan);
    if (s_check_images(chan, nimages, path) != 0)
        return -1;
    if (fenced && chan != KVT_CHAN_SAVE)
        return kvt_path_fail(path, "fenced", "fenced on channel %u (only store, 2)", chan);
    return 0;
}

static int s_check_completion(const void *body, kvt_path_t *path)
{
    const kvt_completion_t *c = body;
    if (s_check_report(c->chan, c->op, c->key, c->touch, c->held, c->nimages, c->fenced, path))
        return -1;
    if (c->rank0_only && c->chan != KVT_CHAN_LOOKUP)
        return kvt_path_fail(path, "rank0_only", "rank0_only on channel %u (only lookup, 6)",
                             c->chan);
    return 0;
}

static int s_check_verdict(const void *body, kvt_path_t *path)
{
    const kvt_verdict_t *v = body;
    if (s_check_report(v->chan, v->op, v->key, v->touch, v->held, v->nimages, v->fenced, path))
        return -1;
    if (v->ok && v->nfailed != 0)
        return kvt_path_fail(path, "nfailed", "ok verdict with %u failed ranks", v->nfailed);
    return 0;
}

// ---------------------------------------------------------------- tables --

static const kvt_field_t s_ping[] = {
    S_SCALAR(1, "seq", KVT_F_U64, kvt_ping_t, seq, 0, UINT64_MAX),
    {.key = 2,
     .name = "payload",
     .type = KVT_F_BYTES,
     .optional = true,
     .off = offsetof(kvt_ping_t, payload),
     .count_off = offsetof(kvt_ping_t, npayload),
     .min = 0,
     .max = KVT_MSG_MAX_BYTES,
     .same_count_as = -1},
};

static const kvt_field_t s_arrival[] = {
    S_SCALAR(1, "req", KVT_F_U64, kvt_arrival_t, req, 0, UINT64_MAX),
    S_ARRAY(2, "tokens", KVT_F_U32S, kvt_arrival_t, tokens, ntokens, 1, KVT_MSG_MAX_TOKENS, NULL,
            -1),
    S_SCALAR(3, "max_new_tokens", KVT_F_U32, kvt_arrival_t, max_new_tokens, 1, UINT32_MAX),
    S_SCALAR(4, "arrival_us", KVT_F_U64, kvt_arrival_t, arrival_us, 0, UINT64_MAX),
};
static const kvt_schema_t s_arrival_schema = {"Arrival", sizeof(kvt_arrival_t), s_arrival,
                                              S_COUNT(s_arrival), NULL};

static const kvt_field_t s_schedule[] = {
    S_SCALAR(1, "step", KVT_F_U64, kvt_schedule_t, step, 0, UINT64_MAX),
    S_ARRAY(2, "arrivals", KVT_F_STRUCTS, kvt_schedule_t, arrivals, narrivals, 0,
            KVT_MSG_MAX_ENTRIES, &s_arrival_schema, -1),
    S_SCALAR(3, "now_us", KVT_F_U64, kvt_schedule_t, now_us, 0, UINT64_MAX),
    S_OPTIONAL(4, "prev_failed", KVT_F_BOOL, kvt_schedule_t, prev_failed, 0, 1),
    S_OPT_ARRAY(5, "aborts", KVT_F_U64S, kvt_schedule_t, aborts, naborts, 0, KVT_MSG_MAX_ENTRIES),
    S_OPT_ARRAY(6, "preempts", KVT_F_U64S, kvt_schedule_t, preempts, npreempts, 0,
                KVT_MSG_MAX_ENTRIES),
};

static const kvt_field_t s_entry[] = {
    S_SCALAR(1, "req", KVT_F_U64, kvt_entry_t, op.req, 0, UINT64_MAX),
    S_SCALAR(2, "gen", KVT_F_U32, kvt_entry_t, op.gen, 1, KVT_MSG_MAX_GEN),
    S_SCALAR(3, "start", KVT_F_U32, kvt_entry_t, start, 0, UINT32_MAX),
    S_SCALAR(4, "end", KVT_F_U32, kvt_entry_t, end, 0, UINT32_MAX),
    S_SCALAR(5, "first_block", KVT_F_U32, kvt_entry_t, first_block, 0, UINT32_MAX),
    S_ARRAY(6, "blocks", KVT_F_U32S, kvt_entry_t, blocks, nblocks, 0, KVT_MSG_MAX_BLOCKS, NULL, -1),
    S_ARRAY(7, "hashes", KVT_F_HASHES, kvt_entry_t, hashes, nblocks, 0, KVT_MSG_MAX_BLOCKS, NULL,
            5),
    S_SCALAR(8, "verify_end", KVT_F_U32, kvt_entry_t, verify_end, 0, UINT32_MAX),
    S_OPTIONAL(9, "state", KVT_F_BOOL, kvt_entry_t, state, 0, 1),
    S_OPTIONAL(10, "state_slot", KVT_F_U32, kvt_entry_t, state_slot, 0, UINT32_MAX),
    S_OPTIONAL(11, "restore_unit", KVT_F_U32, kvt_entry_t, restore_unit, 0, UINT32_MAX),
    S_OPTIONAL(12, "restore_at", KVT_F_U32, kvt_entry_t, restore_at, 0, UINT32_MAX),
    S_OPTIONAL(13, "take_unit", KVT_F_U32, kvt_entry_t, take_unit, 0, UINT32_MAX),
    S_OPTIONAL(14, "take_at", KVT_F_U32, kvt_entry_t, take_at, 0, UINT32_MAX),
};
static const kvt_schema_t s_entry_schema = {"Entry", sizeof(kvt_entry_t), s_entry, S_COUNT(s_entry),
                                            s_check_entry};

//  SaveSpec: the spec fields plus the image, its producer fence. Key numbers
//  are shared with LoadSpec (one struct): 8, 9 and 13 are LoadSpec's only.
static const kvt_field_t s_spec[] = {
    S_SCALAR(1, "req", KVT_F_U64, kvt_load_spec_t, op.req, 0, UINT64_MAX),
    S_SCALAR(2, "gen", KVT_F_U32, kvt_load_spec_t, op.gen, 1, KVT_MSG_MAX_GEN),
    S_SCALAR(3, "start", KVT_F_U32, kvt_load_spec_t, start, 0, UINT32_MAX),
    S_SCALAR(4, "end", KVT_F_U32, kvt_load_spec_t, end, 0, UINT32_MAX),
    S_ARRAY(5, "keys", KVT_F_HASHES, kvt_load_spec_t, keys, nkeys, 0, KVT_MSG_MAX_CHUNKS, NULL, -1),
    S_ARRAY(6, "blocks", KVT_F_U32S, kvt_load_spec_t, blocks, nblocks, 0, KVT_MSG_MAX_BLOCKS, NULL,
            -1),
    S_OPTIONAL(7, "attempt", KVT_F_U32, kvt_load_spec_t, attempt, 0, UINT32_MAX),
    S_OPTIONAL(10, "state_boundary", KVT_F_U32, kvt_load_spec_t, state_boundary, 0, UINT32_MAX),
    S_OPTIONAL(11, "state_hash", KVT_F_HASH, kvt_load_spec_t, state_hash, 0, 0),
    S_OPTIONAL(12, "state_slot", KVT_F_U32, kvt_load_spec_t, state_slot, 0, UINT32_MAX),
    S_OPTIONAL(14, "image", KVT_F_BOOL, kvt_load_spec_t, image, 0, 1),
    S_OPTIONAL(15, "producer", KVT_F_U64, kvt_load_spec_t, producer, 0, UINT64_MAX),
    S_OPTIONAL(16, "producer_failed", KVT_F_BOOL, kvt_load_spec_t, producer_failed, 0, 1),
};
//  LoadSpec: the spec fields plus the lookup whose lease the load uses, the
//  state leg and the compute it waits for.
static const kvt_field_t s_load[] = {
    S_SCALAR(1, "req", KVT_F_U64, kvt_load_spec_t, op.req, 0, UINT64_MAX),
    S_SCALAR(2, "gen", KVT_F_U32, kvt_load_spec_t, op.gen, 1, KVT_MSG_MAX_GEN),
    S_SCALAR(3, "start", KVT_F_U32, kvt_load_spec_t, start, 0, UINT32_MAX),
    S_SCALAR(4, "end", KVT_F_U32, kvt_load_spec_t, end, 0, UINT32_MAX),
    S_ARRAY(5, "keys", KVT_F_HASHES, kvt_load_spec_t, keys, nkeys, 0, KVT_MSG_MAX_CHUNKS, NULL, -1),
    S_ARRAY(6, "blocks", KVT_F_U32S, kvt_load_spec_t, blocks, nblocks, 0, KVT_MSG_MAX_BLOCKS, NULL,
            -1),
    S_OPTIONAL(7, "attempt", KVT_F_U32, kvt_load_spec_t, attempt, 0, UINT32_MAX),
    S_OPTIONAL(8, "lookup", KVT_F_BOOL, kvt_load_spec_t, lookup, 0, 1),
    S_OPTIONAL(9, "state", KVT_F_BOOL, kvt_load_spec_t, state, 0, 1),
    S_OPTIONAL(10, "state_boundary", KVT_F_U32, kvt_load_spec_t, state_boundary, 0, UINT32_MAX),
    S_OPTIONAL(11, "state_hash", KVT_F_HASH, kvt_load_spec_t, state_hash, 0, 0),
    S_OPTIONAL(12, "state_slot", KVT_F_U32, kvt_load_spec_t, state_slot, 0, UINT32_MAX),
    S_OPTIONAL(13, "after", KVT_F_U64, kvt_load_spec_t, after, 0, UINT64_MAX),
};
static const kvt_schema_t s_load_schema = {"LoadSpec", sizeof(kvt_load_spec_t), s_load,
                                           S_COUNT(s_load), s_check_load};
static const kvt_schema_t s_save_schema = {"SaveSpec", sizeof(kvt_save_spec_t), s_spec,
                                           S_COUNT(s_spec), s_check_save};

static const kvt_field_t s_event[] = {
    S_SCALAR(1, "req", KVT_F_U64, kvt_event_t, op.req, 0, UINT64_MAX),
    S_SCALAR(2, "gen", KVT_F_U32, kvt_event_t, op.gen, 1, KVT_MSG_MAX_GEN),
    S_SCALAR(3, "type", KVT_F_U8, kvt_event_t, type, KVT_EV_ADMIT, KVT_EV_MAX),
    S_SCALAR(4, "a", KVT_F_U32, kvt_event_t, a, 0, UINT32_MAX),
    S_SCALAR(5, "b", KVT_F_U32, kvt_event_t, b, 0, UINT32_MAX),
    S_SCALAR(6, "c", KVT_F_U32, kvt_event_t, c, 0, UINT32_MAX),
};
static const kvt_schema_t s_event_schema = {"Event", sizeof(kvt_event_t), s_event, S_COUNT(s_event),
                                            NULL};

//  The plan's lookups, releases and touches (defined with their messages).
static const kvt_schema_t s_lookup_schema, s_lookup_release_schema, s_touch_schema;

static const kvt_field_t s_step_plan[] = {
    S_SCALAR(1, "step", KVT_F_U64, kvt_step_plan_t, step, 0, UINT64_MAX),
    S_ARRAY(2, "entries", KVT_F_STRUCTS, kvt_step_plan_t, entries, nentries, 0, KVT_MSG_MAX_ENTRIES,
            &s_entry_schema, -1),
    S_ARRAY(3, "loads", KVT_F_STRUCTS, kvt_step_plan_t, loads, nloads, 0, KVT_MSG_MAX_ENTRIES,
            &s_load_schema, -1),
    S_ARRAY(4, "saves", KVT_F_STRUCTS, kvt_step_plan_t, saves, nsaves, 0, KVT_MSG_MAX_ENTRIES,
            &s_save_schema, -1),
    S_ARRAY(5, "events", KVT_F_STRUCTS, kvt_step_plan_t, events, nevents, 0, KVT_MSG_MAX_ENTRIES,
            &s_event_schema, -1),
    S_SCALAR(6, "idle", KVT_F_BOOL, kvt_step_plan_t, idle, 0, 1),
    S_OPT_STRUCTS(7, "lookups", kvt_step_plan_t, lookups, nlookups, KVT_MSG_MAX_ENTRIES,
                  &s_lookup_schema),
    S_OPT_STRUCTS(8, "lookup_releases", kvt_step_plan_t, lookup_releases, nlookup_releases,
                  KVT_MSG_MAX_ENTRIES, &s_lookup_release_schema),
    S_OPT_STRUCTS(9, "touches", kvt_step_plan_t, touches, ntouches, KVT_MSG_MAX_ENTRIES,
                  &s_touch_schema),
};

static const kvt_field_t s_step_exec[] = {
    S_SCALAR(1, "step", KVT_F_U64, kvt_step_exec_t, step, 0, UINT64_MAX),
    S_SCALAR(2, "rank", KVT_F_U32, kvt_step_exec_t, rank, 0, KVT_MSG_MAX_RANKS - 1),
    S_ARRAY(3, "entries", KVT_F_STRUCTS, kvt_step_exec_t, entries, nentries, 0, KVT_MSG_MAX_ENTRIES,
            &s_entry_schema, -1),
    S_ARRAY(4, "loads", KVT_F_STRUCTS, kvt_step_exec_t, loads, nloads, 0, KVT_MSG_MAX_ENTRIES,
            &s_load_schema, -1),
    S_ARRAY(5, "saves", KVT_F_STRUCTS, kvt_step_exec_t, saves, nsaves, 0, KVT_MSG_MAX_ENTRIES,
            &s_save_schema, -1),
    S_OPT_STRUCTS(6, "lookups", kvt_step_exec_t, lookups, nlookups, KVT_MSG_MAX_ENTRIES,
                  &s_lookup_schema),
    S_OPT_STRUCTS(7, "lookup_releases", kvt_step_exec_t, lookup_releases, nlookup_releases,
                  KVT_MSG_MAX_ENTRIES, &s_lookup_release_schema),
    S_OPT_STRUCTS(8, "touches", kvt_step_exec_t, touches, ntouches, KVT_MSG_MAX_ENTRIES,
                  &s_touch_schema),
};

static const kvt_field_t s_step_done[] = {
    S_SCALAR(1, "step", KVT_F_U64, kvt_step_done_t, step, 0, UINT64_MAX),
    S_SCALAR(2, "rank", KVT_F_U32, kvt_step_done_t, rank, 0, KVT_MSG_MAX_RANKS - 1),
    S_SCALAR(3, "ok", KVT_F_BOOL, kvt_step_done_t, ok, 0, 1),
    S_SCALAR(4, "blocks_written", KVT_F_U32, kvt_step_done_t, blocks_written, 0, UINT32_MAX),
    S_SCALAR(5, "blocks_verified", KVT_F_U32, kvt_step_done_t, blocks_verified, 0, UINT32_MAX),
    S_ARRAY(6, "wrong", KVT_F_U64S, kvt_step_done_t, wrong, nwrong, 0, KVT_MSG_MAX_ENTRIES, NULL,
            -1),
    S_SCALAR(7, "detail", KVT_F_U32, kvt_step_done_t, detail, 0, KVT_DETAIL_MAX),
};

static const kvt_field_t s_completion[] = {
    S_SCALAR(1, "chan", KVT_F_U8, kvt_completion_t, chan, KVT_CHAN_LOAD, KVT_CHAN_MAX),
    S_SCALAR(2, "req", KVT_F_U64, kvt_completion_t, op.req, 0, UINT64_MAX),
    S_SCALAR(3, "gen", KVT_F_U32, kvt_completion_t, op.gen, 1, KVT_MSG_MAX_GEN),
    S_SCALAR(4, "key", KVT_F_HASH, kvt_completion_t, key, 0, 0),
    S_SCALAR(5, "rank", KVT_F_U32, kvt_completion_t, rank, 0, KVT_MSG_MAX_RANKS - 1),
    S_SCALAR(6, "ok", KVT_F_BOOL, kvt_completion_t, ok, 0, 1),
    S_SCALAR(7, "detail", KVT_F_U32, kvt_completion_t, detail, 0, KVT_DETAIL_MAX),
    S_OPTIONAL(8, "attempt", KVT_F_U32, kvt_completion_t, attempt, 0, UINT32_MAX),
    S_OPTIONAL(9, "lower", KVT_F_U32, kvt_completion_t, lower, 0, KVT_MSG_MAX_CHUNKS),
    S_OPTIONAL(10, "epoch", KVT_F_U64, kvt_completion_t, epoch, 0, UINT64_MAX),
    S_OPTIONAL(11, "touch", KVT_F_U8, kvt_completion_t, touch, 0, KVT_MSG_MAX_TOUCH),
    S_OPTIONAL(12, "held", KVT_F_U32, kvt_completion_t, held, 0, KVT_MSG_MAX_CHUNKS),
    S_OPT_ARRAY(13, "images", KVT_F_BYTES, kvt_completion_t, images, nimages, 0,
                KVT_MSG_MAX_IMAGES),
    S_OPTIONAL(14, "fenced", KVT_F_BOOL, kvt_completion_t, fenced, 0, 1),
    S_OPTIONAL(15, "rank0_only", KVT_F_BOOL, kvt_completion_t, rank0_only, 0, 1),
};

static const kvt_field_t s_verdict[] = {
    S_SCALAR(1, "chan", KVT_F_U8, kvt_verdict_t, chan, KVT_CHAN_LOAD, KVT_CHAN_MAX),
    S_SCALAR(2, "req", KVT_F_U64, kvt_verdict_t, op.req, 0, UINT64_MAX),
    S_SCALAR(3, "gen", KVT_F_U32, kvt_verdict_t, op.gen, 1, KVT_MSG_MAX_GEN),
    S_SCALAR(4, "key", KVT_F_HASH, kvt_verdict_t, key, 0, 0),
    S_SCALAR(5, "ok", KVT_F_BOOL, kvt_verdict_t, ok, 0, 1),
    S_SCALAR(6, "detail", KVT_F_U32, kvt_verdict_t, detail, 0, KVT_DETAIL_MAX),
    S_SCALAR(7, "nfailed", KVT_F_U32, kvt_verdict_t, nfailed, 0, KVT_MSG_MAX_RANKS),
    S_OPTIONAL(8, "attempt", KVT_F_U32, kvt_verdict_t, attempt, 0, UINT32_MAX),
    S_OPTIONAL(9, "lower", KVT_F_U32, kvt_verdict_t, lower, 0, KVT_MSG_MAX_CHUNKS),
    S_OPTIONAL(10, "touch", KVT_F_U8, kvt_verdict_t, touch, 0, KVT_MSG_MAX_TOUCH),
    S_OPTIONAL(11, "held", KVT_F_U32, kvt_verdict_t, held, 0, KVT_MSG_MAX_CHUNKS),
    S_OPT_ARRAY(12, "images", KVT_F_BYTES, kvt_verdict_t, images, nimages, 0, KVT_MSG_MAX_IMAGES),
    S_OPTIONAL(13, "fenced", KVT_F_BOOL, kvt_verdict_t, fenced, 0, 1),
};

static const kvt_field_t s_touch[] = {
    S_SCALAR(1, "hash", KVT_F_HASH, kvt_touch_msg_t, hash, 0, 0),
    S_SCALAR(2, "round", KVT_F_U64, kvt_touch_msg_t, round, 0, UINT64_MAX),
    S_OPT_ARRAY(3, "keys", KVT_F_HASHES, kvt_touch_msg_t, keys, nkeys, 0, KVT_MSG_MAX_CHUNKS),
};

static const kvt_field_t s_lookup[] = {
    S_SCALAR(1, "req", KVT_F_U64, kvt_lookup_t, op.req, 0, UINT64_MAX),
    S_SCALAR(2, "gen", KVT_F_U32, kvt_lookup_t, op.gen, 1, KVT_MSG_MAX_GEN),
    S_ARRAY(3, "keys", KVT_F_HASHES, kvt_lookup_t, keys, nkeys, 0, KVT_MSG_MAX_CHUNKS, NULL, -1),
    S_OPTIONAL(4, "pin", KVT_F_BOOL, kvt_lookup_t, pin, 0, 1),
    S_OPTIONAL(5, "ttl_ms", KVT_F_U32, kvt_lookup_t, ttl_ms, 0, UINT32_MAX),
    S_OPTIONAL(6, "rank0_only", KVT_F_BOOL, kvt_lookup_t, rank0_only, 0, 1),
};

static const kvt_field_t s_lookup_release[] = {
    S_SCALAR(1, "req", KVT_F_U64, kvt_lookup_release_t, op.req, 0, UINT64_MAX),
    S_SCALAR(2, "gen", KVT_F_U32, kvt_lookup_release_t, op.gen, 1, KVT_MSG_MAX_GEN),
};

static const kvt_schema_t s_touch_schema = {"Touch", sizeof(kvt_touch_msg_t), s_touch,
                                            S_COUNT(s_touch), NULL};
static const kvt_schema_t s_lookup_schema = {"Lookup", sizeof(kvt_lookup_t), s_lookup,
                                             S_COUNT(s_lookup), NULL};
static const kvt_schema_t s_lookup_release_schema = {"LookupRelease", sizeof(kvt_lookup_release_t),
                                                     s_lookup_release, S_COUNT(s_lookup_release),
                                                     NULL};

static const kvt_field_t s_fence[] = {
    S_SCALAR(1, "id", KVT_F_U64, kvt_fence_msg_t, id, 0, UINT64_MAX),
    S_OPTIONAL(2, "lanes", KVT_F_U8, kvt_fence_msg_t, lanes, 0, KVT_FENCE_LANES_ALL),
};

static const kvt_field_t s_stats[] = {
    S_SCALAR(1, "request", KVT_F_BOOL, kvt_stats_t, request, 0, 1),
    S_SCALAR(2, "from", KVT_F_STR, kvt_stats_t, from, 0, KVT_MSG_MAX_NAME),
    S_ARRAY(3, "counters", KVT_F_COUNTERS, kvt_stats_t, counters, ncounters, 0, KVT_MSG_MAX_STATS,
            NULL, -1),
};

static const kvt_field_t s_shutdown[] = {
    S_SCALAR(1, "code", KVT_F_U32, kvt_shutdown_t, code, 0, UINT32_MAX),
    {.key = 2,
     .name = "text",
     .type = KVT_F_STR,
     .optional = true,
     .off = offsetof(kvt_shutdown_t, text),
     .min = 0,
     .max = KVT_MSG_MAX_TEXT,
     .same_count_as = -1},
};

static const kvt_schema_t s_bodies[KVT_MSG_KIND_COUNT] = {
    [KVT_MSG_PING] = {"Ping", sizeof(kvt_ping_t), s_ping, S_COUNT(s_ping), NULL},
    [KVT_MSG_SCHEDULE] = {"Schedule", sizeof(kvt_schedule_t), s_schedule, S_COUNT(s_schedule),
                          NULL},
    [KVT_MSG_STEP_PLAN] = {"StepPlan", sizeof(kvt_step_plan_t), s_step_plan, S_COUNT(s_step_plan),
                           s_check_plan},
    [KVT_MSG_STEP_EXEC] = {"StepExec", sizeof(kvt_step_exec_t), s_step_exec, S_COUNT(s_step_exec),
                           NULL},
    [KVT_MSG_STEP_DONE] = {"StepDone", sizeof(kvt_step_done_t), s_step_done, S_COUNT(s_step_done),
                           NULL},
    [KVT_MSG_LOAD_SPEC] = {"LoadSpec", sizeof(kvt_load_spec_t), s_load, S_COUNT(s_load),
                           s_check_load},
    [KVT_MSG_SAVE_SPEC] = {"SaveSpec", sizeof(kvt_save_spec_t), s_spec, S_COUNT(s_spec),
                           s_check_save},
    [KVT_MSG_COMPLETION] = {"Completion", sizeof(kvt_completion_t), s_completion,
                            S_COUNT(s_completion), s_check_completion},
    [KVT_MSG_VERDICT] = {"Verdict", sizeof(kvt_verdict_t), s_verdict, S_COUNT(s_verdict),
                         s_check_verdict},
    [KVT_MSG_STATS] = {"Stats", sizeof(kvt_stats_t), s_stats, S_COUNT(s_stats), NULL},
    [KVT_MSG_SHUTDOWN] = {"Shutdown", sizeof(kvt_shutdown_t), s_shutdown, S_COUNT(s_shutdown),
                          NULL},
    [KVT_MSG_TOUCH] = {"Touch", sizeof(kvt_touch_msg_t), s_touch, S_COUNT(s_touch), NULL},
    [KVT_MSG_LOOKUP] = {"Lookup", sizeof(kvt_lookup_t), s_lookup, S_COUNT(s_lookup), NULL},
    [KVT_MSG_LOOKUP_RELEASE] = {"LookupRelease", sizeof(kvt_lookup_release_t), s_lookup_release,
                                S_COUNT(s_lookup_release), NULL},
    [KVT_MSG_FENCE] = {"Fence", sizeof(kvt_fence_msg_t), s_fence, S_COUNT(s_fence), NULL},
};

const kvt_schema_t *kvt_msg_schema(int kind)
{
    if (kind <= KVT_MSG_NONE || kind >= KVT_MSG_KIND_COUNT)
        return NULL;
    return &s_bodies[kind];
}

// ------------------------------------------------------------------ paths --

int kvt_path_fail(kvt_path_t *path, const char *field, const char *fmt, ...)
{
    kvt_msg_err_t *err = path->err;
    if (err->reason[0] != '\0')
        return -1; //  keep the first (innermost) failure
    size_t at = 0;
    for (size_t i = 0; i < path->len && at < sizeof err->field; i++) {
        int n = snprintf(err->field + at, sizeof err->field - at, "%s[%u]%s", path->frames[i].name,
                         path->frames[i].index, i + 1 < path->len || field[0] != '\0' ? "." : "");
        at = n < 0 ? sizeof err->field : at + (size_t)n;
    }
    if (at < sizeof err->field)
        snprintf(err->field + at, sizeof err->field - at, "%s", field);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->reason, sizeof err->reason, fmt, ap);
    va_end(ap);
    if (err->reason[0] == '\0')
        snprintf(err->reason, sizeof err->reason, "invalid");
    return -1;
}

size_t kvt_path_enter(kvt_path_t *path, const char *name, uint32_t index)
{
    size_t old = path->depth;
    if (path->len < KVT_PATH_DEPTH && path->len == path->depth) {
        path->frames[path->len].name = name;
        path->frames[path->len].index = index;
        path->len++;
    }
    path->depth++;
    return old;
}

void kvt_path_leave(kvt_path_t *path, size_t old_depth)
{
    path->depth = old_depth;
    if (path->len > old_depth)
        path->len = old_depth;
}

bool kvt_msg_name_ok(const char *name, size_t size)
{
    return size >= 1 && size <= KVT_MSG_MAX_NAME && memchr(name, '\0', size) == NULL;
}
