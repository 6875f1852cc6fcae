/*
 * pg.c — PostgreSQL adapter. Connection parameters come only from the pg.*
 * configuration keys, handed to libpq as keyword/value arrays (never a
 * conninfo string built by hand), and statements only take parameters.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ax/common.h"
#include "ax/log.h"
#include "adapters/pg_raw.h"

#define TCP_KEYS 6 /* the defaults of ax_pg_tcp_defaults, as libpq keywords */

struct ax_pg {
    PGconn *conn;
    const char **keys;
    const char **values;
    int64_t backoff_initial_ms, backoff_max_ms;
    int64_t replan_ms; /* db.replan.interval.ms */
    int reconnected;
    int was_down;
    char *options; /* "-c ax.deployment=<topic.prefix>" (+ pg.options) */
    char tcp[TCP_KEYS][24]; /* the TCP defaults' values */
    /* prep[id]: when statement id was prepared on this connection
     * (ax_mono_ms, at least 1), 0 = not prepared */
    int64_t *prep;
    size_t nprep;
    /* plan_cache_mode as ax_pg_plan() last set it: plan_generic the
     * session's (set only outside a transaction block, so a commit or a
     * rollback never undoes it; 0 = the connection option's
     * force_custom_plan), plan_local the open transaction's SET LOCAL (-1:
     * none; every BEGIN, COMMIT and ROLLBACK drops it, as PostgreSQL does);
     * plan_fixed: pg.options names plan_cache_mode, which then wins. */
    signed char plan_generic, plan_local;
    unsigned char plan_fixed;
    /* the connection's cancel request (ax_pg_cancel, from any thread):
     * made by the thread that connects, under cancel_mu */
    pthread_mutex_t cancel_mu;
    PGcancel *cancel;
};

/* conn closed: its cancel request goes with it. */
static void conn_close(ax_pg_t *pg) {
    pthread_mutex_lock(&pg->cancel_mu);
    if (pg->cancel)
        PQfreeCancel(pg->cancel);
    pg->cancel = NULL;
    pthread_mutex_unlock(&pg->cancel_mu);
    PQfinish(pg->conn);
    pg->conn = NULL;
}

static int pg_keyword_known(const char *kw) {
    PQconninfoOption *opts = PQconndefaults();
    int found = 0;
    for (PQconninfoOption *o = opts; o && o->keyword; o++)
        if (strcmp(o->keyword, kw) == 0)
            found = 1;
    PQconninfoFree(opts);
    return found;
}

/* The TCP keywords whose values are counts (seconds, milliseconds): also
 * passed to the server's side of the session (ax_pg_tcp_effective). */
static const char *const tcp_int_kw[] = {"keepalives", "keepalives_idle", "keepalives_interval",
                                         "keepalives_count", "tcp_user_timeout",
                                         "connect_timeout"};

/* A count: digits only, at most 9 of them. */
static int is_count(const char *v) {
    size_t n = strspn(v, "0123456789");
    return n > 0 && n <= 9 && v[n] == '\0';
}

/* libpq checks pg.sslmode and the TCP counts only when it connects, and a
 * service would then retry a typo forever as "unreachable" (and a count
 * goes into the session's options too): check them with the keywords. */
static int pg_value_ok(const char *kw, const char *value, char *errbuf, size_t errlen) {
    static const char *const modes[] = {"disable",   "allow",       "prefer",
                                        "require",   "verify-ca",   "verify-full"};
    for (size_t i = 0; i < sizeof tcp_int_kw / sizeof *tcp_int_kw; i++)
        if (strcmp(kw, tcp_int_kw[i]) == 0 && !is_count(value))
            return ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                             "pg.%s: '%s' is not a whole number of at most 9 digits", kw, value);
    if (strcmp(kw, "sslmode") != 0)
        return 0;
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++)
        if (strcmp(value, modes[i]) == 0)
            return 0;
    return ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                     "pg.sslmode: '%s' is not one of disable, allow, prefer, require, "
                     "verify-ca, verify-full",
                     value);
}

