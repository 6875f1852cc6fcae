-- ax: stop-the-world (not additive: the previous release's binaries write job_instance,
-- which is a view now; upgrade with the services stopped, docs/DEPLOYMENT.md)
--
-- 016_split_instance: every state change of an instance was a non-HOT update
-- of a 43-column job_instance row with 11 indexes (state sat in the
-- predicates of most of them): a new row version and an entry in every index
-- per transition (issue #13; BENCHMARKS.md, "Issue #13: PostgreSQL writes
-- per job"). The instance is split in two:
--
--   instance_def    what to run: written once, when the instance is
--                   created (command, payload, trace id, idempotency key,
--                   routing, flow and shard parent links); indexed freely.
--   instance_state  what happened: the state, its timestamps, attempt,
--                   lease, worker, outcome. Only a primary key and partial
--                   indexes whose key and predicate columns no transition of
--                   the executor changes: claim (LOCKED), RUNNING and lease
--                   renewals are HOT updates (no index entry written), in
--                   the free space fillfactor leaves on each page.
--
-- The queues the hot path scans are partial indexes on stored generated
-- columns of instance_state: a generated column changes only when the
-- queue's membership does, so a transition that keeps it in (or out of)
-- every queue stays HOT. Entering or leaving a queue (dispatch, finish, a
-- retry) is a non-HOT update writing an entry to the indexes whose
-- predicate holds for the new version (after a finish: the primary key
-- only). Measured against side tables in BENCHMARKS.md.
--
--   queued    SCHEDULED and not dispatched (the due scan)
--   flying    dispatched and not finished (lease expiry, never-claimed
--             redispatch)
--   active    not FINISHED (overlap: a job's running instances)
--   retrying  SCHEDULED as a retry (the retry budget)
--
-- job_instance and instance are views showing the whole row as before, for
-- axctl, tests and admin statements; they take INSERT, UPDATE and DELETE
-- through INSTEAD OF triggers (an UPDATE is a compare-and-set on the state
-- row's state, attempt and worker as the statement read them, writing only
-- the columns it changed). The store's hot statements write the tables.

ALTER TABLE job_instance RENAME TO job_instance_old;
DROP TRIGGER job_instance_after_insert ON job_instance_old;
DROP TRIGGER job_instance_after_delete ON job_instance_old;

CREATE TABLE instance_def (
    id              bigint PRIMARY KEY,
    job_id          bigint,
    job_name        text,
    handler_kind    text NOT NULL DEFAULT 'command',
    command         text[],
    payload         bytea NOT NULL DEFAULT '\x',
    timeout_ms      bigint NOT NULL CHECK (timeout_ms > 0),
    nominal_time    timestamptz,
    scheduled_at    timestamptz NOT NULL DEFAULT now(),
    trace_id        text NOT NULL,
    idempotency_key text NOT NULL,
    submit_key      text,
    executor_group  text NOT NULL DEFAULT 'default',
    routing_field   text,
    flow_run_id     bigint,
    flow_stage      text,
    parent_id       bigint
);
ALTER SEQUENCE job_instance_id_seq OWNED BY instance_def.id;
ALTER TABLE instance_def ALTER COLUMN id SET DEFAULT nextval('job_instance_id_seq');

-- fillfactor 40: a claim updates every row of a page in one statement (the
-- rows of a page were created together), so a page must hold a second
-- version of each before it can be pruned: measured, 40 makes claims,
-- RUNNING, renewals and the publish mark 94-100 % HOT, 50 82-90 %, 70
-- 33-88 %, 100 none (BENCHMARKS.md, "Issue #13", tests/bench/split_explain.sh).
CREATE TABLE instance_state (
    id                  bigint PRIMARY KEY,
    -- never changed by a transition (copied from the definition: the
    -- queues' keys and the claim's answer)
    job_id              bigint,
    deployment          text NOT NULL
        DEFAULT coalesce(nullif(current_setting('ax.deployment', true), ''), 'ax.'),
    priority            smallint NOT NULL DEFAULT 2 CHECK (priority BETWEEN 0 AND 4),
    shard_mode          text CHECK (shard_mode IN ('static', 'probe')),
    shard_index         integer NOT NULL DEFAULT 0,
    shard_total         integer NOT NULL DEFAULT 1,
    wait_for            bigint,
    -- the transitions
    attempt             integer NOT NULL DEFAULT 1 CHECK (attempt >= 1),
    state               ax_instance_state NOT NULL DEFAULT 'SCHEDULED',
    outcome             ax_outcome,
    due_at              timestamptz NOT NULL,
    worker              text,
    lease_expires_at    timestamptz,
    dispatched_at       timestamptz,
    locked_at           timestamptz,
    running_at          timestamptz,
    finished_at         timestamptz,
    result_published_at timestamptz,
    exit_code           integer,
    error_class         text,
    error               text,
    output              text,
    cancel_requested_at timestamptz,
    holds_slot          boolean NOT NULL DEFAULT false,
    shards_pending      integer,
    deferred_at         timestamptz,
    capped_at           timestamptz,
    -- queue membership (the partial indexes below)
    queued   boolean GENERATED ALWAYS AS (state = 'SCHEDULED' AND dispatched_at IS NULL) STORED,
    flying   boolean GENERATED ALWAYS AS (state IN ('LOCKED', 'RUNNING')
                 OR (state = 'SCHEDULED' AND dispatched_at IS NOT NULL)) STORED,
    active   boolean GENERATED ALWAYS AS (state <> 'FINISHED') STORED,
    retrying boolean GENERATED ALWAYS AS (state = 'SCHEDULED' AND attempt > 1) STORED,
    CHECK ((state = 'FINISHED') = (outcome IS NOT NULL)),
    CHECK (state <> 'FINISHED' OR finished_at IS NOT NULL)
) WITH (fillfactor = 40);

INSERT INTO instance_def (id, job_id, job_name, handler_kind, command, payload, timeout_ms, nominal_time, scheduled_at, trace_id, idempotency_key, submit_key, executor_group, routing_field, flow_run_id, flow_stage, parent_id)
    SELECT id, job_id, job_name, handler_kind, command, payload, timeout_ms, nominal_time, scheduled_at, trace_id, idempotency_key, submit_key, executor_group, routing_field, flow_run_id, flow_stage, parent_id FROM job_instance_old;
INSERT INTO instance_state (id, job_id, deployment, priority, shard_mode, shard_index, shard_total, wait_for, attempt, state, outcome, due_at, worker, lease_expires_at, dispatched_at, locked_at, running_at, finished_at, result_published_at, exit_code, error_class, error, output, cancel_requested_at, holds_slot, shards_pending, deferred_at, capped_at)
    SELECT id, job_id, deployment, priority, shard_mode, shard_index, shard_total, wait_for, attempt, state, outcome, due_at, worker, lease_expires_at, dispatched_at, locked_at, running_at, finished_at, result_published_at, exit_code, error_class, error, output, cancel_requested_at, holds_slot, shards_pending, deferred_at, capped_at FROM job_instance_old;
DROP TABLE job_instance_old;

CREATE INDEX instance_def_job ON instance_def (job_id, id);
CREATE INDEX instance_def_flow ON instance_def (flow_run_id) WHERE flow_run_id IS NOT NULL;
CREATE INDEX instance_def_parent ON instance_def (parent_id) WHERE parent_id IS NOT NULL;

-- The due scan, per lane, oldest first (was job_instance_due).
CREATE INDEX instance_state_due ON instance_state (priority, due_at) WHERE queued;
-- Statically sharded parents due now (the due scan expands them first).
CREATE INDEX instance_state_static_due ON instance_state (due_at)
    WHERE queued AND shard_mode = 'static';
-- Deferred instances per lane (the lag sample).
CREATE INDEX instance_state_deferred ON instance_state (priority)
    WHERE queued AND deferred_at IS NOT NULL;
-- Dispatched and not finished: lease expiry and never-claimed redispatch
-- (was job_instance_lease and job_instance_dispatched; lease_expires_at is
-- not indexed, so renewals stay HOT).
CREATE INDEX instance_state_flying ON instance_state (dispatched_at) WHERE flying;
-- A job's instances not FINISHED (overlap, running counts).
CREATE INDEX instance_state_active ON instance_state (job_id) WHERE active;
-- Retries waiting (the retry budget).
CREATE INDEX instance_state_retrying ON instance_state (deployment) WHERE retrying;

-- Trace id -> instances: the definition is never updated, so an index on
-- its trace id costs one entry per instance, like the side table of 011
-- did, without that table's row (and its statement trigger).
CREATE INDEX instance_def_trace ON instance_def (trace_id);
DROP TABLE instance_trace;
DROP FUNCTION ax_instance_after_insert();
CREATE VIEW instance_trace AS SELECT trace_id, id AS instance_id FROM instance_def;

-- Deleting a definition deletes its state row, attempts and submission key.
CREATE OR REPLACE FUNCTION ax_instance_after_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM instance_state s USING old_instances o WHERE s.id = o.id;
    DELETE FROM job_attempt a USING old_instances o WHERE a.instance_id = o.id;
    DELETE FROM submission s USING old_instances o
        WHERE o.submit_key IS NOT NULL AND s.submit_key = o.submit_key;
    RETURN NULL;
END $$;
CREATE TRIGGER instance_def_after_delete AFTER DELETE ON instance_def
    REFERENCING OLD TABLE AS old_instances FOR EACH STATEMENT
    EXECUTE FUNCTION ax_instance_after_delete();

-- The whole row as before.
CREATE VIEW instance AS SELECT
    s.id,
    s.job_id,
    d.job_name,
    s.attempt,
    s.state,
    s.outcome,
    d.handler_kind,
    d.command,
    d.payload,
    d.timeout_ms,
    s.priority,
    d.nominal_time,
    s.due_at,
    s.worker,
    s.lease_expires_at,
    d.scheduled_at,
    s.dispatched_at,
    s.locked_at,
    s.running_at,
    s.finished_at,
    s.result_published_at,
    s.exit_code,
    s.error_class,
    s.error,
    s.output,
    d.trace_id,
    d.idempotency_key,
    d.submit_key,
    s.wait_for,
    s.cancel_requested_at,
    d.executor_group,
    d.routing_field,
    s.holds_slot,
    s.deployment,
    d.flow_run_id,
    d.flow_stage,
    d.parent_id,
    s.shard_index,
    s.shard_total,
    s.shard_mode,
    s.shards_pending,
    s.deferred_at,
    s.capped_at
FROM instance_state s JOIN instance_def d ON d.id = s.id;
CREATE VIEW job_instance AS SELECT * FROM instance;
ALTER VIEW instance ALTER COLUMN id SET DEFAULT nextval('job_instance_id_seq');
ALTER VIEW instance ALTER COLUMN attempt SET DEFAULT 1;
ALTER VIEW instance ALTER COLUMN state SET DEFAULT 'SCHEDULED';
ALTER VIEW instance ALTER COLUMN handler_kind SET DEFAULT 'command';
ALTER VIEW instance ALTER COLUMN payload SET DEFAULT '\x'::bytea;
ALTER VIEW instance ALTER COLUMN priority SET DEFAULT 2;
ALTER VIEW instance ALTER COLUMN scheduled_at SET DEFAULT now();
ALTER VIEW instance ALTER COLUMN executor_group SET DEFAULT 'default';
ALTER VIEW instance ALTER COLUMN holds_slot SET DEFAULT false;
ALTER VIEW instance ALTER COLUMN shard_index SET DEFAULT 0;
ALTER VIEW instance ALTER COLUMN shard_total SET DEFAULT 1;
ALTER VIEW instance ALTER COLUMN deployment SET DEFAULT coalesce(nullif(current_setting('ax.deployment', true), ''), 'ax.');
ALTER VIEW job_instance ALTER COLUMN id SET DEFAULT nextval('job_instance_id_seq');
ALTER VIEW job_instance ALTER COLUMN attempt SET DEFAULT 1;
ALTER VIEW job_instance ALTER COLUMN state SET DEFAULT 'SCHEDULED';
ALTER VIEW job_instance ALTER COLUMN handler_kind SET DEFAULT 'command';
ALTER VIEW job_instance ALTER COLUMN payload SET DEFAULT '\x'::bytea;
ALTER VIEW job_instance ALTER COLUMN priority SET DEFAULT 2;
ALTER VIEW job_instance ALTER COLUMN scheduled_at SET DEFAULT now();
ALTER VIEW job_instance ALTER COLUMN executor_group SET DEFAULT 'default';
ALTER VIEW job_instance ALTER COLUMN holds_slot SET DEFAULT false;
ALTER VIEW job_instance ALTER COLUMN shard_index SET DEFAULT 0;
ALTER VIEW job_instance ALTER COLUMN shard_total SET DEFAULT 1;
ALTER VIEW job_instance ALTER COLUMN deployment SET DEFAULT coalesce(nullif(current_setting('ax.deployment', true), ''), 'ax.');
CREATE FUNCTION ax_instance_view_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.id := coalesce(NEW.id, nextval('job_instance_id_seq'));
    INSERT INTO instance_def (id, job_id, job_name, handler_kind, command, payload, timeout_ms, nominal_time, scheduled_at, trace_id, idempotency_key, submit_key, executor_group, routing_field, flow_run_id, flow_stage, parent_id)
    VALUES (NEW.id, NEW.job_id, NEW.job_name, NEW.handler_kind, NEW.command, NEW.payload, NEW.timeout_ms, NEW.nominal_time, NEW.scheduled_at, NEW.trace_id, NEW.idempotency_key, NEW.submit_key, NEW.executor_group, NEW.routing_field, NEW.flow_run_id, NEW.flow_stage, NEW.parent_id);
    INSERT INTO instance_state (id, job_id, deployment, priority, shard_mode, shard_index, shard_total, wait_for, attempt, state, outcome, due_at, worker, lease_expires_at, dispatched_at, locked_at, running_at, finished_at, result_published_at, exit_code, error_class, error, output, cancel_requested_at, holds_slot, shards_pending, deferred_at, capped_at)
    VALUES (NEW.id, NEW.job_id, NEW.deployment, NEW.priority, NEW.shard_mode, NEW.shard_index, NEW.shard_total, NEW.wait_for, NEW.attempt, NEW.state, NEW.outcome, NEW.due_at, NEW.worker, NEW.lease_expires_at, NEW.dispatched_at, NEW.locked_at, NEW.running_at, NEW.finished_at, NEW.result_published_at, NEW.exit_code, NEW.error_class, NEW.error, NEW.output, NEW.cancel_requested_at, NEW.holds_slot, NEW.shards_pending, NEW.deferred_at, NEW.capped_at);
    RETURN NEW;
END $$;
CREATE FUNCTION ax_instance_view_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.id IS DISTINCT FROM OLD.id THEN
        RAISE EXCEPTION 'an instance id never changes' USING ERRCODE = 'feature_not_supported';
    END IF;
    UPDATE instance_state s SET
        job_id = CASE WHEN NEW.job_id IS DISTINCT FROM OLD.job_id THEN NEW.job_id ELSE s.job_id END,
        deployment = CASE WHEN NEW.deployment IS DISTINCT FROM OLD.deployment THEN NEW.deployment ELSE s.deployment END,
        priority = CASE WHEN NEW.priority IS DISTINCT FROM OLD.priority THEN NEW.priority ELSE s.priority END,
        shard_mode = CASE WHEN NEW.shard_mode IS DISTINCT FROM OLD.shard_mode THEN NEW.shard_mode ELSE s.shard_mode END,
        shard_index = CASE WHEN NEW.shard_index IS DISTINCT FROM OLD.shard_index THEN NEW.shard_index ELSE s.shard_index END,
        shard_total = CASE WHEN NEW.shard_total IS DISTINCT FROM OLD.shard_total THEN NEW.shard_total ELSE s.shard_total END,
        wait_for = CASE WHEN NEW.wait_for IS DISTINCT FROM OLD.wait_for THEN NEW.wait_for ELSE s.wait_for END,
        attempt = CASE WHEN NEW.attempt IS DISTINCT FROM OLD.attempt THEN NEW.attempt ELSE s.attempt END,
        state = CASE WHEN NEW.state IS DISTINCT FROM OLD.state THEN NEW.state ELSE s.state END,
        outcome = CASE WHEN NEW.outcome IS DISTINCT FROM OLD.outcome THEN NEW.outcome ELSE s.outcome END,
        due_at = CASE WHEN NEW.due_at IS DISTINCT FROM OLD.due_at THEN NEW.due_at ELSE s.due_at END,
        worker = CASE WHEN NEW.worker IS DISTINCT FROM OLD.worker THEN NEW.worker ELSE s.worker END,
        lease_expires_at = CASE WHEN NEW.lease_expires_at IS DISTINCT FROM OLD.lease_expires_at THEN NEW.lease_expires_at ELSE s.lease_expires_at END,
        dispatched_at = CASE WHEN NEW.dispatched_at IS DISTINCT FROM OLD.dispatched_at THEN NEW.dispatched_at ELSE s.dispatched_at END,
        locked_at = CASE WHEN NEW.locked_at IS DISTINCT FROM OLD.locked_at THEN NEW.locked_at ELSE s.locked_at END,
        running_at = CASE WHEN NEW.running_at IS DISTINCT FROM OLD.running_at THEN NEW.running_at ELSE s.running_at END,
        finished_at = CASE WHEN NEW.finished_at IS DISTINCT FROM OLD.finished_at THEN NEW.finished_at ELSE s.finished_at END,
        result_published_at = CASE WHEN NEW.result_published_at IS DISTINCT FROM OLD.result_published_at THEN NEW.result_published_at ELSE s.result_published_at END,
        exit_code = CASE WHEN NEW.exit_code IS DISTINCT FROM OLD.exit_code THEN NEW.exit_code ELSE s.exit_code END,
        error_class = CASE WHEN NEW.error_class IS DISTINCT FROM OLD.error_class THEN NEW.error_class ELSE s.error_class END,
        error = CASE WHEN NEW.error IS DISTINCT FROM OLD.error THEN NEW.error ELSE s.error END,
        output = CASE WHEN NEW.output IS DISTINCT FROM OLD.output THEN NEW.output ELSE s.output END,
        cancel_requested_at = CASE WHEN NEW.cancel_requested_at IS DISTINCT FROM OLD.cancel_requested_at THEN NEW.cancel_requested_at ELSE s.cancel_requested_at END,
        holds_slot = CASE WHEN NEW.holds_slot IS DISTINCT FROM OLD.holds_slot THEN NEW.holds_slot ELSE s.holds_slot END,
        shards_pending = CASE WHEN NEW.shards_pending IS DISTINCT FROM OLD.shards_pending THEN NEW.shards_pending ELSE s.shards_pending END,
        deferred_at = CASE WHEN NEW.deferred_at IS DISTINCT FROM OLD.deferred_at THEN NEW.deferred_at ELSE s.deferred_at END,
        capped_at = CASE WHEN NEW.capped_at IS DISTINCT FROM OLD.capped_at THEN NEW.capped_at ELSE s.capped_at END
    WHERE s.id = OLD.id AND s.state = OLD.state AND s.attempt = OLD.attempt
      AND s.worker IS NOT DISTINCT FROM OLD.worker;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF ROW(NEW.job_id, NEW.job_name, NEW.handler_kind, NEW.command, NEW.payload, NEW.timeout_ms, NEW.nominal_time, NEW.scheduled_at, NEW.trace_id, NEW.idempotency_key, NEW.submit_key, NEW.executor_group, NEW.routing_field, NEW.flow_run_id, NEW.flow_stage, NEW.parent_id) IS DISTINCT FROM ROW(OLD.job_id, OLD.job_name, OLD.handler_kind, OLD.command, OLD.payload, OLD.timeout_ms, OLD.nominal_time, OLD.scheduled_at, OLD.trace_id, OLD.idempotency_key, OLD.submit_key, OLD.executor_group, OLD.routing_field, OLD.flow_run_id, OLD.flow_stage, OLD.parent_id) THEN
        UPDATE instance_def SET
            job_id = NEW.job_id,
            job_name = NEW.job_name,
            handler_kind = NEW.handler_kind,
            command = NEW.command,
            payload = NEW.payload,
            timeout_ms = NEW.timeout_ms,
            nominal_time = NEW.nominal_time,
            scheduled_at = NEW.scheduled_at,
            trace_id = NEW.trace_id,
            idempotency_key = NEW.idempotency_key,
            submit_key = NEW.submit_key,
            executor_group = NEW.executor_group,
            routing_field = NEW.routing_field,
            flow_run_id = NEW.flow_run_id,
            flow_stage = NEW.flow_stage,
            parent_id = NEW.parent_id
        WHERE id = OLD.id;
    END IF;
    SELECT * INTO NEW FROM instance WHERE id = OLD.id;
    RETURN NEW;
END $$;
CREATE FUNCTION ax_instance_view_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM instance_def WHERE id = OLD.id;
    RETURN CASE WHEN FOUND THEN OLD END;
END $$;
CREATE TRIGGER instance_insert INSTEAD OF INSERT ON instance FOR EACH ROW EXECUTE FUNCTION ax_instance_view_insert();
CREATE TRIGGER instance_update INSTEAD OF UPDATE ON instance FOR EACH ROW EXECUTE FUNCTION ax_instance_view_update();
CREATE TRIGGER instance_delete INSTEAD OF DELETE ON instance FOR EACH ROW EXECUTE FUNCTION ax_instance_view_delete();
CREATE TRIGGER job_instance_insert INSTEAD OF INSERT ON job_instance FOR EACH ROW EXECUTE FUNCTION ax_instance_view_insert();
CREATE TRIGGER job_instance_update INSTEAD OF UPDATE ON job_instance FOR EACH ROW EXECUTE FUNCTION ax_instance_view_update();
CREATE TRIGGER job_instance_delete INSTEAD OF DELETE ON job_instance FOR EACH ROW EXECUTE FUNCTION ax_instance_view_delete();
-- The functions that change instances write the tables: an UPDATE of the
-- view is a compare-and-set on the row as the statement read it, while a
-- counter (shards_pending - 1) must be applied to the latest version.
CREATE OR REPLACE FUNCTION ax_job_after_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM job_fire f USING old_jobs o WHERE f.job_id = o.id;
    UPDATE instance_state i SET job_id = NULL FROM old_jobs o WHERE i.job_id = o.id;
    UPDATE instance_def i SET job_id = NULL FROM old_jobs o WHERE i.job_id = o.id;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION ax_shard_expand(p bigint, n integer) RETURNS integer
LANGUAGE plpgsql AS $$
BEGIN
    IF n <= 0 THEN  -- nothing to process: done at once
        UPDATE instance_state SET state = 'FINISHED', outcome = 'SUCCESS', worker = 'shards',
            finished_at = clock_timestamp(), shards_pending = 0, lease_expires_at = NULL
        WHERE id = p AND state <> 'FINISHED';
        PERFORM ax_flow_stage_done(p, true) FROM instance_def
        WHERE id = p AND flow_run_id IS NOT NULL;
        RETURN 0;
    END IF;
    WITH c AS MATERIALIZED (
        SELECT nextval('job_instance_id_seq') AS id, k FROM generate_series(0, n - 1) k
    ), d AS (
        INSERT INTO instance_def (id, job_id, job_name, handler_kind, command, payload,
            timeout_ms, nominal_time, trace_id, idempotency_key, executor_group, routing_field,
            parent_id)
        SELECT c.id, d.job_id, d.job_name, d.handler_kind, d.command, d.payload, d.timeout_ms,
            d.nominal_time, d.trace_id || '-' || c.k, d.idempotency_key || '#' || c.k,
            d.executor_group, d.routing_field, d.id
        FROM instance_def d, c WHERE d.id = p
    )
    INSERT INTO instance_state (id, job_id, deployment, priority, due_at, shard_index,
        shard_total)
    SELECT c.id, s.job_id, s.deployment, s.priority, now(), c.k, n
    FROM instance_state s, c WHERE s.id = p;
    UPDATE instance_state SET state = 'RUNNING', worker = 'shards', shards_pending = n,
        locked_at = coalesce(locked_at, clock_timestamp()), running_at = clock_timestamp(),
        lease_expires_at = NULL, dispatched_at = coalesce(dispatched_at, now())
    WHERE id = p;
    PERFORM pg_notify('ax_due', (SELECT deployment FROM instance_state WHERE id = p));
    RETURN n;
END $$;

CREATE OR REPLACE FUNCTION ax_shard_child_done(c bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    p bigint;
    left_ integer;
BEGIN
    SELECT parent_id INTO p FROM instance_def WHERE id = c;
    IF p IS NULL THEN
        RETURN NULL;
    END IF;
    UPDATE instance_state SET shards_pending = shards_pending - 1
    WHERE id = p AND state = 'RUNNING' AND shards_pending > 0
    RETURNING shards_pending INTO left_;
    IF left_ IS NULL OR left_ > 0 THEN
        RETURN NULL;
    END IF;
    UPDATE instance_state SET state = 'FINISHED', finished_at = clock_timestamp(),
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
    PERFORM ax_flow_stage_done(p, i.outcome = 'SUCCESS') FROM job_instance i
    WHERE i.id = p AND i.flow_run_id IS NOT NULL;
    RETURN p;
END $$;

ANALYZE instance_def;
ANALYZE instance_state;
