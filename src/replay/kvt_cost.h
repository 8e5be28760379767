/*  kvt_cost — the modelled engine's cost model, in real units.

    A step costs a fixed part (launch and the weight read of one forward)
    plus, per computed token, the forward's compute (1 / prefill_tps) and,
    per computed token and per token of context it attends to, the
    attention's (attn_ps); a decode token also reads its context's KV from
    device memory (kv_token_bytes / hbm_GBps per context token). A load
    costs its copy: a fixed latency plus the real bytes (KV of the restored
    tokens and, for a hybrid model, the state image) over the host-to-device
    link, and for the part read from disk a disk latency plus those bytes
    over the disk's bandwidth first. A save costs device-to-host bandwidth
    only: it runs beside the step, never in it.

    The defaults (kvt_cost_defaults) stand for a named model and GPU
    (docs/configuration.md gives each figure and its source). Pure
    functions: no clock, no state. */
#ifndef KVT_COST_H_INCLUDED
#define KVT_COST_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *name;      //  what the figures stand for (model, TP, GPU), for the report
    double prefill_tps;    //  forward throughput of one instance, tokens/s, no context
    double attn_ps;        //  attention: picoseconds per computed token per context token
    double step_us;        //  fixed cost of one step (launch + weight read), µs
    double hbm_GBps;       //  device memory bandwidth per rank (decode reads its KV); 0 = free
    double kv_token_bytes; //  real KV bytes per token per rank
    double state_bytes;    //  real recurrent state bytes per request per rank (0 = dense)
    double h2d_GBps;       //  CPU → device copy bandwidth per rank; 0 = free
    double h2d_lat_us;     //  fixed latency of one load's copy, µs
    double d2h_GBps;       //  device → CPU copy bandwidth per rank (saves); 0 = free
    double disk_GBps;      //  disk → CPU read bandwidth per rank; 0 = free
    double disk_lat_us;    //  fixed latency of one load's disk read, µs
} kvt_cost_cfg_t;

//  The defaults of a model preset ("dense", "qwen3-next-like",
//  "kimi-linear-like"; anything else: dense) at tp ranks (the KV per rank
//  shrinks with TP where the model's KV heads split). kv_token_bytes and
//  state_bytes are the real model's.
void kvt_cost_defaults(kvt_cost_cfg_t *c, const char *model, uint32_t tp);

//  A knob by name (`prefill_tps=30000`, the field names above): 0, or -1
//  with err naming the knob or the bad value.
int kvt_cost_set(kvt_cost_cfg_t *c, const char *assignment, char *err, size_t errlen);

//  One step's work, summed over its entries.
typedef struct {
    uint64_t tokens;     //  tokens computed (prefill and decode)
    double attn_pairs;   //  sum over computed tokens of the context each attends to
    uint64_t decode_ctx; //  sum over decode tokens of their context (KV read), tokens
} kvt_cost_work_t;

//  Adds an entry computing [start, end) (a decode when start >= prompt).
void kvt_cost_work_add(kvt_cost_work_t *w, uint32_t start, uint32_t end, uint32_t prompt);

//  What a step of that work costs, ns.
uint64_t kvt_cost_step_ns(const kvt_cost_cfg_t *c, const kvt_cost_work_t *w);

//  What a load's copy costs, ns: tokens restored (disk_tokens of them
//  read from disk) and whether it carries a state image.
uint64_t kvt_cost_load_ns(const kvt_cost_cfg_t *c, uint64_t tokens, uint64_t disk_tokens,
                          int with_state);

//  Device-to-host link time a save of tokens (and an image) takes, ns.
uint64_t kvt_cost_save_ns(const kvt_cost_cfg_t *c, uint64_t tokens, int with_state);

#endif
