//! The bash tool's permission check (OpenCode `tool/shell.ts`, §6.4, made to fail closed;
//! issue 11).
//!
//! The command is analysed on its syntax tree ([`crate::bash_command::analyze`]), then up to
//! five requests are made: `external_directory` for the working directory, `external_directory`
//! for every path outside the project the command touches, `read` for every path it reads (so
//! `cat .env` asks as the read tool would; every file under a directory read recursively,
//! listed on the disk up to [`MAX_WALKED`] entries), `edit` for every file it writes, and
//! `bash` for its commands (with the opaque constructs that force at least an ask). All
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
    let at = paths::locate(ctx, cwd).await;
    if !at.inside {
        let real = at.real;
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
    let PathRequests {
        mut external,
        reads,
        mut edits,
    } = path_requests(ctx, cwd, &analysis, command).await;
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
    out.extend(reads);
    out.extend(edits);
    let (mut patterns, mut sources) = analysis.patterns_with_sources();
    let mut opaque = analysis.opaque.clone();
    let elsewhere = command.contains("cd ") || command.contains("pushd ");
    resolve_git_aliases(cwd, elsewhere, &mut patterns, &mut sources, &mut opaque).await;
    if !patterns.is_empty() || !opaque.is_empty() {
        out.push(PermissionRequest {
            permission: "bash".into(),
            patterns,
            always: analysis.always(),
            metadata: json!({"command": command, "description": description}),
            sources,
            opaque,
            reason: String::new(),
        });
    }
    out
}

/// Git's own subcommands (`git help -a`, git 2.4x); any other word after `git` may be an
/// alias from the configuration (`alias.p = push`).
const GIT_COMMANDS: &[&str] = &[
    "add",
    "am",
    "annotate",
    "apply",
    "archive",
    "backfill",
    "bisect",
    "blame",
    "branch",
    "bugreport",
    "bundle",
    "cat-file",
    "check-attr",
    "check-ignore",
    "check-mailmap",
    "check-ref-format",
    "checkout",
    "checkout-index",
    "cherry",
    "cherry-pick",
    "citool",
    "clean",
    "clone",
    "column",
    "commit",
    "commit-graph",
    "commit-tree",
    "config",
    "count-objects",
    "credential",
    "describe",
    "diagnose",
    "diff",
    "diff-files",
    "diff-index",
    "diff-tree",
    "difftool",
    "fast-export",
    "fast-import",
    "fetch",
    "fetch-pack",
    "filter-branch",
    "fmt-merge-msg",
    "for-each-ref",
    "for-each-repo",
    "format-patch",
    "fsck",
    "gc",
    "get-tar-commit-id",
    "grep",
    "gui",
    "hash-object",
    "help",
    "http-push",
    "index-pack",
    "init",
    "instaweb",
    "interpret-trailers",
    "lfs",
    "log",
    "ls-files",
    "ls-remote",
    "ls-tree",
    "maintenance",
    "merge",
    "merge-base",
    "merge-file",
    "merge-index",
    "merge-tree",
    "mergetool",
    "mktag",
    "mktree",
    "multi-pack-index",
    "mv",
    "name-rev",
    "notes",
    "pack-objects",
    "pack-redundant",
    "pack-refs",
    "patch-id",
    "prune",
    "prune-packed",
    "pull",
    "push",
    "range-diff",
    "read-tree",
    "rebase",
    "reflog",
    "refs",
    "remote",
    "repack",
    "replace",
    "replay",
    "request-pull",
    "rerere",
    "reset",
    "restore",
    "rev-list",
    "rev-parse",
    "revert",
    "rm",
    "scalar",
    "send-email",
    "send-pack",
    "shortlog",
    "show",
    "show-branch",
    "show-index",
    "show-ref",
    "sparse-checkout",
    "stage",
    "stash",
    "status",
    "stripspace",
    "submodule",
    "subtree",
    "switch",
    "symbolic-ref",
    "tag",
    "unpack-file",
    "unpack-objects",
    "update-index",
    "update-ref",
    "update-server-info",
    "var",
    "verify-commit",
    "verify-pack",
    "verify-tag",
    "version",
    "whatchanged",
    "worktree",
    "write-tree",
];

