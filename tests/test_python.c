/*  python/kvtier: the package's own tests (python/tests/test_kvtier.py),
    run with Debian's /usr/bin/python3 against build/python. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

Test(python, the_package_drives_the_scheduler_core, .timeout = 120)
{
    if (access(KVT_BINARY_DIR "/python/kvtier/.built", F_OK) != 0) {
        //  Not built: no /usr/bin/python3 with cffi and Python.h, or a
        //  sanitizer build (CMakeLists.txt says which at configure).
        cr_skip_test("python/kvtier not built in " KVT_BINARY_DIR);
        return;
    }
    char log[] = "/tmp/kvt-python-XXXXXX";
    int fd = mkstemp(log);
    cr_assert_geq(fd, 0);
    close(fd);
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "PYTHONPATH=%s/python /usr/bin/python3 %s/python/tests/test_kvtier.py >%s 2>&1",
             KVT_BINARY_DIR, KVT_SOURCE_DIR, log);
    int rc = system(cmd);
    if (rc != 0) {
        FILE *f = fopen(log, "r");
        char text[4096] = "";
        size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
        text[n] = 0;
        if (f)
            fclose(f);
        cr_assert_fail("python/tests/test_kvtier.py failed (%d):\n%s", rc, text);
    }
    unlink(log);
}
