//! The score rules, one family a test, through the loader a user's score goes through: each
//! case asserts the error type, the message and the field path and line `validate` shows.

use std::path::Path;

use crate::de::FieldError;
use crate::error::ConfigError;

/// A valid score's first lines; each case appends its own sections.
const BASE: &str = "name: t\nsheet: {size: 1, total_items: 1}\nprompt: {template: hi}\n";

/// Load `BASE` + `extra` and return the schema errors (none when it loads).
fn errors(extra: &str) -> Vec<FieldError> {
    let text = format!("{BASE}{extra}");
    match crate::load::load_score_str(&text, Path::new("t.yaml")) {
        Ok(_) => Vec::new(),
        Err(ConfigError::Schema { errors, .. }) => errors,
        Err(other) => panic!("not a schema error: {other}"),
    }
}

/// `(location, type, message, line)` of each error, as a user reads them.
fn seen(extra: &str) -> Vec<(String, String, String, Option<usize>)> {
    errors(extra)
        .into_iter()
        .map(|e| (e.loc_text(), e.kind, e.message, e.line))
        .collect()
}

fn one(
    loc: &str,
    kind: &str,
    message: &str,
    line: usize,
) -> Vec<(String, String, String, Option<usize>)> {
    vec![(loc.into(), kind.into(), message.into(), Some(line))]
}

#[test]
fn a_valid_score_has_no_errors() {
    assert!(errors("").is_empty());
}

#[test]
fn the_report_names_field_message_type_input_and_line() {
    let text = format!("{BASE}retry:\n  exponential_base: 1\n");
    let err = crate::load::load_score_str(&text, Path::new("t.yaml"))
        .err()
        .map(|e| e.to_string());
    assert_eq!(
        err.as_deref(),
        Some(
            "1 error in the score\nretry.exponential_base\n  Input should be greater than 1 \
             [type=greater_than, input_value=1, input_type=int]\n    in t.yaml, line 5"
        )
    );
}

#[test]
fn placement_rules() {
    assert_eq!(
        seen("placement: {type: local, partition: gpu}\n"),
        one(
            "placement.partition",
            "value_error",
            "'partition' is only used by 'type: slurm' (this placement is local)",
            4
        )
    );
    assert_eq!(
        seen("placement: {type: slurm, poll_interval_seconds: 0.01}\n"),
        one(
            "placement.poll_interval_seconds",
            "value_error",
            "poll_interval_seconds must be between 0.05 and 60",
            4
        )
    );
    assert_eq!(
        seen("placement: {type: local, array: true}\n"),
        one(
            "placement.array",
            "value_error",
            "'array' is only used by 'type: slurm' (this placement is local)",
            4
        )
    );
    assert_eq!(
        seen("placement: {type: slurm, cpus: 0}\n"),
        one("placement.cpus", "value_error", "cpus must be 1 or more", 4)
    );
    assert_eq!(
        seen("placement:\n  type: slurm\n  extra_args: [\"--mem=4G\", \"--array=1-3\", mem]\n"),
        vec![
            (
                "placement.extra_args.1".into(),
                "value_error".into(),
                "'--array=1-3' is not allowed here: one attempt is one Slurm job, or one task \
                 of the job array the placement submits itself with 'array: true'; a job array \
                 of your own would run the sheet many times"
                    .into(),
                Some(6)
            ),
            (
                "placement.extra_args.2".into(),
                "value_error".into(),
                "each extra_args entry is one sbatch option starting with '-' (e.g. \
                 '--mem=4G'), got 'mem'"
                    .into(),
                Some(6)
            ),
        ]
    );
    assert_eq!(
        seen("placement: {type: kubernetes}\n"),
        one(
            "placement.type",
            "value_error",
            "placement type 'kubernetes' is designed (docs/design/distributed.md) but not \
             implemented yet; use 'local' or 'slurm'",
            4
        )
    );
}

