/*
 * ax/log.h — one-line structured logs on stderr, as text (the default):
 *   2026-11-30T10:00:00.123Z INFO ax-trigger: message key=value ...
 * or, with ax_log_set_json(1) (log.format = json), one JSON object a line:
 *   {"time":"2026-11-30T10:00:00.123Z","level":"INFO","service":"ax-trigger",
 *    "message":"...","instance":42,"job":"7","trace":"9f..."}
 * where instance, job and trace are present only in lines about an
 * instance (ax_log_inst; in text they are appended as key=value).
 * Library code returns errors; programs decide what to log. Secrets are
 * never passed here (see ax_conf_is_secret()).
 */
#ifndef AX_LOG_H
#define AX_LOG_H

#include <stdint.h>

typedef enum { AX_LOG_DEBUG = 0, AX_LOG_INFO, AX_LOG_WARN, AX_LOG_ERROR } ax_log_level_t;

void ax_log_init(const char *program, ax_log_level_t level);
int  ax_log_level_parse(const char *s, ax_log_level_t *ret_level);
void ax_log(ax_log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* JSON lines (1) or text (0); an atomic, any thread. */
void ax_log_set_json(int on);
/* A line about an instance: its id (> 0), job (id or name; NULL: left
 * out) and trace id (NULL or "": left out) as fields of their own. */
void ax_log_inst(ax_log_level_t level, int64_t instance, const char *job, const char *trace,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));

#define ax_debug(...) ax_log(AX_LOG_DEBUG, __VA_ARGS__)
#define ax_info(...)  ax_log(AX_LOG_INFO, __VA_ARGS__)
#define ax_warn(...)  ax_log(AX_LOG_WARN, __VA_ARGS__)
#define ax_error(...) ax_log(AX_LOG_ERROR, __VA_ARGS__)

#endif
