//! `grep {pattern, path?, include?}`: regex search over files with ripgrep's crates
//! (OpenCode `tool/grep.ts`, which runs `rg --json --hidden --glob=!.git/* [--glob=include]`).

use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use futures::future::BoxFuture;
use grep_regex::RegexMatcherBuilder;
use grep_searcher::{BinaryDetection, SearcherBuilder, sinks::Lossy};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{PathGlob, blocking, mtime, walker};
use crate::paths;
use crate::truncate::{self, Direction, MAX_BYTES, MAX_LINES};
use crate::{ToolContext, ToolError, ToolOutput, TypedTool};

/// Maximum number of matching lines returned (OpenCode 100).
pub const LIMIT: usize = 100;
/// Matching lines longer than this many chars are cut and suffixed with `...`.
pub const MAX_LINE_LENGTH: usize = 2000;

/// The `grep` tool.
#[derive(Debug, Default, Clone, Copy)]
pub struct GrepTool;

/// Arguments of the `grep` tool; the schema the model sees is derived from this struct
/// (each field's doc comment is its description).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GrepArgs {
    /// The regex pattern to search for in file contents
    pattern: String,
    /// The file or directory to search in (default: the working directory)
    path: Option<String>,
    /// File pattern to include in the search (e.g. "*.js", "*.{ts,tsx}")
    include: Option<String>,
}

#[derive(Debug)]
struct Match {
    path: PathBuf,
    mtime: SystemTime,
    line: u64,
    text: String,
}

impl TypedTool for GrepTool {
    type Args = GrepArgs;
    const NAME: &'static str = "grep";

    fn describe(&self) -> String {
        "Search file contents with a regular expression (Rust regex syntax, e.g. `fn\\s+\\w+`, \
         `log.*Error`).\n\
         - `path`: file or directory to search (default: the working directory).\n\
         - `include`: glob restricting which files are searched, e.g. `*.rs` or `*.{ts,tsx}`.\n\
         - Honours .gitignore; includes hidden files; skips .git/ and binary files.\n\
         - Returns up to 100 matching lines grouped by file (most recently modified files first), \
         with line numbers."
            .to_string()
    }

    fn run(
        &self,
        args: GrepArgs,
        ctx: ToolContext,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        Box::pin(async move { run(args, ctx).await })
    }
}

/// A search's input, carried into the trip to the blocking pool.
struct Search {
    root: PathBuf,
    pattern: String,
    include: Option<String>,
    abort: tokio_util::sync::CancellationToken,
    worktree: PathBuf,
}

/// What [`Search::run`] found: the matches, the match count per file, whether some file
/// could not be read, and each matching file's `read` permission pattern.
type Found = (Vec<Match>, Vec<(PathBuf, usize)>, bool, Vec<String>);

impl Search {
    /// The search after the permission checks (blocking): the root must exist, the pattern
    /// and the include glob compile; then [`search`] and the matching files' read patterns.
    fn run(self) -> Result<Found, ToolError> {
        if std::fs::metadata(&self.root).is_err() {
            return Err(ToolError::Failed(format!(
                "Path not found: {}",
                self.root.display()
            )));
        }
        let matcher = compile(&self.pattern)?;
        let include = match self.include.as_deref() {
            Some(i) if !i.trim().is_empty() => Some(PathGlob::new(i).map_err(ToolError::Failed)?),
            _ => None,
        };
        let (matches, per_file, had_errors) =
            search(&self.root, &matcher, include.as_ref(), &self.abort);
        let patterns = read_patterns(&self.worktree, &per_file);
        Ok((matches, per_file, had_errors, patterns))
    }
}

