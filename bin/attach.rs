//! `troupe run --attach URL`: run a prompt through a running `troupe serve` instead of an
//! in-process runtime. Subscribes to `/event`, posts `prompt_async`, prints the session's
//! events with the same [`Printer`] as local runs, and exits when the session goes idle.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use futures::StreamExt;
use serde_json::{Value, json};
use troupe_server::client::Client;
use troupe_session::{Event, SessionStatus};

use crate::output::Printer;

/// What to run against the server.
pub struct AttachRun {
    /// Server base URL.
    pub url: String,
    /// Server password.
    pub password: Option<String>,
    /// Prompt text.
    pub text: String,
    /// `-f` files, sent as `file` parts (`file://` URLs the server resolves like `@path`).
    pub files: Vec<troupe_actors::inputs::FileInput>,
    /// `--session`.
    pub session: Option<String>,
    /// `--continue`.
    pub continue_: bool,
    /// `--queue`: a prompt to a busy session waits for a turn of its own.
    pub queue: bool,
    /// `--agent`.
    pub agent: Option<String>,
    /// `--model`.
    pub model: Option<String>,
    /// `--dir`: directory of a new session (default: the server's).
    pub dir: Option<PathBuf>,
    /// Print events as JSON lines.
    pub json: bool,
    /// `--quiet` and the activity line.
    pub print: crate::output::PrintOptions,
    /// `--output-last-message`: write the last assistant text here.
    pub output_last_message: Option<PathBuf>,
}

/// How long to wait for the `server.connected` event.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Run one prompt through the server.
pub async fn run(a: AttachRun) -> Result<ExitCode> {
    let client = Client::new(&a.url, a.password.clone())?;
    let session: Value = if let Some(id) = &a.session {
        client.get(&format!("/session/{id}")).await?
    } else if a.continue_ {
        let list = client.get("/session?roots=true").await?;
        let dir = a.dir.as_ref().map(|d| d.display().to_string());
        let found = list.as_array().and_then(|l| {
            l.iter()
                .find(|s| dir.is_none() || s["directory"].as_str() == dir.as_deref())
                .cloned()
        });
        match found {
            Some(s) => s,
            None => {
                eprintln!(
                    "troupe: no earlier session on the server to continue; starting a new one"
                );
                client.post("/session", &new_session(&a.dir)).await?
            }
        }
    } else {
        client.post("/session", &new_session(&a.dir)).await?
    };
    let sid = session["id"]
        .as_str()
        .ok_or_else(|| anyhow!("the server returned a session without an id"))?
        .to_string();

    let events = client.events().await?;
    futures::pin_mut!(events);
    match tokio::time::timeout(CONNECT_TIMEOUT, events.next()).await {
        Ok(Some(Ok(v))) if v["type"] == "server.connected" => {}
        Ok(Some(Ok(v))) => bail!("unexpected first event from the server: {v}"),
        Ok(Some(Err(e))) => return Err(e.into()),
        Ok(None) => bail!("the server closed the event stream"),
        Err(_) => bail!("no server.connected event within {CONNECT_TIMEOUT:?}"),
    }
    let mut body = json!({"text": a.text, "queue": a.queue});
    if !a.files.is_empty() {
        body["parts"] = a
            .files
            .iter()
            .map(|f| json!({"type": "file", "url": f.url, "filename": f.filename}))
            .collect();
    }
    if let Some(ag) = &a.agent {
        body["agent"] = json!(ag);
    }
    if let Some(m) = &a.model {
        body["model"] = json!(m);
    }
    client
        .post(&format!("/session/{sid}/prompt_async"), &body)
        .await?;

    let mut printer = Printer::new(a.json, sid.as_str().into(), a.print.clone());
    printer.start();
    let mut busy_seen = false;
    let mut interrupts = 0u32;
    let mut sigs = crate::signals::Signals::take_over()?;
    loop {
        tokio::select! {
            item = events.next() => {
                let v = match item {
                    Some(Ok(v)) => v,
                    Some(Err(e)) => {
                        printer.finish();
                        return Err(e.into());
                    }
                    None => {
                        printer.finish();
                        bail!("the server closed the event stream before session {sid} went idle");
                    }
                };
                if v["type"].as_str().is_some_and(|t| t.starts_with("server.")) {
                    continue;
                }
                let Ok(ev) = serde_json::from_value::<Event>(v) else { continue };
                printer.event(&ev);
                match &ev {
                    Event::SessionStatus { session_id, status }
                        if session_id == &sid && !matches!(status, SessionStatus::Idle) =>
                    {
                        busy_seen = true;
                    }
                    Event::SessionIdle { session_id } if session_id == &sid => break,
                    // A prompt that could not start at all (no idle follows).
                    Event::SessionError { session_id, error } if session_id == &sid && !busy_seen => {
                        printer.finish();
                        bail!("{}: {}", error.name, error.message().replace('\n', " "));
                    }
                    _ => {}
                }
            }
            Some(sig) = sigs.next() => {
                interrupts += 1;
                if interrupts >= 2 {
                    let _ = std::io::stdout().flush();
                    eprintln!("\ntroupe: interrupted twice, exiting now");
                    std::process::exit(128 + sig);
                }
                eprintln!("\ntroupe: interrupting (press Ctrl-C again to exit at once)");
                let _ = client.post(&format!("/session/{sid}/abort"), &json!({})).await;
            }
        }
    }
    printer.finish();
    // The turn's outcome: the last assistant message's error, if any.
    let messages = client.get(&format!("/session/{sid}/message")).await?;
    let last = messages.as_array().and_then(|l| {
        l.iter()
            .rev()
            .find(|m| m["info"]["role"] == "assistant")
            .cloned()
    });
    let error = last.as_ref().and_then(|m| m["info"].get("error").cloned());
    if let Some(path) = &a.output_last_message {
        let mut text: String = last
            .as_ref()
            .and_then(|m| m["parts"].as_array())
            .map(|parts| {
                parts
                    .iter()
                    .filter(|p| p["type"] == "text" && p["synthetic"] != json!(true))
                    .filter_map(|p| p["text"].as_str())
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default();
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        std::fs::write(path, text)
            .map_err(|e| anyhow!("--output-last-message {}: {e}", path.display()))?;
    }
    match error {
        Some(e) if !e.is_null() => {
            let name = troupe_session::MessageErrorName::from(
                e["name"].as_str().unwrap_or("UnknownError").to_string(),
            );
            if name == troupe_session::MessageErrorName::MessageAborted {
                eprintln!("troupe: aborted; session {sid} can be continued with --session {sid}");
                return Ok(ExitCode::from(130));
            }
            let msg = e["data"]["message"].as_str().unwrap_or("");
            eprintln!("troupe: {name}: {}", msg.replace('\n', " "));
            Ok(ExitCode::from(1))
        }
        _ => Ok(ExitCode::SUCCESS),
    }
}

fn new_session(dir: &Option<PathBuf>) -> Value {
    match dir {
        Some(d) => json!({"directory": d.display().to_string()}),
        None => json!({}),
    }
}
