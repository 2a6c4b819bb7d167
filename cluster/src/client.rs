//! The cluster side of `troupe batch FILE --cluster nats://…`: publish each task to the
//! work queue and wait for its result on the run's result subject.
//!
//! A run has an id ([`crate::new_run_id`]) kept beside the out file (`<out>.run`), so
//! `--resume` publishes the unfinished tasks again *in the same run*: with the same message
//! ids (JetStream drops a copy within the dedup window) and the same session ids (a copy
//! past it finds its session and only resumes it). Results are read from the start of the
//! run's subject on every start (an ordered consumer, nothing acked), so results the workers
//! published while the batch was away are collected too. The first result of a task id
//! wins: a task run twice (its first worker died after publishing) is written once.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Result, anyhow};
use futures::StreamExt as _;
use tokio::sync::oneshot;

use crate::Names;
use crate::task::{BatchResult, BatchTask};
use crate::worker::{ResultMessage, TaskMessage};

/// Options of a cluster batch.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// NATS URL.
    pub url: String,
    /// The cluster's names.
    pub names: Names,
    /// The run id.
    pub run: String,
    /// Ack wait of the workers' consumer, if this batch creates it.
    pub ack_wait: Duration,
    /// Dedup window of the tasks stream, if this batch creates it.
    pub dedup_window: Duration,
    /// The batch's directory (absolute).
    pub cwd: PathBuf,
    /// Default model.
    pub model: Option<String>,
    /// Default agent.
    pub agent: Option<String>,
    /// Default task timeout.
    pub timeout: Option<Duration>,
}

/// The file beside `out` that keeps the run id: `<out>.run`.
pub fn run_file(out: &Path) -> PathBuf {
    let mut s = out.as_os_str().to_owned();
    s.push(".run");
    PathBuf::from(s)
}

/// The run of a batch: with `resume` (and without `retry_failed`, which runs the failed
/// tasks again in new sessions), the run recorded beside `out` for the same cluster
/// prefix; otherwise a new one, recorded there. Without an out file, always a new one.
pub fn run_id(
    out: Option<&Path>,
    resume: bool,
    retry_failed: bool,
    names: &Names,
) -> Result<String> {
    let Some(out) = out else {
        return Ok(crate::new_run_id());
    };
    let file = run_file(out);
    if resume
        && !retry_failed
        && let Ok(text) = std::fs::read_to_string(&file)
        && let Ok(v) = serde_json::from_str::<serde_json::Value>(&text)
        && v["prefix"].as_str() == Some(names.prefix())
        && let Some(run) = v["run"].as_str()
        && Names::new(run).is_ok()
    {
        return Ok(run.to_string());
    }
    let run = crate::new_run_id();
    let body = serde_json::json!({"run": run, "prefix": names.prefix()});
    std::fs::write(&file, format!("{body}\n"))
        .map_err(|e| anyhow!("{}: {e} (it keeps the run id for --resume)", file.display()))?;
    Ok(run)
}

