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
//! All git work runs in child processes (`tokio::process`); nothing here blocks a tokio
//! worker thread except `stat` calls batched into one `spawn_blocking`.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, LazyLock, Mutex as StdMutex, Weak};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;
use tokio::sync::{Mutex, OwnedMutexGuard};

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

/// Configuration passed to every git call on a shadow repository (OpenCode sets the same four
/// keys at init; passing them per call also covers repositories made by older versions).
/// `gc.auto=0`: gc runs only on our own schedule, never inside a step's `git add`.
const GIT_CONFIG: &[&str] = &[
    "-c",
    "core.autocrlf=false",
    "-c",
    "core.longpaths=true",
    "-c",
    "core.symlinks=true",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.quotepath=false",
    "-c",
    "gc.auto=0",
    "-c",
    "maintenance.auto=false",
];

/// Environment variables that would redirect git away from the shadow repository (set, for
/// example, when troupe runs inside a git hook).
const GIT_ENV_REMOVED: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
    "GIT_LITERAL_PATHSPECS",
    "GIT_GLOB_PATHSPECS",
    "GIT_NOGLOB_PATHSPECS",
    "GIT_ICASE_PATHSPECS",
];

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
}

/// Per-git-dir state shared by every [`Snapshot`] of one shadow repository in this process.
#[derive(Debug, Default)]
struct RepoState {
    /// `git init` done (or found done) in this process.
    initialized: bool,
    /// Last content written to the shadow `info/exclude`.
    exclude_written: Option<String>,
}

type Locks = HashMap<PathBuf, Weak<Mutex<RepoState>>>;

/// One async mutex per shadow git dir, so two sessions in one project never run git on the
/// same index at once. Weak entries: a repository nobody uses any more frees its state.
static LOCKS: LazyLock<StdMutex<Locks>> = LazyLock::new(|| StdMutex::new(HashMap::new()));

fn repo_state(git_dir: &Path) -> Arc<Mutex<RepoState>> {
    // The std mutex is held for a map lookup only (no await inside).
    let mut map = LOCKS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(state) = map.get(git_dir).and_then(Weak::upgrade) {
        return state;
    }
    map.retain(|_, w| w.strong_count() > 0);
    let state = Arc::new(Mutex::new(RepoState::default()));
    map.insert(git_dir.to_path_buf(), Arc::downgrade(&state));
    state
}

