//! `--callgrind-window first|last`: under `valgrind --tool=callgrind --instr-atstart=no`,
//! instrument only the first or the last 100 steps of the run (the windows of
//! `--step-cpu`), so the per-function instruction counts of an early and a late step can be
//! compared (one run per window; the profile is written at exit) without instrumenting the
//! steps in between. Outside valgrind the requests do nothing.
//!
//! (A dump requested from inside the program would write only the calling thread's counts
//! with `--separate-threads=yes`, so the windows are not dumped here.)

/// Callgrind's client requests (`valgrind/callgrind.h`: `VG_USERREQ_TOOL_BASE('C','T')` + n).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
enum Request {
    StartInstrumentation = 0x4354_0004,
    StopInstrumentation = 0x4354_0005,
}

/// Valgrind's client request: the magic preamble (four rotations of `rdi` by 128 bits in
/// all, a no-op on a real CPU) and `xchg rbx, rbx`, with `rax` pointing at the request and
/// its arguments (`valgrind.h`, amd64). Returns valgrind's answer, 0 outside valgrind.
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
fn client_request(request: Request, arg1: u64) -> u64 {
    let args: [u64; 6] = [request as u64, arg1, 0, 0, 0, 0];
    let mut result: u64 = 0;
    // SAFETY: the sequence only rotates rdi by a multiple of 64 bits (restoring it) and
    // exchanges rbx with itself; valgrind reads `args` (valid for the call) and writes rdx.
    unsafe {
        std::arch::asm!(
            "rol rdi, 3",
            "rol rdi, 13",
            "rol rdi, 61",
            "rol rdi, 51",
            "xchg rbx, rbx",
            in("rax") args.as_ptr(),
            inout("rdx") result,
            out("rdi") _,
            options(nostack),
        );
    }
    result
}

#[cfg(not(target_arch = "x86_64"))]
fn client_request(_request: Request, _arg1: u64) -> u64 {
    0
}

/// Which window `--callgrind-window` instruments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Window {
    /// Steps 1–100.
    First,
    /// The last 100 steps.
    Last,
}

/// What to do at the start of step `index` (0-based, one `--step-cpu` sample per step) of
/// `total` steps for `window` (100 steps): the same spans as
/// [`crate::step_cpu::first_last`] (samples 0 → 100 and `total − 101` → `total − 1`).
/// Nothing when the run is too short for two windows.
pub fn action(index: usize, total: usize, window: Window) -> Option<Action> {
    const W: usize = 100;
    if total < 2 * W + 1 {
        return None;
    }
    let (start, stop) = match window {
        Window::First => (0, W),
        Window::Last => (total - 1 - W, total - 1),
    };
    if index == start {
        Some(Action::Start)
    } else if index == stop {
        Some(Action::Stop)
    } else {
        None
    }
}

/// A step at a window's edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Start instrumenting.
    Start,
    /// Stop instrumenting (the counts are written at exit).
    Stop,
}

/// Carry out `a`.
pub fn apply(a: Action) {
    client_request(
        match a {
            Action::Start => Request::StartInstrumentation,
            Action::Stop => Request::StopInstrumentation,
        },
        0,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_match_the_step_cpu_windows() {
        let at = |i, w| action(i, 2000, w);
        assert_eq!(at(0, Window::First), Some(Action::Start));
        assert_eq!(at(100, Window::First), Some(Action::Stop));
        assert_eq!(at(1899, Window::Last), Some(Action::Start));
        assert_eq!(at(1999, Window::Last), Some(Action::Stop));
        assert_eq!(at(0, Window::Last), None);
        assert_eq!(at(1000, Window::First), None);
        // Too short for two windows: nothing.
        assert_eq!(action(0, 150, Window::First), None);
    }

    #[test]
    fn requests_are_harmless_outside_valgrind() {
        apply(Action::Start);
        apply(Action::Stop);
    }
}
