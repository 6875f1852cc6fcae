/*
 * conf.c — the configuration table of every ax program and its parser.
 *
 * The table is the single source of truth for names, types, defaults,
 * bounds and documentation: --help, `axctl config reference` and
 * docs/CONFIGURATION.md all come from it.
 */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ax/common.h"
#include "ax/conf.h"
#include "ax/lane.h"
#include "ax/log.h"
#include "ax/metrics.h"

#define OFF(f) offsetof(ax_conf_t, f)
#define I64MAX INT64_MAX

const ax_conf_def_t ax_conf_table[] = {
    {"log.level", AX_CONF_STR, OFF(log_level), "info", 0, 0, "all",
     "Least severe level logged: debug, info, warn or error."},
    {"log.format", AX_CONF_STR, OFF(log_format), "text", 0, 0, "all",
     "Log lines on stderr: text (time level program: message key=value) or json (one "
     "object per line: time, level, service, message and, about an instance, instance, job "
     "and trace; docs/METRICS.md). Needs a restart."},
    {"metrics.listen", AX_CONF_STR, OFF(metrics_listen), "", 0, 0, "trigger,executor,callback,api",
     "Loopback address HOST:PORT (127.0.0.1:9464, [::1]:9464; port 0 = any free port) on "
     "which the process serves Prometheus metrics at GET /metrics (docs/METRICS.md). Empty: "
     "no metrics at all (every update is a no-op). Needs a restart."},
    {"topic.prefix", AX_CONF_STR, OFF(topic_prefix), "ax.", 0, 0, "all",
     "Prefix of every topic name: <prefix>submit, <prefix>dispatch, <prefix>callback, "
     "<prefix>results, <prefix>dlq; consumer groups <prefix>trigger, <prefix>executor, "
     "<prefix>callback."},
    {"message.max.bytes", AX_CONF_INT, OFF(message_max_bytes), "1048576", 64, 100 << 20, "all",
     "Largest message (value) ax produces or decodes; larger ones go to the dead-letter "
     "topic, and axctl submit refuses a submission whose dispatch record could be larger "
     "(exit 2). Every producer and consumer handle gets librdkafka's message.max.bytes = "
     "this + 65536 (keys, headers, framing; producers batch.size at most that, up to "
     "1000000), and axctl topics create sets max.message.bytes to the same."},
    {"worker.id", AX_CONF_STR, OFF(worker_id), NULL, 0, 0, "all",
     "Name of this process in the database and in logs (default: <hostname>:<pid>)."},
    {"trigger.scan.interval.ms", AX_CONF_INT, OFF(trigger_scan_interval_ms), "1000", 10, 60000,
     "trigger", "Longest time between two looks at the database for due instances."},
    {"trigger.batch", AX_CONF_INT, OFF(trigger_batch), "1000", 1, 100000, "trigger",
     "Most instances inserted or dispatched in one database transaction."},
    {"trigger.sweep.interval.ms", AX_CONF_INT, OFF(trigger_sweep_interval_ms), "2000", 100,
     600000, "trigger",
     "How often expired leases are looked for (instances of a lost executor end TIMEOUT)."},
    {"trigger.sweep.grace.ms", AX_CONF_INT, OFF(trigger_sweep_grace_ms), "10000", 0, 600000,
     "trigger",
     "After the trigger's PostgreSQL connection comes back, expired leases are left alone "
     "this long, so executors that could not renew during the outage renew first."},
    {"retention.finished.ms", AX_CONF_INT, OFF(retention_finished_ms), "604800000", 0, I64MAX,
     "trigger",
     "How long a FINISHED instance (its definition, state row, attempts and submission key) "
     "is kept after it finished and its result was published; then the trigger leader's "
     "retention sweep deletes it. A submission key deduplicates for exactly this long after "
     "its instance finished (and for as long as it is unfinished or unpublished); a "
     "submit-topic partition's consumed-offset watermark (the dedupe of submissions without "
     "an idempotency key) is deleted once it has not moved for this long. Never "
     "deleted: unfinished or unpublished instances, parents or children of a live instance, "
     "instances of a running flow run. 0: never delete (tables grow without bound; "
     "docs/OPERATIONS.md, \"Retention\")."},
    {"retention.ledger.ms", AX_CONF_INT, OFF(retention_ledger_ms), "604800000", 0, I64MAX,
     "trigger",
     "How long a fire-ledger row (job_fire: one per job and nominal fire time, axctl job "
     "fires) is kept after it was decided; each job's latest row is kept whatever its age "
     "(the schedule, misfire and overlap decisions resume from it); a deleted job's rows "
     "all go, its latest too. 0: never delete."},
    {"retention.batch", AX_CONF_INT, OFF(retention_batch), "1000", 10, 100000, "trigger",
     "Most rows the retention sweep examines (and so deletes) in one statement, its own "
     "short transaction."},
    {"retention.interval.ms", AX_CONF_INT, OFF(retention_interval_ms), "1000", 100, 3600000,
     "trigger", "How often the leader's retention sweep runs."},
    {"retention.budget.ms", AX_CONF_INT, OFF(retention_budget_ms), "100", 1, 10000, "trigger",
     "Longest time one run of the retention sweep spends deleting (it stops after the batch "
     "that went past it): with retention.interval.ms, the share of a PostgreSQL backend the "
     "sweep may take. The sweep runs on a thread and connection of its own, so dispatching does "
     "not wait for it; a run still under way when the next is due makes that one skipped."},
    {"trigger.redispatch.after.ms", AX_CONF_INT, OFF(trigger_redispatch_after_ms), "600000", 1000,
     I64MAX, "trigger",
     "A dispatched instance still SCHEDULED (never claimed) after this long is produced "
     "again; duplicates lose their claim."},
    {"trigger.fire.batch", AX_CONF_INT, OFF(trigger_fire_batch), "5000", 1, 100000, "trigger",
     "Most schedule fires recorded in the ledger, inserted and produced as one batch "
     "(one database transaction, one Kafka transaction)."},
    {"trigger.lease.ms", AX_CONF_INT, OFF(trigger_lease_ms), "10000", 1000, 600000, "trigger",
     "Length of the leader lease. The leader renews it every third of this; a standby "
     "takes over once it has expired, and a leader that could not renew stops "
     "dispatching before it expires."},
    {"trigger.starve.ms", AX_CONF_INT, OFF(trigger_starve_ms), "0", 0, 600000, "trigger",
     "A leader whose event loop did not come round for this long (a tick this late, or a "
     "statement this slow) steps down and gives the lease back, rather than keep a lease it "
     "does not use; its lease is renewed by a thread of its own meanwhile. Below "
     "trigger.lease.ms; 0 = two thirds of trigger.lease.ms."},
    {"trigger.clock.jump.ms", AX_CONF_INT, OFF(trigger_clock_jump_ms), "2000", 100, 86400000,
     "trigger",
     "The trigger keeps time as PostgreSQL's clock carried forward by CLOCK_MONOTONIC. When "
     "PostgreSQL's clock disagrees with it by more than this, the schedule is rebuilt from "
     "the fire ledger. A local wall-clock jump beyond this is logged; it does not move the "
     "schedule."},
    {"trigger.misfire.record.max", AX_CONF_INT, OFF(trigger_misfire_record_max), "1000", 1,
     1000000, "trigger",
     "Most missed fire times of one job recorded one by one in the ledger after an outage; "
     "older ones are summed up in the detail of the oldest recorded row."},
    {"trigger.lag.interval.ms", AX_CONF_INT, OFF(trigger_lag_interval_ms), "500", 50, 60000,
     "trigger",
     "How often the leader reads the executor group's lag per priority lane (end offsets "
     "against committed offsets of the lane topics). While a lane is held back (over its "
     "high mark, deferred instances, or due instances waiting for room) five times as "
     "often, but not more often than every 50 ms."},
    {"trigger.lag.high", AX_CONF_INT, OFF(trigger_lag_high), "10000", 1, I64MAX, "trigger",
     "High mark of a lane's lag, messages: at or above it, due instances of that priority "
     "(P1-P4; P0 never) are deferred: kept SCHEDULED in PostgreSQL, not produced."},
    {"trigger.lag.low", AX_CONF_INT, OFF(trigger_lag_low), "2000", 0, I64MAX, "trigger",
     "Low mark of a lane's lag: a deferring lane releases its instances once its lag is at "
     "or below this (must be below trigger.lag.high)."},
    {"trigger.aging.ms", AX_CONF_INT, OFF(trigger_aging_ms), "60000", 0, I64MAX, "trigger",
     "Aging of deferred instances: each period waited raises an instance one priority level, "
     "so a deferred P-n instance waits at most n periods (then it is released on the "
     "nearest lane that is not deferring). 0 = no aging."},
    {"trigger.backlog.alert.depth", AX_CONF_INT, OFF(trigger_backlog_alert_depth), "0", 0,
     I64MAX, "trigger",
     "Backlog-age alert: when a lane's lag plus its deferred instances stay above this for "
     "trigger.backlog.alert.ms, the leader raises an alert (webhook). 0 = off."},
    {"trigger.backlog.alert.ms", AX_CONF_INT, OFF(trigger_backlog_alert_ms), "60000", 1, I64MAX,
     "trigger", "How long the backlog must stay above trigger.backlog.alert.depth."},
    {"trigger.coalesce.ms", AX_CONF_INT, OFF(trigger_coalesce_ms), "100", 1, 60000, "trigger",
     "Mixed precision: the coarse tick onto which fires of tolerant jobs (job tolerance > 0) "
     "are coalesced while the trigger is loaded; a fire moves by at most its job's "
     "tolerance."},
    {"trigger.coalesce.load", AX_CONF_INT, OFF(trigger_coalesce_load), "2000", 0, I64MAX,
     "trigger",
     "Fires per second above which the trigger counts as loaded and coalesces tolerant "
     "jobs; 0 = always coalesce them."},
    {"executor.groups", AX_CONF_STR, OFF(executor_groups), "default", 0, 0, "executor",
     "Executor groups this executor serves, comma-separated. Group default reads "
     "<prefix>dispatch; group G reads <prefix>dispatch.G (a job names its group); each "
     "with its priority lanes .p0 .p1 .p3 .p4 (P2 is the plain name). Names p0-p9 are "
     "refused."},
    {"executor.slots", AX_CONF_INT, OFF(executor_slots), "8", 1, 4096, "executor",
     "Worker slots of the command pool: commands one executor runs at once. Reloaded on "
     "SIGHUP."},
    {"executor.queue", AX_CONF_INT, OFF(executor_queue), "64", 0, 1000000, "executor",
     "Claimed instances one pool holds beyond its slots (the command pool, and pools in "
     "executor.pools that name no queue). When a pool is full, the partitions feeding it "
     "are paused until it drains. Reloaded on SIGHUP."},
    {"executor.pools", AX_CONF_STR, OFF(executor_pools), "http:64:256,plugin:256:4096", 0, 0,
     "executor",
     "More pools as NAME:SLOTS[:QUEUE], comma-separated. A pool named after a handler kind "
     "(command, http, plugin) runs that kind; other pools run the jobs routed to them by "
     "executor.pool.routes. Reloaded on SIGHUP."},
    {"executor.pool.routes", AX_CONF_STR, OFF(executor_pool_routes), "", 0, 0, "executor",
     "JOB=POOL pairs, comma-separated: the job's instances run in that pool (so a slow job "
     "cannot take the slots of others). Reloaded on SIGHUP."},
    {"executor.output.cap", AX_CONF_INT, OFF(executor_output_cap), "65536", 0, 16 << 20,
     "executor",
     "Bytes of a command's stdout+stderr kept (the rest is read and dropped). An output "
     "whose result would exceed message.max.bytes is cut to fit (logged)."},
    {"executor.kill.grace.ms", AX_CONF_INT, OFF(executor_kill_grace_ms), "2000", 1, 600000,
     "executor", "Time between SIGTERM and SIGKILL of a timed-out command's process group."},
    {"executor.lease.min.ms", AX_CONF_INT, OFF(executor_lease_min_ms), "5000", 500, 86400000,
     "executor",
     "Shortest lease of a claimed instance. The executor renews its leases (one statement) "
     "every third of this; a dead executor's instances are recovered (TIMEOUT, worker_lost) "
     "once their lease expired, by the trigger's next sweep."},
    {"executor.fence.margin.ms", AX_CONF_INT, OFF(executor_fence_margin_ms), "1000", 0, 600000,
     "executor",
     "Fencing: a running handler whose lease could not be renewed is stopped by a thread "
     "of its own, even while the executor waits for an unreachable PostgreSQL, at 95% of "
     "its lease minus this, counted from before the last renewal that succeeded was sent "
     "(a command's process group killed, an http request's connection shut down, a "
     "plugin's should_stop() turned 1), so it is gone before its lease can expire and its "
     "instance run elsewhere; a plugin still inside run() at the lease minus half of this "
     "makes the executor exit with status 3 (docs/ARCHITECTURE.md, \"Fencing under "
     "partitions\"). At most half the lease is taken off."},
    {"executor.lease.max.ms", AX_CONF_INT, OFF(executor_lease_max_ms), "60000", 500, 86400000,
     "executor", "Longest lease of a claimed instance."},
    {"executor.lease.factor", AX_CONF_INT, OFF(executor_lease_factor), "3", 1, 100, "executor",
     "A job's lease is this multiple of its observed average run time, within "
     "executor.lease.min.ms and executor.lease.max.ms."},
    {"executor.heartbeat.ms", AX_CONF_INT, OFF(executor_heartbeat_ms), "2000", 100, 600000,
     "executor",
     "How often an executor records CPU, memory, pool occupancy and queue depth in the "
     "worker table and checks its watermarks. The trigger reads it too: an expired lease "
     "counts as a lost worker only once that worker's heartbeat is 3 x this old."},
    {"executor.watermark.cpu", AX_CONF_INT, OFF(executor_watermark_cpu), "0", 0, 100,
     "executor",
     "Machine CPU busy % above which the executor stops fetching (pauses its partitions) "
     "until it is 5 points below; 0 = off. Reloaded on SIGHUP."},
    {"executor.watermark.mem", AX_CONF_INT, OFF(executor_watermark_mem), "0", 0, 100,
     "executor",
     "Machine memory in use % above which the executor stops fetching, as for "
     "executor.watermark.cpu; 0 = off. Reloaded on SIGHUP."},
    {"submit.default.timeout.ms", AX_CONF_INT, OFF(executor_default_timeout_ms), "3600000", 1,
     I64MAX, "trigger", "Timeout of an inline command whose submission names none."},
    {"executor.shutdown.grace.ms", AX_CONF_INT, OFF(executor_shutdown_grace_ms), "30000", 0,
     86400000, "executor",
     "On SIGTERM, how long running commands may finish before they are cancelled."},
    {"executor.lane.starve.ms", AX_CONF_INT, OFF(executor_lane_starve_ms), "1000", 10, 600000,
     "executor",
     "Executors fetch the most urgent priority lanes first: a lane is paused while a higher "
     "lane has a backlog, but never longer than this; then it is served again for a round. "
     "Reloaded on SIGHUP."},
    {"executor.allow.root", AX_CONF_STR, OFF(executor_allow_root), "false", 0, 0, "executor",
     "true lets the executor start as root (uid 0); it refuses to (exit 2) otherwise, since "
     "its commands would run as root. Set executor.run.user too to run them as another "
     "user. Read at start only. See docs/SECURITY.md."},
    {"executor.run.user", AX_CONF_STR, OFF(executor_run_user), NULL, 0, 0, "executor",
     "User (name or uid) that commands run as: the child sets its groups, gid and uid "
     "before it execs the argv. Needs an executor running as root (executor.allow.root); "
     "unset = the executor's own user. An unknown user exits 2 at start. Read at start only."},
    {"executor.run.group", AX_CONF_STR, OFF(executor_run_group), NULL, 0, 0, "executor",
     "Group (name or gid) that commands run as; unset = the primary group of "
     "executor.run.user (with its supplementary groups), or the executor's own. An unknown "
     "group exits 2 at start. Read at start only."},
    {"callback.retry.budget", AX_CONF_INT, OFF(callback_retry_budget), "10000", 0, 100000000,
     "callback",
     "Most retries waiting to run in this deployment at once. Beyond it a failed attempt "
     "that would be retried ends FAILED (retry budget exhausted) and an alert is raised, "
     "so an outage downstream cannot become a retry storm."},
    {"callback.batch", AX_CONF_INT, OFF(callback_batch), "1000", 1, 100000, "callback",
     "Most attempt results persisted in one database statement."},
    {"callback.publish.interval.ms", AX_CONF_INT, OFF(callback_publish_interval_ms), "100", 0,
     1000, "callback",
     "The results publisher's window: ended instances wait in the outbox (durable) for at "
     "most about this long, so that one Kafka transaction carries all of them (its cost at "
     "the broker is per partition and transaction, not per result); a transaction is begun "
     "at once when 5,000 results wait. Adds up to this much between FINISHED and the result "
     "on <prefix>results. 0 = after every consumed batch (the publisher's thread is woken by "
     "each). Read at start only."},
    {"alert.webhook.url", AX_CONF_STR, OFF(alert_webhook_url), NULL, 0, 0, "trigger,callback",
     "When set, every alert (final_failure, retry_budget, circuit_open) is also POSTed as "
     "JSON to this http:// URL (https is not supported: the callback refuses to start), "
     "asynchronously and best effort: a failed delivery is retried 3 times (after 1, 2 and "
     "4 s), then dropped with a warning. See docs/ALERTS.md."},
    {"alert.webhook.secret", AX_CONF_STR, OFF(alert_webhook_secret), NULL, 0, 0, "trigger,callback",
     "When set, each webhook carries X-Ax-Signature: sha256=<hex HMAC-SHA256 of "
     "\"<X-Ax-Timestamp>.<body>\" keyed with this secret>, for the receiver to verify "
     "(docs/ALERTS.md). Never printed or logged."},
    {"alert.webhook.timeout.ms", AX_CONF_INT, OFF(alert_webhook_timeout_ms), "5000", 100,
     300000, "trigger,callback",
     "Longest wait for one webhook delivery (connect, send and response); beyond it the "
     "delivery counts as failed and is retried."},
    {"executor.commit.interval.ms", AX_CONF_INT, OFF(executor_commit_interval_ms), "100", 1,
     10000, "executor",
     "Longest time between a run's Attempt record being acknowledged by Kafka and the "
     "commit of its dispatch offset: the offsets of every run acknowledged meanwhile go in "
     "one asynchronous commit, at most one per this interval (while stopping, at once). A "
     "crash redelivers up to this much of finished work, whose duplicates lose their claim; "
     "the leader's lag of a lane (backpressure) counts those records until the commit. "
     "Read at start only."},
    {"callback.consume.linger.ms", AX_CONF_INT, OFF(callback_consume_linger_ms), "50", -1, 1000,
     "callback",
     "consume.linger.ms of the callback's consumer of attempt results (its batch window), "
     "on its own: the callback is not on the fire-to-start path, so it waits longer than "
     "the trigger (at 1,000 jobs/s a persist statement per 50 ms, not per 20), at the "
     "price of up to this much between a run's end and its FINISHED row at low load "
     "(none under load, where batches fill at once). -1 = consume.linger.ms. Read at "
     "start only."},
    {"consume.linger.ms", AX_CONF_INT, OFF(consume_linger_ms), "20", 0, 1000, "trigger,callback",
     "Longest a batch of consumed records (the trigger's submissions, the callback's attempt "
     "results) waits to fill before it is processed: it is processed as soon as it holds "
     "trigger.batch (callback.batch) records or its first record has waited this long, "
     "whichever comes first. Fewer, larger batches: fewer database statements and Kafka "
     "transactions per record at low load, at the price of up to this much latency "
     "(submit to dispatch, finish to result); under load batches fill at once. The window "
     "is kept by the service, not by the broker: fetches are answered as soon as a record "
     "is there (consume.fetch.min.bytes, consume.fetch.wait.max.ms). 0 = a batch is what "
     "one poll returns. Does not apply to the executor. Read at start only."},
    {"consume.fetch.wait.max.ms", AX_CONF_INT, OFF(consume_fetch_wait_max_ms), "500", 1, 10000,
     "trigger,callback",
     "librdkafka's fetch.wait.max.ms of those consumers (unless kafka.* says otherwise): how "
     "long the broker holds a fetch that finds fewer than consume.fetch.min.bytes. With "
     "the default minimum of 1 byte a fetch returns as soon as a record is there, so this "
     "only paces an idle consumer: one fetch per this interval and consumer (the broker "
     "spent ~5.5 % of a core more on an idle ax when these fetches were answered every 20 "
     "and 50 ms; BENCHMARKS.md, \"The broker's idle fetches\"). Read at start only."},
    {"consume.fetch.min.bytes", AX_CONF_INT, OFF(consume_fetch_min_bytes), "1", 1, 100 << 20,
     "trigger,callback",
     "librdkafka's fetch.min.bytes of those consumers (unless kafka.* says otherwise): the "
     "broker answers a fetch when this much is there or after consume.fetch.wait.max.ms. "
     "Above 1, every record may wait up to consume.fetch.wait.max.ms at the broker before "
     "the service sees it. Read at start only."},
    {"consume.commit.interval.ms", AX_CONF_INT, OFF(consume_commit_interval_ms), "1000", 0,
     60000, "trigger,callback",
     "How often the offsets of processed batches are committed (librdkafka's auto commit of "
     "the offsets stored after each durable batch; also on rebalance and shutdown). A crash "
     "redelivers up to this much of already processed records, which is harmless: their "
     "processing is idempotent. 0 = one synchronous commit after every batch. Read at "
     "start only."},
    {"producer.linger.ms", AX_CONF_INT, OFF(producer_linger_ms), "20", 0, 1000, "all",
     "librdkafka's linger.ms of the non-transactional producers (the executor's Attempt "
     "records to <prefix>callback, dead letters, axctl): how long records wait to share "
     "a produce request (librdkafka sends one request per partition). Adds up to this much "
     "between an executor's finish and the callback's read of it, not to fire-to-start. The "
     "transactional producers keep their own: the trigger's dispatch none (a batch's "
     "records go out as they are produced; with dispatch.transaction.ms above 0 executors "
     "read them before the window commits), the "
     "callback's results 5 ms (a transaction's records, flushed by its commit). "
     "kafka.linger.ms overrides all of them."},
    {"produce.partition.chunk", AX_CONF_INT, OFF(produce_partition_chunk), "128", 0, 1000000,
     "executor,callback",
     "Attempt records (the executor's, to <prefix>callback) and results (the callback's, to "
     "<prefix>results) go to their topic's partitions in turn, this many to a partition, "
     "instead of each to its instance id's partition: a producer batch or Kafka "
     "transaction costs the broker a request (and in a transaction a verification and a "
     "marker) per partition it touches, so at low load it touches one or two, under load "
     "all of them. Records keep their keys. 0 = by key. Measured at 1,000 jobs/s: "
     "produce requests to about 0.6 x, partition verifications to about 0.3 x; at full "
     "load no consistent cost over four series (BENCHMARKS.md, \"Records in chunks per "
     "partition\" and \"Fire-to-start and the dispatch transaction\"). Ignored when "
     "kafka.partitioner is set. Read at start only."},
    {"submit.partition.chunk", AX_CONF_INT, OFF(submit_partition_chunk), "128", 0, 1000000,
     "axctl,api",
     "Submissions without an idempotency key (axctl submit, --count N included; the API's "
     "POST /instances) go to the submit topic's partitions in turn, this many to a "
     "partition, instead of each to its trace id's partition, so a burst of them shares a "
     "produce request per linger instead of one per partition (keyed over 8 partitions, "
     "1,000 submissions a second cost the broker ~240 produce requests a second, chunked "
     "~50). Nothing depends on their partition: such a submission is deduplicated by its "
     "partition and offset, whichever partition it is. Submissions with an idempotency key "
     "keep it as their key. 0 = by key. Ignored when kafka.partitioner is set."},
    {"dispatch.partition.chunk", AX_CONF_INT, OFF(dispatch_partition_chunk), "32", 0, 1000000,
     "trigger",
     "The same for the trigger's dispatch records of jobs without a routing field (a "
     "routing field keeps its key's partition): a dispatch transaction of n records "
     "touches at most n / this + 2 partitions of a lane. Smaller spreads a small burst "
     "over more partitions, so over more executors of the group (long-running jobs); "
     "larger costs the broker less per transaction (measured with 32). 1 = one record per "
     "partition in turn; 0 = by instance id. "
     "Ignored when kafka.partitioner is set. Read at start only."},
    {"dispatch.transaction.ms", AX_CONF_INT, OFF(dispatch_transaction_ms), "1000", 0, 10000,
     "trigger,executor",
     "How long the leader keeps one Kafka transaction open across dispatch batches of the "
     "ingest (submissions, the timer topic) before committing it: its records are produced "
     "once their PostgreSQL commit returned and read by executors as soon as the broker has "
     "them (isolation.level read_uncommitted), so a batch pays no transaction of its own "
     "and the commit (partitions registered, EndTxn, markers) is paid once per window. The "
     "transactional.id still fences a stale leader's producer; what a failed or fenced "
     "commit leaves is produced again (instances undone, the due scan; executors drop what "
     "they already claimed). Other dispatches (due scan, fires) commit at once. 0: one "
     "transaction per batch, committed before the batch is settled, and executors read "
     "committed records only. Set the same value for the trigger and the executors: an "
     "executor with 0 sees a window's records only at its commit. Read at start only."},
    {"dispatch.prime", AX_CONF_INT, OFF(dispatch_prime), "1", 0, 1, "trigger",
     "1: when a dispatch window (dispatch.transaction.ms) that carried dispatches ends by "
     "its length or size, the leader begins the next window with one empty record (key "
     "ax-primer, no "
     "value) on each partition the window's records went to, so that those partitions are "
     "registered with the new Kafka transaction (AddPartitionsToTxn, the broker's "
     "verification) before a batch's records wait for it; executors skip these records. "
     "With dispatch.producers=2 the next window is begun and primed on the other producer "
     "before this one's commit (on the partitions whose delivery reports are in; aborted if "
     "that commit fails); with 1, or no report in yet, right after the commit. "
     "At 1,000 jobs/s, 32 alternating pairs: fire-to-start p99 14.45 -> 12.5 ms (medians), "
     "the run's slowest job 36.7 -> 24.2 ms (BENCHMARKS.md). "
     "0: a window's first record on each partition registers it (so too with kafka.partitioner "
     "set: a primer would go to its key's partition). An executor of a release "
     "before 2026-12-05 dead-letters the primers: set 0 until every executor is upgraded "
     "(docs/DEPLOYMENT.md). Read at start only."},
    {"dispatch.producers", AX_CONF_INT, OFF(dispatch_producers), "2", 1, 2, "trigger",
     "The leader's transactional producers for dispatch when dispatch.transaction.ms is "
     "above 0: with 2 (ids <prefix>trigger and <prefix>trigger.1) each Kafka transaction "
     "begins on the one whose last transaction ended earlier, so the primers "
     "(dispatch.prime) that begin a window right after the last one's commit do not meet "
     "that commit's markers still being written: on one id their AddPartitionsToTxn was "
     "answered CONCURRENT_TRANSACTIONS in every window, and librdkafka (2.0.2) tries again "
     "only after 20 ms, with the batch's records waiting. At 1,000 jobs/s, 18 alternating "
     "pairs: fire-to-start p99 10.05 -> 9.65 ms (medians), the slowest job not lower "
     "(BENCHMARKS.md). With 2 and dispatch.prime 1, the window after one that carried "
     "dispatches is begun on the other producer, and primed, before that one's commit, so "
     "that the next window's partitions are registered while the commit runs (20 "
     "alternating pairs at 1,000 jobs/s: p99 14.4 -> 12.7 ms, p50 5.85 -> 5.65 ms, the "
     "run's slowest job 31.7 -> 26.0 ms, medians). A leader initialises both ids when it takes the lease (fencing a "
     "stale leader's of either); if the second cannot be initialised (an ACL naming the "
     "first id only) it dispatches through the first alone, warned. 1, or "
     "dispatch.transaction.ms 0 (executors read committed): one producer, <prefix>trigger. "
     "Read at start only."},
    {"dispatch.overlap", AX_CONF_INT, OFF(dispatch_overlap), "0", 0, 1, "trigger",
     "Ignored since dispatch.transaction.ms (2026-12-04), accepted so older configuration "
     "files still load: the leader produces a batch's dispatch records only after the "
     "PostgreSQL commit of their marks (1 began producing before it)."},
    {"api.listen", AX_CONF_STR, OFF(api_listen), "127.0.0.1:8480", 0, 0, "api",
     "HOST:PORT ax-api listens on for the REST API (/api/v1), /healthz, /readyz and the web "
     "console. Plain HTTP unless api.tls.cert and api.tls.key are set."},
    {"api.tokens", AX_CONF_STR, OFF(api_tokens), NULL, 0, 0, "api",
     "The bearer tokens ax-api accepts, as NAME:SCOPE:SHA256HEX entries separated by commas: "
     "NAME (letters, digits, . _ -) is logged with every mutating call, SCOPE is read (GET "
     "only) or admin (everything), SHA256HEX the lower-case hex SHA-256 of the token (the "
     "token itself is never stored). `axctl api token create NAME --scope admin|read` prints "
     "a new token and its entry. Without any entry every /api/v1 request is refused (401). "
     "See docs/SECURITY.md."},
    {"api.body.max", AX_CONF_INT, OFF(api_body_max), "1048576", 1024, 64 << 20, "api",
     "Largest request body ax-api reads, in bytes; a larger one is refused with 413."},
    {"api.rate.limit", AX_CONF_INT, OFF(api_rate_limit), "200", 1, 1000000, "api",
     "Requests per second each token may make on average (a token bucket refilled at this "
     "rate); beyond it ax-api answers 429 with Retry-After."},
    {"api.rate.burst", AX_CONF_INT, OFF(api_rate_burst), "400", 1, 10000000, "api",
     "Requests a token may make at once above api.rate.limit (the bucket's size)."},
    {"api.threads", AX_CONF_INT, OFF(api_threads), "4", 1, 64, "api",
     "Threads that run ax-api's handlers, each with its own PostgreSQL connection: that many "
     "requests wait for PostgreSQL at once (the loop parses, authorizes and writes the "
     "replies). Routes that produce to Kafka or read the dead-letter topic run on the loop."},
    {"api.tls.cert", AX_CONF_STR, OFF(api_tls_cert), NULL, 0, 0, "api",
     "PEM certificate chain file: with api.tls.key, ax-api serves HTTPS only (TLS 1.2 or "
     "later). Give both or neither."},
    {"api.tls.key", AX_CONF_STR, OFF(api_tls_key), NULL, 0, 0, "api",
     "PEM private key file of api.tls.cert (keep it 0600). The path is shown, never the key."},
    {"api.console.dir", AX_CONF_STR, OFF(api_console_dir), NULL, 0, 0, "api",
     "Directory of the web console's static files, served at / and /console/ (unset: no "
     "console, 404)."},
    {"api.javascript.dir", AX_CONF_STR, OFF(api_javascript_dir), "/usr/share/javascript", 0, 0,
     "api",
     "Directory served read-only at /javascript/ for the console: Debian's packaged "
     "JavaScript libraries (e.g. libjs-chart.js)."},
    {"db.statement.timeout.ms", AX_CONF_INT, OFF(pg_statement_timeout_ms), "5000", 0, 3600000,
     "all",
     "statement_timeout of every PostgreSQL session of a service (and of axctl): a statement "
     "running longer is cancelled and retried like any other transient database error, so no "
     "statement can hold a service's loop; keep it below trigger.starve.ms (a slower "
     "statement starves the leader trigger, which then steps down). 0 = no limit."},
    {"db.replan.interval.ms", AX_CONF_INT, OFF(pg_replan_interval_ms), "60000", 0, 86400000,
     "all",
     "A statement the store runs on a cached generic plan (dispatch.ingest) is prepared "
     "again on its connection when it last was this long ago, so its plan is made anew with "
     "the tables as they are: one made on empty tables (a fresh or restored database) reads "
     "them sequentially and would otherwise be kept until PostgreSQL next analyzes them. "
     "0 = never."},
    {"backoff.initial.ms", AX_CONF_INT, OFF(backoff_initial_ms), "200", 1, 60000, "all",
     "First wait before retrying an unreachable PostgreSQL or Kafka."},
    {"backoff.max.ms", AX_CONF_INT, OFF(backoff_max_ms), "10000", 1, 600000, "all",
     "Cap of the doubling wait between retries of an unreachable server."},
};
const size_t ax_conf_table_len = AX_ARRAY_SIZE(ax_conf_table);

