/*  kvt_disk_int.h — the disk backend's state, shared by kvt_disk.c
    (lifecycle, puts, reads), kvt_disk_index.c (entries, map, LRU),
    kvt_disk_io.c (write queue, I/O threads), kvt_disk_file.c (file format)
    and kvt_disk_rescan.c (start-up rescan). Private to src/store. */
#ifndef KVT_DISK_INT_H_INCLUDED
#define KVT_DISK_INT_H_INCLUDED

#include <limits.h>
#include <pthread.h>

#include "base/kvt_ilist.h"
#include "kvt_keymap.h"
#include "kvtier/kvt_disk.h"

#define KVT_DISK_HDR             KVT_DISK_HEADER_BYTES //  header bytes at the start of every file
#define KVT_DISK_VERSION         2                     //  file format version
#define KVT_DISK_NAME_LEN        96                    //  bytes of a file name buffer, NUL included
#define KVT_DISK_OBJ_NAME        90                    //  characters of an object file name
#define KVT_DISK_TMP_LEN         128 //  bytes of a temporary name buffer, NUL included
#define KVT_DISK_LOG_LIMIT       16  //  run-time error lines logged before counting only
#define KVT_DISK_RESCAN_EXAMPLES 4   //  rescan lines logged besides its summary

//  Which budget a log line is drawn from: the rescan's examples cannot use
//  up the lines that run-time errors need.
typedef enum {
    KVT_DLOG_ALWAYS = 0,  //  not limited (summaries, once-only warnings)
    KVT_DLOG_RUNTIME = 1, //  run-time errors: KVT_DISK_LOG_LIMIT lines
    KVT_DLOG_RESCAN = 2,  //  rescan examples: KVT_DISK_RESCAN_EXAMPLES lines
} kvt_dlog_t;

typedef enum {
    KVT_DENT_FREE = 0,    //  slot unused
    KVT_DENT_WRITING = 1, //  queued or being written: not readable
    KVT_DENT_READY = 2,   //  renamed into place: readable
    KVT_DENT_BLOCKED = 3, //  the name is held by a file that is not ours: never read or written
} kvt_dent_state_t;

//  Who wrote a file: a disk instance reads only files of its own identity.
typedef struct {
    uint32_t rank;   //  TP rank
    uint32_t world;  //  TP world size
    uint64_t layout; //  layout / geometry id
} kvt_dident_t;

typedef struct {
    uint64_t ns;      //  namespace
    kvt_hash_t key;   //  prefix hash
    uint64_t size;    //  payload bytes
    uint32_t gen;     //  generation, bumped whenever the slot is freed
    uint32_t pins;    //  kvt_disk_pin holds (ready): eviction skips it while > 0
    kvt_ilink_t link; //  LRU neighbours (ready); link.next is also the free list link
    uint8_t kind;     //  kvt_obj_kind_t
    uint8_t state;    //  kvt_dent_state_t
} kvt_dent_t;

typedef struct {
    uint32_t ent;           //  entry being written
    uint32_t gen;           //  its generation when queued
    const void *src;        //  bytes to write
    size_t size;            //  their length
    void *owned;            //  buffer to free after the write (copying put), or NULL
    kvt_disk_done_fn *done; //  zero-copy completion, or NULL
    void *arg;              //  its argument
    kvt_ilink_t link;       //  queue / free list links
} kvt_djob_t;

//  A decoded, validated file header.
typedef struct {
    uint64_t ns;         //  namespace
    kvt_hash_t key;      //  prefix hash
    uint64_t size;       //  payload bytes
    uint64_t checksum;   //  XXH3-64 of the payload
    kvt_obj_kind_t kind; //  object kind
    kvt_dident_t id;     //  writer's identity
} kvt_dhdr_t;

