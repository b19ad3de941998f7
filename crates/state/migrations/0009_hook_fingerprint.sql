-- Schema 9: which hook each hook result is of (a fingerprint of its type and command or
-- job_path), so a resume after the score's hooks were edited does not take a result for the
-- hook now at its position. Older rows: NULL (matched by position, as before).
ALTER TABLE hook_results ADD COLUMN fingerprint TEXT;
