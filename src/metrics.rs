//! Prometheus metrics, all prefixed `robotsgate_`, in base units (seconds, bytes).
//!
//! Registered once in the default registry; the admin listener serves them.

use std::sync::atomic::Ordering;
use std::sync::LazyLock;

use prometheus::{
    register_histogram_vec, register_int_counter_vec, register_int_gauge, HistogramVec,
    IntCounterVec, IntGauge,
};

use crate::store::RobotsStore;

/// What became of a request: the `decision` label of the request metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Allowed,
    Disallowed,
    RobotsUnreachable,
    RobotsTxtCached,
    EgressDenied,
    PacedRejected,
    UpstreamError,
    BadRequest,
}

impl Outcome {
    const ALL: [Outcome; 8] = [
        Outcome::Allowed,
        Outcome::Disallowed,
        Outcome::RobotsUnreachable,
        Outcome::RobotsTxtCached,
        Outcome::EgressDenied,
        Outcome::PacedRejected,
        Outcome::UpstreamError,
        Outcome::BadRequest,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Disallowed => "disallowed",
            Outcome::RobotsUnreachable => "robots_unreachable",
            Outcome::RobotsTxtCached => "robots_txt_cached",
            Outcome::EgressDenied => "egress_denied",
            Outcome::PacedRejected => "paced_rejected",
            Outcome::UpstreamError => "upstream_error",
            Outcome::BadRequest => "bad_request",
        }
    }
}

/// Per-outcome counter and histogram handles, resolved once (no label hashing per request).
static REQUEST_HANDLES: LazyLock<Vec<(prometheus::IntCounter, prometheus::Histogram)>> =
    LazyLock::new(|| {
        Outcome::ALL
            .iter()
            .map(|o| {
                (
                    REQUESTS.with_label_values(&[o.label()]),
                    REQUEST_DURATION.with_label_values(&[o.label()]),
                )
            })
            .collect()
    });

pub fn record_request(outcome: Outcome, seconds: f64) {
    if let Some((count, duration)) = REQUEST_HANDLES.get(outcome as usize) {
        count.inc();
        duration.observe(seconds);
    }
}

/// Requests by decision (see [`Outcome`]).
static REQUESTS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "robotsgate_requests_total",
        "Requests by robotsgate's decision.",
        &["decision"]
    )
    .expect("metric registers once")
});

static REQUEST_DURATION: LazyLock<HistogramVec> = LazyLock::new(|| {
    register_histogram_vec!(
        "robotsgate_request_duration_seconds",
        "Time from request to last response byte, by decision.",
        &["decision"],
        vec![
            0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            30.0
        ]
    )
    .expect("metric registers once")
});

pub static ROBOTS_FETCHES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "robotsgate_robots_fetches_total",
        "robots.txt fetches by outcome (2xx, 3xx_exhausted, 4xx, 5xx, network, too_large).",
        &["outcome"]
    )
    .expect("metric registers once")
});

static STORE_ORIGINS: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!(
        "robotsgate_robots_store_origins",
        "Origins whose robots.txt is held."
    )
    .expect("metric registers once")
});

static STORE_EVICTIONS: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!(
        "robotsgate_robots_store_evictions",
        "Origins evicted from the store since start (monotonic)."
    )
    .expect("metric registers once")
});

static SINGLE_FLIGHT_JOINS: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!(
        "robotsgate_robots_single_flight_joins",
        "Requests that waited for another request's robots.txt fetch instead of fetching (monotonic)."
    )
    .expect("metric registers once")
});

/// Copies the store's own counters into gauges just before a scrape.
pub fn update_store_gauges(store: &RobotsStore) {
    STORE_ORIGINS.set(store.len() as i64);
    STORE_EVICTIONS.set(store.stats.evictions.load(Ordering::Relaxed) as i64);
    SINGLE_FLIGHT_JOINS.set(store.stats.single_flight_joins.load(Ordering::Relaxed) as i64);
}

static PACING_WAIT: LazyLock<prometheus::Histogram> = LazyLock::new(|| {
    prometheus::register_histogram!(
        "robotsgate_pacing_wait_seconds",
        "Time allowed requests waited for their pacing slot.",
        vec![0.0, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0]
    )
    .expect("metric registers once")
});

static PACING_QUEUED: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!(
        "robotsgate_pacing_queued_requests",
        "Requests waiting for or holding a pacing slot."
    )
    .expect("metric registers once")
});

pub fn record_pacing_wait(seconds: f64) {
    PACING_WAIT.observe(seconds);
}

pub fn update_pacing_gauge(queued: usize) {
    PACING_QUEUED.set(queued as i64);
}

/// How a CONNECT was handled: the `mode` label of the tunnel metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TunnelMode {
    /// TLS terminated with a minted leaf; every request inside is decided.
    Intercepted,
    /// `tls.blind_tunnel`: host-level checks only.
    Blind,
}

impl TunnelMode {
    pub fn label(self) -> &'static str {
        match self {
            TunnelMode::Intercepted => "intercepted",
            TunnelMode::Blind => "blind",
        }
    }
}

static TUNNELS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "robotsgate_connect_tunnels_total",
        "CONNECT requests by mode (intercepted, blind) and outcome (established, refused, handshake_failed).",
        &["mode", "outcome"]
    )
    .expect("metric registers once")
});

pub fn record_tunnel(mode: TunnelMode, outcome: &'static str) {
    TUNNELS.with_label_values(&[mode.label(), outcome]).inc();
}

pub static TLS_LEAF_MINTS: LazyLock<prometheus::IntCounter> = LazyLock::new(|| {
    prometheus::register_int_counter!(
        "robotsgate_tls_leaf_mints_total",
        "Leaf certificates minted for intercepted hosts."
    )
    .expect("metric registers once")
});

pub static TLS_LEAF_CACHE_HITS: LazyLock<prometheus::IntCounter> = LazyLock::new(|| {
    prometheus::register_int_counter!(
        "robotsgate_tls_leaf_cache_hits_total",
        "TLS handshakes served a cached leaf certificate."
    )
    .expect("metric registers once")
});
