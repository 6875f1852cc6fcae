/*
 * ledger.c — the store's fire-ledger family (ax/store_ledger.h).
 */
#include <stdlib.h>
#include <string.h>

#include "ax/store_ledger.h"
#include "dispatch_int.h"
#include "store_int.h"


/* Ledger rows and instances in one statement: the ledger's primary key
 * decides; an instance exists only for a ledger row this statement wrote.
 * A fired time of a flow job ($8: 1) gets no instance but a flow run id in
 * its ledger row; the row's AFTER INSERT trigger (job_fire_flow,
 * infra/migrations/008_flow_schedule.sql) starts that run in this statement,
 * and only for a row actually written. */
AX_STMT(st_record, "ledger.record",
    "WITH f AS ("
    "  SELECT f.job_id, to_timestamp(f.ms / 1000.0) AS nominal, f.decision::ax_fire_decision AS"
    "    decision, f.detail, f.wait_for,"
    "    CASE WHEN f.decision IN ('fired', 'queued', 'deferred') AND f.flow = 0"
    "         THEN nextval('job_instance_id_seq') END AS iid,"
    "    CASE WHEN f.decision = 'fired' AND f.flow = 1 THEN nextval('flow_run_id_seq') END AS rid"
    "  FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::bigint[], $8::int[])"
    "    AS f(job_id, ms, decision, detail, wait_for, flow)"
    "), led AS ("
    "  INSERT INTO job_fire (job_id, nominal_time, decision, instance_id, epoch, detail,"
    "    flow_run_id)"
    "  SELECT job_id, nominal, decision, iid, $6::bigint,"
    "    CASE WHEN rid IS NULL THEN detail"
    "         ELSE concat_ws('; ', 'flow run ' || rid, detail) END, rid"
    "  FROM f ON CONFLICT DO NOTHING RETURNING job_id, nominal_time, instance_id"
    "), n AS MATERIALIZED ("
    "  SELECT led.instance_id AS id, j.id AS job_id, j.name AS job_name, j.handler_kind,"
    "    j.command, j.payload, j.timeout_ms, j.priority, led.nominal_time,"
    "    ax_trace_id() AS trace_id,"
    "    j.name || '@' || (extract(epoch FROM led.nominal_time) * 1000)::bigint AS idem,"
    "    f.wait_for, j.executor_group, j.routing_key,"
    "    CASE WHEN f.wait_for IS NULL AND j.shard_count IS NULL"
    "         AND f.decision <> 'deferred' THEN now() END AS disp,"
    "    CASE WHEN j.shard_count IS NOT NULL THEN 'static'"
    "         WHEN j.shard_base IS NOT NULL THEN 'probe' END AS smode,"
    /* its lane defers: kept SCHEDULED for the due scan to release */
    "    CASE WHEN f.decision = 'deferred' THEN now() END AS deferred"
    "  FROM led JOIN job j ON j.id = led.job_id JOIN f ON f.iid = led.instance_id"
    "  WHERE led.instance_id IS NOT NULL"
    /* the definition (written once) and the state row (every transition) */
    "), d AS ("
    "  INSERT INTO instance_def (id, job_id, job_name, handler_kind, command, payload,"
    "    timeout_ms, nominal_time, trace_id, idempotency_key, executor_group, routing_field)"
    "  SELECT id, job_id, job_name, handler_kind, command, payload, timeout_ms, nominal_time,"
    "    trace_id, idem, executor_group, routing_key FROM n"
    "), s AS ("
    "  INSERT INTO instance_state (id, job_id, deployment, priority, due_at, wait_for,"
    "    dispatched_at, shard_mode, deferred_at)"
    "  SELECT id, job_id, $7, priority, nominal_time, wait_for, disp, smode, deferred FROM n"
    "), ins AS ("
    "  SELECT id, 1, job_name, handler_kind, to_json(command)::text, payload, timeout_ms,"
    "    (extract(epoch FROM nominal_time) * 1000)::bigint,"
    "    (extract(epoch FROM nominal_time) * 1000)::bigint, priority, trace_id, idem,"
    "    executor_group, routing_key, wait_for, job_id,"
    /* held back: queued behind a running instance, or a static shard
     * parent (the due scan splits it) */
    "    CASE WHEN wait_for IS NULL AND smode IS DISTINCT FROM 'static'"
    "         AND deferred IS NULL THEN NULL ELSE 1 END AS hold"
    "  FROM n"
    "), " PEND_BATCH("ins", "hold IS NULL", "$6::bigint", "$7")
    " SELECT * FROM ins");
/* after the dispatch columns (0..13) */
enum { REC_ID = DC_ID, REC_WAIT_FOR = DC_NCOLS, REC_JOB, REC_HELD };

/* Unfinished runs of jobs that do not allow parallel runs. */
AX_STMT(st_busy, "ledger.busy",
        "SELECT job_id, max(id), string_agg(id || ' ' || state, ', ' ORDER BY id),"
        "  bool_or(wait_for IS NOT NULL AND state = 'SCHEDULED')"
        " FROM instance_state WHERE job_id = ANY($1::bigint[]) AND active"
        " GROUP BY job_id"
        /* a flow job (no instances): its flow's running runs */
        " UNION ALL SELECT j.id, max(fr.id),"
        "  string_agg('flow run ' || fr.id || ' running', ', ' ORDER BY fr.id), false"
        " FROM job j JOIN flow_run fr"
        "  ON fr.flow_id = j.flow_id AND fr.state = 'running'"
        " WHERE j.id = ANY($1::bigint[]) GROUP BY j.id");
