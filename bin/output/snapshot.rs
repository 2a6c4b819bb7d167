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
                    part.map(PartId::from).as_ref(),
                )
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
                .fork(session_id, message.map(MessageId::from).as_ref())
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
