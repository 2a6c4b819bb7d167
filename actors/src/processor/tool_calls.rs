//! A step's tool calls: starting them once the model's calls are complete, one linked
//! `ToolCall` actor per call with its timeout (its clock stops while the call waits for a
//! permission answer, `clock.rs`), and how a call's end becomes its part's final state: its
//! result, its timeout, or a crash (run again when it only reads, else an error part).

use super::*;

impl ProcessorActor {
    /// Start the step's tool calls (after the stream finished).
    pub(super) async fn start_tools(&self, myself: &ActorRef<ProcMsg>, state: &mut ProcessorState) {
        state.tools_started = true;
        let calls = std::mem::take(&mut state.calls);
        let registry = state.registry.clone();
        for call in calls {
            let i = state.tool_part(&call.call_id, &call.name);
            let start = now_ms();
            let done_err = |input: Value, error: String| ToolState::Error {
                input,
                error,
                metadata: None,
                time: ToolTime {
                    start,
                    end: Some(now_ms()),
                    compacted: None,
                },
            };
            if let Some(error) = call.error {
                state.set_tool_state(i, done_err(Value::Object(Default::default()), error), None);
                continue;
            }
            if call.truncated {
                let st = done_err(
                    Value::Object(Default::default()),
                    "This tool call was cut off by the output token limit before its arguments were complete, so it was not executed. Retry with shorter arguments.".into(),
                );
                state.set_tool_state(i, st, None);
                continue;
            }
            let Some(name) = registry.repair(&call.name) else {
                // The tools this step offered, not every registered one (`invalid`, the edit
                // tools hidden for the model, those the agent's rules deny).
                let msg = troupe_tools::invalid_tool_message(&call.name, &state.offered);
                let input =
                    parse_input(&call.input).unwrap_or_else(|_| Value::Object(Default::default()));
                state.set_tool_state(i, done_err(input, msg), None);
                continue;
            };
            let input = match parse_input(&call.input) {
                Ok(v) => v,
                Err(detail) => {
                    let err = ToolError::InvalidArguments {
                        tool: name.clone(),
                        detail,
                    };
                    state.set_tool_state(
                        i,
                        done_err(Value::Object(Default::default()), err.to_string()),
                        Some(name),
                    );
                    continue;
                }
            };
            if state.result == StepResult::Stop {
                state.set_tool_state(
                    i,
                    done_err(
                        input,
                        "Tool call not executed: the turn was stopped.".into(),
                    ),
                    Some(name),
                );
                continue;
            }
            state.prior_calls.push((name.clone(), input.clone()));
            let tail = state.prior_calls.len().saturating_sub(crate::doom::WINDOW);
            let seen: Vec<crate::doom::Call<'_>> = state.prior_calls[tail..]
                .iter()
                .map(|(t, v)| crate::doom::Call { tool: t, input: v })
                .collect();
            if let Some(dl) = crate::doom::detect(&seen) {
                let tools = dl.tools();
                let req = troupe_tools::PermissionRequest {
                    permission: "doom_loop".into(),
                    patterns: tools.clone(),
                    always: tools,
                    metadata: serde_json::json!({"tool": name, "input": input, "reason": dl.describe()}),
                    ..Default::default()
                };
                let ask = state.tool_ctx.permissions.ask(req);
                let reply = tokio::select! {
                    r = ask => r,
                    _ = state.cancel.cancelled() => troupe_tools::PermissionReply::Deny("aborted".into()),
                };
                if let troupe_tools::PermissionReply::Deny(msg)
                | troupe_tools::PermissionReply::Reject(msg) = reply
                {
                    let text = format!("Stopped a doom loop: {}. {msg}", dl.describe());
                    state.set_tool_state(i, done_err(input, text.clone()), Some(name));
                    state.assistant.error =
                        Some(MessageError::new(MessageErrorName::DoomLoop, text));
                    state.result = StepResult::Stop;
                    continue;
                }
            }
            let offered = state.offered.binary_search(&name).is_ok();
            let Some(tool) = registry.get(&name).filter(|_| offered) else {
                let msg = if registry.get(&name).is_some() {
                    format!(
                        "The tool '{name}' is not available to this agent: its permissions do not allow it. Available tools: {}.",
                        state.offered.join(", ")
                    )
                } else {
                    troupe_tools::invalid_tool_message(&call.name, &state.offered)
                };
                state.set_tool_state(i, done_err(input, msg), None);
                continue;
            };
            state.set_tool_state(
                i,
                ToolState::Running {
                    input: input.clone(),
                    title: None,
                    metadata: None,
                    time: ToolTime {
                        start,
                        end: None,
                        compacted: None,
                    },
                },
                Some(name.clone()),
            );
            let role = if tool.read_only() {
                crate::supervision::Role::ReadOnlyTool
            } else {
                crate::supervision::Role::of_tool(&name, &state.shared.config.config.supervision)
            };
            state.call_specs.insert(
                call.call_id.clone(),
                CallSpec {
                    name,
                    tool,
                    input,
                    role,
                    crashes: crate::supervision::Intensity::for_role(
                        role,
                        &state.shared.config.config.supervision,
                    ),
                    restarts: 0,
                },
            );
            self.spawn_tool(myself, state, &call.call_id).await;
        }
    }

