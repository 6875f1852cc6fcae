/*
 * fleet.c — axctl workers (the executors' heartbeat rows), axctl status
 * (lanes, deferred instances, executors), axctl idem claim
 * (business-key claims for commands run by ax) and axctl topics create.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ax/common.h"
#include "ax/idem.h"
#include "ax/job_json.h"
#include "ax/kafka.h"
#include "ax/log.h"
#include "ax/lane.h"
#include "ax/pg.h"
#include "ax/store_fleet.h"
#include "axctl.h"

/* workers: at most this many listed */
#define WORKERS_MAX 10000

/* ---- tables ---------------------------------------------------------------------- */

/* Rows of ncol malloc'd cells, printed as aligned columns. */
typedef struct table {
    size_t ncol, ncells, cap;
    char **cells;
} table_t;

static void oom(void) {
    fprintf(stderr, "axctl: out of memory\n");
    exit(1);
}

/* Add a cell to the last row (a new row every ncol cells). */
__attribute__((format(printf, 2, 3))) static void cellf(table_t *t, const char *fmt, ...) {
    if (t->ncells == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 64 * t->ncol;
        char **nc = realloc(t->cells, t->cap * sizeof *nc);
        if (!nc)
            oom();
        t->cells = nc;
    }
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&t->cells[t->ncells], fmt, ap) < 0)
        oom();
    va_end(ap);
    t->ncells++;
}

/* Print t under head; right[c]: right-aligned (numbers). The last column
 * is printed as is. Frees the cells. */
static void print_table(table_t *t, const char *const *head, const int *right) {
    size_t ncol = t->ncol, nrows = t->ncells / ncol;
    int w[32] = {0};
    for (size_t c = 0; c < ncol && c < 32; c++) {
        w[c] = (int)strlen(head[c]);
        for (size_t i = 0; i < nrows; i++)
            if ((int)strlen(t->cells[i * ncol + c]) > w[c])
                w[c] = (int)strlen(t->cells[i * ncol + c]);
    }
    for (size_t i = 0; i <= nrows; i++) {
        for (size_t c = 0; c < ncol; c++) {
            const char *v = i == 0 ? head[c] : t->cells[(i - 1) * ncol + c];
            if (c == ncol - 1)
                printf("%s\n", v);
            else
                printf(right[c] ? "%*s  " : "%-*s  ", w[c], v);
        }
    }
    for (size_t i = 0; i < t->ncells; i++)
        free(t->cells[i]);
    free(t->cells);
    t->cells = NULL;
    t->ncells = t->cap = 0;
}

/* epoch ms as YYYY-MM-DDTHH:MM:SSZ (seconds truncated). */
static void iso_utc(int64_t ms, char *buf, size_t len) {
    time_t sec = (time_t)(ms >= 0 ? ms / 1000 : (ms - 999) / 1000);
    struct tm tm;
    if (!gmtime_r(&sec, &tm) || !strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm))
        snprintf(buf, len, "?");
}

/* ---- workers -------------------------------------------------------------------- */

/* "?" for a figure not reported. */
static const char *fig(int64_t v, char *buf, size_t len) {
    if (v < 0)
        return "?";
    snprintf(buf, len, "%lld", (long long)v);
    return buf;
}

/* Pools as "name running/slots+waiting/queue ..." in name order. */
static void pools_cell(table_t *t, const ax_worker_t *w) {
    size_t len = 1;
    for (size_t k = 0; k < w->npools; k++)
        len += strlen(w->pools[k].name) + 2 + 4 * 21 + 4;
    char *s = malloc(len), b[4][24];
    if (!s)
        oom();
    size_t at = 0;
    s[0] = '\0';
    for (size_t k = 0; k < w->npools; k++) {
        const ax_worker_pool_t *p = &w->pools[k];
        at += (size_t)snprintf(s + at, len - at, "%s%s %s/%s+%s/%s", k ? "  " : "", p->name,
                               fig(p->running, b[0], sizeof b[0]),
                               fig(p->slots, b[1], sizeof b[1]),
                               fig(p->waiting, b[2], sizeof b[2]),
                               fig(p->queue, b[3], sizeof b[3]));
    }
    cellf(t, "%s", s);
    free(s);
}

