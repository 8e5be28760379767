/*  test_auth.c — authenticated links (LIVE driver): CURVE on tcp://, the
    owner-only directory of ipc:// sockets, keys refused at start, and frames
    of another deployment (namespace / world size) dropped and counted.

    Every test binds loopback tcp:// on a free port and keeps its files in a
    fresh temporary directory, so Criterion's parallel processes never meet.
*/
#include <criterion/criterion.h>
#include <czmq.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/kvt_test_cli.h"
#include "kvtier/kvt_actor.h"
#include "kvtier/kvt_config.h"
#include "messages/kvt_msg_test.h"
#include "replay/kvt_rank.h"
#include "replay/kvt_replay.h"

// -------------------------------------------------------------- helpers ----

static char s_dir[64];       //  this test's directory
static char s_server[128];   //  the receiver's certificate (+ _secret)
static char s_client[128];   //  an allowed peer's certificate (+ _secret)
static char s_intruder[128]; //  a certificate nobody allowed (+ _secret)
static char s_allowed[128];  //  directory: the allowed peers' public certificates

static void s_save(zcert_t *cert, const char *path)
{
    cr_assert_eq(zcert_save(cert, path), 0, "save %s", path);
}

//  A directory with the three certificates; only the client's public one is
//  in the allowed directory.
static void s_keys(void)
{
    snprintf(s_dir, sizeof s_dir, "/tmp/kvt-auth-XXXXXX");
    cr_assert_not_null(mkdtemp(s_dir));
    snprintf(s_server, sizeof s_server, "%s/server.cert", s_dir);
    snprintf(s_client, sizeof s_client, "%s/client.cert", s_dir);
    snprintf(s_intruder, sizeof s_intruder, "%s/intruder.cert", s_dir);
    snprintf(s_allowed, sizeof s_allowed, "%s/allowed", s_dir);
    cr_assert_eq(mkdir(s_allowed, 0700), 0);
    zcert_t *server = zcert_new(), *client = zcert_new(), *intruder = zcert_new();
    s_save(server, s_server);
    s_save(client, s_client);
    s_save(intruder, s_intruder);
    char pub[160];
    snprintf(pub, sizeof pub, "%s/client.cert", s_allowed);
    cr_assert_eq(zcert_save_public(client, pub), 0);
    zcert_destroy(&server);
    zcert_destroy(&client);
    zcert_destroy(&intruder);
}

static void s_rmtree(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s_dir);
    cr_assert_eq(system(cmd), 0);
}

static kvt_system_t *s_live(const char *name, uint64_t link_id)
{
    kvt_system_opts_t o = {
        .driver = KVT_DRIVER_LIVE, .seed = 1, .name = name, .log_level = 0, .link_id = link_id};
    kvt_system_t *sys = kvt_system_new(&o);
    cr_assert_not_null(sys);
    return sys;
}

static void s_curve(kvt_system_t *sys, const char *secret, const char *server)
{
    char err[512];
    kvt_curve_opts_t co = {.secret_key = secret, .public_keys = s_allowed, .server_key = server};
    cr_assert_eq(kvt_system_set_curve(sys, &co, err, sizeof err), 0, "%s", err);
}

static void s_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

//  A receiving actor: counts what reaches its handlers.
static atomic_int s_got;
static void *s_rx_init(kvt_ctx_t *ctx, void *args)
{
    (void)ctx;
    return &s_got;
}
static int s_rx_on(kvt_ctx_t *ctx, void *self, kvt_aid_t from, kvt_msg_t *msg)
{
    (void)ctx, (void)from, (void)msg;
    atomic_fetch_add((atomic_int *)self, 1);
    return 0;
}
static const kvt_actor_class_t s_rx_class = {
    .type = "rx",
    .init = s_rx_init,
    .on = {[KVT_MSG_COMPLETION] = s_rx_on, [KVT_MSG_STEP_PLAN] = s_rx_on}};

