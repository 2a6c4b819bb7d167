//! The sweep of a loaded session left by a process that ended: tool parts still pending or
//! running become errors ("aborted" for read-only tools, "outcome unknown" for the others) and
//! unfinished assistant messages are closed as aborted.

use super::*;

/// Tools that never change anything outside troupe: when one of them is interrupted, saying
/// "aborted" is accurate. Every other tool (write, edit, bash, task, MCP and unknown tools)
/// may have acted before the process died; see [`OUTCOME_UNKNOWN`]. Fail closed: a tool
/// missing from this list counts as side-effecting.
pub const READ_ONLY_TOOLS: &[&str] = &[
    "read",
    "glob",
    "grep",
    "list",
    "invalid",
    "todoread",
    "webfetch",
    "websearch",
];

/// Error text of a side-effecting tool part that was `running` when its process died
/// (issue 12.5): the model must check the current state before retrying.
pub const OUTCOME_UNKNOWN: &str = "Tool execution interrupted: the process running this tool ended before it \
finished, so its outcome is unknown (it may have partly or fully taken effect). Check the current \
state (files, processes) before retrying.";

/// Metadata key of a running part that says how many of its processes the loader found
/// still running and stopped (`troupe_tools::procs::SURVIVORS_METADATA_KEY`); the swept error
/// then says so.
pub const SURVIVORS_KEY: &str = "survivorsStopped";

/// Repair a session left inconsistent by a crashed or killed process: tool parts still
/// `pending` (never started) or `running` a read-only tool ([`READ_ONLY_TOOLS`]) become
/// `error` "Tool execution aborted"; parts `running` any other tool become `error`
/// [`OUTCOME_UNKNOWN`] with metadata `{"interrupted": true, "outcome": "unknown"}` (the
/// others carry `{"interrupted": true}`). Assistant messages that never completed get
/// `time.completed` and a `MessageAbortedError`.
/// Returns the repaired writes (already queued). Call before driving a loaded session.
pub fn sweep_interrupted(store: &Store, history: &mut [MessageWithParts]) -> usize {
    let mut writes = Vec::new();
    let now = now_ms();
    for m in history.iter_mut() {
        for p in m.parts.iter_mut() {
            if let PartKind::Tool { state, tool, .. } = &mut p.kind
                && !state.is_final()
            {
                let (start, ran) = match state {
                    ToolState::Running { time, .. } => (time.start, true),
                    _ => (now, false),
                };
                let unknown = ran && !READ_ONLY_TOOLS.contains(&tool.as_str());
                // Set by the loader when it looked for the call's processes (issue 12.4).
                let survivors = match state {
                    ToolState::Running {
                        metadata: Some(m), ..
                    } => m.get(SURVIVORS_KEY).and_then(|v| v.as_u64()),
                    _ => None,
                };
                let (error, metadata) = if unknown {
                    let mut error = OUTCOME_UNKNOWN.to_string();
                    let mut metadata =
                        serde_json::json!({"interrupted": true, "outcome": "unknown"});
                    if let Some(n) = survivors {
                        error.push_str(&match n {
                            0 => " None of the processes it started is still running.".to_string(),
                            n => format!(
                                " {n} process(es) it started were still running and have been stopped."
                            ),
                        });
                        metadata[SURVIVORS_KEY] = serde_json::json!(n);
                    }
                    (error, metadata)
                } else {
                    (
                        "Tool execution aborted".to_string(),
                        serde_json::json!({"interrupted": true}),
                    )
                };
                *state = ToolState::Error {
                    input: state.input().clone(),
                    error,
                    metadata: Some(metadata),
                    time: ToolTime {
                        start,
                        end: Some(now),
                        compacted: None,
                    },
                };
                writes.push(Write::Part(p.clone()));
            }
        }
        if let Message::Assistant(a) = &mut m.info
            && a.time.completed.is_none()
        {
            a.time.completed = Some(now);
            if a.error.is_none() && a.finish.is_none() {
                a.error = Some(crate::types::MessageError::new(
                    crate::types::MessageErrorName::MessageAborted,
                    "the process driving this step ended before it finished",
                ));
            }
            writes.push(Write::Message(m.info.clone()));
        }
    }
    let n = writes.len();
    if n > 0 {
        store.write(writes);
    }
    n
}
