/*
 * fleet.c — axctl workers (the executors' heartbeat rows), axctl status
 * (lanes, deferred instances, executors), axctl idem claim
 * (business-key claims for commands run by ax) and axctl topics create.
 *
 * SQL text is made of constants only; every value is a parameter.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ax/common.h"
#include "ax/idem.h"
#include "ax/kafka.h"
#include "ax/lane.h"
#include "ax/pg.h"
#include "axctl.h"

/* ---- workers -------------------------------------------------------------------- */

/* One row per worker; pools as "name running/slots+waiting/queue ..." in
 * name order; the age in seconds with one decimal. */
/* A worker whose heartbeat stopped (older than 3 x executor.heartbeat.ms,
 * the trigger's rule for a lost executor) without it saying "stopped" is
 * shown as lost; HEARTBEAT is the time of its last one. */
static const char sql_workers[] =
    "SELECT w.id, CASE WHEN w.state <> 'stopped'"
    "   AND w.heartbeat_at < now() - $2::bigint * interval '1 millisecond' THEN 'lost'"
    "   ELSE w.state END,"
    " to_char(greatest(extract(epoch FROM now() - w.heartbeat_at), 0), 'FM9999999990.0'),"
    " array_to_string(w.groups, ','),"
    " coalesce(to_char(w.cpu_pct, 'FM990.0'), '-'), coalesce(to_char(w.mem_pct, 'FM990.0'), '-'),"
    " coalesce(to_char(w.rss_bytes / 1048576.0, 'FM9999999990.0'), '-'),"
    " w.running, w.waiting, CASE WHEN w.fetching THEN 'yes' ELSE 'no' END,"
    " to_char(w.heartbeat_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'),"
    " coalesce((SELECT string_agg(format('%s %s/%s+%s/%s', p.key,"
    "     coalesce(p.value->>'running', '?'), coalesce(p.value->>'slots', '?'),"
    "     coalesce(p.value->>'waiting', '?'), coalesce(p.value->>'queue', '?')),"
    "     '  ' ORDER BY p.key)"
    "   FROM jsonb_each(CASE WHEN jsonb_typeof(w.pools) = 'object' THEN w.pools"
    "                   ELSE '{}'::jsonb END) p), '')"
    " FROM worker w"
    " WHERE $1::boolean OR w.heartbeat_at > now() - interval '1 minute'"
    " ORDER BY w.heartbeat_at DESC, w.id";

/* Print r as aligned columns under head; right[c]: right-aligned (numbers).
 * The last column is printed as is. */
static void print_table(PGresult *r, const char *const *head, const int *right, int ncol) {
    int w[32];
    for (int c = 0; c < ncol && c < 32; c++) {
        w[c] = (int)strlen(head[c]);
        for (int i = 0; i < PQntuples(r); i++)
            if (PQgetlength(r, i, c) > w[c])
                w[c] = PQgetlength(r, i, c);
    }
    for (int i = -1; i < PQntuples(r); i++) {
        for (int c = 0; c < ncol; c++) {
            const char *v = i < 0 ? head[c] : PQgetvalue(r, i, c);
            if (c == ncol - 1)
                printf("%s\n", v);
            else
                printf(right[c] ? "%*s  " : "%-*s  ", w[c], v);
        }
    }
}

static void print_workers(ax_pg_t *pg, int all) {
    char lost[32];
    snprintf(lost, sizeof lost, "%lld", (long long)(3 * conf.executor_heartbeat_ms));
    const char *p[] = {all ? "true" : "false", lost};
    PGresult *r = q(pg, sql_workers, 2, p);
    static const char *const head[] = {"ID",   "STATE", "AGE_S", "GROUPS", "CPU%",
                                       "MEM%", "RSS_MB", "RUN",  "WAIT",   "FETCH",
                                       "HEARTBEAT", "POOLS"};
    /* text columns left-aligned, numbers right-aligned, the pools last */
    static const int right[] = {0, 0, 1, 0, 1, 1, 1, 1, 1, 0, 0, 0};
    print_table(r, head, right, (int)AX_ARRAY_SIZE(head));
    PQclear(r);
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
    print_workers(pg, all);
    ax_pg_destroy(pg);
    return 0;
}

/* ---- status ---------------------------------------------------------------------- */

/* Per lane: the executor group's lag as the leader trigger last measured
 * it (lane_status), whether the lane defers, since when, and the deferred
 * instances counted now. */
