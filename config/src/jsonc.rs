//! JSONC → JSON, keeping every byte offset (and so every line and column) unchanged.
//!
//! Accepted extensions over JSON, matching what OpenCode's `jsonc-parser` accepts in
//! `opencode.jsonc`: `// line` and `/* block */` comments and trailing commas before `}` / `]`.
//! Comments and trailing commas are overwritten with spaces; newlines inside block comments are
//! kept, so the line numbers serde_json reports are the line numbers of the original file.
//! (`json_comments` was not used: it flattens newlines inside block comments.)

/// Returns `text` with comments and trailing commas replaced by spaces, byte for byte.
/// A leading UTF-8 byte-order mark is replaced by one space.
pub(crate) fn to_json(text: &str) -> String {
    let text = match text.strip_prefix('\u{feff}') {
        Some(rest) => format!(" {rest}"),
        None => text.to_owned(),
    };
    let stripped = strip_comments(text.as_bytes());
    let cleaned = strip_trailing_commas(stripped);
    // Only ASCII bytes were overwritten, and every byte of a multi-byte character inside a
    // comment was overwritten, so the result is still valid UTF-8; fall back losslessly anyway.
    String::from_utf8(cleaned)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

fn strip_comments(input: &[u8]) -> Vec<u8> {
    #[derive(PartialEq)]
    enum State {
        Normal,
        InString,
        InStringEscape,
        LineComment,
        BlockComment,
    }
    let mut out = input.to_vec();
    let mut state = State::Normal;
    let mut i = 0;
    while i < input.len() {
        let b = input[i];
        match state {
            State::Normal => match b {
                b'"' => state = State::InString,
                b'/' if input.get(i + 1) == Some(&b'/') => {
                    out[i] = b' ';
                    out[i + 1] = b' ';
                    i += 1;
                    state = State::LineComment;
                }
                b'/' if input.get(i + 1) == Some(&b'*') => {
                    out[i] = b' ';
                    out[i + 1] = b' ';
                    i += 1;
                    state = State::BlockComment;
                }
                _ => {}
            },
            State::InString => match b {
                b'\\' => state = State::InStringEscape,
                b'"' => state = State::Normal,
                _ => {}
            },
            State::InStringEscape => state = State::InString,
            State::LineComment => {
                if b == b'\n' || b == b'\r' {
                    state = State::Normal;
                } else {
                    out[i] = b' ';
                }
            }
            State::BlockComment => {
                if b == b'*' && input.get(i + 1) == Some(&b'/') {
                    out[i] = b' ';
                    out[i + 1] = b' ';
                    i += 1;
                    state = State::Normal;
                } else if b != b'\n' && b != b'\r' {
                    out[i] = b' ';
                }
            }
        }
        i += 1;
    }
    out
}

fn strip_trailing_commas(mut buf: Vec<u8>) -> Vec<u8> {
    let mut in_string = false;
    let mut escape = false;
    for i in 0..buf.len() {
        let b = buf[i];
        if in_string {
            if escape {
                escape = false;
            } else if b == b'\\' {
                escape = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b',' => {
                let next = buf[i + 1..].iter().find(|c| !c.is_ascii_whitespace());
                if matches!(next, Some(b'}') | Some(b']')) {
                    buf[i] = b' ';
                }
            }
            _ => {}
        }
    }
    buf
}

/// 1-based (line, column) of byte `offset` in `text`; column counts bytes, like serde_json.
pub(crate) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text.as_bytes()[..offset];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |p| p + 1);
    (line, offset - line_start + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_comments_keeping_positions() {
        let src = "{\n  // hi \"there\"\n  \"a\": \"x//y\", /* multi\nline */ \"b\": 1\n}";
        let out = to_json(src);
        assert_eq!(out.len(), src.len());
        assert_eq!(out.lines().count(), src.lines().count());
        let v: serde_json::Value = serde_json::from_str(&out).expect("valid json");
        assert_eq!(v["a"], "x//y");
        assert_eq!(v["b"], 1);
    }

    #[test]
    fn strips_trailing_commas_but_not_in_strings() {
        let src = r#"{"a": [1, 2, ], "s": ",}", "o": {"x": 1,
        },}"#;
        let v: serde_json::Value = serde_json::from_str(&to_json(src)).expect("valid json");
        assert_eq!(v["a"], serde_json::json!([1, 2]));
        assert_eq!(v["s"], ",}");
        assert_eq!(v["o"]["x"], 1);
    }

    #[test]
    fn trailing_comma_before_comment_then_brace() {
        let src = "{\"a\": 1, // last\n}";
        let v: serde_json::Value = serde_json::from_str(&to_json(src)).expect("valid json");
        assert_eq!(v["a"], 1);
    }

    #[test]
    fn escaped_quote_in_string() {
        let src = r#"{"a": "q\"//not comment", }"#;
        let v: serde_json::Value = serde_json::from_str(&to_json(src)).expect("valid json");
        assert_eq!(v["a"], "q\"//not comment");
    }

    #[test]
    fn multibyte_in_comment_stays_utf8() {
        let src = "{ /* héllo ✓ */ \"a\": 1 }";
        let out = to_json(src);
        assert_eq!(out.len(), src.len());
        let v: serde_json::Value = serde_json::from_str(&out).expect("valid json");
        assert_eq!(v["a"], 1);
    }

    #[test]
    fn line_col_is_one_based() {
        assert_eq!(line_col("ab\ncd", 0), (1, 1));
        assert_eq!(line_col("ab\ncd", 4), (2, 2));
    }
}
