//! robotsgate's own fetches from origins: robots.txt (by outcome, and how long each
//! took) and TDMRep's `/.well-known/tdmrep.json` (by outcome).

use std::sync::LazyLock;

use prometheus::{register_int_counter_vec, IntCounterVec};

use super::RobotsFetch;

/// Registers the fetch counters' label sets at zero, and the histogram.
pub(super) fn init() {
    for class in RobotsFetch::ALL {
        ROBOTS_FETCHES.with_label_values(&[class.label()]);
        TDMREP_FETCHES.with_label_values(&[class.label()]);
    }
    LazyLock::force(&ROBOTS_FETCH_DURATION);
}

/// `robotsgate_robots_fetch_duration_seconds`: time to fetch a robots.txt, redirects included.
static ROBOTS_FETCH_DURATION: LazyLock<prometheus::Histogram> = LazyLock::new(|| {
    prometheus::register_histogram!(
        "robotsgate_robots_fetch_duration_seconds",
        "Time to fetch a robots.txt, redirects included, whatever the outcome.",
        vec![0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0]
    )
    .expect("metric registers once")
});

/// `robotsgate_robots_fetches_total`: robots.txt fetches by outcome.
static ROBOTS_FETCHES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "robotsgate_robots_fetches_total",
        "robots.txt fetches by outcome (2xx, 3xx_exhausted, 4xx, 5xx, network, too_large).",
        &["outcome"]
    )
    .expect("metric registers once")
});

/// Counts one robots.txt fetch of `class` that took `took`.
pub fn record_robots_fetch(class: RobotsFetch, took: std::time::Duration) {
    ROBOTS_FETCH_DURATION.observe(took.as_secs_f64());
    ROBOTS_FETCHES.with_label_values(&[class.label()]).inc();
}

/// `robotsgate_tdmrep_fetches_total`: TDMRep file fetches by outcome.
static TDMREP_FETCHES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "robotsgate_tdmrep_fetches_total",
        "/.well-known/tdmrep.json fetches by outcome (as robotsgate_robots_fetches_total's).",
        &["outcome"]
    )
    .expect("metric registers once")
});

/// Counts one TDMRep file fetch of `class`.
pub fn record_tdmrep_fetch(class: RobotsFetch) {
    TDMREP_FETCHES.with_label_values(&[class.label()]).inc();
}
