//! The patch format of `apply_patch` (the one OpenAI's GPT/Codex models are trained on), parsed
//! and applied to text without touching files. Grammar (one operation per file):
//!
//! ```text
//! *** Begin Patch
//! *** Add File: <path>          then the new file's lines, each prefixed with `+`
//! *** Delete File: <path>       no body
//! *** Update File: <path>
//! *** Move to: <new path>       optional, right after Update File
//! @@ <context line>             starts a chunk; the text after `@@` (optional) is a line
//!  context line                 the chunk must come after; the first chunk may omit `@@`
//! -removed line
//! +added line
//! *** End of File               optional: the chunk's lines end the file
//! *** End Patch
//! ```
//!
//! Input wrapped in a shell heredoc (`<<'EOF'` … `EOF`, as models sometimes send it) is
//! accepted, as OpenCode does; a line ending `\r\n` counts as `\n`. Every error names the
//! patch line (1-based, in the text as given).
//!
//! Matching a chunk's old lines (context and `-` lines) tries, from the position after the
//! previous chunk: the exact lines, then with trailing whitespace ignored, then with
//! surrounding whitespace ignored, then with typographic dashes, quotes and spaces read as
//! their ASCII forms (the tolerance of Codex's `seek_sequence`).

use std::fmt;

/// A parse or apply error: the patch line it concerns (0 when none) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchError {
    /// 1-based line of the patch text, 0 when the error is not about one line.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for PatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 0 {
            write!(f, "line {}: {}", self.line, self.message)
        } else {
            f.write_str(&self.message)
        }
    }
}

fn err(line: usize, message: impl Into<String>) -> PatchError {
    PatchError {
        line,
        message: message.into(),
    }
}

/// One file operation of a patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hunk {
    /// Create `path` with `contents` (the `+` lines, each ending in `\n`).
    Add {
        /// Path as written in the patch.
        path: String,
        /// The new file's text.
        contents: String,
        /// Patch line of the header.
        line: usize,
    },
    /// Remove `path`.
    Delete {
        /// Path as written in the patch.
        path: String,
        /// Patch line of the header.
        line: usize,
    },
    /// Change `path` chunk by chunk, and move it to `move_to` when given.
    Update {
        /// Path as written in the patch.
        path: String,
        /// New path (`*** Move to:`).
        move_to: Option<String>,
        /// The changes, in file order.
        chunks: Vec<Chunk>,
        /// Patch line of the header.
        line: usize,
    },
}

impl Hunk {
    /// The path the operation names (the source for a move).
    pub fn path(&self) -> &str {
        match self {
            Hunk::Add { path, .. } | Hunk::Delete { path, .. } | Hunk::Update { path, .. } => path,
        }
    }

    /// Patch line of the operation's header.
    pub fn line(&self) -> usize {
        match self {
            Hunk::Add { line, .. } | Hunk::Delete { line, .. } | Hunk::Update { line, .. } => *line,
        }
    }
}

/// One `@@` chunk of an update.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Chunk {
    /// The line after `@@ ` that the chunk must come after (`None` for a bare `@@`).
    pub context: Option<String>,
    /// Lines to find: the context (` `) and removed (`-`) lines, in order.
    pub old: Vec<String>,
    /// Lines to put in their place: the context (` `) and added (`+`) lines, in order.
    pub new: Vec<String>,
    /// `*** End of File` followed: the old lines must end the file.
    pub end_of_file: bool,
    /// Patch line where the chunk starts.
    pub line: usize,
}

const BEGIN: &str = "*** Begin Patch";
const END: &str = "*** End Patch";
const ADD: &str = "*** Add File: ";
const DELETE: &str = "*** Delete File: ";
const UPDATE: &str = "*** Update File: ";
const MOVE: &str = "*** Move to: ";
const EOF_MARK: &str = "*** End of File";

