/*  fuzz_disk_manifest.c — libFuzzer target for the disk directory's
    manifest (src/store/kvt_disk_manifest.c).

    Properties checked on every input:
    * kvt_disk_manifest_parse accepts exactly the bytes the writer produces:
      an accepted manifest formats back to the same bytes, and a refused
      one names its bad line;
    * kvt_disk_new on a directory holding the input as its manifest opens
      exactly when the manifest parses and names this tier's layout id, and
      counts each refusal.

    Build: cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DKVTIER_FUZZ=ON
           cmake --build build-fuzz --target fuzz_disk_manifest
    Run:   ./build-fuzz/fuzz_disk_manifest -max_len=1024 -dict=tests/fuzz/manifest.dict \
               corpus-tmp tests/corpus/disk_manifest
*/
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz/kvt_fuzz.h"
#include "kvtier/kvt_disk.h"
#include "store/kvt_disk_int.h"

#define S_LAYOUT 0x0000000000001234ull //  this tier's layout id

static void s_dman_quiet(void *arg, int level, const char *line)
{
    (void)arg, (void)level, (void)line;
}

//  The scratch directory goes when the process ends (its manifest, then itself).
static char s_dman_dir[64];

static void s_dman_cleanup(void)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", s_dman_dir, KVT_DISK_MANIFEST);
    unlink(path);
    rmdir(s_dman_dir);
}

int kvt_fuzz_disk_manifest(const uint8_t *data, size_t size)
{
    uint64_t layout = 0, ns = 0;
    const char *why = NULL;
    int prc = kvt_disk_manifest_parse((const char *)data, size, &layout, &ns, &why);
    if (prc == 0) {
        char back[128];
        int n = kvt_disk_manifest_format(back, sizeof back, layout, ns);
        if (n < 0 || (size_t)n != size || memcmp(back, data, size) != 0)
            KVT_FUZZ_DIE("disk_manifest: an accepted manifest is not what the writer writes");
    } else if (prc != -1 || !why) {
        KVT_FUZZ_DIE("disk_manifest: refused (%d) without naming the bad line", prc);
    }

    char *dir = s_dman_dir;
    static char path[128];
    if (!dir[0]) {
        snprintf(dir, sizeof s_dman_dir, "/tmp/kvt_fuzz_dman_%d", (int)getpid());
        mkdir(dir, 0700);
        snprintf(path, sizeof path, "%s/%s", dir, KVT_DISK_MANIFEST);
        atexit(s_dman_cleanup);
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return 0;
    bool wrote = write(fd, data, size) == (ssize_t)size;
    close(fd);
    if (!wrote)
        return 0;
    kvt_disk_config_t cfg;
    kvt_disk_config_defaults(&cfg);
    cfg.dir = dir;
    cfg.capacity_bytes = 1u << 20;
    cfg.io_mode = KVT_DISK_IO_INLINE;
    cfg.layout_id = S_LAYOUT;
    cfg.log = s_dman_quiet;
    char err[512] = "";
    uint64_t refused = kvt_disk_manifest_refusals();
    kvt_disk_t *disk = kvt_disk_new(&cfg, err, sizeof err);
    //  What the reader sees is at most 512 bytes of the file.
    bool want = size <= 512 && prc == 0 && layout == S_LAYOUT;
    if ((disk != NULL) != want)
        KVT_FUZZ_DIE("disk_manifest: kvt_disk_new %s a manifest that should %s (%s)",
                     disk ? "opened" : "refused", want ? "open" : "be refused", err);
    if (!disk && kvt_disk_manifest_refusals() != refused + 1)
        KVT_FUZZ_DIE("disk_manifest: a refusal was not counted");
    kvt_disk_destroy(&disk);
    unlink(path);
    return 0;
}

KVT_FUZZ_ENTRY(kvt_fuzz_disk_manifest)
