//! Cleaning a title model's answer into a session title (after OpenCode `ensureTitle`).

/// Longest title [`title_from_response`] returns, chars (longer ones become 97 chars +
/// `...`). Source: OpenCode `ensureTitle`.
pub const TITLE_MAX_CHARS: usize = 100;

/// Remove `<think>…</think>` blocks; an unclosed `<think>` drops the rest of the text.
fn strip_think(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("<think>") {
        out.push_str(&rest[..start]);
        let after = &rest[start + "<think>".len()..];
        match after.find("</think>") {
            Some(end) => rest = &after[end + "</think>".len()..],
            None => return out,
        }
    }
    out.push_str(rest);
    out
}

/// Strip one matching pair of surrounding quote/backtick/emphasis marks, if present.
fn strip_wrapping(s: &str) -> Option<&str> {
    const PAIRS: &[(&str, &str)] = &[
        ("\"", "\""),
        ("'", "'"),
        ("`", "`"),
        ("**", "**"),
        ("*", "*"),
        ("_", "_"),
        ("\u{201c}", "\u{201d}"),
        ("\u{2018}", "\u{2019}"),
    ];
    PAIRS.iter().find_map(|(open, close)| {
        (s.len() >= open.len() + close.len() && s.starts_with(open) && s.ends_with(close))
            .then(|| &s[open.len()..s.len() - close.len()])
    })
}

/// Strip a leading `Title:` (any case).
fn strip_title_label(s: &str) -> Option<&str> {
    let head = s.get(..6)?;
    head.eq_ignore_ascii_case("title:").then(|| &s[6..])
}

/// A session title from a title model's answer (after OpenCode `ensureTitle`): remove
/// `<think>…</think>` blocks, take the first non-empty line, strip leading Markdown `#`s,
/// surrounding quotes / backticks / emphasis marks and a leading `Title:` (repeatedly, in any
/// order), collapse runs of whitespace to one space, and cut to [`TITLE_MAX_CHARS`] chars
/// (97 chars + `...` when longer). `None` when nothing is left.
pub fn title_from_response(text: &str) -> Option<String> {
    let cleaned = strip_think(text);
    let line = cleaned.lines().map(str::trim).find(|l| !l.is_empty())?;
    let mut s = line;
    loop {
        let before = s;
        s = s.trim().trim_start_matches('#').trim();
        if let Some(inner) = strip_wrapping(s) {
            s = inner;
        }
        if let Some(inner) = strip_title_label(s) {
            s = inner;
        }
        if s == before {
            break;
        }
    }
    let collapsed = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if collapsed.is_empty() {
        return None;
    }
    if collapsed.chars().count() > TITLE_MAX_CHARS {
        let head: String = collapsed.chars().take(TITLE_MAX_CHARS - 3).collect();
        return Some(format!("{}...", head.trim_end()));
    }
    Some(collapsed)
}

#[cfg(test)]
#[path = "title_tests.rs"]
mod tests;
