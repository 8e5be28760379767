/*  The source tree's layering (DESIGN §7): arrows point one way,
    tools → replay → actors → runtime → messages / gpu / store → base.
    Every #include "…" of every file under src/, include/ and tools/ is
    mapped to the area it names; a file may include its own area and the
    areas below it, never a peer or anything above. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    const char *name; //  area name (src/<name>, or the public header's area)
    int level;        //  higher levels may include lower ones
    unsigned below;   //  bit mask of the areas this one may include (itself included)
} s_area_t;

enum { A_BASE, A_MESSAGES, A_GPU, A_STORE, A_RUNTIME, A_ACTORS, A_REPLAY, A_TOOLS, A_COUNT };

#define BIT(a) (1u << (a))
static const s_area_t s_areas[A_COUNT] = {
    [A_BASE] = {"base", 0, BIT(A_BASE)},
    [A_MESSAGES] = {"messages", 1, BIT(A_BASE) | BIT(A_MESSAGES)},
    [A_GPU] = {"gpu", 1, BIT(A_BASE) | BIT(A_GPU)},
    [A_STORE] = {"store", 1, BIT(A_BASE) | BIT(A_STORE)},
    [A_RUNTIME] = {"runtime", 2, BIT(A_BASE) | BIT(A_MESSAGES) | BIT(A_RUNTIME)},
    [A_ACTORS] = {"actors", 3,
                  BIT(A_BASE) | BIT(A_MESSAGES) | BIT(A_GPU) | BIT(A_STORE) | BIT(A_RUNTIME) |
                      BIT(A_ACTORS)},
    [A_REPLAY] = {"replay", 4, (BIT(A_REPLAY + 1) - 1) & ~BIT(A_TOOLS)},
    [A_TOOLS] = {"tools", 5, BIT(A_TOOLS + 1) - 1},
};

//  The area of a public header, by name.
static int s_public_area(const char *hdr)
{
    static const struct {
        const char *h;
        int area;
    } map[] = {
        {"kvt_hash.h", A_BASE},       {"kvt_counter.h", A_BASE},  {"kvt_msg.h", A_MESSAGES},
        {"kvt_gpu.h", A_GPU},         {"kvt_store.h", A_STORE},   {"kvt_pool.h", A_STORE},
        {"kvt_disk.h", A_STORE},      {"kvt_storage.h", A_STORE}, {"kvt_actor.h", A_RUNTIME},
        {"kvt_config.h", A_RUNTIME},  {"kvt_sched.h", A_ACTORS},  {"kvt_remote.h", A_STORE},
        {"kvt_metrics.h", A_RUNTIME},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcmp(hdr, map[i].h) == 0)
            return map[i].area;
    return -1;
}

static int s_src_area(const char *name, size_t len)
{
    for (int a = 0; a < A_COUNT; a++)
        if (strlen(s_areas[a].name) == len && strncmp(s_areas[a].name, name, len) == 0)
            return a;
    return -1;
}

//  The area an include names, seen from a file of area `from`. -2: a name
//  this check does not know (reported).
static int s_include_area(const char *inc, int from, bool public_hdr)
{
    if (public_hdr && !strchr(inc, '/')) {
        int a = s_public_area(inc);
        return a < 0 ? -2 : a;
    }
    if (strncmp(inc, "kvtier/", 7) == 0) {
        int a = s_public_area(inc + 7);
        return a < 0 ? -2 : a;
    }
    const char *slash = strchr(inc, '/');
    if (!slash)
        return from; //  a file beside the includer
    int a = s_src_area(inc, (size_t)(slash - inc));
    return a < 0 ? -2 : a;
}

typedef struct {
    char bad[8192]; //  offending edges, one per line
    size_t used;    //  bytes of bad in use
    unsigned files; //  files read
    unsigned edges; //  quoted includes checked
} s_report_t;

static void s_flag(s_report_t *r, const char *path, const char *inc, const char *why)
{
    int n = snprintf(r->bad + r->used, sizeof r->bad - r->used, "%s includes \"%s\": %s\n", path,
                     inc, why);
    if (n > 0 && r->used + (size_t)n < sizeof r->bad)
        r->used += (size_t)n;
}

static void s_check_file(s_report_t *r, const char *path, const char *rel, int area,
                         bool public_hdr)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "cannot open %s", path);
    r->files++;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        const char *p = line;
        while (*p == ' ' || *p == '\t')
            p++;
        if (strncmp(p, "#include \"", 10) != 0)
            continue;
        p += 10;
        const char *q = strchr(p, '"');
        if (!q)
            continue;
        char inc[512];
        snprintf(inc, sizeof inc, "%.*s", (int)(q - p), p);
        r->edges++;
        int to = s_include_area(inc, area, public_hdr);
        if (to == -2)
            s_flag(r, rel, inc, "names no known area");
        else if (!(s_areas[area].below & BIT(to)))
            s_flag(r, rel, inc,
                   s_areas[to].level >= s_areas[area].level ? "points up or sideways"
                                                            : "not allowed");
    }
    fclose(f);
}

static void s_walk(s_report_t *r, const char *dir, const char *rel, int area)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "cannot open %s", dir);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[2048], sub[2048];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        snprintf(sub, sizeof sub, "%s/%s", rel, e->d_name);
        struct stat st;
        if (lstat(path, &st) != 0)
            continue;
        if (S_ISDIR(st.st_mode)) {
            s_walk(r, path, sub, area);
            continue;
        }
        size_t n = strlen(e->d_name);
        if (n > 2 && e->d_name[n - 2] == '.' &&
            (e->d_name[n - 1] == 'c' || e->d_name[n - 1] == 'h'))
            s_check_file(r, path, sub, area, false);
    }
    closedir(d);
}

Test(layout, no_area_includes_a_peer_or_an_area_above_it)
{
    s_report_t r = {0};
    char dir[1024];
    for (int a = 0; a < A_COUNT; a++) {
        if (a == A_TOOLS)
            snprintf(dir, sizeof dir, "%s/tools", KVT_SOURCE_DIR);
        else
            snprintf(dir, sizeof dir, "%s/src/%s", KVT_SOURCE_DIR, s_areas[a].name);
        struct stat st;
        cr_assert(stat(dir, &st) == 0 && S_ISDIR(st.st_mode), "area %s has no folder %s",
                  s_areas[a].name, dir);
        s_walk(&r, dir, dir + strlen(KVT_SOURCE_DIR) + 1, a);
    }
    //  Public headers: each belongs to the area of its name.
    snprintf(dir, sizeof dir, "%s/include/kvtier", KVT_SOURCE_DIR);
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        int a = s_public_area(e->d_name);
        char path[2048], rel[512];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        snprintf(rel, sizeof rel, "include/kvtier/%s", e->d_name);
        if (a < 0) {
            s_flag(&r, rel, "-", "a public header this check does not place in an area");
            continue;
        }
        s_check_file(&r, path, rel, a, true);
    }
    closedir(d);
    cr_assert_gt(r.files, 50, "read only %u files", r.files);
    cr_assert_gt(r.edges, 100, "saw only %u includes", r.edges);
    cr_assert_eq(r.used, 0, "layering broken:\n%s", r.bad);
}

//  The check itself: a store file that includes the messages, a base file
//  that includes the store, and a peer include are all refused.
Test(layout, the_check_refuses_edges_that_point_up_or_sideways)
{
    cr_assert_eq(s_include_area("kvtier/kvt_msg.h", A_STORE, false), A_MESSAGES);
    cr_assert_not(s_areas[A_STORE].below & BIT(A_MESSAGES));
    cr_assert_not(s_areas[A_BASE].below & BIT(A_STORE));
    cr_assert_not(s_areas[A_GPU].below & BIT(A_STORE));
    cr_assert_not(s_areas[A_ACTORS].below & BIT(A_REPLAY));
    cr_assert(s_areas[A_REPLAY].below & BIT(A_ACTORS));
    cr_assert_eq(s_include_area("replay/kvt_oracle.h", A_ACTORS, false), A_REPLAY);
    cr_assert_eq(s_include_area("kvt_pool_int.h", A_STORE, false), A_STORE);
    cr_assert_eq(s_include_area("nowhere/x.h", A_STORE, false), -2);
    cr_assert_eq(s_include_area("kvt_msg.h", A_STORE, true), A_MESSAGES);
}
