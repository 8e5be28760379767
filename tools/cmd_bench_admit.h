/*  cmd_bench_admit — the measurements of `kvtier bench admit`
    (cmd_bench_admit.c says what each one is): a core driven like an
    engine whose every load and save succeeds, and the three costs timed
    on it. Private to the command. */
#ifndef CMD_BENCH_ADMIT_H_INCLUDED
#define CMD_BENCH_ADMIT_H_INCLUDED

#include <stdint.h>

#define KVT_BADMIT_BS          16   //  tokens per block
#define KVT_BADMIT_CS          256  //  tokens per chunk
#define KVT_BADMIT_INTERVAL    1024 //  checkpoint interval (tokens)
#define KVT_BADMIT_STEP_PROMPT 2048 //  prompt of each running request in the step bench

typedef struct {
    const char *json;     //  --json PATH, or NULL
    uint32_t prompt;      //  --prompt-tokens
    uint32_t iterations;  //  --iterations (admissions and hash chains)
    uint32_t hashes;      //  --hashes
    uint32_t rounds;      //  --stats-rounds (256 reads each)
    uint32_t requests;    //  --requests
    uint32_t steps;       //  --steps
    uint32_t actor_reads; //  --actor-reads (Stats reads through the actor, at most)
} kvt_badmit_opts_t;

typedef struct {
    double admit_us, admit_cpu_us;  //  medians
    double hash_us, hash_cpu_us;    //  medians
    uint32_t hit, resume;           //  the HBM hit and the resume point B
    uint32_t floor;                 //  first token of the KV leg
    uint32_t block_hit;             //  the ungated block hit
    uint8_t joint_src;              //  1 state from HBM, 2 from the tier
    uint32_t hbm_blocks, tier_keys; //  geometry
} kvt_badmit_admit_t;

typedef struct {
    double us, cpu_us;   //  amortised per read (median over rounds)
    double deep_us;      //  the round's deep read (median over rounds)
    double cheap_us;     //  the other reads of a round, each (median over rounds)
    uint64_t images;     //  images indexed when read
    uint64_t violations; //  invariant violations the reads counted
} kvt_badmit_stats_t;

typedef struct {
    double us, cpu_us; //  per Stats read through the actor, amortised over whole audit periods
    double deep_us;    //  the slowest read that ran a deep audit
    double other_us;   //  the other reads (median)
    uint32_t reads;    //  reads in the measured span
    uint64_t audits;   //  deep audits in the measured span
    uint32_t blocks;   //  HBM blocks of the core
    uint64_t images;   //  images its index held
} kvt_badmit_actor_t;

typedef struct {
    double us, cpu_us; //  per step (medians)
    uint32_t entries;  //  fewest entries a measured plan carried
    uint64_t saves;    //  saves the measured plans carried
    uint64_t takes;    //  checkpoints the measured plans took
} kvt_badmit_step_t;

//  Each measurement: 0, or -1 (a message on stderr) when its state could
//  not be built or came out other than it must.
int kvt_badmit_admit(const kvt_badmit_opts_t *o, kvt_badmit_admit_t *out);
int kvt_badmit_stats(const kvt_badmit_opts_t *o, kvt_badmit_stats_t *out);
int kvt_badmit_step(const kvt_badmit_opts_t *o, kvt_badmit_step_t *out);
int kvt_badmit_actor(const kvt_badmit_opts_t *o, kvt_badmit_actor_t *out);

//  The prompt of running request r of n in the step bench: staggered over
//  a chunk, so that every few steps some request completes a chunk.
uint32_t kvt_badmit_step_len(uint32_t r, uint32_t n);

#endif
