//! Subagents across the cluster: a worker's `task` calls of the subagents config
//! `cluster.subagents` names run on any worker (see `troupe_actors::remote`).
//!
//! ```text
//! parent's worker                                   any worker (this one too)
//!   create the child session in the shared store
//!   subscribe <p>.results.sub_<child>
//!   publish the child's task on <p>.tasks  ───────▶ pull, run the child's turn under its lease
//!   wait …                                 ◀─────── publish the result, ack
//!   on abort: publish <p>.cancel {sessionId} ─────▶ every worker: abort that session if it
//!                                                   runs here, refuse it if pulled later
//! ```
//!
//! The child's task message is an ordinary [`TaskMessage`] (id = the parent's call id,
//! `Nats-Msg-Id` = the child session id, so a repeated publish is one task), so it gets the
//! work queue's guarantees: progress acks while it runs, redelivery to another worker that
//! resumes the same child session when its worker dies.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use anyhow::{Result, anyhow};
use futures::StreamExt as _;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use troupe_actors::remote::{RemoteOutcome, RemoteSubagents, RemoteTurn};
use troupe_session::SessionId;

use crate::Names;
use crate::task::BatchTask;
use crate::worker::{ResultMessage, TaskMessage};

/// A cancellation on `<prefix>.cancel` (core NATS, JSON).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelMessage {
    /// The child session whose turn is cancelled.
    pub session_id: SessionId,
}

/// How many cancelled session ids a worker remembers, to refuse their tasks if it pulls them
/// after the cancellation (oldest forgotten first).
pub const CANCELLED_MEMORY: usize = 4096;

/// Session ids cancelled recently (bounded, see [`CANCELLED_MEMORY`]).
#[derive(Default)]
pub struct Cancelled(Mutex<CancelledIds>);

/// The ids behind [`Cancelled`]: the last [`CANCELLED_MEMORY`] cancellations in arrival order
/// (an id cancelled twice stands twice), and how many times each id stands in that queue, so
/// a lookup is one hash probe instead of a scan of the queue.
#[derive(Default)]
struct CancelledIds {
    order: VecDeque<SessionId>,
    count: HashMap<SessionId, usize>,
}

impl Cancelled {
    /// Remember `session_id` as cancelled, forgetting the oldest cancellation when
    /// [`CANCELLED_MEMORY`] are remembered.
    pub fn add(&self, session_id: SessionId) {
        let mut ids = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if ids.order.len() >= CANCELLED_MEMORY
            && let Some(old) = ids.order.pop_front()
            && let Some(n) = ids.count.get_mut(&old)
        {
            *n -= 1;
            if *n == 0 {
                ids.count.remove(&old);
            }
        }
        *ids.count.entry(session_id.clone()).or_insert(0) += 1;
        ids.order.push_back(session_id);
    }

    /// Whether `session_id` was cancelled (and is still remembered).
    pub fn contains(&self, session_id: &SessionId) -> bool {
        let ids = self.0.lock().unwrap_or_else(|e| e.into_inner());
        ids.count.contains_key(session_id)
    }
}

/// The [`RemoteSubagents`] of a worker: publishes child turns to the cluster's work queue.
pub struct ClusterSubagents {
    client: async_nats::Client,
    js: async_nats::jetstream::Context,
    names: Names,
    loans: Loans,
}

impl ClusterSubagents {
    /// Over the worker's NATS connection and cluster names; `lend` receives one token per
    /// parent session that starts waiting on remote children (see [`Loans`]).
    pub fn new(
        client: async_nats::Client,
        names: Names,
        lend: tokio::sync::mpsc::UnboundedSender<CancellationToken>,
    ) -> Arc<ClusterSubagents> {
        let js = crate::jetstream(&client);
        Arc::new(ClusterSubagents {
            client,
            js,
            names,
            loans: Loans::new(lend),
        })
    }
}

/// Worker slots lent by parents that wait on remote children. A task whose turn waits for
/// a child turn on the cluster holds its worker slot while doing nothing; were every slot of
/// every worker so held (one worker with `--concurrency 1` is enough), the children could
/// never be pulled and the parents would wait until their timeout. So the first remote child
/// a parent session waits for sends a token to the worker, which runs one extra slot until
/// the token is cancelled — when the parent's last waiting child call ends. One loan per
/// waiting parent session however many children it waits for: the worker never runs more
/// busy turns than its concurrency.
#[derive(Clone)]
pub struct Loans {
    lend: tokio::sync::mpsc::UnboundedSender<CancellationToken>,
    /// Per parent session: remote child calls waiting, and the loan's token.
    waiting: Arc<std::sync::Mutex<HashMap<SessionId, (usize, CancellationToken)>>>,
}

