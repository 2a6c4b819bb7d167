//! Bare `troupe` in a terminal: an interactive chat on one runtime. Each line is a prompt
//! to the current session (streamed like `troupe run`); lines starting with `/` are commands:
//! `/agent [NAME]`, `/model [provider/model]`, `/new`, `/sessions [ID]`, `/undo`, `/redo`,
//! `/help`, `/quit`.
//! Ctrl-C during a turn stops the turn (the chat goes on); at the prompt it clears the line;
//! Ctrl-D or `/quit` leaves.
//!
//! The line editor (rustyline) runs on its own thread: it blocks on the terminal and puts it
//! in raw mode only while a line is being read, so during a turn Ctrl-C arrives as SIGINT
//! (the chat takes the signals over from the early handler). SIGTERM stops the turn and
//! leaves with 143.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Result, anyhow};
use rustyline::error::ReadlineError;
use troupe_actors::{PromptInput, Runtime};
use troupe_session::{Message, MessageId, MessageWithParts, PartKind, Session, Store};

use crate::activity::Activity;
use crate::output::{PrintOptions, Printer};

/// One line from the editor thread.
type Line = std::result::Result<String, ReadlineError>;

/// The editor thread: answers each prompt string with the line typed.
struct Editor {
    ask: std::sync::mpsc::Sender<(String, tokio::sync::oneshot::Sender<Line>)>,
}

impl Editor {
    /// Starts the editor thread. A new rustyline editor is made for every line: rustyline
    /// replaces the SIGINT handler for as long as an editor exists (without its `signal-hook`
    /// feature, which stalls on typed-ahead input), so between lines the process's own
    /// handlers must be back for Ctrl-C to stop a turn.
    fn start() -> Result<Editor> {
        // Fail early, in one line, when no editor can be made at all.
        drop(
            rustyline::DefaultEditor::new()
                .map_err(|e| anyhow!("cannot start the line editor: {e}"))?,
        );
        let (tx, rx) = std::sync::mpsc::channel::<(String, tokio::sync::oneshot::Sender<Line>)>();
        std::thread::Builder::new()
            .name("troupe-line-editor".into())
            .spawn(move || {
                let mut history: Vec<String> = Vec::new();
                while let Ok((prompt, reply)) = rx.recv() {
                    let line = match rustyline::DefaultEditor::new() {
                        Ok(mut ed) => {
                            for h in &history {
                                let _ = ed.add_history_entry(h.as_str());
                            }
                            ed.readline(&prompt)
                        }
                        Err(e) => Err(e),
                    };
                    if let Ok(l) = &line
                        && !l.trim().is_empty()
                        && history.last() != Some(l)
                    {
                        history.push(l.clone());
                    }
                    let _ = reply.send(line);
                }
            })
            .map_err(|e| anyhow!("cannot start the line editor: {e}"))?;
        Ok(Editor { ask: tx })
    }

    async fn read(&self, prompt: &str) -> Line {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if self.ask.send((prompt.to_string(), tx)).is_err() {
            return Err(ReadlineError::Eof);
        }
        rx.await.unwrap_or(Err(ReadlineError::Eof))
    }
}

/// The chat's state between lines.
struct Chat {
    runtime: Runtime,
    store: Store,
    cwd: PathBuf,
    session: Option<Session>,
    agent: Option<String>,
    model: Option<String>,
    activity: Activity,
    /// SIGINT/SIGTERM, taken over from the early handler for the whole chat.
    signals: crate::signals::Signals,
    /// A SIGTERM arrived: leave after the current turn.
    terminated: bool,
}

/// The commands, one a line, each indented two spaces (a `\` line continuation would strip
/// the first line's indent).
const HELP: &str = "  /agent [NAME]        list the primary agents, or switch to NAME
  /model [PROV/MODEL]  show the model, or switch to PROV/MODEL
  /new                 start a new session with the next prompt
  /sessions [ID]       list recent sessions here, or continue session ID
  /undo                undo the last prompt: hide it and its answer, restore the files it changed
  /redo                bring back what /undo (all of them since the last prompt) took away
  /NAME [ARGS]         run your command NAME (.troupe/command/NAME.md, the command key of troupe.json)
  !CMD                 run the shell command CMD in the session (the model sees it next turn)
  /help                this list
  /quit                leave (also Ctrl-D)
  Ctrl-C stops a running turn; the chat goes on.";

