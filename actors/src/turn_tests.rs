//! The after-step decision table: finish reasons × tool parts × overflow × step limit ×
//! errors × abort, without actors.

use troupe_session::MessageError;

use super::*;

fn lp() -> LoopFacts {
    LoopFacts {
        aborted: false,
        auto_compact: true,
        compactions: 0,
        steps: 1,
        max_steps: 10,
        agent: "build".into(),
        resumed: false,
    }
}

fn step(finish: &str, tool_parts: bool, text: bool) -> StepFacts {
    StepFacts {
        finish: Some(finish.into()),
        tool_parts,
        text,
        ..Default::default()
    }
}

fn why(d: &AfterStep) -> Option<Why> {
    match d {
        AfterStep::Finish { why, .. } => Some(*why),
        _ => None,
    }
}

fn error_name(d: &AfterStep) -> Option<String> {
    match d {
        AfterStep::Finish { error, .. } => error.as_ref().map(|e| e.name.to_string()),
        _ => None,
    }
}

#[test]
fn finish_reasons_and_tool_parts() {
    // (finish, tool parts, text) → (why it finishes, turn error); `None` = next step.
    type Row = (&'static str, bool, bool, Option<Why>, Option<&'static str>);
    let table: &[Row] = &[
        ("tool-calls", true, false, None, None),
        ("tool-calls", true, true, None, None),
        ("stop", true, true, None, None),
        ("length", true, false, None, None),
        ("stop", false, true, Some(Why::Answered), None),
        ("stop", false, false, Some(Why::Answered), None),
        ("length", false, true, Some(Why::Answered), None),
        ("unknown", false, false, Some(Why::Answered), None),
        ("content-filter", false, false, Some(Why::Answered), None),
        ("tool-calls", false, true, Some(Why::Answered), None),
        (
            "tool-calls",
            false,
            false,
            Some(Why::EmptyToolCalls),
            Some("EmptyToolCallsError"),
        ),
    ];
    for (finish, tools, text, want, err) in table {
        let d = after_step(&step(finish, *tools, *text), &lp());
        assert_eq!(why(&d), *want, "{finish} tools={tools} text={text}");
        assert_eq!(error_name(&d).as_deref(), *err, "{finish} tools={tools}");
        if want.is_none() {
            assert_eq!(d, AfterStep::NextStep);
        }
    }
}

#[test]
fn a_step_without_a_finish_reason_goes_on() {
    let s = StepFacts::default();
    assert_eq!(after_step(&s, &lp()), AfterStep::NextStep);
}

#[test]
fn overflow_compacts_unless_aborted_off_or_repeated() {
    let over = StepFacts {
        overflowed: true,
        ..step("stop", false, true)
    };
    assert_eq!(
        after_step(&over, &lp()),
        AfterStep::Compact {
            overflow_error: false,
            then: AfterSummary::Finish {
                why: Why::Answered,
                error: None
            }
        }
    );
    let rejected = StepFacts {
        error: Some(MessageError::new(
            MessageErrorName::ContextOverflow,
            "too long",
        )),
        ..Default::default()
    };
    assert_eq!(
        after_step(&rejected, &lp()),
        AfterStep::Compact {
            overflow_error: true,
            then: AfterSummary::GoOn
        }
    );
    // Usage past the limit on a failed step is not an overflow (the error decides).
    let failed_over = StepFacts {
        error: Some(MessageError::new(MessageErrorName::Api, "500")),
        overflowed: true,
        ..Default::default()
    };
    assert_eq!(why(&after_step(&failed_over, &lp())), Some(Why::StepFailed));
    // Auto-compaction off: the turn goes on by the usual rules.
    let off = LoopFacts {
        auto_compact: false,
        ..lp()
    };
    assert_eq!(why(&after_step(&over, &off)), Some(Why::Answered));
    assert_eq!(why(&after_step(&rejected, &off)), Some(Why::StepFailed));
    // Aborted: no compaction.
    let aborted = LoopFacts {
        aborted: true,
        ..lp()
    };
    assert_eq!(why(&after_step(&over, &aborted)), Some(Why::Aborted));
    // Twice in a row already: give up with a clear error.
    let twice = LoopFacts {
        compactions: 2,
        ..lp()
    };
    let d = after_step(&rejected, &twice);
    assert_eq!(why(&d), Some(Why::StillOverflowing));
    assert_eq!(error_name(&d).as_deref(), Some("ContextOverflowError"));
    let once = LoopFacts {
        compactions: 1,
        ..lp()
    };
    assert!(matches!(
        after_step(&over, &once),
        AfterStep::Compact { .. }
    ));
}

