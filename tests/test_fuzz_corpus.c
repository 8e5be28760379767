/*  test_fuzz_corpus.c — every fuzz corpus replayed by the ordinary suite.

    Each fuzz target's entry function (tests/fuzz/fuzz_<target>.c, linked
    here without libFuzzer) is fed every file of tests/corpus/<target>/: the
    seeds and every input the fuzzer kept, crashes included, so a decoder
    bug the fuzzer found stays found. An entry function aborts on a failed
    property; the plain and ASan stages both run this. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz/kvt_fuzz.h"

#define S_MAX_INPUT (1u << 20) //  bytes of one corpus file read, at most

static char s_current[1024]; //  the file being replayed, named if it aborts

static void s_on_abort(int sig)
{
    static const char what[] = "test_fuzz_corpus: aborted on ";
    (void)!write(2, what, sizeof what - 1);
    (void)!write(2, s_current, strlen(s_current));
    (void)!write(2, "\n", 1);
    signal(sig, SIG_DFL);
    raise(sig);
}

//  Replays tests/corpus/<target>/ through fn; the number of files.
static size_t s_replay(const char *target, int (*fn)(const uint8_t *, size_t))
{
    char dirpath[512];
    snprintf(dirpath, sizeof dirpath, "%s/tests/corpus/%s", KVT_SOURCE_DIR, target);
    DIR *dir = opendir(dirpath);
    cr_assert(dir, "cannot open %s", dirpath);
    uint8_t *buf = malloc(S_MAX_INPUT);
    cr_assert(buf);
    signal(SIGABRT, s_on_abort);
    size_t files = 0;
    struct dirent *ent;
    while ((ent = readdir(dir)) != NULL) {
        if (ent->d_name[0] == '.')
            continue;
        snprintf(s_current, sizeof s_current, "%s/%s", dirpath, ent->d_name);
        FILE *f = fopen(s_current, "rb");
        cr_assert(f, "%s", s_current);
        size_t len = fread(buf, 1, S_MAX_INPUT, f);
        fclose(f);
        //  An exact-size copy, as libFuzzer passes it: ASan sees a read past it.
        uint8_t *input = malloc(len ? len : 1);
        cr_assert(input);
        memcpy(input, buf, len);
        cr_assert_eq(fn(input, len), 0, "%s", s_current);
        free(input);
        files++;
    }
    signal(SIGABRT, SIG_DFL);
    closedir(dir);
    free(buf);
    return files;
}

Test(fuzz_corpus, decode)
{
    cr_assert_geq(s_replay("decode", kvt_fuzz_decode), 100);
}

Test(fuzz_corpus, trace)
{
    cr_assert_geq(s_replay("trace", kvt_fuzz_trace), 8);
}

Test(fuzz_corpus, config)
{
    cr_assert_geq(s_replay("config", kvt_fuzz_config), 8);
}

Test(fuzz_corpus, disk_object)
{
    cr_assert_geq(s_replay("disk_object", kvt_fuzz_disk_object), 6);
}

Test(fuzz_corpus, disk_manifest)
{
    cr_assert_geq(s_replay("disk_manifest", kvt_fuzz_disk_manifest), 6);
}

Test(fuzz_corpus, frame)
{
    cr_assert_geq(s_replay("frame", kvt_fuzz_frame), 12);
}