/// Runs the chat until `/quit` or Ctrl-D.
pub async fn run(db: Option<PathBuf>) -> Result<ExitCode> {
    let cwd = crate::resolve_dir(None)?;
    let (mut config, agents) = crate::load_agents(&cwd)?;
    let model = crate::choose_model(None, &config).await?;
    if let Some(m) = &model {
        config.resolve_model(m).map_err(|e| anyhow!("{e}"))?;
        crate::check_api_key(&config, m)?;
        crate::local::apply_detected_limits(&mut config, m).await;
    }
    // As in `run`: only the probed local server overrides the agents' own models.
    let model = model.filter(|_| config.default_model().is_none());
    let default_agent = agents
        .default_agent(config.config.default_agent.as_deref())
        .map(|a| a.name.clone())
        .map_err(|e| anyhow!("{e}"))?;
    let own_files = crate::own_files(db.clone(), &[]);
    let store = crate::open_store(db)?;
    let activity = Activity::on_stderr(true);
    let terminal = Arc::new(crate::asker::TerminalAsker::new(activity.clone()));
    let asker: Arc<dyn troupe_tools::PermissionAsker> = terminal.clone();
    let shown_model = model
        .clone()
        .or_else(|| config.default_model())
        .unwrap_or_else(|| "(agent's model)".into());
    let runtime = Runtime::start_with_agents(
        store.clone(),
        config,
        agents,
        crate::registry(),
        asker,
        troupe_actors::RuntimeOptions {
            interactive: true,
            own_files,
            ..crate::runtime_options()?
        },
    )
    .await?;
    runtime.set_question_asker(terminal);
    let editor = Editor::start()?;
    let signals = crate::signals::Signals::take_over()?;
    let mut chat = Chat {
        runtime,
        store,
        cwd,
        session: None,
        agent: None,
        model,
        activity,
        signals,
        terminated: false,
    };
    eprintln!(
        "troupe chat in {} (agent {default_agent}, model {shown_model}); /help for commands, /quit or Ctrl-D to leave",
        chat.cwd.display()
    );
    loop {
        let prompt = format!("{}> ", chat.agent.as_deref().unwrap_or(&default_agent));
        // At the prompt the editor has the terminal in raw mode (Ctrl-C is a key); a signal
        // here is SIGTERM (or a SIGINT sent by another process): SIGTERM leaves.
        let read = tokio::select! {
            l = editor.read(&prompt) => Some(l),
            sig = chat.signals.next() => match sig {
                Some(libc::SIGTERM) | None => None,
                Some(_) => continue,
            },
        };
        let Some(read) = read else {
            chat.terminated = true;
            break;
        };
        let line = match read {
            Ok(l) => l,
            Err(ReadlineError::Interrupted) => continue,
            Err(ReadlineError::Eof) => break,
            Err(e) => {
                eprintln!("troupe: cannot read the line: {e}");
                break;
            }
        };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(cmd) = line.strip_prefix('/') {
            match chat.command(cmd).await {
                Ok(true) => continue,
                Ok(false) => break,
                Err(e) => {
                    eprintln!("troupe: {e:#}");
                    continue;
                }
            }
        }
        if let Some(cmd) = line.strip_prefix('!') {
            if let Err(e) = chat.shell(cmd.trim()).await {
                eprintln!("troupe: {e:#}");
            }
            continue;
        }
        if let Err(e) = chat.turn(line, None).await {
            eprintln!("troupe: {e:#}");
        }
        if chat.terminated {
            break;
        }
    }
    let code = if chat.terminated {
        ExitCode::from(crate::signals::abort_exit_code())
    } else {
        ExitCode::SUCCESS
    };
    chat.runtime.shutdown().await;
    Ok(code)
}

