//! The fleet backend's metrics (fleet mode only: they appear when the backend starts).

use std::sync::LazyLock;

use super::DownCause;
use prometheus::{
    register_histogram_vec, register_int_counter_vec, register_int_gauge, HistogramVec,
    IntCounterVec, IntGauge,
};

/// 1 while the fleet backend (Redis) answers, 0 while it does not (fleet mode only).
pub static FLEET_BACKEND_UP: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!(
        "robotsgate_fleet_backend_up",
        "1 while the fleet backend (Redis) answers, 0 while it is down or slow (fleet mode)."
    )
    .expect("metric registers once")
});

static FLEET_BACKEND_UNAVAILABLE: LazyLock<prometheus::IntGaugeVec> = LazyLock::new(|| {
    prometheus::register_int_gauge_vec!(
        "robotsgate_fleet_backend_unavailable",
        "1 on the cause that keeps the fleet backend down (connecting, unreachable, timeout, out_of_memory, eviction_policy, read_only, error), 0 on the others and while it is up (fleet mode).",
        &["cause"]
    )
    .expect("metric registers once")
});

/// Sets `robotsgate_fleet_backend_unavailable`: 1 on `cause` (none while up), 0 on the
/// others.
pub fn set_fleet_backend_unavailable(cause: Option<DownCause>) {
    for each in DownCause::ALL {
        FLEET_BACKEND_UNAVAILABLE
            .with_label_values(&[each.label()])
            .set(i64::from(Some(*each) == cause));
    }
}

/// Wake-ups this instance received on its own channel (a release made one of its
/// tickets the next in line).
pub static FLEET_WAKE_UPS: LazyLock<prometheus::IntCounter> = LazyLock::new(|| {
    prometheus::register_int_counter!(
        "robotsgate_fleet_wake_ups_total",
        "Wake-ups received on this instance's own fleet channel (one per release that made one of its tickets next)."
    )
    .expect("metric registers once")
});

static FLEET_COMMAND_DURATION: LazyLock<HistogramVec> = LazyLock::new(|| {
    register_histogram_vec!(
        "robotsgate_fleet_command_duration_seconds",
        "Round-trip time of fleet backend commands (acquire, release, robots_read, ...).",
        &["command"],
        vec![0.0002, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0]
    )
    .expect("metric registers once")
});

/// Times one fleet backend command.
pub fn observe_fleet_command(command: &str, seconds: f64) {
    FLEET_COMMAND_DURATION
        .with_label_values(&[command])
        .observe(seconds);
}

static FLEET_FALLBACKS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "robotsgate_fleet_fallbacks_total",
        "Requests and robots.txt fetches handled without the fleet backend while it was \
         unavailable, by what was done (refuse, local).",
        &["action"]
    )
    .expect("metric registers once")
});

/// Counts one request or fetch handled without the fleet backend.
pub fn record_fleet_fallback(action: &'static str) {
    FLEET_FALLBACKS.with_label_values(&[action]).inc();
}

/// Registers the fleet metrics whose labels are known, at zero (see [`super::init`]):
/// called when the fleet backend starts.
pub fn init_fleet() {
    LazyLock::force(&FLEET_WAKE_UPS);
    for action in ["refuse", "local"] {
        FLEET_FALLBACKS.with_label_values(&[action]);
    }
}
