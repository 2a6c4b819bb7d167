//! Revert, unrevert, fork and the session diff (issue 15), with OpenCode's semantics
//! (`session/revert.ts`, `Session.fork`; engine notes §11.4).
//!
//! - **Revert** to a message (or a part): every `patch` part after that point is undone in
//!   the project (each file back as the earliest such step found it; a file that did not
//!   exist then is deleted), and the later messages are hidden (`session.revert`) until the
//!   next prompt deletes them ([`cleanup`]). Refused while the session is busy here or
//!   driven by another process; the session's lease is held for the duration, so no prompt
//!   starts halfway.
//! - **Unrevert** puts the files the revert touched back as they were just before it.
//! - **Fork** copies the history before a message into a new session with fresh ids.

use std::path::PathBuf;
use troupe_session::{MessageId, PartId, SessionId};

use troupe_session::{
    Message, MessageWithParts, Part, PartKind, Session, SessionRevert, Write, now_ms,
};
use troupe_snapshot::{FileChange, Patch, Snapshot};

use std::time::Duration;

use crate::{Runtime, RuntimeError, RuntimeShared, lease};

/// Longest wait for an idle session actor of this process to release its lease before a
/// revert or unrevert (it releases it as it stops, right after its turn).
pub const IDLE_RELEASE_WAIT: Duration = Duration::from_secs(2);

/// Status of the live actor of session `id` in the tree, if any.
fn session_status(node: &crate::tree::ActorNode, id: &str) -> Option<crate::tree::ActorStatus> {
    if node.kind == crate::tree::Kind::Session && node.id == id {
        return Some(node.status);
    }
    node.children.iter().find_map(|c| session_status(c, id))
}

/// Where a revert goes back to, and the patches after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevertPoint {
    /// Message reverted to.
    pub message_id: MessageId,
    /// Part reverted to (the revert keeps the parts before it).
    pub part_id: Option<PartId>,
    /// The `patch` parts after the point, oldest first.
    pub patches: Vec<Patch>,
}

/// Finds the revert point for `message_id` / `part_id` in `history` (OpenCode rules): a part
/// with a text or tool part before it in its message reverts to that part; otherwise the
/// revert goes to the last user message at or before the target, which is hidden too.
/// `None` when the message (or the part in it) is not in the history.
pub fn revert_point(
    history: &[MessageWithParts],
    message_id: &MessageId,
    part_id: Option<&PartId>,
) -> Option<RevertPoint> {
    let ti = history.iter().position(|m| m.info.id() == message_id)?;
    let mut start: (usize, usize) = (ti, 0);
    let mut point_part = None;
    if let Some(pid) = part_id {
        let pi = history[ti].parts.iter().position(|p| p.id == *pid)?;
        let content_before = history[ti].parts[..pi]
            .iter()
            .any(|p| matches!(p.kind, PartKind::Text { .. } | PartKind::Tool { .. }));
        if content_before {
            start = (ti, pi);
            point_part = Some(pid.clone());
        }
    }
    let mut point_message = history[ti].info.id().clone();
    if point_part.is_none() {
        let ui = history[..=ti]
            .iter()
            .rposition(|m| matches!(m.info, Message::User(_)))
            .unwrap_or(0);
        start = (ui, 0);
        point_message = history[ui].info.id().clone();
    }
    let mut patches = Vec::new();
    for (mi, m) in history.iter().enumerate().skip(start.0) {
        let from = if mi == start.0 { start.1 } else { 0 };
        for p in &m.parts[from.min(m.parts.len())..] {
            if let PartKind::Patch { hash, files } = &p.kind {
                patches.push(Patch {
                    hash: hash.clone(),
                    files: files.iter().map(PathBuf::from).collect(),
                });
            }
        }
    }
    Some(RevertPoint {
        message_id: point_message,
        part_id: point_part,
        patches,
    })
}

/// The history a session shows: without what a pending revert hides.
pub fn visible(session: &Session, history: &[MessageWithParts]) -> Vec<MessageWithParts> {
    let Some(rev) = &session.revert else {
        return history.to_vec();
    };
    let mut out = Vec::new();
    for m in history {
        if *m.info.id() < rev.message_id {
            out.push(m.clone());
        } else if *m.info.id() == rev.message_id {
            if let Some(pid) = &rev.part_id {
                let mut m = m.clone();
                m.parts.retain(|p| p.id.as_str() < pid.as_str());
                out.push(m);
            }
            break;
        } else {
            break;
        }
    }
    out
}