async fn run(args: GrepArgs, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
    if args.pattern.is_empty() {
        return Err(crate::args::invalid("grep", "pattern must not be empty"));
    }
    let root = ctx.resolve_or_directory(args.path.as_deref())?;
    let input = Search {
        root: root.clone(),
        pattern: args.pattern.clone(),
        include: args.include.clone(),
        abort: ctx.abort.clone(),
        worktree: ctx.worktree.clone(),
    };
    let asked = args.pattern.clone();
    // When the rules settle it, the search runs in the trip that locates the root. The
    // search checks the token between files and between reads inside a file; the call
    // returns on abort at once, without waiting for the blocking search to notice.
    let trip = paths::locate_and(
        &ctx,
        &root,
        "grep",
        move |_| vec![asked],
        input,
        |_, input| input.run(),
    );
    let trip = tokio::select! {
        r = trip => r?,
        _ = ctx.abort.cancelled() => return Err(ToolError::Aborted),
    };
    let (mut matches, per_file, had_errors, patterns) = match trip {
        paths::Trip::Done(_, found) => found?,
        paths::Trip::Ask(at, input) => {
            paths::check_external(&ctx, &at, at.kind).await?;
            paths::ask(
                &ctx,
                "grep",
                vec![args.pattern.clone()],
                vec!["*".into()],
                json!({"pattern": args.pattern, "path": root.to_string_lossy(), "include": args.include}),
            )
            .await?;
            // One trip to the blocking pool: the root's existence, the search, and the
            // permission patterns of the matching files.
            let searching = blocking(move || input.run());
            tokio::select! {
                r = searching => r??,
                _ = ctx.abort.cancelled() => return Err(ToolError::Aborted),
            }
        }
    };
    if ctx.abort.is_cancelled() {
        return Err(ToolError::Aborted);
    }
    let skipped = unreadable_files(&ctx, &per_file, patterns).await?;
    let left_out: std::collections::HashSet<&Path> = skipped.iter().map(PathBuf::as_path).collect();
    if !left_out.is_empty() {
        matches.retain(|m| !left_out.contains(m.path.as_path()));
    }
    let total: usize = per_file
        .iter()
        .filter(|(p, _)| !left_out.contains(p.as_path()))
        .map(|(_, n)| n)
        .sum();
    let skipped_note = skipped_note(&skipped);

    let mut metadata = serde_json::Map::new();
    if !skipped.is_empty() {
        metadata.insert("skipped".into(), json!(skipped.len()));
    }
    if matches.is_empty() {
        metadata.insert("matches".into(), json!(0));
        metadata.insert("truncated".into(), Value::Bool(false));
        let mut output = "No files found".to_string();
        if let Some(note) = &skipped_note {
            output.push_str("\n\n");
            output.push_str(note);
        }
        return Ok(ToolOutput {
            title: args.pattern,
            output,
            metadata,
        });
    }
    // Newest files first; within a file, by line.
    matches.sort_by(|a, b| {
        b.mtime
            .cmp(&a.mtime)
            .then_with(|| a.path.cmp(&b.path))
            .then(a.line.cmp(&b.line))
    });
    let truncated = total > LIMIT;
    matches.truncate(LIMIT);

    let mut lines = vec![if truncated {
        format!("Found {total} matches (showing first {LIMIT})")
    } else {
        format!("Found {total} matches")
    }];
    let mut current: Option<&Path> = None;
    for m in &matches {
        if current != Some(m.path.as_path()) {
            if current.is_some() {
                lines.push(String::new());
            }
            current = Some(m.path.as_path());
            lines.push(format!("{}:", m.path.display()));
        }
        lines.push(format!("  Line {}: {}", m.line, m.text));
    }
    if truncated {
        lines.push(String::new());
        lines.push(format!(
            "(Results truncated: showing {LIMIT} of {total} matches ({} hidden). Consider using a more specific path or pattern.)",
            total - LIMIT
        ));
    }
    if had_errors {
        lines.push(String::new());
        lines.push("(Some paths were inaccessible and skipped)".into());
    }
    if let Some(note) = skipped_note {
        lines.push(String::new());
        lines.push(note);
    }
    let text = lines.join("\n");
    let t = truncate::truncate_output(&text, MAX_LINES, MAX_BYTES, Direction::Head).await;
    metadata.insert("matches".into(), json!(total));
    metadata.insert("truncated".into(), Value::Bool(truncated || t.truncated));
    if let Some(p) = t.output_path {
        metadata.insert(
            "outputPath".into(),
            Value::String(p.to_string_lossy().into_owned()),
        );
    }
    Ok(ToolOutput {
        title: args.pattern,
        output: t.content,
        metadata,
    })
}

