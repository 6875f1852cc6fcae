/*
 * ax/store_circuit.h — the circuit breaker's columns of the job table
 * (circuit_state, consecutive_failures, circuit_threshold,
 * circuit_cooldown_ms, circuit_opened_at): what ax-trigger reads to decide
 * fires with ax_circuit_on_fire() (ax/circuit.h), and the half-open step it
 * writes. (ax-callback's open/close is part of its batch statement, in
 * ax/store_outcome.h.)
 *
 * Functions return 0 or an ax error (ax/common.h): AX_ERR_IO retry later;
 * the reason in errbuf.
 */
#ifndef AX_STORE_CIRCUIT_H
#define AX_STORE_CIRCUIT_H

#include <stddef.h>
#include <stdint.h>

#include "ax/circuit.h"

typedef struct ax_pg ax_pg_t;

typedef struct ax_circuit_row {
    int64_t job_id;
    ax_circuit_t circuit; /* the caller's to update (ax_circuit_on_fire) */
    ax_circuit_state_t stored; /* circuit_state as read */
    int64_t now_ms;      /* the database's now() when read (the time to decide at) */
    char opened_at[32];  /* circuit_opened_at, ISO 8601 UTC ("" if none), for messages */
} ax_circuit_row_t;

/* Inside the caller's transaction: the jobs of job_ids[0..n) whose circuit
 * is not closed, locked (FOR UPDATE) until it ends. *ret (malloc'd, free())
 * gets *ret_n rows. */
int ax_store_circuit_load(ax_pg_t *pg, const int64_t *job_ids, size_t n, ax_circuit_row_t **ret,
                          size_t *ret_n, char *errbuf, size_t errlen);

/* Open -> half-open: the next fire of the job is the probe. Does nothing
 * if the circuit is no longer open. */
int ax_store_circuit_half_open(ax_pg_t *pg, int64_t job_id, char *errbuf, size_t errlen);

/* How many jobs of the deployment have their circuit open, and half-open
 * (the metric ax_circuits_open; a count over the job table). */
int ax_store_circuit_count(ax_pg_t *pg, const char *deployment, int64_t *ret_open,
                           int64_t *ret_half_open, char *errbuf, size_t errlen);

#endif
