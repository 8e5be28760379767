/*  The scheduler core's shape (issue 14 §1, docs/architecture.md): one
    coordinator over modules that each own one fact. Read from the source
    files of src/actors/scheduler: only the coordinator's files and the
    bench hook include kvt_sched_int.h; every file includes and calls only
    files on a lower floor of the table below (or its own module); so the
    folder has no call cycle; every core file stays within S_MAX_LINES;
    the members of a request record that one module owns (its sub-records,
    the load's r->load, the generation) are written only there. */
#include <criterion/criterion.h>
#include <regex.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_LINES 500

typedef struct {
    const char *stem; //  file name without .c / .h (a prefix match for split leaves)
    const char *mod;  //  the module it belongs to
    int floor;        //  may include and call only lower floors (and its own module)
    bool core;        //  a core file: size-checked
    bool int_ok;      //  may include kvt_sched_int.h
} s_file_t;

static const s_file_t s_files[] = {
    {"kvt_blockmgr", "blockmgr", 0, false, false},
    {"kvt_ckpt", "ckpt", 0, false, false},
    {"kvt_joint", "joint", 0, false, false},
    {"kvt_savetrack", "savetrack", 0, false, false},
    {"kvt_stidx", "stidx", 0, false, false},
    {"kvt_loadhold", "loadhold", 0, true, false},
    {"kvt_planbuf", "planbuf", 1, true, false},
    {"kvt_reqtab", "reqtab", 1, true, false},
    {"kvt_lookups", "lookups", 2, true, false},
    {"kvt_saves", "saves", 3, true, false},
    {"kvt_loadtrack", "loadtrack", 4, true, false},
    {"kvt_loadtrack_int", "loadtrack", 4, true, false},
    {"kvt_loadtrack_orphan", "loadtrack", 4, true, false},
    {"kvt_admit", "admit", 5, true, false},
    {"kvt_sched_int", "sched_int", 6, true, true},
    {"kvt_sched", "sched", 7, true, true},
    {"kvt_sched_step", "step", 8, true, true},
    {"kvt_sched_audit", "audit", 8, true, true},
    {"kvt_sched_bench", "bench", 8, true, true},
    {"kvt_scheduler", "shell", 9, true, false},
};
#define S_NFILES (sizeof s_files / sizeof s_files[0])

//  The table row of a file name (longest stem that names it exactly, or
//  as the prefix of a split leaf like kvt_stidx_check.c); NULL if none.
static const s_file_t *s_row(const char *name)
{
    const s_file_t *best = NULL;
    size_t n = strcspn(name, ".");
    for (size_t i = 0; i < S_NFILES; i++) {
        size_t l = strlen(s_files[i].stem);
        bool exact = l == n && strncmp(name, s_files[i].stem, l) == 0;
        bool split = s_files[i].floor == 0 && l < n && strncmp(name, s_files[i].stem, l) == 0 &&
                     name[l] == '_';
        if ((exact || split) && (!best || l > strlen(best->stem)))
            best = &s_files[i];
    }
    return best;
}

//  An edge from a file of row `a` to one of row `b` is allowed.
static bool s_edge_ok(const s_file_t *a, const s_file_t *b)
{
    return b->floor < a->floor || strcmp(a->mod, b->mod) == 0;
}

typedef struct {
    char name[64]; //  file name
    char *text;    //  contents
} s_src_t;

static const char *s_names[] = {
    "kvt_blockmgr.c",
    "kvt_blockmgr.h",
    "kvt_ckpt.c",
    "kvt_ckpt.h",
    "kvt_joint.c",
    "kvt_joint.h",
    "kvt_savetrack.c",
    "kvt_savetrack.h",
    "kvt_savetrack_check.c",
    "kvt_savetrack_int.h",
    "kvt_stidx.c",
    "kvt_stidx.h",
    "kvt_stidx_check.c",
    "kvt_stidx_int.h",
    "kvt_planbuf.c",
    "kvt_planbuf.h",
    "kvt_reqtab.c",
    "kvt_reqtab.h",
    "kvt_lookups.c",
    "kvt_lookups.h",
    "kvt_saves.c",
    "kvt_saves.h",
    "kvt_loadtrack.c",
    "kvt_loadtrack.h",
    "kvt_loadtrack_int.h",
    "kvt_loadtrack_orphan.c",
    "kvt_loadhold.c",
    "kvt_loadhold.h",
    "kvt_admit.c",
    "kvt_admit.h",
    "kvt_sched.c",
    "kvt_sched.h",
    "kvt_sched_int.h",
    "kvt_sched_step.c",
    "kvt_sched_audit.c",
    "kvt_sched_bench.c",
    "kvt_sched_bench.h",
    "kvt_scheduler.c",
    "kvt_scheduler.h",
};
#define S_NSRC (sizeof s_names / sizeof s_names[0])