//  The receiving side: "aggregator" on loopback tcp://, with CURVE when
//  `curve` (the server certificate, the allowed directory).
static kvt_system_t *s_receiver(bool curve, uint64_t link_id, kvt_aid_t *aid)
{
    kvt_system_t *sys = s_live("rx", link_id);
    if (curve)
        s_curve(sys, s_server, NULL);
    *aid = kvt_system_add(sys, "aggregator", &s_rx_class, NULL, "tcp://127.0.0.1:*");
    cr_assert_neq(*aid, KVT_AID_NONE);
    cr_assert_eq(kvt_system_start(sys), 0);
    return sys;
}

//  A peer that reaches `ep` as "aggregator" and posts one Completion.
//  `secret` NULL: no CURVE at all.
static kvt_system_t *s_inject(const char *ep, const char *secret, uint64_t link_id)
{
    kvt_system_t *sys = s_live("tx", link_id);
    if (secret)
        s_curve(sys, secret, s_server);
    kvt_aid_t to = kvt_system_add_remote(sys, "aggregator", ep);
    cr_assert_neq(to, KVT_AID_NONE);
    cr_assert_eq(kvt_system_start(sys), 0);
    kvt_msg_t m;
    cr_assert_eq(kvt_msg_sample(KVT_MSG_COMPLETION, KVT_SAMPLE_TYPICAL, &m), 0);
    cr_assert_eq(kvt_system_post(sys, to, &m), 0, "a send never blocks");
    kvt_msg_clear(&m);
    return sys;
}

static kvt_actor_stats_t s_stats(kvt_system_t *sys, kvt_aid_t aid)
{
    kvt_actor_stats_t st;
    cr_assert_eq(kvt_system_actor_stats(sys, aid, &st), 0);
    return st;
}

//  Waits (up to 5 s) until the receiver delivered a message or refused a
//  handshake; then a little longer, so a late delivery would still show.
static void s_settle(kvt_system_t *rx, kvt_aid_t aid)
{
    for (int i = 0; i < 500; i++) {
        kvt_actor_stats_t st = s_stats(rx, aid);
        if (st.delivered > 0 || st.auth_rejected > 0 || st.foreign_frames > 0)
            break;
        s_sleep_ms(10);
    }
    s_sleep_ms(200);
}

//  What one injected Completion came to at the receiver.
typedef struct {
    int handled;          //  messages the receiver's handlers saw
    kvt_actor_stats_t st; //  the receiver's counters, once settled
} s_result_t;

//  A peer with `secret` (NULL: no CURVE) and `link_id` posts one Completion
//  to `rx`'s "aggregator" (`agg`); once the receiver settled, what it saw.
//  Destroys both systems.
static s_result_t s_deliver_to(kvt_system_t **rx_p, kvt_aid_t agg, const char *secret,
                               uint64_t link_id)
{
    atomic_store(&s_got, 0);
    kvt_system_t *tx = s_inject(kvt_system_endpoint(*rx_p, agg), secret, link_id);
    s_settle(*rx_p, agg);
    s_result_t r = {.handled = atomic_load(&s_got), .st = s_stats(*rx_p, agg)};
    kvt_system_destroy(&tx);
    kvt_system_destroy(rx_p);
    return r;
}

//  The same to a fresh receiver (s_receiver: CURVE when `rx_curve`, link id
//  `rx_link`).
static s_result_t s_deliver(bool rx_curve, uint64_t rx_link, const char *secret, uint64_t link_id)
{
    kvt_aid_t agg;
    kvt_system_t *rx = s_receiver(rx_curve, rx_link, &agg);
    return s_deliver_to(&rx, agg, secret, link_id);
}

// --------------------------------------------------------- injection -------

Test(curve, a_peer_with_an_allowed_key_delivers, .timeout = 30)
{
    s_keys();
    s_result_t r = s_deliver(true, 0, s_client, 0);
    cr_assert_eq(r.handled, 1, "the Completion was handled");
    cr_assert_eq(r.st.auth_rejected, 0);
    s_rmtree();
}

