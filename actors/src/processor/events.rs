//! What a stream event does to the step's parts: the actions [`crate::stream_parts::step`]
//! decides (open a text, reasoning or tool part, append a delta, close a block, record a
//! complete tool call, finish the step with its usage and cost), carried out on the parts and
//! written through the store.

use super::*;

impl ProcessorActor {
    /// Carry out what a stream event does to the step's parts (decided by
    /// [`crate::stream_parts::step`]).
    pub(super) fn handle_event(&self, state: &mut ProcessorState, ev: StreamEvent) {
        use crate::stream_parts::{NewPart, PartAction};
        for action in crate::stream_parts::step(&mut state.blocks, state.parts.len(), ev) {
            match action {
                PartAction::Open(NewPart::Text) => {
                    state.push_part(PartKind::Text {
                        text: String::new(),
                        synthetic: false,
                        time: Some(PartTime {
                            start: now_ms(),
                            end: None,
                        }),
                    });
                }
                PartAction::Open(NewPart::Reasoning) => {
                    state.push_part(PartKind::Reasoning {
                        text: String::new(),
                        metadata: None,
                        time: PartTime {
                            start: now_ms(),
                            end: None,
                        },
                    });
                }
                PartAction::Open(NewPart::Tool { call_id, name }) => {
                    state.push_part(PartKind::Tool {
                        call_id,
                        tool: name,
                        state: ToolState::Pending {
                            input: Value::Object(Default::default()),
                            raw: String::new(),
                        },
                    });
                }
                PartAction::Append { part, delta } => {
                    match &mut state.parts[part].kind {
                        PartKind::Text { text, .. } | PartKind::Reasoning { text, .. } => {
                            text.push_str(&delta)
                        }
                        _ => continue,
                    }
                    let part = PartRef::from(&state.parts[part]);
                    state.write(Write::Publish(Event::PartDelta {
                        part,
                        field: "text".into(),
                        delta,
                    }));
                }
                PartAction::CloseText(i) => {
                    if let PartKind::Text { time: Some(t), .. } = &mut state.parts[i].kind {
                        t.end = Some(now_ms());
                    }
                    state.save_part(i);
                }
                PartAction::CloseReasoning { part, signature } => {
                    if let PartKind::Reasoning { time, metadata, .. } = &mut state.parts[part].kind
                    {
                        time.end = Some(now_ms());
                        if let Some(sig) = signature {
                            *metadata = Some(serde_json::json!({"signature": sig}));
                        }
                    }
                    state.save_part(part);
                }
                PartAction::Call {
                    part,
                    call_id,
                    name,
                    input,
                    truncated,
                    error,
                } => {
                    if let PartKind::Tool {
                        state: ToolState::Pending { raw, .. },
                        ..
                    } = &mut state.parts[part].kind
                    {
                        raw.clone_from(&input);
                    }
                    state.calls.push(PendingCall {
                        call_id,
                        name,
                        input,
                        truncated,
                        error,
                    });
                }
                PartAction::Finish { reason, usage } => {
                    let step = StepUsage {
                        input: usage.input,
                        output: usage.output,
                        reasoning: usage.reasoning,
                        cache_read: usage.cache_read,
                        cache_write: usage.cache_write,
                    };
                    let (tokens, cost) = usage_cost(step, state.model.cost.as_ref());
                    state.assistant.tokens = tokens;
                    state.assistant.cost += cost;
                    state.assistant.finish = Some(reason.as_str().to_string());
                    state.push_part(PartKind::StepFinish {
                        reason: reason.as_str().to_string(),
                        snapshot: None,
                        cost,
                        tokens,
                    });
                    state.save_message();
                    if reason == FinishReason::Length && state.calls.is_empty() {
                        tracing::debug!(session = %state.assistant.session_id, "step hit the output limit");
                    }
                }
            }
        }
    }
}
