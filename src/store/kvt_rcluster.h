/*  kvt_rcluster.h — a Redis Cluster client over hiredis: what the cluster
    specification prescribes and no more. Private to src/store.

    * Key slots: CRC16 (XMODEM) of the key, or of its hash tag (the bytes
      between the first `{` and the next `}` when that is not empty), mod
      16384.
    * The slot map comes from CLUSTER SLOTS, asked of any reachable node
      (seeds first); it is refreshed after a MOVED redirect, after a
      connection fails, and on demand.
    * One connection per node, opened when a slot first routes to it.
    * A batch is pipelined: every command is appended to its node's
      connection before any reply is read; the replies are read node by
      node. MOVED updates the slot's owner (and schedules a refresh) and the
      command is sent again; ASK sends ASKING and the command to the named
      node once, without changing the map. A command redirected more than
      max_redirects times, or whose node cannot be reached, fails
      (status < 0); the other commands of the batch are unaffected.

    Not thread-safe: the caller serialises calls (the remote tier holds a
    lock around them).
*/
#ifndef KVT_RCLUSTER_H_INCLUDED
#define KVT_RCLUSTER_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KVT_RC_SLOTS 16384 //  hash slots of a Redis Cluster

typedef struct _kvt_rcluster_t kvt_rcluster_t;

//  Creation settings; kvt_rcluster_config_defaults fills every field.
typedef struct {
    uint32_t connect_timeout_ms; //  per connection attempt, default 500
    uint32_t io_timeout_ms;      //  per reply, default 1000
    uint32_t max_redirects;      //  MOVED / ASK hops per command, default 5
    uint32_t max_nodes;          //  nodes the client tracks, default 64
} kvt_rcluster_config_t;

//  One command of a batch.
typedef enum {
    KVT_RC_GET = 1,    //  GET key: status 0 and the value, or 1 (nil)
    KVT_RC_SET = 2,    //  SET key value: status 0
    KVT_RC_EXISTS = 3, //  EXISTS key: status 0 (present) or 1 (absent)
    KVT_RC_DEL = 4,    //  DEL key: status 0 (deleted) or 1 (absent)
} kvt_rc_op_t;

//  Command outcomes (status field).
enum {
    KVT_RC_OK = 0,          //  done / present
    KVT_RC_NIL = 1,         //  absent
    KVT_RC_EDOWN = -1,      //  the node for its slot could not be reached (or no node owns it)
    KVT_RC_EREDIRECT = -2,  //  more than max_redirects MOVED / ASK hops
    KVT_RC_EREPLY = -3,     //  an error reply (CLUSTERDOWN, TRYAGAIN, OOM, ...) or a bad type
    KVT_RC_ENOMEM = -4,     //  a buffer could not be allocated
    KVT_RC_ENOTQUEUED = -5, //  never sent (the batch was refused)
};

typedef struct {
    kvt_rc_op_t op;    //  what to do
    const char *key;   //  the key's bytes (borrowed)
    size_t keylen;     //  its length
    const void *value; //  SET: the value's bytes (borrowed)
    size_t valuelen;   //  SET: its length
    int status;        //  out: KVT_RC_OK, KVT_RC_NIL or a negative KVT_RC_E*
    void *reply;       //  out, GET hit: malloc'd copy of the value (the caller frees it)
    size_t replylen;   //  out, GET hit: its length
    uint32_t hops;     //  out: redirects this command followed
} kvt_rc_cmd_t;

//  Counters (cumulative).
typedef struct {
    uint64_t batches;      //  kvt_rcluster_exec calls
    uint64_t commands;     //  commands sent (each redirect resend counts again)
    uint64_t moved;        //  MOVED replies followed
    uint64_t asked;        //  ASK replies followed
    uint64_t refreshes;    //  slot map refreshes that succeeded
    uint64_t refresh_fail; //  refreshes that reached no node or got a bad reply
    uint64_t connects;     //  connections opened
    uint64_t conn_errors;  //  connections that failed to open or broke mid-batch
    uint64_t errors;       //  commands that ended with a negative status
} kvt_rcluster_stats_t;

void kvt_rcluster_config_defaults(kvt_rcluster_config_t *cfg);

//  Seeds: "redis://HOST:PORT[,HOST:PORT...]" or "HOST:PORT[,...]". Loads the
//  slot map from the first seed that answers. NULL with a message naming
//  the bad seed or the failure in err.
kvt_rcluster_t *kvt_rcluster_new(const char *seeds, const kvt_rcluster_config_t *cfg, char *err,
                                 size_t errlen);

//  Closes every connection (NULL-safe, nulls the pointer).
void kvt_rcluster_destroy(kvt_rcluster_t **self_p);

//  The slot of a key (with its hash tag, if any).
uint16_t kvt_rcluster_slot(const void *key, size_t len);

//  Runs a batch; every command gets a status. Returns how many failed
//  (status < 0).
size_t kvt_rcluster_exec(kvt_rcluster_t *self, kvt_rc_cmd_t *cmds, size_t n);

//  Reloads the slot map now. 0, or -1 when no node gave a usable map.
int kvt_rcluster_refresh(kvt_rcluster_t *self);

//  "HOST:PORT" of the node the map routes slot to, or NULL (borrowed).
const char *kvt_rcluster_node_of(kvt_rcluster_t *self, uint16_t slot);

void kvt_rcluster_stats(const kvt_rcluster_t *self, kvt_rcluster_stats_t *st);

#endif