/// Most file names a skipped-files note lists; the count covers the rest.
const SKIPPED_NAMES_SHOWN: usize = 20;

/// The matching files (of `per_file`, in that order) whose `read` the turn's rules do not
/// allow without asking (OpenCode's default `*.env: ask`). A search over many files cannot
/// ask per file, so these are left out of the results (fail closed) rather than showing,
/// say, `.env`'s lines to the model unasked; the read tool asks for one. The pattern checked
/// is the one the read tool asks with: the real path relative to the real worktree
/// (`patterns`, one per file of `per_file`, from [`read_patterns`]).
async fn unreadable_files(
    ctx: &ToolContext,
    per_file: &[(PathBuf, usize)],
    patterns: Vec<String>,
) -> Result<Vec<PathBuf>, ToolError> {
    if per_file.is_empty() {
        return Ok(Vec::new());
    }
    let files = per_file.iter().map(|(p, _)| p.clone());
    let allowed = tokio::select! {
        a = ctx.permissions.allowed("read", patterns) => a,
        _ = ctx.abort.cancelled() => return Err(ToolError::Aborted),
    };
    Ok(files
        .enumerate()
        // A missing answer counts as not allowed (fail closed).
        .filter(|(i, _)| !allowed.get(*i).copied().unwrap_or(false))
        .map(|(_, f)| f)
        .collect())
}

/// The `read` permission pattern of each file of `per_file`: its real path relative to the
/// real worktree (as the read tool asks); blocking (a `realpath` per file).
fn read_patterns(worktree: &Path, per_file: &[(PathBuf, usize)]) -> Vec<String> {
    if per_file.is_empty() {
        return Vec::new();
    }
    let root = paths::real_path_blocking(worktree);
    per_file
        .iter()
        .map(|(f, _)| {
            let rel = paths::relative_path(&root, &paths::real_path_blocking(f));
            if rel.is_empty() { ".".to_string() } else { rel }
        })
        .collect()
}

/// The note telling the model which matching files were left out and how to see them:
/// `(2 matching files were left out because the read rules do not allow reading them without
/// asking: /p/.env, /p/sub/.env. Use the read tool on one, which asks.)`; `None` when none.
fn skipped_note(skipped: &[PathBuf]) -> Option<String> {
    if skipped.is_empty() {
        return None;
    }
    let mut names: Vec<String> = skipped
        .iter()
        .take(SKIPPED_NAMES_SHOWN)
        .map(|p| p.display().to_string())
        .collect();
    if skipped.len() > SKIPPED_NAMES_SHOWN {
        names.push(format!("and {} more", skipped.len() - SKIPPED_NAMES_SHOWN));
    }
    let (count, them) = match skipped.len() {
        1 => ("1 matching file was".to_string(), "it"),
        n => (format!("{n} matching files were"), "them"),
    };
    Some(format!(
        "({count} left out because the read rules do not allow reading {them} without asking: \
         {}. Use the read tool on one, which asks.)",
        names.join(", ")
    ))
}

/// Size limit of a compiled pattern's program, 2 MiB (issue 24.4: `a{1000}{1000}` compiled
/// under the crate's 100 MiB default and searched for minutes at 1.1 GB). Measured needs:
/// `a{1000}{1000}` 32 MiB, `.{65536}` 64 MiB, `a{100000}` and Unicode `\w{50}` 4 MiB;
/// `\w{20}`, `a{10000}`, `.{1000}` and a 500-word alternation fit in 1 MiB.
pub const PATTERN_SIZE_LIMIT: usize = 2 << 20;
/// Cap of the lazy DFA's cache per search, 16 MiB (the crate's default is 1000 MiB).
pub const DFA_CACHE_LIMIT: usize = 16 << 20;