/// Replace `git ALIAS …` by what the repository's configuration says it means, so
/// `git p origin` with `alias.p = push` matches `git push *`: adds the expanded pattern;
/// a shell alias (`!cmd`), an alias of an alias, or `help.autocorrect` (a typo runs the
/// closest command) is opaque. Reads the configuration with `git config` in `cwd` (bounded
/// by a timeout); without git or a repository nothing is added. A subcommand that is no alias
/// here is opaque when it runs in another repository (`git -C dir x`, `--git-dir`, or after
/// a `cd`: `elsewhere`), whose configuration may define it.
async fn resolve_git_aliases(
    cwd: &Path,
    elsewhere: bool,
    patterns: &mut Vec<String>,
    sources: &mut Vec<String>,
    opaque: &mut Vec<String>,
) {
    let unknown: Vec<(String, String, String)> = patterns
        .iter()
        .zip(sources.iter())
        .filter_map(|(p, src)| {
            let rest = p.strip_prefix("git ")?;
            let (sub, args) = rest.split_once(' ').unwrap_or((rest, ""));
            (!sub.starts_with('-') && !GIT_COMMANDS.contains(&sub))
                .then(|| (sub.to_string(), args.to_string(), src.clone()))
        })
        .collect();
    if unknown.is_empty() {
        return;
    }
    let config = git_alias_config(cwd).await;
    let autocorrect = config
        .iter()
        .find(|(k, _)| k == "help.autocorrect")
        .map(|(_, v)| v.to_ascii_lowercase())
        .filter(|v| !matches!(v.as_str(), "" | "0" | "false" | "never" | "show"));
    for (sub, args, src) in unknown {
        let key = format!("alias.{}", sub.to_ascii_lowercase());
        match config.iter().find(|(k, _)| *k == key) {
            Some((_, value)) if value.trim_start().starts_with('!') => opaque.push(format!(
                "`git {sub}` is the shell alias `{}`, which is not analysed",
                value.trim()
            )),
            Some((_, value)) => {
                let first = value.split_whitespace().next().unwrap_or("");
                if !GIT_COMMANDS.contains(&first) {
                    opaque.push(format!(
                        "`git {sub}` is the alias `{}`, which is not a git command troupe knows",
                        value.trim()
                    ));
                }
                let expanded = format!("git {} {args}", value.trim())
                    .trim_end()
                    .to_string();
                if !patterns.contains(&expanded) {
                    patterns.push(expanded);
                    sources.push(format!("{src} (git alias `{sub}` = `{}`)", value.trim()));
                }
            }
            None if autocorrect.is_some() => opaque.push(format!(
                "`git {sub}` is not a git command and `help.autocorrect` may run a similar one"
            )),
            None if elsewhere
                || src.contains(" -C")
                || src.contains("--git-dir")
                || src.contains("--work-tree") =>
            {
                opaque.push(format!(
                    "`git {sub}` is not a git command and may be an alias of another repository"
                ))
            }
            None => {}
        }
    }
}

/// `alias.*` and `help.autocorrect` entries of the git configuration seen from `cwd`
/// (keys lower case as git prints them); empty when git is missing or fails.
async fn git_alias_config(cwd: &Path) -> Vec<(String, String)> {
    let child = tokio::process::Command::new("git")
        .args(["config", "--get-regexp", r"^(alias\..*|help\.autocorrect)$"])
        .current_dir(cwd)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let Ok(Ok(out)) = tokio::time::timeout(std::time::Duration::from_secs(5), child).await else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let (k, v) = l.split_once(' ').unwrap_or((l, ""));
            (k.to_string(), v.to_string())
        })
        .collect()
}

