//! `troupe worker`: one node of a cluster. It pulls tasks from the work queue (one pull per
//! free slot, so a task never waits in a worker's buffer while its ack wait runs), runs each
//! in this process's runtime through [`crate::task::run_task`], sends a progress ack every
//! third of the ack wait while it runs, publishes the result on the run's result subject and
//! then acks the task. A worker that dies stops sending progress acks; after the ack wait
//! JetStream delivers the task to another worker, which continues the same session.
//!
//! Stopping ([`WorkerOptions`]`::drain`): no new pulls; running tasks get until the drain
//! deadline to finish; the rest are aborted (their sessions keep what they did and release
//! their leases) and handed back with a NAK, so another worker resumes them at once.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};
use async_nats::jetstream::AckKind;
use futures::StreamExt as _;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use troupe_actors::Runtime;
use troupe_session::SessionId;

use crate::Names;
use crate::task::{BatchResult, BatchTask, TaskDefaults, TaskSession};

/// One task on the wire (`<prefix>.tasks`), JSON.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskMessage {
    /// The batch run it belongs to ([`crate::new_run_id`]).
    pub run: String,
    /// The session the task runs in ([`crate::session_id_for`]); every delivery uses it.
    pub session_id: SessionId,
    /// The task line.
    pub task: BatchTask,
    /// The batch's default model.
    #[serde(default)]
    pub model: Option<String>,
    /// The batch's default agent.
    #[serde(default)]
    pub agent: Option<String>,
    /// The batch's directory (absolute): a task's `dir` is relative to it. It must exist
    /// on the worker's machine.
    pub cwd: PathBuf,
    /// The batch's `--timeout`, ms, for a task without its own.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Subject the result goes to.
    pub results: String,
}

/// One result on the wire (`<prefix>.results.<run>`), JSON.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ResultMessage {
    /// The run.
    pub run: String,
    /// The result line.
    pub result: BatchResult,
    /// The worker that ran it.
    pub worker: String,
    /// Which delivery of the task this was (1 = the first).
    pub delivery: i64,
    /// Whether the worker found the task's session already started (an earlier delivery
    /// ran part of it) and resumed it.
    pub resumed: bool,
}

/// Options of `troupe worker`.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// NATS URL.
    pub nats: String,
    /// The cluster's names.
    pub names: Names,
    /// This worker's name (unique in the cluster; heartbeats are keyed by it).
    pub name: String,
    /// Tasks at once.
    pub concurrency: usize,
    /// Ack wait of the workers' consumer when this worker creates it.
    pub ack_wait: Duration,
    /// Dedup window of the tasks stream when this worker creates it.
    pub dedup_window: Duration,
    /// Heartbeat period.
    pub heartbeat: Duration,
    /// After how long without a heartbeat a monitor marks this worker dead (sent in each
    /// heartbeat).
    pub heartbeat_timeout: Duration,
    /// When asked to stop: how long running tasks may take before they are handed back.
    pub drain: Duration,
    /// A task delivered more often than this fails (its result says so) instead of
    /// running again: a task that kills every worker must not go round forever.
    pub max_deliver: i64,
}

/// What a worker did, for its last line and heartbeats.
#[derive(Debug, Default)]
pub struct WorkerCounters {
    /// Tasks received.
    pub received: AtomicU64,
    /// Tasks completed.
    pub completed: AtomicU64,
    /// Tasks failed.
    pub failed: AtomicU64,
    /// Tasks whose session an earlier delivery had started (resumed here).
    pub resumed: AtomicU64,
    /// Tasks handed back (NAK) when stopping.
    pub handed_back: AtomicU64,
}

impl WorkerCounters {
    /// The counters as JSON (`{received, completed, failed, resumed, handedBack}`).
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "received": self.received.load(Ordering::Relaxed),
            "completed": self.completed.load(Ordering::Relaxed),
            "failed": self.failed.load(Ordering::Relaxed),
            "resumed": self.resumed.load(Ordering::Relaxed),
            "handedBack": self.handed_back.load(Ordering::Relaxed),
        })
    }
}

/// A task running here.
struct Running {
    task_id: String,
    session_id: SessionId,
    acker: Arc<async_nats::jetstream::message::Acker>,
    /// Set when the task was handed back: its result is not published.
    handed_back: Arc<AtomicBool>,
}

/// The state a worker shares between its slots and its heartbeat.
pub struct Worker {
    opts: WorkerOptions,
    runtime: Runtime,
    js: async_nats::jetstream::Context,
    counters: WorkerCounters,
    running: std::sync::Mutex<HashMap<u64, Running>>,
    started: i64,
    draining: AtomicBool,
    ack_wait: std::sync::OnceLock<Duration>,
    /// Child sessions whose parents cancelled them ([`crate::subagents`]).
    cancelled: Arc<crate::subagents::Cancelled>,
}

