//! Step snapshots (issue 15): the glue between the processor and `troupe-snapshot`.
//!
//! Each step tracks the project before its tool calls run (concurrently with the model's
//! stream: tools only start once the stream ended, so the tree is taken before any tool can
//! change a file) and again after they all finished. The two trees go on the step's
//! `step-start` / `step-finish` parts; when they differ a `patch` part lists the changed files
//! (whatever changed them: `edit`, `write`, `bash`). The session's file-change summary is the
//! diff from its first snapshot to its last, published as `session.diff`.
//!
//! Every git call runs in a spawned task whose result comes back to the processor as a
//! message, so no actor handler waits for git.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use troupe_session::SessionId;

use dashmap::DashMap;
use troupe_session::{Event, FileDiff, PartKind, SessionSummary, Write};
use troupe_snapshot::{FileChange, Snapshot, Unavailable};

use crate::RuntimeShared;

/// Longest wait for one snapshot (a `git gc` of another process may hold the repository's
/// lock for a while); past it the step goes on without that snapshot.
pub const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(60);

/// Snapshot services of a runtime: one shadow repository per project, opened once.
#[derive(Debug, Default)]
pub struct Snapshots {
    /// troupe's data directory (`<data>/snapshot/…` holds the shadow repositories); `None`:
    /// snapshots off (library default, so tests never write outside their temp dirs).
    data_dir: Option<PathBuf>,
    /// `"snapshot": false`.
    disabled: bool,
    /// Files of the process kept out of every snapshot ([`RuntimeOptions::own_files`]).
    own_files: Vec<PathBuf>,
    /// Opened (or refused) per session directory.
    by_dir: DashMap<String, Result<Snapshot, Unavailable>>,
    /// Per session: its first snapshot (where the session diff starts).
    first: DashMap<SessionId, String>,
    /// Per session: the summary computed after its last step, with the trees it spans and
    /// the per-file changes it came from.
    summaries: DashMap<SessionId, Summarized>,
}

impl Snapshots {
    /// Snapshots kept under `data_dir` (`None`: off); `disabled` is `"snapshot": false`;
    /// `own_files` are never snapshotted ([`RuntimeOptions::own_files`]).
    pub fn new(data_dir: Option<PathBuf>, disabled: bool, own_files: Vec<PathBuf>) -> Self {
        Self {
            data_dir,
            disabled,
            own_files,
            ..Default::default()
        }
    }

    /// The snapshot service of `directory`, or why there is none. Opened once per directory;
    /// why snapshots are off for a directory is said once on the bus (`session.notice`, for
    /// `session_id`): once ever per directory and data directory (a marker file in
    /// `<data>/snapshot/notices/`).
    pub async fn for_dir(
        &self,
        shared: &RuntimeShared,
        directory: &str,
        session_id: &SessionId,
    ) -> Result<Snapshot, Unavailable> {
        let Some(data) = &self.data_dir else {
            return Err(Unavailable::Disabled);
        };
        if self.disabled {
            return Err(Unavailable::Disabled);
        }
        if let Some(s) = self.by_dir.get(directory) {
            return s.clone();
        }
        let opened = Snapshot::open(data, Path::new(directory), &self.own_files).await;
        let first = match self.by_dir.entry(directory.to_string()) {
            dashmap::Entry::Occupied(e) => return e.get().clone(),
            dashmap::Entry::Vacant(v) => {
                v.insert(opened.clone());
                true
            }
        };
        if first && let Err(why) = &opened {
            tracing::warn!("{why}");
            // Said once per directory: a marker under the data directory remembers it, so
            // running troupe outside git again and again does not repeat it every time.
            let marker = data
                .join("snapshot")
                .join("notices")
                .join(troupe_snapshot::path_hash(Path::new(directory)));
            if tokio::fs::metadata(&marker).await.is_err() {
                let written = match marker.parent() {
                    Some(dir) => tokio::fs::create_dir_all(dir).await.is_ok(),
                    None => false,
                } && tokio::fs::write(&marker, why.to_string()).await.is_ok();
                if !written {
                    tracing::warn!(marker = %marker.display(), "snapshot notice marker not written");
                }
                shared.store.write1(Write::Publish(Event::SessionNotice {
                    session_id: session_id.clone(),
                    message: why.to_string(),
                }));
            }
        }
        opened
    }

