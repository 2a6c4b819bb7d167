//! Staging a work tree without git: the blobs and trees `git add --all` + `git write-tree`
//! would write, written in this process as loose objects (gix-odb), and the diffs between
//! such trees computed from what staging saw.
//!
//! Each git process costs ~1.5–2 ms of CPU on a small VM, most of it starting the process;
//! a step that writes a file used to run `add`, `write-tree` and `diff-tree`. Staging runs
//! when the fingerprint walk (`fingerprint`) lists every file `git add --all` would look at
//! and skipped only what git's rules ignore ([`Walk::stageable`]), with no attributes file
//! (no filter, no end-of-line conversion), a plain configuration (`plain_config`), no file
//! over [`MAX_UNTRACKED_BYTES`], and names git takes as they are ([`plain_name`]). Anything
//! else, and any error, leaves the track to git as before.
//!
//! What git would store, per walked entry (git's `ce_mode_from_stat` and `treat_path`): a
//! regular file is a blob of its bytes, mode `100755` when its owner may execute it and
//! `100644` otherwise; a symbolic link a blob of its target (`120000`); anything else
//! (FIFOs, sockets, devices) is left out; directories holding no file are left out. Trees
//! are git's tree objects of those entries (sorted as git sorts them: `gix_object`).
//!
//! Which files: with no ignore rule anywhere, all of them (troupe's own paths aside). With
//! rules, a file already in the last staged tree is tracked and stays, as git keeps tracked
//! files whatever the rules say. The rest is what the walk kept: when it matched git's
//! rules itself (`rules`: the usual case once a stage exists, or before any index), exactly
//! the files git would add; else a file new to the tree is put to `git check-ignore` (one
//! process for all of them, `--no-index` while the last stage's files are the tracked
//! ones), and git's answer is kept until a rule file changes.
//!
//! A file is hashed again only when its `lstat` differs from the one recorded when it was
//! last hashed, or when that one was racy (within `RACY_MARGIN` of its walk: a change in the
//! same clock tick could keep it); the stat is taken before the content is read, so a
//! change in between shows next time. A stage with nothing before it (a new process, or
//! after git wrote the index) takes over the ids of the index git wrote where git would
//! find the entry clean ([`Seed`]): content a filter converted stays converted until the
//! file changes, as with git.
//!
//! The shadow index is not written: it falls behind the trees staged here. Before any git
//! command that reads the index runs, `Snapshot::flush_index` makes it hold the last
//! staged tree (`git read-tree`), so git's own path starts from exactly what staging left;
//! the tree is also recorded in the shadow git dir (`troupe-staged`), so a process that
//! ends first leaves it to the next.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use gix_hash::ObjectId;
use gix_object::tree::{Entry, EntryKind};
use gix_object::{Kind, Tree, WriteTo};

use crate::fingerprint::{Stat, Walk};
use crate::git::IndexStamp;
use crate::{ChangeStatus, FileChange, MAX_UNTRACKED_BYTES};

/// Bytes a stage reads at most when it starts without a previous one (a new process, or
/// after [`STAGED_REUSE`]): past it, git's own `add` (which reuses the stat data of the
/// shadow index) is cheaper.
pub(crate) const STAGE_FROM_SCRATCH_BYTES: u64 = 64 * 1024 * 1024;

/// How long the blob ids of a stage are reused without hashing the files again: well under
/// [`GC_PRUNE`](crate::GC_PRUNE) (7 days), so the objects they name cannot have been
/// collected meanwhile (staged objects are unreachable until the index holds them).
pub(crate) const STAGED_REUSE: std::time::Duration = std::time::Duration::from_secs(3600);

/// Trees whose listings are kept per shadow repository for in-process diffs.
const LISTINGS_KEPT: usize = 16;

/// Blob summaries kept per shadow repository before the map is cleared.
const BLOBS_KEPT: usize = 100_000;

