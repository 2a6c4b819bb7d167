//! troupe-cluster: troupe on several machines, over NATS JetStream.
//!
//! ```text
//! troupe batch FILE --cluster nats://…          troupe worker --nats nats://… (× N)
//!   │ publish one message per task                 │ pull one task per free slot
//!   ▼   (Nats-Msg-Id = its session id)             │ progress acks while it runs
//! ┌──────────────── <P>_TASKS ───────────────┐     │ run it in the local runtime
//! │ work queue: subject <p>.tasks,           │ ──▶ │ publish the result, then ack
//! │ one durable pull consumer `<P>_workers`  │     │ heartbeat on <p>.heartbeat.<name>
//! └──────────────────────────────────────────┘     ▼
//! ┌──────────────── <P>_RESULTS ─────────────┐
//! │ subject <p>.results.<run>, kept 7 days   │ ──▶ the batch's durable consumer for its run
//! └──────────────────────────────────────────┘     writes results.jsonl (first result per id)
//! ```
//!
//! Sessions live in the shared store (`--db`): every process of the cluster must open the
//! same one (one SQLite file on one machine, or PostgreSQL). The batch fixes each task's
//! session id when it publishes it ([`session_id_for`]), so a task delivered again after its
//! worker died (no progress ack within the ack wait) is picked up by another worker in the
//! *same* session: it takes the session's lease, sweeps the parts the dead worker left
//! running and resumes the turn ([`troupe_actors::PromptInput::once`]).
//!
//! Modules: [`task`] (the task and result lines, running one task), [`worker`] (`troupe
//! worker`), [`client`] (the cluster side of `troupe batch`), [`fleet`] (heartbeats and the
//! fleet view of `troupe serve --cluster`), [`subagents`] (`task` calls a worker hands to the
//! cluster, config `cluster.subagents`).

pub mod client;
pub mod fleet;
pub mod subagents;
pub mod task;
pub mod worker;

use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use troupe_session::SessionId;

/// Default prefix of the cluster's stream, consumer and subject names.
pub const DEFAULT_PREFIX: &str = "troupe";

/// Default ack wait of a task: 30 s. A worker sends a progress ack every third of it while
/// the task runs, so only a worker that died (or stalled that long) loses its task, which
/// is then delivered again.
pub const DEFAULT_ACK_WAIT: Duration = Duration::from_secs(30);

/// Default window within which JetStream drops a task published again with the same id
/// (`Nats-Msg-Id`): 1 hour.
pub const DEFAULT_DEDUP_WINDOW: Duration = Duration::from_secs(3600);

/// How long results stay in the results stream: 7 days (a batch resumed within that time
/// still collects what the workers finished while it was away).
pub const RESULTS_MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600);

/// The names of one cluster's JetStream objects, all derived from its prefix, so tests (or
/// two clusters on one NATS) are kept apart by `--cluster-prefix`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    prefix: String,
}

impl Names {
    /// Names for `prefix`: letters, digits, `_` and `-` only (it becomes part of stream
    /// names, which may not hold `.`, `*`, `>` or spaces), at most 64 characters.
    pub fn new(prefix: &str) -> Result<Names> {
        if prefix.is_empty()
            || prefix.len() > 64
            || !prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            bail!(
                "--cluster-prefix {prefix:?}: use 1 to 64 letters, digits, `_` or `-` (it names NATS streams and subjects)"
            );
        }
        Ok(Names {
            prefix: prefix.to_string(),
        })
    }

    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The work-queue stream of tasks: `<PREFIX>_TASKS`.
    pub fn tasks_stream(&self) -> String {
        format!("{}_TASKS", self.prefix.to_uppercase())
    }

    /// The subject tasks are published on: `<prefix>.tasks`.
    pub fn tasks_subject(&self) -> String {
        format!("{}.tasks", self.prefix)
    }

    /// The durable pull consumer every worker shares: `<PREFIX>_workers`.
    pub fn workers_consumer(&self) -> String {
        format!("{}_workers", self.prefix.to_uppercase())
    }

    /// The results stream: `<PREFIX>_RESULTS`.
    pub fn results_stream(&self) -> String {
        format!("{}_RESULTS", self.prefix.to_uppercase())
    }

    /// The subject of one run's results: `<prefix>.results.<run>`.
    pub fn results_subject(&self, run: &str) -> String {
        format!("{}.results.{run}", self.prefix)
    }

    /// The subject of a node's heartbeats: `<prefix>.heartbeat.<node>`.
    pub fn heartbeat_subject(&self, node: &str) -> String {
        format!("{}.heartbeat.{node}", self.prefix)
    }

    /// The subject cancellations of remote subagents go to: `<prefix>.cancel`
    /// ([`subagents`]).
    pub fn cancel_subject(&self) -> String {
        format!("{}.cancel", self.prefix)
    }

    /// The subject every heartbeat matches: `<prefix>.heartbeat.*`.
    pub fn heartbeat_wildcard(&self) -> String {
        format!("{}.heartbeat.*", self.prefix)
    }
}

