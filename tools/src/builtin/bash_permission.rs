//! The bash tool's permission check (OpenCode `tool/shell.ts`, §6.4, made to fail closed;
//! issue 11).
//!
//! The command is analysed on its syntax tree ([`crate::bash_command::analyze`]), then up to
//! four requests are made: `external_directory` for the working directory, `external_directory`
//! for every path outside the project the command touches, `edit` for every file it writes,
//! and `bash` for its commands (with the opaque constructs that force at least an ask). All
//! requests are checked against the rules first ([`crate::PermissionAsker::precheck`]), so a
//! deny anywhere wins before anybody is asked about a looser part.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::bash_command::{Analysis, analyze};
use crate::paths::{self, PathKind};
use crate::{PermissionReply, PermissionRequest, ToolContext, ToolError};

/// `~` and `~/x` against `$HOME` (other `~user` forms are kept as written).
fn expand_home(arg: &str) -> PathBuf {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    match (arg, home) {
        ("~", Some(h)) => h,
        (a, Some(h)) if a.starts_with("~/") => h.join(&a[2..]),
        (a, _) => PathBuf::from(a),
    }
}

/// The requests for running `command` in `cwd`, in asking order. `description` goes into the
/// bash request's metadata.
pub async fn requests(
    ctx: &ToolContext,
    command: &str,
    cwd: &Path,
    description: &str,
) -> Vec<PermissionRequest> {
    let analysis = analyze(command);
    let mut out = Vec::new();
    if !paths::is_inside_project(ctx, cwd).await {
        let real = paths::real_path(cwd).await;
        let g = paths::external_glob(&real);
        out.push(PermissionRequest {
            permission: "external_directory".into(),
            patterns: vec![g.clone()],
            always: vec![g],
            metadata: json!({"filepath": real.to_string_lossy(), "parentDir": real.to_string_lossy()}),
            sources: vec![format!("working directory {}", cwd.display())],
            ..Default::default()
        });
    }
    let (mut external, mut edits) = path_requests(ctx, cwd, &analysis, command).await;
    // Paths only known when the command runs: ask `external_directory` (they may be
    // outside) and, for writes, `edit` (they may be any file).
    let unknown: Vec<String> = analysis
        .unknown_paths
        .iter()
        .map(|u| u.reason.clone())
        .collect();
    let unknown_writes: Vec<String> = analysis
        .unknown_paths
        .iter()
        .filter(|u| u.write)
        .map(|u| u.reason.clone())
        .collect();
    for (req, permission, reasons) in [
        (&mut external, "external_directory", unknown),
        (&mut edits, "edit", unknown_writes),
    ] {
        if !reasons.is_empty() {
            req.get_or_insert_with(|| PermissionRequest {
                permission: permission.into(),
                metadata: json!({"command": command}),
                ..Default::default()
            })
            .opaque = reasons;
        }
    }
    out.extend(external);
    out.extend(edits);
    let (patterns, sources) = analysis.patterns_with_sources();
    if !patterns.is_empty() || !analysis.opaque.is_empty() {
        out.push(PermissionRequest {
            permission: "bash".into(),
            patterns,
            always: analysis.always(),
            metadata: json!({"command": command, "description": description}),
            sources,
            opaque: analysis.opaque.clone(),
            reason: String::new(),
        });
    }
    out
}

/// `external_directory` and `edit` requests for the paths of `analysis`, resolved against
/// `cwd` (`~` expanded, symlinks followed): outside the project a directory gives `<dir>/*`,
/// anything else `<parent>/*`; a written path gives its worktree-relative edit pattern.
async fn path_requests(
    ctx: &ToolContext,
    cwd: &Path,
    analysis: &Analysis,
    command: &str,
) -> (Option<PermissionRequest>, Option<PermissionRequest>) {
    let mut globs: Vec<String> = Vec::new();
    let mut glob_sources: Vec<String> = Vec::new();
    let mut edits: Vec<String> = Vec::new();
    let mut edit_sources: Vec<String> = Vec::new();
    for u in &analysis.paths {
        let p = expand_home(&u.path);
        // Not normalized lexically: `link/..` is the parent of where `link` points, which
        // `is_inside_project` resolves on the disk.
        let abs = if p.is_absolute() { p } else { cwd.join(p) };
        if !paths::is_inside_project(ctx, &abs).await {
            let real = paths::real_path(&abs).await;
            let dir = match paths::kind_of(&real).await {
                PathKind::Directory => real,
                PathKind::File => real.parent().map(Path::to_path_buf).unwrap_or(real),
            };
            let g = paths::external_glob(&dir);
            if !globs.contains(&g) {
                globs.push(g);
                glob_sources.push(format!("{} (in {})", u.path, u.source));
            }
        }
        if u.write {
            let rel = paths::worktree_relative(ctx, &abs).await;
            if !edits.contains(&rel) {
                edits.push(rel);
                edit_sources.push(format!("{} (written by {})", u.path, u.source));
            }
        }
    }
    let external = (!globs.is_empty()).then(|| PermissionRequest {
        permission: "external_directory".into(),
        patterns: globs.clone(),
        always: globs,
        metadata: json!({"command": command}),
        sources: glob_sources,
        ..Default::default()
    });
    let edit = (!edits.is_empty()).then(|| PermissionRequest {
        permission: "edit".into(),
        patterns: edits,
        always: vec!["*".into()],
        metadata: json!({"command": command}),
        sources: edit_sources,
        ..Default::default()
    });
    (external, edit)
}

/// Check every request for `command` (see the module docs): a rule's deny on any of them
/// refuses at once; otherwise each is asked in order and the first refusal ends the check.
pub async fn check(
    ctx: &ToolContext,
    command: &str,
    cwd: &Path,
    description: &str,
) -> Result<(), ToolError> {
    let reqs = requests(ctx, command, cwd, description).await;
    for r in &reqs {
        match ctx.permissions.precheck(r).await {
            Some(PermissionReply::Deny(m)) => return Err(ToolError::PermissionDenied(m)),
            Some(PermissionReply::Reject(m)) => return Err(ToolError::PermissionRejected(m)),
            _ => {}
        }
    }
    for r in reqs {
        paths::ask_request(ctx, r).await?;
    }
    Ok(())
}
