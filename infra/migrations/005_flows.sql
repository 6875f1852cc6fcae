-- 005_flows: flows — a DAG of stages, each running a job; a stage starts
-- when all its upstream stages succeeded. A flow run has its own state.

CREATE TABLE flow (
    id             bigserial PRIMARY KEY,
    name           text NOT NULL UNIQUE CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$'),
    -- stop: a failed stage fails the run and skips every stage not started;
    -- continue: only the failed stage's downstream is skipped, independent
    -- branches go on
    failure_policy text NOT NULL DEFAULT 'stop' CHECK (failure_policy IN ('stop', 'continue')),
    deployment     text NOT NULL
                   DEFAULT coalesce(nullif(current_setting('ax.deployment', true), ''), 'ax.'),
    created_at     timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE flow_stage (
    flow_id    bigint NOT NULL REFERENCES flow (id) ON DELETE CASCADE,
    name       text NOT NULL CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$'),
    job_name   text NOT NULL,
    depends_on text[] NOT NULL DEFAULT '{}',
    PRIMARY KEY (flow_id, name)
);

CREATE TABLE flow_run (
    id          bigserial PRIMARY KEY,
    flow_id     bigint NOT NULL REFERENCES flow (id) ON DELETE CASCADE,
    state       text NOT NULL DEFAULT 'running'
                CHECK (state IN ('running', 'succeeded', 'failed')),
    started_by  text NOT NULL DEFAULT 'manual',
    started_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);

CREATE TABLE flow_stage_run (
    run_id      bigint NOT NULL REFERENCES flow_run (id) ON DELETE CASCADE,
    stage       text NOT NULL,
    state       text NOT NULL DEFAULT 'pending'
                CHECK (state IN ('pending', 'running', 'succeeded', 'failed', 'skipped')),
    instance_id bigint,
    started_at  timestamptz,
    finished_at timestamptz,
    PRIMARY KEY (run_id, stage)
);

-- An instance started by a flow stage.
ALTER TABLE job_instance
    ADD COLUMN flow_run_id bigint,
    ADD COLUMN flow_stage  text;
CREATE INDEX job_instance_flow ON job_instance (flow_run_id) WHERE flow_run_id IS NOT NULL;

-- Start every pending stage of run `r` whose upstream stages all succeeded:
-- one SCHEDULED instance each (due now, for the trigger's due scan).
-- Returns the number of stages started. Used by `axctl flow run` and by
-- ax-callback when a stage's instance ends for good.
CREATE FUNCTION ax_flow_advance(r bigint) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    n integer := 0;
    s record;
    iid bigint;
BEGIN
    FOR s IN
        SELECT sr.stage, st.job_name, j.id AS job_id
        FROM flow_stage_run sr
        JOIN flow_run fr ON fr.id = sr.run_id
        JOIN flow_stage st ON st.flow_id = fr.flow_id AND st.name = sr.stage
        JOIN job j ON j.name = st.job_name
        WHERE sr.run_id = r AND sr.state = 'pending' AND fr.state = 'running'
          AND NOT EXISTS (
              SELECT 1 FROM unnest(st.depends_on) d
              JOIN flow_stage_run u ON u.run_id = r AND u.stage = d
              WHERE u.state <> 'succeeded')
        ORDER BY sr.stage
        FOR UPDATE OF sr
    LOOP
        INSERT INTO job_instance (job_id, job_name, handler_kind, command, payload, timeout_ms,
            priority, due_at, trace_id, idempotency_key, executor_group, routing_field,
            flow_run_id, flow_stage)
        SELECT j.id, j.name, j.handler_kind, j.command, j.payload, j.timeout_ms, j.priority, now(),
            replace(gen_random_uuid()::text, '-', ''), 'flow:' || r || ':' || s.stage,
            j.executor_group, j.routing_key, r, s.stage
        FROM job j WHERE j.id = s.job_id
        RETURNING id INTO iid;
        UPDATE flow_stage_run SET state = 'running', instance_id = iid, started_at = now()
        WHERE run_id = r AND stage = s.stage;
        n := n + 1;
    END LOOP;
    IF n > 0 THEN
        PERFORM pg_notify('ax_due', (SELECT deployment FROM flow f JOIN flow_run fr
                                     ON fr.flow_id = f.id WHERE fr.id = r));
    END IF;
    RETURN n;
END $$;

-- A stage's instance ended for good: record it, apply the failure policy,
-- start what became ready, and finish the run when nothing is left.
CREATE FUNCTION ax_flow_stage_done(iid bigint, ok boolean) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    r bigint;
    st text;
    pol text;
BEGIN
    SELECT i.flow_run_id, i.flow_stage INTO r, st FROM job_instance i WHERE i.id = iid;
    IF r IS NULL THEN
        RETURN;
    END IF;
    UPDATE flow_stage_run SET state = CASE WHEN ok THEN 'succeeded' ELSE 'failed' END,
        finished_at = now()
    WHERE run_id = r AND stage = st AND state = 'running';
    IF NOT FOUND THEN
        RETURN;  -- already recorded (a redelivered result)
    END IF;
    SELECT f.failure_policy INTO pol FROM flow f JOIN flow_run fr ON fr.flow_id = f.id
    WHERE fr.id = r;
    IF NOT ok THEN
        IF pol = 'stop' THEN
            UPDATE flow_stage_run SET state = 'skipped' WHERE run_id = r AND state = 'pending';
        ELSE
            -- skip everything downstream of the failed stage
            WITH RECURSIVE down(name) AS (
                SELECT s.name FROM flow_stage s JOIN flow_run fr ON fr.flow_id = s.flow_id
                WHERE fr.id = r AND st = ANY (s.depends_on)
                UNION
                SELECT s.name FROM flow_stage s JOIN flow_run fr ON fr.flow_id = s.flow_id
                JOIN down d ON d.name = ANY (s.depends_on) WHERE fr.id = r)
            UPDATE flow_stage_run SET state = 'skipped'
            WHERE run_id = r AND state = 'pending' AND stage IN (SELECT name FROM down);
        END IF;
    END IF;
    PERFORM ax_flow_advance(r);
    IF NOT EXISTS (SELECT 1 FROM flow_stage_run WHERE run_id = r
                   AND state IN ('pending', 'running')) THEN
        UPDATE flow_run SET finished_at = now(),
            state = CASE WHEN EXISTS (SELECT 1 FROM flow_stage_run WHERE run_id = r
                                      AND state IN ('failed', 'skipped'))
                         THEN 'failed' ELSE 'succeeded' END
        WHERE id = r AND state = 'running';
    END IF;
END $$;
