//! The shadow repository's git plumbing behind [`Snapshot`]'s public operations: the
//! per-repository lock (an async mutex in this process plus a file lock between processes),
//! `git init` on first use, the copied `info/exclude`, the size filter for untracked files,
//! the scheduled `git gc`, running one git process with the shadow repository's options and
//! a clean environment, and parsing git's `-z` output.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex as StdMutex, Weak};
use std::time::{Duration, Instant, SystemTime};

use tokio::io::AsyncWriteExt;
use tokio::process::Command;
use tokio::sync::{Mutex, OwnedMutexGuard};

use crate::fingerprint::{Fingerprint, Ignored, NoFingerprint};
use crate::rules::RuleCache;
use crate::stage::{Known, Staged};
use crate::{ChangeStatus, FileChange, GC_INTERVAL, MAX_UNTRACKED_BYTES, Snapshot, SnapshotError};

/// Configuration passed to every git call on a shadow repository (OpenCode sets the same four
/// keys at init; passing them per call also covers repositories made by older versions).
/// `gc.auto=0`: gc runs only on our own schedule, never inside a step's `git add`.
/// `index.skipHash=false` (a user's `feature.manyFiles` turns it on): the shadow index keeps
/// its checksum, which tells a track whether the index changed since its last tree.
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
    "-c",
    "index.skipHash=false",
    // No hook of the user's (a global `core.hooksPath`) runs on the shadow repository: a
    // failing `post-checkout` made a revert fail half done.
    "-c",
    "core.hooksPath=/dev/null",
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

/// File in a shadow git dir naming the last tree staged in process while the index has not
/// caught up (`flush_index`), with the index's stamp then: `<tree> <length> <tail>` (hex).
/// Shared by every process on the repository (read under its lock), so one that ends, or
/// another that stages meanwhile, leaves the next the tree the index is behind.
pub(crate) const STAGED_FILE: &str = "troupe-staged";

/// The record of [`STAGED_FILE`] for `tree` staged against the index `stamp`.
pub(crate) fn staged_record(tree: &gix_hash::ObjectId, stamp: &IndexStamp) -> String {
    let tail: String = stamp.tail.iter().map(|b| format!("{b:02x}")).collect();
    format!("{tree} {} {tail}\n", stamp.len)
}

/// The tree the index at `git_dir` is behind (blocking): the [`STAGED_FILE`] record when it
/// was written against the index as it is now (`now`); a record the index has moved past
/// (git wrote it since) is stale and removed.
pub(crate) fn index_due(git_dir: &Path, now: &IndexStamp) -> Option<gix_hash::ObjectId> {
    let path = git_dir.join(STAGED_FILE);
    let text = std::fs::read_to_string(&path).ok()?;
    let mut fields = text.split_whitespace();
    let tree = gix_hash::ObjectId::from_hex(fields.next()?.as_bytes()).ok();
    if let Some(tree) = tree
        && fields.next().and_then(|l| l.parse::<u64>().ok()) == Some(now.len)
        && fields.next() == Some(staged_record(&tree, now).split(' ').nth(2)?.trim())
    {
        return Some(tree);
    }
    let _ = std::fs::remove_file(path);
    None
}

/// Git processes run by [`Snapshot::run_git`] in this process ([`crate::git_processes`]).
pub(crate) static GIT_RUNS: AtomicU64 = AtomicU64::new(0);

/// Per-git-dir state shared by every [`Snapshot`] of one shadow repository in this process.
#[derive(Debug, Default)]
pub(crate) struct RepoState {
    /// `git init` done (or found done) in this process.
    initialized: bool,
    /// Last content written to the shadow `info/exclude`.
    exclude_written: Option<Vec<u8>>,
    /// The last tree `git write-tree` wrote here and the index it was written from.
    pub(crate) last_tree: Option<WrittenTree>,
    /// A size walk of the work tree met more than [`WALK_LIMIT`] files: ask git instead.
    too_many_to_walk: bool,
    /// What git's rules ignore, and whether git listed it under the rule files' current
    /// stat (`false`: only a hint of which directories not to walk).
    pub(crate) ignored: Option<(Ignored, bool)>,
    /// Why this work tree gets no fingerprints, when that lasts.
    pub(crate) no_fingerprint: Option<NoFingerprint>,
    /// The work tree is on a local file system with trustworthy timestamps (checked once).
    pub(crate) local_fs: Option<bool>,
    /// The index's stamp after this process's last `git add` (and `write-tree`): any other
    /// stamp means another writer (a revert's checkout, another process).
    pub(crate) index_written: Option<IndexStamp>,
    /// What the last in-process stage saw (`stage`), reused by the next.
    pub(crate) staged: Option<Staged>,
    /// Rule files parsed by walks that match git's ignore rules in process (`rules`).
    pub(crate) rule_cache: RuleCache,
}

