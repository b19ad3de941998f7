-- Learning store schema, version 15 (learning.md §3): 13 tables, 30 named indexes.
-- Every statement is idempotent: it runs on fresh databases and, after the legacy
-- column upgrades (applied from Rust in schema.rs because they are conditional),
-- on upstream databases older than version 15.

CREATE TABLE IF NOT EXISTS schema_version (
    version INTEGER PRIMARY KEY
);

CREATE TABLE IF NOT EXISTS executions (
    id TEXT PRIMARY KEY,
    workspace_hash TEXT NOT NULL,
    job_hash TEXT NOT NULL,
    sheet_num INTEGER NOT NULL,
    started_at TIMESTAMP,
    completed_at TIMESTAMP,
    duration_seconds REAL,
    status TEXT,
    retry_count INTEGER DEFAULT 0,
    success_without_retry BOOLEAN,
    validation_pass_rate REAL,
    confidence_score REAL,
    model TEXT,
    error_codes TEXT
);
CREATE INDEX IF NOT EXISTS idx_exec_workspace_job ON executions(workspace_hash, job_hash);
CREATE INDEX IF NOT EXISTS idx_exec_status ON executions(status);
CREATE INDEX IF NOT EXISTS idx_exec_started ON executions(started_at);

CREATE TABLE IF NOT EXISTS patterns (
    id TEXT PRIMARY KEY,
    pattern_type TEXT NOT NULL,
    pattern_name TEXT NOT NULL,
    description TEXT,
    occurrence_count INTEGER DEFAULT 1,
    first_seen TIMESTAMP,
    last_seen TIMESTAMP,
    last_confirmed TIMESTAMP,
    led_to_success_count INTEGER DEFAULT 0,
    led_to_failure_count INTEGER DEFAULT 0,
    effectiveness_score REAL DEFAULT 0.5,
    variance REAL DEFAULT 0.0,
    suggested_action TEXT,
    context_tags TEXT,
    priority_score REAL DEFAULT 0.5,
    quarantine_status TEXT DEFAULT 'pending',
    provenance_job_hash TEXT,
    provenance_sheet_num INTEGER,
    quarantined_at TIMESTAMP,
    validated_at TIMESTAMP,
    quarantine_reason TEXT,
    trust_score REAL DEFAULT 0.5,
    trust_calculation_date TIMESTAMP,
    success_factors TEXT,
    success_factors_updated_at TIMESTAMP,
    active INTEGER DEFAULT 1,
    content_hash TEXT,
    instrument_name TEXT
);
CREATE INDEX IF NOT EXISTS idx_patterns_type ON patterns(pattern_type);
CREATE INDEX IF NOT EXISTS idx_patterns_priority ON patterns(priority_score DESC);
CREATE INDEX IF NOT EXISTS idx_patterns_confirmed ON patterns(last_confirmed);
CREATE INDEX IF NOT EXISTS idx_patterns_quarantine ON patterns(quarantine_status);
CREATE INDEX IF NOT EXISTS idx_patterns_trust ON patterns(trust_score);
CREATE INDEX IF NOT EXISTS idx_patterns_content_hash ON patterns(content_hash);
CREATE INDEX IF NOT EXISTS idx_patterns_instrument ON patterns(instrument_name);

-- No foreign keys: the runner records synthetic execution ids (§3.4, dropped in v15).
CREATE TABLE IF NOT EXISTS pattern_applications (
    id TEXT PRIMARY KEY,
    pattern_id TEXT,
    execution_id TEXT,
    applied_at TIMESTAMP,
    pattern_led_to_success BOOLEAN,
    retry_count_before INTEGER,
    retry_count_after INTEGER,
    grounding_confidence REAL
);
CREATE INDEX IF NOT EXISTS idx_app_pattern ON pattern_applications(pattern_id);
CREATE INDEX IF NOT EXISTS idx_app_execution ON pattern_applications(execution_id);

CREATE TABLE IF NOT EXISTS error_recoveries (
    id TEXT PRIMARY KEY,
    error_code TEXT NOT NULL,
    suggested_wait REAL,
    actual_wait REAL,
    recovery_success BOOLEAN,
    recorded_at TIMESTAMP,
    model TEXT,
    time_of_day INTEGER
);
CREATE INDEX IF NOT EXISTS idx_recovery_code ON error_recoveries(error_code);
CREATE INDEX IF NOT EXISTS idx_recovery_success ON error_recoveries(recovery_success);

CREATE TABLE IF NOT EXISTS workspace_clusters (
    workspace_hash TEXT PRIMARY KEY,
    cluster_id TEXT,
    assigned_at TIMESTAMP
);