static const ax_conf_def_t *conf_find(const char *key) {
    for (size_t i = 0; i < ax_conf_table_len; i++)
        if (strcmp(ax_conf_table[i].name, key) == 0)
            return &ax_conf_table[i];
    return NULL;
}

static int conf_apply(ax_conf_t *c, const ax_conf_def_t *d, const char *value, const char *origin,
                      char *errbuf, size_t errlen) {
    char *p = (char *)c + d->offset;
    if (d->type == AX_CONF_STR) {
        char **s = (char **)p;
        char *dup = strdup(value);
        if (!dup)
            return AX_ERR_NOMEM;
        free(*s);
        *s = dup;
        return 0;
    }
    errno = 0;
    char *end;
    long long v = strtoll(value, &end, 10);
    if (errno || end == value || *end != '\0')
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                         "%s: %s: '%s' is not an integer", origin, d->name, value);
    if (v < d->min || v > d->max)
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                         "%s: %s: %lld is out of range [%lld, %lld]", origin, d->name, v,
                         (long long)d->min, (long long)d->max);
    *(int64_t *)p = v;
    return 0;
}

void ax_conf_init(ax_conf_t *c) {
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < ax_conf_table_len; i++)
        if (ax_conf_table[i].def)
            conf_apply(c, &ax_conf_table[i], ax_conf_table[i].def, "default", NULL, 0);
}