void ax_pg_tcp_defaults(const ax_conf_t *conf, ax_pg_tcp_t *out) {
    int64_t lease = conf->executor_lease_min_ms;
    if (conf->trigger_lease_ms > 0 && (lease <= 0 || conf->trigger_lease_ms < lease))
        lease = conf->trigger_lease_ms;
    int64_t t = lease / 2;
    t = t < 1000 ? 1000 : t > 30000 ? 30000 : t;
    out->user_timeout_ms = t;
    out->keepalives_idle_s = t / 2000 > 1 ? (int)(t / 2000) : 1;
    out->keepalives_interval_s = t / 4000 > 1 ? (int)(t / 4000) : 1;
    out->keepalives_count = 3;
    out->connect_timeout_s = 2 * t / 1000 > 2 ? (int)(2 * t / 1000) : 2;
}

static const char *conf_pg(const ax_conf_t *conf, const char *kw) {
    for (size_t i = 0; i < conf->n_pg; i++)
        if (strcmp(conf->pg[i].key, kw) == 0)
            return conf->pg[i].value;
    return NULL;
}

int ax_pg_tcp_effective(const ax_conf_t *conf, ax_pg_tcp_t *out) {
    ax_pg_tcp_defaults(conf, out);
    const char *x;
    int keep = !(x = conf_pg(conf, "keepalives")) || atoi(x) != 0;
    if ((x = conf_pg(conf, "tcp_user_timeout")))
        out->user_timeout_ms = atoll(x);
    if ((x = conf_pg(conf, "keepalives_idle")))
        out->keepalives_idle_s = atoi(x);
    if ((x = conf_pg(conf, "keepalives_interval")))
        out->keepalives_interval_s = atoi(x);
    if ((x = conf_pg(conf, "keepalives_count")))
        out->keepalives_count = atoi(x);
    if ((x = conf_pg(conf, "connect_timeout")))
        out->connect_timeout_s = atoi(x);
    return keep;
}

/* The TCP settings pg.* does not set (d: ax_pg_tcp_effective's), appended
 * at keys[*k]. */
static void tcp_defaults(ax_pg_t *pg, const ax_conf_t *conf, const ax_pg_tcp_t *d, int keep,
                         size_t *k) {
    const struct {
        const char *kw;
        long long v;
        int on;
    } def[TCP_KEYS] = {
        {"tcp_user_timeout", (long long)d->user_timeout_ms, 1},
        {"keepalives", 1, keep},
        {"keepalives_idle", d->keepalives_idle_s, keep},
        {"keepalives_interval", d->keepalives_interval_s, keep},
        {"keepalives_count", d->keepalives_count, keep},
        {"connect_timeout", d->connect_timeout_s, 1},
    };
    for (size_t i = 0; i < TCP_KEYS; i++) {
        if (!def[i].on || conf_pg(conf, def[i].kw) || !pg_keyword_known(def[i].kw))
            continue;
        snprintf(pg->tcp[i], sizeof pg->tcp[i], "%lld", def[i].v);
        pg->keys[*k] = def[i].kw;
        pg->values[(*k)++] = pg->tcp[i];
    }
}

