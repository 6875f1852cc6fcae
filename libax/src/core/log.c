/*
 * log.c — one line per event on stderr, with a UTC timestamp, the level and
 * the program name. Lines are written with a single write(2) so lines from
 * several threads never interleave. The level and name are atomics: SIGHUP
 * sets log.level on the loop thread while other threads (plugin workers,
 * the trigger's topic lister and lag monitor) log.
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

void ax_log(ax_log_level_t level, const char *fmt, ...) {
    if ((int)level < atomic_load(&log_min))
        return;
    char line[4096];
    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s %s: ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec, (long)(tv.tv_usec / 1000), level_names[level],
                     atomic_load(&log_program));
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof line - 2)
        len = sizeof line - 2;
    line[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}
