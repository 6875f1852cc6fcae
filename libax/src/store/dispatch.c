/*
 * dispatch.c — ingest, due scan, pending-batch settle/undo and the
 * lease sweep (ax/store_dispatch.h). The statements of the dispatch path
 * are hot: their text is kept as the trigger ran it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch_int.h"

/* ---- rows ------------------------------------------------------------------ */

static void row_clear(ax_dispatch_row_t *d) {
    free(d->job);
    free(d->handler_kind);
    free(d->command_json);
    free(d->payload);
    free(d->trace_id);
    free(d->idempotency_key);
    free(d->executor_group);
    free(d->routing_field);
}

void ax_dispatch_rows_free(ax_dispatch_rows_t *rows) {
    if (!rows)
        return;
    for (size_t i = 0; i < rows->n; i++)
        row_clear(&rows->v[i]);
    free(rows->v);
    rows->v = NULL;
    rows->n = 0;
}

/* A text column that callers print as is: "" when NULL. */
static char *dup_text(const PGresult *r, int i, int col) {
    return strdup(PQgetisnull(r, i, col) ? "" : PQgetvalue(r, i, col));
}

static int row_read(const PGresult *r, int i, int hold_col, ax_dispatch_row_t *d) {
    d->id = ax_pg_int(r, i, DC_ID);
    d->attempt = (int32_t)ax_pg_int(r, i, DC_ATTEMPT);
    d->job = ax_pg_strdup(r, i, DC_JOB);
    d->handler_kind = dup_text(r, i, DC_HANDLER_KIND);
    d->command_json = ax_pg_strdup(r, i, DC_COMMAND);
    d->timeout_ms = ax_pg_int(r, i, DC_TIMEOUT);
    d->nominal_ms = ax_pg_int(r, i, DC_NOMINAL);
    d->due_ms = ax_pg_int(r, i, DC_DUE);
    d->priority = (int32_t)ax_pg_int(r, i, DC_PRIORITY);
    d->trace_id = dup_text(r, i, DC_TRACE);
    d->idempotency_key = dup_text(r, i, DC_IDEM);
    d->executor_group = dup_text(r, i, DC_GROUP);
    d->routing_field = ax_pg_strdup(r, i, DC_ROUTING);
    d->hold = hold_col >= 0 && !PQgetisnull(r, i, hold_col);
    if (!PQgetisnull(r, i, DC_PAYLOAD)) {
        size_t len = 0;
        unsigned char *p = PQunescapeBytea((const unsigned char *)PQgetvalue(r, i, DC_PAYLOAD),
                                           &len);
        if (!p)
            return AX_ERR_NOMEM;
        d->payload = malloc(len ? len : 1);
        if (d->payload)
            memcpy(d->payload, p, len);
        d->payload_len = len;
        PQfreemem(p);
        if (!d->payload)
            return AX_ERR_NOMEM;
    }
    if (!d->handler_kind || !d->trace_id || !d->idempotency_key || !d->executor_group)
        return AX_ERR_NOMEM;
    return 0;
}

int ax__dispatch_rows_read(const PGresult *r, int hold_col, ax_dispatch_rows_t *out) {
    *out = (ax_dispatch_rows_t){0};
    size_t n = (size_t)PQntuples(r);
    if (!n)
        return 0;
    out->v = calloc(n, sizeof *out->v);
    if (!out->v)
        return AX_ERR_NOMEM;
    out->n = n;
    for (size_t i = 0; i < n; i++)
        if (row_read(r, (int)i, hold_col, &out->v[i]) < 0) {
            ax_dispatch_rows_free(out);
            return AX_ERR_NOMEM;
        }
    return 0;
}

char *ax__int_array(const int64_t *v, size_t n) {
    ax_strbuf_t b = {0};
    return ax_pgarr_ints(&b, v, n) < 0 ? NULL : b.s;
}

/* The per-priority release plan as an array: NULL = held (INT64_MAX). */
static char *wait_array(const int64_t *wait_ms) {
    ax_strbuf_t b = {0};
    ax_pgarr_begin(&b);
    for (int p = 0; p < AX_PRIORITIES; p++)
        if (!wait_ms)
            ax_pgarr_int(&b, 0);
        else if (wait_ms[p] == INT64_MAX)
            ax_pgarr_text(&b, NULL);
        else
            ax_pgarr_int(&b, wait_ms[p]);
    if (ax_pgarr_end(&b) < 0) {
        ax_strbuf_free(&b);
        return NULL;
    }
    return b.s;
}

static char *int_array_i(const int *v, size_t n) {
    int64_t w[AX_PRIORITIES];
    for (size_t i = 0; i < n && i < AX_PRIORITIES; i++)
        w[i] = v[i];
    return ax__int_array(w, n < AX_PRIORITIES ? n : AX_PRIORITIES);
}

/* ---- ingest ------------------------------------------------------------------ */

