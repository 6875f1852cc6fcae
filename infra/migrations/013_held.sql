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
-- group's P1 lane), never an executor group. NOT VALID: rows written before
-- are left alone (their instances are held, with this reason); new and
-- changed rows are checked.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'job_group_not_lane') THEN
        ALTER TABLE job ADD CONSTRAINT job_group_not_lane
            CHECK (executor_group !~ '^p[0-9]$') NOT VALID;
    END IF;
END $$;