static void kv_free(ax_kv_t *kv, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(kv[i].key);
        free(kv[i].value);
    }
    free(kv);
}

void ax_conf_free(ax_conf_t *c) {
    if (!c)
        return;
    for (size_t i = 0; i < ax_conf_table_len; i++)
        if (ax_conf_table[i].type == AX_CONF_STR)
            free(*(char **)((char *)c + ax_conf_table[i].offset));
    kv_free(c->kafka, c->n_kafka);
    kv_free(c->pg, c->n_pg);
    memset(c, 0, sizeof *c);
}

static int kv_set(ax_kv_t **kv, size_t *n, const char *key, const char *value) {
    for (size_t i = 0; i < *n; i++)
        if (strcmp((*kv)[i].key, key) == 0) {
            char *v = strdup(value);
            if (!v)
                return AX_ERR_NOMEM;
            free((*kv)[i].value);
            (*kv)[i].value = v;
            return 0;
        }
    ax_kv_t *nkv = realloc(*kv, (*n + 1) * sizeof **kv);
    if (!nkv)
        return AX_ERR_NOMEM;
    *kv = nkv;
    nkv[*n].key = strdup(key);
    nkv[*n].value = strdup(value);
    if (!nkv[*n].key || !nkv[*n].value) {
        free(nkv[*n].key);
        free(nkv[*n].value);
        return AX_ERR_NOMEM;
    }
    (*n)++;
    return 0;
}