#[test]
fn refused_sbatch_options_match_by_name_with_or_without_a_value() {
    assert!(super::refused_sbatch_option("--array=1-3").is_some());
    assert!(super::refused_sbatch_option("-J").is_some());
    assert!(super::refused_sbatch_option("--mem=4G").is_none());
}

#[test]
fn instrument_and_movement_rules() {
    assert_eq!(
        seen("instrument: \"\"\n"),
        one(
            "instrument",
            "string_too_short",
            "String should have at least 1 character",
            4
        )
    );
    assert_eq!(
        seen("movements:\n  1: {voices: 0}\n"),
        one(
            "movements.1.voices",
            "greater_than_equal",
            "Input should be greater than or equal to 1",
            5
        )
    );
}

#[test]
fn bridge_rules() {
    assert_eq!(
        seen("bridge:\n  mcp_servers:\n    - name: x\n      command: y\n      env: {path: /tmp}\n"),
        one(
            "bridge.mcp_servers.0.env",
            "value_error",
            "MCP server env cannot override security-sensitive variable: path",
            8
        )
    );
    assert_eq!(
        seen("bridge: {complexity_threshold: 1.5}\n"),
        one(
            "bridge.complexity_threshold",
            "less_than_equal",
            "Input should be less than or equal to 1",
            4
        )
    );
}

#[test]
fn retry_rules() {
    assert_eq!(
        seen("retry:\n  base_delay_seconds: 30\n  max_delay_seconds: 10\n"),
        one(
            "retry",
            "value_error",
            "base_delay_seconds (30.0) must not exceed max_delay_seconds (10.0)",
            5
        )
    );
    assert_eq!(
        seen("retry:\n  exponential_base: 1\n"),
        one(
            "retry.exponential_base",
            "greater_than",
            "Input should be greater than 1",
            5
        )
    );
    assert_eq!(
        seen("retry:\n  completion_threshold_percent: 120\n"),
        one(
            "retry.completion_threshold_percent",
            "less_than_equal",
            "Input should be less than or equal to 100",
            5
        )
    );
}

#[test]
fn rate_limit_and_circuit_breaker_rules() {
    let regex = seen("rate_limit:\n  detection_patterns: [\"(unclosed\"]\n");
    assert_eq!(regex.len(), 1);
    assert_eq!(
        (regex[0].0.as_str(), regex[0].1.as_str(), regex[0].3),
        ("rate_limit.detection_patterns", "value_error", Some(5))
    );
    let message = &errors("rate_limit:\n  detection_patterns: [\"(unclosed\"]\n")[0].message;
    assert!(
        message.starts_with("detection_patterns[0] is not valid regex: '(unclosed' — "),
        "{message}"
    );
    assert_eq!(
        seen("rate_limit: {wait_minutes: 0}\n"),
        one(
            "rate_limit.wait_minutes",
            "greater_than_equal",
            "Input should be greater than or equal to 1",
            4
        )
    );
    assert_eq!(
        seen("circuit_breaker: {failure_threshold: 101}\n"),
        one(
            "circuit_breaker.failure_threshold",
            "less_than_equal",
            "Input should be less than or equal to 100",
            4
        )
    );
    assert_eq!(
        seen("circuit_breaker: {recovery_timeout_seconds: 4000}\n"),
        one(
            "circuit_breaker.recovery_timeout_seconds",
            "less_than_equal",
            "Input should be less than or equal to 3600",
            4
        )
    );
}

