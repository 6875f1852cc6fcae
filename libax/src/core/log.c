/*
 * log.c — one line per event on stderr, with a UTC timestamp, the level and
 * the program name. Lines are written with a single write(2) so lines from
 * several threads never interleave. The level and name are atomics: SIGHUP
 * sets log.level on the loop thread while other threads (plugin workers,
 * the trigger's topic lister and lag monitor) log. With log.format = json
 * each line is one JSON object (strings escaped here: quotes, backslashes,
 * control characters); a message is cut at 3 KB either way.
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "ax/log.h"

static _Atomic(const char *) log_program = "ax";
static atomic_int log_min = AX_LOG_INFO;
static atomic_int log_json = 0;
static const char *const level_names[] = {"DEBUG", "INFO", "WARN", "ERROR"};

void ax_log_init(const char *program, ax_log_level_t level) {
    atomic_store(&log_program, program);
    atomic_store(&log_min, (int)level);
}

int ax_log_level_parse(const char *s, ax_log_level_t *ret_level) {
    for (size_t i = 0; i < sizeof level_names / sizeof level_names[0]; i++)
        if (strcasecmp(s, level_names[i]) == 0) {
            *ret_level = (ax_log_level_t)i;
            return 0;
        }
    return -1;
}

void ax_log_set_json(int on) { atomic_store(&log_json, on ? 1 : 0); }

/* Append s to line[*n] as JSON string content, up to cap bytes of line. */
static void put_json(char *line, size_t cap, size_t *n, const char *s) {
    /* stop early enough that what follows (fields, closing quotes) always fits */
    static const char hex[] = "0123456789abcdef";
    for (const unsigned char *p = (const unsigned char *)s; *p && *n + 7 < cap; p++) {
        unsigned char c = *p;
        if (c == '"' || c == '\\') {
            line[(*n)++] = '\\';
            line[(*n)++] = (char)c;
        } else if (c == '\n' || c == '\t' || c == '\r') {
            line[(*n)++] = '\\';
            line[(*n)++] = c == '\n' ? 'n' : c == '\t' ? 't' : 'r';
        } else if (c < 0x20 || c == 0x7f) {
            memcpy(line + *n, "\\u00", 4);
            line[*n + 4] = hex[c >> 4];
            line[*n + 5] = hex[c & 15];
            *n += 6;
        } else {
            line[(*n)++] = (char)c;
        }
    }
}

static void put_raw(char *line, size_t cap, size_t *n, const char *s) {
    size_t k = strlen(s), room = *n + 2 <= cap ? cap - *n - 2 : 0; /* keep one for '\n' */
    if (k > room)
        k = room;
    memcpy(line + *n, s, k);
    *n += k;
}

typedef struct {
    int64_t instance;
    const char *job, *trace;
} inst_t;

static void emit(ax_log_level_t level, const inst_t *in, const char *fmt, va_list ap) {
    char line[24576], msg[3072], ts[80];
    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    snprintf(ts, sizeof ts, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
             (long)(tv.tv_usec / 1000));
    vsnprintf(msg, sizeof msg, fmt, ap);
    char ids[600] = "";
    int has_trace = in && in->trace && in->trace[0];
    size_t n = 0, cap = sizeof line;
    if (atomic_load(&log_json)) {
        put_raw(line, cap, &n, "{\"time\":\"");
        put_raw(line, cap, &n, ts);
        put_raw(line, cap, &n, "\",\"level\":\"");
        put_raw(line, cap, &n, level_names[level]);
        put_raw(line, cap, &n, "\",\"service\":\"");
        put_json(line, 256, &n, atomic_load(&log_program));
        put_raw(line, cap, &n, "\",\"message\":\"");
        put_json(line, cap - 1024, &n, msg);
        put_raw(line, cap, &n, "\"");
        if (in) {
            snprintf(ids, sizeof ids, ",\"instance\":%lld", (long long)in->instance);
            put_raw(line, cap, &n, ids);
            if (in->job) {
                put_raw(line, cap, &n, ",\"job\":\"");
                put_json(line, cap - 512, &n, in->job);
                put_raw(line, cap, &n, "\"");
            }
            if (has_trace) {
                put_raw(line, cap, &n, ",\"trace\":\"");
                put_json(line, cap - 64, &n, in->trace);
                put_raw(line, cap, &n, "\"");
            }
        }
        put_raw(line, cap, &n, "}");
    } else {
        if (in)
            snprintf(ids, sizeof ids, " instance=%lld%s%.200s%s%.200s", (long long)in->instance,
                     in->job ? " job=" : "", in->job ? in->job : "", has_trace ? " trace=" : "",
                     has_trace ? in->trace : "");
        put_raw(line, cap, &n, ts);
        put_raw(line, cap, &n, " ");
        put_raw(line, cap, &n, level_names[level]);
        put_raw(line, cap, &n, " ");
        put_raw(line, cap, &n, atomic_load(&log_program));
        put_raw(line, cap, &n, ": ");
        put_raw(line, cap, &n, msg);
        put_raw(line, cap, &n, ids);
    }
    line[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, n);
    (void)w;
}

void ax_log(ax_log_level_t level, const char *fmt, ...) {
    if ((int)level < atomic_load(&log_min))
        return;
    va_list ap;
    va_start(ap, fmt);
    emit(level, NULL, fmt, ap);
    va_end(ap);
}

void ax_log_inst(ax_log_level_t level, int64_t instance, const char *job, const char *trace,
                 const char *fmt, ...) {
    if ((int)level < atomic_load(&log_min))
        return;
    inst_t in = {instance, job, trace};
    va_list ap;
    va_start(ap, fmt);
    emit(level, &in, fmt, ap);
    va_end(ap);
}
