-- Schema 8: how many rate limits in a row a wait belongs to (the probe schedule's step), kept
-- with its deadline, so a restarted conductor (even after kill -9) goes on one step further
-- instead of starting the schedule again at its first, shortest wait. Older rows: 0 (the
-- restored wait counts as the first of its run, as before).
ALTER TABLE rate_limits ADD COLUMN streak INTEGER NOT NULL DEFAULT 0;
ALTER TABLE job_rate_limits ADD COLUMN streak INTEGER NOT NULL DEFAULT 0;
