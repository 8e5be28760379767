/*  kvt_actor.h — the actor runtime: actor classes, the handler context, and
    the system that runs a set of actors under one of two drivers.

    An actor is a handler table over message kinds plus init / stop. Handlers
    get a context (kvt_ctx_t) and reach the world only through it: send,
    timers, now, a seeded random source, logging. They never read the wall
    clock, sleep or start threads. That is what lets the same actor code run

    * under the LIVE driver: one thread per actor (czmq zactor), its inbox a
      ZeroMQ PULL socket bound at its endpoint — inproc://, ipc://DIR/NAME or
      tcp://HOST:PORT — and timers on the monotonic clock; and
    * under the SIM driver: every actor in the calling thread, a virtual
      clock, a seeded choice of the next delivery among deliverable messages
      (FIFO per sender→receiver channel), fault hooks, and a trace of every
      delivery whose hash is the same for the same seed, run after run.

    Messages always go through the real codec (kvt_msg_encode / decode), under
    both drivers. A frame that fails to decode is counted on the receiving
    actor (decode_errors), logged with the kind and field, and dropped; the
    actor keeps running.

    Addresses are actor ids (kvt_aid_t), dense indices into the system's
    topology in the order actors were added. Processes that share actors over
    ipc/tcp build the same topology (same names, same order); frames carry the
    sender's name, so a mismatch is detected and counted, never misrouted.
*/
#ifndef KVT_ACTOR_H_INCLUDED
#define KVT_ACTOR_H_INCLUDED

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvt_msg.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef uint16_t kvt_aid_t;       //  actor id within a system
#define KVT_AID_NONE       0xFFFF //  "no actor" / lookup miss
#define KVT_AID_SYSTEM     0xFFFE //  sender of kvt_system_post messages ("$system")
#define KVT_MAX_ACTORS     1024   //  actors in one topology
#define KVT_ACTOR_NAME_MAX 48     //  bytes in an actor name

typedef struct _kvt_ctx_t kvt_ctx_t;       //  handler context (one per actor)
typedef struct _kvt_system_t kvt_system_t; //  a set of actors and a driver

//  Handler for one message kind. `msg` is the decoded message; the handler
//  may take ownership of its arrays by moving the pointers out and setting
//  them to NULL (the driver calls kvt_msg_clear afterwards). Return 0; a
//  negative return is counted as handler_errors and logged, never fatal.
typedef int(kvt_handler_fn)(kvt_ctx_t *ctx, void *self, kvt_aid_t from, kvt_msg_t *msg);

//  Timer callback: `tag` is what kvt_ctx_timer was given.
typedef void(kvt_timer_fn)(kvt_ctx_t *ctx, void *self, uint64_t tag);

//  An actor class: what runs inside one actor.
typedef struct {
    const char *type;                          //  class name for logs ("scheduler")
    void *(*init)(kvt_ctx_t *ctx, void *args); //  builds the state; NULL = failed to start
    void (*stop)(kvt_ctx_t *ctx, void *self);  //  destroys the state (crash and shutdown)
    kvt_handler_fn *on[KVT_MSG_KIND_COUNT];    //  per-kind handler; NULL = counted unhandled
    kvt_timer_fn *on_timer;                    //  timer callback (may be NULL if unused)
} kvt_actor_class_t;

// ------------------------------------------------------------- context ----

//  Encodes msg and sends it to actor `to`. Returns 0, or -1 when `to` is
//  unknown or the message does not encode (counted as send_errors). The
//  caller keeps ownership of msg.
int kvt_ctx_send(kvt_ctx_t *ctx, kvt_aid_t to, const kvt_msg_t *msg);

//  Id of the actor named `name`, or KVT_AID_NONE.
kvt_aid_t kvt_ctx_lookup(kvt_ctx_t *ctx, const char *name);

//  This actor's id and name; the name of any actor id ("?" if unknown).
kvt_aid_t kvt_ctx_self(kvt_ctx_t *ctx);
const char *kvt_ctx_name(kvt_ctx_t *ctx, kvt_aid_t aid);

