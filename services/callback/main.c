/*
 * ax-callback — closes the loop. Persists each attempt's result as
 * FINISHED + outcome with a CAS fenced by (instance, attempt): a result for
 * an attempt that is not the current one, or for an instance already
 * finished, is stale and only counted. Then publishes one final-outcome
 * event per instance on the results topic, marking it published only after
 * Kafka acknowledged it, and commits its offsets last.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ax/codec.h"
#include "ax/common.h"
#include "ax/log.h"
#include "ax/service.h"

static const char usage[] =
    "Usage: ax-callback [--config FILE] [--set KEY=VALUE]...\n\n"
    "Persists attempt results and publishes final outcomes.\n\n";

typedef struct callback {
    ax_svc_t svc;
    int64_t finished, stale, published;
} callback_t;

static const char sql_finish[] =
    "WITH fin AS ("
    "  UPDATE job_instance SET state = 'FINISHED', outcome = $3::ax_outcome,"
    "    finished_at = clock_timestamp(), exit_code = $4::int, error_class = $5, error = $6,"
    "    output = $7, lease_expires_at = NULL"
    "  WHERE id = $1::bigint AND attempt = $2::int AND state IN ('LOCKED', 'RUNNING')"
    "  RETURNING id, attempt, outcome, exit_code, error_class, error, finished_at)"
    " INSERT INTO job_attempt (instance_id, attempt, worker, outcome, exit_code, error_class,"
    "   error, started_at, finished_at)"
    " SELECT id, attempt, $8, outcome, exit_code, error_class, error,"
    "   to_timestamp($9::bigint / 1000.0), finished_at FROM fin"
    " ON CONFLICT DO NOTHING RETURNING instance_id";

static int finish_one(ax_svc_t *svc, const ax_attempt_t *a, char *err, size_t errlen) {
    char id[32], att[16], code[16], started[32];
    snprintf(id, sizeof id, "%lld", (long long)a->instance_id);
    snprintf(att, sizeof att, "%d", (int)a->attempt);
    snprintf(code, sizeof code, "%d", (int)a->exit_code);
    snprintf(started, sizeof started, "%lld", (long long)a->started_at_ms);
    const char *p[] = {id, att, ax_outcome_name(a->outcome), a->exit_code_set ? code : NULL,
                       a->error_class, a->error, a->output, a->worker,
                       a->started_at_ms > 0 ? started : NULL};
    PGresult *r;
    int rc = ax_pg_exec(svc->pg, sql_finish, 9, p, NULL, NULL, &r, err, errlen);
    if (rc < 0)
        return rc;
    int n = PQntuples(r);
    PQclear(r);
    return n;
}

static const char sql_unpublished[] =
    "SELECT id, job_name, outcome, attempt, exit_code, error_class, error, coalesce(output, ''),"
    "  trace_id, idempotency_key,"
    "  (extract(epoch FROM nominal_time) * 1000)::bigint,"
    "  (extract(epoch FROM scheduled_at) * 1000)::bigint,"
    "  (extract(epoch FROM locked_at) * 1000)::bigint,"
    "  (extract(epoch FROM running_at) * 1000)::bigint,"
    "  (extract(epoch FROM finished_at) * 1000)::bigint"
    " FROM job_instance WHERE id = ANY($1::bigint[]) AND state = 'FINISHED'"
    "  AND result_published_at IS NULL";

/* Publish the final outcome of every finished, unpublished instance among
 * `ids`; mark them published once Kafka has them. */
static int publish(callback_t *cb, const char *ids) {
    ax_svc_t *svc = &cb->svc;
    char err[1024];
    const char *p[] = {ids};
    PGresult *r;
    int rc = ax_pg_exec(svc->pg, sql_unpublished, 1, p, NULL, NULL, &r, err, sizeof err);
    if (rc < 0) {
        ax_warn("results: %s", err);
        return rc;
    }
    int rows = PQntuples(r);
    ax_delivery_t dlv = {0};
    for (int i = 0; i < rows; i++) {
        ax_result_t res = {
            .instance_id = ax_pg_int(r, i, 0),
            .job = PQgetisnull(r, i, 1) ? NULL : PQgetvalue(r, i, 1),
            .attempts = (int32_t)ax_pg_int(r, i, 3),
            .exit_code = (int32_t)ax_pg_int(r, i, 4),
            .exit_code_set = !PQgetisnull(r, i, 4),
            .error_class = PQgetisnull(r, i, 5) ? NULL : PQgetvalue(r, i, 5),
            .error = PQgetisnull(r, i, 6) ? NULL : PQgetvalue(r, i, 6),
            .output = PQgetvalue(r, i, 7),
            .trace_id = PQgetvalue(r, i, 8),
            .idempotency_key = PQgetvalue(r, i, 9),
            .nominal_time_ms = ax_pg_int(r, i, 10),
            .scheduled_at_ms = ax_pg_int(r, i, 11),
            .locked_at_ms = ax_pg_int(r, i, 12),
            .running_at_ms = ax_pg_int(r, i, 13),
            .finished_at_ms = ax_pg_int(r, i, 14),
        };
        ax_outcome_parse(PQgetvalue(r, i, 2), &res.outcome);
        void *buf;
        size_t len;
        char key[32];
        int klen = snprintf(key, sizeof key, "%lld", (long long)res.instance_id);
        if (ax_result_encode(&res, &buf, &len) < 0) {
            ax_error("instance %lld: cannot encode result", (long long)res.instance_id);
            continue;
        }
        rc = ax_kafka_produce(svc->producer, svc->topic_results, key, (size_t)klen, buf, len, NULL,
                              &dlv, err, sizeof err);
        free(buf);
        if (rc < 0)
            ax_warn("%s", err);
    }
    PQclear(r);
    if (rows == 0)
        return 0;
    if (ax_kafka_wait(svc->producer, &dlv, 35000) < 0) {
        ax_warn("results: %d not acknowledged by Kafka (%s)", dlv.failed + dlv.pending,
                rd_kafka_err2str(dlv.err));
        return AX_ERR_IO;
    }
    rc = ax_pg_exec(svc->pg,
                    "UPDATE job_instance SET result_published_at = now()"
                    " WHERE id = ANY($1::bigint[]) AND state = 'FINISHED'"
                    " AND result_published_at IS NULL",
                    1, p, NULL, NULL, NULL, err, sizeof err);
    if (rc < 0) {
        ax_warn("mark published: %s", err);
        return rc;
    }
    cb->published += rows;
    return 0;
}

