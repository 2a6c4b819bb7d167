//! Helpers on tree-sitter nodes and bash words: literals, quoting, ANSI-C strings, line continuations.

use super::*;

/// Whether a node of `kind` is under `node`.
pub(super) fn has_descendant(node: Node<'_>, kind: &str) -> bool {
    let mut stack = vec![node];
    while let Some(n) = stack.pop() {
        if n.kind() == kind {
            return true;
        }
        let mut cur = n.walk();
        stack.extend(n.children(&mut cur));
    }
    false
}

/// The children of `node` with their field names (`name`, `argument`, `body`, …).
pub(super) fn fielded(node: Node<'_>) -> Vec<(Option<&'static str>, Node<'_>)> {
    let mut cur = node.walk();
    node.children(&mut cur)
        .enumerate()
        .map(|(i, k)| (node.field_name_for_child(i as u32), k))
        .collect()
}

/// The first `ERROR` or missing node under `node`.
pub(super) fn first_error(node: Node<'_>) -> Option<Node<'_>> {
    if node.is_error() || node.is_missing() {
        return Some(node);
    }
    let mut cur = node.walk();
    let kids: Vec<Node<'_>> = node.children(&mut cur).collect();
    kids.into_iter()
        .filter(|k| k.has_error())
        .find_map(first_error)
}

/// A word node's literal value (quotes and backslashes removed) and its text.
pub(super) fn word(node: Node<'_>, src: &str) -> Word {
    let raw = src[node.byte_range()].to_string();
    let mut glob = false;
    let lit = literal(node, src, &mut glob);
    let skel = match &lit {
        Some(l) => l.clone(),
        None => skeleton(node, src),
    };
    Word {
        lit,
        raw,
        glob,
        skel,
    }
}

/// The literal parts of a word node with each expansion replaced by `\0`.
pub(super) fn skeleton(node: Node<'_>, src: &str) -> String {
    let text = &src[node.byte_range()];
    match node.kind() {
        "word" | "number" if node.named_child_count() == 0 => unescape_word(text),
        "raw_string" => text.trim_matches('\'').to_string(),
        "string_content" => unescape_double(text),
        "command_name" => node
            .named_child(0)
            .map(|c| skeleton(c, src))
            .unwrap_or_default(),
        "string" | "concatenation" | "translated_string" => {
            let mut out = String::new();
            let mut cur = node.walk();
            for c in node.children(&mut cur) {
                if c.is_named() {
                    out.push_str(&skeleton(c, src));
                } else if node.kind() == "concatenation" {
                    out.push_str(&src[c.byte_range()]);
                }
            }
            out
        }
        _ => "\0".to_string(),
    }
}

/// A literal word holding a subscript with code in it (`a[$(rm d)]`): bash runs the code
/// when it evaluates the word as a variable name or arithmetic.
pub(super) fn holds_subscript_code(w: &Word) -> bool {
    w.lit.as_deref().is_some_and(|l| {
        l.contains('[') && (l.contains("$(") || l.contains('`') || l.contains("${"))
    })
}

/// Literal value of a word node, or `None` when it contains an expansion.
pub(super) fn literal(node: Node<'_>, src: &str, glob: &mut bool) -> Option<String> {
    let text = &src[node.byte_range()];
    match node.kind() {
        "word" | "number" if node.named_child_count() == 0 => {
            if has_unquoted_glob(text) {
                *glob = true;
            }
            Some(unescape_word(text))
        }
        "command_name" => node.named_child(0).and_then(|c| literal(c, src, glob)),
        "raw_string" => Some(
            text.strip_prefix('\'')
                .and_then(|t| t.strip_suffix('\''))
                .unwrap_or(text)
                .to_string(),
        ),
        "string" => {
            let mut cur = node.walk();
            if node
                .named_children(&mut cur)
                .any(|c| c.kind() != "string_content")
            {
                return None;
            }
            let inner = text
                .strip_prefix('"')
                .and_then(|t| t.strip_suffix('"'))
                .unwrap_or(text);
            if inner.contains('$') || inner.contains('`') {
                return None;
            }
            Some(unescape_double(inner))
        }
        "ansi_c_string" => decode_ansi_c(
            text.strip_prefix("$'")
                .and_then(|t| t.strip_suffix('\''))
                .unwrap_or(text),
        ),
        "translated_string" => node.named_child(0).and_then(|c| literal(c, src, glob)),
        "concatenation" => {
            let mut out = String::new();
            // The unquoted text with quoted parts masked, for brace expansion across the
            // parts (`{push,origin}` is three words in the tree).
            let mut unquoted = String::new();
            let mut cur = node.walk();
            for c in node.children(&mut cur) {
                if c.is_named() {
                    out.push_str(&literal(c, src, glob)?);
                    if c.kind() == "word" {
                        unquoted.push_str(&src[c.byte_range()]);
                    } else {
                        unquoted.push('Q');
                    }
                } else {
                    unquoted.push_str(&src[c.byte_range()]);
                    let t = &src[c.byte_range()];
                    if t.contains('$') || t.contains('`') {
                        return None;
                    }
                    if has_unquoted_glob(t) {
                        *glob = true;
                    }
                    out.push_str(t);
                }
            }
            if has_unquoted_glob(&unquoted) {
                *glob = true;
            }
            Some(out)
        }
        _ => None,
    }
}

/// Unquoted glob (`*`, `?`, `[`) or brace expansion (`{a,b}`, `{1..3}`) characters.
pub(super) fn has_unquoted_glob(s: &str) -> bool {
    let mut esc = false;
    let mut brace = false;
    for c in s.chars() {
        if esc {
            esc = false;
            continue;
        }
        match c {
            '\\' => esc = true,
            '*' | '?' | '[' => return true,
            '{' => brace = true,
            ',' if brace => return true,
            '.' if brace => return true,
            _ => {}
        }
    }
    false
}

/// Remove line continuations (backslash-newline) the way bash does before splitting words:
/// everywhere except inside single quotes, `$'…'` and comments. The tree does not join them,
/// so `p\<newline>ush` would otherwise be two words.
pub(super) fn join_continuations(s: &str) -> String {
    #[derive(PartialEq)]
    enum St {
        Normal,
        Single,
        AnsiC,
        Double,
        Comment,
    }
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    let mut st = St::Normal;
    let mut i = 0usize;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match st {
            St::Normal | St::Double if c == '\\' => {
                if next == Some('\n') {
                    i += 2;
                    continue;
                }
                out.push(c);
                if let Some(n) = next {
                    out.push(n);
                }
                i += 2;
                continue;
            }
            St::Normal => match c {
                '\'' => st = St::Single,
                '"' => st = St::Double,
                '$' if next == Some('\'') => {
                    out.push(c);
                    out.push('\'');
                    i += 2;
                    st = St::AnsiC;
                    continue;
                }
                '#' if out.is_empty()
                    || out.ends_with(|p: char| p.is_whitespace() || ";&|(".contains(p)) =>
                {
                    st = St::Comment
                }
                _ => {}
            },
            St::Double if c == '"' => st = St::Normal,
            St::Single if c == '\'' => st = St::Normal,
            St::AnsiC if c == '\\' => {
                out.push(c);
                if let Some(n) = next {
                    out.push(n);
                }
                i += 2;
                continue;
            }
            St::AnsiC if c == '\'' => st = St::Normal,
            St::Comment if c == '\n' => st = St::Normal,
            _ => {}
        }
        out.push(c);
        i += 1;
    }
    out
}