/* One statement inserts a batch of submissions, of defined jobs (joined by
 * name; an unknown name inserts nothing) and inline commands (argv as a JSON
 * array). The key (submit_key) dedups redelivered submissions: an
 * idempotency key through the insert-only table submission (a row per key);
 * a Kafka position (a submission without an idempotency key) through its
 * partition's consumed-offset watermark in submit_offset, moved once per
 * batch in this statement (018_hot_writes): a partition's submissions are
 * ingested in offset order, so a redelivered one lies below it. Payloads
 * travel hex.
 *
 * What does not need the database is worked out here, per batch, not per
 * row in SQL (issue #13, BENCHMARKS.md "The ingest statement"): which keys
 * are Kafka positions (parsed, not matched by a regular expression), each
 * row's partition and offset, each partition's new watermark and end
 * offset, and which keys occur more than once in the batch (only those go
 * through the DISTINCT ON; $19 is NULL when none does, and that branch is
 * skipped). The rows are joined to the job once, the job's own conditions
 * filtered on the job side, and the new instances are the batch's rows
 * themselves (no join back by key).
 *
 * On the leader ($14: its epoch, $23 and $24 its lease's role and holder;
 * 0 elsewhere), the lease is re-read and locked FOR SHARE by the statement
 * itself (CTE ld: a successor's takeover waits for this commit), so the
 * trigger runs it alone, outside a transaction block, one round trip
 * committed on its own, not BEGIN, the lease's SELECT, the statement and
 * COMMIT. With the lease no longer held the batch is ingested as a
 * standby's: nothing marked dispatched or deferred (column leased = 0).
 * ld is evaluated at n's first row, after wm and sk locked their
 * watermark and key rows (a batch that inserts nothing never reads the
 * lease): the lease row is locked last. That cannot deadlock as long as
 * no transaction updates ax_leader and then touches submit_offset,
 * submission or the instance tables (store/leader.c's statements each
 * touch ax_leader alone). There,
 * an instance due now, whose lane flows with room and nothing deferred
 * ($15, per priority), and that is not a static shard parent, is marked
 * dispatched with one dispatch_batch row in the same statement and produced
 * right after the commit, so it skips the due scan and its extra update of
 * the row. The rest waits for the leader's due scan. Columns:
 * DISPATCH_COLS, hold (NULL: produce now), submit_key, leased.
 *
 * Parameters: $1-$10 per row (job, argv, payload hex, timeout, priority,
 * run_at, delay, trace, idempotency key, submit key), $11 default timeout,
 * $12 deployment, $13 lane waits, $14 epoch, $15 direct lanes; per
 * partition of the batch's Kafka positions $20 topic, $21 partition, $22
 * offset past the batch's last, $16 end offset (NULL: unknown); per row
 * $17 its partition (1-based into $20-$22; NULL: not a Kafka position), $18
 * its offset, $19 whether its key occurs twice in the batch; $23 and $24
 * the lease's role and holder (with $14); $25 how many ms ago the batch
 * was taken from the consumer (WM_STALE). */
#define DUE_NOW "u.run_at IS NULL AND coalesce(u.delay, 0) = 0"
/* A submit key that is the submission's Kafka position (services/trigger/
 * ingest.c: kafka:TOPIC:PARTITION:OFFSET; a topic name holds no ':'):
 * ^kafka:[^:]+:[0-9]{1,9}:[0-9]{1,18}$, parsed by kafka_pos(). */
/* A watermark from an older life of its partition's log (deleted and
 * created again, or truncated: offsets from 0 again): above the
 * partition's end offset as this consumer last fetched it, and written
 * before this batch was taken from the consumer ($25 ms ago). A watermark
 * written since is a newer owner's: a consumer whose partition was
 * revoked, or whose group session lapsed, while it held the batch keeps a
 * cached end offset that no longer moves, and the new owner may have
 * ingested past it; taking that for a new log would ingest the batch a
 * second time (and set the watermark back). */
#define WM_STALE "(o.next_offset > (SELECT kp.le FROM kp WHERE kp.topic = o.topic" \
    " AND kp.part = o.partition) AND o.updated_at < now() - $25::bigint * interval '1 ms')"
#define LANE_DEFERS "coalesce(($13::bigint[])[u.p + 1], 1) <> 0"
/* The batch's rows joined to their job; a flow's schedule job (handler
 * flow) is not submitted (axctl flow run), and p0-p9 are lanes, never
 * groups (dead-lettered, services/trigger/ingest.c). */
#define INGEST_ROWS                                                                        \
    " u.*, j.id AS jid, j.name AS jname, j.handler_kind, j.command, j.timeout_ms,"        \
    "  coalesce(u.prio, j.priority, 2) AS p, j.executor_group, j.routing_key,"            \
    "  j.shard_count, j.shard_base"                                                       \
    " FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::smallint[],"      \
    "   $6::bigint[], $7::bigint[], $8::text[], $9::text[], $10::text[], $17::int[],"     \
    "   $18::bigint[], $19::boolean[])"                                                   \
    "   AS u(job, argv, payload, timeout, prio, run_at, delay, trace, idem, skey, kp, off," \
    "   dup)"                                                                             \
    " LEFT JOIN job j ON j.name = u.job AND j.handler_kind <> 'flow'"                     \
    "  AND j.executor_group !~ '^p[0-9]$'"                                                \
    " WHERE (u.job IS NULL OR j.id IS NOT NULL)"
/* Planned once per session (AX_STMT_GENERIC): its plan is the same for any
 * batch (the job by name, the watermarks and submission keys by their
 * unique indexes, inserts), and planning it took about as long as running
 * a batch of 40 (1.4 ms against 2-3 ms, pg_stat_statements with
 * track_planning at 1,000 jobs/s: BENCHMARKS.md, "Issue #13: planning on
 * the hot path"). */
