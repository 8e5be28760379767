/*  kvt_pool_mem.c — the CPU pool's memory: the arena mapping (anonymous,
    never written here, so it costs nothing until objects are stored) and
    the memory a process can really have (MemAvailable and the cgroup
    limit), which a run checks its pools against at start-up. */
#define _GNU_SOURCE //  MAP_NORESERVE, MAP_ANONYMOUS, madvise
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kvt_pool_int.h"

#define S_HUGE (2u << 20) //  transparent huge page size the arena is aligned to

int kvt_pool_arena_map(kvt_pool_t *self, char *err, size_t errlen)
{
    long ps = sysconf(_SC_PAGESIZE);
    size_t page = ps > 0 ? (size_t)ps : 4096;
    //  Aligned to 2 MiB when large enough, so every 2 MiB of it can be one
    //  huge page; the slack is unmapped again.
    size_t unit = self->capacity >= S_HUGE ? S_HUGE : self->align > page ? self->align : page;
    size_t len = (self->capacity + page - 1) & ~(page - 1);
    size_t map_len = len + (unit > page ? unit : 0);
    //  MAP_NORESERVE: the arena is committed as it fills, and the run's
    //  start-up check (kvt_mem_limit) stands in for the commit accounting.
    char *p = mmap(NULL, map_len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        kvt_store_seterr(err, errlen, "pool.capacity_bytes=%zu: cannot map the arena: %s",
                         self->capacity, strerror(errno));
        return -1;
    }
    char *start = (char *)(((uintptr_t)p + unit - 1) & ~(uintptr_t)(unit - 1));
    if (start > p)
        munmap(p, (size_t)(start - p));
    if (p + map_len > start + len)
        munmap(start + len, (size_t)(p + map_len - (start + len)));
#ifdef MADV_HUGEPAGE
    //  Refused where the kernel has no THP: the arena works on base pages.
    if (len >= S_HUGE)
        self->huge = madvise(start, len, MADV_HUGEPAGE) == 0;
#endif
    self->owned = start;
    self->owned_len = len;
    self->base = (uint8_t *)start;
    return 0;
}

void kvt_pool_arena_unmap(kvt_pool_t *self)
{
    if (self->owned)
        munmap(self->owned, self->owned_len);
    self->owned = NULL;
    self->owned_len = 0;
}

// --------------------------------------------------- memory limit ------

//  First line of a file into buf (newline stripped); false if unreadable.
static bool s_read_line(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    bool got = fgets(buf, (int)len, f) != NULL;
    fclose(f);
    if (got)
        buf[strcspn(buf, "\n")] = 0;
    return got;
}

//  "max" or a byte count; v1 reports "unlimited" as a page-rounded 2^63.
static bool s_parse_limit(const char *s, uint64_t *out)
{
    if (!strcmp(s, "max")) {
        *out = UINT64_MAX;
        return true;
    }
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end)
        return false;
    *out = v >= (1ull << 62) ? UINT64_MAX : (uint64_t)v;
    return true;
}

//  "cgroup <what> (<path>)" into src; a path too long for srclen keeps its
//  end (the cgroup and file that hold the limit) behind "...".
static void s_describe(char *src, size_t srclen, const char *what, const char *path)
{
    if (srclen == 0)
        return;
    char head[64];
    int h = snprintf(head, sizeof head, "cgroup %s (", what);
    size_t hl = h < 0 ? 0 : (size_t)h < sizeof head ? (size_t)h : sizeof head - 1;
    size_t pl = strlen(path);
    size_t room = srclen - 1; //  bytes before the NUL
    size_t n = 0;
    if (hl + pl + 1 > room && room > hl + 4) { //  keep the path's tail
        size_t keep = room - hl - 4;           //  "..." and ")"
        memcpy(src, head, hl);
        memcpy(src + hl, "...", 3);
        memcpy(src + hl + 3, path + pl - keep, keep);
        n = hl + 3 + keep;
    } else {
        size_t a = hl < room ? hl : room;
        memcpy(src, head, a);
        size_t b = pl < room - a ? pl : room - a;
        memcpy(src + a, path, b);
        n = a + b;
    }
    if (n < room)
        src[n++] = ')';
    src[n] = 0;
}

