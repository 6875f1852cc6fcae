/*
 * ax/retry_json.h — a job's retry rule chain (ax/retry.h) from the JSON text
 * of its retry_rules column. An adapter: it links jansson.
 */
#ifndef AX_RETRY_JSON_H
#define AX_RETRY_JSON_H

#include <stddef.h>

#include "ax/retry.h"

/* Replace p's rule chain with the job's, given as a JSON array of objects
 *   {"class": "timeout", "action": "retry"|"fail"|"alert",
 *    "wait": "backoff"|"fixed"|"soon", "delay_ms": N}
 * "class" and "action" are required; "wait" (default "backoff") only with
 * "retry"; "delay_ms" (0..AX_RETRY_MAX_DELAY_MS) with "fixed" only, and
 * required there. At most AX_RETRY_MAX_RULES rules; unknown fields are
 * errors. NULL or "" sets the default chain. On error p is untouched and
 * the message names the index and field ("rules[2].wait: ..."). The
 * numbers in p are never changed. */
int ax_retry_rules_parse(ax_retry_policy_t *p, const char *json, char *errbuf, size_t errlen);

#endif