static void worker_cells(table_t *t, const ax_worker_t *w) {
    char hb[40];
    cellf(t, "%s", w->id);
    cellf(t, "%s", w->state);
    cellf(t, "%.1f", (double)w->age_ms / 1000.0);
    size_t glen = 1;
    for (size_t g = 0; g < w->ngroups; g++)
        glen += strlen(w->groups[g]) + 1;
    char *groups = malloc(glen);
    if (!groups)
        oom();
    groups[0] = '\0';
    for (size_t g = 0; g < w->ngroups; g++) { /* a,b */
        if (g)
            strcat(groups, ",");
        strcat(groups, w->groups[g]);
    }
    cellf(t, "%s", groups);
    free(groups);
    if (w->cpu_pct < 0)
        cellf(t, "-");
    else
        cellf(t, "%.1f", w->cpu_pct);
    if (w->mem_pct < 0)
        cellf(t, "-");
    else
        cellf(t, "%.1f", w->mem_pct);
    if (w->rss_bytes < 0)
        cellf(t, "-");
    else
        cellf(t, "%.1f", (double)w->rss_bytes / 1048576.0);
    cellf(t, "%lld", (long long)w->running);
    cellf(t, "%lld", (long long)w->waiting);
    cellf(t, "%s", w->fetching ? "yes" : "no");
    iso_utc(w->heartbeat_ms, hb, sizeof hb);
    cellf(t, "%s", hb);
    pools_cell(t, w);
}

/* One row per worker, the age in seconds with one decimal. A worker whose
 * heartbeat stopped (older than 3 x executor.heartbeat.ms, the trigger's
 * rule for a lost executor) without it saying "stopped" is shown as lost;
 * HEARTBEAT is the time of its last one. Returns the exit status. */
static int print_workers(ax_pg_t *pg, int all) {
    static const char *const head[] = {"ID",   "STATE", "AGE_S", "GROUPS", "CPU%",
                                       "MEM%", "RSS_MB", "RUN",  "WAIT",   "FETCH",
                                       "HEARTBEAT", "POOLS"};
    /* text columns left-aligned, numbers right-aligned, the pools last */
    static const int right[] = {0, 0, 1, 0, 1, 1, 1, 1, 1, 0, 0, 0};
    ax_worker_filter_t f = {.include_silent = all, .lost_after_ms = 3 * conf.executor_heartbeat_ms};
    ax_worker_t *w;
    size_t n;
    char err[1024];
    if (ax_store_fleet_workers(pg, &f, WORKERS_MAX, &w, &n, err, sizeof err) < 0) {
        fprintf(stderr, "axctl: %s\n", pg_err_line(err));
        return 1;
    }
    table_t t = {.ncol = AX_ARRAY_SIZE(head)};
    for (size_t i = 0; i < n; i++)
        worker_cells(&t, &w[i]);
    print_table(&t, head, right);
    ax_workers_free(w, n);
    if (n == WORKERS_MAX)
        fprintf(stderr, "axctl: warning: only the %d most recently heard from shown\n",
                WORKERS_MAX);
    return 0;
}

int cmd_workers(int argc, char **argv) {
    int all = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--all") == 0)
            all = 1;
        else
            die_usagef("workers: unknown argument '%s' (see axctl --help)", argv[i]);
    }
    ax_pg_t *pg = pg_open();
    int rc = print_workers(pg, all);
    ax_pg_destroy(pg);
    return rc;
}

/* ---- status ---------------------------------------------------------------------- */