//  The cgroup memory limit of this process under `cg` (the cgroup mount)
//  as listed in `self_cgroup` (/proc/self/cgroup); UINT64_MAX when none.
static uint64_t s_cgroup_limit(const char *cg, const char *self_cgroup, char *src, size_t srclen)
{
    char v2path[512] = "", v1path[512] = "";
    FILE *f = fopen(self_cgroup, "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f)) {
            line[strcspn(line, "\n")] = 0;
            char *c1 = strchr(line, ':');
            char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
            if (!c2)
                continue;
            const char *path = !strcmp(c2 + 1, "/") ? "" : c2 + 1;
            *c2 = 0;
            if (c1[1] == 0) //  v2: "0::/path", no controller list
                snprintf(v2path, sizeof v2path, "%s%s/memory.max", cg, path);
            else if (strstr(c1 + 1, "memory"))
                snprintf(v1path, sizeof v1path, "%s/memory%s/memory.limit_in_bytes", cg, path);
        }
        fclose(f);
    }
    //  Inside a container the process's own cgroup is often the mount's
    //  root; a hybrid layout mounts v2 under "unified". The smallest wins.
    char roots[3][512];
    snprintf(roots[0], sizeof roots[0], "%s/memory.max", cg);
    snprintf(roots[1], sizeof roots[1], "%s/unified/memory.max", cg);
    snprintf(roots[2], sizeof roots[2], "%s/memory/memory.limit_in_bytes", cg);
    const char *tries[5] = {v2path, roots[0], roots[1], v1path, roots[2]};
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 5; i++) {
        char buf[64];
        uint64_t v;
        if (!tries[i][0] || !s_read_line(tries[i], buf, sizeof buf) || !s_parse_limit(buf, &v) ||
            v >= best)
            continue;
        best = v;
        s_describe(src, srclen, i < 3 ? "v2 memory.max" : "v1 memory.limit_in_bytes", tries[i]);
    }
    return best;
}

//  A "Key:  N kB" line of /proc/meminfo, in bytes; false when absent.
static bool s_meminfo(const char *path, const char *key, uint64_t *out)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    char line[256];
    size_t klen = strlen(key);
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        unsigned long long kb;
        if (!strncmp(line, key, klen) && line[klen] == ':' &&
            sscanf(line + klen + 1, "%llu", &kb) == 1) {
            *out = (uint64_t)kb << 10;
            found = true;
        }
    }
    fclose(f);
    return found;
}

int kvt_mem_limit_read(const char *proc_root, const char *cgroup_root, kvt_mem_limit_t *out)
{
    memset(out, 0, sizeof *out);
    out->bytes = UINT64_MAX;
    out->ram_bytes = UINT64_MAX;
    out->cgroup_bytes = UINT64_MAX;
    char path[128];
    snprintf(path, sizeof path, "%s/meminfo", proc_root);
    uint64_t v;
    if (s_meminfo(path, "MemAvailable", &v)) {
        out->ram_bytes = v;
        snprintf(out->ram_source, sizeof out->ram_source, "MemAvailable (%s)", path);
    } else if (s_meminfo(path, "MemTotal", &v)) {
        out->ram_bytes = v;
        snprintf(out->ram_source, sizeof out->ram_source, "MemTotal (%s)", path);
    }
    char self_cg[512];
    snprintf(self_cg, sizeof self_cg, "%s/self/cgroup", proc_root);
    out->cgroup_bytes =
        s_cgroup_limit(cgroup_root, self_cg, out->cgroup_source, sizeof out->cgroup_source);
    if (out->cgroup_bytes < out->ram_bytes) {
        out->bytes = out->cgroup_bytes;
        snprintf(out->source, sizeof out->source, "%s", out->cgroup_source);
    } else if (out->ram_bytes != UINT64_MAX) {
        out->bytes = out->ram_bytes;
        snprintf(out->source, sizeof out->source, "%s", out->ram_source);
    }
    return out->bytes == UINT64_MAX ? -1 : 0;
}

