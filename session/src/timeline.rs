//! A session's timeline: where its time went, as Gantt bars built from stored part times.
//!
//! One pure function, [`build`], turns a session's stored history (and its subagent
//! sessions' histories) into rows; `troupe serve` returns them from
//! `GET /session/{id}/timeline` for the web view and `troupe session show ID --timeline`
//! prints them, so the two cannot disagree. [`load`] reads what `build` needs from the store.
//!
//! Rows, in this order for each assistant message (one step) of the session, oldest first:
//!
//! - `step`: the assistant message, from its creation to its completion (its snapshots,
//!   provider request and tool calls all lie inside). Part: the step-start part.
//! - `request`: the step's provider request, from when its (last) attempt was sent to when
//!   the stream ended ([`crate::RequestTime`] on the step-start part). A step still
//!   streaming gets a running bar from the step's start; a finished step without recorded
//!   request times (aborted before sending, or stored by an older troupe) gets none.
//! - `tool`: each tool part that started running (a `pending` call has no time yet), in
//!   part order, from its start to its end.
//! - `subagent`: right after the row of a `task` call whose metadata names its child
//!   session (`sessionId`), the child session's part of that call: from its first message
//!   created during the call to its last step's completion, followed by the child's own
//!   rows (only its messages created during the call, so a resumed `task_id` shows each
//!   call's work under that call) one level deeper.
//!
//! Times are ms since the Unix epoch; a row still running (no end stored) ends at `now`
//! and has `running: true`. `depth` is 0 for the session's own rows and one more per
//! subagent level. `lane` separates subagents that ran at the same time: subagents of one
//! session that overlap in time get different lanes (the lowest free one, in start order),
//! and a subagent's rows carry its lane; rows outside subagents are in lane 0.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::store::{Reader, StoreError};
use crate::types::{
    Message, MessageId, MessageWithParts, Millis, Part, PartId, PartKind, Session, SessionId,
    ToolState,
};

/// Deepest subagent nesting [`load`] follows (a guard against a malformed store; real
/// nesting is bounded much lower by the task tool).
pub const MAX_DEPTH: u32 = 16;

/// Most subagent sessions [`load`] reads for one timeline; a task call past it gets no
/// `subagent` row (its `tool` row stays).
pub const MAX_SUBAGENT_SESSIONS: usize = 2_000;

/// Most characters of a row's label (longer ones end in `…`).
pub const LABEL_MAX: usize = 100;

/// What a row stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RowKind {
    /// One step (assistant message).
    Step,
    /// The step's provider request (request sent → stream ended).
    Request,
    /// A tool call.
    Tool,
    /// A subagent session's work for one `task` call.
    Subagent,
}

impl RowKind {
    /// `step`, `request`, `tool`, `subagent`.
    pub fn as_str(self) -> &'static str {
        match self {
            RowKind::Step => "step",
            RowKind::Request => "request",
            RowKind::Tool => "tool",
            RowKind::Subagent => "subagent",
        }
    }
}

/// How a row ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RowStatus {
    /// Still running (its bar ends at `now`).
    Running,
    /// Finished normally.
    Completed,
    /// Failed, was aborted or was interrupted.
    Error,
}

/// One bar of the timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimelineRow {
    /// What the bar stands for.
    pub kind: RowKind,
    /// One line: `step 2 · build`, `mock/mock-model · first token 12 ms`, `bash ls -la`,
    /// the subagent session's title. At most [`LABEL_MAX`] characters; not sanitized for
    /// terminals (printers do that).
    pub label: String,
    /// Session the row's message and part belong to (for a `subagent` row: the calling
    /// session, whose `task` part it is).
    #[serde(rename = "sessionID")]
    pub session_id: SessionId,
    /// The assistant message (step) of the row.
    #[serde(rename = "messageID")]
    pub message_id: MessageId,
    /// The part a click opens: the step-start part (`step`, `request`), the tool part
    /// (`tool`), the `task` tool part (`subagent`). `None` for a step without a step-start
    /// part.
    #[serde(rename = "partID", default, skip_serializing_if = "Option::is_none")]
    pub part_id: Option<PartId>,
    /// For `subagent` rows: the child session.
    #[serde(
        rename = "childSessionID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub child_session_id: Option<SessionId>,
    /// Start, ms since the epoch.
    pub start: Millis,
    /// End, ms since the epoch (`now` while running); never before `start`.
    pub end: Millis,
    /// Nesting level: 0 for the session's own rows, +1 per subagent level.
    pub depth: u32,
    /// Lane among subagents running at the same time (0 outside subagents).
    pub lane: u32,
    /// Running, completed or error.
    pub status: RowStatus,
}

impl TimelineRow {
    /// `end - start`, ms.
    pub fn duration_ms(&self) -> Millis {
        self.end - self.start
    }
}