/// Bytes git looks at for a NUL to call content binary (`FIRST_FEW_BYTES`, xdiff-interface.c).
const BINARY_PROBE: usize = 8000;

/// One staged file: the `lstat` it was hashed under and what git stores for it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StagedFile {
    stat: Stat,
    kind: EntryKind,
    id: ObjectId,
    /// The stat was racy when recorded: hash again next time even if it is unchanged.
    racy: bool,
}

/// What the last stage of a shadow repository saw, reused by the next one.
#[derive(Debug)]
pub(crate) struct Staged {
    /// Per relative path (bytes, `/`-separated, sorted as git sorts paths): the files of
    /// the last staged tree, so also what git would now count as tracked.
    files: BTreeMap<Vec<u8>, StagedFile>,
    /// When the first of these files was hashed (see [`STAGED_REUSE`]).
    since: Instant,
    /// The shadow index's stamp then: any other stamp means git wrote the index since
    /// (git's own track, a revert's checkout, another process), so which files are tracked
    /// is git's to say again.
    pub(crate) index: IndexStamp,
    /// The tree staged: the index is behind it until `flush_index`, or another process
    /// staged since when the record names another.
    pub(crate) tree: ObjectId,
    /// Files git said it ignores (untracked: not in `files`), and the rule files' stats it
    /// said so under (`None`: a rule file was too recent to vouch for it). Asked again
    /// when any rule file changes.
    ignored: HashSet<Vec<u8>>,
    ignored_under: Option<HashMap<PathBuf, Option<Stat>>>,
}

impl Staged {
    /// Whether this stage's files are what git counts as tracked now: the index (`index`,
    /// its stamp read now) is the one the stage found, and the record of a tree the index is
    /// behind (`due`) names none or this stage's.
    pub(crate) fn tracks_now(&self, index: Option<&IndexStamp>, due: Option<ObjectId>) -> bool {
        Some(&self.index) == index && due.is_none_or(|d| d == self.tree)
    }

    /// The files of the last staged tree, by relative path.
    pub(crate) fn files(&self) -> &BTreeMap<Vec<u8>, StagedFile> {
        &self.files
    }

    /// The files git said it ignores, while the rule files are as they were then.
    pub(crate) fn ignored_under(
        &self,
        rules: &HashMap<PathBuf, Option<Stat>>,
    ) -> Option<&HashSet<Vec<u8>>> {
        (self.ignored_under.as_ref() == Some(rules)).then_some(&self.ignored)
    }
}

#[cfg(test)]
impl Staged {
    /// A stage whose tree holds files at `keys` (relative path bytes), for tests of what is
    /// tracked (stats, ids and tree are placeholders).
    pub(crate) fn tracking(keys: impl IntoIterator<Item = Vec<u8>>) -> Staged {
        let file = StagedFile {
            stat: Stat {
                dev: 0,
                ino: 0,
                mode: 0o100644,
                uid: 0,
                gid: 0,
                size: 0,
                mtime: (0, 0),
                ctime: (0, 0),
            },
            kind: EntryKind::Blob,
            id: ObjectId::null(gix_hash::Kind::Sha1),
            racy: true,
        };
        Staged {
            files: keys.into_iter().map(|k| (k, file)).collect(),
            since: Instant::now(),
            index: crate::git::read_index_stamp(Path::new("/nonexistent/troupe-test-index"))
                .expect("a missing index has a stamp"),
            tree: ObjectId::null(gix_hash::Kind::Sha1),
            ignored: HashSet::new(),
            ignored_under: None,
        }
    }
}

