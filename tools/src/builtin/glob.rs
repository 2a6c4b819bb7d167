//! `glob {pattern, path?}`: files matching a glob, newest first (OpenCode `tool/glob.ts`, which
//! runs `rg --files --hidden --glob=!.git/* --glob=<pattern>`).

use std::path::PathBuf;
use std::time::SystemTime;

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{PathGlob, blocking, mtime, walker};
use crate::paths::{self, PathKind};
use crate::{ToolContext, ToolError, ToolOutput, TypedTool};

/// Maximum number of paths returned (OpenCode 100).
pub const LIMIT: usize = 100;
/// Note appended when more files matched than [`LIMIT`].
pub const TRUNCATED_NOTE: &str = "(Results are truncated: showing first 100 results. Consider using a more specific path or pattern.)";

/// The `glob` tool.
#[derive(Debug, Default, Clone, Copy)]
pub struct GlobTool;

/// Arguments of the `glob` tool; the schema the model sees is derived from this struct
/// (each field's doc comment is its description).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GlobArgs {
    /// The glob pattern to match files against
    pattern: String,
    /// The directory to search in (default: the working directory)
    path: Option<String>,
}

impl TypedTool for GlobTool {
    type Args = GlobArgs;
    const NAME: &'static str = "glob";

    fn describe(&self) -> String {
        "Find files by name pattern, e.g. `**/*.rs` or `src/**/*.test.ts`; a pattern without `/` \
         matches file names at any depth.\n\
         - `path`: directory to search (default: the working directory).\n\
         - Honours .gitignore; includes hidden files; skips .git/.\n\
         - Returns up to 100 absolute paths, most recently modified first."
            .to_string()
    }

    fn run(
        &self,
        args: GlobArgs,
        ctx: ToolContext,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let (root, pattern) = match split_absolute(&args.pattern) {
                Some((base, rest)) => (paths::normalize(&base), rest),
                None => (
                    ctx.resolve_or_directory(args.path.as_deref())?,
                    args.pattern.clone(),
                ),
            };
            let asked = args.pattern.clone();
            let input = (root.clone(), pattern, ctx.abort.clone());
            // When the rules settle it, the walk runs in the trip that locates the root.
            let (at, mut files) = match paths::locate_and(
                &ctx,
                &root,
                "glob",
                move |_| vec![asked],
                input,
                |_, (walk_root, pattern, abort)| search(&walk_root, &pattern, &abort),
            )
            .await?
            {
                paths::Trip::Done(at, files) => (at, files?),
                paths::Trip::Ask(at, (walk_root, pattern, abort)) => {
                    paths::check_external(&ctx, &at, PathKind::Directory).await?;
                    paths::ask(
                        &ctx,
                        "glob",
                        vec![args.pattern.clone()],
                        vec!["*".into()],
                        json!({"pattern": args.pattern, "path": root.to_string_lossy()}),
                    )
                    .await?;
                    // One trip to the blocking pool: the directory check, then the walk.
                    let files = blocking(move || search(&walk_root, &pattern, &abort)).await??;
                    (at, files)
                }
            };
            if ctx.abort.is_cancelled() {
                return Err(ToolError::Aborted);
            }
            files.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            let truncated = files.len() > LIMIT;
            files.truncate(LIMIT);
            let mut output = if files.is_empty() {
                "No files found".to_string()
            } else {
                files
                    .iter()
                    .map(|(p, _)| p.to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            if truncated {
                output.push_str("\n\n");
                output.push_str(TRUNCATED_NOTE);
            }
            let mut metadata = serde_json::Map::new();
            metadata.insert("count".into(), json!(files.len()));
            metadata.insert("truncated".into(), Value::Bool(truncated));
            Ok(ToolOutput {
                title: at.rel,
                output,
                metadata,
            })
        })
    }
}

/// An absolute pattern is split into its literal leading directory and the rest:
/// `/a/b/**/*.rs` → (`/a/b`, `**/*.rs`); `/a/b/c.rs` → (`/a/b`, `c.rs`). `None` for relative
/// patterns.
pub fn split_absolute(pattern: &str) -> Option<(PathBuf, String)> {
    if !pattern.starts_with('/') {
        return None;
    }
    let parts: Vec<&str> = pattern.split('/').collect();
    let first_glob = parts
        .iter()
        .position(|c| c.contains(['*', '?', '[', '{']))
        .unwrap_or(parts.len() - 1)
        .max(1);
    let base = parts[..first_glob].join("/");
    let base = if base.is_empty() {
        "/".to_string()
    } else {
        base
    };
    Some((PathBuf::from(base), parts[first_glob..].join("/")))
}

/// The search after the permission checks (blocking): `root` must be a directory, `pattern`
/// a valid glob; then [`find`] walks.
fn search(
    root: &std::path::Path,
    pattern: &str,
    abort: &tokio_util::sync::CancellationToken,
) -> Result<Vec<(PathBuf, SystemTime)>, ToolError> {
    paths::require_directory(root, "glob path must be a directory")?;
    let matcher = PathGlob::new(pattern).map_err(ToolError::Failed)?;
    Ok(find(root, &matcher, abort))
}

