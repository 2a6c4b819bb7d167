//! `list {path?, ignore?}`: an indented directory tree (OpenCode's legacy `list`/`ls` tool,
//! `tool/ls.ts`): common build/dependency directories are skipped, at most 100 files shown.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{PathGlob, blocking, walker};
use crate::paths::{self, PathKind};
use crate::{ToolContext, ToolError, ToolOutput, TypedTool};

/// Maximum number of files listed (OpenCode `LIMIT`).
pub const LIMIT: usize = 100;

/// Directory names always skipped (OpenCode `IGNORE_PATTERNS`).
pub const DEFAULT_IGNORES: &[&str] = &[
    "node_modules",
    "__pycache__",
    ".git",
    "dist",
    "build",
    "target",
    "vendor",
    "bin",
    "obj",
    ".idea",
    ".vscode",
    ".zig-cache",
    "zig-out",
    ".coverage",
    "coverage",
    "tmp",
    "temp",
    ".cache",
    "cache",
    "logs",
    ".venv",
    "venv",
    "env",
];

/// The `list` tool.
#[derive(Debug, Default, Clone, Copy)]
pub struct ListTool;

/// Arguments of the `list` tool; the schema the model sees is derived from this struct
/// (each field's doc comment is its description).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListArgs {
    /// The absolute path of the directory to list (default: the working directory)
    path: Option<String>,
    /// Glob patterns to ignore
    #[serde(default)]
    ignore: Option<Vec<String>>,
}

impl TypedTool for ListTool {
    type Args = ListArgs;
    const NAME: &'static str = "list";

    fn describe(&self) -> String {
        "List files under a directory as an indented tree.\n\
         - `path`: directory to list (default: the working directory).\n\
         - `ignore`: extra glob patterns to skip (e.g. `[\"*.lock\", \"fixtures/\"]`).\n\
         - Honours .gitignore and skips dependency/build directories (node_modules, target, \
         dist, .git, .venv, …); shows at most 100 files. Prefer glob/grep when you know what \
         you are looking for."
            .to_string()
    }

    fn run(
        &self,
        args: ListArgs,
        ctx: ToolContext,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let root = ctx.resolve_or_directory(args.path.as_deref())?;
            let input = (root.clone(), args.ignore.unwrap_or_default());
            // When the rules settle it, the walk runs in the trip that locates the root.
            let (at, files) = match paths::locate_and(
                &ctx,
                &root,
                "list",
                |at| vec![at.rel.clone()],
                input,
                |_, (walk_root, patterns)| walk(&walk_root, patterns),
            )
            .await?
            {
                paths::Trip::Done(at, files) => (at, files?),
                paths::Trip::Ask(at, (walk_root, patterns)) => {
                    paths::check_external(&ctx, &at, PathKind::Directory).await?;
                    paths::ask(
                        &ctx,
                        "list",
                        vec![at.rel.clone()],
                        vec!["*".into()],
                        json!({"path": root.to_string_lossy()}),
                    )
                    .await?;
                    // One trip to the blocking pool: the directory check, then the walk.
                    let files = blocking(move || walk(&walk_root, patterns)).await??;
                    (at, files)
                }
            };
            let rel = at.rel;
            let output = format!("{}/\n{}", root.display(), render(&files));
            let mut metadata = serde_json::Map::new();
            metadata.insert("count".into(), json!(files.len()));
            metadata.insert("truncated".into(), Value::Bool(files.len() >= LIMIT));
            Ok(ToolOutput {
                title: rel,
                output,
                metadata,
            })
        })
    }
}

/// The listing after the permission checks (blocking): `root` must be a directory; `ignore`
/// patterns (a trailing `/` matches directories only) are compiled, then [`collect`] walks.
fn walk(root: &Path, ignore: Vec<String>) -> Result<Vec<PathBuf>, ToolError> {
    paths::require_directory(root, "Not a directory")?;
    let mut ignores = Vec::new();
    for pat in ignore {
        let dir_only = pat.ends_with('/');
        let glob = PathGlob::new(pat.trim_end_matches('/')).map_err(ToolError::Failed)?;
        ignores.push((glob, dir_only));
    }
    Ok(collect(root, ignores))
}