impl Worker {
    /// Task ids running now.
    pub fn running_tasks(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .map(|r| r.task_id.clone())
            .collect();
        v.sort();
        v
    }
}

/// Run a worker until `stop` is cancelled, then drain (see the module docs). Lines on
/// stderr say what it does (`worker w1: task t3 started …`). Errors: NATS unreachable or
/// JetStream off.
pub async fn run(runtime: Runtime, opts: WorkerOptions, stop: CancellationToken) -> Result<()> {
    let client = crate::connect(&opts.nats).await?;
    let js = crate::jetstream(&client);
    let (consumer, ack_wait) =
        crate::ensure_tasks(&js, &opts.names, opts.ack_wait, opts.dedup_window).await?;
    crate::ensure_results(&js, &opts.names).await?;
    let worker = Arc::new(Worker {
        opts: opts.clone(),
        runtime: runtime.clone(),
        js: js.clone(),
        counters: WorkerCounters::default(),
        running: Default::default(),
        started: troupe_session::now_ms(),
        draining: AtomicBool::new(false),
        ack_wait: std::sync::OnceLock::new(),
        cancelled: Default::default(),
    });
    let _ = worker.ack_wait.set(ack_wait);
    // Subagents the config hands to the cluster, and the cancellations of such children.
    let (lend, mut loans) = tokio::sync::mpsc::unbounded_channel();
    runtime.set_remote_subagents(crate::subagents::ClusterSubagents::new(
        client.clone(),
        opts.names.clone(),
        lend,
    ));
    let cancels = client
        .subscribe(opts.names.cancel_subject())
        .await
        .map_err(|e| anyhow!("subscribe {}: {e}", opts.names.cancel_subject()))?;
    let cancel_listener = tokio::spawn(crate::subagents::listen_for_cancels(
        cancels,
        runtime.clone(),
        worker.cancelled.clone(),
    ));
    eprintln!(
        "worker {}: joined cluster {} at {} (concurrency {}, ack wait {:.1}s)",
        opts.name,
        opts.names.prefix(),
        opts.nats,
        opts.concurrency,
        ack_wait.as_secs_f64()
    );
    let beat_stop = CancellationToken::new();
    let beats = tokio::spawn(crate::fleet::heartbeat_loop(
        client.clone(),
        worker.clone(),
        beat_stop.clone(),
    ));
    let mut slots = Vec::new();
    for _ in 0..opts.concurrency.max(1) {
        let (w, c, s) = (worker.clone(), consumer.clone(), stop.clone());
        slots.push(tokio::spawn(async move {
            slot(w, c, s, CancellationToken::new()).await
        }));
    }
    // A slot lent by a task that waits on remote children (`crate::subagents::Loans`) runs
    // until its token is cancelled.
    let lent_slots: Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>> = Default::default();
    let lender = {
        let (w, c, s, lent) = (
            worker.clone(),
            consumer.clone(),
            stop.clone(),
            lent_slots.clone(),
        );
        tokio::spawn(async move {
            while let Some(until) = loans.recv().await {
                let (w, c, s) = (w.clone(), c.clone(), s.clone());
                let h = tokio::spawn(async move { slot(w, c, s, until).await });
                let mut lent = lent.lock().unwrap_or_else(|e| e.into_inner());
                lent.retain(|h| !h.is_finished());
                lent.push(h);
            }
        })
    };
    stop.cancelled().await;
    worker.draining.store(true, Ordering::SeqCst);
    let n = worker.running_tasks().len();
    eprintln!(
        "worker {}: stopping: no new tasks; {n} running, {:.1}s to finish",
        opts.name,
        opts.drain.as_secs_f64()
    );
    let deadline = tokio::time::Instant::now() + opts.drain;
    while !worker.running_tasks().is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Past the deadline: abort what still runs (its session keeps what it did and its
    // lease is released when the turn ends), then hand the task back.
    let left: Vec<(
        String,
        SessionId,
        Arc<async_nats::jetstream::message::Acker>,
    )> = {
        let running = worker.running.lock().unwrap_or_else(|e| e.into_inner());
        running
            .values()
            .map(|r| {
                r.handed_back.store(true, Ordering::SeqCst);
                (r.task_id.clone(), r.session_id.clone(), r.acker.clone())
            })
            .collect()
    };
    for (_, sid, _) in &left {
        runtime.abort(sid);
    }
    lender.abort();
    slots.extend(std::mem::take(
        &mut *lent_slots.lock().unwrap_or_else(|e| e.into_inner()),
    ));
    for h in slots {
        let _ = tokio::time::timeout(crate::task::ABORT_GRACE, h).await;
    }
    for (task_id, _, acker) in &left {
        match acker.ack_with(AckKind::Nak(None)).await {
            Ok(()) => eprintln!("worker {}: handed back task {task_id}", opts.name),
            Err(e) => eprintln!(
                "worker {}: could not hand back task {task_id} ({e}); it is delivered again after the ack wait",
                opts.name
            ),
        }
        worker.counters.handed_back.fetch_add(1, Ordering::Relaxed);
    }
    beat_stop.cancel();
    let _ = beats.await;
    cancel_listener.abort();
    let _ = client.flush().await;
    eprintln!("worker {}: stopped; {}", opts.name, worker.counters.json());
    Ok(())
}

/// One slot: pull a task when free, run it, repeat until stopped or, for a lent slot,
/// until `until` is cancelled (a task it runs then still finishes).
async fn slot(
    worker: Arc<Worker>,
    consumer: async_nats::jetstream::consumer::Consumer<
        async_nats::jetstream::consumer::pull::Config,
    >,
    stop: CancellationToken,
    until: CancellationToken,
) {
    while !stop.is_cancelled() && !until.is_cancelled() {
        // A pull that ends by itself (1 s) rather than being dropped when stopping: a
        // message the server sent for a dropped pull would wait out its ack wait.
        let batch = consumer
            .batch()
            .max_messages(1)
            .expires(Duration::from_secs(1))
            .messages()
            .await;
        let mut batch = match batch {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!("pull failed: {e}");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    _ = stop.cancelled() => {}
                }
                continue;
            }
        };
        while let Some(msg) = batch.next().await {
            let msg = match msg {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!("pull failed: {e}");
                    continue;
                }
            };
            if stop.is_cancelled() {
                // Arrived as we stopped: back at once.
                let _ = msg.ack_with(AckKind::Nak(None)).await;
                continue;
            }
            handle(&worker, msg).await;
        }
    }
}