/// At the next prompt: deletes the messages (and parts) a pending revert hid and clears
/// `session.revert`; returns the history that remains. Store writes are queued; no read.
pub(crate) fn cleanup(
    shared: &RuntimeShared,
    mut session: Session,
    history: Vec<MessageWithParts>,
) -> (Session, Vec<MessageWithParts>) {
    let Some(rev) = session.revert.take() else {
        return (session, history);
    };
    let kept = visible(
        &Session {
            revert: Some(rev.clone()),
            ..session.clone()
        },
        &history,
    );
    let mut writes = Vec::new();
    for m in &history {
        match kept.iter().find(|k| k.info.id() == m.info.id()) {
            None => writes.push(Write::RemoveMessage {
                session_id: session.id.clone(),
                message_id: m.info.id().clone(),
            }),
            Some(k) => {
                for p in &m.parts {
                    if !k.parts.iter().any(|q| q.id == p.id) {
                        writes.push(Write::RemovePart(p.clone()));
                    }
                }
            }
        }
    }
    session.time.updated = now_ms();
    writes.push(Write::Session {
        info: session.clone(),
        created: false,
    });
    shared.store.write(writes);
    shared.snapshots.forget(&session.id);
    (session, kept)
}

/// `<title> (fork #n)`: the next fork number after the one the title has.
pub fn fork_title(title: &str) -> String {
    if let Some(open) = title.rfind(" (fork #")
        && let Some(n) = title[open + 8..]
            .strip_suffix(')')
            .and_then(|n| n.parse::<u32>().ok())
    {
        return format!("{} (fork #{})", &title[..open], n.saturating_add(1));
    }
    format!("{title} (fork #1)")
}

impl Runtime {
    async fn load(
        &self,
        session_id: &SessionId,
    ) -> Result<(Session, Vec<MessageWithParts>), RuntimeError> {
        let sid = session_id.clone();
        let (session, history) = self
            .shared
            .store
            .read(move |r| {
                let s = r.find_session(&sid)?;
                let h = match &s {
                    Some(s) => r.messages(&s.id)?,
                    None => Vec::new(),
                };
                Ok((s, h))
            })
            .await?;
        let session = session.ok_or_else(|| RuntimeError::SessionNotFound(session_id.clone()))?;
        Ok((session, history))
    }

