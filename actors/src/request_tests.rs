//! Request building without actors: the step request's last-step rule, `firstStep` options,
//! temperature support, headers; the summary and title requests.

use serde_json::{Map, Value, json};
use troupe_config::{Config, LoadedConfig, ResolvedModel};
use troupe_llm::{ChatMessage, ToolSpec};

use super::*;

/// The mock model resolved from a config; `model_extra` is merged into its model entry.
fn model(model_extra: Value) -> ResolvedModel {
    let mut entry = json!({"name": "Mock", "limit": {"context": 128000, "output": 8192}});
    if let (Some(e), Value::Object(x)) = (entry.as_object_mut(), model_extra) {
        e.extend(x);
    }
    let cfg = json!({"provider": {"mock": {
        "npm": "@ai-sdk/openai-compatible",
        "options": {"baseURL": "http://127.0.0.1:1/v1", "apiKey": "k"},
        "models": {"m": entry}
    }}});
    LoadedConfig::from_config(Config::from_jsonc("t", &cfg.to_string()).unwrap())
        .resolve_model("mock/m")
        .unwrap()
}

fn tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "read".into(),
            description: "read".into(),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}, "offset": {"type": "integer"}}}),
        },
        ToolSpec {
            name: "bash".into(),
            description: "bash".into(),
            parameters: json!({"type": "object"}),
        },
    ]
}

fn user(text: &str) -> ChatMessage {
    ChatMessage::User {
        content: text.into(),
        images: Vec::new(),
    }
}

fn input<'a>(
    model: &'a ResolvedModel,
    history: &'a [ChatMessage],
    tools: &'a [ToolSpec],
    opts: &'a Map<String, Value>,
    step: u32,
    max_steps: u32,
) -> StepInput<'a> {
    StepInput {
        model,
        system: "SYS",
        history,
        tools,
        agent_options: opts,
        temperature: Some(0.3),
        top_p: Some(0.9),
        step,
        max_steps,
        session_id: "ses_1",
    }
}

#[test]
fn a_middle_step_sends_system_history_and_tools() {
    let m = model(json!({}));
    let history = [user("hi")];
    let tools = tools();
    let opts = Map::new();
    let r = step_request(&input(&m, &history, &tools, &opts, 2, 5));
    assert_eq!(r.model, "m");
    assert_eq!(r.messages.len(), 2);
    assert!(matches!(&r.messages[0], ChatMessage::System { content } if content == "SYS"));
    assert_eq!(r.tools.len(), 2);
    assert_eq!(r.temperature, Some(0.3));
    assert_eq!(r.top_p, Some(0.9));
    assert_eq!(r.max_tokens, Some(8192));
    assert_eq!(
        r.headers,
        vec![("x-session-affinity".into(), "ses_1".into())]
    );
}

#[test]
fn the_last_step_sends_no_tools_and_the_max_steps_reminder() {
    let m = model(json!({}));
    let history = [user("hi")];
    let tools = tools();
    let opts = Map::new();
    let r = step_request(&input(&m, &history, &tools, &opts, 5, 5));
    assert!(r.tools.is_empty());
    match r.messages.last() {
        Some(ChatMessage::Assistant {
            content: Some(c), ..
        }) => assert_eq!(c, troupe_agents::MAX_STEPS_PROMPT),
        other => panic!("expected the reminder, got {other:?}"),
    }
    // A limit of one step keeps its tools: the only step is not a wrap-up.
    let r = step_request(&input(&m, &history, &tools, &opts, 1, 1));
    assert_eq!(r.tools.len(), 2);
    assert_eq!(r.messages.len(), 2);
}

#[test]
fn first_step_options_apply_to_step_one_only() {
    let m = model(json!({"options": {"firstStep": {
        "tool_choice": "required",
        "prefill": "I will read",
        "toolSchema": {"read": {"properties": {"path": {"enum": ["a.rs"]}, "offset": null}}}
    }, "grammar": "g"}}));
    let history = [user("hi")];
    let tools = tools();
    let mut opts = Map::new();
    opts.insert("grammar".into(), json!("agent-g"));
    let r = step_request(&input(&m, &history, &tools, &opts, 1, 5));
    assert_eq!(r.extra["tool_choice"], "required");
    assert_eq!(
        r.extra["grammar"], "agent-g",
        "agent options win over the model's"
    );
    assert!(!r.extra.contains_key("firstStep"));
    assert!(
        matches!(r.messages.last(), Some(ChatMessage::Assistant { content: Some(c), .. }) if c == "I will read")
    );
    let read = &r.tools[0].parameters["properties"];
    assert_eq!(read["path"], json!({"type": "string", "enum": ["a.rs"]}));
    assert!(read.get("offset").is_none(), "null removes a property");
    let r2 = step_request(&input(&m, &history, &tools, &opts, 2, 5));
    assert!(!r2.extra.contains_key("tool_choice"));
    assert!(!r2.extra.contains_key("firstStep"));
    assert_eq!(r2.messages.len(), 2);
    assert_eq!(r2.tools[0].parameters, tools[0].parameters);
}

#[test]
fn temperature_is_dropped_for_models_without_one() {
    let mut m = model(json!({}));
    m.temperature = false;
    let history = [user("hi")];
    let opts = Map::new();
    let r = step_request(&input(&m, &history, &[], &opts, 1, 5));
    assert_eq!(r.temperature, None);
    let t = title_request(&m, "T", Some(0.5), "x", "s");
    assert_eq!(t.temperature, None);
}

#[test]
fn summary_request_is_tool_less_with_instructions_last() {
    let m = model(json!({"options": {"firstStep": {"tool_choice": "required"}, "grammar": "g"}}));
    let r = summary_request(
        &m,
        "SUMMARIZE",
        vec![user("old")],
        "What did we do?",
        "ses_9",
    );
    assert!(r.tools.is_empty());
    assert_eq!(r.max_tokens, Some(8192));
    assert_eq!(r.messages.len(), 3);
    assert!(
        matches!(&r.messages[2], ChatMessage::User { content, .. } if content == "What did we do?")
    );
    assert!(!r.extra.contains_key("firstStep"));
    assert_eq!(r.extra["grammar"], "g");
    assert_eq!(
        r.headers,
        vec![("x-session-affinity".into(), "ses_9".into())]
    );
}

#[test]
fn title_request_cuts_the_message_and_names_its_purpose() {
    let m = model(json!({}));
    let long = "é".repeat(5_000);
    let r = title_request(&m, "TITLE", Some(0.5), &long, "ses_2");
    assert_eq!(r.max_tokens, Some(200));
    assert_eq!(r.temperature, Some(0.5));
    match &r.messages[1] {
        ChatMessage::User { content, .. } => assert_eq!(content.matches('é').count(), 4_000),
        other => panic!("{other:?}"),
    }
    assert!(
        r.headers
            .contains(&("x-troupe-purpose".into(), "title".into()))
    );
}

#[test]
fn merge_schema_follows_json_merge_patch() {
    let mut v = json!({"a": {"b": 1, "c": 2}, "d": 3});
    merge_schema(&mut v, &json!({"a": {"b": null, "e": 4}, "d": [1]}));
    assert_eq!(v, json!({"a": {"c": 2, "e": 4}, "d": [1]}));
}