ax_pg_t *ax_pg_new(const ax_conf_t *conf, const char *application_name, char *errbuf,
                   size_t errlen) {
    for (size_t i = 0; i < conf->n_pg; i++) {
        if (!pg_keyword_known(conf->pg[i].key)) {
            ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                      "pg.%s: not a libpq connection keyword", conf->pg[i].key);
            return NULL;
        }
        if (pg_value_ok(conf->pg[i].key, conf->pg[i].value, errbuf, errlen) < 0)
            return NULL;
    }
    ax_pg_t *pg = calloc(1, sizeof *pg);
    if (!pg)
        return NULL;
    pthread_mutex_init(&pg->cancel_mu, NULL);
    size_t n = conf->n_pg;
    pg->keys = calloc(n + 3 + TCP_KEYS, sizeof *pg->keys);
    pg->values = calloc(n + 3 + TCP_KEYS, sizeof *pg->values);
    if (!pg->keys || !pg->values) {
        ax_pg_destroy(pg);
        return NULL;
    }
    size_t k = 0;
    const char *user_options = NULL;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(conf->pg[i].key, "options") == 0) {
            user_options = conf->pg[i].value;
            continue;
        }
        pg->keys[k] = conf->pg[i].key;
        pg->values[k++] = conf->pg[i].value;
    }
    pg->keys[k] = "application_name";
    pg->values[k++] = application_name;
    ax_pg_tcp_t tcp;
    int keep = ax_pg_tcp_effective(conf, &tcp);
    tcp_defaults(pg, conf, &tcp, keep, &k);
    /* Every session says which deployment (topic.prefix) it belongs to, so
     * rows it creates default to it (job.deployment, job_instance). */
    const char *pfx = conf->topic_prefix ? conf->topic_prefix : "";
    int safe = *pfx && strspn(pfx, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                   "0123456789._-") == strlen(pfx);
    /* No statement may hold a service's loop: db.statement.timeout.ms
     * cancels it (57014, retried like a lost connection). */
    char stmt[64] = "";
    if (conf->pg_statement_timeout_ms > 0)
        snprintf(stmt, sizeof stmt, "-c statement_timeout=%lld",
                 (long long)conf->pg_statement_timeout_ms);
    /* The store prepares its statements once per connection (store/stmt.c);
     * each execution is still planned for its own parameters, as unnamed
     * statements were (a generic plan of a LIMITed keyset or an optional
     * filter can be far worse); only a statement declared AX_STMT_GENERIC
     * has its session switched to a cached generic plan (ax_pg_plan). A
     * plan_cache_mode in pg.options wins, for every statement. */
    pg->plan_fixed = user_options && strstr(user_options, "plan_cache_mode") != NULL;
    pg->plan_local = -1;
    /* The server's side of the session gets the same keepalives and user
     * timeout as the client's (ax_pg_tcp_effective): a backend whose client
     * vanished (its host cut off, packets dropped, so no FIN or RST
     * arrives) waits for it otherwise as long as the server's TCP defaults
     * say (two hours), and keeps what its open transaction holds — a
     * leader's share lock on its lease row made the standby's takeover wait
     * behind it (216_fence_trigger, 2026-12-02). Before pg.options, which
     * wins. */
    char srv[160] = "";
    if (keep)
        snprintf(srv, sizeof srv,
                 " -c tcp_keepalives_idle=%d -c tcp_keepalives_interval=%d"
                 " -c tcp_keepalives_count=%d -c tcp_user_timeout=%lld",
                 tcp.keepalives_idle_s, tcp.keepalives_interval_s, tcp.keepalives_count,
                 (long long)tcp.user_timeout_ms);
    /* A client that stops between two statements of its transaction (the
     * process stopped: SIGSTOP, a paused VM, swap) keeps a healthy TCP
     * connection, so keepalives never end it, and its transaction holds
     * its locks for as long as it is stopped: a leader stopped inside a
     * transaction kept the share lock of its lease re-read, and the
     * standby's takeover waited behind it (080_leader, 2026-12-02). The
     * server ends a session idle in a transaction after the lease-derived
     * timeout (ax_pg_tcp_defaults: half the shortest lease, 1-30 s). No
     * service waits for anything else inside a transaction but the
     * leader's dispatch producing into a full Kafka queue (a slow broker):
     * that batch then fails like after a lost connection and is retried.
     * Before pg.options, which wins. */
    char idle[64];
    ax_pg_tcp_t dflt;
    ax_pg_tcp_defaults(conf, &dflt);
    snprintf(idle, sizeof idle, " -c idle_in_transaction_session_timeout=%lld",
             (long long)dflt.user_timeout_ms);
    /* jit=off: ax's statements are short index work; with the planner's
     * cost above jit_above_cost (stale statistics on a large table) the
     * server compiled them to machine code first, 10-30 ms a time on this
     * machine, on the due scan's path (pg_stat_statements' jit_* columns:
     * the due scan's two statements JIT-compiled 135 times in a
     * session's benchmarks, 1.5 s; BENCHMARKS.md, "Issue #13: JIT"). Before
     * pg.options, which wins. */
    if (asprintf(&pg->options, "-c plan_cache_mode=force_custom_plan -c jit=off%s%s%s%s%s%s%s%s", srv,
                 idle, user_options ? " " : "", user_options ? user_options : "",
                 safe ? " -c ax.deployment=" : "", safe ? pfx : "", *stmt ? " " : "", stmt) < 0) {
        ax_pg_destroy(pg);
        return NULL;
    }
    pg->keys[k] = "options";
    pg->values[k++] = pg->options;
    pg->backoff_initial_ms = conf->backoff_initial_ms;
    pg->backoff_max_ms = conf->backoff_max_ms;
    pg->replan_ms = conf->pg_replan_interval_ms;
    return pg;
}

