//! Provider requests as pure functions of plain data: a turn's step, a compaction summary
//! and a session title. The actors gather the inputs and send what these return; the rules
//! (which tools on the last step, `firstStep` options, temperature support, headers) are
//! unit-tested in `request_tests.rs` without starting an actor.

use std::sync::Arc;

use serde_json::{Map, Value};
use troupe_config::ResolvedModel;
use troupe_llm::{ChatMessage, ChatRequest, ToolSpec};

/// What a turn's step request is made of.
#[derive(Debug, Clone)]
pub struct StepInput<'a> {
    /// The model.
    pub model: &'a ResolvedModel,
    /// System prompt of the turn.
    pub system: &'a str,
    /// The history converted to model messages (from the newest summary on).
    pub history: &'a [ChatMessage],
    /// Tools the agent may use.
    pub tools: &'a [ToolSpec],
    /// The agent's `options` (merged over the model's).
    pub agent_options: &'a Map<String, Value>,
    /// The agent's temperature (sent only when the model supports one).
    pub temperature: Option<f64>,
    /// The agent's `top_p`.
    pub top_p: Option<f64>,
    /// 1-based step number within the turn.
    pub step: u32,
    /// The agent's step limit.
    pub max_steps: u32,
    /// Session id (the `x-session-affinity` header).
    pub session_id: &'a str,
}

/// The request of one step (OpenCode's loop): system prompt, history, tools; on the last
/// allowed step (of a limit above 1) no tools and the max-steps reminder as an assistant
/// message, so the model answers instead of calling more tools. The model's options, then
/// the agent's, go into the body; `firstStep` options apply to step 1 only: `prefill` is sent
/// as the start of the assistant's answer, `toolSchema` (`{tool: JSON Schema fragment}`) is
/// merge-patched into those tools' parameters (RFC 7396), every other key joins the body.
pub fn step_request(input: &StepInput<'_>) -> ChatRequest {
    step_request_with_tools(input, input.tools.into())
}

/// [`step_request`] with the tools given as a shared list (`input.tools` is not read): spares
/// the caller who keeps the list a copy of every schema, and lets the body cache recognize it.
pub fn step_request_with_tools(input: &StepInput<'_>, tools: Arc<[ToolSpec]>) -> ChatRequest {
    let is_last = input.step >= input.max_steps && input.max_steps > 1;
    let mut messages = Vec::with_capacity(input.history.len() + 3);
    messages.push(ChatMessage::System {
        content: input.system.to_string(),
    });
    messages.extend_from_slice(input.history);
    if is_last {
        messages.push(assistant_text(troupe_agents::MAX_STEPS_PROMPT));
    }
    let mut extra = input.model.options.clone();
    for (k, v) in input.agent_options {
        extra.insert(k.clone(), v.clone());
    }
    let mut tool_schema: Option<Map<String, Value>> = None;
    if let Some(Value::Object(first)) = extra.remove("firstStep")
        && input.step == 1
    {
        for (k, v) in first {
            match (k.as_str(), v) {
                ("toolSchema", Value::Object(m)) => tool_schema = Some(m),
                ("toolSchema", _) => {}
                ("prefill", v) => {
                    if let Some(text) = v.as_str().filter(|t| !t.is_empty()) {
                        messages.push(assistant_text(text));
                    }
                }
                (_, v) => {
                    extra.insert(k, v);
                }
            }
        }
    }
    let tools = if is_last {
        Arc::default()
    } else if let Some(patches) = &tool_schema {
        let mut tools = tools.to_vec();
        for t in &mut tools {
            if let Some(patch) = patches.get(&t.name) {
                merge_schema(&mut t.parameters, patch);
            }
        }
        tools.into()
    } else {
        tools
    };
    ChatRequest {
        model: input.model.model_id.clone(),
        messages,
        tools,
        temperature: input.temperature.filter(|_| input.model.temperature),
        top_p: input.top_p,
        max_tokens: Some(input.model.max_output_tokens()),
        extra,
        headers: vec![("x-session-affinity".into(), input.session_id.to_string())],
        body: None,
    }
}

/// The compaction summary request: the `compaction` agent's prompt as system, the history to
/// summarize, then the summary instructions as the last user message. No tools; at most
/// 8,192 output tokens; the model's options without `firstStep`.
pub fn summary_request(
    model: &ResolvedModel,
    system: &str,
    history: Vec<ChatMessage>,
    instructions: &str,
    session_id: &str,
) -> ChatRequest {
    let mut messages = Vec::with_capacity(history.len() + 2);
    messages.push(ChatMessage::System {
        content: system.to_string(),
    });
    messages.extend(history);
    messages.push(ChatMessage::User {
        content: instructions.to_string(),
        images: Vec::new(),
    });
    side_request(
        model,
        messages,
        summary_max_tokens(model),
        None,
        session_id,
        None,
    )
}

/// Output limit of a summary request: the model's, at most 8,192.
pub fn summary_max_tokens(model: &ResolvedModel) -> u64 {
    model.max_output_tokens().min(8_192)
}

/// The title request: the `title` agent's prompt as system and the first user message (cut
/// to 4,000 chars) in an instruction; at most 200 output tokens; the agent's temperature when
/// the model supports one; header `x-troupe-purpose: title`.
pub fn title_request(
    model: &ResolvedModel,
    system: &str,
    temperature: Option<f64>,
    first_message: &str,
    session_id: &str,
) -> ChatRequest {
    let text: String = first_message.chars().take(4_000).collect();
    let messages = vec![
        ChatMessage::System {
            content: system.to_string(),
        },
        ChatMessage::User {
            content: format!(
                "Write a title for a conversation that starts with this message:\n\n{text}"
            ),
            images: Vec::new(),
        },
    ];
    side_request(
        model,
        messages,
        model.max_output_tokens().min(200),
        temperature.filter(|_| model.temperature),
        session_id,
        Some("title"),
    )
}

/// A tool-less request beside the turn (summary, title, change summary).
pub fn side_request(
    model: &ResolvedModel,
    messages: Vec<ChatMessage>,
    max_tokens: u64,
    temperature: Option<f64>,
    session_id: &str,
    purpose: Option<&str>,
) -> ChatRequest {
    let mut extra = model.options.clone();
    extra.remove("firstStep");
    let mut headers = vec![("x-session-affinity".to_string(), session_id.to_string())];
    if let Some(p) = purpose {
        headers.push(("x-troupe-purpose".into(), p.into()));
    }
    ChatRequest {
        model: model.model_id.clone(),
        messages,
        tools: Default::default(),
        temperature,
        top_p: None,
        max_tokens: Some(max_tokens),
        extra,
        headers,
        body: None,
    }
}

fn assistant_text(text: &str) -> ChatMessage {
    ChatMessage::Assistant {
        content: Some(text.to_string()),
        reasoning: None,
        reasoning_signature: None,
        tool_calls: Vec::new(),
    }
}

/// Apply a JSON Schema fragment to a tool's parameter schema (`firstStep.toolSchema`) with
/// JSON Merge Patch semantics (RFC 7396): objects merge key by key, `null` removes the key
/// (e.g. an optional property the first call must not use), anything else replaces it.
pub fn merge_schema(dst: &mut Value, patch: &Value) {
    match (dst, patch) {
        (Value::Object(d), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    d.remove(k);
                    continue;
                }
                match d.get_mut(k) {
                    Some(existing) => merge_schema(existing, v),
                    None => {
                        d.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (dst, patch) => *dst = patch.clone(),
    }
}

#[cfg(test)]
#[path = "request_tests.rs"]
mod tests;
