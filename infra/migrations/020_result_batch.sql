-- 020_result_batch: the results outbox per batch (issue #13; BENCHMARKS.md,
-- "Issue #13: the finish and the outbox per batch").
--
-- The finish statement wrote one ax_result_outbox row and its primary-key
-- entry per instance ended for good, and the publisher's mark deleted each
-- row again: three WAL records per job. Now a finish writes ONE
-- ax_result_batch row per statement (and deployment) holding the ids it
-- ended, and the mark deletes the row once every id in it is marked
-- published (removing the marked ids from a row it covers only in part).
-- The guarantee is unchanged: the row is written in the transaction that
-- finishes its instances, and leaves in the statement that marks them
-- published, after the Kafka commit.
--
-- min_id, max_id: the range of the ids, so a mark looks only into the rows
-- whose range meets its ids; n: how many ids, so the publisher reads the
-- oldest rows up to its batch size without opening the others.
--
-- Additive: ax_result_outbox stays. The previous release's finish writes
-- it during a rolling upgrade, and this release's publisher reads both
-- (as do its recovery's marks). A previous release's publisher reads only
-- ax_result_outbox: while one holds the publisher lock, the results of
-- this release's finishes wait (none is lost) until a callback of this
-- release takes the lock over (docs/DEPLOYMENT.md, "Rolling restart").
CREATE TABLE IF NOT EXISTS ax_result_batch (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    deployment  text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    min_id      bigint NOT NULL,
    max_id      bigint NOT NULL,
    n           integer NOT NULL,
    ids         bigint[] NOT NULL
);
