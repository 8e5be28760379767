/*  kvt_metrics_http — the /metrics endpoint: libmicrohttpd on its own
    thread, answering GET (and HEAD) /metrics with the current snapshot
    rendered. See kvt_metrics.h. */
#include "kvt_metrics_int.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

//  Parses "HOST:PORT" into *sa; NULL, or what is wrong.
static const char *s_parse(const char *addr, struct sockaddr_in *sa)
{
    memset(sa, 0, sizeof *sa);
    sa->sin_family = AF_INET;
    if (!addr || !addr[0])
        return "empty (HOST:PORT)";
    const char *colon = strrchr(addr, ':');
    if (!colon)
        return "no port (HOST:PORT)";
    size_t hn = (size_t)(colon - addr);
    char host[64];
    if (hn == 0 || hn >= sizeof host)
        return "no host, or a host over 63 bytes (HOST:PORT)";
    memcpy(host, addr, hn);
    host[hn] = 0;
    const char *p = colon + 1;
    if (!*p || strlen(p) > 5)
        return "the port is not 0..65535";
    unsigned long port = 0;
    for (const char *q = p; *q; q++) {
        if (*q < '0' || *q > '9')
            return "the port is not 0..65535";
        port = port * 10 + (unsigned long)(*q - '0');
    }
    if (port > 65535)
        return "the port is not 0..65535";
    sa->sin_port = htons((uint16_t)port);
    if (strcmp(host, "localhost") == 0)
        snprintf(host, sizeof host, "127.0.0.1");
    if (inet_pton(AF_INET, host, &sa->sin_addr) != 1)
        return "the host is not an IPv4 address or localhost";
    return NULL;
}

int kvt_metrics_check_addr(const char *addr, char *err, size_t errlen)
{
    struct sockaddr_in sa;
    const char *why = s_parse(addr, &sa);
    if (!why)
        return 0;
    snprintf(err, errlen, "metrics address '%s': %s", addr ? addr : "", why);
    return -1;
}

static enum MHD_Result s_answer(struct MHD_Connection *conn, unsigned code, char *body, size_t len,
                                enum MHD_ResponseMemoryMode mode)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, mode);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, S_CONTENT_TYPE);
    enum MHD_Result rc = MHD_queue_response(conn, code, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result s_handler(void *cls, struct MHD_Connection *conn, const char *url,
                                 const char *method, const char *version, const char *upload_data,
                                 size_t *upload_data_size, void **con_cls)
{
    (void)version;
    (void)upload_data;
    (void)con_cls;
    kvt_metrics_t *self = cls;
    bool get = strcmp(method, MHD_HTTP_METHOD_GET) == 0;
    bool head = strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
    if (*upload_data_size != 0) { //  a body we do not read: drop it
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (!get && !head) {
        atomic_fetch_add(&self->bad_requests, 1);
        static char msg[] = "only GET /metrics\n";
        return s_answer(conn, MHD_HTTP_METHOD_NOT_ALLOWED, msg, sizeof msg - 1,
                        MHD_RESPMEM_PERSISTENT);
    }
    if (strcmp(url, "/metrics") != 0) {
        atomic_fetch_add(&self->bad_requests, 1);
        static char msg[] = "not found: kvtier serves /metrics\n";
        return s_answer(conn, MHD_HTTP_NOT_FOUND, msg, sizeof msg - 1, MHD_RESPMEM_PERSISTENT);
    }
    atomic_fetch_add(&self->scrapes, 1);
    size_t len = 0;
    char *text = kvt_metrics_render(self, &len);
    if (!text) {
        atomic_fetch_add(&self->render_failed, 1);
        static char msg[] = "out of memory\n";
        return s_answer(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, msg, sizeof msg - 1,
                        MHD_RESPMEM_PERSISTENT);
    }
    return s_answer(conn, MHD_HTTP_OK, text, len, MHD_RESPMEM_MUST_FREE);
}

int kvt_metrics_listen(kvt_metrics_t *self, const char *addr, char *err, size_t errlen)
{
    struct sockaddr_in sa;
    const char *why = s_parse(addr, &sa);
    if (why) {
        snprintf(err, errlen, "metrics address '%s': %s", addr ? addr : "", why);
        return -1;
    }
    if (self->daemon) {
        snprintf(err, errlen, "metrics address '%s': already listening on port %u", addr,
                 (unsigned)self->port);
        return -1;
    }
    self->daemon = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, ntohs(sa.sin_port), NULL, NULL,
                                    s_handler, self, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                                    MHD_OPTION_CONNECTION_LIMIT, (unsigned)64,
                                    MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10, MHD_OPTION_END);
    if (!self->daemon) {
        snprintf(err, errlen, "metrics address '%s': cannot listen (port taken or not allowed)",
                 addr);
        return -1;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(self->daemon, MHD_DAEMON_INFO_BIND_PORT);
    self->port = info ? info->port : ntohs(sa.sin_port);
    return 0;
}

uint16_t kvt_metrics_port(const kvt_metrics_t *self)
{
    return self->daemon ? self->port : 0;
}

void kvt_metrics_stop_http_(kvt_metrics_t *self)
{
    if (self->daemon)
        MHD_stop_daemon(self->daemon);
    self->daemon = NULL;
    self->port = 0;
}
