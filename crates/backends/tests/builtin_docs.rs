//! docs/instruments.md's table of built-in instruments says what the profiles do: the
//! `claude-code` row names every variable the profile passes beyond the system ones (it left
//! out IS_SANDBOX, DISABLE_AUTOUPDATER, DISABLE_TELEMETRY and
//! CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC, which the profile passes).
#![allow(clippy::unwrap_used)]

use mozart_backends::InstrumentRegistry;

#[test]
fn the_claude_code_row_names_every_variable_the_profile_passes() {
    let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/instruments.md");
    let text = std::fs::read_to_string(&docs).unwrap();
    let row = text
        .lines()
        .find(|l| l.starts_with("| `claude-code` |"))
        .expect("the claude-code row");
    let registry = InstrumentRegistry::builtin().unwrap();
    let profile = registry.get("claude-code").unwrap();
    let vars = profile
        .cli
        .as_ref()
        .and_then(|c| c.command.required_env.clone())
        .unwrap_or_default();
    assert!(!vars.is_empty());
    // AWS_* and GOOGLE_* / CLOUD_ML_REGION are "AWS and Google credentials variables";
    // CLAUDE_CODE_USE_BEDROCK/VERTEX share one name in the row.
    let missing: Vec<&String> = vars
        .iter()
        .filter(|v| {
            !(v.starts_with("AWS_")
                || v.starts_with("GOOGLE_")
                || v.as_str() == "CLOUD_ML_REGION"
                || v.starts_with("CLAUDE_CODE_USE_")
                || row.contains(&format!("`{v}`")))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "not in the claude-code row: {missing:?}\n{row}"
    );
}