    /// Spawn the tool-call actor of `call_id` (from its [`CallSpec`]) with its timeout timer.
    pub(super) async fn spawn_tool(
        &self,
        myself: &ActorRef<ProcMsg>,
        state: &mut ProcessorState,
        call_id: &str,
    ) {
        let (Some(&i), Some(spec)) = (
            state.blocks.tool.get(call_id),
            state.call_specs.get(call_id),
        ) else {
            return;
        };
        let (name, tool, input, restarts) = (
            spec.name.clone(),
            spec.tool.clone(),
            spec.input.clone(),
            spec.restarts,
        );
        let token = state.cancel.child_token();
        let mut ctx = state.tool_ctx.clone();
        ctx.call_id = call_id.to_string();
        ctx.message_id = state.assistant.id.to_string();
        ctx.abort = token.clone();
        // The timeout counts the call's own running time, not a wait for a person's answer.
        let clock = super::clock::CallClock::new();
        ctx.permissions = Arc::new(super::clock::ClockedAsker {
            inner: ctx.permissions.clone(),
            clock: clock.clone(),
        });
        ctx.progress = Arc::new(crate::progress::PartProgress::new(
            state.store.clone(),
            state.parts[i].clone(),
        ));
        let timeout = state.shared.opts.tool_timeout_for(&name, &input);
        let span = crate::spans::tool_call(
            &state.span,
            &state.assistant.session_id,
            &state.assistant.id,
            call_id,
            &name,
            restarts,
        );
        let args = ToolCallArgs {
            span: span.clone(),
            call_id: call_id.to_string(),
            tool,
            args: input,
            ctx,
            gauge: crate::ActorGauge::new(&state.shared.counters.live_actors),
            node: {
                let n = state.shared.tree.register(
                    crate::tree::Kind::ToolCall,
                    call_id,
                    Some(&state.assistant.session_id),
                    Some(state.node.key()),
                );
                n.update(|x| {
                    x.status = crate::tree::ActorStatus::Busy;
                    x.tool = Some(name.clone());
                    x.restarts = restarts;
                });
                n
            },
        };
        let me = myself.clone();
        let call_id = call_id.to_string();
        // spawn_linked awaits pre_start, which only casts a message to itself.
        match Actor::spawn_linked(None, ToolCallActor, args, myself.get_cell()).await {
            Ok((actor, _)) => {
                let timer_token = token.clone();
                state.running.insert(
                    actor.get_id(),
                    (call_id.clone(), actor.get_cell(), token, span),
                );
                // The timer ends early when the call ends (its token is cancelled then).
                tokio::spawn(async move {
                    tokio::select! {
                        _ = clock.expired(timeout) => { let _ = me.cast(ProcMsg::ToolTimeout(call_id)); }
                        _ = timer_token.cancelled() => {}
                    }
                });
            }
            Err(e) => {
                let now = now_ms();
                let st = ToolState::Error {
                    input: Value::Object(Default::default()),
                    error: format!("could not start the tool: {e}"),
                    metadata: None,
                    time: ToolTime {
                        start: now,
                        end: Some(now),
                        compacted: None,
                    },
                };
                state.set_tool_state(i, st, None);
            }
        }
    }

    /// A tool-call child crashed: a read-only call runs again with the same input after a
    /// backoff while within `supervision.tool_restarts`, else (and for every side-effecting
    /// call) its part becomes an error.
    pub(super) fn tool_crashed(
        &self,
        myself: &ActorRef<ProcMsg>,
        state: &mut ProcessorState,
        call_id: String,
        err: String,
    ) {
        state
            .shared
            .counters
            .tool_crashes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        state.node.add_failure();
        let Some(spec) = state.call_specs.get_mut(&call_id) else {
            return;
        };
        state.shared.counters.failure(spec.role);
        let role = spec.role;
        crate::spans::supervision(
            &state.span,
            crate::spans::Supervision::Crash,
            role.as_str(),
            &format!("tool call {call_id}: {err}"),
        );
        let verdict = match role {
            crate::supervision::Role::ReadOnlyTool => spec.crashes.crash(std::time::Instant::now()),
            _ => crate::supervision::Verdict::Escalate { crashes: 1 },
        };
        if let crate::supervision::Verdict::Restart { backoff, attempt } = verdict
            && !state.cancel.is_cancelled()
        {
            spec.restarts += 1;
            tracing::warn!(call = %call_id, tool = %spec.name, "read-only tool crashed ({err}); running it again (restart {attempt})");
            state.shared.counters.restart(role);
            crate::spans::supervision(
                &state.span,
                crate::spans::Supervision::Restart,
                role.as_str(),
                &format!("tool call {call_id}, restart {attempt}"),
            );
            state.restarting.insert(call_id.clone());
            let me = myself.clone();
            tokio::spawn(async move {
                tokio::time::sleep(backoff).await;
                let _ = me.cast(ProcMsg::RestartTool(call_id));
            });
            return;
        }
        let error = match (role, verdict) {
            (
                crate::supervision::Role::ReadOnlyTool,
                crate::supervision::Verdict::Escalate { crashes },
            ) => format!(
                "Tool crashed {crashes} time{} in a row (supervision.tool_restarts = {}), so it was given up: {err}",
                if crashes == 1 { "" } else { "s" },
                state.shared.config.config.supervision.tool_restarts()
            ),
            (crate::supervision::Role::ReadOnlyTool, _) => format!("Tool crashed: {err}"),
            _ => format!(
                "Tool crashed: {err}. It may have partly run, so its outcome is unknown; it was not run again."
            ),
        };
        crate::spans::supervision(
            &state.span,
            crate::spans::Supervision::Escalation,
            role.as_str(),
            &format!("tool call {call_id}: {error}"),
        );
        let Some(&i) = state.blocks.tool.get(&call_id) else {
            return;
        };
        let (input, time, _) = state.tool_ending(i);
        let mut metadata = serde_json::json!({"crashed": true});
        if role != crate::supervision::Role::ReadOnlyTool {
            metadata["outcome"] = "unknown".into();
        }
        state.set_tool_state(
            i,
            ToolState::Error {
                input,
                error,
                metadata: Some(metadata),
                time,
            },
            None,
        );
    }

