//! Printing: the streaming view of `troupe run`, JSON lines, and the session/model listings.

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::{Result, anyhow};
use troupe_config::LoadedConfig;
use troupe_session::{Event, Message, MessageWithParts, PartKind, Session, Store, ToolState};

use crate::SessionCommand;

/// How `troupe run` prints besides the JSON/default choice.
#[derive(Clone, Default)]
pub struct PrintOptions {
    /// `--quiet`: only the answer on stdout (and errors on stderr): no tool lines, no
    /// activity line, no retry notices.
    pub quiet: bool,
    /// The activity line (a disabled one when stderr is not a terminal).
    pub activity: crate::activity::Activity,
}

/// Prints bus events of one session as they arrive: the answer's text on stdout; tool lines,
/// retries, the activity line and notices on stderr (so `troupe run … > answer.txt` captures
/// only the answer).
pub struct Printer {
    json: bool,
    session_id: String,
    out: std::io::BufWriter<std::io::Stdout>,
    /// Stdout is a terminal (then a half-written line must end before stderr draws on it).
    stdout_tty: bool,
    mid_line: bool,
    /// Reasoning parts (their deltas are not printed in the default view).
    reasoning: std::collections::HashSet<String>,
    opts: PrintOptions,
}

impl Printer {
    /// A printer for `session_id`; `json` prints every event as one JSON line.
    pub fn new(json: bool, session_id: String, opts: PrintOptions) -> Self {
        Self {
            json,
            session_id,
            out: std::io::BufWriter::new(std::io::stdout()),
            stdout_tty: std::io::IsTerminal::is_terminal(&std::io::stdout()),
            mid_line: false,
            reasoning: Default::default(),
            opts,
        }
    }

    /// The turn was sent: say what it waits for.
    pub fn start(&mut self) {
        if !self.json {
            self.activity(WAITING_FOR_MODEL);
        }
    }

    /// Show `message` on the activity line unless a half-written answer line on the same
    /// terminal would be overwritten.
    fn activity(&self, message: &str) {
        if !(self.mid_line && self.stdout_tty) {
            self.opts.activity.show(message);
        }
    }

    /// End a half-written answer line (text parts before and after a tool call are
    /// separate paragraphs).
    fn end_line(&mut self) {
        if self.mid_line {
            let _ = writeln!(self.out);
            let _ = self.out.flush();
            self.mid_line = false;
        }
    }

    /// A line on stderr: the activity line is removed first and comes back with the next event.
    fn note(&mut self, line: &str) {
        self.opts.activity.clear();
        if self.stdout_tty {
            self.end_line();
        }
        eprintln!("{}", crate::sanitize::terminal_safe(line));
    }

