/*  kvt_runtime_int.h — private structures of the actor runtime, shared by
    its translation units (system, context, timers, SIM driver, LIVE driver,
    trace). Nothing outside src/runtime includes this header.

    Threading (LIVE): the topology (names, classes, endpoints, the name
    table) is written by the thread that builds the system, before any actor
    thread exists, and is read-only afterwards. Counters are C11 atomics with
    a single writer each (the owning actor's thread, or the posting thread for
    "$system"), so any thread may read them at any time. Everything else an
    actor thread touches lives in its kvt_live_actor_t, which that thread
    allocates and frees. The end of an actor thread is published with a
    release store (live_done) that kvt_system_stop acquires, so memory the
    thread wrote is visible (and may be freed) afterwards.
*/
#ifndef KVT_RUNTIME_INT_H_INCLUDED
#define KVT_RUNTIME_INT_H_INCLUDED

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kvtier/kvt_actor.h"

#define KVT_ENDPOINT_MAX 256       //  bytes in an endpoint string, NUL included
#define KVT_SYS_NAME_MAX 32        //  bytes in a system name, NUL included
#define KVT_NAME_TABLE   2048      //  slots in the name → aid table (power of 2)
#define KVT_SYSTEM_NAME  "$system" //  sender name of kvt_system_post

// ------------------------------------------------------------ counters ----

//  Indices of the per-actor counters (same meaning as kvt_actor_stats_t).
typedef enum {
    KVT_ST_DELIVERED = 0,
    KVT_ST_SENT,
    KVT_ST_SEND_ERRORS,
    KVT_ST_DECODE_ERRORS,
    KVT_ST_UNHANDLED,
    KVT_ST_HANDLER_ERRORS,
    KVT_ST_TIMERS_FIRED,
    KVT_ST_DROPPED_AT_STOP,
    KVT_ST_BAD_FRAMES,
    KVT_ST_DROPPED_DOWN,
    KVT_ST_DROPPED_FAULT,
    KVT_ST_TIMERS_LOST,
    KVT_ST_RESTARTS,
    KVT_ST_AUTH_REJECTED,
    KVT_ST_FOREIGN_FRAMES,
    KVT_ST_COUNT,
} kvt_stat_t;

//  Counters of one actor: one writer each, readable from any thread.
typedef struct {
    _Atomic uint64_t v[KVT_ST_COUNT]; //  indexed by kvt_stat_t
} kvt_counters_t;

//  Adds n to a counter. Only the counter's single writer calls this, so a
//  relaxed load + store is enough (no locked read-modify-write).
static inline void kvt_count_add(kvt_counters_t *c, kvt_stat_t which, uint64_t n)
{
    uint64_t v = atomic_load_explicit(&c->v[which], memory_order_relaxed);
    atomic_store_explicit(&c->v[which], v + n, memory_order_relaxed);
}

static inline void kvt_count(kvt_counters_t *c, kvt_stat_t which)
{
    kvt_count_add(c, which, 1);
}

static inline uint64_t kvt_count_get(kvt_counters_t *c, kvt_stat_t which)
{
    return atomic_load_explicit(&c->v[which], memory_order_relaxed);
}

// ------------------------------------------------------------- random -----

//  xoshiro256** state.
typedef struct {
    uint64_t s[4]; //  generator state, never all zero
} kvt_rng_t;

//  Seeds from a 64-bit value through splitmix64.
void kvt_rng_seed(kvt_rng_t *rng, uint64_t seed);
uint64_t kvt_rng_next(kvt_rng_t *rng);

// -------------------------------------------------------------- timers ----

//  One armed timer.
typedef struct {
    uint64_t deadline; //  driver time at which it fires
    uint64_t seq;      //  arm order: breaks ties between equal deadlines
    uint64_t tag;      //  the tag given to kvt_ctx_timer
    uint32_t slot;     //  index in the slot table (gives the timer id)
    kvt_aid_t owner;   //  actor that armed it
} kvt_timer_t;

//  A slot maps a timer id to the timer's place in the heap.
typedef struct {
    uint32_t gen; //  generation, part of the id; bumped on every free
    uint32_t pos; //  heap index while armed; next free slot while free
    bool armed;   //  the slot holds an armed timer
} kvt_timer_slot_t;