impl Loans {
    /// Loans announced on `lend`.
    pub fn new(lend: tokio::sync::mpsc::UnboundedSender<CancellationToken>) -> Self {
        Self {
            lend,
            waiting: Default::default(),
        }
    }

    /// A remote child call of `parent` starts waiting: the first one lends a slot. The loan
    /// ends when the last [`Loan`] of `parent` is dropped.
    pub fn take(&self, parent: &SessionId) -> Loan {
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        let entry = waiting
            .entry(parent.clone())
            .or_insert_with(|| (0, CancellationToken::new()));
        entry.0 += 1;
        if entry.0 == 1 {
            // No worker listening (its loop ended): nothing to lend.
            let _ = self.lend.send(entry.1.clone());
        }
        Loan {
            loans: self.clone(),
            parent: parent.clone(),
        }
    }

    /// Parent sessions holding a loan now.
    pub fn lent(&self) -> usize {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// One waiting remote child call's share of its parent's loan (see [`Loans::take`]).
pub struct Loan {
    loans: Loans,
    parent: SessionId,
}

impl Drop for Loan {
    fn drop(&mut self) {
        let mut waiting = self.loans.waiting.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = waiting.get_mut(&self.parent) {
            entry.0 -= 1;
            if entry.0 == 0 {
                entry.1.cancel();
                waiting.remove(&self.parent);
            }
        }
    }
}

/// The run id of a child turn: results of child `session_id` go to
/// `<prefix>.results.sub_<session_id>`.
pub fn child_run(session_id: &str) -> String {
    format!("sub_{session_id}")
}

impl RemoteSubagents for ClusterSubagents {
    fn run(&self, turn: RemoteTurn) -> BoxFuture<'static, Result<RemoteOutcome, String>> {
        let (client, js, names) = (self.client.clone(), self.js.clone(), self.names.clone());
        // Held while this call waits, however it ends (the future dropped included).
        let loan = self.loans.take(&turn.parent_session_id);
        // The cancellation is published by a task of its own: the caller may drop this
        // future at the moment it cancels (an aborted tool call does), which must not take
        // the cancellation with it. `done` ends the watcher once the outcome is in (only
        // then: a future dropped without an outcome leaves the watcher waiting for the
        // cancellation, which the caller sends however its call ends).
        let done = tokio_util::sync::CancellationToken::new();
        {
            let (client, names, done) = (client.clone(), names.clone(), done.clone());
            let (cancel, sid) = (turn.cancel.clone(), turn.session_id.clone());
            tokio::spawn(async move {
                tokio::select! {
                    biased;
                    _ = done.cancelled() => {}
                    _ = cancel.cancelled() => publish_cancel(&client, &names, &sid).await,
                }
            });
        }
        Box::pin(async move {
            let _loan = loan;
            tokio::select! {
                r = run_child(&client, &js, &names, &turn) => {
                    done.cancel();
                    r.map_err(|e| e.to_string())
                }
                _ = turn.cancel.cancelled() => Err("cancelled".to_string()),
            }
        })
    }
}

async fn run_child(
    client: &async_nats::Client,
    js: &async_nats::jetstream::Context,
    names: &Names,
    turn: &RemoteTurn,
) -> Result<RemoteOutcome> {
    let run = child_run(&turn.session_id);
    let results = names.results_subject(&run);
    // Listen before publishing, so the result cannot come first.
    let mut sub = client
        .subscribe(results.clone())
        .await
        .map_err(|e| anyhow!("subscribe {results}: {e}"))?;
    let msg = TaskMessage {
        run,
        session_id: turn.session_id.clone(),
        task: BatchTask {
            id: turn.call_id.clone(),
            prompt: turn.prompt.clone(),
            agent: Some(turn.agent.clone()),
            model: turn.model.clone(),
            dir: None,
            schema: None,
            timeout: None,
            max_steps: None,
        },
        model: None,
        agent: None,
        cwd: turn.directory.clone(),
        timeout_ms: None,
        results,
    };
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(
        async_nats::header::NATS_MESSAGE_ID,
        turn.session_id.as_str(),
    );
    let ack = js
        .publish_with_headers(
            names.tasks_subject(),
            headers,
            serde_json::to_vec(&msg)?.into(),
        )
        .await
        .map_err(|e| anyhow!("publish the child's task: {e}"))?;
    ack.await
        .map_err(|e| anyhow!("the tasks stream did not take the child's task: {e}"))?;
    while let Some(m) = sub.next().await {
        let Ok(r) = serde_json::from_slice::<ResultMessage>(&m.payload) else {
            tracing::warn!(session_id = %turn.session_id, "a child result that does not parse was ignored");
            continue;
        };
        return Ok(RemoteOutcome {
            text: r.result.text,
            error: r.result.error,
            cost: r.result.cost,
            node: r.worker,
        });
    }
    Err(anyhow!(
        "the connection to NATS closed before the child's result came"
    ))
}

/// Tell every worker that the turn of `session_id` is cancelled.
pub async fn publish_cancel(client: &async_nats::Client, names: &Names, session_id: &SessionId) {
    let body = serde_json::to_vec(&CancelMessage {
        session_id: session_id.clone(),
    })
    .unwrap_or_default();
    if let Err(e) = client.publish(names.cancel_subject(), body.into()).await {
        tracing::warn!(%session_id, "could not publish the cancellation of a remote subagent: {e}");
    }
    let _ = client.flush().await;
}

/// A worker's listener on `<prefix>.cancel`: remembers each cancelled session and aborts
/// its turn if it runs in `runtime`. Runs until the subscription ends.
pub async fn listen_for_cancels(
    mut sub: async_nats::Subscriber,
    runtime: troupe_actors::Runtime,
    cancelled: Arc<Cancelled>,
) {
    while let Some(m) = sub.next().await {
        let Ok(c) = serde_json::from_slice::<CancelMessage>(&m.payload) else {
            continue;
        };
        cancelled.add(c.session_id.clone());
        runtime.abort(&c.session_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One loan per waiting parent session, however many of its children wait; it ends with
    /// the last of them, and each parent gets its own.
    #[test]
    fn a_parent_lends_one_slot_until_its_last_remote_child_returns() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let loans = Loans::new(tx);
        let a1 = loans.take(&"ses_a".into());
        let a2 = loans.take(&"ses_a".into());
        let token = rx.try_recv().expect("the first child lends a slot");
        assert!(
            rx.try_recv().is_err(),
            "a second child of the same parent lends nothing"
        );
        assert_eq!(loans.lent(), 1);
        drop(a1);
        assert!(!token.is_cancelled(), "a child still waits");
        let b = loans.take(&"ses_b".into());
        let other = rx.try_recv().expect("another parent lends its own slot");
        assert_eq!(loans.lent(), 2);
        drop(a2);
        assert!(token.is_cancelled(), "the last child returned");
        assert!(!other.is_cancelled());
        drop(b);
        assert!(other.is_cancelled());
        assert_eq!(loans.lent(), 0);
        // A parent that waits again later lends a fresh slot.
        let _again = loans.take(&"ses_a".into());
        assert!(!rx.try_recv().expect("a new loan").is_cancelled());
    }

    #[test]
    fn cancelled_ids_are_remembered_up_to_the_bound() {
        let c = Cancelled::default();
        c.add("ses_a".into());
        assert!(c.contains(&"ses_a".into()));
        assert!(!c.contains(&"ses_b".into()));
        for i in 0..CANCELLED_MEMORY {
            c.add(format!("ses_{i}").into());
        }
        assert!(!c.contains(&"ses_a".into()), "the oldest is forgotten");
        assert!(c.contains(&format!("ses_{}", CANCELLED_MEMORY - 1).into()));
        assert!(
            c.contains(&"ses_0".into()),
            "the bound holds exactly CANCELLED_MEMORY ids"
        );
    }

    #[test]
    fn the_memory_never_outgrows_its_bound_and_its_index_matches_the_queue() {
        let c = Cancelled::default();
        for i in 0..3 * CANCELLED_MEMORY {
            // Every third id repeats an earlier one, so some ids stand twice.
            let id = if i % 3 == 0 { i / 2 } else { i };
            c.add(format!("ses_{id}").into());
            let ids = c.0.lock().unwrap();
            assert!(ids.order.len() <= CANCELLED_MEMORY);
            assert_eq!(ids.count.values().sum::<usize>(), ids.order.len());
        }
        let ids = c.0.lock().unwrap();
        assert_eq!(ids.order.len(), CANCELLED_MEMORY);
        for id in &ids.order {
            assert!(ids.count.contains_key(id));
        }
    }

    #[test]
    fn an_id_cancelled_twice_is_remembered_until_its_last_cancellation_is_forgotten() {
        let c = Cancelled::default();
        c.add("ses_twice".into());
        for i in 0..CANCELLED_MEMORY / 2 {
            c.add(format!("ses_{i}").into());
        }
        c.add("ses_twice".into());
        // The first cancellation is forgotten, the second still stands.
        for i in 0..CANCELLED_MEMORY / 2 {
            c.add(format!("ses_more_{i}").into());
        }
        assert!(c.contains(&"ses_twice".into()));
        for i in 0..CANCELLED_MEMORY {
            c.add(format!("ses_last_{i}").into());
        }
        assert!(!c.contains(&"ses_twice".into()));
    }

    #[test]
    fn a_child_runs_results_subject_is_a_single_token() {
        let run = child_run("ses_0123456789abXYZ");
        assert_eq!(run, "sub_ses_0123456789abXYZ");
        assert!(!run.contains('.') && !run.contains('*') && !run.contains('>'));
    }
}
