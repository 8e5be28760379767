/*  test_store_disk_replay.c — the disk tier end to end: a replay whose rank
    directories are swapped between two runs must not resume from another
    rank's bytes. Each disk object names its rank, world size and geometry;
    rank 1's files in rank 0's directory are counted misses
    (disk.identity_mismatch), never served, and left in place. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "replay/kvt_replay.h"

static void s_rm_tree(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

static kvt_replay_report_t *s_run(const kvt_replay_cfg_t *cfg)
{
    kvt_replay_report_t *r = calloc(1, sizeof *r);
    char err[512] = "";
    cr_assert_eq(kvt_replay_run(cfg, r, err, sizeof err), 0, "%s", err);
    return r;
}

//  Regular files directly in dir.
static size_t s_count_files(const char *dir)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "%s", dir);
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (de->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

Test(disk_replay, swapped_rank_directories_give_no_wrong_resume_and_counted_misses, .timeout = 240)
{
    char dir[256], r0[300], r1[300], tmp[300];
    snprintf(dir, sizeof dir, "/tmp/kvt-disk-replay-%d", (int)getpid());
    snprintf(r0, sizeof r0, "%s/rank0", dir);
    snprintf(r1, sizeof r1, "%s/rank1", dir);
    snprintf(tmp, sizeof tmp, "%s/swap", dir);
    s_rm_tree(dir);
    kvt_replay_cfg_t c;
    kvt_replay_defaults(&c);
    c.limit = 200;
    c.hbm_pool_bytes = 1ull << 20;
    c.cpu_pool_bytes = 1ull << 20; //  almost everything the second run restores comes from disk
    c.disk_dir = dir;
    c.log_level = 0;
    kvt_replay_report_t *r = s_run(&c);
    cr_assert_eq(r->engine.wrong_resumes, 0);
    cr_assert_gt(r->hit_disk_tokens, 0, "the first run already restores from disk");
    kvt_replay_report_clear(r);
    free(r);

    size_t n0 = s_count_files(r0), n1 = s_count_files(r1);
    cr_assert_gt(n0, 0);
    cr_assert_gt(n1, 0);
    cr_assert_eq(rename(r0, tmp), 0);
    cr_assert_eq(rename(r1, r0), 0);
    cr_assert_eq(rename(tmp, r1), 0);

    r = s_run(&c);
    cr_assert_eq(r->engine.wrong_resumes, 0, "%llu resumes from another rank's bytes",
                 (unsigned long long)r->engine.wrong_resumes);
    cr_assert_eq(kvt_replay_counter(r, NULL, "runner.blocks_wrong"), 0);
    cr_assert(r->quiescent, "not quiescent: %s", r->problem);
    uint64_t mism = kvt_replay_counter(r, NULL, "disk.identity_mismatch");
    cr_assert_geq(mism, n0 + n1, "every swapped file is a counted mismatch (%llu)",
                  (unsigned long long)mism);
    cr_assert_eq(kvt_replay_counter(r, NULL, "disk.corrupt"), 0,
                 "another rank's files are not corrupt, and not ours to delete");
    cr_assert_eq(kvt_replay_counter(r, NULL, "disk.rescanned"), 0);
    //  The other rank's files are still there, next to the ones this run wrote.
    cr_assert_geq(s_count_files(r0), n1);
    cr_assert_geq(s_count_files(r1), n0);
    kvt_replay_report_clear(r);
    free(r);
    s_rm_tree(dir);
}
