/*  test_runtime_live.c — the actor runtime under the LIVE driver: ping-pong
    and fan-out/fan-in over inproc, tcp loopback and ipc between two
    processes; timers; shutdown drain; decode errors and bad frames; init
    failure; rates.

    What actor threads write is read by the test only after
    kvt_system_stop (which joins them), or through atomics. */
#include <criterion/criterion.h>
#include <czmq.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvtier/kvt_actor.h"

#define S_LIMIT_NS (60ull * 1000000000ull) //  kvt_system_run bound: a hang fails, never blocks

static kvt_msg_t s_ping(uint64_t seq)
{
    kvt_msg_t m = {.kind = KVT_MSG_PING};
    m.u.ping.seq = seq;
    return m;
}

static kvt_system_t *s_live(const char *name)
{
    kvt_system_opts_t o = {.driver = KVT_DRIVER_LIVE, .seed = 1, .name = name, .log_level = 0};
    kvt_system_t *sys = kvt_system_new(&o);
    cr_assert_not_null(sys);
    return sys;
}

static double s_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void s_sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

// ------------------------------------------------------ test actors -------

//  pong: echoes every Ping to its sender; Shutdown → exit(code).
static int s_dummy;
static void *s_pong_init(kvt_ctx_t *ctx, void *args)
{
    return &s_dummy;
}
static int s_pong_ping(kvt_ctx_t *ctx, void *self, kvt_aid_t from, kvt_msg_t *msg)
{
    return kvt_ctx_send(ctx, from, msg);
}
static int s_pong_shutdown(kvt_ctx_t *ctx, void *self, kvt_aid_t from, kvt_msg_t *msg)
{
    kvt_ctx_exit(ctx, (int)msg->u.shutdown.code);
    return 0;
}
static const kvt_actor_class_t s_pong_class = {
    .type = "pong",
    .init = s_pong_init,
    .on = {[KVT_MSG_PING] = s_pong_ping, [KVT_MSG_SHUTDOWN] = s_pong_shutdown},
};

//  pinger: on a kick sends Pings seq 1..n to `peer`, `window` unanswered at
//  a time (0 = all at once); checks echoes come back in order; exits 0.
typedef struct {
    const char *peer;    //  actor to ping
    uint32_t n;          //  pings to send
    uint32_t window;     //  pings in flight (0 = all)
    uint32_t payload;    //  payload bytes per ping
    uint32_t back;       //  echoes received (written by stop)
    uint32_t misordered; //  echoes out of sequence (written by stop)
} s_pinger_args_t;

typedef struct {
    s_pinger_args_t *args;
    kvt_aid_t peer;
    uint32_t sent;
    uint32_t back;
    uint32_t misordered;
    uint8_t *payload;
} s_pinger_t;

static void *s_pinger_init(kvt_ctx_t *ctx, void *args)
{
    s_pinger_t *self = calloc(1, sizeof *self);
    self->args = args;
    self->peer = kvt_ctx_lookup(ctx, self->args->peer);
    self->payload = calloc(1, self->args->payload + 1);
    return self;
}
static void s_pinger_stop(kvt_ctx_t *ctx, void *self_v)
{
    s_pinger_t *self = self_v;
    self->args->back = self->back;
    self->args->misordered = self->misordered;
    free(self->payload);
    free(self);
}
static int s_pinger_send(kvt_ctx_t *ctx, s_pinger_t *self)
{
    kvt_msg_t m = s_ping(++self->sent);
    m.u.ping.payload = self->args->payload ? self->payload : NULL;
    m.u.ping.npayload = self->args->payload;
    return kvt_ctx_send(ctx, self->peer, &m);
}
static int s_pinger_ping(kvt_ctx_t *ctx, void *self_v, kvt_aid_t from, kvt_msg_t *msg)
{
    s_pinger_t *self = self_v;
    if (from == KVT_AID_SYSTEM) {
        uint32_t k = self->args->window ? self->args->window : self->args->n;
        for (uint32_t i = 0; i < k && self->sent < self->args->n; i++)
            if (s_pinger_send(ctx, self) != 0)
                return -1;
        return 0;
    }
    if (msg->u.ping.seq != self->back + 1 || msg->u.ping.npayload != self->args->payload)
        self->misordered++;
    if (++self->back == self->args->n)
        kvt_ctx_exit(ctx, 0);
    else if (self->sent < self->args->n)
        return s_pinger_send(ctx, self);
    return 0;
}
static const kvt_actor_class_t s_pinger_class = {
    .type = "pinger",
    .init = s_pinger_init,
    .stop = s_pinger_stop,
    .on = {[KVT_MSG_PING] = s_pinger_ping},
};