int ax_conf_set(ax_conf_t *c, const char *key, const char *value, const char *origin,
                char *errbuf, size_t errlen) {
    if (strncmp(key, "kafka.", 6) == 0 && key[6])
        return kv_set(&c->kafka, &c->n_kafka, key + 6, value);
    if (strncmp(key, "pg.", 3) == 0 && key[3])
        return kv_set(&c->pg, &c->n_pg, key + 3, value);
    const ax_conf_def_t *d = conf_find(key);
    if (!d)
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                         "%s: unknown configuration key '%s' (see --help)", origin, key);
    if (strcmp(key, "log.level") == 0) {
        ax_log_level_t l;
        if (ax_log_level_parse(value, &l) < 0)
            return ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                             "%s: log.level: '%s' is not one of debug, info, warn, error",
                             origin, value);
    }
    if (strcmp(key, "log.format") == 0 && strcmp(value, "text") != 0 &&
        strcmp(value, "json") != 0)
        return ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                         "%s: log.format: '%s' is not one of text, json", origin, value);
    if (strcmp(key, "metrics.listen") == 0) {
        char host[256], why[300];
        int port;
        if (ax_metrics_listen_parse(value, host, sizeof host, &port, why, sizeof why) < 0)
            return ax_seterr(errbuf, errlen, AX_ERR_INVALID, "%s: metrics.listen: %s", origin,
                             why);
    }
    return conf_apply(c, d, value, origin, errbuf, errlen);
}