/// The path requests of one bash command (see [`path_requests`]).
struct PathRequests {
    /// `external_directory` for the directories outside the project it touches.
    external: Option<PermissionRequest>,
    /// `read` for the paths it reads, so `cat .env` asks as the read tool does (the default
    /// ruleset asks for `*.env`); under rules that allow reading they pass silently.
    reads: Option<PermissionRequest>,
    /// `edit` for the paths it writes.
    edits: Option<PermissionRequest>,
}

/// `external_directory`, `read` and `edit` requests for the paths of `analysis`, resolved
/// against `cwd` (`~` expanded, symlinks followed): outside the project a directory gives
/// `<dir>/*`, anything else `<parent>/*`; a path read or written gives its worktree-relative
/// pattern, as the read and edit tools ask.
async fn path_requests(
    ctx: &ToolContext,
    cwd: &Path,
    analysis: &Analysis,
    command: &str,
) -> PathRequests {
    let mut globs: Vec<String> = Vec::new();
    let mut glob_sources: Vec<String> = Vec::new();
    let mut edits: Vec<String> = Vec::new();
    let mut edit_sources: Vec<String> = Vec::new();
    let mut reads: Vec<String> = Vec::new();
    let mut read_sources: Vec<String> = Vec::new();
    let mut read_opaque: Vec<String> = Vec::new();
    let mut external_opaque: Vec<String> = Vec::new();
    for u in &analysis.paths {
        let p = expand_home(&u.path);
        // Not normalized lexically: `link/..` is the parent of where `link` points, which
        // `is_inside_project` resolves on the disk.
        let abs = if p.is_absolute() { p } else { cwd.join(p) };
        let at = paths::locate(ctx, &abs).await;
        if !at.inside {
            let real = at.real;
            let dir = match at.kind {
                PathKind::Directory => real,
                PathKind::File => real.parent().map(Path::to_path_buf).unwrap_or(real),
            };
            let g = paths::external_glob(&dir);
            if !globs.contains(&g) {
                globs.push(g);
                glob_sources.push(format!("{} (in {})", u.path, u.source));
            }
        }
        let globbed = !u.write && u.path.contains(['*', '?', '[']);
        if u.recursive || globbed {
            // Every file under it (or matching the glob, `cat sub/*` reads `sub/prod.env`) is
            // read: each goes through the `read` rules, as if named (`grep -r KEY .` reads
            // `.env`); too many to list is opaque below.
            let found = if globbed {
                files_matching(&abs, &ctx.worktree, u.recursive, u.filtered).await
            } else {
                files_under(&abs, &ctx.worktree, u.filtered).await
            };
            match found {
                Some(files) => {
                    // A symbolic link under the walked directory can lead out of the project
                    // (`grep -r KEY .` with `./etc -> /etc`): such a file is read there, so
                    // its directory needs `external_directory` as if it were named. Files
                    // outside the worktree come back absolute; each directory is checked once.
                    // Filtered walks (rg, ag without `-L`/`--follow`: they follow no link)
                    // are left to the `read` rules; with it they are not filtered (above).
                    let mut seen_dirs = std::collections::HashSet::new();
                    let followed = !u.filtered;
                    for f in files
                        .iter()
                        .filter(|f| followed && Path::new(f).is_absolute())
                    {
                        let dir = Path::new(f).parent().unwrap_or(Path::new("/"));
                        if !seen_dirs.insert(dir) {
                            continue;
                        }
                        let g = paths::external_glob(dir);
                        if !globs.contains(&g) && !paths::is_inside_project(ctx, dir).await {
                            globs.push(g);
                            glob_sources
                                .push(format!("{f} (under {}, read by {})", u.path, u.source));
                        }
                    }
                    for f in files {
                        if !reads.contains(&f) {
                            read_sources
                                .push(format!("{f} (under {}, read by {})", u.path, u.source));
                            reads.push(f);
                        }
                    }
                }
                None => read_opaque.push(format!(
                    "`{}` reads every file under `{}`, more than {MAX_WALKED} entries, so which \
                     ones is not checked",
                    u.source, u.path
                )),
            }
        }
        if globbed && u.named {
            // `ls *`: each match is shown as if named, a link to a directory outside too.
            match glob_places(ctx, &abs).await {
                Some(places) => {
                    for at in places.into_iter().filter(|at| !at.inside) {
                        let dir = match at.kind {
                            PathKind::Directory => at.real.clone(),
                            PathKind::File => at
                                .real
                                .parent()
                                .map(Path::to_path_buf)
                                .unwrap_or(at.real.clone()),
                        };
                        let g = paths::external_glob(&dir);
                        if !globs.contains(&g) {
                            globs.push(g);
                            glob_sources.push(format!(
                                "{} (matched by {}, shown by {})",
                                at.real.display(),
                                u.path,
                                u.source
                            ));
                        }
                    }
                }
                None => external_opaque.push(format!(
                    "`{}` shows every match of `{}`, more than {MAX_WALKED} entries or a \
                     pattern not understood, so where they lead is not checked",
                    u.source, u.path
                )),
            }
        }
        if u.listed && !u.recursive {
            // Every name under it is listed, links followed: each place a link under it
            // leads to is checked as if it were named (a recursive read checks more above).
            match linked_places(&abs).await {
                Some(places) => {
                    for (real, is_dir) in places {
                        let dir = if is_dir {
                            real.clone()
                        } else {
                            real.parent().map(Path::to_path_buf).unwrap_or(real.clone())
                        };
                        let g = paths::external_glob(&dir);
                        if !globs.contains(&g) && !paths::is_inside_project(ctx, &dir).await {
                            globs.push(g);
                            glob_sources.push(format!(
                                "{} (linked under {}, listed by {})",
                                real.display(),
                                u.path,
                                u.source
                            ));
                        }
                    }
                }
                None => external_opaque.push(format!(
                    "`{}` lists every name under `{}`, links followed, more than {MAX_WALKED} \
                     entries, so where its links lead is not checked",
                    u.source, u.path
                )),
            }
        }
        let rel = at.rel;
        if u.write {
            if !edits.contains(&rel) {
                edits.push(rel);
                edit_sources.push(format!("{} (written by {})", u.path, u.source));
            }
        } else if !matches!(u.source.split_whitespace().next(), Some("cd" | "pushd"))
            && !reads.contains(&rel)
        {
            // Entering a directory reads nothing; its place is checked above.
            reads.push(rel);
            read_sources.push(format!("{} (read by {})", u.path, u.source));
        }
    }
    let external = (!globs.is_empty() || !external_opaque.is_empty()).then(|| PermissionRequest {
        permission: "external_directory".into(),
        patterns: globs.clone(),
        always: globs,
        metadata: json!({"command": command}),
        sources: glob_sources,
        opaque: external_opaque,
        ..Default::default()
    });
    let request = |permission: &str, patterns: Vec<String>, sources: Vec<String>| {
        (!patterns.is_empty()).then(|| PermissionRequest {
            permission: permission.into(),
            patterns,
            always: vec!["*".into()],
            metadata: json!({"command": command}),
            sources,
            ..Default::default()
        })
    };
    let mut reads = request("read", reads, read_sources);
    if !read_opaque.is_empty() {
        reads
            .get_or_insert_with(|| PermissionRequest {
                permission: "read".into(),
                always: vec!["*".into()],
                metadata: json!({"command": command}),
                ..Default::default()
            })
            .opaque = read_opaque;
    }
    PathRequests {
        external,
        reads,
        edits: request("edit", edits, edit_sources),
    }
}

