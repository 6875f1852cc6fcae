-- 001_init: jobs and their instances. Applied once by infra/lib.sh (ax_migrate),
-- recorded in ax_schema_migrations.

CREATE TYPE ax_instance_state AS ENUM ('SCHEDULED', 'LOCKED', 'RUNNING', 'FINISHED');
CREATE TYPE ax_outcome AS ENUM ('SUCCESS', 'FAILED', 'TIMEOUT', 'CANCELLED');

-- A job: what to run and how. An instance is one firing of it.
CREATE TABLE job (
    id                 bigserial PRIMARY KEY,
    name               text NOT NULL UNIQUE CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$'),
    handler_kind       text NOT NULL DEFAULT 'command' CHECK (handler_kind IN ('command', 'http', 'plugin')),
    command            text[] CHECK (handler_kind <> 'command' OR cardinality(command) > 0),
    handler_spec       jsonb NOT NULL DEFAULT '{}',      -- kind-specific settings (url, plugin path, ...)
    schedule_kind      text NOT NULL DEFAULT 'none'
                       CHECK (schedule_kind IN ('none', 'cron', 'fixed_rate', 'fixed_delay', 'once')),
    schedule_expr      text,                             -- cron expression, or period in ms, or ISO time
    time_zone          text NOT NULL DEFAULT 'UTC',
    timeout_ms         bigint NOT NULL DEFAULT 3600000 CHECK (timeout_ms > 0),
    retry_max          integer NOT NULL DEFAULT 3 CHECK (retry_max >= 0),
    retry_initial_ms   bigint NOT NULL DEFAULT 2000 CHECK (retry_initial_ms >= 0),
    retry_multiplier   double precision NOT NULL DEFAULT 2 CHECK (retry_multiplier >= 1),
    retry_max_ms       bigint NOT NULL DEFAULT 30000 CHECK (retry_max_ms >= 0),
    retry_jitter_ms    bigint NOT NULL DEFAULT 2000 CHECK (retry_jitter_ms >= 0),
    routing_key        text,
    concurrency_limit  integer CHECK (concurrency_limit IS NULL OR concurrency_limit > 0),
    priority           smallint NOT NULL DEFAULT 2 CHECK (priority BETWEEN 0 AND 4),
    enabled            boolean NOT NULL DEFAULT true,
    version            integer NOT NULL DEFAULT 1,       -- optimistic locking
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now()
);

-- One instance of a job (or of an inline command submitted without a job).
-- Every state change is a compare-and-swap on (id, state[, attempt]).
CREATE TABLE job_instance (
    id                  bigserial PRIMARY KEY,
    job_id              bigint REFERENCES job (id) ON DELETE SET NULL,
    job_name            text,                            -- NULL for inline commands
    attempt             integer NOT NULL DEFAULT 1 CHECK (attempt >= 1),
    state               ax_instance_state NOT NULL DEFAULT 'SCHEDULED',
    outcome             ax_outcome,
    handler_kind        text NOT NULL DEFAULT 'command',
    command             text[],
    payload             bytea NOT NULL DEFAULT '',
    timeout_ms          bigint NOT NULL CHECK (timeout_ms > 0),
    priority            smallint NOT NULL DEFAULT 2 CHECK (priority BETWEEN 0 AND 4),
    nominal_time        timestamptz,                     -- the schedule's fire time, if scheduled
    due_at              timestamptz NOT NULL,
    worker              text,
    lease_expires_at    timestamptz,
    scheduled_at        timestamptz NOT NULL DEFAULT now(),
    dispatched_at       timestamptz,                     -- produced to the dispatch topic
    locked_at           timestamptz,
    running_at          timestamptz,
    finished_at         timestamptz,
    result_published_at timestamptz,                     -- final outcome produced to the results topic
    exit_code           integer,
    error_class         text,
    error               text,
    output              text,
    trace_id            text NOT NULL,
    idempotency_key     text NOT NULL,
    submit_key          text UNIQUE,                     -- dedups a redelivered submission
    CHECK ((state = 'FINISHED') = (outcome IS NOT NULL)),
    CHECK (state <> 'FINISHED' OR finished_at IS NOT NULL)
);

-- What the trigger scans: due, not yet produced.
CREATE INDEX job_instance_due ON job_instance (due_at)
    WHERE state = 'SCHEDULED' AND dispatched_at IS NULL;
-- What the lease sweeper scans.
CREATE INDEX job_instance_lease ON job_instance (lease_expires_at)
    WHERE state IN ('LOCKED', 'RUNNING');
-- Finished but not yet announced on the results topic.
CREATE INDEX job_instance_unpublished ON job_instance (id)
    WHERE state = 'FINISHED' AND result_published_at IS NULL;
CREATE INDEX job_instance_trace ON job_instance (trace_id);
CREATE INDEX job_instance_job ON job_instance (job_id, id);

-- The history of attempts: one row per attempt that reported a result.
CREATE TABLE job_attempt (
    instance_id  bigint NOT NULL REFERENCES job_instance (id) ON DELETE CASCADE,
    attempt      integer NOT NULL,
    worker       text,
    outcome      ax_outcome NOT NULL,
    exit_code    integer,
    error_class  text,
    error        text,
    started_at   timestamptz,
    finished_at  timestamptz NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (instance_id, attempt)
);

-- Counters kept by the services (duplicates dropped, stale results, DLQ'd
-- messages), so an operator can see them with SQL or `axctl status`.
CREATE TABLE ax_counter (
    name        text PRIMARY KEY,
    value       bigint NOT NULL DEFAULT 0,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
