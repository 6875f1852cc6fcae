-- 028_trace_id_time_first: the trace ids ax generates start with the time.
--
-- An instance that comes without a trace id gets one from ax: the ingest
-- (a submission without one), axctl submit, the API, the schedule's fires
-- (libax/src/store/ledger.c) and a flow's stages (ax_flow_advance, below).
-- They were 32 random hex digits, so each new instance put its key at a
-- random leaf of instance_def_trace, the B-tree every trace lookup uses:
-- over 2,000,000 rows that index cost 7.6 us a row (a random leaf is
-- seldom in the CPU's caches), 15.7 us and 3,374 WAL bytes a row while a
-- checkpoint had just begun (each random leaf's first change after it
-- writes the whole page), against 1.1 us and 466 bytes for keys that grow
-- with time (tests/bench/trace_index.sh, TRACE=random and TRACE=time;
-- BENCHMARKS.md, "Issue #13: the twenty-eighth session").
-- Now the first 12 hex digits are the time in ms since the epoch and the
-- other 20 random, the shape of ax_trace_id_new() in libax (core/util.c):
-- still 32 lowercase hex digits, a W3C trace-id; two ids of one ms differ
-- in 80 random bits.
-- Trace ids that clients give are kept as they are.
--
-- Additive: a new function, and ax_flow_advance (005) made again with it in
-- place of gen_random_uuid(); the previous release's statements keep
-- working.

-- 12 hex digits of the time in ms (truncated, as the C function's), then 20
-- random ones: the 15 after a random UUID's version and variant digits and
-- the first 5 of another's (gen_random_uuid(), not md5(), which a server
-- with OpenSSL in FIPS mode refuses).
CREATE FUNCTION ax_trace_id() RETURNS text LANGUAGE sql VOLATILE AS $$
    SELECT lpad(to_hex(greatest(0, floor(extract(epoch FROM clock_timestamp()) * 1000))::bigint),
                12, '0')
        || substr(replace(gen_random_uuid()::text, '-', ''), 18, 15)
        || substr(replace(gen_random_uuid()::text, '-', ''), 1, 5)
$$;

CREATE OR REPLACE FUNCTION ax_flow_advance(r bigint) RETURNS integer LANGUAGE plpgsql AS $$
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
            ax_trace_id(), 'flow:' || r || ':' || s.stage,
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