/// How many entries [`files_under`] looks at before giving up (the read is then opaque: it
/// asks whenever a `read` rule restricts anything). Bounds the check's time on a large tree
/// to a few milliseconds.
pub const MAX_WALKED: usize = 20_000;

/// The files a glob `pattern` (absolute) matches, as [`files_under`] gives them: the
/// directory before its first component with a glob character is walked as deep as the
/// pattern has components (`**` or `recursive`: without limit, and with `recursive` every
/// file under that directory counts, a superset of what the matches hold). A name starting
/// with `.` matches only a pattern component starting with `.`, as in bash without
/// `dotglob` (except under `**`, where it always may). `None` when there are more than
/// [`MAX_WALKED`] entries or the pattern is not a glob `globset` understands.
async fn files_matching(
    pattern: &Path,
    worktree: &Path,
    recursive: bool,
    filtered: bool,
) -> Option<Vec<String>> {
    let pattern = pattern.to_string_lossy().into_owned();
    let worktree = worktree.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let comps: Vec<&str> = pattern.split('/').collect();
        let first = comps.iter().position(|c| c.contains(['*', '?', '[']))?;
        let prefix = match comps[..first].join("/") {
            p if p.is_empty() => "/".to_string(),
            p => p,
        };
        let rest = &comps[first..];
        let matcher = globset::GlobBuilder::new(&pattern)
            .literal_separator(true)
            .build()
            .ok()?
            .compile_matcher();
        let depth = (!recursive && !rest.iter().any(|c| c.contains("**"))).then_some(rest.len());
        let root = std::fs::canonicalize(&worktree).unwrap_or(worktree);
        walked_files(walk(Path::new(&prefix), filtered, depth), &root, |entry| {
            if !recursive && !matcher.is_match(&entry.path) {
                return None;
            }
            // Without `dotglob` (which the analysis treats as opaque) a glob character does
            // not match a leading `.`: `cat *` does not read `.env`.
            if depth.is_some() && hidden_for(&entry.path, &prefix, rest) {
                return None;
            }
            Some(std::fs::canonicalize(&entry.path).unwrap_or_else(|_| entry.path.clone()))
        })
    })
    .await
    .unwrap_or(None)
}

