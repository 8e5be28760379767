/*  kvt_sched_bench — see kvt_sched_bench.h. */
#include "kvt_sched_bench.h"

#include "kvt_sched_int.h"

uint32_t kvt_sched_bench_deep_every(void)
{
    return KVT_STIDX_DEEP_EVERY;
}

int kvt_sched_bench_note_images(kvt_sched_t *self, const kvt_hash_t *h, uint32_t n, uint64_t now_us)
{
    if (!self->stidx)
        return -1;
    for (uint32_t i = 0; i < n; i++)
        kvt_stidx_note_stored(self->stidx, h[i], now_us);
    return 0;
}

int kvt_sched_bench_index_read(kvt_sched_t *self, uint64_t *images, uint64_t *violations)
{
    if (!self->stidx)
        return -1;
    kvt_stidx_stats_t st;
    kvt_stidx_stats(self->stidx, &st);
    *images = st.images;
    *violations = st.invariant_violations;
    return 0;
}
