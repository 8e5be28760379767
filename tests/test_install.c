/*  libkvtier as an engine gets it: `cmake --install` with DESTDIR (what
    `make install DESTDIR=…` runs) puts the static and the shared library,
    the public headers and kvtier.pc in place; a tiny program
    (tests/install/kvt_hello.c) is built against the installed copy with
    pkg-config's flags only, once against the shared library and once
    against the static one, and run. */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

//  Runs a shell command, its output into the test's log file; returns its
//  exit status (-1 when it could not run).
static int s_sh(const char *log, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int s_sh(const char *log, const char *fmt, ...)
{
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    cr_assert(n > 0 && (size_t)n < sizeof cmd - 64);
    char full[8400];
    snprintf(full, sizeof full, "( %s ) >>%s 2>&1", cmd, log);
    int st = system(full);
    return st == -1 || !WIFEXITED(st) ? -1 : WEXITSTATUS(st);
}

static char *s_slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return strdup("");
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return strdup(buf);
}

Test(install, a_program_builds_and_runs_against_the_installed_library, .timeout = 300)
{
#ifdef KVTIER_SANITIZER
    cr_skip_test("a packaging test: the sanitizer build's library needs the sanitizer runtime");
#endif
    char dir[] = "/tmp/kvt-install-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char log[600], dest[600], prefix[700], pc[800];
    snprintf(log, sizeof log, "%s/log", dir);
    snprintf(dest, sizeof dest, "%s/root", dir);
    snprintf(prefix, sizeof prefix, "%s/usr/local", dest);
    snprintf(pc, sizeof pc, "%s/lib/pkgconfig", prefix);

    int rc = s_sh(log, "DESTDIR=%s cmake --install %s --prefix /usr/local", dest, KVT_BINARY_DIR);
    cr_assert_eq(rc, 0, "install failed:\n%s", s_slurp(log));

    //  What an engine finds there.
    const char *expect[] = {"include/kvtier/kvt_msg.h",  "include/kvtier/kvt_hash.h",
                            "include/kvtier/kvt_pool.h", "include/kvtier/kvt_actor.h",
                            "lib/libkvtier.a",           "lib/pkgconfig/kvtier.pc"};
    for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++) {
        char p[1024];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", prefix, expect[i]);
        cr_assert_eq(stat(p, &st), 0, "not installed: %s", expect[i]);
    }
    char so[1024];
    snprintf(so, sizeof so, "%s/lib/libkvtier.so.0", prefix);
    struct stat st;
    cr_assert_eq(lstat(so, &st), 0, "no versioned shared library (libkvtier.so.0)");

    //  pkg-config sees the installed copy (prefix moved under DESTDIR).
    const char *pkc = "PKG_CONFIG_PATH=%s pkg-config --define-variable=prefix=%s";
    char pkgc[2048];
    snprintf(pkgc, sizeof pkgc, pkc, pc, prefix);
    rc = s_sh(log, "%s --modversion kvtier | grep -qx '%s'", pkgc, KVTIER_VERSION);
    cr_assert_eq(rc, 0, "pkg-config does not report version %s:\n%s", KVTIER_VERSION, s_slurp(log));

    //  Shared: built with `pkg-config --cflags --libs`, run with the
    //  installed library on the loader path only.
    rc = s_sh(log,
              "cc -std=c11 -o %s/hello %s/tests/install/kvt_hello.c $(%s --cflags --libs kvtier)",
              dir, KVT_SOURCE_DIR, pkgc);
    cr_assert_eq(rc, 0, "shared build failed:\n%s", s_slurp(log));
    rc = s_sh(log, "LD_LIBRARY_PATH=%s/lib %s/hello | grep -qx ok", prefix, dir);
    cr_assert_eq(rc, 0, "shared program failed:\n%s", s_slurp(log));
    rc = s_sh(log, "LD_LIBRARY_PATH=%s/lib ldd %s/hello | grep -q 'libkvtier.so.0 => %s'", prefix,
              dir, prefix);
    cr_assert_eq(rc, 0, "the shared program does not load the installed libkvtier:\n%s",
                 s_slurp(log));

    //  Static: the archive, its dependencies (Requires.private, linked as
    //  the system ships them) and the device runtimes it was built with;
    //  runs with no libkvtier on the loader path.
    rc = s_sh(log,
              "cc -std=c11 -o %s/hello_static %s/tests/install/kvt_hello.c $(%s --cflags kvtier) "
              "%s/lib/libkvtier.a $(%s --libs $(%s --print-requires-private kvtier)) "
              "$(%s --variable=backend_libs kvtier) -lpthread -lm",
              dir, KVT_SOURCE_DIR, pkgc, prefix, pkgc, pkgc, pkgc);
    cr_assert_eq(rc, 0, "static build failed:\n%s", s_slurp(log));
    rc = s_sh(log, "%s/hello_static | grep -qx ok", dir);
    cr_assert_eq(rc, 0, "static program failed:\n%s", s_slurp(log));
    rc = s_sh(log, "! ldd %s/hello_static | grep -q libkvtier", dir);
    cr_assert_eq(rc, 0, "the static program still needs a shared libkvtier:\n%s", s_slurp(log));

    s_sh("/dev/null", "rm -rf %s", dir);
}
