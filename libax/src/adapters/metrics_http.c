/*
 * metrics_http.c — GET /metrics on a thread of its own (evhttp), and the
 * collectors of every process: process_* from /proc/self, the store's
 * statement figures, librdkafka's statistics (see ax/metrics_http.h).
 */
#include <dirent.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <time.h>
#include <unistd.h>

#include "ax/common.h"
#include "ax/kafka.h"
#include "ax/metrics_http.h"
#include "ax/store.h"

/* ---- the server --------------------------------------------------------------------------- */

/* The server's own timing of its scrapes (ax_metrics_scrape_*), seconds of
 * CLOCK_MONOTONIC (cpu: of the thread). Touched only on the server's thread
 * (the collector renders on it too), so plain doubles; owned by the
 * registry (a collector's argument). With one scraper at a time
 * (Prometheus), the totals' increase between two scrapes is the earlier
 * scrape's time. */
typedef struct {
    double scrapes, read, render, send, cpu;
    double accepted, rendered; /* the current connection's marks, 0 if none */
} scrape_timing_t;

static void collect_scrapes(ax_mwriter_t *w, void *arg) {
    const scrape_timing_t *t = arg;
    ax_mw_family(w, "ax_metrics_scrapes_total", AX_METRIC_COUNTER,
                 "Scrapes of /metrics answered by this process.");
    ax_mw_sample(w, "ax_metrics_scrapes_total", NULL, t->scrapes);
    ax_mw_family(w, "ax_metrics_scrape_seconds_total", AX_METRIC_COUNTER,
                 "Server-side time of the scrapes before this one: read (connection accepted to "
                 "request parsed), render (the exposition made), send (reply written).");
    static const char *const ph[] = {"read", "render", "send"};
    const double v[] = {t->read, t->render, t->send};
    for (size_t i = 0; i < 3; i++) {
        const char *lab[] = {"phase", ph[i], NULL};
        ax_mw_sample(w, "ax_metrics_scrape_seconds_total", lab, v[i]);
    }
    ax_mw_family(w, "ax_metrics_scrape_render_cpu_seconds_total", AX_METRIC_COUNTER,
                 "CPU time of the server's thread rendering the scrapes before this one.");
    ax_mw_sample(w, "ax_metrics_scrape_render_cpu_seconds_total", NULL, t->cpu);
}

struct ax_metrics_server {
    ax_metrics_t *reg;
    struct event_base *base;
    struct evhttp *http;
    struct event *ev_stop;
    int stop_fd[2];
    pthread_t th;
    int started;
    int port;
    ax_mbuf_t buf; /* the exposition, kept between scrapes (grown once) */
    scrape_timing_t *t; /* belongs to the registry */
};

static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* evhttp makes a connection's bufferevent here, just after accept(2). */
static struct bufferevent *on_accept(struct event_base *base, void *arg) {
    ax_metrics_server_t *s = arg;
    s->t->accepted = clock_s(CLOCK_MONOTONIC);
    return bufferevent_socket_new(base, -1, 0); /* as evhttp makes it without this hook */
}

/* The reply has been written to the socket. */
static void on_sent(struct evhttp_request *req, void *arg) {
    ax_metrics_server_t *s = arg;
    (void)req;
    double now = clock_s(CLOCK_MONOTONIC);
    if (s->t->rendered > 0 && now >= s->t->rendered)
        s->t->send += now - s->t->rendered;
    s->t->rendered = 0;
}

static void on_request(struct evhttp_request *req, void *arg) {
    ax_metrics_server_t *s = arg;
    double t0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
    if (s->t->accepted > 0 && t0 >= s->t->accepted)
        s->t->read += t0 - s->t->accepted;
    s->t->accepted = 0;
    const char *path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));
    if (!path || strcmp(path, "/metrics") != 0) {
        evhttp_send_error(req, HTTP_NOTFOUND, NULL);
        return;
    }
    s->buf.len = 0;
    if (s->buf.p)
        s->buf.p[0] = '\0';
    s->buf.oom = 0;
    struct evbuffer *out = evhttp_request_get_output_buffer(req);
    if (ax_metrics_render(s->reg, &s->buf) < 0 ||
        (s->buf.len && evbuffer_add(out, s->buf.p, s->buf.len) < 0)) {
        ax_mbuf_free(&s->buf);
        evhttp_send_error(req, HTTP_INTERNAL, NULL);
        return;
    }
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      AX_METRICS_CONTENT_TYPE);
    s->t->rendered = clock_s(CLOCK_MONOTONIC);
    s->t->scrapes++;
    s->t->render += s->t->rendered - t0;
    s->t->cpu += clock_s(CLOCK_THREAD_CPUTIME_ID) - c0;
    evhttp_request_set_on_complete_cb(req, on_sent, s);
    evhttp_send_reply(req, HTTP_OK, "OK", NULL);
}