/// The files of `walk` (relative path bytes) that a stage seeded by `previous` would hash
/// as new to the tree (all of them without one), leaving out troupe's own paths and those
/// `known_ignored`: with ignore rules, git says which of them it ignores (`git
/// check-ignore`) before staging.
pub(crate) fn new_files(
    root: &Path,
    walk: &Walk,
    previous: Option<&Staged>,
    known_ignored: &HashSet<Vec<u8>>,
    own: &[String],
) -> Vec<Vec<u8>> {
    walk.fingerprint
        .files(root)
        .map(|(rel, _)| path_bytes(rel))
        .filter(|key| previous.is_none_or(|p| !p.files.contains_key(key)))
        .filter(|key| !known_ignored.contains(key))
        .filter(|key| !is_own(key, own))
        .collect()
}

/// Whether `key` is one of `own` (relative paths) or lies under one.
pub(crate) fn is_own(key: &[u8], own: &[String]) -> bool {
    own.iter().any(|o| {
        key.strip_prefix(o.as_bytes())
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(b"/"))
    })
}

/// One tree's files, sorted by path bytes: path, mode, blob id.
pub(crate) type Listing = Vec<(Vec<u8>, EntryKind, ObjectId)>;

/// Line count and binary flag of a blob, as `git diff --numstat` counts an added or deleted
/// file: lines are `\n`-terminated, plus a last unterminated one; binary when a NUL byte is
/// in the first 8,000 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BlobInfo {
    lines: u64,
    binary: bool,
}

impl BlobInfo {
    fn of(content: &[u8]) -> Self {
        let newlines = content.iter().filter(|b| **b == b'\n').count() as u64;
        let unterminated = content.last().is_some_and(|b| *b != b'\n');
        BlobInfo {
            lines: newlines + u64::from(unterminated),
            binary: content[..content.len().min(BINARY_PROBE)].contains(&0),
        }
    }
}

/// What this process knows of a shadow repository's staged trees, for diffs without git.
#[derive(Debug, Default)]
pub(crate) struct Known {
    /// Newest first: tree and its listing.
    listings: VecDeque<(ObjectId, Arc<Listing>)>,
    blobs: HashMap<ObjectId, BlobInfo>,
}

impl Known {
    fn listing(&self, id: &ObjectId) -> Option<&Arc<Listing>> {
        self.listings.iter().find(|(t, _)| t == id).map(|(_, l)| l)
    }

    /// Records a staged tree's listing and the summaries of the blobs hashed for it.
    pub(crate) fn add(
        &mut self,
        tree: ObjectId,
        listing: Arc<Listing>,
        blobs: Vec<(ObjectId, BlobInfo)>,
    ) {
        if self.blobs.len() + blobs.len() > BLOBS_KEPT {
            self.blobs.clear();
        }
        self.blobs.extend(blobs);
        self.listings.retain(|(t, _)| *t != tree);
        self.listings.push_front((tree, listing));
        self.listings.truncate(LISTINGS_KEPT);
    }

