-- 019_standbys_stats: what ax-api's leader view and overview need.

-- Every running ax-trigger, leader or standby, as its last heartbeat left
-- it (GET /api/v1/leader's standbys, axctl status, the console's
-- overview). ax_leader says who leads; this says who else is there to take
-- over. Each trigger upserts its row at every lease tick (at most once a
-- second; no index but the primary key, so a HOT update) and deletes it
-- when it stops; rows silent for an hour are deleted by the others' beats.
CREATE TABLE IF NOT EXISTS trigger_member (
    role         text NOT NULL,
    holder       text NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (role, holder)
);

-- The overview's window (api.stats: finished and dispatched in the last N
-- minutes) without a sequential scan: a BRIN index, one summary per range
-- of pages, which the hot path's updates leave alone (claim, RUNNING,
-- lease renewals and the publish mark change neither column, so they stay
-- HOT; an insert or a non-HOT update writes WAL only when its value widens
-- its range's summary). BENCHMARKS.md, "api.stats over 1,000,000
-- instances", has the WAL per job with and without it.
CREATE INDEX IF NOT EXISTS instance_state_done_brin ON instance_state
    USING brin (finished_at, dispatched_at) WITH (autosummarize = on);
