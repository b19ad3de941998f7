-- Registry schema 2: keep the rows that change with every sheet small.
--
-- 1. The score (YAML text and its validated JSON model, 50+ KB for a large score) moves out of
--    `jobs` into `job_scores`. It is written once per submission, but `jobs` is updated on
--    every sheet transition, and SQLite rewrites a whole row — overflow pages included — on
--    every UPDATE: a 1,000-sheet job was rewriting its score ~1,000 times.
-- 2. `sheets` becomes a rowid table. A WITHOUT ROWID table keeps rows in index b-tree pages,
--    where only ~1 KB of a row stays on its page; a sheet row (its state document is ~1.5 KB)
--    spilled onto an overflow page on every write. The unused (job_id, status) index goes.
-- 3. `attempts` loses AUTOINCREMENT, which updated `sqlite_sequence` on every attempt. Ids
--    still grow; one could be reused only after the newest attempt rows were deleted, and
--    then nothing refers to the old ones any more.

CREATE TABLE job_scores (
    job_id               TEXT PRIMARY KEY NOT NULL REFERENCES jobs(job_id) ON DELETE CASCADE,
    -- The score as submitted: YAML text and the validated model as JSON.
    score_yaml           TEXT,
    config_snapshot_json TEXT
);

INSERT INTO job_scores (job_id, score_yaml, config_snapshot_json)
    SELECT job_id, score_yaml, config_snapshot_json FROM jobs
    WHERE score_yaml IS NOT NULL OR config_snapshot_json IS NOT NULL;

ALTER TABLE jobs DROP COLUMN score_yaml;
ALTER TABLE jobs DROP COLUMN config_snapshot_json;

CREATE TABLE sheets_v2 (
    job_id                TEXT NOT NULL REFERENCES jobs(job_id) ON DELETE CASCADE,
    sheet_num             INTEGER NOT NULL CHECK (sheet_num >= 1),
    status                TEXT NOT NULL
        CHECK (status IN ('pending','in_progress','completed','failed','skipped')),
    attempt_count         INTEGER NOT NULL DEFAULT 0,
    completion_attempts   INTEGER NOT NULL DEFAULT 0,
    healing_attempts      INTEGER NOT NULL DEFAULT 0,
    started_at            TEXT,
    completed_at          TEXT,
    error_code            TEXT,
    error_category        TEXT,
    error_message         TEXT,
    validation_passed     INTEGER,
    validation_details_json TEXT,
    exit_code             INTEGER,
    cost_usd              REAL,
    input_tokens          INTEGER,
    output_tokens         INTEGER,
    duration_seconds      REAL,
    instrument_name       TEXT,
    -- The full SheetState document; the columns above are for queries.
    state_json            TEXT NOT NULL,
    updated_at            REAL NOT NULL,
    UNIQUE (job_id, sheet_num)
);

INSERT INTO sheets_v2 (job_id, sheet_num, status, attempt_count, completion_attempts,
    healing_attempts, started_at, completed_at, error_code, error_category, error_message,
    validation_passed, validation_details_json, exit_code, cost_usd, input_tokens,
    output_tokens, duration_seconds, instrument_name, state_json, updated_at)
    SELECT job_id, sheet_num, status, attempt_count, completion_attempts,
    healing_attempts, started_at, completed_at, error_code, error_category, error_message,
    validation_passed, validation_details_json, exit_code, cost_usd, input_tokens,
    output_tokens, duration_seconds, instrument_name, state_json, updated_at
    FROM sheets ORDER BY job_id, sheet_num;

DROP TABLE sheets;
ALTER TABLE sheets_v2 RENAME TO sheets;

CREATE TABLE attempts_v2 (
    id               INTEGER PRIMARY KEY,
    job_id           TEXT NOT NULL REFERENCES jobs(job_id) ON DELETE CASCADE,
    sheet_num        INTEGER NOT NULL CHECK (sheet_num >= 1),
    attempt_num      INTEGER NOT NULL,
    mode             TEXT NOT NULL,
    outcome          TEXT NOT NULL,
    instrument       TEXT,
    error_code       TEXT,
    error_category   TEXT,
    error_message    TEXT,
    exit_code        INTEGER,
    duration_seconds REAL,
    cost_usd         REAL,
    input_tokens     INTEGER,
    output_tokens    INTEGER,
    prompt           TEXT,
    output           TEXT,
    executed_at      REAL NOT NULL
);

INSERT INTO attempts_v2 (id, job_id, sheet_num, attempt_num, mode, outcome, instrument,
    error_code, error_category, error_message, exit_code, duration_seconds, cost_usd,
    input_tokens, output_tokens, prompt, output, executed_at)
    SELECT id, job_id, sheet_num, attempt_num, mode, outcome, instrument,
    error_code, error_category, error_message, exit_code, duration_seconds, cost_usd,
    input_tokens, output_tokens, prompt, output, executed_at
    FROM attempts ORDER BY id;

DROP TABLE attempts;
ALTER TABLE attempts_v2 RENAME TO attempts;
CREATE INDEX idx_attempts_job_sheet ON attempts(job_id, sheet_num, id);
