/*  test_store_disk_files.c — the disk backend (kvt_disk) and the entries of
    its directory it did not write: FIFOs, directories and symbolic links
    under an object's name (at the rescan and mid-run), a symlinked disk
    directory. None is opened through, followed, or deleted; each is a
    counted miss and the call that meets it returns. Tests that hung before
    their fix carry a timeout. Every test uses its own pid-qualified
    directory. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvtier/kvt_disk.h"

#define NS 5u

static char s_dir[256];

static void s_mkdir(void)
{
    snprintf(s_dir, sizeof(s_dir), "/tmp/kvt-test-dfiles-%d-XXXXXX", (int)getpid());
    cr_assert_not_null(mkdtemp(s_dir));
}

static void s_rm_tree(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", dir);
}

static void s_rmdir(void)
{
    s_rm_tree(s_dir);
}

TestSuite(disk_files, .init = s_mkdir, .fini = s_rmdir);

static char s_log_buf[16384]; //  every line logged, one per line
static int s_log_lines;       //  how many

static void s_log(void *arg, int level, const char *line)
{
    (void)arg;
    (void)level;
    size_t n = strlen(s_log_buf);
    snprintf(s_log_buf + n, sizeof(s_log_buf) - n, "%s\n", line);
    s_log_lines++;
}

static kvt_hash_t s_key(uint64_t i)
{
    return (kvt_hash_t){.hi = 0x2222000000000000ull + i, .lo = ~i};
}

static kvt_disk_t *s_open(const char *dir)
{
    kvt_disk_config_t cfg;
    kvt_disk_config_defaults(&cfg);
    cfg.log = s_log;
    cfg.dir = dir;
    cfg.capacity_bytes = 1 << 20;
    cfg.io_threads = 1;
    char err[256] = "";
    kvt_disk_t *d = kvt_disk_new(&cfg, err, sizeof(err));
    cr_assert_not_null(d, "kvt_disk_new: %s", err);
    return d;
}

static void s_put(kvt_disk_t *d, uint64_t i)
{
    uint8_t buf[2000];
    memset(buf, (int)i, sizeof(buf));
    int rc = kvt_disk_put_copy(d, NS, s_key(i), KVT_OBJ_KV, buf, sizeof(buf));
    cr_assert_eq(rc, KVT_STORE_OK, "put %llu: %s", (unsigned long long)i, kvt_store_strerror(rc));
    kvt_disk_flush(d);
}

static int s_read(kvt_disk_t *d, uint64_t i)
{
    uint8_t buf[2000];
    size_t got = 0;
    kvt_obj_kind_t kind;
    return kvt_disk_read(d, NS, s_key(i), KVT_OBJ_KV, buf, sizeof(buf), &got, &kind);
}

//  Object i's path in dir (default identity: rank 0 of 1, layout 0).
static void s_path(char *out, size_t cap, const char *dir, uint64_t i)
{
    kvt_hash_t k = s_key(i);
    snprintf(out, cap, "%s/%016llx-%016llx%016llx-%u-00000000-00000001-0000000000000000.kvt", dir,
             (unsigned long long)NS, (unsigned long long)k.hi, (unsigned long long)k.lo,
             (unsigned)KVT_OBJ_KV);
}

static mode_t s_lmode(const char *path)
{
    struct stat sb;
    return lstat(path, &sb) == 0 ? sb.st_mode : 0;
}

static void s_stats(kvt_disk_t *d, kvt_disk_stats_t *st)
{
    kvt_disk_stats(d, st);
}

// ------------------------------------------------- non-regular entries --

Test(disk_files, a_fifo_under_an_object_name_does_not_hang_the_rescan, .timeout = 10)
{
    char fifo[600];
    s_path(fifo, sizeof(fifo), s_dir, 1);
    cr_assert_eq(mkfifo(fifo, 0644), 0);
    kvt_disk_t *d = s_open(s_dir);
    kvt_disk_stats_t st;
    s_stats(d, &st);
    cr_assert_eq(st.foreign_files, 1);
    cr_assert_eq(st.corrupt, 0);
    cr_assert_eq(st.rescanned, 0);
    cr_assert(S_ISFIFO(s_lmode(fifo)), "the FIFO is not ours to delete");
    cr_assert_eq(s_read(d, 1), KVT_STORE_ENOTFOUND);
    //  Its name is taken: a put of that object fails cleanly, at once.
    uint8_t buf[100] = {0};
    cr_assert_eq(kvt_disk_put_copy(d, NS, s_key(1), KVT_OBJ_KV, buf, sizeof(buf)), KVT_STORE_EIO);
    kvt_disk_flush(d);
    s_stats(d, &st);
    cr_assert_eq(st.puts_blocked, 1);
    cr_assert_eq(st.io_errors, 0);
    cr_assert(S_ISFIFO(s_lmode(fifo)));
    kvt_disk_destroy(&d);
}

static void s_sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

Test(disk_files, the_rescan_never_opens_an_entry_that_is_not_a_regular_file, .timeout = 10)
{
    //  A writer blocks in open() until someone opens the FIFO for reading:
    //  if the rescan opened it, the writer would be let through.
    char fifo[600];
    s_path(fifo, sizeof(fifo), s_dir, 1);
    cr_assert_eq(mkfifo(fifo, 0644), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        int fd = open(fifo, O_WRONLY);
        _exit(fd >= 0 ? 0 : 1);
    }
    s_sleep_ms(200); //  the writer is in open()
    kvt_disk_t *d = s_open(s_dir);
    s_sleep_ms(100);
    int status = 0;
    pid_t w = waitpid(pid, &status, WNOHANG);
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    cr_assert_eq(w, 0, "the rescan opened the FIFO");
    kvt_disk_stats_t st;
    s_stats(d, &st);
    cr_assert_eq(st.foreign_files, 1);
    kvt_disk_destroy(&d);
}

Test(disk_files, a_fifo_put_in_an_objects_place_mid_run_fails_the_read_cleanly, .timeout = 10)
{
    kvt_disk_t *d = s_open(s_dir);
    s_put(d, 1);
    cr_assert_eq(s_read(d, 1), KVT_STORE_OK);
    char path[600];
    s_path(path, sizeof(path), s_dir, 1);
    cr_assert_eq(unlink(path), 0);
    cr_assert_eq(mkfifo(path, 0644), 0);
    cr_assert_eq(s_read(d, 1), KVT_STORE_ENOTFOUND, "a FIFO is a miss, and the read returns");
    kvt_disk_stats_t st;
    s_stats(d, &st);
    cr_assert_eq(st.foreign_files, 1);
    cr_assert_eq(st.misses[0], 1);
    cr_assert_eq(st.corrupt, 0);
    cr_assert_eq(st.objects, 0);
    cr_assert_eq(st.used_bytes, 0);
    cr_assert(S_ISFIFO(s_lmode(path)), "the FIFO is left alone");
    //  The key is then simply a miss, and its put is refused without I/O.
    cr_assert_eq(s_read(d, 1), KVT_STORE_ENOTFOUND);
    uint8_t buf[100] = {0};
    cr_assert_eq(kvt_disk_put_copy(d, NS, s_key(1), KVT_OBJ_KV, buf, sizeof(buf)), KVT_STORE_EIO);
    s_stats(d, &st);
    cr_assert_eq(st.foreign_files, 1, "met once");
    cr_assert_eq(st.puts_blocked, 1);
    kvt_disk_destroy(&d);
}

//  Writes a valid object i into `other` (same identity), returns its path.
static void s_valid_elsewhere(const char *other, uint64_t i, char *path, size_t cap)
{
    cr_assert_eq(mkdir(other, 0700), 0);
    kvt_disk_t *o = s_open(other);
    s_put(o, i);
    kvt_disk_destroy(&o);
    s_path(path, cap, other, i);
    cr_assert(S_ISREG(s_lmode(path)));
}

Test(disk_files, a_symlink_under_an_object_name_is_never_followed, .timeout = 10)
{
    char other[300], target[600], link[600];
    snprintf(other, sizeof(other), "%s/elsewhere", s_dir);
    s_valid_elsewhere(other, 1, target, sizeof(target));
    s_path(link, sizeof(link), s_dir, 1);
    cr_assert_eq(symlink(target, link), 0);
    //  At the rescan: a whole, valid object of this identity behind the link.
    kvt_disk_t *d = s_open(s_dir);
    kvt_disk_stats_t st;
    s_stats(d, &st);
    cr_assert_eq(st.rescanned, 0, "the link was followed");
    cr_assert_eq(st.foreign_files, 2); //  the link and the directory "elsewhere"
    cr_assert_eq(s_read(d, 1), KVT_STORE_ENOTFOUND);
    cr_assert(S_ISLNK(s_lmode(link)), "the link is left alone");
    cr_assert(S_ISREG(s_lmode(target)), "so is its target");
    kvt_disk_destroy(&d);

    //  Mid-run: a ready object replaced by a link to valid bytes.
    cr_assert_eq(unlink(link), 0);
    d = s_open(s_dir);
    s_put(d, 2);
    char path2[600], target2[600];
    s_path(path2, sizeof(path2), s_dir, 2);
    s_path(target2, sizeof(target2), other, 2);
    char cmd[1400];
    snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", path2, target2);
    cr_assert_eq(system(cmd), 0);
    cr_assert_eq(unlink(path2), 0);
    cr_assert_eq(symlink(target2, path2), 0);
    cr_assert_eq(s_read(d, 2), KVT_STORE_ENOTFOUND, "the bytes behind a link were served");
    s_stats(d, &st);
    cr_assert_eq(st.foreign_files, 2); //  "elsewhere" at the rescan, then the link
    cr_assert(S_ISLNK(s_lmode(path2)));
    cr_assert(S_ISREG(s_lmode(target2)));
    kvt_disk_destroy(&d);
}

Test(disk_files, a_symlinked_disk_directory_is_refused_with_its_name, .timeout = 10)
{
    char real[300], link[300], target[600];
    snprintf(real, sizeof(real), "%s/real", s_dir);
    snprintf(link, sizeof(link), "%s/rank0", s_dir);
    s_valid_elsewhere(real, 1, target, sizeof(target));
    cr_assert_eq(symlink(real, link), 0);
    kvt_disk_config_t cfg;
    kvt_disk_config_defaults(&cfg);
    cfg.log = s_log;
    cfg.dir = link;
    cfg.capacity_bytes = 1 << 20;
    char err[512] = "";
    kvt_disk_t *d = kvt_disk_new(&cfg, err, sizeof(err));
    cr_assert_null(d, "a symlinked disk directory was followed");
    cr_assert(strstr(err, "disk.dir=") && strstr(err, "symbolic link"), "%s", err);
    cr_assert(S_ISREG(s_lmode(target)), "nothing behind the link was touched");
    cr_assert(S_ISLNK(s_lmode(link)));
}