//  Arms a one-shot timer that calls on_timer (ctx, self, tag) after
//  `after_ns` nanoseconds of driver time. Returns a timer id (> 0) for
//  kvt_ctx_cancel, or 0 on failure.
uint64_t kvt_ctx_timer(kvt_ctx_t *ctx, uint64_t after_ns, uint64_t tag);

//  Cancels an armed timer; returns 0, or -1 if it already fired or is unknown.
int kvt_ctx_cancel(kvt_ctx_t *ctx, uint64_t timer_id);

//  Driver time in nanoseconds: virtual under SIM, monotonic since the system
//  started under LIVE.
uint64_t kvt_ctx_now(kvt_ctx_t *ctx);

//  Next value of this actor's seeded generator (seeded from the system seed
//  and the actor's name, so it is the same run after run).
uint64_t kvt_ctx_rand(kvt_ctx_t *ctx);

//  Logging. Levels: 0 error, 1 warning, 2 info, 3 debug. Lines carry driver
//  time and the actor name; the system's log level filters them.
void kvt_ctx_log(kvt_ctx_t *ctx, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

//  Asks the system to stop with `code` (e.g. the engine finished its trace).
//  Under SIM, kvt_system_run returns after the current handler; under LIVE,
//  kvt_system_run returns the code and kvt_system_stop shuts every actor down.
void kvt_ctx_exit(kvt_ctx_t *ctx, int code);

//  The system this actor runs in (for the driver's clock, see below).
kvt_system_t *kvt_ctx_system(kvt_ctx_t *ctx);

// -------------------------------------------------------------- system ----

typedef enum {
    KVT_DRIVER_SIM = 1,  //  one thread, virtual clock, seeded delivery order
    KVT_DRIVER_LIVE = 2, //  one thread per actor, ZeroMQ inboxes
} kvt_driver_t;

typedef struct {
    kvt_driver_t driver; //  which driver runs the actors
    uint64_t seed;       //  seeds delivery order (SIM) and every actor's generator
    const char *name;    //  system name: prefixes inproc endpoints (default "kvt")
    int log_level;       //  0..3, default 1 (warnings)
    //  LIVE: the deployment this system belongs to (e.g. a hash of the
    //  namespace and the world size; 0 = none). Every frame carries it, and a
    //  frame with another one is dropped and counted (foreign_frames), so a
    //  process of another deployment reaching an endpoint is never handled.
    uint64_t link_id;
    //  SIM only: per-message network latency is lat_min_ns + rand % (lat_jitter_ns+1).
    uint64_t sim_lat_min_ns;    //  default 1000
    uint64_t sim_lat_jitter_ns; //  default 4000
} kvt_system_opts_t;

//  sim_lat_min_ns / sim_lat_jitter_ns of 0 select the defaults; this value
//  asks for exactly zero (e.g. no jitter, so simultaneous sends tie and only
//  the seeded choice orders them).
#define KVT_LAT_ZERO UINT64_MAX

//  Creates an empty system. NULL on bad options (logged).
kvt_system_t *kvt_system_new(const kvt_system_opts_t *opts);

//  Stops (if running) and destroys the system and every local actor.
void kvt_system_destroy(kvt_system_t **self_p);

//  Adds a local actor. `endpoint` may be NULL (inproc://<system>-<name>), or
//  an ipc:// or tcp:// endpoint the actor binds (LIVE) so other processes
//  can reach it. `args` is passed to init (and again on a SIM restart) and
//  must outlive the system. Returns the actor's id, or KVT_AID_NONE on a
//  duplicate name, a bad endpoint or a full topology.
kvt_aid_t kvt_system_add(kvt_system_t *self, const char *name, const kvt_actor_class_t *cls,
                         void *args, const char *endpoint);

//  Adds a remote actor: one that runs in another process and is reached at
//  `endpoint` (ipc:// or tcp://). LIVE only.
kvt_aid_t kvt_system_add_remote(kvt_system_t *self, const char *name, const char *endpoint);

//  CURVE on tcp:// links (LIVE). With it set, every local tcp:// inbox binds
//  as a CURVE server with `secret_key` and admits only clients whose public
//  key is in a certificate under `public_keys` (a zauth actor shared by the
//  process); every connection to a remote tcp:// actor is a CURVE client
//  with `secret_key` that expects the server key of `server_key` (NULL:
//  secret_key's own public key: one certificate for a whole deployment).
//  A handshake an inbox refuses is counted (auth_rejected) and nothing the
//  peer sent reaches a handler. inproc:// and ipc:// are not affected. The
//  files are read now: a missing or unreadable one, a certificate without
//  its secret key, or a public_keys that is not a directory fails with an
//  error naming the setting (curve_<field>) and the path in `err`, and
//  nothing is applied. Before start only. The SIM driver owns no sockets:
//  it keeps the keys and ignores them.
typedef struct {
    const char *secret_key;  //  this process's certificate, zcert format, with the secret key
    const char *public_keys; //  directory of the public certificates allowed to connect
    const char *server_key;  //  public certificate remote tcp inboxes present (NULL: own)
} kvt_curve_opts_t;

int kvt_system_set_curve(kvt_system_t *self, const kvt_curve_opts_t *opts, char *err,
                         size_t errlen);

//  For a czmq socket (zsock_t *) of the caller's own that connects to
//  `endpoint` of this topology (a liveness watch): makes it a CURVE client
//  as the system's own links are when the endpoint is tcp:// and CURVE is
//  set; nothing otherwise.
void kvt_system_secure_client(kvt_system_t *self, void *zsock, const char *endpoint);

//  Id of an actor by name, or KVT_AID_NONE.
kvt_aid_t kvt_system_lookup(kvt_system_t *self, const char *name);

//  Sends a message into the system from outside any actor (the sender name is
//  "$system"). Used to kick off work and by tests.
int kvt_system_post(kvt_system_t *self, kvt_aid_t to, const kvt_msg_t *msg);

//  Starts the actors (LIVE: threads with the zactor handshake; SIM: calls
//  every init in topology order). Returns 0, or -1 if an actor failed to
//  start (the ones that started are stopped again).
int kvt_system_start(kvt_system_t *self);

//  SIM: runs deliveries and timers until an actor calls kvt_ctx_exit, the
//  system is quiescent (no message in flight, no timer armed), virtual time
//  passes `until_ns` (0 = no limit) or `max_events` deliveries + timers ran
//  (0 = no limit). Returns the exit code if an actor exited, otherwise
//  KVT_RUN_QUIESCENT / KVT_RUN_TIME_LIMIT / KVT_RUN_EVENT_LIMIT.
//  LIVE: blocks until an actor calls kvt_ctx_exit or `until_ns` of wall
//  time passed (0 = forever); returns the exit code or KVT_RUN_TIME_LIMIT.
#define KVT_RUN_QUIESCENT   (-100)
#define KVT_RUN_TIME_LIMIT  (-101)
#define KVT_RUN_EVENT_LIMIT (-102)
#define KVT_RUN_INTERRUPTED (-103) //  LIVE: SIGINT/SIGTERM (czmq's handler) or context ended
int kvt_system_run(kvt_system_t *self, uint64_t until_ns, uint64_t max_events);

//  Stops every local actor: LIVE sends $TERM, each actor drains its inbox
//  (counting what it drops: dropped_at_stop) and calls its class's stop;
//  SIM calls stop in reverse topology order and discards in-flight messages
//  (counted). Idempotent.
void kvt_system_stop(kvt_system_t *self);

//  The driver's clock, for components outside actors that must follow it
//  (the host device backend lands copies on this clock under SIM).
uint64_t kvt_system_now(kvt_system_t *self);

//  Per-actor runtime counters.
typedef struct {
    uint64_t delivered;       //  messages handed to a handler
    uint64_t sent;            //  messages sent by this actor
    uint64_t send_errors;     //  sends that failed (unknown peer, encode error)
    uint64_t decode_errors;   //  frames that failed to decode (dropped)
    uint64_t unhandled;       //  kinds with no handler (dropped)
    uint64_t handler_errors;  //  handlers that returned < 0
    uint64_t timers_fired;    //  timer callbacks run
    uint64_t dropped_at_stop; //  messages left in the inbox at shutdown
    uint64_t bad_frames;      //  LIVE frames dropped undecoded: unknown sender, wrong part count
    uint64_t dropped_down;    //  SIM messages to this actor lost while it was crashed
    uint64_t dropped_fault;   //  SIM messages to this actor dropped by a fault rule
    uint64_t timers_lost;     //  armed timers discarded by a crash or a stop
    uint64_t restarts;        //  SIM restarts of this actor
    uint64_t auth_rejected;   //  LIVE CURVE handshakes this actor's tcp:// inbox refused
    uint64_t foreign_frames;  //  LIVE frames of another deployment (link_id differs), dropped
} kvt_actor_stats_t;

//  Copies actor `aid`'s counters (LIVE: safe after stop, or from the actor's
//  own thread). Returns 0, or -1 for an unknown / remote actor.
//  (Counters are atomics, so any thread may read them at any time; values
//  read while the actor runs are a snapshot. KVT_AID_SYSTEM gives the
//  posting side's counters: sent, send_errors.)
int kvt_system_actor_stats(kvt_system_t *self, kvt_aid_t aid, kvt_actor_stats_t *out);

//  The endpoint actor `aid` is reached at: its inbox as bound (LIVE, after
//  kvt_system_start: a tcp:// wildcard port resolved to the real port), or
//  as configured before start. NULL for an unknown id. Borrowed string,
//  valid until the system is destroyed.
const char *kvt_system_endpoint(kvt_system_t *self, kvt_aid_t aid);

//  Test and tool hook: delivers `len` raw bytes to `to` as if they were an
//  encoded message from "$system" (no encoding; the receiver decodes as
//  usual, so garbage is counted as decode_errors). Returns 0 or -1.
int kvt_system_post_raw(kvt_system_t *self, kvt_aid_t to, const void *bytes, size_t len);

// ---------------------------------------------------- SIM fault hooks -----

#define KVT_ANY_ACTOR KVT_AID_NONE //  wildcard in fault rules
#define KVT_ANY_KIND  0            //  wildcard kind

typedef enum {
    KVT_FAULT_DROP = 1,      //  the message is lost
    KVT_FAULT_DELAY = 2,     //  delivered delay_ns later (FIFO on its channel kept)
    KVT_FAULT_DUPLICATE = 3, //  delivered twice
} kvt_fault_type_t;

//  Applies `type` to the next `count` messages matching from → to of `kind`
//  (wildcards allowed). Rules are checked at send time in the order added.
//  Returns a rule id (> 0) or 0 on bad arguments / LIVE driver.
int kvt_sim_fault(kvt_system_t *self, kvt_fault_type_t type, kvt_aid_t from, kvt_aid_t to, int kind,
                  uint32_t count, uint64_t delay_ns);

//  How many messages rule `rule_id` has hit so far.
uint32_t kvt_sim_fault_hits(kvt_system_t *self, int rule_id);

//  Crashes a local actor: its state is destroyed (class stop), its inbox and
//  armed timers are lost (counted), and messages to it are dropped until it
//  is restarted. Returns 0 or -1.
int kvt_sim_crash(kvt_system_t *self, kvt_aid_t aid);

//  Restarts a crashed actor: init runs again with the same args.
int kvt_sim_restart(kvt_system_t *self, kvt_aid_t aid);

//  Records every delivery (virtual time, from, to, kind, size, digest of
//  the frame bytes) to `path` in the binary trace format read by
//  kvt_trace_print. Call before kvt_system_start. Returns 0 or -1.
int kvt_sim_trace_open(kvt_system_t *self, const char *path);

//  Hash over every delivery so far (XXH3-64 over the records): the same seed
//  gives the same hash, run after run.
uint64_t kvt_sim_trace_hash(kvt_system_t *self);

//  Deliveries + timers run so far.
uint64_t kvt_sim_events(kvt_system_t *self);

//  Prints a recorded trace file readably to `out` (a FILE *). Returns 0, or
//  -1 with a message naming what was wrong with the file.
int kvt_trace_print(const char *path, void *out);

#ifdef __cplusplus
}
#endif
#endif
