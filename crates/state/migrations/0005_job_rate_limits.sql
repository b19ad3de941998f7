-- Schema 5: a job's own rate-limit wait on an instrument whose limits hold one job only (the
-- built-in `shell`: its sheets run each score's own commands, so a 429 one of them saw says
-- nothing about another job's). `rate_limits` holds an instrument's wait for every job; this
-- table the deadline of one job's, so a conductor restart keeps that job waiting. The rows
-- go with their job.
CREATE TABLE job_rate_limits (
    job_id      TEXT NOT NULL REFERENCES jobs(job_id) ON DELETE CASCADE,
    instrument  TEXT NOT NULL,
    until       REAL NOT NULL,
    reason      TEXT,
    recorded_at REAL NOT NULL,
    PRIMARY KEY (job_id, instrument)
);