    /// Forget what is cached about a session (its history was cut by a revert).
    pub fn forget(&self, session_id: &SessionId) {
        self.first.remove(session_id);
        self.summaries.remove(session_id);
    }

    /// The summary computed after the session's last step, if snapshots are on for it.
    pub fn summary(&self, session_id: &SessionId) -> Option<SessionSummary> {
        self.summaries.get(session_id).map(|s| s.summary.clone())
    }
}

/// A session's file-change summary from its first snapshot to `last`.
#[derive(Debug, Clone)]
struct Summarized {
    first: String,
    last: String,
    summary: SessionSummary,
    changes: Arc<Vec<FileChange>>,
}

/// Where a step's snapshots are.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub enum StepSnap {
    /// Snapshots off, or the step's work is done.
    #[default]
    Off,
    /// The tree before the step is being taken.
    Starting,
    /// Taken (or failed: `None`); the finish snapshot is not started yet.
    Started(Option<String>),
    /// The tree after the step is being taken.
    Finishing,
    /// Everything recorded.
    Done,
}

/// What a finished step's snapshot task found.
#[derive(Debug)]
pub struct Finished {
    /// Tree after the step.
    pub tree: Option<String>,
    /// The `patch` part to add, when the step changed files.
    pub patch: Option<PartKind>,
}

/// Starts taking the tree before a step; `done` gets it (or `None` when snapshots are off
/// or it failed) from a spawned task. Returns the initial [`StepSnap`] state.
pub fn begin(
    shared: &Arc<RuntimeShared>,
    directory: &Path,
    session_id: &SessionId,
    done: impl FnOnce(Option<String>) + Send + 'static,
) -> StepSnap {
    if shared.snapshots.data_dir.is_none() || shared.snapshots.disabled {
        return StepSnap::Off;
    }
    let (shared, dir, sid) = (
        shared.clone(),
        directory.display().to_string(),
        session_id.clone(),
    );
    tokio::spawn(async move {
        let tree = match shared.snapshots.for_dir(&shared, &dir, &sid).await {
            Ok(s) => match tokio::time::timeout(SNAPSHOT_TIMEOUT, s.track()).await {
                Ok(Ok(t)) => Some(t),
                Ok(Err(e)) => {
                    tracing::warn!(session = %sid, "snapshot before the step failed: {e}");
                    None
                }
                Err(_) => {
                    tracing::warn!(session = %sid, "snapshot before the step timed out");
                    None
                }
            },
            Err(_) => None,
        };
        done(tree);
    });
    StepSnap::Starting
}

/// Takes the tree after a step that started at `start`, the changed files, and refreshes the
/// session's summary (publishing `session.diff` when it changed); `done` gets the result.
pub fn finish(
    shared: &Arc<RuntimeShared>,
    directory: &Path,
    session_id: &SessionId,
    start: String,
    done: impl FnOnce(Finished) + Send + 'static,
) {
    let (shared, dir, sid) = (
        shared.clone(),
        directory.display().to_string(),
        session_id.clone(),
    );
    tokio::spawn(async move {
        let result = match shared.snapshots.for_dir(&shared, &dir, &sid).await {
            Ok(s) => tokio::time::timeout(SNAPSHOT_TIMEOUT, after_step(&shared, &s, &sid, &start))
                .await
                .unwrap_or_else(|_| {
                    tracing::warn!(session = %sid, "snapshot after the step timed out");
                    Finished {
                        tree: None,
                        patch: None,
                    }
                }),
            Err(_) => Finished {
                tree: None,
                patch: None,
            },
        };
        done(result);
    });
}

