/*
 * submit.c — axctl submit: produce submissions to <prefix>submit, of a
 * defined job or an inline command, and with --wait wait for the final
 * outcome (or the dead-letter record of a rejection).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ax/codec.h"
#include "ax/common.h"
#include "ax/kafka.h"
#include "ax/store_instance_admin.h"
#include "ax/store_job.h"
#include "axctl.h"

/* Longest --delay and --timeout: a century (a due time PostgreSQL holds). */
#define SUBMIT_MS_MAX INT64_C(3153600000000)

typedef struct {
    ax_submit_t s;
    int wait, wait_timeout;
    int64_t count;
    char trace[40];
    char *payload_buf;
} submit_opts_t;

/* Waits for the instance of trace to finish and be published; a
 * submission keyed `key` that is dead-lettered meanwhile (seen on the DLQ
 * through tail, when open) ends the wait at once with the DLQ's reason.
 * 0 on SUCCESS, else 1 (said why). */
static int wait_outcome(const char *trace, const char *key, dlq_tail_t *tail, int timeout_s) {
    ax_pg_t *pg = pg_open();
    int64_t deadline = ax_mono_ms() + (int64_t)timeout_s * 1000;
    int rc = -1;
    char reason[600], err[1024];
    while (rc < 0 && ax_mono_ms() < deadline) {
        ax_instance_view_t v;
        int got = ax_store_instance_admin_final(pg, trace, &v, err, sizeof err);
        if (got == 0) {
            instance_print_json(&v, 1);
            rc = v.outcome && strcmp(v.outcome, "SUCCESS") == 0 ? 0 : 1;
            ax_instance_view_clear(&v);
        } else if (got != AX_ERR_NOTFOUND) {
            fprintf(stderr, "axctl: %s\n", pg_err_line(err));
            rc = 1;
        } else if (tail && dlq_tail_find(tail, key, trace, 100, reason, sizeof reason) == 1) {
            fprintf(stderr, "axctl: submission %s was dead-lettered: %s\n", trace, reason);
            rc = 1;
        } else if (!tail) {
            usleep(100 * 1000);
        }
    }
    if (rc < 0) {
        fprintf(stderr, "axctl: no final outcome for trace %s within %d s\n", trace, timeout_s);
        rc = 1;
    }
    ax_pg_destroy(pg);
    return rc;
}

/* --job NAME must name a job that can be submitted: checked before anything
 * is produced (the trigger would only dead-letter it). Exits 2 if not;
 * returns 1 (said why) if PostgreSQL cannot say, else 0. */
static int check_job(const char *name) {
    ax_pg_t *pg = pg_open();
    ax_job_t j;
    char err[1024];
    int rc = ax_store_job_get(pg, name, 0, &j, err, sizeof err);
    ax_pg_destroy(pg);
    if (rc == AX_ERR_NOTFOUND)
        die_usagef("--job: no job named '%s' (see axctl job list)", name);
    if (rc < 0) {
        fprintf(stderr, "axctl: %s\n", pg_err_line(err));
        return 1;
    }
    int flow = strcmp(j.handler_kind, "flow") == 0;
    ax_job_clear(&j);
    if (flow)
        die_usagef("--job: job '%s' starts a flow: run it with axctl flow run", name);
    return 0;
}

/* One option with its value v; exits 2 if it is unknown or invalid. */
static void submit_opt(submit_opts_t *o, const char *a, const char *v) {
    ax_submit_t *s = &o->s;
    if (strcmp(a, "--job") == 0)
        s->job = (char *)v;
    else if (strcmp(a, "--delay") == 0) {
        s->delay_ms = parse_int(v, a);
        if (s->delay_ms < 0 || s->delay_ms > SUBMIT_MS_MAX)
            die_usagef("--delay must be 0..%" PRId64 " ms, not %s", SUBMIT_MS_MAX, v);
    } else if (strcmp(a, "--at") == 0)
        s->run_at_ms = parse_time(v, a);
    else if (strcmp(a, "--priority") == 0) {
        int64_t pr = parse_int(v, a);
        if (pr < 0 || pr > 4)
            die_usagef("--priority must be 0..4, not %s", v);
        s->priority = (int32_t)pr;
    } else if (strcmp(a, "--timeout") == 0) {
        s->timeout_ms = parse_int(v, a);
        if (s->timeout_ms < 1 || s->timeout_ms > SUBMIT_MS_MAX)
            die_usagef("--timeout must be 1..%" PRId64 " ms, not %s", SUBMIT_MS_MAX, v);
    } else if (strcmp(a, "--payload") == 0 || strcmp(a, "--payload-file") == 0) {
        if (s->payload)
            die_usage("give one of --payload TEXT or --payload-file FILE");
        if (a[9] == '\0') {
            s->payload = (uint8_t *)v;
            s->payload_len = strlen(v);
        } else {
            o->payload_buf = read_file(v, &s->payload_len); /* "-": standard input */
            s->payload = (uint8_t *)o->payload_buf;
        }
    } else if (strcmp(a, "--idempotency-key") == 0)
        s->idempotency_key = (char *)v;
    else if (strcmp(a, "--trace-id") == 0)
        s->trace_id = (char *)v;
    else if (strcmp(a, "--wait-timeout") == 0) {
        int64_t w = parse_int(v, a);
        if (w < 1 || w > 86400)
            die_usagef("--wait-timeout must be 1..86400 seconds, not %s", v);
        o->wait_timeout = (int)w;
    } else if (strcmp(a, "--count") == 0)
        o->count = parse_int(v, a);
    else
        die_usagef("submit: unknown option '%s' (see axctl --help)", a);
}

