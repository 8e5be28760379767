/*  The Prometheus endpoint (kvt_metrics): scraped over a real socket. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
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
    c.metrics_interval_ns = 500000000; //  500 ms of virtual time: the paced run spans about
                                       //  25 s of it (1 ms made 25,000 rounds)
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

typedef struct {
    kvt_replay_cfg_t c;     //  the run
    kvt_replay_report_t *r; //  its report
    int rc;                 //  kvt_replay_run's
    char err[512];          //  its error
    atomic_bool done;       //  the run returned
} s_bg_t;

static void *s_bg_replay(void *arg)
{
    s_bg_t *b = arg;
    b->rc = kvt_replay_run(&b->c, b->r, b->err, sizeof b->err);
    atomic_store(&b->done, true);
    return NULL;
}

Test(metrics, with_ranks_as_processes_a_round_gathers_every_rank_process, .timeout = 180)
{
    kvt_metrics_t *m = s_listening();
    s_bg_t *b = calloc(1, sizeof *b);
    kvt_replay_defaults(&b->c);
    b->c.driver = KVT_DRIVER_LIVE;
    b->c.ranks_as_processes = true;
    b->c.rank_exe = KVT_BINARY_DIR "/kvtier";
    b->c.limit = 300;
    b->c.log_level = 0;
    b->c.metrics = m;
    b->c.metrics_interval_ns = 20000000; //  20 ms
    b->r = calloc(1, sizeof *b->r);
    pthread_t th;
    pthread_create(&th, NULL, s_bg_replay, b);
    //  A collector round (its own series are not in the final counters)
    //  with rank 1's worker, which runs in another process.
    bool seen = false;
    while (!seen && !atomic_load(&b->done)) {
        char *t = s_scrape(m);
        seen = strstr(t, "kvtier_metrics_rounds_total{actor=\"metrics\"}") &&
               strstr(t, "kvtier_worker_pending{actor=\"worker\",rank=\"1\"}");
        free(t);
        nanosleep(&(struct timespec){0, 20000000}, NULL);
    }
    pthread_join(th, NULL);
    cr_assert_eq(b->rc, 0, "%s", b->err);
    cr_assert(!b->r->failed, "%s", b->r->failures);
    cr_assert(seen, "no scrape during the run showed a round with rank 1's worker");
    kvt_replay_report_clear(b->r);
    free(b->r);
    free(b);
    kvt_metrics_destroy(&m);
}

//  The names (backquoted) in a table row's first cell, each with the prefix
//  of the first one when it has none (`sched.waiting`, `running`); a name
//  starting with '.' (a suffix, `.branch`) is left out. Returns how many.
static int s_row_names(const char *cell, size_t len, char names[][80], int cap)
{
    int n = 0;
    char prefix[80] = "";
    for (const char *p = cell; p < cell + len && n < cap;) {
        const char *a = memchr(p, '`', (size_t)(cell + len - p));
        if (!a)
            break;
        const char *b = memchr(a + 1, '`', (size_t)(cell + len - a - 1));
        if (!b)
            break;
        size_t k = (size_t)(b - a - 1);
        p = b + 1;
        if (k == 0 || k >= 60 || a[1] == '.')
            continue;
        const char *dot = memchr(a + 1, '.', k);
        if (dot && !prefix[0])
            snprintf(prefix, sizeof prefix, "%.*s", (int)(dot - a), a + 1);
        if (dot)
            snprintf(names[n++], 80, "%.*s", (int)k, a + 1);
        else if (prefix[0])
            snprintf(names[n++], 80, "%s%.*s", prefix, (int)k, a + 1);
    }
    return n;
}

Test(metrics, every_gauge_of_the_docs_is_exported_as_a_gauge_and_back)
{
    FILE *f = fopen(KVT_SOURCE_DIR "/docs/metrics.md", "r");
    cr_assert_not_null(f);
    char line[4096], documented[256][80];
    int nd = 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "| `", 3) != 0)
            continue;
        char *c1 = line + 1, *bar = strchr(c1, '|');
        if (!bar)
            continue;
        char *c2 = bar + 1;
        while (*c2 == ' ')
            c2++;
        char names[16][80];
        int n = s_row_names(c1, (size_t)(bar - c1), names, 16);
        //  The kind: "gauge", "0/1", "gauge: ..." (aggregator, worker), or
        //  one per name ("counter / counter / gauge").
        bool all = strncmp(c2, "gauge", 5) == 0 || strncmp(c2, "0/1", 3) == 0;
        int k = 0;
        for (char *q = c2; *q && *q != '|' && k < n; k++) {
            bool gauge = all || strncmp(q, "gauge", 5) == 0;
            if (gauge && strncmp(names[k], "metrics.", 8) != 0 && nd < 256)
                memcpy(documented[nd++], names[k], sizeof documented[0]);
            char *slash = strstr(q, " / ");
            char *end = strchr(q, '|');
            if (all || !slash || (end && slash > end))
                q = end ? end : q + strlen(q);
            else
                q = slash + 3;
        }
        for (; all && k < n; k++)
            if (nd < 256)
                memcpy(documented[nd++], names[k], sizeof documented[0]);
    }
    fclose(f);
    cr_assert_gt(nd, 20, "the docs' gauges were found (%d)", nd);
    for (int i = 0; i < nd; i++)
        cr_assert(kvt_metrics_is_gauge_(documented[i]),
                  "docs/metrics.md calls %s a gauge; the endpoint exports it as a counter",
                  documented[i]);
    //  And every gauge of the list (but the tiers', documented in store.md,
    //  and the collector's own) is one the docs call a gauge.
    for (size_t i = 0; kvt_metrics_gauge_at_(i); i++) {
        const char *g = kvt_metrics_gauge_at_(i);
        if (strncmp(g, "tier.", 5) == 0 || strncmp(g, "metrics.", 8) == 0)
            continue;
        bool found = false;
        for (int j = 0; j < nd && !found; j++)
            found = strcmp(documented[j], g) == 0;
        cr_assert(found, "%s is exported as a gauge but docs/metrics.md does not say so", g);
    }
}

//  A target that answers a Stats request with one counter.
static int s_stub_stats(kvt_ctx_t *ctx, void *self, kvt_aid_t from, kvt_msg_t *msg)
{
    (void)self;
    if (!msg->u.stats.request)
        return 0;
    kvt_counter_t c = {"agg.open", 1};
    kvt_msg_t m;
    memset(&m, 0, sizeof m);
    m.kind = KVT_MSG_STATS;
    snprintf(m.u.stats.from, sizeof m.u.stats.from, "%s", kvt_ctx_name(ctx, kvt_ctx_self(ctx)));
    m.u.stats.counters = &c;
    m.u.stats.ncounters = 1;
    return kvt_ctx_send(ctx, from, &m);
}

static void *s_stub_init(kvt_ctx_t *ctx, void *args)
{
    (void)ctx;
    return args;
}

static void s_stub_stop(kvt_ctx_t *ctx, void *self)
{
    (void)ctx;
    (void)self;
}

static const kvt_actor_class_t s_stub_class = {.type = "stub",
                                               .init = s_stub_init,
                                               .stop = s_stub_stop,
                                               .on = {[KVT_MSG_STATS] = s_stub_stats}};

Test(metrics, under_sim_the_rounds_stop_once_nothing_else_runs_so_the_system_can_end)
{
    kvt_metrics_t *m = kvt_metrics_new();
    kvt_system_opts_t so = {.driver = KVT_DRIVER_SIM, .seed = 1, .log_level = 0};
    kvt_system_t *sys = kvt_system_new(&so);
    static int stub_state;
    const char *targets[] = {"aggregator", NULL};
    kvt_metrics_collector_args_t a = {m, targets, 1000000}; //  1 ms
    cr_assert_neq(kvt_system_add(sys, "aggregator", &s_stub_class, &stub_state, NULL),
                  KVT_AID_NONE);
    cr_assert_neq(kvt_system_add(sys, "metrics", &kvt_metrics_collector_class, &a, NULL),
                  KVT_AID_NONE);
    cr_assert_eq(kvt_system_start(sys), 0);
    //  Without the quiet stop the timer re-arms forever: the 10 s limit.
    int rc = kvt_system_run(sys, 10000000000ull, 0);
    cr_assert_eq(rc, KVT_RUN_QUIESCENT, "the run ended by %d, not quiescence", rc);
    cr_assert_leq(kvt_system_now(sys), 1100000000ull, "stopped after the 1 s quiet window");
    kvt_metrics_stats_t st;
    kvt_metrics_stats(m, &st);
    cr_assert_geq(st.publishes, 999, "a round every tick until then (%llu)",
                  (unsigned long long)st.publishes);
    char *t = kvt_metrics_render(m, NULL);
    cr_assert_not_null(strstr(t, "kvtier_agg_open{actor=\"aggregator\"} 1\n"), "%s", t);
    cr_assert_not_null(strstr(t, "kvtier_metrics_rounds_partial_total{actor=\"metrics\"} 0\n"));
    free(t);
    kvt_system_stop(sys);
    kvt_system_destroy(&sys);
    kvt_metrics_destroy(&m);
}