    /// `git diff-tree -r --raw --numstat from to` computed from the listings, when both are
    /// known and no file changed content in place (that needs a line diff: git's) or type
    /// (file ↔ link: git reports those its own way). `None`: ask git.
    pub(crate) fn diff(&self, from: &ObjectId, to: &ObjectId) -> Option<Vec<FileChange>> {
        let (a, b) = (self.listing(from)?, self.listing(to)?);
        let mut out = Vec::new();
        let (mut i, mut j) = (0, 0);
        let change =
            |path: &[u8], status: ChangeStatus, lines: u64, binary: bool, after: Option<String>| {
                FileChange {
                    file: String::from_utf8_lossy(path).into_owned(),
                    status,
                    additions: if status == ChangeStatus::Added && !binary {
                        lines
                    } else {
                        0
                    },
                    deletions: if status == ChangeStatus::Deleted && !binary {
                        lines
                    } else {
                        0
                    },
                    binary,
                    patch: String::new(),
                    after,
                }
            };
        while i < a.len() || j < b.len() {
            let order = match (a.get(i), b.get(j)) {
                (Some(x), Some(y)) => x.0.cmp(&y.0),
                (Some(_), None) => std::cmp::Ordering::Less,
                _ => std::cmp::Ordering::Greater,
            };
            match order {
                std::cmp::Ordering::Less => {
                    let (path, _, id) = &a[i];
                    let info = self.blobs.get(id)?;
                    out.push(change(
                        path,
                        ChangeStatus::Deleted,
                        info.lines,
                        info.binary,
                        None,
                    ));
                    i += 1;
                }
                std::cmp::Ordering::Greater => {
                    let (path, kind, id) = &b[j];
                    let info = self.blobs.get(id)?;
                    out.push(change(
                        path,
                        ChangeStatus::Added,
                        info.lines,
                        info.binary,
                        Some(raw_side(*kind, id)),
                    ));
                    j += 1;
                }
                std::cmp::Ordering::Equal => {
                    let ((path, ka, ia), (_, kb, ib)) = (&a[i], &b[j]);
                    if ia != ib || (*ka == EntryKind::Link) != (*kb == EntryKind::Link) {
                        return None;
                    }
                    if ka != kb {
                        // The executable bit alone: `0 0` lines, as git counts it.
                        out.push(change(
                            path,
                            ChangeStatus::Modified,
                            0,
                            false,
                            Some(raw_side(*kb, ib)),
                        ));
                    }
                    i += 1;
                    j += 1;
                }
            }
        }
        Some(out)
    }
}

/// A file in git's raw diff output: `<mode> <id>` (six octal digits, the full id).
fn raw_side(kind: EntryKind, id: &ObjectId) -> String {
    format!("{:06o} {}", kind as u16, id)
}

/// Why a stage gave up (the track then runs git).
#[derive(Debug)]
pub(crate) enum NotStaged {
    /// A name git may refuse or rewrite ([`plain_name`]).
    Name(String),
    /// A regular file over [`MAX_UNTRACKED_BYTES`], or a first stage over
    /// [`STAGE_FROM_SCRATCH_BYTES`].
    TooLarge,
    /// Reading a file or writing an object failed.
    Io(String),
}

impl std::fmt::Display for NotStaged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotStaged::Name(name) => write!(f, "a name git may refuse or rewrite: {name:?}"),
            NotStaged::TooLarge => write!(f, "too much to hash in process"),
            NotStaged::Io(what) => f.write_str(what),
        }
    }
}

/// The result of one stage: the root tree, the files as staged, and what the diff cache
/// needs.
pub(crate) struct Stage {
    pub(crate) tree: ObjectId,
    pub(crate) staged: Staged,
    pub(crate) listing: Arc<Listing>,
    pub(crate) blobs: Vec<(ObjectId, BlobInfo)>,
}

/// Whether git stores a path component as it is: not `.git` in any spelling an NTFS or HFS
/// check refuses (git's `verify_path`, `core.protectNTFS` on by default: `.git` followed
/// only by dots or spaces, any case, and `git~1`), no backslash, colon or control byte
/// (refused or rewritten on some systems), and, for a symbolic link, none of the names
/// git refuses as links (`.gitmodules`, `.gitattributes`, `.gitignore`, `.mailmap`, any case,
/// and their NTFS short names: no `~` at all). `core.protectHFS` (off on Linux) is a
/// configuration `plain_config` refuses.
pub(crate) fn plain_name(component: &[u8], link: bool) -> bool {
    let lower = component.to_ascii_lowercase();
    if component.is_empty()
        || component == b"."
        || component == b".."
        || component
            .iter()
            .any(|b| *b < 0x20 || *b == b'\\' || *b == b':' || *b == 0x7f)
        || lower.starts_with(b"git~")
    {
        return false;
    }
    if let Some(rest) = lower.strip_prefix(b".git")
        && rest.iter().all(|b| *b == b'.' || *b == b' ')
    {
        return false;
    }
    // Links: git also refuses the NTFS short names of those files (`gitmod~1`, `gi7eba~2`,
    // `gi250a~1`…): any `~` leaves the name to git.
    if link
        && (lower.starts_with(b".git") || lower.starts_with(b".mailmap") || lower.contains(&b'~'))
    {
        return false;
    }
    true
}