fn find(
    root: &std::path::Path,
    matcher: &PathGlob,
    abort: &tokio_util::sync::CancellationToken,
) -> Vec<(PathBuf, SystemTime)> {
    let mut out = Vec::new();
    for entry in walker(root).build().flatten() {
        if abort.is_cancelled() {
            break;
        }
        if !entry
            .file_type()
            .is_some_and(|t| t.is_file() || t.is_symlink())
        {
            continue;
        }
        let path = entry.path();
        let Ok(rel) = path.strip_prefix(root) else {
            continue;
        };
        if matcher.is_match(rel) {
            out.push((path.to_path_buf(), mtime(path)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Tool;
    use std::time::Duration;

    fn touch(p: &std::path::Path, secs_ago: u64) {
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(p, "x").unwrap();
        let t = SystemTime::now() - Duration::from_secs(secs_ago);
        std::fs::File::options()
            .write(true)
            .open(p)
            .unwrap()
            .set_modified(t)
            .unwrap();
    }

    #[tokio::test]
    async fn respects_gitignore_and_sorts_by_mtime() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        std::fs::write(r.join(".gitignore"), "ignored/\n*.log\n").unwrap();
        touch(&r.join("old.rs"), 300);
        touch(&r.join("src/new.rs"), 10);
        touch(&r.join("src/mid.rs"), 100);
        touch(&r.join("ignored/x.rs"), 1);
        touch(&r.join(".hidden/h.rs"), 200);
        touch(&r.join(".git/g.rs"), 1);
        touch(&r.join("a.log"), 1);
        let out = GlobTool
            .execute(json!({"pattern": "*.rs"}), ToolContext::simple(r))
            .await
            .unwrap();
        let expected: Vec<String> = ["src/new.rs", "src/mid.rs", ".hidden/h.rs", "old.rs"]
            .iter()
            .map(|p| r.join(p).to_string_lossy().into_owned())
            .collect();
        assert_eq!(out.output, expected.join("\n"));
        assert_eq!(out.metadata["count"], json!(4));
        let out = GlobTool
            .execute(
                json!({"pattern": "src/*.rs", "path": r.to_str()}),
                ToolContext::simple(r),
            )
            .await
            .unwrap();
        assert_eq!(out.output.lines().count(), 2);
        let out = GlobTool
            .execute(json!({"pattern": "*.py"}), ToolContext::simple(r))
            .await
            .unwrap();
        assert_eq!(out.output, "No files found");
    }

    #[test]
    fn absolute_patterns_split() {
        assert_eq!(
            split_absolute("/a/b/**/*.rs"),
            Some((PathBuf::from("/a/b"), "**/*.rs".to_string()))
        );
        assert_eq!(
            split_absolute("/a/b/c.rs"),
            Some((PathBuf::from("/a/b"), "c.rs".to_string()))
        );
        assert_eq!(
            split_absolute("/*.rs"),
            Some((PathBuf::from("/"), "*.rs".to_string()))
        );
        assert_eq!(split_absolute("src/*.rs"), None);
    }

    #[tokio::test]
    async fn absolute_pattern_searches_its_base() {
        let d = tempfile::tempdir().unwrap();
        touch(&d.path().join("sub/x.rs"), 1);
        touch(&d.path().join("y.rs"), 1);
        let pattern = format!("{}/sub/**/*.rs", d.path().display());
        let out = GlobTool
            .execute(json!({"pattern": pattern}), ToolContext::simple(d.path()))
            .await
            .unwrap();
        assert_eq!(out.output, d.path().join("sub/x.rs").to_string_lossy());
    }

    #[tokio::test]
    async fn truncates_at_limit() {
        let d = tempfile::tempdir().unwrap();
        for i in 0..105 {
            std::fs::write(d.path().join(format!("f{i}.txt")), "").unwrap();
        }
        let out = GlobTool
            .execute(json!({"pattern": "*.txt"}), ToolContext::simple(d.path()))
            .await
            .unwrap();
        assert!(out.output.ends_with(TRUNCATED_NOTE));
        assert_eq!(
            out.output.lines().filter(|l| l.ends_with(".txt")).count(),
            100
        );
        assert_eq!(out.metadata["truncated"], json!(true));
    }

    #[tokio::test]
    async fn rejects_file_path_and_bad_glob() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("f.txt"), "").unwrap();
        let e = GlobTool
            .execute(
                json!({"pattern": "*", "path": "f.txt"}),
                ToolContext::simple(d.path()),
            )
            .await
            .unwrap_err();
        assert!(e.to_string().contains("must be a directory"));
        let e = GlobTool
            .execute(
                json!({"pattern": "a[", "path": "."}),
                ToolContext::simple(d.path()),
            )
            .await
            .unwrap_err();
        assert!(e.to_string().contains("Invalid glob pattern"));
    }
}