/// Run one delivered task and answer it.
async fn handle(worker: &Arc<Worker>, msg: async_nats::jetstream::Message) {
    let name = &worker.opts.name;
    let (delivery, seq) = match msg.info() {
        Ok(i) => (i.delivered, i.stream_sequence),
        Err(_) => (1, 0),
    };
    let (m, acker) = msg.split();
    let acker = Arc::new(acker);
    let tm: TaskMessage = match serde_json::from_slice(&m.payload) {
        Ok(t) => t,
        Err(e) => {
            // Never runs anywhere: terminate it rather than redeliver it forever.
            eprintln!("worker {name}: dropped a task message that does not parse: {e}");
            let _ = acker.ack_with(AckKind::Term).await;
            return;
        }
    };
    worker.counters.received.fetch_add(1, Ordering::Relaxed);
    let sid = tm.session_id.clone();
    // A remote subagent's session was created by its parent: only a second delivery
    // resumes it. A batch task's session exists only if an earlier delivery created it.
    let existed = if tm.run.starts_with("sub_") {
        delivery > 1
    } else {
        let key = sid.clone();
        matches!(
            worker.runtime.store().read(move |r| r.session(&key)).await,
            Ok(Some(_))
        )
    };
    if existed {
        worker.counters.resumed.fetch_add(1, Ordering::Relaxed);
    }
    eprintln!(
        "worker {name}: task {} started (session {sid}, delivery {delivery}{})",
        tm.task.id,
        if existed { ", resuming" } else { "" }
    );
    let handed_back = Arc::new(AtomicBool::new(false));
    worker
        .running
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(
            seq,
            Running {
                task_id: tm.task.id.clone(),
                session_id: sid.clone(),
                acker: acker.clone(),
                handed_back: handed_back.clone(),
            },
        );
    // Progress acks: the ack wait starts again with each, so only a dead worker loses its task.
    let ack_wait = worker
        .ack_wait
        .get()
        .copied()
        .unwrap_or(worker.opts.ack_wait);
    let beat = CancellationToken::new();
    {
        let (acker, beat) = (acker.clone(), beat.clone());
        let every = (ack_wait / 3).max(Duration::from_millis(50));
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = beat.cancelled() => return,
                    _ = tokio::time::sleep(every) => {}
                }
                if let Err(e) = acker.ack_with(AckKind::Progress).await {
                    tracing::warn!("progress ack failed: {e}");
                }
            }
        });
    }
    let t0 = Instant::now();
    let result = if delivery > worker.opts.max_deliver {
        BatchResult::failed(
            &tm.task.id,
            sid.clone(),
            format!(
                "delivered {delivery} times (its workers died or stopped each time); not run again (--max-deliver {})",
                worker.opts.max_deliver
            ),
            t0,
        )
    } else if worker.cancelled.contains(&sid) {
        // A remote subagent whose parent was aborted before any worker took it.
        BatchResult::failed(
            &tm.task.id,
            sid.clone(),
            "cancelled by its parent before it started".into(),
            t0,
        )
    } else {
        let defaults = TaskDefaults {
            model: tm.model.clone(),
            agent: tm.agent.clone(),
            cwd: tm.cwd.clone(),
            timeout: tm.timeout_ms.map(Duration::from_millis),
        };
        crate::task::run_task(
            &worker.runtime,
            &tm.task,
            &defaults,
            &TaskSession::Cluster { id: sid.clone() },
            None,
        )
        .await
    };
    beat.cancel();
    if handed_back.load(Ordering::SeqCst) {
        // Stopping: the drain hands it back (the next worker resumes the session).
        worker
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&seq);
        return;
    }
    let out = ResultMessage {
        run: tm.run.clone(),
        result: result.clone(),
        worker: name.clone(),
        delivery,
        resumed: existed,
    };
    let published = publish_result(&worker.js, &tm.results, &sid, delivery, &out).await;
    match published {
        Ok(()) => {
            if let Err(e) = acker.double_ack().await {
                eprintln!(
                    "worker {name}: task {}: the ack was not confirmed ({e}); a second delivery will find the finished session",
                    tm.task.id
                );
            }
            if result.completed() {
                worker.counters.completed.fetch_add(1, Ordering::Relaxed);
            } else {
                worker.counters.failed.fetch_add(1, Ordering::Relaxed);
            }
            eprintln!(
                "worker {name}: task {} {} {:.1}s",
                tm.task.id,
                result.status,
                result.duration_ms as f64 / 1000.0
            );
        }
        Err(e) => {
            // Not acked: delivered again, and the next worker finds the session finished
            // and publishes its result from the store.
            eprintln!(
                "worker {name}: task {}: could not publish its result ({e}); handing it back",
                tm.task.id
            );
            let _ = acker.ack_with(AckKind::Nak(None)).await;
        }
    }
    worker
        .running
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&seq);
}

