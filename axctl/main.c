/*
 * axctl — the operator's command line: submit instances, define jobs, look
 * at instances, create topics, print the configuration reference.
 */
#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ax/codec.h"
#include "ax/common.h"
#include "ax/conf.h"
#include "ax/cron.h"
#include "ax/kafka.h"
#include "ax/log.h"
#include "ax/pg.h"
#include "axctl.h"

static const char usage[] =
    "Usage: axctl [--config FILE] [--set KEY=VALUE]... COMMAND ...\n\n"
    "Commands:\n"
    "  submit [--job NAME] [--delay MS] [--at TIME] [--priority 0-4] [--timeout MS]\n"
    "         [--payload TEXT | --payload-file FILE] [--idempotency-key KEY]\n"
    "         [--trace-id ID] [--wait] [--wait-timeout SECONDS] [--count N]\n"
    "         [-- COMMAND ARG...]\n"
    "      Produce one submission to <prefix>submit: of a defined job (--job) or an\n"
    "      inline command (after --). TIME is ISO-8601 with offset\n"
    "      (2026-12-01T02:30:00Z) or epoch milliseconds. Prints the trace id; with\n"
    "      --wait, waits for the final outcome, prints it as JSON and exits 0 only\n"
    "      on SUCCESS, or with the reason (exit 1) as soon as the submission is\n"
    "      dead-lettered. --count N submits N instances, trace ids TRACE-1..TRACE-N.\n"
    "      --payload-file - reads the payload from standard input. --job must name\n"
    "      an existing job (checked first: exit 2).\n"
    "  job create NAME [SCHEDULE] [POLICY...] [RUN...] [RETRY...] [--disabled]\n"
    "         -- COMMAND ARG...\n"
    "  job update NAME [SCHEDULE] [POLICY...] [RUN...] [RETRY...] [-- COMMAND ARG...]\n"
    "      Define a job, or change only the given settings of one. SCHEDULE is one\n"
    "      of (default --no-schedule):\n"
    "        --cron 'EXPR' [--tz ZONE] [--dst-gap shift|skip]\n"
    "              [--dst-overlap once|twice]\n"
    "        --fixed-rate MS [--start TIME]   every MS ms from TIME (default: from\n"
    "                                         when the schedule was set)\n"
    "        --fixed-delay MS [--start TIME]  first at TIME, then MS ms after each\n"
    "                                         run finished\n"
    "        --at TIME | --after MS           once, at TIME or MS ms from now\n"
    "        --no-schedule                    runs only when submitted\n"
    "      A schedule option replaces the whole schedule; --tz, --dst-gap,\n"
    "      --dst-overlap and --start alone change just that. ZONE (IANA, default\n"
    "      UTC) is also the zone job times are shown in.\n"
    "      POLICY: --misfire fire_once|skip|catch_up  --misfire-threshold MS\n"
    "        --catchup-max N  --overlap allow|skip|queue|cancel\n"
    "      RUN: --timeout MS  --priority 0-4  --payload TEXT | --payload-file FILE\n"
    "        --handler command|http|plugin (default command) says what follows --:\n"
    "          command  a program and its arguments (no shell)\n"
    "          http     one URL, http://HOST[:PORT]/PATH, POSTed the instance\n"
    "          plugin   the absolute path of a plugin .so, then its arguments\n"
    "        --group NAME       executor group (default 'default'): only executors\n"
    "                           serving it run the job (topic <prefix>dispatch.NAME)\n"
    "        --routing-key FIELD  the payload's JSON field whose value keys the\n"
    "                           dispatch, so equal values run in order on one\n"
    "                           partition ('' clears)\n"
    "        --concurrency N    at most N instances LOCKED or RUNNING at once,\n"
    "                           cluster-wide (0 clears: no limit)\n"
    "        --backlog-max N    at most N instances waiting (SCHEDULED); the newest\n"
    "                           beyond it fail as backlog_full, with an alert\n"
    "                           ('none' clears)\n"
    "        --tolerance MS     the fire may be up to MS late, coalesced onto the\n"
    "                           trigger's coarse tick while it is loaded (0 =\n"
    "                           precise, the default; docs/PRIORITIES.md)\n"
    "      RETRY (a failed attempt runs again as attempt+1; docs/RETRIES.md):\n"
    "        --retries N        retries after the first attempt (default 3)\n"
    "        --retry-initial MS  --retry-multiplier X (>= 1)  --retry-max-delay MS\n"
    "                           backoff: min(MS * X^(attempt-1), max) (defaults\n"
    "                           2000, 2, 30000) plus 0..--retry-jitter MS (2000)\n"
    "        --retry-rules JSON  the job's rule chain, before the default one, e.g.\n"
    "                           '[{\"class\":\"exit\",\"action\":\"fail\"}]' ('' clears)\n"
    "        --circuit-threshold N  open the circuit after N consecutive failed\n"
    "                           attempts: fires are skipped (default 5, 0 = off)\n"
    "        --circuit-cooldown MS  then one fire probes after MS (default 60000)\n"
    "      Invalid values exit 2 before anything is written.\n"
    "  job enable NAME | job disable NAME\n"
    "  job delete NAME [--cancel-pending]\n"
    "      Refused (exit 1, naming them) while the job has unfinished instances;\n"
    "      --cancel-pending cancels them first (as instance cancel).\n"
    "  job list\n"
    "      One line per job: name, enabled/disabled, schedule, next fire time, and\n"
    "      the run settings that are not the defaults (handler=, group=,\n"
    "      concurrency=LIMIT running=N, routing-key=, circuit=STATE failures=N).\n"
    "  job show NAME\n"
    "      Every setting as 'key: value' lines, the last fire and the next 5 fires.\n"
    "  job next NAME [-n N] [--from TIME]\n"
    "      The next N (default 10) nominal fire times in the job's zone, as the\n"
    "      trigger computes them (after the last recorded fire and after the\n"
    "      schedule was set); with --from, the fire times after TIME. DST marks\n"
    "      as for cron next.\n"
    "  job history NAME [--limit N] [--since TIME]\n"
    "      The fire ledger, newest first (default 20 rows): nominal time, decision\n"
    "      (fired, queued, skipped_misfire, skipped_overlap, skipped_circuit,\n"
    "      deferred), instance id, its state/outcome, detail.\n"
    "  job reset NAME\n"
    "      Close the job's circuit breaker now (consecutive failures 0) and print\n"
    "      what it was.\n"
    "  instance show ID\n"
    "  instance list [--job NAME] [--state STATE] [--trace ID] [--limit N]\n"
    "      Instances newest first (default 20), as JSON lines; STATE is SCHEDULED,\n"
    "      LOCKED, RUNNING or FINISHED.\n"
    "  instance cancel ID\n"
    "      Cancel an unfinished instance: one not started yet is finished CANCELLED\n"
    "      (its result published); a claimed or running one is stopped by its\n"
    "      executor, as overlap=cancel does; a running shard parent has its\n"
    "      unfinished shards cancelled. A finished one: exit 1.\n"
    "  topics create [--partitions N] [--replication N] [--group G]...\n"
    "      Create the topics (default 6 partitions, replication 1), and\n"
    "      <prefix>dispatch.G for each executor group G; existing ones are kept.\n"
    "  status [--all]\n"
    "      The leader trigger, each priority lane's lag (as the leader last\n"
    "      measured it), whether it defers, its deferred instances and the oldest\n"
    "      one's wait, then the executors as for workers.\n"
    "  workers [--all]\n"
    "      One line per executor (the worker table), newest heartbeat first: id,\n"
    "      state, heartbeat age, groups, machine cpu% and mem%, RSS MB, running,\n"
    "      waiting, fetching yes/no, and per pool NAME RUNNING/SLOTS+WAITING/QUEUE.\n"
    "      Executors silent for over a minute are shown only with --all. An\n"
    "      executor whose heartbeat stopped (older than 3 x executor.heartbeat.ms)\n"
    "      without stopping is shown lost; HEARTBEAT is the time of its last one.\n"
    "  idem claim KEY [--scope JOB] [--instance ID]\n"
    "      For commands run by ax: claim a business key once per scope (default\n"
    "      $AX_JOB, else ''). ID defaults to $AX_INSTANCE_ID (set by the executor).\n"
    "      Exit 0: the key is new, or was claimed by this same instance (a retry)\n"
    "      - go ahead; 3: another instance holds it ('taken by instance N' on\n"
    "      stderr) - skip the work; 1: error (try again); 2: usage. Commands do not\n"
    "      inherit $AX_CONFIG from the executor: pass --config FILE.\n"
    "  flow create NAME --stage STAGE=JOB[:UPSTREAM,...]... [--on-failure stop|continue]\n"
    "         [--cron EXPR | --fixed-rate MS | --at TIME | --after MS] [--tz ZONE]\n"
    "         [--misfire POLICY] [--overlap allow|skip]\n"
    "      A DAG of stages, each running a job; a stage starts when every upstream\n"
    "      stage succeeded. Cycles and unknown stages or jobs are rejected (exit 2/1).\n"
    "      With a schedule, each fire starts one run (schedule job flow.NAME).\n"
    "  flow schedule NAME SCHEDULE... | --no-schedule\n"
    "      Set, change or remove a flow's schedule (the fire history is kept).\n"
    "  flow run NAME            start a run now (prints its id)\n"
    "  flow show NAME [--run ID] | flow list | flow delete NAME\n"
    "  dlq list [--limit N] [--since TIME] [--reason TEXT]\n"
    "      The dead-letter topic, newest first (default 100): PARTITION:OFFSET, time\n"
    "      (ISO-8601 UTC), rejected messages (source, reason) and final failures\n"
    "      (instance); --since: records from TIME on; --reason: whose reason holds\n"
    "      TEXT (any case).\n"
    "  dlq replay P:O\n"
    "      Produce a rejected message again to its source topic, or resubmit a final\n"
    "      failure's job with the same payload. Idempotent: a replayed submission\n"
    "      carries an idempotency key of the record, so replaying it again makes no\n"
    "      second instance (and says so).\n"
    "  counters                 counters kept by the services (duplicates, stale results)\n"
    "  config reference         the configuration reference (Markdown)\n"
    "  config print             the effective configuration, secrets redacted, URLs as\n"
    "                           scheme://host:port\n"
    "  cron next 'EXPR' [--tz ZONE] [--from TIME] [-n N] [--dst shift|skip]\n"
    "         [--overlap once|twice]\n"
    "      Print the next N (default 10) fire times of a cron expression, one\n"
    "      ISO-8601 time with its UTC offset per line; DST-affected times end in\n"
    "      ' # DST: shifted' or ' # DST: repeated hour'. ZONE is an IANA name\n"
    "      (default UTC), TIME as for submit (default now). Needs no server.\n"
    "      See docs/CRON.md.\n\n"
    "Exit status: 0 success, 1 failure, 2 usage or configuration error.\n\n";

