/*  fuzz_disk_object.c — libFuzzer target for the disk tier's object files
    (src/store/kvt_disk_file.c, read through kvt_disk_rescan.c and
    kvt_disk_read) and their names (kvt_disk_name_parse).

    Input: a control byte, then the bytes of one file. Control bits 0..3
    repair fields so that mutations reach the checks behind them: 1 sets
    the payload length to the bytes after the header, 2 writes the expected
    identity and object (namespace, key, kind, rank, world, layout), 4 the
    payload checksum, 8 the header checksum (last). Bit 7 instead treats the
    rest as a directory entry name.

    Properties checked on every input:
    * a file decoded or read back is exactly what the writer would have
      written for the object the name says: its header re-encodes to the same
      80 bytes and kvt_disk_read hands out exactly the payload, only when
      the length, identity and both checksums hold; anything else is a
      counted miss or corruption, never bytes;
    * a name that parses formats back to the same name (one object, one name).

    Build: cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DKVTIER_FUZZ=ON
           cmake --build build-fuzz --target fuzz_disk_object
    Run:   ./build-fuzz/fuzz_disk_object -max_len=4096 corpus-tmp tests/corpus/disk_object
*/
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "fuzz/kvt_fuzz.h"
#include "kvtier/kvt_disk.h"
#include "store/kvt_disk_int.h"

#define S_NS     0x0123456789abcdefull //  the object every file claims to be
#define S_LAYOUT 0x00000000feedbeefull

static void s_dobj_quiet(void *arg, int level, const char *line)
{
    (void)arg, (void)level, (void)line;
}

static void s_dobj_put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void s_dobj_put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void s_dobj_name(const uint8_t *data, size_t size)
{
    char name[128];
    size_t n = size < sizeof name - 1 ? size : sizeof name - 1;
    memcpy(name, data, n);
    name[n] = 0;
    uint64_t ns;
    kvt_hash_t key;
    kvt_obj_kind_t kind;
    kvt_dident_t id;
    if (!kvt_disk_name_parse(name, &ns, &key, &kind, &id))
        return;
    char back[KVT_DISK_NAME_LEN];
    kvt_disk_file_name(back, ns, key, kind, &id);
    if (strcmp(back, name) != 0)
        KVT_FUZZ_DIE("disk_object: name '%s' parses but formats as '%s'", name, back);
}

//  The scratch directory goes when the process ends (its manifest, then itself).
static char s_dobj_dir[64];

static void s_dobj_cleanup(void)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", s_dobj_dir, KVT_DISK_MANIFEST);
    unlink(path);
    rmdir(s_dobj_dir);
}