/// Publish a result (up to 3 attempts), waiting for JetStream to store it.
async fn publish_result(
    js: &async_nats::jetstream::Context,
    subject: &str,
    session_id: &str,
    delivery: i64,
    out: &ResultMessage,
) -> Result<()> {
    let body = serde_json::to_vec(out)?;
    let mut last = None;
    for attempt in 0..3 {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(200 * attempt)).await;
        }
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(
            async_nats::header::NATS_MESSAGE_ID,
            format!("{session_id}.{delivery}").as_str(),
        );
        let sent = js
            .publish_with_headers(subject.to_string(), headers, body.clone().into())
            .await;
        match sent {
            Ok(ack) => match ack.await {
                Ok(_) => return Ok(()),
                Err(e) => last = Some(anyhow!("{e}")),
            },
            Err(e) => last = Some(anyhow!("{e}")),
        }
    }
    Err(last.unwrap_or_else(|| anyhow!("publish failed")))
}

/// The heartbeat of `worker` (see [`crate::fleet::Heartbeat`]).
pub(crate) fn heartbeat_of(worker: &Worker, state: &str) -> crate::fleet::Heartbeat {
    crate::fleet::Heartbeat {
        node: worker.opts.name.clone(),
        pid: std::process::id(),
        host: worker.runtime.shared().identity.host.clone(),
        state: if worker.draining.load(Ordering::SeqCst) && state == "running" {
            "draining".into()
        } else {
            state.into()
        },
        started: worker.started,
        sent: troupe_session::now_ms(),
        interval_ms: worker.opts.heartbeat.as_millis() as u64,
        timeout_ms: worker.opts.heartbeat_timeout.as_millis() as u64,
        concurrency: worker.opts.concurrency as u64,
        running: worker.running_tasks(),
        counters: worker.counters.json(),
        metrics: crate::fleet::runtime_metrics(&worker.runtime),
        tree: serde_json::to_value(worker.runtime.actors()).unwrap_or_default(),
    }
}

/// The worker's heartbeat subject and its period.
pub(crate) fn beat_target(worker: &Worker) -> (String, Duration) {
    (
        worker.opts.names.heartbeat_subject(&worker.opts.name),
        worker.opts.heartbeat,
    )
}
