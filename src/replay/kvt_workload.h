/*  kvt_workload — the requests a replay feeds to the engine.

    Two sources, one shape (Mooncake's): each request has an arrival time,
    an input length, an output length and the ids of its 512-token blocks,
    where an id names a block *and every block before it* (a prefix id), so
    two requests whose first k ids agree share their first k × 512 tokens.

    * kvt_workload_mooncake reads a Mooncake jsonl trace through
      kvt_trace_reader (strict JSON, one object per line, a line bound):
      `timestamp` (ms, integer ≥ 0), `input_length` (≥ 1), `output_length`
      (≥ 0; 0 means a prefill-only request, which still produces its first
      token) and `hash_ids` (integers ≥ 0, exactly ceil (input_length / 512)
      of them). Unknown keys are ignored. Any other deviation is an error
      naming the line and the field; nothing is half-loaded. Requests are
      replayed in timestamp order (a stable sort).
    * kvt_workload_synthetic generates seeded multi-turn sessions that share
      a system prompt: each turn's prompt is the previous turn's prompt (up
      to its last full block) plus new blocks, so prefixes repeat the way
      conversations do.

    Token ids are derived from the block ids (token j of block id h is a
    fixed function of (h, j)), so the system hashes real tokens and equal
    prefix ids give equal tokens. */
#ifndef KVT_WORKLOAD_H_INCLUDED
#define KVT_WORKLOAD_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

#define KVT_WL_BLOCK_TOKENS     512          //  tokens per trace block id
#define KVT_WL_MAX_IDS          2048         //  block ids per request (1 Mi tokens)
#define KVT_WL_MAX_TIMESTAMP_MS (1ull << 40) //  ~35 years of trace time

typedef struct {
    uint64_t arrival_us; //  arrival on the trace clock (µs)
    uint32_t input_len;  //  prompt tokens
    uint32_t output_len; //  tokens to generate (≥ 1)
    uint32_t *ids;       //  block ids, ceil (input_len / 512)
    uint32_t nids;       //  entries in ids
} kvt_wreq_t;

typedef struct {
    kvt_wreq_t *reqs;      //  requests in arrival order
    uint32_t n;            //  number of requests
    uint64_t input_tokens; //  sum of input lengths
    char source[256];      //  "mooncake:PATH" or "synthetic:..."
} kvt_workload_t;

//  Reads up to `limit` requests (0 = all) from a Mooncake jsonl trace, under
//  the default line bound (KVT_TRACE_MAX_LINE). NULL on error, with
//  "PATH:LINE: field 'x': what was wrong" in err.
kvt_workload_t *kvt_workload_mooncake(const char *path, uint32_t limit, char *err, size_t errlen);

typedef struct {
    uint64_t seed;          //  generator seed
    uint32_t sessions;      //  conversations (default 128)
    uint32_t turns;         //  turns per conversation (default 6)
    uint32_t system_blocks; //  shared system prompt, in 512-token blocks (default 4)
    uint32_t user_blocks;   //  new blocks per turn, at most (default 2)
    uint32_t max_output;    //  output tokens per turn, at most (default 256)
    uint64_t window_us;     //  sessions start within this window (default 60 s)
    uint64_t think_us;      //  mean gap between turns (default 8 s)
} kvt_synth_cfg_t;

//  Generates a synthetic workload (zero fields take their defaults), capped
//  at `limit` requests (0 = all). NULL only when out of memory.
kvt_workload_t *kvt_workload_synthetic(const kvt_synth_cfg_t *cfg, uint32_t limit);

void kvt_workload_destroy(kvt_workload_t **self_p);

//  Routes every request to one of n engine instances (inst_of[i]), by
//  prefix affinity: a request whose longest prefix already routed (its
//  leading block ids, each remembered with the last instance that saw it)
//  covers at least half its prompt goes where that prefix went, unless
//  that instance has more than twice the input tokens of the least loaded
//  one plus four times this prompt; any other goes to the least loaded
//  instance (fewest input tokens routed so far, the lowest index on a tie).
//  Deterministic. 0, or -1 when out of memory.
int kvt_workload_route(const kvt_workload_t *self, uint32_t n, uint32_t *inst_of);

//  A new workload of the requests with inst_of[i] == k, in order (its
//  source names the instance). NULL when out of memory.
kvt_workload_t *kvt_workload_subset(const kvt_workload_t *self, const uint32_t *inst_of,
                                    uint32_t k);

//  Stretches the arrivals: every request's arrival_us becomes
//  round (arrival_us x factor) (factor > 0; > 1 slows the offered load, < 1
//  compresses it). The order is kept (the map is monotone).
void kvt_workload_time_scale(kvt_workload_t *self, double factor);

//  Writes request i's input_len prompt tokens to out.
void kvt_workload_tokens(const kvt_workload_t *self, uint32_t i, uint32_t *out);

#endif
