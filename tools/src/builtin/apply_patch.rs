//! `apply_patch {patchText}`: add, update, move and delete files with one patch in the format
//! GPT/Codex models are trained on ([`super::patch_format`]; OpenCode `tool/apply_patch.ts`,
//! §7.3). Offered instead of `edit` and `write` to those models
//! ([`crate::registry::uses_apply_patch`]).
//!
//! All or nothing: the patch is parsed and every operation is applied in memory first (files
//! read once, operations on one file applied in patch order); any error (a malformed line, a
//! chunk whose lines are not in the file, adding a file that exists, updating or deleting one
//! that does not) fails the call with the patch line and nothing is written. Then the same
//! permissions as `edit`/`write`: `external_directory` for each file outside the project, and
//! `edit` with every changed file's worktree-relative path (always: `*`), the combined diff in
//! its metadata; a rule's deny on any of them refuses before anyone is asked. Only then are
//! the files written (parents created) and removed. A failure of the disk itself while
//! writing can still leave the earlier files of the patch written: the error says which.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::patch_format::{self, Hunk, PatchError};
use super::write::BOM;
use super::{blocking, diff_counts, unified_diff, writable_target};
use crate::paths;
use crate::{PermissionReply, PermissionRequest, ToolContext, ToolError, ToolOutput, TypedTool};

/// The `apply_patch` tool.
#[derive(Debug, Default, Clone, Copy)]
pub struct ApplyPatchTool;

/// Arguments of `apply_patch`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApplyPatchArgs {
    /// The full patch text, from `*** Begin Patch` to `*** End Patch`
    patch_text: String,
}

const DESCRIPTION: &str = "Edit files with a patch: add, update, move and delete files in one call. The patch text:\n\n*** Begin Patch\n*** Add File: path/to/new.txt\n+first line of the new file\n*** Update File: path/to/file.py\n*** Move to: path/to/renamed.py   (optional)\n@@ def example():\n-    return 1\n+    return 2\n*** Delete File: path/to/obsolete.txt\n*** End Patch\n\nRules:\n- Paths are relative to the working directory (or absolute).\n- In an update, each chunk starts with `@@` (optionally followed by a line the change comes after, such as a function or class header); then lines starting with ' ' (context, unchanged), '-' (removed) or '+' (added). Give about 3 lines of context around each change so it is found unambiguously.\n- `*** End of File` after a chunk's lines anchors them at the end of the file.\n- Every line of an added file starts with '+'.\n- Nothing is written unless every change applies; read the files first so the context matches.";

/// A file the patch touches: its text before (`None`: absent) and after.
struct FileState {
    shown: String,
    before: Option<String>,
    after: Option<String>,
}

impl TypedTool for ApplyPatchTool {
    type Args = ApplyPatchArgs;
    const NAME: &'static str = "apply_patch";

    fn describe(&self) -> String {
        DESCRIPTION.into()
    }

    fn run(
        &self,
        args: ApplyPatchArgs,
        ctx: ToolContext,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        Box::pin(async move { run(args, ctx).await })
    }
}

fn failed(e: PatchError) -> ToolError {
    ToolError::Failed(format!("apply_patch verification failed: {e}"))
}