#[test]
fn cost_grounding_and_review_rules() {
    assert_eq!(
        seen("cost_limits: {enabled: true}\n"),
        one(
            "cost_limits",
            "value_error",
            "CostLimitConfig has enabled=True but no limits set. Set max_cost_per_sheet \
             and/or max_cost_per_job, or disable cost limits.",
            4
        )
    );
    assert_eq!(
        seen("cost_limits: {max_cost_per_job: 0}\n"),
        one(
            "cost_limits.max_cost_per_job",
            "greater_than",
            "Input should be greater than 0",
            4
        )
    );
    assert_eq!(
        seen("grounding: {enabled: true}\n"),
        one(
            "grounding",
            "value_error",
            "GroundingConfig has enabled=True but no hooks configured. Add at least one hook \
             or set enabled=False.",
            4
        )
    );
    assert_eq!(
        seen("ai_review: {min_score: 90, target_score: 80}\n"),
        one(
            "ai_review",
            "value_error",
            "min_score (90) must be <= target_score (80)",
            4
        )
    );
}

#[test]
fn logging_lifecycle_and_isolation_rules() {
    assert_eq!(
        seen("logging: {format: both}\n"),
        one(
            "logging",
            "value_error",
            "file_path is required when format='both'",
            4
        )
    );
    assert_eq!(
        seen("workspace_lifecycle:\n  preserve_patterns: [\"*.md\", \"\"]\n"),
        one(
            "workspace_lifecycle.preserve_patterns",
            "value_error",
            "preserve_patterns must not contain empty strings",
            5
        )
    );
    assert_eq!(
        seen("isolation: {branch_prefix: 9bad}\n"),
        one(
            "isolation.branch_prefix",
            "string_pattern_mismatch",
            "String should match pattern '^[a-zA-Z][a-zA-Z0-9_-]*$'",
            4
        )
    );
}

#[test]
fn conductor_parallel_and_stale_detection_rules() {
    assert_eq!(
        seen("conductor: {name: \"\"}\n"),
        one(
            "conductor.name",
            "string_too_short",
            "String should have at least 1 character",
            4
        )
    );
    assert_eq!(
        seen("parallel: {max_concurrent: 21}\n"),
        one(
            "parallel.max_concurrent",
            "less_than_equal",
            "Input should be less than or equal to 20",
            4
        )
    );
    assert_eq!(
        seen("parallel: {budget_partition: false}\n")[0].2,
        "ParallelConfig.budget_partition=False is not yet implemented. Cost checks currently \
         use global total regardless of this setting. Remove 'budget_partition: false' from \
         your config or keep the default (true)."
    );
    assert_eq!(
        seen("stale_detection: {idle_timeout_seconds: 60, check_interval_seconds: 60}\n"),
        one(
            "stale_detection",
            "value_error",
            "check_interval_seconds (60.0) must be less than idle_timeout_seconds (60.0)",
            4
        )
    );
}

#[test]
fn checkpoint_cross_sheet_and_feedback_rules() {
    assert_eq!(
        seen("checkpoints:\n  triggers:\n    - name: t1\n"),
        one(
            "checkpoints.triggers.0",
            "value_error",
            "CheckpointTrigger 't1' must have at least one non-empty condition (sheet_nums, \
             prompt_contains, or min_retry_count)",
            6
        )
    );
    assert_eq!(
        seen("checkpoints: {enabled: true}\n"),
        one(
            "checkpoints",
            "value_error",
            "CheckpointConfig has enabled=True but no triggers configured. Add at least one \
             trigger or set enabled=False.",
            4
        )
    );
    assert_eq!(
        seen("cross_sheet: {max_output_chars: 0}\n"),
        one(
            "cross_sheet.max_output_chars",
            "greater_than",
            "Input should be greater than 0",
            4
        )
    );
    let feedback = seen("feedback: {pattern: \"[a-\"}\n");
    assert_eq!(feedback.len(), 1);
    assert_eq!(feedback[0].0, "feedback.pattern");
    assert!(
        feedback[0]
            .2
            .starts_with("pattern is not valid regex: '[a-' — "),
        "{}",
        feedback[0].2
    );
}

