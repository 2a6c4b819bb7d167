//! `troupe-mock --script FILE [--port 0] [--log FILE]`: serves a script (see the
//! `troupe-testkit` README) on 127.0.0.1, prints exactly one line
//! `listening on http://127.0.0.1:PORT/v1` once bound, and serves until SIGTERM/SIGINT.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use troupe_testkit::{MockOptions, MockServer, Script};

/// Scripted OpenAI/Anthropic-compatible mock provider.
#[derive(Debug, Parser)]
#[command(name = "troupe-mock", version, about)]
struct Args {
    /// Script JSON file.
    #[arg(long)]
    script: PathBuf,
    /// Port on 127.0.0.1 (0 = pick a free port).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Append each finished request as a JSON line to this file.
    #[arg(long)]
    log: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let path = args.script.clone();
    let script = tokio::task::spawn_blocking(move || Script::load(&path))
        .await
        .context("script loader task failed")?
        .with_context(|| format!("loading {}", args.script.display()))?;
    let server = MockServer::start_with(
        script,
        MockOptions {
            port: args.port,
            log: args.log.clone(),
            ..MockOptions::default()
        },
    )
    .await
    .with_context(|| format!("starting mock server on 127.0.0.1:{}", args.port))?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on {}", server.base_url())?;
        out.flush()?;
    }
    wait_for_signal().await?;
    server.shutdown().await;
    Ok(())
}

#[cfg(unix)]
async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing SIGTERM handler")?;
    tokio::select! {
        _ = term.recv() => {}
        r = tokio::signal::ctrl_c() => r.context("waiting for SIGINT")?,
    }
    Ok(())
}

#[cfg(not(unix))]
async fn wait_for_signal() -> anyhow::Result<()> {
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    Ok(())
}
