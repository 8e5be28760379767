/*  kvt_storage_counters.c — the storage manager's counters as (name, value)
    pairs for a Stats message. Names are "<backend>.<counter>"; kind-indexed
    counters end in ".kv", ".state", ".kv_state". */
#include <assert.h>
#include <stddef.h>
#include <stdio.h>

#include "kvt_storage_int.h"

typedef struct {
    const char *name; //  counter name
    size_t off;       //  offset of its uint64_t in kvt_storage_stats_t
} s_field_t;

#define S_F(name, field)                           \
    {                                              \
        name, offsetof(kvt_storage_stats_t, field) \
    }
#define S_P(field) S_F("pool." #field, pool.field)
#define S_D(field) S_F("disk." #field, disk.field)
#define S_S(field) S_F("storage." #field, field)
#define S_R(field) S_F("remote." #field, remote.field)
#define S_KINDS(pfx, arr) \
    S_F(pfx ".kv", arr[0]), S_F(pfx ".state", arr[1]), S_F(pfx ".kv_state", arr[2])

static const s_field_t s_pool[] = {
    S_P(capacity_bytes),
    S_P(used_bytes),
    S_P(pinned_bytes),
    S_P(writing_bytes),
    S_P(objects),
    S_P(objects_writing),
    S_P(free_extents),
    S_P(largest_free_bytes),
    S_KINDS("pool.hits", pool.hits),
    S_KINDS("pool.misses", pool.misses),
    S_P(puts),
    S_P(put_bytes),
    S_P(puts_skipped),
    S_P(puts_duplicate),
    S_P(aborts),
    S_P(evictions),
    S_P(evicted_bytes),
    S_P(evicted_orphan_images),
    S_P(removals),
    S_P(alloc_failed),
    S_P(alloc_failed_pinned),
    S_P(alloc_failed_toobig),
    S_P(alloc_failed_table),
    S_P(lookups),
    S_P(lookup_keys),
    S_P(touches_refreshed),
    S_P(touches_gone),
    S_P(leases),
    S_P(leases_active),
    S_P(release_errors),
    S_P(pin_table_full),
    S_P(reclaimed_orphaned),
    S_P(reclaimed_expired),
    S_P(reclaimed_quarantined),
    S_P(quarantined_bytes),
    S_P(objects_quarantined),
    S_P(evict_value),
};

static const s_field_t s_disk[] = {
    S_D(capacity_bytes),
    S_D(used_bytes),
    S_D(objects),
    S_D(objects_writing),
    S_KINDS("disk.hits", disk.hits),
    S_KINDS("disk.misses", disk.misses),
    S_D(puts),
    S_D(writes_inline),
    S_D(put_bytes),
    S_D(puts_skipped),
    S_D(puts_duplicate),
    S_D(puts_dropped),
    S_D(puts_discarded),
    S_D(evictions),
    S_D(evicted_bytes),
    S_D(read_bytes),
    S_D(corrupt),
    S_D(io_errors),
    S_D(rescanned),
    S_D(tmp_removed),
    S_D(touches_present),
    S_D(touches_gone),
    S_D(foreign_files),
    S_D(identity_mismatch),
    S_D(puts_blocked),
    S_D(delete_failed),
};

static const s_field_t s_own[] = {
    S_S(gets),
    S_S(get_hits_pool),
    S_S(get_hits_disk),
    S_S(get_misses),
    S_S(promotions),
    S_S(promotion_failed),
    S_S(puts),
    S_S(puts_skipped),
    S_S(puts_restored),
    S_S(writes_queued),
    S_S(writes_not_queued),
    S_S(writeback_skipped),
    S_S(touches_refreshed),
    S_S(touches_present),
    S_S(touches_gone),
    S_S(lookups),
    S_S(lookup_keys_pool),
    S_S(lookup_keys_disk),
};

//  Only with a remote tier, so a run without one reports what it did before.
static const s_field_t s_remote[] = {
    S_R(puts),
    S_R(put_bytes),
    S_R(puts_dropped),
    S_R(gets),
    S_R(get_hits),
    S_R(get_misses),
    S_R(get_corrupt),
    S_R(get_foreign),
    S_R(get_errors),
    S_R(lookups),
    S_R(lookup_keys),
    S_R(lookup_errors),
    S_R(touches),
    S_R(moved),
    S_R(asked),
    S_R(refreshes),
    S_R(conn_errors),
    S_S(get_hits_remote),
    S_S(lookup_keys_remote),
    S_S(remote_writes),
    S_S(remote_writes_failed),
    S_S(touches_remote),
};

static size_t s_emit(const kvt_storage_stats_t *st, const s_field_t *f, size_t nf,
                     kvt_counter_t *out, size_t cap, size_t at)
{
    for (size_t i = 0; i < nf; i++, at++) {
        if (at >= cap)
            continue;
        snprintf(out[at].name, sizeof(out[at].name), "%s", f[i].name);
        out[at].value = *(const uint64_t *)((const char *)st + f[i].off);
    }
    return at;
}

size_t kvt_storage_counters(kvt_storage_t *self, kvt_counter_t *out, size_t cap)
{
    assert(self && (out || cap == 0));
    kvt_storage_stats_t st;
    kvt_storage_stats(self, &st);
    size_t n = 0;
    n = s_emit(&st, s_pool, sizeof(s_pool) / sizeof(s_pool[0]), out, cap, n);
    if (st.disk_enabled)
        n = s_emit(&st, s_disk, sizeof(s_disk) / sizeof(s_disk[0]), out, cap, n);
    n = s_emit(&st, s_own, sizeof(s_own) / sizeof(s_own[0]), out, cap, n);
    if (st.remote_enabled)
        n = s_emit(&st, s_remote, sizeof(s_remote) / sizeof(s_remote[0]), out, cap, n);
    return n;
}