/// Held while git runs on a shadow repository: the in-process mutex and the cross-process
/// file lock (`<git dir>/troupe.lock`, released when the file closes).
struct Held {
    state: OwnedMutexGuard<RepoState>,
    _file: std::fs::File,
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
    state: Arc<Mutex<RepoState>>,
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

fn io_err(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> SnapshotError {
    let context = context.into();
    move |source| SnapshotError::Io { context, source }
}

/// Escapes a relative path as one literal, anchored gitignore line.
fn exclude_line(rel: &str) -> String {
    let mut out = String::with_capacity(rel.len() + 2);
    out.push('/');
    for c in rel.chars() {
        if matches!(c, '*' | '?' | '[' | '\\' | '!' | '#' | ' ') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn split_nul(bytes: &[u8]) -> impl Iterator<Item = String> + '_ {
    bytes
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
}

impl Snapshot {
    /// The shadow repository for the git work tree containing `directory`, kept under
    /// `<data_dir>/snapshot/`. Runs `git rev-parse` once; creates nothing yet (the first
    /// [`track`](Self::track) initialises the repository).
    ///
    /// Errors: [`Unavailable::NotGitRepo`] when `directory` is not in a git work tree,
    /// [`Unavailable::NoGit`] when git cannot be run.
    pub async fn open(data_dir: &Path, directory: &Path) -> Result<Snapshot, Unavailable> {
        let out = Command::new("git")
            .arg("-C")
            .arg(directory)
            .args([
                "rev-parse",
                "--path-format=absolute",
                "--show-toplevel",
                "--git-common-dir",
            ])
            .envs_removed()
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
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
        let data_abs = std::path::absolute(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
        if let Ok(rel) = data_abs.strip_prefix(&work_tree)
            && !rel.as_os_str().is_empty()
        {
            extra_excludes.push(format!("{}/", exclude_line(&rel.to_string_lossy())));
        }
        let state = repo_state(&git_dir);
        Ok(Snapshot {
            inner: Arc::new(Inner {
                source_exclude: common.join("info").join("exclude"),
                git_dir,
                work_tree,
                extra_excludes,
                state,
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

    /// Snapshots the work tree now and returns the tree hash. Three git processes:
    /// `ls-files --others` (to leave out untracked files over 2 MiB), `add -A`, `write-tree`.
    pub async fn track(&self) -> Result<String, SnapshotError> {
        let mut held = self.lock().await?;
        self.ensure_init(&mut held).await?;
        self.sync_exclude(&mut held).await?;
        let untracked = self
            .git(&["ls-files", "--others", "--exclude-standard", "-z"], None)
            .await?;
        let untracked: Vec<String> = split_nul(&untracked).collect();
        let big = self.large_files(untracked).await?;
        if big.is_empty() {
            self.git(&["add", "--all", "--", "."], None).await?;
        } else {
            let mut spec = b".\0".to_vec();
            for rel in &big {
                spec.extend_from_slice(format!(":(exclude,literal,top){rel}\0").as_bytes());
            }
            self.git(
                &[
                    "add",
                    "--all",
                    "--pathspec-from-file=-",
                    "--pathspec-file-nul",
                ],
                Some(spec),
            )
            .await?;
        }
        let tree = self.git(&["write-tree"], None).await?;
        let tree = String::from_utf8_lossy(&tree).trim().to_string();
        drop(held);
        if !is_hash(&tree) {
            return Err(SnapshotError::Git {
                command: "write-tree".into(),
                message: format!("unexpected output {tree:?}"),
            });
        }
        self.maybe_gc().await;
        Ok(tree)
    }

    /// Absolute paths of the files that differ between two snapshots (one `git diff-tree`).
    pub async fn changed_files(&self, from: &str, to: &str) -> Result<Vec<PathBuf>, SnapshotError> {
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
    /// --numstat`), sorted by path. `patch` is left empty.
    pub async fn diff(&self, from: &str, to: &str) -> Result<Vec<FileChange>, SnapshotError> {
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
    /// outside the work tree are skipped. Returns the relative paths touched.
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
        let mut touched = Vec::new();
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
            if !restore.is_empty() {
                let mut spec = Vec::new();
                for rel in &restore {
                    spec.extend_from_slice(rel.as_bytes());
                    spec.push(0);
                }
                self.git_literal(
                    &[
                        "checkout",
                        &hash,
                        "--pathspec-from-file=-",
                        "--pathspec-file-nul",
                    ],
                    Some(spec),
                )
                .await?;
            }
            for rel in &delete {
                let path = self.inner.work_tree.join(rel);
                match tokio::fs::symlink_metadata(&path).await {
                    Ok(meta) if !meta.is_dir() => {
                        tokio::fs::remove_file(&path)
                            .await
                            .map_err(io_err(format!("deleting {}", path.display())))?;
                    }
                    Ok(_) => tracing::warn!(
                        path = %path.display(),
                        "revert: a directory is where a file to delete was; left alone"
                    ),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(io_err(format!("reading {}", path.display()))(e)),
                }
            }
            touched.extend(restore);
            touched.extend(delete);
        }
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
        self.git(&["gc", "--quiet", &format!("--prune={GC_PRUNE}")], None)
            .await?;
        Ok(())
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

    async fn lock(&self) -> Result<Held, SnapshotError> {
        let state = self.inner.state.clone().lock_owned().await;
        let dir = self.inner.git_dir.clone();
        let file = tokio::task::spawn_blocking(move || -> Result<std::fs::File, SnapshotError> {
            std::fs::create_dir_all(&dir).map_err(io_err(format!("creating {}", dir.display())))?;
            let path = dir.join("troupe.lock");
            let file = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
                .map_err(io_err(format!("opening {}", path.display())))?;
            file.lock()
                .map_err(io_err(format!("locking {}", path.display())))?;
            Ok(file)
        })
        .await
        .map_err(|e| SnapshotError::Io {
            context: "waiting for the snapshot lock".into(),
            source: std::io::Error::other(e.to_string()),
        })??;
        Ok(Held { state, _file: file })
    }

    async fn ensure_init(&self, held: &mut Held) -> Result<(), SnapshotError> {
        if held.state.initialized {
            return Ok(());
        }
        let git_dir = &self.inner.git_dir;
        if tokio::fs::metadata(git_dir.join("HEAD")).await.is_err() {
            let out = Command::new("git")
                .args(["init", "--quiet"])
                .envs_removed()
                .env("GIT_DIR", git_dir)
                .current_dir(&self.inner.work_tree)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .kill_on_drop(true)
                .output()
                .await
                .map_err(io_err("running git init"))?;
            if !out.status.success() {
                return Err(SnapshotError::Git {
                    command: "init".into(),
                    message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
                });
            }
            // A new repository counts as freshly collected.
            let stamp = git_dir.join("troupe-gc");
            tokio::fs::write(&stamp, b"")
                .await
                .map_err(io_err(format!("writing {}", stamp.display())))?;
        }
        // A git process killed mid-write leaves its lock file behind; under our own lock
        // nobody else can be using this index, so it is stale.
        let _ = tokio::fs::remove_file(git_dir.join("index.lock")).await;
        held.state.initialized = true;
        Ok(())
    }

    /// Copies the source repository's `info/exclude` (plus troupe's own exclusions) into the
    /// shadow repository when it changed.
    async fn sync_exclude(&self, held: &mut Held) -> Result<(), SnapshotError> {
        let mut content: String = tokio::fs::read_to_string(&self.inner.source_exclude)
            .await
            .unwrap_or_default();
        if !content.is_empty() && !content.ends_with('\n') {
            content.push('\n');
        }
        for line in &self.inner.extra_excludes {
            content.push_str(line);
            content.push('\n');
        }
        if held.state.exclude_written.as_deref() == Some(content.as_str()) {
            return Ok(());
        }
        let info = self.inner.git_dir.join("info");
        tokio::fs::create_dir_all(&info)
            .await
            .map_err(io_err(format!("creating {}", info.display())))?;
        let path = info.join("exclude");
        let current = tokio::fs::read_to_string(&path).await.ok();
        if current.as_deref() != Some(content.as_str()) {
            tokio::fs::write(&path, content.as_bytes())
                .await
                .map_err(io_err(format!("writing {}", path.display())))?;
        }
        held.state.exclude_written = Some(content);
        Ok(())
    }

    /// The untracked files (relative paths) over [`MAX_UNTRACKED_BYTES`], stat'ed in one
    /// blocking task.
    async fn large_files(&self, untracked: Vec<String>) -> Result<Vec<String>, SnapshotError> {
        if untracked.is_empty() {
            return Ok(Vec::new());
        }
        let root = self.inner.work_tree.clone();
        tokio::task::spawn_blocking(move || {
            untracked
                .into_iter()
                .filter(|rel| {
                    std::fs::symlink_metadata(root.join(rel))
                        .map(|m| m.is_file() && m.len() > MAX_UNTRACKED_BYTES)
                        .unwrap_or(false)
                })
                .collect()
        })
        .await
        .map_err(|e| SnapshotError::Io {
            context: "checking untracked file sizes".into(),
            source: std::io::Error::other(e.to_string()),
        })
    }

    async fn maybe_gc(&self) {
        let stamp = self.inner.git_dir.join("troupe-gc");
        let due = match tokio::fs::metadata(&stamp).await.and_then(|m| m.modified()) {
            Ok(t) => SystemTime::now()
                .duration_since(t)
                .is_ok_and(|age| age >= GC_INTERVAL),
            Err(_) => true,
        };
        if !due {
            return;
        }
        // Touch first so concurrent steps do not all start a gc.
        if let Err(e) = tokio::fs::write(&stamp, b"").await {
            tracing::warn!(error = %e, "snapshot gc stamp not written; gc skipped");
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            if let Err(e) = this.gc().await {
                tracing::warn!(error = %e, "snapshot gc failed");
            }
        });
    }

    async fn git(&self, args: &[&str], stdin: Option<Vec<u8>>) -> Result<Vec<u8>, SnapshotError> {
        self.run_git(false, args, stdin).await
    }

    async fn git_literal(
        &self,
        args: &[&str],
        stdin: Option<Vec<u8>>,
    ) -> Result<Vec<u8>, SnapshotError> {
        self.run_git(true, args, stdin).await
    }

    async fn run_git(
        &self,
        literal: bool,
        args: &[&str],
        stdin: Option<Vec<u8>>,
    ) -> Result<Vec<u8>, SnapshotError> {
        let mut cmd = Command::new("git");
        cmd.arg("--git-dir")
            .arg(&self.inner.git_dir)
            .arg("--work-tree")
            .arg(&self.inner.work_tree);
        if literal {
            cmd.arg("--literal-pathspecs");
        }
        cmd.args(GIT_CONFIG)
            .args(args)
            .envs_removed()
            .env("GIT_TERMINAL_PROMPT", "0")
            .current_dir(&self.inner.work_tree)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(io_err("running git"))?;
        let writer = match (stdin, child.stdin.take()) {
            (Some(bytes), Some(mut pipe)) => Some(tokio::spawn(async move {
                let r = pipe.write_all(&bytes).await;
                drop(pipe);
                r
            })),
            _ => None,
        };
        let out = child
            .wait_with_output()
            .await
            .map_err(io_err("waiting for git"))?;
        if let Some(w) = writer {
            // A write error (git closed stdin early) shows up as git's own failure below.
            let _ = w.await;
        }
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
            return Err(SnapshotError::Git {
                command: args.join(" "),
                message: if stderr.is_empty() {
                    out.status.to_string()
                } else {
                    stderr
                },
            });
        }
        Ok(out.stdout)
    }
}

/// Removes the git environment variables that would point a command elsewhere.
trait EnvsRemoved {
    fn envs_removed(&mut self) -> &mut Self;
}

impl EnvsRemoved for Command {
    fn envs_removed(&mut self) -> &mut Self {
        for var in GIT_ENV_REMOVED {
            self.env_remove(var);
        }
        self
    }
}

/// Parses `git diff-tree -r -z --raw --numstat` output: first one raw record per file
/// (`:<mode> <mode> <sha> <sha> <status>\0<path>\0`), then one numstat record per file
/// (`<added>\t<deleted>\t<path>\0`, `-\t-\t` for binary files).
fn parse_raw_numstat(out: &[u8]) -> Vec<FileChange> {
    let fields: Vec<String> = split_nul(out).collect();
    let mut changes: Vec<FileChange> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut i = 0;
    while i < fields.len() {
        let field = &fields[i];
        if let Some(raw) = field.strip_prefix(':') {
            let status = match raw.split(' ').nth(4).and_then(|s| s.chars().next()) {
                Some('A') => ChangeStatus::Added,
                Some('D') => ChangeStatus::Deleted,
                _ => ChangeStatus::Modified,
            };
            let Some(path) = fields.get(i + 1) else { break };
            index.insert(path.clone(), changes.len());
            changes.push(FileChange {
                file: path.clone(),
                status,
                additions: 0,
                deletions: 0,
                binary: false,
                patch: String::new(),
            });
            i += 2;
            continue;
        }
        let mut parts = field.splitn(3, '\t');
        if let (Some(a), Some(d), Some(path)) = (parts.next(), parts.next(), parts.next())
            && let Some(&at) = index.get(path)
        {
            let c = &mut changes[at];
            match (a.parse::<u64>(), d.parse::<u64>()) {
                (Ok(a), Ok(d)) => {
                    c.additions = a;
                    c.deletions = d;
                }
                _ => c.binary = true,
            }
        }
        i += 1;
    }
    changes
}

/// Splits a unified diff into per-file chunks (each starting at a `diff --git ` line).
fn split_unified(text: &str) -> Vec<&str> {
    let mut starts: Vec<usize> = Vec::new();
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if line.starts_with("diff --git ") {
            starts.push(offset);
        }
        offset += line.len();
    }
    let mut chunks = Vec::with_capacity(starts.len());
    for (k, &s) in starts.iter().enumerate() {
        let e = starts.get(k + 1).copied().unwrap_or(text.len());
        chunks.push(&text[s..e]);
    }
    chunks
}
