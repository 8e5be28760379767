/*  kvt_test_cli — see kvt_test_cli.h. */
#include "kvt_test_cli.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define KVTIER KVT_BINARY_DIR "/kvtier"

void kvt_tcli_slurp(const char *path, char *buf, size_t size)
{
    buf[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    size_t n = fread(buf, 1, size - 1, f);
    buf[n] = 0;
    fclose(f);
    unlink(path);
}

int kvt_tcli_run(const char *args, char *out, size_t outcap, char *err, size_t errcap)
{
    char opath[64], epath[64], cmd[4096];
    snprintf(opath, sizeof opath, "/tmp/kvt-tcli-%d.out", (int)getpid());
    snprintf(epath, sizeof epath, "/tmp/kvt-tcli-%d.err", (int)getpid());
    snprintf(cmd, sizeof cmd, "%s %s >%s 2>%s", KVTIER, args, out ? opath : "/dev/null", epath);
    int rc = system(cmd);
    if (out)
        kvt_tcli_slurp(opath, out, outcap);
    kvt_tcli_slurp(epath, err, errcap);
    cr_assert(WIFEXITED(rc), "kvtier %s did not exit normally", args);
    return WEXITSTATUS(rc);
}
