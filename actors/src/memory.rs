//! Returning freed heap memory to the kernel once the runtime goes idle.
//!
//! glibc keeps the memory a finished session freed in its arenas: after 10,000 sessions ran
//! 50 at a time the RSS stays near twice the live heap (bench/README.md, issue 19: 126 MiB, of
//! which `malloc_trim(0)` returns 56). When the last live session actor stops, the runtime
//! trims the heap on the blocking pool, [`TRIM_DELAY`] later (the stopped actor's state is
//! dropped by then) and at most once per [`TRIM_INTERVAL`], so a served workload whose
//! sessions keep going idle pays for one trim a second at most. Other allocators and
//! platforms: nothing happens.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::RuntimeShared;

/// Wait after the last session stopped before trimming: 200 ms.
pub const TRIM_DELAY: Duration = Duration::from_millis(200);

/// Least time between two trims: 1 s.
pub const TRIM_INTERVAL: Duration = Duration::from_secs(1);

/// The runtime's idle trimmer (in [`RuntimeShared::idle_trim`]).
#[derive(Debug, Default)]
pub struct IdleTrim {
    /// A trim is scheduled, or its interval has not passed yet.
    pending: AtomicBool,
    /// A session stopped while a trim was pending: look again when the interval is over.
    again: AtomicBool,
    /// Trims done (`troupe_memory_trims_total`).
    pub trims: AtomicU64,
}

impl IdleTrim {
    /// A session actor stopped: when no session is live, schedule a trim (see the module
    /// docs). Cheap when one is already scheduled.
    pub(crate) fn session_stopped(shared: &Arc<RuntimeShared>) {
        let me = &shared.idle_trim;
        if !shared.sessions.is_empty() {
            return;
        }
        if me.pending.swap(true, Ordering::AcqRel) {
            me.again.store(true, Ordering::Release);
            return;
        }
        let weak: Weak<RuntimeShared> = Arc::downgrade(shared);
        tokio::spawn(async move {
            tokio::time::sleep(TRIM_DELAY).await;
            let Some(shared) = weak.upgrade() else {
                return;
            };
            if shared.sessions.is_empty() {
                let _ = tokio::task::spawn_blocking(trim).await;
                shared.idle_trim.trims.fetch_add(1, Ordering::Relaxed);
            }
            drop(shared);
            // The interval passes before the next trim may be scheduled.
            tokio::time::sleep(TRIM_INTERVAL.saturating_sub(TRIM_DELAY)).await;
            if let Some(shared) = weak.upgrade() {
                shared.idle_trim.pending.store(false, Ordering::Release);
                // Sessions that stopped during the interval found a trim pending: look again
                // (only then: an idle runtime is trimmed once, not every interval).
                if shared.idle_trim.again.swap(false, Ordering::AcqRel) {
                    Self::session_stopped(&shared);
                }
            }
        });
    }
}

/// Return the heap's free memory to the kernel (glibc `malloc_trim(0)`).
fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free heap pages; it has no preconditions.
    #[allow(unsafe_code)]
    unsafe {
        libc::malloc_trim(0);
    }
}
