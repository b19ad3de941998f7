//! Score YAML → validated score → sheet plan → rendered prompt of every sheet.
//!
//! Any input may be rejected with a `ConfigError`; none may panic, hang or exhaust memory
//! (architecture invariant 7: bad input is named, never a crash).
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use mozart_config::{load_score_str, template, RenderContext, SheetPlan};

/// Rendering every sheet of a 10 000-sheet plan would only measure minijinja's speed.
const MAX_RENDERED_SHEETS: usize = 8;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(score) = load_score_str(text, Path::new("/fuzz/score.yaml")) else {
        return;
    };
    let Ok(plan) = SheetPlan::build(&score.config) else {
        return;
    };
    let ctx = RenderContext::default();
    for sheet in plan.sheets.iter().take(MAX_RENDERED_SHEETS) {
        let _ = template::render_prompt(&score.config, sheet, &ctx);
    }
});
