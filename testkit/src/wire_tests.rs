use super::*;

fn data_payloads(frames: &[Bytes]) -> Vec<Value> {
    frames
        .iter()
        .filter_map(|f| {
            let s = std::str::from_utf8(f).expect("utf8");
            let line = s.lines().find(|l| l.starts_with("data: "))?;
            serde_json::from_str(&line["data: ".len()..]).ok()
        })
        .collect()
}

fn plan(step: &Step) -> Plan {
    Plan::new(step, 0, 0, 7, 1_700_000_000, "m", 400)
}

#[test]
fn split_on_char_boundaries() {
    assert_eq!(split_chars("héllo", 2), vec!["hé", "ll", "o"]);
    assert!(split_chars("", 3).is_empty());
    assert_eq!(split_chars("abc", 16), vec!["abc"]);
}

#[test]
fn openai_text_sequence() {
    let p = plan(&Step::text("Hello world!").with_chunk_size(5));
    let frames = openai_frames(&p, true);
    let v = data_payloads(&frames);
    assert_eq!(v[0]["choices"][0]["delta"]["role"], "assistant");
    let text: String = v
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "Hello world!");
    assert_eq!(v[1]["choices"][0]["delta"]["content"], "Hello");
    let finish = &v[v.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    let usage = &v[v.len() - 1];
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["prompt_tokens"], 100);
    assert_eq!(usage["usage"]["completion_tokens"], 3);
    assert_eq!(usage["usage"]["total_tokens"], 103);
    assert_eq!(
        frames.last().map(|b| &b[..]),
        Some(&b"data: [DONE]\n\n"[..])
    );
    assert!(
        v.iter()
            .all(|c| c["model"] == "m" && c["id"] == "chatcmpl-mock-7")
    );
}

#[test]
fn openai_tool_call_merges_role_into_first_fragment() {
    let p = plan(&Step::tool("bash", json!({"command": "ls -la"})).with_chunk_size(4));
    let v = data_payloads(&openai_frames(&p, false));
    let first = &v[0]["choices"][0]["delta"];
    assert_eq!(first["role"], "assistant");
    assert_eq!(first["tool_calls"][0]["id"], "call_0_0_0");
    assert_eq!(first["tool_calls"][0]["function"]["name"], "bash");
    assert_eq!(first["tool_calls"][0]["function"]["arguments"], "");
    let args: String = v[1..]
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str())
        .collect();
    assert_eq!(args, r#"{"command":"ls -la"}"#);
    assert_eq!(
        v.last().expect("finish")["choices"][0]["finish_reason"],
        "tool_calls"
    );
}