//  Min-heap of timers on (deadline, seq); arm / cancel / pop are O(log n).
typedef struct {
    kvt_timer_t *heap;       //  the heap array
    uint32_t n;              //  timers armed
    uint32_t cap;            //  capacity of heap
    kvt_timer_slot_t *slots; //  slot table
    uint32_t nslots;         //  slots in use or on the free list
    uint32_t slots_cap;      //  capacity of slots
    uint32_t free_head;      //  first free slot, UINT32_MAX if none
    uint64_t next_seq;       //  next arm sequence number
} kvt_timers_t;

void kvt_timers_init(kvt_timers_t *t);
void kvt_timers_fini(kvt_timers_t *t);
//  Arms a timer; returns its id (> 0) or 0 when memory ran out.
uint64_t kvt_timers_arm(kvt_timers_t *t, uint64_t deadline, uint64_t tag, kvt_aid_t owner);
//  Cancels timer `id` if `owner` armed it; 0, or -1 if fired/unknown/foreign.
int kvt_timers_cancel(kvt_timers_t *t, uint64_t id, kvt_aid_t owner);
//  Earliest deadline; false when no timer is armed.
bool kvt_timers_peek(const kvt_timers_t *t, uint64_t *deadline);
//  Removes and returns the earliest timer if its deadline is <= now.
bool kvt_timers_pop_due(kvt_timers_t *t, uint64_t now, kvt_timer_t *out);
//  Removes every timer armed by `owner` (O(n)); returns how many.
uint32_t kvt_timers_remove_owner(kvt_timers_t *t, kvt_aid_t owner);

// --------------------------------------------------------------- actor ----

typedef enum {
    KVT_ACTOR_IDLE = 0,    //  added, not started
    KVT_ACTOR_UP = 1,      //  init succeeded, handling messages
    KVT_ACTOR_CRASHED = 2, //  SIM: crashed, waiting for a restart
    KVT_ACTOR_STOPPED = 3, //  stop ran
} kvt_actor_state_t;

typedef struct _kvt_actor_t kvt_actor_t;
typedef struct _kvt_live_actor_t kvt_live_actor_t;

//  The handler context: which system, which actor.
struct _kvt_ctx_t {
    kvt_system_t *sys;  //  the system the actor runs in
    kvt_actor_t *actor; //  the actor this context belongs to
};

//  One entry of the topology.
struct _kvt_actor_t {
    kvt_aid_t aid;                   //  index in the topology
    char name[KVT_ACTOR_NAME_MAX];   //  NUL-terminated name
    const kvt_actor_class_t *cls;    //  class; NULL for a remote actor
    void *args;                      //  init argument (caller owns)
    bool remote;                     //  runs in another process (LIVE)
    char endpoint[KVT_ENDPOINT_MAX]; //  resolved inbox endpoint (LIVE)
    kvt_ctx_t ctx;                   //  the context handed to the class
    void *state;                     //  what init returned
    kvt_actor_state_t run_state;     //  lifecycle (SIM; LIVE: main thread's view)
    kvt_rng_t rng;                   //  kvt_ctx_rand generator
    kvt_counters_t stats;            //  runtime counters
    uint64_t decode_logged;          //  decode errors logged at warning level
    //  LIVE
    struct _zactor_t *zactor; //  the actor's thread (main thread owns)
    struct _zsock_t *inbox;   //  PULL socket, bound by main, then the thread's
    struct _zsock_t *authmon; //  PAIR reading a CURVE inbox's handshake failures (or NULL)
    kvt_live_actor_t *live;   //  thread-owned state (sockets, timers)
    _Atomic int live_init;    //  0 pending, 1 init ok, -1 init failed
    _Atomic bool live_done;   //  release-stored as the thread's last act
};

// -------------------------------------------------------------- system ----

typedef struct _kvt_sim_t kvt_sim_t;
typedef struct _kvt_live_t kvt_live_t;
typedef struct _kvt_trace_t kvt_trace_t;
typedef struct _kvt_curve_t kvt_curve_t;

typedef struct _kvt_driver_ops_t kvt_driver_ops_t;

