//! `troupe monitor [URL]`: a live terminal view of a running `troupe serve`.
//!
//! It polls `GET /actors` (the supervision tree) and `GET /metrics` (Prometheus text, names
//! prefixed `troupe_`) every `--interval-ms` (default 500 ms) and draws them with ratatui on a
//! plain crossterm backend (no mouse, works over SSH). `q`, `Esc` or `Ctrl-C` quit; the terminal
//! is restored on exit and on panic (ratatui's `init` chains a restoring panic hook).
//! `--once` prints the tree and counters as plain text and exits (no terminal needed).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use clap::Parser;
use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, Paragraph, Row, Table, TableState};
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::watch;

/// Arguments of `troupe monitor`.
#[derive(Parser, Debug)]
pub struct MonitorArgs {
    /// Base URL of a running `troupe serve`.
    #[arg(default_value = "http://127.0.0.1:4096")]
    pub url: String,
    /// Server password, sent as `Authorization: Bearer <password>`; default:
    /// $TROUPE_SERVER_PASSWORD (empty = none).
    #[arg(long)]
    pub password: Option<String>,
    /// Print the tree and counters once as plain text and exit.
    #[arg(long)]
    pub once: bool,
    /// Poll period in milliseconds (minimum 100).
    #[arg(long, default_value_t = 500)]
    pub interval_ms: u64,
}

mod api;
mod metrics;
mod tree;
mod ui;

use api::*;
pub use metrics::parse_metrics;
use metrics::*;
pub use tree::ActorNode;
use tree::*;
use ui::*;

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Entry point of `troupe monitor`.
pub async fn run(args: MonitorArgs) -> Result<ExitCode> {
    let api = Api::new(&args.url, args.password.clone())?;
    // Fail fast, with one line, when the server is not there.
    let tree = api.actors().await?;
    if args.once {
        let metrics = api.metrics().await.unwrap_or_default();
        let labels = api.labels(&tree).await;
        let totals = metric_totals(&metrics);
        let mut rows = flatten(&tree, now_ms(), &labels);
        let summary = summarize(&mut rows, &totals);
        let mut out = format!("{}\n\n", summary_line(&summary));
        out.push_str(&render_rows_text(&rows));
        let counters: Vec<_> = totals
            .iter()
            .filter(|(k, _)| !HEADER_METRICS.contains(&k.as_str()))
            .collect();
        if !counters.is_empty() {
            out.push('\n');
            for (k, v) in counters {
                let _ = writeln!(out, "{k} {}", fmt_metric(*v));
            }
        }
        print!("{out}");
        return Ok(ExitCode::SUCCESS);
    }
    if !std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        bail!("monitor: standard output is not a terminal (use --once for plain text)");
    }
    let first = api.snapshot().await;
    let (tx, rx) = watch::channel(first);
    let period = Duration::from_millis(args.interval_ms.max(100));
    let poller = tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let mut snap = api.snapshot().await;
            if snap.tree.is_none() {
                // Keep showing the last good data, marked stale.
                let prev = tx.borrow();
                snap.tree = prev.tree.clone();
                snap.metrics = prev.metrics.clone();
                snap.labels = prev.labels.clone();
                snap.at = prev.at;
            }
            if tx.send(snap).is_err() {
                break;
            }
        }
    });
    let url = args.url.clone();
    let ui = tokio::task::spawn_blocking(move || ui_loop(&url, rx)).await;
    poller.abort();
    match ui {
        Ok(r) => r.map(|()| ExitCode::SUCCESS),
        Err(e) => Err(anyhow!("monitor: the terminal view failed: {e}")),
    }
}

#[cfg(test)]
#[path = "fleet_tests.rs"]
mod fleet_tests;

#[cfg(test)]
mod tests;
