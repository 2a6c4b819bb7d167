//! A stat fingerprint of everything `git add --all` reads, so a track that finds it unchanged
//! can return the last tree without running git at all.
//!
//! `git add --all` decides from: the shadow index; the names in every directory it walks;
//! each file's stat data; the ignore rules (`.gitignore` files, the shadow `info/exclude`
//! and the project's own, which is copied into it, the global excludes file); attributes
//! (`.gitattributes`, `info/attributes`, the global and system attributes files); and
//! configuration (system, global, included files, the shadow repository's own). The
//! fingerprint records the `lstat` of each of these, taken *before* the `git add` whose tree
//! it vouches for, so any change git could have missed or seen shows as a difference:
//!
//! - directories: every one git walks, and more. Only directories git itself reported as
//!   wholly ignored (`git ls-files --others --ignored --directory`, confirmed one by one with
//!   `git check-ignore`) are skipped; a directory whose files merely all happen to be
//!   ignored is walked. A name created, removed or renamed in a directory changes its ctime.
//! - files: all of them except those git reported ignored (`.gitignore` and
//!   `.gitattributes` are always kept), compared on device, inode, mode, owner, size, mtime
//!   and ctime to the nanosecond. ctime cannot be set from user space, so a rewrite that
//!   restores the size and mtime still shows.
//! - the rule, attribute and configuration files above, present or absent.
//!
//! Timestamps are only trusted once they are old: a recorded mtime or ctime within
//! [`RACY_MARGIN`] of the moment the recording began (within [`COARSE_RACY_MARGIN`] when its
//! nanoseconds are zero, the mark of a file system keeping whole seconds) could be shared by
//! a later change in the same clock tick, so such a fingerprint is not kept (git's "racy
//! clean" rule, gitformat-index(5) / Documentation/technical/racy-git.txt). The moment is
//! read from the clock the kernel stamps files with (`CLOCK_REALTIME_COARSE`), so a coarse
//! clock that lags (a descheduled virtual CPU) lags on both sides of the comparison.
//!
//! Which directories and files git ignores is decided in this process when it can be
//! (`rules`: git's patterns matched with gix-ignore, what is tracked known from the last
//! in-process stage, or nothing tracked before any index): the walk then skips exactly
//! what git leaves out and no git runs. Else git is asked: `ls-files --ignored` as above.
//!
//! What git ignores also depends on the index (a tracked file is never ignored): the list
//! git gave is only trusted while the shadow index is the one this process's last `git add`
//! left; a revert's checkout or another process's write means asking git again.
//!
//! Only on Linux, and only for work trees on a local file system whose timestamps have
//! nanoseconds and follow the kernel clock (ext4, xfs, btrfs, tmpfs, f2fs, zfs, overlayfs,
//! bcachefs; not NFS, whose attribute cache can hide a directory's change for seconds, nor
//! FUSE). A nested repository (a `.git` below the top), a mount point inside the walked
//! tree, an unreadable directory, or more than [`FINGERPRINT_LIMIT`] entries: no
//! fingerprint, and every track runs git as before.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::git::{Held, index_due, read_index_stamp, split_nul};
use crate::rules::{Matcher, Refused, excluded as excluded_by};
use crate::stage::path_bytes;
use crate::{Snapshot, SnapshotError};

/// Age below which a recorded timestamp is not trusted, measured on the kernel's coarse
/// clock, which stamps files: a change after the walk began gets a timestamp at least that
/// clock's reading then (kernels since 6.13 stamp finer, never earlier). The margin covers
/// a file system's own rounding and leaves two ticks at HZ=100 (10 ms each) to spare.
pub(crate) const RACY_MARGIN: Duration = Duration::from_millis(20);

/// [`RACY_MARGIN`] for a timestamp with zero nanoseconds (a file system keeping whole
/// seconds, or FAT's two).
pub(crate) const COARSE_RACY_MARGIN: Duration = Duration::from_secs(3);

/// Most entries (directories, files and rule files) a fingerprint records; past it the
/// repository is tracked with git alone (measured: ~0.5 µs per entry to compare, against
/// ~2 ms for the cheapest `git add`).
pub(crate) const FINGERPRINT_LIMIT: usize = 20_000;

/// File-system types (as /proc/self/mountinfo names them) that are local and stamp files
/// from the kernel clock, with nanoseconds (ext2/ext3 inodes of 128 bytes keep whole seconds:
/// [`COARSE_RACY_MARGIN`] covers them).
const LOCAL_FS: &[&str] = &[
    "ext4", "ext3", "ext2", "xfs", "btrfs", "tmpfs", "f2fs", "zfs", "overlay", "bcachefs",
];

/// The `lstat` fields git compares (gitformat-index(5), "cached stat data"), times to the
/// nanosecond.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stat {
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    pub(crate) mode: u32,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) size: u64,
    pub(crate) mtime: (i64, i64),
    pub(crate) ctime: (i64, i64),
}

