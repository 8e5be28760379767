/*  kvt_trace.c — the SIM delivery trace: its hash, its file, and the reader
    behind `kvtier inspect`.

    File format (all integers little-endian):
      header   "KVTTRACE"  u32 version (1)  u32 record size (40)
               u64 seed  u64 latency floor ns  u64 latency jitter ns
               u16 actor count
               u8 length + bytes: the system name
               per actor, in id order: u8 length + bytes of its name
      records  fixed 40 bytes each, in the order they happened:
               u8 type (1 delivery, 2 timer)  u8 flags  u16 kind
               u16 from  u16 to  u32 frame size  u32 reserved (0)
               u64 virtual time ns  u64 digest  u64 sequence number
    A delivery's digest is XXH3-64 of the frame bytes; a timer's "digest" is
    its tag and from = to = the actor. from = 0xFFFE is "$system".

    The trace hash is XXH3-64 (seed 0) over the concatenated 40-byte
    records, so it is computed whether or not a file is written, and the
    reader recomputes it from a file.
*/
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "kvt_runtime_int.h"

struct _kvt_trace_t {
    XXH3_state_t *hash; //  running hash over the records
    FILE *file;         //  trace file, NULL when none was opened
    char *path;         //  its path (for messages)
    bool begun;         //  the header was written
    bool failed;        //  a write failed (logged once; the file is incomplete)
    uint64_t records;   //  records so far
};

static void s_put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void s_put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void s_put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t s_get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t s_get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t s_get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

// --------------------------------------------------------------- writer ---

int kvt_trace_new(kvt_system_t *sys)
{
    kvt_trace_t *t = calloc(1, sizeof *t);
    if (!t)
        return -1;
    t->hash = XXH3_createState();
    if (!t->hash || XXH3_64bits_reset(t->hash) != XXH_OK) {
        XXH3_freeState(t->hash);
        free(t);
        return -1;
    }
    sys->trace = t;
    return 0;
}

void kvt_trace_destroy(kvt_system_t *sys)
{
    kvt_trace_t *t = sys->trace;
    if (!t)
        return;
    if (t->file) {
        kvt_trace_begin(sys);
        if (fclose(t->file) != 0 && !t->failed)
            kvt_log(sys, KVT_SYSTEM_NAME, 0, "trace %s: close failed: %s", t->path,
                    strerror(errno));
    }
    XXH3_freeState(t->hash);
    free(t->path);
    free(t);
    sys->trace = NULL;
}

int kvt_trace_open(kvt_system_t *sys, const char *path)
{
    kvt_trace_t *t = sys->trace;
    if (t->file) {
        kvt_log(sys, KVT_SYSTEM_NAME, 0, "trace %s: a trace file is already open", path);
        return -1;
    }
    t->path = strdup(path);
    t->file = t->path ? fopen(path, "wb") : NULL;
    if (!t->file) {
        kvt_log(sys, KVT_SYSTEM_NAME, 0, "trace %s: cannot open: %s", path, strerror(errno));
        free(t->path);
        t->path = NULL;
        return -1;
    }
    return 0;
}

static void s_write(kvt_system_t *sys, const void *p, size_t n)
{
    kvt_trace_t *t = sys->trace;
    if (t->failed || fwrite(p, 1, n, t->file) == n)
        return;
    t->failed = true;
    kvt_log(sys, KVT_SYSTEM_NAME, 0, "trace %s: write failed: %s (the file is incomplete)", t->path,
            strerror(errno));
}

static void s_write_name(kvt_system_t *sys, const char *name)
{
    uint8_t len = (uint8_t)strlen(name);
    s_write(sys, &len, 1);
    s_write(sys, name, len);
}

int kvt_trace_begin(kvt_system_t *sys)
{
    kvt_trace_t *t = sys->trace;
    if (!t || !t->file || t->begun)
        return 0;
    t->begun = true;
    uint8_t h[42];
    memcpy(h, KVT_TRACE_MAGIC, 8);
    s_put32(h + 8, KVT_TRACE_VERSION);
    s_put32(h + 12, KVT_TRACE_RECORD_SIZE);
    s_put64(h + 16, sys->seed);
    s_put64(h + 24, sys->lat_min_ns);
    s_put64(h + 32, sys->lat_jitter_ns);
    s_put16(h + 40, (uint16_t)sys->nactors);
    s_write(sys, h, sizeof h);
    s_write_name(sys, sys->name);
    for (uint32_t i = 0; i < sys->nactors; i++)
        s_write_name(sys, sys->actors[i]->name);
    return t->failed ? -1 : 0;
}

