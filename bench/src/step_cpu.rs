//! `--step-cpu`: the process's CPU time read at the start of every step (each new assistant
//! message published on the bus), so the cost of a step early and late in a long session
//! can be compared. The mock thread's CPU is read at the same moments and reported apart.

use std::collections::HashSet;

use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use troupe_session::{Bus, Event, Message};

use crate::measure;
use crate::mockthread::CpuClock;

/// CPU readings at one step start, seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Sample {
    /// Whole process (user + system, all threads; includes the mock thread).
    pub process_s: f64,
    /// The mock thread alone.
    pub mock_s: f64,
}

/// The running sampler.
pub struct Sampler {
    stop: oneshot::Sender<()>,
    task: JoinHandle<(Vec<Sample>, u64)>,
}

/// Start sampling at every new assistant message on `bus`. With `callgrind` (the run's total
/// steps and `--callgrind-window`), also toggle callgrind's instrumentation at that window's
/// edges ([`crate::callgrind::action`]).
pub fn start(
    bus: Bus,
    mock: CpuClock,
    callgrind: Option<(usize, crate::callgrind::Window)>,
) -> Sampler {
    let mut rx = bus.subscribe();
    let (stop, mut stopped) = oneshot::channel();
    let task = tokio::spawn(async move {
        let mut seen: HashSet<String> = HashSet::new();
        let mut samples = Vec::new();
        let mut lagged = 0u64;
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
                        if let Some(a) = callgrind
                            .and_then(|(total, w)| crate::callgrind::action(index, total, w))
                        {
                            crate::callgrind::apply(a);
                        }
                    }
                }
                Err(RecvError::Lagged(n)) => lagged += n,
                Err(RecvError::Closed) => break,
            }
        }
        (samples, lagged)
    });
    Sampler { stop, task }
}

impl Sampler {
    /// Stop; the samples in step order and how many bus events were missed (lag).
    pub async fn stop(self) -> (Vec<Sample>, u64) {
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
}
