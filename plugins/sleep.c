/*
 * sleep.c — an ax plugin that sleeps, cooperatively: it polls
 * ax_plugin_should_stop() every millisecond, so a timeout or a cancel ends
 * it at once.
 *
 * Job command: {"<build>/plugins/ax-sleep.so", "MS"}; MS defaults to 10.
 * The argument is read by init() (one state per distinct MS). A run that
 * was stopped before its time fails, retryable, saying how long it slept.
 *
 * {"<build>/plugins/ax-sleep.so", "MS", "ignore-stop"} sleeps MS without
 * ever calling should_stop(): a plugin that breaks the contract of
 * ax/plugin.h, for the tests of what the executor does about one
 * (217_fence_plugin: it exits before the run's lease can expire).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ax/plugin.h"

typedef struct sleep_state {
    int64_t ms;
    int ignore_stop;
} sleep_state_t;

static int64_t mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int sleep_init(const char *const *args, size_t nargs, void **state, char *err,
                      size_t errlen) {
    int64_t ms = 10;
    if (nargs > 2 || (nargs == 2 && strcmp(args[1], "ignore-stop") != 0)) {
        snprintf(err, errlen, "usage: ax-sleep.so [MS [ignore-stop]]");
        return -1;
    }
    if (nargs >= 1) {
        char *end;
        errno = 0;
        long long v = strtoll(args[0], &end, 10);
        if (errno || end == args[0] || *end || v < 0) {
            snprintf(err, errlen, "not a number of milliseconds: '%s'", args[0]);
            return -1;
        }
        ms = v;
    }
    sleep_state_t *s = malloc(sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return AX_PLUGIN_INIT_RETRY;
    }
    s->ms = ms;
    s->ignore_stop = nargs == 2;
    *state = s;
    return 0;
}

static void sleep_fini(void *state) { free(state); }

static void sleep_run(void *state, const ax_plugin_job_t *job, ax_plugin_result_t *res) {
    const sleep_state_t *s = state;
    int64_t t0 = mono_ms(), until = t0 + s->ms;
    struct timespec tick = {0, 1000000};
    while (mono_ms() < until) {
        if (!s->ignore_stop && ax_plugin_should_stop(job)) {
            res->status = AX_PLUGIN_FAILED;
            res->retryable = 1;
            snprintf(res->message, sizeof res->message, "stopped after %lld of %lld ms",
                     (long long)(mono_ms() - t0), (long long)s->ms);
            return;
        }
        nanosleep(&tick, NULL);
    }
    res->status = AX_PLUGIN_OK;
    res->output = malloc(64);
    if (res->output)
        snprintf(res->output, 64, "slept %lld ms\n", (long long)s->ms);
}

static const ax_plugin_t sleep_plugin = {
    .api_version = AX_PLUGIN_API_VERSION,
    .name = "sleep",
    .init = sleep_init,
    .fini = sleep_fini,
    .run = sleep_run,
};

__attribute__((visibility("default"))) const ax_plugin_t *ax_plugin_entry(void) {
    return &sleep_plugin;
}