static char *trim(char *s) {
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

int ax_conf_load_file(ax_conf_t *c, const char *path, int must_exist, char *errbuf,
                      size_t errlen) {
    FILE *f = fopen(path, "r");
    if (!f) {
        if (!must_exist && errno == ENOENT)
            return 0;
        return ax_seterr(errbuf, errlen, AX_ERR_IO, "cannot read configuration file %s: %s", path,
                         strerror(errno));
    }
    char *line = NULL, origin[600];
    size_t cap = 0;
    int lineno = 0, rc = 0;
    while (getline(&line, &cap, f) >= 0) {
        lineno++;
        snprintf(origin, sizeof origin, "%s:%d", path, lineno);
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *s = trim(line);
        if (!*s)
            continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            rc = ax_seterr(errbuf, errlen, AX_ERR_INVALID, "%s: expected 'key = value'", origin);
            break;
        }
        *eq = '\0';
        char *key = trim(s), *value = trim(eq + 1);
        if ((rc = ax_conf_set(c, key, value, origin, errbuf, errlen)) < 0)
            break;
    }
    if (rc == 0 && ferror(f))
        rc = ax_seterr(errbuf, errlen, AX_ERR_IO, "cannot read configuration file %s: %s", path,
                       strerror(errno));
    free(line);
    fclose(f);
    return rc;
}