AX_STMT_GENERIC(st_ingest, "dispatch.ingest",
    "WITH ld AS ("
    " SELECT 1 FROM ax_leader WHERE $14::bigint > 0 AND role = $23 AND holder = $24"
    "  AND epoch = $14::bigint AND expires_at > now() FOR SHARE"
    "), u AS MATERIALIZED ("
    /* one row per key: a key the batch carries twice keeps one row */
    " SELECT" INGEST_ROWS " AND u.dup IS NOT TRUE"
    " UNION ALL (SELECT DISTINCT ON (u.skey)" INGEST_ROWS
    "  AND $19::boolean[] IS NOT NULL AND u.dup)"
    "), kp AS ("
    /* the batch's partitions: the offset past its last, and the end offset
     * as the consumer last fetched it (a consumed offset is always below
     * it, so a watermark above it is one of a log recreated or truncated
     * since: offsets from 0 again) */
    " SELECT * FROM unnest($20::text[], $21::int[], $22::bigint[], $16::bigint[])"
    "  WITH ORDINALITY AS x(topic, part, nxt, le, i)"
    "), wm AS ("
    /* their watermarks, moved past this batch (the row locked until
     * commit: a concurrent ingest of the partition reads ours), or started
     * over for a recreated log */
    " INSERT INTO submit_offset AS o (topic, partition, next_offset)"
    /* in (topic, partition) order: two ingests of overlapping partitions
     * (a consumer pushed out of its group mid-batch) lock the watermarks
     * in the same order and cannot deadlock */
    " SELECT topic, part, nxt FROM kp ORDER BY topic, part"
    " ON CONFLICT (topic, partition) DO UPDATE SET"
    "  prev_offset = CASE WHEN " WM_STALE " THEN NULL ELSE o.next_offset END,"
    "  next_offset = CASE WHEN " WM_STALE " THEN excluded.next_offset"
    "   ELSE greatest(o.next_offset, excluded.next_offset) END,"
    /* when it moved (the retention sweep drops a watermark that stood
     * still for retention.finished.ms, as a key goes with its instance) */
    "  updated_at = CASE WHEN excluded.next_offset > o.next_offset OR " WM_STALE " THEN now()"
    "   ELSE o.updated_at END"
    " RETURNING topic, partition, prev_offset"
    "), sk AS ("
    /* an idempotency key decides: an instance only for a key not seen
     * before */
    " INSERT INTO submission (submit_key, instance_id)"
    " SELECT skey, nextval('job_instance_id_seq') FROM u WHERE kp IS NULL AND skey IS NOT NULL"
    " ON CONFLICT DO NOTHING RETURNING submit_key, instance_id"
    "), n AS MATERIALIZED ("
    " SELECT CASE WHEN u.kp IS NULL THEN sk.instance_id"
    "   ELSE nextval('job_instance_id_seq') END AS id,"
    "  u.jid, u.jname, coalesce(u.handler_kind, 'command') AS hk,"
    "  CASE WHEN u.job IS NULL"
    "       THEN ARRAY(SELECT json_array_elements_text(u.argv::json)) ELSE u.command END AS cmd,"
    "  decode(u.payload, 'hex') AS pl, coalesce(u.timeout, u.timeout_ms, $11::bigint) AS tmo,"
    "  u.p, CASE WHEN u.run_at IS NOT NULL THEN to_timestamp(u.run_at / 1000.0)"
    "       ELSE now() + make_interval(secs => coalesce(u.delay, 0) / 1000.0) END AS due,"
    "  u.trace, u.idem, u.skey, coalesce(u.executor_group, 'default') AS grp, u.routing_key,"
    "  CASE WHEN u.shard_count IS NOT NULL THEN 'static'"
    "       WHEN u.shard_base IS NOT NULL THEN 'probe' END AS smode,"
    /* due now while its lane defers: recorded as deferred at once */
    "  CASE WHEN EXISTS (SELECT 1 FROM ld) AND " DUE_NOW " AND " LANE_DEFERS
    "   THEN now() END AS deferred,"
    "  CASE WHEN EXISTS (SELECT 1 FROM ld) AND " DUE_NOW " AND ($15::int[])[u.p + 1] = 1"
    "   AND u.shard_count IS NULL THEN now() END AS disp"
    " FROM u LEFT JOIN sk ON u.kp IS NULL AND sk.submit_key = u.skey"
    "  LEFT JOIN (SELECT kp.i, wm.prev_offset FROM wm"
    "   JOIN kp ON kp.topic = wm.topic AND kp.part = wm.partition) w ON w.i = u.kp"
    " WHERE CASE WHEN u.kp IS NULL THEN sk.instance_id IS NOT NULL"
    /* a Kafka position is new at or past its partition's watermark (and
     * not a key a previous release wrote) */
    "  ELSE w.i IS NOT NULL AND (w.prev_offset IS NULL OR u.off >= w.prev_offset)"
    "   AND NOT EXISTS (SELECT 1 FROM submission s WHERE s.submit_key = u.skey) END"
    /* the definition (written once) and the state row (every transition) */
    "), d AS ("
    " INSERT INTO instance_def (id, job_id, job_name, handler_kind, command, payload, timeout_ms,"
    "  trace_id, idempotency_key, submit_key, executor_group, routing_field)"
    " SELECT id, jid, jname, hk, cmd, pl, tmo, trace, idem, skey, grp, routing_key FROM n"
    "), s AS ("
    " INSERT INTO instance_state (id, job_id, deployment, priority, due_at, shard_mode,"
    "  deferred_at, dispatched_at)"
    " SELECT id, jid, $12, p, due, smode, deferred, disp FROM n"
    "), " PEND_BATCH("n", "disp IS NOT NULL", "$14::bigint", "$12")
    " SELECT id, 1, jname, hk, to_json(cmd)::text, pl, tmo, NULL::bigint,"
    "  (extract(epoch FROM due) * 1000)::bigint, p, trace, idem, grp, routing_key,"
    "  CASE WHEN disp IS NULL THEN 1 END AS hold, skey, (SELECT count(*) FROM ld) AS leased"
    " FROM n");
enum { INGEST_HOLD = DC_NCOLS, INGEST_SUBMIT_KEY, INGEST_LEASED };

void ax_ingest_out_free(ax_ingest_out_t *out) {
    if (!out)
        return;
    for (size_t i = 0; out->submit_key && i < out->rows.n; i++)
        free(out->submit_key[i]);
    free(out->submit_key);
    out->submit_key = NULL;
    ax_dispatch_rows_free(&out->rows);
}

static void hex(ax_strbuf_t *b, const uint8_t *p, size_t n) {
    static const char d[] = "0123456789abcdef";
    char tmp[512];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        tmp[k++] = d[p[i] >> 4];
        tmp[k++] = d[p[i] & 15];
        if (k == sizeof tmp) {
            ax_strbuf_add(b, tmp, k);
            k = 0;
        }
    }
    ax_strbuf_add(b, tmp, k);
}

/* Digits only, 1 to max of them, from *p up to the byte `end` ends them
 * with; their value in *v, *p past them. 1 if so. */