Test(curve, a_peer_without_a_key_cannot_inject_a_completion, .timeout = 30)
{
    s_keys();
    s_result_t r = s_deliver(true, 0, NULL, 0);
    cr_assert_eq(r.handled, 0, "nothing reached the handler");
    cr_assert_eq(r.st.delivered, 0);
    cr_assert_geq(r.st.auth_rejected, 1, "the refused handshake is counted");
    s_rmtree();
}

Test(curve, a_peer_with_a_key_not_allowed_cannot_inject_a_completion, .timeout = 30)
{
    s_keys();
    s_result_t r = s_deliver(true, 0, s_intruder, 0);
    cr_assert_eq(r.handled, 0, "nothing reached the handler");
    cr_assert_geq(r.st.auth_rejected, 1, "the refused handshake is counted");
    s_rmtree();
}

//  The control for the two above: without CURVE on the receiver, the same
//  keyless peer gets in (what the mechanism is there to stop).
Test(curve, without_curve_a_keyless_peer_gets_in, .timeout = 30)
{
    s_keys();
    cr_assert_eq(s_deliver(false, 0, NULL, 0).handled, 1);
    s_rmtree();
}

// ----------------------------------------------------------- reading -------

//  An impostor bound where a rank's runner should be: a plain PULL, or a
//  CURVE server with a key of its own (it does not hold the server's
//  secret). The engine side sends it a StepPlan; returns the bytes it read.
static size_t s_impostor_reads(bool impostor_curve, bool sender_curve)
{
    zsock_t *imp = zsock_new(ZMQ_PULL);
    cr_assert_not_null(imp);
    if (impostor_curve) {
        zcert_t *own = zcert_load(s_intruder);
        cr_assert_not_null(own);
        zcert_apply(own, imp);
        zsock_set_curve_server(imp, 1);
        zcert_destroy(&own);
    }
    cr_assert_geq(zsock_bind(imp, "tcp://127.0.0.1:*"), 0);
    char *ep = zsock_last_endpoint(imp);
    kvt_system_t *tx = s_live("engine", 0);
    if (sender_curve)
        s_curve(tx, s_client, s_server);
    kvt_aid_t to = kvt_system_add_remote(tx, "runner.0", ep);
    cr_assert_neq(to, KVT_AID_NONE);
    cr_assert_eq(kvt_system_start(tx), 0);
    kvt_msg_t m;
    cr_assert_eq(kvt_msg_sample(KVT_MSG_STEP_PLAN, KVT_SAMPLE_TYPICAL, &m), 0);
    cr_assert_eq(kvt_system_post(tx, to, &m), 0);
    kvt_msg_clear(&m);
    zsock_set_rcvtimeo(imp, 700);
    size_t got = 0;
    zmsg_t *msg = zmsg_recv(imp);
    if (msg)
        got = zmsg_content_size(msg);
    zmsg_destroy(&msg);
    kvt_system_destroy(&tx);
    zstr_free(&ep);
    zsock_destroy(&imp);
    return got;
}

Test(curve, a_peer_without_the_server_key_cannot_read_a_step_plan, .timeout = 30)
{
    s_keys();
    cr_assert_eq(s_impostor_reads(false, true), 0, "a plain impostor reads nothing");
    cr_assert_eq(s_impostor_reads(true, true), 0, "a CURVE impostor with its own key neither");
    //  The control: an engine without CURVE hands the impostor its plan.
    cr_assert_gt(s_impostor_reads(false, false), 0);
    s_rmtree();
}

// ------------------------------------------------------- keys at start -----

static void s_refused(const char *secret, const char *pub, const char *server, const char *needle1,
                      const char *needle2)
{
    kvt_system_t *sys = s_live("k", 0);
    char err[512] = "";
    kvt_curve_opts_t co = {.secret_key = secret, .public_keys = pub, .server_key = server};
    cr_assert_eq(kvt_system_set_curve(sys, &co, err, sizeof err), -1, "refused: %s", needle1);
    cr_assert(strstr(err, needle1) && strstr(err, needle2), "'%s' names %s and %s", err, needle1,
              needle2);
    kvt_system_destroy(&sys);
}

