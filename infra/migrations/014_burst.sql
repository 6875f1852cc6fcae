-- 014_burst: statements of the leader trigger that must hold at 1M
-- undispatched SCHEDULED rows (BENCHMARKS.md, "The burst"). Each of these
-- was a walk over every undispatched row (through job_instance_due or the
-- whole table) on every due scan, lag sample or sweep.

-- Statically sharded parents due now (the due scan expands them first).
CREATE INDEX IF NOT EXISTS job_instance_static_due ON job_instance (due_at)
    WHERE state = 'SCHEDULED' AND dispatched_at IS NULL AND shard_mode = 'static';
-- Deferred instances per lane (the lag sample counts them for axctl status).
CREATE INDEX IF NOT EXISTS job_instance_deferred ON job_instance (priority)
    WHERE state = 'SCHEDULED' AND dispatched_at IS NULL AND deferred_at IS NOT NULL;
-- Dispatched but not claimed yet (the sweep produces those never claimed again).
CREATE INDEX IF NOT EXISTS job_instance_dispatched ON job_instance (dispatched_at)
    WHERE state = 'SCHEDULED' AND dispatched_at IS NOT NULL;
