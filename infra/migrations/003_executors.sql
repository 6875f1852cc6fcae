-- 003_executors: what the executor fleet needs — idempotency claims,
-- the workers table, per-job run statistics (lease length), executor groups
-- and routing, and the running count behind per-job concurrency limits.

-- ---- idempotency --------------------------------------------------------------
-- A handler claims a business key once per scope (the job name; '' for
-- inline commands). The instance that claimed it may claim it again (its
-- retries); any other instance is told it was already claimed.
CREATE TABLE idempotency_claim (
    scope       text NOT NULL,
    key         text NOT NULL CHECK (length(key) BETWEEN 1 AND 512),
    instance_id bigint NOT NULL,
    claimed_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, key)
);

-- ---- workers ---------------------------------------------------------------------
-- One row per executor process, refreshed every few seconds.
CREATE TABLE worker (
    id            text PRIMARY KEY,
    kind          text NOT NULL DEFAULT 'executor',
    host          text,
    pid           integer,
    groups        text[] NOT NULL DEFAULT '{}',
    started_at    timestamptz NOT NULL DEFAULT now(),
    heartbeat_at  timestamptz NOT NULL DEFAULT now(),
    cpu_pct       real,       -- machine CPU busy %, over the last interval
    mem_pct       real,       -- machine memory in use %
    rss_bytes     bigint,     -- this process
    running       integer NOT NULL DEFAULT 0,
    waiting       integer NOT NULL DEFAULT 0,
    pools         jsonb NOT NULL DEFAULT '{}',   -- name -> {slots, queue, running, waiting, full}
    fetching      boolean NOT NULL DEFAULT true, -- false while above a watermark or draining
    state         text NOT NULL DEFAULT 'running'  -- running, draining, stopped
);

-- ---- jobs: routing, pools, statistics, concurrency ----------------------------
ALTER TABLE job
    ADD COLUMN executor_group text NOT NULL DEFAULT 'default'
        CHECK (executor_group ~ '^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$'),
    -- observed run time (exponentially weighted), kept by ax-callback; the
    -- lease of a run is a multiple of it within executor.lease.* bounds
    ADD COLUMN avg_run_ms double precision,
    ADD COLUMN runs bigint NOT NULL DEFAULT 0,
    -- instances LOCKED or RUNNING now; only kept for jobs with a
    -- concurrency_limit (claims take a slot, finishing gives it back)
    ADD COLUMN running_count integer NOT NULL DEFAULT 0 CHECK (running_count >= 0);

ALTER TABLE job_instance
    ADD COLUMN executor_group text NOT NULL DEFAULT 'default',
    ADD COLUMN routing_field  text,         -- payload field whose value keys the dispatch
    ADD COLUMN holds_slot     boolean NOT NULL DEFAULT false;  -- counted in job.running_count

-- The statistics columns above change with every finished run: they must
-- neither bump the job's version nor wake the trigger.
CREATE OR REPLACE FUNCTION ax_job_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    o job;
BEGIN
    o := OLD;
    o.avg_run_ms := NEW.avg_run_ms;
    o.runs := NEW.runs;
    o.running_count := NEW.running_count;
    IF o IS NOT DISTINCT FROM NEW THEN
        RETURN NEW;  -- statistics only
    END IF;
    IF (NEW.schedule_kind, NEW.schedule_expr, NEW.time_zone, NEW.interval_ms, NEW.start_at,
        NEW.dst_gap, NEW.dst_overlap)
       IS DISTINCT FROM
       (OLD.schedule_kind, OLD.schedule_expr, OLD.time_zone, OLD.interval_ms, OLD.start_at,
        OLD.dst_gap, OLD.dst_overlap)
       OR (NEW.enabled AND NOT OLD.enabled) THEN
        NEW.schedule_from := date_trunc('milliseconds', now());
    END IF;
    NEW.version := OLD.version + 1;
    NEW.updated_at := now();
    RETURN NEW;
END $$;

DROP TRIGGER job_notify ON job;
CREATE TRIGGER job_notify AFTER INSERT OR DELETE ON job
    FOR EACH ROW EXECUTE FUNCTION ax_job_notify();
CREATE TRIGGER job_notify_update AFTER UPDATE ON job
    FOR EACH ROW WHEN (OLD.version IS DISTINCT FROM NEW.version) EXECUTE FUNCTION ax_job_notify();

-- Which deployment (topic.prefix) created an instance: its triggers
-- dispatch and sweep only their own, so deployments sharing one database do
-- not take each other's work (and concurrent test runs stay apart).
ALTER TABLE job_instance ADD COLUMN deployment text NOT NULL DEFAULT 'ax.';

-- Hot-path inserts (20,000 fires/s: a ledger row and an instance each) do
-- not pay for foreign-key checks against job; what the keys did on delete
-- a statement trigger on job does instead (measured: the FK checks were a
-- fifth of the fire statement's time; BENCHMARKS.md).
ALTER TABLE job_fire DROP CONSTRAINT job_fire_job_id_fkey;
ALTER TABLE job_instance DROP CONSTRAINT job_instance_job_id_fkey;
CREATE FUNCTION ax_job_after_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM job_fire f USING old_jobs o WHERE f.job_id = o.id;
    UPDATE job_instance i SET job_id = NULL FROM old_jobs o WHERE i.job_id = o.id;
    RETURN NULL;
END $$;
CREATE TRIGGER job_after_delete AFTER DELETE ON job
    REFERENCING OLD TABLE AS old_jobs FOR EACH STATEMENT EXECUTE FUNCTION ax_job_after_delete();

-- Instances produced in a Kafka transaction that has not been confirmed yet.
-- A dispatch marks the instance dispatched and adds its row here in the same
-- statement; the row is deleted once the Kafka transaction committed (a
-- narrow table: far cheaper than a second update of job_instance, which
-- touches every index of it). Rows left behind — the Kafka commit failed,
-- or the leader died in between — are turned back into undispatched
-- instances by the next leader (older epoch) or after a minute.
CREATE TABLE dispatch_pending (
    instance_id bigint PRIMARY KEY,
    epoch       bigint NOT NULL,
    deployment  text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- Deployments sharing one database stay apart: every ax session sets
-- ax.deployment to its topic.prefix (libax/src/adapters/pg.c), rows
-- default to it, and a trigger loads only its deployment's jobs and
-- dispatches only its deployment's instances. Job names stay unique across
-- the database.
ALTER TABLE job ADD COLUMN deployment text NOT NULL
    DEFAULT coalesce(nullif(current_setting('ax.deployment', true), ''), 'ax.');
ALTER TABLE job_instance ALTER COLUMN deployment
    SET DEFAULT coalesce(nullif(current_setting('ax.deployment', true), ''), 'ax.');
