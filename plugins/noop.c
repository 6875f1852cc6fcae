/*
 * noop.c — the smallest ax plugin: every run succeeds at once. The
 * benchmark handler (it measures the executor, not the job).
 *
 * Job command: {"<build>/plugins/ax-noop.so"}
 */
#include "ax/plugin.h"

static void noop_run(void *state, const ax_plugin_job_t *job, ax_plugin_result_t *res) {
    res->status = AX_PLUGIN_OK;
}

static const ax_plugin_t noop = {
    .api_version = AX_PLUGIN_API_VERSION,
    .name = "noop",
    .run = noop_run,
};

__attribute__((visibility("default"))) const ax_plugin_t *ax_plugin_entry(void) {
    return &noop;
}
