//! SIGINT and SIGTERM, from the first instant of `main` (issue 24.6).
//!
//! Until a command takes the signals over, [`install`]'s handler ends the process at once
//! with the shell's convention `128 + signal` (130 for Ctrl-C, 143 for SIGTERM) instead of
//! dying by the signal: an early Ctrl-C has nothing to clean up yet. A command that runs
//! turns calls [`Signals::take_over`]: from then on the handler stands aside and the command
//! handles each signal (abort the turns, close the parts, then exit with
//! [`abort_exit_code`]).

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use tokio::signal::unix::{Signal, SignalKind, signal};

/// Whether a command handles the signals itself.
static TAKEN_OVER: AtomicBool = AtomicBool::new(false);
/// The first signal a command received through [`Signals::next`] (0: none).
static FIRST: AtomicI32 = AtomicI32::new(0);

/// Install the early handlers for SIGINT and SIGTERM. Call first thing in `main`.
#[allow(unsafe_code)]
pub fn install() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the action only reads an atomic and calls `_exit`, both async-signal-safe;
        // it allocates nothing and takes no lock.
        let registered = unsafe {
            signal_hook_registry::register(sig, move || {
                if !TAKEN_OVER.load(Ordering::SeqCst) {
                    libc::_exit(128 + sig);
                }
            })
        };
        if let Err(e) = registered {
            tracing::warn!(signal = sig, error = %e, "cannot install the signal handler");
        }
    }
}

/// SIGINT and SIGTERM as a stream, for a command that handles them itself.
pub struct Signals {
    int: Signal,
    term: Signal,
}

impl Signals {
    /// Start listening (signals from now on are queued for [`Signals::next`]), then stop
    /// the early handler from exiting. Errors when the runtime cannot register them.
    pub fn take_over() -> std::io::Result<Self> {
        let s = Self {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
        };
        TAKEN_OVER.store(true, Ordering::SeqCst);
        Ok(s)
    }

    /// The next SIGINT or SIGTERM (its number); `None` when the streams ended.
    pub async fn next(&mut self) -> Option<i32> {
        let sig = tokio::select! {
            s = self.int.recv() => s.map(|_| libc::SIGINT),
            s = self.term.recv() => s.map(|_| libc::SIGTERM),
        }?;
        let _ = FIRST.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst);
        Some(sig)
    }
}

/// Exit code after an interrupted turn: `128 +` the first signal received (143 for
/// SIGTERM), 130 when the abort came from elsewhere.
pub fn abort_exit_code() -> u8 {
    match FIRST.load(Ordering::SeqCst) {
        0 => 130,
        s => (128 + s) as u8,
    }
}
