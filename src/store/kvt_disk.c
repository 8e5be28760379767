/*  kvt_disk.c — the disk backend: configuration and lifecycle, the
    admission of puts, synchronous verified reads, lookups and touches. The
    index and LRU are in kvt_disk_index.c, the write queue and its I/O
    threads in kvt_disk_io.c, the file format in kvt_disk_file.c, the
    start-up rescan in kvt_disk_rescan.c; the design is described in
    kvt_disk.h and docs/store.md. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvt_disk_int.h"

#define S_DEFAULT_THREADS 2u
#define S_DEFAULT_DEPTH   64u
#define S_MAX_THREADS     64u
#define S_MAX_DEPTH       65536u
#define S_MAX_OBJECTS     (4u << 20)

void kvt_disk_config_defaults(kvt_disk_config_t *cfg)
{
    *cfg = (kvt_disk_config_t){.name = "disk",
                               .io_threads = S_DEFAULT_THREADS,
                               .queue_depth = S_DEFAULT_DEPTH,
                               .world_size = 1};
}

// ---------------------------------------------------------- creation --

static int s_validate(const kvt_disk_config_t *in, kvt_disk_config_t *cfg, char *err, size_t errlen)
{
    *cfg = *in;
    if (!cfg->name)
        cfg->name = "disk";
    if (cfg->io_threads == 0)
        cfg->io_threads = S_DEFAULT_THREADS;
    if (cfg->queue_depth == 0)
        cfg->queue_depth = S_DEFAULT_DEPTH;
    if (!cfg->dir || !cfg->dir[0]) {
        kvt_store_seterr(err, errlen, "disk.dir=(empty): a directory is required");
        return -1;
    }
    if (strlen(cfg->dir) + KVT_DISK_NAME_LEN + 32 >= PATH_MAX) {
        kvt_store_seterr(err, errlen, "disk.dir=%s: path too long", cfg->dir);
        return -1;
    }
    if (cfg->capacity_bytes < 2 * KVT_DISK_HDR) {
        kvt_store_seterr(err, errlen, "disk.capacity_bytes=%llu: must be at least %d",
                         (unsigned long long)cfg->capacity_bytes, 2 * KVT_DISK_HDR);
        return -1;
    }
    if (cfg->max_objects == 0) {
        uint64_t n = cfg->capacity_bytes / (64u << 10);
        cfg->max_objects = (uint32_t)(n < 64 ? 64 : n > S_MAX_OBJECTS ? S_MAX_OBJECTS : n);
    }
    if (cfg->max_objects > S_MAX_OBJECTS) {
        kvt_store_seterr(err, errlen, "disk.max_objects=%u: must be at most %u", cfg->max_objects,
                         S_MAX_OBJECTS);
        return -1;
    }
    if (cfg->io_threads > S_MAX_THREADS) {
        kvt_store_seterr(err, errlen, "disk.io_threads=%u: must be in [1, %u]", cfg->io_threads,
                         S_MAX_THREADS);
        return -1;
    }
    if (cfg->io_mode != KVT_DISK_IO_THREADS && cfg->io_mode != KVT_DISK_IO_INLINE) {
        kvt_store_seterr(err, errlen, "disk.io_mode=%d: must be threads (0) or inline (1)",
                         (int)cfg->io_mode);
        return -1;
    }
    if (cfg->queue_depth > S_MAX_DEPTH) {
        kvt_store_seterr(err, errlen, "disk.queue_depth=%u: must be in [1, %u]", cfg->queue_depth,
                         S_MAX_DEPTH);
        return -1;
    }
    if (cfg->world_size == 0)
        cfg->world_size = 1;
    if (cfg->rank >= cfg->world_size) {
        kvt_store_seterr(err, errlen, "disk.rank=%u: must be below disk.world_size=%u", cfg->rank,
                         cfg->world_size);
        return -1;
    }
    if (!cfg->log)
        cfg->log = kvt_store_log_stderr;
    return 0;
}

kvt_disk_t *kvt_disk_new(const kvt_disk_config_t *in, char *err, size_t errlen)
{
    assert(in);
    kvt_disk_config_t cfg;
    if (s_validate(in, &cfg, err, errlen) != 0)
        return NULL;
    if (mkdir(cfg.dir, 0755) != 0 && errno != EEXIST) {
        kvt_store_seterr(err, errlen, "disk.dir=%s: cannot create: %s", cfg.dir, strerror(errno));
        return NULL;
    }
    kvt_disk_t *self = calloc(1, sizeof(*self));
    if (!self) {
        kvt_store_seterr(err, errlen, "disk: out of memory");
        return NULL;
    }
    self->dirfd = -1;
    snprintf(self->name, sizeof(self->name), "%s", cfg.name);
    snprintf(self->dir, sizeof(self->dir), "%s", cfg.dir);
    self->id = (kvt_dident_t){.rank = cfg.rank, .world = cfg.world_size, .layout = cfg.layout_id};
    self->capacity = cfg.capacity_bytes;
    self->fsync = cfg.fsync;
    self->inline_io = cfg.io_mode == KVT_DISK_IO_INLINE;
    self->log = cfg.log;
    self->log_arg = cfg.log_arg;
    pthread_mutex_init(&self->mu, NULL);
    pthread_cond_init(&self->work, NULL);
    pthread_cond_init(&self->idle, NULL);
    pthread_cond_init(&self->stall_cv, NULL);
    //  The directory itself is never followed through a symbolic link: a
    //  rank directory that points elsewhere would read and delete files in
    //  a place nobody configured. Every file is then named relative to it.
    self->dirfd = open(self->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (self->dirfd < 0) {
        struct stat sb;
        bool link = errno == ELOOP ||
                    (errno == ENOTDIR && lstat(self->dir, &sb) == 0 && S_ISLNK(sb.st_mode));
        kvt_store_seterr(err, errlen, "disk.dir=%s: %s", self->dir,
                         link ? "is a symbolic link (not followed)" : strerror(errno));
        goto cleanup;
    }
    //  One instance per directory: another with the same identity would
    //  delete this one's temporaries at its rescan and evict files this one
    //  indexed. The lock goes with the descriptor (a crash releases it).
    if (flock(self->dirfd, LOCK_EX | LOCK_NB) != 0) {
        kvt_store_seterr(err, errlen, "disk.dir=%s: %s", self->dir,
                         errno == EWOULDBLOCK ? "in use by another disk tier (locked)"
                                              : strerror(errno));
        goto cleanup;
    }
    self->nents = cfg.max_objects;
    self->ents = calloc(self->nents, sizeof(kvt_dent_t));
    if (!self->ents || kvt_disk_io_init(self, cfg.queue_depth) != 0 ||
        kvt_keymap_init(&self->map, self->nents) != 0) {
        kvt_store_seterr(err, errlen, "disk.max_objects=%u: cannot allocate the tables",
                         self->nents);
        goto cleanup;
    }
    self->ent_free = KVT_NIL;
    for (uint32_t i = self->nents; i-- > 0;) {
        self->ents[i].gen = 1;
        self->ents[i].link.next = self->ent_free;
        self->ent_free = i;
    }
    kvt_ilist_init(&self->lru);
    if (kvt_disk_manifest_open(self, cfg.ns_id, err, errlen) != 0 ||
        kvt_disk_rescan(self, err, errlen) != 0)
        goto cleanup;
    if (kvt_disk_io_start(self, cfg.io_threads, err, errlen) != 0)
        goto cleanup;
    return self;

cleanup:
    kvt_disk_destroy(&self);
    return NULL;
}

void kvt_disk_destroy(kvt_disk_t **self_p)
{
    assert(self_p);
    kvt_disk_t *self = *self_p;
    if (!self)
        return;
    kvt_disk_io_stop(self);
    kvt_keymap_fini(&self->map); //  safe on a map never initialised (zeroed)
    if (self->dirfd >= 0)
        close(self->dirfd);
    free(self->ents);
    pthread_cond_destroy(&self->work);
    pthread_cond_destroy(&self->idle);
    pthread_cond_destroy(&self->stall_cv);
    pthread_mutex_destroy(&self->mu);
    free(self);
    *self_p = NULL;
}

// ------------------------------------------------------------ writes --

//  Takes ownership of `owned` only when it returns OK.
static int s_put(kvt_disk_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind,
                 const void *src, size_t size, void *owned, kvt_disk_done_fn *done, void *arg)
{
    if (!kvt_store_kind_ok(kind) || size == 0 || !src)
        return KVT_STORE_EINVAL;
    int rc = KVT_STORE_OK, derr = 0;
    uint32_t job = KVT_NIL;
    char dname[KVT_DISK_NAME_LEN] = "";
    pthread_mutex_lock(&self->mu);
    uint32_t i = kvt_disk_find(self, ns, key, kind, KVT_DENT_READY);
    if (i != KVT_NIL) {
        kvt_disk_refresh(self, i);
        self->st.puts_skipped++;
        rc = KVT_STORE_SKIPPED;
        goto cleanup;
    }
    if (kvt_disk_find(self, ns, key, kind, KVT_DENT_WRITING) != KVT_NIL) {
        self->st.puts_duplicate++;
        rc = KVT_STORE_DUPLICATE;
        goto cleanup;
    }
    if (kvt_disk_is_blocked(self, ns, key, kind)) {
        self->st.puts_blocked++;
        rc = KVT_STORE_EIO;
        goto dropped;
    }
    //  Compared before adding the header: a size near SIZE_MAX would wrap
    //  (capacity is at least 2 headers).
    if (size > self->capacity - KVT_DISK_HDR) {
        rc = KVT_STORE_ETOOBIG;
        goto dropped;
    }
    uint64_t bytes = KVT_DISK_HDR + (uint64_t)size;
    if (self->job_free.count == 0) {
        rc = KVT_STORE_EBUSY;
        goto dropped;
    }
    //  Only unpinned ready files are evictable; queued writes and pinned
    //  files keep their room. Decide before deleting anything, so a put
    //  that cannot fit deletes nothing.
    if (self->writing + self->pinned + bytes > self->capacity) {
        rc = KVT_STORE_ENOSPACE;
        goto dropped;
    }
    if (self->ent_free == KVT_NIL && self->st.objects == self->npinned) {
        rc = KVT_STORE_EFULL;
        goto dropped;
    }
    while (self->ent_free == KVT_NIL || self->used + bytes > self->capacity) {
        if (!kvt_disk_evict_one(self, &derr, dname)) { //  cannot happen after the checks above
            rc = KVT_STORE_ENOSPACE;
            goto dropped;
        }
    }
    i = kvt_disk_ent_alloc(self, ns, key, kind, size, KVT_DENT_WRITING);
    self->st.objects_writing++;
    job = kvt_disk_io_enqueue(self, i, src, size, owned, done, arg);
    goto cleanup;
dropped:
    self->st.puts_dropped++;
cleanup:
    pthread_mutex_unlock(&self->mu);
    if (derr != 0)
        kvt_disk_log_undeleted(self, "evicted file", dname, derr);
    if (rc == KVT_STORE_OK && self->inline_io)
        kvt_disk_io_run_inline(self, job); //  written (or failed) before the put returns
    return rc;
}

int kvt_disk_put(kvt_disk_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind,
                 const void *src, size_t size, kvt_disk_done_fn *done, void *arg)
{
    assert(self);
    return s_put(self, ns, key, kind, src, size, NULL, done, arg);
}

int kvt_disk_put_copy(kvt_disk_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind,
                      const void *src, size_t size)
{
    assert(self);
    if (!kvt_store_kind_ok(kind) || size == 0 || !src)
        return KVT_STORE_EINVAL;
    //  Do not copy what would be skipped.
    pthread_mutex_lock(&self->mu);
    int rc = KVT_STORE_OK;
    uint32_t i = kvt_disk_find(self, ns, key, kind, KVT_DENT_READY);
    if (i != KVT_NIL) {
        kvt_disk_refresh(self, i);
        self->st.puts_skipped++;
        rc = KVT_STORE_SKIPPED;
    } else if (kvt_disk_find(self, ns, key, kind, KVT_DENT_WRITING) != KVT_NIL) {
        self->st.puts_duplicate++;
        rc = KVT_STORE_DUPLICATE;
    }
    pthread_mutex_unlock(&self->mu);
    if (rc != KVT_STORE_OK)
        return rc;
    void *buf = malloc(size);
    if (!buf)
        return KVT_STORE_ENOMEM;
    memcpy(buf, src, size);
    rc = s_put(self, ns, key, kind, buf, size, buf, NULL, NULL);
    if (rc != KVT_STORE_OK)
        free(buf);
    return rc;
}

// ------------------------------------------------------------- reads --

int kvt_disk_stat(kvt_disk_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind, size_t *size,
                  kvt_obj_kind_t *found)
{
    assert(self);
    if (!kvt_store_kind_ok(kind))
        return KVT_STORE_EINVAL;
    int rc = KVT_STORE_ENOTFOUND;
    pthread_mutex_lock(&self->mu);
    uint32_t i = kvt_disk_find(self, ns, key, kind, KVT_DENT_READY);
    if (i != KVT_NIL) {
        if (size)
            *size = self->ents[i].size;
        if (found)
            *found = (kvt_obj_kind_t)self->ents[i].kind;
        rc = KVT_STORE_OK;
    }
    pthread_mutex_unlock(&self->mu);
    return rc;
}

int kvt_disk_pin(kvt_disk_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind, size_t *size,
                 kvt_obj_kind_t *found, uint64_t *pin)
{
    assert(self && pin);
    *pin = 0;
    if (!kvt_store_kind_ok(kind))
        return KVT_STORE_EINVAL;
    int rc = KVT_STORE_ENOTFOUND;
    pthread_mutex_lock(&self->mu);
    uint32_t i = kvt_disk_find(self, ns, key, kind, KVT_DENT_READY);
    if (i != KVT_NIL) {
        kvt_dent_t *e = &self->ents[i];
        if (e->pins++ == 0) {
            self->pinned += KVT_DISK_HDR + e->size;
            self->npinned++;
        }
        if (size)
            *size = e->size;
        if (found)
            *found = (kvt_obj_kind_t)e->kind;
        *pin = kvt_store_handle(i, e->gen);
        rc = KVT_STORE_OK;
    }
    pthread_mutex_unlock(&self->mu);
    return rc;
}

void kvt_disk_unpin(kvt_disk_t *self, uint64_t pin)
{
    assert(self);
    uint32_t i, gen;
    if (!kvt_store_unhandle(pin, self->nents, &i, &gen))
        return;
    pthread_mutex_lock(&self->mu);
    kvt_dent_t *e = &self->ents[i];
    if (e->gen == gen && e->state == KVT_DENT_READY && e->pins > 0 && --e->pins == 0) {
        self->pinned -= KVT_DISK_HDR + e->size;
        self->npinned--;
    }
    pthread_mutex_unlock(&self->mu);
}

int kvt_disk_read(kvt_disk_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind, void *dst,
                  size_t cap, size_t *size, kvt_obj_kind_t *found)
{
    assert(self && size && found);
    if (!kvt_store_kind_ok(kind))
        return KVT_STORE_EINVAL;
    pthread_mutex_lock(&self->mu);
    uint32_t i = kvt_disk_find(self, ns, key, kind, KVT_DENT_READY);
    if (i == KVT_NIL) {
        self->st.misses[kind - 1]++;
        pthread_mutex_unlock(&self->mu);
        return KVT_STORE_ENOTFOUND;
    }
    kvt_dent_t snap = self->ents[i];
    kvt_disk_refresh(self, i);
    pthread_mutex_unlock(&self->mu);
    if (cap < snap.size)
        return KVT_STORE_EINVAL;

    char name[KVT_DISK_NAME_LEN];
    kvt_disk_file_name(name, snap.ns, snap.key, (kvt_obj_kind_t)snap.kind, &self->id);
    const char *why = "";
    kvt_dread_t v = kvt_disk_file_read(self->dirfd, name, snap.ns, snap.key,
                                       (kvt_obj_kind_t)snap.kind, &self->id, snap.size, dst, &why);
    int rc = KVT_STORE_OK, derr = 0;
    pthread_mutex_lock(&self->mu);
    bool same = self->ents[i].gen == snap.gen && self->ents[i].state == KVT_DENT_READY;
    switch (v) {
    case KVT_DREAD_OK:
        self->st.hits[kind - 1]++;
        self->st.read_bytes += snap.size;
        *size = snap.size;
        *found = (kvt_obj_kind_t)snap.kind;
        break;
    case KVT_DREAD_CORRUPT:
        self->st.corrupt++;
        if (same)
            derr = kvt_disk_delete(self, i, name);
        rc = KVT_STORE_ECORRUPT;
        break;
    case KVT_DREAD_GONE:
        //  Deleted behind our back (or evicted meanwhile): forget it.
        if (same)
            kvt_disk_ent_free(self, i);
        rc = KVT_STORE_ENOTFOUND;
        break;
    case KVT_DREAD_IDENTITY:
    case KVT_DREAD_FOREIGN:
        //  IDENTITY: another writer's file under our name. FOREIGN:
        //  something that is not our file took the name (a FIFO, a
        //  directory, a symbolic link), never opened through. Either way a
        //  miss, not ours to delete or to write over: the name stays blocked.
        if (v == KVT_DREAD_IDENTITY)
            self->st.identity_mismatch++;
        else
            self->st.foreign_files++;
        if (same)
            kvt_disk_ent_block(self, i);
        rc = KVT_STORE_ENOTFOUND;
        break;
    case KVT_DREAD_EIO:
        self->st.io_errors++;
        rc = KVT_STORE_EIO;
        break;
    }
    if (rc != KVT_STORE_OK)
        self->st.misses[kind - 1]++;
    pthread_mutex_unlock(&self->mu);
    if (v == KVT_DREAD_CORRUPT && derr != 0)
        kvt_disk_logf(self, 1, KVT_DLOG_RUNTIME,
                      "corrupt file %s (%s): could not delete it: %s; it stays on disk, out of "
                      "the index, its name blocked",
                      name, why, strerror(derr));
    else if (v == KVT_DREAD_CORRUPT && same)
        kvt_disk_logf(self, 1, KVT_DLOG_RUNTIME, "deleted corrupt file %s: %s", name, why);
    else if (v == KVT_DREAD_CORRUPT)
        kvt_disk_logf(self, 1, KVT_DLOG_RUNTIME, "corrupt file %s: %s", name, why);
    else if (v == KVT_DREAD_EIO)
        kvt_disk_logf(self, 1, KVT_DLOG_RUNTIME, "read of %s failed: %s", name, why);
    else if (v == KVT_DREAD_IDENTITY)
        kvt_disk_identity_warn(self, name, "read");
    else if (v == KVT_DREAD_FOREIGN)
        kvt_disk_logf(self, 1, KVT_DLOG_RUNTIME, "read of %s refused: %s, not ours (left alone)",
                      name, why);
    return rc;
}

static size_t s_count(kvt_disk_t *self, uint64_t ns, const kvt_hash_t *keys, size_t n,
                      kvt_obj_kind_t kind)
{
    size_t k = 0;
    while (k < n && kvt_disk_find(self, ns, keys[k], kind, KVT_DENT_READY) != KVT_NIL)
        k++;
    return k;
}

//  Leading keys present; with `refresh`, they go to the young end, deepest
//  first (so the prefix ends up youngest).
static size_t s_leading(kvt_disk_t *self, uint64_t ns, const kvt_hash_t *keys, size_t n,
                        kvt_obj_kind_t kind, bool refresh)
{
    assert(self && (keys || n == 0));
    if (!kvt_store_kind_ok(kind))
        return 0;
    pthread_mutex_lock(&self->mu);
    size_t k = s_count(self, ns, keys, n, kind);
    for (size_t j = refresh ? k : 0; j-- > 0;)
        kvt_disk_refresh(self, kvt_disk_find(self, ns, keys[j], kind, KVT_DENT_READY));
    pthread_mutex_unlock(&self->mu);
    return k;
}

size_t kvt_disk_lookup(kvt_disk_t *self, uint64_t ns, const kvt_hash_t *keys, size_t n,
                       kvt_obj_kind_t kind)
{
    return s_leading(self, ns, keys, n, kind, true);
}

size_t kvt_disk_count(kvt_disk_t *self, uint64_t ns, const kvt_hash_t *keys, size_t n,
                      kvt_obj_kind_t kind)
{
    return s_leading(self, ns, keys, n, kind, false);
}

kvt_touch_t kvt_disk_touch(kvt_disk_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind)
{
    assert(self);
    if (!kvt_store_kind_ok(kind))
        return KVT_TOUCH_GONE;
    pthread_mutex_lock(&self->mu);
    uint32_t i = kvt_disk_find(self, ns, key, kind, KVT_DENT_READY);
    if (i != KVT_NIL) {
        kvt_disk_refresh(self, i);
        self->st.touches_present++;
    } else {
        self->st.touches_gone++;
    }
    pthread_mutex_unlock(&self->mu);
    return i != KVT_NIL ? KVT_TOUCH_PRESENT : KVT_TOUCH_GONE;
}

int kvt_disk_remove(kvt_disk_t *self, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind)
{
    assert(self);
    if (!kvt_store_kind_ok(kind))
        return KVT_STORE_EINVAL;
    int rc = KVT_STORE_OK, derr = 0;
    char name[KVT_DISK_NAME_LEN];
    pthread_mutex_lock(&self->mu);
    kvt_keymap_entry_t *m = kvt_keymap_find(&self->map, ns, key);
    uint32_t v = m ? m->slot[kind - 1] : 0;
    if (!v || self->ents[v - 1].state == KVT_DENT_BLOCKED)
        rc = KVT_STORE_ENOTFOUND; //  a blocked name is not ours to delete
    else if (self->ents[v - 1].state != KVT_DENT_READY || self->ents[v - 1].pins > 0)
        rc = KVT_STORE_EBUSY;
    else if ((derr = kvt_disk_delete(self, v - 1, name)) != 0)
        rc = KVT_STORE_EIO;
    pthread_mutex_unlock(&self->mu);
    if (derr != 0)
        kvt_disk_log_undeleted(self, "removed file", name, derr);
    return rc;
}

void kvt_disk_stats(kvt_disk_t *self, kvt_disk_stats_t *stats)
{
    assert(self && stats);
    pthread_mutex_lock(&self->mu);
    *stats = self->st;
    stats->capacity_bytes = self->capacity;
    stats->used_bytes = self->used;
    pthread_mutex_unlock(&self->mu);
}