#[cfg(unix)]
impl Stat {
    fn of(m: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        Self {
            dev: m.dev(),
            ino: m.ino(),
            mode: m.mode(),
            uid: m.uid(),
            gid: m.gid(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }

    /// Whether a later change could leave these timestamps as they are: either is within
    /// the margin of `taken` (nanoseconds since the epoch, read before this stat) or after it.
    pub(crate) fn racy(&self, taken: i128) -> bool {
        [self.mtime, self.ctime].into_iter().any(|(s, ns)| {
            let margin = if ns == 0 {
                COARSE_RACY_MARGIN
            } else {
                RACY_MARGIN
            };
            i128::from(s) * 1_000_000_000 + i128::from(ns) + margin.as_nanos() as i128 >= taken
        })
    }

    /// `st_mode`: file type and permission bits.
    pub(crate) fn mode(&self) -> u32 {
        self.mode
    }

    /// Size in bytes.
    pub(crate) fn size(&self) -> u64 {
        self.size
    }
}

/// `lstat` of `path`: `Ok(None)` when it does not exist.
#[cfg(unix)]
fn lstat(path: &Path) -> std::io::Result<Option<Stat>> {
    found(std::fs::symlink_metadata(path))
}

/// `stat` of `path`, through symlinks (git follows them for configuration, excludes and
/// attributes files outside the work tree): `Ok(None)` when it does not exist.
#[cfg(unix)]
fn stat_through(path: &Path) -> std::io::Result<Option<Stat>> {
    found(std::fs::metadata(path))
}

#[cfg(unix)]
fn found(m: std::io::Result<std::fs::Metadata>) -> std::io::Result<Option<Stat>> {
    match m {
        Ok(m) => Ok(Some(Stat::of(&m))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Now on the clock files are stamped from, in ns since the epoch: the kernel's coarse
/// realtime clock on Linux (`clock_gettime(CLOCK_REALTIME_COARSE)`), the system time
/// elsewhere.
fn fs_clock_ns() -> i128 {
    #[cfg(target_os = "linux")]
    {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::RealtimeCoarse);
        i128::from(t.tv_sec) * 1_000_000_000 + i128::from(t.tv_nsec)
    }
    #[cfg(not(target_os = "linux"))]
    {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as i128)
            .unwrap_or(0)
    }
}

/// Recorded `lstat`s (`None`: the path did not exist) of everything a `git add` read.
#[derive(Debug, Default)]
pub(crate) struct Fingerprint {
    entries: Vec<(PathBuf, Option<Stat>)>,
    /// The first this many entries are files outside the work tree, stat'ed through
    /// symlinks as git reads them; the rest with `lstat`.
    followed: usize,
    /// The exclusions of the [`Snapshot`] handle that recorded it (its data directory and
    /// own files): another handle's `git add` would leave out other files.
    pub(crate) extra_excludes: Vec<String>,
}

impl Fingerprint {
    /// Whether every recorded path still has the recorded stat (blocking: one `stat` or
    /// `lstat` per entry). Any error answers `false`.
    #[cfg(unix)]
    pub(crate) fn matches(&self) -> bool {
        self.entries.iter().enumerate().all(|(i, (path, then))| {
            let now = if i < self.followed {
                stat_through(path)
            } else {
                lstat(path)
            };
            now.is_ok_and(|now| now == *then)
        })
    }

    #[cfg(not(unix))]
    pub(crate) fn matches(&self) -> bool {
        false
    }

    /// Entries recorded.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Everything recorded inside the work tree `root` that is not a directory (files,
    /// symbolic links, anything else the walk met), with its path relative to `root`.
    pub(crate) fn files<'a>(&'a self, root: &'a Path) -> impl Iterator<Item = (&'a Path, Stat)> {
        // The outside files come first, then `root` itself.
        self.entries
            .iter()
            .skip(self.followed + 1)
            .filter_map(move |(path, stat)| {
                let stat = (*stat)?;
                let rel = path.strip_prefix(root).ok()?;
                (stat.mode & 0o170000 != 0o040000).then_some((rel, stat))
            })
    }
}

/// What git's own ignore rules leave out of the work tree, as git reported it, and the rule
/// files it was reported under.
#[derive(Debug, Default)]
pub(crate) struct Ignored {
    /// Directories (relative) the rules exclude as a whole: git never walks them.
    pub(crate) dirs: HashSet<PathBuf>,
    /// Ignored files (relative) in directories git walks.
    pub(crate) files: HashSet<PathBuf>,
    /// `lstat` of every rule source when git was asked: each `.gitignore` of the work tree
    /// (relative path) and the outside files (absolute).
    pub(crate) rules: HashMap<PathBuf, Option<Stat>>,
    /// Directories walked after git was asked; a walk meeting another one marks the set for
    /// asking again (a new directory may be a large ignored one, walked until then).
    pub(crate) known_dirs: Option<HashSet<PathBuf>>,
    /// No rule anywhere (no `.gitignore`, no pattern in any excludes file): git ignores
    /// nothing.
    pub(crate) rule_free: bool,
    /// The shadow configuration and the process-wide one store file content and modes as
    /// they are (`plain_config`), and include nothing the fingerprint does not know of.
    pub(crate) plain: bool,
}

/// One walk of the work tree for a fingerprint.
#[derive(Debug, Default)]
pub(crate) struct Walk {
    /// What was recorded.
    pub(crate) fingerprint: Fingerprint,
    /// Rule sources seen, as in [`Ignored::rules`].
    pub(crate) rules: HashMap<PathBuf, Option<Stat>>,
    /// Some recorded timestamp was too recent to vouch for anything.
    pub(crate) racy: bool,
    /// One of `rules` was.
    pub(crate) rules_racy: bool,
    /// Largest regular file recorded (bytes).
    pub(crate) largest: u64,
    /// Directories walked (relative).
    pub(crate) dirs: HashSet<PathBuf>,
    /// When the walk began, on the clock files are stamped from (ns since the epoch).
    pub(crate) taken: i128,
    /// A `.gitattributes` file was met.
    pub(crate) attributes: bool,
    /// What `git add --all` stores for each file the walk recorded is the file as it is: no
    /// attributes file (inside or outside the work tree), a plain configuration; and the
    /// walk skipped only what git ignores (set by `fingerprint_walk`; what `stage`
    /// requires).
    pub(crate) stageable: bool,
    /// No ignore rule anywhere: git stages every file the walk recorded (else `stage` asks
    /// `git check-ignore` about the files it has not staged before).
    pub(crate) rule_free: bool,
    /// The walk matched the ignore rules itself (`rules`), taking the files of the stage
    /// with this tree as the tracked ones (`Some(None)`: none, an empty index): it skipped
    /// exactly what git leaves out while that holds, so `stage` asks git nothing.
    pub(crate) matched: Option<Option<gix_hash::ObjectId>>,
    /// Files recorded (rule files the walk read) that git's rules ignore: not staged.
    pub(crate) unstaged: HashSet<Vec<u8>>,
}

/// Why a work tree gets no fingerprint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoFingerprint {
    /// Not Linux, or a file system outside [`LOCAL_FS`].
    FileSystem,
    /// A `.git` below the top: a nested repository, whose state git reads from inside it.
    Nested,
    /// A directory on another device (a mount point).
    Mount,
    /// Over [`FINGERPRINT_LIMIT`] entries.
    TooMany,
    /// An error reading the tree or a rule file.
    Unreadable,
    /// Ignore rules this process does not read as git does (`rules::Refused`): the walk
    /// with a matcher gave up; one with git's list can still be taken.
    Rules,
}

/// Walks `root` (blocking): records the `lstat` of `outside` (absolute rule and config
/// files), of every directory not in `ignored.dirs`, and of every file except those in
/// `ignored.files` (`.gitignore` and `.gitattributes` always). The project's own `.git` at
/// the top is skipped.
///
/// With a `matcher`, `ignored` is not consulted: the walk matches git's ignore rules itself
/// (`rules`), reading each directory's `.gitignore` before its entries, and skips what git
/// leaves out: excluded directories without tracked files, and untracked files the rules
/// exclude. Rule files it read but git ignores are recorded and listed in
/// [`Walk::unstaged`]. Rules it cannot read as git does: [`NoFingerprint::Rules`].
#[cfg(unix)]
pub(crate) fn walk(
    root: &Path,
    ignored: &Ignored,
    outside: &[PathBuf],
    mut matcher: Option<&mut Matcher<'_>>,
) -> Result<Walk, NoFingerprint> {
    use std::os::unix::fs::MetadataExt;
    let taken = fs_clock_ns();
    let mut w = Walk {
        taken,
        ..Walk::default()
    };
    let record = |w: &mut Walk, path: PathBuf, stat: Option<Stat>| {
        if stat.is_some_and(|s| s.racy(taken)) {
            w.racy = true;
        }
        w.fingerprint.entries.push((path, stat));
    };
    for path in outside {
        let stat = stat_through(path).map_err(|_| NoFingerprint::Unreadable)?;
        w.rules.insert(path.clone(), stat);
        w.rules_racy |= stat.is_some_and(|s| s.racy(taken));
        record(&mut w, path.clone(), stat);
    }
    w.fingerprint.followed = w.fingerprint.entries.len();
    let refused = |why: Refused| {
        tracing::debug!(root = %root.display(), why = %why.0, "ignore rules left to git");
        NoFingerprint::Rules
    };
    if let Some(m) = matcher.as_deref_mut() {
        m.prepare(&w.rules, taken).map_err(refused)?;
    }
    let top = std::fs::symlink_metadata(root).map_err(|_| NoFingerprint::Unreadable)?;
    if !top.is_dir() {
        return Err(NoFingerprint::Unreadable);
    }
    let device = top.dev();
    record(&mut w, root.to_path_buf(), Some(Stat::of(&top)));
    // Per directory to walk: its path, and with a matcher the rule lists above it
    // (outermost first) and whether the rules exclude it.
    let outer = matcher.as_deref().map(|m| (m.outside.clone(), false));
    let mut stack = vec![(PathBuf::new(), outer)];
    while let Some((rel, frame)) = stack.pop() {
        let dir = root.join(&rel);
        let mut entries = Vec::new();
        for entry in std::fs::read_dir(&dir).map_err(|_| NoFingerprint::Unreadable)? {
            let entry = entry.map_err(|_| NoFingerprint::Unreadable)?;
            let name = entry.file_name();
            if name == ".git" {
                if rel.as_os_str().is_empty() {
                    continue;
                }
                return Err(NoFingerprint::Nested);
            }
            // `DirEntry::metadata` does not follow symlinks (lstat), as git does not.
            let meta = entry.metadata().map_err(|_| NoFingerprint::Unreadable)?;
            entries.push((name, meta));
        }
        // Git reads a directory's `.gitignore` before matching anything in it, and none
        // below an excluded directory.
        let frame = match (frame, matcher.as_deref_mut()) {
            (Some((mut lists, excluded)), Some(m)) => {
                if !excluded
                    && let Some((_, meta)) = entries.iter().find(|(n, _)| n == ".gitignore")
                {
                    if !meta.is_file() {
                        return Err(refused(Refused(format!(
                            "{}: a .gitignore that is not a regular file",
                            dir.display()
                        ))));
                    }
                    let mut base = path_bytes(&rel);
                    if !base.is_empty() {
                        base.push(b'/');
                    }
                    let list = m
                        .load(&dir.join(".gitignore"), Stat::of(meta), &base, taken)
                        .map_err(refused)?;
                    lists.push(list);
                }
                Some((lists, excluded))
            }
            _ => None,
        };
        for (name, meta) in entries {
            let child = rel.join(&name);
            let stat = Stat::of(&meta);
            // With a matcher: whether git leaves this entry out.
            let left_out = |is_dir: bool| -> Option<(bool, bool)> {
                let (lists, excluded) = frame.as_ref()?;
                let m = matcher.as_deref()?;
                let key = path_bytes(&child);
                let ex = *excluded || excluded_by(lists, &key, is_dir);
                let keep = if is_dir {
                    m.tracked_under(&key)
                } else {
                    m.tracked(&key)
                };
                Some((ex, ex && !keep))
            };
            if meta.is_dir() {
                let child_frame = match left_out(true) {
                    Some((_, true)) => continue,
                    Some((ex, false)) => frame.as_ref().map(|(l, _)| (l.clone(), ex)),
                    None if ignored.dirs.contains(&child) => continue,
                    None => None,
                };
                if meta.dev() != device {
                    return Err(NoFingerprint::Mount);
                }
                record(&mut w, dir.join(&name), Some(stat));
                w.dirs.insert(child.clone());
                stack.push((child, child_frame));
            } else {
                let rules = name == ".gitignore";
                let attributes = name == ".gitattributes";
                // Rule files of a directory git reads rules in are recorded even when
                // ignored: their content decides the rest.
                let read_here = frame.as_ref().is_none_or(|(_, ex)| !ex);
                match left_out(false) {
                    Some((_, true)) if (rules || attributes) && read_here => {
                        w.unstaged.insert(path_bytes(&child));
                    }
                    Some((_, true)) => continue,
                    Some((_, false)) => {}
                    None if !rules && !attributes && ignored.files.contains(&child) => continue,
                    None => {}
                }
                w.attributes |= attributes;
                if rules {
                    w.rules.insert(child.clone(), Some(stat));
                    w.rules_racy |= stat.racy(taken);
                }
                if meta.is_file() {
                    w.largest = w.largest.max(meta.len());
                }
                record(&mut w, dir.join(&name), Some(stat));
            }
            if w.fingerprint.len() > FINGERPRINT_LIMIT {
                return Err(NoFingerprint::TooMany);
            }
        }
    }
    Ok(w)
}

#[cfg(not(unix))]
pub(crate) fn walk(
    _root: &Path,
    _ignored: &Ignored,
    _outside: &[PathBuf],
    _matcher: Option<&mut Matcher<'_>>,
) -> Result<Walk, NoFingerprint> {
    Err(NoFingerprint::FileSystem)
}

/// Whether `root` lies on a file system in [`LOCAL_FS`] (blocking: reads
/// `/proc/self/mountinfo`; every mount of its device must be of such a type). `false`
/// outside Linux or on any doubt.
pub(crate) fn local_file_system(root: &Path) -> bool {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::MetadataExt;
        let Ok(meta) = std::fs::metadata(root) else {
            return false;
        };
        let dev = meta.dev();
        // glibc's gnu_dev_major / gnu_dev_minor.
        let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
        let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
        std::fs::read_to_string("/proc/self/mountinfo")
            .is_ok_and(|table| local_in_mountinfo(&table, major, minor))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = root;
        false
    }
}

