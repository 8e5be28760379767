/*  kvt_disk.h — the disk backend below the CPU pool: one file per object in
    one directory, its own capacity and LRU, written by I/O threads, rescanned
    at start-up so a restarted process keeps its disk tier.

    Identity. Every file names everything that makes its bytes: the object
    (namespace, key, kind) and the writer's identity (TP rank, world size,
    layout id: the geometry the caller derives from block bytes, layers,
    planes, chunk size). Both the file name and the header carry them. A
    disk instance serves only files of its own identity: another identity's
    file (a swapped or shared directory) is a counted miss
    (identity_mismatch), never served and never deleted — it is not ours.

    Manifest (rule C3 at the tier). The directory records the layout id and
    namespace (ns_id) it is written with in ".kvt-manifest" (written to a
    temporary and renamed). A fresh directory gets one; a directory whose
    manifest names another layout id or namespace is refused by
    kvt_disk_new, naming both values and counted
    (kvt_disk_manifest_refusals), before any of its files is looked at.

    File: a 80-byte header (magic, version, kind, namespace, key, payload
    length, layout id, rank, world size, XXH3-64 of the payload, XXH3-64 of
    the header) followed by the payload. Name: <ns 16 hex>-<key 32 hex>-
    <kind>-<rank 8 hex>-<world 8 hex>-<layout 16 hex>.kvt. A put is written
    to a temporary name (".tmp-<name>.<seq>") by an I/O thread and renamed
    into place, so a reader or a restart never sees half a file. fsync of
    the file and the directory is optional (config).

    kvt_disk_new rescans the directory: its own temporary files (exactly
    its format and identity) are deleted; each file named like an object of this identity has its
   header validated (magic, version, header checksum, identity, name matches header, file length
   matches header) and is indexed, oldest mtime at the old end of the LRU; one that fails is counted
   and deleted. Another identity's files are counted and left alone, as is any other entry. Payload
   checksums are verified on every read: a corrupt or truncated file is a miss that is counted and
   deleted, never bytes handed to a caller. Every unlink's result is checked: a file that cannot be
   deleted is counted (delete_failed), logged as kept, and its name blocked. A write is renamed into
   place without replacing anything that appeared under its name. The rescan logs one summary line
   and a few examples, from a budget of its own, so run-time errors stay visible.

    The directory is never followed through a symbolic link (refused at
    creation), nor is any file in it: an object file is opened without
    blocking and must be a regular file; a FIFO, directory, link or device
    under an object's name is a counted miss (foreign_files), left alone.

    Puts are asynchronous (a bounded queue served by io_threads threads);
    with io_mode INLINE there are no threads and the call that queued a
    write runs it to completion before it returns (deterministic with one
    calling thread, as under the sim driver). Reads are synchronous: one
   open + pread of a local file in the calling thread, bounded by the device's own latency (no
   retries, no waits on the queue). An object is readable only once its rename is done.

    Thread-safety: every call may be made from any thread. One mutex guards
    the index; file I/O happens outside it (rename and unlink inside it, so a
    name never changes hands under a reader's feet).
*/
#ifndef KVT_DISK_H_INCLUDED
#define KVT_DISK_H_INCLUDED

#include "kvt_store.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct _kvt_disk_t kvt_disk_t;

#define KVT_DISK_HEADER_BYTES 80 //  header bytes at the start of every file (counted in capacity)

//  Who runs the queued writes.
typedef enum {
    KVT_DISK_IO_THREADS = 0, //  io_threads writer threads, asynchronously (default)
    KVT_DISK_IO_INLINE = 1,  //  the calling thread, to completion, before the call that queued
                             //  the write returns: same results and counters, and the disk's
                             //  contents never depend on thread timing (the sim driver)
} kvt_disk_io_mode_t;

