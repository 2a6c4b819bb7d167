//! The `question` tool (OpenCode's `question`): the model asks the user one or more
//! multiple-choice questions and waits for the answers.
//!
//! A question goes through the [`QuestionBroker`], beside the permission broker: it is
//! published as `question.asked` (`{id, sessionID, questions, tool: {messageID, callID}}`),
//! listed by `GET /question`, answered by `POST /question/{id}/reply` `{answers}` or dismissed
//! by `POST /question/{id}/reject` (the web view and `troupe chat`'s terminal answer through
//! the same broker), then `question.replied` / `question.rejected` is published. A dismissed
//! question stops the turn, as a rejected permission does (OpenCode `RejectedError`). The tool
//! asks permission `question` first: non-interactive `run` and `batch` deny it (nobody could
//! answer), as OpenCode does; a call that ends unanswered (the turn aborted, the tool timeout,
//! a crash) drops the question, so a late reply gets 404.

use std::sync::Arc;
use troupe_session::SessionId;

use dashmap::DashMap;
use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use tokio::sync::oneshot;
use troupe_session::{Event, Store, Write};
use troupe_tools::{ToolContext, ToolError, ToolOutput, TypedTool};

/// One option of a question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QuestionOption {
    /// What the user picks (1-5 words), also the answer's text.
    pub label: String,
    /// What the option means.
    #[serde(default)]
    pub description: String,
}

/// One question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Question {
    /// The full question.
    pub question: String,
    /// A very short label for it (a few words).
    #[serde(default)]
    pub header: String,
    /// The choices (the user may also type their own answer).
    #[serde(default)]
    pub options: Vec<QuestionOption>,
    /// Whether several options may be picked.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub multiple: bool,
}

/// Arguments of `question`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QuestionArgs {
    /// The questions to ask, in order.
    pub questions: Vec<Question>,
}

/// How the user answered: one list of picked labels (or typed text) per question, in order;
/// `None` = dismissed.
pub type Answers = Option<Vec<Vec<String>>>;

/// Someone who can answer a question besides the HTTP API (the terminal of `troupe chat`).
pub trait QuestionAsker: Send + Sync {
    /// Ask; resolves to the answers, or `None` when the user dismissed the questions.
    fn ask(&self, questions: Vec<Question>) -> BoxFuture<'static, Answers>;
}

struct Pending {
    info: Value,
    session_id: SessionId,
    questions: Vec<Question>,
    tx: oneshot::Sender<Answers>,
}

/// Most bytes one answer (a picked label or typed text) may hold.
pub const MAX_ANSWER_BYTES: usize = 8 * 1024;
/// Most bytes all answers of a reply may hold together.
pub const MAX_REPLY_BYTES: usize = 64 * 1024;

/// Why `answers` do not fit `questions`: one list per question; at most one pick for a
/// question without `multiple`, at most its options and one typed answer with it; each
/// answer at most [`MAX_ANSWER_BYTES`], all together at most [`MAX_REPLY_BYTES`].
fn check_answers(questions: &[Question], answers: &[Vec<String>]) -> Result<(), String> {
    if answers.len() != questions.len() {
        return Err(format!(
            "answers: expected {} lists (one per question), got {}",
            questions.len(),
            answers.len()
        ));
    }
    let mut total = 0usize;
    for (i, (q, a)) in questions.iter().zip(answers).enumerate() {
        let most = if q.multiple { q.options.len() + 1 } else { 1 };
        if a.len() > most {
            return Err(format!(
                "answers[{i}]: {} picks for a question that takes at most {most}{}",
                a.len(),
                if q.multiple {
                    ""
                } else {
                    " (it is not `multiple`)"
                }
            ));
        }
        for text in a {
            if text.len() > MAX_ANSWER_BYTES {
                return Err(format!(
                    "answers[{i}]: an answer of {} bytes (at most {MAX_ANSWER_BYTES})",
                    text.len()
                ));
            }
            total += text.len();
        }
    }
    if total > MAX_REPLY_BYTES {
        return Err(format!(
            "answers: {total} bytes in all (at most {MAX_REPLY_BYTES})"
        ));
    }
    Ok(())
}

