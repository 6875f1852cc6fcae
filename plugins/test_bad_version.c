/*
 * test_bad_version.c — for tests/unit/test_plugin.c only: a plugin that
 * claims an API version no executor speaks, so loading it must fail.
 */
#include "ax/plugin.h"

static void bad_run(void *state, const ax_plugin_job_t *job, ax_plugin_result_t *res) {}

static const ax_plugin_t bad = {
    .api_version = AX_PLUGIN_API_VERSION + 1000,
    .name = "bad_version",
    .run = bad_run,
};

__attribute__((visibility("default"))) const ax_plugin_t *ax_plugin_entry(void) {
    return &bad;
}
