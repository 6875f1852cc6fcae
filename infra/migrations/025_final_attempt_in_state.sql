-- 025_final_attempt_in_state: an instance's final attempt is recorded on
-- its state row, not as a job_attempt row of its own (issue #13,
-- BENCHMARKS.md, "Issue #13: the final attempt on the state row").
--
-- The finish statement wrote a job_attempt row for every attempt that
-- reported a result, the last one too, although the state row it updates
-- in the same statement holds that attempt's outcome, exit code, error
-- class, error and finish time already: per job a heap tuple and a primary-
-- key entry (2 WAL records), the anti-join that skipped an existing row,
-- and later the retention's delete of the row (a third record) and its
-- vacuum. Now the finish writes, on the state row it ends, what only the
-- attempt row had — the worker that reported the attempt and when that
-- worker started it — and inserts attempt rows only for the attempts that
-- did not end the instance (retries, size probes). The table keeps those
-- as job_attempt_log; job_attempt becomes the view of both, the same rows
-- and columns as before:
--   * every job_attempt_log row (earlier attempts, probes, and the final
--     attempts recorded before this migration or by a previous release);
--   * per instance FINISHED by a reported result (attempt_worker set), its
--     final attempt from the state row. The finish leaves attempt_worker
--     NULL when the log has that attempt already (a size probe's row, as it
--     skipped an attempt row that existed), so no attempt shows twice.
-- recorded_at of a final attempt is its finished_at.
--
-- The view is per state row, a LATERAL of its log rows and its final
-- attempt, not a UNION ALL of the log and the state rows: PostgreSQL does
-- not flatten a UNION ALL branch that has a WHERE clause, so a join to such
-- a view (job_attempt a JOIN instance i ON i.id = a.instance_id) scanned
-- every state row once per joined row. Here instance_id is the state row's
-- id: a condition or a join on it uses instance_state's primary key, and
-- each row then costs one primary-key probe of the log. (An attempt row
-- whose instance is gone is not shown: deleting an instance deletes its
-- attempts, ax_instance_after_delete() below.)
--
-- Additive: two nullable columns, a rename behind a view of the old name.
-- A previous release keeps working during a rolling upgrade: its finish
-- inserts the final attempt into job_attempt (the view's INSTEAD OF
-- trigger puts it into the log; its state row has no attempt_worker, so the
-- view shows it once) and reads job_attempt as before; deletes go through
-- ax_instance_after_delete(), replaced here.
ALTER TABLE instance_state ADD COLUMN attempt_worker text,
    ADD COLUMN attempt_started_at timestamptz;

ALTER TABLE job_attempt RENAME TO job_attempt_log;

CREATE VIEW job_attempt AS
    SELECT s.id AS instance_id, a.attempt, a.worker, a.outcome, a.exit_code, a.error_class,
        a.error, a.started_at, a.finished_at, a.recorded_at
    FROM instance_state s
    CROSS JOIN LATERAL (
        SELECT l.attempt, l.worker, l.outcome, l.exit_code, l.error_class, l.error,
            l.started_at, l.finished_at, l.recorded_at
        FROM job_attempt_log l WHERE l.instance_id = s.id
        UNION ALL
        SELECT s.attempt, s.attempt_worker, s.outcome, s.exit_code, s.error_class, s.error,
            s.attempt_started_at, s.finished_at, s.finished_at
        WHERE s.attempt_worker IS NOT NULL AND s.state = 'FINISHED') a;

-- A previous release's inserts (its finish, its probe split with ON
-- CONFLICT DO NOTHING) land in the log.
CREATE FUNCTION ax_job_attempt_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_attempt_log (instance_id, attempt, worker, outcome, exit_code, error_class,
        error, started_at, finished_at, recorded_at)
    VALUES (NEW.instance_id, NEW.attempt, NEW.worker, NEW.outcome, NEW.exit_code,
        NEW.error_class, NEW.error, NEW.started_at, NEW.finished_at,
        coalesce(NEW.recorded_at, now()))
    ON CONFLICT DO NOTHING;
    RETURN NEW;
END $$;
CREATE TRIGGER job_attempt_insert INSTEAD OF INSERT ON job_attempt
    FOR EACH ROW EXECUTE FUNCTION ax_job_attempt_insert();

-- Deleting a definition deletes its state row, attempts and submission key.
CREATE OR REPLACE FUNCTION ax_instance_after_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM instance_state s USING old_instances o WHERE s.id = o.id;
    DELETE FROM job_attempt_log a USING old_instances o WHERE a.instance_id = o.id;
    DELETE FROM submission s USING old_instances o
        WHERE o.submit_key IS NOT NULL AND s.submit_key = o.submit_key;
    RETURN NULL;
END $$;
