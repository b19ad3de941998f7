//! The `{name}` scanner every single-brace placeholder expansion shares (score.md §5.8): a
//! leaf, so that `tasks` expands a branch template without the sheet values of
//! `placeholders`, which read the task list.

use std::borrow::Cow;

/// [`expand`](crate::placeholders::expand) with the values coming from `lookup` (`None`: the placeholder stays as written).
///
/// Which placeholders `lookup` is asked about depends only on `text`, never on the values it
/// returns, so a caller can learn which names a text uses from one call.
pub fn expand_with<'v>(text: &str, mut lookup: impl FnMut(&str) -> Option<Cow<'v, str>>) -> String {
    if !text.contains('{') {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len() + 32);
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let key_len = after
            .find(['}', '{'])
            .filter(|&i| after.as_bytes()[i] == b'}');
        match key_len.and_then(|len| lookup(&after[..len]).map(|v| (len, v))) {
            Some((len, value)) => {
                out.push_str(&value);
                rest = &after[len + 1..];
            }
            None => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}
