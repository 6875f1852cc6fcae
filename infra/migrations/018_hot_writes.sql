-- 018_hot_writes: fewer PostgreSQL writes per job on the hot path (issue
-- #13; BENCHMARKS.md, "Issue #13: PostgreSQL writes per job").
--
-- The pending-dispatch marker per batch, not per instance. A leader's
-- dispatching statement (the ingest, the due scan's mark, the fire) marks
-- its instances dispatched and writes ONE dispatch_batch row holding their
-- ids; after the Kafka commit the settle deletes that row. dispatch_pending
-- wrote a row and a primary-key entry per instance and deleted each row
-- again: three WAL records per job, against three per batch now. Undoing
-- or holding part of a batch removes those ids from the row's array (rare
-- paths). Recovery is unchanged in meaning: the next leader (older epoch)
-- or anyone after a minute turns every instance of an unconfirmed batch
-- back into an undispatched one.
--
-- Additive: dispatch_pending stays. The previous release's triggers write
-- it during a rolling upgrade, and this release's recovery and retention
-- read it as well, so rows they left are recovered by the new leader.
CREATE TABLE IF NOT EXISTS dispatch_batch (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    epoch       bigint NOT NULL,
    deployment  text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    ids         bigint[] NOT NULL
);

-- The submission dedupe of a Kafka position (a submission without an
-- idempotency key: submit key kafka:TOPIC:PARTITION:OFFSET) as a
-- consumed-offset watermark per submit-topic partition, moved once per
-- batch in the ingest's transaction, instead of a submission row and its
-- primary-key entry per job. A partition's submissions are ingested in
-- offset order, so a redelivered one (a crash before the offset commit,
-- a rebalance) lies below the watermark and is a duplicate; the row is
-- locked by the ingest's upsert until it commits, so two triggers that
-- both hold the partition for a moment serialize on it. prev_offset is
-- next_offset before the last ingest moved it (what that statement
-- compared with). Idempotency keys keep their submission row. Additive: a
-- previous release's keys in submission are still looked up. fillfactor
-- 50: every batch updates the row (HOT, no index on the offsets).
CREATE TABLE IF NOT EXISTS submit_offset (
    topic       text NOT NULL,
    partition   integer NOT NULL,
    next_offset bigint NOT NULL,
    prev_offset bigint,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, partition)
) WITH (fillfactor = 50);
