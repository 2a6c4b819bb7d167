//! `troupe session diff|revert|unrevert|fork`: what a session's steps changed, and undoing
//! it.

use super::*;

/// `troupe session diff|revert|unrevert|fork` on a started runtime.
pub async fn snapshot_command(
    runtime: &troupe_actors::Runtime,
    session_id: &SessionId,
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
                .session_diff(session_id, message.map(MessageId::from).as_ref())
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
                .revert(
                    session_id,
                    &MessageId::from(message.as_str()),
                    part.as_deref().map(PartId::from).as_ref(),
                )
                .await
                .map_err(|e| anyhow!("{e}"))?;
            // The reverted messages are hidden, not deleted: the history is all still there.
            let sid = s.id.clone();
            let history = runtime
                .store()
                .read(move |r| r.messages(&sid))
                .await
                .map_err(|e| anyhow!("{e}"))?;
            print!("{}", revert_report(&s, &history, &message, part.as_deref()));
        }
        SessionCommand::Unrevert { .. } => {
            // Like `/redo` in the chat and the other "nothing to do" cases: an error, one
            // `troupe: …` line and exit 1, so a script sees that nothing happened.
            if runtime
                .unrevert_pending(session_id)
                .await
                .map_err(|e| anyhow!("{e}"))?
                .is_none()
            {
                return Err(anyhow!(
                    "nothing to unrevert: session {session_id} has no pending revert"
                ));
            }
            println!(
                "unreverted session {session_id}: the hidden messages and their file changes are back"
            );
        }
        SessionCommand::Fork { message, .. } => {
            let s = runtime
                .fork(session_id, message.map(MessageId::from).as_ref())
                .await
                .map_err(|e| anyhow!("{e}"))?;
            println!("{}", s.id);
        }
        _ => return Err(anyhow!("not a snapshot command")),
    }
    Ok(ExitCode::SUCCESS)
}

/// What `troupe session revert` did, in words, as printed: the point it went back to (for an
/// assistant message that is the user message its turn starts at, not the message given), that
/// everything from there on is undone, how file changes are undone with `--part` (per step),
/// how many files were restored and how to undo it. `session` is the session after the
/// revert, `history` all its messages (the hidden ones too), `message` and `part` the ids
/// given on the command line.
pub fn revert_report(
    session: &Session,
    history: &[MessageWithParts],
    message: &str,
    part: Option<&str>,
) -> String {
    let Some(rev) = &session.revert else {
        return format!("session {} has no pending revert\n", session.id);
    };
    let sid = &session.id;
    let point = &rev.message_id;
    let given = history.iter().find(|m| m.info.id().as_str() == message);
    let given_is_assistant = given.is_some_and(|m| matches!(m.info, Message::Assistant(_)));
    let mut out = String::new();
    match (&rev.part_id, part) {
        (Some(p), _) => {
            out.push_str(&format!(
                "reverted session {sid} to part {p} of message {point}: that part and everything after it are undone; the parts before it stay\n"
            ));
            if part_step_has_patch(history, point, p) {
                out.push_str(&format!(
                    "  file changes are undone per step: every file change of the step {p} is in is undone, an earlier tool's in that step too\n"
                ));
            }
        }
        (None, Some(p)) => out.push_str(&format!(
            "reverted session {sid} to user message {point}: part {p} has nothing before it in message {message} (no text or tool part), so the revert goes back to the start of the turn; the whole turn from {point} on is undone\n"
        )),
        (None, None) if given_is_assistant && point.as_str() != message => {
            out.push_str(&format!(
                "reverted session {sid} to user message {point}: {message} is an assistant message, and a revert to it goes back to the user message that started its turn; the whole turn from {point} on is undone\n"
            ))
        }
        (None, None) => out.push_str(&format!(
            "reverted session {sid} to user message {point}: the whole turn from {point} on is undone\n"
        )),
    }
    let files = rev.files.len();
    out.push_str(&format!(
        "  {files} file{} restored; the undone messages are hidden until the next prompt to the session deletes them (`troupe session unrevert {sid}` brings them and the files back)\n",
        if files == 1 { "" } else { "s" }
    ));
    out
}

/// Whether the step that part `part` of message `message` is in ends with a `patch` part (it
/// changed files): the parts from it up to the next `step-start` include one.
fn part_step_has_patch(history: &[MessageWithParts], message: &MessageId, part: &PartId) -> bool {
    let Some(m) = history.iter().find(|m| m.info.id() == message) else {
        return false;
    };
    let Some(at) = m.parts.iter().position(|p| p.id == *part) else {
        return false;
    };
    m.parts[at..]
        .iter()
        .enumerate()
        .take_while(|(i, p)| *i == 0 || !matches!(p.kind, PartKind::StepStart { .. }))
        .any(|(_, p)| matches!(p.kind, PartKind::Patch { .. }))
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