/* AXCONF_FOO_BAR -> the table key whose upper-cased, '.'->'_' form matches;
 * else kafka./pg. pass-through. */
int ax_conf_load_env(ax_conf_t *c, char *const *envp, char *errbuf, size_t errlen) {
    static const char prefix[] = "AXCONF_";
    for (char *const *e = envp; e && *e; e++) {
        if (strncmp(*e, prefix, sizeof prefix - 1) != 0)
            continue;
        const char *name = *e + sizeof prefix - 1;
        const char *eq = strchr(name, '=');
        if (!eq)
            continue;
        size_t nlen = (size_t)(eq - name);
        char key[256], origin[300];
        if (nlen == 0 || nlen >= sizeof key - 8)
            return ax_seterr(errbuf, errlen, AX_ERR_INVALID, "environment: bad variable %.*s",
                             (int)(nlen + sizeof prefix - 1), *e);
        snprintf(origin, sizeof origin, "environment %s%.*s", prefix, (int)nlen, name);
        const char *match = NULL;
        for (size_t i = 0; i < ax_conf_table_len && !match; i++) {
            const char *n = ax_conf_table[i].name;
            if (strlen(n) != nlen)
                continue;
            size_t j = 0;
            for (; j < nlen; j++) {
                char want = n[j] == '.' ? '_' : (char)toupper((unsigned char)n[j]);
                if (name[j] != want)
                    break;
            }
            if (j == nlen)
                match = n;
        }
        if (match) {
            snprintf(key, sizeof key, "%s", match);
        } else if (nlen > 6 && strncmp(name, "KAFKA_", 6) == 0) {
            snprintf(key, sizeof key, "kafka.%.*s", (int)(nlen - 6), name + 6);
            for (char *k = key + 6; *k; k++)
                *k = *k == '_' ? '.' : (char)tolower((unsigned char)*k);
        } else if (nlen > 3 && strncmp(name, "PG_", 3) == 0) {
            snprintf(key, sizeof key, "pg.%.*s", (int)(nlen - 3), name + 3);
            for (char *k = key + 3; *k; k++)
                *k = (char)tolower((unsigned char)*k);
        } else {
            return ax_seterr(errbuf, errlen, AX_ERR_INVALID,
                             "%s: unknown configuration key (see --help)", origin);
        }
        int rc = ax_conf_set(c, key, eq + 1, origin, errbuf, errlen);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int ax_conf_is_secret(const char *key) {
    return strstr(key, "password") || strstr(key, "secret") || strstr(key, "sasl.oauthbearer") ||
           strstr(key, "ssl.key") || strstr(key, "passfile");
}

const char *ax_conf_shown(const char *key, const char *value, char *buf, size_t len) {
    if (!value || !*value)
        return "";
    if (ax_conf_is_secret(key))
        return "<redacted>";
    size_t kl = strlen(key);
    const char *sep = strstr(value, "://");
    if (!sep && !(kl >= 3 && strcmp(key + kl - 3, "url") == 0))
        return value;
    if (!sep || sep == value)
        return "<not shown>"; /* a URL key whose value is no URL: it may hold anything */
    /* scheme://host[:port] only: user info, path and query may carry tokens */
    const char *auth = sep + 3, *end = auth + strcspn(auth, "/?#");
    for (const char *a = auth; a < end; a++)
        if (*a == '@')
            auth = a + 1;
    snprintf(buf, len, "%.*s://%.*s", (int)(sep - value), value, (int)(end - auth), auth);
    return buf;
}

void ax_conf_print(const ax_conf_t *c, FILE *out) {
    char buf[600];
    for (size_t i = 0; i < ax_conf_table_len; i++) {
        const ax_conf_def_t *d = &ax_conf_table[i];
        const char *p = (const char *)c + d->offset;
        if (d->type == AX_CONF_STR) {
            const char *s = *(char *const *)p;
            fprintf(out, "%s = %s\n", d->name, ax_conf_shown(d->name, s, buf, sizeof buf));
        } else {
            fprintf(out, "%s = %lld\n", d->name, (long long)*(const int64_t *)p);
        }
    }
    for (size_t i = 0; i < c->n_kafka; i++)
        fprintf(out, "kafka.%s = %s\n", c->kafka[i].key,
                ax_conf_shown(c->kafka[i].key, c->kafka[i].value, buf, sizeof buf));
    for (size_t i = 0; i < c->n_pg; i++)
        fprintf(out, "pg.%s = %s\n", c->pg[i].key,
                ax_conf_shown(c->pg[i].key, c->pg[i].value, buf, sizeof buf));
}

static void fmt_range(const ax_conf_def_t *d, char *buf, size_t len) {
    if (d->type != AX_CONF_INT)
        snprintf(buf, len, "text");
    else if (d->max == I64MAX)
        snprintf(buf, len, "integer ≥ %lld", (long long)d->min);
    else
        snprintf(buf, len, "integer %lld–%lld", (long long)d->min, (long long)d->max);
}

void ax_conf_reference(FILE *out) {
    fputs("# Configuration reference\n\n"
          "<!-- generated by `axctl config reference`; tests/unit/test_conf checks it is current -->\n\n"
          "Every ax program reads one file of `key = value` lines (`#` starts a comment): the\n"
          "file given with `--config FILE`, else `$AX_CONFIG`, else the default path compiled in\n"
          "(`var/ax.conf` of the source tree, which `infra/up` writes). Environment variables\n"
          "`AXCONF_<KEY>` (key upper-cased, `.` → `_`) override the file, and `--set key=value`\n"
          "overrides both. An unknown key or a bad value stops the program with a message naming\n"
          "the key and exit status 2. SIGHUP makes a running service read its configuration\n"
          "again: the keys it can apply at once take effect, each change is logged, the others\n"
          "wait for a restart (docs/OPERATIONS.md lists them).\n\n"
          "`kafka.<property>` is handed to librdkafka (e.g. `kafka.bootstrap.servers`;\n"
          "`AXCONF_KAFKA_SOCKET_TIMEOUT_MS` sets `kafka.socket.timeout.ms`) and `pg.<keyword>` to\n"
          "libpq (e.g. `pg.host`, `pg.port`, `pg.dbname`, `pg.user`, `pg.password`, `pg.sslmode`;\n"
          "`AXCONF_PG_CONNECT_TIMEOUT` sets `pg.connect_timeout`). Every Kafka client of ax sends\n"
          "without Nagle's delay (`socket.nagle.disable` = true unless\n"
          "`kafka.socket.nagle.disable` says otherwise;\n"
          "at 1,000 jobs/s fire-to-start p99 went 18.5 -> 12.7 ms and the broker 23 -> 15 % of\n"
          "a core; BENCHMARKS.md, \"Issue #13: Nagle's delay\"). Unless `pg.*` sets them,\n"
          "every PostgreSQL connection gets TCP settings that make a call fail in bounded time\n"
          "when a partition drops its packets: `tcp_user_timeout` = half the shortest lease\n"
          "(`executor.lease.min.ms`, `trigger.lease.ms`) within 1000–30000 ms (2500 by\n"
          "default), `keepalives` = 1 with `keepalives_idle` = half of it and\n"
          "`keepalives_interval` = a quarter (in seconds, at least 1), `keepalives_count` = 3,\n"
          "`connect_timeout` = twice it (in seconds, at least 2). Any of them set through\n"
          "`pg.*` wins (whole numbers only, else exit 2 naming the key). With keepalives on,\n"
          "the server's side of each session gets the same keepalives and user timeout,\n"
          "yours where set (`tcp_keepalives_idle`, `_interval`, `_count`, `tcp_user_timeout`,\n"
          "before `pg.options`, which wins), so a backend whose client vanished\n"
          "mid-transaction releases its locks in seconds; and every session gets\n"
          "`idle_in_transaction_session_timeout` = the default `tcp_user_timeout` above (also\n"
          "before `pg.options`), so one whose process stopped inside a transaction does too.\n"
          "Every session also gets `jit = off` (before `pg.options`, which wins): ax's statements\n"
          "are short index work that a JIT compilation (tens of ms) only delays.\n"
          "`pg.keepalives = 0` turns\n"
          "keepalives off on both sides, and with them libpq's\n"
          "`tcp_user_timeout` (libpq sets it only with keepalives on); `pg.tcp_user_timeout = 0`\n"
          "is the system's default (docs/OPERATIONS.md, \"Partitions and fencing\"). Values of\n"
          "keys that name a\n"
          "password, secret or key are never printed or logged; URLs (`alert.webhook.url`) are\n"
          "printed and logged as `scheme://host:port` only (their path or query may hold a "
          "token).\n\n"
          "| key | type | default | used by | meaning |\n|---|---|---|---|---|\n",
          out);
    for (size_t i = 0; i < ax_conf_table_len; i++) {
        const ax_conf_def_t *d = &ax_conf_table[i];
        char range[64];
        fmt_range(d, range, sizeof range);
        fprintf(out, "| `%s` | %s | %s%s%s | %s | %s |\n", d->name, range, d->def ? "`" : "",
                d->def ? d->def : "—", d->def ? "`" : "", d->used_by, d->doc);
    }
}

void ax_conf_help(FILE *out, const char *used_by) {
    fputs("Options:\n"
          "  --config FILE       configuration file (default: $AX_CONFIG, else " AX_DEFAULT_CONFIG ")\n"
          "  --set KEY=VALUE     override one configuration key (repeatable)\n"
          "  --print-config      print the effective configuration (secrets redacted, URLs as\n"
          "                      scheme://host:port) and exit\n"
          "  --help, --version\n\n"
          "Configuration keys (file, AXCONF_<KEY> environment, or --set):\n",
          out);
    for (size_t i = 0; i < ax_conf_table_len; i++) {
        const ax_conf_def_t *d = &ax_conf_table[i];
        if (used_by && strcmp(d->used_by, "all") != 0 && !strstr(d->used_by, used_by))
            continue;
        fprintf(out, "  %-30s %s (default %s)\n", d->name, d->doc, d->def ? d->def : "none");
    }
    fputs("  kafka.<property>               any librdkafka property\n"
          "  pg.<keyword>                   any libpq connection keyword\n",
          out);
}

extern char **environ;

int ax_conf_reload(ax_conf_t *c, int argc, char *const *argv, char *errbuf, size_t errlen) {
    const char *path = NULL;
    int must_exist = 1;
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
            path = argv[++i];
        else if (strncmp(argv[i], "--config=", 9) == 0)
            path = argv[i] + 9;
    }
    if (!path && getenv("AX_CONFIG") && *getenv("AX_CONFIG"))
        path = getenv("AX_CONFIG");
    if (!path) {
        path = AX_DEFAULT_CONFIG;
        must_exist = 0;
    }
    ax_conf_t n;
    ax_conf_init(&n);
    int rc = ax_conf_load_file(&n, path, must_exist, errbuf, errlen);
    if (rc == 0)
        rc = ax_conf_load_env(&n, environ, errbuf, errlen);
    for (int i = 1; rc == 0 && i < argc && strcmp(argv[i], "--") != 0; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--config") == 0) {
            i++;
        } else if (strcmp(a, "--set") == 0 || strncmp(a, "--set=", 6) == 0) {
            const char *kv = a[5] == '=' ? a + 6 : (i + 1 < argc ? argv[++i] : NULL);
            const char *eq = kv ? strchr(kv, '=') : NULL;
            if (!eq) {
                rc = ax_seterr(errbuf, errlen, AX_ERR_INVALID, "--set needs KEY=VALUE");
                break;
            }
            char key[256];
            snprintf(key, sizeof key, "%.*s", (int)(eq - kv), kv);
            rc = ax_conf_set(&n, key, eq + 1, "--set", errbuf, errlen);
        }
    }
    if (rc < 0) {
        ax_conf_free(&n);
        return rc;
    }
    ax_conf_free(c);
    *c = n;
    return 0;
}

