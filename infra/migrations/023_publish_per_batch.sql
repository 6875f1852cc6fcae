-- 023_publish_per_batch: the publish mark per batch, not per instance
-- (issue #13; BENCHMARKS.md, "Issue #13: the publish mark per batch").
--
-- The publisher's mark set result_published_at on every instance of a
-- batch it had committed on Kafka: a HOT update per job, 12-15 µs of the
-- ~100 µs of statements a no-op job costs PostgreSQL (pg_per_job.sh), and
-- a WAL record per job. Now the finish writes, on each state row it ends
-- for good, the id of the ax_result_batch row it writes in the same
-- statement (result_batch: the state row is being updated anyway, so this
-- costs nothing), and the mark sets published_at on that batch row once
-- (instead of deleting it): one row per finishing statement, not one per
-- instance. The instance views show an instance's result_published_at as
-- its own column when set (a recovery's mark of part of a batch, a
-- previous release's publisher) or else its batch's published_at.
--
-- stamped: the batch row was written by a finish that set result_batch on
-- its instances. A previous release's finish writes unstamped rows; their
-- instances are marked one by one, as before, and the row is deleted.
-- A published batch row stays while any instance of it does: the retention
-- sweep deletes it with its last instance.
--
-- Additive: a previous release runs on it during a rolling upgrade. Its
-- finish writes unstamped batches (handled as above); its publisher reads
-- every batch row, published ones too, but finds their instances already
-- published through the view (not "present"): it produces nothing for
-- them, and its mark deletes the row and sets their own
-- result_published_at, which the view then shows. Its retention sweep
-- reads the state row's own column: it keeps instances published per
-- batch until this release's sweep deletes them.
ALTER TABLE ax_result_batch ADD COLUMN IF NOT EXISTS published_at timestamptz;
ALTER TABLE ax_result_batch ADD COLUMN IF NOT EXISTS stamped boolean NOT NULL DEFAULT false;
ALTER TABLE instance_state ADD COLUMN IF NOT EXISTS result_batch bigint;
-- The publisher's read and its mark look only at the unpublished rows.
CREATE INDEX IF NOT EXISTS ax_result_batch_pending ON ax_result_batch (deployment, id)
    WHERE published_at IS NULL;

CREATE OR REPLACE VIEW instance AS SELECT
    s.id,
    s.job_id,
    d.job_name,
    s.attempt,
    s.state,
    s.outcome,
    d.handler_kind,
    d.command,
    d.payload,
    d.timeout_ms,
    s.priority,
    d.nominal_time,
    s.due_at,
    s.worker,
    s.lease_expires_at,
    d.scheduled_at,
    s.dispatched_at,
    s.locked_at,
    s.running_at,
    s.finished_at,
    coalesce(s.result_published_at, (SELECT b.published_at FROM ax_result_batch b
        WHERE b.id = s.result_batch)) AS result_published_at,
    s.exit_code,
    s.error_class,
    s.error,
    s.output,
    d.trace_id,
    d.idempotency_key,
    d.submit_key,
    s.wait_for,
    s.cancel_requested_at,
    d.executor_group,
    d.routing_field,
    s.holds_slot,
    s.deployment,
    d.flow_run_id,
    d.flow_stage,
    d.parent_id,
    s.shard_index,
    s.shard_total,
    s.shard_mode,
    s.shards_pending,
    s.deferred_at,
    s.capped_at
FROM instance_state s JOIN instance_def d ON d.id = s.id;
