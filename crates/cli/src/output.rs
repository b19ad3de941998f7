//! Output helpers shared by commands (cli.md §1.6).

/// Print `Error: <message>` and, if any, a `Hints:` list, to stdout as upstream does.
pub fn print_error(message: &str, hints: &[String]) {
    println!("Error: {message}");
    if !hints.is_empty() {
        println!();
        println!("Hints:");
        for hint in hints {
            println!("  - {hint}");
        }
    }
}

/// Print a JSON value pretty-printed with 2-space indentation.
pub fn print_json(value: &serde_json::Value) {
    match serde_json::to_string_pretty(value) {
        Ok(text) => println!("{text}"),
        Err(err) => {
            println!("{{\"success\": false, \"message\": \"cannot encode output: {err}\"}}")
        }
    }
}
