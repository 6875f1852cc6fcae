/*
 * outbox.c — the store's outbox family (ax/store_outbox.h): the results
 * outbox, marking results published, the reconciled offsets of the results
 * topic, and the publisher's advisory lock.
 *
 * "outbox.mark_published" / "outbox.mark_recovered", "outbox.pending_quick"
 * and "outbox.pending" are the publisher's hot path; all but the quick
 * look (new in the store) keep their text as it was in the callback.
 */
#include <stdlib.h>
#include <string.h>

#include "ax/store_outbox.h"
#include "store_int.h"

static int nomem(char *errbuf, size_t errlen, const char *what) {
    return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "%s: out of memory", what);
}

/* Not published with its whole batch (023_publish_per_batch): an
 * instance's own result_published_at is set only when it was marked alone. */
#define NOT_BATCH_PUBLISHED(s)                                                                 \
    " AND (" s ".result_batch IS NULL OR NOT EXISTS (SELECT 1 FROM ax_result_batch rb"         \
    "  WHERE rb.id = " s ".result_batch AND rb.published_at IS NOT NULL))"

/* Only an instance in no results batch: one the finish ended (a size probe
 * of its parent in the same consumed batch as its final result) is in its
 * batch row already, published with it — an outbox row beside it would
 * have it produced twice when the publisher carries the batch. */
AX_STMT(st_add_finished, "outbox.add_finished",
    "INSERT INTO ax_result_outbox (deployment, instance_id)"
    " SELECT deployment, id FROM instance_state WHERE id = ANY($1::bigint[])"
    "  AND state = 'FINISHED' AND result_published_at IS NULL AND result_batch IS NULL"
    " ON CONFLICT DO NOTHING");

int ax_store_outbox_add_finished(ax_pg_t *pg, const int64_t *ids, size_t n, char *errbuf,
                                 size_t errlen) {
    ax_strbuf_t b = {0};
    int rc = ax_pgarr_ints(&b, ids, n);
    const char *p[] = {b.s};
    if (rc == 0)
        rc = ax_stmt_run(pg, &st_add_finished, 1, p, NULL, NULL, NULL, errbuf, errlen);
    else
        rc = nomem(errbuf, errlen, st_add_finished.name);
    ax_strbuf_free(&b);
    return rc;
}

/* The oldest outbox entries: the ids of the oldest unpublished
 * ax_result_batch rows (020_result_batch: a row per finishing statement)
 * until their counts reach $2 — whole rows, never a part of one, so that
 * the mark can mark each row published as one (023_publish_per_batch) —
 * and up to $2 of a previous release's ax_result_outbox rows (additive).
 * The instance's columns straight from the two tables: a row of a batch
 * not yet published has its own result_published_at NULL unless a
 * recovery marked it alone.
 * A batch row whose results the publisher carries ($3: it finished them
 * itself, and the finish statement returned them, services/callback/
 * publish.c) is not read row by row: it comes back as one row, its id and
 * its count of ids (n) in the last two columns (the instance's columns
 * NULL; after the instance rows), still counted against $2. Reading a
 * result here costs two
 * primary-key lookups and its columns, about 10 µs of PostgreSQL's time
 * per job (BENCHMARKS.md, "Issue #13: results carried"). */
AX_STMT(st_pending, "outbox.pending",
    "WITH bt AS MATERIALIZED (SELECT b.id, b.ids, b.n FROM (SELECT id, ids, n,"
    "  sum(n) OVER (ORDER BY id) - n AS before"
    "  FROM ax_result_batch WHERE deployment = $1 AND published_at IS NULL) b"
    "  WHERE b.before < $2::int),"
    " o AS MATERIALIZED (SELECT DISTINCT x.instance_id FROM ("
    "  (SELECT instance_id FROM ax_result_outbox WHERE deployment = $1"
    "   ORDER BY instance_id LIMIT $2::int)"
    "  UNION ALL SELECT unnest(ids) FROM bt WHERE bt.id <> ALL($3::bigint[])) x)"
    "SELECT o.instance_id, s.id IS NOT NULL, d.job_name, s.outcome, s.attempt, s.exit_code,"
    "  s.error_class, s.error, coalesce(s.output, ''), d.trace_id, d.idempotency_key,"
    "  (extract(epoch FROM d.nominal_time) * 1000)::bigint,"
    "  (extract(epoch FROM d.scheduled_at) * 1000)::bigint,"
    "  (extract(epoch FROM s.locked_at) * 1000)::bigint,"
    "  (extract(epoch FROM s.running_at) * 1000)::bigint,"
    "  (extract(epoch FROM s.finished_at) * 1000)::bigint, NULL::bigint, NULL::int"
    " FROM o LEFT JOIN (instance_state s JOIN instance_def d ON d.id = s.id)"
    "  ON s.id = o.instance_id AND s.state = 'FINISHED' AND s.result_published_at IS NULL"
    NOT_BATCH_PUBLISHED("s")
    " UNION ALL SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,"
    "  NULL, NULL, NULL, NULL, bt.id, bt.n FROM bt WHERE bt.id = ANY($3::bigint[])"
    " ORDER BY 1");
