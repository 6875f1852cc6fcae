/*
 * circuit.c — the circuit breaker of a job (ax/circuit.h): what a fire may
 * do, and what a batch of results does to the circuit. Pure: time in.
 */
#include "ax/circuit.h"

#include <string.h>

#include "ax/common.h"

static const char *const g_names[] = {"closed", "open", "half_open"};

const char *ax_circuit_state_name(ax_circuit_state_t s) {
    if ((unsigned)s < AX_ARRAY_SIZE(g_names))
        return g_names[s];
    return "unknown";
}

int ax_circuit_state_parse(const char *name, ax_circuit_state_t *ret) {
    for (size_t i = 0; name && i < AX_ARRAY_SIZE(g_names); i++)
        if (strcmp(name, g_names[i]) == 0) {
            *ret = (ax_circuit_state_t)i;
            return 0;
        }
    return AX_ERR_INVALID;
}

ax_circuit_fire_t ax_circuit_on_fire(ax_circuit_t *c, int64_t now_ms) {
    if (c->state == AX_CIRCUIT_CLOSED)
        return AX_CIRCUIT_FIRE_RUN;
    if (c->state != AX_CIRCUIT_OPEN || c->opened_at_ms < 0)
        return AX_CIRCUIT_FIRE_SKIP; /* half-open: the probe is out */
    int64_t cd = c->cooldown_ms < AX_CIRCUIT_COOLDOWN_MAX_MS ? c->cooldown_ms
                                                             : AX_CIRCUIT_COOLDOWN_MAX_MS;
    if (c->opened_at_ms + cd > now_ms)
        return AX_CIRCUIT_FIRE_SKIP;
    c->state = AX_CIRCUIT_HALF_OPEN;
    return AX_CIRCUIT_FIRE_PROBE;
}

/* The store's "outcome.jobs" statement is this function in SQL (its
 * consecutive_failures, circuit_state and circuit_opened_at CASEs, in this
 * order of cases); tests/unit/test_circuit.c lists the cases. */
int ax_circuit_on_results(ax_circuit_t *c, int64_t ok, int64_t bad, int64_t now_ms) {
    if (ok > 0) { /* a success closes it */
        c->state = AX_CIRCUIT_CLOSED;
        c->consecutive_failures = 0;
        c->opened_at_ms = -1;
        return 0;
    }
    int64_t failures = c->consecutive_failures + bad;
    int reached = bad > 0 && c->threshold > 0 && failures >= c->threshold;
    int opened = 0;
    if (c->state == AX_CIRCUIT_HALF_OPEN) {
        /* the probe did not succeed (failed, or was cancelled) */
        c->state = AX_CIRCUIT_OPEN;
        c->opened_at_ms = now_ms;
        opened = 1;
    } else if (reached) {
        if (c->state == AX_CIRCUIT_CLOSED) {
            c->opened_at_ms = now_ms;
            opened = 1;
        }
        c->state = AX_CIRCUIT_OPEN;
    }
    c->consecutive_failures = failures;
    return opened;
}