/// Most files a size walk of the work tree stats before giving up for git's `ls-files`
/// (break-even measured on a 2-core VM: ~1 µs per file walked against ~1.3 ms of CPU for the
/// git process, which lists untracked names without stat'ing tracked files).
pub(crate) const WALK_LIMIT: usize = 2_000;

/// What a size walk of the work tree found.
enum Walked {
    /// Every file it saw is at most [`MAX_UNTRACKED_BYTES`].
    NoLargeFile,
    /// A file over the limit, or an error: git decides.
    Unsure,
    /// More than [`WALK_LIMIT`] files.
    TooMany,
}

/// A tree written from the shadow index (or staged in process, the index untouched), with
/// the index's fingerprint at that moment.
#[derive(Debug)]
pub(crate) struct WrittenTree {
    pub(crate) index: IndexStamp,
    pub(crate) tree: String,
    pub(crate) at: Instant,
    /// What the work tree looked like just before the `git add` this tree came from.
    pub(crate) fingerprint: Option<Arc<Fingerprint>>,
}

/// An index file's length and its last 32 bytes. A git index ends with the hash of all its
/// content (SHA-1, 20 bytes, or SHA-256, 32: gitformat-index(5), "Index checksum"), so equal
/// stamps mean equal content, and the same index gives the same tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IndexStamp {
    len: u64,
    tail: [u8; 32],
}

impl IndexStamp {
    /// The index file's length in bytes (0: no index yet).
    pub(crate) fn len(&self) -> u64 {
        self.len
    }
}

/// How long a written tree is reused for an unchanged index without asking git again: well
/// under [`GC_PRUNE`](crate::GC_PRUNE) (7 days), so the tree's objects cannot have been
/// collected meanwhile (git's own `write-tree` checks that they still exist).
const TREE_REUSE: Duration = Duration::from_secs(3600);

type Locks = HashMap<PathBuf, Weak<Mutex<RepoState>>>;

/// Per shadow git dir, what this process knows of its staged trees (`stage::Known`), behind
/// a std mutex: a diff reads it without taking the repository's lock.
static KNOWN: LazyLock<StdMutex<HashMap<PathBuf, Weak<StdMutex<Known>>>>> =
    LazyLock::new(|| StdMutex::new(HashMap::new()));

/// The [`Known`] of the shadow repository at `git_dir`, created on first use.
pub(crate) fn repo_known(git_dir: &Path) -> Arc<StdMutex<Known>> {
    let mut map = KNOWN.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(known) = map.get(git_dir).and_then(Weak::upgrade) {
        return known;
    }
    map.retain(|_, w| w.strong_count() > 0);
    let known = Arc::new(StdMutex::new(Known::default()));
    map.insert(git_dir.to_path_buf(), Arc::downgrade(&known));
    known
}

/// One async mutex per shadow git dir, so two sessions in one project never run git on the
/// same index at once. Weak entries: a repository nobody uses any more frees its state.
static LOCKS: LazyLock<StdMutex<Locks>> = LazyLock::new(|| StdMutex::new(HashMap::new()));

