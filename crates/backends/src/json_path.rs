//! Dot-paths into JSON values (instruments.md §4.3): `key`, `key[N]`, and `*` over an
//! object's values or an array's items (upstream: objects only).

use serde_json::Value;

fn step<'a>(value: &'a Value, segment: &str) -> Option<&'a Value> {
    let (key, index) = match segment.find('[') {
        Some(open) if segment.ends_with(']') => {
            let idx: usize = segment[open + 1..segment.len() - 1].parse().ok()?;
            (&segment[..open], Some(idx))
        }
        _ => (segment, None),
    };
    let mut current = if key.is_empty() {
        value
    } else {
        value.as_object()?.get(key)?
    };
    if let Some(idx) = index {
        current = current.as_array()?.get(idx)?;
    }
    Some(current)
}

fn walk<'a>(value: &'a Value, segments: &[&str], all: bool, out: &mut Vec<&'a Value>) {
    let Some((first, rest)) = segments.split_first() else {
        if !value.is_null() {
            out.push(value);
        }
        return;
    };
    if *first == "*" {
        let children: Box<dyn Iterator<Item = &'a Value>> = match value {
            Value::Object(obj) => Box::new(obj.values()),
            Value::Array(items) => Box::new(items.iter()),
            _ => return,
        };
        for child in children {
            walk(child, rest, all, out);
            if !all && !out.is_empty() {
                return;
            }
        }
        return;
    }
    if let Some(next) = step(value, first) {
        walk(next, rest, all, out);
    }
}

/// The first non-null value the path resolves to.
pub fn resolve<'a>(value: &'a Value, path: &str) -> Option<&'a Value> {
    let segments: Vec<&str> = path.split('.').collect();
    let mut out = Vec::new();
    walk(value, &segments, false, &mut out);
    out.into_iter().next()
}

/// Every non-null value the path resolves to (wildcards expanded).
pub fn resolve_all<'a>(value: &'a Value, path: &str) -> Vec<&'a Value> {
    let segments: Vec<&str> = path.split('.').collect();
    let mut out = Vec::new();
    walk(value, &segments, true, &mut out);
    out
}

/// A JSON value as the text a user would expect (strings unquoted).
pub fn to_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_indices_and_wildcards() {
        let v = json!({"result": "hi", "a": {"b": [1, {"c": 3}]},
            "stats": {"models": {"m1": {"tokens": {"prompt": 5}}, "m2": {"tokens": {"prompt": 7}}}}});
        assert_eq!(resolve(&v, "result"), Some(&json!("hi")));
        assert_eq!(resolve(&v, "a.b[1].c"), Some(&json!(3)));
        assert_eq!(resolve(&v, "a.b[9]"), None);
        assert_eq!(resolve(&v, "stats.models.*.tokens.prompt"), Some(&json!(5)));
        let all: Vec<i64> = resolve_all(&v, "stats.models.*.tokens.prompt")
            .iter()
            .map(|x| x.as_i64().unwrap())
            .collect();
        assert_eq!(all, vec![5, 7]);
        assert_eq!(resolve(&v, "missing.x"), None);
    }

    #[test]
    fn a_wildcard_goes_over_an_array_too() {
        let v = json!({"data": {"items": [{"t": 3}, {"x": 1}, {"t": 4}]}, "n": 5});
        let all: Vec<i64> = resolve_all(&v, "data.items.*.t")
            .iter()
            .map(|x| x.as_i64().unwrap())
            .collect();
        assert_eq!(all, vec![3, 4]);
        assert_eq!(resolve(&v, "data.items.*.t"), Some(&json!(3)));
        assert!(resolve_all(&v, "n.*").is_empty());
    }
}