void ax_pg_destroy(ax_pg_t *pg) {
    if (!pg)
        return;
    if (pg->conn)
        conn_close(pg);
    pthread_mutex_destroy(&pg->cancel_mu);
    free(pg->keys);
    free(pg->values);
    free(pg->options);
    free(pg->prep);
    free(pg);
}

/* libpq's messages end with a newline; keep logs one line. */
static void chomp(char *s) {
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r'))
        s[--n] = '\0';
    for (char *p = s; *p; p++)
        if (*p == '\n')
            *p = ' ';
}

int ax_pg_ensure(ax_pg_t *pg, char *errbuf, size_t errlen) {
    if (pg->conn && PQstatus(pg->conn) == CONNECTION_OK)
        return 0;
    if (pg->conn)
        conn_close(pg);
    pg->conn = PQconnectdbParams(pg->keys, pg->values, 0);
    if (!pg->conn)
        return ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "PostgreSQL: out of memory");
    if (PQstatus(pg->conn) != CONNECTION_OK) {
        ax_seterr(errbuf, errlen, AX_ERR_IO, "PostgreSQL unreachable: %s",
                  PQerrorMessage(pg->conn));
        if (errbuf)
            chomp(errbuf);
        conn_close(pg);
        pg->was_down = 1;
        return AX_ERR_IO;
    }
    PGcancel *cancel = PQgetCancel(pg->conn);
    pthread_mutex_lock(&pg->cancel_mu);
    pg->cancel = cancel;
    pthread_mutex_unlock(&pg->cancel_mu);
    if (pg->was_down)
        ax_info("PostgreSQL connection re-established");
    pg->was_down = 0;
    pg->reconnected = 1;
    if (pg->prep)
        memset(pg->prep, 0, pg->nprep * sizeof *pg->prep); /* a new session has none */
    pg->plan_generic = 0; /* a new session has the connection's option */
    pg->plan_local = -1;
    return 0;
}

int ax_pg_cancel(ax_pg_t *pg) {
    char err[256];
    int sent = 0;
    pthread_mutex_lock(&pg->cancel_mu);
    if (pg->cancel)
        sent = PQcancel(pg->cancel, err, sizeof err);
    pthread_mutex_unlock(&pg->cancel_mu);
    return sent;
}

int ax_pg_reconnected(ax_pg_t *pg) {
    int r = pg->reconnected;
    pg->reconnected = 0;
    return r;
}

PGconn *ax_pg_conn(ax_pg_t *pg) { return pg->conn; }