static void diff_kv(const char *prefix, const ax_kv_t *a, size_t na, const ax_kv_t *b,
                    size_t nb, ax_conf_diff_fn fn, void *arg, int *n) {
    for (size_t i = 0; i < nb; i++) {
        const char *old = NULL;
        for (size_t j = 0; j < na && !old; j++)
            if (strcmp(a[j].key, b[i].key) == 0)
                old = a[j].value;
        if (old && strcmp(old, b[i].value) == 0)
            continue;
        char key[300];
        snprintf(key, sizeof key, "%s%s", prefix, b[i].key);
        char so[600], sn[600];
        fn(key, !old ? "" : ax_conf_shown(b[i].key, old, so, sizeof so),
           ax_conf_shown(b[i].key, b[i].value, sn, sizeof sn), arg);
        (*n)++;
    }
}

int ax_conf_diff(const ax_conf_t *a, const ax_conf_t *b, ax_conf_diff_fn fn, void *arg) {
    int n = 0;
    for (size_t i = 0; i < ax_conf_table_len; i++) {
        const ax_conf_def_t *d = &ax_conf_table[i];
        const char *pa = (const char *)a + d->offset, *pb = (const char *)b + d->offset;
        char va[600], vb[600];
        const char *sa = va, *sb = vb;
        if (d->type == AX_CONF_STR) {
            sa = *(char *const *)pa ? *(char *const *)pa : "";
            sb = *(char *const *)pb ? *(char *const *)pb : "";
            if (strcmp(sa, sb) == 0)
                continue;
            sa = ax_conf_shown(d->name, sa, va, sizeof va);
            sb = ax_conf_shown(d->name, sb, vb, sizeof vb);
        } else {
            int64_t ia = *(const int64_t *)pa, ib = *(const int64_t *)pb;
            if (ia == ib)
                continue;
            snprintf(va, sizeof va, "%lld", (long long)ia);
            snprintf(vb, sizeof vb, "%lld", (long long)ib);
        }
        fn(d->name, sa, sb, arg);
        n++;
    }
    diff_kv("kafka.", a->kafka, a->n_kafka, b->kafka, b->n_kafka, fn, arg, &n);
    diff_kv("pg.", a->pg, a->n_pg, b->pg, b->n_pg, fn, arg, &n);
    return n;
}

