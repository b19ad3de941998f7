//! `skip_when` expressions (score.md §5.7) and validation `condition`s (§3.7.2): user text
//! evaluated inside the conductor, so a panic or stack overflow here would take the whole
//! daemon down with every job in it.
#![no_main]

use std::collections::HashMap;

use libfuzzer_sys::fuzz_target;
use mozart_config::expr::{condition_applies, evaluate, ExprContext};
use serde_json::json;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut ctx = ExprContext::default();
    for n in 1..=3u32 {
        let record = json!({"status": "completed", "validation_passed": n != 2, "attempt_count": n,
                            "outputs": ["a", "b"], "error": null});
        if let serde_json::Value::Object(map) = record {
            ctx.sheets.insert(n, map);
        }
    }
    if let serde_json::Value::Object(map) = json!({"status": "running", "total_sheets": 3}) {
        ctx.job = map;
    }
    let _ = evaluate(text, &ctx);
    let vars: HashMap<&str, i64> = [("sheet_num", 2), ("stage", 1), ("instance", 3)].into();
    let _ = condition_applies(Some(text), &vars);
});