static int digits(const char **p, char end, int max, int64_t *v) {
    const char *s = *p;
    int64_t x = 0;
    int k = 0;
    for (; *s >= '0' && *s <= '9'; s++, k++)
        if (k < max)
            x = x * 10 + (*s - '0');
    if (k < 1 || k > max || *s != end)
        return 0;
    *v = x;
    *p = s;
    return 1;
}

/* A submit key that is a Kafka position, kafka:TOPIC:PARTITION:OFFSET (the
 * regular expression ^kafka:[^:]+:[0-9]{1,9}:[0-9]{1,18}$ that the
 * statement matched before): 1 with the topic (topic[0..*tlen)), partition
 * and offset, else 0. */
int ax__kafka_pos(const char *k, const char **topic, size_t *tlen, int32_t *part,
                  int64_t *off) {
    if (!k || strncmp(k, "kafka:", 6) != 0)
        return 0;
    const char *t = k + 6, *c = strchr(t, ':');
    if (!c || c == t)
        return 0;
    const char *p = c + 1;
    int64_t pv, ov;
    if (!digits(&p, ':', 9, &pv))
        return 0;
    p++;
    if (!digits(&p, '\0', 18, &ov))
        return 0;
    *topic = t;
    *tlen = (size_t)(c - t);
    *part = (int32_t)pv;
    *off = ov;
    return 1;
}

/* A partition of the batch's Kafka positions. */
typedef struct kpart {
    const char *topic;
    size_t tlen;
    int32_t part;
    int64_t next; /* past the batch's last offset */
    int64_t le;   /* the greatest known end offset; 0: none known */
} kpart_t;

static int cmp_key(const void *a, const void *b) {
    const char *x = **(const char *const *const *)a, *y = **(const char *const *const *)b;
    return ax_keycmp(x, y);
}

enum {
    A_JOB, A_ARGV, A_PAYLOAD, A_TIMEOUT, A_PRIO, A_RUN_AT, A_DELAY, A_TRACE, A_IDEM, A_SKEY,
    A_KP, A_OFF, A_DUP, A_TOPIC, A_PART, A_NEXT, A_LE, INGEST_ARRAYS
};

/* The statement's array parameters for in[0..n): 0, or AX_ERR_NOMEM. */
static int ingest_arrays(const ax_ingest_in_t *in, size_t n, ax_strbuf_t a[INGEST_ARRAYS]) {
    ax_strbuf_t pl = {0};
    kpart_t *parts = calloc(n ? n : 1, sizeof *parts);
    size_t nparts = 0, last = 0;
    /* keys the batch carries more than once */
    unsigned char *dup = calloc(n ? n : 1, 1);
    const char **keys = calloc(n ? n : 1, sizeof *keys);
    const char ***order = calloc(n ? n : 1, sizeof *order);
    int any_dup = 0, rc = 0;
    if (!parts || !dup || !keys || !order)
        rc = AX_ERR_NOMEM;
    size_t nk = 0;
    for (size_t i = 0; rc == 0 && i < n; i++)
        if (in[i].submit_key) {
            keys[i] = in[i].submit_key;
            order[nk++] = &keys[i];
        }
    if (rc == 0 && nk > 1) {
        qsort(order, nk, sizeof *order, cmp_key);
        for (size_t k = 1; k < nk; k++)
            if (strcmp(*order[k], *order[k - 1]) == 0) {
                dup[order[k] - keys] = dup[order[k - 1] - keys] = 1;
                any_dup = 1;
            }
    }
    for (int k = 0; k < INGEST_ARRAYS; k++)
        ax_pgarr_begin(&a[k]);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const ax_ingest_in_t *s = &in[i];
        ax_pgarr_text(&a[A_JOB], s->job);
        ax_pgarr_text(&a[A_ARGV], s->job ? NULL : s->argv_json);
        pl.len = 0;
        hex(&pl, s->payload, s->payload_len);
        ax_strbuf_add(&pl, "", 1);
        ax_pgarr_text(&a[A_PAYLOAD], pl.s);
        if (s->timeout_ms > 0)
            ax_pgarr_int(&a[A_TIMEOUT], s->timeout_ms);
        else
            ax_pgarr_text(&a[A_TIMEOUT], NULL);
        if (s->priority >= 0)
            ax_pgarr_int(&a[A_PRIO], s->priority);
        else
            ax_pgarr_text(&a[A_PRIO], NULL);
        if (s->run_at_ms > 0)
            ax_pgarr_int(&a[A_RUN_AT], s->run_at_ms);
        else
            ax_pgarr_text(&a[A_RUN_AT], NULL);
        if (s->delay_ms >= 0)
            ax_pgarr_int(&a[A_DELAY], s->delay_ms);
        else
            ax_pgarr_text(&a[A_DELAY], NULL);
        ax_pgarr_text(&a[A_TRACE], s->trace_id);
        ax_pgarr_text(&a[A_IDEM], s->idempotency_key);
        ax_pgarr_text(&a[A_SKEY], s->submit_key);
        ax_pgarr_text(&a[A_DUP], dup[i] ? "t" : "f");
        const char *topic;
        size_t tlen;
        int32_t part;
        int64_t off;
        if (!ax__kafka_pos(s->submit_key, &topic, &tlen, &part, &off)) {
            ax_pgarr_text(&a[A_KP], NULL);
            ax_pgarr_text(&a[A_OFF], NULL);
            continue;
        }
        /* its partition: most often the previous row's */
        size_t k = last;
        if (!(k < nparts && parts[k].part == part && parts[k].tlen == tlen &&
              memcmp(parts[k].topic, topic, tlen) == 0))
            for (k = 0; k < nparts; k++)
                if (parts[k].part == part && parts[k].tlen == tlen &&
                    memcmp(parts[k].topic, topic, tlen) == 0)
                    break;
        if (k == nparts)
            parts[nparts++] = (kpart_t){.topic = topic, .tlen = tlen, .part = part};
        last = k;
        kpart_t *kp = &parts[k];
        if (off + 1 > kp->next)
            kp->next = off + 1;
        if (s->log_end > kp->le) /* a consumed message's log ends past it: 0 is unknown */
            kp->le = s->log_end;
        ax_pgarr_int(&a[A_KP], (int64_t)k + 1);
        ax_pgarr_int(&a[A_OFF], off);
    }
    ax_strbuf_t t = {0};
    for (size_t k = 0; rc == 0 && k < nparts; k++) {
        t.len = 0;
        ax_strbuf_add(&t, parts[k].topic, parts[k].tlen);
        ax_strbuf_add(&t, "", 1);
        ax_pgarr_text(&a[A_TOPIC], t.s);
        ax_pgarr_int(&a[A_PART], parts[k].part);
        ax_pgarr_int(&a[A_NEXT], parts[k].next);
        if (parts[k].le > 0)
            ax_pgarr_int(&a[A_LE], parts[k].le);
        else
            ax_pgarr_text(&a[A_LE], NULL);
    }
    for (int k = 0; k < INGEST_ARRAYS; k++)
        ax_pgarr_end(&a[k]);
    if (!any_dup) /* the DISTINCT ON branch is skipped */
        ax_strbuf_free(&a[A_DUP]);
    for (int k = 0; rc == 0 && k < INGEST_ARRAYS; k++)
        if (!a[k].s && !(k == A_DUP && !any_dup))
            rc = AX_ERR_NOMEM;
    if (nparts && !t.s)
        rc = AX_ERR_NOMEM;
    ax_strbuf_free(&t);
    ax_strbuf_free(&pl);
    free(parts);
    free(dup);
    free(keys);
    free(order);
    return rc;
}