ax_conf_t conf;

void die_usage(const char *msg) {
    fprintf(stderr, "axctl: %s (see axctl --help)\n", msg);
    exit(2);
}

void die_usagef(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("axctl: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

ax_pg_t *pg_open(void) {
    char err[512];
    ax_pg_t *pg = ax_pg_new(&conf, "axctl", err, sizeof err);
    if (!pg) {
        fprintf(stderr, "axctl: configuration error: %s\n", err);
        exit(2);
    }
    if (ax_pg_ensure(pg, err, sizeof err) < 0) {
        fprintf(stderr, "axctl: %s\n", err);
        exit(1);
    }
    return pg;
}

const char *pg_err_line(char *err) {
    /* PostgreSQL's DETAIL (e.g. "Failing row contains (...)", the whole row),
     * CONTEXT and HINT (joined into one line by ax_pg_exec) are not for the
     * operator's terminal. */
    static const char *const tails[] = {"DETAIL:", "CONTEXT:", "HINT:", "\n"};
    for (size_t i = 0; i < AX_ARRAY_SIZE(tails); i++) {
        char *t = strstr(err, tails[i]);
        if (t) {
            while (t > err && (t[-1] == ' ' || t[-1] == '\t'))
                t--;
            *t = '\0';
        }
    }
    return err;
}

PGresult *q(ax_pg_t *pg, const char *sql, int n, const char *const *p) {
    char err[1024];
    PGresult *r;
    if (ax_pg_exec(pg, sql, n, p, NULL, NULL, &r, err, sizeof err) < 0) {
        fprintf(stderr, "axctl: %s\n", pg_err_line(err));
        exit(1);
    }
    return r;
}

void print_rows(PGresult *r) {
    for (int i = 0; i < PQntuples(r); i++)
        puts(PQgetvalue(r, i, 0));
}

int64_t parse_int(const char *s, const char *what) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || end == s) {
        fprintf(stderr, "axctl: %s: '%s' is not an integer\n", what, s);
        exit(2);
    }
    return v;
}

