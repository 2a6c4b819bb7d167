//! `troupe session list|show|export|delete`: finding, listing, printing and deleting stored
//! sessions.

use super::*;

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
            // A pending revert hides the messages (and parts) from its point on: they are not
            // the session's history any more, only what `unrevert` would bring back.
            let (shown, reverted) = split_reverted(&session, messages);
            if format == crate::Format::Json {
                let doc = serde_json::json!({
                    "info": session,
                    "messages": shown,
                    "reverted": reverted,
                    "todos": todos
                });
                println!("{}", serde_json::to_string_pretty(&doc)?);
            } else {
                print_session(&session, &shown, &reverted);
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
pub(super) async fn delete_tree(store: &Store, session: Session) -> Result<usize> {
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
    let claim = troupe_actors::lease::Identity::current("troupe session list").claim();
    let drivers = store.lease_view(&claim).await.map_err(|e| anyhow!("{e}"))?;
    if json {
        // Sessions as stored plus `lastError` (`{name, data}` or null), as `GET /session`,
        // `owner` (the live lease or null) and `interrupted`.
        let values = rows
            .iter()
            .map(|(s, e)| {
                let mut v = serde_json::to_value(s)?;
                if let serde_json::Value::Object(m) = &mut v {
                    m.insert("lastError".into(), serde_json::to_value(e)?);
                    m.insert(
                        "owner".into(),
                        serde_json::to_value(drivers.live.get(&s.id))?,
                    );
                    m.insert(
                        "interrupted".into(),
                        drivers.abandoned.contains_key(&s.id).into(),
                    );
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
    // `running (pid N)` while a live process drives it, `interrupted` when its driver died
    // (its last turn is repaired by the next prompt or a `troupe serve` on this store),
    // `failed: ErrorName` when its last turn ended with an error.
    let status = |s: &Session, e: &Option<troupe_session::MessageError>| {
        if drivers.abandoned.contains_key(&s.id) {
            return "interrupted".to_string();
        }
        if let Some(h) = drivers.live.get(&s.id) {
            return format!("running (pid {})", h.pid);
        }
        match e {
            Some(e) => one_line(&format!("failed: {}", e.name), 28),
            None => "ok".to_string(),
        }
    };
    let w_status = rows
        .iter()
        .map(|(s, e)| status(s, e).chars().count())
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
            status(s, e),
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

pub(super) async fn load(store: &Store, id: &str) -> Result<(Session, Vec<MessageWithParts>)> {
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
pub(super) fn print_todos(todos: &[troupe_session::Todo]) {
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

/// Splits a session's history at its pending revert: the messages it shows, and what the
/// revert hides (whole messages, and for a revert to a part the parts of that message from
/// the part on, under their message). Without a revert nothing is hidden.
pub fn split_reverted(
    session: &Session,
    messages: Vec<MessageWithParts>,
) -> (Vec<MessageWithParts>, Vec<MessageWithParts>) {
    if session.revert.is_none() {
        return (messages, Vec::new());
    }
    let shown = troupe_actors::revert::visible(session, &messages);
    let mut hidden = Vec::new();
    for mut m in messages {
        match shown.iter().find(|k| k.info.id() == m.info.id()) {
            None => hidden.push(m),
            Some(k) => {
                m.parts.retain(|p| !k.parts.iter().any(|q| q.id == p.id));
                if !m.parts.is_empty() {
                    hidden.push(m);
                }
            }
        }
    }
    (shown, hidden)
}

/// The human-readable `session show`: the session's header and the messages it shows.
/// `reverted` (what a pending revert hides) is not printed, only counted in the header.
pub(super) fn print_session(
    s: &Session,
    messages: &[MessageWithParts],
    reverted: &[MessageWithParts],
) {
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
        // The messages after the revert point (the point's own message is counted apart).
        let later = reverted
            .iter()
            .filter(|m| *m.info.id() > rev.message_id)
            .count();
        let later = format!(
            "the {later} message{} after it",
            if later == 1 { "" } else { "s" }
        );
        let what = match &rev.part_id {
            Some(p) => format!(
                "part {p} of message {}, the parts after it and {later}",
                rev.message_id
            ),
            None => format!("message {} and {later}", rev.message_id),
        };
        println!(
            "  reverted: {what} are undone and not shown below (`--format json` lists them under `reverted`); the next prompt deletes them, `troupe session unrevert {}` brings them back",
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