/// The shared state of the shadow repository at `git_dir`, created on first use.
pub(crate) fn repo_state(git_dir: &Path) -> Arc<Mutex<RepoState>> {
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
pub(crate) struct Held {
    pub(crate) state: OwnedMutexGuard<RepoState>,
    _file: std::fs::File,
    /// The `troupe-gc` stamp was [`GC_INTERVAL`] old (or missing) when the lock was taken.
    pub(crate) gc_due: bool,
}

/// Maps an I/O error to [`SnapshotError::Io`] with `context` (what was done, with the path).
pub(crate) fn io_err(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> SnapshotError {
    let context = context.into();
    move |source| SnapshotError::Io { context, source }
}

/// Maps a failed blocking task (it panicked or was cancelled) to [`SnapshotError::Io`] with
/// `context` (what the task was doing).
pub(crate) fn join_err(
    context: &'static str,
) -> impl FnOnce(tokio::task::JoinError) -> SnapshotError {
    move |e| SnapshotError::Io {
        context: context.into(),
        source: std::io::Error::other(e.to_string()),
    }
}

/// The two NUL-terminated `git add` pathspecs that leave `rel` (a path relative to the top
/// level) and everything under it out, whatever the ignore rules say: `:(exclude,top,glob)`
/// with every byte matched literally. The *first* byte goes in a bracket expression
/// (`[\c]`): git reports an ignored path as an error of `git add` ("The following paths are
/// ignored…") when a pathspec's part before its first wildcard names that path or runs
/// through it (`exclude_matches_pathspec` in git's dir.c), exclude magic or not; with the
/// wildcard first, that part is empty (an own file inside an ignored `build/` broke every
/// track while the last byte was the bracketed one).
pub(crate) fn own_pathspecs(rel: &str) -> Vec<u8> {
    let bytes = rel.as_bytes();
    let Some((first, rest)) = bytes.split_first() else {
        return Vec::new();
    };
    let mut pattern = Vec::with_capacity(2 * bytes.len() + 4);
    pattern.extend_from_slice(b"[\\");
    pattern.push(*first);
    pattern.push(b']');
    for b in rest {
        if matches!(b, b'*' | b'?' | b'[' | b']' | b'\\') {
            pattern.push(b'\\');
        }
        pattern.push(*b);
    }
    let mut out = Vec::with_capacity(2 * pattern.len() + 48);
    for suffix in [&b""[..], b"/**"] {
        out.extend_from_slice(b":(exclude,top,glob)");
        out.extend_from_slice(&pattern);
        out.extend_from_slice(suffix);
        out.push(0);
    }
    out
}

/// Escapes a relative path as one literal, anchored gitignore line.
pub(crate) fn exclude_line(rel: &str) -> String {
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

/// The [`IndexStamp`] of the index file at `path` (blocking): length 0 and zeros when there
/// is no index yet; `None` when it cannot be read, is too short, or carries no checksum
/// (`index.skipHash` writes zeros), so nothing is reused.
pub(crate) fn read_index_stamp(path: &Path) -> Option<IndexStamp> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Some(IndexStamp {
                len: 0,
                tail: [0; 32],
            });
        }
        Err(_) => return None,
    };
    let len = file.metadata().ok()?.len();
    if len < 64 {
        return None;
    }
    file.seek(SeekFrom::Start(len - 32)).ok()?;
    let mut tail = [0u8; 32];
    file.read_exact(&mut tail).ok()?;
    if tail[12..].iter().all(|b| *b == 0) {
        return None;
    }
    Some(IndexStamp { len, tail })
}

/// The non-empty fields of git's `-z` output (lossy UTF-8).
pub(crate) fn split_nul(bytes: &[u8]) -> impl Iterator<Item = String> + '_ {
    bytes
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
}