//  hub: each round sends one Ping to every worker "w<i>" and waits for all
//  replies; exits 0 after `rounds` rounds.
typedef struct {
    uint32_t nworkers; //  workers
    uint32_t rounds;   //  rounds to run
    uint32_t done;     //  rounds completed (written by stop)
    uint32_t wrong;    //  replies for another round (written by stop)
} s_hub_args_t;

typedef struct {
    s_hub_args_t *args;
    uint32_t round;
    uint32_t replies;
    uint32_t wrong;
    kvt_aid_t workers[64];
} s_hub_t;

static void s_hub_fanout(kvt_ctx_t *ctx, s_hub_t *self)
{
    for (uint32_t w = 0; w < self->args->nworkers; w++) {
        kvt_msg_t m = s_ping(self->round);
        kvt_ctx_send(ctx, self->workers[w], &m);
    }
}
static void *s_hub_init(kvt_ctx_t *ctx, void *args)
{
    s_hub_t *self = calloc(1, sizeof *self);
    self->args = args;
    for (uint32_t w = 0; w < self->args->nworkers; w++) {
        char name[16];
        snprintf(name, sizeof name, "w%u", w);
        self->workers[w] = kvt_ctx_lookup(ctx, name);
    }
    return self;
}
static void s_hub_stop(kvt_ctx_t *ctx, void *self_v)
{
    s_hub_t *self = self_v;
    self->args->done = self->round;
    self->args->wrong = self->wrong;
    free(self);
}
static int s_hub_ping(kvt_ctx_t *ctx, void *self_v, kvt_aid_t from, kvt_msg_t *msg)
{
    s_hub_t *self = self_v;
    if (from == KVT_AID_SYSTEM) {
        s_hub_fanout(ctx, self);
        return 0;
    }
    if (msg->u.ping.seq != self->round)
        self->wrong++;
    if (++self->replies < self->args->nworkers)
        return 0;
    self->replies = 0;
    if (++self->round == self->args->rounds)
        kvt_ctx_exit(ctx, 0);
    else
        s_hub_fanout(ctx, self);
    return 0;
}
static const kvt_actor_class_t s_hub_class = {
    .type = "hub",
    .init = s_hub_init,
    .stop = s_hub_stop,
    .on = {[KVT_MSG_PING] = s_hub_ping},
};

// ------------------------------------------------------------ transports ---

typedef enum {
    S_INPROC = 0, //  one process, default inproc endpoints
    S_TCP = 1,    //  one process, every inbox on tcp://127.0.0.1:* (loopback)
    S_IPC2 = 2,   //  two processes: the child hosts the pong side over ipc://
} s_mode_t;

static const char *s_ep(s_mode_t mode, int pid, const char *name, char *buf, size_t size)
{
    if (mode == S_INPROC)
        return NULL;
    if (mode == S_TCP)
        return "tcp://127.0.0.1:*";
    //  The driver binds ipc:// only in an owner-only directory.
    snprintf(buf, size, "ipc:///tmp/kvt-rt-%d/%s.sock", pid, name);
    return buf;
}

static void s_unlink_ipc(int pid, const char *name)
{
    char path[128];
    snprintf(path, sizeof path, "/tmp/kvt-rt-%d/%s.sock", pid, name);
    unlink(path);
}

//  Builds the topology: "ping"/"hub" first, then the pong side. `side`
//  0: this process hosts everything; 1: the parent (pong side remote);
//  2: the child (ping side remote).
static void s_topology(kvt_system_t *sys, s_mode_t mode, int pid, int side, bool fanout,
                       uint32_t nworkers, void *args)
{
    char buf[128];
    const char *first = fanout ? "hub" : "ping";
    const char *ep = s_ep(mode, pid, first, buf, sizeof buf);
    if (side == 2)
        cr_assert_neq(kvt_system_add_remote(sys, first, ep), KVT_AID_NONE);
    else
        cr_assert_neq(kvt_system_add(sys, first, fanout ? &s_hub_class : &s_pinger_class, args, ep),
                      KVT_AID_NONE);
    for (uint32_t w = 0; w < (fanout ? nworkers : 1); w++) {
        char name[16];
        snprintf(name, sizeof name, fanout ? "w%u" : "pong", w);
        ep = s_ep(mode, pid, name, buf, sizeof buf);
        if (side == 1)
            cr_assert_neq(kvt_system_add_remote(sys, name, ep), KVT_AID_NONE);
        else
            cr_assert_neq(kvt_system_add(sys, name, &s_pong_class, NULL, ep), KVT_AID_NONE);
    }
}

