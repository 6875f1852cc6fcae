/*
 * circuit.c — the store's circuit family (ax/store_circuit.h): ax-trigger
 * reads the circuits of the jobs it fires and writes the half-open step;
 * the decision is core/circuit.c's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ax/store_circuit.h"
#include "store_int.h"

AX_STMT(st_load, "circuit.load",
        "SELECT id, circuit_state, consecutive_failures, circuit_threshold,"
        "  circuit_cooldown_ms,"
        "  floor(extract(epoch FROM circuit_opened_at) * 1000)::bigint,"
        "  floor(extract(epoch FROM now()) * 1000)::bigint,"
        "  to_char(circuit_opened_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')"
        " FROM job WHERE id = ANY($1::bigint[]) AND circuit_state <> 'closed'"
        " FOR UPDATE");
enum { CL_ID, CL_STATE, CL_FAILURES, CL_THRESHOLD, CL_COOLDOWN, CL_OPENED_MS, CL_NOW_MS,
       CL_OPENED };

static void load_row(const PGresult *r, int i, ax_circuit_row_t *o) {
    memset(o, 0, sizeof *o);
    o->job_id = ax_pg_int(r, i, CL_ID);
    ax_circuit_t *c = &o->circuit;
    /* a state this code does not know is treated as open: fires skipped */
    if (ax_circuit_state_parse(PQgetvalue(r, i, CL_STATE), &c->state) < 0)
        c->state = AX_CIRCUIT_OPEN;
    o->stored = c->state;
    c->consecutive_failures = ax_pg_int(r, i, CL_FAILURES);
    c->threshold = ax_pg_int(r, i, CL_THRESHOLD);
    c->cooldown_ms = ax_pg_int(r, i, CL_COOLDOWN);
    c->opened_at_ms = PQgetisnull(r, i, CL_OPENED_MS) ? -1 : ax_pg_int(r, i, CL_OPENED_MS);
    o->now_ms = ax_pg_int(r, i, CL_NOW_MS);
    const char *at = ax_pg_str(r, i, CL_OPENED);
    snprintf(o->opened_at, sizeof o->opened_at, "%s", at ? at : "");
}

int ax_store_circuit_load(ax_pg_t *pg, const int64_t *job_ids, size_t n, ax_circuit_row_t **ret,
                          size_t *ret_n, char *errbuf, size_t errlen) {
    *ret = NULL;
    *ret_n = 0;
    ax_strbuf_t b = {0};
    if (ax_pgarr_ints(&b, job_ids, n) < 0)
        return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "%s: out of memory", st_load.name);
    const char *p[] = {b.s};
    PGresult *r = NULL;
    int rc = ax_stmt_run(pg, &st_load, 1, p, NULL, NULL, &r, errbuf, errlen);
    ax_strbuf_free(&b);
    if (rc < 0)
        return rc;
    int rows = PQntuples(r);
    ax_circuit_row_t *v = rows ? calloc((size_t)rows, sizeof *v) : NULL;
    if (rows && !v) {
        PQclear(r);
        return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "%s: out of memory", st_load.name);
    }
    for (int i = 0; i < rows; i++)
        load_row(r, i, &v[i]);
    PQclear(r);
    *ret = v;
    *ret_n = (size_t)rows;
    return 0;
}

AX_STMT(st_half_open, "circuit.half_open",
        "UPDATE job SET circuit_state = 'half_open' WHERE id = $1::bigint"
        " AND circuit_state = 'open'");

int ax_store_circuit_half_open(ax_pg_t *pg, int64_t job_id, char *errbuf, size_t errlen) {
    ax_num_t n;
    const char *p[] = {ax_num(&n, job_id)};
    return ax_stmt_run(pg, &st_half_open, 1, p, NULL, NULL, NULL, errbuf, errlen);
}

AX_STMT(st_count, "circuit.count",
        "SELECT count(*) FILTER (WHERE circuit_state = 'open'),"
        "  count(*) FILTER (WHERE circuit_state = 'half_open')"
        " FROM job WHERE deployment = $1 AND circuit_state <> 'closed'");

int ax_store_circuit_count(ax_pg_t *pg, const char *deployment, int64_t *ret_open,
                           int64_t *ret_half_open, char *errbuf, size_t errlen) {
    const char *p[] = {deployment};
    PGresult *r = NULL;
    int rc = ax_stmt_run(pg, &st_count, 1, p, NULL, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    *ret_open = PQntuples(r) ? ax_pg_int(r, 0, 0) : 0;
    *ret_half_open = PQntuples(r) ? ax_pg_int(r, 0, 1) : 0;
    PQclear(r);
    return 0;
}