impl Snapshot {
    /// Takes the repository's in-process mutex, then its file lock (created with the git
    /// directory when missing). A repository deleted since it was initialised here forgets
    /// its state, so the next track makes it again. Errors: the git directory or lock file
    /// cannot be made or locked.
    pub(crate) async fn lock(&self) -> Result<Held, SnapshotError> {
        let state = self.inner.state.clone().lock_owned().await;
        let dir = self.inner.git_dir.clone();
        let (file, present, gc_due) =
            tokio::task::spawn_blocking(move || -> Result<_, SnapshotError> {
                // Whether the repository is still there (someone may have deleted it since this
                // process initialised it): same blocking hop, one stat.
                let present = std::fs::symlink_metadata(dir.join("HEAD")).is_ok();
                // And whether a gc is due (the stamp's age), for `maybe_gc` after the track.
                let gc_due = present
                    && match std::fs::metadata(dir.join("troupe-gc")).and_then(|m| m.modified()) {
                        Ok(t) => SystemTime::now()
                            .duration_since(t)
                            .is_ok_and(|age| age >= GC_INTERVAL),
                        Err(_) => true,
                    };
                std::fs::create_dir_all(&dir)
                    .map_err(io_err(format!("creating {}", dir.display())))?;
                let path = dir.join("troupe.lock");
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(&path)
                    .map_err(io_err(format!("opening {}", path.display())))?;
                file.lock()
                    .map_err(io_err(format!("locking {}", path.display())))?;
                Ok((file, present, gc_due))
            })
            .await
            .map_err(join_err("waiting for the snapshot lock"))??;
        let mut held = Held {
            state,
            _file: file,
            gc_due,
        };
        if !present && held.state.initialized {
            // Deleted under us: everything known about it is void; the next
            // `ensure_init` makes it again.
            tracing::warn!(git_dir = %self.inner.git_dir.display(), "shadow repository gone; made again");
            *held.state = RepoState::default();
        }
        Ok(held)
    }

