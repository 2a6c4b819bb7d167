//! User and system CPU time per thread group, for `--step-cpu`'s first and last windows:
//! which threads' time grows late in a long session, and whether it is user time (our code,
//! the mock's parse) or system time (the kernel: socket copies, file writes).
//!
//! Sources: `getrusage(RUSAGE_SELF)` for the whole process (µs; threads that ended count
//! too), and for every live thread `/proc/self/task/<tid>/stat` (fields 14 and 15, `utime` and
//! `stime`, in clock ticks of 1/`sysconf(_SC_CLK_TCK)` s, usually 10 ms) and
//! `/proc/self/task/<tid>/schedstat` (first field: ns on a CPU). The kernel splits a thread's
//! precise run time into user and system in proportion to the ticks it sampled in each, so
//! a group's split is statistical (10 ms ticks) while its total (schedstat) is exact.

use serde_json::{Map, Value, json};

/// One thread's counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadCpu {
    /// Kernel thread id.
    pub tid: u32,
    /// `comm` (the thread name, at most 15 bytes).
    pub name: String,
    /// User time, clock ticks.
    pub user_ticks: u64,
    /// System time, clock ticks.
    pub sys_ticks: u64,
    /// Time on a CPU, ns (`schedstat`).
    pub run_ns: u64,
}

/// The process and its threads at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reading {
    /// `getrusage(RUSAGE_SELF)` user time, s.
    pub process_user_s: f64,
    /// `getrusage(RUSAGE_SELF)` system time, s.
    pub process_sys_s: f64,
    /// Every thread that could be read.
    pub threads: Vec<ThreadCpu>,
}

/// Reads the process and all its threads now (empty `threads` off Linux).
pub fn read() -> Reading {
    let (process_user_s, process_sys_s) = process_user_sys();
    let mut threads = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc/self/task") {
        for entry in dir.flatten() {
            let Some(tid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
                continue;
            };
            let path = entry.path();
            let (Ok(stat), Ok(sched)) = (
                std::fs::read_to_string(path.join("stat")),
                std::fs::read_to_string(path.join("schedstat")),
            ) else {
                continue;
            };
            let (Some((name, user_ticks, sys_ticks)), Some(run_ns)) =
                (parse_stat(&stat), parse_schedstat_run_ns(&sched))
            else {
                continue;
            };
            threads.push(ThreadCpu {
                tid,
                name,
                user_ticks,
                sys_ticks,
                run_ns,
            });
        }
    }
    Reading {
        process_user_s,
        process_sys_s,
        threads,
    }
}

