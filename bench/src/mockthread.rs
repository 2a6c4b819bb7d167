//! The in-process mock provider on a thread of its own (a current-thread tokio runtime), so
//! its CPU time can be read apart from troupe's: `pthread_getcpuclockid` of that thread,
//! nanosecond resolution. Everything the mock does (accepting connections, parsing request
//! bodies, encoding SSE) runs on it.

use std::thread::JoinHandle;

use anyhow::{Context, Result, anyhow};
use troupe_testkit::{MockServer, Script};

/// A per-thread CPU clock (`clockid_t` of a thread).
#[derive(Debug, Clone, Copy)]
pub struct CpuClock(libc::clockid_t);

impl CpuClock {
    /// CPU time of the thread so far, seconds (0 if the clock cannot be read).
    #[allow(unsafe_code)]
    pub fn seconds(self) -> f64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec; clock_gettime only writes it.
        let rc = unsafe { libc::clock_gettime(self.0, &mut ts) };
        if rc != 0 {
            return 0.0;
        }
        ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
    }
}

/// The mock server and the thread that runs it.
pub struct MockThread {
    server: Option<MockServer>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    clock: CpuClock,
}

impl MockThread {
    /// Start `script` on a new thread; returns once the server listens.
    pub fn start(script: Script) -> Result<Self> {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("bench-mock".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(anyhow!("mock runtime: {e}")));
                        return;
                    }
                };
                rt.block_on(async move {
                    let started = MockServer::start(script)
                        .await
                        .context("cannot start the mock provider");
                    let _ = ready_tx.send(started.map(|s| (s, own_clock())));
                    // Serve until told to stop (after the server's own shutdown).
                    let _ = stop_rx.await;
                });
            })
            .context("cannot start the mock thread")?;
        let (server, clock) = ready_rx
            .recv()
            .map_err(|_| anyhow!("the mock thread ended before it started"))??;
        Ok(MockThread {
            server: Some(server),
            stop: Some(stop_tx),
            thread: Some(thread),
            clock,
        })
    }

    /// The server (base URL, recorded requests).
    pub fn server(&self) -> &MockServer {
        self.server
            .as_ref()
            .expect("the server lives until shutdown")
    }

    /// CPU time of the mock thread so far, seconds.
    pub fn cpu_s(&self) -> f64 {
        self.clock.seconds()
    }

    /// The mock thread's CPU clock.
    pub fn cpu_clock(&self) -> CpuClock {
        self.clock
    }

    /// Stop the server, then its thread.
    pub async fn shutdown(mut self) {
        if let Some(server) = self.server.take() {
            server.shutdown().await;
        }
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
    }
}

/// The CPU clock of the calling thread.
#[allow(unsafe_code)]
fn own_clock() -> CpuClock {
    let mut id: libc::clockid_t = libc::CLOCK_THREAD_CPUTIME_ID;
    // SAFETY: pthread_self is always valid for the calling thread; `id` is writable.
    let rc = unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut id) };
    if rc != 0 {
        id = libc::CLOCK_THREAD_CPUTIME_ID;
    }
    CpuClock(id)
}
