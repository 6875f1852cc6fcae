-- 011_lean_instance: every state change of an instance (claim, RUNNING,
-- FINISHED) writes a new row version, and each version gets an entry in
-- every index of job_instance. The unique index on submit_key and the index
-- on trace_id are keyed by random strings, so each of those entries touched
-- a random page: measured, an insert and three transitions of 10,000 rows
-- took twice as long with them (BENCHMARKS.md). Both lookups move to
-- insert-only side tables, written once per instance.

-- Submissions are deduplicated by their key here (ax-trigger's ingest
-- statement inserts the key first, and an instance only for a new key).
CREATE TABLE submission (
    submit_key  text PRIMARY KEY,
    instance_id bigint NOT NULL
);
INSERT INTO submission (submit_key, instance_id)
    SELECT submit_key, id FROM job_instance WHERE submit_key IS NOT NULL;
ALTER TABLE job_instance DROP CONSTRAINT job_instance_submit_key_key;

-- Trace id -> instances, filled by a statement trigger on every insert
-- (ingest, schedule fires, flows, shards).
CREATE TABLE instance_trace (
    trace_id    text NOT NULL,
    instance_id bigint NOT NULL
);
INSERT INTO instance_trace (trace_id, instance_id) SELECT trace_id, id FROM job_instance;
CREATE INDEX instance_trace_trace ON instance_trace (trace_id);
DROP INDEX job_instance_trace;

CREATE FUNCTION ax_instance_after_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO instance_trace (trace_id, instance_id) SELECT trace_id, id FROM new_instances;
    RETURN NULL;
END $$;
CREATE TRIGGER job_instance_after_insert AFTER INSERT ON job_instance
    REFERENCING NEW TABLE AS new_instances FOR EACH STATEMENT
    EXECUTE FUNCTION ax_instance_after_insert();

-- Deleting instances deletes their attempts (007), trace rows and
-- submission keys.
CREATE OR REPLACE FUNCTION ax_instance_after_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM job_attempt a USING old_instances o WHERE a.instance_id = o.id;
    DELETE FROM instance_trace t USING old_instances o
        WHERE t.trace_id = o.trace_id AND t.instance_id = o.id;
    DELETE FROM submission s USING old_instances o
        WHERE o.submit_key IS NOT NULL AND s.submit_key = o.submit_key;
    RETURN NULL;
END $$;