impl Chat {
    /// A `/command`; `Ok(false)` leaves the chat.
    async fn command(&mut self, cmd: &str) -> Result<bool> {
        let (name, arg) = match cmd.split_once(char::is_whitespace) {
            Some((n, a)) => (n, a.trim()),
            None => (cmd, ""),
        };
        let shared = self.runtime.shared().clone();
        match name {
            "quit" | "exit" | "q" => return Ok(false),
            "help" | "?" => eprintln!("{HELP}"),
            "new" => {
                self.session = None;
                eprintln!("a new session starts with the next prompt");
            }
            "agent" if arg.is_empty() => {
                let current = self.agent.clone().unwrap_or_else(|| {
                    shared
                        .agents
                        .default_agent(shared.config.config.default_agent.as_deref())
                        .map(|a| a.name.clone())
                        .unwrap_or_default()
                });
                for a in shared
                    .agents
                    .list(false)
                    .iter()
                    .filter(|a| a.is_selectable())
                {
                    let mark = if a.name == current { "*" } else { " " };
                    eprintln!("{mark} {:<12} {}", a.name, a.description);
                }
            }
            "agent" => {
                let a = shared
                    .agents
                    .require_selectable(arg)
                    .map_err(|e| anyhow!("{e}"))?;
                self.agent = Some(a.name.clone());
                eprintln!("agent: {}", a.name);
            }
            "model" if arg.is_empty() => {
                let m = self
                    .model
                    .clone()
                    .or_else(|| shared.config.default_model())
                    .unwrap_or_else(|| "(the agent's model)".into());
                eprintln!("model: {m}");
            }
            "model" => {
                let m = shared
                    .config
                    .resolve_model(arg)
                    .map_err(|e| anyhow!("{e}"))?;
                crate::check_api_key(&shared.config, arg)?;
                self.model = Some(m.full_id());
                eprintln!("model: {}", m.full_id());
            }
            "sessions" if arg.is_empty() => {
                let d = self.cwd.display().to_string();
                let list = self
                    .store
                    .read(move |r| r.sessions(200, true))
                    .await?
                    .into_iter()
                    .filter(|s| s.directory == d)
                    .take(10)
                    .collect::<Vec<_>>();
                if list.is_empty() {
                    eprintln!("no sessions in {}", self.cwd.display());
                }
                for s in list {
                    let mark = if self.session.as_ref().is_some_and(|c| c.id == s.id) {
                        "*"
                    } else {
                        " "
                    };
                    eprintln!(
                        "{mark} {}  {}  {}",
                        s.id,
                        troupe_session::iso_time(s.time.updated)
                            .get(..19)
                            .unwrap_or(""),
                        s.title
                    );
                }
            }
            "sessions" => {
                let key = arg.to_string();
                let s = self
                    .store
                    .read(move |r| r.find_session(&key))
                    .await?
                    .ok_or_else(|| anyhow!("session not found: {arg}"))?;
                eprintln!("continuing session {} {}", s.id, s.title);
                self.session = Some(s);
            }
            "undo" => self.undo().await?,
            "redo" => self.redo().await?,
            // The user's own commands (`.troupe/command/NAME.md`, the `command` config key);
            // an unknown one is an error listing them.
            other => self.turn(arg, Some(other)).await?,
        }
        Ok(true)
    }