Test(curve, missing_or_bad_key_files_are_refused_at_start_naming_the_setting, .timeout = 30)
{
    s_keys();
    char missing[160], pub[160], file[160];
    snprintf(missing, sizeof missing, "%s/nobody.cert", s_dir);
    snprintf(pub, sizeof pub, "%s/client.cert", s_allowed); //  public only
    snprintf(file, sizeof file, "%s/not-a-dir", s_dir);
    FILE *f = fopen(file, "w");
    cr_assert_not_null(f);
    fputs("x\n", f);
    fclose(f);
    s_refused(missing, s_allowed, NULL, "curve_secret_key", missing);
    s_refused(file, s_allowed, NULL, "curve_secret_key", file);
    s_refused(pub, s_allowed, NULL, "curve_secret_key", "no secret key");
    s_refused(s_server, missing, NULL, "curve_public_keys", missing);
    s_refused(s_server, file, NULL, "curve_public_keys", "not a directory");
    s_refused(s_server, s_allowed, missing, "curve_server_key", missing);
    s_refused(NULL, s_allowed, NULL, "curve_secret_key", "not set");
    s_refused(s_server, NULL, NULL, "curve_public_keys", "not set");
    s_rmtree();
}

//  A failed call applies nothing: the system's tcp:// inbox stays as it was
//  (here: without CURVE, so a keyless peer still gets in).
Test(curve, a_refused_key_applies_nothing, .timeout = 30)
{
    s_keys();
    kvt_system_t *rx = s_live("rx", 0);
    char err[512], missing[160];
    snprintf(missing, sizeof missing, "%s/nobody.cert", s_dir);
    kvt_curve_opts_t co = {.secret_key = s_server, .public_keys = s_allowed, .server_key = missing};
    cr_assert_eq(kvt_system_set_curve(rx, &co, err, sizeof err), -1);
    kvt_aid_t agg = kvt_system_add(rx, "aggregator", &s_rx_class, NULL, "tcp://127.0.0.1:*");
    cr_assert_eq(kvt_system_start(rx), 0);
    cr_assert_eq(s_deliver_to(&rx, agg, NULL, 0).handled, 1);
    s_rmtree();
}

Test(curve, the_settings_come_as_a_set, .timeout = 30)
{
    const char *cases[][3] = {
        {"curve_secret_key", "/x/server.cert", "curve_public_keys"},
        {"curve_public_keys", "/x/allowed", "curve_secret_key"},
        {"curve_server_key", "/x/server.cert", "curve_secret_key"},
    };
    for (int i = 0; i < 3; i++) {
        kvt_config_loader_t *l = kvt_config_loader_new();
        char err[512] = "";
        cr_assert_eq(kvt_config_loader_flag(l, cases[i][0], cases[i][1], err, sizeof err), 0);
        kvt_config_t c;
        cr_assert_eq(kvt_config_loader_build(l, &c, NULL, NULL, err, sizeof err), -1, "%s",
                     cases[i][0]);
        cr_assert(strstr(err, cases[i][0]) && strstr(err, cases[i][2]), "%s", err);
        kvt_config_loader_destroy(&l);
    }
}

//  A replay whose certificate is missing stops before anything runs.
Test(curve, a_replay_with_a_missing_key_is_refused_at_start, .timeout = 30)
{
    s_keys();
    char missing[160];
    snprintf(missing, sizeof missing, "%s/nobody.cert", s_dir);
    kvt_replay_cfg_t cfg;
    kvt_replay_defaults(&cfg);
    cfg.limit = 4; //  were the key not checked, a short run
    cfg.curve_secret_key = missing;
    cfg.curve_public_keys = s_allowed;
    kvt_replay_report_t rep;
    memset(&rep, 0, sizeof rep);
    char err[512] = "";
    cr_assert_eq(kvt_replay_run(&cfg, &rep, err, sizeof err), -1);
    cr_assert(strstr(err, "curve_secret_key") && strstr(err, missing), "%s", err);
    kvt_replay_report_clear(&rep);
    s_rmtree();
}