static void on_stop(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    event_base_loopbreak(arg);
}

/* Ask the scheduler for a short time slice (0.1 ms; Linux >= 6.12, EEVDF:
 * sched_attr.sched_runtime of a SCHED_OTHER thread, no privilege needed,
 * same policy and nice): a thread with a shorter slice than the running
 * one's preempts it when it wakes, so a scrape arriving while every core
 * runs the service's work waits for a core about 0.1 ms, not a whole
 * slice of whatever runs there. The thread runs ~0.1 ms a scrape, so it
 * takes the same CPU as before, only sooner. Best effort: on older
 * kernels the call fails or the field is ignored, and nothing changes. */
static void short_slice(void) {
#ifdef SYS_sched_setattr
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, 0); /* this thread's (Linux: per thread) */
    if (nice == -1 && errno)
        return;
    struct { /* the kernel's struct sched_attr, version 0 (its header clashes with glibc's) */
        uint32_t size, policy;
        uint64_t flags;
        int32_t nice;
        uint32_t priority;
        uint64_t runtime, deadline, period;
    } a = {.size = sizeof a, .policy = SCHED_OTHER, .nice = nice, .runtime = 100 * 1000};
    (void)syscall(SYS_sched_setattr, 0, &a, 0);
#endif
}

static void *serve_thread(void *arg) {
    ax_metrics_server_t *s = arg;
    short_slice();
    event_base_dispatch(s->base);
    return NULL;
}

static int bound_port(struct evhttp_bound_socket *h) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(evhttp_bound_socket_get_fd(h), (struct sockaddr *)&ss, &len) < 0)
        return -1;
    if (ss.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return -1;
}

static int server_setup(ax_metrics_server_t *s, const char *host, int port, char *errbuf,
                        size_t errlen) {
    if (pipe(s->stop_fd) < 0)
        return ax_seterr(errbuf, errlen, AX_ERR_IO, "metrics: pipe failed");
    if (!(s->base = event_base_new()) || !(s->http = evhttp_new(s->base)))
        return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "metrics: no memory");
    evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD);
    evhttp_set_max_headers_size(s->http, 8192);
    evhttp_set_max_body_size(s->http, 0);
    evhttp_set_timeout(s->http, 10);
    evhttp_set_gencb(s->http, on_request, s);
    evhttp_set_bevcb(s->http, on_accept, s);
    struct evhttp_bound_socket *h = evhttp_bind_socket_with_handle(s->http, host, (uint16_t)port);
    if (!h)
        return ax_seterr(errbuf, errlen, AX_ERR_IO, "metrics.listen: cannot listen on %s:%d",
                         host, port);
    s->port = bound_port(h);
    s->ev_stop = event_new(s->base, s->stop_fd[0], EV_READ, on_stop, s->base);
    if (!s->ev_stop || event_add(s->ev_stop, NULL) < 0)
        return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "metrics: no memory");
    if (pthread_create(&s->th, NULL, serve_thread, s) != 0)
        return ax_seterr(errbuf, errlen, AX_ERR_IO, "metrics: cannot start its thread");
    s->started = 1;
    return 0;
}

