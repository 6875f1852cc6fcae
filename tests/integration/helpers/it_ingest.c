/*
 * it_ingest — integration-test helper: run the trigger's ingest statement
 * (ax_store_ingest; as a standby, nothing marked dispatched, unless
 * IT_LEASE names a lease) on batches read from stdin, one submission a
 * line "JOB KEY [LOG_END]" (JOB '-': an inline command, echo), a blank
 * line ending a batch; a line "@taken_ms_ago MS" sets, for the batches
 * after it, how long ago they were taken from the consumer
 * (ax_ingest_ctx_t.taken_ms_ago; default 0). Prints per batch a line
 * "batch N: K" then the submit key of each instance made, sorted.
 * Usage: it_ingest CONFIG_FILE DEPLOYMENT. Exit 0, or 1 when a statement
 * failed (its error on stderr). Environment:
 *   IT_LEASE="ROLE HOLDER EPOCH": ingest as that leader (see run());
 *   IT_HOLD_MS=N: run each batch inside BEGIN, and COMMIT N ms after the
 *     statement returned (the locks it took held meanwhile);
 *   IT_APPNAME: the session's application_name (default it_ingest).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ax/conf.h"
#include "ax/pg.h"
#include "ax/store_dispatch.h"

extern char **environ;

#define MAXB 256

static int cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* IT_LEASE="ROLE HOLDER EPOCH": ingest as that leader (every lane
 * dispatched by the statement) and print "lease: fenced=F dispatched=D"
 * after each batch's line. */
static char lease_role[128], lease_holder[128];
static long long lease_epoch;
static long hold_ms;
static long long taken_ms_ago;

static int run(ax_pg_t *pg, const char *dep, ax_ingest_in_t *in, size_t n, int batch) {
    char err[1024];
    static const int direct[AX_PRIORITIES] = {1, 1, 1, 1, 1};
    ax_ingest_ctx_t c = {.deployment = dep, .default_timeout_ms = 60000,
                         .taken_ms_ago = taken_ms_ago};
    if (lease_epoch > 0) {
        c.epoch = lease_epoch;
        c.role = lease_role;
        c.holder = lease_holder;
        c.direct = direct;
    }
    ax_ingest_out_t out = {0};
    if (hold_ms > 0 && ax_pg_begin(pg, err, sizeof err) < 0) {
        fprintf(stderr, "it_ingest: batch %d: BEGIN: %s\n", batch, err);
        return 1;
    }
    if (ax_store_ingest(pg, &c, in, n, &out, err, sizeof err) < 0) {
        fprintf(stderr, "it_ingest: batch %d: %s\n", batch, err);
        return 1;
    }
    if (hold_ms > 0) {
        struct timespec ts = {hold_ms / 1000, (hold_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        if (ax_pg_commit(pg, err, sizeof err) < 0) {
            fprintf(stderr, "it_ingest: batch %d: COMMIT: %s\n", batch, err);
            ax_ingest_out_free(&out);
            return 1;
        }
    }
    size_t disp = 0;
    for (size_t k = 0; k < out.rows.n; k++)
        disp += !out.rows.v[k].hold;
    if (out.rows.n)
        qsort(out.submit_key, out.rows.n, sizeof *out.submit_key, cmp);
    printf("batch %d: %zu\n", batch, out.rows.n);
    if (lease_epoch > 0)
        printf("lease: fenced=%d dispatched=%zu\n", out.fenced, disp);
    for (size_t k = 0; k < out.rows.n; k++)
        printf("%s\n", out.submit_key[k]);
    ax_ingest_out_free(&out);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: it_ingest CONFIG_FILE DEPLOYMENT\n");
        return 2;
    }
    char err[1024];
    static ax_conf_t conf;
    ax_conf_init(&conf);
    if (ax_conf_load_file(&conf, argv[1], 1, err, sizeof err) < 0 ||
        ax_conf_load_env(&conf, environ, err, sizeof err) < 0) {
        fprintf(stderr, "it_ingest: %s\n", err);
        return 2;
    }
    const char *lease = getenv("IT_LEASE");
    if (lease && sscanf(lease, "%127s %127s %lld", lease_role, lease_holder, &lease_epoch) != 3) {
        fprintf(stderr, "it_ingest: IT_LEASE is not 'ROLE HOLDER EPOCH'\n");
        return 2;
    }
    const char *hold = getenv("IT_HOLD_MS");
    hold_ms = hold ? atol(hold) : 0;
    const char *app = getenv("IT_APPNAME");
    ax_pg_t *pg = ax_pg_new(&conf, app && *app ? app : "it_ingest", err, sizeof err);
    if (!pg || ax_pg_ensure(pg, err, sizeof err) < 0) {
        fprintf(stderr, "it_ingest: %s\n", err);
        return 2;
    }
    static ax_ingest_in_t in[MAXB];
    static char job[MAXB][128], key[MAXB][256];
    char line[512];
    size_t n = 0;
    int batch = 0, rc = 0;
    for (;;) {
        char *l = fgets(line, sizeof line, stdin);
        if (l)
            line[strcspn(line, "\r\n")] = 0;
        if (!l || !line[0]) {
            if (n)
                rc |= run(pg, argv[2], in, n, ++batch);
            n = 0;
            if (!l)
                break;
            continue;
        }
        if (strncmp(line, "@taken_ms_ago ", 14) == 0) {
            taken_ms_ago = atoll(line + 14);
            continue;
        }
        long long le = 0;
        if (n == MAXB || sscanf(line, "%127s %255s %lld", job[n], key[n], &le) < 2) {
            fprintf(stderr, "it_ingest: bad line '%s'\n", line);
            return 2;
        }
        int inl = strcmp(job[n], "-") == 0;
        in[n] = (ax_ingest_in_t){
            .job = inl ? NULL : job[n],
            .argv_json = inl ? "[\"echo\",\"x\"]" : NULL,
            .priority = -1,
            .delay_ms = -1,
            .trace_id = "0123456789abcdef",
            .idempotency_key = key[n],
            .submit_key = key[n],
            .log_end = le,
        };
        n++;
    }
    ax_pg_destroy(pg);
    return rc;
}
