/*  kvt_live.c — the LIVE driver: one thread per local actor (czmq zactor),
    ZeroMQ inboxes, timers on the monotonic clock.

    Sockets. Each local actor's inbox is a PULL socket. kvt_system_start
    creates and binds every inbox in the starting thread first (so a tcp://
    wildcard port is resolved before any actor runs, and every endpoint is
    fixed before any thread reads it), then hands each socket to its actor's
    thread. A sender owns one PUSH socket per destination, created on first
    use from the sending thread and connected to the destination's endpoint:
    one PUSH → one PULL pipe per (sender, receiver), so delivery is FIFO per
    channel. A frame is two parts: [sender][encoded message]; the sender
    part is the sender's name, followed by a NUL and the system's link_id
    (8 bytes, little-endian) when that is not 0 (kvt_frame.c builds and
    parses it). A frame whose link id is not the receiver's is dropped and
    counted (foreign_frames); any other bad shape is bad_frames.

    Backpressure. SNDHWM and RCVHWM are 0 (no limit) and sends use
    ZMQ_DONTWAIT: a send never blocks, so two actors that send to each other
    can never deadlock, and nothing is dropped silently. The cost is that
    queues are bounded only by the protocol's own window (the engine keeps
    one step in flight). A send that still fails (no route) is counted as
    send_errors.

    Authentication. With kvt_system_set_curve, a tcp:// inbox binds as a
    CURVE server (the process's zauth actor admits only the allowed public
    keys) and a connection to a tcp:// actor is a CURVE client that checks
    the server's key, so a peer without a key can neither inject nor read.
    A monitor on each CURVE inbox reports refused handshakes to the actor's
    thread (auth_rejected). tcp:// without CURVE is allowed and warned
    about once per system. An ipc:// socket file must sit in a directory
    owned by this user with no group/other permission bits, checked at bind
    and at connect; anything else is refused.

    Actor thread. init runs on the actor's thread before the zactor
    handshake signal, so kvt_system_start knows whether it succeeded. The
    loop fires due timers, then waits on [pipe, inbox] with a timeout equal
    to the time to the next timer. "$TERM" on the pipe ends the loop; the
    inbox is then drained without handling (dropped_at_stop), the class's
    stop runs, the thread's sockets close, and live_done is release-stored.
    kvt_ctx_exit sends ["EXIT", code] up the pipe to kvt_system_run.
*/
#include <assert.h>
#include <czmq.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvt_runtime_int.h"
#include "kvt_frame.h"

//  A message orders everything its sender did before sending it before
//  everything its receiver does after receiving it (the memory a message
//  names by block id, for one). libzmq is not instrumented, so under
//  ThreadSanitizer that edge is declared here: release on the destination
//  before the send, acquire on it after the receive.
#if defined(__SANITIZE_THREAD__)
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
static void s_tsan_release(void *addr)
{
    __tsan_release(addr);
}
static void s_tsan_acquire(void *addr)
{
    __tsan_acquire(addr);
}
#else
static void s_tsan_release(void *addr)
{
    (void)addr;
}
static void s_tsan_acquire(void *addr)
{
    (void)addr;
}
#endif

#define S_BATCH      64   //  inbox frames handled per poll
#define S_TIMER_LOOP 256  //  timers fired per loop turn (a 0-delay re-arm cannot starve the inbox)
#define S_LINGER_MS  1000 //  linger of ipc/tcp PUSH sockets: flush at close, bounded

//  Thread-owned state of one local actor.
struct _kvt_live_actor_t {
    zsock_t *pipe;        //  the zactor pipe (actor's end)
    zsock_t *inbox;       //  PULL socket, bound by kvt_system_start
    zsock_t *authmon;     //  PAIR: the inbox's refused CURVE handshakes (or NULL)
    zpoller_t *poller;    //  polls pipe then inbox
    zsock_t **out;        //  PUSH socket per destination, created on first send
    kvt_timers_t timers;  //  this actor's timers (monotonic ns since start)
    bool terminated;      //  "$TERM" received
    uint64_t bad_logged;  //  bad frames logged at warning level
    uint64_t auth_logged; //  refused handshakes logged at warning level
};

