-- 015_results_once: each instance's result exactly once on the results topic
-- (as a read_committed consumer sees it), across PostgreSQL and Kafka
-- restarts and kill -9 of ax-callback.
--
-- ax_result_outbox: the instances whose final outcome is still to be
-- published, written in the transaction that finishes them. One ax-callback
-- process of a deployment at a time (a PostgreSQL advisory lock) publishes
-- them, in Kafka transactions of a stable transactional.id, and deletes them
-- here (setting job_instance.result_published_at) in one statement.
CREATE TABLE IF NOT EXISTS ax_result_outbox (
    deployment  text   NOT NULL,
    instance_id bigint NOT NULL,
    PRIMARY KEY (deployment, instance_id)
);

-- ax_results_offset: per results-topic partition, the offset up to which
-- the topic has been reconciled with job_instance: every instance of a
-- committed record before next_offset is marked published. Advanced in the
-- same statement that marks a batch published; a publisher that starts,
-- takes over or could not mark what it committed first reads the topic from
-- here to its end and marks what it finds.
CREATE TABLE IF NOT EXISTS ax_results_offset (
    topic       text        NOT NULL,
    partition   int         NOT NULL,
    next_offset bigint      NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, partition)
);

-- What the previous code finished but had not published yet.
INSERT INTO ax_result_outbox (deployment, instance_id)
    SELECT deployment, id FROM job_instance
    WHERE state = 'FINISHED' AND result_published_at IS NULL
ON CONFLICT DO NOTHING;
