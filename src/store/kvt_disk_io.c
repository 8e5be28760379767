/*  kvt_disk_io.c — the disk backend's write queue and the I/O threads that
    serve it: a job writes a temporary file outside the lock, calls the
    put's completion, and renames the file into place (or throws it away)
    under the lock. The index and the put's admission are in kvt_disk.c. */
#define _GNU_SOURCE //  renameat2 (RENAME_NOREPLACE)
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvt_disk_int.h"

//  Renames tmp to name unless name exists, whatever it is: an entry that
//  appeared under an object's name (a FIFO, a directory, someone's file) is
//  not ours to replace. 0, or -1 with errno (EEXIST when the name is taken),
//  or 1 (errno set) when the object is in place but its hard-linked
//  temporary could not be deleted.
static int s_rename_noreplace(int dirfd, const char *tmp, const char *name)
{
#ifdef RENAME_NOREPLACE
    if (renameat2(dirfd, tmp, dirfd, name, RENAME_NOREPLACE) == 0)
        return 0;
    if (errno != EINVAL && errno != ENOSYS)
        return -1;
#endif
    //  A file system without RENAME_NOREPLACE: a hard link fails if the name
    //  exists, and then the temporary goes.
    if (linkat(dirfd, tmp, dirfd, name, 0) == 0) {
        //  The object is in place under its name; a temporary left behind
        //  is only a stray name (the next rescan deletes it), so the rename
        //  stands but the caller hears why it lingers.
        if (unlinkat(dirfd, tmp, 0) != 0 && errno != ENOENT)
            return 1;
        return 0;
    }
    if (errno == EEXIST)
        return -1;
    //  Nor hard links: look, then rename (the window between is not closed).
    struct stat sb;
    if (fstatat(dirfd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0) {
        errno = EEXIST;
        return -1;
    }
    return renameat(dirfd, tmp, dirfd, name);
}

//  The rename failed because something already holds the name.
static bool s_name_taken(int err)
{
    return err == EEXIST || err == EISDIR || err == ENOTEMPTY || err == ENOTDIR;
}

//  Runs one job without the lock; finishes it under the lock. held: an
//  I/O thread's job, which the fault hook's stall may hold.
static void s_run_job(kvt_disk_t *self, kvt_djob_t job, bool held)
{
    kvt_dent_t snap;
    pthread_mutex_lock(&self->mu);
    if (held && self->stall != KVT_DISK_STALL_OFF) {
        self->stalled++;
        pthread_cond_broadcast(&self->stall_cv);
        while (self->stall != KVT_DISK_STALL_OFF)
            pthread_cond_wait(&self->stall_cv, &self->mu);
        self->stalled--;
    }
    snap = self->ents[job.ent];
    uint64_t seq = ++self->tmp_seq;
    pthread_mutex_unlock(&self->mu);

    char name[KVT_DISK_NAME_LEN], tmp[KVT_DISK_TMP_LEN];
    kvt_disk_file_name(name, snap.ns, snap.key, (kvt_obj_kind_t)snap.kind, &self->id);
    kvt_disk_tmp_name(tmp, name, seq);
    int rc = kvt_disk_file_write(self->dirfd, tmp, snap.ns, snap.key, (kvt_obj_kind_t)snap.kind,
                                 &self->id, job.src, job.size, self->fsync);
    int werr = errno;
    bool valid = true;
    if (job.done)
        valid = job.done(job.arg, rc == 0 ? KVT_STORE_OK : KVT_STORE_EIO) == 0;
    free(job.owned);

    bool renamed = false, rename_failed = false, taken = false;
    int tmp_err = 0;
    pthread_mutex_lock(&self->mu);
    kvt_dent_t *e = &self->ents[job.ent];
    assert(e->gen == job.gen && e->state == KVT_DENT_WRITING);
    if (rc == 0 && valid) {
        int rn = s_rename_noreplace(self->dirfd, tmp, name);
        if (rn == 1) {
            tmp_err = errno; //  published; only the temporary's name lingers
            self->st.delete_failed++;
        }
        if (rn >= 0) {
            renamed = true;
            kvt_disk_ent_publish(self, job.ent);
            self->st.puts++;
            self->st.put_bytes += job.size;
        } else {
            rename_failed = true;
            werr = errno;
            taken = s_name_taken(werr);
        }
    }
    if (!renamed) {
        if (unlinkat(self->dirfd, tmp, 0) != 0 && errno != ENOENT) {
            tmp_err = errno;
            self->st.delete_failed++;
        }
        if (rc != 0 || rename_failed)
            self->st.io_errors++;
        else
            self->st.puts_discarded++;
        if (taken)
            kvt_disk_ent_block(self, job.ent); //  no later put tries that name again
        else
            kvt_disk_ent_free(self, job.ent);
    }
    pthread_mutex_unlock(&self->mu);
    if (renamed && self->fsync && fsync(self->dirfd) != 0) {
        pthread_mutex_lock(&self->mu);
        self->st.io_errors++;
        pthread_mutex_unlock(&self->mu);
    }
    if (taken)
        kvt_disk_logf(self, 1, KVT_DLOG_RUNTIME,
                      "write of %s failed: its name is held by an entry that is not ours (%s); "
                      "left alone, the name is blocked",
                      name, strerror(werr));
    else if (rc != 0 || rename_failed)
        kvt_disk_logf(self, 1, KVT_DLOG_RUNTIME, "write of %s failed: %s", name, strerror(werr));
    if (tmp_err != 0)
        kvt_disk_logf(self, 1, KVT_DLOG_RUNTIME, "could not delete temporary %s: %s", tmp,
                      strerror(tmp_err));
}

//  Runs job j, no longer queued (under the lock on entry and exit, without
//  it while the job runs), and frees its slot.
static void s_run_held(kvt_disk_t *self, uint32_t j, bool held)
{
    kvt_djob_t job = self->jobs[j];
    pthread_mutex_unlock(&self->mu);
    s_run_job(self, job, held);
    pthread_mutex_lock(&self->mu);
    kvt_ilist_prepend(&self->job_free, KVT_ILINKS(self->jobs, link), j);
    if (--self->busy == 0)
        pthread_cond_broadcast(&self->idle);
}

//  Takes the oldest queued job and runs it (under the lock).
static void s_run_next(kvt_disk_t *self)
{
    uint32_t j = kvt_ilist_take_head(&self->queue, KVT_ILINKS(self->jobs, link));
    s_run_held(self, j, true);
}

static void *s_io_thread(void *arg)
{
    kvt_disk_t *self = arg;
    pthread_mutex_lock(&self->mu);
    while (true) {
        while (self->queue.count == 0 && !self->stop)
            pthread_cond_wait(&self->work, &self->mu);
        if (self->queue.count == 0)
            break; //  stop, and nothing left to write
        s_run_next(self);
    }
    pthread_mutex_unlock(&self->mu);
    return NULL;
}

void kvt_disk_io_run_inline(kvt_disk_t *self, uint32_t j)
{
    pthread_mutex_lock(&self->mu);
    self->st.writes_inline++;
    s_run_held(self, j, false);
    pthread_mutex_unlock(&self->mu);
}

int kvt_disk_io_init(kvt_disk_t *self, uint32_t depth)
{
    self->njobs = depth;
    self->jobs = calloc(self->njobs, sizeof(kvt_djob_t));
    if (!self->jobs)
        return -1;
    kvt_ilist_init(&self->job_free);
    kvt_ilist_init(&self->queue);
    for (uint32_t i = self->njobs; i-- > 0;)
        kvt_ilist_prepend(&self->job_free, KVT_ILINKS(self->jobs, link), i);
    return 0;
}

int kvt_disk_io_start(kvt_disk_t *self, uint32_t nthreads, char *err, size_t errlen)
{
    if (self->inline_io)
        return 0; //  the callers run the writes
    self->threads = calloc(nthreads, sizeof(pthread_t));
    if (!self->threads) {
        kvt_store_seterr(err, errlen, "disk.io_threads=%u: out of memory", nthreads);
        return -1;
    }
    for (uint32_t t = 0; t < nthreads; t++) {
        if (pthread_create(&self->threads[t], NULL, s_io_thread, self) != 0) {
            kvt_store_seterr(err, errlen, "disk.io_threads=%u: cannot start a thread", nthreads);
            return -1;
        }
        self->nthreads++;
    }
    return 0;
}

void kvt_disk_io_stop(kvt_disk_t *self)
{
    kvt_disk_stall(self, KVT_DISK_STALL_OFF); //  every write finishes
    if (self->inline_io || self->nthreads > 0)
        kvt_disk_flush(self);
    pthread_mutex_lock(&self->mu);
    self->stop = true;
    pthread_cond_broadcast(&self->work);
    pthread_mutex_unlock(&self->mu);
    for (uint32_t t = 0; t < self->nthreads; t++)
        pthread_join(self->threads[t], NULL);
    self->nthreads = 0;
    free(self->threads);
    self->threads = NULL;
    free(self->jobs);
    self->jobs = NULL;
}

uint32_t kvt_disk_io_enqueue(kvt_disk_t *self, uint32_t ent, const void *src, size_t size,
                             void *owned, kvt_disk_done_fn *done, void *arg)
{
    assert(self->job_free.count > 0);
    uint32_t j = kvt_ilist_take_head(&self->job_free, KVT_ILINKS(self->jobs, link));
    self->jobs[j] = (kvt_djob_t){.ent = ent,
                                 .gen = self->ents[ent].gen,
                                 .src = src,
                                 .size = size,
                                 .owned = owned,
                                 .done = done,
                                 .arg = arg,
                                 .link = {KVT_ILIST_NONE, KVT_ILIST_NONE}};
    self->busy++;
    if (self->inline_io)
        return j; //  held for its caller: no one else runs it
    kvt_ilist_append(&self->queue, KVT_ILINKS(self->jobs, link), j);
    pthread_cond_signal(&self->work);
    return j;
}

void kvt_disk_stall(kvt_disk_t *self, kvt_disk_stall_t mode)
{
    pthread_mutex_lock(&self->mu);
    self->stall = mode;
    pthread_cond_broadcast(&self->stall_cv);
    pthread_mutex_unlock(&self->mu);
}

uint32_t kvt_disk_stalled(kvt_disk_t *self)
{
    pthread_mutex_lock(&self->mu);
    uint32_t n = self->stalled;
    pthread_mutex_unlock(&self->mu);
    return n;
}

void kvt_disk_flush(kvt_disk_t *self)
{
    assert(self);
    pthread_mutex_lock(&self->mu);
    if (self->stall == KVT_DISK_STALL_UNTIL_FLUSH) {
        self->stall = KVT_DISK_STALL_OFF; //  the flush the stall waited for
        pthread_cond_broadcast(&self->stall_cv);
    }
    while (self->busy > 0)
        pthread_cond_wait(&self->idle, &self->mu);
    pthread_mutex_unlock(&self->mu);
}
