//! troupe-snapshot: what an agent's step changed in a project, and undoing it.
//!
//! A [`Snapshot`] keeps a *shadow* git repository per project under troupe's data directory
//! (`<data>/snapshot/<hash of the work tree path>`), whose work tree is the project's git work
//! tree. The user's own `.git` is only read (its `info/exclude`), never written. Each
//! [`Snapshot::track`] stages the work tree into the shadow index and writes a tree object:
//! the tree hash *is* the snapshot (no commits, no refs). Two tree hashes give the files a step
//! changed ([`Snapshot::changed_files`]), per-file line counts ([`Snapshot::diff`]) and a
//! unified diff ([`Snapshot::diff_full`]); [`Snapshot::revert`] puts files back as a tree had
//! them (deleting those the tree did not have).
//!
//! Behaviour follows OpenCode's `snapshot/index.ts` (v1.15, see the engine notes §11): ignore
//! rules of the source repository are honoured (`.gitignore` files of the work tree, the
//! user's global excludes file, and the source repository's `info/exclude`, copied into the
//! shadow repository), untracked files over [`MAX_UNTRACKED_BYTES`] are not snapshotted,
//! every git call on one shadow repository is serialized (an async mutex per git dir in this
//! process plus an OS file lock between processes), and `git gc --prune=7.days` runs at most
//! every [`GC_INTERVAL`].
//!
//! Git work runs in child processes (`tokio::process`); file-system work (the walk of the
//! work tree, `stat` calls, the index's checksum, staging) runs in `spawn_blocking` tasks,
//! so nothing here blocks a tokio worker thread. A track asks git as little as it can: when
//! a stat fingerprint of everything `git add` reads is unchanged since the last track
//! (`fingerprint`, Linux on local file systems), it runs no git process at all; when files
//! changed and the walk lists what git would stage, the blobs and trees are written in
//! this process (`stage`), asking git at most which new files its rules ignore (see
//! [`Snapshot::track`]).
//!
//! This file holds the public types and operations; `git` holds the shadow repository's
//! plumbing (locking, init, excludes, gc, running git and parsing its output); `fingerprint`
//! the stat fingerprint; `stage` staging in process.

use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

mod fingerprint;
mod git;
mod rules;
mod stage;

use git::{
    RepoState, WrittenTree, bare_git, exclude_line, io_err, join_err, own_pathspecs,
    parse_raw_numstat, repo_known, repo_state, split_nul, split_unified,
};

#[cfg(test)]
mod revert_hostile_tests;
#[cfg(test)]
mod rules_hostile_tests;
#[cfg(test)]
mod rules_tests;
#[cfg(test)]
mod stage_hostile_tests;
#[cfg(test)]
mod stage_rules_hostile_tests;
#[cfg(test)]
mod stage_tests;
#[cfg(test)]
mod tests;

/// Untracked files larger than this many bytes (2 MiB) are left out of snapshots, so they are
/// never reported, diffed or reverted. Source: OpenCode `snapshot/index.ts` (`limit = 2 * 1024
/// * 1024`).
pub const MAX_UNTRACKED_BYTES: u64 = 2 * 1024 * 1024;

/// Minimum time between two `git gc` runs on one shadow repository (OpenCode: hourly).
pub const GC_INTERVAL: Duration = Duration::from_secs(3600);

/// `git gc --prune=` value: unreachable objects older than this go (OpenCode: `7.days`).
pub const GC_PRUNE: &str = "7.days";

/// A failed snapshot operation.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// A git command failed: the command line (after `git`) and its stderr.
    #[error("git {command} failed: {message}")]
    Git {
        /// Arguments after the global options, space-joined.
        command: String,
        /// Its trimmed stderr (or the exit status when stderr is empty).
        message: String,
    },
    /// A file-system operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, with the path.
        context: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A string that is not a git object id (40 or 64 hex digits) was given as a tree.
    #[error("not a snapshot hash: {0:?}")]
    BadHash(String),
}

/// Why snapshots are off for a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unavailable {
    /// The directory is not inside a git work tree.
    NotGitRepo(PathBuf),
    /// The `git` program could not be run.
    NoGit(String),
    /// `"snapshot": false` in the configuration.
    Disabled,
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unavailable::NotGitRepo(dir) => write!(
                f,
                "snapshots are off: {} is not in a git repository, so file changes are not \
                 tracked and cannot be reverted",
                dir.display()
            ),
            Unavailable::NoGit(why) => write!(
                f,
                "snapshots are off: git could not be run ({why}), so file changes are not \
                 tracked and cannot be reverted"
            ),
            Unavailable::Disabled => write!(f, "snapshots are off (\"snapshot\": false)"),
        }
    }
}

