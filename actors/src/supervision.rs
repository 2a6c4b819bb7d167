//! Supervision policy: child roles, restart strategies and the restart-intensity limit.
//!
//! Every parent in the runtime keeps the [`ractor::ActorId`] and [`Role`] of each child it
//! spawned and matches supervision events against that map; an event from a child it does
//! not know is logged and ignored, never guessed. What happens when a child crashes is a
//! function of its role ([`Role::strategy`]) and of how often it crashed recently
//! ([`Intensity`]), in the manner of Erlang/OTP supervisors (`intensity` restarts within
//! `period`, then escalate).
//!
//! | role | on a crash |
//! |---|---|
//! | read-only tool (`read`, `glob`, `grep`, `list`) | re-run with the same input after a backoff, up to the limit; then an error part saying how many attempts crashed |
//! | side-effecting tool (`bash`, `write`, `edit`, `task`, MCP, unknown) | never re-run: an error part at once, the outcome is unknown |
//! | processor (one step) | open parts closed as errors; the step is retried once from the committed history, then the turn fails |
//! | session | restarted by the runtime from the store, its in-flight turn continues (running parts swept), within the limit; then the turn fails with the cause |
//! | compaction worker | the turn fails with a clear error (no summary means no room to go on) |
//! | title / summary worker | ignored: the default title stays, no summary is stored |
//!
//! Limits come from the `supervision` config block ([`troupe_config::SupervisionConfig`]).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use serde::Serialize;
use troupe_config::SupervisionConfig;

/// What a supervised child is, which decides its restart strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// A session actor (child of the runtime root or of a `task` tool call).
    Session,
    /// A processor: one step of a turn.
    Processor,
    /// A tool call that only reads (safe to run again with the same input).
    ReadOnlyTool,
    /// A tool call with side effects (never run twice).
    SideEffectTool,
    /// The compaction worker.
    Compaction,
    /// The title worker.
    Title,
    /// The summary worker.
    Summary,
}

/// What a parent does when a child of a role crashed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Start it again with the same input (within [`Intensity`]).
    Restart,
    /// Never start it again: record the failure (the outcome is unknown).
    Fail,
    /// Record the failure and carry on without its result.
    Ignore,
}

impl Role {
    /// Label value in metrics and logs (`read_only_tool`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Session => "session",
            Role::Processor => "processor",
            Role::ReadOnlyTool => "read_only_tool",
            Role::SideEffectTool => "side_effect_tool",
            Role::Compaction => "compaction",
            Role::Title => "title",
            Role::Summary => "summary",
        }
    }

    /// The restart strategy of the role (table in the module docs).
    pub fn strategy(self) -> Strategy {
        match self {
            Role::Session | Role::Processor | Role::ReadOnlyTool => Strategy::Restart,
            Role::SideEffectTool | Role::Compaction => Strategy::Fail,
            Role::Title | Role::Summary => Strategy::Ignore,
        }
    }

    /// Role of a call of tool `name`: read-only when the config lists it
    /// (`supervision.read_only_tools`, default `read`, `glob`, `grep`, `list`), else
    /// side-effecting (an unknown tool, an MCP tool, `task` and anything that writes must
    /// never run twice).
    pub fn of_tool(name: &str, cfg: &SupervisionConfig) -> Role {
        if cfg.read_only_tools().iter().any(|t| t == name) {
            Role::ReadOnlyTool
        } else {
            Role::SideEffectTool
        }
    }
}

/// Decision for one crash under an intensity limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Restart after `backoff`; `attempt` is the 1-based number of this restart.
    Restart {
        /// Wait before the restart.
        backoff: Duration,
        /// 1-based restart number within the window.
        attempt: u32,
    },
    /// The limit is reached: escalate. `crashes` counts the crashes inside the window,
    /// this one included.
    Escalate {
        /// Crashes within the window.
        crashes: u32,
    },
}

/// Restart-intensity limit: at most `max_restarts` restarts within `period`; the next crash
/// escalates. Backoff doubles from `backoff` per restart in the window, capped at 5 s.
/// Pure apart from the caller-supplied clock, so it is unit-tested without actors.
#[derive(Debug, Clone)]
pub struct Intensity {
    max_restarts: u32,
    period: Duration,
    backoff: Duration,
    crashes: VecDeque<Instant>,
}

/// Upper bound on one backoff wait.
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);

impl Intensity {
    /// A limit of `max_restarts` within `period`, first backoff `backoff`.
    pub fn new(max_restarts: u32, period: Duration, backoff: Duration) -> Self {
        Self {
            max_restarts,
            period,
            backoff,
            crashes: VecDeque::new(),
        }
    }