#[test]
fn notification_hook_and_concert_rules() {
    assert_eq!(
        seen("notifications:\n  - type: webhook\n    on_events: [job_complete]\n"),
        one(
            "notifications.0",
            "value_error",
            "Webhook notification requires 'url' or 'url_env' in config",
            5
        )
    );
    assert_eq!(
        seen("notifications:\n  - type: slack\n    config: {webhook_url: \"\"}\n"),
        one(
            "notifications.0",
            "value_error",
            "Slack notification requires 'webhook_url' or 'webhook_url_env' in config",
            5
        )
    );
    assert_eq!(
        seen("on_success:\n  - type: run_job\n"),
        one(
            "on_success.0",
            "value_error",
            "Hook type 'run_job' requires 'job_path' field",
            5
        )
    );
    assert_eq!(
        seen("on_success:\n  - type: run_command\n"),
        one(
            "on_success.0",
            "value_error",
            "Hook type 'run_command' requires 'command' field",
            5
        )
    );
    assert_eq!(
        seen("concert: {max_chain_depth: 0}\n"),
        one(
            "concert.max_chain_depth",
            "greater_than_equal",
            "Input should be greater than or equal to 1",
            4
        )
    );
}

#[test]
fn spec_fragment_and_top_level_rules() {
    assert_eq!(
        seen("spec:\n  fragments:\n    - {name: \" \", content: x}\n"),
        one(
            "spec.fragments.0.name",
            "value_error",
            "SpecFragment name must not be empty",
            6
        )
    );
    assert_eq!(
        seen("instrument: gemini-cli\nbackend: {type: anthropic_api}\n"),
        vec![(
            String::new(),
            "value_error".into(),
            "Cannot specify both 'instrument: gemini-cli' and 'backend.type: anthropic_api'. \
             Use instrument: for config-driven instruments, or backend: for native backends. \
             Not both."
                .into(),
            Some(1)
        )]
    );
}

#[test]
fn sheet_rules() {
    let text = "name: t\nsheet:\n  size: 1\n  total_items: 3\n  dependencies: {2: [2]}\n\
                prompt: {template: hi}\n";
    let errs = match crate::load::load_score_str(text, Path::new("t.yaml")) {
        Err(ConfigError::Schema { errors, .. }) => errors,
        other => panic!("{other:?}"),
    };
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].loc_text(), "sheet.dependencies");
    assert_eq!(errs[0].message, "Sheet 2 cannot depend on itself");
    assert_eq!(errs[0].line, Some(5));

    let text = "name: t\nsheet:\n  size: 1\n  total_items: 3\n  \
                instrument_map: {a: [1, 2], b: [2]}\nprompt: {template: hi}\n";
    let errs = match crate::load::load_score_str(text, Path::new("t.yaml")) {
        Err(ConfigError::Schema { errors, .. }) => errors,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        errs.iter().map(|e| e.message.as_str()).collect::<Vec<_>>(),
        ["Sheet 2 assigned to multiple instruments in instrument_map: 'a' and 'b'"]
    );
    assert_eq!(errs[0].line, Some(5));

    let text = "name: t\nsheet: {size: 0, total_items: 3}\nprompt: {template: hi}\n";
    let errs = match crate::load::load_score_str(text, Path::new("t.yaml")) {
        Err(ConfigError::Schema { errors, .. }) => errors,
        other => panic!("{other:?}"),
    };
    assert_eq!(errs[0].loc_text(), "sheet.size");
    assert_eq!(errs[0].kind, "greater_than_equal");
    assert_eq!(errs[0].line, Some(2));
}

