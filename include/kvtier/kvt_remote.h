/*  kvt_remote.h — the remote tier: a rank's objects in a Redis Cluster shared
    by every host, below the CPU pool (and the disk tier).

    An object (namespace, key, kind) of a writer (namespace id, layout id,
    rank, world size) is one string value under the key

        kvt:<ns 16 hex>:<ns_id 16 hex>:<layout 16 hex>:<rank>.<world>:<kind>:<key 32 hex>

    and the value carries a header that says the same again, with the
    payload's length and XXH3-64 checksum (and a checksum of the header):

        0  "KVTRMT1\0"       8 u64 namespace      16 u64 namespace id
        24 u64 layout id     32 u32 rank          36 u32 world size
        40 u32 kind          44 u32 0             48 u64 key hi
        56 u64 key lo        64 u64 payload bytes 72 u64 XXH3-64 of the payload
        80 u64 XXH3-64 of bytes 0..79             88 payload

    A value that is short, names another writer or object (foreign), or
    fails a checksum (corrupt) is a counted miss: its bytes are never handed
    to a caller. A value the cluster evicted or expired is a miss.

    Every call is synchronous; a batch of keys (a lookup) is one pipelined
    round. A node that cannot be reached makes its reads misses and its
    writes dropped, both counted; nothing waits past the configured
    timeouts. Thread-safe (one lock around the cluster client).
*/
#ifndef KVT_REMOTE_H_INCLUDED
#define KVT_REMOTE_H_INCLUDED

#include "kvt_store.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct _kvt_remote_t kvt_remote_t;

#define KVT_REMOTE_HEADER 88 //  bytes of a value before the payload

//  Creation settings; kvt_remote_config_defaults fills every field.
typedef struct {
    const char *seeds;   //  "redis://HOST:PORT[,HOST:PORT...]" (required)
    uint64_t ns_id;      //  the writer's namespace id
    uint64_t layout_id;  //  its layout id
    uint32_t rank;       //  its TP rank
    uint32_t world_size; //  its TP world size (>= 1)
    uint64_t
        max_value_bytes; //  largest payload accepted, default 512 MiB (the cluster's own limit)
    uint32_t connect_timeout_ms; //  per connection attempt, default 500
    uint32_t io_timeout_ms;      //  per reply, default 1000
} kvt_remote_config_t;

//  Counters.
typedef struct {
    uint64_t puts;          //  values written
    uint64_t put_bytes;     //  payload bytes written
    uint64_t puts_dropped;  //  writes that failed (node down, error reply): not stored, counted
    uint64_t gets;          //  reads
    uint64_t get_hits;      //  reads that returned a verified payload
    uint64_t get_misses;    //  reads that found no value (never written, evicted, expired)
    uint64_t get_corrupt;   //  values that failed a checksum or were short: misses
    uint64_t get_foreign;   //  values naming another writer or object: misses
    uint64_t get_errors;    //  reads that failed (node down, error reply): misses
    uint64_t lookups;       //  lookup rounds
    uint64_t lookup_keys;   //  leading keys they found
    uint64_t lookup_errors; //  keys a lookup could not ask about (node down): ends the prefix
    uint64_t touches;       //  single-key presence checks
    uint64_t moved;         //  MOVED redirects followed
    uint64_t asked;         //  ASK redirects followed
    uint64_t refreshes;     //  slot map reloads
    uint64_t conn_errors;   //  connections that failed or broke
} kvt_remote_stats_t;

void kvt_remote_config_defaults(kvt_remote_config_t *cfg);

//  Connects to the seeds and loads the slot map. NULL with a message naming
//  the setting (remote=...) in err.
kvt_remote_t *kvt_remote_new(const kvt_remote_config_t *cfg, char *err, size_t errlen);

void kvt_remote_destroy(kvt_remote_t **self_p);

//  Writes the object. KVT_STORE_OK, KVT_STORE_ETOOBIG, KVT_STORE_EIO (dropped).
int kvt_remote_put(kvt_remote_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind,
                   const void *bytes, size_t size);

//  Reads the best candidate kind for `kind` (as kvt_store.h): *out is a
//  malloc'd copy of the verified payload (the caller frees it), *found its
//  kind. KVT_STORE_ENOTFOUND on any miss (absent, corrupt, foreign, node
//  down), KVT_STORE_ENOMEM.
int kvt_remote_get(kvt_remote_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind, void **out,
                   size_t *size, kvt_obj_kind_t *found);

//  Leading keys of keys[0..n) present (any candidate kind), in one
//  pipelined round. Presence is not verification: a get still checks.
size_t kvt_remote_count(kvt_remote_t *self, uint64_t ns, const kvt_hash_t *keys, size_t n,
                        kvt_obj_kind_t kind);

//  Whether the object is present (a touch's PRESENT).
bool kvt_remote_exists(kvt_remote_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind);

//  The cluster key of an object (tests); returns its length.
size_t kvt_remote_key(const kvt_remote_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind,
                      char *buf, size_t cap);

void kvt_remote_stats(kvt_remote_t *self, kvt_remote_stats_t *st);

#ifdef __cplusplus
}
#endif

#endif
