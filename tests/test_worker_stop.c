/*  The worker's stop against a disk write held in flight: the rank data
    path as actors under the SIM driver (tests/common/kvt_test_rig), one
    rank whose tier writes through to a disk on I/O threads, and the disk's
    fault hook holding the write until someone flushes. Deterministic: the
    stall ends only at a flush, so a stop that flushes finishes the write
    before it returns and a stop that does not leaves it held, whatever the
    threads' timing. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/kvt_test_rig.h"
#include "replay/kvt_oracle.h"

#define BS     16
#define CS     64
#define BPC    (CS / BS)
#define PLANES 2
#define TOKB   16

static kvt_trig_t R;
static char s_dir[64];

static kvt_hash_t K(uint64_t i)
{
    return (kvt_hash_t){.hi = 0x5709ull + i, .lo = i * 131 + 5};
}

static void s_up(void)
{
    snprintf(s_dir, sizeof s_dir, "/tmp/kvt_wstop_%d_XXXXXX", (int)getpid());
    cr_assert_not_null(mkdtemp(s_dir));
    kvt_trig_cfg_t cfg = {.seed = 5,
                          .name = "worker_stop",
                          .nranks = 1,
                          .dev = {.bandwidth = 25000000000ull,
                                  .planes = PLANES,
                                  .blocks = 32,
                                  .block_bytes = BS * TOKB},
                          .pool_bytes = 16ull * BPC * PLANES * BS * TOKB,
                          .agg_timeout_ns = 1000000000ull,
                          .wa = {.ns = 7, .block_size = BS, .chunk_size = CS},
                          .disk_dir = s_dir};
    kvt_trig_up(&R, &cfg);
}

static void s_rmtree(const char *dir)
{
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

//  Waits (real time, at most 10 s) until the disk holds n stalled writes.
static bool s_wait_stalled(kvt_disk_t *disk, uint32_t n)
{
    for (int i = 0; i < 10000; i++) {
        if (kvt_disk_stalled(disk) == n)
            return true;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return false;
}

Test(worker_stop, a_stop_waits_for_the_disk_write_its_save_queued, .timeout = 60)
{
    s_up();
    static const uint32_t src[BPC] = {3, 9, 1, 20};
    for (uint32_t b = 0; b < BPC; b++)
        for (uint32_t p = 0; p < PLANES; p++)
            kvt_oracle_fill(kvt_gpu_plane_ptr(R.gpu[0], p, 0, src[b]), BS * TOKB, K(1), b, p, 0);
    kvt_disk_t *disk = kvt_storage_disk(R.st[0]);
    cr_assert_not_null(disk);
    kvt_disk_stall(disk, KVT_DISK_STALL_UNTIL_FLUSH);

    kvt_hash_t keys[1] = {K(1)};
    kvt_msg_t m;
    memset(&m, 0, sizeof m);
    m.kind = KVT_MSG_SAVE_SPEC;
    m.u.save_spec = (kvt_save_spec_t){.op = {1, 1},
                                      .start = 0,
                                      .end = CS,
                                      .keys = keys,
                                      .nkeys = 1,
                                      .blocks = (uint32_t *)src,
                                      .nblocks = BPC};
    cr_assert_eq(kvt_system_post(R.sys, R.w[0], &m), 0);
    kvt_trig_settle(&R);
    cr_assert_eq(kvt_trig_probe.nverdicts, 1, "the save settled");
    cr_assert(kvt_trig_probe.verdicts[0].ok);

    //  The write-through is taken by an I/O thread and held, with the pool
    //  lease it reads through.
    cr_assert(s_wait_stalled(disk, 1), "the disk write was never taken");
    kvt_storage_stats_t st;
    kvt_storage_stats(R.st[0], &st);
    cr_assert_eq(st.writes_queued, 1);
    cr_assert_eq(st.disk.puts, 0, "held: not written yet");
    cr_assert_eq(st.pool.leases_active, 1, "the disk writer's lease on the pool object");

    //  The worker stops (its shutdown path) with the write in flight: the
    //  stop waits for it, so nothing of the tier is left in flight after.
    cr_assert_eq(kvt_sim_crash(R.sys, R.w[0]), 0);
    uint32_t held = kvt_disk_stalled(disk);
    kvt_storage_stats(R.st[0], &st);
    kvt_disk_stall(disk, KVT_DISK_STALL_OFF); //  a missing flush must not hang the test
    cr_assert_eq(held, 0, "the stop returned with its disk write still held");
    cr_assert_eq(st.disk.puts, 1, "the stop returned before the write finished");
    cr_assert_eq(st.disk.objects_writing, 0);
    cr_assert_eq(st.pool.leases_active, 0, "the writer's pool lease outlived the worker");
    kvt_trig_down(&R);
    s_rmtree(s_dir);
}

//  The hook itself: HOLD keeps a write until turned off, whatever flushes
//  in between would need, and a destroy ends it.
Test(worker_stop, disk_stall_hold_keeps_a_write_until_released, .timeout = 60)
{
    snprintf(s_dir, sizeof s_dir, "/tmp/kvt_wstop_%d_XXXXXX", (int)getpid());
    cr_assert_not_null(mkdtemp(s_dir));
    kvt_disk_config_t cfg;
    kvt_disk_config_defaults(&cfg);
    cfg.dir = s_dir;
    cfg.capacity_bytes = 1u << 20;
    cfg.log = kvt_trig_quiet;
    char err[256];
    kvt_disk_t *disk = kvt_disk_new(&cfg, err, sizeof err);
    cr_assert_not_null(disk, "%s", err);
    kvt_disk_stall(disk, KVT_DISK_STALL_HOLD);
    uint8_t buf[256];
    memset(buf, 7, sizeof buf);
    cr_assert_eq(kvt_disk_put_copy(disk, 1, K(1), KVT_OBJ_KV, buf, sizeof buf), KVT_STORE_OK);
    cr_assert(s_wait_stalled(disk, 1));
    kvt_disk_stats_t ds;
    kvt_disk_stats(disk, &ds);
    cr_assert_eq(ds.puts, 0);
    cr_assert_eq(ds.objects_writing, 1);
    kvt_disk_stall(disk, KVT_DISK_STALL_OFF);
    kvt_disk_flush(disk);
    kvt_disk_stats(disk, &ds);
    cr_assert_eq(ds.puts, 1);
    cr_assert_eq(kvt_disk_stalled(disk), 0);
    //  A destroy ends a stall: a held write finishes, nothing hangs.
    kvt_disk_stall(disk, KVT_DISK_STALL_HOLD);
    cr_assert_eq(kvt_disk_put_copy(disk, 1, K(2), KVT_OBJ_KV, buf, sizeof buf), KVT_STORE_OK);
    cr_assert(s_wait_stalled(disk, 1));
    kvt_disk_destroy(&disk);
    disk = kvt_disk_new(&cfg, err, sizeof err);
    cr_assert_not_null(disk, "%s", err);
    kvt_disk_stats(disk, &ds);
    cr_assert_eq(ds.rescanned, 2, "both writes are on disk after the destroy");
    kvt_disk_destroy(&disk);
    s_rmtree(s_dir);
}