/// Up to [`LIMIT`] files (paths relative to `root`), in sorted depth-first walk order.
fn collect(root: &Path, ignores: Vec<(PathGlob, bool)>) -> Vec<PathBuf> {
    let filter_root = root.to_path_buf();
    let ignores = std::sync::Arc::new(ignores);
    let filter_ignores = ignores.clone();
    let mut builder = walker(root);
    builder
        .sort_by_file_name(|a, b| a.cmp(b))
        .filter_entry(move |e| {
            let is_dir = e.file_type().is_some_and(|t| t.is_dir());
            let name = e.file_name().to_string_lossy();
            if is_dir && e.depth() > 0 && DEFAULT_IGNORES.contains(&name.as_ref()) {
                return false;
            }
            let rel = e.path().strip_prefix(&filter_root).unwrap_or(e.path());
            if e.depth() > 0
                && filter_ignores
                    .iter()
                    .any(|(g, dir_only)| (!dir_only || is_dir) && g.is_match(rel))
            {
                return false;
            }
            true
        });
    let mut files = Vec::new();
    for entry in builder.build().flatten() {
        if entry.file_type().is_none_or(|t| t.is_dir()) {
            continue;
        }
        if let Ok(rel) = entry.path().strip_prefix(root) {
            files.push(rel.to_path_buf());
        }
        if files.len() >= LIMIT {
            break;
        }
    }
    files
}

/// Render relative file paths as OpenCode's tree: directories as `name/` indented two spaces
/// per level, subdirectories before files, both sorted.
fn render(files: &[PathBuf]) -> String {
    let mut dirs: BTreeSet<PathBuf> = BTreeSet::new();
    let mut by_dir: BTreeMap<PathBuf, Vec<String>> = BTreeMap::new();
    for f in files {
        let dir = f.parent().map(Path::to_path_buf).unwrap_or_default();
        let mut cur = PathBuf::new();
        dirs.insert(cur.clone());
        for c in dir.components() {
            cur.push(c);
            dirs.insert(cur.clone());
        }
        by_dir.entry(dir).or_default().push(
            f.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        );
    }
    let mut out = String::new();
    render_dir(Path::new(""), 0, &dirs, &by_dir, &mut out);
    out
}

fn render_dir(
    dir: &Path,
    depth: usize,
    dirs: &BTreeSet<PathBuf>,
    by_dir: &BTreeMap<PathBuf, Vec<String>>,
    out: &mut String,
) {
    if depth > 0 {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        out.push_str(&format!("{}{name}/\n", "  ".repeat(depth)));
    }
    for child in dirs
        .iter()
        .filter(|d| d.parent() == Some(dir) && d.as_path() != dir)
    {
        render_dir(child, depth + 1, dirs, by_dir, out);
    }
    if let Some(files) = by_dir.get(dir) {
        let mut files = files.clone();
        files.sort();
        for f in files {
            out.push_str(&format!("{}{f}\n", "  ".repeat(depth + 1)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Tool;

    #[tokio::test]
    async fn tree_with_ignores() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        for p in [
            "src/main.rs",
            "src/lib/mod.rs",
            "README.md",
            "target/debug/x",
            "node_modules/a/b.js",
            "docs/a.md",
            "x.lock",
        ] {
            let p = r.join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "").unwrap();
        }
        let out = ListTool
            .execute(
                json!({"ignore": ["docs/", "*.lock"]}),
                ToolContext::simple(r),
            )
            .await
            .unwrap();
        assert_eq!(
            out.output,
            format!(
                "{}/\n  src/\n    lib/\n      mod.rs\n    main.rs\n  README.md\n",
                r.display()
            )
        );
        assert_eq!(out.metadata["count"], json!(3));
        let out = ListTool
            .execute(json!({"path": "src"}), ToolContext::simple(r))
            .await
            .unwrap();
        assert!(
            out.output.ends_with("  lib/\n    mod.rs\n  main.rs\n"),
            "{}",
            out.output
        );
    }

    #[tokio::test]
    async fn limit_applies() {
        let d = tempfile::tempdir().unwrap();
        for i in 0..120 {
            std::fs::write(d.path().join(format!("f{i:03}")), "").unwrap();
        }
        let out = ListTool
            .execute(json!({}), ToolContext::simple(d.path()))
            .await
            .unwrap();
        assert_eq!(out.metadata["count"], json!(100));
        assert_eq!(out.metadata["truncated"], json!(true));
    }
}
