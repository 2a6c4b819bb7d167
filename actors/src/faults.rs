//! Fault injection for tests (cargo feature `fault-injection`; absent from release builds).
//!
//! A test installs a hook with `Runtime::inject_faults`; the runtime asks it at a few
//! points ([`FaultPoint`]) and panics right there when it answers `true`, so the supervision
//! paths run against real crashes. Without the feature, [`Faults`] is empty and
//! [`Faults::check`] compiles to nothing. Tool crashes need no hook: a test registers a tool
//! that panics.

/// Where a panic can be injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultPoint {
    /// A processor handling a stream event (mid-step, parts partly written). Key: the step's
    /// assistant message id.
    ProcessorEvent,
    /// A session actor taking a finished step (before accounting it). Key: the session id.
    SessionStep,
    /// A compaction worker starting its summary. Key: the session id.
    CompactionStart,
}

/// The hook: `(point, key) → panic here?`.
#[cfg(feature = "fault-injection")]
pub type FaultHook = std::sync::Arc<dyn Fn(FaultPoint, &str) -> bool + Send + Sync>;

/// The runtime's fault hook (set once; empty without the feature).
#[derive(Default)]
pub struct Faults {
    #[cfg(feature = "fault-injection")]
    hook: std::sync::OnceLock<FaultHook>,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Faults")
    }
}

impl Faults {
    /// Install the hook (only the first call takes effect).
    #[cfg(feature = "fault-injection")]
    pub fn install(&self, hook: FaultHook) {
        let _ = self.hook.set(hook);
    }

    /// Whether a hook is installed (never without the `fault-injection` feature): a caller
    /// that batches work can then keep each checked unit's effects before the next check.
    #[inline]
    pub fn armed(&self) -> bool {
        #[cfg(feature = "fault-injection")]
        return self.hook.get().is_some();
        #[cfg(not(feature = "fault-injection"))]
        false
    }

    /// Panic when the hook asks for a fault at `point` for `key`.
    #[inline]
    pub fn check(&self, point: FaultPoint, key: &str) {
        #[cfg(feature = "fault-injection")]
        if let Some(h) = self.hook.get()
            && h(point, key)
        {
            panic!("injected fault at {point:?} ({key})");
        }
        #[cfg(not(feature = "fault-injection"))]
        let _ = (point, key);
    }
}
