/*  kvt_wcore_int.h — the worker core's state, shared by its two files:
    kvt_wcore.c (loads, saves, their jobs, the outbox, the lifecycle) and
    kvt_wcore_probe.c (touches, lookups, lookup leases). Private to
    src/actors/worker. */
#ifndef KVT_WCORE_INT_H_INCLUDED
#define KVT_WCORE_INT_H_INCLUDED

#include <stdbool.h>
#include <stdint.h>

#include "base/kvt_seen.h"
#include "kvt_wcore.h"
#include "kvt_wlease.h"

struct s_job;

struct _kvt_wcore_t {
    kvt_wcore_cfg_t c;           //  configuration (borrowed handles)
    uint32_t bpc;                //  blocks per chunk
    size_t chunk_bytes;          //  bytes of one chunk buffer
    uint32_t nblocks;            //  device blocks (block ids are < nblocks)
    uint64_t *marks;             //  scratch bitmap over block ids (duplicate check)
    kvt_seen_t *seen;            //  ids of the last items accepted
    struct s_job *head;          //  oldest pending job
    struct s_job *tail;          //  newest pending job
    uint32_t npending;           //  jobs pending
    uint64_t owed;               //  reports the pending jobs owe
    kvt_completion_t *out;       //  outbox
    uint32_t nout;               //  reports in the outbox
    uint32_t outcap;             //  outbox slots (>= nout + owed, so a settle never fails)
    uint8_t **imgs;              //  image bitmaps the outbox's lookup reports point to
    uint32_t nimgs;              //  entries of imgs in use
    uint32_t imgcap;             //  entries of imgs allocated
    kvt_wlease_t *lookups;       //  pinned lookups' leases
    uint64_t lookups_renewed_at; //  when the lookup leases' TTL was last restarted
    bool copy_failed_logged;     //  a failed copy stream was logged (once)
    bool present_logged;         //  a touch answered PRESENT was logged (once)
    kvt_wcore_stats_t st;        //  counters
};

//  Logs through the configured sink (no newline in fmt).
void kvt_wcore_log_(kvt_wcore_t *self, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

//  Makes room for k more reports beyond the outbox and what pending jobs
//  owe; -1 (counted in unreported, logged) when memory ran out.
int kvt_wcore_reserve_(kvt_wcore_t *self, uint32_t k, kvt_opid_t op);

//  Appends one report (room reserved) stamped with the rank and the epoch;
//  returns it so the caller can fill the channel's own fields.
kvt_completion_t *kvt_wcore_out_(kvt_wcore_t *self, uint8_t chan, kvt_opid_t op, uint32_t attempt,
                                 kvt_hash_t key, bool ok, uint32_t detail, uint32_t lower);

//  True when the item (chan, op, attempt, key) is new (and remembers it);
//  a repeat is counted in duplicates.
bool kvt_wcore_first_time_(kvt_wcore_t *self, uint8_t chan, kvt_opid_t op, uint32_t attempt,
                           kvt_hash_t key);

//  Lookup leases, for the job side: the load that named lookup `op` took
//  its own leases; a poll at `now` (TTL releases, renewals); the earliest
//  of `at` and the lookups' next wake; shutdown.
void kvt_wcore_lookup_used_(kvt_wcore_t *self, kvt_opid_t op);
void kvt_wcore_lookup_poll_(kvt_wcore_t *self, uint64_t now);
uint64_t kvt_wcore_lookup_wake_(const kvt_wcore_t *self, uint64_t at);
void kvt_wcore_lookup_stop_(kvt_wcore_t *self);

#endif