/// Whether every mount of device `major:minor` in a `/proc/self/mountinfo` table is of a
/// type in [`LOCAL_FS`] (and there is one). Lines: `id parent major:minor root mountpoint
/// options [optional fields...] - type source super-options` (proc(5)).
pub(crate) fn local_in_mountinfo(table: &str, major: u64, minor: u64) -> bool {
    let wanted = format!("{major}:{minor}");
    let mut found = false;
    for line in table.lines() {
        if line.split(' ').nth(2) != Some(wanted.as_str()) {
            continue;
        }
        let fs = line
            .split(" - ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .unwrap_or("");
        if !LOCAL_FS.contains(&fs) {
            return false;
        }
        found = true;
    }
    found
}

/// Whether an ignore file's text holds no pattern (only blank lines and `#` comments).
pub(crate) fn no_patterns(text: &str) -> bool {
    text.lines()
        .map(|l| l.trim_end_matches([' ', '\t', '\r']))
        .all(|l| l.is_empty() || l.starts_with('#'))
}

/// Expands a path value from git configuration read from `origin`: `~/` is the home
/// directory, a relative path is taken from the configuration file's directory for
/// includes (`relative_to`) or is refused (`None`: git takes it from the working directory).
pub(crate) fn config_path(value: &str, relative_to: Option<&Path>) -> Option<PathBuf> {
    if let Some(rest) = value.strip_prefix("~/") {
        return std::env::var_os("HOME").map(|h| PathBuf::from(h).join(rest));
    }
    let p = PathBuf::from(value);
    if p.is_absolute() {
        return Some(p);
    }
    relative_to.map(|dir| dir.join(p))
}

/// Home-relative default of the global excludes file: `$XDG_CONFIG_HOME/git/ignore`, else
/// `$HOME/.config/git/ignore` (git-config(1), core.excludesFile).
pub(crate) fn default_excludes_file() -> Option<PathBuf> {
    match std::env::var_os("XDG_CONFIG_HOME") {
        Some(x) if !x.is_empty() => Some(PathBuf::from(x).join("git").join("ignore")),
        _ => std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config/git/ignore")),
    }
}

/// Files outside every work tree that decide what `git add` does, found once per process:
/// the system and global configuration files (`git var GIT_CONFIG_SYSTEM`,
/// `GIT_CONFIG_GLOBAL`), the files they include, every excludes file they name plus the
/// default one, and the attributes files (`git var GIT_ATTR_SYSTEM`, `GIT_ATTR_GLOBAL`, and
/// any `core.attributesFile`).
#[derive(Debug)]
pub(crate) struct GitFiles {
    /// All of them (absolute), existing or not.
    pub(crate) paths: Vec<PathBuf>,
    /// The excludes files among them.
    pub(crate) excludes: Vec<PathBuf>,
    /// The attributes files among them.
    pub(crate) attributes: Vec<PathBuf>,
    /// None of the configuration files turns `core.fileMode` or `core.trustCtime` off,
    /// `core.ignoreCase`, `core.precomposeUnicode` or `core.protectHFS` on, or sets
    /// `core.checkStat` to anything but `default` (see [`plain_config`]).
    pub(crate) plain: bool,
    /// The configuration files among them, with their `lstat` before they were read: any
    /// change means reading them again.
    pub(crate) config: Vec<(PathBuf, Option<Stat>)>,
}

/// [`GitFiles`] of this process; `None` until found, and again after a configuration file
/// changed.
static GIT_FILES: std::sync::LazyLock<tokio::sync::Mutex<Option<Arc<GitFiles>>>> =
    std::sync::LazyLock::new(|| tokio::sync::Mutex::new(None));

/// Most configuration files followed through includes (git's own limit is 10 levels).
const MAX_CONFIG_FILES: usize = 32;

impl Snapshot {
    /// This process's [`GitFiles`], found with git on first use (`None`: git could not say,
    /// or a path value is relative to the working directory: no fingerprints).
    async fn git_files(&self) -> Option<Arc<GitFiles>> {
        let mut cached = GIT_FILES.lock().await;
        if let Some(files) = cached.as_ref() {
            return Some(files.clone());
        }
        let mut queue: Vec<PathBuf> = Vec::new();
        let mut attributes: Vec<PathBuf> = Vec::new();
        for var in ["GIT_CONFIG_SYSTEM", "GIT_CONFIG_GLOBAL"] {
            let out = self.git(&["var", var], None).await.ok()?;
            queue.extend(String::from_utf8_lossy(&out).lines().map(PathBuf::from));
        }
        for var in ["GIT_ATTR_SYSTEM", "GIT_ATTR_GLOBAL"] {
            let out = self.git(&["var", var], None).await.ok()?;
            attributes.extend(String::from_utf8_lossy(&out).lines().map(PathBuf::from));
        }
        let mut excludes = vec![default_excludes_file()?];
        let mut config: Vec<(PathBuf, Option<Stat>)> = Vec::new();
        let mut plain = true;
        while let Some(file) = queue.pop() {
            if file.as_os_str().is_empty() || config.iter().any(|(p, _)| *p == file) {
                continue;
            }
            if config.len() >= MAX_CONFIG_FILES {
                return None;
            }
            let stat = {
                let file = file.clone();
                tokio::task::spawn_blocking(move || stat_through(&file))
                    .await
                    .ok()?
                    .ok()?
            };
            config.push((file.clone(), stat));
            if stat.is_none() {
                continue;
            }
            let path = file.to_str()?;
            let out = self
                .git(
                    &["config", "--file", path, "--list", "--no-includes", "-z"],
                    None,
                )
                .await
                .ok()?;
            for record in split_nul(&out) {
                if record.contains('\u{FFFD}') {
                    // Not UTF-8: the path git reads is not one this could name.
                    return None;
                }
                // `key` alone is a boolean true; `key\n` with nothing after it is an empty
                // value, which git reads as false.
                let (key, value, implicit) = match record.split_once('\n') {
                    Some((k, v)) => (k, v, false),
                    None => (record.as_str(), "", true),
                };
                let key = key.to_ascii_lowercase();
                let value_lc = value.trim().to_ascii_lowercase();
                let off =
                    !implicit && matches!(value_lc.as_str(), "false" | "no" | "off" | "0" | "");
                plain &= match key.as_str() {
                    "core.filemode" => !off,
                    "core.ignorecase" | "core.precomposeunicode" | "core.protecthfs" => off,
                    // How git compares an index entry's stat data (`seed` relies on it).
                    "core.trustctime" => !off,
                    "core.checkstat" => value_lc == "default",
                    _ => true,
                };
                if key == "core.excludesfile" {
                    excludes.push(config_path(value, None)?);
                } else if key == "core.attributesfile" {
                    attributes.push(config_path(value, None)?);
                } else if key == "include.path"
                    || (key.starts_with("includeif.") && key.ends_with(".path"))
                {
                    queue.push(config_path(value, file.parent())?);
                }
            }
        }
        let mut paths: Vec<PathBuf> = config.iter().map(|(p, _)| p.clone()).collect();
        paths.extend(excludes.iter().cloned());
        let attributes: Vec<PathBuf> = attributes
            .into_iter()
            .filter(|p| !p.as_os_str().is_empty())
            .collect();
        paths.extend(attributes.iter().cloned());
        let files = Arc::new(GitFiles {
            paths,
            excludes,
            attributes,
            plain,
            config,
        });
        *cached = Some(files.clone());
        Some(files)
    }

    /// What git's rules ignore in the work tree now: `git ls-files --others --ignored
    /// --directory` lists ignored files, and directories that are either ignored or hold
    /// only ignored files; `git check-ignore` keeps the directories the rules match
    /// themselves (git never walks those).
    async fn ignored_by_git(&self) -> Result<Ignored, SnapshotError> {
        let out = self
            .git(
                &[
                    "ls-files",
                    "--others",
                    "--ignored",
                    "--exclude-standard",
                    "--directory",
                    "-z",
                ],
                None,
            )
            .await?;
        let mut ignored = Ignored::default();
        let mut candidates = Vec::new();
        for name in names(&out) {
            match name.strip_suffix(b"/") {
                Some(dir) => {
                    // `./`: a leading `:` would start pathspec magic (`:foo` is `foo`), and
                    // check-ignore refuses `--literal-pathspecs`.
                    candidates.extend_from_slice(b"./");
                    candidates.extend_from_slice(dir);
                    candidates.push(0);
                }
                None => {
                    ignored.files.insert(path_of(name));
                }
            }
        }
        if !candidates.is_empty() {
            let out = self
                .run_git_status(
                    false,
                    &["check-ignore", "--stdin", "-z"],
                    Some(candidates),
                    &[0, 1],
                )
                .await?;
            ignored.dirs = names(&out)
                .map(|d| d.strip_prefix(b"./").unwrap_or(d))
                .map(|d| path_of(d.strip_suffix(b"/").unwrap_or(d)))
                .collect();
        }
        Ok(ignored)
    }

    /// Walks the work tree for the fingerprint of the `git add` about to run (see the module
    /// docs), asking git which directories and files its rules ignore when the rule files
    /// changed. `None`: no walk (the reason is kept when it lasts); a walk with `racy` set
    /// gives no fingerprint but still its largest file.
    pub(crate) async fn fingerprint_walk(&self, held: &mut Held) -> Option<Walk> {
        if held.state.no_fingerprint.is_some() {
            return None;
        }
        let root = self.inner.work_tree.clone();
        if held.state.local_fs.is_none() {
            let r = root.clone();
            let local = tokio::task::spawn_blocking(move || local_file_system(&r))
                .await
                .unwrap_or(false);
            held.state.local_fs = Some(local);
        }
        if held.state.local_fs != Some(true) {
            held.state.no_fingerprint = Some(NoFingerprint::FileSystem);
            return None;
        }
        let files = self.git_files().await?;
        let git_dir = &self.inner.git_dir;
        let mut outside = files.paths.clone();
        outside.extend([
            git_dir.join("config"),
            git_dir.join("info").join("exclude"),
            git_dir.join("info").join("attributes"),
            self.inner.source_exclude.clone(),
        ]);
        let outside = Arc::new(outside);
        // Attributes files outside the work tree (any present: no in-process staging).
        let mut attribute_files = files.attributes.clone();
        attribute_files.push(git_dir.join("info").join("attributes"));
        let attributes_outside = |w: &Walk| {
            attribute_files
                .iter()
                .any(|p| w.rules.get(p).is_none_or(|s| s.is_some()))
        };
        match self.matched_walk(held, &files, outside.clone()).await {
            Ok(mut walked) => {
                if files
                    .config
                    .iter()
                    .any(|(p, s)| walked.rules.get(p).is_none_or(|now| now != s))
                {
                    // A configuration file changed: find the files again next time.
                    *GIT_FILES.lock().await = None;
                    return None;
                }
                walked.stageable = !walked.attributes && !attributes_outside(&walked);
                walked.fingerprint.extra_excludes = self.inner.extra_excludes.clone();
                return Some(walked);
            }
            Err(NoFingerprint::Rules) => {}
            Err(why @ (NoFingerprint::TooMany | NoFingerprint::Nested | NoFingerprint::Mount)) => {
                // Where git walks too: there for good, in practice (as below).
                held.state.no_fingerprint = Some(why);
                return None;
            }
            Err(_) => return None,
        }
        let mut hinted = false;
        // At most: a walk into everything, one with git's list as a hint, one after asking
        // git under known rules.
        for _ in 0..3 {
            // `trusted`: git listed what its rules ignore under `ignored.rules`, and the index
            // is still the one this process's last `git add` left (a tracked file is never
            // ignored: a revert's checkout can track one the list names).
            let (ignored, trusted) = held.state.ignored.take().unwrap_or_default();
            let (r, o, i) = (root.clone(), outside.clone(), git_dir.join("index"));
            let (ignored, walked, index) = tokio::task::spawn_blocking(move || {
                let index = read_index_stamp(&i);
                let w = walk(&r, &ignored, &o, None);
                (ignored, w, index)
            })
            .await
            .ok()?;
            let trusted = trusted
                && matches!((&index, &held.state.index_written), (Some(a), Some(b)) if a == b);
            let mut walked = match walked {
                Ok(w) => w,
                Err(NoFingerprint::TooMany | NoFingerprint::Nested | NoFingerprint::Mount)
                    if !hinted =>
                {
                    // The walk may have gone into directories git ignores (a dependency
                    // directory with thousands of files, or its own `.git`, perhaps new
                    // since git was last asked): take git's list now as a hint for the next
                    // walk (untrusted: no rule stat vouches for it).
                    hinted = true;
                    self.flush_index(held).await.ok()?;
                    let hint = self.ignored_by_git().await.ok()?;
                    held.state.ignored = Some((hint, false));
                    continue;
                }
                Err(why) => {
                    // Too many entries, a nested repository, a mount point where git walks:
                    // there for good, in practice; walking again only to meet them would
                    // cost a walk per track.
                    if why != NoFingerprint::Unreadable {
                        held.state.no_fingerprint = Some(why);
                    }
                    held.state.ignored = Some((ignored, trusted));
                    return None;
                }
            };
            // A configuration file changed: find the files again next time.
            if files
                .config
                .iter()
                .any(|(p, s)| walked.rules.get(p).is_none_or(|now| now != s))
            {
                // The walk skipped by a list made under other rules: its largest file is
                // no answer either (a large file it skipped may be git's now).
                *GIT_FILES.lock().await = None;
                held.state.ignored = Some((ignored, false));
                return None;
            }
            if trusted && walked.rules == ignored.rules {
                // The rules are those git was asked under: the walk skipped only what git
                // ignores. A directory unseen then may be a large ignored one: ask again
                // next time (the list stays a hint meanwhile).
                let stale = ignored
                    .known_dirs
                    .as_ref()
                    .is_some_and(|k| !walked.dirs.is_subset(k));
                let mut kept = ignored;
                kept.known_dirs.get_or_insert_with(|| walked.dirs.clone());
                walked.stageable = kept.plain && !walked.attributes && !attributes_outside(&walked);
                walked.rule_free = kept.rule_free;
                held.state.ignored = Some((kept, !stale));
                walked.fingerprint.extra_excludes = self.inner.extra_excludes.clone();
                return Some(walked);
            }
            let skipped_nothing = ignored.dirs.is_empty() && ignored.files.is_empty();
            if walked.rules_racy && !skipped_nothing {
                // A rule file changed too recently for its stat to vouch for what git would
                // list: git alone this time (and not this walk's largest file: it skipped
                // by a list that may be stale).
                held.state.ignored = Some((ignored, false));
                return None;
            }
            let (d, ex) = (git_dir.clone(), files.excludes.clone());
            let has_rules = walked
                .rules
                .keys()
                .any(|p| p.is_relative() && p.file_name().is_some_and(|n| n == ".gitignore"));
            let (config_ok, no_rules, plain) =
                tokio::task::spawn_blocking(move || repo_rules(&d, &ex))
                    .await
                    .ok()?;
            if walked.rules_racy {
                // The walk skipped nothing, so it lists every file; the rule files as read
                // just now decide whether that is what git would stage (a new shadow
                // repository's own files are always this young on its first track). Their
                // stat vouches for nothing later: no fingerprint, no list kept.
                held.state.ignored = Some((ignored, false));
                walked.racy = true;
                walked.stageable = config_ok
                    && plain
                    && files.plain
                    && !walked.attributes
                    && !attributes_outside(&walked);
                walked.rule_free = no_rules && !has_rules;
                return walked.stageable.then_some(walked);
            }
            if !config_ok {
                held.state.ignored = Some((ignored, false));
                return None;
            }
            let mut fresh = if no_rules && !has_rules {
                Ignored::default()
            } else {
                if self.flush_index(held).await.is_err() {
                    held.state.ignored = Some((ignored, false));
                    return None;
                }
                match self.ignored_by_git().await {
                    Ok(i) => i,
                    Err(_) => {
                        held.state.ignored = Some((ignored, false));
                        return None;
                    }
                }
            };
            fresh.rule_free = no_rules && !has_rules;
            fresh.plain = plain && files.plain;
            fresh.rules = std::mem::take(&mut walked.rules);
            if ignored.dirs.is_empty() && ignored.files.is_empty() && fresh.dirs.is_empty() {
                // Nothing was skipped, and git skips no directory: this walk already is the
                // one the fresh list would give (it records ignored files too, which only
                // costs a needless `git add` when one changes).
                walked.rules = fresh.rules.clone();
                fresh.known_dirs = Some(walked.dirs.clone());
                walked.stageable =
                    fresh.plain && !walked.attributes && !attributes_outside(&walked);
                walked.rule_free = fresh.rule_free;
                held.state.ignored = Some((fresh, true));
                walked.fingerprint.extra_excludes = self.inner.extra_excludes.clone();
                return Some(walked);
            }
            held.state.ignored = Some((fresh, true));
        }
        None
    }
}

impl Snapshot {
    /// A walk that matches git's ignore rules itself (see `rules`), when what is tracked is
    /// known in this process: the files of the last stage while the index is as that stage
    /// found it, or none while there is no index and no other process staged. Else, or when
    /// the rules are not ones it reads as git does: [`NoFingerprint::Rules`] (the walk with
    /// git's list decides).
    async fn matched_walk(
        &self,
        held: &mut Held,
        files: &GitFiles,
        outside: Arc<Vec<PathBuf>>,
    ) -> Result<Walk, NoFingerprint> {
        let staged = held.state.staged.take();
        let mut cache = std::mem::take(&mut held.state.rule_cache);
        let root = self.inner.work_tree.clone();
        let git_dir = self.inner.git_dir.clone();
        let globals = files.excludes.clone();
        let global_plain = files.plain;
        let joined = tokio::task::spawn_blocking(move || {
            let index = read_index_stamp(&git_dir.join("index"));
            let due = index.as_ref().and_then(|now| index_due(&git_dir, now));
            let assumed = match (&staged, &index) {
                (Some(p), Some(_)) if p.tracks_now(index.as_ref(), due) => Some(Some(p.tree)),
                (_, Some(now)) if now.len() == 0 && due.is_none() => Some(None),
                _ => None,
            };
            let result = match assumed {
                None => Err(NoFingerprint::Rules),
                Some(assumed) => {
                    let mut matcher = Matcher {
                        info_exclude: git_dir.join("info").join("exclude"),
                        config: git_dir.join("config"),
                        global_excludes: &globals,
                        global_plain,
                        tracked: assumed.and(staged.as_ref()),
                        cache: &mut cache,
                        outside: Vec::new(),
                    };
                    walk(&root, &Ignored::default(), &outside, Some(&mut matcher)).map(|mut w| {
                        w.matched = Some(assumed);
                        w
                    })
                }
            };
            (staged, cache, result)
        })
        .await;
        let Ok((staged, cache, result)) = joined else {
            return Err(NoFingerprint::Unreadable);
        };
        held.state.staged = staged;
        held.state.rule_cache = cache;
        result
    }
}

/// The non-empty names of git's `-z` output, as bytes (a lossy conversion could turn a
/// name git ignores into the name of a file it does not).
fn names(out: &[u8]) -> impl Iterator<Item = &[u8]> {
    out.split(|b| *b == 0).filter(|n| !n.is_empty())
}

/// The relative path git printed as `name` (bytes on Unix; lossy UTF-8 elsewhere, where no
/// fingerprint is kept).
fn path_of(name: &[u8]) -> PathBuf {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        PathBuf::from(std::ffi::OsStr::from_bytes(name))
    }
    #[cfg(not(unix))]
    {
        PathBuf::from(String::from_utf8_lossy(name).into_owned())
    }
}