//  Creation settings; kvt_disk_config_defaults fills every field. A zero in
//  a numeric field means "the default".
typedef struct {
    const char *name;           //  name in logs, default "disk"
    const char *dir;            //  directory (created if missing; one per rank); required
    uint64_t capacity_bytes;    //  payload + header bytes kept on disk; required
    uint32_t max_objects;       //  files indexed, default capacity / 64 KiB in [64, 4 Mi]
    kvt_disk_io_mode_t io_mode; //  who runs queued writes, default THREADS
    uint32_t io_threads;        //  writer threads (THREADS), default 2, at most 64
    uint32_t queue_depth;       //  puts queued or in flight, default 64
    uint32_t rank;              //  TP rank whose bytes these are, default 0; below world_size
    uint32_t world_size;        //  TP world size, default 1
    uint64_t layout_id;         //  geometry / layout of the bytes (caller-derived), default 0
    uint64_t ns_id;             //  namespace the directory is written for (0: not recorded)
    bool fsync;                 //  fsync each file and the directory after rename, default false
    kvt_store_clock_fn *clock;  //  time source (ns), used for log lines only; NULL: monotonic
    void *clock_arg;            //  argument of clock
    kvt_store_log_fn *log;      //  log sink; NULL: warnings and errors to stderr
    void *log_arg;              //  argument of log
} kvt_disk_config_t;

//  Counters and gauges. Kind-indexed arrays use kind - 1.
typedef struct {
    uint64_t capacity_bytes;    //  configured capacity
    uint64_t used_bytes;        //  bytes of indexed files and queued writes (header included)
    uint64_t objects;           //  readable files
    uint64_t objects_writing;   //  puts queued or being written
    uint64_t hits[3];           //  reads that returned bytes, by query kind
    uint64_t misses[3];         //  reads that found nothing readable, by query kind
    uint64_t puts;              //  files written and renamed into place
    uint64_t writes_inline;     //  writes run by the call that queued them (io_mode INLINE)
    uint64_t put_bytes;         //  payload bytes written
    uint64_t puts_skipped;      //  puts of an object already on disk (refreshed instead)
    uint64_t puts_duplicate;    //  puts of an object already queued
    uint64_t puts_dropped;      //  puts refused: queue full, no room, table full
    uint64_t puts_discarded;    //  writes thrown away because their source went stale
    uint64_t evictions;         //  files deleted to make room
    uint64_t evicted_bytes;     //  bytes deleted to make room
    uint64_t read_bytes;        //  payload bytes read
    uint64_t corrupt;           //  files that failed validation (read or rescan), deleted
    uint64_t io_errors;         //  failed open / write / read / rename / fsync
    uint64_t rescanned;         //  files indexed by the start-up rescan
    uint64_t tmp_removed;       //  our own temporary files deleted by the rescan
    uint64_t touches_present;   //  touches that found a file
    uint64_t touches_gone;      //  touches that did not
    uint64_t foreign_files;     //  entries left alone: not an object name, or not a regular file
    uint64_t identity_mismatch; //  files of another rank / world size / layout: misses, left alone
    uint64_t puts_blocked;      //  puts refused: the object's name is held by a file not ours
    uint64_t delete_failed;     //  files kvtier meant to delete but could not (still there)
} kvt_disk_stats_t;

//  Called exactly once per accepted zero-copy put, on an I/O thread (INLINE:
//  on the calling thread, before kvt_disk_put returns), after the writer
//  has finished reading src (rc: 0 or the write's error). Return 0
//  if src stayed valid for the whole write; non-zero discards the file (its
//  bytes may be torn). Called without the disk lock.
typedef int(kvt_disk_done_fn)(void *arg, int rc);

//  Fills *cfg with the defaults (dir NULL, capacity 0: required).
void kvt_disk_config_defaults(kvt_disk_config_t *cfg);

//  Validates, creates the directory if needed, rescans it, starts the I/O
//  threads. NULL on a bad setting or an unusable directory (err says which).
kvt_disk_t *kvt_disk_new(const kvt_disk_config_t *cfg, char *err, size_t errlen);

//  Directories kvt_disk_new refused since the process started because
//  their manifest names another layout id or namespace (or is unreadable).
uint64_t kvt_disk_manifest_refusals(void);

//  Finishes every queued write, stops the threads, frees (NULL-safe, nulls
//  *self_p). Files stay on disk for the next start.
void kvt_disk_destroy(kvt_disk_t **self_p);

