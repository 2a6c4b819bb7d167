//! The activity line of `troupe run`: a spinner with the elapsed time on stderr saying what
//! the turn is waiting for ("waiting for model…", "running bash: sleep 3; echo done…").
//!
//! Shown only when stderr is a terminal (and not with `--quiet` or `--format json`); a
//! disabled [`Activity`] (the default) does nothing, so redirected output gets no control
//! characters.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Spinner redraw period (indicatif steady tick).
const TICK: Duration = Duration::from_millis(100);

/// A cloneable handle on the activity line; clones share it (the printer sets it, the
/// permission prompt pauses it). `Activity::default()` never draws anything.
#[derive(Clone, Default)]
pub struct Activity {
    inner: Option<Arc<Inner>>,
}

#[derive(Default)]
struct Inner {
    bar: Mutex<Option<(String, indicatif::ProgressBar)>>,
    /// Set while a permission question is on screen: nothing is drawn over it.
    paused: AtomicBool,
}

impl Activity {
    /// An activity line on stderr when `enabled` (the caller checks that stderr is a terminal).
    pub fn on_stderr(enabled: bool) -> Activity {
        Activity {
            inner: enabled.then(|| Arc::new(Inner::default())),
        }
    }

    /// Show `message` with a spinner and the time since this message was first shown (the
    /// same message again keeps its clock).
    pub fn show(&self, message: &str) {
        let Some(inner) = &self.inner else { return };
        if inner.paused.load(Ordering::SeqCst) {
            return;
        }
        let mut slot = inner.bar.lock().unwrap_or_else(|e| e.into_inner());
        if slot.as_ref().is_some_and(|(m, _)| m == message) {
            return;
        }
        if let Some((_, old)) = slot.take() {
            old.finish_and_clear();
        }
        let bar =
            indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr());
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {msg} {elapsed}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
        );
        bar.set_message(message.to_string());
        bar.enable_steady_tick(TICK);
        *slot = Some((message.to_string(), bar));
    }

    /// Remove the line (before text is written to the same terminal).
    pub fn clear(&self) {
        let Some(inner) = &self.inner else { return };
        if let Some((_, bar)) = inner.bar.lock().unwrap_or_else(|e| e.into_inner()).take() {
            bar.finish_and_clear();
        }
    }

    /// Remove the line and draw nothing until [`Activity::resume`] (a question is on screen).
    pub fn pause(&self) {
        if let Some(inner) = &self.inner {
            inner.paused.store(true, Ordering::SeqCst);
        }
        self.clear();
    }

    /// Allow drawing again after [`Activity::pause`].
    pub fn resume(&self) {
        if let Some(inner) = &self.inner {
            inner.paused.store(false, Ordering::SeqCst);
        }
    }
}