/// Where each match of the glob `pattern` (absolute) really is ([`paths::locate_blocking`]),
/// directories and links to them included, as bash expands it: the directory before the
/// first component with a glob character is walked as deep as the pattern has components,
/// links followed; a name starting with `.` matches only a component starting with `.`.
/// `None` when the walk passes [`MAX_WALKED`] entries, or for a pattern with `**` or one
/// `globset` does not understand.
async fn glob_places(ctx: &ToolContext, pattern: &Path) -> Option<Vec<paths::Located>> {
    let pattern = pattern.to_string_lossy().into_owned();
    let (directory, worktree) = (ctx.directory.clone(), ctx.worktree.clone());
    tokio::task::spawn_blocking(move || {
        let comps: Vec<&str> = pattern.split('/').collect();
        let first = comps.iter().position(|c| c.contains(['*', '?', '[']))?;
        let rest = &comps[first..];
        if rest.iter().any(|c| c.contains("**")) {
            return None;
        }
        let prefix = match comps[..first].join("/") {
            p if p.is_empty() => "/".to_string(),
            p => p,
        };
        let matcher = globset::GlobBuilder::new(&pattern)
            .literal_separator(true)
            .build()
            .ok()?
            .compile_matcher();
        let mut out = Vec::new();
        for (n, entry) in logical_walk(Path::new(&prefix), Some(rest.len()))
            .into_iter()
            .enumerate()
        {
            if n >= MAX_WALKED {
                return None;
            }
            let Some(entry) = entry else { continue };
            if !matcher.is_match(&entry.path) || hidden_for(&entry.path, &prefix, rest) {
                continue;
            }
            out.push(paths::locate_blocking(&directory, &worktree, &entry.path));
        }
        Some(out)
    })
    .await
    .unwrap_or(None)
}