/// A connected cluster batch.
pub struct ClusterBatch {
    opts: ClusterOptions,
    js: async_nats::jetstream::Context,
    waiting: Arc<Mutex<Waiting>>,
    collector: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct Waiting {
    /// Task id → whoever waits for its result.
    waiters: HashMap<String, oneshot::Sender<BatchResult>>,
    /// Results that came before anyone waited for them (or for tasks not run this time).
    early: HashMap<String, BatchResult>,
}

impl Drop for ClusterBatch {
    fn drop(&mut self) {
        self.collector.abort();
    }
}

impl ClusterBatch {
    /// Connect, make sure the streams and the workers' consumer exist (tasks published
    /// before any worker starts wait in the queue), and start collecting the run's results.
    pub async fn start(opts: ClusterOptions) -> Result<ClusterBatch> {
        let client = crate::connect(&opts.url).await?;
        let js = crate::jetstream(&client);
        crate::ensure_tasks(&js, &opts.names, opts.ack_wait, opts.dedup_window).await?;
        let results = crate::ensure_results(&js, &opts.names).await?;
        let consumer = results
            .create_consumer(async_nats::jetstream::consumer::pull::OrderedConfig {
                filter_subject: opts.names.results_subject(&opts.run),
                deliver_policy: async_nats::jetstream::consumer::DeliverPolicy::All,
                ..Default::default()
            })
            .await
            .map_err(|e| anyhow!("cannot read the results of run {}: {e}", opts.run))?;
        let mut messages = consumer
            .messages()
            .await
            .map_err(|e| anyhow!("cannot read the results of run {}: {e}", opts.run))?;
        let waiting: Arc<Mutex<Waiting>> = Default::default();
        let w = waiting.clone();
        let run = opts.run.clone();
        let collector = tokio::spawn(async move {
            while let Some(m) = messages.next().await {
                let m = match m {
                    Ok(m) => m,
                    Err(e) => {
                        tracing::warn!("reading results: {e}");
                        continue;
                    }
                };
                let r: ResultMessage = match serde_json::from_slice(&m.payload) {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::warn!("a result of run {run} does not parse: {e}");
                        continue;
                    }
                };
                if r.run != run {
                    continue;
                }
                let mut w = w.lock().unwrap_or_else(|e| e.into_inner());
                let id = r.result.id.clone();
                match w.waiters.remove(&id) {
                    Some(tx) => {
                        let _ = tx.send(r.result);
                    }
                    None => {
                        // The first result of an id wins.
                        w.early.entry(id).or_insert(r.result);
                    }
                }
            }
        });
        // Keep the connection alive as long as the batch: the context holds the client.
        drop(client);
        Ok(ClusterBatch {
            opts,
            js,
            waiting,
            collector,
        })
    }

    /// The run id.
    pub fn run(&self) -> &str {
        &self.opts.run
    }

    /// Publish `task` (unless an earlier start of the run already has its result) and wait
    /// for its result. A publish error is a failed result saying so.
    pub async fn run_task(&self, task: &BatchTask) -> BatchResult {
        let t0 = std::time::Instant::now();
        let session_id = crate::session_id_for(&self.opts.run, &task.id);
        let rx = {
            let mut w = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(r) = w.early.remove(&task.id) {
                return r;
            }
            let (tx, rx) = oneshot::channel();
            w.waiters.insert(task.id.clone(), tx);
            rx
        };
        let msg = TaskMessage {
            run: self.opts.run.clone(),
            session_id: session_id.clone(),
            task: task.clone(),
            model: self.opts.model.clone(),
            agent: self.opts.agent.clone(),
            cwd: self.opts.cwd.clone(),
            timeout_ms: self.opts.timeout.map(|t| t.as_millis() as u64),
            results: self.opts.names.results_subject(&self.opts.run),
        };
        if let Err(e) = self.publish(&msg).await {
            self.waiting
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .waiters
                .remove(&task.id);
            return BatchResult::failed(
                &task.id,
                session_id,
                format!("could not publish the task to the cluster: {e}"),
                t0,
            );
        }
        match rx.await {
            Ok(r) => r,
            Err(_) => BatchResult::failed(
                &task.id,
                session_id,
                "the batch stopped collecting results".into(),
                t0,
            ),
        }
    }

    async fn publish(&self, msg: &TaskMessage) -> Result<()> {
        let body = serde_json::to_vec(msg)?;
        let mut last = None;
        for attempt in 0..3u64 {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(200 * attempt)).await;
            }
            let mut headers = async_nats::HeaderMap::new();
            // Idempotent: the same task of the same run is one message however often it
            // is published within the dedup window.
            headers.insert(async_nats::header::NATS_MESSAGE_ID, msg.session_id.as_str());
            match self
                .js
                .publish_with_headers(
                    self.opts.names.tasks_subject(),
                    headers,
                    body.clone().into(),
                )
                .await
            {
                Ok(ack) => match ack.await {
                    Ok(_) => return Ok(()),
                    Err(e) => last = Some(anyhow!("{e}")),
                },
                Err(e) => last = Some(anyhow!("{e}")),
            }
        }
        Err(last.unwrap_or_else(|| anyhow!("publish failed")))
    }
}