ax_metrics_server_t *ax_metrics_serve(ax_metrics_t *m, const char *listen, char *errbuf,
                                      size_t errlen) {
    char host[256], why[300];
    int port;
    if (ax_metrics_listen_parse(listen, host, sizeof host, &port, why, sizeof why) < 0 ||
        port < 0) {
        ax_seterr(errbuf, errlen, AX_ERR_INVALID, "metrics.listen: %s",
                  port < 0 ? "empty" : why);
        return NULL;
    }
    ax_metrics_server_t *s = calloc(1, sizeof *s);
    if (!s) {
        ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "metrics: no memory");
        return NULL;
    }
    s->reg = m;
    s->stop_fd[0] = s->stop_fd[1] = -1;
    if (!(s->t = calloc(1, sizeof *s->t)) ||
        ax_metrics_collector(m, collect_scrapes, s->t, free) < 0) {
        free(s);
        ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "metrics: no memory");
        return NULL;
    }
    if (server_setup(s, host, port, errbuf, errlen) < 0) {
        ax_metrics_server_stop(s);
        return NULL;
    }
    return s;
}

int ax_metrics_server_port(const ax_metrics_server_t *s) { return s ? s->port : -1; }

void ax_metrics_server_stop(ax_metrics_server_t *s) {
    if (!s)
        return;
    if (s->started) {
        ssize_t w = write(s->stop_fd[1], "x", 1);
        (void)w;
        pthread_join(s->th, NULL);
    }
    if (s->ev_stop)
        event_free(s->ev_stop);
    if (s->http)
        evhttp_free(s->http);
    if (s->base)
        event_base_free(s->base);
    for (int i = 0; i < 2; i++)
        if (s->stop_fd[i] >= 0)
            close(s->stop_fd[i]);
    ax_mbuf_free(&s->buf);
    free(s);
}

/* ---- process_* ---------------------------------------------------------------------------- */

typedef struct {
    double start_time;
    long ticks;
    long page;
} proc_info_t;

/* Fields 14 (utime), 15 (stime), 22 (starttime), 23 (vsize), 24 (rss) of
 * /proc/self/stat: tokens 11, 12, 19, 20, 21 after the command's ')'. */
static int proc_stat(unsigned long long f[22]) {
    char buf[2048];
    FILE *fp = fopen("/proc/self/stat", "r");
    if (!fp)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, fp);
    fclose(fp);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (!p)
        return -1;
    p++;
    for (int i = 0; i < 22; i++) {
        while (*p == ' ')
            p++;
        if (i == 0) { /* the state letter */
            f[0] = 0;
            p++;
            continue;
        }
        char *end;
        f[i] = strtoull(p, &end, 10);
        if (end == p)
            return -1;
        p = end;
    }
    return 0;
}

static long open_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    long n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1; /* the directory's own descriptor */
}

static void collect_process(ax_mwriter_t *w, void *arg) {
    proc_info_t *pi = arg;
    unsigned long long f[22];
    if (proc_stat(f) == 0) {
        ax_mw_family(w, "process_cpu_seconds_total", AX_METRIC_COUNTER,
                     "User and system CPU time spent, in seconds.");
        ax_mw_sample(w, "process_cpu_seconds_total", NULL, (double)(f[11] + f[12]) / pi->ticks);
        ax_mw_family(w, "process_resident_memory_bytes", AX_METRIC_GAUGE,
                     "Resident memory size in bytes.");
        ax_mw_sample(w, "process_resident_memory_bytes", NULL, (double)f[21] * pi->page);
        ax_mw_family(w, "process_virtual_memory_bytes", AX_METRIC_GAUGE,
                     "Virtual memory size in bytes.");
        ax_mw_sample(w, "process_virtual_memory_bytes", NULL, (double)f[20]);
    }
    long fds = open_fds();
    if (fds >= 0) {
        ax_mw_family(w, "process_open_fds", AX_METRIC_GAUGE, "Number of open file descriptors.");
        ax_mw_sample(w, "process_open_fds", NULL, (double)fds);
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        ax_mw_family(w, "process_max_fds", AX_METRIC_GAUGE,
                     "Maximum number of open file descriptors.");
        ax_mw_sample(w, "process_max_fds", NULL, (double)rl.rlim_cur);
    }
    if (pi->start_time > 0) {
        ax_mw_family(w, "process_start_time_seconds", AX_METRIC_GAUGE,
                     "Start time of the process since unix epoch in seconds.");
        ax_mw_sample(w, "process_start_time_seconds", NULL, pi->start_time);
    }
}

static double boot_time(void) {
    FILE *fp = fopen("/proc/stat", "r");
    char line[512];
    double bt = 0;
    while (fp && fgets(line, sizeof line, fp))
        if (sscanf(line, "btime %lf", &bt) == 1)
            break;
    if (fp)
        fclose(fp);
    return bt;
}

