/*
 * ax-callback — closes the loop (callback.h tells what and how; the files
 * are its parts). Here: the command line, SIGHUP, and the wiring.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ax/alert.h"
#include "ax/log.h"
#include "callback.h"

static const char usage[] =
    "Usage: ax-callback [--config FILE] [--set KEY=VALUE]...\n\n"
    "Persists attempt results and publishes final outcomes. SIGHUP reloads the\n"
    "configuration (the keys it can apply while running: see docs/OPERATIONS.md);\n"
    "SIGTERM stops after the batch at hand.\n\n";

/* ---- SIGHUP: keys applied while running; any other change waits for a restart ---------- */
static const char *const reloadable_keys[] = {
    "callback.retry.budget", "callback.batch", "alert.webhook.url", "alert.webhook.secret",
    "alert.webhook.timeout.ms", "backoff.initial.ms", "backoff.max.ms", NULL};

static int reload_check(ax_svc_t *svc, ax_conf_t *n, char *err, size_t len) {
    (void)svc;
    return alert_check(n, err, len);
}

static int str_changed(const char *a, const char *b) {
    return strcmp(a ? a : "", b ? b : "") != 0;
}

static void on_reload(ax_svc_t *svc, const ax_conf_t *old) {
    const ax_conf_t *c = &svc->conf;
    char err[512];
    if (c->callback_batch != old->callback_batch &&
        ax_svc_set_batch_max(svc, (size_t)c->callback_batch) < 0)
        ax_error("SIGHUP: callback.batch: out of memory; batches stay at %zu", svc->batch_max);
    if (str_changed(c->alert_webhook_url, old->alert_webhook_url) ||
        str_changed(c->alert_webhook_secret, old->alert_webhook_secret) ||
        c->alert_webhook_timeout_ms != old->alert_webhook_timeout_ms) {
        if (alert_init(svc, err, sizeof err) < 0)
            ax_error("SIGHUP: alert webhook off: %s", err);
    }
}

/* SIGTERM: the publisher's thread is asked to stop with the loop (a
 * transaction under way ends; what is left stays in the outbox for the
 * next holder). */
static void on_stop(ax_svc_t *svc) {
    cb_pub_stop((callback_t *)svc);
    event_base_loopbreak(svc->base);
}

/* The publisher could not be set up or started: everything undone. */
static int pub_failed(callback_t *cb, const char *err) {
    ax_error("results publisher: %s", err);
    cb_pub_fini(cb);
    cm_fini(cb);
    ax_svc_destroy(&cb->svc);
    return 1;
}

int main(int argc, char **argv) {
    /* the service's state: main's, for the life of the process (the
     * service keeps a pointer to cb.svc for its signal handlers) */
    static callback_t cb;
    if (ax_svc_init(&cb.svc, "ax-callback", &argc, argv, usage, "callback") < 0)
        return ax_svc_exit_status(&cb.svc);
    ax_svc_t *svc = &cb.svc;
    svc->reloadable = reloadable_keys;
    svc->reload_check = reload_check;
    svc->on_reload = on_reload;
    svc->on_stop = on_stop;
    char err[512];
    if (alert_init(svc, err, sizeof err) < 0) {
        /* librdkafka's threads end before the program does (exit racing
         * one of them crashed in OpenSSL's cleanup, test 125) */
        ax_svc_destroy(svc);
        fprintf(stderr, "ax-callback: configuration error: %s\n", err);
        return 2;
    }
    srand48((long)(ax_now_ms() ^ (int64_t)getpid() << 16));
    cm_init(&cb);
    if (cb_pub_init(&cb, err, sizeof err) < 0)
        return pub_failed(&cb, err);
    char group[300];
    /* its own window (callback.consume.linger.ms), not consume.linger.ms */
    if (svc->conf.callback_consume_linger_ms >= 0)
        ax_svc_consume_linger(svc, svc->conf.callback_consume_linger_ms);
    /* the publisher's thread only once the service consumes: it makes
     * Kafka clients, and none may outlive a start that fails */
    if (ax_svc_consume(svc, svc->topic_callback,
                       ax_conf_topic(&svc->conf, "callback", group, sizeof group),
                       (size_t)svc->conf.callback_batch, cb_on_attempt_batch, &cb) < 0) {
        cb_pub_fini(&cb);
        return ax_svc_exit_status(svc);
    }
    if (cb_pub_start(&cb, err, sizeof err) < 0)
        return pub_failed(&cb, err);
    ax_svc_run(svc);
    cb_pub_fini(&cb);
    ax_info("stopped: %lld attempts recorded, %lld retries scheduled, %lld stale results "
            "ignored, %lld outcomes published",
            (long long)cb.finished, (long long)cb.retried, (long long)cb.stale,
            (long long)atomic_load(&cb.published));
    free(cb.probes.v);
    free(cb.probes.msg);
    alert_fini();
    cm_fini(&cb);
    ax_svc_destroy(svc);
    return 0;
}