struct _kvt_live_t {
    uint64_t start_ns;      //  monotonic time of kvt_system_start
    zsock_t **post;         //  "$system" PUSH sockets per destination (posting thread)
    atomic_bool tcp_warned; //  "tcp:// without CURVE" logged
};

static int s_live_new(kvt_system_t *sys)
{
    kvt_live_t *live = calloc(1, sizeof *live);
    if (!live)
        return -1;
    live->start_ns = kvt_mono_ns();
    sys->live = live;
    return 0;
}

//  Unbinds (synchronous for inproc, so the name is free at once; releases
//  the port / socket file for tcp / ipc) and closes an inbox.
static void s_close_inbox(zsock_t **inbox_p, const char *endpoint)
{
    if (!*inbox_p)
        return;
    zsock_unbind(*inbox_p, "%s", endpoint);
    zsock_destroy(inbox_p);
}

//  Stops an inbox's handshake monitor and closes its reading end.
static void s_close_authmon(zsock_t **mon_p, zsock_t *inbox)
{
    if (!*mon_p)
        return;
    if (inbox)
        zmq_socket_monitor(zsock_resolve(inbox), NULL, 0);
    zsock_destroy(mon_p);
}

static void s_close_all(zsock_t **socks, uint32_t n)
{
    if (!socks)
        return;
    for (uint32_t i = 0; i < n; i++)
        zsock_destroy(&socks[i]);
}

static void s_live_destroy(kvt_system_t *sys)
{
    kvt_live_t *live = sys->live;
    if (!live)
        return;
    s_close_all(live->post, KVT_MAX_ACTORS);
    free(live->post);
    for (uint32_t i = 0; i < sys->nactors; i++) { //  never handed over
        s_close_authmon(&sys->actors[i]->authmon, sys->actors[i]->inbox);
        s_close_inbox(&sys->actors[i]->inbox, sys->actors[i]->endpoint);
    }
    if (sys->curve)
        kvt_curve_auth_release(sys->curve);
    free(live);
    sys->live = NULL;
}

static uint64_t s_live_now(kvt_system_t *sys)
{
    return kvt_mono_ns() - sys->live->start_ns;
}

// ---------------------------------------------------------------- send ----

// ------------------------------------------------------------ security ----

//  An ipc:// endpoint's socket file must sit in a directory only this user
//  can enter: anyone who can reach the file can inject and read. 0, or -1
//  with the reason in `why`.
static int s_ipc_dir_check(const char *ep, char *why, size_t len)
{
    char dir[KVT_ENDPOINT_MAX];
    snprintf(dir, sizeof dir, "%s", ep + 6);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == dir)
        dir[1] = 0;
    else
        *slash = 0;
    struct stat st;
    if (stat(dir, &st) != 0) {
        snprintf(why, len, "directory %s: %s", dir, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(why, len, "%s is not a directory", dir);
        return -1;
    }
    if (st.st_uid != geteuid()) {
        snprintf(why, len, "directory %s belongs to uid %u, not this user (%u)", dir,
                 (unsigned)st.st_uid, (unsigned)geteuid());
        return -1;
    }
    if (st.st_mode & 077) {
        snprintf(why, len,
                 "directory %s is open to group/other (mode %03o): ipc:// sockets need an "
                 "owner-only directory (mode 700)",
                 dir, (unsigned)(st.st_mode & 0777));
        return -1;
    }
    return 0;
}

static bool s_is_tcp(const char *ep)
{
    return strncmp(ep, "tcp://", 6) == 0;
}

static void s_warn_plain_tcp(kvt_system_t *sys, const char *who, const char *ep)
{
    if (!sys->curve && !atomic_exchange(&sys->live->tcp_warned, true))
        kvt_log(sys, who, 1,
                "%s is tcp:// without CURVE (curve_secret_key unset): any peer that reaches it "
                "can inject and read messages",
                ep);
}

