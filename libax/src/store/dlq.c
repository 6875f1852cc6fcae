/*
 * dlq.c — the statements of dead-letter replays (ax/store_dlq.h).
 */
#include <stdlib.h>
#include <string.h>

#include "ax/store_dlq.h"
#include "store_int.h"

enum { REPLAYED_INSTANCE, REPLAYED_TRACE, REPLAYED_STATE };
AX_STMT(st_replayed, "dlq.replayed",
        "SELECT s.instance_id, i.trace_id, i.state::text"
        " FROM submission s LEFT JOIN job_instance i ON i.id = s.instance_id"
        " WHERE s.submit_key = 'idem:' || $1");

enum { INST_JOB, INST_PAYLOAD, INST_TIMEOUT, INST_PRIORITY, INST_TRACE };
AX_STMT(st_instance, "dlq.instance",
        "SELECT job_name, encode(payload, 'hex'), timeout_ms, priority, trace_id"
        " FROM job_instance WHERE id = $1::bigint");

void ax_dlq_replayed_clear(ax_dlq_replayed_t *r) {
    if (!r)
        return;
    free(r->trace_id);
    free(r->state);
    memset(r, 0, sizeof *r);
}

int ax_store_dlq_replayed(ax_pg_t *pg, const char *idem, ax_dlq_replayed_t *ret, char *errbuf,
                          size_t errlen) {
    const char *p[] = {idem};
    PGresult *r;
    int rc = ax_stmt_run(pg, &st_replayed, 1, p, NULL, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    if (PQntuples(r) != 1) {
        PQclear(r);
        return ax_seterr(errbuf, errlen, AX_ERR_NOTFOUND, "no submission with idempotency key %s",
                         idem);
    }
    *ret = (ax_dlq_replayed_t){
        .instance_id = ax_pg_int(r, 0, REPLAYED_INSTANCE),
        .trace_id = ax_pg_strdup(r, 0, REPLAYED_TRACE),
        .state = ax_pg_strdup(r, 0, REPLAYED_STATE),
    };
    if ((!ret->trace_id && ax_pg_str(r, 0, REPLAYED_TRACE)) ||
        (!ret->state && ax_pg_str(r, 0, REPLAYED_STATE))) {
        ax_dlq_replayed_clear(ret);
        rc = ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "dlq.replayed: out of memory");
    }
    PQclear(r);
    return rc;
}

void ax_dlq_instance_clear(ax_dlq_instance_t *r) {
    if (!r)
        return;
    free(r->job);
    free(r->payload);
    free(r->trace_id);
    memset(r, 0, sizeof *r);
}

static int hex_nibble(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* encode(bytea, 'hex') back to bytes (malloc'd, one spare byte). */
static uint8_t *unhex(const char *hex, size_t *ret_len) {
    size_t n = hex ? strlen(hex) / 2 : 0;
    uint8_t *b = malloc(n + 1);
    for (size_t i = 0; b && i < n; i++)
        b[i] = (uint8_t)(hex_nibble(hex[2 * i]) << 4 | hex_nibble(hex[2 * i + 1]));
    *ret_len = n;
    return b;
}

int ax_store_dlq_instance(ax_pg_t *pg, int64_t id, ax_dlq_instance_t *ret, char *errbuf,
                          size_t errlen) {
    ax_num_t n_id;
    const char *p[] = {ax_num(&n_id, id)};
    PGresult *r;
    int rc = ax_stmt_run(pg, &st_instance, 1, p, NULL, NULL, &r, errbuf, errlen);
    if (rc < 0)
        return rc;
    if (PQntuples(r) != 1) {
        PQclear(r);
        return ax_seterr(errbuf, errlen, AX_ERR_NOTFOUND, "instance %lld no longer exists",
                         (long long)id);
    }
    *ret = (ax_dlq_instance_t){
        .job = ax_pg_strdup(r, 0, INST_JOB),
        .timeout_ms = ax_pg_int(r, 0, INST_TIMEOUT),
        .priority = (int32_t)ax_pg_int(r, 0, INST_PRIORITY),
        .trace_id = ax_pg_strdup(r, 0, INST_TRACE),
    };
    ret->payload = unhex(ax_pg_str(r, 0, INST_PAYLOAD), &ret->payload_len);
    if (!ret->payload || (!ret->job && ax_pg_str(r, 0, INST_JOB)) ||
        (!ret->trace_id && ax_pg_str(r, 0, INST_TRACE))) {
        ax_dlq_instance_clear(ret);
        rc = ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "dlq.instance: out of memory");
    }
    PQclear(r);
    return rc;
}