    /// Handle what the bus delivered: an event, or a note on stderr that `n` events were
    /// skipped because the printer fell behind; a closed bus prints nothing.
    pub fn received(
        &mut self,
        ev: Result<std::sync::Arc<Event>, tokio::sync::broadcast::error::RecvError>,
    ) {
        match ev {
            Ok(ev) => self.event(&ev),
            Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                eprintln!("troupe: output fell behind; {n} events skipped");
            }
            Err(tokio::sync::broadcast::error::RecvError::Closed) => {}
        }
    }

    /// Handle one event.
    pub fn event(&mut self, ev: &Event) {
        if ev.session_id() != Some(self.session_id.as_str()) {
            return;
        }
        if self.json {
            if let Ok(line) = serde_json::to_string(ev) {
                let _ = writeln!(self.out, "{line}");
                let _ = self.out.flush();
            }
            return;
        }
        match ev {
            Event::PartDelta { part_id, .. } if self.reasoning.contains(part_id) => {}
            Event::PartDelta { delta, field, .. } if field == "text" => {
                self.opts.activity.clear();
                let delta = crate::sanitize::terminal_safe(delta);
                let _ = write!(self.out, "{delta}");
                self.mid_line = !delta.ends_with('\n');
                let _ = self.out.flush();
            }
            Event::PartUpdated { part } if matches!(part.kind, PartKind::Reasoning { .. }) => {
                self.reasoning.insert(part.id.clone());
                self.activity("thinking…");
            }
            Event::PartUpdated { part } => match &part.kind {
                PartKind::StepStart { .. } => self.activity(WAITING_FOR_MODEL),
                PartKind::StepFinish { reason, tokens, .. } if reason == "length" => {
                    self.note(&format!(
                        "troupe: the reply stopped at the output limit after {} output tokens (finish_reason: length); the answer may be cut short",
                        tokens.output
                    ));
                }
                PartKind::Tool { tool, state, .. } => self.tool(tool, state),
                _ => {}
            },
            Event::SessionNotice { message, .. } if !self.opts.quiet => {
                self.note(&format!("troupe: {message}"));
            }
            Event::SessionStatus {
                status: troupe_session::SessionStatus::Waiting { owner, until },
                session_id,
            } => {
                let wait = (until - troupe_session::now_ms()).max(0) as f64 / 1000.0;
                eprintln!(
                    "troupe: session {session_id} is driven by {owner}; waiting up to {wait:.0}s for it to finish"
                );
            }
            Event::SessionStatus {
                status:
                    troupe_session::SessionStatus::Retry {
                        attempt,
                        message,
                        next,
                    },
                ..
            } => {
                // The failed attempt's partial text is dropped and streamed again: end the line.
                self.end_line();
                self.opts.activity.clear();
                let wait = (next - troupe_session::now_ms()).max(0) as f64 / 1000.0;
                if !self.opts.quiet {
                    eprintln!(
                        "troupe: attempt {attempt} failed ({}); retrying in {wait:.1}s",
                        one_line(message, 160)
                    );
                }
                self.activity(&format!("waiting to retry (attempt {})…", attempt + 1));
            }
            _ => {}
        }
    }

    fn tool(&mut self, tool: &str, state: &ToolState) {
        match state {
            ToolState::Pending { .. } => {
                self.end_line();
                self.activity(&format!("preparing {tool}…"));
            }
            ToolState::Running { input, .. } => {
                self.end_line();
                self.activity(&format!("running {}…", tool_line(tool, input, 100)));
            }
            ToolState::Completed { input, .. } => {
                self.end_line();
                if !self.opts.quiet {
                    self.note(&format!("✓ {}", tool_line(tool, input, 100)));
                }
                self.activity(WAITING_FOR_MODEL);
            }
            ToolState::Error { error, input, .. } => {
                self.end_line();
                if !self.opts.quiet {
                    self.note(&format!(
                        "✗ {}: {}",
                        tool_line(tool, input, 80),
                        one_line(error, 200)
                    ));
                }
                self.activity(WAITING_FOR_MODEL);
            }
        }
    }

    /// End the output (final newline) and remove the activity line.
    pub fn finish(&mut self) {
        self.opts.activity.clear();
        self.end_line();
        let _ = self.out.flush();
    }
}

/// Activity shown while a request is out and no token has arrived.
const WAITING_FOR_MODEL: &str = "waiting for model…";

/// `tool summary`: the tool name and what it was asked (see [`tool_summary`]), one line of at
/// most `max` characters for the summary.
pub fn tool_line(tool: &str, input: &serde_json::Value, max: usize) -> String {
    let summary = tool_summary(tool, input);
    if summary.is_empty() {
        tool.to_string()
    } else {
        format!("{tool} {}", one_line(&summary, max))
    }
}

/// What a tool call was asked, as the user would write it
/// ([`troupe_session::timeline::tool_summary`]: the timeline labels its tool bars the same way).
pub fn tool_summary(tool: &str, input: &serde_json::Value) -> String {
    troupe_session::timeline::tool_summary(tool, input)
}