int ax_metrics_add_process(ax_metrics_t *m) {
    if (!m)
        return 0;
    proc_info_t *pi = calloc(1, sizeof *pi);
    if (!pi)
        return AX_ERR_NOMEM;
    pi->ticks = sysconf(_SC_CLK_TCK);
    pi->page = sysconf(_SC_PAGESIZE);
    if (pi->ticks <= 0)
        pi->ticks = 100;
    unsigned long long f[22];
    double bt = boot_time();
    pi->start_time = proc_stat(f) == 0 && bt > 0 ? bt + (double)f[19] / pi->ticks : 0;
    return ax_metrics_collector(m, collect_process, pi, free);
}

/* ---- the store's statements --------------------------------------------------------------- */

#define STORE_STATS_MAX 1024

typedef struct {
    const char *name, *help;
    ax_metric_type_t type;
} store_family_t;

static const store_family_t store_families[] = {
    {"ax_store_statement_calls_total", "Executions of a store statement (errors included).",
     AX_METRIC_COUNTER},
    {"ax_store_statement_errors_total", "Executions of a store statement that failed.",
     AX_METRIC_COUNTER},
    {"ax_store_statement_rows_total", "Rows returned or affected by a store statement.",
     AX_METRIC_COUNTER},
    {"ax_store_statement_seconds_total", "Wall time of a store statement's round trips.",
     AX_METRIC_COUNTER},
    {"ax_store_statement_max_seconds", "Longest round trip of a store statement so far.",
     AX_METRIC_GAUGE},
};

static double store_value(const ax_store_stat_t *st, size_t family) {
    switch (family) {
    case 0: return (double)st->calls;
    case 1: return (double)st->errors;
    case 2: return (double)st->rows;
    case 3: return (double)st->total_us / 1e6;
    default: return (double)st->max_us / 1e6;
    }
}

static void collect_store(ax_mwriter_t *w, void *arg) {
    ax_store_stat_t *st = arg;
    size_t n = ax_store_stats(st, STORE_STATS_MAX);
    if (n > STORE_STATS_MAX)
        n = STORE_STATS_MAX;
    for (size_t f = 0; f < AX_ARRAY_SIZE(store_families); f++) {
        ax_mw_family(w, store_families[f].name, store_families[f].type, store_families[f].help);
        for (size_t i = 0; i < n; i++) {
            const char *lab[] = {"statement", st[i].name, NULL};
            ax_mw_sample(w, store_families[f].name, lab, store_value(&st[i], f));
        }
    }
}

int ax_metrics_add_store(ax_metrics_t *m) {
    if (!m)
        return 0;
    /* the snapshot buffer, used under the registry's mutex */
    ax_store_stat_t *st = calloc(STORE_STATS_MAX, sizeof *st);
    if (!st)
        return AX_ERR_NOMEM;
    return ax_metrics_collector(m, collect_store, st, free);
}

/* ---- one call for a process --------------------------------------------------------------- */

int ax_metrics_endpoint_start(ax_metrics_endpoint_t *ep, const ax_conf_t *conf, const char *name,
                              char *errbuf, size_t errlen) {
    memset(ep, 0, sizeof *ep);
    if (!conf->metrics_listen || !*conf->metrics_listen)
        return 0;
    if (!(ep->reg = ax_metrics_new()) || ax_metrics_add_process(ep->reg) < 0 ||
        ax_metrics_add_store(ep->reg) < 0 || !(ep->kstats = ax_metrics_add_kafka(ep->reg, name))) {
        ax_metrics_endpoint_stop(ep);
        return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "metrics: no memory");
    }
    if (!(ep->srv = ax_metrics_serve(ep->reg, conf->metrics_listen, errbuf, errlen))) {
        ax_metrics_endpoint_stop(ep);
        return AX_ERR_IO;
    }
    return 0;
}

void ax_metrics_endpoint_stop(ax_metrics_endpoint_t *ep) {
    if (!ep)
        return;
    ax_metrics_server_stop(ep->srv);
    ax_kafka_set_stats(NULL, NULL, NULL);
    ax_metrics_destroy(ep->reg); /* frees the kafka statistics' snapshot too */
    memset(ep, 0, sizeof *ep);
}
