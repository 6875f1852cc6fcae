-- 022_autovacuum: autovacuum thresholds of the tables retention deletes
-- from (issue #13; BENCHMARKS.md, "Issue #13: the sustained tail").
--
-- Every job leaves dead rows at the job rate: its instance_def,
-- instance_state, job_attempt and submission rows once retention deletes
-- them, and instance_state's older versions (the claim, RUNNING, the
-- finish and the publish mark; HOT, pruned in place, but the versions that
-- left a queue's index and the deleted rows need a vacuum). PostgreSQL's
-- default vacuums a table once 20 % of it is dead: with retention holding
-- R rows that is every 0.2 R dead rows (1.2 M rows at 10,000 jobs/s and
-- 2 minutes' retention: every ~25 s, and every 1.4 days at 7 days'), and
-- between two vacuums the deletes' space cannot be reused, so the files
-- grow (instance_state 330 -> 1,554 MB in a 10-minute run while its rows
-- stayed at 1.2 M; at 3,000 jobs/s and 1 minute's retention, 4 minutes:
-- instance_state 285 MB, instance_def 158 MB and growing, against 131-148
-- and 95-100 MB with this and infra's settings, the same rows). Here
-- each is vacuumed after 2 % of its rows + 10,000 have died, faster (cost
-- limit 1,000, five times the default), and analyzed as often (its
-- statistics move with the retention's window).
--
-- Additive: storage parameters only, no rewrite, no lock beyond a moment's
-- SHARE UPDATE EXCLUSIVE; a previous release runs on it unchanged.
ALTER TABLE instance_state SET (autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 10000, autovacuum_vacuum_insert_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_cost_limit = 1000);
ALTER TABLE instance_def SET (autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 10000, autovacuum_vacuum_insert_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_cost_limit = 1000);
ALTER TABLE job_attempt SET (autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 10000, autovacuum_vacuum_insert_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_cost_limit = 1000);
ALTER TABLE submission SET (autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 10000, autovacuum_vacuum_insert_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_cost_limit = 1000);
