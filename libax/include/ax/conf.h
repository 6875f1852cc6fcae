/*
 * ax/conf.h — the configuration of every ax program.
 *
 * One file format for all programs: `key = value` lines, `#` starts a
 * comment. All programs read the same file, so one table (conf.c) holds the
 * keys of every component; it drives parsing, validation, --help and the
 * generated reference (docs/CONFIGURATION.md, `axctl config reference`).
 *
 * Sources, later ones win: built-in defaults, the file (--config FILE, else
 * $AX_CONFIG, else the compiled-in AX_DEFAULT_CONFIG), environment variables
 * AXCONF_<KEY> (key upper-cased, '.' -> '_'), then --set key=value.
 * `kafka.<prop>` keys pass through to librdkafka and `pg.<keyword>` keys to
 * libpq; for those, AXCONF_KAFKA_SOCKET_TIMEOUT_MS means
 * kafka.socket.timeout.ms ('_' -> '.') and AXCONF_PG_CONNECT_TIMEOUT means
 * pg.connect_timeout (libpq keywords keep their '_').
 *
 * An unknown key, a bad value, or a value out of range is an error that
 * names the key and where it came from; programs exit with status 2 (this
 * module returns the error; ax/prog.h prints it and exits).
 */
#ifndef AX_CONF_H
#define AX_CONF_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct ax_kv {
    char *key;    /* without the kafka./pg. prefix */
    char *value;
} ax_kv_t;

typedef struct ax_conf {
    /* common */
    char *log_level;
    char *log_format;       /* "text" or "json" */
    char *metrics_listen;   /* "" = off, else a loopback HOST:PORT */
    char *topic_prefix;
    int64_t message_max_bytes;
    char *worker_id;
    /* trigger */
    int64_t trigger_scan_interval_ms;
    int64_t trigger_batch;
    int64_t trigger_sweep_interval_ms;
    int64_t trigger_redispatch_after_ms;
    int64_t trigger_sweep_grace_ms;
    /* retention (the trigger leader's retention sweep) */
    int64_t retention_finished_ms;
    int64_t retention_ledger_ms;
    int64_t retention_batch;
    int64_t retention_interval_ms;
    int64_t retention_budget_ms;
    int64_t trigger_fire_batch;
    int64_t trigger_lease_ms;
    int64_t trigger_starve_ms;
    int64_t trigger_clock_jump_ms;
    int64_t trigger_misfire_record_max;
    int64_t trigger_lag_interval_ms;
    int64_t trigger_lag_high;
    int64_t trigger_lag_low;
    int64_t trigger_aging_ms;
    int64_t trigger_backlog_alert_depth;
    int64_t trigger_backlog_alert_ms;
    int64_t trigger_coalesce_ms;
    int64_t trigger_coalesce_load;
    /* executor */
    char *executor_groups;
    int64_t executor_slots;
    int64_t executor_queue;
    char *executor_pools;
    char *executor_pool_routes;
    int64_t executor_output_cap;
    int64_t executor_kill_grace_ms;
    int64_t executor_lease_min_ms;
    int64_t executor_lease_max_ms;
    int64_t executor_fence_margin_ms;
    int64_t executor_lease_factor;
    int64_t executor_heartbeat_ms;
    int64_t executor_watermark_cpu;
    int64_t executor_watermark_mem;
    int64_t executor_default_timeout_ms;
    int64_t executor_shutdown_grace_ms;
    int64_t executor_lane_starve_ms;
    int64_t executor_commit_interval_ms;
    char *executor_allow_root;     /* "true"/"false", checked by the executor */
    char *executor_run_user;
    char *executor_run_group;
    /* callback */
    int64_t callback_batch;
    int64_t callback_retry_budget;
    int64_t callback_consume_linger_ms; /* -1: consume.linger.ms */
    int64_t callback_publish_interval_ms;
    char *alert_webhook_url;        /* NULL/"": no webhook */
    char *alert_webhook_secret;     /* secret: never printed or logged */
    int64_t alert_webhook_timeout_ms;
    /* consumers of ax_svc_consume (trigger: submit, callback: attempts) */
    int64_t consume_linger_ms;          /* 0: a batch is what one poll returns */
    int64_t consume_fetch_wait_max_ms;
    int64_t consume_fetch_min_bytes;
    int64_t consume_commit_interval_ms; /* 0: a synchronous commit per batch */
    int64_t producer_linger_ms;         /* non-transactional producers */
    int64_t produce_partition_chunk;    /* 0: Attempt records and results by key */
    int64_t submit_partition_chunk;     /* 0: submissions by key */
    int64_t dispatch_partition_chunk;   /* 0: dispatch records by key */
    int64_t dispatch_transaction_ms;    /* the leader's dispatch transaction window; 0: per batch */
    int64_t dispatch_prime;             /* a window's partitions registered ahead (primers) */
    int64_t dispatch_producers;         /* the leader's transactional producers, in turn */
    int64_t dispatch_overlap;           /* ignored (older files set it) */
    /* api (ax-api, docs/API.md, docs/SECURITY.md) */
    char *api_listen;
    char *api_tokens;           /* NAME:SCOPE:SHA256HEX,... (hashes, not tokens) */
    int64_t api_body_max;
    int64_t api_rate_limit;
    int64_t api_rate_burst;
    int64_t api_threads;        /* handler threads, each with a PostgreSQL connection */
    char *api_tls_cert;
    char *api_tls_key;
    char *api_console_dir;
    char *api_javascript_dir;
    /* retry of servers */
    int64_t pg_statement_timeout_ms; /* 0: none */
    int64_t pg_replan_interval_ms;   /* 0: never */
    int64_t backoff_initial_ms;
    int64_t backoff_max_ms;
    /* pass-through */
    ax_kv_t *kafka;
    size_t n_kafka;
    ax_kv_t *pg;
    size_t n_pg;
} ax_conf_t;