//  What a verified read of one file found.
typedef enum {
    KVT_DREAD_OK = 0,       //  the expected object, bytes verified
    KVT_DREAD_GONE = 1,     //  no such file
    KVT_DREAD_CORRUPT = 2,  //  ours, but fails validation
    KVT_DREAD_IDENTITY = 3, //  a valid header of another identity: not ours
    KVT_DREAD_FOREIGN = 4,  //  not a regular file (FIFO, directory, symlink, device): not ours
    KVT_DREAD_EIO = 5,      //  open / fstat / pread failed
} kvt_dread_t;

struct _kvt_disk_t {
    char name[32];           //  for logs
    char dir[PATH_MAX];      //  directory
    kvt_dident_t id;         //  identity of the files this instance writes and reads
    bool id_warned;          //  an identity mismatch was logged (once per instance)
    int dirfd;               //  the open directory: every file is named relative to it
    uint64_t capacity;       //  bytes (headers included)
    bool fsync;              //  fsync files and the directory
    bool inline_io;          //  io_mode INLINE: callers run the queued writes
    kvt_store_log_fn *log;   //  log sink
    void *log_arg;           //  its argument
    pthread_mutex_t mu;      //  guards everything below
    pthread_cond_t work;     //  a job was queued, or stop
    pthread_cond_t idle;     //  queue and in-flight both empty
    pthread_cond_t stall_cv; //  the stall changed, or a write began or ended waiting on it
    kvt_disk_stall_t stall;  //  fault hook: whether I/O threads hold the writes they take
    uint32_t stalled;        //  writes held by the stall now
    kvt_dent_t *ents;        //  entry table
    uint32_t nents;          //  its size
    uint32_t ent_free;       //  head of free entries
    kvt_ilist_t lru;         //  ready entries, oldest at the head
    kvt_keymap_t map;        //  (ns, key) → entry index + 1 per kind
    uint64_t used;           //  bytes of ready and writing entries
    uint64_t writing;        //  bytes of writing entries (not evictable)
    uint64_t pinned;         //  bytes of pinned ready entries (not evictable)
    uint32_t npinned;        //  pinned ready entries
    kvt_djob_t *jobs;        //  job table (queue_depth)
    uint32_t njobs;          //  its size
    kvt_ilist_t job_free;    //  free jobs
    kvt_ilist_t queue;       //  queued jobs, oldest at the head
    uint32_t busy;           //  jobs queued or in flight
    uint64_t tmp_seq;        //  sequence for temporary names
    bool stop;               //  threads exit when the queue is empty
    pthread_t *threads;      //  I/O threads
    uint32_t nthreads;       //  started threads
    uint32_t logged;         //  run-time error lines logged so far
    uint32_t rescan_logged;  //  rescan example lines logged so far
    kvt_disk_stats_t st;     //  counters (gauges filled by kvt_disk_stats)
};

//  "<ns>-<key>-<kind>-<rank>-<world>-<layout>.kvt" for an object of
//  identity id.
void kvt_disk_file_name(char out[KVT_DISK_NAME_LEN], uint64_t ns, kvt_hash_t key,
                        kvt_obj_kind_t kind, const kvt_dident_t *id);

//  ".tmp-<object name>.<seq>": the temporary a write goes to before its rename.
void kvt_disk_tmp_name(char out[KVT_DISK_TMP_LEN], const char *name, uint64_t seq);

//  True if `name` is exactly a temporary of this instance's format and
//  identity (".tmp-<object name of ours>.<decimal seq>"): the only
//  temporaries the rescan deletes.
bool kvt_disk_tmp_ours(const kvt_disk_t *self, const char *name);

//  Parses an object file name; false if `name` is not one.
bool kvt_disk_name_parse(const char *name, uint64_t *ns, kvt_hash_t *key, kvt_obj_kind_t *kind,
                         kvt_dident_t *id);

//  True if a and b are the same identity.
bool kvt_disk_ident_eq(const kvt_dident_t *a, const kvt_dident_t *b);