/* ISO-8601 with offset (Z or ±HH:MM), optional .mmm; or epoch ms. */
/* What a PostgreSQL timestamptz holds and a schedule can use: years 1-9999. */
#define TIME_MIN_MS INT64_C(-62135596800000)
#define TIME_MAX_MS INT64_C(253402300799999)
static int64_t time_in_range(int64_t ms, const char *s, const char *what) {
    if (ms < TIME_MIN_MS || ms > TIME_MAX_MS)
        die_usagef("%s: '%s' is out of range (years 0001 to 9999)", what, s);
    return ms;
}

int64_t parse_time(const char *s, const char *what) {
    if (*s && strspn(s, "0123456789") == strlen(s))
        return time_in_range(parse_int(s, what), s, what);
    struct tm tm = {0};
    const char *p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
    int ms = 0;
    if (p && *p == '.') {
        char *end;
        double frac = strtod(p, &end);
        ms = (int)(frac * 1000 + 0.5);
        p = end;
    }
    long off = 0;
    if (p && (*p == '+' || *p == '-')) {
        int hh, mm;
        if (sscanf(p + 1, "%2d:%2d", &hh, &mm) != 2)
            p = NULL;
        else {
            off = (hh * 60 + mm) * 60 * (*p == '-' ? -1 : 1);
            p += 6;
        }
    } else if (p && *p == 'Z') {
        p++;
    } else {
        p = NULL;
    }
    if (!p || *p) {
        fprintf(stderr, "axctl: %s: '%s' is not ISO-8601 with an offset, e.g. "
                        "2026-12-01T02:30:00Z\n", what, s);
        exit(2);
    }
    return time_in_range(((int64_t)timegm(&tm) - off) * 1000 + ms, s, what);
}