/// Whether bash's glob leaves `path` out: a name starting with `.` under a pattern
/// component (of `rest`, the components after `prefix`) that does not start with `.`
/// (no `dotglob`).
fn hidden_for(path: &Path, prefix: &str, rest: &[&str]) -> bool {
    path.strip_prefix(prefix)
        .map(|r| {
            r.components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .zip(rest)
                .any(|(n, p)| n.starts_with('.') && !p.starts_with('.'))
        })
        .unwrap_or(false)
}

/// The files under `path` (itself when it is a file), as the `read` rules see them: relative
/// to `worktree` when inside it (symbolic links resolved, followed into directories, hidden
/// and ignored files included, as `grep -r`/`-R` and `tar` read them, unless `filtered`:
/// then skipped as `rg` skips them, with the same `ignore` rules), absolute otherwise.
/// `None` when there are more than [`MAX_WALKED`] entries; empty when `path` does not exist.
async fn files_under(path: &Path, worktree: &Path, filtered: bool) -> Option<Vec<String>> {
    let path = path.to_path_buf();
    let worktree = worktree.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let root = std::fs::canonicalize(&worktree).unwrap_or(worktree);
        let Ok(start) = std::fs::canonicalize(&path) else {
            return Some(Vec::new());
        };
        // A file is where its directory really is: below a followed directory link
        // (`./outlink -> ../outside`) the walk's path names the link, not the place read.
        // Each directory is resolved once.
        let mut real_dirs: std::collections::HashMap<PathBuf, PathBuf> =
            std::collections::HashMap::new();
        walked_files(walk(&start, filtered, None), &root, |entry| {
            let p = entry.path.as_path();
            if entry.link {
                return Some(std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf()));
            }
            let (Some(dir), Some(name)) = (p.parent(), p.file_name()) else {
                return Some(p.to_path_buf());
            };
            let real_dir = real_dirs
                .entry(dir.to_path_buf())
                .or_insert_with(|| std::fs::canonicalize(dir).unwrap_or_else(|_| dir.into()));
            Some(real_dir.join(name))
        })
    })
    .await
    .unwrap_or(None)
}

/// Where the symbolic links under `path` lead, as a walk that follows them reaches them
/// ([`logical_walk`], as `ls -RL` and `find -L` walk): each link's real location and whether
/// it is a directory. Only links can lead elsewhere: any other entry is where its directory
/// is. `None` when there are more than [`MAX_WALKED`] entries.
async fn linked_places(path: &Path) -> Option<Vec<(PathBuf, bool)>> {
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let Ok(start) = std::fs::canonicalize(&path) else {
            return Some(Vec::new());
        };
        let mut out = vec![];
        for (n, entry) in logical_walk(&start, None).into_iter().enumerate() {
            if n >= MAX_WALKED {
                return None;
            }
            if let Some(e) = entry.filter(|e| e.link)
                && let Ok(real) = std::fs::canonicalize(&e.path)
            {
                out.push((real, e.dir));
            }
        }
        Some(out)
    })
    .await
    .unwrap_or(None)
}

/// One entry of a [`walk`]: the path the walk reached it by, whether that path is a symbolic
/// link, and whether it leads to a directory (links followed).
struct Walked {
    path: PathBuf,
    link: bool,
    dir: bool,
}

/// A walk from `start` that follows symbolic links, at most `depth` levels below it (`None`:
/// no limit). With `filtered`, the walk of `rg`/`ag` without `-L` (the `ignore` crate: hidden
/// and ignored files skipped), following the links they would not, so the `read` rules see
/// every file a link leads to. Otherwise [`logical_walk`]: the walk of `grep -R`, `tar -h` or
/// `rg -L` without a depth, of a shell glob with one.
fn walk(
    start: &Path,
    filtered: bool,
    depth: Option<usize>,
) -> Box<dyn Iterator<Item = Option<Walked>>> {
    if !filtered {
        return Box::new(logical_walk(start, depth).into_iter());
    }
    let mut b = ignore::WalkBuilder::new(start);
    b.standard_filters(true)
        .hidden(true)
        .follow_links(true)
        .max_depth(depth);
    Box::new(b.build().map(|e| {
        e.ok().map(|e| Walked {
            link: e.path_is_symlink(),
            dir: e.file_type().is_some_and(|t| t.is_dir()),
            path: e.into_path(),
        })
    }))
}