    /// Holds the session's lease for a revert or unrevert, or says why not: the session runs
    /// a turn here, or another process drives it. A session of this process that just
    /// finished its turn still holds its lease while its actor stops: that release is waited
    /// for (up to [`IDLE_RELEASE_WAIT`]).
    async fn exclusive(
        &self,
        session: &Session,
        what: &str,
    ) -> Result<lease::SessionLease, RuntimeError> {
        let busy = |owner: String, since: String| RuntimeError::SessionBusy {
            session_id: session.id.clone(),
            owner,
            since,
            outcome: format!("nothing {what} (try again when it is idle)"),
        };
        let deadline = std::time::Instant::now() + IDLE_RELEASE_WAIT;
        loop {
            if let Some(status) = session_status(&self.shared.tree.tree(), &session.id)
                && !status.is_idle()
            {
                return Err(busy(
                    format!("{} (this process, {status})", self.shared.identity.label),
                    troupe_session::iso_time(now_ms()),
                ));
            }
            let claim = self.shared.identity.claim();
            match self
                .shared
                .store
                .lease_take(&session.id, &claim, self.shared.opts.lease_ttl)
                .await?
            {
                troupe_session::TakeOutcome::Taken { lease, .. } => {
                    return Ok(lease::SessionLease::start(
                        self.shared.store.clone(),
                        &lease,
                        self.shared.opts.lease_ttl,
                        self.shared.leases.clone(),
                    ));
                }
                troupe_session::TakeOutcome::Held(h) => {
                    let ours =
                        h.pid == self.shared.identity.pid && h.host == self.shared.identity.host;
                    if !ours || std::time::Instant::now() >= deadline {
                        return Err(busy(h.describe(), troupe_session::iso_time(h.acquired)));
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
    }

    async fn snapshot_of(&self, session: &Session) -> Result<Snapshot, String> {
        self.shared
            .snapshots
            .for_dir(&self.shared, &session.directory, &session.id)
            .await
            .map_err(|why| why.to_string())
    }

    /// Reverts session `session_id` (id or unique prefix) to `message_id` (or `part_id` in
    /// it): see the [module docs](self). Returns the session with `revert` set.
    ///
    /// Errors: unknown session or message, the session busy ([`RuntimeError::SessionBusy`]),
    /// snapshots off while there are file changes to undo, a git failure.
    pub async fn revert(
        &self,
        session_id: &SessionId,
        message_id: &MessageId,
        part_id: Option<&PartId>,
    ) -> Result<Session, RuntimeError> {
        let (session, _) = self.load(session_id).await?;
        let _lease = self.exclusive(&session, "reverted").await?;
        // Read again under the lease: a turn may have ended just before it was taken.
        let (mut session, history) = self.load(&session.id).await?;
        let point = revert_point(&history, message_id, part_id).ok_or_else(|| {
            RuntimeError::Turn(match part_id {
                Some(p) => format!(
                    "part {p} of message {message_id} is not in session {}",
                    session.id
                ),
                None => format!("message {message_id} is not in session {}", session.id),
            })
        })?;
        let mut rev = SessionRevert {
            message_id: point.message_id.clone(),
            part_id: point.part_id.clone(),
            snapshot: None,
            files: Vec::new(),
        };
        let previous = session.revert.take();
        let needs_files =
            !point.patches.is_empty() || previous.as_ref().is_some_and(|p| !p.files.is_empty());
        if needs_files {
            let snap = self.snapshot_of(&session).await.map_err(|why| {
                RuntimeError::Turn(format!("cannot revert the session's file changes: {why}"))
            })?;
            let git =
                |e: troupe_snapshot::SnapshotError| RuntimeError::Turn(format!("revert: {e}"));
            // A revert on top of a revert starts from the state before the first one.
            let before = match &previous {
                Some(p) if p.snapshot.is_some() => {
                    let hash = p.snapshot.clone().unwrap_or_default();
                    let files: Vec<PathBuf> = p.files.iter().map(PathBuf::from).collect();
                    snap.restore(&hash, &files).await.map_err(git)?;
                    hash
                }
                _ => snap.track().await.map_err(git)?,
            };
            let touched = snap.revert(&point.patches).await.map_err(git)?;
            rev.snapshot = Some(before);
            rev.files = touched
                .iter()
                .map(|rel| snap.work_tree().join(rel).display().to_string())
                .collect();
        }
        session.revert = Some(rev);
        self.save_reverted(session).await
    }

    /// Undoes a pending revert: the files it changed go back to how they were just before
    /// it, and the hidden messages show again. No pending revert: nothing to do, and the
    /// session is returned unchanged (OpenCode's `session.unrevert`; [`Self::unrevert_pending`]
    /// tells the two cases apart).
    pub async fn unrevert(&self, session_id: &SessionId) -> Result<Session, RuntimeError> {
        match self.unrevert_pending(session_id).await? {
            Some(session) => Ok(session),
            None => Ok(self.load(session_id).await?.0),
        }
    }

    /// [`Self::unrevert`] that says whether there was anything to undo: `Ok(None)` when the
    /// session has no pending revert (checked under the session's lease, so a revert or
    /// unrevert of another process cannot slip in between), else the session without it.
    pub async fn unrevert_pending(
        &self,
        session_id: &SessionId,
    ) -> Result<Option<Session>, RuntimeError> {
        let (session, _) = self.load(session_id).await?;
        let _lease = self.exclusive(&session, "unreverted").await?;
        let (mut session, _) = self.load(&session.id).await?;
        let Some(rev) = session.revert.take() else {
            return Ok(None);
        };
        if let Some(hash) = &rev.snapshot
            && !rev.files.is_empty()
        {
            let snap = self.snapshot_of(&session).await.map_err(|why| {
                RuntimeError::Turn(format!("cannot restore the reverted files: {why}"))
            })?;
            let files: Vec<PathBuf> = rev.files.iter().map(PathBuf::from).collect();
            snap.restore(hash, &files)
                .await
                .map_err(|e| RuntimeError::Turn(format!("unrevert: {e}")))?;
        }
        self.save_reverted(session).await.map(Some)
    }

    /// Store `session` after its revert changed (set or undone), updated now, and publish
    /// its diff; its snapshot cache is dropped (the work tree changed under it).
    async fn save_reverted(&self, mut session: Session) -> Result<Session, RuntimeError> {
        session.time.updated = now_ms();
        self.shared.snapshots.forget(&session.id);
        self.shared.store.write1(Write::Session {
            info: session.clone(),
            created: false,
        });
        self.shared.store.flush().await?;
        self.publish_diff(&session).await;
        Ok(session)
    }

    /// Copies the history of `session_id` before `message_id` (all of it when `None`) into a
    /// new session with fresh session, message and part ids (titled `<title> (fork #n)`).
    /// Messages a pending revert hides are not copied.
    pub async fn fork(
        &self,
        session_id: &SessionId,
        message_id: Option<&MessageId>,
    ) -> Result<Session, RuntimeError> {
        let (session, history) = self.load(session_id).await?;
        if let Some(mid) = message_id
            && !history.iter().any(|m| m.info.id() == mid)
        {
            return Err(RuntimeError::Turn(format!(
                "message {mid} is not in session {}",
                session.id
            )));
        }
        let history = visible(&session, &history);
        let mut fork = Session::new(&session.directory, session.parent_id.clone());
        fork.title = fork_title(&session.title);
        fork.agent = session.agent.clone();
        fork.model = session.model.clone();
        fork.permission = session.permission.clone();
        let mut writes = vec![Write::Session {
            info: fork.clone(),
            created: true,
        }];
        let mut ids: std::collections::HashMap<MessageId, MessageId> = Default::default();
        for m in &history {
            if message_id.is_some_and(|mid| m.info.id() == mid) {
                break;
            }
            let new_id = troupe_session::id::message();
            ids.insert(m.info.id().clone(), new_id.clone());
            let info = match &m.info {
                Message::User(u) => {
                    let mut u = u.clone();
                    u.id = new_id.clone();
                    u.session_id = fork.id.clone();
                    Message::User(u)
                }
                Message::Assistant(a) => {
                    let mut a = a.clone();
                    a.id = new_id.clone();
                    a.session_id = fork.id.clone();
                    if let Some(p) = ids.get(&a.parent_id) {
                        a.parent_id = p.clone();
                    }
                    Message::Assistant(a)
                }
            };
            writes.push(Write::Message(info));
            for p in &m.parts {
                let mut kind = p.kind.clone();
                // A kept compaction tail points at a copied message (OpenCode remaps it too).
                if let PartKind::Compaction {
                    tail_start_id: Some(t),
                    ..
                } = &mut kind
                    && let Some(new) = ids.get(t.as_str())
                {
                    *t = new.clone();
                }
                writes.push(Write::Part(Part {
                    id: troupe_session::id::part(),
                    session_id: fork.id.clone(),
                    message_id: new_id.clone(),
                    kind,
                }));
            }
        }
        fork.cost = history
            .iter()
            .filter(|m| ids.contains_key(m.info.id()))
            .filter_map(|m| m.info.as_assistant())
            .map(|a| a.cost)
            .sum();
        if let Some(Write::Session { info, .. }) = writes.first_mut() {
            info.cost = fork.cost;
        }
        self.shared.store.write(writes);
        self.shared.store.flush().await?;
        Ok(fork)
    }

    /// The session's file changes from its first snapshot to its last, each with its unified
    /// diff (`GET /session/{id}/diff`, `troupe session diff`). With `message_id`: only the
    /// turn of that user message (from it to the next user message). Messages a pending
    /// revert hides are left out. Empty when the session changed nothing or has no
    /// snapshots; an error when snapshots are off for its directory.
    pub async fn session_diff(
        &self,
        session_id: &SessionId,
        message_id: Option<&MessageId>,
    ) -> Result<(Session, Vec<FileChange>), RuntimeError> {
        let (session, history) = self.load(session_id).await?;
        let mut history = visible(&session, &history);
        if let Some(mid) = message_id {
            let Some(i) = history.iter().position(|m| m.info.id() == mid) else {
                return Err(RuntimeError::Turn(format!(
                    "message {mid} is not in session {}",
                    session.id
                )));
            };
            history.drain(..i);
            if let Some(next) = history
                .iter()
                .skip(1)
                .position(|m| matches!(m.info, Message::User(_)))
            {
                history.truncate(next + 1);
            }
        }
        let (Some(first), Some(last)) = (
            crate::snapshots::first_snapshot(&history),
            crate::snapshots::last_snapshot(&history),
        ) else {
            return Ok((session, Vec::new()));
        };
        let snap = self
            .snapshot_of(&session)
            .await
            .map_err(RuntimeError::Turn)?;
        let changes = snap
            .diff_full(&first, &last)
            .await
            .map_err(|e| RuntimeError::Turn(format!("session diff: {e}")))?;
        Ok((session, changes))
    }

    /// Recomputes and publishes `session.diff` (and the session's summary) after a revert
    /// or unrevert; failures only logged (the revert itself is done).
    async fn publish_diff(&self, session: &Session) {
        match self.session_diff(&session.id, None).await {
            Ok((mut s, changes)) => {
                let summary = crate::snapshots::summary_of(&changes);
                let stripped: Vec<FileChange> = changes
                    .into_iter()
                    .map(|mut c| {
                        c.patch.clear();
                        c
                    })
                    .collect();
                s.summary = (summary.files > 0).then_some(summary);
                self.shared.store.write(vec![
                    Write::Session {
                        info: s,
                        created: false,
                    },
                    Write::Publish(troupe_session::Event::SessionDiff {
                        session_id: session.id.clone(),
                        diff: serde_json::to_value(&stripped).unwrap_or_default(),
                    }),
                ]);
                let _ = self.shared.store.flush().await;
            }
            Err(e) => tracing::warn!(session = %session.id, "session diff after revert: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_session::{ModelRef, UserMessage, UserTime};

    fn user(id: &str) -> MessageWithParts {
        MessageWithParts {
            info: Message::User(UserMessage {
                id: id.into(),
                time: UserTime { created: 0 },
                ..UserMessage::new(&"ses".into(), "build", ModelRef::parse("p/m").unwrap())
            }),
            parts: vec![Part {
                id: format!("prt_{id}_0").into(),
                session_id: "ses".into(),
                message_id: id.into(),
                kind: PartKind::Text {
                    text: "hi".into(),
                    synthetic: false,
                    time: None,
                },
            }],
        }
    }

    fn with_patch(mut m: MessageWithParts, n: usize, hash: &str, file: &str) -> MessageWithParts {
        m.parts.push(Part {
            id: format!("prt_{}_{n}", m.info.id()).into(),
            session_id: "ses".into(),
            message_id: m.info.id().into(),
            kind: PartKind::Patch {
                hash: hash.into(),
                files: vec![file.into()],
            },
        });
        m
    }

    #[test]
    fn revert_to_a_message_goes_to_its_user_message_and_collects_later_patches() {
        let h = vec![
            with_patch(user("msg_1"), 1, "h1", "/p/a"),
            with_patch(user("msg_2"), 1, "h2", "/p/b"),
            with_patch(user("msg_3"), 1, "h3", "/p/c"),
        ];
        let p = revert_point(&h, &"msg_2".into(), None).unwrap();
        assert_eq!(p.message_id, "msg_2");
        assert_eq!(p.part_id, None);
        let hashes: Vec<&str> = p.patches.iter().map(|x| x.hash.as_str()).collect();
        assert_eq!(hashes, ["h2", "h3"]);
        assert!(revert_point(&h, &"msg_9".into(), None).is_none());
    }

    #[test]
    fn revert_to_a_part_after_content_keeps_the_parts_before_it() {
        let h = vec![with_patch(user("msg_1"), 1, "h1", "/p/a")];
        let p = revert_point(&h, &"msg_1".into(), Some(&"prt_msg_1_1".into())).unwrap();
        assert_eq!(p.part_id.as_deref(), Some("prt_msg_1_1"));
        assert_eq!(p.patches.len(), 1);
        // The first part has nothing before it: the whole message is reverted.
        let p = revert_point(&h, &"msg_1".into(), Some(&"prt_msg_1_0".into())).unwrap();
        assert_eq!(p.part_id, None);
    }

    #[test]
    fn visible_hides_from_the_revert_point() {
        let h = vec![user("msg_1"), user("msg_2"), user("msg_3")];
        let mut s = Session::new("/p", None);
        assert_eq!(visible(&s, &h).len(), 3);
        s.revert = Some(SessionRevert {
            message_id: "msg_2".into(),
            part_id: None,
            snapshot: None,
            files: vec![],
        });
        let v = visible(&s, &h);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].info.id(), "msg_1");
    }

    #[test]
    fn fork_titles_count_up() {
        assert_eq!(fork_title("Fix login"), "Fix login (fork #1)");
        assert_eq!(fork_title("Fix login (fork #1)"), "Fix login (fork #2)");
        assert_eq!(fork_title("x (fork #a)"), "x (fork #a) (fork #1)");
    }
}