typedef enum { AX_CONF_STR, AX_CONF_INT } ax_conf_type_t;

typedef struct ax_conf_def {
    const char *name;
    ax_conf_type_t type;
    size_t offset;           /* into ax_conf_t */
    const char *def;         /* default, as text; NULL = unset */
    int64_t min, max;        /* for AX_CONF_INT */
    const char *used_by;     /* "all", "trigger", "executor", ... */
    const char *doc;
} ax_conf_def_t;

extern const ax_conf_def_t ax_conf_table[];
extern const size_t ax_conf_table_len;

/* Defaults only. */
void ax_conf_init(ax_conf_t *c);
void ax_conf_free(ax_conf_t *c);

/* Set one key from one source; `origin` names the source in errors. */
int ax_conf_set(ax_conf_t *c, const char *key, const char *value, const char *origin,
                char *errbuf, size_t errlen);
int ax_conf_load_file(ax_conf_t *c, const char *path, int must_exist, char *errbuf, size_t errlen);
int ax_conf_load_env(ax_conf_t *c, char *const *envp, char *errbuf, size_t errlen);

/* 1 if the value of `key` must never be printed or logged. */
int ax_conf_is_secret(const char *key);

/* The value of `key` as it may be printed or logged: "<redacted>" for a
 * secret key; for a URL (a value with "://", or any value of a key ending
 * in "url") only scheme://host[:port], since user info, path and query
 * often carry tokens; else the value. May format into buf. */
const char *ax_conf_shown(const char *key, const char *value, char *buf, size_t len);

/* Print `key = value` lines with secrets redacted, URLs as scheme://host:port. */
void ax_conf_print(const ax_conf_t *c, FILE *out);
/* Print the reference in Markdown (the source of docs/CONFIGURATION.md). */
void ax_conf_reference(FILE *out);
/* Print the options summary used by --help. */
void ax_conf_help(FILE *out, const char *used_by);

/* What the command line asks of the program (ax_conf_args). */
typedef enum {
    AX_CONF_RUN = 0,  /* go on */
    AX_CONF_HELP,     /* --help or -h: print the usage and ax_conf_help, exit 0 */
    AX_CONF_VERSION,  /* --version: print the version, exit 0 */
    AX_CONF_PRINT,    /* --print-config: print ax_conf_print, exit 0 */
} ax_conf_action_t;

/* Command-line handling shared by every program: --config, --set, --help,
 * --version, --print-config. Initialises c and loads the configuration
 * from its sources; consumes those options from argv (the rest is left,
 * compacted, in argv/argc) and says in *ret_action what the program is
 * asked to do (for HELP and VERSION, argv is left as it was). Prints
 * nothing and never exits: on error returns AX_ERR_INVALID (AX_ERR_IO for
 * an unreadable file) with the reason, naming the key and its source, and
 * the program prints it and exits 2. c is initialised on every return:
 * free it with ax_conf_free. ax_conf_from_args (ax/prog.h) does all that
 * for a program's main. */
int ax_conf_args(ax_conf_t *c, int *argc, char **argv, ax_conf_action_t *ret_action,
                 char *errbuf, size_t errlen);

/* Load the configuration again from the same sources as
 * ax_conf_args() with the ORIGINAL argv (a copy taken before that call
 * compacted it): for SIGHUP. On error returns <0 with the reason and leaves
 * *c untouched. */
int ax_conf_reload(ax_conf_t *c, int argc, char *const *argv, char *errbuf, size_t errlen);

/* Call fn once for every key whose value differs between a and b: table
 * keys, and kafka./pg. keys set in b that a lacks or has with another value
 * (a kafka./pg. key only in a is not reported: programs add defaults of
 * their own to those). Values are given as text ("" when unset), as shown
 * by ax_conf_shown ("<redacted>" for secret keys, URLs as
 * scheme://host:port). Returns the number of calls. */
typedef void (*ax_conf_diff_fn)(const char *key, const char *old, const char *now, void *arg);
int ax_conf_diff(const ax_conf_t *a, const ax_conf_t *b, ax_conf_diff_fn fn, void *arg);

/* Copy the value of table key `key` from src into dst, and dst's previous
 * value into src (a swap: both stay valid for ax_conf_free). Returns
 * AX_ERR_INVALID for a key not in the table. */
int ax_conf_swap_key(ax_conf_t *dst, ax_conf_t *src, const char *key);

/* Full topic name for a suffix ("submit" -> "ax.submit"), in a static
 * per-suffix buffer owned by the conf. */
const char *ax_conf_topic(const ax_conf_t *c, const char *suffix, char *buf, size_t len);

/* 1 when `group` is one of the reserved names p0 … p9: they would read as
 * priority lanes (<prefix>dispatch.p1 is the default group's P1 lane), so
 * no job, submission or executor may name them. */
int ax_conf_group_reserved(const char *group);
/* The dispatch topic of an executor group ("default" or NULL: the default
 * group) and priority lane 0..4 (ax/lane.h): <prefix>dispatch[.G][.pN], P2
 * without the lane suffix. */
const char *ax_conf_dispatch_topic(const ax_conf_t *c, const char *group, int prio, char *buf,
                                   size_t len);

/* ax_conf_from_args, for the programs that include only this header. Core
 * code does not see ax/prog.h (it prints and exits). */
#if __has_include("ax/prog.h")
#include "ax/prog.h"
#endif

#endif