/// Files a step changed: `hash` is the tree before the step, `files` absolute paths
/// (OpenCode's `patch` part).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Patch {
    /// Tree hash the files are restored from on revert.
    pub hash: String,
    /// Absolute paths of the changed files.
    pub files: Vec<PathBuf>,
}

/// How a file differs between two snapshots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeStatus {
    /// Only in the later snapshot.
    Added,
    /// Only in the earlier snapshot.
    Deleted,
    /// In both, with different content or mode.
    Modified,
}

/// One file's change between two snapshots (OpenCode `FileDiff`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChange {
    /// Path relative to the work tree, `/`-separated.
    pub file: String,
    /// Added, deleted or modified.
    pub status: ChangeStatus,
    /// Lines added (0 for binary files).
    pub additions: u64,
    /// Lines deleted (0 for binary files).
    pub deletions: u64,
    /// Git saw binary content (no line counts).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub binary: bool,
    /// This file's part of the unified diff (filled by [`Snapshot::diff_full`] only).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub patch: String,
    /// The file in the later snapshot as `"<mode> <object id>"` (git's raw diff output),
    /// `None` when deleted: two diffs from one snapshot agree on a file when this is equal
    /// (see [`files_between`]). Not serialized.
    #[serde(skip)]
    pub after: Option<String>,
}

/// Relative paths of the files that differ between snapshots `a` and `b`, from the diffs
/// ([`Snapshot::diff`]) of one common snapshot to each: a file only one diff lists differs
/// from the common snapshot on that side only; one both list differs when its mode or
/// content there do. Sorted by path bytes, git's order. No git process: a step's changed
/// files come from the session diff it computes anyway (`first → before the step` was the
/// previous step's).
pub fn files_between(to_a: &[FileChange], to_b: &[FileChange]) -> Vec<String> {
    let mut state: std::collections::BTreeMap<&str, (Option<&FileChange>, Option<&FileChange>)> =
        std::collections::BTreeMap::new();
    for c in to_a {
        state.entry(&c.file).or_default().0 = Some(c);
    }
    for c in to_b {
        state.entry(&c.file).or_default().1 = Some(c);
    }
    state
        .into_iter()
        .filter(|(_, sides)| match sides {
            (Some(a), Some(b)) => {
                a.after != b.after || a.after.as_deref().is_some_and(|s| s.starts_with('?'))
            }
            _ => true,
        })
        .map(|(file, _)| file.to_string())
        .collect()
}

/// The shadow repository of one project (cheap to clone).
#[derive(Debug, Clone)]
pub struct Snapshot {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    git_dir: PathBuf,
    work_tree: PathBuf,
    /// The source repository's `info/exclude` (may not exist).
    source_exclude: PathBuf,
    /// Extra exclude lines (troupe's data directory when it lies inside the project).
    extra_excludes: Vec<String>,
    /// The same paths relative to the work tree, given to every `git add` as exclude
    /// pathspecs (`own_pathspecs`): a `.gitignore` negation (`!*.db`) outranks the
    /// shadow `info/exclude` (git's lowest precedence), a pathspec exclude outranks every rule.
    own_paths: Vec<String>,
    state: Arc<Mutex<RepoState>>,
    /// Staged trees' listings, for diffs without git (shared per git dir).
    known: Arc<std::sync::Mutex<stage::Known>>,
    /// Git processes run on the shadow repository through this handle (and its clones).
    git_runs: std::sync::atomic::AtomicU64,
}

/// Git processes run on shadow repositories by this process (every [`Snapshot`]), for
/// measurements (`troupe-bench` reports them per step).
pub fn git_processes() -> u64 {
    git::GIT_RUNS.load(std::sync::atomic::Ordering::Relaxed)
}

/// The index file's modification time (s, ns), blocking; `None` when it cannot be read (or
/// outside Unix, where nothing is staged).
fn index_mtime(path: &Path) -> Option<(i64, i64)> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path)
            .ok()
            .map(|m| (m.mtime(), m.mtime_nsec()))
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

/// 64-bit FNV-1a of the bytes, as 16 hex digits: a stable name for a work tree's shadow
/// repository (the same path gives the same directory across runs and builds).
pub fn path_hash(path: &Path) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in path.as_os_str().as_encoded_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