#[allow(unsafe_code)]
fn process_user_sys() -> (f64, f64) {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `ru` points to writable memory of the right size; getrusage only writes it.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) } != 0 {
        return (0.0, 0.0);
    }
    // SAFETY: getrusage returned 0, so it filled the struct (and it was zeroed before).
    let ru = unsafe { ru.assume_init() };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (tv(ru.ru_utime), tv(ru.ru_stime))
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`, 100 when it cannot be read).
#[allow(unsafe_code)]
fn ticks_per_s() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

/// `(comm, utime, stime)` of a `/proc/<pid>/task/<tid>/stat` line. The name is in
/// parentheses and may hold spaces or parentheses, so fields are counted after the last `)`.
pub fn parse_stat(line: &str) -> Option<(String, u64, u64)> {
    let open = line.find('(')?;
    let close = line.rfind(')')?;
    let name = line.get(open + 1..close)?.to_owned();
    // After ") ": field 3 (state) is index 0, so utime (field 14) is index 11, stime 12.
    let mut rest = line.get(close + 1..)?.split_whitespace().skip(11);
    let user = rest.next()?.parse().ok()?;
    let sys = rest.next()?.parse().ok()?;
    Some((name, user, sys))
}

/// Time on a CPU (first field, ns) of a `schedstat` line: `run_ns wait_ns slices`.
pub fn parse_schedstat_run_ns(line: &str) -> Option<u64> {
    line.split_whitespace().next()?.parse().ok()
}

/// The group a thread's name puts it in: `mock` (the in-process mock, `bench-mock`),
/// `store_writer` (`troupe-store` and its WAL checkpointer `troupe-store-ckpt`, which the
/// kernel shortens to `troupe-store-ck`), `tokio` (the runtime's workers and its blocking
/// pool, which share a name: `tokio-rt-worker`, `tokio-runtime-w` in older tokio), `other`
/// (the main thread and anything else).
pub fn group(name: &str) -> &'static str {
    match name {
        "bench-mock" => "mock",
        n if n.starts_with("troupe-store") => "store_writer",
        n if n.starts_with("tokio-r") => "tokio",
        _ => "other",
    }
}

/// CPU per step between two readings `steps` steps apart: the process's user and system ms
/// (`getrusage`) with the mock's share taken out (`troupe_*`), and per group the user,
/// system and run (schedstat) ms of the threads alive at `b` (a thread that started after `a`
/// counts from zero; one that ended before `b` is missing from its group but not from the
/// process). Milliseconds per step, rounded to µs.
pub fn window(a: &Reading, b: &Reading, steps: usize) -> Value {
    let steps = steps.max(1) as f64;
    let tick_ms = 1000.0 / ticks_per_s();
    let r = |x: f64| (x * 1000.0).round() / 1000.0;
    let mut groups: Map<String, Value> = Map::new();
    let mut sums: std::collections::BTreeMap<&'static str, (u64, u64, u64, usize)> =
        Default::default();
    for t in &b.threads {
        let before = a.threads.iter().find(|x| x.tid == t.tid);
        let (u0, s0, r0) = before.map_or((0, 0, 0), |x| (x.user_ticks, x.sys_ticks, x.run_ns));
        let e = sums.entry(group(&t.name)).or_default();
        e.0 += t.user_ticks.saturating_sub(u0);
        e.1 += t.sys_ticks.saturating_sub(s0);
        e.2 += t.run_ns.saturating_sub(r0);
        e.3 += 1;
    }
    for (g, (u, s, run, n)) in &sums {
        groups.insert(
            (*g).to_owned(),
            json!({
                "threads": n,
                "user_ms_per_step": r(*u as f64 * tick_ms / steps),
                "sys_ms_per_step": r(*s as f64 * tick_ms / steps),
                "run_ms_per_step": r(*run as f64 / 1e6 / steps),
            }),
        );
    }
    let user = (b.process_user_s - a.process_user_s) * 1000.0 / steps;
    let sys = (b.process_sys_s - a.process_sys_s) * 1000.0 / steps;
    // The mock thread's user/system split, applied to its exact run time.
    let (mock_user, mock_sys) = sums.get("mock").map_or((0.0, 0.0), |(u, s, run, _)| {
        let run_ms = *run as f64 / 1e6 / steps;
        let ticks = (u + s) as f64;
        if ticks > 0.0 {
            (run_ms * *u as f64 / ticks, run_ms * *s as f64 / ticks)
        } else {
            (run_ms, 0.0)
        }
    });
    json!({
        "process_user_ms_per_step": r(user),
        "process_sys_ms_per_step": r(sys),
        "troupe_user_ms_per_step": r(user - mock_user),
        "troupe_sys_ms_per_step": r(sys - mock_sys),
        "groups": groups,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_after_a_name_with_spaces_and_parens() {
        let line = "4242 (tokio (w) 1) S 1 2 3 4 5 6 7 8 9 10 123 45 0 0 20 0 1 0";
        assert_eq!(parse_stat(line), Some(("tokio (w) 1".to_owned(), 123, 45)));
        assert_eq!(parse_stat("1 (x) S 1"), None);
        assert_eq!(parse_schedstat_run_ns("1500 20 3\n"), Some(1500));
    }

    #[test]
    fn groups_by_name() {
        assert_eq!(group("bench-mock"), "mock");
        assert_eq!(group("troupe-store"), "store_writer");
        assert_eq!(group("troupe-store-ck"), "store_writer");
        assert_eq!(group("tokio-runtime-w"), "tokio");
        assert_eq!(group("tokio-rt-worker"), "tokio");
        assert_eq!(group("troupe-bench"), "other");
    }

    #[test]
    fn a_window_splits_user_and_system_per_group() {
        let t = |tid, name: &str, u, s, run| ThreadCpu {
            tid,
            name: name.to_owned(),
            user_ticks: u,
            sys_ticks: s,
            run_ns: run,
        };
        let a = Reading {
            process_user_s: 1.0,
            process_sys_s: 0.5,
            threads: vec![
                t(1, "bench-mock", 10, 0, 100_000_000),
                t(2, "tokio-runtime-w", 5, 5, 0),
            ],
        };
        // 10 steps: the process used 0.2 s user and 0.1 s system; the mock 3 + 1 ticks over
        // 40 ms of run time (30 ms user, 10 ms system by its tick split).
        let b = Reading {
            process_user_s: 1.2,
            process_sys_s: 0.6,
            threads: vec![
                t(1, "bench-mock", 13, 1, 140_000_000),
                t(2, "tokio-runtime-w", 20, 10, 200_000_000),
                t(3, "tokio-runtime-w", 1, 0, 5_000_000),
            ],
        };
        let v = window(&a, &b, 10);
        assert_eq!(v["process_user_ms_per_step"], 20.0);
        assert_eq!(v["process_sys_ms_per_step"], 10.0);
        assert_eq!(v["troupe_user_ms_per_step"], 17.0);
        assert_eq!(v["troupe_sys_ms_per_step"], 9.0);
        let tokio = &v["groups"]["tokio"];
        assert_eq!(tokio["threads"], 2);
        assert_eq!(tokio["run_ms_per_step"], 20.5);
        assert_eq!(v["groups"]["mock"]["run_ms_per_step"], 4.0);
    }
}