CREATE TABLE IF NOT EXISTS rate_limit_events (
    id TEXT PRIMARY KEY,
    error_code TEXT NOT NULL,
    model TEXT,
    recorded_at TIMESTAMP NOT NULL,
    expires_at TIMESTAMP NOT NULL,
    source_job_hash TEXT NOT NULL,
    duration_seconds REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_rate_limit_code ON rate_limit_events(error_code);
CREATE INDEX IF NOT EXISTS idx_rate_limit_expires ON rate_limit_events(expires_at);
CREATE INDEX IF NOT EXISTS idx_rate_limit_model ON rate_limit_events(model);

CREATE TABLE IF NOT EXISTS escalation_decisions (
    id TEXT PRIMARY KEY,
    job_hash TEXT NOT NULL,
    sheet_num INTEGER NOT NULL,
    confidence REAL NOT NULL,
    action TEXT NOT NULL,
    guidance TEXT,
    validation_pass_rate REAL NOT NULL,
    retry_count INTEGER NOT NULL,
    outcome_after_action TEXT,
    recorded_at TIMESTAMP NOT NULL,
    model TEXT
);
CREATE INDEX IF NOT EXISTS idx_escalation_job ON escalation_decisions(job_hash);
CREATE INDEX IF NOT EXISTS idx_escalation_action ON escalation_decisions(action);
CREATE INDEX IF NOT EXISTS idx_escalation_confidence ON escalation_decisions(confidence);

CREATE TABLE IF NOT EXISTS pattern_discovery_events (
    id TEXT PRIMARY KEY,
    pattern_id TEXT NOT NULL,
    pattern_name TEXT NOT NULL,
    pattern_type TEXT NOT NULL,
    source_job_hash TEXT NOT NULL,
    recorded_at TIMESTAMP NOT NULL,
    expires_at TIMESTAMP NOT NULL,
    effectiveness_score REAL NOT NULL,
    context_tags TEXT
);
CREATE INDEX IF NOT EXISTS idx_pattern_discovery_expires ON pattern_discovery_events(expires_at);
CREATE INDEX IF NOT EXISTS idx_pattern_discovery_source ON pattern_discovery_events(source_job_hash);
CREATE INDEX IF NOT EXISTS idx_pattern_discovery_type ON pattern_discovery_events(pattern_type);

CREATE TABLE IF NOT EXISTS evolution_trajectory (
    id TEXT PRIMARY KEY,
    cycle INTEGER NOT NULL UNIQUE,
    recorded_at TIMESTAMP NOT NULL,
    evolutions_completed INTEGER NOT NULL,
    evolutions_deferred INTEGER NOT NULL,
    issue_classes TEXT NOT NULL,
    cv_avg REAL NOT NULL,
    implementation_loc INTEGER NOT NULL,
    test_loc INTEGER NOT NULL,
    loc_accuracy REAL NOT NULL,
    research_candidates_resolved INTEGER DEFAULT 0,
    research_candidates_created INTEGER DEFAULT 0,
    notes TEXT
);
CREATE INDEX IF NOT EXISTS idx_trajectory_cycle ON evolution_trajectory(cycle);
CREATE INDEX IF NOT EXISTS idx_trajectory_recorded ON evolution_trajectory(recorded_at);

CREATE TABLE IF NOT EXISTS exploration_budget (
    id TEXT PRIMARY KEY,
    job_hash TEXT NOT NULL,
    recorded_at TIMESTAMP NOT NULL,
    budget_value REAL NOT NULL,
    entropy_at_time REAL,
    adjustment_type TEXT NOT NULL,
    adjustment_reason TEXT
);
CREATE INDEX IF NOT EXISTS idx_budget_job ON exploration_budget(job_hash);
CREATE INDEX IF NOT EXISTS idx_budget_recorded ON exploration_budget(recorded_at);

CREATE TABLE IF NOT EXISTS entropy_responses (
    id TEXT PRIMARY KEY,
    job_hash TEXT NOT NULL,
    recorded_at TIMESTAMP NOT NULL,
    entropy_at_trigger REAL NOT NULL,
    threshold_used REAL NOT NULL,
    actions_taken TEXT NOT NULL,
    budget_boosted INTEGER DEFAULT 0,
    quarantine_revisits INTEGER DEFAULT 0,
    patterns_revisited TEXT
);
CREATE INDEX IF NOT EXISTS idx_entropy_response_job ON entropy_responses(job_hash);
CREATE INDEX IF NOT EXISTS idx_entropy_response_recorded ON entropy_responses(recorded_at);

CREATE TABLE IF NOT EXISTS pattern_entropy_history (
    id TEXT PRIMARY KEY,
    calculated_at TIMESTAMP NOT NULL,
    shannon_entropy REAL NOT NULL,
    max_possible_entropy REAL NOT NULL,
    diversity_index REAL NOT NULL,
    unique_pattern_count INTEGER NOT NULL,
    effective_pattern_count INTEGER NOT NULL,
    total_applications INTEGER NOT NULL,
    dominant_pattern_share REAL NOT NULL,
    threshold_exceeded INTEGER DEFAULT 0
);
CREATE INDEX IF NOT EXISTS idx_entropy_history_calculated ON pattern_entropy_history(calculated_at DESC);

DELETE FROM schema_version;
INSERT INTO schema_version (version) VALUES (15);
