/*
 * ax/log.h — one-line structured logs on stderr:
 *   2026-11-30T10:00:00.123Z INFO ax-trigger: message key=value ...
 * Library code returns errors; programs decide what to log. Secrets are
 * never passed here (see ax_conf_is_secret()).
 */
#ifndef AX_LOG_H
#define AX_LOG_H

typedef enum { AX_LOG_DEBUG = 0, AX_LOG_INFO, AX_LOG_WARN, AX_LOG_ERROR } ax_log_level_t;

void ax_log_init(const char *program, ax_log_level_t level);
int  ax_log_level_parse(const char *s, ax_log_level_t *ret_level);
void ax_log(ax_log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define ax_debug(...) ax_log(AX_LOG_DEBUG, __VA_ARGS__)
#define ax_info(...)  ax_log(AX_LOG_INFO, __VA_ARGS__)
#define ax_warn(...)  ax_log(AX_LOG_WARN, __VA_ARGS__)
#define ax_error(...) ax_log(AX_LOG_ERROR, __VA_ARGS__)

#endif