//  The child process of an S_IPC2 run: hosts the pong side until told to
//  stop (a Shutdown), then exits without running the test runner's exit
//  handlers.
static void s_child(int pid, bool fanout, uint32_t nworkers)
{
    kvt_system_opts_t o = {.driver = KVT_DRIVER_LIVE, .seed = 1, .name = "c", .log_level = 0};
    kvt_system_t *sys = kvt_system_new(&o);
    int code = 10;
    if (sys) {
        s_topology(sys, S_IPC2, pid, 2, fanout, nworkers, NULL);
        code = kvt_system_start(sys) == 0 ? kvt_system_run(sys, S_LIMIT_NS / 2, 0) : 11;
        kvt_system_destroy(&sys);
    }
    zsys_shutdown();
    _exit(code == 0 ? 0 : code > 0 && code < 100 ? code : 12);
}

static int s_wait_child(pid_t child)
{
    int status = 0;
    for (int i = 0; i < 60000; i++) {
        pid_t r = waitpid(child, &status, WNOHANG);
        if (r == child)
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        s_sleep_ms(1);
    }
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
    return -1;
}

//  Runs ping-pong (fanout = false) or fan-out/fan-in over `mode`.
static void s_flow(s_mode_t mode, bool fanout)
{
    const uint32_t nworkers = 4;
    int pid = (int)getpid();
    pid_t child = 0;
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/kvt-rt-%d", pid);
    if (mode == S_IPC2) {
        cr_assert(mkdir(dir, 0700) == 0 || errno == EEXIST);
        child = fork(); //  before this process touches ZeroMQ
        cr_assert_geq(child, 0);
        if (child == 0)
            s_child(pid, fanout, nworkers);
    }
    kvt_system_t *sys = s_live("t");
    s_pinger_args_t pa = {.peer = "pong", .n = 2000, .payload = 100};
    s_hub_args_t ha = {.nworkers = nworkers, .rounds = 200};
    s_topology(sys, mode, pid, mode == S_IPC2 ? 1 : 0, fanout, nworkers,
               fanout ? (void *)&ha : (void *)&pa);
    cr_assert_eq(kvt_system_start(sys), 0);
    if (mode == S_TCP)
        for (kvt_aid_t i = 0; i < (fanout ? 1 + nworkers : 2); i++) {
            const char *ep = kvt_system_endpoint(sys, i);
            cr_assert(strncmp(ep, "tcp://127.0.0.1:", 16) == 0 && !strchr(ep, '*'),
                      "wildcard port resolved: %s", ep);
        }
    kvt_msg_t kick = s_ping(0);
    cr_assert_eq(kvt_system_post(sys, 0, &kick), 0);
    int rc = kvt_system_run(sys, S_LIMIT_NS, 0);
    int child_rc = 0;
    if (mode == S_IPC2) {
        kvt_msg_t bye = {.kind = KVT_MSG_SHUTDOWN};
        kvt_system_post(sys, 1, &bye);
        child_rc = s_wait_child(child);
    }
    kvt_system_stop(sys);
    kvt_system_destroy(&sys);
    if (mode == S_IPC2) {
        s_unlink_ipc(pid, fanout ? "hub" : "ping");
        for (uint32_t w = 0; w < (fanout ? nworkers : 1); w++) {
            char name[16];
            snprintf(name, sizeof name, fanout ? "w%u" : "pong", w);
            s_unlink_ipc(pid, name);
        }
        rmdir(dir);
    }
    //  Asserted only now, so the socket files are gone whatever the result.
    cr_assert_eq(child_rc, 0, "the child served and exited cleanly");
    cr_assert_eq(rc, 0, "the ping side finished (run returned %d)", rc);
    if (fanout) {
        cr_assert_eq(ha.done, 200);
        cr_assert_eq(ha.wrong, 0);
    } else {
        cr_assert_eq(pa.back, 2000);
        cr_assert_eq(pa.misordered, 0, "FIFO per channel, payload intact");
    }
}

