//! The match strategies of `edit` (OpenCode `tool/edit.ts` `replace()`, §7.3 "edit, in
//! detail"): each strategy proposes candidate substrings of the file for the model's
//! `oldString`; [`replace`] takes the first candidate that occurs (uniquely, unless
//! `replaceAll`). Strategies, in order:
//!
//! 1. [`simple`]: the text as given.
//! 2. [`line_trimmed`]: blocks whose lines equal the text's lines after trimming each.
//! 3. [`block_anchor`]: ≥ 3 lines; first and last lines (trimmed) anchor a block, the
//!    middle lines are compared by Levenshtein similarity (threshold 0.0 for a single
//!    candidate block, 0.3 to pick the best of several).
//! 4. [`whitespace_normalized`]: equal after collapsing runs of whitespace.
//! 5. [`indentation_flexible`]: equal after removing each block's common indentation.
//! 6. [`escape_normalized`]: the text with `\n`, `\t`, `\"`, … escapes undone.
//! 7. [`trimmed_boundary`]: the text without leading/trailing whitespace.
//! 8. [`context_aware`]: ≥ 3 lines; first and last lines anchor a block of the same length
//!    in which at least half of the non-empty middle lines match.
//! 9. [`multi_occurrence`]: the text as given, for `replaceAll` over every occurrence.
//!
//! Every candidate is a substring of the file (or the text itself), so a replacement never
//! invents content.

use crate::ToolError;

/// Error when no strategy finds `oldString` (OpenCode text).
pub const NOT_FOUND: &str = "Could not find oldString in the file. It must match exactly, including whitespace, indentation, and line endings.";
/// Error when `oldString` matches several places and `replaceAll` is false (OpenCode text).
pub const MULTIPLE: &str = "Found multiple matches for oldString. Provide more surrounding context to make the match unique.";
/// Error when `oldString == newString` (OpenCode text).
pub const IDENTICAL: &str = "No changes to apply: oldString and newString are identical.";

/// Block-anchor similarity needed when only one block has matching anchors (OpenCode
/// `SINGLE_CANDIDATE_SIMILARITY_THRESHOLD`).
pub const SINGLE_CANDIDATE_SIMILARITY: f64 = 0.0;
/// Block-anchor similarity needed to pick the best of several blocks (OpenCode
/// `MULTIPLE_CANDIDATES_SIMILARITY_THRESHOLD`).
pub const MULTIPLE_CANDIDATES_SIMILARITY: f64 = 0.3;

/// A strategy: candidate substrings of `content` for `find`.
pub type Strategy = fn(&str, &str) -> Vec<String>;

/// The strategies in the order [`replace`] tries them, with their names.
pub const STRATEGIES: &[(&str, Strategy)] = &[
    ("simple", simple),
    ("line-trimmed", line_trimmed),
    ("block-anchor", block_anchor),
    ("whitespace-normalized", whitespace_normalized),
    ("indentation-flexible", indentation_flexible),
    ("escape-normalized", escape_normalized),
    ("trimmed-boundary", trimmed_boundary),
    ("context-aware", context_aware),
    ("multi-occurrence", multi_occurrence),
];

/// Replace `old` with `new` in `content` as OpenCode's `replace()`: the first candidate of
/// the first strategy that occurs is replaced everywhere (`replace_all`) or, if it occurs
/// exactly once, at that place. Errors: [`IDENTICAL`], [`NOT_FOUND`] when no candidate
/// occurs, [`MULTIPLE`] when every candidate that occurs is ambiguous.
pub fn replace(
    content: &str,
    old: &str,
    new: &str,
    replace_all: bool,
) -> Result<String, ToolError> {
    if old == new {
        return Err(ToolError::Failed(IDENTICAL.into()));
    }
    let mut found = false;
    for (_, strategy) in STRATEGIES {
        for search in strategy(content, old) {
            if search.is_empty() {
                continue;
            }
            let Some(index) = content.find(&search) else {
                continue;
            };
            found = true;
            if replace_all {
                return Ok(content.replace(&search, new));
            }
            if content.rfind(&search) != Some(index) {
                continue;
            }
            return Ok(format!(
                "{}{new}{}",
                &content[..index],
                &content[index + search.len()..]
            ));
        }
    }
    Err(ToolError::Failed(
        if found { MULTIPLE } else { NOT_FOUND }.into(),
    ))
}

/// Lines of `content` with their byte offsets: `(start, line)` for each `\n`-separated line.
fn lines_with_offsets(content: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut off = 0;
    for l in content.split('\n') {
        out.push((off, l));
        off += l.len() + 1;
    }
    out
}

/// The text of lines `i..=j` of `content` (without the final newline).
fn block(lines: &[(usize, &str)], content: &str, i: usize, j: usize) -> String {
    let start = lines[i].0;
    let end = lines[j].0 + lines[j].1.len();
    content[start..end].to_string()
}

