-- 002_schedules: what a job's schedule is, the durable fire ledger, the
-- trigger leader lease, and change notification for the trigger.

-- ---- schedules --------------------------------------------------------------
-- schedule_kind (001) chooses the columns that matter:
--   cron         schedule_expr (5 or 6 fields), time_zone, dst_gap, dst_overlap
--   fixed_rate   interval_ms; fires at anchor + k * interval_ms
--   fixed_delay  interval_ms after the previous instance finished; first at anchor
--   once         start_at
-- anchor = COALESCE(start_at, schedule_from).
ALTER TABLE job
    ADD COLUMN interval_ms          bigint CHECK (interval_ms IS NULL OR interval_ms > 0),
    ADD COLUMN start_at             timestamptz,
    -- set whenever the schedule changes or the job is enabled: fire times
    -- before it are never due (not misfires either)
    ADD COLUMN schedule_from        timestamptz NOT NULL DEFAULT date_trunc('milliseconds', now()),
    ADD COLUMN dst_gap              text NOT NULL DEFAULT 'shift' CHECK (dst_gap IN ('shift', 'skip')),
    ADD COLUMN dst_overlap          text NOT NULL DEFAULT 'once' CHECK (dst_overlap IN ('once', 'twice')),
    ADD COLUMN misfire_policy       text NOT NULL DEFAULT 'fire_once'
                                    CHECK (misfire_policy IN ('fire_once', 'skip', 'catch_up')),
    ADD COLUMN misfire_threshold_ms bigint NOT NULL DEFAULT 60000 CHECK (misfire_threshold_ms >= 1000),
    ADD COLUMN catchup_max          integer NOT NULL DEFAULT 10 CHECK (catchup_max BETWEEN 1 AND 10000),
    ADD COLUMN overlap_policy       text NOT NULL DEFAULT 'allow'
                                    CHECK (overlap_policy IN ('allow', 'skip', 'queue', 'cancel')),
    ADD COLUMN payload              bytea NOT NULL DEFAULT '',
    ADD CONSTRAINT job_schedule_complete CHECK (
        (schedule_kind <> 'cron' OR schedule_expr IS NOT NULL) AND
        (schedule_kind NOT IN ('fixed_rate', 'fixed_delay') OR interval_ms IS NOT NULL) AND
        (schedule_kind <> 'once' OR start_at IS NOT NULL));

CREATE INDEX job_scheduled ON job (id) WHERE enabled AND schedule_kind <> 'none';

CREATE FUNCTION ax_job_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
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
CREATE TRIGGER job_before_update BEFORE UPDATE ON job
    FOR EACH ROW EXECUTE FUNCTION ax_job_before_update();

-- ax-trigger LISTENs on ax_job and reloads the named jobs (payload: job id).
CREATE FUNCTION ax_job_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('ax_job', (CASE WHEN TG_OP = 'DELETE' THEN OLD.id ELSE NEW.id END)::text);
    RETURN NULL;
END $$;
CREATE TRIGGER job_notify AFTER INSERT OR UPDATE OR DELETE ON job
    FOR EACH ROW EXECUTE FUNCTION ax_job_notify();

-- ---- the fire ledger ---------------------------------------------------------
-- One row per (job, nominal fire time), written by the leader before anything
-- is produced; the primary key makes every nominal time decided once.
CREATE TYPE ax_fire_decision AS ENUM (
    'fired',            -- an instance was created (instance_id)
    'queued',           -- overlap=queue: created, waits for the running instance
    'skipped_misfire',  -- later than misfire_threshold_ms and the policy skipped it
    'skipped_overlap',  -- overlap=skip (or queue with one already waiting)
    'skipped_circuit',  -- the job's circuit breaker was open
    'deferred'          -- held back by backpressure
);

CREATE TABLE job_fire (
    job_id       bigint NOT NULL REFERENCES job (id) ON DELETE CASCADE,
    nominal_time timestamptz NOT NULL,
    decision     ax_fire_decision NOT NULL,
    instance_id  bigint,
    epoch        bigint NOT NULL,           -- leader epoch that decided it
    decided_at   timestamptz NOT NULL DEFAULT now(),
    detail       text,                      -- why (late by, DST shifted, previous instance)
    PRIMARY KEY (job_id, nominal_time)
);

-- ---- instances: overlap support -------------------------------------------------
ALTER TABLE job_instance
    ADD COLUMN wait_for            bigint,       -- overlap=queue: dispatch after this one finished
    ADD COLUMN cancel_requested_at timestamptz;  -- overlap=cancel: the executor kills it
CREATE INDEX job_instance_active ON job_instance (job_id) WHERE state <> 'FINISHED';

-- ---- leadership ----------------------------------------------------------------
-- One row per role. epoch increases on every change of holder and fences a
-- stale leader: each dispatch transaction re-reads the row FOR SHARE.
CREATE TABLE ax_leader (
    role        text PRIMARY KEY,
    holder      text,
    epoch       bigint NOT NULL DEFAULT 0,
    expires_at  timestamptz NOT NULL DEFAULT '-infinity',
    acquired_at timestamptz
);
INSERT INTO ax_leader (role) VALUES ('trigger');