enum { OB_ID, OB_PRESENT, OB_JOB, OB_FINISHED = OB_JOB + AX_RESULT_NCOLS - 1, OB_CARRIED,
       OB_CARRIED_N };

/* What outbox.pending would return, when that is only batch rows the
 * caller carries: the same first rows (their counts summed against $2, in
 * batch order), whether each is carried, and a last row of NULLs when the
 * deployment has any row in ax_result_outbox. It plans in a quarter of
 * the time of outbox.pending, which planned 20 times longer than it ran
 * when every result was carried (0.17 against 0.59 ms a call at 1,000
 * jobs/s; BENCHMARKS.md, "Issue #13: the twenty-third session"); when
 * something not carried waits, both run. */
AX_STMT(st_pending_quick, "outbox.pending_quick",
    "SELECT b.id, b.n, b.id = ANY($3::bigint[]) FROM (SELECT id, n,"
    "  sum(n) OVER (ORDER BY id) - n AS before"
    "  FROM ax_result_batch WHERE deployment = $1 AND published_at IS NULL) b"
    " WHERE b.before < $2::int"
    " UNION ALL SELECT NULL, NULL, NULL"
    "  WHERE EXISTS (SELECT 1 FROM ax_result_outbox WHERE deployment = $1)"
    " ORDER BY 1");
enum { PQ_ID, PQ_N, PQ_CARRIED };

/* 1 with *ret filled when the quick look answers (nothing pending, or
 * only carried batch rows), 0 when outbox.pending must run, < 0 on error. */
