-- 013_held: instances the leader trigger holds instead of producing them,
-- with the reason (services/trigger/hold.c, docs/EXECUTORS.md): the lane
-- topic of the instance's executor group does not exist (topic: released
-- once it does), the group is a reserved name, or the dispatch record is
-- over message.max.bytes (topic NULL: held until cancelled). A held
-- instance keeps its dispatched_at, so the due scan leaves it alone; job_instance
-- itself gets no new column or index (its updates stay HOT).
CREATE TABLE IF NOT EXISTS instance_hold (
    instance_id bigint PRIMARY KEY,
    deployment  text NOT NULL,
    topic       text,
    reason      text NOT NULL,
    held_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS instance_hold_topic ON instance_hold (deployment, topic);

-- p0 … p9 name the priority lanes (<prefix>dispatch.p1 is the default
-- group's P1 lane), never an executor group. Checked only when a job's
-- executor_group is set (INSERT) or changed (an UPDATE naming the column to
-- a new value): a CHECK, even NOT VALID, would be checked on every UPDATE of
-- an old row with such a group, whatever the columns changed (the
-- callback's job statistics, the executor's running_count claim, axctl job
-- enable/disable), and fail them all. Jobs written before keep their group
-- (their instances are held, with this reason) and are named below: fix
-- each with axctl job update NAME --group G.
CREATE OR REPLACE FUNCTION job_group_not_lane() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.executor_group ~ '^p[0-9]$'
       AND (TG_OP = 'INSERT' OR NEW.executor_group IS DISTINCT FROM OLD.executor_group) THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation', CONSTRAINT = 'job_group_not_lane',
            MESSAGE = format('executor group %s is reserved: p0-p9 name the priority lanes',
                             NEW.executor_group);
    END IF;
    RETURN NEW;
END $$;
ALTER TABLE job DROP CONSTRAINT IF EXISTS job_group_not_lane;
DROP TRIGGER IF EXISTS job_group_not_lane ON job;
CREATE TRIGGER job_group_not_lane BEFORE INSERT OR UPDATE OF executor_group ON job
    FOR EACH ROW EXECUTE FUNCTION job_group_not_lane();
DO $$
DECLARE
    j record;
BEGIN
    FOR j IN SELECT name, executor_group FROM job WHERE executor_group ~ '^p[0-9]$' ORDER BY name
    LOOP
        RAISE WARNING 'job % names executor group %, a reserved name (p0-p9 name the priority '
            'lanes): its instances are held; fix it with axctl job update % --group G',
            j.name, j.executor_group, j.name;
    END LOOP;
END $$;