// --------------------------------------------------------------- ipc -------

Test(ipc, sockets_bind_only_in_an_owner_only_directory, .timeout = 30)
{
    char dir[64] = "/tmp/kvt-ipc-XXXXXX", ep[128];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(ep, sizeof ep, "ipc://%s/aggregator", dir);
    const mode_t open_modes[] = {0750, 0705, 0777};
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(chmod(dir, open_modes[i]), 0);
        kvt_system_t *sys = s_live("i", 0);
        kvt_system_add(sys, "aggregator", &s_rx_class, NULL, ep);
        cr_assert_eq(kvt_system_start(sys), -1, "mode %03o refused", (unsigned)open_modes[i]);
        kvt_system_destroy(&sys);
    }
    cr_assert_eq(chmod(dir, 0700), 0);
    kvt_system_t *sys = s_live("i", 0);
    kvt_system_add(sys, "aggregator", &s_rx_class, NULL, ep);
    cr_assert_eq(kvt_system_start(sys), 0, "mode 700 binds");
    kvt_system_destroy(&sys);
    unlink(ep + 6);
    rmdir(dir);
}

Test(ipc, nothing_is_sent_into_a_directory_others_can_enter, .timeout = 30)
{
    char dir[64] = "/tmp/kvt-ipc-XXXXXX", ep[128];
    cr_assert_not_null(mkdtemp(dir));
    cr_assert_eq(chmod(dir, 0755), 0);
    snprintf(ep, sizeof ep, "ipc://%s/aggregator", dir);
    kvt_system_t *sys = s_live("i", 0);
    kvt_aid_t to = kvt_system_add_remote(sys, "aggregator", ep);
    cr_assert_eq(kvt_system_start(sys), 0);
    kvt_msg_t m;
    cr_assert_eq(kvt_msg_sample(KVT_MSG_COMPLETION, KVT_SAMPLE_TYPICAL, &m), 0);
    cr_assert_eq(kvt_system_post(sys, to, &m), -1, "no connection into an open directory");
    kvt_msg_clear(&m);
    kvt_system_destroy(&sys);
    rmdir(dir);
}

// ------------------------------------------------------- deployments -------

Test(link, a_frame_of_another_deployment_is_dropped_and_counted, .timeout = 30)
{
    kvt_replay_cfg_t a, b, c;
    kvt_replay_defaults(&a);
    a.ns = (kvt_hash_t){.hi = 1, .lo = 2};
    a.tp = 2;
    b = a;
    b.tp = 4; //  another world size
    c = a;
    c.ns.lo = 3; //  another namespace
    uint64_t ida = kvt_rank_link_id(&a);
    cr_assert_eq(ida, kvt_rank_link_id(&a), "one configuration, one id");
    cr_assert_neq(ida, kvt_rank_link_id(&b));
    cr_assert_neq(ida, kvt_rank_link_id(&c));
    cr_assert_neq(ida, 0);
    const uint64_t senders[] = {kvt_rank_link_id(&b), kvt_rank_link_id(&c), 0};
    for (int i = 0; i < 3; i++) {
        s_result_t r = s_deliver(false, ida, NULL, senders[i]);
        cr_assert_eq(r.handled, 0, "sender %d: not handled", i);
        cr_assert_eq(r.st.foreign_frames, 1, "sender %d: counted", i);
    }
    //  The same deployment gets through.
    s_result_t r = s_deliver(false, ida, NULL, ida);
    cr_assert_eq(r.handled, 1);
    cr_assert_eq(r.st.foreign_frames, 0);
}

// ------------------------------------------------------ end to end ---------