struct _kvt_system_t {
    const kvt_driver_ops_t *ops;    //  the driver, chosen once by kvt_system_new
    uint64_t seed;                  //  system seed
    char name[KVT_SYS_NAME_MAX];    //  system name (inproc prefix, logs)
    int log_level;                  //  lines above this level are dropped
    uint64_t link_id;               //  deployment id every LIVE frame carries (0 = none)
    uint64_t lat_min_ns;            //  SIM latency floor
    uint64_t lat_jitter_ns;         //  SIM latency jitter range
    kvt_actor_t **actors;           //  topology, indexed by aid
    uint32_t nactors;               //  actors in the topology
    uint16_t names[KVT_NAME_TABLE]; //  open-addressed name table: aid + 1, 0 = empty
    bool started;                   //  kvt_system_start succeeded
    bool stopped;                   //  kvt_system_stop ran
    kvt_actor_t sysactor;           //  pseudo-actor "$system" for posts and logs
    kvt_sim_t *sim;                 //  SIM driver state (SIM only)
    kvt_live_t *live;               //  LIVE driver state (LIVE only)
    kvt_trace_t *trace;             //  delivery trace + hash (SIM only)
    kvt_curve_t *curve;             //  CURVE keys for tcp:// links (NULL: off)
};

//  Actor by id (local, remote or "$system"); NULL if unknown.
kvt_actor_t *kvt_system_actor(kvt_system_t *self, kvt_aid_t aid);
//  Id of a name (including "$system"), KVT_AID_NONE if unknown; `len`
//  bytes of `name` (not necessarily NUL-terminated).
kvt_aid_t kvt_system_find(kvt_system_t *self, const char *name, size_t len);