int ax_pg_plan(ax_pg_t *pg, int generic, char *errbuf, size_t errlen) {
    if (pg->plan_fixed || !pg->conn)
        return 0;
    PGTransactionStatusType ts = PQtransactionStatus(pg->conn);
    if (ts == PQTRANS_INERROR) /* the statement fails anyway */
        return 0;
    int in_txn = ts == PQTRANS_INTRANS;
    int cur = in_txn && pg->plan_local >= 0 ? pg->plan_local : pg->plan_generic;
    if (cur == generic)
        return 0;
    static const char *const sql[2][2] = {
        {"SET plan_cache_mode = force_custom_plan", "SET plan_cache_mode = force_generic_plan"},
        {"SET LOCAL plan_cache_mode = force_custom_plan",
         "SET LOCAL plan_cache_mode = force_generic_plan"}};
    int rc = ax_pg_exec(pg, sql[in_txn][generic != 0], 0, NULL, NULL, NULL, NULL, errbuf, errlen);
    if (rc < 0)
        return rc;
    if (in_txn)
        pg->plan_local = (signed char)(generic != 0);
    else
        pg->plan_generic = (signed char)(generic != 0);
    return 0;
}

int64_t ax_pg_replan_ms(const ax_pg_t *pg) { return pg->replan_ms; }

int64_t *ax_pg_prep_slot(ax_pg_t *pg, int id) {
    if (id <= 0)
        return NULL;
    if ((size_t)id >= pg->nprep) {
        size_t n = pg->nprep ? pg->nprep : 64;
        while (n <= (size_t)id)
            n *= 2;
        int64_t *p = realloc(pg->prep, n * sizeof *p);
        if (!p)
            return NULL;
        memset(p + pg->nprep, 0, (n - pg->nprep) * sizeof *p);
        pg->prep = p;
        pg->nprep = n;
    }
    return &pg->prep[id];
}

int ax_pg_classify(const PGresult *r, PGconn *conn);

/* Class 08 (connection), 57P0x (shutdown), 57014 (cancelled: the
 * statement ran past db.statement.timeout.ms), 40001/40P01 (serialization,
 * deadlock), 53xxx (resources) are worth retrying. So are errors that say
 * the database is not what the code expects — 42xxx (undefined column or
 * function: a migration not applied), 3F, 55, 58, XX — rather than that the
 * data is bad: retrying them (with backoff, loudly) loses nothing, while
 * treating them as bad data would dead-letter every message. */
int ax_pg_classify(const PGresult *r, PGconn *conn) {
    if (PQstatus(conn) != CONNECTION_OK)
        return AX_ERR_IO;
    const char *st = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    if (!st)
        return AX_ERR_IO;
    if (strncmp(st, "08", 2) == 0 || strncmp(st, "57P", 3) == 0 || strcmp(st, "57014") == 0 ||
        strcmp(st, "40001") == 0 ||
        strcmp(st, "40P01") == 0 || strncmp(st, "53", 2) == 0 || strncmp(st, "42", 2) == 0 ||
        strncmp(st, "3F", 2) == 0 || strncmp(st, "55", 2) == 0 || strncmp(st, "58", 2) == 0 ||
        strncmp(st, "XX", 2) == 0)
        return AX_ERR_IO;
    if (strcmp(st, "23505") == 0)
        return AX_ERR_CONFLICT;
    return AX_ERR_INVALID;
}

int ax_pg_exec(ax_pg_t *pg, const char *sql, int nparams, const char *const *params,
               const int *lengths, const int *formats, PGresult **ret_res, char *errbuf,
               size_t errlen) {
    int rc = ax_pg_ensure(pg, errbuf, errlen);
    if (rc < 0)
        return rc;
    PGresult *r = PQexecParams(pg->conn, sql, nparams, NULL, params, lengths, formats, 0);
    ExecStatusType st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
        if (ret_res)
            *ret_res = r;
        else
            PQclear(r);
        return 0;
    }
    rc = ax_pg_classify(r, pg->conn);
    ax_seterr(errbuf, errlen, rc, "PostgreSQL: %s",
              r ? PQresultErrorMessage(r) : PQerrorMessage(pg->conn));
    if (errbuf)
        chomp(errbuf);
    PQclear(r);
    if (rc == AX_ERR_IO && PQstatus(pg->conn) != CONNECTION_OK)
        pg->was_down = 1;
    return rc;
}

