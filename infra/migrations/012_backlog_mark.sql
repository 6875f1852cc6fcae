-- 012_backlog_mark: when the leader trigger marked an instance as cut by its
-- job's backlog cap (error_class backlog_full, still SCHEDULED until
-- ax-callback finishes it). A mark whose attempt did not reach the callback
-- topic (a failed Kafka transaction, a crash between the commit and the
-- produce) is announced again once it is older than a few seconds, so no
-- capped instance stays SCHEDULED for good.
ALTER TABLE job_instance ADD COLUMN capped_at timestamptz;