/// Every entry below `start` (itself when it is not a directory), following every symbolic
/// link, nothing skipped. Without a `depth`, as fts walks for `grep -R` and `tar -h`: a
/// directory that is one of the walk's own ancestors (same device and inode) is a loop and
/// not entered again — but a link up to a directory the walk did not come through is, so
/// `grep -R s a` with `a/up -> ..` reads what the parent holds (`c/out -> /elsewhere`),
/// which the `ignore` and `walkdir` crates call a loop and skip (found by the property test
/// over generated link layouts, and checked against GNU grep). With a `depth` (a glob's
/// component count, `cat */*/*`: 3), as bash expands a glob: no loop check, every link
/// entered again at each level (`l -> .` gives `l/out/key`), the depth bounding the walk.
/// At most [`MAX_WALKED`] + 1 entries; `None` entries could not be read or are loops.
fn logical_walk(start: &Path, depth: Option<usize>) -> Vec<Option<Walked>> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let Ok(meta) = std::fs::metadata(start) else {
        return out;
    };
    if !meta.is_dir() {
        out.push(Some(Walked {
            path: start.to_path_buf(),
            link: std::fs::symlink_metadata(start).is_ok_and(|m| m.file_type().is_symlink()),
            dir: false,
        }));
        return out;
    }
    // Directories entered: (device, inode, index of the directory it was entered from).
    let mut entered: Vec<(u64, u64, Option<usize>)> = vec![(meta.dev(), meta.ino(), None)];
    let mut stack = vec![(start.to_path_buf(), 0usize, 0usize)];
    while let Some((dir, index, level)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            out.push(None);
            continue;
        };
        for e in entries {
            if out.len() > MAX_WALKED {
                return out;
            }
            let Ok(e) = e else {
                out.push(None);
                continue;
            };
            let path = e.path();
            let link = e.file_type().is_ok_and(|t| t.is_symlink());
            let Ok(m) = std::fs::metadata(&path) else {
                out.push(None);
                continue;
            };
            let is_dir = m.is_dir();
            if is_dir && depth.is_none_or(|d| level + 1 < d) {
                let key = (m.dev(), m.ino());
                let mut up = Some(index);
                let mut looped = false;
                while let (Some(i), None) = (up, depth) {
                    let (dev, ino, from) = entered[i];
                    if (dev, ino) == key {
                        looped = true;
                        break;
                    }
                    up = from;
                }
                if looped {
                    out.push(None);
                    continue;
                }
                entered.push((key.0, key.1, Some(index)));
                stack.push((path.clone(), entered.len() - 1, level + 1));
            }
            out.push(Some(Walked {
                path,
                link,
                dir: is_dir,
            }));
        }
    }
    out
}

/// The files (not directories) of `walk` that `keep` gives a path for, each relative to
/// `root` when inside it, absolute otherwise. `None` when the walk passes [`MAX_WALKED`]
/// entries (every entry counts: directories and unreadable ones too).
fn walked_files(
    walk: impl Iterator<Item = Option<Walked>>,
    root: &Path,
    mut keep: impl FnMut(&Walked) -> Option<PathBuf>,
) -> Option<Vec<String>> {
    let mut out = Vec::new();
    for (n, entry) in walk.enumerate() {
        if n >= MAX_WALKED {
            return None;
        }
        let Some(entry) = entry else { continue };
        if entry.dir {
            continue;
        }
        let Some(real) = keep(&entry) else { continue };
        out.push(match real.strip_prefix(root) {
            Ok(rel) => rel.to_string_lossy().into_owned(),
            Err(_) => real.to_string_lossy().into_owned(),
        });
    }
    Some(out)
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