    /// `git init` the shadow repository when it has no `HEAD` yet (stamping it as freshly
    /// collected), and removes a stale `index.lock`; once per process and repository.
    pub(crate) async fn ensure_init(&self, held: &mut Held) -> Result<(), SnapshotError> {
        if held.state.initialized {
            return Ok(());
        }
        let git_dir = &self.inner.git_dir;
        if tokio::fs::metadata(git_dir.join("HEAD")).await.is_err() {
            let out = bare_git()
                .args(["init", "--quiet"])
                .env("GIT_DIR", git_dir)
                .current_dir(&self.inner.work_tree)
                .stdout(Stdio::null())
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
    pub(crate) async fn sync_exclude(&self, held: &mut Held) -> Result<(), SnapshotError> {
        // Bytes, not text: git reads rule files as bytes, and one Latin-1 byte must not drop
        // every rule of the file.
        let mut content: Vec<u8> = tokio::fs::read(&self.inner.source_exclude)
            .await
            .unwrap_or_default();
        if !content.is_empty() && !content.ends_with(b"\n") {
            content.push(b'\n');
        }
        for line in &self.inner.extra_excludes {
            content.extend_from_slice(line.as_bytes());
            content.push(b'\n');
        }
        if held.state.exclude_written.as_deref() == Some(content.as_slice()) {
            return Ok(());
        }
        let info = self.inner.git_dir.join("info");
        tokio::fs::create_dir_all(&info)
            .await
            .map_err(io_err(format!("creating {}", info.display())))?;
        let path = info.join("exclude");
        let current = tokio::fs::read(&path).await.ok();
        if current.as_deref() != Some(content.as_slice()) {
            tokio::fs::write(&path, &content)
                .await
                .map_err(io_err(format!("writing {}", path.display())))?;
        }
        held.state.exclude_written = Some(content);
        Ok(())
    }

    /// The untracked files (relative paths) over [`MAX_UNTRACKED_BYTES`], stat'ed in one
    /// blocking task.
    pub(crate) async fn large_files(
        &self,
        untracked: Vec<String>,
    ) -> Result<Vec<String>, SnapshotError> {
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
        .map_err(join_err("checking untracked file sizes"))
    }

    /// Whether the work tree may hold a file over [`MAX_UNTRACKED_BYTES`] that git does not
    /// ignore: one walk in a blocking task, stat'ing every file outside `.git` directories and
    /// outside what the work tree's `.gitignore` files and the shadow `info/exclude` ignore.
    /// `false` lets [`track`](Snapshot::track) skip `git ls-files --others`, whose only use is
    /// finding such files. The walk leaves the user's global excludes file out (it ignores less
    /// than git), and any error reading the tree answers `true`, so doubt means asking git.
    ///
    /// A walk costs about 1 µs per file and a git process about 1.3 ms, so past
    /// [`WALK_LIMIT`] files the walk stops, answers `true`, and this process asks git for
    /// this repository from then on.
    pub(crate) async fn may_hold_large_files(&self, held: &mut Held) -> bool {
        if held.state.too_many_to_walk {
            return true;
        }
        let root = self.inner.work_tree.clone();
        let exclude = self.inner.git_dir.join("info").join("exclude");
        let walked = tokio::task::spawn_blocking(move || {
            let mut walk = ignore::WalkBuilder::new(&root);
            // `current_dir`: the exclude file's anchored lines (`/out/`) match from the work
            // tree's top, as git reads them, not from the process's working directory.
            walk.standard_filters(false)
                .git_ignore(true)
                .require_git(false)
                .follow_links(false)
                .current_dir(&root)
                .filter_entry(|e| e.file_name() != ".git");
            if let Some(e) = walk.add_ignore(&exclude)
                && exclude.exists()
            {
                tracing::debug!(error = %e, "shadow exclude file unreadable; asking git");
                return Walked::Unsure;
            }
            let mut files = 0usize;
            for entry in walk.build() {
                let Ok(entry) = entry else {
                    return Walked::Unsure;
                };
                if entry.file_type().is_some_and(|t| t.is_dir()) {
                    // git (since 2.32) does not follow a `.gitignore` that is a symlink; the
                    // walker would, and ignore more than git.
                    let rules = entry.path().join(".gitignore");
                    if std::fs::symlink_metadata(&rules).is_ok_and(|m| m.is_symlink()) {
                        return Walked::Unsure;
                    }
                    continue;
                }
                if !entry.file_type().is_some_and(|t| t.is_file()) {
                    continue;
                }
                files += 1;
                if files > WALK_LIMIT {
                    return Walked::TooMany;
                }
                match entry.metadata() {
                    Ok(m) if m.len() <= MAX_UNTRACKED_BYTES => {}
                    _ => return Walked::Unsure,
                }
            }
            Walked::NoLargeFile
        })
        .await
        .unwrap_or(Walked::Unsure);
        match walked {
            Walked::NoLargeFile => false,
            Walked::Unsure => true,
            Walked::TooMany => {
                held.state.too_many_to_walk = true;
                true
            }
        }
    }

    /// Runs `git add --all --verbose` with `args` (pathspec options) and `stdin`, then `git
    /// write-tree`, unless the index's entries are those the last tree was written from (less
    /// than [`TREE_REUSE`] ago): then that tree. They are when the index is byte for byte the
    /// one left after that tree, or when it was so before the `add` and the `add` reported
    /// adding and removing nothing (it may still rewrite the index: git re-checks entries
    /// whose files changed in the index's own second and stores their new stat data, which
    /// is not in trees). Any other process's write to the index shows as a changed stamp.
    /// Errors: git's, or `write-tree` output that is not a hash.
    ///
    /// `fingerprint`, recorded before this `add`, is kept with the tree for
    /// [`unchanged_tree`](Self::unchanged_tree).
    pub(crate) async fn add_and_write_tree(
        &self,
        held: &mut Held,
        args: &[&str],
        stdin: Option<Vec<u8>>,
        fingerprint: Option<Fingerprint>,
    ) -> Result<String, SnapshotError> {
        let fingerprint = fingerprint.map(Arc::new);
        // With no tree to reuse (the first track, or the one after a change) the index is
        // not read: write-tree runs anyway.
        let reusable = held
            .state
            .last_tree
            .as_ref()
            .is_some_and(|last| last.at.elapsed() < TREE_REUSE);
        let before = if reusable {
            self.index_stamp().await
        } else {
            None
        };
        let mut add = vec!["add", "--all", "--verbose"];
        add.extend_from_slice(args);
        let added = self.git(&add, stdin).await?;
        let now = if reusable {
            self.index_stamp().await
        } else {
            None
        };
        if let (Some(now), Some(last)) = (now.as_ref(), held.state.last_tree.as_mut())
            && (last.index == *now || (before.as_ref() == Some(&last.index) && added.is_empty()))
        {
            last.index = now.clone();
            last.fingerprint = fingerprint;
            let tree = last.tree.clone();
            held.state.index_written = Some(now.clone());
            return Ok(tree);
        }
        held.state.last_tree = None;
        let tree = self.git(&["write-tree"], None).await?;
        let tree = String::from_utf8_lossy(&tree).trim().to_string();
        if !crate::is_hash(&tree) {
            return Err(SnapshotError::Git {
                command: "write-tree".into(),
                message: format!("unexpected output {tree:?}"),
            });
        }
        // write-tree may rewrite the index (it stores the trees it computed in it).
        let index = self.index_stamp().await;
        held.state.index_written = index.clone();
        if let Some(index) = index {
            held.state.last_tree = Some(WrittenTree {
                index,
                tree: tree.clone(),
                at: Instant::now(),
                fingerprint,
            });
        }
        Ok(tree)
    }

    /// The shadow index's [`IndexStamp`] (see [`read_index_stamp`]).
    pub(crate) async fn index_stamp(&self) -> Option<IndexStamp> {
        let path = self.inner.git_dir.join("index");
        tokio::task::spawn_blocking(move || read_index_stamp(&path))
            .await
            .ok()
            .flatten()
    }

    /// The last tree, when nothing `git add --all` reads changed since the `git add` it came
    /// from: the index is byte for byte the one left after it, the tree is under
    /// [`TREE_REUSE`] old, and the work tree matches the fingerprint recorded before that
    /// `add` (one blocking task; see `fingerprint`). `None`: git must look.
    pub(crate) async fn unchanged_tree(&self, held: &Held) -> Option<String> {
        let last = held.state.last_tree.as_ref()?;
        if last.at.elapsed() >= TREE_REUSE {
            return None;
        }
        let fingerprint = last.fingerprint.clone()?;
        if fingerprint.extra_excludes != self.inner.extra_excludes {
            return None;
        }
        let (index, path) = (last.index.clone(), self.inner.git_dir.join("index"));
        let same = tokio::task::spawn_blocking(move || {
            read_index_stamp(&path).is_some_and(|now| now == index) && fingerprint.matches()
        })
        .await
        .unwrap_or(false);
        same.then(|| last.tree.clone())
    }

    /// Forgets the last written tree and the staged blob ids (after `git gc`, which may have
    /// collected objects).
    pub(crate) fn forget_tree(held: &mut Held) {
        held.state.last_tree = None;
        held.state.staged = None;
    }

    /// Makes the shadow index hold the last tree staged in process when it fell behind
    /// (`git read-tree <tree>`, the tree named by [`STAGED_FILE`]), before a git command that
    /// reads the index: `add`, `ls-files`, `check-ignore`, `checkout`, `gc`. The entries come
    /// without stat data, so the next `git add` hashes their files again. A tree git cannot
    /// read (collected by an outside prune) is given up with a warning: the index stays as
    /// git left it, and git's own path goes on from there. Errors: the record could not be
    /// read.
    pub(crate) async fn flush_index(&self, held: &mut Held) -> Result<(), SnapshotError> {
        let dir = self.inner.git_dir.clone();
        let due = tokio::task::spawn_blocking(move || {
            let now = read_index_stamp(&dir.join("index"))?;
            index_due(&dir, &now)
        })
        .await
        .map_err(join_err("reading the staged tree record"))?;
        let Some(tree) = due else {
            return Ok(());
        };
        let taken = match self.git(&["read-tree", &tree.to_string()], None).await {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!(error = %e, "the index could not take the last staged tree; git stages from its own");
                held.state.staged = None;
                false
            }
        };
        let _ = tokio::fs::remove_file(self.inner.git_dir.join(STAGED_FILE)).await;
        let stamp = self.index_stamp().await;
        held.state.index_written = stamp.clone();
        if let Some(stamp) = stamp.filter(|_| taken) {
            // The index now holds exactly the staged tree: when it is this process's last
            // stage, that stage still tells which files are tracked; another process's
            // stage makes it stale.
            match held.state.staged.as_mut() {
                Some(staged) if staged.tree == tree => staged.index = stamp.clone(),
                _ => held.state.staged = None,
            }
            if let Some(last) = held.state.last_tree.as_mut() {
                last.index = stamp;
            }
        }
        Ok(())
    }

    /// Starts a background [`gc`](Snapshot::gc) when `due` ([`Held::gc_due`]: the last one
    /// is [`GC_INTERVAL`] old by the `troupe-gc` stamp's modification time, read in the
    /// lock's blocking trip); failures are only logged.
    pub(crate) async fn maybe_gc(&self, due: bool) {
        if !due {
            return;
        }
        let stamp = self.inner.git_dir.join("troupe-gc");
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

    /// Runs git on the shadow repository (see [`run_git`](Self::run_git)); pathspecs are globs.
    pub(crate) async fn git(
        &self,
        args: &[&str],
        stdin: Option<Vec<u8>>,
    ) -> Result<Vec<u8>, SnapshotError> {
        self.run_git(false, args, stdin).await
    }

    /// One git process on the shadow repository and the project's work tree (with
    /// `--literal-pathspecs` when `literal`: file names are never patterns), with
    /// [`GIT_CONFIG`], without [`GIT_ENV_REMOVED`] and without prompts, fed `stdin` when given.
    /// Returns its stdout; errors: git could not run, or exited non-zero ([`SnapshotError::Git`]
    /// with its stderr).
    pub(crate) async fn run_git(
        &self,
        literal: bool,
        args: &[&str],
        stdin: Option<Vec<u8>>,
    ) -> Result<Vec<u8>, SnapshotError> {
        self.run_git_status(literal, args, stdin, &[0]).await
    }

    /// [`run_git`](Self::run_git), accepting the exit codes in `ok` (`git check-ignore`
    /// exits 1 when no path is ignored).
    pub(crate) async fn run_git_status(
        &self,
        literal: bool,
        args: &[&str],
        stdin: Option<Vec<u8>>,
        ok: &[i32],
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
        GIT_RUNS.fetch_add(1, Ordering::Relaxed);
        self.inner.git_runs.fetch_add(1, Ordering::Relaxed);
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
        if !out.status.code().is_some_and(|c| ok.contains(&c)) {
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

/// A `git` command outside the shadow repository's options (`rev-parse` on the project,
/// `init`): without [`GIT_ENV_REMOVED`], no stdin, stderr captured, killed when dropped.
pub(crate) fn bare_git() -> Command {
    let mut cmd = Command::new("git");
    cmd.envs_removed()
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

/// Removes the git environment variables that would point a command elsewhere.
pub(crate) trait EnvsRemoved {
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
pub(crate) fn parse_raw_numstat(out: &[u8]) -> Vec<FileChange> {
    // Names stay bytes until the end: two names that are not UTF-8 can read the same once
    // converted, and each must get its own counts.
    let fields: Vec<&[u8]> = out.split(|b| *b == 0).filter(|f| !f.is_empty()).collect();
    let mut changes: Vec<FileChange> = Vec::new();
    let mut index: HashMap<&[u8], usize> = HashMap::new();
    let mut i = 0;
    while i < fields.len() {
        let field = fields[i];
        if let Some(raw) = field.strip_prefix(b":") {
            // `<old mode> <new mode> <old id> <new id> <status>`
            let raw = String::from_utf8_lossy(raw);
            let raw: Vec<&str> = raw.split(' ').collect();
            let status = match raw.get(4).and_then(|s| s.chars().next()) {
                Some('A') => ChangeStatus::Added,
                Some('D') => ChangeStatus::Deleted,
                _ => ChangeStatus::Modified,
            };
            let after = match (status, raw.get(1), raw.get(3)) {
                (ChangeStatus::Deleted, _, _) => None,
                (_, Some(mode), Some(id)) => Some(format!("{mode} {id}")),
                // Unparsable: `files_between` counts the file as changed.
                _ => Some("?".to_string()),
            };
            let Some(path) = fields.get(i + 1) else { break };
            index.insert(path, changes.len());
            changes.push(FileChange {
                file: String::from_utf8_lossy(path).into_owned(),
                status,
                additions: 0,
                deletions: 0,
                binary: false,
                patch: String::new(),
                after,
            });
            i += 2;
            continue;
        }
        let mut parts = field.splitn(3, |b| *b == b'\t');
        if let (Some(a), Some(d), Some(path)) = (parts.next(), parts.next(), parts.next())
            && let Some(&at) = index.get(path)
        {
            let c = &mut changes[at];
            let number = |b: &[u8]| std::str::from_utf8(b).ok()?.parse::<u64>().ok();
            match (number(a), number(d)) {
                (Some(a), Some(d)) => {
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
pub(crate) fn split_unified(text: &str) -> Vec<&str> {
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
