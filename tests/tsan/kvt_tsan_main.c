/*  kvt_tsan_main.c — the test runner of ThreadSanitizer builds, in place of
    Criterion's.

    Criterion 2.4.1 cannot start under TSan: BoxFort maps its inheritable
    shared arena with MAP_FIXED at a random address in [0x2000'0000'0000,
    0x6000'0000'0000), which TSan has reserved, so the runner crashes or
    aborts with "Could not initialize inheritable arena". CMake therefore
    builds TSan test binaries against the headers in tests/tsan/criterion
    and this main instead of libcriterion; the test files do not change.

    Same shape as Criterion: every test, and every parameter of a
    parameterized test, runs in its own forked process (suite init, test
    init, body, test fini, suite fini) under its timeout; a fatal assertion
    jumps to the fini; the runner prints one verdict line per test and
    Criterion's Synthesis line, and exits 1 if any test failed.
    Options: --jobs N (default 1), --filter 'suite/name-glob', --list;
    --color, --verbose and other Criterion options are accepted and ignored.

    Test process exit status: 0 passed, 1 a check failed, KVT_CR_SKIPPED
    skipped; anything else (TSan's 66 after a report, a test's own exit) is
    a failure, death by a signal a crash, and a kill at the timeout "Timed
    out". TSan catches SIGSEGV/SIGBUS itself: such a crash prints TSan's
    stack and ends as status 66, a failure. */
#include <criterion/criterion.h>

#include <errno.h>
#include <fnmatch.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KVT_CR_SKIPPED 77 //  exit status of a skipped test (automake's)

//  libzmq is not instrumented: its queues hand message buffers between
//  threads with atomics TSan cannot see, so the allocations and copies it
//  makes (called_from_lib) are left out of race detection. What kvtier code
//  itself reads and writes stays checked.
const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void)
{
    return "called_from_lib:libzmq.so\n";
}

// ----------------------------------------------------- registration -----

static kvt_cr_test_t *s_tests;                  //  registered tests, in file order
static kvt_cr_test_t **s_tests_tail = &s_tests; //  where the next one goes
static kvt_cr_suite_t *s_suites;                //  TestSuite declarations

void kvt_cr_add_test(kvt_cr_test_t *test)
{
    *s_tests_tail = test;
    s_tests_tail = &test->next;
}

void kvt_cr_add_suite(kvt_cr_suite_t *suite)
{
    suite->next = s_suites;
    s_suites = suite;
}

void *cr_malloc(size_t size)
{
    return malloc(size);
}

void *cr_calloc(size_t nmemb, size_t size)
{
    return calloc(nmemb, size);
}

void *cr_realloc(void *ptr, size_t size)
{
    return realloc(ptr, size);
}

void cr_free(void *ptr)
{
    free(ptr);
}

// ------------------------------------------------- the test process -----

static jmp_buf s_abort;         //  back to the fini after a fatal failure or a skip
static pthread_t s_test_thread; //  the thread that runs the body (jumps only there)
static atomic_int s_failed;     //  a check failed in this test process (any thread)
static atomic_int s_skipped;    //  the test called cr_skip_test (any thread)

//  Formats a message whose format carries the macros' one-character prefix;
//  false if the caller gave none.
static bool s_format(char *buf, size_t size, const char *fmt, va_list ap)
{
    vsnprintf(buf, size, fmt, ap);
    memmove(buf, buf + 1, strlen(buf)); //  drop the prefix, keep the NUL
    return buf[0] != '\0';
}

//  Ends the test after a fatal failure or a skip: on the test's own thread
//  by jumping to its fini, on any other thread by leaving at once.
static _Noreturn void s_abort_test(void)
{
    if (pthread_equal(pthread_self(), s_test_thread))
        longjmp(s_abort, 1);
    fflush(NULL);
    _exit(s_skipped ? KVT_CR_SKIPPED : 1);
}

static void s_report(bool fatal, const char *file, int line, const char *what, const char *msg)
{
    fprintf(stderr, "[----] %s:%d: Assertion Failed\n[----]   %s\n", file, line, msg ? msg : what);
    s_failed = 1;
    if (fatal)
        s_abort_test();
}

void kvt_cr_fail(bool fatal, const char *file, int line, const char *what, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    bool given = s_format(msg, sizeof msg, fmt, ap);
    va_end(ap);
    s_report(fatal, file, line, what, given ? msg : NULL);
}

void kvt_cr_str(bool fatal, bool want_equal, const char *file, int line, const char *what,
                const char *a, const char *b, const char *fmt, ...)
{
    if ((strcmp(a, b) == 0) == want_equal)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    bool given = s_format(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!given)
        snprintf(msg, sizeof msg, "%s: actual=`%s` expected=`%s`.", what, a, b);
    s_report(fatal, file, line, what, msg);
}

void kvt_cr_skip(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    if (s_format(msg, sizeof msg, fmt, ap))
        fprintf(stderr, "[----] Skipped: %s\n", msg);
    va_end(ap);
    s_skipped = 1;
    s_abort_test();
}

void kvt_cr_log(const char *prefix, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s%s\n", prefix, msg);
}

