//! The process's allocator, and returning freed heap memory to the kernel once the runtime
//! goes idle.
//!
//! Allocator: troupe's binaries (`troupe`, `troupe-bench`) allocate with jemalloc
//! ([`Allocator`], declared as their `#[global_allocator]`). Measured against glibc's
//! allocator on `troupe-bench --sessions 100 --steps 10 --parallel 20` under callgrind: the
//! process's instructions −12 %, the tokio workers' −19 % (glibc's `malloc`/`free` were
//! 28 % of the workers', with fastbin consolidation from chunks freed on another thread);
//! bench/README.md, eleventh pass.
//!
//! Idle trim: an allocator keeps the memory a finished session freed (after 10,000
//! sessions ran 50 at a time glibc's RSS stayed near twice the live heap; jemalloc keeps its
//! dirty pages until its decay runs, which needs allocator activity). When the last live
//! session actor stops, the runtime trims the heap on the blocking pool, [`TRIM_DELAY`]
//! later (the stopped actor's state is dropped by then) and at most once per
//! [`TRIM_INTERVAL`], so a served workload whose sessions keep going idle pays for one trim
//! a second at most. A trim purges jemalloc's unused pages of every arena and runs glibc's
//! `malloc_trim(0)` (C libraries such as SQLite allocate from glibc's heap). Other platforms:
//! nothing happens.

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

/// The allocator of troupe's binaries: jemalloc (see the module docs), declared with
/// [`troupe_allocator!`](crate::troupe_allocator).
#[cfg(not(target_env = "msvc"))]
pub use tikv_jemallocator::Jemalloc as Allocator;

/// jemalloc's options for troupe's binaries, as a `malloc_conf` string that jemalloc reads
/// when it starts (the `_RJEM_MALLOC_CONF` environment variable overrides it): thread caches
/// keep sizes up to 1 KiB only (`tcache_max`, jemalloc's default 32 KiB) and at most 32
/// objects per small size class (`tcache_nslots_small_max`, default 200). Every tokio worker
/// and blocking-pool thread has its own cache, which the idle purge cannot reach: with the
/// defaults 1,000 sessions idle between turns kept 34–35 KiB each (issue 19's bound: 30),
/// with these 16–19 KiB (glibc 15.5), for 3 % more instructions than the defaults (still
/// 10 % fewer than glibc); bench/README.md, eleventh pass. A binary exports it with
/// [`troupe_allocator!`](crate::troupe_allocator).
#[cfg(not(target_env = "msvc"))]
pub const MALLOC_CONF: MallocConf =
    MallocConf(c"tcache_max:1024,tcache_nslots_small_max:32".as_ptr());

/// A `const char *` jemalloc reads as its `malloc_conf` (see [`MALLOC_CONF`]).
#[repr(transparent)]
#[derive(Debug)]
pub struct MallocConf(*const std::ffi::c_char);

// SAFETY: the pointer is to a static, immutable, NUL-terminated string.
#[allow(unsafe_code)]
unsafe impl Sync for MallocConf {}

/// Declares troupe's allocator in a binary: jemalloc as the `#[global_allocator]`
/// ([`Allocator`]) and its options ([`MALLOC_CONF`], exported as `_rjem_malloc_conf`, the
/// name jemalloc reads with tikv-jemalloc-sys's `_rjem_` prefix). Use once, at the top level
/// of a binary crate: `troupe_actors::troupe_allocator!();`. Elsewhere than MSVC targets
/// (which jemalloc does not support) it declares nothing.
#[macro_export]
macro_rules! troupe_allocator {
    () => {
        /// jemalloc, as every troupe binary (`troupe_actors::memory`).
        #[cfg(not(target_env = "msvc"))]
        #[global_allocator]
        static GLOBAL: $crate::memory::Allocator = $crate::memory::Allocator;

        /// jemalloc's options (`troupe_actors::memory::MALLOC_CONF`).
        #[cfg(not(target_env = "msvc"))]
        #[allow(unsafe_code)]
        #[unsafe(export_name = "_rjem_malloc_conf")]
        static MALLOC_CONF: $crate::memory::MallocConf = $crate::memory::MALLOC_CONF;
    };
}

/// Return the heap's free memory to the kernel: jemalloc's unused pages of all arenas
/// (`arena.<MALLCTL_ARENAS_ALL>.purge`, MALLCTL_ARENAS_ALL = 4096 in jemalloc 5's
/// `jemalloc_macros.h`), then glibc's `malloc_trim(0)`. In a process whose global allocator
/// is not jemalloc, the purge finds nothing to return.
pub fn trim() {
    #[cfg(not(target_env = "msvc"))]
    // SAFETY: a void mallctl (no old or new value); the name is a NUL-terminated string.
    #[allow(unsafe_code)]
    unsafe {
        tikv_jemalloc_sys::mallctl(
            c"arena.4096.purge".as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        );
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free heap pages; it has no preconditions.
    #[allow(unsafe_code)]
    unsafe {
        libc::malloc_trim(0);
    }
}
