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

//  Grows *found to hold one more; false when out of memory.
static bool s_grow(s_found_t **found, size_t n, size_t *cap)
{
    if (n < *cap)
        return true;
    size_t ncap = *cap ? 2 * *cap : 256;
    s_found_t *grown = realloc(*found, ncap * sizeof(**found));
    if (!grown)
        return false;
    *found = grown;
    *cap = ncap;
    return true;
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
    size_t n = 0, cap = 0, nb = 0, bcap = 0;
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        const char *name = de->d_name;
        if (strncmp(name, ".tmp-", 5) == 0) {
            if (unlinkat(self->dirfd, name, 0) == 0)
                self->st.tmp_removed++;
            continue;
        }
        if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
            continue;
        s_found_t f = {0};
        kvt_dident_t id;
        if (!kvt_disk_name_parse(name, &f.ns, &f.key, &f.kind, &id)) {
            self->st.foreign_files++; //  not an object name: not ours, left alone
            continue;
        }
        if (!kvt_disk_ident_eq(&id, &self->id)) {
            self->st.identity_mismatch++; //  another rank's or layout's: not ours, left alone
            kvt_disk_identity_warn(self, name, "rescan");
            continue;
        }
        memcpy(f.name, name, KVT_DISK_OBJ_NAME + 1); //  the parse checked its length
        //  Looked at before it is opened: the rescan meets whatever the
        //  directory holds, and opening a FIFO or a device has effects.
        const char *why = "";
        kvt_dread_t v = kvt_disk_file_kind(self->dirfd, name, &why);
        if (v == KVT_DREAD_OK)
            v = kvt_disk_file_check(self->dirfd, name, f.ns, f.key, f.kind, &self->id, &f.size,
                                    &f.mtime, &why);
        if (v == KVT_DREAD_FOREIGN) {
            //  A FIFO, directory, symbolic link or device under an object's
            //  name: never opened through, left alone, its name taken.
            self->st.foreign_files++;
            kvt_disk_logf(self, 1, true, "rescan: %s is %s, not ours: left alone", name, why);
            if (!s_grow(&blocked, nb, &bcap))
                goto oom;
            blocked[nb++] = f;
            continue;
        }
        if (v == KVT_DREAD_GONE)
            continue; //  removed meanwhile
        if (v == KVT_DREAD_EIO) {
            self->st.io_errors++; //  unreadable now: neither indexed nor deleted
            kvt_disk_logf(self, 1, true, "rescan: cannot read %s: %s", name, why);
            continue;
        }
        if (v == KVT_DREAD_IDENTITY) {
            //  Named as ours but written by another identity: left alone,
            //  and its name stays taken.
            self->st.identity_mismatch++;
            kvt_disk_identity_warn(self, name, "rescan");
            if (!s_grow(&blocked, nb, &bcap))
                goto oom;
            blocked[nb++] = f;
            continue;
        }
        if (v != KVT_DREAD_OK) {
            self->st.corrupt++;
            kvt_disk_logf(self, 1, true, "rescan: deleting %s: %s", name, why);
            unlinkat(self->dirfd, name, 0);
            continue;
        }
        if (!s_grow(&found, n, &cap))
            goto oom;
        found[n++] = f;
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
    //  still fit. Delete the rest.
    uint64_t used = 0;
    uint32_t kept = 0;
    for (size_t i = n; i-- > 0;) {
        uint64_t bytes = KVT_DISK_HDR + found[i].size;
        found[i].keep = kept + nblocked < self->nents && used + bytes <= self->capacity;
        if (found[i].keep) {
            used += bytes;
            kept++;
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (!found[i].keep) {
            unlinkat(self->dirfd, found[i].name, 0);
            self->st.evictions++;
            self->st.evicted_bytes += KVT_DISK_HDR + found[i].size;
            continue;
        }
        kvt_disk_insert_ready(self, found[i].ns, found[i].key, found[i].kind, found[i].size);
        self->st.rescanned++;
    }
    if (n > 0)
        kvt_disk_logf(self, 2, false,
                      "rescan: %u files kept (%llu bytes), %zu deleted over capacity", kept,
                      (unsigned long long)used, n - kept);
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
