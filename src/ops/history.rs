//! The last minutes at a glance: what the status page charts, from the process's own
//! counters (no Prometheus needed to see what happened just now).
//!
//! **Algorithm.** Every [`EVERY`] a sample takes the requests counted so far by decision
//! (the counters behind `robotsgate_requests_total`) and the [`QUEUES`] origins with the
//! longest pacing queues at that moment; a ring keeps the last [`KEEP`] samples. The
//! page gets, per decision, the rate between consecutive samples, and for the origins
//! whose queue was longest within the window, their queue at each sample.
//!
//! **Costs.** A sample reads 12 counters and passes once over the robots store (a lock
//! per shard and per held origin's schedules: tens of milliseconds for a million
//! origins, on one runtime thread, every [`EVERY`]). Memory: [`KEEP`] samples of 12
//! counters and at most [`QUEUES`] origin names, some 100 KiB at most.
//!
//! **Limits.** A burst shorter than [`EVERY`] is averaged over it; a queue that grows and
//! drains between two samples is not seen. The ring starts empty with each process (a
//! reload included): Prometheus keeps the longer history.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};

use crate::enforce::Enforcer;
use crate::telemetry::metrics;

/// How often a sample is taken.
pub const EVERY: Duration = Duration::from_secs(2);
/// How many samples are kept: ten minutes.
const KEEP: usize = 300;
/// How many origins' queues a sample keeps, and the charts show.
const QUEUES: usize = 5;

/// One look at the counters.
struct Sample {
    /// Seconds since the Unix epoch.
    at: f64,
    /// Requests so far, by decision label.
    totals: Vec<(&'static str, u64)>,
    /// The longest pacing queues: origin and requests waiting or in flight.
    queues: Vec<(String, usize)>,
}

/// The ring of recent samples, shared by the sampler and the admin listener.
#[derive(Default)]
pub struct History {
    /// The samples, oldest first, bounded to the window.
    samples: Mutex<VecDeque<Sample>>,
}

impl History {
    /// Takes one sample of the counters and of `enforcer`'s queues.
    pub fn sample(&self, enforcer: &Enforcer) {
        let at = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64();
        let sample = Sample {
            at,
            totals: metrics::requests_by_decision(),
            queues: enforcer
                .longest_queues(QUEUES)
                .into_iter()
                .map(|(origin, queued)| (origin.to_string(), queued))
                .collect(),
        };
        self.push(sample);
    }

    /// Adds `sample`, dropping those past the window.
    fn push(&self, sample: Sample) {
        let mut samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        if samples.len() == KEEP {
            samples.pop_front();
        }
        samples.push_back(sample);
    }

    /// Samples `enforcer` every [`EVERY`], for as long as the runtime runs.
    pub fn keep_sampling(self: Arc<Self>, enforcer: Arc<Enforcer>) {
        tokio::spawn(async move {
            let mut every = tokio::time::interval(EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                self.sample(&enforcer);
            }
        });
    }

    /// The charts' data: `at` (seconds since the epoch, one per sample after the
    /// first), `decisions` (per decision with any request in the window, requests per
    /// second over the interval ending at each `at`) and `queues` (per origin among the
    /// longest, its queue at each `at`).
    pub fn to_json(&self) -> Value {
        let samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        let later: Vec<&Sample> = samples.iter().skip(1).collect();
        let at: Vec<f64> = later.iter().map(|s| s.at).collect();

        let mut decisions = Map::new();
        if let Some(first) = samples.front() {
            for (index, (label, _)) in first.totals.iter().enumerate() {
                let rates: Vec<f64> = samples
                    .iter()
                    .zip(later.iter())
                    .map(|(before, after)| {
                        let count = |s: &Sample| s.totals.get(index).map_or(0, |t| t.1);
                        let requests = count(after).saturating_sub(count(before)) as f64;
                        let seconds = (after.at - before.at).max(1e-3);
                        (requests / seconds * 1000.0).round() / 1000.0
                    })
                    .collect();
                if rates.iter().any(|r| *r > 0.0) {
                    decisions.insert(label.to_string(), json!(rates));
                }
            }
        }

        // The origins whose queue was longest at some moment of the window.
        let mut longest: Vec<(&str, usize)> = Vec::new();
        for (origin, queued) in later.iter().flat_map(|s| s.queues.iter()) {
            match longest.iter_mut().find(|(o, _)| o == origin) {
                Some((_, most)) => *most = (*most).max(*queued),
                None => longest.push((origin, *queued)),
            }
        }
        longest.sort_by_key(|(_, most)| std::cmp::Reverse(*most));
        longest.truncate(QUEUES);
        let queues: Map<String, Value> = longest
            .iter()
            .map(|(origin, _)| {
                let series: Vec<usize> = later
                    .iter()
                    .map(|s| {
                        s.queues
                            .iter()
                            .find(|(o, _)| o == origin)
                            .map_or(0, |(_, q)| *q)
                    })
                    .collect();
                (origin.to_string(), json!(series))
            })
            .collect();

        json!({
            "every_seconds": EVERY.as_secs_f64(),
            "at": at,
            "decisions": decisions,
            "queues": queues,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at: f64, allowed: u64, queues: &[(&str, usize)]) -> Sample {
        Sample {
            at,
            totals: vec![("allowed", allowed), ("disallowed", 0)],
            queues: queues.iter().map(|(o, q)| (o.to_string(), *q)).collect(),
        }
    }

    #[test]
    fn rates_are_per_interval_and_queues_follow_the_longest() {
        let history = History::default();
        history.push(sample(100.0, 10, &[]));
        history.push(sample(102.0, 14, &[("http://a:80", 3)]));
        history.push(sample(104.0, 14, &[("http://b:80", 7), ("http://a:80", 1)]));
        let json = history.to_json();
        assert_eq!(json["at"], json!([102.0, 104.0]));
        assert_eq!(json["decisions"]["allowed"], json!([2.0, 0.0]));
        assert!(json["decisions"].get("disallowed").is_none());
        assert_eq!(json["queues"]["http://a:80"], json!([3, 1]));
        assert_eq!(json["queues"]["http://b:80"], json!([0, 7]));
    }

    #[test]
    fn the_ring_keeps_the_last_samples() {
        let history = History::default();
        for i in 0..KEEP + 10 {
            history.push(sample(i as f64, i as u64, &[]));
        }
        assert_eq!(history.samples.lock().expect("lock").len(), KEEP);
        let json = history.to_json();
        assert_eq!(json["at"].as_array().map(Vec::len), Some(KEEP - 1));
        assert_eq!(json["at"][0], json!(11.0));
    }
}