static const kvt_cr_suite_t *s_suite_of(const kvt_cr_test_t *test)
{
    for (const kvt_cr_suite_t *s = s_suites; s; s = s->next)
        if (strcmp(s->name, test->suite) == 0)
            return s;
    return NULL;
}

static const kvt_cr_test_t *s_test;   //  the test this process runs
static const kvt_cr_suite_t *s_suite; //  its TestSuite, or NULL
static void *s_param;                 //  its parameter (parameterized tests)

static void s_setup_and_body(void)
{
    if (s_suite && s_suite->opts.init)
        s_suite->opts.init();
    if (s_test->opts.init)
        s_test->opts.init();
    if (s_test->pfn)
        s_test->pfn(s_param);
    else
        s_test->fn();
}

static void s_teardown(void)
{
    if (s_test->opts.fini)
        s_test->opts.fini();
    if (s_suite && s_suite->opts.fini)
        s_suite->opts.fini();
}

//  The forked test process: never returns. exit (not _exit) lets atexit
//  handlers run: czmq reports dangling sockets, TSan sets its exit status.
static _Noreturn void s_child(const kvt_cr_test_t *test, void *param)
{
    s_test = test;
    s_suite = s_suite_of(test);
    s_param = param;
    s_test_thread = pthread_self();
    if (setjmp(s_abort) == 0)
        s_setup_and_body();
    if (setjmp(s_abort) == 0)
        s_teardown();
    exit(s_skipped ? KVT_CR_SKIPPED : s_failed ? 1 : 0);
}

// ------------------------------------------------------- the runner -----

typedef struct {
    pid_t pid;                             //  test process, 0 = free slot
    const kvt_cr_test_t *test;             //  what it runs
    long param;                            //  parameter index, -1 = plain test
    struct criterion_test_extra_data opts; //  the test's options merged with its suite's
    double start;                          //  monotonic seconds at fork
    bool timed_out;                        //  killed at its timeout
} s_slot_t;

typedef struct {
    int tested;   //  tests that ran (skipped ones are not counted, as in Criterion)
    int passing;  //  passed
    int failing;  //  failed, crashed or timed out
    int crashing; //  died of an unexpected signal
} s_stats_t;

static volatile sig_atomic_t s_interrupted; //  SIGINT/SIGTERM: kill the tests, stop

static void s_on_signal(int sig)
{
    s_interrupted = sig;
}

static double s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static struct criterion_test_extra_data s_merged_opts(const kvt_cr_test_t *test)
{
    struct criterion_test_extra_data o = test->opts;
    const kvt_cr_suite_t *suite = s_suite_of(test);
    if (suite) {
        o.disabled = o.disabled || suite->opts.disabled;
        o.timeout = o.timeout > 0 ? o.timeout : suite->opts.timeout;
        o.signal = o.signal ? o.signal : suite->opts.signal;
        o.exit_code = o.exit_code ? o.exit_code : suite->opts.exit_code;
    }
    return o;
}

static void s_verdict(const s_slot_t *slot, int status, s_stats_t *stats)
{
    char id[256];
    if (slot->param >= 0)
        snprintf(id, sizeof id, "%s::%s[%ld]", slot->test->suite, slot->test->name, slot->param);
    else
        snprintf(id, sizeof id, "%s::%s", slot->test->suite, slot->test->name);
    double secs = s_now() - slot->start;
    bool exited = WIFEXITED(status), signaled = WIFSIGNALED(status);
    int code = exited ? WEXITSTATUS(status) : 0, sig = signaled ? WTERMSIG(status) : 0;

    if (exited && code == KVT_CR_SKIPPED && !slot->opts.exit_code) {
        fprintf(stderr, "[SKIP] %s\n", id);
        return;
    }
    stats->tested++;
    bool pass;
    if (slot->timed_out) {
        fprintf(stderr, "[FAIL] %s: Timed out. (%.2fs)\n", id, secs);
        pass = false;
    } else if (slot->opts.signal || slot->opts.exit_code) {
        pass = slot->opts.signal ? signaled && sig == slot->opts.signal
                                 : exited && code == slot->opts.exit_code;
        if (!pass)
            fprintf(stderr, "[FAIL] %s: expected %s %d, got %s %d\n", id,
                    slot->opts.signal ? "signal" : "exit status",
                    slot->opts.signal ? slot->opts.signal : slot->opts.exit_code,
                    signaled ? "signal" : "exit status", signaled ? sig : code);
    } else if (signaled) {
        fprintf(stderr, "[FAIL] %s: CRASH! (signal %d)\n", id, sig);
        stats->crashing++;
        pass = false;
    } else {
        pass = code == 0;
        if (code == 1)
            fprintf(stderr, "[FAIL] %s: (%.2fs)\n", id, secs);
        else if (code != 0)
            fprintf(stderr, "[FAIL] %s: exit status %d (%.2fs)\n", id, code, secs);
    }
    if (pass)
        fprintf(stderr, "[PASS] %s: (%.2fs)\n", id, secs);
    pass ? stats->passing++ : stats->failing++;
}

