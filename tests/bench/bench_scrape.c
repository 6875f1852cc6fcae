/*
 * bench_scrape — the time of GET /metrics, client side: connect, request,
 * the whole response read until the server closes (evhttp closes after an
 * HTTP/1.0 request), as the scraper sees it.
 *
 * Usage: bench_scrape HOST:PORT COUNT [INTERVAL_MS]
 *        bench_scrape --watch INTERVAL_MS LOG HOST:PORT...
 *
 * Scrapes COUNT times, back to back or every INTERVAL_MS, and prints
 *   scrape_ms_p50=… scrape_ms_p99=… scrape_ms_max=… bytes=… lines=… failed=…
 * A scrape that fails or answers anything but 200 counts in `failed` (exit
 * status 3 if any did).
 *
 *        bench_scrape --watch INTERVAL_MS LOG HOST:PORT...
 *
 * One long-lived scraper, as a Prometheus is: every INTERVAL_MS it scrapes
 * each target in turn, until SIGINT or SIGTERM. A target that refuses the
 * connection (not running) costs one failed connect and is skipped. For
 * each scrape it appends to LOG, once the next scrape of the same target
 * has answered (the server's own timing of a scrape appears in the next
 * one: the increase of ax_metrics_scrape_seconds_total and
 * ax_metrics_scrape_render_cpu_seconds_total, valid when
 * ax_metrics_scrapes_total grew by exactly 1):
 *   EPOCH_MS PORT CLIENT_MS READ_MS RENDER_MS SEND_MS RENDER_CPU_MS BYTES LINES
 * EPOCH_MS is the scrape's start (wall clock), CLIENT_MS connect to the
 * last byte as this program saw it; the rest is the server's view. Its
 * own CPU is in /proc like any process's. A target without the ax_metrics_*
 * families (another program's endpoint, e.g. a Prometheus server's own
 * /metrics as a peer) is logged at once with "-" for the server's phases.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bench_common.h"

/* The longest INTERVAL_MS: usleep() takes a useconds_t (32 bits) of µs. */
#define MAX_INTERVAL_MS (UINT_MAX / 1000)

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* One scrape; its body size in *ret_bytes and lines in *ret_lines; 0 if 200. */
static int scrape(const struct sockaddr_in *sa, char *buf, size_t cap, size_t *ret_bytes,
                  size_t *ret_lines) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (const struct sockaddr *)sa, sizeof *sa) < 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    static const char req[] = "GET /metrics HTTP/1.0\r\nHost: bench\r\n\r\n";
    if (write(fd, req, sizeof req - 1) != (ssize_t)(sizeof req - 1)) {
        close(fd);
        return -1;
    }
    size_t n = 0;
    ssize_t r;
    while (n < cap - 1 && (r = read(fd, buf + n, cap - 1 - n)) > 0)
        n += (size_t)r;
    close(fd);
    buf[n] = '\0';
    char *body = strstr(buf, "\r\n\r\n");
    if (strncmp(buf, "HTTP/1.", 7) != 0 || strncmp(buf + 9, "200", 3) != 0 || !body)
        return -1;
    body += 4;
    *ret_bytes = n - (size_t)(body - buf);
    size_t lines = 0;
    for (char *p = body; *p; p++)
        lines += *p == '\n';
    *ret_lines = lines;
    return 0;
}

/* ---- --watch ------------------------------------------------------------- */

typedef struct {
    struct sockaddr_in sa;
    int port, have;   /* have: a previous scrape's figures below */
    double scrapes, ph[4]; /* read, render, send, cpu totals, seconds */
    long long epoch_ms;
    double client_ms;
    size_t bytes, lines;
} target_t;

static volatile sig_atomic_t g_stop;
static void on_signal(int sig) {
    (void)sig;
    g_stop = 1;
}

/* The value of the sample line that starts with `prefix` (name and labels, then a space). */
static int sample(const char *body, const char *prefix, double *v) {
    size_t n = strlen(prefix);
    for (const char *p = body; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, prefix, n) == 0) {
            *v = atof(p + n);
            return 0;
        }
    return -1;
}