/// Parse a patch. Errors: the first problem, with its line.
pub fn parse(text: &str) -> Result<Vec<Hunk>, PatchError> {
    // (line number, text) of every line, `\r` dropped.
    let mut lines: Vec<(usize, &str)> = text
        .split('\n')
        .enumerate()
        .map(|(i, l)| (i + 1, l.strip_suffix('\r').unwrap_or(l)))
        .collect();
    while lines.last().is_some_and(|(_, l)| l.trim().is_empty()) {
        lines.pop();
    }
    let first = lines.iter().position(|(_, l)| !l.trim().is_empty());
    let Some(first) = first else {
        return Err(err(0, "the patch is empty"));
    };
    lines.drain(..first);
    // A heredoc wrapper: `<<'EOF'` (possibly after a command such as `apply_patch`) … `EOF`.
    if let Some(tag) = heredoc_tag(lines[0].1)
        && lines.len() >= 2
        && lines[lines.len() - 1].1.trim() == tag
    {
        lines.remove(0);
        lines.pop();
    }
    let Some(&(l0, h0)) = lines.first() else {
        return Err(err(0, "the patch is empty"));
    };
    if h0.trim() != BEGIN {
        return Err(err(
            l0,
            format!("the patch must start with `{BEGIN}`, found {h0:?}"),
        ));
    }
    let &(lz, hz) = lines.last().unwrap_or(&(l0, h0));
    if lines.len() < 2 || hz.trim() != END {
        return Err(err(
            lz,
            format!("the patch must end with `{END}`, found {hz:?}"),
        ));
    }
    let body = &lines[1..lines.len() - 1];
    let mut hunks = Vec::new();
    let mut i = 0;
    while i < body.len() {
        let (n, l) = body[i];
        if let Some(path) = header(l, ADD) {
            let path = nonempty_path(n, path)?;
            i += 1;
            let mut contents = String::new();
            while i < body.len() && !is_header(body[i].1) {
                let (m, t) = body[i];
                let Some(rest) = t.strip_prefix('+') else {
                    return Err(err(
                        m,
                        format!("every line of an added file must start with '+', found {t:?}"),
                    ));
                };
                contents.push_str(rest);
                contents.push('\n');
                i += 1;
            }
            hunks.push(Hunk::Add {
                path,
                contents,
                line: n,
            });
        } else if let Some(path) = header(l, DELETE) {
            let path = nonempty_path(n, path)?;
            i += 1;
            if i < body.len() && !is_header(body[i].1) && !body[i].1.trim().is_empty() {
                return Err(err(
                    body[i].0,
                    format!("`{DELETE}` takes no lines, found {:?}", body[i].1),
                ));
            }
            while i < body.len() && body[i].1.trim().is_empty() {
                i += 1;
            }
            hunks.push(Hunk::Delete { path, line: n });
        } else if let Some(path) = header(l, UPDATE) {
            let path = nonempty_path(n, path)?;
            i += 1;
            let mut move_to = None;
            if i < body.len()
                && let Some(dest) = header(body[i].1, MOVE)
            {
                move_to = Some(nonempty_path(body[i].0, dest)?);
                i += 1;
            }
            let (chunks, next) = parse_chunks(body, i, n, &path)?;
            i = next;
            if chunks.is_empty() && move_to.is_none() {
                return Err(err(n, format!("`{UPDATE}{path}` has no changes")));
            }
            hunks.push(Hunk::Update {
                path,
                move_to,
                chunks,
                line: n,
            });
        } else if l.trim().is_empty() {
            i += 1;
        } else {
            return Err(err(
                n,
                format!("expected `{ADD}`, `{DELETE}`, `{UPDATE}` or `{END}`, found {l:?}"),
            ));
        }
    }
    if hunks.is_empty() {
        return Err(err(l0, "the patch changes no file"));
    }
    Ok(hunks)
}

