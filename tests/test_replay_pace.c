/*  One clock for the replay's modelled engine and its data path (issue 16
    §1): paced, a step spends its modelled time on the driver's clock and
    the SIM devices copy at the cost model's host link, so a save takes in
    modelled time what its real bytes would; unpaced, a step spends only
    its messages' driver time and lanes copying on the driver's clock look
    hundreds of times slower in modelled time. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvtier/kvt_config.h"
#include "replay/kvt_cost.h"
#include "replay/kvt_replay.h"

#define TRACE KVT_SOURCE_DIR "/../shared/traces/conversation_trace.jsonl"

static kvt_replay_report_t *s_run(const kvt_replay_cfg_t *cfg)
{
    kvt_replay_report_t *r = calloc(1, sizeof *r);
    char err[512];
    cr_assert_eq(kvt_replay_run(cfg, r, err, sizeof err), 0, "%s", err);
    cr_assert_eq(r->engine.wrong_resumes, 0, "wrong resumes");
    cr_assert(r->quiescent, "not quiescent: %s", r->problem);
    cr_assert(r->engine.done);
    cr_assert(!r->failed, "the run failed: %s", r->failures);
    return r;
}

static void s_free(kvt_replay_report_t *r)
{
    kvt_replay_report_clear(r);
    free(r);
}

//  A closed loop starts the modelled clock at 0: model_time_us is the
//  modelled time from the first Schedule to the end.
static void s_small(kvt_replay_cfg_t *c)
{
    kvt_replay_defaults(c);
    c->limit = 48;
    c->closed_loop = 4;
    c->hbm_pool_bytes = 2ull << 20;
    c->cpu_pool_bytes = 32ull << 20;
    c->log_level = 0;
}

Test(replay_pace, a_paced_step_spends_its_modelled_time_on_the_drivers_clock, .timeout = 120)
{
    kvt_replay_cfg_t c;
    s_small(&c);
    cr_assert(kvt_replay_paced(&c), "SIM with pace auto is paced");
    kvt_replay_report_t *p = s_run(&c);
    uint64_t model = p->engine.model_time_us, driver = p->engine.driver_us;
    //  The last step's own time passes after the last Schedule: at least
    //  the modelled time minus one step, at most it plus the messages'.
    cr_assert_gt(model, 1000000, "a modelled second at least: %llu us", (unsigned long long)model);
    cr_assert_geq(driver + 100000, model, "paced: driver %llu us, modelled %llu us",
                  (unsigned long long)driver, (unsigned long long)model);
    cr_assert_leq(driver, model + model / 20, "paced: driver %llu us, modelled %llu us",
                  (unsigned long long)driver, (unsigned long long)model);
    c.pace = KVT_OFF;
    cr_assert(!kvt_replay_paced(&c));
    kvt_replay_report_t *u = s_run(&c);
    //  The same modelled run (the cost model and admission are the core's),
    //  a sliver of it on the driver's clock.
    cr_assert_eq(u->engine.finished, p->engine.finished);
    cr_assert_lt(u->engine.driver_us * 20, u->engine.model_time_us,
                 "unpaced: driver %llu us, modelled %llu us",
                 (unsigned long long)u->engine.driver_us,
                 (unsigned long long)u->engine.model_time_us);
    s_free(p);
    s_free(u);
}

//  The clocks are anchored at the first Schedule, not at modelled 0: a
//  trace whose first request comes at 50 s does not wait 50 s of driver
//  time for it.
Test(replay_pace, the_clocks_are_anchored_at_the_first_schedule, .timeout = 60)
{
    char path[128];
    snprintf(path, sizeof path, "/tmp/kvt-replay-pace-%d.jsonl", (int)getpid());
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    for (int i = 0; i < 8; i++)
        fprintf(f,
                "{\"timestamp\": %d, \"input_length\": 700, \"output_length\": 8, "
                "\"hash_ids\": [1, %d]}\n",
                50000 + i * 200, 2 + i);
    cr_assert_eq(fclose(f), 0);
    kvt_replay_cfg_t c;
    s_small(&c);
    c.closed_loop = 0;
    c.limit = 0;
    c.trace = path;
    kvt_replay_report_t *r = s_run(&c);
    unlink(path);
    uint64_t model = r->engine.model_time_us, driver = r->engine.driver_us;
    cr_assert_gt(model, 51000000, "modelled %llu us", (unsigned long long)model);
    //  From the first Schedule (at 50 s) to the end.
    cr_assert_geq(driver + 100000, model - 50000000, "driver %llu us, modelled %llu us",
                  (unsigned long long)driver, (unsigned long long)model);
    cr_assert_lt(driver, model - 45000000, "driver %llu us, modelled %llu us",
                 (unsigned long long)driver, (unsigned long long)model);
    s_free(r);
}

Test(replay_pace, auto_is_paced_under_sim_only_and_on_or_off_wins)
{
    kvt_replay_cfg_t c;
    kvt_replay_defaults(&c);
    cr_assert_eq(c.pace, KVT_AUTO);
    c.driver = KVT_DRIVER_SIM;
    cr_assert(kvt_replay_paced(&c));
    c.driver = KVT_DRIVER_LIVE;
    cr_assert(!kvt_replay_paced(&c), "a live replay would take the modelled time in wall time");
    c.pace = KVT_ON;
    cr_assert(kvt_replay_paced(&c));
    c.driver = KVT_DRIVER_SIM;
    c.pace = KVT_OFF;
    cr_assert(!kvt_replay_paced(&c));
}

//  Paced, a stored byte crosses in the time of the real bytes it stands for
//  on the slower host link; unpaced the old 25 GB/s; a caller's own wins.
Test(replay_pace, paced_sim_copies_run_at_the_cost_models_host_link)
{
    kvt_replay_cfg_t c;
    kvt_replay_defaults(&c);
    kvt_cost_cfg_t cost;
    kvt_cost_defaults(&cost, "dense", c.tp);
    double stored = (double)c.planes * c.layers * c.token_bytes;
    double want = 51e9 / (cost.kv_token_bytes / stored); //  73,728 real bytes per 128 stored
    cr_assert_eq(stored, 128);
    cr_assert(fabs((double)kvt_replay_sim_bw(&c, &cost) - want) < 2, "%llu",
              (unsigned long long)kvt_replay_sim_bw(&c, &cost));
    cost.d2h_GBps = 10; //  the slower direction bounds both
    cr_assert(fabs((double)kvt_replay_sim_bw(&c, &cost) - want * 10 / 51) < 2);
    c.pace = KVT_OFF;
    cr_assert_eq(kvt_replay_sim_bw(&c, &cost), 25000000000ull);
    c.sim_bw_Bps = 7000000;
    cr_assert_eq(kvt_replay_sim_bw(&c, &cost), 7000000);
    c.pace = KVT_ON;
    cr_assert_eq(kvt_replay_sim_bw(&c, &cost), 7000000);
}

//  One instance on a slice of the trace, hybrid, with a 2 s save deadline:
//  unpaced, the lanes copy on a driver clock hundreds of times behind the
//  modelled one and saves pass their deadline; paced, every save is stored
//  in time, and each save's copy took its real bytes' time on the link.
Test(replay_pace, paced_saves_keep_their_deadline_on_a_busy_engine, .timeout = 240)
{
    kvt_replay_cfg_t c;
    kvt_replay_defaults(&c);
    c.trace = TRACE;
    //  300 requests under every build: at 250 an ASan run's paced replay
    //  resumed fewer tokens than its unpaced one (the paced engine waits on
    //  the driver's clock, which a sanitizer slows).
    c.limit = 300;
    c.instances = 1;
    c.model = "qwen3-next-like";
    c.state_bytes = 205824;
    c.checkpoint_interval = 1024;
    c.hbm_pool_bytes = 32ull << 30;
    c.cpu_pool_bytes = 256ull << 30;
    c.byte_scale = kvt_replay_byte_scale(&c);
    c.load_deadline_us = 2000000;
    c.log_level = 0;
    c.mem_overcommit = true;
    c.pace = KVT_OFF;
    kvt_replay_report_t *u = s_run(&c);
    cr_assert_gt(u->saves_failed, 0, "unpaced: %llu saves past the deadline",
                 (unsigned long long)u->saves_failed);
    c.pace = KVT_ON;
    kvt_replay_report_t *p = s_run(&c);
    cr_assert_eq(p->saves_failed, 0, "paced: %llu saves past the deadline",
                 (unsigned long long)p->saves_failed);
    cr_assert_gt(p->saves_ok, u->saves_ok);
    uint64_t hp = p->engine.hbm_hit_tokens + p->engine.tier_hit_tokens;
    uint64_t hu = u->engine.hbm_hit_tokens + u->engine.tier_hit_tokens;
    cr_assert_gt(hp, hu, "paced %llu, unpaced %llu hit tokens", (unsigned long long)hp,
                 (unsigned long long)hu);
    //  The saves' copies took at least their real bytes' time on the link:
    //  a stored byte is 12,288 / 128 = 96 real ones, 51 GB/s of real bytes
    //  is 531 stored bytes per us (at 25 GB/s of stored bytes the same
    //  saves took 1.6 s here, against 2.7 s at the link).
    uint64_t us = kvt_replay_counter(p, "worker.0", "worker.transfer_us.save.sum");
    uint64_t bytes = kvt_replay_counter(p, "worker.0", "worker.transfer_bytes.save.sum");
    cr_assert_gt(bytes, 0);
    cr_assert_geq((double)us, (double)bytes / (51e3 / 96), "%llu stored bytes saved in %llu us",
                  (unsigned long long)bytes, (unsigned long long)us);
    s_free(u);
    s_free(p);
}
