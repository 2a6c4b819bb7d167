//! `--step-cpu`: the process's CPU time read at the start of every step (each new assistant
//! message published on the bus), so the cost of a step early and late in a long session
//! can be compared. The mock thread's CPU is read at the same moments and reported apart.
//! At the edges of the first and the last window the user and system time of every thread
//! is read too ([`crate::threads`]).

use std::collections::HashSet;

use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use troupe_session::{Bus, Event, Message};

use crate::measure;
use crate::mockthread::CpuClock;
use crate::threads;

/// CPU readings at one step start, seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Sample {
    /// Whole process (user + system, all threads; includes the mock thread).
    pub process_s: f64,
    /// The mock thread alone.
    pub mock_s: f64,
}

/// Steps per window of [`first_last`] and of the thread readings.
pub const WINDOW: usize = 100;

/// What a sampler collected.
#[derive(Debug, Default)]
pub struct Collected {
    /// One per step start, in step order.
    pub samples: Vec<Sample>,
    /// Bus events missed (lag): a missed step start shifts every later sample.
    pub lagged: u64,
    /// Thread readings at the sample indices [`edges`] names, with their index.
    pub threads: Vec<(usize, threads::Reading)>,
}

/// The running sampler.
pub struct Sampler {
    stop: oneshot::Sender<()>,
    task: JoinHandle<Collected>,
}

/// The sample indices that open and close the first and the last [`WINDOW`] of `total`
/// steps (the spans of [`first_last`]); empty when the run is too short for both.
pub fn edges(total: usize) -> Vec<usize> {
    if total < 2 * WINDOW + 1 {
        return Vec::new();
    }
    vec![0, WINDOW, total - 1 - WINDOW, total - 1]
}

/// Start sampling at every new assistant message on `bus`, a run of `total` steps; at the
/// [`edges`] also read every thread's CPU. With `callgrind` (`--callgrind-window`), also
/// toggle callgrind's instrumentation at that window's edges ([`crate::callgrind::action`]).
pub fn start(
    bus: Bus,
    mock: CpuClock,
    total: usize,
    callgrind: Option<crate::callgrind::Window>,
) -> Sampler {
    let mut rx = bus.subscribe();
    let (stop, mut stopped) = oneshot::channel();
    let task = tokio::spawn(async move {
        let mut seen: HashSet<String> = HashSet::new();
        let mut samples = Vec::new();
        let mut lagged = 0u64;
        let mut readings = Vec::new();
        let edges = edges(total);
        loop {
            let ev = tokio::select! {
                _ = &mut stopped => break,
                ev = rx.recv() => ev,
            };
            match ev {
                Ok(ev) => {
                    if let Event::MessageUpdated {
                        info: Message::Assistant(a),
                    } = ev.as_ref()
                        && a.time.completed.is_none()
                        && seen.insert(a.id.to_string())
                    {
                        let index = samples.len();
                        samples.push(Sample {
                            process_s: measure::usage().map_or(0.0, |u| u.cpu_s),
                            mock_s: mock.seconds(),
                        });
                        if edges.contains(&index) {
                            readings.push((index, threads::read()));
                        }
                        if let Some(a) =
                            callgrind.and_then(|w| crate::callgrind::action(index, total, w))
                        {
                            crate::callgrind::apply(a);
                        }
                    }
                }
                Err(RecvError::Lagged(n)) => lagged += n,
                Err(RecvError::Closed) => break,
            }
        }
        Collected {
            samples,
            lagged,
            threads: readings,
        }
    });
    Sampler { stop, task }
}

impl Sampler {
    /// Stop; what was collected.
    pub async fn stop(self) -> Collected {
        let _ = self.stop.send(());
        self.task.await.unwrap_or_default()
    }
}

