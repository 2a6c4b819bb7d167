//! Structured output for one turn (`troupe run --json-schema FILE`, a batch task's
//! `"schema"`, OpenCode's `format: {type: "json_schema"}`).
//!
//! A turn with a schema offers the `StructuredOutput` tool ([`StructuredOutputTool`]) beside
//! the agent's tools, asks the provider to call a tool on every step (`tool_choice`), and adds
//! [`STRUCTURED_OUTPUT_SYSTEM_PROMPT`]. After each step [`StructuredTurn::after_step`]
//! decides: a validated call ends the turn with the value (stored on the assistant message
//! as `structured`); a call that failed validation went back to the model as the tool's error
//! and the loop goes on, until [`MAX_INVALID_ANSWERS`] such calls fail the turn with the last
//! validation error; a step that answers in plain text instead fails the turn
//! (`StructuredOutputError`, as OpenCode does).

use std::sync::Arc;

use serde_json::{Value, json};
use troupe_config::model::Protocol;
use troupe_session::{MessageError, MessageErrorName, MessageWithParts, PartKind, ToolState};
use troupe_tools::Registry;
use troupe_tools::builtin::structured::{
    STRUCTURED_METADATA_KEY, STRUCTURED_OUTPUT_SYSTEM_PROMPT, STRUCTURED_OUTPUT_TOOL,
    StructuredOutputTool,
};

/// Calls of `StructuredOutput` that may fail validation in one turn before it fails: the
/// first answer plus two corrections (OpenCode's `retryCount` default of 2, which OpenCode
/// declares but never enforces).
pub const MAX_INVALID_ANSWERS: u32 = 3;

/// The structured-output state of a running turn.
#[derive(Debug)]
pub struct StructuredTurn {
    /// The runtime's tools plus this turn's `StructuredOutput`.
    pub registry: Arc<Registry>,
    /// Validation failures so far.
    pub invalid: u32,
    /// The newest validation error text.
    pub last_error: Option<String>,
    /// Id of the newest assistant message already looked at (a step is counted once).
    seen: Option<troupe_session::MessageId>,
}

/// What a finished step means for a structured turn.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Not decided here: the normal loop rules apply.
    Continue,
    /// The model gave a valid value: end the turn with it.
    Captured(Value),
    /// End the turn with this error.
    Failed(MessageError),
}

impl StructuredTurn {
    /// Compile `schema` and build the turn's registry (`base` plus `StructuredOutput`).
    /// Errors: the schema is invalid (see [`StructuredOutputTool::new`]).
    pub fn new(schema: &Value, base: &Registry) -> Result<Self, String> {
        let tool = StructuredOutputTool::new(schema)?;
        let mut registry = base.clone();
        registry.register(Arc::new(tool));
        Ok(Self {
            registry: Arc::new(registry),
            invalid: 0,
            last_error: None,
            seen: None,
        })
    }

    /// The `StructuredOutput` tool as offered to the model.
    pub fn spec(&self) -> Option<troupe_llm::ToolSpec> {
        let t = self.registry.get(STRUCTURED_OUTPUT_TOOL)?;
        Some(troupe_llm::ToolSpec {
            name: STRUCTURED_OUTPUT_TOOL.into(),
            description: t.description(),
            parameters: t.parameters(),
        })
    }

    /// The system prompt with the structured-output instructions appended.
    pub fn system(system: &str) -> String {
        format!("{system}\n{STRUCTURED_OUTPUT_SYSTEM_PROMPT}")
    }

    /// Ask the provider to call a tool on every step: OpenAI's `tool_choice: "required"`,
    /// Anthropic's `{"type": "any"}`. Nothing when the request offers no tools (the last
    /// allowed step).
    pub fn require_tool_call(protocol: Protocol, request: &mut troupe_llm::ChatRequest) {
        if request.tools.is_empty() {
            return;
        }
        let choice = match protocol {
            Protocol::OpenaiChat => json!("required"),
            Protocol::AnthropicMessages => json!({"type": "any"}),
        };
        request.extra.insert("tool_choice".into(), choice);
    }

    /// Decide after the step `m` (the newest assistant message of the turn; `None` before
    /// the first step). Each message is looked at once.
    pub fn after_step(&mut self, m: Option<&MessageWithParts>) -> Outcome {
        let Some(m) = m else {
            return Outcome::Continue;
        };
        let troupe_session::Message::Assistant(a) = &m.info else {
            return Outcome::Continue;
        };
        if self.seen.as_deref() == Some(a.id.as_str()) {
            return Outcome::Continue;
        }
        self.seen = Some(a.id.clone());
        let mut called = false;
        for p in &m.parts {
            let PartKind::Tool { tool, state, .. } = &p.kind else {
                continue;
            };
            if tool != STRUCTURED_OUTPUT_TOOL {
                continue;
            }
            called = true;
            match state {
                ToolState::Completed { metadata, .. } => {
                    if let Some(v) = metadata.get(STRUCTURED_METADATA_KEY) {
                        return Outcome::Captured(v.clone());
                    }
                }
                ToolState::Error { error, .. } => {
                    self.invalid += 1;
                    self.last_error = Some(error.clone());
                }
                _ => {}
            }
        }
        if a.error.is_some() {
            // The step failed for its own reason; the normal rules end the turn with it.
            return Outcome::Continue;
        }
        if called && self.invalid >= MAX_INVALID_ANSWERS {
            return Outcome::Failed(self.error(format!(
                "the model's answer did not match the JSON schema after {} attempts",
                self.invalid
            )));
        }
        let has_tools = m
            .parts
            .iter()
            .any(|p| matches!(p.kind, PartKind::Tool { .. }));
        if a.finish.is_some() && !has_tools {
            return Outcome::Failed(self.error("Model did not produce structured output".into()));
        }
        Outcome::Continue
    }

    fn error(&self, what: String) -> MessageError {
        let message = match &self.last_error {
            Some(last) => format!("{what}; last validation error: {last}"),
            None => what,
        };
        MessageError::new(MessageErrorName::StructuredOutput, message)
    }
}

/// Put `value` on the assistant message `m` (its `structured` field), returning the updated
/// message info to store.
pub fn attach(m: &mut MessageWithParts, value: Value) -> Option<troupe_session::Message> {
    match &mut m.info {
        troupe_session::Message::Assistant(a) => {
            a.structured = Some(value);
            a.finish.get_or_insert_with(|| "stop".into());
            Some(m.info.clone())
        }
        troupe_session::Message::User(_) => None,
    }
}

#[cfg(test)]
#[path = "structured_tests.rs"]
mod tests;