int utf8_valid(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s, *e = p + n;
    while (p < e) {
        unsigned c = *p++;
        if (c < 0x80)
            continue;
        int more;
        unsigned min, cp;
        if ((c & 0xE0) == 0xC0)
            more = 1, min = 0x80, cp = c & 0x1F;
        else if ((c & 0xF0) == 0xE0)
            more = 2, min = 0x800, cp = c & 0x0F;
        else if ((c & 0xF8) == 0xF0)
            more = 3, min = 0x10000, cp = c & 0x07;
        else
            return 0;
        if (e - p < more)
            return 0;
        for (int k = 0; k < more; k++) {
            if ((p[k] & 0xC0) != 0x80)
                return 0;
            cp = cp << 6 | (p[k] & 0x3F);
        }
        p += more;
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
    }
    return 1;
}

void need_utf8(const char *s, const char *what) {
    if (s && !utf8_valid(s, strlen(s)))
        die_usagef("%s is not valid UTF-8 text", what);
}

char *read_file(const char *path, size_t *ret_len) {
    int std_in = strcmp(path, "-") == 0;
    FILE *f = std_in ? stdin : fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "axctl: cannot read %s: %s\n", path, strerror(errno));
        exit(2);
    }
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    size_t n;
    while (buf && (n = fread(buf + len, 1, cap - len, f)) > 0) {
        len += n;
        if (len == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb)
                free(buf);
            buf = nb;
        }
    }
    int bad = ferror(f);
    if (!std_in)
        fclose(f);
    if (!buf || bad) {
        fprintf(stderr, "axctl: cannot read %s: %s\n", std_in ? "standard input" : path,
                buf ? strerror(errno) : "out of memory");
        free(buf);
        exit(buf ? 2 : 1);
    }
    *ret_len = len;
    return buf;
}

/* Waits for the instance of trace to finish and be published; a
 * submission keyed `key` that is dead-lettered meanwhile (seen on the DLQ
 * through tail, when open) ends the wait at once with the DLQ's reason. */
static int wait_outcome(const char *trace, const char *key, dlq_tail_t *tail, int timeout_s) {
    ax_pg_t *pg = pg_open();
    const char *p[] = {trace};
    int64_t deadline = ax_mono_ms() + (int64_t)timeout_s * 1000;
    int rc = 1;
    char reason[600];
    while (ax_mono_ms() < deadline) {
        PGresult *r = q(pg,
                        "SELECT row_to_json(x)::text, x.outcome FROM ("
                        " SELECT id, job_name AS job, state, outcome, attempt, exit_code, error_class,"
                        "  error, output, trace_id, worker, scheduled_at, locked_at, running_at,"
                        "  finished_at FROM job_instance WHERE id IN (SELECT instance_id"
                        "  FROM instance_trace WHERE trace_id = $1) AND trace_id = $1"
                        "  AND state = 'FINISHED' AND result_published_at IS NOT NULL"
                        "  ORDER BY id DESC LIMIT 1) x",
                        1, p);
        if (PQntuples(r) == 1) {
            puts(PQgetvalue(r, 0, 0));
            rc = strcmp(PQgetvalue(r, 0, 1), "SUCCESS") == 0 ? 0 : 1;
            PQclear(r);
            goto out;
        }
        PQclear(r);
        if (tail && dlq_tail_find(tail, key, trace, 100, reason, sizeof reason) == 1) {
            fprintf(stderr, "axctl: submission %s was dead-lettered: %s\n", trace, reason);
            goto out;
        }
        if (!tail)
            usleep(100 * 1000);
    }
    fprintf(stderr, "axctl: no final outcome for trace %s within %d s\n", trace, timeout_s);
out:
    ax_pg_destroy(pg);
    return rc;
}

/* --job NAME must name a job that can be submitted: checked before anything
 * is produced (the trigger would only dead-letter it). */
static void check_job(const char *name) {
    ax_pg_t *pg = pg_open();
    const char *p[] = {name};
    PGresult *r = q(pg, "SELECT handler_kind FROM job WHERE name = $1", 1, p);
    int found = PQntuples(r) == 1, flow = found && strcmp(PQgetvalue(r, 0, 0), "flow") == 0;
    PQclear(r);
    ax_pg_destroy(pg);
    if (!found)
        die_usagef("--job: no job named '%s' (see axctl job list)", name);
    if (flow)
        die_usagef("--job: job '%s' starts a flow: run it with axctl flow run", name);
}

/* Longest --delay and --timeout: a century (a due time PostgreSQL holds). */
#define SUBMIT_MS_MAX INT64_C(3153600000000)