fn is_hash(s: &str) -> bool {
    (s.len() == 40 || s.len() == 64) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn check_hash(s: &str) -> Result<(), SnapshotError> {
    if is_hash(s) {
        Ok(())
    } else {
        Err(SnapshotError::BadHash(s.to_string()))
    }
}

impl Snapshot {
    /// The shadow repository for the git work tree containing `directory`, kept under
    /// `<data_dir>/snapshot/`. Runs `git rev-parse` once; creates nothing yet (the first
    /// [`track`](Self::track) initialises the repository).
    ///
    /// Errors: [`Unavailable::NotGitRepo`] when `directory` is not in a git work tree,
    /// [`Unavailable::NoGit`] when git cannot be run.
    ///
    /// `own_files` are files the calling process writes in place that are not the project's
    /// (its store file, `batch --out`, `run -o`): those inside the work tree are excluded like
    /// the data directory, so a snapshot never records them and a revert never rewinds them.
    pub async fn open(
        data_dir: &Path,
        directory: &Path,
        own_files: &[PathBuf],
    ) -> Result<Snapshot, Unavailable> {
        let out = bare_git()
            .arg("-C")
            .arg(directory)
            .args([
                "rev-parse",
                "--path-format=absolute",
                "--show-toplevel",
                "--git-common-dir",
            ])
            .stdout(Stdio::piped())
            .output()
            .await
            .map_err(|e| Unavailable::NoGit(e.to_string()))?;
        if !out.status.success() {
            return Err(Unavailable::NotGitRepo(directory.to_path_buf()));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let mut lines = text.lines();
        let (Some(top), Some(common)) = (lines.next(), lines.next()) else {
            return Err(Unavailable::NotGitRepo(directory.to_path_buf()));
        };
        let work_tree = PathBuf::from(top);
        let common = PathBuf::from(common);
        let snap_root = data_dir.join("snapshot");
        let git_dir = snap_root.join(path_hash(&work_tree));
        // Troupe's own files (the store, the shadow repositories) must never be snapshotted
        // or reverted when the data directory lies inside the project.
        let mut extra_excludes = Vec::new();
        let mut own_paths = Vec::new();
        // Where each path really is (symbolic links and `..` resolved as far as the path
        // exists), so it compares with git's resolved top level; an own file that is a link
        // counts with its target.
        let data_real = resolved(data_dir.to_path_buf()).await;
        let mut own: Vec<(PathBuf, bool)> = vec![(data_real, true)];
        for file in own_files {
            // The file itself may be a link: its directory resolved, its name kept.
            let abs = std::path::absolute(file).unwrap_or_else(|_| file.clone());
            let real = match (abs.parent(), abs.file_name()) {
                (Some(dir), Some(name)) => resolved(dir.to_path_buf()).await.join(name),
                _ => resolved(abs).await,
            };
            if let Ok(target) = tokio::fs::canonicalize(&real).await
                && target != real
            {
                own.push((target, false));
            }
            own.push((real, false));
        }
        for (real, is_dir) in own {
            let Ok(rel) = real.strip_prefix(&work_tree) else {
                continue;
            };
            let rel = if rel.as_os_str().is_empty() {
                if !is_dir {
                    continue;
                }
                // The data directory *is* the work tree: at least the shadow repositories
                // stay out (the store file comes as an own file).
                "snapshot".to_string()
            } else {
                rel.to_string_lossy().into_owned()
            };
            // gitignore has no escape for a line break: such a name gets no exclude line
            // (it would add a rule of its own); the pathspec still leaves it out.
            if !rel.contains(['\n', '\r']) {
                let line = exclude_line(&rel);
                extra_excludes.push(if is_dir { format!("{line}/") } else { line });
            }
            own_paths.push(rel);
        }
        let state = repo_state(&git_dir);
        let known = repo_known(&git_dir);
        Ok(Snapshot {
            inner: Arc::new(Inner {
                source_exclude: common.join("info").join("exclude"),
                known,
                git_dir,
                work_tree,
                extra_excludes,
                own_paths,
                state,
                git_runs: Default::default(),
            }),
        })
    }

    /// The project's work tree (the git top level).
    pub fn work_tree(&self) -> &Path {
        &self.inner.work_tree
    }

    /// The shadow git directory.
    pub fn git_dir(&self) -> &Path {
        &self.inner.git_dir
    }

    /// Git processes this handle and its clones have run on the shadow repository (`init`
    /// and the `rev-parse` of [`open`](Self::open) not counted).
    pub fn git_runs(&self) -> u64 {
        self.inner
            .git_runs
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Snapshots the work tree now and returns the tree hash: the tree `git add --all` and
    /// `git write-tree` give. No git runs when the work tree, the rule and configuration
    /// files and the shadow index match the fingerprint recorded before the last track (see
    /// `fingerprint`: every `lstat` equal, none too recent to trust). Else, when the walk
    /// lists what git would stage, the changed files are hashed and the trees written in
    /// this process (see `stage`; ignore rules are matched in process by the walk, see
    /// `rules`, or else `git check-ignore` is asked about new files).
    /// Else git: `git ls-files --others` (to leave out untracked files over 2 MiB) only when
    /// a walk of the work tree finds a file that large, `add`, and `write-tree` only when
    /// the index's entries differ from those the last tree came from (see
    /// `add_and_write_tree`). Errors: git's, or the shadow repository cannot be written.
    pub async fn track(&self) -> Result<String, SnapshotError> {
        let mut held = self.lock().await?;
        self.ensure_init(&mut held).await?;
        if let Some(tree) = self.unchanged_tree(&held).await {
            let due = held.gc_due;
            drop(held);
            self.maybe_gc(due).await;
            return Ok(tree);
        }
        self.sync_exclude(&mut held).await?;
        let walked = self.fingerprint_walk(&mut held).await;
        let walked = match walked {
            Some(w) if w.stageable && w.largest <= MAX_UNTRACKED_BYTES => {
                match self.stage_in_process(&mut held, w).await {
                    Ok(tree) => {
                        let due = held.gc_due;
                        drop(held);
                        self.maybe_gc(due).await;
                        return Ok(tree);
                    }
                    Err(w) => w,
                }
            }
            w => w,
        };
        // Git reads the index from here on: it must hold what the last stage left.
        self.flush_index(&mut held).await?;
        let may_hold_large = match &walked {
            Some(w) => w.largest > MAX_UNTRACKED_BYTES,
            None => self.may_hold_large_files(&mut held).await,
        };
        let fingerprint = walked.filter(|w| !w.racy).map(|w| w.fingerprint);
        let big = if may_hold_large {
            let untracked = self
                .git(&["ls-files", "--others", "--exclude-standard", "-z"], None)
                .await?;
            self.large_files(split_nul(&untracked).collect()).await?
        } else {
            Vec::new()
        };
        let tree = if big.is_empty() && self.inner.own_paths.is_empty() {
            self.add_and_write_tree(&mut held, &["--", "."], None, fingerprint)
                .await?
        } else {
            let mut spec = b".\0".to_vec();
            for rel in &big {
                spec.extend_from_slice(format!(":(exclude,literal,top){rel}\0").as_bytes());
            }
            for rel in &self.inner.own_paths {
                spec.extend_from_slice(&own_pathspecs(rel));
            }
            self.add_and_write_tree(
                &mut held,
                &["--pathspec-from-file=-", "--pathspec-file-nul"],
                Some(spec),
                fingerprint,
            )
            .await?
        };
        let due = held.gc_due;
        drop(held);
        self.maybe_gc(due).await;
        Ok(tree)
    }

    /// Stages the walked work tree in this process (see `stage`) and records the tree as the
    /// last one, with the walk's fingerprint unless it was racy. With ignore rules, the files
    /// new to the tree are first put to `git check-ignore` (one process, only when there are
    /// any). `Err` gives the walk back when staging gave up (a name git may refuse, a file
    /// too large, an I/O error, git failing): git's own path decides.
    async fn stage_in_process(
        &self,
        held: &mut git::Held,
        walk: fingerprint::Walk,
    ) -> Result<String, Option<fingerprint::Walk>> {
        let previous = held.state.staged.take();
        let (root, git_dir) = (self.inner.work_tree.clone(), self.inner.git_dir.clone());
        let own = Arc::new(self.inner.own_paths.clone());
        // The index stamp, which files are new to the tree (with rules), in one hop.
        let rule_free = walk.rule_free;
        let matched = walk.matched;
        let (walk, previous, index, index_mtime, due, new, mut ignored) = {
            let (root, git_dir, own) = (root.clone(), git_dir.clone(), own.clone());
            tokio::task::spawn_blocking(move || {
                let index = git::read_index_stamp(&git_dir.join("index"));
                let index_mtime = index_mtime(&git_dir.join("index"));
                // The tree the index is behind, by the record every process shares.
                let due = index.as_ref().and_then(|now| git::index_due(&git_dir, now));
                // The last stage's files are the tracked ones while the index is as it left
                // it and no other process staged since; else the index (brought up to the
                // other stage) says what is tracked.
                let tracked = previous.filter(|p| p.tracks_now(index.as_ref(), due));
                // What git said it ignores, under the same rules, is not asked again.
                let known_ignored = tracked
                    .as_ref()
                    .and_then(|p| p.ignored_under(&walk.rules))
                    .cloned()
                    .unwrap_or_default();
                let new = (!rule_free && matched.is_none()).then(|| {
                    stage::new_files(&root, &walk, tracked.as_ref(), &known_ignored, &own)
                });
                (walk, tracked, index, index_mtime, due, new, known_ignored)
            })
            .await
            .map_err(|_| None)?
        };
        let Some(mut index) = index else {
            return Err(Some(walk));
        };
        let mut walk = walk;
        if let Some(assumed) = matched {
            // The walk left out what git ignores with these files tracked: it holds only
            // while they still are (else git stages, and the walk vouches for nothing).
            let holds = match assumed {
                Some(tree) => previous.as_ref().is_some_and(|p| p.tree == tree),
                None => previous.is_none() && index.len() == 0 && due.is_none(),
            };
            if !holds {
                walk.racy = true;
                return Err(Some(walk));
            }
            ignored = std::mem::take(&mut walk.unstaged);
        }
        let (mut seed, mut due) = (None, due);
        if previous.is_none() && due.is_some() {
            // Another stage (another process's, or one this process cannot vouch for) left
            // the index behind: bring it up, so it says what is tracked. Its entries carry
            // no stat data then: nothing to seed from.
            if self.flush_index(held).await.is_err() {
                return Err(Some(walk));
            }
            match self.index_stamp().await {
                Some(now) => index = now,
                None => return Err(Some(walk)),
            }
            due = None;
        } else if previous.is_none() && index.len() > 0 {
            // Git wrote the index last: its entries seed the stage (ids git keeps for files
            // it finds clean), and one staging cannot make (a submodule's commit, kept by
            // git after its `.git` went) leaves the track to git.
            let Some(mtime) = index_mtime else {
                return Err(Some(walk));
            };
            match self
                .git(&["ls-files", "--stage", "--debug", "-z"], None)
                .await
            {
                Ok(out) => match stage::Seed::parse(&out, mtime) {
                    Some(s) => seed = Some(s),
                    None => return Err(Some(walk)),
                },
                Err(_) => return Err(Some(walk)),
            }
        }
        if let Some(new) = new.filter(|n| !n.is_empty()) {
            // A file new to the tree is untracked: git's rules alone decide (`--no-index`)
            // when the last stage's files are the tracked ones; else the index says too.
            let mut input = Vec::new();
            for key in &new {
                // `./`: a leading `:` would start pathspec magic.
                input.extend_from_slice(b"./");
                input.extend_from_slice(key);
                input.push(0);
            }
            let mut args = vec!["check-ignore", "--stdin", "-z"];
            if previous.is_some() {
                args.push("--no-index");
            }
            match self
                .run_git_status(false, &args, Some(input), &[0, 1])
                .await
            {
                Ok(out) => ignored.extend(
                    out.split(|b| *b == 0)
                        .filter(|n| !n.is_empty())
                        .map(|n| n.strip_prefix(b"./").unwrap_or(n).to_vec()),
                ),
                Err(e) => {
                    tracing::debug!(error = %e, "check-ignore failed; staged by git instead");
                    return Err(Some(walk));
                }
            }
        }
        let stamp = index.clone();
        let (walk, result) = tokio::task::spawn_blocking(move || {
            let leave = stage::Leave {
                own: &own,
                ignored: &ignored,
                seed: seed.as_ref(),
            };
            let result =
                stage::stage(&root, &git_dir, &walk, previous, &leave, stamp).and_then(|staged| {
                    if due != Some(staged.tree) {
                        // Recorded before the tree is returned: a process ending now leaves
                        // the next one the tree to bring the index up to (renamed into
                        // place, so never half a name). Without the record the index must
                        // not fall behind: git stages instead.
                        let tmp = git_dir.join(format!("{}.tmp", git::STAGED_FILE));
                        std::fs::write(
                            &tmp,
                            git::staged_record(&staged.tree, &staged.staged.index),
                        )
                        .and_then(|()| std::fs::rename(&tmp, git_dir.join(git::STAGED_FILE)))
                        .map_err(|e| {
                            stage::NotStaged::Io(format!("recording the staged tree: {e}"))
                        })?;
                    }
                    Ok(staged)
                });
            (walk, result)
        })
        .await
        .map_err(|_| None)?;
        let staged = match result {
            Ok(s) => s,
            Err(why) => {
                tracing::debug!(git_dir = %self.inner.git_dir.display(), %why, "staged by git instead");
                return Err(Some(walk));
            }
        };
        if let Ok(mut known) = self.inner.known.lock() {
            known.add(staged.tree, staged.listing, staged.blobs);
        }
        let tree = staged.tree.to_string();
        held.state.staged = Some(staged.staged);
        let fingerprint = (!walk.racy).then(|| {
            let mut f = walk.fingerprint;
            f.extra_excludes = self.inner.extra_excludes.clone();
            Arc::new(f)
        });
        held.state.last_tree = Some(WrittenTree {
            index,
            tree: tree.clone(),
            at: std::time::Instant::now(),
            fingerprint,
        });
        Ok(tree)
    }

    /// The diff between two trees staged in this process, when it needs no git (see
    /// `stage::Known::diff`).
    fn known_diff(&self, from: &str, to: &str) -> Option<Vec<FileChange>> {
        let from = gix_hash::ObjectId::from_hex(from.as_bytes()).ok()?;
        let to = gix_hash::ObjectId::from_hex(to.as_bytes()).ok()?;
        self.inner.known.lock().ok()?.diff(&from, &to)
    }

    /// Absolute paths of the files that differ between two snapshots (one `git diff-tree`,
    /// none when both were staged in this process and differ only in whole files).
    pub async fn changed_files(&self, from: &str, to: &str) -> Result<Vec<PathBuf>, SnapshotError> {
        check_hash(from)?;
        check_hash(to)?;
        if let Some(changes) = self.known_diff(from, to) {
            return Ok(changes
                .into_iter()
                .map(|c| self.inner.work_tree.join(c.file))
                .collect());
        }
        let Some(out) = self
            .compare(
                from,
                to,
                &["diff-tree", "-r", "-z", "--no-renames", "--name-only"],
            )
            .await?
        else {
            return Ok(Vec::new());
        };
        Ok(split_nul(&out)
            .map(|rel| self.inner.work_tree.join(rel))
            .collect())
    }

    /// Per-file status and line counts between two snapshots (one `git diff-tree --raw
    /// --numstat`; none when both were staged in this process and no file changed in place),
    /// sorted by path. `patch` is left empty.
    pub async fn diff(&self, from: &str, to: &str) -> Result<Vec<FileChange>, SnapshotError> {
        check_hash(from)?;
        check_hash(to)?;
        if let Some(changes) = self.known_diff(from, to) {
            return Ok(changes);
        }
        let Some(out) = self
            .compare(
                from,
                to,
                &[
                    "diff-tree",
                    "-r",
                    "-z",
                    "--no-renames",
                    "--raw",
                    "--numstat",
                ],
            )
            .await?
        else {
            return Ok(Vec::new());
        };
        Ok(parse_raw_numstat(&out))
    }

    /// Like [`diff`](Self::diff), with each file's unified diff in `patch` (one more git call).
    pub async fn diff_full(&self, from: &str, to: &str) -> Result<Vec<FileChange>, SnapshotError> {
        let mut changes = self.diff(from, to).await?;
        if changes.is_empty() {
            return Ok(changes);
        }
        let text = self.diff_text(from, to).await?;
        let chunks = split_unified(&text);
        // `git diff` and `git diff-tree` list files in the same (path) order; when the counts
        // differ something is off, and the per-file text is left out rather than misassigned.
        if chunks.len() == changes.len() {
            for (change, chunk) in changes.iter_mut().zip(chunks) {
                change.patch = chunk.to_string();
            }
        }
        Ok(changes)
    }

    /// The unified diff between two snapshots (`git diff`, `a/`/`b/` prefixes, no colour, no
    /// external diff drivers).
    pub async fn diff_text(&self, from: &str, to: &str) -> Result<String, SnapshotError> {
        let Some(out) = self
            .compare(
                from,
                to,
                &[
                    "diff",
                    "--no-color",
                    "--no-ext-diff",
                    "--no-textconv",
                    "--no-renames",
                    "--src-prefix=a/",
                    "--dst-prefix=b/",
                ],
            )
            .await?
        else {
            return Ok(String::new());
        };
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    /// The output of git `command` (`diff` or `diff-tree` with its options) run on the
    /// snapshots `from` and `to` under the lock: `git COMMAND… FROM TO --`. `None` when they
    /// are the same snapshot (nothing differs). Errors: a hash that is not one, git's.
    async fn compare(
        &self,
        from: &str,
        to: &str,
        command: &[&str],
    ) -> Result<Option<Vec<u8>>, SnapshotError> {
        check_hash(from)?;
        check_hash(to)?;
        if from == to {
            return Ok(None);
        }
        let _held = self.lock().await?;
        let mut args = command.to_vec();
        args.extend([from, to, "--"]);
        self.git(&args, None).await.map(Some)
    }

    /// Puts files back as the patches' trees had them: for each file the *first* patch that
    /// lists it decides (OpenCode `revert`); a file the tree did not have is deleted. Files
    /// outside the work tree are skipped, and so are troupe's own files and data directory,
    /// paths with a `.git` component, and names holding U+FFFD (a name that was not UTF-8 is
    /// recorded lossily; acting on it could touch another file). A deletion never
    /// goes through a symbolic link: a file whose directory is now a link (or not a
    /// directory) is left alone. Deletions run first; then a file is restored only where that
    /// destroys nothing the user made since (`clear_for_restore`: no file or link where a
    /// directory was, no non-empty directory where the file was). Returns the relative paths
    /// touched.
    pub async fn revert(&self, patches: &[Patch]) -> Result<Vec<String>, SnapshotError> {
        let mut seen = HashSet::new();
        let mut groups: Vec<(String, Vec<String>)> = Vec::new();
        for patch in patches {
            check_hash(&patch.hash)?;
            for file in &patch.files {
                let Some(rel) = self.relative(file) else {
                    tracing::warn!(file = %file.display(), "revert: file outside the work tree skipped");
                    continue;
                };
                if self.is_own(&rel) || rel.split('/').any(|c| c.eq_ignore_ascii_case(".git")) {
                    // Troupe's own files and data directory, and anything in a `.git`
                    // directory (git's `verify_path` refuses those too): never a project file
                    // to rewind, whatever a patch says.
                    tracing::warn!(file = %file.display(), "revert: not a project file; skipped");
                    continue;
                }
                if rel.contains(char::REPLACEMENT_CHARACTER) {
                    // Names are recorded as text: U+FFFD may stand for bytes that were not
                    // UTF-8, and the file it names may be another one (the user's).
                    tracing::warn!(file = %file.display(), "revert: a name that may not be the recorded one skipped");
                    continue;
                }
                if !seen.insert(rel.clone()) {
                    continue;
                }
                match groups.iter_mut().find(|(h, _)| *h == patch.hash) {
                    Some((_, files)) => files.push(rel),
                    None => groups.push((patch.hash.clone(), vec![rel])),
                }
            }
        }
        let mut held = self.lock().await?;
        self.ensure_init(&mut held).await?;
        // `checkout` reads and writes the index.
        self.flush_index(&mut held).await?;
        let mut restores = Vec::new();
        let mut deletes = Vec::new();
        for (hash, files) in groups {
            let listing = self
                .git(
                    &["ls-tree", "-r", "-z", "--name-only", "--full-tree", &hash],
                    None,
                )
                .await?;
            let in_tree: HashSet<String> = split_nul(&listing).collect();
            let (restore, delete): (Vec<String>, Vec<String>) =
                files.into_iter().partition(|f| in_tree.contains(f));
            deletes.extend(delete);
            restores.push((hash, restore));
        }
        // Deletions first: they clear the way for restores (a step that turned the file `x`
        // into a directory `x/` with `x/y`).
        let root = self.inner.work_tree.clone();
        let names = deletes.clone();
        tokio::task::spawn_blocking(move || {
            names.iter().try_for_each(|rel| delete_inside(&root, rel))
        })
        .await
        .map_err(join_err("deleting files a revert removes"))??;
        let mut touched = Vec::new();
        for (hash, restore) in restores {
            let root = self.inner.work_tree.clone();
            let restore: Vec<String> = tokio::task::spawn_blocking(move || {
                restore
                    .into_iter()
                    .filter(|rel| clear_for_restore(&root, rel))
                    .collect()
            })
            .await
            .map_err(join_err("checking where a revert restores"))?;
            if restore.is_empty() {
                continue;
            }
            let mut spec = Vec::new();
            for rel in &restore {
                spec.extend_from_slice(rel.as_bytes());
                spec.push(0);
            }
            self.run_git(
                true,
                &[
                    "checkout",
                    &hash,
                    "--pathspec-from-file=-",
                    "--pathspec-file-nul",
                ],
                Some(spec),
            )
            .await?;
            touched.extend(restore);
        }
        touched.extend(deletes);
        Ok(touched)
    }

    /// Makes `files` (absolute) match the tree `hash` again: restored, or deleted when the tree
    /// did not have them. Used by unrevert with the snapshot taken before the revert.
    pub async fn restore(
        &self,
        hash: &str,
        files: &[PathBuf],
    ) -> Result<Vec<String>, SnapshotError> {
        self.revert(&[Patch {
            hash: hash.to_string(),
            files: files.to_vec(),
        }])
        .await
    }

    /// Runs `git gc --prune=7.days` now (normally scheduled by [`track`](Self::track)).
    pub async fn gc(&self) -> Result<(), SnapshotError> {
        let mut held = self.lock().await?;
        self.ensure_init(&mut held).await?;
        // The index then holds the last staged tree: its objects are reachable.
        self.flush_index(&mut held).await?;
        Self::forget_tree(&mut held);
        self.git(&["gc", "--quiet", &format!("--prune={GC_PRUNE}")], None)
            .await?;
        Ok(())
    }

    /// Whether `rel` (relative, `/`-separated) is one of troupe's own paths or lies under one.
    fn is_own(&self, rel: &str) -> bool {
        stage::is_own(rel.as_bytes(), &self.inner.own_paths)
    }

    /// Relative `/`-separated path of an absolute path inside the work tree.
    fn relative(&self, file: &Path) -> Option<String> {
        let rel = file.strip_prefix(&self.inner.work_tree).ok()?;
        if rel.as_os_str().is_empty() {
            return None;
        }
        let parts: Vec<String> = rel
            .components()
            .map(|c| match c {
                std::path::Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
                _ => None,
            })
            .collect::<Option<_>>()?;
        Some(parts.join("/"))
    }
}

/// Whether `git checkout` may put `rel` back under `root` without destroying something the
/// user made since: every directory on the way is a directory or missing (git makes it), and
/// `rel` itself is missing, a file or a link (replaced; a link's target is never written).
/// A file or link where a directory was, or a non-empty directory where the file was: `false`
/// (logged; git's checkout would remove them, with whatever ignored files they hold). An
/// empty directory in the file's place is removed. Blocking.
fn clear_for_restore(root: &Path, rel: &str) -> bool {
    let path = root.join(rel);
    let blocked = |why: &str| {
        tracing::warn!(path = %path.display(), "revert: {why}; not restored");
        false
    };
    let mut dir = root.to_path_buf();
    let mut parts: Vec<&str> = rel.split('/').filter(|p| !p.is_empty()).collect();
    parts.pop();
    for part in parts {
        dir.push(part);
        match std::fs::symlink_metadata(&dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return blocked("a file or symbolic link is where a directory was"),
            Err(_) => return true,
        }
    }
    match std::fs::symlink_metadata(&path) {
        Ok(m) if m.is_dir() => {
            std::fs::remove_dir(&path).is_ok() || blocked("a directory is where the file was")
        }
        _ => true,
    }
}

/// Deletes `rel` (a `/`-separated path inside `root`) when it is a file or symbolic link,
/// walking its directories without following symbolic links (`openat` with `O_NOFOLLOW` from
/// `root` down, then `unlinkat`), so a directory swapped for a link to elsewhere never has
/// anything deleted through it. A missing file, a link or non-directory on the way, or a
/// directory in the file's place: nothing deleted (logged). Blocking.
///
/// Errors: any other I/O error, with the path.
fn delete_inside(root: &Path, rel: &str) -> Result<(), SnapshotError> {
    let path = root.join(rel);
    let fail = |e: std::io::Error| io_err(format!("deleting {}", path.display()))(e);
    let skip = |why: &str| {
        tracing::warn!(path = %path.display(), "revert: {why}; left alone");
        Ok(())
    };
    let mut parts: Vec<&str> = rel.split('/').filter(|p| !p.is_empty()).collect();
    let Some(name) = parts.pop() else {
        return Ok(());
    };
    #[cfg(target_os = "linux")]
    {
        use rustix::fs::{AtFlags, FileType, Mode, OFlags};
        use rustix::io::Errno;
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        // The work tree itself may be reached through a link; below it nothing is followed.
        let mut dir = rustix::fs::open(root, flags - OFlags::NOFOLLOW, Mode::empty())
            .map_err(|e| fail(e.into()))?;
        for part in parts {
            dir = match rustix::fs::openat(&dir, part, flags, Mode::empty()) {
                Ok(d) => d,
                Err(Errno::NOENT) => return Ok(()),
                Err(Errno::LOOP | Errno::NOTDIR) => {
                    return skip("a symbolic link or file is where a directory was");
                }
                Err(e) => return Err(fail(e.into())),
            };
        }
        match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => {
                skip("a directory is where a file to delete was")
            }
            Ok(_) => match rustix::fs::unlinkat(&dir, name, AtFlags::empty()) {
                Ok(()) | Err(Errno::NOENT) => Ok(()),
                Err(e) => Err(fail(e.into())),
            },
            Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(fail(e.into())),
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let mut dir = root.to_path_buf();
        for part in parts {
            dir.push(part);
            match std::fs::symlink_metadata(&dir) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => return skip("a symbolic link or file is where a directory was"),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(fail(e)),
            }
        }
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => skip("a directory is where a file to delete was"),
            Ok(_) => match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(fail(e)),
                _ => Ok(()),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(fail(e)),
        }
    }
}

/// `path` made absolute with symbolic links and `..` resolved as far as it exists: the
/// longest existing prefix canonicalized, the rest appended with `.` dropped and `..`
/// dropping the component before it (nothing below a missing directory can be a link).
async fn resolved(path: PathBuf) -> PathBuf {
    use std::path::Component;
    let abs = std::path::absolute(&path).unwrap_or(path);
    let parts: Vec<Component> = abs.components().collect();
    for k in (1..=parts.len()).rev() {
        let prefix: PathBuf = parts[..k].iter().collect();
        if let Ok(mut out) = tokio::fs::canonicalize(&prefix).await {
            for part in &parts[k..] {
                match part {
                    Component::ParentDir => {
                        out.pop();
                    }
                    Component::Normal(name) => out.push(name),
                    _ => {}
                }
            }
            return out;
        }
    }
    abs
}