/// Pending questions of a runtime.
pub struct QuestionBroker {
    store: Store,
    pending: DashMap<String, Pending>,
    asker: std::sync::OnceLock<Arc<dyn QuestionAsker>>,
}

/// Why a reply was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    /// No pending question has this id (answered already, or its turn ended).
    #[error("question not found (already answered?): {0}")]
    NotFound(String),
    /// The answers do not fit the questions.
    #[error("{0}")]
    Invalid(String),
}

impl QuestionBroker {
    /// A broker publishing on `store`'s bus.
    pub fn new(store: Store) -> Self {
        Self {
            store,
            pending: DashMap::new(),
            asker: std::sync::OnceLock::new(),
        }
    }

    /// Let `asker` answer questions too (first answer wins). Set once; later calls are
    /// ignored.
    pub fn set_asker(&self, asker: Arc<dyn QuestionAsker>) {
        let _ = self.asker.set(asker);
    }

    /// Pending questions (their `question.asked` payloads), oldest first.
    pub fn pending(&self) -> Vec<Value> {
        crate::permission::payloads_in_id_order(&self.pending, |q| &q.info)
    }

    /// Answer question `id`: one list of picked labels or typed text per question (refused
    /// when they do not fit the questions, see [`MAX_ANSWER_BYTES`] and [`MAX_REPLY_BYTES`]).
    pub fn reply(&self, id: &str, answers: Vec<Vec<String>>) -> Result<(), ReplyError> {
        self.pending
            .get(id)
            .ok_or_else(|| ReplyError::NotFound(id.to_string()))
            .and_then(|p| check_answers(&p.questions, &answers).map_err(ReplyError::Invalid))?;
        self.settle(id, Some(answers));
        Ok(())
    }

    /// Dismiss question `id`; false when it is not pending.
    pub fn reject(&self, id: &str) -> bool {
        self.settle(id, None)
    }

    fn settle(&self, id: &str, answers: Answers) -> bool {
        let Some((_, p)) = self.pending.remove(id) else {
            return false;
        };
        let event = match &answers {
            Some(a) => Event::QuestionReplied {
                session_id: p.session_id.clone(),
                request_id: id.to_string(),
                answers: a.clone(),
            },
            None => Event::QuestionRejected {
                session_id: p.session_id.clone(),
                request_id: id.to_string(),
            },
        };
        self.store.write1(Write::Publish(event));
        let _ = p.tx.send(answers);
        true
    }

    /// Publish the questions and wait for the answers (or the call's abort, which drops the
    /// question).
    async fn ask(
        self: &Arc<Self>,
        ctx: &ToolContext,
        questions: Vec<Question>,
    ) -> Result<Answers, ToolError> {
        let id = troupe_session::id::ascending(troupe_session::id::Prefix::Question);
        let info = json!({
            "id": id,
            "sessionID": ctx.session_id,
            "questions": questions,
            "tool": {"messageID": ctx.message_id, "callID": ctx.call_id},
        });
        let (tx, rx) = oneshot::channel();
        self.pending.insert(
            id.clone(),
            Pending {
                info: info.clone(),
                session_id: ctx.session_id.clone().into(),
                questions: questions.clone(),
                tx,
            },
        );
        self.store
            .write1(Write::Publish(Event::QuestionAsked(info)));
        // Whatever ends the call (an answer, the abort, the tool timeout or a crash that
        // drops this future), the question stops being answerable.
        let mut pending = Unanswered {
            broker: self.clone(),
            id: id.clone(),
            session_id: ctx.session_id.clone().into(),
            terminal: None,
        };
        pending.terminal = self.asker.get().map(|a| {
            let me = self.clone();
            let rid = id.clone();
            let fut = a.ask(questions);
            tokio::spawn(async move {
                let answers = fut.await;
                me.settle(&rid, answers);
            })
        });
        let out = tokio::select! {
            r = rx => r.ok(),
            _ = ctx.abort.cancelled() => None,
        };
        drop(pending);
        match out {
            Some(answers) => Ok(answers),
            None => Err(ToolError::Aborted),
        }
    }
}

