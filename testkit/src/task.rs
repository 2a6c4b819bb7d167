//! Scripts of troupe's `task` tool (subagents) that the runtime's tests and the end-to-end
//! tests share: the arguments of a call, and the three-children fan-out both suites run.
//!
//! Each child's conversation is chosen by a token its task prompt starts with (`TOKEN: …`),
//! so a script can answer the parent and every child differently (see
//! [`Conversation::matching`]).

use serde_json::{Value, json};

use crate::{Conversation, Exhausted, Script, Step};

/// The arguments of a `task` call starting the subagent `subagent` (e.g. `explore`,
/// `general`) with the prompt `"{token}: do the job and report back"` and the description
/// `"job {token}"`.
pub fn task_args(token: &str, subagent: &str) -> Value {
    json!({
        "description": format!("job {token}"),
        "prompt": format!("{token}: do the job and report back"),
        "subagent_type": subagent,
    })
}

/// [`task_args`] for an `explore` child started in the background (`background: true`): the
/// parent's step does not wait for it.
pub fn background_task_args(token: &str) -> Value {
    let mut args = task_args(token, "explore");
    args["background"] = json!(true);
    args
}

/// A parent (prompt token `PARENT-FANOUT`) that starts three children in one step and then
/// answers "parent summarised the three children":
/// - `CHILD-A-READ` (explore) reads `notes` (a path) and answers "A found: the secret is 42"
///   (two steps, 150 ms to each first byte);
/// - `CHILD-B-PANIC` (explore) calls `test_panic`, then its script is exhausted, so its
///   next request gets HTTP 400 and its turn fails;
/// - `CHILD-C-SLEEP` (general) calls `test_sleep` for 60 s, past any task timeout a test
///   sets.
pub fn fan_out_three(notes: &str) -> Script {
    Script::new(vec![
        Conversation::new(vec![
            Step::tool("task", task_args("CHILD-A-READ", "explore"))
                .with_tool("task", task_args("CHILD-B-PANIC", "explore"))
                .with_tool("task", task_args("CHILD-C-SLEEP", "general")),
            Step::text("parent summarised the three children"),
        ])
        .matching("PARENT-FANOUT"),
        Conversation::new(vec![
            Step::tool("read", json!({"filePath": notes})).with_first_byte_delay_ms(150),
            Step::text("A found: the secret is 42").with_first_byte_delay_ms(150),
        ])
        .matching("CHILD-A-READ"),
        Conversation::new(vec![
            Step::tool("test_panic", json!({"message": "child B blew up"}))
                .with_first_byte_delay_ms(150),
        ])
        .matching("CHILD-B-PANIC")
        .on_exhausted(Exhausted::Error),
        Conversation::new(vec![
            Step::tool("test_sleep", json!({"ms": 60000})).with_first_byte_delay_ms(150),
            Step::text("C never gets here"),
        ])
        .matching("CHILD-C-SLEEP"),
    ])
}
