/*
 * files.c — what is served without a token: /healthz, /readyz,
 * /api/v1/openapi.json (the document in the repo, embedded when building)
 * and the console's static files (api.console.dir at /console/, Debian's
 * packaged JavaScript at /javascript/). /metrics is the metrics part's
 * (docs/METRICS.md): 404 here until it is wired.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/buffer.h>

#include "api.h"
#include "ax/store_leader.h"

extern const char api_openapi_json[];
extern const unsigned long api_openapi_json_len;

static void send_raw(req_t *rq, int status, const char *type, const void *data, size_t len) {
    rq->replied = 1;
    struct evkeyvalq *h = evhttp_request_get_output_headers(rq->r);
    evhttp_add_header(h, "Content-Type", type);
    evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
    struct evbuffer *b = evbuffer_new();
    if (b && rq->method != EVHTTP_REQ_HEAD)
        evbuffer_add(b, data, len);
    evhttp_send_reply(rq->r, status, NULL, b);
    evbuffer_free(b);
    api_metrics_reply(rq, status);
}

static void readyz(req_t *rq) {
    char err[512];
    int64_t ms;
    int pg = ax_store_clock_ms(rq->api->svc.pg, &ms, err, sizeof err) == 0;
    const struct rd_kafka_metadata *md = NULL;
    int kafka = rd_kafka_metadata(rq->api->svc.producer, 0, NULL, &md, 2000) ==
                RD_KAFKA_RESP_ERR_NO_ERROR;
    if (md)
        rd_kafka_metadata_destroy(md);
    api_reply(rq, pg && kafka ? 200 : 503,
              json_pack("{s:s,s:b,s:b}", "status", pg && kafka ? "ready" : "not_ready",
                        "postgres", pg, "kafka", kafka));
}

static const char *mime_of(const char *path) {
    static const struct {
        const char *ext, *type;
    } types[] = {
        {".html", "text/html; charset=utf-8"}, {".js", "text/javascript; charset=utf-8"},
        {".mjs", "text/javascript; charset=utf-8"}, {".css", "text/css; charset=utf-8"},
        {".json", "application/json"}, {".svg", "image/svg+xml"}, {".png", "image/png"},
        {".ico", "image/x-icon"}, {".map", "application/json"}, {".woff2", "font/woff2"},
        {".txt", "text/plain; charset=utf-8"},
    };
    const char *dot = strrchr(path, '.');
    for (size_t i = 0; dot && i < sizeof types / sizeof types[0]; i++)
        if (strcmp(dot, types[i].ext) == 0)
            return types[i].type;
    return "application/octet-stream";
}

/* The file rel (no "..", no NUL) under dir; 404 if it is not there. */
static void send_file(req_t *rq, const char *dir, const char *rel) {
    char path[PATH_MAX + 1200], real[PATH_MAX], rdir[PATH_MAX];
    if (!dir || !*dir || strstr(rel, "..") || !realpath(dir, rdir)) {
        api_error(rq, 404, "not_found", NULL, "no such file");
        return;
    }
    if (strlen(rel) > 1024) {
        api_error(rq, 404, "not_found", NULL, "no such file");
        return;
    }
    snprintf(path, sizeof path, "%.4000s/%.1024s", rdir, *rel ? rel : "index.html");
    struct stat st;
    if (realpath(path, real) && stat(real, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(path, sizeof path, "%.4000s/index.html", real);
        if (!realpath(path, real))
            real[0] = '\0';
    }
    size_t dl = strlen(rdir);
    int fd = -1;
    if (*real && strncmp(real, rdir, dl) == 0 && real[dl] == '/')
        fd = open(real, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        if (fd >= 0)
            close(fd);
        api_error(rq, 404, "not_found", NULL, "no such file: %s", rel);
        return;
    }
    rq->replied = 1;
    struct evkeyvalq *h = evhttp_request_get_output_headers(rq->r);
    evhttp_add_header(h, "Content-Type", mime_of(real));
    evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
    evhttp_add_header(h, "Content-Security-Policy",
                      "default-src 'self'; img-src 'self' data:; style-src 'self' "
                      "'unsafe-inline'; frame-ancestors 'none'");
    evhttp_add_header(h, "X-Frame-Options", "DENY");
    struct evbuffer *b = evbuffer_new();
    if (b && rq->method != EVHTTP_REQ_HEAD && st.st_size > 0)
        evbuffer_add_file(b, fd, 0, st.st_size); /* takes fd */
    else
        close(fd);
    evhttp_send_reply(rq->r, 200, NULL, b);
    evbuffer_free(b);
    api_metrics_reply(rq, 200);
}

static int is_get(req_t *rq) {
    if (rq->method == EVHTTP_REQ_GET || rq->method == EVHTTP_REQ_HEAD)
        return 1;
    evhttp_add_header(evhttp_request_get_output_headers(rq->r), "Allow", "GET, HEAD");
    api_error(rq, 405, "method_not_allowed", NULL, "%s is not allowed on %s", rq->method_name,
              rq->path);
    return 0;
}

int api_files_route(req_t *rq) {
    const char *p = rq->path;
    const ax_conf_t *c = &rq->api->svc.conf;
    if (strcmp(p, "/healthz") == 0) {
        if (is_get(rq))
            api_reply(rq, 200, json_pack("{s:s}", "status", "ok"));
    } else if (strcmp(p, "/readyz") == 0) {
        if (is_get(rq))
            readyz(rq);
    } else if (strcmp(p, "/api/v1/openapi.json") == 0) {
        if (is_get(rq))
            send_raw(rq, 200, "application/json", api_openapi_json, api_openapi_json_len);
    } else if (strcmp(p, "/") == 0) {
        if (is_get(rq)) {
            evhttp_add_header(evhttp_request_get_output_headers(rq->r), "Location", "/console/");
            send_raw(rq, 302, "text/plain; charset=utf-8", "/console/\n", 10);
        }
    } else if (strcmp(p, "/console") == 0 || strncmp(p, "/console/", 9) == 0) {
        if (is_get(rq))
            send_file(rq, c->api_console_dir, p[8] ? p + 9 : "");
    } else if (strncmp(p, "/javascript/", 12) == 0) {
        if (is_get(rq))
            send_file(rq, c->api_javascript_dir, p + 12);
    } else {
        return 0;
    }
    return 1;
}
