/*  test_store_disk_files.c — the disk backend (kvt_disk) and the entries of
    its directory it did not write: FIFOs, directories and symbolic links
    under an object's name (at the rescan and mid-run), a symlinked disk
    directory, temporaries that are not its own, files it cannot delete,
    and what it logs about them. None is opened through, followed, or
    deleted; each is a counted miss and the call that meets it returns.
    Tests that hung before their fix carry a timeout. Every test uses its
    own pid-qualified directory.

    A file kvtier cannot delete (immutable, or a read-only directory — which
    root ignores) is simulated by this binary's own unlinkat, which the
    statically linked store calls instead of libc's: it fails with EPERM for
    names that contain s_undeletable, and otherwise makes the system call. */
#define _GNU_SOURCE //  syscall()
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
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

static char s_undeletable[128]; //  unlinkat fails (EPERM) for names containing this, if set

int unlinkat(int dirfd, const char *path, int flags)
{
    if (s_undeletable[0] && strstr(path, s_undeletable)) {
        errno = EPERM;
        return -1;
    }
    return (int)syscall(SYS_unlinkat, dirfd, path, flags);
}

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

//  True if one logged line contains both a and b.
static bool s_logged_with(const char *a, const char *b)
{
    for (const char *line = s_log_buf; *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        char one[1024];
        snprintf(one, sizeof(one), "%.*s", (int)len, line);
        if (strstr(one, a) && strstr(one, b))
            return true;
        line += len + (end ? 1 : 0);
    }
    return false;
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

static mode_t s_lmode(const char *path)
{
    struct stat sb;
    return lstat(path, &sb) == 0 ? sb.st_mode : 0;
}

//  Object i's file name as written by rank `rank` of 1 (layout 0).
static void s_name(char *out, size_t cap, uint64_t i, uint32_t rank)
{
    kvt_hash_t k = s_key(i);
    snprintf(out, cap, "%016llx-%016llx%016llx-%u-%08x-00000001-0000000000000000.kvt",
             (unsigned long long)NS, (unsigned long long)k.hi, (unsigned long long)k.lo,
             (unsigned)KVT_OBJ_KV, (unsigned)rank);
}

//  Object i's path in dir (default identity: rank 0 of 1, layout 0).
static void s_path(char *out, size_t cap, const char *dir, uint64_t i)
{
    char name[128];
    s_name(name, sizeof(name), i, 0);
    snprintf(out, cap, "%s/%s", dir, name);
}

//  Creates a regular file at dir/name holding text.
static void s_touch(const char *dir, const char *name, const char *text)
{
    char path[700];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    fputs(text, f);
    fclose(f);
}

static bool s_exists_in(const char *dir, const char *name)
{
    char path[700];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return s_lmode(path) != 0;
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

// ------------------------------------- kvtier deletes only what it wrote --

Test(disk_files, the_rescan_deletes_only_temporaries_of_its_own_format, .timeout = 10)
{
    char obj[128], other[128], mine[300], fifo[300], path[700];
    s_name(obj, sizeof(obj), 1, 0);
    s_name(other, sizeof(other), 1, 7); //  rank 7's object name
    snprintf(mine, sizeof(mine), ".tmp-%s.12", obj);
    snprintf(fifo, sizeof(fifo), ".tmp-%s.13", obj);
    const char *foreign[] = {".tmp-half-written.7", ".tmp-", NULL, NULL, NULL};
    char bad_seq[300], theirs[300];
    snprintf(bad_seq, sizeof(bad_seq), ".tmp-%s.12x", obj);
    snprintf(theirs, sizeof(theirs), ".tmp-%s.3", other);
    foreign[2] = bad_seq;
    foreign[3] = theirs;
    s_touch(s_dir, mine, "half a file of ours");
    for (int i = 0; foreign[i]; i++)
        s_touch(s_dir, foreign[i], "someone else's");
    snprintf(path, sizeof(path), "%s/%s", s_dir, fifo);
    cr_assert_eq(mkfifo(path, 0644), 0);
    kvt_disk_t *d = s_open(s_dir);
    kvt_disk_stats_t st;
    s_stats(d, &st);
    cr_assert_eq(st.tmp_removed, 1);
    cr_assert_not(s_exists_in(s_dir, mine), "our own temporary stays");
    for (int i = 0; foreign[i]; i++)
        cr_assert(s_exists_in(s_dir, foreign[i]), "%s is not ours and was deleted", foreign[i]);
    cr_assert(S_ISFIFO(s_lmode(path)), "a FIFO named like our temporary is not ours");
    cr_assert_eq(st.foreign_files, 5);
    kvt_disk_destroy(&d);
}

Test(disk_files, a_directory_under_an_object_name_is_left_alone_and_its_key_is_a_clean_miss,
     .timeout = 10)
{
    char dir[600];
    s_path(dir, sizeof(dir), s_dir, 1);
    cr_assert_eq(mkdir(dir, 0755), 0);
    s_touch(dir, "inside", "x");
    for (int run = 0; run < 2; run++) {
        s_log_buf[0] = 0;
        kvt_disk_t *d = s_open(s_dir);
        kvt_disk_stats_t st;
        s_stats(d, &st);
        cr_assert_eq(st.foreign_files, 1);
        cr_assert_eq(st.corrupt, 0);
        char name[128];
        s_name(name, sizeof(name), 1, 0);
        cr_assert_not(s_logged_with(name, "delet"), "logged a deletion that did not happen:\n%s",
                      s_log_buf);
        cr_assert(S_ISDIR(s_lmode(dir)));
        cr_assert_eq(s_read(d, 1), KVT_STORE_ENOTFOUND);
        uint8_t buf[100] = {0};
        cr_assert_eq(kvt_disk_put_copy(d, NS, s_key(1), KVT_OBJ_KV, buf, sizeof(buf)),
                     KVT_STORE_EIO, "refused at once, not failed by the writer");
        kvt_disk_flush(d);
        s_stats(d, &st);
        cr_assert_eq(st.puts_blocked, 1);
        cr_assert_eq(st.io_errors, 0, "run %d: the key failed with an I/O error", run);
        //  Other keys are not affected.
        s_put(d, 2 + (uint64_t)run);
        cr_assert_eq(s_read(d, 2 + (uint64_t)run), KVT_STORE_OK);
        kvt_disk_destroy(&d);
    }
}

Test(disk_files, a_directory_made_at_an_object_name_mid_run_fails_one_put_cleanly, .timeout = 10)
{
    kvt_disk_t *d = s_open(s_dir);
    char dir[600];
    s_path(dir, sizeof(dir), s_dir, 1);
    cr_assert_eq(mkdir(dir, 0755), 0);
    uint8_t buf[100] = {0};
    cr_assert_eq(kvt_disk_put_copy(d, NS, s_key(1), KVT_OBJ_KV, buf, sizeof(buf)), KVT_STORE_OK);
    kvt_disk_flush(d);
    kvt_disk_stats_t st;
    s_stats(d, &st);
    cr_assert_eq(st.io_errors, 1, "the write fails once");
    cr_assert_eq(st.puts, 0);
    cr_assert_eq(st.objects + st.objects_writing + st.used_bytes, 0);
    //  From then on the name is known to be taken: no write is tried again.
    for (int i = 0; i < 3; i++)
        cr_assert_eq(kvt_disk_put_copy(d, NS, s_key(1), KVT_OBJ_KV, buf, sizeof(buf)),
                     KVT_STORE_EIO);
    kvt_disk_flush(d);
    s_stats(d, &st);
    cr_assert_eq(st.io_errors, 1);
    cr_assert_eq(st.puts_blocked, 3);
    cr_assert(S_ISDIR(s_lmode(dir)));
    cr_assert_eq(s_read(d, 1), KVT_STORE_ENOTFOUND);
    kvt_disk_destroy(&d);
    DIR *dd = opendir(s_dir);
    struct dirent *de;
    while ((de = readdir(dd)) != NULL)
        cr_assert_neq(strncmp(de->d_name, ".tmp-", 5), 0, "left %s behind", de->d_name);
    closedir(dd);
}

Test(disk_files, a_fifo_made_at_an_object_name_mid_run_is_never_written_over, .timeout = 10)
{
    kvt_disk_t *d = s_open(s_dir);
    char fifo[600];
    s_path(fifo, sizeof(fifo), s_dir, 1);
    cr_assert_eq(mkfifo(fifo, 0644), 0);
    uint8_t buf[100] = {0};
    cr_assert_eq(kvt_disk_put_copy(d, NS, s_key(1), KVT_OBJ_KV, buf, sizeof(buf)), KVT_STORE_OK);
    kvt_disk_flush(d);
    cr_assert(S_ISFIFO(s_lmode(fifo)), "the rename replaced an entry that was not ours");
    kvt_disk_stats_t st;
    s_stats(d, &st);
    cr_assert_eq(st.puts, 0);
    cr_assert_eq(s_read(d, 1), KVT_STORE_ENOTFOUND);
    kvt_disk_destroy(&d);
}

//  Writes a corrupt object file i (a name of ours, a bad header).
static void s_corrupt_file(uint64_t i)
{
    char name[128];
    s_name(name, sizeof(name), i, 0);
    s_touch(s_dir, name, "not a header at all, not even close to eighty bytes");
}

Test(disk_files, a_corrupt_file_that_cannot_be_deleted_is_logged_as_kept, .timeout = 10)
{
    s_corrupt_file(1);
    s_name(s_undeletable, sizeof(s_undeletable), 1, 0);
    kvt_disk_t *d = s_open(s_dir);
    kvt_disk_stats_t st;
    s_stats(d, &st);
    cr_assert_eq(st.corrupt, 1);
    cr_assert_eq(st.delete_failed, 1);
    cr_assert(s_exists_in(s_dir, s_undeletable));
    cr_assert_null(strstr(s_log_buf, "deleting"), "%s", s_log_buf);
    cr_assert_not_null(strstr(s_log_buf, "could not delete"), "%s", s_log_buf);
    //  Its name stays taken: a miss, and a put fails at once.
    cr_assert_eq(s_read(d, 1), KVT_STORE_ENOTFOUND);
    uint8_t buf[100] = {0};
    cr_assert_eq(kvt_disk_put_copy(d, NS, s_key(1), KVT_OBJ_KV, buf, sizeof(buf)), KVT_STORE_EIO);
    kvt_disk_destroy(&d);
}

Test(disk_files, a_file_that_cannot_be_deleted_at_run_time_is_logged_as_kept, .timeout = 10)
{
    kvt_disk_config_t cfg;
    kvt_disk_config_defaults(&cfg);
    cfg.log = s_log;
    cfg.dir = s_dir;
    cfg.capacity_bytes = 2 * (KVT_DISK_HEADER_BYTES + 2000); //  two objects
    cfg.io_threads = 1;
    kvt_disk_t *d = kvt_disk_new(&cfg, NULL, 0);
    cr_assert_not_null(d);
    s_put(d, 1);
    s_put(d, 2);
    //  Corrupt at read, and not deletable.
    char path[600];
    s_path(path, sizeof(path), s_dir, 2);
    cr_assert_eq(truncate(path, 100), 0);
    s_name(s_undeletable, sizeof(s_undeletable), 2, 0);
    s_log_buf[0] = 0;
    cr_assert_eq(s_read(d, 2), KVT_STORE_ECORRUPT);
    cr_assert(s_exists_in(s_dir, s_undeletable));
    cr_assert_null(strstr(s_log_buf, "deleted"), "%s", s_log_buf);
    cr_assert_not_null(strstr(s_log_buf, "could not delete"), "%s", s_log_buf);
    kvt_disk_stats_t st;
    s_stats(d, &st);
    cr_assert_eq(st.delete_failed, 1);
    //  Evicting an undeletable file: the put still gets its room, the file
    //  is said to be kept, and its name is never written over.
    s_name(s_undeletable, sizeof(s_undeletable), 1, 0);
    s_log_buf[0] = 0;
    s_put(d, 3);
    s_put(d, 4);
    s_stats(d, &st);
    cr_assert_eq(st.delete_failed, 2);
    cr_assert_eq(st.evictions, 0, "an eviction whose unlink failed is no eviction");
    cr_assert(s_exists_in(s_dir, s_undeletable));
    cr_assert_not_null(strstr(s_log_buf, "could not delete"), "%s", s_log_buf);
    cr_assert_eq(s_read(d, 1), KVT_STORE_ENOTFOUND);
    cr_assert_eq(s_read(d, 3), KVT_STORE_OK);
    cr_assert_eq(s_read(d, 4), KVT_STORE_OK);
    //  kvt_disk_remove says so too.
    s_name(s_undeletable, sizeof(s_undeletable), 3, 0);
    cr_assert_eq(kvt_disk_remove(d, NS, s_key(3), KVT_OBJ_KV), KVT_STORE_EIO);
    cr_assert(s_exists_in(s_dir, s_undeletable));
    s_undeletable[0] = 0;
    kvt_disk_destroy(&d);
}

Test(disk_files, the_rescan_logs_a_summary_and_a_few_examples_and_leaves_the_error_budget,
     .timeout = 10)
{
    for (uint64_t i = 0; i < 40; i++)
        s_corrupt_file(100 + i);
    for (uint64_t i = 0; i < 3; i++)
        s_touch(s_dir, i == 0 ? "notes" : i == 1 ? "README" : "x.kvt", "foreign");
    kvt_disk_t *d = s_open(s_dir);
    int rescan_lines = s_log_lines;
    cr_assert_leq(rescan_lines, 6, "the rescan logged %d lines:\n%s", rescan_lines, s_log_buf);
    cr_assert_not_null(strstr(s_log_buf, "40 corrupt"), "no summary with counts:\n%s", s_log_buf);
    cr_assert_not_null(strstr(s_log_buf, "3 foreign"), "%s", s_log_buf);
    //  Errors at run time are still logged.
    char dir[600];
    s_path(dir, sizeof(dir), s_dir, 1);
    cr_assert_eq(mkdir(dir, 0755), 0);
    uint8_t buf[100] = {0};
    cr_assert_eq(kvt_disk_put_copy(d, NS, s_key(1), KVT_OBJ_KV, buf, sizeof(buf)), KVT_STORE_OK);
    kvt_disk_flush(d);
    cr_assert_not_null(strstr(s_log_buf + 0, "write of"), "the write error went unlogged:\n%s",
                       s_log_buf);
    kvt_disk_destroy(&d);
}

//  One disk tier per directory: a second one over the same directory (a
//  restart while the old instance still runs, a rank set twice) would
//  delete the first one's temporaries and evict files it indexed, so it is
//  refused, naming the directory; once the first is gone the directory opens.
Test(disk_files, a_directory_in_use_by_another_disk_tier_is_refused)
{
    kvt_disk_t *d = s_open(s_dir);
    kvt_disk_config_t cfg;
    kvt_disk_config_defaults(&cfg);
    cfg.log = s_log;
    cfg.dir = s_dir;
    cfg.capacity_bytes = 1 << 20;
    char err[256] = "";
    kvt_disk_t *second = kvt_disk_new(&cfg, err, sizeof(err));
    cr_assert_null(second, "a second disk tier opened the same directory");
    cr_assert(strstr(err, "in use by another disk tier") && strstr(err, s_dir), "%s", err);
    kvt_disk_destroy(&d);
    second = kvt_disk_new(&cfg, err, sizeof(err));
    cr_assert_not_null(second, "%s", err);
    kvt_disk_destroy(&second);
}
