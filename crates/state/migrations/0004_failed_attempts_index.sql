-- Schema 4: a job's failed attempts (those that recorded an error), newest first, without
-- a scan of all its attempts: `job.status` reads the newest ten and their count on every
-- call (Recent Errors), and a 100,000-sheet job has 100,000 attempts, nearly all passed.
CREATE INDEX idx_attempts_failed ON attempts(job_id, id)
    WHERE error_code IS NOT NULL OR error_message IS NOT NULL;