static int cmd_submit(int argc, char **argv) {
    ax_submit_t s;
    ax_submit_init(&s);
    int wait = 0, wait_timeout = 300;
    int64_t count = 1;
    char trace[40];
    char *payload_buf = NULL;
    int i = 0;
    for (; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (strcmp(a, "--wait") == 0) {
            wait = 1;
            continue;
        }
        if (strncmp(a, "--", 2) != 0)
            die_usagef("submit: unexpected argument '%s' (an inline command goes after --)", a);
        if (!v)
            die_usagef("%s needs a value", a);
        if (strcmp(a, "--job") == 0)
            s.job = (char *)v;
        else if (strcmp(a, "--delay") == 0) {
            s.delay_ms = parse_int(v, a);
            if (s.delay_ms < 0 || s.delay_ms > SUBMIT_MS_MAX)
                die_usagef("--delay must be 0..%" PRId64 " ms, not %s", SUBMIT_MS_MAX, v);
        } else if (strcmp(a, "--at") == 0)
            s.run_at_ms = parse_time(v, a);
        else if (strcmp(a, "--priority") == 0) {
            int64_t pr = parse_int(v, a);
            if (pr < 0 || pr > 4)
                die_usagef("--priority must be 0..4, not %s", v);
            s.priority = (int32_t)pr;
        } else if (strcmp(a, "--timeout") == 0) {
            s.timeout_ms = parse_int(v, a);
            if (s.timeout_ms < 1 || s.timeout_ms > SUBMIT_MS_MAX)
                die_usagef("--timeout must be 1..%" PRId64 " ms, not %s", SUBMIT_MS_MAX, v);
        } else if (strcmp(a, "--payload") == 0 || strcmp(a, "--payload-file") == 0) {
            if (s.payload)
                die_usage("give one of --payload TEXT or --payload-file FILE");
            if (a[9] == '\0') {
                s.payload = (uint8_t *)v;
                s.payload_len = strlen(v);
            } else {
                payload_buf = read_file(v, &s.payload_len); /* "-": standard input */
                s.payload = (uint8_t *)payload_buf;
            }
        } else if (strcmp(a, "--idempotency-key") == 0)
            s.idempotency_key = (char *)v;
        else if (strcmp(a, "--trace-id") == 0)
            s.trace_id = (char *)v;
        else if (strcmp(a, "--wait-timeout") == 0) {
            int64_t w = parse_int(v, a);
            if (w < 1 || w > 86400)
                die_usagef("--wait-timeout must be 1..86400 seconds, not %s", v);
            wait_timeout = (int)w;
        } else if (strcmp(a, "--count") == 0)
            count = parse_int(v, a);
        else
            die_usagef("submit: unknown option '%s' (see axctl --help)", a);
        i++;
    }
    if (i < argc) {
        s.command = argv + i;
        s.command_len = (size_t)(argc - i);
    }
    if (!s.job == !s.command)
        die_usage("submit needs exactly one of --job NAME or -- COMMAND ARG...");
    if (s.command && !s.command[0][0])
        die_usage("submit: the command after -- must start with a program name");
    /* Text fields travel as Avro strings and are stored as PostgreSQL text. */
    need_utf8(s.job, "--job");
    need_utf8(s.idempotency_key, "--idempotency-key");
    need_utf8(s.trace_id, "--trace-id");
    for (size_t k = 0; k < s.command_len; k++)
        if (!utf8_valid(s.command[k], strlen(s.command[k])))
            die_usagef("submit: argument %zu of the command after -- is not valid UTF-8 text",
                       k + 1);
    if (s.idempotency_key && (!*s.idempotency_key || strlen(s.idempotency_key) > 512))
        die_usage("--idempotency-key must be 1..512 bytes");
    if (s.trace_id && (!*s.trace_id || strlen(s.trace_id) > 150))
        die_usage("--trace-id must be 1..150 bytes");
    if (s.run_at_ms && s.delay_ms >= 0)
        die_usage("give one of --at TIME or --delay MS");
    if (count < 1 || count > 10000000)
        die_usagef("--count must be 1..10000000, not %" PRId64, count);
    if (count > 1 && (wait || s.idempotency_key))
        die_usage("--count does not go with --wait or --idempotency-key");
    if (!s.trace_id) {
        ax_random_hex(trace, 16);
        s.trace_id = trace;
    }
    submit_size_check(&s, count > 1 ? strlen(s.trace_id) + 21 : strlen(s.trace_id));
    if (s.job)
        check_job(s.job);
    char err[512], topic[256];
    rd_kafka_t *rk = ax_kafka_producer_new(&conf, "axctl", err, sizeof err);
    if (!rk) {
        fprintf(stderr, "axctl: configuration error: %s\n", err);
        free(payload_buf);
        return 2;
    }
    ax_conf_topic(&conf, "submit", topic, sizeof topic);
    /* Before producing: the DLQ's end, so --wait learns of a rejection. */
    dlq_tail_t *tail = wait ? dlq_tail_open() : NULL;
    /* --count N: N instances, trace ids TRACE-1 ... TRACE-N. */
    ax_delivery_t d = {0};
    char *base = strdup(s.trace_id), one[200];
    int rc = base ? 0 : AX_ERR_NOMEM;
    for (int64_t k = 1; k <= count && rc == 0; k++) {
        if (count > 1) {
            snprintf(one, sizeof one, "%.150s-%lld", base, (long long)k);
            s.trace_id = one;
        }
        void *buf;
        size_t len;
        if (ax_submit_encode(&s, &buf, &len) < 0) {
            snprintf(err, sizeof err, "cannot encode the submission");
            rc = AX_ERR_INVALID;
            break;
        }
        const char *key = s.idempotency_key ? s.idempotency_key : s.trace_id;
        rc = ax_kafka_produce(rk, topic, key, strlen(key), buf, len, NULL, &d, err, sizeof err);
        free(buf);
    }
    if (count > 1)
        s.trace_id = base;
    free(payload_buf);
    if (rc == 0 || d.pending)
        rc = ax_kafka_wait(rk, &d, 60000) < 0 ? AX_ERR_IO : rc;
    rd_kafka_destroy(rk);
    if (rc < 0) {
        fprintf(stderr, "axctl: submission not acknowledged by Kafka: %s\n",
                d.err ? rd_kafka_err2str(d.err) : err);
        dlq_tail_close(tail);
        free(base);
        return 1;
    }
    if (!wait) {
        printf("%s\n", s.trace_id);
        free(base);
        return 0;
    }
    rc = wait_outcome(s.trace_id, s.idempotency_key ? s.idempotency_key : s.trace_id, tail,
                      wait_timeout);
    dlq_tail_close(tail);
    free(base);
    return rc;
}