    /// `/undo`: reverts the session to its last visible typed prompt (OpenCode's revert: the
    /// prompt and everything after it are hidden until the next prompt deletes them, and the
    /// files those steps changed are restored from the step snapshots). Repeating it goes one
    /// prompt further back.
    ///
    /// Errors: no session yet, nothing left to undo, or the runtime's revert error (session busy
    /// elsewhere, snapshots off while files would need restoring, a git failure).
    async fn undo(&mut self) -> Result<()> {
        let Some(current) = &self.session else {
            return Err(anyhow!("nothing to undo: no prompt in this chat yet"));
        };
        let sid = current.id.clone();
        let (session, history) = self
            .store
            .read(move |r| Ok((r.session(&sid)?, r.messages(&sid)?)))
            .await?;
        let session = session.ok_or_else(|| anyhow!("session {} is gone", current.id))?;
        let boundary = session.revert.as_ref().map(|r| &r.message_id);
        let (target, text) = undo_target(&history, boundary)
            .ok_or_else(|| anyhow!("nothing to undo in session {}", session.id))?;
        let reverted = self.runtime.revert(&session.id, &target, None).await?;
        let files = reverted.revert.as_ref().map_or(0, |r| r.files.len());
        eprintln!(
            "undone: \"{}\" and its answer are hidden; {files} file(s) restored (/redo brings them back; the next prompt makes it final)",
            crate::output::one_line(&text, 60)
        );
        self.session = Some(reverted);
        Ok(())
    }

    /// `/redo`: undoes the pending revert (OpenCode's unrevert): the hidden messages show again
    /// and the files the revert changed return to how they were before it.
    ///
    /// Errors: no session, nothing undone, or the runtime's unrevert error.
    async fn redo(&mut self) -> Result<()> {
        let Some(current) = &self.session else {
            return Err(anyhow!("nothing to redo: no prompt in this chat yet"));
        };
        let sid = current.id.clone();
        let session = self
            .store
            .read(move |r| r.session(&sid))
            .await?
            .ok_or_else(|| anyhow!("session {} is gone", current.id))?;
        if session.revert.is_none() {
            return Err(anyhow!("nothing to redo: /undo has not hidden anything"));
        }
        let restored = self.runtime.unrevert(&session.id).await?;
        eprintln!("redone: the hidden messages and their file changes are back");
        self.session = Some(restored);
        Ok(())
    }

    /// The chat's session, created in the chat's directory on first use. Errors: the
    /// runtime's (the store).
    async fn session(&mut self) -> Result<Session> {
        if let Some(s) = &self.session {
            return Ok(s.clone());
        }
        let s = self.runtime.create_session(&self.cwd, None).await?;
        self.session = Some(s.clone());
        Ok(s)
    }

    /// `!cmd`: the user's own shell command, run in the session outside the model loop
    /// (recorded for the model's next turn); its output streams to stdout; Ctrl-C stops it.
    async fn shell(&mut self, command: &str) -> Result<()> {
        if command.is_empty() {
            return Err(anyhow!("!: no command given (!ls runs ls in the session)"));
        }
        let session = self.session().await?;
        let mut rx = self.runtime.bus().subscribe();
        let (runtime, sid, cmd) = (
            self.runtime.clone(),
            session.id.clone(),
            command.to_string(),
        );
        let (agent, model) = (self.agent.clone(), self.model.clone());
        let mut run = tokio::spawn(async move { runtime.shell(&sid, &cmd, agent, model).await });
        let mut shown = 0usize;
        let mut out = std::io::stdout();
        let mut show = |output: &str, shown: &mut usize| {
            if output.len() > *shown && output.is_char_boundary(*shown) {
                let _ = std::io::Write::write_all(&mut out, &output.as_bytes()[*shown..]);
                let _ = std::io::Write::flush(&mut out);
                *shown = output.len();
            }
        };
        let result = loop {
            tokio::select! {
                r = &mut run => break r,
                ev = rx.recv() => if let Ok(ev) = ev
                    && let troupe_session::Event::PartUpdated { part } = ev.as_ref()
                    && part.session_id == session.id
                    && let PartKind::Tool { state: troupe_session::ToolState::Running { metadata: Some(m), .. }, .. } = &part.kind
                    && let Some(o) = m.get("output").and_then(|o| o.as_str())
                {
                    show(o, &mut shown);
                },
                sig = self.signals.next() => {
                    if sig != Some(libc::SIGINT) {
                        self.terminated = true;
                    }
                    self.runtime.abort(&session.id);
                }
            }
        };
        let r = result.map_err(|e| anyhow!("the shell task failed: {e}"))??;
        match &r.part.kind {
            PartKind::Tool {
                state: troupe_session::ToolState::Completed { output, .. },
                ..
            } => show(output, &mut shown),
            PartKind::Tool {
                state: troupe_session::ToolState::Error { error, .. },
                ..
            } => eprintln!("troupe: {error}"),
            _ => {}
        }
        if shown > 0 {
            println!();
        }
        Ok(())
    }