/// `find`'s lines without a trailing empty line.
fn find_lines(find: &str) -> Vec<&str> {
    let mut v: Vec<&str> = find.split('\n').collect();
    if v.len() > 1 && v.last() == Some(&"") {
        v.pop();
    }
    v
}

/// Strategy 1: The text as given.
pub fn simple(_content: &str, find: &str) -> Vec<String> {
    vec![find.to_string()]
}

/// Strategy 2: Blocks of `content` whose lines equal `find`'s lines after trimming each.
pub fn line_trimmed(content: &str, find: &str) -> Vec<String> {
    let search = find_lines(find);
    let lines = lines_with_offsets(content);
    let mut out = Vec::new();
    if search.is_empty() || search.len() > lines.len() {
        return out;
    }
    for i in 0..=lines.len() - search.len() {
        if search
            .iter()
            .enumerate()
            .all(|(k, s)| lines[i + k].1.trim() == s.trim())
        {
            out.push(block(&lines, content, i, i + search.len() - 1));
        }
    }
    out
}

/// Similarity in [0, 1] of two lines by Levenshtein distance (1 = equal).
fn similarity(a: &str, b: &str) -> f64 {
    let max = a.chars().count().max(b.chars().count());
    if max == 0 {
        return 1.0;
    }
    1.0 - strsim::levenshtein(a, b) as f64 / max as f64
}

/// The blocks of `lines` (indexes of their first and last line) that `search` (≥ 2 lines)
/// anchors: each line equal to `search`'s first, to the nearest line at least two further
/// on equal to `search`'s last (both trimmed); in order.
fn anchored_blocks<'a>(
    lines: &'a [(usize, &str)],
    search: &'a [&str],
) -> impl Iterator<Item = (usize, usize)> + 'a {
    let first = search[0].trim();
    let last = search[search.len() - 1].trim();
    (0..lines.len())
        .filter(move |&i| lines[i].1.trim() == first)
        .filter_map(move |i| {
            (i + 2..lines.len())
                .find(|&j| lines[j].1.trim() == last)
                .map(|j| (i, j))
        })
}

/// Strategy 3: Blocks of ≥ 3 lines anchored by `find`'s first and last lines (trimmed); the middle
/// lines decide by Levenshtein similarity: a lone candidate needs
/// [`SINGLE_CANDIDATE_SIMILARITY`], the best of several needs
/// [`MULTIPLE_CANDIDATES_SIMILARITY`].
pub fn block_anchor(content: &str, find: &str) -> Vec<String> {
    let search = find_lines(find);
    if search.len() < 3 {
        return Vec::new();
    }
    let lines = lines_with_offsets(content);
    let candidates: Vec<(usize, usize)> = anchored_blocks(&lines, &search).collect();
    let score = |&(i, j): &(usize, usize)| -> f64 {
        let block_len = j - i + 1;
        let middle = (search.len() - 2).min(block_len - 2);
        if middle == 0 {
            return 1.0;
        }
        let total: f64 = (1..=middle)
            .map(|k| similarity(lines[i + k].1.trim(), search[k].trim()))
            .sum();
        total / middle as f64
    };
    match candidates.len() {
        0 => Vec::new(),
        1 => {
            let c = candidates[0];
            if score(&c) >= SINGLE_CANDIDATE_SIMILARITY {
                vec![block(&lines, content, c.0, c.1)]
            } else {
                Vec::new()
            }
        }
        _ => {
            let best = candidates
                .iter()
                .map(|c| (score(c), *c))
                .max_by(|a, b| a.0.total_cmp(&b.0));
            match best {
                Some((s, c)) if s >= MULTIPLE_CANDIDATES_SIMILARITY => {
                    vec![block(&lines, content, c.0, c.1)]
                }
                _ => Vec::new(),
            }
        }
    }
}

/// Runs of whitespace collapsed to one space, ends trimmed.
fn normalize_ws(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Strategy 4: Single lines or blocks of `find`'s length equal to `find` after collapsing whitespace;
/// for a one-line `find` also the exact span inside a longer line (its words separated by
/// any whitespace).
pub fn whitespace_normalized(content: &str, find: &str) -> Vec<String> {
    let target = normalize_ws(find);
    if target.is_empty() {
        return Vec::new();
    }
    let lines = lines_with_offsets(content);
    let search = find_lines(find);
    let mut out = Vec::new();
    if search.len() == 1 {
        let words: Vec<String> = target.split(' ').map(regex::escape).collect();
        let re = regex::Regex::new(&words.join(r"\s+")).ok();
        for &(_, l) in &lines {
            if normalize_ws(l) == target {
                out.push(l.to_string());
            } else if normalize_ws(l).contains(&target)
                && let Some(m) = re.as_ref().and_then(|re| re.find(l))
            {
                out.push(m.as_str().to_string());
            }
        }
    } else if search.len() <= lines.len() {
        for i in 0..=lines.len() - search.len() {
            let b = block(&lines, content, i, i + search.len() - 1);
            if normalize_ws(&b) == target {
                out.push(b);
            }
        }
    }
    out
}

/// The smallest indentation (leading spaces/tabs) of the non-blank lines.
fn min_indent(lines: &[&str]) -> usize {
    lines
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start_matches([' ', '\t']).len())
        .min()
        .unwrap_or(0)
}

