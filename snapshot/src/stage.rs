//! Staging a work tree without git: the blobs and trees `git add --all` + `git write-tree`
//! would write, written in this process as loose objects (gix-odb), and the diffs between
//! such trees computed from what staging saw.
//!
//! Each git process costs ~1.5–2 ms of CPU on a small VM, most of it starting the process;
//! a step that writes a file used to run `add`, `write-tree` and `diff-tree`. Staging runs
//! only when the fingerprint walk (`fingerprint`) already lists exactly what `git add --all`
//! would stage ([`Walk::stageable`]): no ignore rule anywhere (no `.gitignore`, no pattern in
//! any excludes file, so no own file inside the work tree either), no attributes file (no
//! filter, no end-of-line conversion), a plain configuration (`plain_config`), no file over
//! [`MAX_UNTRACKED_BYTES`], and names git takes as they are ([`plain_name`]). Anything else,
//! and any error, leaves the track to git as before.
//!
//! What git would store, per walked entry (git's `ce_mode_from_stat` and `treat_path`): a
//! regular file is a blob of its bytes, mode `100755` when its owner may execute it and
//! `100644` otherwise; a symbolic link a blob of its target (`120000`); anything else
//! (FIFOs, sockets, devices) is left out; directories holding no file are left out. Trees
//! are git's tree objects of those entries (sorted as git sorts them: `gix_object`).
//!
//! A file is hashed again only when its `lstat` differs from the one recorded when it was
//! last hashed, or when that one was racy (within [`RACY_MARGIN`](crate::fingerprint) of
//! its walk: a change in the same clock tick could keep it); the stat is taken before the
//! content is read, so a change in between shows next time.
//!
//! The shadow index is not written: it falls behind the trees staged here. Before any git
//! command that reads the index runs, [`Snapshot::flush_index`] makes it hold the last
//! staged tree (`git read-tree`), so git's own path starts from exactly what staging left
//! (its entries carry no stat data, so the next `git add` hashes those files again).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use gix_hash::ObjectId;
use gix_object::tree::{Entry, EntryKind};
use gix_object::{Kind, Tree, WriteTo};

use crate::fingerprint::{Stat, Walk};
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
    /// Per relative path (bytes, `/`-separated, sorted as git sorts paths).
    files: BTreeMap<Vec<u8>, StagedFile>,
    /// When the first of these files was hashed (see [`STAGED_REUSE`]).
    since: Instant,
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
    /// Newest first: tree, its listing, when it was last staged (`None` once a gc ran since:
    /// its objects may be gone).
    listings: VecDeque<(ObjectId, Arc<Listing>, Option<Instant>)>,
    blobs: HashMap<ObjectId, BlobInfo>,
}

impl Known {
    fn listing(&self, id: &ObjectId) -> Option<&Arc<Listing>> {
        self.listings
            .iter()
            .find(|(t, _, _)| t == id)
            .map(|(_, l, _)| l)
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
        self.listings.retain(|(t, _, _)| *t != tree);
        self.listings
            .push_front((tree, listing, Some(Instant::now())));
        self.listings.truncate(LISTINGS_KEPT);
    }

    /// Whether `tree` was staged (so written) less than [`STAGED_REUSE`] ago: its objects
    /// are still in the store.
    pub(crate) fn has(&self, tree: &ObjectId) -> bool {
        self.listings
            .iter()
            .any(|(t, _, at)| t == tree && at.is_some_and(|at| at.elapsed() < STAGED_REUSE))
    }

    /// A gc ran: no staged tree's objects are known to exist any more (the listings still
    /// serve diffs, which read no object).
    pub(crate) fn gc_ran(&mut self) {
        for (_, _, at) in &mut self.listings {
            *at = None;
        }
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
/// git refuses as links (`.gitmodules`, `.gitattributes`, `.gitignore`, `.mailmap`, any case).
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
    if link && (lower.starts_with(b".git") || lower.starts_with(b".mailmap")) {
        return false;
    }
    true
}

/// Stages the files `walk` recorded under `root` into the loose object store of `git_dir`
/// (blocking): hashes each file whose stat is not the one `previous` hashed it under, writes
/// the blobs and trees the store lacks, and returns the root tree. `known` names objects
/// known to exist (skips a `stat` of the object file each).
pub(crate) fn stage(
    root: &Path,
    git_dir: &Path,
    walk: &Walk,
    previous: Option<Staged>,
    known: &dyn Fn(&ObjectId) -> bool,
) -> Result<Stage, NotStaged> {
    let previous = previous.filter(|p| p.since.elapsed() < STAGED_REUSE);
    let fresh = previous.is_none();
    let since = previous.as_ref().map_or_else(Instant::now, |p| p.since);
    let old = previous.map(|p| p.files).unwrap_or_default();
    let store =
        gix_odb::loose::Store::at(git_dir.join("objects"), gix_odb::loose::Options::default());
    let ensure = |kind: Kind, bytes: &[u8], id: ObjectId| -> Result<(), NotStaged> {
        if known(&id) || store.contains(&id) {
            return Ok(());
        }
        gix_object::Write::write_buf_with_known_id(&store, kind, bytes, id)
            .map(|_| ())
            .map_err(|e| NotStaged::Io(format!("writing object {id}: {e}")))
    };
    let mut files = BTreeMap::new();
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
        let link = kind == EntryKind::Link;
        let components = key.split(|b| *b == b'/').collect::<Vec<_>>();
        let last = components.len() - 1;
        if let Some((i, bad)) = components
            .iter()
            .enumerate()
            .find(|(i, c)| !plain_name(c, link && *i == last))
        {
            let _ = i;
            return Err(NotStaged::Name(String::from_utf8_lossy(bad).into_owned()));
        }
        if let Some(prev) = old.get(&key)
            && prev.stat == stat
            && prev.kind == kind
            && !prev.racy
        {
            files.insert(key, *prev);
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
        staged: Staged { files, since },
        listing: Arc::new(listing),
        blobs,
    })
}

/// Encodes a tree of `entries` (sorted here as git sorts them), hashes it and makes sure the
/// store has it.
fn write_tree(
    mut entries: Vec<Entry>,
    ensure: &dyn Fn(Kind, &[u8], ObjectId) -> Result<(), NotStaged>,
) -> Result<ObjectId, NotStaged> {
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
fn path_bytes(path: &Path) -> Vec<u8> {
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
        assert!(plain_name(b"link", true));
    }
}
