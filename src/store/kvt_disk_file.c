/*  kvt_disk_file.c — the disk backend's file format and start-up rescan.

    Header (64 bytes, little-endian):
      0  magic "KVTIEROB"        8  u32 version      12 u32 kind
      16 u64 namespace           24 u64 key.hi       32 u64 key.lo
      40 u64 payload length      48 u64 XXH3-64 of the payload
      56 u64 XXH3-64 of bytes 0..55
    The payload follows. A file is valid only if every field checks out, the
    name matches the header, and its length is exactly 64 + payload length. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "kvt_disk_int.h"

static const uint8_t s_magic[8] = {'K', 'V', 'T', 'I', 'E', 'R', 'O', 'B'};

static void s_put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t s_get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void s_put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t s_get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

void kvt_disk_file_name(char out[KVT_DISK_NAME_LEN], uint64_t ns, kvt_hash_t key,
                        kvt_obj_kind_t kind)
{
    snprintf(out, KVT_DISK_NAME_LEN, "%016llx-%016llx%016llx-%u.kvt", (unsigned long long)ns,
             (unsigned long long)key.hi, (unsigned long long)key.lo, (unsigned)kind);
}

void kvt_disk_path(const kvt_disk_t *self, char out[PATH_MAX], const char *name)
{
    if (snprintf(out, PATH_MAX, "%s/%s", self->dir, name) >= PATH_MAX)
        out[0] = 0; //  cannot happen: disk.dir's length is checked at creation
}

void kvt_disk_logf(kvt_disk_t *self, int level, bool limited, const char *fmt, ...)
{
    if (limited && __atomic_fetch_add(&self->logged, 1, __ATOMIC_RELAXED) >= KVT_DISK_LOG_LIMIT)
        return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    kvt_store_format(line, sizeof(line), self->name, fmt, ap);
    va_end(ap);
    self->log(self->log_arg, level, line);
}

void kvt_disk_hdr_encode(uint8_t out[KVT_DISK_HDR], uint64_t ns, kvt_hash_t key,
                         kvt_obj_kind_t kind, uint64_t size, uint64_t sum)
{
    memcpy(out, s_magic, 8);
    s_put32(out + 8, KVT_DISK_VERSION);
    s_put32(out + 12, (uint32_t)kind);
    s_put64(out + 16, ns);
    s_put64(out + 24, key.hi);
    s_put64(out + 32, key.lo);
    s_put64(out + 40, size);
    s_put64(out + 48, sum);
    s_put64(out + 56, XXH3_64bits(out, 56));
}

int kvt_disk_hdr_decode(const uint8_t in[KVT_DISK_HDR], kvt_dhdr_t *hdr, const char **why)
{
    if (memcmp(in, s_magic, 8) != 0) {
        *why = "bad magic";
        return -1;
    }
    if (s_get64(in + 56) != XXH3_64bits(in, 56)) {
        *why = "header checksum mismatch";
        return -1;
    }
    if (s_get32(in + 8) != KVT_DISK_VERSION) {
        *why = "unknown version";
        return -1;
    }
    uint32_t kind = s_get32(in + 12);
    if (!kvt_store_kind_ok((kvt_obj_kind_t)kind)) {
        *why = "bad kind";
        return -1;
    }
    hdr->kind = (kvt_obj_kind_t)kind;
    hdr->ns = s_get64(in + 16);
    hdr->key.hi = s_get64(in + 24);
    hdr->key.lo = s_get64(in + 32);
    hdr->size = s_get64(in + 40);
    hdr->checksum = s_get64(in + 48);
    if (hdr->size == 0 || hdr->size > (1ull << 48)) {
        *why = "bad length";
        return -1;
    }
    return 0;
}

static int s_write_all(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int s_pread_all(int fd, void *buf, size_t len, off_t off)
{
    uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = pread(fd, p, len, off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0)
            return 1; //  short file
        p += n;
        len -= (size_t)n;
        off += n;
    }
    return 0;
}

int kvt_disk_file_write(const char *path, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind,
                        const void *src, size_t size, bool do_fsync)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    uint8_t hdr[KVT_DISK_HDR];
    kvt_disk_hdr_encode(hdr, ns, key, kind, size, XXH3_64bits(src, size));
    int rc = 0;
    if (s_write_all(fd, hdr, sizeof(hdr)) != 0 || s_write_all(fd, src, size) != 0)
        rc = -1;
    if (rc == 0 && do_fsync && fsync(fd) != 0)
        rc = -1;
    int saved = errno;
    if (close(fd) != 0 && rc == 0)
        rc = -1;
    else
        errno = saved;
    return rc;
}

//  Checks a header against the object it should describe.
static bool s_matches(const kvt_dhdr_t *h, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind)
{
    return h->ns == ns && h->key.hi == key.hi && h->key.lo == key.lo && h->kind == kind;
}

int kvt_disk_file_read(const char *path, uint64_t ns, kvt_hash_t key, kvt_obj_kind_t kind,
                       uint64_t size, void *dst, const char **why)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        *why = strerror(errno);
        return errno == ENOENT ? KVT_STORE_ENOTFOUND : KVT_STORE_EIO;
    }
    int rc = KVT_STORE_OK;
    uint8_t raw[KVT_DISK_HDR];
    kvt_dhdr_t hdr;
    struct stat sb;
    int r;
    if (fstat(fd, &sb) != 0) {
        *why = strerror(errno);
        rc = KVT_STORE_EIO;
        goto cleanup;
    }
    if ((r = s_pread_all(fd, raw, sizeof(raw), 0)) != 0) {
        *why = r > 0 ? "truncated header" : strerror(errno);
        rc = r > 0 ? KVT_STORE_ECORRUPT : KVT_STORE_EIO;
        goto cleanup;
    }
    if (kvt_disk_hdr_decode(raw, &hdr, why) != 0) {
        rc = KVT_STORE_ECORRUPT;
        goto cleanup;
    }
    if (!s_matches(&hdr, ns, key, kind) || hdr.size != size) {
        *why = "header does not match the indexed object";
        rc = KVT_STORE_ECORRUPT;
        goto cleanup;
    }
    if ((uint64_t)sb.st_size != KVT_DISK_HDR + size) {
        *why = (uint64_t)sb.st_size < KVT_DISK_HDR + size ? "truncated" : "trailing bytes";
        rc = KVT_STORE_ECORRUPT;
        goto cleanup;
    }
    if ((r = s_pread_all(fd, dst, size, KVT_DISK_HDR)) != 0) {
        *why = r > 0 ? "truncated" : strerror(errno);
        rc = r > 0 ? KVT_STORE_ECORRUPT : KVT_STORE_EIO;
        goto cleanup;
    }
    if (XXH3_64bits(dst, size) != hdr.checksum) {
        *why = "payload checksum mismatch";
        rc = KVT_STORE_ECORRUPT;
        goto cleanup;
    }
cleanup:
    close(fd);
    return rc;
}

// ------------------------------------------------------------ rescan --

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

static bool s_hex(const char *s, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return false;
        v = (v << 4) | (uint64_t)d;
    }
    *out = v;
    return true;
}

//  "<16 hex>-<32 hex>-<kind>.kvt"
static bool s_parse_name(const char *name, uint64_t *ns, kvt_hash_t *key, kvt_obj_kind_t *kind)
{
    if (strlen(name) != 55 || name[16] != '-' || name[49] != '-' || strcmp(name + 51, ".kvt"))
        return false;
    if (!s_hex(name, 16, ns) || !s_hex(name + 17, 16, &key->hi) || !s_hex(name + 33, 16, &key->lo))
        return false;
    int k = name[50] - '0';
    if (!kvt_store_kind_ok((kvt_obj_kind_t)k))
        return false;
    *kind = (kvt_obj_kind_t)k;
    return true;
}

//  Validates one object file's header and length against its (parsed)
//  name. 0 or -1 with why.
static int s_check(kvt_disk_t *self, const char *name, s_found_t *f, const char **why)
{
    char path[PATH_MAX];
    kvt_disk_path(self, path, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        *why = strerror(errno);
        return -1;
    }
    int rc = -1;
    struct stat sb;
    uint8_t raw[KVT_DISK_HDR];
    kvt_dhdr_t hdr;
    if (fstat(fd, &sb) != 0 || s_pread_all(fd, raw, sizeof(raw), 0) != 0) {
        *why = "truncated header";
        goto cleanup;
    }
    if (kvt_disk_hdr_decode(raw, &hdr, why) != 0)
        goto cleanup;
    if (!s_matches(&hdr, f->ns, f->key, f->kind)) {
        *why = "name does not match the header";
        goto cleanup;
    }
    if ((uint64_t)sb.st_size != KVT_DISK_HDR + hdr.size) {
        *why = "length does not match the header";
        goto cleanup;
    }
    f->size = hdr.size;
    f->mtime = (uint64_t)sb.st_mtim.tv_sec * 1000000000ull + (uint64_t)sb.st_mtim.tv_nsec;
    snprintf(f->name, sizeof(f->name), "%s", name);
    rc = 0;
cleanup:
    close(fd);
    return rc;
}

int kvt_disk_rescan(kvt_disk_t *self, char *err, size_t errlen)
{
    DIR *d = opendir(self->dir);
    if (!d) {
        kvt_store_seterr(err, errlen, "disk.dir=%s: cannot read: %s", self->dir, strerror(errno));
        return -1;
    }
    s_found_t *found = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        const char *name = de->d_name;
        char path[PATH_MAX];
        kvt_disk_path(self, path, name);
        if (strncmp(name, ".tmp-", 5) == 0) {
            if (unlink(path) == 0)
                self->st.tmp_removed++;
            continue;
        }
        if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
            continue;
        s_found_t f;
        if (!s_parse_name(name, &f.ns, &f.key, &f.kind)) {
            self->st.foreign_files++; //  not an object name: not ours, left alone
            continue;
        }
        if (n == cap) {
            size_t ncap = cap ? 2 * cap : 256;
            s_found_t *grown = realloc(found, ncap * sizeof(*found));
            if (!grown) {
                kvt_store_seterr(err, errlen, "disk.dir=%s: out of memory in rescan", self->dir);
                rc = -1;
                goto cleanup;
            }
            found = grown;
            cap = ncap;
        }
        const char *why = "";
        found[n] = f;
        if (s_check(self, name, &found[n], &why) != 0) {
            self->st.corrupt++;
            kvt_disk_logf(self, 1, true, "rescan: deleting %s: %s", name, why);
            unlink(path);
            continue;
        }
        n++;
    }
    if (n > 1)
        qsort(found, n, sizeof(*found), s_by_mtime);
    //  Keep the newest files that fit the capacity and the table, newest
    //  first: one that does not fit is skipped, and older, smaller ones may
    //  still fit. Delete the rest.
    uint64_t used = 0;
    uint32_t kept = 0;
    for (size_t i = n; i-- > 0;) {
        uint64_t bytes = KVT_DISK_HDR + found[i].size;
        found[i].keep = kept < self->nents && used + bytes <= self->capacity;
        if (found[i].keep) {
            used += bytes;
            kept++;
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (!found[i].keep) {
            char path[PATH_MAX];
            kvt_disk_path(self, path, found[i].name);
            unlink(path);
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
cleanup:
    closedir(d);
    free(found);
    return rc;
}
