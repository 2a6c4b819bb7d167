//! The streaming view of `troupe run` (and `chat`/`attach`): text as it arrives, one line
//! per tool call, JSON lines with `--format json`.

use super::*;

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
/// only the answer). On a terminal text is shown as it streams; when stdout is a file or a
/// pipe a step's text is held until the step finishes, so the partial text of an attempt
/// that fails and is retried never reaches the file (the retry streams it again).
pub struct Printer {
    json: bool,
    session_id: SessionId,
    out: std::io::BufWriter<std::io::Stdout>,
    /// Stdout is a terminal (then a half-written line must end before stderr draws on it).
    stdout_tty: bool,
    mid_line: bool,
    /// The current step's text while stdout is not a terminal (`None` on a terminal).
    held: Option<String>,
    /// `mid_line` as of the last text written to stdout (restored when held text is dropped).
    written_mid_line: bool,
    /// The text part the last delta belonged to: text of another part (the next step, the
    /// next turn) starts on a new line.
    text_part: Option<PartId>,
    /// Step-finish parts already warned about (a part is updated again, e.g. with its
    /// snapshot, and must not warn twice).
    length_warned: std::collections::HashSet<PartId>,
    /// Reasoning parts (their deltas are not printed in the default view).
    reasoning: std::collections::HashSet<PartId>,
    /// Compaction summaries (assistant messages with `summary: true`): what they write is the
    /// conversation's summary for the model, not the answer, and stays off stdout.
    summaries: std::collections::HashSet<MessageId>,
    opts: PrintOptions,
}

impl Printer {
    /// A printer for `session_id`; `json` prints every event as one JSON line.
    pub fn new(json: bool, session_id: SessionId, opts: PrintOptions) -> Self {
        let stdout_tty = std::io::IsTerminal::is_terminal(&std::io::stdout());
        Self {
            json,
            session_id,
            out: std::io::BufWriter::new(std::io::stdout()),
            stdout_tty,
            mid_line: false,
            held: (!stdout_tty).then(String::new),
            written_mid_line: false,
            text_part: None,
            length_warned: Default::default(),
            reasoning: Default::default(),
            summaries: Default::default(),
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
            self.write_text("\n");
        }
    }

    /// Answer text: to stdout at once on a terminal, else held until its step finishes.
    fn write_text(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        self.mid_line = !text.ends_with('\n');
        match &mut self.held {
            Some(held) => held.push_str(text),
            None => {
                let _ = write!(self.out, "{text}");
                let _ = self.out.flush();
                self.written_mid_line = self.mid_line;
            }
        }
    }

    /// Write the held text of a finished step (or of the turn's end).
    fn release(&mut self) {
        if let Some(held) = &mut self.held
            && !held.is_empty()
        {
            let _ = write!(self.out, "{held}");
            let _ = self.out.flush();
            held.clear();
            self.written_mid_line = self.mid_line;
        }
    }

    /// Drop the held text of an attempt that failed (it is streamed again).
    fn drop_held(&mut self) {
        if let Some(held) = &mut self.held {
            held.clear();
            self.mid_line = self.written_mid_line;
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
            Event::MessageUpdated {
                info: Message::Assistant(m),
            } if m.summary => {
                self.summaries.insert(m.id.clone());
                self.activity("compacting the conversation…");
            }
            Event::PartDelta { part, .. }
                if self.reasoning.contains(&part.part_id)
                    || self.summaries.contains(&part.message_id) => {}
            Event::PartDelta {
                delta,
                field,
                part: PartRef { part_id, .. },
            } if field == "text" => {
                self.opts.activity.clear();
                if self.text_part.as_ref() != Some(part_id) {
                    // Another part's text (a later step or turn) is a new paragraph.
                    self.end_line();
                    self.text_part = Some(part_id.clone());
                }
                let delta = crate::sanitize::terminal_safe(delta);
                self.write_text(&delta);
            }
            Event::PartUpdated { part } if matches!(part.kind, PartKind::Reasoning { .. }) => {
                self.reasoning.insert(part.id.clone());
                self.activity("thinking…");
            }
            Event::PartUpdated { part } => match &part.kind {
                PartKind::StepStart { .. } => self.activity(WAITING_FOR_MODEL),
                PartKind::StepFinish { reason, tokens, .. } => {
                    self.release();
                    if reason == "length"
                        && !self.summaries.contains(&part.message_id)
                        && self.length_warned.insert(part.id.clone())
                    {
                        self.note(&format!(
                            "troupe: the reply stopped at the output limit after {} output tokens (finish_reason: length); the answer may be cut short",
                            tokens.output
                        ));
                    }
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
                // The failed attempt's partial text is streamed again: a held one is dropped,
                // a shown one ends its line.
                self.drop_held();
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
        self.release();
        let _ = self.out.flush();
    }
}

/// Activity shown while a request is out and no token has arrived.
pub(super) const WAITING_FOR_MODEL: &str = "waiting for model…";

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

pub(super) fn summarize_input(v: &serde_json::Value) -> String {
    one_line(&troupe_session::timeline::key_values(v), 80)
}
