-- Schema 6: where a job's current run begins in its attempt history. A job's first
-- submission starts its run 1; each fresh start (`mozart run --fresh`, or a completed job
-- whose score changed) starts the next one. A resume continues the run it resumes. The
-- attempts stay (`mozart history` lists them all), but `errors`, `diagnose` and `status`
-- show the current run's: the attempts with an id above `after_attempt`, the newest id of
-- the job's attempts when the run started. Attempt ids grow, and that row stays while the
-- job does, so a later attempt's id is always above it. A job without a row is in run 1 and
-- every attempt of it is its run's (a registry migrated to this schema keeps showing all).
CREATE TABLE job_runs (
    job_id        TEXT PRIMARY KEY NOT NULL REFERENCES jobs(job_id) ON DELETE CASCADE,
    run           INTEGER NOT NULL CHECK (run >= 1),
    after_attempt INTEGER NOT NULL,
    started_at    REAL NOT NULL
);