async fn run(args: ApplyPatchArgs, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
    let hunks = patch_format::parse(&args.patch_text).map_err(failed)?;
    let resolve = |p: &str| ctx.resolve(p).map(|p| paths::normalize(&p));
    // Every file involved, locked in path order (the locks `edit` takes) so a concurrent
    // edit of one of them applies before or after the whole patch.
    let mut involved: Vec<PathBuf> = Vec::with_capacity(hunks.len());
    for h in &hunks {
        involved.push(resolve(h.path())?);
        if let Hunk::Update {
            move_to: Some(d), ..
        } = h
        {
            involved.push(resolve(d)?);
        }
    }
    involved.sort();
    involved.dedup();
    let locks: Vec<_> = involved.iter().map(|p| super::edit::file_lock(p)).collect();
    let mut _guards = Vec::new();
    for l in &locks {
        _guards.push(l.lock().await);
    }

    let mut files: BTreeMap<PathBuf, FileState> = BTreeMap::new();
    let mut summary = Vec::new();
    for h in &hunks {
        let line = h.line();
        let path = resolve(h.path())?;
        let at = |msg: String| failed(PatchError { line, message: msg });
        match h {
            Hunk::Add { contents, .. } => {
                let f = load(&mut files, &path).await?;
                if f.after.is_some() {
                    return Err(at(format!(
                        "cannot add {}: the file already exists (use `*** Update File:` to change it)",
                        f.shown
                    )));
                }
                f.after = Some(contents.clone());
                summary.push(('A', path.clone(), None));
            }
            Hunk::Delete { .. } => {
                let f = load(&mut files, &path).await?;
                if f.after.is_none() {
                    return Err(at(format!("cannot delete {}: no such file", f.shown)));
                }
                f.after = None;
                summary.push(('D', path.clone(), None));
            }
            Hunk::Update {
                move_to, chunks, ..
            } => {
                let f = load(&mut files, &path).await?;
                let Some(text) = f.after.clone() else {
                    return Err(at(format!("cannot update {}: no such file", f.shown)));
                };
                let (bom, body) = match text.strip_prefix(BOM) {
                    Some(rest) => (BOM, rest),
                    None => ("", text.as_str()),
                };
                let new = if chunks.is_empty() {
                    text.clone()
                } else {
                    let shown = f.shown.clone();
                    let body = body.to_string();
                    let chunks = chunks.clone();
                    let patched =
                        super::blocking(move || patch_format::apply_chunks(&body, &chunks, &shown))
                            .await?
                            .map_err(failed)?;
                    format!("{bom}{patched}")
                };
                match move_to {
                    Some(dest) if resolve(dest).as_ref() != Ok(&path) => {
                        let dest = resolve(dest)?;
                        f.after = None;
                        let d = load(&mut files, &dest).await?;
                        if d.after.is_some() {
                            return Err(at(format!(
                                "cannot move to {}: the file already exists",
                                d.shown
                            )));
                        }
                        d.after = Some(new);
                        summary.push(('R', path.clone(), Some(dest)));
                    }
                    _ => {
                        f.after = Some(new);
                        summary.push(('M', path.clone(), None));
                    }
                }
            }
        }
    }
    files.retain(|_, f| f.before != f.after);
    if files.is_empty() {
        return Err(ToolError::Failed(
            "apply_patch verification failed: the patch leaves every file as it was".into(),
        ));
    }

    // Diffs and permission requests.
    let mut rels = BTreeMap::new();
    for path in files.keys() {
        rels.insert(path.clone(), paths::worktree_relative(&ctx, path).await);
    }
    let mut combined = String::new();
    let mut entries = Vec::new();
    let (mut total_add, mut total_del) = (0, 0);
    for (path, f) in &files {
        let rel = &rels[path];
        let old = f.before.as_deref().unwrap_or("");
        let new = f.after.as_deref().unwrap_or("");
        let diff = unified_diff(rel, old, new);
        let (additions, deletions) = diff_counts(old, new);
        total_add += additions;
        total_del += deletions;
        combined.push_str(&diff);
        let kind = match (&f.before, &f.after) {
            (None, _) => "add",
            (_, None) => "delete",
            _ => "update",
        };
        entries.push(json!({
            "filepath": f.shown,
            "relativePath": rel,
            "type": kind,
            "additions": additions,
            "deletions": deletions,
            "diff": diff,
        }));
    }
    let mut requests = Vec::new();
    let mut external_seen = std::collections::HashSet::new();
    for path in files.keys() {
        if paths::is_inside_project(&ctx, path).await {
            continue;
        }
        let real = paths::real_path(path).await;
        let dir = real.parent().map(Path::to_path_buf).unwrap_or(real.clone());
        let glob = paths::external_glob(&dir);
        if external_seen.insert(glob.clone()) {
            requests.push(PermissionRequest {
                permission: "external_directory".into(),
                patterns: vec![glob.clone()],
                always: vec![glob],
                metadata: json!({"filepath": real.to_string_lossy(), "parentDir": dir.to_string_lossy()}),
                ..Default::default()
            });
        }
    }
    let shown: Vec<String> = files.values().map(|f| f.shown.clone()).collect();
    requests.push(PermissionRequest {
        permission: "edit".into(),
        patterns: rels.values().cloned().collect(),
        always: vec!["*".into()],
        metadata: json!({"filepath": shown.join(", "), "files": shown, "diff": combined}),
        ..Default::default()
    });
    for r in &requests {
        match ctx.permissions.precheck(r).await {
            Some(PermissionReply::Deny(m)) => return Err(ToolError::PermissionDenied(m)),
            Some(PermissionReply::Reject(m)) => return Err(ToolError::PermissionRejected(m)),
            _ => {}
        }
    }
    for r in requests {
        paths::ask_request(&ctx, r).await?;
    }
    if ctx.abort.is_cancelled() {
        return Err(ToolError::Aborted);
    }

    // Write.
    let mut done: Vec<String> = Vec::new();
    for (path, f) in &files {
        let res = match &f.after {
            Some(text) => write(path, &f.shown, text).await,
            None => tokio::fs::remove_file(path)
                .await
                .map_err(|e| ToolError::Failed(format!("Cannot delete {}: {e}", f.shown))),
        };
        if let Err(e) = res {
            let written = if done.is_empty() {
                "No file was changed.".to_string()
            } else {
                format!("Already changed: {}.", done.join(", "))
            };
            return Err(ToolError::Failed(format!("{e}. {written}")));
        }
        done.push(rels[path].clone());
    }

    let rel_of = |p: &PathBuf| {
        rels.get(p)
            .cloned()
            .unwrap_or_else(|| p.to_string_lossy().into_owned())
    };
    let mut output = String::from("Success. Updated the following files:");
    for (kind, path, dest) in &summary {
        match dest {
            Some(d) => output.push_str(&format!("\nR {} -> {}", rel_of(path), rel_of(d))),
            None => output.push_str(&format!("\n{kind} {}", rel_of(path))),
        }
    }
    let title = if files.len() == 1 {
        rels.values().next().cloned().unwrap_or_default()
    } else {
        format!("{} files", files.len())
    };
    let mut metadata = serde_json::Map::new();
    metadata.insert("diff".into(), Value::String(combined));
    metadata.insert("additions".into(), json!(total_add));
    metadata.insert("deletions".into(), json!(total_del));
    metadata.insert("files".into(), Value::Array(entries));
    Ok(ToolOutput {
        title,
        output,
        metadata,
    })
}