/* "deployment D: leader trigger H (epoch E, lease S s left)". */
static int print_leader(ax_pg_t *pg) {
    char role[300], err[1024];
    snprintf(role, sizeof role, "%strigger", conf.topic_prefix);
    ax_leader_info_t l = {0};
    int rc = ax_store_fleet_leader(pg, role, &l, err, sizeof err);
    if (rc == AX_ERR_NOTFOUND) {
        printf("deployment %s: no leader trigger\n", conf.topic_prefix);
        return 0;
    }
    if (rc < 0) {
        fprintf(stderr, "axctl: %s\n", pg_err_line(err));
        return 1;
    }
    printf("deployment %s: leader trigger %s (epoch %lld, lease %.1f s left)\n",
           conf.topic_prefix, l.holder ? l.holder : "?", (long long)l.epoch,
           (double)l.lease_left_ms / 1000.0);
    ax_leader_info_clear(&l);
    return 0;
}

/* "standby triggers: H (heard 0.4 s ago), H2 (lost: heard 5.0 s ago)" or
 * "standby triggers: none", then a blank line. */
static int print_standbys(ax_pg_t *pg) {
    char role[300], err[1024];
    snprintf(role, sizeof role, "%strigger", conf.topic_prefix);
    ax_standby_t *sb;
    size_t n;
    if (ax_store_fleet_standbys(pg, role, ax_standby_lost_after_ms(conf.trigger_lease_ms), 100,
                                &sb, &n, err, sizeof err) < 0) {
        fprintf(stderr, "axctl: %s\n", pg_err_line(err));
        return 1;
    }
    printf("standby triggers:%s", n ? "" : " none");
    for (size_t i = 0; i < n; i++)
        printf("%s %s (%sheard %.1f s ago)", i ? "," : "", sb[i].holder,
               sb[i].lost ? "lost: " : "", (double)sb[i].age_ms / 1000.0);
    printf("\n\n");
    ax_standbys_free(sb, n);
    return 0;
}

static void lane_cells(table_t *t, const ax_lane_view_t *v) {
    char since[40];
    cellf(t, "P%d", v->lane);
    if (v->measured)
        cellf(t, "%lld", (long long)v->lag);
    else
        cellf(t, "-");
    cellf(t, "%s", !v->measured ? "unknown" : v->over ? "deferring" : "flowing");
    if (v->measured && v->changed_ms) {
        iso_utc(v->changed_ms, since, sizeof since);
        cellf(t, "%s", since);
    } else
        cellf(t, "-");
    cellf(t, "%lld", (long long)v->deferred);
    if (v->oldest_deferred_ms >= 0)
        cellf(t, "%.1f", (double)v->oldest_deferred_ms / 1000.0);
    else
        cellf(t, "-");
    if (v->measured)
        cellf(t, "%.1f", (double)v->measured_ago_ms / 1000.0);
    else
        cellf(t, "-");
}

/* Per lane: the lag the leader last measured, the state, since when, the
 * deferred instances now. Returns the exit status. */
static int print_lanes(ax_pg_t *pg) {
    static const char *const head[] = {"LANE",     "LAG",        "STATE",  "SINCE",
                                       "DEFERRED", "OLDEST_S", "MEASURED_S_AGO"};
    static const int right[] = {0, 1, 0, 0, 1, 1, 1};
    ax_lane_view_t lanes[AX_PRIORITIES];
    size_t n;
    char err[1024];
    if (ax_store_fleet_lanes(pg, conf.topic_prefix, lanes, AX_PRIORITIES, &n, err, sizeof err) <
        0) {
        fprintf(stderr, "axctl: %s\n", pg_err_line(err));
        return 1;
    }
    table_t t = {.ncol = AX_ARRAY_SIZE(head)};
    for (size_t i = 0; i < n; i++)
        lane_cells(&t, &lanes[i]);
    print_table(&t, head, right);
    return 0;
}

int cmd_status(int argc, char **argv) {
    int all = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--all") == 0)
            all = 1;
        else
            die_usagef("status: unknown argument '%s' (see axctl --help)", argv[i]);
    }
    ax_pg_t *pg = pg_open();
    int rc = print_leader(pg);
    if (rc == 0)
        rc = print_standbys(pg);
    if (rc == 0)
        rc = print_lanes(pg);
    if (rc == 0) {
        printf("\nexecutors:\n");
        rc = print_workers(pg, all);
    }
    ax_pg_destroy(pg);
    return rc;
}

