-- 004_outcomes: retry rule chains, the retry budget's index, circuit
-- breakers, and final failures for the dead-letter topic.

ALTER TABLE job
    -- the retry rule chain (docs/RETRIES.md); NULL = the default chain
    ADD COLUMN retry_rules jsonb,
    -- circuit breaker: open after this many consecutive failed attempts
    -- (0 = never), probe again after the cool-down
    ADD COLUMN circuit_threshold   integer NOT NULL DEFAULT 5 CHECK (circuit_threshold >= 0),
    ADD COLUMN circuit_cooldown_ms bigint NOT NULL DEFAULT 60000
        CHECK (circuit_cooldown_ms BETWEEN 0 AND 31536000000),
    ADD COLUMN consecutive_failures integer NOT NULL DEFAULT 0,
    ADD COLUMN circuit_state text NOT NULL DEFAULT 'closed'
        CHECK (circuit_state IN ('closed', 'open', 'half_open')),
    ADD COLUMN circuit_opened_at timestamptz;

-- Retries waiting to run (the global retry budget counts them).
CREATE INDEX job_instance_retry_pending ON job_instance (deployment)
    WHERE state = 'SCHEDULED' AND attempt > 1;

-- The circuit columns change with results: like the statistics they must
-- not bump the job's version or wake the trigger (the trigger reads the
-- circuit when it fires).
CREATE OR REPLACE FUNCTION ax_job_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    o job;
BEGIN
    o := OLD;
    o.avg_run_ms := NEW.avg_run_ms;
    o.runs := NEW.runs;
    o.running_count := NEW.running_count;
    o.consecutive_failures := NEW.consecutive_failures;
    o.circuit_state := NEW.circuit_state;
    o.circuit_opened_at := NEW.circuit_opened_at;
    IF o IS NOT DISTINCT FROM NEW THEN
        RETURN NEW;  -- run statistics and circuit state only
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