/// The chunks of an update starting at `body[i]`; returns them and the index after them.
fn parse_chunks(
    body: &[(usize, &str)],
    mut i: usize,
    header_line: usize,
    path: &str,
) -> Result<(Vec<Chunk>, usize), PatchError> {
    let mut chunks: Vec<Chunk> = Vec::new();
    let mut current: Option<Chunk> = None;
    let finish = |c: Chunk, chunks: &mut Vec<Chunk>| -> Result<(), PatchError> {
        if c.old.is_empty() && c.new.is_empty() {
            return Err(err(c.line, "this `@@` chunk has no lines"));
        }
        if c.old == c.new {
            return Err(err(
                c.line,
                "this chunk changes nothing: it has no `-` or `+` lines",
            ));
        }
        chunks.push(c);
        Ok(())
    };
    while i < body.len() {
        let (n, l) = body[i];
        if is_header(l) {
            break;
        }
        if l.trim_end() == "@@" || l.starts_with("@@ ") {
            if let Some(c) = current.take() {
                finish(c, &mut chunks)?;
            }
            let ctx = l.strip_prefix("@@").unwrap_or("").trim();
            current = Some(Chunk {
                context: (!ctx.is_empty()).then(|| ctx.to_string()),
                line: n,
                ..Default::default()
            });
            i += 1;
            continue;
        }
        if l.trim() == EOF_MARK {
            match current.as_mut() {
                Some(c) if !c.old.is_empty() || !c.new.is_empty() => c.end_of_file = true,
                _ => {
                    return Err(err(n, format!("`{EOF_MARK}` must follow a chunk's lines")));
                }
            }
            i += 1;
            continue;
        }
        let c = current.get_or_insert_with(|| Chunk {
            line: n,
            ..Default::default()
        });
        if c.end_of_file {
            return Err(err(
                n,
                format!("nothing may follow `{EOF_MARK}` in a chunk, found {l:?}"),
            ));
        }
        match l.chars().next() {
            None => {
                c.old.push(String::new());
                c.new.push(String::new());
            }
            Some(' ') => {
                c.old.push(l[1..].to_string());
                c.new.push(l[1..].to_string());
            }
            Some('-') => c.old.push(l[1..].to_string()),
            Some('+') => c.new.push(l[1..].to_string()),
            Some(_) => {
                return Err(err(
                    n,
                    format!(
                        "in `{UPDATE}{path}` (line {header_line}): a line must start with ' ' (context), '-' (remove), '+' (add) or `@@`, found {l:?}"
                    ),
                ));
            }
        }
        i += 1;
    }
    if let Some(c) = current.take() {
        finish(c, &mut chunks)?;
    }
    Ok((chunks, i))
}

/// The rest of `line` after the header `prefix` (a trailing `\r`/spaces ignored).
fn header<'a>(line: &'a str, prefix: &str) -> Option<&'a str> {
    line.trim_end()
        .strip_prefix(prefix)
        .or_else(|| (line.trim_end() == prefix.trim_end()).then_some(""))
}

fn is_header(line: &str) -> bool {
    [ADD, DELETE, UPDATE]
        .iter()
        .any(|p| header(line, p).is_some())
        || line.trim() == END
}

fn nonempty_path(line: usize, path: &str) -> Result<String, PatchError> {
    let p = path.trim();
    if p.is_empty() {
        return Err(err(line, "the file path is missing"));
    }
    Ok(p.to_string())
}

