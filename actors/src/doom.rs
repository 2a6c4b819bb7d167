//! Doom-loop detection (pure).
//!
//! OpenCode (`DOOM_LOOP_THRESHOLD = 3`, session/processor.ts) fires when the last three tool
//! calls of one assistant message share tool and input. We look across the whole user turn
//! (identical calls spread over separate steps are the common case with small models) and
//! also catch a repeating cycle of period 2 (A, B, A, B, A, B).

use serde_json::Value;

/// Calls in a row that count as a loop.
pub const DOOM_LOOP_THRESHOLD: usize = 3;

/// A tool call as the detector sees it: name and input. Inputs compare as JSON values, so
/// object key order does not matter.
#[derive(Debug, Clone, PartialEq)]
pub struct Call<'a> {
    /// Tool name.
    pub tool: &'a str,
    /// Input.
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
    /// Two calls alternating `DOOM_LOOP_THRESHOLD` times (A, B, A, B, A, B).
    Cycle {
        /// The two tool names.
        tools: [String; 2],
    },
}

impl DoomLoop {
    /// Tool names involved (permission patterns for the `doom_loop` ask).
    pub fn tools(&self) -> Vec<String> {
        match self {
            DoomLoop::Repeat { tool } => vec![tool.clone()],
            DoomLoop::Cycle { tools } => tools.to_vec(),
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
                "the model alternated between the same {} and {} calls {DOOM_LOOP_THRESHOLD} times",
                tools[0], tools[1]
            ),
        }
    }
}

/// Check the calls of the current turn, oldest first, ending with the newest call.
pub fn detect(calls: &[Call<'_>]) -> Option<DoomLoop> {
    let n = calls.len();
    if n >= DOOM_LOOP_THRESHOLD {
        let last = &calls[n - 1];
        if calls[n - DOOM_LOOP_THRESHOLD..].iter().all(|c| c == last) {
            return Some(DoomLoop::Repeat {
                tool: last.tool.to_string(),
            });
        }
    }
    let span = 2 * DOOM_LOOP_THRESHOLD;
    if n >= span {
        let w = &calls[n - span..];
        let (a, b) = (&w[0], &w[1]);
        if a != b
            && w.iter()
                .enumerate()
                .all(|(i, c)| c == if i % 2 == 0 { a } else { b })
        {
            return Some(DoomLoop::Cycle {
                tools: [a.tool.to_string(), b.tool.to_string()],
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
                tools: ["glob".into(), "read".into()]
            })
        );
    }
}
