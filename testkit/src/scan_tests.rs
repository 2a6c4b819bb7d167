use serde_json::{Map, Value, json};

use super::*;
use crate::wire::analyze;

/// Checks `scan` against `analyze` of the parsed body in both dialects: invalid JSON is
/// `Unsure`; valid JSON gives `analyze`'s facts or its message, or `Unsure` where
/// `unsure_ok` allows it. Returns whether any dialect was unsure.
fn check(body: &[u8], unsure_ok: bool) -> bool {
    let parsed = serde_json::from_slice::<Value>(body);
    let mut unsure = false;
    for dialect in [Dialect::OpenAi, Dialect::Anthropic] {
        let got = scan(body, dialect);
        let shown = String::from_utf8_lossy(body);
        match (&parsed, got) {
            (Err(_), got) => assert_eq!(got, Scan::Unsure, "invalid JSON {shown}"),
            (Ok(_), Scan::Unsure) => {
                assert!(unsure_ok, "unsure about {shown} ({dialect:?})");
                unsure = true;
            }
            (Ok(v), Scan::Info(info)) => {
                assert_eq!(analyze(v, dialect), Ok(info), "{shown} ({dialect:?})");
            }
            (Ok(v), Scan::Rejected(msg)) => {
                assert_eq!(analyze(v, dialect), Err(msg), "{shown} ({dialect:?})");
            }
        }
    }
    unsure
}

fn check_value(v: &Value) {
    check(v.to_string().as_bytes(), false);
}