/// Check a worker's name: letters, digits, `_` and `-` (it is a subject token), 1–64.
pub fn check_node_name(name: &str) -> Result<()> {
    if name.is_empty()
        || name.len() > 64
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        bail!("--name {name:?}: use 1 to 64 letters, digits, `_` or `-`");
    }
    Ok(())
}

/// Connect to the NATS server at `url` (`nats://host:port`), failing within 5 s with a
/// message saying how to start one.
pub async fn connect(url: &str) -> Result<async_nats::Client> {
    let opts = async_nats::ConnectOptions::new()
        .connection_timeout(Duration::from_secs(5))
        .retry_on_initial_connect()
        .max_reconnects(None);
    // `retry_on_initial_connect` would wait forever for a server that is not there: give
    // the first connection a deadline of its own.
    let client = tokio::time::timeout(Duration::from_secs(5), async {
        let c = opts.connect(url).await?;
        c.flush().await.map_err(|e| anyhow!("{e}"))?;
        anyhow::Ok(c)
    })
    .await
    .map_err(|_| {
        anyhow!(
            "no NATS server answers at {url} within 5 s; start one with JetStream on (`nats-server -js`)"
        )
    })?
    .map_err(|e| anyhow!("NATS {url}: {e}"))?;
    Ok(client)
}

/// A JetStream context of `client`.
pub fn jetstream(client: &async_nats::Client) -> async_nats::jetstream::Context {
    async_nats::jetstream::new(client.clone())
}

/// Create the tasks stream and the workers' consumer unless they exist. `ack_wait` and
/// `dedup_window` apply when they are created (an existing consumer keeps its settings;
/// its ack wait is read back and returned, so progress acks are paced to it).
pub async fn ensure_tasks(
    js: &async_nats::jetstream::Context,
    names: &Names,
    ack_wait: Duration,
    dedup_window: Duration,
) -> Result<(
    async_nats::jetstream::consumer::Consumer<async_nats::jetstream::consumer::pull::Config>,
    Duration,
)> {
    use async_nats::jetstream::{consumer, stream};
    let stream = js
        .get_or_create_stream(stream::Config {
            name: names.tasks_stream(),
            subjects: vec![names.tasks_subject()],
            retention: stream::RetentionPolicy::WorkQueue,
            storage: stream::StorageType::File,
            duplicate_window: dedup_window,
            ..Default::default()
        })
        .await
        .map_err(|e| jetstream_error("the tasks stream", &names.tasks_stream(), e))?;
    let mut consumer: consumer::Consumer<consumer::pull::Config> = stream
        .get_or_create_consumer(
            &names.workers_consumer(),
            consumer::pull::Config {
                durable_name: Some(names.workers_consumer()),
                ack_policy: consumer::AckPolicy::Explicit,
                ack_wait,
                // Redeliveries are counted by the worker, which fails a task delivered too
                // often itself (so the batch gets a result instead of waiting forever).
                max_deliver: -1,
                ..Default::default()
            },
        )
        .await
        .map_err(|e| jetstream_error("the workers' consumer", &names.workers_consumer(), e))?;
    let wait = consumer
        .info()
        .await
        .map(|i| i.config.ack_wait)
        .unwrap_or(ack_wait);
    Ok((consumer, wait))
}

