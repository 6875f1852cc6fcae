-- 007_callback_fast: the callback's hot statement does not pay for a
-- foreign-key check per attempt row (measured: a fifth of the finish
-- statement, BENCHMARKS.md); deleting an instance still deletes its attempts,
-- through a statement trigger.
ALTER TABLE job_attempt DROP CONSTRAINT job_attempt_instance_id_fkey;
CREATE FUNCTION ax_instance_after_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM job_attempt a USING old_instances o WHERE a.instance_id = o.id;
    RETURN NULL;
END $$;
CREATE TRIGGER job_instance_after_delete AFTER DELETE ON job_instance
    REFERENCING OLD TABLE AS old_instances FOR EACH STATEMENT
    EXECUTE FUNCTION ax_instance_after_delete();