/// The state of `path`, read from disk the first time (a directory, special file or
/// non-UTF-8 file is an error).
async fn load<'a>(
    files: &'a mut BTreeMap<PathBuf, FileState>,
    path: &Path,
) -> Result<&'a mut FileState, ToolError> {
    if !files.contains_key(path) {
        let shown = path.to_string_lossy().into_owned();
        let (p, s) = (path.to_path_buf(), shown.clone());
        let bytes = blocking(move || {
            let exists = writable_target(&p, &s, "apply_patch")?.is_some();
            exists
                .then(|| paths::read_regular_blocking(&p, "apply_patch", &s))
                .transpose()
        })
        .await??;
        let before = if let Some(bytes) = bytes {
            Some(String::from_utf8(bytes).map_err(|_| {
                ToolError::Failed(format!(
                    "Cannot patch non-UTF-8 file: {shown}. apply_patch only changes UTF-8 files."
                ))
            })?)
        } else {
            None
        };
        files.insert(
            path.to_path_buf(),
            FileState {
                shown,
                after: before.clone(),
                before,
            },
        );
    }
    files
        .get_mut(path)
        .ok_or_else(|| ToolError::Failed("internal error: file state lost".into()))
}

async fn write(path: &Path, shown: &str, text: &str) -> Result<(), ToolError> {
    super::store_file(path, "apply_patch", shown, text).await
}

#[cfg(test)]
#[path = "apply_patch_tests.rs"]
mod tests;