static void watch_one(target_t *t, char *buf, size_t cap, FILE *log) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long epoch = (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    size_t bytes, lines;
    double t0 = now_ms();
    if (scrape(&t->sa, buf, cap, &bytes, &lines) < 0) {
        t->have = 0;
        return;
    }
    double ms = now_ms() - t0, n = 0, ph[4] = {0};
    static const char *const keys[] = {
        "ax_metrics_scrape_seconds_total{phase=\"read\"} ",
        "ax_metrics_scrape_seconds_total{phase=\"render\"} ",
        "ax_metrics_scrape_seconds_total{phase=\"send\"} ",
        "ax_metrics_scrape_render_cpu_seconds_total "};
    const char *body = strstr(buf, "\r\n\r\n");
    int ok = body && sample(body, "ax_metrics_scrapes_total ", &n) == 0;
    if (body && !ok) { /* another program's endpoint (a peer): the client's view only */
        fprintf(log, "%lld %d %.3f - - - - %zu %zu\n", epoch, t->port, ms, bytes, lines);
        fflush(log);
    }
    for (int i = 0; ok && i < 4; i++)
        ok = sample(body, keys[i], &ph[i]) == 0;
    if (ok && t->have && n == t->scrapes + 1) {
        fprintf(log, "%lld %d %.3f", t->epoch_ms, t->port, t->client_ms);
        for (int i = 0; i < 4; i++)
            fprintf(log, " %.3f", (ph[i] - t->ph[i]) * 1e3);
        fprintf(log, " %zu %zu\n", t->bytes, t->lines);
        fflush(log);
    }
    t->have = ok;
    t->scrapes = n;
    memcpy(t->ph, ph, sizeof ph);
    t->epoch_ms = epoch;
    t->client_ms = ms;
    t->bytes = bytes;
    t->lines = lines;
}

static int watch(int argc, char **argv) {
    int nt = argc - 4;
    if (nt < 1) {
        fprintf(stderr, "usage: bench_scrape --watch INTERVAL_MS LOG HOST:PORT...\n");
        return 2;
    }
    long long iv = 0;
    if (!bench_int_arg("bench_scrape", "INTERVAL_MS", argv[2], 1, MAX_INTERVAL_MS, &iv))
        return 2;
    long interval = (long)iv;
    FILE *log = fopen(argv[3], "a");
    target_t *t = calloc((size_t)nt, sizeof *t);
    size_t cap = 16 << 20;
    char *buf = malloc(cap);
    if (!log || !t || !buf)
        return 1;
    for (int i = 0; i < nt; i++) {
        char host[64];
        t[i].sa.sin_family = AF_INET;
        if (sscanf(argv[4 + i], "%63[^:]:%d", host, &t[i].port) != 2 ||
            inet_pton(AF_INET, host, &t[i].sa.sin_addr) != 1) {
            fprintf(stderr, "bench_scrape: '%s' is not HOST:PORT\n", argv[4 + i]);
            return 2;
        }
        t[i].sa.sin_port = htons((uint16_t)t[i].port);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    double next = now_ms();
    while (!g_stop) {
        for (int i = 0; i < nt && !g_stop; i++)
            watch_one(&t[i], buf, cap, log);
        next += (double)interval;
        double wait = next - now_ms();
        if (wait > 0)
            usleep((useconds_t)(wait * 1000));
        else
            next = now_ms();
    }
    fclose(log);
    free(t);
    free(buf);
    return 0;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--watch") == 0)
        return watch(argc, argv);
    if (argc < 3) {
        fprintf(stderr, "usage: bench_scrape HOST:PORT COUNT [INTERVAL_MS]\n");
        return 2;
    }
    char host[64];
    int port;
    if (sscanf(argv[1], "%63[^:]:%d", host, &port) != 2) {
        fprintf(stderr, "bench_scrape: '%s' is not HOST:PORT\n", argv[1]);
        return 2;
    }
    long long count_ll = 0, interval_ll = 0;
    if (!bench_int_arg("bench_scrape", "COUNT", argv[2], 1, LONG_MAX, &count_ll) ||
        (argc > 3 &&
         !bench_int_arg("bench_scrape", "INTERVAL_MS", argv[3], 0, MAX_INTERVAL_MS, &interval_ll)))
        return 2;
    long count = (long)count_ll, interval = (long)interval_ll;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        fprintf(stderr, "bench_scrape: bad host (an IPv4 address)\n");
        return 2;
    }
    size_t cap = 16 << 20;
    char *buf = malloc(cap);
    double *ms = calloc((size_t)count, sizeof *ms);
    if (!buf || !ms)
        return 1;
    size_t ok = 0, bytes = 0, lines = 0;
    long failed = 0;
    for (long i = 0; i < count; i++) {
        double t0 = now_ms();
        if (scrape(&sa, buf, cap, &bytes, &lines) == 0)
            ms[ok++] = now_ms() - t0;
        else
            failed++;
        if (interval > 0)
            usleep((useconds_t)(interval * 1000));
    }
    if (!ok) {
        printf("failed=%ld\n", failed);
        return 3;
    }
    qsort(ms, ok, sizeof *ms, cmp);
    printf("scrape_ms_p50=%.3f scrape_ms_p99=%.3f scrape_ms_max=%.3f bytes=%zu lines=%zu "
           "failed=%ld\n",
           ms[ok / 2], ms[(ok * 99) / 100 < ok ? (ok * 99) / 100 : ok - 1], ms[ok - 1], bytes,
           lines, failed);
    free(buf);
    free(ms);
    return failed ? 3 : 0;
}