int ax_store_ingest(ax_pg_t *pg, const ax_ingest_ctx_t *c, const ax_ingest_in_t *in, size_t n,
                    ax_ingest_out_t *out, char *errbuf, size_t errlen) {
    *out = (ax_ingest_out_t){0};
    ax_strbuf_t a[INGEST_ARRAYS] = {{0}};
    int arc = ingest_arrays(in, n, a);
    ax_num_t n_tmo, n_epoch, n_taken;
    int zero[AX_PRIORITIES] = {0};
    char *ages = wait_array(c->lane_wait_ms);
    char *direct = int_array_i(c->direct ? c->direct : zero, AX_PRIORITIES);
    int rc;
    PGresult *r = NULL;
    if (arc < 0 || !ages || !direct) {
        rc = ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "dispatch.ingest: out of memory");
    } else {
        const char *p[] = {a[A_JOB].s, a[A_ARGV].s, a[A_PAYLOAD].s, a[A_TIMEOUT].s,
                           a[A_PRIO].s, a[A_RUN_AT].s, a[A_DELAY].s, a[A_TRACE].s,
                           a[A_IDEM].s, a[A_SKEY].s, ax_num(&n_tmo, c->default_timeout_ms),
                           c->deployment, ages, ax_num(&n_epoch, c->epoch), direct,
                           a[A_LE].s, a[A_KP].s, a[A_OFF].s, a[A_DUP].s, a[A_TOPIC].s,
                           a[A_PART].s, a[A_NEXT].s, c->epoch > 0 ? c->role : NULL,
                           c->epoch > 0 ? c->holder : NULL,
                           ax_num(&n_taken, c->taken_ms_ago > 0 ? c->taken_ms_ago : 0)};
        rc = ax_stmt_run(pg, &st_ingest, 25, p, NULL, NULL, &r, errbuf, errlen);
    }
    for (int k = 0; k < INGEST_ARRAYS; k++)
        ax_strbuf_free(&a[k]);
    free(ages);
    free(direct);
    if (rc < 0)
        return rc;
    rc = ax__dispatch_rows_read(r, INGEST_HOLD, &out->rows);
    if (rc == 0 && c->epoch > 0 && PQntuples(r) > 0)
        out->fenced = ax_pg_int(r, 0, INGEST_LEASED) == 0;
    if (rc == 0 && out->rows.n) {
        out->submit_key = calloc(out->rows.n, sizeof *out->submit_key);
        for (size_t i = 0; out->submit_key && i < out->rows.n; i++)
            out->submit_key[i] = ax_pg_strdup(r, (int)i, INGEST_SUBMIT_KEY);
        if (!out->submit_key)
            rc = AX_ERR_NOMEM;
    }
    PQclear(r);
    if (rc < 0)
        ax_ingest_out_free(out);
    return rc;
}

enum { JOB_NAME, JOB_FLOW, JOB_GROUP };
AX_STMT(st_ingest_jobs, "dispatch.ingest_jobs",
        "SELECT name, handler_kind = 'flow', executor_group FROM job"
        " WHERE name = ANY($1::text[])");

void ax_ingest_jobs_free(ax_ingest_jobs_t *jobs) {
    if (!jobs)
        return;
    for (size_t i = 0; i < jobs->n; i++) {
        free(jobs->v[i].name);
        free(jobs->v[i].executor_group);
    }
    free(jobs->v);
    jobs->v = NULL;
    jobs->n = 0;
}

int ax_store_ingest_jobs(ax_pg_t *pg, const char *const *names, size_t n, ax_ingest_jobs_t *out,
                         char *errbuf, size_t errlen) {
    *out = (ax_ingest_jobs_t){0};
    ax_strbuf_t b = {0};
    ax_pgarr_begin(&b);
    for (size_t i = 0; i < n; i++)
        ax_pgarr_text(&b, names[i]);
    ax_pgarr_end(&b);
    if (!b.s)
        return AX_ERR_NOMEM;
    const char *p[] = {b.s};
    PGresult *r;
    int rc = ax_stmt_run(pg, &st_ingest_jobs, 1, p, NULL, NULL, &r, errbuf, errlen);
    ax_strbuf_free(&b);
    if (rc < 0)
        return rc;
    size_t rows = (size_t)PQntuples(r);
    out->v = rows ? calloc(rows, sizeof *out->v) : NULL;
    if (rows && !out->v) {
        PQclear(r);
        return AX_ERR_NOMEM;
    }
    for (size_t i = 0; i < rows; i++) {
        ax_ingest_job_t *j = &out->v[out->n++];
        j->name = ax_pg_strdup(r, (int)i, JOB_NAME);
        j->flow = ax_pg_bool(r, (int)i, JOB_FLOW);
        j->executor_group = ax_pg_strdup(r, (int)i, JOB_GROUP);
    }
    PQclear(r);
    return 0;
}

