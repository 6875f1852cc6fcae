/*
 * alerts.c — the alerts ax-callback raises: logged, counted (ax_counter
 * "alerts.<kind>") and sent to the webhook when alert.webhook.url is set
 * (ax/alert.h, docs/ALERTS.md).
 */
#include <stdio.h>

#include "ax/alert.h"
#include "callback.h"

void cb_alert(callback_t *cb, const char *kind, const char *job, const char *text) {
    alert_raise(cb->svc.pg, kind, job, text);
}

void cb_alert_circuits(callback_t *cb, const ax_outcome_opened_t *v, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char text[512];
        snprintf(text, sizeof text, "circuit of job %s opened after %lld consecutive failures",
                 v[i].job ? v[i].job : "", (long long)v[i].consecutive_failures);
        cb_alert(cb, "circuit_open", v[i].job, text);
    }
}