void ax_pg_mark_down(ax_pg_t *pg) { pg->was_down = 1; }

void ax_pg_txn_edge(ax_pg_t *pg) { pg->plan_local = -1; }

void ax_pg_drop(ax_pg_t *pg) {
    if (pg->conn)
        conn_close(pg);
    pg->was_down = 1;
}

int ax_pg_begin(ax_pg_t *pg, char *errbuf, size_t errlen) {
    pg->plan_local = -1;
    return ax_pg_exec(pg, "BEGIN", 0, NULL, NULL, NULL, NULL, errbuf, errlen);
}

int ax_pg_commit(ax_pg_t *pg, char *errbuf, size_t errlen) {
    pg->plan_local = -1;
    return ax_pg_exec(pg, "COMMIT", 0, NULL, NULL, NULL, NULL, errbuf, errlen);
}

void ax_pg_rollback(ax_pg_t *pg) {
    pg->plan_local = -1;
    if (pg->conn && PQstatus(pg->conn) == CONNECTION_OK)
        PQclear(PQexec(pg->conn, "ROLLBACK"));
}

int ax_strbuf_add(ax_strbuf_t *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *ns = realloc(b->s, cap);
        if (!ns)
            return AX_ERR_NOMEM;
        b->s = ns;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
    return 0;
}

void ax_strbuf_free(ax_strbuf_t *b) {
    free(b->s);
    memset(b, 0, sizeof *b);
}

int ax_pgarr_begin(ax_strbuf_t *b) {
    b->len = 0;
    return ax_strbuf_add(b, "{", 1);
}

static int arr_sep(ax_strbuf_t *b) {
    return b->len > 1 ? ax_strbuf_add(b, ",", 1) : 0;
}

/* Decimal digits of v at the end of num[32]; returns where they start (a
 * batch of ids is formatted per statement: snprintf's cost showed). */
static char *fmt_i64(char num[32], int64_t v) {
    char *p = num + 32;
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *--p = '-';
    return p;
}

int ax_pgarr_int(ax_strbuf_t *b, int64_t v) {
    char num[32], *p = fmt_i64(num, v);
    int rc = arr_sep(b);
    return rc ? rc : ax_strbuf_add(b, p, (size_t)(num + 32 - p));
}

int ax_pgarr_text(ax_strbuf_t *b, const char *s) {
    int rc = arr_sep(b);
    if (rc)
        return rc;
    if (!s)
        return ax_strbuf_add(b, "NULL", 4);
    if ((rc = ax_strbuf_add(b, "\"", 1)))
        return rc;
    for (const char *p = s; *p;) { /* runs without a character to escape at once */
        size_t run = strcspn(p, "\"\\");
        if (run && (rc = ax_strbuf_add(b, p, run)))
            return rc;
        p += run;
        if (!*p)
            break;
        char esc[2] = {'\\', *p++};
        if ((rc = ax_strbuf_add(b, esc, 2)))
            return rc;
    }
    return ax_strbuf_add(b, "\"", 1);
}

int ax_pgarr_end(ax_strbuf_t *b) { return ax_strbuf_add(b, "}", 1); }

int ax_pgarr_ints(ax_strbuf_t *b, const int64_t *v, size_t n) {
    int rc = ax_pgarr_begin(b);
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = ax_pgarr_int(b, v[i]);
    if (rc == 0)
        rc = ax_pgarr_end(b);
    if (rc < 0) {
        ax_strbuf_free(b);
        return AX_ERR_NOMEM;
    }
    return 0;
}

int64_t ax_pg_int(const PGresult *r, int row, int col) {
    if (PQgetisnull(r, row, col))
        return 0;
    return strtoll(PQgetvalue(r, row, col), NULL, 10);
}