void kvt_trace_record(kvt_system_t *sys, int type, int flags, int kind, kvt_aid_t from,
                      kvt_aid_t to, uint32_t size, uint64_t time, uint64_t digest)
{
    kvt_trace_t *t = sys->trace;
    uint8_t r[KVT_TRACE_RECORD_SIZE] = {0};
    r[0] = (uint8_t)type;
    r[1] = (uint8_t)flags;
    s_put16(r + 2, (uint16_t)kind);
    s_put16(r + 4, from);
    s_put16(r + 6, to);
    s_put32(r + 8, size);
    s_put64(r + 16, time);
    s_put64(r + 24, digest);
    s_put64(r + 32, t->records++);
    XXH3_64bits_update(t->hash, r, sizeof r);
    if (t->file)
        s_write(sys, r, sizeof r);
}

void kvt_trace_flush(kvt_system_t *sys)
{
    if (sys->trace && sys->trace->file)
        fflush(sys->trace->file);
}

uint64_t kvt_trace_hash(kvt_system_t *sys)
{
    return XXH3_64bits_digest(sys->trace->hash);
}

// --------------------------------------------------------------- reader ---

//  Reads exactly n bytes; returns how many it got.
static size_t s_read(FILE *f, void *p, size_t n)
{
    return fread(p, 1, n, f);
}

//  Reads a length-prefixed name into buf (NUL-terminated); 0 or -1.
static int s_read_name(FILE *f, char *buf, size_t size)
{
    uint8_t len;
    if (s_read(f, &len, 1) != 1 || len == 0 || len >= size)
        return -1;
    if (s_read(f, buf, len) != len)
        return -1;
    buf[len] = 0;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)buf[i] < 0x20 || (unsigned char)buf[i] > 0x7e)
            return -1;
    return 0;
}

static void s_fmt_time(char *buf, size_t size, uint64_t t)
{
    snprintf(buf, size, "%" PRIu64 ".%09" PRIu64, t / 1000000000u, t % 1000000000u);
}

