/*
 * ax/circuit.h — the circuit breaker of a job, as one pure policy: the
 * state and counters of a job's circuit in, what a fire may do or what a
 * batch of results does to it out. Time is passed in (epoch ms); nothing
 * here reads a clock or touches the database.
 *
 *   closed    fires run. Failures count (consecutive_failures); at
 *             `threshold` (> 0) the circuit opens.
 *   open      fires are skipped until `cooldown_ms` passed since it opened;
 *             then one fire runs as the probe and the circuit is half-open.
 *   half_open fires are skipped while the probe runs. The probe's success
 *             closes the circuit; anything else opens it again.
 *
 * Who decides where: ax-trigger asks ax_circuit_on_fire() for every fire of
 * a job whose circuit is not closed (services/trigger/sched.c
 * apply_circuit); ax-callback's per-batch job statement (the store's
 * "outcome.jobs", libax/src/store/outcome.c) applies ax_circuit_on_results()
 * in SQL, in the same transaction as the batch — that statement mirrors
 * this function case by case and tests/unit/test_circuit.c holds the cases.
 * Change both together.
 */
#ifndef AX_CIRCUIT_H
#define AX_CIRCUIT_H

#include <stdint.h>

typedef enum ax_circuit_state {
    AX_CIRCUIT_CLOSED = 0,
    AX_CIRCUIT_OPEN = 1,
    AX_CIRCUIT_HALF_OPEN = 2,
} ax_circuit_state_t;

/* The longest cool-down honoured (a year); longer ones are cut to it. */
#define AX_CIRCUIT_COOLDOWN_MAX_MS 31536000000LL

typedef struct ax_circuit {
    ax_circuit_state_t state;
    int64_t consecutive_failures;
    int64_t threshold;    /* failures that open it; <= 0: the breaker is off */
    int64_t cooldown_ms;  /* open -> half-open after this long */
    int64_t opened_at_ms; /* when it opened; < 0 = not known (never probed) */
} ax_circuit_t;

/* "closed", "open", "half_open" (the job.circuit_state values). */
const char *ax_circuit_state_name(ax_circuit_state_t s);
/* 0, or AX_ERR_INVALID for a name not in the table. */
int ax_circuit_state_parse(const char *name, ax_circuit_state_t *ret);

typedef enum ax_circuit_fire {
    AX_CIRCUIT_FIRE_RUN = 0, /* closed: the fire runs */
    AX_CIRCUIT_FIRE_PROBE,   /* cool-down over: this fire is the probe, now half-open */
    AX_CIRCUIT_FIRE_SKIP,    /* open (cooling down) or a probe already out */
} ax_circuit_fire_t;

/* A fire of the job at now_ms. On AX_CIRCUIT_FIRE_PROBE c->state becomes
 * AX_CIRCUIT_HALF_OPEN (the caller stores it), so a second fire of the same
 * job in the same batch is skipped. */
ax_circuit_fire_t ax_circuit_on_fire(ax_circuit_t *c, int64_t now_ms);

/* A batch of results of the job: `ok` successes and `bad` failures (an
 * instance cut by the backlog cap or cancelled is neither). Updates *c and
 * returns 1 if the circuit opened at now_ms (for the alert), else 0. */
int ax_circuit_on_results(ax_circuit_t *c, int64_t ok, int64_t bad, int64_t now_ms);

#endif