/// CPU ms per step over the first and the last `window` steps of `samples` (one per step
/// start), whole process and without the mock thread, and the ratio last/first of the latter.
/// `None` when there are fewer than `2 × window + 1` samples.
pub fn first_last(samples: &[Sample], window: usize) -> Option<Value> {
    if window == 0 || samples.len() < 2 * window + 1 {
        return None;
    }
    let per_step = |a: &Sample, b: &Sample| {
        let process = (b.process_s - a.process_s) * 1000.0 / window as f64;
        let mock = (b.mock_s - a.mock_s) * 1000.0 / window as f64;
        (process, process - mock)
    };
    let n = samples.len();
    let (first_p, first_t) = per_step(&samples[0], &samples[window]);
    let (last_p, last_t) = per_step(&samples[n - 1 - window], &samples[n - 1]);
    let r = |x: f64| (x * 1000.0).round() / 1000.0;
    Some(json!({
        "window_steps": window,
        "samples": n,
        "first_cpu_ms_per_step": r(first_p),
        "last_cpu_ms_per_step": r(last_p),
        "first_troupe_cpu_ms_per_step": r(first_t),
        "last_troupe_cpu_ms_per_step": r(last_t),
        "troupe_last_over_first": if first_t > 0.0 { Some(r(last_t / first_t)) } else { None },
        "process_last_over_first": if first_p > 0.0 { Some(r(last_p / first_p)) } else { None },
    }))
}

/// User and system CPU per step of the first and the last window from the thread readings
/// (see [`threads::window`]); `None` unless all four edges of a `total`-step run were read.
pub fn thread_windows(readings: &[(usize, threads::Reading)], total: usize) -> Option<Value> {
    let at = |i: usize| readings.iter().find(|(j, _)| *j == i).map(|(_, r)| r);
    let e = edges(total);
    let (a, b, c, d) = (at(*e.first()?)?, at(e[1])?, at(e[2])?, at(e[3])?);
    Some(json!({
        "first": threads::window(a, b, WINDOW),
        "last": threads::window(c, d, WINDOW),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_and_last_windows() {
        // 1 ms per step for the first 10, 3 ms per step after; the mock a quarter of it.
        let mut t = 0.0;
        let samples: Vec<Sample> = (0..=30)
            .map(|i| {
                let s = Sample {
                    process_s: t,
                    mock_s: t / 4.0,
                };
                t += if i < 10 { 0.001 } else { 0.003 };
                s
            })
            .collect();
        let v = first_last(&samples, 10).expect("enough");
        assert_eq!(v["first_cpu_ms_per_step"], 1.0);
        assert_eq!(v["last_cpu_ms_per_step"], 3.0);
        assert_eq!(v["first_troupe_cpu_ms_per_step"], 0.75);
        assert_eq!(v["last_troupe_cpu_ms_per_step"], 2.25);
        assert_eq!(v["troupe_last_over_first"], 3.0);
        assert!(first_last(&samples[..20], 10).is_none());
    }

    #[test]
    fn thread_readings_open_and_close_the_same_windows() {
        assert_eq!(edges(2000), vec![0, 100, 1899, 1999]);
        assert!(edges(200).is_empty());
        for (i, w) in [
            (0, crate::callgrind::Window::First),
            (100, crate::callgrind::Window::First),
            (1899, crate::callgrind::Window::Last),
            (1999, crate::callgrind::Window::Last),
        ] {
            assert!(crate::callgrind::action(i, 2000, w).is_some());
        }
        let reading = |x: f64| threads::Reading {
            process_user_s: x,
            ..threads::Reading::default()
        };
        let readings: Vec<_> = edges(2000)
            .into_iter()
            .map(|i| (i, reading(i as f64)))
            .collect();
        let v = thread_windows(&readings, 2000).expect("all four edges");
        assert_eq!(v["first"]["process_user_ms_per_step"], 1000.0);
        assert!(thread_windows(&readings[..3], 2000).is_none());
        assert!(thread_windows(&readings, 1999).is_none());
    }
}