/* ---- due scan ---------------------------------------------------------------- */

/* Due, not produced yet, and not waiting for an unfinished predecessor
 * (overlap=queue). */
#define NOT_WAITING                                                                   \
    " AND (wait_for IS NULL OR NOT EXISTS (SELECT 1 FROM instance_state p"            \
    " WHERE p.id = instance_state.wait_for AND p.state <> 'FINISHED'))"

AX_STMT(st_expand, "dispatch.expand_shards",
        "SELECT ax_shard_expand(i.id, j.shard_count) FROM instance_state i"
        " JOIN job j ON j.id = i.job_id WHERE i.queued"
        " AND i.shard_mode = 'static'"
        " AND i.due_at <= now() AND i.deployment = $2 LIMIT $1");

int ax_store_due_expand_shards(ax_pg_t *pg, const char *deployment, int64_t limit, char *errbuf,
                               size_t errlen) {
    ax_num_t n_lim;
    const char *p[] = {ax_num(&n_lim, limit), deployment};
    return ax_stmt_run(pg, &st_expand, 2, p, NULL, NULL, NULL, errbuf, errlen);
}

/* Per lane ($3: the release plan's wait per priority, NULL = held until the
 * lane itself is back under its low mark), oldest first through the
 * (priority, due_at) index, each onto its target lane ($4, per priority),
 * at most as many as that lane has room for ($5, per lane). Backlog-capped
 * instances (error class backlog_full) wait for ax-callback to finish
 * them. The caller merges them in order of effective priority
 * (ax_lane_pick) and marks the ones it picked (dispatch.due_mark). The
 * candidates are not locked (a SELECT ... FOR UPDATE SKIP LOCKED wrote a
 * WAL record per row, BENCHMARKS.md "Issue #13: the finish and the outbox
 * per batch"): the mark takes only those still queued when it updates
 * them. */
enum { CAND_ID, CAND_WAITED, CAND_PRIO, CAND_LANE };
AX_STMT(st_due_cand, "dispatch.due_candidates",
        "SELECT c.id, (extract(epoch FROM now() - c.due_at) * 1000)::bigint, c.priority,"
        "  ($4::int[])[c.priority + 1] AS lane"
        "  FROM unnest($3::bigint[]) WITH ORDINALITY AS l(wait_ms, lane1),"
        "  LATERAL (SELECT id, due_at, priority FROM instance_state WHERE queued"
        "    AND priority = l.lane1 - 1"
        "    AND due_at <= now() - l.wait_ms * interval '1 millisecond' AND deployment = $2"
        NOT_WAITING
        "    AND shard_mode IS DISTINCT FROM 'static'"
        "    AND error_class IS DISTINCT FROM 'backlog_full'"
        "    ORDER BY due_at LIMIT least($1, ($5::bigint[])[($4::int[])[l.lane1] + 1])) c"
        "  WHERE l.wait_ms IS NOT NULL");

int ax_store_due_candidates(ax_pg_t *pg, const ax_due_plan_t *plan, ax_lane_cand_t **ret_v,
                            size_t *ret_n, char *errbuf, size_t errlen) {
    *ret_v = NULL;
    *ret_n = 0;
    ax_num_t n_lim;
    char *waits = wait_array(plan->wait_ms);
    char *targets = int_array_i(plan->target, AX_PRIORITIES);
    char *rooms = ax__int_array(plan->room, AX_PRIORITIES);
    int rc = AX_ERR_NOMEM;
    PGresult *r = NULL;
    if (waits && targets && rooms) {
        const char *p[] = {ax_num(&n_lim, plan->limit), plan->deployment, waits, targets, rooms};
        rc = ax_stmt_run(pg, &st_due_cand, 5, p, NULL, NULL, &r, errbuf, errlen);
    }
    free(waits);
    free(targets);
    free(rooms);
    if (rc < 0)
        return rc;
    size_t n = (size_t)PQntuples(r);
    ax_lane_cand_t *v = n ? calloc(n, sizeof *v) : NULL;
    if (n && !v) {
        PQclear(r);
        return AX_ERR_NOMEM;
    }
    for (size_t i = 0; i < n; i++)
        v[i] = (ax_lane_cand_t){
            .id = ax_pg_int(r, (int)i, CAND_ID),
            .waited_ms = ax_pg_int(r, (int)i, CAND_WAITED),
            .prio = (int)ax_pg_int(r, (int)i, CAND_PRIO),
            .lane = (int)ax_pg_int(r, (int)i, CAND_LANE),
        };
    PQclear(r);
    *ret_v = v;
    *ret_n = n;
    return 0;
}

/* By primary key only: a join here could become a nested loop over
 * job_instance_due, which the planner estimates at 1 row in the middle of
 * a burst (BENCHMARKS.md), and so could a WHERE on queued (the due index's
 * predicate). The candidates were read unlocked: a row no longer queued
 * when the update reaches it (finished from SCHEDULED by the callback, a
 * cancel, in the meantime; the update waits for that writer and sees its
 * version) keeps its dispatched_at and is neither marked nor returned
 * (took: the transaction's now() is no earlier dispatch's time).
 * The batch's id range beside id = ANY keeps the update on the primary
 * key when the statistics are older than the table, and the definitions
 * are one primary-key lookup per row (LATERAL ... LIMIT 1): joined, they
 * were planned as a hash join over a sequential scan of instance_def, 32-47
 * ms for 1,000 rows of 40,000 against 13-20 (BENCHMARKS.md, "Issue #13:
 * the array keys rescanned"). */