static void submit_parse(int argc, char **argv, submit_opts_t *o) {
    memset(o, 0, sizeof *o);
    ax_submit_init(&o->s);
    o->wait_timeout = 300;
    o->count = 1;
    int i = 0;
    for (; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (strcmp(a, "--wait") == 0) {
            o->wait = 1;
            continue;
        }
        if (strncmp(a, "--", 2) != 0)
            die_usagef("submit: unexpected argument '%s' (an inline command goes after --)", a);
        if (!v)
            die_usagef("%s needs a value", a);
        submit_opt(o, a, v);
        i++;
    }
    if (i < argc) {
        o->s.command = argv + i;
        o->s.command_len = (size_t)(argc - i);
    }
}

/* Exits 2 unless the submission can be produced; 1 if the job cannot be
 * checked. */
static int submit_check(submit_opts_t *o) {
    ax_submit_t *s = &o->s;
    if (!s->job == !s->command)
        die_usage("submit needs exactly one of --job NAME or -- COMMAND ARG...");
    if (s->command && !s->command[0][0])
        die_usage("submit: the command after -- must start with a program name");
    /* Text fields travel as Avro strings and are stored as PostgreSQL text. */
    need_utf8(s->job, "--job");
    need_utf8(s->idempotency_key, "--idempotency-key");
    need_utf8(s->trace_id, "--trace-id");
    for (size_t k = 0; k < s->command_len; k++)
        if (!utf8_valid(s->command[k], strlen(s->command[k])))
            die_usagef("submit: argument %zu of the command after -- is not valid UTF-8 text",
                       k + 1);
    if (s->idempotency_key && (!*s->idempotency_key || strlen(s->idempotency_key) > 512))
        die_usage("--idempotency-key must be 1..512 bytes");
    if (s->trace_id && (!*s->trace_id || strlen(s->trace_id) > 150))
        die_usage("--trace-id must be 1..150 bytes");
    if (s->run_at_ms && s->delay_ms >= 0)
        die_usage("give one of --at TIME or --delay MS");
    if (o->count < 1 || o->count > 10000000)
        die_usagef("--count must be 1..10000000, not %" PRId64, o->count);
    if (o->count > 1 && (o->wait || s->idempotency_key))
        die_usage("--count does not go with --wait or --idempotency-key");
    if (!s->trace_id) {
        ax_trace_id_new(o->trace);
        s->trace_id = o->trace;
    }
    submit_size_check(s, o->count > 1 ? strlen(s->trace_id) + 21 : strlen(s->trace_id));
    return s->job ? check_job(s->job) : 0;
}

/* Produce the submission(s) (--count N: trace ids TRACE-1 ... TRACE-N) and
 * wait for Kafka's acknowledgements. 0, or 1 (said why). */
static int submit_produce(rd_kafka_t *rk, submit_opts_t *o, const char *base) {
    char err[512] = "", topic[256], one[200];
    ax_submit_t *s = &o->s;
    ax_delivery_t d = {0};
    int rc = 0;
    ax_conf_topic(&conf, "submit", topic, sizeof topic);
    for (int64_t k = 1; k <= o->count && rc == 0; k++) {
        if (o->count > 1) {
            snprintf(one, sizeof one, "%.150s-%lld", base, (long long)k);
            s->trace_id = one;
        }
        void *buf;
        size_t len;
        if (ax_submit_encode(s, &buf, &len) < 0) {
            snprintf(err, sizeof err, "cannot encode the submission");
            rc = AX_ERR_INVALID;
            break;
        }
        const char *key = s->idempotency_key ? s->idempotency_key : s->trace_id;
        /* without an idempotency key: submit.partition.chunk at a time per
         * partition (read when the record is partitioned: right away once
         * the topic's metadata is known, else all go where the last says) */
        d.part_hint =
            s->idempotency_key ? 0 : ax_kafka_chunk_hint(k - 1, conf.submit_partition_chunk);
        rc = ax_kafka_produce(rk, topic, key, strlen(key), buf, len, NULL, &d, err, sizeof err);
        free(buf);
    }
    if (o->count > 1)
        s->trace_id = (char *)base;
    if (rc == 0 || d.pending)
        rc = ax_kafka_wait(rk, &d, 60000) < 0 ? AX_ERR_IO : rc;
    if (rc < 0)
        fprintf(stderr, "axctl: submission not acknowledged by Kafka: %s\n",
                d.err ? rd_kafka_err2str(d.err) : err);
    return rc < 0 ? 1 : 0;
}

int cmd_submit(int argc, char **argv) {
    submit_opts_t o;
    submit_parse(argc, argv, &o);
    char err[512];
    if (submit_check(&o)) {
        free(o.payload_buf);
        return 1;
    }
    rd_kafka_t *rk = ax_kafka_producer_new(&conf, "axctl", err, sizeof err);
    if (!rk) {
        fprintf(stderr, "axctl: configuration error: %s\n", err);
        free(o.payload_buf);
        return 2;
    }
    /* Before producing: the DLQ's end, so --wait learns of a rejection. */
    dlq_tail_t *tail = o.wait ? dlq_tail_open() : NULL;
    char *base = strdup(o.s.trace_id);
    int rc = base ? submit_produce(rk, &o, base) : 1;
    if (!base)
        fprintf(stderr, "axctl: out of memory\n");
    free(o.payload_buf);
    rd_kafka_destroy(rk);
    if (rc == 0 && !o.wait)
        printf("%s\n", o.s.trace_id);
    else if (rc == 0)
        rc = wait_outcome(o.s.trace_id, o.s.idempotency_key ? o.s.idempotency_key : o.s.trace_id,
                          tail, o.wait_timeout);
    dlq_tail_close(tail);
    free(base);
    return rc;
}