int kvt_mem_limit_system(void *arg, kvt_mem_limit_t *out)
{
    (void)arg;
    return kvt_mem_limit_read("/proc", "/sys/fs/cgroup", out);
}

// ------------------------------------------------------------ NUMA -----

#define S_MPOL_BIND       2 //  linux/mempolicy.h, not needed as a header
#define S_MPOL_INTERLEAVE 3
#define S_MAX_NODES       1024

static long s_mbind(void *addr, unsigned long len, int mode, const unsigned long *mask,
                    unsigned long maxnode, unsigned flags)
{
#ifdef SYS_mbind
    return syscall(SYS_mbind, addr, len, mode, mask, maxnode, flags);
#else
    (void)addr, (void)len, (void)mode, (void)mask, (void)maxnode, (void)flags;
    errno = ENOSYS;
    return -1;
#endif
}

//  Nodes 0..n-1 present under sysfs (1 where there is no sysfs).
static int s_numa_nodes(void)
{
    int n = 0;
    char path[64];
    while (n < S_MAX_NODES) {
        snprintf(path, sizeof path, "/sys/devices/system/node/node%d", n);
        if (access(path, F_OK) != 0)
            break;
        n++;
    }
    return n > 0 ? n : 1;
}

long (*kvt_pool_mbind)(void *addr, unsigned long len, int mode, const unsigned long *mask,
                       unsigned long maxnode, unsigned flags) = s_mbind;
int (*kvt_pool_numa_nodes)(void) = s_numa_nodes;

void kvt_pool_arena_numa(kvt_pool_t *self, const kvt_pool_config_t *cfg)
{
    if (!cfg->numa_interleave && cfg->numa_bind <= 0)
        return;
    int nodes = kvt_pool_numa_nodes();
    if (nodes <= 1) {
        self->log(self->log_arg, 2,
                  "pool: one NUMA node here: the arena is not bound (nothing to choose)");
        return;
    }
    unsigned long mask[S_MAX_NODES / (8 * sizeof(unsigned long))] = {0};
    const size_t bits = 8 * sizeof(unsigned long);
    int mode = S_MPOL_BIND;
    int node = cfg->numa_bind - 1;
    if (cfg->numa_interleave) {
        mode = S_MPOL_INTERLEAVE;
        for (int i = 0; i < nodes; i++)
            mask[i / bits] |= 1ul << (i % bits);
    } else if (node >= nodes) {
        char line[160];
        snprintf(line, sizeof line, "pool: numa_bind node %d: only %d nodes here; not bound", node,
                 nodes);
        self->log(self->log_arg, 1, line);
        return;
    } else {
        mask[node / bits] |= 1ul << (node % bits);
    }
    //  Before the first touch, so every page is placed by the policy.
    if (kvt_pool_mbind(self->base, self->owned_len, mode, mask, S_MAX_NODES + 1, 0) != 0) {
        char line[160];
        snprintf(line, sizeof line, "pool: mbind refused (%s): pages land where first touched",
                 strerror(errno));
        self->log(self->log_arg, 1, line);
        return;
    }
    self->numa_mode = mode;
}

int kvt_numa_node_of_pci(const char *sysfs_root, const char *bus_id)
{
    char id[32];
    size_t n = strlen(bus_id);
    if (n == 0 || n >= sizeof id)
        return -1;
    //  sysfs names devices in lower case; CUDA reports upper case.
    for (size_t i = 0; i <= n; i++) {
        char c = bus_id[i];
        if (c == '/')
            return -1;
        id[i] = (char)(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    }
    char path[256], line[32];
    snprintf(path, sizeof path, "%s/bus/pci/devices/%s/numa_node", sysfs_root, id);
    if (!s_read_line(path, line, sizeof line))
        return -1;
    char *end = NULL;
    long v = strtol(line, &end, 10);
    return end != line && *end == 0 && v >= 0 && v < S_MAX_NODES ? (int)v : -1;
}