/* ---- idem claim ------------------------------------------------------------------ */

int cmd_idem(int argc, char **argv) {
    if (argc < 1 || strcmp(argv[0], "claim") != 0)
        die_usage("idem needs: claim KEY [--scope JOB] [--instance ID]");
    const char *key = NULL, *scope = getenv("AX_JOB"), *inst = getenv("AX_INSTANCE_ID");
    const char *inst_from = "$AX_INSTANCE_ID";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--scope") == 0 || strcmp(a, "--instance") == 0) {
            if (i + 1 >= argc)
                die_usagef("%s needs a value", a);
            if (a[2] == 's')
                scope = argv[++i];
            else {
                inst = argv[++i];
                inst_from = "--instance";
            }
        } else if (strcmp(a, "--") == 0 && i + 1 < argc && !key) {
            key = argv[++i]; /* a key that starts with '-' */
        } else if (a[0] == '-' && a[1] != '\0') {
            die_usagef("idem claim: unknown option '%s' (see axctl --help)", a);
        } else if (!key) {
            key = a;
        } else {
            die_usagef("idem claim takes one KEY (got '%s' and '%s')", key, a);
        }
    }
    if (!key)
        die_usage("idem claim needs a KEY");
    if (!*key || strlen(key) > 512)
        die_usagef("idem claim: KEY must be 1 to 512 bytes");
    if (!inst || !*inst)
        die_usagef("idem claim needs the claiming instance: --instance ID, or $AX_INSTANCE_ID "
                   "(set by the executor for the commands it runs)");
    char *end;
    long long id = strtoll(inst, &end, 10);
    if (*end || end == inst || id < 1)
        die_usagef("%s: '%s' is not an instance id", inst_from, inst);
    if (!scope)
        scope = "";
    ax_pg_t *pg = pg_open();
    char err[1024];
    int64_t owner = 0;
    int rc = AX_ERR_IO;
    /* A claim racing another one for the same key may not see its row yet:
     * ask again. */
    for (int attempt = 0; attempt < 5; attempt++) {
        if (attempt)
            usleep(20000u << attempt);
        rc = ax_idem_claim(pg, scope, key, id, &owner, err, sizeof err);
        if (rc != AX_ERR_IO)
            break;
    }
    ax_pg_destroy(pg);
    if (rc == AX_IDEM_NEW)
        return 0;
    if (rc == AX_IDEM_TAKEN) {
        fprintf(stderr, "axctl: idempotency key taken by instance %" PRId64 "\n", owner);
        return 3;
    }
    fprintf(stderr, "axctl: idem claim: %s\n", err);
    return rc == AX_ERR_INVALID ? 2 : 1;
}

/* ---- topics create --------------------------------------------------------------- */

/* Replication factor and min.insync.replicas: the flags' (checked against
 * the cluster's size), else 3 and 2 on a cluster of 3 brokers or more, 1
 * and 1 on a smaller one. Exits 2 on a flag the cluster cannot honour. */
static int topics_replication(int64_t *repl, int64_t *isr, char *err, size_t errlen) {
    int brokers = 0, def_repl, def_isr;
    int rc = ax_kafka_replication_default(&conf, &def_repl, &def_isr, &brokers, err, errlen);
    if (rc < 0)
        return rc;
    if (*repl == 0)
        *repl = def_repl;
    if (*repl > brokers)
        die_usagef("--replication-factor %lld exceeds the cluster's %d broker(s)",
                   (long long)*repl, brokers);
    if (*isr == 0)
        *isr = *repl >= 3 ? 2 : 1;
    if (*isr > *repl)
        die_usagef("--min-insync %lld exceeds the replication factor %lld", (long long)*isr,
                   (long long)*repl);
    ax_info("topics: replication factor %lld, min.insync.replicas %lld (%d broker(s))",
            (long long)*repl, (long long)*isr, brokers);
    return 0;
}