Test(runtime_live, ping_pong_inproc, .timeout = 120)
{
    s_flow(S_INPROC, false);
}

Test(runtime_live, fan_out_inproc, .timeout = 120)
{
    s_flow(S_INPROC, true);
}

Test(runtime_live, ping_pong_tcp, .timeout = 120)
{
    s_flow(S_TCP, false);
}

Test(runtime_live, fan_out_tcp, .timeout = 120)
{
    s_flow(S_TCP, true);
}

Test(runtime_live, ping_pong_ipc_two_processes, .timeout = 120)
{
    s_flow(S_IPC2, false);
}

Test(runtime_live, fan_out_ipc_two_processes, .timeout = 120)
{
    s_flow(S_IPC2, true);
}

// ------------------------------------------------------------ timers -------

typedef struct {
    uint32_t n;          //  callbacks run
    uint64_t tags[16];   //  their tags, in order
    uint64_t late[16];   //  ns between deadline and callback (negative = early)
    int64_t early;       //  callbacks before their deadline
    int cancel_rc;       //  kvt_ctx_cancel of an armed timer
    int cancel_again_rc; //  the same id again
    uint64_t armed_at;   //  driver time when they were armed
} s_timer_args_t;

static void *s_timer_init(kvt_ctx_t *ctx, void *args)
{
    s_timer_args_t *a = args;
    a->armed_at = kvt_ctx_now(ctx);
    kvt_ctx_timer(ctx, 60000000, 3);
    kvt_ctx_timer(ctx, 20000000, 1);
    uint64_t doomed = kvt_ctx_timer(ctx, 30000000, 99);
    kvt_ctx_timer(ctx, 40000000, 2);
    kvt_ctx_timer(ctx, 40000000, 22);
    a->cancel_rc = kvt_ctx_cancel(ctx, doomed);
    a->cancel_again_rc = kvt_ctx_cancel(ctx, doomed);
    return a;
}
static void s_timer_cb(kvt_ctx_t *ctx, void *self, uint64_t tag)
{
    s_timer_args_t *a = self;
    uint64_t due = a->armed_at + (tag == 1 ? 20000000 : tag == 3 ? 60000000 : 40000000);
    if (kvt_ctx_now(ctx) < due)
        a->early++;
    a->tags[a->n++] = tag;
    if (tag == 3)
        kvt_ctx_exit(ctx, 5);
}
static const kvt_actor_class_t s_timer_class = {
    .type = "timers", .init = s_timer_init, .on_timer = s_timer_cb};

Test(runtime_live, timers_fire_in_order_and_cancel, .timeout = 60)
{
    kvt_system_t *sys = s_live("t");
    s_timer_args_t ta = {0};
    kvt_aid_t t = kvt_system_add(sys, "timers", &s_timer_class, &ta, NULL);
    cr_assert_eq(kvt_system_start(sys), 0);
    cr_assert_eq(kvt_system_run(sys, S_LIMIT_NS, 0), 5);
    kvt_system_stop(sys);
    cr_assert_eq(ta.cancel_rc, 0);
    cr_assert_eq(ta.cancel_again_rc, -1);
    cr_assert_eq(ta.n, 4, "the cancelled timer never fired");
    uint64_t want[] = {1, 2, 22, 3};
    for (int i = 0; i < 4; i++)
        cr_assert_eq(ta.tags[i], want[i], "timer %d: tag %" PRIu64, i, ta.tags[i]);
    cr_assert_eq(ta.early, 0, "no timer fires before its deadline");
    kvt_actor_stats_t st;
    kvt_system_actor_stats(sys, t, &st);
    cr_assert_eq(st.timers_fired, 4);
    kvt_system_destroy(&sys);
}

Test(runtime_live, run_time_limit, .timeout = 60)
{
    kvt_system_t *sys = s_live("t");
    kvt_system_add(sys, "pong", &s_pong_class, NULL, NULL);
    cr_assert_eq(kvt_system_start(sys), 0);
    cr_assert_eq(kvt_system_run(sys, 50000000, 0), KVT_RUN_TIME_LIMIT);
    cr_assert_eq(kvt_sim_fault(sys, KVT_FAULT_DROP, KVT_ANY_ACTOR, KVT_ANY_ACTOR, 0, 1, 0), 0,
                 "fault hooks are SIM only");
    cr_assert_eq(kvt_sim_crash(sys, 0), -1);
    kvt_system_destroy(&sys);
}

// ---------------------------------------------------------- shutdown -------