/// Whether the shadow repository's own configuration leaves the excludes, attributes and
/// included files as the process-wide ones say (no `include`, `excludesFile` or
/// `attributesFile` in it), whether the shadow `info/exclude` and the `excludes` files
/// hold no pattern, and whether that configuration stores content and modes as they are
/// (`plain_config`) (blocking; unreadable answers no).
fn repo_rules(git_dir: &Path, excludes: &[PathBuf]) -> (bool, bool, bool) {
    let config = std::fs::read_to_string(git_dir.join("config"))
        .unwrap_or_default()
        .to_ascii_lowercase();
    let config_ok = !["include", "excludesfile", "attributesfile"]
        .iter()
        .any(|k| config.contains(k));
    let plain = plain_config(&config);
    let empty = |p: &Path| match std::fs::read(p) {
        Ok(bytes) => no_patterns(&String::from_utf8_lossy(&bytes)),
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    };
    let no_rules =
        empty(&git_dir.join("info").join("exclude")) && excludes.iter().all(|p| empty(p));
    (config_ok, no_rules, plain)
}

/// Whether a shadow repository's configuration (lower-cased text) is one `git init` writes,
/// which leaves what `git add` stores for a file to the file alone: only a `[core]` section,
/// only `key = value` lines of the keys and values below, nothing else (no quotes, comments
/// after a value, continuation lines or other keys: git's own syntax is richer than this
/// check, so whatever it does not know answers no and git stages). Refused in particular:
/// `core.fileMode` off (the executable bit would come from the index), `core.ignoreCase`
/// and `core.precomposeUnicode` on (they rename entries), `core.protectHFS` (refuses more
/// names), any `extensions` (SHA-256 objects). `core.autocrlf` and `core.symlinks` are fixed
/// on every shadow git call (`GIT_CONFIG`); the system and global files are checked by
/// [`GitFiles::plain`].
pub(crate) fn plain_config(config: &str) -> bool {
    let mut in_core = false;
    for line in config.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with(['#', ';']) {
            continue;
        }
        if line.starts_with('[') {
            in_core = line == "[core]";
            if !in_core {
                return false;
            }
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            return false;
        };
        let allowed: &[&str] = match key.trim() {
            "repositoryformatversion" => &["0", "1"],
            "filemode" => &["true"],
            // `git init` with `GIT_DIR` set writes `bare = true`; every shadow git call names
            // the work tree.
            "bare" | "logallrefupdates" | "symlinks" => &["true", "false"],
            "ignorecase" | "precomposeunicode" => &["false"],
            _ => &[],
        };
        if !in_core || !allowed.contains(&value.trim()) {
            return false;
        }
    }
    true
}