static const char sql_status[] =
    "WITH l AS (SELECT generate_series(0, 4) AS lane),"
    " d AS (SELECT priority AS lane, count(*) AS n,"
    "   to_char(greatest(extract(epoch FROM now() - min(deferred_at)), 0), 'FM9999999990.0')"
    "     AS oldest"
    "   FROM job_instance WHERE state = 'SCHEDULED' AND dispatched_at IS NULL"
    "   AND deferred_at IS NOT NULL AND deployment = $1 GROUP BY priority)"
    " SELECT 'P' || l.lane, coalesce(s.lag::text, '-'),"
    "  CASE WHEN s.lane IS NULL THEN 'unknown' WHEN s.over THEN 'deferring' ELSE 'flowing' END,"
    "  coalesce(to_char(s.changed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), '-'),"
    "  coalesce(d.n, 0), coalesce(d.oldest, '-'),"
    "  coalesce(to_char(greatest(extract(epoch FROM now() - s.updated_at), 0),"
    "    'FM9999999990.0'), '-')"
    " FROM l LEFT JOIN lane_status s ON s.lane = l.lane AND s.deployment = $1"
    " LEFT JOIN d ON d.lane = l.lane ORDER BY l.lane";

int cmd_status(int argc, char **argv) {
    int all = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--all") == 0)
            all = 1;
        else
            die_usagef("status: unknown argument '%s' (see axctl --help)", argv[i]);
    }
    ax_pg_t *pg = pg_open();
    char role[300];
    snprintf(role, sizeof role, "%strigger", conf.topic_prefix);
    const char *lp[] = {role};
    PGresult *r = q(pg,
                    "SELECT holder, epoch, to_char(greatest(extract(epoch FROM expires_at - now()),"
                    " 0), 'FM9999999990.0') FROM ax_leader WHERE role = $1"
                    " AND expires_at > now()",
                    1, lp);
    if (PQntuples(r))
        printf("deployment %s: leader trigger %s (epoch %s, lease %s s left)\n\n",
               conf.topic_prefix, PQgetvalue(r, 0, 0), PQgetvalue(r, 0, 1),
               PQgetvalue(r, 0, 2));
    else
        printf("deployment %s: no leader trigger\n\n", conf.topic_prefix);
    PQclear(r);
    const char *p[] = {conf.topic_prefix};
    r = q(pg, sql_status, 1, p);
    static const char *const head[] = {"LANE",     "LAG",        "STATE",  "SINCE",
                                       "DEFERRED", "OLDEST_S", "MEASURED_S_AGO"};
    static const int right[] = {0, 1, 0, 0, 1, 1, 1};
    print_table(r, head, right, (int)AX_ARRAY_SIZE(head));
    PQclear(r);
    printf("\nexecutors:\n");
    print_workers(pg, all);
    ax_pg_destroy(pg);
    return 0;
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

static int valid_group(const char *s) {
    size_t n = strlen(s);
    if (n < 1 || n > 64)
        return 0;
    /* dispatch.p0 .. dispatch.p4 are the default group's priority lanes */
    if (n == 2 && s[0] == 'p' && s[1] >= '0' && s[1] <= '9')
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (!alnum && (i == 0 || (c != '_' && c != '-')))
            return 0;
    }
    return 1;
}

int cmd_topics(int argc, char **argv) {
    if (argc < 1 || strcmp(argv[0], "create") != 0)
        die_usage("topics needs: create");
    int64_t parts = 6, repl = 1;
    static const char *const suffixes[] = {"submit", "callback", "results", "dlq"};
    size_t cap = AX_ARRAY_SIZE(suffixes) + (size_t)(argc + 1) * AX_PRIORITIES, n = 0;
    char **names = calloc(cap, sizeof *names);
    if (!names) {
        fprintf(stderr, "axctl: out of memory\n");
        return 1;
    }
    char buf[512];
    for (size_t i = 0; i < AX_ARRAY_SIZE(suffixes); i++)
        names[n++] = strdup(ax_conf_topic(&conf, suffixes[i], buf, sizeof buf));
    for (int p = 0; p < AX_PRIORITIES; p++) /* the default group's lanes */
        names[n++] = strdup(ax_conf_dispatch_topic(&conf, NULL, p, buf, sizeof buf));
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--partitions") != 0 && strcmp(a, "--replication") != 0 &&
            strcmp(a, "--group") != 0)
            die_usagef("topics create: unknown argument '%s' (see axctl --help)", a);
        if (i + 1 >= argc)
            die_usagef("%s needs a value", a);
        const char *v = argv[++i];
        if (strcmp(a, "--partitions") == 0) {
            parts = parse_int(v, a);
            if (parts < 1 || parts > 100000)
                die_usagef("--partitions must be 1..100000, not %s", v);
        } else if (strcmp(a, "--replication") == 0) {
            repl = parse_int(v, a);
            if (repl < 1 || repl > 32767)
                die_usagef("--replication must be 1..32767, not %s", v);
        } else {
            if (!valid_group(v))
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
    int rc = ax_kafka_create_topic_names(&conf, (const char *const *)names, n, (int)parts,
                                         (int)repl, err, sizeof err);
    if (rc < 0)
        fprintf(stderr, "axctl: %s\n", err);
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return rc == AX_ERR_INVALID ? 2 : rc < 0 ? 1 : 0;
}