static char *s_read(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/src/actors/scheduler/%s", KVT_SOURCE_DIR, name);
    FILE *f = fopen(path, "r");
    cr_assert(f, "cannot read %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *t = calloc(1, (size_t)n + 1);
    cr_assert(t && fread(t, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    return t;
}

static void s_load(s_src_t *src)
{
    for (size_t i = 0; i < S_NSRC; i++) {
        snprintf(src[i].name, sizeof src[i].name, "%s", s_names[i]);
        src[i].text = s_read(s_names[i]);
    }
}

static void s_free(s_src_t *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(src[i].text);
}

//  Include violations of one file, written into err; returns how many.
static int s_check_includes(const s_src_t *s, char *err, size_t errlen)
{
    const s_file_t *a = s_row(s->name);
    int bad = 0;
    for (const char *p = strstr(s->text, "#include \""); p; p = strstr(p + 1, "#include \"")) {
        const char *h = p + 10;
        size_t n = strcspn(h, "\"");
        char hdr[128];
        snprintf(hdr, sizeof hdr, "%.*s", (int)n, h);
        if (strchr(hdr, '/'))
            continue; //  another folder: tests/test_layout.c checks those
        const s_file_t *b = s_row(hdr);
        bool bad_int = strcmp(hdr, "kvt_sched_int.h") == 0 && !a->int_ok;
        if (!b || bad_int || !s_edge_ok(a, b)) {
            snprintf(err, errlen, "%s includes %s", s->name, hdr);
            bad++;
        }
    }
    return bad;
}

//  The kvt_ functions each .c file defines (at column 0, a body follows).
static bool s_defines(const char *text, const char *fn)
{
    size_t n = strlen(fn);
    for (const char *p = strstr(text, fn); p; p = strstr(p + 1, fn)) {
        if (p[n] != '(')
            continue;
        const char *bol = p;
        while (bol > text && bol[-1] != '\n')
            bol--;
        if (*bol == ' ' || *bol == '\t' || *bol == '/' || *bol == '#' ||
            strncmp(bol, "static", 6) == 0)
            continue;
        size_t semi = strcspn(p, ";{");
        if (p[semi] == '{')
            return true;
    }
    return false;
}

//  Call violations of one file against all files, into err; returns how many.
static int s_check_calls(const s_src_t *src, size_t nsrc, size_t who, char *err, size_t errlen)
{
    const s_file_t *a = s_row(src[who].name);
    int bad = 0;
    regex_t re;
    cr_assert(regcomp(&re, "kvt_[a-z0-9_]+\\(", REG_EXTENDED) == 0);
    const char *p = src[who].text;
    regmatch_t m;
    while (regexec(&re, p, 1, &m, 0) == 0) {
        char fn[96];
        snprintf(fn, sizeof fn, "%.*s", (int)(m.rm_eo - m.rm_so - 1), p + m.rm_so);
        p += m.rm_eo;
        for (size_t j = 0; j < nsrc; j++) {
            if (j == who || !strstr(src[j].name, ".c") || !s_defines(src[j].text, fn))
                continue;
            const s_file_t *b = s_row(src[j].name);
            if (!s_edge_ok(a, b)) {
                snprintf(err, errlen, "%.80s calls %.80s (%.80s)", src[who].name, fn, src[j].name);
                bad++;
            }
        }
    }
    regfree(&re);
    return bad;
}

static int s_lines(const char *text)
{
    int n = 0;
    for (; *text; text++)
        n += *text == '\n';
    return n;
}

Test(layout_sched, every_file_of_the_folder_has_a_floor)
{
    for (size_t i = 0; i < S_NSRC; i++)
        cr_expect(s_row(s_names[i]), "%s has no row in the floor table", s_names[i]);
}

Test(layout_sched, only_the_coordinator_and_the_bench_hook_include_the_private_header)
{
    s_src_t src[S_NSRC];
    s_load(src);
    for (size_t i = 0; i < S_NSRC; i++) {
        char err[256] = "";
        cr_expect(s_check_includes(&src[i], err, sizeof err) == 0, "%s", err);
    }
    s_free(src, S_NSRC);
}

Test(layout_sched, every_call_goes_down_the_floor_table_so_there_is_no_cycle)
{
    s_src_t src[S_NSRC];
    s_load(src);
    for (size_t i = 0; i < S_NSRC; i++) {
        if (!strstr(src[i].name, ".c"))
            continue;
        char err[256] = "";
        cr_expect(s_check_calls(src, S_NSRC, i, err, sizeof err) == 0, "%s", err);
    }
    s_free(src, S_NSRC);
}

Test(layout_sched, every_core_file_stays_within_the_size_bound)
{
    s_src_t src[S_NSRC];
    s_load(src);
    for (size_t i = 0; i < S_NSRC; i++)
        if (s_row(src[i].name)->core)
            cr_expect(s_lines(src[i].text) <= S_MAX_LINES, "%s has %d lines (bound %d)",
                      src[i].name, s_lines(src[i].text), S_MAX_LINES);
    s_free(src, S_NSRC);
}

//  The members of a request record (kvt_reqtab.h) that one module alone
//  writes, and its files. A sub-record whose name is also a module handle
//  elsewhere (self->lk) is matched with its dot; the others exactly, which
//  also catches a whole-record write or its address taken. A name other
//  structs have too (out->gen) is matched on the record's pointer, which
//  the folder always names r (checked below).
static const struct {
    const char *field;  //  "->NAME." (a member of the sub-record), "->NAME" or "r->NAME" (exactly)
    const char *owners; //  the only files that write it, space-separated
} s_subs[] = {
    {"->lk.", "kvt_lookups.c"},
    {"->adm.", "kvt_admit.c"},
    {"->load", "kvt_loadtrack.c kvt_loadtrack_orphan.c"}, //  the load in flight (I1)
    {"r->gen", "kvt_reqtab.c"},                           //  kvt_reqtab_add, kvt_reqtab_next_gen
};
#define S_NSUBS (sizeof s_subs / sizeof s_subs[0])
#define S_ALL   S_NSUBS

static bool s_ident(char c)
{
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

static bool s_owns(const char *owners, const char *name)
{
    size_t n = strlen(name);
    for (const char *o = strstr(owners, name); o; o = strstr(o + 1, name))
        if ((o == owners || o[-1] == ' ') && (o[n] == ' ' || o[n] == '\0'))
            return true;
    return false;
}

//  Writes of another module's member in one file (entry `only`, or every
//  entry with S_ALL), into err; returns how many. A write is an
//  assignment, a compound assignment, ++/-- (either side), or the address
//  taken (a write through a pointer, memset); of the member, a member of
//  it or an element of its arrays.
static int s_check_writes(const s_src_t *s, size_t only, char *err, size_t errlen)
{
    int bad = 0;
    for (size_t k = 0; k < S_NSUBS; k++) {
        if ((only != S_ALL && k != only) || s_owns(s_subs[k].owners, s->name))
            continue;
        const char *f = s_subs[k].field;
        size_t n = strlen(f);
        bool exact = f[n - 1] != '.';
        for (const char *p = strstr(s->text, f); p; p = strstr(p + 1, f)) {
            if ((exact && s_ident(p[n])) || (s_ident(f[0]) && p > s->text && s_ident(p[-1])))
                continue; //  another member (->gen_floor) or pointer (hdr->gen)
            const char *q = p + n;
            for (;;) { //  the member's own members and elements
                while (s_ident(*q))
                    q++;
                if (*q == '.' && s_ident(q[1])) {
                    q++;
                } else if (*q == '[') {
                    for (int depth = 0; *q; q++)
                        if ((depth += (*q == '[') - (*q == ']')) == 0)
                            break;
                    q += *q == ']';
                } else
                    break;
            }
            while (*q == ' ')
                q++;
            bool assign = (q[0] == '=' && q[1] != '=') ||
                          (q[0] && strchr("+-*/|&^%", q[0]) && q[1] == '=') ||
                          (q[0] == '<' && q[1] == '<' && q[2] == '=') ||
                          (q[0] == '>' && q[1] == '>' && q[2] == '=') ||
                          (q[0] == '+' && q[1] == '+') || (q[0] == '-' && q[1] == '-');
            const char *b = p; //  the start of the expression naming the record
            while (b > s->text && s_ident(b[-1]))
                b--;
            while (b > s->text && b[-1] == ' ')
                b--;
            bool pre = b >= s->text + 2 &&
                       ((b[-1] == '+' && b[-2] == '+') || (b[-1] == '-' && b[-2] == '-'));
            bool addr = b > s->text && b[-1] == '&' && (b == s->text + 1 || b[-2] != '&');
            if (assign || pre || addr) {
                snprintf(err, errlen, "%s writes %.40s (owned by %s)", s->name, p,
                         s_subs[k].owners);
                bad++;
            }
        }
    }
    return bad;
}

Test(layout_sched, every_sub_record_of_a_request_is_written_only_by_its_module)
{
    s_src_t src[S_NSRC];
    s_load(src);
    for (size_t i = 0; i < S_NSRC; i++) {
        char err[256] = "";
        cr_expect(s_check_writes(&src[i], S_ALL, err, sizeof err) == 0, "%s", err);
    }
    s_free(src, S_NSRC);
}

//  The record pointer is r wherever a request record is declared outside
//  the request table, so the r->NAME patterns above see every record.
Test(layout_sched, every_request_record_pointer_is_named_r)
{
    s_src_t src[S_NSRC];
    s_load(src);
    regex_t re;
    cr_assert(regcomp(&re, "kvt_sreq_t \\*+([a-z_0-9]+)[^a-z_0-9(]", REG_EXTENDED) == 0);
    for (size_t i = 0; i < S_NSRC; i++) {
        if (strncmp(src[i].name, "kvt_reqtab", 10) == 0)
            continue;
        regmatch_t m[2];
        for (const char *p = src[i].text; regexec(&re, p, 2, m, 0) == 0; p += m[0].rm_eo) {
            int n = (int)(m[1].rm_eo - m[1].rm_so);
            cr_expect(n == 1 && p[m[1].rm_so] == 'r', "%s declares a record pointer %.*s",
                      src[i].name, n, p + m[1].rm_so);
        }
    }
    regfree(&re);
    s_free(src, S_NSRC);
}

//  Issue 14: a load has one owner. The admission decides and hands its
//  decision to kvt_loadtrack_start; it never writes r->load itself.
Test(layout_sched, rule_I1_the_load_sub_record_is_written_only_by_the_load_tracker)
{
    s_src_t src[S_NSRC];
    s_load(src);
    for (size_t i = 0; i < S_NSRC; i++) {
        char err[256] = "";
        cr_expect(s_check_writes(&src[i], 2, err, sizeof err) == 0, "%s", err);
    }
    s_free(src, S_NSRC);
}

//  A3: a generation names one admission; it moves in one place.
Test(layout_sched, rule_A3_the_generation_is_moved_only_by_the_request_table)
{
    s_src_t src[S_NSRC];
    s_load(src);
    for (size_t i = 0; i < S_NSRC; i++) {
        char err[256] = "";
        cr_expect(s_check_writes(&src[i], 3, err, sizeof err) == 0, "%s", err);
    }
    s_free(src, S_NSRC);
}

//  The checks themselves refuse what they exist to refuse.
Test(layout_sched,
     the_checks_refuse_an_upward_include_a_private_include_an_upward_call_and_a_foreign_write)
{
    char err[256];
    s_src_t up = {"kvt_reqtab.c", "#include \"kvt_lookups.h\"\n"};
    cr_expect(s_check_includes(&up, err, sizeof err) == 1);
    s_src_t side = {"kvt_lookups.c", "#include \"kvt_lookups.h\"\n#include \"kvt_planbuf.h\"\n"};
    cr_expect(s_check_includes(&side, err, sizeof err) == 0);
    s_src_t priv = {"kvt_loadtrack.c", "#include \"kvt_sched_int.h\"\n"};
    cr_expect(s_check_includes(&priv, err, sizeof err) == 1);
    s_src_t calls[2] = {{"kvt_planbuf.c", "void kvt_planbuf_x(void)\n{\n    kvt_saves_y();\n}\n"},
                        {"kvt_saves.c", "void kvt_saves_y(void)\n{\n    kvt_planbuf_x();\n}\n"}};
    cr_expect(s_check_calls(calls, 2, 0, err, sizeof err) == 1, "planbuf → saves goes up");
    cr_expect(s_check_calls(calls, 2, 1, err, sizeof err) == 0, "saves → planbuf goes down");
    s_src_t w = {"kvt_sched.c", "    r->adm.probe_demand = 0;\n"};
    cr_expect(s_check_writes(&w, S_ALL, err, sizeof err) == 1,
              "the coordinator writes admission's");
    s_src_t inc = {"kvt_saves.c", "    r->lk.held++;\n"};
    cr_expect(s_check_writes(&inc, S_ALL, err, sizeof err) == 1, "saves increments lookup's");
    s_src_t rd = {"kvt_admit.c", "    if (r->lk.state == S_LK_OUT && r->lk.held >= 1)\n"};
    cr_expect(s_check_writes(&rd, S_ALL, err, sizeof err) == 0, "reading another's is fine");
    s_src_t own = {"kvt_lookups.c", "    r->lk.held = 0;\n"};
    cr_expect(s_check_writes(&own, S_ALL, err, sizeof err) == 0, "the owner writes its own");
    s_src_t handle = {"kvt_admit.c", "    self->lk = lk;\n"};
    cr_expect(s_check_writes(&handle, S_ALL, err, sizeof err) == 0, "a module handle is not r->lk");
}

//  The load and generation rules refuse every way of writing.
Test(layout_sched, the_write_check_refuses_a_load_field_or_a_generation_written_elsewhere)
{
    char err[256];
    static const struct {
        const char *file; //  where the line is
        const char *line; //  the line
        int bad;          //  writes the check must find
    } c[] = {
        {"kvt_admit.c", "    r->load.end = d.b;\n", 1},
        {"kvt_admit.c", "    r->load.legs |= S_LEG_KV;\n", 1},
        {"kvt_sched.c", "    r->load.pins[i - clb] = b;\n", 1},
        {"kvt_sched.c", "    r->load = (kvt_sreq_load_t){0};\n", 1},
        {"kvt_sched.c", "    memset(&r->load, 0, sizeof(r->load));\n", 1},
        {"kvt_saves.c", "    r->load.npins--;\n", 1},
        {"kvt_saves.c", "    ++r->load.npins;\n", 1},
        {"kvt_admit.c", "    uint32_t e = r->load.end, f = r->load.pins[0];\n", 0},
        {"kvt_sched.c", "    if (r->load.legs == 0 && r->load.floor != 2)\n", 0},
        {"kvt_loadtrack.c", "    r->load.end = ld->end;\n", 0},
        {"kvt_loadtrack_orphan.c", "    r->load.floor = r->load.end = 0;\n", 0},
        {"kvt_lookups.c", "    r->gen++;\n", 1},
        {"kvt_admit.c", "    ++r->gen;\n", 1},
        {"kvt_sched.c", "    r->gen = kvt_loadtrack_gen_floor(self->lt);\n", 1},
        {"kvt_lookups.c", "    r->gen -= 1;\n", 1},
        {"kvt_lookups.c", "    l->op.gen = r->gen + 1;\n", 0},
        {"kvt_sched.c", "    if (r->gen != v->op.gen && r->gen == 1)\n", 0},
        {"kvt_loadtrack_orphan.c", "    self->gen_floor = r->gen;\n", 0},
        {"kvt_sched.c", "    out->gen = r->gen;\n", 0},
        {"kvt_sched.c", "    hdr->gen = 2;\n", 0},
        {"kvt_reqtab.c", "    return ++r->gen;\n", 0},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        s_src_t src = {"", (char *)c[i].line};
        snprintf(src.name, sizeof src.name, "%s", c[i].file);
        cr_expect(s_check_writes(&src, S_ALL, err, sizeof err) == c[i].bad, "%s: %s", c[i].file,
                  c[i].line);
    }
}