AX_STMT(st_due_mark, "dispatch.due_mark",
        "WITH u AS ("
        "  UPDATE instance_state SET dispatched_at = CASE WHEN queued THEN now()"
        "    ELSE dispatched_at END WHERE id = ANY($1::bigint[])"
        "  AND id BETWEEN (SELECT min(x) FROM unnest($1::bigint[]) x)"
        "   AND (SELECT max(x) FROM unnest($1::bigint[]) x)"
        "  RETURNING id, attempt, due_at, priority, coalesce(dispatched_at = now(), false) AS took"
        "), " PEND_BATCH("u", "took", "$2::bigint", "$3")
        " SELECT " DISPATCH_COLS " FROM u, LATERAL (SELECT d.job_name, d.handler_kind, d.command,"
        "  d.payload, d.timeout_ms, d.nominal_time, d.trace_id, d.idempotency_key,"
        "  d.executor_group, d.routing_field FROM instance_def d WHERE d.id = u.id LIMIT 1) d"
        " WHERE u.took");

int ax_store_due_mark(ax_pg_t *pg, const int64_t *ids, size_t n, int64_t epoch,
                      const char *deployment, ax_dispatch_rows_t *out, char *errbuf,
                      size_t errlen) {
    *out = (ax_dispatch_rows_t){0};
    char *arr = ax__int_array(ids, n);
    if (!arr)
        return AX_ERR_NOMEM;
    ax_num_t n_epoch;
    const char *p[] = {arr, ax_num(&n_epoch, epoch), deployment};
    PGresult *r;
    int rc = ax_stmt_run(pg, &st_due_mark, 3, p, NULL, NULL, &r, errbuf, errlen);
    free(arr);
    if (rc < 0)
        return rc;
    rc = ax__dispatch_rows_read(r, -1, out);
    PQclear(r);
    return rc;
}

AX_STMT(st_due_next, "dispatch.due_next",
        "SELECT ceil(min(extract(epoch FROM (m.due + l.wait_ms * interval"
        "  '1 millisecond' - now()))) * 1000)::bigint"
        " FROM unnest($2::bigint[]) WITH ORDINALITY AS l(wait_ms, lane1),"
        " LATERAL (SELECT min(due_at) AS due FROM instance_state"
        "  WHERE queued"
        "  AND priority = l.lane1 - 1 AND deployment = $1" NOT_WAITING
        "  AND error_class IS DISTINCT FROM 'backlog_full') m"
        " WHERE l.wait_ms IS NOT NULL");

int ax_store_due_next(ax_pg_t *pg, const char *deployment, const int64_t *wait_ms,
                      int64_t *ret_ms, char *errbuf, size_t errlen) {
    char *waits = wait_array(wait_ms);
    if (!waits)
        return AX_ERR_NOMEM;
    const char *p[] = {deployment, waits};
    PGresult *r;
    int rc = ax_stmt_run(pg, &st_due_next, 2, p, NULL, NULL, &r, errbuf, errlen);
    free(waits);
    if (rc < 0)
        return rc;
    *ret_ms = PQntuples(r) && !PQgetisnull(r, 0, 0) ? ax_pg_int(r, 0, 0) : INT64_MAX;
    PQclear(r);
    return 0;
}

/* ---- settle, undo, recovery ------------------------------------------------------ */

/* Instances whose dispatch is undone: by primary key only, the state
 * checked in the SET (a WHERE on state lets the planner walk a partial
 * index of job_instance, estimated at 1 row mid-burst: BENCHMARKS.md). */
#define UNDISPATCH "CASE WHEN state = 'SCHEDULED' THEN NULL ELSE dispatched_at END"

AX_STMT(st_settle, "dispatch.settle",
        "WITH " PEND_TAKE("$1::bigint[]", "$2") " SELECT 1");

int ax_store_pending_settle(ax_pg_t *pg, const char *deployment, const int64_t *ids, size_t n,
                            char *errbuf, size_t errlen) {
    char *arr = ax__int_array(ids, n);
    if (!arr)
        return AX_ERR_NOMEM;
    const char *p[] = {arr, deployment};
    int rc = ax_stmt_run(pg, &st_settle, 2, p, NULL, NULL, NULL, errbuf, errlen);
    free(arr);
    return rc;
}

AX_STMT(st_undo, "dispatch.undo",
        "WITH " PEND_TAKE("$1::bigint[]", "$2") ","
        /* a previous release's rows (018_hot_writes: additive) */
        " p AS MATERIALIZED (DELETE FROM dispatch_pending"
        "  WHERE instance_id = ANY($1::bigint[]) RETURNING instance_id)"
        " UPDATE instance_state SET dispatched_at = " UNDISPATCH
        " WHERE id = ANY(ARRAY(SELECT instance_id FROM taken"
        "  UNION SELECT instance_id FROM p))");

AX_STMT(st_recover, "dispatch.recover",
        "WITH b AS MATERIALIZED (DELETE FROM dispatch_batch WHERE deployment = $1"
        "  AND (epoch < $2::bigint OR created_at < now() - interval '1 minute')"
        "  RETURNING ids),"
        /* a previous release's rows (018_hot_writes: additive) */
        " o AS MATERIALIZED (DELETE FROM dispatch_pending WHERE deployment = $1"
        "  AND (epoch < $2::bigint OR created_at < now() - interval '1 minute')"
        "  RETURNING instance_id),"
        " p AS (SELECT unnest(ids) AS instance_id FROM b UNION SELECT instance_id FROM o),"
        " u AS (UPDATE instance_state SET dispatched_at = " UNDISPATCH
        "  WHERE id = ANY(ARRAY(SELECT instance_id FROM p)) RETURNING id, state)"
        " SELECT id FROM u WHERE state = 'SCHEDULED'");

