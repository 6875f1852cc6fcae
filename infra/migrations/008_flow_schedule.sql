-- 008_flow_schedule: flows started by a schedule.
--
-- A flow's schedule is a job with handler_kind 'flow' and flow_id set
-- (`axctl flow schedule`, or `flow create ... --cron ...`; the job is named
-- flow.<flow name>). The trigger fires it like any scheduled job — the
-- ledger, misfire policy, overlap, leader fencing are the same — but a
-- fire of such a job creates no instance: the fire statement draws a
-- flow_run id instead and writes it into the ledger row (job_fire.flow_run_id),
-- and the row trigger below starts that run in the same statement. A row
-- the ledger's primary key refuses (ON CONFLICT DO NOTHING) fires no AFTER
-- INSERT trigger, so every nominal time starts its run at most once, also
-- across leader failover, and a run exists exactly when its ledger row does.

-- ---- which flow a job starts ------------------------------------------------
ALTER TABLE job ADD COLUMN flow_id bigint REFERENCES flow (id) ON DELETE CASCADE;
ALTER TABLE job DROP CONSTRAINT job_handler_kind_check;
ALTER TABLE job ADD CONSTRAINT job_handler_kind_check
    CHECK (handler_kind IN ('command', 'http', 'plugin', 'flow'));
-- A flow job starts runs, not instances: overlap is judged on the flow's
-- running runs (allow or skip; queue and cancel act on instances), and
-- fixed_delay (the delay after the previous instance finished) has no
-- instance to wait for.
ALTER TABLE job ADD CONSTRAINT job_flow CHECK (
    (handler_kind = 'flow') = (flow_id IS NOT NULL) AND
    (flow_id IS NULL OR (overlap_policy IN ('allow', 'skip') AND schedule_kind <> 'fixed_delay')));
-- One schedule per flow.
CREATE UNIQUE INDEX job_flow_id ON job (flow_id) WHERE flow_id IS NOT NULL;

-- ---- the run a fire started ------------------------------------------------------
ALTER TABLE job_fire ADD COLUMN flow_run_id bigint;
CREATE UNIQUE INDEX job_fire_flow_run ON job_fire (flow_run_id) WHERE flow_run_id IS NOT NULL;
-- overlap=skip of flow jobs looks for a flow's running runs
CREATE INDEX flow_run_running ON flow_run (flow_id) WHERE state = 'running';

-- Start a run of flow f: the run (id rid, or a new one), one pending
-- flow_stage_run per stage, and the stages without upstream get their
-- instances (ax_flow_advance). Returns the run id. Used by `axctl flow run`
-- (starter 'manual') and by the ledger trigger below (starter 'schedule').
CREATE FUNCTION ax_flow_start(f bigint, starter text, rid bigint DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    r bigint;
BEGIN
    INSERT INTO flow_run (id, flow_id, started_by)
    VALUES (coalesce(rid, nextval(pg_get_serial_sequence('flow_run', 'id'))), f, starter)
    RETURNING id INTO r;
    INSERT INTO flow_stage_run (run_id, stage)
    SELECT r, s.name FROM flow_stage s WHERE s.flow_id = f;
    PERFORM ax_flow_advance(r);
    RETURN r;
END $$;

-- A ledger row that names a flow run (written by the trigger's fire
-- statement for a flow job's `fired` time) starts that run.
CREATE FUNCTION ax_job_fire_flow() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    f bigint;
BEGIN
    SELECT j.flow_id INTO f FROM job j WHERE j.id = NEW.job_id;
    -- NULL: the job was deleted while its fire was in flight (as for other
    -- jobs, whose instance is then not created either)
    IF f IS NOT NULL THEN
        PERFORM ax_flow_start(f, 'schedule', NEW.flow_run_id);
    END IF;
    RETURN NULL;
END $$;
-- WHEN keeps the ordinary fires (no flow run) free of any trigger call.
CREATE TRIGGER job_fire_flow AFTER INSERT ON job_fire
    FOR EACH ROW WHEN (NEW.flow_run_id IS NOT NULL) EXECUTE FUNCTION ax_job_fire_flow();