static zsock_t *s_connect(kvt_system_t *sys, kvt_actor_t *from, kvt_aid_t to)
{
    const char *ep = sys->actors[to]->endpoint;
    const char *who = from ? from->name : KVT_SYSTEM_NAME;
    char why[KVT_ENDPOINT_MAX + 128];
    if (strncmp(ep, "ipc://", 6) == 0 && s_ipc_dir_check(ep, why, sizeof why) != 0) {
        kvt_log(sys, who, 1, "will not connect to %s at %s: %s", sys->actors[to]->name, ep, why);
        return NULL;
    }
    zsock_t *sock = zsock_new(ZMQ_PUSH);
    if (!sock)
        return NULL;
    if (s_is_tcp(ep)) {
        if (sys->curve)
            kvt_curve_client(sys->curve, sock);
        else
            s_warn_plain_tcp(sys, who, ep);
    }
    zsock_set_sndhwm(sock, 0);
    zsock_set_linger(sock, strncmp(ep, "inproc://", 9) == 0 ? 0 : S_LINGER_MS);
    if (zsock_connect(sock, "%s", ep) != 0) {
        zsock_destroy(&sock);
        return NULL;
    }
    return sock;
}

static int s_live_send(kvt_system_t *sys, kvt_actor_t *a, kvt_aid_t to, const uint8_t *buf,
                       size_t len)
{
    zsock_t **slot;
    const char *name;
    if (a) {
        slot = &a->live->out[to];
        name = a->name;
    } else {
        if (!sys->live->post) {
            sys->live->post = calloc(KVT_MAX_ACTORS, sizeof(zsock_t *));
            if (!sys->live->post)
                return -1;
        }
        slot = &sys->live->post[to];
        name = KVT_SYSTEM_NAME;
    }
    const char *who = a ? a->name : KVT_SYSTEM_NAME;
    if (!*slot) {
        *slot = s_connect(sys, a, to);
        if (!*slot) {
            kvt_log(sys, who, 1, "cannot connect to %s at %s: %s", sys->actors[to]->name,
                    sys->actors[to]->endpoint, zmq_strerror(zmq_errno()));
            return -1;
        }
    }
    void *h = zsock_resolve(*slot);
    uint8_t from[KVT_FRAME_SENDER_MAX];
    size_t flen = kvt_frame_sender(from, name, strlen(name), sys->link_id);
    s_tsan_release(sys->actors[to]);
    if (zmq_send(h, from, flen, ZMQ_SNDMORE | ZMQ_DONTWAIT) == -1 ||
        zmq_send(h, buf, len, ZMQ_DONTWAIT) == -1) {
        kvt_log(sys, who, 1, "send to %s failed: %s", sys->actors[to]->name,
                zmq_strerror(zmq_errno()));
        return -1;
    }
    return 0;
}

// -------------------------------------------------------------- timers ----

static uint64_t s_live_timer(kvt_system_t *sys, kvt_actor_t *a, uint64_t after_ns, uint64_t tag)
{
    uint64_t now = s_live_now(sys);
    uint64_t deadline = now + after_ns < now ? UINT64_MAX : now + after_ns;
    return kvt_timers_arm(&a->live->timers, deadline, tag, a->aid);
}

static int s_live_cancel(kvt_system_t *sys, kvt_actor_t *a, uint64_t id)
{
    return kvt_timers_cancel(&a->live->timers, id, a->aid);
}

static void s_live_exit(kvt_system_t *sys, kvt_actor_t *a, int code)
{
    if (zsock_send(a->live->pipe, "si", "EXIT", code) != 0)
        kvt_log(sys, a->name, 1, "exit(%d) not delivered: the main thread is not reading", code);
}

// ---------------------------------------------------------- the thread ----

//  Receives one whole message (all parts) without waiting. Returns the
//  part count, 0 when the inbox is empty. parts[0..1] hold the first two.
static int s_recv(void *h, zmq_msg_t parts[2])
{
    int n = 0;
    while (true) {
        zmq_msg_t scratch;
        zmq_msg_t *m = n < 2 ? &parts[n] : &scratch;
        zmq_msg_init(m);
        if (zmq_msg_recv(m, h, n == 0 ? ZMQ_DONTWAIT : 0) == -1) {
            zmq_msg_close(m);
            if (n == 0 && zmq_errno() == EINTR)
                continue;
            return n;
        }
        n++;
        bool more = zmq_msg_more(m);
        if (m == &scratch)
            zmq_msg_close(m);
        if (!more)
            return n;
    }
}