int ax_store_pending_undo(ax_pg_t *pg, const ax_pending_undo_t *u, int64_t *ret_again,
                          char *errbuf, size_t errlen) {
    if (ret_again)
        *ret_again = 0;
    if (u->ids) {
        char *arr = ax__int_array(u->ids, u->n);
        if (!arr)
            return AX_ERR_NOMEM;
        const char *p[] = {arr, u->deployment};
        int rc = ax_stmt_run(pg, &st_undo, 2, p, NULL, NULL, NULL, errbuf, errlen);
        free(arr);
        return rc;
    }
    ax_num_t n_epoch;
    const char *p[] = {u->deployment, ax_num(&n_epoch, u->epoch)};
    PGresult *r;
    int rc = ax_stmt_run(pg, &st_recover, 2, p, NULL, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    if (ret_again)
        *ret_again = PQntuples(r);
    PQclear(r);
    return 0;
}

/* A batch at a time (job_instance_dispatched), updated by primary key only
 * (UNDISPATCH). */
AX_STMT(st_redispatch, "dispatch.redispatch_unclaimed",
        "WITH u AS (UPDATE instance_state SET dispatched_at = " UNDISPATCH
        " WHERE id = ANY(ARRAY(SELECT id FROM instance_state WHERE flying AND state = 'SCHEDULED'"
        " AND dispatched_at < now() - $1::bigint * interval '1 millisecond'"
        " AND deployment = $2 AND NOT EXISTS (SELECT 1 FROM instance_hold h"
        "  WHERE h.instance_id = instance_state.id)"
        " ORDER BY dispatched_at LIMIT $3)) RETURNING id, state)"
        " SELECT id FROM u WHERE state = 'SCHEDULED'");

int ax_store_redispatch_unclaimed(ax_pg_t *pg, const char *deployment, int64_t after_ms,
                                  int64_t limit, int64_t *ret_n, char *errbuf, size_t errlen) {
    ax_num_t n_after, n_lim;
    const char *p[] = {ax_num(&n_after, after_ms), deployment, ax_num(&n_lim, limit)};
    PGresult *r;
    int rc = ax_stmt_run(pg, &st_redispatch, 3, p, NULL, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    *ret_n = PQntuples(r);
    PQclear(r);
    return 0;
}

/* ---- lease sweep ---------------------------------------------------------------------- */

void ax_lost_leases_free(ax_lost_leases_t *l) {
    if (!l)
        return;
    for (size_t i = 0; i < l->n; i++) {
        free(l->v[i].trace_id);
        free(l->v[i].worker);
    }
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

/* An expired lease means a lost worker only if the worker is gone too: its
 * heartbeat (worker table) stopped, it said it stopped, or the process
 * beating under its worker.id started after the claim (a restart with a
 * fixed worker.id: the new process never renews what the old one held,
 * e.g. after a fenced executor's exit). A lease expired for 10 minutes is
 * swept regardless. */
enum { LOST_ID, LOST_ATTEMPT, LOST_TRACE, LOST_WORKER, LOST_STARTED };
AX_STMT(st_lost, "dispatch.lost_leases",
        "SELECT i.id, i.attempt, (SELECT trace_id FROM instance_def d WHERE d.id = i.id),"
        "  coalesce(i.worker, ''),"
        "  (extract(epoch FROM coalesce(i.running_at, i.locked_at)) * 1000)::bigint"
        " FROM instance_state i LEFT JOIN worker w ON w.id = i.worker"
        " WHERE i.flying AND i.state IN ('LOCKED', 'RUNNING')"
        " AND i.lease_expires_at < now() AND i.deployment = $2"
        " AND (w.id IS NULL OR w.state = 'stopped'"
        "      OR w.heartbeat_at < now() - $3::bigint * interval '1 millisecond'"
        "      OR w.started_at > coalesce(i.running_at, i.locked_at)"
        "      OR i.lease_expires_at < now() - interval '10 minutes')"
        " ORDER BY i.lease_expires_at LIMIT $1");

int ax_store_lost_leases(ax_pg_t *pg, const char *deployment, int64_t stale_ms, int64_t limit,
                         ax_lost_leases_t *out, char *errbuf, size_t errlen) {
    *out = (ax_lost_leases_t){0};
    ax_num_t n_lim, n_stale;
    const char *p[] = {ax_num(&n_lim, limit), deployment, ax_num(&n_stale, stale_ms)};
    PGresult *r;
    int rc = ax_stmt_run(pg, &st_lost, 3, p, NULL, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    size_t n = (size_t)PQntuples(r);
    out->v = n ? calloc(n, sizeof *out->v) : NULL;
    if (n && !out->v) {
        PQclear(r);
        return AX_ERR_NOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        ax_lost_lease_t *x = &out->v[out->n++];
        x->id = ax_pg_int(r, (int)i, LOST_ID);
        x->attempt = (int32_t)ax_pg_int(r, (int)i, LOST_ATTEMPT);
        x->trace_id = dup_text(r, (int)i, LOST_TRACE);
        x->worker = dup_text(r, (int)i, LOST_WORKER);
        x->started_ms = ax_pg_int(r, (int)i, LOST_STARTED);
        if (!x->trace_id || !x->worker) {
            PQclear(r);
            ax_lost_leases_free(out);
            return AX_ERR_NOMEM;
        }
    }
    PQclear(r);
    return 0;
}

AX_STMT(st_lease_push, "dispatch.lease_push",
        "UPDATE instance_state SET lease_expires_at = now() + interval '60 seconds'"
        " WHERE id = ANY($1::bigint[]) AND state IN ('LOCKED', 'RUNNING')");

int ax_store_lease_push(ax_pg_t *pg, const int64_t *ids, size_t n, char *errbuf, size_t errlen) {
    char *arr = ax__int_array(ids, n);
    if (!arr)
        return AX_ERR_NOMEM;
    const char *p[] = {arr};
    int rc = ax_stmt_run(pg, &st_lease_push, 1, p, NULL, NULL, NULL, errbuf, errlen);
    free(arr);
    return rc;
}
