/*
 * h_dlq.c — /api/v1/dlq (docs/API.md "DLQ and counters").
 */
#include "api.h"

void h_dlq_list(req_t *rq) {
    api_error(rq, 503, "unavailable", NULL, "the DLQ is not served by this ax-api yet");
}

void h_dlq_get(req_t *rq) {
    api_error(rq, 503, "unavailable", NULL, "the DLQ is not served by this ax-api yet");
}

void h_dlq_replay(req_t *rq) {
    api_error(rq, 503, "unavailable", NULL, "the DLQ is not served by this ax-api yet");
}
