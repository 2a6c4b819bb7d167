//! Structured output end to end (issue 16): `troupe run --json-schema FILE` and a batch
//! task's `"schema"`, against the scripted provider.

use serde_json::{Value, json};
use troupe_testkit::{Conversation, Script, Step};

mod common;
use common::*;

fn schema() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"city": {"type": "string"}, "population": {"type": "integer", "minimum": 0}},
        "required": ["city", "population"],
        "additionalProperties": false
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_json_schema_sends_errors_back_and_prints_the_valid_value() {
    let project = Project::new("http://127.0.0.1:1/v1");
    let script = Script::single(vec![
        Step::tool(
            "StructuredOutput",
            json!({"city": "Lyon", "population": "many"}),
        ),
        Step::tool(
            "StructuredOutput",
            json!({"city": "Lyon", "population": 522_000}),
        ),
    ]);
    let server = start_mock(script).await;
    project.write_config(&mock_config(&server.base_url()).to_string());
    project.write_file("schema.json", &schema().to_string());

    let out = project
        .troupe(
            &[
                "run",
                "--json-schema",
                "schema.json",
                "-q",
                "largest city of the Rhône?",
            ],
            &[],
        )
        .await;
    assert_success(&out, "run --json-schema");
    let printed: Value = serde_json::from_slice(&out.stdout).expect("stdout is the JSON value");
    assert_eq!(printed, json!({"city": "Lyon", "population": 522_000}));

    let reqs = completions(&server);
    assert_eq!(reqs.len(), 2, "one correction step");
    for r in &reqs {
        assert_eq!(r.body["tool_choice"], "required", "{:#}", r.body);
        let tool = r.body["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .find(|t| t["function"]["name"] == "StructuredOutput")
            .expect("StructuredOutput offered");
        let params = &tool["function"]["parameters"];
        assert!(params.get("$schema").is_none(), "{params:#}");
        assert_eq!(params["required"], json!(["city", "population"]));
        let system = content_text(&req_messages(r)[0]);
        assert!(system.contains("StructuredOutput tool"), "{system}");
    }
    // The validation error reached the model as the tool result.
    let second = req_messages(&reqs[1]);
    let tool_msg = second
        .iter()
        .find(|m| m["role"] == "tool")
        .expect("tool result");
    let err = content_text(tool_msg);
    assert!(
        err.contains("/population: \"many\" is not of type \"integer\""),
        "{err}"
    );

    // Stored on the capturing step as `structured`.
    let (_, messages) = project.messages().await;
    let last = messages.last().expect("messages");
    assert_eq!(
        last["info"]["structured"],
        json!({"city": "Lyon", "population": 522_000})
    );

    // A bad schema file fails before anything runs, naming the file.
    project.write_file("bad.json", "{\"type\": \"strin\"}");
    let out = project
        .troupe(&["run", "--json-schema", "bad.json", "x"], &[])
        .await;
    let line = assert_one_line_failure(&out, "bad schema");
    assert!(
        line.contains("--json-schema bad.json: invalid JSON schema:"),
        "{line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_schema_writes_output_and_an_answer_that_never_validates_fails() {
    let project = Project::new("http://127.0.0.1:1/v1");
    let bad = |n: i64| Step::tool("StructuredOutput", json!({"city": "Oslo", "population": n}));
    let script = Script::new(vec![
        Conversation::new(vec![Step::tool(
            "StructuredOutput",
            json!({"city": "Bergen", "population": 291_000}),
        )])
        .matching("alpha"),
        Conversation::new(vec![bad(-1), bad(-2), bad(-3), Step::text("unreachable")])
            .matching("beta"),
        Conversation::new(vec![Step::text("I think it is Paris.")]).matching("gamma"),
    ]);
    let server = start_mock(script).await;
    project.write_config(&mock_config(&server.base_url()).to_string());
    let tasks = [
        json!({"id": "a", "prompt": "alpha", "schema": schema()}),
        json!({"id": "b", "prompt": "beta", "schema": schema()}),
        json!({"id": "c", "prompt": "gamma", "schema": schema()}),
    ];
    let lines: Vec<String> = tasks.iter().map(Value::to_string).collect();
    project.write_file("tasks.jsonl", &(lines.join("\n") + "\n"));
    let out = project
        .troupe(&["batch", "tasks.jsonl", "--out", "results.jsonl"], &[])
        .await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let results: Vec<Value> = std::fs::read_to_string(project.root.join("results.jsonl"))
        .expect("results")
        .lines()
        .map(|l| serde_json::from_str(l).expect("result line"))
        .collect();
    let by_id = |id: &str| {
        results
            .iter()
            .find(|r| r["id"] == id)
            .unwrap_or_else(|| panic!("no result {id}: {results:?}"))
    };
    let a = by_id("a");
    assert_eq!(a["status"], "completed", "{a}");
    assert_eq!(
        a["output"],
        json!({"city": "Bergen", "population": 291_000})
    );
    let b = by_id("b");
    assert_eq!(b["status"], "failed", "{b}");
    assert!(b.get("output").is_none(), "{b}");
    let err = b["error"].as_str().expect("error");
    assert!(
        err.starts_with("StructuredOutputError: the model's answer did not match the JSON schema after 3 attempts"),
        "{err}"
    );
    assert!(
        err.contains("/population: -3 is less than the minimum of 0"),
        "{err}"
    );
    let c = by_id("c");
    assert_eq!(c["status"], "failed", "{c}");
    assert_eq!(
        c["error"],
        "StructuredOutputError: Model did not produce structured output"
    );

    // An invalid schema in the tasks file is refused at read time with its line.
    project.write_file(
        "bad.jsonl",
        &(json!({"id": "x", "prompt": "p", "schema": {"type": 7}}).to_string() + "\n"),
    );
    let out = project.troupe(&["batch", "bad.jsonl"], &[]).await;
    let line = assert_one_line_failure(&out, "bad schema task");
    assert!(
        line.contains("bad.jsonl:1: task x: invalid JSON schema"),
        "{line}"
    );
}