/// A session's timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timeline {
    /// The session.
    #[serde(rename = "sessionID")]
    pub session_id: SessionId,
    /// Earliest row start (the session's creation when there are no rows), ms.
    pub start: Millis,
    /// Latest row end (= `start` when there are no rows), ms.
    pub end: Millis,
    /// The `now` running rows were extended to, ms.
    pub now: Millis,
    /// The bars, in the order described in the module docs.
    pub rows: Vec<TimelineRow>,
}

/// A subagent session's stored history, for [`build`].
#[derive(Debug, Clone)]
pub struct ChildHistory {
    /// The child session.
    pub session: Session,
    /// Its messages with their parts, ordered by id.
    pub messages: Vec<MessageWithParts>,
}

/// The child session a `task` tool part ran (its `metadata.sessionId`), if the part is a
/// task call that got that far.
pub fn task_child(part: &Part) -> Option<&str> {
    let PartKind::Tool { tool, state, .. } = &part.kind else {
        return None;
    };
    if tool != "task" {
        return None;
    }
    let metadata = match state {
        ToolState::Running { metadata, .. } | ToolState::Error { metadata, .. } => {
            metadata.as_ref()?
        }
        ToolState::Completed { metadata, .. } => metadata,
        ToolState::Pending { .. } => return None,
    };
    metadata
        .get("sessionId")
        .and_then(Value::as_str)
        .filter(|s| s.starts_with("ses_"))
}

/// Builds the timeline of `session` from its `messages` (ordered by id) and the histories of
/// its subagent sessions at any depth, keyed by session id (a `task` call whose child is
/// missing from `children`, or is not a child of the calling session, gets no `subagent`
/// row). Running rows end at `now` (ms).
/// Pure: reads nothing but its arguments.
pub fn build(
    session: &Session,
    messages: &[MessageWithParts],
    children: &HashMap<SessionId, ChildHistory>,
    now: Millis,
) -> Timeline {
    let mut rows = Vec::new();
    let mut visiting = HashSet::from([session.id.as_str()]);
    let all: Vec<&MessageWithParts> = messages.iter().collect();
    session_rows(
        &Ctx {
            children,
            now,
            parent_id: &session.id,
        },
        &all,
        0,
        0,
        &mut visiting,
        &mut rows,
    );
    let start = rows
        .iter()
        .map(|r| r.start)
        .min()
        .unwrap_or(session.time.created);
    let end = rows.iter().map(|r| r.end).max().unwrap_or(start).max(start);
    Timeline {
        session_id: session.id.clone(),
        start,
        end,
        now,
        rows,
    }
}

struct Ctx<'a> {
    children: &'a HashMap<SessionId, ChildHistory>,
    now: Millis,
    /// The session whose rows are being built.
    parent_id: &'a str,
}

/// When a tool part ran: `(start, end or None while running)`; `None` for a pending call.
fn tool_span(state: &ToolState) -> Option<(Millis, Option<Millis>)> {
    match state {
        ToolState::Pending { .. } => None,
        ToolState::Running { time, .. } => Some((time.start, None)),
        ToolState::Completed { time, .. } | ToolState::Error { time, .. } => {
            Some((time.start, Some(time.end.unwrap_or(time.start))))
        }
    }
}

/// A subagent call of one session: its part and the child's messages during the call.
struct SubagentCall<'a> {
    child: &'a ChildHistory,
    window: Vec<&'a MessageWithParts>,
    start: Millis,
    end: Millis,
    running: bool,
    lane: u32,
}