enum { BUSY_JOB, BUSY_LAST, BUSY_WHAT, BUSY_QUEUED };

AX_STMT(st_cancel, "ledger.cancel_unfinished",
        "UPDATE instance_state SET cancel_requested_at = now()"
        " WHERE job_id = ANY($1::bigint[]) AND active"
        " AND cancel_requested_at IS NULL");

/* The six arrays of ledger.record: job, ms, decision, detail, wait_for, flow. */
static int record_arrays(const ax_ledger_fire_t *f, size_t n, ax_strbuf_t a[6]) {
    int rc = 0;
    for (int k = 0; k < 6 && rc == 0; k++)
        rc = ax_pgarr_begin(&a[k]);
    for (size_t i = 0; i < n && rc == 0; i++) {
        rc |= ax_pgarr_int(&a[0], f[i].job_id);
        rc |= ax_pgarr_int(&a[1], f[i].nominal_ms);
        rc |= ax_pgarr_text(&a[2], ax_fire_decision_name(f[i].decision));
        rc |= ax_pgarr_text(&a[3], f[i].detail);
        rc |= f[i].wait_for ? ax_pgarr_int(&a[4], f[i].wait_for) : ax_pgarr_text(&a[4], NULL);
        rc |= ax_pgarr_int(&a[5], f[i].flow != 0);
    }
    for (int k = 0; k < 6 && rc == 0; k++)
        rc = ax_pgarr_end(&a[k]);
    return rc ? AX_ERR_NOMEM : 0;
}

int ax_store_ledger_record(ax_pg_t *pg, const ax_ledger_fire_t *f, size_t n, int64_t epoch,
                           const char *deployment, ax_ledger_result_t *ret, char *errbuf,
                           size_t errlen) {
    ax_strbuf_t a[6] = {{0}};
    ax_num_t ep;
    PGresult *r = NULL;
    int rc = record_arrays(f, n, a);
    if (rc < 0) {
        ax_seterr(errbuf, errlen, rc, "ledger.record: out of memory");
    } else {
        const char *p[] = {a[0].s, a[1].s, a[2].s, a[3].s, a[4].s, ax_num(&ep, epoch), deployment,
                           a[5].s};
        rc = ax_stmt_run(pg, &st_record, 8, p, NULL, NULL, &r, errbuf, errlen);
    }
    for (int k = 0; k < 6; k++)
        ax_strbuf_free(&a[k]);
    if (rc < 0)
        return rc;
    int rows = PQntuples(r);
    ax_ledger_result_t res = {calloc((size_t)rows + 1, sizeof *res.v), (size_t)rows, {0}};
    if (!res.v || ax__dispatch_rows_read(r, REC_HELD, &res.rows) < 0) {
        free(res.v);
        PQclear(r);
        return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "ledger.record: out of memory");
    }
    for (int i = 0; i < rows; i++)
        res.v[i] = (ax_ledger_instance_t){ax_pg_int(r, i, REC_ID), ax_pg_int(r, i, REC_JOB),
                                          ax_pg_int(r, i, REC_WAIT_FOR),
                                          !PQgetisnull(r, i, REC_HELD)};
    PQclear(r);
    *ret = res;
    return 0;
}

void ax_ledger_result_free(ax_ledger_result_t *r) {
    if (!r)
        return;
    free(r->v);
    ax_dispatch_rows_free(&r->rows);
    memset(r, 0, sizeof *r);
}

int ax_store_ledger_busy(ax_pg_t *pg, const int64_t *job_ids, size_t n, ax_ledger_busy_t **ret,
                         size_t *ret_n, char *errbuf, size_t errlen) {
    char *ids = ax__int_array(job_ids, n);
    if (!ids)
        return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "ledger.busy: out of memory");
    const char *p[] = {ids};
    PGresult *r;
    int rc = ax_stmt_run(pg, &st_busy, 1, p, NULL, NULL, &r, errbuf, errlen);
    free(ids);
    if (rc < 0)
        return rc;
    int rows = PQntuples(r);
    ax_ledger_busy_t *v = calloc((size_t)rows + 1, sizeof *v);
    for (int i = 0; v && i < rows; i++) {
        v[i] = (ax_ledger_busy_t){ax_pg_int(r, i, BUSY_JOB), ax_pg_int(r, i, BUSY_LAST),
                                  ax_pg_strdup(r, i, BUSY_WHAT), ax_pg_bool(r, i, BUSY_QUEUED)};
        if (!v[i].what) {
            ax_ledger_busy_free(v, (size_t)i);
            v = NULL;
        }
    }
    PQclear(r);
    if (!v)
        return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "ledger.busy: out of memory");
    *ret = v;
    *ret_n = (size_t)rows;
    return 0;
}

void ax_ledger_busy_free(ax_ledger_busy_t *v, size_t n) {
    for (size_t i = 0; v && i < n; i++)
        free(v[i].what);
    free(v);
}

int ax_store_ledger_cancel_unfinished(ax_pg_t *pg, const int64_t *job_ids, size_t n,
                                      char *errbuf, size_t errlen) {
    char *ids = ax__int_array(job_ids, n);
    if (!ids)
        return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "ledger.cancel_unfinished: out of memory");
    const char *p[] = {ids};
    int rc = ax_stmt_run(pg, &st_cancel, 1, p, NULL, NULL, NULL, errbuf, errlen);
    free(ids);
    return rc;
}