static int pending_quick(ax_pg_t *pg, const char *const *p, ax_outbox_pending_t *ret,
                         char *errbuf, size_t errlen) {
    PGresult *r = NULL;
    int rc = ax_stmt_run(pg, &st_pending_quick, 3, p, NULL, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    size_t rows = (size_t)PQntuples(r);
    for (size_t i = 0; i < rows; i++)
        if (PQgetisnull(r, (int)i, PQ_ID) || !ax_pg_bool(r, (int)i, PQ_CARRIED)) {
            PQclear(r);
            return 0;
        }
    ret->carried = rows ? calloc(rows, sizeof *ret->carried) : NULL;
    ret->carried_n = rows ? calloc(rows, sizeof *ret->carried_n) : NULL;
    if (rows && (!ret->carried || !ret->carried_n)) {
        PQclear(r);
        ax_outbox_pending_free(ret);
        return nomem(errbuf, errlen, st_pending_quick.name);
    }
    for (size_t i = 0; i < rows; i++) {
        ret->carried[i] = ax_pg_int(r, (int)i, PQ_ID);
        ret->carried_n[i] = ax_pg_int(r, (int)i, PQ_N);
    }
    ret->ncarried = rows;
    PQclear(r);
    return 1;
}

int ax__result_row(const PGresult *r, int i, int c, ax_result_t *res) {
    enum { JOB, OUTCOME, ATTEMPTS, EXIT, ERROR_CLASS, ERROR, OUTPUT, TRACE, IDEM, NOMINAL,
           SCHEDULED, LOCKED, RUNNING, FINISHED };
    res->attempts = (int32_t)ax_pg_int(r, i, c + ATTEMPTS);
    res->exit_code = (int32_t)ax_pg_int(r, i, c + EXIT);
    res->exit_code_set = !PQgetisnull(r, i, c + EXIT);
    ax_outcome_parse(PQgetvalue(r, i, c + OUTCOME), &res->outcome);
    res->nominal_time_ms = ax_pg_int(r, i, c + NOMINAL);
    res->scheduled_at_ms = ax_pg_int(r, i, c + SCHEDULED);
    res->locked_at_ms = ax_pg_int(r, i, c + LOCKED);
    res->running_at_ms = ax_pg_int(r, i, c + RUNNING);
    res->finished_at_ms = ax_pg_int(r, i, c + FINISHED);
    /* output, trace id and idempotency key are never NULL here ("" then) */
    res->job = ax_pg_strdup(r, i, c + JOB);
    res->error_class = ax_pg_strdup(r, i, c + ERROR_CLASS);
    res->error = ax_pg_strdup(r, i, c + ERROR);
    res->output = strdup(PQgetvalue(r, i, c + OUTPUT));
    res->trace_id = strdup(PQgetvalue(r, i, c + TRACE));
    res->idempotency_key = strdup(PQgetvalue(r, i, c + IDEM));
    if ((!res->job && !PQgetisnull(r, i, c + JOB)) ||
        (!res->error_class && !PQgetisnull(r, i, c + ERROR_CLASS)) ||
        (!res->error && !PQgetisnull(r, i, c + ERROR)) || !res->output || !res->trace_id ||
        !res->idempotency_key)
        return AX_ERR_NOMEM;
    return 0;
}

static int outbox_row(const PGresult *r, int i, ax_outbox_row_t *o) {
    o->res.instance_id = ax_pg_int(r, i, OB_ID);
    o->present = ax_pg_bool(r, i, OB_PRESENT);
    return o->present ? ax__result_row(r, i, OB_JOB, &o->res) : 0;
}

int ax_store_outbox_pending(ax_pg_t *pg, const char *deployment, int limit,
                            const int64_t *carried, size_t ncarried, ax_outbox_pending_t *ret,
                            char *errbuf, size_t errlen) {
    memset(ret, 0, sizeof *ret);
    ax_num_t nl;
    ax_strbuf_t cb = {0};
    if (ax_pgarr_ints(&cb, carried, ncarried) < 0) {
        ax_strbuf_free(&cb);
        return nomem(errbuf, errlen, st_pending.name);
    }
    const char *p[] = {deployment, ax_num(&nl, limit), cb.s};
    PGresult *r = NULL;
    /* the quick look first: its answer may be the whole answer (1) */
    int rc = pending_quick(pg, p, ret, errbuf, errlen);
    if (rc == 0)
        rc = ax_stmt_run(pg, &st_pending, 3, p, NULL, NULL, &r, errbuf, errlen);
    ax_strbuf_free(&cb);
    if (rc < 0)
        return rc;
    if (rc > 0)
        return 0; /* answered by the quick look: ret is filled */
    size_t rows = (size_t)PQntuples(r);
    ret->rows = rows ? calloc(rows, sizeof *ret->rows) : NULL;
    ret->carried = rows ? calloc(rows, sizeof *ret->carried) : NULL;
    ret->carried_n = rows ? calloc(rows, sizeof *ret->carried_n) : NULL;
    if (rows && (!ret->rows || !ret->carried || !ret->carried_n))
        rc = AX_ERR_NOMEM;
    for (int i = 0; rc == 0 && i < (int)rows; i++) {
        if (!PQgetisnull(r, i, OB_CARRIED)) {
            ret->carried_n[ret->ncarried] = ax_pg_int(r, i, OB_CARRIED_N);
            ret->carried[ret->ncarried++] = ax_pg_int(r, i, OB_CARRIED);
        } else
            rc = outbox_row(r, i, &ret->rows[ret->n++]);
    }
    PQclear(r);
    if (rc < 0) {
        ax_outbox_pending_free(ret);
        return nomem(errbuf, errlen, st_pending.name);
    }
    return 0;
}

void ax_outbox_pending_free(ax_outbox_pending_t *p) {
    ax_outbox_rows_free(p->rows, p->n);
    free(p->carried);
    free(p->carried_n);
    memset(p, 0, sizeof *p);
}

void ax_outbox_rows_free(ax_outbox_row_t *v, size_t n) {
    for (size_t i = 0; v && i < n; i++)
        ax_result_clear(&v[i].res);
    free(v);
}

/* One statement (atomic): the instances leave the outbox and are marked
 * published, and the reconciled offsets advance. An unpublished
 * ax_result_batch row whose ids are all marked is marked published as a
 * whole when its finish stamped its id on its instances (stamped,
 * 023_publish_per_batch: the views show its published_at as theirs), or
 * else (a previous release's finish) deleted, its instances marked one by
 * one; a row marked in part keeps the rest, the marked ones marked one by
 * one. Every other id (a previous release's ax_result_outbox, a recovery)
 * is marked one by one. Only the rows whose id range meets the marked ids
 * are opened, and their ids are looked up in a hash of the marked ones
 * (not compared pairwise). The per-instance update takes no row lock
 * before it (a SELECT ... FOR UPDATE wrote one more WAL record per row,
 * BENCHMARKS.md "Issue #13"): a FINISHED, unpublished row is updated by
 * the lock-holding publisher alone, one statement at a time. */
#define SQL_MARK(count) \
    "WITH d AS (DELETE FROM ax_result_outbox WHERE deployment = $1" \
    "  AND instance_id = ANY($2::bigint[])" \
    "), pa AS MATERIALIZED (SELECT unnest($2::bigint[]) AS id" \
    "), rng AS MATERIALIZED (SELECT min(id) AS lo, max(id) AS hi FROM pa" \
    "), bt AS MATERIALIZED (SELECT b.id, b.n, b.stamped, b.ids, ARRAY(SELECT x.v" \
    "   FROM unnest(b.ids) WITH ORDINALITY x(v, k) WHERE x.v NOT IN (SELECT id FROM pa)" \
    "   ORDER BY x.k) AS rest" \
    "  FROM ax_result_batch b, rng WHERE b.deployment = $1 AND b.published_at IS NULL" \
    "   AND b.max_id >= rng.lo AND b.min_id <= rng.hi" \
    "), whole AS MATERIALIZED (SELECT bt.id, bt.n, bt.ids FROM bt" \
    "  WHERE bt.stamped AND cardinality(bt.rest) = 0" \
    "), bp AS (UPDATE ax_result_batch b SET published_at = now() FROM whole" \
    "  WHERE b.id = whole.id" \
    "), bd AS (DELETE FROM ax_result_batch b USING bt WHERE b.id = bt.id" \
    "  AND NOT bt.stamped AND cardinality(bt.rest) = 0" \
    "), bu AS (UPDATE ax_result_batch b SET ids = bt.rest, n = cardinality(bt.rest)," \
    "  min_id = bt.rest[1], max_id = bt.rest[cardinality(bt.rest)] FROM bt" \
    "  WHERE b.id = bt.id AND cardinality(bt.rest) BETWEEN 1 AND bt.n - 1" \
    "), one AS MATERIALIZED (SELECT pa.id FROM pa WHERE pa.id NOT IN" \
    "  (SELECT unnest(whole.ids) FROM whole)" \
    "), m AS (UPDATE instance_state SET result_published_at = now()" \
    "  WHERE id = ANY(ARRAY(SELECT id FROM one)) AND state = 'FINISHED'" \
    "  AND result_published_at IS NULL" NOT_BATCH_PUBLISHED("instance_state") \
    "  RETURNING id" \
    "), o AS (INSERT INTO ax_results_offset (topic, partition, next_offset)" \
    "  SELECT $3, p, n FROM unnest($4::int[], $5::bigint[]) AS x(p, n)" \
    "  ON CONFLICT (topic, partition) DO UPDATE" \
    "  SET next_offset = greatest(ax_results_offset.next_offset, excluded.next_offset)," \
    "    updated_at = now()" \
    ") SELECT (SELECT " count " FROM m) + coalesce((SELECT sum(n) FROM whole), 0)"
/* The same statement, named for pg_stat_activity by who sends it: the
 * publisher after its Kafka commit, or a recovery. pg_stat_statements
 * ignores comments (it keys a statement by its parse tree), so the two
 * differ in their count too — count(*) against count(m.id), the same
 * number (m.id is never NULL) — or every publish mark is counted under the
 * text of whichever ran first, the recovery at a publisher's start: that
 * made the healthy path look as if it recovered after every batch
 * (BENCHMARKS.md, "Issue #13: the finish per row"). */
AX_STMT(st_mark_published, "outbox.mark_published",
        "/* ax: results published */ " SQL_MARK("count(*)"));
AX_STMT(st_mark_recovered, "outbox.mark_recovered",
        "/* ax: results recovered */ " SQL_MARK("count(m.id)"));

int ax_store_outbox_mark(ax_pg_t *pg, ax_outbox_marker_t who, const char *deployment,
                         const int64_t *ids, size_t nids, const char *topic, const int64_t *next,
                         int nparts, char *errbuf, size_t errlen) {
    ax_stmt_t *st = who == AX_OUTBOX_RECOVERED ? &st_mark_recovered : &st_mark_published;
    ax_strbuf_t is = {0}, ps = {0}, os = {0};
    int rc = ax_pgarr_ints(&is, ids, nids);
    if (rc == 0 && (ax_pgarr_begin(&ps) < 0 || ax_pgarr_begin(&os) < 0))
        rc = AX_ERR_NOMEM;
    for (int k = 0; rc == 0 && k < nparts; k++)
        if (next[k] >= 0 && (ax_pgarr_int(&ps, k) < 0 || ax_pgarr_int(&os, next[k]) < 0))
            rc = AX_ERR_NOMEM;
    if (rc == 0 && (ax_pgarr_end(&ps) < 0 || ax_pgarr_end(&os) < 0))
        rc = AX_ERR_NOMEM;
    PGresult *r = NULL;
    if (rc == 0) {
        const char *p[] = {deployment, is.s, topic, ps.s, os.s};
        rc = ax_stmt_run(pg, st, 5, p, NULL, NULL, &r, errbuf, errlen);
    } else {
        rc = nomem(errbuf, errlen, st->name);
    }
    ax_strbuf_free(&is);
    ax_strbuf_free(&ps);
    ax_strbuf_free(&os);
    if (rc < 0)
        return rc;
    int n = (int)ax_pg_int(r, 0, 0);
    PQclear(r);
    return n;
}

AX_STMT(st_offsets, "outbox.offsets",
        "SELECT partition, next_offset FROM ax_results_offset WHERE topic = $1");
enum { OFF_PARTITION, OFF_NEXT };

int ax_store_outbox_offsets(ax_pg_t *pg, const char *topic, int64_t **ret_next, int *ret_n,
                            char *errbuf, size_t errlen) {
    *ret_next = NULL;
    *ret_n = 0;
    const char *p[] = {topic};
    PGresult *r = NULL;
    int rc = ax_stmt_run(pg, &st_offsets, 1, p, NULL, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    int rows = PQntuples(r), n = 0;
    for (int i = 0; i < rows; i++) {
        int64_t part = ax_pg_int(r, i, OFF_PARTITION);
        if (part >= 0 && part < 1 << 20 && part + 1 > n)
            n = (int)part + 1;
    }
    int64_t *v = n ? malloc((size_t)n * sizeof *v) : NULL;
    if (n && !v) {
        PQclear(r);
        return nomem(errbuf, errlen, st_offsets.name);
    }
    for (int k = 0; k < n; k++)
        v[k] = -1;
    for (int i = 0; i < rows; i++) {
        int64_t part = ax_pg_int(r, i, OFF_PARTITION);
        if (part >= 0 && part < n)
            v[part] = ax_pg_int(r, i, OFF_NEXT);
    }
    PQclear(r);
    *ret_next = v;
    *ret_n = n;
    return 0;
}

/* ---- the publisher's lock ------------------------------------------------------------ */

AX_STMT(st_lock_try, "outbox.lock_try",
        "SELECT CASE WHEN pg_try_advisory_lock(hashtextextended($1, 0))"
        " THEN set_config('idle_session_timeout', $2, false) IS NOT NULL"
        " ELSE false END");

int ax_store_outbox_lock_try(ax_pg_t *pg, const char *name, const char *idle, int *ret_got,
                             char *errbuf, size_t errlen) {
    *ret_got = 0;
    const char *p[] = {name, idle};
    PGresult *r = NULL;
    int rc = ax_stmt_run(pg, &st_lock_try, 2, p, NULL, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    *ret_got = PQntuples(r) == 1 && ax_pg_bool(r, 0, 0);
    PQclear(r);
    return 0;
}

AX_STMT(st_lock_release, "outbox.lock_release",
        "SELECT pg_advisory_unlock(hashtextextended($1, 0)),"
        " set_config('idle_session_timeout', '0', false)");

int ax_store_outbox_lock_release(ax_pg_t *pg, const char *name, char *errbuf, size_t errlen) {
    const char *p[] = {name};
    return ax_stmt_run(pg, &st_lock_release, 1, p, NULL, NULL, NULL, errbuf, errlen);
}

AX_STMT(st_lock_ping, "outbox.lock_ping", "SELECT 1");

int ax_store_outbox_lock_ping(ax_pg_t *pg, char *errbuf, size_t errlen) {
    return ax_stmt_run(pg, &st_lock_ping, 0, NULL, NULL, NULL, NULL, errbuf, errlen);
}

int ax_store_session_pid(ax_pg_t *pg) {
    PGconn *c = pg ? ax_pg_conn(pg) : NULL;
    return c && PQstatus(c) == CONNECTION_OK ? PQbackendPID(c) : 0;
}