fn session_rows<'a>(
    ctx: &Ctx<'a>,
    messages: &[&'a MessageWithParts],
    depth: u32,
    lane: u32,
    visiting: &mut HashSet<&'a str>,
    rows: &mut Vec<TimelineRow>,
) {
    let now = ctx.now;
    let subagents = subagent_calls(ctx, messages, visiting);
    let mut step_no = 0u32;
    for m in messages {
        let Message::Assistant(a) = &m.info else {
            continue;
        };
        step_no += 1;
        let step_start = m
            .parts
            .iter()
            .find(|p| matches!(p.kind, PartKind::StepStart { .. }));
        let step_running = a.time.completed.is_none();
        let step_end = a.time.completed.unwrap_or(now).max(a.time.created);
        let mut label = format!("step {step_no} · {}", a.agent);
        if a.summary {
            label.push_str(" · compaction");
        }
        if let Some(f) = &a.finish {
            label.push_str(&format!(" · {f}"));
        }
        let row = |kind, label: String, part_id: Option<PartId>, start, end, running, status| {
            TimelineRow {
                kind,
                label: clip(&label),
                session_id: a.session_id.clone(),
                message_id: a.id.clone(),
                part_id,
                child_session_id: None,
                start,
                end: if running { now.max(start) } else { end },
                depth,
                lane,
                status: if running { RowStatus::Running } else { status },
            }
        };
        rows.push(row(
            RowKind::Step,
            label,
            step_start.map(|p| p.id.clone()),
            a.time.created,
            step_end,
            step_running,
            if a.error.is_some() {
                RowStatus::Error
            } else {
                RowStatus::Completed
            },
        ));
        let request = step_start.and_then(|p| match &p.kind {
            PartKind::StepStart { request, .. } => *request,
            _ => None,
        });
        let finished = m
            .parts
            .iter()
            .any(|p| matches!(p.kind, PartKind::StepFinish { .. }));
        let model = format!("{}/{}", a.provider_id, a.model_id);
        match request {
            Some(r) => {
                let mut label = model;
                if r.attempts > 1 {
                    label.push_str(&format!(" · attempt {}", r.attempts));
                }
                if let Some(t) = r.first_token {
                    label.push_str(&format!(" · first token {} ms", (t - r.start).max(0)));
                }
                rows.push(row(
                    RowKind::Request,
                    label,
                    step_start.map(|p| p.id.clone()),
                    r.start,
                    r.end.max(r.start),
                    false,
                    if finished {
                        RowStatus::Completed
                    } else {
                        RowStatus::Error
                    },
                ));
            }
            None if step_running => rows.push(row(
                RowKind::Request,
                model,
                step_start.map(|p| p.id.clone()),
                a.time.created,
                now,
                true,
                RowStatus::Running,
            )),
            None => {}
        }
        for p in &m.parts {
            let PartKind::Tool { tool, state, .. } = &p.kind else {
                continue;
            };
            let Some((start, end)) = tool_span(state) else {
                continue;
            };
            let summary = tool_summary(tool, state.input());
            let label = if summary.is_empty() {
                tool.clone()
            } else {
                format!("{tool} {summary}")
            };
            let status = match state {
                ToolState::Error { .. } => RowStatus::Error,
                _ => RowStatus::Completed,
            };
            rows.push(row(
                RowKind::Tool,
                label,
                Some(p.id.clone()),
                start,
                end.unwrap_or(now).max(start),
                end.is_none(),
                status,
            ));
            let Some(call) = subagents.get(p.id.as_str()) else {
                continue;
            };
            rows.push(TimelineRow {
                kind: RowKind::Subagent,
                label: clip(&call.child.session.title),
                session_id: a.session_id.clone(),
                message_id: a.id.clone(),
                part_id: Some(p.id.clone()),
                child_session_id: Some(call.child.session.id.clone()),
                start: call.start,
                end: call.end,
                depth: depth + 1,
                lane: call.lane,
                status: if call.running {
                    RowStatus::Running
                } else {
                    status
                },
            });
            let child_id = call.child.session.id.as_str();
            if visiting.insert(child_id) {
                let inner = Ctx {
                    children: ctx.children,
                    now,
                    parent_id: child_id,
                };
                session_rows(&inner, &call.window, depth + 1, call.lane, visiting, rows);
                visiting.remove(child_id);
            }
        }
    }
}

/// The subagent calls among `messages`' task parts, by part id, with their lanes.
fn subagent_calls<'a>(
    ctx: &Ctx<'a>,
    messages: &[&'a MessageWithParts],
    visiting: &HashSet<&'a str>,
) -> HashMap<&'a str, SubagentCall<'a>> {
    let mut calls: Vec<(&'a str, SubagentCall<'a>)> = Vec::new();
    for p in messages.iter().flat_map(|m| &m.parts) {
        let Some(child_id) = task_child(p) else {
            continue;
        };
        let Some(child) = ctx.children.get(child_id) else {
            continue;
        };
        if visiting.contains(child_id) || child.session.parent_id.as_deref() != Some(ctx.parent_id)
        {
            continue;
        }
        let PartKind::Tool { state, .. } = &p.kind else {
            continue;
        };
        let Some((call_start, call_end)) = tool_span(state) else {
            continue;
        };
        let window: Vec<&MessageWithParts> = child
            .messages
            .iter()
            .filter(|m| {
                let c = m.info.created();
                c >= call_start && call_end.is_none_or(|e| c <= e)
            })
            .collect();
        let start = window
            .first()
            .map(|m| m.info.created())
            .unwrap_or(call_start);
        let running = call_end.is_none()
            || window
                .iter()
                .any(|m| matches!(&m.info, Message::Assistant(a) if a.time.completed.is_none()));
        let end = if running {
            ctx.now
        } else {
            window
                .iter()
                .filter_map(|m| m.info.as_assistant().and_then(|a| a.time.completed))
                .max()
                .or(call_end)
                .unwrap_or(start)
        }
        .max(start);
        calls.push((
            p.id.as_str(),
            SubagentCall {
                child,
                window,
                start,
                end,
                running,
                lane: 0,
            },
        ));
    }
    // Lanes: in start order, each call takes the lowest lane whose last call ended before it
    // started (interval partitioning; overlapping calls never share a lane).
    let mut order: Vec<usize> = (0..calls.len()).collect();
    order.sort_by_key(|&i| (calls[i].1.start, i));
    let mut lane_ends: Vec<Millis> = Vec::new();
    for i in order {
        let (start, end) = (calls[i].1.start, calls[i].1.end);
        let lane = match lane_ends.iter().position(|&e| e <= start) {
            Some(l) => l,
            None => {
                lane_ends.push(0);
                lane_ends.len() - 1
            }
        };
        lane_ends[lane] = end;
        calls[i].1.lane = lane as u32;
    }
    calls.into_iter().collect()
}

