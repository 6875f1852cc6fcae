/*
 * axctl — the operator's command line: submit instances, define jobs, look
 * at instances, create topics, print the configuration reference.
 */
#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ax/fire.h"
#include "ax/codec.h"
#include "ax/common.h"
#include "ax/conf.h"
#include "ax/cron.h"
#include "ax/kafka.h"
#include "ax/log.h"
#include "ax/pg.h"
#include "ax/store_counter.h"
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
    "  job pause-all | job resume-all\n"
    "      Disable every enabled job and remember which; resume-all enables exactly\n"
    "      those again (jobs disabled before stay disabled).\n"
    "  job reset NAME\n"
    "      Close the job's circuit breaker now (consecutive failures 0) and print\n"
    "      what it was.\n"
    "  instance show ID\n"
    "  instance list [--job NAME] [--state STATE] [--outcome OUTCOME] [--since TIME]\n"
    "         [--until TIME] [--group G] [--priority 0-4] [--trace ID]\n"
    "         [--idempotency-key KEY] [--before ID] [--limit N] [--all-deployments]\n"
    "      Instances newest first (default 20), as JSON lines (the API's Instance,\n"
    "      docs/API.md); STATE is SCHEDULED, LOCKED, RUNNING or FINISHED, OUTCOME\n"
    "      SUCCESS, FAILED, TIMEOUT or CANCELLED; --since/--until bound the time it\n"
    "      was scheduled; --before ID: only ids below ID (the next page). Only this\n"
    "      deployment's (topic.prefix), unless --all-deployments.\n"
    "  instance cancel ID\n"
    "      Cancel an unfinished instance: one not started yet is finished CANCELLED\n"
    "      (its result published); a claimed or running one is stopped by its\n"
    "      executor, as overlap=cancel does; a running shard parent has its\n"
    "      unfinished shards cancelled. A finished one: exit 1.\n"
    "  instance retry ID\n"
    "      Submit a finished instance's job again with its payload, priority and\n"
    "      timeout (trace id TRACE-retry, idempotency key retry:ID: a second retry of\n"
    "      the same instance makes no second instance).\n"
    "  topics create [--partitions N] [--service-partitions M]\n"
    "         [--replication-factor N] [--min-insync N] [--group G]...\n"
    "      Create the topics, and <prefix>dispatch.G for each executor group G;\n"
    "      existing ones are kept as they are. The dispatch lanes get N\n"
    "      partitions (default 6: executors share a lane up to that many);\n"
    "      submit, callback, results and dlq get M (default N, at most 2: their\n"
    "      readers are a few triggers and callbacks, and every partition a batch\n"
    "      touches costs the broker a request). Replication\n"
    "      factor 3 and min.insync.replicas 2 on a cluster of 3 brokers or more\n"
    "      (from its metadata), else 1 and 1; the flags choose (--replication is\n"
    "      --replication-factor; more replicas than brokers: exit 2).\n"
    "  status [--all]\n"
    "      The leader trigger, the standby triggers (heard from within the last\n"
    "      minute; 'lost:' silent for three lease ticks), each priority lane's lag\n"
    "      (as the leader last measured it), whether it defers, its deferred\n"
    "      instances and the oldest one's wait, then the executors as for workers.\n"
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
    "      (instance), with the job, trace id and instance a record names in\n"
    "      parentheses; --since: records from TIME on; --reason: whose reason\n"
    "      holds TEXT (any case).\n"
    "  dlq replay P:O\n"
    "      Produce a rejected message again to its source topic, or resubmit a final\n"
    "      failure's job with the same payload. Idempotent: a replayed submission\n"
    "      carries an idempotency key of the record, so replaying it again makes no\n"
    "      second instance (and says so).\n"
    "  api token create NAME --scope admin|read\n"
    "      A new random bearer token for ax-api, printed once, and the api.tokens\n"
    "      entry (NAME:SCOPE:SHA256HEX) that holds only its hash. Needs no server.\n"
    "  api token create NAME --scope admin|read\n"
    "      A new random bearer token for ax-api, printed once, and the api.tokens\n"
    "      entry (NAME:SCOPE:SHA256HEX) that holds only its hash. Needs no server.\n"
    "  counters                 counters kept by the services (duplicates, stale results)\n"
    "  migrate status           the schema migrations this build carries, applied\n"
    "                           (when) or pending, and applied ones it does not know;\n"
    "                           exit 0 when the schema is this build's, 3 when not\n"
    "  migrate apply            apply the pending migrations in order, each in its own\n"
    "                           transaction, under an advisory lock (a second applier\n"
    "                           waits); exit 3 if the schema is newer than this build\n"
    "  config check             read the configuration and check every key, the pg.*\n"
    "                           and kafka.* ones by libpq and librdkafka, without\n"
    "                           connecting; exit 0 \"configuration ok\", else 2\n"
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
     * CONTEXT and HINT (joined into one line by the store's statement
     * runner) are not for the operator's terminal. */
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
int64_t parse_time(const char *s, const char *what) {
    int64_t ms;
    int rc = ax_time_parse(s, &ms);
    if (rc == AX_ERR_TOOBIG)
        die_usagef("%s: '%s' is out of range (years 0001 to 9999)", what, s);
    if (rc == AX_ERR_INVALID && *s && strspn(s, "0123456789") == strlen(s))
        parse_int(s, what); /* says why */
    if (rc < 0) {
        fprintf(stderr, "axctl: %s: '%s' is not ISO-8601 with an offset, e.g. "
                        "2026-12-01T02:30:00Z\n", what, s);
        exit(2);
    }
    return ms;
}

int utf8_valid(const char *s, size_t n) {
    return ax_utf8_valid(s, n);
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

/* axctl counters: "NAME VALUE" lines. */
static int cmd_counters(void) {
    ax_pg_t *pg = pg_open();
    ax_counter_t *rows;
    size_t n;
    char err[1024];
    int rc = ax_store_counter_list(pg, &rows, &n, err, sizeof err);
    ax_pg_destroy(pg);
    if (rc < 0) {
        fprintf(stderr, "axctl: %s\n", pg_err_line(err));
        return 1;
    }
    for (size_t i = 0; i < n; i++)
        printf("%s %" PRId64 "\n", rows[i].name, rows[i].value);
    ax_counters_free(rows, n);
    return 0;
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
            int g = ax_dst_gap_parse(v);
            if (g < 0)
                die_usage("--dst must be shift or skip");
            dst |= (ax_dst_policy_t)g;
        } else {
            int o = ax_dst_overlap_parse(v);
            if (o < 0)
                die_usage("--overlap must be once or twice");
            dst |= (ax_dst_policy_t)o;
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
        rc = cmd_counters();
    } else if (strcmp(cmd, "migrate") == 0) {
        rc = cmd_migrate(argc - 2, argv + 2);
    } else if (strcmp(cmd, "config") == 0 && argc >= 3 && strcmp(argv[2], "check") == 0) {
        rc = cmd_config_check(argc - 3, argv + 3);
    } else if (strcmp(cmd, "api") == 0) {
        rc = cmd_api(argc - 2, argv + 2);
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