//  Encodes a header for `size` payload bytes with checksum `sum`.
void kvt_disk_hdr_encode(uint8_t out[KVT_DISK_HDR], uint64_t ns, kvt_hash_t key,
                         kvt_obj_kind_t kind, const kvt_dident_t *id, uint64_t size, uint64_t sum);

//  Decodes and validates a header (magic, version, kind, header checksum).
//  0, or -1 with a reason.
int kvt_disk_hdr_decode(const uint8_t in[KVT_DISK_HDR], kvt_dhdr_t *hdr, const char **why);

//  Files are named relative to the open directory dirfd; none is followed
//  through a symbolic link.

//  Writes header + payload to `name` (created exclusively); fsync if asked.
//  0 or -1 (errno kept).
int kvt_disk_file_write(int dirfd, const char *name, uint64_t ns, kvt_hash_t key,
                        kvt_obj_kind_t kind, const kvt_dident_t *id, const void *src, size_t size,
                        bool do_fsync);

//  What `name` is, without opening or following it: OK (a regular file),
//  GONE, FOREIGN (anything else; *why says what), EIO.
kvt_dread_t kvt_disk_file_kind(int dirfd, const char *name, const char **why);

//  Validates the header and length of file `name` (no payload read) for the
//  expected object of identity id; *size and *mtime (ns) on OK, *why
//  otherwise.
kvt_dread_t kvt_disk_file_check(int dirfd, const char *name, uint64_t ns, kvt_hash_t key,
                                kvt_obj_kind_t kind, const kvt_dident_t *id, uint64_t *size,
                                uint64_t *mtime, const char **why);

//  Reads and verifies file `name` for the expected object of identity id
//  into dst; *why says what was wrong.
kvt_dread_t kvt_disk_file_read(int dirfd, const char *name, uint64_t ns, kvt_hash_t key,
                               kvt_obj_kind_t kind, const kvt_dident_t *id, uint64_t size,
                               void *dst, const char **why);

//  Rebuilds the index from the directory (called by kvt_disk_new before the
//  threads start). 0 or -1 if the directory cannot be read.
int kvt_disk_rescan(kvt_disk_t *self, char *err, size_t errlen);

//  Inserts a ready entry at the young end (rescan). -1 if the table is full.
int kvt_disk_insert_ready(kvt_disk_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind,
                          uint64_t size);

//  Records that the name of (ns, key, kind) is held by a file that is not
//  ours (rescan): puts of it are refused, reads miss. -1 if the table is
//  full.
int kvt_disk_insert_blocked(kvt_disk_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind);

//  Warns, once per instance, that a file of another identity was found and
//  left alone (call without the lock).
void kvt_disk_identity_warn(kvt_disk_t *self, const char *name, const char *where);

//  Index (kvt_disk_index.c), under the lock.

//  The entry in `state` matching a query (kind candidates, best first), or
//  KVT_NIL.
uint32_t kvt_disk_find(kvt_disk_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind,
                       kvt_dent_state_t state);

//  True if the exact name of (ns, key, kind) is blocked (held by a file
//  that is not ours, or by one of ours that could not be deleted).
bool kvt_disk_is_blocked(kvt_disk_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind);

//  Moves a ready entry to the young end of the LRU.
void kvt_disk_refresh(kvt_disk_t *self, uint32_t i);

//  Takes a free entry for (ns, key, kind) in `state` (its bytes counted
//  unless blocked); KVT_NIL if the table is full.
uint32_t kvt_disk_ent_alloc(kvt_disk_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind,
                            uint64_t size, kvt_dent_state_t state);

//  Forgets an entry (the caller deals with its file).
void kvt_disk_ent_free(kvt_disk_t *self, uint32_t i);

//  Makes a written entry readable at the young end of the LRU.
void kvt_disk_ent_publish(kvt_disk_t *self, uint32_t i);

