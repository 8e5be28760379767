/*  The Prometheus endpoint (kvt_metrics): scraped over a real socket. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kvtier/kvt_metrics.h"
#include "replay/kvt_replay.h"
#include "runtime/kvt_metrics_int.h"

//  A plain HTTP/1.0 request to 127.0.0.1:port; returns the status code and
//  the body (malloc'd) in *body, or -1 when the socket failed.
static int s_http(uint16_t port, const char *method, const char *path, char **body)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    char req[256];
    int n = snprintf(req, sizeof req, "%s %s HTTP/1.0\r\nHost: localhost\r\n\r\n", method, path);
    if (write(fd, req, (size_t)n) != n) {
        close(fd);
        return -1;
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (ssize_t k; buf && (k = read(fd, buf + len, cap - len - 1)) > 0;) {
        len += (size_t)k;
        if (cap - len < 4096)
            buf = realloc(buf, cap *= 2);
    }
    close(fd);
    if (!buf)
        return -1;
    buf[len] = 0;
    int code = -1;
    sscanf(buf, "HTTP/1.%*d %d", &code);
    char *sep = strstr(buf, "\r\n\r\n");
    *body = strdup(sep ? sep + 4 : "");
    free(buf);
    return code;
}

static kvt_metrics_t *s_listening(void)
{
    kvt_metrics_t *m = kvt_metrics_new();
    cr_assert_not_null(m);
    char err[256];
    cr_assert_eq(kvt_metrics_listen(m, "127.0.0.1:0", err, sizeof err), 0, "%s", err);
    cr_assert_gt(kvt_metrics_port(m), 0);
    return m;
}

static char *s_scrape(kvt_metrics_t *m)
{
    char *body = NULL;
    int code = s_http(kvt_metrics_port(m), "GET", "/metrics", &body);
    cr_assert_eq(code, 200, "GET /metrics answered %d", code);
    return body;
}

//  Every sample line's family was declared by a # HELP and a # TYPE line
//  before it, each family once, and its type fits the sample's suffix.
static void s_assert_well_formed(const char *text)
{
    char fams[2048][128], types[2048][16];
    int nf = 0;
    const char *p = text;
    while (*p) {
        const char *nl = strchr(p, '\n');
        cr_assert_not_null(nl, "the text ends with a newline");
        char line[1024];
        size_t n = (size_t)(nl - p) < sizeof line - 1 ? (size_t)(nl - p) : sizeof line - 1;
        memcpy(line, p, n);
        line[n] = 0;
        p = nl + 1;
        char name[128], type[16];
        if (sscanf(line, "# HELP %127s", name) == 1) {
            for (int i = 0; i < nf; i++)
                cr_assert_str_neq(fams[i], name, "family %s declared twice", name);
            cr_assert_lt(nf, 2048);
            snprintf(fams[nf], sizeof fams[nf], "%s", name);
            types[nf][0] = 0;
            nf++;
            continue;
        }
        if (sscanf(line, "# TYPE %127s %15s", name, type) == 2) {
            cr_assert_gt(nf, 0);
            cr_assert_str_eq(fams[nf - 1], name, "TYPE right after HELP for %s", name);
            snprintf(types[nf - 1], sizeof types[nf - 1], "%s", type);
            continue;
        }
        cr_assert_neq(line[0], '#', "unexpected comment: %s", line);
        cr_assert_gt(nf, 0, "sample before any family: %s", line);
        const char *fam = fams[nf - 1];
        size_t fl = strlen(fam);
        cr_assert_eq(strncmp(line, fam, fl), 0, "sample %s outside its family %s", line, fam);
        const char *rest = line + fl;
        if (strcmp(types[nf - 1], "histogram") == 0)
            cr_assert(strncmp(rest, "_bucket{", 8) == 0 || strncmp(rest, "_sum", 4) == 0 ||
                          strncmp(rest, "_count", 6) == 0,
                      "histogram sample %s", line);
        else
            cr_assert(*rest == '{' || *rest == ' ', "sample %s", line);
        if (strcmp(types[nf - 1], "counter") == 0)
            cr_assert(fl > 6 && strcmp(fam + fl - 6, "_total") == 0, "counter %s", fam);
        else
            cr_assert(fl <= 6 || strcmp(fam + fl - 6, "_total") != 0, "non-counter %s", fam);
    }
}

static const kvt_counter_t s_sched[] = {
    {"sched.waiting", 3}, {"sched.arrivals", 7}, {"blocks.total", 1024}};
static const kvt_counter_t s_worker[] = {
    {"worker.loads_ok", 5},
    {"pool.hits.kv", 4}, //  one family with disk.hits.state, published apart from it
    {"pool.used_bytes", 100},
    {"disk.hits.state", 2},
    {"worker.transfer_us.load.le_10", 1},
    {"worker.transfer_us.load.le_inf", 2},
    {"worker.transfer_us.load.sum", 30},
    {"worker.transfer_us.load.count", 2},
};

static void s_publish_two(kvt_metrics_t *m)
{
    kvt_metrics_source_t src[] = {{"scheduler", s_sched, 3}, {"worker.1", s_worker, 8}};
    cr_assert_eq(kvt_metrics_publish(m, src, 2), 0);
}

Test(metrics, a_scrape_serves_every_published_counter_with_help_type_and_labels)
{
    kvt_metrics_t *m = s_listening();
    s_publish_two(m);
    char *t = s_scrape(m);
    s_assert_well_formed(t);
    const char *want[] = {
        "# TYPE kvtier_sched_waiting gauge\nkvtier_sched_waiting{actor=\"scheduler\"} 3\n",
        "# TYPE kvtier_sched_arrivals_total counter\n"
        "kvtier_sched_arrivals_total{actor=\"scheduler\"} 7\n",
        "# TYPE kvtier_blocks gauge\nkvtier_blocks{actor=\"scheduler\"} 1024\n",
        "kvtier_worker_loads_ok_total{actor=\"worker\",rank=\"1\"} 5\n",
        "# TYPE kvtier_tier_used_bytes gauge\n"
        "kvtier_tier_used_bytes{actor=\"worker\",rank=\"1\",tier=\"cpu\"} 100\n",
        "kvtier_tier_hits_total{actor=\"worker\",rank=\"1\",tier=\"cpu\",kind=\"kv\"} 4\n",
        "kvtier_tier_hits_total{actor=\"worker\",rank=\"1\",tier=\"disk\",kind=\"state\"} 2\n",
        "# TYPE kvtier_worker_transfer_seconds histogram\n",
        "kvtier_worker_transfer_seconds_bucket{actor=\"worker\",rank=\"1\",channel=\"load\","
        "le=\"0.000010\"} 1\n"
        "kvtier_worker_transfer_seconds_bucket{actor=\"worker\",rank=\"1\",channel=\"load\","
        "le=\"+Inf\"} 2\n"
        "kvtier_worker_transfer_seconds_sum{actor=\"worker\",rank=\"1\",channel=\"load\"} "
        "0.000030\n"
        "kvtier_worker_transfer_seconds_count{actor=\"worker\",rank=\"1\",channel=\"load\"} 2\n",
        "kvtier_metrics_scrapes_total 1\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_assert_not_null(strstr(t, want[i]), "missing:\n%s\nin:\n%s", want[i], t);
    free(t);
    kvt_metrics_destroy(&m);
    cr_assert_null(m);
}

Test(metrics, a_scrape_keeps_its_snapshot_while_a_publish_replaces_it)
{
    kvt_metrics_t *m = kvt_metrics_new();
    s_publish_two(m);
    kvt_msnap_t *held = kvt_msnap_get_(m); //  what a scrape in progress holds
    cr_assert_not_null(held);
    cr_assert_eq(atomic_load(&held->refs), 2, "the scrape took its own reference");
    kvt_counter_t c = {"sched.waiting", 9};
    kvt_metrics_source_t src = {"scheduler", &c, 1};
    cr_assert_eq(kvt_metrics_publish(m, &src, 1), 0);
    //  The publish swapped the pointer and dropped only the holder's reference.
    cr_assert_eq(atomic_load(&held->refs), 1);
    cr_assert_eq(held->n, 11);
    char *t = kvt_metrics_render(m, NULL);
    cr_assert_not_null(strstr(t, "kvtier_sched_waiting{actor=\"scheduler\"} 9\n"));
    cr_assert_null(strstr(t, "kvtier_sched_arrivals_total"), "the old round is gone");
    free(t);
    kvt_msnap_unref_(held);
    kvt_metrics_destroy(&m);
}

typedef struct {
    kvt_metrics_t *m;
    int rounds;
} s_pub_arg_t;

static void *s_publisher(void *arg)
{
    s_pub_arg_t *a = arg;
    for (int r = 1; r <= a->rounds; r++) {
        kvt_counter_t c[3] = {{"sched.arrivals", (uint64_t)r},
                              {"sched.finished", (uint64_t)r},
                              {"sched.admitted", (uint64_t)r}};
        kvt_metrics_source_t src = {"scheduler", c, 3};
        kvt_metrics_publish(a->m, &src, 1);
    }
    return NULL;
}

Test(metrics, every_scrape_during_publishes_is_one_whole_round)
{
    kvt_metrics_t *m = s_listening();
    s_pub_arg_t a = {m, 3000};
    pthread_t th;
    pthread_create(&th, NULL, s_publisher, &a);
    for (int i = 0; i < 40; i++) {
        char *t = s_scrape(m);
        unsigned long v[3] = {0, 0, 0};
        const char *names[3] = {"kvtier_sched_admitted_total{actor=\"scheduler\"} ",
                                "kvtier_sched_arrivals_total{actor=\"scheduler\"} ",
                                "kvtier_sched_finished_total{actor=\"scheduler\"} "};
        bool any = false;
        for (int k = 0; k < 3; k++) {
            const char *at = strstr(t, names[k]);
            if (at) {
                v[k] = strtoul(at + strlen(names[k]), NULL, 10);
                any = true;
            }
        }
        if (any)
            cr_assert(v[0] == v[1] && v[1] == v[2], "a torn round: %lu %lu %lu", v[0], v[1], v[2]);
        free(t);
    }
    pthread_join(th, NULL);
    kvt_metrics_stats_t st;
    kvt_metrics_stats(m, &st);
    cr_assert_eq(st.publishes, 3000);
    kvt_metrics_destroy(&m);
}

Test(metrics, other_paths_and_methods_are_refused_and_counted)
{
    kvt_metrics_t *m = s_listening();
    char *b = NULL;
    cr_assert_eq(s_http(kvt_metrics_port(m), "GET", "/", &b), 404);
    free(b);
    cr_assert_eq(s_http(kvt_metrics_port(m), "POST", "/metrics", &b), 405);
    free(b);
    kvt_metrics_stats_t st;
    kvt_metrics_stats(m, &st);
    cr_assert_eq(st.bad_requests, 2);
    cr_assert_eq(st.scrapes, 0);
    kvt_metrics_destroy(&m);
}

Test(metrics, a_bad_publish_is_refused_counted_and_keeps_the_snapshot)
{
    kvt_metrics_t *m = kvt_metrics_new();
    s_publish_two(m);
    kvt_counter_t c = {"sched.waiting", 1};
    kvt_metrics_source_t bad[] = {{NULL, &c, 1}, {"", &c, 1}, {"scheduler", NULL, 1}};
    for (int i = 0; i < 3; i++)
        cr_assert_eq(kvt_metrics_publish(m, &bad[i], 1), -1);
    //  A source reporting a name twice keeps its first value, counted.
    kvt_counter_t twice[2] = {{"sched.waiting", 1}, {"sched.waiting", 2}};
    kvt_metrics_source_t dup = {"scheduler", twice, 2};
    kvt_metrics_stats_t st;
    kvt_metrics_stats(m, &st);
    cr_assert_eq(st.refused, 3);
    cr_assert_eq(st.series, 11, "the round before stays");
    cr_assert_eq(kvt_metrics_publish(m, &dup, 1), 0);
    kvt_metrics_stats(m, &st);
    cr_assert_eq(st.duplicates, 1);
    char *t = kvt_metrics_render(m, NULL);
    cr_assert_not_null(strstr(t, "kvtier_sched_waiting{actor=\"scheduler\"} 1\n"), "%s", t);
    free(t);
    kvt_metrics_destroy(&m);
}

Test(metrics, label_values_are_escaped)
{
    kvt_metrics_t *m = kvt_metrics_new();
    kvt_counter_t c = {"agg.open", 1};
    kvt_metrics_source_t src = {"odd\"na\\me\n", &c, 1};
    cr_assert_eq(kvt_metrics_publish(m, &src, 1), 0);
    char *t = kvt_metrics_render(m, NULL);
    cr_assert_not_null(strstr(t, "kvtier_agg_open{actor=\"odd\\\"na\\\\me\\n\"} 1\n"), "%s", t);
    free(t);
    kvt_metrics_destroy(&m);
}

Test(metrics, the_address_is_checked_and_a_taken_port_is_refused)
{
    char err[256];
    cr_assert_eq(kvt_metrics_check_addr("127.0.0.1:0", err, sizeof err), 0);
    cr_assert_eq(kvt_metrics_check_addr("localhost:9100", err, sizeof err), 0);
    const char *bad[] = {
        "", "nohost", ":80", "127.0.0.1:", "127.0.0.1:70000", "127.0.0.1:8x", "example:80"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(kvt_metrics_check_addr(bad[i], err, sizeof err), -1, "%s", bad[i]);
        cr_assert_not_null(strstr(err, "metrics address"), "%s", err);
    }
    kvt_metrics_t *a = s_listening();
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", (unsigned)kvt_metrics_port(a));
    kvt_metrics_t *b = kvt_metrics_new();
    cr_assert_eq(kvt_metrics_listen(b, addr, err, sizeof err), -1);
    cr_assert_not_null(strstr(err, addr), "%s", err);
    cr_assert_eq(kvt_metrics_listen(a, "127.0.0.1:0", err, sizeof err), -1, "a second listen");
    kvt_metrics_destroy(&b);
    kvt_metrics_destroy(&a);
}

//  A scrape of text through Debian's parser (python3-prometheus-client) and
//  promtool, when they are installed; their verdicts go to files.
static void s_check_with_tools(const char *text)
{
    char path[] = "/tmp/kvt-metrics-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    size_t n = strlen(text);
    cr_assert_eq(write(fd, text, n), (ssize_t)n);
    close(fd);
    char cmd[1024];
    if (system("/usr/bin/python3 -c 'import prometheus_client' >/dev/null 2>&1") == 0) {
        snprintf(cmd, sizeof cmd,
                 "/usr/bin/python3 -c \"import sys\n"
                 "from prometheus_client.parser import text_string_to_metric_families as f\n"
                 "fams = {x.name: x for x in f(open('%s').read())}\n"
                 "assert fams['kvtier_worker_transfer_seconds'].type == 'histogram'\n"
                 "assert fams['kvtier_sched_finished'].type == 'counter'\n"
                 "assert fams['kvtier_sched_running'].type == 'gauge'\n"
                 "assert any(s.labels.get('tier') == 'cpu' for s in "
                 "fams['kvtier_tier_used_bytes'].samples)\n\" >%s.py.log 2>&1",
                 path, path);
        cr_assert_eq(system(cmd), 0, "prometheus_client refused the scrape (%s.py.log)", path);
    } else {
        cr_log_warn("python3-prometheus-client not installed: parser check skipped");
    }
    if (system("command -v promtool >/dev/null 2>&1") == 0) {
        snprintf(cmd, sizeof cmd, "promtool check metrics <%s >%s.promtool.log 2>&1", path, path);
        cr_assert_eq(system(cmd), 0, "promtool check metrics failed (%s.promtool.log)", path);
    }
    snprintf(cmd, sizeof cmd, "rm -f %s %s.py.log %s.promtool.log", path, path, path);
    cr_assert_eq(system(cmd), 0);
}

Test(metrics, a_replay_publishes_its_rounds_then_its_final_counters, .timeout = 120)
{
    kvt_metrics_t *m = s_listening();
    kvt_replay_cfg_t c;
    kvt_replay_defaults(&c);
    c.limit = 120;
    c.hbm_pool_bytes = 2ull << 20; //  a small HBM pool: loads from the CPU tier
    c.cpu_pool_bytes = 32ull << 20;
    c.log_level = 0;
    c.metrics = m;
    c.metrics_interval_ns = 1000000; //  1 ms of virtual time
    kvt_replay_report_t *r = calloc(1, sizeof *r);
    char err[512];
    cr_assert_eq(kvt_replay_run(&c, r, err, sizeof err), 0, "%s", err);
    cr_assert(!r->failed, "%s", r->failures);
    cr_assert_gt(r->engine.loads_ok, 0);
    kvt_metrics_stats_t st;
    kvt_metrics_stats(m, &st);
    cr_assert_gt(st.publishes, 1, "rounds during the run, then the final counters");
    cr_assert_eq(st.refused, 0, "refused");
    char *t = s_scrape(m);
    s_assert_well_formed(t);
    char want[160];
    snprintf(want, sizeof want, "kvtier_sched_finished_total{actor=\"scheduler\"} %llu\n",
             (unsigned long long)kvt_replay_counter(r, "scheduler", "sched.finished"));
    cr_assert_not_null(strstr(t, want), "the final counters: %s", want);
    //  The collector ran its rounds (its runtime counters are in the final round).
    const char *rounds = strstr(t, "kvtier_rt_delivered_total{actor=\"metrics\"} ");
    cr_assert_not_null(rounds);
    cr_assert_gt(
        strtoull(rounds + strlen("kvtier_rt_delivered_total{actor=\"metrics\"} "), NULL, 10), 0,
        "the collector received Stats replies");
    //  Every load that ended ok on rank 0 is in its latency histogram.
    snprintf(want, sizeof want,
             "kvtier_worker_transfer_seconds_count{actor=\"worker\",rank=\"0\",channel=\"load\"} "
             "%llu\n",
             (unsigned long long)kvt_replay_counter(r, "worker.0", "worker.loads_ok"));
    cr_assert_not_null(strstr(t, want), "%s", want);
    s_check_with_tools(t);
    free(t);
    kvt_replay_report_clear(r);
    free(r);
    kvt_metrics_destroy(&m);
}

Test(metrics, a_replay_refuses_metrics_with_ranks_as_processes)
{
    kvt_metrics_t *m = kvt_metrics_new();
    kvt_replay_cfg_t c;
    kvt_replay_defaults(&c);
    c.driver = KVT_DRIVER_LIVE;
    c.ranks_as_processes = true;
    c.metrics = m;
    char err[512];
    cr_assert_neq(kvt_replay_validate(&c, err, sizeof err), 0);
    cr_assert_not_null(strstr(err, "metrics"), "%s", err);
    kvt_metrics_destroy(&m);
}
