/*  kvt_detail — how a rank words a store result on the wire.

    The store speaks in its own result codes (kvtier/kvt_store.h); a
    Completion carries a kvt_detail_t. The mapping belongs to the actors that
    send Completions, not to the store, which knows nothing of messages. */
#ifndef KVT_DETAIL_H_INCLUDED
#define KVT_DETAIL_H_INCLUDED

#include <stdint.h>

//  The Completion detail (kvt_detail_t) for a store result code: OK for 0
//  and SKIPPED; DUPLICATE, MISS (not found, corrupt), NO_SPACE, TIMEOUT
//  (stale handle), IO, and INVALID for anything else.
uint32_t kvt_detail_of_store(int rc);

#endif
