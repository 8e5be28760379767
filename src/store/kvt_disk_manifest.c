/*  kvt_disk_manifest.c — the disk backend's directory manifest (rule C3 at
    the tier): a small text file, KVT_DISK_MANIFEST, that records the layout
    id and the namespace the directory's objects were written with. A fresh
    directory (no manifest) gets one, written to a temporary and renamed
    into place; a directory whose manifest names another layout id or
    namespace is refused at open, naming both values, before the rescan
    looks at a single object file: its bytes are never indexed or served. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvt_disk_int.h"

#define S_MAGIC "kvtier-disk-manifest 1\n"
#define S_MAX   512 //  bytes a manifest may hold

static _Atomic uint64_t s_refusals; //  directories refused since the process started

uint64_t kvt_disk_manifest_refusals(void)
{
    return atomic_load(&s_refusals);
}

bool kvt_disk_manifest_name(const char *name)
{
    return strcmp(name, KVT_DISK_MANIFEST) == 0 || strcmp(name, KVT_DISK_MANIFEST_TMP) == 0;
}

//  Writes the manifest: temporary, optional fsync, rename (atomic: a
//  reader sees the old manifest, none, or the whole new one).
static int s_write(kvt_disk_t *self, uint64_t ns_id, char *err, size_t errlen)
{
    char text[S_MAX];
    int n = kvt_disk_manifest_format(text, sizeof text, self->id.layout, ns_id);
    int fd = openat(self->dirfd, KVT_DISK_MANIFEST_TMP,
                    O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    errno = 0;
    bool ok = fd >= 0 && write(fd, text, (size_t)n) == n && (!self->fsync || fsync(fd) == 0);
    int e = errno ? errno : EIO; //  a short write sets no errno
    if (fd >= 0)
        close(fd);
    if (ok && renameat(self->dirfd, KVT_DISK_MANIFEST_TMP, self->dirfd, KVT_DISK_MANIFEST) != 0) {
        e = errno;
        ok = false;
    }
    if (ok && self->fsync)
        (void)fsync(self->dirfd);
    if (!ok) {
        unlinkat(self->dirfd, KVT_DISK_MANIFEST_TMP, 0);
        kvt_store_seterr(err, errlen, "disk.dir=%s: cannot write its manifest %s: %s", self->dir,
                         KVT_DISK_MANIFEST, strerror(e));
        return -1;
    }
    return 0;
}

//  Parses "<name>=<16 lowercase hex digits>\n" at *p (exactly: no sign,
//  prefix, space or short value), moving *p past it. 0, or -1.
static int s_field(const char **p, const char *name, uint64_t *out)
{
    size_t nl = strlen(name);
    const char *q = *p;
    if (strncmp(q, name, nl) != 0 || q[nl] != '=')
        return -1;
    q += nl + 1;
    uint64_t v = 0;
    for (int i = 0; i < 16; i++, q++) {
        int d = *q >= '0' && *q <= '9' ? *q - '0' : *q >= 'a' && *q <= 'f' ? *q - 'a' + 10 : -1;
        if (d < 0)
            return -1;
        v = v << 4 | (uint64_t)d;
    }
    if (*q != '\n')
        return -1;
    *out = v;
    *p = q + 1;
    return 0;
}

int kvt_disk_manifest_parse(const char *bytes, size_t len, uint64_t *layout, uint64_t *ns,
                            const char **why)
{
    if (len > S_MAX) {
        *why = "it is longer than 512 bytes";
        return -1;
    }
    char text[S_MAX + 1];
    memcpy(text, bytes, len);
    text[len] = 0;
    size_t ml = strlen(S_MAGIC);
    const char *p = text + ml;
    const char *bad = NULL;
    if (len != strlen(text))
        bad = "it holds a NUL byte";
    else if (strncmp(text, S_MAGIC, ml) != 0)
        bad = "line 1 is not \"kvtier-disk-manifest 1\"";
    else if (s_field(&p, "layout_id", layout) != 0)
        bad = "line 2 is not layout_id=<16 hex digits>";
    else if (s_field(&p, "namespace", ns) != 0)
        bad = "line 3 is not namespace=<16 hex digits>";
    else if (*p)
        bad = "bytes follow line 3";
    *why = bad;
    return bad ? -1 : 0;
}

int kvt_disk_manifest_format(char *out, size_t cap, uint64_t layout, uint64_t ns)
{
    return snprintf(out, cap, S_MAGIC "layout_id=%016" PRIx64 "\nnamespace=%016" PRIx64 "\n",
                    layout, ns);
}

//  The refusal: counted, err naming the directory and both values.
static int s_refuse(kvt_disk_t *self, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int s_refuse(kvt_disk_t *self, char *err, size_t errlen, const char *fmt, ...)
{
    atomic_fetch_add(&s_refusals, 1);
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    kvt_store_seterr(err, errlen, "disk.dir=%s: %s (refused: its objects are not this tier's)",
                     self->dir, why);
    return -1;
}

int kvt_disk_manifest_open(kvt_disk_t *self, uint64_t ns_id, char *err, size_t errlen)
{
    int fd = openat(self->dirfd, KVT_DISK_MANIFEST, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return s_write(self, ns_id, err, errlen); //  a fresh directory
        return s_refuse(self, err, errlen, "manifest %s cannot be read: %s", KVT_DISK_MANIFEST,
                        strerror(errno));
    }
    char text[S_MAX];
    struct stat sb;
    ssize_t got = -1;
    if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode))
        got = read(fd, text, S_MAX);
    close(fd);
    if (got < 0)
        return s_refuse(self, err, errlen, "manifest %s is not a readable file", KVT_DISK_MANIFEST);
    uint64_t layout = 0, ns = 0;
    const char *bad = NULL;
    if (kvt_disk_manifest_parse(text, (size_t)got, &layout, &ns, &bad) != 0)
        return s_refuse(self, err, errlen, "manifest %s is not a kvtier disk manifest: %s",
                        KVT_DISK_MANIFEST, bad);
    if (layout != self->id.layout)
        return s_refuse(self, err, errlen,
                        "written with layout_id %016" PRIx64
                        ", this tier's layout_id is %016" PRIx64,
                        layout, self->id.layout);
    if (ns && ns_id && ns != ns_id)
        return s_refuse(self, err, errlen,
                        "written with namespace %016" PRIx64
                        ", this tier's namespace is %016" PRIx64,
                        ns, ns_id);
    //  An unrecorded namespace is recorded now that one is known.
    if (!ns && ns_id)
        return s_write(self, ns_id, err, errlen);
    return 0;
}