int kvt_trace_print(const char *path, void *out_v)
{
    FILE *out = out_v ? out_v : stdout;
    char why[200] = "";
    char(*names)[KVT_ACTOR_NAME_MAX] = NULL;
    XXH3_state_t *hash = NULL;
    int rc = -1;
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f) {
        snprintf(why, sizeof why, "cannot open: %s", path ? strerror(errno) : "no path");
        goto cleanup;
    }
    uint8_t h[42];
    size_t got = s_read(f, h, sizeof h);
    if (got >= 8 && memcmp(h, KVT_TRACE_MAGIC, 8) != 0) {
        snprintf(why, sizeof why, "bad magic (not a kvtier trace file)");
        goto cleanup;
    }
    if (got < sizeof h) {
        snprintf(why, sizeof why, "truncated header (%zu of %zu bytes)", got, sizeof h);
        goto cleanup;
    }
    uint32_t version = s_get32(h + 8), rsize = s_get32(h + 12);
    if (version != KVT_TRACE_VERSION) {
        snprintf(why, sizeof why, "unsupported version %" PRIu32 " (this build reads %d)", version,
                 KVT_TRACE_VERSION);
        goto cleanup;
    }
    if (rsize != KVT_TRACE_RECORD_SIZE) {
        snprintf(why, sizeof why, "record size %" PRIu32 " (expected %d)", rsize,
                 KVT_TRACE_RECORD_SIZE);
        goto cleanup;
    }
    uint16_t nactors = s_get16(h + 40);
    if (nactors > KVT_MAX_ACTORS) {
        snprintf(why, sizeof why, "actor count %u exceeds %d", nactors, KVT_MAX_ACTORS);
        goto cleanup;
    }
    char sysname[KVT_SYS_NAME_MAX];
    names = calloc(nactors ? nactors : 1, sizeof *names);
    hash = XXH3_createState();
    if (!names || !hash || XXH3_64bits_reset(hash) != XXH_OK) {
        snprintf(why, sizeof why, "out of memory");
        goto cleanup;
    }
    if (s_read_name(f, sysname, sizeof sysname) != 0) {
        snprintf(why, sizeof why, "bad or truncated system name in the header");
        goto cleanup;
    }
    for (uint16_t i = 0; i < nactors; i++)
        if (s_read_name(f, names[i], sizeof names[i]) != 0) {
            snprintf(why, sizeof why, "bad or truncated actor table (actor %u of %u)", i, nactors);
            goto cleanup;
        }
    fprintf(out,
            "trace %s: version %" PRIu32 ", system %s, seed %" PRIu64 ", latency %" PRIu64
            " + [0, %" PRIu64 "] ns, %u actors\n",
            path, version, sysname, s_get64(h + 16), s_get64(h + 24), s_get64(h + 32), nactors);
    for (uint16_t i = 0; i < nactors; i++)
        fprintf(out, "  actor %u: %s\n", i, names[i]);
    fprintf(out, "%-8s %20s  %-7s %-16s %-16s %-10s %8s  %s\n", "record", "time_s", "event", "from",
            "to", "kind", "bytes", "digest");
    uint64_t n = 0, deliveries = 0, timers = 0, bad = 0, last_time = 0;
    uint8_t r[KVT_TRACE_RECORD_SIZE];
    long offset = 42;
    while ((got = s_read(f, r, sizeof r)) > 0) {
        if (got < sizeof r) {
            snprintf(why, sizeof why,
                     "truncated record %" PRIu64 " (%zu of %d bytes at the end of the file)", n,
                     got, KVT_TRACE_RECORD_SIZE);
            goto cleanup;
        }
        uint8_t type = r[0], flags = r[1];
        uint16_t kind = s_get16(r + 2), from = s_get16(r + 4), to = s_get16(r + 6);
        uint64_t time = s_get64(r + 16), digest = s_get64(r + 24), seq = s_get64(r + 32);
        bool from_ok = from < nactors || (from == KVT_AID_SYSTEM && type == KVT_TRACE_DELIVERY);
        if (type != KVT_TRACE_DELIVERY && type != KVT_TRACE_TIMER)
            snprintf(why, sizeof why, "record %" PRIu64 ": unknown type %u", n, type);
        else if (!from_ok || to >= nactors)
            snprintf(why, sizeof why, "record %" PRIu64 ": actor id %u out of range (%u actors)", n,
                     !from_ok ? from : to, nactors);
        else if (s_get32(r + 12) != 0 || (flags & ~(KVT_TRACE_F_DECODE | KVT_TRACE_F_UNHANDLED)))
            snprintf(why, sizeof why, "record %" PRIu64 ": reserved bits set", n);
        else if (seq != n)
            snprintf(why, sizeof why, "record %" PRIu64 ": sequence number %" PRIu64, n, seq);
        else if (time < last_time)
            snprintf(why, sizeof why, "record %" PRIu64 ": time goes backwards", n);
        if (why[0])
            goto cleanup;
        XXH3_64bits_update(hash, r, sizeof r);
        last_time = time;
        char ts[32];
        s_fmt_time(ts, sizeof ts, time);
        const char *fname = from == KVT_AID_SYSTEM ? KVT_SYSTEM_NAME : names[from];
        if (type == KVT_TRACE_TIMER) {
            timers++;
            fprintf(out, "%-8" PRIu64 " %20s  %-7s %-16s %-16s %-10s %8s  tag %" PRIu64 "\n", n, ts,
                    "timer", fname, "", "", "", digest);
        } else {
            deliveries++;
            const char *kname = flags & KVT_TRACE_F_DECODE ? "(bad)" : kvt_msg_kind_name(kind);
            bad += (flags & KVT_TRACE_F_DECODE) != 0;
            fprintf(out,
                    "%-8" PRIu64 " %20s  %-7s %-16s %-16s %-10s %8" PRIu32 "  %016" PRIx64 "%s\n",
                    n, ts, "deliver", fname, names[to], kname, s_get32(r + 8), digest,
                    flags & KVT_TRACE_F_UNHANDLED ? "  (unhandled)" : "");
        }
        n++;
        offset += (long)sizeof r;
    }
    if (ferror(f)) {
        snprintf(why, sizeof why, "read error at offset %ld: %s", offset, strerror(errno));
        goto cleanup;
    }
    fprintf(out,
            "%" PRIu64 " records: %" PRIu64 " deliveries (%" PRIu64 " undecodable), %" PRIu64
            " timers; hash %016" PRIx64 "\n",
            n, deliveries, bad, timers, XXH3_64bits_digest(hash));
    rc = 0;
cleanup:
    if (rc != 0)
        fprintf(stderr, "trace %s: %s\n", path ? path : "(null)", why);
    if (f)
        fclose(f);
    XXH3_freeState(hash);
    free(names);
    return rc;
}