#[cfg(test)]
impl Snapshot {
    /// Turns fingerprints off for this repository in this process (tests of git's path).
    pub(crate) async fn without_fingerprints(&self) {
        let mut held = self.lock().await.expect("lock");
        held.state.no_fingerprint = Some(NoFingerprint::FileSystem);
        held.state.last_tree = None;
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    fn stat_at(mtime: (i64, i64), ctime: (i64, i64)) -> Stat {
        Stat {
            dev: 1,
            ino: 2,
            mode: 0o100644,
            uid: 0,
            gid: 0,
            size: 3,
            mtime,
            ctime,
        }
    }

    #[test]
    fn a_timestamp_is_racy_within_the_margin_and_after() {
        let taken = 1_000 * 1_000_000_000i128;
        let ns = |d: Duration| d.as_nanos() as i64;
        let old = (999, 1_000_000_000 - ns(RACY_MARGIN) - 1);
        assert!(!stat_at(old, old).racy(taken));
        let edge = (999, 1_000_000_000 - ns(RACY_MARGIN));
        assert!(stat_at(old, edge).racy(taken), "ctime at the margin");
        assert!(stat_at(edge, old).racy(taken), "mtime at the margin");
        assert!(stat_at((1_001, 5), old).racy(taken), "after the walk began");
        // Whole seconds: the coarse margin.
        assert!(stat_at((998, 0), old).racy(taken));
        assert!(!stat_at((996, 0), old).racy(taken));
    }

    #[test]
    fn a_walk_right_after_a_write_is_racy_and_one_later_is_not() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::write(root.join("src/a.txt"), "a").unwrap();
        let w = walk(root, &Ignored::default(), &[], None).unwrap();
        assert!(w.racy, "written just now");
        assert_eq!(w.fingerprint.len(), 3, "top, src, src/a.txt");
        std::thread::sleep(RACY_MARGIN * 2);
        let w = walk(root, &Ignored::default(), &[], None).unwrap();
        assert!(!w.racy);
        assert!(w.fingerprint.matches());
        std::fs::write(root.join("src/a.txt"), "b").unwrap();
        assert!(!w.fingerprint.matches(), "same size, new ctime");
        // A rule file written now makes the rules racy too.
        std::fs::write(root.join(".gitignore"), "x\n").unwrap();
        let w = walk(root, &Ignored::default(), &[], None).unwrap();
        assert!(w.rules_racy);
    }

