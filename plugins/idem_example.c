/*
 * idem_example.c — how a plugin makes an effect happen once per business
 * key, whatever the retries and duplicate submissions: claim the key first,
 * do the effect only when the claim is new.
 *
 * Job command: {"<build>/plugins/ax-idem_example.so"}. The business key is
 * the payload (e.g. "order-42"), or the instance's idempotency key when the
 * payload is empty. The first instance to claim a key reports
 * "claimed KEY", every other instance of the same job "KEY was already
 * claimed by another instance". The claim is scoped to the job name.
 *
 * The claim and the effect are not one transaction: an instance that claims
 * and then crashes before the effect leaves the key claimed; its own retries
 * see AX_PLUGIN_IDEM_NEW again (the claim belongs to the instance), so a
 * retried instance must make the effect itself idempotent or check it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ax/plugin.h"

static char *dup_text(const char *s) {
    size_t n = strlen(s);
    char *p = malloc(n + 1);
    if (p)
        memcpy(p, s, n + 1);
    return p;
}

static void idem_run(void *state, const ax_plugin_job_t *job, ax_plugin_result_t *res) {
    char key[513], err[256], out[700];
    if (job->payload_len > 0 && job->payload_len < sizeof key) {
        memcpy(key, job->payload, job->payload_len);
        key[job->payload_len] = '\0';
    } else if (job->payload_len == 0 && job->idempotency_key) {
        snprintf(key, sizeof key, "%s", job->idempotency_key);
    } else {
        res->status = AX_PLUGIN_FAILED;
        snprintf(res->message, sizeof res->message,
                 "the payload must be a business key of 1 to 512 bytes");
        return;
    }
    switch (ax_plugin_idem_claim(job, key, err, sizeof err)) {
    case AX_PLUGIN_IDEM_NEW:
        /* Do the effect here (charge, send, write...). */
        ax_plugin_log(job, AX_PLUGIN_LOG_INFO, "claimed %s", key);
        snprintf(out, sizeof out, "claimed %s", key);
        break;
    case AX_PLUGIN_IDEM_TAKEN:
        snprintf(out, sizeof out, "%s was already claimed by another instance", key);
        break;
    default:
        res->status = AX_PLUGIN_FAILED;
        res->retryable = 1; /* the database may be back soon */
        snprintf(res->message, sizeof res->message, "%s", err);
        return;
    }
    res->status = AX_PLUGIN_OK;
    res->output = dup_text(out);
}

static const ax_plugin_t idem_plugin = {
    .api_version = AX_PLUGIN_API_VERSION,
    .name = "idem_example",
    .run = idem_run,
};

__attribute__((visibility("default"))) const ax_plugin_t *ax_plugin_entry(void) {
    return &idem_plugin;
}