async fn after_step(
    shared: &RuntimeShared,
    s: &Snapshot,
    sid: &SessionId,
    start: &str,
) -> Finished {
    let tree = match s.track().await {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(session = %sid, "snapshot after the step failed: {e}");
            return Finished {
                tree: None,
                patch: None,
            };
        }
    };
    let first = first_of(shared, sid, start).await;
    // The session diff up to this step's start, when the previous step left it there (or
    // the session starts here): then this step's files come from the two session diffs,
    // without a git process of their own.
    let before = if first == start {
        Some(Arc::new(Vec::new()))
    } else {
        shared
            .snapshots
            .summaries
            .get(sid)
            .filter(|p| p.first == first && p.last == start)
            .map(|p| p.changes.clone())
    };
    let after = refresh_summary(shared, s, sid, &first, &tree).await;
    let files = match (before, after) {
        _ if tree == start => Vec::new(),
        (Some(before), Some(after)) => troupe_snapshot::files_between(&before, &after)
            .iter()
            .map(|rel| s.work_tree().join(rel))
            .collect(),
        _ => match s.changed_files(start, &tree).await {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(session = %sid, "files changed by the step unknown: {e}");
                Vec::new()
            }
        },
    };
    let patch = (!files.is_empty()).then(|| PartKind::Patch {
        hash: start.to_string(),
        files: files.iter().map(|f| f.display().to_string()).collect(),
    });
    Finished {
        tree: Some(tree),
        patch,
    }
}

/// The session's first snapshot (where its diff starts): once per session and process, the
/// earliest step-start snapshot in the store, or `start` (this step's) when it has none.
async fn first_of(shared: &RuntimeShared, sid: &SessionId, start: &str) -> String {
    if let Some(f) = shared.snapshots.first.get(sid) {
        return f.clone();
    }
    let id = sid.clone();
    let stored = shared
        .store
        .read(move |r| r.messages(&id))
        .await
        .ok()
        .and_then(|h| first_snapshot(&h));
    let f = stored.unwrap_or_else(|| start.to_string());
    shared.snapshots.first.insert(sid.clone(), f.clone());
    f
}

/// Recomputes the session's summary from `first` to `last` and publishes it (skipped when
/// neither end moved: the trees are content hashes, so the diff would be the same). Returns
/// the per-file changes from `first` to `last`; `None` when the diff failed.
async fn refresh_summary(
    shared: &RuntimeShared,
    s: &Snapshot,
    sid: &SessionId,
    first: &str,
    last: &str,
) -> Option<Arc<Vec<FileChange>>> {
    if let Some(prev) = shared.snapshots.summaries.get(sid)
        && prev.first == first
        && prev.last == last
    {
        return Some(prev.changes.clone());
    }
    let changes = match s.diff(first, last).await {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(session = %sid, "session diff failed: {e}");
            return None;
        }
    };
    let summary = summary_of(&changes);
    let diff = serde_json::to_value(&changes).unwrap_or_default();
    let changes = Arc::new(changes);
    shared.snapshots.summaries.insert(
        sid.clone(),
        Summarized {
            first: first.to_string(),
            last: last.to_string(),
            summary,
            changes: changes.clone(),
        },
    );
    shared.store.write1(Write::Publish(Event::SessionDiff {
        session_id: sid.clone(),
        diff,
    }));
    Some(changes)
}

/// The first `step-start` snapshot of a history, if any.
pub fn first_snapshot(history: &[troupe_session::MessageWithParts]) -> Option<String> {
    history
        .iter()
        .flat_map(|m| &m.parts)
        .find_map(|p| match &p.kind {
            PartKind::StepStart {
                snapshot: Some(s), ..
            } => Some(s.clone()),
            _ => None,
        })
}

/// The last `step-finish` snapshot of a history, if any.
pub fn last_snapshot(history: &[troupe_session::MessageWithParts]) -> Option<String> {
    history
        .iter()
        .flat_map(|m| &m.parts)
        .rev()
        .find_map(|p| match &p.kind {
            PartKind::StepFinish {
                snapshot: Some(s), ..
            } => Some(s.clone()),
            _ => None,
        })
}

/// A session summary from per-file changes.
pub fn summary_of(changes: &[FileChange]) -> SessionSummary {
    let mut summary = SessionSummary::default();
    for c in changes {
        summary.additions += c.additions;
        summary.deletions += c.deletions;
    }
    summary.files = changes.len() as u64;
    summary.diffs = changes
        .iter()
        .map(|c| FileDiff {
            file: c.file.clone(),
            additions: c.additions,
            deletions: c.deletions,
        })
        .collect();
    summary
}
