//! The built-in tools, one module each, with OpenCode's names and parameter names (§7.3).

use std::time::SystemTime;

pub mod apply_patch;
pub mod bash;
pub mod bash_permission;
pub mod edit;
pub mod edit_replace;
pub mod glob;
pub mod grep;
pub mod invalid;
pub mod list;
pub mod patch_format;
pub mod read;
pub mod structured;
pub mod webfetch;
pub mod write;

pub use apply_patch::ApplyPatchTool;
pub use bash::BashTool;
pub use edit::EditTool;
pub use glob::GlobTool;
pub use grep::GrepTool;
pub use invalid::InvalidTool;
pub use list::ListTool;
pub use read::ReadTool;
pub use structured::StructuredOutputTool;
pub use webfetch::WebFetchTool;
pub use write::WriteTool;

/// Lines per diff count: `(additions, deletions)` between two texts (line diff via `similar`).
pub fn diff_counts(old: &str, new: &str) -> (usize, usize) {
    let diff = similar::TextDiff::from_lines(old, new);
    let mut add = 0;
    let mut del = 0;
    for change in diff.iter_all_changes() {
        match change.tag() {
            similar::ChangeTag::Insert => add += 1,
            similar::ChangeTag::Delete => del += 1,
            similar::ChangeTag::Equal => {}
        }
    }
    (add, del)
}

/// Unified diff (3 lines of context) with `--- <path>` / `+++ <path>` headers.
pub fn unified_diff(path: &str, old: &str, new: &str) -> String {
    let diff = similar::TextDiff::from_lines(old, new);
    diff.unified_diff()
        .context_radius(3)
        .header(path, path)
        .to_string()
}

/// The target of a `write` or `edit`: its metadata when it exists (`None` for a new file).
/// Errors: `Path is a directory, not a file: <shown>`, or the special-file error of
/// [`crate::paths::special_file_error`] (FIFO, socket, device) naming `tool`. Blocking (one
/// `stat`): call it inside the tool's trip to the pool.
pub(crate) fn writable_target(
    path: &std::path::Path,
    shown: &str,
    tool: &str,
) -> Result<Option<std::fs::Metadata>, crate::ToolError> {
    let meta = std::fs::metadata(path).ok();
    if meta.as_ref().is_some_and(|m| m.is_dir()) {
        return Err(crate::ToolError::Failed(format!(
            "Path is a directory, not a file: {shown}"
        )));
    }
    if let Some(kind) = meta
        .as_ref()
        .and_then(|m| crate::paths::special_kind(m.file_type()))
    {
        return Err(crate::paths::special_file_error(tool, shown, kind));
    }
    Ok(meta)
}

/// Creates the missing parent directories of `path`, then writes `text` through
/// [`crate::paths::write_regular`], all in one trip to the blocking pool
/// ([`store_file_blocking`]).
pub(crate) async fn store_file(
    path: &std::path::Path,
    tool: &str,
    shown: &str,
    text: &str,
) -> Result<(), crate::ToolError> {
    let (path, tool, shown, text) = (
        path.to_path_buf(),
        tool.to_string(),
        shown.to_string(),
        text.to_string(),
    );
    blocking(move || store_file_blocking(&path, &tool, &shown, &text)).await?
}

/// Creates the missing parent directories of `path`, then writes `text` through
/// [`crate::paths::write_regular`] (blocking). Errors: `Cannot create directory …`, or the
/// write's error naming `tool`.
pub(crate) fn store_file_blocking(
    path: &std::path::Path,
    tool: &str,
    shown: &str,
    text: &str,
) -> Result<(), crate::ToolError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| {
            crate::ToolError::Failed(format!("Cannot create directory {}: {e}", parent.display()))
        })?;
    }
    crate::paths::write_regular(path, tool, shown, text.as_bytes())
}

/// The write of [`approve_and_write`] once the rules alone allowed `edit` for `rel` (no
/// question asked; see [`crate::paths::locate_and`]), on the calling thread: the diff, the
/// parent directories and the write ([`store_file_blocking`]), the line counts.
pub(crate) fn write_allowed(
    path: &std::path::Path,
    tool: &str,
    shown: &str,
    rel: &str,
    old: &str,
    new: &str,
) -> Result<FileChange, crate::ToolError> {
    let diff = unified_diff(rel, old, new);
    store_file_blocking(path, tool, shown, new)?;
    let (additions, deletions) = diff_counts(old, new);
    Ok(FileChange {
        diff,
        additions,
        deletions,
    })
}

/// What [`approve_and_write`] changed: the unified diff (headers `rel`) and its line counts.
pub(crate) struct FileChange {
    pub(crate) diff: String,
    pub(crate) additions: usize,
    pub(crate) deletions: usize,
}