static int on_attempt_batch(ax_svc_t *svc, rd_kafka_message_t **msgs, size_t n, void *arg) {
    callback_t *cb = arg;
    char err[1024], reason[512];
    char *poison = calloc(n, 1);
    ax_strbuf_t ids = {0};
    int rc;
    if (!poison)
        return AX_ERR_NOMEM;
again:
    ax_pgarr_begin(&ids);
    if ((rc = ax_pg_begin(svc->pg, err, sizeof err)) < 0)
        goto out;
    int64_t done = 0, stale = 0;
    for (size_t i = 0; i < n; i++) {
        if (poison[i])
            continue;
        ax_attempt_t a;
        if (ax_svc_precheck(svc, msgs[i], AX_SCHEMA_ATTEMPT, reason, sizeof reason) < 0 ||
            ax_attempt_decode(msgs[i]->payload, msgs[i]->len, &a, reason, sizeof reason) < 0) {
            poison[i] = 1;
            if (ax_svc_reject(svc, msgs[i], reason) < 0) {
                ax_pg_rollback(svc->pg);
                rc = AX_ERR_IO;
                goto out;
            }
            continue;
        }
        if (a.output)
            ax_utf8_sanitize(a.output, strlen(a.output));
        rc = finish_one(svc, &a, err, sizeof err);
        int64_t id = a.instance_id;
        int32_t attempt = a.attempt;
        ax_attempt_clear(&a);
        if (rc == AX_ERR_INVALID || rc == AX_ERR_CONFLICT) {
            ax_pg_rollback(svc->pg);
            poison[i] = 1;
            snprintf(reason, sizeof reason, "cannot persist result: %.400s", err);
            if (ax_svc_reject(svc, msgs[i], reason) < 0) {
                rc = AX_ERR_IO;
                goto out;
            }
            goto again;
        }
        if (rc < 0) {
            ax_pg_rollback(svc->pg);
            ax_warn("persist results: %s", err);
            goto out;
        }
        if (rc == 1)
            done++;
        else {
            stale++;
            ax_info("instance %lld attempt %d: stale or duplicate result ignored", (long long)id,
                    (int)attempt);
        }
        /* Also re-publish on a redelivered result: the previous run may have
         * persisted FINISHED and died before publishing. */
        ax_pgarr_int(&ids, id);
    }
    if ((rc = ax_pg_commit(svc->pg, err, sizeof err)) < 0) {
        ax_warn("persist results commit: %s", err);
        goto out;
    }
    cb->finished += done;
    cb->stale += stale;
    if (stale)
        ax_pg_count(svc->pg, "callback.stale_results", stale);
    ax_pgarr_end(&ids);
    rc = publish(cb, ids.s);
out:
    ax_strbuf_free(&ids);
    free(poison);
    return rc;
}

int main(int argc, char **argv) {
    static callback_t cb;
    if (ax_svc_init(&cb.svc, "ax-callback", &argc, argv, usage, "callback") < 0)
        return 1;
    ax_svc_t *svc = &cb.svc;
    char group[300];
    if (ax_svc_consume(svc, svc->topic_callback,
                       ax_conf_topic(&svc->conf, "callback", group, sizeof group),
                       (size_t)svc->conf.callback_batch,
                       on_attempt_batch, &cb) < 0)
        return 1;
    ax_svc_run(svc);
    ax_info("stopped: %lld finished, %lld stale results ignored, %lld outcomes published",
            (long long)cb.finished, (long long)cb.stale, (long long)cb.published);
    ax_svc_destroy(svc);
    return 0;
}
