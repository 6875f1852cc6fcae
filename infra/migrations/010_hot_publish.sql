-- 010_hot_publish: ax-callback finds the unpublished instances of a batch by
-- primary key (id = ANY ... AND result_published_at IS NULL) and recovers a
-- crash between its commit and the publish through redelivery, so the
-- partial index job_instance_unpublished was never read. Without it no
-- index covers result_published_at and marking an instance published can be
-- a HOT update (no index entries written), when the page has room.
DROP INDEX IF EXISTS job_instance_unpublished;
