//! Instrument output parsing: Claude Code json / stream-json lines fed to `ClaudeStream`
//! (claude-code-output.md §5, §8), and the dotted JSON paths generic CLI profiles use to
//! pull fields out of an instrument's JSON answer (instruments.md).
#![no_main]

use libfuzzer_sys::fuzz_target;
use mozart_backends::claude::ClaudeStream;
use mozart_backends::json_path;

fuzz_target!(|data: &[u8]| {
    let mut stream = ClaudeStream::default();
    for line in data.split(|&b| b == b'\n') {
        stream.feed(line);
    }
    if let Some(reset) = stream.rejected_reset {
        // A reset we will sleep until must be a real number, not NaN.
        assert!(!reset.is_nan());
    }
    // First line = a profile's JSON path, the rest = the instrument's JSON document.
    let text = String::from_utf8_lossy(data);
    let (path, doc) = text.split_once('\n').unwrap_or((&text, ""));
    if let Ok(value) = serde_json::from_str::<serde_json::Value>(doc) {
        if let Some(found) = json_path::resolve(&value, path) {
            let _ = json_path::to_text(found);
        }
        for found in json_path::resolve_all(&value, path) {
            let _ = json_path::to_text(found);
        }
    }
});
