/*
 * instance_admin.c — instances as operators look at them
 * (ax/store_instance_admin.h).
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "ax/store_instance_admin.h"
#include "store_int.h"

/* A timestamptz as PostgreSQL's JSON text of it. */
#define JT(c) "to_json(" c ")#>>'{}'"

enum {
    V_ID, V_JOB, V_ATTEMPT, V_STATE, V_OUTCOME, V_EXIT, V_ERROR_CLASS, V_ERROR, V_OUTPUT,
    V_TRACE, V_KEY, V_WORKER, V_DUE, V_SCHEDULED, V_DISPATCHED, V_LOCKED, V_RUNNING,
    V_FINISHED, V_PUBLISHED, V_HELD
};

#define VIEW_SQL                                                                                 \
    "SELECT i.id, i.job_name, i.attempt, i.state, i.outcome, i.exit_code, i.error_class,"      \
    " i.error, i.output, i.trace_id, i.idempotency_key, i.worker, " JT("i.due_at") ","          \
    " " JT("i.scheduled_at") ", " JT("i.dispatched_at") ", " JT("i.locked_at") ","              \
    " " JT("i.running_at") ", " JT("i.finished_at") ", " JT("i.result_published_at") ","        \
    " (SELECT h.reason FROM instance_hold h WHERE h.instance_id = i.id)"                         \
    " FROM job_instance i"

AX_STMT(st_show, "instance_admin.show", VIEW_SQL " WHERE i.id = $1::bigint");
AX_STMT(st_list, "instance_admin.list",
        VIEW_SQL " WHERE ($2::text IS NULL OR i.id IN (SELECT instance_id FROM instance_trace"
                 "  WHERE trace_id = $2)) AND ($3::text IS NULL OR i.job_name = $3)"
                 " AND ($4::text IS NULL OR i.state::text = $4)"
                 " ORDER BY i.id DESC LIMIT $1::int");
AX_STMT(st_final, "instance_admin.final",
        VIEW_SQL " WHERE i.id IN (SELECT instance_id FROM instance_trace WHERE trace_id = $1)"
                 " AND i.trace_id = $1 AND i.state = 'FINISHED'"
                 " AND i.result_published_at IS NOT NULL ORDER BY i.id DESC LIMIT 1");
AX_STMT(st_shards, "instance_admin.open_shards",
        "SELECT id FROM job_instance WHERE parent_id = $1::bigint AND state <> 'FINISHED'"
        " ORDER BY id");

/* The view's strings: where each is read from. */
static const struct {
    int col;
    size_t off;
} view_strs[] = {
    {V_JOB, offsetof(ax_instance_view_t, job)},
    {V_STATE, offsetof(ax_instance_view_t, state)},
    {V_OUTCOME, offsetof(ax_instance_view_t, outcome)},
    {V_ERROR_CLASS, offsetof(ax_instance_view_t, error_class)},
    {V_ERROR, offsetof(ax_instance_view_t, error)},
    {V_OUTPUT, offsetof(ax_instance_view_t, output)},
    {V_TRACE, offsetof(ax_instance_view_t, trace_id)},
    {V_KEY, offsetof(ax_instance_view_t, idempotency_key)},
    {V_WORKER, offsetof(ax_instance_view_t, worker)},
    {V_DUE, offsetof(ax_instance_view_t, due_at)},
    {V_SCHEDULED, offsetof(ax_instance_view_t, scheduled_at)},
    {V_DISPATCHED, offsetof(ax_instance_view_t, dispatched_at)},
    {V_LOCKED, offsetof(ax_instance_view_t, locked_at)},
    {V_RUNNING, offsetof(ax_instance_view_t, running_at)},
    {V_FINISHED, offsetof(ax_instance_view_t, finished_at)},
    {V_PUBLISHED, offsetof(ax_instance_view_t, result_published_at)},
    {V_HELD, offsetof(ax_instance_view_t, held_reason)},
};

static char **view_str(ax_instance_view_t *v, size_t k) {
    return (char **)((char *)v + view_strs[k].off);
}

void ax_instance_view_clear(ax_instance_view_t *v) {
    if (!v)
        return;
    for (size_t k = 0; k < AX_ARRAY_SIZE(view_strs); k++)
        free(*view_str(v, k));
    memset(v, 0, sizeof *v);
}

void ax_instance_views_free(ax_instance_view_t *rows, size_t n) {
    for (size_t i = 0; rows && i < n; i++)
        ax_instance_view_clear(&rows[i]);
    free(rows);
}