    /// One prompt (or, with `command`, that command with `text` as its arguments): streamed
    /// like `troupe run`; Ctrl-C stops the turn, not the chat.
    async fn turn(&mut self, text: &str, command: Option<&str>) -> Result<()> {
        let session = self.session().await?;
        let mut rx = self.runtime.bus().subscribe();
        let mut printer = Printer::new(
            false,
            session.id.clone(),
            PrintOptions {
                quiet: false,
                activity: self.activity.clone(),
            },
        );
        let input = PromptInput {
            text: text.to_string(),
            agent: self.agent.clone(),
            model: self.model.clone(),
            ..Default::default()
        };
        let (runtime, sid) = (self.runtime.clone(), session.id.clone());
        let command = command.map(|name| troupe_actors::command::CommandInput {
            name: name.to_string(),
            arguments: text.to_string(),
            agent: self.agent.clone(),
            model: self.model.clone(),
            files: Vec::new(),
        });
        let mut turn = tokio::spawn(async move {
            match command {
                Some(c) => runtime.command(&sid, c).await,
                None => runtime.prompt(&sid, input).await,
            }
        });
        printer.start();
        let mut interrupted = false;
        let result = loop {
            tokio::select! {
                r = &mut turn => break r,
                ev = rx.recv() => printer.received(ev),
                sig = self.signals.next(), if !interrupted => {
                    interrupted = true;
                    self.activity.clear();
                    if sig == Some(libc::SIGINT) {
                        eprintln!("\ntroupe: stopping the turn (the chat goes on)");
                    } else {
                        eprintln!("\ntroupe: terminated; stopping the turn");
                        self.terminated = true;
                    }
                    self.runtime.abort(&session.id);
                }
            }
        };
        let _ = self.runtime.store().flush().await;
        while let Ok(ev) = rx.try_recv() {
            printer.event(&ev);
        }
        printer.finish();
        let result = result.map_err(|e| anyhow!("the turn task failed: {e}"))?;
        match result {
            Ok(t) => match t.error {
                None => {}
                Some(e) if e.name == troupe_session::MessageErrorName::MessageAborted => {
                    eprintln!("troupe: turn stopped; type to continue the session")
                }
                Some(e) => eprintln!("troupe: {}: {}", e.name, e.message().replace('\n', " ")),
            },
            Err(e) => eprintln!("troupe: {e}"),
        }
        Ok(())
    }
}

/// The message `/undo` reverts to: the last user message before `boundary` (the pending
/// revert's message, if any) that has text the user typed (synthetic user messages such as
/// compaction requests are skipped), with that text. `None`: nothing left to undo.
fn undo_target(
    history: &[MessageWithParts],
    boundary: Option<&MessageId>,
) -> Option<(MessageId, String)> {
    let end = boundary
        .and_then(|b| history.iter().position(|m| m.info.id() == b))
        .unwrap_or(history.len());
    history[..end].iter().rev().find_map(|m| {
        if !matches!(m.info, Message::User(_)) {
            return None;
        }
        let typed: Vec<&str> = m.typed_texts().collect();
        (!typed.is_empty()).then(|| (m.info.id().clone(), typed.join(" ")))
    })
}

#[cfg(test)]
mod tests {
    /// `/help` lists one command a line, every line indented alike (the first one lost its
    /// indent to a line continuation).
    #[test]
    fn help_lines_are_all_indented() {
        for line in super::HELP.lines() {
            assert!(
                line.starts_with("  ") && !line.starts_with("   "),
                "{line:?}"
            );
        }
        assert!(super::HELP.lines().count() >= 10);
    }
}