/// `s` made terminal-safe on one line, cut to `max` characters with an ellipsis.
pub(crate) fn one_line(s: &str, max: usize) -> String {
    let s = crate::sanitize::terminal_safe(s);
    let line: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() > max {
        format!("{}…", line.chars().take(max).collect::<String>())
    } else {
        line
    }
}

fn summarize_input(v: &serde_json::Value) -> String {
    one_line(&troupe_session::timeline::key_values(v), 80)
}

/// `troupe session list|show|export`.
pub async fn session_command(store: &Store, cmd: SessionCommand) -> Result<ExitCode> {
    match cmd {
        SessionCommand::List { .. } => {
            return Err(anyhow!("session list is handled by session_list"));
        }
        SessionCommand::Delete { id } => {
            let session = find_session(store, &id).await?;
            let n = delete_tree(store, session.clone()).await?;
            store.flush().await.map_err(|e| anyhow!("{e}"))?;
            let also = if n > 1 {
                format!(
                    " and {} subagent session{}",
                    n - 1,
                    if n == 2 { "" } else { "s" }
                )
            } else {
                String::new()
            };
            println!("deleted session {}{also}", session.id);
        }
        SessionCommand::Show {
            id,
            format,
            timeline: true,
        } => {
            let session = find_session(store, &id).await?;
            crate::timeline::print(store, &session.id, format == crate::Format::Json).await?;
        }
        SessionCommand::Show { id, format, .. } => {
            let (session, messages) = load(store, &id).await?;
            let sid = session.id.clone();
            let todos = store
                .read(move |r| r.todos(&sid))
                .await
                .map_err(|e| anyhow!("{e}"))?;
            if format == crate::Format::Json {
                let doc =
                    serde_json::json!({"info": session, "messages": messages, "todos": todos});
                println!("{}", serde_json::to_string_pretty(&doc)?);
            } else {
                print_session(&session, &messages);
                print_todos(&todos);
            }
        }
        SessionCommand::Compact { .. }
        | SessionCommand::Diff { .. }
        | SessionCommand::Revert { .. }
        | SessionCommand::Unrevert { .. }
        | SessionCommand::Fork { .. } => {
            return Err(anyhow!("this session command runs through the runtime"));
        }
        SessionCommand::Export { id } => {
            let (session, messages) = load(store, &id).await?;
            let doc = serde_json::json!({"info": session, "messages": messages});
            println!("{}", serde_json::to_string_pretty(&doc)?);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Deletes `session` and its children (depth first); returns how many sessions went.
async fn delete_tree(store: &Store, session: Session) -> Result<usize> {
    let mut stack = vec![session];
    let mut order = Vec::new();
    while let Some(s) = stack.pop() {
        let sid = s.id.clone();
        let children = store
            .read(move |r| r.children(&sid))
            .await
            .map_err(|e| anyhow!("{e}"))?;
        stack.extend(children);
        order.push(s);
    }
    // Not while another process drives one of them (its lease is live): that process
    // would go on writing into a deleted session.
    for s in &order {
        if let Some(h) = store.lease_of(&s.id).await.map_err(|e| anyhow!("{e}"))? {
            return Err(anyhow!(
                "session {} is driven by {} right now; nothing deleted (try again when it is idle)",
                s.id,
                h.describe()
            ));
        }
    }
    let n = order.len();
    for s in order.into_iter().rev() {
        store.write1(troupe_session::Write::DeleteSession(s));
    }
    Ok(n)
}

/// Whether `directory` is `dir` or below it.
pub fn in_dir(directory: &str, dir: Option<&std::path::Path>) -> bool {
    dir.is_none_or(|d| std::path::Path::new(directory).starts_with(d))
}

/// `troupe session list`: newest first, with the directory of each session; `dir` keeps the
/// sessions in that directory or below it.
pub async fn session_list(
    store: &Store,
    json: bool,
    limit: usize,
    dir: Option<&std::path::Path>,
) -> Result<()> {
    // Filtering happens after the query: read enough to fill `limit` in most stores.
    let fetch = if dir.is_some() {
        limit.saturating_mul(20).max(1000)
    } else {
        limit
    };
    let dir_owned = dir.map(std::path::Path::to_path_buf);
    // Each session with the error its last turn ended with (one indexed lookup each).
    let rows: Vec<(Session, Option<troupe_session::MessageError>)> = store
        .read(move |r| {
            r.sessions(fetch, false)?
                .into_iter()
                .filter(|s| in_dir(&s.directory, dir_owned.as_deref()))
                .take(limit)
                .map(|s| r.last_error(&s.id).map(|e| (s, e)))
                .collect::<Result<Vec<_>, _>>()
        })
        .await
        .map_err(|e| anyhow!("{e}"))?;
    if json {
        // Sessions as stored plus `lastError` (`{name, data}` or null), as `GET /session`.
        let values = rows
            .iter()
            .map(|(s, e)| {
                let mut v = serde_json::to_value(s)?;
                if let serde_json::Value::Object(m) = &mut v {
                    m.insert("lastError".into(), serde_json::to_value(e)?);
                }
                Ok(v)
            })
            .collect::<Result<Vec<_>, serde_json::Error>>()?;
        println!("{}", serde_json::to_string_pretty(&values)?);
        return Ok(());
    }
    let sessions: Vec<&Session> = rows.iter().map(|(s, _)| s).collect();
    if sessions.is_empty() {
        println!("no sessions");
        return Ok(());
    }
    let home = std::env::var("HOME").ok().filter(|h| !h.is_empty());
    let short = |d: &str| match &home {
        Some(h) if d.starts_with(h.as_str()) => format!("~{}", &d[h.len()..]),
        _ => d.to_string(),
    };
    let w_dir = sessions
        .iter()
        .map(|s| short(&s.directory).chars().count())
        .max()
        .unwrap_or(9)
        .clamp(9, 40);
    // `failed: ErrorName` when the session's last turn ended with an error.
    let status = |e: &Option<troupe_session::MessageError>| match e {
        Some(e) => one_line(&format!("failed: {}", e.name), 28),
        None => "ok".to_string(),
    };
    let w_status = rows
        .iter()
        .map(|(_, e)| status(e).chars().count())
        .max()
        .unwrap_or(6)
        .max(6);
    println!(
        "{:<30}  {:<19}  {:<w_status$}  {:>12}  {:<10}  {:<w_dir$}  TITLE",
        "ID", "UPDATED (UTC)", "STATUS", "TOKENS", "COST $", "DIRECTORY"
    );
    for (s, e) in &rows {
        println!(
            "{}  {}  {:<w_status$}  {:>8} tok  ${:<9}  {:<w_dir$}  {}{}",
            s.id,
            troupe_session::iso_time(s.time.updated)
                .get(..19)
                .unwrap_or(""),
            status(e),
            s.tokens.total(),
            s.cost.round_dp(6),
            one_line(&short(&s.directory), 40),
            s.parent_id.as_ref().map(|_| "↳ ").unwrap_or(""),
            one_line(&s.title, 60)
        );
    }
    Ok(())
}

/// The session `id` names (an id or a unique prefix). Errors: the store's, "session not
/// found: ID".
pub async fn find_session(store: &Store, id: &str) -> Result<Session> {
    let key = id.to_string();
    store
        .read(move |r| r.find_session(&key))
        .await
        .map_err(|e| anyhow!("{e}"))?
        .ok_or_else(|| anyhow!("session not found: {id}"))
}

async fn load(store: &Store, id: &str) -> Result<(Session, Vec<MessageWithParts>)> {
    let session = find_session(store, id).await?;
    let sid = session.id.clone();
    let messages = store
        .read(move |r| r.messages(&sid))
        .await
        .map_err(|e| anyhow!("{e}"))?;
    Ok((session, messages))
}

/// The session's todo list after its messages: `[x]` completed, `[>]` in progress, `[-]`
/// cancelled, `[ ]` pending (or any other status, shown after the text).
fn print_todos(todos: &[troupe_session::Todo]) {
    if todos.is_empty() {
        return;
    }
    let open = todos.iter().filter(|t| t.is_open()).count();
    println!("\n── todos ({open} open of {})", todos.len());
    for t in todos {
        let mark = match t.status.as_str() {
            "completed" => "[x]",
            "in_progress" => "[>]",
            "cancelled" => "[-]",
            _ => "[ ]",
        };
        let extra = match t.status.as_str() {
            "completed" | "in_progress" | "cancelled" | "pending" => String::new(),
            other => format!("  ({})", crate::sanitize::terminal_safe(other)),
        };
        println!(
            "   {mark} {}  [{}]{extra}",
            one_line(&t.content, 160),
            crate::sanitize::terminal_safe(&t.priority)
        );
    }
}

fn print_session(s: &Session, messages: &[MessageWithParts]) {
    println!("session {}  {}", s.id, s.title);
    println!("  directory: {}", s.directory);
    if let Some(p) = &s.parent_id {
        println!("  parent: {p}");
    }
    println!(
        "  tokens: {} (input {}, output {}, reasoning {}, cache read {}, cache write {})  cost: ${}",
        s.tokens.total(),
        s.tokens.input,
        s.tokens.output,
        s.tokens.reasoning,
        s.tokens.cache.read,
        s.tokens.cache.write,
        s.cost.round_dp(6)
    );
    if let Some(sum) = &s.summary {
        println!(
            "  changes: {} file{} +{} -{}",
            sum.files,
            if sum.files == 1 { "" } else { "s" },
            sum.additions,
            sum.deletions
        );
    }
    if let Some(rev) = &s.revert {
        println!(
            "  reverted to {}{}: the later messages are hidden until the next prompt deletes them (`troupe session unrevert {}` undoes it)",
            rev.message_id,
            rev.part_id
                .as_deref()
                .map(|p| format!(" part {p}"))
                .unwrap_or_default(),
            s.id
        );
    }
    for m in messages {
        match &m.info {
            Message::User(u) => {
                println!(
                    "\n── user {}  agent={} model={}",
                    u.id,
                    u.agent,
                    u.model.full()
                );
                // What the turn did (the `summary` agent, after a turn that changed files).
                if let Some(sum) = &u.summary {
                    println!("[turn summary] {}", one_line(&sum.title, 100));
                    for line in crate::sanitize::terminal_safe(&sum.body).lines() {
                        println!("  {line}");
                    }
                }
            }
            Message::Assistant(a) => {
                let mut line = format!("\n── assistant {}  {}/{}", a.id, a.provider_id, a.model_id);
                if a.summary {
                    line.push_str("  [summary]");
                }
                if let Some(f) = &a.finish {
                    line.push_str(&format!("  finish={f}"));
                }
                line.push_str(&format!(
                    "  tokens={}  cost=${}",
                    a.tokens.total(),
                    a.cost.round_dp(6)
                ));
                println!("{line}");
                if let Some(e) = &a.error {
                    println!("   error: {}: {}", e.name, one_line(&e.message(), 200));
                }
                if let Some(v) = &a.structured {
                    println!("   structured output: {}", one_line(&v.to_string(), 400));
                }
            }
        }
        for p in &m.parts {
            match &p.kind {
                PartKind::Text {
                    text, synthetic, ..
                } => {
                    let tag = if *synthetic {
                        "text (synthetic)"
                    } else {
                        "text"
                    };
                    println!(
                        "   [{tag}] {}",
                        text.trim_end().replace('\n', "\n          ")
                    );
                }
                PartKind::Reasoning { text, .. } => {
                    println!("   [reasoning] {}", one_line(text, 200))
                }
                PartKind::Tool {
                    tool,
                    state,
                    call_id,
                } => {
                    let detail = match state {
                        ToolState::Completed { output, time, .. } => {
                            let mark = if time.compacted.is_some() {
                                " [compacted]"
                            } else {
                                ""
                            };
                            format!("completed{mark}: {}", one_line(output, 120))
                        }
                        ToolState::Error { error, .. } => {
                            format!("error: {}", one_line(error, 160))
                        }
                        other => other.status().to_string(),
                    };
                    println!(
                        "   [tool {tool} {call_id}] {} → {detail}",
                        summarize_input(state.input())
                    );
                }
                PartKind::StepStart { snapshot, .. } => match snapshot {
                    Some(h) => println!("   [step-start] snapshot={}", &h[..h.len().min(12)]),
                    None => println!("   [step-start]"),
                },
                PartKind::Patch { hash, files } => {
                    println!(
                        "   [patch] {} file{} changed (from {}): {}",
                        files.len(),
                        if files.len() == 1 { "" } else { "s" },
                        &hash[..hash.len().min(12)],
                        files.join(", ")
                    )
                }
                PartKind::StepFinish {
                    reason,
                    tokens,
                    cost,
                    ..
                } => {
                    println!(
                        "   [step-finish] reason={reason} tokens={} cost=${}",
                        tokens.total(),
                        cost.round_dp(6)
                    )
                }
                PartKind::Compaction { auto, .. } => println!("   [compaction] auto={auto}"),
                PartKind::File {
                    mime,
                    filename,
                    url,
                } if url.starts_with("data:") => println!(
                    "   [file {mime}] {} ({} bytes as base64)",
                    filename.as_deref().unwrap_or("(unnamed)"),
                    url.len().saturating_sub(url.find(',').map_or(0, |i| i + 1))
                ),
                PartKind::File { mime, url, .. } => println!("   [file {mime}] {url}"),
                PartKind::Agent { name, .. } => println!("   [agent] @{name}"),
                PartKind::Subtask {
                    agent,
                    command,
                    prompt,
                    ..
                } => println!(
                    "   [subtask @{agent}{}] {}",
                    command
                        .as_ref()
                        .map(|c| format!(" from /{c}"))
                        .unwrap_or_default(),
                    prompt.lines().next().unwrap_or("")
                ),
            }
        }
    }
}

/// Usage totals of one group (session, model or day).
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct UsageRow {
    /// Group key.
    pub key: String,
    /// Directory of the session (rows grouped by session only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub directory: Option<String>,
    /// Assistant messages (steps).
    pub steps: u64,
    /// Tokens by category.
    pub tokens: troupe_session::Tokens,
    /// Cost, USD (decimal sum).
    #[serde(with = "rust_decimal::serde::float")]
    pub cost: rust_decimal::Decimal,
}

/// `troupe stats`: tokens and cost per session, per model and per day (UTC), summed in
/// decimal from the stored assistant messages.
pub async fn stats(store: &Store, json: bool, dir: Option<&std::path::Path>) -> Result<()> {
    use std::collections::BTreeMap;
    let msgs = store
        .read(|r| r.assistant_messages())
        .await
        .map_err(|e| anyhow!("{e}"))?;
    // Session id → directory, for the directory column and the --dir filter.
    let dirs: std::collections::HashMap<String, String> = store
        .read(|r| r.sessions(usize::MAX, false))
        .await
        .map_err(|e| anyhow!("{e}"))?
        .into_iter()
        .map(|s| (s.id, s.directory))
        .collect();
    let msgs: Vec<_> = msgs
        .into_iter()
        .filter(|a| dir.is_none() || dirs.get(&a.session_id).is_some_and(|d| in_dir(d, dir)))
        .collect();
    let mut by: [BTreeMap<String, UsageRow>; 3] = Default::default();
    let mut total = UsageRow {
        key: "total".into(),
        ..Default::default()
    };
    for a in &msgs {
        let day = troupe_session::iso_time(a.time.created)
            .get(..10)
            .unwrap_or("")
            .to_string();
        let keys = [
            a.session_id.clone(),
            format!("{}/{}", a.provider_id, a.model_id),
            day,
        ];
        for (map, key) in by.iter_mut().zip(keys) {
            let row = map.entry(key.clone()).or_insert_with(|| UsageRow {
                key,
                ..Default::default()
            });
            if row.directory.is_none() && row.key == a.session_id {
                row.directory = dirs.get(&a.session_id).cloned();
            }
            row.steps += 1;
            row.tokens.add(&a.tokens);
            row.cost += a.cost;
        }
        total.steps += 1;
        total.tokens.add(&a.tokens);
        total.cost += a.cost;
    }
    let [sessions, models, days] = by;
    if json {
        let doc = serde_json::json!({
            "sessions": sessions.into_values().collect::<Vec<_>>(),
            "models": models.into_values().collect::<Vec<_>>(),
            "days": days.into_values().collect::<Vec<_>>(),
            "total": total,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    for (title, map) in [("session", &sessions), ("model", &models), ("day", &days)] {
        println!(
            "{:<40} {:>6} {:>10} {:>10} {:>10} {:>10} {:>10}  COST ${}",
            title.to_uppercase(),
            "STEPS",
            "INPUT",
            "OUTPUT",
            "REASON",
            "CACHE R",
            "CACHE W",
            if title == "session" {
                "      DIRECTORY"
            } else {
                ""
            }
        );
        for r in map.values() {
            print_usage_row(r);
        }
        println!();
    }
    print_usage_row(&total);
    Ok(())
}

fn print_usage_row(r: &UsageRow) {
    println!(
        "{:<40} {:>6} {:>10} {:>10} {:>10} {:>10} {:>10}  {}{}",
        r.key,
        r.steps,
        r.tokens.input,
        r.tokens.output,
        r.tokens.reasoning,
        r.tokens.cache.read,
        r.tokens.cache.write,
        r.cost.round_dp(6),
        r.directory
            .as_deref()
            .map(|d| format!("  {d}"))
            .unwrap_or_default()
    );
}

/// `troupe agent list`.
pub fn agent_list(agents: &troupe_agents::AgentSet, all: bool, json: bool) -> Result<()> {
    let list = agents.list(all);
    if json {
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(());
    }
    println!("{:<14} {:<9} {:<32} DESCRIPTION", "NAME", "MODE", "MODEL");
    for a in list {
        let mut name = a.name.clone();
        if a.hidden {
            name.push_str(" (hidden)");
        }
        println!(
            "{:<14} {:<9} {:<32} {}",
            name,
            a.mode.as_str(),
            a.model.as_deref().unwrap_or("(session model)"),
            one_line(&a.description, 100)
        );
    }
    Ok(())
}

/// `troupe debug config`: the merged config, then the origin of each top-level key.
pub fn debug_config(config: &LoadedConfig) -> Result<()> {
    let mut shown = serde_json::to_value(&config.config)?;
    redact_config_secrets(&mut shown, false);
    println!("{}", serde_json::to_string_pretty(&shown)?);
    println!();
    println!("worktree: {}", config.worktree.display());
    for f in &config.sources {
        println!("source: {}", f.display());
    }
    if let Ok(serde_json::Value::Object(m)) = serde_json::to_value(&config.config) {
        for k in m.keys() {
            println!("{k}: {}", config.origin(k).unwrap_or("default"));
        }
    }
    Ok(())
}

/// Replaces secret values in a config printed for the user (`debug config`), so a pasted
/// bug report never carries a credential: every string under a `headers` or `environment`
/// object, and every string whose key names a credential (ends in `key`, `token`, `secret` or
/// `password`, or is `authorization`; any case, `_`/`-` ignored: `apiKey`, `accessToken`). A `{env:VAR}` / `{file:PATH}`
/// reference is kept: it names where the secret lives, not the secret. A redacted value reads
/// `<redacted: N chars>`.
pub fn redact_config_secrets(value: &mut serde_json::Value, secret: bool) {
    use serde_json::Value;
    match value {
        Value::String(s) if secret && !(s.starts_with("{env:") || s.starts_with("{file:")) => {
            *s = format!("<redacted: {} chars>", s.chars().count());
        }
        Value::Array(items) => items
            .iter_mut()
            .for_each(|v| redact_config_secrets(v, secret)),
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                let key: String = k
                    .chars()
                    .filter(|c| *c != '_' && *c != '-')
                    .flat_map(char::to_lowercase)
                    .collect();
                let names_secret = ["apikey", "key", "token", "secret", "password"]
                    .iter()
                    .any(|w| key.ends_with(w))
                    || key == "authorization"
                    || key == "headers"
                    || key == "environment"
                    || key == "env";
                redact_config_secrets(v, secret || names_secret);
            }
        }
        _ => {}
    }
}

/// `troupe session diff|revert|unrevert|fork` on a started runtime.
pub async fn snapshot_command(
    runtime: &troupe_actors::Runtime,
    session_id: &str,
    command: SessionCommand,
) -> Result<ExitCode> {
    match command {
        SessionCommand::Diff {
            message,
            stat,
            format,
            ..
        } => {
            let (_, changes) = runtime
                .session_diff(session_id, message.as_deref())
                .await
                .map_err(|e| anyhow!("{e}"))?;
            if format == crate::Format::Json {
                let mut out = std::io::stdout().lock();
                serde_json::to_writer_pretty(&mut out, &changes)?;
                writeln!(out)?;
            } else if stat {
                print!("{}", diff_stat(&changes));
            } else {
                let mut out = std::io::stdout().lock();
                for c in &changes {
                    write!(out, "{}", c.patch)?;
                }
                out.flush()?;
            }
        }
        SessionCommand::Revert { message, part, .. } => {
            let s = runtime
                .revert(session_id, &message, part.as_deref())
                .await
                .map_err(|e| anyhow!("{e}"))?;
            let files = s.revert.as_ref().map(|r| r.files.len()).unwrap_or(0);
            println!(
                "reverted session {} to {}: {files} file{} restored; later messages hidden until the next prompt",
                s.id,
                message,
                if files == 1 { "" } else { "s" }
            );
        }
        SessionCommand::Unrevert { .. } => {
            runtime
                .unrevert(session_id)
                .await
                .map_err(|e| anyhow!("{e}"))?;
            println!("unreverted session {session_id}");
        }
        SessionCommand::Fork { message, .. } => {
            let s = runtime
                .fork(session_id, message.as_deref())
                .await
                .map_err(|e| anyhow!("{e}"))?;
            println!("{}", s.id);
        }
        _ => return Err(anyhow!("not a snapshot command")),
    }
    Ok(ExitCode::SUCCESS)
}

/// `--stat`: one line per file (`path | +A -D`) and a total line.
pub fn diff_stat(changes: &[troupe_snapshot::FileChange]) -> String {
    let width = changes.iter().map(|c| c.file.len()).max().unwrap_or(0);
    let mut out = String::new();
    let (mut add, mut del) = (0, 0);
    for c in changes {
        add += c.additions;
        del += c.deletions;
        let counts = if c.binary {
            "binary".to_string()
        } else {
            format!("+{} -{}", c.additions, c.deletions)
        };
        out.push_str(&format!("{:width$} | {counts}\n", c.file));
    }
    out.push_str(&format!(
        "{} file{} changed, {add} insertion{}(+), {del} deletion{}(-)\n",
        changes.len(),
        if changes.len() == 1 { "" } else { "s" },
        if add == 1 { "" } else { "s" },
        if del == 1 { "" } else { "s" },
    ));
    out
}

#[cfg(test)]
#[path = "output_tests.rs"]
mod tests;