//  Waits until one test process ends (killing those past their timeout)
//  and reports it; frees its slot.
static void s_reap_one(s_slot_t *slots, int nslots, s_stats_t *stats)
{
    for (;;) {
        int status = 0;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid < 0 && errno != EINTR) {
            perror("waitpid");
            exit(2);
        }
        for (int i = 0; pid > 0 && i < nslots; i++)
            if (slots[i].pid == pid) {
                s_verdict(&slots[i], status, stats);
                slots[i].pid = 0;
                return;
            }
        double now = s_now();
        for (int i = 0; i < nslots; i++) {
            s_slot_t *s = &slots[i];
            if (s->pid > 0 && s_interrupted)
                kill(-s->pid, SIGKILL);
            if (s->pid > 0 && !s->timed_out && s->opts.timeout > 0 &&
                now - s->start > s->opts.timeout) {
                kill(-s->pid, SIGKILL); //  its process group: helpers it forked too
                s->timed_out = true;
            }
        }
        if (pid == 0)
            nanosleep(&(struct timespec){.tv_nsec = 5000000}, NULL);
    }
}

static int s_running(const s_slot_t *slots, int nslots)
{
    int n = 0;
    for (int i = 0; i < nslots; i++)
        n += slots[i].pid > 0;
    return n;
}

//  Forks one test process into a free slot, first waiting for one to free.
static void s_launch(s_slot_t *slots, int nslots, s_stats_t *stats, const kvt_cr_test_t *test,
                     long param, void *arg)
{
    while (s_running(slots, nslots) == nslots)
        s_reap_one(slots, nslots, stats);
    s_slot_t *slot = slots;
    while (slot->pid > 0)
        slot++;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        exit(2);
    }
    if (pid == 0) {
        setpgid(0, 0);
        sigaction(SIGINT, &(struct sigaction){.sa_handler = SIG_DFL}, NULL);
        sigaction(SIGTERM, &(struct sigaction){.sa_handler = SIG_DFL}, NULL);
        s_child(test, arg);
    }
    setpgid(pid, pid); //  also here: whichever runs first, the group exists before a kill
    *slot = (s_slot_t){
        .pid = pid, .test = test, .param = param, .opts = s_merged_opts(test), .start = s_now()};
}

static int s_usage(const char *prog)
{
    fprintf(stderr, "usage: %s [--jobs N] [--filter 'suite/name-glob'] [--list]\n", prog);
    return 2;
}

int main(int argc, char **argv)
{
    int jobs = 1;
    const char *filter = NULL;
    bool list = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--jobs") == 0 || strcmp(a, "-j") == 0) {
            if (++i == argc)
                return s_usage(argv[0]);
            jobs = atoi(argv[i]);
        } else if (strncmp(a, "--jobs=", 7) == 0)
            jobs = atoi(a + 7);
        else if (strncmp(a, "-j", 2) == 0)
            jobs = atoi(a + 2);
        else if (strcmp(a, "--filter") == 0) {
            if (++i == argc)
                return s_usage(argv[0]);
            filter = argv[i];
        } else if (strncmp(a, "--filter=", 9) == 0)
            filter = a + 9;
        else if (strcmp(a, "--list") == 0)
            list = true;
        else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
            return s_usage(argv[0]);
        //  anything else (--color=..., --verbose, ...) is ignored
    }
    if (jobs < 1)
        jobs = 1;

    sigaction(SIGINT, &(struct sigaction){.sa_handler = s_on_signal}, NULL);
    sigaction(SIGTERM, &(struct sigaction){.sa_handler = s_on_signal}, NULL);
    s_slot_t *slots = calloc((size_t)jobs, sizeof *slots);
    s_stats_t stats = {0};
    if (!slots) {
        perror("calloc");
        return 2;
    }
    for (const kvt_cr_test_t *t = s_tests; t && !s_interrupted; t = t->next) {
        char path[256];
        snprintf(path, sizeof path, "%s/%s", t->suite, t->name);
        if (filter && fnmatch(filter, path, 0) != 0)
            continue;
        if (list) {
            printf("%s\n", path);
            continue;
        }
        if (s_merged_opts(t).disabled) {
            fprintf(stderr, "[SKIP] %s::%s: Test is disabled\n", t->suite, t->name);
            continue;
        }
        if (!t->pfn) {
            s_launch(slots, jobs, &stats, t, -1, NULL);
            continue;
        }
        struct criterion_test_params p = t->params();
        for (size_t k = 0; k < p.length && !s_interrupted; k++)
            s_launch(slots, jobs, &stats, t, (long)k, (char *)p.params + k * p.size);
        if (p.cleanup)
            p.cleanup(&p); //  the test processes hold their own copies
    }
    while (s_running(slots, jobs) > 0)
        s_reap_one(slots, jobs, &stats);
    free(slots);
    if (list)
        return 0;
    if (s_interrupted) {
        fprintf(stderr, "[====] interrupted\n");
        return 128 + s_interrupted;
    }
    fprintf(stderr, "[====] Synthesis: Tested: %d | Passing: %d | Failing: %d | Crashing: %d \n",
            stats.tested, stats.passing, stats.failing, stats.crashing);
    return stats.failing ? 1 : 0;
}