int kvt_fuzz_disk_object(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t ctl = data[0];
    data++, size--;
    if (ctl & 0x80) {
        s_dobj_name(data, size);
        return 0;
    }
    char *dir = s_dobj_dir;
    if (!dir[0]) {
        snprintf(dir, sizeof s_dobj_dir, "/tmp/kvt_fuzz_dobj_%d", (int)getpid());
        mkdir(dir, 0700);
        atexit(s_dobj_cleanup);
    }
    const kvt_hash_t key = {.hi = 0x1111222233334444ull, .lo = 0x5555666677778888ull};
    const kvt_obj_kind_t kind = (kvt_obj_kind_t)(1 + (ctl >> 4) % KVT_OBJ_KIND_COUNT);
    const kvt_dident_t id = {.rank = 1, .world = 2, .layout = S_LAYOUT};
    uint8_t *file = malloc(size ? size : 1);
    if (!file)
        return 0;
    memcpy(file, data, size);
    if (size >= KVT_DISK_HDR) {
        if (ctl & 1)
            s_dobj_put64(file + 40, size - KVT_DISK_HDR);
        if (ctl & 2) {
            s_dobj_put32(file + 12, (uint32_t)kind);
            s_dobj_put64(file + 16, S_NS);
            s_dobj_put64(file + 24, key.hi);
            s_dobj_put64(file + 32, key.lo);
            s_dobj_put64(file + 48, id.layout);
            s_dobj_put32(file + 56, id.rank);
            s_dobj_put32(file + 60, id.world);
        }
        if (ctl & 4)
            s_dobj_put64(file + 64, XXH3_64bits(file + KVT_DISK_HDR, size - KVT_DISK_HDR));
        if (ctl & 8)
            s_dobj_put64(file + 72, XXH3_64bits(file, 72));
        //  A header that decodes is the one the encoder writes for its fields.
        kvt_dhdr_t h;
        const char *why = NULL;
        if (kvt_disk_hdr_decode(file, &h, &why) == 0) {
            uint8_t again[KVT_DISK_HDR];
            kvt_disk_hdr_encode(again, h.ns, h.key, h.kind, &h.id, h.size, h.checksum);
            if (memcmp(again, file, KVT_DISK_HDR) != 0)
                KVT_FUZZ_DIE("disk_object: a decoded header does not re-encode to its bytes");
        } else if (!why) {
            KVT_FUZZ_DIE("disk_object: a refused header without a reason");
        }
    }
    char name[KVT_DISK_NAME_LEN], path[192];
    kvt_disk_file_name(name, S_NS, key, kind, &id);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, file, size) != (ssize_t)size) {
        if (fd >= 0)
            close(fd);
        free(file);
        return 0;
    }
    close(fd);

    kvt_disk_config_t cfg;
    kvt_disk_config_defaults(&cfg);
    cfg.dir = dir;
    cfg.capacity_bytes = 1u << 20;
    cfg.io_mode = KVT_DISK_IO_INLINE;
    cfg.rank = id.rank;
    cfg.world_size = id.world;
    cfg.layout_id = id.layout;
    cfg.log = s_dobj_quiet;
    char err[512] = "";
    kvt_disk_t *disk = kvt_disk_new(&cfg, err, sizeof err);
    if (!disk)
        KVT_FUZZ_DIE("disk_object: the directory did not open: %s", err);
    static uint8_t dst[8192];
    size_t got = 0;
    kvt_obj_kind_t found = 0;
    int rc = kvt_disk_read(disk, S_NS, key, kind, dst, sizeof dst, &got, &found);
    kvt_disk_stats_t st;
    kvt_disk_stats(disk, &st);
    bool valid = size > KVT_DISK_HDR;
    if (valid) {
        kvt_dhdr_t h;
        const char *why;
        valid = kvt_disk_hdr_decode(file, &h, &why) == 0 && h.ns == S_NS &&
                kvt_hash_eq(h.key, key) && h.kind == kind && kvt_disk_ident_eq(&h.id, &id) &&
                h.size == size - KVT_DISK_HDR &&
                h.checksum == XXH3_64bits(file + KVT_DISK_HDR, size - KVT_DISK_HDR);
    }
    if (rc == KVT_STORE_OK) {
        if (!valid || found != kind || got != size - KVT_DISK_HDR ||
            memcmp(dst, file + KVT_DISK_HDR, got) != 0)
            KVT_FUZZ_DIE("disk_object: a read handed out bytes of an invalid file");
    } else {
        if (valid)
            KVT_FUZZ_DIE("disk_object: a valid file was not read (%d)", rc);
        if (rc != KVT_STORE_ENOTFOUND && rc != KVT_STORE_ECORRUPT)
            KVT_FUZZ_DIE("disk_object: a bad file read as %d", rc);
        if (st.corrupt + st.identity_mismatch == 0)
            KVT_FUZZ_DIE("disk_object: a bad file was neither counted corrupt nor foreign");
    }
    kvt_disk_destroy(&disk);
    unlink(path);
    free(file);
    return 0;
}

KVT_FUZZ_ENTRY(kvt_fuzz_disk_object)
