/*  kvt_replay_metrics — the replay's final counters onto a metrics
    endpoint. See kvt_replay.h. */
#include <stdlib.h>
#include <string.h>

#include "kvt_replay.h"

int kvt_replay_metrics_publish(kvt_metrics_t *m, const kvt_sim_engine_result_t *r)
{
    //  The result lists each reply's counters together, so one source per
    //  run of the same actor (an actor's rt.* come in a later run: a second
    //  source of the same name, whose series are distinct).
    uint32_t n = r->ncounters, ns = 0;
    kvt_counter_t *c = n ? malloc((size_t)n * sizeof *c) : NULL;
    kvt_metrics_source_t *src = n ? malloc((size_t)n * sizeof *src) : NULL;
    int rc = -1;
    if (n && (!c || !src))
        goto cleanup;
    for (uint32_t i = 0; i < n; i++) {
        c[i] = r->counters[i].c;
        if (ns == 0 || strcmp(src[ns - 1].source, r->counters[i].actor) != 0)
            src[ns++] = (kvt_metrics_source_t){r->counters[i].actor, &c[i], 0};
        src[ns - 1].n++;
    }
    if (ns > KVT_METRICS_MAX_SOURCES)
        ns = KVT_METRICS_MAX_SOURCES;
    rc = kvt_metrics_publish(m, src, ns);
cleanup:
    free(c);
    free(src);
    return rc;
}