/// After the summary, the turn does what the step alone would have made it do: a complete
/// step (an answer, a stop, the step limit, an empty tool-calls finish) ends it; a step that
/// called tools, or a request the provider rejected, goes on.
#[test]
fn after_a_compaction_the_turn_ends_where_the_step_would_have_ended_it() {
    fn then(s: StepFacts, lp: &LoopFacts) -> AfterSummary {
        let s = StepFacts {
            overflowed: true,
            ..s
        };
        match after_step(&s, lp) {
            AfterStep::Compact {
                overflow_error: false,
                then,
            } => then,
            other => panic!("{s:?}: not a compaction: {other:?}"),
        }
    }
    let finish_why = |t: &AfterSummary| match t {
        AfterSummary::Finish { why, error } => {
            Some((*why, error.as_ref().map(|e| e.name.to_string())))
        }
        AfterSummary::GoOn => None,
    };
    // (finish, tool parts, text, stop, steps) → what follows the summary.
    type Row = (
        &'static str,
        bool,
        bool,
        bool,
        u32,
        Option<(Why, Option<&'static str>)>,
    );
    let table: &[Row] = &[
        ("stop", false, true, false, 1, Some((Why::Answered, None))),
        ("length", false, true, false, 1, Some((Why::Answered, None))),
        ("tool-calls", true, false, false, 1, None),
        ("stop", true, true, false, 1, None),
        (
            "tool-calls",
            true,
            false,
            true,
            1,
            Some((Why::Stopped, None)),
        ),
        (
            "tool-calls",
            true,
            false,
            false,
            10,
            Some((Why::MaxSteps, Some("MaxStepsError"))),
        ),
        (
            "tool-calls",
            false,
            false,
            false,
            1,
            Some((Why::EmptyToolCalls, Some("EmptyToolCallsError"))),
        ),
    ];
    for (finish, tools, text, stop, steps, want) in table {
        let s = StepFacts {
            stop: *stop,
            ..step(finish, *tools, *text)
        };
        let lp = LoopFacts {
            steps: *steps,
            ..lp()
        };
        let got = then(s, &lp);
        let got = finish_why(&got);
        let want = want.map(|(w, e)| (w, e.map(str::to_string)));
        assert_eq!(
            got, want,
            "{finish} tools={tools} text={text} stop={stop} steps={steps}"
        );
    }
    // A step that never said why it finished goes on after the summary too.
    assert_eq!(then(StepFacts::default(), &lp()), AfterSummary::GoOn);
}

#[test]
fn step_limit_ends_the_turn_only_when_it_would_go_on() {
    let at_limit = LoopFacts { steps: 10, ..lp() };
    let d = after_step(&step("tool-calls", true, false), &at_limit);
    assert_eq!(why(&d), Some(Why::MaxSteps));
    match &d {
        AfterStep::Finish { error: Some(e), .. } => {
            assert_eq!(e.name, "MaxStepsError");
            assert!(e.message().contains("maximum of 10 steps for agent build"));
        }
        other => panic!("{other:?}"),
    }
    // An answer at the limit is just an answer.
    assert_eq!(
        why(&after_step(&step("stop", false, true), &at_limit)),
        Some(Why::Answered)
    );
    let below = LoopFacts { steps: 9, ..lp() };
    assert_eq!(
        after_step(&step("tool-calls", true, false), &below),
        AfterStep::NextStep
    );
}

#[test]
fn errors_stops_and_aborts_end_the_turn() {
    let failed = StepFacts {
        error: Some(MessageError::new(MessageErrorName::Api, "boom")),
        tool_parts: true,
        ..Default::default()
    };
    let d = after_step(&failed, &lp());
    assert_eq!(why(&d), Some(Why::StepFailed));
    assert_eq!(
        error_name(&d),
        None,
        "the step's message carries its own error"
    );
    let stop = StepFacts {
        stop: true,
        ..step("tool-calls", true, false)
    };
    assert_eq!(why(&after_step(&stop, &lp())), Some(Why::Stopped));
    let aborted = LoopFacts {
        aborted: true,
        ..lp()
    };
    assert_eq!(
        why(&after_step(&step("tool-calls", true, false), &aborted)),
        Some(Why::Aborted)
    );
}

#[test]
fn before_a_step_and_after_a_resume() {
    // No assistant message yet for this user message: run the first step.
    assert_eq!(continue_or_finish(None, &lp()), AfterStep::NextStep);
    // Resumed after a crash: the interrupted step's error does not end the turn.
    let interrupted = StepFacts {
        error: Some(MessageError::new(
            MessageErrorName::MessageAborted,
            "interrupted",
        )),
        ..Default::default()
    };
    let resumed = LoopFacts {
        resumed: true,
        ..lp()
    };
    assert_eq!(
        continue_or_finish(Some(&interrupted), &resumed),
        AfterStep::NextStep
    );
    assert_eq!(
        why(&continue_or_finish(Some(&interrupted), &lp())),
        Some(Why::StepFailed)
    );
    // A resumed turn whose last step had finished is over.
    assert_eq!(
        why(&continue_or_finish(
            Some(&step("stop", false, true)),
            &resumed
        )),
        Some(Why::Answered)
    );
}