static atomic_int s_entered; //  the blocker is inside its first handler
static atomic_int s_release; //  let the blocker's first handler return

static void *s_blocker_init(kvt_ctx_t *ctx, void *args)
{
    return &s_dummy;
}
static int s_blocker_ping(kvt_ctx_t *ctx, void *self, kvt_aid_t from, kvt_msg_t *msg)
{
    if (msg->u.ping.seq != 0)
        return 0;
    atomic_store(&s_entered, 1);
    while (!atomic_load(&s_release))
        s_sleep_ms(1);
    return 0;
}
static const kvt_actor_class_t s_blocker_class = {
    .type = "blocker", .init = s_blocker_init, .on = {[KVT_MSG_PING] = s_blocker_ping}};

static void *s_releaser(void *arg)
{
    s_sleep_ms(500); //  long after kvt_system_stop sent $TERM
    atomic_store(&s_release, 1);
    return NULL;
}

Test(runtime_live, shutdown_drains_and_counts, .timeout = 60)
{
    kvt_system_t *sys = s_live("t");
    kvt_aid_t b = kvt_system_add(sys, "blocker", &s_blocker_class, NULL, NULL);
    cr_assert_eq(kvt_system_start(sys), 0);
    for (uint64_t i = 0; i < 200; i++) {
        kvt_msg_t m = s_ping(i);
        cr_assert_eq(kvt_system_post(sys, b, &m), 0);
    }
    for (int i = 0; i < 30000 && !atomic_load(&s_entered); i++)
        s_sleep_ms(1);
    cr_assert(atomic_load(&s_entered));
    pthread_t th;
    pthread_create(&th, NULL, s_releaser, NULL);
    kvt_system_stop(sys); //  $TERM is queued while the handler blocks
    pthread_join(th, NULL);
    kvt_actor_stats_t st;
    kvt_system_actor_stats(sys, b, &st);
    cr_assert_eq(st.delivered + st.dropped_at_stop, 200, "every message handled or counted");
    cr_assert_geq(st.dropped_at_stop, 200 - 64, "$TERM is seen within one inbox batch");
    kvt_system_destroy(&sys);
}

// ------------------------------------------------------- bad frames --------

typedef struct {
    uint32_t want; //  Pings to see before exiting
    uint32_t seen; //  Pings seen
} s_counter_t;

static void *s_counter_init(kvt_ctx_t *ctx, void *args)
{
    return args;
}
static int s_counter_ping(kvt_ctx_t *ctx, void *self, kvt_aid_t from, kvt_msg_t *msg)
{
    s_counter_t *c = self;
    if (++c->seen == c->want)
        kvt_ctx_exit(ctx, 0);
    return 0;
}
static const kvt_actor_class_t s_counter_class = {
    .type = "counter", .init = s_counter_init, .on = {[KVT_MSG_PING] = s_counter_ping}};

Test(runtime_live, decode_errors_and_bad_frames, .timeout = 60)
{
    kvt_system_t *sys = s_live("t");
    s_counter_t c = {.want = 2};
    kvt_aid_t sink = kvt_system_add(sys, "sink", &s_counter_class, &c, NULL);
    cr_assert_eq(kvt_system_start(sys), 0);
    //  A raw socket, as a foreign or broken peer would send.
    zsock_t *raw = zsock_new(ZMQ_PUSH);
    cr_assert_eq(zsock_connect(raw, "%s", kvt_system_endpoint(sys, sink)), 0);
    zstr_sendm(raw, "$system");
    zstr_send(raw, "not msgpack at all"); //  decode error
    zstr_send(raw, "lonely");             //  one part
    zstr_sendm(raw, "nobody");
    zstr_send(raw, "x"); //  unknown sender
    zstr_sendm(raw, "a");
    zstr_sendm(raw, "b");
    zstr_send(raw, "c"); //  three parts
    uint8_t *buf;
    size_t len;
    kvt_msg_t m = s_ping(1);
    cr_assert_eq(kvt_msg_encode(&m, &buf, &len), 0);
    zsock_send(raw, "sb", "$system", buf, len); //  a good one after them on the same channel
    free(buf);
    //  And through the runtime's own hook, then a good one on that channel.
    const uint8_t garbage[] = {0xc1, 0xc1};
    cr_assert_eq(kvt_system_post_raw(sys, sink, garbage, sizeof garbage), 0);
    m = s_ping(2);
    cr_assert_eq(kvt_system_post(sys, sink, &m), 0);
    cr_assert_eq(kvt_system_run(sys, S_LIMIT_NS, 0), 0, "the actor kept running");
    zsock_destroy(&raw);
    kvt_system_stop(sys);
    kvt_actor_stats_t st;
    kvt_system_actor_stats(sys, sink, &st);
    cr_assert_eq(st.decode_errors, 2);
    cr_assert_eq(st.bad_frames, 3);
    cr_assert_eq(st.delivered, 2);
    kvt_system_actor_stats(sys, KVT_AID_SYSTEM, &st);
    cr_assert_eq(st.sent, 2, "the posting side counts its sends");
    kvt_system_destroy(&sys);
}