static int view_read(const PGresult *r, int i, ax_instance_view_t *v) {
    memset(v, 0, sizeof *v);
    v->id = ax_pg_int(r, i, V_ID);
    v->attempt = ax_pg_int(r, i, V_ATTEMPT);
    v->has_exit_code = !PQgetisnull(r, i, V_EXIT);
    v->exit_code = ax_pg_int(r, i, V_EXIT);
    for (size_t k = 0; k < AX_ARRAY_SIZE(view_strs); k++) {
        char **dst = view_str(v, k);
        *dst = ax_pg_strdup(r, i, view_strs[k].col);
        if (!*dst && !PQgetisnull(r, i, view_strs[k].col)) {
            ax_instance_view_clear(v);
            return AX_ERR_NOMEM;
        }
    }
    return 0;
}

static int views_read(PGresult *r, ax_stmt_t *st, ax_instance_view_t **ret_rows,
                      size_t *ret_n, char *errbuf, size_t errlen) {
    size_t n = (size_t)PQntuples(r);
    ax_instance_view_t *rows = n ? calloc(n, sizeof *rows) : NULL;
    for (size_t i = 0; i < n && rows; i++)
        if (view_read(r, (int)i, &rows[i]) < 0) {
            ax_instance_views_free(rows, n);
            rows = NULL;
        }
    PQclear(r);
    if (n && !rows)
        return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "%s: out of memory", st->name);
    *ret_rows = rows;
    *ret_n = n;
    return 0;
}

/* One view by statement st; AX_ERR_NOTFOUND (saying `what`) if none. */
static int view_one(ax_pg_t *pg, ax_stmt_t *st, const char *key, const char *what,
                    ax_instance_view_t *ret, char *errbuf, size_t errlen) {
    PGresult *r;
    const char *p[] = {key};
    ax_instance_view_t *rows;
    size_t n;
    memset(ret, 0, sizeof *ret);
    int rc = ax_stmt_run(pg, st, 1, p, NULL, NULL, &r, errbuf, errlen);
    if (rc == 0)
        rc = views_read(r, st, &rows, &n, errbuf, errlen);
    if (rc < 0)
        return rc;
    if (n == 0)
        return ax_seterr(errbuf, errlen, AX_ERR_NOTFOUND, "%s %s", what, key);
    *ret = rows[0];
    free(rows);
    return 0;
}

int ax_store_instance_admin_show(ax_pg_t *pg, int64_t id, ax_instance_view_t *ret,
                                 char *errbuf, size_t errlen) {
    ax_num_t n;
    return view_one(pg, &st_show, ax_num(&n, id), "no instance", ret, errbuf, errlen);
}

int ax_store_instance_admin_final(ax_pg_t *pg, const char *trace, ax_instance_view_t *ret,
                                  char *errbuf, size_t errlen) {
    return view_one(pg, &st_final, trace, "no final outcome yet for trace", ret, errbuf,
                    errlen);
}

int ax_store_instance_admin_list(ax_pg_t *pg, const ax_instance_filter_t *f,
                                 ax_instance_view_t **ret_rows, size_t *ret_n, char *errbuf,
                                 size_t errlen) {
    ax_num_t l;
    const char *p[] = {ax_num(&l, f->limit), f->trace_id, f->job, f->state};
    PGresult *r;
    *ret_rows = NULL;
    *ret_n = 0;
    int rc = ax_stmt_run(pg, &st_list, 4, p, NULL, NULL, &r, errbuf, errlen);
    return rc < 0 ? rc : views_read(r, &st_list, ret_rows, ret_n, errbuf, errlen);
}

int ax_store_instance_admin_open_shards(ax_pg_t *pg, int64_t parent_id, int64_t **ret_ids,
                                        size_t *ret_n, char *errbuf, size_t errlen) {
    ax_num_t n;
    const char *p[] = {ax_num(&n, parent_id)};
    PGresult *r;
    *ret_ids = NULL;
    *ret_n = 0;
    int rc = ax_stmt_run(pg, &st_shards, 1, p, NULL, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    size_t k = (size_t)PQntuples(r);
    int64_t *ids = k ? malloc(k * sizeof *ids) : NULL;
    if (k && !ids) {
        PQclear(r);
        return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "%s: out of memory", st_shards.name);
    }
    for (size_t i = 0; i < k; i++)
        ids[i] = ax_pg_int(r, (int)i, 0);
    PQclear(r);
    *ret_ids = ids;
    *ret_n = k;
    return 0;
}