fn clip(s: &str) -> String {
    let line = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() > LABEL_MAX {
        format!("{}…", line.chars().take(LABEL_MAX - 1).collect::<String>())
    } else {
        line
    }
}

/// What a tool call was asked, as the user would write it: the command of `bash` as written,
/// the pattern of `glob`/`grep` (with `in PATH` and `--include` when given), the path of the
/// file tools, the URL of `webfetch`, `agent: description` of `task`; other tools: `key=value`
/// pairs. May span lines and contain any characters: printers clip and sanitize it. The web
/// view applies the same rule (`server/static/index.html`, `toolSummary`).
pub fn tool_summary(tool: &str, input: &Value) -> String {
    let s = |k: &str| input.get(k).and_then(Value::as_str).unwrap_or("");
    let with_path = |head: String| match s("path") {
        "" => head,
        p => format!("{head} in {p}"),
    };
    match tool {
        "bash" if !s("command").is_empty() => s("command").to_string(),
        "glob" if !s("pattern").is_empty() => with_path(s("pattern").to_string()),
        "grep" if !s("pattern").is_empty() => {
            let mut head = s("pattern").to_string();
            if !s("include").is_empty() {
                head.push_str(&format!(" --include {}", s("include")));
            }
            with_path(head)
        }
        "read" | "write" | "edit" if !s("filePath").is_empty() => s("filePath").to_string(),
        "list" => match s("path") {
            "" => ".".to_string(),
            p => p.to_string(),
        },
        "webfetch" if !s("url").is_empty() => s("url").to_string(),
        "task" if !s("description").is_empty() => match s("subagent_type") {
            "" => s("description").to_string(),
            agent => format!("{agent}: {}", s("description")),
        },
        _ => match input {
            Value::Null => String::new(),
            other => key_values(other),
        },
    }
}

/// A tool input as `key=value` pairs joined by spaces (a string value bare, any other as
/// JSON); an input that is not an object as JSON.
pub fn key_values(input: &Value) -> String {
    match input {
        Value::Object(m) => m
            .iter()
            .map(|(k, v)| {
                format!(
                    "{k}={}",
                    v.as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| v.to_string())
                )
            })
            .collect::<Vec<_>>()
            .join(" "),
        other => other.to_string(),
    }
}

/// Reads session `session_id` (an exact id), its messages and those of its subagent sessions
/// (following `task` parts, at most [`MAX_DEPTH`] levels and [`MAX_SUBAGENT_SESSIONS`]
/// sessions) and [`build`]s its timeline; `None` when there is no such session.
///
/// Errors: the store's (a query failed, a stored record does not decode).
pub fn load(
    reader: &Reader<'_>,
    session_id: &SessionId,
    now: Millis,
) -> Result<Option<Timeline>, StoreError> {
    let Some(session) = reader.session(session_id)? else {
        return Ok(None);
    };
    let messages = reader.messages(session_id)?;
    let mut children: HashMap<SessionId, ChildHistory> = HashMap::new();
    let mut frontier: Vec<SessionId> = child_ids(&messages);
    let mut depth = 1;
    while !frontier.is_empty() && depth <= MAX_DEPTH {
        let mut next = Vec::new();
        for id in frontier {
            if id == session.id
                || children.contains_key(&id)
                || children.len() >= MAX_SUBAGENT_SESSIONS
            {
                continue;
            }
            let Some(child) = reader.session(&id)? else {
                continue;
            };
            let child_messages = reader.messages(&id)?;
            next.extend(child_ids(&child_messages));
            children.insert(
                id,
                ChildHistory {
                    session: child,
                    messages: child_messages,
                },
            );
        }
        frontier = next;
        depth += 1;
    }
    Ok(Some(build(&session, &messages, &children, now)))
}

fn child_ids(messages: &[MessageWithParts]) -> Vec<SessionId> {
    messages
        .iter()
        .flat_map(|m| &m.parts)
        .filter_map(task_child)
        .map(SessionId::from)
        .collect()
}

#[cfg(test)]
#[path = "timeline_tests.rs"]
mod tests;
