-- 016_api: what ax-api and axctl's job pause-all/resume-all need.

-- The jobs the last pause-all disabled, so resume-all enables exactly
-- those (not the ones an operator had disabled on purpose).
CREATE TABLE IF NOT EXISTS job_paused (
    job_id    bigint PRIMARY KEY REFERENCES job (id) ON DELETE CASCADE,
    paused_at timestamptz NOT NULL DEFAULT now()
);
