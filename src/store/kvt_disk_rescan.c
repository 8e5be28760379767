/*  kvt_disk_rescan.c — the disk backend's start-up rescan: rebuilds the
    index from the directory, keeps the newest valid files that fit, and
    deletes only what this instance's identity wrote (its temporaries, its
    corrupt files, its files over capacity). Files of another identity and
    entries that are not object names are left alone and counted. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/kvt_vec.h"
#include "kvt_disk_int.h"

typedef struct {
    uint64_t ns;                  //  namespace
    kvt_hash_t key;               //  prefix hash
    uint64_t size;                //  payload bytes
    uint64_t mtime;               //  modification time, ns
    kvt_obj_kind_t kind;          //  object kind
    bool keep;                    //  fits the capacity and the table: indexed
    char name[KVT_DISK_NAME_LEN]; //  file name
} s_found_t;

static int s_by_mtime(const void *a, const void *b)
{
    const s_found_t *x = a, *y = b;
    if (x->mtime != y->mtime)
        return x->mtime < y->mtime ? -1 : 1;
    return strcmp(x->name, y->name);
}

//  What the rescan did, for its one summary line.
typedef struct {
    uint32_t entries;     //  directory entries seen (not . and ..)
    uint32_t kept;        //  files indexed
    uint64_t kept_bytes;  //  their bytes, headers included
    uint32_t tmp_deleted; //  our own temporaries deleted
    uint32_t corrupt;     //  our files that failed validation, deleted
    uint32_t over;        //  our valid files over capacity or the table, deleted
    uint32_t foreign;     //  entries that are not ours: left alone
    uint32_t identity;    //  files of another identity: left alone
    uint32_t unreadable;  //  our files that could not be read: left alone
    uint32_t undeleted;   //  files we meant to delete but could not: left in place
} s_tally_t;

//  Deletes one of our own files; false (counted, logged as an example) if
//  the unlink failed and the file is still there.
static bool s_unlink(kvt_disk_t *self, const char *name, const char *what, s_tally_t *t)
{
    if (unlinkat(self->dirfd, name, 0) == 0 || errno == ENOENT)
        return true;
    int e = errno;
    self->st.delete_failed++;
    t->undeleted++;
    kvt_disk_logf(self, 1, KVT_DLOG_RESCAN,
                  "rescan: could not delete %s %s: %s; it stays on disk, out of the index", what,
                  name, strerror(e));
    return false;
}

int kvt_disk_rescan(kvt_disk_t *self, char *err, size_t errlen)
{
    int fd = dup(self->dirfd); //  the directory opened without following a link
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        kvt_store_seterr(err, errlen, "disk.dir=%s: cannot read: %s", self->dir, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    s_found_t *found = NULL, *blocked = NULL;
    size_t n = 0, nb = 0;
    uint32_t cap = 0, bcap = 0; //  kvt_vec capacities (a directory holds < 2^32 entries)
    s_tally_t t = {0};
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        const char *name = de->d_name;
        if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0 || kvt_disk_manifest_name(name))
            continue;
        t.entries++;
        const char *why = "";
        if (kvt_disk_tmp_ours(self, name)) {
            //  Only a regular file of exactly our temporary format is ours
            //  to delete; any other ".tmp-" entry is someone else's.
            if (kvt_disk_file_kind(self->dirfd, name, &why) != KVT_DREAD_OK) {
                self->st.foreign_files++;
                t.foreign++;
            } else if (s_unlink(self, name, "temporary", &t)) {
                self->st.tmp_removed++;
                t.tmp_deleted++;
            }
            continue;
        }
        s_found_t f = {0};
        kvt_dident_t id;
        if (!kvt_disk_name_parse(name, &f.ns, &f.key, &f.kind, &id)) {
            self->st.foreign_files++; //  not an object name: not ours, left alone
            t.foreign++;
            continue;
        }
        if (!kvt_disk_ident_eq(&id, &self->id)) {
            self->st.identity_mismatch++; //  another rank's or layout's: not ours, left alone
            t.identity++;
            kvt_disk_identity_warn(self, name, "rescan");
            continue;
        }
        memcpy(f.name, name, KVT_DISK_OBJ_NAME + 1); //  the parse checked its length
        //  Looked at before it is opened: the rescan meets whatever the
        //  directory holds, and opening a FIFO or a device has effects.
        kvt_dread_t v = kvt_disk_file_kind(self->dirfd, name, &why);
        if (v == KVT_DREAD_OK)
            v = kvt_disk_file_check(self->dirfd, name, f.ns, f.key, f.kind, &self->id, &f.size,
                                    &f.mtime, &why);
        bool block = false;
        switch (v) {
        case KVT_DREAD_OK:
            if (kvt_vec_reserve((void **)&found, &cap, (uint32_t)n + 1, sizeof *found) != 0)
                goto oom;
            found[n++] = f;
            break;
        case KVT_DREAD_GONE: //  removed meanwhile
            t.entries--;
            break;
        case KVT_DREAD_FOREIGN:
            //  A FIFO, directory, symbolic link or device under an object's
            //  name: never opened through, left alone, its name taken.
            self->st.foreign_files++;
            t.foreign++;
            kvt_disk_logf(self, 1, KVT_DLOG_RESCAN, "rescan: %s is %s, not ours: left alone", name,
                          why);
            block = true;
            break;
        case KVT_DREAD_EIO:
            self->st.io_errors++; //  unreadable now: neither indexed nor deleted
            t.unreadable++;
            kvt_disk_logf(self, 1, KVT_DLOG_RESCAN, "rescan: cannot read %s: %s; left in place",
                          name, why);
            break;
        case KVT_DREAD_IDENTITY:
            //  Named as ours but written by another identity: left alone,
            //  and its name stays taken.
            self->st.identity_mismatch++;
            t.identity++;
            kvt_disk_identity_warn(self, name, "rescan");
            block = true;
            break;
        case KVT_DREAD_CORRUPT:
            self->st.corrupt++;
            if (unlinkat(self->dirfd, name, 0) == 0 || errno == ENOENT) {
                t.corrupt++;
                kvt_disk_logf(self, 1, KVT_DLOG_RESCAN, "rescan: deleted corrupt file %s: %s", name,
                              why);
            } else {
                int e = errno;
                self->st.delete_failed++;
                t.undeleted++;
                kvt_disk_logf(self, 1, KVT_DLOG_RESCAN,
                              "rescan: corrupt file %s (%s): could not delete it: %s; left in "
                              "place, its name blocked",
                              name, why, strerror(e));
                block = true;
            }
            break;
        }
        if (block) {
            if (kvt_vec_reserve((void **)&blocked, &bcap, (uint32_t)nb + 1, sizeof *blocked) != 0)
                goto oom;
            blocked[nb++] = f;
        }
    }
    //  Names held by files that are not ours come first: they take no
    //  room, only a table entry each.
    uint32_t nblocked = 0;
    for (size_t i = 0; i < nb; i++)
        if (kvt_disk_insert_blocked(self, blocked[i].ns, blocked[i].key, blocked[i].kind) == 0)
            nblocked++;
    if (n > 1)
        qsort(found, n, sizeof(*found), s_by_mtime);
    //  Keep the newest files that fit the capacity and the table, newest
    //  first: one that does not fit is skipped, and older, smaller ones may
    //  still fit. Delete the rest; one that cannot be deleted keeps its
    //  name blocked (after the kept ones are in, if the table has room).
    for (size_t i = n; i-- > 0;) {
        uint64_t bytes = KVT_DISK_HDR + found[i].size;
        found[i].keep = t.kept + nblocked < self->nents && t.kept_bytes + bytes <= self->capacity;
        if (found[i].keep) {
            t.kept_bytes += bytes;
            t.kept++;
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (found[i].keep)
            continue;
        if (s_unlink(self, found[i].name, "file over capacity", &t)) {
            self->st.evictions++;
            self->st.evicted_bytes += KVT_DISK_HDR + found[i].size;
            t.over++;
        } else {
            found[i].size = UINT64_MAX; //  marks it for the blocked pass
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (!found[i].keep)
            continue;
        kvt_disk_insert_ready(self, found[i].ns, found[i].key, found[i].kind, found[i].size);
        self->st.rescanned++;
    }
    for (size_t i = 0; i < n; i++)
        if (!found[i].keep && found[i].size == UINT64_MAX)
            kvt_disk_insert_blocked(self, found[i].ns, found[i].key, found[i].kind);
    if (t.entries > 0) {
        bool warn = t.corrupt || t.undeleted || t.unreadable || t.identity;
        kvt_disk_logf(self, warn ? 1 : 2, KVT_DLOG_ALWAYS,
                      "rescan of %s: kept %u files (%llu bytes); deleted %u temporaries, %u "
                      "corrupt, %u over capacity; left alone %u foreign, %u of another identity, "
                      "%u unreadable; could not delete %u",
                      self->dir, t.kept, (unsigned long long)t.kept_bytes, t.tmp_deleted, t.corrupt,
                      t.over, t.foreign, t.identity, t.unreadable, t.undeleted);
    }
    goto cleanup;
oom:
    kvt_store_seterr(err, errlen, "disk.dir=%s: out of memory in rescan", self->dir);
    rc = -1;
cleanup:
    closedir(d);
    free(found);
    free(blocked);
    return rc;
}