    #[test]
    fn a_nested_repository_gets_no_fingerprint() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join(".git")).unwrap();
        std::fs::create_dir_all(tmp.path().join("vendor/x/.git")).unwrap();
        let err = walk(tmp.path(), &Ignored::default(), &[], None).unwrap_err();
        assert_eq!(err, NoFingerprint::Nested);
        // A `.git` file (a worktree or submodule link) counts too.
        std::fs::remove_dir_all(tmp.path().join("vendor/x/.git")).unwrap();
        std::fs::write(tmp.path().join("vendor/x/.git"), "gitdir: /elsewhere\n").unwrap();
        let err = walk(tmp.path(), &Ignored::default(), &[], None).unwrap_err();
        assert_eq!(err, NoFingerprint::Nested);
    }

    #[test]
    fn only_local_file_systems_count() {
        let table = "\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 27 0:40 / /mnt/nfs rw,relatime shared:9 - nfs4 srv:/x rw,vers=4.2
31 27 0:41 / /dev/shm rw - tmpfs tmpfs rw
32 27 0:42 / /mnt/fuse rw - fuse.sshfs host:/ rw
33 27 8:1 /sub /bind rw - ext4 /dev/sda1 rw
34 27 0:43 / /mixed rw - tmpfs tmpfs rw
35 27 0:43 / /mixed2 rw - nfs srv:/y rw
";
        assert!(local_in_mountinfo(table, 8, 1), "ext4, bind-mounted twice");
        assert!(local_in_mountinfo(table, 0, 41), "tmpfs");
        assert!(!local_in_mountinfo(table, 0, 40), "nfs4");
        assert!(!local_in_mountinfo(table, 0, 42), "fuse");
        assert!(!local_in_mountinfo(table, 0, 43), "one mount of it is nfs");
        assert!(!local_in_mountinfo(table, 9, 9), "not mounted");
    }

    #[test]
    fn comments_and_blank_lines_are_no_patterns() {
        assert!(no_patterns(""));
        assert!(no_patterns(
            "# git ls-files --others --exclude-from=.git/info/exclude\n\n  \n"
        ));
        assert!(!no_patterns("# x\n*.log\n"));
        assert!(!no_patterns("\\#literal\n"));
    }

    #[test]
    fn config_paths_expand_home_and_refuse_the_working_directory() {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        assert_eq!(config_path("~/x", None), home.map(|h| h.join("x")));
        assert_eq!(config_path("/etc/x", None), Some(PathBuf::from("/etc/x")));
        assert_eq!(config_path("rel", None), None);
        assert_eq!(
            config_path("rel", Some(Path::new("/home/u"))),
            Some(PathBuf::from("/home/u/rel"))
        );
    }
}