/// The terminator of a heredoc opener like `<<'EOF'`, `<<"EOF"`, `<<EOF` or
/// `apply_patch <<'PATCH'`.
fn heredoc_tag(line: &str) -> Option<&str> {
    let at = line.find("<<")?;
    let tag = line[at + 2..].trim().trim_start_matches('-');
    let tag = tag.trim_matches(|c| c == '\'' || c == '"');
    (!tag.is_empty() && tag.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')).then_some(tag)
}

/// Apply an update's `chunks` to `original` (the text of `path`, for messages). Line endings
/// are kept (`\r\n` when the file used them); the result ends with a newline. Errors: the
/// first chunk whose lines (or `@@` context) are not found, with its patch line.
pub fn apply_chunks(original: &str, chunks: &[Chunk], path: &str) -> Result<String, PatchError> {
    let crlf = original.contains("\r\n");
    let mut lines: Vec<String> = original
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l).to_string())
        .collect();
    if lines.last().is_some_and(String::is_empty) {
        lines.pop();
    }
    let mut replacements: Vec<(usize, usize, Vec<String>)> = Vec::new();
    let mut cursor = 0;
    for c in chunks {
        let mut after_context = None;
        if let Some(ctx) = &c.context {
            match seek(&lines, std::slice::from_ref(ctx), cursor, false) {
                Some(at) => {
                    cursor = at + 1;
                    after_context = Some(cursor);
                }
                None => {
                    return Err(err(
                        c.line,
                        format!("could not find the `@@` context line {ctx:?} in {path}"),
                    ));
                }
            }
        }
        if c.old.is_empty() {
            // Pure addition: after the context line, else at the end of the file.
            let at = after_context.unwrap_or(lines.len());
            replacements.push((at, 0, c.new.clone()));
            cursor = at;
            continue;
        }
        let mut old: &[String] = &c.old;
        let mut new: &[String] = &c.new;
        let mut found = seek(&lines, old, cursor, c.end_of_file);
        if found.is_none() && old.last().is_some_and(String::is_empty) {
            // A trailing empty context line stands for the file's final newline.
            old = &old[..old.len() - 1];
            if new.last().is_some_and(String::is_empty) {
                new = &new[..new.len() - 1];
            }
            found = if old.is_empty() {
                None
            } else {
                seek(&lines, old, cursor, c.end_of_file)
            };
        }
        let Some(at) = found else {
            return Err(err(
                c.line,
                format!(
                    "could not find these lines in {path}{}:\n{}",
                    if c.end_of_file {
                        " at the end of the file"
                    } else {
                        ""
                    },
                    c.old.join("\n")
                ),
            ));
        };
        replacements.push((at, old.len(), new.to_vec()));
        cursor = at + old.len();
    }
    for (at, len, new) in replacements.into_iter().rev() {
        lines.splice(at..at + len, new);
    }
    let eol = if crlf { "\r\n" } else { "\n" };
    let mut out = lines.join(eol);
    out.push_str(eol);
    Ok(out)
}

/// First index ≥ `start` where `pattern` matches `lines` (at the end only, first, when
/// `eof`), trying ever looser comparisons (see the module docs).
fn seek(lines: &[String], pattern: &[String], start: usize, eof: bool) -> Option<usize> {
    if pattern.is_empty() || pattern.len() > lines.len() {
        return None;
    }
    let last = lines.len() - pattern.len();
    let passes: [fn(&str, &str) -> bool; 4] = [
        |a, b| a == b,
        |a, b| a.trim_end() == b.trim_end(),
        |a, b| a.trim() == b.trim(),
        |a, b| normalize(a.trim()) == normalize(b.trim()),
    ];
    for eq in passes {
        let at = |i: usize| pattern.iter().zip(&lines[i..]).all(|(p, l)| eq(l, p));
        if eof {
            if last >= start && at(last) {
                return Some(last);
            }
            continue;
        }
        if let Some(i) = (start..=last).find(|&i| at(i)) {
            return Some(i);
        }
    }
    None
}

/// Typographic punctuation and spaces as ASCII.
fn normalize(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '\u{2010}'..='\u{2015}' | '\u{2212}' => '-',
            '\u{2018}' | '\u{2019}' | '\u{201A}' | '\u{201B}' => '\'',
            '\u{201C}' | '\u{201D}' | '\u{201E}' | '\u{201F}' => '"',
            '\u{00A0}' | '\u{2002}'..='\u{200A}' | '\u{202F}' | '\u{205F}' | '\u{3000}' => ' ',
            c => c,
        })
        .collect()
}

#[cfg(test)]
#[path = "patch_format_tests.rs"]
mod tests;