/// Lines with their common indentation removed, joined.
fn dedent(lines: &[&str]) -> String {
    let n = min_indent(lines);
    lines
        .iter()
        .map(|l| {
            if l.trim().is_empty() {
                l.trim_start()
            } else {
                &l[n.min(l.len())..]
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Strategy 5: Blocks of `find`'s length equal to `find` once both lose their common indentation
/// (the model re-indented the whole snippet).
pub fn indentation_flexible(content: &str, find: &str) -> Vec<String> {
    let search = find_lines(find);
    let lines = lines_with_offsets(content);
    let mut out = Vec::new();
    if search.is_empty() || search.len() > lines.len() {
        return out;
    }
    let target = dedent(&search);
    for i in 0..=lines.len() - search.len() {
        let window: Vec<&str> = lines[i..i + search.len()].iter().map(|l| l.1).collect();
        if dedent(&window) == target {
            out.push(block(&lines, content, i, i + search.len() - 1));
        }
    }
    out
}

/// Undo backslash escapes a model may have written literally: `\n`, `\t`, `\r`, `\'`,
/// `\"`, `` \` ``, `\\`, `\$` and an escaped newline.
pub fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.peek().copied() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some(q @ ('\'' | '"' | '`' | '\\' | '$' | '\n')) => out.push(q),
            _ => {
                out.push('\\');
                continue;
            }
        }
        chars.next();
    }
    out
}

/// Strategy 6: `find` with its escapes undone, and blocks of its length whose unescaped text equals
/// it.
pub fn escape_normalized(content: &str, find: &str) -> Vec<String> {
    let unescaped = unescape(find);
    let mut out = Vec::new();
    if unescaped != find && content.contains(&unescaped) {
        out.push(unescaped.clone());
    }
    let search = find_lines(&unescaped);
    let lines = lines_with_offsets(content);
    if search.is_empty() || search.len() > lines.len() {
        return out;
    }
    for i in 0..=lines.len() - search.len() {
        let b = block(&lines, content, i, i + search.len() - 1);
        if b != unescaped && unescape(&b) == unescaped {
            out.push(b);
        }
    }
    out
}

/// Strategy 7: `find` without surrounding whitespace, and blocks of its length that equal it once
/// trimmed.
pub fn trimmed_boundary(content: &str, find: &str) -> Vec<String> {
    let trimmed = find.trim();
    if trimmed == find || trimmed.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    if content.contains(trimmed) {
        out.push(trimmed.to_string());
    }
    let search = find_lines(find);
    let lines = lines_with_offsets(content);
    if search.len() <= lines.len() {
        for i in 0..=lines.len() - search.len() {
            let b = block(&lines, content, i, i + search.len() - 1);
            if b.trim() == trimmed {
                out.push(b);
            }
        }
    }
    out
}

/// Strategy 8: Blocks of ≥ 3 lines whose first and last lines match `find`'s (trimmed), of the same
/// length, in which at least half of `find`'s non-empty middle lines match (trimmed).
pub fn context_aware(content: &str, find: &str) -> Vec<String> {
    let search = find_lines(find);
    if search.len() < 3 {
        return Vec::new();
    }
    let lines = lines_with_offsets(content);
    let mut out = Vec::new();
    for (i, j) in anchored_blocks(&lines, &search) {
        if j - i + 1 != search.len() {
            continue;
        }
        let (mut matching, mut non_empty) = (0, 0);
        for k in 1..search.len() - 1 {
            let (a, b) = (lines[i + k].1.trim(), search[k].trim());
            if !b.is_empty() {
                non_empty += 1;
                if a == b {
                    matching += 1;
                }
            }
        }
        if non_empty == 0 || matching * 2 >= non_empty {
            out.push(block(&lines, content, i, j));
            break;
        }
    }
    out
}

/// Strategy 9: The text as given once more: with `replaceAll` every exact occurrence is replaced.
pub fn multi_occurrence(content: &str, find: &str) -> Vec<String> {
    if content.contains(find) {
        vec![find.to_string()]
    } else {
        Vec::new()
    }
}

#[cfg(test)]
#[path = "edit_replace_tests.rs"]
mod tests;
