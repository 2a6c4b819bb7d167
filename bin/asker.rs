//! Asking the user in the terminal: permission asks (`[o]nce`, `[a]lways`, `[r]eject`) and
//! the model's questions, while the activity line is paused.

use crate::output::one_line;

/// Prompts on the terminal for permission asks: `[o]nce`, `[a]lways`, `[r]eject` (then
/// optional feedback). Used by `troupe run` when stdin and stderr are terminals.
#[derive(Default)]
pub struct TerminalAsker {
    lock: std::sync::Arc<tokio::sync::Mutex<()>>,
    /// Paused while the question is on screen.
    activity: crate::activity::Activity,
}

impl TerminalAsker {
    /// An asker that pauses `activity` while it asks.
    pub fn new(activity: crate::activity::Activity) -> Self {
        Self {
            lock: Default::default(),
            activity,
        }
    }
}

/// The question of a permission ask: the permission and what it is for, as the user would
/// write it (`bash: sleep 3; echo done`, the command as written, not the sub-commands the
/// rules check), then the checked patterns when they say something more.
pub fn permission_question(req: &troupe_tools::PermissionRequest) -> String {
    let written = req
        .metadata
        .get("command")
        .and_then(|v| v.as_str())
        .map(|c| one_line(c, 300));
    let patterns = req.patterns.join(", ");
    match written {
        Some(cmd) if !cmd.is_empty() => {
            if req.patterns.len() > 1 || req.patterns.first().is_some_and(|p| *p != cmd) {
                format!("{}: {cmd}\n  (checked as: {patterns})", req.permission)
            } else {
                format!("{}: {cmd}", req.permission)
            }
        }
        _ => format!("{}: {patterns}", req.permission),
    }
}

impl troupe_tools::PermissionAsker for TerminalAsker {
    fn ask(
        &self,
        req: troupe_tools::PermissionRequest,
    ) -> futures::future::BoxFuture<'static, troupe_tools::PermissionReply> {
        let lock = self.lock.clone();
        let activity = self.activity.clone();
        Box::pin(async move {
            let _g = lock.lock().await;
            activity.pause();
            let why = if req.reason.is_empty() {
                String::new()
            } else {
                format!("\n  {}", req.reason)
            };
            let question = format!(
                "\npermission: {}{why}\n  allow? [o]nce / [a]lways / [r]eject (text after r = feedback): ",
                permission_question(&req)
            );
            let answer = tokio::task::spawn_blocking(move || {
                eprint!("{question}");
                let mut line = String::new();
                std::io::stdin().read_line(&mut line).map(|_| line)
            })
            .await;
            activity.resume();
            match answer {
                Ok(Ok(line)) => {
                    let t = line.trim();
                    match t.chars().next().map(|c| c.to_ascii_lowercase()) {
                        Some('o') | Some('y') => troupe_tools::PermissionReply::Allow,
                        Some('a') => troupe_tools::PermissionReply::AllowAlways,
                        _ => {
                            // A plain reject stops the turn; with feedback the model sees it
                            // and the turn goes on (issue 11, OpenCode §6).
                            let fb = t.get(1..).unwrap_or("").trim().to_string();
                            if fb.is_empty() {
                                troupe_tools::PermissionReply::Reject(String::new())
                            } else {
                                troupe_tools::PermissionReply::Deny(format!(
                                    "The user rejected this call and said: {fb}"
                                ))
                            }
                        }
                    }
                }
                _ => troupe_tools::PermissionReply::Reject(String::new()),
            }
        })
    }
}

/// One answer typed at the terminal for `q`: option numbers (`2`, `1,3`) pick labels; any
/// other text is the answer itself; an empty line is `None` (dismiss).
pub fn parse_question_answer(
    line: &str,
    q: &troupe_actors::question::Question,
) -> Option<Vec<String>> {
    let t = line.trim();
    if t.is_empty() {
        return None;
    }
    let picked: Option<Vec<String>> = t
        .split(',')
        .map(|n| {
            n.trim()
                .parse::<usize>()
                .ok()
                .and_then(|i| i.checked_sub(1))
                .and_then(|i| q.options.get(i))
                .map(|o| o.label.clone())
        })
        .collect();
    match picked {
        Some(labels) if !labels.is_empty() && (q.multiple || labels.len() == 1) => Some(labels),
        _ => Some(vec![t.to_string()]),
    }
}

impl troupe_actors::question::QuestionAsker for TerminalAsker {
    fn ask(
        &self,
        questions: Vec<troupe_actors::question::Question>,
    ) -> futures::future::BoxFuture<'static, troupe_actors::question::Answers> {
        let lock = self.lock.clone();
        let activity = self.activity.clone();
        Box::pin(async move {
            let _g = lock.lock().await;
            activity.pause();
            let answers = tokio::task::spawn_blocking(move || {
                let mut answers = Vec::new();
                for q in &questions {
                    let mut text = String::from("\nquestion");
                    if !q.header.is_empty() {
                        text.push_str(&format!(" ({})", q.header));
                    }
                    text.push_str(&format!(": {}\n", q.question));
                    for (i, o) in q.options.iter().enumerate() {
                        if o.description.is_empty() {
                            text.push_str(&format!("  {}. {}\n", i + 1, o.label));
                        } else {
                            text.push_str(&format!(
                                "  {}. {} - {}\n",
                                i + 1,
                                o.label,
                                o.description
                            ));
                        }
                    }
                    text.push_str(if q.multiple {
                        "  answer with numbers (1,3) or your own text; empty line = dismiss: "
                    } else {
                        "  answer with a number or your own text; empty line = dismiss: "
                    });
                    eprint!("{text}");
                    let mut line = String::new();
                    match std::io::stdin().read_line(&mut line) {
                        Ok(n) if n > 0 => answers.push(parse_question_answer(&line, q)?),
                        _ => return None,
                    }
                }
                Some(answers)
            })
            .await
            .ok()
            .flatten();
            activity.resume();
            answers
        })
    }
}

#[cfg(test)]
#[path = "asker_tests.rs"]
mod tests;
