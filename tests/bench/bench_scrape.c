/*
 * bench_scrape — the time of GET /metrics, client side: connect, request,
 * the whole response read until the server closes (evhttp closes after an
 * HTTP/1.0 request), as the scraper sees it.
 *
 * Usage: bench_scrape HOST:PORT COUNT [INTERVAL_MS]
 *
 * Scrapes COUNT times, back to back or every INTERVAL_MS, and prints
 *   scrape_ms_p50=… scrape_ms_p99=… scrape_ms_max=… bytes=… lines=… failed=…
 * A scrape that fails or answers anything but 200 counts in `failed` (exit
 * status 3 if any did).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

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

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
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
    long count = atol(argv[2]), interval = argc > 3 ? atol(argv[3]) : 0;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (count < 1 || inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        fprintf(stderr, "bench_scrape: bad host or count\n");
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
