/*  kvt_disk_file.c — the disk backend's file format: names, header,
    writing and verified reading of one file. The start-up rescan is in
    kvt_disk_rescan.c.

    Header (80 bytes, little-endian):
      0  magic "KVTIEROB"        8  u32 version (2)  12 u32 kind
      16 u64 namespace           24 u64 key.hi       32 u64 key.lo
      40 u64 payload length      48 u64 layout id    56 u32 rank
      60 u32 world size          64 u64 XXH3-64 of the payload
      72 u64 XXH3-64 of bytes 0..71
    The payload follows. A file is valid only if every field checks out, its
    identity (rank, world size, layout id) is the reader's, the name matches
    the header, and its length is exactly 80 + payload length. */
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

//  Little-endian fields of n bytes (n ≤ 8).
static void s_put(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t s_get(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void s_put64(uint8_t *p, uint64_t v)
{
    s_put(p, v, 8);
}

static uint64_t s_get64(const uint8_t *p)
{
    return s_get(p, 8);
}

static void s_put32(uint8_t *p, uint32_t v)
{
    s_put(p, v, 4);
}

static uint32_t s_get32(const uint8_t *p)
{
    return (uint32_t)s_get(p, 4);
}

void kvt_disk_file_name(char out[KVT_DISK_NAME_LEN], uint64_t ns, kvt_hash_t key,
                        kvt_obj_kind_t kind, const kvt_dident_t *id)
{
    snprintf(out, KVT_DISK_NAME_LEN, "%016llx-%016llx%016llx-%u-%08x-%08x-%016llx.kvt",
             (unsigned long long)ns, (unsigned long long)key.hi, (unsigned long long)key.lo,
             (unsigned)kind, (unsigned)id->rank, (unsigned)id->world,
             (unsigned long long)id->layout);
}

void kvt_disk_tmp_name(char out[KVT_DISK_TMP_LEN], const char *name, uint64_t seq)
{
    snprintf(out, KVT_DISK_TMP_LEN, ".tmp-%s.%llu", name, (unsigned long long)seq);
}

bool kvt_disk_tmp_ours(const kvt_disk_t *self, const char *name)
{
    if (strncmp(name, ".tmp-", 5) != 0 || strlen(name) < 5 + KVT_DISK_OBJ_NAME + 2)
        return false;
    const char *seq = name + 5 + KVT_DISK_OBJ_NAME;
    size_t digits = strlen(seq + 1);
    if (seq[0] != '.' || digits == 0 || digits > 20 || strspn(seq + 1, "0123456789") != digits)
        return false;
    char obj[KVT_DISK_OBJ_NAME + 1];
    memcpy(obj, name + 5, KVT_DISK_OBJ_NAME);
    obj[KVT_DISK_OBJ_NAME] = 0;
    uint64_t ns;
    kvt_hash_t key;
    kvt_obj_kind_t kind;
    kvt_dident_t id;
    return kvt_disk_name_parse(obj, &ns, &key, &kind, &id) && kvt_disk_ident_eq(&id, &self->id);
}

bool kvt_disk_ident_eq(const kvt_dident_t *a, const kvt_dident_t *b)
{
    return a->rank == b->rank && a->world == b->world && a->layout == b->layout;
}

void kvt_disk_identity_warn(kvt_disk_t *self, const char *name, const char *where)
{
    if (__atomic_exchange_n(&self->id_warned, true, __ATOMIC_RELAXED))
        return;
    kvt_disk_logf(self, 1, KVT_DLOG_ALWAYS,
                  "%s: %s belongs to another rank, world size or layout (this directory is rank "
                  "%u of %u, layout %016llx): left alone, counted in identity_mismatch; further "
                  "ones are counted only",
                  where, name, (unsigned)self->id.rank, (unsigned)self->id.world,
                  (unsigned long long)self->id.layout);
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

//  "<ns 16 hex>-<key 32 hex>-<kind>-<rank 8 hex>-<world 8 hex>-<layout 16 hex>.kvt"
bool kvt_disk_name_parse(const char *name, uint64_t *ns, kvt_hash_t *key, kvt_obj_kind_t *kind,
                         kvt_dident_t *id)
{
    if (strlen(name) != KVT_DISK_OBJ_NAME || name[16] != '-' || name[49] != '-' ||
        name[51] != '-' || name[60] != '-' || name[69] != '-' || strcmp(name + 86, ".kvt") != 0)
        return false;
    uint64_t rank, world;
    if (!s_hex(name, 16, ns) || !s_hex(name + 17, 16, &key->hi) ||
        !s_hex(name + 33, 16, &key->lo) || !s_hex(name + 52, 8, &rank) ||
        !s_hex(name + 61, 8, &world) || !s_hex(name + 70, 16, &id->layout))
        return false;
    int k = name[50] - '0';
    if (!kvt_store_kind_ok((kvt_obj_kind_t)k))
        return false;
    *kind = (kvt_obj_kind_t)k;
    id->rank = (uint32_t)rank;
    id->world = (uint32_t)world;
    return true;
}

void kvt_disk_logf(kvt_disk_t *self, int level, kvt_dlog_t budget, const char *fmt, ...)
{
    if (budget == KVT_DLOG_RUNTIME &&
        __atomic_fetch_add(&self->logged, 1, __ATOMIC_RELAXED) >= KVT_DISK_LOG_LIMIT)
        return;
    if (budget == KVT_DLOG_RESCAN && self->rescan_logged++ >= KVT_DISK_RESCAN_EXAMPLES)
        return; //  the rescan runs before any other thread
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    kvt_store_format(line, sizeof(line), self->name, fmt, ap);
    va_end(ap);
    self->log(self->log_arg, level, line);
}

void kvt_disk_hdr_encode(uint8_t out[KVT_DISK_HDR], uint64_t ns, kvt_hash_t key,
                         kvt_obj_kind_t kind, const kvt_dident_t *id, uint64_t size, uint64_t sum)
{
    memcpy(out, s_magic, 8);
    s_put32(out + 8, KVT_DISK_VERSION);
    s_put32(out + 12, (uint32_t)kind);
    s_put64(out + 16, ns);
    s_put64(out + 24, key.hi);
    s_put64(out + 32, key.lo);
    s_put64(out + 40, size);
    s_put64(out + 48, id->layout);
    s_put32(out + 56, id->rank);
    s_put32(out + 60, id->world);
    s_put64(out + 64, sum);
    s_put64(out + 72, XXH3_64bits(out, 72));
}

int kvt_disk_hdr_decode(const uint8_t in[KVT_DISK_HDR], kvt_dhdr_t *hdr, const char **why)
{
    if (memcmp(in, s_magic, 8) != 0) {
        *why = "bad magic";
        return -1;
    }
    if (s_get64(in + 72) != XXH3_64bits(in, 72)) {
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
    hdr->id.layout = s_get64(in + 48);
    hdr->id.rank = s_get32(in + 56);
    hdr->id.world = s_get32(in + 60);
    hdr->checksum = s_get64(in + 64);
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

int kvt_disk_file_write(int dirfd, const char *name, uint64_t ns, kvt_hash_t key,
                        kvt_obj_kind_t kind, const kvt_dident_t *id, const void *src, size_t size,
                        bool do_fsync)
{
    int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    uint8_t hdr[KVT_DISK_HDR];
    kvt_disk_hdr_encode(hdr, ns, key, kind, id, size, XXH3_64bits(src, size));
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

kvt_dread_t kvt_disk_file_kind(int dirfd, const char *name, const char **why)
{
    struct stat sb;
    if (fstatat(dirfd, name, &sb, AT_SYMLINK_NOFOLLOW) != 0) {
        *why = strerror(errno);
        return errno == ENOENT ? KVT_DREAD_GONE : KVT_DREAD_EIO;
    }
    if (!S_ISREG(sb.st_mode)) {
        *why = S_ISLNK(sb.st_mode)   ? "a symbolic link"
               : S_ISDIR(sb.st_mode) ? "a directory"
                                     : "not a regular file";
        return KVT_DREAD_FOREIGN;
    }
    return KVT_DREAD_OK;
}

//  Opens a file and validates its header against the object its name
//  says it is: identity, then name, then length. OK with *fdp open (the
//  caller closes it), otherwise closed. Never through a symbolic link, and
//  without blocking: a FIFO put in an object's place must not hang a
//  reader. What was opened must be a regular file.
static kvt_dread_t s_open_check(int dirfd, const char *name, uint64_t ns, kvt_hash_t key,
                                kvt_obj_kind_t kind, const kvt_dident_t *id, int *fdp,
                                kvt_dhdr_t *hdr, struct stat *sb, const char **why)
{
    kvt_dread_t rc = KVT_DREAD_OK;
    int fd = openat(dirfd, name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        *why = errno == ELOOP ? "a symbolic link" : strerror(errno);
        return errno == ENOENT                    ? KVT_DREAD_GONE
               : errno == ELOOP || errno == ENXIO ? KVT_DREAD_FOREIGN
                                                  : KVT_DREAD_EIO;
    }
    uint8_t raw[KVT_DISK_HDR];
    int r;
    if (fstat(fd, sb) != 0) {
        *why = strerror(errno);
        rc = KVT_DREAD_EIO;
        goto cleanup;
    }
    if (!S_ISREG(sb->st_mode)) {
        *why = "not a regular file";
        rc = KVT_DREAD_FOREIGN;
        goto cleanup;
    }
    if ((r = s_pread_all(fd, raw, sizeof(raw), 0)) != 0) {
        *why = r > 0 ? "truncated header" : strerror(errno);
        rc = r > 0 ? KVT_DREAD_CORRUPT : KVT_DREAD_EIO;
        goto cleanup;
    }
    if (kvt_disk_hdr_decode(raw, hdr, why) != 0) {
        rc = KVT_DREAD_CORRUPT;
        goto cleanup;
    }
    //  Identity first: another writer's file is not ours to judge.
    if (!kvt_disk_ident_eq(&hdr->id, id)) {
        *why = "written by another rank, world size or layout";
        rc = KVT_DREAD_IDENTITY;
        goto cleanup;
    }
    if (!s_matches(hdr, ns, key, kind)) {
        *why = "name does not match the header";
        rc = KVT_DREAD_CORRUPT;
        goto cleanup;
    }
    if ((uint64_t)sb->st_size != KVT_DISK_HDR + hdr->size) {
        *why = (uint64_t)sb->st_size < KVT_DISK_HDR + hdr->size ? "truncated" : "trailing bytes";
        rc = KVT_DREAD_CORRUPT;
        goto cleanup;
    }
cleanup:
    if (rc == KVT_DREAD_OK)
        *fdp = fd;
    else
        close(fd);
    return rc;
}

kvt_dread_t kvt_disk_file_check(int dirfd, const char *name, uint64_t ns, kvt_hash_t key,
                                kvt_obj_kind_t kind, const kvt_dident_t *id, uint64_t *size,
                                uint64_t *mtime, const char **why)
{
    int fd = -1;
    kvt_dhdr_t hdr;
    struct stat sb;
    kvt_dread_t rc = s_open_check(dirfd, name, ns, key, kind, id, &fd, &hdr, &sb, why);
    if (rc != KVT_DREAD_OK)
        return rc;
    close(fd);
    *size = hdr.size;
    *mtime = (uint64_t)sb.st_mtim.tv_sec * 1000000000ull + (uint64_t)sb.st_mtim.tv_nsec;
    return KVT_DREAD_OK;
}

kvt_dread_t kvt_disk_file_read(int dirfd, const char *name, uint64_t ns, kvt_hash_t key,
                               kvt_obj_kind_t kind, const kvt_dident_t *id, uint64_t size,
                               void *dst, const char **why)
{
    int fd = -1;
    kvt_dhdr_t hdr;
    struct stat sb;
    kvt_dread_t rc = s_open_check(dirfd, name, ns, key, kind, id, &fd, &hdr, &sb, why);
    if (rc != KVT_DREAD_OK)
        return rc;
    int r;
    if (hdr.size != size) {
        *why = "length differs from the indexed object";
        rc = KVT_DREAD_CORRUPT;
        goto cleanup;
    }
    if ((r = s_pread_all(fd, dst, size, KVT_DISK_HDR)) != 0) {
        *why = r > 0 ? "truncated" : strerror(errno);
        rc = r > 0 ? KVT_DREAD_CORRUPT : KVT_DREAD_EIO;
        goto cleanup;
    }
    if (XXH3_64bits(dst, size) != hdr.checksum) {
        *why = "payload checksum mismatch";
        rc = KVT_DREAD_CORRUPT;
        goto cleanup;
    }
cleanup:
    close(fd);
    return rc;
}