static void s_close_parts(zmq_msg_t parts[2], int n)
{
    for (int i = 0; i < n && i < 2; i++)
        zmq_msg_close(&parts[i]);
}

static void s_bad_frame(kvt_system_t *sys, kvt_actor_t *a, const char *why)
{
    kvt_count(&a->stats, KVT_ST_BAD_FRAMES);
    kvt_log(sys, a->name, a->live->bad_logged++ < 8 ? 1 : 3, "dropped a frame: %s", why);
}

//  A frame of another deployment (another namespace or world size): a
//  process that reached this endpoint by mistake, or on purpose.
static void s_foreign_frame(kvt_system_t *sys, kvt_actor_t *a, uint64_t link)
{
    kvt_count(&a->stats, KVT_ST_FOREIGN_FRAMES);
    kvt_log(sys, a->name, a->live->bad_logged++ < 8 ? 1 : 3,
            "dropped a frame of another deployment (link id %016llx, this one %016llx)",
            (unsigned long long)link, (unsigned long long)sys->link_id);
}

static void s_handle_inbox(kvt_system_t *sys, kvt_actor_t *a)
{
    void *h = zsock_resolve(a->live->inbox);
    for (int i = 0; i < S_BATCH; i++) {
        zmq_msg_t parts[2];
        int n = s_recv(h, parts);
        if (n == 0)
            return;
        kvt_frame_t f;
        kvt_frame_status_t st =
            kvt_frame_parse(n, zmq_msg_data(&parts[0]), zmq_msg_size(&parts[0]),
                            n > 1 ? zmq_msg_data(&parts[1]) : NULL,
                            n > 1 ? zmq_msg_size(&parts[1]) : 0, sys->link_id, &f);
        kvt_aid_t from =
            st == KVT_FRAME_OK ? kvt_system_find(sys, f.name, f.name_len) : KVT_AID_NONE;
        if (st == KVT_FRAME_FOREIGN)
            s_foreign_frame(sys, a, f.link);
        else if (st != KVT_FRAME_OK)
            s_bad_frame(sys, a, kvt_frame_why(st));
        else if (from == KVT_AID_NONE)
            s_bad_frame(sys, a, "unknown sender name (topologies differ?)");
        else {
            int kind;
            s_tsan_acquire(a);
            kvt_actor_dispatch(sys, a, from, f.payload, f.payload_len, &kind);
        }
        s_close_parts(parts, n);
    }
}

//  One monitor event per refused handshake: [event u16 + value u32][endpoint].
static void s_handle_authmon(kvt_system_t *sys, kvt_actor_t *a)
{
    void *h = zsock_resolve(a->live->authmon);
    for (int i = 0; i < S_BATCH; i++) {
        zmq_msg_t parts[2];
        int n = s_recv(h, parts);
        if (n == 0)
            return;
        uint16_t event = 0;
        if (zmq_msg_size(&parts[0]) >= 2)
            memcpy(&event, zmq_msg_data(&parts[0]), 2);
        s_close_parts(parts, n);
        kvt_count(&a->stats, KVT_ST_AUTH_REJECTED);
        kvt_log(sys, a->name, a->live->auth_logged++ < 8 ? 1 : 3, "refused a peer on %s: %s",
                a->endpoint,
                event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH ? "its key is not allowed"
                                                         : "no CURVE handshake with this key");
    }
}

static void s_handle_pipe(kvt_system_t *sys, kvt_actor_t *a)
{
    zmsg_t *msg = zmsg_recv(a->live->pipe);
    if (!msg)
        return; //  interrupted
    char *cmd = zmsg_popstr(msg);
    if (cmd && strcmp(cmd, "$TERM") == 0)
        a->live->terminated = true;
    else
        kvt_log(sys, a->name, 1, "unknown pipe command '%s'", cmd ? cmd : "(none)");
    zstr_free(&cmd);
    zmsg_destroy(&msg);
}

static void s_fire_due(kvt_system_t *sys, kvt_actor_t *a)
{
    uint64_t now = s_live_now(sys);
    kvt_timer_t tm;
    for (int i = 0; i < S_TIMER_LOOP && kvt_timers_pop_due(&a->live->timers, now, &tm); i++)
        kvt_actor_fire(sys, a, tm.tag);
}