static const char instance_cols[] =
    "id, job_name AS job, attempt, state, outcome, exit_code, error_class, error, output,"
    " trace_id, idempotency_key, worker, due_at, scheduled_at, dispatched_at, locked_at,"
    " running_at, finished_at, result_published_at,"
    " (SELECT h.reason FROM instance_hold h WHERE h.instance_id = job_instance.id)"
    "  AS held_reason";

static int cmd_instance(int argc, char **argv) {
    if (argc < 1)
        die_usage("instance needs a subcommand");
    ax_pg_t *pg = pg_open();
    char sql[1024];
    if (strcmp(argv[0], "show") == 0) {
        if (argc < 2)
            die_usage("instance show needs an ID");
        parse_int(argv[1], "ID");
        const char *p[] = {argv[1]};
        snprintf(sql, sizeof sql,
                 "SELECT row_to_json(x)::text FROM (SELECT %s FROM job_instance"
                 " WHERE id = $1::bigint) x", instance_cols);
        PGresult *r = q(pg, sql, 1, p);
        if (PQntuples(r) == 0) {
            fprintf(stderr, "axctl: no instance %s\n", argv[1]);
            PQclear(r);
            ax_pg_destroy(pg);
            return 1;
        }
        print_rows(r);
        PQclear(r);
        ax_pg_destroy(pg);
        return 0;
    }
    if (strcmp(argv[0], "list") == 0) {
        const char *limit = "20", *trace = NULL, *job = NULL, *state = NULL;
        char st[16];
        for (int i = 1; i < argc; i += 2) {
            const char *a = argv[i];
            if (strcmp(a, "--limit") != 0 && strcmp(a, "--trace") != 0 &&
                strcmp(a, "--job") != 0 && strcmp(a, "--state") != 0)
                die_usagef("instance list: unknown option '%s' (see axctl --help)", a);
            if (i + 1 >= argc)
                die_usagef("%s needs a value", a);
            const char *v = argv[i + 1];
            need_utf8(v, a);
            if (strcmp(a, "--limit") == 0) {
                int64_t n = parse_int(v, a);
                if (n < 1 || n > 1000000)
                    die_usagef("--limit must be 1..1000000, not %s", v);
                limit = v;
            } else if (strcmp(a, "--trace") == 0) {
                trace = v;
            } else if (strcmp(a, "--job") == 0) {
                job = v;
            } else {
                static const char *const states[] = {"SCHEDULED", "LOCKED", "RUNNING",
                                                     "FINISHED", NULL};
                snprintf(st, sizeof st, "%.15s", v);
                for (char *c = st; *c; c++)
                    *c = (char)(*c >= 'a' && *c <= 'z' ? *c - 32 : *c);
                int k = 0;
                while (states[k] && strcmp(states[k], st) != 0)
                    k++;
                if (!states[k])
                    die_usagef("--state must be SCHEDULED, LOCKED, RUNNING or FINISHED, not '%s'",
                               v);
                state = st;
            }
        }
        const char *p[] = {limit, trace, job, state};
        snprintf(sql, sizeof sql,
                 "SELECT row_to_json(x)::text FROM (SELECT %s FROM job_instance"
                 " WHERE ($2::text IS NULL OR id IN (SELECT instance_id FROM instance_trace"
                 "  WHERE trace_id = $2)) AND ($3::text IS NULL OR job_name = $3)"
                 " AND ($4::text IS NULL OR state::text = $4)"
                 " ORDER BY id DESC LIMIT $1::int) x",
                 instance_cols);
        PGresult *r = q(pg, sql, 4, p);
        print_rows(r);
        PQclear(r);
        ax_pg_destroy(pg);
        return 0;
    }
    if (strcmp(argv[0], "cancel") == 0) {
        if (argc != 2)
            die_usage("instance cancel needs one ID");
        int64_t id = parse_int(argv[1], "ID");
        if (id < 1)
            die_usagef("ID must be a positive instance id, not %s", argv[1]);
        char ids[40];
        snprintf(ids, sizeof ids, "{%lld}", (long long)id);
        const char *p[] = {argv[1]};
        PGresult *r = q(pg,
                        "SELECT state, coalesce(outcome::text, ''), coalesce(worker, '')"
                        " FROM job_instance WHERE id = $1::bigint",
                        1, p);
        if (PQntuples(r) == 0 || strcmp(PQgetvalue(r, 0, 0), "FINISHED") == 0) {
            if (PQntuples(r) == 0)
                fprintf(stderr, "axctl: no instance %s\n", argv[1]);
            else
                fprintf(stderr, "axctl: instance %s already finished (%s): nothing to cancel\n",
                        argv[1], PQgetvalue(r, 0, 1));
            PQclear(r);
            ax_pg_destroy(pg);
            return 1;
        }
        int parent = strcmp(PQgetvalue(r, 0, 0), "RUNNING") == 0 &&
                     strcmp(PQgetvalue(r, 0, 2), "shards") == 0;
        PQclear(r);
        int stopping, scheduled;
        if (parent) {
            /* A shard parent runs nowhere (worker 'shards'): its unfinished
             * shards are cancelled; it finishes (FAILED) when the last has. */
            r = q(pg,
                  "SELECT count(*), coalesce(array_agg(id ORDER BY id)::text, '{}')"
                  " FROM job_instance WHERE parent_id = $1::bigint AND state <> 'FINISHED'",
                  1, p);
            int64_t nshards = ax_pg_int(r, 0, 0);
            int n = nshards ? cancel_instances(pg, PQgetvalue(r, 0, 1),
                                               "cancelled by an operator (axctl instance cancel "
                                               "of its shard parent)",
                                               &stopping, &scheduled)
                            : 0;
            PQclear(r);
            if (n < 0) {
                ax_pg_destroy(pg);
                return 1;
            }
            if (n == 0) {
                fprintf(stderr, "axctl: instance %s is a shard parent whose shards have all "
                                "finished: nothing to cancel (it finishes with them)\n", argv[1]);
                ax_pg_destroy(pg);
                return 1;
            }
            printf("instance %s is a shard parent (no executor runs it): cancelled its %d "
                   "shard(s) not started yet, asked executors to stop %d; it finishes when "
                   "they have\n", argv[1], scheduled, stopping);
            ax_pg_destroy(pg);
            return 0;
        }
        int n = cancel_instances(pg, ids, "cancelled by an operator (axctl instance cancel)",
                                 &stopping, &scheduled);
        if (n <= 0) {
            if (n == 0)
                fprintf(stderr, "axctl: instance %s finished meanwhile: nothing to cancel\n",
                        argv[1]);
            ax_pg_destroy(pg);
            return 1;
        }
        if (scheduled)
            printf("instance %s cancelled before it started: ax-callback records it FINISHED "
                   "CANCELLED and publishes its result\n", argv[1]);
        else
            printf("instance %s: its executor was asked to stop it (it ends CANCELLED)\n",
                   argv[1]);
        ax_pg_destroy(pg);
        return 0;
    }
    die_usage("unknown instance subcommand");
    return 2;
}