/// Asks the `edit` permission for changing `path` (`rel` to the worktree, `shown` in
/// messages) from `old` to `new`, with the diff in the request's metadata; then, unless the
/// call was aborted meanwhile, creates missing parent directories and writes `new` through
/// [`crate::paths::write_regular`] (which refuses a path that became a special file), in one
/// trip to the blocking pool ([`store_file`]).
/// Errors: the permission's denial, [`crate::ToolError::Aborted`], `Cannot create directory
/// …`, or the write's error naming `tool`.
pub(crate) async fn approve_and_write(
    ctx: &crate::ToolContext,
    tool: &str,
    path: &std::path::Path,
    shown: &str,
    rel: &str,
    old: &str,
    new: &str,
) -> Result<FileChange, crate::ToolError> {
    let diff = unified_diff(rel, old, new);
    crate::paths::ask(
        ctx,
        "edit",
        vec![rel.to_string()],
        vec!["*".into()],
        serde_json::json!({"filepath": shown, "diff": diff}),
    )
    .await?;
    if ctx.abort.is_cancelled() {
        return Err(crate::ToolError::Aborted);
    }
    store_file(path, tool, shown, new).await?;
    let (additions, deletions) = diff_counts(old, new);
    Ok(FileChange {
        diff,
        additions,
        deletions,
    })
}

/// Build the `ignore` walker used by glob, grep and list: respects `.gitignore` (also outside
/// git repositories), `.ignore` and global git excludes; includes hidden files; skips `.git/`.
pub(crate) fn walker(root: &std::path::Path) -> ignore::WalkBuilder {
    let mut b = ignore::WalkBuilder::new(root);
    b.hidden(false)
        .git_ignore(true)
        .git_global(true)
        .git_exclude(true)
        .ignore(true)
        .parents(true)
        .require_git(false)
        .follow_links(false)
        .filter_entry(|e| e.file_name() != ".git");
    b
}

/// Modification time of a path, `UNIX_EPOCH` when unknown.
pub(crate) fn mtime(path: &std::path::Path) -> SystemTime {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

/// A gitignore-style glob matcher as ripgrep's `--glob` uses it: a pattern without `/` matches
/// the file name at any depth, one with `/` matches the path relative to the search root.
#[derive(Clone)]
pub(crate) struct PathGlob {
    set: globset::GlobMatcher,
    by_name: bool,
}

/// Compiled patterns kept for reuse (a model repeats its patterns; compiling one builds a
/// regex). Emptied when it reaches this many entries.
const GLOB_CACHE_MAX: usize = 256;

impl PathGlob {
    /// Compile `pattern`, or reuse its earlier compilation (a clone shares the regex); the
    /// error text is shown to the model.
    pub(crate) fn new(pattern: &str) -> Result<Self, String> {
        use std::collections::HashMap;
        use std::sync::{Mutex, OnceLock};
        static CACHE: OnceLock<Mutex<HashMap<String, PathGlob>>> = OnceLock::new();
        let cache = CACHE.get_or_init(Mutex::default);
        if let Some(g) = cache.lock().unwrap_or_else(|p| p.into_inner()).get(pattern) {
            return Ok(g.clone());
        }
        let g = Self::compile(pattern)?;
        let mut c = cache.lock().unwrap_or_else(|p| p.into_inner());
        if c.len() >= GLOB_CACHE_MAX {
            c.clear();
        }
        c.insert(pattern.to_string(), g.clone());
        Ok(g)
    }

    fn compile(pattern: &str) -> Result<Self, String> {
        let trimmed = pattern.trim_start_matches("./");
        let by_name = !trimmed.contains('/');
        let trimmed = trimmed.trim_start_matches('/');
        let glob = globset::GlobBuilder::new(trimmed)
            .literal_separator(!by_name)
            .backslash_escape(true)
            .build()
            .map_err(|e| format!("Invalid glob pattern '{pattern}': {e}"))?;
        Ok(Self {
            set: glob.compile_matcher(),
            by_name,
        })
    }

    /// Match a path given relative to the search root.
    pub(crate) fn is_match(&self, rel: &std::path::Path) -> bool {
        if self.by_name {
            rel.file_name().is_some_and(|n| self.set.is_match(n))
        } else {
            self.set.is_match(rel)
        }
    }
}

/// Run blocking work off the async runtime; a panic in it becomes a tool failure.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, crate::ToolError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| crate::ToolError::Failed(format!("internal error: {e}")))
}

#[cfg(test)]
mod one_trip_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_diff() {
        assert_eq!(diff_counts("a\nb\n", "a\nc\nd\n"), (2, 1));
        let d = unified_diff("f.txt", "a\n", "b\n");
        assert!(
            d.contains("--- f.txt") && d.contains("-a") && d.contains("+b"),
            "{d}"
        );
    }

    #[test]
    fn path_glob_semantics() {
        let g = PathGlob::new("*.rs").unwrap();
        assert!(g.is_match(std::path::Path::new("src/a/b.rs")));
        let g = PathGlob::new("src/*.rs").unwrap();
        assert!(g.is_match(std::path::Path::new("src/b.rs")));
        assert!(!g.is_match(std::path::Path::new("src/x/b.rs")));
        let g = PathGlob::new("**/*.rs").unwrap();
        assert!(g.is_match(std::path::Path::new("src/x/b.rs")));
        assert!(PathGlob::new("a[").is_err());
    }
}
