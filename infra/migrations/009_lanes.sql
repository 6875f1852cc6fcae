-- 009_lanes: priority lanes and backpressure (docs/PRIORITIES.md).
--
-- The leader trigger measures the executor group's lag per lane; above a
-- lane's high mark its due instances stay SCHEDULED here, marked deferred,
-- and are released in order of effective priority once the lane is back
-- under its low mark (or aged into a lane that is not deferring).

-- When the instance was first held back instead of produced (NULL: never).
ALTER TABLE job_instance ADD COLUMN deferred_at timestamptz;

-- The due scan reads each lane separately, oldest first, so deferred
-- instances of one lane never slow the scan of another.
DROP INDEX job_instance_due;
CREATE INDEX job_instance_due ON job_instance (priority, due_at)
    WHERE state = 'SCHEDULED' AND dispatched_at IS NULL;

ALTER TABLE job
    -- at most this many instances SCHEDULED (waiting to run); the newest
    -- beyond it end FAILED with error class backlog_full. NULL: no cap.
    ADD COLUMN backlog_max integer CHECK (backlog_max IS NULL OR backlog_max >= 0),
    -- mixed precision: 0 = precise (fires on its millisecond); > 0 = the
    -- fire may move later by up to this many ms, coalesced onto the
    -- trigger's coarse tick while the trigger is loaded
    ADD COLUMN tolerance_ms integer NOT NULL DEFAULT 0
        CHECK (tolerance_ms BETWEEN 0 AND 3600000);
CREATE INDEX job_backlog_capped ON job (id) WHERE backlog_max IS NOT NULL;

-- What the leader trigger last saw per lane, for axctl status.
CREATE TABLE lane_status (
    deployment text NOT NULL,
    lane       smallint NOT NULL CHECK (lane BETWEEN 0 AND 4),
    lag        bigint NOT NULL,
    over       boolean NOT NULL,
    deferred   bigint NOT NULL DEFAULT 0,
    changed_at timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (deployment, lane)
);
