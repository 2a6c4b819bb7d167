//! The step's parts as the processor builds them: opening, updating and saving parts,
//! tool parts by call id, and what a step's end does to blocks and calls still open.

use super::*;

impl ProcessorState {
    /// Queue `w` for the store: held in the running batch of stream events, if any
    /// (queued in order at its end), else queued now.
    pub(super) fn write(&mut self, w: Write) {
        match &mut self.batch {
            Some(batch) => batch.push(w),
            None => self.store.write1(w),
        }
    }

    /// Queue the held batch's writes (one store job) and end the batch.
    pub(super) fn send_batch(&mut self) {
        if let Some(batch) = self.batch.take().filter(|b| !b.is_empty()) {
            self.store.write(batch);
        }
    }

    pub(super) fn push_part(&mut self, kind: PartKind) -> usize {
        let part = Part::new(&self.assistant.session_id, &self.assistant.id, kind);
        self.index.insert(part.id.clone(), self.parts.len());
        self.write(Write::Part(part.clone()));
        self.parts.push(part);
        self.parts.len() - 1
    }

    pub(super) fn save_part(&mut self, i: usize) {
        self.write(Write::Part(self.parts[i].clone()));
    }

    /// Writes the request's timing on the step-start part (once, when the stream ended or
    /// failed); nothing when no attempt was ever sent.
    pub(super) fn record_request_time(&mut self) {
        if std::mem::replace(&mut self.request_clock.recorded, true) {
            return;
        }
        let Some((start, attempts)) = self.request_clock.sent else {
            return;
        };
        let i = self.step_start;
        if let Some(PartKind::StepStart { request, .. }) =
            self.parts.get_mut(i).map(|p| &mut p.kind)
        {
            *request = Some(troupe_session::RequestTime {
                start,
                first_token: self.request_clock.first,
                end: now_ms(),
                attempts,
            });
            self.save_part(i);
        }
    }

    /// The tool part of `call_id`, opened when the stream gave it none.
    pub(super) fn tool_part(&mut self, call_id: &str, name: &str) -> usize {
        if let Some(&i) = self.blocks.tool.get(call_id) {
            return i;
        }
        let i = self.push_part(PartKind::Tool {
            call_id: call_id.to_string(),
            tool: name.to_string(),
            state: ToolState::Pending {
                input: Value::Object(Default::default()),
                raw: String::new(),
            },
        });
        self.blocks.tool.insert(call_id.to_string(), i);
        i
    }

    pub(super) fn set_tool_state(
        &mut self,
        i: usize,
        new_state: ToolState,
        tool_name: Option<String>,
    ) {
        if new_state.is_final() {
            let tool = tool_name.clone().or_else(|| match &self.parts[i].kind {
                PartKind::Tool { tool, .. } => Some(tool.clone()),
                _ => None,
            });
            self.shared.counters.incr(
                "tool_calls_total",
                format!(
                    "tool=\"{}\",outcome=\"{}\"",
                    tool.unwrap_or_default(),
                    new_state.status()
                ),
                1,
            );
        }
        if let PartKind::Tool { state, tool, .. } = &mut self.parts[i].kind {
            *state = new_state;
            if let Some(n) = tool_name {
                *tool = n;
            }
        }
        self.save_part(i);
    }

    /// What the final state of tool part `i` is built from, as the call ends now: the input
    /// it ran with, its time (its start, ms since the epoch, and now as its end) and the
    /// running call's metadata. A part that never ran: its input, now to now, no metadata.
    pub(super) fn tool_ending(&self, i: usize) -> (Value, ToolTime, Option<Value>) {
        let (input, start, metadata) = match &self.parts[i].kind {
            PartKind::Tool {
                state:
                    ToolState::Running {
                        input,
                        time,
                        metadata,
                        ..
                    },
                ..
            } => (input.clone(), time.start, metadata.clone()),
            PartKind::Tool { state: s, .. } => (s.input().clone(), now_ms(), None),
            _ => (Value::Null, now_ms(), None),
        };
        let time = ToolTime {
            start,
            end: Some(now_ms()),
            compacted: None,
        };
        (input, time, metadata)
    }

    pub(super) fn close_open_blocks(&mut self) {
        let now = now_ms();
        let open: Vec<usize> = self
            .blocks
            .text
            .drain()
            .map(|(_, i)| i)
            .chain(self.blocks.reasoning.drain().map(|(_, i)| i))
            .collect();
        for i in open {
            match &mut self.parts[i].kind {
                PartKind::Text { time: Some(t), .. } if t.end.is_none() => t.end = Some(now),
                PartKind::Reasoning { time, .. } if time.end.is_none() => time.end = Some(now),
                _ => continue,
            }
            self.save_part(i);
        }
    }

    /// End every tool part the stream opened but never completed into a call (a tool block
    /// cut off, restarted or never stopped): it cannot run, and must not stay `pending`.
    pub(super) fn fail_orphan_tool_parts(&mut self) {
        let now = now_ms();
        for i in 0..self.parts.len() {
            let orphan = match &self.parts[i].kind {
                PartKind::Tool {
                    call_id,
                    state: ToolState::Pending { .. },
                    ..
                } => !self.calls.iter().any(|c| &c.call_id == call_id),
                _ => false,
            };
            if orphan {
                let st = ToolState::Error {
                    input: Value::Object(Default::default()),
                    error: "The stream ended before this tool call was complete, so it was not executed.".into(),
                    metadata: None,
                    time: ToolTime {
                        start: now,
                        end: Some(now),
                        compacted: None,
                    },
                };
                self.set_tool_state(i, st, None);
            }
        }
    }

    /// End every unfinished tool part with `error`.
    pub(super) fn fail_unfinished_tools(&mut self, error: &str, interrupted: bool) {
        let now = now_ms();
        for i in 0..self.parts.len() {
            let new_state = match &self.parts[i].kind {
                PartKind::Tool { state, .. } if !state.is_final() => {
                    let start = match state {
                        ToolState::Running { time, .. } => time.start,
                        _ => now,
                    };
                    let metadata = match state {
                        ToolState::Running {
                            metadata: Some(m), ..
                        } => {
                            let mut m = m.clone();
                            if interrupted && let Some(o) = m.as_object_mut() {
                                o.insert("interrupted".into(), Value::Bool(true));
                            }
                            Some(m)
                        }
                        _ if interrupted => Some(serde_json::json!({"interrupted": true})),
                        _ => None,
                    };
                    ToolState::Error {
                        input: state.input().clone(),
                        error: error.to_string(),
                        metadata,
                        time: ToolTime {
                            start,
                            end: Some(now),
                            compacted: None,
                        },
                    }
                }
                _ => continue,
            };
            self.set_tool_state(i, new_state, None);
        }
    }

    pub(super) fn save_message(&mut self) {
        self.write(Write::Message(Message::Assistant(self.assistant.clone())));
    }
}