//  Deletes a ready entry's file and forgets it; name receives the file
//  name. 0 (deleted, or already gone) or the errno of a failed unlink: the
//  file is still there, so the entry leaves the index but keeps its name
//  blocked (delete_failed); the caller logs it once the lock is dropped.
//  Under the lock, so a name is never unlinked after a new file of the same
//  name was renamed into place.
int kvt_disk_delete(kvt_disk_t *self, uint32_t i, char name[KVT_DISK_NAME_LEN]);

//  Takes the oldest unpinned ready file out of the index (deleting it);
//  false if there is none. A pinned file met at the old end is being read:
//  it goes to the young end, so no later eviction walks past it again. A
//  file that could not be deleted still leaves the index: *err and name say
//  which (the first one, if *err was 0).
bool kvt_disk_evict_one(kvt_disk_t *self, int *err, char name[KVT_DISK_NAME_LEN]);

//  Logs a delete that failed (without the lock).
void kvt_disk_log_undeleted(kvt_disk_t *self, const char *what, const char *name, int err);

//  A ready or writing entry whose name turned out to be held by a file that
//  is not ours, or by one of ours that could not be deleted: it stops being
//  readable (pins lapse, its bytes leave the accounting) and keeps the name,
//  so no put writes over that file.
void kvt_disk_ent_block(kvt_disk_t *self, uint32_t i);

//  Write queue (kvt_disk_io.c). io_init allocates `depth` jobs; io_start
//  starts the threads (none under INLINE; 0, or -1 with err); io_stop
//  finishes every write, stops the threads and frees the queue; io_enqueue
//  (under the lock, a free job required) takes a job for a write of entry
//  `ent` and returns it: queued for the threads, or under INLINE held for
//  the caller, who runs it with io_run_inline once it dropped the lock.
//  Under INLINE no caller runs another's job: a completion that calls into
//  the pool never runs on a thread that may hold the pool lock.
int kvt_disk_io_init(kvt_disk_t *self, uint32_t depth);
int kvt_disk_io_start(kvt_disk_t *self, uint32_t nthreads, char *err, size_t errlen);
void kvt_disk_io_stop(kvt_disk_t *self);
uint32_t kvt_disk_io_enqueue(kvt_disk_t *self, uint32_t ent, const void *src, size_t size,
                             void *owned, kvt_disk_done_fn *done, void *arg);
void kvt_disk_io_run_inline(kvt_disk_t *self, uint32_t job);

//  The directory's manifest (kvt_disk_manifest.c): the layout id and the
//  namespace its objects were written with.
#define KVT_DISK_MANIFEST     ".kvt-manifest"
#define KVT_DISK_MANIFEST_TMP ".kvt-manifest.tmp"

//  At open, before the rescan: writes the manifest of a fresh directory, or
//  checks the one found against this instance's layout id and ns_id (0: not
//  recorded; a recorded namespace is then not checked). 0, or -1 (counted
//  in kvt_disk_manifest_refusals) with err naming the directory and both
//  values.
int kvt_disk_manifest_open(kvt_disk_t *self, uint64_t ns_id, char *err, size_t errlen);

//  Parses a manifest's bytes (exactly three lines: the magic, then
//  layout_id= and namespace= with 16 lowercase hex digits each): 0 with
//  *layout and *ns, or -1 with *why naming the bad line.
int kvt_disk_manifest_parse(const char *bytes, size_t len, uint64_t *layout, uint64_t *ns,
                            const char **why);

//  Writes the manifest of (layout, ns) into out (cap bytes); its length.
int kvt_disk_manifest_format(char *out, size_t cap, uint64_t layout, uint64_t ns);

//  True for the manifest's names (the rescan skips them: not objects, not foreign).
bool kvt_disk_manifest_name(const char *name);

//  Logs a line drawn from `budget`. Call without the disk lock.
void kvt_disk_logf(kvt_disk_t *self, int level, kvt_dlog_t budget, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
