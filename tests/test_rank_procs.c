/*  Ranks as processes: `kvtier replay --ranks-as-processes` against the
    same replay with ranks as threads, a rank process killed mid-run, the
    replay itself stopped by SIGTERM, and `kvtier rank` losing its engine.
    Each run gets a private TMPDIR, so whatever a run leaves behind (its
    socket directory, a rank process still running with that path in its
    command line) is found and named. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <czmq.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KVTIER KVT_BINARY_DIR "/kvtier"

//  A small workload that still restores from the CPU tier: a 2 MiB HBM
//  pool (1024 blocks) under the synthetic sessions.
#define SMALL "--byte-scale 1 --limit 24 --hbm-pool 2MiB --cpu-pool 32MiB --log-level 0"

static uint64_t s_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void s_sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

//  A private TMPDIR for one run: /tmp/kvt-rp-<pid>-<tag>.
static void s_tmpdir(char *dir, size_t len, const char *tag)
{
    snprintf(dir, len, "/tmp/kvt-rp-%d-%s", (int)getpid(), tag);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
    cr_assert_eq(mkdir(dir, 0700), 0, "mkdir %s: %s", dir, strerror(errno));
}

//  Entries in dir (recursively counted as one per top-level entry), and
//  the first one's name.
static int s_entries(const char *dir, char *first, size_t len)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "%s: %s", dir, strerror(errno));
    int n = 0;
    struct dirent *e;
    first[0] = 0;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (n++ == 0)
            snprintf(first, len, "%s", e->d_name);
    }
    closedir(d);
    return n;
}

//  Processes whose command line mentions `needle` (our rank processes name
//  their socket directory, under the run's private TMPDIR); the first pid.
static int s_procs_naming(const char *needle, int *first)
{
    DIR *d = opendir("/proc");
    cr_assert_not_null(d);
    int n = 0;
    struct dirent *e;
    *first = 0;
    while ((e = readdir(d)) != NULL) {
        int pid = atoi(e->d_name);
        if (pid <= 0 || pid == getpid())
            continue;
        char path[64], buf[4096];
        snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
        int fd = open(path, O_RDONLY);
        if (fd < 0)
            continue;
        ssize_t got = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (got <= 0)
            continue;
        for (ssize_t i = 0; i < got; i++)
            if (buf[i] == 0)
                buf[i] = ' ';
        buf[got] = 0;
        if (strstr(buf, needle)) {
            if (n++ == 0)
                *first = pid;
        }
    }
    closedir(d);
    return n;
}

//  Children of `parent` (from /proc/<pid>/stat); fills pids, returns how many.
static int s_children(int parent, int *pids, int max)
{
    DIR *d = opendir("/proc");
    cr_assert_not_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int pid = atoi(e->d_name);
        if (pid <= 0)
            continue;
        char path[64], buf[512];
        snprintf(path, sizeof path, "/proc/%d/stat", pid);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t got = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[got] = 0;
        char *rp = strrchr(buf, ')');
        int ppid = 0;
        char state;
        if (rp && sscanf(rp + 1, " %c %d", &state, &ppid) == 2 && ppid == parent && n < max)
            pids[n++] = pid;
    }
    closedir(d);
    return n;
}

//  Whether process `pid`'s command line has the argument pair `a b`.
static bool s_has_args(int pid, const char *a, const char *b)
{
    char path[64], buf[4096];
    snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return false;
    ssize_t got = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (got <= 0)
        return false;
    buf[got] = 0;
    for (ssize_t i = 0; i + 1 < got;) {
        const char *arg = buf + i;
        size_t l = strlen(arg);
        if (!strcmp(arg, a) && i + (ssize_t)l + 1 < got && !strcmp(arg + l + 1, b))
            return true;
        i += (ssize_t)l + 1;
    }
    return false;
}

//  Starts `kvtier ARGS` (split on spaces) with TMPDIR=tmpdir, its stdout and
//  stderr into files; returns its pid.
static int s_start(const char *tmpdir, const char *args, const char *out, const char *err)
{
    char buf[2048];
    snprintf(buf, sizeof buf, "%s", args);
    char *argv[64];
    int n = 0;
    argv[n++] = (char *)KVTIER;
    for (char *save = NULL, *tok = strtok_r(buf, " ", &save); tok && n < 63;
         tok = strtok_r(NULL, " ", &save))
        argv[n++] = tok;
    argv[n] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        int fo = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int fe = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fo < 0 || fe < 0)
            _exit(126);
        dup2(fo, 1);
        dup2(fe, 2);
        if (tmpdir)
            setenv("TMPDIR", tmpdir, 1);
        execv(KVTIER, argv);
        _exit(127);
    }
    return (int)pid;
}

//  Waits up to ms for pid; returns its wait status, or -1 (then it is
//  killed and reaped).
static int s_wait(int pid, unsigned ms)
{
    uint64_t end = s_ms() + ms;
    int st;
    while (s_ms() < end) {
        pid_t got = waitpid(pid, &st, WNOHANG);
        if (got == pid)
            return st;
        s_sleep_ms(10);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1;
}

static void s_slurp(const char *path, char *buf, size_t size)
{
    buf[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    size_t n = fread(buf, 1, size - 1, f);
    buf[n] = 0;
    fclose(f);
}

//  The replay's JSON report: recomputed_share, wrong_resumes, cpu hit tokens.
static void s_report(const char *path, double *share, long long *wrong, long long *cpu)
{
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    cr_assert_not_null(root, "%s: %s", path, je.text);
    *share = json_real_value(json_object_get(root, "recomputed_share"));
    *wrong = json_integer_value(json_object_get(root, "wrong_resumes"));
    *cpu = json_integer_value(json_object_get(json_object_get(root, "hit_tokens"), "cpu"));
    json_decref(root);
}

//  Nothing of the run is left: no directory under its TMPDIR, no process
//  naming it.
static void s_assert_nothing_left(const char *tmpdir)
{
    char first[256];
    int left = s_entries(tmpdir, first, sizeof first);
    cr_assert_eq(left, 0, "%d entries left under %s (first: %s)", left, tmpdir, first);
    int pid;
    int procs = s_procs_naming(tmpdir, &pid);
    cr_assert_eq(procs, 0, "%d processes still name %s (first: pid %d)", procs, tmpdir, pid);
}

static void s_rm(const char *dir)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

//  After every test, passed or failed: whatever a failed run left (a rank
//  process naming this test's directories, the directories and report
//  files) is removed, so a red test does not leave the next one a mess.
static void s_cleanup(void)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "/tmp/kvt-rp-%d-", (int)getpid());
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        int pid = atoi(e->d_name);
        if (pid <= 0 || pid == getpid())
            continue;
        char path[64], buf[4096];
        snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
        int fd = open(path, O_RDONLY);
        if (fd < 0)
            continue;
        ssize_t got = read(fd, buf, sizeof buf - 1);
        close(fd);
        for (ssize_t i = 0; i < got; i++)
            if (buf[i] == 0)
                buf[i] = ' ';
        buf[got > 0 ? got : 0] = 0;
        if (strstr(buf, prefix) && kill(pid, SIGKILL) == 0)
            waitpid(pid, NULL, 0); //  reaps it when it is ours
    }
    if (d)
        closedir(d);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s*", prefix);
    if (system(cmd) != 0)
        fprintf(stderr, "cleanup: '%s' failed\n", cmd);
}

TestSuite(rank_procs, .fini = s_cleanup);

//  The same replay, ranks as threads and ranks as processes (2 ranks, ipc):
//  the same recomputed share, no wrong resume, and nothing left behind.
Test(rank_procs, two_rank_replay_as_processes_matches_threads, .timeout = 120)
{
    char tmp[128], out[200], err[200], jt[200], jp[200], args[1024], buf[8192];
    s_tmpdir(tmp, sizeof tmp, "same");
    snprintf(out, sizeof out, "%s.out", tmp);
    snprintf(err, sizeof err, "%s.err", tmp);
    snprintf(jt, sizeof jt, "%s-threads.json", tmp);
    snprintf(jp, sizeof jp, "%s-procs.json", tmp);

    snprintf(args, sizeof args, "replay --driver live --tp 2 " SMALL " --quiet --json %s", jt);
    int st = s_wait(s_start(tmp, args, out, err), 60000);
    s_slurp(err, buf, sizeof buf);
    cr_assert(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "threads: status %d: %s", st, buf);
    snprintf(args, sizeof args, "replay --ranks-as-processes --tp 2 " SMALL " --quiet --json %s",
             jp);
    st = s_wait(s_start(tmp, args, out, err), 60000);
    s_slurp(err, buf, sizeof buf);
    cr_assert(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "processes: status %d: %s", st,
              buf);

    double share_t, share_p;
    long long wrong_t, wrong_p, cpu_t, cpu_p;
    s_report(jt, &share_t, &wrong_t, &cpu_t);
    s_report(jp, &share_p, &wrong_p, &cpu_p);
    cr_assert_gt(cpu_t, 0, "the workload must restore from the CPU tier");
    cr_assert_eq(wrong_t, 0);
    cr_assert_eq(wrong_p, 0);
    cr_assert(fabs(share_p - share_t) < 1e-9, "recomputed share: processes %f, threads %f", share_p,
              share_t);
    cr_assert_eq(cpu_p, cpu_t);
    s_assert_nothing_left(tmp);
    unlink(out);
    unlink(err);
    unlink(jt);
    unlink(jp);
    s_rm(tmp);
}

//  state_loads.completed of a JSON report.
static long long s_state_loads(const char *path)
{
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    cr_assert_not_null(root, "%s: %s", path, je.text);
    long long n =
        json_integer_value(json_object_get(json_object_get(root, "state_loads"), "completed"));
    json_decref(root);
    return n;
}

//  runner.r's counter `name` summed over the ranks of a JSON report.
static long long s_runner_sum(const char *path, const char *name)
{
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    cr_assert_not_null(root, "%s: %s", path, je.text);
    json_t *counters = json_object_get(root, "counters");
    long long sum = 0;
    const char *actor;
    json_t *v;
    json_object_foreach(counters, actor, v)
    {
        if (strncmp(actor, "runner.", 7) == 0)
            sum += json_integer_value(json_object_get(v, name));
    }
    json_decref(root);
    return sum;
}

//  A hybrid model's ranks as processes: each rank process gets the state
//  geometry (state bytes, the slot and checkpoint pools), the namespace and
//  the disk layout id, and the replay is the threads' one: the same
//  recomputed share, every restored state checked (from an HBM checkpoint or
//  from the tier's image), no wrong resume. A disk directory the threads
//  wrote opens in the rank processes (same namespace and layout id in its
//  manifest): the run's dtype is not among the settings a rank process is
//  given, so the namespace and layout id its own settings derive differ
//  from the engine's, and only the engine's, passed on, open it.
Test(rank_procs, hybrid_replay_as_processes_matches_threads, .timeout = 180)
{
    char tmp[128], out[200], err[200], jt[200], jp[200], dt[200], dp[200], args[1024], buf[8192];
    s_tmpdir(tmp, sizeof tmp, "hybrid");
    snprintf(out, sizeof out, "%s.out", tmp);
    snprintf(err, sizeof err, "%s.err", tmp);
    snprintf(jt, sizeof jt, "%s-threads.json", tmp);
    snprintf(jp, sizeof jp, "%s-procs.json", tmp);
    snprintf(dt, sizeof dt, "%s-disk-threads", tmp);
    snprintf(dp, sizeof dp, "%s-disk-procs", tmp);
#define HYBRID                                                                                \
    "--model qwen3-next-like --dtype fp16 --tp 2 --limit 100 --byte-scale 1 --hbm-pool 8MiB " \
    "--cpu-pool 64MiB --disk-pool 4GiB --max-running 8 --log-level 0 --quiet"
    snprintf(args, sizeof args, "replay --driver live " HYBRID " --disk-dir %s --json %s", dt, jt);
    int st = s_wait(s_start(tmp, args, out, err), 90000);
    s_slurp(err, buf, sizeof buf);
    cr_assert(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "threads: status %d: %s", st, buf);
    snprintf(args, sizeof args, "replay --ranks-as-processes " HYBRID " --disk-dir %s --json %s",
             dp, jp);
    st = s_wait(s_start(tmp, args, out, err), 90000);
    s_slurp(err, buf, sizeof buf);
    cr_assert(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "processes: status %d: %s", st,
              buf);
    double share_t, share_p;
    long long wrong_t, wrong_p, cpu_t, cpu_p;
    s_report(jt, &share_t, &wrong_t, &cpu_t);
    s_report(jp, &share_p, &wrong_p, &cpu_p);
    cr_assert_eq(wrong_t, 0);
    cr_assert_eq(wrong_p, 0);
    cr_assert(fabs(share_p - share_t) < 1e-9, "recomputed share: processes %f, threads %f", share_p,
              share_t);
    long long ver_t = s_runner_sum(jt, "runner.states_verified");
    long long ver_p = s_runner_sum(jp, "runner.states_verified");
    cr_assert_gt(ver_p, 0, "no state was restored and checked in the rank processes");
    cr_assert_eq(ver_p, ver_t);
    cr_assert_eq(s_runner_sum(jp, "runner.states_wrong"), 0);
    //  The 8 MiB budget (the 8 state slots first) holds a few dozen HBM
    //  checkpoints: states come back from the tier's images too, through the
    //  rank processes' state lanes.
    long long loads_t = s_state_loads(jt), loads_p = s_state_loads(jp);
    cr_assert_gt(loads_p, 0, "no state image was loaded from the tier");
    cr_assert_eq(loads_p, loads_t);
    //  The rank processes open the directories the threads wrote.
    snprintf(args, sizeof args, "replay --ranks-as-processes " HYBRID " --disk-dir %s --json %s",
             dt, jp);
    st = s_wait(s_start(tmp, args, out, err), 90000);
    s_slurp(err, buf, sizeof buf);
    cr_assert(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "processes on the threads' disk: status %d: %s", st, buf);
#undef HYBRID
    s_assert_nothing_left(tmp);
    unlink(out);
    unlink(err);
    unlink(jt);
    unlink(jp);
    s_rm(dt);
    s_rm(dp);
    s_rm(tmp);
}

//  The same over tcp:// on the loopback (topology actor i at PORT + i):
//  again the threads' recomputed share. The port range is picked from the
//  pid, so two test runs at once do not collide.
Test(rank_procs, two_rank_replay_over_tcp_matches_threads, .timeout = 120)
{
    char tmp[128], out[200], err[200], jt[200], jp[200], args[1024], buf[8192];
    s_tmpdir(tmp, sizeof tmp, "tcp");
    snprintf(out, sizeof out, "%s.out", tmp);
    snprintf(err, sizeof err, "%s.err", tmp);
    snprintf(jt, sizeof jt, "%s-threads.json", tmp);
    snprintf(jp, sizeof jp, "%s-procs.json", tmp);
    snprintf(args, sizeof args, "replay --driver live --tp 2 " SMALL " --quiet --json %s", jt);
    int st = s_wait(s_start(tmp, args, out, err), 60000);
    s_slurp(err, buf, sizeof buf);
    cr_assert(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "threads: status %d: %s", st, buf);
    int port = 20000 + (int)(getpid() % 400) * 100;
    snprintf(args, sizeof args,
             "replay --ranks-as-processes --rank-endpoint tcp://127.0.0.1:%d --tp 2 " SMALL
             " --quiet --json %s",
             port, jp);
    st = s_wait(s_start(tmp, args, out, err), 60000);
    s_slurp(err, buf, sizeof buf);
    cr_assert(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "tcp: status %d: %s", st, buf);
    double share_t, share_p;
    long long wrong_t, wrong_p, cpu_t, cpu_p;
    s_report(jt, &share_t, &wrong_t, &cpu_t);
    s_report(jp, &share_p, &wrong_p, &cpu_p);
    cr_assert_eq(wrong_p, 0);
    cr_assert(fabs(share_p - share_t) < 1e-9, "recomputed share: tcp %f, threads %f", share_p,
              share_t);
    char needle[64];
    snprintf(needle, sizeof needle, "tcp://127.0.0.1:%d", port);
    int pid;
    cr_assert_eq(s_procs_naming(needle, &pid), 0, "a rank process (pid %d) is left", pid);
    s_assert_nothing_left(tmp);
    unlink(out);
    unlink(err);
    unlink(jt);
    unlink(jp);
    s_rm(tmp);
}

//  Starts a long replay with ranks as processes, waits until both rank
//  processes run; returns the replay's pid and the ranks' pids.
static int s_start_long(const char *tmp, const char *out, const char *err, int rank_pid[2])
{
    //  Long enough to be killed mid-run (thousands of steps).
    int pid = s_start(tmp, "replay --ranks-as-processes --tp 2 --limit 4000 --log-level 0 --quiet",
                      out, err);
    uint64_t end = s_ms() + 20000;
    rank_pid[0] = rank_pid[1] = 0;
    while (s_ms() < end) {
        int kids[8];
        int n = s_children(pid, kids, 8);
        for (int i = 0; i < n; i++)
            for (int r = 0; r < 2; r++)
                if (s_has_args(kids[i], "--rank", r ? "1" : "0"))
                    rank_pid[r] = kids[i];
        if (rank_pid[0] && rank_pid[1])
            break;
        s_sleep_ms(20);
    }
    cr_assert(rank_pid[0] && rank_pid[1], "the rank processes did not start");
    //  Both ranks up: their inboxes are bound (after they set themselves
    //  up, the death signal included) in the run's one directory.
    char sub[256] = "", sock[600];
    struct stat sb;
    bool up = false;
    while (!up && s_ms() < end) {
        if (!sub[0] && s_entries(tmp, sub, sizeof sub) != 1)
            sub[0] = 0;
        up = sub[0] != 0;
        for (int r = 0; up && r < 2; r++) {
            snprintf(sock, sizeof sock, "%s/%s/worker.%d", tmp, sub, r);
            up = stat(sock, &sb) == 0;
        }
        if (!up)
            s_sleep_ms(20);
    }
    cr_assert(up, "the rank processes did not bind their inboxes under %s", tmp);
    s_sleep_ms(300); //  into the run
    int st;
    cr_assert_eq(waitpid(pid, &st, WNOHANG), 0, "the replay ended before the kill");
    return pid;
}

//  A rank process killed mid-run ends the replay in bounded time with an
//  error naming the rank and how it ended; no socket, directory or process
//  of the run is left.
Test(rank_procs, a_killed_rank_fails_the_replay_naming_it_and_leaves_nothing, .timeout = 120)
{
    char tmp[128], out[200], err[200], buf[8192];
    s_tmpdir(tmp, sizeof tmp, "kill");
    snprintf(out, sizeof out, "%s.out", tmp);
    snprintf(err, sizeof err, "%s.err", tmp);
    int ranks[2];
    int pid = s_start_long(tmp, out, err, ranks);
    uint64_t t0 = s_ms();
    cr_assert_eq(kill(ranks[1], SIGKILL), 0);
    int st = s_wait(pid, 10000);
    uint64_t took = s_ms() - t0;
    s_slurp(err, buf, sizeof buf);
    cr_assert_neq(st, -1, "the replay did not end within 10 s of the kill: %s", buf);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d: %s", st, buf);
    cr_assert(took < 6000, "the replay took %llu ms to end", (unsigned long long)took);
    char want[160];
    snprintf(want, sizeof want, "rank 1 (process %d) was killed by signal 9", ranks[1]);
    cr_assert(strstr(buf, want) != NULL, "stderr does not say '%s': %s", want, buf);
    cr_assert(strstr(buf, "FAILED") != NULL, "%s", buf);
    //  Rank 0 was stopped and reaped by the replay.
    cr_assert_eq(kill(ranks[0], 0), -1, "rank 0 (pid %d) is still there", ranks[0]);
    s_assert_nothing_left(tmp);
    unlink(out);
    unlink(err);
    s_rm(tmp);
}

//  The replay stopped by SIGTERM mid-run stops and reaps its rank
//  processes and removes their directory before it exits (failed).
Test(rank_procs, a_replay_stopped_by_sigterm_leaves_nothing, .timeout = 120)
{
    char tmp[128], out[200], err[200], buf[8192];
    s_tmpdir(tmp, sizeof tmp, "term");
    snprintf(out, sizeof out, "%s.out", tmp);
    snprintf(err, sizeof err, "%s.err", tmp);
    int ranks[2];
    int pid = s_start_long(tmp, out, err, ranks);
    cr_assert_eq(kill(pid, SIGTERM), 0);
    int st = s_wait(pid, 15000);
    s_slurp(err, buf, sizeof buf);
    cr_assert_neq(st, -1, "the replay did not end within 15 s of SIGTERM: %s", buf);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d: %s", st, buf);
    cr_assert(strstr(buf, "interrupted by a signal") != NULL, "%s", buf);
    s_assert_nothing_left(tmp);
    unlink(out);
    unlink(err);
    s_rm(tmp);
}

//  The replay itself SIGKILLed (nothing of it can clean up): its rank
//  processes still exit, status 4, saying the engine process is gone, in
//  bounded time. This test process adopts them (a child subreaper) to see
//  how they end; the socket directory is the one thing left (removed here).
Test(rank_procs, rank_processes_exit_when_the_replay_is_killed, .timeout = 120)
{
    char tmp[128], out[200], err[200], buf[8192];
    s_tmpdir(tmp, sizeof tmp, "k9");
    snprintf(out, sizeof out, "%s.out", tmp);
    snprintf(err, sizeof err, "%s.err", tmp);
    cr_assert_eq(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
    int ranks[2];
    int pid = s_start_long(tmp, out, err, ranks);
    cr_assert_eq(kill(pid, SIGKILL), 0);
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    for (int r = 0; r < 2; r++) {
        st = s_wait(ranks[r], 5000);
        cr_assert_neq(st, -1, "rank %d (pid %d) did not exit within 5 s of the replay's death", r,
                      ranks[r]);
        s_slurp(err, buf, sizeof buf);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 4, "rank %d: status %d: %s", r, st, buf);
    }
    char want[96];
    snprintf(want, sizeof want, "the engine process %d is gone", pid);
    cr_assert(strstr(buf, want) != NULL, "stderr does not say '%s': %s", want, buf);
    int left;
    cr_assert_eq(s_procs_naming(tmp, &left), 0, "pid %d is left", left);
    unlink(out);
    unlink(err);
    s_rm(tmp);
}

//  `kvtier rank` exits (status 4, naming why) once its engine's end of the
//  connection closes: a stand-in engine binds the three engine-side inboxes
//  and closes them once the rank is up. No parent pid is given, so only the
//  socket monitor can tell; the rank removes its own sockets.
Test(rank_procs, a_rank_process_exits_when_its_engine_goes_away, .timeout = 60)
{
    char tmp[128], out[200], err[200], ep[256], args[512], buf[8192];
    s_tmpdir(tmp, sizeof tmp, "eng");
    snprintf(out, sizeof out, "%s.out", tmp);
    snprintf(err, sizeof err, "%s.err", tmp);
    const char *names[] = {"engine", "scheduler", "aggregator"};
    zsock_t *inbox[3];
    for (int i = 0; i < 3; i++) {
        inbox[i] = zsock_new(ZMQ_PULL);
        cr_assert_not_null(inbox[i]);
        zsock_set_linger(inbox[i], 0);
        snprintf(ep, sizeof ep, "ipc://%s/%s", tmp, names[i]);
        cr_assert_eq(zsock_bind(inbox[i], "%s", ep), 0, "bind %s", ep);
    }
    snprintf(args, sizeof args,
             "rank --rank 0 --world 1 --engine ipc://%s --cpu-pool 0 --log-level 0", tmp);
    int pid = s_start(NULL, args, out, err);
    char sock[300];
    snprintf(sock, sizeof sock, "%s/worker.0", tmp);
    uint64_t end = s_ms() + 20000;
    struct stat sb;
    while (s_ms() < end && stat(sock, &sb) != 0)
        s_sleep_ms(10);
    cr_assert_eq(stat(sock, &sb), 0, "the rank did not bind %s", sock);
    s_sleep_ms(300); //  its watch connection is up
    int st;
    cr_assert_eq(waitpid(pid, &st, WNOHANG), 0, "the rank exited while its engine was up");
    uint64_t t0 = s_ms();
    for (int i = 0; i < 3; i++) {
        zsock_destroy(&inbox[i]);
        snprintf(sock, sizeof sock, "%s/%s", tmp, names[i]);
        unlink(sock);
    }
    st = s_wait(pid, 8000);
    uint64_t took = s_ms() - t0;
    s_slurp(err, buf, sizeof buf);
    cr_assert_neq(st, -1, "the rank did not exit within 8 s of its engine going away: %s", buf);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 4, "status %d: %s", st, buf);
    cr_assert(strstr(buf, "the engine closed its connection") != NULL, "%s", buf);
    cr_assert(took < 3000, "took %llu ms", (unsigned long long)took);
    s_assert_nothing_left(tmp);
    unlink(out);
    unlink(err);
    s_rm(tmp);
}

//  An engine that is never there: the rank gives up after --connect-timeout.
Test(rank_procs, a_rank_process_gives_up_on_an_engine_it_never_reaches, .timeout = 60)
{
    char tmp[128], out[200], err[200], args[512], buf[8192];
    s_tmpdir(tmp, sizeof tmp, "none");
    snprintf(out, sizeof out, "%s.out", tmp);
    snprintf(err, sizeof err, "%s.err", tmp);
    snprintf(args, sizeof args,
             "rank --rank 1 --world 2 --engine ipc://%s --cpu-pool 0 --connect-timeout 300 "
             "--log-level 0",
             tmp);
    int st = s_wait(s_start(NULL, args, out, err), 10000);
    s_slurp(err, buf, sizeof buf);
    cr_assert(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 4, "status %d: %s", st, buf);
    cr_assert(strstr(buf, "could not reach the engine") != NULL, "%s", buf);
    s_assert_nothing_left(tmp);
    unlink(out);
    unlink(err);
    s_rm(tmp);
}
