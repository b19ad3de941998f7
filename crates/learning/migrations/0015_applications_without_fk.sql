-- v15 (learning.md §4 step 2d): rebuild pattern_applications without foreign keys, keeping
-- every row. Only run when PRAGMA foreign_key_list(pattern_applications) is non-empty.
CREATE TABLE pattern_applications_new (
    id TEXT PRIMARY KEY,
    pattern_id TEXT,
    execution_id TEXT,
    applied_at TIMESTAMP,
    pattern_led_to_success BOOLEAN,
    retry_count_before INTEGER,
    retry_count_after INTEGER,
    grounding_confidence REAL
);
INSERT INTO pattern_applications_new
    (id, pattern_id, execution_id, applied_at, pattern_led_to_success,
     retry_count_before, retry_count_after, grounding_confidence)
SELECT id, pattern_id, execution_id, applied_at, pattern_led_to_success,
       retry_count_before, retry_count_after, grounding_confidence
  FROM pattern_applications;
DROP TABLE pattern_applications;
ALTER TABLE pattern_applications_new RENAME TO pattern_applications;
CREATE INDEX IF NOT EXISTS idx_app_pattern ON pattern_applications(pattern_id);
CREATE INDEX IF NOT EXISTS idx_app_execution ON pattern_applications(execution_id);
