-- Conductor registry, schema 1. Timestamps are epoch seconds (REAL) as in upstream's
-- registry (conductor.md §10.2); checkpoint documents keep their ISO-8601 strings.

CREATE TABLE jobs (
    job_id               TEXT PRIMARY KEY NOT NULL,
    config_path          TEXT NOT NULL,
    workspace            TEXT NOT NULL,
    status               TEXT NOT NULL DEFAULT 'queued'
        CHECK (status IN ('queued','running','completed','paused','failed','cancelled','pending')),
    pid                  INTEGER,
    submitted_at         REAL NOT NULL,
    started_at           REAL,
    completed_at         REAL,
    updated_at           REAL NOT NULL,
    error_message        TEXT,
    error_traceback      TEXT,
    current_sheet        INTEGER,
    total_sheets         INTEGER,
    last_event_at        REAL,
    log_path             TEXT,
    snapshot_path        TEXT,
    -- The score as submitted: YAML text and the validated model as JSON.
    score_yaml           TEXT,
    config_snapshot_json TEXT,
    -- Concert chain (persisted so a restart keeps depth limits; upstream loses them, §11.2).
    concert_id           TEXT,
    chain_depth          INTEGER,
    parent_job_id        TEXT,
    concert_config_json  TEXT,
    hook_config_json     TEXT,
    completed_new_work   INTEGER NOT NULL DEFAULT 0,
    -- Submission options (fresh, start_sheet, self_healing, ...) as a JSON object.
    options_json         TEXT NOT NULL DEFAULT '{}',
    -- Job-level checkpoint fields as JSON, without `sheets` and `config_snapshot`, which
    -- live in their own rows / column so a sheet transition rewrites only small rows.
    checkpoint_json      TEXT
);

CREATE INDEX idx_jobs_status ON jobs(status, submitted_at DESC);
CREATE INDEX idx_jobs_submitted ON jobs(submitted_at DESC);

CREATE TABLE sheets (
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
    PRIMARY KEY (job_id, sheet_num)
) WITHOUT ROWID;

CREATE INDEX idx_sheets_status ON sheets(job_id, status);

CREATE TABLE attempts (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
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

CREATE INDEX idx_attempts_job_sheet ON attempts(job_id, sheet_num, id);

CREATE TABLE hook_results (
    job_id         TEXT NOT NULL REFERENCES jobs(job_id) ON DELETE CASCADE,
    hook_index     INTEGER NOT NULL,
    hook_type      TEXT NOT NULL,
    description    TEXT,
    success        INTEGER NOT NULL,
    output         TEXT,
    error_message  TEXT,
    exit_code      INTEGER,
    chained_job_id TEXT,
    started_at     REAL,
    finished_at    REAL,
    PRIMARY KEY (job_id, hook_index)
);

CREATE TABLE rate_limits (
    instrument  TEXT PRIMARY KEY NOT NULL,
    until       REAL NOT NULL,
    reason      TEXT,
    recorded_at REAL NOT NULL
);
