//! Steering a running turn: a prompt sent to a busy session joins the running turn at its
//! next step boundary instead of waiting for a turn of its own (OpenCode's runner joins a
//! running loop the same way, opencode-engine.md §1.1; the wrap is §1.2 step 9.8).
//!
//! The session actor holds such prompts in the turn ([`Steering`]) while a step or a
//! compaction runs. At the next step boundary it stores each as an ordinary user message
//! (so `session show` shows what the user typed), moves the turn's current user message to
//! the newest of them (so the loop goes on even if the model had just answered), and the
//! request of that one step sends their text wrapped in [`wrap`]'s reminder. Later requests
//! send the text as stored, as OpenCode does. A turn that ends before a boundary (an error,
//! a stop, the step limit) hands its undelivered prompts back to the queue, where each runs
//! as a turn of its own; an abort drops them like queued prompts.

use troupe_llm::ChatMessage;
use troupe_session::{MessageWithParts, PartKind};

use crate::TurnResult;
use crate::session_actor::PendingPrompt;

/// Whether a prompt may join a running turn of `agent` on `model` (`provider/model`):
/// only a plain prompt that asked to steer (not `queue`, not a compaction, not `noReply`,
/// not a resumed turn) and names no other agent or model, since a turn cannot switch
/// either midway. Everything else waits for its own turn.
pub fn can_join(p: &PendingPrompt, agent: &str, model: &str) -> bool {
    let i = &p.input;
    i.steer
        && !i.compact
        && !i.no_reply
        && !p.resume
        && i.agent.as_deref().is_none_or(|a| a == agent)
        && i.model.as_deref().is_none_or(|m| m == model)
}

/// The user's text as the model sees it in the step that delivers it (OpenCode's wording
/// of the mid-run message reminder, `session/prompt.ts`).
pub fn wrap(text: &str) -> String {
    format!(
        "<system-reminder>\nThe user sent the following message:\n{text}\n\nPlease address this message and continue with your tasks.\n</system-reminder>"
    )
}

/// Convert a steered user message for the request that delivers it: its non-synthetic,
/// non-empty text parts wrapped in [`wrap`], everything else as
/// [`crate::history::convert`] sends it. Appends to `out`.
pub fn convert_wrapped(m: &MessageWithParts, out: &mut Vec<ChatMessage>) {
    let mut m = m.clone();
    for p in &mut m.parts {
        if let PartKind::Text {
            text,
            synthetic: false,
            ..
        } = &mut p.kind
            && !text.trim().is_empty()
        {
            *text = wrap(text);
        }
    }
    crate::history::convert(&m, out);
}

/// Prompts steering the running turn.
#[derive(Default)]
pub struct Steering {
    /// Waiting for the next step boundary, in arrival order.
    pub pending: Vec<PendingPrompt>,
    /// Delivered at the boundary the next step starts from: the number of user messages at
    /// the end of the history whose text that step's request wraps.
    pub just_delivered: usize,
    /// Callers of delivered prompts: each gets the turn's result (with its own user
    /// message id) when the turn ends.
    pub joined: Vec<(troupe_session::MessageId, crate::turn_error::TurnReply)>,
}

impl Steering {
    /// Send the turn's result to every joined caller, naming each one's own message.
    pub fn answer(&mut self, result: &TurnResult) {
        for (user_id, reply) in self.joined.drain(..) {
            let mut r = result.clone();
            r.user_message_id = Some(user_id);
            let _ = reply.send(Ok(r));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PromptInput;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;
    use troupe_session::{Message, UserMessage};

    fn pending(input: PromptInput) -> PendingPrompt {
        PendingPrompt {
            input,
            accepted: Arc::new(AtomicBool::new(false)),
            started: Arc::new(AtomicBool::new(false)),
            resume: false,
            reply: tokio::sync::oneshot::channel().0,
        }
    }

    #[test]
    fn only_plain_steering_prompts_of_the_same_agent_and_model_join() {
        let steer = |f: fn(&mut PromptInput)| {
            let mut i = PromptInput {
                text: "x".into(),
                steer: true,
                ..Default::default()
            };
            f(&mut i);
            can_join(&pending(i), "build", "mock/m")
        };
        assert!(steer(|_| {}));
        assert!(steer(|i| i.agent = Some("build".into())));
        assert!(steer(|i| i.model = Some("mock/m".into())));
        assert!(!steer(|i| i.steer = false), "queue keeps its own turn");
        assert!(!steer(|i| i.compact = true));
        assert!(!steer(|i| i.no_reply = true));
        assert!(!steer(|i| i.agent = Some("plan".into())));
        assert!(!steer(|i| i.model = Some("mock/other".into())));
        let mut resumed = pending(PromptInput {
            steer: true,
            ..Default::default()
        });
        resumed.resume = true;
        assert!(!can_join(&resumed, "build", "mock/m"));
    }

    #[test]
    fn only_the_users_own_text_is_wrapped() {
        let u = UserMessage {
            id: "msg_1".into(),
            ..UserMessage::new(
                &"ses".into(),
                "build",
                troupe_session::ModelRef::parse("mock/m").unwrap(),
            )
        };
        let text = |t: &str, synthetic| PartKind::Text {
            text: t.into(),
            synthetic,
            time: None,
        };
        let m = MessageWithParts {
            info: Message::User(u),
            parts: vec![
                troupe_session::Part::new(
                    &"ses".into(),
                    &"msg_1".into(),
                    text("stop and use tabs", false),
                ),
                troupe_session::Part::new(&"ses".into(), &"msg_1".into(), text("a reminder", true)),
            ],
        };
        let mut out = Vec::new();
        convert_wrapped(&m, &mut out);
        let [ChatMessage::User { content, .. }] = out.as_slice() else {
            panic!("{out:?}")
        };
        assert_eq!(
            content,
            &format!("{}\na reminder", wrap("stop and use tabs"))
        );
        assert!(content.starts_with(
            "<system-reminder>\nThe user sent the following message:\nstop and use tabs\n"
        ));
    }
}