/* axctl cron next: a local preview of a schedule; touches no server. */
static int cmd_cron(int argc, char **argv) {
    if (argc < 1 || strcmp(argv[0], "next") != 0)
        die_usage("cron needs: next 'EXPR'");
    const char *tz = NULL;
    int64_t from = ax_now_ms(), n = 10;
    ax_dst_policy_t dst = 0;
    char expr[1024] = "";
    size_t elen = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int is_opt = strcmp(a, "--tz") == 0 || strcmp(a, "--from") == 0 || strcmp(a, "-n") == 0 ||
                     strcmp(a, "--dst") == 0 || strcmp(a, "--overlap") == 0;
        if (!is_opt) {
            /* Words of an unquoted expression are joined back together. */
            int w = snprintf(expr + elen, sizeof expr - elen, "%s%s", elen ? " " : "", a);
            if (w < 0 || (size_t)w >= sizeof expr - elen)
                die_usage("cron expression too long");
            elen += (size_t)w;
            continue;
        }
        if (!v)
            die_usage("option needs a value");
        i++;
        if (strcmp(a, "--tz") == 0)
            tz = v;
        else if (strcmp(a, "--from") == 0)
            from = parse_time(v, a);
        else if (strcmp(a, "-n") == 0) {
            n = parse_int(v, "-n");
            if (n < 1 || n > 100000)
                die_usage("-n must be 1..100000");
        } else if (strcmp(a, "--dst") == 0) {
            if (strcmp(v, "skip") == 0)
                dst |= AX_DST_GAP_SKIP;
            else if (strcmp(v, "shift") != 0)
                die_usage("--dst must be shift or skip");
        } else {
            if (strcmp(v, "twice") == 0)
                dst |= AX_DST_OVERLAP_TWICE;
            else if (strcmp(v, "once") != 0)
                die_usage("--overlap must be once or twice");
        }
    }
    if (!elen)
        die_usage("cron next needs an expression, e.g. '0 9 * * MON-FRI'");
    char err[512];
    ax_cron_t *c = NULL;
    int rc = ax_cron_new(expr, tz, dst, &c, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "axctl: cron: %s\n", err);
        int pos;
        if (rc == AX_ERR_INVALID && sscanf(err, "position %d:", &pos) == 1 && pos >= 1)
            fprintf(stderr, "  %s\n  %*s^\n", expr, pos - 1, "");
        return 2;
    }
    int64_t t = from;
    for (int64_t k = 0; k < n; k++) {
        int64_t next;
        int flags = 0;
        char buf[64];
        if (ax_cron_next(c, t, &next, &flags) < 0) {
            fprintf(stderr, "axctl: cron: no %sfire time within %d years\n", k ? "further " : "",
                    AX_CRON_HORIZON_YEARS);
            ax_cron_destroy(c);
            return k ? 0 : 1;
        }
        ax_tz_format(ax_cron_tz(c), next, buf, sizeof buf);
        printf("%s%s\n", buf,
               flags & AX_CRON_SHIFTED    ? " # DST: shifted"
               : flags & AX_CRON_REPEATED ? " # DST: repeated hour"
                                          : "");
        t = next;
    }
    ax_cron_destroy(c);
    return 0;
}