//  Milliseconds until the next timer (rounded up), -1 with none armed.
static int s_timeout_ms(kvt_system_t *sys, kvt_actor_t *a)
{
    uint64_t deadline;
    if (!kvt_timers_peek(&a->live->timers, &deadline))
        return -1;
    uint64_t now = s_live_now(sys);
    if (deadline <= now)
        return 0;
    uint64_t ms = (deadline - now + 999999) / 1000000;
    return ms > 3600000 ? 3600000 : (int)ms;
}

static void s_task(zsock_t *pipe, void *args)
{
    kvt_actor_t *a = args;
    kvt_system_t *sys = a->ctx.sys;
    zsock_t *inbox = a->inbox; //  the thread owns it from here on
    zsock_t *authmon = a->authmon;
    a->inbox = NULL;
    a->authmon = NULL;
    kvt_live_actor_t *L = calloc(1, sizeof *L);
    if (L) {
        L->pipe = pipe;
        L->inbox = inbox;
        L->authmon = authmon;
        inbox = NULL;
        authmon = NULL;
        L->out = calloc(sys->nactors, sizeof(zsock_t *));
        kvt_timers_init(&L->timers);
    }
    a->live = L;
    if (L && L->out)
        a->state = a->cls->init(&a->ctx, a->args);
    atomic_store_explicit(&a->live_init, a->state ? 1 : -1, memory_order_release);
    zsock_signal(pipe, 0);
    //  From here the pipe carries only EXIT upward: never block on it (its
    //  HWM is 1000), or an actor that exits often could hang the shutdown.
    zsock_set_sndtimeo(pipe, 0);
    if (!a->state)
        goto cleanup;
    L->poller = zpoller_new(pipe, L->inbox, L->authmon, NULL); //  authmon NULL ends the list
    assert(L->poller);
    zpoller_set_nonstop(L->poller, true); //  kvt_system_run reports SIGINT; actors wait for $TERM
    while (!L->terminated) {
        s_fire_due(sys, a);
        void *which = zpoller_wait(L->poller, s_timeout_ms(sys, a));
        if (which == pipe)
            s_handle_pipe(sys, a);
        else if (which == L->inbox)
            s_handle_inbox(sys, a);
        else if (which && which == L->authmon)
            s_handle_authmon(sys, a);
        else if (zpoller_terminated(L->poller) && zmq_errno() == ETERM)
            break;
    }
    //  Drain: what is in the inbox now is dropped, not handled.
    void *h = zsock_resolve(L->inbox);
    zmq_msg_t parts[2];
    int n;
    while ((n = s_recv(h, parts)) > 0) {
        kvt_count(&a->stats, KVT_ST_DROPPED_AT_STOP);
        s_close_parts(parts, n);
    }
    if (a->cls->stop)
        a->cls->stop(&a->ctx, a->state);
    a->state = NULL;
    kvt_log(sys, a->name, 3, "stopped: %llu delivered, %llu dropped at stop",
            (unsigned long long)kvt_count_get(&a->stats, KVT_ST_DELIVERED),
            (unsigned long long)kvt_count_get(&a->stats, KVT_ST_DROPPED_AT_STOP));
cleanup:
    if (L) {
        kvt_count_add(&a->stats, KVT_ST_TIMERS_LOST, L->timers.n);
        kvt_timers_fini(&L->timers);
        s_close_all(L->out, sys->nactors);
        free(L->out);
        zpoller_destroy(&L->poller);
        s_close_authmon(&L->authmon, L->inbox);
        s_close_inbox(&L->inbox, a->endpoint);
        free(L);
    }
    s_close_authmon(&authmon, inbox);
    s_close_inbox(&inbox, a->endpoint);
    a->live = NULL;
    atomic_store_explicit(&a->live_done, true, memory_order_release);
}

// ----------------------------------------------------------- lifecycle ----

//  Waits for the release store that ends an actor thread (after
//  zactor_destroy returned it is already there; the acquire is what makes
//  the thread's writes visible).
static void s_join(kvt_actor_t *a)
{
    while (!atomic_load_explicit(&a->live_done, memory_order_acquire))
        zclock_sleep(1);
}