/// An entry of an index git wrote, with the stat data git compares (gitformat-index(5):
/// 32-bit fields, times to the nanosecond).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SeedEntry {
    mode: u32,
    id: ObjectId,
    ctime: (u32, u32),
    mtime: (u32, u32),
    ino: u32,
    uid: u32,
    gid: u32,
    size: u32,
}

/// The entries of an index git wrote (`git ls-files --stage --debug -z`), by path, and the
/// index file's mtime (s, ns): what a stage without a previous one takes over where git
/// would (see [`SeedEntry::clean`]).
#[derive(Debug, Default)]
pub(crate) struct Seed {
    entries: HashMap<Vec<u8>, SeedEntry>,
    /// The index file's modification time: an entry modified at or after it is "racily
    /// clean" and git reads the file (racy-git.txt).
    pub(crate) index_mtime: (i64, i64),
}

impl SeedEntry {
    /// Whether git takes this entry's id for a file with `stat` without reading it
    /// (read-cache.c `ie_match_stat` with Linux defaults, `core.trustCtime` and
    /// `core.checkStat` as `plain` requires): same type and owner-executable bit, mtime and
    /// ctime to the nanosecond, inode, owner, group and size (all as 32-bit), and not
    /// modified in or after the second the index was written (`index_mtime`). Anything
    /// else is hashed as it is, which is what git then does too.
    fn clean(&self, stat: &Stat, index_mtime: (i64, i64)) -> bool {
        let kind_matches = match stat.mode & 0o170000 {
            0o100000 => self.mode & 0o170000 == 0o100000 && (self.mode ^ stat.mode) & 0o100 == 0,
            0o120000 => self.mode == 0o120000,
            _ => false,
        };
        let time = |t: (i64, i64)| (t.0 as u32, t.1 as u32);
        // Racy by whole seconds: git built without `USE_NSEC` (the default) compares only
        // those; one built with it would find some of these clean and keep the id (a
        // difference only for content a removed filter had converted, within a second).
        let racy = i64::from(self.mtime.0) >= index_mtime.0;
        kind_matches
            && self.mtime == time(stat.mtime)
            && self.ctime == time(stat.ctime)
            && self.ino == stat.ino as u32
            && self.uid == stat.uid
            && self.gid == stat.gid
            && self.size == stat.size as u32
            && !racy
    }
}

impl Seed {
    /// Parses `git ls-files --stage --debug -z`: per entry `<mode> <id> <stage>\t<path>\0`,
    /// then indented `ctime: s:ns`, `mtime: s:ns`, `dev: n\tino: n`, `uid: n\tgid: n`,
    /// `size: n\tflags: x` lines. `None` when anything is not that shape, or an entry is
    /// one staging cannot make or keep (a submodule's commit, a conflict stage, any flag:
    /// assume-unchanged, skip-worktree, intent-to-add): git stages.
    pub(crate) fn parse(out: &[u8], index_mtime: (i64, i64)) -> Option<Seed> {
        let mut entries = HashMap::new();
        let mut rest = out;
        while !rest.is_empty() {
            let nul = rest.iter().position(|b| *b == 0)?;
            let (head, after) = (&rest[..nul], &rest[nul + 1..]);
            let tab = head.iter().position(|b| *b == b'\t')?;
            let (meta, path) = (std::str::from_utf8(&head[..tab]).ok()?, &head[tab + 1..]);
            let mut meta = meta.split(' ');
            let mode = u32::from_str_radix(meta.next()?, 8).ok()?;
            let id = ObjectId::from_hex(meta.next()?.as_bytes()).ok()?;
            if meta.next()? != "0" || !matches!(mode, 0o100644 | 0o100755 | 0o120000) {
                return None;
            }
            // Six indented lines of stat data, up to the next entry.
            let mut fields: HashMap<&str, &str> = HashMap::new();
            let mut taken = 0;
            for _ in 0..5 {
                let end = after[taken..].iter().position(|b| *b == b'\n')? + taken;
                let line = std::str::from_utf8(&after[taken..end]).ok()?;
                for field in line.trim().split('\t') {
                    let (k, v) = field.split_once(": ")?;
                    fields.insert(k, v);
                }
                taken = end + 1;
            }
            rest = &after[taken..];
            let pair = |v: &str| -> Option<(u32, u32)> {
                let (a, b) = v.split_once(':')?;
                Some((a.parse().ok()?, b.parse().ok()?))
            };
            let number = |k: &str| -> Option<u32> { fields.get(k)?.parse().ok() };
            if u32::from_str_radix(fields.get("flags")?, 16).ok()? != 0 {
                return None;
            }
            entries.insert(
                path.to_vec(),
                SeedEntry {
                    mode,
                    id,
                    ctime: pair(fields.get("ctime")?)?,
                    mtime: pair(fields.get("mtime")?)?,
                    ino: number("ino")?,
                    uid: number("uid")?,
                    gid: number("gid")?,
                    size: number("size")?,
                },
            );
        }
        Some(Seed {
            entries,
            index_mtime,
        })
    }
}