// ------------------------------------------------------- init failure ------

static atomic_int s_ok_stops;

static void *s_ok_init(kvt_ctx_t *ctx, void *args)
{
    return &s_dummy;
}
static void s_ok_stop(kvt_ctx_t *ctx, void *self)
{
    atomic_fetch_add(&s_ok_stops, 1);
}
static void *s_fail_init(kvt_ctx_t *ctx, void *args)
{
    return NULL;
}
static const kvt_actor_class_t s_ok_class = {.type = "ok", .init = s_ok_init, .stop = s_ok_stop};
static const kvt_actor_class_t s_fail_class = {.type = "fail", .init = s_fail_init};

Test(runtime_live, init_failure_stops_the_started, .timeout = 60)
{
    kvt_system_t *sys = s_live("t");
    kvt_system_add(sys, "a", &s_ok_class, NULL, NULL);
    kvt_system_add(sys, "b", &s_ok_class, NULL, NULL);
    kvt_system_add(sys, "c", &s_fail_class, NULL, NULL);
    kvt_system_add(sys, "d", &s_ok_class, NULL, NULL);
    cr_assert_eq(kvt_system_start(sys), -1);
    cr_assert_eq(atomic_load(&s_ok_stops), 2, "a and b were stopped again; d never started");
    kvt_system_destroy(&sys);
}

Test(runtime_live, bad_endpoints_are_refused, .timeout = 60)
{
    kvt_system_t *sys = s_live("t");
    cr_assert_eq(kvt_system_add(sys, "a", &s_ok_class, NULL, "udp://x"), KVT_AID_NONE);
    cr_assert_eq(kvt_system_add(sys, "$a", &s_ok_class, NULL, NULL), KVT_AID_NONE);
    cr_assert_eq(kvt_system_add_remote(sys, "r", "inproc://r"), KVT_AID_NONE);
    kvt_aid_t r = kvt_system_add_remote(sys, "r", "tcp://127.0.0.1:1");
    cr_assert_neq(r, KVT_AID_NONE);
    kvt_actor_stats_t st;
    cr_assert_eq(kvt_system_actor_stats(sys, r, &st), -1, "no counters for a remote actor");
    //  An inbox that cannot be bound: start reports it.
    kvt_system_add(sys, "a", &s_ok_class, NULL, "ipc:///nonexistent-dir/kvt.sock");
    cr_assert_eq(kvt_system_start(sys), -1);
    kvt_system_destroy(&sys);
}

// -------------------------------------------------------------- rates ------

static void s_rate(uint32_t n, uint32_t window, double *per_s)
{
    kvt_system_t *sys = s_live("t");
    s_pinger_args_t pa = {.peer = "pong", .n = n, .window = window};
    kvt_aid_t ping = kvt_system_add(sys, "ping", &s_pinger_class, &pa, NULL);
    kvt_system_add(sys, "pong", &s_pong_class, NULL, NULL);
    cr_assert_eq(kvt_system_start(sys), 0);
    kvt_msg_t kick = s_ping(0);
    double t0 = s_now_s();
    kvt_system_post(sys, ping, &kick);
    cr_assert_eq(kvt_system_run(sys, S_LIMIT_NS, 0), 0);
    *per_s = n / (s_now_s() - t0);
    kvt_system_destroy(&sys);
    cr_assert_eq(pa.back, n);
    cr_assert_eq(pa.misordered, 0);
}

Test(runtime_live, inproc_rates, .timeout = 120)
{
    double rt, burst;
    s_rate(20000, 1, &rt);
    s_rate(100000, 0, &burst);
    cr_log_info("LIVE inproc: %.0f round trips/s (window 1), %.0f round trips/s (all in flight)",
                rt, burst);
}
