//! Bash brace expansion of a literal word (`{a,b}c`, `{1..3}`), bounded so a word never
//! expands to more than 64 words.
//!
//! Source: bash(1) "Brace Expansion".

/// Brace expansion of a word's literal value (`{a,b}c` → `ac bc`, `{1..3}`), or `None`
/// when it would give more than 64 words or the braces are not an expansion.
pub(crate) fn expand_braces(s: &str) -> Option<Vec<String>> {
    let mut out = vec![s.to_string()];
    for _ in 0..8 {
        let mut next = Vec::new();
        let mut changed = false;
        for item in &out {
            match expand_one(item)? {
                Some(v) => {
                    changed = true;
                    next.extend(v);
                }
                None => next.push(item.clone()),
            }
            if next.len() > 64 {
                return None;
            }
        }
        out = next;
        if !changed {
            return Some(out);
        }
    }
    None
}

/// Expand the first brace group of `s`: `Some(None)` when there is none, `None` when it
/// would give too many words.
fn expand_one(s: &str) -> Option<Option<Vec<String>>> {
    expand_group(s).ok()
}

/// [`expand_one`]'s work: `Ok(None)` without a brace group, `Err` for a too large range.
fn expand_group(s: &str) -> Result<Option<Vec<String>>, ()> {
    let chars: Vec<char> = s.chars().collect();
    let Some(open) = chars.iter().position(|&c| c == '{') else {
        return Ok(None);
    };
    let mut depth = 0i32;
    let mut close = None;
    let mut commas = Vec::new();
    for (i, &c) in chars.iter().enumerate().skip(open) {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    close = Some(i);
                    break;
                }
            }
            ',' if depth == 1 => commas.push(i),
            _ => {}
        }
    }
    let Some(close) = close else { return Ok(None) };
    let pre: String = chars[..open].iter().collect();
    let post: String = chars[close + 1..].iter().collect();
    let body: String = chars[open + 1..close].iter().collect();
    let alts: Vec<String> = if commas.is_empty() {
        let Some((a, b)) = body.split_once("..") else {
            return Ok(None);
        };
        let b = b.split("..").next().unwrap_or(b);
        match (a.parse::<i64>(), b.parse::<i64>()) {
            (Ok(x), Ok(y)) => {
                if (x - y).abs() > 64 {
                    return Err(());
                }
                let (lo, hi) = (x.min(y), x.max(y));
                (lo..=hi).map(|v| v.to_string()).collect()
            }
            _ => {
                let (Some(ca), Some(cb)) = (a.chars().next(), b.chars().next()) else {
                    return Ok(None);
                };
                if a.chars().count() != 1 || b.chars().count() != 1 {
                    return Ok(None);
                }
                let (lo, hi) = (ca.min(cb) as u32, ca.max(cb) as u32);
                if hi - lo > 64 {
                    return Err(());
                }
                (lo..=hi)
                    .filter_map(char::from_u32)
                    .map(|c| c.to_string())
                    .collect()
            }
        }
    } else {
        let mut v = Vec::new();
        let mut start = open + 1;
        for &c in &commas {
            v.push(chars[start..c].iter().collect());
            start = c + 1;
        }
        v.push(chars[start..close].iter().collect());
        v
    };
    Ok(Some(
        alts.into_iter()
            .map(|a| format!("{pre}{a}{post}"))
            .collect(),
    ))
}