    /// The limit for `role` from the config. Read-only tools use `tool_restarts`, sessions
    /// `session_restarts`, processors `step_retries`; other roles never restart (0).
    pub fn for_role(role: Role, cfg: &SupervisionConfig) -> Self {
        let max = match role {
            Role::ReadOnlyTool => cfg.tool_restarts(),
            Role::Session => cfg.session_restarts(),
            Role::Processor => cfg.step_retries(),
            _ => 0,
        };
        Self::new(max, cfg.period(), cfg.backoff())
    }

    /// Record a crash at `now` and decide.
    pub fn crash(&mut self, now: Instant) -> Verdict {
        while let Some(&t) = self.crashes.front() {
            if now.saturating_duration_since(t) > self.period {
                self.crashes.pop_front();
            } else {
                break;
            }
        }
        self.crashes.push_back(now);
        let n = self.crashes.len() as u32;
        if n > self.max_restarts {
            return Verdict::Escalate { crashes: n };
        }
        let factor = 1u32 << (n - 1).min(16);
        Verdict::Restart {
            backoff: self.backoff.saturating_mul(factor).min(MAX_BACKOFF),
            attempt: n,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> SupervisionConfig {
        SupervisionConfig::default()
    }

    #[test]
    fn roles_map_to_the_documented_strategies() {
        let c = cfg();
        for t in ["read", "glob", "grep", "list"] {
            assert_eq!(Role::of_tool(t, &c), Role::ReadOnlyTool, "{t}");
        }
        for t in ["bash", "write", "edit", "task", "mcp_x", "whatever"] {
            assert_eq!(Role::of_tool(t, &c), Role::SideEffectTool, "{t}");
        }
        assert_eq!(Role::ReadOnlyTool.strategy(), Strategy::Restart);
        assert_eq!(Role::SideEffectTool.strategy(), Strategy::Fail);
        assert_eq!(Role::Processor.strategy(), Strategy::Restart);
        assert_eq!(Role::Session.strategy(), Strategy::Restart);
        assert_eq!(Role::Compaction.strategy(), Strategy::Fail);
        assert_eq!(Role::Title.strategy(), Strategy::Ignore);
        assert_eq!(Role::Summary.strategy(), Strategy::Ignore);
    }

    #[test]
    fn configured_read_only_tools_replace_the_default_list() {
        let c: SupervisionConfig =
            serde_json::from_value(serde_json::json!({"read_only_tools": ["webfetch"]})).unwrap();
        assert_eq!(Role::of_tool("webfetch", &c), Role::ReadOnlyTool);
        assert_eq!(Role::of_tool("read", &c), Role::SideEffectTool);
    }

    #[test]
    fn intensity_restarts_with_doubling_backoff_then_escalates() {
        let mut i = Intensity::new(3, Duration::from_secs(10), Duration::from_millis(100));
        let t0 = Instant::now();
        assert_eq!(
            i.crash(t0),
            Verdict::Restart {
                backoff: Duration::from_millis(100),
                attempt: 1
            }
        );
        assert_eq!(
            i.crash(t0 + Duration::from_secs(1)),
            Verdict::Restart {
                backoff: Duration::from_millis(200),
                attempt: 2
            }
        );
        assert_eq!(
            i.crash(t0 + Duration::from_secs(2)),
            Verdict::Restart {
                backoff: Duration::from_millis(400),
                attempt: 3
            }
        );
        assert_eq!(
            i.crash(t0 + Duration::from_secs(3)),
            Verdict::Escalate { crashes: 4 }
        );
    }

    #[test]
    fn crashes_older_than_the_period_are_forgotten() {
        let mut i = Intensity::new(1, Duration::from_secs(10), Duration::ZERO);
        let t0 = Instant::now();
        assert!(matches!(i.crash(t0), Verdict::Restart { attempt: 1, .. }));
        assert!(matches!(
            i.crash(t0 + Duration::from_secs(5)),
            Verdict::Escalate { crashes: 2 }
        ));
        // Both earlier crashes fall out of the window.
        assert!(matches!(
            i.crash(t0 + Duration::from_secs(30)),
            Verdict::Restart { attempt: 1, .. }
        ));
    }

    #[test]
    fn zero_restarts_escalates_at_once_and_backoff_is_capped() {
        let mut i = Intensity::new(0, Duration::from_secs(10), Duration::from_secs(1));
        assert_eq!(i.crash(Instant::now()), Verdict::Escalate { crashes: 1 });
        let mut j = Intensity::new(10, Duration::from_secs(100), Duration::from_secs(1));
        let t0 = Instant::now();
        let mut last = Duration::ZERO;
        for k in 0..10 {
            if let Verdict::Restart { backoff, .. } = j.crash(t0 + Duration::from_millis(k)) {
                last = backoff;
            }
        }
        assert_eq!(last, MAX_BACKOFF);
    }
}