//  A two-rank replay with its ranks as processes over tcp://, every link
//  under CURVE with the deployment's one certificate: it runs through, and
//  no handshake was refused (that would be logged as a warning).
Test(curve, a_replay_with_ranks_as_processes_runs_over_curve, .timeout = 120)
{
    s_keys();
    char pub[160], args[1024], err[8192];
    snprintf(pub, sizeof pub, "%s/server.cert", s_allowed);
    zcert_t *server = zcert_load(s_server);
    cr_assert_not_null(server);
    cr_assert_eq(zcert_save_public(server, pub), 0);
    zcert_destroy(&server);
    int port = 24000 + (int)(getpid() % 300) * 20;
    snprintf(args, sizeof args,
             "replay --ranks-as-processes --rank-endpoint tcp://127.0.0.1:%d --tp 2 --byte-scale "
             "1 --limit 24 --hbm-pool 2MiB --cpu-pool 32MiB --log-level 1 --quiet "
             "--curve-secret-key %s --curve-public-keys %s",
             port, s_server, s_allowed);
    int rc = kvt_tcli_run(args, NULL, 0, err, sizeof err);
    cr_assert_eq(rc, 0, "kvtier %s: %s", args, err);
    cr_assert_null(strstr(err, "refused a peer"), "%s", err);
    cr_assert_null(strstr(err, "without CURVE"), "%s", err);
    //  The same with a key file missing: refused at start, naming it.
    snprintf(args, sizeof args,
             "replay --ranks-as-processes --rank-endpoint tcp://127.0.0.1:%d --tp 2 --limit 1 "
             "--curve-secret-key %s/nobody.cert --curve-public-keys %s",
             port, s_dir, s_allowed);
    cr_assert_neq(kvt_tcli_run(args, NULL, 0, err, sizeof err), 0);
    cr_assert(strstr(err, "curve_secret_key") && strstr(err, "nobody.cert"), "%s", err);
    s_rmtree();
}

//  `kvtier keygen` makes what the settings read: a secret certificate
//  (owner-only) and its public half; it never overwrites.
Test(curve, keygen_writes_a_certificate_the_settings_accept, .timeout = 30)
{
    s_keys();
    char path[160], secret[200], args[400], out[256], err[1024];
    snprintf(path, sizeof path, "%s/allowed/made.cert", s_dir);
    snprintf(secret, sizeof secret, "%s_secret", path);
    snprintf(args, sizeof args, "keygen %s", path);
    cr_assert_eq(kvt_tcli_run(args, out, sizeof out, err, sizeof err), 0, "%s", err);
    struct stat st;
    cr_assert_eq(stat(secret, &st), 0);
    cr_assert_eq(st.st_mode & 077, 0, "the secret file is owner-only (%03o)",
                 (unsigned)(st.st_mode & 0777));
    zcert_t *pub = zcert_load(path);
    cr_assert_not_null(pub);
    cr_assert(strstr(out, zcert_public_txt(pub)), "it prints the public key");
    zcert_destroy(&pub);
    kvt_system_t *sys = s_live("k", 0);
    s_curve(sys, path, NULL); //  PATH with PATH_secret beside it
    kvt_system_destroy(&sys);
    cr_assert_eq(kvt_tcli_run(args, NULL, 0, err, sizeof err), 2);
    cr_assert(strstr(err, "not overwritten"), "%s", err);
    s_rmtree();
}

//  A --rank-endpoint ipc://DIR that does not exist is made owner-only, and
//  the run binds there; one open to others is refused at start.
Test(ipc, a_replay_makes_its_socket_directory_owner_only, .timeout = 120)
{
    s_keys();
    char dir[160], args[1024], err[8192];
    snprintf(dir, sizeof dir, "%s/sockets", s_dir);
    snprintf(args, sizeof args,
             "replay --ranks-as-processes --rank-endpoint ipc://%s --tp 2 --byte-scale 1 "
             "--limit 8 --hbm-pool 2MiB --cpu-pool 32MiB --log-level 0 --quiet",
             dir);
    cr_assert_eq(kvt_tcli_run(args, NULL, 0, err, sizeof err), 0, "%s", err);
    struct stat st;
    cr_assert_eq(stat(dir, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0700, "mode %03o", (unsigned)(st.st_mode & 0777));
    cr_assert_eq(chmod(dir, 0755), 0);
    cr_assert_neq(kvt_tcli_run(args, NULL, 0, err, sizeof err), 0, "an open directory is refused");
    s_rmtree();
}