#[test]
fn faults_truncate_and_append() {
    let p = plan(&Step::text("abcdefgh").with_chunk_size(2));
    let normal = openai_frames(&p, false);
    let (f, end) = apply_fault(normal.clone(), Some(&Fault::cut_after(2)), Dialect::OpenAi);
    assert_eq!((f.len(), end), (2, Ending::Abort));
    let (f, end) = apply_fault(
        normal.clone(),
        Some(&Fault::malformed_after(1)),
        Dialect::OpenAi,
    );
    assert_eq!(end, Ending::Done);
    assert_eq!(&f[1][..], b"data: {not json\n\n");
    let (f, _) = apply_fault(
        normal.clone(),
        Some(&Fault::error_event_after(3, "boom")),
        Dialect::Anthropic,
    );
    let s = std::str::from_utf8(&f[3]).expect("utf8");
    assert!(s.starts_with("event: error\n"), "{s}");
    assert!(s.contains(r#""type":"api_error""#), "{s}");
    let (f, end) = apply_fault(
        normal.clone(),
        Some(&Fault::hang_after(100)),
        Dialect::OpenAi,
    );
    assert_eq!((f.len(), end), (normal.len(), Ending::Hang));
}

#[test]
fn anthropic_sequence_with_thinking_text_tool() {
    let step = Step::text("Hi there")
        .with_reasoning("Let me think")
        .with_tool("read", json!({"path": "a"}))
        .with_usage(crate::UsageSpec {
            prompt_tokens: Some(100),
            cached_tokens: Some(30),
            completion_tokens: Some(9),
            reasoning_tokens: None,
        });
    let frames = anthropic_frames(&plan(&step));
    let names: Vec<String> = frames
        .iter()
        .map(|f| {
            let s = std::str::from_utf8(f).expect("utf8");
            s.lines()
                .next()
                .unwrap_or("")
                .trim_start_matches("event: ")
                .to_owned()
        })
        .collect();
    assert_eq!(names[0], "message_start");
    assert_eq!(names[1], "content_block_start");
    assert_eq!(names[2], "ping");
    assert_eq!(names.last().map(String::as_str), Some("message_stop"));
    let v = data_payloads(&frames);
    let sig = v
        .iter()
        .find(|e| e["delta"]["type"] == "signature_delta")
        .expect("signature");
    assert_eq!(sig["delta"]["signature"], "mock-signature-0-0");
    let tool_start = v
        .iter()
        .find(|e| e["content_block"]["type"] == "tool_use")
        .expect("tool start");
    assert_eq!(tool_start["index"], 2);
    let md = v
        .iter()
        .find(|e| e["type"] == "message_delta")
        .expect("delta");
    assert_eq!(md["delta"]["stop_reason"], "tool_use");
    assert_eq!(md["usage"]["input_tokens"], 70);
    assert_eq!(md["usage"]["cache_read_input_tokens"], 30);
    assert_eq!(md["usage"]["output_tokens"], 9);
    let json_args: String = v
        .iter()
        .filter_map(|e| e["delta"]["partial_json"].as_str())
        .collect();
    assert_eq!(json_args, r#"{"path":"a"}"#);
}

#[test]
fn analyze_both_dialects() {
    let body = json!({"model": "gpt", "stream": true, "stream_options": {"include_usage": true},
        "messages": [
            {"role": "system", "content": "You are X"},
            {"role": "user", "content": [{"type": "text", "text": "first"}]},
            {"role": "assistant", "content": "a"},
            {"role": "tool", "content": "r"},
            {"role": "assistant", "content": "b"},
            {"role": "user", "content": "second"}]});
    let i = analyze(&body, Dialect::OpenAi).expect("ok");
    assert_eq!(i.step_index, 2);
    assert_eq!(i.first_user_text, "first");
    assert_eq!(i.system_text, "You are X");
    assert!(i.stream && i.include_usage);
    let body = json!({"model": "claude", "system": [{"type": "text", "text": "SYS"}],
        "messages": [{"role": "user", "content": "go"},
                     {"role": "assistant", "content": [{"type": "tool_use"}]},
                     {"role": "user", "content": [{"type": "tool_result", "content": "x"}]}]});
    let i = analyze(&body, Dialect::Anthropic).expect("ok");
    assert_eq!(
        (i.step_index, i.system_text.as_str(), i.stream),
        (1, "SYS", false)
    );
    assert!(analyze(&json!({"model": "x"}), Dialect::OpenAi).is_err());
    assert!(analyze(&json!([1]), Dialect::OpenAi).is_err());
}

#[test]
fn a_trailing_assistant_prefill_is_not_a_step() {
    let body = json!({"model": "m", "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "<tool_call>\n"}]});
    assert_eq!(analyze(&body, Dialect::OpenAi).expect("ok").step_index, 0);
}

#[test]
fn non_streaming_shapes() {
    let p = plan(&Step::raw_tool("bash", "{oops"));
    let c = openai_completion(&p);
    assert_eq!(
        c["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
        "{oops"
    );
    assert_eq!(c["choices"][0]["message"]["content"], Value::Null);
    let m = anthropic_message(&p);
    assert_eq!(m["content"][0]["input"]["_raw"], "{oops");
    assert_eq!(m["stop_reason"], "tool_use");
}

/// The chunk frames written from the per-response envelope are byte for byte what the chunk
/// object written as a whole `Value` gives (the way the frames were built before).
#[test]
fn openai_chunk_frames_equal_the_whole_value_written_out() {
    let whole = |p: &Plan, delta: &Value, finish: Option<&str>| {
        let v = json!({
            "id": format!("chatcmpl-mock-{}", p.id),
            "object": "chat.completion.chunk",
            "created": p.created,
            "model": p.model,
            "system_fingerprint": "fp_mock",
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        });
        format!("data: {v}\n\n")
    };
    let odd = "quote \" backslash \\ newline \n tab \t nul \u{0} emoji 😀 é";
    let steps = [
        Step::text("Hello world!"),
        Step::text(odd).with_reasoning(odd),
        Step::tool("bash", json!({"command": odd})),
        Step::raw_tool("edit", "{\"path\": \"a\\\"b\"").with_text("then"),
        Step::tool("read", json!({"path": "x"})).with_tool("glob", json!({"pattern": "*"})),
        Step::text("cut").with_finish("length"),
    ];
    for step in steps {
        for size in [1, 3, 16] {
            let mut p = plan(&step.clone().with_chunk_size(size));
            p.model = odd.to_string();
            let frames = openai_frames(&p, true);
            // Every frame but the usage chunk and `[DONE]` is a chunk with one choice.
            for f in &frames[..frames.len() - 2] {
                let text = std::str::from_utf8(f).expect("utf8");
                let v: Value = serde_json::from_str(&text["data: ".len()..]).expect("json");
                let choice = &v["choices"][0];
                let expected = whole(&p, &choice["delta"], choice["finish_reason"].as_str());
                assert_eq!(text, expected, "step {step:?}, chunk size {size}");
            }
        }
    }
}