/// What a stage leaves out besides what the walk skipped.
pub(crate) struct Leave<'a> {
    /// Troupe's own paths (relative; everything under them too).
    pub(crate) own: &'a [String],
    /// Files git said it ignores (relative path bytes; from [`new_files`]).
    pub(crate) ignored: &'a HashSet<Vec<u8>>,
    /// The index git wrote, for a stage without a previous one: a file whose stat data
    /// git would find clean keeps the entry's id, as `git add` keeps it (content that a
    /// filter since removed had converted stays converted until the file changes).
    pub(crate) seed: Option<&'a Seed>,
}

/// Stages the files `walk` recorded under `root` into the loose object store of `git_dir`
/// (blocking): hashes each file whose stat is not the one `previous` hashed it under, writes
/// the blobs and trees the store lacks (one `stat` of the object file each), and returns the
/// root tree. `leave` is left out; `index` is the shadow index's stamp now.
pub(crate) fn stage(
    root: &Path,
    git_dir: &Path,
    walk: &Walk,
    previous: Option<Staged>,
    leave: &Leave<'_>,
    index: IndexStamp,
) -> Result<Stage, NotStaged> {
    // Hashes older than `STAGED_REUSE` are not trusted (their objects may be collected).
    let previous = previous.filter(|p| p.since.elapsed() < STAGED_REUSE);
    let fresh = previous.is_none();
    let since = previous.as_ref().map_or_else(Instant::now, |p| p.since);
    let old = previous.map(|p| p.files).unwrap_or_default();
    let store =
        gix_odb::loose::Store::at(git_dir.join("objects"), gix_odb::loose::Options::default());
    let ensure = |kind: Kind, bytes: &[u8], id: ObjectId| -> Result<(), NotStaged> {
        if store.contains(&id) {
            // As git's `write_object_file` does: an object written again is fresh, so a gc
            // (`--prune=7.days`) never takes one a track has just returned.
            // (Loose objects are read-only files; the owner may still set their times.)
            let _ = std::fs::File::open(store.object_path(&id))
                .and_then(|f| f.set_modified(std::time::SystemTime::now()));
            return Ok(());
        }
        gix_object::Write::write_buf_with_known_id(&store, kind, bytes, id)
            .map(|_| ())
            .map_err(|e| NotStaged::Io(format!("writing object {id}: {e}")))
    };
    let mut files = BTreeMap::new();
    let mut ignored = HashSet::new();
    let mut blobs = Vec::new();
    let mut read_bytes: u64 = 0;
    for (rel, stat) in walk.fingerprint.files(root) {
        let kind = match stat.mode() & 0o170000 {
            0o100000 if stat.mode() & 0o100 != 0 => EntryKind::BlobExecutable,
            0o100000 => EntryKind::Blob,
            0o120000 => EntryKind::Link,
            _ => continue,
        };
        let key = path_bytes(rel);
        if leave.ignored.contains(&key) {
            ignored.insert(key);
            continue;
        }
        if is_own(&key, leave.own) {
            continue;
        }
        let link = kind == EntryKind::Link;
        if let Some(prev) = old.get(&key)
            && prev.stat == stat
            && prev.kind == kind
            && !prev.racy
        {
            // Its name passed when it was first staged.
            files.insert(key, *prev);
            continue;
        }
        let mut components = key.split(|b| *b == b'/').peekable();
        while let Some(component) = components.next() {
            if !plain_name(component, link && components.peek().is_none()) {
                return Err(NotStaged::Name(
                    String::from_utf8_lossy(component).into_owned(),
                ));
            }
        }
        if let Some(seed) = leave.seed
            && let Some(entry) = seed.entries.get(&key)
            && entry.clean(&stat, seed.index_mtime)
        {
            files.insert(
                key,
                StagedFile {
                    stat,
                    kind,
                    id: entry.id,
                    racy: stat.racy(walk.taken),
                },
            );
            continue;
        }
        if kind != EntryKind::Link && stat.size() > MAX_UNTRACKED_BYTES {
            return Err(NotStaged::TooLarge);
        }
        let path = root.join(rel);
        let content = if link {
            std::fs::read_link(&path).map(|t| path_bytes(&t))
        } else {
            std::fs::read(&path)
        }
        .map_err(|e| NotStaged::Io(format!("reading {}: {e}", path.display())))?;
        read_bytes += content.len() as u64;
        if fresh && read_bytes > STAGE_FROM_SCRATCH_BYTES {
            return Err(NotStaged::TooLarge);
        }
        let id = gix_object::compute_hash(gix_hash::Kind::Sha1, Kind::Blob, &content)
            .map_err(|e| NotStaged::Io(format!("hashing {}: {e}", path.display())))?;
        ensure(Kind::Blob, &content, id)?;
        blobs.push((id, BlobInfo::of(&content)));
        files.insert(
            key,
            StagedFile {
                stat,
                kind,
                id,
                racy: stat.racy(walk.taken),
            },
        );
    }
    let mut listing = Vec::with_capacity(files.len());
    // Open directories, outermost first: their path with a trailing `/` (empty for the
    // root) and their entries so far. Paths sorted by bytes visit each directory's files in
    // one run, its subdirectories inside that run.
    let mut open: Vec<(Vec<u8>, Vec<Entry>)> = vec![(Vec::new(), Vec::new())];
    let close = |open: &mut Vec<(Vec<u8>, Vec<Entry>)>| -> Result<(), NotStaged> {
        let (prefix, entries) = open.pop().expect("a directory is open");
        let id = write_tree(entries, &ensure)?;
        let name = prefix[..prefix.len() - 1]
            .rsplit(|b| *b == b'/')
            .next()
            .unwrap_or_default()
            .to_vec();
        open.last_mut().expect("the root stays open").1.push(Entry {
            mode: EntryKind::Tree.into(),
            filename: name.into(),
            oid: id,
        });
        Ok(())
    };
    for (path, file) in &files {
        let (dir, name) = match path.iter().rposition(|b| *b == b'/') {
            Some(at) => (&path[..=at], &path[at + 1..]),
            None => (&path[..0], &path[..]),
        };
        while !dir.starts_with(&open.last().expect("root").0) {
            close(&mut open)?;
        }
        while open.last().expect("root").0.len() < dir.len() {
            let start = open.last().expect("root").0.len();
            let end = start
                + dir[start..]
                    .iter()
                    .position(|b| *b == b'/')
                    .expect("a directory path ends with '/'")
                + 1;
            open.push((dir[..end].to_vec(), Vec::new()));
        }
        open.last_mut().expect("root").1.push(Entry {
            mode: file.kind.into(),
            filename: name.to_vec().into(),
            oid: file.id,
        });
        listing.push((path.clone(), file.kind, file.id));
    }
    while open.len() > 1 {
        close(&mut open)?;
    }
    let (_, entries) = open.pop().expect("root");
    let tree = write_tree(entries, &ensure)?;
    Ok(Stage {
        tree,
        staged: Staged {
            files,
            since,
            index,
            tree,
            ignored,
            ignored_under: (!walk.rules_racy).then(|| walk.rules.clone()),
        },
        listing: Arc::new(listing),
        blobs,
    })
}