/// A question being waited for: dropping it (the call ended, however) stops the terminal's
/// asker and, when nobody answered, forgets the question and publishes `question.rejected`,
/// so a late `POST /question/{id}/reply` gets 404 instead of answering nobody.
struct Unanswered {
    broker: Arc<QuestionBroker>,
    id: String,
    session_id: SessionId,
    terminal: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        if let Some(t) = self.terminal.take() {
            t.abort();
        }
        if self.broker.pending.remove(&self.id).is_some() {
            self.broker
                .store
                .write1(Write::Publish(Event::QuestionRejected {
                    session_id: self.session_id.clone(),
                    request_id: self.id.clone(),
                }));
        }
    }
}

/// The `question` tool, bound to the runtime's broker.
#[derive(Clone)]
pub struct QuestionTool {
    broker: Arc<QuestionBroker>,
}

impl QuestionTool {
    /// A `question` tool asking through `broker`.
    pub fn new(broker: Arc<QuestionBroker>) -> Self {
        Self { broker }
    }
}

const DESCRIPTION: &str = "Ask the user one or more questions and wait for the answers. Use it when you need a decision only the user can make (a preference, an ambiguous requirement, a choice between approaches) instead of guessing; do not use it for things you can find out yourself.\n\nEach question has the full `question`, a short `header` (a few words), and `options` ({label, description}) the user picks from; the user may also type an answer of their own. Set `multiple: true` when several options may be picked. Put the option you recommend first and say so in its description. The answers come back in order, one line per question.";

/// The tool's text for the model: one line per question with its answer.
fn answers_text(questions: &[Question], answers: &[Vec<String>]) -> String {
    let mut out = String::from("The user answered:");
    for (q, a) in questions.iter().zip(answers) {
        let a = if a.is_empty() {
            "(no answer)".to_string()
        } else {
            a.join(", ")
        };
        out.push_str(&format!("\n- {}: {a}", q.question));
    }
    out.push_str("\nContinue with these answers in mind.");
    out
}

impl TypedTool for QuestionTool {
    type Args = QuestionArgs;
    const NAME: &'static str = "question";

    fn describe(&self) -> String {
        DESCRIPTION.into()
    }

    fn run(
        &self,
        args: QuestionArgs,
        ctx: ToolContext,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        let broker = self.broker.clone();
        Box::pin(async move {
            if args.questions.is_empty() {
                return Err(troupe_tools::args::invalid(
                    "question",
                    "questions: give at least one question",
                ));
            }
            if let Some(q) = args.questions.iter().find(|q| q.question.trim().is_empty()) {
                return Err(troupe_tools::args::invalid(
                    "question",
                    format!("questions: a question is empty (header {:?})", q.header),
                ));
            }
            troupe_tools::paths::ask(
                &ctx,
                "question",
                vec!["*".into()],
                vec!["*".into()],
                Value::Object(Map::new()),
            )
            .await?;
            let questions = args.questions;
            let Some(answers) = broker.ask(&ctx, questions.clone()).await? else {
                return Err(ToolError::PermissionRejected(
                    "The user dismissed this question and stopped the turn.".into(),
                ));
            };
            let mut metadata = Map::new();
            metadata.insert("answers".into(), json!(answers));
            // Answers typed by the terminal's user are not capped like the route's: the
            // output goes through the same limits as any tool's.
            Ok(troupe_tools::apply_truncation(ToolOutput {
                title: format!(
                    "Asked {} question{}",
                    questions.len(),
                    if questions.len() == 1 { "" } else { "s" }
                ),
                output: answers_text(&questions, &answers),
                metadata,
            })
            .await)
        })
    }
}