#[test]
fn bodies_like_troupe_sends_give_the_same_facts() {
    check_value(
        &json!({"model": "gpt", "stream": true, "stream_options": {"include_usage": true},
        "messages": [
            {"role": "system", "content": "You are X"},
            {"role": "developer", "content": [{"type": "text", "text": "dev\nrules"}]},
            {"role": "user", "content": [{"type": "text", "text": "first"}, {"type": "text", "text": "2nd"}]},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "read", "arguments": "{\"path\":\"notes.md\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "line 1\nline \"2\"\t\u{e9}\u{1F600}"},
            {"role": "assistant", "content": "b"},
            {"role": "user", "content": "second"}],
        "tools": [{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}],
        "temperature": 0.5, "max_tokens": 100}),
    );
    check_value(&json!({"model": "claude", "stream": true,
        "system": [{"type": "text", "text": "SYS"}, {"type": "text", "text": "more", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": "go"},
                     {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "x", "input": {}}]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "x"}]}]}));
    // A trailing assistant message is a prefill, not a step.
    check_value(&json!({"model": "m", "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "<tool_call>\n"}]}));
    check_value(&json!({"messages": []}));
}

#[test]
fn odd_shapes_give_the_same_facts_or_the_same_rejection() {
    for v in [
        json!({"model": "x"}),
        json!([1]),
        json!("text"),
        json!(null),
        json!(3.5),
        json!({"messages": {"role": "user"}}),
        json!({"messages": "user"}),
        json!({"messages": [1, "x", null, [], {"role": 5}, {"content": "no role"}, {"role": "user"}]}),
        json!({"messages": [{"role": "user", "content": {"text": "object"}}]}),
        json!({"messages": [{"role": "user", "content": [1, "s", {"text": 2}, {"type": "text"}, {"text": "ok"}, [{"text": "nested"}]]}]}),
        json!({"messages": [{"role": "system"}, {"role": "system", "content": null}, {"role": "developer", "content": 7}, {"role": "user", "content": "u"}]}),
        json!({"messages": [{"role": "assistant"}, {"role": "user", "content": "late user"}, {"role": "user", "content": "later"}]}),
        json!({"model": 5, "stream": "yes", "stream_options": [true], "messages": []}),
        json!({"model": null, "stream": false, "stream_options": {"include_usage": 1}, "messages": []}),
        json!({"stream_options": "x", "system": "plain system", "messages": [{"role": "system", "content": "s"}]}),
        json!({"system": 3, "messages": [{"role": "user", "content": ""}]}),
    ] {
        check_value(&v);
    }
}

#[test]
fn key_order_repeats_and_escapes_follow_a_value_parse() {
    let same = [
        // Content before role: read anyway, the role decides afterwards.
        r#"{"messages":[{"content":"first","role":"user"},{"content":"a","role":"assistant"}]}"#,
        r#"{"messages":[{"content":"sys","role":"system"},{"role":"user","content":"u"}]}"#,
        // Repeated keys: the last one wins, as in a `Value` map.
        r#"{"messages":[{"role":"user","content":"one","content":"two"}]}"#,
        r#"{"messages":[{"role":"user","content":"c","role":"assistant"}]}"#,
        r#"{"messages":[{"role":"assistant","role":"user","content":"c"}]}"#,
        r#"{"messages":[],"messages":{"not":"an array"}}"#,
        r#"{"messages":"no","messages":[{"role":"user","content":"yes"}]}"#,
        r#"{"model":"a","model":"b","stream":true,"stream":false,"messages":[]}"#,
        r#"{"stream_options":{"include_usage":true,"include_usage":false},"messages":[]}"#,
        r#"{"stream_options":{"include_usage":true},"stream_options":null,"messages":[]}"#,
        r#"{"messages":[{"role":"user","content":[{"text":"a","text":"b"}]}]}"#,
        // Escapes in keys and values.
        r#"{"m\u0065ssages":[{"r\u006fle":"us\u0065r","content":"t\u00e9xt\n\"q\""}],"model":"\ud83d\ude00"}"#,
        // Whitespace everywhere.
        " \n{ \"messages\" : [ { \"role\" : \"user\" , \"content\" : \"x\" } ] } \n",
    ];
    for body in same {
        check(body.as_bytes(), false);
    }
    // A role that comes again after the content was skipped for the first role.
    assert!(check(
        br#"{"messages":[{"role":"assistant","content":"c","role":"user"}]}"#,
        true
    ));
}

#[test]
fn whatever_a_value_parse_rejects_is_left_to_it() {
    let mut deep = "[".repeat(200);
    deep.push_str(&"]".repeat(200));
    let deep_in_content = format!(r#"{{"messages":[{{"role":"tool","content":{deep}}}]}}"#);
    let bodies: Vec<Vec<u8>> = vec![
        b"".to_vec(),
        b"{".to_vec(),
        b"{\"messages\":[]} x".to_vec(),
        b"{\"messages\":[],}".to_vec(),
        b"{\"messages\":[{\"role\":\"user\",\"content\":\"unterminated}]}".to_vec(),
        // A number out of range, where the scan skips the value.
        br#"{"messages":[{"role":"tool","content":1e400}],"temperature":1}"#.to_vec(),
        br#"{"messages":[],"temperature":-1e999}"#.to_vec(),
        // Invalid UTF-8 inside a string the scan skips.
        [
            &br#"{"messages":[{"role":"tool","content":""#[..],
            &[0xff, 0xfe],
            &br#""}]}"#[..],
        ]
        .concat(),
        // A bad escape, a control character and a lone surrogate in skipped strings.
        br#"{"messages":[{"role":"tool","content":"\q"}]}"#.to_vec(),
        b"{\"messages\":[{\"role\":\"tool\",\"content\":\"a\x01b\"}]}".to_vec(),
        br#"{"messages":[{"role":"tool","content":"\ud800"}]}"#.to_vec(),
        br#"{"x":{"y":"\udc00 alone"},"messages":[]}"#.to_vec(),
        deep_in_content.into_bytes(),
        // A key that is not a string.
        br#"{"messages":[{1:"x"}]}"#.to_vec(),
    ];
    for body in &bodies {
        check(body, true);
    }
}

/// A small deterministic generator (xorshift) of request-like values: objects with the keys
/// the scan looks at (and others) in random order, each holding a value of a random type.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len() as u64) as usize]
    }
    fn scalar(&mut self) -> Value {
        match self.below(6) {
            0 => Value::Null,
            1 => json!(self.below(2) == 0),
            2 => json!(self.below(1000)),
            3 => json!(-1.5),
            _ => json!(self.pick(&[
                "user",
                "assistant",
                "system",
                "developer",
                "text",
                "a\n\"b\"",
                ""
            ])),
        }
    }
    fn content(&mut self, depth: u32) -> Value {
        match self.below(5) {
            0 | 1 => self.scalar(),
            2 | 3 => {
                let n = self.below(4);
                Value::Array((0..n).map(|_| self.part(depth)).collect())
            }
            _ => self.object(&["text", "type"], depth),
        }
    }
    fn part(&mut self, depth: u32) -> Value {
        if self.below(4) == 0 {
            self.scalar()
        } else {
            self.object(&["text", "type", "content"], depth)
        }
    }
    fn object(&mut self, keys: &[&str], depth: u32) -> Value {
        let mut m = Map::new();
        for _ in 0..self.below(keys.len() as u64 + 2) {
            let k = self.pick(keys).to_owned();
            let v = if depth == 0 {
                self.scalar()
            } else {
                self.content(depth - 1)
            };
            m.insert(k, v);
        }
        Value::Object(m)
    }
    fn message(&mut self) -> Value {
        if self.below(10) == 0 {
            return self.scalar();
        }
        let mut m = Map::new();
        let mut keys = vec!["role", "content", "tool_calls", "name"];
        // Random key order (a `Value` map keeps insertion order here).
        for i in (1..keys.len()).rev() {
            keys.swap(i, self.below(i as u64 + 1) as usize);
        }
        for k in keys {
            match (k, self.below(5)) {
                (_, 0) => {}
                ("role", 1) => {
                    m.insert(k.into(), self.scalar());
                }
                ("role", _) => {
                    let role = self.pick(&["user", "assistant", "system", "developer", "tool"]);
                    m.insert(k.into(), json!(role));
                }
                ("content", _) => {
                    m.insert(k.into(), self.content(2));
                }
                _ => {
                    m.insert(k.into(), self.content(1));
                }
            }
        }
        Value::Object(m)
    }
    fn body(&mut self) -> Value {
        if self.below(20) == 0 {
            return self.content(2);
        }
        let mut m = Map::new();
        let keys = [
            "messages",
            "system",
            "model",
            "stream",
            "stream_options",
            "tools",
        ];
        for k in keys {
            match (k, self.below(6)) {
                (_, 0) => {}
                ("messages", 1) => {
                    m.insert(k.into(), self.scalar());
                }
                ("messages", _) => {
                    let n = self.below(8);
                    m.insert(
                        k.into(),
                        Value::Array((0..n).map(|_| self.message()).collect()),
                    );
                }
                ("stream_options", _) => {
                    m.insert(k.into(), self.object(&["include_usage", "other"], 0));
                }
                ("system", _) => {
                    m.insert(k.into(), self.content(2));
                }
                _ => {
                    m.insert(k.into(), self.scalar());
                }
            }
        }
        Value::Object(m)
    }
}

#[test]
fn generated_bodies_give_the_same_facts() {
    let mut g = Gen(0x9e37_79b9_7f4a_7c15);
    for _ in 0..5_000 {
        check_value(&g.body());
    }
}