/// Makes sure the store has an object (kind, encoded bytes, id).
type Ensure<'a> = dyn Fn(Kind, &[u8], ObjectId) -> Result<(), NotStaged> + 'a;

/// Encodes a tree of `entries` (sorted here as git sorts them), hashes it and makes sure the
/// store has it.
fn write_tree(mut entries: Vec<Entry>, ensure: &Ensure<'_>) -> Result<ObjectId, NotStaged> {
    entries.sort();
    let tree = Tree { entries };
    let mut bytes = Vec::with_capacity(tree.size() as usize);
    tree.write_to(&mut bytes)
        .map_err(|e| NotStaged::Io(format!("encoding a tree: {e}")))?;
    let id = gix_object::compute_hash(gix_hash::Kind::Sha1, Kind::Tree, &bytes)
        .map_err(|e| NotStaged::Io(format!("hashing a tree: {e}")))?;
    ensure(Kind::Tree, &bytes, id)?;
    Ok(id)
}

/// A relative path's bytes, `/`-separated.
pub(crate) fn path_bytes(path: &Path) -> Vec<u8> {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        path.as_os_str().as_bytes().to_vec()
    }
    #[cfg(not(unix))]
    {
        path.to_string_lossy().replace('\\', "/").into_bytes()
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn lines_are_counted_as_git_numstat_counts_them() {
        assert_eq!(
            BlobInfo::of(b""),
            BlobInfo {
                lines: 0,
                binary: false
            }
        );
        assert_eq!(
            BlobInfo::of(b"a"),
            BlobInfo {
                lines: 1,
                binary: false
            }
        );
        assert_eq!(
            BlobInfo::of(b"a\n"),
            BlobInfo {
                lines: 1,
                binary: false
            }
        );
        assert_eq!(
            BlobInfo::of(b"a\n\nb"),
            BlobInfo {
                lines: 3,
                binary: false
            }
        );
        assert!(BlobInfo::of(b"a\0b\n").binary);
        let mut late = vec![b'x'; BINARY_PROBE];
        late.push(0);
        assert!(
            !BlobInfo::of(&late).binary,
            "a NUL past the probe is not looked at"
        );
    }

    #[test]
    fn names_git_may_refuse_are_not_staged() {
        for bad in [
            &b".git"[..],
            b".GIT",
            b".git.",
            b".git ",
            b"git~1",
            b"a\\b",
            b"a:b",
            b"a\nb",
            b"..",
            b"",
        ] {
            assert!(
                !plain_name(bad, false),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        for good in [
            &b".github"[..],
            b".gitignore",
            b".gitkeep",
            b"src",
            b"a b",
            b"\xff.txt",
        ] {
            assert!(
                plain_name(good, false),
                "{:?}",
                String::from_utf8_lossy(good)
            );
        }
        assert!(!plain_name(b".gitmodules", true));
        assert!(!plain_name(b".Mailmap", true));
        assert!(!plain_name(b"gitmod~1", true));
        assert!(!plain_name(b"GI7EBA~3", true));
        assert!(plain_name(b"link", true));
    }
}