    /// A tool call ran past its timeout: stop it and make its part an error saying so.
    pub(super) fn tool_timed_out(
        &self,
        myself: &ActorRef<ProcMsg>,
        state: &mut ProcessorState,
        call_id: String,
    ) {
        let found = state
            .running
            .iter()
            .find(|(_, (c, _, _, _))| *c == call_id)
            .map(|(id, _)| *id);
        let Some((call_id, cell, token, span)) = found.and_then(|id| state.running.remove(&id))
        else {
            return;
        };
        crate::spans::tool_call_end(&span, "timeout");
        // Kill before cancelling: the kill signal is then seen before the tool's aborted
        // return (ractor polls signals first), so the span keeps `timeout`.
        cell.kill();
        token.cancel();
        if let Some(&i) = state.blocks.tool.get(&call_id) {
            let (input, time, _) = state.tool_ending(i);
            let ms = match &state.parts[i].kind {
                PartKind::Tool { tool, state: s, .. } => state
                    .shared
                    .opts
                    .tool_timeout_for(tool, s.input())
                    .as_millis(),
                _ => state.shared.opts.tool_timeout.as_millis(),
            };
            state.set_tool_state(
                i,
                ToolState::Error {
                    input,
                    error: format!("Tool execution timed out after {ms} ms and was stopped"),
                    metadata: Some(serde_json::json!({"timeout": true})),
                    time,
                },
                None,
            );
        }
        self.maybe_finish(myself, state);
    }

    /// A tool-call child stopped: its result (or its abort) becomes the part's final state.
    /// A plain user reject of a permission stops the turn after this step.
    pub(super) fn tool_ended(
        &self,
        myself: &ActorRef<ProcMsg>,
        state: &mut ProcessorState,
        cell: ActorCell,
        boxed: Option<ractor::actor::messages::BoxedState>,
    ) {
        let Some((call_id, _, done_token, _)) = state.running.remove(&cell.get_id()) else {
            tracing::warn!(actor = %cell.get_id(), "supervision event from an unknown child of a step; ignored");
            return;
        };
        // The call is over: end its timeout timer (and anything still holding its token).
        done_token.cancel();
        let result = boxed
            .and_then(|mut b| b.take::<ToolCallState>().ok())
            .and_then(|s| s.result);
        let Some(&i) = state.blocks.tool.get(&call_id) else {
            return;
        };
        let (input, time, metadata) = state.tool_ending(i);
        let new_state = match result {
            Some(Ok(ToolOutput {
                title,
                output,
                metadata,
            })) => ToolState::Completed {
                input,
                output,
                title,
                metadata: Value::Object(metadata),
                time,
            },
            Some(Err(ToolError::Aborted)) => {
                let mut m = metadata.unwrap_or_else(|| serde_json::json!({}));
                if let Some(o) = m.as_object_mut() {
                    o.insert("interrupted".into(), Value::Bool(true));
                }
                ToolState::Error {
                    input,
                    error: "Tool execution aborted".into(),
                    metadata: Some(m),
                    time,
                }
            }
            Some(Err(e)) => {
                if matches!(e, ToolError::PermissionRejected(_)) {
                    // A plain user reject stops the turn after this step (OpenCode
                    // `RejectedError`); feedback and rule denials do not.
                    state.result = StepResult::Stop;
                }
                ToolState::Error {
                    input,
                    error: e.to_string(),
                    metadata,
                    time,
                }
            }
            None => ToolState::Error {
                input,
                error: "Tool execution aborted".into(),
                metadata,
                time,
            },
        };
        state.set_tool_state(i, new_state, None);
        self.maybe_finish(myself, state);
    }
}
