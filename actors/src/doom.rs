//! Doom-loop detection (pure).
//!
//! OpenCode (`DOOM_LOOP_THRESHOLD = 3`, session/processor.ts) fires when the last three tool
//! calls of one assistant message share tool and input. We look across the whole user turn
//! (identical calls spread over separate steps are the common case with small models) and
//! catch any repeating cycle of 1 to [`MAX_PERIOD`] calls (A A A; A B A B A B; A B C × 3;
//! A B C D × 3) on its third repetition, i.e. on the call that completes it (issue 13.5).
//! Sequences that only share a prefix (A B C A B D) never fire.

use serde_json::Value;

/// Repetitions of a cycle that count as a loop.
pub const DOOM_LOOP_THRESHOLD: usize = 3;

/// Longest cycle detected, in calls.
pub const MAX_PERIOD: usize = 4;

/// Calls the detector looks at: only the newest `MAX_PERIOD × DOOM_LOOP_THRESHOLD` (12) calls
/// can matter, so callers may pass just this tail.
pub const WINDOW: usize = MAX_PERIOD * DOOM_LOOP_THRESHOLD;

/// A tool call as the detector sees it: name and input. Inputs compare as JSON values, so
/// object key order does not matter.
#[derive(Debug, Clone, PartialEq)]
pub struct Call<'a> {
    /// Tool name.
    pub tool: &'a str,
    /// The call's arguments, compared whole with the earlier calls'.
    pub input: &'a Value,
}

/// What kind of loop was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DoomLoop {
    /// The same call `DOOM_LOOP_THRESHOLD` times in a row.
    Repeat {
        /// Tool name.
        tool: String,
    },
    /// A cycle of 2 to [`MAX_PERIOD`] calls repeated `DOOM_LOOP_THRESHOLD` times
    /// (A, B, A, B, A, B or A, B, C, A, B, C, A, B, C …).
    Cycle {
        /// The tool names of one cycle, in order.
        tools: Vec<String>,
    },
}

impl DoomLoop {
    /// Tool names involved, each once, in cycle order (permission patterns for the
    /// `doom_loop` ask).
    pub fn tools(&self) -> Vec<String> {
        match self {
            DoomLoop::Repeat { tool } => vec![tool.clone()],
            DoomLoop::Cycle { tools } => {
                let mut out: Vec<String> = Vec::new();
                for t in tools {
                    if !out.contains(t) {
                        out.push(t.clone());
                    }
                }
                out
            }
        }
    }

    /// One-line description.
    pub fn describe(&self) -> String {
        match self {
            DoomLoop::Repeat { tool } => {
                format!(
                    "the model called {tool} with the same input {DOOM_LOOP_THRESHOLD} times in a row"
                )
            }
            DoomLoop::Cycle { tools } => format!(
                "the model repeated the same cycle of {} calls ({}) {DOOM_LOOP_THRESHOLD} times",
                tools.len(),
                tools.join(", ")
            ),
        }
    }
}