int main(int argc, char **argv) {
    ax_conf_from_args(&conf, &argc, argv, "axctl", usage, NULL);
    /* librdkafka's own lines go to the debug log: axctl reports errors itself. */
    ax_kafka_quiet_logs = 1;
    if (argc < 2)
        die_usage("no command given");
    char err[512];
    if (ax_codec_init(err, sizeof err) < 0) {
        fprintf(stderr, "axctl: %s\n", err);
        return 1;
    }
    const char *cmd = argv[1];
    int rc;
    /* Every value axctl stores or sends is text: refuse bytes that are not
     * UTF-8 before anything is written (submit and job check their own,
     * where a payload may be any bytes). */
    if (strcmp(cmd, "submit") != 0 && strcmp(cmd, "job") != 0)
        for (int i = 2; i < argc; i++)
            if (!utf8_valid(argv[i], strlen(argv[i]))) {
                if (argv[i - 1][0] == '-' && argv[i - 1][1] == '-' && i > 2)
                    die_usagef("%s is not valid UTF-8 text", argv[i - 1]);
                die_usagef("%s: argument %d is not valid UTF-8 text", cmd, i - 1);
            }
    if (strcmp(cmd, "submit") == 0) {
        rc = cmd_submit(argc - 2, argv + 2);
    } else if (strcmp(cmd, "job") == 0) {
        rc = cmd_job(argc - 2, argv + 2);
    } else if (strcmp(cmd, "cron") == 0) {
        rc = cmd_cron(argc - 2, argv + 2);
    } else if (strcmp(cmd, "instance") == 0) {
        rc = cmd_instance(argc - 2, argv + 2);
    } else if (strcmp(cmd, "topics") == 0) {
        rc = cmd_topics(argc - 2, argv + 2);
    } else if (strcmp(cmd, "workers") == 0) {
        rc = cmd_workers(argc - 2, argv + 2);
    } else if (strcmp(cmd, "status") == 0) {
        rc = cmd_status(argc - 2, argv + 2);
    } else if (strcmp(cmd, "idem") == 0) {
        rc = cmd_idem(argc - 2, argv + 2);
    } else if (strcmp(cmd, "dlq") == 0) {
        rc = cmd_dlq(argc - 2, argv + 2);
    } else if (strcmp(cmd, "flow") == 0) {
        rc = cmd_flow(argc - 2, argv + 2);
    } else if (strcmp(cmd, "counters") == 0) {
        ax_pg_t *pg = pg_open();
        print_rows(q(pg, "SELECT name || ' ' || value FROM ax_counter ORDER BY name", 0, NULL));
        rc = 0;
    } else if (strcmp(cmd, "config") == 0 && argc >= 3 && strcmp(argv[2], "reference") == 0) {
        ax_conf_reference(stdout);
        rc = 0;
    } else if (strcmp(cmd, "config") == 0 && argc >= 3 && strcmp(argv[2], "print") == 0) {
        ax_conf_print(&conf, stdout);
        rc = 0;
    } else {
        die_usage("unknown command");
        rc = 2;
    }
    ax_codec_shutdown();
    return rc;
}