/// The body of a backtick substitution as bash runs it: `\\`, `` \` `` and `\$` become the
/// character itself; other backslashes stay.
pub(super) fn unescape_backtick(s: &str) -> String {
    let mut out = String::new();
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        if c == '\\' && matches!(it.peek(), Some('\\' | '`' | '$')) {
            out.push(it.next().unwrap_or('\\'));
        } else {
            out.push(c);
        }
    }
    out
}

/// Backslash removal in an unquoted word (`\x` → `x`, backslash-newline → nothing).
pub(super) fn unescape_word(s: &str) -> String {
    let mut out = String::new();
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c == '\\' {
            match it.next() {
                Some('\n') | None => {}
                Some(n) => out.push(n),
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Backslash removal inside double quotes (only before `$`, `` ` ``, `"`, `\` and newline).
pub(super) fn unescape_double(s: &str) -> String {
    let mut out = String::new();
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        if c == '\\' {
            match it.peek() {
                Some('$' | '`' | '"' | '\\') => out.push(it.next().unwrap_or('\\')),
                Some('\n') => {
                    it.next();
                }
                _ => out.push(c),
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Decode the body of a `$'…'` string (bash ANSI-C quoting); `None` for escapes this does
/// not know (`\c`), so the word stays non-literal.
pub(super) fn decode_ansi_c(s: &str) -> Option<String> {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::new();
    let mut i = 0usize;
    let hex = |cs: &[char], max: usize| -> (u32, usize) {
        let mut v = 0u32;
        let mut n = 0usize;
        while n < max && n < cs.len() && cs[n].is_ascii_hexdigit() {
            v = v * 16 + cs[n].to_digit(16).unwrap_or(0);
            n += 1;
        }
        (v, n)
    };
    while i < chars.len() {
        let c = chars[i];
        if c != '\\' {
            out.push(c);
            i += 1;
            continue;
        }
        let Some(&e) = chars.get(i + 1) else {
            out.push('\\');
            break;
        };
        i += 2;
        match e {
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            'a' => out.push('\u{7}'),
            'b' => out.push('\u{8}'),
            'e' | 'E' => out.push('\u{1b}'),
            'f' => out.push('\u{c}'),
            'v' => out.push('\u{b}'),
            '\\' | '\'' | '"' | '?' => out.push(e),
            'x' => {
                let (v, n) = hex(&chars[i..], 2);
                if n == 0 {
                    return None;
                }
                out.push(char::from_u32(v)?);
                i += n;
            }
            'u' | 'U' => {
                let (v, n) = hex(&chars[i..], if e == 'u' { 4 } else { 8 });
                if n == 0 {
                    return None;
                }
                out.push(char::from_u32(v)?);
                i += n;
            }
            '0'..='7' => {
                let mut v = e.to_digit(8).unwrap_or(0);
                let mut n = 0;
                while n < 2 && i < chars.len() && ('0'..='7').contains(&chars[i]) {
                    v = v * 8 + chars[i].to_digit(8).unwrap_or(0);
                    i += 1;
                    n += 1;
                }
                out.push(char::from_u32(v)?);
            }
            _ => return None,
        }
    }
    Some(out)
}