//  Stops started actors [0, n): $TERM to all first so they drain in
//  parallel, then waits for each in reverse order.
static void s_stop_first(kvt_system_t *sys, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        kvt_actor_t *a = sys->actors[i];
        if (a->zactor)
            zstr_send(a->zactor, "$TERM");
    }
    for (uint32_t i = n; i-- > 0;) {
        kvt_actor_t *a = sys->actors[i];
        if (!a->zactor)
            continue;
        zactor_destroy(&a->zactor);
        s_join(a);
        a->run_state = KVT_ACTOR_STOPPED;
    }
}

//  Watches a CURVE inbox's refused handshakes: libzmq publishes them on an
//  inproc PAIR the actor's thread polls.
static int s_authmon(kvt_system_t *sys, kvt_actor_t *a)
{
    char ep[KVT_ENDPOINT_MAX];
    snprintf(ep, sizeof ep, "inproc://kvt-authmon-%p-%u", (void *)sys, (unsigned)a->aid);
    if (zmq_socket_monitor(zsock_resolve(a->inbox), ep,
                           ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) != 0)
        return -1;
    a->authmon = zsock_new(ZMQ_PAIR);
    if (!a->authmon || zsock_connect(a->authmon, "%s", ep) != 0) {
        s_close_authmon(&a->authmon, a->inbox);
        zmq_socket_monitor(zsock_resolve(a->inbox), NULL, 0);
        return -1;
    }
    return 0;
}

static int s_bind(kvt_system_t *sys, kvt_actor_t *a)
{
    char why[KVT_ENDPOINT_MAX + 128];
    if (strncmp(a->endpoint, "ipc://", 6) == 0 && s_ipc_dir_check(a->endpoint, why, sizeof why)) {
        kvt_log(sys, a->name, 0, "will not bind %s: %s", a->endpoint, why);
        return -1;
    }
    a->inbox = zsock_new(ZMQ_PULL);
    if (!a->inbox)
        return -1;
    zsock_set_rcvhwm(a->inbox, 0);
    zsock_set_linger(a->inbox, 0);
    bool curve = sys->curve && s_is_tcp(a->endpoint);
    if (curve)
        kvt_curve_server(sys->curve, a->inbox);
    else if (s_is_tcp(a->endpoint))
        s_warn_plain_tcp(sys, a->name, a->endpoint);
    if (curve && s_authmon(sys, a) != 0) {
        kvt_log(sys, a->name, 0, "cannot watch the handshakes of %s: %s", a->endpoint,
                zmq_strerror(zmq_errno()));
        zsock_destroy(&a->inbox);
        return -1;
    }
    if (zsock_bind(a->inbox, "%s", a->endpoint) == -1) {
        kvt_log(sys, a->name, 0, "cannot bind %s: %s", a->endpoint, zmq_strerror(zmq_errno()));
        s_close_authmon(&a->authmon, a->inbox);
        zsock_destroy(&a->inbox);
        return -1;
    }
    if (strncmp(a->endpoint, "tcp://", 6) == 0) {
        char *last = zsock_last_endpoint(a->inbox);
        if (last)
            snprintf(a->endpoint, sizeof a->endpoint, "%s", last);
        zstr_free(&last);
    }
    return 0;
}