/// Check the calls of the current turn, oldest first, ending with the newest call (only the
/// last [`WINDOW`] matter). The shortest matching period wins, so A A A A A A is a repeat,
/// not a cycle of two.
pub fn detect(calls: &[Call<'_>]) -> Option<DoomLoop> {
    let n = calls.len();
    for period in 1..=MAX_PERIOD {
        let span = period * DOOM_LOOP_THRESHOLD;
        if n < span {
            break;
        }
        let w = &calls[n - span..];
        if (period..span).all(|i| w[i] == w[i - period]) {
            let cycle = &w[..period];
            // A cycle made of one repeated call is that call repeated (found at period 1).
            if period > 1 && cycle.iter().all(|c| c == &cycle[0]) {
                continue;
            }
            return Some(if period == 1 {
                DoomLoop::Repeat {
                    tool: cycle[0].tool.to_string(),
                }
            } else {
                DoomLoop::Cycle {
                    tools: cycle.iter().map(|c| c.tool.to_string()).collect(),
                }
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn calls(v: &[(&'static str, Value)]) -> Vec<(&'static str, Value)> {
        v.to_vec()
    }

    fn run(v: &[(&'static str, Value)]) -> Option<DoomLoop> {
        let c: Vec<Call<'_>> = v.iter().map(|(t, i)| Call { tool: t, input: i }).collect();
        detect(&c)
    }

    #[test]
    fn three_identical_calls_fire_key_order_ignored() {
        let v = calls(&[
            ("read", json!({"filePath": "a", "limit": 5})),
            ("read", json!({"limit": 5, "filePath": "a"})),
            ("read", json!({"filePath": "a", "limit": 5})),
        ]);
        assert_eq!(
            run(&v),
            Some(DoomLoop::Repeat {
                tool: "read".into()
            })
        );
    }

    #[test]
    fn two_identical_or_different_inputs_do_not_fire() {
        assert_eq!(
            run(&calls(&[
                ("read", json!({"filePath": "a"})),
                ("read", json!({"filePath": "a"}))
            ])),
            None
        );
        let v = calls(&[
            ("read", json!({"filePath": "a"})),
            ("read", json!({"filePath": "b"})),
            ("read", json!({"filePath": "a"})),
        ]);
        assert_eq!(run(&v), None);
    }

    #[test]
    fn period_two_cycle_fires_after_three_rounds() {
        let a = ("glob", json!({"pattern": "*.rs"}));
        let b = ("read", json!({"filePath": "x"}));
        let five = calls(&[a.clone(), b.clone(), a.clone(), b.clone(), a.clone()]);
        assert_eq!(run(&five), None);
        let six = calls(&[a.clone(), b.clone(), a.clone(), b.clone(), a, b]);
        assert_eq!(
            run(&six),
            Some(DoomLoop::Cycle {
                tools: vec!["glob".into(), "read".into()]
            })
        );
    }

    fn letters(seq: &str) -> Vec<(&'static str, Value)> {
        seq.chars()
            .map(|c| {
                let tool: &'static str = match c {
                    'A' => "read",
                    'B' => "grep",
                    'C' => "glob",
                    'D' => "bash",
                    _ => "edit",
                };
                (tool, json!({"arg": c.to_string()}))
            })
            .collect()
    }

    /// Issue 13.5: cycles of period 1 to 4 fire exactly on the call that completes their third
    /// repetition (not one call earlier), across any prefix; prefix-sharing sequences never do.
    #[test]
    fn periods_one_to_four_fire_on_the_third_repetition() {
        for (cycle, want_tools) in [
            ("A", vec!["read"]),
            ("AB", vec!["read", "grep"]),
            ("ABC", vec!["read", "grep", "glob"]),
            ("ABCD", vec!["read", "grep", "glob", "bash"]),
            ("AAB", vec!["read", "read", "grep"]),
            ("ABAC", vec!["read", "grep", "read", "glob"]),
        ] {
            for prefix in ["", "E", "EFE"] {
                let full = format!("{prefix}{}", cycle.repeat(3));
                let v = letters(&full);
                let got = run(&v);
                let want = if cycle.len() == 1 {
                    DoomLoop::Repeat {
                        tool: "read".into(),
                    }
                } else {
                    DoomLoop::Cycle {
                        tools: want_tools.iter().map(|t| t.to_string()).collect(),
                    }
                };
                assert_eq!(got, Some(want), "{full}");
                // One call fewer: not yet, and no earlier call fired either.
                for end in 1..v.len() {
                    assert_eq!(run(&v[..end]), None, "{full} fired early at {end}");
                }
            }
        }
    }

    #[test]
    fn prefix_sharing_sequences_never_fire() {
        for seq in [
            "ABCABD",
            "ABCABDABCABD",
            "ABCDABCDABCE",
            "AABAABAAC",
            "ABABAC",
            "AAB",
            "ABCABCAB",
        ] {
            let v = letters(seq);
            for end in 1..=v.len() {
                assert_eq!(run(&v[..end]), None, "{seq} fired at {end}");
            }
        }
    }

    #[test]
    fn describe_and_tools_name_the_cycle() {
        let dl = DoomLoop::Cycle {
            tools: vec!["read".into(), "grep".into(), "read".into()],
        };
        assert_eq!(dl.tools(), vec!["read".to_string(), "grep".to_string()]);
        assert_eq!(
            dl.describe(),
            "the model repeated the same cycle of 3 calls (read, grep, read) 3 times"
        );
    }
}
