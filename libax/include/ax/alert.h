/*
 * alert.h — the alert webhook of ax-callback and the leader ax-trigger (docs/ALERTS.md).
 *
 * When alert.webhook.url is set, every alert is POSTed as JSON to it with
 * libevent's HTTP client on the service's loop, never blocking it:
 *   {"kind":..., "job":...|null, "text":..., "deployment":<topic.prefix>,
 *    "worker":<worker id>, "time":<epoch ms>, "id":<32 hex chars>}
 * Headers: Content-Type: application/json, X-Ax-Alert-Id: <id>,
 * X-Ax-Timestamp: <epoch seconds of this delivery attempt> and, when
 * alert.webhook.secret is set, X-Ax-Signature: sha256=<hex HMAC-SHA256 of
 * "<timestamp>.<body>">.
 *
 * Best effort: a connection error, no response within
 * alert.webhook.timeout.ms, or a non-2xx status is retried up to
 * ALERT_RETRIES times after 1, 2, 4 s, then dropped with a WARN line
 * (counter alerts.webhook.failed). At most ALERT_MAX_IN_FLIGHT alerts are
 * held (sending or waiting to retry); more are dropped at once (WARN,
 * counter alerts.webhook.dropped). Deliveries counted in
 * alerts.webhook.delivered. At shutdown the ones still held are abandoned
 * (logged). The secret and the URL's path and query (which may carry a
 * token) are never logged.
 */
#ifndef AX_ALERT_H
#define AX_ALERT_H

#include <stddef.h>

#include "ax/service.h"

#define ALERT_RETRIES 3
#define ALERT_MAX_IN_FLIGHT 100

/* One sender per process (on the service loop). Reads alert.webhook.*
 * from svc->conf, which must outlive alert_fini(). With no URL configured
 * returns 0 and alert_send() does nothing. A URL that is not http:// (https
 * is refused: libevent's client has no TLS here), has no host, or carries
 * user:password fails with the reason: a configuration error (the caller
 * exits 2). */
int alert_init(ax_svc_t *svc, char *errbuf, size_t errlen);
/* The checks alert_init() makes of c's alert.webhook.url, without touching
 * the sender (for SIGHUP: a refused URL changes nothing). */
int alert_check(const ax_conf_t *c, char *errbuf, size_t errlen);

/* Queue one alert for delivery; returns at once. job may be NULL. */
void alert_send(const char *kind, const char *job, const char *text);

/* Raise an alert: a WARN line "ALERT <kind>[ job <job>]: <text>", the
 * counter alerts.<kind> in ax_counter (through pg, when not NULL), and the
 * webhook (alert_send). */
struct ax_pg;
void alert_raise(struct ax_pg *pg, const char *kind, const char *job, const char *text);

/* Abandon what is still held (logged) and free everything. Call before the
 * event base is freed. Safe without alert_init() and twice. */
void alert_fini(void);

#endif