static int s_live_start(kvt_system_t *sys)
{
    //  The authenticator runs before the first CURVE inbox binds: without a
    //  ZAP handler libzmq would admit every key.
    for (uint32_t i = 0; sys->curve && i < sys->nactors; i++) {
        kvt_actor_t *a = sys->actors[i];
        char err[KVT_ENDPOINT_MAX + 128];
        if (a->remote || !s_is_tcp(a->endpoint))
            continue;
        if (kvt_curve_auth_hold(sys->curve, err, sizeof err) != 0) {
            kvt_log(sys, KVT_SYSTEM_NAME, 0, "%s", err);
            return -1;
        }
        break;
    }
    for (uint32_t i = 0; i < sys->nactors; i++) {
        kvt_actor_t *a = sys->actors[i];
        if (!a->remote && s_bind(sys, a) != 0)
            goto fail_bind;
    }
    sys->live->start_ns = kvt_mono_ns();
    for (uint32_t i = 0; i < sys->nactors; i++) {
        kvt_actor_t *a = sys->actors[i];
        if (a->remote)
            continue;
        a->zactor = zactor_new(s_task, a);
        if (a->zactor && atomic_load_explicit(&a->live_init, memory_order_acquire) == 1) {
            a->run_state = KVT_ACTOR_UP;
            continue;
        }
        kvt_log(sys, a->name, 0, "init of %s failed; stopping the actors already started",
                a->cls->type ? a->cls->type : "actor");
        if (a->zactor) {
            zactor_destroy(&a->zactor);
            s_join(a);
        }
        a->run_state = KVT_ACTOR_STOPPED;
        s_stop_first(sys, i);
        goto fail_bind;
    }
    return 0;
fail_bind:
    for (uint32_t i = 0; i < sys->nactors; i++) {
        s_close_authmon(&sys->actors[i]->authmon, sys->actors[i]->inbox);
        s_close_inbox(&sys->actors[i]->inbox, sys->actors[i]->endpoint);
    }
    if (sys->curve)
        kvt_curve_auth_release(sys->curve);
    return -1;
}

static void s_live_stop(kvt_system_t *sys)
{
    s_stop_first(sys, sys->nactors);
    if (sys->live->post)
        s_close_all(sys->live->post, KVT_MAX_ACTORS);
    if (sys->curve)
        kvt_curve_auth_release(sys->curve);
}

static int s_live_run(kvt_system_t *sys, uint64_t until_ns)
{
    zpoller_t *poller = NULL;
    for (uint32_t i = 0; i < sys->nactors; i++) {
        kvt_actor_t *a = sys->actors[i];
        if (!a->zactor)
            continue;
        if (!poller)
            poller = zpoller_new(a->zactor, NULL);
        else
            zpoller_add(poller, a->zactor);
    }
    uint64_t end = until_ns ? kvt_mono_ns() + until_ns : 0;
    int rc = KVT_RUN_TIME_LIMIT;
    while (true) {
        int timeout = -1;
        if (end) {
            uint64_t now = kvt_mono_ns();
            if (now >= end)
                break;
            uint64_t ms = (end - now + 999999) / 1000000;
            timeout = ms > 3600000 ? 3600000 : (int)ms;
        }
        if (!poller) {
            if (timeout < 0)
                break; //  no local actor: nothing can ever exit
            zclock_sleep(timeout);
            continue;
        }
        void *which = zpoller_wait(poller, timeout);
        if (which) {
            zmsg_t *msg = zmsg_recv(which);
            char *cmd = msg ? zmsg_popstr(msg) : NULL;
            char *code = msg ? zmsg_popstr(msg) : NULL;
            bool exited = cmd && code && strcmp(cmd, "EXIT") == 0;
            if (exited)
                rc = atoi(code);
            zstr_free(&cmd);
            zstr_free(&code);
            zmsg_destroy(&msg);
            if (exited)
                break;
        } else if (zpoller_terminated(poller) && (zsys_interrupted || zmq_errno() == ETERM)) {
            rc = KVT_RUN_INTERRUPTED;
            break;
        }
    }
    zpoller_destroy(&poller);
    return rc;
}

// -------------------------------------------------------------- driver ----

static uint64_t s_live_clock(kvt_system_t *sys)
{
    return sys->live ? s_live_now(sys) : 0;
}

static int s_live_post(kvt_system_t *sys, kvt_actor_t *a, kvt_aid_t to, int kind, uint8_t *buf,
                       size_t len)
{
    (void)kind;
    int rc = s_live_send(sys, a, to, buf, len);
    free(buf);
    return rc;
}

static int s_live_run_for(kvt_system_t *sys, uint64_t until_ns, uint64_t max_events)
{
    (void)max_events;
    return s_live_run(sys, until_ns);
}

const kvt_driver_ops_t kvt_live_driver = {
    .name = "live",
    .remote_actors = true,
    .create = s_live_new,
    .destroy = s_live_destroy,
    .start = s_live_start,
    .run = s_live_run_for,
    .stop = s_live_stop,
    .now = s_live_clock,
    .send = s_live_post,
    .timer = s_live_timer,
    .cancel = s_live_cancel,
    .exit = s_live_exit,
};