#[test]
fn prompt_and_backend_rules() {
    let text =
        "name: t\nsheet: {size: 1, total_items: 1}\nprompt: {template: hi, template_file: p.j2}\n";
    let errs = match crate::load::load_score_str(text, Path::new("t.yaml")) {
        Err(ConfigError::Schema { errors, .. }) => errors,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        errs.iter()
            .map(|e| (e.loc_text(), e.message.clone(), e.line))
            .collect::<Vec<_>>(),
        [(
            "prompt".to_string(),
            "prompt accepts 'template' or 'template_file', not both".to_string(),
            Some(3)
        )]
    );
    assert_eq!(
        seen("backend: {temperature: 1.5}\n"),
        one(
            "backend.temperature",
            "less_than_equal",
            "Input should be less than or equal to 1",
            4
        )
    );
    assert_eq!(
        seen("backend:\n  ollama: {num_ctx: 1024}\n"),
        one(
            "backend.ollama.num_ctx",
            "greater_than_equal",
            "Input should be greater than or equal to 4096",
            5
        )
    );
}

#[test]
fn validation_rules() {
    assert_eq!(
        seen("validations:\n  - type: file_exists\n"),
        one(
            "validations.0",
            "value_error",
            "Validation type 'file_exists' requires 'path' field",
            5
        )
    );
    assert_eq!(
        seen("validations:\n  - type: command_succeeds\n"),
        one(
            "validations.0",
            "value_error",
            "Validation type 'command_succeeds' requires 'command' field",
            5
        )
    );
    assert_eq!(
        seen("validations:\n  - {type: file_exists, path: x, stage: 11}\n"),
        one(
            "validations.0.stage",
            "less_than_equal",
            "Input should be less than or equal to 10",
            5
        )
    );
}

#[test]
fn learning_rules() {
    assert_eq!(
        seen("learning: {exploration_rate: 2}\n"),
        one(
            "learning.exploration_rate",
            "less_than_equal",
            "Input should be less than or equal to 1",
            4
        )
    );
    assert_eq!(
        seen("learning:\n  exploration_budget: {floor: -0.5}\n"),
        one(
            "learning.exploration_budget.floor",
            "greater_than_equal",
            "Input should be greater than or equal to 0",
            5
        )
    );
}

/// `sheet: N` on a rule becomes its condition when it has none; a condition given too wins
/// (score.md §3.7, upstream's model validator).
#[test]
fn a_rules_sheet_shorthand_becomes_its_condition_unless_one_is_given() {
    let text = format!(
        "{BASE}validations:\n  - {{type: file_exists, path: a, sheet: 3}}\n  \
         - {{type: file_exists, path: b, sheet: 3, condition: \"movement == 1\"}}\n  \
         - {{type: file_exists, path: c}}\n"
    );
    let score = crate::load::load_score_str(&text, Path::new("t.yaml")).unwrap();
    let conditions: Vec<Option<&str>> = score
        .config
        .validations
        .iter()
        .map(|r| r.condition.as_deref())
        .collect();
    assert_eq!(
        conditions,
        [Some("sheet_num == 3"), Some("movement == 1"), None]
    );
}

/// An unknown field the typo table does not list gets the closest valid field of its section.
#[test]
fn unknown_fields_get_the_closest_valid_field_of_their_section() {
    let hints = |extra: &str| crate::error::schema_hints(&errors(extra)).join("\n");
    let h = hints("retry:\n  max_retry: 2\n");
    assert!(
        h.contains("Unknown field 'retry.max_retry' — did you mean 'retry.max_retries'?"),
        "{h}"
    );
    let text = "name: t\nsheet: {size: 1, total_itmes: 1}\nprompt: {template: hi}\n";
    let errs = match crate::load::load_score_str(text, Path::new("t.yaml")) {
        Err(ConfigError::Schema { errors, .. }) => errors,
        other => panic!("not a schema error: {other:?}"),
    };
    let h = crate::error::schema_hints(&errs).join("\n");
    assert!(
        h.contains("Unknown field 'sheet.total_itmes' — did you mean 'sheet.total_items'?"),
        "{h}"
    );
    let h = hints("paralel: {max_concurrent: 2}\n");
    assert!(h.contains("did you mean 'parallel'?"), "{h}");
    let h = hints("zzzz: 1\n");
    assert!(
        h.contains("'zzzz' — this is not a valid score field."),
        "{h}"
    );
}
