/*
 * axctl.h — what the parts of axctl share: the configuration, the database
 * connection and argument parsing. The argument helpers print their error
 * and exit 2 (a usage error); reads and writes go through the store
 * (ax/store_*.h), whose errors the commands report and turn into exit 1.
 */
#ifndef AXCTL_H
#define AXCTL_H

#include <stddef.h>
#include <stdint.h>

#include "ax/conf.h"
#include "ax/pg.h"

extern ax_conf_t conf;

void die_usage(const char *msg) __attribute__((noreturn));
/* Prints "axctl: <message>" and exits 2. */
void die_usagef(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

ax_pg_t *pg_open(void);
/* The first line of a PostgreSQL error (cut in place): no DETAIL/HINT. */
const char *pg_err_line(char *err);

/* `what` names the option in the error message. */
int64_t parse_int(const char *s, const char *what);
/* ISO-8601 with an offset (Z or +HH:MM, optional .mmm) or epoch ms. */
int64_t parse_time(const char *s, const char *what);
/* The whole file ("-": standard input); exits 2 if it cannot be read. */
char *read_file(const char *path, size_t *ret_len);
/* 1 if s[0..n) is valid UTF-8; need_utf8 exits 2 naming `what` unless s
 * (NUL-terminated, may be NULL) is. */
int utf8_valid(const char *s, size_t n);
void need_utf8(const char *s, const char *what);

/* instance.c: cancel the unfinished instances among ids[0..n):
 * SCHEDULED ones are finished CANCELLED through ax-callback, claimed or
 * running ones are asked to stop (as overlap=cancel). `why` is the
 * attempt's error text. Returns how many were unfinished (the counts in
 * *ret_stopping and *ret_scheduled), -1 if PostgreSQL or Kafka did not take
 * the cancellations (printed). */
int cancel_instance_ids(ax_pg_t *pg, const int64_t *ids, size_t n, const char *why,
                        int *ret_stopping, int *ret_scheduled);

/* instance.c: a producer for one command (exits 2 on a bad kafka.* key). */
typedef struct rd_kafka_s rd_kafka_t;
rd_kafka_t *producer_open(void);

/* axctl api token create (api_token.c) */
int cmd_api(int argc, char **argv);

/* axctl job ... (job.c) */
int cmd_job(int argc, char **argv);
/* axctl submit (submit.c) */
int cmd_submit(int argc, char **argv);
/* axctl instance show | list | cancel (instance_cmd.c) */
int cmd_instance(int argc, char **argv);
/* One instance as a JSON line: every column (final = 0), or the outcome's
 * (submit --wait). */
struct ax_instance_view;
void instance_print_json(const struct ax_instance_view *v, int final);
/* axctl workers, idem, topics (fleet.c) */
int cmd_workers(int argc, char **argv);
int cmd_status(int argc, char **argv);

/* job.c: the schedule options of job create/update applied to a flow's
 * schedule job. */
/* 1: OPT takes a value, 0: a flag (--no-schedule), -1: not a schedule option. */
int job_flow_sched_opt(const char *opt);
/* In the caller's transaction: create or change flow FLOW's (id FLOW_ID)
 * schedule job from the options argv[0..argc); exits 2 on a usage error.
 * Returns 1 if it wrote the job, 0 if there was nothing to do, -1 on a
 * failure (said on stderr; the caller rolls back). */
int job_flow_schedule_try(ax_pg_t *pg, const char *flow, const char *flow_id, int argc,
                          char **argv);
/* The schedule of job NAME and its next fire (malloc'd); -1 if no such job. */
int job_sched_describe(ax_pg_t *pg, const char *name, int verbose, char **sched, char **next);

/* limits.c: checks before anything is written; each exits 2 with one line.
 * The submission's encoded size and its dispatch record's (trace ids up to
 * longest_trace bytes) within message.max.bytes. */
struct ax_submit;
void submit_size_check(const struct ax_submit *s, size_t longest_trace);
/* --group G: not a reserved name (p0-p9) and, unless "default", a group
 * whose lane topics exist (Kafka's metadata; exits 1 if Kafka cannot say). */
void group_check(const char *group);

int cmd_idem(int argc, char **argv);
int cmd_topics(int argc, char **argv);
/* axctl dlq list | replay (dlq.c) */
int cmd_dlq(int argc, char **argv);
/* The dead-letter topic from its current end on (NULL if it cannot be
 * read): dlq_tail_find waits up to wait_ms for a record of a submission
 * keyed `key` (with trace id `trace` when it decodes) and returns 1 with its
 * reason, else 0. */
typedef struct dlq_tail dlq_tail_t;
dlq_tail_t *dlq_tail_open(void);
int dlq_tail_find(dlq_tail_t *t, const char *key, const char *trace, int wait_ms, char *reason,
                  size_t len);
void dlq_tail_close(dlq_tail_t *t);
/* axctl flow ... (flow.c) */
int cmd_flow(int argc, char **argv);

#endif
