-- 006_shards: static and dynamic sharding. A sharded job's instance is a
-- parent that never runs its handler for real: static sharding splits it at
-- dispatch time into shard_count children; dynamic sharding first runs the
-- handler as a size probe (AX_SHARD_PROBE=1; it prints the data volume),
-- then splits it into ceil(volume / shard_base) children, at most
-- max_shards. Each child has shard_index / shard_total; the parent finishes
-- when all children have: SUCCESS if all succeeded, FAILED otherwise.

ALTER TABLE job
    ADD COLUMN shard_count integer CHECK (shard_count IS NULL OR shard_count BETWEEN 1 AND 10000),
    ADD COLUMN shard_base  bigint  CHECK (shard_base IS NULL OR shard_base >= 1),
    ADD COLUMN max_shards  integer NOT NULL DEFAULT 100 CHECK (max_shards BETWEEN 1 AND 10000),
    ADD CONSTRAINT job_shard_one_kind CHECK (shard_count IS NULL OR shard_base IS NULL);

ALTER TABLE job_instance
    ADD COLUMN parent_id      bigint,
    ADD COLUMN shard_index    integer NOT NULL DEFAULT 0,
    ADD COLUMN shard_total    integer NOT NULL DEFAULT 1,
    ADD COLUMN shard_mode     text CHECK (shard_mode IN ('static', 'probe')), -- parents only
    ADD COLUMN shards_pending integer;
CREATE INDEX job_instance_parent ON job_instance (parent_id) WHERE parent_id IS NOT NULL;

-- Split parent p into n children (due now) and park the parent RUNNING
-- without a lease until they are done. Returns n.
CREATE FUNCTION ax_shard_expand(p bigint, n integer) RETURNS integer LANGUAGE plpgsql AS $$
BEGIN
    IF n <= 0 THEN  -- nothing to process: done at once
        UPDATE job_instance SET state = 'FINISHED', outcome = 'SUCCESS', worker = 'shards',
            finished_at = clock_timestamp(), shards_pending = 0, lease_expires_at = NULL
        WHERE id = p AND state <> 'FINISHED';
        PERFORM ax_flow_stage_done(p, true) FROM job_instance
        WHERE id = p AND flow_run_id IS NOT NULL;
        RETURN 0;
    END IF;
    INSERT INTO job_instance (job_id, job_name, handler_kind, command, payload, timeout_ms,
        priority, nominal_time, due_at, trace_id, idempotency_key, deployment, executor_group,
        routing_field, parent_id, shard_index, shard_total, flow_run_id, flow_stage)
    SELECT i.job_id, i.job_name, i.handler_kind, i.command, i.payload, i.timeout_ms, i.priority,
        i.nominal_time, now(), i.trace_id || '-' || k, i.idempotency_key || '#' || k, i.deployment,
        i.executor_group, i.routing_field, i.id, k, n, NULL, NULL
    FROM job_instance i, generate_series(0, n - 1) k WHERE i.id = p;
    UPDATE job_instance SET state = 'RUNNING', worker = 'shards', shards_pending = n,
        locked_at = coalesce(locked_at, clock_timestamp()), running_at = clock_timestamp(),
        lease_expires_at = NULL, dispatched_at = coalesce(dispatched_at, now())
    WHERE id = p;
    PERFORM pg_notify('ax_due', (SELECT deployment FROM job_instance WHERE id = p));
    RETURN n;
END $$;

-- A child ended for good: count it; the last one finishes the parent
-- (SUCCESS only if every child succeeded). Returns the parent's id when
-- this finished it (for its result to be published), else NULL.
CREATE FUNCTION ax_shard_child_done(c bigint) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    p bigint;
    left_ integer;
BEGIN
    SELECT parent_id INTO p FROM job_instance WHERE id = c;
    IF p IS NULL THEN
        RETURN NULL;
    END IF;
    UPDATE job_instance SET shards_pending = shards_pending - 1
    WHERE id = p AND state = 'RUNNING' AND shards_pending > 0
    RETURNING shards_pending INTO left_;
    IF left_ IS NULL OR left_ > 0 THEN
        RETURN NULL;
    END IF;
    UPDATE job_instance SET state = 'FINISHED', finished_at = clock_timestamp(),
        outcome = CASE WHEN EXISTS (SELECT 1 FROM job_instance x WHERE x.parent_id = p
                                    AND x.outcome IS DISTINCT FROM 'SUCCESS')
                       THEN 'FAILED' ELSE 'SUCCESS' END::ax_outcome,
        error = (SELECT CASE WHEN count(*) FILTER (WHERE outcome <> 'SUCCESS') > 0
                        THEN count(*) FILTER (WHERE outcome <> 'SUCCESS') || ' of ' || count(*)
                             || ' shards failed' END
                 FROM job_instance x WHERE x.parent_id = p),
        error_class = CASE WHEN EXISTS (SELECT 1 FROM job_instance x WHERE x.parent_id = p
                                        AND x.outcome IS DISTINCT FROM 'SUCCESS')
                           THEN 'shards' END
    WHERE id = p;
    -- a flow stage that was a sharded job is done now
    PERFORM ax_flow_stage_done(p, outcome = 'SUCCESS') FROM job_instance
    WHERE id = p AND flow_run_id IS NOT NULL;
    RETURN p;
END $$;