int cmd_topics(int argc, char **argv) {
    if (argc < 1 || strcmp(argv[0], "create") != 0)
        die_usage("topics needs: create");
    int64_t parts = 6, sparts = 0, repl = 0, isr = 0; /* 0: from the cluster's size */
    enum { NS = AX_KAFKA_SERVICE_TOPICS_N };
    size_t cap = NS + (size_t)(argc + 1) * AX_PRIORITIES, n = 0;
    char **names = calloc(cap, sizeof *names);
    if (!names) {
        fprintf(stderr, "axctl: out of memory\n");
        return 1;
    }
    char buf[512];
    for (size_t i = 0; i < NS; i++) /* the service topics */
        names[n++] = strdup(ax_conf_topic(&conf, ax_kafka_service_topics[i], buf, sizeof buf));
    for (int p = 0; p < AX_PRIORITIES; p++) /* the default group's lanes */
        names[n++] = strdup(ax_conf_dispatch_topic(&conf, NULL, p, buf, sizeof buf));
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int is_repl = strcmp(a, "--replication-factor") == 0 || strcmp(a, "--replication") == 0;
        if (strcmp(a, "--partitions") != 0 && strcmp(a, "--service-partitions") != 0 &&
            !is_repl && strcmp(a, "--min-insync") != 0 && strcmp(a, "--group") != 0)
            die_usagef("topics create: unknown argument '%s' (see axctl --help)", a);
        if (i + 1 >= argc)
            die_usagef("%s needs a value", a);
        const char *v = argv[++i];
        if (strcmp(a, "--partitions") == 0) {
            parts = parse_int(v, a);
            if (parts < 1 || parts > 100000)
                die_usagef("--partitions must be 1..100000, not %s", v);
        } else if (strcmp(a, "--service-partitions") == 0) {
            sparts = parse_int(v, a);
            if (sparts < 1 || sparts > 100000)
                die_usagef("--service-partitions must be 1..100000, not %s", v);
        } else if (is_repl) {
            repl = parse_int(v, a);
            if (repl < 1 || repl > 32767)
                die_usagef("%s must be 1..32767, not %s", a, v);
        } else if (strcmp(a, "--min-insync") == 0) {
            isr = parse_int(v, a);
            if (isr < 1 || isr > 32767)
                die_usagef("--min-insync must be 1..32767, not %s", v);
        } else {
            if (!ax_job_group_valid(v))
                die_usagef("--group must be 1-64 of A-Z a-z 0-9 _ - starting with a letter or "
                           "digit, and not p0-p9 (lane suffixes), not '%s'", v);
            if (strcmp(v, "default") == 0)
                continue; /* its topics are <prefix>dispatch[.pN] */
            for (int p = 0; p < AX_PRIORITIES; p++) {
                ax_conf_dispatch_topic(&conf, v, p, buf, sizeof buf);
                size_t k = 0;
                while (k < n && strcmp(names[k], buf) != 0)
                    k++;
                if (k == n)
                    names[n++] = strdup(buf);
            }
        }
    }
    char err[512];
    if (sparts == 0)
        sparts = ax_kafka_service_partitions((int)parts);
    ax_info("topics: %lld partition(s) per dispatch lane, %lld per submit, callback, results "
            "and dlq", (long long)parts, (long long)sparts);
    int rc = topics_replication(&repl, &isr, err, sizeof err);
    /* names[0..NS): the service topics; then the lanes */
    if (rc == 0)
        rc = ax_kafka_create_topic_names(&conf, (const char *const *)names, NS, (int)sparts,
                                         (int)repl, (int)isr, err, sizeof err);
    if (rc == 0)
        rc = ax_kafka_create_topic_names(&conf, (const char *const *)names + NS, n - NS,
                                         (int)parts, (int)repl, (int)isr, err, sizeof err);
    if (rc < 0)
        fprintf(stderr, "axctl: %s\n", err);
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return rc == AX_ERR_INVALID ? 2 : rc < 0 ? 1 : 0;
}