/// Compile `pattern` for line-oriented search within [`PATTERN_SIZE_LIMIT`] and
/// [`DFA_CACHE_LIMIT`]. Errors: `Failed("Invalid regex pattern '…': …")`, or for a pattern too
/// large to compile, `Failed("Regex pattern '…' is too large …")` with a hint.
pub fn compile(pattern: &str) -> Result<grep_regex::RegexMatcher, ToolError> {
    RegexMatcherBuilder::new()
        .line_terminator(Some(b'\n'))
        .size_limit(PATTERN_SIZE_LIMIT)
        .dfa_size_limit(DFA_CACHE_LIMIT)
        .build(pattern)
        .map_err(|e| {
            let text = e.to_string();
            if text.contains("size limit") {
                ToolError::Failed(format!(
                    "Regex pattern '{pattern}' is too large: it compiles to more than {} KiB (\
                     large counted repetitions such as `a{{100000}}` or `.{{65536}}` multiply \
                     the program). Use a smaller repetition count or a simpler pattern.",
                    PATTERN_SIZE_LIMIT / 1024
                ))
            } else {
                ToolError::Failed(format!("Invalid regex pattern '{pattern}': {e}"))
            }
        })
}

/// A reader that fails once `abort` fires, so a search inside one big file stops between
/// two reads instead of running to the end of the file.
struct AbortableReader<'a> {
    inner: std::fs::File,
    abort: &'a tokio_util::sync::CancellationToken,
}

impl std::io::Read for AbortableReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.abort.is_cancelled() {
            // Not `Interrupted`: readers retry on that kind.
            return Err(std::io::Error::other("search aborted"));
        }
        self.inner.read(buf)
    }
}

fn cut_line(line: &str) -> String {
    let line = line.trim_end_matches(['\n', '\r']);
    if line.chars().count() > MAX_LINE_LENGTH {
        let mut s: String = line.chars().take(MAX_LINE_LENGTH).collect();
        s.push_str("...");
        s
    } else {
        line.to_string()
    }
}

/// Search `root` (a file, or a directory walked like ripgrep): the kept matches (at most
/// [`LIMIT`] per file), each matching file with its number of matching lines (in search
/// order), and whether some path could not be searched.
fn search(
    root: &Path,
    matcher: &grep_regex::RegexMatcher,
    include: Option<&PathGlob>,
    abort: &tokio_util::sync::CancellationToken,
) -> (Vec<Match>, Vec<(PathBuf, usize)>, bool) {
    let mut searcher = SearcherBuilder::new()
        .binary_detection(BinaryDetection::quit(0))
        .line_number(true)
        .build();
    let mut out = Vec::new();
    let mut per_file: Vec<(PathBuf, usize)> = Vec::new();
    let mut had_errors = false;
    // Every matching line is counted; at most LIMIT per file are kept (no more can be shown).
    let mut search_file = |path: &Path, out: &mut Vec<Match>, per_file: &mut Vec<_>| {
        let mt = mtime(path);
        let mut in_file = 0usize;
        // Only regular files: a FIFO or device given as the path would block the search.
        let opened = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(path);
        let file = match opened {
            Ok(f) if f.metadata().is_ok_and(|m| m.is_file()) => f,
            _ => return true,
        };
        let reader = AbortableReader { inner: file, abort };
        let res = searcher.search_reader(
            matcher,
            reader,
            Lossy(|lnum, line| {
                in_file += 1;
                if in_file > LIMIT {
                    return Ok(!abort.is_cancelled());
                }
                out.push(Match {
                    path: path.to_path_buf(),
                    mtime: mt,
                    line: lnum,
                    text: cut_line(line),
                });
                Ok(!abort.is_cancelled())
            }),
        );
        if in_file > 0 {
            per_file.push((path.to_path_buf(), in_file));
        }
        res.is_err()
    };
    if root.is_file() {
        had_errors |= search_file(root, &mut out, &mut per_file);
        return (out, per_file, had_errors);
    }
    for entry in walker(root).build() {
        if abort.is_cancelled() {
            break;
        }
        let entry = match entry {
            Ok(e) => e,
            Err(_) => {
                had_errors = true;
                continue;
            }
        };
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        let path = entry.path();
        if let Some(g) = include {
            let rel = path.strip_prefix(root).unwrap_or(path);
            if !g.is_match(rel) {
                continue;
            }
        }
        had_errors |= search_file(path, &mut out, &mut per_file);
    }
    (out, per_file, had_errors)
}

#[cfg(test)]
#[path = "grep_tests.rs"]
mod tests;