//  Writes one log line "<system> <time> <actor> <L>: text" to stderr.
void kvt_log_v(kvt_system_t *sys, const char *who, int level, const char *fmt, va_list ap);
void kvt_log(kvt_system_t *sys, const char *who, int level, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

//  Decodes one frame for actor `a` and runs its handler, counting decode
//  errors, unhandled kinds, deliveries and handler errors. Returns the trace
//  flags (KVT_TRACE_F_*); *kind_out is the decoded kind (0 if it failed).
int kvt_actor_dispatch(kvt_system_t *sys, kvt_actor_t *a, kvt_aid_t from, const uint8_t *buf,
                       size_t len, int *kind_out);
//  Runs actor `a`'s timer callback for `tag` (counts timers_fired).
void kvt_actor_fire(kvt_system_t *sys, kvt_actor_t *a, uint64_t tag);

//  Monotonic clock in nanoseconds.
uint64_t kvt_mono_ns(void);

// ------------------------------------------------------------- SIM --------

//  One fault rule.
typedef struct {
    kvt_fault_type_t type; //  drop / delay / duplicate
    kvt_aid_t from;        //  sender or KVT_ANY_ACTOR
    kvt_aid_t to;          //  receiver or KVT_ANY_ACTOR
    int kind;              //  message kind or KVT_ANY_KIND
    uint32_t remaining;    //  messages it still applies to
    uint32_t hits;         //  messages it applied to
    uint64_t delay_ns;     //  extra latency (DELAY)
} kvt_fault_rule_t;

//  The fault rules of a SIM system, in the order they were added.
typedef struct {
    kvt_fault_rule_t *rules; //  the rules
    uint32_t n;              //  length of rules
    uint32_t cap;            //  capacity of rules
    uint32_t active;         //  rules with remaining > 0 (0: nothing to check)
} kvt_faults_t;

void kvt_faults_fini(kvt_faults_t *f);
//  Finds the rule that applies to a message being sent: the first matching
//  one with hits left (its hit is counted). Returns its type, or 0 for none;
//  a DELAY rule's delay goes to *delay_ns.
kvt_fault_type_t kvt_faults_match(kvt_faults_t *f, kvt_aid_t from, kvt_aid_t to, int kind,
                                  uint64_t *delay_ns);
//  The rules of a SIM system; NULL for a LIVE one.
kvt_faults_t *kvt_sim_faults(kvt_system_t *sys);

// ------------------------------------------------------------ drivers -----

//  A driver: everything the system and the handler contexts ask of SIM or
//  LIVE, one table per driver, chosen once by kvt_system_new (as the device
//  layer's backends are). The system never asks which driver it runs.
struct _kvt_driver_ops_t {
    const char *name;   //  "sim" / "live"
    bool remote_actors; //  actors of other processes may join (kvt_system_add_remote)
    //  Creates the driver's state (sys->sim + sys->trace, or sys->live): 0 or -1.
    int (*create)(kvt_system_t *sys);
    //  Frees it; safe after a create that failed half-way.
    void (*destroy)(kvt_system_t *sys);
    //  Runs every local actor's init (binding inboxes first under LIVE): 0 or -1.
    int (*start)(kvt_system_t *sys);
    //  kvt_system_run: a KVT_RUN_* code or the code given to exit. LIVE
    //  ignores max_events.
    int (*run)(kvt_system_t *sys, uint64_t until_ns, uint64_t max_events);
    //  Runs every actor's stop and drops what is still in flight.
    void (*stop)(kvt_system_t *sys);
    //  Driver time in ns (0 before the driver's state exists).
    uint64_t (*now)(kvt_system_t *sys);
    //  Sends an encoded frame from actor a (NULL: "$system") to `to` (a
    //  valid id); consumes buf (malloc'ed). 0, or -1 when it was not sent.
    int (*send)(kvt_system_t *sys, kvt_actor_t *a, kvt_aid_t to, int kind, uint8_t *buf,
                size_t len);
    //  Arms / cancels a timer of actor a (kvt_ctx_timer / kvt_ctx_cancel).
    uint64_t (*timer)(kvt_system_t *sys, kvt_actor_t *a, uint64_t after_ns, uint64_t tag);
    int (*cancel)(kvt_system_t *sys, kvt_actor_t *a, uint64_t id);
    //  Asks the run loop to return `code` (the first request wins).
    void (*exit)(kvt_system_t *sys, kvt_actor_t *a, int code);
};

extern const kvt_driver_ops_t kvt_sim_driver;  //  kvt_sim.c
extern const kvt_driver_ops_t kvt_live_driver; //  kvt_live.c

// --------------------------------------------------------------- curve ----
//  kvt_curve.c: the keys kvt_system_set_curve read, applied by the LIVE
//  driver to its tcp:// sockets.

void kvt_curve_destroy(kvt_curve_t **self_p);
//  Makes `sock` (a zsock_t) a CURVE server with this process's certificate.
void kvt_curve_server(kvt_curve_t *self, struct _zsock_t *sock);
//  Makes `sock` a CURVE client of the configured server key.
void kvt_curve_client(kvt_curve_t *self, struct _zsock_t *sock);
//  Holds the process's zauth actor (started on first use, shared by every
//  system of the process that binds a CURVE inbox): 0, or -1 with `err`.
int kvt_curve_auth_hold(kvt_curve_t *self, char *err, size_t errlen);
//  Releases a hold; the last one stops the zauth actor.
void kvt_curve_auth_release(kvt_curve_t *self);

// ------------------------------------------------------------ trace -------

#define KVT_TRACE_MAGIC       "KVTTRACE" //  8 bytes at offset 0
#define KVT_TRACE_VERSION     1          //  format version
#define KVT_TRACE_RECORD_SIZE 40         //  bytes per record
#define KVT_TRACE_DELIVERY    1          //  record type: a message handed to an actor
#define KVT_TRACE_TIMER       2          //  record type: a timer fired
#define KVT_TRACE_F_DECODE    0x01       //  delivery flag: the frame did not decode
#define KVT_TRACE_F_UNHANDLED 0x02       //  delivery flag: no handler for the kind

int kvt_trace_new(kvt_system_t *sys);
void kvt_trace_destroy(kvt_system_t *sys);
//  Opens the trace file (written from kvt_system_start on).
int kvt_trace_open(kvt_system_t *sys, const char *path);
//  Writes the header (topology) if a file is open and it was not written.
int kvt_trace_begin(kvt_system_t *sys);
//  Records one event: updates the hash and appends to the file if open.
void kvt_trace_record(kvt_system_t *sys, int type, int flags, int kind, kvt_aid_t from,
                      kvt_aid_t to, uint32_t size, uint64_t time, uint64_t digest);
void kvt_trace_flush(kvt_system_t *sys);
uint64_t kvt_trace_hash(kvt_system_t *sys);

#endif