/// Create the results stream unless it exists.
pub async fn ensure_results(
    js: &async_nats::jetstream::Context,
    names: &Names,
) -> Result<async_nats::jetstream::stream::Stream> {
    use async_nats::jetstream::stream;
    js.get_or_create_stream(stream::Config {
        name: names.results_stream(),
        subjects: vec![format!("{}.results.>", names.prefix())],
        retention: stream::RetentionPolicy::Limits,
        storage: stream::StorageType::File,
        max_age: RESULTS_MAX_AGE,
        duplicate_window: Duration::from_secs(120),
        ..Default::default()
    })
    .await
    .map_err(|e| jetstream_error("the results stream", &names.results_stream(), e))
}

fn jetstream_error(what: &str, name: &str, e: impl std::fmt::Display) -> anyhow::Error {
    anyhow!(
        "cannot create or open {what} {name}: {e} (is JetStream on? start the server with `nats-server -js`)"
    )
}

/// Delete every stream of the cluster `names` (tests clean up with it). Missing ones are
/// not an error.
pub async fn delete_streams(js: &async_nats::jetstream::Context, names: &Names) -> Result<()> {
    for s in [names.tasks_stream(), names.results_stream()] {
        if js.get_stream(&s).await.is_ok() {
            js.delete_stream(&s)
                .await
                .map_err(|e| anyhow!("delete stream {s}: {e}"))?;
        }
    }
    Ok(())
}

/// FNV-1a, 64 bits, from `seed`: a hash that is the same in every build (the session id of
/// a task must not change with the compiler, see [`session_id_for`]).
fn fnv1a(seed: u64, bytes: &[u8]) -> u64 {
    let mut h = seed;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The session id of task `task_id` in run `run` (a run id made by [`new_run_id`]):
/// `ses_` + the run's 12 hex digits of time (so the run's sessions sort where the run
/// started) + 14 base62 characters hashed from the run and the task id. The same run and
/// task always give the same id, so a task published again (`--resume`) finds its session.
pub fn session_id_for(run: &str, task_id: &str) -> SessionId {
    const BASE62: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let hex: String = run
        .trim_start_matches("run_")
        .chars()
        .take(12)
        .collect::<String>();
    let hex = format!("{hex:0<12}");
    let mut key = run.as_bytes().to_vec();
    key.push(0);
    key.extend_from_slice(task_id.as_bytes());
    let mut a = fnv1a(0xcbf2_9ce4_8422_2325, &key);
    let mut b = fnv1a(0x84222325_cbf29ce4, &key);
    let mut tail = String::with_capacity(14);
    for i in 0..14 {
        let src = if i < 7 { &mut a } else { &mut b };
        tail.push(BASE62[(*src % 62) as usize] as char);
        *src /= 62;
    }
    format!("ses_{hex}{tail}").into()
}

/// A new run id: `run_` + an ascending id's time and random tail (letters and digits, a
/// valid subject token and consumer name).
pub fn new_run_id() -> String {
    let id = troupe_session::id::ascending(troupe_session::id::Prefix::Event);
    format!("run_{}", id.trim_start_matches("evt_"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_and_derived() {
        let n = Names::new("t-1_x").unwrap();
        assert_eq!(n.tasks_stream(), "T-1_X_TASKS");
        assert_eq!(n.tasks_subject(), "t-1_x.tasks");
        assert_eq!(n.results_subject("run_1"), "t-1_x.results.run_1");
        assert_eq!(n.heartbeat_wildcard(), "t-1_x.heartbeat.*");
        for bad in ["", "a.b", "a b", "a*", "a>", &"x".repeat(65)] {
            assert!(Names::new(bad).is_err(), "{bad:?} accepted");
        }
        assert!(check_node_name("w1").is_ok());
        assert!(check_node_name("w.1").is_err());
    }

    #[test]
    fn session_ids_are_stable_per_run_and_task() {
        let run = new_run_id();
        let a = session_id_for(&run, "t1");
        assert_eq!(a, session_id_for(&run, "t1"));
        assert_ne!(a, session_id_for(&run, "t2"));
        assert_ne!(a, session_id_for(&new_run_id(), "t1"));
        assert_eq!(a.len(), troupe_session::id::session().len());
        assert!(a.starts_with("ses_"));
        // Sorts with the ids made when the run started.
        assert_eq!(&a[4..16], &run[4..16]);
        // Fixed forever: a change would lose the sessions of runs resumed across versions.
        assert_eq!(
            session_id_for("run_0123456789abXYZ", "t1"),
            "ses_0123456789abxf5dyWZILKLRwP"
        );
    }
}