int ax_conf_swap_key(ax_conf_t *dst, ax_conf_t *src, const char *key) {
    const ax_conf_def_t *d = conf_find(key);
    if (!d)
        return AX_ERR_INVALID;
    char *pd = (char *)dst + d->offset, *ps = (char *)src + d->offset;
    if (d->type == AX_CONF_STR) {
        char *t = *(char **)pd;
        *(char **)pd = *(char **)ps;
        *(char **)ps = t;
    } else {
        int64_t t = *(int64_t *)pd;
        *(int64_t *)pd = *(int64_t *)ps;
        *(int64_t *)ps = t;
    }
    return 0;
}

/* The file named by --config (the last one), else $AX_CONFIG, else the
 * compiled-in default, which need not exist. */
static int args_config_path(int argc, char **argv, const char **ret_path, int *ret_must_exist,
                            char *errbuf, size_t errlen) {
    const char *path = NULL;
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (strcmp(argv[i], "--config") == 0) {
            if (i + 1 >= argc)
                return ax_seterr(errbuf, errlen, AX_ERR_INVALID, "--config needs a file name");
            path = argv[++i];
        } else if (strncmp(argv[i], "--config=", 9) == 0) {
            path = argv[i] + 9;
        }
    }
    *ret_must_exist = 1;
    if (!path && getenv("AX_CONFIG") && *getenv("AX_CONFIG"))
        path = getenv("AX_CONFIG");
    if (!path) {
        path = AX_DEFAULT_CONFIG;
        *ret_must_exist = 0;
    }
    *ret_path = path;
    return 0;
}

int ax_conf_args(ax_conf_t *c, int *argc, char **argv, ax_conf_action_t *ret_action,
                 char *errbuf, size_t errlen) {
    const char *path = NULL;
    int must_exist = 1, out = 1, rc;
    ax_conf_action_t action = AX_CONF_RUN;
    ax_conf_init(c);
    if ((rc = args_config_path(*argc, argv, &path, &must_exist, errbuf, errlen)) < 0 ||
        (rc = ax_conf_load_file(c, path, must_exist, errbuf, errlen)) < 0 ||
        (rc = ax_conf_load_env(c, environ, errbuf, errlen)) < 0)
        return rc;
    int i = 1;
    for (; i < *argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0)
            break;
        if (strcmp(a, "--config") == 0) {
            i++;
        } else if (strncmp(a, "--config=", 9) == 0) {
        } else if (strcmp(a, "--set") == 0 || strncmp(a, "--set=", 6) == 0) {
            const char *kv = a[5] == '=' ? a + 6 : (i + 1 < *argc ? argv[++i] : NULL);
            const char *eq = kv ? strchr(kv, '=') : NULL;
            if (!eq)
                return ax_seterr(errbuf, errlen, AX_ERR_INVALID, "--set needs KEY=VALUE");
            char key[256];
            snprintf(key, sizeof key, "%.*s", (int)(eq - kv), kv);
            if ((rc = ax_conf_set(c, key, eq + 1, "--set", errbuf, errlen)) < 0)
                return rc;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            *ret_action = AX_CONF_HELP;
            return 0;
        } else if (strcmp(a, "--version") == 0) {
            *ret_action = AX_CONF_VERSION;
            return 0;
        } else if (strcmp(a, "--print-config") == 0) {
            action = AX_CONF_PRINT;
        } else {
            argv[out++] = argv[i];
        }
    }
    for (; i < *argc; i++)
        argv[out++] = argv[i];
    argv[out] = NULL;
    *argc = out;
    *ret_action = action;
    return 0;
}

const char *ax_conf_topic(const ax_conf_t *c, const char *suffix, char *buf, size_t len) {
    snprintf(buf, len, "%s%s", c->topic_prefix, suffix);
    return buf;
}

int ax_conf_group_reserved(const char *group) {
    return group && group[0] == 'p' && group[1] >= '0' && group[1] <= '9' && group[2] == '\0';
}

const char *ax_conf_dispatch_topic(const ax_conf_t *c, const char *group, int prio, char *buf,
                                   size_t len) {
    char base[512];
    if (!group || !*group || strcmp(group, "default") == 0)
        snprintf(base, sizeof base, "%sdispatch", c->topic_prefix);
    else
        snprintf(base, sizeof base, "%sdispatch.%s", c->topic_prefix, group);
    return ax_lane_topic(base, prio, buf, len);
}