//  Queues a write of `size` bytes at src, which must stay valid until done
//  is called. OK: queued, done will be called exactly once. SKIPPED (already
//  on disk, refreshed), DUPLICATE (already queued), EBUSY (queue full),
//  ENOSPACE / ETOOBIG / EFULL, EIO (the name is held by a file that is not
//  ours: puts_blocked): refused now and done is never called.
int kvt_disk_put(kvt_disk_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind,
                 const void *src, size_t size, kvt_disk_done_fn *done, void *arg);

//  As kvt_disk_put, but copies src into a buffer of its own first.
int kvt_disk_put_copy(kvt_disk_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind,
                      const void *src, size_t size);

//  Size and kind of the readable file matching the query: OK or ENOTFOUND.
//  No refresh, no counters.
int kvt_disk_stat(kvt_disk_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind, size_t *size,
                  kvt_obj_kind_t *found);

//  As kvt_disk_stat, and pins the file: eviction skips it (and
//  kvt_disk_remove answers EBUSY) until kvt_disk_unpin (*pin), so a reader
//  that must read it later (a promotion) cannot lose it to a put made
//  meanwhile. A file that fails validation at read is still deleted.
int kvt_disk_pin(kvt_disk_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind, size_t *size,
                 kvt_obj_kind_t *found, uint64_t *pin);

//  Drops a pin taken by kvt_disk_pin (a pin of a file deleted since is
//  ignored). Exactly once per pin.
void kvt_disk_unpin(kvt_disk_t *self, uint64_t pin);

//  Reads the file matching the query into dst (cap bytes) and verifies it;
//  refreshes it in the disk LRU. OK: *size and *found are set. ENOTFOUND on a
//  miss (a file of another identity under this name is one: counted in
//  identity_mismatch, left alone, its name blocked), ECORRUPT (counted, file
//  deleted), EIO, EINVAL if cap is too small.
int kvt_disk_read(kvt_disk_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind, void *dst,
                  size_t cap, size_t *size, kvt_obj_kind_t *found);

//  Counts leading keys with a readable file matching kind and refreshes them
//  deepest first. Returns the count.
size_t kvt_disk_lookup(kvt_disk_t *self, uint64_t ns, const kvt_hash_t *keys, size_t n,
                       kvt_obj_kind_t kind);

//  Pure count of leading keys with a readable file (no refresh, no counters).
size_t kvt_disk_count(kvt_disk_t *self, uint64_t ns, const kvt_hash_t *keys, size_t n,
                      kvt_obj_kind_t kind);

//  PRESENT (readable file, refreshed in the disk LRU) or GONE.
kvt_touch_t kvt_disk_touch(kvt_disk_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind);

//  Deletes the file with exactly this name: OK, ENOTFOUND, EBUSY (queued).
int kvt_disk_remove(kvt_disk_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind);

//  Waits until every queued and in-flight write has finished, its
//  completion called (so a zero-copy put's source is no longer read and
//  whatever the completion releases is released): tests, benchmarks,
//  shutdown. Not for actor handlers: it blocks (under INLINE it returns at
//  once unless another thread is running a write).
void kvt_disk_flush(kvt_disk_t *self);

//  Snapshot of the counters and gauges.
void kvt_disk_stats(kvt_disk_t *self, kvt_disk_stats_t *stats);

//  Fault hook (tests, fault plans): a stall holds every write an I/O thread
//  takes, before its file is opened, so a test can keep a write in flight
//  across whatever it exercises (a worker's stop, a shutdown). HOLD lasts
//  until kvt_disk_stall (self, OFF); UNTIL_FLUSH until a caller waits in
//  kvt_disk_flush, which then ends it (so a flush that should be there
//  finishes the write, and one that is missing leaves it held, whatever the
//  timing). Writes run by their caller (io_mode INLINE) are never held: the
//  caller would wait on itself. kvt_disk_destroy ends any stall first.
typedef enum {
    KVT_DISK_STALL_OFF = 0,         //  writes run as they are taken
    KVT_DISK_STALL_HOLD = 1,        //  held until the stall is turned off
    KVT_DISK_STALL_UNTIL_FLUSH = 2, //  held until kvt_disk_flush is called
} kvt_disk_stall_t;

void kvt_disk_stall(kvt_disk_t *self, kvt_disk_stall_t mode);

//  Writes the stall holds now.
uint32_t kvt_disk_stalled(kvt_disk_t *self);

#ifdef __cplusplus
}
#endif

#endif
