/*
 * hold.c — the store's hold family (ax/store_hold.h).
 */
#include <stdlib.h>
#include <string.h>

#include "ax/store_hold.h"
#include "dispatch_int.h"
#include "store_int.h"

/* The statement that settles a dispatch batch with holds: the pending rows
 * of the batch ($1) go, the held ones ($2..$4) are recorded. */
AX_STMT(st_record, "hold.record",
    "WITH " PEND_TAKE("$1::bigint[]", "$5")
    " INSERT INTO instance_hold AS h (instance_id, deployment, topic, reason)"
    " SELECT u.id, $5, nullif(u.topic, ''), u.reason"
    " FROM unnest($2::bigint[], $3::text[], $4::text[]) AS u(id, topic, reason)"
    " ON CONFLICT (instance_id) DO UPDATE SET topic = excluded.topic,"
    "  reason = excluded.reason, held_at = now()");

AX_STMT(st_topics, "hold.topics",
        "SELECT DISTINCT topic FROM instance_hold WHERE deployment = $1"
        " AND topic IS NOT NULL");

AX_STMT(st_release, "hold.release",
        "WITH r AS (DELETE FROM instance_hold WHERE deployment = $1"
        "  AND topic = ANY($2::text[]) RETURNING instance_id, topic)"
        " UPDATE instance_state i SET dispatched_at = NULL FROM r"
        " WHERE i.id = r.instance_id AND i.state = 'SCHEDULED'"
        " RETURNING r.topic");

AX_STMT(st_clean, "hold.clean",
        "DELETE FROM instance_hold h WHERE deployment = $1 AND NOT EXISTS"
        " (SELECT 1 FROM instance_state i WHERE i.id = h.instance_id"
        "  AND i.state = 'SCHEDULED') RETURNING instance_id");

static int nomem(const ax_stmt_t *st, char *errbuf, size_t errlen) {
    return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "%s: out of memory", st->name);
}

int ax_store_hold_record(ax_pg_t *pg, const int64_t *pending, size_t npending,
                         const ax_store_hold_t *holds, size_t n, const char *deployment,
                         char *errbuf, size_t errlen) {
    ax_strbuf_t ids = {0}, topics = {0}, reasons = {0};
    char *pend = ax__int_array(pending, npending);
    int rc = pend ? 0 : AX_ERR_NOMEM;
    rc |= ax_pgarr_begin(&ids) | ax_pgarr_begin(&topics) | ax_pgarr_begin(&reasons);
    for (size_t i = 0; i < n && rc == 0; i++) {
        rc |= ax_pgarr_int(&ids, holds[i].instance_id);
        rc |= ax_pgarr_text(&topics, holds[i].topic ? holds[i].topic : "");
        rc |= ax_pgarr_text(&reasons, holds[i].reason);
    }
    rc |= ax_pgarr_end(&ids) | ax_pgarr_end(&topics) | ax_pgarr_end(&reasons);
    if (rc) {
        rc = nomem(&st_record, errbuf, errlen);
    } else {
        const char *p[] = {pend, ids.s, topics.s, reasons.s, deployment};
        rc = ax_stmt_run(pg, &st_record, 5, p, NULL, NULL, NULL, errbuf, errlen);
    }
    free(pend);
    ax_strbuf_free(&ids);
    ax_strbuf_free(&topics);
    ax_strbuf_free(&reasons);
    return rc;
}

void ax_store_strs_free(ax_store_strs_t *s) {
    for (size_t i = 0; s && i < s->n; i++)
        free(s->v[i]);
    if (s) {
        free(s->v);
        memset(s, 0, sizeof *s);
    }
}

/* Column 0 of every row of r as strings into *ret; r is cleared. */
static int strs_of(PGresult *r, const ax_stmt_t *st, ax_store_strs_t *ret, char *errbuf,
                   size_t errlen) {
    int rows = PQntuples(r);
    ax_store_strs_t s = {calloc((size_t)rows + 1, sizeof(char *)), 0};
    for (int i = 0; s.v && i < rows; i++, s.n++)
        if (!(s.v[i] = strdup(PQgetvalue(r, i, 0))))
            break;
    PQclear(r);
    if (!s.v || s.n < (size_t)rows) {
        ax_store_strs_free(&s);
        return nomem(st, errbuf, errlen);
    }
    *ret = s;
    return 0;
}

int ax_store_hold_topics(ax_pg_t *pg, const char *deployment, ax_store_strs_t *ret,
                         char *errbuf, size_t errlen) {
    const char *p[] = {deployment};
    PGresult *r;
    int rc = ax_stmt_run(pg, &st_topics, 1, p, NULL, NULL, &r, errbuf, errlen);
    return rc < 0 ? rc : strs_of(r, &st_topics, ret, errbuf, errlen);
}

int ax_store_hold_release(ax_pg_t *pg, const char *deployment, const char *const *topics,
                          size_t n, ax_store_strs_t *ret, char *errbuf, size_t errlen) {
    ax_strbuf_t a = {0};
    int arc = ax_pgarr_begin(&a);
    for (size_t i = 0; arc == 0 && i < n; i++)
        arc = ax_pgarr_text(&a, topics[i]);
    if (arc < 0 || ax_pgarr_end(&a) < 0) {
        ax_strbuf_free(&a);
        return nomem(&st_release, errbuf, errlen);
    }
    const char *p[] = {deployment, a.s};
    PGresult *r;
    int rc = ax_stmt_run(pg, &st_release, 2, p, NULL, NULL, &r, errbuf, errlen);
    ax_strbuf_free(&a);
    return rc < 0 ? rc : strs_of(r, &st_release, ret, errbuf, errlen);
}

int ax_store_hold_clean(ax_pg_t *pg, const char *deployment, int64_t **ret_ids, size_t *ret_n,
                        char *errbuf, size_t errlen) {
    const char *p[] = {deployment};
    PGresult *r;
    int rc = ax_stmt_run(pg, &st_clean, 1, p, NULL, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    int rows = PQntuples(r);
    int64_t *v = malloc(((size_t)rows + 1) * sizeof *v);
    for (int i = 0; v && i < rows; i++)
        v[i] = ax_pg_int(r, i, 0);
    PQclear(r);
    if (!v)
        return nomem(&st_clean, errbuf, errlen);
    *ret_ids = v;
    *ret_n = (size_t)rows;
    return 0;
}
